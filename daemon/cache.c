/* cache.c - weights by key and by handle, the memory budget with LRU eviction, and the jobs that
 * fill new segments on the worker pool. Main thread only, except job_work. */
#include "cache.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "fill.h"
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
	uint64_t temp;               /* heap temporaries it may allocate, counted while it runs */
	uint64_t progress;           /* bytes written so far: the worker stores, status loads */
	char name[WD_SEGMENT_NAME_MAX];
	struct state_record rec;     /* filled on the main thread; the worker adds the digest */
	const char *state_dir, *instance;
	/* result, written by the worker */
	int status;
	struct wd_error err;
	struct wd_segment seg;
	enum wd_digest_alg alg;      /* chosen on the main thread (config) */
	uint8_t digest[WD_DIGEST_MAX];
	uint64_t bytes_read;
	uint64_t ns;
	struct job *batch_next;      /* the next job of its batch (small weights share a task) */
	/* who waits (the request that started the job is the last in the list) */
	struct waiter *waiters;
	struct job *key_next;        /* the list of jobs in flight */
	struct job *prev;
	struct job *hash_next;       /* the chain of its bucket in jobs_by_key */
};

/* Jobs in flight are found by key through a fixed hash (a unit of 65,536 new weights starts
 * that many jobs: a list scanned per request would be quadratic). */
#define JOB_BUCKETS 4096

struct waiter {
	cache_cb cb;
	void *arg;
	struct waiter *next;
};

/*
 * Small weights are filled in batches: one pool task runs several jobs in sequence, so a unit of
 * thousands of tiny tensors costs a few hand-offs, not one per tensor. A batch collects the small
 * jobs requested in one turn of the event loop (flushed by a deferred event) or until it is full.
 */
#define BATCH_SMALL (1u << 20)        /* a weight of at most this many bytes joins a batch */
#define BATCH_MAX_BYTES (16u << 20)
#define BATCH_MAX_JOBS 256

struct batch {
	struct pool_task task;       /* first */
	struct job *head, *tail;
	size_t n;
	uint64_t bytes;
};

