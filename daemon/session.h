/* session.h - one connected client: its socket queues, the weights it holds, its open requests.
 * Shared by server.c (I/O, lifecycle) and request.c (what requests do). */
#ifndef WD_SESSION_H
#define WD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "catalog.h"
#include "frame.h"
#include "weightd.pb-c.h"

struct server;
struct unitreq;

struct held {
	struct weight *w;
	uint32_t count;       /* references this client holds on w */
};

struct session {
	struct server *srv;
	struct daemon *d;
	uint64_t id;
	int fd;
	struct peer peer;
	struct event *ev_read, *ev_write;
	struct wd_inbuf *in;
	struct wd_outq *out;
	struct held *held;    /* dense, unordered */
	size_t n_held, cap_held;
	uint32_t *held_index; /* open addressing by weight id: position in held + 1, 0 = empty */
	size_t held_icap;     /* power of two, at least twice n_held */
	uint64_t held_bytes;  /* bytes of the distinct weights held */
	uint32_t protocol;    /* the version agreed in hello (0 before it) */
	uint32_t pending;     /* unit requests not yet answered */
	uint64_t pending_bytes;   /* bytes of weights those requests will add (per-client limits) */
	uint32_t pending_weights; /* weights they will add */
	struct unitreq *unitreqs;
	char **subs;          /* checkpoints subscribed to ("*" = all) */
	size_t n_subs;
	bool dead;
	bool close_after_flush;
	bool privileged;      /* uid 0 or the daemon's own uid: may reload and evict */
	struct session *next, *prev;
	struct session *dead_next;
};

/* Queue a response (ownership of fds passes, see wd_outq_push). A client whose queue grows past
 * its cap is disconnected. */
void session_send(struct session *s, const Weightd__Response *resp, const int *fds, size_t nfds);
/* Send an error response for request `id`. */
void session_send_error(struct session *s, uint64_t id, const struct wd_error *err);
/* Mark dead: stop reading, release every reference, free later from the loop. */
void session_kill(struct session *s, const char *why);

/* Record one more reference of this client on w (the cache reference is already taken). */
int session_hold(struct session *s, struct weight *w);
/* Give back one reference; false if the client holds none on w. */
bool session_release(struct session *s, struct weight *w);
struct held *session_find_held(struct session *s, uint64_t handle);

/* request.c */
void request_dispatch(struct session *s, Weightd__Request *req);
/* Orphan every unit request of a dying session: they finish without replying. */
void request_session_gone(struct session *s);

#endif
