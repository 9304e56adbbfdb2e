/* SPDX-License-Identifier: Apache-2.0 */
/* convert.c - element-wise casts: exact portable scalar kernels and vector twins chosen at run time. */
#include "convert.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/*
 * How it is built. Every float format is described by its field widths (struct fmt); a value is
 * decoded exactly into sign, class and an integer significand with a binary exponent (struct fval)
 * and encoded back with one rounding to nearest, ties to even, done in integer arithmetic. That
 * generic path serves every pair and does not depend on the floating-point environment. The hot
 * pairs f32<->bf16, f32<->f16 and bf16<->f16 also have dedicated scalar kernels; those and
 * f32<->f64 have vector kernels that give the same bits. The vector kernels that use the FPU (f16
 * and f64 conversions) assume the default environment (round to nearest, no FTZ/DAZ), which
 * weightd never changes.
 */

/* ---- formats and exact values ---- */

struct fmt {
	uint8_t mbits;   /* stored fraction bits */
	uint8_t ebits;   /* exponent bits */
	int16_t bias;
	bool fn;         /* finite-only (E4M3FN): only S.1111.111 is NaN, no infinity, overflow -> NaN */
	bool canon_nan;  /* every NaN encodes as S.all-ones (PyTorch's FP8 rule) */
};

static const struct fmt fmt_f64 = { 52, 11, 1023, false, false };
static const struct fmt fmt_f32 = { 23, 8, 127, false, false };
static const struct fmt fmt_f16 = { 10, 5, 15, false, false };
static const struct fmt fmt_bf16 = { 7, 8, 127, false, false };
static const struct fmt fmt_e4m3 = { 3, 4, 7, true, true };
static const struct fmt fmt_e5m2 = { 2, 5, 15, false, true };

static const struct fmt *fmt_of(enum wd_dtype t)
{
	switch (t) {
	case WD_F64: return &fmt_f64;
	case WD_F32: return &fmt_f32;
	case WD_F16: return &fmt_f16;
	case WD_BF16: return &fmt_bf16;
	case WD_F8_E4M3: return &fmt_e4m3;
	case WD_F8_E5M2: return &fmt_e5m2;
	default: return NULL;
	}
}

enum { V_ZERO, V_FINITE, V_INF, V_NAN };

/*
 * An exact value: for V_FINITE, (-1)^neg * sig * 2^exp2 with sig != 0; for V_NAN, sig holds the
 * source fraction left-justified in 64 bits (the payload, quiet bit included).
 */
struct fval {
	int cls;
	bool neg;
	int exp2;
	uint64_t sig;
};

/* The exact value of a code of format f (the code's bits above the format's width are ignored). */
static struct fval fp_decode(const struct fmt *f, uint64_t code)
{
	struct fval v = { V_ZERO, false, 0, 0 };
	uint64_t mmask = (UINT64_C(1) << f->mbits) - 1;
	uint64_t emax = (UINT64_C(1) << f->ebits) - 1;
	uint64_t e = (code >> f->mbits) & emax;
	uint64_t m = code & mmask;

	v.neg = (code >> (f->mbits + f->ebits)) & 1;
	if (e == emax && (!f->fn || m == mmask)) {
		if (m == 0) {
			v.cls = V_INF;
		} else {
			v.cls = V_NAN;
			v.sig = m << (64 - f->mbits);
		}
	} else if (e == 0) {
		if (m != 0) {
			v.cls = V_FINITE;
			v.sig = m;
			v.exp2 = 1 - f->bias - f->mbits;
		}
	} else {
		v.cls = V_FINITE;
		v.sig = m | (UINT64_C(1) << f->mbits);
		v.exp2 = (int)e - f->bias - f->mbits;
	}
	return v;
}

