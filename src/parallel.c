/* SPDX-License-Identifier: Apache-2.0 */
/* parallel.c - wd_parallel_for: an atomic counter shared by the caller and a few helpers. */
#include "parallel.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#define MAX_THREADS 8

struct loop {
	bool (*fn)(void *arg, size_t i);
	void *arg;
	size_t n;
	atomic_size_t next;     /* the next index to claim */
	atomic_bool stop;       /* a call returned false */
	atomic_size_t claimed;
};

static void run(struct loop *l)
{
	while (!atomic_load(&l->stop)) {
		size_t i = atomic_fetch_add(&l->next, 1);

		if (i >= l->n)
			break;
		atomic_fetch_add(&l->claimed, 1);
		if (!l->fn(l->arg, i))
			atomic_store(&l->stop, true);
	}
}

static void *helper(void *arg)
{
	run(arg);
	return NULL;
}

size_t wd_parallel_for(size_t n, unsigned threads, bool (*fn)(void *arg, size_t i), void *arg)
{
	struct loop l = { .fn = fn, .arg = arg, .n = n };
	pthread_t t[MAX_THREADS];
	unsigned started = 0;
	sigset_t all, old;

	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	if (threads > n)
		threads = (unsigned)n;
	if (threads > 1) {
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		while (started + 1 < threads && pthread_create(&t[started], NULL, helper, &l) == 0)
			started++;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	run(&l);
	while (started > 0)
		pthread_join(t[--started], NULL);
	return atomic_load(&l.claimed);
}

unsigned wd_parallel_width(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (unsigned)n;
}
