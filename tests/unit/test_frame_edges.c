/* SPDX-License-Identifier: Apache-2.0 */
/* test_frame_edges.c - the edges of src/frame.c that test_frame.c's round trips do not reach: a
 * message past the frame format's reach, a message whose later frame cannot carry its fds (taken
 * back whole, the queue as it was), raising a receiver's limits after the hello, a blocking send
 * that has to wait for the peer to read, and the message sender's zero frame size. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_push_beyond_the_format),
		cmocka_unit_test(test_failed_message_is_taken_back_whole),
		cmocka_unit_test(test_limits_rise_and_never_fall),
		cmocka_unit_test(test_blocking_send_waits_for_room),
		cmocka_unit_test(test_message_needs_a_frame_size),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
