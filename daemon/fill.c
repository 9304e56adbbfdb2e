/* SPDX-License-Identifier: Apache-2.0 */
/* fill.c - new weights' bytes into their segment: chunks of a large one claimed by several
 * workers at once, a run of small ones from one read, or one in-order stream, each byte through
 * a sink (sink.c) that writes and hashes it; a stored weight of a remote checkpoint in parallel
 * ranges straight into the segment, hashed where it landed. Worker threads only. */
#include "fill.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "remote.h"
#include "source.h"

#define FILL_MAX_HELPERS 15

struct fill;

/* remote_concurrency and remote_chunk, as fills read them (atomics: set on the main thread). */
static unsigned remote_conc = WD_REMOTE_CONCURRENCY_DEFAULT;
static uint64_t remote_chunk = WD_REMOTE_CHUNK_DEFAULT;
static uint64_t remote_gap = WD_REMOTE_GAP_DEFAULT;

void fill_remote_set(unsigned concurrency, uint64_t chunk, uint64_t gap)
{
	wd_remote_set_limit(concurrency);
	__atomic_store_n(&remote_conc, concurrency, __ATOMIC_RELAXED);
	__atomic_store_n(&remote_chunk, chunk, __ATOMIC_RELAXED);
	__atomic_store_n(&remote_gap, gap, __ATOMIC_RELAXED);
}

struct fill_helper {
	struct pool_task task;       /* first: the pool hands back this pointer */
	struct fill *f;
	bool finished;               /* under f->lock */
};

/* One weight being filled in chunks; lives on the stack of the worker that called fill_weight. */
struct fill {
	struct pool *pool;
	const struct wd_plan *plan;
	int fd;
	uint64_t base, nbytes;
	enum wd_digest_alg alg;
	uint64_t *progress;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t nchunks, next;      /* next: the first chunk nobody has claimed */
	uint8_t *digests;            /* nchunks digests, in order */
	int status;                  /* the first failure */
	weightd_error err;
	uint64_t bytes_read;
	unsigned nhelpers;
	struct fill_helper helper[FILL_MAX_HELPERS];
	/* a remote recipe too large to stage whole, one input of which is large: each chunk
	 * stages its share of that input, and the small ones whole (stage_slice); NULL: none */
	struct wd_plan_span *slices;
	size_t n_slices, big;
};

static void stage_slice(struct fill *f, uint64_t off, uint64_t len, struct wd_scratch *scratch,
			struct fill_stage *st);
static void stage_release(struct fill_stage *st);

/*
 * Claim and fill chunks until none is left or one failed. Any worker thread. Between two chunks
 * the worker serves another owner's task that is due before this fill's (pool_yield): a chunk is
 * how long a large fill makes a small request of another uid wait.
 */
static void fill_chunks(struct fill *f, struct wd_scratch *scratch)
{
	size_t dlen = wd_digest_len(f->alg);
	bool first = true;

	for (;;) {
		struct wd_sink sink;
		weightd_error err;
		uint64_t i, off, len, read = 0;
		int r;

		if (!first) {
			bool more;

			pthread_mutex_lock(&f->lock);
			more = f->status == 0 && f->next < f->nchunks;
			pthread_mutex_unlock(&f->lock);
			if (!more)
				return;
			pool_yield(f->pool, scratch);
		}
		first = false;
		pthread_mutex_lock(&f->lock);
		i = f->status == 0 && f->next < f->nchunks ? f->next++ : f->nchunks;
		pthread_mutex_unlock(&f->lock);
		if (i == f->nchunks)
			return;
		off = i * WD_DIGEST_CHUNK;
		len = f->nbytes - off < WD_DIGEST_CHUNK ? f->nbytes - off : WD_DIGEST_CHUNK;
		wd_error_clear(&err);
		r = wd_sink_init_range(&sink, f->fd, f->base + off, len, f->alg);
		if (r < 0) {
			wd_error_set(&err, r, "cannot start a %s digest", wd_digest_name(f->alg));
		} else {
			struct fill_stage st = { .fd = -1 };

			if (f->slices)
				stage_slice(f, off, len, scratch, &st);
			sink.progress = f->progress;
			r = wd_plan_execute_range(f->plan, off, len, &sink, scratch, &read, &err);
			stage_release(&st);
			if (r < 0)
				wd_sink_abort(&sink);
			else
				r = wd_sink_finish(&sink, f->digests + i * dlen, &err);
		}
		pthread_mutex_lock(&f->lock);
		f->bytes_read += read;
		if (r < 0 && f->status == 0) {
			f->status = r;
			f->err = err;
		}
		pthread_mutex_unlock(&f->lock);
	}
}

