/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.c - the dtype table: names, block geometry, and ggml type numbers. */
#include "dtype.h"

#include <string.h>

#include "checked.h"

/*
 * Block geometry of ggml's quantized types follows ggml's published block structs (ggml-common.h;
 * each row's comment lists the struct's fields, whose sizes add up to block_bytes) and the type
 * numbers ggml.h / docs/gguf.md assign: e.g. block_q4_0 = f16 scale + 16 bytes of nibbles for 32
 * elements; K-quants, IQ and TQ types use 256-element super-blocks. Numbers ggml removed (4, 5,
 * 31-33, 36-38) have no row, so such tensors are refused rather than guessed.
 */
static const struct wd_dtype_info dtypes[WD_DTYPE_COUNT] = {
	[WD_BOOL] = { "BOOL", 1, 1, -1, false, false },
	[WD_U8] = { "U8", 1, 1, -1, false, false },
	[WD_I8] = { "I8", 1, 1, 24, false, true },
	[WD_U16] = { "U16", 1, 2, -1, false, false },
	[WD_I16] = { "I16", 1, 2, 25, false, true },
	[WD_F16] = { "F16", 1, 2, 1, true, true },
	[WD_BF16] = { "BF16", 1, 2, 30, true, true },
	[WD_U32] = { "U32", 1, 4, -1, false, false },
	[WD_I32] = { "I32", 1, 4, 26, false, true },
	[WD_F32] = { "F32", 1, 4, 0, true, true },
	[WD_U64] = { "U64", 1, 8, -1, false, false },
	[WD_I64] = { "I64", 1, 8, 27, false, true },
	[WD_F64] = { "F64", 1, 8, 28, true, true },
	[WD_F8_E4M3] = { "F8_E4M3", 1, 1, -1, true, true },
	[WD_F8_E5M2] = { "F8_E5M2", 1, 1, -1, true, true },
	[WD_Q4_0] = { "Q4_0", 32, 18, 2, true, true }, /* f16 d, qs[16] */
	[WD_Q4_1] = { "Q4_1", 32, 20, 3, true, true }, /* f16 d, m, qs[16] */
	[WD_Q5_0] = { "Q5_0", 32, 22, 6, true, true }, /* f16 d, qh[4], qs[16] */
	[WD_Q5_1] = { "Q5_1", 32, 24, 7, true, true }, /* f16 d, m, qh[4], qs[16] */
	[WD_Q8_0] = { "Q8_0", 32, 34, 8, true, true }, /* f16 d, i8 qs[32] */
	[WD_Q8_1] = { "Q8_1", 32, 36, 9, true, true }, /* f16 d, s, i8 qs[32] */
	[WD_Q2_K] = { "Q2_K", 256, 84, 10, true, true }, /* scales[16], qs[64], f16 d, dmin */
	[WD_Q3_K] = { "Q3_K", 256, 110, 11, true, true }, /* hmask[32], qs[64], scales[12], f16 d */
	[WD_Q4_K] = { "Q4_K", 256, 144, 12, true, true }, /* f16 d, dmin, scales[12], qs[128] */
	[WD_Q5_K] = { "Q5_K", 256, 176, 13, true, true }, /* f16 d, dmin, scales[12], qh[32], qs[128] */
	[WD_Q6_K] = { "Q6_K", 256, 210, 14, true, true }, /* ql[128], qh[64], i8 scales[16], f16 d */
	[WD_Q8_K] = { "Q8_K", 256, 292, 15, true, true }, /* f32 d, i8 qs[256], i16 bsums[16] */
	[WD_IQ2_XXS] = { "IQ2_XXS", 256, 66, 16, true, true }, /* f16 d, u16 qs[32] */
	[WD_IQ2_XS] = { "IQ2_XS", 256, 74, 17, true, true }, /* f16 d, u16 qs[32], scales[8] */
	[WD_IQ3_XXS] = { "IQ3_XXS", 256, 98, 18, true, true }, /* f16 d, qs[96] */
	[WD_IQ1_S] = { "IQ1_S", 256, 50, 19, true, true }, /* f16 d, qs[32], u16 qh[8] */
	[WD_IQ4_NL] = { "IQ4_NL", 32, 18, 20, true, true }, /* f16 d, qs[16] */
	[WD_IQ3_S] = { "IQ3_S", 256, 110, 21, true, true }, /* f16 d, qs[64], qh[8], signs[32], sc[4] */
	[WD_IQ2_S] = { "IQ2_S", 256, 82, 22, true, true }, /* f16 d, qs[64], qh[8], scales[8] */
	[WD_IQ4_XS] = { "IQ4_XS", 256, 136, 23, true, true }, /* f16 d, u16 sc_h, sc_l[4], qs[128] */
	[WD_IQ1_M] = { "IQ1_M", 256, 56, 29, true, true }, /* qs[32], qh[16], scales[8] */
	[WD_TQ1_0] = { "TQ1_0", 256, 54, 34, true, true }, /* qs[48], qh[4], f16 d */
	[WD_TQ2_0] = { "TQ2_0", 256, 66, 35, true, true }, /* qs[64], f16 d */
	[WD_MXFP4] = { "MXFP4", 32, 17, 39, true, true }, /* E8M0 e, qs[16] */
};

const struct wd_dtype_info *wd_dtype_info(enum wd_dtype t)
{
	if ((int)t <= WD_DTYPE_INVALID || t >= WD_DTYPE_COUNT)
		return NULL;
	return &dtypes[t];
}

const char *wd_dtype_name(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return i ? i->name : "INVALID";
}

enum wd_dtype wd_dtype_from_name(const char *name)
{
	if (!name)
		return WD_DTYPE_INVALID;
	for (int t = 1; t < WD_DTYPE_COUNT; t++)
		if (strcmp(dtypes[t].name, name) == 0)
			return (enum wd_dtype)t;
	return WD_DTYPE_INVALID;
}

enum wd_dtype wd_dtype_from_ggml(uint32_t ggml_type)
{
	for (int t = 1; t < WD_DTYPE_COUNT; t++)
		if (dtypes[t].ggml_type >= 0 && (uint32_t)dtypes[t].ggml_type == ggml_type)
			return (enum wd_dtype)t;
	return WD_DTYPE_INVALID;
}

bool wd_dtype_is_element(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return i && i->block_elems == 1;
}

size_t wd_dtype_size(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return (i && i->block_elems == 1) ? i->block_bytes : 0;
}

bool wd_dtype_bytes(enum wd_dtype t, uint64_t nelems, uint64_t *ret_bytes)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	if (!i || nelems % i->block_elems)
		return false;
	return wd_mul_u64(nelems / i->block_elems, i->block_bytes, ret_bytes);
}
