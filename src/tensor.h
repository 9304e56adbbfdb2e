/* SPDX-License-Identifier: Apache-2.0 */
/* tensor.h - the tensor table and metadata every checkpoint parser produces. */
#ifndef WD_TENSOR_H
#define WD_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "wd_limits.h"

/*
 * One stored tensor. shape is row-major, outermost first (GGUF's innermost-first dims are reversed
 * by its parser). offset is absolute within files[file] of the source; nbytes is exact.
 */
struct wd_tensor_info {
	char *name;
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint32_t file;
	uint64_t offset;
	uint64_t nbytes;
};

/* One metadata entry, rendered to text (arrays summarised) for describe. type is e.g. "string",
 * "u32", "array[string]". */
struct wd_meta {
	char *key;
	char *value;
	char *type;
};

/* A growable table; the parsers fill it, wd_tensor_table_free releases everything. */
struct wd_tensor_table {
	struct wd_tensor_info *tensors;
	size_t n_tensors, cap_tensors;
	struct wd_meta *meta;
	size_t n_meta, cap_meta;
};

void wd_tensor_table_init(struct wd_tensor_table *t);
void wd_tensor_table_free(struct wd_tensor_table *t);
/* Append (copies strings). Return 0 or -WEIGHTD_E_RESOURCE_EXHAUSTED on allocation failure. */
int wd_tensor_table_add(struct wd_tensor_table *t, const struct wd_tensor_info *info);
int wd_tensor_table_add_meta(struct wd_tensor_table *t, const char *key, const char *value,
			     const char *type);
/* Linear-time lookup helpers are in source.h; this table is unsorted, in file order. */

#endif
