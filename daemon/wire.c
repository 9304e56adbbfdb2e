/* SPDX-License-Identifier: Apache-2.0 */
/* wire.c - protobuf <-> core conversions for recipes and errors. */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

static const char *op_text(Weightd__Op op);

static int sel_from_wire(const Weightd__Selection *ps, uint32_t node, const char *op,
			 struct wd_selection *s, weightd_error *err)
{
	memset(s, 0, sizeof(*s));
	if (!ps) {
		s->kind = WD_SEL_FULL;
		return 0;
	}
	switch (ps->kind) {
	case WEIGHTD__SELECTION__KIND__SEL_FULL: s->kind = WD_SEL_FULL; break;
	case WEIGHTD__SELECTION__KIND__SEL_RANGE: s->kind = WD_SEL_RANGE; break;
	case WEIGHTD__SELECTION__KIND__SEL_INDICES: s->kind = WD_SEL_INDICES; break;
	case WEIGHTD__SELECTION__KIND__SEL_ELEMENTS: s->kind = WD_SEL_ELEMENTS; break;
	case WEIGHTD__SELECTION__KIND__SEL_SHARD: s->kind = WD_SEL_SHARD; break;
	default:
		if (err)
			err->node = node + 1;
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "node %u (%s): unknown selection kind %d",
				    node, op, (int)ps->kind);
	}
	if (ps->n_shape > WD_MAX_DIMS) {
		if (err)
			err->node = node + 1;
		return wd_error_set(err, WEIGHTD_E_RECIPE_TOO_LARGE,
				    "node %u (%s): selection shape has %zu dimensions (at most %d)",
				    node, op, ps->n_shape, WD_MAX_DIMS);
	}
	s->axis = ps->axis;
	s->start = ps->start;
	s->end = ps->end;
	s->indices = ps->indices;
	s->n_indices = ps->n_indices;
	s->ndim = (int)ps->n_shape;
	if (ps->n_shape)
		memcpy(s->shape, ps->shape, ps->n_shape * sizeof(uint64_t));
	s->rank = ps->rank;
	s->world = ps->world;
	s->even = ps->even;
	return 0;
}

/* The name of a wire operation, for messages ("unknown" when out of range). */
static const char *op_text(Weightd__Op op)
{
	static const char *const names[] = { "source", "select", "concat", "stack", "reshape",
					     "transpose", "cast", "view", "dequant_block" };

	return (unsigned)op < sizeof(names) / sizeof(names[0]) ? names[op] : "unknown";
}

int wire_recipe(const Weightd__Recipe *pr, uint32_t max_nodes, struct wd_rnode **ret_nodes,
		size_t *ret_n, weightd_error *err)
{
	struct wd_rnode *nodes;
	int r;

	if (!pr || pr->n_nodes == 0)
		return wd_error_set(err, WEIGHTD_E_EMPTY_INPUTS, "the recipe has no nodes");
	if (pr->n_nodes > max_nodes) {
		/* name the first node past the limit, as every recipe error names a node */
		if (err) {
			err->node = max_nodes + 1;
			err->expected = max_nodes;
			err->actual = pr->n_nodes > INT64_MAX ? INT64_MAX : (int64_t)pr->n_nodes;
		}
		return wd_error_set(err, WEIGHTD_E_RECIPE_TOO_LARGE,
				    "node %u (%s): the recipe has %zu nodes, more than the %u allowed",
				    max_nodes, op_text(pr->nodes[max_nodes]->op), pr->n_nodes, max_nodes);
	}
	nodes = calloc(pr->n_nodes, sizeof(*nodes));
	if (!nodes)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	for (size_t i = 0; i < pr->n_nodes; i++) {
		const Weightd__Node *pn = pr->nodes[i];
		struct wd_rnode *n = &nodes[i];

		if ((unsigned)pn->op > WD_OP_LAST) {
			r = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "node %zu (unknown): unknown operation %d",
					 i, (int)pn->op);
			goto fail_node;
		}
		n->op = (enum wd_op)pn->op;
		n->checkpoint = pn->checkpoint;
		n->tensor = pn->tensor;
		r = sel_from_wire(pn->selection, (uint32_t)i, op_text(pn->op), &n->sel, err);
		if (r < 0)
			goto fail;
		n->inputs = pn->inputs;
		n->n_inputs = pn->n_inputs;
		n->axis = pn->axis;
		if (pn->n_shape > WD_MAX_DIMS || pn->n_perm > WD_MAX_DIMS ||
		    pn->n_block > WD_MAX_DIMS) {
			size_t most = pn->n_shape > pn->n_perm ? pn->n_shape : pn->n_perm;

			if (pn->n_block > most)
				most = pn->n_block;
			r = wd_error_set(err, WEIGHTD_E_RECIPE_TOO_LARGE,
					 "node %zu (%s): %zu dimensions given (at most %d)", i,
					 op_text(pn->op), most, WD_MAX_DIMS);
			goto fail_node;
		}
		n->n_block = (int)pn->n_block;
		if (pn->n_block)
			memcpy(n->block, pn->block, pn->n_block * sizeof(uint64_t));
		n->ndim = (int)pn->n_shape;
		if (pn->n_shape)
			memcpy(n->shape, pn->shape, pn->n_shape * sizeof(uint64_t));
		n->n_perm = (int)pn->n_perm;
		if (pn->n_perm)
			memcpy(n->perm, pn->perm, pn->n_perm * sizeof(uint32_t));
		n->truncate = pn->truncate;
		n->dtype = WD_DTYPE_INVALID;
		if (pn->dtype && pn->dtype[0]) {
			n->dtype = wd_dtype_from_name(pn->dtype);
			if (n->dtype == WD_DTYPE_INVALID) {
				r = wd_error_set(err, WEIGHTD_E_UNSUPPORTED_CAST,
						 "node %zu (%s): unknown dtype \"%s\"", i,
						 op_text(pn->op), pn->dtype);
				goto fail_node;
			}
		}
		continue;
fail_node:
		if (err)
			err->node = (uint32_t)i + 1;
		goto fail;
	}
	*ret_nodes = nodes;
	*ret_n = pr->n_nodes;
	return 0;
fail:
	free(nodes);
	return r;
}

void wire_error(const weightd_error *e, Weightd__Error *pe)
{
	weightd__error__init(pe);
	pe->code = (Weightd__ErrorCode)e->code;
	pe->message = (char *)e->message;
	pe->checkpoint = (char *)e->checkpoint;
	pe->tensor = (char *)e->tensor;
	pe->slot = (char *)e->slot;
	pe->node = e->node;
	pe->axis = e->axis;
	pe->expected = e->expected;
	pe->actual = e->actual;
}
