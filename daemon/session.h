/* SPDX-License-Identifier: Apache-2.0 */
/* session.h - one connected client: its socket queues, the weights it holds, its open requests.
 * session.c does its I/O and lifecycle; server.c lists sessions; request*.c act on them. */
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
#include "uid.h"
#include "wd_hashidx.h"
#include "weightd.pb-c.h"

struct server;
struct unitreq;

struct held {
	struct weight *w;
	uint64_t id;          /* w->id, here so that a lookup by handle does not touch w */
	uint32_t count;       /* references this client holds on w */
};

/* A segment the client holds weights in (each one pins a daemon fd while anyone holds it). */
struct held_segment {
	struct cache_segment *sg;
	uint32_t weights;     /* distinct weights of sg this client holds */
};

struct session {
	struct server *srv;
	struct daemon *d;
	uint64_t id;
	int fd;
	struct peer peer;
	struct event *ev_read, *ev_write;
	struct event *ev_later;   /* look again soon: paused (has it read its fds?), or done? */
	struct wd_inbuf *in;
	struct wd_outq *out;
	struct held *held;    /* dense: in the order taken, until a release moves the last one */
	size_t n_held, cap_held;
	struct wd_hashidx held_index; /* by weight id: position in held, for held[0, n_indexed) */
	size_t n_indexed;     /* the newest holds are indexed only when a lookup needs them:
			       * a unit bound and then freed whole never touches the index */
	uint64_t held_bytes;  /* bytes of the distinct weights held */
	struct held_segment *segs; /* segments held in: dense, unordered */
	size_t n_segs, segs_cap;
	struct wd_hashidx segs_index; /* by segment id: position in segs */
	uint32_t protocol;    /* the version agreed in hello (0 before it) */
	uint32_t pending;     /* unit requests not yet answered */
	uint64_t pending_bytes;   /* bytes of weights those requests will add (per-client limits) */
	uint32_t pending_weights; /* weights they will add */
	LIST_HEAD(, unitreq) unitreqs; /* unit requests in flight (request_unit.c) */
	char **subs;          /* checkpoints subscribed to ("*" = all) */
	size_t n_subs;
	struct uid_usage *uu;  /* its uid's totals (NULL outside a server, e.g. unit tests) */
	size_t partial_charged;/* what account() last charged for frames being received */
	size_t fds_charged;    /* ... and for fds queued in replies (ours and the kernel's) */
	size_t fds_in_flight;  /* fds sent that the client may not have read yet */
	size_t partial_peak;   /* the most its input buffer held (memory returned when it goes) */
	bool refused;          /* told why it is being closed; takes no requests */
	bool lingering;        /* refused, kept open briefly so it can read why */
	uint64_t refused_ms;
	size_t discarded;      /* bytes it sent after it was refused, dropped */
	bool mid_frame;        /* a frame has begun and not finished */
	uint64_t mid_since_ms; /* when it began */
	uint64_t active_ms;    /* last request taken or reply bytes sent */
	uint32_t reloads;      /* reload requests waiting for their answer */
	bool read_closed;      /* no more requests: the peer shut down its side, or it was refused */
	bool paused;           /* not read while its replies hold too many fds, its uid waits for
				* other uids' share of the main thread, or it has had its turn */
	bool dispatching;      /* inside request_dispatch (not to be closed under it) */
	bool dead;
	bool close_after_flush;
	bool privileged;      /* uid 0 or the daemon's own uid: may reload and evict */
	LIST_ENTRY(session) link;      /* in the server's list of sessions, until dead */
	SLIST_ENTRY(session) dead_link; /* then in its list of sessions to free */
};

/* A session for an accepted socket (fd owned from now on; closed on failure), reading at once.
 * NULL on allocation failure. The caller links it into the server's list. */
struct session *session_new(struct server *srv, struct daemon *d, int fd, uint64_t id);
/* Free a dead session (from the server's deferred reap, never inside its own callbacks). */
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
/* Refuse the client: read nothing more, drop what is buffered, queue an error frame (request id
 * 0) saying why, and close once it is sent (or when frame_timeout passes). Logged once. */
void session_refuse(struct session *s, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

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
/* Mark dead: stop reading, release every reference, free later from the loop. */
void session_kill(struct session *s, const char *why);

/* Record one more reference of this client on w (the cache reference is already taken). */
int session_hold(struct session *s, struct weight *w);
/* session_hold of a weight the caller looked up with session_find_held since the last hold or
 * release (h: what that returned), so that a large unit looks each weight up once. */
int session_hold_found(struct session *s, struct weight *w, struct held *h);
/* Give back one reference on the weight of `handle`; false if the client holds none. */
bool session_release(struct session *s, uint64_t handle);
/*
 * The release of a unit's free: handles[0..n) give back every reference on the weights held
 * last, in the order they were taken (each handle as many times in a row as it is held). Then
 * they are released in one pass, with no lookup, and true is returned; otherwise nothing changes
 * and false says to release them one by one.
 */
bool session_release_newest(struct session *s, const uint64_t *handles, size_t n);
struct held *session_find_held(struct session *s, uint64_t handle);
/* Is the client holding a weight of sg? */
bool session_holds_segment(const struct session *s, const struct cache_segment *sg);
/*
 * May the client take references on new_weights more distinct weights lying in segs[0..n)
 * (distinct segments)? Checks client_max_segments, and (root and the daemon's user exempt, as
 * from the other per-uid limits) uid_max_segments as uid_max_segments gives it and
 * uid_max_weights; 0, or -WEIGHTD_E_LIMIT_EXCEEDED naming the limit, its value and the counts.
 */
int session_check_holds(struct session *s, struct cache_segment *const *segs, size_t n,
			uint64_t new_weights, weightd_error *err);

#endif
