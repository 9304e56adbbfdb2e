/* SPDX-License-Identifier: Apache-2.0 */
/* admit.c - remote checkpoints admitted off the main loop, each on a thread of its own; results
 * return to the loop through an eventfd. */
#include "admit.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "catalog.h"
#include "log.h"
#include "remote.h"

/* One admission: the entry (a reference), and what opening it gave. */
struct job {
	struct admit *a;
	struct csource *cs;
	pthread_t thread;
	struct wd_source *src;
	weightd_error err;
	bool finished; /* under a->lock */
	struct job *next;
};

struct admit {
	struct event *ev;
	int efd;
	pthread_mutex_t lock;
	struct job *jobs; /* every job started and not yet taken back (main thread's list) */
	unsigned running;
	void (*admitted)(struct csource *cs, void *arg);
	void *arg;
};

static void *run(void *arg)
{
	struct job *j = arg;
	uint64_t one = 1;

	wd_error_clear(&j->err);
	if (catalog_open(j->cs, &j->src, &j->err) < 0)
		j->src = NULL;
	pthread_mutex_lock(&j->a->lock);
	j->finished = true;
	pthread_mutex_unlock(&j->a->lock);
	/* tried again: a wake-up lost would leave the checkpoint loading for good */
	for (int tries = 0; write(j->a->efd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN;
	     tries++) {
		if (tries == 1000) {
			log_err("admission: eventfd write failed: %s", strerror(errno));
			break;
		}
	}
	return NULL;
}

/* Take back every finished job: its thread joined, its result given to the catalog. */
static void reap(struct admit *a, bool deliver)
{
	struct job **pp = &a->jobs;

	while (*pp) {
		struct job *j = *pp;
		bool finished;

		pthread_mutex_lock(&a->lock);
		finished = j->finished;
		pthread_mutex_unlock(&a->lock);
		if (!finished) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		pthread_join(j->thread, NULL);
		a->running--;
		if (deliver && catalog_admitted(j->cs, j->src, &j->err) && a->admitted)
			a->admitted(j->cs, a->arg);
		else if (!deliver)
			wd_source_free(j->src);
		catalog_source_unref(j->cs);
		free(j);
	}
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	uint64_t n;

	(void)what;
	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_err("admission: eventfd read failed: %s", strerror(errno));
	reap(arg, true);
}

struct admit *admit_new(struct event_base *base, void (*admitted)(struct csource *cs, void *arg),
			void *arg)
{
	struct admit *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	pthread_mutex_init(&a->lock, NULL);
	a->admitted = admitted;
	a->arg = arg;
	a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (a->efd >= 0)
		a->ev = event_new(base, a->efd, EV_READ | EV_PERSIST, on_done, a);
	if (!a->ev || event_add(a->ev, NULL) < 0) {
		admit_free(a);
		return NULL;
	}
	return a;
}

void admit_start(struct admit *a, struct catalog *c)
{
	for (size_t i = 0; i < catalog_count(c); i++) {
		struct csource *cs = catalog_at(c, i);
		struct job *j;
		bool started = false;
		int e;

		if (cs->state != CSOURCE_LOADING)
			continue;
		for (struct job *k = a->jobs; k && !started; k = k->next)
			started = k->cs == cs;
		if (started)
			continue;
		j = calloc(1, sizeof(*j));
		if (!j) {
			catalog_admitted(cs, NULL, NULL);
			continue;
		}
		j->a = a;
		j->cs = cs;
		catalog_source_ref(cs);
		e = pthread_create(&j->thread, NULL, run, j);
		if (e) {
			weightd_error err;

			wd_error_set(&err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				     "no thread to admit it: %s", strerror(e));
			catalog_admitted(cs, NULL, &err);
			catalog_source_unref(cs);
			free(j);
			continue;
		}
		j->next = a->jobs;
		a->jobs = j;
		a->running++;
	}
}

unsigned admit_running(const struct admit *a)
{
	return a->running;
}

void admit_free(struct admit *a)
{
	if (!a)
		return;
	if (a->jobs)
		wd_remote_stop(true); /* each thread then returns within about 100 ms */
	for (struct job *j = a->jobs; j; j = j->next)
		pthread_join(j->thread, NULL);
	for (struct job *j = a->jobs; j; j = j->next) {
		pthread_mutex_lock(&a->lock);
		j->finished = true;
		pthread_mutex_unlock(&a->lock);
	}
	/* joined already: reap only frees */
	while (a->jobs) {
		struct job *j = a->jobs;

		a->jobs = j->next;
		wd_source_free(j->src);
		catalog_source_unref(j->cs);
		free(j);
	}
	if (a->ev)
		event_free(a->ev);
	if (a->efd >= 0)
		close(a->efd);
	pthread_mutex_destroy(&a->lock);
	free(a);
}
