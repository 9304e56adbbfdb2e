/* cache.c - weights by key and by handle, the memory budget with LRU eviction, and the jobs that
 * fill new segments on the worker pool. Main thread only, except job_work. */
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "sink.h"
#include "state.h"

struct job {
	struct pool_task task;       /* first: the pool hands back this pointer */
	struct cache *cache;
	uint8_t key[32];
	struct wd_plan *plan;
	struct csource **sources;
	size_t n_sources;
	uint64_t nbytes;
	uint64_t progress;           /* bytes written so far: the worker stores, status loads */
	struct cache_segment *segment;
	uint64_t offset;
	int fd;                      /* the segment's writable fd (the worker writes through it) */
	/* result, written by the worker */
	int status;
	struct wd_error err;
	uint8_t digest[32];
	uint64_t bytes_read;
	uint64_t ns;
	/* who waits (the request that started the job is the last in the list) */
	struct waiter *waiters;
	struct job *key_next;        /* the list of jobs in flight */
	struct job *prev;
	struct job *hash_next;       /* the chain of its bucket in jobs_by_key */
	struct job *queue_next;      /* the segment's jobs waiting for it to be created */
};

/* Jobs in flight are found by key through a fixed hash (a unit of 65,536 new weights starts
 * that many jobs: a list scanned per request would be quadratic). */
#define JOB_BUCKETS 4096
#define SEG_BUCKETS 1024

struct waiter {
	cache_cb cb;
	void *arg;
	struct waiter *next;
};

/* The segments one pack is filling: the open one of each group of checkpoints. */
struct cache_pack {
	struct cache_segment **open;
	size_t n_open, cap_open;
	struct cache_segment **all;  /* every segment this pack made, to create at the end */
	size_t n_all, cap_all;
};

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
	uint64_t count;
	uint64_t next_id;
	uint64_t next_segment_id;
	uint64_t n_segments, segment_bytes;
	size_t nbuckets;
	struct weight **by_key, **by_id;
	struct cache_segment *segments;
	struct cache_segment *seg_by_id[SEG_BUCKETS];
	struct cache_segment *dirty;
	struct job *jobs;            /* in flight, for walking them */
	struct job *jobs_by_key[JOB_BUCKETS];
	struct weight *lru_head, *lru_tail; /* head = least recently released */
};

static size_t key_hash(const uint8_t *key, size_t nb)
{
	uint64_t h;

	memcpy(&h, key, sizeof(h));
	return (size_t)(h % nb);
}

static size_t id_hash(uint64_t id, size_t nb)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) % nb;
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
		c->p.segment_max = 1ull << 30;
	c->budget = p->budget;
	c->next_id = 1;
	c->next_segment_id = 1;
	c->nbuckets = 1024;
	c->by_key = calloc(c->nbuckets, sizeof(*c->by_key));
	c->by_id = calloc(c->nbuckets, sizeof(*c->by_id));
	if (!p->pool)
		c->scratch_ok = wd_scratch_init(&c->scratch, WD_SCRATCH_BYTES) == 0;
	if (!c->by_key || !c->by_id || (!p->pool && !c->scratch_ok)) {
		if (c->scratch_ok)
			wd_scratch_free(&c->scratch);
		free(c->by_key);
		free(c->by_id);
		free(c);
		return NULL;
	}
	return c;
}

static void rehash(struct cache *c)
{
	size_t nb = c->nbuckets * 2;
	struct weight **bk = calloc(nb, sizeof(*bk)), **bi = calloc(nb, sizeof(*bi));

	if (!bk || !bi) {
		free(bk);
		free(bi);
		return; /* keep the old, longer chains */
	}
	for (size_t i = 0; i < c->nbuckets; i++) {
		struct weight *w, *next;
		for (w = c->by_key[i]; w; w = next) {
			size_t h = key_hash(w->key, nb);
			next = w->key_next;
			w->key_next = bk[h];
			bk[h] = w;
		}
		for (w = c->by_id[i]; w; w = next) {
			size_t h = id_hash(w->id, nb);
			next = w->id_next;
			w->id_next = bi[h];
			bi[h] = w;
		}
	}
	free(c->by_key);
	free(c->by_id);
	c->by_key = bk;
	c->by_id = bi;
	c->nbuckets = nb;
}

