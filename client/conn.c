/* SPDX-License-Identifier: Apache-2.0 */
/* conn.c - libweightd's connection: requests by id, one reader dispatching replies, events. */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "error.h"
#include "frame.h"
#include "group.h"
#include "msg.h"
#include "seg.h"

#define WC_MAX_REPLY (64u << 20)     /* largest reply frame accepted from the daemon */
/* Memory kept per connection between requests: units' arenas, slot arrays and encodings, and
 * replies' decoding space (a warm 10,000-slot unit uses about 12 MiB of it). Freed by
 * weightd_close (and by the last reply the user still holds). */
#define WC_MSG_CACHE (32u << 20)
/* receive buffer kept per connection between replies */
#define WC_INBUF_KEEP (8u << 20)
#define WC_MAX_MESSAGE (2ull << 30)  /* largest reply (its frames joined) */
#define WC_MAX_REPLY_FDS 65536       /* fds one reply may carry (one per segment) */
#define WC_MAX_EVENTS 1024           /* queued generation events per client */
#define WC_HELLO_TIMEOUT_MS 30000    /* connect gives up on a peer that never answers hello */

/*
 * A request waiting for its reply. Linked in the client's list while waiting; the reader
 * unlinks it, stores the reply and sets done. `orphan` marks one nobody waits for any more: the
 * reader frees it and releases any weight its reply carries.
 */
struct wc_pending {
	uint64_t id;
	uint64_t epoch;              /* the connection it was sent on */
	bool done;
	bool orphan;
	Weightd__Response *resp;     /* the reply (owned), NULL when failed locally */
	int *fds;                    /* fds that came with it (owned until taken) */
	uint32_t nfds;
	weightd_error err;           /* set when it failed before a reply came */
	wc_conn_refs_fn *refs;       /* the references its reply stands for, or NULL: none */
	weightd_client *c;
	LIST_ENTRY(wc_pending) link;  /* in the client's pending list */
};

struct wc_event {
	char *checkpoint;
	char *what;
	uint64_t generation;
};

struct weightd_client {
	atomic_uint refs;            /* the user's, plus one per inflight, unit and daemon reference */
	int sock;
	char path[108];
	pthread_mutex_t mu;          /* everything below but sock and in */
	pthread_cond_t cv;
	pthread_mutex_t send_mu;     /* one frame on the socket at a time; guards sock for sending */
	bool reading;                /* one thread reads the socket (and owns `in`) at a time */
	int dead;                    /* 0, or the code every call now fails with */
	weightd_error dead_err;
	uint64_t next_id;
	size_t n_pending;
	LIST_HEAD(, wc_pending) pending;
	struct wd_inbuf *in;
	struct wd_msg_cache *msgs;   /* blocks of units and replies, kept for the next ones */
	struct wc_event events[WC_MAX_EVENTS];
	size_t ev_head, ev_count;
	uint64_t ev_dropped;
	weightd_server_info info;
	Weightd__Response *hello;    /* backs info's strings */
	struct wc_seg_table *segs;   /* the segments this client holds (seg.c) */
	/* Reconnection (conn.h). epoch counts the connections made (under mu); sock_epoch is the
	 * one sock is now (under send_mu), so a release meant for an earlier one is never sent on
	 * a later one. */
	char *name;                  /* the name given at connect, said again at each hello */
	uint64_t epoch, sock_epoch;
	atomic_uint_least64_t epoch_now;   /* epoch, for the holds' bookkeeping to read unlocked */
	bool closed;                 /* weightd_close: never connect again */
	bool no_reconnect;           /* WEIGHTD_RECONNECT=0 */
	bool reconnecting;           /* a thread (reconnector) connects again; others wait */
	pthread_t reconnector;
	Weightd__Response **old_hellos;  /* hellos of earlier connections (info's strings) */
	size_t n_old_hellos;
	char **subs;                 /* the checkpoints subscribed to, said again after a reconnect */
	size_t n_subs;
	pthread_mutex_t held_mu;     /* held and everything in it */
	pthread_cond_t held_cv;      /* a re-attach is over */
	bool reattaching;
	struct wc_held *held;        /* the references this process holds (conn.h) */
	size_t n_held;
};

/*
 * How replies reach their threads. Any thread that must wait for a reply (or for events) and
 * finds nobody reading the socket becomes the reader: it sets c->reading, drops the mutex,
 * reads frames and, for each, takes the mutex to hand the reply to its pending entry and wake
 * the waiters. It stops when its own condition holds, its time is up, or the connection dies;
 * then it clears c->reading and wakes everyone so another waiter can take over. Only the reader
 * touches c->in, so the frame buffer needs no lock of its own.
 */

/* The sentence for this process out of descriptors (see wd_nofile_text). */
static void nofile_text(char *buf, size_t cap)
{
	wd_nofile_text(buf, cap, "this process",
		       "ulimit -n, setrlimit(RLIMIT_NOFILE), or LimitNOFILE= for a service");
}

/* A user's or group's name, or its number when it has none. */
static void user_name(uid_t uid, char *buf, size_t cap)
{
	struct passwd pw, *res = NULL;
	char tmp[1024];

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) == 0 && res)
		snprintf(buf, cap, "%s", res->pw_name);
	else
		snprintf(buf, cap, "%u", (unsigned)uid);
}

static void group_name(gid_t gid, char *buf, size_t cap)
{
	struct group gr, *res = NULL;
	char tmp[4096];

	if (getgrgid_r(gid, &gr, tmp, sizeof(tmp), &res) == 0 && res)
		snprintf(buf, cap, "%s", res->gr_name);
	else
		snprintf(buf, cap, "%u", (unsigned)gid);
}

/*
 * Why connecting to the socket at path was refused (EACCES, EPERM), for the error: its owner,
 * group and mode, and what lets this process in (most often: join the socket's group).
 */
