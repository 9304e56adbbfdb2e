/* SPDX-License-Identifier: Apache-2.0 */
/* float_ref.h - reference decoding and rounding of the small float formats, written for the tests
 * from the format definitions, independent of weightd's conversion kernels. */
#ifndef WD_TEST_FLOAT_REF_H
#define WD_TEST_FLOAT_REF_H

/*
 * Header-only (static inline). Decoding goes through double and ldexp, so it is exact; rounding
 * to a narrower format uses the IEEE 754 rule (nearest, ties to even) on the exact value.
 *
 * - F8_E4M3 (OCP "E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 is
 *   subnormal (m/8 * 2^-6); S.1111.111 is NaN; there is no infinity (largest 448).
 * - F8_E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; exponent 0 is subnormal
 *   (m/4 * 2^-14); exponent 31 is infinity (m = 0) or NaN.
 * - F16: 1, 5 (bias 15), 10; BF16: the top 16 bits of an F32.
 */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline float ref_f32_from_bits(uint32_t b)
{
	float f;

	memcpy(&f, &b, 4);
	return f;
}

static inline uint32_t ref_f32_bits(float f)
{
	uint32_t b;

	memcpy(&b, &f, 4);
	return b;
}

/* A small float with `eb` exponent bits (bias 2^(eb-1) - 1) and `mb` mantissa bits. inf_nan:
 * whether the top exponent means inf/NaN (else only all-ones is NaN, as E4M3FN). */
static inline float ref_small_decode(uint32_t bits, int eb, int mb, bool inf_nan)
{
	int bias = (1 << (eb - 1)) - 1;
	uint32_t s = bits >> (eb + mb), e = (bits >> mb) & ((1u << eb) - 1), m = bits & ((1u << mb) - 1);
	double v;

	if (inf_nan && e == (1u << eb) - 1)
		v = m ? NAN : INFINITY;
	else if (!inf_nan && e == (1u << eb) - 1 && m == (1u << mb) - 1)
		v = NAN;
	else if (e == 0)
		v = ldexp((double)m, 1 - bias - mb);
	else
		v = ldexp((double)((1u << mb) | m), (int)e - bias - mb);
	return (float)(s ? -v : v);
}

static inline float ref_e4m3(uint8_t b)
{
	return ref_small_decode(b, 4, 3, false);
}

static inline float ref_e5m2(uint8_t b)
{
	return ref_small_decode(b, 5, 2, true);
}

static inline float ref_f16(uint16_t h)
{
	return ref_small_decode(h, 5, 10, true);
}

static inline float ref_bf16(uint16_t b)
{
	return ref_f32_from_bits((uint32_t)b << 16);
}

/* F32 -> BF16, nearest even on the 16 bits dropped; NaN -> a quiet NaN with the sign kept. */
static inline uint16_t ref_to_bf16(float f)
{
	uint32_t b = ref_f32_bits(f), up = b >> 16, rem = b & 0xffff;

	if (isnan(f))
		return (uint16_t)(up | 0x40);
	if (rem > 0x8000 || (rem == 0x8000 && (up & 1)))
		up++;
	return (uint16_t)up;
}

/* F32 -> F16, nearest even on the exact value (subnormals kept, overflow to infinity). */
static inline uint16_t ref_to_f16(float f)
{
	uint16_t s = signbit(f) ? 0x8000 : 0;
	double a = fabs((double)f), q;
	int e;

	if (isnan(f))
		return (uint16_t)(s | 0x7e00);
	if (a >= 65520.0)                       /* halfway between 65504 and 2^16 rounds up */
		return (uint16_t)(s | 0x7c00);
	if (a < ldexp(1.0, -14)) {              /* subnormal: units of 2^-24 */
		q = nearbyint(a * ldexp(1.0, 24)); /* the default mode: ties to even */
		return (uint16_t)(s | (uint16_t)q); /* 1024 becomes the smallest normal, as it should */
	}
	frexp(a, &e);                           /* a = f * 2^e, f in [0.5, 1) */
	e -= 1;                                 /* a in [2^e, 2^(e+1)) */
	q = nearbyint(ldexp(a, 10 - e));        /* 1024 .. 2048 */
	if (q == 2048.0) {
		q = 1024.0;
		e++;
	}
	if (e > 15)
		return (uint16_t)(s | 0x7c00);
	return (uint16_t)(s | (uint16_t)((e + 15) << 10) | (uint16_t)((uint32_t)q - 1024));
}

#endif
