/* SPDX-License-Identifier: Apache-2.0 */
/* test_frame.c - frames and fd passing over a Unix socketpair: src/frame_*.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static void pair(int sv[2], int nonblock)
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0),
				    0, sv), 0);
}

/* Open fds of this process, not counting the directory handle used to count them. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

static int fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* Deterministic bytes for frame `seed`, computed independently of the code under test. */
static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static void le32(uint8_t *p, uint32_t v)
{
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
	p[2] = (v >> 16) & 0xff;
	p[3] = (v >> 24) & 0xff;
}

/* n distinct memfds; their identities go to dev[]/ino[]. */
static void make_fds(int *fds, size_t n, dev_t *dev, ino_t *ino)
{
	for (size_t i = 0; i < n; i++) {
		struct stat st;

		fds[i] = memfd_create("wd-test", MFD_CLOEXEC);
		assert_true(fds[i] >= 0);
		assert_int_equal(fstat(fds[i], &st), 0);
		dev[i] = st.st_dev;
		ino[i] = st.st_ino;
	}
}

/* Read from a non-blocking socket until one frame is complete (fails the test on error/EOF). */
static void recv_frame(struct wd_inbuf *b, int sock, struct wd_frame *f)
{
	for (;;) {
		int rc = wd_inbuf_next(b, f);

		assert_true(rc >= 0);
		if (rc == 1)
			return;
		rc = wd_inbuf_read(b, sock);
		if (rc == WD_FRAME_AGAIN) {
			struct pollfd p = { .fd = sock, .events = POLLIN };
			assert_int_equal(poll(&p, 1, 5000), 1);
			continue;
		}
		assert_true(rc > 0);
	}
}

static void check_fds(const struct wd_frame *f, const dev_t *dev, const ino_t *ino, size_t n)
{
	assert_int_equal(f->nfds, n);
	if (n == 0)
		assert_null(f->fds);
	for (size_t i = 0; i < n; i++) {
		struct stat st;

		assert_int_equal(fstat(f->fds[i], &st), 0);
		assert_true(st.st_dev == dev[i]);
		assert_true(st.st_ino == ino[i]);
		assert_true(fcntl(f->fds[i], F_GETFD) & FD_CLOEXEC);
	}
}

/* ---- tests ------------------------------------------------------------------------------ */

/* The bytes on the wire are exactly: u32 LE length, u32 LE nfds, payload. */
static void test_wire_format(void **state)
{
	int sv[2];
	struct wd_outq *q = wd_outq_new();
	uint8_t got[64], want[8 + 5];
	ssize_t n;

	pair(sv, 0);
	assert_int_equal(wd_outq_push(q, "hello", 5, NULL, 0), 0);
	assert_int_equal(wd_outq_bytes(q), 13);
	assert_int_equal(wd_outq_frames(q), 1);
	assert_int_equal(wd_outq_flush(q, sv[0]), 0);
	assert_int_equal(wd_outq_bytes(q), 0);
	assert_int_equal(wd_outq_frames(q), 0);
	n = recv(sv[1], got, sizeof(got), 0);
	le32(want, 5);
	le32(want + 4, 0);
	memcpy(want + 8, "hello", 5);
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(got, want, sizeof(want));

	/* Same through the blocking sender, with 300 in the length field. */
	{
		uint8_t payload[300], buf[400];
		size_t have = 0;

		fill(payload, sizeof(payload), 7);
		assert_int_equal(wd_frame_send_blocking(sv[0], payload, sizeof(payload), NULL, 0), 0);
		while (have < 308) {
			n = recv(sv[1], buf + have, sizeof(buf) - have, 0);
			assert_true(n > 0);
			have += (size_t)n;
		}
		assert_int_equal(have, 308);
		assert_int_equal(buf[0] | buf[1] << 8, 300);
		assert_int_equal(buf[2] | buf[3] | buf[4] | buf[5] | buf[6] | buf[7], 0);
		assert_memory_equal(buf + 8, payload, 300);
	}
	wd_outq_free(q);
	close(sv[0]);
	close(sv[1]);
}

