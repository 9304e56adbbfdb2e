/* SPDX-License-Identifier: Apache-2.0 */
/* pool.c - worker threads fed by a mutex-protected queue; completions return through an eventfd. */
#include "pool.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

STAILQ_HEAD(pool_tasks, pool_task);

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;             /* work queued, or stop */
	pthread_cond_t exited;           /* a worker left (pool_free waits on it) */
	struct pool_tasks queue;         /* queued work */
	struct pool_tasks done;          /* finished, waiting for the main thread */
	size_t pending;                  /* main thread's count: submitted, done() not yet run */
	bool stop;
	bool cancelled;                  /* pool_cancel ran: queued and later tasks are skipped */
	unsigned nthreads;
	unsigned live;                   /* workers not yet returned */
	unsigned idle_ms;                /* scratch is given back after this long without work */
	pthread_t *threads;
	int efd;
	struct event *ev;
};

/* Lock held: hand a task to the main thread. */
static void push_done(struct pool *p, struct pool_task *t)
{
	uint64_t one = 1;

	STAILQ_INSERT_TAIL(&p->done, t, link);
	if (write(p->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_err("worker: eventfd write failed");
}

/*
 * A worker's bounce buffers and hasher (WD_SCRATCH_BYTES x 2 plus the hasher's slots) are made
 * when its first task arrives and given back after idle_ms without work, so an idle daemon holds
 * none of them whatever its worker count.
 */
static void *worker_main(void *arg)
{
	struct pool *p = arg;
	struct wd_scratch scratch = { 0 };
	bool have = false;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct pool_task *t;
		bool helper;

		while (STAILQ_EMPTY(&p->queue) && !p->stop) {
			struct timespec ts;

			if (!have) {
				pthread_cond_wait(&p->cond, &p->lock);
				continue;
			}
			ts = wd_clock_deadline(p->idle_ms);
			if (pthread_cond_timedwait(&p->cond, &p->lock, &ts) == ETIMEDOUT &&
			    STAILQ_EMPTY(&p->queue)) {
				pthread_mutex_unlock(&p->lock);
				wd_scratch_free(&scratch);
				have = false;
				pthread_mutex_lock(&p->lock);
			}
		}
		if (STAILQ_EMPTY(&p->queue))
			break;
		t = STAILQ_FIRST(&p->queue);
		STAILQ_REMOVE_HEAD(&p->queue, link);
		t->queued = false;
		helper = !t->done;
		pthread_mutex_unlock(&p->lock);

		if (!have) {
			have = wd_scratch_init(&scratch, WD_SCRATCH_BYTES) == 0;
			if (!have)
				log_err("worker: cannot allocate its %u-byte buffers",
					(unsigned)WD_SCRATCH_BYTES);
		}
		t->work(t, have ? &scratch : NULL);

		pthread_mutex_lock(&p->lock);
		if (helper)
			continue;   /* its owner may already have freed it */
		push_done(p, t);
	}
	p->live--;
	pthread_cond_broadcast(&p->exited);
	pthread_mutex_unlock(&p->lock);
	wd_scratch_free(&scratch);
	return NULL;
}

/* Main thread: run done() of every finished (or cancelled) task. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;
	struct pool_tasks list = STAILQ_HEAD_INITIALIZER(list);
	struct pool_task *t;
	uint64_t n;

	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_err("pool: eventfd read failed");
	pthread_mutex_lock(&p->lock);
	STAILQ_CONCAT(&list, &p->done);
	pthread_mutex_unlock(&p->lock);
	while ((t = STAILQ_FIRST(&list))) {
		STAILQ_REMOVE_HEAD(&list, link);
		p->pending--;
		t->done(t);
	}
}

unsigned pool_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return n > POOL_MAX_DEFAULT_THREADS ? POOL_MAX_DEFAULT_THREADS : (unsigned)n;
}

struct pool *pool_new(struct event_base *base, unsigned nthreads)
{
	struct pool *p = calloc(1, sizeof(*p));
	pthread_condattr_t ca;

	if (!p)
		return NULL;
	if (nthreads == 0)
		nthreads = pool_default_threads();
	p->idle_ms = POOL_IDLE_MS;
	STAILQ_INIT(&p->queue);
	STAILQ_INIT(&p->done);
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_cond_init(&p->exited, &ca);
	pthread_condattr_destroy(&ca);
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	p->threads = calloc(nthreads, sizeof(*p->threads));
	if (p->efd < 0 || !p->threads)
		goto fail;
	p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, on_done, p);
	if (!p->ev || event_add(p->ev, NULL))
		goto fail;
	for (unsigned i = 0; i < nthreads; i++) {
		if (pthread_create(&p->threads[i], NULL, worker_main, p))
			goto fail;
		p->nthreads++;
		pthread_mutex_lock(&p->lock);
		p->live++;
		pthread_mutex_unlock(&p->lock);
	}
	return p;
fail:
	pool_free(p, 0);
	return NULL;
}

void pool_set_idle_ms(struct pool *p, unsigned ms)
{
	pthread_mutex_lock(&p->lock);
	p->idle_ms = ms ? ms : 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void pool_submit(struct pool *p, struct pool_task *t)
{
	t->cancelled = false;
	pthread_mutex_lock(&p->lock);
	p->pending++;
	if (p->cancelled) {
		t->cancelled = true;
		push_done(p, t);
		pthread_mutex_unlock(&p->lock);
		return;
	}
	STAILQ_INSERT_TAIL(&p->queue, t, link);
	t->queued = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void pool_help(struct pool *p, struct pool_task *t)
{
	pthread_mutex_lock(&p->lock);
	t->cancelled = p->cancelled;
	t->queued = false;
	if (t->cancelled) {          /* stopping: it never runs */
		pthread_mutex_unlock(&p->lock);
		return;
	}
	STAILQ_INSERT_TAIL(&p->queue, t, link);
	t->queued = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

