/* SPDX-License-Identifier: Apache-2.0 */
/* unit_preflight.c - the checks of a unit request before anything is made: the checkpoints it
 * names allowed to the peer, its names unique and its aliases resolved, each entry's recipe
 * planned and keyed (or, warm, its key taken from the memo and its weight found in the cache)
 * and its declared slot matched, repeated keys found and the client's limits checked. Main
 * thread only; linear in the unit's size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bytes.h"
#include "daemon.h"
#include "keymemo.h"
#include "request.h"
#include "unit_int.h"
#include "wd_hashidx.h"
#include "wire.h"

/* --- access ----------------------------------------------------------------------------------- */

/*
 * Before any per-name work: may this client read every checkpoint the unit's recipes name? One
 * catalog lookup per change of name (a unit usually names one or two checkpoints), so a client
 * allowed nothing is refused in time linear in the request's size.
 */
static int unit_check_access(struct session *s, const struct unit_columns *ue,
			     weightd_error *err)
{
	const Weightd__Unit *pu = ue->pu;
	const Weightd__TensorEntries *te = pu->tensors;
	const char *last = NULL;

	for (size_t i = 0; i < pu->n_entries; i++) {
		const Weightd__Recipe *rc = pu->entries[i]->recipe;

		for (size_t k = 0; rc && k < rc->n_nodes && k < REQUEST_MAX_RECIPE_NODES; k++) {
			const char *ck = rc->nodes[k]->checkpoint;
			struct csource *cs;
			int r;

			if (!ck || !ck[0] || (last && strcmp(ck, last) == 0))
				continue;
			r = catalog_resolve(s->d->catalog, ck, &s->peer, &cs, err);
			if (r < 0) {
				const char *name = pu->entries[i]->name ? pu->entries[i]->name : "";

				/* the same words a recipe's own preflight uses for a source node */
				err->node = (uint32_t)k + 1;
				wd_error_prefix(err, "node %zu (source)", k);
				snprintf(err->slot, sizeof(err->slot), "%s", name);
				return r;
			}
			last = ck;
		}
	}
	/* the columns name each checkpoint once; an error names the first entry reading it */
	for (size_t c = 0; ue->n_cols && c < te->n_checkpoints; c++) {
		struct csource *cs;
		size_t k = 0;
		int r = catalog_resolve(s->d->catalog, te->checkpoints[c], &s->peer, &cs, err);

		if (r == 0)
			continue;
		while (te->n_checkpoint && k < ue->n_cols && te->checkpoint[k] != c)
			k++;
		err->node = 1;
		wd_error_prefix(err, "node 0 (source)");
		if (k < ue->n_cols)
			snprintf(err->slot, sizeof(err->slot), "%s", ue->names[k]);
		return r;
	}
	return 0;
}

/* --- names and aliases ------------------------------------------------------------------------ */

/* The unit's names by hash: a wd_hashidx of positions in outs. */
static uint64_t name_hash_n(const char *name, size_t len)
{
	return XXH3_64bits(name, len);
}

static uint64_t name_hash(const char *name)
{
	return name_hash_n(name, strlen(name));
}

static bool name_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct unit_out *outs = ctx;
	return strcmp(outs[pos].name_copy, key) == 0;
}

/* The index of `name` in outs, or SIZE_MAX. */
static size_t find_name(const struct wd_hashidx *ix, const struct unit_out *outs, const char *name)
{
	uint32_t at = wd_hashidx_find(ix, name_hash(name), name_eq, outs, name);

	return at ? at - 1 : SIZE_MAX;
}

/* Output i's name as the request gives it: an entry's (in either form) or an alias's. */
static const char *out_name(const struct unit_columns *ue, size_t i)
{
	if (i < ue->n_msg)
		return ue->pu->entries[i]->name;
	if (i < ue->n)
		return ue->names[i - ue->n_msg];
	return ue->pu->aliases[i - ue->n]->name;
}

