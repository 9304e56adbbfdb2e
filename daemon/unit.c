/* SPDX-License-Identifier: Apache-2.0 */
/* unit.c - a unit request's life: its limits in flight, its preflight (unit_preflight.c), the
 * cached weights it takes and the budget it needs, the new weights packed into segments and
 * made, and the all-or-nothing reply (its columns written by unit_columns.c); a request whose
 * client has gone finishes answering nobody. Main thread only. Every step is linear or n log n
 * in the unit's size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "daemon.h"
#include "give.h"
#include "heap.h"
#include "holds.h"
#include "request.h"
#include "session.h"
#include "uid.h"
#include "unit_columns.h"
#include "unit_int.h"
#include "wd_hashidx.h"

/* Heap a unit takes per slot while it is made, about: its output (unit_out), name, plan, job,
 * weight and the entries of the memo and the session's holds. */
#define UNIT_HEAP_PER_SLOT 2048

/* A unit with at most this many entries not found in the cache (a single get, or a unit whose
 * other entries are cached) puts what it makes into the cache's shared arenas: thousands of
 * such requests would otherwise each cost their client a segment (an fd and a mapping). A
 * larger one is packed on its own, its weights together. */
#define UNIT_SHARED_MAX_WEIGHTS 1

static void unit_req_free(struct unit_req *u)
{
	for (size_t i = 0; i < u->n_outs; i++) {
		wd_plan_free(u->outs[i].plan);
		free(u->outs[i].more);
	}
	free(u->names);
	free(u->outs);
	free(u->first);
	free(u);
}

static void unit_req_unlink(struct unit_req *u)
{
	if (!u->s)
		return;
	LIST_REMOVE(u, link);
	holds_pending_done(&u->s->holds, u->new_bytes, u->new_weights);
	holds_unit_memory_done(&u->s->holds, u->memory);
	u->s = NULL;
}

/* The weight WEIGHT_AHEAD entries after entry i, asked for ahead of its use (cache.h). */
static void prefetch_entry(const struct unit_req *u, size_t i, int lines)
{
	if (i + WEIGHT_AHEAD < u->n_entries)
		weight_prefetch(u->outs[i + WEIGHT_AHEAD].w, lines);
}

/* The reply's columns (unit_columns_pack): per entry its weight and its segment's fd (seg_at,
 * the index of the entry's segment in the reply), per alias its entry. */
static int pack_reply(const struct unit_req *u, const uint32_t *seg_at, Weightd__PackedWeights *pw,
		      void **ret_columns)
{
	size_t n_al = u->n_outs - u->n_entries;
	struct weight **ws = malloc(u->n_entries * sizeof(*ws));
	uint32_t *owner = malloc((n_al ? n_al : 1) * sizeof(*owner));
	size_t dims = 0;
	int r = -WEIGHTD_E_RESOURCE_EXHAUSTED;

	if (ws && owner) {
		for (size_t i = 0; i < u->n_entries; i++) {
			prefetch_entry(u, i, 2);
			ws[i] = u->outs[i].w;
			dims += (size_t)ws[i]->ndim;
		}
		for (size_t j = 0; j < n_al; j++)
			owner[j] = (uint32_t)u->outs[u->n_entries + j].owner;
		r = unit_columns_pack(pw, ws, seg_at, u->n_entries, dims, owner, n_al, ret_columns);
	}
	free(ws);
	free(owner);
	return r;
}

/* A reply's segments by address: a wd_hashidx of positions in its array of segments. */
static uint64_t seg_hash(const struct cache_segment *sg)
{
	return (uint64_t)(uintptr_t)sg; /* the index mixes it */
}

static bool seg_eq(const void *ctx, uint32_t pos, const void *key)
{
	struct cache_segment *const *segs = ctx;
	return segs[pos] == key;
}

/* Room for twice as many segments in a reply's four per-segment arrays. */
static int grow_segment_arrays(Weightd__SegmentInfo **si, Weightd__SegmentInfo ***sp, int **fds,
			       struct cache_segment ***segs, size_t *cap)
{
	size_t n = *cap ? 2 * *cap : 16;
	Weightd__SegmentInfo *nsi = realloc(*si, n * sizeof(**si));
	Weightd__SegmentInfo **nsp;
	int *nfds;
	struct cache_segment **nsegs;

