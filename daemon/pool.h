/* pool.h - a fixed pool of worker threads for disk reads, hashing and conversion. */
#ifndef WD_POOL_H
#define WD_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "sink.h"

struct event_base;
struct pool;

/*
 * A task runs `work(task, scratch)` on a worker thread (scratch is that thread's warm bounce
 * buffers), then `done(task)` on the main thread. Tasks are owned by the submitter; the pool only
 * links them through `next`.
 */
struct pool_task {
	void (*work)(struct pool_task *t, struct wd_scratch *scratch);
	void (*done)(struct pool_task *t);
	struct pool_task *next;
	bool queued;                     /* the pool's: waiting in the queue (under its lock) */
};

/*
 * Start `nthreads` workers. Completion is signalled to the main loop through an eventfd watched by
 * `base`, so done() always runs on the thread that runs the loop. Returns NULL on failure.
 */
struct pool *pool_new(struct event_base *base, unsigned nthreads);

/* Queue a task (main thread). Never fails: the queue is an intrusive list. */
void pool_submit(struct pool *p, struct pool_task *t);

/*
 * From a worker: queue a helper task at the back, to run on the first worker with nothing else
 * to do (a job that fills one large weight posts helpers that claim parts of it). At the back,
 * so that workers take whole weights of their own before they share one: writes into one
 * shared-memory object serialize on its inode lock. Its done must be NULL: the pool never
 * touches a helper after its work returns, nor counts it as pending. Its owner must
 * pool_withdraw it (or see its work finish) before freeing it.
 */
void pool_help(struct pool *p, struct pool_task *t);
/* Take a helper out of the queue if no worker has started it: true if withdrawn (its work will
 * never run), false if its work has started or finished. */
bool pool_withdraw(struct pool *p, struct pool_task *t);

/* Tasks queued or running. */
size_t pool_pending(const struct pool *p);
unsigned pool_threads(const struct pool *p);

/* Stop the workers after the tasks already running; queued tasks are completed (done() called with
 * their work skipped is not possible, so they run) before threads exit. Accepts NULL. */
void pool_free(struct pool *p);

#endif
