/* SPDX-License-Identifier: Apache-2.0 */
/* unit.c - libweightd's units: slots declared, the request in entries and tensor columns, the
 * materialize reply's columns bound slot by slot, validate-then-bind, preflight. */
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "checked.h"
#include "columns.h"
#include "conn.h"
#include "dtype.h"
#include "err.h"
#include "inflight.h"
#include "msg.h"
#include "recipe.h"
#include "seg.h"
#include "wd_hashidx.h"
#include "weight.h"

/* --- slots ------------------------------------------------------------------------------- */

/*
 * SRC_TENSOR is weightd_unit_set_tensor without a selection, the usual entry of a large unit:
 * kept as two strings instead of a weightd_recipe (whose node alone is 384 bytes), and sent as
 * a row of the unit's tensor columns.
 */
enum slot_src { SRC_NONE, SRC_TENSOR, SRC_RECIPE, SRC_ALIAS };

/* 72 bytes: every step of a unit walks the slots, so a 100,000-slot unit's should stay small. */
struct slot {
	char *name;                  /* in the unit's arena */
	const char *dtype;           /* declared (wd_dtype_name's), or NULL: no expectation */
	const uint64_t *shape;       /* ndim dimensions, in the unit's arena (when declared) */
	void **dest;
	weightd_recipe *recipe;      /* SRC_RECIPE (owned) */
	char *alias;                 /* SRC_ALIAS: the target slot (owned); SRC_TENSOR:
				      * "checkpoint\0tensor" (in the unit's arena) */
	weightd_weight *w;           /* after finish: borrowed from unit->weights */
	const void *data;            /* after validate */
	uint32_t ndim;
	enum slot_src src;
};

/*
 * NEW: being declared (or back after a failure). SUBMITTED: a request is out. HELD: the reply
 * came; weights are held, nothing mapped. VALID: validated; bind may publish.
 */
enum unit_state { U_NEW, U_SUBMITTED, U_HELD, U_VALID };

struct weightd_unit {
	weightd_client *c;           /* holds a client reference */
	struct slot *slots;
	size_t n, cap;
	struct wd_hashidx index;     /* slots by name: position in slots */
	enum unit_state state;
	struct wc_pending *p;
	weightd_weight **weights;    /* one per fd of the reply */
	size_t n_weights;
	uint64_t bytes_read;
	bool populate; /* weightd_unit_set_populate */
	/* Names, tensor sources and weights live in the arena; the slot array, the request's
	 * arrays and finish's scratch are blocks of the connection's cache. All of it serves the
	 * next unit when this one is freed, instead of going back to the kernel and being faulted
	 * in again, which would make a unit's cost grow faster than its slot count. Sources set
	 * again on a slot stay in the arena until the unit is freed. */
	struct wc_arena arena;
};

/* The checkpoint and tensor of a SRC_TENSOR slot. */
static inline const char *slot_ckpt(const struct slot *s)
{
	return s->alias;
}

static inline const char *slot_tensor(const struct slot *s)
{
	return s->alias + strlen(s->alias) + 1;
}

/* FNV-1a of a slot name, then a 64-bit finalizer: names that differ only in their last digits
 * ("layers.61.mlp.experts.255.up_proj.weight") differ in FNV's high bits more than its low ones,
 * and wd_hashidx uses the low ones. */
static inline size_t name_hash(const char *name)
{
	uint64_t h = 1469598103934665603ull;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (size_t)h;
}

/* Room for n of something in a block being laid out: its offset, advanced past it (16-byte
 * aligned). The callers' sizes are bounded by the slot count, so the sums cannot overflow. */
static inline size_t take(size_t *at, size_t n, size_t size)
{
	size_t off = *at;

	*at += (n * size + 15) & ~(size_t)15;
	return off;
}

static bool slot_eq(const void *ctx, uint32_t pos, const void *key)
{
	const weightd_unit *u = ctx;
	return strcmp(u->slots[pos].name, key) == 0;
}

/* O(1): slot lookup is by hash, so declaring and answering a unit of n slots is linear. */
static struct slot *find_slot(const weightd_unit *u, const char *name)
{
	uint32_t at;

	if (!name)
		return NULL;
	/* a slot is usually given its source right after it is declared: the newest slot is
	 * compared first, saving a random probe of a large unit's index */
	if (u->n && strcmp(u->slots[u->n - 1].name, name) == 0)
		return &u->slots[u->n - 1];
	at = wd_hashidx_find(&u->index, name_hash(name), slot_eq, u, name);
	return at ? &u->slots[at - 1] : NULL;
}

/* --- the request ------------------------------------------------------------------------- */

/* The wire form of the unit; points into the unit, which must outlive it. */
struct pb_unit {
	Weightd__Unit msg;
	Weightd__UnitEntry *entries;
	Weightd__UnitEntry **entry_ptrs;
	Weightd__Alias *aliases;
	Weightd__Alias **alias_ptrs;
	struct wc_pb_recipe *recipes;
	size_t n_recipes;
	/* the SRC_TENSOR slots as columns, with the index of its checkpoint table */
	Weightd__TensorEntries columns;
	struct wd_hashidx ck_index;
	size_t ck_last;              /* the checkpoint the previous slot read */
	void *block;                 /* all the arrays above: one block of the connection's cache */
};

/* What the columns of a unit's SRC_TENSOR slots need, counted before the block is laid out. */
struct pb_sizes {
	size_t n_src[SRC_ALIAS + 1];
	size_t names;                /* bytes of the names column */
	size_t tensors;              /* bytes of the tensors column, when a tensor is renamed */
	size_t dims;                 /* declared dimensions */
	bool renamed;                /* a tensor is not named like its slot */
	bool declared;               /* a SRC_TENSOR slot declares a dtype */
};

static void pb_unit_fini(struct pb_unit *pb)
{
	for (size_t i = 0; i < pb->n_recipes; i++)
		wc_recipe_pb_fini(&pb->recipes[i]);
	wd_hashidx_free(&pb->ck_index);
	wd_msg_free(pb->block);
	memset(pb, 0, sizeof(*pb));
}

static bool ck_eq(const void *ctx, uint32_t pos, const void *key)
{
	const Weightd__TensorEntries *te = ctx;
	return strcmp(te->checkpoints[pos], key) == 0;
}

/*
 * The index of checkpoint ck in the columns' table, added when new; -1 when out of memory. Most
 * units read one or two checkpoints, in runs: the one the previous slot read is tried first. A
 * unit that names thousands stays linear through a hash index, built at the second one.
 */
