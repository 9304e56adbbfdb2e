/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.c - libweightd's selections and recipes: the builders, copies, the wire view, and where
 * JSON put each node (the JSON form itself is recipe_json.c). */
#include "recipe.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "err.h"

/* --- selections -------------------------------------------------------------------------- */

static int sel_alloc(int kind, weightd_selection **ret, weightd_error *err)
{
	weightd_selection *s;

	wc_err_clear(err);
	if (!ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "selection: ret is NULL");
	s = calloc(1, sizeof(*s));
	if (!s)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	s->kind = kind;
	*ret = s;
	return 0;
}

/* The error for a selection [start, end) that is empty: `what`, then `where` after the range. */
static int empty_range(const char *what, uint64_t start, uint64_t end, const char *where,
		       weightd_error *err)
{
	return wc_err_set(err, WEIGHTD_E_OUT_OF_RANGE,
			  "%s [%llu, %llu)%s is empty: start must be below end", what,
			  (unsigned long long)start, (unsigned long long)end, where);
}

int weightd_selection_full(weightd_selection **ret, weightd_error *err)
{
	return sel_alloc(WEIGHTD__SELECTION__KIND__SEL_FULL, ret, err);
}

int weightd_selection_range(uint32_t axis, uint64_t start, uint64_t end,
			    weightd_selection **ret, weightd_error *err)
{
	char where[32];
	int r;

	wc_err_clear(err);
	snprintf(where, sizeof(where), " on axis %u", axis);
	if (start >= end)
		return empty_range("range", start, end, where, err);
	r = sel_alloc(WEIGHTD__SELECTION__KIND__SEL_RANGE, ret, err);
	if (r == 0) {
		(*ret)->axis = axis;
		(*ret)->start = start;
		(*ret)->end = end;
	}
	return r;
}

int weightd_selection_indices(uint32_t axis, const uint64_t *indices, size_t n,
			      weightd_selection **ret, weightd_error *err)
{
	uint64_t *copy;
	int r;

	wc_err_clear(err);
	if (n == 0 || !indices)
		return wc_err_set(err, WEIGHTD_E_EMPTY_INPUTS,
				  "an indices selection on axis %u needs at least one index", axis);
	if (n > WC_MAX_INDICES)
		return wc_err_set(err, WEIGHTD_E_RECIPE_TOO_LARGE,
				  "an indices selection lists %zu indices (at most %u)", n,
				  WC_MAX_INDICES);
	copy = malloc(n * sizeof(*copy));
	if (!copy)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	memcpy(copy, indices, n * sizeof(*copy));
	r = sel_alloc(WEIGHTD__SELECTION__KIND__SEL_INDICES, ret, err);
	if (r < 0) {
		free(copy);
		return r;
	}
	(*ret)->axis = axis;
	(*ret)->indices = copy;
	(*ret)->n_indices = n;
	return 0;
}

int weightd_selection_elements(uint64_t start, uint64_t end, const uint64_t *shape, size_t ndim,
			       weightd_selection **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (start >= end)
		return empty_range("elements", start, end, "", err);
	if (ndim > WEIGHTD_MAX_DIMS || (ndim && !shape))
		return wc_err_set(err, WEIGHTD_E_RECIPE_TOO_LARGE,
				  "an elements selection's shape has %zu dimensions (at most %d)",
				  ndim, WEIGHTD_MAX_DIMS);
	r = sel_alloc(WEIGHTD__SELECTION__KIND__SEL_ELEMENTS, ret, err);
	if (r == 0) {
		(*ret)->start = start;
		(*ret)->end = end;
		(*ret)->ndim = ndim;
		if (ndim)
			memcpy((*ret)->shape, shape, ndim * sizeof(*shape));
	}
	return r;
}