static void denied_text(const char *path, char *buf, size_t cap)
{
	char owner[64], group[64], me[64];
	struct stat st;

	if (stat(path, &st) < 0) {
		snprintf(buf, cap, " (a directory on the way to it is not searchable by this process)");
		return;
	}
	user_name(st.st_uid, owner, sizeof(owner));
	group_name(st.st_gid, group, sizeof(group));
	user_name(geteuid(), me, sizeof(me));
	if ((st.st_mode & S_IWGRP) && !wd_group_member(st.st_gid))
		snprintf(buf, cap,
			 " (the socket is owned by %s:%s, mode %04o; this process runs as %s, who is "
			 "not in the group %s: join it (usermod -aG %s %s, then log in again))",
			 owner, group, (unsigned)(st.st_mode & 07777), me, group, group, me);
	else
		snprintf(buf, cap,
			 " (the socket is owned by %s:%s, mode %04o, which does not let %s connect: "
			 "ask for the group the socket is given to, or a wider socket_mode)",
			 owner, group, (unsigned)(st.st_mode & 07777), me);
}

/*
 * Why there is no socket at path (ENOENT): no weightd, or, in a container, a socket directory
 * that is the container's own rather than the host's, where weightd made the socket.
 */
static void missing_text(const char *path, char *buf, size_t cap)
{
	const char *slash = strrchr(path, '/');
	int dlen = slash && slash != path ? (int)(slash - path) : 1;

	snprintf(buf, cap,
		 " (is weightd running? In a container, the socket's directory %.*s must be the "
		 "one weightd's socket is in, shared from the host: mount it as a hostPath volume "
		 "as deploy/kubernetes/engine.yaml does)",
		 dlen, path);
}

void wc_conn_close_fds(int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

static void event_clear(struct wc_event *e)
{
	free(e->checkpoint);
	free(e->what);
	memset(e, 0, sizeof(*e));
}

static void client_destroy(weightd_client *c)
{
	struct wc_pending *p;

	while ((p = LIST_FIRST(&c->pending))) {
		LIST_REMOVE(p, link);
		if (p->resp)
			wd_msg_free(p->resp);
		wc_conn_close_fds(p->fds, p->nfds);
		free(p);
	}
	for (size_t i = 0; i < c->ev_count; i++)
		event_clear(&c->events[(c->ev_head + i) % WC_MAX_EVENTS]);
	if (c->sock >= 0)
		close(c->sock);
	wd_inbuf_free(c->in);
	if (c->hello)
		wd_msg_free(c->hello);
	for (size_t i = 0; i < c->n_old_hellos; i++)
		wd_msg_free(c->old_hellos[i]);
	free(c->old_hellos);
	for (size_t i = 0; i < c->n_subs; i++)
		free(c->subs[i]);
	free(c->subs);
	free(c->name);
	pthread_cond_destroy(&c->held_cv);
	pthread_mutex_destroy(&c->held_mu);
	wc_seg_table_free(c->segs);
	wd_msg_cache_unref(c->msgs);   /* replies the user still holds keep it alive */
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->send_mu);
	free(c);
}

void wc_conn_ref(weightd_client *c)
{
	atomic_fetch_add(&c->refs, 1);
}

void wc_conn_unref(weightd_client *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1)
		client_destroy(c);
}

struct wd_msg_cache *wc_conn_msgs(const weightd_client *c)
{
	return c->msgs;
}

struct wc_seg_table *wc_conn_segs(const weightd_client *c)
{
	return c->segs;
}

/*
 * The connection is over: every waiting request fails with `code` and the sentence, orphans are
 * dropped, and the socket is shut down so a reader blocked in poll wakes up. The first cause is
 * kept. Takes c->mu.
 */
