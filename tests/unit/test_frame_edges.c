/* SPDX-License-Identifier: Apache-2.0 */
/* test_frame_edges.c - the edges of src/frame_*.c that test_frame.c's round trips do not reach: a
 * message past the frame format's reach, a message whose later frame cannot carry its fds (taken
 * back whole, the queue as it was), raising a receiver's limits after the hello, a blocking send
 * that has to wait for the peer to read, and the message sender's zero frame size; borrowed fds
 * (sent without a copy, never closed by the queue, copied only to wait in it). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frame.h"
#include "msg.h"
#include "weightd.pb-c.h"

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static int fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
	p[2] = (v >> 16) & 0xff;
	p[3] = (v >> 24) & 0xff;
}

/* A message over 4 TiB (what 2^32 frames of 1 KiB could not carry) is refused before anything
 * is read from it, its fds closed, the queue untouched. */
static void test_push_beyond_the_format(void **state)
{
	struct wd_outq *q = wd_outq_new();
	int p[2];

	assert_non_null(q);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	/* the payload pointer is never read: the length is refused first */
	assert_int_equal(wd_outq_push(q, "", (size_t)UINT32_MAX * 1024 + 1, p, 2), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_false(fd_is_open(p[0]));
	assert_false(fd_is_open(p[1]));
	assert_int_equal(wd_outq_bytes(q), 0);
	assert_int_equal(wd_outq_frames(q), 0);
	assert_int_equal(wd_outq_fds(q), 0);
	wd_outq_free(q);
}

/*
 * 49 bytes and 16,384 fds split into two frames of 8,192 fds; each needs 33 bytes (one per batch
 * of 250 fds) and the second, 8 + 24 bytes, is one short. The first frame, already queued, is
 * taken back: the peer gets the message queued before and nothing of this one, and every fd the
 * failed message carried is closed.
 */
static void test_failed_message_is_taken_back_whole(void **state)
{
	static int fds[16384];
	struct wd_outq *q = wd_outq_new();
	struct wd_inbuf *in = wd_inbuf_new(1024, 16);
	uint8_t payload[49];
	struct wd_frame f;
	int sv[2], p[2], first[2], rc;
	size_t bytes, frames, nfds;

	assert_non_null(q);
	assert_non_null(in);
	pair(sv);
	wd_outq_set_frame_max(q, 64);
	assert_int_equal(pipe2(first, O_CLOEXEC), 0);
	close(first[1]);
	assert_int_equal(wd_outq_push(q, "before", 6, first, 1), 0);
	bytes = wd_outq_bytes(q);
	frames = wd_outq_frames(q);
	nfds = wd_outq_fds(q);
	assert_int_equal(frames, 1);

	memset(payload, 'x', sizeof(payload));
	for (size_t i = 0; i < 16384; i++)
		fds[i] = -1;              /* placeholders: closing skips them */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fds[0] = p[0];                    /* in the first frame */
	fds[16383] = p[1];                /* in the second */
	assert_int_equal(wd_outq_push(q, payload, sizeof(payload), fds, 16384), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_false(fd_is_open(p[0]));
	assert_false(fd_is_open(p[1]));
	assert_int_equal(wd_outq_bytes(q), bytes);
	assert_int_equal(wd_outq_frames(q), frames);
	assert_int_equal(wd_outq_fds(q), nfds);

	/* what is left goes out, and is exactly the earlier message */
	assert_int_equal(wd_outq_flush(q, sv[0]), 0);
	shutdown(sv[0], SHUT_WR);
	for (;;) {
		rc = wd_inbuf_next(in, &f);
		assert_true(rc >= 0);
		if (rc == 1)
			break;
		assert_true(wd_inbuf_read(in, sv[1]) > 0);
	}
	assert_int_equal(f.len, 6);
	assert_memory_equal(f.payload, "before", 6);
	assert_int_equal(f.nfds, 1);
	wd_frame_close_fds(&f);
	assert_int_equal(wd_inbuf_next(in, &f), 0);
	assert_int_equal(wd_inbuf_read(in, sv[1]), 0);  /* end of stream: nothing else came */
	wd_inbuf_free(in);
	wd_outq_free(q);
	close(sv[0]);
	close(sv[1]);
}

/* A frame of `len` bytes (no fds) as it travels. */
static size_t frame_bytes(uint8_t *out, uint32_t len)
{
	put32(out, len);
	put32(out + 4, 0);
	memset(out + 8, 'a', len);
	return 8 + (size_t)len;
}

/* The limit of one frame only rises (a client raises it to what the daemon's hello says); the
 * message limit follows it up and never falls below it. */
static void test_limits_rise_and_never_fall(void **state)
{
	uint8_t buf[8 + 64];
	struct wd_inbuf *b = wd_inbuf_new(16, 0);
	struct wd_frame f;

	assert_non_null(b);
	wd_inbuf_raise_max_payload(b, 8);             /* lower: no effect */
	assert_int_equal(wd_inbuf_feed(b, buf, frame_bytes(buf, 16)), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(f.len, 16);
	assert_int_equal(wd_inbuf_feed(b, buf, frame_bytes(buf, 32)), 0);
	assert_int_equal(wd_inbuf_next(b, &f), -WEIGHTD_E_LIMIT_EXCEEDED);
	wd_inbuf_free(b);

	b = wd_inbuf_new(16, 0);
	assert_non_null(b);
	wd_inbuf_raise_max_payload(b, 64);
	assert_int_equal(wd_inbuf_feed(b, buf, frame_bytes(buf, 64)), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(f.len, 64);
	/* a message limit under the frame limit is taken as the frame limit */
	wd_inbuf_set_max_message(b, 10);
	assert_int_equal(wd_inbuf_feed(b, buf, frame_bytes(buf, 64)), 0);
	assert_int_equal(wd_inbuf_next(b, &f), 1);
	assert_int_equal(f.len, 64);
	wd_inbuf_free(b);
}

struct reader {
	int sock;
	size_t want, got;
};

/* Sleeps a little so the sender finds the socket full, then reads everything. */
static void *reader_main(void *arg)
{
	struct reader *r = arg;
	static uint8_t buf[65536];

	usleep(50 * 1000);
	while (r->got < r->want) {
		ssize_t n = read(r->sock, buf, sizeof(buf));

		if (n <= 0)
			break;
		r->got += (size_t)n;
	}
	return NULL;
}

/* A blocking send on a non-blocking socket waits in poll for the peer instead of failing. */
static void test_blocking_send_waits_for_room(void **state)
{
	const size_t len = 4u << 20;
	uint8_t *payload = calloc(1, len);
	struct reader r;
	pthread_t t;
	int sv[2], small = 4096;

	assert_non_null(payload);
	pair(sv);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	r.sock = sv[1];
	r.want = 8 + len;
	r.got = 0;
	assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
	assert_int_equal(wd_frame_send_blocking(sv[0], payload, len, NULL, 0), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(r.got, 8 + len);
	free(payload);
	close(sv[0]);
	close(sv[1]);
}

static void test_message_needs_a_frame_size(void **state)
{
	int sv[2];

	pair(sv);
	assert_int_equal(wd_message_send_blocking(sv[0], "abc", 3, 0), -WEIGHTD_E_LIMIT_EXCEEDED);
	close(sv[0]);
	close(sv[1]);
}

/* A packed request releasing `n` handles 1..n (n * ~2 bytes on the wire). */
static uint8_t *packed_release(size_t n, size_t *ret_len)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Release rel = WEIGHTD__RELEASE__INIT;
	uint64_t *h = malloc(n * sizeof(*h));
	uint8_t *buf;

	assert_non_null(h);
	for (size_t i = 0; i < n; i++)
		h[i] = i + 1;
	rel.n_handles = n;
	rel.handles = h;
	req.body_case = WEIGHTD__REQUEST__BODY_RELEASE;
	req.release = &rel;
	req.id = 42;
	*ret_len = weightd__request__get_packed_size(&req);
	buf = malloc(*ret_len);
	assert_non_null(buf);
	weightd__request__pack(&req, buf);
	free(h);
	return buf;
}

static void check_release(const Weightd__Request *r, size_t n)
{
	assert_non_null(r);
	assert_int_equal(r->id, 42);
	assert_int_equal(r->body_case, WEIGHTD__REQUEST__BODY_RELEASE);
	assert_int_equal(r->release->n_handles, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(r->release->handles[i], i + 1);
}

/* A freed message's blocks are kept and the next message of that size decodes into them. */
static void test_msg_cache_reuses_blocks(void **state)
{
	size_t n = 100000, len;
	uint8_t *buf = packed_release(n, &len);
	struct wd_msg_cache *mc = wd_msg_cache_new(16u << 20);
	Weightd__Request *a, *b;
	size_t kept;

	(void)state;
	assert_non_null(mc);
	a = wd_msg_unpack_cached(&weightd__request__descriptor, buf, len, mc);
	check_release(a, n);
	assert_int_equal(wd_msg_cache_bytes(mc), 0);
	wd_msg_free(a);
	kept = wd_msg_cache_bytes(mc);
	assert_true(kept >= n * sizeof(uint64_t));   /* the handles' array at least */
	b = wd_msg_unpack_cached(&weightd__request__descriptor, buf, len, mc);
	check_release(b, n);
	assert_ptr_equal(a, b);                      /* the same first block */
	assert_true(wd_msg_cache_bytes(mc) < kept);
	wd_msg_free(b);
	assert_int_equal(wd_msg_cache_bytes(mc), kept);
	wd_msg_cache_unref(mc);
	free(buf);
}

/* Never more than max_bytes are kept: the rest is freed. */
static void test_msg_cache_is_bounded(void **state)
{
	size_t n = 100000, len;
	uint8_t *buf = packed_release(n, &len);
	struct wd_msg_cache *mc = wd_msg_cache_new(64u << 10);
	Weightd__Request *ms[3];

	(void)state;
	assert_non_null(mc);
	for (int i = 0; i < 3; i++) {
		ms[i] = wd_msg_unpack_cached(&weightd__request__descriptor, buf, len, mc);
		check_release(ms[i], n);
	}
	for (int i = 0; i < 3; i++)
		wd_msg_free(ms[i]);
	assert_true(wd_msg_cache_bytes(mc) <= (64u << 10));
	wd_msg_cache_unref(mc);
	free(buf);
}

/* A message may outlive its cache's owner (a reply the user still holds after close): the last
 * message freed frees the cache. Under ASan a use after free here fails the test. */
static void test_msg_outlives_cache_owner(void **state)
{
	size_t n = 1000, len;
	uint8_t *buf = packed_release(n, &len);
	struct wd_msg_cache *mc = wd_msg_cache_new(16u << 20);
	Weightd__Request *a, *bad;

	(void)state;
	assert_non_null(mc);
	a = wd_msg_unpack_cached(&weightd__request__descriptor, buf, len, mc);
	/* a message that does not decode gives its blocks back and its reference too */
	bad = wd_msg_unpack_cached(&weightd__request__descriptor, buf, len - 1, mc);
	assert_null(bad);
	wd_msg_cache_unref(mc);
	check_release(a, n);
	wd_msg_free(a);
	free(buf);
}

/* Whether the mapping holding `p` is advised for huge pages ("hg" in its VmFlags), from smaps. */
static bool advised_huge(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	bool inside = false, hg = false;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (inside && strncmp(line, "VmFlags:", 8) == 0) {
			hg = strstr(line, " hg") != NULL;
			break;
		}
	}
	fclose(f);
	return hg;
}

/* A message decoding into megabytes gets blocks of their own, advised for transparent huge pages
 * (a large unit faults in 2 MiB at a time); a small one stays on malloc's heap. */
static void test_large_message_in_huge_pages(void **state)
{
	size_t n = 400000, len, small_len;
	uint8_t *buf = packed_release(n, &len), *small = packed_release(10, &small_len);
	struct wd_msg_cache *mc = wd_msg_cache_new(16u << 20);
	Weightd__Request *a, *b;

	(void)state;
	if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0)
		skip();   /* a kernel without transparent huge pages */
	a = wd_msg_unpack_cached(&weightd__request__descriptor, buf, len, mc);
	check_release(a, n);
	assert_true(advised_huge(a));
	assert_true(advised_huge(a->release->handles));
	b = wd_msg_unpack(&weightd__request__descriptor, small, small_len);
	check_release(b, 10);
	assert_false(advised_huge(b));
	wd_msg_free(a);
	wd_msg_free(b);
	wd_msg_cache_unref(mc);
	free(buf);
	free(small);
}

static ino_t ino_of(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

/* Take one whole message from sock into f (the sender flushing q between reads). */
static void take_message(struct wd_inbuf *in, struct wd_outq *q, int out, int sock,
			 struct wd_frame *f)
{
	for (;;) {
		int rc = wd_inbuf_next(in, f);

		assert_true(rc >= 0);
		if (rc == 1)
			return;
		assert_true(wd_outq_flush(q, out) >= 0);
		assert_true(wd_inbuf_read(in, sock) > 0);
	}
}

/*
 * Borrowed fds: a message the socket takes at once carries the caller's own descriptors, which
 * stay open; one that must wait gets copies of its own from wd_outq_keep_fds, so the caller may
 * close its own, the peer still receives the same files, and the queue closes its copies once
 * sent. A queue freed with a borrowed message unsent closes nothing of the caller's.
 */
static void test_borrowed_fds(void **state)
{
	struct wd_outq *q = wd_outq_new();
	struct wd_inbuf *in = wd_inbuf_new(2u << 20, 16);
	uint8_t *big = calloc(1, 1u << 20);
	int sv[2], p[2], sndbuf = 4096, fl;
	ino_t ino;
	struct wd_frame f;

	(void)state;
	assert_non_null(q);
	assert_non_null(in);
	assert_non_null(big);
	pair(sv);
	fl = fcntl(sv[0], F_GETFL);
	assert_int_equal(fcntl(sv[0], F_SETFL, fl | O_NONBLOCK), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	ino = ino_of(p[0]);

	/* taken at once: nothing to copy, the caller's fd stays open */
	assert_int_equal(wd_outq_push_borrowed(q, "now", 3, p, 1), 0);
	assert_int_equal(wd_outq_flush(q, sv[0]), 0);
	assert_int_equal(wd_outq_keep_fds(q), 0);
	assert_true(fd_is_open(p[0]));
	take_message(in, q, sv[0], sv[1], &f);
	assert_int_equal(f.len, 3);
	assert_int_equal(f.nfds, 1);
	assert_int_equal(ino_of(f.fds[0]), ino);
	assert_int_not_equal(f.fds[0], p[0]);
	wd_frame_close_fds(&f);

	/* behind a megabyte the socket cannot take: copied, then the caller closes its own */
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	assert_int_equal(wd_outq_push(q, big, 1u << 20, NULL, 0), 0);
	assert_int_equal(wd_outq_push_borrowed(q, "later", 5, p, 2), 0);
	assert_int_equal(wd_outq_flush(q, sv[0]), 1);
	assert_int_equal(wd_outq_fds(q), 2);
	assert_int_equal(wd_outq_keep_fds(q), 0);
	assert_int_equal(wd_outq_fds(q), 2);
	close(p[0]);
	close(p[1]);
	take_message(in, q, sv[0], sv[1], &f);   /* the megabyte */
	assert_int_equal(f.len, 1u << 20);
	assert_int_equal(f.nfds, 0);
	take_message(in, q, sv[0], sv[1], &f);
	assert_int_equal(f.len, 5);
	assert_memory_equal(f.payload, "later", 5);
	assert_int_equal(f.nfds, 2);
	assert_int_equal(ino_of(f.fds[0]), ino);
	assert_int_equal(ino_of(f.fds[1]), ino);
	/* sent: the queue's copies are closed, so the pipe's write end is open only here */
	assert_int_equal(wd_outq_fds(q), 0);
	{
		char byte = 'z', got = 0;

		/* non-blocking: a copy left open would show as EAGAIN, not hang the test */
		assert_int_equal(fcntl(f.fds[0], F_SETFL, O_NONBLOCK), 0);
		assert_int_equal(write(f.fds[1], &byte, 1), 1);
		close(f.fds[1]);
		f.fds[1] = -1;
		assert_int_equal(read(f.fds[0], &got, 1), 1);
		assert_int_equal(got, 'z');
		assert_int_equal(read(f.fds[0], &got, 1), 0);   /* no writer left anywhere */
	}
	wd_frame_close_fds(&f);

	/* out of descriptors half-way through a frame: refused, the copy made is closed and the
	 * frame is as it was; later, copied and sent */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(wd_outq_push(q, big, 1u << 20, NULL, 0), 0);
	assert_int_equal(wd_outq_push_borrowed(q, "tight", 5, p, 2), 0);
	assert_int_equal(wd_outq_flush(q, sv[0]), 1);
	{
		struct rlimit old, tight;
		int lowest = dup(0);

		assert_true(lowest >= 0);
		close(lowest);
		assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
		tight = old;
		/* one number free (the lowest): the first copy is made, the second is not */
		tight.rlim_cur = (rlim_t)lowest + 1;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
		errno = 0;
		assert_int_equal(wd_outq_keep_fds(q), -WEIGHTD_E_RESOURCE_EXHAUSTED);
		assert_int_equal(errno, EMFILE);
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
		assert_int_equal(fcntl(lowest, F_GETFD), -1);   /* no copy left behind */
	}
	assert_int_equal(wd_outq_keep_fds(q), 0);
	close(p[0]);
	close(p[1]);
	take_message(in, q, sv[0], sv[1], &f);
	assert_int_equal(f.len, 1u << 20);
	take_message(in, q, sv[0], sv[1], &f);
	assert_int_equal(f.len, 5);
	assert_memory_equal(f.payload, "tight", 5);
	assert_int_equal(f.nfds, 2);
	assert_int_equal(ino_of(f.fds[0]), ino_of(f.fds[1]));
	wd_frame_close_fds(&f);

	/* freed unsent: the caller's fds are left alone */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(wd_outq_push(q, big, 1u << 20, NULL, 0), 0);
	assert_int_equal(wd_outq_push_borrowed(q, "never", 5, p, 2), 0);
	assert_int_equal(wd_outq_flush(q, sv[0]), 1);
	wd_outq_free(q);
	assert_true(fd_is_open(p[0]));
	assert_true(fd_is_open(p[1]));
	close(p[0]);
	close(p[1]);
	wd_inbuf_free(in);
	close(sv[0]);
	close(sv[1]);
	free(big);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_push_beyond_the_format),
	  cmocka_unit_test(test_failed_message_is_taken_back_whole),
	  cmocka_unit_test(test_limits_rise_and_never_fall),
	  cmocka_unit_test(test_blocking_send_waits_for_room),
	  cmocka_unit_test(test_message_needs_a_frame_size),
	  cmocka_unit_test(test_msg_cache_reuses_blocks),
	  cmocka_unit_test(test_msg_cache_is_bounded),
	  cmocka_unit_test(test_msg_outlives_cache_owner),
	  cmocka_unit_test(test_large_message_in_huge_pages), cmocka_unit_test(test_borrowed_fds))
