/* SPDX-License-Identifier: Apache-2.0 */
/* cache_int.h - what the cache's files share: cache.c (weights, segments, budget), cache_pack.c
 * (requests, placing new weights in segments) and cache_job.c (the jobs that make them). Not for
 * other modules. */
#ifndef WD_CACHE_INT_H
#define WD_CACHE_INT_H

#include "cache.h"
#include "fill.h"
#include "sink.h"
#include "slab.h"
#include "stats.h"

/* The segments one pack is filling: the open one of each group of checkpoints. */
struct cache_pack {
	uint32_t owner; /* whose share of the workers its jobs are (pool.h) */
	struct cache_segment **open;
	size_t n_open, cap_open;
	struct cache_segment **all;  /* every segment this pack made, to create at the end */
	size_t n_all, cap_all;
	bool shared;		       /* new weights go into the cache's arenas */
	struct cache_segment **arenas; /* the arenas it placed weights in, started at the end */
	size_t n_arenas, cap_arenas;
	uint64_t shm_avail;   /* /dev/shm free when its first arena weight was placed */
	uint64_t shm_claimed; /* what its arena weights will take of it */
	bool shm_checked;
};

/* Tasks filling one arena at once; its other jobs wait on it and go in batches. */
#define ARENA_TASKS 2

struct cache {
	struct cache_params p;
	char instance[80];
	struct wd_scratch scratch;   /* jobs run inline when there is no pool */
	bool scratch_ok;
	uint64_t budget;
	uint64_t resident;           /* finished weights + reservations of running jobs */
	uint64_t evictable;          /* bytes of the weights on the LRU list (nobody holds them) */
	uint64_t idle_weights;       /* weights on the LRU list */
	uint64_t idle_segments;
	uint64_t temp_used;          /* recipe temporaries of the jobs in flight */
	uint64_t count;
	uint64_t next_id;
	uint64_t next_segment_id;
	uint64_t n_segments, segment_bytes;
	uint64_t huge_bytes;         /* sum of the segments' huge_bytes */
	size_t nbuckets;
	struct weight **by_key;
	LIST_HEAD(, cache_segment) segments;  /* newest first */
	LIST_HEAD(, cache_segment) dirty;     /* records to rewrite (cache_segment.dirty) */
	struct cache_segment **arenas;	      /* the open arena of each group: few, scanned */
	size_t n_arenas, cap_arenas;
	LIST_HEAD(, job) jobs;       /* in flight, newest first, for walking them */
	struct job **jobs_by_key;    /* job_buckets chains; NULL until the first job */
	size_t job_buckets, job_count;
	TAILQ_HEAD(, weight) lru;    /* first = least recently released */
	/* Weights some process maps, as the kernel's locks on them say (holdlock.h), that weightd
	 * would otherwise have evicted or dropped: each holds a reference of the cache's own until
	 * cache_recheck_locks finds it unlocked (linked through lru_link). */
	TAILQ_HEAD(, weight) locked;
	uint64_t locked_weights, locked_bytes;
	struct slab weights;         /* every struct weight (slab.h: why not malloc) */
};

/* Tell the workers' input stages (fill_stage_room) what max_temp leaves after the running
 * recipes' temporaries: called after either changes. */
static inline void cache_temp_publish(const struct cache *c)
{
	uint64_t limit = c->p.max_temp ? c->p.max_temp : c->budget;

	fill_stage_room(limit > c->temp_used ? limit - c->temp_used : 0);
}

