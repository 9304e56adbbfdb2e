/* SPDX-License-Identifier: Apache-2.0 */
/* holds.c - what one client holds: its references on weights (indexed by weight id), the
 * segments they lie in (each pins a daemon fd), and its unit requests in flight, counted for the
 * client and its uid. */
#include "holds.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "bytes.h"
#include "cache.h"
#include "config.h"
#include "log.h"
#include "uid.h"

/* A segment the client holds weights in (each one pins a daemon fd while anyone holds it). */
struct held_segment {
	struct cache_segment *sg;
	uint32_t weights; /* distinct weights of sg this client holds */
};

/*
 * The weights a client holds: a dense array (cheap to walk when the client goes) indexed by an
 * open-addressing table keyed by weight id, so holding, finding and releasing stay O(1) however
 * many weights one client holds.
 */
static bool held_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct holds *h = ctx;
	return h->held[pos].id == *(const uint64_t *)key;
}

/* Index the holds not indexed yet; false (nothing changed) when out of memory. */
static bool held_index_sync(struct holds *h)
{
	if (h->n_indexed == h->n_held)
		return true;
	if (wd_hashidx_reserve(&h->held_index, h->n_held) < 0)
		return false;
	for (; h->n_indexed < h->n_held; h->n_indexed++)
		wd_hashidx_put(&h->held_index, h->held[h->n_indexed].id, (uint32_t)h->n_indexed);
	return true;
}

struct held *holds_find(struct holds *h, uint64_t handle)
{
	uint32_t at;

	if (!h->n_held)
		return NULL;
	if (!held_index_sync(h)) {
		/* no memory to index the newest: look through them, then the indexed ones */
		for (size_t i = h->n_indexed; i < h->n_held; i++)
			if (h->held[i].id == handle)
				return &h->held[i];
	}
	at = wd_hashidx_find(&h->held_index, handle, held_eq, h, &handle);
	return at ? &h->held[at - 1] : NULL;
}

/*
 * The segments a client holds weights in, counted the same way (a dense array indexed by
 * segment id): each one pins a daemon fd, so their number is limited per client and per uid
 * (holds_check).
 */
static bool seg_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct holds *h = ctx;
	return h->segs[pos].sg == key;
}

bool holds_segment(const struct holds *h, const struct cache_segment *sg)
{
	return wd_hashidx_find(&h->segs_index, sg->id, seg_eq, h, sg) != 0;
}

/* Room in the dense array *p (of *cap elements of `size` bytes, n used) for one more: doubled
 * from `first` when full. 0 or -WEIGHTD_E_RESOURCE_EXHAUSTED (nothing changed). */
static int room_for_one(void **p, size_t *cap, size_t n, size_t size, size_t first)
{
	size_t ncap;
	void *np;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : first;
	np = realloc(*p, ncap * size);
	if (!np)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	*p = np;
	*cap = ncap;
	return 0;
}

/* Room for one more segment, so that segs_add cannot fail. */
static int segs_grow(struct holds *h)
{
	if (room_for_one((void **)&h->segs, &h->segs_cap, h->n_segs, sizeof(*h->segs), 16) < 0)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (wd_hashidx_reserve(&h->segs_index, h->n_segs + 1) < 0)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	return 0;
}

/* One more distinct weight of sg held (the table has room: see holds_hold). */
static void segs_add(struct holds *h, struct cache_segment *sg)
{
	size_t i = wd_hashidx_slot(&h->segs_index, sg->id, seg_eq, h, sg);

	if (!wd_hashidx_pos(&h->segs_index, i)) {
		h->segs[h->n_segs].sg = sg;
		h->segs[h->n_segs].weights = 0;
		wd_hashidx_set(&h->segs_index, i, sg->id, (uint32_t)h->n_segs++);
		if (h->uu)
			h->uu->segments++;
	}
	h->segs[wd_hashidx_pos(&h->segs_index, i) - 1].weights++;
}

static ssize_t segfd_find(struct holds *h, uint64_t id)
{
	if (h->last_segfd < h->n_segfds && h->segfds[h->last_segfd].seg_id == id)
		return (ssize_t)h->last_segfd;
	for (size_t i = 0; i < h->n_segfds; i++)
		if (h->segfds[i].seg_id == id) {
			h->last_segfd = i;
			return (ssize_t)i;
		}
	return -1;
}

