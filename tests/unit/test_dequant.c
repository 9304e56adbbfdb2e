/* test_dequant.c - ggml block decoding checked element by element against values chosen here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dequant.h"
#include "dtype.h"
#include "error.h"

/*
 * The oracle: for each format the test picks scales, mins and quants at random (fixed seed),
 * writes them into a block bit by bit at the position the published format gives each of them
 * ("element k's quant is the 4 bits at bit 8*(2 + k%16) + 4*(k/16)"), and computes the expected
 * value from the picked numbers with the format's formula in double precision. It never reads the
 * block back. The chosen magnitudes keep every intermediate product exact in float, so the decoder
 * must agree to the last bit after the one final rounding both sides do.
 */

#define MAX_ELEMS 256
#define MAX_BYTES 292
#define NBLOCKS 3
#define ROUNDS 200

static uint32_t rng_state = 0x2545f491u;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

/* Write the low n bits of v at bit position pos, least significant bit first. */
static void setbits(uint8_t *p, unsigned pos, unsigned n, uint32_t v)
{
	for (unsigned i = 0; i < n; i++) {
		unsigned b = pos + i;

		if ((v >> i) & 1)
			p[b / 8] |= (uint8_t)(1u << (b % 8));
		else
			p[b / 8] &= (uint8_t)~(1u << (b % 8));
	}
}

/* IEEE binary16 by definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m when e == 0. */
static double half_value(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);

	return s ? -v : v;
}

/* A random finite half (any sign, normal or subnormal). */
static uint16_t rand_half(void)
{
	uint16_t h = (uint16_t)rnd();

	if (((h >> 10) & 31) == 31)
		h &= (uint16_t)~0x4000;
	return h;
}

static uint32_t put_half(uint8_t *b, unsigned byte, uint16_t h)
{
	setbits(b, 8 * byte, 16, h);
	return h;
}

/* The 16 levels IQ4_NL and IQ4_XS index (ggml-common.h, kvalues_iq4nl). */
static const int iq4_level[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
				   1,    13,   25,  38,  53,  69,  89,  113 };

/* OCP E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal. */
static double e2m1(unsigned bits)
{
	unsigned s = bits >> 3, e = (bits >> 1) & 3, m = bits & 1;
	double v = e ? (1.0 + m / 2.0) * ldexp(1.0, (int)e - 1) : m / 2.0;

	return s ? -v : v;
}

/* Byte position of element k's nibble in a 32-element block whose quants start at byte o. */
static unsigned nib32(unsigned o, unsigned k)
{
	return 8 * (o + k % 16) + 4 * (k / 16);
}

static void mk_q4_0(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = rnd() % 16;

		setbits(b, nib32(2, k), 4, q);
		x[k] = d * ((int)q - 8);
	}
}

static void mk_q4_1(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));
	double m = half_value(put_half(b, 2, rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = rnd() % 16;

		setbits(b, nib32(4, k), 4, q);
		x[k] = d * q + m;
	}
}

static void mk_q5_0(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = rnd() % 32;

		setbits(b, nib32(6, k), 4, q & 15);
		setbits(b, 8 * 2 + k, 1, q >> 4); /* bit k of the u32 qh */
		x[k] = d * ((int)q - 16);
	}
}

static void mk_q5_1(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));
	double m = half_value(put_half(b, 2, rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = rnd() % 32;

		setbits(b, nib32(8, k), 4, q & 15);
		setbits(b, 8 * 4 + k, 1, q >> 4);
		x[k] = d * q + m;
	}
}

static void mk_q8_0(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		int q = (int8_t)rnd();

		setbits(b, 8 * (2 + k), 8, (uint8_t)q);
		x[k] = d * q;
	}
}

static void mk_q8_1(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));

	put_half(b, 2, rand_half()); /* s = d * sum(q): not used to decode */
	for (unsigned k = 0; k < 32; k++) {
		int q = (int8_t)rnd();

		setbits(b, 8 * (4 + k), 8, (uint8_t)q);
		x[k] = d * q;
	}
}

/*
 * Q2_K and Q3_K quants: element k = 128n + 32j + r (r < 32) sits in byte 32n + r of the quant
 * area, at bit 2j. Sub-block (16 elements) i = k / 16.
 */
static unsigned k2_pos(unsigned area, unsigned k)
{
	return 8 * (area + 32 * (k / 128) + k % 32) + 2 * ((k % 128) / 32);
}

static void mk_q2_k(uint8_t *b, double *x)
{
	unsigned sc[16], mn[16];
	double d = half_value(put_half(b, 80, rand_half()));
	double dmin = half_value(put_half(b, 82, rand_half()));

	for (unsigned i = 0; i < 16; i++) {
		sc[i] = rnd() % 16;
		mn[i] = rnd() % 16;
		setbits(b, 8 * i, 4, sc[i]);
		setbits(b, 8 * i + 4, 4, mn[i]);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned q = rnd() % 4;

		setbits(b, k2_pos(16, k), 2, q);
		x[k] = d * sc[k / 16] * q - dmin * mn[k / 16];
	}
}