static void test_small_round_trip(void **state)
{
	static const size_t sizes[] = { 0, 1, 7, 8, 9, 100, 4096, 65535, 65536, 70001 };
	const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
	int sv[2];
	struct wd_outq *q = wd_outq_new();
	struct wd_inbuf *b = wd_inbuf_new(1u << 20, 0);
	uint8_t *expect = malloc(70001);

	pair(sv, 1);
	for (size_t i = 0; i < nsizes; i++) {
		fill(expect, sizes[i], (uint32_t)i);
		assert_int_equal(wd_outq_push(q, expect, sizes[i], NULL, 0), 0);
	}
	assert_int_equal(wd_outq_frames(q), nsizes);
	for (size_t i = 0; i < nsizes; i++) {
		struct wd_frame f;

		/* Interleave: flush what fits, then read a frame. */
		assert_true(wd_outq_flush(q, sv[0]) >= 0);
		recv_frame(b, sv[1], &f);
		fill(expect, sizes[i], (uint32_t)i);
		assert_int_equal(f.len, sizes[i]);
		if (sizes[i])
			assert_memory_equal(f.payload, expect, sizes[i]);
		assert_int_equal(f.nfds, 0);
		assert_null(f.fds);
	}
	assert_int_equal(wd_outq_flush(q, sv[0]), 0);
	{
		struct wd_frame f;
		assert_int_equal(wd_inbuf_next(b, &f), 0);
		assert_int_equal(wd_inbuf_read(b, sv[1]), WD_FRAME_AGAIN);
	}
	free(expect);
	wd_inbuf_free(b);
	wd_outq_free(q);
	close(sv[0]);
	close(sv[1]);
}

/*
 * Frames several times the socket buffer, non-blocking on both ends: the queue must report
 * "data remains", resume partial writes at the right byte, and the reader must reassemble.
 */
static void test_large_frames_partial(void **state)
{
	const size_t big = 3u << 20;
	int sv[2], sndbuf = 4096;
	struct wd_outq *q = wd_outq_new();
	struct wd_inbuf *b = wd_inbuf_new(4u << 20, 0);
	uint8_t *expect = malloc(big);
	size_t sizes[4] = { big, 10, big - 1, 1 };
	size_t got = 0;
	int saw_partial = 0;

	pair(sv, 1);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	for (int i = 0; i < 4; i++) {
		fill(expect, sizes[i], 100 + (uint32_t)i);
		assert_int_equal(wd_outq_push(q, expect, sizes[i], NULL, 0), 0);
	}
	while (got < 4) {
		struct wd_frame f;
		int rc = wd_outq_flush(q, sv[0]);

		assert_true(rc == 0 || rc == 1);
		if (rc == 1) {
			saw_partial = 1;
			assert_true(wd_outq_bytes(q) > 0);
		}
		/* Read a single chunk, then hand out whatever completed. */
		rc = wd_inbuf_read(b, sv[1]);
		assert_true(rc > 0 || rc == WD_FRAME_AGAIN);
		while ((rc = wd_inbuf_next(b, &f)) == 1) {
			fill(expect, sizes[got], 100 + (uint32_t)got);
			assert_int_equal(f.len, sizes[got]);
			assert_memory_equal(f.payload, expect, sizes[got]);
			got++;
		}
		assert_int_equal(rc, 0);
	}
	assert_true(saw_partial);
	assert_int_equal(wd_outq_bytes(q), 0);
	assert_int_equal(wd_outq_frames(q), 0);
	free(expect);
	wd_inbuf_free(b);
	wd_outq_free(q);
	close(sv[0]);
	close(sv[1]);
}

