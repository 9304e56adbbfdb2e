/* SPDX-License-Identifier: Apache-2.0 */
/* test_golden_gguf.c - a GGUF file written, quantized and decoded by ggml itself, read by weightd. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "dequant.h"
#include "dtype.h"
#include "error.h"
#include "source.h"

/*
 * tests/fixtures/golden/gguf-ggml/ (its README says how it was made): oracle.gguf from ggml's
 * writer, and ggml's own F32 decoding of each tensor. Nothing here is derived from weightd's
 * tables: the ggml type numbers and block sizes below are ggml's (ggml.h, ggml-common.h), and the
 * F16/BF16 roundings are computed here from the reference floats.
 */

#define ROWS 8
#define ROW 512
#define ELEMS (ROWS * ROW)
#define ALIGN 32
#define DATA_START 1632 /* header end (byte 1606) rounded up to the alignment */

static const struct golden {
	const char *type;
	uint32_t ggml_type;
	uint32_t block_elems, block_bytes;
	enum wd_dtype dtype;
	int decoded; /* ggml ships a decoder and weightd has one */
} types[] = {
	{ "Q4_0", 2, 32, 18, WD_Q4_0, 1 },
	{ "Q4_1", 3, 32, 20, WD_Q4_1, 1 },
	{ "Q5_0", 6, 32, 22, WD_Q5_0, 1 },
	{ "Q5_1", 7, 32, 24, WD_Q5_1, 1 },
	{ "Q8_0", 8, 32, 34, WD_Q8_0, 1 },
	{ "Q8_1", 9, 32, 36, WD_Q8_1, 1 },
	{ "Q2_K", 10, 256, 84, WD_Q2_K, 1 },
	{ "Q3_K", 11, 256, 110, WD_Q3_K, 1 },
	{ "Q4_K", 12, 256, 144, WD_Q4_K, 1 },
	{ "Q5_K", 13, 256, 176, WD_Q5_K, 1 },
	{ "Q6_K", 14, 256, 210, WD_Q6_K, 1 },
	{ "Q8_K", 15, 256, 292, WD_Q8_K, 1 },
	{ "IQ4_NL", 20, 32, 18, WD_IQ4_NL, 1 },
	{ "IQ4_XS", 23, 256, 136, WD_IQ4_XS, 1 },
	{ "MXFP4", 39, 32, 17, WD_MXFP4, 1 },
	{ "IQ2_XXS", 16, 256, 66, WD_IQ2_XXS, 0 },
	{ "TQ2_0", 35, 256, 66, WD_TQ2_0, 0 },
};
#define N_TYPES (sizeof(types) / sizeof(types[0]))
#define N_DECODED 15

/* The file's tensors in file order: t_<TYPE> for every type, then r_<TYPE> for the decoded ones. */
struct want {
	char name[32];
	const struct golden *g;
	char ref[32]; /* reference file name */
	uint64_t offset, nbytes;
};

static struct want wants[N_TYPES + N_DECODED];
static size_t n_wants;
static char dir[4096];
static struct wd_source *src;
static uint8_t *file;
static size_t file_len;

static uint8_t *slurp(const char *name, size_t *ret_len)
{
	char path[4200];
	FILE *f;
	uint8_t *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*ret_len = (size_t)n;
	return buf;
}

static int setup(void **state)
{
	const char *d = getenv("WD_GOLDEN_GGUF_DIR");
	const char *s = getenv("WD_SOURCE_DIR");
	weightd_error err;
	uint64_t off = 0;

	(void)state;
	if (d)
		snprintf(dir, sizeof(dir), "%s", d);
	else
		snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/gguf-ggml", s ? s : ".");
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < N_TYPES; i++) {
			struct want *w = &wants[n_wants];

			if (pass == 1 && !types[i].decoded)
				continue;
			w->g = &types[i];
			snprintf(w->name, sizeof(w->name), "%c_%s", pass ? 'r' : 't', types[i].type);
			snprintf(w->ref, sizeof(w->ref), "ref_%s%s.f32", pass ? "R" : "", types[i].type);
			w->nbytes = (uint64_t)ELEMS / types[i].block_elems * types[i].block_bytes;
			w->offset = DATA_START + off;
			off += (w->nbytes + ALIGN - 1) / ALIGN * ALIGN;
			n_wants++;
		}
	}
	file = slurp("oracle.gguf", &file_len);
	if (!file) {
		fprintf(stderr, "cannot read %s/oracle.gguf\n", dir);
		return -1;
	}
	{
		char path[4200];

		snprintf(path, sizeof(path), "%s/oracle.gguf", dir);
		wd_error_clear(&err);
		if (wd_source_open("oracle", path, NULL, &src, &err)) {
			fprintf(stderr, "%s\n", err.message);
			return -1;
		}
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	wd_source_free(src);
	free(file);
	return 0;
}

