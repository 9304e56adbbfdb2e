/* SPDX-License-Identifier: Apache-2.0 */
/* session.c - one connected client's socket: frames in (with the limits and the fair turn that
 * decide when they are read), replies and fds out, timeouts, refusal, and its death, reported to
 * its owner (struct session_ops), which frees it later from the loop. */
#include "session.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "clock.h"
#include "daemon.h"
#include "heap.h"
#include "log.h"
#include "msg.h"
#include "peer.h"
#include "uid.h"
#include "wire.h"

#define LINGER_PER_UID 4          /* refused connections of one uid kept open to read why */
#define LINGER_MS 1000            /* for at most this long */
#define LINGER_DISCARD (1u << 20) /* reading and dropping at most this much of what they send */

/*
 * A request may span at most one frame per this many bytes of max_message (empty frames count
 * too): clients split a request into frames of max_frame, which is never smaller, so only a
 * sender of needless frames meets this bound before max_message.
 */
#define SESSION_BYTES_PER_FRAME 4096u

static uint32_t session_max_frames(const struct config *cfg)
{
	uint64_t n = cfg->max_message_bytes / SESSION_BYTES_PER_FRAME + 1;

	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Heap a decoded request takes per byte of its frame, about (heap_reserve before decoding). */
#define SESSION_DECODE_HEAP_PER_BYTE 6

/*
 * Bring the client's and its uid's counters in line with its queues: bytes of frames being
 * received (charged as soon as a header announces them, before the buffer grows for them) and
 * fds queued in replies. A dead session is charged nothing. account_fds is cheap; account also
 * walks the frames buffered, so it runs once per read, not once per frame.
 */
static void account_fds_as(struct session *s, bool ask_kernel)
{
	size_t fds = s->dead ? 0 : wd_outq_fds(s->out) +
				   (ask_kernel ? session_fds_in_flight(s) : s->fds_in_flight);

	if (s->uu)
		s->uu->queued_fds = s->uu->queued_fds - s->fds_charged + fds;
	s->fds_charged = fds;
}

/* The counters with the fds in flight as last seen: never fewer than the truth, and no system
 * call (a warm get would otherwise pay one ioctl after every reply and one before every request). */
static void account_fds(struct session *s)
{
	account_fds_as(s, false);
}

static void account(struct session *s)
{
	bool mid = false;
	size_t partial = s->dead ? 0 : wd_inbuf_partial(s->in, &mid);

	if (s->uu)
		s->uu->partial = s->uu->partial - s->partial_charged + partial;
	s->d->stats.partial_bytes = s->d->stats.partial_bytes - s->partial_charged + partial;
	s->partial_charged = partial;
	if (partial > s->partial_peak)
		s->partial_peak = partial;
	if (mid && !s->mid_frame)
		s->mid_since_ms = wd_clock_ms();
	s->mid_frame = mid;
	account_fds(s);
}

/*
 * fds already handed to the kernel stay open (in the socket's queue) until the client reads them,
 * so they count as queued too. The kernel does not say how many fds its queue holds, only whether
 * anything is left unread (SIOCOUTQ): fds sent count until the queue has been seen empty. That
 * overcounts for a client that reads while more arrives, which only makes it wait for the queue
 * to drain; a client that does not read is held to the limit exactly.
 */
size_t session_fds_in_flight(struct session *s)
{
	int unread = 0;

	if (s->fds_in_flight && s->fd >= 0 && ioctl(s->fd, SIOCOUTQ, &unread) == 0 && unread == 0)
		s->fds_in_flight = 0;
	return s->fds_in_flight;
}

/*
 * A client that reads its fds and then goes quiet would leave them charged to its uid (only the
 * session itself asks the kernel, when it sends or is paused), holding every other connection of
 * its uid over uid_max_queue_fds. So a flush that leaves fds in flight arms a timer that asks
 * SIOCOUTQ: after SETTLE_FIRST_MS, doubling up to SETTLE_MAX_MS while the client leaves its queue
 * unread, back to the first delay when it has read some of it. One armed timer per session at
 * most: a burst of gets costs one ioctl per SETTLE_FIRST_MS, not one per reply.
 */
#define SETTLE_FIRST_MS 20u
#define SETTLE_MAX_MS	1000u

static void settle_arm(struct session *s)
{
	struct timeval tv = { (time_t)(s->settle_ms / 1000),
			      (suseconds_t)(s->settle_ms % 1000 * 1000) };

	evtimer_add(s->ev_settle, &tv);
}

static void on_settle(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	int unread = 0;

	(void)fd;
	(void)what;
	if (s->dead || !s->fds_in_flight)
		return;
	if (ioctl(s->fd, SIOCOUTQ, &unread) == 0 && unread == 0) {
		/* its uid's other connections see the fds gone at their next look */
		s->fds_in_flight = 0;
		account_fds(s);
		return;
	}
	if (unread > 0 && (size_t)unread < s->settle_unread)
		s->settle_ms = SETTLE_FIRST_MS;
	else if (s->settle_ms < SETTLE_MAX_MS)
		s->settle_ms = s->settle_ms * 2 > SETTLE_MAX_MS ? SETTLE_MAX_MS : s->settle_ms * 2;
	s->settle_unread = unread > 0 ? (size_t)unread : 0;
	settle_arm(s);
}

/* Its replies hold too many fds (its own or its uid's): take no more requests until it reads. */
static bool fd_counts_over(const struct session *s)
{
	const struct config *cfg = s->d->cfg;

	return s->fds_charged >= cfg->client_max_queue_fds ||
	       (s->uu && s->uu->queued_fds >= uid_max_queue_fds(s->uu, cfg));
}

/* The counts as last seen can only be high: under the limits they settle it; over, the kernel
 * is asked whether the client has read its fds since. */
static bool over_fd_limits(struct session *s)
{
	account_fds(s);
	if (!fd_counts_over(s))
		return false;
	account_fds_as(s, true);
	return fd_counts_over(s);
}

static void update_write_event(struct session *s)
{
	if (s->dead)
		return;
	if (wd_outq_frames(s->out))
		event_add(s->ev_write, NULL);
	else
		event_del(s->ev_write);
}

static void process_frames(struct session *s);

/* Flush what the socket takes now; arm EV_WRITE only while something is left. */
static void session_flush(struct session *s)
{
	size_t before = wd_outq_bytes(s->out), fds_before = wd_outq_fds(s->out);
	int r = wd_outq_flush(s->out, s->fd);

	if (r < 0) {
		session_kill(s, "write failed");
		return;
	}
	s->fds_in_flight += fds_before - wd_outq_fds(s->out);
	if (s->fds_in_flight && !evtimer_pending(s->ev_settle, NULL)) {
		s->settle_ms = SETTLE_FIRST_MS;
		s->settle_unread = 0;
		settle_arm(s);
	}
	if (wd_outq_bytes(s->out) != before)
		s->active_ms = wd_clock_ms();
	account_fds(s);
	if (r == 0 && s->close_after_flush) {
		session_kill(s, "closed after its last reply");
		return;
	}
	update_write_event(s);
	if (s->paused)
		session_resume(s);
	else if (r == 0 && s->read_closed && !s->refused)
		/* A client that has stopped sending closes after its last answer: looked at once the
		 * code that sent this one has finished (a unit request is still counted pending
		 * while its answer goes out). */
		event_active(s->ev_later, EV_TIMEOUT, 0);
}

/* session_resume after `ns` nanoseconds (0: once the loop has polled the other clients). */
static void look_again_in(struct session *s, uint64_t ns)
{
	struct timeval tv = { (time_t)(ns / 1000000000u), (suseconds_t)(ns % 1000000000u / 1000) };

	evtimer_add(s->ev_later, &tv);
}

void session_resume(struct session *s)
{
	struct timeval again = { 0, 20000 };
	uint64_t wait;

	if (s->dead || !s->paused)
		return;
	if (over_fd_limits(s)) {
		/* nothing tells us when it reads from the socket: look again shortly */
		evtimer_add(s->ev_later, &again);
		return;
	}
	wait = uid_wait_ns(s->uu, wd_clock_ns());
	if (wait) {
		look_again_in(s, wait);
		return;
	}
	s->paused = false;
	if (!s->read_closed)
		event_add(s->ev_read, NULL);
	process_frames(s);
	session_check_done(s);
}

void session_check_done(struct session *s)
{
	if (s->dead || s->refused || !s->read_closed || s->dispatching || s->paused ||
	    s->holds.pending || s->reloads || wd_outq_frames(s->out))
		return;
	session_kill(s, "disconnected after its last reply");
}

void session_refuse(struct session *s, int code, const char *fmt, ...)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Error pe;
	weightd_error e;
	va_list ap;

	if (s->dead)
		return;
	wd_error_clear(&e);
	e.code = code;
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	/* said as a warning a few times per uid, so a uid cannot flood the log with refusals */
	log_msg(s->uu && s->uu->refusals_logged++ >= 3 ? LOG_LVL_DEBUG : LOG_LVL_WARNING,
		"client %llu (pid %d uid %u): %s; disconnecting it", (unsigned long long)s->id,
		(int)s->peer.pid, (unsigned)s->peer.uid, e.message);
	/* No request is taken any more, and what was buffered goes at once. */
	s->read_closed = true;
	s->refused = true;
	s->refused_ms = wd_clock_ms();
	wd_inbuf_free(s->in);
	s->in = wd_inbuf_new(s->d->cfg->max_frame_bytes, 0);
	if (!s->in) {
		session_kill(s, "out of memory");
		return;
	}
	account(s);
	/*
	 * Closing a socket with unread input makes the peer's next read fail with ECONNRESET, and
	 * it would never see why. So a few refused connections per uid linger (at most
	 * LINGER_MS): what they send is discarded, and they close when the peer does. More than
	 * that are closed once the error is sent.
	 */
	if (s->uu && s->uu->lingering < LINGER_PER_UID) {
		s->uu->lingering++;
		s->lingering = true;
	} else {
		event_del(s->ev_read);
		s->close_after_flush = true;
	}
	wire_error(&e, &pe);
	resp.error = &pe;
	session_send(s, &resp, NULL, 0);
}