struct cache {
	struct daemon *d;
	struct batch *batch;         /* collecting, not yet submitted */
	struct event *flush_ev;
	uint64_t budget;
	uint64_t resident;           /* finished weights + reservations of running jobs */
	uint64_t evictable;          /* bytes of the weights on the LRU list (nobody holds them) */
	uint64_t count;
	uint64_t next_id;
	size_t nbuckets;
	struct weight **by_key, **by_id;
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

struct cache *cache_new(struct daemon *d, uint64_t budget_bytes)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->d = d;
	c->budget = budget_bytes;
	c->next_id = 1;
	c->nbuckets = 1024;
	c->by_key = calloc(c->nbuckets, sizeof(*c->by_key));
	c->by_id = calloc(c->nbuckets, sizeof(*c->by_id));
	if (!c->by_key || !c->by_id) {
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

static void lru_append(struct cache *c, struct weight *w);
static void job_free(struct job *j);

/* Hash a new weight by key and handle. */
static void insert(struct cache *c, struct weight *w)
{
	if (c->count + 1 > c->nbuckets)
		rehash(c);
	w->key_next = c->by_key[key_hash(w->key, c->nbuckets)];
	c->by_key[key_hash(w->key, c->nbuckets)] = w;
	w->id_next = c->by_id[id_hash(w->id, c->nbuckets)];
	c->by_id[id_hash(w->id, c->nbuckets)] = w;
	c->count++;
}

static void lru_remove(struct cache *c, struct weight *w)
{
	if (!w->in_lru)
		return;
	c->evictable -= w->nbytes;
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

/* Remove a weight from the cache and free it. Clients mapping it keep their memory. */
static void weight_destroy(struct cache *c, struct weight *w, bool unlink_segment)
{
	lru_remove(c, w);
	unhash(c, w);
	if (unlink_segment) {
		/* only a name of ours: a record that slipped through never gets a foreign name deleted */
		if (wd_segment_name_matches(c->d->instance, w->seg.name))
			wd_segment_unlink(w->seg.name);
		state_remove(c->d->cfg->state_dir, c->d->instance, w->key);
	}
	wd_segment_close(&w->seg);
	c->resident -= w->nbytes;
	c->count--;
	csource_unref(w->csource);
	free(w->label);
	free(w);
}

void cache_free(struct cache *c, bool unlink_segments)
{
	if (!c)
		return;
	/* A batch still collecting never reached a worker: its jobs and waiters go unanswered. */
	if (c->batch) {
		struct job *j, *next;
		for (j = c->batch->head; j; j = next) {
			struct waiter *wt, *wn;
			next = j->batch_next;
			for (wt = j->waiters; wt; wt = wn) {
				wn = wt->next;
				free(wt);
			}
			job_free(j);
		}
		free(c->batch);
	}
	if (c->flush_ev)
		event_free(c->flush_ev);
	for (size_t i = 0; i < c->nbuckets; i++)
		while (c->by_key[i])
			weight_destroy(c, c->by_key[i], unlink_segments);
	free(c->by_key);
	free(c->by_id);
	free(c);
}

void cache_hold(struct cache *c, struct weight *w)
{
	if (w->refs++ == 0)
		lru_remove(c, w);
}

void cache_drop(struct cache *c, struct weight *w)
{
	if (w->refs == 0) {
		log_err("internal: weight %llu released more often than held", (unsigned long long)w->id);
		return;
	}
	if (--w->refs)
		return;
	/* A weight of a removed source or an old generation can never be asked for again (its key
	 * names files the catalog no longer serves): give its memory back now. */
	if (w->csource && w->csource->state == CSOURCE_REMOVED) {
		log_debug("dropping %s: its checkpoint generation is gone", w->label);
		weight_destroy(c, w, true);
		return;
	}
	lru_append(c, w);
}

uint64_t cache_drop_stale(struct cache *c)
{
	uint64_t n = 0;
	struct weight *w = c->lru_head, *next;

	for (; w; w = next) {
		next = w->lru_next;
		if (w->csource && w->csource->state == CSOURCE_REMOVED) {
			log_debug("dropping %s: its checkpoint generation is gone", w->label);
			weight_destroy(c, w, true);
			n++;
		}
	}
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
	while (c->resident + need > c->budget) {
		struct weight *w = c->lru_head;

		log_info("evicting %s (%llu bytes) to make room", w->label,
			 (unsigned long long)w->nbytes);
		c->d->stats.evictions++;
		weight_destroy(c, w, true);
	}
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
static void shm_full_error(struct job *j)
{
	struct statvfs sv;
	char why[sizeof(j->err.msg)];
	uint64_t avail;

	if (statvfs("/dev/shm", &sv) < 0)
		return;
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (avail >= j->nbytes)
		return; /* not space: out of descriptors, and the message says so */
	snprintf(why, sizeof(why), "%s", j->err.msg);
	wd_error_set(&j->err, WD_E_EXHAUSTED,
		     "resource exhausted: %s needs %llu bytes of shared memory but /dev/shm has only "
		     "%llu bytes free (%s)", wd_plan_label(j->plan), (unsigned long long)j->nbytes,
		     (unsigned long long)avail, why);
	j->err.expected = (int64_t)j->nbytes;
	j->err.actual = (int64_t)avail;
}

/*
 * Create the job's segment and size it with ftruncate rather than reserve it with
 * posix_fallocate. The fill
 * writes every byte with pwrite, which allocates pages as it goes and reports a full /dev/shm
 * as ENOSPC, a clean error (nothing writes through a mapping, so there is no SIGBUS to avoid);
 * reserving first cost about 10% more CPU per byte filled (measured 0.71-0.75 against 0.62-0.69
 * CPU-s per GiB for pread+pwrite alone) and, for a weight filled by several workers, a serial
 * pass before they could start. /dev/shm's free space is checked here, so a full one still
 * fails before anything is read; one that fills up meanwhile fails that write.
 */
static int segment_open(struct job *j)
{
	struct statvfs sv;
	int r, e;

	if (statvfs("/dev/shm", &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < j->nbytes)
		return wd_error_set(&j->err, WD_E_EXHAUSTED, "/dev/shm is full");
	/* A random name (segment.c): the key is not in it, so nobody can take it first. */
	r = wd_segment_create_unique(j->instance, 0, &j->seg, &j->err);
	if (r < 0)
		return r;
	snprintf(j->name, sizeof(j->name), "%s", j->seg.name);
	snprintf(j->rec.segment, sizeof(j->rec.segment), "%s", j->seg.name);
	if (ftruncate(j->seg.fd, (off_t)j->nbytes) == 0) {
		j->seg.size = j->nbytes;
		return 0;
	}
	e = errno;
	r = wd_error_set(&j->err, e == EFBIG || e == ENOSPC ? WD_E_EXHAUSTED : WD_E_IO,
			 "segment %s: cannot make it %llu bytes: %s", j->name,
			 (unsigned long long)j->nbytes, strerror(e));
	wd_segment_close(&j->seg);
	wd_segment_unlink(j->name);
	return r;
}

/* Worker thread: create, fill, hash and seal the segment. Touches nothing but the job (and the
 * pool, to post helpers). */
static void job_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct job *j = (struct job *)t;
	struct stat st;
	uint64_t t0 = now_ns();
	int r;

	wd_error_clear(&j->err);
	j->seg.fd = j->seg.ro_fd = -1;
	if (!scratch) {
		j->status = wd_error_set(&j->err, WD_E_EXHAUSTED, "no memory for read buffers");
		return;
	}
	r = segment_open(j);
	if (r < 0) {
		j->status = r;
		if (r == -WD_E_EXHAUSTED)
			shm_full_error(j);
		return;
	}
	r = fill_weight(j->cache->d->pool, j->plan, j->seg.fd, 0, j->nbytes, j->alg, &j->progress,
			scratch, j->digest, &j->bytes_read, &j->err);
	if (r < 0)
		goto fail;
	wd_segment_seal(&j->seg);
	memcpy(j->rec.digest, j->digest, wd_digest_len(j->alg));
	j->rec.digest_alg = j->alg;
	if (fstat(j->seg.ro_fd, &st) == 0)
		j->rec.ino = (uint64_t)st.st_ino;
	if (state_write(j->state_dir, j->instance, &j->rec, &j->err) < 0)
		log_warn("%s (the weight is served, but will be rebuilt after a restart)", j->err.msg);
	j->ns = now_ns() - t0;
	j->status = 0;
	return;
fail:
	j->status = r;
	wd_segment_close(&j->seg);
	wd_segment_unlink(j->name);
}

/* Worker thread: the jobs of a batch, one after another. */
static void batch_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct batch *b = (struct batch *)t;

	for (struct job *j = b->head; j; j = j->batch_next)
		job_work(&j->task, scratch);
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

/* Main thread: turn a finished job into a weight and tell everyone who waited. */
static void job_done(struct pool_task *t)
{
	struct job *j = (struct job *)t;
	struct cache *c = j->cache;
	struct weight *w = NULL;
	struct waiter *wt, *next;

	job_unlink(c, j);
	c->d->stats.in_flight--;
	c->d->stats.temp_bytes -= j->temp;
	if (t->cancelled) {
		/* skipped by the pool at shutdown: no segment was made */
		wd_error_clear(&j->err);
		j->status = wd_error_set(&j->err, WD_E_CANCELLED,
					 "weightd is stopping: materializing %s was cancelled before "
					 "it started", wd_plan_label(j->plan));
	}
	c->d->stats.bytes_read += j->bytes_read;
	if (j->status == 0) {
		w = calloc(1, sizeof(*w));
		if (w)
			w->label = strdup(wd_plan_label(j->plan));
		if (!w || !w->label) {
			free(w);
			w = NULL;
			wd_error_set(&j->err, WD_E_EXHAUSTED, "out of memory recording a weight");
			wd_segment_close(&j->seg);
			wd_segment_unlink(j->name);
		}
	}
	if (w) {
		w->id = c->next_id++;
		memcpy(w->key, j->key, 32);
		memcpy(w->digest, j->digest, wd_digest_len(j->alg));
		w->digest_alg = j->alg;
		w->dtype = wd_plan_dtype(j->plan);
		w->ndim = wd_plan_ndim(j->plan);
		if (w->ndim)
			memcpy(w->shape, wd_plan_shape(j->plan), sizeof(uint64_t) * (size_t)w->ndim);
		w->nbytes = j->nbytes;
		w->seg = j->seg;
		if (j->n_sources) {
			w->csource = j->sources[0];
			csource_ref(w->csource);
			snprintf(w->source, sizeof(w->source), "%s", w->csource->name);
			w->generation = w->csource->generation;
		}
		insert(c, w);
		c->d->stats.materializations++;
		c->d->stats.bytes_materialized += w->nbytes;
		c->d->stats.materialize_ns += j->ns;
		log_debug("materialized %s: %llu bytes in %.3f s, %llu read", w->label,
			  (unsigned long long)w->nbytes, (double)j->ns / 1e9,
			  (unsigned long long)j->bytes_read);
		/* The reservation becomes the weight's bytes (resident unchanged). Nobody holds it
		 * until the waiters take their references below. */
		lru_append(c, w);
	} else {
		c->resident -= j->nbytes;
		c->d->stats.materializations_failed++;
		if (t->cancelled)
			log_debug("%s", j->err.msg);
		else
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
}

/* Main thread: each job of a finished batch, then the batch. */
static void batch_done(struct pool_task *t)
{
	struct batch *b = (struct batch *)t;
	struct job *j, *next;

	for (j = b->head; j; j = next) {
		next = j->batch_next;
		j->task.cancelled = b->task.cancelled;   /* skipped whole at shutdown */
		job_done(&j->task);
	}
	free(b);
}

static void batch_submit(struct cache *c)
{
	struct batch *b = c->batch;

	if (!b)
		return;
	c->batch = NULL;
	if (b->n == 1) {             /* a lone small job needs no batch */
		pool_submit(c->d->pool, &b->head->task);
		free(b);
		return;
	}
	b->task.work = batch_work;
	b->task.done = batch_done;
	b->task.jobs = (unsigned)b->n;
	log_debug("a batch of %zu small weights (%llu bytes) goes to one worker", b->n,
		  (unsigned long long)b->bytes);
	pool_submit(c->d->pool, &b->task);
}

static void batch_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	batch_submit(arg);
}

/*
 * Main thread: start a job. Small ones join the batch being collected, which goes to the pool
 * when full or at the end of this turn of the event loop; if no batch can be had (memory, no
 * event), the job goes alone.
 */
static void job_start(struct cache *c, struct job *j)
{
	struct batch *b = c->batch;

	if (j->nbytes > BATCH_SMALL)
		goto alone;
	if (!c->flush_ev)
		c->flush_ev = event_new(c->d->base, -1, 0, batch_flush_cb, c);
	if (!b && c->flush_ev) {
		b = calloc(1, sizeof(*b));
		if (b) {
			c->batch = b;
			event_active(c->flush_ev, EV_TIMEOUT, 1);
		}
	}
	if (!b)
		goto alone;
	if (b->tail)
		b->tail->batch_next = j;
	else
		b->head = j;
	b->tail = j;
	b->n++;
	b->bytes += j->nbytes;
	if (b->n >= BATCH_MAX_JOBS || b->bytes >= BATCH_MAX_BYTES)
		batch_submit(c);
	return;
alone:
	pool_submit(c->d->pool, &j->task);
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

/*
 * Recipe temporaries live on the heap, outside the shared-memory budget: all running jobs
 * together may hold max_temp of them (the budget's size when unset). A job that would pass it
 * fails at once with the figures, rather than growing the daemon past what was configured.
 */
static int temp_check(struct cache *c, uint64_t temp, const char *label, struct wd_error *err)
{
	uint64_t limit = c->d->cfg->max_temp_bytes ? c->d->cfg->max_temp_bytes : c->budget;
	uint64_t used = c->d->stats.temp_bytes;

	if (!temp || (temp <= limit && used <= limit - temp))
		return 0;
	if (err) {
		err->expected = (int64_t)(limit - (used < limit ? used : limit));
		err->actual = (int64_t)temp;
	}
	return wd_error_set(err, WD_E_EXHAUSTED,
			    "resource exhausted: %s needs %llu bytes of working memory but only %llu of "
			    "max_temp (%llu bytes) are free (%llu in use by running materializations)",
			    label, (unsigned long long)temp,
			    (unsigned long long)(used < limit ? limit - used : 0),
			    (unsigned long long)limit, (unsigned long long)used);
}

int cache_request(struct cache *c, struct wd_plan *plan, struct csource *const *sources,
		  size_t n_sources, cache_cb cb, void *arg, struct weight **ret_w,
		  struct wd_error *err)
{
	const uint8_t *key = wd_plan_key(plan);
	struct weight *w = find_key(c, key);
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
	if (!j || !j->sources) {
		if (j)
			free(j);
		free(wt);
		wd_plan_free(plan);
		return wd_error_set(err, WD_E_EXHAUSTED, "out of memory");
	}
	j->plan = plan;
	j->nbytes = wd_plan_nbytes(plan);
	j->temp = wd_plan_temp_bytes(plan);
	r = temp_check(c, j->temp, wd_plan_label(plan), err);
	if (r == 0)
		r = reserve(c, j->nbytes, wd_plan_label(plan), err);
	if (r < 0) {
		free(wt);
		job_free(j);
		return r;
	}
	for (size_t i = 0; i < n_sources; i++) {
		j->sources[i] = sources[i];
		csource_ref(sources[i]);
		j->n_sources++;
	}
	j->cache = c;
	memcpy(j->key, key, 32);
	j->waiters = wt;
	j->state_dir = c->d->cfg->state_dir;
	j->instance = c->d->instance;
	memcpy(j->rec.key, key, 32);
	j->rec.dtype = wd_plan_dtype(plan);
	j->rec.ndim = wd_plan_ndim(plan);
	if (j->rec.ndim)
		memcpy(j->rec.shape, wd_plan_shape(plan), sizeof(uint64_t) * (size_t)j->rec.ndim);
	j->rec.nbytes = j->nbytes;
	snprintf(j->rec.label, sizeof(j->rec.label), "%s", wd_plan_label(plan));
	if (n_sources) {
		snprintf(j->rec.source, sizeof(j->rec.source), "%s", sources[0]->name);
		j->rec.generation = sources[0]->generation;
	}
	j->task.work = job_work;
	j->task.done = job_done;
	j->alg = c->d->cfg->digest ? c->d->cfg->digest : WD_DIGEST_DEFAULT;
	job_link(c, j);
	c->d->stats.in_flight++;
	c->d->stats.temp_bytes += j->temp;
	job_start(c, j);
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
		c->d->stats.evictions++;
		weight_destroy(c, c->lru_head, true);
		n++;
	}
	return n;
}

void cache_foreach(struct cache *c, void (*fn)(struct weight *w, void *arg), void *arg)
{
	for (size_t i = 0; i < c->nbuckets; i++)
		for (struct weight *w = c->by_key[i]; w; w = w->key_next)
			fn(w, arg);
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
			.sources = j->sources,
			.n_sources = j->n_sources,
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

uint64_t cache_resident(const struct cache *c)
{
	return c->resident;
}

uint64_t cache_budget(const struct cache *c)
{
	return c->budget;
}

uint64_t cache_set_budget(struct cache *c, uint64_t budget_bytes)
{
	c->budget = budget_bytes;
	return cache_trim(c);
}

uint64_t cache_count(const struct cache *c)
{
	return c->count;
}

uint64_t cache_references(const struct cache *c)
{
	uint64_t n = 0;

	for (size_t i = 0; i < c->nbuckets; i++)
		for (struct weight *w = c->by_key[i]; w; w = w->key_next)
			n += w->refs;
	return n;
}

/* The content digest (algorithm alg) of a whole segment read through its fd (pread: nothing is
 * mapped). */
static int segment_digest(int fd, uint64_t size, enum wd_digest_alg alg, uint8_t *out)
{
	struct wd_content h;
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	uint64_t off = 0;
	int r = -WD_E_IO;

	if (!buf || wd_content_init(&h, alg) < 0) {
		free(buf);
		return -WD_E_EXHAUSTED;
	}
	while (off < size) {
		size_t want = size - off < cap ? (size_t)(size - off) : cap;
		ssize_t n = pread(fd, buf, want, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			wd_content_abort(&h);
			goto out;
		}
		wd_content_update(&h, buf, (size_t)n);
		off += (uint64_t)n;
	}
	wd_content_final(&h, out);
	r = 0;
out:
	free(buf);
	return r;
}

int cache_adopt(struct cache *c, const struct state_record *rec)
{
	struct weight *w;
	struct wd_error err;
	struct stat st;

	if (find_key(c, rec->key))
		return -WD_E_INVALID;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -WD_E_EXHAUSTED;
	wd_error_clear(&err);
	w->seg.fd = w->seg.ro_fd = -1;
	/* The index vouches for this name: same size, and (when recorded) the very inode it filled. */
	if (wd_segment_adopt(rec->segment, &w->seg, &err) < 0 || w->seg.size != rec->nbytes ||
	    (rec->ino && (fstat(w->seg.ro_fd, &st) < 0 || (uint64_t)st.st_ino != rec->ino))) {
		wd_segment_close(&w->seg);
		free(w);
		return -WD_E_CHANGED;
	}
	/* A record keeps the algorithm it was hashed with, whatever the configuration says now:
	 * the weight is checked and served with that digest. */
	if (c->d->cfg->verify_adopted) {
		uint8_t digest[WD_DIGEST_MAX];

		if (segment_digest(w->seg.ro_fd, w->seg.size, rec->digest_alg, digest) < 0 ||
		    memcmp(digest, rec->digest, wd_digest_len(rec->digest_alg)) != 0) {
			log_warn("not re-adopting %s (%s): its bytes do not have the recorded %s digest",
				 rec->segment, rec->label, wd_digest_name(rec->digest_alg));
			wd_segment_close(&w->seg);
			free(w);
			return -WD_E_CHANGED;
		}
	}
	w->label = strdup(rec->label);
	if (!w->label) {
		wd_segment_close(&w->seg);
		free(w);
		return -WD_E_EXHAUSTED;
	}
	w->id = c->next_id++;
	memcpy(w->key, rec->key, 32);
	memcpy(w->digest, rec->digest, sizeof(w->digest));
	w->digest_alg = rec->digest_alg;
	w->dtype = rec->dtype;
	w->ndim = rec->ndim;
	memcpy(w->shape, rec->shape, sizeof(w->shape));
	w->nbytes = rec->nbytes;
	snprintf(w->source, sizeof(w->source), "%s", rec->source);
	w->generation = rec->generation;
	w->adopted = true;
	insert(c, w);
	c->resident += w->nbytes;
	lru_append(c, w);
	c->d->stats.readoptions++;
	return 0;
}

uint64_t cache_trim(struct cache *c)
{
	uint64_t n = 0;

	while (c->resident > c->budget && c->lru_head) {
		c->d->stats.evictions++;
		weight_destroy(c, c->lru_head, true);
		n++;
	}
	return n;
}
