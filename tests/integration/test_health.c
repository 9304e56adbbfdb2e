/* SPDX-License-Identifier: Apache-2.0 */
/* Health with meaning, against a real weightd and nginx behind the fault proxy of
 * tests/remote/servers.py: a remote checkpoint whose store is down at start fails, is retried by
 * itself with backoff (list, status and metrics say so) and is admitted once the store is up,
 * while `weightctl health --ready` flips from not ready to ready; a manual reload after such a
 * failure says the checkpoint was admitted, not that its files changed. */
#include <jansson.h>

#include "fixture.h"
#include "servers.h"

#define T_BYTES (1u << 20)

static char root[512]; /* what nginx serves */
static struct wd_servers srv;

static int setup(void **state)
{
	char why[512], path[600];

	(void)state;
	snprintf(root, sizeof(root), "/tmp/weightd-health.XXXXXX");
	if (!mkdtemp(root) || chmod(root, 0755) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/m.safetensors", root);
	it_fixture("safetensors %s --seed 4 --tensor t0:U8:%u --tensor t1:U8:%u", path, T_BYTES,
		   T_BYTES);
	if (wd_servers_start(root, false, &srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "the test servers did not start: %s\n", why);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_end(&srv, root);
	return 0;
}

/* Tell the fault proxy (in front of nginx) what to do. */
static void proxy(const char *query)
{
	char path[256], *out;

	snprintf(path, sizeof(path), "/__ctl?%s", query);
	out = wd_servers_get(srv.fault, path);
	assert_non_null(out);
	free(out);
}

/*
 * H serving "remote" (through the fault proxy, required) and "local" (a local file, preloaded),
 * with one retry per range and `extra` [daemon] lines; the store answers (`down`: every request
 * is answered 500 until the test says otherwise).
 */
static void start_remote(const char *extra, bool down)
{
	char local[600], daemon[400], sections[1400];

	proxy(down ? "reset=1&fault=500&n=1000000" : "reset=1");
	harness_path(&H, "local.safetensors", local, sizeof(local));
	it_fixture("safetensors %s --seed 8 --tensor l:U8:%u", local, T_BYTES);
	snprintf(daemon, sizeof(daemon), "remote_retries = 1\n%s", extra);
	snprintf(sections, sizeof(sections),
		 "[checkpoint:remote]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n"
		 "required = yes\n\n[checkpoint:local]\npath = %s\npreload = yes\n",
		 srv.fault, local);
	it_start(&H, daemon, sections);
}

/* start_remote with the store down: one retry per range fails an admission quickly. */
static void start_with_store_down(const char *extra)
{
	start_remote(extra, true);
}

/* Poll status until `name` is in `state` (at most a minute); the status then, or a failure. */
static weightd_status *wait_state(const char *name, const char *state)
{
	int64_t end = it_now_ms() + 60000;

	for (;;) {
		weightd_status *st = it_status_of(&H);
		const weightd_source_info *si = it_source(st, name);

		if (si && strcmp(si->state, state) == 0)
			return st;
		if (it_now_ms() > end)
			fail_msg("checkpoint %s is still %s, not %s: %s", name,
				 si ? si->state : "?", state, si ? si->error : "");
		weightd_status_free(st);
		usleep(50000);
	}
}

/* The health of `name` in st. */
static const weightd_source_health *health_of(const weightd_status *st, const char *name)
{
	const weightd_source_info *si = it_source(st, name);

	assert_non_null(si);
	return &st->source_health[si - st->sources];
}

/* weightctl health ARG, its stdout in out: its exit status. */
static int health(const char *arg, char *out, size_t cap)
{
	return it_ctl((uid_t)-1, out, cap, "--socket", H.sock, "health", arg, NULL);
}

/* The value of the sample `line` (a whole "name{labels}" or "name") in `weightctl metrics`, or
 * -1 when it is not there. */
static long long metric(const char *line)
{
	static char out[1 << 18];
	char *p = out;
	size_t n = strlen(line);

	assert_int_equal(it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, "metrics", NULL),
			 0);
	while ((p = strstr(p, line))) {
		if ((p == out || p[-1] == '\n') && p[n] == ' ')
			return atoll(p + n + 1);
		p += n;
	}
	return -1;
}

/* The store is down at start: the required checkpoint fails, the daemon is live but not ready,
 * and list, status and metrics show the failure and the retry to come. The store comes up: the
 * checkpoint is admitted by itself (no reload), and readiness flips to ready. */
static void test_store_down_then_up(void **state)
{
	char out[8192];
	weightd_status *st;
	const weightd_source_health *h;
	weightd_client *c;
	weightd_source_list *l;
	weightd_error err;
	int64_t t_up;

	(void)state;
	start_with_store_down("remote_admit_retry_max = 2s\n");
	st = wait_state("remote", "failed");
	weightd_status_free(st);
	weightd_status_free(wait_state("local", "ready"));
	/* the preloaded local checkpoint is resident: the remote one alone keeps it not ready */
	for (int64_t end = it_now_ms() + 60000;;) {
		st = it_status_of(&H);
		if (health_of(st, "local")->preloaded || it_now_ms() > end)
			break;
		weightd_status_free(st);
		usleep(50000);
	}
	assert_true(health_of(st, "local")->preloaded);
	assert_true(st->health_known);
	assert_false(st->ready);
	assert_non_null(strstr(st->not_ready, "checkpoint remote failed"));
	assert_null(strstr(st->not_ready, "local"));
	assert_true(st->admissions_failed >= 1);
	weightd_status_free(st);

	assert_int_equal(health("--live", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "live: weightd"));
	assert_int_equal(health("--ready", out, sizeof(out)), 1);
	assert_non_null(strstr(out, "not ready: checkpoint remote failed"));
	assert_int_equal(metric("weightd_ready"), 0);
	assert_int_equal(metric("weightd_source_healthy{source=\"remote\"}"), 0);
	assert_int_equal(metric("weightd_source_healthy{source=\"local\"}"), 1);
	assert_true(metric("weightd_admissions_failed_total") >= 1);

	/* list says how often it failed and when it is tried again */
	c = it_connect(&H);
	for (int64_t end = it_now_ms() + 60000;;) {
		const weightd_source_info *si = NULL;

		assert_int_equal(weightd_list(c, &l, &err), 0);
		for (size_t i = 0; i < l->count; i++)
			if (strcmp(l->sources[i].name, "remote") == 0)
				si = &l->sources[i];
		assert_non_null(si);
		h = &l->health[si - l->sources];
		if ((strcmp(si->state, "failed") == 0 && h->admit_failures >= 2 &&
		     h->retry_in_ms) ||
		    it_now_ms() > end)
			break;
		weightd_source_list_free(l);
		usleep(50000);
	}
	assert_true(h->required);
	assert_true(h->admit_failures >= 2); /* it was retried by itself, and failed again */
	assert_true(h->retry_in_ms > 0 && h->retry_in_ms <= 2000); /* the cap */
	weightd_source_list_free(l);
	weightd_close(c);

	proxy("reset=1"); /* the store is up */
	t_up = it_now_ms();
	st = wait_state("remote", "ready");
	/* within the backoff's cap and the admission itself: a minute would be a hang */
	fprintf(stderr, "admitted %lld ms after the store came up\n",
		(long long)(it_now_ms() - t_up));
	assert_true(st->admission_retries >= 2);
	assert_int_equal(health_of(st, "remote")->admit_failures, 0);
	assert_int_equal(health_of(st, "remote")->retry_in_ms, 0);
	weightd_status_free(st);
	assert_int_equal(health("--ready", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "ready: "));
	assert_null(strstr(out, "not ready"));
	assert_int_equal(metric("weightd_ready"), 1);
	assert_int_equal(metric("weightd_source_healthy{source=\"remote\"}"), 1);
	/* and it serves */
	c = it_connect(&H);
	weightd_release(it_get_ok(c, "remote", "t0"));
	weightd_close(c);
}

/* No retries by itself (remote_admit_retry_max = 0): the failed checkpoint stays failed until a
 * reload, whose report says it was admitted now, not that its files changed; a second reload has
 * nothing to say about it. */
static void test_reload_after_a_failed_admission_says_what_changed(void **state)
{
	char out[8192];
	weightd_status *st;

	(void)state;
	start_with_store_down("remote_admit_retry_max = 0\n");
	st = wait_state("remote", "failed");
	assert_int_equal(health_of(st, "remote")->retry_in_ms, 0); /* none scheduled */
	weightd_status_free(st);
	proxy("reset=1");
	assert_int_equal(it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, "reload", NULL),
			 0);
	assert_non_null(strstr(out, "checkpoint remote: admitted now, as generation 2"));
	assert_null(strstr(out, "files changed"));
	st = wait_state("remote", "ready");
	assert_int_equal(st->admission_retries, 0);
	weightd_status_free(st);
	assert_int_equal(it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, "reload", NULL),
			 0);
	assert_null(strstr(out, "remote"));
}