/* A helper posted to the pool: fills chunks with its own worker's scratch, then says so. */
static void helper_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct fill_helper *h = (struct fill_helper *)t;
	struct fill *f = h->f;

	if (scratch)
		fill_chunks(f, scratch);
	pthread_mutex_lock(&f->lock);
	h->finished = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static int fill_parallel(struct fill *f, struct pool *pool, struct wd_scratch *scratch,
			 uint8_t *ret_digest, uint64_t *ret_bytes_read, weightd_error *err)
{
	unsigned n = pool_threads(pool) - 1;
	int r;

	f->nchunks = wd_content_chunks(f->nbytes);
	f->digests = calloc(f->nchunks, wd_digest_len(f->alg));
	if (!f->digests)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "no memory for %llu chunk digests",
				    (unsigned long long)f->nchunks);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	if (n > FILL_MAX_HELPERS)
		n = FILL_MAX_HELPERS;
	if (n > f->nchunks - 1)
		n = (unsigned)(f->nchunks - 1);
	for (unsigned i = 0; i < n; i++) {
		f->helper[i].f = f;
		f->helper[i].task.work = helper_work;
		f->helper[i].task.done = NULL;
		pool_help(pool, &f->helper[i].task);
	}
	f->nhelpers = n;
	log_debug("filling %s in %llu chunks, with up to %u helper(s)", wd_plan_label(f->plan),
		  (unsigned long long)f->nchunks, n);
	fill_chunks(f, scratch);
	/* Every chunk is claimed: helpers not started yet are not needed; wait for the others. */
	for (unsigned i = 0; i < f->nhelpers; i++) {
		if (pool_withdraw(pool, &f->helper[i].task))
			continue;
		pthread_mutex_lock(&f->lock);
		while (!f->helper[i].finished)
			pthread_cond_wait(&f->cond, &f->lock);
		pthread_mutex_unlock(&f->lock);
	}
	*ret_bytes_read += f->bytes_read;
	r = f->status;
	if (r < 0) {
		if (err)
			*err = f->err;
	} else {
		r = wd_content_compose(f->alg, f->digests, f->nchunks, ret_digest);
		if (r < 0)
			wd_error_set(err, r, "cannot compose the chunk digests");
	}
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f->digests);
	return r;
}

/* In order on this worker, hashing SHA-256 on its hasher thread (which only that helps). */
static int fill_sequential(struct fill *f, struct wd_scratch *scratch, uint8_t *ret_digest,
			   uint64_t *ret_bytes_read, weightd_error *err)
{
	struct wd_sink sink;
	int r = wd_sink_init_range(&sink, f->fd, f->base, f->nbytes, f->alg);

	if (r < 0)
		return wd_error_set(err, r, "cannot start a %s digest", wd_digest_name(f->alg));
	sink.progress = f->progress;
	wd_sink_pipeline(&sink, scratch->hasher);
	r = wd_plan_execute(f->plan, &sink, scratch, ret_bytes_read, err);
	if (r < 0) {
		wd_sink_abort(&sink);
		return r;
	}
	return wd_sink_finish(&sink, ret_digest, err);
}

/* A weight fetched from a remote object straight into its segment, digested chunk by chunk as
 * each chunk lands. */
/* What a remote fill waiting on a stalled server may do meanwhile: the first member of the
 * structs its callbacks get. */
struct remote_yield {
	struct pool *pool; /* NULL: nothing (tests without a pool) */
	struct wd_scratch *scratch;
	const struct wd_remote *waits_on; /* the location that stalls */
};

struct fill_remote {
	struct remote_yield y;
	int fd;
	uint64_t base, nbytes;
	enum wd_digest_alg alg;
	struct wd_hash hash;
	uint8_t *digests;	 /* one per WD_DIGEST_CHUNK chunk, in order */
	struct wd_hash *streams; /* per chunk while it arrives (a chunk in one request), or NULL */
};

/*
 * stalled: nothing has arrived for a while (a slow or hung server). Run the next queued task
 * that does not wait on the same location, of any owner (pool_yield_stalled), so that a hung
 * server holds this worker from nobody, its own uid's local gets and other stores' included;
 * the transfers resume after it.
 */
static void remote_stalled(void *arg)
{
	struct remote_yield *y = arg;
	uint64_t until = wd_clock_ms() + WD_REMOTE_STALL_MS;

	/* tasks queued meanwhile, one after another, for about as long as the stall was noticed
	 * after (a store that comes back waits that long at most) */
	while (y->pool && y->scratch && pool_yield_stalled(y->pool, y->scratch, y->waits_on) &&
	       wd_clock_ms() < until)
		;
}

/* range_data: bytes of chunk i just written, in order: hash them while they are in cache. */
static int remote_chunk_data(void *arg, size_t i, const void *data, size_t n, weightd_error *err)
{
	struct fill_remote *fr = arg;
	struct wd_hash *h = &fr->streams[i];
	int r;

	if (fr->alg == WD_DIGEST_NONE)
		return 0;
	if (!h->state && (r = wd_hash_init(h, fr->alg)) < 0)
		return wd_error_set(err, r, "cannot start a %s digest", wd_digest_name(fr->alg));
	wd_hash_update(h, data, n);
	return 0;
}

