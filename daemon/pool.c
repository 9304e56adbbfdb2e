/* SPDX-License-Identifier: Apache-2.0 */
/* pool.c - worker threads fed by a mutex-protected queue, served fairly between the tasks' owners;
 * completions return through an eventfd. */
#include "pool.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "log.h"
#include "pagedrop.h"

TAILQ_HEAD(pool_tasks, pool_task);

/*
 * One owner's queued tasks, in the order they came. Virtual time counts bytes: a task starts
 * (virtually) when its owner's earlier tasks are paid for, and not before the pool's virtual
 * clock, `vnow`, the virtual start of the task that started last; it finishes its cost later.
 * Workers take the queued task with the earliest virtual start. A flow with nothing queued is
 * kept while its last task's finish lies ahead of vnow (what it was charged still counts), then
 * freed: at most one flow per owner with work queued or just started.
 */
struct pool_flow {
	uint32_t owner;
	uint64_t last; /* virtual finish of its last task queued */
	struct pool_tasks queue;
	LIST_ENTRY(pool_flow) link;
};

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;             /* work queued, or stop */
	pthread_cond_t exited;           /* a worker left (pool_free waits on it) */
	LIST_HEAD(, pool_flow) flows;
	struct pool_flow *recent; /* the flow found last (submissions come in runs) */
	struct pool_flow spare;	  /* shared by every owner whose flow could not be allocated */
	uint64_t vnow;		  /* virtual start of the task started last */
	size_t nqueued;		  /* tasks in every flow */
	struct pool_tasks done;          /* finished, waiting for the main thread */
	size_t pending;                  /* main thread's count: submitted, done() not yet run */
	unsigned detached;               /* pool_detach threads running (under lock) */
	bool stop;
	bool cancelled;                  /* pool_cancel ran: queued and later tasks are skipped */
	unsigned nthreads;
	unsigned live;                   /* workers not yet returned */
	unsigned idle_ms;                /* scratch is given back after this long without work */
	pthread_t *threads;
	int efd;
	struct event *ev;
};

/* The task this worker runs, and whether it runs inside another's pool_yield. */
static __thread struct pool_task *tl_running;
static __thread bool tl_nested;	    /* inside pool_yield */
static __thread unsigned tl_stalled; /* pool_yield_stalled calls this thread is inside */