int weightd_selection_shard(uint32_t axis, uint32_t rank, uint32_t world,
			    weightd_selection **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (world == 0 || rank >= world)
		return wc_err_set(err, WEIGHTD_E_OUT_OF_RANGE,
				  "shard rank %u of world %u on axis %u: the rank must be below the "
				  "world size", rank, world, axis);
	r = sel_alloc(WEIGHTD__SELECTION__KIND__SEL_SHARD, ret, err);
	if (r == 0) {
		(*ret)->axis = axis;
		(*ret)->rank = rank;
		(*ret)->world = world;
	}
	return r;
}

int weightd_selection_shard_even(uint32_t axis, uint32_t rank, uint32_t world,
				 weightd_selection **ret, weightd_error *err)
{
	int r = weightd_selection_shard(axis, rank, world, ret, err);

	if (r == 0)
		(*ret)->even = true;
	return r;
}

void weightd_selection_free(weightd_selection *s)
{
	if (!s)
		return;
	free(s->indices);
	free(s);
}

/* Deep copy into dst (an indices array is duplicated). */
static int sel_copy(struct weightd_selection *dst, const struct weightd_selection *src,
		    weightd_error *err)
{
	*dst = *src;
	dst->indices = NULL;
	if (src->n_indices) {
		dst->indices = malloc(src->n_indices * sizeof(uint64_t));
		if (!dst->indices)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(dst->indices, src->indices, src->n_indices * sizeof(uint64_t));
	}
	return 0;
}

/* --- recipe builder ---------------------------------------------------------------------- */

static const char *const op_names[] = {
	[WEIGHTD__OP__OP_SOURCE] = "source", [WEIGHTD__OP__OP_SELECT] = "select",
	[WEIGHTD__OP__OP_CONCAT] = "concat", [WEIGHTD__OP__OP_STACK] = "stack",
	[WEIGHTD__OP__OP_RESHAPE] = "reshape", [WEIGHTD__OP__OP_TRANSPOSE] = "transpose",
	[WEIGHTD__OP__OP_CAST] = "cast", [WEIGHTD__OP__OP_VIEW] = "view",
	[WEIGHTD__OP__OP_DEQUANT_BLOCK] = "dequant_block",
};

int weightd_recipe_new(weightd_recipe **ret, weightd_error *err)
{
	wc_err_clear(err);
	if (!ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_recipe_new: ret is NULL");
	*ret = calloc(1, sizeof(**ret));
	if (!*ret)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	return 0;
}

static void node_fini(struct wc_node *n)
{
	free(n->checkpoint);
	free(n->tensor);
	free(n->sel.indices);
	free(n->inputs);
	free(n->path);
}

void weightd_recipe_free(weightd_recipe *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		node_fini(&r->nodes[i]);
	free(r->nodes);
	free(r);
}

size_t weightd_recipe_nodes(const weightd_recipe *r)
{
	return r ? r->n : 0;
}

/* Error about node `idx` (being added) of kind `op`. */
static int node_err(weightd_error *err, size_t idx, int op, int code, const char *what)
{
	int r = wc_err_set(err, code, "recipe node %zu (%s): %s", idx, op_names[op], what);

	if (err)
		err->node = (uint32_t)idx + 1;
	return r;
}

/*
 * Append a node of kind `op` (zeroed) and return it through *ret_n, after checking the
 * structural things only this side can: the recipe exists and is not full, and each input names
 * an earlier node. The node is committed by the caller with commit_node once it is filled.
 */
static int add_node(weightd_recipe *r, int op, const int *inputs, size_t n_inputs,
		    struct wc_node **ret_n, weightd_error *err)
{
	struct wc_node *n = NULL;

	wc_err_clear(err);
	if (!r)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "recipe builder: recipe is NULL");
	if (r->n >= WC_MAX_NODES)
		return node_err(err, r->n, op, WEIGHTD_E_RECIPE_TOO_LARGE,
				"the recipe already has the most nodes this library builds");
	if (n_inputs && !inputs)
		return node_err(err, r->n, op, WEIGHTD_E_INVALID_ARGUMENT, "inputs is NULL");
	if (n_inputs > WC_MAX_NODES)
		return node_err(err, r->n, op, WEIGHTD_E_RECIPE_TOO_LARGE, "too many inputs");
	for (size_t i = 0; i < n_inputs; i++)
		if (inputs[i] < 0 || (size_t)inputs[i] >= r->n) {
			char what[96];

			snprintf(what, sizeof(what), "input %zu names node %d, which does not exist "
				 "yet (the recipe has %zu)", i, inputs[i], r->n);
			return node_err(err, r->n, op, WEIGHTD_E_INVALID_ARGUMENT, what);
		}
	if (r->n == r->cap) {
		/* most recipes are one source: start at one node (384 bytes), not a batch */
		size_t cap = r->cap ? r->cap * 2 : 1;
		struct wc_node *nodes = realloc(r->nodes, cap * sizeof(*nodes));

		if (!nodes)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		r->nodes = nodes;
		r->cap = cap;
	}
	n = &r->nodes[r->n];
	memset(n, 0, sizeof(*n));
	n->op = op;
	if (n_inputs) {
		n->inputs = malloc(n_inputs * sizeof(*n->inputs));
		if (!n->inputs)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		for (size_t i = 0; i < n_inputs; i++)
			n->inputs[i] = (uint32_t)inputs[i];
		n->n_inputs = n_inputs;
	}
	*ret_n = n;
	return 0;
}

