/* SPDX-License-Identifier: Apache-2.0 */
/* test_remote_plan.c - the coalescer (src/remote_plan.c): which requests a set of wanted ranges
 * becomes, at the limits of the gap and the chunk, with straddling, empty and overlapping
 * ranges, and every byte of every range read exactly once (checked byte by byte). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "remote.h"

struct plan {
	size_t order[64];
	struct wd_remote_req *q;
	size_t n;
};

static void plan(const struct wd_remote_want *w, size_t n, uint64_t chunk, bool merge,
		 uint64_t gap, struct plan *p)
{
	assert_true(n <= 64);
	p->q = NULL;
	p->n = 0;
	assert_int_equal(wd_remote_plan(w, n, chunk, merge, gap, p->order, &p->q, &p->n), 0);
}

/* The request [off, off+len) of object obj covering wants order[first..last). */
static void expect_req(const struct plan *p, size_t i, size_t obj, uint64_t off, uint64_t len,
		       size_t first, size_t last)
{
	assert_true(i < p->n);
	assert_int_equal(p->q[i].obj, obj);
	assert_int_equal(p->q[i].off, off);
	assert_int_equal(p->q[i].len, len);
	assert_int_equal(p->q[i].first, first);
	assert_int_equal(p->q[i].last, last);
}

/* A shard's tiny tensors back to back: one request, nothing wasted. */
static void touching_ranges_are_one_request(void **state)
{
	struct wd_remote_want w[] = { { 0, 100, 8 }, { 0, 108, 448 }, { 0, 556, 44 } };
	struct plan p;

	(void)state;
	plan(w, 3, 1 << 20, true, 0, &p);
	assert_int_equal(p.n, 1);
	expect_req(&p, 0, 0, 100, 500, 0, 3);
	assert_int_equal(p.q[0].waste, 0);
	free(p.q);

	/* without merging, one request each */
	plan(w, 3, 1 << 20, false, 1 << 20, &p);
	assert_int_equal(p.n, 3);
	expect_req(&p, 1, 0, 108, 448, 1, 2);
	free(p.q);
}

/* A gap of exactly `gap` bytes is bridged (and counted as waste); one byte more is not. */
static void a_gap_at_the_limit_is_bridged_one_past_is_not(void **state)
{
	struct wd_remote_want at[] = { { 0, 0, 10 }, { 0, 110, 10 } };	  /* gap 100 */
	struct wd_remote_want past[] = { { 0, 0, 10 }, { 0, 111, 10 } }; /* gap 101 */
	struct plan p;

	(void)state;
	plan(at, 2, 1 << 20, true, 100, &p);
	assert_int_equal(p.n, 1);
	expect_req(&p, 0, 0, 0, 120, 0, 2);
	assert_int_equal(p.q[0].waste, 100);
	free(p.q);
	plan(past, 2, 1 << 20, true, 100, &p);
	assert_int_equal(p.n, 2);
	expect_req(&p, 0, 0, 0, 10, 0, 1);
	expect_req(&p, 1, 0, 111, 10, 1, 2);
	assert_int_equal(p.q[0].waste + p.q[1].waste, 0);
	free(p.q);
}

/* A request ends where the next range would take it past chunk bytes: a range that fits exactly
 * joins, the next starts a new request (whole, not cut). */
static void a_request_stops_at_the_chunk(void **state)
{
	struct wd_remote_want w[] = { { 0, 0, 600 }, { 0, 600, 400 }, { 0, 1000, 1 } };
	struct plan p;

	(void)state;
	plan(w, 3, 1000, true, 0, &p);
	assert_int_equal(p.n, 2);
	expect_req(&p, 0, 0, 0, 1000, 0, 2);
	expect_req(&p, 1, 0, 1000, 1, 2, 3);
	free(p.q);
}

/* A range longer than a chunk is read by whole chunks of its own; its tail shares a request
 * with what follows, so it spans three requests. */
static void a_range_longer_than_a_chunk_spans_requests(void **state)
{
	struct wd_remote_want w[] = { { 0, 50, 2500 }, { 0, 2550, 100 }, { 0, 10, 40 } };
	struct plan p;

	(void)state;
	plan(w, 3, 1000, true, 0, &p);
	/* sorted: [10,50) [50,2550) [2550,2650). The first request holds [10,50) and cannot
	 * take 2500 more; the long one is cut at 50+1000, 50+2000, its tail [2050,2550) joined by
	 * [2550,2650). */
	assert_int_equal(p.order[0], 2);
	assert_int_equal(p.order[1], 0);
	assert_int_equal(p.order[2], 1);
	assert_int_equal(p.n, 4);
	expect_req(&p, 0, 0, 10, 40, 0, 1);
	expect_req(&p, 1, 0, 50, 1000, 1, 2);
	expect_req(&p, 2, 0, 1050, 1000, 1, 2);
	expect_req(&p, 3, 0, 2050, 600, 1, 3);
	free(p.q);
}

