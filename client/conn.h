/* SPDX-License-Identifier: Apache-2.0 */
/* conn.h - libweightd's connection: requests sent and their replies waited for (conn.c). It
 * knows nothing of what a reply carries: a request names the references its reply stands for. */
#ifndef WC_CONN_H
#define WC_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

struct wd_msg_cache;
struct wc_seg_table;
/* A request waiting for its reply (conn.c). */
struct wc_pending;

/* The daemon references reply resp stands for: how many and, with out, their handles, the reply
 * being given back (then what weightd locked for it on c's segments and no weight of this process
 * covers is unlocked too, seg.h). Called only for a reply that is not an error and came with
 * fds, before they are closed. */
typedef size_t wc_conn_refs_fn(weightd_client *c, const Weightd__Response *resp, uint64_t *out);

/* The user's reference is weightd_connect's; each inflight, unit and held daemon reference
 * takes one more. */
void wc_conn_ref(weightd_client *c);
void wc_conn_unref(weightd_client *c);
/* Blocks of units and replies, kept by the connection for the next ones. */
struct wd_msg_cache *wc_conn_msgs(const weightd_client *c);
/* The segments this client holds. */
struct wc_seg_table *wc_conn_segs(const weightd_client *c);

/*
 * Send a request. With ret_p, registers a pending entry (id assigned here) that the caller waits
 * on with wc_conn_wait and frees with wc_conn_pending_free; without, the reply is dropped when it
 * comes. refs names the references a reply to it may stand for, so a reply nobody takes (its
 * waiter gone, or refused) is given back (NULL: its fds are only closed).
 * Fails with the connection's error when it is dead, WEIGHTD_E_LIMIT_EXCEEDED when the request
 * is over the daemon's frame limit or too many are pending.
 */
int wc_conn_send(weightd_client *c, Weightd__Request *req, wc_conn_refs_fn *refs,
		 struct wc_pending **ret_p, weightd_error *err);

/*
 * Wait until p is done (p NULL: until an event is queued or the connection is dead), reading the
 * socket while no other thread does. timeout_ms: -1 forever, 0 only what is there now. Returns
 * true when the condition holds.
 */
bool wc_conn_wait(weightd_client *c, struct wc_pending *p, int timeout_ms);

/*
 * Take a finished pending's result: 0 and *ret_resp (owned by the caller) plus its fds, or
 * -code with err filled (local failure or the daemon's error reply; fds of an error reply are
 * closed). Checks the body is `body`. Frees nothing else; call wc_conn_pending_free after.
 */
int wc_conn_pending_take(struct wc_pending *p, int body, Weightd__Response **ret_resp,
			 int **ret_fds, uint32_t *ret_nfds, weightd_error *err);

/* Free a pending that is done, or mark a waiting one orphan (the reader frees it). */
void wc_conn_pending_free(weightd_client *c, struct wc_pending *p);

/* One blocking round trip: send, wait, take. */
int wc_conn_call(weightd_client *c, Weightd__Request *req, int body, wc_conn_refs_fn *refs,
		 Weightd__Response **ret_resp, int **ret_fds, uint32_t *ret_nfds,
		 weightd_error *err);

/* Tell the daemon to drop one reference per handle (no reply waited for; nothing on failure). */
void wc_conn_release(weightd_client *c, const uint64_t *handles, size_t n);

/*
 * Dispose of a reply nobody keeps: close its fds, tell the daemon to drop the references refs
 * says they stood for (none for an error reply or one without fds), free it. Any argument may
 * be NULL/0.
 */
void wc_conn_discard(weightd_client *c, wc_conn_refs_fn *refs, Weightd__Response *resp, int *fds,
		     uint32_t nfds);

/* Close fds[0..n) and free the array. */
void wc_conn_close_fds(int *fds, uint32_t n);

/*
 * Reconnection. When weightd goes away (a restart, a crash) the next call that talks to it
 * connects again (once per call; a call made while it is down fails with
 * WEIGHTD_E_DISCONNECTED as before), says hello, re-attaches every weight this process still
 * holds (they stayed intact: their kernel locks kept them, see seg.h) so that they count as its
 * own again, subscribes again, and queues one event, what "reconnected" (WEIGHTD_EVENT_*). A
 * request in flight when the connection broke fails. WEIGHTD_RECONNECT=0 in the environment
 * turns this off (every later call then fails, as before).
 */

/* A set of daemon references this process holds on one weight (weight.c's), as the connection
 * knows it to re-attach it: registered while it lives. handle and epoch change under the
 * connection's lock only (wc_conn_held_*). */
struct wc_held {
	struct wc_held *prev, *next;   /* the connection's list */
	uint64_t handle;               /* the daemon's name for it on the current connection (0:
					* not re-attached: released to nobody) */
	uint64_t epoch;                /* the connection it was taken on (wc_conn_epoch) */
	uint32_t count;                /* daemon references it stands for */
	uint8_t key[WEIGHTD_DIGEST_LEN];  /* the weight's identity */
	struct wc_seg *seg;            /* where this process maps it */
	uint64_t offset, nbytes;
};

/* Register h (its handle taken on the current connection). */
void wc_conn_held_add(weightd_client *c, struct wc_held *h);
/* Unregister h (waiting while a re-attach is under way): its handle when it may be released on
 * the current connection, else 0 (taken on one that is gone: nothing to release). */
uint64_t wc_conn_held_remove(weightd_client *c, struct wc_held *h);

#endif
