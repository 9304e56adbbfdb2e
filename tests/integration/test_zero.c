/* SPDX-License-Identifier: Apache-2.0 */
/* test_zero.c - zero-element tensors end to end: fetched, shared and bound as 0-byte weights,
 * derived by recipes, preloaded by weightctl, and shown by weightctl with their shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "gguf_writer.h"
#include "harness.h"
#include "st_writer.h"
#include "weightd/client.h"

static int setup(void **state)
{
	static const float one[4] = { 1, 2, 3, 4 }, scalar = 7;
	const struct stw_tensor ts[] = {
		{ .name = "empty", .dtype = "F32", .ndim = 1, .shape = { 0 } },
		{ .name = "empty.2d", .dtype = "BF16", .ndim = 2, .shape = { 3, 0 } },
		{ .name = "four", .dtype = "F32", .ndim = 1, .shape = { 4 }, .data = one },
		{ .name = "scalar", .dtype = "F32", .ndim = 0, .data = &scalar },
	};
	/* GGUF: F32 dims [0, 4] (shape [4, 0]) and Q8_0 dims [32, 0] (no rows of one block) */
	const struct gw_tensor gs[] = {
		{ "g.empty", 2, { 0, 4 }, 0 /* F32 */, 0 },
		{ "g.q8.empty", 2, { 32, 0 }, 8 /* Q8_0 */, 0 },
		{ "g.one", 1, { 2 }, 0, 8 },
	};
	char path[512], gpath[512], sect[2048];
	struct gw g;

	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "zero.safetensors", path, sizeof(path));
	if (stw_write(path, ts, sizeof(ts) / sizeof(ts[0]), NULL, 0, NULL) < 0)
		return -1;
	harness_path(&H, "zero.gguf", gpath, sizeof(gpath));
	gw_init(&g);
	gw_file(&g, 0, sizeof(gs) / sizeof(gs[0]), gs, NULL);
	if (gw_save(&g, gpath) < 0)
		return -1;
	gw_free(&g);
	snprintf(sect, sizeof(sect), "[checkpoint:zero]\npath = %s\n[checkpoint:gzero]\npath = %s\n",
		 path, gpath);
	return fixture_start(NULL, sect);
}

/* Each zero-element tensor is a weight of 0 bytes with its shape, mapped as NULL; share works. */
static void zero_element_tensors_are_fetched_as_0_byte_weights(void **state)
{
	static const char *const names[] = { "empty", "empty.2d" };
	static const size_t ndims[] = { 1, 2 };
	weightd_client *c = it_connect(&H);

	(void)state;
	for (int i = 0; i < 2; i++) {
		weightd_weight *w = it_get_ok(c, "zero", names[i]), *w2 = NULL;
		const void *p = (const void *)1;
		weightd_error err;
		struct stat st;

		assert_int_equal(weightd_weight_nbytes(w), 0);
		assert_int_equal(weightd_weight_ndim(w), ndims[i]);
		assert_int_equal(weightd_weight_shape(w)[ndims[i] - 1], 0);
		assert_int_equal(weightd_weight_map(w, &p, &err), 0);
		assert_null(p);
		/* it lies inside its segment (shared with other single gets) */
		assert_int_equal(fstat(weightd_weight_fd(w), &st), 0);
		assert_true((uint64_t)st.st_size >= weightd_weight_offset(w));
		/* the daemon hands another fd for the same (empty) segment */
		assert_int_equal(weightd_share(w, &w2, &err), 0);
		assert_int_equal(weightd_weight_nbytes(w2), 0);
		weightd_release(w2);
		weightd_release(w);
	}
	/* GGUF tensors with a zero dimension, packed blocks too, and a cast of one */
	{
		static const char *const gnames[] = { "g.empty", "g.q8.empty" };
		static const char cast[] = "{\"op\":\"cast\",\"dtype\":\"F16\",\"input\":{\"op\":"
					   "\"source\",\"checkpoint\":\"gzero\",\"tensor\":\"g.q8.empty\"}}";
		weightd_recipe *r = NULL;
		weightd_inflight *f = NULL;
		weightd_weight *w = NULL;
		weightd_error err;

		for (int i = 0; i < 2; i++) {
			w = it_get_ok(c, "gzero", gnames[i]);
			assert_int_equal(weightd_weight_nbytes(w), 0);
			assert_int_equal(weightd_weight_ndim(w), 2);
			assert_int_equal(weightd_weight_shape(w)[i == 0 ? 1 : 0], 0);
			weightd_release(w);
		}
		assert_int_equal(weightd_recipe_from_json(cast, strlen(cast), &r, &err), 0);
		if (weightd_materialize_recipe(c, r, &f, &err) < 0 || weightd_finish(f, &w, &err) < 0)
			fail_msg("cast of an empty Q8_0 tensor: %s", err.message);
		assert_string_equal(weightd_weight_dtype(w), "F16");
		assert_int_equal(weightd_weight_nbytes(w), 0);
		weightd_release(w);
		weightd_recipe_free(r);
	}
	weightd_close(c);
}

