/* SPDX-License-Identifier: Apache-2.0 */
/* unit_int.h - a unit request as the daemon holds it while it is preflighted (unit_preflight.c),
 * made and answered (unit.c): what the two files of the unit module share. Main thread only. */
#ifndef WD_UNIT_INT_H
#define WD_UNIT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "cache.h"
#include "error.h"
#include "recipe.h"
#include "session.h"
#include "unit_columns.h"

/* One output of a unit request: an entry (owner == its own index) or an alias (owner = the entry
 * it resolves to). */
struct unit_out {
	struct unit_req *u;
	char *name_copy;           /* in the request's names */
	size_t owner;
	struct weight *w;          /* entries: one reference held until the unit is answered */
	struct weight *hit;        /* entries: the cached weight the warm path found, no reference
				    * taken (valid within unit_request: nothing is evicted before the
				    * hits are held), so the later steps need not look it up again */
	struct wd_plan *plan;      /* entries, between preflight and submission (none for a warm
				    * plain entry: its key came from the memo, its weight is cached) */
	uint8_t key[32];           /* entries: the recipe key (the plan's, or the memo's) */
	uint64_t nbytes;           /* entries: the output's size */
	struct csource *source;    /* the checkpoints its plan reads: the first (most read one) */
	struct csource **more;     /* all of them, when there are several (WD_MAX_RECIPE_SOURCES) */
	size_t n_sources;
	bool memo;                 /* entries: key found in the memo (unit_memo_keys) */
};

struct unit_req {
	struct session *s;         /* NULL once the client is gone */
	struct cache *cache;
	uint64_t id;
	size_t n_entries, n_outs;
	struct unit_out *outs;
	size_t pending;
	bool failed;
	weightd_error err;
	uint64_t bytes_read;
	uint64_t new_bytes;        /* counted against the client's limits while in flight */
	uint32_t new_weights;
	uint64_t memory;           /* heap it is counted for (holds_unit_memory) while in flight */
	size_t *first;             /* per entry: the first entry with the same key (itself if none) */
	char *names;               /* every output's name, one after another: one allocation */
	LIST_ENTRY(unit_req) link; /* in its session's unitreqs while the session lasts */
};

/* An entry's sources as one array (for cache_request). */
static inline struct csource **unit_out_sources(struct unit_out *o)
{
	return o->more ? o->more : &o->source;
}

/*
 * Preflight the unit: every checkpoint it names allowed to the peer, its names copied and unique
 * and its aliases resolved (o->owner), every entry's recipe valid and its declared slot matching,
 * repeated keys found (u->first), the client's limits checked (u->new_weights, u->new_bytes). A
 * materialization's plain entries whose weights are cached take the warm path (no plan, o->hit
 * set); a preflight request always builds plans (its reply describes them). u->outs, n_entries
 * and n_outs are set by the caller. 0 or -code with err set.
 */
int unit_preflight(struct unit_req *u, struct session *s, const struct unit_columns *ue,
		   bool preflight, weightd_error *err);

/* The full preflight of one entry: its plan, key and size; a plain entry's key is remembered. */
int unit_preflight_entry(struct session *s, const struct unit_columns_entry *e, struct unit_out *o,
			 weightd_error *err);

#endif
