/* SPDX-License-Identifier: Apache-2.0 */
/* cache.c - weights by key and by handle, the segments they lie in, the memory budget with LRU
 * eviction and idle limits, and re-adoption (cache_pack.c and cache_job.c make new weights).
 * Main thread only. */
#include "cache.h"
#include "cache_int.h"
#include "fault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytes.h"
#include "log.h"
#include "parallel.h"
#include "sink.h"
#include "state.h"

size_t cache_key_hash(const uint8_t *key, size_t nb)
{
	uint64_t h;

	memcpy(&h, key, sizeof(h));
	return (size_t)(h % nb);
}

static uint64_t first_id(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0 || ts.tv_sec <= 0)
		return 1;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct cache *cache_new(const struct cache_params *p)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->p = *p;
	snprintf(c->instance, sizeof(c->instance), "%s", p->instance ? p->instance : "weightd");
	c->p.instance = c->instance;
	if (!c->p.state_dir)
		c->p.state_dir = "";
	if (!c->p.segment_max)
		c->p.segment_max = 4ull << 30;
	c->budget = p->budget;
	cache_temp_publish(c);
	/* Handles and segment ids start past any an earlier run of this daemon gave out (the
	 * clock's nanoseconds), so that a client still holding an old one after a restart never
	 * names another weight with it (libweightd re-attaches what it holds under new ones). */
	c->next_id = c->next_segment_id = first_id();
	c->nbuckets = 1024;
	TAILQ_INIT(&c->lru);
	TAILQ_INIT(&c->locked);
	slab_init(&c->weights, sizeof(struct weight));
	c->by_key = calloc(c->nbuckets, sizeof(*c->by_key));
	if (!p->pool)
		c->scratch_ok = wd_scratch_init(&c->scratch, WD_SCRATCH_BYTES) == 0;
	if (!c->by_key || (!p->pool && !c->scratch_ok)) {
		if (c->scratch_ok)
			wd_scratch_free(&c->scratch);
		free(c->by_key);
		free(c);
		return NULL;
	}
	return c;
}

static void rehash(struct cache *c)
{
	size_t nb = c->nbuckets * 2;
	struct weight **bk = calloc(nb, sizeof(*bk));

	if (!bk)
		return; /* keep the old, longer chains */
	for (size_t i = 0; i < c->nbuckets; i++) {
		struct weight *w, *next;
		for (w = c->by_key[i]; w; w = next) {
			size_t h = cache_key_hash(w->key, nb);
			next = w->key_next;
			w->key_next = bk[h];
			bk[h] = w;
		}
	}
	free(c->by_key);
	c->by_key = bk;
	c->nbuckets = nb;
}

struct weight *cache_weight_new(struct cache *c, const char *label)
{
	/* on a cache line of its own (the slab's objects are 64-byte aligned): the fields a lookup
	 * reads are then in one or two lines */
	struct weight *w = slab_alloc(&c->weights);

	if (!w)
		return NULL;
	w->label = strdup(label);
	if (!w->label) {
		slab_free(&c->weights, w);
		return NULL;
	}
	return w;
}

struct weight *cache_find_key(struct cache *c, const uint8_t *key)
{
	for (struct weight *w = c->by_key[cache_key_hash(key, c->nbuckets)]; w; w = w->key_next)
		if (memcmp(w->key, key, 32) == 0)
			return w;
	return NULL;
}

/* --- segments --------------------------------------------------------------------------- */

/* Idle: created, nothing being made in it, no weight in it referenced. */
void cache_seg_update_idle(struct cache *c, struct cache_segment *sg)
{
	bool idle = sg->created && sg->n_jobs == 0 && sg->held == 0 && sg->n_weights > 0;

	if (idle == sg->idle)
		return;
	sg->idle = idle;
	if (idle)
		c->idle_segments++;
	else
		c->idle_segments--;
}

struct cache_segment *cache_seg_alloc(struct cache *c)
{
	struct cache_segment *sg = calloc(1, sizeof(*sg));

	if (!sg)
		return NULL;
	sg->seg.fd = sg->seg.ro_fd = -1;
	TAILQ_INIT(&sg->queued);
	sg->id = c->next_segment_id++;
	LIST_INSERT_HEAD(&c->segments, sg, link);
	c->n_segments++;
	return sg;
}

void cache_join_sources(struct csource *const *list, size_t n, char *out, size_t cap)
{
	size_t off = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const char *name = list[i]->name;
		size_t need = strlen(name) + (i ? 1 : 0);

		if (off + need + 2 > cap) { /* room for a closing '+' and the terminator */
			snprintf(out + off, cap - off, "+");
			return;
		}
		off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? "+" : "", name);
	}
}

