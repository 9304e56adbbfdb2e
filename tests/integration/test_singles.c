/* SPDX-License-Identifier: Apache-2.0 */
/* test_singles.c - single gets pack: every one of the 91,991 tensors of the DeepSeek-shaped
 * checkpoint (tests/common/deepseek.h) fetched as a cold single get (weightd_materialize, then
 * weightd_finish) and held at once by a client with `ulimit -n 1024`, one request at a time and
 * many in flight at once; the client's fds and mappings stay a handful (one per segment), and a
 * restart re-adopts what single gets made without reading it again. */
#include <dirent.h>
#include <sys/resource.h>

#include "deepseek.h"
#include "fixture.h"

#define CLIENT_NOFILE 1024
/* A handful of segments hold every weight; a few dozen fds and mappings is "a handful" with
 * room to spare, and two orders of magnitude below the 1,024 fds a segment per get would
 * need. */
#define MAX_HELD 64
/* Requests in flight at once: under client_max_pending (256). */
#define WINDOW 200

/* Mappings of the test daemon's segments: the lines of /proc/self/maps naming one of its files
 * ("/PREFIX.<hex>", in /dev/shm or a segment_dir). Other mappings come and go with the allocator
 * (a sanitizer's maps memory of its own as the client runs), and are not what is counted. */
static int count_segment_maps(void)
{
	char line[4096], needle[96];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	if (!f)
		return -1;
	snprintf(needle, sizeof(needle), "/%s.", H.prefix);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* What the client child reports through a pipe (one write, < PIPE_BUF). */
struct report {
	int rc;
	char msg[1024];
	size_t got; /* weights held when it reported */
	int fds_before, fds_after, maps_before, maps_after;
	uint64_t segments; /* distinct segment ids among the weights */
	uint64_t full_checked;
};

/* Tensor i's weight: its size, and its bytes (all of every 97th, else first, middle, last). */
static void check_weight(struct report *r, size_t i, weightd_weight *w)
{
	const struct ds_tensor *t = &DS.t[i];
	const uint8_t *p = NULL;
	weightd_error err;
	uint64_t n = t->nbytes;

	if (weightd_weight_nbytes(w) != n) {
		it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "%s: %llu bytes, the checkpoint has %llu", t->name,
			 (unsigned long long)weightd_weight_nbytes(w), (unsigned long long)n);
		return;
	}
	if (weightd_weight_map(w, (const void **)&p, &err) < 0) {
		it_report_fail(&r->rc, r->msg, sizeof(r->msg), err.code ? -err.code : -1, "map %s: %s", t->name, err.message);
		return;
	}
	if (i % 97 == 0) {
		for (uint64_t k = 0; k < n; k++)
			if (p[k] != ds_byte(t, k)) {
				it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "%s: byte %llu is 0x%02x, the checkpoint has 0x%02x",
					 t->name, (unsigned long long)k, p[k], ds_byte(t, k));
				return;
			}
		r->full_checked++;
		return;
	}
	if (n && (p[0] != ds_byte(t, 0) || p[n / 2] != ds_byte(t, n / 2) ||
		  p[n - 1] != ds_byte(t, n - 1)))
		it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "%s: its first, middle or last byte differs from the checkpoint",
			 t->name);
}

/*
 * The client: RLIMIT_NOFILE 1024; every tensor asked for as a single get, `window` requests in
 * flight at once (1: each finished before the next is sent), every weight kept; then each
 * mapped and checked. Reports, then holds everything until the test writes a byte.
 */
static void singles_child(int in, int out, size_t window)
{
	struct rlimit rl = { CLIENT_NOFILE, CLIENT_NOFILE };
	struct report r = { 0 };
	weightd_client *c = NULL;
	weightd_error err = { 0 };
	weightd_weight **ws = calloc(DS.n, sizeof(*ws));
	weightd_inflight **fl = calloc(window, sizeof(*fl));
	uint64_t *segs = calloc(DS.n, sizeof(*segs));
	char x;
	int rc = 0;

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || !ws || !fl || !segs)
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), 0, "setrlimit/calloc: %s", strerror(errno));
	if (!r.rc && (rc = weightd_connect(H.sock, "singles", &c, &err)) < 0)
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), rc, "connect: %s", err.message);
	r.fds_before = it_count_dir("/proc/self/fd");
	r.maps_before = count_segment_maps();
	for (size_t first = 0; !r.rc && first < DS.n; first += window) {
		size_t n = DS.n - first < window ? DS.n - first : window, sent = 0;

		for (; sent < n; sent++) {
			rc = weightd_materialize(c, "ds", DS.t[first + sent].name, NULL, &fl[sent],
						 &err);
			if (rc < 0) {
				it_report_fail(&r.rc, r.msg, sizeof(r.msg), rc, "materialize %s (%zu held): %s (%s)",
					 DS.t[first + sent].name, r.got, err.message,
					 weightd_code_name(rc));
				break;
			}
		}
		for (size_t k = 0; k < sent; k++) {
			rc = weightd_finish(fl[k], &ws[first + k], &err);
			if (rc < 0)
				it_report_fail(&r.rc, r.msg, sizeof(r.msg), rc, "finish %s (%zu held): %s (%s)",
					 DS.t[first + k].name, r.got, err.message,
					 weightd_code_name(rc));
			else
				r.got++;
		}
	}
	for (size_t i = 0; !r.rc && i < DS.n; i++) {
		uint64_t id = weightd_weight_segment(ws[i]);
		size_t k;

		check_weight(&r, i, ws[i]);
		for (k = 0; k < r.segments && segs[k] != id; k++)
			;
		if (k == r.segments)
			segs[r.segments++] = id;
	}
	r.fds_after = it_count_dir("/proc/self/fd");
	r.maps_after = count_segment_maps();
	if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
	if (read(in, &x, 1) < 0)
		_exit(4);
	for (size_t i = 0; i < DS.n; i++)
		weightd_release(ws[i]);
	weightd_close(c);
	free(ws);
	free(fl);
	free(segs);
	_exit(0);
}