/* A unit binding every tensor of the checkpoint, 0-byte ones included, publishes NULL for them. */
static void a_unit_with_empty_tensors_binds_whole(void **state)
{
	weightd_client *c = it_connect(&H);
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	void *slots[8];

	(void)state;
	assert_int_equal(weightd_describe(c, "zero", &d, &err), 0);
	assert_int_equal(d->n_tensors, 4);
	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];

		slots[i] = (void *)1; /* bind must overwrite it */
		assert_int_equal(weightd_unit_slot(u, t->name, t->dtype, t->shape, t->ndim, &slots[i],
						   &err), (int)i);
		assert_int_equal(weightd_unit_set_tensor(u, t->name, "zero", t->name, NULL, &err), 0);
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
		fail_msg("unit: %s", err.message);
	weightd_unit_bind(u);
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];

		if (t->nbytes == 0) {
			assert_null(slots[i]);
		} else {
			assert_non_null(slots[i]);
			assert_non_null(weightd_unit_data(u, t->name));
		}
	}
	if (strcmp(d->tensors[2].name, "four") == 0)
		assert_true(((const float *)slots[2])[3] == 4.0f);
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
}

/* Recipes over empty inputs give empty outputs; taking nothing from rows stays an error. */
static void recipes_over_empty_tensors_are_valid(void **state)
{
	static const char *const ok[] = {
		"{\"op\":\"cast\",\"dtype\":\"F16\",\"input\":{\"op\":\"source\",\"checkpoint\":\"zero\","
		"\"tensor\":\"empty.2d\"}}",
		"{\"op\":\"transpose\",\"perm\":[1,0],\"input\":{\"op\":\"source\",\"checkpoint\":\"zero\","
		"\"tensor\":\"empty.2d\",\"select\":{\"shard\":[0,1,2]}}}",
		"{\"op\":\"concat\",\"axis\":0,\"inputs\":[{\"op\":\"source\",\"checkpoint\":\"zero\","
		"\"tensor\":\"empty\"},{\"op\":\"source\",\"checkpoint\":\"zero\",\"tensor\":\"empty\"}]}",
		"{\"op\":\"source\",\"checkpoint\":\"zero\",\"tensor\":\"empty\",\"select\":{\"shard\":[0,3,4]}}",
	};
	weightd_client *c = it_connect(&H);
	weightd_error err;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		weightd_recipe *r = NULL;
		weightd_inflight *f = NULL;
		weightd_weight *w = NULL;

		assert_int_equal(weightd_recipe_from_json(ok[i], strlen(ok[i]), &r, &err), 0);
		if (weightd_materialize_recipe(c, r, &f, &err) < 0 || weightd_finish(f, &w, &err) < 0)
			fail_msg("recipe %zu: %s", i, err.message);
		assert_int_equal(weightd_weight_nbytes(w), 0);
		weightd_release(w);
		weightd_recipe_free(r);
	}
	{
		weightd_recipe *r = NULL;
		weightd_inflight *f = NULL;
		weightd_weight *w = NULL;

		static const char bad[] = "{\"op\":\"source\",\"checkpoint\":\"zero\",\"tensor\":"
					  "\"four\",\"select\":{\"shard\":[0,4,5]}}";

		assert_int_equal(weightd_recipe_from_json(bad, strlen(bad), &r, &err), 0);
		if (weightd_materialize_recipe(c, r, &f, &err) == 0)
			assert_int_equal(weightd_finish(f, &w, &err), -WEIGHTD_E_ZERO_SIZED);
		else
			assert_int_equal(err.code, WEIGHTD_E_ZERO_SIZED);
		assert_non_null(strstr(err.message, "gets nothing"));
		weightd_recipe_free(r);
	}
	weightd_close(c);
}

static int ctl(char *out, size_t cap, const char *a1, const char *a2, const char *a3)
{
	char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, (char *)a1, (char *)a2,
			 (char *)a3, NULL };

	return harness_run(argv, out, cap, (uid_t)-1);
}

/* weightctl preloads the whole checkpoint and shows 0-d shapes as [] in its tables. */
static void weightctl_preloads_and_describes_empty_and_scalar_tensors(void **state)
{
	char out[8192];

	(void)state;
	assert_int_equal(ctl(out, sizeof(out), "preload", "zero", NULL), 0);
	assert_int_equal(ctl(out, sizeof(out), "--json", "preload", "zero"), 0);
	assert_non_null(strstr(out, "\"weights\": 4"));
	assert_int_equal(ctl(out, sizeof(out), "describe", "zero", NULL), 0);
	if (!strstr(out, " []"))
		fail_msg("a 0-d shape is not shown as []:\n%s", out);
	assert_non_null(strstr(out, "[3, 0]"));
	assert_non_null(strstr(out, "[0]"));
	assert_int_equal(ctl(out, sizeof(out), "get", "zero", "scalar"), 0);
	assert_non_null(strstr(out, "[]"));
	assert_int_equal(ctl(out, sizeof(out), "get", "zero", "empty.2d"), 0);
	assert_non_null(strstr(out, "[3, 0]"));
}

TEST_MAIN_WATCHDOG(120, setup, fixture_cleanup,
		   cmocka_unit_test(zero_element_tensors_are_fetched_as_0_byte_weights),
		   cmocka_unit_test(a_unit_with_empty_tensors_binds_whole),
		   cmocka_unit_test(recipes_over_empty_tensors_are_valid),
		   cmocka_unit_test(weightctl_preloads_and_describes_empty_and_scalar_tensors))