void cache_seg_source(const struct cache_segment *sg, char *out, size_t cap)
{
	if (sg->n_group < 2)
		snprintf(out, cap, "%s", sg->source);
	else
		cache_join_sources(sg->group, sg->n_group, out, cap);
}

/* A weight of a segment one of whose checkpoints is removed or replaced can never be asked for
 * again (its key names files the catalog no longer serves). */
static bool weight_stale(const struct weight *w)
{
	if (w->csource && w->csource->state == CSOURCE_REMOVED)
		return true;
	for (size_t i = 0; i < w->segment->n_group; i++)
		if (w->segment->group[i]->state == CSOURCE_REMOVED)
			return true;
	return false;
}

/* state_write's walk over a segment's weights: the next one, or false after the last. */
static bool seg_next_weight(void *arg, struct state_weight *sw)
{
	struct weight **at = arg, *w = *at;

	if (!w)
		return false;
	*at = LIST_NEXT(w, seg_link);
	memcpy(sw->key, w->key, 32);
	memcpy(sw->digest, w->digest, sizeof(sw->digest));
	sw->digest_alg = w->digest_alg;
	sw->dtype = w->dtype;
	sw->ndim = w->ndim;
	memcpy(sw->shape, w->shape, sizeof(sw->shape));
	sw->nbytes = w->nbytes;
	sw->offset = w->offset;
	sw->label = w->label;
	return true;
}

/* The state record of a segment: every finished weight in it. */
int cache_seg_write_state(struct cache *c, struct cache_segment *sg, weightd_error *err)
{
	struct state_segment rec;
	struct weight *at = LIST_FIRST(&sg->weights);
	int r;

	if (!c->p.state_dir[0] || !sg->created)
		return 0;
	WD_FAULT_CRASH("weightd/state/unrecorded");
	memset(&rec, 0, sizeof(rec));
	snprintf(rec.segment, sizeof(rec.segment), "%s", sg->seg.name);
	cache_seg_source(sg, rec.source, sizeof(rec.source));
	rec.generation = sg->generation;
	rec.size = sg->seg.size;
	rec.ino = sg->ino;
	r = state_write(c->p.state_dir, c->instance, &rec, seg_next_weight, &at, err);
	if (r == 0)
		sg->recorded = true;
	return r;
}

void cache_arena_record(struct cache *c, struct cache_segment *sg, struct weight *w)
{
	struct weight *at = w;
	struct state_weight sw;
	weightd_error err;

	if (!c->p.state_dir[0])
		return;
	wd_error_clear(&err);
	/* One weight appended, not the whole record rewritten: an arena takes thousands of
	 * weights one request at a time. */
	if (sg->recorded && !sg->dirty) {
		seg_next_weight(&at, &sw);
		if (state_append(c->p.state_dir, c->instance, sg->seg.name, &sw, &err) == 0)
			return;
		log_debug("%s; rewriting the record whole", err.message);
		wd_error_clear(&err);
	}
	if (cache_seg_write_state(c, sg, &err) < 0)
		log_warn("%s (its weights are served, but will be rebuilt after a restart)",
			 err.message);
}

void cache_arena_close(struct cache *c, struct cache_segment *sg)
{
	for (size_t i = 0; i < c->n_arenas; i++)
		if (c->arenas[i] == sg) {
			c->arenas[i] = c->arenas[--c->n_arenas];
			break;
		}
	sg->arena_open = false;
	/* no write access left over once nothing is being made in it (else the last job drops it) */
	if (sg->n_jobs == 0)
		wd_segment_seal(&sg->seg);
}

void cache_seg_count(struct cache *c, struct cache_segment *sg)
{
	uint64_t huge = c->p.page_bytes >= CACHE_HUGE_PAGE ? c->p.page_bytes : 0;

	sg->huge_bytes = huge ? sg->seg.size / huge * huge : 0;
	c->segment_bytes += sg->seg.size;
	c->huge_bytes += sg->huge_bytes;
}

/* The whole huge pages of [off, off + len), just punched out, are no longer counted. */
static void punched_huge(struct cache *c, struct cache_segment *sg, uint64_t off, uint64_t len)
{
	uint64_t huge = c->p.page_bytes;
	uint64_t from = (off + huge - 1) / huge * huge, to = (off + len) / huge * huge;
	uint64_t gone = to > from ? to - from : 0;

	if (gone > sg->huge_bytes)
		gone = sg->huge_bytes;
	sg->huge_bytes -= gone;
	c->huge_bytes -= gone;
}