static int64_t ck_index(struct pb_unit *pb, const char *ck)
{
	Weightd__TensorEntries *te = &pb->columns;
	size_t n = te->n_checkpoints, h;
	uint32_t at;

	if (n && strcmp(te->checkpoints[pb->ck_last], ck) == 0)
		return (int64_t)pb->ck_last;
	if (n) {
		bool first = !pb->ck_index.cap;

		if (wd_hashidx_reserve(&pb->ck_index, n + 1) < 0)
			return -1;
		if (first) /* the index is built at the second checkpoint: add the first */
			wd_hashidx_put(&pb->ck_index, name_hash(te->checkpoints[0]), 0);
		h = name_hash(ck);
		at = wd_hashidx_find(&pb->ck_index, h, ck_eq, te, ck);
		if (at) {
			pb->ck_last = at - 1;
			return (int64_t)pb->ck_last;
		}
		wd_hashidx_put(&pb->ck_index, h, (uint32_t)n);
	}
	te->checkpoints[n] = (char *)ck;
	te->n_checkpoints = n + 1;
	pb->ck_last = n;
	return (int64_t)n;
}

/* 1 + the index of a declared dtype in the columns' table (added when new). A unit declares a
 * few dtypes, each name wd_dtype_name's: the table is short and compared by pointer. */
static uint32_t dtype_index(Weightd__TensorEntries *te, const char *dtype)
{
	size_t i;

	for (i = 0; i < te->n_dtypes; i++)
		if (te->dtypes[i] == dtype)
			return (uint32_t)i + 1;
	te->dtypes[te->n_dtypes++] = (char *)dtype;
	return (uint32_t)i + 1;
}

/* Count the slots of each kind and what the SRC_TENSOR slots' columns take. */
static int pb_count(const weightd_unit *u, struct pb_sizes *sz, weightd_error *err)
{
	memset(sz, 0, sizeof(*sz));
	for (size_t i = 0; i < u->n; i++) {
		const struct slot *s = &u->slots[i];
		const char *tn;
		int rc;

		if (s->src == SRC_NONE) {
			rc = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					"slot \"%s\" has no source: give it a tensor, a recipe or "
					"make it an alias", s->name);
			wc_err_about(err, NULL, NULL, s->name);
			return rc;
		}
		sz->n_src[s->src]++;
		if (s->src != SRC_TENSOR)
			continue;
		sz->names += strlen(s->name) + 1;
		tn = slot_tensor(s);
		if (strcmp(tn, s->name) == 0) {
			sz->tensors += 1;   /* "": named like the slot */
		} else {
			sz->tensors += strlen(tn) + 1;
			sz->renamed = true;
		}
		if (s->dtype) {
			sz->declared = true;
			sz->dims += s->ndim;
		}
	}
	return 0;
}

/*
 * Lay out every array the request needs in one block of the connection's cache. Every element
 * is initialized before it is read. The sizes are bounded by the slot count (at most INT32_MAX
 * slots of under 300 bytes each, plus their names), so their sum cannot overflow.
 */
static int pb_layout(struct pb_unit *pb, const weightd_unit *u, const struct pb_sizes *sz)
{
	const size_t *n_src = sz->n_src;
	size_t n_ten = n_src[SRC_TENSOR], n_ent = u->n - n_src[SRC_ALIAS], at = 0;
	size_t o_ent, o_eptr, o_al, o_alptr, o_rec, o_names, o_tensors, o_ck, o_cks, o_dt = 0,
	       o_dts = 0, o_ndim = 0, o_dims = 0;
	Weightd__TensorEntries *te = &pb->columns;
	unsigned char *b;

	n_ent -= n_ten;   /* the entries are only the SRC_RECIPE slots */
	o_ent = take(&at, n_ent, sizeof(*pb->entries));
	o_eptr = take(&at, n_ent, sizeof(*pb->entry_ptrs));
	o_al = take(&at, n_src[SRC_ALIAS], sizeof(*pb->aliases));
	o_alptr = take(&at, n_src[SRC_ALIAS], sizeof(*pb->alias_ptrs));
	o_rec = take(&at, n_src[SRC_RECIPE], sizeof(*pb->recipes));
	o_names = take(&at, sz->names, 1);
	o_tensors = take(&at, sz->renamed ? sz->tensors : 0, 1);
	o_ck = take(&at, n_ten, sizeof(*te->checkpoint));
	o_cks = take(&at, n_ten, sizeof(*te->checkpoints));
	if (sz->declared) {
		o_dt = take(&at, n_ten, sizeof(*te->dtype));
		o_dts = take(&at, n_ten, sizeof(*te->dtypes));
		o_ndim = take(&at, n_ten, sizeof(*te->ndim));
		o_dims = take(&at, sz->dims, sizeof(*te->dims));
	}
	b = pb->block = wd_msg_cache_alloc(wc_conn_msgs(u->c), at ? at : 16);
	if (!b)
		return -1;
	pb->entries = (Weightd__UnitEntry *)(void *)(b + o_ent);
	pb->entry_ptrs = (Weightd__UnitEntry **)(void *)(b + o_eptr);
	pb->aliases = (Weightd__Alias *)(void *)(b + o_al);
	pb->alias_ptrs = (Weightd__Alias **)(void *)(b + o_alptr);
	pb->recipes = (struct wc_pb_recipe *)(void *)(b + o_rec);
	/* The columns fill as the slots are walked: their counts are the cursors. */
	te->names.data = b + o_names;
	te->tensors.data = sz->renamed ? b + o_tensors : NULL;
	te->checkpoint = (uint32_t *)(void *)(b + o_ck);
	te->checkpoints = (char **)(void *)(b + o_cks);
	if (sz->declared) {
		te->dtype = (uint32_t *)(void *)(b + o_dt);
		te->dtypes = (char **)(void *)(b + o_dts);
		te->ndim = (uint32_t *)(void *)(b + o_ndim);
		te->dims = (uint64_t *)(void *)(b + o_dims);
	}
	return 0;
}

/* Append a NUL-terminated string to a bytes column laid out to hold it. */
static void column_put(ProtobufCBinaryData *col, const char *str)
{
	char *end = stpcpy((char *)col->data + col->len, str);

	col->len = (size_t)(end + 1 - (char *)col->data);
}

