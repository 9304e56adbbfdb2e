/* SPDX-License-Identifier: Apache-2.0 */
/* shmscan.c - the look for foreign objects under the /dev/shm prefix, run by one thread of its
 * own that sleeps until poked. */
#include "shmscan.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "segment.h"
#include "wd_limits.h"

struct shmscan {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool started; /* thread exists */
	bool wanted;  /* a look is asked for and not begun */
	bool running; /* a look is under way */
	bool stop;
	uint64_t last_ms; /* when the last look was asked for (wd_clock_ms; 0: never) */
	uint64_t count;	  /* what the last finished look found */
	bool partial;
	char instance[80];
};

struct seen {
	unsigned n;
	char names[1][WD_SEGMENT_NAME_MAX];
};

static void note(const char *name, void *arg)
{
	struct seen *f = arg;

	if (f->n < 1)
		snprintf(f->names[f->n], sizeof(f->names[0]), "%s", name);
	f->n++;
}

static void look(struct shmscan *s)
{
	struct seen seen = { 0 };
	bool partial = false;
	uint64_t before;
	int n = wd_segment_foreign(s->instance, WD_FOREIGN_SCAN_ENTRIES, &partial, note, &seen);

	if (n < 0)
		return;
	pthread_mutex_lock(&s->lock);
	before = s->count;
	s->count = (uint64_t)n;
	s->partial = partial;
	pthread_mutex_unlock(&s->lock);
	if ((uint64_t)n > before)
		log_warn(
			"%s%d objects under %s/%s.* were not made by weightd (%llu at the last look), "
			"e.g. %s%s%s; they are ignored, never served or removed (a segment_dir only "
			"weightd can write leaves no room for them)",
			partial ? "at least " : "", n, wd_segment_dir(), s->instance,
			(unsigned long long)before, wd_segment_dir(), seen.names[0],
			seen.n > 1 ? " and others" : "");
}

static void *run(void *arg)
{
	struct shmscan *s = arg;

	/* The look is bookkeeping: the main loop and the workers come first on a busy machine. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->wanted && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		if (s->stop)
			break;
		s->wanted = false;
		s->running = true;
		pthread_mutex_unlock(&s->lock);
		look(s);
		pthread_mutex_lock(&s->lock);
		s->running = false;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

void shmscan_look_now(struct shmscan *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->last_ms = wd_clock_ms();
	pthread_mutex_unlock(&s->lock);
	look(s);
}

struct shmscan *shmscan_new(const char *instance)
{
	struct shmscan *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	snprintf(s->instance, sizeof(s->instance), "%s", instance);
	return s;
}

void shmscan_poke(struct shmscan *s)
{
	uint64_t now = wd_clock_ms();

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	if (!s->running && !s->wanted &&
	    (!s->last_ms || now - s->last_ms >= WD_FOREIGN_SCAN_INTERVAL_MS)) {
		if (!s->started)
			s->started = pthread_create(&s->thread, NULL, run, s) == 0;
		if (s->started) {
			s->wanted = true;
			s->last_ms = now ? now : 1;
			pthread_cond_signal(&s->cond);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

uint64_t shmscan_count(struct shmscan *s, bool *ret_partial)
{
	uint64_t n;

	if (ret_partial)
		*ret_partial = false;
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	n = s->count;
	if (ret_partial)
		*ret_partial = s->partial;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void shmscan_free(struct shmscan *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (s->started)
		pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