void cache_seg_destroy(struct cache *c, struct cache_segment *sg, bool unlink_segment)
{
	if (sg->arena_open)
		cache_arena_close(c, sg);
	if (sg->idle)
		c->idle_segments--;
	if (unlink_segment && sg->created) {
		/* only a name of ours: a record that slipped through never gets a foreign name deleted */
		if (wd_segment_name_matches(c->instance, sg->seg.name))
			wd_segment_unlink(sg->seg.name);
		state_remove(c->p.state_dir, c->instance, sg->seg.name);
	}
	if (sg->created) {
		c->segment_bytes -= sg->seg.size;
		c->huge_bytes -= sg->huge_bytes;
	}
	wd_segment_close(&sg->seg);
	for (size_t i = 0; i < sg->n_group; i++)
		catalog_source_unref(sg->group[i]);
	if (sg->dirty)
		LIST_REMOVE(sg, dirty_link);
	LIST_REMOVE(sg, link);
	c->n_segments--;
	free(sg->punch);
	free(sg);
}

/* Give back the pages of the weights evicted from sg, which its record no longer lists. */
static void punch_pending(struct cache *c, struct cache_segment *sg)
{
	for (size_t i = 0; i < sg->n_punch; i++) {
		const struct wd_hold_range *r = &sg->punch[i];

		if (wd_segment_punch(&sg->seg, r->off, r->len) < 0)
			log_debug("could not punch %llu bytes at %llu out of %s",
				  (unsigned long long)r->len, (unsigned long long)r->off, sg->seg.name);
		else if (sg->huge_bytes)
			punched_huge(c, sg, r->off, r->len);
	}
	sg->n_punch = 0;
}

/*
 * Rewrite the records of segments that lost weights (once per segment per batch of evictions),
 * then punch the evicted weights out: a daemon killed in between finds a record that no longer
 * names them, never one that names bytes that are gone. A record that cannot be rewritten is
 * removed before the punch (the segment is then not re-adopted after a restart).
 */
static void flush_dirty(struct cache *c)
{
	while (!LIST_EMPTY(&c->dirty)) {
		struct cache_segment *sg = LIST_FIRST(&c->dirty);
		weightd_error err;

		LIST_REMOVE(sg, dirty_link);
		sg->dirty = false;
		wd_error_clear(&err);
		if (cache_seg_write_state(c, sg, &err) < 0) {
			log_warn("%s (segment %s will be dropped after a restart)", err.message,
				 sg->seg.name);
			state_remove(c->p.state_dir, c->instance, sg->seg.name);
			sg->recorded = false;
		}
		punch_pending(c, sg);
	}
}

/* --- weights ---------------------------------------------------------------------------- */

/* Hash a new weight by key and put it in its segment. */
void cache_insert(struct cache *c, struct weight *w)
{
	struct cache_segment *sg = w->segment;

	if (c->count + 1 > c->nbuckets)
		rehash(c);
	w->key_next = c->by_key[cache_key_hash(w->key, c->nbuckets)];
	c->by_key[cache_key_hash(w->key, c->nbuckets)] = w;
	c->count++;
	LIST_INSERT_HEAD(&sg->weights, w, seg_link);
	sg->n_weights++;
	if (w->csource)
		w->csource->stats->resident_bytes += w->nbytes;
}

static void lru_remove(struct cache *c, struct weight *w)
{
	if (!w->in_lru)
		return;
	c->evictable -= w->nbytes;
	c->idle_weights--;
	if (w->csource)
		w->csource->stats->idle_bytes -= w->nbytes;
	TAILQ_REMOVE(&c->lru, w, lru_link);
	w->in_lru = false;
}

void cache_lru_append(struct cache *c, struct weight *w)
{
	TAILQ_INSERT_TAIL(&c->lru, w, lru_link);
	w->in_lru = true;
	c->evictable += w->nbytes;
	c->idle_weights++;
	if (w->csource)
		w->csource->stats->idle_bytes += w->nbytes;
}

static void unhash(struct cache *c, struct weight *w)
{
	struct weight **pp;

	for (pp = &c->by_key[cache_key_hash(w->key, c->nbuckets)]; *pp; pp = &(*pp)->key_next)
		if (*pp == w) {
			*pp = w->key_next;
			break;
		}
}

