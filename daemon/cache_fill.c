/* SPDX-License-Identifier: Apache-2.0 */
/* cache_fill.c - making new weights: packing a request's new weights into segments, the jobs
 * that fill them on the worker pool, and cache_request. Main thread only, except job_work. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"
#include "clock.h"
#include "fill.h"
#include "log.h"
#include "source.h"
#include "state.h"

/* /dev/shm has no room for a segment: say how much it has left, in the structured fields too. */
static void shm_full_error(const struct cache_segment *sg, uint64_t avail, weightd_error *err)
{
	/* the newest weight placed in it */
	const struct job *j = TAILQ_LAST(&sg->queued, job_queue);
	char what[600];

	if (sg->n_jobs == 1)
		snprintf(what, sizeof(what), "%s", wd_plan_label(j->plan));
	else
		snprintf(what, sizeof(what), "a segment of %zu weights (%s and others)",
			 (size_t)sg->n_jobs, wd_plan_label(j->plan));
	wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
		     "resource exhausted: %s needs %llu bytes of shared memory but /dev/shm has only "
		     "%llu bytes free", what, (unsigned long long)sg->used, (unsigned long long)avail);
	err->expected = (int64_t)sg->used;
	err->actual = (int64_t)avail;
}

/* Keep a failure's error with the job (without memory for it, job_done says so from status). */
static void job_fail(struct job *j, int status, const weightd_error *err)
{
	j->status = status < 0 ? status : -WEIGHTD_E_INTERNAL;
	free(j->err);
	j->err = malloc(sizeof(*j->err));
	if (j->err)
		*j->err = *err;
}

/* Worker thread: reserve the weight's range, fill and hash it. Touches nothing but the job (the
 * segment's fd is copied into it and stays open until every job of the segment is done). */
static void job_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct job *j = (struct job *)t;
	weightd_error err;
	uint64_t t0 = wd_clock_ns();
	int r;

	wd_error_clear(&err);
	if (!scratch) {
		job_fail(j, wd_error_set(&err, WEIGHTD_E_RESOURCE_EXHAUSTED, "no memory for read buffers"), &err);
		return;
	}
	/* Nothing is reserved first: writing allocates the pages (cache_pack_end checked that
	 * /dev/shm had room; if others filled it since, the write fails with ENOSPC, reported as
	 * resource exhausted). A posix_fallocate per range cleared every page once more. */
	/* A large weight is filled in chunks by several workers (fill.c), a small one in order. */
	r = fill_weight(j->cache->p.pool, j->plan, j->fd, j->offset, j->nbytes, j->alg,
			&j->progress, scratch, j->digest, &j->bytes_read, &err);
	if (r < 0)
		goto fail;
	j->ns = wd_clock_ns() - t0;
	j->status = 0;
	return;
fail:
	job_fail(j, r, &err);
	/* give back whatever of the range was written */
	if (j->nbytes)
		fallocate(j->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)j->offset,
			  (off_t)j->nbytes);
}

static void job_free(struct job *j)
{
	for (size_t i = 0; i < j->n_sources; i++)
		catalog_source_unref(j->sources[i]);
	if (j->sources != &j->source0)
		free(j->sources);
	wd_plan_free(j->plan);
	free(j->err);
	free(j);
}

static struct job *find_job(const struct cache *c, const uint8_t *key)
{
	if (!c->jobs_by_key)
		return NULL;
	for (struct job *j = c->jobs_by_key[cache_key_hash(key, c->job_buckets)]; j;
	     j = j->hash_next)
		if (memcmp(j->key, key, 32) == 0)
			return j;
	return NULL;
}

static void job_hash_add(struct job **buckets, size_t nb, struct job *j)
{
	struct job **head = &buckets[cache_key_hash(j->key, nb)];

	j->hash_next = *head;
	if (*head)
		(*head)->hash_pprev = &j->hash_next;
	j->hash_pprev = head;
	*head = j;
}

/* Room in the job table for one more (doubling it past one job per bucket; a failed doubling
 * keeps the old table, only its chains grow). Fails only when there is no table at all. */
