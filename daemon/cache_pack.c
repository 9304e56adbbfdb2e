/* SPDX-License-Identifier: Apache-2.0 */
/* cache_pack.c - asking for a weight (cache_request): found, joined to the job making it, or
 * placed as a new weight in a segment of its request's pack, whose segments are created and
 * whose jobs start (cache_job.c) when the pack ends. Main thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bytes.h"
#include "cache_int.h"
#include "fill.h"
#include "log.h"

/* The segments' filesystem has no room for `what`: say how much it has left, in the structured
 * fields too. */
static void shm_error(const char *what, uint64_t need, uint64_t avail, weightd_error *err)
{
	char t_need[WD_BYTES_TEXT], t_avail[WD_BYTES_TEXT];

	wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
		     "resource exhausted: %s needs %s of shared memory but %s has only %s "
		     "free; free or enlarge %s (its tmpfs size=)",
		     what, wd_bytes_text(t_need, need), wd_segment_dir(),
		     wd_bytes_text(t_avail, avail), wd_segment_dir());
	err->expected = (int64_t)need;
	err->actual = (int64_t)avail;
}

/* The segments' filesystem has no room for a segment of a pack. */
static void shm_full_error(const struct cache_segment *sg, uint64_t avail, weightd_error *err)
{
	/* the newest weight placed in it */
	const struct job *j = TAILQ_LAST(&sg->queued, job_queue);
	char what[600];

	if (sg->n_jobs == 1)
		snprintf(what, sizeof(what), "%s", cache_job_label(j));
	else
		snprintf(what, sizeof(what), "a segment of %zu weights (%s and others)",
			 (size_t)sg->n_jobs, cache_job_label(j));
	shm_error(what, sg->used, avail, err);
}

struct cache_pack *cache_pack_begin(struct cache *c)
{
	struct cache_pack *pk = calloc(1, sizeof(*pk));

	(void)c;
	if (pk)
		pk->owner = POOL_OWNER_SELF;
	return pk;
}

void cache_pack_owner(struct cache_pack *pack, uint32_t owner)
{
	if (pack)
		pack->owner = owner;
}

struct cache_pack *cache_pack_begin_shared(struct cache *c)
{
	struct cache_pack *pk = cache_pack_begin(c);

	if (pk)
		pk->shared = true;
	return pk;
}

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;

	return x < y ? -1 : x > y;
}

static bool same_group(const struct cache_segment *sg, struct csource *const *g, size_t n)
{
	return sg->n_group == n && memcmp(sg->group, g, n * sizeof(*g)) == 0;
}

/* sources[0..n) in the order groups are compared in. */
static void sorted_group(struct csource *const *sources, size_t n, struct csource **g)
{
	memcpy(g, sources, n * sizeof(*g));
	qsort(g, n, sizeof(*g), ptr_cmp);
}

static uint64_t align_for(uint64_t off, uint64_t nbytes)
{
	uint64_t a = nbytes >= CACHE_HUGE_PAGE ? CACHE_HUGE_PAGE :
		     nbytes >= CACHE_PAGE      ? CACHE_PAGE :
						 CACHE_ALIGN;

	return (off + a - 1) / a * a;
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	void *p;
	size_t ncap;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 8;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	*arr = p;
	*cap = ncap;
	return 0;
}

/*
 * Where a new weight of `nbytes` reading `sources` goes: the pack's open segment of the same
 * checkpoints when it has room (under segment_max and CACHE_SEGMENT_MAX_WEIGHTS), else a new
 * one, which becomes the open segment of that group. A weight over segment_max is alone in
 * its segment. The groups open in one pack are few (one per set of checkpoints a unit reads),
 * so they are scanned.
 */