/* Room for one more range to punch in sg; false when out of memory. */
static bool punch_room(struct cache_segment *sg)
{
	size_t ncap;
	struct wd_hold_range *np;

	if (sg->n_punch < sg->cap_punch)
		return true;
	ncap = sg->cap_punch ? 2 * sg->cap_punch : 16;
	np = realloc(sg->punch, ncap * sizeof(*np));
	if (!np)
		return false;
	sg->punch = np;
	sg->cap_punch = ncap;
	return true;
}

/*
 * Remove a weight from the cache and free it. Clients mapping its segment keep their memory.
 * When it was the segment's last weight the segment goes too; otherwise (evict) its whole pages
 * are given back at once and the segment's record is marked for rewriting.
 */
static void weight_destroy(struct cache *c, struct weight *w, bool evict)
{
	struct cache_segment *sg = w->segment;

	lru_remove(c, w);
	unhash(c, w);
	LIST_REMOVE(w, seg_link);
	sg->n_weights--;
	if (w->refs)
		sg->held--; /* cannot happen for an evicted weight; kept consistent at shutdown */
	c->resident -= w->nbytes;
	c->count--;
	if (w->csource)
		w->csource->stats->resident_bytes -= w->nbytes;
	if (sg->n_weights == 0 && sg->n_jobs == 0) {
		cache_seg_destroy(c, sg, evict);
	} else {
		if (evict && w->nbytes) {
			/* punched once the record no longer lists it (flush_dirty); at once when there
			 * is no record, or when out of memory (the record is then removed first) */
			bool queued = c->p.state_dir[0] &&
				      punch_room(sg);

			if (queued) {
				sg->punch[sg->n_punch++] = (struct wd_hold_range){ w->offset, w->nbytes };
			} else {
				if (c->p.state_dir[0]) {
					state_remove(c->p.state_dir, c->instance, sg->seg.name);
					sg->recorded = false;
				}
				if (wd_segment_punch(&sg->seg, w->offset, w->nbytes) < 0)
					log_debug("could not punch %s out of %s", w->label,
						  sg->seg.name);
				else if (sg->huge_bytes)
					punched_huge(c, sg, w->offset, w->nbytes);
			}
			if (!sg->dirty && c->p.state_dir[0]) {
				sg->dirty = true;
				LIST_INSERT_HEAD(&c->dirty, sg, dirty_link);
			}
		}
		cache_seg_update_idle(c, sg);
	}
	catalog_source_unref(w->csource);
	free(w->label);
	slab_free(&c->weights, w);
}

void cache_free(struct cache *c, bool unlink_segments)
{
	struct cache_segment *sg;

	if (!c)
		return;
	/* Names only: a weight a client still maps is never punched at shutdown, and an unlinked
	 * object lives on in every mapping of it. */
	if (unlink_segments)
		LIST_FOREACH(sg, &c->segments, link)
			if (sg->created) {
				if (wd_segment_name_matches(c->instance, sg->seg.name))
					wd_segment_unlink(sg->seg.name);
				state_remove(c->p.state_dir, c->instance, sg->seg.name);
			}
	while (!TAILQ_EMPTY(&c->locked)) {
		struct weight *w = TAILQ_FIRST(&c->locked);

		TAILQ_REMOVE(&c->locked, w, lru_link);
		w->lock_held = false;
	}
	for (size_t i = 0; i < c->nbuckets; i++)
		while (c->by_key[i])
			weight_destroy(c, c->by_key[i], false);
	while (!LIST_EMPTY(&c->segments))
		cache_seg_destroy(c, LIST_FIRST(&c->segments), false);
	if (c->scratch_ok)
		wd_scratch_free(&c->scratch);
	free(c->by_key);
	free(c->jobs_by_key);
	free(c->arenas);
	slab_fini(&c->weights);
	free(c);
}

void cache_hold(struct cache *c, struct weight *w)
{
	if (w->refs++ == 0) {
		lru_remove(c, w);
		w->segment->held++;
		cache_seg_update_idle(c, w->segment);
	}
}

/* Does a process map w (a lock over its bytes on a description not weightd's)? A lock test that
 * fails counts as a lock: keeping a weight is always safe. */
static bool weight_locked(struct cache *c, struct weight *w)
{
	int r;

	(void)c;
	if (w->nbytes == 0 || w->segment->seg.ro_fd < 0)
		return false;
	r = wd_holdlock_test(w->segment->seg.ro_fd, w->offset, w->nbytes, NULL, NULL);
	return r != 0;
}

/* Keep w, which nobody connected references but a process maps: a reference of the cache's own
 * until cache_recheck_locks finds it unlocked. */
