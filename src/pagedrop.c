/* SPDX-License-Identifier: Apache-2.0 */
/* pagedrop.c - file ranges already copied elsewhere dropped from the page cache by one
 * low-priority thread, adjacent ranges joined, so that the copies do not pay for it. */
#include "pagedrop.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/*
 * Why a thread: evicting the pages a fill read costs CPU (each page unlinked from the page
 * cache and its LRU list and freed) and takes the same locks as the fill's own page-cache reads
 * and shared-memory writes. Done by the workers between their reads, it slows every cold fill;
 * done here, once a job's ranges stop coming (below), it runs after the fill. Nice 10: below
 * the workers and the clients, which should not wait for it, but not so low that a busy machine
 * starves it (nice 19 gets a few per mille of a core beside eight runnable threads) and leaves
 * the file cached long after the fill.
 *
 * The queue holds at most QUEUE_CAP ranges and PENDING_MAX bytes: beyond that the caller drops
 * its range itself, so a fill far larger than memory never holds more than PENDING_MAX of its
 * checkpoint in the page cache a second time, however busy the machine is.
 */
#define QUEUE_CAP   256
#define PENDING_MAX (1ull << 30)
#define JOIN_SCAN   16 /* queued ranges a new one is compared with, newest first */
/* The thread drops once no copy has run for GRACE_NS (wd_pagedrop_pause/resume: a worker that
 * takes its next chunk resumes at once, the end of a job leaves them all idle), or when BATCH
 * bytes wait (a load of many jobs back to back never leaves them idle). A job's ranges are then
 * joined and dropped after its copies rather than between them. */
#define GRACE_NS (2 * 1000 * 1000)
#define BATCH	 (768ull << 20)

struct range {
	const void *owner;
	int fd;
	uint64_t off, len;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t work; /* a range queued, or stop */
	pthread_cond_t idle; /* a range dropped (busy cleared) */
	pthread_t thread;
	bool running, stop;
	struct range q[QUEUE_CAP]; /* oldest first */
	size_t n;
	uint64_t pending;    /* bytes in q */
	const void *busy;    /* owner of the range being dropped, or NULL */
	unsigned active;     /* copies running (wd_pagedrop_pause) */
	uint64_t idle_since; /* wd_clock_ns when active last fell to 0 */
	bool work_ready;     /* work initialised (on the monotonic clock) */
} D = { .mu = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER };

/* The pages wholly inside [off, off + len), evicted. */
static void drop_now(int fd, uint64_t off, uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t first = (off + page - 1) / page * page, end = (off + len) / page * page;

	if (end > first)
		(void)posix_fadvise(fd, (off_t)first, (off_t)(end - first), POSIX_FADV_DONTNEED);
}

static void *drop_main(void *arg)
{
	(void)arg;
	/* Only this thread: the rest of the process keeps its priority. */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	pthread_mutex_lock(&D.mu);
	for (;;) {
		struct range r;

		while (!D.n && !D.stop)
			pthread_cond_wait(&D.work, &D.mu);
		if (!D.n)
			break;
		while (!D.stop && D.pending < BATCH &&
		       (D.active || wd_clock_ns() - D.idle_since < GRACE_NS)) {
			uint64_t at = D.active ? wd_clock_ns() + 100 * 1000 * 1000 :
						 D.idle_since + GRACE_NS;
			struct timespec ts = { (time_t)(at / 1000000000), (long)(at % 1000000000) };

			pthread_cond_timedwait(&D.work, &D.mu, &ts);
		}
		if (!D.n)
			continue; /* forgotten meanwhile */
		r = D.q[0];
		memmove(&D.q[0], &D.q[1], (D.n - 1) * sizeof(D.q[0]));
		D.n--;
		D.pending -= r.len;
		D.busy = r.owner;
		pthread_mutex_unlock(&D.mu);
		drop_now(r.fd, r.off, r.len);
		pthread_mutex_lock(&D.mu);
		D.busy = NULL;
		pthread_cond_broadcast(&D.idle);
	}
	pthread_mutex_unlock(&D.mu);
	return NULL;
}

