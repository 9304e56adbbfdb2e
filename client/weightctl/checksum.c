/* SPDX-License-Identifier: Apache-2.0 */
/* checksum.c - weightctl's own hashing of the bytes it fetched: a weight's content digest as
 * <weightd/client.h> defines it, and SHA-256 for --sha256. */
#include "checksum.h"

#include <openssl/evp.h>
#include <string.h>
#include <xxhash.h>
#ifdef WD_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#define xxh128_update XXH3_128bits_update_dispatch
#else
#define xxh128_update XXH3_128bits_update
#endif

/*
 * Written from the definition in client.h, with OpenSSL's EVP and libxxhash called directly, not
 * with the daemon's digest code: weightctl is built from client/ alone, and a check that shared
 * the daemon's implementation would agree with the daemon's mistakes.
 */

/* One hash stream of either algorithm. */
struct hasher {
	weightd_digest_algorithm alg;
	EVP_MD_CTX *sha;
	XXH3_state_t *xxh;
};

static int hasher_init(struct hasher *h, weightd_digest_algorithm alg)
{
	memset(h, 0, sizeof(*h));
	h->alg = alg;
	if (alg == WEIGHTD_DIGEST_SHA256) {
		h->sha = EVP_MD_CTX_new();
		return h->sha && EVP_DigestInit_ex(h->sha, EVP_sha256(), NULL) == 1 ? 0 : -1;
	}
	if (alg == WEIGHTD_DIGEST_XXH3_128) {
		h->xxh = XXH3_createState();
		return h->xxh && XXH3_128bits_reset(h->xxh) == XXH_OK ? 0 : -1;
	}
	return -1;
}

static void hasher_update(struct hasher *h, const void *data, size_t len)
{
	if (!len)
		return;
	if (h->sha)
		EVP_DigestUpdate(h->sha, data, len);
	else
		xxh128_update(h->xxh, data, len);
}

/* Writes the canonical bytes (XXH3-128 big-endian, as xxh128sum prints it) and starts over. */
static void hasher_take(struct hasher *h, uint8_t *out)
{
	if (h->sha) {
		unsigned int n = 32;

		EVP_DigestFinal_ex(h->sha, out, &n);
		EVP_DigestInit_ex(h->sha, EVP_sha256(), NULL);
	} else {
		XXH128_canonical_t c;

		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h->xxh));
		memcpy(out, c.digest, sizeof(c.digest));
		XXH3_128bits_reset(h->xxh);
	}
}

static void hasher_free(struct hasher *h)
{
	EVP_MD_CTX_free(h->sha);
	XXH3_freeState(h->xxh);
}

size_t checksum_len(weightd_digest_algorithm alg)
{
	switch (alg) {
	case WEIGHTD_DIGEST_SHA256: return 32;
	case WEIGHTD_DIGEST_XXH3_128: return 16;
	default: return 0;
	}
}

int checksum_content(weightd_digest_algorithm alg, const void *data, uint64_t n, uint8_t *out)
{
	struct hasher chunk = { 0 }, outer = { 0 };
	const uint8_t *p = data;
	uint8_t d[CHECKSUM_MAX];
	int r = -1;

	if (hasher_init(&chunk, alg) < 0 || hasher_init(&outer, alg) < 0)
		goto out;
	if (n <= WEIGHTD_DIGEST_CHUNK) {
		hasher_update(&chunk, p, (size_t)n);
		hasher_take(&chunk, out);
		r = 0;
		goto out;
	}
	for (uint64_t at = 0; at < n; at += WEIGHTD_DIGEST_CHUNK) {
		uint64_t len = n - at < WEIGHTD_DIGEST_CHUNK ? n - at : WEIGHTD_DIGEST_CHUNK;

		hasher_update(&chunk, p + at, (size_t)len);
		hasher_take(&chunk, d);
		hasher_update(&outer, d, checksum_len(alg));
	}
	hasher_take(&outer, out);
	r = 0;
out:
	hasher_free(&chunk);
	hasher_free(&outer);
	return r;
}

int checksum_sha256(const void *data, size_t n, uint8_t out[32])
{
	unsigned int len = 32;

	return EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

void checksum_hex(const uint8_t *bytes, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[bytes[i] >> 4];
		out[2 * i + 1] = hex[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}