/* SRC_TENSOR slot s as the next entry of the columns. Fails only when out of memory (the
 * index of the checkpoint table). */
static int pb_column(struct pb_unit *pb, const struct slot *s)
{
	Weightd__TensorEntries *te = &pb->columns;
	int64_t ck = ck_index(pb, slot_ckpt(s));
	size_t k = te->n_checkpoint;

	if (ck < 0)
		return -1;
	te->checkpoint[te->n_checkpoint++] = (uint32_t)ck;
	column_put(&te->names, s->name);
	if (te->tensors.data) {
		const char *tn = slot_tensor(s);

		column_put(&te->tensors, strcmp(tn, s->name) ? tn : "");
	}
	if (te->dtype) {
		te->dtype[k] = s->dtype ? dtype_index(te, s->dtype) : 0;
		te->ndim[k] = s->dtype ? s->ndim : 0;
		if (s->dtype && s->ndim)
			memcpy(te->dims + te->n_dims, s->shape, s->ndim * sizeof(*te->dims));
		te->n_dims += s->dtype ? s->ndim : 0;
		te->n_dtype = te->n_ndim = k + 1;
	}
	return 0;
}

/* SRC_RECIPE slot s as the next UnitEntry. */
static int pb_entry(struct pb_unit *pb, const struct slot *s, weightd_error *err)
{
	Weightd__UnitEntry *e = &pb->entries[pb->msg.n_entries];
	int rc;

	weightd__unit_entry__init(e);
	rc = wc_recipe_pb_init(&pb->recipes[pb->n_recipes], s->recipe, err);
	if (rc < 0) {
		wc_err_about(err, NULL, NULL, s->name);
		return rc;
	}
	e->recipe = &pb->recipes[pb->n_recipes++].msg;
	e->name = s->name;
	if (s->dtype) {
		e->check_slot = 1;
		e->dtype = (char *)s->dtype;
		e->n_shape = s->ndim;
		e->shape = (uint64_t *)s->shape;
	}
	pb->entry_ptrs[pb->msg.n_entries++] = e;
	return 0;
}

static int pb_unit_init(struct pb_unit *pb, const weightd_unit *u, weightd_error *err)
{
	const weightd_server_info *si = weightd_server(u->c);
	struct pb_sizes sz;
	int rc;

	memset(pb, 0, sizeof(*pb));
	weightd__unit__init(&pb->msg);
	weightd__tensor_entries__init(&pb->columns);
	if (u->n == 0)
		return wc_err_set(err, WEIGHTD_E_EMPTY_INPUTS, "the unit has no slots");
	/* Checked before anything is encoded or sent (the daemon checks again). */
	if (si->max_unit_entries && u->n > si->max_unit_entries) {
		rc = wc_err_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				"limit exceeded: the unit has %zu slots; weightd allows at most "
				"%u entries and %u aliases (max_unit_entries)", u->n,
				si->max_unit_entries, si->max_unit_entries);
		if (err) {
			err->expected = si->max_unit_entries;
			err->actual = (int64_t)u->n;
		}
		return rc;
	}
	rc = pb_count(u, &sz, err);
	if (rc < 0)
		return rc;
	if (pb_layout(pb, u, &sz) < 0)
		goto oom;
	for (size_t i = 0; i < u->n; i++) {
		const struct slot *s = &u->slots[i];

		if (s->src == SRC_ALIAS) {
			Weightd__Alias *a = &pb->aliases[pb->msg.n_aliases];

			weightd__alias__init(a);
			a->name = s->name;
			a->target = s->alias;
			pb->alias_ptrs[pb->msg.n_aliases++] = a;
		} else if (s->src == SRC_TENSOR) {
			if (pb_column(pb, s) < 0)
				goto oom;
		} else {
			rc = pb_entry(pb, s, err);
			if (rc < 0) {
				pb_unit_fini(pb);
				return rc;
			}
		}
	}
	pb->msg.entries = pb->entry_ptrs;
	pb->msg.aliases = pb->alias_ptrs;
	if (pb->columns.n_checkpoint) {
		if (pb->columns.n_checkpoints == 1)   /* every entry reads checkpoints[0] */
			pb->columns.n_checkpoint = 0;
		pb->msg.tensors = &pb->columns;
	}
	return 0;
oom:
	pb_unit_fini(pb);
	return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
}

/* Send the unit as a materialize or preflight request. */
static int unit_send(weightd_unit *u, bool preflight, struct wc_pending **ret_p, weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	struct pb_unit pb;
	int rc;

	rc = pb_unit_init(&pb, u, err);
	if (rc < 0)
		return rc;
	if (preflight) {
		req.body_case = WEIGHTD__REQUEST__BODY_PREFLIGHT;
		req.preflight = &pb.msg;
	} else {
		req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
		req.materialize = &pb.msg;
	}
	rc = wc_conn_send(u->c, &req, wc_weight_reply_refs, ret_p, err);
	pb_unit_fini(&pb);
	return rc;
}

/* --- the materialize reply --------------------------------------------------------------- */

/*
 * What a reply comes to: its distinct weights (one per handle) and each slot's. Weight d was
 * first named by entry first[d]; the unit's entries hold refs[d] daemon references on it; its
 * dimensions start at dims[at[d]]. Every array but ws is in one block.
 */
struct reply {
	weightd_unit *u;
	const Weightd__UnitReply *ur;
	const Weightd__PackedWeights *pw;
	size_t n_dist;
	uint32_t *first, *refs;            /* per distinct weight */
	size_t *at;
	uint32_t *dist_of;                 /* per slot: its weight */
	uint32_t *out_of;                  /* per slot: its output */
	uint32_t *slot_of;                 /* per output: its slot */
	struct wc_seg **segs;              /* per fd, once made */
	weightd_weight **ws;               /* per distinct weight: the unit's on success */
	struct wd_hashidx by_handle;       /* positions in first */
	void *block;
};

static uint64_t dist_handle(const struct reply *r, size_t d)
{
	return r->pw->handle[r->first[d]];
}

static uint32_t dist_segment(const struct reply *r, size_t d)
{
	return r->pw->segment[r->first[d]];
}

static void dist_desc(const struct reply *r, size_t d, struct wc_weight_desc *ret)
{
	size_t i = r->first[d];

	wc_columns_desc(r->pw, i, r->at[d], r->u->slots[r->slot_of[i]].name, ret);
}

