/* SPDX-License-Identifier: Apache-2.0 */
/* stindex.h - model.safetensors.index.json: which shard file holds which tensor. */
#ifndef WD_STINDEX_H
#define WD_STINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "wd_limits.h"

struct wd_stindex {
	char **files;        /* distinct shard file names, in first-seen order */
	size_t n_files;
	char **tensors;      /* tensor names */
	uint32_t *tensor_file; /* index into files for each tensor */
	size_t n_tensors;
};

/*
 * Parse an index file's JSON text (`weight_map` object: tensor name -> shard file name; `metadata`
 * optional). Rejects: non-JSON, missing/ill-typed weight_map, duplicate keys, shard names that are
 * absolute, contain "..", a '/' (shards live beside the index) or are empty, more than
 * lim->max_shards files or lim->max_tensors tensors. Returns 0 or
 * -WEIGHTD_E_BAD_CHECKPOINT/-WEIGHTD_E_LIMIT_EXCEEDED.
 */
int wd_stindex_parse(const char *json, size_t len, const struct wd_limits *lim,
		     struct wd_stindex *ret, weightd_error *err);

void wd_stindex_free(struct wd_stindex *idx);

#endif