static struct weight *find_key(struct cache *c, const uint8_t *key)
{
	for (struct weight *w = c->by_key[key_hash(key, c->nbuckets)]; w; w = w->key_next)
		if (memcmp(w->key, key, 32) == 0)
			return w;
	return NULL;
}

struct weight *cache_by_id(struct cache *c, uint64_t id)
{
	for (struct weight *w = c->by_id[id_hash(id, c->nbuckets)]; w; w = w->id_next)
		if (w->id == id)
			return w;
	return NULL;
}

/* --- segments --------------------------------------------------------------------------- */

/* Idle: created, nothing being made in it, no weight in it referenced. */
static void seg_update_idle(struct cache *c, struct cache_segment *sg)
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

/* "/<instance>.<32 random hex digits>": the name says nothing about what is inside. */
static int segment_name(const struct cache *c, char *out, size_t cap)
{
	uint8_t rnd[16];
	char hex[33];
	FILE *f = fopen("/dev/urandom", "re");
	size_t n = f ? fread(rnd, 1, sizeof(rnd), f) : 0;

	if (f)
		fclose(f);
	if (n != sizeof(rnd))
		return -WD_E_IO;
	wd_hex(rnd, sizeof(rnd), hex);
	snprintf(out, cap, "/%s.%s", c->instance, hex);
	return 0;
}

static struct cache_segment *seg_alloc(struct cache *c)
{
	struct cache_segment *sg = calloc(1, sizeof(*sg));
	size_t h;

	if (!sg)
		return NULL;
	sg->seg.fd = sg->seg.ro_fd = -1;
	sg->id = c->next_segment_id++;
	h = id_hash(sg->id, SEG_BUCKETS);
	sg->id_next = c->seg_by_id[h];
	c->seg_by_id[h] = sg;
	sg->next = c->segments;
	if (c->segments)
		c->segments->prev = sg;
	c->segments = sg;
	c->n_segments++;
	return sg;
}

/* The state record of a segment: every finished weight in it. */
static int seg_write_state(struct cache *c, struct cache_segment *sg, struct wd_error *err)
{
	struct state_segment rec;
	size_t i = 0;
	int r;

	if (!c->p.state_dir[0] || !sg->created)
		return 0;
	memset(&rec, 0, sizeof(rec));
	snprintf(rec.segment, sizeof(rec.segment), "%s", sg->seg.name);
	snprintf(rec.source, sizeof(rec.source), "%s", sg->source);
	rec.generation = sg->generation;
	rec.size = sg->seg.size;
	rec.ino = sg->ino;
	rec.weights = calloc(sg->n_weights ? sg->n_weights : 1, sizeof(*rec.weights));
	if (!rec.weights)
		return wd_error_set(err, WD_E_EXHAUSTED, "out of memory writing a state record");
	for (struct weight *w = sg->weights; w; w = w->seg_next, i++) {
		struct state_weight *sw = &rec.weights[i];

		memcpy(sw->key, w->key, 32);
		memcpy(sw->digest, w->digest, 32);
		sw->dtype = w->dtype;
		sw->ndim = w->ndim;
		memcpy(sw->shape, w->shape, sizeof(sw->shape));
		sw->nbytes = w->nbytes;
		sw->offset = w->offset;
		sw->label = w->label;
	}
	rec.n_weights = i;
	r = state_write(c->p.state_dir, c->instance, &rec, err);
	free(rec.weights);
	return r;
}

static void seg_destroy(struct cache *c, struct cache_segment *sg, bool unlink_segment)
{
	struct cache_segment **pp;

	if (sg->idle)
		c->idle_segments--;
	if (unlink_segment && sg->created) {
		wd_segment_unlink(sg->seg.name);
		state_remove(c->p.state_dir, c->instance, sg->seg.name);
	}
	if (sg->created)
		c->segment_bytes -= sg->seg.size;
	wd_segment_close(&sg->seg);
	for (pp = &c->seg_by_id[id_hash(sg->id, SEG_BUCKETS)]; *pp; pp = &(*pp)->id_next)
		if (*pp == sg) {
			*pp = sg->id_next;
			break;
		}
	for (pp = &c->dirty; *pp; pp = &(*pp)->dirty_next)
		if (*pp == sg) {
			*pp = sg->dirty_next;
			break;
		}
	if (sg->prev)
		sg->prev->next = sg->next;
	else
		c->segments = sg->next;
	if (sg->next)
		sg->next->prev = sg->prev;
	c->n_segments--;
	free(sg);
}

