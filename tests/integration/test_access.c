/* SPDX-License-Identifier: Apache-2.0 */
/* test_access.c - allow_users and allow_groups grant access by uid, primary gid and supplementary
 * groups, and root and the daemon's own user read every checkpoint whatever the lists say (the
 * denials are in test_core.c). Needs root to take on other credentials. */
#include <grp.h>
#include <signal.h>

#include "fixture.h"

static struct harness H_USER; /* the same checkpoints, served by a daemon running as UID_WEIGHTD */

/* Groups and users every Debian base system has. */
#define UID_NOBODY 65534
#define GID_NOGROUP 65534
#define UID_DAEMON 1
#define GID_DAEMON 1
#define UID_WEIGHTD 2 /* bin: the user the second daemon runs as */
#define GID_WEIGHTD 2

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
	if (harness_init(&H_USER) < 0 || harness_write_config(&H_USER, NULL, sections) < 0 ||
	    harness_start_opts(
		    &H_USER, &(struct harness_opts){ .uid = UID_WEIGHTD, .gid = GID_WEIGHTD }) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_cleanup(&H_USER);
	harness_cleanup(&H);
	return 0;
}

/* What one checkpoint should answer a client with given credentials: 1 granted, 0 denied. */
struct expect {
	const char *checkpoint;
	int granted;
};

/* Is `name` in the list the daemon gives this client? */
static bool listed(const weightd_source_list *l, const char *name)
{
	for (size_t i = 0; i < l->count; i++)
		if (strcmp(l->sources[i].name, name) == 0)
			return true;
	return false;
}

/*
 * In a child with uid, gid and supplementary groups `groups[n]`, against the daemon of h: list,
 * describe and materialize each checkpoint, and require a grant (listed, described, read) or a
 * clear denial (not listed, refused with its name) as `ex` says. Exit status: 0, or the index
 * + 10 of the first checkpoint that answered otherwise.
 */
