/* SPDX-License-Identifier: Apache-2.0 */
/* frame_recv.c - the receiving half of frames with SCM_RIGHTS fds: the receive buffer, its limits,
 * and whole messages joined from their frames. */
#include "frame.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "frame_int.h"
#include "msg.h"

/* Free space a read asks for at least; also the size an idle receive buffer shrinks back to. */
#define INBUF_CHUNK (64u << 10)
/* recvmsg never delivers more than one SCM_RIGHTS batch, and the kernel caps a batch at 253. */
#define RECV_MAX_FDS 253

/* --- receiving ---------------------------------------------------------------------------- */

/*
 * Bytes live in buf[start..end); a frame handed out is skipped by moving `start`, and the live
 * bytes are moved to the front only when a read needs the room. Fds live in fds[fd_head..
 * fd_head+fd_count) in arrival order.
 */
struct wd_inbuf {
	uint8_t *buf;
	size_t cap;
	size_t start;
	size_t end;
	int *fds;
	size_t fd_cap;
	size_t fd_head;
	size_t fd_count;
	uint32_t max_payload;
	uint32_t max_fds;
	uint64_t max_message;
	size_t keep;        /* an idle buffer up to this size is kept (wd_inbuf_set_keep) */
	int failed;         /* sticky error of wd_inbuf_next: the stream cannot be resynchronised */
	uint64_t fds_dropped;
	/* a message being joined from several frames */
	uint8_t *msg;
	size_t msg_len, msg_cap;
	int *msg_fds;
	size_t msg_nfds, msg_fd_cap;
	bool msg_handed;    /* msg was handed out: reset on the next call */
	uint32_t msg_frames; /* frames joined into msg so far, empty ones too */
	uint32_t max_frames; /* the most one message may span (0: any) */
	bool over_frames;    /* the sticky failure is for max_frames */
};

struct wd_inbuf *wd_inbuf_new(uint32_t max_payload, uint32_t max_fds)
{
	struct wd_inbuf *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->max_payload = max_payload;
	b->max_fds = max_fds;
	b->max_message = max_payload;
	return b;
}

void wd_inbuf_set_max_message(struct wd_inbuf *b, uint64_t max_message)
{
	b->max_message = max_message < b->max_payload ? b->max_payload : max_message;
}

void wd_inbuf_set_max_frames(struct wd_inbuf *b, uint32_t max_frames)
{
	b->max_frames = max_frames;
}

bool wd_inbuf_over_frames(const struct wd_inbuf *b)
{
	return b && b->over_frames;
}

void wd_inbuf_set_keep(struct wd_inbuf *b, size_t bytes)
{
	b->keep = bytes;
}

void wd_inbuf_raise_max_payload(struct wd_inbuf *b, uint32_t max_payload)
{
	if (max_payload > b->max_payload)
		b->max_payload = max_payload;
	if (b->max_message < b->max_payload)
		b->max_message = b->max_payload;
}

uint64_t wd_inbuf_fds_dropped(const struct wd_inbuf *b)
{
	return b ? b->fds_dropped : 0;
}

void wd_inbuf_free(struct wd_inbuf *b)
{
	if (!b)
		return;
	close_fds(b->fds, b->fd_head, b->fd_head + b->fd_count);
	close_fds(b->msg_fds, 0, b->msg_nfds);
	free(b->msg_fds);
	free(b->msg);
	free(b->fds);
	free(b->buf);
	free(b);
}

/*
 * Make room for at least `want` bytes after `end`: move the live bytes to the front when that is
 * enough (and cheap next to the read that follows), else grow. An idle oversized buffer (left by
 * one large frame) shrinks back so a connection does not hold megabytes between frames.
 */