/* Frames with 0, 1, 250, 251 and 600 fds, queued together with fd-less frames between them. */
static void test_fd_counts(void **state)
{
	static const size_t counts[] = { 0, 1, 250, 0, 251, 600, 0 };
	const size_t nc = sizeof(counts) / sizeof(counts[0]);
	int sv[2];
	struct wd_outq *q = wd_outq_new();
	struct wd_inbuf *b = wd_inbuf_new(1u << 16, 2048);
	int *fds[7];
	dev_t *dev[7];
	ino_t *ino[7];
	int base = count_fds();

	pair(sv, 1);
	for (size_t i = 0; i < nc; i++) {
		uint8_t payload[32];

		fds[i] = calloc(counts[i] + 1, sizeof(int));
		dev[i] = calloc(counts[i] + 1, sizeof(dev_t));
		ino[i] = calloc(counts[i] + 1, sizeof(ino_t));
		make_fds(fds[i], counts[i], dev[i], ino[i]);
		fill(payload, sizeof(payload), (uint32_t)i);
		assert_int_equal(wd_outq_push(q, payload, sizeof(payload), fds[i], counts[i]), 0);
	}
	assert_int_equal(count_fds(), base + 2 + 1102);
	assert_int_equal(wd_outq_flush(q, sv[0]), 0);
	/* The queue closed every fd once sent: only the socketpair is left (nothing received yet). */
	for (size_t i = 0; i < nc; i++)
		for (size_t j = 0; j < counts[i]; j++)
			assert_false(fd_is_open(fds[i][j]));
	assert_int_equal(count_fds(), base + 2);
	for (size_t i = 0; i < nc; i++) {
		struct wd_frame f;
		uint8_t payload[32];

		recv_frame(b, sv[1], &f);
		fill(payload, sizeof(payload), (uint32_t)i);
		assert_int_equal(f.len, sizeof(payload));
		assert_memory_equal(f.payload, payload, sizeof(payload));
		check_fds(&f, dev[i], ino[i], counts[i]);
		wd_frame_close_fds(&f);
		assert_null(f.fds);
		assert_int_equal(f.nfds, 0);
		free(fds[i]);
		free(dev[i]);
		free(ino[i]);
	}
	assert_int_equal(count_fds(), base + 2);
	wd_inbuf_free(b);
	wd_outq_free(q);
	close(sv[0]);
	close(sv[1]);
}

struct sender {
	int sock;
	size_t len;
	int fds[600];
	size_t nfds;
	int rc;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	uint8_t *p = malloc(s->len);

	fill(p, s->len, 42);
	s->rc = wd_frame_send_blocking(s->sock, p, s->len, s->fds, s->nfds);
	free(p);
	return NULL;
}

/* A blocking send larger than the socket buffer with 600 fds; the fds stay the caller's. */
static void test_send_blocking(void **state)
{
	static struct sender s;
	dev_t dev[600];
	ino_t ino[600];
	int sv[2];
	pthread_t t;
	struct wd_inbuf *b = wd_inbuf_new(4u << 20, 600);
	struct wd_frame f;
	uint8_t *expect;

	pair(sv, 0);
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	s.sock = sv[0];
	s.len = 2u << 20;
	s.nfds = 600;
	make_fds(s.fds, s.nfds, dev, ino);
	assert_int_equal(pthread_create(&t, NULL, sender_main, &s), 0);
	recv_frame(b, sv[1], &f);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(s.rc, 0);
	expect = malloc(s.len);
	fill(expect, s.len, 42);
	assert_int_equal(f.len, s.len);
	assert_memory_equal(f.payload, expect, s.len);
	check_fds(&f, dev, ino, 600);
	wd_frame_close_fds(&f);
	for (size_t i = 0; i < 600; i++) {
		assert_true(fd_is_open(s.fds[i]));
		close(s.fds[i]);
	}
	/* A frame whose 8 + len bytes cannot carry its fd batches is refused before sending. */
	{
		int many[WD_FRAME_MAX_FDS + 1];
		for (size_t i = 0; i < WD_FRAME_MAX_FDS + 1; i++)
			many[i] = 0;
		assert_int_equal(wd_frame_send_blocking(sv[0], "", 0, many, 2001), -WEIGHTD_E_LIMIT_EXCEEDED);
		assert_int_equal(wd_frame_send_blocking(sv[0], "", 0, many, WD_FRAME_MAX_FDS + 1),
				 -WEIGHTD_E_LIMIT_EXCEEDED);
	}
	free(expect);
	wd_inbuf_free(b);
	close(sv[0]);
	close(sv[1]);
}

/*
 * A message longer than the queue's frame maximum goes out as several frames, every one but the
 * last flagged WD_FRAME_MORE, with its fds spread over them; the receiver hands out one message
 * with the payload and the fds in order. A message one byte over the receiver's maximum is
 * refused from the headers of its frames.
 */
