/* SPDX-License-Identifier: Apache-2.0 */
/* test_dequant.c - ggml block decoding checked element by element against values chosen here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dequant.h"
#include "dtype.h"
#include "error.h"
#include "quant_ref.h"

/*
 * The oracle is tests/common/quant_ref.h: random picks written into blocks where the published
 * format puts them, and the values the format's formula gives for them. It never reads a block.
 */

#define MAX_ELEMS QR_MAX_ELEMS
#define MAX_BYTES QR_MAX_BYTES
#define NBLOCKS 3
#define ROUNDS 200

/* Each reference format with weightd's dtype for it. */
static const struct fmt {
	const char *name;
	enum wd_dtype type;
	unsigned elems, bytes;
	void (*make)(uint8_t *b, double *x);
} fmts[] = {
	{ "Q4_0", WD_Q4_0, 32, 18, qr_mk_q4_0 },
	{ "Q4_1", WD_Q4_1, 32, 20, qr_mk_q4_1 },
	{ "Q5_0", WD_Q5_0, 32, 22, qr_mk_q5_0 },
	{ "Q5_1", WD_Q5_1, 32, 24, qr_mk_q5_1 },
	{ "Q8_0", WD_Q8_0, 32, 34, qr_mk_q8_0 },
	{ "Q8_1", WD_Q8_1, 32, 36, qr_mk_q8_1 },
	{ "Q2_K", WD_Q2_K, 256, 84, qr_mk_q2_k },
	{ "Q3_K", WD_Q3_K, 256, 110, qr_mk_q3_k },
	{ "Q4_K", WD_Q4_K, 256, 144, qr_mk_q4_k },
	{ "Q5_K", WD_Q5_K, 256, 176, qr_mk_q5_k },
	{ "Q6_K", WD_Q6_K, 256, 210, qr_mk_q6_k },
	{ "Q8_K", WD_Q8_K, 256, 292, qr_mk_q8_k },
	{ "IQ4_NL", WD_IQ4_NL, 32, 18, qr_mk_iq4_nl },
	{ "IQ4_XS", WD_IQ4_XS, 256, 136, qr_mk_iq4_xs },
	{ "MXFP4", WD_MXFP4, 32, 17, qr_mk_mxfp4 },
};

/* Decode NBLOCKS random blocks of one format at a time, ROUNDS times, against the picks. */
static void check_format(const struct fmt *f)
{
	uint8_t blocks[NBLOCKS * MAX_BYTES];
	double want[NBLOCKS * MAX_ELEMS];
	float got[NBLOCKS * MAX_ELEMS + 1];

	assert_true(f->bytes <= MAX_BYTES && f->elems <= MAX_ELEMS);
	assert_true(wd_dequant_supported(f->type));
	for (int round = 0; round < ROUNDS; round++) {
		memset(blocks, 0xa5, sizeof(blocks));
		for (unsigned i = 0; i < NBLOCKS; i++)
			f->make(blocks + i * f->bytes, want + i * f->elems);
		got[NBLOCKS * f->elems] = 12345.0f; /* nothing is written past the end */
		assert_int_equal(wd_dequant_f32(f->type, blocks, NBLOCKS, got), 0);
		for (unsigned k = 0; k < NBLOCKS * f->elems; k++) {
			float w = (float)want[k];

			if (got[k] != w) {
				print_error("%s round %d block %u element %u: got %.9g, want %.9g\n",
					    f->name, round, k / f->elems, k % f->elems,
					    (double)got[k], (double)w);
				fail();
			}
		}
		assert_true(got[NBLOCKS * f->elems] == 12345.0f);
	}
}

