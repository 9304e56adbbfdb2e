/* SPDX-License-Identifier: Apache-2.0 */
/* seg.h - the shared-memory segments one connection holds, one fd and mapping each (seg.c). */
#ifndef WC_SEG_H
#define WC_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "holdlock.h"
#include "weightd/client.h"

/* A connection's segments by the daemon's id (opaque; its lock guards every segment's refs,
 * map and mapped). */
struct wc_seg_table;

/*
 * A shared-memory segment this client holds: one fd and at most one mapping, counted by the
 * weights in it. Segments the daemon named (id != 0) are found by id in the connection's table,
 * so each is held once however many units and weights use it; id 0 is a segment of its own.
 * Weights read id, fd, size and, once wc_seg_map succeeded, map; the rest is the table's.
 */
struct wc_seg {
	uint64_t id;
	int fd;
	uint64_t size;
	uint64_t dev, ino;
	void *map;                   /* the whole segment, once mapped */
	bool mapped;
	size_t refs;
	struct wc_seg_table *t;
	struct wc_seg *next;         /* bucket chain */
	/* The weights this process holds in it, read-locked on fd (src/holdlock.h) so that no
	 * weightd, now or after a restart, changes them: sorted by offset, disjoint, count > 0.
	 * Entered in batches (pend) and dropped in batches (drop); under the table's lock. */
	struct wc_hold *holds;
	size_t n_holds, cap_holds;
	struct wd_hold_range *pend, *drop;   /* queued holds and releases */
	size_t n_pend, cap_pend, n_drop, cap_drop;
	unsigned forks;              /* the process's fork count when the segment came */
	int swap_fd;                 /* a description weightd lent after a reconnection, to become
				      * the kept one at the next commit (-1: none) */
	bool from_before;            /* kept across a reconnection: the next fd weightd lends for it
				      * may be another description (kcmp asks only then) */
};

/* One held range of a segment: `count` weights of this process lie at [off, off + len). */
struct wc_hold {
	uint64_t off, len;
	uint32_t count;
};

/* An empty table, or NULL when out of memory. */
struct wc_seg_table *wc_seg_table_new(void);
/* Free the table (connection destruction: every segment is gone by then). Accepts NULL. */
void wc_seg_table_free(struct wc_seg_table *t);

/*
 * The segment a received fd stands for, with one reference taken: the table's, when it has
 * segment `id` already (the fd is checked to be the same object), else a new one that owns fd.
 * size: the segment's size (0: from fstat). fd is taken in every case: when the table had the
 * segment, it is closed, or with ret_spare handed back there (-1 otherwise) for the caller to
 * close once the weights it carries are locked on the table's fd (weightd locked them on this
 * one, so they are never unprotected in between).
 */
int wc_seg_get(struct wc_seg_table *t, uint64_t id, uint64_t size, int fd, struct wc_seg **ret,
	       int *ret_spare, weightd_error *err);
void wc_seg_ref(struct wc_seg *sg);
/* Drop a reference; the last one unmaps, closes and forgets the segment. Accepts NULL. */
void wc_seg_unref(struct wc_seg *sg);
/* Map the whole segment once (the weight `name` the error names needs it); 0 when mapped. */
int wc_seg_map(struct wc_seg *sg, const char *name, weightd_error *err);
/*
 * Enter bytes [off, off + len) of a mapped segment into this process's page tables, so that
 * reading them takes no page fault: MADV_POPULATE_READ, or where the kernel lacks it (EINVAL,
 * before Linux 5.14) a read of each page. Advisory: 0, or a negative errno when the kernel
 * refused part of it (the mapping is intact; what was not populated faults in when read).
 */
int wc_seg_populate(struct wc_seg *sg, uint64_t off, uint64_t len);

/*
 * Holds. A weight this process holds is read-locked on its segment's fd for as long as it holds
 * it. wc_seg_hold queues [off, off + len) (zero-length ranges are never locked) and
 * wc_seg_hold_commit enters what is queued and locks it, in as few lock calls as runs: 0, or a
 * negative weightd code (the ranges stay entered, so wc_seg_unhold undoes them as usual).
 * wc_seg_unhold queues a range to let go; wc_seg_unhold_commit counts the queued ones down (in
 * one pass however many) and unlocks what no held weight covers any more. After a fork(), a
 * segment that came before it is never unlocked: the child may map what the parent lets go, and
 * the lock lasts until every process has unmapped the segment. WEIGHTD_HOLD_LOCKS=0 in the environment turns holds off
 * (measurement only: a restart of weightd may then change what this process maps).
 */
int wc_seg_hold(struct wc_seg *sg, uint64_t off, uint64_t len);
int wc_seg_hold_commit(struct wc_seg *sg, weightd_error *err);
void wc_seg_unhold(struct wc_seg *sg, uint64_t off, uint64_t len);
void wc_seg_unhold_commit(struct wc_seg *sg);
/*
 * A new connection names segments anew (conn.c's reconnect): segs[i] is now ids[i] (0: unknown
 * to the daemon, the segment is this process's alone and is never found by id again). Every
 * segment of the table not named here becomes such a one too. Entries may repeat a segment.
 */
void wc_seg_table_rekey(struct wc_seg_table *t, struct wc_seg *const *segs, const uint64_t *ids,
			size_t n);
/* The segment `id` of the table with a reference taken, or NULL. */
struct wc_seg *wc_seg_find(struct wc_seg_table *t, uint64_t id);
/* Unlock what of [off, off + len) no held weight covers (a reply given back unread: weightd
 * locked its weights for it). */
void wc_seg_unlock_range(struct wc_seg *sg, uint64_t off, uint64_t len);
/* Are holds on (WEIGHTD_HOLD_LOCKS is not "0")? */
bool wc_seg_holds_on(void);

#endif
