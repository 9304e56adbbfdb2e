/* convert.h - element-wise dtype conversion kernels (casts), vectorised with a scalar twin. */
#ifndef WD_CONVERT_H
#define WD_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "dtype.h"

/*
 * Rules (documented in README "Casts"): float->float rounds to nearest, ties to even; NaN stays NaN
 * (quiet, sign kept, payload truncated to what fits and kept non-zero); +-inf and signed zeros are
 * kept; subnormals are produced and consumed exactly. Values beyond an FP8 format's range follow
 * PyTorch: F8_E4M3 (the "fn" variant: no inf, NaN = S.1111.111, max 448) becomes NaN; F8_E5M2 (has
 * inf, max 57344) becomes inf after rounding. float->int truncates toward zero and saturates to
 * the integer range; NaN -> 0. int->float rounds to nearest even. int->int wraps modulo 2^bits
 * (two's complement, as C's and PyTorch's casts). BOOL: nonzero -> 1.
 */

/* True when a cast from `from` to `to` exists (element types only; same type is a copy). */
bool wd_convert_supported(enum wd_dtype from, enum wd_dtype to);

/*
 * Convert n elements from src (dtype `from`) to dst (dtype `to`). Buffers must not overlap; no
 * alignment is required. Uses the fastest kernel the CPU has (chosen once at run time).
 */
void wd_convert(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n);

/* The portable scalar kernels only: bit-identical results to wd_convert (tests compare them). */
void wd_convert_scalar(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n);

/* Which vector paths are active ("avx2+f16c", "avx512bf16", "scalar"), for logs and benchmarks. */
const char *wd_convert_isa(void);

/* Scalar helpers, exposed for tests and for dequantization. */
float wd_f16_to_f32(unsigned short h);
unsigned short wd_f32_to_f16(float f);
float wd_bf16_to_f32(unsigned short b);
unsigned short wd_f32_to_bf16(float f);

#endif