static void mark_dead(weightd_client *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void mark_dead(weightd_client *c, int code, const char *fmt, ...)
{
	LIST_HEAD(, wc_pending) orphans = LIST_HEAD_INITIALIZER(orphans);
	struct wc_pending *p;
	va_list ap;

	pthread_mutex_lock(&c->mu);
	if (c->dead) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	wc_err_clear(&c->dead_err);
	c->dead_err.code = code;
	va_start(ap, fmt);
	vsnprintf(c->dead_err.message, sizeof(c->dead_err.message), fmt, ap);
	va_end(ap);
	c->dead = code;
	while ((p = LIST_FIRST(&c->pending))) {
		LIST_REMOVE(p, link);
		c->n_pending--;
		if (p->orphan) {
			LIST_INSERT_HEAD(&orphans, p, link);
			continue;
		}
		p->err = c->dead_err;
		p->done = true;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	/* sock stays open (only weightd_close closes it) so its number cannot be reused under a
	 * thread still holding it; shutdown wakes a reader in poll. */
	pthread_mutex_lock(&c->send_mu);
	if (c->sock >= 0)
		shutdown(c->sock, SHUT_RDWR);
	pthread_mutex_unlock(&c->send_mu);
	while ((p = LIST_FIRST(&orphans))) {
		LIST_REMOVE(p, link);
		free(p);
	}
}

static void unlink_pending(weightd_client *c, struct wc_pending *p)
{
	LIST_REMOVE(p, link);
	c->n_pending--;
}

static int reconnect(weightd_client *c, weightd_error *err);

/* May the next call connect again (conn.h)? Under c->mu. */
static bool can_reconnect(const weightd_client *c)
{
	return c->dead == WEIGHTD_E_DISCONNECTED && !c->closed && !c->no_reconnect && !c->reading;
}

/*
 * wc_conn_send, and the release's form: epoch != 0 sends only on that connection (a release of
 * references taken on an earlier one is dropped: they name nothing on this one), and
 * may_reconnect says whether a dead connection is made again first. *ret_lost (may be NULL) is
 * set when this very send found the connection broken.
 */
static int send_req(weightd_client *c, Weightd__Request *req, wc_conn_refs_fn *refs,
		    struct wc_pending **ret_p, uint64_t epoch, bool may_reconnect, bool *ret_lost,
		    weightd_error *err)
{
	struct wc_pending *p = NULL;
	uint8_t *buf = NULL;
	size_t len;
	uint32_t max;
	uint64_t max_msg, want;
	int r;

	if (ret_p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		p->refs = refs;
	}
	pthread_mutex_lock(&c->mu);
	for (;;) {
		/* while another thread connects again, nothing else is sent */
		while (c->reconnecting && !pthread_equal(c->reconnector, pthread_self()))
			pthread_cond_wait(&c->cv, &c->mu);
		if (!c->dead || !may_reconnect || !can_reconnect(c))
			break;
		pthread_mutex_unlock(&c->mu);
		r = reconnect(c, err);
		pthread_mutex_lock(&c->mu);
		if (r < 0) {
			pthread_mutex_unlock(&c->mu);
			goto out;
		}
		may_reconnect = false; /* once per call */
	}
	if (c->dead) {
		r = wc_err_copy(err, &c->dead_err);
		pthread_mutex_unlock(&c->mu);
		goto out;
	}
	if (p && c->info.max_pending_requests &&
	    c->n_pending >= c->info.max_pending_requests) {
		r = wc_err_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
			       "%zu requests are already waiting for weightd (its limit is %u); "
			       "finish some first", c->n_pending, c->info.max_pending_requests);
		pthread_mutex_unlock(&c->mu);
		goto out;
	}
	req->id = ++c->next_id;
	want = epoch ? epoch : c->epoch;
	if (p) {
		p->id = req->id;
		p->epoch = c->epoch;
		p->c = c;
		LIST_INSERT_HEAD(&c->pending, p, link);
		c->n_pending++;
	}
	max = c->info.max_frame_bytes ? c->info.max_frame_bytes : WD_FRAME_MAX_DEFAULT;
	max_msg = c->info.max_message_bytes ? c->info.max_message_bytes : max;
	pthread_mutex_unlock(&c->mu);

	/* A request larger than one frame travels as several (up to the daemon's max_message). */
	len = weightd__request__get_packed_size(req);
	if (len > max_msg) {
		r = wc_err_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
			       "limit exceeded: the request is %zu bytes, over weightd's limit of "
			       "%llu bytes per request (max_message); split it", len,
			       (unsigned long long)max_msg);
		if (err) {
			err->expected = (int64_t)max_msg;
			err->actual = (int64_t)len;
		}
		goto unregister;
	}
	buf = wd_msg_cache_alloc(c->msgs, len ? len : 1);
	if (!buf) {
		r = wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto unregister;
	}
	weightd__request__pack(req, buf);

	pthread_mutex_lock(&c->send_mu);
	if (c->sock < 0)
		r = -WEIGHTD_E_DISCONNECTED;
	else if (c->sock_epoch != want)
		r = 0; /* meant for a connection that is gone: its references name nothing here */
	else
		r = wd_message_send_blocking(c->sock, buf, len, max);
	pthread_mutex_unlock(&c->send_mu);
	if (r < 0) {
		mark_dead(c, WEIGHTD_E_DISCONNECTED,
			  "the connection to weightd at %s was lost while sending a request (%s)",
			  c->path, weightd_code_name(r));
		if (ret_lost)
			*ret_lost = true;
		pthread_mutex_lock(&c->mu);
		r = wc_err_copy(err, &c->dead_err);
		pthread_mutex_unlock(&c->mu);
		goto unregister;
	}
	wd_msg_free(buf);
	if (ret_p)
		*ret_p = p;
	return 0;

unregister:
	if (p) {
		pthread_mutex_lock(&c->mu);
		if (!p->done)
			unlink_pending(c, p);
		pthread_mutex_unlock(&c->mu);
	}
out:
	wd_msg_free(buf);
	free(p);
	return r;
}

int wc_conn_send(weightd_client *c, Weightd__Request *req, wc_conn_refs_fn *refs,
		 struct wc_pending **ret_p, weightd_error *err)
{
	bool lost = false;
	int r = send_req(c, req, refs, ret_p, 0, true, &lost, err);

	/* found broken by this send (weightd restarted since the last call): once more, which
	 * connects again first */
	if (r < 0 && lost)
		r = send_req(c, req, refs, ret_p, 0, true, NULL, err);
	return r;
}

void wc_conn_release(weightd_client *c, const uint64_t *handles, size_t n)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Release rel = WEIGHTD__RELEASE__INIT;
	uint64_t epoch;

	if (!c || n == 0)
		return;
	rel.n_handles = n;
	rel.handles = (uint64_t *)handles;
	req.body_case = WEIGHTD__REQUEST__BODY_RELEASE;
	req.release = &rel;
	/* No pending entry, and quiet: the daemon answers only a failure (an older one answers
	 * anyway), and whatever comes is dropped. Without an answer to read, a get after a release
	 * is one message each way, which the scheduler keeps on one CPU like any ping-pong. A dead
	 * connection needs nothing: the daemon dropped this client's references when it ended, and
	 * a connection made since knows them by other handles (re-attached, conn.h). */
	req.quiet = 1;
	pthread_mutex_lock(&c->mu);
	epoch = c->epoch;
	pthread_mutex_unlock(&c->mu);
	send_req(c, &req, NULL, NULL, epoch, false, NULL, NULL);
}

void wc_conn_discard(weightd_client *c, wc_conn_refs_fn *refs, Weightd__Response *resp, int *fds,
		     uint32_t nfds)
{
	bool some = refs && resp && !resp->error && nfds;
	size_t n = some ? refs(c, resp, NULL) : 0;
	uint64_t *handles = n ? calloc(n, sizeof(*handles)) : NULL;

	n = handles ? refs(c, resp, handles) : 0;
	wc_conn_close_fds(fds, nfds);
	wc_conn_release(c, handles, n);
	free(handles);
	if (resp)
		wd_msg_free(resp);
}

/* Queue an event (under c->mu), the oldest dropped and counted when the queue is full. */
static void queue_event(weightd_client *c, const char *checkpoint, const char *what,
			uint64_t generation)
{
	struct wc_event *e;

	if (c->ev_count == WC_MAX_EVENTS) {
		event_clear(&c->events[c->ev_head]);
		c->ev_head = (c->ev_head + 1) % WC_MAX_EVENTS;
		c->ev_count--;
		c->ev_dropped++;
	}
	e = &c->events[(c->ev_head + c->ev_count) % WC_MAX_EVENTS];
	e->checkpoint = strdup(checkpoint ? checkpoint : "");
	e->what = strdup(what ? what : "");
	e->generation = generation;
	if (e->checkpoint && e->what) {
		c->ev_count++;
		pthread_cond_broadcast(&c->cv);
	} else {
		event_clear(e);
		c->ev_dropped++;
	}
}

/* Hand one decoded frame to its pending entry (or the event queue). Called by the reader
 * without c->mu; takes ownership of resp and fds. */