static void mk_q3_k(uint8_t *b, double *x)
{
	unsigned sc[16];
	double d = half_value(put_half(b, 108, rand_half()));

	for (unsigned i = 0; i < 16; i++) {
		sc[i] = rnd() % 64; /* stored as value + 32 */
		setbits(b, i < 8 ? 8 * (96 + i) : 8 * (96 + i - 8) + 4, 4, sc[i] & 15);
		setbits(b, 8 * (104 + i % 4) + 2 * (i / 4), 2, sc[i] >> 4);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned q = rnd() % 8; /* stored as value + 4 */

		setbits(b, k2_pos(32, k), 2, q & 3);
		setbits(b, 8 * (k % 32) + k / 32, 1, q >> 2); /* hmask */
		x[k] = d * ((int)sc[k / 16] - 32) * ((int)q - 4);
	}
}

/*
 * Q4_K/Q5_K's 6-bit scale and min of sub-block s (32 elements) in the 12 scale bytes at `o`:
 * s < 4: scale in bits 0-5 of byte s, min in bits 0-5 of byte s + 4; s >= 4: low 4 bits in byte
 * s + 4 (scale low nibble, min high nibble), top 2 bits in bits 6-7 of byte s - 4 (scale) and
 * byte s (min).
 */
static void put_scale_min(uint8_t *b, unsigned o, unsigned s, unsigned sc, unsigned mn)
{
	if (s < 4) {
		setbits(b, 8 * (o + s), 6, sc);
		setbits(b, 8 * (o + s + 4), 6, mn);
	} else {
		setbits(b, 8 * (o + s + 4), 4, sc & 15);
		setbits(b, 8 * (o + s + 4) + 4, 4, mn & 15);
		setbits(b, 8 * (o + s - 4) + 6, 2, sc >> 4);
		setbits(b, 8 * (o + s) + 6, 2, mn >> 4);
	}
}

static void mk_q4_k(uint8_t *b, double *x)
{
	unsigned sc[8], mn[8];
	double d = half_value(put_half(b, 0, rand_half()));
	double dmin = half_value(put_half(b, 2, rand_half()));

	for (unsigned s = 0; s < 8; s++) {
		sc[s] = rnd() % 64;
		mn[s] = rnd() % 64;
		put_scale_min(b, 4, s, sc[s], mn[s]);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned s = k / 32, q = rnd() % 16;

		/* sub-blocks 2p and 2p+1 share bytes 32p..32p+32: low then high nibble */
		setbits(b, 8 * (16 + 32 * (s / 2) + k % 32) + 4 * (s % 2), 4, q);
		x[k] = d * sc[s] * q - dmin * mn[s];
	}
}

static void mk_q5_k(uint8_t *b, double *x)
{
	unsigned sc[8], mn[8];
	double d = half_value(put_half(b, 0, rand_half()));
	double dmin = half_value(put_half(b, 2, rand_half()));

	for (unsigned s = 0; s < 8; s++) {
		sc[s] = rnd() % 64;
		mn[s] = rnd() % 64;
		put_scale_min(b, 4, s, sc[s], mn[s]);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned s = k / 32, q = rnd() % 32;

		setbits(b, 8 * (48 + 32 * (s / 2) + k % 32) + 4 * (s % 2), 4, q & 15);
		setbits(b, 8 * (16 + k % 32) + s, 1, q >> 4); /* qh: bit s of byte k % 32 */
		x[k] = d * sc[s] * q - dmin * mn[s];
	}
}

/*
 * Q6_K: element k = 128n + 32c + l (l < 32): low 4 bits in byte 64n + l + 32(c % 2) of ql,
 * low nibble for c < 2, high for c >= 2; top 2 bits at bit 2c of byte 32n + l of qh.
 */
static void mk_q6_k(uint8_t *b, double *x)
{
	int sc[16];
	double d = half_value(put_half(b, 208, rand_half()));

	for (unsigned i = 0; i < 16; i++) {
		sc[i] = (int8_t)rnd();
		setbits(b, 8 * (192 + i), 8, (uint8_t)sc[i]);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned n = k / 128, c = (k % 128) / 32, l = k % 32, q = rnd() % 64;

		setbits(b, 8 * (64 * n + l + 32 * (c % 2)) + 4 * (c / 2), 4, q & 15);
		setbits(b, 8 * (128 + 32 * n + l) + 2 * c, 2, q >> 4);
		x[k] = d * sc[k / 16] * ((int)q - 32);
	}
}

