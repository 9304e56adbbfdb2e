/* SPDX-License-Identifier: Apache-2.0 */
/* test_gguf.c - the GGUF reader against files written here from the specification. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "error.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "wd_limits.h"
#include "tensor.h"

static char tmpdir[256];

static int group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/wd-test-gguf-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	return rmdir(tmpdir);
}

/* A table holding one entry of each kind, so a failed parse can be seen to leave it alone. */
static void table_with_sentinel(struct wd_tensor_table *t)
{
	struct wd_tensor_info s = { .name = "sentinel", .dtype = WD_F32, .ndim = 1, .shape = { 1 },
				    .nbytes = 4 };

	wd_tensor_table_init(t);
	assert_int_equal(wd_tensor_table_add(t, &s), 0);
	assert_int_equal(wd_tensor_table_add_meta(t, "sentinel.key", "v", "string"), 0);
}

static int parse_with(const struct gw *g, const struct wd_limits *lim, struct wd_tensor_table *t,
		      weightd_error *err)
{
	wd_error_clear(err);
	return wd_gguf_parse(g->p, g->len, g->len, 0, lim, t, err);
}

/* Parse g expecting failure with `code` and a message containing `needle`; the table is kept. */
static void expect_fail_lim(const struct gw *g, const struct wd_limits *lim, int code,
			    const char *needle)
{
	struct wd_tensor_table t;
	weightd_error err;
	int rc;

	table_with_sentinel(&t);
	rc = parse_with(g, lim, &t, &err);
	if (rc != -code || !strstr(err.message, needle))
		print_error("got rc %d (%s), message: %s\n", rc, wd_code_name(rc), err.message);
	assert_int_equal(rc, -code);
	assert_int_equal(err.code, code);
	assert_non_null(strstr(err.message, needle));
	assert_int_equal(t.n_tensors, 1);
	assert_int_equal(t.n_meta, 1);
	assert_string_equal(t.tensors[0].name, "sentinel");
	assert_string_equal(t.meta[0].key, "sentinel.key");
	wd_tensor_table_free(&t);
}

static void expect_fail(const struct gw *g, int code, const char *needle)
{
	expect_fail_lim(g, NULL, code, needle);
}

static const struct wd_meta *find_meta(const struct wd_tensor_table *t, const char *key)
{
	for (size_t i = 0; i < t->n_meta; i++)
		if (strcmp(t->meta[i].key, key) == 0)
			return &t->meta[i];
	return NULL;
}

