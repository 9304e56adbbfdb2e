/* SPDX-License-Identifier: Apache-2.0 */
/* test_convert.c - dtype casts (src/convert.c) against oracles computed another way. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "convert.h"
#include "dtype.h"
#include "error.h"

/*
 * Oracles used here, none of which share code with src/convert.c:
 * - the F16C instructions (VCVTPH2PS / VCVTSS2SH) for f16 <-> f32, and the C compiler's own
 *   float <-> double casts;
 * - a value oracle: each float format's codes decoded from their bit fields by the textbook formula
 *   (sign, biased exponent, implicit bit, subnormals) in long double, and rounding defined as IEEE
 *   754 defines it: the nearest representable value found by binary search over the codes, a tie
 *   going to the code whose last significand bit is 0, magnitudes at or past the midpoint between
 *   the largest finite value and the next power of the (unbounded) format overflowing;
 * - literal expected values for the special rules (FP8 overflow as PyTorch, NaN payloads,
 *   integer saturation and wrap-around).
 */

_Static_assert(LDBL_MANT_DIG >= 64, "the value oracle needs long double to hold any int64 exactly");

/* ---- deterministic random numbers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1Dull;
}

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint64_t d2u(double d)
{
	uint64_t u;
	memcpy(&u, &d, 8);
	return u;
}

static double u2d(uint64_t u)
{
	double d;
	memcpy(&d, &u, 8);
	return d;
}

/* ---- the value oracle ---- */

struct tfmt {
	enum wd_dtype t;
	int ebits, mbits, bias;
	int fn;        /* E4M3FN: no inf; only S.1111.111 is NaN */
	int fp8;       /* PyTorch FP8 rule: NaN encodes as S.all-ones */
};

static const struct tfmt tfmts[] = {
	{ WD_F64, 11, 52, 1023, 0, 0 }, { WD_F32, 8, 23, 127, 0, 0 }, { WD_F16, 5, 10, 15, 0, 0 },
	{ WD_BF16, 8, 7, 127, 0, 0 },   { WD_F8_E4M3, 4, 3, 7, 1, 1 }, { WD_F8_E5M2, 5, 2, 15, 0, 1 },
};

static const struct tfmt *tfmt(enum wd_dtype t)
{
	for (size_t i = 0; i < sizeof(tfmts) / sizeof(tfmts[0]); i++)
		if (tfmts[i].t == t)
			return &tfmts[i];
	return NULL;
}

static int is_signed_type(enum wd_dtype t)
{
	return t == WD_I8 || t == WD_I16 || t == WD_I32 || t == WD_I64;
}

static uint64_t mmask(const struct tfmt *f) { return (1ull << f->mbits) - 1; }
static uint64_t emaxf(const struct tfmt *f) { return (1ull << f->ebits) - 1; }
static uint64_t sign_of(const struct tfmt *f) { return 1ull << (f->ebits + f->mbits); }
static uint64_t infcode(const struct tfmt *f) { return emaxf(f) << f->mbits; }

static int t_isnan(const struct tfmt *f, uint64_t c)
{
	uint64_t e = (c >> f->mbits) & emaxf(f), m = c & mmask(f);
	if (f->fn)
		return e == emaxf(f) && m == mmask(f);
	return e == emaxf(f) && m != 0;
}

static int t_isinf(const struct tfmt *f, uint64_t c)
{
	return !f->fn && ((c >> f->mbits) & emaxf(f)) == emaxf(f) && (c & mmask(f)) == 0;
}

/* Magnitude of a code by the textbook formula; no special cases (used for finite codes and for
 * the "next" code just past the largest finite one, as an unbounded format would have it). */
static long double t_mag(const struct tfmt *f, uint64_t c)
{
	uint64_t e = (c >> f->mbits) & emaxf(f), m = c & mmask(f);
	if (e == 0)
		return ldexpl((long double)m, 1 - f->bias - f->mbits);
	return ldexpl((long double)(m + (1ull << f->mbits)), (int)e - f->bias - f->mbits);
}

static uint64_t t_maxfin(const struct tfmt *f)
{
	return f->fn ? infcode(f) + mmask(f) - 1 : infcode(f) - 1;
}

static uint64_t t_overflow(const struct tfmt *f)
{
	return f->fn ? infcode(f) | mmask(f) : infcode(f);
}

/* Round a magnitude x >= 0 to format f per IEEE 754 round-to-nearest-even (see file comment). */
static uint64_t t_round(const struct tfmt *f, long double x)
{
	uint64_t lo = 0, hi = t_maxfin(f), c, next;
	long double mid;

	if (x >= t_mag(f, hi + 1))
		return t_overflow(f);
	/* largest code with magnitude <= x */
	while (lo < hi) {
		uint64_t m = lo + (hi - lo + 1) / 2;
		if (t_mag(f, m) <= x)
			lo = m;
		else
			hi = m - 1;
	}
	c = lo;
	if (t_mag(f, c) == x)
		return c;
	next = c + 1;
	mid = (t_mag(f, c) + t_mag(f, next)) / 2;
	if (x > mid || (x == mid && (next & 1) == 0))
		c = next;
	return c > t_maxfin(f) ? t_overflow(f) : c;
}

/* What a source element is, in the oracle's terms. */
struct tval {
	int nan, inf, neg;
	long double mag;   /* finite magnitude */
	uint64_t frac;     /* NaN: the source fraction bits */
	int fbits;         /* NaN: how many */
	uint64_t ibits;    /* integer sources: two's-complement bits, sign-extended */
};

static uint64_t get_raw(const void *p, size_t size)
{
	uint8_t a; uint16_t b; uint32_t c; uint64_t d;
	switch (size) {
	case 1: memcpy(&a, p, 1); return a;
	case 2: memcpy(&b, p, 2); return b;
	case 4: memcpy(&c, p, 4); return c;
	default: memcpy(&d, p, 8); return d;
	}
}

static struct tval t_source(enum wd_dtype t, uint64_t raw)
{
	struct tval v = { 0, 0, 0, 0, 0, 0, 0 };
	const struct tfmt *f = tfmt(t);