/* Keep the node just filled; returns its index. */
static int commit_node(weightd_recipe *r)
{
	return (int)r->n++;
}

/* Drop the node being filled after a failure. */
static int abort_node(weightd_recipe *r, int rc)
{
	node_fini(&r->nodes[r->n]);
	return rc;
}

/* A new node of `op` over `inputs`, to fill and then end with end_node; NULL with *rc set (and
 * nothing to end) when it cannot be added. */
static struct wc_node *begin_node(weightd_recipe *r, int op, const int *inputs, size_t n_inputs,
				  int *rc, weightd_error *err)
{
	struct wc_node *n = NULL;

	*rc = add_node(r, op, inputs, n_inputs, &n, err);
	return *rc < 0 ? NULL : n;
}

/* Keep the node being filled (its index) when `rc` is 0, or drop it and return `rc`. */
static int end_node(weightd_recipe *r, int rc)
{
	return rc < 0 ? abort_node(r, rc) : commit_node(r);
}

static int set_dtype(weightd_recipe *r, struct wc_node *n, const char *dtype, weightd_error *err)
{
	char what[80];

	if (!dtype || wd_dtype_from_name(dtype) == WD_DTYPE_INVALID) {
		snprintf(what, sizeof(what), "unknown dtype \"%.40s\"", dtype ? dtype : "(null)");
		return node_err(err, r->n, n->op, WEIGHTD_E_UNSUPPORTED_CAST, what);
	}
	snprintf(n->dtype, sizeof(n->dtype), "%s", dtype);
	return 0;
}

/*
 * Copy `count` items of `size` bytes from `src` (a caller's array, named `name` in errors) into
 * the node's `dst`, which holds WEIGHTD_MAX_DIMS: 0, or the error when there are more or the
 * array is NULL. `too_many` says what there are more of ("the shape has more than 8 dimensions").
 */
static int set_dims(weightd_recipe *r, struct wc_node *n, void *dst, const void *src,
		    size_t count, size_t size, const char *name, const char *too_many,
		    weightd_error *err)
{
	char what[48];

	if (count > WEIGHTD_MAX_DIMS)
		return node_err(err, r->n, n->op, WEIGHTD_E_RECIPE_TOO_LARGE, too_many);
	if (count && !src) {
		snprintf(what, sizeof(what), "%s is NULL", name);
		return node_err(err, r->n, n->op, WEIGHTD_E_INVALID_ARGUMENT, what);
	}
	if (count)
		memcpy(dst, src, count * size);
	return 0;
}

