/* SPDX-License-Identifier: Apache-2.0 */
/* digest.h - hashes: SHA-256 (OpenSSL EVP) for identity keys, and a weight's content digest
 * (XXH3-128 by default, SHA-256 on request), composed over fixed-size chunks. */
#ifndef WD_DIGEST_H
#define WD_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WD_DIGEST_LEN 32      /* SHA-256: identity keys */
#define WD_DIGEST_MAX 32      /* the longest content digest of any algorithm */

struct wd_sha256 {
	void *ctx; /* EVP_MD_CTX */
};

/* 0, or -WEIGHTD_E_RESOURCE_EXHAUSTED / -WEIGHTD_E_INTERNAL. */
int wd_sha256_init(struct wd_sha256 *s);
void wd_sha256_update(struct wd_sha256 *s, const void *data, size_t len);
/* Writes 32 bytes and frees the context. */
void wd_sha256_final(struct wd_sha256 *s, uint8_t out[WD_DIGEST_LEN]);
/* Frees the context without a result (error paths). Accepts an uninitialised-to-zero struct. */
void wd_sha256_abort(struct wd_sha256 *s);
/* One-shot. */
int wd_sha256(const void *data, size_t len, uint8_t out[WD_DIGEST_LEN]);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
void wd_hex(const uint8_t *bytes, size_t n, char *out);

/*
 * Content digest algorithms. Same numbers as weightd.DigestAlgorithm on the wire. XXH3-128 is a
 * non-cryptographic 128-bit hash (libxxhash) that runs at memory speed: it guards re-adoption and
 * shows in status without costing the fill anything. SHA-256 is for those who want a
 * cryptographic content address (`digest = sha256`).
 */
enum wd_digest_alg {
	WD_DIGEST_NONE = 0,
	WD_DIGEST_SHA256 = 1,
	WD_DIGEST_XXH3_128 = 2,
};

#define WD_DIGEST_DEFAULT WD_DIGEST_XXH3_128

/*
 * A weight's content digest, for a weight of N bytes and algorithm H:
 *   N <= WD_DIGEST_CHUNK:  H(bytes)
 *   N >  WD_DIGEST_CHUNK:  H(H(c0) || H(c1) || ... || H(ck))
 * where c0..ck are the bytes cut into WD_DIGEST_CHUNK-byte chunks (the last may be shorter) and
 * each H(ci) is in its canonical byte form (below). Chunks are what several workers fill and
 * hash independently; a small weight's digest is the plain hash of its bytes. Canonical bytes:
 * SHA-256 as usual; XXH3-128 big-endian (XXH128_canonicalFromHash: what `xxh128sum` prints).
 * The chunk size is part of the definition: changing it changes every large weight's digest.
 */
#define WD_DIGEST_CHUNK (16u << 20)

/* Digest length in bytes (16 or 32), 0 for NONE or an unknown value. */
size_t wd_digest_len(enum wd_digest_alg alg);
/* "xxh3-128", "sha256"; "none" for anything else. */
const char *wd_digest_name(enum wd_digest_alg alg);
/* The inverse (case-insensitive; "xxh128" and "sha-256" accepted too); NONE if unknown. */
enum wd_digest_alg wd_digest_from_name(const char *name);

/* One hash stream of either algorithm. */
struct wd_hash {
	enum wd_digest_alg alg;
	void *state; /* XXH3_state_t or EVP_MD_CTX */
};

/* 0, -WEIGHTD_E_RESOURCE_EXHAUSTED, or -WEIGHTD_E_INVALID_ARGUMENT for an unknown algorithm. */
int wd_hash_init(struct wd_hash *h, enum wd_digest_alg alg);
/* Start over with the same algorithm (no allocation). */
void wd_hash_reset(struct wd_hash *h);
void wd_hash_update(struct wd_hash *h, const void *data, size_t len);
/* Writes wd_digest_len(alg) canonical bytes; the stream may then be reset or freed. */
void wd_hash_digest(struct wd_hash *h, uint8_t *out);
/* Accepts a zeroed struct. */
void wd_hash_free(struct wd_hash *h);
/* One-shot. 0 or a negative code. */
int wd_hash(enum wd_digest_alg alg, const void *data, size_t len, uint8_t *out);

/*
 * The content digest of a byte stream fed in order (any split of updates): keeps one chunk's
 * stream and the stream over chunk digests. wd_content_final gives the composed digest above.
 */
struct wd_content {
	enum wd_digest_alg alg;
	struct wd_hash chunk, outer;
	uint64_t pos;                    /* bytes fed */
	uint8_t first[WD_DIGEST_MAX];    /* H(c0), kept until a second chunk shows it is needed */
};

int wd_content_init(struct wd_content *c, enum wd_digest_alg alg);
void wd_content_update(struct wd_content *c, const void *data, size_t len);
/* Writes the digest and frees the state. */
void wd_content_final(struct wd_content *c, uint8_t *out);
/* Frees the state without a result. Accepts a zeroed struct. */
void wd_content_abort(struct wd_content *c);

/*
 * The composed digest from the digests of a weight's n chunks in order (n >= 1; n == 1 gives
 * the one chunk's digest): what independently filled chunks add up to. 0 or a negative code.
 */
int wd_content_compose(enum wd_digest_alg alg, const uint8_t *chunk_digests, size_t n,
		       uint8_t *out);

/* Chunks of a weight of nbytes (at least 1). */
uint64_t wd_content_chunks(uint64_t nbytes);

#endif