	if (f) {
		v.neg = (raw & sign_of(f)) != 0;
		if (t_isnan(f, raw)) {
			v.nan = 1;
			v.frac = raw & mmask(f);
			v.fbits = f->mbits;
		} else if (t_isinf(f, raw)) {
			v.inf = 1;
		} else {
			v.mag = t_mag(f, raw & ~sign_of(f));
		}
		return v;
	}
	switch (t) {
	case WD_BOOL: v.ibits = raw != 0; break;
	case WD_I8: v.ibits = (uint64_t)(int64_t)(int8_t)raw; break;
	case WD_I16: v.ibits = (uint64_t)(int64_t)(int16_t)raw; break;
	case WD_I32: v.ibits = (uint64_t)(int64_t)(int32_t)raw; break;
	default: v.ibits = raw; break;
	}
	if (is_signed_type(t) && (int64_t)v.ibits < 0) {
		v.neg = 1;
		v.mag = -(long double)(int64_t)v.ibits;
	} else {
		v.mag = (long double)v.ibits;
	}
	return v;
}

/* The expected bits of casting one element. */
static uint64_t t_cast(enum wd_dtype from, uint64_t raw, enum wd_dtype to)
{
	struct tval v = t_source(from, raw);
	const struct tfmt *f = tfmt(to);
	size_t ds = wd_dtype_size(to);
	unsigned bits = (unsigned)ds * 8;

	if (f) {
		uint64_t sign = v.neg ? sign_of(f) : 0;
		if (v.nan) {
			uint64_t fr;
			if (f->fp8)
				return sign | infcode(f) | mmask(f);
			/* the source fraction's top bits, then the quiet bit */
			fr = v.fbits >= f->mbits ? v.frac >> (v.fbits - f->mbits)
						 : v.frac << (f->mbits - v.fbits);
			return sign | infcode(f) | fr | (1ull << (f->mbits - 1));
		}
		if (v.inf)
			return sign | t_overflow(f);
		return sign | t_round(f, v.mag);
	}
	if (to == WD_BOOL)
		return v.nan || v.inf || v.mag != 0;
	if (!tfmt(from)) /* int -> int: low bits of the two's-complement value */
		return bits == 64 ? v.ibits : v.ibits & ((1ull << bits) - 1);
	/* float -> int: truncate, saturate, NaN -> 0 */
	{
		long double t = truncl(v.mag);
		long double top = ldexpl(1, is_signed_type(to) ? (int)bits - 1 : (int)bits);
		uint64_t r;
		if (v.nan)
			return 0;
		if (!is_signed_type(to)) {
			if (v.neg && (v.inf || t > 0))
				return 0;
			if (v.inf || t >= top)
				r = bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
			else
				r = (uint64_t)t;
			return r;
		}
		if (v.inf || (!v.neg && t >= top) || (v.neg && t > top))
			r = v.neg ? (uint64_t)0 - (uint64_t)(1ull << (bits - 1))
				  : (1ull << (bits - 1)) - 1;
		else
			r = v.neg ? (uint64_t)0 - (uint64_t)t : (uint64_t)t;
		return bits == 64 ? r : r & ((1ull << bits) - 1);
	}
}

static const enum wd_dtype all_types[] = {
	WD_BOOL, WD_U8, WD_I8, WD_U16, WD_I16, WD_F16, WD_BF16, WD_U32, WD_I32, WD_F32,
	WD_U64, WD_I64, WD_F64, WD_F8_E4M3, WD_F8_E5M2,
};
#define NTYPES (sizeof(all_types) / sizeof(all_types[0]))

/* A random element of type t, biased toward interesting values (specials, edges, ties). */
static uint64_t interesting(enum wd_dtype t)
{
	const struct tfmt *f = tfmt(t);
	uint64_t r = rnd(), pick = rnd() % 8;
	size_t size = wd_dtype_size(t);
	uint64_t mask = size == 8 ? UINT64_MAX : (1ull << (size * 8)) - 1;

	if (!f) {
		static const uint64_t edges[] = { 0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000,
						  0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
						  0x7FFFFFFFFFFFFFFF, 0x8000000000000000, UINT64_MAX };
		if (pick < 3)
			return edges[r % (sizeof(edges) / sizeof(edges[0]))] & mask;
		if (pick < 5) /* small magnitudes, either sign */
			return (rnd() & 1 ? (uint64_t)0 - (r % 2000) : r % 2000) & mask;
		return r & mask;
	}
	switch (pick) {
	case 0: /* specials: zeros, inf, NaNs with payloads */
		return (r & sign_of(f)) | (r % 2 ? infcode(f) | (r >> 8 & mmask(f)) : 0);
	case 1: /* subnormals */
		return (r & sign_of(f)) | (r >> 3 & mmask(f));
	case 2: /* low bits forming a tie or near-tie for a narrower format */
		return (r & ~0xFFFFull & mask) | (0x8000 >> (r % 16)) | (rnd() % 3 == 0);
	default:
		return r & mask;
	}
}

/* ---- tests ---- */

static void test_supported(void **state)
{
	(void)state;
	for (size_t i = 0; i < NTYPES; i++)
		for (size_t j = 0; j < NTYPES; j++)
			assert_true(wd_convert_supported(all_types[i], all_types[j]));
	assert_false(wd_convert_supported(WD_Q4_0, WD_F32));
	assert_false(wd_convert_supported(WD_F32, WD_Q8_0));
	assert_false(wd_convert_supported(WD_DTYPE_INVALID, WD_F32));
	assert_false(wd_convert_supported(WD_F32, WD_DTYPE_COUNT));
}