/* x / 2^s rounded to nearest, ties to even (s >= 0). */
static uint64_t round_shift(uint64_t x, int s)
{
	uint64_t q, rem, half;

	if (s == 0)
		return x;
	if (s > 64)
		return 0; /* x < 2^64 < half */
	q = s == 64 ? 0 : x >> s;
	rem = s == 64 ? x : x & ((UINT64_C(1) << s) - 1);
	half = UINT64_C(1) << (s - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return q;
}

/*
 * Encode an exact value in format f: one rounding to nearest even, computed as if the exponent were
 * unbounded; a result beyond the largest finite code becomes infinity (NaN for finite-only formats).
 */
static uint64_t fp_encode(const struct fmt *f, struct fval v)
{
	uint64_t sign = (uint64_t)v.neg << (f->mbits + f->ebits);
	uint64_t mmask = (UINT64_C(1) << f->mbits) - 1;
	int emax = (1 << f->ebits) - 1;
	uint64_t inf = (uint64_t)emax << f->mbits;
	uint64_t nan_all = inf | mmask;
	uint64_t overflow = f->fn ? nan_all : inf;
	uint64_t maxfin = overflow - 1;
	uint64_t code, q;
	int msb, e, s, emin;

	switch (v.cls) {
	case V_ZERO:
		return sign;
	case V_INF:
		return sign | overflow;
	case V_NAN:
		if (f->canon_nan)
			return sign | nan_all;
		return sign | inf | (v.sig >> (64 - f->mbits)) | (UINT64_C(1) << (f->mbits - 1));
	default:
		break;
	}
	msb = 63 - __builtin_clzll(v.sig);
	e = msb + v.exp2; /* exponent of the leading bit */
	emin = 1 - f->bias;
	if (e >= emin) {
		s = msb - f->mbits;
		q = s >= 0 ? round_shift(v.sig, s) : v.sig << -s;
		if (q >> (f->mbits + 1)) { /* rounding carried into a new binade */
			q >>= 1;
			e++;
		}
		if (e + f->bias > emax)
			return sign | overflow;
		code = ((uint64_t)(e + f->bias) << f->mbits) | (q & mmask);
	} else {
		/* subnormal: count quanta of 2^(emin - mbits); 2^mbits quanta is the smallest normal */
		s = emin - f->mbits - v.exp2;
		code = s >= 0 ? round_shift(v.sig, s) : v.sig << -s;
	}
	if (code > maxfin)
		return sign | overflow;
	return sign | code;
}

/* ---- element access ---- */

static uint64_t load_bits(const unsigned char *p, size_t size)
{
	uint8_t b8;
	uint16_t b16;
	uint32_t b32;
	uint64_t b64;

	switch (size) {
	case 1: memcpy(&b8, p, 1); return b8;
	case 2: memcpy(&b16, p, 2); return b16;
	case 4: memcpy(&b32, p, 4); return b32;
	default: memcpy(&b64, p, 8); return b64;
	}
}

static void store_bits(unsigned char *p, size_t size, uint64_t bits)
{
	uint8_t b8 = (uint8_t)bits;
	uint16_t b16 = (uint16_t)bits;
	uint32_t b32 = (uint32_t)bits;

	switch (size) {
	case 1: memcpy(p, &b8, 1); break;
	case 2: memcpy(p, &b16, 2); break;
	case 4: memcpy(p, &b32, 4); break;
	default: memcpy(p, &bits, 8); break;
	}
}

static bool is_signed_int(enum wd_dtype t)
{
	return t == WD_I8 || t == WD_I16 || t == WD_I32 || t == WD_I64;
}

/* An integer element as its 64-bit two's-complement bits (signed types sign-extended). */
static uint64_t int_bits(enum wd_dtype t, uint64_t raw)
{
	switch (t) {
	case WD_BOOL: return raw != 0;
	case WD_I8: return (uint64_t)(int64_t)(int8_t)raw;
	case WD_I16: return (uint64_t)(int64_t)(int16_t)raw;
	case WD_I32: return (uint64_t)(int64_t)(int32_t)raw;
	default: return raw;
	}
}

/* The exact value of an integer element given as int_bits() returns it. */
static struct fval int_value(enum wd_dtype t, uint64_t bits)
{
	struct fval v = { V_ZERO, false, 0, 0 };

	if (is_signed_int(t) && (int64_t)bits < 0) {
		v.neg = true;
		bits = UINT64_C(0) - bits;
	}
	if (bits) {
		v.cls = V_FINITE;
		v.sig = bits;
	}
	return v;
}

/* Truncate toward zero and saturate to a `bytes`-wide integer; NaN -> 0. Returns the bits. */
static uint64_t value_to_int(struct fval v, size_t bytes, bool is_signed)
{
	unsigned bits = (unsigned)bytes * 8;
	uint64_t mag = 0, limit;
	int msb;
	bool big = false;

	if (v.cls == V_NAN || v.cls == V_ZERO)
		return 0;
	if (v.cls == V_INF) {
		big = true;
	} else if (v.exp2 >= 0) {
		msb = 63 - __builtin_clzll(v.sig);
		if (msb + v.exp2 >= 64)
			big = true;
		else
			mag = v.sig << v.exp2;
	} else if (v.exp2 > -64) {
		mag = v.sig >> -v.exp2;
	}
	if (!is_signed) {
		if (v.neg)
			return 0;
		limit = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
		return big || mag > limit ? limit : mag;
	}
	limit = UINT64_C(1) << (bits - 1); /* |min|; max is limit - 1 */
	if (!v.neg)
		return big || mag > limit - 1 ? limit - 1 : mag;
	if (big || mag > limit)
		mag = limit;
	return UINT64_C(0) - mag;
}

/* ---- the generic scalar kernel: any element pair, one element at a time ---- */

static void convert_generic(enum wd_dtype from, const unsigned char *s, enum wd_dtype to,
			    unsigned char *d, size_t n)
{
	const struct fmt *ff = fmt_of(from), *tf = fmt_of(to);
	size_t ss = wd_dtype_size(from), ds = wd_dtype_size(to);
	bool to_signed = is_signed_int(to);
	struct fval v;
	uint64_t raw, out;

	for (size_t i = 0; i < n; i++, s += ss, d += ds) {
		raw = load_bits(s, ss);
		if (ff)
			v = fp_decode(ff, raw);
		else
			v = int_value(from, int_bits(from, raw));
		if (tf)
			out = fp_encode(tf, v);
		else if (to == WD_BOOL)
			out = v.cls != V_ZERO;
		else if (!ff)
			out = int_bits(from, raw); /* int -> int wraps: keep the low bits */
		else
			out = value_to_int(v, ds, to_signed);
		store_bits(d, ds, out);
	}
}

/* ---- dedicated scalar helpers for the hot pairs ---- */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t bf16_to_f32_bits(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	if ((u & 0x7FFFFFFF) > 0x7F800000)
		u |= 0x00400000; /* quiet */
	return u;
}

static uint16_t f32_bits_to_bf16(uint32_t u)
{
	if ((u & 0x7FFFFFFF) > 0x7F800000)
		return (uint16_t)((u >> 16) | 0x40);
	/* bf16 keeps f32's exponent range: adding 0x7FFF + lsb rounds to nearest even, carries into
	 * the exponent and overflows to infinity exactly as IEEE rounding does */
	return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static uint32_t f16_to_f32_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, a = h & 0x7FFF, m = h & 0x3FF;
	int sh;

	if (a - 0x0400 < 0x7800) /* normal (exponent field 1..30): move up and rebias by 127 - 15 */
		return sign | ((a << 13) + 0x38000000);
	if (a >= 0x7C00)
		return sign | 0x7F800000 | (m ? 0x00400000 | (m << 13) : 0);
	if (!m)
		return sign;
	/* subnormal m * 2^-24: shift the leading bit to position 10 */
	sh = __builtin_clz(m) - 21;
	m <<= sh;
	return sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3FF) << 13);
}