/* A refused client that lingers: its input is read and dropped (up to a bound), its end of
 * stream closes it. */
static void discard_input(struct session *s)
{
	uint8_t buf[16384];
	ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		session_kill(s, "closed after it was refused");
		return;
	}
	if (n > 0)
		s->discarded += (size_t)n;
	if (s->discarded > LINGER_DISCARD)
		event_del(s->ev_read); /* enough: it goes at the deadline */
}

static void send_msg(struct session *s, const Weightd__Response *resp, const int *fds, size_t nfds,
		     bool borrowed)
{
	size_t len = weightd__response__get_packed_size(resp);
	uint8_t stackbuf[4096], *buf = stackbuf;
	size_t queued_before;
	int r;

	if (s->dead) {
		for (size_t i = 0; !borrowed && i < nfds; i++)
			close(fds[i]);
		return;
	}
	if (len > sizeof(stackbuf)) {
		buf = malloc(len);
		if (!buf) {
			for (size_t i = 0; !borrowed && i < nfds; i++)
				close(fds[i]);
			session_kill(s, "out of memory packing a reply");
			return;
		}
	}
	weightd__response__pack(resp, buf);
	queued_before = wd_outq_bytes(s->out);
	r = borrowed ? wd_outq_push_borrowed(s->out, buf, len, fds, nfds)
		     : wd_outq_push(s->out, buf, len, fds, nfds);
	if (buf != stackbuf)
		free(buf);
	if (r < 0) {
		session_kill(s, "its reply could not be queued");
		return;
	}
	/* The cap is on a backlog: a client is cut off for not reading what came before, never for
	 * the size of the one answer it asked for (a unit of a million entries answers in more). */
	if (queued_before > s->d->cfg->client_max_queue_bytes) {
		log_warn("client %llu (pid %d) is not reading its replies (%zu bytes queued); "
			 "disconnecting it", (unsigned long long)s->id, (int)s->peer.pid,
			 wd_outq_bytes(s->out));
		session_kill(s, "reply queue over its limit");
		return;
	}
	session_flush(s);
	/* what the socket did not take keeps duplicates of its own (the caller's may close) */
	if (borrowed && !s->dead && wd_outq_fds(s->out) && wd_outq_keep_fds(s->out) < 0) {
		char why[300];

		wd_nofile_text(why, sizeof(why), "weightd", "LimitNOFILE= in weightd.service");
		log_warn("client %llu (pid %d): a reply waiting for the client to read holds "
			 "descriptors weightd cannot duplicate: %s; disconnecting it",
			 (unsigned long long)s->id, (int)s->peer.pid, why);
		session_kill(s, "out of descriptors for a queued reply");
	}
}

