/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_pool.c - the worker pool: done() on the loop thread for every task, queued work
 * cancelled at shutdown without running, busy workers abandoned after the grace period, and
 * worker buffers made on first use and given back when idle; fill helpers (pool_help,
 * pool_withdraw); owners served fairly over bytes, long tasks yielding to other owners between
 * steps (pool_yield), queued tasks moving to the owner due first (pool_reown). */
#include <event2/event.h>
#include <pthread.h>
#include <semaphore.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "pool.h"

struct ttask {
	struct pool_task task;
	sem_t *gate;            /* work waits on it when set */
	sem_t started;
	int worked;             /* set by work() */
	int done;               /* done() calls */
	bool cancelled;         /* as done() saw it */
	bool had_scratch;
	pthread_t done_thread;
};

static void t_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct ttask *x = (struct ttask *)t;

	x->had_scratch = scratch && scratch->buf;
	sem_post(&x->started);
	if (x->gate)
		sem_wait(x->gate);
	__atomic_store_n(&x->worked, 1, __ATOMIC_RELEASE);
}

static void t_done(struct pool_task *t)
{
	struct ttask *x = (struct ttask *)t;

	x->done++;
	x->cancelled = t->cancelled;
	x->done_thread = pthread_self();
}

static void t_init(struct ttask *x, sem_t *gate)
{
	memset(x, 0, sizeof(*x));
	x->task.work = t_work;
	x->task.done = t_done;
	x->gate = gate;
	sem_init(&x->started, 0, 0);
}

/* Run the loop until every task in xs has had its done(). */
static void run_until_done(struct event_base *base, struct ttask *xs, size_t n)
{
	for (int spins = 0; spins < 100000; spins++) {
		size_t left = 0;

		for (size_t i = 0; i < n; i++)
			left += xs[i].done == 0;
		if (!left)
			return;
		event_base_loop(base, EVLOOP_ONCE);
	}
	fail_msg("done() never ran for every task");
}

static void every_task_finishes_on_the_loop_thread(void **state)
{
	struct event_base *base = event_base_new();
	struct pool *p = pool_new(base, 2);
	struct ttask xs[16];

	(void)state;
	assert_non_null(p);
	for (size_t i = 0; i < 16; i++) {
		t_init(&xs[i], NULL);
		pool_submit(p, &xs[i].task);
	}
	run_until_done(base, xs, 16);
	for (size_t i = 0; i < 16; i++) {
		assert_int_equal(xs[i].worked, 1);
		assert_int_equal(xs[i].done, 1);
		assert_false(xs[i].cancelled);
		assert_true(xs[i].had_scratch);
		assert_true(pthread_equal(xs[i].done_thread, pthread_self()));
	}
	assert_int_equal(pool_pending(p), 0);
	assert_true(pool_free(p, 0));
	event_base_free(base);
}

/* write(2) as the tests script it: the next fail_writes eventfd writes (8 bytes) fail with
 * fail_errno, as libfiu's injected faults make them fail. */
static int fail_writes, fail_errno;
ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	if (n == sizeof(uint64_t) && __atomic_load_n(&fail_writes, __ATOMIC_ACQUIRE) > 0) {
		__atomic_fetch_sub(&fail_writes, 1, __ATOMIC_ACQ_REL);
		errno = fail_errno;
		return -1;
	}
	return __real_write(fd, buf, n);
}

/* A worker's wake-up of the loop that fails (EIO, EINTR) is written again: the task's done()
 * still runs, where before the completion waited for a wake-up that never came and its request
 * was never answered. */
static void a_completion_whose_wakeup_write_fails_still_finishes(void **state)
{
	static const int errs[] = { EIO, EINTR };

	(void)state;
	for (size_t e = 0; e < 2; e++) {
		struct event_base *base = event_base_new();
		struct pool *p = pool_new(base, 1);
		struct ttask x;

		assert_non_null(p);
		t_init(&x, NULL);
		fail_errno = errs[e];
		__atomic_store_n(&fail_writes, 3, __ATOMIC_RELEASE);
		pool_submit(p, &x.task);
		for (int ms = 0; ms < 10000 && !x.done; ms++) {
			event_base_loop(base, EVLOOP_NONBLOCK);
			usleep(1000);
		}
		assert_int_equal(x.done, 1);
		assert_int_equal(__atomic_load_n(&fail_writes, __ATOMIC_ACQUIRE), 0);
		assert_true(pool_free(p, 0));
		event_base_free(base);
	}
}

