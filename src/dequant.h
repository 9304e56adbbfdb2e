/* SPDX-License-Identifier: Apache-2.0 */
/* dequant.h - ggml quantized blocks to F32, following ggml's published block formats. */
#ifndef WD_DEQUANT_H
#define WD_DEQUANT_H

#include <stdbool.h>
#include <stddef.h>

#include "dtype.h"

/* True for the block types wd_dequant_f32 decodes (at least Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K
 * Q6_K). */
bool wd_dequant_supported(enum wd_dtype t);

/* Decode nblocks blocks of type t into nblocks * block_elems floats. Returns 0, or
 * -WEIGHTD_E_UNSUPPORTED_CAST for a type it cannot decode. */
int wd_dequant_f32(enum wd_dtype t, const void *blocks, size_t nblocks, float *out);

#endif