void session_send(struct session *s, const Weightd__Response *resp, const int *fds, size_t nfds)
{
	send_msg(s, resp, fds, nfds, false);
}

void session_send_borrowed(struct session *s, const Weightd__Response *resp, const int *fds,
			   size_t nfds)
{
	send_msg(s, resp, fds, nfds, true);
}

void session_send_error(struct session *s, uint64_t id, const weightd_error *err)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Error pe;

	resp.id = id;
	wire_error(err, &pe);
	resp.error = &pe;
	session_send(s, &resp, NULL, 0);
}

void session_free(struct session *s)
{
	if (s->ev_read)
		event_free(s->ev_read);
	if (s->ev_write)
		event_free(s->ev_write);
	if (s->ev_later)
		event_free(s->ev_later);
	if (s->ev_settle)
		event_free(s->ev_settle);
	wd_inbuf_free(s->in);
	wd_outq_free(s->out);
	for (size_t i = 0; i < s->n_subs; i++)
		free(s->subs[i]);
	free(s->subs);
	peer_clear(&s->peer);
	free(s);
}

void session_set_name(struct session *s, const char *name)
{
	size_t i = 0;

	for (; name && name[i] && i + 1 < sizeof(s->name); i++)
		s->name[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	s->name[i] = '\0';
}

void session_kill(struct session *s, const char *why)
{
	if (s->dead)
		return;
	s->dead = true;
	log_debug("client %llu (pid %d uid %u): %s", (unsigned long long)s->id, (int)s->peer.pid,
		  (unsigned)s->peer.uid, why);
	event_del(s->ev_read);
	event_del(s->ev_write);
	if (s->ev_later)
		event_del(s->ev_later);
	if (s->ev_settle)
		event_del(s->ev_settle);
	close(s->fd);
	s->fd = -1;
	account(s); /* dead: its queues stop counting against its uid and the daemon */
	if (s->lingering && s->uu)
		s->uu->lingering--;
	s->lingering = false;
	s->ops->dead(s);
}

/*
 * Stop taking its requests for now (not read, frames left in the buffer) and look again with
 * session_resume: after `wait` ns, or (0) once the loop has polled the other clients.
 */
static void session_yield(struct session *s, uint64_t wait)
{
	if (wait) {
		s->d->stats.requests_deferred++;
		log_debug("client %llu (uid %u): held back %.1f ms for other uids' share of the "
			  "main thread", (unsigned long long)s->id, (unsigned)s->peer.uid,
			  (double)wait / 1e6);
	}
	s->paused = true;
	event_del(s->ev_read);
	look_again_in(s, wait);
}

/* Requests one client may have served back to back before the others are polled: a flood of
 * cheap pipelined requests in its buffer is served a turn at a time. */
#define SESSION_TURN_NS 2000000ull

/*
 * Dispatch the complete frames buffered, in order, until none is left, the client dies, or its
 * replies hold too many fds (then it is paused: not read, its frames wait in the buffer, and
 * session_resume carries on once it has read its replies). It is paused the same way when its
 * uid owes other uids their share of the main thread (uid_charge), and after its turn.
 */
static void process_frames(struct session *s)
{
	uint64_t turn = wd_clock_ns(), now = turn;

	for (;;) {
		struct wd_frame f;
		Weightd__Request *req;
		weightd_error err;
		uint64_t wait, decoding;
		char what[64];
		int r;

		if (s->dead || s->close_after_flush)
			return;
		wait = uid_wait_ns(s->uu, now);
		if (wait || now - turn >= SESSION_TURN_NS || !uid_polled(s->uu)) {
			session_yield(s, wait);
			break;
		}
		if (over_fd_limits(s)) {
			if (!s->paused)
				log_debug("client %llu (uid %u): %zu fds queued in its replies (%zu for "
					  "its uid); not reading it until it reads them",
					  (unsigned long long)s->id, (unsigned)s->peer.uid,
					  wd_outq_fds(s->out), s->uu ? s->uu->queued_fds : 0);
			s->paused = true;
			event_del(s->ev_read);
			session_resume(s); /* arms the look-again timer */
			break;
		}
		r = wd_inbuf_next(s->in, &f);
		if (r == 0)
			break;
		if (r == -WEIGHTD_E_LIMIT_EXCEEDED && wd_inbuf_over_frames(s->in)) {
			session_refuse(
				s, WEIGHTD_E_LIMIT_EXCEEDED,
				"limit exceeded: a request spans more than %u frames (its frames, "
				"empty ones included, must average %u bytes of max_message)",
				session_max_frames(s->d->cfg), SESSION_BYTES_PER_FRAME);
			return;
		}
		if (r == -WEIGHTD_E_LIMIT_EXCEEDED) {
			/* Say which limit before closing: the client was told them in hello. */
			session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED,
				       "limit exceeded: a request frame is over max_frame (%u bytes) or a "
				       "request over max_message (%llu bytes)",
				       s->d->cfg->max_frame_bytes,
				       (unsigned long long)s->d->cfg->max_message_bytes);
			return;
		}
		if (r < 0) {
			log_warn("client %llu (pid %d): malformed frame; disconnecting it",
				 (unsigned long long)s->id, (int)s->peer.pid);
			session_kill(s, "malformed frame");
			return;
		}
		/* frame_timeout runs for the whole of a request, from its first frame: the next
		 * one's clock starts when account() sees it begun */
		s->mid_frame = false;
		if (f.nfds) {
			wd_frame_close_fds(&f);
			session_kill(s, "sent file descriptors");
			return;
		}
		/* a large request decodes into several times its bytes of structures (a unit
		 * entry of ~100 bytes on the wire is ~500 decoded): counted against its uid's
		 * uid_max_unit_memory while it is decoded and dispatched */
		decoding = (uint64_t)f.len * SESSION_DECODE_HEAP_PER_BYTE;
		snprintf(what, sizeof(what), "decoding a request of %zu bytes", (size_t)f.len);
		if (holds_unit_memory(&s->holds, decoding, true, what, &err) < 0) {
			session_refuse(s, err.code, "%s", err.message);
			return;
		}
		heap_reserve(decoding);
		req = wd_msg_unpack(&weightd__request__descriptor, f.payload, f.len);
		if (!req && errno == ENOMEM) {
			/* the request may be fine: the client is told why it is let go */
			holds_unit_memory_done(&s->holds, decoding);
			session_refuse(s, WEIGHTD_E_RESOURCE_EXHAUSTED,
				       "out of memory decoding a request of %zu bytes", (size_t)f.len);
			return;
		}
		if (!req) {
			holds_unit_memory_done(&s->holds, decoding);
			log_warn("client %llu (pid %d): undecodable request; disconnecting it",
				 (unsigned long long)s->id, (int)s->peer.pid);
			session_kill(s, "undecodable request");
			return;
		}
		s->active_ms = wd_clock_ms();
		s->asked = true;
		s->d->stats.requests++;
		s->dispatching = true;
		s->ops->dispatch(s, req);
		s->dispatching = false;
		wd_msg_free(req);
		if (!s->dead) /* a dead session's holds were cleared, this count with them */
			holds_unit_memory_done(&s->holds, decoding);
		{
			uint64_t t = wd_clock_ns();

			if (!s->dead)
				uid_charge(s->uu, t, t - now);
			now = t;
		}
	}
	if (!s->dead)
		account(s);
}