/* Queued tasks are cancelled without running; the running one finishes; later ones are cancelled
 * at submission; every done() runs exactly once. */
static void cancel_skips_queued_work(void **state)
{
	struct event_base *base = event_base_new();
	struct pool *p = pool_new(base, 1);
	struct ttask xs[10], late;
	sem_t gate;

	(void)state;
	sem_init(&gate, 0, 0);
	for (size_t i = 0; i < 10; i++) {
		t_init(&xs[i], i == 0 ? &gate : NULL);
		pool_submit(p, &xs[i].task);
	}
	sem_wait(&xs[0].started);          /* the one worker is inside task 0 */
	assert_int_equal(pool_cancel(p), 9);
	t_init(&late, NULL);
	pool_submit(p, &late.task);
	sem_post(&gate);
	run_until_done(base, xs, 10);
	run_until_done(base, &late, 1);
	assert_int_equal(xs[0].worked, 1);
	assert_false(xs[0].cancelled);
	for (size_t i = 1; i < 10; i++) {
		assert_int_equal(xs[i].worked, 0);
		assert_true(xs[i].cancelled);
		assert_int_equal(xs[i].done, 1);
	}
	assert_int_equal(late.worked, 0);
	assert_true(late.cancelled);
	assert_int_equal(pool_pending(p), 0);
	assert_true(pool_free(p, 1000));
	for (size_t i = 0; i < 10; i++)
		assert_int_equal(xs[i].done, 1);
	event_base_free(base);
}

/* Without a grace period pool_free waits; with one, a worker stuck in a task is abandoned and
 * pool_free says so, after running done() of what was cancelled. */
static void busy_workers_are_abandoned_after_the_grace(void **state)
{
	struct event_base *base = event_base_new();
	struct pool *p = pool_new(base, 1);
	static struct ttask stuck, queued;   /* outlive the test: the abandoned worker uses one */
	static sem_t gate;

	(void)state;
	sem_init(&gate, 0, 0);
	t_init(&stuck, &gate);
	t_init(&queued, NULL);
	pool_submit(p, &stuck.task);
	pool_submit(p, &queued.task);
	sem_wait(&stuck.started);
	pool_cancel(p);
	assert_false(pool_free(p, 50));
	assert_int_equal(queued.done, 1);
	assert_true(queued.cancelled);
	assert_int_equal(queued.worked, 0);
	assert_int_equal(stuck.done, 0);
	sem_post(&gate); /* let it end: the pool stayed allocated for it, as documented */
	assert_true(pool_free(p, 0));
	assert_int_equal(stuck.worked, 1);
	assert_int_equal(stuck.done, 1);
	event_base_free(base);
}

/* Resident set of this process, in KiB (from /proc/self/status). */
static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/*
 * Idle workers hold no buffers: 8 new workers add far less than one worker's WD_SCRATCH_BYTES x 2
 * of resident memory; after work each has faulted its buffers in, and after the idle period they
 * are given back.
 */