static void test_multi_frame(void **state)
{
	int sv[2], fds[300];
	dev_t dev[300];
	ino_t ino[300];
	struct wd_outq *q = wd_outq_new();
	struct wd_inbuf *b = wd_inbuf_new(1000, 300);
	struct wd_frame f;
	uint8_t *payload = malloc(10000), hdr[8];
	size_t frames_seen = 0, off = 0;

	fill(payload, 10000, 7);
	pair(sv, 1);
	make_fds(fds, 300, dev, ino);
	wd_outq_set_frame_max(q, 1000);
	wd_inbuf_set_max_message(b, 10000);
	assert_int_equal(wd_outq_push(q, payload, 10000, fds, 300), 0);
	assert_int_equal(wd_outq_frames(q), 10);
	/* what is on the wire: 10 frames of 1000 bytes, MORE on all but the last */
	while (wd_outq_flush(q, sv[0]) == 1)
		;
	{
		uint8_t *wire = malloc(10 * 1008);
		ssize_t got = 0;

		while (got < 10 * 1008) {
			ssize_t n = recv(sv[1], wire + got, (size_t)(10 * 1008 - got), 0);
			assert_true(n > 0);
			got += n;
		}
		for (off = 0; off < 10 * 1008; off += 1008, frames_seen++) {
			uint32_t len = wire[off] | wire[off + 1] << 8 | wire[off + 2] << 16 |
				       (uint32_t)wire[off + 3] << 24;
			uint32_t w = wire[off + 4] | wire[off + 5] << 8 | wire[off + 6] << 16 |
				     (uint32_t)wire[off + 7] << 24;

			assert_int_equal(len, 1000);
			assert_int_equal(!!(w & WD_FRAME_MORE), frames_seen < 9);
			assert_int_equal(w & ~WD_FRAME_MORE, 30);
		}
		/* feed them back through a fresh queue so the fds travel too */
		free(wire);
	}
	wd_outq_free(q);
	q = wd_outq_new();
	wd_outq_set_frame_max(q, 1000);
	for (size_t i = 0; i < 300; i++) {
		struct stat st;
		assert_int_equal(fstat(fds[i], &st), -1); /* the first queue took and closed them */
	}
	make_fds(fds, 300, dev, ino);
	assert_int_equal(wd_outq_push(q, payload, 10000, fds, 300), 0);
	while (wd_outq_flush(q, sv[0]) == 1)
		;
	recv_frame(b, sv[1], &f);
	assert_int_equal(f.len, 10000);
	assert_memory_equal(f.payload, payload, 10000);
	check_fds(&f, dev, ino, 300);
	wd_frame_close_fds(&f);

	/* the blocking sender splits the same way; one byte over the maximum is refused */
	assert_int_equal(wd_message_send_blocking(sv[0], payload, 10000, 1000), 0);
	recv_frame(b, sv[1], &f);
	assert_int_equal(f.len, 10000);
	assert_memory_equal(f.payload, payload, 10000);
	assert_int_equal(f.nfds, 0);
	le32(hdr, 1000);
	le32(hdr + 4, WD_FRAME_MORE);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
		assert_int_equal(wd_inbuf_feed(b, payload, 1000), 0);
		assert_int_equal(wd_inbuf_next(b, &f), 0);
	}
	le32(hdr, 1);
	le32(hdr + 4, 0);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_feed(b, "x", 1), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
	wd_inbuf_free(b);
	wd_outq_free(q);
	free(payload);
	close(sv[0]);
	close(sv[1]);
}