static const struct wd_tensor_info *find_tensor(const struct wd_tensor_table *t, const char *name)
{
	for (size_t i = 0; i < t->n_tensors; i++)
		if (strcmp(t->tensors[i].name, name) == 0)
			return &t->tensors[i];
	return NULL;
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* ---- well-formed files ---- */

/* Shapes come out row-major (GGUF's innermost-first dims reversed), offsets absolute. */
static void test_tensor_table(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const struct wd_tensor_info *ti;
	size_t header_end, data_start;
	/* dims innermost first, as GGUF stores them */
	const uint64_t d_emb[2] = { 8, 3 }, d_q[2] = { 64, 2 }, d_norm[1] = { 5 },
		       d_4d[4] = { 2, 3, 4, 5 };

	gw_init(&g);
	gw_header(&g, 3, 5, 1);
	gw_kv_str(&g, "general.architecture", "llama");
	gw_tinfo(&g, "token_embd.weight", 2, d_emb, GG_F32, 0);      /* 96 bytes */
	gw_tinfo(&g, "blk.0.attn_q.weight", 2, d_q, GG_Q4_0, 96);    /* 2 rows x 2 blocks x 18 */
	gw_tinfo(&g, "blk.0.norm.weight", 1, d_norm, GG_F16, 192);   /* 10 bytes */
	gw_tinfo(&g, "four.d", 4, d_4d, GG_I8, 224);                 /* 120 bytes */
	gw_tinfo(&g, "scalar", 0, NULL, GG_I32, 352);                /* 0-d: 4 bytes */
	header_end = g.len;
	gw_pad(&g, 32);
	data_start = g.len;
	gw_zeros(&g, 352 + 4);

	wd_tensor_table_init(&t);
	assert_int_equal(wd_gguf_parse(g.p, g.len, g.len, 7, NULL, &t, &err), 0);
	assert_int_equal(data_start, align_up(header_end, 32));
	assert_int_equal(t.n_tensors, 5);

	ti = find_tensor(&t, "token_embd.weight");
	assert_non_null(ti);
	assert_int_equal(ti->dtype, WD_F32);
	assert_int_equal(ti->ndim, 2);
	assert_int_equal(ti->shape[0], 3);
	assert_int_equal(ti->shape[1], 8);
	assert_int_equal(ti->offset, data_start + 0);
	assert_int_equal(ti->nbytes, 8 * 3 * 4);
	assert_int_equal(ti->file, 7);

	ti = find_tensor(&t, "blk.0.attn_q.weight");
	assert_non_null(ti);
	assert_int_equal(ti->dtype, WD_Q4_0);
	assert_int_equal(ti->shape[0], 2);
	assert_int_equal(ti->shape[1], 64);
	assert_int_equal(ti->offset, data_start + 96);
	assert_int_equal(ti->nbytes, 2 * (64 / 32) * 18);

	ti = find_tensor(&t, "blk.0.norm.weight");
	assert_non_null(ti);
	assert_int_equal(ti->ndim, 1);
	assert_int_equal(ti->shape[0], 5);
	assert_int_equal(ti->nbytes, 10);

	ti = find_tensor(&t, "four.d");
	assert_non_null(ti);
	assert_int_equal(ti->ndim, 4);
	assert_int_equal(ti->shape[0], 5);
	assert_int_equal(ti->shape[1], 4);
	assert_int_equal(ti->shape[2], 3);
	assert_int_equal(ti->shape[3], 2);
	assert_int_equal(ti->nbytes, 120);
	assert_int_equal(ti->offset, data_start + 224);

	ti = find_tensor(&t, "scalar");
	assert_non_null(ti);
	assert_int_equal(ti->ndim, 0);
	assert_int_equal(ti->nbytes, 4);

	assert_int_equal(t.n_meta, 1);
	assert_string_equal(t.meta[0].key, "general.architecture");
	assert_string_equal(t.meta[0].value, "llama");
	assert_string_equal(t.meta[0].type, "string");
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* Version 2 has the same layout as 3 and is read too; tables accumulate across calls. */
static void test_version_2_and_append(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const uint64_t d[1] = { 4 };

	gw_init(&g);
	gw_header(&g, 2, 1, 0);
	gw_tinfo(&g, "w", 1, d, GG_F32, 0);
	gw_pad(&g, 32);
	gw_zeros(&g, 16);
	table_with_sentinel(&t);
	assert_int_equal(wd_gguf_parse(g.p, g.len, g.len, 1, NULL, &t, &err), 0);
	assert_int_equal(t.n_tensors, 2);
	assert_string_equal(t.tensors[1].name, "w");
	assert_int_equal(t.tensors[1].file, 1);
	assert_int_equal(t.tensors[1].offset, 64);
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* general.alignment moves the data section and sets the rule for offsets. */
static void test_custom_alignment(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const struct gw_tensor ts[2] = {
		{ "a", 1, { 3 }, GG_F32, 12 },
		{ "b", 2, { 2, 2 }, GG_F16, 8 },
	};
	size_t data_start;

	gw_init(&g);
	gw_file(&g, 256, 2, ts, &data_start);
	assert_int_equal(data_start % 256, 0);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
	assert_int_equal(find_tensor(&t, "a")->offset, data_start);
	assert_int_equal(find_tensor(&t, "b")->offset, data_start + 256);
	assert_string_equal(find_meta(&t, "general.alignment")->value, "256");
	assert_string_equal(find_meta(&t, "general.alignment")->type, "u32");
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* Every metadata value type, as a scalar and as an array element, rendered to text. */
static void test_metadata_types(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const uint64_t nkv = 13 + 12 + 8;
	static const struct {
		const char *key, *value, *type;
	} want[] = {
		{ "s.u8", "255", "u8" },
		{ "s.i8", "-128", "i8" },
		{ "s.u16", "65535", "u16" },
		{ "s.i16", "-32768", "i16" },
		{ "s.u32", "4294967295", "u32" },
		{ "s.i32", "-2147483648", "i32" },
		{ "s.f32", "1e-05", "f32" },
		{ "s.bool_t", "true", "bool" },
		{ "s.bool_f", "false", "bool" },
		{ "s.string", "hello, \"world\"\n", "string" },
		{ "s.u64", "18446744073709551615", "u64" },
		{ "s.i64", "-9223372036854775808", "i64" },
		{ "s.f64", "0.1", "f64" },
		{ "a.u8", "[0, 7]", "array[u8]" },
		{ "a.i8", "[-1, 1]", "array[i8]" },
		{ "a.u16", "[1, 2]", "array[u16]" },
		{ "a.i16", "[-300, 300]", "array[i16]" },
		{ "a.u32", "[100000, 3]", "array[u32]" },
		{ "a.i32", "[-100000, 3]", "array[i32]" },
		{ "a.f32", "[0.5, -2, 10000, 3.1415927]", "array[f32]" },
		{ "a.bool", "[true, false]", "array[bool]" },
		{ "a.string", "[\"a\", \"b\\\"c\\x01\"]", "array[string]" },
		{ "a.u64", "[1, 2]", "array[u64]" },
		{ "a.i64", "[-5, 5]", "array[i64]" },
		{ "a.f64", "[0.25, 1e+100]", "array[f64]" },
		{ "n.nested", "[[1, 2], [3]]", "array[array[i32]]" },
		{ "n.mixed", "[[1], [\"x\"]]", "array[array]" },
		{ "n.deep", "[[[7]]]", "array[array[array[u8]]]" },
		{ "n.empty", "[]", "array[f32]" },
		{ "l.sixteen", "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]", "array[u32]" },
		{ "l.seventeen", "[17 x u32]", "array[u32]" },
		{ "l.tokens", "[20 x string]", "array[string]" },
		{ "l.nested", "[17 x array[u8]]", "array[array[u8]]" },
	};

	gw_init(&g);
	gw_header(&g, 3, 0, nkv);
	gw_key(&g, "s.u8", GW_U8); gw_u8(&g, 255);
	gw_key(&g, "s.i8", GW_I8); gw_u8(&g, 0x80);
	gw_key(&g, "s.u16", GW_U16); gw_u16(&g, 65535);
	gw_key(&g, "s.i16", GW_I16); gw_u16(&g, 0x8000);
	gw_key(&g, "s.u32", GW_U32); gw_u32(&g, 0xffffffffu);
	gw_key(&g, "s.i32", GW_I32); gw_u32(&g, 0x80000000u);
	gw_key(&g, "s.f32", GW_F32); gw_f32(&g, 1e-5f);
	gw_key(&g, "s.bool_t", GW_BOOL); gw_u8(&g, 1);
	gw_key(&g, "s.bool_f", GW_BOOL); gw_u8(&g, 0);
	gw_kv_str(&g, "s.string", "hello, \"world\"\n");
	gw_key(&g, "s.u64", GW_U64); gw_u64(&g, UINT64_MAX);
	gw_key(&g, "s.i64", GW_I64); gw_u64(&g, 0x8000000000000000ull);
	gw_key(&g, "s.f64", GW_F64); gw_f64(&g, 0.1);

	gw_key(&g, "a.u8", GW_ARRAY); gw_arr(&g, GW_U8, 2); gw_u8(&g, 0); gw_u8(&g, 7);
	gw_key(&g, "a.i8", GW_ARRAY); gw_arr(&g, GW_I8, 2); gw_u8(&g, 0xff); gw_u8(&g, 1);
	gw_key(&g, "a.u16", GW_ARRAY); gw_arr(&g, GW_U16, 2); gw_u16(&g, 1); gw_u16(&g, 2);
	gw_key(&g, "a.i16", GW_ARRAY); gw_arr(&g, GW_I16, 2); gw_u16(&g, (uint16_t)-300);
	gw_u16(&g, 300);
	gw_key(&g, "a.u32", GW_ARRAY); gw_arr(&g, GW_U32, 2); gw_u32(&g, 100000); gw_u32(&g, 3);
	gw_key(&g, "a.i32", GW_ARRAY); gw_arr(&g, GW_I32, 2); gw_u32(&g, (uint32_t)-100000);
	gw_u32(&g, 3);
	gw_key(&g, "a.f32", GW_ARRAY); gw_arr(&g, GW_F32, 4); gw_f32(&g, 0.5f); gw_f32(&g, -2.0f);
	gw_f32(&g, 10000.0f); gw_f32(&g, 3.14159265f);
	gw_key(&g, "a.bool", GW_ARRAY); gw_arr(&g, GW_BOOL, 2); gw_u8(&g, 1); gw_u8(&g, 0);
	gw_key(&g, "a.string", GW_ARRAY); gw_arr(&g, GW_STRING, 2); gw_str(&g, "a");
	gw_str(&g, "b\"c\x01");
	gw_key(&g, "a.u64", GW_ARRAY); gw_arr(&g, GW_U64, 2); gw_u64(&g, 1); gw_u64(&g, 2);
	gw_key(&g, "a.i64", GW_ARRAY); gw_arr(&g, GW_I64, 2); gw_u64(&g, (uint64_t)-5);
	gw_u64(&g, 5);
	gw_key(&g, "a.f64", GW_ARRAY); gw_arr(&g, GW_F64, 2); gw_f64(&g, 0.25); gw_f64(&g, 1e100);

	gw_key(&g, "n.nested", GW_ARRAY); gw_arr(&g, GW_ARRAY, 2);
	gw_arr(&g, GW_I32, 2); gw_u32(&g, 1); gw_u32(&g, 2);
	gw_arr(&g, GW_I32, 1); gw_u32(&g, 3);
	gw_key(&g, "n.mixed", GW_ARRAY); gw_arr(&g, GW_ARRAY, 2);
	gw_arr(&g, GW_U8, 1); gw_u8(&g, 1);
	gw_arr(&g, GW_STRING, 1); gw_str(&g, "x");
	gw_key(&g, "n.deep", GW_ARRAY); gw_arr(&g, GW_ARRAY, 1); gw_arr(&g, GW_ARRAY, 1);
	gw_arr(&g, GW_U8, 1); gw_u8(&g, 7);
	gw_key(&g, "n.empty", GW_ARRAY); gw_arr(&g, GW_F32, 0);

	gw_key(&g, "l.sixteen", GW_ARRAY); gw_arr(&g, GW_U32, 16);
	for (uint32_t i = 0; i < 16; i++)
		gw_u32(&g, i);
	gw_key(&g, "l.seventeen", GW_ARRAY); gw_arr(&g, GW_U32, 17);
	for (uint32_t i = 0; i < 17; i++)
		gw_u32(&g, i);
	gw_key(&g, "l.tokens", GW_ARRAY); gw_arr(&g, GW_STRING, 20);
	for (int i = 0; i < 20; i++)
		gw_str(&g, "tok");
	gw_key(&g, "l.nested", GW_ARRAY); gw_arr(&g, GW_ARRAY, 17);
	for (int i = 0; i < 17; i++) {
		gw_arr(&g, GW_U8, 1);
		gw_u8(&g, (uint8_t)i);
	}

	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
	assert_int_equal(t.n_meta, nkv);
	assert_int_equal(sizeof(want) / sizeof(want[0]), nkv);
	for (size_t i = 0; i < nkv; i++) {
		const struct wd_meta *m = find_meta(&t, want[i].key);

		assert_non_null(m);
		assert_string_equal(m->value, want[i].value);
		assert_string_equal(m->type, want[i].type);
		/* entries stay in file order */
		assert_string_equal(t.meta[i].key, want[i].key);
	}
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* A NUL inside a top-level string value is shown, not allowed to cut the text. */
static void test_string_with_nul(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;

	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "k", GW_STRING);
	gw_strn(&g, "a\0b", 3);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
	assert_string_equal(t.meta[0].value, "a\\x00b");
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* A short array of long strings is rendered up to 4096 bytes of text, then marked as cut. */
static void test_long_array_text_cut(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	char s[401];
	const char *v;

	memset(s, 'y', 400);
	s[400] = '\0';
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "merges", GW_ARRAY);
	gw_arr(&g, GW_STRING, 16);
	for (int i = 0; i < 16; i++)
		gw_str(&g, s);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
	v = t.meta[0].value;
	assert_int_equal(strlen(v), 4096 + 3);
	assert_memory_equal(v, "[\"yyy", 5);
	assert_string_equal(v + 4096, "...");
	assert_string_equal(t.meta[0].type, "array[string]");
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/*
 * Block geometry of every ggml type weightd lists, stated here from ggml's block structs
 * (ggml-common.h) as sums of their fields, independent of dtype.c.
 */
static const struct geom {
	const char *name;
	uint32_t ggml, block, bytes;
} geoms[] = {
	{ "F32", GG_F32, 1, 4 },
	{ "F16", GG_F16, 1, 2 },
	{ "BF16", GG_BF16, 1, 2 },
	{ "F64", GG_F64, 1, 8 },
	{ "I8", GG_I8, 1, 1 },
	{ "I16", GG_I16, 1, 2 },
	{ "I32", GG_I32, 1, 4 },
	{ "I64", GG_I64, 1, 8 },
	{ "Q4_0", GG_Q4_0, 32, 2 + 32 / 2 },             /* d, qs[16] */
	{ "Q4_1", GG_Q4_1, 32, 2 + 2 + 32 / 2 },         /* d, m, qs[16] */
	{ "Q5_0", GG_Q5_0, 32, 2 + 4 + 32 / 2 },         /* d, qh[4], qs[16] */
	{ "Q5_1", GG_Q5_1, 32, 2 + 2 + 4 + 32 / 2 },     /* d, m, qh[4], qs[16] */
	{ "Q8_0", GG_Q8_0, 32, 2 + 32 },                 /* d, qs[32] */
	{ "Q8_1", GG_Q8_1, 32, 2 + 2 + 32 },             /* d, s, qs[32] */
	{ "Q2_K", GG_Q2_K, 256, 256 / 16 + 256 / 4 + 2 + 2 },          /* scales, qs, d, dmin */
	{ "Q3_K", GG_Q3_K, 256, 256 / 8 + 256 / 4 + 12 + 2 },          /* hmask, qs, scales, d */
	{ "Q4_K", GG_Q4_K, 256, 2 + 2 + 12 + 256 / 2 },                /* d, dmin, scales, qs */
	{ "Q5_K", GG_Q5_K, 256, 2 + 2 + 12 + 256 / 8 + 256 / 2 },      /* + qh */
	{ "Q6_K", GG_Q6_K, 256, 256 / 2 + 256 / 4 + 256 / 16 + 2 },    /* ql, qh, scales, d */
	{ "Q8_K", GG_Q8_K, 256, 4 + 256 + 2 * 256 / 16 },              /* f32 d, qs, bsums */
	{ "IQ2_XXS", GG_IQ2_XXS, 256, 2 + 2 * 256 / 8 },               /* d, u16 qs[32] */
	{ "IQ2_XS", GG_IQ2_XS, 256, 2 + 2 * 256 / 8 + 256 / 32 },      /* + scales[8] */
	{ "IQ3_XXS", GG_IQ3_XXS, 256, 2 + 3 * 256 / 8 },
	{ "IQ1_S", GG_IQ1_S, 256, 2 + 256 / 8 + 2 * 256 / 32 },        /* d, qs, u16 qh[8] */
	{ "IQ4_NL", GG_IQ4_NL, 32, 2 + 32 / 2 },
	{ "IQ3_S", GG_IQ3_S, 256, 2 + 256 / 4 + 256 / 32 + 256 / 8 + 256 / 64 },
	{ "IQ2_S", GG_IQ2_S, 256, 2 + 256 / 4 + 256 / 32 + 256 / 32 },
	{ "IQ4_XS", GG_IQ4_XS, 256, 2 + 2 + 256 / 64 + 256 / 2 },
	{ "IQ1_M", GG_IQ1_M, 256, 256 / 8 + 256 / 16 + 256 / 32 },
	{ "TQ1_0", GG_TQ1_0, 256, (256 - 4 * 256 / 64) / 5 + 256 / 64 + 2 },
	{ "TQ2_0", GG_TQ2_0, 256, 256 / 4 + 2 },
	{ "MXFP4", GG_MXFP4, 32, 1 + 32 / 2 },            /* E8M0 e, qs[16] */
};

#define NGEOMS (sizeof(geoms) / sizeof(geoms[0]))

/* Each listed type's byte length, from a file holding a 3 x (2 blocks) tensor of each. */
static void test_type_byte_lengths(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	struct gw_tensor ts[NGEOMS];
	char names[NGEOMS][32];

	for (size_t i = 0; i < NGEOMS; i++) {
		snprintf(names[i], sizeof(names[i]), "t.%s", geoms[i].name);
		ts[i] = (struct gw_tensor){ names[i], 2, { 2 * geoms[i].block, 3 }, geoms[i].ggml,
					    3 * 2 * (uint64_t)geoms[i].bytes };
	}
	gw_init(&g);
	gw_file(&g, 0, NGEOMS, ts, NULL);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
	assert_int_equal(t.n_tensors, NGEOMS);
	for (size_t i = 0; i < NGEOMS; i++) {
		const struct wd_tensor_info *ti = find_tensor(&t, names[i]);

		assert_non_null(ti);
		assert_string_equal(wd_dtype_name(ti->dtype), geoms[i].name);
		assert_int_equal(ti->nbytes, 3 * 2 * (uint64_t)geoms[i].bytes);
		assert_int_equal(ti->shape[0], 3);
		assert_int_equal(ti->shape[1], 2 * geoms[i].block);
	}
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* Every block type refuses a row of half a block (when a block has more than one element). */
static void test_partial_block_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < NGEOMS; i++) {
		struct gw g;
		const uint64_t d[2] = { geoms[i].block + geoms[i].block / 2, 2 };

		if (geoms[i].block == 1)
			continue;
		gw_init(&g);
		gw_header(&g, 3, 1, 0);
		gw_tinfo(&g, "w", 2, d, geoms[i].ggml, 0);
		gw_pad(&g, 32);
		gw_zeros(&g, 4 * geoms[i].bytes);
		expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "not a whole number");
		gw_free(&g);
	}
}

/* ggml numbers outside the table (removed or never assigned) are refused by number. */
static void test_unknown_types(void **state)
{
	(void)state;
	static const uint32_t unknown[] = { 4, 5, 31, 32, 33, 36, 37, 38, 40, 41, 1000, 0xffffffffu };

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		struct gw g;
		const uint64_t d[1] = { 256 };
		char needle[32];

		gw_init(&g);
		gw_header(&g, 3, 1, 0);
		gw_tinfo(&g, "w", 1, d, unknown[i], 0);
		gw_pad(&g, 32);
		gw_zeros(&g, 1024);
		snprintf(needle, sizeof(needle), "ggml type %u,", unknown[i]);
		expect_fail(&g, WEIGHTD_E_UNSUPPORTED, needle);
		gw_free(&g);
	}
}

/* ---- admission errors: header ---- */

static void test_bad_magic(void **state)
{
	(void)state;
	struct gw g;

	gw_init(&g);
	gw_raw(&g, "GGUX", 4);
	gw_u32(&g, 3);
	gw_u64(&g, 0);
	gw_u64(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "magic");
	gw_free(&g);
}

static void test_versions(void **state)
{
	(void)state;
	static const uint32_t bad[] = { 0, 1, 4, 0xffff };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct gw g;
		char needle[64];

		gw_init(&g);
		gw_header(&g, bad[i], 0, 0);
		snprintf(needle, sizeof(needle), "version %u is not supported", bad[i]);
		expect_fail(&g, WEIGHTD_E_UNSUPPORTED, needle);
		gw_free(&g);
	}
}

/* A file written big-endian: the version field reads byte-swapped. */
static void test_big_endian(void **state)
{
	(void)state;
	struct gw g;
	const uint8_t be_version[4] = { 0, 0, 0, 3 }, be_zero[8] = { 0 };

	gw_init(&g);
	gw_raw(&g, "GGUF", 4);
	gw_raw(&g, be_version, 4);
	gw_raw(&g, be_zero, 8);
	gw_raw(&g, be_zero, 8);
	expect_fail(&g, WEIGHTD_E_UNSUPPORTED, "big-endian GGUF is not supported");
	gw_free(&g);
}

static void test_truncated(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const struct gw_tensor ts[1] = { { "w", 1, { 8 }, GG_F32, 32 } };
	size_t data_start, full;

	gw_init(&g);
	gw_file(&g, 0, 1, ts, &data_start);
	full = g.len;
	/* the file ends inside the tensor info: header 24 + metadata 44 + 20 of its 33 bytes */
	assert_int_equal(data_start, 128);
	g.len = 24 + 44 + 20;
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "truncated");
	/* the file ends inside the header's counts */
	g.len = 10;
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "truncated");
	g.len = 0;
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "truncated");
	/* the file is whole but the caller handed over less than the header */
	g.len = full;
	table_with_sentinel(&t);
	assert_int_equal(wd_gguf_parse(g.p, 40, g.len, 0, NULL, &t, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "truncated"));
	assert_int_equal(t.n_meta, 1);
	wd_tensor_table_free(&t);
	gw_free(&g);
}