/* The oracle itself, pinned to values anyone can check by hand. */
static void test_oracle_anchors(void **state)
{
	(void)state;
	const struct tfmt *e4 = tfmt(WD_F8_E4M3), *e5 = tfmt(WD_F8_E5M2), *h = tfmt(WD_F16);
	assert_true(t_mag(e4, 0x7E) == 448.0L);
	assert_true(t_mag(e4, 0x38) == 1.0L);
	assert_true(t_mag(e4, 0x08) == 0x1p-6L);
	assert_true(t_mag(e4, 0x01) == 0x1p-9L);
	assert_true(t_mag(e4, 0x7F) == 480.0L); /* the would-be next value: 464 is the midpoint */
	assert_true(t_mag(e5, 0x7B) == 57344.0L);
	assert_true(t_mag(e5, 0x3C) == 1.0L);
	assert_true(t_mag(e5, 0x04) == 0x1p-14L);
	assert_true(t_mag(e5, 0x01) == 0x1p-16L);
	assert_true(t_mag(h, 0x7BFF) == 65504.0L);
	assert_true(t_mag(h, 0x0001) == 0x1p-24L);
	assert_int_equal(t_round(h, 65519.0L), 0x7BFF);
	assert_int_equal(t_round(h, 65520.0L), 0x7C00);
	assert_int_equal(t_round(e4, 464.0L), 0x7E);
	assert_int_equal(t_round(e4, 465.0L), 0x7F);
	assert_int_equal(t_round(e5, 61440.0L), 0x7C);
	assert_true(t_isnan(e4, 0xFF) && !t_isnan(e4, 0x7E) && !t_isinf(e4, 0x78));
	assert_true(t_isnan(e5, 0x7D) && t_isinf(e5, 0xFC));
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static float hw_h2f(uint16_t h)
{
	return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) static uint16_t hw_f2h(float f)
{
	return (uint16_t)_cvtss_sh(f, 0);
}

static int have_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)); /* CPUID.1:ECX.F16C */
}
#else
static float hw_h2f(uint16_t h) { (void)h; return 0; }
static uint16_t hw_f2h(float f) { (void)f; return 0; }
static int have_f16c(void) { return 0; }
#endif

/* All 65536 f16 codes -> f32, against the F16C instruction. */
static void test_f16_to_f32_vs_f16c(void **state)
{
	(void)state;
	uint16_t *h = malloc(65536 * 2);
	uint32_t *a = malloc(65536 * 4), *b = malloc(65536 * 4);

	assert_non_null(h);
	assert_non_null(a);
	assert_non_null(b);
	if (!have_f16c()) {
		print_message("skipped: this CPU has no F16C\n");
		free(h), free(a), free(b);
		skip();
	}
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	wd_convert(WD_F16, h, WD_F32, a, 65536);
	wd_convert_scalar(WD_F16, h, WD_F32, b, 65536);
	for (uint32_t i = 0; i < 65536; i++) {
		uint32_t want = f2u(hw_h2f((uint16_t)i));
		if (a[i] != want || b[i] != want || f2u(wd_f16_to_f32((uint16_t)i)) != want)
			fail_msg("f16 %04x: want %08x, wd_convert %08x, scalar %08x", i, want, a[i], b[i]);
	}
	free(h), free(a), free(b);
}

/* f32 bit patterns that stress f16 rounding: every f16 value, every midpoint and its neighbours
 * (ties both ways), the subnormal and overflow edges, a sweep over all exponents, random bits. */
static size_t f16_stress_inputs(uint32_t *u, size_t cap)
{
	size_t n = 0;

	for (uint32_t c = 0; c < 0x7C00 && n + 14 <= cap; c++) {
		float v = (float)t_mag(tfmt(WD_F16), c);
		float mid = (float)((t_mag(tfmt(WD_F16), c) + t_mag(tfmt(WD_F16), c + 1)) / 2);
		for (int d = -2; d <= 2; d++) {
			u[n++] = f2u(mid) + (uint32_t)d;
			u[n++] = (f2u(mid) + (uint32_t)d) | 0x80000000u;
		}
		u[n++] = f2u(v);
		u[n++] = f2u(v) + 1;
		u[n++] = f2u(v) | 0x80000000u;
		u[n++] = f2u(v) - (c ? 1 : 0);
	}
	for (uint64_t x = 0; x < 0x100000000ull && n < cap; x += 4093) /* a sweep over all patterns */
		u[n++] = (uint32_t)x;
	while (n < cap)
		u[n++] = (uint32_t)rnd();
	return n;
}

static void test_f32_to_f16_vs_f16c(void **state)
{
	(void)state;
	size_t cap = 2000000, n;
	uint32_t *u = malloc(cap * 4);
	uint16_t *a = malloc(cap * 2), *b = malloc(cap * 2);

	assert_non_null(u);
	assert_non_null(a);
	assert_non_null(b);
	if (!have_f16c()) {
		print_message("skipped: this CPU has no F16C\n");
		free(u), free(a), free(b);
		skip();
	}
	n = f16_stress_inputs(u, cap);
	wd_convert(WD_F32, u, WD_F16, a, n);
	wd_convert_scalar(WD_F32, u, WD_F16, b, n);
	for (size_t i = 0; i < n; i++) {
		uint16_t want = hw_f2h(u2f(u[i]));
		if (a[i] != want || b[i] != want || wd_f32_to_f16(u2f(u[i])) != want)
			fail_msg("f32 %08x: want %04x, wd_convert %04x, scalar %04x", u[i], want, a[i],
				 b[i]);
	}
	free(u), free(a), free(b);
}