/* Names unique and non-empty; every alias resolves (through other aliases) to an entry. */
static int unit_check_names(struct unit_req *u, const struct unit_columns *ue, weightd_error *err)
{
	const Weightd__Unit *pu = ue->pu;
	size_t n = u->n_outs, *path = NULL, total = 0, at = 0;
	struct wd_hashidx ix = { NULL, 0 };
	uint8_t *state = NULL;        /* per alias: 0 unvisited, 1 on the current walk, 2 resolved */
	uint64_t *hashes = malloc((n ? n : 1) * sizeof(*hashes));
	int r = 0;

	if (!hashes)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	/* The copies in one allocation: the names' lengths first (each checked below, in order),
	 * and their hashes, read in order from the request, so that the walk below can ask for
	 * each one's index slot ahead (a table of 100,000 names is a wait on memory at each). */
	for (size_t i = 0; i < n; i++) {
		const char *name = out_name(ue, i);
		size_t len = name ? strlen(name) : 0;

		total += len + 1;
		hashes[i] = name ? name_hash_n(name, len) : 0; /* as find_name hashes */
	}
	u->names = malloc(total);
	if (!u->names || wd_hashidx_reserve(&ix, n) < 0) {
		free(hashes);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const char *name = out_name(ue, i);
		uint64_t h = hashes[i];
		size_t k, len;

		if (!name || !name[0] || strlen(name) > WD_MAX_NAME) {
			r = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					 "%s %zu has an empty name or one longer than %d bytes",
					 i < u->n_entries ? "entry" : "alias",
					 i < u->n_entries ? i : i - u->n_entries, WD_MAX_NAME);
			goto out;
		}
		len = strlen(name) + 1;
		u->outs[i].name_copy = memcpy(u->names + at, name, len);
		at += len;
		u->outs[i].owner = i;
		u->outs[i].u = u;
		if (i + WEIGHT_AHEAD < n)
			wd_hashidx_prefetch(&ix, hashes[i + WEIGHT_AHEAD]);
		k = wd_hashidx_slot(&ix, h, name_eq, u->outs, name);
		if (wd_hashidx_pos(&ix, k)) {
			snprintf(err->slot, sizeof(err->slot), "%s", name);
			r = wd_error_set(err, WEIGHTD_E_DUPLICATE_NAME,
					 "the name \"%s\" is used twice in the unit", name);
			goto out;
		}
		wd_hashidx_set(&ix, k, h, (uint32_t)i);
	}
	/*
	 * Each alias is resolved once: follow targets until an entry or an alias already resolved,
	 * then give every alias on the path that owner. A path that comes back to an alias of the
	 * same walk is a cycle. Every alias is walked over once in all: linear after the sort.
	 */
	state = calloc(pu->n_aliases ? pu->n_aliases : 1, 1);
	path = malloc((pu->n_aliases ? pu->n_aliases : 1) * sizeof(*path));
	if (!state || !path) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < pu->n_aliases; k++) {
		size_t cur = u->n_entries + k, depth = 0, owner;

		if (state[k] == 2)
			continue;
		while (cur >= u->n_entries && state[cur - u->n_entries] == 0) {
			const char *target = pu->aliases[cur - u->n_entries]->target;
			size_t next = target ? find_name(&ix, u->outs, target) : SIZE_MAX;

			state[cur - u->n_entries] = 1;
			path[depth++] = cur;
			if (next == SIZE_MAX) {
				snprintf(err->slot, sizeof(err->slot), "%s", u->outs[cur].name_copy);
				r = wd_error_set(err, WEIGHTD_E_BAD_ALIAS,
						 "alias \"%s\" names \"%s\", which is neither an entry "
						 "nor an alias of the unit", u->outs[cur].name_copy,
						 target ? target : "");
				goto out;
			}
			cur = next;
		}
		if (cur >= u->n_entries && state[cur - u->n_entries] == 1) {
			snprintf(err->slot, sizeof(err->slot), "%s", u->outs[cur].name_copy);
			r = wd_error_set(err, WEIGHTD_E_ALIAS_CYCLE,
					 "alias \"%s\" is part of a cycle of aliases",
					 u->outs[cur].name_copy);
			goto out;
		}
		owner = cur < u->n_entries ? cur : u->outs[cur].owner;
		for (size_t i = 0; i < depth; i++) {
			u->outs[path[i]].owner = owner;
			state[path[i] - u->n_entries] = 2;
		}
	}
out:
	wd_hashidx_free(&ix);
	free(hashes);
	free(state);
	free(path);
	return r;
}

/* --- resolving checkpoints for a peer --------------------------------------------------------- */

/* Another checkpoint an entry's plan reads. The first is kept in the entry itself: a unit's
 * entries are walked at every step, and a plain entry (nearly all of a large unit) reads one. */
static int out_add_source(struct unit_out *o, struct csource *cs, weightd_error *err)
{
	struct csource **all = unit_out_sources(o);

	for (size_t i = 0; i < o->n_sources; i++)
		if (all[i] == cs)
			return 0;
	if (o->n_sources == WD_MAX_RECIPE_SOURCES)
		return wd_error_set(err, WEIGHTD_E_RECIPE_TOO_LARGE,
				    "a recipe may read at most %d checkpoints", WD_MAX_RECIPE_SOURCES);
	if (o->n_sources == 1 && !o->more) {
		o->more = malloc(WD_MAX_RECIPE_SOURCES * sizeof(*o->more));
		if (!o->more)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		o->more[0] = o->source;
	}
	unit_out_sources(o)[o->n_sources++] = cs;
	return 0;
}