static void test_q4_0(void **s) { (void)s; check_format(&fmts[0]); }
static void test_q4_1(void **s) { (void)s; check_format(&fmts[1]); }
static void test_q5_0(void **s) { (void)s; check_format(&fmts[2]); }
static void test_q5_1(void **s) { (void)s; check_format(&fmts[3]); }
static void test_q8_0(void **s) { (void)s; check_format(&fmts[4]); }
static void test_q8_1(void **s) { (void)s; check_format(&fmts[5]); }
static void test_q2_k(void **s) { (void)s; check_format(&fmts[6]); }
static void test_q3_k(void **s) { (void)s; check_format(&fmts[7]); }
static void test_q4_k(void **s) { (void)s; check_format(&fmts[8]); }
static void test_q5_k(void **s) { (void)s; check_format(&fmts[9]); }
static void test_q6_k(void **s) { (void)s; check_format(&fmts[10]); }
static void test_q8_k(void **s) { (void)s; check_format(&fmts[11]); }
static void test_iq4_nl(void **s) { (void)s; check_format(&fmts[12]); }
static void test_iq4_xs(void **s) { (void)s; check_format(&fmts[13]); }
static void test_mxfp4(void **s) { (void)s; check_format(&fmts[14]); }

/* The block sizes stated above agree with the dtype table the reader sizes tensors by. */
static void test_geometry_matches_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		const struct wd_dtype_info *di = wd_dtype_info(fmts[i].type);

		assert_non_null(di);
		assert_string_equal(di->name, fmts[i].name);
		assert_int_equal(di->block_elems, fmts[i].elems);
		assert_int_equal(di->block_bytes, fmts[i].bytes);
	}
}

/* Worked by hand: one Q4_0 block with d = 1.0. */
static void test_q4_0_by_hand(void **state)
{
	(void)state;
	uint8_t b[18] = { 0x00, 0x3c }; /* d = 1.0 (f16 0x3c00) */
	float y[32];

	b[2] = 0x21;  /* element 0 = 1 - 8, element 16 = 2 - 8 */
	b[17] = 0xf0; /* element 15 = 0 - 8, element 31 = 15 - 8 */
	for (int j = 3; j < 17; j++)
		b[j] = 0x88; /* zeros */
	assert_int_equal(wd_dequant_f32(WD_Q4_0, b, 1, y), 0);
	assert_true(y[0] == -7.0f);
	assert_true(y[16] == -6.0f);
	assert_true(y[15] == -8.0f);
	assert_true(y[31] == 7.0f);
	for (int j = 1; j < 15; j++) {
		assert_true(y[j] == 0.0f);
		assert_true(y[j + 16] == 0.0f);
	}
}

/* Worked by hand: a Q4_K block whose sub-block 4 takes its scale's top bits from byte 0. */
static void test_q4_k_by_hand(void **state)
{
	(void)state;
	uint8_t b[144] = { 0 };
	float y[256];

	b[0] = 0x00; b[1] = 0x3c; /* d = 1.0 */
	b[2] = 0x00; b[3] = 0x38; /* dmin = 0.5 */
	b[4 + 0] = 1 | 1 << 6;    /* scale 0 = 1; bit 6 = bit 4 of scale 4 */
	b[4 + 4] = 2;             /* min 0 = 2 */
	b[4 + 8] = 3;             /* scale 4 low bits = 3, min 4 low bits = 0 */
	b[16 + 0] = 0x07;         /* element 0: q = 7 (sub-block 0), element 32: q = 0 */
	b[16 + 64] = 0x05;        /* element 128: q = 5 (sub-block 4) */
	assert_int_equal(wd_dequant_f32(WD_Q4_K, b, 1, y), 0);
	assert_true(y[0] == 1.0f * 1 * 7 - 0.5f * 2);  /* 6 */
	assert_true(y[1] == -1.0f);                     /* q = 0 */
	assert_true(y[32] == 0.0f);                     /* scale 1 = min 1 = 0 */
	assert_true(y[128] == (3 + 16) * 5.0f);         /* 95 */
	assert_true(y[129] == 0.0f);
}