/* Frames being received may hold only so much memory, per uid and in total: past that, the
 * client that asks for more is refused (before its buffer grows for the frame). */
static bool partial_over_limits(struct session *s)
{
	const struct config *cfg = s->d->cfg;
	char t_part[WD_BYTES_TEXT], t_max[WD_BYTES_TEXT];

	if (s->uu && s->uu->partial > cfg->uid_max_partial_bytes) {
		s->d->stats.clients_refused++;
		session_refuse(
			s, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: uid %u has %s of requests partly received, more than "
			"its %s uid_max_partial; raise `uid_max_partial` in weightd.conf",
			(unsigned)s->peer.uid, wd_bytes_text(t_part, s->uu->partial),
			wd_bytes_text(t_max, cfg->uid_max_partial_bytes));
		return true;
	}
	/* Past the total, only a uid holding more than its fair share (the total over the uids
	 * receiving) is refused: those holding less, a victim sending its small requests among
	 * them, carry on, and the overshoot stays within one fair share per uid. */
	if (s->d->stats.partial_bytes > cfg->max_partial_bytes &&
	    (!s->uu || s->uu->partial > cfg->max_partial_bytes / uid_receiving(s->uu->table))) {
		s->d->stats.clients_refused++;
		session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED,
			       "limit exceeded: the daemon holds %llu bytes of requests partly received, "
			       "more than max_partial (%llu)",
			       (unsigned long long)s->d->stats.partial_bytes,
			       (unsigned long long)cfg->max_partial_bytes);
		return true;
	}
	return false;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	size_t before = s->partial_charged;
	int r;

	if (s->lingering) {
		discard_input(s);
		return;
	}
	r = wd_inbuf_read(s->in, s->fd);

	if (r == WD_FRAME_AGAIN)
		return;
	if (r == 0) {
		/* End of its requests, maybe only a half-close (SHUT_WR): what it asked for is
		 * still answered, then the connection closes. */
		s->read_closed = true;
		event_del(s->ev_read);
		process_frames(s);
		session_check_done(s);
		return;
	}
	if (r < 0) {
		session_kill(s, "read failed or sent file descriptors");
		return;
	}
	if (s->uu) {
		uint64_t now = wd_clock_ns();

		uid_touch(s->uu, now); /* it asks, served or not */
		if (uid_heavy(s->uu, now)) {
			/* served from a timer, once this pass has served the other sockets */
			account(s);
			if (s->partial_charged > before)
				partial_over_limits(s);
			if (!s->dead)
				session_yield(s, 0);
			return;
		}
	}
	process_frames(s);
	if (!s->dead && s->partial_charged > before)
		partial_over_limits(s);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	session_flush(arg);
}