static void test_counts_vs_file_size(void **state)
{
	(void)state;
	struct gw g;

	gw_init(&g);
	gw_header(&g, 3, 1000, 0);
	gw_zeros(&g, 100);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "more than a file");
	gw_free(&g);

	gw_init(&g);
	gw_header(&g, 3, 0, 1ull << 62);
	gw_zeros(&g, 100);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "more than a file");
	gw_free(&g);

	gw_init(&g);
	gw_header(&g, 3, UINT64_MAX, UINT64_MAX);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "more than a file");
	gw_free(&g);
}

static void test_count_limits(void **state)
{
	(void)state;
	struct gw g;
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	const struct gw_tensor ts[2] = {
		{ "a", 1, { 8 }, GG_F32, 32 },
		{ "b", 1, { 8 }, GG_F32, 32 },
	};

	gw_init(&g);
	gw_file(&g, 32, 2, ts, NULL); /* 2 tensors, 2 metadata entries */
	lim.max_tensors = 1;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "over the limit of 1");
	lim = (struct wd_limits)WD_LIMITS_DEFAULT;
	lim.max_metadata = 1;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "metadata entries, over the limit of 1");
	lim = (struct wd_limits)WD_LIMITS_DEFAULT;
	lim.max_header_bytes = 64;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "header region passes the limit of 64");
	gw_free(&g);
}

