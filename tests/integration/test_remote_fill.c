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
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#define BIG_BYTES (48ull << 20)

static struct wd_servers srv;
static char root[4096];

/* many.safetensors: 64 small tensors t0..t63 (a shard's worth of tiny ones). */
static int write_many(void)
{
	struct stw_tensor ts[64];
	char path[4200], names[64][8];

	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < 64; i++) {
		snprintf(names[i], sizeof(names[i]), "t%d", i);
		ts[i].name = names[i];
		ts[i].dtype = "U8";
		ts[i].ndim = 1;
		ts[i].shape[0] = 3000;
		ts[i].seed = (uint32_t)(100 + i);
	}
	snprintf(path, sizeof(path), "%s/many.safetensors", root);
	return stw_write(path, ts, 64, NULL, 0, NULL);
}

static int setup(void **state)
{
	const struct stw_tensor ts[] = {
		{ .name = "big", .dtype = "U8", .ndim = 1, .shape = { BIG_BYTES }, .seed = 1 },
		{ .name = "small", .dtype = "U8", .ndim = 1, .shape = { 4096 }, .seed = 2 },
	};

	(void)state;
	/* nginx serves what is in root when asked: many.safetensors may come after it starts */
	if (wd_servers_serve_tensors(&srv, root, sizeof(root), ts, 2, false) < 0 ||
	    write_many() < 0)
		return -1;
	return 0;
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

/* A daemon with "r", m.safetensors through the fault proxy, "local", the same file, and
 * "other", the same file from nginx itself (another server than the proxy). */
static void start_daemon(const char *extra)
{
	char sections[8400];

	snprintf(sections, sizeof(sections),
		 "[checkpoint:r]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n\n"
		 "[checkpoint:local]\npath = %s/m.safetensors\n\n"
		 "[checkpoint:other]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n\n"
		 "[checkpoint:many]\npath = http://127.0.0.1:%d/many.safetensors\nallow_http = yes\n",
		 srv.fault, root, srv.http, srv.fault);
	assert_int_equal(harness_init(&H), 0);
	it_start(&H, extra, sections);
}

/* Wait until the daemon can describe "r" and "other" (a remote checkpoint may be admitted
 * after READY). */
static void wait_admitted(weightd_client *c)
{
	static const char *const names[] = { "r", "other", "many" };
	weightd_description *d = NULL;
	weightd_error err;

	for (int i = 0; i < 3; i++) {
		int64_t until = it_now_ms() + 30000;

		while (weightd_describe(c, names[i], &d, &err) != 0) {
			if (it_now_ms() > until)
				fail_msg("checkpoint %s was not admitted: %s", names[i],
					 err.message);
			usleep(10000);
		}
		weightd_description_free(d);
	}
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

/* Has the child written its byte (its get is over)? */
static bool child_done(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/*
 * A hung store holds no worker hostage: with one worker, whose fill waits on a proxy that
 * stalls every answer for 8 s, the same uid's cold get of a local checkpoint, then of another
 * remote checkpoint on another server, are both answered while the hung get still waits (the
 * worker runs them as soon as it notices the stall); the hung get then ends with the right
 * bytes.
 */
static void test_a_hung_store_holds_no_worker(void **state)
{
	weightd_client *c;
	weightd_weight *wl, *wo;
	int pfd[2], status;
	int64_t t0, t_local, t_other;
	pid_t child;

	(void)state;
	NEED_SERVERS(&srv);
	start_daemon("workers = 1\n");
	c = it_connect(&H);
	wait_admitted(c);
	ctl("reset=1");
	ctl("fault=stall&n=1000&seconds=8");
	assert_int_equal(pipe(pfd), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		weightd_client *cc = it_connect(&H);
		weightd_weight *w = NULL;
		weightd_error err;
		int ok = it_get(cc, "r", "small", &w, &err) == 0 &&
			 it_pattern_mismatch(it_map(w), 4096, 2) == -1;
		if (write(pfd[1], "x", 1) != 1)
			_exit(4);
		_exit(ok ? 0 : 3);
	}
	close(pfd[1]);
	/* the fill has started: the proxy holds its request */
	for (int64_t until = it_now_ms() + 10000; proxy_requests() < 1; usleep(10000))
		assert_true(it_now_ms() < until);
	t0 = it_now_ms();
	wl = it_get_ok(c, "local", "small");
	t_local = it_now_ms() - t0;
	assert_false(child_done(pfd[0]));
	wo = it_get_ok(c, "other", "small");
	t_other = it_now_ms() - t0;
	assert_false(child_done(pfd[0]));
	printf("local get after %lld ms, other store's after %lld ms, the hung one still waiting\n",
	       (long long)t_local, (long long)t_other);
	assert_int_equal(it_pattern_mismatch(it_map(wl), 4096, 2), -1);
	assert_int_equal(it_pattern_mismatch(it_map(wo), 4096, 2), -1);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(pfd[0]);
	weightd_release(wl);
	weightd_release(wo);
	weightd_close(c);
	ctl("reset=1");
	harness_cleanup(&H);
}

/*
 * A unit of 64 small tensors of one object, fetched as a few coalesced requests of 64 KiB: when
 * the object is replaced between two of them, the unit fails with source-changed and no weight
 * of it is made (none is fetched again one by one either).
 */
static void test_an_object_replaced_between_coalesced_requests_serves_nothing(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;
	int requests;

	(void)state;
	NEED_SERVERS(&srv);
	start_daemon("remote_chunk = 64K\n");
	c = it_connect(&H);
	wait_admitted(c);
	ctl("reset=1");
	ctl("fault=swap&path=/many.safetensors&after=2");
	memset(&err, 0, sizeof(err));
	assert_true(it_unit_of_numbered(c, "many", "t", 64, true, &u, &err) < 0);
	assert_null(u);
	assert_int_equal(err.code, WEIGHTD_E_SOURCE_CHANGED);
	requests = proxy_requests();
	printf("%d requests for 64 tensors of 3000 bytes; %s\n", requests, err.message);
	/* 192 KB in 64 KiB requests: 4 at most, none of them again per tensor */
	assert_true(requests >= 2 && requests <= 4);
	st = it_status(c);
	assert_int_equal(st->weights, 0);
	weightd_status_free(st);
	ctl("reset=1");
	weightd_close(c);
	harness_cleanup(&H);
	assert_int_equal(write_many(), 0);
}

/*
 * A unit of 65 recipes over "many": s0..s63 the first half of t0..t63 (a shard, rank 0 of 2),
 * and c the concatenation of t0 and t1, which s0 and s1 read too. Bound, each slot checked
 * against the tensors' fill pattern.
 */
static void bind_recipes(weightd_client *c)
{
	weightd_selection *half;
	weightd_recipe *r;
	weightd_unit *u = NULL;
	weightd_error err;
	char slot[16], tensor[16];
	int in[2], rc;
	const uint8_t *p;

	assert_int_equal(weightd_selection_shard(0, 0, 2, &half, &err), 0);
	rc = weightd_unit_new(c, &u, &err);
	for (int i = 0; rc >= 0 && i < 64; i++) {
		snprintf(slot, sizeof(slot), "s%d", i);
		snprintf(tensor, sizeof(tensor), "t%d", i);
		rc = weightd_unit_slot(u, slot, NULL, NULL, 0, NULL, &err);
		if (rc >= 0)
			rc = weightd_unit_set_tensor(u, slot, "many", tensor, half, &err);
	}
	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	in[0] = weightd_recipe_source(r, "many", "t0", NULL, &err);
	in[1] = weightd_recipe_source(r, "many", "t1", NULL, &err);
	assert_true(in[0] >= 0 && in[1] >= 0);
	assert_true(weightd_recipe_concat(r, 0, in, 2, &err) >= 0);
	if (rc >= 0)
		rc = weightd_unit_slot(u, "c", NULL, NULL, 0, NULL, &err);
	if (rc >= 0)
		rc = weightd_unit_set_recipe(u, "c", r, &err);
	weightd_recipe_free(r);
	weightd_selection_free(half);
	if (it_unit_end(u, rc, true, &u, &err) < 0)
		fail_msg("the unit of recipes: %s", err.message);
	for (int i = 0; i < 64; i++) {
		snprintf(slot, sizeof(slot), "s%d", i);
		p = it_map((weightd_weight *)weightd_unit_weight(u, slot));
		assert_int_equal(weightd_weight_nbytes(weightd_unit_weight(u, slot)), 1500);
		assert_int_equal(it_pattern_mismatch(p, 1500, (unsigned)(100 + i)), -1);
	}
	p = it_map((weightd_weight *)weightd_unit_weight(u, "c"));
	assert_int_equal(weightd_weight_nbytes(weightd_unit_weight(u, "c")), 6000);
	assert_int_equal(it_pattern_mismatch(p, 3000, 100), -1);
	assert_int_equal(it_pattern_mismatch(p + 3000, 3000, 101), -1);
	weightd_unit_free(u);
}

/*
 * Recipes over a remote object fetch their inputs together, through the coalescer, before they
 * run: with remote_gap 0 (no gap bridged), the 65 recipes above make one request per run of
 * the file they read: t0 and t1 whole (the concat; the two shards that read half of each are
 * inside it, not fetched again) with the first half of t2 that follows them, then the first
 * half of t3..t63: 62 requests, 6000 + 62 x 1500 bytes. With max_temp smaller than those bytes, nothing is fetched ahead: the recipes read as
 * they go (through a thread's read-ahead window, to the object's end) and are as exact.
 */
static void test_recipes_fetch_their_inputs_together(void **state)
{
	weightd_client *c;
	uint64_t bytes;
	int requests;

	(void)state;
	NEED_SERVERS(&srv);
	start_daemon("remote_gap = 0\n");
	c = it_connect(&H);
	wait_admitted(c);
	ctl("reset=1");
	bind_recipes(c);
	requests = proxy_requests();
	bytes = wd_servers_proxied(srv.fault, NULL, NULL);
	printf("staged: %d requests, %llu bytes\n", requests, (unsigned long long)bytes);
	assert_int_equal(requests, 62);
	assert_int_equal(bytes, 6000 + 62 * 1500);
	assert_true(harness_log_contains(&H, "fetched the inputs of 65 recipe(s) together: 62 "
					     "ranges, 99000 bytes"));
	weightd_close(c);
	harness_cleanup(&H);

	start_daemon("remote_gap = 0\nmax_temp = 64K\n");
	c = it_connect(&H);
	wait_admitted(c);
	ctl("reset=1");
	bind_recipes(c);
	bytes = wd_servers_proxied(srv.fault, NULL, NULL);
	printf("read as they go: %d requests, %llu bytes\n", proxy_requests(),
	       (unsigned long long)bytes);
	assert_true(harness_log_contains(&H, "no room left in max_temp"));
	assert_false(harness_log_contains(&H, "recipe(s) together:"));
	assert_true(bytes > 6000 + 62 * 1500);
	ctl("reset=1");
	weightd_close(c);
	harness_cleanup(&H);
}

/*
 * A recipe whose input does not fit max_temp at once (48 MiB with max_temp 40M) is staged a
 * slice at a time: each 16 MiB chunk of its 96 MiB output, filled in parallel, fetches the
 * 8 MiB of input it converts, in 2 MiB requests over several connections. The store is asked
 * for every byte of the input exactly once, in 24 requests (reading as it goes, through 1 MiB
 * windows, would take 48), and the weight is the local file's cast.
 */
static void test_a_large_recipe_fetches_its_input_in_slices(void **state)
{
	weightd_client *c;
	weightd_weight *wr, *wl;
	int requests;
	uint64_t bytes;

	(void)state;
	NEED_SERVERS(&srv);
	start_daemon("workers = 2\nmax_temp = 40M\nbudget = 512M\n");
	c = it_connect(&H);
	wait_admitted(c);
	ctl("reset=1");
	wr = it_cast_ok(c, "r", "big", NULL, "F16");
	requests = proxy_requests();
	bytes = wd_servers_proxied(srv.fault, NULL, NULL);
	printf("a 48 MiB input in slices: %d requests, %llu bytes\n", requests,
	       (unsigned long long)bytes);
	assert_true(harness_log_contains(&H, "no room left in max_temp"));
	assert_true(harness_log_contains(&H, "fetched the inputs of bytes 16777216-33554432 of a "
					     "recipe together: 1 ranges, 8388608 bytes"));
	assert_int_equal(bytes, BIG_BYTES);
	assert_int_equal(requests, 24);
	wl = it_cast_ok(c, "local", "big", NULL, "F16");
	assert_int_equal(weightd_weight_nbytes(wr), 2 * BIG_BYTES);
	assert_memory_equal(weightd_weight_digest(wr), weightd_weight_digest(wl),
			    WEIGHTD_DIGEST_LEN);
	assert_memory_equal(it_map(wr), it_map(wl), 2 * BIG_BYTES);
	weightd_release(wr);
	weightd_release(wl);
	ctl("reset=1");
	weightd_close(c);
	harness_cleanup(&H);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_a_weight_arrives_in_parallel_ranges),
	  cmocka_unit_test(test_sigterm_ends_a_stalled_fill),
	  cmocka_unit_test(test_a_hung_store_holds_no_worker),
	  cmocka_unit_test(test_an_object_replaced_between_coalesced_requests_serves_nothing),
	  cmocka_unit_test(test_recipes_fetch_their_inputs_together),
	  cmocka_unit_test(test_a_large_recipe_fetches_its_input_in_slices))