static void segfd_drop_at(struct holds *h, size_t i)
{
	close(h->segfds[i].fd);
	h->segfds[i] = h->segfds[--h->n_segfds];
}

void holds_segment_fds_trim(struct holds *h)
{
	if (h->n_segfds < 16 || h->n_segfds < 2 * h->n_segs)
		return;
	for (size_t k = h->n_segfds; k-- > 0;) {
		bool held = false;

		for (size_t s = 0; s < h->n_segs && !held; s++)
			held = h->segs[s].sg->id == h->segfds[k].seg_id;
		if (!held)
			segfd_drop_at(h, k);
	}
}

int holds_segment_fd(struct holds *h, struct cache_segment *sg)
{
	ssize_t i = segfd_find(h, sg->id);
	int fd;

	if (i >= 0)
		return h->segfds[i].fd;
	if (room_for_one((void **)&h->segfds, &h->cap_segfds, h->n_segfds, sizeof(*h->segfds),
			 8) < 0) {
		errno = ENOMEM;
		return -1;
	}
	fd = wd_segment_open_ro(&sg->seg);
	if (fd < 0)
		return -1;
	h->segfds[h->n_segfds++] = (struct holds_segfd){ sg->id, fd };
	return fd;
}

/* One distinct weight of sg less; the entry goes with the last one. */
static void segs_remove(struct holds *h, struct cache_segment *sg)
{
	size_t i;
	uint32_t pos, last;

	if (!h->segs_index.cap)
		return;
	i = wd_hashidx_slot(&h->segs_index, sg->id, seg_eq, h, sg);
	if (!wd_hashidx_pos(&h->segs_index, i))
		return;
	pos = wd_hashidx_pos(&h->segs_index, i) - 1;
	if (--h->segs[pos].weights)
		return;
	/* weightd's copy of the client's description goes; the client's stays while it maps */
	if (segfd_find(h, sg->id) >= 0)
		segfd_drop_at(h, (size_t)segfd_find(h, sg->id));
	wd_hashidx_delete(&h->segs_index, i);
	last = (uint32_t)h->n_segs - 1;
	if (pos != last) {
		h->segs[pos] = h->segs[last];
		wd_hashidx_move(&h->segs_index, h->segs[pos].sg->id, last, pos);
	}
	h->n_segs--;
	if (h->uu)
		h->uu->segments--;
}

/* uid_max_weights refused new_refs more references (`where`: in this reply, by this share). */
static int uid_weights_exceeded(const struct holds *h, uint64_t new_refs, const char *where,
				weightd_error *err)
{
	return wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
			    "limit exceeded: uid %u would hold %llu weights over its connections "
			    "(%llu now, %llu more %s; a weight held twice counts twice); its limit "
			    "is %u (uid_max_weights)",
			    (unsigned)h->uu->uid, (unsigned long long)(h->uu->weights + new_refs),
			    (unsigned long long)h->uu->weights, (unsigned long long)new_refs, where,
			    h->cfg->uid_max_weights);
}

int holds_check(const struct holds *h, struct cache_segment *const *segs, size_t n,
		uint64_t new_refs, weightd_error *err)
{
	const struct config *cfg = h->cfg;
	uint64_t add = 0;
	uint64_t uid_max = uid_max_segments(h->uu, cfg);

	for (size_t i = 0; i < n; i++)
		add += !holds_segment(h, segs[i]);
	if (add && h->n_segs + add > cfg->client_max_segments)
		return wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: the client would hold weights in %llu shared-memory "
			"segments (%zu now, %llu more in this reply); its limit is %u "
			"(client_max_segments; weights asked for in one unit share "
			"segments)",
			(unsigned long long)(h->n_segs + add), h->n_segs, (unsigned long long)add,
			cfg->client_max_segments);
	if (add && h->uu && !h->exempt && h->uu->segments + add > uid_max)
		return wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: uid %u would hold weights in %llu shared-memory "
			"segments over its connections (%llu now, %llu more in this reply); "
			"its limit is %llu (uid_max_segments, cut to its share of weightd's open "
			"files among %u uids connected and one kept for a new uid; raise "
			"LimitNOFILE= for more)",
			(unsigned)h->uu->uid, (unsigned long long)(h->uu->segments + add),
			(unsigned long long)h->uu->segments, (unsigned long long)add,
			(unsigned long long)uid_max, (unsigned)uid_sharers(h->uu));
	if (new_refs && h->uu && !h->exempt && h->uu->weights + new_refs > cfg->uid_max_weights)
		return uid_weights_exceeded(h, new_refs, "in this reply", err);
	return 0;
}

