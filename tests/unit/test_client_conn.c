/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_conn.c - libweightd's connection against a fake weightd: hello, requests matched
 * by id in any order, fd ownership, dup/share/release references, disconnects, threads, events. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_weightd.h"
#include "weightd/client.h"

/* ---- the fake's behaviour ------------------------------------------------------------- */

/*
 * The bytes the fake serves for a tensor name: a pattern the test recomputes on its own
 * (weightd_tensor_bytes), 16 + (hash % 48) bytes long so sizes differ between tensors.
 */
static size_t pattern(const char *name, uint8_t *out)
{
	uint32_t h = 2166136261u;
	size_t n;

	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	n = 16 + h % 48;
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(h >> (i % 4 * 8)) ^ (uint8_t)(i * 7);
	return n;
}

static const char *req_tensor(const Weightd__Request *req)
{
	return req->materialize->entries[0]->recipe->nodes[0]->tensor;
}

/* Answer a single materialization: handle `handle`, the tensor's pattern as U8. */
static void reply_weight(struct fake *f, const Weightd__Request *req, uint64_t handle)
{
	struct fake_packed pk;
	uint8_t data[64];
	size_t n = pattern(req_tensor(req), data);
	uint64_t shape[1] = { n }, size = n;
	int fd = fake_memfd(data, n);

	fake_packed_init(&pk);
	fake_packed_add(&pk, handle, "U8", shape, 1, data, n, 0, 0);
	fake_reply_packed(f, req, &pk, &size, &fd, 1, 0);
}

static void send_event(struct fake *f, const char *ck, uint64_t gen)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Event ev = WEIGHTD__EVENT__INIT;

	ev.checkpoint = (char *)ck;
	ev.generation = gen;
	ev.what = (char *)"generation";
	resp.id = 0;
	resp.body_case = WEIGHTD__RESPONSE__BODY_EVENT;
	resp.event = &ev;
	fake_reply(f, &resp);
}

/* Immediate answers: every materialization gets handle 100 + (its request id). */
static void h_immediate(struct fake *f, const Weightd__Request *req)
{
	if (req->body_case == WEIGHTD__REQUEST__BODY_MATERIALIZE)
		reply_weight(f, req, 100 + req->id);
	else
		fake_reply_empty(f, req);
}

/* Holds materializations until three are waiting, then answers them newest first. */
struct hold {
	const Weightd__Request *held[3];
	int n;
};

static void h_reverse(struct fake *f, const Weightd__Request *req)
{
	struct hold *h = f->ctx;

	if (req->body_case != WEIGHTD__REQUEST__BODY_MATERIALIZE) {
		fake_reply_empty(f, req);
		return;
	}
	h->held[h->n++] = req;
	if (h->n < 3)
		return;
	for (int i = 2; i >= 0; i--)
		reply_weight(f, h->held[i], 100 + h->held[i]->id);
	h->n = 0;
}

static void connect_ok(struct fake *f, weightd_client **c)
{
	weightd_error err;
	int r = weightd_connect(f->path, "test", c, &err);

	if (r != 0)
		fail_msg("connect: %s", err.message);
}