/* range_done: chunk i of the weight is in the segment; hash it from there. */
static int remote_chunk_landed(void *arg, size_t i, weightd_error *err)
{
	struct fill_remote *fr = arg;
	uint64_t off = (uint64_t)i * WD_DIGEST_CHUNK;
	uint64_t len = fr->nbytes - off < WD_DIGEST_CHUNK ? fr->nbytes - off : WD_DIGEST_CHUNK;

	if (fr->alg == WD_DIGEST_NONE)
		return 0;
	if (fr->streams) {
		struct wd_hash *h = &fr->streams[i];
		int r;
		if (!h->state && (r = wd_hash_init(h, fr->alg)) < 0) /* an empty chunk */
			return wd_error_set(err, r, "cannot start a %s digest",
					    wd_digest_name(fr->alg));
		wd_hash_digest(h, fr->digests + i * wd_digest_len(fr->alg));
		wd_hash_free(h);
		return 0;
	}
	wd_hash_reset(&fr->hash);
	for (uint64_t at = 0; at < len;) {
		size_t want =
			len - at < fr->y.scratch->cap ? (size_t)(len - at) : fr->y.scratch->cap;
		ssize_t n = pread(fr->fd, fr->y.scratch->buf, want, (off_t)(fr->base + off + at));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wd_error_set(err, WEIGHTD_E_IO, "reading back shared memory: %s",
					    n < 0 ? strerror(errno) : "short read");
		wd_hash_update(&fr->hash, fr->y.scratch->buf, (size_t)n);
		at += (uint64_t)n;
	}
	wd_hash_digest(&fr->hash, fr->digests + i * wd_digest_len(fr->alg));
	return 0;
}

/*
 * A weight that is one byte range of a remote object as stored: its chunks of WD_DIGEST_CHUNK
 * bytes are fetched as ranges of remote_chunk bytes over up to remote_concurrency connections
 * (the node's limit shared with every other fill), each written into the segment as it
 * arrives. The digest is of what landed, composed as fill_parallel composes its chunks: with
 * remote_chunk of at least WD_DIGEST_CHUNK each chunk is one request, hashed as its bytes
 * arrive (in cache, no second pass); with smaller ranges a chunk arrives in several pieces at
 * once and is hashed from the segment as soon as it is whole, while the rest arrives. No
 * helper is posted: the transfers wait on the network, not on a core, and one worker drives
 * them all.
 */
static int fill_from_remote(struct fill *f, const struct wd_source *src, uint32_t file,
			    uint64_t off, struct wd_scratch *scratch, uint8_t *ret_digest,
			    uint64_t *ret_bytes_read, weightd_error *err)
{
	struct fill_remote fr = { .y = { f->pool, scratch, wd_source_remote(src) },
				  .fd = f->fd,
				  .base = f->base,
				  .nbytes = f->nbytes,
				  .alg = f->alg };
	struct wd_remote_fetch_opts fo = {
		.concurrency = __atomic_load_n(&remote_conc, __ATOMIC_RELAXED),
		.chunk = __atomic_load_n(&remote_chunk, __ATOMIC_RELAXED),
		.progress = f->progress,
		.range_done = remote_chunk_landed,
		.stalled = remote_stalled,
		.arg = &fr,
	};
	uint64_t nchunks = wd_content_chunks(f->nbytes);
	struct wd_remote_range *ranges = calloc(nchunks, sizeof(*ranges));
	size_t dlen = wd_digest_len(f->alg);
	int r;

	fr.digests = calloc(nchunks, dlen ? dlen : 1);
	if (fo.chunk >= WD_DIGEST_CHUNK && f->alg != WD_DIGEST_NONE) {
		fr.streams = calloc(nchunks, sizeof(*fr.streams));
		fo.range_data = remote_chunk_data;
		if (!fr.streams)
			fr.digests = (free(fr.digests), NULL);
	}
	if (!ranges || !fr.digests) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				 "no memory for %llu ranges of a remote weight",
				 (unsigned long long)nchunks);
		goto out;
	}
	if (f->alg != WD_DIGEST_NONE && !fr.streams && (r = wd_hash_init(&fr.hash, f->alg)) < 0) {
		wd_error_set(err, r, "cannot start a %s digest", wd_digest_name(f->alg));
		goto out;
	}
	for (uint64_t i = 0; i < nchunks; i++) {
		uint64_t at = i * WD_DIGEST_CHUNK;
		ranges[i] = (struct wd_remote_range){
			.off = off + at,
			.len = f->nbytes - at < WD_DIGEST_CHUNK ? f->nbytes - at : WD_DIGEST_CHUNK,
			.fd = f->fd,
			.fd_off = f->base + at,
		};
	}
	log_debug("fetching %s (%llu bytes) from %s in ranges of %llu bytes, up to %u at once",
		  wd_plan_label(f->plan), (unsigned long long)f->nbytes, wd_source_name(src),
		  (unsigned long long)fo.chunk, fo.concurrency);
	r = wd_remote_fetch(wd_source_remote(src), wd_source_remote_object(src, file), ranges,
			    (size_t)nchunks, &fo, err);
	if (r == 0) {
		*ret_bytes_read += f->nbytes;
		if (f->alg == WD_DIGEST_NONE)
			r = 0;
		else if ((r = wd_content_compose(f->alg, fr.digests, (size_t)nchunks, ret_digest)) <
			 0)
			wd_error_set(err, r, "cannot compose the chunk digests");
	}
