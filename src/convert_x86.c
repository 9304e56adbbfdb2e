/* SPDX-License-Identifier: Apache-2.0 */
/* convert_x86.c - the AVX2 + F16C and AVX-512 twins of convert.c's scalar kernels, bit for bit
 * the same results; convert.c picks a set at run time after checking the CPU. */
#include "convert_kern.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

/* The tails (fewer elements than one vector) go to the scalar kernels. */
#define convert_scalar_f32_bf16 wd_convert_kern_scalar[P_F32_BF16]
#define convert_scalar_bf16_f32 wd_convert_kern_scalar[P_BF16_F32]
#define convert_scalar_f16_f32 wd_convert_kern_scalar[P_F16_F32]
#define convert_scalar_f32_f16 wd_convert_kern_scalar[P_F32_F16]
#define convert_scalar_bf16_f16 wd_convert_kern_scalar[P_BF16_F16]
#define convert_scalar_f16_bf16 wd_convert_kern_scalar[P_F16_BF16]
#define convert_scalar_f32_f64 wd_convert_kern_scalar[P_F32_F64]
#define convert_scalar_f64_f32 wd_convert_kern_scalar[P_F64_F32]

/* ---- AVX2 + F16C ---- */

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

WD_AVX2 static void convert_avx2_f32_bf16(const void *src, void *dst, size_t n)
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
	convert_scalar_f32_bf16(s + 4 * i, d + 2 * i, n - i);
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

WD_AVX2 static void convert_avx2_bf16_f32(const void *src, void *dst, size_t n)
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
	convert_scalar_bf16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX2 static void convert_avx2_f16_f32(const void *src, void *dst, size_t n)
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
	convert_scalar_f16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX2 static void convert_avx2_f32_f16(const void *src, void *dst, size_t n)
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
	convert_scalar_f32_f16(s + 4 * i, d + 2 * i, n - i);
}

/*
 * bf16 -> f16. A bf16 in f16's normal range [2^-14, 2^16) has at most 7 fraction bits, so it is
 * exact in f16: rebias the exponent and shift, all in 16-bit lanes. A block of 16 where every
 * element is such a value or a zero takes that path; any other block widens to f32 and rounds with
 * VCVTPS2PH, which gives the scalar rule for everything (overflow, subnormals, NaN).
 */
WD_AVX2 static void convert_avx2_bf16_f16(const void *src, void *dst, size_t n)
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
	convert_scalar_bf16_f16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX2 static void convert_avx2_f16_bf16(const void *src, void *dst, size_t n)
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
	convert_scalar_f16_bf16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX2 static void convert_avx2_f32_f64(const void *src, void *dst, size_t n)
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
	convert_scalar_f32_f64(s + 4 * i, d + 8 * i, n - i);
}

WD_AVX2 static void convert_avx2_f64_f32(const void *src, void *dst, size_t n)
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
	convert_scalar_f64_f32(s + 8 * i, d + 4 * i, n - i);
}

const wd_convert_kern_fn wd_convert_kern_avx2[P_COUNT] = {
	[P_F32_BF16] = convert_avx2_f32_bf16, [P_BF16_F32] = convert_avx2_bf16_f32,
	[P_F16_F32] = convert_avx2_f16_f32, [P_F32_F16] = convert_avx2_f32_f16,
	[P_BF16_F16] = convert_avx2_bf16_f16, [P_F16_BF16] = convert_avx2_f16_bf16,
	[P_F32_F64] = convert_avx2_f32_f64, [P_F64_F32] = convert_avx2_f64_f32,
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

WD_AVX512 static void convert_avx512_f32_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512i u = _mm512_loadu_si512((const void *)(s + 4 * i));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtepi32_epi16(bf16_round_avx512(u)));
	}
	convert_scalar_f32_bf16(s + 4 * i, d + 2 * i, n - i);
}