/*
 * The checkpoints a client holds weights of, each with how many: the first weight of one makes
 * the client one of its clients (csource_stats.clients), the last one released ends that. A
 * client holds weights of a few checkpoints, so a search in order (the last found first) costs
 * about nothing per weight. Room for one more is made before anything is held (ckpts_grow), so
 * that counting cannot fail halfway.
 */
static int ckpts_grow(struct holds *h)
{
	return room_for_one((void **)&h->ckpts, &h->cap_ckpts, h->n_ckpts, sizeof(*h->ckpts), 4);
}

static struct held_checkpoint *ckpts_find(struct holds *h, const struct csource_stats *st)
{
	if (h->last_ckpt < h->n_ckpts && h->ckpts[h->last_ckpt].stats == st)
		return &h->ckpts[h->last_ckpt];
	for (size_t i = 0; i < h->n_ckpts; i++)
		if (h->ckpts[i].stats == st) {
			h->last_ckpt = i;
			return &h->ckpts[i];
		}
	return NULL;
}

/* w became held by this client (not before); room was made by ckpts_grow. */
static void ckpts_add(struct holds *h, const struct weight *w)
{
	struct held_checkpoint *e;

	if (!w->csource) /* re-adopted and not yet claimed: counts under no checkpoint */
		return;
	e = ckpts_find(h, w->csource->stats);
	if (!e) {
		h->last_ckpt = h->n_ckpts;
		e = &h->ckpts[h->n_ckpts++];
		e->stats = w->csource->stats;
		e->weights = 0;
		e->stats->clients++;
	}
	e->weights++;
}

/* This client no longer holds w. */
static void ckpts_remove(struct holds *h, const struct weight *w)
{
	struct held_checkpoint *e = w->csource ? ckpts_find(h, w->csource->stats) : NULL;

	if (!e || --e->weights)
		return;
	e->stats->clients--;
	*e = h->ckpts[--h->n_ckpts];
}

int holds_hold(struct holds *h, struct weight *w)
{
	return holds_hold_found(h, w, holds_find(h, w->id));
}

int holds_hold_found(struct holds *h, struct weight *w, struct held *found)
{
	if (found) {
		found->count++;
		h->refs++;
		if (h->uu)
			h->uu->weights++;
		return 0;
	}
	if (segs_grow(h) < 0 || ckpts_grow(h) < 0)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (room_for_one((void **)&h->held, &h->cap_held, h->n_held, sizeof(*h->held), 16) < 0)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	h->held[h->n_held].w = w;
	h->held[h->n_held].id = w->id;
	h->held[h->n_held].count = 1;
	h->n_held++; /* indexed when a lookup needs it (held_index_sync) */
	h->held_bytes += w->nbytes;
	h->refs++;
	w->holders++;
	segs_add(h, w->segment);
	ckpts_add(h, w);
	if (h->uu) {
		h->uu->weights++;
		h->uu->bytes += w->nbytes;
	}
	return 0;
}

/* w is no longer held by this client (its last reference here gone; the cache's is the caller's):
 * its counts, its segment's and its checkpoint's entries follow. */
static void unhold(struct holds *h, struct weight *w)
{
	w->holders--;
	h->held_bytes -= w->nbytes;
	if (h->uu)
		h->uu->bytes -= w->nbytes;
	segs_remove(h, w->segment);
	ckpts_remove(h, w);
}