/* ggml's tensor table, as describe reports it: names, types, row-major shapes, byte lengths. */
static void tensor_table_matches_ggml(void **state)
{
	const struct wd_meta *m;
	size_t found = 0;

	(void)state;
	assert_int_equal(wd_source_kind(src), WD_SOURCE_GGUF);
	assert_int_equal(wd_source_tensor_count(src), n_wants);
	assert_int_equal(n_wants, 32);
	assert_int_equal(wd_source_bytes(src) > 0, 1);
	for (size_t i = 0; i < n_wants; i++) {
		const struct want *w = &wants[i];
		const struct wd_tensor_info *t = wd_source_find(src, w->name);

		assert_non_null(t);
		assert_string_equal(wd_dtype_name(t->dtype), w->g->type);
		assert_int_equal(t->dtype, w->g->dtype);
		assert_int_equal(wd_dtype_from_ggml(w->g->ggml_type), w->g->dtype);
		/* ggml ne = [512, 8] is the row-major shape [8, 512] */
		assert_int_equal(t->ndim, 2);
		assert_int_equal(t->shape[0], ROWS);
		assert_int_equal(t->shape[1], ROW);
		assert_int_equal(t->nbytes, w->nbytes);
		assert_int_equal(t->offset, w->offset);
		assert_int_equal(t->file, 0);
	}
	/* the last tensor ends where ggml's writer ended the file */
	assert_int_equal(wants[n_wants - 1].offset + wants[n_wants - 1].nbytes, file_len);
	for (size_t i = 0; i < wd_source_meta_count(src); i++) {
		m = wd_source_meta(src, i);
		if (strcmp(m->key, "general.architecture") == 0) {
			assert_string_equal(m->value, "llama");
			assert_string_equal(m->type, "string");
			found++;
		} else if (strcmp(m->key, "general.name") == 0) {
			assert_string_equal(m->value, "ggml dequant oracle");
			found++;
		}
	}
	assert_int_equal(found, 2);
	assert_int_equal(wd_source_meta_count(src), 2);
}