static int inbuf_reserve(struct wd_inbuf *b, size_t want)
{
	size_t live = b->end - b->start;
	size_t need, ncap;
	uint8_t *nbuf;

	if (live == 0) {
		b->start = b->end = 0;
		if (b->cap > 4 * INBUF_CHUNK && b->cap > b->keep && want <= INBUF_CHUNK) {
			free(b->buf);
			b->buf = NULL;
			b->cap = 0;
		}
	}
	if (b->cap - b->end >= want)
		return 0;
	if (want > SIZE_MAX - live)
		return -WEIGHTD_E_LIMIT_EXCEEDED;
	need = live + want;
	if (b->cap >= need) {
		memmove(b->buf, b->buf + b->start, live);
		b->start = 0;
		b->end = live;
		return 0;
	}
	ncap = b->cap ? b->cap : INBUF_CHUNK;
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	if (b->start) {
		memmove(b->buf, b->buf + b->start, live);
		b->start = 0;
		b->end = live;
	}
	nbuf = realloc(b->buf, ncap);
	if (!nbuf)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	b->buf = nbuf;
	if (ncap >= 2 * WD_HUGE_PAGE)   /* a large frame: fault it in 2 MiB at a time */
		wd_msg_advise_huge(nbuf, ncap);
	b->cap = ncap;
	return 0;
}

/*
 * Walk the buffered frames: complete ones count their bytes, the first incomplete one counts the
 * size its header announces (what the next reads will grow the buffer to; clamped to the limit,
 * since a larger announcement fails the stream), or its bytes so far when the header is not in.
 */
size_t wd_inbuf_partial(const struct wd_inbuf *b, bool *ret_mid_frame)
{
	size_t off = b->start, total = 0;
	bool mid = false;

	while (off < b->end) {
		size_t left = b->end - off, whole;
		uint32_t len;

		if (left < WD_FRAME_HEADER) {
			total += left;
			mid = true;
			break;
		}
		len = get_le32(b->buf + off);
		whole = (size_t)(len <= b->max_payload ? len : b->max_payload) + WD_FRAME_HEADER;
		if (len > b->max_payload || left < whole) {
			total += whole > left ? whole : left;
			mid = true;
			break;
		}
		total += whole;
		off += whole;
	}
	/* a message being joined from frames: its bytes so far are held too, and it is unfinished
	 * (even when its frames so far were empty) */
	if (!b->msg_handed && (b->msg_len || b->msg_nfds || b->msg_frames)) {
		total += b->msg_len;
		mid = true;
	}
	if (ret_mid_frame)
		*ret_mid_frame = mid;
	return total;
}

/* Room for `want` more fds at the tail of the FIFO. */
static int inbuf_reserve_fds(struct wd_inbuf *b, size_t want)
{
	size_t ncap;
	int *nfds;

	if (b->fd_count == 0)
		b->fd_head = 0;
	if (b->fd_cap - b->fd_head - b->fd_count >= want)
		return 0;
	if (b->fd_head) {
		memmove(b->fds, b->fds + b->fd_head, sizeof(int) * b->fd_count);
		b->fd_head = 0;
		if (b->fd_cap - b->fd_count >= want)
			return 0;
	}
	ncap = b->fd_cap ? b->fd_cap * 2 : RECV_MAX_FDS;
	while (ncap < b->fd_count + want)
		ncap *= 2;
	nfds = realloc(b->fds, sizeof(int) * ncap);
	if (!nfds)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	b->fds = nfds;
	b->fd_cap = ncap;
	return 0;
}

/*
 * How many bytes the next read should make room for: the rest of the current frame when its
 * header is in and within limits (so a large frame arrives in few reads), else one chunk. An
 * announced length over the limit never sizes the buffer.
 */
static size_t inbuf_want(const struct wd_inbuf *b)
{
	size_t live = b->end - b->start;
	size_t want = INBUF_CHUNK;

	if (live >= WD_FRAME_HEADER) {
		uint32_t len = get_le32(b->buf + b->start);

		if (len <= b->max_payload && (size_t)len + WD_FRAME_HEADER > live &&
		    (size_t)len + WD_FRAME_HEADER - live > want)
			want = (size_t)len + WD_FRAME_HEADER - live;
	}
	return want;
}

/*
 * Append received fds; every fd beyond max_fds is closed (-WEIGHTD_E_PROTOCOL), and all of them
 * when the FIFO cannot grow (-WEIGHTD_E_RESOURCE_EXHAUSTED).
 */