static bool handle_eq(const void *ctx, uint32_t pos, const void *key)
{
	return dist_handle(ctx, pos) == *(const uint64_t *)key;
}

/* The distinct weight of handle h: the one found, or a new one first named by output i. */
static uint32_t weight_of(struct reply *r, size_t i, uint64_t h, bool *ret_new)
{
	size_t x = wd_hashidx_slot(&r->by_handle, h, handle_eq, r, &h);

	*ret_new = !wd_hashidx_pos(&r->by_handle, x);
	if (*ret_new) {
		r->first[r->n_dist] = (uint32_t)i;
		wd_hashidx_set(&r->by_handle, x, h, (uint32_t)r->n_dist++);
	}
	return wd_hashidx_pos(&r->by_handle, x) - 1;
}

/* Every array, zeroed, from the connection's block cache (n outputs, as many as slots). */
static int reply_alloc(struct reply *r, uint32_t nfds, weightd_error *err)
{
	const weightd_unit *u = r->u;
	size_t n = u->n, at = 0, o_first, o_refs, o_at, o_dist, o_out, o_slot, o_segs;
	unsigned char *b;

	o_first = take(&at, n, sizeof(*r->first));
	o_refs = take(&at, n, sizeof(*r->refs));
	o_at = take(&at, n, sizeof(*r->at));
	o_dist = take(&at, n, sizeof(*r->dist_of));
	o_out = take(&at, n, sizeof(*r->out_of));
	o_slot = take(&at, n, sizeof(*r->slot_of));
	o_segs = take(&at, nfds, sizeof(*r->segs));
	b = r->block = wd_msg_cache_alloc(wc_conn_msgs(u->c), at ? at : 16);
	r->ws = wd_msg_cache_alloc(wc_conn_msgs(u->c), n * sizeof(*r->ws));
	if (!b || !r->ws || wd_hashidx_reserve(&r->by_handle, n) < 0)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	memset(b, 0, at);
	memset(r->ws, 0, n * sizeof(*r->ws));
	r->first = (uint32_t *)(void *)(b + o_first);
	r->refs = (uint32_t *)(void *)(b + o_refs);
	r->at = (size_t *)(void *)(b + o_at);
	r->dist_of = (uint32_t *)(void *)(b + o_dist);
	r->out_of = (uint32_t *)(void *)(b + o_out);
	r->slot_of = (uint32_t *)(void *)(b + o_slot);
	r->segs = (struct wc_seg **)(void *)(b + o_segs);
	return 0;
}

/*
 * The columns. Their weights carry no names: each slot's output is found by walking the slots
 * with one counter per kind (the SRC_RECIPE entries come first, then the SRC_TENSOR entries,
 * then the aliases, each in slot order), so matching costs no lookup. The columns are checked
 * (wc_columns_check), then entries of one handle must be described alike, and each alias must be
 * answered by the entry its target is: its target itself, or the same entry as the alias it
 * names (the one hash lookup, only for an alias of an alias). Errors name the slot.
 */
static int check_packed(struct reply *r, uint32_t nfds, weightd_error *err)
{
	weightd_unit *u = r->u;
	const Weightd__PackedWeights *pw = r->pw;
	size_t n_of[SRC_ALIAS + 1] = { 0 }, n_ent, next_rec, next_ten, next_al, at = 0, bad;
	const struct slot *s;
	int rc;

	for (size_t i = 0; i < u->n; i++)
		n_of[u->slots[i].src]++;
	n_ent = u->n - n_of[SRC_ALIAS];
	next_rec = 0;
	next_ten = n_of[SRC_RECIPE];
	next_al = n_ent;
	for (size_t i = 0; i < u->n; i++) {
		enum slot_src src = u->slots[i].src;
		size_t o = src == SRC_ALIAS ? next_al++ : src == SRC_TENSOR ? next_ten++ : next_rec++;

		r->out_of[i] = (uint32_t)o;
		r->slot_of[o] = (uint32_t)i;
	}
	rc = wc_columns_check(r->ur, n_ent, n_of[SRC_ALIAS], nfds, &bad, err);
	if (rc < 0) {
		if (bad != SIZE_MAX)
			wc_err_about(err, NULL, NULL, u->slots[r->slot_of[bad]].name);
		return rc;
	}
	for (size_t k = 0; k < n_ent; k++) {
		bool fresh;
		uint32_t d = weight_of(r, k, pw->handle[k], &fresh);

		s = &u->slots[r->slot_of[k]];
		if (fresh) {
			r->at[d] = at;
		} else if (!wc_columns_alike(pw, r->first[d], r->at[d], k, at)) {
			rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
					"weightd described weight %llu differently for \"%s\" and \"%s\"",
					(unsigned long long)pw->handle[k],
					u->slots[r->slot_of[r->first[d]]].name, s->name);
			wc_err_about(err, NULL, NULL, s->name);
			return rc;
		}
		r->refs[d]++;
		r->dist_of[s - u->slots] = d;
		at += pw->ndim[k];
	}
	for (size_t j = 0; j < n_of[SRC_ALIAS]; j++) {
		uint32_t owner = pw->alias_owner[j];
		const struct slot *e = &u->slots[r->slot_of[owner]], *t;

		s = &u->slots[r->slot_of[n_ent + j]];
		if (strcmp(s->alias, e->name) != 0) {
			t = find_slot(u, s->alias);
			if (!t || t->src != SRC_ALIAS ||
			    pw->alias_owner[r->out_of[t - u->slots] - n_ent] != owner) {
				rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
						"weightd answered alias \"%s\" of \"%s\" with the weight "
						"of \"%s\"", s->name, s->alias, e->name);
				wc_err_about(err, NULL, NULL, s->name);
				return rc;
			}
		}
		r->dist_of[s - u->slots] = r->dist_of[e - u->slots];
	}
	return 0;
}

/*
 * Turn a checked reply into the unit's weights: one segment per fd (found in the client's table
 * when this client holds it already), one weight per distinct weight holding as many daemon
 * references as entries name it, each slot its weight. Takes resp and fds in every case; on
 * failure every fd is closed and every reference released.
 */