static void lock_hold(struct cache *c, struct weight *w, const char *why)
{
	log_debug("keeping %s (%llu bytes) %s: a process maps it", w->label,
		  (unsigned long long)w->nbytes, why);
	cache_hold(c, w);
	w->lock_held = true;
	TAILQ_INSERT_TAIL(&c->locked, w, lru_link);
	c->locked_weights++;
	c->locked_bytes += w->nbytes;
}

/* Evict an unreferenced weight, unless a process maps it: then it is kept (lock_hold). True
 * when it was evicted. */
static bool evict_one(struct cache *c, struct weight *w, const char *why)
{
	if (weight_locked(c, w)) {
		lock_hold(c, w, why);
		return false;
	}
	log_info("evicting %s (%llu bytes) %s", w->label, (unsigned long long)w->nbytes, why);
	if (c->p.stats)
		c->p.stats->evictions++;
	weight_destroy(c, w, true);
	return true;
}

/* Weights looked at again per call: an engine from before a restart may hold a whole model of
 * 100,000 weights for days, and each look is a lock test on the main thread. */
#define RECHECK_PER_CALL 4096

uint64_t cache_recheck_locks(struct cache *c)
{
	uint64_t n = c->locked_weights < RECHECK_PER_CALL ? c->locked_weights : RECHECK_PER_CALL;

	/* In turn: each one looked at goes to the back while still locked, so the next call starts
	 * where this one stopped. */
	while (n-- && !TAILQ_EMPTY(&c->locked)) {
		struct weight *w = TAILQ_FIRST(&c->locked);

		TAILQ_REMOVE(&c->locked, w, lru_link);
		if (weight_locked(c, w)) {
			TAILQ_INSERT_TAIL(&c->locked, w, lru_link);
			continue;
		}
		w->lock_held = false;
		c->locked_weights--;
		c->locked_bytes -= w->nbytes;
		log_debug("%s is no longer mapped by a process weightd does not know", w->label);
		cache_drop(c, w);
	}
	return c->locked_weights;
}

uint64_t cache_locked_weights(const struct cache *c) { return c->locked_weights; }
uint64_t cache_locked_bytes(const struct cache *c) { return c->locked_bytes; }

/*
 * Keep the weights and segments nobody holds within their counts. Over the segment limit, the
 * idle segment whose weight was released longest ago goes whole (evicting only single weights
 * might empty no segment at all).
 */
uint64_t cache_enforce_idle(struct cache *c)
{
	uint64_t n = 0;

	while (c->p.max_idle_weights && c->idle_weights > c->p.max_idle_weights &&
	       !TAILQ_EMPTY(&c->lru))
		n += evict_one(c, TAILQ_FIRST(&c->lru), "(max_idle_weights)");
	while (c->p.max_idle_segments && c->idle_segments > c->p.max_idle_segments) {
		struct weight *w = TAILQ_FIRST(&c->lru);
		struct cache_segment *sg;

		while (w && !w->segment->idle)
			w = TAILQ_NEXT(w, lru_link);
		if (!w)
			break;
		sg = w->segment;
		/* every weight of an idle segment is unreferenced; one a process maps is kept (and
		 * the segment is then no longer idle) */
		for (struct weight *x = LIST_FIRST(&sg->weights), *nx; x; x = nx) {
			bool last = sg->n_weights == 1;

			nx = LIST_NEXT(x, seg_link);
			if (x->refs)
				continue;
			if (evict_one(c, x, "(max_idle_segments)")) {
				n++;
				if (last)
					break; /* the segment went with its last weight */
			}
		}
	}
	flush_dirty(c);
	return n;
}

void cache_drop(struct cache *c, struct weight *w)
{
	if (w->refs == 0) {
		log_err("internal: weight %llu released more often than held", (unsigned long long)w->id);
		return;
	}
	if (--w->refs)
		return;
	w->segment->held--;
	cache_seg_update_idle(c, w->segment);
	/* A weight of a removed source or an old generation can never be asked for again (its key
	 * names files the catalog no longer serves): give its memory back now. */
	if (weight_stale(w)) {
		if (weight_locked(c, w)) {
			lock_hold(c, w, "(its checkpoint generation is gone)");
			return;
		}
		log_debug("dropping %s: its checkpoint generation is gone", w->label);
		weight_destroy(c, w, true);
		flush_dirty(c);
		return;
	}
	cache_lru_append(c, w);
	cache_enforce_idle(c);
}