WD_AVX512 static void convert_avx512_bf16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		_mm512_storeu_si512((void *)(d + 4 * i), bf16_widen_avx512(h));
	}
	convert_scalar_bf16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX512 static void convert_avx512_f16_f32(const void *src, void *dst, size_t n)
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
	convert_scalar_f16_f32(s + 2 * i, d + 4 * i, n - i);
}

WD_AVX512 static void convert_avx512_f32_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 a = _mm512_loadu_ps((const void *)(s + 4 * i));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtps_ph(a, 0));
	}
	convert_scalar_f32_f16(s + 4 * i, d + 2 * i, n - i);
}

WD_AVX512 static void convert_avx512_bf16_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		__m512 a = _mm512_castsi512_ps(bf16_widen_avx512(h));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtps_ph(a, 0));
	}
	convert_scalar_bf16_f16(s + 2 * i, d + 2 * i, n - i);
}

/*
 * bf16 -> f16 with AVX-512BW, 32 elements at a time: the AVX2 kernel's exact path (a block whose
 * every element is zero or in f16's normal range is rebiased and shifted in 16-bit lanes), with
 * the widening VCVTPS2PH path of convert_avx512_bf16_f16 for any other block. Widening every
 * element costs a cross-lane zero-extension and a two-uop conversion per 16 elements; real
 * weights rarely leave the fast path.
 */
#define WD_AVX512BW __attribute__((target("avx512f,avx512bw")))

WD_AVX512BW static void convert_avx512bw_bf16_f16(const void *src, void *dst, size_t n)
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
	convert_avx512_bf16_f16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX512 static void convert_avx512_f16_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
		__m512i u = _mm512_castps_si512(_mm512_cvtph_ps(h));
		_mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtepi32_epi16(bf16_round_avx512(u)));
	}
	convert_scalar_f16_bf16(s + 2 * i, d + 2 * i, n - i);
}

WD_AVX512 static void convert_avx512_f32_f64(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 a = _mm256_loadu_ps((const float *)(s + 4 * i));
		_mm512_storeu_pd((void *)(d + 8 * i), _mm512_cvtps_pd(a));
	}
	convert_scalar_f32_f64(s + 4 * i, d + 8 * i, n - i);
}

WD_AVX512 static void convert_avx512_f64_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m512d a = _mm512_loadu_pd((const void *)(s + 8 * i));
		_mm256_storeu_ps((float *)(d + 4 * i), _mm512_cvtpd_ps(a));
	}
	convert_scalar_f64_f32(s + 8 * i, d + 4 * i, n - i);
}

const wd_convert_kern_fn wd_convert_kern_avx512[P_COUNT] = {
	[P_F32_BF16] = convert_avx512_f32_bf16, [P_BF16_F32] = convert_avx512_bf16_f32,
	[P_F16_F32] = convert_avx512_f16_f32, [P_F32_F16] = convert_avx512_f32_f16,
	[P_BF16_F16] = convert_avx512_bf16_f16, [P_F16_BF16] = convert_avx512_f16_bf16,
	[P_F32_F64] = convert_avx512_f32_f64, [P_F64_F32] = convert_avx512_f64_f32,
};

#if defined(WD_HAVE_AVX512BF16)

/*
 * VCVTNEPS2BF16 rounds to nearest even and quiets NaNs with the truncated payload, as the scalar
 * rule does, but it treats subnormal inputs as zero. Those lanes (rare) are redone with the integer
 * rounding, so the result stays bit-identical.
 */
__attribute__((target("avx512f,avx512bf16"))) static void
convert_avx512bf16_f32_bf16(const void *src, void *dst, size_t n)
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
	convert_scalar_f32_bf16(s + 4 * i, d + 2 * i, n - i);
}
#endif

const wd_convert_kern_fn wd_convert_kern_avx512bw_bf16_f16 = convert_avx512bw_bf16_f16;
#if defined(WD_HAVE_AVX512BF16)
const wd_convert_kern_fn wd_convert_kern_avx512bf16_f32_bf16 = convert_avx512bf16_f32_bf16;
#endif
#endif /* __x86_64__ */
