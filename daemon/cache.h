/* SPDX-License-Identifier: Apache-2.0 */
/* cache.h - finished weights packed in shared-memory segments (digests, references, budget, LRU,
 * idle limits) and the jobs that fill them. */
#ifndef WD_CACHE_H
#define WD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "catalog.h"
#include "digest.h"
#include "dtype.h"
#include "error.h"
#include "holdlock.h"
#include "wd_limits.h"
#include "pool.h"
#include "recipe.h"
#include "segment.h"

struct job;
struct stats;
struct weight;

LIST_HEAD(weight_list, weight);
TAILQ_HEAD(job_queue, job);

/* Most weights packed into one segment (its state record stays a few MB). */
#define CACHE_SEGMENT_MAX_WEIGHTS 16384
/* Every weight starts at a multiple of this; one of at least a page starts on a page, and one of
 * at least a huge page on a huge page, so a client maps it with PMD entries wherever the
 * segment's filesystem gives huge pages (the kernel places mappings of such files on a huge-page
 * boundary). The gap costs no memory: segments are sparse until written. */
#define CACHE_ALIGN 64
#define CACHE_PAGE 4096
#define CACHE_HUGE_PAGE (2u << 20)

/*
 * One shared-memory object holding one or many weights, each at its own aligned offset. The
 * daemon keeps one read-only fd per segment (plus the writable one while jobs fill it), and a
 * client maps each segment once. Weights of one segment all read the same set of checkpoints,
 * so mapping it never shows a client bytes it may not read. It lives while any weight in it
 * does (finished or being made); an evicted weight's whole pages are punched out meanwhile.
 */
struct cache_segment {
	uint64_t id;                 /* named on the wire (SegmentInfo.id) */
	struct wd_segment seg;       /* name, size, ro_fd (what clients get), fd while filling */
	uint64_t used;               /* packing cursor: end of the last weight placed */
	uint64_t ino;
	uint64_t huge_bytes;         /* of seg.size, in whole huge pages not punched out (0 on
				      * 4 KiB pages) */
	uint32_t n_weights;          /* finished weights in it */
	uint32_t n_jobs;             /* weights being made in it */
	uint32_t held;               /* finished weights in it that someone references */
	bool created;                /* the shm object exists (the pack that filled it ended) */
	bool adopted;
	bool idle;                   /* counted in the cache's idle segments */
	bool dirty;                  /* its state record lists an evicted weight */
	bool arena;		     /* shared by small requests (cache_pack_begin_shared): made
				      * at its full size when opened, each weight filled and added
				      * to its state record as it comes */
	bool arena_open;	     /* an arena still taking new weights (the cache's open
				      * arena of its group) */
	bool recorded;		     /* its state record exists */
	uint32_t placed;	     /* weights ever placed in it (an arena's cap) */
	/* ranges of evicted weights to punch out once the state record no longer lists them
	 * (flush_dirty), so that no record ever names bytes that are gone */
	struct wd_hold_range *punch;
	size_t n_punch, cap_punch;
	uint32_t tasks;		     /* pool tasks filling it now */
	struct csource *group[WD_MAX_RECIPE_SOURCES];   /* the checkpoints its weights read, sorted (packing, and who
				      * may see it); referenced for the segment's life. Empty when
				      * adopted: then source names them all */
	size_t n_group;
	char source[128];            /* the first checkpoint; in state records and adopted
				      * segments every one, joined by '+' (cache_seg_source) */
	uint64_t generation;
	struct weight_list weights;  /* finished weights in it, newest first (seg_link) */
	struct job_queue queued;     /* jobs waiting for the segment to be created, in the order
				      * they were placed (queue_link) */
	LIST_ENTRY(cache_segment) link;        /* the cache's segments */
	LIST_ENTRY(cache_segment) dirty_link;  /* the cache's dirty list, while dirty */
};

/*
 * A finished, immutable weight: nbytes at offset in its segment. refs counts every reference:
 * each one a client holds and each one an unfinished unit request has taken. A weight with
 * refs == 0 sits on the LRU list and may be evicted when the budget or the idle limits need it;
 * one with refs > 0 never is.
 */