static int job_table_room(struct cache *c)
{
	size_t nb = c->job_buckets ? c->job_buckets * 2 : JOB_BUCKETS_MIN;
	struct job **nt;

	if (c->jobs_by_key && c->job_count < c->job_buckets)
		return 0;
	nt = calloc(nb, sizeof(*nt));
	if (!nt)
		return c->jobs_by_key ? 0 : -WEIGHTD_E_RESOURCE_EXHAUSTED;
	struct job *j;

	LIST_FOREACH(j, &c->jobs, link)
		job_hash_add(nt, nb, j);
	free(c->jobs_by_key);
	c->jobs_by_key = nt;
	c->job_buckets = nb;
	return 0;
}

/* Link a job in flight (job_table_room made room first). */
static void job_link(struct cache *c, struct job *j)
{
	LIST_INSERT_HEAD(&c->jobs, j, link);
	job_hash_add(c->jobs_by_key, c->job_buckets, j);
	c->job_count++;
}

static void job_unlink(struct cache *c, struct job *j)
{
	LIST_REMOVE(j, link);
	*j->hash_pprev = j->hash_next;
	if (j->hash_next)
		j->hash_next->hash_pprev = j->hash_pprev;
	c->job_count--;
}

/*
 * The last job of a segment is done: drop write access and record the segment with the weights
 * that were made, before anyone is answered (a reply never names a weight a restart would not
 * find).
 */
static void seg_filled(struct cache *c, struct cache_segment *sg)
{
	weightd_error err;

	wd_segment_seal(&sg->seg);
	if (sg->n_weights == 0)
		return;
	wd_error_clear(&err);
	if (cache_seg_write_state(c, sg, &err) < 0)
		log_warn("%s (its weights are served, but will be rebuilt after a restart)", err.message);
}

