/* SPDX-License-Identifier: Apache-2.0 */
/* test_safetensors.c - the safetensors header parser: valid files of every kind, each class of bad header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"
#include "files.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "st_writer.h"

static const char *tpath(const char *name)
{
	static char p[4200];
	snprintf(p, sizeof(p), "%s/%s", stw_test_dir, name);
	return p;
}

/* Little-endian u64 decoded by hand: the oracle for the header length. */
static uint64_t file_header_len(const uint8_t *b)
{
	return (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24 |
	       (uint64_t)b[4] << 32 | (uint64_t)b[5] << 40 | (uint64_t)b[6] << 48 | (uint64_t)b[7] << 56;
}

/*
 * Parse `path` both ways (whole buffer through wd_safetensors_parse, and the fd through
 * wd_safetensors_read) and require the two to agree on code and message. Returns the code.
 */
static int parse_path(const char *path, const struct wd_limits *lim, struct wd_tensor_table *table,
		      uint64_t *ds, weightd_error *err)
{
	struct wd_tensor_table t2;
	weightd_error e2;
	uint64_t ds2 = 0;
	size_t len;
	uint8_t *buf = tf_read(path, &len);
	int r, r2, fd;

	wd_error_clear(err);
	wd_error_clear(&e2);
	wd_tensor_table_init(&t2);
	r = wd_safetensors_parse(buf, len, len, 0, lim, table, ds, err);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	r2 = wd_safetensors_read(fd, len, 0, lim, &t2, &ds2, &e2);
	close(fd);
	assert_int_equal(r, r2);
	assert_string_equal(err->message, e2.message);
	if (r == 0) {
		assert_int_equal(table->n_tensors, t2.n_tensors);
		if (ds)
			assert_int_equal(*ds, ds2);
	}
	wd_tensor_table_free(&t2);
	free(buf);
	return r;
}

/* Expect `json` (+ data_len bytes of data) to be rejected with code and a message holding `needle`. */
static void expect_bad_lim(const char *json, size_t data_len, const struct wd_limits *lim, int code,
			   const char *needle, const char *tensor)
{
	static uint8_t data[4096];
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds = 12345;
	int r;

	assert_true(data_len <= sizeof(data));
	assert_int_equal(stw_write_json(tpath("bad.safetensors"), json, data, data_len), 0);
	wd_tensor_table_init(&t);
	r = parse_path(tpath("bad.safetensors"), lim, &t, &ds, &err);
	if (r != -code || !strstr(err.message, needle))
		print_error("json %s\n-> %d (%s), wanted %d with \"%s\"\n", json, r, err.message, -code, needle);
	assert_int_equal(r, -code);
	assert_int_equal(err.code, code);
	assert_non_null(strstr(err.message, needle));
	assert_int_equal(ds, 12345); /* output untouched on failure */
	if (tensor)
		assert_string_equal(err.tensor, tensor);
	wd_tensor_table_free(&t);
}

static void expect_bad(const char *json, size_t data_len, int code, const char *needle, const char *tensor)
{
	expect_bad_lim(json, data_len, NULL, code, needle, tensor);
}

/* The test's own table of safetensors dtypes: name, enum, element size. */
static const struct {
	const char *name;
	enum wd_dtype dt;
	uint64_t size;
} k_dtypes[] = {
	{ "BOOL", WD_BOOL, 1 }, { "U8", WD_U8, 1 }, { "I8", WD_I8, 1 }, { "U16", WD_U16, 2 },
	{ "I16", WD_I16, 2 }, { "F16", WD_F16, 2 }, { "BF16", WD_BF16, 2 }, { "U32", WD_U32, 4 },
	{ "I32", WD_I32, 4 }, { "F32", WD_F32, 4 }, { "U64", WD_U64, 8 }, { "I64", WD_I64, 8 },
	{ "F64", WD_F64, 8 }, { "F8_E4M3", WD_F8_E4M3, 1 }, { "F8_E5M2", WD_F8_E5M2, 1 },
};
#define N_DTYPES (sizeof(k_dtypes) / sizeof(k_dtypes[0]))

static void every_dtype_is_accepted_with_exact_offsets_and_bytes(void **state)
{
	struct stw_tensor ts[N_DTYPES];
	char names[N_DTYPES][32];
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds = 0, expect_off, hlen;
	size_t len;
	uint8_t *file;

	(void)state;
	memset(ts, 0, sizeof(ts));
	for (size_t i = 0; i < N_DTYPES; i++) {
		snprintf(names[i], sizeof(names[i]), "t.%s", k_dtypes[i].name);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = k_dtypes[i].name, .ndim = 2,
					     .shape = { 3, i + 1 }, .seed = (uint32_t)i };
	}
	assert_int_equal(stw_write(tpath("all.safetensors"), ts, N_DTYPES, NULL, 0, NULL), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("all.safetensors"), NULL, &t, &ds, &err), 0);

	file = tf_read(tpath("all.safetensors"), &len);
	hlen = file_header_len(file);
	assert_int_equal(ds, 8 + hlen);
	assert_int_equal(t.n_tensors, N_DTYPES);
	expect_off = 8 + hlen;
	for (size_t i = 0; i < N_DTYPES; i++) {
		const struct wd_tensor_info *ti = &t.tensors[i];
		uint64_t nb = 3 * (i + 1) * k_dtypes[i].size;

		assert_string_equal(ti->name, names[i]);
		assert_int_equal(ti->dtype, k_dtypes[i].dt);
		assert_int_equal(ti->ndim, 2);
		assert_int_equal(ti->shape[0], 3);
		assert_int_equal(ti->shape[1], i + 1);
		assert_int_equal(ti->file, 0);
		assert_int_equal(ti->offset, expect_off);
		assert_int_equal(ti->nbytes, nb);
		/* the bytes at that offset are the ones written for this tensor */
		for (uint64_t b = 0; b < nb; b++)
			assert_int_equal(file[ti->offset + b], (uint8_t)((b * 131 + i * 7 + 13) & 0xff));
		expect_off += nb;
	}
	assert_int_equal(expect_off, len);
	assert_int_equal(t.n_meta, 0);
	free(file);
	wd_tensor_table_free(&t);
}