static int commit(struct reply *r, Weightd__Response *resp, int *fds, uint32_t nfds,
		  weightd_error *err)
{
	weightd_unit *u = r->u;
	const Weightd__UnitReply *ur = r->ur;
	size_t n_dist = r->n_dist, n_made = 0, n_segs = 0;
	int rc = 0;

	/* From here the fds become segments (one reference each, dropped at the end). An fd of a
	 * segment this client has already is kept (in fds[i]) until the weights are locked on the
	 * client's own: weightd's lock on it protects them until then. */
	for (uint32_t i = 0; i < nfds; i++) {
		const Weightd__SegmentInfo *si = ur->segments[i];   /* checked: one per fd */
		int spare = -1;

		rc = wc_seg_get(wc_conn_segs(u->c), si->id, si->size, fds[i], &r->segs[i], &spare,
				err);
		fds[i] = spare;
		n_segs = i + 1;
		if (rc < 0) {
			r->segs[i] = NULL;
			goto fail_segs;
		}
	}
	for (size_t d = 0; d < n_dist; d++) {
		struct wc_seg *sg = r->segs[dist_segment(r, d)];
		struct wc_weight_desc wd;

		dist_desc(r, d, &wd);
		wc_seg_ref(sg);
		rc = wc_weight_new(u->c, &wd, sg, r->refs[d], &u->arena, &r->ws[d], err);
		n_made = d + 1;
		if (rc < 0) {   /* its segment reference is dropped and its references released */
			r->ws[d] = NULL;
			goto fail_made;
		}
	}
	for (uint32_t i = 0; i < nfds; i++) {
		rc = wc_seg_hold_commit(r->segs[i], err);
		if (rc < 0)
			goto fail_locked;
	}
	for (size_t i = 0; i < u->n; i++)
		u->slots[i].w = r->ws[r->dist_of[i]];
	for (uint32_t i = 0; i < nfds; i++)
		wc_seg_unref(r->segs[i]);
	u->weights = r->ws;
	u->n_weights = n_dist;
	u->bytes_read = ur->bytes_read;
	r->ws = NULL;   /* the unit's now */
	wc_conn_close_fds(fds, nfds);
	wd_msg_free(resp);
	return 0;

fail_locked:
	n_made = n_dist;

fail_made:
	/* weights made so far are released by their objects; the rest by their handles */
	wc_weight_release_all(r->ws, n_made);
	for (size_t d = n_made; d < n_dist; d++)
		wc_weight_release_handle(u->c, dist_handle(r, d), r->refs[d]);
	n_dist = 0;
fail_segs:
	for (size_t d = 0; d < n_dist; d++)
		wc_weight_release_handle(u->c, dist_handle(r, d), r->refs[d]);
	for (size_t i = 0; i < n_segs; i++)
		wc_seg_unref(r->segs[i]);
	wc_conn_close_fds(fds, nfds);
	wd_msg_free(resp);
	return rc;
}

int wc_unit_take_reply(weightd_unit *u, Weightd__Response *resp, int *fds, uint32_t nfds,
		       weightd_error *err)
{
	struct reply r = { .u = u, .ur = resp->materialize };
	int rc;

	r.pw = r.ur ? r.ur->packed : NULL;
	if (!r.pw)
		rc = wc_err_set(err, WEIGHTD_E_PROTOCOL, "weightd answered a unit without weights");
	else
		rc = reply_alloc(&r, nfds, err);
	if (rc == 0)
		rc = check_packed(&r, nfds, err);
	if (rc == 0)
		rc = commit(&r, resp, fds, nfds, err);
	else
		wc_conn_discard(u->c, wc_weight_reply_refs, resp, fds, nfds);
	wd_hashidx_free(&r.by_handle);
	wd_msg_free(r.block);
	wd_msg_free(r.ws);
	u->state = rc == 0 ? U_HELD : U_NEW;
	return rc;
}

/* --- the preflight reply ----------------------------------------------------------------- */

struct preflight {
	weightd_preflight pub;
	Weightd__Response *resp;     /* backs the strings and shapes */
	weightd_output_info *outs;
};

/* The preflight's reply as its result (an inflight's settle: takes resp and fds, which a
 * preflight reply does not need, in every case). */
static int preflight_settle(weightd_inflight *f, Weightd__Response *resp, int *fds, uint32_t nfds,
			    void **ret, weightd_error *err)
{
	const Weightd__UnitReply *ur = resp->preflight;
	struct preflight *p;
	size_t n = ur ? ur->n_weights : 0;

	(void)f;
	wc_conn_close_fds(fds, nfds);
	for (size_t i = 0; i < n; i++) {
		int rc = wc_weight_info_check(ur->weights[i], err);

		if (rc < 0) {
			wd_msg_free(resp);
			return rc;
		}
	}
	p = calloc(1, sizeof(*p));
	if (p)
		p->outs = calloc(n ? n : 1, sizeof(*p->outs));
	if (!p || !p->outs) {
		free(p);
		wd_msg_free(resp);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const Weightd__WeightInfo *wi = ur->weights[i];
		weightd_output_info *o = &p->outs[i];

		o->name = wi->name;
		o->dtype = wi->dtype;
		o->ndim = wi->n_shape;
		o->shape = wi->shape;
		o->nbytes = wi->nbytes;
		o->alias_of = wi->alias_of ? wi->alias_of : "";
		o->key = wi->key.len == WEIGHTD_DIGEST_LEN ? wi->key.data : NULL;
	}
	p->resp = resp;
	p->pub.count = n;
	p->pub.outputs = p->outs;
	*ret = &p->pub;
	return 0;
}

void weightd_preflight_free(weightd_preflight *pub)
{
	struct preflight *p = (struct preflight *)pub;

	if (!p)
		return;
	wd_msg_free(p->resp);
	free(p->outs);
	free(p);
}

static void preflight_free(void *p)
{
	weightd_preflight_free(p);
}

static const struct wc_inflight_kind preflight = {
	.body = WEIGHTD__RESPONSE__BODY_PREFLIGHT,
	.settle = preflight_settle,
	.result_free = preflight_free,
	.name_slot = true,
};

/* --- the unit's calls -------------------------------------------------------------------- */

int weightd_unit_new(weightd_client *c, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_new: no client or no result pointer");
	u = calloc(1, sizeof(*u));
	if (!u)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	u->c = c;
	wc_conn_ref(c);
	wc_arena_init(&u->arena, wc_conn_msgs(c));
	*ret = u;
	return 0;
}

/* The calls that change slots are only allowed before submit (and after a failure). */
static int check_new(const weightd_unit *u, const char *call, weightd_error *err)
{
	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: unit is NULL", call);
	if (u->state != U_NEW)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "%s: the unit was already submitted; slots can change only before "
				  "submit or after a failed finish or validate", call);
	return 0;
}