static void dispatch(weightd_client *c, Weightd__Response *resp, int *fds, uint32_t nfds)
{
	struct wc_pending *p;

	if (resp->id == 0 && resp->error) {
		/* The daemon is about to close the connection and says why (a limit of the stream). */
		weightd_error e;

		wc_err_clear(&e);
		wc_err_from_wire(&e, resp->error);
		mark_dead(c, e.code ? e.code : WEIGHTD_E_PROTOCOL, "weightd at %s: %s", c->path,
			  e.message);
		goto drop_unlocked;
	}
	pthread_mutex_lock(&c->mu);
	if (resp->id == 0 && resp->error) {
		/* the daemon is closing this connection and says why (a limit, a timeout) */
		pthread_mutex_unlock(&c->mu);
		mark_dead(c, resp->error->code ? (int)resp->error->code : WEIGHTD_E_DISCONNECTED,
			  "weightd at %s closed the connection: %s", c->path,
			  resp->error->message ? resp->error->message : "");
		goto drop;
	}
	if (resp->id == 0) {
		if (resp->body_case == WEIGHTD__RESPONSE__BODY_EVENT && resp->event)
			queue_event(c, resp->event->checkpoint, resp->event->what,
				    resp->event->generation);
		pthread_mutex_unlock(&c->mu);
		goto drop;
	}
	LIST_FOREACH(p, &c->pending, link)
		if (p->id == resp->id)
			break;
	if (!p) {
		/* A reply to a release, whose pending was never registered. */
		pthread_mutex_unlock(&c->mu);
		goto drop;
	}
	unlink_pending(c, p);
	if (p->orphan) {
		pthread_mutex_unlock(&c->mu);
		wc_conn_discard(c, p->refs, resp, fds, nfds);
		free(p);
		return;
	}
	p->resp = resp;
	p->fds = fds;
	p->nfds = nfds;
	p->done = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return;
drop:
drop_unlocked:
	wc_conn_close_fds(fds, nfds);
	wd_msg_free(resp);
}

/*
 * Read what the socket has (waiting up to timeout_ms for the first byte) and dispatch every
 * complete frame. Returns 1 when something was read, 0 on timeout, -1 when the connection died.
 * Waiting for ever is one blocking recvmsg (the socket is blocking; mark_dead's shutdown ends
 * it); a bounded wait polls first. It stops once the frames read are all dispatched and none is
 * half there, rather than asking the socket again only to hear EAGAIN: the caller checks its
 * condition and comes back if it still waits.
 */
static int read_some(weightd_client *c, int timeout_ms)
{
	bool wait = timeout_ms < 0;
	int r;

	if (!wait) {
		struct pollfd pfd = { .fd = c->sock, .events = POLLIN };

		r = poll(&pfd, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			return 1;   /* the caller re-checks its condition and time */
		if (r < 0) {
			mark_dead(c, WEIGHTD_E_IO, "waiting for weightd at %s failed: %s", c->path,
				  strerror(errno));
			return -1;
		}
		if (r == 0)
			return 0;
	}
	for (;;) {
		r = wait ? wd_inbuf_read_wait(c->in, c->sock) : wd_inbuf_read(c->in, c->sock);
		if (r == WD_FRAME_AGAIN && wait) {
			/* the caller made the socket non-blocking: wait the old way */
			struct pollfd pfd = { .fd = c->sock, .events = POLLIN };

			wait = false;
			if (poll(&pfd, 1, -1) < 0 && errno != EINTR) {
				mark_dead(c, WEIGHTD_E_IO, "waiting for weightd at %s failed: %s",
					  c->path, strerror(errno));
				return -1;
			}
			continue;
		}
		wait = false;
		if (r == WD_FRAME_AGAIN)
			break;
		if (r == 0) {
			mark_dead(c, WEIGHTD_E_DISCONNECTED,
				  "weightd at %s closed the connection", c->path);
			return -1;
		}
		if (r == -WEIGHTD_E_RESOURCE_EXHAUSTED && wd_inbuf_fds_dropped(c->in)) {
			char why[300];

			/* The kernel dropped the fds of a reply: this process is at its limit. */
			nofile_text(why, sizeof(why));
			mark_dead(c, WEIGHTD_E_RESOURCE_EXHAUSTED,
				  "resource exhausted: a reply from weightd at %s carried file "
				  "descriptors this process could not receive, so the connection is "
				  "closed: %s", c->path, why);
			return -1;
		}
		if (r < 0) {
			mark_dead(c, -r == WEIGHTD_E_PROTOCOL ? WEIGHTD_E_PROTOCOL :
				  WEIGHTD_E_DISCONNECTED,
				  "the connection to weightd at %s was lost (%s)", c->path,
				  weightd_code_name(r));
			return -1;
		}
		for (;;) {
			struct wd_frame f;
			Weightd__Response *resp;

			r = wd_inbuf_next(c->in, &f);
			if (r == 0)
				break;
			if (r < 0) {
				mark_dead(c, WEIGHTD_E_PROTOCOL,
					  "weightd at %s sent a malformed frame (%s)", c->path,
					  weightd_code_name(r));
				return -1;
			}
			resp = wd_msg_unpack_cached(&weightd__response__descriptor, f.payload,
						    f.len, c->msgs);
			if (!resp) {
				wd_frame_close_fds(&f);
				mark_dead(c, WEIGHTD_E_PROTOCOL,
					  "weightd at %s sent a reply that does not decode as a "
					  "weightd.Response (%u bytes)", c->path, f.len);
				return -1;
			}
			dispatch(c, resp, f.fds, f.nfds);
		}
		if (wd_inbuf_partial(c->in, NULL) == 0)
			break;
	}
	return 1;
}

static bool cond_holds(weightd_client *c, struct wc_pending *p)
{
	return p ? p->done : (c->ev_count > 0 || c->dead);
}

bool wc_conn_wait(weightd_client *c, struct wc_pending *p, int timeout_ms)
{
	int64_t deadline = timeout_ms > 0 ? (int64_t)wd_clock_ms() + timeout_ms : 0;
	bool ok;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		int left = -1, r;

		if (cond_holds(c, p) || c->dead)
			break;
		if (timeout_ms > 0) {
			int64_t d = deadline - (int64_t)wd_clock_ms();

			if (d <= 0)
				break;
			left = d > 1000000 ? 1000000 : (int)d;
		} else if (timeout_ms == 0) {
			left = 0;
		}
		if (c->reading) {
			if (timeout_ms == 0)
				break;
			if (timeout_ms < 0) {
				pthread_cond_wait(&c->cv, &c->mu);
			} else {
				struct timespec ts;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += left / 1000;
				ts.tv_nsec += (long)(left % 1000) * 1000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&c->cv, &c->mu, &ts);
			}
			continue;
		}
		c->reading = true;
		pthread_mutex_unlock(&c->mu);
		r = read_some(c, left);
		pthread_mutex_lock(&c->mu);
		c->reading = false;
		pthread_cond_broadcast(&c->cv);
		if (timeout_ms == 0 ||
		    (r == 0 && timeout_ms > 0 && (int64_t)wd_clock_ms() >= deadline))
			break;
	}
	ok = cond_holds(c, p);
	pthread_mutex_unlock(&c->mu);
	return ok;
}