static void scalars_and_empty_tensors_are_valid(void **state)
{
	static const char json[] =
		"{\"s32\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
		"\"e\":{\"dtype\":\"I64\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
		"\"s64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}";
	uint8_t data[12] = { 0 };
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds = 0;

	(void)state;
	assert_int_equal(stw_write_json(tpath("s.safetensors"), json, data, sizeof(data)), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("s.safetensors"), NULL, &t, &ds, &err), 0);
	assert_int_equal(ds, 8 + strlen(json));
	assert_int_equal(t.n_tensors, 3);
	assert_string_equal(t.tensors[0].name, "s32");
	assert_int_equal(t.tensors[0].ndim, 0);
	assert_int_equal(t.tensors[0].nbytes, 4);
	assert_int_equal(t.tensors[0].offset, ds);
	/* empty tensor at 4 sorts before the scalar that starts there */
	assert_string_equal(t.tensors[1].name, "e");
	assert_int_equal(t.tensors[1].nbytes, 0);
	assert_int_equal(t.tensors[1].ndim, 2);
	assert_int_equal(t.tensors[1].shape[0], 0);
	assert_string_equal(t.tensors[2].name, "s64");
	assert_int_equal(t.tensors[2].ndim, 0);
	assert_int_equal(t.tensors[2].nbytes, 8);
	assert_int_equal(t.tensors[2].offset, ds + 4);
	wd_tensor_table_free(&t);
}

static void empty_header_and_space_padding_are_valid(void **state)
{
	static const char padded[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}        ";
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds = 0;

	(void)state;
	wd_tensor_table_init(&t);
	assert_int_equal(stw_write_json(tpath("e.safetensors"), "{}", NULL, 0), 0);
	assert_int_equal(parse_path(tpath("e.safetensors"), NULL, &t, &ds, &err), 0);
	assert_int_equal(t.n_tensors, 0);
	assert_int_equal(ds, 10);

	assert_int_equal(stw_write_json(tpath("p.safetensors"), padded, "xy", 2), 0);
	assert_int_equal(parse_path(tpath("p.safetensors"), NULL, &t, &ds, &err), 0);
	assert_int_equal(t.n_tensors, 1);
	assert_int_equal(t.tensors[0].offset, 8 + strlen(padded));
	assert_int_equal(t.tensors[0].nbytes, 2);
	wd_tensor_table_free(&t);
}