struct resolve_ctx {
	struct session *s;
	struct unit_out *out;      /* collects the sources a plan reads */
};

static int resolve_lookup(void *ctx, const char *checkpoint, const struct wd_source **ret_src,
			  weightd_error *err)
{
	struct resolve_ctx *rc = ctx;
	struct csource *cs;
	int r = catalog_resolve(rc->s->d->catalog, checkpoint, &rc->s->peer, &cs, err);

	if (r < 0)
		return r;
	if (rc->out) {
		r = out_add_source(rc->out, cs, err);
		if (r < 0)
			return r;
	}
	*ret_src = cs->src;
	return 0;
}

/* --- entries ------------------------------------------------------------------------------------ */

static bool slot_matches(const struct unit_columns_entry *e, enum wd_dtype dtype, int ndim,
			 const uint64_t *shape)
{
	if (strcmp(e->dtype, wd_dtype_name(dtype)) != 0)
		return false;
	if ((int)e->ndim != ndim)
		return false;
	return e->ndim == 0 || memcmp(e->shape, shape, e->ndim * sizeof(uint64_t)) == 0;
}

static void shape_text(const uint64_t *shape, size_t n, char *out, size_t cap)
{
	size_t off = 0;

	off += (size_t)snprintf(out + off, cap - off, "[");
	for (size_t i = 0; i < n && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%llu", i ? ", " : "",
					(unsigned long long)shape[i]);
	if (off < cap)
		snprintf(out + off, cap - off, "]");
}

static bool client_holds(struct session *s, const struct unit_out *o)
{
	struct weight *w;

	if (!s->holds.n_held) /* the usual first unit: no weight of it needs to be read */
		return false;
	w = o->hit ? o->hit : cache_find(s->d->cache, o->key);

	return w && holds_find(&s->holds, w->id);
}

/* The hash of output pos's key. */
static uint64_t key_at(const void *ctx, uint32_t pos)
{
	const struct unit_out *outs = ctx;
	uint64_t h;

	memcpy(&h, outs[pos].key, sizeof(h)); /* a SHA-256 digest: its bytes are already uniform */
	return h;
}

static bool key_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct unit_out *outs = ctx;
	return memcmp(outs[pos].key, key, 32) == 0;
}

/* u->first: for each entry the first entry with the same identity key, through one hash table of
 * the keys seen (a unit may have 1,048,576 entries: linear, no sort, no pairwise comparison). */
static int unit_find_repeats(struct unit_req *u, weightd_error *err)
{
	size_t n = u->n_entries;
	struct wd_hashidx tab = { NULL, 0 };

	u->first = malloc(n * sizeof(size_t));
	if (!u->first || wd_hashidx_reserve(&tab, n) < 0)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	for (size_t i = 0; i < n; i++) {
		uint64_t h = key_at(u->outs, (uint32_t)i);
		size_t k;

		if (i + WEIGHT_AHEAD < n)
			wd_hashidx_prefetch(&tab, key_at(u->outs, (uint32_t)(i + WEIGHT_AHEAD)));
		k = wd_hashidx_slot(&tab, h, key_eq, u->outs, u->outs[i].key);
		if (!wd_hashidx_pos(&tab, k))
			wd_hashidx_set(&tab, k, h, (uint32_t)i);
		u->first[i] = wd_hashidx_pos(&tab, k) - 1;
	}
	wd_hashidx_free(&tab);
	return 0;
}

/*
 * Per-client limits: the references (and bytes) the unit would add to what the client holds,
 * plus what its other unit requests in flight will add, must stay within client_max_weights and
 * client_max_bytes. Every entry takes a reference, so it counts toward client_max_weights even
 * when the client holds its weight already or the unit repeats it (otherwise references to one
 * weight would pass the limit); bytes count once per weight.
 */
