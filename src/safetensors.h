/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.h - validating a safetensors header (8-byte length + JSON) without touching payload. */
#ifndef WD_SAFETENSORS_H
#define WD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "wd_limits.h"
#include "tensor.h"

/*
 * Parse and validate a safetensors header. `buf` holds the start of the file: at least the 8-byte
 * length and the JSON header it announces (buf_len may be larger; bytes past the header are ignored).
 * file_size is the whole file's size. On success appends every tensor to `table` (file index
 * `file`, offsets absolute in the file, in data-offset order) and `__metadata__` entries as metadata
 * of type "string", stores the header's total length (8 + JSON) in *ret_data_start, and returns 0.
 * On failure returns -WEIGHTD_E_BAD_CHECKPOINT (or -WEIGHTD_E_UNSUPPORTED for an unknown dtype,
 * -WEIGHTD_E_LIMIT_EXCEEDED for a limit) with a sentence in err naming the tensor and the rule
 * broken; `table` may then hold a partial prefix which the caller frees.
 *
 * Rules: header length within limits and within the file; a JSON object; no duplicate keys;
 * __metadata__ maps strings to strings; every entry has a known dtype, a shape of non-negative
 * integers (0-d allowed) and data_offsets [begin, end] whose length equals elements x dtype size
 * (overflow-checked); entries are contiguous, non-overlapping, and cover the data section exactly.
 */
int wd_safetensors_parse(const uint8_t *buf, size_t buf_len, uint64_t file_size, uint32_t file,
			 const struct wd_limits *lim, struct wd_tensor_table *table,
			 uint64_t *ret_data_start, weightd_error *err);

/* Read the header of an open file with pread and parse it as above. */
int wd_safetensors_read(int fd, uint64_t file_size, uint32_t file, const struct wd_limits *lim,
			struct wd_tensor_table *table, uint64_t *ret_data_start,
			weightd_error *err);

#endif