static int inbuf_take_fds(struct wd_inbuf *b, const int *fds, size_t n)
{
	size_t room = b->max_fds > b->fd_count ? b->max_fds - b->fd_count : 0;
	size_t keep = n < room ? n : room;

	if (keep && inbuf_reserve_fds(b, keep)) {
		close_fds(fds, 0, n);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	if (keep)
		memcpy(b->fds + b->fd_head + b->fd_count, fds, sizeof(int) * keep);
	b->fd_count += keep;
	close_fds(fds, keep, n);
	return keep == n ? 0 : -WEIGHTD_E_PROTOCOL;
}

static int inbuf_read(struct wd_inbuf *b, int sock, int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * RECV_MAX_FDS) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg;
	struct iovec iov;
	struct cmsghdr *c;
	size_t want = inbuf_want(b);
	ssize_t n;
	int rc = 0;

	if (want > INT32_MAX)
		want = INT32_MAX;
	rc = inbuf_reserve(b, want);
	if (rc)
		return rc;
	iov.iov_base = b->buf + b->end;
	iov.iov_len = b->cap - b->end < INT32_MAX ? b->cap - b->end : INT32_MAX;
	for (;;) {
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return WD_FRAME_AGAIN;
		if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)
			return -WEIGHTD_E_DISCONNECTED;
		return -WEIGHTD_E_IO;
	}
	b->end += (size_t)n;
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		const int *fds;
		size_t nfds;
		int trc;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		fds = (const int *)CMSG_DATA(c);
		nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (msg.msg_flags & MSG_CTRUNC) {
			close_fds(fds, 0, nfds);
			b->fds_dropped++;
			continue;
		}
		trc = inbuf_take_fds(b, fds, nfds);
		if (trc && !rc)
			rc = trc;
	}
	/* The control buffer holds the most fds a sendmsg can carry, so a truncation means the kernel
	 * could not install them: this process is at its descriptor limit. */
	if (msg.msg_flags & MSG_CTRUNC) {
		if (!b->fds_dropped)
			b->fds_dropped = 1;
		b->failed = -WEIGHTD_E_RESOURCE_EXHAUSTED;
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	if (rc)
		return rc;
	return (int)n;
}

int wd_inbuf_read(struct wd_inbuf *b, int sock)
{
	return inbuf_read(b, sock, MSG_DONTWAIT);
}

int wd_inbuf_read_wait(struct wd_inbuf *b, int sock)
{
	return inbuf_read(b, sock, 0);
}

int wd_inbuf_feed(struct wd_inbuf *b, const void *data, size_t len)
{
	int rc;

	if (!len)
		return 0;
	rc = inbuf_reserve(b, len);
	if (rc)
		return rc;
	memcpy(b->buf + b->end, data, len);
	b->end += len;
	return 0;
}

/* Append a continued frame's payload and fds to the message being joined. */
static int msg_append(struct wd_inbuf *b, const uint8_t *p, size_t len, const int *fds,
		      size_t nfds)
{
	if (b->msg_len + len > b->msg_cap) {
		size_t ncap = b->msg_cap ? b->msg_cap : INBUF_CHUNK;
		uint8_t *n;

		while (ncap < b->msg_len + len)
			ncap *= 2;
		n = realloc(b->msg, ncap);
		if (!n)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		b->msg = n;
		b->msg_cap = ncap;
	}
	if (b->msg_nfds + nfds > b->msg_fd_cap) {
		size_t ncap = b->msg_fd_cap ? b->msg_fd_cap : 64;
		int *n;

		while (ncap < b->msg_nfds + nfds)
			ncap *= 2;
		n = realloc(b->msg_fds, ncap * sizeof(int));
		if (!n)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		b->msg_fds = n;
		b->msg_fd_cap = ncap;
	}
	if (len)
		memcpy(b->msg + b->msg_len, p, len);
	if (nfds)
		memcpy(b->msg_fds + b->msg_nfds, fds, nfds * sizeof(int));
	b->msg_len += len;
	b->msg_nfds += nfds;
	return 0;
}