out:
	for (uint64_t i = 0; fr.streams && i < nchunks; i++)
		wd_hash_free(&fr.streams[i]); /* those a failure left open */
	free(fr.streams);
	wd_hash_free(&fr.hash);
	free(fr.digests);
	free(ranges);
	return r;
}

/* ---- a recipe's remote inputs, fetched together before it runs ------------------------------ */

/* Room max_temp leaves for staging (the cache sets it as its temporaries come and go), and what
 * stages hold now, all workers together (atomics). */
static uint64_t stage_room = UINT64_MAX;
static uint64_t stage_used;
/* Is a stage open on this thread? fill_weight then opens none of its own. */
static __thread bool stage_open;

void fill_stage_room(uint64_t room)
{
	__atomic_store_n(&stage_room, room, __ATOMIC_RELAXED);
}

uint64_t fill_stage_used(void)
{
	return __atomic_load_n(&stage_used, __ATOMIC_RELAXED);
}

static bool stage_reserve(uint64_t n)
{
	uint64_t used = __atomic_load_n(&stage_used, __ATOMIC_RELAXED), room;

	do {
		room = __atomic_load_n(&stage_room, __ATOMIC_RELAXED);
		if (n > room || used > room - n)
			return false;
	} while (!__atomic_compare_exchange_n(&stage_used, &used, used + n, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return true;
}

bool fill_stage_wanted(const struct fill_part *p)
{
	const struct wd_source *src;
	uint32_t file;
	uint64_t off;

	if (!p->out.size || wd_plan_file_range(p->plan, &src, &file, &off))
		return false; /* a stored weight: fetched as it is, not through a stage */
	for (size_t i = 0; i < wd_plan_source_count(p->plan); i++)
		if (wd_source_is_remote(wd_plan_source(p->plan, i)))
			return true;
	return false;
}

/* A span to stage, and the location it is fetched from. */
struct sspan {
	struct wd_stage_span s;
	struct wd_remote *remote;
};

static int sspan_cmp(const void *a, const void *b)
{
	const struct wd_stage_span *x = &((const struct sspan *)a)->s,
				   *y = &((const struct sspan *)b)->s;
	uintptr_t ox = (uintptr_t)x->obj, oy = (uintptr_t)y->obj;

	if (ox != oy)
		return ox < oy ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return 0;
}

/* Sort v[0..n) by object and offset, and merge spans that overlap or touch: an input several
 * recipes read is then one span, fetched once. Returns the count left. */
static size_t sspans_merge(struct sspan *v, size_t n)
{
	size_t k = 0;

	qsort(v, n, sizeof(*v), sspan_cmp);
	for (size_t i = 0; i < n; i++) {
		struct wd_stage_span *last = k ? &v[k - 1].s : NULL;
		const struct wd_stage_span *x = &v[i].s;

		if (last && last->obj == x->obj && x->off <= last->off + last->len) {
			if (x->off + x->len > last->off + last->len)
				last->len = x->off + x->len - last->off;
			continue;
		}
		v[k++] = v[i];
	}
	return k;
}

/* The remote spans plan reads, appended to *v (grown), their bytes added to *bytes. */
static int sspans_add(const struct wd_plan *plan, struct sspan **v, size_t *n, size_t *cap,
		      uint64_t *bytes)
{
	struct wd_plan_span *ps;
	size_t np;

	if (wd_plan_spans(plan, &ps, &np) < 0)
		return -1;
	for (size_t i = 0; i < np; i++) {
		if (!wd_source_is_remote(ps[i].src))
			continue;
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 64;
			struct sspan *nv = realloc(*v, c * sizeof(**v));

			if (!nv) {
				free(ps);
				return -1;
			}
			*v = nv;
			*cap = c;
		}
		(*v)[(*n)++] = (struct sspan){
			.s = { .obj = wd_source_remote_object(ps[i].src, ps[i].file),
			       .off = ps[i].off,
			       .len = ps[i].len },
			.remote = wd_source_remote(ps[i].src),
		};
		*bytes += ps[i].len;
	}
	free(ps);
	return 0;
}

/* Fetch the spans v[0..n) (at their .at in fd) of each location they name: one coalesced
 * wd_remote_fetch per location. */
static int stage_fetch(struct pool *pool, struct wd_scratch *scratch, int fd,
		       const struct sspan *v, size_t n, uint64_t chunk, weightd_error *err)
{
	struct wd_remote_range *ranges = calloc(n, sizeof(*ranges));
	struct remote_yield y = { pool, scratch, NULL };
	struct wd_remote_fetch_opts fo = {
		.concurrency = __atomic_load_n(&remote_conc, __ATOMIC_RELAXED),
		.chunk = chunk,
		.coalesce = true,
		.gap = __atomic_load_n(&remote_gap, __ATOMIC_RELAXED),
		.stalled = remote_stalled,
		.arg = &y,
	};
	int r = 0;

	if (!ranges)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "no memory for %zu ranges",
				    n);
	for (size_t i = 0; i < n && r == 0; i++) {
		size_t m = 0, j;

		for (j = 0; j < i && v[j].remote != v[i].remote; j++)
			;
		if (j < i)
			continue; /* its location was fetched with an earlier span's */
		for (j = i; j < n; j++)
			if (v[j].remote == v[i].remote)
				ranges[m++] = (struct wd_remote_range){ .off = v[j].s.off,
									.len = v[j].s.len,
									.fd = fd,
									.fd_off = v[j].s.at,
									.obj = v[j].s.obj };
		y.waits_on = v[i].remote;
		r = wd_remote_fetch(v[i].remote, NULL, ranges, m, &fo, err);
	}
	free(ranges);
	return r;
}