static uint16_t f32_bits_to_f16(uint32_t u)
{
	uint16_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7FFFFFFF, r, m, q, rem, half;
	int s;

	if (a - 0x38800000 < 0x47800000 - 0x38800000) {
		/* the f16 normal range [2^-14, 2^16): rebias, round, a carry may reach infinity */
		r = a - 0x38000000;
		r += 0xFFF + ((r >> 13) & 1);
		return sign | (uint16_t)(r >> 13);
	}
	if (a > 0x7F800000)
		return sign | 0x7E00 | ((a >> 13) & 0x3FF);
	if (a >= 0x47800000) /* >= 2^16, infinity included */
		return sign | 0x7C00;
	if (a <= 0x33000000) /* <= 2^-25, half the smallest subnormal: rounds to zero */
		return sign;
	m = (a & 0x7FFFFF) | 0x800000;
	s = 126 - (int)(a >> 23); /* 14..24 */
	q = m >> s;
	rem = m & ((UINT32_C(1) << s) - 1);
	half = UINT32_C(1) << (s - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return sign | (uint16_t)q;
}

float wd_f16_to_f32(unsigned short h)
{
	return bits_f32(f16_to_f32_bits(h));
}

unsigned short wd_f32_to_f16(float f)
{
	return f32_bits_to_f16(f32_bits(f));
}

float wd_bf16_to_f32(unsigned short b)
{
	return bits_f32(bf16_to_f32_bits(b));
}

unsigned short wd_f32_to_bf16(float f)
{
	return f32_bits_to_bf16(f32_bits(f));
}

/* ---- kernel tables ---- */

typedef void (*kern_fn)(const void *src, void *dst, size_t n);

enum pair { P_F32_BF16, P_BF16_F32, P_F16_F32, P_F32_F16, P_BF16_F16, P_F16_BF16, P_F32_F64,
	    P_F64_F32, P_COUNT };

static int pair_of(enum wd_dtype from, enum wd_dtype to)
{
	if (from == WD_F32 && to == WD_BF16) return P_F32_BF16;
	if (from == WD_BF16 && to == WD_F32) return P_BF16_F32;
	if (from == WD_F16 && to == WD_F32) return P_F16_F32;
	if (from == WD_F32 && to == WD_F16) return P_F32_F16;
	if (from == WD_BF16 && to == WD_F16) return P_BF16_F16;
	if (from == WD_F16 && to == WD_BF16) return P_F16_BF16;
	if (from == WD_F32 && to == WD_F64) return P_F32_F64;
	if (from == WD_F64 && to == WD_F32) return P_F64_F32;
	return -1;
}

/* Scalar kernels of the hot pairs; the vector kernels finish their tails with these. */

static void s_f32_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2, f32_bits_to_bf16((uint32_t)load_bits(s + 4 * i, 4)));
}