/* The same f16 cases against the value oracle, so they are checked without F16C too. */
static void test_f16_value_oracle(void **state)
{
	(void)state;
	size_t cap = 1500000, n;
	uint32_t *u = malloc(cap * 4);
	uint16_t *h = malloc(cap * 2);
	uint32_t *w = malloc(65536 * 4);
	uint16_t all[65536];

	assert_non_null(u);
	assert_non_null(h);
	assert_non_null(w);
	n = f16_stress_inputs(u, cap);
	wd_convert_scalar(WD_F32, u, WD_F16, h, n);
	for (size_t i = 0; i < n; i++)
		if (h[i] != t_cast(WD_F32, u[i], WD_F16))
			fail_msg("f32 %08x -> f16 %04x, want %04x", u[i], h[i],
				 (unsigned)t_cast(WD_F32, u[i], WD_F16));
	for (uint32_t i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	wd_convert_scalar(WD_F16, all, WD_F32, w, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		if (w[i] != t_cast(WD_F16, i, WD_F32))
			fail_msg("f16 %04x -> f32 %08x, want %08x", i, w[i],
				 (unsigned)t_cast(WD_F16, i, WD_F32));
	/* literal edges */
	assert_int_equal(wd_f32_to_f16(65504.0f), 0x7BFF);
	assert_int_equal(wd_f32_to_f16(65519.996f), 0x7BFF);
	assert_int_equal(wd_f32_to_f16(65520.0f), 0x7C00);
	assert_int_equal(wd_f32_to_f16(-INFINITY), 0xFC00);
	assert_int_equal(wd_f32_to_f16(0x1p-25f), 0x0000);              /* tie with 0: even */
	assert_int_equal(wd_f32_to_f16(u2f(0x33000001)), 0x0001);
	assert_int_equal(wd_f32_to_f16(0x1.8p-24f), 0x0002);            /* tie 1|2: even */
	assert_int_equal(wd_f32_to_f16(0x1.4p-23f), 0x0002);            /* 2.5 quanta: even */
	assert_int_equal(wd_f32_to_f16(-0.0f), 0x8000);
	assert_int_equal(wd_f32_to_f16(u2f(0x7F800001)), 0x7E00);       /* sNaN: quieted */
	assert_int_equal(wd_f32_to_f16(u2f(0xFFC02000)), 0xFE01);       /* payload's top bits kept */
	assert_true(f2u(wd_f16_to_f32(0x7C01)) == 0x7FC02000);          /* quieted, payload kept */
	free(u), free(h), free(w);
}

/* bf16 by the IEEE definition: ties, subnormals, overflow to infinity, NaN payloads. */
static void test_bf16(void **state)
{
	(void)state;
	static const struct { uint32_t in; uint16_t out; } lit[] = {
		{ 0x3F808000, 0x3F80 }, /* tie, lower even: stays */
		{ 0x3F818000, 0x3F82 }, /* tie, lower odd: up */
		{ 0x3F808001, 0x3F81 }, { 0x3F807FFF, 0x3F80 },
		{ 0x7F7F7FFF, 0x7F7F }, /* just below the overflow midpoint */
		{ 0x7F7F8000, 0x7F80 }, /* the midpoint to 2^128: tie goes to infinity (even) */
		{ 0xFF7FFFFF, 0xFF80 }, { 0x7F800000, 0x7F80 }, { 0xFF800000, 0xFF80 },
		{ 0x00008000, 0x0000 }, /* subnormal tie: even */
		{ 0x00018000, 0x0002 }, { 0x007FFFFF, 0x0080 }, /* rounds up to the smallest normal */
		{ 0x80000000, 0x8000 },
		{ 0x7F800001, 0x7FC0 }, /* sNaN: quiet bit set, payload truncated */
		{ 0xFF812345, 0xFFC1 }, /* sign and the payload's top bits kept */
		{ 0x7FFFFFFF, 0x7FFF }, { 0x7FC00000, 0x7FC0 },
	};
	size_t n = 1 << 20;
	uint32_t *u = malloc(n * 4), *w = malloc(65536 * 4);
	uint16_t *b = malloc(n * 2), all[65536];

	assert_non_null(u);
	assert_non_null(b);
	assert_non_null(w);
	for (size_t i = 0; i < sizeof(lit) / sizeof(lit[0]); i++) {
		assert_int_equal(wd_f32_to_bf16(u2f(lit[i].in)), lit[i].out);
		assert_int_equal(t_cast(WD_F32, lit[i].in, WD_BF16), lit[i].out);
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t r = (uint32_t)rnd();
		switch (i % 4) {
		case 0: u[i] = (r & 0xFFFF0000u) | 0x8000; break;         /* exact ties */
		case 1: u[i] = (r & 0xFFFF0000u) | (0x7FFE + (r & 3)); break; /* around ties */
		default: u[i] = r; break;
		}
	}
	wd_convert_scalar(WD_F32, u, WD_BF16, b, n);
	for (size_t i = 0; i < n; i++)
		if (b[i] != t_cast(WD_F32, u[i], WD_BF16) || wd_f32_to_bf16(u2f(u[i])) != b[i])
			fail_msg("f32 %08x -> bf16 %04x, want %04x", u[i], b[i],
				 (unsigned)t_cast(WD_F32, u[i], WD_BF16));
	for (uint32_t i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	wd_convert_scalar(WD_BF16, all, WD_F32, w, 65536);
	for (uint32_t i = 0; i < 65536; i++) {
		/* widening is exact: the bits move up 16 places; NaNs come out quiet */
		uint32_t want = i << 16;
		if ((want & 0x7FFFFFFF) > 0x7F800000)
			want |= 0x00400000;
		if (w[i] != want || f2u(wd_bf16_to_f32((uint16_t)i)) != want)
			fail_msg("bf16 %04x -> f32 %08x, want %08x", i, w[i], want);
		assert_int_equal(w[i], t_cast(WD_BF16, i, WD_F32));
	}
	free(u), free(b), free(w);
}

/* All 256 codes of each FP8 format decoded, and the PyTorch rules for encoding. */
static void test_fp8_tables(void **state)
{
	(void)state;
	enum wd_dtype fp8[2] = { WD_F8_E4M3, WD_F8_E5M2 };
	int bias[2] = { 7, 15 }, mb[2] = { 3, 2 };

	for (int k = 0; k < 2; k++) {
		uint8_t codes[256];
		float f[256];
		double d[256];
		for (int i = 0; i < 256; i++)
			codes[i] = (uint8_t)i;
		wd_convert(fp8[k], codes, WD_F32, f, 256);
		wd_convert(fp8[k], codes, WD_F64, d, 256);
		for (int i = 0; i < 256; i++) {
			/* the bit fields, read here directly */
			int s = i >> 7, e = (i >> mb[k]) & ((1 << (7 - mb[k])) - 1), m = i & ((1 << mb[k]) - 1);
			int emax = (1 << (7 - mb[k])) - 1;
			int nan = k == 0 ? (e == emax && m == (1 << mb[k]) - 1) : (e == emax && m != 0);
			int inf = k == 1 && e == emax && m == 0;
			if (nan) {
				/* the fraction aligned at the top of f32's, quiet bit set */
				uint32_t want = (s ? 0x80000000u : 0) | 0x7FC00000u |
						((uint32_t)m << (23 - mb[k]));
				assert_int_equal(f2u(f[i]), want);
				assert_true(isnan(d[i]) && !!signbit(d[i]) == s);
				continue;
			}
			double want = inf ? INFINITY
				      : e == 0 ? ldexp(m, 1 - bias[k] - mb[k])
					       : ldexp(m + (1 << mb[k]), e - bias[k] - mb[k]);
			if (s)
				want = -want;
			if (f2u(f[i]) != f2u((float)want) || d2u(d[i]) != d2u(want))
				fail_msg("%s %02x: got %a / %a, want %a", wd_dtype_name(fp8[k]), i, f[i],
					 d[i], want);
		}
	}
	/* literal rules (PyTorch's Float8_e4m3fn / Float8_e5m2 constructors from float) */
	static const struct { float in; uint8_t e4, e5; } lit[] = {
		{ 448.0f, 0x7E, 0x5F }, { 464.0f, 0x7E, 0x5F }, { 464.0001f, 0x7F, 0x5F },
		{ 479.0f, 0x7F, 0x5F }, { 480.0f, 0x7F, 0x60 }, { 1e30f, 0x7F, 0x7C },
		{ 57344.0f, 0x7F, 0x7B }, { 61439.996f, 0x7F, 0x7B }, { 61440.0f, 0x7F, 0x7C },
		{ 65536.0f, 0x7F, 0x7C }, { INFINITY, 0x7F, 0x7C }, { -INFINITY, 0xFF, 0xFC },
		{ NAN, 0x7F, 0x7F }, { -NAN, 0xFF, 0xFF }, { -0.0f, 0x80, 0x80 }, { 1.0f, 0x38, 0x3C },
		{ -448.0f, 0xFE, 0xDF }, { 0x1p-10f, 0x00, 0x14 }, /* E4M3: half its min subnormal */
		{ 0x1.000002p-10f, 0x01, 0x14 }, { 0x1.8p-9f, 0x02, 0x1A }, /* 1.5 quanta: even */
		{ 0x1p-17f, 0x00, 0x00 }, { 0x1.000002p-17f, 0x00, 0x01 },
	};
	for (size_t i = 0; i < sizeof(lit) / sizeof(lit[0]); i++) {
		uint8_t a, b;
		wd_convert(WD_F32, &lit[i].in, WD_F8_E4M3, &a, 1);
		wd_convert(WD_F32, &lit[i].in, WD_F8_E5M2, &b, 1);
		if (a != lit[i].e4 || b != lit[i].e5)
			fail_msg("%a: E4M3 %02x want %02x, E5M2 %02x want %02x", lit[i].in, a,
				 lit[i].e4, b, lit[i].e5);
	}
}

/* f32 -> FP8 at every code, every midpoint and one f32 ulp either side, and round trips. */
static void test_fp8_encode(void **state)
{
	(void)state;
	enum wd_dtype fp8[2] = { WD_F8_E4M3, WD_F8_E5M2 };

	for (int k = 0; k < 2; k++) {
		const struct tfmt *f = tfmt(fp8[k]);
		uint32_t u[256 * 12];
		uint8_t out[256 * 12], codes[256], back[256];
		float vals[256];
		size_t n = 0;
		for (uint64_t c = 0; c <= t_maxfin(f); c++) {
			float v = (float)t_mag(f, c);
			float mid = (float)((t_mag(f, c) + t_mag(f, c + 1)) / 2); /* c + 1 may be past max */
			uint32_t list[6] = { f2u(v), f2u(v) + 1, f2u(mid) - 1, f2u(mid), f2u(mid) + 1,
					     f2u(mid) + 7 };
			for (int j = 0; j < 6; j++) {
				u[n++] = list[j];
				u[n++] = list[j] | 0x80000000u;
			}
		}
		wd_convert(WD_F32, u, fp8[k], out, n);
		for (size_t i = 0; i < n; i++)
			if (out[i] != t_cast(WD_F32, u[i], fp8[k]))
				fail_msg("%s: f32 %08x -> %02x, want %02x", wd_dtype_name(fp8[k]), u[i],
					 out[i], (unsigned)t_cast(WD_F32, u[i], fp8[k]));
		/* every code survives fp8 -> f32 -> fp8; NaNs come back as the canonical NaN */
		for (int i = 0; i < 256; i++)
			codes[i] = (uint8_t)i;
		wd_convert(fp8[k], codes, WD_F32, vals, 256);
		wd_convert(WD_F32, vals, fp8[k], back, 256);
		for (int i = 0; i < 256; i++) {
			uint8_t want = t_isnan(f, (uint64_t)i) ? (uint8_t)((i & 0x80) | 0x7F) : (uint8_t)i;
			assert_int_equal(back[i], want);
		}
	}
}

/* Every pair of element types, random and edge values, against the oracle (scalar path). */
static void test_all_pairs_vs_oracle(void **state)
{
	(void)state;
	enum { N = 3000 };
	unsigned char src[N * 8], dst[N * 8];

	for (size_t i = 0; i < NTYPES; i++) {
		for (size_t j = 0; j < NTYPES; j++) {
			enum wd_dtype from = all_types[i], to = all_types[j];
			size_t ss = wd_dtype_size(from), ds = wd_dtype_size(to);
			if (from == to)
				continue;
			for (size_t e = 0; e < N; e++) {
				uint64_t r = interesting(from);
				memcpy(src + e * ss, &r, ss); /* little-endian host */
			}
			wd_convert_scalar(from, src, to, dst, N);
			for (size_t e = 0; e < N; e++) {
				uint64_t in = get_raw(src + e * ss, ss), got = get_raw(dst + e * ds, ds);
				uint64_t want = t_cast(from, in, to);
				if (got != want)
					fail_msg("%s %llx -> %s: got %llx, want %llx", wd_dtype_name(from),
						 (unsigned long long)in, wd_dtype_name(to),
						 (unsigned long long)got, (unsigned long long)want);
			}
		}
	}
}

/* F64 sources round once, straight to the target (no detour through f32). */
static void test_f64_single_rounding(void **state)
{
	(void)state;
	double x = 1.0 + 0x1p-11 + 0x1p-40; /* just above the f16 midpoint; via f32 it would be a tie */
	uint16_t h, b;
	uint8_t e4;
	float f;
	size_t n = 200000;
	double *d = malloc(n * 8);
	float *o = malloc(n * 4);

	assert_non_null(d);
	assert_non_null(o);
	wd_convert(WD_F64, &x, WD_F16, &h, 1);
	assert_int_equal(h, 0x3C01);
	x = 1.0 + 0x1p-8 + 0x1p-40; /* same for bf16 */
	wd_convert(WD_F64, &x, WD_BF16, &b, 1);
	assert_int_equal(b, 0x3F81);
	x = 464.0 + 0x1p-30; /* past E4M3's overflow midpoint, though (float)x == 464 */
	wd_convert(WD_F64, &x, WD_F8_E4M3, &e4, 1);
	assert_int_equal(e4, 0x7F);
	x = u2d(0x7FF0000000000001ull); /* sNaN -> quiet, payload's top bits */
	wd_convert(WD_F64, &x, WD_F32, &f, 1);
	assert_int_equal(f2u(f), 0x7FC00000);
	x = u2d(0xFFF4000020000000ull);
	wd_convert(WD_F64, &x, WD_F32, &f, 1);
	assert_int_equal(f2u(f), 0xFFE00001);
	/* f64 -> f32 against the C cast (round to nearest in the default environment) */
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rnd();
		if (i % 3 == 0) /* near f32 ties: low 29 bits around 1 << 28 */
			r = (r & ~0x1FFFFFFFull) | (0x10000000ull + (rnd() % 3) - 1);
		if (i % 5 == 0) /* exponents around f32's range */
			r = (r & 0x800FFFFFFFFFFFFFull) | ((uint64_t)(1023 - 160 + rnd() % 320) << 52);
		d[i] = u2d(r);
	}
	wd_convert_scalar(WD_F64, d, WD_F32, o, n);
	for (size_t i = 0; i < n; i++) {
		if (isnan(d[i]))
			continue; /* payload rule checked above and in the all-pairs test */
		if (f2u(o[i]) != f2u((float)d[i]))
			fail_msg("f64 %a -> f32 %a, want %a", d[i], o[i], (float)d[i]);
	}
	free(d), free(o);
}

static void test_int_rules(void **state)
{
	(void)state;
	static const struct { double in; enum wd_dtype to; uint64_t want; } f2i[] = {
		{ 2.9, WD_I32, 2 }, { -2.9, WD_I32, (uint32_t)-2 }, { -0.5, WD_I8, 0 },
		{ -0.0, WD_I32, 0 }, { 1e9, WD_I8, 127 }, { -1e9, WD_I8, 0x80 }, { -129.5, WD_I8, 0x80 },
		{ -128.9, WD_I8, 0x80 }, { 127.9, WD_I8, 127 }, { 300.0, WD_U8, 255 },
		{ 255.9, WD_U8, 255 }, { -3.5, WD_U8, 0 }, { -1.0, WD_U64, 0 },
		{ 65535.5, WD_U16, 65535 }, { -32768.7, WD_I16, 0x8000 },
		{ 0x1p63, WD_I64, INT64_MAX }, { -0x1p63, WD_I64, (uint64_t)INT64_MIN },
		{ -0x1.0000000000001p63, WD_I64, (uint64_t)INT64_MIN },
		{ 0x1.fffffffffffffp62, WD_I64, 0x7FFFFFFFFFFFFC00 },
		{ 0x1p64, WD_U64, UINT64_MAX }, { 0x1.fffffffffffffp63, WD_U64, 0xFFFFFFFFFFFFF800 },
		{ 0x1p32, WD_U32, 0xFFFFFFFF }, { 4294967295.9, WD_U32, 0xFFFFFFFF },
		{ 2147483648.0, WD_I32, 0x7FFFFFFF }, { -2147483649.0, WD_I32, 0x80000000 },
		{ INFINITY, WD_I16, 0x7FFF }, { -INFINITY, WD_I16, 0x8000 }, { INFINITY, WD_U64, UINT64_MAX },
		{ -INFINITY, WD_U32, 0 }, { NAN, WD_I32, 0 }, { -NAN, WD_U8, 0 }, { NAN, WD_I64, 0 },
		{ 1e-300, WD_I64, 0 }, { 0.5, WD_BOOL, 1 }, { -0.0, WD_BOOL, 0 }, { NAN, WD_BOOL, 1 },
		{ 1e-300, WD_BOOL, 1 },
	};
	for (size_t i = 0; i < sizeof(f2i) / sizeof(f2i[0]); i++) {
		uint64_t got = 0;
		wd_convert(WD_F64, &f2i[i].in, f2i[i].to, &got, 1);
		if (got != f2i[i].want)
			fail_msg("%a -> %s: got %llx, want %llx", f2i[i].in, wd_dtype_name(f2i[i].to),
				 (unsigned long long)got, (unsigned long long)f2i[i].want);
	}
	/* other float sources saturate the same way */
	{
		uint16_t h = 0x7BFF, bf = 0xFF7F; /* 65504, about -3.39e38 */
		uint8_t e4 = 0xFE, e5 = 0x7C;     /* -448, +inf */
		int16_t i16; int64_t i64; int8_t i8; uint16_t u16;
		wd_convert(WD_F16, &h, WD_I16, &i16, 1);
		assert_int_equal(i16, 32767);
		wd_convert(WD_BF16, &bf, WD_I64, &i64, 1);
		assert_true(i64 == INT64_MIN);
		wd_convert(WD_F8_E4M3, &e4, WD_I8, &i8, 1);
		assert_int_equal(i8, -128);
		wd_convert(WD_F8_E5M2, &e5, WD_U16, &u16, 1);
		assert_int_equal(u16, 65535);
	}
	/* int -> int wraps modulo 2^bits; BOOL is nonzero -> 1 both ways */
	{
		int16_t m1 = -1; uint16_t x1234 = 0x1234; int8_t m1b = -1; uint32_t ff = 0xFFFFFFFF;
		int32_t i256 = 256; uint8_t two = 2, b2[3] = { 0, 2, 255 };
		uint8_t u8; int8_t i8; uint64_t u64; int64_t i64; int32_t i32; float f; uint8_t bb[3];
		wd_convert(WD_I16, &m1, WD_U8, &u8, 1);
		assert_int_equal(u8, 255);
		wd_convert(WD_U16, &x1234, WD_I8, &i8, 1);
		assert_int_equal(i8, 0x34);
		wd_convert(WD_I8, &m1b, WD_U64, &u64, 1);
		assert_true(u64 == UINT64_MAX);
		wd_convert(WD_U32, &ff, WD_I64, &i64, 1);
		assert_true(i64 == 4294967295LL);
		wd_convert(WD_I32, &i256, WD_BOOL, &u8, 1);
		assert_int_equal(u8, 1); /* not the low byte */
		wd_convert(WD_BOOL, &two, WD_I32, &i32, 1);
		assert_int_equal(i32, 1);
		wd_convert(WD_BOOL, &two, WD_F32, &f, 1);
		assert_true(f == 1.0f);
		wd_convert(WD_BOOL, b2, WD_BOOL, bb, 3); /* same type: a copy */
		assert_memory_equal(bb, b2, 3);
	}
	/* int -> float rounds once to nearest even, straight from the integer */
	{
		int64_t big = (int64_t)((1ull << 62) + (1ull << 38) + (1ull << 9)); /* a tie in f64 */
		uint64_t umax = UINT64_MAX;
		int32_t t1 = 16777217, t3 = 16777219, i257 = 257, i259 = 259, i1000 = 1000;
		int64_t h1 = 65519, h2 = 65520;
		int8_t m128 = -128;
		float f; double d; uint16_t h, b; uint8_t e;
		wd_convert(WD_I64, &big, WD_F32, &f, 1);
		assert_true(f == 0x1.000002p62f); /* via f64 it would tie down to 2^62 */
		wd_convert(WD_I64, &big, WD_F64, &d, 1);
		assert_true(d == 0x1p62 + 0x1p38);
		wd_convert(WD_U64, &umax, WD_F32, &f, 1);
		assert_true(f == 0x1p64f);
		wd_convert(WD_U64, &umax, WD_F64, &d, 1);
		assert_true(d == 0x1p64);
		wd_convert(WD_I32, &t1, WD_F32, &f, 1);
		assert_true(f == 16777216.0f);
		wd_convert(WD_I32, &t3, WD_F32, &f, 1);
		assert_true(f == 16777220.0f);
		wd_convert(WD_I64, &h1, WD_F16, &h, 1);
		assert_int_equal(h, 0x7BFF);
		wd_convert(WD_I64, &h2, WD_F16, &h, 1);
		assert_int_equal(h, 0x7C00);
		wd_convert(WD_I32, &i257, WD_BF16, &b, 1);
		assert_int_equal(b, 0x4380); /* 256 */
		wd_convert(WD_I32, &i259, WD_BF16, &b, 1);
		assert_int_equal(b, 0x4382); /* 260 */
		wd_convert(WD_I32, &i1000, WD_F8_E4M3, &e, 1);
		assert_int_equal(e, 0x7F); /* past 464: NaN */
		wd_convert(WD_I32, &i1000, WD_F8_E5M2, &e, 1);
		assert_int_equal(e, 0x64); /* 1024 */
		wd_convert(WD_I8, &m128, WD_F8_E4M3, &e, 1);
		assert_int_equal(e, 0xF0); /* -128 exactly */
	}
}

/*
 * Overwrite most of a buffer with values like real weights (moderate magnitudes, all signs), so
 * the kernels' fast paths for in-range blocks run; about one element in 256 keeps its
 * interesting value, so some blocks still take the slow path.
 */
static void fill_weights(enum wd_dtype t, unsigned char *buf, size_t n)
{
	size_t ss = wd_dtype_size(t);
	for (size_t e = 0; e < n; e++) {
		double x;
		if (rnd() % 256 == 0)
			continue;
		x = ldexp((double)(rnd() >> 11) * 0x1p-53 + 0.5, -(int)(rnd() % 12));
		if (rnd() & 1)
			x = -x;
		if (rnd() % 64 == 0)
			x = 0.0;
		wd_convert_scalar(WD_F64, &x, t, buf + e * ss, 1);
	}
}

/* The vector kernels give the scalar kernels' bits: odd lengths, misaligned pointers, no overrun. */
static void test_vector_matches_scalar(void **state)
{
	(void)state;
	static const size_t lens[] = { 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 1000, 4097,
				       65537, 1000003 };
	size_t maxn = 1000003 + 64;
	unsigned char *src = malloc(maxn * 8 + 64), *a = malloc(maxn * 8 + 64), *b = malloc(maxn * 8 + 64);

	assert_non_null(src);
	assert_non_null(a);
	assert_non_null(b);
	print_message("vector path: %s\n", wd_convert_isa());
	for (size_t i = 0; i < NTYPES; i++) {
		for (size_t j = 0; j < NTYPES; j++) {
			enum wd_dtype from = all_types[i], to = all_types[j];
			size_t ss = wd_dtype_size(from), ds = wd_dtype_size(to);
			int fl = tfmt(from) && tfmt(to) && wd_dtype_size(from) >= 2 &&
				 wd_dtype_size(to) >= 2;
			for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
				size_t n = lens[l], so = rnd() % 8, doff = rnd() % 8;
				if (n > 5000 && !fl)
					continue; /* long runs only where vector kernels exist */
				for (size_t e = 0; e < n; e++) {
					uint64_t r = interesting(from);
					memcpy(src + so + e * ss, &r, ss);
				}
				if (tfmt(from) && (l % 2 || n > 5000))
					fill_weights(from, src + so, n);
				memset(a, 0xA5, n * ds + doff + 32);
				memset(b, 0xA5, n * ds + doff + 32);
				wd_convert(from, src + so, to, a + doff, n);
				wd_convert_scalar(from, src + so, to, b + doff, n);
				if (memcmp(a, b, n * ds + doff + 32) != 0) {
					size_t k = 0;
					while (a[k] == b[k])
						k++;
					fail_msg("%s -> %s, n %zu, offsets %zu/%zu: byte %zu differs",
						 wd_dtype_name(from), wd_dtype_name(to), n, so, doff, k);
				}
				for (size_t k = 0; k < 32; k++) /* nothing written past the end */
					assert_int_equal(a[doff + n * ds + k], 0xA5);
			}
		}
	}
	free(src), free(a), free(b);
}

/*
 * Every 16-bit code of F16 and BF16, each placed alone in a block of 16 weight-like values, so a
 * kernel that treats in-range blocks specially meets every code as the one odd element.
 */
static void test_vector_every_16bit_code(void **state)
{
	(void)state;
	enum wd_dtype from16[2] = { WD_F16, WD_BF16 }, tos[4] = { WD_F32, WD_F16, WD_BF16, WD_F64 };
	size_t n = 65536 * 16;
	uint16_t *src = malloc(n * 2);
	unsigned char *a = malloc(n * 8), *b = malloc(n * 8);

	assert_non_null(src);
	assert_non_null(a);
	assert_non_null(b);
	for (int f = 0; f < 2; f++) {
		fill_weights(from16[f], (unsigned char *)src, n);
		for (size_t c = 0; c < 65536; c++)
			src[c * 16 + c % 16] = (uint16_t)c;
		for (int t = 0; t < 4; t++) {
			if (tos[t] == from16[f])
				continue;
			wd_convert(from16[f], src, tos[t], a, n);
			wd_convert_scalar(from16[f], src, tos[t], b, n);
			if (memcmp(a, b, n * wd_dtype_size(tos[t])) != 0)
				fail_msg("%s -> %s differs", wd_dtype_name(from16[f]), wd_dtype_name(tos[t]));
		}
	}
	free(src), free(a), free(b);
}

/* The kernel sets by name, slowest first, with what wd_convert_isa reports for each. */
static const char *const ksets[] = { "scalar", "avx2", "avx512", "avx512bf16" };
static const char *const kisas[] = { "scalar", "avx2+f16c", "avx512f", "avx512f+avx512bf16" };
#define NKSETS (sizeof(ksets) / sizeof(ksets[0]))

/* What this binary prints with --isa when started with WEIGHTD_CPU_KERNELS=value (NULL: unset). */
static void isa_under_env(const char *value, char *out, size_t len)
{
	int p[2], status = 0;
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		if (value)
			setenv("WEIGHTD_CPU_KERNELS", value, 1);
		else
			unsetenv("WEIGHTD_CPU_KERNELS");
		execl("/proc/self/exe", "test_convert", "--isa", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	n = read(p[0], out, len - 1);
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(n > 0);
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

/*
 * WEIGHTD_CPU_KERNELS caps the choice at the named set, falling back to the fastest set below it
 * that the CPU has; unknown names and "auto" keep the automatic choice.
 */
static void test_env_override(void **state)
{
	bool has[NKSETS];
	size_t best = 0;
	char got[128];

	(void)state;
	for (size_t k = 0; k < NKSETS; k++) {
		has[k] = wd_convert_select(ksets[k]) == 0;
		if (has[k])
			best = k;
		else
			assert_int_equal(wd_convert_select(ksets[k]), -WEIGHTD_E_UNSUPPORTED);
	}
	assert_true(has[0]);
	assert_int_equal(wd_convert_select("avx1024"), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_convert_select("auto"), 0);
	for (size_t k = 0; k < NKSETS; k++) {
		size_t want = k;

		while (!has[want])
			want--;
		isa_under_env(ksets[k], got, sizeof(got));
		assert_string_equal(got, kisas[want]);
	}
	isa_under_env(NULL, got, sizeof(got));
	assert_string_equal(got, kisas[best]);
	isa_under_env("auto", got, sizeof(got));
	assert_string_equal(got, kisas[best]);
	isa_under_env("bogus", got, sizeof(got));
	assert_string_equal(got, kisas[best]);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_supported),
		cmocka_unit_test(test_oracle_anchors),
		cmocka_unit_test(test_f16_to_f32_vs_f16c),
		cmocka_unit_test(test_f32_to_f16_vs_f16c),
		cmocka_unit_test(test_f16_value_oracle),
		cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_fp8_tables),
		cmocka_unit_test(test_fp8_encode),
		cmocka_unit_test(test_all_pairs_vs_oracle),
		cmocka_unit_test(test_f64_single_rounding),
		cmocka_unit_test(test_int_rules),
		cmocka_unit_test(test_vector_matches_scalar),
		cmocka_unit_test(test_vector_every_16bit_code),
		cmocka_unit_test(test_env_override),
	};
	/* The tests that call wd_convert, run again under every kernel set this CPU has. */
	const struct CMUnitTest per_kernels[] = {
		cmocka_unit_test(test_f16_to_f32_vs_f16c),
		cmocka_unit_test(test_f32_to_f16_vs_f16c),
		cmocka_unit_test(test_fp8_tables),
		cmocka_unit_test(test_fp8_encode),
		cmocka_unit_test(test_f64_single_rounding),
		cmocka_unit_test(test_int_rules),
		cmocka_unit_test(test_vector_matches_scalar),
		cmocka_unit_test(test_vector_every_16bit_code),
	};
	char name[64];
	int rc;

	if (argc == 2 && strcmp(argv[1], "--isa") == 0) {
		puts(wd_convert_isa());
		return 0;
	}
	rc = cmocka_run_group_tests_name("default kernels", tests, NULL, NULL);
	for (size_t k = 0; k < NKSETS; k++) {
		if (wd_convert_select(ksets[k]) != 0) {
			print_message("kernel set %s: not on this CPU, skipped\n", ksets[k]);
			continue;
		}
		if (strcmp(wd_convert_isa(), kisas[k]) != 0) {
			print_error("kernel set %s reports %s\n", ksets[k], wd_convert_isa());
			rc = 1;
		}
		snprintf(name, sizeof(name), "kernels %s", ksets[k]);
		rc |= cmocka_run_group_tests_name(name, per_kernels, NULL, NULL);
	}
	wd_convert_select("auto");
	return rc;
}
