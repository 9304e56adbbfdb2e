/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_wire.c - wire recipes become core recipes field by field, and every wire value the
 * core types cannot hold (no nodes, too many nodes or dimensions, unknown operations, selection
 * kinds or dtypes) is refused with the code and the node it names; core errors become wire
 * errors field by field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests.h"

#include "wire.h"

/* A recipe of `n` nodes the test fills in; nodes[i] points at node[i]. */
struct wrecipe {
	Weightd__Recipe r;
	Weightd__Node node[4];
	Weightd__Node *nodes[4];
	Weightd__Selection sel[4];
};

static void wrecipe_init(struct wrecipe *w, size_t n)
{
	weightd__recipe__init(&w->r);
	for (size_t i = 0; i < 4; i++) {
		weightd__node__init(&w->node[i]);
		weightd__selection__init(&w->sel[i]);
		w->nodes[i] = &w->node[i];
	}
	w->r.n_nodes = n;
	w->r.nodes = w->nodes;
}

/* Convert, expecting failure with `code`; returns the error for further checks. */
static weightd_error refused(const struct wrecipe *w, uint32_t max_nodes, int code)
{
	struct wd_rnode *nodes = NULL;
	weightd_error err;
	size_t n = 0;

	wd_error_clear(&err);
	assert_int_equal(wire_recipe(&w->r, max_nodes, &nodes, &n, &err), -code);
	assert_int_equal(err.code, code);
	assert_null(nodes);
	/* the same refusal without an error to fill */
	assert_int_equal(wire_recipe(&w->r, max_nodes, &nodes, &n, NULL), -code);
	assert_null(nodes);
	return err;
}

