/* SPDX-License-Identifier: Apache-2.0 */
/* test_pagedrop.c - page-cache drops (src/pagedrop.c): at once on the caller's thread until the
 * drop thread runs; then on that thread, adjacent ranges of one file joined into one call, a
 * forgotten owner's ranges never dropped, a full queue dropping on the caller, stop draining
 * the queue. posix_fadvise is wrapped: each call is recorded, and can be held until released. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "pagedrop.h"

#define PAGE 4096u
#define MIB  (1u << 20)

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
	uint64_t bytes;
	off_t last_off, last_len;
	int last_fd;
	pid_t last_tid;
	bool hold; /* calls of other threads than the test's wait while set */
	pid_t test_tid;
	bool in_call; /* a call is waiting */
} W = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

int __wrap_posix_fadvise(int fd, off_t off, off_t len, int advice);

int __wrap_posix_fadvise(int fd, off_t off, off_t len, int advice)
{
	pthread_mutex_lock(&W.mu);
	if (advice == POSIX_FADV_DONTNEED) {
		W.calls++;
		W.bytes += (uint64_t)len;
		W.last_fd = fd;
		W.last_off = off;
		W.last_len = len;
		W.last_tid = gettid();
		W.in_call = true;
		pthread_cond_broadcast(&W.cv);
		while (W.hold && gettid() != W.test_tid)
			pthread_cond_wait(&W.cv, &W.mu);
		W.in_call = false;
	}
	pthread_mutex_unlock(&W.mu);
	return 0;
}

static void reset(void)
{
	pthread_mutex_lock(&W.mu);
	W.calls = 0;
	W.bytes = 0;
	W.last_fd = -1;
	W.last_tid = 0;
	W.test_tid = gettid();
	pthread_mutex_unlock(&W.mu);
}

static int calls(void)
{
	int n;

	pthread_mutex_lock(&W.mu);
	n = W.calls;
	pthread_mutex_unlock(&W.mu);
	return n;
}

/* Make the thread's next call wait (the test's own calls go through). */
static void hold_next_call(void)
{
	pthread_mutex_lock(&W.mu);
	W.hold = true;
	pthread_mutex_unlock(&W.mu);
}

/* Return once a call of the thread is waiting. */
static void wait_held(void)
{
	pthread_mutex_lock(&W.mu);
	while (!W.in_call)
		pthread_cond_wait(&W.cv, &W.mu);
	pthread_mutex_unlock(&W.mu);
}

static void release(void)
{
	pthread_mutex_lock(&W.mu);
	W.hold = false;
	pthread_cond_broadcast(&W.cv);
	pthread_mutex_unlock(&W.mu);
}

static const char owner_a = 'a', owner_b = 'b';

/* Starts the thread and holds it inside its first call: the first MiB of fd 7. */
static void start_with_a_call_held(void)
{
	reset();
	assert_int_equal(wd_pagedrop_start(), 0);
	hold_next_call();
	wd_pagedrop_add(&owner_a, 7, 0, MIB);
	wait_held();
}

/* Without the thread: one call at once, on this thread, over the whole pages inside. */
static void test_synchronous_until_started(void **state)
{
	(void)state;
	reset();
	wd_pagedrop_add(&owner_a, 7, 100, 3 * PAGE);
	assert_int_equal(calls(), 1);
	assert_int_equal(W.last_tid, gettid());
	assert_int_equal(W.last_fd, 7);
	assert_int_equal(W.last_off, PAGE);
	assert_int_equal(W.last_len, 2 * PAGE); /* the pages shared with neighbours stay */
	wd_pagedrop_add(&owner_a, 7, 100, 100); /* no whole page: no call */
	assert_int_equal(calls(), 1);
}

/* Ranges queued while the thread is busy, in either order, become one call; another file's
 * stay apart. */
static void test_adjacent_ranges_joined_on_the_thread(void **state)
{
	(void)state;
	start_with_a_call_held();
	assert_int_not_equal(W.last_tid, gettid());
	for (unsigned i = 63; i >= 32; i--) /* backwards */
		wd_pagedrop_add(&owner_a, 7, (uint64_t)i * MIB, MIB);
	wd_pagedrop_add(&owner_a, 8, 0, MIB);
	for (unsigned i = 64; i < 96; i++) /* forwards, after another file's range */
		wd_pagedrop_add(&owner_a, 7, (uint64_t)i * MIB, MIB);
	assert_int_equal(calls(), 1);
	release();
	wd_pagedrop_stop();
	assert_int_equal(calls(), 3); /* the first; [32, 96) MiB of fd 7; fd 8 */
	assert_int_equal(W.bytes, 66ull * MIB);
}