static int set_shape(weightd_recipe *r, struct wc_node *n, const uint64_t *shape, size_t ndim,
		     weightd_error *err)
{
	int rc = set_dims(r, n, n->shape, shape, ndim, sizeof(*shape), "shape",
			  "the shape has more than 8 dimensions", err);

	if (rc == 0)
		n->ndim = ndim;
	return rc;
}

/* The node's selection: a copy of sel, or none (the whole input) when sel is NULL. */
static int set_sel(struct wc_node *n, const weightd_selection *sel, weightd_error *err)
{
	int rc = sel ? sel_copy(&n->sel, sel, err) : 0;

	n->has_sel = sel && rc == 0;
	return rc;
}

int weightd_recipe_source(weightd_recipe *r, const char *checkpoint, const char *tensor,
			  const weightd_selection *sel, weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_SOURCE, NULL, 0, &rc, err);

	if (!n)
		return rc;
	if (!checkpoint || !checkpoint[0] || !tensor || !tensor[0])
		return abort_node(r, node_err(err, r->n, n->op, WEIGHTD_E_INVALID_ARGUMENT,
					      "a source needs a checkpoint and a tensor name"));
	n->checkpoint = strdup(checkpoint);
	n->tensor = strdup(tensor);
	if (!n->checkpoint || !n->tensor)
		return abort_node(r, wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory"));
	return end_node(r, set_sel(n, sel, err));
}

int weightd_recipe_select(weightd_recipe *r, int input, const weightd_selection *sel,
			  weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_SELECT, &input, 1, &rc, err);

	if (!n)
		return rc;
	return end_node(r, set_sel(n, sel, err));
}

static int join(weightd_recipe *r, int op, int axis, const int *inputs, size_t n_inputs,
		weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, op, inputs, n_inputs, &rc, err);

	if (!n)
		return rc;
	n->axis = axis;
	return commit_node(r);
}

int weightd_recipe_concat(weightd_recipe *r, int axis, const int *inputs, size_t n,
			  weightd_error *err)
{
	return join(r, WEIGHTD__OP__OP_CONCAT, axis, inputs, n, err);
}

int weightd_recipe_stack(weightd_recipe *r, int axis, const int *inputs, size_t n,
			 weightd_error *err)
{
	return join(r, WEIGHTD__OP__OP_STACK, axis, inputs, n, err);
}

int weightd_recipe_reshape(weightd_recipe *r, int input, const uint64_t *shape, size_t ndim,
			   weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_RESHAPE, &input, 1, &rc, err);

	if (!n)
		return rc;
	rc = set_shape(r, n, shape, ndim, err);
	return end_node(r, rc);
}

int weightd_recipe_transpose(weightd_recipe *r, int input, const uint32_t *perm, size_t np,
			     weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_TRANSPOSE, &input, 1, &rc, err);

	if (!n)
		return rc;
	rc = set_dims(r, n, n->perm, perm, np, sizeof(*perm), "perm",
		      "the permutation has more than 8 axes", err);
	if (rc == 0)
		n->n_perm = np;
	return end_node(r, rc);
}

static int cast(weightd_recipe *r, int input, const char *dtype, bool truncate, weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_CAST, &input, 1, &rc, err);

	if (!n)
		return rc;
	n->truncate = truncate;
	rc = set_dtype(r, n, dtype, err);
	return end_node(r, rc);
}

int weightd_recipe_cast(weightd_recipe *r, int input, const char *dtype, weightd_error *err)
{
	return cast(r, input, dtype, false, err);
}

int weightd_recipe_cast_truncate(weightd_recipe *r, int input, const char *dtype,
				 weightd_error *err)
{
	return cast(r, input, dtype, true, err);
}

