/* pool.c - worker threads fed by a mutex-protected queue; completions return through an eventfd. */
#include "pool.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct pool_task *head, *tail;   /* queued work */
	struct pool_task *done_head, *done_tail; /* finished, waiting for the main thread */
	size_t pending;                  /* main thread's count: submitted, done() not yet run */
	bool stop;
	unsigned nthreads;
	pthread_t *threads;
	int efd;
	struct event *ev;
};

static void *worker_main(void *arg)
{
	struct pool *p = arg;
	struct wd_scratch scratch;
	uint64_t one = 1;

	if (wd_scratch_init(&scratch, WD_SCRATCH_BYTES) < 0) {
		log_err("worker: cannot allocate its %u-byte buffers", (unsigned)WD_SCRATCH_BYTES);
		scratch.buf = NULL;
	}
	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct pool_task *t;
		bool helper;

		while (!p->head && !p->stop)
			pthread_cond_wait(&p->cond, &p->lock);
		if (!p->head)
			break;
		t = p->head;
		p->head = t->next;
		if (!p->head)
			p->tail = NULL;
		t->queued = false;
		helper = !t->done;
		pthread_mutex_unlock(&p->lock);

		t->work(t, scratch.buf ? &scratch : NULL);

		pthread_mutex_lock(&p->lock);
		if (helper)
			continue;   /* its owner may already have freed it */
		t->next = NULL;
		if (p->done_tail)
			p->done_tail->next = t;
		else
			p->done_head = t;
		p->done_tail = t;
		if (write(p->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			log_err("worker: eventfd write failed");
	}
	pthread_mutex_unlock(&p->lock);
	wd_scratch_free(&scratch);
	return NULL;
}

/* Main thread: run done() of every finished task. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;
	struct pool_task *list, *t;
	uint64_t n;

	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_err("pool: eventfd read failed");
	pthread_mutex_lock(&p->lock);
	list = p->done_head;
	p->done_head = p->done_tail = NULL;
	pthread_mutex_unlock(&p->lock);
	while ((t = list)) {
		list = t->next;
		p->pending--;
		t->done(t);
	}
}

struct pool *pool_new(struct event_base *base, unsigned nthreads)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (nthreads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = n > 0 ? (unsigned)n : 1;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
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
	}
	return p;
fail:
	pool_free(p);
	return NULL;
}

void pool_submit(struct pool *p, struct pool_task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->next = t;
	else
		p->head = t;
	p->tail = t;
	t->queued = true;
	p->pending++;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void pool_help(struct pool *p, struct pool_task *t)
{
	pthread_mutex_lock(&p->lock);
	t->next = NULL;
	if (p->tail)
		p->tail->next = t;
	else
		p->head = t;
	p->tail = t;
	t->queued = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

bool pool_withdraw(struct pool *p, struct pool_task *t)
{
	struct pool_task **pp, *prev = NULL;
	bool found = false;

	pthread_mutex_lock(&p->lock);
	if (t->queued) {
		for (pp = &p->head; *pp; prev = *pp, pp = &(*pp)->next)
			if (*pp == t) {
				*pp = t->next;
				if (p->tail == t)
					p->tail = prev;
				t->queued = false;
				found = true;
				break;
			}
	}
	pthread_mutex_unlock(&p->lock);
	return found;
}

size_t pool_pending(const struct pool *p)
{
	return p->pending;
}

unsigned pool_threads(const struct pool *p)
{
	return p->nthreads;
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	/* Finished tasks whose done() never ran still belong to their submitters: run them now so
	 * nothing they hold leaks. */
	if (p->ev)
		on_done(p->efd, EV_READ, p);
	if (p->ev)
		event_free(p->ev);
	if (p->efd >= 0)
		close(p->efd);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p);
}
