/* SPDX-License-Identifier: Apache-2.0 */
/* cache_job.c - the jobs that make new weights: found by key while in flight, run on the worker
 * pool (a segment's consecutive small ones batched into one task), their bytes filled by fill.c,
 * then turned into weights and their waiters answered. Main thread only, except job_work and
 * batch_work. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "clock.h"
#include "fill.h"
#include "log.h"

/* A request waiting for a job's weight. */
struct waiter {
	cache_cb cb;
	void *arg;
	SLIST_ENTRY(waiter) link;
};

/* One new weight being made: queued on its segment until the segment exists, then run on the
 * pool (alone or in a batch), then made a weight on the main thread by job_done. */
struct job {
	struct pool_task task;       /* first: the pool hands back this pointer */
	struct cache *cache;
	uint8_t key[32];
	struct wd_plan *plan;
	struct csource **sources;
	size_t n_sources;
	uint64_t nbytes;
	uint64_t temp;               /* heap temporaries it may allocate, counted while it runs */
	uint64_t progress;           /* bytes written so far: the worker stores, status loads */
	uint64_t created_ms;         /* wd_clock_ms() when it was made (status shows its rate) */
	struct cache_segment *segment;
	uint64_t offset;
	int fd;                      /* the segment's writable fd (the worker writes through it) */
	/* result, written by the worker */
	int status;
	weightd_error *err;        /* on failure (heap: a job is small while it succeeds) */
	enum wd_digest_alg alg;      /* chosen on the main thread (cache_params.digest) */
	uint8_t digest[WD_DIGEST_MAX];
	uint64_t bytes_read;
	uint64_t ns;
	/* who waits (the request that started the job is the last in the list: `starter`, kept in
	 * the job, so that a weight's request costs no allocation of its own; joiners are
	 * allocated) */
	SLIST_HEAD(, waiter) waiters;
	LIST_ENTRY(job) link;        /* the cache's jobs in flight */
	struct job *hash_next;       /* the chain of its bucket in jobs_by_key */
	struct job **hash_pprev;     /* what points at it in that chain (unlinked in O(1)) */
	TAILQ_ENTRY(job) queue_link; /* its segment's jobs waiting for it to be created */
	struct pool_task *submitted; /* the pool task that runs it (its own, or its batch's) */
	STAILQ_ENTRY(job) batch_link; /* its batch's jobs (small weights share a task) */
	struct csource *source0;     /* sources of a job that reads one checkpoint (most do) */
	struct waiter starter;       /* the request that started it */
};

/* Jobs in flight are found by key through a hash that doubles as they grow (a unit of 100,000
 * new weights starts that many jobs: a list scanned per request would be quadratic). */
#define JOB_BUCKETS_MIN 4096

/* Keep a failure's error with the job (without memory for it, job_done says so from status). */
static void job_fail(struct job *j, int status, const weightd_error *err)
{
	j->status = status < 0 ? status : -WEIGHTD_E_INTERNAL;
	free(j->err);
	j->err = malloc(sizeof(*j->err));
	if (j->err)
		*j->err = *err;
}

/* Worker thread: fill the weight's range and hash it (fill.c). Touches nothing but the job (the
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
	 * resource exhausted), where a posix_fallocate of the range would clear every page once
	 * more. A large weight is filled in chunks by several workers, a small one in order. */
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

void cache_job_free(struct job *j)
{
	for (size_t i = 0; i < j->n_sources; i++)
		catalog_source_unref(j->sources[i]);
	if (j->sources != &j->source0)
		free(j->sources);
	wd_plan_free(j->plan);
	free(j->err);
	free(j);
}

const char *cache_job_label(const struct job *j)
{
	return wd_plan_label(j->plan);
}

