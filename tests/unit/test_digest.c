/* SPDX-License-Identifier: Apache-2.0 */
/* test_digest.c - algorithm names both ways, unknown algorithms refused, SHA-256 against the
 * FIPS 180-2 vector, XXH3-128 in xxh128sum's byte order, and the chunked content digest equal to
 * its definition (the plain hash up to one chunk, the hash of the chunk hashes past it) however
 * the bytes are fed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests.h"
#include <xxhash.h>

#include "digest.h"
#include "error.h"

static void names_both_ways(void **state)
{
	assert_string_equal(wd_digest_name(WD_DIGEST_SHA256), "sha256");
	assert_string_equal(wd_digest_name(WD_DIGEST_XXH3_128), "xxh3-128");
	assert_string_equal(wd_digest_name(WD_DIGEST_NONE), "none");
	assert_string_equal(wd_digest_name((enum wd_digest_alg)99), "none");
	assert_int_equal(wd_digest_from_name("sha256"), WD_DIGEST_SHA256);
	assert_int_equal(wd_digest_from_name("SHA-256"), WD_DIGEST_SHA256);
	assert_int_equal(wd_digest_from_name("xxh3-128"), WD_DIGEST_XXH3_128);
	assert_int_equal(wd_digest_from_name("XXH128"), WD_DIGEST_XXH3_128);
	assert_int_equal(wd_digest_from_name("xxh3"), WD_DIGEST_XXH3_128);
	assert_int_equal(wd_digest_from_name("md5"), WD_DIGEST_NONE);
	assert_int_equal(wd_digest_from_name(""), WD_DIGEST_NONE);
	assert_int_equal(wd_digest_from_name(NULL), WD_DIGEST_NONE);
	assert_int_equal(wd_digest_len(WD_DIGEST_SHA256), 32);
	assert_int_equal(wd_digest_len(WD_DIGEST_XXH3_128), 16);
	assert_int_equal(wd_digest_len(WD_DIGEST_NONE), 0);
	assert_int_equal(wd_digest_len((enum wd_digest_alg)99), 0);
}

static void unknown_algorithms_are_refused(void **state)
{
	struct wd_content c;
	struct wd_hash h;
	uint8_t out[WD_DIGEST_MAX] = { 0 }, two[2 * WD_DIGEST_MAX] = { 0 };

	assert_int_equal(wd_hash_init(&h, WD_DIGEST_NONE), -WEIGHTD_E_INVALID_ARGUMENT);
	wd_hash_free(&h);                                  /* nothing was allocated */
	assert_int_equal(wd_hash((enum wd_digest_alg)99, "x", 1, out), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_content_init(&c, WD_DIGEST_NONE), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_content_compose(WD_DIGEST_NONE, two, 2, out), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_content_compose(WD_DIGEST_SHA256, two, 0, out), -WEIGHTD_E_INVALID_ARGUMENT);
	/* freeing what was never set up is allowed */
	memset(&c, 0, sizeof(c));
	wd_content_abort(&c);
	wd_content_abort(NULL);
	wd_hash_free(NULL);
}

static void sha256_matches_the_standard(void **state)
{
	/* FIPS 180-2, appendix B.1: SHA-256("abc") */
	static const char abc[] =
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	uint8_t out[WD_DIGEST_LEN];
	char hex[2 * WD_DIGEST_LEN + 1];
	struct wd_sha256 s;

	assert_int_equal(wd_sha256("abc", 3, out), 0);
	wd_hex(out, sizeof(out), hex);
	assert_string_equal(hex, abc);
	assert_int_equal(wd_hash(WD_DIGEST_SHA256, "abc", 3, out), 0);
	wd_hex(out, sizeof(out), hex);
	assert_string_equal(hex, abc);
	/* streamed in pieces */
	assert_int_equal(wd_sha256_init(&s), 0);
	wd_sha256_update(&s, "a", 1);
	wd_sha256_update(&s, "bc", 2);
	wd_sha256_final(&s, out);
	wd_hex(out, sizeof(out), hex);
	assert_string_equal(hex, abc);
}

