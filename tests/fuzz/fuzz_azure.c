/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_azure.c - feeds arbitrary bytes, as Azure's answers, to the parsers of src/azure_parse.c:
 * the error XML's code and message, and a token endpoint's JSON. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "azure.h"

/* The same bytes go to both parsers. What they keep must stay inside their buffers, terminated
 * and printable; a token they accept must be a header value. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wd_azure_token_answer t;
	char reason[300];
	weightd_error err;

	wd_azure_error_reason((const char *)data, size, reason, sizeof(reason));
	if (strnlen(reason, sizeof(reason)) == sizeof(reason))
		__builtin_trap();
	for (const char *q = reason; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			__builtin_trap();
	if (wd_azure_token_parse((const char *)data, size, &t, &err) == 0) {
		if (strnlen(t.error, sizeof(t.error)) == sizeof(t.error))
			__builtin_trap();
		for (const char *q = t.error; *q; q++)
			if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
				__builtin_trap();
		for (const char *q = t.access_token; q && *q; q++)
			if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
				__builtin_trap();
		wd_azure_token_answer_clear(&t);
	}
	return 0;
}