bool holds_release(struct holds *h, uint64_t handle)
{
	size_t k, pos, last;
	struct weight *w;
	struct held *e;

	if (!h->n_held)
		return false;
	if (!held_index_sync(h)) {
		/* no memory to index the newest: only what is indexed can be moved about */
		log_warn("client %llu: out of memory indexing the weights it holds; its release "
			 "of weight %llu is ignored",
			 (unsigned long long)h->client, (unsigned long long)handle);
		return false;
	}
	k = wd_hashidx_slot(&h->held_index, handle, held_eq, h, &handle); /* one probe for both */
	if (!wd_hashidx_pos(&h->held_index, k))
		return false;
	e = &h->held[wd_hashidx_pos(&h->held_index, k) - 1];
	w = e->w;
	h->refs--;
	if (h->uu)
		h->uu->weights--;
	if (--e->count == 0) {
		pos = (size_t)(e - h->held);
		last = h->n_held - 1;
		wd_hashidx_delete(&h->held_index, k);
		if (pos != last) {
			h->held[pos] = h->held[last];
			wd_hashidx_move(&h->held_index, h->held[pos].id, (uint32_t)last,
					(uint32_t)pos);
		}
		h->n_held--;
		h->n_indexed--;
		unhold(h, w);
	}
	cache_drop(h->cache, w);
	return true;
}

bool holds_release_newest(struct holds *h, const uint64_t *handles, size_t n)
{
	size_t runs = 0, at, k;

	for (size_t i = 0; i < n; i++)
		runs += i == 0 || handles[i] != handles[i - 1];
	if (!n || runs > h->n_held - h->n_indexed)
		return false; /* only the unindexed newest: what goes needs no index work */
	at = h->n_held - runs;
	for (size_t i = 0, j; i < n; i = j, at++) {
		for (j = i + 1; j < n && handles[j] == handles[i]; j++)
			;
		if (h->held[at].id != handles[i] || h->held[at].count != j - i)
			return false;
	}
	at = h->n_held - runs;
	for (k = at; k < h->n_held; k++) {
		struct weight *w = h->held[k].w;
		uint32_t c = h->held[k].count;

		if (k + WEIGHT_AHEAD < h->n_held)
			weight_prefetch(h->held[k + WEIGHT_AHEAD].w, 2);

		unhold(h, w);
		while (c--)
			cache_drop(h->cache, w);
	}
	h->refs -= n; /* n handles: one reference each */
	if (h->uu)
		h->uu->weights -= n;
	h->n_held = at;
	return true;
}

/*
 * A uid's share of the budget. Weights a client holds are never evicted, so whatever one uid
 * holds is out of everyone else's reach until it lets go: without a cap, one uid could take the
 * whole budget (a recipe that stacks and casts one small tensor makes many times its bytes) and
 * every other uid's smallest request would fail. The share is a fixed fraction rather than one
 * computed from the uids asking now, because a share computed while a uid was alone could not be
 * taken back once others come: a fixed fraction always leaves the rest for them. Bytes are those
 * of the weights as made (a recipe counts for what it makes, not what it reads), each distinct
 * weight once per connection, summed over the uid's connections, plus what its requests in
 * flight will add.
 */
static bool budget_exempt(const struct holds *h)
{
	if (h->exempt || !h->uu)
		return true;
	for (size_t i = 0; i < h->cfg->n_budget_uids; i++)
		if (h->cfg->budget_uids[i] == h->uu->uid)
			return true;
	return false;
}

int holds_check_budget(const struct holds *h, uint64_t bytes, uint64_t budget, weightd_error *err)
{
	const struct config *cfg = h->cfg;
	uint64_t share, now;
	char t_all[WD_BYTES_TEXT], t_held[WD_BYTES_TEXT], t_pend[WD_BYTES_TEXT],
		t_unit[WD_BYTES_TEXT], t_share[WD_BYTES_TEXT], t_budget[WD_BYTES_TEXT];

	if (!bytes || budget_exempt(h))
		return 0;
	/* budget / 100 first: budget * share could overflow, and a budget is far above 100 bytes */
	share = budget / 100 * cfg->uid_budget_share + budget % 100 * cfg->uid_budget_share / 100;
	now = h->uu->bytes + h->uu->pending_bytes;
	if (now + bytes <= share && now + bytes >= now)
		return 0;
	return wd_error_set(
		err, WEIGHTD_E_LIMIT_EXCEEDED,
		"limit exceeded: uid %u would hold %s of weights over its connections (%s held, %s "
		"requested before, %s in this request); its share of the budget is %s "
		"(uid_budget_share %u%% of %s): raise `uid_budget_share`, or name the user in "
		"`budget_users`, in weightd.conf",
		(unsigned)h->uu->uid, wd_bytes_text(t_all, now + bytes),
		wd_bytes_text(t_held, h->uu->bytes), wd_bytes_text(t_pend, h->uu->pending_bytes),
		wd_bytes_text(t_unit, bytes), wd_bytes_text(t_share, share), cfg->uid_budget_share,
		wd_bytes_text(t_budget, budget));
}

