/* SPDX-License-Identifier: Apache-2.0 */
/* sink.c - the writer into segments that hashes as it writes: in order, inline or on a hasher
 * thread behind the writes, or a run of whole weights gathered into one pwritev; per-worker
 * scratch buffers. */
#include "sink.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * The ring: slots [tail, head) are queued for hashing in that order (slot index = count % SLOTS);
 * slot head % SLOTS is the producer's to fill once head - tail < SLOTS. The producer moves head,
 * the thread moves tail, both under `lock`; `cond` is broadcast on every move (one waiter each
 * side at most).
 */
struct wd_hasher {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t *slot[WD_HASHER_SLOTS];
	size_t len[WD_HASHER_SLOTS];
	size_t cap;                 /* bytes per slot */
	uint64_t head, tail;
	struct wd_content *dg;      /* the digest of the sink served; NULL when free */
	bool stop;
};

static void *hasher_main(void *arg)
{
	struct wd_hasher *h = arg;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		struct wd_content *dg;
		const uint8_t *p;
		size_t n;

		while (h->tail == h->head && !h->stop)
			pthread_cond_wait(&h->cond, &h->lock);
		if (h->tail == h->head)
			break;
		dg = h->dg;
		p = h->slot[h->tail % WD_HASHER_SLOTS];
		n = h->len[h->tail % WD_HASHER_SLOTS];
		pthread_mutex_unlock(&h->lock);
		wd_content_update(dg, p, n);
		pthread_mutex_lock(&h->lock);
		h->tail++;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* Wait until every queued slot is hashed, then free the hasher for another sink. */
static void detach(struct wd_sink *s)
{
	struct wd_hasher *h = s->hasher;

	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	while (h->tail != h->head)
		pthread_cond_wait(&h->cond, &h->lock);
	h->dg = NULL;
	pthread_mutex_unlock(&h->lock);
	s->hasher = NULL;
}

int wd_sink_init_range(struct wd_sink *s, int fd, uint64_t base, uint64_t size,
		       enum wd_digest_alg alg)
{
	s->fd = fd;
	s->base = base;
	s->size = size;
	s->written = 0;
	s->hasher = NULL;
	s->progress = NULL;
	return wd_content_init(&s->dg, alg);
}

int wd_sink_init(struct wd_sink *s, int fd, uint64_t size)
{
	return wd_sink_init_range(s, fd, 0, size, WD_DIGEST_DEFAULT);
}

void wd_sink_pipeline(struct wd_sink *s, struct wd_hasher *h)
{
	if (!h || s->hasher || s->written || s->size <= h->cap || s->dg.alg != WD_DIGEST_SHA256)
		return;
	pthread_mutex_lock(&h->lock);
	if (!h->dg) {
		h->dg = &s->dg;
		s->hasher = h;
	}
	pthread_mutex_unlock(&h->lock);
}

uint8_t *wd_sink_buffer(struct wd_sink *s, size_t *ret_cap)
{
	struct wd_hasher *h = s->hasher;

	if (!h)
		return NULL;
	pthread_mutex_lock(&h->lock);
	while (h->head - h->tail >= WD_HASHER_SLOTS)
		pthread_cond_wait(&h->cond, &h->lock);
	pthread_mutex_unlock(&h->lock);
	*ret_cap = h->cap;
	return h->slot[h->head % WD_HASHER_SLOTS];
}

/*
 * Every byte that goes into a segment goes through here: write iov[0..niov) (len bytes in all)
 * at `at` of fd, again after a short write or EINTR. Moves the iovecs it consumed. A full
 * /dev/shm is -WEIGHTD_E_RESOURCE_EXHAUSTED, any other failure -WEIGHTD_E_IO.
 */
static int put(int fd, struct iovec *iov, int niov, uint64_t at, uint64_t len, weightd_error *err)
{
	while (len) {
		ssize_t n = pwritev(fd, iov, niov, (off_t)at);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 0)
				errno = EIO;
			return wd_error_set(err, errno == ENOSPC ? WEIGHTD_E_RESOURCE_EXHAUSTED : WEIGHTD_E_IO,
					    "writing the weight into shared memory: %s", strerror(errno));
		}
		at += (uint64_t)n;
		len -= (uint64_t)n;
		while (niov && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			niov--;
		}
		if (niov) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

/* Every byte a sink takes is hashed here, in order: after the slots queued on its hasher. */
static void hash(struct wd_sink *s, const void *buf, size_t len)
{
	struct wd_hasher *h = s->hasher;

	if (h) {
		pthread_mutex_lock(&h->lock);
		while (h->tail != h->head)
			pthread_cond_wait(&h->cond, &h->lock);
		pthread_mutex_unlock(&h->lock);
	}
	wd_content_update(&s->dg, buf, len);
}

/* len bytes of s are written: count them, and add them to its progress. */
static void advance(struct wd_sink *s, uint64_t len)
{
	s->written += len;
	if (s->progress)
		__atomic_fetch_add(s->progress, len, __ATOMIC_RELAXED);
}

/*
 * A slot is queued before it is written, so the hasher reads it while pwritev does (both only
 * read it). Any other buffer is hashed here, after the queue has drained, to keep the order.
 */
int wd_sink_write(struct wd_sink *s, const void *buf, size_t len, weightd_error *err)
{
	struct wd_hasher *h = s->hasher;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	int r;

	if (len > s->size - s->written)
		return wd_error_set(err, WEIGHTD_E_INTERNAL,
				    "materialization produced more than its %llu bytes",
				    (unsigned long long)s->size);
	if (h && len && len <= h->cap && buf == h->slot[h->head % WD_HASHER_SLOTS]) {
		pthread_mutex_lock(&h->lock);
		h->len[h->head % WD_HASHER_SLOTS] = len;
		h->head++;
		pthread_cond_broadcast(&h->cond);
		pthread_mutex_unlock(&h->lock);
	} else {
		hash(s, buf, len);
	}
	if (s->fd >= 0) {
		r = put(s->fd, &iov, 1, s->base + s->written, len, err);
		if (r < 0)
			return r;
	}
	advance(s, len);
	return 0;
}

int wd_sink_finish(struct wd_sink *s, uint8_t *digest, weightd_error *err)
{
	detach(s);
	if (s->written != s->size) {
		wd_sink_abort(s);
		return wd_error_set(err, WEIGHTD_E_INTERNAL,
				    "materialization produced %llu of its %llu bytes",
				    (unsigned long long)s->written, (unsigned long long)s->size);
	}
	wd_content_final(&s->dg, digest);
	return 0;
}

void wd_sink_abort(struct wd_sink *s)
{
	detach(s);
	wd_content_abort(&s->dg);
}

/*
 * Each part is hashed as an inline sink over it would hash it, and its digest finished before
 * the run is written: one hash state is alive at a time (as when the parts are written one by
 * one), and its bytes are still in cache from the read. The writes are gathered into iovecs,
 * with the gaps between parts, and go out through put whenever the array is full and at the end.
 */
int wd_sink_write_run(int fd, const uint8_t *buf, const struct wd_sink_part *parts, size_t n,
		      weightd_error *err)
{
	static const uint8_t zeros[WD_SINK_GAP_MAX];
	struct iovec iov[WD_SINK_RUN_IOV];
	uint64_t at = n ? parts[0].base : 0, len = 0;
	size_t flushed = 0; /* parts before this one are written */
	int niov = 0, r;

	for (size_t i = 0; i < n; i++) {
		const struct wd_sink_part *p = &parts[i];
		uint64_t end = at + len;
		struct wd_content dg;

		if (p->base < end || p->base - end > WD_SINK_GAP_MAX)
			return wd_error_set(err, WEIGHTD_E_INTERNAL,
					    "a run's weight at %llu does not follow the one ending at %llu",
					    (unsigned long long)p->base, (unsigned long long)end);
		if (niov + 2 > WD_SINK_RUN_IOV) {
			r = put(fd, iov, niov, at, len, err);
			if (r < 0)
				return r;
			for (; flushed < i; flushed++)
				if (parts[flushed].progress)
					__atomic_fetch_add(parts[flushed].progress, parts[flushed].size,
							   __ATOMIC_RELAXED);
			at = end;
			len = 0;
			niov = 0;
		}
		r = wd_content_init(&dg, p->alg);
		if (r < 0)
			return wd_error_set(err, r, "cannot start a %s digest", wd_digest_name(p->alg));
		wd_content_update(&dg, buf, (size_t)p->size);
		wd_content_final(&dg, p->digest);
		if (p->base > at + len) {
			iov[niov].iov_base = (void *)zeros;
			iov[niov++].iov_len = (size_t)(p->base - (at + len));
			len += p->base - (at + len);
		}
		iov[niov].iov_base = (void *)buf;
		iov[niov++].iov_len = (size_t)p->size;
		len += p->size;
		buf += p->size;
	}
	if (niov) {
		r = put(fd, iov, niov, at, len, err);
		if (r < 0)
			return r;
	}
	for (; flushed < n; flushed++)
		if (parts[flushed].progress)
			__atomic_fetch_add(parts[flushed].progress, parts[flushed].size, __ATOMIC_RELAXED);
	return 0;
}

/* Scratch comes from mmap so it is page-aligned; it is touched once here so the first
 * materialization does not pay for faulting it in. */
static uint8_t *scratch_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0, bytes);
	return p;
}