/* A fill held up by the store (the proxy stalls its answer): status shows the job in flight, its
 * bytes done of its total, and how long it has run, as a table and in --json. */
static void test_status_shows_each_job(void **state)
{
	static char out[1 << 16];
	json_error_t je;
	json_t *j = NULL, *job = NULL;
	int to, from;
	pid_t pid;

	(void)state;
	start_remote("", false);
	weightd_status_free(wait_state("remote", "ready"));
	proxy("fault=stall&n=4&seconds=4");
	pid = it_fork_piped(&to, &from);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_weight *w = NULL;
		weightd_error err;

		if (weightd_connect(H.sock, "filler", &c, &err) < 0 ||
		    it_get(c, "remote", "t0", &w, &err) < 0)
			_exit(3);
		weightd_release(w);
		weightd_close(c);
		_exit(0);
	}
	for (int64_t end = it_now_ms() + 30000; !job && it_now_ms() < end;) {
		assert_int_equal(it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, "--json",
					"status", NULL),
				 0);
		json_decref(j);
		j = json_loads(out, 0, &je);
		assert_non_null(j);
		job = json_array_get(json_object_get(j, "jobs"), 0);
		if (!job)
			usleep(20000);
	}
	assert_non_null(job);
	assert_non_null(strstr(json_string_value(json_object_get(job, "label")), "t0"));
	assert_int_equal(json_integer_value(json_object_get(job, "bytes")), T_BYTES);
	assert_true(json_integer_value(json_object_get(job, "done")) < T_BYTES);
	assert_non_null(json_object_get(job, "elapsed_ms"));
	assert_non_null(json_object_get(job, "rate"));
	json_decref(j);
	assert_int_equal(it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, "status", NULL),
			 0);
	if (!strstr(out, "JOB") || !strstr(out, "1.0 MiB"))
		fail_msg("status shows no job in flight (did the fill end first?):\n%s", out);
	it_wait_child_ok(pid);
	close(to);
	close(from);
}