/* Main thread: turn a finished job into a weight and tell everyone who waited. */
static void job_done(struct pool_task *t)
{
	struct job *j = (struct job *)t;
	struct cache *c = j->cache;
	struct cache_segment *sg = j->segment;
	struct weight *w = NULL;
	struct waiter *wt, *next;
	weightd_error lerr, *err = &lerr;

	job_unlink(c, j);
	if (t->cancelled) {
		/* skipped by the pool at shutdown: nothing was written */
		wd_error_clear(&lerr);
		j->status = wd_error_set(&lerr, WEIGHTD_E_CANCELLED,
					 "weightd is stopping: materializing %s was cancelled before "
					 "it started", wd_plan_label(j->plan));
	} else if (j->status < 0 && j->err) {
		err = j->err;
	} else if (j->status < 0) {
		wd_error_clear(&lerr);
		wd_error_set(&lerr, -j->status, "materializing %s failed and there was no memory "
			     "left to say why", wd_plan_label(j->plan));
	}
	if (c->p.stats) {
		c->p.stats->in_flight--;
		c->p.stats->temp_bytes -= j->temp;
		c->p.stats->bytes_read += j->bytes_read;
	}
	c->temp_used -= j->temp;
	if (j->status == 0) {
		w = cache_weight_new(c, wd_plan_label(j->plan));
		if (!w) {
			wd_error_clear(err);
			wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory recording a weight");
		}
	}
	if (w) {
		w->id = c->next_id++;
		memcpy(w->key, j->key, 32);
		memcpy(w->digest, j->digest, sizeof(w->digest));
		w->digest_alg = j->alg;
		w->dtype = wd_plan_dtype(j->plan);
		w->ndim = wd_plan_ndim(j->plan);
		if (w->ndim)
			memcpy(w->shape, wd_plan_shape(j->plan), sizeof(uint64_t) * (size_t)w->ndim);
		w->nbytes = j->nbytes;
		w->segment = sg;
		w->offset = j->offset;
		if (j->n_sources) {
			size_t n = strnlen(j->sources[0]->name, sizeof(w->source) - 1);

			w->csource = j->sources[0];
			catalog_source_ref(w->csource);
			if (j->n_sources == 1)
				memcpy(w->source, w->csource->name, n); /* w is zeroed: terminated */
			else   /* every checkpoint it reads, as its segment and record name them */
				cache_join_sources(j->sources, j->n_sources, w->source,
						   sizeof(w->source));
			w->generation = w->csource->generation;
		}
		cache_insert(c, w);
		if (c->p.stats) {
			c->p.stats->materializations++;
			c->p.stats->bytes_materialized += w->nbytes;
			c->p.stats->materialize_ns += j->ns;
		}
		log_debug("materialized %s: %llu bytes at %llu in %s in %.3f s, %llu read", w->label,
			  (unsigned long long)w->nbytes, (unsigned long long)w->offset, sg->seg.name,
			  (double)j->ns / 1e9, (unsigned long long)j->bytes_read);
		/* The reservation becomes the weight's bytes (resident unchanged). Nobody holds it
		 * until the waiters take their references below. */
		cache_lru_append(c, w);
	} else {
		c->resident -= j->nbytes;
		if (c->p.stats)
			c->p.stats->materializations_failed++;
		if (t->cancelled)
			log_debug("%s", err->message);
		else
			log_info("materializing %s failed: %s", wd_plan_label(j->plan), err->message);
	}
	if (sg->n_jobs == 1 && sg->created) {
		seg_filled(c, sg);
		/* nothing was made in it: its name goes before anyone hears of the failure (the
		 * struct goes after the callbacks) */
		if (sg->n_weights == 0 && wd_segment_name_matches(c->instance, sg->seg.name))
			wd_segment_unlink(sg->seg.name);
	}
	for (wt = SLIST_FIRST(&j->waiters); wt; wt = next) {
		/* the reads are charged to the request that started the job, not to those that joined */
		uint64_t charged = SLIST_NEXT(wt, link) ? 0 : j->bytes_read;

		next = SLIST_NEXT(wt, link);
		if (w) {
			cache_hold(c, w);
			wt->cb(w, NULL, charged, wt->arg);
		} else {
			wt->cb(NULL, err, charged, wt->arg);
		}
		if (wt != &j->starter)
			free(wt);
	}
	job_free(j);
	/* Counted down only now: while the callbacks run (and may drop w, or evict neighbours),
	 * the job keeps the segment alive and busy. */
	if (--sg->n_jobs == 0 && sg->created) {
		if (sg->n_weights == 0)
			cache_seg_destroy(c, sg, true);
		else
			cache_seg_update_idle(c, sg);
	}
	cache_enforce_idle(c);
}

/* Start a job whose segment exists: inline without a pool (tests), else on a worker. */
static void job_start(struct cache *c, struct job *j)
{
	j->fd = j->segment->seg.fd;
	if (!c->p.pool) {
		job_work(&j->task, c->scratch_ok ? &c->scratch : NULL);
		job_done(&j->task);
		return;
	}
	pool_submit(c->p.pool, &j->task);
}

/*
 * Small weights are filled in batches: one pool task runs several jobs of a segment in
 * sequence, so a unit of thousands of tiny tensors costs a few hand-offs between the loop and
 * the workers, not one per tensor. A batch takes consecutive small jobs of one segment, up to
 * BATCH_MAX_JOBS or BATCH_MAX_BYTES; larger weights keep a task of their own (and fill.c
 * spreads the largest over several workers).
 */
#define BATCH_SMALL (1u << 20)        /* a weight of at most this many bytes joins a batch */
#define BATCH_MAX_BYTES (16u << 20)
#define BATCH_MAX_JOBS FILL_RUN_MAX   /* one run at most (batch_work's arrays are on its stack) */

struct batch {
	struct pool_task task;       /* first: the pool hands back this pointer */
	STAILQ_HEAD(, job) jobs;
};

/* Worker thread: the jobs of a batch, one after another; a run of them (fill_run_length)
 * from one read. */
