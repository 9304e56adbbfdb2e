/* SPDX-License-Identifier: Apache-2.0 */
/* convert_kern.h - what convert.c (scalar kernels, run-time choice) and convert_x86.c (the AVX2
 * and AVX-512 kernels) share: the pairs with dedicated kernels and the kernel tables. Not for
 * other modules. */
#ifndef WD_CONVERT_KERN_H
#define WD_CONVERT_KERN_H

#include <stddef.h>

typedef void (*wd_convert_kern_fn)(const void *src, void *dst, size_t n);

enum wd_convert_pair { P_F32_BF16, P_BF16_F32, P_F16_F32, P_F32_F16, P_BF16_F16, P_F16_BF16,
		       P_F32_F64, P_F64_F32, P_COUNT };

/* Exact scalar kernels (convert.c); the vector kernels finish their tails with these. */
extern const wd_convert_kern_fn wd_convert_kern_scalar[P_COUNT];

#if defined(__x86_64__)
/* convert_x86.c: AVX2 + F16C, AVX-512F, and the single kernels that need AVX-512BW or
 * AVX-512 BF16 on top (convert.c picks them after checking the CPU). */
extern const wd_convert_kern_fn wd_convert_kern_avx2[P_COUNT];
extern const wd_convert_kern_fn wd_convert_kern_avx512[P_COUNT];
extern const wd_convert_kern_fn wd_convert_kern_avx512bw_bf16_f16;
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10) || \
	(defined(__clang__) && __clang_major__ >= 9)
#define WD_HAVE_AVX512BF16 1
extern const wd_convert_kern_fn wd_convert_kern_avx512bf16_f32_bf16;
#endif
#endif

#endif