static void check_bytes(weightd_weight *w, const char *tensor)
{
	uint8_t want[64];
	size_t n = pattern(tensor, want);
	const void *p = NULL;
	weightd_error err;

	assert_int_equal(weightd_weight_nbytes(w), n);
	assert_int_equal(weightd_weight_map(w, &p, &err), 0);
	assert_memory_equal(p, want, n);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_hello_and_server_info(void **state)
{
	struct fake *f = fake_start(h_immediate, NULL);
	const weightd_server_info *si;
	const Weightd__Request *hello;
	weightd_client *c;

	connect_ok(f, &c);
	si = weightd_server(c);
	assert_string_equal(si->server_version, "fake-1");
	assert_string_equal(si->instance, "fakeinst");
	assert_int_equal(si->max_pending_requests, 64);
	assert_int_equal(si->max_client_weights, 77);
	assert_int_equal(si->max_client_bytes, 123456789);
	hello = fake_nth(f, WEIGHTD__REQUEST__BODY_HELLO, 0);
	assert_non_null(hello);
	/* oldest first, where a daemon from before ranges looks */
	assert_int_equal(hello->hello->protocol_version, WEIGHTD_PROTOCOL_MIN_VERSION);
	assert_int_equal(hello->hello->max_protocol_version, WEIGHTD_PROTOCOL_VERSION);
	assert_string_equal(hello->hello->client_name, "test");
	assert_int_equal(si->protocol_version, 3);
	assert_int_equal(si->min_protocol_version, 1);   /* the fake's range: 1 to 3 */
	assert_int_equal(si->max_protocol_version, 3);
	assert_true(weightd_client_fd(c) >= 0);
	weightd_close(c);
	fake_stop(f);
}

static void test_version_mismatch_refused(void **state)
{
	struct fake *f = fake_start(h_immediate, NULL);
	weightd_client *c = (weightd_client *)0x1;
	weightd_error err;

	/* a daemon that picks a version outside what this library speaks */
	f->hello_version = WEIGHTD_PROTOCOL_VERSION + 1;
	assert_int_equal(weightd_connect(f->path, "test", &c, &err), -WEIGHTD_E_UNSUPPORTED_VERSION);
	assert_ptr_equal(c, (weightd_client *)0x1);   /* untouched on failure */
	assert_int_equal(err.code, WEIGHTD_E_UNSUPPORTED_VERSION);
	{
		char want[160];

		snprintf(want, sizeof(want), "answered with protocol version %d (it speaks 1 to %d); "
			 "this libweightd", WEIGHTD_PROTOCOL_VERSION + 1, WEIGHTD_PROTOCOL_VERSION + 1);
		if (!strstr(err.message, want))
			fail_msg("message: %s", err.message);
		snprintf(want, sizeof(want), "speaks %d to %d", WEIGHTD_PROTOCOL_MIN_VERSION,
			 WEIGHTD_PROTOCOL_VERSION);
		assert_non_null(strstr(err.message, want));
	}
	f->hello_version = 0;
	assert_int_equal(weightd_connect(f->path, "test", &c, &err), -WEIGHTD_E_UNSUPPORTED_VERSION);
	/* a daemon from before packed segments, speaking version 1 only */
	f->hello_version = 1;
	assert_int_equal(weightd_connect(f->path, "test", &c, &err), -WEIGHTD_E_UNSUPPORTED_VERSION);
	/* nor one that answers a unit one WeightInfo per output, version 2 at most */
	f->hello_version = 2;
	assert_int_equal(weightd_connect(f->path, "test", &c, &err), -WEIGHTD_E_UNSUPPORTED_VERSION);
	fake_stop(f);
}

static void h_silent(struct fake *f, const Weightd__Request *req)
{
	(void)f;
	(void)req;
}

static void test_connect_gives_up_on_a_silent_peer(void **state)
{
	struct fake *f = fake_start(h_silent, NULL);
	weightd_client *c = NULL;
	weightd_error err;
	int wfds, before;

	f->hello_too = true;   /* the handler gets Hello and never answers */
	before = fake_count_fds(&wfds);
	setenv("WEIGHTD_HELLO_TIMEOUT_MS", "200", 1);
	assert_int_equal(weightd_connect(f->path, "t", &c, &err), -WEIGHTD_E_DISCONNECTED);
	unsetenv("WEIGHTD_HELLO_TIMEOUT_MS");
	assert_null(c);
	assert_non_null(strstr(err.message, "did not answer hello within 200 ms"));
	fake_stop(f);
	assert_int_equal(fake_count_fds(&wfds), before - 1);   /* the fake's listener is gone */
}

static void test_connect_nothing_listening(void **state)
{
	weightd_client *c = NULL;
	weightd_error err;

	setenv("WEIGHTD_SOCKET", "/tmp/wd-no-such-dir/none.sock", 1);
	assert_int_equal(weightd_connect(NULL, "t", &c, &err), -WEIGHTD_E_DISCONNECTED);
	assert_non_null(strstr(err.message, "/tmp/wd-no-such-dir/none.sock"));
	assert_string_equal(weightd_code_name(err.code), "disconnected");
	unsetenv("WEIGHTD_SOCKET");
}

static void test_replies_matched_out_of_order(void **state)
{
	struct hold h = { 0 };
	struct fake *f = fake_start(h_reverse, &h);
	static const char *const names[3] = { "alpha", "beta", "gamma" };
	weightd_inflight *fl[3];
	const weightd_weight *borrowed = NULL, *b = NULL;
	weightd_weight *w[3];
	weightd_client *c;
	weightd_error err;

	connect_ok(f, &c);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(weightd_materialize(c, "ck", names[i], NULL, &fl[i], &err), 0);
		if (i == 0) {
			/* the fake holds every answer until the third request: nothing yet */
			assert_int_equal(weightd_borrow(fl[0], &borrowed, &err), 0);
			assert_null(borrowed);
		}
	}
	/* borrow polls without blocking until the first request's answer is in */
	for (int i = 0; i < 500 && !b; i++) {
		assert_int_equal(weightd_borrow(fl[0], &b, &err), 0);
		if (!b)
			fake_sleep_ms(10);
	}
	assert_non_null(b);
	assert_string_equal(weightd_weight_name(b), "alpha");
	for (int i = 2; i >= 0; i--) {
		assert_int_equal(weightd_finish(fl[i], &w[i], &err), 0);
		assert_string_equal(weightd_weight_name(w[i]), names[i]);
		check_bytes(w[i], names[i]);
	}
	assert_ptr_equal(w[0], b);   /* finish hands over the very weight borrow showed */
	/* each request's reply carried the handle derived from that request's own id */
	for (int i = 0; i < 3; i++)
		assert_int_equal(weightd_weight_handle(w[i]),
				 100 + fake_nth(f, WEIGHTD__REQUEST__BODY_MATERIALIZE, (size_t)i)->id);
	for (int i = 0; i < 3; i++)
		weightd_release(w[i]);
	weightd_close(c);
	fake_stop(f);
}

