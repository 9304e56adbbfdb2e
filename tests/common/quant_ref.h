/* SPDX-License-Identifier: Apache-2.0 */
/* quant_ref.h - reference ggml quantized blocks for tests: each maker picks scales, mins and
 * quants at random, writes them into a block bit by bit where the published format puts them, and
 * returns the values the format's formula gives for the picks. Header-only, independent of
 * src/dequant.c: it never decodes a block. */
#ifndef WD_TEST_QUANT_REF_H
#define WD_TEST_QUANT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/*
 * The oracle: for each format a maker picks scales, mins and quants at random (a fixed-seed
 * xorshift, so runs repeat), writes them into a block bit by bit at the position the published
 * format gives each of them ("element k's quant is the 4 bits at bit 8*(2 + k%16) + 4*(k/16)"),
 * and computes the expected value from the picked numbers with the format's formula in double
 * precision. The chosen magnitudes keep every intermediate product exact in float, so a decoder
 * must agree to the last bit after the one final rounding to F32 both sides do.
 */

static uint32_t qr_rng_state = 0x2545f491u;

static inline uint32_t qr_rnd(void)
{
	qr_rng_state ^= qr_rng_state << 13;
	qr_rng_state ^= qr_rng_state >> 17;
	qr_rng_state ^= qr_rng_state << 5;
	return qr_rng_state;
}

/* Write the low n bits of v at bit position pos, least significant bit first. */
static inline void qr_setbits(uint8_t *p, unsigned pos, unsigned n, uint32_t v)
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
static inline double qr_half_value(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);

	return s ? -v : v;
}

/* A random finite half (any sign, normal or subnormal). */
static inline uint16_t qr_rand_half(void)
{
	uint16_t h = (uint16_t)qr_rnd();

	if (((h >> 10) & 31) == 31)
		h &= (uint16_t)~0x4000;
	return h;
}

static inline uint32_t qr_put_half(uint8_t *b, unsigned byte, uint16_t h)
{
	qr_setbits(b, 8 * byte, 16, h);
	return h;
}

/* The 16 levels IQ4_NL and IQ4_XS index (ggml-common.h, kvalues_iq4nl). */
static const int qr_iq4_level[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
				   1,    13,   25,  38,  53,  69,  89,  113 };

/* OCP E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal. */
static inline double qr_e2m1(unsigned bits)
{
	unsigned s = bits >> 3, e = (bits >> 1) & 3, m = bits & 1;
	double v = e ? (1.0 + m / 2.0) * ldexp(1.0, (int)e - 1) : m / 2.0;

	return s ? -v : v;
}

/* Byte position of element k's nibble in a 32-element block whose quants start at byte o. */
static inline unsigned qr_nib32(unsigned o, unsigned k)
{
	return 8 * (o + k % 16) + 4 * (k / 16);
}

static inline void qr_mk_q4_0(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = qr_rnd() % 16;

		qr_setbits(b, qr_nib32(2, k), 4, q);
		x[k] = d * ((int)q - 8);
	}
}

static inline void qr_mk_q4_1(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));
	double m = qr_half_value(qr_put_half(b, 2, qr_rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = qr_rnd() % 16;

		qr_setbits(b, qr_nib32(4, k), 4, q);
		x[k] = d * q + m;
	}
}

static inline void qr_mk_q5_0(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = qr_rnd() % 32;

		qr_setbits(b, qr_nib32(6, k), 4, q & 15);
		qr_setbits(b, 8 * 2 + k, 1, q >> 4); /* bit k of the u32 qh */
		x[k] = d * ((int)q - 16);
	}
}

static inline void qr_mk_q5_1(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));
	double m = qr_half_value(qr_put_half(b, 2, qr_rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = qr_rnd() % 32;

		qr_setbits(b, qr_nib32(8, k), 4, q & 15);
		qr_setbits(b, 8 * 4 + k, 1, q >> 4);
		x[k] = d * q + m;
	}
}

static inline void qr_mk_q8_0(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		int q = (int8_t)qr_rnd();

		qr_setbits(b, 8 * (2 + k), 8, (uint8_t)q);
		x[k] = d * q;
	}
}

static inline void qr_mk_q8_1(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));

	qr_put_half(b, 2, qr_rand_half()); /* s = d * sum(q): not used to decode */
	for (unsigned k = 0; k < 32; k++) {
		int q = (int8_t)qr_rnd();

		qr_setbits(b, 8 * (4 + k), 8, (uint8_t)q);
		x[k] = d * q;
	}
}

/*
 * Q2_K and Q3_K quants: element k = 128n + 32j + r (r < 32) sits in byte 32n + r of the quant
 * area, at bit 2j. Sub-block (16 elements) i = k / 16.
 */
static inline unsigned qr_k2_pos(unsigned area, unsigned k)
{
	return 8 * (area + 32 * (k / 128) + k % 32) + 2 * ((k % 128) / 32);
}