struct kid {
	pid_t pid;
	int to, from;
	struct report r;
};

/* Fork a client, wait for its report; fail the test with its message. */
static void kid_run(struct kid *k, size_t window)
{
	int64_t t0 = it_now_ms();

	k->pid = it_fork_piped(&k->to, &k->from);
	if (k->pid == 0)
		singles_child(k->to, k->from, window);
	if (read(k->from, &k->r, sizeof(k->r)) != (ssize_t)sizeof(k->r))
		fail_msg("the client process died before it reported");
	if (k->r.rc) {
		harness_dump_log(&H);
		fail_msg("%d single gets with ulimit -n %d, %zu in flight: %s", DS_TENSORS,
			 CLIENT_NOFILE, window, k->r.msg);
	}
	print_message(
		"client %d: %zu single gets (%zu in flight) in %lld ms; it holds them in %llu "
		"segments with %d more fds and %d more mappings; %llu compared in full\n",
		(int)k->pid, k->r.got, window, (long long)(it_now_ms() - t0),
		(unsigned long long)k->r.segments, k->r.fds_after - k->r.fds_before,
		k->r.maps_after - k->r.maps_before, (unsigned long long)k->r.full_checked);
	assert_int_equal(k->r.got, DS_TENSORS);
	assert_true(k->r.segments >= 1);
	/* O(segments): one fd and one mapping per segment, nothing per weight */
	assert_true(k->r.fds_after - k->r.fds_before <= (int)k->r.segments + 2);
	assert_true(k->r.maps_after - k->r.maps_before <= (int)k->r.segments + 2);
	assert_true(k->r.segments <= MAX_HELD);
}

static void kid_done(struct kid *k)
{
	assert_int_equal(write(k->to, "q", 1), 1);
	close(k->to);
	close(k->from);
	it_wait_child_ok(k->pid);
}

/* Every tensor as a cold single get, one at a time, all held: a handful of fds in the client
 * and the daemon; every byte read once. */
static void singles_one_at_a_time(void **state)
{
	struct kid a;
	weightd_status *st;
	int dfds;

	fixture_ds_start(NULL);
	kid_run(&a, 1);
	dfds = harness_count_fds(H.pid);
	st = it_status_of(&H);
	print_message("the daemon holds %d fds and %llu segments for %llu weights\n", dfds,
		      (unsigned long long)st->segments, (unsigned long long)st->weights);
	assert_int_equal(st->weights, DS_TENSORS);
	assert_int_equal(st->bytes_read, DS.bytes);
	assert_true(st->segments <= MAX_HELD);
	weightd_status_free(st);
	assert_true(dfds <= DS_SHARDS + MAX_HELD);
	kid_done(&a);
}

/*
 * The same with 200 requests in flight at once: the requests that wait for a worker are filled
 * in batches; then a restart after kill -9 re-adopts every weight (the records grew with each
 * get) and a second client is served reading nothing.
 */
static void singles_in_flight_then_restart(void **state)
{
	struct kid a, b;
	weightd_status *st;
	int64_t t0;

	fixture_ds_start(NULL);
	kid_run(&a, WINDOW);
	assert_true(harness_log_contains(&H, "small weights"));
	st = it_status_of(&H);
	assert_int_equal(st->weights, DS_TENSORS);
	assert_int_equal(st->bytes_read, DS.bytes);
	weightd_status_free(st);
	kid_done(&a);

	harness_kill(&H);
	t0 = it_now_ms();
	fixture_ds_start(NULL);
	st = it_status_of(&H);
	print_message("restarted, re-adopting %llu weights, in %lld ms\n",
		      (unsigned long long)st->readoptions, (long long)(it_now_ms() - t0));
	assert_int_equal(st->readoptions, DS_TENSORS);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);
	kid_run(&b, WINDOW);
	st = it_status_of(&H);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);
	kid_done(&b);
}

TEST_MAIN(fixture_ds_table, fixture_ds_free,
	  cmocka_unit_test_setup_teardown(singles_one_at_a_time, fixture_ds_write, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(singles_in_flight_then_restart, fixture_ds_write,
					  fixture_cleanup))