bool pool_withdraw(struct pool *p, struct pool_task *t)
{
	bool found = false;

	pthread_mutex_lock(&p->lock);
	if (t->queued) {             /* queued is true exactly while it is in the queue */
		STAILQ_REMOVE(&p->queue, t, pool_task, link);
		t->queued = false;
		found = true;
	}
	found = found || t->cancelled;   /* pool_cancel dropped it: it never ran */
	pthread_mutex_unlock(&p->lock);
	return found;
}

size_t pool_cancel(struct pool *p)
{
	struct pool_task *t;
	size_t n = 0;

	pthread_mutex_lock(&p->lock);
	p->cancelled = true;
	while ((t = STAILQ_FIRST(&p->queue))) {
		STAILQ_REMOVE_HEAD(&p->queue, link);
		t->cancelled = true;
		t->queued = false;
		if (!t->done)
			continue; /* nobody waits for it (a fill helper): dropped */
		push_done(p, t);
		n += t->jobs ? t->jobs : 1;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

void pool_dispatch(struct pool *p)
{
	on_done(p->efd, EV_READ, p);
}

size_t pool_pending(const struct pool *p)
{
	return p->pending;
}

unsigned pool_threads(const struct pool *p)
{
	return p->nthreads;
}

bool pool_free(struct pool *p, unsigned grace_ms)
{
	struct timespec ts;
	unsigned left = 0;
	bool all = true;

	if (!p)
		return true;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	if (grace_ms) {
		ts = wd_clock_deadline(grace_ms);
		while (p->live > 0)
			if (pthread_cond_timedwait(&p->exited, &p->lock, &ts) == ETIMEDOUT)
				break;
		left = p->live;
		all = left == 0;
	}
	pthread_mutex_unlock(&p->lock);
	if (all)
		for (unsigned i = 0; i < p->nthreads; i++)
			pthread_join(p->threads[i], NULL);
	/* Finished and cancelled tasks whose done() never ran still belong to their submitters:
	 * run them now so nothing they hold leaks. */
	if (p->ev)
		on_done(p->efd, EV_READ, p);
	if (!all) {
		/* Workers still run tasks that use the pool and their submitters' memory: leave both
		 * for the process exit. */
		log_warn("abandoning %u workers still busy after %u ms", left, grace_ms);
		return false;
	}
	if (p->ev)
		event_free(p->ev);
	if (p->efd >= 0)
		close(p->efd);
	pthread_cond_destroy(&p->cond);
	pthread_cond_destroy(&p->exited);
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p);
	return true;
}
