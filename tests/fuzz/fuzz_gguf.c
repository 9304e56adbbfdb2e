/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_gguf.c - the GGUF reader on arbitrary bytes (the input is a whole file), and what it admits
 * checked for the promises wd_gguf_parse makes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "dequant.h"
#include "dtype.h"
#include "error.h"
#include "gguf.h"
#include "tensor.h"

#define CHECK(cond)                      \
	do {                             \
		if (!(cond))             \
			__builtin_trap(); \
	} while (0)

static int cmp_u64(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return *x < *y ? -1 : *x > *y;
}

/* An admitted table: every tensor sized by its shape, inside the file, and none overlapping. */
static void check_table(const struct wd_tensor_table *t, const uint8_t *data, size_t size)
{
	uint64_t *spans = NULL;
	size_t n_spans = 0;

	for (size_t i = 0; i < t->n_meta; i++)
		CHECK(t->meta[i].key[0] && t->meta[i].value && t->meta[i].type[0]);
	if (t->n_tensors)
		spans = malloc(2 * t->n_tensors * sizeof(*spans));
	CHECK(!t->n_tensors || spans);
	for (size_t i = 0; i < t->n_tensors; i++) {
		const struct wd_tensor_info *ti = &t->tensors[i];
		uint64_t n, bytes;

		CHECK(ti->name[0] && ti->ndim >= 0 && ti->ndim <= 4);
		/* a zero dimension is 0 elements, whatever the others (the parser admits those) */
		n = 1;
		for (int k = 0; k < ti->ndim; k++)
			if (ti->shape[k] == 0)
				n = 0;
		CHECK(n == 0 || wd_shape_elems(ti->shape, ti->ndim, &n));
		CHECK(wd_dtype_bytes(ti->dtype, n, &bytes) && bytes == ti->nbytes);
		CHECK(ti->offset <= size && ti->nbytes <= size - ti->offset);
		if (ti->nbytes) { /* a 0-byte tensor occupies nothing, wherever it points */
			spans[2 * n_spans] = ti->offset;
			spans[2 * n_spans + 1] = ti->offset + ti->nbytes;
			n_spans++;
		}
		if (wd_dequant_supported(ti->dtype)) {
			/* decode the first few blocks straight from the file bytes */
			const struct wd_dtype_info *di = wd_dtype_info(ti->dtype);
			size_t nb = ti->nbytes / di->block_bytes;
			float out[4 * 256];

			if (nb > 4)
				nb = 4;
			CHECK(wd_dequant_f32(ti->dtype, data + ti->offset, nb, out) == 0);
		}
	}
	/* sorted by start, each span ends before the next starts */
	if (n_spans > 1)
		qsort(spans, n_spans, 2 * sizeof(*spans), cmp_u64);
	for (size_t i = 1; i < n_spans; i++)
		CHECK(spans[2 * i] >= spans[2 * i - 1]);
	free(spans);
}

static void run(const uint8_t *data, size_t size, size_t given, const struct wd_limits *lim)
{
	struct wd_tensor_table t;
	weightd_error err;
	int rc;

	wd_tensor_table_init(&t);
	wd_error_clear(&err);
	rc = wd_gguf_parse(data, given, size, 0, lim, &t, &err);
	if (rc == 0) {
		check_table(&t, data, size);
	} else {
		/* refused with a reason, and nothing left behind */
		CHECK(rc == -WEIGHTD_E_BAD_CHECKPOINT || rc == -WEIGHTD_E_UNSUPPORTED ||
		      rc == -WEIGHTD_E_LIMIT_EXCEEDED || rc == -WEIGHTD_E_RESOURCE_EXHAUSTED);
		CHECK(err.code == -rc && err.message[0]);
		CHECK(t.n_tensors == 0 && t.n_meta == 0);
	}
	wd_tensor_table_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;

	run(data, size, size, &lim);
	/* the caller handed over only part of the file */
	run(data, size, size / 2, &lim);
	/* tight limits, to reach every limit check */
	lim.max_header_bytes = size / 2 + 1;
	lim.max_tensors = 4;
	lim.max_metadata = 4;
	lim.max_string = 64;
	lim.max_array = 64;
	lim.max_array_depth = 2;
	run(data, size, size, &lim);
	return 0;
}
