/* cache.h - finished weights (segments, digests, references, budget, LRU) and in-flight jobs. */
#ifndef WD_CACHE_H
#define WD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "digest.h"
#include "dtype.h"
#include "error.h"
#include "wd_limits.h"
#include "pool.h"
#include "recipe.h"
#include "segment.h"

struct daemon;

/*
 * A finished, immutable weight. refs counts every reference: each one a client holds and each one
 * an unfinished unit request has taken. A weight with refs == 0 sits on the LRU list and may be
 * evicted when the budget needs room; one with refs > 0 never is.
 */
struct weight {
	uint64_t id;                 /* the handle clients name it by */
	uint8_t key[32];
	uint8_t digest[WD_DIGEST_MAX];  /* wd_digest_len(digest_alg) bytes */
	enum wd_digest_alg digest_alg;
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint64_t nbytes;
	struct wd_segment seg;       /* ro_fd is what clients get */
	char *label;
	char source[128];            /* the checkpoint it was made from (first source) */
	uint64_t generation;
	struct csource *csource;     /* reference held while the weight lives; NULL when adopted,
				      * until a request for it names its checkpoint */
	uint32_t refs;
	uint32_t holders;            /* distinct clients holding it (maintained by sessions) */
	bool adopted;
	struct weight *lru_prev, *lru_next;
	bool in_lru;
	struct weight *key_next, *id_next;
};

/* Called on the main thread when a requested weight is ready (w has one reference taken for the
 * callee, who must cache_drop it eventually) or failed (w NULL, err set). bytes_read is what this
 * request made the daemon read: the job's reads for the request that started it, 0 for requests
 * that joined it (so the figures of all requests add up to the daemon's counter). */
typedef void (*cache_cb)(struct weight *w, const struct wd_error *err, uint64_t bytes_read,
			 void *arg);

struct cache;

struct cache *cache_new(struct daemon *d, uint64_t budget_bytes);
/* Unlinks every segment it owns (clean shutdown). Accepts NULL. */
void cache_free(struct cache *c, bool unlink_segments);

/*
 * Ask for the weight of `plan` (ownership of plan passes to the cache). sources[0..n) are the
 * catalog entries the plan reads; the cache takes its own references.
 *  - cached: returns 1 and *ret_w with a reference taken for the caller; cb is not called.
 *  - identical job in flight: joins it; returns 0 and cb runs when it finishes.
 *  - otherwise reserves the bytes (evicting unreferenced weights LRU-first), starts a job on the
 *    worker pool, returns 0.
 *  - cannot fit even after eviction: -WD_E_EXHAUSTED naming bytes needed and available; nothing
 *    is evicted then.
 */
int cache_request(struct cache *c, struct wd_plan *plan, struct csource *const *sources,
		  size_t n_sources, cache_cb cb, void *arg, struct weight **ret_w,
		  struct wd_error *err);

/* The finished weight with this key, or NULL; no reference is taken. */
struct weight *cache_find(struct cache *c, const uint8_t key[32]);
/* The finished weight with this key, with a reference taken for the caller; NULL if none. cs
 * (may be NULL): the first checkpoint the caller's plan reads, given to a re-adopted weight that
 * has none yet. */
struct weight *cache_lookup(struct cache *c, const uint8_t key[32], struct csource *cs);
/* Is a job for this key running (a request for it would join, reserving nothing)? */
bool cache_in_flight(const struct cache *c, const uint8_t key[32]);
/* Budget not held by anyone: what a reservation could get by evicting every unreferenced weight. */
uint64_t cache_room(const struct cache *c);
/* 0 if `need` more bytes would fit (evicting as needed), else -WD_E_EXHAUSTED naming `what`, the
 * bytes needed and the bytes available (err->expected / err->actual too). Evicts nothing. */
int cache_check_room(struct cache *c, uint64_t need, const char *what, struct wd_error *err);
/* Destroy every unreferenced weight whose source generation is gone (after a reload). */
uint64_t cache_drop_stale(struct cache *c);

/* Look up by handle; NULL if no such weight. */
struct weight *cache_by_id(struct cache *c, uint64_t id);

void cache_hold(struct cache *c, struct weight *w);
/* Give back a reference. At zero the weight joins the LRU list, or, when its source generation
 * is gone (removed or replaced on reload), is destroyed at once. */
void cache_drop(struct cache *c, struct weight *w);

/* Evict every unreferenced weight; returns how many, adds their bytes to *ret_bytes. */
uint64_t cache_evict_all(struct cache *c, uint64_t *ret_bytes);

/* Walk every weight (status). */
void cache_foreach(struct cache *c, void (*fn)(struct weight *w, void *arg), void *arg);

/* An in-flight materialization as status reports it. done: bytes its worker has written so far
 * (read with a relaxed atomic load; 0 while the job waits for a worker). */
struct cache_job_info {
	const uint8_t *key;
	const char *label;
	uint64_t nbytes;
	uint64_t done;
	struct csource *const *sources; /* the checkpoints it reads (who may see it) */
	size_t n_sources;
};

/* Walk every in-flight job (status); the pointers live until the main loop runs on. */
void cache_foreach_job(struct cache *c, void (*fn)(const struct cache_job_info *j, void *arg),
		       void *arg);
size_t cache_job_count(const struct cache *c);

struct state_record;
/* Take over a segment a previous run left (restart): checks its size against the record; the
 * weight starts unreferenced. 0, or a negative code when the segment cannot be used. */
int cache_adopt(struct cache *c, const struct state_record *rec);
/* Evict unreferenced weights until the budget holds (after adoption). Returns how many. */
uint64_t cache_trim(struct cache *c);

uint64_t cache_resident(const struct cache *c);   /* bytes of weights + reservations */
uint64_t cache_budget(const struct cache *c);
/* A new budget (reload): unheld weights over it are evicted at once (returns how many); held
 * ones stay, and a request that cannot fit fails as it always does. */
uint64_t cache_set_budget(struct cache *c, uint64_t budget_bytes);
uint64_t cache_count(const struct cache *c);
uint64_t cache_references(const struct cache *c);

#endif
