/* SPDX-License-Identifier: Apache-2.0 */
/* session.h - one connected client: its socket queues, what it holds (holds.h), its open
 * requests. session.c does its socket I/O and reports to its owner through struct session_ops;
 * server.c owns the sessions (their list and lifetime); request*.c act on them. */
#ifndef WD_SESSION_H
#define WD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/time.h>
#include <sys/types.h>

#include "cache.h"
#include "catalog.h"
#include "frame.h"
#include "holds.h"
#include "peer.h"
#include "uid.h"
#include "weightd.pb-c.h"

struct session;
struct unit_req;

/* What a session reports to its owner (server.c), which sets them in session_new. */
struct session_ops {
	/* Act on one decoded request of s; every reply goes through session_send. */
	void (*dispatch)(struct session *s, Weightd__Request *req);
	/* s has been killed: its socket is closed and it sends nothing more. The owner lets go of
	 * what it holds and frees it later with session_free, never from inside this call. */
	void (*dead)(struct session *s);
};

struct session {
	const struct session_ops *ops;
	void *owner; /* for ops, as given to session_new */
	struct daemon *d;
	uint64_t id;
	int fd;
	struct peer peer;
	struct event *ev_read, *ev_write;
	struct event *ev_later;   /* look again soon: paused (has it read its fds?), or done? */
	struct event *ev_settle;  /* has it read the fds in flight? (armed while there are some) */
	struct wd_inbuf *in;
	struct wd_outq *out;
	struct holds holds; /* the weights it holds, its unit requests in flight (holds.c) */
	uint32_t protocol;  /* the version agreed in hello (0 before it) */
	char name[64];	    /* the name it gave in hello, printable (session_set_name) */
	LIST_HEAD(, unit_req) unitreqs; /* unit requests in flight (unit.c) */
	char **subs;          /* checkpoints subscribed to ("*" = all) */
	size_t n_subs;
	struct uid_usage *uu;  /* its uid's totals (NULL outside a server, e.g. unit tests) */
	size_t partial_charged;/* what account() last charged for frames being received */
	size_t fds_charged;    /* ... and for fds queued in replies (ours and the kernel's) */
	size_t fds_in_flight;  /* fds sent that the client may not have read yet */
	uint32_t settle_ms;    /* ev_settle's next delay */
	size_t settle_unread;  /* bytes its socket's queue held at ev_settle's last look */
	size_t partial_peak;   /* the most its input buffer held (memory returned when it goes) */
	bool refused;          /* told why it is being closed; takes no requests */
	bool lingering;        /* refused, kept open briefly so it can read why */
	uint64_t refused_ms;
	size_t discarded;      /* bytes it sent after it was refused, dropped */
	bool mid_frame;        /* a frame has begun and not finished */
	uint64_t mid_since_ms; /* when it began */
	uint64_t active_ms;    /* last request taken or reply bytes sent */
	uint64_t connected_ms; /* when it was accepted */
	bool asked;	       /* it has sent a request (first_request_timeout no longer applies) */
	uint32_t reloads;      /* reload requests waiting for their answer */
	bool read_closed;      /* no more requests: the peer shut down its side, or it was refused */
	bool paused;           /* not read while its replies hold too many fds, its uid waits for
				* other uids' share of the main thread, or it has had its turn */
	bool dispatching;      /* inside ops->dispatch (not to be closed under it) */
	bool dead;
	bool close_after_flush;
	LIST_ENTRY(session) link;      /* in the server's list of sessions, until dead */
	SLIST_ENTRY(session) dead_link; /* then in its list of sessions to free */
};

/* A session for an accepted socket (fd owned from now on; closed on failure), reading at once
 * and reporting to `owner` through ops (which must outlive it). NULL on allocation failure. */
struct session *session_new(const struct session_ops *ops, void *owner, struct daemon *d, int fd,
			    uint64_t id);
/* Free a dead session (from its owner's deferred reap, never inside its own callbacks). What
 * s->holds allocated is its owner's to free first (holds_free). */
void session_free(struct session *s);

/* fds sent to the client that it may not have read yet (forgotten once its socket's queue is
 * seen empty). */
size_t session_fds_in_flight(struct session *s);

/* Periodic check from the server (now = wd_clock_ms()): frame and idle timeouts, and resuming
 * a session paused by its uid's fd limit. May kill or refuse it. */
void session_tick(struct session *s, uint64_t now);
/* Take requests again if it was paused and its fds are within limits now. */
void session_resume(struct session *s);
/* A client that has stopped sending is closed once every request it sent has been answered and
 * sent (call when something it waited for finished). */
void session_check_done(struct session *s);
/* It holds, waits for and is sent nothing, and is being read: closing it loses nothing but the
 * connection (idle_timeout's rule, and which connection may give way to another uid's). */
bool session_idle(const struct session *s);
/* Refuse the client: read nothing more, drop what is buffered, queue an error frame (request id
 * 0) saying why, and close once it is sent (or when frame_timeout passes). Logged once. */
void session_refuse(struct session *s, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Keep the name a client gave in hello: its first 63 bytes, anything but printable ASCII made
 * '?', so that a table or a log line shows it safely. NULL: none. */
void session_set_name(struct session *s, const char *name);

/* Queue a response (ownership of fds passes, see wd_outq_push). A client whose queue grows past
 * its cap is disconnected. */
void session_send(struct session *s, const Weightd__Response *resp, const int *fds, size_t nfds);
/* session_send of descriptors the caller keeps open (segments' read-only fds): sent without a
 * copy when the socket takes the reply at once, duplicated only for what must wait in the queue.
 * Never closes them. */
void session_send_borrowed(struct session *s, const Weightd__Response *resp, const int *fds,
			   size_t nfds);
/* Send an error response for request `id`. */
void session_send_error(struct session *s, uint64_t id, const weightd_error *err);
/* Mark dead: stop reading and writing, close the socket, and tell the owner (ops->dead), which
 * releases what it holds and frees it later from the loop. */
void session_kill(struct session *s, const char *why);

/* Send `resp` as the answer to request `id` (fds pass to the session, see session_send): how the
 * request handlers (request*.c, unit.c) reply, so that they call down into the session and never
 * back up into their dispatcher. */
void session_reply(struct session *s, Weightd__Response *resp, uint64_t id, const int *fds,
		   size_t nfds);
/* Send an error with `code` and a formatted sentence as the answer to request `id`. */
void session_fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