static inline void qr_mk_q2_k(uint8_t *b, double *x)
{
	unsigned sc[16], mn[16];
	double d = qr_half_value(qr_put_half(b, 80, qr_rand_half()));
	double dmin = qr_half_value(qr_put_half(b, 82, qr_rand_half()));

	for (unsigned i = 0; i < 16; i++) {
		sc[i] = qr_rnd() % 16;
		mn[i] = qr_rnd() % 16;
		qr_setbits(b, 8 * i, 4, sc[i]);
		qr_setbits(b, 8 * i + 4, 4, mn[i]);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned q = qr_rnd() % 4;

		qr_setbits(b, qr_k2_pos(16, k), 2, q);
		x[k] = d * sc[k / 16] * q - dmin * mn[k / 16];
	}
}

static inline void qr_mk_q3_k(uint8_t *b, double *x)
{
	unsigned sc[16];
	double d = qr_half_value(qr_put_half(b, 108, qr_rand_half()));

	for (unsigned i = 0; i < 16; i++) {
		sc[i] = qr_rnd() % 64; /* stored as value + 32 */
		qr_setbits(b, i < 8 ? 8 * (96 + i) : 8 * (96 + i - 8) + 4, 4, sc[i] & 15);
		qr_setbits(b, 8 * (104 + i % 4) + 2 * (i / 4), 2, sc[i] >> 4);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned q = qr_rnd() % 8; /* stored as value + 4 */

		qr_setbits(b, qr_k2_pos(32, k), 2, q & 3);
		qr_setbits(b, 8 * (k % 32) + k / 32, 1, q >> 2); /* hmask */
		x[k] = d * ((int)sc[k / 16] - 32) * ((int)q - 4);
	}
}

/*
 * Q4_K/Q5_K's 6-bit scale and min of sub-block s (32 elements) in the 12 scale bytes at `o`:
 * s < 4: scale in bits 0-5 of byte s, min in bits 0-5 of byte s + 4; s >= 4: low 4 bits in byte
 * s + 4 (scale low nibble, min high nibble), top 2 bits in bits 6-7 of byte s - 4 (scale) and
 * byte s (min).
 */
static inline void qr_put_scale_min(uint8_t *b, unsigned o, unsigned s, unsigned sc, unsigned mn)
{
	if (s < 4) {
		qr_setbits(b, 8 * (o + s), 6, sc);
		qr_setbits(b, 8 * (o + s + 4), 6, mn);
	} else {
		qr_setbits(b, 8 * (o + s + 4), 4, sc & 15);
		qr_setbits(b, 8 * (o + s + 4) + 4, 4, mn & 15);
		qr_setbits(b, 8 * (o + s - 4) + 6, 2, sc >> 4);
		qr_setbits(b, 8 * (o + s) + 6, 2, mn >> 4);
	}
}

/* The super-block header of Q4_K and Q5_K: random d and dmin (halves at bytes 0 and 2) and eight
 * 6-bit scales and mins packed from byte 4; their values in sc, mn, *d, *dmin. */
static inline void qr_k_scales(uint8_t *b, unsigned sc[8], unsigned mn[8], double *d,
			       double *dmin)
{
	*d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));
	*dmin = qr_half_value(qr_put_half(b, 2, qr_rand_half()));
	for (unsigned s = 0; s < 8; s++) {
		sc[s] = qr_rnd() % 64;
		mn[s] = qr_rnd() % 64;
		qr_put_scale_min(b, 4, s, sc[s], mn[s]);
	}
}

static inline void qr_mk_q4_k(uint8_t *b, double *x)
{
	unsigned sc[8], mn[8];
	double d, dmin;

	qr_k_scales(b, sc, mn, &d, &dmin);
	for (unsigned k = 0; k < 256; k++) {
		unsigned s = k / 32, q = qr_rnd() % 16;

		/* sub-blocks 2p and 2p+1 share bytes 32p..32p+32: low then high nibble */
		qr_setbits(b, 8 * (16 + 32 * (s / 2) + k % 32) + 4 * (s % 2), 4, q);
		x[k] = d * sc[s] * q - dmin * mn[s];
	}
}

static inline void qr_mk_q5_k(uint8_t *b, double *x)
{
	unsigned sc[8], mn[8];
	double d, dmin;

	qr_k_scales(b, sc, mn, &d, &dmin);
	for (unsigned k = 0; k < 256; k++) {
		unsigned s = k / 32, q = qr_rnd() % 32;

		qr_setbits(b, 8 * (48 + 32 * (s / 2) + k % 32) + 4 * (s % 2), 4, q & 15);
		qr_setbits(b, 8 * (16 + k % 32) + s, 1, q >> 4); /* qh: bit s of byte k % 32 */
		x[k] = d * sc[s] * q - dmin * mn[s];
	}
}

/*
 * Q6_K: element k = 128n + 32c + l (l < 32): low 4 bits in byte 64n + l + 32(c % 2) of ql,
 * low nibble for c < 2, high for c >= 2; top 2 bits at bit 2c of byte 32n + l of qh.
 */