/*
 * Stage v[0..ns) (v is sorted and merged here) into st, whose fd is -1: room reserved, a memfd,
 * one coalesced fetch per location in requests of at most `chunk` bytes, the registration.
 * `what` names them in the log. 0 when staged; -1 when not (nothing held).
 */
static int stage_spans(struct pool *pool, struct wd_scratch *scratch, struct sspan *v, size_t ns,
		       uint64_t chunk, const char *what, struct fill_stage *st)
{
	uint64_t total = 0;
	weightd_error err;

	ns = sspans_merge(v, ns);
	for (size_t i = 0; i < ns; i++) {
		v[i].s.at = total;
		total += v[i].s.len;
	}
	if (!stage_reserve(total)) {
		log_debug("no room left in max_temp to fetch %s together (%llu bytes); they read "
			  "as they go",
			  what, (unsigned long long)total);
		return -1;
	}
	st->bytes = total;
	st->spans = malloc(ns * sizeof(*st->spans));
	st->fd = memfd_create("weightd-stage", MFD_CLOEXEC);
	wd_error_clear(&err);
	if (!st->spans || st->fd < 0 || ftruncate(st->fd, (off_t)total) < 0) {
		log_debug("cannot stage %s: %s", what,
			  st->spans ? strerror(errno) : "out of memory");
		goto undo;
	}
	if (stage_fetch(pool, scratch, st->fd, v, ns, chunk, &err) < 0) {
		/* the recipes read as they go, and report what is wrong themselves */
		log_debug("fetching %s together failed: %s", what, err.message);
		goto undo;
	}
	for (size_t i = 0; i < ns; i++)
		st->spans[i] = v[i].s;
	st->reg = wd_source_remote_stage(st->fd, st->spans, ns);
	if (!st->reg)
		goto undo;
	log_debug("fetched %s together: %zu ranges, %llu bytes", what, ns,
		  (unsigned long long)total);
	return 0;
undo:
	stage_release(st);
	return -1;
}

size_t fill_stage_begin(struct pool *pool, const struct fill_part *parts, size_t n,
			struct wd_scratch *scratch, struct fill_stage *st)
{
	struct sspan *v = NULL;
	size_t ns = 0, cap = 0, k, prev_n;
	uint64_t raw = 0, prev_raw;
	char what[64];

	memset(st, 0, sizeof(*st));
	st->fd = -1;
	st->was_open = stage_open;
	stage_open = true;
	/* the parts from the first while their inputs fit one stage (counted before merging) */
	for (k = 0; k < n; k++) {
		if (!fill_stage_wanted(&parts[k]))
			continue;
		prev_n = ns;
		prev_raw = raw;
		if (sspans_add(parts[k].plan, &v, &ns, &cap, &raw) < 0 || raw > FILL_STAGE_MAX) {
			ns = prev_n;
			raw = prev_raw;
			break;
		}
	}
	if (k == 0)
		k = 1; /* the first alone reads more than a stage holds: it reads as it goes */
	snprintf(what, sizeof(what), "the inputs of %zu recipe(s)", k);
	if (ns)
		stage_spans(pool, scratch, v, ns, __atomic_load_n(&remote_chunk, __ATOMIC_RELAXED),
			    what, st);
	free(v);
	return k;
}