static void hasher_free(struct wd_hasher *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	for (int i = 0; i < WD_HASHER_SLOTS; i++)
		munmap(h->slot[i], h->cap);
	free(h);
}

/* A hasher with slots of `cap` bytes, its thread started with every signal blocked (signals
 * are the main thread's business). NULL if memory or the thread is not to be had. */
static struct wd_hasher *hasher_new(size_t cap)
{
	struct wd_hasher *h = calloc(1, sizeof(*h));
	sigset_t all, old;
	int i, r;

	if (!h)
		return NULL;
	h->cap = cap;
	for (i = 0; i < WD_HASHER_SLOTS; i++) {
		h->slot[i] = scratch_alloc(cap);
		if (!h->slot[i])
			goto fail;
	}
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&h->thread, NULL, hasher_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0)
		return h;
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
fail:
	while (i-- > 0)
		munmap(h->slot[i], cap);
	free(h);
	return NULL;
}

int wd_scratch_init(struct wd_scratch *s, size_t bytes)
{
	memset(s, 0, sizeof(*s));
	s->buf = scratch_alloc(bytes);
	if (s->buf)
		s->cap = bytes;
	s->buf2 = scratch_alloc(bytes);
	if (s->buf2)
		s->cap2 = bytes;
	if (!s->buf || !s->buf2) {
		wd_scratch_free(s);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	s->hasher = hasher_new(bytes / WD_HASHER_SLOTS ? bytes / WD_HASHER_SLOTS : 1);
	return 0;
}

void wd_scratch_free(struct wd_scratch *s)
{
	if (!s)
		return;
	hasher_free(s->hasher);
	if (s->buf)
		munmap(s->buf, s->cap);
	if (s->buf2)
		munmap(s->buf2, s->cap2);
	memset(s, 0, sizeof(*s));
}
