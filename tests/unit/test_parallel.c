/* SPDX-License-Identifier: Apache-2.0 */
/* test_parallel.c - wd_parallel_for: every index once, claimed in order, stopped by a false. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "parallel.h"

#define N 5000

struct seen {
	atomic_int calls[N];
	atomic_int threads_in;      /* calls running now */
	atomic_int most_in;         /* most calls seen running at once */
	size_t stop_at;             /* return false at this index (N: never) */
	pthread_t who[N];
};

static bool visit(void *arg, size_t i)
{
	struct seen *s = arg;
	int in = atomic_fetch_add(&s->threads_in, 1) + 1, most = atomic_load(&s->most_in);

	while (in > most && !atomic_compare_exchange_weak(&s->most_in, &most, in))
		;
	atomic_fetch_add(&s->calls[i], 1);
	s->who[i] = pthread_self();
	if (i % 50 == 0)
		usleep(1000); /* long enough for the helpers to take part */
	atomic_fetch_sub(&s->threads_in, 1);
	return i != s->stop_at;
}

static struct seen *fresh(size_t stop_at)
{
	static struct seen s;

	memset(&s, 0, sizeof(s));
	s.stop_at = stop_at;
	return &s;
}

static void every_index_is_called_once(void **state)
{
	struct seen *s = fresh(N);
	size_t claimed;
	bool other = false;

	(void)state;
	claimed = wd_parallel_for(N, 4, visit, s);
	assert_int_equal(claimed, N);
	for (size_t i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&s->calls[i]), 1);
		other |= !pthread_equal(s->who[i], pthread_self());
	}
	/* the helpers did some of it, and calls overlapped */
	assert_true(other);
	assert_true(atomic_load(&s->most_in) > 1);
}

static void one_thread_is_the_caller_alone(void **state)
{
	struct seen *s = fresh(N);

	(void)state;
	assert_int_equal(wd_parallel_for(N, 1, visit, s), N);
	for (size_t i = 0; i < N; i++)
		assert_true(pthread_equal(s->who[i], pthread_self()));
	assert_int_equal(atomic_load(&s->most_in), 1);
	/* nothing to do: nothing called */
	assert_int_equal(wd_parallel_for(0, 4, visit, s), 0);
}

static void false_stops_claiming_and_claims_are_a_prefix(void **state)
{
	struct seen *s = fresh(1000);
	size_t claimed;

	(void)state;
	claimed = wd_parallel_for(N, 4, visit, s);
	/* 1000 was called; at most a few more (claimed by threads before they saw the stop) */
	assert_true(claimed > 1000);
	assert_true(claimed < N);
	for (size_t i = 0; i < N; i++)
		assert_int_equal(atomic_load(&s->calls[i]), i < claimed ? 1 : 0);
}

static void width_is_between_one_and_eight(void **state)
{
	unsigned w = wd_parallel_width();

	(void)state;
	assert_true(w >= 1 && w <= 8);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(every_index_is_called_once),
	  cmocka_unit_test(one_thread_is_the_caller_alone),
	  cmocka_unit_test(false_stops_claiming_and_claims_are_a_prefix),
	  cmocka_unit_test(width_is_between_one_and_eight))