/* Bytes a process holds in malloc'd memory, whoever provides malloc. */
size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));
static size_t heap_bytes(void)
{
	if (__sanitizer_get_current_allocated_bytes)
		return __sanitizer_get_current_allocated_bytes();
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/*
 * An announced length over max_payload is refused from the 8-byte header alone, and nothing is
 * sized for it: the heap does not grow by anything near the announced length.
 */
static void test_oversized_length(void **state)
{
	const uint32_t max = 256u << 20;
	uint8_t hdr[8];
	int sv[2];
	struct wd_inbuf *b = wd_inbuf_new(max, 0);
	struct wd_frame f;
	size_t before;

	pair(sv, 1);
	le32(hdr, max + 1);
	le32(hdr + 4, 0);
	assert_int_equal(send(sv[0], hdr, 8, 0), 8);
	assert_int_equal(send(sv[0], "xxxx", 4, 0), 4);
	before = heap_bytes();
	assert_int_equal(wd_inbuf_read(b, sv[1]), 12);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
	/* Further bytes do not size anything for the frame either, and the error stays. */
	assert_int_equal(send(sv[0], "yyyy", 4, 0), 4);
	assert_int_equal(wd_inbuf_read(b, sv[1]), 4);
	assert_true(heap_bytes() - before < (4u << 20));
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
	wd_inbuf_free(b);

	/* Exactly max is accepted (limits are inclusive), max + 1 is not, via feed. */
	b = wd_inbuf_new(16, 0);
	le32(hdr, 16);
	le32(hdr + 4, 0);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 0);
	assert_int_equal(wd_inbuf_feed(b, "0123456789abcdef", 16), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(f.len, 16);
	assert_memory_equal(f.payload, "0123456789abcdef", 16);
	le32(hdr, 17);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
	wd_inbuf_free(b);

	/* The sending side refuses what the format cannot express: 2,001 fds need at least 9
	 * bytes (one per batch of 250), and an empty message is only its 8-byte header. */
	{
		struct wd_outq *q = wd_outq_new();
		static int many[2001];
		int fd = dup(0);

		for (size_t i = 0; i < 2001; i++)
			many[i] = fd;
		assert_int_equal(wd_outq_push(q, "", 0, many, 2001), -WEIGHTD_E_LIMIT_EXCEEDED);
		assert_false(fd_is_open(fd));   /* ownership taken even on failure */
		assert_int_equal(wd_outq_frames(q), 0);
		wd_outq_free(q);
	}
	close(sv[0]);
	close(sv[1]);
}

/* More fds than max_fds: the excess is closed and the read is a protocol error. */
static void test_too_many_fds(void **state)
{
	int sv[2], fds[10];
	dev_t dev[10];
	ino_t ino[10];
	struct wd_inbuf *b;
	struct wd_frame f;
	int base;

	pair(sv, 1);
	base = count_fds();
	make_fds(fds, 10, dev, ino);
	b = wd_inbuf_new(1024, 4);
	assert_int_equal(wd_frame_send_blocking(sv[0], "0123456789", 10, fds, 10), 0);
	for (int i = 0; i < 10; i++)
		close(fds[i]);
	assert_int_equal(count_fds(), base);
	assert_int_equal(wd_inbuf_read(b, sv[1]), -WEIGHTD_E_PROTOCOL);
	/* The 4 within the limit are held until the buffer is freed; the other 6 were closed. */
	assert_int_equal(count_fds(), base + 4);
	wd_inbuf_free(b);
	assert_int_equal(count_fds(), base);

	/* max_fds 0: any fd at all is a protocol error and is closed. */
	make_fds(fds, 1, dev, ino);
	b = wd_inbuf_new(1024, 0);
	assert_int_equal(wd_frame_send_blocking(sv[0], "x", 1, fds, 1), 0);
	close(fds[0]);
	assert_int_equal(wd_inbuf_read(b, sv[1]), -WEIGHTD_E_PROTOCOL);
	assert_int_equal(count_fds(), base);
	wd_inbuf_free(b);

	/* A header announcing more fds than max_fds is a limit error before the payload arrives. */
	{
		uint8_t hdr[8];
		b = wd_inbuf_new(1024, 4);
		le32(hdr, 100);
		le32(hdr + 4, 5);
		assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
		assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
		wd_inbuf_free(b);
		b = wd_inbuf_new(1024, UINT32_MAX);
		le32(hdr + 4, WD_FRAME_MAX_FDS + 1);
		assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
		assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
		wd_inbuf_free(b);
	}
	close(sv[0]);
	close(sv[1]);
}

/*
 * MSG_CTRUNC: the receiver cannot install the fds (RLIMIT_NOFILE), the kernel truncates the
 * control data, and the read must fail with every fd that did arrive closed. Run in a child so
 * the lowered limit does not leak into other tests.
 */
static void test_ctrunc(void **state)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		int sv[2], fds[8];
		dev_t dev[8];
		ino_t ino[8];
		struct rlimit old, low;
		struct wd_inbuf *b = wd_inbuf_new(1024, 100);
		int base, rc, lowest = 0;

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv))
			_exit(10);
		for (int i = 0; i < 8; i++) {
			fds[i] = memfd_create("wd-test", MFD_CLOEXEC);
			if (fds[i] < 0)
				_exit(11);
			(void)dev;
			(void)ino;
		}
		if (wd_frame_send_blocking(sv[0], "abc", 3, fds, 8))
			_exit(12);
		for (int i = 0; i < 8; i++)
			close(fds[i]);
		base = count_fds();
		while (fcntl(lowest, F_GETFD) >= 0)
			lowest++;
		getrlimit(RLIMIT_NOFILE, &old);
		low = old;
		low.rlim_cur = (rlim_t)lowest + 2; /* room for at most 2 of the 8 */
		if (setrlimit(RLIMIT_NOFILE, &low))
			_exit(13);
		rc = wd_inbuf_read(b, sv[1]);
		setrlimit(RLIMIT_NOFILE, &old);
		/* out of descriptors is named as such, not as a protocol error */
		if (rc != -WEIGHTD_E_RESOURCE_EXHAUSTED || wd_inbuf_fds_dropped(b) == 0) {
			fprintf(stderr, "read returned %d\n", rc);
			_exit(14);
		}
		if (count_fds() != base)
			_exit(15);
		wd_inbuf_free(b);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_garbage_headers(void **state)
{
	struct wd_inbuf *b;
	struct wd_frame f;
	uint8_t hdr[8];

	/* nfds announced, none arrived (fed bytes carry no fds): protocol error, and it sticks. */
	b = wd_inbuf_new(1024, 16);
	le32(hdr, 3);
	le32(hdr + 4, 1);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 0); /* payload not complete yet */
	assert_int_equal(wd_inbuf_feed(b, "abc", 3), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_PROTOCOL);
	le32(hdr, 0);
	le32(hdr + 4, 0);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_PROTOCOL);
	wd_inbuf_free(b);

	/* More fd batches than the frame has bytes: 2001 fds need 9 bytes, a bare header has 8. */
	b = wd_inbuf_new(1024, 4096);
	le32(hdr, 0);
	le32(hdr + 4, 2001);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_PROTOCOL);
	wd_inbuf_free(b);

	/* A header arriving one byte at a time, then a frame split at every offset. */
	b = wd_inbuf_new(1024, 0);
	le32(hdr, 5);
	le32(hdr + 4, 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(wd_inbuf_next(b, &f), 0);
		assert_int_equal(wd_inbuf_feed(b, hdr + i, 1), 0);
	}
	assert_int_equal(wd_inbuf_feed(b, "hello", 5), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(f.len, 5);
	assert_memory_equal(f.payload, "hello", 5);
	assert_int_equal(wd_inbuf_next(b, &f), 0);
	wd_inbuf_free(b);

	/* Random headers: each is accepted exactly when within both limits. */
	for (uint32_t seed = 1; seed < 2000; seed++) {
		uint8_t raw[8];
		uint32_t len, nfds;
		int rc;

		fill(raw, 8, seed);
		if (seed % 3 == 0)
			raw[2] = raw[3] = raw[6] = raw[7] = 0;
		len = raw[0] | raw[1] << 8 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24;
		nfds = raw[4] | raw[5] << 8 | (uint32_t)raw[6] << 16 | (uint32_t)raw[7] << 24;
		b = wd_inbuf_new(40000, 1000);
		assert_int_equal(wd_inbuf_feed(b, raw, 8), 0);
		rc = wd_inbuf_next(b, &f);
		if (len > 40000 || nfds > 1000)
			assert_int_equal(rc, -WEIGHTD_E_LIMIT_EXCEEDED);
		else if ((nfds + 249) / 250 > 8 + len || (len == 0 && nfds > 0))
			assert_int_equal(rc, -WEIGHTD_E_PROTOCOL);
		else
			assert_int_equal(rc, 0);
		wd_inbuf_free(b);
	}
}