static void run_as_on(const struct harness *h, uid_t uid, gid_t gid, const gid_t *groups, size_t n,
		      const struct expect *ex, size_t n_ex)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_source_list *l = NULL;
		weightd_error err;

		if (setgroups(n, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
			_exit(2);
		if (weightd_connect(h->sock, "access", &c, &err) < 0 ||
		    weightd_list(c, &l, &err) < 0)
			_exit(3);
		for (size_t i = 0; i < n_ex; i++)
			if (listed(l, ex[i].checkpoint) != (ex[i].granted != 0)) {
				fprintf(stderr, "uid %d gid %d: %s is%s listed\n", (int)uid,
					(int)gid, ex[i].checkpoint, ex[i].granted ? " not" : "");
				_exit(10 + (int)i);
			}
		weightd_source_list_free(l);
		for (size_t i = 0; i < n_ex; i++) {
			weightd_description *d = NULL;
			weightd_inflight *f = NULL;
			weightd_weight *w = NULL;
			int r = weightd_materialize(c, ex[i].checkpoint, "model.norm.weight", NULL, &f,
						    &err);

			if (r == 0)
				r = weightd_finish(f, &w, &err);
			if (ex[i].granted ? r != 0 || !w || weightd_weight_nbytes(w) != 64 * 4 :
					    r != -WEIGHTD_E_UNKNOWN_SOURCE ||
						    !strstr(err.message, ex[i].checkpoint) ||
						    !strstr(err.message, "may read")) {
				fprintf(stderr, "uid %d gid %d: %s answered %d (%s)\n", (int)uid, (int)gid,
					ex[i].checkpoint, r, r ? err.message : "granted");
				_exit(10 + (int)i);
			}
			weightd_release(w);
			r = weightd_describe(c, ex[i].checkpoint, &d, &err);
			if (ex[i].granted ? r != 0 : r != -WEIGHTD_E_UNKNOWN_SOURCE) {
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

static void run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t n, const struct expect *ex,
		   size_t n_ex)
{
	run_as_on(&H, uid, gid, groups, n, ex, n_ex);
}

/* `weightctl preload CHECKPOINT` as uid and gid (no supplementary groups) against the daemon of
 * h: its exit status, its stdout and stderr in out. */
static int preload_as(const struct harness *h, uid_t uid, gid_t gid, const char *checkpoint,
		      char *out, size_t cap)
{
	struct harness_run_as as = { .uid = uid, .gid = gid, .with_stderr = true };
	char *argv[] = { (char *)harness_weightctl(), "--socket", (char *)h->sock, "preload",
			 (char *)checkpoint, NULL };

	return harness_run_with(argv, out, cap, &as);
}

/* Every checkpoint of the config: what root and the daemon's user read (all), what UID_NOBODY
 * with GID_NOGROUP reads (its name and its group), and what a uid in no list reads (nothing). */
static const struct expect every[] = {
	{ "by_user", 1 },	   { "by_uid_list", 1 }, { "by_primary", 1 },
	{ "by_supplementary", 1 }, { "either", 1 },	 { "root_only", 1 },
};
static const struct expect nobody[] = {
	{ "by_user", 1 },	   { "by_uid_list", 1 }, { "by_primary", 1 },
	{ "by_supplementary", 0 }, { "either", 0 },	 { "root_only", 0 },
};
static const struct expect outsider[] = {
	{ "by_user", 0 },	   { "by_uid_list", 0 }, { "by_primary", 0 },
	{ "by_supplementary", 0 }, { "either", 0 },	 { "root_only", 0 },
};

/* Preload every checkpoint of `ex` as uid and gid: granted ones preload, the others are refused
 * with their name and the permission words of the daemon. */
static void preload_each_as(const struct harness *h, uid_t uid, gid_t gid, const struct expect *ex,
			    size_t n_ex)
{
	for (size_t i = 0; i < n_ex; i++) {
		char out[4096];
		int r = preload_as(h, uid, gid, ex[i].checkpoint, out, sizeof(out));

		if (ex[i].granted ? r != 0 || !strstr(out, "preloaded 10 weights") :
				    r != 1 || !strstr(out, "that uid") ||
					    !strstr(out, "may read is served") ||
					    !strstr(out, ex[i].checkpoint)) {
			fprintf(stderr, "uid %u: preload %s exited %d: %s\n", (unsigned)uid,
				ex[i].checkpoint, r, out);
			fail();
		}
	}
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

/* Without a matching uid or group nothing is granted. */
static void no_match_no_access(void **state)
{
	static const struct expect ex[] = {
		{ "by_user", 0 }, { "by_primary", 0 }, { "by_supplementary", 0 },
		{ "either", 0 },  { "root_only", 0 },
	};

	(void)state;
	run_as(UID_DAEMON, GID_DAEMON, NULL, 0, ex, sizeof(ex) / sizeof(ex[0]));
	run_as(UID_NOBODY, GID_NOGROUP, NULL, 0, nobody, sizeof(nobody) / sizeof(nobody[0]));
	preload_each_as(&H, UID_NOBODY, GID_NOGROUP, nobody, sizeof(nobody) / sizeof(nobody[0]));
}

/* Root lists, describes, preloads and reads every checkpoint, those whose lists leave it out
 * (allow_users = nobody, allow_groups = audio or nogroup) too. */
static void root_reads_every_checkpoint(void **state)
{
	(void)state;
	run_as(0, 0, NULL, 0, every, sizeof(every) / sizeof(every[0]));
	preload_each_as(&H, 0, 0, every, sizeof(every) / sizeof(every[0]));
}

/* So does the user the daemon runs as, of a daemon not running as root; root still does, and
 * a uid the lists leave out still gets exactly the refusals it gets from a root daemon. */
static void daemon_user_reads_every_checkpoint(void **state)
{
	(void)state;
	run_as_on(&H_USER, UID_WEIGHTD, GID_WEIGHTD, NULL, 0, every,
		  sizeof(every) / sizeof(every[0]));
	preload_each_as(&H_USER, UID_WEIGHTD, GID_WEIGHTD, every, sizeof(every) / sizeof(every[0]));
	run_as_on(&H_USER, 0, 0, NULL, 0, every, sizeof(every) / sizeof(every[0]));
	run_as_on(&H_USER, UID_NOBODY, GID_NOGROUP, NULL, 0, nobody,
		  sizeof(nobody) / sizeof(nobody[0]));
	preload_each_as(&H_USER, UID_NOBODY, GID_NOGROUP, nobody,
			sizeof(nobody) / sizeof(nobody[0]));
	/* the daemon's user is another uid to the root daemon: its lists apply */
	run_as(UID_WEIGHTD, GID_WEIGHTD, NULL, 0, outsider, sizeof(outsider) / sizeof(outsider[0]));
}

/* A daemon that cannot give its socket to socket_group, since its user is not in the group,
 * does not start, and says so: the socket, the user, the group and the fix. */
static void socket_group_without_membership_names_the_fix(void **state)
{
	struct harness h;
	char want[512];
	int r;

	(void)state;
	assert_int_equal(harness_init(&h), 0);
	assert_int_equal(harness_write_config(&h, "socket_group = audio\n", NULL), 0);
	r = harness_start_opts(&h, &(struct harness_opts){ .uid = UID_WEIGHTD, .gid = GID_WEIGHTD });
	assert_int_not_equal(r, 0);
	snprintf(want, sizeof(want),
		 "setting up %s: cannot give it socket_group audio: weightd runs as user bin (uid "
		 "%d), which is not a member of audio; add it to the group (usermod -aG audio bin) "
		 "and restart weightd, or unset socket_group",
		 h.sock, UID_WEIGHTD);
	if (!harness_log_contains(&h, want)) {
		harness_dump_log(&h);
		fail_msg("no line: %s", want);
	}
	harness_cleanup(&h);
}

/* A client refused by the socket's mode is told the socket, its owner, group and mode, and the
 * group to join. */
static void socket_denial_names_the_group_to_join(void **state)
{
	struct harness h;
	pid_t pid;

	(void)state;
	assert_int_equal(harness_init(&h), 0);
	assert_int_equal(harness_write_config(&h, "socket_group = audio\nsocket_mode = 0660\n", NULL),
			 0);
	assert_int_equal(harness_start(&h), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_error err;
		char want[512];
		int r;

		if (setgroups(0, NULL) < 0 || setgid(GID_NOGROUP) < 0 || setuid(UID_NOBODY) < 0)
			_exit(2);
		r = weightd_connect(h.sock, "denied", &c, &err);
		snprintf(want, sizeof(want),
			 "cannot connect to weightd at %s: Permission denied (the socket is owned by "
			 "root:audio, mode 0660; this process runs as nobody, who is not in the group "
			 "audio: join it (usermod -aG audio nobody, then log in again))",
			 h.sock);
		if (r != -WEIGHTD_E_PERMISSION_DENIED || strcmp(err.message, want) != 0) {
			fprintf(stderr, "connect answered %d: %s\nwanted: %s\n", r,
				r ? err.message : "", want);
			_exit(3);
		}
		_exit(0);
	}
	it_wait_child_ok(pid);
	harness_cleanup(&h);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(allow_users_grants_the_named_uid),
	  cmocka_unit_test(allow_users_lists_every_name),
	  cmocka_unit_test(allow_groups_grants_the_primary_group),
	  cmocka_unit_test(allow_groups_grants_a_supplementary_group),
	  cmocka_unit_test(allow_groups_sees_groups_past_256), cmocka_unit_test(no_match_no_access),
	  cmocka_unit_test(root_reads_every_checkpoint),
	  cmocka_unit_test(daemon_user_reads_every_checkpoint),
	  cmocka_unit_test(socket_group_without_membership_names_the_fix),
	  cmocka_unit_test(socket_denial_names_the_group_to_join))