static void batch_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct job *jobs[BATCH_MAX_JOBS], *j;
	struct fill_part parts[BATCH_MAX_JOBS];
	size_t n = 0;

	STAILQ_FOREACH(j, &((struct batch *)t)->jobs, batch_link) {
		jobs[n] = j;
		parts[n++] = (struct fill_part){
			.plan = j->plan,
			.out = { .base = j->offset, .size = j->nbytes, .alg = j->alg,
				 .digest = j->digest, .progress = &j->progress },
		};
	}
	for (size_t i = 0; i < n;) {
		size_t k = scratch ? fill_run_length(parts + i, n - i, scratch->cap) : 1;

		if (k > 1) {
			uint64_t t0 = wd_clock_ns(), ns;
			weightd_error err;

			wd_error_clear(&err);
			if (fill_run(jobs[i]->fd, parts + i, k, scratch, &err) == 0) {
				ns = (wd_clock_ns() - t0) / k;
				for (; k; k--, i++) {
					jobs[i]->bytes_read = jobs[i]->nbytes;
					jobs[i]->ns = ns;
					jobs[i]->status = 0;
				}
				continue;
			}
			log_debug("a run of %zu weights from one file failed; filling them one by one "
				  "(starting with %s): %s", k, wd_plan_label(jobs[i]->plan), err.message);
		}
		/* one by one (also what a failed run falls back to: every job is redone) */
		for (; k; k--, i++)
			job_work(&jobs[i]->task, scratch);
	}
}

/* Main thread: each job of a finished (or cancelled) batch, then the batch. */
static void batch_done(struct pool_task *t)
{
	struct batch *b = (struct batch *)t;
	struct job *j = STAILQ_FIRST(&b->jobs), *next;

	for (; j; j = next) {
		next = STAILQ_NEXT(j, batch_link);
		j->task.cancelled = t->cancelled;
		job_done(&j->task);
	}
	free(b);
}

/*
 * Submit the next task of a created segment's queue `list` (taken off the segment, in the order
 * they were placed): one job, or a batch of the small jobs that follow. false when the list is
 * empty. Without a pool the job runs here and may finish (and free) the segment.
 */
static bool seg_submit_next(struct cache *c, struct cache_segment *sg, struct job_queue *list)
{
	struct job *j = TAILQ_FIRST(list), *next;
	struct batch *b = NULL;
	uint64_t bytes;
	size_t n = 1;

	if (!j)
		return false;
	bytes = j->nbytes;
	TAILQ_REMOVE(list, j, queue_link);
	next = TAILQ_FIRST(list);
	if (c->p.stats)
		c->p.stats->in_flight++;
	if (!c->p.pool || j->nbytes > BATCH_SMALL || !next || next->nbytes > BATCH_SMALL ||
	    !(b = calloc(1, sizeof(*b)))) {
		job_start(c, j);
		return true;
	}
	j->fd = sg->seg.fd;
	STAILQ_INIT(&b->jobs);
	STAILQ_INSERT_TAIL(&b->jobs, j, batch_link);
	while ((next = TAILQ_FIRST(list)) && next->nbytes <= BATCH_SMALL && n < BATCH_MAX_JOBS &&
	       bytes + next->nbytes <= BATCH_MAX_BYTES) {
		TAILQ_REMOVE(list, next, queue_link);
		next->fd = sg->seg.fd;
		STAILQ_INSERT_TAIL(&b->jobs, next, batch_link);
		bytes += next->nbytes;
		n++;
		if (c->p.stats)
			c->p.stats->in_flight++;
	}
	b->task.work = batch_work;
	b->task.done = batch_done;
	b->task.jobs = (unsigned)n;
	log_debug("a batch of %zu small weights (%llu bytes) of %s goes to one worker", n,
		  (unsigned long long)bytes, sg->seg.name);
	pool_submit(c->p.pool, &b->task);
	return true;
}