/* The peer closes halfway through a frame that carries fds: EOF, no frame, no fd leaked. */
static void test_peer_closes_mid_frame(void **state)
{
	int sv[2], fds[3];
	dev_t dev[3];
	ino_t ino[3];
	uint8_t msg[8 + 10];
	struct wd_inbuf *b = wd_inbuf_new(1024, 16);
	struct wd_frame f;
	int base, rc, total = 0;

	pair(sv, 1);
	base = count_fds();
	make_fds(fds, 3, dev, ino);
	le32(msg, 100);
	le32(msg + 4, 3);
	memset(msg + 8, 'z', 10);
	{
		struct iovec iov = { .iov_base = msg, .iov_len = sizeof(msg) };
		char ctl[CMSG_SPACE(sizeof(fds))] = { 0 };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
				    .msg_controllen = sizeof(ctl) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(c), fds, sizeof(fds));
		assert_int_equal(sendmsg(sv[0], &m, 0), sizeof(msg));
	}
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	close(sv[0]);
	while ((rc = wd_inbuf_read(b, sv[1])) > 0)
		total += rc;
	assert_int_equal(total, sizeof(msg));
	assert_int_equal(rc, 0);
	assert_int_equal(wd_inbuf_next(b, &f), 0);
	assert_int_equal(count_fds(), base - 1 + 3); /* sv[0] gone, 3 held by the buffer */
	wd_inbuf_free(b);
	assert_int_equal(count_fds(), base - 1);
	close(sv[1]);
}