int weightd_unit_slot(weightd_unit *u, const char *name, const char *dtype,
		      const uint64_t *shape, size_t ndim, void **dest, weightd_error *err)
{
	struct slot *s;
	int r;

	r = check_new(u, "weightd_unit_slot", err);
	if (r < 0)
		return r;
	if (!name || !name[0])
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "a slot needs a non-empty name");
	if (find_slot(u, name)) {
		r = wc_err_set(err, WEIGHTD_E_DUPLICATE_NAME,
			       "slot \"%s\" is declared twice in the unit", name);
		wc_err_about(err, NULL, NULL, name);
		return r;
	}
	if (dtype && wd_dtype_from_name(dtype) == WD_DTYPE_INVALID) {
		r = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
			       "slot \"%s\" declares unknown dtype \"%s\"", name, dtype);
		wc_err_about(err, NULL, NULL, name);
		return r;
	}
	if (dtype && (ndim > WEIGHTD_MAX_DIMS || (ndim && !shape))) {
		r = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
			       "slot \"%s\" declares %zu dimensions (at most %d)", name, ndim,
			       WEIGHTD_MAX_DIMS);
		wc_err_about(err, NULL, NULL, name);
		return r;
	}
	if (u->n > (size_t)INT32_MAX - 1)
		return wc_err_set(err, WEIGHTD_E_LIMIT_EXCEEDED, "too many slots in one unit");
	if (u->n == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 16;
		struct slot *slots = wd_msg_cache_alloc(wc_conn_msgs(u->c), cap * sizeof(*slots));

		if (!slots)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		if (u->n)
			memcpy(slots, u->slots, u->n * sizeof(*slots));
		wd_msg_free(u->slots);
		u->slots = slots;
		u->cap = cap;
	}
	if (wd_hashidx_reserve(&u->index, u->n + 1) < 0)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	s = &u->slots[u->n];
	memset(s, 0, sizeof(*s));
	s->name = wc_arena_strdup(&u->arena, name);
	if (!s->name)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	s->dtype = dtype ? wd_dtype_name(wd_dtype_from_name(dtype)) : NULL;
	if (dtype && ndim) {
		uint64_t *sh = wc_arena_alloc(&u->arena, ndim * sizeof(*shape));

		if (!sh)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(sh, shape, ndim * sizeof(*shape));
		s->shape = sh;
		s->ndim = (uint32_t)ndim;
	}
	s->dest = dest;
	wd_hashidx_put(&u->index, name_hash(s->name), (uint32_t)u->n);
	return (int)u->n++;
}

static struct slot *slot_for_set(weightd_unit *u, const char *slot, const char *call,
				 weightd_error *err, int *rc)
{
	struct slot *s;

	*rc = check_new(u, call, err);
	if (*rc < 0)
		return NULL;
	s = find_slot(u, slot);
	if (!s) {
		*rc = wc_err_set(err, WEIGHTD_E_NOT_FOUND, "%s: the unit has no slot \"%s\"", call,
				 slot ? slot : "(null)");
		wc_err_about(err, NULL, NULL, slot);
	}
	return s;
}

static void slot_clear_src(struct slot *s)
{
	weightd_recipe_free(s->recipe);
	if (s->src == SRC_ALIAS)   /* a tensor's strings are in the unit's arena */
		free(s->alias);
	s->recipe = NULL;
	s->alias = NULL;
	s->src = SRC_NONE;
}

int weightd_unit_set_recipe(weightd_unit *u, const char *slot, const weightd_recipe *r,
			    weightd_error *err)
{
	weightd_recipe *copy = NULL;
	struct slot *s;
	int rc;

	s = slot_for_set(u, slot, "weightd_unit_set_recipe", err, &rc);
	if (!s)
		return rc;
	if (!r || r->n == 0) {
		rc = wc_err_set(err, WEIGHTD_E_EMPTY_INPUTS, "slot \"%s\" was given an empty recipe",
				slot);
		wc_err_about(err, NULL, NULL, slot);
		return rc;
	}
	rc = wc_recipe_copy(r, &copy, err);
	if (rc < 0)
		return rc;
	slot_clear_src(s);
	s->recipe = copy;
	s->src = SRC_RECIPE;
	return 0;
}

int weightd_unit_set_tensor(weightd_unit *u, const char *slot, const char *checkpoint,
			    const char *tensor, const weightd_selection *sel, weightd_error *err)
{
	weightd_recipe *r = NULL;
	struct slot *s;
	int rc;

	s = slot_for_set(u, slot, "weightd_unit_set_tensor", err, &rc);
	if (!s)
		return rc;
	if (!sel && checkpoint && checkpoint[0] && tensor && tensor[0]) {
		size_t cl = strlen(checkpoint) + 1, tl = strlen(tensor) + 1;
		char *src = wc_arena_alloc(&u->arena, cl + tl);

		if (!src)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(src, checkpoint, cl);
		memcpy(src + cl, tensor, tl);
		slot_clear_src(s);
		s->alias = src;
		s->src = SRC_TENSOR;
		return 0;
	}
	rc = weightd_recipe_new(&r, err);
	if (rc == 0)
		rc = weightd_recipe_source(r, checkpoint, tensor, sel, err);
	if (rc < 0) {
		weightd_recipe_free(r);
		wc_err_about(err, checkpoint, tensor, slot);
		return rc;
	}
	slot_clear_src(s);
	s->recipe = r;
	s->src = SRC_RECIPE;
	return 0;
}

int weightd_unit_set_alias(weightd_unit *u, const char *slot, const char *target,
			   weightd_error *err)
{
	struct slot *s;
	char *t;
	int rc;

	s = slot_for_set(u, slot, "weightd_unit_set_alias", err, &rc);
	if (!s)
		return rc;
	if (!target || !target[0]) {
		rc = wc_err_set(err, WEIGHTD_E_BAD_ALIAS, "slot \"%s\" is made an alias of nothing",
				slot);
		wc_err_about(err, NULL, NULL, slot);
		return rc;
	}
	t = strdup(target);
	if (!t)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	slot_clear_src(s);
	s->alias = t;
	s->src = SRC_ALIAS;
	return 0;
}

int weightd_unit_submit(weightd_unit *u, weightd_error *err)
{
	int rc;

	rc = check_new(u, "weightd_unit_submit", err);
	if (rc < 0)
		return rc;
	rc = unit_send(u, false, &u->p, err);
	if (rc == 0)
		u->state = U_SUBMITTED;
	return rc;
}