static void s_bf16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 4 * i, 4, bf16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2)));
}

static void s_f16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 4 * i, 4, f16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2)));
}

static void s_f32_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2, f32_bits_to_f16((uint32_t)load_bits(s + 4 * i, 4)));
}

/* bf16 -> f32 and f16 -> f32 are exact, so going through f32 rounds only once. */
static void s_bf16_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2,
			   f32_bits_to_f16(bf16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2))));
}

static void s_f16_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2,
			   f32_bits_to_bf16(f16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2))));
}

static void s_f32_f64(const void *src, void *dst, size_t n)
{
	convert_generic(WD_F32, src, WD_F64, dst, n);
}

static void s_f64_f32(const void *src, void *dst, size_t n)
{
	convert_generic(WD_F64, src, WD_F32, dst, n);
}

static const kern_fn scalar_kernels[P_COUNT] = {
	[P_F32_BF16] = s_f32_bf16, [P_BF16_F32] = s_bf16_f32, [P_F16_F32] = s_f16_f32,
	[P_F32_F16] = s_f32_f16, [P_BF16_F16] = s_bf16_f16, [P_F16_BF16] = s_f16_bf16,
	[P_F32_F64] = s_f32_f64, [P_F64_F32] = s_f64_f32,
};

/* ---- AVX2 + F16C ---- */

#if defined(__x86_64__)
#define WD_AVX2 __attribute__((target("avx2,f16c")))

/* 8 f32 bit patterns -> 8 bf16 in the low 16 bits of each lane (the scalar rule, lane-wise). */
WD_AVX2 static inline __m256i bf16_round_avx2(__m256i u)
{
	const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
	const __m256i inf = _mm256_set1_epi32(0x7F800000);
	__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
	__m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
	return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
}

WD_AVX2 static void v2_f32_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i a = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(s + 4 * i)));
		__m256i b = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(s + 4 * i + 32)));
		/* packus interleaves 128-bit halves: a0 b0 a1 b1 -> reorder to a0 a1 b0 b1 */
		__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
		_mm256_storeu_si256((__m256i *)(d + 2 * i), p);
	}
	s_f32_bf16(s + 4 * i, d + 2 * i, n - i);
}

/*
 * 16 bf16 -> 16 f32 bit patterns in order (out[0] = elements 0..7). NaNs are quieted while still
 * 16 bits wide; unpacking against zero puts each bf16 in the high half of a 32-bit lane.
 */