uint64_t cache_drop_stale(struct cache *c)
{
	uint64_t n = 0;
	struct weight *w = TAILQ_FIRST(&c->lru), *next;

	for (; w; w = next) {
		next = TAILQ_NEXT(w, lru_link);
		if (weight_stale(w)) {
			if (weight_locked(c, w)) {
				lock_hold(c, w, "(its checkpoint generation is gone)");
				continue;
			}
			log_debug("dropping %s: its checkpoint generation is gone", w->label);
			/* next may share w's segment but is never freed by destroying w */
			weight_destroy(c, w, true);
			n++;
		}
	}
	flush_dirty(c);
	return n;
}

uint64_t cache_room(const struct cache *c)
{
	uint64_t used = c->resident - c->evictable;

	return c->budget > used ? c->budget - used : 0;
}

/* The exhausted error: how much is wanted, how much could be had, where the rest is. */
static int exhausted(struct cache *c, uint64_t need, const char *what, weightd_error *err)
{
	uint64_t room = cache_room(c);
	char t_need[WD_BYTES_TEXT], t_room[WD_BYTES_TEXT], t_budget[WD_BYTES_TEXT],
		t_held[WD_BYTES_TEXT];

	wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
		     "resource exhausted: %s needs %s but only %s of the %s budget is free (%s is "
		     "held by clients, preloaded or being materialized); raise `budget` in "
		     "weightd.conf",
		     what, wd_bytes_text(t_need, need), wd_bytes_text(t_room, room),
		     wd_bytes_text(t_budget, c->budget),
		     wd_bytes_text(t_held, c->resident - c->evictable));
	err->expected = (int64_t)(need > INT64_MAX ? INT64_MAX : need);
	err->actual = (int64_t)room;
	return -WEIGHTD_E_RESOURCE_EXHAUSTED;
}

/*
 * Make room for `need` bytes, evicting unreferenced weights least-recently-released first. When
 * even evicting every unreferenced weight would not make room, nothing is evicted and the error
 * names the bytes needed and available.
 */
int cache_reserve(struct cache *c, uint64_t need, const char *what, weightd_error *err)
{
	if (need > cache_room(c))
		return exhausted(c, need, what, err);
	/* a weight found mapped by a process on the way is kept, and the room may then fall short */
	while (c->resident + need > c->budget && !TAILQ_EMPTY(&c->lru))
		evict_one(c, TAILQ_FIRST(&c->lru), "to make room");
	flush_dirty(c);
	if (c->resident + need > c->budget)
		return exhausted(c, need, what, err);
	c->resident += need;
	return 0;
}

/*
 * A weight re-adopted after a restart knows its checkpoint only by name. The first request that
 * matches its key (and so reads the same files) gives it the catalog entry, so that a later
 * reload replacing that checkpoint drops it like any weight of the old generation.
 */
void cache_claim_source(struct weight *w, struct csource *cs)
{
	if (w->csource || !cs)
		return;
	w->csource = cs;
	catalog_source_ref(cs);
	/* from now on it counts under its checkpoint (cache_insert and the LRU did not count it) */
	cs->stats->resident_bytes += w->nbytes;
	if (w->in_lru)
		cs->stats->idle_bytes += w->nbytes;
}

struct weight *cache_find(struct cache *c, const uint8_t key[32])
{
	return cache_find_key(c, key);
}

void cache_prefetch(const struct cache *c, const uint8_t key[32], bool deep)
{
	struct weight *const *bucket = &c->by_key[cache_key_hash(key, c->nbuckets)];

	if (!deep)
		__builtin_prefetch(bucket);
	else
		weight_prefetch(*bucket, 3); /* key, segment, shape: what a warm entry reads */
}

void cache_take(struct cache *c, struct weight *w, struct csource *cs)
{
	cache_hold(c, w);
	cache_claim_source(w, cs);
}

struct weight *cache_lookup(struct cache *c, const uint8_t key[32], struct csource *cs)
{
	struct weight *w = cache_find_key(c, key);

	if (w)
		cache_take(c, w, cs);
	return w;
}

int cache_check_room(struct cache *c, uint64_t need, const char *what, weightd_error *err)
{
	return need > cache_room(c) ? exhausted(c, need, what, err) : 0;
}

uint64_t cache_evict_all(struct cache *c, uint64_t *ret_bytes)
{
	uint64_t n = 0;

	while (!TAILQ_EMPTY(&c->lru)) {
		struct weight *w = TAILQ_FIRST(&c->lru);
		uint64_t nbytes = w->nbytes;

		if (evict_one(c, w, "(evict)")) {
			*ret_bytes += nbytes;
			n++;
		}
	}
	flush_dirty(c);
	return n;
}

