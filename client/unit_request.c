/* SPDX-License-Identifier: Apache-2.0 */
/* unit_request.c - a unit's request: its slots as protobuf entries or columns, in one block,
 * sent. */
#include "unit_int.h"

#include <stdlib.h>
#include <string.h>

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
		wc_pb_recipe_fini(&pb->recipes[i]);
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
			wd_hashidx_put(&pb->ck_index, wc_name_hash(te->checkpoints[0]), 0);
		h = wc_name_hash(ck);
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
	o_ent = wc_take(&at, n_ent, sizeof(*pb->entries));
	o_eptr = wc_take(&at, n_ent, sizeof(*pb->entry_ptrs));
	o_al = wc_take(&at, n_src[SRC_ALIAS], sizeof(*pb->aliases));
	o_alptr = wc_take(&at, n_src[SRC_ALIAS], sizeof(*pb->alias_ptrs));
	o_rec = wc_take(&at, n_src[SRC_RECIPE], sizeof(*pb->recipes));
	o_names = wc_take(&at, sz->names, 1);
	o_tensors = wc_take(&at, sz->renamed ? sz->tensors : 0, 1);
	o_ck = wc_take(&at, n_ten, sizeof(*te->checkpoint));
	o_cks = wc_take(&at, n_ten, sizeof(*te->checkpoints));
	if (sz->declared) {
		o_dt = wc_take(&at, n_ten, sizeof(*te->dtype));
		o_dts = wc_take(&at, n_ten, sizeof(*te->dtypes));
		o_ndim = wc_take(&at, n_ten, sizeof(*te->ndim));
		o_dims = wc_take(&at, sz->dims, sizeof(*te->dims));
	}
	b = pb->block = wd_msg_cache_alloc(u->c->msgs, at ? at : 16);
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
	rc = wc_pb_recipe_init(&pb->recipes[pb->n_recipes], s->recipe, err);
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

int wc_unit_send(weightd_unit *u, bool preflight, struct wc_pending **ret_p,
		 weightd_error *err)
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
	rc = wc_send(u->c, &req, ret_p, err);
	pb_unit_fini(&pb);
	return rc;
}