static void every_field_is_carried(void **state)
{
	uint64_t sel_shape[2] = { 3, 4 }, idx[3] = { 5, 1, 2 }, shape[3] = { 2, 3, 4 };
	uint64_t block[2] = { 128, 64 };
	uint32_t perm[2] = { 1, 0 }, in0[1] = { 0 }, in01[2] = { 0, 1 };
	struct wd_rnode *nodes = NULL;
	weightd_error err;
	struct wrecipe w;
	size_t n = 0;

	wrecipe_init(&w, 4);
	w.node[0].op = WEIGHTD__OP__OP_SOURCE;
	w.node[0].checkpoint = "model";
	w.node[0].tensor = "a.weight";
	w.node[0].selection = &w.sel[0];
	w.sel[0].kind = WEIGHTD__SELECTION__KIND__SEL_SHARD;
	w.sel[0].axis = 1;
	w.sel[0].rank = 3;
	w.sel[0].world = 8;
	w.node[1].op = WEIGHTD__OP__OP_SELECT;
	w.node[1].n_inputs = 1;
	w.node[1].inputs = in0;
	w.node[1].selection = &w.sel[1];
	w.sel[1].kind = WEIGHTD__SELECTION__KIND__SEL_ELEMENTS;
	w.sel[1].start = 7;
	w.sel[1].end = 19;
	w.sel[1].n_shape = 2;
	w.sel[1].shape = sel_shape;
	w.node[2].op = WEIGHTD__OP__OP_TRANSPOSE;
	w.node[2].n_inputs = 1;
	w.node[2].inputs = in0;
	w.node[2].n_perm = 2;
	w.node[2].perm = perm;
	w.node[2].n_shape = 3;
	w.node[2].shape = shape;
	w.node[2].selection = &w.sel[2];
	w.sel[2].kind = WEIGHTD__SELECTION__KIND__SEL_INDICES;
	w.sel[2].n_indices = 3;
	w.sel[2].indices = idx;
	w.node[3].op = WEIGHTD__OP__OP_DEQUANT_BLOCK;
	w.node[3].n_inputs = 2;
	w.node[3].inputs = in01;
	w.node[3].axis = -2;
	w.node[3].dtype = "BF16";
	w.node[3].n_block = 2;
	w.node[3].block = block;

	wd_error_clear(&err);
	assert_int_equal(wire_recipe(&w.r, 16, &nodes, &n, &err), 0);
	assert_int_equal(n, 4);
	assert_int_equal(nodes[0].op, WD_OP_SOURCE);
	assert_string_equal(nodes[0].checkpoint, "model");
	assert_string_equal(nodes[0].tensor, "a.weight");
	assert_int_equal(nodes[0].sel.kind, WD_SEL_SHARD);
	assert_int_equal(nodes[0].sel.axis, 1);
	assert_int_equal(nodes[0].sel.rank, 3);
	assert_int_equal(nodes[0].sel.world, 8);
	assert_int_equal(nodes[0].dtype, WD_DTYPE_INVALID);   /* no dtype given */
	assert_int_equal(nodes[1].op, WD_OP_SELECT);
	assert_int_equal(nodes[1].n_inputs, 1);
	assert_ptr_equal(nodes[1].inputs, in0);                 /* borrowed, not copied */
	assert_int_equal(nodes[1].sel.kind, WD_SEL_ELEMENTS);
	assert_int_equal(nodes[1].sel.start, 7);
	assert_int_equal(nodes[1].sel.end, 19);
	assert_int_equal(nodes[1].sel.ndim, 2);
	assert_int_equal(nodes[1].sel.shape[0], 3);
	assert_int_equal(nodes[1].sel.shape[1], 4);
	assert_int_equal(nodes[2].op, WD_OP_TRANSPOSE);
	assert_int_equal(nodes[2].n_perm, 2);
	assert_int_equal(nodes[2].perm[0], 1);
	assert_int_equal(nodes[2].perm[1], 0);
	assert_int_equal(nodes[2].ndim, 3);
	assert_int_equal(nodes[2].shape[2], 4);
	assert_int_equal(nodes[2].sel.kind, WD_SEL_INDICES);
	assert_int_equal(nodes[2].sel.n_indices, 3);
	assert_ptr_equal(nodes[2].sel.indices, idx);
	assert_int_equal(nodes[3].op, WD_OP_DEQUANT_BLOCK);
	assert_int_equal(nodes[3].axis, -2);
	assert_int_equal(nodes[3].dtype, WD_BF16);
	assert_int_equal(nodes[3].n_block, 2);
	assert_int_equal(nodes[3].block[0], 128);
	assert_int_equal(nodes[3].block[1], 64);
	assert_int_equal(nodes[3].sel.kind, WD_SEL_FULL);      /* no selection: the whole tensor */
	free(nodes);

	/* the remaining kind */
	wrecipe_init(&w, 1);
	w.node[0].checkpoint = "model";
	w.node[0].tensor = "b";
	w.node[0].selection = &w.sel[0];
	w.sel[0].kind = WEIGHTD__SELECTION__KIND__SEL_RANGE;
	w.sel[0].axis = 2;
	w.sel[0].start = 1;
	w.sel[0].end = 5;
	assert_int_equal(wire_recipe(&w.r, 1, &nodes, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(nodes[0].sel.kind, WD_SEL_RANGE);
	assert_int_equal(nodes[0].sel.axis, 2);
	assert_int_equal(nodes[0].sel.start, 1);
	assert_int_equal(nodes[0].sel.end, 5);
	free(nodes);
}

static void no_nodes_is_refused(void **state)
{
	struct wd_rnode *nodes = NULL;
	weightd_error err;
	struct wrecipe w;
	size_t n = 0;

	wrecipe_init(&w, 0);
	err = refused(&w, 16, WEIGHTD_E_EMPTY_INPUTS);
	assert_non_null(strstr(err.message, "no nodes"));
	wd_error_clear(&err);
	assert_int_equal(wire_recipe(NULL, 16, &nodes, &n, &err), -WEIGHTD_E_EMPTY_INPUTS);
}

static void too_many_nodes_names_the_first_past_the_limit(void **state)
{
	weightd_error err;
	struct wrecipe w;

	wrecipe_init(&w, 4);
	w.node[2].op = WEIGHTD__OP__OP_CAST;
	err = refused(&w, 2, WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(err.node, 3);          /* 1-based: the third node is the first too many */
	assert_int_equal(err.expected, 2);
	assert_int_equal(err.actual, 4);
	assert_non_null(strstr(err.message, "node 2 (cast)"));
	assert_non_null(strstr(err.message, "4 nodes"));
}

static void unknown_operation_is_refused(void **state)
{
	weightd_error err;
	struct wrecipe w;

	wrecipe_init(&w, 2);
	w.node[1].op = (Weightd__Op)(WD_OP_LAST + 1);
	err = refused(&w, 16, WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(err.node, 2);
	assert_non_null(strstr(err.message, "node 1 (unknown): unknown operation"));
}

static void unknown_selection_kind_is_refused(void **state)
{
	weightd_error err;
	struct wrecipe w;

	wrecipe_init(&w, 2);
	w.node[1].op = WEIGHTD__OP__OP_SELECT;
	w.node[1].selection = &w.sel[1];
	w.sel[1].kind = (Weightd__Selection__Kind)42;
	err = refused(&w, 16, WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(err.node, 2);
	assert_non_null(strstr(err.message, "node 1 (select): unknown selection kind 42"));
}

static void too_many_dimensions_are_refused(void **state)
{
	uint64_t big[WD_MAX_DIMS + 1] = { 0 };
	uint32_t perm[WD_MAX_DIMS + 1] = { 0 };
	weightd_error err;
	struct wrecipe w;

	/* a selection's shape */
	wrecipe_init(&w, 1);
	w.node[0].selection = &w.sel[0];
	w.sel[0].kind = WEIGHTD__SELECTION__KIND__SEL_ELEMENTS;
	w.sel[0].n_shape = WD_MAX_DIMS + 1;
	w.sel[0].shape = big;
	err = refused(&w, 16, WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(err.node, 1);
	assert_non_null(strstr(err.message, "node 0 (source): selection shape has"));

	/* a node's shape, permutation or block: the largest count is named */
	wrecipe_init(&w, 2);
	w.node[1].op = WEIGHTD__OP__OP_RESHAPE;
	w.node[1].n_shape = WD_MAX_DIMS + 1;
	w.node[1].shape = big;
	err = refused(&w, 16, WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(err.node, 2);
	assert_non_null(strstr(err.message, "node 1 (reshape):"));

	wrecipe_init(&w, 2);
	w.node[1].op = WEIGHTD__OP__OP_TRANSPOSE;
	w.node[1].n_perm = WD_MAX_DIMS + 1;
	w.node[1].perm = perm;
	err = refused(&w, 16, WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(err.node, 2);
	assert_non_null(strstr(err.message, "node 1 (transpose):"));

	wrecipe_init(&w, 2);
	w.node[1].op = WEIGHTD__OP__OP_DEQUANT_BLOCK;
	w.node[1].n_block = WD_MAX_DIMS + 1;
	w.node[1].block = big;
	w.node[1].n_shape = 1;
	w.node[1].shape = big;
	err = refused(&w, 16, WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(err.node, 2);
	assert_non_null(strstr(err.message, "node 1 (dequant_block):"));
}

static void unknown_dtype_is_refused(void **state)
{
	weightd_error err;
	struct wrecipe w;

	wrecipe_init(&w, 2);
	w.node[1].op = WEIGHTD__OP__OP_CAST;
	w.node[1].dtype = "F17";
	err = refused(&w, 16, WEIGHTD_E_UNSUPPORTED_CAST);
	assert_int_equal(err.node, 2);
	assert_non_null(strstr(err.message, "node 1 (cast): unknown dtype \"F17\""));
}

static void core_errors_become_wire_errors(void **state)
{
	weightd_error e;
	Weightd__Error pe;

	wd_error_clear(&e);
	wd_error_set(&e, WEIGHTD_E_SCALE_MISMATCH, "scale does not fit");
	e.node = 3;
	e.axis = -1;
	e.expected = 7;
	e.actual = -9;
	strcpy(e.checkpoint, "model");
	strcpy(e.tensor, "a.weight");
	strcpy(e.slot, "layers.0.w");
	wire_error(&e, &pe);
	assert_int_equal(pe.code, WEIGHTD_E_SCALE_MISMATCH);
	assert_string_equal(pe.message, "scale does not fit");
	assert_string_equal(pe.checkpoint, "model");
	assert_string_equal(pe.tensor, "a.weight");
	assert_string_equal(pe.slot, "layers.0.w");
	assert_int_equal(pe.node, 3);
	assert_int_equal(pe.axis, -1);
	assert_int_equal(pe.expected, 7);
	assert_int_equal(pe.actual, -9);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(every_field_is_carried),
	  cmocka_unit_test(no_nodes_is_refused),
	  cmocka_unit_test(too_many_nodes_names_the_first_past_the_limit),
	  cmocka_unit_test(unknown_operation_is_refused),
	  cmocka_unit_test(unknown_selection_kind_is_refused),
	  cmocka_unit_test(too_many_dimensions_are_refused),
	  cmocka_unit_test(unknown_dtype_is_refused),
	  cmocka_unit_test(core_errors_become_wire_errors))