	if (!nsi)
		return -1;
	/* sp points into si: moved with it */
	for (size_t i = 0; i < *cap; i++)
		(*sp)[i] = &nsi[i];
	*si = nsi;
	nsp = realloc(*sp, n * sizeof(**sp));
	if (!nsp)
		return -1;
	*sp = nsp;
	nfds = realloc(*fds, n * sizeof(**fds));
	if (!nfds)
		return -1;
	*fds = nfds;
	nsegs = realloc(*segs, n * sizeof(**segs));
	if (!nsegs)
		return -1;
	*segs = nsegs;
	*cap = n;
	return 0;
}

/* Every entry has its weight (or the request failed): answer, all or nothing. The reply carries
 * one fd per distinct segment (found through an index of the segments seen, asked only when an
 * entry's segment is not the previous entry's: linear), and its columns say where in its
 * segment each weight lies. */
struct entry_ctx {
	const struct unit_req *u;
	const uint32_t *seg_at;
};

/* give_fds's view of entry i: its segment in the reply and its weight's range (locked even when
 * the client holds the weight already: it may be letting go of it as this reply leaves). */
static void entry_of(void *arg, size_t i, uint32_t *ret_seg, uint64_t *ret_off, uint64_t *ret_len)
{
	const struct entry_ctx *ec = arg;
	const struct weight *w = ec->u->outs[i].w;

	*ret_seg = ec->seg_at[i];
	*ret_off = w->offset;
	*ret_len = w->nbytes;
}