/* Start the queued jobs of a created segment (in the order they were placed). */
static void seg_start_queued(struct cache *c, struct cache_segment *sg)
{
	/* Taken off the segment first: without a pool a job may finish (and free) the segment. */
	struct job_queue list = TAILQ_HEAD_INITIALIZER(list);

	TAILQ_CONCAT(&list, &sg->queued, queue_link);
	while (seg_submit_next(c, sg, &list))
		;
}

/* --- packing ---------------------------------------------------------------------------- */

struct cache_pack *cache_pack_begin(struct cache *c)
{
	(void)c;
	return calloc(1, sizeof(struct cache_pack));
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

static uint64_t align_for(uint64_t off, uint64_t nbytes)
{
	uint64_t a = nbytes >= CACHE_PAGE ? CACHE_PAGE : CACHE_ALIGN;

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
	struct csource *g[16];
	struct cache_segment *sg = NULL;
	size_t slot = SIZE_MAX;
	uint64_t off;

	memcpy(g, sources, n_sources * sizeof(*g));
	qsort(g, n_sources, sizeof(*g), ptr_cmp);
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

/* The segment could not be made: every job queued for it fails (callbacks run here). */
static void seg_fail_queued(struct cache *c, struct cache_segment *sg, const weightd_error *err)
{
	/* newest first */
	while (!TAILQ_EMPTY(&sg->queued)) {
		struct job *j = TAILQ_LAST(&sg->queued, job_queue);

		TAILQ_REMOVE(&sg->queued, j, queue_link);
		job_fail(j, -err->code, err);
		if (c->p.stats)
			c->p.stats->in_flight++; /* job_done takes it back */
		job_done(&j->task);
	}
	if (sg->n_jobs == 0)
		cache_seg_destroy(c, sg, false);
}

/*
 * Start the created segments of a pack, one task of each in turn: the workers, taking tasks in
 * order, then write into different segments rather than queueing on one segment's inode lock
 * (a write into a shared-memory object holds it). Without a pool, or without memory for the
 * lists, each segment starts whole in turn.
 */
static void pack_start(struct cache *c, struct cache_segment **sgs, size_t n)
{
	struct job_queue *lists = c->p.pool && n > 1 ? calloc(n, sizeof(*lists)) : NULL;
	bool more = true;

	if (!lists) {
		for (size_t i = 0; i < n; i++)
			seg_start_queued(c, sgs[i]);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		TAILQ_INIT(&lists[i]);
		TAILQ_CONCAT(&lists[i], &sgs[i]->queued, queue_link);
	}
	/* with a pool nothing finishes before the loop runs again: every segment stays */
	while (more) {
		more = false;
		for (size_t i = 0; i < n; i++)
			more |= seg_submit_next(c, sgs[i], &lists[i]);
	}
	free(lists);
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
			seg_fail_queued(c, sg, &err); /* and destroys the segment */
			continue;
		}
		claimed += sg->used;
		/* a random name, drawn again when taken (wd_segment_create_unique) */
		r = wd_segment_create_sparse(c->instance, sg->used, &sg->seg, &err);
		if (r < 0) {
			log_warn("%s", err.message);
			seg_fail_queued(c, sg, &err); /* and destroys the segment */
			continue;
		}
		if (fstat(sg->seg.ro_fd, &st) == 0)
			sg->ino = (uint64_t)st.st_ino;
		sg->created = true;
		c->segment_bytes += sg->seg.size;
		pk->all[started++] = sg; /* the created ones, in order, over the ones handled */
	}
	pack_start(c, pk->all, started);
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
	uint64_t used = c->temp_used;

	if (!temp || (temp <= limit && used <= limit - temp))
		return 0;
	if (err) {
		err->expected = (int64_t)(limit - (used < limit ? used : limit));
		err->actual = (int64_t)temp;
	}
	return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
			    "resource exhausted: %s needs %llu bytes of working memory but only %llu of "
			    "max_temp (%llu bytes) are free (%llu in use by running materializations)",
			    label, (unsigned long long)temp,
			    (unsigned long long)(used < limit ? limit - used : 0),
			    (unsigned long long)limit, (unsigned long long)used);
}

