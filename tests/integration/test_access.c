/* SPDX-License-Identifier: Apache-2.0 */
/* test_access.c - allow_users and allow_groups grant access by uid, primary gid and supplementary
 * groups (the denials are in test_core.c). Needs root to take on other credentials. */
#include <grp.h>
#include <signal.h>

#include "itest.h"

static struct harness H;

/* Groups and users every Debian base system has. */
#define UID_NOBODY 65534
#define GID_NOGROUP 65534
#define UID_DAEMON 1
#define GID_DAEMON 1

static gid_t gid_audio;

static int setup(void **state)
{
	char sample[512], sections[4096];
	const struct group *gr = getgrnam("audio");

	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "test_access needs root to take on other credentials\n");
		return -1;
	}
	if (gr)
		gid_audio = gr->gr_gid; /* before the next lookup reuses *gr */
	if (!gr || !getgrnam("nogroup") || !getgrgid(GID_DAEMON)) {
		fprintf(stderr, "test_access needs the groups audio, nogroup and daemon\n");
		return -1;
	}
	if (harness_init(&H) < 0 ||
	    harness_sample(&H, "tiny.safetensors", sample, sizeof(sample)) < 0)
		return -1;
	chmod(sample, 0644);
	snprintf(sections, sizeof(sections),
		 "[checkpoint:by_user]\npath = %s\nallow_users = nobody\n\n"
		 "[checkpoint:by_uid_list]\npath = %s\nallow_users = root, daemon nobody\n\n"
		 "[checkpoint:by_primary]\npath = %s\nallow_groups = nogroup\n\n"
		 "[checkpoint:by_supplementary]\npath = %s\nallow_groups = audio\n\n"
		 "[checkpoint:either]\npath = %s\nallow_users = root\nallow_groups = audio\n\n"
		 "[checkpoint:root_only]\npath = %s\nallow_users = root\n",
		 sample, sample, sample, sample, sample, sample);
	if (harness_write_config(&H, NULL, sections) < 0 || harness_start(&H) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_cleanup(&H);
	return 0;
}

/* What one checkpoint should answer a client with given credentials: 1 granted, 0 denied. */
struct expect {
	const char *checkpoint;
	int granted;
};

/*
 * In a child with uid, gid and supplementary groups `groups[n]`: describe and materialize each
 * checkpoint, and require a grant or a clear denial as `ex` says. Exit status: 0, or the index
 * + 10 of the first checkpoint that answered otherwise.
 */