static void xxh3_is_big_endian_like_xxh128sum(void **state)
{
	static const char text[] = "weightd";
	XXH128_hash_t h = XXH3_128bits(text, strlen(text));
	uint8_t out[16], want[16];
	struct wd_hash s;

	for (int i = 0; i < 8; i++) {
		want[i] = (uint8_t)(h.high64 >> (56 - 8 * i));
		want[8 + i] = (uint8_t)(h.low64 >> (56 - 8 * i));
	}
	assert_int_equal(wd_hash(WD_DIGEST_XXH3_128, text, strlen(text), out), 0);
	assert_memory_equal(out, want, 16);
	/* a reset stream starts over */
	assert_int_equal(wd_hash_init(&s, WD_DIGEST_XXH3_128), 0);
	wd_hash_update(&s, "something else", 14);
	wd_hash_reset(&s);
	wd_hash_update(&s, text, 3);
	wd_hash_update(&s, NULL, 0);
	wd_hash_update(&s, text + 3, strlen(text) - 3);
	wd_hash_digest(&s, out);
	wd_hash_free(&s);
	assert_memory_equal(out, want, 16);
}

/* The content digest of buf[0..n) fed in pieces of `step` bytes. */
static void content(enum wd_digest_alg alg, const uint8_t *buf, size_t n, size_t step,
		    uint8_t *out)
{
	struct wd_content c;

	assert_int_equal(wd_content_init(&c, alg), 0);
	for (size_t off = 0; off < n; off += step)
		wd_content_update(&c, buf + off, n - off < step ? n - off : step);
	wd_content_final(&c, out);
}

static void content_digest_follows_its_definition(void **state)
{
	static const enum wd_digest_alg algs[] = { WD_DIGEST_XXH3_128, WD_DIGEST_SHA256 };
	const size_t chunk = WD_DIGEST_CHUNK, n = 2 * (size_t)WD_DIGEST_CHUNK + 12345;
	uint8_t *buf = malloc(n);

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	assert_int_equal(wd_content_chunks(0), 1);
	assert_int_equal(wd_content_chunks(chunk), 1);
	assert_int_equal(wd_content_chunks(chunk + 1), 2);
	assert_int_equal(wd_content_chunks(n), 3);
	for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++) {
		size_t len = wd_digest_len(algs[a]);
		uint8_t want[WD_DIGEST_MAX], got[WD_DIGEST_MAX], parts[3 * WD_DIGEST_MAX];

		/* up to one chunk: the plain hash of the bytes (exactly one chunk included) */
		assert_int_equal(wd_hash(algs[a], buf, chunk, want), 0);
		content(algs[a], buf, chunk, chunk, got);
		assert_memory_equal(got, want, len);
		content(algs[a], buf, chunk, 1000003, got);
		assert_memory_equal(got, want, len);
		assert_int_equal(wd_hash(algs[a], buf, 0, want), 0);
		content(algs[a], buf, 0, 1, got);
		assert_memory_equal(got, want, len);

		/* past one chunk: the hash of the chunks' hashes, in order */
		for (size_t i = 0; i < 3; i++)
			assert_int_equal(wd_hash(algs[a], buf + i * chunk,
						 i < 2 ? chunk : n - 2 * chunk, parts + i * len), 0);
		assert_int_equal(wd_hash(algs[a], parts, 3 * len, want), 0);
		content(algs[a], buf, n, n, got);
		assert_memory_equal(got, want, len);
		content(algs[a], buf, n, 4096 + 7, got);   /* pieces that straddle chunk ends */
		assert_memory_equal(got, want, len);
		assert_int_equal(wd_content_compose(algs[a], parts, 3, got), 0);
		assert_memory_equal(got, want, len);
		/* one chunk's digest composes to itself */
		assert_int_equal(wd_content_compose(algs[a], parts, 1, got), 0);
		assert_memory_equal(got, parts, len);
	}
	free(buf);
}

static void an_abandoned_content_digest_frees_its_state(void **state)
{
	struct wd_content c;

	/* under ASan a leak here fails the test */
	assert_int_equal(wd_content_init(&c, WD_DIGEST_SHA256), 0);
	wd_content_update(&c, "abc", 3);
	wd_content_abort(&c);
	assert_int_equal(wd_content_init(&c, WD_DIGEST_XXH3_128), 0);
	wd_content_abort(&c);
	wd_content_abort(&c);                              /* twice is harmless */
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(names_both_ways),
	  cmocka_unit_test(unknown_algorithms_are_refused),
	  cmocka_unit_test(sha256_matches_the_standard),
	  cmocka_unit_test(xxh3_is_big_endian_like_xxh128sum),
	  cmocka_unit_test(content_digest_follows_its_definition),
	  cmocka_unit_test(an_abandoned_content_digest_frees_its_state))