static void unit_req_finish(struct unit_req *u, struct cache *cache)
{
	struct session *s = u->s;
	bool locks = s && s->d->cfg->hold_locks;
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__UnitReply ur = WEIGHTD__UNIT_REPLY__INIT;
	Weightd__PackedWeights pw;
	Weightd__SegmentInfo *si = NULL, **sp = NULL;
	void *columns = NULL;
	int *fds = NULL;
	struct cache_segment **segs = NULL, *last = NULL;
	struct wd_hashidx seg_index = { NULL, 0 };
	size_t nfds = 0, seg_cap = 0, *held_at = NULL; /* per entry: its index in s->held, or SIZE_MAX */
	uint32_t *seg_at = NULL, last_at = 0;          /* per entry: its segment's index in segs */

	if (!s || s->dead || u->failed) {
		for (size_t i = 0; i < u->n_entries; i++)
			if (u->outs[i].w)
				cache_drop(cache, u->outs[i].w);
		if (s && !s->dead)
			session_send_error(s, u->id, &u->err);
		goto out;
	}
	held_at = malloc(u->n_entries * sizeof(*held_at));
	seg_at = malloc(u->n_entries * sizeof(*seg_at));
	if (!held_at || !seg_at)
		goto oom;
	/* One walk over the weights (each a wait on memory in a large unit): the entries the client
	 * holds already (found now, holding appends so an index found stays), and the segments
	 * (a handful however many entries: their arrays grow with them). */
	for (size_t i = 0; i < u->n_entries; i++) {
		struct weight *w = u->outs[i].w;
		struct cache_segment *sg = w->segment;
		struct held *h = u->first[i] == i ? holds_find(&s->holds, w->id) : NULL;

		prefetch_entry(u, i, 2);
		held_at[i] = h ? (size_t)(h - s->holds.held) : SIZE_MAX;
		if (sg == last) { /* packed together: most entries are in their neighbour's segment */
			seg_at[i] = last_at;
			continue;
		}
		last = sg;
		last_at = wd_hashidx_find(&seg_index, seg_hash(sg), seg_eq, segs, sg);
		if (last_at) {
			seg_at[i] = --last_at;
			continue;
		}
		if (nfds == seg_cap && grow_segment_arrays(&si, &sp, &fds, &segs, &seg_cap) < 0)
			goto oom;
		if (wd_hashidx_reserve(&seg_index, nfds + 1) < 0)
			goto oom;
		wd_hashidx_put(&seg_index, seg_hash(sg), (uint32_t)nfds);
		seg_at[i] = last_at = (uint32_t)nfds;
		fds[nfds] = sg->seg.ro_fd; /* lent: the held weights keep it open while it is sent */
		weightd__segment_info__init(&si[nfds]);
		si[nfds].id = sg->id;
		si[nfds].size = sg->seg.size;
		si[nfds].fd_index = (uint32_t)nfds;
		sp[nfds] = &si[nfds];
		segs[nfds] = sg;
		nfds++;
	}
	/* Every segment held pins a daemon fd: the segments and references (one per entry) the
	 * client and its uid would hold are checked against their limits before any reference
	 * becomes the client's. */
	if (holds_check(&s->holds, segs, nfds, u->n_entries, &u->err) < 0) {
		for (size_t k = 0; k < u->n_entries; k++)
			cache_drop(cache, u->outs[k].w);
		session_send_error(s, u->id, &u->err);
		goto out;
	}
	/* The client's own descriptions of the segments (its holds keep them), locked over its
	 * weights (give.c); with hold_locks off, weightd's own descriptors are lent as they are. */
	if (locks) {
		struct entry_ctx ec = { u, seg_at };

		if (give_fds(&s->holds, segs, nfds, u->n_entries, entry_of, &ec, fds, &u->err) <
		    0) {
			for (size_t k = 0; k < u->n_entries; k++)
				cache_drop(cache, u->outs[k].w);
			session_send_error(s, u->id, &u->err);
			goto out;
		}
	}
	if (pack_reply(u, seg_at, &pw, &columns) < 0)
		goto oom;
	/* The references taken for the request become the client's: a first entry was looked up
	 * above, a repeat is looked up again. */
	for (size_t i = 0; i < u->n_entries; i++) {
		struct weight *w = u->outs[i].w;
		int r;

		prefetch_entry(u, i, 2);
		r = u->first[i] != i ? holds_hold(&s->holds, w)
			: holds_hold_found(&s->holds, w, held_at[i] == SIZE_MAX ? NULL : &s->holds.held[held_at[i]]);

		if (r < 0) {
			for (size_t k = i; k < u->n_entries; k++)
				cache_drop(cache, u->outs[k].w);
			session_kill(s, "out of memory recording its references");
			goto out;
		}
	}
	ur.packed = &pw;
	ur.n_segments = nfds;
	ur.segments = sp;
	ur.bytes_read = u->bytes_read;
	resp.body_case = WEIGHTD__RESPONSE__BODY_MATERIALIZE;
	resp.materialize = &ur;
	resp.id = u->id;
	session_send_borrowed(s, &resp, fds, nfds);
	goto out;
oom:
	for (size_t i = 0; i < u->n_entries; i++)
		cache_drop(cache, u->outs[i].w);
	wd_error_set(&u->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory answering the unit");
	session_send_error(s, u->id, &u->err);
out:
	unit_req_unlink(u);
	free(columns);
	free(si);
	free(sp);
	free(fds);
	free(segs);
	free(held_at);
	free(seg_at);
	wd_hashidx_free(&seg_index);
	unit_req_free(u);
}

static void on_entry_ready(struct weight *w, const weightd_error *err, uint64_t bytes_read,
			   void *arg)
{
	struct unit_out *o = arg;
	struct unit_req *u = o->u;

	u->bytes_read += bytes_read;
	if (w) {
		o->w = w;
	} else if (!u->failed) {
		u->failed = true;
		u->err = *err;
		snprintf(u->err.slot, sizeof(u->err.slot), "%s", o->name_copy);
	}
	if (--u->pending == 0)
		unit_req_finish(u, u->cache);
}

static void reply_preflight(struct session *s, uint64_t id, struct unit_req *u)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__UnitReply ur = WEIGHTD__UNIT_REPLY__INIT;
	Weightd__WeightInfo *wi = calloc(u->n_outs, sizeof(*wi));
	Weightd__WeightInfo **wp = calloc(u->n_outs, sizeof(*wp));

	if (!wi || !wp) {
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < u->n_outs; i++) {
		const struct wd_plan *p = u->outs[u->outs[i].owner].plan;
		weightd__weight_info__init(&wi[i]);
		wi[i].name = u->outs[i].name_copy;
		wi[i].dtype = (char *)wd_dtype_name(wd_plan_dtype(p));
		wi[i].n_shape = (size_t)wd_plan_ndim(p);
		wi[i].shape = (uint64_t *)wd_plan_shape(p);
		wi[i].nbytes = wd_plan_nbytes(p);
		wi[i].key.data = (uint8_t *)wd_plan_key(p);
		wi[i].key.len = 32;
		if (u->outs[i].owner != i)
			wi[i].alias_of = u->outs[u->outs[i].owner].name_copy;
		wp[i] = &wi[i];
	}
	ur.n_weights = u->n_outs;
	ur.weights = wp;
	resp.body_case = WEIGHTD__RESPONSE__BODY_PREFLIGHT;
	resp.preflight = &ur;
	resp.id = id;
	session_send(s, &resp, NULL, 0);
out:
	free(wi);
	free(wp);
}