/*
 * Decoding a request takes heap in proportion to its bytes, and planning a unit in proportion to
 * its entries (a million-entry unit about a GiB) for as long as it is in flight; a uid may send
 * many over several connections. What its requests are counted for is bounded per uid, so that
 * one uid cannot grow the daemon's memory past it however it splits its requests.
 */
int holds_unit_memory(struct holds *h, uint64_t bytes, bool alone, const char *what,
		      weightd_error *err)
{
	uint64_t max = h->cfg->uid_max_unit_memory, now = h->uu && !alone ? h->uu->unit_memory : 0;
	char t_all[WD_BYTES_TEXT], t_now[WD_BYTES_TEXT], t_unit[WD_BYTES_TEXT],
		t_max[WD_BYTES_TEXT];

	if (h->uu && !h->exempt && (now + bytes > max || now + bytes < now))
		return wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: uid %u would have %s of daemon memory in requests being "
			"decoded, planned or made (%s now, %s for %s); its limit is %s: raise "
			"`uid_max_unit_memory` in weightd.conf, or split the unit",
			(unsigned)h->uu->uid, wd_bytes_text(t_all, now + bytes),
			wd_bytes_text(t_now, now), wd_bytes_text(t_unit, bytes), what,
			wd_bytes_text(t_max, max));
	h->unit_memory += bytes;
	if (h->uu)
		h->uu->unit_memory += bytes;
	return 0;
}

void holds_unit_memory_done(struct holds *h, uint64_t bytes)
{
	h->unit_memory -= bytes;
	if (h->uu)
		h->uu->unit_memory -= bytes;
}

/* How often each handle of a release appears: distinct handles in a dense array, indexed. */
struct handle_count {
	uint64_t handle;
	size_t count;
};

static bool count_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct handle_count *hc = ctx;
	return hc[pos].handle == *(const uint64_t *)key;
}