/* ---- admission errors: metadata ---- */

static void test_string_lengths(void **state)
{
	(void)state;
	struct gw g;
	struct wd_limits lim = WD_LIMITS_DEFAULT;

	/* a key claiming more bytes than the file has */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_u64(&g, 1000);
	gw_raw(&g, "general.name", 12);
	gw_zeros(&g, 20);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "remain in the file");
	gw_free(&g);

	/* a string value claiming 2^63 bytes */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "general.name", GW_STRING);
	gw_u64(&g, 1ull << 63);
	gw_zeros(&g, 20);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "claims 9223372036854775808 bytes");
	gw_free(&g);

	/* a string within the file but over max_string */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_kv_str(&g, "k", "hello");
	lim.max_string = 4;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "over the limit of 4");
	gw_free(&g);

	/* a key longer than GGUF allows */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_u64(&g, 70000);
	for (int i = 0; i < 70000; i++)
		gw_u8(&g, 'k');
	gw_u32(&g, GW_U8);
	gw_u8(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "at most 65535");
	gw_free(&g);

	/* an empty key, and keys with control bytes in them */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "", GW_U8);
	gw_u8(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "empty key");
	gw_free(&g);
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_strn(&g, "a\0b", 3);
	gw_u32(&g, GW_U8);
	gw_u8(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "key with control byte 0x00");
	gw_free(&g);
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "general.name\nforged line", GW_U8);
	gw_u8(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "key with control byte 0x0a");
	gw_free(&g);
}

