/* SPDX-License-Identifier: Apache-2.0 */
/* pool.h - a fixed pool of worker threads for disk reads, hashing and conversion. */
#ifndef WD_POOL_H
#define WD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>

#include "sink.h"

struct event_base;
struct pool;

/*
 * A task runs `work(task, scratch)` on a worker thread (scratch is that thread's bounce buffers,
 * NULL if they could not be had), then `done(task)` on the main thread. A task cancelled before
 * it started (pool_cancel) skips work() and reaches done() with `cancelled` set. Tasks are owned
 * by the submitter; the pool only links them through `link`.
 */
struct pool_task {
	void (*work)(struct pool_task *t, struct wd_scratch *scratch);
	void (*done)(struct pool_task *t);
	STAILQ_ENTRY(pool_task) link;
	bool cancelled;
	bool queued;                     /* the pool's: waiting in the queue (under its lock) */
	unsigned jobs;                   /* what pool_cancel counts it as (0: one) */
};

/* The default worker count is the number of online CPUs, at most this: fills are bound by memory
 * bandwidth long before, and each busy worker holds buffers of its own (wd_scratch_init). */
#define POOL_MAX_DEFAULT_THREADS 8u

/* A worker gives its buffers back after this long without work. */
#define POOL_IDLE_MS 30000u

/* min(online CPUs, POOL_MAX_DEFAULT_THREADS). */
unsigned pool_default_threads(void);

/*
 * Start `nthreads` workers (0: pool_default_threads()). Completion is signalled to the main loop through an eventfd watched by
 * `base`, so done() always runs on the thread that runs the loop. Returns NULL on failure.
 */
struct pool *pool_new(struct event_base *base, unsigned nthreads);

/* Queue a task (main thread). Never fails: the queue is an intrusive list. After pool_cancel
 * the task is cancelled at once (its done() runs from the loop, never from inside this call). */
void pool_submit(struct pool *p, struct pool_task *t);

/* Stopping: every queued task that has not started is cancelled, and so is every later one.
 * Running tasks go on. A task without done() is dropped. Returns how many jobs done() will report
 * cancelled (a task counts as its `jobs`, or one). Main thread. */
size_t pool_cancel(struct pool *p);

/* Run done() of every task finished or cancelled so far, now (main thread), instead of on the
 * loop's next turn: a stop uses it to answer cancelled requests before closing connections. */
void pool_dispatch(struct pool *p);

/* Tests: how long an idle worker keeps its buffers. */
void pool_set_idle_ms(struct pool *p, unsigned ms);

/*
 * From a worker: queue a helper task at the back, to run on the first worker with nothing else
 * to do (a job that fills one large weight posts helpers that claim parts of it). At the back,
 * so that workers take whole weights of their own before they share one: writes into one
 * shared-memory object serialize on its inode lock. Its done must be NULL: the pool never
 * touches a helper after its work returns, nor counts it as pending, and pool_cancel drops it
 * unrun. Its owner must pool_withdraw it (or see its work finish) before freeing it.
 */
void pool_help(struct pool *p, struct pool_task *t);
/* Take a helper out of the queue if no worker has started it: true if its work will never run
 * (withdrawn now, or dropped by pool_cancel), false if its work has started or finished. */
bool pool_withdraw(struct pool *p, struct pool_task *t);

/* Tasks queued or running. */
size_t pool_pending(const struct pool *p);
unsigned pool_threads(const struct pool *p);

/*
 * Stop the workers: each finishes the task it runs and takes any still queued (pool_cancel first
 * to skip those). grace_ms 0 waits for all; otherwise workers still busy after grace_ms are
 * abandoned: false is returned, and the pool and the tasks they run must stay allocated until the
 * process exits (or until a later pool_free, which may be called again and waits as asked).
 * done() runs for every task that finished or was cancelled. Accepts NULL.
 */
bool pool_free(struct pool *p, unsigned grace_ms);

#endif
