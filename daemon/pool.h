/* pool.h - a fixed pool of worker threads for disk reads, hashing and conversion. */
#ifndef WD_POOL_H
#define WD_POOL_H

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
};

/*
 * Start `nthreads` workers. Completion is signalled to the main loop through an eventfd watched by
 * `base`, so done() always runs on the thread that runs the loop. Returns NULL on failure.
 */
struct pool *pool_new(struct event_base *base, unsigned nthreads);

/* Queue a task (main thread). Never fails: the queue is an intrusive list. */
void pool_submit(struct pool *p, struct pool_task *t);

/* Tasks queued or running. */
size_t pool_pending(const struct pool *p);
unsigned pool_threads(const struct pool *p);

/* Stop the workers after the tasks already running; queued tasks are completed (done() called with
 * their work skipped is not possible, so they run) before threads exit. Accepts NULL. */
void pool_free(struct pool *p);

#endif