void cache_foreach(struct cache *c, void (*fn)(struct weight *w, void *arg), void *arg)
{
	for (size_t i = 0; i < c->nbuckets; i++)
		for (struct weight *w = c->by_key[i]; w; w = w->key_next)
			fn(w, arg);
}

void cache_foreach_segment(struct cache *c, void (*fn)(struct cache_segment *s, void *arg),
			   void *arg)
{
	struct cache_segment *sg;

	LIST_FOREACH(sg, &c->segments, link)
		if (sg->created)
			fn(sg, arg);
}

uint64_t cache_resident(const struct cache *c) { return c->resident; }
uint64_t cache_budget(const struct cache *c) { return c->budget; }

uint64_t cache_set_budget(struct cache *c, uint64_t budget_bytes)
{
	c->budget = budget_bytes;
	cache_temp_publish(c);
	return cache_trim(c);
}

uint64_t cache_set_limits(struct cache *c, uint64_t segment_max, uint32_t max_idle_weights,
			  uint32_t max_idle_segments)
{
	c->p.segment_max = segment_max ? segment_max : c->p.segment_max;
	c->p.max_idle_weights = max_idle_weights;
	c->p.max_idle_segments = max_idle_segments;
	return cache_enforce_idle(c);
}

uint64_t cache_count(const struct cache *c) { return c->count; }
uint64_t cache_segment_count(const struct cache *c) { return c->n_segments; }
uint64_t cache_segment_bytes(const struct cache *c) { return c->segment_bytes; }
uint64_t cache_huge_bytes(const struct cache *c) { return c->huge_bytes; }
uint64_t cache_idle_weights(const struct cache *c) { return c->idle_weights; }
uint64_t cache_idle_segments(const struct cache *c) { return c->idle_segments; }

uint64_t cache_references(const struct cache *c)
{
	uint64_t n = 0;

	for (size_t i = 0; i < c->nbuckets; i++)
		for (struct weight *w = c->by_key[i]; w; w = w->key_next)
			n += w->refs;
	return n;
}

/* The content digest (algorithm alg, composed over chunks as digest.h says) of [off, off + size)
 * of a segment read through its fd (pread: nothing is mapped). */