int wc_conn_pending_take(struct wc_pending *p, int body, Weightd__Response **ret_resp,
			 int **ret_fds, uint32_t *ret_nfds, weightd_error *err)
{
	Weightd__Response *resp = p->resp;
	weightd_client *c = p->c;
	int r;

	/* a reply of a connection that is gone (weightd restarted before it was taken): its
	 * handles name nothing on this one */
	if (resp && c) {
		pthread_mutex_lock(&c->mu);
		r = p->epoch != c->epoch;
		pthread_mutex_unlock(&c->mu);
		if (r)
			return wc_err_set(err, WEIGHTD_E_DISCONNECTED,
					  "the connection to weightd was lost and made again before "
					  "this request's reply was taken; ask again");
	}
	if (!resp) {
		if (!p->err.code)   /* cannot happen: a pending is done with a reply or an error */
			return wc_err_set(err, WEIGHTD_E_INTERNAL, "a request ended without a reply");
		return wc_err_copy(err, &p->err);
	}
	if (resp->error) {
		r = wc_err_from_wire(err, resp->error);
		goto fail;
	}
	if ((int)resp->body_case != body) {
		r = wc_err_set(err, WEIGHTD_E_PROTOCOL,
			       "weightd answered with a reply of kind %d to a request of kind %d",
			       (int)resp->body_case, body);
		goto fail;
	}
	*ret_resp = resp;
	p->resp = NULL;
	if (ret_fds) {
		*ret_fds = p->fds;
		*ret_nfds = p->nfds;
		p->fds = NULL;
		p->nfds = 0;
	}
	return 0;
fail:
	/* the reply stays in p: wc_conn_pending_free closes its fds and releases what they stand for */
	return r;
}

void wc_conn_pending_free(weightd_client *c, struct wc_pending *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&c->mu);
	if (!p->done) {
		p->orphan = true;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	pthread_mutex_unlock(&c->mu);
	wc_conn_discard(c, p->refs, p->resp, p->fds, p->nfds);
	free(p);
}

int wc_conn_call(weightd_client *c, Weightd__Request *req, int body, wc_conn_refs_fn *refs,
		 Weightd__Response **ret_resp, int **ret_fds, uint32_t *ret_nfds,
		 weightd_error *err)
{
	struct wc_pending *p;
	int r;

	r = wc_conn_send(c, req, refs, &p, err);
	if (r < 0)
		return r;
	wc_conn_wait(c, p, -1);
	r = wc_conn_pending_take(p, body, ret_resp, ret_fds, ret_nfds, err);
	wc_conn_pending_free(c, p);
	return r;
}

/* --- public: connect, close, hello ------------------------------------------------------- */

/* A receive buffer for one connection's replies. */
static struct wd_inbuf *new_inbuf(void)
{
	struct wd_inbuf *in = wd_inbuf_new(WC_MAX_REPLY, WC_MAX_REPLY_FDS);

	if (in) {
		wd_inbuf_set_max_message(in, WC_MAX_MESSAGE);
		wd_inbuf_set_keep(in, WC_INBUF_KEEP);
	}
	return in;
}

/*
 * Say hello and check the version. The wait is bounded: a process that accepts connections on
 * the socket but never answers must not hang an engine's start for ever.
 */
