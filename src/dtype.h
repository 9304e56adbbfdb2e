/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.h - the element and block types weightd knows: names, sizes, and the GGUF type numbers. */
#ifndef WD_DTYPE_H
#define WD_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * One enum for every type a checkpoint can hold. Element types (block_elems == 1) come from
 * safetensors and GGUF; block types are ggml's quantized formats, whose bytes are kept packed.
 * Names are the safetensors spellings for element types ("F16", "BF16", "F8_E4M3") and ggml's for
 * block types ("Q4_K", "IQ2_XXS", "MXFP4").
 */
enum wd_dtype {
	WD_DTYPE_INVALID = 0,
	WD_BOOL, WD_U8, WD_I8, WD_U16, WD_I16, WD_F16, WD_BF16, WD_U32, WD_I32, WD_F32,
	WD_U64, WD_I64, WD_F64, WD_F8_E4M3, WD_F8_E5M2,
	/* ggml block types */
	WD_Q4_0, WD_Q4_1, WD_Q5_0, WD_Q5_1, WD_Q8_0, WD_Q8_1,
	WD_Q2_K, WD_Q3_K, WD_Q4_K, WD_Q5_K, WD_Q6_K, WD_Q8_K,
	WD_IQ2_XXS, WD_IQ2_XS, WD_IQ3_XXS, WD_IQ1_S, WD_IQ4_NL, WD_IQ3_S, WD_IQ2_S, WD_IQ4_XS,
	WD_IQ1_M, WD_TQ1_0, WD_TQ2_0, WD_MXFP4,
	WD_DTYPE_COUNT
};

struct wd_dtype_info {
	const char *name;
	uint32_t block_elems;  /* elements per block; 1 for element types */
	uint32_t block_bytes;  /* bytes per block; the element size for element types */
	int ggml_type;         /* GGUF/ggml type number, -1 if GGUF has none */
	bool is_float;
	bool is_signed;
};

/* Table entry for a dtype, or NULL for WD_DTYPE_INVALID / out of range. */
const struct wd_dtype_info *wd_dtype_info(enum wd_dtype t);

/* Name ("BF16"), or "INVALID". */
const char *wd_dtype_name(enum wd_dtype t);

/* Parse a name (exact, case-sensitive); WD_DTYPE_INVALID if unknown. */
enum wd_dtype wd_dtype_from_name(const char *name);

/* Map a ggml type number; WD_DTYPE_INVALID if unknown or removed from ggml. */
enum wd_dtype wd_dtype_from_ggml(uint32_t ggml_type);

/* True for element types (one element per "block"). */
bool wd_dtype_is_element(enum wd_dtype t);

/* Element size in bytes for element types, 0 for block types. */
size_t wd_dtype_size(enum wd_dtype t);

/*
 * Bytes needed for `nelems` elements; fails (returns false) when nelems is not a whole number of
 * blocks or the product overflows.
 */
bool wd_dtype_bytes(enum wd_dtype t, uint64_t nelems, uint64_t *ret_bytes);

#endif