/* What st holds given back (the registration first: no read is served from it after). */
static void stage_release(struct fill_stage *st)
{
	wd_source_remote_unstage(st->reg);
	st->reg = NULL;
	free(st->spans);
	st->spans = NULL;
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
	if (st->bytes)
		__atomic_sub_fetch(&stage_used, st->bytes, __ATOMIC_RELAXED);
	st->bytes = 0;
}

void fill_stage_end(struct fill_stage *st)
{
	stage_release(st);
	stage_open = st->was_open;
}

/* Inputs of at most this many bytes are staged whole by every slice (a dequantization's
 * scales); one larger input is what the slices divide. */
#define SLICE_SMALL (4u << 20)
#define SLICE_SMALL_TOTAL (16u << 20)

/*
 * f's plan could not be staged whole: when it reads one large remote input and little else
 * (a cast or dequantization of a large tensor, a shard of it), let each chunk filled in
 * parallel stage its share of it. Output chunk [off, off + len) of an element-wise plan reads
 * that fraction of its input; where a plan reads otherwise, its reads outside the slice are
 * asked of the store as before.
 */
static void slices_plan(struct fill *f)
{
	struct wd_plan_span *ps;
	size_t np, big = SIZE_MAX;
	uint64_t small = 0;

	if (wd_plan_spans(f->plan, &ps, &np) < 0)
		return;
	for (size_t i = 0; i < np; i++) {
		if (!wd_source_is_remote(ps[i].src))
			goto none;
		if (ps[i].len <= SLICE_SMALL) {
			small += ps[i].len;
			continue;
		}
		if (big != SIZE_MAX)
			goto none; /* two large inputs: which part of each a chunk reads is unknown */
		big = i;
	}
	if (big == SIZE_MAX || small > SLICE_SMALL_TOTAL)
		goto none;
	f->slices = ps;
	f->n_slices = np;
	f->big = big;
	return;
none:
	free(ps);
}

/* Stage the share of f's inputs that output chunk [off, off + len) reads (slices_plan). */
static void stage_slice(struct fill *f, uint64_t off, uint64_t len, struct wd_scratch *scratch,
			struct fill_stage *st)
{
	struct sspan *v = calloc(f->n_slices, sizeof(*v));
	uint64_t total = 0, chunk;
	char what[96];

	if (!v)
		return;
	for (size_t i = 0; i < f->n_slices; i++) {
		const struct wd_plan_span *p = &f->slices[i];
		uint64_t lo = 0, hi = p->len;

		if (i == f->big && f->nbytes) {
			lo = (uint64_t)((unsigned __int128)off * p->len / f->nbytes);
			hi = (uint64_t)(((unsigned __int128)(off + len) * p->len + f->nbytes - 1) /
					f->nbytes);
		}
		v[i] = (struct sspan){
			.s = { .obj = wd_source_remote_object(p->src, p->file),
			       .off = p->off + lo,
			       .len = hi - lo },
			.remote = wd_source_remote(p->src),
		};
		total += hi - lo;
	}
	/* a slice is one worker's: spread over a few connections, not one request */
	chunk = __atomic_load_n(&remote_chunk, __ATOMIC_RELAXED);
	if (chunk > total / 4)
		chunk = total / 4;
	if (chunk < (1u << 20))
		chunk = 1u << 20;
	snprintf(what, sizeof(what), "the inputs of bytes %llu-%llu of a recipe",
		 (unsigned long long)off, (unsigned long long)(off + len));
	stage_spans(f->pool, scratch, v, f->n_slices, chunk, what, st);
	free(v);
}

static int fill_in(struct fill *f, struct wd_scratch *scratch, uint8_t *ret_digest,
		   uint64_t *ret_bytes_read, weightd_error *err)
{
	const struct wd_source *src;
	uint32_t file;
	uint64_t off;

	if (f->nbytes && wd_plan_file_range(f->plan, &src, &file, &off) && wd_source_is_remote(src))
		return fill_from_remote(f, src, file, off, scratch, ret_digest, ret_bytes_read,
					err);
	if (f->nbytes > WD_DIGEST_CHUNK && f->pool && pool_threads(f->pool) > 1 &&
	    wd_plan_splittable(f->plan))
		return fill_parallel(f, f->pool, scratch, ret_digest, ret_bytes_read, err);
	return fill_sequential(f, scratch, ret_digest, ret_bytes_read, err);
}

