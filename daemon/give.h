/* SPDX-License-Identifier: Apache-2.0 */
/* give.h - the segment fds a reply hands a client: an open file description of the client's own
 * per segment, read-locked over the reply's weights in it (give.c; the contract: holdlock.h). */
#ifndef WD_GIVE_H
#define WD_GIVE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct cache_segment;
struct holds;

/* Entry i of a reply: the index of its segment in the reply, and the range of its weight. */
typedef void give_entry_fn(void *arg, size_t i, uint32_t *ret_seg, uint64_t *ret_off,
			   uint64_t *ret_len);

/*
 * fds[k] for each of segs[0..n): the client's own read-only description of that segment (the
 * one its holds keep, holds_segment_fd: borrowed, to send as such), read-locked over the ranges
 * of the entries entry() places in it (in runs, holdlock.h). 0, or a negative weightd code with
 * err set.
 */
int give_fds(struct holds *h, struct cache_segment *const *segs, size_t n, size_t n_entries,
	     give_entry_fn *entry, void *arg, int *fds, weightd_error *err);

#endif