static void test_fd_owned_and_released(void **state)
{
	struct fake *f = fake_start(h_immediate, NULL);
	weightd_source_list *l;
	weightd_inflight *fl;
	weightd_weight *w;
	weightd_client *c;
	weightd_error err;
	uint64_t rel[8];
	int fds_before, wfds, flags;

	connect_ok(f, &c);
	fake_settle(f);
	fds_before = fake_count_fds(&wfds);
	assert_int_equal(wfds, 0);
	assert_int_equal(weightd_materialize(c, "ck", "t", NULL, &fl, &err), 0);
	assert_int_equal(weightd_finish(fl, &w, &err), 0);
	check_bytes(w, "t");
	fake_settle(f);
	assert_int_equal(fake_count_fds(&wfds), fds_before + 1);
	assert_int_equal(wfds, 1);
	flags = fcntl(weightd_weight_fd(w), F_GETFD);
	assert_true(flags & FD_CLOEXEC);
	assert_int_equal(fcntl(weightd_weight_fd(w), F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_int_equal(fake_count_maps(), 1);

	weightd_release(w);
	assert_int_equal(fake_count_fds(&wfds), fds_before);
	assert_int_equal(wfds, 0);
	assert_int_equal(fake_count_maps(), 0);
	/* a round trip after the release: the fake has seen it by the time this answers */
	assert_int_equal(weightd_list(c, &l, &err), 0);
	weightd_source_list_free(l);
	assert_int_equal(fake_released(f, rel, 8), 1);
	assert_int_equal(rel[0], 100 + fake_nth(f, WEIGHTD__REQUEST__BODY_MATERIALIZE, 0)->id);
	weightd_close(c);
	fake_stop(f);
}

/* share: the daemon hands another fd (new reference); answered here with the same handle. */
static void h_share(struct fake *f, const Weightd__Request *req)
{
	if (req->body_case == WEIGHTD__REQUEST__BODY_SHARE) {
		Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
		Weightd__ShareReply sr = WEIGHTD__SHARE_REPLY__INIT;
		struct fake_wi w;
		uint8_t data[64];
		size_t n = pattern("t", data);
		uint64_t shape[1] = { n };
		int fd = fake_memfd(data, n);

		fake_wi_fill(&w, "t", req->share->handle, "U8", shape, 1, data, n, 0, NULL);
		sr.weight = &w.wi;
		resp.id = req->id;
		resp.body_case = WEIGHTD__RESPONSE__BODY_SHARE;
		resp.share = &sr;
		fake_reply_fds(f, &resp, &fd, 1);
		close(fd);
		return;
	}
	if (req->body_case == WEIGHTD__REQUEST__BODY_MATERIALIZE)
		reply_weight(f, req, 55);
	else
		fake_reply_empty(f, req);
}

static size_t releases_after_round_trip(struct fake *f, weightd_client *c, uint64_t *rel)
{
	weightd_source_list *l;
	weightd_error err;

	assert_int_equal(weightd_list(c, &l, &err), 0);
	weightd_source_list_free(l);
	return fake_released(f, rel, 16);
}

static void test_dup_shares_reference_share_takes_new(void **state)
{
	struct fake *f = fake_start(h_share, NULL);
	weightd_weight *w, *d, *s;
	weightd_inflight *fl;
	weightd_client *c;
	weightd_error err;
	uint64_t rel[16];
	int wfds;

	connect_ok(f, &c);
	assert_int_equal(weightd_materialize(c, "ck", "t", NULL, &fl, &err), 0);
	assert_int_equal(weightd_finish(fl, &w, &err), 0);

	/* dup: the same segment (no new fd, no request), one reference between the two */
	assert_int_equal(weightd_weight_dup(w, &d, &err), 0);
	assert_int_equal(weightd_weight_fd(d), weightd_weight_fd(w));
	fake_settle(f);   /* the fake has closed its own copy */
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 1);
	assert_int_equal(weightd_weight_handle(d), 55);
	check_bytes(d, "t");
	weightd_release(w);
	assert_int_equal(releases_after_round_trip(f, c, rel), 0);   /* d still holds it */
	check_bytes(d, "t");

	/* share: a new reference from the daemon, released on its own */
	assert_int_equal(weightd_share(d, &s, &err), 0);
	assert_int_equal(fake_count(f, WEIGHTD__REQUEST__BODY_SHARE), 1);
	assert_int_equal(fake_nth(f, WEIGHTD__REQUEST__BODY_SHARE, 0)->share->handle, 55);
	check_bytes(s, "t");
	weightd_release(d);
	assert_int_equal(releases_after_round_trip(f, c, rel), 1);
	assert_int_equal(rel[0], 55);
	weightd_release(s);
	assert_int_equal(releases_after_round_trip(f, c, rel), 2);
	assert_int_equal(rel[1], 55);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 0);
	assert_int_equal(fake_count_maps(), 0);
	weightd_close(c);
	fake_stop(f);
}