bool session_idle(const struct session *s)
{
	return !s->dead && !s->refused && !s->holds.n_held && !s->holds.pending && !s->reloads &&
	       !s->n_subs && !s->partial_charged && !wd_outq_frames(s->out) && !s->paused;
}

void session_tick(struct session *s, uint64_t now)
{
	const struct config *cfg = s->d->cfg;

	if (s->dead)
		return;
	if (s->refused) {
		/* lingering, or not reading the error it was sent: either way, its time is up */
		if (now - s->refused_ms >= LINGER_MS)
			session_kill(s, "refused, and its time to read why is up");
		return;
	}
	if (s->paused)
		session_resume(s);
	if (s->dead)
		return;
	if (cfg->frame_timeout_ms && s->mid_frame && now - s->mid_since_ms >= cfg->frame_timeout_ms) {
		s->d->stats.clients_timed_out++;
		session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED,
			       "timed out: a request was begun %llu ms ago and never finished "
			       "(frame_timeout %llu ms, for all the frames of a request)",
			       (unsigned long long)(now - s->mid_since_ms),
			       (unsigned long long)cfg->frame_timeout_ms);
		return;
	}
	/* refused, or half-closed with replies it does not read: given as long as a frame */
	if (s->read_closed && wd_outq_frames(s->out) && cfg->frame_timeout_ms &&
	    now - s->active_ms >= cfg->frame_timeout_ms) {
		s->d->stats.clients_timed_out++;
		session_kill(s, "closing: it does not read its last replies");
		return;
	}
	/* a connection slot is for asking: one taken by a client that never asks is given back */
	if (cfg->first_request_timeout_ms && !s->asked && !s->paused &&
	    now - s->connected_ms >= cfg->first_request_timeout_ms) {
		s->d->stats.clients_timed_out++;
		session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED,
			       "closed: no request within %llu ms of connecting "
			       "(first_request_timeout %llu ms)",
			       (unsigned long long)(now - s->connected_ms),
			       (unsigned long long)cfg->first_request_timeout_ms);
		return;
	}
	if (cfg->idle_timeout_ms && session_idle(s) && now - s->active_ms >= cfg->idle_timeout_ms) {
		s->d->stats.clients_timed_out++;
		log_info("client %llu (pid %d uid %u): idle for %llu ms with nothing held; closing it",
			 (unsigned long long)s->id, (int)s->peer.pid, (unsigned)s->peer.uid,
			 (unsigned long long)(now - s->active_ms));
		session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED,
			       "closed after %llu ms idle with nothing held or pending (idle_timeout)",
			       (unsigned long long)(now - s->active_ms));
	}
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	session_resume(s);
	session_check_done(s);
}