/* Only spaces may pad the header; NUL padding breaks that rule and is named as such. */
static void nul_padding_is_rejected_by_its_rule(void **state)
{
	static const char json[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
	char padded[sizeof(json) + 8];
	struct wd_tensor_table t;
	weightd_error err;

	(void)state;
	for (int variant = 0; variant < 3; variant++) {
		memcpy(padded, json, sizeof(json) - 1);
		memset(padded + sizeof(json) - 1, variant == 0 ? '\0' : ' ', 8);
		if (variant == 1)
			padded[sizeof(json) - 1 + 7] = '\0'; /* spaces, then a NUL */
		if (variant == 2)
			padded[sizeof(json) - 1 + 2] = '\0'; /* a NUL among spaces */
		assert_int_equal(stw_write_raw(tpath("n.safetensors"), padded, sizeof(padded) - 1,
					       sizeof(padded) - 1, "xy", 2), 0);
		wd_tensor_table_init(&t);
		assert_int_equal(parse_path(tpath("n.safetensors"), NULL, &t, NULL, &err),
				 -WEIGHTD_E_BAD_CHECKPOINT);
		assert_non_null(strstr(err.message, "padded with NUL bytes"));
		assert_non_null(strstr(err.message, "the format allows only spaces (0x20) as trailing padding"));
		assert_null(strstr(err.message, "end of file expected"));
		wd_tensor_table_free(&t);
	}
	/* the first NUL's file position is named */
	memcpy(padded, json, sizeof(json) - 1);
	memset(padded + sizeof(json) - 1, '\0', 8);
	assert_int_equal(stw_write_raw(tpath("n.safetensors"), padded, sizeof(padded) - 1, sizeof(padded) - 1,
				       "xy", 2), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("n.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	{
		char want[64];

		snprintf(want, sizeof(want), "(the first at byte %zu of the file)", 8 + sizeof(json) - 1);
		assert_non_null(strstr(err.message, want));
	}
	wd_tensor_table_free(&t);
}

static void metadata_is_kept_as_strings(void **state)
{
	const char *meta[] = { "format", "pt", "note", "with \"quotes\" and \\ backslash" };
	struct stw_tensor ts[1] = { { .name = "w", .dtype = "F16", .ndim = 1, .shape = { 4 } } };
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds;
	int found = 0;

	(void)state;
	assert_int_equal(stw_write(tpath("m.safetensors"), ts, 1, meta, 2, NULL), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("m.safetensors"), NULL, &t, &ds, &err), 0);
	assert_int_equal(t.n_meta, 2);
	for (size_t i = 0; i < t.n_meta; i++) {
		assert_string_equal(t.meta[i].type, "string");
		if (strcmp(t.meta[i].key, "format") == 0) {
			assert_string_equal(t.meta[i].value, "pt");
			found++;
		} else if (strcmp(t.meta[i].key, "note") == 0) {
			assert_string_equal(t.meta[i].value, meta[3]);
			found++;
		}
	}
	assert_int_equal(found, 2);
	assert_int_equal(t.n_tensors, 1);
	wd_tensor_table_free(&t);
}

static void table_is_in_offset_order_whatever_the_json_order(void **state)
{
	static const char json[] =
		"{\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[5,8]},"
		"\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		"\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[2,5]}}";
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds;

	(void)state;
	assert_int_equal(stw_write_json(tpath("o.safetensors"), json, "abcdefgh", 8), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("o.safetensors"), NULL, &t, &ds, &err), 0);
	assert_int_equal(t.n_tensors, 3);
	assert_string_equal(t.tensors[0].name, "a");
	assert_string_equal(t.tensors[1].name, "b");
	assert_string_equal(t.tensors[2].name, "c");
	assert_int_equal(t.tensors[2].offset, 8 + strlen(json) + 5);
	wd_tensor_table_free(&t);
}