/*
 * Limits are checked as soon as a header is complete, before the payload arrives or anything is
 * sized for it; a continued message is checked against max_message frame by frame, before its
 * bytes are copied. A frame's fds are the first nfds of the FIFO: they travelled with its bytes,
 * so they arrived no later than its last byte, and earlier frames took exactly their own.
 */
int wd_inbuf_next(struct wd_inbuf *b, struct wd_frame *ret)
{
	if (b->failed)
		return b->failed;
	if (b->msg_handed) {
		b->msg_len = 0;
		b->msg_nfds = 0;
		b->msg_frames = 0;
		b->msg_handed = false;
	}
	for (;;) {
		size_t live = b->end - b->start;
		const uint8_t *h;
		uint32_t len, word, nfds;
		bool more;
		int *fds = NULL;

		if (live < WD_FRAME_HEADER)
			return 0;
		h = b->buf + b->start;
		len = get_le32(h);
		word = get_le32(h + 4);
		more = (word & WD_FRAME_MORE) != 0;
		nfds = word & ~WD_FRAME_MORE;
		if (len > b->max_payload || nfds > b->max_fds || nfds > WD_FRAME_MAX_FDS ||
		    b->msg_len + len > b->max_message || b->msg_nfds + nfds > b->max_fds) {
			b->failed = -WEIGHTD_E_LIMIT_EXCEEDED;
			return b->failed;
		}
		if (!fds_fit((size_t)WD_FRAME_HEADER + len, nfds)) {
			b->failed = -WEIGHTD_E_PROTOCOL;
			return b->failed;
		}
		/* empty frames count: a message of endless empty "more" frames carries no bytes for
		 * the byte limit to stop */
		if (b->max_frames && (more || b->msg_frames) && b->msg_frames >= b->max_frames) {
			b->over_frames = true;
			b->failed = -WEIGHTD_E_LIMIT_EXCEEDED;
			return b->failed;
		}
		if (live - WD_FRAME_HEADER < len)
			return 0;
		if (nfds > b->fd_count) {
			b->failed = -WEIGHTD_E_PROTOCOL;
			return b->failed;
		}
		if (!more && b->msg_frames == 0) {
			/* the common case: a whole message in one frame, handed out in place */
			if (nfds) {
				fds = malloc(sizeof(int) * nfds);
				if (!fds)
					return -WEIGHTD_E_RESOURCE_EXHAUSTED;
				memcpy(fds, b->fds + b->fd_head, sizeof(int) * nfds);
				b->fd_head += nfds;
				b->fd_count -= nfds;
			}
			ret->payload = b->buf + b->start + WD_FRAME_HEADER;
			ret->len = len;
			ret->fds = fds;
			ret->nfds = nfds;
			b->start += WD_FRAME_HEADER + (size_t)len;
			return 1;
		}
		if (msg_append(b, h + WD_FRAME_HEADER, len, nfds ? b->fds + b->fd_head : NULL, nfds) < 0)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		b->fd_head += nfds;
		b->fd_count -= nfds;
		b->start += WD_FRAME_HEADER + (size_t)len;
		b->msg_frames++;
		if (more)
			continue;
		if (b->msg_len > UINT32_MAX) {
			b->failed = -WEIGHTD_E_LIMIT_EXCEEDED;
			return b->failed;
		}
		if (b->msg_nfds) {
			fds = malloc(sizeof(int) * b->msg_nfds);
			if (!fds)
				return -WEIGHTD_E_RESOURCE_EXHAUSTED;
			memcpy(fds, b->msg_fds, sizeof(int) * b->msg_nfds);
		}
		ret->payload = b->msg;
		ret->len = (uint32_t)b->msg_len;
		ret->fds = fds;
		ret->nfds = (uint32_t)b->msg_nfds;
		b->msg_nfds = 0;
		b->msg_handed = true;
		return 1;
	}
}

void wd_frame_close_fds(struct wd_frame *f)
{
	if (!f)
		return;
	if (f->fds)
		close_fds(f->fds, 0, f->nfds);
	free(f->fds);
	f->fds = NULL;
	f->nfds = 0;
}