/* A reset connection reads as disconnected; a closed peer makes flush report it. */
static void test_disconnect(void **state)
{
	int sv[2];
	struct wd_outq *q = wd_outq_new();

	pair(sv, 1);
	close(sv[1]);
	assert_int_equal(wd_outq_push(q, "abc", 3, NULL, 0), 0);
	assert_int_equal(wd_outq_flush(q, sv[0]), -WEIGHTD_E_DISCONNECTED);
	assert_int_equal(wd_frame_send_blocking(sv[0], "abc", 3, NULL, 0), -WEIGHTD_E_DISCONNECTED);
	wd_outq_free(q);
	close(sv[0]);
}

/* Fds of frames never sent are closed by wd_outq_free, including the rest of a half-sent frame. */
static void test_outq_free_closes(void **state)
{
	int sv[2], a[3], c[600];
	dev_t dev[600];
	ino_t ino[600];
	struct wd_outq *q = wd_outq_new();
	int base, sndbuf = 4096;
	uint8_t *payload = malloc(1u << 20);

	base = count_fds();
	make_fds(a, 3, dev, ino);
	assert_int_equal(wd_outq_push(q, "abc", 3, a, 3), 0);
	assert_int_equal(count_fds(), base + 3);
	wd_outq_free(q);
	for (int i = 0; i < 3; i++)
		assert_false(fd_is_open(a[i]));
	assert_int_equal(count_fds(), base);

	/*
	 * A 1 MiB frame with 600 fds into a 4 KiB socket buffer: the first batches go out with the
	 * first bytes, the rest stays queued; free must close exactly what was not sent.
	 */
	pair(sv, 1);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	make_fds(c, 600, dev, ino);
	memset(payload, 1, 1u << 20);
	q = wd_outq_new();
	assert_int_equal(wd_outq_push(q, payload, 1u << 20, c, 600), 0);
	assert_int_equal(wd_outq_flush(q, sv[0]), 1);
	assert_int_equal(wd_outq_frames(q), 1);
	wd_outq_free(q);
	for (int i = 0; i < 600; i++)
		assert_false(fd_is_open(c[i]));
	assert_int_equal(count_fds(), base + 2);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(count_fds(), base);
	wd_outq_free(NULL);
	wd_inbuf_free(NULL);
	wd_frame_close_fds(NULL);
	free(payload);
}

/* The fds a queue still owns: pushed ones count, sent ones do not (the kernel has them). */
static void test_outq_counts_fds(void **state)
{
	int sv[2], a[5], sndbuf = 4096;
	dev_t dev[5];
	ino_t ino[5];
	struct wd_outq *q = wd_outq_new();
	uint8_t *payload = calloc(1, 1u << 20);

	(void)state;
	assert_non_null(payload);
	pair(sv, 1);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	make_fds(a, 5, dev, ino);
	assert_int_equal(wd_outq_fds(q), 0);
	assert_int_equal(wd_outq_push(q, "x", 1, a, 2), 0);
	assert_int_equal(wd_outq_push(q, payload, 1u << 20, NULL, 0), 0);
	assert_int_equal(wd_outq_push(q, "y", 1, a + 2, 3), 0);
	assert_int_equal(wd_outq_fds(q), 5);
	/* the first frame (and its fds) goes out, the big one fills the socket: 3 fds left */
	assert_int_equal(wd_outq_flush(q, sv[0]), 1);
	assert_int_equal(wd_outq_fds(q), 3);
	wd_outq_free(q);
	close(sv[0]);
	close(sv[1]);
	free(payload);
}

