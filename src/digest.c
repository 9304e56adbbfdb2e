/* digest.c - SHA-256 through OpenSSL EVP (the hardware SHA extensions when the CPU has them). */
#include "digest.h"

#include <openssl/evp.h>

#include "error.h"

int wd_sha256_init(struct wd_sha256 *s)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	s->ctx = NULL;
	if (!ctx)
		return -WD_E_EXHAUSTED;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -WD_E_INTERNAL;
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

void wd_sha256_abort(struct wd_sha256 *s)
{
	if (s && s->ctx) {
		EVP_MD_CTX_free(s->ctx);
		s->ctx = NULL;
	}
}

int wd_sha256(const void *data, size_t len, uint8_t out[WD_DIGEST_LEN])
{
	unsigned int n = WD_DIGEST_LEN;

	return EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 ? 0 : -WD_E_INTERNAL;
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