struct weight {
	/* What every lookup, hold and release reads first, together at the start (a large unit
	 * looks up one weight per entry in tables of 100,000 and more: each cache line the walk
	 * touches is a miss). */
	uint8_t key[32];
	struct weight *key_next;     /* the next weight in its by-key bucket */
	uint64_t id;                 /* the handle clients name it by */
	uint32_t refs;
	uint32_t holders;            /* distinct clients holding it (maintained by sessions) */
	uint64_t nbytes;
	struct cache_segment *segment;
	uint64_t offset;
	TAILQ_ENTRY(weight) lru_link;  /* the cache's LRU list, while in_lru */
	bool in_lru;
	bool adopted;
	bool lock_held;              /* on the cache's locked list, holding a reference for a process
				      * that maps it (cache_recheck_locks) */
	enum wd_dtype dtype;
	int ndim;
	uint64_t generation;
	struct csource *csource;     /* reference held while the weight lives; NULL when adopted,
				      * until a request for it names its checkpoint */
	uint64_t shape[WD_MAX_DIMS];
	/* the rest: replies, status and records */
	uint8_t digest[WD_DIGEST_MAX];  /* wd_digest_len(digest_alg) bytes */
	enum wd_digest_alg digest_alg;
	char *label;
	LIST_ENTRY(weight) seg_link;   /* its segment's weights */
	char source[128];            /* the checkpoints it reads, joined by '+' (cache_join_sources) */
};

/*
 * Walking a large unit's weights (100,000 and more: beyond the CPU caches), each weight is a
 * wait on memory. The walks ask for the weight WEIGHT_AHEAD places on before they use one:
 * lines 1 for the first cache line (key, id, refs, nbytes), 2 adds segment, offset and LRU
 * links, 4 the shape and digest too (what a reply carries).
 */
#define WEIGHT_AHEAD 16

static inline void weight_prefetch(const struct weight *w, int lines)
{
	if (!w)
		return;
	for (int l = 0; l < lines; l++)
		__builtin_prefetch((const char *)w + 64 * l);
}

/* Called on the main thread when a requested weight is ready (w has one reference taken for the
 * callee, who must cache_drop it eventually) or failed (w NULL, err set). bytes_read is what this
 * request made the daemon read: the job's reads for the request that started it, 0 for requests
 * that joined it (so the figures of all requests add up to the daemon's counter). */
typedef void (*cache_cb)(struct weight *w, const weightd_error *err, uint64_t bytes_read,
			 void *arg);

/* What the cache needs from the daemon, given once (it never reaches into struct daemon). */
struct cache_params {
	uint64_t budget;             /* bytes of weights + reservations */
	uint64_t segment_max;        /* packing cap of one segment (a larger weight is alone) */
	uint32_t max_idle_weights;   /* weights nobody references (0: unlimited) */
	uint32_t max_idle_segments;  /* segments none of whose weights anyone references (0: any) */
	bool verify_adopted;         /* rehash re-adopted weights */
	bool check_adopted_holes;    /* drop re-adopted weights with a hole in their pages (a start
				      * after a stop that was not clean) */
	enum wd_digest_alg digest;   /* content digest of weights filled now (0: the default) */
	uint64_t max_temp;           /* recipe temporaries of running jobs (0: the budget) */
	const char *state_dir;       /* "" or NULL: no state index; borrowed for the cache's life
				      * (emptied by the daemon when the directory is unusable) */
	const char *instance;        /* shm prefix; borrowed */
	uint64_t page_bytes;         /* page size segments get (wd_segment_page_size); 0: 4096 */
	struct pool *pool;           /* NULL: jobs run inline on the calling thread (tests) */
	struct stats *stats;         /* counters to add to; borrowed */
};

struct cache;
struct cache_pack;

struct cache *cache_new(const struct cache_params *p);
/* Unlinks every segment it owns when unlink_segments (clean shutdown without a state index).
 * Accepts NULL. */
void cache_free(struct cache *c, bool unlink_segments);

/*
 * Weights asked for through one pack (one unit request, one preload) are packed together: new
 * weights that read the same checkpoints share segments of up to segment_max bytes. The
 * segments are created and their jobs started at cache_pack_end; until then nothing is filled.
 * cache_pack_begin returns NULL when out of memory (then each weight gets a segment of its own).
 */