static int hello(weightd_client *c, const char *client_name, weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Hello h = WEIGHTD__HELLO__INIT;
	Weightd__Response *resp = NULL;
	const Weightd__HelloReply *hr;
	struct wc_pending *p;
	const char *env = getenv("WEIGHTD_HELLO_TIMEOUT_MS");
	long ms = env && *env ? strtol(env, NULL, 10) : WC_HELLO_TIMEOUT_MS;
	int r;

	if (ms <= 0 || ms > 3600000)
		ms = WC_HELLO_TIMEOUT_MS;
	/* oldest first: a weightd from before version ranges checks only this field */
	h.protocol_version = WEIGHTD_PROTOCOL_MIN_VERSION;
	h.max_protocol_version = WEIGHTD_PROTOCOL_VERSION;
	h.client_name = (char *)(client_name ? client_name : program_invocation_short_name);
	req.body_case = WEIGHTD__REQUEST__BODY_HELLO;
	req.hello = &h;
	r = wc_conn_send(c, &req, NULL, &p, err);
	if (r < 0)
		return r;
	if (!wc_conn_wait(c, p, (int)ms)) {
		wc_conn_pending_free(c, p);
		return wc_err_set(err, WEIGHTD_E_DISCONNECTED,
				  "%s did not answer hello within %ld ms; is weightd listening there?",
				  c->path, ms);
	}
	r = wc_conn_pending_take(p, WEIGHTD__RESPONSE__BODY_HELLO, &resp, NULL, NULL, err);
	wc_conn_pending_free(c, p);
	if (r < 0)
		return r;
	hr = resp->hello;
	/* The daemon picks the version; it must be one we speak. */
	if (!hr || hr->protocol_version < WEIGHTD_PROTOCOL_MIN_VERSION ||
	    hr->protocol_version > WEIGHTD_PROTOCOL_VERSION) {
		r = wc_err_set(err, WEIGHTD_E_UNSUPPORTED_VERSION,
			       "weightd at %s answered with protocol version %u (it speaks %u to %u); "
			       "this libweightd %s speaks %d to %d", c->path,
			       hr ? hr->protocol_version : 0, hr ? hr->min_protocol_version : 0,
			       hr ? hr->max_protocol_version : 0, WD_VERSION,
			       WEIGHTD_PROTOCOL_MIN_VERSION, WEIGHTD_PROTOCOL_VERSION);
		wd_msg_free(resp);
		return r;
	}
	/* an earlier connection's hello backs strings the user may still hold: kept to the end */
	if (c->hello) {
		Weightd__Response **o = realloc(c->old_hellos,
						(c->n_old_hellos + 1) * sizeof(*o));

		if (!o) {
			wd_msg_free(resp);
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
		c->old_hellos = o;
		c->old_hellos[c->n_old_hellos++] = c->hello;
	}
	c->hello = resp;
	c->info.protocol_version = hr->protocol_version;
	c->info.server_version = hr->server_version;
	c->info.instance = hr->instance;
	c->info.max_frame_bytes = hr->max_frame_bytes;
	c->info.max_pending_requests = hr->max_pending_requests;
	c->info.max_unit_entries = hr->max_unit_entries;
	c->info.max_recipe_nodes = hr->max_recipe_nodes;
	c->info.max_client_bytes = hr->max_client_bytes;
	c->info.max_client_weights = hr->max_client_weights;
	/* the daemon sends frames of up to its max_frame (hello is the first reply: nobody else
	 * reads the buffer yet) */
	wd_inbuf_raise_max_payload(c->in, hr->max_frame_bytes);
	c->info.max_message_bytes = hr->max_message_bytes;
	c->info.segment_max_bytes = hr->segment_max_bytes;
	c->info.max_queue_fds = hr->max_queue_fds;
	c->info.idle_timeout_ms = hr->idle_timeout_ms;
	c->info.frame_timeout_ms = hr->frame_timeout_ms;
	c->info.max_client_segments = hr->max_client_segments;
	c->info.max_uid_segments = hr->max_uid_segments;
	c->info.max_uid_weights = hr->max_uid_weights;
	c->info.min_protocol_version = hr->min_protocol_version;
	c->info.max_protocol_version = hr->max_protocol_version;
	return 0;
}

/* --- reconnection (conn.h) ---------------------------------------------------------------- */

void wc_conn_held_add(weightd_client *c, struct wc_held *h)
{
	uint64_t epoch = atomic_load(&c->epoch_now);

	pthread_mutex_lock(&c->held_mu);
	h->epoch = epoch;
	h->prev = NULL;
	h->next = c->held;
	if (c->held)
		c->held->prev = h;
	c->held = h;
	c->n_held++;
	pthread_mutex_unlock(&c->held_mu);
}

uint64_t wc_conn_held_remove(weightd_client *c, struct wc_held *h)
{
	uint64_t handle, epoch, now;

	pthread_mutex_lock(&c->held_mu);
	while (c->reattaching)
		pthread_cond_wait(&c->held_cv, &c->held_mu);
	if (h->prev)
		h->prev->next = h->next;
	else
		c->held = h->next;
	if (h->next)
		h->next->prev = h->prev;
	c->n_held--;
	handle = h->handle;
	epoch = h->epoch;
	pthread_mutex_unlock(&c->held_mu);
	now = atomic_load(&c->epoch_now);
	return epoch == now ? handle : 0;
}

/* Weights re-attached at most per request (the daemon's max_unit_entries may be lower). */
#define REATTACH_BATCH 65536

/*
 * Say which weights this process still holds, in batches, so that they count as its own on the
 * new connection: each gets its new handle (0: not re-attached, so never released there), and
 * the segment table its new ids. Holders cannot let go meanwhile (wc_conn_held_remove waits).
 * Returns how many were re-attached.
 */
static uint64_t reattach(weightd_client *c, uint64_t epoch)
{
	struct wc_held **hs = NULL, *h;
	struct wc_seg **segs = NULL;
	uint64_t *ids = NULL, attached = 0;
	size_t n = 0, batch;

	pthread_mutex_lock(&c->held_mu);
	c->reattaching = true;
	if (c->n_held) {
		hs = calloc(c->n_held, sizeof(*hs));
		segs = calloc(c->n_held, sizeof(*segs));
		ids = calloc(c->n_held, sizeof(*ids));
	}
	for (h = c->held; hs && segs && ids && h; h = h->next)
		hs[n++] = h;
	pthread_mutex_unlock(&c->held_mu);
	batch = c->info.max_unit_entries && c->info.max_unit_entries < REATTACH_BATCH ?
			c->info.max_unit_entries : REATTACH_BATCH;
	for (size_t from = 0; from < n; from += batch) {
		size_t k = n - from < batch ? n - from : batch;
		Weightd__Request req = WEIGHTD__REQUEST__INIT;
		Weightd__Reattach ra = WEIGHTD__REATTACH__INIT;
		Weightd__Response *resp = NULL;
		uint8_t *keys = malloc(k * WEIGHTD_DIGEST_LEN + 1);
		uint64_t *ino = malloc(k * sizeof(*ino)), *off = malloc(k * sizeof(*off)),
			 *nb = malloc(k * sizeof(*nb));
		uint32_t *cnt = malloc(k * sizeof(*cnt));
		const Weightd__ReattachReply *rr = NULL;
		int r = -1;

		if (keys && ino && off && nb && cnt) {
			for (size_t i = 0; i < k; i++) {
				h = hs[from + i];
				memcpy(keys + i * WEIGHTD_DIGEST_LEN, h->key, WEIGHTD_DIGEST_LEN);
				ino[i] = h->seg->ino;
				off[i] = h->offset;
				nb[i] = h->nbytes;
				cnt[i] = h->count;
			}
			ra.keys.data = keys;
			ra.keys.len = k * WEIGHTD_DIGEST_LEN;
			ra.n_ino = ra.n_offset = ra.n_nbytes = ra.n_count = k;
			ra.ino = ino;
			ra.offset = off;
			ra.nbytes = nb;
			ra.count = cnt;
			req.body_case = WEIGHTD__REQUEST__BODY_REATTACH;
			req.reattach = &ra;
			/* a daemon that does not know the request answers unsupported: none then */
			r = wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_REATTACH, NULL, &resp, NULL,
					 NULL, NULL);
		}
		if (r == 0)
			rr = resp->reattach;
		pthread_mutex_lock(&c->held_mu);
		for (size_t i = 0; i < k; i++) {
			bool ok = rr && rr->n_handle == k && rr->n_segment == k && rr->handle[i];

			h = hs[from + i];
			h->handle = ok ? rr->handle[i] : 0;
			h->epoch = epoch;
			segs[from + i] = h->seg;
			ids[from + i] = ok ? rr->segment[i] : 0;
			attached += ok;
		}
		pthread_mutex_unlock(&c->held_mu);
		if (resp)
			wd_msg_free(resp);
		free(keys);
		free(ino);
		free(off);
		free(nb);
		free(cnt);
	}
	/* the daemon names segments anew: the table follows (those no weight came back in are
	 * this process's alone now) */
	if (segs && ids)
		wc_seg_table_rekey(c->segs, segs, ids, n);
	pthread_mutex_lock(&c->held_mu);
	/* out of memory for the list: nothing re-attached, nothing released on the new one */
	if (!hs || !segs || !ids)
		for (h = c->held; h; h = h->next) {
			h->handle = 0;
			h->epoch = epoch;
		}
	c->reattaching = false;
	pthread_cond_broadcast(&c->held_cv);
	pthread_mutex_unlock(&c->held_mu);
	free(hs);
	free(segs);
	free(ids);
	return attached;
}