/* Answers "a"; hangs up when "b" is asked for. */
static void h_hangup_on_b(struct fake *f, const Weightd__Request *req)
{
	if (req->body_case == WEIGHTD__REQUEST__BODY_MATERIALIZE &&
	    strcmp(req_tensor(req), "b") == 0)
		fake_disconnect(f);
	else if (req->body_case == WEIGHTD__REQUEST__BODY_MATERIALIZE &&
		 strcmp(req_tensor(req), "hold") == 0)
		;   /* never answered */
	else
		h_immediate(f, req);
}

struct waiter {
	weightd_inflight *fl;
	int rc;
	weightd_error err;
};

static void *finish_thread(void *arg)
{
	struct waiter *wt = arg;
	weightd_weight *w = NULL;

	wt->rc = weightd_finish(wt->fl, &w, &wt->err);
	weightd_release(w);
	return NULL;
}

/* With reconnection off (WEIGHTD_RECONNECT=0: the behaviour before it, which an engine may still
 * ask for), a connection the daemon dropped fails what waits and every later call. With it on, a
 * later call connects again: tests/integration/test_restart_holds.c. */
static void test_disconnect_fails_pending_and_later_calls(void **state)
{
	struct fake *f = fake_start(h_hangup_on_b, NULL);
	struct waiter wt = { 0 };
	weightd_inflight *fa, *fb, *fc;
	weightd_source_list *l;
	weightd_weight *a, *b = NULL;
	weightd_client *c;
	weightd_error err;
	const void *pa;
	pthread_t th;
	uint8_t want[64];
	size_t n = pattern("a", want);

	setenv("WEIGHTD_RECONNECT", "0", 1);
	connect_ok(f, &c);
	unsetenv("WEIGHTD_RECONNECT");
	assert_int_equal(weightd_materialize(c, "ck", "a", NULL, &fa, &err), 0);
	assert_int_equal(weightd_finish(fa, &a, &err), 0);
	assert_int_equal(weightd_weight_map(a, &pa, &err), 0);

	/* one request waited for on another thread, one here; then the daemon goes away */
	assert_int_equal(weightd_materialize(c, "ck", "hold", NULL, &wt.fl, &err), 0);
	assert_int_equal(pthread_create(&th, NULL, finish_thread, &wt), 0);
	assert_int_equal(weightd_materialize(c, "ck", "b", NULL, &fb, &err), 0);
	assert_int_equal(weightd_finish(fb, &b, &err), -WEIGHTD_E_DISCONNECTED);
	assert_null(b);
	assert_int_equal(err.code, WEIGHTD_E_DISCONNECTED);
	assert_non_null(strstr(err.message, f->path));
	pthread_join(th, NULL);
	assert_int_equal(wt.rc, -WEIGHTD_E_DISCONNECTED);
	assert_int_equal(wt.err.code, WEIGHTD_E_DISCONNECTED);

	/* every later call says so too */
	assert_int_equal(weightd_list(c, &l, &err), -WEIGHTD_E_DISCONNECTED);
	assert_int_equal(weightd_materialize(c, "ck", "a", NULL, &fc, &err), -WEIGHTD_E_DISCONNECTED);
	assert_int_equal(err.code, WEIGHTD_E_DISCONNECTED);

	/* the weight mapped before stays valid */
	assert_memory_equal(pa, want, n);
	weightd_release(a);
	weightd_close(c);
	fake_stop(f);
}

