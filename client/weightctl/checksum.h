/* SPDX-License-Identifier: Apache-2.0 */
/* checksum.h - weightctl's own hashing of the bytes it fetched (checksum.c). */
#ifndef WEIGHTCTL_CHECKSUM_H
#define WEIGHTCTL_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "weightd/client.h"

#define CHECKSUM_MAX 32   /* the longest content digest (SHA-256) */

/* Bytes of a content digest of `alg` (16 or 32), 0 for an algorithm weightctl does not know. */
size_t checksum_len(weightd_digest_algorithm alg);
/* The content digest of n bytes as client.h defines it (the plain hash up to
 * WEIGHTD_DIGEST_CHUNK bytes, else the hash of the chunks' hashes): checksum_len(alg) bytes to
 * out. 0, or -1 for an unknown algorithm or no memory. */
int checksum_content(weightd_digest_algorithm alg, const void *data, uint64_t n, uint8_t *out);
/* The plain SHA-256 of the bytes (what sha256sum prints). 0 or -1. */
int checksum_sha256(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void checksum_hex(const uint8_t *bytes, size_t n, char *out);

#endif