static void worker_buffers_are_made_on_use_and_given_back(void **state)
{
	const long one_worker_kib = 2 * WD_SCRATCH_BYTES / 1024;
	/* what "holds no buffers" tolerates: allocator and sanitizer noise is a few MiB, more than
	 * one worker's buffers now that they are small (8 busy workers still exceed it 3x) */
	const long noise_kib = one_worker_kib > 4096 ? one_worker_kib : 4096;
	struct event_base *base = event_base_new();
	struct ttask xs[8];
	sem_t gate;
	long before, idle, busy, after = 0;
	struct pool *p;

	(void)state;
	before = rss_kib();
	p = pool_new(base, 8);
	assert_non_null(p);
	usleep(100000);
	idle = rss_kib();
	print_message("RSS: %ld KiB before, %ld KiB with 8 idle workers\n", before, idle);
	assert_true(idle - before < noise_kib);

	/* all 8 busy at once, so each makes its buffers */
	sem_init(&gate, 0, 0);
	pool_set_idle_ms(p, 200);
	for (size_t i = 0; i < 8; i++) {
		t_init(&xs[i], &gate);
		pool_submit(p, &xs[i].task);
	}
	for (size_t i = 0; i < 8; i++)
		sem_wait(&xs[i].started);
	busy = rss_kib();
	for (size_t i = 0; i < 8; i++)
		sem_post(&gate);
	run_until_done(base, xs, 8);
	for (size_t i = 0; i < 8; i++)
		assert_true(xs[i].had_scratch);
	print_message("RSS: %ld KiB with 8 busy workers\n", busy);
	assert_true(busy - before >= 4 * one_worker_kib && busy - before >= 2 * noise_kib);
	for (int i = 0; i < 100; i++) {
		usleep(50000);
		after = rss_kib();
		if (after - before < noise_kib)
			break;
	}
	print_message("RSS: %ld KiB after the idle period\n", after);
	assert_true(after - before < noise_kib);
	assert_true(pool_free(p, 0));
	event_base_free(base);
}

static void default_worker_count_is_capped(void **state)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_true(pool_default_threads() >= 1);
	assert_true(pool_default_threads() <= POOL_MAX_DEFAULT_THREADS);
	assert_int_equal(pool_default_threads(),
			 n < 1 ? 1 : n > (long)POOL_MAX_DEFAULT_THREADS ? POOL_MAX_DEFAULT_THREADS
									: (unsigned)n);
}

/* A task that records when its work and done ran; a blocker holds its worker until h_released. */
struct h_task {
	struct pool_task task;          /* first */
	int work_seq, done_count;
	bool block;
};

static pthread_mutex_t h_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t h_cond = PTHREAD_COND_INITIALIZER;
static bool h_released, h_blocking;
static int h_seq;

static void h_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct h_task *r = (struct h_task *)t;

	pthread_mutex_lock(&h_lock);
	if (r->block) {
		h_blocking = true;
		pthread_cond_broadcast(&h_cond);
		while (!h_released)
			pthread_cond_wait(&h_cond, &h_lock);
	}
	r->work_seq = ++h_seq;
	pthread_mutex_unlock(&h_lock);
}

static void h_done(struct pool_task *t)
{
	((struct h_task *)t)->done_count++;
}

/* Submits the blocker and returns once it holds the pool's (only) worker. */
static void hold_worker(struct pool *p, struct h_task *blocker)
{
	h_released = h_blocking = false;
	pool_submit(p, &blocker->task);
	pthread_mutex_lock(&h_lock);
	while (!h_blocking)
		pthread_cond_wait(&h_cond, &h_lock);
	pthread_mutex_unlock(&h_lock);
}

/* Lets the blocker finish. */
static void release_worker(void)
{
	pthread_mutex_lock(&h_lock);
	h_released = true;
	pthread_cond_broadcast(&h_cond);
	pthread_mutex_unlock(&h_lock);
}

/*
 * With the only worker held by a blocker: helpers queue behind the tasks already queued, a
 * withdrawn helper never runs, no done() is ever called for a helper, and withdrawing one after
 * it ran says so.
 */
