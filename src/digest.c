/* SPDX-License-Identifier: Apache-2.0 */
/* digest.c - SHA-256 through OpenSSL EVP (the hardware SHA extensions when the CPU has them),
 * XXH3-128 through libxxhash (its run-time dispatch to AVX2/AVX-512 where built in), and the
 * chunked content digest over either. */
#include "digest.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>
#ifdef WD_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#define xxh128_update XXH3_128bits_update_dispatch
#else
#define xxh128_update XXH3_128bits_update
#endif

#include "error.h"

/*
 * SHA-256 fetched from the default provider once for the process: EVP_sha256() given to
 * EVP_DigestInit_ex fetches it again on every call (a lock and a hash lookup in OpenSSL 3), which
 * cost more than hashing the hundred bytes of an identity key. Kept for the process's life.
 */
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md;

static void sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static const EVP_MD *sha256_alg(void)
{
	pthread_once(&sha256_once, sha256_fetch);
	return sha256_md ? sha256_md : EVP_sha256();
}

int wd_sha256_init(struct wd_sha256 *s)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	s->ctx = NULL;
	if (!ctx)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (EVP_DigestInit_ex(ctx, sha256_alg(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -WEIGHTD_E_INTERNAL;
	}
	s->ctx = ctx;
	return 0;
}

void wd_sha256_update(struct wd_sha256 *s, const void *data, size_t len)
{
	if (len)
		EVP_DigestUpdate(s->ctx, data, len);
}

void wd_sha256_final(struct wd_sha256 *s, uint8_t out[WD_DIGEST_LEN])
{
	unsigned int n = WD_DIGEST_LEN;

	EVP_DigestFinal_ex(s->ctx, out, &n);
	EVP_MD_CTX_free(s->ctx);
	s->ctx = NULL;
}

int wd_sha256(const void *data, size_t len, uint8_t out[WD_DIGEST_LEN])
{
	unsigned int n = WD_DIGEST_LEN;

	return EVP_Digest(data, len, out, &n, sha256_alg(), NULL) == 1 ? 0 : -WEIGHTD_E_INTERNAL;
}

void wd_hex(const uint8_t *bytes, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[bytes[i] >> 4];
		out[2 * i + 1] = hex[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

/* ---- algorithms ------------------------------------------------------------------------------ */

size_t wd_digest_len(enum wd_digest_alg alg)
{
	switch (alg) {
	case WD_DIGEST_SHA256: return 32;
	case WD_DIGEST_XXH3_128: return 16;
	default: return 0;
	}
}

const char *wd_digest_name(enum wd_digest_alg alg)
{
	switch (alg) {
	case WD_DIGEST_SHA256: return "sha256";
	case WD_DIGEST_XXH3_128: return "xxh3-128";
	default: return "none";
	}
}

enum wd_digest_alg wd_digest_from_name(const char *name)
{
	if (!name)
		return WD_DIGEST_NONE;
	if (strcasecmp(name, "sha256") == 0 || strcasecmp(name, "sha-256") == 0)
		return WD_DIGEST_SHA256;
	if (strcasecmp(name, "xxh3-128") == 0 || strcasecmp(name, "xxh128") == 0 ||
	    strcasecmp(name, "xxh3") == 0)
		return WD_DIGEST_XXH3_128;
	return WD_DIGEST_NONE;
}

int wd_hash_init(struct wd_hash *h, enum wd_digest_alg alg)
{
	h->alg = alg;
	h->state = NULL;
	switch (alg) {
	case WD_DIGEST_SHA256: {
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		if (!ctx)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		if (EVP_DigestInit_ex(ctx, sha256_alg(), NULL) != 1) {
			EVP_MD_CTX_free(ctx);
			return -WEIGHTD_E_INTERNAL;
		}
		h->state = ctx;
		return 0;
	}
	case WD_DIGEST_XXH3_128: {
		XXH3_state_t *st = XXH3_createState();
		if (!st)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		XXH3_128bits_reset(st);
		h->state = st;
		return 0;
	}
	default:
		return -WEIGHTD_E_INVALID_ARGUMENT;
	}
}

void wd_hash_reset(struct wd_hash *h)
{
	if (h->alg == WD_DIGEST_SHA256)
		EVP_DigestInit_ex(h->state, sha256_alg(), NULL);
	else
		XXH3_128bits_reset(h->state);
}

void wd_hash_update(struct wd_hash *h, const void *data, size_t len)
{
	if (!len)
		return;
	if (h->alg == WD_DIGEST_SHA256)
		EVP_DigestUpdate(h->state, data, len);
	else
		xxh128_update(h->state, data, len);
}

void wd_hash_digest(struct wd_hash *h, uint8_t *out)
{
	if (h->alg == WD_DIGEST_SHA256) {
		unsigned int n = 32;
		EVP_DigestFinal_ex(h->state, out, &n);
	} else {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h->state));
		memcpy(out, c.digest, sizeof(c.digest));
	}
}

void wd_hash_free(struct wd_hash *h)
{
	if (!h || !h->state)
		return;
	if (h->alg == WD_DIGEST_SHA256)
		EVP_MD_CTX_free(h->state);
	else
		XXH3_freeState(h->state);
	h->state = NULL;
}

int wd_hash(enum wd_digest_alg alg, const void *data, size_t len, uint8_t *out)
{
	struct wd_hash h;
	int r = wd_hash_init(&h, alg);

	if (r < 0)
		return r;
	wd_hash_update(&h, data, len);
	wd_hash_digest(&h, out);
	wd_hash_free(&h);
	return 0;
}

/* ---- the chunked content digest --------------------------------------------------------------- */

uint64_t wd_content_chunks(uint64_t nbytes)
{
	return nbytes ? (nbytes + WD_DIGEST_CHUNK - 1) / WD_DIGEST_CHUNK : 1;
}

int wd_content_init(struct wd_content *c, enum wd_digest_alg alg)
{
	int r;

	memset(c, 0, sizeof(*c));
	c->alg = alg;
	r = wd_hash_init(&c->chunk, alg);
	if (r == 0)
		r = wd_hash_init(&c->outer, alg);
	if (r < 0)
		wd_content_abort(c);
	return r;
}

/* The chunk in progress is complete: its digest goes to `first` or into the outer stream. */
static void chunk_done(struct wd_content *c, uint64_t index)
{
	uint8_t d[WD_DIGEST_MAX];
	size_t n = wd_digest_len(c->alg);

	if (index == 0) {
		wd_hash_digest(&c->chunk, c->first);
		wd_hash_update(&c->outer, c->first, n);
	} else {
		wd_hash_digest(&c->chunk, d);
		wd_hash_update(&c->outer, d, n);
	}
	wd_hash_reset(&c->chunk);
}

void wd_content_update(struct wd_content *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		uint64_t in = c->pos % WD_DIGEST_CHUNK;
		size_t take = len < WD_DIGEST_CHUNK - in ? len : (size_t)(WD_DIGEST_CHUNK - in);

		/* A byte past a full chunk closes it (so a weight of exactly one chunk keeps the
		 * plain hash). */
		if (in == 0 && c->pos > 0)
			chunk_done(c, c->pos / WD_DIGEST_CHUNK - 1);
		wd_hash_update(&c->chunk, p, take);
		c->pos += take;
		p += take;
		len -= take;
	}
}

void wd_content_final(struct wd_content *c, uint8_t *out)
{
	size_t n = wd_digest_len(c->alg);

	if (c->pos <= WD_DIGEST_CHUNK) {
		wd_hash_digest(&c->chunk, out);
	} else {
		uint8_t d[WD_DIGEST_MAX];
		wd_hash_digest(&c->chunk, d);
		wd_hash_update(&c->outer, d, n);
		wd_hash_digest(&c->outer, out);
	}
	wd_content_abort(c);
}

void wd_content_abort(struct wd_content *c)
{
	if (!c)
		return;
	wd_hash_free(&c->chunk);
	wd_hash_free(&c->outer);
}

int wd_content_compose(enum wd_digest_alg alg, const uint8_t *chunk_digests, size_t n,
		       uint8_t *out)
{
	size_t len = wd_digest_len(alg);

	if (!len || n == 0)
		return -WEIGHTD_E_INVALID_ARGUMENT;
	if (n == 1) {
		memcpy(out, chunk_digests, len);
		return 0;
	}
	return wd_hash(alg, chunk_digests, n * len, out);
}