static struct cache_segment *pack_place(struct cache *c, struct cache_pack *pk,
					struct csource *const *sources, size_t n_sources,
					uint64_t nbytes, uint64_t *ret_off)
{
	struct csource *g[WD_MAX_RECIPE_SOURCES];
	struct cache_segment *sg = NULL;
	size_t slot = SIZE_MAX;
	uint64_t off;

	sorted_group(sources, n_sources, g);
	for (size_t i = 0; i < pk->n_open; i++)
		if (same_group(pk->open[i], g, n_sources)) {
			slot = i;
			sg = pk->open[i];
			break;
		}
	if (sg) {
		off = align_for(sg->used, nbytes);
		if (off + nbytes <= c->p.segment_max && off + nbytes >= off &&
		    sg->n_jobs < CACHE_SEGMENT_MAX_WEIGHTS) {
			sg->used = off + nbytes;
			*ret_off = off;
			return sg;
		}
	}
	if (grow((void **)&pk->all, &pk->cap_all, pk->n_all, sizeof(*pk->all)) < 0 ||
	    (slot == SIZE_MAX &&
	     grow((void **)&pk->open, &pk->cap_open, pk->n_open, sizeof(*pk->open)) < 0))
		return NULL;
	sg = cache_seg_alloc(c);
	if (!sg)
		return NULL;
	memcpy(sg->group, g, n_sources * sizeof(*g));
	sg->n_group = n_sources;
	for (size_t i = 0; i < n_sources; i++)
		catalog_source_ref(g[i]); /* given back in cache_seg_destroy */
	if (n_sources) {
		snprintf(sg->source, sizeof(sg->source), "%s", sources[0]->name);
		sg->generation = sources[0]->generation;
	}
	sg->used = nbytes;
	pk->all[pk->n_all++] = sg;
	if (slot == SIZE_MAX)
		pk->open[pk->n_open++] = sg;
	else
		pk->open[slot] = sg;
	*ret_off = 0;
	return sg;
}

/* An arena's size: segment_max, but no more than the budget can ever fill, in whole 2 MiB
 * pages. Fixed while it lives: clients map it whole, once. */
static uint64_t arena_size(const struct cache *c)
{
	const uint64_t huge = 2u << 20;
	uint64_t s = c->p.segment_max;

	if (c->budget && c->budget < s)
		s = c->budget;
	return s > UINT64_MAX - huge ? s : (s + huge - 1) / huge * huge;
}

/*
 * An arena is sparse: only the huge pages its weights reach are backed (a huge=within_size tmpfs
 * gives a huge page to every one written within the file's size), so they are counted as its
 * weights come, up to `used` (cache_seg_count counts a segment whole).
 */
static void arena_count_huge(struct cache *c, struct cache_segment *sg, uint64_t used)
{
	uint64_t h = c->p.page_bytes, from, to;

	if (h < CACHE_HUGE_PAGE || used <= sg->used)
		return;
	from = (sg->used + h - 1) / h * h;
	to = (used + h - 1) / h * h;
	if (to > sg->seg.size)
		to = sg->seg.size / h * h;
	if (to > from) {
		sg->huge_bytes += to - from;
		c->huge_bytes += to - from;
	}
}