static void test_ranges_queued_together_are_one_call(void **state)
{
	(void)state;
	start_with_a_call_held();
	for (unsigned i = 1; i < 64; i++)
		wd_pagedrop_add(&owner_a, 7, (uint64_t)i * MIB, MIB);
	release();
	wd_pagedrop_stop();
	assert_int_equal(calls(), 2);
	assert_int_equal(W.last_off, MIB);
	assert_int_equal(W.last_len, 63ull * MIB);
}

/* Two workers' chunks: each extends its own range until they meet, and then they are one. */
static void test_ranges_that_meet_become_one(void **state)
{
	(void)state;
	start_with_a_call_held();
	for (unsigned i = 0; i < 16; i++) {
		wd_pagedrop_add(&owner_a, 7, (uint64_t)(10 + i) * MIB, MIB); /* [10, 26) */
		wd_pagedrop_add(&owner_a, 7, (uint64_t)(26 + i) * MIB, MIB); /* [26, 42) */
	}
	release();
	wd_pagedrop_stop();
	assert_int_equal(calls(), 2);
	assert_int_equal(W.last_off, 10ll * MIB);
	assert_int_equal(W.last_len, 32ll * MIB);
}

static void *forget_a(void *arg)
{
	wd_pagedrop_forget(&owner_a);
	__atomic_store_n((int *)arg, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* A forgotten owner's queued ranges are never dropped, and forget waits for the one being
 * dropped (its fd must stay open until then). */
static void test_forget_drops_nothing_more_and_waits(void **state)
{
	pthread_t t;
	int done = 0;

	(void)state;
	start_with_a_call_held();
	wd_pagedrop_add(&owner_a, 7, 10 * MIB, MIB);
	wd_pagedrop_add(&owner_b, 9, 0, MIB);
	wd_pagedrop_add(&owner_b, 9, 10 * MIB, MIB);
	wd_pagedrop_forget(&owner_b); /* not being dropped: returns at once */
	assert_int_equal(pthread_create(&t, NULL, forget_a, &done), 0);
	usleep(50000);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_SEQ_CST), 0);
	release();
	pthread_join(t, NULL);
	assert_int_equal(done, 1);
	wd_pagedrop_stop();
	assert_int_equal(calls(), 1); /* only the range already being dropped */
	assert_int_equal(W.last_fd, 7);
}

/* What would take the queue past 1 GiB waiting is dropped at once by the caller. */
static void test_full_queue_drops_on_the_caller(void **state)
{
	(void)state;
	start_with_a_call_held();
	wd_pagedrop_add(&owner_a, 7, 2 * MIB, 1000ull * MIB); /* queued */
	assert_int_equal(calls(), 1);
	wd_pagedrop_add(&owner_a, 7, 4096ull * MIB, 100ull * MIB);
	assert_int_equal(calls(), 2);
	assert_int_equal(W.last_tid, gettid());
	assert_int_equal(W.last_off, 4096ll * MIB);
	release();
	wd_pagedrop_stop();
	assert_int_equal(calls(), 3);
	assert_int_equal(W.bytes, (1ull + 1000 + 100) * MIB);
}

/* stop drops what is queued before it returns, without waiting for the queue to go quiet. */
static void test_stop_drains(void **state)
{
	(void)state;
	reset();
	assert_int_equal(wd_pagedrop_start(), 0);
	for (unsigned i = 0; i < 8; i++)
		wd_pagedrop_add(&owner_a, (int)(10 + i), 0, MIB);
	wd_pagedrop_stop();
	assert_int_equal(calls(), 8);
	assert_int_equal(W.bytes, 8ull * MIB);
	/* stopped: synchronous again */
	wd_pagedrop_add(&owner_a, 7, 0, MIB);
	assert_int_equal(W.last_tid, gettid());
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_synchronous_until_started),
	  cmocka_unit_test(test_adjacent_ranges_joined_on_the_thread),
	  cmocka_unit_test(test_ranges_queued_together_are_one_call),
	  cmocka_unit_test(test_ranges_that_meet_become_one),
	  cmocka_unit_test(test_forget_drops_nothing_more_and_waits),
	  cmocka_unit_test(test_full_queue_drops_on_the_caller), cmocka_unit_test(test_stop_drains))
