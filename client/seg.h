/* SPDX-License-Identifier: Apache-2.0 */
/* seg.h - the shared-memory segments one connection holds, one fd and mapping each (seg.c). */
#ifndef WC_SEG_H
#define WC_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
};

/* An empty table, or NULL when out of memory. */
struct wc_seg_table *wc_seg_table_new(void);
/* Free the table (connection destruction: every segment is gone by then). Accepts NULL. */
void wc_seg_table_free(struct wc_seg_table *t);

/*
 * The segment a received fd stands for, with one reference taken: the table's, when it has
 * segment `id` already (the fd is checked to be the same object, then closed), else a new one
 * that owns fd. size: the segment's size (0: from fstat). fd is taken in every case.
 */
int wc_seg_get(struct wc_seg_table *t, uint64_t id, uint64_t size, int fd, struct wc_seg **ret,
	       weightd_error *err);
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

#endif