static int unit_check_limits(struct unit_req *u, struct session *s, weightd_error *err)
{
	const struct config *cfg = s->d->cfg;
	const struct holds *h = &s->holds;
	uint64_t weights = u->n_entries, bytes = 0;

	for (size_t i = 0; i < u->n_entries; i++) {
		if (u->first[i] != i || client_holds(s, &u->outs[i]))
			continue;
		bytes += u->outs[i].nbytes;
	}
	if (cfg->client_max_weights &&
	    h->refs + h->pending_weights + weights > cfg->client_max_weights)
		return wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: the client would hold %llu weights (%llu held, %u "
			"requested before, %llu in this unit; a weight held twice counts "
			"twice); its limit is %u (client_max_weights)",
			(unsigned long long)(h->refs + h->pending_weights + weights),
			(unsigned long long)h->refs, h->pending_weights,
			(unsigned long long)weights, cfg->client_max_weights);
	if (cfg->client_max_bytes &&
	    h->held_bytes + h->pending_bytes + bytes > cfg->client_max_bytes) {
		char t_all[WD_BYTES_TEXT], t_held[WD_BYTES_TEXT], t_pend[WD_BYTES_TEXT],
			t_unit[WD_BYTES_TEXT], t_max[WD_BYTES_TEXT];

		return wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"limit exceeded: the client would hold %s of weights (%s held, %s "
			"requested before, %s in this unit); its limit is %s: raise "
			"`client_max_bytes` in weightd.conf",
			wd_bytes_text(t_all, h->held_bytes + h->pending_bytes + bytes),
			wd_bytes_text(t_held, h->held_bytes),
			wd_bytes_text(t_pend, h->pending_bytes), wd_bytes_text(t_unit, bytes),
			wd_bytes_text(t_max, cfg->client_max_bytes));
	}
	if (holds_check_budget(h, bytes, cache_budget(s->d->cache), err) < 0)
		return -WEIGHTD_E_LIMIT_EXCEEDED;
	u->new_weights = (uint32_t)weights;
	u->new_bytes = bytes;
	return 0;
}

/* The last checkpoint a unit's plain entries named, resolved for the peer (most units name one). */
struct resolved {
	const char *name;
	struct csource *cs;
};

static void slot_mismatch(const struct unit_columns_entry *e, const char *slot, enum wd_dtype dtype,
			  int ndim, const uint64_t *shape, weightd_error *err)
{
	char want[160], got[160];

	shape_text(e->shape, e->ndim, want, sizeof(want));
	shape_text(shape, (size_t)ndim, got, sizeof(got));
	snprintf(err->slot, sizeof(err->slot), "%s", slot);
	wd_error_set(err, WEIGHTD_E_SLOT_MISMATCH,
		     "slot \"%s\" is declared %s %s but its recipe gives %s %s", slot,
		     e->dtype, want, wd_dtype_name(dtype), got);
}

/* The checkpoint of a plain entry, resolved for this peer (access checked) into last, which is
 * kept while entries name the same one: true when it is ready to be read. Failures are left to
 * the full preflight, which words them. */
static bool entry_resolve(struct session *s, const struct unit_columns_entry *e, struct resolved *last)
{
	if (!last->name || (last->name != e->checkpoint && strcmp(last->name, e->checkpoint) != 0)) {
		weightd_error ignored;

		last->name = NULL;
		if (catalog_resolve(s->d->catalog, e->checkpoint, &s->peer, &last->cs, &ignored) < 0)
			return false;
		last->name = e->checkpoint;
	}
	return last->cs->state == CSOURCE_READY && last->cs->src;
}

/*
 * The warm path's first half, for every plain entry before any goes on: its checkpoint
 * resolved and its key taken from the memo (o->memo, o->key, o->source). Apart from the rest so
 * that the memo's index can be asked for WEIGHT_AHEAD entries ahead of its use, and the
 * cache's buckets and weights in turn (unit_preflight): a unit of 100,000 entries would
 * otherwise wait on memory at each table.
 */
static void unit_memo_keys(struct unit_req *u, struct session *s, const struct unit_columns *ue)
{
	struct resolved last = { NULL, NULL };
	uint8_t id[32];

	for (size_t i = 0; i < u->n_entries; i++) {
		struct unit_out *o = &u->outs[i];
		struct unit_columns_entry e, ahead;

		o->memo = false;
		unit_columns_get(ue, i, &e);
		if (!e.checkpoint || !entry_resolve(s, &e, &last))
			continue;
		wd_source_identity(last.cs->src, id);
		if (i + WEIGHT_AHEAD < u->n_entries) {
			unit_columns_get(ue, i + WEIGHT_AHEAD, &ahead);
			if (ahead.checkpoint) /* most likely the same checkpoint's identity */
				keymemo_prefetch(s->d->keymemo, id, ahead.tensor);
		}
		o->memo = keymemo_get(s->d->keymemo, id, e.tensor, o->key);
		o->source = last.cs;
	}
}

