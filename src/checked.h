/* SPDX-License-Identifier: Apache-2.0 */
/* checked.h - overflow-checked arithmetic on sizes, shapes and offsets from files and frames. */
#ifndef WD_CHECKED_H
#define WD_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns false on overflow and leaves *ret untouched. */
static inline bool wd_add_u64(uint64_t a, uint64_t b, uint64_t *ret)
{
	uint64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return false;
	*ret = r;
	return true;
}

static inline bool wd_mul_u64(uint64_t a, uint64_t b, uint64_t *ret)
{
	uint64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return false;
	*ret = r;
	return true;
}

/* Product of shape[0..ndim) (1 for ndim == 0). */
static inline bool wd_shape_elems(const uint64_t *shape, int ndim, uint64_t *ret)
{
	uint64_t n = 1;
	for (int i = 0; i < ndim; i++)
		if (!wd_mul_u64(n, shape[i], &n))
			return false;
	*ret = n;
	return true;
}

#endif
