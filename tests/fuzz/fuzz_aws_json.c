/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_aws_json.c - feeds arbitrary bytes, as a container credentials endpoint's or IMDS's answer (JSON), to wd_aws_parse_json (src/aws_parse.c). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aws_parse.h"

/* A kept value: terminated inside its buffer, visible ASCII only (it becomes a header). */
static void check_value(const char *s, size_t cap, int may_be_empty)
{
	size_t n = strnlen(s, cap);

	if (n == cap || (n == 0 && !may_be_empty))
		__builtin_trap();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wd_aws_parsed p;
	char reason[WD_AWS_REASON_MAX];
	int rc;

	memset(&p, 0x5a, sizeof(p)); /* what a failure leaves must be wiped, not stale */
	rc = wd_aws_parse_json((const char *)data, size, &p, reason, sizeof(reason));
	if (strnlen(reason, sizeof(reason)) == sizeof(reason))
		__builtin_trap();
	for (const char *q = reason; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			__builtin_trap();
	if (rc == 0) {
		check_value(p.access_key, sizeof(p.access_key), 0);
		check_value(p.secret_key, sizeof(p.secret_key), 0);
		check_value(p.token, sizeof(p.token), 1);
		if (p.expires < 0)
			__builtin_trap();
	} else {
		for (size_t i = 0; i < sizeof(p); i++) /* a failure keeps no key, secret or token */
			if (((const unsigned char *)&p)[i] != 0)
				__builtin_trap();
	}
	return 0;
}