int fill_weight(struct pool *pool, const struct wd_plan *plan, int fd, uint64_t base,
		uint64_t nbytes, enum wd_digest_alg alg, uint64_t *progress,
		struct wd_scratch *scratch, uint8_t *ret_digest, uint64_t *ret_bytes_read,
		weightd_error *err)
{
	struct fill f = { .pool = pool,
			  .plan = plan,
			  .fd = fd,
			  .base = base,
			  .nbytes = nbytes,
			  .alg = alg,
			  .progress = progress };
	const struct fill_part part = { .plan = plan, .out = { .size = nbytes } };
	struct fill_stage st;
	int r;

	if (!scratch)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "no memory for read buffers");
	if (stage_open || !fill_stage_wanted(&part))
		return fill_in(&f, scratch, ret_digest, ret_bytes_read, err);
	/* a recipe over remote inputs: fetched together first, whole or chunk by chunk */
	fill_stage_begin(pool, &part, 1, scratch, &st);
	if (!st.reg && nbytes > WD_DIGEST_CHUNK)
		slices_plan(&f);
	r = fill_in(&f, scratch, ret_digest, ret_bytes_read, err);
	fill_stage_end(&st);
	free(f.slices);
	return r;
}

/* A run of small stored weights of one remote object, fetched together. */
struct remote_run {
	struct remote_yield y;
	const struct fill_part *parts;
	struct wd_hash *streams; /* one per weight while it arrives */
	int fd;
};

static int run_data(void *arg, size_t i, const void *data, size_t n, weightd_error *err)
{
	struct remote_run *rr = arg;
	struct wd_hash *h = &rr->streams[i];
	int r;

	if (rr->parts[i].out.alg == WD_DIGEST_NONE)
		return 0;
	if (!h->state && (r = wd_hash_init(h, rr->parts[i].out.alg)) < 0)
		return wd_error_set(err, r, "cannot start a %s digest",
				    wd_digest_name(rr->parts[i].out.alg));
	wd_hash_update(h, data, n);
	return 0;
}

/* Hash what landed at [off, off + len) of fd into h (a weight that several requests wrote). */
static int hash_back(struct wd_hash *h, int fd, uint64_t off, uint64_t len,
		     struct wd_scratch *scratch, weightd_error *err)
{
	for (uint64_t at = 0; at < len;) {
		size_t want = len - at < scratch->cap ? (size_t)(len - at) : scratch->cap;
		ssize_t n = pread(fd, scratch->buf, want, (off_t)(off + at));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return wd_error_set(err, WEIGHTD_E_IO, "reading back shared memory: %s",
					    n < 0 ? strerror(errno) : "short read");
		wd_hash_update(h, scratch->buf, (size_t)n);
		at += (uint64_t)n;
	}
	return 0;
}

/* range_done of a run: weight i is whole in the segment (every request covering it done). A
 * weight one request read whole was hashed as it arrived; one that straddles two requests got
 * no range_data (its parts arrive out of order) and is hashed from the segment now. */
static int run_done(void *arg, size_t i, weightd_error *err)
{
	struct remote_run *rr = arg;
	const struct wd_sink_part *out = &rr->parts[i].out;
	struct wd_hash *h = &rr->streams[i];
	int r;

	if (out->alg != WD_DIGEST_NONE) {
		if (!h->state) { /* an empty weight, or one that straddles requests */
			if ((r = wd_hash_init(h, out->alg)) < 0)
				return wd_error_set(err, r, "cannot start a %s digest",
						    wd_digest_name(out->alg));
			if ((r = hash_back(h, rr->fd, out->base, out->size, rr->y.scratch, err)) <
			    0)
				return r;
		}
		wd_hash_digest(h, out->digest);
		wd_hash_free(h);
	}
	if (out->progress)
		__atomic_fetch_add(out->progress, out->size, __ATOMIC_RELAXED);
	return 0;
}

static bool remote_part(const struct fill_part *p, const struct wd_source **src, uint32_t *file,
			uint64_t *off)
{
	return p->out.size <= WD_DIGEST_CHUNK && wd_plan_file_range(p->plan, src, file, off) &&
	       wd_source_is_remote(*src);
}

size_t fill_remote_run_length(const struct fill_part *parts, size_t n)
{
	const struct wd_source *src, *s2;
	uint32_t file;
	uint64_t off;
	size_t k = 1;

	if (!n || !remote_part(&parts[0], &src, &file, &off))
		return 0;
	while (k < n && k < FILL_REMOTE_RUN_MAX && remote_part(&parts[k], &s2, &file, &off) &&
	       wd_source_remote(s2) == wd_source_remote(src))
		k++;
	return k;
}