int weightd_unit_poll(weightd_unit *u, int *ret_done, weightd_error *err)
{
	wc_err_clear(err);
	if (!u || !ret_done)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_unit_poll: no unit");
	if (u->state != U_SUBMITTED) {
		*ret_done = u->state != U_NEW;
		return 0;
	}
	*ret_done = wc_conn_wait(u->c, u->p, 0);
	return 0;
}

/* Error about slot s: names the slot, and the checkpoint and tensor its recipe reads. */
static void about_slot(const struct slot *s, weightd_error *err)
{
	const char *ck = NULL, *tn = NULL;

	if (!err)
		return;
	if (s->src == SRC_TENSOR) {
		ck = slot_ckpt(s);
		tn = slot_tensor(s);
	} else {
		wc_recipe_about(s->recipe, &ck, &tn);
	}
	if (!err->checkpoint[0] && !err->tensor[0])
		wc_err_about(err, ck, tn, NULL);
	if (!err->slot[0])
		wc_err_about(err, NULL, NULL, s->name);
}

/* Apply the JSON paths of the unit's recipes to an error naming a node. */
static void annotate(const weightd_unit *u, weightd_error *err)
{
	const struct slot *s;

	if (!err || !err->node)
		return;
	s = find_slot(u, err->slot);
	if (!s && u->n == 1)
		s = &u->slots[0];
	if (s && s->src == SRC_RECIPE) {
		struct wc_annot *as = NULL;
		size_t n = 0;

		if (wc_recipe_annot_add(&as, &n, err->slot[0] ? err->slot : NULL, s->recipe) == 0)
			wc_recipe_annot_apply(as, n, err);
		wc_recipe_annot_free(as, n);
	}
}

int weightd_unit_finish(weightd_unit *u, weightd_error *err)
{
	Weightd__Response *resp = NULL;
	int *fds = NULL;
	uint32_t nfds = 0;
	int rc;

	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_unit_finish: unit is NULL");
	if (u->state == U_HELD || u->state == U_VALID)
		return 0;
	if (u->state != U_SUBMITTED)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_finish: the unit was not submitted");
	wc_conn_wait(u->c, u->p, -1);
	rc = wc_conn_pending_take(u->p, WEIGHTD__RESPONSE__BODY_MATERIALIZE, &resp, &fds, &nfds,
				  err);
	if (rc == 0)
		rc = wc_unit_take_reply(u, resp, fds, nfds, err);
	else
		annotate(u, err);
	wc_conn_pending_free(u->c, u->p);
	u->p = NULL;
	if (rc < 0) {
		const struct slot *s = err ? find_slot(u, err->slot) : NULL;

		if (s)
			about_slot(s, err);
		wc_err_name_slot(err);
		u->state = U_NEW;
		return rc;
	}
	u->state = U_HELD;
	return 0;
}

/* Release everything the unit holds (unmapping it) and go back to NEW. */
static void unit_drop_weights(weightd_unit *u)
{
	wc_weight_release_all(u->weights, u->n_weights);
	wd_msg_free(u->weights);
	u->weights = NULL;
	u->n_weights = 0;
	for (size_t i = 0; i < u->n; i++) {
		u->slots[i].w = NULL;
		u->slots[i].data = NULL;
	}
	u->state = U_NEW;
}

/* Everything about slot s's weight that can be checked without touching the fd. */
static int check_slot(const struct slot *s, weightd_error *err)
{
	const weightd_weight *w = s->w;
	enum wd_dtype dt = wd_dtype_from_name(w->dtype);
	uint64_t elems, bytes;
	int rc;

	if (dt == WD_DTYPE_INVALID) {
		rc = wc_err_set(err, WEIGHTD_E_UNSUPPORTED,
				"weightd served dtype %s, which this libweightd does not know", w->dtype);
		goto fail;
	}
	if (s->dtype && strcmp(s->dtype, w->dtype) != 0) {
		rc = wc_err_set(err, WEIGHTD_E_DTYPE_MISMATCH,
				"weightd served dtype %s, the slot declares %s", w->dtype, s->dtype);
		goto fail;
	}
	if (s->dtype && s->ndim != w->ndim) {
		rc = wc_err_set(err, WEIGHTD_E_SHAPE_MISMATCH,
				"weightd served %zu dimensions, the slot declares %u", w->ndim, s->ndim);
		if (err) {
			err->expected = (int64_t)s->ndim;
			err->actual = (int64_t)w->ndim;
		}
		goto fail;
	}
	for (size_t i = 0; s->dtype && i < s->ndim; i++)
		if (s->shape[i] != w->shape[i]) {
			rc = wc_err_set(err, WEIGHTD_E_SHAPE_MISMATCH,
					"weightd served %llu along axis %zu, the slot declares %llu",
					(unsigned long long)w->shape[i], i, (unsigned long long)s->shape[i]);
			if (err) {
				err->axis = (int32_t)i;
				err->expected = (int64_t)s->shape[i];
				err->actual = (int64_t)w->shape[i];
			}
			goto fail;
		}
	if (!wd_shape_elems(w->shape, (int)w->ndim, &elems) || !wd_dtype_bytes(dt, elems, &bytes)) {
		rc = wc_err_set(err, WEIGHTD_E_OVERFLOW,
				"the served shape's byte count overflows or is not a whole number of %s "
				"blocks", w->dtype);
		goto fail;
	}
	if (bytes != w->nbytes) {
		rc = wc_err_set(err, WEIGHTD_E_BYTE_COUNT_MISMATCH,
				"weightd served %llu bytes, but %s of that shape takes %llu",
				(unsigned long long)w->nbytes, w->dtype, (unsigned long long)bytes);
		if (err) {
			err->expected = (int64_t)bytes;
			err->actual = (int64_t)w->nbytes;
		}
		goto fail;
	}
	return 0;
fail:
	about_slot(s, err);
	wc_err_name_slot(err);
	return rc;
}

/* A byte range of one segment that validate pre-faults. */
struct pop_range {
	struct wc_seg *seg;
	uint64_t off, end;
};