static void h_error(struct fake *f, const Weightd__Request *req)
{
	if (req->body_case == WEIGHTD__REQUEST__BODY_MATERIALIZE)
		fake_reply_error(f, req->id, WEIGHTD_E_UNKNOWN_TENSOR, "", 0,
				 "checkpoint \"ck\" has no tensor \"tn\"");
	else
		fake_reply_empty(f, req);
}

static void test_daemon_error_fills_every_field(void **state)
{
	struct fake *f = fake_start(h_error, NULL);
	weightd_inflight *fl;
	weightd_weight *w = (weightd_weight *)0x1;
	weightd_client *c;
	weightd_error err;

	connect_ok(f, &c);
	assert_int_equal(weightd_materialize(c, "ck", "tn", NULL, &fl, &err), 0);
	assert_int_equal(weightd_finish(fl, &w, &err), -WEIGHTD_E_UNKNOWN_TENSOR);
	assert_ptr_equal(w, (weightd_weight *)0x1);
	assert_int_equal(err.code, WEIGHTD_E_UNKNOWN_TENSOR);
	assert_string_equal(err.message, "checkpoint \"ck\" has no tensor \"tn\"");
	assert_string_equal(err.checkpoint, "ck");
	assert_string_equal(err.tensor, "tn");
	assert_int_equal(err.axis, 1);
	assert_int_equal(err.expected, 7);
	assert_int_equal(err.actual, 9);
	/* the connection is fine afterwards */
	assert_int_equal(weightd_materialize(c, "ck", "tn", NULL, &fl, &err), 0);
	weightd_inflight_free(fl);
	weightd_close(c);
	fake_stop(f);
}