static void test_array_lengths(void **state)
{
	(void)state;
	struct gw g;
	struct wd_limits lim = WD_LIMITS_DEFAULT;

	/* more u32 elements than the rest of the file could hold */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	gw_arr(&g, GW_U32, 1000000);
	gw_zeros(&g, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "array of 1000000 u32 values");
	gw_free(&g);

	/* strings: each takes at least its 8-byte length */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	gw_arr(&g, GW_STRING, 10);
	gw_zeros(&g, 72);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "array of 10 string values");
	gw_free(&g);

	/* within the file but over max_array */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	gw_arr(&g, GW_U8, 5);
	gw_zeros(&g, 5);
	lim.max_array = 4;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "over the limit of 4 array elements");
	gw_free(&g);

	/* max_array counts nested elements too: 2 + 3 + 3 > 7 */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	gw_arr(&g, GW_ARRAY, 2);
	gw_arr(&g, GW_U8, 3);
	gw_zeros(&g, 3);
	gw_arr(&g, GW_U8, 3);
	gw_zeros(&g, 3);
	lim.max_array = 7;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "array elements");
	lim.max_array = 8;
	{
		struct wd_tensor_table t;
		weightd_error err;

		wd_tensor_table_init(&t);
		assert_int_equal(parse_with(&g, &lim, &t, &err), 0);
		assert_string_equal(t.meta[0].value, "[[0, 0, 0], [0, 0, 0]]");
		wd_tensor_table_free(&t);
	}
	gw_free(&g);
}

static void test_array_depth(void **state)
{
	(void)state;
	struct gw g;
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct wd_tensor_table t;
	weightd_error err;

	/* three levels of arrays */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	gw_arr(&g, GW_ARRAY, 1);
	gw_arr(&g, GW_ARRAY, 1);
	gw_arr(&g, GW_U8, 1);
	gw_u8(&g, 9);
	lim.max_array_depth = 2;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "nests arrays 3 deep");
	lim.max_array_depth = 3;
	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, &lim, &t, &err), 0);
	assert_string_equal(t.meta[0].value, "[[[9]]]");
	wd_tensor_table_free(&t);
	gw_free(&g);

	/* far deeper than any limit: refused without running out of stack */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	for (int i = 0; i < 10000; i++)
		gw_arr(&g, GW_ARRAY, 1);
	gw_arr(&g, GW_U8, 0);
	lim.max_array_depth = UINT32_MAX;
	expect_fail_lim(&g, &lim, WEIGHTD_E_LIMIT_EXCEEDED, "deep");
	gw_free(&g);
}

static void test_value_types(void **state)
{
	(void)state;
	struct gw g;

	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", 13);
	gw_u64(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "unknown value type 13");
	gw_free(&g);

	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "a", GW_ARRAY);
	gw_arr(&g, 99, 1);
	gw_u64(&g, 0);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "unknown element type 99");
	gw_free(&g);

	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "flag", GW_BOOL);
	gw_u8(&g, 2);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "bool of value 2");
	gw_free(&g);

	/* inside a long array too, where elements are not rendered */
	gw_init(&g);
	gw_header(&g, 3, 0, 1);
	gw_key(&g, "flags", GW_ARRAY);
	gw_arr(&g, GW_BOOL, 40);
	gw_zeros(&g, 39);
	gw_u8(&g, 7);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "bool of value 7");
	gw_free(&g);
}