size_t cache_key_hash(const uint8_t *key, size_t nb);
/* A zeroed weight from c's slab, its label a copy of `label` (both freed by weight_destroy). */
struct weight *cache_weight_new(struct cache *c, const char *label);
struct weight *cache_find_key(struct cache *c, const uint8_t *key);
/* Recount whether a segment is idle (created, nothing being made, no weight referenced). */
void cache_seg_update_idle(struct cache *c, struct cache_segment *sg);
/* A new segment object (no shm object yet), linked and numbered. */
struct cache_segment *cache_seg_alloc(struct cache *c);
/* Write (replace) the state record of a created segment: every finished weight in it. */
int cache_seg_write_state(struct cache *c, struct cache_segment *sg, weightd_error *err);
/* Free a segment; with unlink_segment also its shm object and its state record. */
void cache_seg_destroy(struct cache *c, struct cache_segment *sg, bool unlink_segment);
/* Hash a finished weight and add it to its segment. */
void cache_insert(struct cache *c, struct weight *w);
void cache_lru_append(struct cache *c, struct weight *w);
/* Evict least recently released weights while over the idle limits; returns how many. */
uint64_t cache_enforce_idle(struct cache *c);
/* Reserve need bytes of budget, evicting LRU-first; -WEIGHTD_E_RESOURCE_EXHAUSTED (nothing evicted)
 * if it cannot fit. */
int cache_reserve(struct cache *c, uint64_t need, const char *what, weightd_error *err);
/* Give a re-adopted weight its catalog entry (a reference) when it has none. */
void cache_claim_source(struct weight *w, struct csource *cs);
/* Add w, just finished in arena sg, to sg's state record (the whole record when there is none
 * yet), before anyone is answered. */
void cache_arena_record(struct cache *c, struct cache_segment *sg, struct weight *w);
/* Take sg out of the open arenas: it takes no new weight, and is sealed once nothing is being
 * made in it. */
void cache_arena_close(struct cache *c, struct cache_segment *sg);

/* cache_job.c */
struct job;
/* The job in flight making the weight of this key, or NULL. */
struct job *cache_job_find(const struct cache *c, const uint8_t *key);
/* Another request, of `owner`, waits for j: cb runs with the others' when j finishes. A job
 * still queued moves to that owner's share of the workers if it would start sooner there. 0, or
 * -WEIGHTD_E_RESOURCE_EXHAUSTED. */
int cache_job_join(struct cache *c, struct job *j, uint32_t owner, cache_cb cb, void *arg);
/* A job for plan (taken), reading n_sources checkpoints; NULL when out of memory (plan not
 * taken). Neither linked nor queued until cache_job_queue. */
struct job *cache_job_new(struct cache *c, struct wd_plan *plan, size_t n_sources);
/* Free a job cache_job_queue never took, and its plan. */
void cache_job_free(struct job *j);
/* What j makes, e.g. "model:layers.0.q" (wd_plan_label), valid while j lives. */
const char *cache_job_label(const struct job *j);
/* j's weight goes at offset of sg, for the request cb/arg of `owner` (its bytes and temporaries
 * reserved by the caller): j references sources[0..n_sources), is in flight (found by key) and
 * queued on sg until sg is created and its jobs start (cache_job_start), in owner's share of
 * the workers. */
void cache_job_queue(struct cache *c, struct job *j, struct csource *const *sources,
		     size_t n_sources, struct cache_segment *sg, uint64_t offset, uint32_t owner,
		     cache_cb cb, void *arg);
/* Start queued jobs of arena sg while fewer than ARENA_TASKS tasks fill it (the small ones that
 * follow each other in batches), after a pack of `owner` queued jobs on it. */
void cache_job_kick(struct cache *c, struct cache_segment *sg, uint32_t owner);
/* Start the queued jobs of the created segments sgs[0..n), one task of each in turn. */
void cache_job_start(struct cache *c, struct cache_segment **sgs, size_t n);
/* sg could not be created: every job queued on it fails with err (callbacks run here), and sg
 * is destroyed when nothing else uses it. */
void cache_job_fail_queued(struct cache *c, struct cache_segment *sg, const weightd_error *err);

/* A created or adopted segment of seg.size bytes is counted in segment_bytes and huge_bytes. */
void cache_seg_count(struct cache *c, struct cache_segment *sg);

#endif