static inline void qr_mk_q6_k(uint8_t *b, double *x)
{
	int sc[16];
	double d = qr_half_value(qr_put_half(b, 208, qr_rand_half()));

	for (unsigned i = 0; i < 16; i++) {
		sc[i] = (int8_t)qr_rnd();
		qr_setbits(b, 8 * (192 + i), 8, (uint8_t)sc[i]);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned n = k / 128, c = (k % 128) / 32, l = k % 32, q = qr_rnd() % 64;

		qr_setbits(b, 8 * (64 * n + l + 32 * (c % 2)) + 4 * (c / 2), 4, q & 15);
		qr_setbits(b, 8 * (128 + 32 * n + l) + 2 * c, 2, q >> 4);
		x[k] = d * sc[k / 16] * ((int)q - 32);
	}
}

static inline void qr_mk_q8_k(uint8_t *b, double *x)
{
	/* a random normal float scale */
	uint32_t bits = (qr_rnd() & 0x807fffffu) | (uint32_t)(100 + qr_rnd() % 55) << 23;
	float d;

	memcpy(&d, &bits, sizeof(d));
	qr_setbits(b, 0, 32, bits);
	for (unsigned k = 0; k < 256; k++) {
		int q = (int8_t)qr_rnd();

		qr_setbits(b, 8 * (4 + k), 8, (uint8_t)q);
		x[k] = (double)d * q;
	}
	for (unsigned i = 0; i < 16; i++) /* bsums: not used to decode */
		qr_setbits(b, 8 * (260 + 2 * i), 16, qr_rnd());
}

static inline void qr_mk_iq4_nl(uint8_t *b, double *x)
{
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));

	for (unsigned k = 0; k < 32; k++) {
		unsigned q = qr_rnd() % 16;

		qr_setbits(b, qr_nib32(2, k), 4, q);
		x[k] = d * qr_iq4_level[q];
	}
}

/* IQ4_XS: sub-block ib's 6-bit scale: low 4 bits at bit 32 + 4ib, high 2 at bit 16 + 2ib. */
static inline void qr_mk_iq4_xs(uint8_t *b, double *x)
{
	unsigned ls[8];
	double d = qr_half_value(qr_put_half(b, 0, qr_rand_half()));

	for (unsigned ib = 0; ib < 8; ib++) {
		ls[ib] = qr_rnd() % 64;
		qr_setbits(b, 32 + 4 * ib, 4, ls[ib] & 15);
		qr_setbits(b, 16 + 2 * ib, 2, ls[ib] >> 4);
	}
	for (unsigned k = 0; k < 256; k++) {
		unsigned q = qr_rnd() % 16;

		qr_setbits(b, qr_nib32(8 + 16 * (k / 32), k % 32), 4, q);
		x[k] = d * ((int)ls[k / 32] - 32) * qr_iq4_level[q];
	}
}

static inline void qr_mk_mxfp4(uint8_t *b, double *x)
{
	unsigned e = qr_rnd() % 256;

	qr_setbits(b, 0, 8, e);
	for (unsigned k = 0; k < 32; k++) {
		unsigned q = qr_rnd() % 16;

		qr_setbits(b, qr_nib32(1, k), 4, q);
		x[k] = qr_e2m1(q) * ldexp(1.0, (int)e - 127);
	}
}

/* One format: ggml's name and type number, block geometry stated from the block structs
 * (ggml-common.h), and its maker. */
struct qr_fmt {
	const char *name;
	uint32_t ggml_type;
	unsigned elems, bytes;
	void (*make)(uint8_t *b, double *x);
};

#define QR_MAX_ELEMS 256
#define QR_MAX_BYTES 292

static const struct qr_fmt qr_fmts[] = {
	{ "Q4_0", 2, 32, 18, qr_mk_q4_0 },
	{ "Q4_1", 3, 32, 20, qr_mk_q4_1 },
	{ "Q5_0", 6, 32, 22, qr_mk_q5_0 },
	{ "Q5_1", 7, 32, 24, qr_mk_q5_1 },
	{ "Q8_0", 8, 32, 34, qr_mk_q8_0 },
	{ "Q8_1", 9, 32, 36, qr_mk_q8_1 },
	{ "Q2_K", 10, 256, 84, qr_mk_q2_k },
	{ "Q3_K", 11, 256, 110, qr_mk_q3_k },
	{ "Q4_K", 12, 256, 144, qr_mk_q4_k },
	{ "Q5_K", 13, 256, 176, qr_mk_q5_k },
	{ "Q6_K", 14, 256, 210, qr_mk_q6_k },
	{ "Q8_K", 15, 256, 292, qr_mk_q8_k },
	{ "IQ4_NL", 20, 32, 18, qr_mk_iq4_nl },
	{ "IQ4_XS", 23, 256, 136, qr_mk_iq4_xs },
	{ "MXFP4", 39, 32, 17, qr_mk_mxfp4 },
};

#define QR_NFMTS (sizeof(qr_fmts) / sizeof(qr_fmts[0]))

/* The format named `name`, or NULL. */
static inline const struct qr_fmt *qr_fmt_named(const char *name)
{
	for (size_t i = 0; i < QR_NFMTS; i++)
		if (strcmp(qr_fmts[i].name, name) == 0)
			return &qr_fmts[i];
	return NULL;
}

#endif
