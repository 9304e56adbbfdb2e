/* SPDX-License-Identifier: Apache-2.0 */
/* frame.h - length-prefixed protobuf frames with file descriptors over a Unix stream socket: the
 * wire format, the send queue (frame_send.c) and the receive buffer (frame_recv.c). */
#ifndef WD_FRAME_H
#define WD_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "wd_limits.h"

/*
 * Wire format of one frame: uint32 LE payload length, uint32 LE word (bit 31: more frames of the
 * same message follow; bits 0-30: number of fds), payload bytes. A message larger than one frame
 * (or with more fds than one frame may carry) travels as several frames, every one but the last
 * flagged WD_FRAME_MORE; the receiver joins their payloads and fds in order, up to a maximum
 * message size, and hands out whole messages.
 * The fds of a frame are sent as SCM_RIGHTS with the frame's bytes, at most WD_FRAME_FDS_PER_MSG
 * per sendmsg (SCM_MAX_FD is 253); a frame with more fds is sent in several sendmsg calls, each
 * carrying at least one byte. The receiver keeps fds in arrival order and hands a frame the first
 * `nfds` of them when its last byte arrives. Bump PROTOCOL_VERSION_CURRENT in proto/weightd.proto
 * when this changes.
 */
#define WD_FRAME_HEADER 8
#define WD_FRAME_FDS_PER_MSG 250
#define WD_FRAME_MAX_DEFAULT (4u << 20)
/* WD_FRAME_MAX_FDS, the fds one frame may carry, is in wd_limits.h. */
#define WD_FRAME_MORE 0x80000000u

/* --- sending ------------------------------------------------------------------------------ */

struct wd_outq;

struct wd_outq *wd_outq_new(void);
/* Frees queued frames and closes their fds. Accepts NULL. */
void wd_outq_free(struct wd_outq *q);

/* The largest payload one frame of this queue carries (default WD_FRAME_MAX_DEFAULT); longer
 * messages are split. At least 64. */
void wd_outq_set_frame_max(struct wd_outq *q, uint32_t frame_max);

/*
 * Queue one message: one frame, or several when it is longer than the frame maximum or carries
 * more than WD_FRAME_MAX_FDS fds (fds spread over the frames). Takes ownership of fds[0..nfds) in
 * every case (closed after sending, or at once on failure). Returns 0, -WEIGHTD_E_LIMIT_EXCEEDED (a
 * message too short to carry its fds, or over 4 GiB), or -WEIGHTD_E_RESOURCE_EXHAUSTED.
 */
int wd_outq_push(struct wd_outq *q, const void *payload, size_t len, const int *fds, size_t nfds);
/*
 * wd_outq_push of fds the caller keeps: the queue neither closes them nor owns them, so they
 * must stay open while queued. A sender that flushes at once and then calls wd_outq_keep_fds
 * passes its own long-lived descriptors without a dup and a close per message. Never closes
 * them, on failure either.
 */
int wd_outq_push_borrowed(struct wd_outq *q, const void *payload, size_t len, const int *fds,
			  size_t nfds);
/* Replace every borrowed fd still queued (unsent) with a duplicate the queue owns, so the caller
 * may close its own. 0, or -WEIGHTD_E_RESOURCE_EXHAUSTED (errno set: EMFILE when the process is
 * out of descriptors), the queue then unchanged for the frame that failed. */
int wd_outq_keep_fds(struct wd_outq *q);

/*
 * Send as much as the socket takes (MSG_NOSIGNAL, MSG_DONTWAIT). Returns 0 when the queue is empty,
 * 1 when data remains (socket full: wait for EPOLLOUT/EV_WRITE), or
 * -WEIGHTD_E_DISCONNECTED/-WEIGHTD_E_IO.
 */
int wd_outq_flush(struct wd_outq *q, int sock);

size_t wd_outq_bytes(const struct wd_outq *q);
size_t wd_outq_frames(const struct wd_outq *q);
/* File descriptors queued and not yet sent (each one an open fd of the sender). */
size_t wd_outq_fds(const struct wd_outq *q);

/* --- receiving ---------------------------------------------------------------------------- */

struct wd_inbuf;

/* max_payload bounds one frame; max_fds bounds fds held and fds of one message (0: any fd received
 * is a protocol error). A message may span frames up to max_payload bytes in all, unless
 * wd_inbuf_set_max_message raises that. */