static int range_digest(int fd, uint64_t off, uint64_t size, enum wd_digest_alg alg, uint8_t *out)
{
	struct wd_content h;
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	uint64_t done = 0;
	int r = -WEIGHTD_E_IO;

	if (!buf || wd_content_init(&h, alg) < 0) {
		free(buf);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	while (done < size) {
		size_t want = size - done < cap ? (size_t)(size - done) : cap;
		ssize_t n = pread(fd, buf, want, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			wd_content_abort(&h);
			goto out;
		}
		wd_content_update(&h, buf, (size_t)n);
		done += (uint64_t)n;
	}
	wd_content_final(&h, out);
	r = 0;
out:
	free(buf);
	return r;
}

/*
 * A re-adopted segment's huge pages, counted whole by cache_seg_count, are only those its weights
 * reach: one a previous run filled one weight at a time (an arena) is sparse past its last.
 */
static void adopted_huge(struct cache *c, struct cache_segment *sg)
{
	uint64_t h = c->p.page_bytes, end = 0, reach;
	const struct weight *w;

	if (h < CACHE_HUGE_PAGE)
		return;
	LIST_FOREACH(w, &sg->weights, seg_link)
	{
		if (w->offset + w->nbytes > end)
			end = w->offset + w->nbytes;
	}
	reach = (end + h - 1) / h * h;
	if (reach < sg->huge_bytes) {
		c->huge_bytes -= sg->huge_bytes - reach;
		sg->huge_bytes = reach;
	}
}

/*
 * Has [off, off + len) of the segment a hole: pages never written or punched out? Written pages
 * are data on a tmpfs (zeros written too), so a weight whose record outlived its bytes shows one,
 * for the price of a seek instead of a read of every byte.
 */
static bool has_hole(int fd, uint64_t off, uint64_t len)
{
	off_t h;

	if (len == 0)
		return false;
	h = lseek(fd, (off_t)off, SEEK_HOLE);
	return h < 0 || (uint64_t)h < off + len;
}

/* The digests of a record's weights checked side by side (verify_adopted, or a start after a
 * stop that was not clean): a node's worth of weights is read once, on every CPU. */
struct verify {
	int fd;
	const struct state_segment *rec;
	bool *ok;
};

static bool verify_one(void *arg, size_t i)
{
	const struct verify *v = arg;
	const struct state_weight *sw = &v->rec->weights[i];
	uint8_t digest[WD_DIGEST_MAX];

	/* a record keeps the algorithm it was hashed with, whatever the config says now */
	v->ok[i] = range_digest(v->fd, sw->offset, sw->nbytes, sw->digest_alg, digest) == 0 &&
		   memcmp(digest, sw->digest, wd_digest_len(sw->digest_alg)) == 0;
	return true;
}

int cache_adopt(struct cache *c, const struct state_segment *rec)
{
	struct cache_segment *sg;
	weightd_error err;
	struct stat st;
	bool *ok = NULL;
	int took = 0;

	sg = cache_seg_alloc(c);
	if (!sg)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	wd_error_clear(&err);
	/* The index vouches for this name: same size, and (when recorded) the very inode it filled. */
	if (wd_segment_adopt(rec->segment, &sg->seg, &err) < 0 || sg->seg.size != rec->size ||
	    (rec->ino && (fstat(sg->seg.ro_fd, &st) < 0 || (uint64_t)st.st_ino != rec->ino))) {
		if (err.code == WEIGHTD_E_RESOURCE_EXHAUSTED)
			log_warn("not re-adopting %s: %s", rec->segment, err.message);
		cache_seg_destroy(c, sg, false);
		return -WEIGHTD_E_SOURCE_CHANGED;
	}
	sg->ino = rec->ino;
	sg->created = true;
	sg->adopted = true;
	sg->used = sg->seg.size;
	cache_seg_count(c, sg);
	snprintf(sg->source, sizeof(sg->source), "%s", rec->source);
	sg->generation = rec->generation;
	if (c->p.verify_adopted && rec->n_weights) {
		struct verify v = { sg->seg.ro_fd, rec, calloc(rec->n_weights, sizeof(bool)) };

		ok = v.ok;
		if (!ok) {
			cache_seg_destroy(c, sg, false);
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		}
		wd_parallel_for(rec->n_weights, wd_parallel_width(), verify_one, &v);
	}
	for (size_t i = 0; i < rec->n_weights; i++) {
		const struct state_weight *sw = &rec->weights[i];
		struct weight *w;

		if (cache_find_key(c, sw->key))
			continue;
		if (ok && !ok[i]) {
			log_warn("not re-adopting %s from %s: its bytes do not have the recorded %s "
				 "digest", sw->label, rec->segment, wd_digest_name(sw->digest_alg));
			continue;
		}
		if (!ok && c->p.check_adopted_holes && has_hole(sg->seg.ro_fd, sw->offset, sw->nbytes)) {
			log_warn("not re-adopting %s from %s: part of its bytes are gone (a hole in its "
				 "pages)", sw->label, rec->segment);
			continue;
		}
		w = cache_weight_new(c, sw->label);
		if (!w)
			break;
		w->id = c->next_id++;
		memcpy(w->key, sw->key, 32);
		memcpy(w->digest, sw->digest, sizeof(w->digest));
		w->digest_alg = sw->digest_alg;
		w->dtype = sw->dtype;
		w->ndim = sw->ndim;
		memcpy(w->shape, sw->shape, sizeof(w->shape));
		w->nbytes = sw->nbytes;
		w->segment = sg;
		w->offset = sw->offset;
		snprintf(w->source, sizeof(w->source), "%s", rec->source);
		w->generation = rec->generation;
		w->adopted = true;
		cache_insert(c, w);
		c->resident += w->nbytes;
		/* a process from before the restart may still map it: then it stays held */
		if (weight_locked(c, w))
			lock_hold(c, w, "(re-adopted)");
		else
			cache_lru_append(c, w);
		if (c->p.stats)
			c->p.stats->readoptions++;
		took++;
	}
	free(ok);
	if (took == 0) {
		cache_seg_destroy(c, sg, false);
		return 0;
	}
	adopted_huge(c, sg);
	cache_seg_update_idle(c, sg);
	if ((size_t)took != rec->n_weights && c->p.state_dir[0] && !sg->dirty) {
		sg->dirty = true; /* the record lists weights that were not taken */
		LIST_INSERT_HEAD(&c->dirty, sg, dirty_link);
	}
	return took;
}

uint64_t cache_trim(struct cache *c)
{
	uint64_t n = 0;

	while (c->resident > c->budget && !TAILQ_EMPTY(&c->lru))
		n += evict_one(c, TAILQ_FIRST(&c->lru), "(over the budget after re-adoption)");
	n += cache_enforce_idle(c);
	flush_dirty(c);
	return n;
}
