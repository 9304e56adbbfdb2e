/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_aws_sts.c - feeds arbitrary bytes, as an STS answer (XML: AssumeRoleWithWebIdentity, AssumeRole or an ErrorResponse), to wd_aws_parse_sts (src/aws_parse.c). */
#include "aws_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return aws_fuzz_one(wd_aws_parse_sts, data, size);
}