static void mk_q8_k(uint8_t *b, double *x)
{
	/* a random normal float scale */
	uint32_t bits = (rnd() & 0x807fffffu) | (uint32_t)(100 + rnd() % 55) << 23;
	float d;

	memcpy(&d, &bits, sizeof(d));
	setbits(b, 0, 32, bits);
	for (unsigned k = 0; k < 256; k++) {
		int q = (int8_t)rnd();

		setbits(b, 8 * (4 + k), 8, (uint8_t)q);
		x[k] = (double)d * q;
	}
	for (unsigned i = 0; i < 16; i++) /* bsums: not used to decode */
		setbits(b, 8 * (260 + 2 * i), 16, rnd());
}

static void mk_iq4_nl(uint8_t *b, double *x)
{
	double d = half_value(put_half(b, 0, rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = rnd() % 16;

		setbits(b, nib32(2, k), 4, q);
		x[k] = d * iq4_level[q];
	}
}

/* IQ4_XS: sub-block ib's 6-bit scale: low 4 bits at bit 32 + 4ib, high 2 at bit 16 + 2ib. */
static void mk_iq4_xs(uint8_t *b, double *x)
{
	unsigned ls[8];
	double d = half_value(put_half(b, 0, rand_half()));

	for (unsigned ib = 0; ib < 8; ib++) {
		ls[ib] = rnd() % 64;
		setbits(b, 32 + 4 * ib, 4, ls[ib] & 15);
		setbits(b, 16 + 2 * ib, 2, ls[ib] >> 4);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned q = rnd() % 16;

		setbits(b, nib32(8 + 16 * (k / 32), k % 32), 4, q);
		x[k] = d * ((int)ls[k / 32] - 32) * iq4_level[q];
	}
}

static void mk_mxfp4(uint8_t *b, double *x)
{
	unsigned e = rnd() % 256;

	setbits(b, 0, 8, e);
	for (unsigned k = 0; k < 32; k++) {
		unsigned q = rnd() % 16;

		setbits(b, nib32(1, k), 4, q);
		x[k] = e2m1(q) * ldexp(1.0, (int)e - 127);
	}
}

/* Block geometry stated from the block structs, independent of dtype.c. */
static const struct fmt {
	const char *name;
	enum wd_dtype type;
	unsigned elems, bytes;
	void (*make)(uint8_t *b, double *x);
} fmts[] = {
	{ "Q4_0", WD_Q4_0, 32, 18, mk_q4_0 },
	{ "Q4_1", WD_Q4_1, 32, 20, mk_q4_1 },
	{ "Q5_0", WD_Q5_0, 32, 22, mk_q5_0 },
	{ "Q5_1", WD_Q5_1, 32, 24, mk_q5_1 },
	{ "Q8_0", WD_Q8_0, 32, 34, mk_q8_0 },
	{ "Q8_1", WD_Q8_1, 32, 36, mk_q8_1 },
	{ "Q2_K", WD_Q2_K, 256, 84, mk_q2_k },
	{ "Q3_K", WD_Q3_K, 256, 110, mk_q3_k },
	{ "Q4_K", WD_Q4_K, 256, 144, mk_q4_k },
	{ "Q5_K", WD_Q5_K, 256, 176, mk_q5_k },
	{ "Q6_K", WD_Q6_K, 256, 210, mk_q6_k },
	{ "Q8_K", WD_Q8_K, 256, 292, mk_q8_k },
	{ "IQ4_NL", WD_IQ4_NL, 32, 18, mk_iq4_nl },
	{ "IQ4_XS", WD_IQ4_XS, 256, 136, mk_iq4_xs },
	{ "MXFP4", WD_MXFP4, 32, 17, mk_mxfp4 },
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
			assert_true(y[0] == (float)half_value((uint16_t)h));
			assert_true(!signbit(y[0]) == !signbit(half_value((uint16_t)h)));
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
		assert_int_equal(wd_dequant_f32(no[i], b, 1, y), -WD_E_UNSUPPORTED_CAST);
	}
	/* zero blocks is nothing to do */
	assert_int_equal(wd_dequant_f32(WD_Q4_0, b, 0, y), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q4_0),
		cmocka_unit_test(test_q4_1),
		cmocka_unit_test(test_q5_0),
		cmocka_unit_test(test_q5_1),
		cmocka_unit_test(test_q8_0),
		cmocka_unit_test(test_q8_1),
		cmocka_unit_test(test_q2_k),
		cmocka_unit_test(test_q3_k),
		cmocka_unit_test(test_q4_k),
		cmocka_unit_test(test_q5_k),
		cmocka_unit_test(test_q6_k),
		cmocka_unit_test(test_q8_k),
		cmocka_unit_test(test_iq4_nl),
		cmocka_unit_test(test_iq4_xs),
		cmocka_unit_test(test_mxfp4),
		cmocka_unit_test(test_geometry_matches_table),
		cmocka_unit_test(test_q4_0_by_hand),
		cmocka_unit_test(test_q4_k_by_hand),
		cmocka_unit_test(test_every_half_scale),
		cmocka_unit_test(test_mxfp4_extremes),
		cmocka_unit_test(test_unsupported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
