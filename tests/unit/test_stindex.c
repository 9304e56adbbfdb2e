/* SPDX-License-Identifier: Apache-2.0 */
/* test_stindex.c - model.safetensors.index.json parsing: the weight_map and every shard-name rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stindex.h"

static int parse(const char *json, const struct wd_limits *lim, struct wd_stindex *idx,
		 weightd_error *err)
{
	wd_error_clear(err);
	return wd_stindex_parse(json, strlen(json), lim, idx, err);
}

/* Rejected with `code`, a message holding `needle`, and *ret left as it was. */
static void expect_bad_lim(const char *json, const struct wd_limits *lim, int code, const char *needle)
{
	struct wd_stindex idx, before;
	weightd_error err;
	int r;

	memset(&idx, 0xa5, sizeof(idx));
	before = idx;
	r = parse(json, lim, &idx, &err);
	if (r != -code || !strstr(err.message, needle))
		print_error("index %s\n-> %d (%s), wanted %d with \"%s\"\n", json, r, err.message, -code, needle);
	assert_int_equal(r, -code);
	assert_int_equal(err.code, code);
	assert_non_null(strstr(err.message, needle));
	assert_memory_equal(&idx, &before, sizeof(idx));
}

static void expect_bad(const char *json, int code, const char *needle)
{
	expect_bad_lim(json, NULL, code, needle);
}

static void weight_map_is_read_with_shards_in_first_seen_order(void **state)
{
	static const char json[] =
		"{\"metadata\": {\"total_size\": 1234, \"anything\": [1, {\"x\": null}]},\n"
		" \"weight_map\": {\n"
		"  \"model.embed.weight\": \"model-00002-of-00002.safetensors\",\n"
		"  \"model.norm.weight\": \"model-00001-of-00002.safetensors\",\n"
		"  \"lm_head.weight\": \"model-00002-of-00002.safetensors\"\n"
		" }}";
	struct wd_stindex idx;
	weightd_error err;

	(void)state;
	assert_int_equal(parse(json, NULL, &idx, &err), 0);
	assert_int_equal(idx.n_files, 2);
	assert_string_equal(idx.files[0], "model-00002-of-00002.safetensors");
	assert_string_equal(idx.files[1], "model-00001-of-00002.safetensors");
	assert_int_equal(idx.n_tensors, 3);
	assert_string_equal(idx.tensors[0], "model.embed.weight");
	assert_int_equal(idx.tensor_file[0], 0);
	assert_string_equal(idx.tensors[1], "model.norm.weight");
	assert_int_equal(idx.tensor_file[1], 1);
	assert_string_equal(idx.tensors[2], "lm_head.weight");
	assert_int_equal(idx.tensor_file[2], 0);
	wd_stindex_free(&idx);
	assert_int_equal(idx.n_files, 0);
	assert_null(idx.files);
	wd_stindex_free(&idx);
	wd_stindex_free(NULL);
}

static void many_tensors_in_many_shards(void **state)
{
	char *json = malloc(1 << 20);
	size_t off = 0;
	struct wd_stindex idx;
	weightd_error err;

	(void)state;
	assert_non_null(json);
	off += (size_t)sprintf(json + off, "{\"weight_map\":{");
	for (int i = 0; i < 3000; i++)
		off += (size_t)sprintf(json + off, "%s\"t%d\":\"s%d.safetensors\"", i ? "," : "", i, i % 37);
	sprintf(json + off, "}}");
	assert_int_equal(parse(json, NULL, &idx, &err), 0);
	assert_int_equal(idx.n_tensors, 3000);
	assert_int_equal(idx.n_files, 37);
	for (int i = 0; i < 3000; i++) {
		char want[32];
		snprintf(want, sizeof(want), "s%d.safetensors", i % 37);
		assert_string_equal(idx.files[idx.tensor_file[i]], want);
	}
	wd_stindex_free(&idx);
	free(json);
}

static void empty_weight_map_is_accepted(void **state)
{
	struct wd_stindex idx;
	weightd_error err;

	(void)state;
	assert_int_equal(parse("{\"weight_map\": {}}", NULL, &idx, &err), 0);
	assert_int_equal(idx.n_tensors, 0);
	assert_int_equal(idx.n_files, 0);
	wd_stindex_free(&idx);
}

