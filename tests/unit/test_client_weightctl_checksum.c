/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_weightctl_checksum.c - weightctl's own digests (client/weightctl/checksum.c): published
 * values of both hashes, and the chunked content digest against the daemon's implementation
 * (src/digest.c) on either side of every chunk boundary a weight can have. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "checksum.h"

static void hex_of(weightd_digest_algorithm alg, const void *data, uint64_t n, char *hex)
{
	uint8_t d[CHECKSUM_MAX];

	assert_int_equal(checksum_content(alg, data, n, d), 0);
	checksum_hex(d, checksum_len(alg), hex);
}

static void small_inputs_give_the_published_hashes(void **state)
{
	char hex[2 * CHECKSUM_MAX + 1];
	uint8_t d[32];

	(void)state;
	/* FIPS 180-2's "abc", and what xxh128sum prints for an empty file and for "abc" */
	hex_of(WEIGHTD_DIGEST_SHA256, "abc", 3, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(checksum_sha256("abc", 3, d), 0);
	checksum_hex(d, 32, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	hex_of(WEIGHTD_DIGEST_XXH3_128, "", 0, hex);
	assert_string_equal(hex, "99aa06d3014798d86001c324468d497f");
	hex_of(WEIGHTD_DIGEST_XXH3_128, "abc", 3, hex);
	assert_string_equal(hex, "06b05ab6733a618578af5f94892f3950");
	assert_int_equal(checksum_len(WEIGHTD_DIGEST_UNKNOWN), 0);
	assert_int_equal(checksum_content(WEIGHTD_DIGEST_UNKNOWN, "abc", 3, d), -1);
}

static void chunked_digests_agree_with_the_daemon(void **state)
{
	static const weightd_digest_algorithm algs[] = { WEIGHTD_DIGEST_XXH3_128,
							 WEIGHTD_DIGEST_SHA256 };
	const uint64_t c = WEIGHTD_DIGEST_CHUNK;
	const uint64_t sizes[] = { 0, 1, c - 1, c, c + 1, 2 * c, 2 * c + 7, 3 * c - 1 };
	uint8_t *buf = malloc(3 * c);

	(void)state;
	assert_int_equal(WEIGHTD_DIGEST_CHUNK, WD_DIGEST_CHUNK);
	assert_non_null(buf);
	for (uint64_t i = 0; i < 3 * c; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++)
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			uint8_t mine[CHECKSUM_MAX], theirs[WD_DIGEST_MAX];
			struct wd_content dg;

			assert_int_equal(checksum_len(algs[a]), wd_digest_len((enum wd_digest_alg)algs[a]));
			assert_int_equal(checksum_content(algs[a], buf, sizes[k], mine), 0);
			assert_int_equal(wd_content_init(&dg, (enum wd_digest_alg)algs[a]), 0);
			wd_content_update(&dg, buf, sizes[k]);
			wd_content_final(&dg, theirs);
			if (memcmp(mine, theirs, checksum_len(algs[a])) != 0)
				fail_msg("%s digests of %llu bytes differ",
					 weightd_digest_algorithm_name(algs[a]),
					 (unsigned long long)sizes[k]);
		}
	free(buf);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(small_inputs_give_the_published_hashes),
	  cmocka_unit_test(chunked_digests_agree_with_the_daemon))