struct session *session_new(const struct session_ops *ops, void *owner, struct daemon *d, int fd,
			    uint64_t id)
{
	struct session *s = calloc(1, sizeof(*s));

	if (!s) {
		close(fd);
		return NULL;
	}
	s->ops = ops;
	s->owner = owner;
	s->d = d;
	s->fd = fd;
	s->id = id;
	if (peer_read(fd, &s->peer) < 0) {
		/* its groups decide what it may read: refuse it rather than guess */
		log_warn("refusing a client: no memory to read its groups");
		close(fd);
		free(s);
		return NULL;
	}
	s->active_ms = wd_clock_ms();
	s->connected_ms = s->active_ms;
	s->in = wd_inbuf_new(d->cfg->max_frame_bytes, 0);
	s->out = wd_outq_new();
	if (s->in) {
		wd_inbuf_set_max_message(s->in, d->cfg->max_message_bytes);
		wd_inbuf_set_max_frames(s->in, session_max_frames(d->cfg));
	}
	if (s->out)
		wd_outq_set_frame_max(s->out, d->cfg->max_frame_bytes);
	s->ev_read = event_new(d->base, fd, EV_READ | EV_PERSIST, on_read, s);
	s->ev_write = event_new(d->base, fd, EV_WRITE | EV_PERSIST, on_write, s);
	s->ev_later = evtimer_new(d->base, on_later, s);
	s->ev_settle = evtimer_new(d->base, on_settle, s);
	if (!s->in || !s->out || !s->ev_read || !s->ev_write || !s->ev_later || !s->ev_settle ||
	    event_add(s->ev_read, NULL)) {
		close(fd);
		s->fd = -1;
		session_free(s);
		return NULL;
	}
	return s;
}

/* --- replies of the request handlers (request*.c, unit.c) --------------------------------------- */

void session_reply(struct session *s, Weightd__Response *resp, uint64_t id, const int *fds,
		   size_t nfds)
{
	resp->id = id;
	session_send(s, resp, fds, nfds);
}

void session_fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
{
	weightd_error e;
	va_list ap;

	wd_error_clear(&e);
	e.code = code;
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	session_send_error(s, id, &e);
}