static void test_duplicate_keys(void **state)
{
	(void)state;
	struct gw g;

	gw_init(&g);
	gw_header(&g, 3, 0, 3);
	gw_kv_str(&g, "general.name", "a");
	gw_kv_u32(&g, "general.file_type", 1);
	gw_kv_str(&g, "general.name", "b");
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "metadata key 'general.name' at byte");
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "duplicate");
	gw_free(&g);
}

static void test_bad_alignment(void **state)
{
	(void)state;
	static const uint32_t bad[] = { 0, 3, 48, 0x80000001u };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct gw g;

		gw_init(&g);
		gw_header(&g, 3, 0, 1);
		gw_kv_u32(&g, "general.alignment", bad[i]);
		expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "not a power of two");
		gw_free(&g);
	}
	{
		struct gw g;

		gw_init(&g);
		gw_header(&g, 3, 0, 1);
		gw_key(&g, "general.alignment", GW_U64);
		gw_u64(&g, 64);
		expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "must be a u32, but its type is u64");
		gw_free(&g);
	}
}

/* ---- admission errors: tensor infos ---- */

/* A file with one tensor info built by the caller's values, padded and followed by data. */
static void one_tensor(struct gw *g, const char *name, uint32_t n_dims, const uint64_t *dims,
		       uint32_t type, uint64_t offset, size_t data)
{
	gw_init(g);
	gw_header(g, 3, 1, 0);
	gw_tinfo(g, name, n_dims, dims, type, offset);
	gw_pad(g, 32);
	gw_zeros(g, data);
}

static void test_dim_count(void **state)
{
	(void)state;
	struct gw g;
	const uint64_t d[5] = { 1, 1, 1, 1, 1 };

	one_tensor(&g, "w", 5, d, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "has 5 dimensions; GGUF allows at most 4");
	gw_free(&g);
	gw_init(&g);
	gw_header(&g, 3, 1, 0);
	gw_str(&g, "w");
	gw_u32(&g, 0xffffffffu);
	gw_zeros(&g, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "has 4294967295 dimensions");
	gw_free(&g);
}

static void test_zero_and_overflowing_dims(void **state)
{
	(void)state;
	struct gw g;
	const uint64_t big[2] = { 1ull << 32, 1ull << 32 }, bytes_over[2] = { 1ull << 31, 1ull << 31 };

	one_tensor(&g, "w", 2, big, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "overflows");
	gw_free(&g);
	/* 2^62 elements of 8 bytes: the count fits, the byte length does not */
	one_tensor(&g, "w", 2, bytes_over, GG_F64, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "byte length overflows");
	gw_free(&g);
}

/* ggml reads dims as int64_t: a dimension with the top bit set is negative, and said so by axis. */
static void test_negative_dims(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const uint64_t over_i64[1] = { 1ull << 63 }, minus5[3] = { 4, (uint64_t)-5, 2 };

	one_tensor(&g, "w", 1, over_i64, GG_I8, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT,
		    "negative dimension: dims[0] in file order (shape axis 0) is -9223372036854775808");
	gw_free(&g);
	one_tensor(&g, "blk.1.attn_q.weight", 3, minus5, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT,
		    "GGUF tensor 'blk.1.attn_q.weight' has a negative dimension: dims[1] in file order "
		    "(shape axis 1) is -5");
	table_with_sentinel(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_string_equal(err.tensor, "blk.1.attn_q.weight");
	assert_null(strstr(err.message, "overflow"));
	wd_tensor_table_free(&t);
	gw_free(&g);
}

/* A zero dimension is a tensor of no elements and 0 bytes, as ggml writes and reads them. */
static void test_zero_dims(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const uint64_t d16[1] = { 16 }, zero[2] = { 4, 0 }, zero0[1] = { 0 },
		       zero_q[2] = { 0, 3 }, zero_big[3] = { INT64_MAX, INT64_MAX, 0 };
	const struct wd_tensor_info *ti;

	gw_init(&g);
	gw_header(&g, 3, 6, 0);
	gw_tinfo(&g, "a", 1, d16, GG_F32, 0);          /* bytes 0..64 of the data section */
	gw_tinfo(&g, "empty", 2, zero, GG_F32, 32);    /* inside a's bytes: holds none of them */
	gw_tinfo(&g, "empty1", 1, zero0, GG_F16, 64);  /* at the end of the file */
	gw_tinfo(&g, "empty_q", 2, zero_q, GG_Q4_0, 0);
	gw_tinfo(&g, "empty_big", 3, zero_big, GG_F64, 0); /* no overflow: the count is 0 */
	gw_tinfo(&g, "empty_same", 2, zero, GG_F32, 32);
	gw_pad(&g, 32);
	gw_zeros(&g, 64);
	wd_tensor_table_init(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
	assert_int_equal(t.n_tensors, 6);
	ti = find_tensor(&t, "empty");
	assert_non_null(ti);
	assert_int_equal(ti->ndim, 2);
	assert_int_equal(ti->shape[0], 0);
	assert_int_equal(ti->shape[1], 4);
	assert_int_equal(ti->nbytes, 0);
	assert_int_equal(ti->dtype, WD_F32);
	ti = find_tensor(&t, "empty1");
	assert_non_null(ti);
	assert_int_equal(ti->ndim, 1);
	assert_int_equal(ti->shape[0], 0);
	assert_int_equal(ti->nbytes, 0);
	assert_int_equal(ti->offset, g.len);
	ti = find_tensor(&t, "empty_q");
	assert_non_null(ti);
	assert_int_equal(ti->shape[0], 3);
	assert_int_equal(ti->shape[1], 0);
	assert_int_equal(ti->nbytes, 0);
	ti = find_tensor(&t, "empty_big");
	assert_non_null(ti);
	assert_int_equal(ti->shape[0], 0);
	assert_int_equal(ti->shape[2], INT64_MAX);
	assert_int_equal(ti->nbytes, 0);
	wd_tensor_table_free(&t);
	gw_free(&g);

	/* a 0-byte tensor still has to point inside the file */
	one_tensor(&g, "w", 2, zero, GG_F32, 96, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "past the end of the file");
	gw_free(&g);
	/* and at an aligned offset */
	one_tensor(&g, "w", 2, zero, GG_F32, 8, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "not a multiple of the alignment 32");
	gw_free(&g);
}

static void test_row_blocks(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const uint64_t q4_0[2] = { 48, 2 }, q4_k[1] = { 128 }, scalar_q8[1] = { 1 };

	one_tensor(&g, "blk.0.ffn_up.weight", 2, q4_0, GG_Q4_0, 0, 256);
	table_with_sentinel(&t);
	assert_int_equal(parse_with(&g, NULL, &t, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message,
			       "rows of 48 elements, not a whole number of Q4_0 blocks of 32"));
	assert_string_equal(err.tensor, "blk.0.ffn_up.weight");
	assert_int_equal(err.expected, 32);
	assert_int_equal(err.actual, 48);
	wd_tensor_table_free(&t);
	gw_free(&g);

	one_tensor(&g, "w", 1, q4_k, GG_Q4_K, 0, 256);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "Q4_K blocks of 256");
	gw_free(&g);
	/* a 0-d tensor has a row of one element */
	one_tensor(&g, "w", 0, NULL, GG_Q8_0, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "rows of 1 elements");
	gw_free(&g);
	one_tensor(&g, "w", 1, scalar_q8, GG_Q8_0, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "rows of 1 elements");
	gw_free(&g);
}

static void test_data_outside_file(void **state)
{
	(void)state;
	struct gw g;
	const uint64_t d[1] = { 16 };

	/* 64 bytes of F32 but only 32 bytes of data section */
	one_tensor(&g, "w", 1, d, GG_F32, 0, 32);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "past the end of the file");
	gw_free(&g);
	/* an offset past the end */
	one_tensor(&g, "w", 1, d, GG_F32, 1024, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "past the end of the file");
	gw_free(&g);
	/* an offset that overflows when added to the data section's start */
	one_tensor(&g, "w", 1, d, GG_F32, UINT64_MAX - 31, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "past the end of the file");
	gw_free(&g);
}

