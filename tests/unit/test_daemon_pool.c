/* test_daemon_pool.c - the worker pool's helper tasks: daemon/pool.c (pool_help, pool_withdraw). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "pool.h"

/* A task that records when its work and done ran; a blocker holds its worker until released. */
struct rec_task {
	struct pool_task task;          /* first */
	int work_seq, done_count;
	bool block;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool released, blocking;
static int seq;

static void rec_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct rec_task *r = (struct rec_task *)t;

	pthread_mutex_lock(&lock);
	if (r->block) {
		blocking = true;
		pthread_cond_broadcast(&cond);
		while (!released)
			pthread_cond_wait(&cond, &lock);
	}
	r->work_seq = ++seq;
	pthread_mutex_unlock(&lock);
}

static void rec_done(struct pool_task *t)
{
	((struct rec_task *)t)->done_count++;
}

/*
 * With the only worker held by a blocker: helpers queue behind the tasks already queued, a
 * withdrawn helper never runs, no done() is ever called for a helper, and withdrawing one after
 * it ran says so.
 */
static void test_helpers_queue_withdraw_and_no_done(void **state)
{
	struct event_base *base = event_base_new();
	struct pool *p = pool_new(base, 1);
	struct rec_task blocker = { .task = { .work = rec_work, .done = rec_done }, .block = true };
	struct rec_task a = { .task = { .work = rec_work, .done = rec_done } };
	struct rec_task h1 = { .task = { .work = rec_work, .done = NULL } };
	struct rec_task h2 = { .task = { .work = rec_work, .done = NULL } };

	assert_non_null(base);
	assert_non_null(p);
	pool_submit(p, &blocker.task);
	pthread_mutex_lock(&lock);
	while (!blocking)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	pool_submit(p, &a.task);
	pool_help(p, &h1.task);
	pool_help(p, &h2.task);
	assert_true(pool_withdraw(p, &h1.task));
	assert_false(pool_withdraw(p, &h1.task));   /* not queued any more */
	assert_int_equal(pool_pending(p), 2);       /* helpers are not counted */

	pthread_mutex_lock(&lock);
	released = true;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	while (a.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	/* the helper runs after a (no done() tells of it): wait for its mark */
	pthread_mutex_lock(&lock);
	while (h2.work_seq == 0) {
		pthread_mutex_unlock(&lock);
		usleep(1000);
		pthread_mutex_lock(&lock);
	}
	pthread_mutex_unlock(&lock);

	assert_int_equal(blocker.work_seq, 1);
	assert_int_equal(a.work_seq, 2);            /* queued before the helpers */
	assert_int_equal(h2.work_seq, 3);
	assert_int_equal(h1.work_seq, 0);           /* withdrawn: never ran */
	assert_false(pool_withdraw(p, &h2.task));   /* it ran */
	assert_int_equal(blocker.done_count, 1);
	assert_int_equal(a.done_count, 1);
	assert_int_equal(pool_pending(p), 0);
	pool_free(p);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_helpers_queue_withdraw_and_no_done),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