/* Rewrite the records of segments that lost weights (once per segment per batch of evictions). */
static void flush_dirty(struct cache *c)
{
	while (c->dirty) {
		struct cache_segment *sg = c->dirty;
		struct wd_error err;

		c->dirty = sg->dirty_next;
		sg->dirty = false;
		wd_error_clear(&err);
		if (seg_write_state(c, sg, &err) < 0)
			log_warn("%s (segment %s will be dropped after a restart)", err.msg,
				 sg->seg.name);
	}
}

/* --- weights ---------------------------------------------------------------------------- */

/* Hash a new weight by key and handle and put it in its segment. */
static void insert(struct cache *c, struct weight *w)
{
	struct cache_segment *sg = w->segment;

	if (c->count + 1 > c->nbuckets)
		rehash(c);
	w->key_next = c->by_key[key_hash(w->key, c->nbuckets)];
	c->by_key[key_hash(w->key, c->nbuckets)] = w;
	w->id_next = c->by_id[id_hash(w->id, c->nbuckets)];
	c->by_id[id_hash(w->id, c->nbuckets)] = w;
	c->count++;
	w->seg_prev = NULL;
	w->seg_next = sg->weights;
	if (sg->weights)
		sg->weights->seg_prev = w;
	sg->weights = w;
	sg->n_weights++;
}

static void lru_remove(struct cache *c, struct weight *w)
{
	if (!w->in_lru)
		return;
	c->evictable -= w->nbytes;
	c->idle_weights--;
	if (w->lru_prev)
		w->lru_prev->lru_next = w->lru_next;
	else
		c->lru_head = w->lru_next;
	if (w->lru_next)
		w->lru_next->lru_prev = w->lru_prev;
	else
		c->lru_tail = w->lru_prev;
	w->lru_prev = w->lru_next = NULL;
	w->in_lru = false;
}

static void lru_append(struct cache *c, struct weight *w)
{
	w->lru_next = NULL;
	w->lru_prev = c->lru_tail;
	if (c->lru_tail)
		c->lru_tail->lru_next = w;
	else
		c->lru_head = w;
	c->lru_tail = w;
	w->in_lru = true;
	c->evictable += w->nbytes;
	c->idle_weights++;
}

static void unhash(struct cache *c, struct weight *w)
{
	struct weight **pp;

	for (pp = &c->by_key[key_hash(w->key, c->nbuckets)]; *pp; pp = &(*pp)->key_next)
		if (*pp == w) {
			*pp = w->key_next;
			break;
		}
	for (pp = &c->by_id[id_hash(w->id, c->nbuckets)]; *pp; pp = &(*pp)->id_next)
		if (*pp == w) {
			*pp = w->id_next;
			break;
		}
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
	if (w->seg_prev)
		w->seg_prev->seg_next = w->seg_next;
	else
		sg->weights = w->seg_next;
	if (w->seg_next)
		w->seg_next->seg_prev = w->seg_prev;
	sg->n_weights--;
	if (w->refs)
		sg->held--; /* cannot happen for an evicted weight; kept consistent at shutdown */
	c->resident -= w->nbytes;
	c->count--;
	if (sg->n_weights == 0 && sg->n_jobs == 0) {
		seg_destroy(c, sg, evict);
	} else {
		if (evict) {
			if (wd_segment_punch(&sg->seg, w->offset, w->nbytes) < 0)
				log_debug("could not punch %s out of %s", w->label, sg->seg.name);
			if (!sg->dirty && c->p.state_dir[0]) {
				sg->dirty = true;
				sg->dirty_next = c->dirty;
				c->dirty = sg;
			}
		}
		seg_update_idle(c, sg);
	}
	csource_unref(w->csource);
	free(w->label);
	free(w);
}

void cache_free(struct cache *c, bool unlink_segments)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nbuckets; i++)
		while (c->by_key[i])
			weight_destroy(c, c->by_key[i], unlink_segments);
	while (c->segments)
		seg_destroy(c, c->segments, unlink_segments);
	if (c->scratch_ok)
		wd_scratch_free(&c->scratch);
	free(c->by_key);
	free(c->by_id);
	free(c);
}

void cache_hold(struct cache *c, struct weight *w)
{
	if (w->refs++ == 0) {
		lru_remove(c, w);
		w->segment->held++;
		seg_update_idle(c, w->segment);
	}
}