int holds_release_all(struct holds *h, const uint64_t *handles, size_t n, uint64_t *ret_missing)
{
	struct handle_count *tab;
	struct wd_hashidx ix = { NULL, 0 };
	uint32_t n_tab = 0;

	/* a unit's free, checked in one pass (nothing changes unless all of it holds) */
	if (holds_release_newest(h, handles, n))
		return 0;
	tab = calloc(n ? n : 1, sizeof(*tab));
	if (!tab || wd_hashidx_reserve(&ix, n) < 0) {
		free(tab);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	/* All handles are checked before any is released: a bad list changes nothing. A handle may
	 * appear as often as the client holds it (counted through one hash table: linear). */
	for (size_t i = 0; i < n; i++) {
		size_t k = wd_hashidx_slot(&ix, handles[i], count_eq, tab, &handles[i]);

		if (!wd_hashidx_pos(&ix, k)) {
			tab[n_tab].handle = handles[i];
			wd_hashidx_set(&ix, k, handles[i], n_tab++);
		}
		tab[wd_hashidx_pos(&ix, k) - 1].count++;
	}
	for (size_t i = 0; i < n; i++) {
		const struct handle_count *hc =
			&tab[wd_hashidx_find(&ix, handles[i], count_eq, tab, &handles[i]) - 1];
		struct held *e = holds_find(h, handles[i]);

		if (!e || e->count < hc->count) {
			*ret_missing = handles[i];
			free(tab);
			wd_hashidx_free(&ix);
			return -WEIGHTD_E_NOT_FOUND;
		}
	}
	free(tab);
	wd_hashidx_free(&ix);
	for (size_t i = 0; i < n; i++)
		holds_release(h, handles[i]);
	return 0;
}

int holds_share(struct holds *h, uint64_t handle, struct weight **ret_w, weightd_error *err)
{
	struct held *e = holds_find(h, handle);
	struct weight *w;

	if (!e)
		return -WEIGHTD_E_NOT_FOUND;
	if (h->cfg->client_max_weights &&
	    h->refs + h->pending_weights >= h->cfg->client_max_weights)
		return wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: the client would hold %llu weights (%llu held, "
			"%u requested before, 1 more by this share; a weight held twice "
			"counts twice); its limit is %u (client_max_weights)",
			(unsigned long long)(h->refs + h->pending_weights + 1),
			(unsigned long long)h->refs, h->pending_weights,
			h->cfg->client_max_weights);
	if (h->uu && !h->exempt && h->uu->weights + 1 > h->cfg->uid_max_weights)
		return uid_weights_exceeded(h, 1, "by this share", err);
	w = e->w;
	cache_hold(h->cache, w);
	if (holds_hold_found(h, w, e) < 0) {
		cache_drop(h->cache, w);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	*ret_w = w;
	return 0;
}

void holds_pending_add(struct holds *h, uint64_t bytes, uint32_t weights)
{
	h->pending++;
	h->pending_bytes += bytes;
	h->pending_weights += weights;
	if (h->uu) {
		h->uu->pending++;
		h->uu->pending_bytes += bytes;
	}
}

void holds_pending_done(struct holds *h, uint64_t bytes, uint32_t weights)
{
	h->pending--;
	h->pending_bytes -= bytes;
	h->pending_weights -= weights;
	if (h->uu) {
		h->uu->pending--;
		h->uu->pending_bytes -= bytes;
	}
}

void holds_init(struct holds *h, struct cache *cache, const struct config *cfg,
		struct uid_usage *uu, uint64_t client, bool exempt)
{
	h->cache = cache;
	h->cfg = cfg;
	h->uu = uu;
	h->client = client;
	h->exempt = exempt;
}

void holds_clear(struct holds *h)
{
	if (h->uu) {
		h->uu->weights -= h->refs;
		h->uu->segments -= h->n_segs;
		h->uu->pending -= h->pending;
		h->uu->bytes -= h->held_bytes;
		h->uu->pending_bytes -= h->pending_bytes;
		h->uu->unit_memory -= h->unit_memory;
	}
	wd_hashidx_clear(&h->segs_index);
	h->n_segs = 0;
	while (h->n_segfds)
		segfd_drop_at(h, h->n_segfds - 1);
	/* before the references go: the counters live while a weight of theirs does */
	for (size_t i = 0; i < h->n_ckpts; i++)
		h->ckpts[i].stats->clients--;
	h->n_ckpts = 0;
	h->n_indexed = 0; /* the index is cleared below */
	while (h->n_held) {
		struct held *e = &h->held[h->n_held - 1];
		struct weight *w = e->w;
		uint32_t n = e->count;
		w->holders--;
		h->n_held--;
		while (n--)
			cache_drop(h->cache, w);
	}
	wd_hashidx_clear(&h->held_index);
	h->held_bytes = 0;
	h->refs = 0;
	h->pending = 0;
	h->pending_bytes = 0;
	h->pending_weights = 0;
	h->unit_memory = 0;
	h->uu = NULL;
}

void holds_free(struct holds *h)
{
	free(h->held);
	h->held = NULL;
	h->n_held = h->cap_held = h->n_indexed = 0;
	wd_hashidx_free(&h->held_index);
	free(h->segs);
	h->segs = NULL;
	h->n_segs = h->segs_cap = 0;
	while (h->n_segfds)
		segfd_drop_at(h, h->n_segfds - 1);
	free(h->segfds);
	h->segfds = NULL;
	h->cap_segfds = h->last_segfd = 0;
	free(h->ckpts);
	h->ckpts = NULL;
	h->n_ckpts = h->cap_ckpts = h->last_ckpt = 0;
	wd_hashidx_free(&h->segs_index);
}
