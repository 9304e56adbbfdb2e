/* SPDX-License-Identifier: Apache-2.0 */
/* pool.h - a fixed pool of worker threads for disk reads, hashing and conversion. */
#ifndef WD_POOL_H
#define WD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "sink.h"

struct event_base;
struct pool;
struct pool_flow;

/*
 * A task runs `work(task, scratch)` on a worker thread (scratch is that thread's bounce buffers,
 * NULL if they could not be had), then `done(task)` on the main thread. A task cancelled before
 * it started (pool_cancel) skips work() and reaches done() with `cancelled` set. Tasks are owned
 * by the submitter; the pool only links them through `link`.
 *
 * Workers serve the owners of queued tasks fairly (start-time fair queueing over bytes): each
 * task is charged its `cost` to its `owner`, and the next task to start is the one whose owner
 * has been charged least since it began to wait (an owner that had nothing queued starts level
 * with the task started last: idle time is not banked). One owner's queue of large fills thus
 * waits behind another owner's small request, not the other way round.
 */
struct pool_task {
	void (*work)(struct pool_task *t, struct wd_scratch *scratch);
	void (*done)(struct pool_task *t);
	TAILQ_ENTRY(pool_task) link;
	bool cancelled;
	bool queued;                     /* the pool's: waiting in the queue (under its lock) */
	unsigned jobs;                   /* what pool_cancel counts it as (0: one) */
	uint32_t owner; /* whose share it is served from (a uid, or POOL_OWNER_SELF) */
	uint64_t cost;	/* bytes it writes: what its owner is charged */
	/* what it waits on besides cores and memory: the remote location it reads (any pointer
	 * naming it), or NULL for local work (pool_yield_stalled) */
	const void *waits_on;
	/* the pool's, under its lock */
	uint64_t start, finish; /* its virtual start and finish (pool.c) */
	struct pool_flow *flow; /* the owner's queue it waits in */
};

/* The owner of work weightd does for itself (preloads, reloads). */
#define POOL_OWNER_SELF UINT32_MAX

/* What a task is charged at least, whatever its cost: handing it to a worker is not free. */
#define POOL_MIN_COST (64u << 10)

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
 * From a worker: queue a helper task, to run on the first worker with nothing else to do (a job
 * that fills one large weight posts helpers that claim parts of it). It is the owner's of the
 * task that worker runs (of t->owner when called from any other thread) and costs nothing (the
 * job that posts it was charged its bytes); it waits behind that owner's other queued tasks, so
 * that workers take whole weights of their own before they share one: writes into one
 * shared-memory object serialize on its inode lock. Its done must be NULL: the pool never
 * touches a helper after its work returns, nor counts it as pending, and pool_cancel drops it
 * unrun. Its owner must pool_withdraw it (or see its work finish) before freeing it.
 */
void pool_help(struct pool *p, struct pool_task *t);
/* Take a helper out of the queue if no worker has started it: true if its work will never run
 * (withdrawn now, or dropped by pool_cancel), false if its work has started or finished. */
bool pool_withdraw(struct pool *p, struct pool_task *t);

/*
 * From a worker between two steps of a long task (the chunks of a large fill): if another owner
 * has a task queued that would start before the running task finishes (its virtual start is
 * earlier than the running task's virtual finish), run it now on this worker with `scratch`,
 * then return true; the long task goes on after. So a small request waits for about one step of
 * another owner's long task, not for all of it. A task run this way does not yield in turn.
 * scratch must not hold anything of the caller's between its steps. False when nothing ran.
 */
bool pool_yield(struct pool *p, struct wd_scratch *scratch);

/*
 * From a worker whose task waits on the network with nothing arriving (a stalled or hung
 * store): run the queued task that would start next, of any owner (this worker's own
 * included), that does not wait on `waits_on` too, now on this worker with `scratch`, then
 * return true; the stalled task goes on after. So a hung store holds no worker from a local
 * checkpoint's get, nor from another store's, for longer than the stall is noticed
 * (WD_REMOTE_STALL_MS). A task run this way may do the same when it stalls in turn, up to
 * POOL_STALL_DEPTH tasks deep; it does not pool_yield. Up to POOL_STALL_SCAN tasks of each
 * owner's queue are looked at. False when nothing ran.
 */
#define POOL_STALL_DEPTH 3u
#define POOL_STALL_SCAN	 64u
bool pool_yield_stalled(struct pool *p, struct wd_scratch *scratch, const void *waits_on);

/*
 * A task that mostly waits on the network (a reload reading remote headers): t->work runs on a
 * thread of its own, never a worker, with a NULL scratch; then t->done on the main thread as
 * for pool_submit (cancelled at once when the pool is stopping). pool_free waits for it as for
 * a worker (abandoning it after its grace period).
 */
void pool_detach(struct pool *p, struct pool_task *t);

/* Change the owner of a task still queued to `owner` when that owner would start it sooner (a
 * weight another uid also waits for). Main thread. True if it moved. */
bool pool_reown(struct pool *p, struct pool_task *t, uint32_t owner);

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