static void truncated_files_are_rejected(void **state)
{
	struct stw_tensor ts[2] = { { .name = "a", .dtype = "F32", .ndim = 1, .shape = { 3 } },
				    { .name = "b", .dtype = "U8", .ndim = 0 } };
	struct wd_tensor_table t;
	weightd_error err;
	size_t len;
	uint8_t *full;

	(void)state;
	/* shorter than the length field */
	assert_int_equal(stw_write_raw(tpath("t.safetensors"), "", 0, 0, NULL, 0), 0);
	assert_int_equal(truncate(tpath("t.safetensors"), 5), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("t.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "truncated"));
	assert_non_null(strstr(err.message, "5 bytes"));

	/* every proper prefix of a valid file is rejected, never read past */
	assert_int_equal(stw_write(tpath("v.safetensors"), ts, 2, NULL, 0, NULL), 0);
	full = tf_read(tpath("v.safetensors"), &len);
	for (size_t l = 0; l < len; l++) {
		uint8_t *copy = malloc(l ? l : 1);
		assert_non_null(copy);
		memcpy(copy, full, l);
		wd_error_clear(&err);
		assert_int_equal(wd_safetensors_parse(copy, l, l, 0, NULL, &t, NULL, &err),
				 -WEIGHTD_E_BAD_CHECKPOINT);
		assert_true(err.message[0] != '\0');
		free(copy);
		wd_tensor_table_free(&t);
	}
	assert_int_equal(wd_safetensors_parse(full, len, len, 0, NULL, &t, NULL, &err), 0);
	/* a buffer that holds less than the header announces is refused even if the file is long */
	wd_tensor_table_free(&t);
	assert_int_equal(wd_safetensors_parse(full, 20, len, 0, NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "truncated"));
	free(full);
	wd_tensor_table_free(&t);
}

static void header_length_past_the_end_is_rejected(void **state)
{
	static const char json[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
	struct wd_limits nolimit = WD_LIMITS_DEFAULT;
	struct wd_tensor_table t;
	weightd_error err;

	(void)state;
	nolimit.max_header_bytes = UINT64_MAX;
	wd_tensor_table_init(&t);
	assert_int_equal(stw_write_raw(tpath("h.safetensors"), json, strlen(json), strlen(json) + 2, "x", 1), 0);
	assert_int_equal(parse_path(tpath("h.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "past the end of the file"));
	/* a length near 2^64 must not wrap around, even with no header limit */
	assert_int_equal(stw_write_raw(tpath("h.safetensors"), json, strlen(json), UINT64_MAX - 3, "x", 1), 0);
	assert_int_equal(parse_path(tpath("h.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_int_equal(parse_path(tpath("h.safetensors"), &nolimit, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "past the end of the file"));
	wd_tensor_table_free(&t);
}

static void header_length_over_the_limit_is_rejected(void **state)
{
	static const char json[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct wd_tensor_table t;
	weightd_error err;

	(void)state;
	wd_tensor_table_init(&t);
	/* over 100 MiB, so over the default limit: refused before anything is allocated for it */
	assert_int_equal(stw_write_raw(tpath("l.safetensors"), json, strlen(json), (100ull << 20) + 1, "x", 1), 0);
	assert_int_equal(parse_path(tpath("l.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "104857601"));
	assert_int_equal(err.expected, 100000000);
	/* the default is the reference's 100,000,000 bytes, not 100 MiB */
	assert_int_equal(stw_write_raw(tpath("l.safetensors"), json, strlen(json), 100000001, "x", 1), 0);
	assert_int_equal(parse_path(tpath("l.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message,
			       "header length 100000001 is over the limit of 100000000 bytes"));
	assert_int_equal(stw_write_raw(tpath("l.safetensors"), json, strlen(json), 100000000, "x", 1), 0);
	assert_int_equal(parse_path(tpath("l.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "reaches past the end of the file"));
	/* a valid header just over a lowered limit */
	lim.max_header_bytes = strlen(json) - 1;
	expect_bad_lim(json, 1, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "over the limit", NULL);
	lim.max_header_bytes = strlen(json);
	assert_int_equal(stw_write_json(tpath("l.safetensors"), json, "x", 1), 0);
	assert_int_equal(parse_path(tpath("l.safetensors"), &lim, &t, NULL, &err), 0);
	wd_tensor_table_free(&t);
}

static void non_json_and_non_objects_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]", 1,
		   WEIGHTD_E_BAD_CHECKPOINT, "not valid JSON", NULL);
	expect_bad("{\"a\" 1}", 0, WEIGHTD_E_BAD_CHECKPOINT, "not valid JSON", NULL);
	expect_bad("{} trailing", 0, WEIGHTD_E_BAD_CHECKPOINT, "not valid JSON", NULL);
	expect_bad("{\"a\xff\":1}", 0, WEIGHTD_E_BAD_CHECKPOINT, "not valid JSON", NULL);
	expect_bad("[1, 2]", 0, WEIGHTD_E_BAD_CHECKPOINT, "does not begin with '{'", NULL);
	expect_bad("\"str\"", 0, WEIGHTD_E_BAD_CHECKPOINT, "does not begin with '{'", NULL);
	/* the format requires the very first byte to be '{' */
	expect_bad(" {}", 0, WEIGHTD_E_BAD_CHECKPOINT, "does not begin with '{'", NULL);
	expect_bad("", 0, WEIGHTD_E_BAD_CHECKPOINT, "does not begin with '{'", NULL);
}

static void duplicate_keys_are_rejected(void **state)
{
	(void)state;
	/* the same four bytes described twice (U8 x4, then F32 x1): the classic aliasing trick */
	expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		   "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
		   4, WEIGHTD_E_BAD_CHECKPOINT, "duplicate key", NULL);
	expect_bad("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, WEIGHTD_E_BAD_CHECKPOINT,
		   "duplicate key", NULL);
	expect_bad("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "duplicate key", NULL);
}

static void bad_metadata_is_rejected(void **state)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;

	(void)state;
	expect_bad("{\"__metadata__\":{\"n\":1}}", 0, WEIGHTD_E_BAD_CHECKPOINT,
		   "__metadata__ entry 'n' is an integer", NULL);
	expect_bad("{\"__metadata__\":{\"n\":{\"x\":\"y\"}}}", 0, WEIGHTD_E_BAD_CHECKPOINT,
		   "is an object, expected a string", NULL);
	expect_bad("{\"__metadata__\":[\"a\"]}", 0, WEIGHTD_E_BAD_CHECKPOINT,
		   "__metadata__ is an array", NULL);
	expect_bad("{\"__metadata__\":null}", 0, WEIGHTD_E_BAD_CHECKPOINT, "__metadata__ is null", NULL);
	lim.max_metadata = 1;
	expect_bad_lim("{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\"}}", 0, &lim,
		       WEIGHTD_E_LIMIT_EXCEEDED, "2 entries", NULL);
	lim = (struct wd_limits)WD_LIMITS_DEFAULT;
	lim.max_string = 3;
	expect_bad_lim("{\"__metadata__\":{\"a\":\"1234\"}}", 0, &lim, WEIGHTD_E_LIMIT_EXCEEDED,
		       "longer than the limit of 3", NULL);
}

static void unknown_dtypes_are_unsupported_by_name(void **state)
{
	(void)state;
	expect_bad("{\"q\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
		   WEIGHTD_E_UNSUPPORTED, "\"F4\"", "q");
	expect_bad("{\"q\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
		   WEIGHTD_E_UNSUPPORTED, "\"C64\"", "q");
	/* ggml block types are weightd dtypes but not safetensors ones */
	expect_bad("{\"q\":{\"dtype\":\"Q4_0\",\"shape\":[32],\"data_offsets\":[0,18]}}", 18,
		   WEIGHTD_E_UNSUPPORTED, "\"Q4_0\"", "q");
	expect_bad("{\"q\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_UNSUPPORTED, "\"f32\"", "q");
}

static void missing_and_ill_typed_fields_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, WEIGHTD_E_BAD_CHECKPOINT,
		   "has no \"dtype\"", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "has no \"shape\"", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, WEIGHTD_E_BAD_CHECKPOINT,
		   "has no \"data_offsets\"", "a");
	expect_bad("{\"a\":[1,2]}", 0, WEIGHTD_E_BAD_CHECKPOINT, "entry is an array", "a");
	expect_bad("{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "\"dtype\" is an integer", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "\"shape\" is a string", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "dimension 0 is a negative integer", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1.0],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "dimension 1 is a real number", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "whose length is not 2", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"b\":0}}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "\"data_offsets\" is an object", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "expected two non-negative integers", "a");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "expected two non-negative integers", "a");
}

static void shape_and_byte_count_must_agree(void **state)
{
	static uint8_t data[16];
	struct wd_tensor_table t;
	weightd_error err;

	(void)state;
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16,
		   WEIGHTD_E_BAD_CHECKPOINT,
		   "hold 16 bytes but shape [2, 3] of F32 needs 24 (6 elements x 4 bytes)", "a");
	/* structured fields carry the numbers */
	assert_int_equal(stw_write_json(tpath("x.safetensors"),
					"{\"a\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[0,8]}}", data, 8), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("x.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_int_equal(err.expected, 10);
	assert_int_equal(err.actual, 8);
	wd_tensor_table_free(&t);
	/* a 0-d tensor has one element */
	expect_bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,0]}}", 0,
		   WEIGHTD_E_BAD_CHECKPOINT, "needs 8", "a");
}

static void overflowing_shapes_are_rejected(void **state)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;

	(void)state;
	/* 2^32 * 2^32 = 2^64 elements */
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "more elements than fit in 64 bits", "a");
	/* 2^62 elements fit, but x 4 bytes does not */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "more bytes than fit in 64 bits", "a");
	/* numbers past 2^63-1 are valid JSON: said to be past what weightd reads, by field */
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT,
		   "tensor 'a': shape dimension 0 is above 2^63-1, beyond what weightd reads", "a");
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		   "\"b\":{\"dtype\":\"U8\",\"shape\":[0,9223372036854775808],\"data_offsets\":[2,2]}}", 2,
		   WEIGHTD_E_BAD_CHECKPOINT, "tensor 'b': shape dimension 1 is above 2^63-1", "b");
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[-9223372036854775809],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "shape dimension 0 is a negative integer", "a");
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,9223372036854775808]}}", 1,
		   WEIGHTD_E_BAD_CHECKPOINT, "tensor 'a': data_offsets end is above 2^63-1", "a");
	expect_bad("{\"__metadata__\":{\"k\":9223372036854775808}}", 0, WEIGHTD_E_BAD_CHECKPOINT,
		   "is outside -2^63..2^63-1, the range weightd reads (the JSON itself is valid)", NULL);
	{
		struct wd_tensor_table t;
		weightd_error err;

		/* 2^63-1 itself is read (and then needs its bytes) */
		expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807],\"data_offsets\":[0,4]}}", 4,
			   WEIGHTD_E_BAD_CHECKPOINT, "hold 4 bytes but shape [9223372036854775807]", "a");
		wd_tensor_table_init(&t);
		assert_int_equal(stw_write_json(tpath("z.safetensors"),
						"{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]}}",
						NULL, 0), 0);
		assert_int_equal(parse_path(tpath("z.safetensors"), NULL, &t, NULL, &err), 0);
		assert_int_equal(t.tensors[0].shape[0], INT64_MAX);
		wd_tensor_table_free(&t);
	}
	/* a zero dimension makes a huge shape empty, and then it must hold no bytes */
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
		   WEIGHTD_E_BAD_CHECKPOINT, "hold 4 bytes but shape", "a");
	expect_bad(
		"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
		1, WEIGHTD_E_LIMIT_EXCEEDED, "9 dimensions", "a");
	(void)lim;
}

