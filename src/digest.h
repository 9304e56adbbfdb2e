/* digest.h - SHA-256 through OpenSSL's EVP interface. */
#ifndef WD_DIGEST_H
#define WD_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define WD_DIGEST_LEN 32

struct wd_sha256 {
	void *ctx; /* EVP_MD_CTX */
};

/* 0, or -WD_E_EXHAUSTED / -WD_E_INTERNAL. */
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

#endif
