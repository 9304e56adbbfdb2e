/* SPDX-License-Identifier: Apache-2.0 */
/* frame_send.c - the sending half of frames with SCM_RIGHTS fds: the send queue (fds owned, or
 * lent) and the blocking sends of clients. */
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

/* At most this many iovecs per sendmsg when several queued frames go out together. */
#define OUTQ_IOV 64

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
