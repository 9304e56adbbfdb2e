/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_safetensors.c - feeds arbitrary file bytes to the safetensors header parser. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "safetensors.h"

/*
 * The input is a whole file. It is parsed once with the default limits and once with small ones
 * (so the limit paths are reached with small inputs), and a successful table is checked against
 * the parser's own promises: in offset order, contiguous, inside the file.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct wd_limits def = WD_LIMITS_DEFAULT;
	struct wd_limits small = WD_LIMITS_DEFAULT;
	const struct wd_limits *lims[2] = { &def, &small };
	struct wd_tensor_table t;
	weightd_error err;
	uint64_t ds = 0;

	small.max_header_bytes = 256;
	small.max_tensors = 4;
	small.max_metadata = 2;
	small.max_string = 8;
	for (int l = 0; l < 2; l++) {
		wd_tensor_table_init(&t);
		wd_error_clear(&err);
		if (wd_safetensors_parse(data, size, size, 0, lims[l], &t, &ds, &err) == 0) {
			uint64_t pos = ds;
			for (size_t i = 0; i < t.n_tensors; i++) {
				if (t.tensors[i].offset != pos || t.tensors[i].nbytes > size - pos)
					__builtin_trap();
				pos += t.tensors[i].nbytes;
			}
			if (pos != size)
				__builtin_trap();
		} else if (err.message[0] == '\0' || memchr(err.message, '\0', sizeof(err.message)) == NULL) {
			__builtin_trap();
		}
		wd_tensor_table_free(&t);
	}
	return 0;
}