/* Every f16 scale widens exactly: all 65536 patterns through Q8_0 with q = 1. */
static void test_every_half_scale(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		uint8_t b[34] = { (uint8_t)h, (uint8_t)(h >> 8), 1 };
		float y[32];
		int e = (h >> 10) & 31, m = h & 1023;

		assert_int_equal(wd_dequant_f32(WD_Q8_0, b, 1, y), 0);
		if (e == 31 && m) {
			assert_true(isnan(y[0]));
		} else if (e == 31) {
			assert_true(isinf(y[0]));
			assert_true((y[0] < 0) == (h >> 15));
		} else {
			assert_true(y[0] == (float)qr_half_value((uint16_t)h));
			assert_true(!signbit(y[0]) == !signbit(qr_half_value((uint16_t)h)));
		}
	}
}

/* MXFP4 at the ends of the E8M0 range: 2^-127 up to 2^127, and 2^128 for e = 255 (as in ggml). */
static void test_mxfp4_extremes(void **state)
{
	(void)state;
	uint8_t b[17] = { 0 };
	float y[32];

	b[1] = 0x71; /* element 0: 0.5, element 16: 6 */
	b[2] = 0x02; /* element 1: 1.0, element 17: 0 */
	b[0] = 0;
	assert_int_equal(wd_dequant_f32(WD_MXFP4, b, 1, y), 0);
	assert_true(y[0] == ldexpf(1.0f, -128));
	assert_true(y[1] == ldexpf(1.0f, -127));
	assert_true(y[16] == 6.0f * ldexpf(1.0f, -127));
	assert_true(y[17] == 0.0f);
	b[0] = 254;
	assert_int_equal(wd_dequant_f32(WD_MXFP4, b, 1, y), 0);
	assert_true(y[0] == ldexpf(1.0f, 126));
	assert_true(y[1] == ldexpf(1.0f, 127));
	assert_true(isinf(y[16])); /* 6 * 2^127 is past FLT_MAX */
	b[0] = 255;
	assert_int_equal(wd_dequant_f32(WD_MXFP4, b, 1, y), 0);
	assert_true(y[0] == ldexpf(1.0f, 127));
	assert_true(isinf(y[1]));
}

static void test_unsupported(void **state)
{
	(void)state;
	static const enum wd_dtype no[] = { WD_F32, WD_F16, WD_BF16, WD_IQ2_XXS, WD_IQ1_M,
					    WD_TQ1_0, WD_DTYPE_INVALID, WD_DTYPE_COUNT };
	uint8_t b[256] = { 0 };
	float y[256];

	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		assert_false(wd_dequant_supported(no[i]));
		assert_int_equal(wd_dequant_f32(no[i], b, 1, y), -WEIGHTD_E_UNSUPPORTED_CAST);
	}
	/* zero blocks is nothing to do */
	assert_int_equal(wd_dequant_f32(WD_Q4_0, b, 0, y), 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_q4_0), cmocka_unit_test(test_q4_1),
	  cmocka_unit_test(test_q5_0), cmocka_unit_test(test_q5_1), cmocka_unit_test(test_q8_0),
	  cmocka_unit_test(test_q8_1), cmocka_unit_test(test_q2_k), cmocka_unit_test(test_q3_k),
	  cmocka_unit_test(test_q4_k), cmocka_unit_test(test_q5_k), cmocka_unit_test(test_q6_k),
	  cmocka_unit_test(test_q8_k), cmocka_unit_test(test_iq4_nl), cmocka_unit_test(test_iq4_xs),
	  cmocka_unit_test(test_mxfp4), cmocka_unit_test(test_geometry_matches_table),
	  cmocka_unit_test(test_q4_0_by_hand), cmocka_unit_test(test_q4_k_by_hand),
	  cmocka_unit_test(test_every_half_scale), cmocka_unit_test(test_mxfp4_extremes),
	  cmocka_unit_test(test_unsupported))