static void overlapping_entries_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
		   12, WEIGHTD_E_BAD_CHECKPOINT, "[4, 12] overlap tensor 'a' at [0, 8]", "b");
	/* the same range twice under two names */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
		   4, WEIGHTD_E_BAD_CHECKPOINT, "overlap", NULL);
	/* an empty tensor inside another's range */
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		   "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
		   8, WEIGHTD_E_BAD_CHECKPOINT, "overlap tensor 'a'", "e");
}

static void out_of_order_offsets_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
		   8, WEIGHTD_E_BAD_CHECKPOINT, "[8, 4] are out of order", "a");
}

static void gaps_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		   12, WEIGHTD_E_BAD_CHECKPOINT,
		   "gap of 4 bytes between tensor 'a' (ends at 4) and this tensor (begins at 8)",
		   "b");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
		   WEIGHTD_E_BAD_CHECKPOINT, "starts with 4 bytes that belong to no tensor", "a");
}

static void offsets_outside_the_file_are_rejected(void **state)
{
	(void)state;
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
		   WEIGHTD_E_BAD_CHECKPOINT,
		   "[0, 16] reach past the end of the file (the data section holds 8 bytes)", "a");
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,9223372036854775807]}}",
		   8, WEIGHTD_E_BAD_CHECKPOINT, "reach past the end of the file", "a");
}

