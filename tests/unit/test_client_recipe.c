/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_recipe.c - libweightd's selections, recipe builder and JSON forms: what reaches
 * weightd (captured by a fake weightd) and every class of error, with its JSON path. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_weightd.h"
#include "weightd/client.h"

/* ---- the fake: answers every unit with the error the test scripted ---------------------- */

struct script {
	int code;
	uint32_t node;
	char slot[64];
};

static void h_refuse(struct fake *f, const Weightd__Request *req)
{
	struct script *sc = f->ctx;
	char msg[160];

	/* as weightd does: the slot in its field, the sentence without it */
	snprintf(msg, sizeof(msg), "node %u: refused by the test", sc->node ? sc->node - 1 : 0);
	fake_reply_error(f, req->id, sc->code, sc->slot, sc->node, msg);
}

struct env {
	struct script sc;
	struct fake *f;
	weightd_client *c;
};

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	weightd_error err;

	e->sc.code = WEIGHTD_E_UNSUPPORTED;
	e->f = fake_start(h_refuse, &e->sc);
	if (weightd_connect(e->f->path, "recipe-test", &e->c, &err) < 0)
		return -1;
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	weightd_close(e->c);
	fake_stop(e->f);
	free(e);
	return 0;
}

/* Send a recipe and return the recipe weightd received (the reply is the scripted refusal). */
static const Weightd__Recipe *sent(struct env *e, const weightd_recipe *r, weightd_error *err)
{
	weightd_inflight *f;
	weightd_weight *w = NULL;
	size_t n = fake_count(e->f, WEIGHTD__REQUEST__BODY_MATERIALIZE);

	assert_int_equal(weightd_materialize_recipe(e->c, r, &f, err), 0);
	assert_true(weightd_finish(f, &w, err) < 0);
	assert_null(w);
	return fake_nth(e->f, WEIGHTD__REQUEST__BODY_MATERIALIZE, n)->materialize->entries[0]->recipe;
}

#define SRC(t) "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"" t "\"}"

/* Two recipes pack to the same bytes on the wire. */
static void assert_same_wire(const Weightd__Recipe *a, const Weightd__Recipe *b)
{
	size_t la = weightd__recipe__get_packed_size(a);
	size_t lb = weightd__recipe__get_packed_size(b);
	uint8_t *pa = malloc(la ? la : 1), *pb = malloc(lb ? lb : 1);

	assert_non_null(pa);
	assert_non_null(pb);
	assert_int_equal(la, lb);
	weightd__recipe__pack(a, pa);
	weightd__recipe__pack(b, pb);
	assert_memory_equal(pa, pb, la);
	free(pa);
	free(pb);
}

static weightd_recipe *parse_ok(const char *json)
{
	weightd_recipe *r = NULL;
	weightd_error err;

	if (weightd_recipe_from_json(json, strlen(json), &r, &err) != 0)
		fail_msg("parse: %s", err.message);
	return r;
}

/* ---- tests ------------------------------------------------------------------------------ */