struct cache_pack *cache_pack_begin(struct cache *c);
/* Whose request the pack serves (a uid): its jobs are served from that uid's share of the
 * workers (pool.h). Without it, weightd's own (POOL_OWNER_SELF). Accepts NULL. */
void cache_pack_owner(struct cache_pack *pack, uint32_t owner);
/*
 * A pack for a request of a few new weights (a single get): its new weights go into the cache's
 * open arena of their checkpoints, a segment shared by every such request until it is full
 * (segment_max, CACHE_SEGMENT_MAX_WEIGHTS), so a client making thousands of single gets holds a
 * few segments, not one per weight. An arena is made whole when it opens (sparse: it costs
 * memory only for the weights placed in it); a weight larger than it is alone in a segment of
 * its own. Each weight is filled as soon as its pack ends, at most ARENA_TASKS tasks at once per
 * arena: requests arriving while those run are filled together in batches. NULL when out of
 * memory.
 */
struct cache_pack *cache_pack_begin_shared(struct cache *c);
/* Create the pack's segments and start their jobs. A segment that cannot be created fails its
 * weights' callbacks right here. Frees the pack; accepts NULL. */
void cache_pack_end(struct cache *c, struct cache_pack *pack);

/*
 * Ask for the weight of `plan` (ownership of plan passes to the cache). sources[0..n) are the
 * catalog entries the plan reads; the cache takes its own references.
 *  - cached: returns 1 and *ret_w with a reference taken for the caller; cb is not called.
 *  - identical job in flight: joins it; returns 0 and cb runs when it finishes.
 *  - otherwise reserves the bytes (evicting unreferenced weights LRU-first), places the weight
 *    in a segment of `pack` (NULL: a segment of its own, started at once), returns 0.
 *  - cannot fit even after eviction: -WEIGHTD_E_RESOURCE_EXHAUSTED naming bytes needed and
 *    available; nothing is evicted then.
 */
int cache_request(struct cache *c, struct cache_pack *pack, struct wd_plan *plan,
		  struct csource *const *sources, size_t n_sources, cache_cb cb, void *arg,
		  struct weight **ret_w, weightd_error *err);

/* The finished weight with this key, or NULL; no reference is taken. */
struct weight *cache_find(struct cache *c, const uint8_t key[32]);
/* Ask ahead for what cache_find(key) will read: its bucket, and with `deep` (the bucket asked
 * for earlier) the first weight in it. A walk over 100,000 keys otherwise waits on each. */
void cache_prefetch(const struct cache *c, const uint8_t key[32], bool deep);
/* The finished weight with this key, with a reference taken for the caller; NULL if none. cs
 * (may be NULL): the first checkpoint the caller's plan reads, given to a re-adopted weight that
 * has none yet. */
struct weight *cache_lookup(struct cache *c, const uint8_t key[32], struct csource *cs);
/* cache_lookup of a weight the caller found with cache_find (no event in between). */
void cache_take(struct cache *c, struct weight *w, struct csource *cs);
/* Is a job for this key running (a request for it would join, reserving nothing)? */
bool cache_in_flight(const struct cache *c, const uint8_t key[32]);
/* Budget not held by anyone: what a reservation could get by evicting every unreferenced weight. */
uint64_t cache_room(const struct cache *c);
/* 0 if `need` more bytes would fit (evicting as needed), else -WEIGHTD_E_RESOURCE_EXHAUSTED naming
 * `what`, the bytes needed and the bytes available (err->expected / err->actual too). Evicts
 * nothing. */
int cache_check_room(struct cache *c, uint64_t need, const char *what, weightd_error *err);
/* Destroy every unreferenced weight whose source generation is gone (after a reload). */
uint64_t cache_drop_stale(struct cache *c);

void cache_hold(struct cache *c, struct weight *w);
/* Give back a reference. At zero the weight joins the LRU list (and the idle limits may evict
 * the least recently released), or, when its source generation is gone (removed or replaced on
 * reload), is destroyed at once. */
void cache_drop(struct cache *c, struct weight *w);