int wd_pagedrop_start(void)
{
	int r = 0;

	pthread_mutex_lock(&D.mu);
	if (!D.work_ready) {
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&D.work, &ca);
		pthread_condattr_destroy(&ca);
		D.work_ready = true;
	}
	if (!D.running) {
		D.stop = false;
		r = -pthread_create(&D.thread, NULL, drop_main, NULL);
		D.running = r == 0;
	}
	pthread_mutex_unlock(&D.mu);
	return r;
}

void wd_pagedrop_stop(void)
{
	pthread_mutex_lock(&D.mu);
	if (!D.running) {
		pthread_mutex_unlock(&D.mu);
		return;
	}
	D.stop = true;
	pthread_cond_signal(&D.work);
	pthread_mutex_unlock(&D.mu);
	pthread_join(D.thread, NULL);
	pthread_mutex_lock(&D.mu);
	D.running = false;
	pthread_mutex_unlock(&D.mu);
}

/* Under the lock: queued range j, extended, may now touch another of its file (two workers'
 * chunks meeting): make them one. */
static void join_neighbour(size_t j)
{
	struct range *q = &D.q[j];

	for (size_t i = 0; i < D.n; i++) {
		struct range *o = &D.q[i];

		if (i == j || o->owner != q->owner || o->fd != q->fd ||
		    (o->off != q->off + q->len && o->off + o->len != q->off))
			continue;
		if (o->off < q->off)
			q->off = o->off;
		q->len += o->len;
		memmove(o, o + 1, (D.n - i - 1) * sizeof(*o));
		D.n--;
		return;
	}
}

/* Under the lock: extend a queued range of the same file that [off, off + len) touches. */
static bool join_queued(const void *owner, int fd, uint64_t off, uint64_t len)
{
	for (size_t i = D.n, k = 0; i-- > 0 && k < JOIN_SCAN; k++) {
		struct range *q = &D.q[i];

		if (q->owner != owner || q->fd != fd)
			continue;
		if (off == q->off + q->len) {
			q->len += len;
		} else if (off + len == q->off) {
			q->off = off;
			q->len += len;
		} else {
			continue;
		}
		join_neighbour(i);
		return true;
	}
	return false;
}

void wd_pagedrop_add(const void *owner, int fd, uint64_t off, uint64_t len)
{
	bool queued = false;

	if (!len)
		return;
	pthread_mutex_lock(&D.mu);
	if (D.running && !D.stop && len <= PENDING_MAX - D.pending) {
		queued = join_queued(owner, fd, off, len);
		if (!queued && D.n < QUEUE_CAP) {
			D.q[D.n++] = (struct range){ owner, fd, off, len };
			queued = true;
		}
		if (queued) {
			D.pending += len;
			pthread_cond_signal(&D.work);
		}
	}
	pthread_mutex_unlock(&D.mu);
	if (!queued)
		drop_now(fd, off, len);
}

void wd_pagedrop_forget(const void *owner)
{
	size_t k = 0;

	pthread_mutex_lock(&D.mu);
	for (size_t i = 0; i < D.n; i++) {
		if (D.q[i].owner == owner) {
			D.pending -= D.q[i].len;
			continue;
		}
		D.q[k++] = D.q[i];
	}
	D.n = k;
	while (D.busy == owner)
		pthread_cond_wait(&D.idle, &D.mu);
	pthread_mutex_unlock(&D.mu);
}

void wd_pagedrop_pause(void)
{
	pthread_mutex_lock(&D.mu);
	D.active++;
	pthread_mutex_unlock(&D.mu);
}

void wd_pagedrop_resume(void)
{
	pthread_mutex_lock(&D.mu);
	if (D.active && !--D.active) {
		D.idle_since = wd_clock_ns();
		if (D.work_ready)
			pthread_cond_signal(&D.work);
	}
	pthread_mutex_unlock(&D.mu);
}