/* The expected node list is written out by hand: inputs before users (post-order). */
static void test_json_flattens_in_post_order(void **state)
{
	struct env *e = *state;
	static const char json[] =
		"{\"op\":\"concat\",\"axis\":1,\"inputs\":["
		"{\"op\":\"cast\",\"dtype\":\"F16\",\"input\":{\"op\":\"source\",\"checkpoint\":\"m\","
		"\"tensor\":\"w\",\"select\":{\"range\":[0,0,512]}}},"
		"{\"op\":\"transpose\",\"perm\":[1,0],\"input\":{\"op\":\"select\","
		"\"select\":{\"shard\":[1,2,4]},\"input\":" SRC("e") "}},"
		"{\"op\":\"view\",\"dtype\":\"U8\",\"shape\":[2,8],\"input\":{\"op\":\"reshape\","
		"\"shape\":[4,4],\"input\":{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"b\","
		"\"select\":{\"indices\":[0,[3,1,2]]}}}},"
		"{\"op\":\"stack\",\"axis\":0,\"inputs\":[{\"op\":\"source\",\"checkpoint\":\"m\","
		"\"tensor\":\"x\",\"select\":{\"elements\":[2,10,[2,4]]}}]}]}";
	static const struct {
		int op;
		const char *tensor;
		int ninputs;
		uint32_t in[4];
	} want[] = {
		{ WEIGHTD__OP__OP_SOURCE, "w", 0, { 0 } },
		{ WEIGHTD__OP__OP_CAST, NULL, 1, { 0 } },
		{ WEIGHTD__OP__OP_SOURCE, "e", 0, { 0 } },
		{ WEIGHTD__OP__OP_SELECT, NULL, 1, { 2 } },
		{ WEIGHTD__OP__OP_TRANSPOSE, NULL, 1, { 3 } },
		{ WEIGHTD__OP__OP_SOURCE, "b", 0, { 0 } },
		{ WEIGHTD__OP__OP_RESHAPE, NULL, 1, { 5 } },
		{ WEIGHTD__OP__OP_VIEW, NULL, 1, { 6 } },
		{ WEIGHTD__OP__OP_SOURCE, "x", 0, { 0 } },
		{ WEIGHTD__OP__OP_STACK, NULL, 1, { 8 } },
		{ WEIGHTD__OP__OP_CONCAT, NULL, 4, { 1, 4, 7, 9 } },
	};
	weightd_recipe *r = parse_ok(json);
	const Weightd__Recipe *pr;
	Weightd__Node *const *n;
	weightd_error err;

	assert_int_equal(weightd_recipe_nodes(r), 11);
	pr = sent(e, r, &err);
	assert_int_equal(pr->n_nodes, 11);
	n = pr->nodes;
	for (size_t i = 0; i < 11; i++) {
		assert_int_equal(n[i]->op, want[i].op);
		if (want[i].tensor) {
			assert_string_equal(n[i]->checkpoint, "m");
			assert_string_equal(n[i]->tensor, want[i].tensor);
		}
		assert_int_equal(n[i]->n_inputs, want[i].ninputs);
		for (int k = 0; k < want[i].ninputs; k++)
			assert_int_equal(n[i]->inputs[k], want[i].in[k]);
	}
	/* every field of every node */
	assert_int_equal(n[0]->selection->kind, WEIGHTD__SELECTION__KIND__SEL_RANGE);
	assert_int_equal(n[0]->selection->axis, 0);
	assert_int_equal(n[0]->selection->start, 0);
	assert_int_equal(n[0]->selection->end, 512);
	assert_string_equal(n[1]->dtype, "F16");
	assert_null(n[2]->selection);
	assert_int_equal(n[3]->selection->kind, WEIGHTD__SELECTION__KIND__SEL_SHARD);
	assert_int_equal(n[3]->selection->axis, 1);
	assert_int_equal(n[3]->selection->rank, 2);
	assert_int_equal(n[3]->selection->world, 4);
	assert_int_equal(n[4]->n_perm, 2);
	assert_int_equal(n[4]->perm[0], 1);
	assert_int_equal(n[4]->perm[1], 0);
	assert_int_equal(n[5]->selection->kind, WEIGHTD__SELECTION__KIND__SEL_INDICES);
	assert_int_equal(n[5]->selection->n_indices, 3);
	assert_int_equal(n[5]->selection->indices[0], 3);
	assert_int_equal(n[5]->selection->indices[1], 1);
	assert_int_equal(n[5]->selection->indices[2], 2);
	assert_int_equal(n[6]->n_shape, 2);
	assert_int_equal(n[6]->shape[0], 4);
	assert_string_equal(n[7]->dtype, "U8");
	assert_int_equal(n[7]->n_shape, 2);
	assert_int_equal(n[7]->shape[1], 8);
	assert_int_equal(n[8]->selection->kind, WEIGHTD__SELECTION__KIND__SEL_ELEMENTS);
	assert_int_equal(n[8]->selection->start, 2);
	assert_int_equal(n[8]->selection->end, 10);
	assert_int_equal(n[8]->selection->n_shape, 2);
	assert_int_equal(n[8]->selection->shape[1], 4);
	assert_int_equal(n[9]->axis, 0);
	assert_int_equal(n[10]->axis, 1);
	weightd_recipe_free(r);
}

