/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_aws_json.c - feeds arbitrary bytes, as a container credentials endpoint's or IMDS's answer (JSON), to wd_aws_parse_json (src/aws_parse.c). */
#include "aws_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return aws_fuzz_one(wd_aws_parse_json, data, size);
}