static void run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t n, const struct expect *ex,
		   size_t n_ex)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_error err;

		if (setgroups(n, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
			_exit(2);
		if (weightd_connect(H.sock, "access", &c, &err) < 0)
			_exit(3);
		for (size_t i = 0; i < n_ex; i++) {
			weightd_description *d = NULL;
			weightd_inflight *f = NULL;
			weightd_weight *w = NULL;
			int r = weightd_materialize(c, ex[i].checkpoint, "model.norm.weight", NULL, &f,
						    &err);

			if (r == 0)
				r = weightd_finish(f, &w, &err);
			if (ex[i].granted ? r != 0 || !w || weightd_weight_nbytes(w) != 64 * 4 :
					    r != -WEIGHTD_E_PERMISSION_DENIED ||
						    !strstr(err.message, ex[i].checkpoint)) {
				fprintf(stderr, "uid %d gid %d: %s answered %d (%s)\n", (int)uid, (int)gid,
					ex[i].checkpoint, r, r ? err.message : "granted");
				_exit(10 + (int)i);
			}
			weightd_release(w);
			r = weightd_describe(c, ex[i].checkpoint, &d, &err);
			if (ex[i].granted ? r != 0 : r != -WEIGHTD_E_PERMISSION_DENIED) {
				fprintf(stderr, "uid %d gid %d: describe %s answered %d\n", (int)uid,
					(int)gid, ex[i].checkpoint, r);
				_exit(10 + (int)i);
			}
			weightd_description_free(d);
		}
		weightd_close(c);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* nobody is named in allow_users: granted whatever its groups. */
static void allow_users_grants_the_named_uid(void **state)
{
	static const struct expect ex[] = {
		{ "by_user", 1 }, { "by_uid_list", 1 }, { "root_only", 0 },
	};

	(void)state;
	run_as(UID_NOBODY, GID_NOGROUP, NULL, 0, ex, sizeof(ex) / sizeof(ex[0]));
	/* the uid decides, not the group it runs with */
	run_as(UID_NOBODY, GID_DAEMON, NULL, 0, ex, sizeof(ex) / sizeof(ex[0]));
}

/* Every name of a list counts, however it is separated. */
static void allow_users_lists_every_name(void **state)
{
	static const struct expect ex[] = {
		{ "by_user", 0 }, { "by_uid_list", 1 }, { "root_only", 0 },
	};

	(void)state;
	run_as(UID_DAEMON, GID_DAEMON, NULL, 0, ex, sizeof(ex) / sizeof(ex[0]));
}

/* The primary gid counts for allow_groups. */
static void allow_groups_grants_the_primary_group(void **state)
{
	static const struct expect ex[] = {
		{ "by_primary", 1 }, { "by_supplementary", 0 }, { "either", 0 },
	};

	(void)state;
	run_as(UID_DAEMON, GID_NOGROUP, NULL, 0, ex, sizeof(ex) / sizeof(ex[0]));
}

/* A supplementary group counts for allow_groups, and either list grants when both are set. */
static void allow_groups_grants_a_supplementary_group(void **state)
{
	static const struct expect ex[] = {
		{ "by_primary", 0 }, { "by_supplementary", 1 }, { "either", 1 }, { "by_user", 0 },
	};
	gid_t groups[3] = { GID_DAEMON, gid_audio, 4 /* adm */ };

	(void)state;
	run_as(UID_DAEMON, GID_DAEMON, groups, 3, ex, sizeof(ex) / sizeof(ex[0]));
	/* the group the access comes from may be the last of several */
	groups[0] = 4;
	groups[1] = GID_DAEMON;
	groups[2] = gid_audio;
	run_as(UID_DAEMON, GID_DAEMON, groups, 3, ex, sizeof(ex) / sizeof(ex[0]));
}

/* A client in 1,000 supplementary groups, audio the last: every group is read (the first 256 were
 * once all that counted, and past 256 none did), so the grant comes through. */
static void allow_groups_sees_groups_past_256(void **state)
{
	static const struct expect ex[] = {
		{ "by_supplementary", 1 }, { "either", 1 }, { "by_primary", 0 },
	};
	static gid_t groups[1000];
	size_t n = 0;

	(void)state;
	for (gid_t g = 20000; n < 999; g++)
		if (g != gid_audio)
			groups[n++] = g;
	groups[n++] = gid_audio;
	run_as(UID_DAEMON, GID_DAEMON, groups, n, ex, sizeof(ex) / sizeof(ex[0]));
}

/* Without a matching uid or group nothing is granted; root is named where it is allowed. */
static void no_match_no_access(void **state)
{
	static const struct expect ex[] = {
		{ "by_user", 0 }, { "by_primary", 0 }, { "by_supplementary", 0 }, { "either", 0 },
		{ "root_only", 0 },
	};
	static const struct expect root[] = {
		{ "by_user", 0 }, { "by_uid_list", 1 }, { "either", 1 }, { "root_only", 1 },
	};

	(void)state;
	run_as(UID_DAEMON, GID_DAEMON, NULL, 0, ex, sizeof(ex) / sizeof(ex[0]));
	run_as(0, 0, NULL, 0, root, sizeof(root) / sizeof(root[0]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(allow_users_grants_the_named_uid),
		cmocka_unit_test(allow_users_lists_every_name),
		cmocka_unit_test(allow_groups_grants_the_primary_group),
		cmocka_unit_test(allow_groups_grants_a_supplementary_group),
		cmocka_unit_test(allow_groups_sees_groups_past_256),
		cmocka_unit_test(no_match_no_access),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
