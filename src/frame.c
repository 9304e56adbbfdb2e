/* SPDX-License-Identifier: Apache-2.0 */
/* frame.c - length-prefixed frames with SCM_RIGHTS fds: the send queue and the receive buffer. */
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

/* At most this many iovecs per sendmsg when several queued frames go out together. */
#define OUTQ_IOV 64
/* Free space a read asks for at least; also the size an idle receive buffer shrinks back to. */
#define INBUF_CHUNK (64u << 10)
/* recvmsg never delivers more than one SCM_RIGHTS batch, and the kernel caps a batch at 253. */
#define RECV_MAX_FDS 253

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Close fds[from..to); fds may be NULL when the range is empty. */
static void close_fds(const int *fds, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/*
 * A frame of `bytes` bytes (header included) can carry `nfds` fds only if every batch of
 * WD_FRAME_FDS_PER_MSG fds gets at least one byte of its own.
 */
static bool fds_fit(size_t bytes, size_t nfds)
{
	return (nfds + WD_FRAME_FDS_PER_MSG - 1) / WD_FRAME_FDS_PER_MSG <= bytes;
}

/*
 * How many of `left` unsent bytes may travel with the next batch when `fds_left` fds are still to
 * send (this batch included): all but one byte per later batch.
 */
static size_t batch_bytes(size_t left, size_t fds_left)
{
	size_t later = 0;

	if (fds_left > WD_FRAME_FDS_PER_MSG)
		later = (fds_left - WD_FRAME_FDS_PER_MSG + WD_FRAME_FDS_PER_MSG - 1) /
			WD_FRAME_FDS_PER_MSG;
	return left - later;
}

/*
 * One sendmsg of iov[0..iovcnt) with fds[0..nfds) (nfds <= WD_FRAME_FDS_PER_MSG) attached.
 * Returns bytes sent (> 0; the fds went with them), WD_FRAME_AGAIN, or
 * -WEIGHTD_E_DISCONNECTED/-WEIGHTD_E_IO. On a Unix stream socket the kernel attaches the fds to the
 * first buffer it queues, so any positive return means they were sent.
 */
static ssize_t send_part(int sock, struct iovec *iov, int iovcnt, const int *fds, size_t nfds,
			 int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * WD_FRAME_FDS_PER_MSG)];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n;

	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	for (;;) {
		n = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
		if (n > 0)
			return n;
		if (n == 0)
			return -WEIGHTD_E_IO;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return WD_FRAME_AGAIN;
		if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
			return -WEIGHTD_E_DISCONNECTED;
		return -WEIGHTD_E_IO;
	}
}

/* --- sending ------------------------------------------------------------------------------ */

struct outq_frame {
	TAILQ_ENTRY(outq_frame) link;
	uint8_t *bytes;     /* header + payload */
	size_t len;         /* WD_FRAME_HEADER + payload length */
	size_t off;         /* bytes already sent */
	int *fds;           /* fds[fds_sent..nfds) unsent (owned unless borrowed) */
	size_t nfds;
	size_t fds_sent;
	bool borrowed;      /* the fds are the sender's: never closed here (wd_outq_push_borrowed) */
};

struct wd_outq {
	TAILQ_HEAD(outq_frames, outq_frame) list;
	size_t bytes;       /* unsent bytes over all frames */
	size_t frames;
	uint32_t frame_max; /* payload bytes per frame; longer messages are split */
	size_t fds;         /* unsent fds over all frames */
};

struct wd_outq *wd_outq_new(void)
{
	struct wd_outq *q = calloc(1, sizeof(struct wd_outq));

	if (q) {
		TAILQ_INIT(&q->list);
		q->frame_max = WD_FRAME_MAX_DEFAULT;
	}
	return q;
}

void wd_outq_set_frame_max(struct wd_outq *q, uint32_t frame_max)
{
	q->frame_max = frame_max < 64 ? 64 : frame_max;
}

static void outq_frame_free(struct outq_frame *f)
{
	if (!f->borrowed)
		close_fds(f->fds, f->fds_sent, f->nfds);
	free(f->fds);
	free(f->bytes);
	free(f);
}

void wd_outq_free(struct wd_outq *q)
{
	struct outq_frame *f;

	if (!q)
		return;
	while ((f = TAILQ_FIRST(&q->list))) {
		TAILQ_REMOVE(&q->list, f, link);
		outq_frame_free(f);
	}
	free(q);
}

/* Append one frame (header + payload copy) to the queue; the fds are the caller's until this
 * succeeds, then the queue's. */