/* Each tensor's packed bytes (kept as stored) are the file's bytes at its offset. */
static void packed_bytes_are_the_files(void **state)
{
	(void)state;
	for (size_t i = 0; i < n_wants; i++) {
		const struct want *w = &wants[i];
		weightd_error err;
		uint8_t *buf = malloc(w->nbytes);

		assert_non_null(buf);
		wd_error_clear(&err);
		assert_int_equal(wd_source_pread(src, 0, buf, w->nbytes, w->offset, &err), 0);
		assert_memory_equal(buf, file + w->offset, w->nbytes);
		free(buf);
	}
}

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* Round to nearest even from F32 bits to BF16 (non-NaN). */
static uint16_t rne_bf16(uint32_t b)
{
	return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* Round to nearest even from a finite or infinite F32 to F16 (non-NaN), by exact scaling. */
static uint16_t rne_f16(float f)
{
	uint16_t sign = (uint16_t)(f32_bits(f) >> 31 << 15);
	double a = fabs((double)f), m;
	int e;

	if (a >= 65520.0) /* the halfway point between 65504 and 2^16 ties to the even code, inf */
		return sign | 0x7c00;
	if (a < 0x1p-14) /* subnormal (or the smallest normal, when it rounds up to 1024) */
		return sign | (uint16_t)rint(a * 0x1p24);
	e = ilogb(a);
	m = rint(ldexp(a, 10 - e));
	if (m == 2048.0) {
		m = 1024.0;
		e++;
	}
	return sign | (uint16_t)((e + 15) << 10) | (uint16_t)(m - 1024.0);
}

/* Decode `w` whole, and again in uneven runs of blocks, and compare to ggml's F32 bit for bit. */
static void check_f32(const struct want *w, const float *ref, float *got)
{
	const uint8_t *blocks = file + w->offset;
	size_t nblocks = ELEMS / w->g->block_elems, bytes = w->g->block_bytes, be = w->g->block_elems;

	memset(got, 0xa5, ELEMS * sizeof(float));
	assert_int_equal(wd_dequant_f32(w->g->dtype, blocks, nblocks, got), 0);
	for (size_t i = 0; i < ELEMS; i++)
		if (f32_bits(got[i]) != f32_bits(ref[i]))
			fail_msg("%s element %zu (row %zu): weightd %08x, ggml %08x", w->name, i, i / ROW,
				 f32_bits(got[i]), f32_bits(ref[i]));
	memset(got, 0xa5, ELEMS * sizeof(float));
	for (size_t b = 0, k = 1; b < nblocks; b += k, k = k % 5 + 1) {
		size_t run = k < nblocks - b ? k : nblocks - b;

		assert_int_equal(wd_dequant_f32(w->g->dtype, blocks + b * bytes, run, got + b * be), 0);
	}
	assert_memory_equal(got, ref, ELEMS * sizeof(float));
}

/* The cast to F16 and BF16: round to nearest even of ggml's value; NaN keeps sign, stays NaN. */
static void check_half(const struct want *w, const float *ref, const float *f32)
{
	static uint16_t h[ELEMS], bf[ELEMS];

	wd_convert(WD_F32, f32, WD_F16, h, ELEMS);
	wd_convert(WD_F32, f32, WD_BF16, bf, ELEMS);
	for (size_t i = 0; i < ELEMS; i++) {
		uint32_t b = f32_bits(ref[i]);

		if (isnan(ref[i])) {
			/* ggml canonicalizes NaN: compare by class (and sign, which weightd keeps) */
			if ((h[i] & 0x7c00) != 0x7c00 || !(h[i] & 0x3ff) || (h[i] >> 15) != (b >> 31))
				fail_msg("%s element %zu: F16 %04x for NaN %08x", w->name, i, h[i], b);
			if ((bf[i] & 0x7f80) != 0x7f80 || !(bf[i] & 0x7f) || (bf[i] >> 15) != (b >> 31))
				fail_msg("%s element %zu: BF16 %04x for NaN %08x", w->name, i, bf[i], b);
			continue;
		}
		if (h[i] != rne_f16(ref[i]))
			fail_msg("%s element %zu: F16 %04x, want %04x (from %08x)", w->name, i, h[i],
				 rne_f16(ref[i]), b);
		if (bf[i] != rne_bf16(b))
			fail_msg("%s element %zu: BF16 %04x, want %04x (from %08x)", w->name, i, bf[i],
				 rne_bf16(b), b);
	}
}

/*
 * Every other target a quantized tensor can be cast to goes through the decoded F32 values: the
 * result must be the F32 conversion of ggml's values (for F64, exactly them).
 */
static void check_other_targets(const struct want *w, const float *ref, const float *f32)
{
	static uint8_t got[ELEMS * 8], want_b[ELEMS * 8];

	for (int t = 0; t < WD_DTYPE_COUNT; t++) {
		size_t n;

		if (t == WD_F32 || t == WD_F16 || t == WD_BF16 || !wd_dtype_is_element((enum wd_dtype)t) ||
		    !wd_convert_supported(WD_F32, (enum wd_dtype)t))
			continue;
		n = ELEMS * wd_dtype_size((enum wd_dtype)t);
		assert_true(n <= sizeof(got));
		wd_convert(WD_F32, f32, (enum wd_dtype)t, got, ELEMS);
		wd_convert_scalar(WD_F32, ref, (enum wd_dtype)t, want_b, ELEMS);
		if (memcmp(got, want_b, n) != 0)
			fail_msg("%s cast to %s differs from the conversion of ggml's values", w->name,
				 wd_dtype_name((enum wd_dtype)t));
		if (t == WD_F64)
			for (size_t i = 0; i < ELEMS; i++) {
				double d;

				memcpy(&d, got + 8 * i, 8);
				assert_true(isnan(ref[i]) ? isnan(d) : d == (double)ref[i]);
			}
	}
}

static void every_cast_matches_ggml(void **state)
{
	static float ref[ELEMS], got[ELEMS];
	size_t checked = 0;

	(void)state;
	for (size_t i = 0; i < n_wants; i++) {
		const struct want *w = &wants[i];
		size_t len = 0;
		uint8_t *r;

		if (!w->g->decoded) {
			/* ggml ships no decoder for these, and weightd says it has none */
			assert_false(wd_dequant_supported(w->g->dtype));
			assert_int_equal(wd_dequant_f32(w->g->dtype, file + w->offset, 1, got),
					 -WEIGHTD_E_UNSUPPORTED_CAST);
			continue;
		}
		assert_true(wd_dequant_supported(w->g->dtype));
		r = slurp(w->ref, &len);
		assert_non_null(r);
		assert_int_equal(len, sizeof(ref));
		memcpy(ref, r, sizeof(ref)); /* little-endian F32, as this host */
		free(r);
		check_f32(w, ref, got);
		check_half(w, ref, got);
		check_other_targets(w, ref, got);
		checked++;
	}
	assert_int_equal(checked, 2 * N_DECODED);
}

/* The reference files themselves hold what the README says: NaN, inf and subnormal scales. */
static void references_cover_special_values(void **state)
{
	static float ref[ELEMS];
	int nan = 0, inf = 0, sub = 0;

	(void)state;
	for (size_t i = 0; i < n_wants; i++) {
		size_t len = 0;
		uint8_t *r;

		if (!wants[i].g->decoded || wants[i].name[0] != 'r')
			continue;
		r = slurp(wants[i].ref, &len);
		assert_non_null(r);
		memcpy(ref, r, sizeof(ref));
		free(r);
		for (size_t k = 0; k < ELEMS; k++) {
			nan += isnan(ref[k]) != 0;
			inf += isinf(ref[k]) != 0;
			sub += fpclassify(ref[k]) == FP_SUBNORMAL;
		}
	}
	assert_true(nan > 0);
	assert_true(inf > 0);
	assert_true(sub > 0);
}

int main(void)
{
	const uint16_t one = 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tensor_table_matches_ggml),
		cmocka_unit_test(packed_bytes_are_the_files),
		cmocka_unit_test(every_cast_matches_ggml),
		cmocka_unit_test(references_cover_special_values),
	};

	if (*(const uint8_t *)&one != 1) {
		fprintf(stderr, "the golden references are little-endian F32\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