int fill_remote_run(struct pool *pool, int fd, const struct fill_part *parts, size_t n,
		    struct wd_scratch *scratch, weightd_error *err)
{
	struct wd_remote_range *ranges = NULL;
	struct wd_hash *streams = NULL;
	struct remote_run rr = { { pool, scratch, NULL }, parts, NULL, fd };
	struct wd_remote_fetch_opts fo = {
		.concurrency = __atomic_load_n(&remote_conc, __ATOMIC_RELAXED),
		.chunk = __atomic_load_n(&remote_chunk, __ATOMIC_RELAXED),
		.coalesce = true,
		.gap = __atomic_load_n(&remote_gap, __ATOMIC_RELAXED),
		.range_data = run_data,
		.range_done = run_done,
		.stalled = remote_stalled,
		.arg = &rr,
	};
	const struct wd_source *src = NULL, *first = NULL;
	struct wd_remote_counters before, after;
	uint32_t file = 0;
	uint64_t off, total = 0;
	int r;

	if (n > FILL_REMOTE_RUN_MAX || !n || !scratch)
		return wd_error_set(err, WEIGHTD_E_INTERNAL, "a remote run of %zu weights", n);
	ranges = calloc(n, sizeof(*ranges));
	streams = calloc(n, sizeof(*streams));
	rr.streams = streams;
	if (!ranges || !streams) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				 "no memory for a remote run of %zu weights", n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (!remote_part(&parts[i], &src, &file, &off) ||
		    (first && wd_source_remote(src) != wd_source_remote(first))) {
			r = wd_error_set(err, WEIGHTD_E_INTERNAL, "not a run of remote ranges");
			goto out;
		}
		if (!first)
			first = src;
		rr.y.waits_on = wd_source_remote(src);
		ranges[i] = (struct wd_remote_range){ .off = off,
						      .len = parts[i].out.size,
						      .fd = fd,
						      .fd_off = parts[i].out.base,
						      .obj = wd_source_remote_object(src, file) };
		total += parts[i].out.size;
	}
	wd_remote_counters(wd_source_remote(first), &before);
	r = wd_remote_fetch(wd_source_remote(first), NULL, ranges, n, &fo, err);
	for (size_t i = 0; i < n; i++)
		wd_hash_free(&streams[i]);
	if (r == 0) {
		wd_remote_counters(wd_source_remote(first), &after);
		log_debug("fetched %zu weights (%llu bytes) of %s together, in about %llu "
			  "request(s)",
			  n, (unsigned long long)total, wd_source_name(first),
			  (unsigned long long)(after.requests - before.requests));
	}
out:
	free(streams);
	free(ranges);
	return r;
}

static bool part_range(const struct fill_part *p, const struct wd_source **src, uint32_t *file,
		       uint64_t *off)
{
	return p->out.size && wd_plan_file_range(p->plan, src, file, off);
}

size_t fill_run_length(const struct fill_part *parts, size_t n, size_t cap)
{
	const struct wd_source *src, *s2;
	uint32_t file, f2;
	uint64_t off, o2, span;
	size_t k = 1;

	if (!n || !part_range(&parts[0], &src, &file, &off) || parts[0].out.size > cap)
		return 1;
	span = parts[0].out.size;
	for (; k < n && k < FILL_RUN_MAX; k++) {
		const struct wd_sink_part *prev = &parts[k - 1].out, *p = &parts[k].out;

		if (!part_range(&parts[k], &s2, &f2, &o2) || s2 != src || f2 != file ||
		    o2 != off + span || span + p->size > cap || p->base < prev->base + prev->size ||
		    p->base - (prev->base + prev->size) > WD_SINK_GAP_MAX)
			break;
		span += p->size;
	}
	return k;
}

int fill_run(int fd, const struct fill_part *parts, size_t n, struct wd_scratch *scratch,
	     weightd_error *err)
{
	struct wd_sink_part out[FILL_RUN_MAX];
	const struct wd_source *src;
	uint32_t file;
	uint64_t off, span = 0;
	int r;

	if (n > FILL_RUN_MAX || !part_range(&parts[0], &src, &file, &off))
		return wd_error_set(err, WEIGHTD_E_INTERNAL, "not a run of file ranges");
	for (size_t i = 0; i < n; i++) {
		out[i] = parts[i].out;
		span += parts[i].out.size;
	}
	if (span > scratch->cap)
		return wd_error_set(err, WEIGHTD_E_INTERNAL, "a run larger than the read buffer");
	r = wd_source_check(src, file, err);
	if (r == 0)
		r = wd_source_pread(src, file, scratch->buf, (size_t)span, off, err);
	if (r == 0)
		r = wd_source_check(src, file, err);
	if (r == 0)
		r = wd_sink_write_run(fd, scratch->buf, out, n, err);
	if (r == 0)
		wd_source_drop_cache(src, file, off, span);
	if (r == 0)
		log_debug("filled %zu weights (%llu bytes) from one read of %s", n,
			  (unsigned long long)span, wd_source_name(src));
	return r;
}