static void evict_one(struct cache *c, struct weight *w, const char *why)
{
	log_info("evicting %s (%llu bytes) %s", w->label, (unsigned long long)w->nbytes, why);
	if (c->p.stats)
		c->p.stats->evictions++;
	weight_destroy(c, w, true);
}

/*
 * Keep the weights and segments nobody holds within their counts. Over the segment limit, the
 * idle segment whose weight was released longest ago goes whole (evicting only single weights
 * might empty no segment at all).
 */
static uint64_t enforce_idle(struct cache *c)
{
	uint64_t n = 0;

	while (c->p.max_idle_weights && c->idle_weights > c->p.max_idle_weights && c->lru_head) {
		evict_one(c, c->lru_head, "(max_idle_weights)");
		n++;
	}
	while (c->p.max_idle_segments && c->idle_segments > c->p.max_idle_segments) {
		struct weight *w = c->lru_head;
		struct cache_segment *sg;

		while (w && !w->segment->idle)
			w = w->lru_next;
		if (!w)
			break;
		sg = w->segment;
		while (sg->weights) {
			struct weight *x = sg->weights;
			bool last = sg->n_weights == 1;

			evict_one(c, x, "(max_idle_segments)");
			n++;
			if (last)
				break; /* the segment went with its last weight */
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
	seg_update_idle(c, w->segment);
	/* A weight of a removed source or an old generation can never be asked for again (its key
	 * names files the catalog no longer serves): give its memory back now. */
	if (w->csource && w->csource->state == CSOURCE_REMOVED) {
		log_debug("dropping %s: its checkpoint generation is gone", w->label);
		weight_destroy(c, w, true);
		flush_dirty(c);
		return;
	}
	lru_append(c, w);
	enforce_idle(c);
}

uint64_t cache_drop_stale(struct cache *c)
{
	uint64_t n = 0;
	struct weight *w = c->lru_head, *next;

	for (; w; w = next) {
		next = w->lru_next;
		if (w->csource && w->csource->state == CSOURCE_REMOVED) {
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
static int exhausted(struct cache *c, uint64_t need, const char *what, struct wd_error *err)
{
	uint64_t room = cache_room(c);

	wd_error_set(err, WD_E_EXHAUSTED,
		     "resource exhausted: %s needs %llu bytes but only %llu of the %llu-byte budget "
		     "are available (%llu bytes are held by clients, preloaded or being materialized)",
		     what, (unsigned long long)need, (unsigned long long)room,
		     (unsigned long long)c->budget, (unsigned long long)(c->resident - c->evictable));
	err->expected = (int64_t)(need > INT64_MAX ? INT64_MAX : need);
	err->actual = (int64_t)room;
	return -WD_E_EXHAUSTED;
}

/*
 * Make room for `need` bytes, evicting unreferenced weights least-recently-released first. When
 * even evicting every unreferenced weight would not make room, nothing is evicted and the error
 * names the bytes needed and available.
 */
static int reserve(struct cache *c, uint64_t need, const char *what, struct wd_error *err)
{
	if (need > cache_room(c))
		return exhausted(c, need, what, err);
	while (c->resident + need > c->budget)
		evict_one(c, c->lru_head, "to make room");
	flush_dirty(c);
	c->resident += need;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* /dev/shm refused the reservation: say how much it has left, in the structured fields too. */
static void shm_full_error(struct job *j, int e)
{
	struct statvfs sv;
	uint64_t avail = 0;

	if (statvfs("/dev/shm", &sv) == 0)
		avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	wd_error_set(&j->err, WD_E_EXHAUSTED,
		     "resource exhausted: %s needs %llu bytes of shared memory but /dev/shm has only "
		     "%llu bytes free (%s)", wd_plan_label(j->plan), (unsigned long long)j->nbytes,
		     (unsigned long long)avail, strerror(e));
	j->err.expected = (int64_t)j->nbytes;
	j->err.actual = (int64_t)avail;
}

/* Worker thread: reserve the weight's range, fill and hash it. Touches nothing but the job (the
 * segment's fd is copied into it and stays open until every job of the segment is done). */
static void job_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct job *j = (struct job *)t;
	struct wd_sink sink;
	uint64_t t0 = now_ns();
	int r, e;

	wd_error_clear(&j->err);
	if (!scratch) {
		j->status = wd_error_set(&j->err, WD_E_EXHAUSTED, "no memory for read buffers");
		return;
	}
	e = wd_segment_reserve(j->fd, j->offset, j->nbytes);
	if (e) {
		if (e == ENOSPC || e == EFBIG)
			shm_full_error(j, e);
		else
			wd_error_set(&j->err, WD_E_IO, "reserving %llu bytes of shared memory for %s: %s",
				     (unsigned long long)j->nbytes, wd_plan_label(j->plan),
				     strerror(e));
		j->status = -j->err.code;
		goto fail;
	}
	r = wd_sink_init(&sink, j->fd, j->nbytes);
	if (r < 0) {
		wd_error_set(&j->err, r, "cannot start a SHA-256 digest");
		goto fail_r;
	}
	sink.base = j->offset;
	sink.progress = &j->progress;
	/* The digest is computed on the worker's hasher thread, behind the writes. */
	wd_sink_pipeline(&sink, scratch->hasher);
	r = wd_plan_execute(j->plan, &sink, scratch, &j->bytes_read, &j->err);
	if (r < 0) {
		wd_sink_abort(&sink);
		goto fail_r;
	}
	r = wd_sink_finish(&sink, j->digest, &j->err);
	if (r < 0)
		goto fail_r;
	j->ns = now_ns() - t0;
	j->status = 0;
	return;
fail_r:
	j->status = r;
fail:
	/* give back whatever of the range was reserved */
	if (j->nbytes)
		fallocate(j->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)j->offset,
			  (off_t)j->nbytes);
}

static void job_free(struct job *j)
{
	for (size_t i = 0; i < j->n_sources; i++)
		csource_unref(j->sources[i]);
	free(j->sources);
	wd_plan_free(j->plan);
	free(j);
}

static struct job *find_job(const struct cache *c, const uint8_t *key)
{
	for (struct job *j = c->jobs_by_key[key_hash(key, JOB_BUCKETS)]; j; j = j->hash_next)
		if (memcmp(j->key, key, 32) == 0)
			return j;
	return NULL;
}

static void job_link(struct cache *c, struct job *j)
{
	size_t h = key_hash(j->key, JOB_BUCKETS);

	j->prev = NULL;
	j->key_next = c->jobs;
	if (c->jobs)
		c->jobs->prev = j;
	c->jobs = j;
	j->hash_next = c->jobs_by_key[h];
	c->jobs_by_key[h] = j;
}

static void job_unlink(struct cache *c, struct job *j)
{
	if (j->prev)
		j->prev->key_next = j->key_next;
	else
		c->jobs = j->key_next;
	if (j->key_next)
		j->key_next->prev = j->prev;
	for (struct job **pp = &c->jobs_by_key[key_hash(j->key, JOB_BUCKETS)]; *pp;
	     pp = &(*pp)->hash_next)
		if (*pp == j) {
			*pp = j->hash_next;
			break;
		}
}

/*
 * The last job of a segment is done: drop write access and record the segment with the weights
 * that were made (or drop it when none was).
 */
static void seg_filled(struct cache *c, struct cache_segment *sg)
{
	struct wd_error err;

	wd_segment_seal(&sg->seg);
	if (sg->n_weights == 0) {
		seg_destroy(c, sg, true);
		return;
	}
	wd_error_clear(&err);
	if (seg_write_state(c, sg, &err) < 0)
		log_warn("%s (its weights are served, but will be rebuilt after a restart)", err.msg);
	seg_update_idle(c, sg);
}

/* Main thread: turn a finished job into a weight and tell everyone who waited. */
static void job_done(struct pool_task *t)
{
	struct job *j = (struct job *)t;
	struct cache *c = j->cache;
	struct cache_segment *sg = j->segment;
	struct weight *w = NULL;
	struct waiter *wt, *next;

	job_unlink(c, j);
	if (c->p.stats) {
		c->p.stats->in_flight--;
		c->p.stats->bytes_read += j->bytes_read;
	}
	if (j->status == 0) {
		w = calloc(1, sizeof(*w));
		if (w)
			w->label = strdup(wd_plan_label(j->plan));
		if (!w || !w->label) {
			free(w);
			w = NULL;
			wd_error_set(&j->err, WD_E_EXHAUSTED, "out of memory recording a weight");
		}
	}
	if (w) {
		w->id = c->next_id++;
		memcpy(w->key, j->key, 32);
		memcpy(w->digest, j->digest, 32);
		w->dtype = wd_plan_dtype(j->plan);
		w->ndim = wd_plan_ndim(j->plan);
		if (w->ndim)
			memcpy(w->shape, wd_plan_shape(j->plan), sizeof(uint64_t) * (size_t)w->ndim);
		w->nbytes = j->nbytes;
		w->segment = sg;
		w->offset = j->offset;
		if (j->n_sources) {
			w->csource = j->sources[0];
			csource_ref(w->csource);
			snprintf(w->source, sizeof(w->source), "%s", w->csource->name);
			w->generation = w->csource->generation;
		}
		insert(c, w);
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
		lru_append(c, w);
	} else {
		c->resident -= j->nbytes;
		if (c->p.stats)
			c->p.stats->materializations_failed++;
		log_info("materializing %s failed: %s", wd_plan_label(j->plan), j->err.msg);
	}
	for (wt = j->waiters; wt; wt = next) {
		/* the reads are charged to the request that started the job, not to those that joined */
		uint64_t charged = wt->next ? 0 : j->bytes_read;

		next = wt->next;
		if (w) {
			cache_hold(c, w);
			wt->cb(w, NULL, charged, wt->arg);
		} else {
			wt->cb(NULL, &j->err, charged, wt->arg);
		}
		free(wt);
	}
	job_free(j);
	/* Counted down only now: while the callbacks run (and may drop w, or evict neighbours),
	 * the job keeps the segment alive and busy. */
	if (--sg->n_jobs == 0 && sg->created)
		seg_filled(c, sg);
	enforce_idle(c);
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
 * A weight re-adopted after a restart knows its checkpoint only by name. The first request that
 * matches its key (and so reads the same files) gives it the catalog entry, so that a later
 * reload replacing that checkpoint drops it like any weight of the old generation.
 */
static void claim_source(struct weight *w, struct csource *cs)
{
	if (w->csource || !cs)
		return;
	w->csource = cs;
	csource_ref(cs);
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
		return -WD_E_EXHAUSTED;
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
	sg = seg_alloc(c);
	if (!sg)
		return NULL;
	memcpy(sg->group, g, n_sources * sizeof(*g));
	sg->n_group = n_sources;
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
static void seg_fail_queued(struct cache *c, struct cache_segment *sg, const struct wd_error *err)
{
	while (sg->queued) {
		struct job *j = sg->queued;

		sg->queued = j->queue_next;
		j->status = -err->code;
		j->err = *err;
		if (c->p.stats)
			c->p.stats->in_flight++; /* job_done takes it back */
		job_done(&j->task);
	}
	if (sg->n_jobs == 0)
		seg_destroy(c, sg, false);
}

void cache_pack_end(struct cache *c, struct cache_pack *pk)
{
	if (!pk)
		return;
	for (size_t i = 0; i < pk->n_all; i++) {
		struct cache_segment *sg = pk->all[i];
		struct wd_error err;
		struct stat st;
		char name[WD_SEGMENT_NAME_MAX];
		int r = -WD_E_INVALID;

		wd_error_clear(&err);
		/* a random name taken by someone else is retried with another */
		for (int attempt = 0; attempt < 4 && r == -WD_E_INVALID; attempt++) {
			if (segment_name(c, name, sizeof(name)) < 0) {
				r = wd_error_set(&err, WD_E_IO, "no randomness for a segment name");
				break;
			}
			wd_error_clear(&err);
			r = wd_segment_create_sparse(name, sg->used, &sg->seg, &err);
		}
		if (r < 0) {
			log_warn("%s", err.msg);
			seg_fail_queued(c, sg, &err); /* and destroys the segment */
			continue;
		}
		if (fstat(sg->seg.ro_fd, &st) == 0)
			sg->ino = (uint64_t)st.st_ino;
		sg->created = true;
		c->segment_bytes += sg->seg.size;
		while (sg->queued) {
			struct job *j = sg->queued;

			sg->queued = j->queue_next;
			if (c->p.stats)
				c->p.stats->in_flight++;
			job_start(c, j); /* without a pool this may finish the segment */
		}
	}
	free(pk->open);
	free(pk->all);
	free(pk);
}

int cache_request(struct cache *c, struct cache_pack *pack, struct wd_plan *plan,
		  struct csource *const *sources, size_t n_sources, cache_cb cb, void *arg,
		  struct weight **ret_w, struct wd_error *err)
{
	const uint8_t *key = wd_plan_key(plan);
	struct weight *w = find_key(c, key);
	struct cache_pack *own = NULL;
	struct cache_segment *sg;
	struct waiter *wt;
	struct job *j;
	int r;

	if (w) {
		cache_hold(c, w);
		claim_source(w, n_sources ? sources[0] : NULL);
		wd_plan_free(plan);
		*ret_w = w;
		return 1;
	}
	if (n_sources > 16) {
		wd_plan_free(plan);
		return wd_error_set(err, WD_E_TOO_LARGE, "a recipe may read at most 16 checkpoints");
	}
	wt = calloc(1, sizeof(*wt));
	if (!wt) {
		wd_plan_free(plan);
		return wd_error_set(err, WD_E_EXHAUSTED, "out of memory");
	}
	wt->cb = cb;
	wt->arg = arg;
	j = find_job(c, key);
	if (j) {
		wt->next = j->waiters;
		j->waiters = wt;
		wd_plan_free(plan);
		return 0;
	}
	j = calloc(1, sizeof(*j));
	if (j)
		j->sources = calloc(n_sources ? n_sources : 1, sizeof(*j->sources));
	if (!pack)
		pack = own = cache_pack_begin(c);
	if (!j || !j->sources || !pack) {
		if (j)
			free(j->sources);
		free(j);
		free(wt);
		free(own);
		wd_plan_free(plan);
		return wd_error_set(err, WD_E_EXHAUSTED, "out of memory");
	}
	j->plan = plan;
	j->nbytes = wd_plan_nbytes(plan);
	r = reserve(c, j->nbytes, wd_plan_label(plan), err);
	if (r < 0) {
		free(wt);
		job_free(j);
		free(own);
		return r;
	}
	sg = pack_place(c, pack, sources, n_sources, j->nbytes, &j->offset);
	if (!sg) {
		c->resident -= j->nbytes;
		free(wt);
		job_free(j);
		free(own);
		return wd_error_set(err, WD_E_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < n_sources; i++) {
		j->sources[i] = sources[i];
		csource_ref(sources[i]);
		j->n_sources++;
	}
	j->cache = c;
	memcpy(j->key, key, 32);
	j->waiters = wt;
	j->segment = sg;
	j->fd = -1;
	j->task.work = job_work;
	j->task.done = job_done;
	sg->n_jobs++;
	j->queue_next = sg->queued;
	sg->queued = j;
	job_link(c, j);
	if (own)
		cache_pack_end(c, own);
	return 0;
}

struct weight *cache_find(struct cache *c, const uint8_t key[32])
{
	return find_key(c, key);
}

struct weight *cache_lookup(struct cache *c, const uint8_t key[32], struct csource *cs)
{
	struct weight *w = find_key(c, key);

	if (w) {
		cache_hold(c, w);
		claim_source(w, cs);
	}
	return w;
}

bool cache_in_flight(const struct cache *c, const uint8_t key[32])
{
	return find_job(c, key) != NULL;
}

int cache_check_room(struct cache *c, uint64_t need, const char *what, struct wd_error *err)
{
	return need > cache_room(c) ? exhausted(c, need, what, err) : 0;
}

uint64_t cache_evict_all(struct cache *c, uint64_t *ret_bytes)
{
	uint64_t n = 0;

	while (c->lru_head) {
		*ret_bytes += c->lru_head->nbytes;
		if (c->p.stats)
			c->p.stats->evictions++;
		weight_destroy(c, c->lru_head, true);
		n++;
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
	for (struct cache_segment *sg = c->segments; sg; sg = sg->next)
		if (sg->created)
			fn(sg, arg);
}

void cache_foreach_job(struct cache *c, void (*fn)(const struct cache_job_info *j, void *arg),
		       void *arg)
{
	for (struct job *j = c->jobs; j; j = j->key_next) {
		struct cache_job_info info = {
			.key = j->key,
			.label = wd_plan_label(j->plan),
			.nbytes = j->nbytes,
			.done = __atomic_load_n(&j->progress, __ATOMIC_RELAXED),
		};
		fn(&info, arg);
	}
}

size_t cache_job_count(const struct cache *c)
{
	size_t n = 0;

	for (const struct job *j = c->jobs; j; j = j->key_next)
		n++;
	return n;
}

uint64_t cache_resident(const struct cache *c) { return c->resident; }
uint64_t cache_budget(const struct cache *c) { return c->budget; }
uint64_t cache_count(const struct cache *c) { return c->count; }
uint64_t cache_segment_count(const struct cache *c) { return c->n_segments; }
uint64_t cache_segment_bytes(const struct cache *c) { return c->segment_bytes; }
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

/* SHA-256 of [off, off + size) of a segment read through its fd (pread: nothing is mapped). */
static int range_digest(int fd, uint64_t off, uint64_t size, uint8_t out[32])
{
	struct wd_sha256 h;
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	uint64_t done = 0;
	int r = -WD_E_IO;

	if (!buf || wd_sha256_init(&h) < 0) {
		free(buf);
		return -WD_E_EXHAUSTED;
	}
	while (done < size) {
		size_t want = size - done < cap ? (size_t)(size - done) : cap;
		ssize_t n = pread(fd, buf, want, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			wd_sha256_abort(&h);
			goto out;
		}
		wd_sha256_update(&h, buf, (size_t)n);
		done += (uint64_t)n;
	}
	wd_sha256_final(&h, out);
	r = 0;
out:
	free(buf);
	return r;
}

int cache_adopt(struct cache *c, const struct state_segment *rec)
{
	struct cache_segment *sg;
	struct wd_error err;
	struct stat st;
	int took = 0;

	sg = seg_alloc(c);
	if (!sg)
		return -WD_E_EXHAUSTED;
	wd_error_clear(&err);
	/* The index vouches for this name: same size, and (when recorded) the very inode it filled. */
	if (wd_segment_adopt(rec->segment, &sg->seg, &err) < 0 || sg->seg.size != rec->size ||
	    (rec->ino && (fstat(sg->seg.ro_fd, &st) < 0 || (uint64_t)st.st_ino != rec->ino))) {
		if (err.code == WD_E_EXHAUSTED)
			log_warn("not re-adopting %s: %s", rec->segment, err.msg);
		seg_destroy(c, sg, false);
		return -WD_E_CHANGED;
	}
	sg->ino = rec->ino;
	sg->created = true;
	sg->adopted = true;
	sg->used = sg->seg.size;
	c->segment_bytes += sg->seg.size;
	snprintf(sg->source, sizeof(sg->source), "%s", rec->source);
	sg->generation = rec->generation;
	for (size_t i = 0; i < rec->n_weights; i++) {
		const struct state_weight *sw = &rec->weights[i];
		struct weight *w;

		if (find_key(c, sw->key))
			continue;
		if (c->p.verify_adopted) {
			uint8_t digest[32];

			if (range_digest(sg->seg.ro_fd, sw->offset, sw->nbytes, digest) < 0 ||
			    memcmp(digest, sw->digest, 32) != 0) {
				log_warn("not re-adopting %s from %s: its bytes do not have the recorded "
					 "SHA-256", sw->label, rec->segment);
				continue;
			}
		}
		w = calloc(1, sizeof(*w));
		if (w)
			w->label = strdup(sw->label);
		if (!w || !w->label) {
			free(w);
			break;
		}
		w->id = c->next_id++;
		memcpy(w->key, sw->key, 32);
		memcpy(w->digest, sw->digest, 32);
		w->dtype = sw->dtype;
		w->ndim = sw->ndim;
		memcpy(w->shape, sw->shape, sizeof(w->shape));
		w->nbytes = sw->nbytes;
		w->segment = sg;
		w->offset = sw->offset;
		snprintf(w->source, sizeof(w->source), "%s", rec->source);
		w->generation = rec->generation;
		w->adopted = true;
		insert(c, w);
		c->resident += w->nbytes;
		lru_append(c, w);
		if (c->p.stats)
			c->p.stats->readoptions++;
		took++;
	}
	if (took == 0) {
		seg_destroy(c, sg, false);
		return 0;
	}
	seg_update_idle(c, sg);
	if ((size_t)took != rec->n_weights && c->p.state_dir[0] && !sg->dirty) {
		sg->dirty = true; /* the record lists weights that were not taken */
		sg->dirty_next = c->dirty;
		c->dirty = sg;
	}
	return took;
}

uint64_t cache_trim(struct cache *c)
{
	uint64_t n = 0;

	while (c->resident > c->budget && c->lru_head) {
		evict_one(c, c->lru_head, "(over the budget after re-adoption)");
		n++;
	}
	n += enforce_idle(c);
	flush_dirty(c);
	return n;
}