/*
 * Before anything starts: take the weights the cache already has (so that making room for the
 * rest cannot evict one this unit uses), then check that the weights still to be made fit the
 * budget together. If they do not, the hits are given back and nothing is evicted, reserved or
 * started: the unit fails whole with the bytes needed and available.
 */
static int unit_take_hits_and_check_room(struct unit_req *u, struct session *s,
					 const struct unit_columns *ue, weightd_error *err)
{
	struct cache *c = s->d->cache;
	uint64_t need = 0;
	size_t missing = 0, first = 0;
	char what[WD_MAX_NAME + 600];
	int r;

	for (size_t i = 0; i < u->n_entries; i++) {
		struct unit_out *o = &u->outs[i];
		struct csource *cs = o->n_sources ? o->source : NULL;
		struct weight *w = o->hit;

		if (i + WEIGHT_AHEAD < u->n_entries)
			weight_prefetch(u->outs[i + WEIGHT_AHEAD].hit, 2);
		if (w)
			cache_take(c, w, cs);
		else
			w = cache_lookup(c, o->key, cs);
		if (w) {
			o->w = w;
			wd_plan_free(o->plan);
			o->plan = NULL;
		} else if (!o->plan) {
			/* a warm entry's weight went since its preflight (a safeguard: nothing in
			 * between evicts): plan it after all */
			struct unit_columns_entry e;

			unit_columns_get(ue, i, &e);
			r = unit_preflight_entry(s, &e, o, err);
			if (r < 0)
				goto out;
		}
	}
	for (size_t i = 0; i < u->n_entries; i++) {
		const struct wd_plan *p = u->outs[i].plan;

		/* hits are held; repeats and weights being made need no room of their own */
		if (!p || u->first[i] != i || cache_in_flight(c, u->outs[i].key))
			continue;
		if (missing++ == 0)
			first = i;
		need += wd_plan_nbytes(p);
	}
	if (missing == 1)
		snprintf(what, sizeof(what), "slot \"%s\" (%s)", u->outs[first].name_copy,
			 wd_plan_label(u->outs[first].plan));
	else
		snprintf(what, sizeof(what), "the unit (%zu weights to materialize)", missing);
	r = cache_check_room(c, need, what, err);
	if (r < 0 && missing == 1)
		snprintf(err->slot, sizeof(err->slot), "%s", u->outs[first].name_copy);
out:
	if (r < 0)
		for (size_t i = 0; i < u->n_entries; i++)
			if (u->outs[i].w) {
				cache_drop(c, u->outs[i].w);
				u->outs[i].w = NULL;
			}
	return r;
}

/*
 * Unit requests in flight are bounded per connection (client_max_pending, in unit_request) and
 * over all connections of a uid (uid_max_pending, here), so one uid cannot fill the worker queue
 * for everyone. Root and the daemon's user are not limited here.
 */
static bool unit_uid_may_start(struct session *s, uint64_t id)
{
	uint64_t max;
	size_t n;

	if (s->peer.privileged || !s->uu)
		return true;
	n = s->uu->pending;
	max = uid_max_pending(s->uu, s->d->cfg); /* cut to a share of RLIMIT_NOFILE (uid.c) */
	if (n < max)
		return true;
	session_fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED,
		     "limit exceeded: uid %u has %zu unit requests in flight (uid_max_pending %llu)",
		     (unsigned)s->peer.uid, n, (unsigned long long)max);
	return false;
}

