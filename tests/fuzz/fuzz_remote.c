/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_remote.c - feeds arbitrary bytes, as an object store's answer, to the parsers of
 * src/remote.c: header lines (status, ETag, version id, Content-Range) and an S3 error body. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote.h"

/* The input is header lines up to an empty line, then the body. What the parsers keep must stay
 * inside their buffers, terminated, and a range they accept must lie inside its total. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wd_remote_answer a = { 0 };
	const char *p = (const char *)data, *end = p + size;
	char reason[300], *body;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		wd_remote_answer_header(&a, p, n);
		if (strnlen(a.etag, sizeof(a.etag)) == sizeof(a.etag) ||
		    strnlen(a.version, sizeof(a.version)) == sizeof(a.version))
			__builtin_trap();
		if (a.have_range && a.range_start != UINT64_MAX && a.range_start >= a.range_total)
			__builtin_trap();
		p += n;
		if (n <= 2 && (n == 1 || p[-2] == '\r'))
			break; /* the empty line: the body follows */
	}
	body = malloc((size_t)(end - p) + 1);
	if (!body)
		return 0;
	memcpy(body, p, (size_t)(end - p));
	body[end - p] = '\0';
	wd_remote_s3_reason(body, reason, sizeof(reason));
	if (strnlen(reason, sizeof(reason)) == sizeof(reason))
		__builtin_trap();
	for (const char *q = reason; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			__builtin_trap();
	free(body);
	return 0;
}