/* The builder gives the same wire form as JSON for the same recipe. */
static void test_builder_matches_json(void **state)
{
	struct env *e = *state;
	static const uint32_t perm[] = { 1, 0 };
	weightd_recipe *r, *j;
	weightd_selection *sel;
	const Weightd__Recipe *a, *b;
	weightd_error err;
	int s, t;

	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	assert_int_equal(weightd_selection_shard(0, 1, 2, &sel, &err), 0);
	s = weightd_recipe_source(r, "m", "w", sel, &err);
	weightd_selection_free(sel);
	t = weightd_recipe_transpose(r, s, perm, 2, &err);
	assert_int_equal(weightd_recipe_cast(r, t, "BF16", &err), 2);
	j = parse_ok("{\"op\":\"cast\",\"dtype\":\"BF16\",\"input\":{\"op\":\"transpose\","
		     "\"perm\":[1,0],\"input\":{\"op\":\"source\",\"checkpoint\":\"m\","
		     "\"tensor\":\"w\",\"select\":{\"shard\":[0,1,2]}}}}");
	a = sent(e, r, &err);
	b = sent(e, j, &err);
	assert_same_wire(a, b);
	assert_false(a->nodes[2]->truncate);
	weightd_recipe_free(r);
	weightd_recipe_free(j);

	/* an even shard: the flag on the wire, the same from JSON */
	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	assert_int_equal(weightd_selection_shard_even(0, 1, 2, &sel, &err), 0);
	assert_int_equal(weightd_recipe_source(r, "m", "w", sel, &err), 0);
	weightd_selection_free(sel);
	j = parse_ok("{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		     "\"select\":{\"shard\":[0,1,2],\"even\":true}}");
	a = sent(e, r, &err);
	assert_true(a->nodes[0]->selection->even);
	assert_int_equal(a->nodes[0]->selection->world, 2);
	b = sent(e, j, &err);
	assert_true(b->nodes[0]->selection->even);
	assert_int_equal(b->nodes[0]->selection->rank, 1);
	weightd_recipe_free(r);
	weightd_recipe_free(j);

	/* a truncating cast: the flag on the wire, the same from JSON */
	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	s = weightd_recipe_source(r, "m", "w", NULL, &err);
	assert_int_equal(weightd_recipe_cast_truncate(r, s, "U8", &err), 1);
	j = parse_ok("{\"op\":\"cast\",\"dtype\":\"U8\",\"truncate\":true,\"input\":"
		     "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\"}}");
	a = sent(e, r, &err);
	assert_true(a->nodes[1]->truncate);
	b = sent(e, j, &err);
	assert_true(b->nodes[1]->truncate);
	weightd_recipe_free(r);
	weightd_recipe_free(j);
}