void unit_request(struct session *s, uint64_t id, const Weightd__Unit *pu, bool preflight)
{
	const uint32_t max = s->d->cfg->max_unit_entries;
	struct unit_columns ue;
	struct cache_pack *pack;
	struct unit_req *u;
	weightd_error err;
	uint64_t memory;
	char what[96];
	size_t to_make = 0;
	int r;

	if (!preflight && !unit_uid_may_start(s, id))
		return;
	wd_error_clear(&err);
	/* the columns are read (and every count checked against its limit) before anything else */
	if (unit_columns_init(&ue, pu, max, &err) < 0) {
		session_send_error(s, id, &err);
		return;
	}
	if (ue.n == 0) {
		session_fail(s, id, WEIGHTD_E_EMPTY_INPUTS, "the unit has no entries");
		return;
	}
	if (!preflight && s->holds.pending >= s->d->cfg->client_max_pending) {
		unit_columns_fini(&ue);
		session_fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED,
			     "too many unit requests in flight on this connection");
		return;
	}
	/* what a unit makes per slot (its outputs, names, plans, jobs, weights): counted against
	 * its uid's uid_max_unit_memory before any of it is taken, and faulted in huge pages rather
	 * than one 4 KiB page at a time */
	memory = (uint64_t)(ue.n + pu->n_aliases) * UNIT_HEAP_PER_SLOT;
	snprintf(what, sizeof(what), "planning a unit of %zu entries and %zu aliases", ue.n,
		 pu->n_aliases);
	if (holds_unit_memory(&s->holds, memory, false, what, &err) < 0) {
		unit_columns_fini(&ue);
		session_send_error(s, id, &err);
		return;
	}
	heap_reserve(memory);
	u = calloc(1, sizeof(*u));
	if (u)
		u->outs = calloc(ue.n + pu->n_aliases, sizeof(*u->outs));
	if (!u || !u->outs) {
		free(u);
		unit_columns_fini(&ue);
		holds_unit_memory_done(&s->holds, memory);
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	u->memory = memory;
	u->id = id;
	u->cache = s->d->cache;
	u->n_entries = ue.n;
	u->n_outs = ue.n + pu->n_aliases;
	r = unit_preflight(u, s, &ue, preflight, &err);
	if (r == 0 && !preflight)
		r = unit_take_hits_and_check_room(u, s, &ue, &err);
	unit_columns_fini(&ue); /* nothing below reads the request */
	if (r < 0 || preflight) {
		if (r < 0)
			session_send_error(s, id, &err);
		else
			reply_preflight(s, id, u);
		if (!s->dead) /* a dead session's holds were cleared, this count with them */
			holds_unit_memory_done(&s->holds, memory);
		unit_req_free(u);
		return;
	}
	u->s = s;
	LIST_INSERT_HEAD(&s->unitreqs, u, link);
	holds_pending_add(&s->holds, u->new_bytes, u->new_weights);
	u->pending = 1; /* held by this function until every entry is submitted */
	for (size_t i = 0; i < u->n_entries && to_make <= UNIT_SHARED_MAX_WEIGHTS; i++)
		to_make += u->outs[i].plan != NULL; /* not a cache hit */
	/* NULL: each new weight alone, still correct */
	pack = to_make <= UNIT_SHARED_MAX_WEIGHTS ? cache_pack_begin_shared(s->d->cache) :
						    cache_pack_begin(s->d->cache);
	cache_pack_owner(pack, s->peer.uid);
	for (size_t i = 0; i < u->n_entries; i++) {
		struct unit_out *o = &u->outs[i];
		struct weight *w = NULL;
		struct wd_plan *plan = o->plan;

		if (!plan)
			continue; /* a cache hit, already held */
		o->plan = NULL; /* the cache owns it from here, whatever happens */
		r = cache_request(s->d->cache, pack, plan, unit_out_sources(o), o->n_sources, on_entry_ready,
				  o, &w, &u->err);
		if (r == 1) {
			o->w = w;
		} else if (r == 0) {
			u->pending++;
		} else {
			u->failed = true;
			snprintf(u->err.slot, sizeof(u->err.slot), "%s", o->name_copy);
			break;
		}
	}
	/* The new weights are placed: create their segments and start filling them. */
	cache_pack_end(s->d->cache, pack);
	if (--u->pending == 0)
		unit_req_finish(u, u->cache);
}

void unit_session_gone(struct session *s)
{
	struct unit_req *u;

	while ((u = LIST_FIRST(&s->unitreqs))) {
		LIST_REMOVE(u, link);
		u->s = NULL; /* finishes later, answering nobody and giving its references back */
	}
}