/* An abandoned request's weight is released when it arrives. */
static void h_late(struct fake *f, const Weightd__Request *req)
{
	if (req->body_case == WEIGHTD__REQUEST__BODY_MATERIALIZE)
		reply_weight(f, req, 9);
	else
		fake_reply_empty(f, req);
}

static void test_abandoned_request_releases_its_weight(void **state)
{
	struct fake *f = fake_start(h_late, NULL);
	weightd_inflight *fl;
	weightd_client *c;
	weightd_error err;
	uint64_t rel[16];
	int wfds;

	connect_ok(f, &c);
	assert_int_equal(weightd_materialize(c, "ck", "t", NULL, &fl, &err), 0);
	weightd_inflight_free(fl);
	/* the next round trip reads the orphan's reply (its fd is closed, its reference let go);
	 * the one after it proves the release reached the daemon */
	releases_after_round_trip(f, c, rel);
	assert_int_equal(releases_after_round_trip(f, c, rel), 1);
	assert_int_equal(rel[0], 9);
	fake_settle(f);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 0);
	weightd_close(c);
	fake_stop(f);
}

static void test_pending_limit(void **state)
{
	struct fake *f = fake_start(h_silent, NULL);
	weightd_inflight *fl[3];
	weightd_client *c;
	weightd_error err;

	f->max_pending = 2;
	connect_ok(f, &c);
	assert_int_equal(weightd_materialize(c, "ck", "a", NULL, &fl[0], &err), 0);
	assert_int_equal(weightd_materialize(c, "ck", "b", NULL, &fl[1], &err), 0);
	assert_int_equal(weightd_materialize(c, "ck", "c", NULL, &fl[2], &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "limit is 2"));
	weightd_inflight_free(fl[0]);
	weightd_inflight_free(fl[1]);
	weightd_close(c);
	fake_stop(f);
}

/* Closing with requests in flight: they fail; their handles can still be freed. */
static void test_close_with_inflight(void **state)
{
	struct fake *f = fake_start(h_silent, NULL);
	weightd_inflight *fl;
	weightd_client *c;
	weightd_error err;

	connect_ok(f, &c);
	assert_int_equal(weightd_materialize(c, "ck", "a", NULL, &fl, &err), 0);
	weightd_close(c);
	weightd_inflight_free(fl);
	fake_stop(f);
}

#define THREADS 4
#define PER_THREAD 40

struct worker {
	weightd_client *c;
	int id;
	int ok;
};

static void *worker_main(void *arg)
{
	struct worker *wk = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		char name[32], name2[32];
		weightd_inflight *f1, *f2;
		weightd_weight *w1 = NULL, *w2 = NULL;
		uint8_t want[64];
		const void *p;
		weightd_error err;
		size_t n;

		/* two in flight per thread, finished in the opposite order */
		snprintf(name, sizeof(name), "t%d.%d", wk->id, i);
		snprintf(name2, sizeof(name2), "u%d.%d", wk->id, i);
		if (weightd_materialize(wk->c, "ck", name, NULL, &f1, &err) < 0 ||
		    weightd_materialize(wk->c, "ck", name2, NULL, &f2, &err) < 0 ||
		    weightd_finish(f2, &w2, &err) < 0 || weightd_finish(f1, &w1, &err) < 0)
			return NULL;
		n = pattern(name, want);
		if (strcmp(weightd_weight_name(w1), name) || weightd_weight_nbytes(w1) != n ||
		    weightd_weight_map(w1, &p, &err) < 0 || memcmp(p, want, n))
			return NULL;
		n = pattern(name2, want);
		if (strcmp(weightd_weight_name(w2), name2) || weightd_weight_map(w2, &p, &err) < 0 ||
		    memcmp(p, want, n))
			return NULL;
		weightd_release(w1);
		weightd_release(w2);
	}
	wk->ok = 1;
	return NULL;
}

