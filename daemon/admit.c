/* SPDX-License-Identifier: Apache-2.0 */
/* admit.c - remote checkpoints admitted off the main loop, each on a thread of its own; results
 * return to the loop through an eventfd; a failed admission is tried again after a capped
 * exponential backoff. */
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
#include "clock.h"
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
	struct catalog *catalog;   /* as admit_start was last given it */
	struct event *ev_retry;	   /* looks at the failed entries (RETRY_TICK_MS) */
	uint64_t retry_max_ms;	   /* 0: failed admissions stay failed */
	uint64_t failed, retries;  /* counters (admit_counters) */
};

/* The first retry waits this long, each next one twice as long, up to retry_max_ms. */
#define RETRY_FIRST_MS 1000u
#define RETRY_TICK_MS  250u

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

/* One more failed admission of cs in a row, counted once (here, or for an entry a reload made
 * FAILED, by on_retry). */
static void note_failure(struct admit *a, struct csource *cs)
{
	a->failed++;
	if (cs->admit_failures < UINT32_MAX)
		cs->admit_failures++;
	cs->failure_counted = true;
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
		if (deliver && catalog_admitted(j->cs, j->src, &j->err)) {
			if (j->cs->state == CSOURCE_FAILED)
				note_failure(a, j->cs);
			else if (a->admitted)
				a->admitted(j->cs, a->arg);
		}
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

/* The wait before retry number n (1, 2, ...) of a failed admission. */
static uint64_t backoff_ms(const struct admit *a, uint32_t n)
{
	uint64_t ms = RETRY_FIRST_MS;

	while (n-- > 1 && ms < a->retry_max_ms)
		ms *= 2;
	return ms < a->retry_max_ms ? ms : a->retry_max_ms;
}

/*
 * Every failed remote entry still current gets a time to be tried again, and is tried again
 * (LOADING, a thread of its own, as at start) once that time has come. Linear in the
 * checkpoints, four times a second: a handful of checkpoints, nothing a client controls.
 */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	struct admit *a = arg;
	uint64_t now = wd_clock_ms();
	bool any = false;

	(void)fd;
	(void)what;
	if (!a->catalog)
		return;
	for (size_t i = 0; i < catalog_count(a->catalog); i++) {
		struct csource *cs = catalog_at(a->catalog, i);

		if (cs->state != CSOURCE_FAILED || !wd_source_is_url(cs->conf->path))
			continue;
		if (!cs->failure_counted) /* made FAILED by a reload, not by an admission here */
			note_failure(a, cs);
		if (!a->retry_max_ms)
			continue;
		if (!cs->retry_at_ms) {
			uint64_t ms = backoff_ms(a, cs->admit_failures);

			cs->retry_at_ms = now + ms;
			log_info("checkpoint %s: admission failed %u time%s; retrying in %llu ms",
				 cs->name, cs->admit_failures, cs->admit_failures == 1 ? "" : "s",
				 (unsigned long long)ms);
		} else if (now >= cs->retry_at_ms && catalog_retry(cs)) {
			a->retries++;
			any = true;
		}
	}
	if (any)
		admit_start(a, a->catalog);
}

struct admit *admit_new(struct event_base *base, void (*admitted)(struct csource *cs, void *arg),
			void *arg, uint64_t retry_max_ms)
{
	struct admit *a = calloc(1, sizeof(*a));
	struct timeval tick = { 0, RETRY_TICK_MS * 1000 };

	if (!a)
		return NULL;
	pthread_mutex_init(&a->lock, NULL);
	a->admitted = admitted;
	a->arg = arg;
	a->retry_max_ms = retry_max_ms;
	a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (a->efd >= 0)
		a->ev = event_new(base, a->efd, EV_READ | EV_PERSIST, on_done, a);
	a->ev_retry = event_new(base, -1, EV_PERSIST, on_retry, a);
	if (!a->ev || event_add(a->ev, NULL) < 0 || !a->ev_retry ||
	    event_add(a->ev_retry, &tick) < 0) {
		admit_free(a);
		return NULL;
	}
	return a;
}

void admit_start(struct admit *a, struct catalog *c)
{
	a->catalog = c;
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

void admit_counters(const struct admit *a, uint64_t *ret_failed, uint64_t *ret_retries)
{
	*ret_failed = a ? a->failed : 0;
	*ret_retries = a ? a->retries : 0;
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
	if (a->ev_retry)
		event_free(a->ev_retry);
	if (a->efd >= 0)
		close(a->efd);
	pthread_mutex_destroy(&a->lock);
	free(a);
}