/* Subscribe again to what the user subscribed to (conn.h); failures are the next poll's. */
static void resubscribe(weightd_client *c)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Subscribe sub = WEIGHTD__SUBSCRIBE__INIT;
	Weightd__Response *resp = NULL;

	if (!c->n_subs)
		return;
	sub.n_checkpoints = c->n_subs;
	sub.checkpoints = c->subs;
	req.body_case = WEIGHTD__REQUEST__BODY_SUBSCRIBE;
	req.subscribe = &sub;
	if (wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_SUBSCRIBE, NULL, &resp, NULL, NULL,
			 NULL) == 0)
		wd_msg_free(resp);
}

/*
 * Connect again after weightd went away (conn.h): a new socket in the old one's place (the fd
 * number stays, see weightd_client_fd), hello, re-attach, subscriptions, then the event. Other
 * threads wait meanwhile (send_req). 0, or the error the calling request fails with (the next
 * call tries again).
 */
static int reconnect(weightd_client *c, weightd_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t epoch, attached;
	int s = -1, r = 0, e;

	pthread_mutex_lock(&c->mu);
	if (!can_reconnect(c) || c->reconnecting) {
		pthread_mutex_unlock(&c->mu);
		return 0; /* another thread did it, or does it: the caller looks again */
	}
	c->reconnecting = true;
	c->reconnector = pthread_self();
	pthread_mutex_unlock(&c->mu);

	memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0) {
		do
			e = connect(s, (struct sockaddr *)&sa, sizeof(sa));
		while (e < 0 && errno == EINTR);
	}
	if (s < 0 || e < 0) {
		e = errno;
		if (s >= 0)
			close(s);
		r = wc_err_set(err, WEIGHTD_E_DISCONNECTED,
			       "weightd at %s went away and does not answer again yet (%s); what this "
			       "process maps stays intact, and the next call connects again",
			       c->path, strerror(e));
		goto done;
	}
	pthread_mutex_lock(&c->send_mu);
	if (c->sock >= 0) {
		/* the same fd number: a caller that polls weightd_client_fd keeps it */
		if (dup3(s, c->sock, O_CLOEXEC) < 0) {
			e = errno;
			pthread_mutex_unlock(&c->send_mu);
			close(s);
			r = wc_err_set(err, WEIGHTD_E_DISCONNECTED,
				       "cannot connect to weightd at %s again: %s", c->path,
				       strerror(e));
			goto done;
		}
		close(s);
	} else {
		c->sock = s;
	}
	epoch = ++c->sock_epoch;
	pthread_mutex_unlock(&c->send_mu);
	/* nobody reads a dead connection: its buffer (and any half frame of the old one) goes */
	wd_inbuf_free(c->in);
	c->in = new_inbuf();
	pthread_mutex_lock(&c->mu);
	if (!c->in) {
		pthread_mutex_unlock(&c->mu);
		r = wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto done;
	}
	c->epoch = epoch;
	atomic_store(&c->epoch_now, epoch);
	c->dead = 0;
	wc_err_clear(&c->dead_err);
	pthread_mutex_unlock(&c->mu);
	r = hello(c, c->name, err);
	if (r < 0) {
		mark_dead(c, WEIGHTD_E_DISCONNECTED, "weightd at %s answered again, but not its hello: %s",
			  c->path, err ? err->message : weightd_code_name(r));
		goto done;
	}
	attached = reattach(c, epoch);
	resubscribe(c);
	pthread_mutex_lock(&c->mu);
	queue_event(c, "", WEIGHTD_EVENT_RECONNECTED, attached);
	pthread_mutex_unlock(&c->mu);
done:
	pthread_mutex_lock(&c->mu);
	c->reconnecting = false;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return r;
}