/*
 * What an input buffer holds or is about to hold: a frame counts its whole announced size as
 * soon as its header is in (clamped to the limit: a longer one fails the stream anyway), complete
 * frames count until they are taken, nothing is counted once all are taken.
 */
static void test_inbuf_partial(void **state)
{
	struct wd_inbuf *b = wd_inbuf_new(1000, 0);
	uint8_t hdr[8] = { 0 }, body[1000] = { 0 };
	struct wd_frame f;
	bool mid = true;

	(void)state;
	assert_non_null(b);
	assert_int_equal(wd_inbuf_partial(b, &mid), 0);
	assert_false(mid);
	le32(hdr, 100);
	assert_int_equal(wd_inbuf_feed(b, hdr, 3), 0);
	assert_int_equal(wd_inbuf_partial(b, &mid), 3); /* header not in yet: its bytes so far */
	assert_true(mid);
	assert_int_equal(wd_inbuf_feed(b, hdr + 3, 5), 0);
	assert_int_equal(wd_inbuf_partial(b, &mid), 108); /* announced: the whole frame */
	assert_true(mid);
	assert_int_equal(wd_inbuf_feed(b, body, 100), 0);
	assert_int_equal(wd_inbuf_partial(b, &mid), 108); /* complete, not taken */
	assert_false(mid);
	le32(hdr, 50);
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_partial(b, &mid), 108 + 58);
	assert_true(mid);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(wd_inbuf_partial(b, &mid), 58);
	assert_true(mid);
	assert_int_equal(wd_inbuf_feed(b, body, 50), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(wd_inbuf_partial(b, &mid), 0);
	assert_false(mid);
	le32(hdr, 0x7fffffff); /* over the limit: counted as the limit */
	assert_int_equal(wd_inbuf_feed(b, hdr, 8), 0);
	assert_int_equal(wd_inbuf_partial(b, NULL), 1008);
	wd_inbuf_free(b);
}

/* Empty "more" frames carry no bytes: they count towards max_frames, and a message of them is
 * unfinished (wd_inbuf_partial says mid-frame) until its last frame. */
static void test_inbuf_empty_frames_count(void **state)
{
	static const uint8_t empty_more[8] = { 0, 0, 0, 0, 0, 0, 0, 0x80 };
	static const uint8_t last[9] = { 1, 0, 0, 0, 0, 0, 0, 0, 'x' };
	struct wd_inbuf *b = wd_inbuf_new(4096, 0);
	struct wd_frame f;
	bool mid = false;

	(void)state;
	wd_inbuf_set_max_frames(b, 4);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wd_inbuf_feed(b, empty_more, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 0);
	wd_inbuf_partial(b, &mid);
	assert_true(mid);
	assert_int_equal(wd_inbuf_feed(b, last, 9), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(f.len, 1);
	assert_int_equal(f.payload[0], 'x');
	wd_inbuf_partial(b, &mid);
	assert_false(mid);
	assert_false(wd_inbuf_over_frames(b));
	/* a fifth frame is one too many, empty or not */
	for (int i = 0; i < 5; i++)
		assert_int_equal(wd_inbuf_feed(b, empty_more, 8), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_true(wd_inbuf_over_frames(b));
	wd_inbuf_free(b);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_wire_format), cmocka_unit_test(test_small_round_trip),
	  cmocka_unit_test(test_large_frames_partial), cmocka_unit_test(test_fd_counts),
	  cmocka_unit_test(test_send_blocking), cmocka_unit_test(test_multi_frame),
	  cmocka_unit_test(test_oversized_length), cmocka_unit_test(test_too_many_fds),
	  cmocka_unit_test(test_ctrunc), cmocka_unit_test(test_garbage_headers),
	  cmocka_unit_test(test_peer_closes_mid_frame), cmocka_unit_test(test_disconnect),
	  cmocka_unit_test(test_outq_free_closes), cmocka_unit_test(test_outq_counts_fds),
	  cmocka_unit_test(test_inbuf_partial), cmocka_unit_test(test_inbuf_empty_frames_count))
