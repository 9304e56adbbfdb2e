/* SPDX-License-Identifier: Apache-2.0 */
/* dequant.c - ggml quantized blocks to F32, following ggml's published block formats. */
#include "dequant.h"

#include <stdint.h>
#include <string.h>

#include "error.h"

/*
 * Every block is read byte by byte (little-endian, no alignment assumed), so a tensor can be
 * decoded straight from a file buffer. Scales stored as f16 are widened exactly; the arithmetic
 * order follows ggml's reference decoder (scale times quant, minus scaled min), so results match
 * what llama.cpp's own dequantization gives.
 *
 * Block layouts (ggml-common.h; QK_K = 256):
 *   Q4_0   f16 d, u8 qs[16]                        x = d * (q - 8)
 *   Q4_1   f16 d, f16 m, u8 qs[16]                 x = d * q + m
 *   Q5_0   f16 d, u8 qh[4], u8 qs[16]              x = d * (q - 16), q = nibble | high bit << 4
 *   Q5_1   f16 d, f16 m, u8 qh[4], u8 qs[16]       x = d * q + m
 *   Q8_0   f16 d, i8 qs[32]                        x = d * q
 *   Q8_1   f16 d, f16 s, i8 qs[32]                 x = d * q (s = d * sum(q) is not needed)
 *   Q2_K   u8 scales[16], u8 qs[64], f16 d, f16 dmin
 *   Q3_K   u8 hmask[32], u8 qs[64], u8 scales[12], f16 d
 *   Q4_K   f16 d, f16 dmin, u8 scales[12], u8 qs[128]
 *   Q5_K   f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
 *   Q6_K   u8 ql[128], u8 qh[64], i8 scales[16], f16 d
 *   Q8_K   f32 d, i8 qs[256], i16 bsums[16]        x = d * q
 *   IQ4_NL f16 d, u8 qs[16]                        x = d * kvalues_iq4nl[q]
 *   IQ4_XS f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
 *   MXFP4  u8 e (E8M0), u8 qs[16]                  x = e2m1(q) * 2^(e - 127)
 * In the 32-element formats, byte j holds element j in its low nibble and element j + 16 in its
 * high nibble; in Q5_0/Q5_1 bit j of qh (a little-endian u32) is element j's fifth bit.
 */