/* A remote object replaced under a running daemon: the read that meets the new ETag fails with
 * source-changed, and what it says to do is a reload, never `watch = yes` (which the
 * configuration refuses for remote checkpoints). Last: it replaces the served file. */
static void test_a_changed_remote_object_says_reload(void **state)
{
	char path[600];
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	struct timespec ts[2] = { { time(NULL) + 1000, 0 }, { time(NULL) + 1000, 0 } };

	(void)state;
	start_remote("", false);
	weightd_status_free(wait_state("remote", "ready"));
	snprintf(path, sizeof(path), "%s/m.safetensors", root);
	it_fixture("safetensors %s --seed 9 --tensor t0:U8:%u --tensor t1:U8:%u", path, T_BYTES,
		   T_BYTES);
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0); /* a new ETag (mtime and size) */
	c = it_connect(&H);
	assert_int_equal(it_get(c, "remote", "t1", &w, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "weightctl reload"));
	assert_null(strstr(err.message, "watch"));
	weightd_close(c);
}

TEST_MAIN(setup, teardown, TEST_IN_DIR(test_store_down_then_up),
	  TEST_IN_DIR(test_reload_after_a_failed_admission_says_what_changed),
	  TEST_IN_DIR(test_status_shows_each_job),
	  TEST_IN_DIR(test_a_changed_remote_object_says_reload))