static int outq_push_frame(struct wd_outq *q, const uint8_t *payload, size_t len, const int *fds,
			   size_t nfds, bool more, bool borrowed)
{
	struct outq_frame *f = calloc(1, sizeof(*f));

	if (!f)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	f->len = WD_FRAME_HEADER + len;
	f->bytes = malloc(f->len);
	if (nfds)
		f->fds = malloc(sizeof(int) * nfds);
	if (!f->bytes || (nfds && !f->fds)) {
		free(f->fds);
		free(f->bytes);
		free(f);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	if (nfds)
		memcpy(f->fds, fds, sizeof(int) * nfds);
	f->nfds = nfds;
	f->borrowed = borrowed && nfds;
	put_le32(f->bytes, (uint32_t)len);
	put_le32(f->bytes + 4, (uint32_t)nfds | (more ? WD_FRAME_MORE : 0));
	if (len)
		memcpy(f->bytes + WD_FRAME_HEADER, payload, len);
	TAILQ_INSERT_TAIL(&q->list, f, link);
	q->bytes += f->len;
	q->frames++;
	q->fds += nfds;
	return 0;
}

/*
 * Copies the payload behind freshly built headers so the caller's buffer (usually a packed
 * protobuf) can be freed at once; the fds are owned from here on whatever happens. A message
 * over the frame maximum (or with more fds than a frame carries) becomes k frames of about
 * len / k bytes each, the fds spread evenly; frames already queued for a message that then
 * fails are taken back, so the peer never sees half a message.
 */
static int outq_push(struct wd_outq *q, const void *payload, size_t len, const int *fds, size_t nfds,
		     bool borrowed)
{
	size_t k, per_bytes, per_fds, off = 0, fd_off = 0;
	size_t old_frames = q->frames, old_bytes = q->bytes, old_fds = q->fds;
	int rc;

	if (len > (size_t)UINT32_MAX * 1024 || nfds > (size_t)INT32_MAX) {
		rc = -WEIGHTD_E_LIMIT_EXCEEDED;
		goto fail;
	}
	k = (len + q->frame_max - 1) / q->frame_max;
	if ((nfds + WD_FRAME_MAX_FDS - 1) / WD_FRAME_MAX_FDS > k)
		k = (nfds + WD_FRAME_MAX_FDS - 1) / WD_FRAME_MAX_FDS;
	if (k == 0)
		k = 1;
	per_bytes = (len + k - 1) / k;
	per_fds = (nfds + k - 1) / k;
	for (size_t i = 0; i < k; i++) {
		size_t b = len - off < per_bytes ? len - off : per_bytes;
		size_t n = nfds - fd_off < per_fds ? nfds - fd_off : per_fds;

		if (!fds_fit(WD_FRAME_HEADER + b, n)) {
			rc = -WEIGHTD_E_LIMIT_EXCEEDED;
			goto undo;
		}
		/* an empty payload or fd list may be NULL: no arithmetic on it (NULL + 0 is undefined) */
		rc = outq_push_frame(q, b ? (const uint8_t *)payload + off : payload, b,
				     n ? fds + fd_off : fds, n, i + 1 < k, borrowed);
		if (rc < 0)
			goto undo;
		off += b;
		fd_off += n;
	}
	return 0;
undo:
	/* Take back this message's frames; their fds are closed below with the rest. */
	while (q->frames > old_frames) {
		struct outq_frame *f = TAILQ_LAST(&q->list, outq_frames);

		TAILQ_REMOVE(&q->list, f, link);
		q->frames--;
		free(f->fds);
		free(f->bytes);
		free(f);
	}
	q->bytes = old_bytes;
	q->fds = old_fds;
fail:
	if (!borrowed)
		close_fds(fds, 0, nfds);
	return rc;
}

int wd_outq_push(struct wd_outq *q, const void *payload, size_t len, const int *fds, size_t nfds)
{
	return outq_push(q, payload, len, fds, nfds, false);
}

int wd_outq_push_borrowed(struct wd_outq *q, const void *payload, size_t len, const int *fds,
			  size_t nfds)
{
	return outq_push(q, payload, len, fds, nfds, true);
}

int wd_outq_keep_fds(struct wd_outq *q)
{
	struct outq_frame *f;

	TAILQ_FOREACH(f, &q->list, link) {
		size_t n = f->nfds - f->fds_sent, k;
		int *dup;

		if (!f->borrowed)
			continue;
		/* all of a frame's or none: a frame never carries a number that is not its fd */
		dup = malloc(sizeof(int) * (n ? n : 1));
		if (!dup)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		for (k = 0; k < n; k++) {
			dup[k] = fcntl(f->fds[f->fds_sent + k], F_DUPFD_CLOEXEC, 0);
			if (dup[k] < 0) {
				int e = errno;

				close_fds(dup, 0, k);
				free(dup);
				errno = e;
				return -WEIGHTD_E_RESOURCE_EXHAUSTED;
			}
		}
		memcpy(f->fds + f->fds_sent, dup, sizeof(int) * n);
		free(dup);
		f->borrowed = false;
	}
	return 0;
}

/*
 * Each sendmsg carries the head frame from its cursor; when the head frame has no fd batch left
 * after this one, the following fd-less frames ride in the same call. Sent fds are closed at once
 * (the kernel holds them in flight); sent frames are freed.
 */
int wd_outq_flush(struct wd_outq *q, int sock)
{
	while (!TAILQ_EMPTY(&q->list)) {
		struct outq_frame *f = TAILQ_FIRST(&q->list);
		struct iovec iov[OUTQ_IOV];
		size_t fds_left = f->nfds - f->fds_sent;
		size_t batch = fds_left < WD_FRAME_FDS_PER_MSG ? fds_left : WD_FRAME_FDS_PER_MSG;
		int iovcnt = 1;
		ssize_t n;
		size_t sent;

		iov[0].iov_base = f->bytes + f->off;
		iov[0].iov_len = batch_bytes(f->len - f->off, fds_left);
		if (fds_left <= WD_FRAME_FDS_PER_MSG) {
			for (struct outq_frame *g = TAILQ_NEXT(f, link);
			     g && g->nfds == 0 && iovcnt < OUTQ_IOV; g = TAILQ_NEXT(g, link)) {
				iov[iovcnt].iov_base = g->bytes;
				iov[iovcnt].iov_len = g->len;
				iovcnt++;
			}
		}
		n = send_part(sock, iov, iovcnt, batch ? f->fds + f->fds_sent : NULL, batch,
			      MSG_DONTWAIT);
		if (n == WD_FRAME_AGAIN)
			return 1;
		if (n < 0)
			return (int)n;
		if (!f->borrowed)
			close_fds(f->fds, f->fds_sent, f->fds_sent + batch);
		f->fds_sent += batch;
		q->fds -= batch;
		sent = (size_t)n;
		q->bytes -= sent;
		while (sent) {
			f = TAILQ_FIRST(&q->list);
			if (sent < f->len - f->off) {
				f->off += sent;
				break;
			}
			sent -= f->len - f->off;
			TAILQ_REMOVE(&q->list, f, link);
			q->frames--;
			outq_frame_free(f);
		}
	}
	return 0;
}

size_t wd_outq_bytes(const struct wd_outq *q)
{
	return q ? q->bytes : 0;
}

size_t wd_outq_fds(const struct wd_outq *q)
{
	return q ? q->fds : 0;
}

size_t wd_outq_frames(const struct wd_outq *q)
{
	return q ? q->frames : 0;
}

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
		wd_advise_huge(nbuf, ncap);
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

/* --- blocking helpers for clients --------------------------------------------------------- */

/*
 * Sends header and payload straight from the caller's memory (two iovecs), batching fds like the
 * queue does. A socket that happens to be non-blocking is waited on with poll.
 */
static int send_frame_blocking(int sock, const void *payload, size_t len, const int *fds,
			       size_t nfds, bool more)
{
	uint8_t hdr[WD_FRAME_HEADER];
	size_t total, off = 0, fds_sent = 0;

	if (len > UINT32_MAX - WD_FRAME_HEADER || nfds > WD_FRAME_MAX_FDS ||
	    !fds_fit(WD_FRAME_HEADER + len, nfds))
		return -WEIGHTD_E_LIMIT_EXCEEDED;
	put_le32(hdr, (uint32_t)len);
	put_le32(hdr + 4, (uint32_t)nfds | (more ? WD_FRAME_MORE : 0));
	total = WD_FRAME_HEADER + len;
	while (off < total) {
		struct iovec iov[2];
		size_t fds_left = nfds - fds_sent;
		size_t batch = fds_left < WD_FRAME_FDS_PER_MSG ? fds_left : WD_FRAME_FDS_PER_MSG;
		size_t chunk = batch_bytes(total - off, fds_left);
		int iovcnt = 0;
		ssize_t n;

		if (off < WD_FRAME_HEADER) {
			size_t h = WD_FRAME_HEADER - off < chunk ? WD_FRAME_HEADER - off : chunk;

			iov[iovcnt].iov_base = hdr + off;
			iov[iovcnt++].iov_len = h;
			if (chunk > h) {
				iov[iovcnt].iov_base = (void *)payload;
				iov[iovcnt++].iov_len = chunk - h;
			}
		} else {
			iov[iovcnt].iov_base = (uint8_t *)payload + (off - WD_FRAME_HEADER);
			iov[iovcnt++].iov_len = chunk;
		}
		n = send_part(sock, iov, iovcnt, batch ? fds + fds_sent : NULL, batch, 0);
		if (n == WD_FRAME_AGAIN) {
			struct pollfd p = { .fd = sock, .events = POLLOUT };

			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				return -WEIGHTD_E_IO;
			continue;
		}
		if (n < 0)
			return (int)n;
		fds_sent += batch;
		off += (size_t)n;
	}
	return 0;
}

int wd_frame_send_blocking(int sock, const void *payload, size_t len, const int *fds, size_t nfds)
{
	return send_frame_blocking(sock, payload, len, fds, nfds, false);
}

int wd_message_send_blocking(int sock, const void *payload, size_t len, uint32_t frame_max)
{
	size_t off = 0;

	if (frame_max == 0)
		return -WEIGHTD_E_LIMIT_EXCEEDED;
	do {
		size_t b = len - off < frame_max ? len - off : frame_max;
		int r = send_frame_blocking(sock, (const uint8_t *)payload + off, b, NULL, 0,
					    off + b < len);

		if (r < 0)
			return r;
		off += b;
	} while (off < len);
	return 0;
}
