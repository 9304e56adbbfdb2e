/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_session.c - a session's held-weight index: holds, finds and releases agree with a
 * plain reference count under heavy collisions and random order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"
#include "daemon.h"
#include "session.h"

#define N 5000

static void held_index_matches_a_reference_count(void **state)
{
	static struct weight w[N];
	static uint32_t want[N];
	static struct cache_segment seg; /* never created: its weights stay off the idle counts */
	struct cache_params cp = { .budget = 1ull << 40 };
	struct daemon d;
	struct session s;
	unsigned seed = 12345;

	(void)state;
	memset(&d, 0, sizeof(d));
	memset(&s, 0, sizeof(s));
	d.cache = cache_new(&cp);
	assert_non_null(d.cache);
	s.d = &d;
	for (size_t i = 0; i < N; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		/* ids spaced so many share a hash slot's neighbourhood */
		w[i].id = 1 + i * 64;
		w[i].nbytes = i + 1;
		w[i].segment = &seg;
	}
	for (int step = 0; step < 200000; step++) {
		size_t i = (size_t)(rand_r(&seed) % N);
		bool hold = want[i] == 0 || rand_r(&seed) % 3 != 0;
		if (hold) {
			cache_hold(d.cache, &w[i]);
			assert_int_equal(session_hold(&s, &w[i]), 0);
			want[i]++;
		} else {
			assert_true(session_release(&s, &w[i]));
			want[i]--;
		}
		if (step % 997 == 0) {
			size_t distinct = 0;
			uint64_t bytes = 0;
			for (size_t k = 0; k < N; k++) {
				struct held *h = session_find_held(&s, w[k].id);
				if (want[k]) {
					assert_non_null(h);
					assert_ptr_equal(h->w, &w[k]);
					assert_int_equal(h->count, want[k]);
					assert_int_equal(w[k].holders, 1);
					distinct++;
					bytes += w[k].nbytes;
				} else {
					assert_null(h);
					assert_int_equal(w[k].holders, 0);
				}
				assert_int_equal(w[k].refs, want[k]);
			}
			assert_int_equal(s.n_held, distinct);
			assert_int_equal(s.held_bytes, bytes);
		}
	}
	/* releasing what is not held is refused and changes nothing */
	for (size_t k = 0; k < N; k++)
		if (!want[k])
			assert_false(session_release(&s, &w[k]));
	while (s.n_held) {
		struct weight *x = s.held[0].w;
		assert_true(session_release(&s, x));
	}
	assert_int_equal(s.held_bytes, 0);
	free(s.held);
	free(s.held_index);
	cache_free(d.cache, false);
}

/*
 * The index grows by doubling as distinct weights are held, always at least twice the number
 * held (so probing stays short), and every weight stays findable across each growth; holding a
 * weight again only counts; releasing everything leaves no reference, no holder, no bytes, and
 * the weights back with the cache unreferenced.
 */
static void held_index_grows_and_releases_everything(void **state)
{
	enum { M = 1000 };
	static struct weight w[M];
	static struct cache_segment seg; /* never created: its weights stay off the idle counts */
	struct cache_params cp = { .budget = 1ull << 40 };
	struct daemon d;
	struct session s;
	size_t last_cap = 0, growths = 0;

	(void)state;
	memset(&d, 0, sizeof(d));
	memset(&s, 0, sizeof(s));
	d.cache = cache_new(&cp);
	assert_non_null(d.cache);
	s.d = &d;
	for (size_t i = 0; i < M; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = 1000 + i; /* consecutive ids: the worst case for a weak hash */
		w[i].nbytes = 4096;
		w[i].segment = &seg;
		cache_hold(d.cache, &w[i]);
		assert_int_equal(session_hold(&s, &w[i]), 0);
		assert_true(s.held_icap >= 2 * s.n_held);
		assert_int_equal(s.held_icap & (s.held_icap - 1), 0);
		if (s.held_icap != last_cap) {
			growths++;
			last_cap = s.held_icap;
			for (size_t k = 0; k <= i; k++) {
				struct held *h = session_find_held(&s, w[k].id);

				assert_non_null(h);
				assert_ptr_equal(h->w, &w[k]);
			}
		}
	}
	assert_int_equal(s.n_held, M);
	assert_true(growths >= 6); /* 32 -> 4096 */
	assert_true(s.held_bytes == (uint64_t)M * 4096);
	assert_null(session_find_held(&s, 999));
	assert_null(session_find_held(&s, 1000 + M));
	/* a second hold of the same weight: one entry, two references */
	cache_hold(d.cache, &w[7]);
	assert_int_equal(session_hold(&s, &w[7]), 0);
	assert_int_equal(s.n_held, M);
	assert_int_equal(session_find_held(&s, w[7].id)->count, 2);
	assert_int_equal(w[7].refs, 2);
	assert_int_equal(w[7].holders, 1);
	assert_true(s.held_bytes == (uint64_t)M * 4096);
	/* release in an order unlike the holding order (odd ids first, then even) */
	assert_true(session_release(&s, &w[7]));
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = (size_t)(1 - pass); i < M; i += 2) {
			assert_true(session_release(&s, &w[i]));
			assert_null(session_find_held(&s, w[i].id));
			assert_false(session_release(&s, &w[i]));
		}
	assert_int_equal(s.n_held, 0);
	assert_true(s.held_bytes == 0);
	for (size_t i = 0; i < M; i++) {
		assert_int_equal(w[i].refs, 0);
		assert_int_equal(w[i].holders, 0);
	}
	free(s.held);
	free(s.held_index);
	cache_free(d.cache, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(held_index_matches_a_reference_count),
		cmocka_unit_test(held_index_grows_and_releases_everything),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