WD_AVX2 static inline void bf16_widen_avx2(__m256i x, __m256i out[2])
{
	__m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7FFF)),
					 _mm256_set1_epi16(0x7F80));
	__m256i zero = _mm256_setzero_si256(), lo, hi;

	x = _mm256_or_si256(x, _mm256_and_si256(nan, _mm256_set1_epi16(0x0040)));
	lo = _mm256_unpacklo_epi16(zero, x); /* elements 0-3 | 8-11 */
	hi = _mm256_unpackhi_epi16(zero, x); /* elements 4-7 | 12-15 */
	out[0] = _mm256_permute2x128_si256(lo, hi, 0x20);
	out[1] = _mm256_permute2x128_si256(lo, hi, 0x31);
}

WD_AVX2 static void v2_bf16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	__m256i w[2];
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		bf16_widen_avx2(_mm256_loadu_si256((const __m256i *)(s + 2 * i)), w);
		_mm256_storeu_si256((__m256i *)(d + 4 * i), w[0]);
		_mm256_storeu_si256((__m256i *)(d + 4 * i + 32), w[1]);
	}
	s_bf16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX2 static void v2_f16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 32 <= n; i += 32)
		for (int k = 0; k < 4; k++) {
			__m128i h = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16 * k));
			_mm256_storeu_ps((float *)(d + 4 * i + 32 * k), _mm256_cvtph_ps(h));
		}
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(s + 2 * i));
		_mm256_storeu_ps((float *)(d + 4 * i), _mm256_cvtph_ps(h));
	}
	s_f16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX2 static void v2_f32_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 a = _mm256_loadu_ps((const float *)(s + 4 * i));
		__m256 b = _mm256_loadu_ps((const float *)(s + 4 * i + 32));
		/* imm 0: round to nearest even, independent of MXCSR's rounding field */
		_mm_storeu_si128((__m128i *)(d + 2 * i), _mm256_cvtps_ph(a, 0));
		_mm_storeu_si128((__m128i *)(d + 2 * i + 16), _mm256_cvtps_ph(b, 0));
	}
	s_f32_f16(s + 4 * i, d + 2 * i, n - i);
}

/*
 * bf16 -> f16. A bf16 in f16's normal range [2^-14, 2^16) has at most 7 fraction bits, so it is
 * exact in f16: rebias the exponent and shift, all in 16-bit lanes. A block of 16 where every
 * element is such a value or a zero takes that path; any other block widens to f32 and rounds with
 * VCVTPS2PH, which gives the scalar rule for everything (overflow, subnormals, NaN).
 */
WD_AVX2 static void v2_bf16_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	const __m256i absmask = _mm256_set1_epi16(0x7FFF), lo = _mm256_set1_epi16(0x387F);
	const __m256i hi = _mm256_set1_epi16(0x4780), rebias = _mm256_set1_epi16(0x3800);
	__m256i w[2];
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		__m256i a = _mm256_and_si256(x, absmask);
		__m256i zero = _mm256_cmpeq_epi16(a, _mm256_setzero_si256());
		__m256i ok = _mm256_or_si256(zero, _mm256_and_si256(_mm256_cmpgt_epi16(a, lo),
								     _mm256_cmpgt_epi16(hi, a)));
		if (_mm256_movemask_epi8(ok) == -1) {
			__m256i r = _mm256_slli_epi16(_mm256_sub_epi16(a, rebias), 3);
			r = _mm256_or_si256(_mm256_andnot_si256(zero, r), _mm256_andnot_si256(absmask, x));
			_mm256_storeu_si256((__m256i *)(d + 2 * i), r);
			continue;
		}
		bf16_widen_avx2(x, w);
		_mm_storeu_si128((__m128i *)(d + 2 * i), _mm256_cvtps_ph(_mm256_castsi256_ps(w[0]), 0));
		_mm_storeu_si128((__m128i *)(d + 2 * i + 16),
				 _mm256_cvtps_ph(_mm256_castsi256_ps(w[1]), 0));
	}
	s_bf16_f16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX2 static void v2_f16_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m128i h0 = _mm_loadu_si128((const __m128i *)(s + 2 * i));
		__m128i h1 = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
		__m256i a = bf16_round_avx2(_mm256_castps_si256(_mm256_cvtph_ps(h0)));
		__m256i b = bf16_round_avx2(_mm256_castps_si256(_mm256_cvtph_ps(h1)));
		__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
		_mm256_storeu_si256((__m256i *)(d + 2 * i), p);
	}
	s_f16_bf16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX2 static void v2_f32_f64(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m128 a = _mm_loadu_ps((const float *)(s + 4 * i));
		__m128 b = _mm_loadu_ps((const float *)(s + 4 * i + 16));
		_mm256_storeu_pd((double *)(d + 8 * i), _mm256_cvtps_pd(a));
		_mm256_storeu_pd((double *)(d + 8 * i + 32), _mm256_cvtps_pd(b));
	}
	s_f32_f64(s + 4 * i, d + 8 * i, n - i);
}