/*
 * The warm path's second half: the weight of a key from the memo in the cache. 1 when it is
 * there (o->nbytes and o->hit set, the declared slot checked against the weight), 0 when the
 * entry needs a full preflight, or -code.
 */
static int entry_warm(struct session *s, const struct unit_columns_entry *e, struct unit_out *o,
		      weightd_error *err)
{
	struct weight *w;

	if (!o->memo || !(w = cache_find(s->d->cache, o->key)))
		return 0;
	if (e->check && !slot_matches(e, w->dtype, w->ndim, w->shape)) {
		slot_mismatch(e, o->name_copy, w->dtype, w->ndim, w->shape, err);
		return -WEIGHTD_E_SLOT_MISMATCH;
	}
	o->nbytes = w->nbytes;
	o->hit = w;
	o->n_sources = 1;
	return 1;
}

int unit_preflight_entry(struct session *s, const struct unit_columns_entry *e, struct unit_out *o,
			   weightd_error *err)
{
	const struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	struct resolve_ctx rc = { s, o };
	struct wd_resolver res = { &rc, resolve_lookup };
	struct wd_rnode *nodes = NULL;
	struct wd_recipe rec;
	bool plain = e->checkpoint != NULL;
	size_t n = 0;
	int r;

	free(o->more); /* a second preflight (unit_take_hits_and_check_room) starts over */
	o->more = NULL;
	o->n_sources = 0;
	if (plain) /* the whole tensor as it is: no general graph (the same plan and key) */
		r = wd_recipe_preflight_tensor(e->checkpoint, e->tensor, &res, &lim, &o->plan, err);
	else
		r = wire_recipe(e->recipe, REQUEST_MAX_RECIPE_NODES, &nodes, &n, err);
	if (r == 0 && !plain) {
		rec.nodes = nodes;
		rec.n_nodes = n;
		r = wd_recipe_preflight(&rec, &res, &lim, &o->plan, err);
		free(nodes);
	}
	if (r < 0) {
		snprintf(err->slot, sizeof(err->slot), "%s", o->name_copy);
		return r;
	}
	memcpy(o->key, wd_plan_key(o->plan), 32);
	o->nbytes = wd_plan_nbytes(o->plan);
	if (e->check && !slot_matches(e, wd_plan_dtype(o->plan), wd_plan_ndim(o->plan),
				      wd_plan_shape(o->plan))) {
		slot_mismatch(e, o->name_copy, wd_plan_dtype(o->plan), wd_plan_ndim(o->plan),
			      wd_plan_shape(o->plan), err);
		return -WEIGHTD_E_SLOT_MISMATCH;
	}
	if (plain && o->n_sources == 1 && o->source->src) {
		uint8_t id[32];

		wd_source_identity(o->source->src, id);
		keymemo_put(s->d->keymemo, id, e->tensor, o->key);
	}
	return 0;
}

/* Every entry's plan and key (or, warm, its cached weight), then the repeats and the limits. */
static int unit_preflight_entries(struct unit_req *u, struct session *s,
				  const struct unit_columns *ue, bool preflight, weightd_error *err)
{
	bool warm = !preflight && s->d->keymemo;
	size_t n = u->n_entries;

	if (warm)
		unit_memo_keys(u, s, ue);
	for (size_t i = 0; i < n; i++) {
		struct unit_out *o = &u->outs[i];
		struct unit_columns_entry e;
		int r = 0;

		if (warm && i + 2 * WEIGHT_AHEAD < n && u->outs[i + 2 * WEIGHT_AHEAD].memo)
			cache_prefetch(s->d->cache, u->outs[i + 2 * WEIGHT_AHEAD].key, false);
		if (warm && i + WEIGHT_AHEAD < n && u->outs[i + WEIGHT_AHEAD].memo)
			cache_prefetch(s->d->cache, u->outs[i + WEIGHT_AHEAD].key, true);
		unit_columns_get(ue, i, &e);
		if (warm && e.checkpoint)
			r = entry_warm(s, &e, o, err);
		if (r == 0)
			r = unit_preflight_entry(s, &e, o, err);
		if (r < 0)
			return r;
	}
	if (unit_find_repeats(u, err) < 0)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	return unit_check_limits(u, s, err);
}

int unit_preflight(struct unit_req *u, struct session *s, const struct unit_columns *ue,
		   bool preflight, weightd_error *err)
{
	int r = unit_check_access(s, ue, err);

	if (r == 0)
		r = unit_check_names(u, ue, err);
	if (r == 0)
		r = unit_preflight_entries(u, s, ue, preflight, err);
	return r;
}