static int pop_cmp(const void *a, const void *b)
{
	const struct pop_range *x = a, *y = b;

	if (x->seg != y->seg)
		return (uintptr_t)x->seg < (uintptr_t)y->seg ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Ranges closer than this are populated as one: the pages between them (other weights of the
 * segment, or alignment padding) cost less to map than another system call per weight. */
#define POP_GAP (64u << 10)

/*
 * Pre-fault the unit's distinct weights, each segment's ranges sorted and joined so that a
 * packed unit of many small weights is a few madvise calls, not one per weight. Advisory: a
 * failure (of the kernel, or of the sort's allocation) leaves the rest to demand faults.
 */
static void unit_populate(weightd_unit *u)
{
	struct pop_range *r = malloc(u->n_weights * sizeof(*r) + 1);
	size_t n = 0;

	if (!r)
		return;
	for (size_t i = 0; i < u->n_weights; i++) {
		weightd_weight *w = u->weights[i];

		if (w && w->mapped && w->nbytes)
			r[n++] = (struct pop_range){ w->seg, w->offset, w->offset + w->nbytes };
	}
	qsort(r, n, sizeof(*r), pop_cmp);
	for (size_t i = 0; i < n;) {
		struct pop_range cur = r[i];

		for (i++; i < n && r[i].seg == cur.seg && r[i].off <= cur.end + POP_GAP; i++)
			if (r[i].end > cur.end)
				cur.end = r[i].end;
		(void)wc_seg_populate(cur.seg, cur.off, cur.end - cur.off);
	}
	free(r);
}

int weightd_unit_set_populate(weightd_unit *u, int on, weightd_error *err)
{
	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_set_populate: unit is NULL");
	u->populate = on != 0;
	return 0;
}

int weightd_unit_validate(weightd_unit *u, weightd_error *err)
{
	int rc;

	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_unit_validate: unit is NULL");
	if (u->state == U_VALID)
		return 0;
	if (u->state == U_SUBMITTED) {
		rc = weightd_unit_finish(u, err);
		if (rc < 0)
			return rc;
	}
	if (u->state != U_HELD)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_validate: the unit was not submitted");
	for (size_t i = 0; i < u->n; i++) {
		rc = check_slot(&u->slots[i], err);
		if (rc < 0)
			goto fail;
	}
	for (size_t i = 0; i < u->n; i++) {
		struct slot *s = &u->slots[i];

		rc = wc_weight_map(s->w, s->name, err);
		if (rc < 0) {
			about_slot(s, err);
			wc_err_name_slot(err);
			goto fail;
		}
		s->data = s->w->map;
	}
	if (u->populate)
		unit_populate(u);
	u->state = U_VALID;
	return 0;
fail:
	unit_drop_weights(u);
	return rc;
}

void weightd_unit_bind(weightd_unit *u)
{
	if (!u || u->state != U_VALID)
		return;
	for (size_t i = 0; i < u->n; i++)
		if (u->slots[i].dest)
			*u->slots[i].dest = (void *)u->slots[i].data;
}

void weightd_unit_free(weightd_unit *u)
{
	if (!u)
		return;
	if (u->p)
		wc_conn_pending_free(u->c, u->p);
	wc_weight_release_all(u->weights, u->n_weights);
	wd_msg_free(u->weights);
	for (size_t i = 0; i < u->n; i++)
		slot_clear_src(&u->slots[i]);
	wd_msg_free(u->slots);
	wd_hashidx_free(&u->index);
	wc_arena_free(&u->arena);   /* after the weights, which live in it */
	wc_conn_unref(u->c);      /* last: the arena's blocks go to its cache */
	free(u);
}

size_t weightd_unit_slot_count(const weightd_unit *u)
{
	return u ? u->n : 0;
}

const char *weightd_unit_slot_name(const weightd_unit *u, size_t i)
{
	return u && i < u->n ? u->slots[i].name : NULL;
}

const weightd_weight *weightd_unit_weight(const weightd_unit *u, const char *slot)
{
	const struct slot *s;

	if (!u || (u->state != U_HELD && u->state != U_VALID))
		return NULL;
	s = find_slot(u, slot);
	return s ? s->w : NULL;
}

const void *weightd_unit_data(const weightd_unit *u, const char *slot)
{
	const struct slot *s;

	if (!u || u->state != U_VALID)
		return NULL;
	s = find_slot(u, slot);
	return s ? s->data : NULL;
}

uint64_t weightd_unit_bytes_read(const weightd_unit *u)
{
	return u ? u->bytes_read : 0;
}

/* --- preflight --------------------------------------------------------------------------- */

int weightd_unit_preflight(weightd_unit *u, weightd_inflight **ret, weightd_error *err)
{
	weightd_inflight *f = NULL;
	int rc;

	wc_err_clear(err);
	if (!u || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_preflight: no unit or no result pointer");
	rc = wc_inflight_new(u->c, &preflight, &f, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < u->n; i++)
		if (u->slots[i].src == SRC_RECIPE &&
		    wc_recipe_annot_add(&f->annots, &f->n_annots, u->slots[i].name,
					u->slots[i].recipe) < 0) {
			weightd_inflight_free(f);
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
	if (u->n == 1 && (u->slots[0].src == SRC_RECIPE || u->slots[0].src == SRC_TENSOR)) {
		const char *ck, *tn;

		if (u->slots[0].src == SRC_TENSOR) {
			ck = slot_ckpt(&u->slots[0]);
			tn = slot_tensor(&u->slots[0]);
		} else {
			wc_recipe_about(u->slots[0].recipe, &ck, &tn);
		}
		snprintf(f->checkpoint, sizeof(f->checkpoint), "%s", ck ? ck : "");
		snprintf(f->tensor, sizeof(f->tensor), "%s", tn ? tn : "");
	}
	rc = unit_send(u, true, &f->p, err);
	if (rc < 0) {
		weightd_inflight_free(f);
		return rc;
	}
	*ret = f;
	return 0;
}

int weightd_preflight_finish(weightd_inflight *f, weightd_preflight **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (!f || !ret || f->kind != &preflight) {
		weightd_inflight_free(f);
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_preflight_finish: not the handle of a preflight");
	}
	r = wc_inflight_wait_settle(f, err);
	if (r == 0) {
		*ret = f->result;
		f->result = NULL;
	}
	weightd_inflight_free(f);
	return r;
}

void wc_unit_take_recipe(weightd_unit *u, const char *slot, weightd_recipe *r)
{
	struct slot *s = find_slot(u, slot);

	slot_clear_src(s);
	s->recipe = r;
	s->src = SRC_RECIPE;
}