/* Zero-length ranges: no request covers one, and one between two ranges does not break them. */
static void zero_length_ranges_have_no_request(void **state)
{
	struct wd_remote_want w[] = { { 0, 20, 0 }, { 0, 0, 20 }, { 0, 20, 5 }, { 0, 999, 0 } };
	struct wd_remote_want only[] = { { 3, 7, 0 } };
	struct plan p;

	(void)state;
	plan(w, 4, 1 << 20, true, 0, &p);
	assert_int_equal(p.n, 1);
	assert_int_equal(p.q[0].off, 0);
	assert_int_equal(p.q[0].len, 25);
	for (size_t k = p.q[0].first; k < p.q[0].last; k++)
		assert_true(w[p.order[k]].len > 0 || w[p.order[k]].off == 20);
	free(p.q);
	plan(only, 1, 1 << 20, true, 0, &p);
	assert_int_equal(p.n, 0);
	free(p.q);
}

/* Objects are never mixed in one request, even with touching offsets. */
static void objects_are_planned_apart(void **state)
{
	struct wd_remote_want w[] = { { 2, 0, 10 }, { 1, 10, 10 }, { 2, 10, 10 }, { 1, 0, 10 } };
	struct plan p;

	(void)state;
	plan(w, 4, 1 << 20, true, 1 << 20, &p);
	assert_int_equal(p.n, 2);
	expect_req(&p, 0, 1, 0, 20, 0, 2);
	expect_req(&p, 1, 2, 0, 20, 2, 4);
	free(p.q);
}

/* Overlapping ranges share the request that reads their bytes; waste counts the union. */
static void overlapping_ranges_share_a_request(void **state)
{
	struct wd_remote_want w[] = { { 0, 0, 100 }, { 0, 50, 100 }, { 0, 60, 10 } };
	struct plan p;

	(void)state;
	plan(w, 3, 1 << 20, true, 0, &p);
	assert_int_equal(p.n, 1);
	expect_req(&p, 0, 0, 0, 150, 0, 3);
	assert_int_equal(p.q[0].waste, 0);
	free(p.q);
}

/* Random sets of ranges: every request within chunk and of one object, in want order, and every
 * byte of every range read by exactly one of the requests covering it. */
static void every_byte_is_read_exactly_once(void **state)
{
	uint32_t x = 12345;

	(void)state;
	for (int round = 0; round < 400; round++) {
		struct wd_remote_want w[40];
		size_t n = 1 + round % 40;
		uint64_t chunk = 64 + (uint64_t)(round % 7) * 100, gap = (uint64_t)(round % 5) * 30;
		struct plan p;

		for (size_t i = 0; i < n; i++) {
			x = x * 1664525u + 1013904223u;
			w[i].obj = (x >> 8) % 3;
			w[i].off = (x >> 12) % 3000;
			x = x * 1664525u + 1013904223u;
			w[i].len = (x >> 9) % 7 == 0 ? 0 : (x >> 13) % (round % 3 ? 300 : 1500);
		}
		plan(w, n, chunk, round % 4 != 3, gap, &p);
		for (size_t q = 0; q < p.n; q++) {
			assert_true(p.q[q].len > 0 && p.q[q].len <= chunk);
			assert_true(p.q[q].first < p.q[q].last && p.q[q].last <= n);
			if (q)
				assert_true(p.q[q - 1].first <= p.q[q].first);
			for (size_t k = p.q[q].first; k < p.q[q].last; k++)
				assert_int_equal(w[p.order[k]].obj, p.q[q].obj);
		}
		for (size_t k = 0; k < n; k++) {
			const struct wd_remote_want *v = &w[p.order[k]];
			for (uint64_t b = v->off; b < v->off + v->len; b++) {
				int reads = 0;
				for (size_t q = 0; q < p.n; q++)
					if (p.q[q].first <= k && k < p.q[q].last &&
					    p.q[q].obj == v->obj && p.q[q].off <= b &&
					    b < p.q[q].off + p.q[q].len)
						reads++;
				assert_int_equal(reads, 1);
			}
		}
		free(p.q);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(touching_ranges_are_one_request),
		cmocka_unit_test(a_gap_at_the_limit_is_bridged_one_past_is_not),
		cmocka_unit_test(a_request_stops_at_the_chunk),
		cmocka_unit_test(a_range_longer_than_a_chunk_spans_requests),
		cmocka_unit_test(zero_length_ranges_have_no_request),
		cmocka_unit_test(objects_are_planned_apart),
		cmocka_unit_test(overlapping_ranges_share_a_request),
		cmocka_unit_test(every_byte_is_read_exactly_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
