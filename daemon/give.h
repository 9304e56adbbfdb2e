/* SPDX-License-Identifier: Apache-2.0 */
/* give.h - the segment fds a reply hands a client: an open file description of the client's own
 * per segment, read-locked over the reply's weights in it (give.c; the contract: holdlock.h). */
#ifndef WD_GIVE_H
#define WD_GIVE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct cache_segment;

/* Entry i of a reply: the index of its segment in the reply, and the range of its weight. */
typedef void give_entry_fn(void *arg, size_t i, uint32_t *ret_seg, uint64_t *ret_off,
			   uint64_t *ret_len);

/*
 * fds[k] for each of segs[0..n): a new read-only description of that segment, read-locked over
 * the ranges of the entries entry() places in it (in runs, holdlock.h). 0 with every fds[k] the
 * caller's to send (owned), or a negative weightd code with err set and no fd left open.
 */
int give_fds(struct cache_segment *const *segs, size_t n, size_t n_entries, give_entry_fn *entry,
	     void *arg, int *fds, weightd_error *err);

#endif