int weightd_recipe_view(weightd_recipe *r, int input, const char *dtype, const uint64_t *shape,
			size_t ndim, weightd_error *err)
{
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_VIEW, &input, 1, &rc, err);

	if (!n)
		return rc;
	rc = set_dtype(r, n, dtype, err);
	if (rc == 0)
		rc = set_shape(r, n, shape, ndim, err);
	return end_node(r, rc);
}

int weightd_recipe_dequant_block(weightd_recipe *r, int input, int scale, const uint64_t *block,
				 size_t nblock, const char *dtype, weightd_error *err)
{
	int ins[2] = { input, scale };
	int rc;
	struct wc_node *n = begin_node(r, WEIGHTD__OP__OP_DEQUANT_BLOCK, ins, 2, &rc, err);

	if (!n)
		return rc;
	rc = set_dtype(r, n, dtype, err);
	if (rc == 0)
		rc = set_dims(r, n, n->block, block, nblock, sizeof(*block), "block",
			      "the block shape has more than 8 dimensions", err);
	if (rc == 0)
		n->n_block = nblock;
	return end_node(r, rc);
}

int wc_recipe_copy(const weightd_recipe *r, weightd_recipe **ret, weightd_error *err)
{
	weightd_recipe *c = NULL;
	int rc;

	rc = weightd_recipe_new(&c, err);
	if (rc < 0)
		return rc;
	c->nodes = calloc(r->n ? r->n : 1, sizeof(*c->nodes));
	if (!c->nodes) {
		free(c);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	c->cap = r->n ? r->n : 1;
	for (size_t i = 0; i < r->n; i++) {
		const struct wc_node *s = &r->nodes[i];
		struct wc_node *d = &c->nodes[i];

		*d = *s;
		d->checkpoint = d->tensor = d->path = NULL;
		d->inputs = NULL;
		d->sel.indices = NULL;
		c->n = i + 1;
		if ((s->checkpoint && !(d->checkpoint = strdup(s->checkpoint))) ||
		    (s->tensor && !(d->tensor = strdup(s->tensor))) ||
		    (s->path && !(d->path = strdup(s->path))))
			goto oom;
		if (s->n_inputs) {
			d->inputs = malloc(s->n_inputs * sizeof(*d->inputs));
			if (!d->inputs)
				goto oom;
			memcpy(d->inputs, s->inputs, s->n_inputs * sizeof(*d->inputs));
		}
		if (sel_copy(&d->sel, &s->sel, err) < 0)
			goto oom;
	}
	*ret = c;
	return 0;
oom:
	weightd_recipe_free(c);
	return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
}

void wc_recipe_about(const weightd_recipe *r, const char **ret_ckpt, const char **ret_tensor)
{
	*ret_ckpt = NULL;
	*ret_tensor = NULL;
	for (size_t i = 0; r && i < r->n; i++)
		if (r->nodes[i].op == WEIGHTD__OP__OP_SOURCE) {
			*ret_ckpt = r->nodes[i].checkpoint;
			*ret_tensor = r->nodes[i].tensor;
			return;
		}
}

/* --- the wire view ----------------------------------------------------------------------- */

int wc_recipe_pb_init(struct wc_pb_recipe *pb, const weightd_recipe *r, weightd_error *err)
{
	memset(pb, 0, sizeof(*pb));
	weightd__recipe__init(&pb->msg);
	if (!r || r->n == 0)
		return wc_err_set(err, WEIGHTD_E_EMPTY_INPUTS, "the recipe has no nodes");
	if (r->n == 1) {
		pb->nodes = &pb->one_node;
		pb->ptrs = &pb->one_ptr;
		pb->sels = &pb->one_sel;
	} else {
		pb->nodes = calloc(r->n, sizeof(*pb->nodes));
		pb->ptrs = calloc(r->n, sizeof(*pb->ptrs));
		pb->sels = calloc(r->n, sizeof(*pb->sels));
	}
	if (!pb->nodes || !pb->ptrs || !pb->sels) {
		wc_recipe_pb_fini(pb);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < r->n; i++) {
		const struct wc_node *n = &r->nodes[i];
		Weightd__Node *pn = &pb->nodes[i];

		weightd__node__init(pn);
		pn->op = (Weightd__Op)n->op;
		if (n->checkpoint)
			pn->checkpoint = n->checkpoint;
		if (n->tensor)
			pn->tensor = n->tensor;
		if (n->has_sel) {
			Weightd__Selection *ps = &pb->sels[i];

			weightd__selection__init(ps);
			ps->kind = (Weightd__Selection__Kind)n->sel.kind;
			ps->axis = n->sel.axis;
			ps->start = n->sel.start;
			ps->end = n->sel.end;
			ps->n_indices = n->sel.n_indices;
			ps->indices = n->sel.indices;
			ps->n_shape = n->sel.ndim;
			ps->shape = (uint64_t *)n->sel.shape;
			ps->rank = n->sel.rank;
			ps->world = n->sel.world;
			ps->even = n->sel.even;
			pn->selection = ps;
		}
		pn->n_inputs = n->n_inputs;
		pn->inputs = n->inputs;
		pn->axis = n->axis;
		pn->n_shape = n->ndim;
		pn->shape = (uint64_t *)n->shape;
		pn->n_perm = n->n_perm;
		pn->perm = (uint32_t *)n->perm;
		pn->n_block = n->n_block;
		pn->block = (uint64_t *)n->block;
		if (n->dtype[0])
			pn->dtype = (char *)n->dtype;
		pn->truncate = n->truncate;
		pb->ptrs[i] = pn;
	}
	pb->msg.n_nodes = r->n;
	pb->msg.nodes = pb->ptrs;
	return 0;
}

void wc_recipe_pb_fini(struct wc_pb_recipe *pb)
{
	if (pb->nodes != &pb->one_node) {
		free(pb->nodes);
		free(pb->ptrs);
		free(pb->sels);
	}
	pb->nodes = NULL;
	pb->ptrs = NULL;
	pb->sels = NULL;
}

/* --- annotations: JSON paths of nodes ---------------------------------------------------- */

int wc_recipe_annot_add(struct wc_annot **as, size_t *n, const char *slot, const weightd_recipe *r)
{
	struct wc_annot *grown, *a;
	bool any = false;

	for (size_t i = 0; r && i < r->n; i++)
		any |= r->nodes[i].path != NULL;
	if (!any)
		return 0;
	grown = realloc(*as, (*n + 1) * sizeof(**as));
	if (!grown)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	*as = grown;
	a = &grown[*n];
	memset(a, 0, sizeof(*a));
	a->slot = strdup(slot ? slot : "");
	a->paths = calloc(r->n, sizeof(*a->paths));
	if (!a->slot || !a->paths) {
		free(a->slot);
		free(a->paths);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	a->n = r->n;
	(*n)++;
	for (size_t i = 0; i < r->n; i++)
		if (r->nodes[i].path)
			a->paths[i] = strdup(r->nodes[i].path);
	return 0;
}

void wc_recipe_annot_free(struct wc_annot *as, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < as[i].n; j++)
			free(as[i].paths[j]);
		free(as[i].paths);
		free(as[i].slot);
	}
	free(as);
}

void wc_recipe_annot_apply(const struct wc_annot *as, size_t n, weightd_error *err)
{
	const struct wc_annot *a = NULL;

	if (!err || err->node == 0 || n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (err->slot[0] && strcmp(as[i].slot, err->slot) == 0)
			a = &as[i];
	if (!a && n == 1 && !err->slot[0])
		a = &as[0];
	if (!a || err->node > a->n || !a->paths[err->node - 1])
		return;
	wc_err_append(err, " (node %u is at %s in the recipe JSON)", err->node - 1,
		      a->paths[err->node - 1]);
}

