/* SPDX-License-Identifier: Apache-2.0 */
/* gguf.h - validating a GGUF file's header, metadata and tensor infos without touching payload. */
#ifndef WD_GGUF_H
#define WD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "wd_limits.h"
#include "tensor.h"

/*
 * Parse a GGUF (v2 or v3, little-endian) header from `buf` (the start of the file, buf_len bytes;
 * the whole header region must be present, else -WEIGHTD_E_BAD_CHECKPOINT "truncated") of a file of
 * file_size bytes. Appends tensors (dims reversed to row-major, outermost first; offsets absolute;
 * nbytes from the block geometry) with file index `file`, and every metadata key as a wd_meta with
 * its value rendered as text (arrays longer than 16 elements summarised as "[N x type]").
 * Returns 0, or -WEIGHTD_E_BAD_CHECKPOINT / -WEIGHTD_E_UNSUPPORTED (unknown tensor type, by number;
 * big-endian file, by name) / -WEIGHTD_E_LIMIT_EXCEEDED with a sentence naming what was wrong.
 */
int wd_gguf_parse(const uint8_t *buf, size_t buf_len, uint64_t file_size, uint32_t file,
		  const struct wd_limits *lim, struct wd_tensor_table *table, weightd_error *err);

/* Read the header of an open file with pread (growing the read until the header fits, within
 * lim->max_header_bytes) and parse it as above. */
int wd_gguf_read(int fd, uint64_t file_size, uint32_t file, const struct wd_limits *lim,
		 struct wd_tensor_table *table, weightd_error *err);

/* Reads exactly n bytes at off into buf: 0, or a negative code with err set. */
typedef int wd_gguf_reader_fn(void *ctx, uint8_t *buf, uint64_t n, uint64_t off,
			      weightd_error *err);
/* wd_gguf_read through `reader` (a remote object's range reads): the same growing reads. */
int wd_gguf_read_with(wd_gguf_reader_fn *reader, void *ctx, uint64_t file_size, uint32_t file,
		      const struct wd_limits *lim, struct wd_tensor_table *table,
		      weightd_error *err);

#endif