WD_AVX2 static void v2_f64_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256d a = _mm256_loadu_pd((const double *)(s + 8 * i));
		__m256d b = _mm256_loadu_pd((const double *)(s + 8 * i + 32));
		_mm_storeu_ps((float *)(d + 4 * i), _mm256_cvtpd_ps(a));
		_mm_storeu_ps((float *)(d + 4 * i + 16), _mm256_cvtpd_ps(b));
	}
	s_f64_f32(s + 8 * i, d + 4 * i, n - i);
}

static const kern_fn avx2_kernels[P_COUNT] = {
	[P_F32_BF16] = v2_f32_bf16, [P_BF16_F32] = v2_bf16_f32, [P_F16_F32] = v2_f16_f32,
	[P_F32_F16] = v2_f32_f16, [P_BF16_F16] = v2_bf16_f16, [P_F16_BF16] = v2_f16_bf16,
	[P_F32_F64] = v2_f32_f64, [P_F64_F32] = v2_f64_f32,
};

/* ---- AVX-512F (and AVX-512 BF16 for f32 -> bf16) ---- */

#define WD_AVX512 __attribute__((target("avx512f")))

WD_AVX512 static inline __m512i bf16_round_avx512(__m512i u)
{
	__mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
						_mm512_set1_epi32(0x7F800000));
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
	r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
	return _mm512_srli_epi32(r, 16);
}

WD_AVX512 static inline __m512i bf16_widen_avx512(__m256i h)
{
	__m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
	__mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
						_mm512_set1_epi32(0x7F800000));
	return _mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x00400000));
}

WD_AVX512 static void v5_f32_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512i u = _mm512_loadu_si512((const void *)(s + 4 * i));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtepi32_epi16(bf16_round_avx512(u)));
	}
	s_f32_bf16(s + 4 * i, d + 2 * i, n - i);
}

WD_AVX512 static void v5_bf16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		_mm512_storeu_si512((void *)(d + 4 * i), bf16_widen_avx512(h));
	}
	s_bf16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX512 static void v5_f16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	/* two independent conversions per iteration: VCVTPH2PS is two uops on one port pair */
	for (; i + 32 <= n; i += 32) {
		__m256i h0 = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		__m256i h1 = _mm256_loadu_si256((const __m256i *)(s + 2 * i + 32));
		_mm512_storeu_ps((void *)(d + 4 * i), _mm512_cvtph_ps(h0));
		_mm512_storeu_ps((void *)(d + 4 * i + 64), _mm512_cvtph_ps(h1));
	}
	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		_mm512_storeu_ps((void *)(d + 4 * i), _mm512_cvtph_ps(h));
	}
	s_f16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX512 static void v5_f32_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 a = _mm512_loadu_ps((const void *)(s + 4 * i));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtps_ph(a, 0));
	}
	s_f32_f16(s + 4 * i, d + 2 * i, n - i);
}

WD_AVX512 static void v5_bf16_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		__m512 a = _mm512_castsi512_ps(bf16_widen_avx512(h));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtps_ph(a, 0));
	}
	s_bf16_f16(s + 2 * i, d + 2 * i, n - i);
}

/*
 * bf16 -> f16 with AVX-512BW, 32 elements at a time: the AVX2 kernel's exact path (a block whose
 * every element is zero or in f16's normal range is rebiased and shifted in 16-bit lanes), with
 * the widening VCVTPS2PH path of v5_bf16_f16 for any other block. Widening every element, as
 * v5_bf16_f16 does, cost a cross-lane zero-extension and a two-uop conversion per 16 elements
 * (measured at 0.46x memcpy in L2); real weights rarely leave the fast path.
 */
#define WD_AVX512BW __attribute__((target("avx512f,avx512bw")))