static void helpers_queue_behind_can_be_withdrawn_and_get_no_done(void **state)
{
	struct event_base *base = event_base_new();
	struct pool *p = pool_new(base, 1);
	struct h_task blocker = { .task = { .work = h_work, .done = h_done }, .block = true };
	struct h_task a = { .task = { .work = h_work, .done = h_done } };
	struct h_task h1 = { .task = { .work = h_work, .done = NULL } };
	struct h_task h2 = { .task = { .work = h_work, .done = NULL } };

	h_seq = 0;
	assert_non_null(base);
	assert_non_null(p);
	hold_worker(p, &blocker);

	pool_submit(p, &a.task);
	pool_help(p, &h1.task);
	pool_help(p, &h2.task);
	assert_true(pool_withdraw(p, &h1.task));
	assert_false(pool_withdraw(p, &h1.task));   /* not queued any more */
	assert_int_equal(pool_pending(p), 2);       /* helpers are not counted */

	release_worker();
	while (a.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	/* the helper runs after a (no done() tells of it): wait for its mark */
	pthread_mutex_lock(&h_lock);
	while (h2.work_seq == 0) {
		pthread_mutex_unlock(&h_lock);
		usleep(1000);
		pthread_mutex_lock(&h_lock);
	}
	pthread_mutex_unlock(&h_lock);

	assert_int_equal(blocker.work_seq, 1);
	assert_int_equal(a.work_seq, 2);            /* queued before the helpers */
	assert_int_equal(h2.work_seq, 3);
	assert_int_equal(h1.work_seq, 0);           /* withdrawn: never ran */
	assert_false(pool_withdraw(p, &h2.task));   /* it ran */
	assert_int_equal(blocker.done_count, 1);
	assert_int_equal(a.done_count, 1);
	assert_int_equal(pool_pending(p), 0);
	assert_true(pool_free(p, 0));
	event_base_free(base);
}


/* Helpers queued when the pool is cancelled are dropped unrun, and pool_withdraw says so (a
 * filling worker then knows not to wait for them); a helper posted after it never runs. */
static void cancel_drops_helpers_and_withdraw_says_so(void **state)
{
	struct event_base *base = event_base_new();
	struct pool *p = pool_new(base, 1);
	struct h_task blocker = { .task = { .work = h_work, .done = h_done }, .block = true };
	struct h_task h1 = { .task = { .work = h_work, .done = NULL } };
	struct h_task h2 = { .task = { .work = h_work, .done = NULL } };

	assert_non_null(p);
	h_seq = 0;
	hold_worker(p, &blocker);
	pool_help(p, &h1.task);
	assert_int_equal(pool_cancel(p), 0);        /* the helper is dropped, not reported */
	pool_help(p, &h2.task);
	assert_true(pool_withdraw(p, &h1.task));
	assert_true(pool_withdraw(p, &h2.task));
	release_worker();
	while (blocker.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	assert_true(pool_free(p, 0));
	assert_int_equal(h1.work_seq, 0);
	assert_int_equal(h2.work_seq, 0);
	event_base_free(base);
}

/* Records the order works ran in (h_seq) and whether it ran inside another task's yield. */
struct f_task {
	struct pool_task task; /* first */
	int seq, done_count;
};

static struct pool *f_pool;
static sem_t f_go, f_running;
static int f_yield_first, f_yield_second;

static void f_work(struct pool_task *t, struct wd_scratch *scratch)
{
	(void)scratch;
	pthread_mutex_lock(&h_lock);
	((struct f_task *)t)->seq = ++h_seq;
	pthread_mutex_unlock(&h_lock);
}

static void f_done(struct pool_task *t)
{
	((struct f_task *)t)->done_count++;
}

/* A long task of owner 1 in steps: between them it offers its worker (pool_yield). */
static void f_long_work(struct pool_task *t, struct wd_scratch *scratch)
{
	sem_post(&f_running);
	sem_wait(&f_go);
	f_yield_first = pool_yield(f_pool, scratch);  /* owner 2's task is due: it runs here */
	f_yield_second = pool_yield(f_pool, scratch); /* only owner 1's own are left: nothing */
	f_work(t, scratch);
}

static void f_init(struct f_task *x, uint32_t owner, uint64_t cost)
{
	memset(x, 0, sizeof(*x));
	x->task.work = f_work;
	x->task.done = f_done;
	x->task.owner = owner;
	x->task.cost = cost;
}

/*
 * Workers serve owners fairly over bytes: with one owner's four 256 MiB tasks queued ahead, a
 * small task of another owner starts after at most one of them, not after all four; and an
 * owner that comes back after others were served starts level with a new owner, not ahead by
 * what it did not ask for meanwhile.
 */
static void owners_are_served_fairly_over_bytes(void **state)
{
	struct event_base *base = event_base_new();
	struct h_task blocker = { .task = { .work = h_work, .done = h_done }, .block = true };
	struct f_task big[4], small, later;
	struct pool *p;

	(void)state;
	assert_non_null(base);
	p = pool_new(base, 1);
	assert_non_null(p);
	h_seq = 0;
	hold_worker(p, &blocker);
	for (int i = 0; i < 4; i++) {
		f_init(&big[i], 1000, 256u << 20);
		pool_submit(p, &big[i].task);
	}
	f_init(&small, 2000, 4096);
	pool_submit(p, &small.task);
	release_worker();
	while (big[3].done_count == 0 || small.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	/* blocker 1; the small one second or third, before the second big one */
	assert_true(small.seq <= 3);
	assert_true(small.seq < big[1].seq);
	for (int i = 1; i < 4; i++)
		assert_true(big[i - 1].seq < big[i].seq); /* one owner's in order */

	/* owner 2000, idle while owner 1000's bytes were served, gets no credit for it: a new
	 * owner's task is not queued behind all of its tasks */
	blocker.work_seq = 0;
	hold_worker(p, &blocker);
	for (int i = 0; i < 3; i++) {
		f_init(&big[i], 2000, 1u << 20);
		pool_submit(p, &big[i].task);
	}
	f_init(&later, 3000, 1u << 20);
	pool_submit(p, &later.task);
	release_worker();
	while (big[2].done_count == 0 || later.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	assert_true(later.seq < big[1].seq);
	assert_true(pool_free(p, 0));
	event_base_free(base);
}

/*
 * A long task that yields between its steps lets another owner's due task run on its worker
 * then and there (its done() still comes on the loop), but never one of its own owner's.
 */
static void a_long_task_yields_to_another_owner_only(void **state)
{
	struct event_base *base = event_base_new();
	struct f_task lng, own, other;

	(void)state;
	assert_non_null(base);
	f_pool = pool_new(base, 1);
	assert_non_null(f_pool);
	h_seq = 0;
	sem_init(&f_go, 0, 0);
	sem_init(&f_running, 0, 0);
	f_init(&lng, 1, 256u << 20);
	lng.task.work = f_long_work;
	f_init(&own, 1, 4096);
	f_init(&other, 2, 4096);
	pool_submit(f_pool, &lng.task);
	sem_wait(&f_running);
	pool_submit(f_pool, &own.task);
	pool_submit(f_pool, &other.task);
	sem_post(&f_go);
	while (lng.done_count == 0 || own.done_count == 0 || other.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	assert_true(f_yield_first);
	assert_false(f_yield_second);
	assert_int_equal(other.seq, 1); /* inside the long one */
	assert_int_equal(lng.seq, 2);
	assert_int_equal(own.seq, 3); /* after it, as queued */
	assert_int_equal(other.done_count, 1);
	assert_true(pool_free(f_pool, 0));
	sem_destroy(&f_go);
	sem_destroy(&f_running);
	event_base_free(base);
}

/* A queued task moves to an owner that would start it sooner (a weight both wait for), and not
 * to one that would start it later. */
static void a_queued_task_moves_to_the_owner_due_first(void **state)
{
	struct event_base *base = event_base_new();
	struct h_task blocker = { .task = { .work = h_work, .done = h_done }, .block = true };
	struct f_task a[3], b;
	struct pool *p;

	(void)state;
	assert_non_null(base);
	p = pool_new(base, 1);
	assert_non_null(p);
	h_seq = 0;
	hold_worker(p, &blocker);
	for (int i = 0; i < 3; i++) {
		f_init(&a[i], 1000, 64u << 20);
		pool_submit(p, &a[i].task);
	}
	f_init(&b, 2000, 64u << 20);
	pool_submit(p, &b.task);
	assert_false(pool_reown(p, &a[0].task, 2000)); /* first already */
	assert_true(pool_reown(p, &a[2].task, 3000));  /* owner 3000 has nothing queued */
	assert_int_equal(a[2].task.owner, 3000);
	assert_false(pool_reown(p, &blocker.task, 3000)); /* running */
	release_worker();
	while (a[1].done_count == 0 || a[2].done_count == 0 || b.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	assert_true(a[2].seq < a[1].seq);
	assert_true(pool_free(p, 0));
	event_base_free(base);
}

/* Two stores a task may wait on, and what a stalled task's yields ran. */
static const int store_a, store_b;
static int s_yield[3];

/* A task waiting on store_a that stalls: it offers its worker three times. */
static void s_stalled_work(struct pool_task *t, struct wd_scratch *scratch)
{
	sem_post(&f_running);
	sem_wait(&f_go);
	for (int i = 0; i < 3; i++)
		s_yield[i] = pool_yield_stalled(f_pool, scratch, &store_a);
	f_work(t, scratch);
}

/*
 * A task stalled on a store runs queued work of its own owner too, local or waiting on another
 * store, but never a task that waits on the same store (which would stall as well); the
 * skipped one runs after, as queued.
 */
static void a_stalled_task_runs_other_work_but_not_the_same_stores(void **state)
{
	struct event_base *base = event_base_new();
	struct f_task stalled, same, local, other;

	(void)state;
	assert_non_null(base);
	f_pool = pool_new(base, 1);
	assert_non_null(f_pool);
	h_seq = 0;
	sem_init(&f_go, 0, 0);
	sem_init(&f_running, 0, 0);
	f_init(&stalled, 1, 4096);
	stalled.task.work = s_stalled_work;
	stalled.task.waits_on = &store_a;
	f_init(&same, 1, 4096);
	same.task.waits_on = &store_a;
	f_init(&local, 1, 4096);
	f_init(&other, 1, 4096);
	other.task.waits_on = &store_b;
	pool_submit(f_pool, &stalled.task);
	sem_wait(&f_running);
	pool_submit(f_pool, &same.task);
	pool_submit(f_pool, &local.task);
	pool_submit(f_pool, &other.task);
	sem_post(&f_go);
	while (!stalled.done_count || !same.done_count || !local.done_count || !other.done_count)
		event_base_loop(base, EVLOOP_ONCE);
	assert_true(s_yield[0]);
	assert_true(s_yield[1]);
	assert_false(s_yield[2]);
	assert_int_equal(local.seq, 1); /* inside the stalled one, in queue order */
	assert_int_equal(other.seq, 2);
	assert_int_equal(stalled.seq, 3);
	assert_int_equal(same.seq, 4);
	assert_true(pool_free(f_pool, 0));
	sem_destroy(&f_go);
	sem_destroy(&f_running);
	event_base_free(base);
}

/* A detached task runs on a thread of its own while every worker is busy; its done() comes on
 * the loop, and pool_free waits for it. */
static void a_detached_task_needs_no_worker(void **state)
{
	struct event_base *base = event_base_new();
	struct h_task blocker = { .task = { .work = h_work, .done = h_done }, .block = true };
	struct f_task d;
	struct pool *p;

	(void)state;
	assert_non_null(base);
	p = pool_new(base, 1);
	assert_non_null(p);
	h_released = h_blocking = false;
	h_seq = 0;
	pool_submit(p, &blocker.task);
	pthread_mutex_lock(&h_lock);
	while (!h_blocking)
		pthread_cond_wait(&h_cond, &h_lock);
	pthread_mutex_unlock(&h_lock);
	f_init(&d, POOL_OWNER_SELF, 0);
	pool_detach(p, &d.task);
	while (d.done_count == 0)
		event_base_loop(base, EVLOOP_ONCE);
	assert_int_equal(d.seq, 1); /* while the only worker is still blocked */
	assert_false(d.task.cancelled);
	pthread_mutex_lock(&h_lock);
	h_released = true;
	pthread_cond_broadcast(&h_cond);
	pthread_mutex_unlock(&h_lock);
	assert_true(pool_free(p, 0));
	event_base_free(base);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(every_task_finishes_on_the_loop_thread),
	  cmocka_unit_test(cancel_skips_queued_work),
	  cmocka_unit_test(worker_buffers_are_made_on_use_and_given_back),
	  cmocka_unit_test(default_worker_count_is_capped),
	  cmocka_unit_test(busy_workers_are_abandoned_after_the_grace),
	  cmocka_unit_test(helpers_queue_behind_can_be_withdrawn_and_get_no_done),
	  cmocka_unit_test(cancel_drops_helpers_and_withdraw_says_so),
	  cmocka_unit_test(owners_are_served_fairly_over_bytes),
	  cmocka_unit_test(a_long_task_yields_to_another_owner_only),
	  cmocka_unit_test(a_queued_task_moves_to_the_owner_due_first),
	  cmocka_unit_test(a_stalled_task_runs_other_work_but_not_the_same_stores),
	  cmocka_unit_test(a_detached_task_needs_no_worker),
	  cmocka_unit_test(a_completion_whose_wakeup_write_fails_still_finishes))
