/* sink.c - in-order writer into a segment that hashes as it writes; per-worker scratch buffers. */
#include "sink.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int wd_sink_init(struct wd_sink *s, int fd, uint64_t size)
{
	s->fd = fd;
	s->size = size;
	s->written = 0;
	s->progress = NULL;
	return wd_sha256_init(&s->sha);
}

int wd_sink_write(struct wd_sink *s, const void *buf, size_t len, struct wd_error *err)
{
	const uint8_t *p = buf;
	size_t left = len;

	if (len > s->size - s->written)
		return wd_error_set(err, WD_E_INTERNAL,
				    "materialization produced more than its %llu bytes",
				    (unsigned long long)s->size);
	wd_sha256_update(&s->sha, buf, len);
	while (s->fd >= 0 && left) {
		ssize_t n = pwrite(s->fd, p, left, (off_t)s->written);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 0)
				errno = EIO;
			return wd_error_set(err, errno == ENOSPC ? WD_E_EXHAUSTED : WD_E_IO,
					    "writing the weight into shared memory: %s", strerror(errno));
		}
		p += n;
		left -= (size_t)n;
		s->written += (uint64_t)n;
		if (s->progress)
			__atomic_store_n(s->progress, s->written, __ATOMIC_RELAXED);
	}
	if (s->fd < 0) {
		s->written += len;
		if (s->progress)
			__atomic_store_n(s->progress, s->written, __ATOMIC_RELAXED);
	}
	return 0;
}

int wd_sink_finish(struct wd_sink *s, uint8_t digest[WD_DIGEST_LEN], struct wd_error *err)
{
	if (s->written != s->size) {
		wd_sink_abort(s);
		return wd_error_set(err, WD_E_INTERNAL,
				    "materialization produced %llu of its %llu bytes",
				    (unsigned long long)s->written, (unsigned long long)s->size);
	}
	wd_sha256_final(&s->sha, digest);
	return 0;
}

void wd_sink_abort(struct wd_sink *s)
{
	wd_sha256_abort(&s->sha);
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
		return -WD_E_EXHAUSTED;
	}
	return 0;
}

void wd_scratch_free(struct wd_scratch *s)
{
	if (!s)
		return;
	if (s->buf)
		munmap(s->buf, s->cap);
	if (s->buf2)
		munmap(s->buf2, s->cap2);
	memset(s, 0, sizeof(*s));
}