int cache_request(struct cache *c, struct cache_pack *pack, struct wd_plan *plan,
		  struct csource *const *sources, size_t n_sources, cache_cb cb, void *arg,
		  struct weight **ret_w, weightd_error *err)
{
	const uint8_t *key = wd_plan_key(plan);
	struct weight *w = cache_find_key(c, key);
	struct cache_pack *own = NULL;
	struct cache_segment *sg;
	struct waiter *wt;
	struct job *j;
	int r;

	if (w) {
		cache_hold(c, w);
		cache_claim_source(w, n_sources ? sources[0] : NULL);
		wd_plan_free(plan);
		*ret_w = w;
		return 1;
	}
	if (n_sources > 16) {
		wd_plan_free(plan);
		return wd_error_set(err, WEIGHTD_E_RECIPE_TOO_LARGE, "a recipe may read at most 16 checkpoints");
	}
	j = find_job(c, key);
	if (j) {
		wt = calloc(1, sizeof(*wt));
		if (!wt) {
			wd_plan_free(plan);
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
		wt->cb = cb;
		wt->arg = arg;
		SLIST_INSERT_HEAD(&j->waiters, wt, link);
		wd_plan_free(plan);
		return 0;
	}
	j = job_table_room(c) == 0 ? calloc(1, sizeof(*j)) : NULL;
	if (j)
		j->sources = n_sources <= 1 ? &j->source0 : calloc(n_sources, sizeof(*j->sources));
	if (!pack)
		pack = own = cache_pack_begin(c);
	if (!j || !j->sources || !pack) {
		if (j && j->sources != &j->source0)
			free(j->sources);
		free(j);
		free(own);
		wd_plan_free(plan);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	j->plan = plan;
	j->nbytes = wd_plan_nbytes(plan);
	j->temp = wd_plan_temp_bytes(plan);
	r = temp_check(c, j->temp, wd_plan_label(plan), err);
	if (r == 0)
		r = cache_reserve(c, j->nbytes, wd_plan_label(plan), err);
	if (r < 0) {
		job_free(j);
		free(own);
		return r;
	}
	sg = pack_place(c, pack, sources, n_sources, j->nbytes, &j->offset);
	if (!sg) {
		c->resident -= j->nbytes;
		job_free(j);
		free(own);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < n_sources; i++) {
		j->sources[i] = sources[i];
		catalog_source_ref(sources[i]);
		j->n_sources++;
	}
	j->cache = c;
	memcpy(j->key, key, 32);
	wt = &j->starter;
	wt->cb = cb;
	wt->arg = arg;
	SLIST_INSERT_HEAD(&j->waiters, wt, link);
	j->segment = sg;
	j->fd = -1;
	j->task.work = job_work;
	j->task.done = job_done;
	j->alg = c->p.digest ? c->p.digest : WD_DIGEST_DEFAULT;
	sg->n_jobs++;
	c->temp_used += j->temp;
	if (c->p.stats)
		c->p.stats->temp_bytes += j->temp;
	TAILQ_INSERT_TAIL(&sg->queued, j, queue_link);
	job_link(c, j);
	if (own)
		cache_pack_end(c, own);
	return 0;
}

bool cache_in_flight(const struct cache *c, const uint8_t key[32])
{
	return find_job(c, key) != NULL;
}

void cache_foreach_job(struct cache *c, void (*fn)(const struct cache_job_info *j, void *arg),
		       void *arg)
{
	struct job *j;

	LIST_FOREACH(j, &c->jobs, link) {
		struct cache_job_info info = {
			.key = j->key,
			.label = wd_plan_label(j->plan),
			.nbytes = j->nbytes,
			.done = __atomic_load_n(&j->progress, __ATOMIC_RELAXED),
			.sources = j->sources,
			.n_sources = j->n_sources,
		};
		fn(&info, arg);
	}
}

size_t cache_job_count(const struct cache *c)
{
	const struct job *j;
	size_t n = 0;

	LIST_FOREACH(j, &c->jobs, link)
		n++;
	return n;
}