static void data_section_must_be_fully_covered(void **state)
{
	static uint8_t data[12];
	struct wd_tensor_table t;
	weightd_error err;

	(void)state;
	expect_bad(
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12,
		WEIGHTD_E_BAD_CHECKPOINT,
		"holds 12 bytes but the tensors cover only 4; the last 8 bytes belong to no tensor",
		NULL);
	expect_bad("{}", 3, WEIGHTD_E_BAD_CHECKPOINT, "the last 3 bytes belong to no tensor", NULL);
	assert_int_equal(stw_write_json(tpath("c.safetensors"),
					"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 12), 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_path(tpath("c.safetensors"), NULL, &t, NULL, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_int_equal(err.expected, 12);
	assert_int_equal(err.actual, 4);
	wd_tensor_table_free(&t);
}

static void tensor_count_and_name_limits_hold(void **state)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	char json[3000], name[1100];

	(void)state;
	lim.max_tensors = 2;
	expect_bad_lim("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		       "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
		       "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}",
		       3, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "3 tensors, more than the limit of 2", NULL);
	/* __metadata__ does not count as a tensor */
	lim.max_tensors = 1;
	assert_int_equal(stw_write_json(tpath("n.safetensors"),
					"{\"__metadata__\":{},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
					"x", 1), 0);
	{
		struct wd_tensor_table t;
		weightd_error err;
		wd_tensor_table_init(&t);
		assert_int_equal(parse_path(tpath("n.safetensors"), &lim, &t, NULL, &err), 0);
		wd_tensor_table_free(&t);
	}
	memset(name, 'n', WD_MAX_NAME + 1);
	name[WD_MAX_NAME + 1] = '\0';
	snprintf(json, sizeof(json), "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
	expect_bad(json, 1, WEIGHTD_E_LIMIT_EXCEEDED, "longer than the limit of 1024", NULL);
}

static void tensor_file_index_is_recorded(void **state)
{
	struct stw_tensor ts[1] = { { .name = "w", .dtype = "U16", .ndim = 1, .shape = { 2 } } };
	struct wd_tensor_table t;
	weightd_error err;
	size_t len;
	uint8_t *buf;

	(void)state;
	assert_int_equal(stw_write(tpath("f.safetensors"), ts, 1, NULL, 0, NULL), 0);
	buf = tf_read(tpath("f.safetensors"), &len);
	wd_tensor_table_init(&t);
	assert_int_equal(wd_safetensors_parse(buf, len, len, 7, NULL, &t, NULL, &err), 0);
	assert_int_equal(t.tensors[0].file, 7);
	free(buf);
	wd_tensor_table_free(&t);
}

TEST_MAIN(stw_setup, stw_teardown, cmocka_unit_test(every_dtype_is_accepted_with_exact_offsets_and_bytes),
	  cmocka_unit_test(scalars_and_empty_tensors_are_valid),
	  cmocka_unit_test(empty_header_and_space_padding_are_valid),
	  cmocka_unit_test(nul_padding_is_rejected_by_its_rule),
	  cmocka_unit_test(metadata_is_kept_as_strings),
	  cmocka_unit_test(table_is_in_offset_order_whatever_the_json_order),
	  cmocka_unit_test(truncated_files_are_rejected),
	  cmocka_unit_test(header_length_past_the_end_is_rejected),
	  cmocka_unit_test(header_length_over_the_limit_is_rejected),
	  cmocka_unit_test(non_json_and_non_objects_are_rejected),
	  cmocka_unit_test(duplicate_keys_are_rejected), cmocka_unit_test(bad_metadata_is_rejected),
	  cmocka_unit_test(unknown_dtypes_are_unsupported_by_name),
	  cmocka_unit_test(missing_and_ill_typed_fields_are_rejected),
	  cmocka_unit_test(shape_and_byte_count_must_agree),
	  cmocka_unit_test(overflowing_shapes_are_rejected),
	  cmocka_unit_test(overlapping_entries_are_rejected),
	  cmocka_unit_test(out_of_order_offsets_are_rejected), cmocka_unit_test(gaps_are_rejected),
	  cmocka_unit_test(offsets_outside_the_file_are_rejected),
	  cmocka_unit_test(data_section_must_be_fully_covered),
	  cmocka_unit_test(tensor_count_and_name_limits_hold),
	  cmocka_unit_test(tensor_file_index_is_recorded))