/* Evict every unreferenced weight; returns how many, adds their bytes to *ret_bytes. A weight a
 * process maps (a kernel lock on it) is kept and counted as held instead (cache_locked_*). */
uint64_t cache_evict_all(struct cache *c, uint64_t *ret_bytes);

/*
 * Weights that no connected client references but that some process maps: weightd learns of them
 * from the kernel's locks (holdlock.h), at re-adoption and whenever it would evict or drop one,
 * and keeps them, counted as held, until the lock is gone. cache_recheck_locks looks again at
 * up to 4,096 of them in turn (a lock test each) and lets go of the unlocked ones; returns how
 * many are still kept.
 */
uint64_t cache_recheck_locks(struct cache *c);
uint64_t cache_locked_weights(const struct cache *c);
uint64_t cache_locked_bytes(const struct cache *c);

/* The checkpoints sg's weights read, joined by '+' (the state record's "source"). When they do
 * not fit in cap, the names that fit and a '+' with no name after it: a list that names no
 * checkpoint whole, so who may see the segment is decided as for an unknown one. */
void cache_seg_source(const struct cache_segment *sg, char *out, size_t cap);
/* The names of list[0..n), joined by '+' into out; cut with a closing '+' when out is full. */
void cache_join_sources(struct csource *const *list, size_t n, char *out, size_t cap);

/* Walk every weight / segment (status). */
void cache_foreach(struct cache *c, void (*fn)(struct weight *w, void *arg), void *arg);
void cache_foreach_segment(struct cache *c, void (*fn)(struct cache_segment *s, void *arg),
			   void *arg);

/* An in-flight materialization as status reports it. done: bytes its worker has written so far
 * (read with a relaxed atomic load; 0 while the job waits for a worker). */
struct cache_job_info {
	const uint8_t *key;
	const char *label;
	uint64_t nbytes;
	uint64_t done;
	struct csource *const *sources; /* the checkpoints it reads (who may see it) */
	size_t n_sources;
	uint64_t elapsed_ms; /* since it was made (queued or running): done / elapsed is its rate */
};

/* Walk every in-flight job (status); the pointers live until the main loop runs on. */
void cache_foreach_job(struct cache *c, void (*fn)(const struct cache_job_info *j, void *arg),
		       void *arg);
size_t cache_job_count(const struct cache *c);

struct state_segment;
/* Take over a segment a previous run left (restart): opens it once, checks its size and inode
 * against the record, (verify_adopted) rehashes each weight; the weights start unreferenced.
 * Returns how many of its weights were adopted (0 or less: the segment cannot be used). */
int cache_adopt(struct cache *c, const struct state_segment *rec);
/* Evict unreferenced weights until the budget and the idle limits hold (after adoption).
 * Returns how many. */
uint64_t cache_trim(struct cache *c);

uint64_t cache_resident(const struct cache *c);   /* bytes of weights + reservations */
uint64_t cache_budget(const struct cache *c);
/* A new budget (reload): unheld weights over it are evicted at once (returns how many); held
 * ones stay, and a request that cannot fit fails as it always does. */
uint64_t cache_set_budget(struct cache *c, uint64_t budget_bytes);
/* New packing cap and idle limits (reload): segments made from now on use the cap; unheld
 * weights over the idle limits are evicted at once (returns how many). */
uint64_t cache_set_limits(struct cache *c, uint64_t segment_max, uint32_t max_idle_weights,
			  uint32_t max_idle_segments);
uint64_t cache_count(const struct cache *c);
uint64_t cache_references(const struct cache *c);
uint64_t cache_segment_count(const struct cache *c);
uint64_t cache_segment_bytes(const struct cache *c); /* sizes of the segments' objects */
/* Of those, the bytes in whole huge pages, which a filesystem that gives huge pages (page_bytes
 * 2 MiB) backs with them: a huge=within_size tmpfs gives one to every huge page of a file that
 * lies within its size once written. Whole huge pages punched out of evicted weights are not
 * counted. 0 on 4 KiB pages. */
uint64_t cache_huge_bytes(const struct cache *c);
uint64_t cache_idle_weights(const struct cache *c);
uint64_t cache_idle_segments(const struct cache *c);

#endif