struct job *cache_job_find(const struct cache *c, const uint8_t *key)
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
		for (size_t i = 0; i < j->n_sources; i++)
			if (j->n_sources == 1 || strcmp(err->checkpoint, j->sources[i]->name) == 0)
				catalog_explain_changed(j->sources[i], err);
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
	cache_temp_publish(c);
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
		if (w->csource)
			w->csource->stats->materialized_bytes += w->nbytes;
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
		if (j->n_sources)
			j->sources[0]->stats->errors++;
		if (c->p.stats)
			c->p.stats->materializations_failed++;
		if (t->cancelled)
			log_debug("%s", err->message);
		else
			log_info("materializing %s failed: %s", wd_plan_label(j->plan), err->message);
	}
	if (sg->arena) {
		/* each weight is recorded as it comes: the arena's other jobs answer other requests */
		if (w)
			cache_arena_record(c, sg, w);
		/* nothing more being made in it: no write access kept (an fd per segment); an open
		 * arena gets it back with its next weight */
		if (sg->n_jobs == 1)
			wd_segment_seal(&sg->seg);
		if (sg->n_jobs == 1 && sg->n_weights == 0 &&
		    wd_segment_name_matches(c->instance, sg->seg.name))
			wd_segment_unlink(sg->seg.name);
	} else if (sg->n_jobs == 1 && sg->created) {
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
	cache_job_free(j);
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

static void arena_continue(struct cache *c, struct cache_segment *sg);

/*
 * A task of sg is over (cancelled: it never ran). The jobs still queued on an arena go on: in
 * the next tasks, or, when weightd is stopping, failed as cancelled (nothing new is started).
 */
static void seg_task_over(struct cache *c, struct cache_segment *sg, bool cancelled)
{
	weightd_error err;

	if (!cancelled) {
		arena_continue(c, sg);
		return;
	}
	wd_error_clear(&err);
	wd_error_set(&err, WEIGHTD_E_CANCELLED,
		     "weightd is stopping: a materialization was cancelled before it started");
	cache_job_fail_queued(c, sg, &err);
}

/* Main thread: a job that had a task of its own is done. */
static void job_task_done(struct pool_task *t)
{
	struct job *j = (struct job *)t;
	struct cache *c = j->cache;
	struct cache_segment *sg = j->segment;
	/* jobs queued behind it keep the segment alive through job_done */
	bool more = !TAILQ_EMPTY(&sg->queued), cancelled = t->cancelled;

	sg->tasks--;
	job_done(t); /* frees j, and t with it */
	if (more)
		seg_task_over(c, sg, cancelled);
}

/* Start a job whose segment exists: inline without a pool (tests), else on a worker. */
static void job_start(struct cache *c, struct job *j)
{
	j->fd = j->segment->seg.fd;
	j->task.cost = j->nbytes;
	j->submitted = &j->task;
	if (!c->p.pool) {
		job_work(&j->task, c->scratch_ok ? &c->scratch : NULL);
		job_task_done(&j->task);
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
#define BATCH_MAX_JOBS FILL_RUN_MAX   /* one run at most */
/* A remote location's small weights: more a batch, so that its coalesced requests are fewer
 * and larger, and one fetch spreads over many shards at once: a worker waiting on the network
 * then keeps many connections busy, not the one or two a 16 MiB batch of one shard makes. */
#define BATCH_MAX_REMOTE_JOBS FILL_REMOTE_RUN_MAX
#define BATCH_MAX_REMOTE_BYTES (64u << 20)

struct batch {
	struct pool_task task;       /* first: the pool hands back this pointer */
	STAILQ_HEAD(, job) jobs;
};

/* The k jobs from jobs[i] were filled together, starting at t0 (wd_clock_ns): each is whole, with
 * an equal share of the time. Returns the index after them. */
static size_t batch_run_done(struct job **jobs, size_t i, size_t k, uint64_t t0)
{
	uint64_t ns = (wd_clock_ns() - t0) / k;

	for (; k; k--, i++) {
		jobs[i]->bytes_read = jobs[i]->nbytes;
		jobs[i]->ns = ns;
		jobs[i]->status = 0;
	}
	return i;
}

/* Worker thread: the jobs of a batch, one after another; a run of them (fill_run_length)
 * from one read, the stored weights of one remote object (fill_remote_run_length) fetched
 * together. */
static void batch_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct job **jobs = calloc(t->jobs, sizeof(*jobs)), *j;
	struct fill_part *parts = calloc(t->jobs, sizeof(*parts));
	size_t n = 0;

	if (!jobs || !parts) { /* one by one: each says what it lacks */
		STAILQ_FOREACH(j, &((struct batch *)t)->jobs, batch_link)
			job_work(&j->task, scratch);
		goto out;
	}
	STAILQ_FOREACH(j, &((struct batch *)t)->jobs, batch_link) {
		jobs[n] = j;
		parts[n++] = (struct fill_part){
			.plan = j->plan,
			.out = { .base = j->offset, .size = j->nbytes, .alg = j->alg,
				 .digest = j->digest, .progress = &j->progress },
		};
	}
	for (size_t i = 0; i < n;) {
		size_t k = fill_remote_run_length(parts + i, n - i);

		if (k > 0) {
			uint64_t t0 = wd_clock_ns();
			weightd_error err;

			wd_error_clear(&err);
			if (fill_remote_run(jobs[i]->cache->p.pool, jobs[i]->fd, parts + i, k,
					    scratch, &err) == 0) {
				i = batch_run_done(jobs, i, k, t0);
				continue;
			}
			if (err.code == WEIGHTD_E_SOURCE_CHANGED || err.code == WEIGHTD_E_CANCELLED) {
				/* nothing of an object replaced mid-way is served, nor fetched again */
				for (; k; k--, i++) {
					job_fail(jobs[i], -err.code, &err);
					if (jobs[i]->nbytes) /* what landed of it goes back */
						fallocate(jobs[i]->fd,
							  FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
							  (off_t)jobs[i]->offset,
							  (off_t)jobs[i]->nbytes);
				}
				continue;
			}
			log_debug("%zu weights fetched together failed; fetching them one by one "
				  "(starting with %s): %s",
				  k, wd_plan_label(jobs[i]->plan), err.message);
			for (; k; k--, i++) {
				/* those that arrived whole are fetched again: count them once */
				__atomic_store_n(&jobs[i]->progress, 0, __ATOMIC_RELAXED);
				job_work(&jobs[i]->task, scratch);
			}
			continue;
		}
		k = scratch ? fill_run_length(parts + i, n - i, scratch->cap) : 1;
		if (k > 1) {
			uint64_t t0 = wd_clock_ns();
			weightd_error err;

			wd_error_clear(&err);
			if (fill_run(jobs[i]->fd, parts + i, k, scratch, &err) == 0) {
				i = batch_run_done(jobs, i, k, t0);
				continue;
			}
			log_debug("a run of %zu weights from one file failed; filling them one by one "
				  "(starting with %s): %s", k, wd_plan_label(jobs[i]->plan), err.message);
		}
		if (k == 1 && fill_stage_wanted(&parts[i])) {
			/* recipes over remote inputs: those of the next ones fetched together */
			struct fill_stage st;
			size_t g = 1;

			while (i + g < n && fill_stage_wanted(&parts[i + g]))
				g++;
			k = fill_stage_begin(jobs[i]->cache->p.pool, parts + i, g, scratch, &st);
			for (; k; k--, i++)
				job_work(&jobs[i]->task, scratch);
			fill_stage_end(&st);
			continue;
		}
		/* one by one (also what a failed run falls back to: every job is redone) */
		for (; k; k--, i++)
			job_work(&jobs[i]->task, scratch);
	}
out:
	free(parts);
	free(jobs);
}

/* Is j a stored weight of a remote checkpoint (what fill_remote_run fetches)? */
static bool job_is_remote(const struct job *j)
{
	const struct wd_source *src;
	uint32_t file;
	uint64_t off;

	return wd_plan_file_range(j->plan, &src, &file, &off) && wd_source_is_remote(src);
}

/* Main thread: each job of a finished (or cancelled) batch, then the batch. */
static void batch_done(struct pool_task *t)
{
	struct batch *b = (struct batch *)t;
	struct job *j = STAILQ_FIRST(&b->jobs), *next;
	struct cache *c = j->cache;
	struct cache_segment *sg = j->segment; /* every job of a batch is in one segment */
	bool more = !TAILQ_EMPTY(&sg->queued);

	sg->tasks--;
	for (; j; j = next) {
		next = STAILQ_NEXT(j, batch_link);
		j->task.cancelled = t->cancelled;
		job_done(&j->task);
	}
	if (more)
		seg_task_over(c, sg, t->cancelled);
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
	uint64_t max_bytes = BATCH_MAX_BYTES;
	size_t n = 1, max = BATCH_MAX_JOBS;

	if (!j)
		return false;
	if (job_is_remote(j)) {
		max = BATCH_MAX_REMOTE_JOBS;
		max_bytes = BATCH_MAX_REMOTE_BYTES;
	}
	bytes = j->nbytes;
	TAILQ_REMOVE(list, j, queue_link);
	next = TAILQ_FIRST(list);
	sg->tasks++;
	if (!c->p.pool || j->nbytes > BATCH_SMALL || !next || next->nbytes > BATCH_SMALL ||
	    !(b = calloc(1, sizeof(*b)))) {
		job_start(c, j);
		return true;
	}
	j->fd = sg->seg.fd;
	j->submitted = &b->task;
	b->task.waits_on = j->task.waits_on;
	STAILQ_INIT(&b->jobs);
	STAILQ_INSERT_TAIL(&b->jobs, j, batch_link);
	while ((next = TAILQ_FIRST(list)) && next->nbytes <= BATCH_SMALL && n < max &&
	       bytes + next->nbytes <= max_bytes && next->task.owner == j->task.owner) {
		TAILQ_REMOVE(list, next, queue_link);
		next->fd = sg->seg.fd;
		next->submitted = &b->task;
		if (!b->task.waits_on)
			b->task.waits_on = next->task.waits_on;
		STAILQ_INSERT_TAIL(&b->jobs, next, batch_link);
		bytes += next->nbytes;
		n++;
	}
	b->task.work = batch_work;
	b->task.done = batch_done;
	b->task.jobs = (unsigned)n;
	b->task.owner = j->task.owner; /* every job of a batch is its owner's */
	b->task.cost = bytes;
	log_debug("a batch of %zu small weights (%llu bytes) of %s goes to one worker", n,
		  (unsigned long long)bytes, sg->seg.name);
	pool_submit(c->p.pool, &b->task);
	return true;
}

/* Start queued jobs of arena sg while fewer than ARENA_TASKS tasks fill it. Without a pool the
 * job runs here, and the next is started when it is done (it may have ended the segment by
 * then). */
static void arena_continue(struct cache *c, struct cache_segment *sg)
{
	if (!c->p.pool) {
		seg_submit_next(c, sg, &sg->queued);
		return;
	}
	while (sg->tasks < ARENA_TASKS && seg_submit_next(c, sg, &sg->queued))
		;
}

void cache_job_kick(struct cache *c, struct cache_segment *sg, uint32_t owner)
{
	struct job *j = TAILQ_FIRST(&sg->queued), *next;
	struct job_queue mine = TAILQ_HEAD_INITIALIZER(mine);

	/* An arena's queue batches one owner's requests; it is no order between owners (the
	 * pool's fair queueing is): jobs of `owner` that would wait behind another owner's go to
	 * the pool now. */
	if (!c->p.pool || !j || j->task.owner == owner || sg->tasks < ARENA_TASKS) {
		arena_continue(c, sg);
		return;
	}
	for (; j; j = next) {
		next = TAILQ_NEXT(j, queue_link);
		if (j->task.owner == owner) {
			TAILQ_REMOVE(&sg->queued, j, queue_link);
			TAILQ_INSERT_TAIL(&mine, j, queue_link);
		}
	}
	while (seg_submit_next(c, sg, &mine))
		;
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

/*
 * Start the created segments of a pack, one task of each in turn: the workers, taking tasks in
 * order, then write into different segments rather than queueing on one segment's inode lock
 * (a write into a shared-memory object holds it). Without a pool, or without memory for the
 * lists, each segment starts whole in turn.
 */
void cache_job_start(struct cache *c, struct cache_segment **sgs, size_t n)
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

/* The segment could not be made: every job queued for it fails (callbacks run here). */
void cache_job_fail_queued(struct cache *c, struct cache_segment *sg, const weightd_error *err)
{
	/* newest first */
	while (!TAILQ_EMPTY(&sg->queued)) {
		struct job *j = TAILQ_LAST(&sg->queued, job_queue);

		TAILQ_REMOVE(&sg->queued, j, queue_link);
		job_fail(j, -err->code, err);
		job_done(&j->task);
	}
	if (sg->n_jobs == 0)
		cache_seg_destroy(c, sg, false);
}

/*
 * A job belongs to the uid whose request started it, and is charged to it. When another uid
 * joins it while it is still queued, it moves to that uid's share if it would start sooner
 * there: one uid's long queue never delays a weight another uid waits for too, and the uid it
 * moves to is charged for what it gets. A job of a batch moves its whole batch (at most
 * BATCH_MAX_BYTES, or BATCH_MAX_REMOTE_BYTES of a remote location's). A job still waiting in
 * a created arena's queue behind its owner's other jobs becomes the joiner's and goes to the
 * pool now, as cache_job_kick sends a new owner's.
 */
int cache_job_join(struct cache *c, struct job *j, uint32_t owner, cache_cb cb, void *arg)
{
	struct waiter *wt = calloc(1, sizeof(*wt));
	struct cache_segment *sg = j->segment;

	if (!wt)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (c->p.pool && j->submitted && pool_reown(c->p.pool, j->submitted, owner)) {
		log_debug("materializing %s: moved to uid %u's share of the workers",
			  wd_plan_label(j->plan), (unsigned)owner);
	} else if (c->p.pool && !j->submitted && j->task.owner != owner && sg && sg->arena &&
		   sg->created) {
		struct job_queue one = TAILQ_HEAD_INITIALIZER(one);

		TAILQ_REMOVE(&sg->queued, j, queue_link);
		TAILQ_INSERT_TAIL(&one, j, queue_link);
		j->task.owner = owner;
		seg_submit_next(c, sg, &one);
		log_debug("materializing %s: moved out of its arena's queue to uid %u's share of "
			  "the workers",
			  wd_plan_label(j->plan), (unsigned)owner);
	}
	wt->cb = cb;
	wt->arg = arg;
	SLIST_INSERT_HEAD(&j->waiters, wt, link);
	return 0;
}

struct job *cache_job_new(struct cache *c, struct wd_plan *plan, size_t n_sources)
{
	struct job *j = job_table_room(c) == 0 ? calloc(1, sizeof(*j)) : NULL;

	if (!j)
		return NULL;
	j->sources = n_sources <= 1 ? &j->source0 : calloc(n_sources, sizeof(*j->sources));
	if (!j->sources) {
		free(j);
		return NULL;
	}
	j->plan = plan;
	j->nbytes = wd_plan_nbytes(plan);
	j->temp = wd_plan_temp_bytes(plan);
	j->created_ms = wd_clock_ms();
	return j;
}

void cache_job_queue(struct cache *c, struct job *j, struct csource *const *sources,
		     size_t n_sources, struct cache_segment *sg, uint64_t offset, uint32_t owner,
		     cache_cb cb, void *arg)
{
	struct waiter *wt = &j->starter;

	for (size_t i = 0; i < n_sources; i++) {
		j->sources[i] = sources[i];
		catalog_source_ref(sources[i]);
		j->n_sources++;
	}
	j->cache = c;
	memcpy(j->key, wd_plan_key(j->plan), 32);
	wt->cb = cb;
	wt->arg = arg;
	SLIST_INSERT_HEAD(&j->waiters, wt, link);
	j->segment = sg;
	j->offset = offset;
	j->fd = -1;
	j->task.work = job_work;
	j->task.done = job_task_done;
	j->task.owner = owner;
	/* a job reading a remote checkpoint waits on its store (pool_yield_stalled) */
	for (size_t i = 0; i < n_sources && !j->task.waits_on; i++)
		if (sources[i]->src && wd_source_is_remote(sources[i]->src))
			j->task.waits_on = wd_source_remote(sources[i]->src);
	j->alg = c->p.digest ? c->p.digest : WD_DIGEST_DEFAULT;
	sg->n_jobs++;
	c->temp_used += j->temp;
	cache_temp_publish(c);
	if (c->p.stats) {
		c->p.stats->temp_bytes += j->temp;
		/* in flight from the request's view, queued on its segment or not (job_done
		 * counts it out) */
		c->p.stats->in_flight++;
	}
	TAILQ_INSERT_TAIL(&sg->queued, j, queue_link);
	job_link(c, j);
}

bool cache_in_flight(const struct cache *c, const uint8_t key[32])
{
	return cache_job_find(c, key) != NULL;
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
			.elapsed_ms = wd_clock_ms() - j->created_ms,
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