static void test_overlap(void **state)
{
	(void)state;
	struct gw g;
	const uint64_t d[1] = { 16 }; /* 64 bytes of F32 */

	gw_init(&g);
	gw_header(&g, 3, 3, 0);
	gw_tinfo(&g, "a", 1, d, GG_F32, 0);
	gw_tinfo(&g, "b", 1, d, GG_F32, 128);
	gw_tinfo(&g, "c", 1, d, GG_F32, 32); /* inside a's 64 bytes */
	gw_pad(&g, 32);
	gw_zeros(&g, 256);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "tensor 'c'");
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "overlaps tensor 'a'");
	gw_free(&g);

	/* two tensors at the same offset */
	gw_init(&g);
	gw_header(&g, 3, 2, 0);
	gw_tinfo(&g, "a", 1, d, GG_F32, 64);
	gw_tinfo(&g, "b", 1, d, GG_F32, 64);
	gw_pad(&g, 32);
	gw_zeros(&g, 256);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "overlaps");
	gw_free(&g);

	/* back to back is fine */
	{
		struct wd_tensor_table t;
		weightd_error err;

		gw_init(&g);
		gw_header(&g, 3, 2, 0);
		gw_tinfo(&g, "a", 1, d, GG_F32, 64);
		gw_tinfo(&g, "b", 1, d, GG_F32, 0);
		gw_pad(&g, 32);
		gw_zeros(&g, 128);
		wd_tensor_table_init(&t);
		assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
		wd_tensor_table_free(&t);
		gw_free(&g);
	}
}

static void test_misaligned_offset(void **state)
{
	(void)state;
	struct gw g;
	const uint64_t d[1] = { 4 };

	one_tensor(&g, "w", 1, d, GG_F32, 16, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT,
		    "offset 16, which is not a multiple of the alignment 32");
	gw_free(&g);

	/* 32 is fine by default but not under general.alignment = 64 */
	gw_init(&g);
	gw_header(&g, 3, 1, 1);
	gw_kv_u32(&g, "general.alignment", 64);
	gw_tinfo(&g, "w", 1, d, GG_F32, 32);
	gw_pad(&g, 64);
	gw_zeros(&g, 128);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "not a multiple of the alignment 64");
	gw_free(&g);
}

static void test_tensor_names(void **state)
{
	(void)state;
	struct gw g;
	const uint64_t d[1] = { 4 };
	char long_name[WD_MAX_NAME + 1];

	gw_init(&g);
	gw_header(&g, 3, 2, 0);
	gw_tinfo(&g, "output.weight", 1, d, GG_F32, 0);
	gw_tinfo(&g, "output.weight", 1, d, GG_F32, 32);
	gw_pad(&g, 32);
	gw_zeros(&g, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "tensor 'output.weight' at byte");
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "duplicate");
	gw_free(&g);

	one_tensor(&g, "", 1, d, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "empty name");
	gw_free(&g);

	memset(long_name, 'x', WD_MAX_NAME);
	long_name[WD_MAX_NAME] = '\0';
	one_tensor(&g, long_name, 1, d, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_LIMIT_EXCEEDED, "has a name of 1024 bytes");
	gw_free(&g);

	/* the GGUF spec caps tensor names at 64 bytes */
	long_name[65] = '\0';
	one_tensor(&g, long_name, 1, d, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT,
		    "has a name of 65 bytes; GGUF allows tensor names of at most 64 bytes");
	gw_free(&g);
	{
		struct wd_tensor_table t;
		weightd_error err;

		long_name[64] = '\0';
		one_tensor(&g, long_name, 1, d, GG_F32, 0, 64);
		wd_tensor_table_init(&t);
		assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
		assert_int_equal(strlen(t.tensors[0].name), 64);
		wd_tensor_table_free(&t);
		gw_free(&g);
	}

	gw_init(&g);
	gw_header(&g, 3, 1, 0);
	gw_strn(&g, "a\0b", 3);
	gw_u32(&g, 1);
	gw_u64(&g, 4);
	gw_u32(&g, GG_F32);
	gw_u64(&g, 0);
	gw_pad(&g, 32);
	gw_zeros(&g, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "name with control byte 0x00");
	gw_free(&g);

	one_tensor(&g, "\x1b[2Jw", 1, d, GG_F32, 0, 64);
	expect_fail(&g, WEIGHTD_E_BAD_CHECKPOINT, "name with control byte 0x1b");
	gw_free(&g);

	/* UTF-8 is fine */
	{
		struct wd_tensor_table t;
		weightd_error err;

		one_tensor(&g, "caf\xc3\xa9.weight", 1, d, GG_F32, 0, 64);
		wd_tensor_table_init(&t);
		assert_int_equal(parse_with(&g, NULL, &t, &err), 0);
		assert_string_equal(t.tensors[0].name, "caf\xc3\xa9.weight");
		wd_tensor_table_free(&t);
		gw_free(&g);
	}
}

