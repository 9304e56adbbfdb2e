/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_remote_fill.c - a remote checkpoint's payload through a real weightd: a weight fetched in
 * parallel ranges (the server's log shows them) with the bytes of the file, progress counted in
 * bytes as they arrive, and SIGTERM ending a fill stalled on a hung server within the stop
 * timeout. nginx and the fault proxy of tests/remote/servers.py on loopback.
 */
#include "fixture.h"
#include "harness.h"
#include "servers.h"
#include "st_writer.h"

#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>

#define BIG_BYTES (48ull << 20)

static struct wd_servers srv;
static char root[4096];

static int setup(void **state)
{
	const struct stw_tensor ts[] = {
		{ .name = "big", .dtype = "U8", .ndim = 1, .shape = { BIG_BYTES }, .seed = 1 },
		{ .name = "small", .dtype = "U8", .ndim = 1, .shape = { 4096 }, .seed = 2 },
	};

	(void)state;
	return wd_servers_serve_tensors(&srv, root, sizeof(root), ts, 2, false);
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_end(&srv, root);
	return 0;
}

static void ctl(const char *q)
{
	char path[256];

	snprintf(path, sizeof(path), "/__ctl?%s", q);
	free(wd_servers_get(srv.fault, path));
}

/* Requests the fault proxy has seen since its last reset. */
static int proxy_requests(void)
{
	char *body = wd_servers_get(srv.fault, "/__stats");
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	int n = j ? (int)json_integer_value(json_object_get(j, "requests")) : -1;

	json_decref(j);
	free(body);
	return n;
}

/* A daemon with "r", m.safetensors through the fault proxy, and "local", the same file. */
static void start_daemon(const char *extra)
{
	char sections[8400];

	snprintf(sections, sizeof(sections),
		 "[checkpoint:r]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n\n"
		 "[checkpoint:local]\npath = %s/m.safetensors\n",
		 srv.fault, root);
	assert_int_equal(harness_init(&H), 0);
	it_start(&H, extra, sections);
}

/* Wait until the daemon can describe "r" (a remote checkpoint may be admitted after READY). */
static void wait_admitted(weightd_client *c)
{
	weightd_description *d = NULL;
	weightd_error err;

	for (int64_t until = it_now_ms() + 30000; it_now_ms() < until; usleep(10000))
		if (weightd_describe(c, "r", &d, &err) == 0) {
			weightd_description_free(d);
			return;
		}
	fail_msg("checkpoint r was not admitted: %s", err.message);
}

/*
 * The whole weight arrives in ranges of remote_chunk bytes, several at once, and the daemon
 * serves exactly the file's bytes, with the digest the local checkpoint's weight has.
 */
static void test_a_weight_arrives_in_parallel_ranges(void **state)
{
	weightd_client *c;
	weightd_weight *wr, *wl;

	(void)state;
	NEED_SERVERS(&srv);
	start_daemon("remote_concurrency = 8\nremote_chunk = 1M\n");
	c = it_connect(&H);
	wait_admitted(c);
	ctl("reset=1");
	wr = it_get_ok(c, "r", "big");
	assert_int_equal(proxy_requests(), (int)(BIG_BYTES >> 20));
	assert_int_equal(it_pattern_mismatch(it_map(wr), BIG_BYTES, 1), -1);
	wl = it_get_ok(c, "local", "big");
	assert_memory_equal(weightd_weight_digest(wr), weightd_weight_digest(wl),
			    WEIGHTD_DIGEST_LEN);
	weightd_release(wr);
	weightd_release(wl);
	weightd_close(c);
	/* (no fd count: the daemon keeps its connections to the server for the next fill) */
	weightd_status_free(it_wait_quiet(&H, 0, 0, 10000));
	harness_cleanup(&H);
}

/*
 * SIGTERM while a worker waits on a server that stalls every answer: the transfers are stopped,
 * so the daemon exits at once, well within its stop timeout (it would otherwise wait out the
 * grace period for the worker), and the client waiting for the weight hears it is gone.
 */
static void test_sigterm_ends_a_stalled_fill(void **state)
{
	weightd_client *c;
	pid_t child;
	int64_t t0, waited;
	int status;

	(void)state;
	NEED_SERVERS(&srv);
	start_daemon("remote_concurrency = 4\nremote_chunk = 4M\n");
	c = it_connect(&H);
	wait_admitted(c);
	weightd_close(c);
	ctl("reset=1");
	ctl("fault=stall&n=1000&seconds=60");
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		weightd_client *cc = it_connect(&H);
		weightd_weight *w = NULL;
		weightd_error err;
		_exit(it_get(cc, "r", "big", &w, &err) == 0 ? 0 : 3);
	}
	/* the fill has started: the proxy holds its requests */
	for (int64_t until = it_now_ms() + 10000; proxy_requests() < 1; usleep(10000))
		assert_true(it_now_ms() < until);
	t0 = it_now_ms();
	assert_int_equal(kill(H.pid, SIGTERM), 0);
	assert_int_equal(waitpid(H.pid, &status, 0), H.pid);
	waited = it_now_ms() - t0;
	H.pid = 0;
	printf("weightd exited %lld ms after SIGTERM\n", (long long)waited);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* the grace period for running work is 3 s: stopped transfers come back long before */
	assert_true(waited < 1500);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 3);
	ctl("reset=1");
	harness_cleanup(&H);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_a_weight_arrives_in_parallel_ranges),
	  cmocka_unit_test(test_sigterm_ends_a_stalled_fill))