int weightd_connect(const char *socket_path, const char *client_name, weightd_client **ret,
		    weightd_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	weightd_client *c = NULL;
	const char *path = socket_path;
	int r, e;

	wc_err_clear(err);
	if (!ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_connect: ret is NULL");
	if (!path || !path[0]) {
		path = getenv("WEIGHTD_SOCKET");
		if (!path || !path[0])
			path = WEIGHTD_DEFAULT_SOCKET;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "the socket path \"%s\" is %zu bytes; a Unix socket path holds at "
				  "most %zu", path, strlen(path), sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);

	c = calloc(1, sizeof(*c));
	if (!c)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	atomic_init(&c->refs, 1);
	c->sock = -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->send_mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->held_mu, NULL);
	pthread_cond_init(&c->held_cv, NULL);
	c->epoch = c->sock_epoch = 1;
	atomic_init(&c->epoch_now, 1);
	c->no_reconnect = getenv("WEIGHTD_RECONNECT") && strcmp(getenv("WEIGHTD_RECONNECT"), "0") == 0;
	c->name = strdup(client_name ? client_name : program_invocation_short_name);
	c->in = new_inbuf();
	c->msgs = wd_msg_cache_new(WC_MSG_CACHE);
	c->segs = wc_seg_table_new();
	if (!c->in || !c->msgs || !c->segs || !c->name) {
		r = wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto fail;
	}
	c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->sock < 0 && errno == EMFILE) {
		char why[300];

		nofile_text(why, sizeof(why));
		r = wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
			       "resource exhausted: cannot create a socket to reach weightd: %s", why);
		goto fail;
	}
	if (c->sock < 0) {
		r = wc_err_set(err, errno == ENFILE ? WEIGHTD_E_RESOURCE_EXHAUSTED : WEIGHTD_E_IO,
			       "cannot create a socket to reach weightd: %s", strerror(errno));
		goto fail;
	}
	do
		r = connect(c->sock, (struct sockaddr *)&sa, sizeof(sa));
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		char why[400] = "";

		e = errno;
		if (e == EACCES || e == EPERM)
			denied_text(path, why, sizeof(why));
		else if (e == ENOENT)
			missing_text(path, why, sizeof(why));
		else if (e == ECONNREFUSED)
			snprintf(why, sizeof(why), " (is weightd running?)");
		r = wc_err_set(err, e == EACCES || e == EPERM ? WEIGHTD_E_PERMISSION_DENIED :
			       WEIGHTD_E_DISCONNECTED,
			       "cannot connect to weightd at %s: %s%s", path, strerror(e), why);
		goto fail;
	}
	r = hello(c, c->name, err);
	if (r < 0)
		goto fail;
	*ret = c;
	return 0;
fail:
	client_destroy(c);
	return r;
}

void weightd_close(weightd_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->closed = true;
	pthread_mutex_unlock(&c->mu);
	mark_dead(c, WEIGHTD_E_DISCONNECTED, "the connection to weightd at %s was closed",
		  c->path);
	pthread_mutex_lock(&c->send_mu);
	if (c->sock >= 0) {
		close(c->sock);
		c->sock = -1;
	}
	pthread_mutex_unlock(&c->send_mu);
	wc_conn_unref(c);
}

const weightd_server_info *weightd_server(const weightd_client *c)
{
	return c ? &c->info : NULL;
}

int weightd_client_fd(const weightd_client *c)
{
	return c ? c->sock : -1;
}

/* --- events ------------------------------------------------------------------------------ */

/* Keep the subscription, to say again after a reconnect (when out of memory, it is not). */
static void remember_subs(weightd_client *c, const char *const *checkpoints, size_t n)
{
	char **subs = n ? calloc(n, sizeof(*subs)) : NULL;
	size_t k = 0;

	for (; subs && k < n; k++)
		if (!(subs[k] = strdup(checkpoints[k])))
			break;
	if (n && (!subs || k < n)) {
		while (subs && k--)
			free(subs[k]);
		free(subs);
		return;
	}
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < c->n_subs; i++)
		free(c->subs[i]);
	free(c->subs);
	c->subs = subs;
	c->n_subs = n;
	pthread_mutex_unlock(&c->mu);
}

int weightd_subscribe(weightd_client *c, const char *const *checkpoints, size_t n,
		      weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Subscribe sub = WEIGHTD__SUBSCRIBE__INIT;
	Weightd__Response *resp = NULL;
	int r;

	wc_err_clear(err);
	if (!c || (n && !checkpoints))
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_subscribe: no client or no checkpoint list");
	for (size_t i = 0; i < n; i++)
		if (!checkpoints[i])
			return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					  "weightd_subscribe: checkpoint %zu is NULL", i);
	sub.n_checkpoints = n;
	sub.checkpoints = (char **)checkpoints;
	req.body_case = WEIGHTD__REQUEST__BODY_SUBSCRIBE;
	req.subscribe = &sub;
	r = wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_SUBSCRIBE, NULL, &resp, NULL, NULL, err);
	if (r == 0) {
		wd_msg_free(resp);
		remember_subs(c, checkpoints, n);
	}
	return r;
}

struct event_list {
	weightd_event_list pub;
	struct wc_event *raw;
	weightd_event *events;
};

int weightd_poll_events(weightd_client *c, int timeout_ms, weightd_event_list **ret,
			weightd_error *err)
{
	struct event_list *l;
	size_t n;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_poll_events: no client or no result pointer");
	wc_conn_wait(c, NULL, timeout_ms < 0 ? -1 : timeout_ms);
	pthread_mutex_lock(&c->mu);
	if (c->ev_count == 0 && c->dead) {
		int r = wc_err_copy(err, &c->dead_err);

		pthread_mutex_unlock(&c->mu);
		return r;
	}
	n = c->ev_count;
	l = calloc(1, sizeof(*l));
	if (l && n) {
		l->raw = calloc(n, sizeof(*l->raw));
		l->events = calloc(n, sizeof(*l->events));
	}
	if (!l || (n && (!l->raw || !l->events))) {
		pthread_mutex_unlock(&c->mu);
		if (l) {
			free(l->raw);
			free(l->events);
			free(l);
		}
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		l->raw[i] = c->events[(c->ev_head + i) % WC_MAX_EVENTS];
		memset(&c->events[(c->ev_head + i) % WC_MAX_EVENTS], 0, sizeof(struct wc_event));
		l->events[i].checkpoint = l->raw[i].checkpoint;
		l->events[i].generation = l->raw[i].generation;
		l->events[i].what = l->raw[i].what;
	}
	c->ev_head = 0;
	c->ev_count = 0;
	l->pub.dropped = c->ev_dropped;
	c->ev_dropped = 0;
	pthread_mutex_unlock(&c->mu);
	l->pub.count = n;
	l->pub.events = l->events;
	*ret = &l->pub;
	return 0;
}

void weightd_event_list_free(weightd_event_list *pub)
{
	struct event_list *l = (struct event_list *)pub;

	if (!l)
		return;
	for (size_t i = 0; i < l->pub.count; i++)
		event_clear(&l->raw[i]);
	free(l->raw);
	free(l->events);
	free(l);
}
