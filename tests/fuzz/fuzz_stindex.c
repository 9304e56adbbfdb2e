/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_stindex.c - feeds arbitrary bytes to the model.safetensors.index.json parser. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stindex.h"

/* A successful parse must only name acceptable shard files, each tensor mapped to one of them. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct wd_stindex idx;
	weightd_error err;

	lim.max_shards = 8;
	lim.max_tensors = 64;
	wd_error_clear(&err);
	if (wd_stindex_parse((const char *)data, size, &lim, &idx, &err) == 0) {
		if (idx.n_files > lim.max_shards || idx.n_tensors > lim.max_tensors)
			__builtin_trap();
		for (size_t i = 0; i < idx.n_files; i++)
			if (!idx.files[i][0] || strchr(idx.files[i], '/') || strstr(idx.files[i], ".."))
				__builtin_trap();
		for (size_t i = 0; i < idx.n_tensors; i++)
			if (idx.tensor_file[i] >= idx.n_files)
				__builtin_trap();
		wd_stindex_free(&idx);
	} else if (err.message[0] == '\0') {
		__builtin_trap();
	}
	return 0;
}