static float f16(const uint8_t *p)
{
	uint32_t h = (uint32_t)p[0] | (uint32_t)p[1] << 8;
	uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | man << 13;
	} else if (exp) {
		bits = sign | (exp + 112) << 23 | man << 13;
	} else if (!man) {
		bits = sign;
	} else {
		/* Subnormal half: normalise it, every f16 subnormal is a normal f32. */
		uint32_t e = 113;

		while (!(man & 0x400)) {
			man <<= 1;
			e--;
		}
		bits = sign | e << 23 | (man & 0x3ff) << 13;
	}
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static float f32le(const uint8_t *p)
{
	uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			(uint32_t)p[3] << 24;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

static void dq_q4_0(const uint8_t *b, float *y)
{
	const float d = f16(b);
	const uint8_t *qs = b + 2;

	for (int j = 0; j < 16; j++) {
		y[j] = ((qs[j] & 0xf) - 8) * d;
		y[j + 16] = ((qs[j] >> 4) - 8) * d;
	}
}

static void dq_q4_1(const uint8_t *b, float *y)
{
	const float d = f16(b), m = f16(b + 2);
	const uint8_t *qs = b + 4;

	for (int j = 0; j < 16; j++) {
		y[j] = (qs[j] & 0xf) * d + m;
		y[j + 16] = (qs[j] >> 4) * d + m;
	}
}

static void dq_q5_0(const uint8_t *b, float *y)
{
	const float d = f16(b);
	const uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 |
			    (uint32_t)b[5] << 24;
	const uint8_t *qs = b + 6;

	for (int j = 0; j < 16; j++) {
		int lo = (qs[j] & 0xf) | ((qh >> j) & 1) << 4;
		int hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;

		y[j] = (lo - 16) * d;
		y[j + 16] = (hi - 16) * d;
	}
}

static void dq_q5_1(const uint8_t *b, float *y)
{
	const float d = f16(b), m = f16(b + 2);
	const uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 |
			    (uint32_t)b[7] << 24;
	const uint8_t *qs = b + 8;

	for (int j = 0; j < 16; j++) {
		int lo = (qs[j] & 0xf) | ((qh >> j) & 1) << 4;
		int hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;

		y[j] = lo * d + m;
		y[j + 16] = hi * d + m;
	}
}

static void dq_q8_0(const uint8_t *b, float *y)
{
	const float d = f16(b);

	for (int j = 0; j < 32; j++)
		y[j] = (int8_t)b[2 + j] * d;
}

static void dq_q8_1(const uint8_t *b, float *y)
{
	const float d = f16(b);

	for (int j = 0; j < 32; j++)
		y[j] = (int8_t)b[4 + j] * d;
}

/*
 * Q2_K: 16 sub-blocks of 16. Byte scales[i] holds sub-block i's scale (low nibble) and min (high
 * nibble). The 256 elements are two halves of 128; in half n, qs[32n .. 32n+32) hold four 2-bit
 * planes (shift 0, 2, 4, 6), plane j covering elements 128n + 32j .. +32.
 */
static void dq_q2_k(const uint8_t *b, float *y)
{
	const uint8_t *scales = b, *qs = b + 16;
	const float d = f16(b + 80), dmin = f16(b + 82);

	for (int n = 0; n < 2; n++) {
		const uint8_t *q = qs + 32 * n;

		for (int j = 0; j < 4; j++) {
			for (int h = 0; h < 2; h++) {
				uint8_t sc = scales[8 * n + 2 * j + h];
				float dl = d * (sc & 0xf), ml = dmin * (sc >> 4);

				for (int l = 0; l < 16; l++)
					*y++ = dl * ((q[16 * h + l] >> (2 * j)) & 3) - ml;
			}
		}
	}
}

/*
 * Q3_K: 16 sub-blocks of 16, each with a signed 6-bit scale (stored + 32): low 4 bits in
 * scales[i] (i < 8) or the high nibble of scales[i - 8], high 2 bits at bit 2*(i/4) of
 * scales[8 + i%4]. Quants: 2 low bits laid out as in Q2_K, plus one bit in hmask[0..32) (bit
 * 4n + j for plane j of half n); a clear bit subtracts 4.
 */
static void dq_q3_k(const uint8_t *b, float *y)
{
	const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
	const float d = f16(b + 108);
	int8_t scale[16];

	for (int i = 0; i < 16; i++) {
		int lo = i < 8 ? sc[i] & 0xf : sc[i - 8] >> 4;
		int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;

		scale[i] = (int8_t)((lo | hi << 4) - 32);
	}
	for (int n = 0; n < 2; n++) {
		const uint8_t *q = qs + 32 * n;

		for (int j = 0; j < 4; j++) {
			const uint8_t m = (uint8_t)(1u << (4 * n + j));

			for (int h = 0; h < 2; h++) {
				float dl = d * scale[8 * n + 2 * j + h];

				for (int l = 0; l < 16; l++) {
					int v = (q[16 * h + l] >> (2 * j)) & 3;

					if (!(hmask[16 * h + l] & m))
						v -= 4;
					*y++ = dl * v;
				}
			}
		}
	}
}

/*
 * The 6-bit scales and mins of Q4_K/Q5_K's eight sub-blocks, packed in 12 bytes: for j < 4,
 * scale = s[j] & 63 and min = s[j + 4] & 63; for j >= 4 the low 4 bits come from s[j + 4] (scale
 * low nibble, min high nibble) and the top 2 bits from bits 6-7 of s[j - 4] (scale) and s[j] (min).
 */
static void scale_min_k4(int j, const uint8_t *s, uint8_t *ret_sc, uint8_t *ret_m)
{
	if (j < 4) {
		*ret_sc = s[j] & 63;
		*ret_m = s[j + 4] & 63;
	} else {
		*ret_sc = (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
		*ret_m = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
	}
}

/* Q4_K: eight sub-blocks of 32; qs[32p .. 32p+32) holds sub-block 2p (low) and 2p+1 (high). */
static void dq_q4_k(const uint8_t *b, float *y)
{
	const float d = f16(b), dmin = f16(b + 2);
	const uint8_t *scales = b + 4, *qs = b + 16;

	for (int p = 0; p < 4; p++) {
		const uint8_t *q = qs + 32 * p;
		uint8_t sc, m;
		float d1, m1, d2, m2;

		scale_min_k4(2 * p, scales, &sc, &m);
		d1 = d * sc;
		m1 = dmin * m;
		scale_min_k4(2 * p + 1, scales, &sc, &m);
		d2 = d * sc;
		m2 = dmin * m;
		for (int l = 0; l < 32; l++)
			*y++ = d1 * (q[l] & 0xf) - m1;
		for (int l = 0; l < 32; l++)
			*y++ = d2 * (q[l] >> 4) - m2;
	}
}

/* Q5_K: as Q4_K, plus a fifth bit per element: sub-block s takes bit s of qh[l]. */
static void dq_q5_k(const uint8_t *b, float *y)
{
	const float d = f16(b), dmin = f16(b + 2);
	const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;

	for (int p = 0; p < 4; p++) {
		const uint8_t *q = qs + 32 * p;
		uint8_t sc, m;
		float d1, m1, d2, m2;

		scale_min_k4(2 * p, scales, &sc, &m);
		d1 = d * sc;
		m1 = dmin * m;
		scale_min_k4(2 * p + 1, scales, &sc, &m);
		d2 = d * sc;
		m2 = dmin * m;
		for (int l = 0; l < 32; l++)
			*y++ = d1 * ((q[l] & 0xf) + ((qh[l] >> (2 * p)) & 1) * 16) - m1;
		for (int l = 0; l < 32; l++)
			*y++ = d2 * ((q[l] >> 4) + ((qh[l] >> (2 * p + 1)) & 1) * 16) - m2;
	}
}

/*
 * Q6_K: 16 sub-blocks of 16 with int8 scales; quants are 6 bits (stored + 32). In half n (128
 * elements), element l + 32k (k = 0..3) takes its low 4 bits from ql[64n + l] (k = 0, 2) or
 * ql[64n + 32 + l] (k = 1, 3), low nibble for k < 2, high for k >= 2, and its top 2 bits from
 * bits 2k..2k+1 of qh[32n + l]. Its scale is scales[8n + l/16 + 2k].
 */
static void dq_q6_k(const uint8_t *b, float *y)
{
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	const float d = f16(b + 208);

	for (int n = 0; n < 2; n++) {
		const uint8_t *l4 = ql + 64 * n, *h2 = qh + 32 * n;
		const int8_t *s = sc + 8 * n;

		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((l4[l] & 0xf) | ((h2[l] >> 0) & 3) << 4) - 32;
			int q2 = ((l4[l + 32] & 0xf) | ((h2[l] >> 2) & 3) << 4) - 32;
			int q3 = ((l4[l] >> 4) | ((h2[l] >> 4) & 3) << 4) - 32;
			int q4 = ((l4[l + 32] >> 4) | ((h2[l] >> 6) & 3) << 4) - 32;

			y[128 * n + l] = d * s[is] * q1;
			y[128 * n + l + 32] = d * s[is + 2] * q2;
			y[128 * n + l + 64] = d * s[is + 4] * q3;
			y[128 * n + l + 96] = d * s[is + 6] * q4;
		}
	}
}

static void dq_q8_k(const uint8_t *b, float *y)
{
	const float d = f32le(b);

	for (int j = 0; j < 256; j++)
		y[j] = d * (int8_t)b[4 + j];
}

/* The 16 non-uniform levels of IQ4_NL and IQ4_XS. */
static const int8_t iq4_levels[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

static void dq_iq4_nl(const uint8_t *b, float *y)
{
	const float d = f16(b);
	const uint8_t *qs = b + 2;

	for (int j = 0; j < 16; j++) {
		y[j] = d * iq4_levels[qs[j] & 0xf];
		y[j + 16] = d * iq4_levels[qs[j] >> 4];
	}
}

/*
 * IQ4_XS: eight sub-blocks of 32 with 6-bit scales (stored + 32): low 4 bits in nibble ib%2 of
 * scales_l[ib/2], high 2 bits at bit 2*ib of scales_h. Each sub-block's 16 bytes are laid out as
 * an IQ4_NL block's.
 */
static void dq_iq4_xs(const uint8_t *b, float *y)
{
	const float d = f16(b);
	const uint32_t sh = (uint32_t)b[2] | (uint32_t)b[3] << 8;
	const uint8_t *sl = b + 4, *qs = b + 8;

	for (int ib = 0; ib < 8; ib++) {
		int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xf) | ((sh >> (2 * ib)) & 3) << 4;
		float dl = d * (ls - 32);
		const uint8_t *q = qs + 16 * ib;

		for (int j = 0; j < 16; j++) {
			y[32 * ib + j] = dl * iq4_levels[q[j] & 0xf];
			y[32 * ib + j + 16] = dl * iq4_levels[q[j] >> 4];
		}
	}
}

/*
 * MXFP4 (OCP microscaling): E2M1 elements with a shared E8M0 scale 2^(e - 127). Levels are kept
 * doubled as integers and the scale halved, so e = 255 still gives a finite 2^127 step as in
 * ggml, and -0 decodes as +0 as it does there.
 */
static void dq_mxfp4(const uint8_t *b, float *y)
{
	static const int8_t levels2[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };
	const uint8_t e = b[0];
	const uint8_t *qs = b + 1;
	uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23; /* 2^(e - 128) */
	float half;

	memcpy(&half, &bits, sizeof(half));
	for (int j = 0; j < 16; j++) {
		y[j] = levels2[qs[j] & 0xf] * half;
		y[j + 16] = levels2[qs[j] >> 4] * half;
	}
}

struct kernel {
	enum wd_dtype type;
	void (*fn)(const uint8_t *b, float *y);
};

static const struct kernel kernels[] = {
	{ WD_Q4_0, dq_q4_0 },     { WD_Q4_1, dq_q4_1 },     { WD_Q5_0, dq_q5_0 },
	{ WD_Q5_1, dq_q5_1 },     { WD_Q8_0, dq_q8_0 },     { WD_Q8_1, dq_q8_1 },
	{ WD_Q2_K, dq_q2_k },     { WD_Q3_K, dq_q3_k },     { WD_Q4_K, dq_q4_k },
	{ WD_Q5_K, dq_q5_k },     { WD_Q6_K, dq_q6_k },     { WD_Q8_K, dq_q8_k },
	{ WD_IQ4_NL, dq_iq4_nl }, { WD_IQ4_XS, dq_iq4_xs }, { WD_MXFP4, dq_mxfp4 },
};

static const struct kernel *kernel_for(enum wd_dtype t)
{
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++)
		if (kernels[i].type == t)
			return &kernels[i];
	return NULL;
}

bool wd_dequant_supported(enum wd_dtype t)
{
	return kernel_for(t) != NULL;
}

int wd_dequant_f32(enum wd_dtype t, const void *blocks, size_t nblocks, float *out)
{
	const struct kernel *k = kernel_for(t);
	const struct wd_dtype_info *info = wd_dtype_info(t);
	const uint8_t *b = blocks;

	if (!k || !info)
		return -WEIGHTD_E_UNSUPPORTED_CAST;
	for (size_t i = 0; i < nblocks; i++) {
		k->fn(b, out);
		b += info->block_bytes;
		out += info->block_elems;
	}
	return 0;
}
