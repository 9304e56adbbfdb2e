/* SPDX-License-Identifier: Apache-2.0 */
/* convert.h - element-wise dtype conversion kernels (casts), vectorised with a scalar twin. */
#ifndef WD_CONVERT_H
#define WD_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "dtype.h"

/*
 * Rules (documented in docs/recipes.md, "Casts"):
 * - float -> float rounds once to nearest, ties to even, straight from the source value (F64 -> F16
 *   does not pass through F32); +-inf and signed zeros are kept; subnormals are produced and
 *   consumed exactly (never flushed to zero). For non-NaN inputs F32 -> BF16 equals c10's
 *   round_to_nearest_even ((bits + 0x7FFF + lsb) >> 16), F32 -> F16 equals F16C.
 * - NaN stays NaN with its sign. For F64/F32/F16/BF16 targets it is quiet and keeps the top bits of
 *   the source fraction (truncated or zero-extended) with the quiet bit set, as F16C, VCVTNEPS2BF16
 *   and CVTSD2SS do (c10 instead writes a canonical 0x7FC0 for bf16 and 0x7E00 for f16). For FP8
 *   targets it is S.1111.111 (F8_E4M3) or S.11111.11 (F8_E5M2), as PyTorch.
 * - FP8 out of range follows PyTorch (c10 Float8_e4m3fn / Float8_e5m2 from float), i.e. rounding as
 *   if the exponent were unbounded: F8_E4M3 is the "fn" variant (no inf, NaN = S.1111.111, max 448):
 *   a result above 448 (|x| > 464; 464 ties to 448) and +-inf become NaN with the sign kept.
 *   F8_E5M2 (has inf, max 57344): |x| >= 61440 (the tie goes to the even code, inf) becomes +-inf.
 * - float -> int truncates toward zero and saturates to the integer range (+-inf too); NaN -> 0.
 *   (PyTorch leaves out-of-range float -> int undefined.)
 * - int -> float rounds once to nearest even from the exact integer (I64 -> F32 does not pass
 *   through F64). int -> int wraps modulo 2^bits (two's complement, as C's and PyTorch's casts).
 * - BOOL as a target: nonzero (NaN included, -0.0 not) -> 1; as a source: nonzero byte -> 1.
 *   Same type to same type is a byte copy.
 * The vector kernels give the scalar kernels' bits; those that use the FPU assume the default
 * floating-point environment (round to nearest, no FTZ/DAZ), which weightd never changes.
 */

/* True when a cast from `from` to `to` exists (element types only; same type is a copy). */
bool wd_convert_supported(enum wd_dtype from, enum wd_dtype to);

/*
 * Convert n elements from src (dtype `from`) to dst (dtype `to`). Buffers must not overlap; no
 * alignment is required; elements are in host byte order. Uses the fastest kernel the CPU has
 * (chosen once at run time; safe from any thread). An unsupported pair writes nothing: callers
 * check wd_convert_supported first.
 */
void wd_convert(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n);

/* The portable scalar kernels only: bit-identical results to wd_convert (tests compare them). */
void wd_convert_scalar(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n);

/* Which vector path is active ("avx512f+avx512bf16", "avx512f", "avx2+f16c" or "scalar"), for logs
 * and benchmarks. */
const char *wd_convert_isa(void);

/*
 * Kernel sets, slowest first: "scalar", "avx2" (AVX2 + F16C), "avx512" (AVX-512F), "avx512bf16"
 * (AVX-512F with VCVTNEPS2BF16 for f32 -> bf16). By default wd_convert uses the fastest the CPU
 * has; the environment variable WEIGHTD_CPU_KERNELS, read at the first conversion, caps the
 * choice at the named set (a set the CPU lacks falls back to the fastest one below it; an unknown
 * name or "auto" changes nothing).
 *
 * wd_convert_select makes the named set active now, for tests and benchmarks that run every set
 * in one process ("auto" restores the default choice): 0, -WEIGHTD_E_INVALID_ARGUMENT for an
 * unknown name, -WEIGHTD_E_UNSUPPORTED when the CPU lacks it. It must not race with conversions on
 * other threads.
 */
int wd_convert_select(const char *name);

/* Scalar helpers, exposed for tests and for dequantization. */
float wd_f16_to_f32(unsigned short h);
unsigned short wd_f32_to_f16(float f);
float wd_bf16_to_f32(unsigned short b);
unsigned short wd_f32_to_bf16(float f);

#endif