/* dequant_block: JSON flattens input, scale, node; the builder gives the same bytes on the wire. */
static void test_dequant_block_json_and_builder(void **state)
{
	struct env *e = *state;
	static const uint64_t block[] = { 128, 64 };
	weightd_recipe *r, *j;
	weightd_selection *sel;
	const Weightd__Recipe *a, *b;
	weightd_error err;
	int d, sc, q;

	j = parse_ok("{\"op\":\"select\",\"select\":{\"shard\":[0,3,8]},\"input\":"
		     "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[128,64],"
		     "\"input\":" SRC("w") ",\"scale\":" SRC("w_s") "}}");
	b = sent(e, j, &err);
	assert_int_equal(b->n_nodes, 4);
	assert_string_equal(b->nodes[0]->tensor, "w");
	assert_string_equal(b->nodes[1]->tensor, "w_s");
	assert_int_equal(b->nodes[2]->op, WEIGHTD__OP__OP_DEQUANT_BLOCK);
	assert_int_equal(b->nodes[2]->n_inputs, 2);
	assert_int_equal(b->nodes[2]->inputs[0], 0);
	assert_int_equal(b->nodes[2]->inputs[1], 1);
	assert_string_equal(b->nodes[2]->dtype, "BF16");
	assert_int_equal(b->nodes[2]->n_block, 2);
	assert_int_equal(b->nodes[2]->block[0], 128);
	assert_int_equal(b->nodes[2]->block[1], 64);
	assert_int_equal(b->nodes[3]->inputs[0], 2);

	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	d = weightd_recipe_source(r, "m", "w", NULL, &err);
	sc = weightd_recipe_source(r, "m", "w_s", NULL, &err);
	q = weightd_recipe_dequant_block(r, d, sc, block, 2, "BF16", &err);
	assert_int_equal(q, 2);
	assert_int_equal(weightd_selection_shard(0, 3, 8, &sel, &err), 0);
	assert_int_equal(weightd_recipe_select(r, q, sel, &err), 3);
	weightd_selection_free(sel);
	a = sent(e, r, &err);
	b = sent(e, j, &err);
	assert_same_wire(a, b);

	/* what the builder can check alone */
	assert_int_equal(weightd_recipe_dequant_block(r, d, 7, block, 2, "BF16", &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "recipe node 4 (dequant_block): input 1 names node 7"));
	assert_int_equal(weightd_recipe_dequant_block(r, d, sc, block, 9, "BF16", &err),
			 -WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(weightd_recipe_dequant_block(r, d, sc, NULL, 2, "BF16", &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(weightd_recipe_dequant_block(r, d, sc, block, 2, "B16", &err),
			 -WEIGHTD_E_UNSUPPORTED_CAST);
	assert_int_equal(weightd_recipe_nodes(r), 4);
	weightd_recipe_free(r);
	weightd_recipe_free(j);
}

static void test_json_errors_name_the_path(void **state)
{
	static const struct {
		const char *json;
		int code;
		const char *part;
	} cases[] = {
		{ "{", WEIGHTD_E_INVALID_ARGUMENT, "line 1" },
		{ "[]", WEIGHTD_E_INVALID_ARGUMENT, "at $: expected a recipe object" },
		{ "{\"checkpoint\":\"m\"}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $: missing key \"op\"" },
		{ "{\"op\":7}", WEIGHTD_E_INVALID_ARGUMENT, "at $.op: expected an operation name" },
		{ "{\"op\":\"sauce\"}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $.op: unknown operation \"sauce\"" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\",\"extra\":1}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $: unknown key \"extra\"" },
		{ "{\"op\":\"source\",\"checkpoint\":\"\",\"tensor\":\"w\"}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.checkpoint: expected a non-empty name" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\"}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $: missing key \"tensor\"" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\",\"select\":"
		  "{\"shard\":[0,1,2],\"even\":\"yes\"}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.select.even: expected true or false" },
		{ "{\"op\":\"cast\",\"dtype\":\"U8\",\"truncate\":1,\"input\":{\"op\":\"source\","
		  "\"checkpoint\":\"m\",\"tensor\":\"w\"}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.truncate: expected true or false" },
		{ "{\"op\":\"cast\",\"dtype\":\"F16\"}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $: missing key \"input\"" },
		{ "{\"op\":\"cast\",\"dtype\":\"F17\",\"input\":" SRC("w") "}",
		  WEIGHTD_E_UNSUPPORTED_CAST, "at $.dtype: unknown dtype \"F17\"" },
		{ "{\"op\":\"cast\",\"dtype\":16,\"input\":" SRC("w") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.dtype: expected a dtype name" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"range\":[0,5]}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.select.range: expected [axis, start, end]" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"range\":[0,-1,5]}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.select.range[1]: -1 is out of range" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"range\":[0,5,5]}}",
		  WEIGHTD_E_OUT_OF_RANGE, "at $.select.range: the range [5, 5) is empty" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"shard\":[0,4,4]}}",
		  WEIGHTD_E_OUT_OF_RANGE, "at $.select.shard: rank 4 of world 4" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\",\"select\":\"half\"}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.select: unknown selection \"half\"" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"range\":[0,0,1],\"shard\":[0,0,1]}}",
		  WEIGHTD_E_INVALID_ARGUMENT,
		  "at $.select: expected \"full\" or an object with one key" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"slice\":[0,0,1]}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.select: unknown selection \"slice\"" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"indices\":[0,[]]}}",
		  WEIGHTD_E_EMPTY_INPUTS, "at $.select.indices[1]: expected a non-empty array" },
		{ "{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\","
		  "\"select\":{\"elements\":[0,4,[1,1,1,1,1,1,1,1,4]]}}",
		  WEIGHTD_E_RECIPE_TOO_LARGE,
		  "at $.select.elements[2]: 9 entries given (at most 8)" },
		{ "{\"op\":\"reshape\",\"shape\":[1,1,1,1,1,1,1,1,1],\"input\":" SRC("w") "}",
		  WEIGHTD_E_RECIPE_TOO_LARGE, "at $.shape: 9 entries given" },
		{ "{\"op\":\"reshape\",\"shape\":[2,1.5],\"input\":" SRC("w") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.shape[1]: expected a non-negative integer" },
		{ "{\"op\":\"transpose\",\"perm\":[5000000000],\"input\":" SRC("w") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.perm[0]: 5000000000 is out of range" },
		{ "{\"op\":\"concat\",\"axis\":0,\"inputs\":{}}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $.inputs: expected an array" },
		{ "{\"op\":\"concat\",\"axis\":\"x\",\"inputs\":[]}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $.axis: expected an axis number" },
		{ "{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC(
			  "a") ",{\"op\":\"cast\",\"input\":" SRC("b") "}]}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.inputs[1]: missing key \"dtype\"" },
		{ "{\"op\":\"select\",\"select\":\"full\",\"input\":{\"op\":\"view\",\"dtype\":\"U8\","
		  "\"input\":" SRC("w") "}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.input: missing key \"shape\"" },
		{ "{\"op\":\"source\",\"op\":\"cast\"}", WEIGHTD_E_INVALID_ARGUMENT, "duplicate" },
		{ "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[128,128],\"input\":" SRC(
			  "w") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $: missing key \"scale\"" },
		{ "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"input\":" SRC(
			  "w") ",\"scale\":" SRC("s") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $: missing key \"block\"" },
		{ "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[128,-1],\"input\":" SRC(
			  "w") ",\"scale\":" SRC("s") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.block[1]: -1 is out of range" },
		{ "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[128],\"input\":" SRC(
			  "w") ",\"scale\":{\"op\":\"cast\",\"input\":" SRC("s") "}}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.scale: missing key \"dtype\"" },
		{ "{\"op\":\"dequant_block\",\"block\":[128],\"input\":" SRC("w") ",\"scale\":" SRC(
			  "s") "}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $: missing key \"dtype\"" },
	};
	weightd_recipe *r;
	weightd_error err;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = (weightd_recipe *)0x1;
		int rc = weightd_recipe_from_json(cases[i].json, strlen(cases[i].json), &r, &err);

		if (rc != -cases[i].code || !strstr(err.message, cases[i].part))
			fail_msg("case %zu %s: got %d \"%s\", want %d with \"%s\"", i, cases[i].json,
				 rc, err.message, -cases[i].code, cases[i].part);
		assert_ptr_equal(r, (weightd_recipe *)0x1);
	}
}

static void test_json_nesting_is_bounded(void **state)
{
	size_t depth = 200, cap = depth * 48 + 128, len = 0;
	char *json = malloc(cap);
	weightd_recipe *r;
	weightd_error err;

	for (size_t i = 0; i < depth; i++)
		len += (size_t)snprintf(json + len, cap - len,
					"{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":");
	len += (size_t)snprintf(json + len, cap - len, SRC("w"));
	for (size_t i = 0; i < depth; i++)
		json[len++] = '}';
	json[len] = '\0';
	assert_int_equal(weightd_recipe_from_json(json, len, &r, &err), -WEIGHTD_E_RECIPE_TOO_DEEP);
	assert_non_null(strstr(err.message, "at most 64"));
	assert_non_null(strstr(err.message, "$.input.input"));
	free(json);

	/* 64 levels are fine */
	json = malloc(cap);
	len = 0;
	for (size_t i = 0; i < 64; i++)
		len += (size_t)snprintf(json + len, cap - len,
					"{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":");
	len += (size_t)snprintf(json + len, cap - len, SRC("w"));
	for (size_t i = 0; i < 64; i++)
		json[len++] = '}';
	assert_int_equal(weightd_recipe_from_json(json, len, &r, &err), 0);
	assert_int_equal(weightd_recipe_nodes(r), 65);
	weightd_recipe_free(r);
	free(json);
}

/* An error weightd reports about a node names where that node is in the JSON. */
static void test_daemon_node_error_gets_json_path(void **state)
{
	struct env *e = *state;
	static const char json[] =
		"{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC("w") ",{\"op\":\"transpose\","
		"\"perm\":[0,0],\"input\":" SRC("e") "}]}";
	weightd_recipe *r = parse_ok(json);
	weightd_error err;

	/* nodes: 0 source w, 1 source e, 2 transpose, 3 concat; the entry is named after "w" */
	e->sc.code = WEIGHTD_E_NOT_A_PERMUTATION;
	e->sc.node = 3;
	snprintf(e->sc.slot, sizeof(e->sc.slot), "w");
	sent(e, r, &err);
	assert_int_equal(err.code, WEIGHTD_E_NOT_A_PERMUTATION);
	assert_int_equal(err.node, 3);
	assert_non_null(strstr(err.message, "node 2: refused by the test"));
	assert_non_null(strstr(err.message, "node 2 is at $.inputs[1] in the recipe JSON"));
	assert_null(strstr(err.message, "slot"));   /* a single materialization has no slot */
	weightd_recipe_free(r);
}

static void test_unit_json(void **state)
{
	struct env *e = *state;
	static const char json[] =
		"{\"slots\":["
		"{\"name\":\"q\",\"dtype\":\"F16\",\"shape\":[2,2],\"recipe\":" SRC("q") "},"
		"{\"name\":\"k\",\"recipe\":{\"op\":\"cast\",\"dtype\":\"F16\",\"input\":"
		SRC("k") "}},"
		"{\"name\":\"q2\",\"alias\":\"q\"}]}";
	const Weightd__Unit *pu;
	weightd_inflight *f;
	weightd_preflight *p = NULL;
	weightd_unit *u;
	weightd_error err;

	assert_int_equal(weightd_unit_from_json(e->c, json, strlen(json), &u, &err), 0);
	assert_int_equal(weightd_unit_slot_count(u), 3);
	assert_string_equal(weightd_unit_slot_name(u, 0), "q");
	assert_string_equal(weightd_unit_slot_name(u, 2), "q2");
	e->sc.code = WEIGHTD_E_DTYPE_MISMATCH;
	e->sc.node = 2;
	snprintf(e->sc.slot, sizeof(e->sc.slot), "k");
	assert_int_equal(weightd_unit_preflight(u, &f, &err), 0);
	assert_int_equal(weightd_preflight_finish(f, &p, &err), -WEIGHTD_E_DTYPE_MISMATCH);
	assert_null(p);
	assert_string_equal(err.slot, "k");
	/* the unit's caller named the slot: libweightd names it in the message, once */
	assert_non_null(strstr(err.message, "slot \"k\": node 1: refused by the test"));
	assert_null(strstr(strstr(err.message, "slot \"k\"") + 1, "slot \"k\""));
	assert_non_null(strstr(err.message, "node 1 is at $.slots[1].recipe in the recipe JSON"));
	pu = fake_nth(e->f, WEIGHTD__REQUEST__BODY_PREFLIGHT, 0)->preflight;
	assert_int_equal(pu->n_entries, 2);
	assert_true(pu->entries[0]->check_slot);
	assert_string_equal(pu->entries[0]->dtype, "F16");
	assert_int_equal(pu->entries[0]->n_shape, 2);
	assert_false(pu->entries[1]->check_slot);
	assert_int_equal(pu->entries[1]->recipe->n_nodes, 2);
	assert_int_equal(pu->n_aliases, 1);
	assert_string_equal(pu->aliases[0]->name, "q2");
	assert_string_equal(pu->aliases[0]->target, "q");
	weightd_unit_free(u);

	/* a bare recipe is a unit of one slot named "output" */
	assert_int_equal(weightd_unit_from_json(e->c, SRC("w"), strlen(SRC("w")), &u, &err), 0);
	assert_int_equal(weightd_unit_slot_count(u), 1);
	assert_string_equal(weightd_unit_slot_name(u, 0), "output");
	weightd_unit_free(u);
}

static void test_unit_json_errors(void **state)
{
	struct env *e = *state;
	static const struct {
		const char *json;
		int code;
		const char *part;
	} cases[] = {
		{ "[1]", WEIGHTD_E_INVALID_ARGUMENT, "at $: expected a recipe object" },
		{ "{\"slots\":[]}", WEIGHTD_E_INVALID_ARGUMENT, "at $.slots: expected a non-empty" },
		{ "{\"slots\":[{\"name\":\"a\",\"alias\":\"b\"}],\"x\":1}", WEIGHTD_E_INVALID_ARGUMENT,
		  "unknown key \"x\"" },
		{ "{\"slots\":[5]}", WEIGHTD_E_INVALID_ARGUMENT, "at $.slots[0]: expected a slot" },
		{ "{\"slots\":[{\"recipe\":" SRC("w") "}]}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $.slots[0]: expected a non-empty string \"name\"" },
		{ "{\"slots\":[{\"name\":\"a\",\"shape\":[2],\"recipe\":" SRC("w") "}]}",
		  WEIGHTD_E_INVALID_ARGUMENT, "\"shape\" is declared only together with \"dtype\"" },
		{ "{\"slots\":[{\"name\":\"a\",\"alias\":\"b\",\"recipe\":" SRC("w") "}]}",
		  WEIGHTD_E_INVALID_ARGUMENT, "exactly one of \"recipe\" and \"alias\"" },
		{ "{\"slots\":[{\"name\":\"a\"}]}", WEIGHTD_E_INVALID_ARGUMENT,
		  "exactly one of \"recipe\" and \"alias\"" },
		{ "{\"slots\":[{\"name\":\"a\",\"alias\":\"b\",\"size\":1}]}",
		  WEIGHTD_E_INVALID_ARGUMENT, "at $.slots[0]: unknown key \"size\"" },
		{ "{\"slots\":[{\"name\":\"a\",\"dtype\":\"F16\",\"shape\":[-2],\"recipe\":"
		  SRC("w") "}]}", WEIGHTD_E_INVALID_ARGUMENT, "non-negative integers" },
		{ "{\"slots\":[{\"name\":\"a\",\"dtype\":\"Q9\",\"recipe\":" SRC("w") "}]}",
		  WEIGHTD_E_INVALID_ARGUMENT, "unknown dtype \"Q9\"" },
		{ "{\"slots\":[{\"name\":\"a\",\"alias\":\"b\"},{\"name\":\"a\",\"alias\":\"c\"}]}",
		  WEIGHTD_E_DUPLICATE_NAME, "slot \"a\" is declared twice" },
		{ "{\"slots\":[{\"name\":\"a\",\"alias\":\"b\"},{\"name\":\"b\",\"recipe\":"
		  "{\"op\":\"cast\",\"input\":" SRC("w") "}}]}", WEIGHTD_E_INVALID_ARGUMENT,
		  "at $.slots[1].recipe: missing key \"dtype\"" },
	};
	weightd_unit *u;
	weightd_error err;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		u = (weightd_unit *)0x1;
		int rc = weightd_unit_from_json(e->c, cases[i].json, strlen(cases[i].json), &u, &err);

		if (rc != -cases[i].code || !strstr(err.message, cases[i].part))
			fail_msg("case %zu %s: got %d \"%s\", want %d with \"%s\"", i, cases[i].json,
				 rc, err.message, -cases[i].code, cases[i].part);
		assert_ptr_equal(u, (weightd_unit *)0x1);
	}
}

static void test_builder_and_selection_errors(void **state)
{
	struct env *e = *state;
	static const uint64_t s9[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	static const uint64_t idx[1] = { 0 };
	weightd_selection *sel = (weightd_selection *)0x1;
	weightd_inflight *f;
	weightd_recipe *r;
	weightd_error err;
	int in[2] = { 0, 5 };

	assert_int_equal(weightd_selection_range(1, 4, 4, &sel, &err), -WEIGHTD_E_OUT_OF_RANGE);
	assert_int_equal(weightd_selection_shard(0, 2, 2, &sel, &err), -WEIGHTD_E_OUT_OF_RANGE);
	assert_int_equal(weightd_selection_shard(0, 0, 0, &sel, &err), -WEIGHTD_E_OUT_OF_RANGE);
	assert_int_equal(weightd_selection_indices(0, idx, 0, &sel, &err), -WEIGHTD_E_EMPTY_INPUTS);
	assert_int_equal(weightd_selection_elements(0, 4, s9, 9, &sel, &err),
			 -WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_ptr_equal(sel, (weightd_selection *)0x1);

	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	assert_int_equal(weightd_materialize_recipe(e->c, r, &f, &err), -WEIGHTD_E_EMPTY_INPUTS);
	assert_int_equal(weightd_recipe_source(r, "m", "", NULL, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(weightd_recipe_source(r, "m", "w", NULL, &err), 0);
	assert_int_equal(weightd_recipe_concat(r, 0, in, 2, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(err.node, 2);   /* the node being added: index 1 */
	assert_non_null(strstr(err.message, "input 1 names node 5"));
	assert_int_equal(weightd_recipe_cast(r, -1, "F16", &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(weightd_recipe_cast(r, 0, "F99", &err), -WEIGHTD_E_UNSUPPORTED_CAST);
	assert_non_null(strstr(err.message, "F99"));
	assert_int_equal(weightd_recipe_reshape(r, 0, s9, 9, &err), -WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_int_equal(weightd_recipe_view(r, 0, "U8", s9, 9, &err), -WEIGHTD_E_RECIPE_TOO_LARGE);
	/* failures add nothing: the recipe still has its one node and the next index is 1 */
	assert_int_equal(weightd_recipe_nodes(r), 1);
	assert_int_equal(weightd_recipe_cast(r, 0, "F16", &err), 1);
	weightd_recipe_free(r);
	assert_int_equal(fake_count(e->f, WEIGHTD__REQUEST__BODY_MATERIALIZE), 0);
}

TEST_MAIN(NULL, NULL,
	  cmocka_unit_test_setup_teardown(test_json_flattens_in_post_order, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_builder_matches_json, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_dequant_block_json_and_builder, setup, teardown),
	  cmocka_unit_test(test_json_errors_name_the_path),
	  cmocka_unit_test(test_json_nesting_is_bounded),
	  cmocka_unit_test_setup_teardown(test_daemon_node_error_gets_json_path, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_unit_json, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_unit_json_errors, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_builder_and_selection_errors, setup, teardown))