static void test_one_connection_many_threads(void **state)
{
	struct fake *f = fake_start(h_immediate, NULL);
	struct worker wk[THREADS];
	pthread_t th[THREADS];
	weightd_client *c;
	uint64_t rel[16];
	int wfds;

	connect_ok(f, &c);
	for (int i = 0; i < THREADS; i++) {
		wk[i] = (struct worker){ .c = c, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_true(wk[i].ok);
	}
	releases_after_round_trip(f, c, rel);
	assert_int_equal(fake_count(f, WEIGHTD__REQUEST__BODY_MATERIALIZE), THREADS * PER_THREAD * 2);
	assert_int_equal(fake_count(f, WEIGHTD__REQUEST__BODY_RELEASE), THREADS * PER_THREAD * 2);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 0);
	weightd_close(c);
	fake_stop(f);
}

/* Events: one sent after the subscribe reply, one slipped in before a list reply. */
static void h_events(struct fake *f, const Weightd__Request *req)
{
	if (req->body_case == WEIGHTD__REQUEST__BODY_SUBSCRIBE) {
		fake_reply_empty(f, req);
		send_event(f, req->subscribe->checkpoints[0], 2);
	} else if (req->body_case == WEIGHTD__REQUEST__BODY_LIST) {
		send_event(f, "other", 5);
		fake_reply_empty(f, req);
	} else {
		fake_reply_empty(f, req);
	}
}

static void test_events(void **state)
{
	struct fake *f = fake_start(h_events, NULL);
	const char *cks[] = { "m", "n" };
	weightd_source_list *l;
	weightd_event_list *ev;
	weightd_client *c;
	weightd_error err;

	connect_ok(f, &c);
	assert_int_equal(weightd_subscribe(c, cks, 2, &err), 0);
	assert_int_equal(fake_nth(f, WEIGHTD__REQUEST__BODY_SUBSCRIBE, 0)->subscribe->n_checkpoints, 2);
	assert_int_equal(weightd_poll_events(c, 5000, &ev, &err), 0);
	assert_int_equal(ev->count, 1);
	assert_string_equal(ev->events[0].checkpoint, "m");
	assert_int_equal(ev->events[0].generation, 2);
	assert_string_equal(ev->events[0].what, "generation");
	weightd_event_list_free(ev);

	/* an event read while waiting for a reply is queued, then collected without waiting */
	assert_int_equal(weightd_list(c, &l, &err), 0);
	weightd_source_list_free(l);
	assert_int_equal(weightd_poll_events(c, 0, &ev, &err), 0);
	assert_int_equal(ev->count, 1);
	assert_string_equal(ev->events[0].checkpoint, "other");
	assert_int_equal(ev->events[0].generation, 5);
	weightd_event_list_free(ev);
	assert_int_equal(weightd_poll_events(c, 0, &ev, &err), 0);
	assert_int_equal(ev->count, 0);
	weightd_event_list_free(ev);
	weightd_close(c);
	fake_stop(f);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_hello_and_server_info),
	  cmocka_unit_test(test_version_mismatch_refused),
	  cmocka_unit_test(test_connect_gives_up_on_a_silent_peer),
	  cmocka_unit_test(test_connect_nothing_listening),
	  cmocka_unit_test(test_replies_matched_out_of_order),
	  cmocka_unit_test(test_fd_owned_and_released),
	  cmocka_unit_test(test_dup_shares_reference_share_takes_new),
	  cmocka_unit_test(test_disconnect_fails_pending_and_later_calls),
	  cmocka_unit_test(test_daemon_error_fills_every_field),
	  cmocka_unit_test(test_abandoned_request_releases_its_weight),
	  cmocka_unit_test(test_pending_limit), cmocka_unit_test(test_close_with_inflight),
	  cmocka_unit_test(test_one_connection_many_threads), cmocka_unit_test(test_events))