/* ---- wd_gguf_read ---- */

static int open_written(const struct gw *g, const char *name, char *path, size_t path_len,
			uint64_t *ret_size)
{
	struct stat st;
	int fd;

	snprintf(path, path_len, "%s/%s", tmpdir, name);
	assert_int_equal(gw_save(g, path), 0);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*ret_size = (uint64_t)st.st_size;
	return fd;
}

/* A header bigger than the first read (a 3 MiB chat template) is read by growing the buffer. */
static void test_read_grows(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	const size_t big = 3u << 20;
	char *s = malloc(big + 1), path[512];
	const uint64_t d[2] = { 32, 2 };
	uint64_t size;
	int fd;

	assert_non_null(s);
	memset(s, 'x', big);
	s[big] = '\0';
	gw_init(&g);
	gw_header(&g, 3, 1, 2);
	gw_kv_str(&g, "tokenizer.chat_template", s);
	gw_kv_str(&g, "general.name", "grown");
	gw_tinfo(&g, "w", 2, d, GG_Q8_0, 0);
	gw_pad(&g, 32);
	gw_zeros(&g, 2 * 34);
	fd = open_written(&g, "big.gguf", path, sizeof(path), &size);

	wd_tensor_table_init(&t);
	assert_int_equal(wd_gguf_read(fd, size, 3, NULL, &t, &err), 0);
	assert_int_equal(t.n_meta, 2);
	assert_int_equal(strlen(find_meta(&t, "tokenizer.chat_template")->value), big);
	assert_string_equal(find_meta(&t, "general.name")->value, "grown");
	assert_int_equal(t.n_tensors, 1);
	assert_int_equal(t.tensors[0].nbytes, 68);
	assert_int_equal(t.tensors[0].file, 3);
	assert_int_equal(t.tensors[0].offset, size - 68);
	wd_tensor_table_free(&t);

	/* the same header past max_header_bytes is a limit, not an allocation */
	lim.max_header_bytes = 2u << 20;
	table_with_sentinel(&t);
	assert_int_equal(wd_gguf_read(fd, size, 3, &lim, &t, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "header region passes the limit of 2097152"));
	assert_int_equal(t.n_meta, 1);
	wd_tensor_table_free(&t);

	close(fd);
	unlink(path);
	gw_free(&g);
	free(s);
}

/* A small well-formed file read from disk, and a broken one refused the same way as parsed. */
static void test_read_small(void **state)
{
	(void)state;
	struct gw g;
	struct wd_tensor_table t;
	weightd_error err;
	const struct gw_tensor ts[2] = {
		{ "a", 2, { 256, 2 }, GG_Q4_K, 2 * 144 },
		{ "b", 1, { 7 }, GG_F16, 14 },
	};
	char path[512];
	uint64_t size;
	size_t data_start;
	int fd;

	gw_init(&g);
	gw_file(&g, 0, 2, ts, &data_start);
	fd = open_written(&g, "small.gguf", path, sizeof(path), &size);
	wd_tensor_table_init(&t);
	assert_int_equal(wd_gguf_read(fd, size, 0, NULL, &t, &err), 0);
	assert_int_equal(t.n_tensors, 2);
	assert_int_equal(find_tensor(&t, "a")->offset, data_start);
	assert_int_equal(find_tensor(&t, "b")->offset, data_start + 288);
	wd_tensor_table_free(&t);

	/* a file shorter than the size it was measured at has changed */
	table_with_sentinel(&t);
	assert_int_equal(wd_gguf_read(fd, size + 4096, 0, NULL, &t, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_int_equal(t.n_tensors, 1);
	wd_tensor_table_free(&t);
	close(fd);
	unlink(path);

	gw_patch_u32(&g, 0, 0x58554747); /* "GGUX" */
	fd = open_written(&g, "bad.gguf", path, sizeof(path), &size);
	table_with_sentinel(&t);
	assert_int_equal(wd_gguf_read(fd, size, 0, NULL, &t, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "magic"));
	assert_int_equal(t.n_tensors, 1);
	wd_tensor_table_free(&t);
	close(fd);
	unlink(path);
	gw_free(&g);
}

TEST_MAIN(group_setup, group_teardown, cmocka_unit_test(test_tensor_table),
	  cmocka_unit_test(test_version_2_and_append), cmocka_unit_test(test_custom_alignment),
	  cmocka_unit_test(test_metadata_types), cmocka_unit_test(test_string_with_nul),
	  cmocka_unit_test(test_long_array_text_cut), cmocka_unit_test(test_type_byte_lengths),
	  cmocka_unit_test(test_partial_block_rows), cmocka_unit_test(test_unknown_types),
	  cmocka_unit_test(test_bad_magic), cmocka_unit_test(test_versions),
	  cmocka_unit_test(test_big_endian), cmocka_unit_test(test_truncated),
	  cmocka_unit_test(test_counts_vs_file_size), cmocka_unit_test(test_count_limits),
	  cmocka_unit_test(test_string_lengths), cmocka_unit_test(test_array_lengths),
	  cmocka_unit_test(test_array_depth), cmocka_unit_test(test_value_types),
	  cmocka_unit_test(test_duplicate_keys), cmocka_unit_test(test_bad_alignment),
	  cmocka_unit_test(test_dim_count), cmocka_unit_test(test_zero_and_overflowing_dims),
	  cmocka_unit_test(test_negative_dims), cmocka_unit_test(test_zero_dims),
	  cmocka_unit_test(test_row_blocks), cmocka_unit_test(test_data_outside_file),
	  cmocka_unit_test(test_overlap), cmocka_unit_test(test_misaligned_offset),
	  cmocka_unit_test(test_tensor_names), cmocka_unit_test(test_read_grows),
	  cmocka_unit_test(test_read_small))
