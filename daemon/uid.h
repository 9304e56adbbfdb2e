/* SPDX-License-Identifier: Apache-2.0 */
/* uid.h - per-uid accounting: what all connections of one uid hold, the per-uid limits on what
 * pins daemon fds, and the fair share of the main thread between uids. Main thread only. */
#ifndef WD_UID_H
#define WD_UID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/time.h>
#include <sys/types.h>

struct config;
struct event_base;
struct uid_table;

/*
 * What all connections of one uid hold. The table keeps one per connected uid. Each counter is
 * kept by the one module that changes what it counts: partial, queued_fds, lingering and
 * refusals_logged by session.c (its queues); segments, weights, pending and the bytes by
 * holds.c; the fair-share fields by uid.c.
 */
struct uid_usage {
	struct uid_table *table; /* NULL outside a table (unit tests): limits as configured */
	uid_t uid;
	bool exempt; /* takes no share: root or weightd's user where they administer */
	uint32_t conns;
	uint64_t partial;   /* bytes of frames being received */
	size_t queued_fds;  /* fds queued in replies, in our queues and the sockets' */
	uint32_t lingering; /* refused connections kept open so they can read why */
	uint64_t segments;  /* segments held: each connection's distinct ones, summed */
	uint64_t weights;   /* references held over its connections: a weight twice counts twice */
	uint64_t pending;   /* unit requests in flight over its connections */
	uint64_t bytes;	    /* bytes of weights held: each connection's distinct ones, summed */
	uint64_t pending_bytes; /* bytes its unit requests in flight will add */
	uint64_t unit_memory;	/* heap its unit requests being planned or made are counted for */
	uint32_t refusals_logged;
	uint64_t active_ns;	 /* when it last sent a request (wd_clock_ns) */
	uint64_t active_busy_ns; /* the table's busy_ns then */
	/* the loop's time (libevent's, per pass) of its last expensive request */
	struct timeval gate;
	uint64_t heavy_ns;	/* when that request ended (wd_clock_ns) */
	uint64_t busy_until_ns; /* it takes no request before this, for others' share of the loop */
	LIST_ENTRY(uid_usage) link; /* in the table's list of uids */
};

/*
 * The uids of one server: cfg (its uid_max_* keys) and base (whose cached time marks a pass of
 * the loop) must outlive the table. Reads RLIMIT_NOFILE now and warns about every per-uid limit
 * it cuts (uid_max_segments). NULL when out of memory.
 */
struct uid_table *uid_table_new(struct event_base *base, const struct config *cfg);
/* Free the table and every record left in it (those kept for their debt). Accepts NULL. */
void uid_table_free(struct uid_table *t);

/* The record of `uid` with one more connection counted (made on its first). An exempt record
 * (privileged connections: root and weightd's user on the admin socket, or on the one socket of
 * single_socket) is kept apart from the same uid's ordinary one, so root on the engine socket
 * takes a share like any uid. NULL when out of memory. */
struct uid_usage *uid_get(struct uid_table *t, uid_t uid, bool exempt);
/* One connection of uu less. Its last connection gone, the record goes too, unless it still owes
 * others their share of the main thread: then it stays (swept by uid_sweep), so reconnecting does
 * not wipe the debt. Accepts NULL. */
void uid_put(struct uid_usage *uu);
/* Free the records of uids with no connection left whose debt is paid. */
void uid_sweep(struct uid_table *t);

/* How many uids have requests being received (at least 1): the share of max_partial each may
 * count on when the total is reached. Linear in the uids connected; called only then. Accepts
 * NULL (1). */
size_t uid_receiving(const struct uid_table *t);

/* The per-uid limits on what pins daemon fds, as enforced for uu now: each configured value cut
 * to uu's share of the daemon's RLIMIT_NOFILE at start, which shrinks as more uids connect and
 * keeps one share for a uid not yet seen (uid.c says how it is shared). O(1). As configured
 * (cfg) when uu is NULL or in no table. */
uint64_t uid_max_segments(const struct uid_usage *uu, const struct config *cfg);
uint64_t uid_max_queue_fds(const struct uid_usage *uu, const struct config *cfg);
uint64_t uid_max_pending(const struct uid_usage *uu, const struct config *cfg);

/* How many uids share the fds as uu sees it (itself included; at least 1): what its limits
 * above are divided by. 1 for NULL. */
uint32_t uid_sharers(const struct uid_usage *uu);

/* The three as this process's RLIMIT_NOFILE cuts them for a uid alone, as one line for
 * --check-config. */
void uid_limits_text(const struct config *cfg, char *buf, size_t cap);

/* A request of uu's took `spent` ns of the main thread, ending at `now`: charge it. */
void uid_charge(struct uid_usage *uu, uint64_t now, uint64_t spent);
/* False from an expensive request of uu's until the loop has polled its sockets again: none of
 * its sessions takes a request meanwhile (each looks again after the poll). True for NULL. */
bool uid_polled(const struct uid_usage *uu);
/* uu had an expensive request lately (what it sends waits for the pass's other sockets). */
bool uid_heavy(const struct uid_usage *uu, uint64_t now);
/* uu sent something at `now`: it counts as active (uid_charge) from then. */
void uid_touch(struct uid_usage *uu, uint64_t now);
/* How long uu's connections must still wait before their next request (0: none). */
uint64_t uid_wait_ns(const struct uid_usage *uu, uint64_t now);

#endif
