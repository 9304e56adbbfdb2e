/* test_daemon_server.c - a session's held-weight index: holds, finds and releases agree with a
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(held_index_matches_a_reference_count),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