/* Lock held: hand a task to the main thread. */
static void push_done(struct pool *p, struct pool_task *t)
{
	uint64_t one = 1;

	TAILQ_INSERT_TAIL(&p->done, t, link);
	/* A wake-up lost is a request never answered: a write that failed (EAGAIN: the counter is
	 * full, so the loop is woken already) is tried again. */
	for (int tries = 0; write(p->efd, &one, sizeof(one)) < 0 && errno != EAGAIN; tries++) {
		if (tries == 1000) {
			log_err("worker: eventfd write failed: %s", strerror(errno));
			break;
		}
	}
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Lock held: the flow of `owner`, made if it has none (the spare when out of memory). */
static struct pool_flow *flow_of(struct pool *p, uint32_t owner)
{
	struct pool_flow *f = p->recent;

	if (f && f->owner == owner)
		return f;
	LIST_FOREACH(f, &p->flows, link)
	if (f->owner == owner)
		goto found;
	f = calloc(1, sizeof(*f));
	if (!f)
		return &p->spare;
	f->owner = owner;
	TAILQ_INIT(&f->queue);
	LIST_INSERT_HEAD(&p->flows, f, link);
found:
	p->recent = f;
	return f;
}

/* Lock held: what flow_of would find, without making one. */
static struct pool_flow *flow_find(struct pool *p, uint32_t owner)
{
	struct pool_flow *f;

	LIST_FOREACH(f, &p->flows, link)
	if (f->owner == owner)
		return f;
	return NULL;
}

/* Lock held: queue t at the back of its owner's flow, charged `cost`. */
static void enqueue(struct pool *p, struct pool_task *t, uint64_t cost)
{
	struct pool_flow *f = flow_of(p, t->owner);

	t->start = max64(p->vnow, f->last);
	t->finish = t->start + cost;
	f->last = t->finish;
	t->flow = f;
	TAILQ_INSERT_TAIL(&f->queue, t, link);
	t->queued = true;
	p->nqueued++;
}

/* Lock held: take t out of its flow. */
static void unqueue(struct pool *p, struct pool_task *t)
{
	TAILQ_REMOVE(&t->flow->queue, t, link);
	t->queued = false;
	p->nqueued--;
}

/*
 * Lock held: the queued task to start next, the earliest virtual start of any flow's first (a
 * flow's tasks start in order). With `other`, only among owners other than its owner's, and only
 * one that starts before `other` finishes. Flows with nothing queued and nothing charged ahead of
 * vnow are freed on the way. Linear in the flows: one per owner with work queued.
 */
static struct pool_task *pick(struct pool *p, const struct pool_task *other)
{
	struct pool_flow *f, *next;
	struct pool_task *best = NULL;

	for (f = LIST_FIRST(&p->flows); f; f = next) {
		struct pool_task *t = TAILQ_FIRST(&f->queue);

		next = LIST_NEXT(f, link);
		if (!t) {
			if (f->last <= p->vnow) {
				if (p->recent == f)
					p->recent = NULL;
				LIST_REMOVE(f, link);
				free(f);
			}
			continue;
		}
		if (other && (f->owner == other->owner || t->start >= other->finish))
			continue;
		if (!best || t->start < best->start)
			best = t;
	}
	if (TAILQ_FIRST(&p->spare.queue) && !other) {
		struct pool_task *t = TAILQ_FIRST(&p->spare.queue);

		if (!best || t->start < best->start)
			best = t;
	}
	if (best) {
		unqueue(p, best);
		p->vnow = max64(p->vnow, best->start);
	}
	return best;
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

		while (!p->nqueued && !p->stop) {
			struct timespec ts;

			if (!have) {
				pthread_cond_wait(&p->cond, &p->lock);
				continue;
			}
			ts = wd_clock_deadline(p->idle_ms);
			if (pthread_cond_timedwait(&p->cond, &p->lock, &ts) == ETIMEDOUT &&
			    !p->nqueued) {
				pthread_mutex_unlock(&p->lock);
				wd_scratch_free(&scratch);
				have = false;
				pthread_mutex_lock(&p->lock);
			}
		}
		t = p->nqueued ? pick(p, NULL) : NULL;
		if (!t)
			break;
		helper = !t->done;
		pthread_mutex_unlock(&p->lock);
		WD_FAULT_CRASH("weightd/pool/taken");

		if (!have) {
			have = wd_scratch_init(&scratch, WD_SCRATCH_BYTES) == 0;
			if (!have)
				log_err("worker: cannot allocate its %u-byte buffers",
					(unsigned)WD_SCRATCH_BYTES);
		}
		tl_running = t;
		wd_pagedrop_pause(); /* page-cache drops wait for the copies */
		t->work(t, have ? &scratch : NULL);
		wd_pagedrop_resume();
		tl_running = NULL;

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
	struct pool_tasks list = TAILQ_HEAD_INITIALIZER(list);
	struct pool_task *t;
	uint64_t n;

	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_err("pool: eventfd read failed");
	/* Again while a done() submitted a task that was cancelled at once (a stop): its done() is
	 * due now too, and no later turn of the loop may come. */
	for (;;) {
		pthread_mutex_lock(&p->lock);
		TAILQ_CONCAT(&list, &p->done, link);
		pthread_mutex_unlock(&p->lock);
		if (TAILQ_EMPTY(&list))
			break;
		while ((t = TAILQ_FIRST(&list))) {
			TAILQ_REMOVE(&list, t, link);
			p->pending--;
			t->done(t);
		}
		if (!p->cancelled)
			break;
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
	LIST_INIT(&p->flows);
	TAILQ_INIT(&p->spare.queue);
	p->spare.owner = POOL_OWNER_SELF;
	TAILQ_INIT(&p->done);
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
	enqueue(p, t, max64(t->cost, POOL_MIN_COST));
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
	if (tl_running)
		t->owner = tl_running->owner;
	enqueue(p, t, 0);
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

bool pool_withdraw(struct pool *p, struct pool_task *t)
{
	bool found = false;

	pthread_mutex_lock(&p->lock);
	if (t->queued) {             /* queued is true exactly while it is in the queue */
		unqueue(p, t);
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
	while ((t = p->nqueued ? pick(p, NULL) : NULL)) {
		t->cancelled = true;
		if (!t->done)
			continue; /* nobody waits for it (a fill helper): dropped */
		push_done(p, t);
		n += t->jobs ? t->jobs : 1;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

/*
 * Run t, just taken from the queue, on this worker in place of `cur` (nested in a yield, or in a
 * stalled task's wait when `stalled`), then queue its done() for the loop (a helper has none):
 * true.
 */
static bool run_in_place(struct pool *p, struct pool_task *t, struct pool_task *cur,
			 struct wd_scratch *scratch, bool stalled)
{
	bool helper = !t->done;

	tl_running = t;
	if (stalled)
		tl_stalled++;
	else
		tl_nested = true;
	t->work(t, scratch);
	if (stalled)
		tl_stalled--;
	else
		tl_nested = false;
	tl_running = cur;
	if (helper)
		return true; /* its owner may already have freed it */
	pthread_mutex_lock(&p->lock);
	push_done(p, t);
	pthread_mutex_unlock(&p->lock);
	return true;
}

bool pool_yield(struct pool *p, struct wd_scratch *scratch)
{
	struct pool_task *cur = tl_running, *t;

	if (!cur || tl_nested || tl_stalled || !__atomic_load_n(&p->nqueued, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&p->lock);
	t = p->nqueued ? pick(p, cur) : NULL;
	pthread_mutex_unlock(&p->lock);
	return t && run_in_place(p, t, cur, scratch, false);
}

/*
 * Lock held: the queued task with the earliest virtual start that does not wait on `key`,
 * looking at up to POOL_STALL_SCAN tasks of each queue (a task skipped stays in its place).
 */
static struct pool_task *pick_not_waiting_on(struct pool *p, const void *key)
{
	struct pool_flow *f;
	struct pool_task *best = NULL;

	for (f = LIST_FIRST(&p->flows);; f = LIST_NEXT(f, link)) {
		struct pool_flow *q = f ? f : &p->spare;
		struct pool_task *t;
		unsigned seen = 0;

		TAILQ_FOREACH(t, &q->queue, link) {
			if (++seen > POOL_STALL_SCAN)
				break;
			if (key && t->waits_on == key)
				continue;
			if (!best || t->start < best->start)
				best = t;
			break; /* the rest of this queue starts later */
		}
		if (!f)
			break;
	}
	if (best) {
		unqueue(p, best);
		p->vnow = max64(p->vnow, best->start);
	}
	return best;
}

bool pool_yield_stalled(struct pool *p, struct wd_scratch *scratch, const void *waits_on)
{
	struct pool_task *cur = tl_running, *t;

	if (!p || !cur || !scratch || tl_nested || tl_stalled >= POOL_STALL_DEPTH ||
	    !__atomic_load_n(&p->nqueued, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&p->lock);
	t = p->nqueued ? pick_not_waiting_on(p, waits_on) : NULL;
	pthread_mutex_unlock(&p->lock);
	return t && run_in_place(p, t, cur, scratch, true);
}

/* A detached task's thread: its work, then its done() queued for the main thread. */
struct detached {
	struct pool *p;
	struct pool_task *t;
};

static void *detached_run(void *arg)
{
	struct detached *d = arg;
	struct pool *p = d->p;
	struct pool_task *t = d->t;

	free(d);
	t->work(t, NULL);
	pthread_mutex_lock(&p->lock);
	push_done(p, t);
	p->detached--;
	pthread_cond_broadcast(&p->exited);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void pool_detach(struct pool *p, struct pool_task *t)
{
	struct detached *d = malloc(sizeof(*d));
	pthread_attr_t attr;
	pthread_t th;
	int rc = -1;

	t->cancelled = false;
	t->waits_on = NULL;
	pthread_mutex_lock(&p->lock);
	p->pending++;
	if (!p->cancelled && !p->stop && d) {
		*d = (struct detached){ p, t };
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&th, &attr, detached_run, d);
		pthread_attr_destroy(&attr);
		if (rc == 0)
			p->detached++;
	}
	if (rc != 0) {
		/* stopping, or no thread to be had: cancelled, as a stopping pool cancels */
		free(d);
		t->cancelled = true;
		push_done(p, t);
	}
	pthread_mutex_unlock(&p->lock);
}

bool pool_reown(struct pool *p, struct pool_task *t, uint32_t owner)
{
	struct pool_flow *f;
	bool moved = false;

	pthread_mutex_lock(&p->lock);
	if (t->queued && t->owner != owner) {
		f = flow_find(p, owner);
		if (max64(p->vnow, f ? f->last : 0) < t->start) {
			unqueue(p, t);
			t->owner = owner;
			enqueue(p, t, t->finish - t->start);
			moved = true;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return moved;
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
		while (p->live > 0 || p->detached > 0)
			if (pthread_cond_timedwait(&p->exited, &p->lock, &ts) == ETIMEDOUT)
				break;
		left = p->live + p->detached;
		all = left == 0;
	} else {
		while (p->detached > 0) /* workers are joined below */
			pthread_cond_wait(&p->exited, &p->lock);
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
	while (!LIST_EMPTY(&p->flows)) {
		struct pool_flow *f = LIST_FIRST(&p->flows);

		LIST_REMOVE(f, link);
		free(f);
	}
	pthread_cond_destroy(&p->cond);
	pthread_cond_destroy(&p->exited);
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p);
	return true;
}