struct wd_inbuf *wd_inbuf_new(uint32_t max_payload, uint32_t max_fds);
/* The largest message (payloads of its frames joined) accepted; at least the frame maximum. */
void wd_inbuf_set_max_message(struct wd_inbuf *b, uint64_t max_message);
/* The most frames one message may span, empty ones included (0, the default: bounded by bytes
 * only). A message with more fails wd_inbuf_next with -WEIGHTD_E_LIMIT_EXCEEDED, and then
 * wd_inbuf_over_frames says that was the reason. */
void wd_inbuf_set_max_frames(struct wd_inbuf *b, uint32_t max_frames);
bool wd_inbuf_over_frames(const struct wd_inbuf *b);
/* Keep an idle buffer of up to `bytes` for the next frames instead of shrinking it back to one
 * chunk (a client whose replies are large and frequent; the daemon keeps its default, 256 KiB,
 * per connection). */
void wd_inbuf_set_keep(struct wd_inbuf *b, size_t bytes);
/* Raise the frame maximum (to what the peer said it sends); never lowers it. */
void wd_inbuf_raise_max_payload(struct wd_inbuf *b, uint32_t max_payload);
/* fds the kernel dropped because this process was out of descriptors (MSG_CTRUNC), so far. */
uint64_t wd_inbuf_fds_dropped(const struct wd_inbuf *b);
/* Closes fds not handed out. Accepts NULL. */
void wd_inbuf_free(struct wd_inbuf *b);

/*
 * One recvmsg (MSG_CMSG_CLOEXEC, MSG_DONTWAIT). Returns bytes read (> 0), 0 at end of stream,
 * WD_FRAME_AGAIN when nothing is available now, -WEIGHTD_E_RESOURCE_EXHAUSTED on MSG_CTRUNC (the
 * kernel could not install the fds: this process is out of descriptors; the stream has lost fds and
 * cannot go on), -WEIGHTD_E_PROTOCOL on fds beyond max_fds (those fds are closed),
 * -WEIGHTD_E_DISCONNECTED on a reset, -WEIGHTD_E_IO otherwise.
 */
#define WD_FRAME_AGAIN (-1000)
int wd_inbuf_read(struct wd_inbuf *b, int sock);
/* The same, waiting for the first byte when nothing is there (a blocking recvmsg: one system call
 * instead of poll then recvmsg). Never WD_FRAME_AGAIN on a blocking socket. */
int wd_inbuf_read_wait(struct wd_inbuf *b, int sock);

/* Feed bytes directly (fuzzing and tests): appends to the buffer as if read. */
int wd_inbuf_feed(struct wd_inbuf *b, const void *data, size_t len);

/* One message (the payloads of its frames joined, and all their fds). */
struct wd_frame {
	uint8_t *payload;  /* valid until the next wd_inbuf_* call */
	uint32_t len;
	int *fds;          /* owned by the caller after wd_inbuf_next: close or keep each */
	uint32_t nfds;
};

/*
 * Take the next complete message. Returns 1 with *ret filled, 0 when more bytes are needed, or
 * -WEIGHTD_E_LIMIT_EXCEEDED (announced payload over max_payload, a message over its maximum, or fds
 * over the limit) / -WEIGHTD_E_PROTOCOL (a frame announces more fds than arrived with it) — after
 * which the stream cannot be resynchronised and the peer should be dropped. ret->fds is malloc'd
 * (free it) or NULL when nfds is 0.
 */
int wd_inbuf_next(struct wd_inbuf *b, struct wd_frame *ret);

/*
 * Bytes the buffer holds or is about to hold for frames not yet taken: complete frames waiting,
 * plus the whole announced size of an incomplete one (its header decides how far the buffer
 * grows), plus a message being joined from several frames. *ret_mid_frame (may be NULL): an
 * incomplete frame or message has begun.
 */
size_t wd_inbuf_partial(const struct wd_inbuf *b, bool *ret_mid_frame);

/* Close every fd of a frame and free its fd array. */
void wd_frame_close_fds(struct wd_frame *f);

/* --- blocking helpers for clients --------------------------------------------------------- */

/* Write one whole frame to a blocking socket (fds borrowed, not closed). */
int wd_frame_send_blocking(int sock, const void *payload, size_t len, const int *fds, size_t nfds);
/* Write one message as frames of at most frame_max payload bytes (the last one without
 * WD_FRAME_MORE); no fds. */
int wd_message_send_blocking(int sock, const void *payload, size_t len, uint32_t frame_max);

#endif