/* A new open arena for group g[0..n) (sorted): made now, at its full size, sparse. */
static struct cache_segment *arena_open(struct cache *c, struct csource *const *g, size_t n,
					weightd_error *err)
{
	struct cache_segment *sg;
	struct stat st;

	if (grow((void **)&c->arenas, &c->cap_arenas, c->n_arenas, sizeof(*c->arenas)) < 0 ||
	    !(sg = cache_seg_alloc(c))) {
		wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	memcpy(sg->group, g, n * sizeof(*g));
	sg->n_group = n;
	for (size_t i = 0; i < n; i++)
		catalog_source_ref(g[i]); /* given back in cache_seg_destroy */
	if (n) {
		snprintf(sg->source, sizeof(sg->source), "%s", g[0]->name);
		sg->generation = g[0]->generation;
	}
	if (wd_segment_create_sparse(c->instance, arena_size(c), &sg->seg, err) < 0) {
		log_warn("%s", err->message);
		cache_seg_destroy(c, sg, false);
		return NULL;
	}
	if (fstat(sg->seg.ro_fd, &st) == 0)
		sg->ino = (uint64_t)st.st_ino;
	sg->created = true;
	sg->arena = sg->arena_open = true;
	c->segment_bytes += sg->seg.size;
	c->arenas[c->n_arenas++] = sg;
	log_debug("opened arena %s (%llu bytes) for %s", sg->seg.name,
		  (unsigned long long)sg->seg.size, sg->source);
	return sg;
}

/*
 * Where a new weight of a shared pack goes: the open arena of its checkpoints when it has room,
 * else a new arena (the full one is closed). 0 with *ret_sg and *ret_off; 1 when the weight is
 * larger than an arena (the caller gives it a segment of its own); or an error: /dev/shm has no
 * room for it (checked once per pack, as for other packs), or no arena could be made.
 */
static int arena_place(struct cache *c, struct cache_pack *pk, struct csource *const *sources,
		       size_t n_sources, uint64_t nbytes, const char *label,
		       struct cache_segment **ret_sg, uint64_t *ret_off, weightd_error *err)
{
	struct csource *g[WD_MAX_RECIPE_SOURCES];
	struct cache_segment *sg = NULL;
	uint64_t off = 0;
	size_t k;

	if (nbytes > arena_size(c))
		return 1;
	if (!pk->shm_checked) {
		pk->shm_avail = wd_segment_shm_free();
		pk->shm_checked = true;
	}
	if (pk->shm_avail != UINT64_MAX &&
	    (pk->shm_claimed > pk->shm_avail || nbytes > pk->shm_avail - pk->shm_claimed)) {
		shm_error(label, nbytes,
			  pk->shm_avail > pk->shm_claimed ? pk->shm_avail - pk->shm_claimed : 0,
			  err);
		log_info("%s", err->message);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	if (grow((void **)&pk->arenas, &pk->cap_arenas, pk->n_arenas, sizeof(*pk->arenas)) < 0)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	sorted_group(sources, n_sources, g);
	for (size_t i = 0; i < c->n_arenas; i++)
		if (same_group(c->arenas[i], g, n_sources)) {
			sg = c->arenas[i];
			break;
		}
	if (sg) {
		off = align_for(sg->used, nbytes);
		if (off + nbytes < off || off + nbytes > sg->seg.size ||
		    sg->placed >= CACHE_SEGMENT_MAX_WEIGHTS ||
		    wd_segment_unseal(&sg->seg, err) < 0) {
			cache_arena_close(c, sg);
			sg = NULL;
			off = 0;
		}
	}
	if (!sg && !(sg = arena_open(c, g, n_sources, err)))
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	arena_count_huge(c, sg, off + nbytes);
	sg->used = off + nbytes;
	sg->placed++;
	pk->shm_claimed += nbytes;
	for (k = 0; k < pk->n_arenas && pk->arenas[k] != sg; k++)
		;
	if (k == pk->n_arenas)
		pk->arenas[pk->n_arenas++] = sg;
	*ret_sg = sg;
	*ret_off = off;
	return 0;
}

void cache_pack_end(struct cache *c, struct cache_pack *pk)
{
	if (!pk)
		return;
	uint64_t avail = pk->n_all ? wd_segment_shm_free() : 0, claimed = 0;
	size_t started = 0;

	for (size_t i = 0; i < pk->n_all; i++) {
		struct cache_segment *sg = pk->all[i];
		weightd_error err;
		struct stat st;
		int r;

		wd_error_clear(&err);
		/* One check of /dev/shm per pack, counting what its earlier segments will take. */
		if (avail != UINT64_MAX && (claimed > avail || sg->used > avail - claimed)) {
			shm_full_error(sg, avail > claimed ? avail - claimed : 0, &err);
			log_info("%s", err.message);
			cache_job_fail_queued(c, sg, &err); /* and destroys the segment */
			continue;
		}
		claimed += sg->used;
		/* a random name, drawn again when taken (wd_segment_create_unique) */
		r = wd_segment_create_sparse(c->instance, sg->used, &sg->seg, &err);
		if (r < 0) {
			log_warn("%s", err.message);
			cache_job_fail_queued(c, sg, &err); /* and destroys the segment */
			continue;
		}
		if (fstat(sg->seg.ro_fd, &st) == 0)
			sg->ino = (uint64_t)st.st_ino;
		sg->created = true;
		cache_seg_count(c, sg);
		pk->all[started++] = sg; /* the created ones, in order, over the ones handled */
	}
	cache_job_start(c, pk->all, started);
	/* Each arena here has jobs of this pack queued, so none is gone before its turn. */
	for (size_t i = 0; i < pk->n_arenas; i++)
		cache_job_kick(c, pk->arenas[i], pk->owner);
	free(pk->arenas);
	free(pk->open);
	free(pk->all);
	free(pk);
}

/*
 * Recipe temporaries live on the heap, outside the shared-memory budget: all running jobs
 * together may hold max_temp of them (the budget's size when unset). A job that would pass it
 * fails at once with the figures, rather than growing the daemon past what was configured.
 */
static int temp_check(struct cache *c, uint64_t temp, const char *label, weightd_error *err)
{
	uint64_t limit = c->p.max_temp ? c->p.max_temp : c->budget;
	char t_temp[WD_BYTES_TEXT], t_free[WD_BYTES_TEXT], t_limit[WD_BYTES_TEXT],
		t_used[WD_BYTES_TEXT];
	/* and what the workers' input stages hold (fill.c) */
	uint64_t used = c->temp_used + fill_stage_used();

	if (!temp || (temp <= limit && used <= limit - temp))
		return 0;
	if (err) {
		err->expected = (int64_t)(limit - (used < limit ? used : limit));
		err->actual = (int64_t)temp;
	}
	return wd_error_set(
		err, WEIGHTD_E_RESOURCE_EXHAUSTED,
		"resource exhausted: %s needs %s of working memory but only %s of the %s "
		"max_temp is free (%s in use by running materializations); raise "
		"`max_temp` in weightd.conf",
		label, wd_bytes_text(t_temp, temp),
		wd_bytes_text(t_free, used < limit ? limit - used : 0),
		wd_bytes_text(t_limit, limit), wd_bytes_text(t_used, used));
}

int cache_request(struct cache *c, struct cache_pack *pack, struct wd_plan *plan,
		  struct csource *const *sources, size_t n_sources, cache_cb cb, void *arg,
		  struct weight **ret_w, weightd_error *err)
{
	const uint8_t *key = wd_plan_key(plan);
	struct weight *w = cache_find_key(c, key);
	struct cache_pack *own = NULL;
	struct cache_segment *sg = NULL; /* arena_place sets both when it returns 0 */
	uint64_t nbytes = wd_plan_nbytes(plan), temp = wd_plan_temp_bytes(plan), off = 0;
	struct job *j;
	int r;

	if (w) {
		cache_hold(c, w);
		cache_claim_source(w, n_sources ? sources[0] : NULL);
		wd_plan_free(plan);
		*ret_w = w;
		return 1;
	}
	if (n_sources > WD_MAX_RECIPE_SOURCES) {
		wd_plan_free(plan);
		return wd_error_set(err, WEIGHTD_E_RECIPE_TOO_LARGE, "a recipe may read at most %d checkpoints",
				    WD_MAX_RECIPE_SOURCES);
	}
	j = cache_job_find(c, key);
	if (j) {
		wd_plan_free(plan);
		if (cache_job_join(c, j, pack ? pack->owner : POOL_OWNER_SELF, cb, arg) < 0)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return 0;
	}
	j = cache_job_new(c, plan, n_sources);
	if (!pack)
		pack = own = cache_pack_begin(c);
	if (!j || !pack) {
		if (j)
			cache_job_free(j); /* and the plan */
		else
			wd_plan_free(plan);
		free(own);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	r = temp_check(c, temp, wd_plan_label(plan), err);
	if (r == 0)
		r = cache_reserve(c, nbytes, wd_plan_label(plan), err);
	if (r < 0) {
		cache_job_free(j);
		free(own);
		return r;
	}
	if (pack->shared) {
		r = arena_place(c, pack, sources, n_sources, nbytes, wd_plan_label(plan), &sg, &off,
				err);
		if (r < 0) {
			c->resident -= nbytes;
			cache_job_free(j);
			return r;
		}
		if (r == 0) {
			cache_job_queue(c, j, sources, n_sources, sg, off, pack->owner, cb, arg);
			return 0;
		}
	}
	sg = pack_place(c, pack, sources, n_sources, nbytes, &off);
	if (!sg) {
		c->resident -= nbytes;
		cache_job_free(j);
		free(own);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	cache_job_queue(c, j, sources, n_sources, sg, off, pack->owner, cb, arg);
	if (own)
		cache_pack_end(c, own);
	return 0;
}