WD_AVX512BW static void v5bw_bf16_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	const __m512i absmask = _mm512_set1_epi16(0x7FFF), lo = _mm512_set1_epi16(0x3880);
	const __m512i hi = _mm512_set1_epi16(0x4780), rebias = _mm512_set1_epi16(0x3800);
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512i x = _mm512_loadu_si512((const void *)(s + 2 * i));
		__m512i a = _mm512_and_si512(x, absmask);
		__mmask32 zero = _mm512_cmpeq_epi16_mask(a, _mm512_setzero_si512());
		__mmask32 ok = zero | (_mm512_cmpge_epu16_mask(a, lo) & _mm512_cmplt_epu16_mask(a, hi));

		if (ok == 0xFFFFFFFFu) {
			__m512i r = _mm512_slli_epi16(_mm512_sub_epi16(a, rebias), 3);
			r = _mm512_maskz_mov_epi16(~zero, r);
			r = _mm512_or_si512(r, _mm512_andnot_si512(absmask, x));
			_mm512_storeu_si512((void *)(d + 2 * i), r);
			continue;
		}
		for (int h = 0; h < 2; h++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(s + 2 * i + 32 * h));
			__m512 f = _mm512_castsi512_ps(bf16_widen_avx512(q));
			_mm256_storeu_si256((__m256i *)(d + 2 * i + 32 * h), _mm512_cvtps_ph(f, 0));
		}
	}
	v5_bf16_f16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX512 static void v5_f16_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		__m512i u = _mm512_castps_si512(_mm512_cvtph_ps(h));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtepi32_epi16(bf16_round_avx512(u)));
	}
	s_f16_bf16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX512 static void v5_f32_f64(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 a = _mm256_loadu_ps((const float *)(s + 4 * i));
		_mm512_storeu_pd((void *)(d + 8 * i), _mm512_cvtps_pd(a));
	}
	s_f32_f64(s + 4 * i, d + 8 * i, n - i);
}

WD_AVX512 static void v5_f64_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m512d a = _mm512_loadu_pd((const void *)(s + 8 * i));
		_mm256_storeu_ps((float *)(d + 4 * i), _mm512_cvtpd_ps(a));
	}
	s_f64_f32(s + 8 * i, d + 4 * i, n - i);
}

static const kern_fn avx512_kernels[P_COUNT] = {
	[P_F32_BF16] = v5_f32_bf16, [P_BF16_F32] = v5_bf16_f32, [P_F16_F32] = v5_f16_f32,
	[P_F32_F16] = v5_f32_f16, [P_BF16_F16] = v5_bf16_f16, [P_F16_BF16] = v5_f16_bf16,
	[P_F32_F64] = v5_f32_f64, [P_F64_F32] = v5_f64_f32,
};

#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10) || \
	(defined(__clang__) && __clang_major__ >= 9)
#define WD_HAVE_AVX512BF16 1

/*
 * VCVTNEPS2BF16 rounds to nearest even and quiets NaNs with the truncated payload, as the scalar
 * rule does, but it treats subnormal inputs as zero. Those lanes (rare) are redone with the integer
 * rounding, so the result stays bit-identical.
 */
__attribute__((target("avx512f,avx512bf16"))) static void vb_f32_bf16(const void *src, void *dst,
								     size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	const __m512i expmask = _mm512_set1_epi32(0x7F800000);
	const __m512i fracmask = _mm512_set1_epi32(0x007FFFFF);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 a = _mm512_loadu_ps((const void *)(s + 4 * i));
		__m512i u = _mm512_castps_si512(a);
		__m256i r = (__m256i)_mm512_cvtneps_pbh(a);
		__mmask16 sub = _mm512_testn_epi32_mask(u, expmask) & _mm512_test_epi32_mask(u, fracmask);
		if (sub) {
			__m512i wide = _mm512_cvtepu16_epi32(r);
			wide = _mm512_mask_blend_epi32(sub, wide, bf16_round_avx512(u));
			r = _mm512_cvtepi32_epi16(wide);
		}
		_mm256_storeu_si256((__m256i *)(d + 2 * i), r);
	}
	s_f32_bf16(s + 4 * i, d + 2 * i, n - i);
}
#endif
#endif /* __x86_64__ */

/* ---- run-time choice ---- */

static kern_fn active[P_COUNT];
static const char *active_isa = "scalar";
static pthread_once_t pick_once = PTHREAD_ONCE_INIT;

/* The kernel sets by name, fastest last; what WEIGHTD_CPU_KERNELS and wd_convert_select take. */
enum kset { K_SCALAR, K_AVX2, K_AVX512, K_AVX512BF16, K_COUNT };

