/* SPDX-License-Identifier: Apache-2.0 */
/* aws_fuzz.h - what the AWS credential parsers' fuzzers check of any answer: a reason always
 * terminated and printable; on success, keys fit to become headers; on failure, nothing kept. */
#ifndef WD_AWS_FUZZ_H
#define WD_AWS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aws_parse.h"

/* A kept value: terminated inside its buffer, visible ASCII only (it becomes a header). */
static void aws_fuzz_check_value(const char *s, size_t cap, int may_be_empty)
{
	size_t n = strnlen(s, cap);

	if (n == cap || (n == 0 && !may_be_empty))
		__builtin_trap();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			__builtin_trap();
}

typedef int (*aws_fuzz_parser)(const char *body, size_t n, struct wd_aws_parsed *ret,
			       char *reason, size_t cap);

/* Feed data to parse and trap on anything the parser's contract forbids. */
static int aws_fuzz_one(aws_fuzz_parser parse, const uint8_t *data, size_t size)
{
	static struct wd_aws_parsed p;
	char reason[WD_AWS_REASON_MAX];
	int rc;

	memset(&p, 0x5a, sizeof(p)); /* what a failure leaves must be wiped, not stale */
	rc = parse((const char *)data, size, &p, reason, sizeof(reason));
	if (strnlen(reason, sizeof(reason)) == sizeof(reason))
		__builtin_trap();
	for (const char *q = reason; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			__builtin_trap();
	if (rc == 0) {
		aws_fuzz_check_value(p.access_key, sizeof(p.access_key), 0);
		aws_fuzz_check_value(p.secret_key, sizeof(p.secret_key), 0);
		aws_fuzz_check_value(p.token, sizeof(p.token), 1);
		if (p.expires < 0)
			__builtin_trap();
	} else {
		for (size_t i = 0; i < sizeof(p); i++) /* a failure keeps no key, secret or token */
			if (((const unsigned char *)&p)[i] != 0)
				__builtin_trap();
	}
	return 0;
}

#endif