static void malformed_index_files_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"weight_map\": {\"a\": \"x.safetensors\"}", WEIGHTD_E_BAD_CHECKPOINT,
		   "not valid JSON");
	expect_bad("", WEIGHTD_E_BAD_CHECKPOINT, "not valid JSON");
	expect_bad("[\"weight_map\"]", WEIGHTD_E_BAD_CHECKPOINT, "the top level is an array");
	expect_bad("{\"metadata\": {}}", WEIGHTD_E_BAD_CHECKPOINT, "no \"weight_map\"");
	expect_bad("{\"weight_map\": [\"a\"]}", WEIGHTD_E_BAD_CHECKPOINT, "\"weight_map\" is an array");
	expect_bad("{\"weight_map\": {\"a\": 3}}", WEIGHTD_E_BAD_CHECKPOINT, "tensor 'a' is an integer");
	expect_bad("{\"weight_map\": {\"a\": null}}", WEIGHTD_E_BAD_CHECKPOINT, "tensor 'a' is null");
}

static void duplicate_tensors_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}",
		   WEIGHTD_E_BAD_CHECKPOINT, "duplicate key");
	expect_bad("{\"weight_map\": {}, \"weight_map\": {\"a\": \"y.safetensors\"}}",
		   WEIGHTD_E_BAD_CHECKPOINT, "duplicate key");
}

static void escaping_shard_names_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"weight_map\": {\"a\": \"/etc/passwd\"}}", WEIGHTD_E_BAD_CHECKPOINT,
		   "is an absolute path");
	expect_bad("{\"weight_map\": {\"a\": \"../x.safetensors\"}}", WEIGHTD_E_BAD_CHECKPOINT,
		   "contains \"..\"");
	expect_bad("{\"weight_map\": {\"a\": \"..\"}}", WEIGHTD_E_BAD_CHECKPOINT, "contains \"..\"");
	expect_bad("{\"weight_map\": {\"a\": \"sub/x.safetensors\"}}", WEIGHTD_E_BAD_CHECKPOINT,
		   "contains '/'");
	expect_bad("{\"weight_map\": {\"a\": \"\"}}", WEIGHTD_E_BAD_CHECKPOINT, "is empty");
	expect_bad("{\"weight_map\": {\"a\": \".\"}}", WEIGHTD_E_BAD_CHECKPOINT,
		   "names the directory itself");
	/* a later bad name fails the whole index, naming the tensor */
	expect_bad("{\"weight_map\": {\"ok\": \"x.safetensors\", \"bad\": \"a/../../y\"}}",
		   WEIGHTD_E_BAD_CHECKPOINT, "for tensor 'bad'");
}

static void limits_hold(void **state)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	char name[1100], json[1300];

	(void)state;
	lim.max_shards = 2;
	expect_bad_lim("{\"weight_map\": {\"a\": \"1\", \"b\": \"2\", \"c\": \"3\"}}", &lim,
		       WEIGHTD_E_LIMIT_EXCEEDED, "more than the limit of 2 shard files");
	lim = (struct wd_limits)WD_LIMITS_DEFAULT;
	lim.max_tensors = 2;
	expect_bad_lim("{\"weight_map\": {\"a\": \"1\", \"b\": \"1\", \"c\": \"1\"}}", &lim,
		       WEIGHTD_E_LIMIT_EXCEEDED, "maps 3 tensors, more than the limit of 2");
	lim = (struct wd_limits)WD_LIMITS_DEFAULT;
	lim.max_index_bytes = 10;
	expect_bad_lim("{\"weight_map\": {}}", &lim, WEIGHTD_E_LIMIT_EXCEEDED,
		       "more than the limit of 10");
	memset(name, 'n', WD_MAX_NAME + 1);
	name[WD_MAX_NAME + 1] = '\0';
	snprintf(json, sizeof(json), "{\"weight_map\": {\"%s\": \"x\"}}", name);
	expect_bad(json, WEIGHTD_E_LIMIT_EXCEEDED, "more than the limit of 1024");
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(weight_map_is_read_with_shards_in_first_seen_order),
	  cmocka_unit_test(many_tensors_in_many_shards),
	  cmocka_unit_test(empty_weight_map_is_accepted),
	  cmocka_unit_test(malformed_index_files_are_rejected),
	  cmocka_unit_test(duplicate_tensors_are_rejected),
	  cmocka_unit_test(escaping_shard_names_are_rejected), cmocka_unit_test(limits_hold))