static const char *const kset_names[K_COUNT] = { "scalar", "avx2", "avx512", "avx512bf16" };

/*
 * Which sets the CPU can run. F16C and AVX512_BF16 are read from CPUID (not every compiler's
 * __builtin_cpu_supports knows them); both use register state that the AVX2 / AVX-512F checks
 * already found the OS enabling.
 */
static bool cpu_has(enum kset k)
{
#if defined(__x86_64__)
	unsigned a = 0, b = 0, c = 0, d = 0;

	__builtin_cpu_init();
	switch (k) {
	case K_SCALAR: return true;
	case K_AVX2:
		return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
		       (c & (1u << 29));
	case K_AVX512: return __builtin_cpu_supports("avx512f");
	case K_AVX512BF16:
#if defined(WD_HAVE_AVX512BF16)
		return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
		       (a & (1u << 5));
#else
		return false;
#endif
	default: return false;
	}
#else
	return k == K_SCALAR;
#endif
}

/* Make set k active (the caller checked cpu_has). */
static void use_kernels(enum kset k)
{
	memcpy(active, scalar_kernels, sizeof(active));
	active_isa = "scalar";
#if defined(__x86_64__)
	if (k == K_AVX2) {
		memcpy(active, avx2_kernels, sizeof(active));
		active_isa = "avx2+f16c";
	}
	if (k >= K_AVX512) {
		memcpy(active, avx512_kernels, sizeof(active));
		active_isa = "avx512f";
		/* every AVX-512 CPU that ships has BW too; the set's name stays what it was */
		if (__builtin_cpu_supports("avx512bw"))
			active[P_BF16_F16] = v5bw_bf16_f16;
	}
#if defined(WD_HAVE_AVX512BF16)
	if (k == K_AVX512BF16) {
		active[P_F32_BF16] = vb_f32_bf16;
		active_isa = "avx512f+avx512bf16";
	}
#endif
#endif
}

static int kset_from_name(const char *name)
{
	for (int k = 0; k < K_COUNT; k++)
		if (strcmp(name, kset_names[k]) == 0)
			return k;
	return -1;
}

/*
 * The fastest set the CPU has, or no faster than WEIGHTD_CPU_KERNELS asks: a set the CPU lacks
 * falls back to the fastest one below it, an unknown name (or "auto") to the automatic choice.
 * The result shows in wd_convert_isa().
 */
static void pick_kernels(void)
{
	const char *want = getenv("WEIGHTD_CPU_KERNELS");
	int k = want ? kset_from_name(want) : -1;

	if (k < 0)
		k = K_COUNT - 1;
	while (k > K_SCALAR && !cpu_has((enum kset)k))
		k--;
	use_kernels((enum kset)k);
}

int wd_convert_select(const char *name)
{
	int k = name ? kset_from_name(name) : -1;

	if (name && strcmp(name, "auto") == 0) {
		pthread_once(&pick_once, pick_kernels);
		pick_kernels();
		return 0;
	}
	if (k < 0)
		return -WEIGHTD_E_INVALID_ARGUMENT;
	if (!cpu_has((enum kset)k))
		return -WEIGHTD_E_UNSUPPORTED;
	pthread_once(&pick_once, pick_kernels);
	use_kernels((enum kset)k);
	return 0;
}

static bool is_element(enum wd_dtype t)
{
	return t >= WD_BOOL && t <= WD_F8_E5M2;
}

bool wd_convert_supported(enum wd_dtype from, enum wd_dtype to)
{
	return is_element(from) && is_element(to);
}

void wd_convert_scalar(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n)
{
	int p;

	if (n == 0 || !wd_convert_supported(from, to))
		return;
	if (from == to) {
		memcpy(dst, src, n * wd_dtype_size(from));
		return;
	}
	p = pair_of(from, to);
	if (p >= 0)
		scalar_kernels[p](src, dst, n);
	else
		convert_generic(from, src, to, dst, n);
}

void wd_convert(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n)
{
	int p = pair_of(from, to);

	if (p < 0 || n == 0) {
		wd_convert_scalar(from, src, to, dst, n);
		return;
	}
	pthread_once(&pick_once, pick_kernels);
	active[p](src, dst, n);
}

const char *wd_convert_isa(void)
{
	pthread_once(&pick_once, pick_kernels);
	return active_isa;
}
