/* SPDX-License-Identifier: Apache-2.0 */
/* weight.h - libweightd's weights: a range of a held segment standing for daemon references,
 * made from what a reply says, mapped, duplicated, shared and released (weight.c). */
#ifndef WC_WEIGHT_H
#define WC_WEIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

struct wc_arena;
struct wc_ref;
struct wc_seg;

struct weightd_weight {
	struct wc_ref *ref;          /* the daemon references it stands for (weight.c) */
	struct wc_seg *seg;
	uint64_t offset;
	char *name;
	char *dtype;
	size_t ndim;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	uint64_t nbytes;
	uint64_t generation;
	uint8_t digest[WEIGHTD_DIGEST_LEN];
	size_t digest_len;           /* 0: none sent */
	weightd_digest_algorithm digest_alg;
	uint8_t key[WEIGHTD_DIGEST_LEN];
	void *map;                   /* the mapping, when mapped */
	bool mapped;
	bool in_arena;               /* a unit's weight, in the unit's arena: not freed alone */
};

/*
 * What a reply says about one weight (a share's WeightInfo, or a row of a materialize reply's
 * columns): what wc_weight_new makes a weight from. Points into the reply.
 */
struct wc_weight_desc {
	uint64_t handle;
	const char *name;            /* the weight's name: its slot's, or the tensor's */
	const char *dtype;
	size_t ndim;                 /* at most WEIGHTD_MAX_DIMS (checked) */
	const uint64_t *shape;
	uint64_t nbytes;
	uint64_t generation;
	uint64_t offset;             /* in its segment */
	const uint8_t *digest;
	size_t digest_len;           /* 0: none sent */
	int digest_algorithm;        /* Weightd__DigestAlgorithm */
	const uint8_t *key;          /* WEIGHTD_DIGEST_LEN bytes, or NULL: none sent */
};

/* Check a WeightInfo (a share's, a preflight's) is well formed (dims, digest/key lengths, dtype
 * present). */
int wc_weight_info_check(const Weightd__WeightInfo *wi, weightd_error *err);
/* The description of a checked WeightInfo (pointing into it). */
void wc_weight_desc_of(const Weightd__WeightInfo *wi, struct wc_weight_desc *ret);
/* True when nbytes at offset lie inside a segment of `size` bytes, at a 64-byte boundary. */
bool wc_weight_fits(uint64_t offset, uint64_t nbytes, uint64_t size);
/* The algorithm of a digest of `len` bytes sent with `alg` (UNSPECIFIED from an older daemon
 * means SHA-256); UNKNOWN when the pair does not fit together. */
weightd_digest_algorithm wc_weight_digest_algorithm(int alg, size_t len);
/*
 * Make a weight from a checked description in segment sg, standing for `count` daemon references
 * (the reference on sg is taken in every case: the weight's on success, dropped on failure; on
 * failure the daemon references are released). Checks the weight lies inside the segment. Takes
 * a client reference while the daemon references live. a: the unit's arena, or NULL (malloc).
 */
int wc_weight_new(weightd_client *c, const struct wc_weight_desc *d, struct wc_seg *sg,
		  uint32_t count, struct wc_arena *a, weightd_weight **ret, weightd_error *err);
/* Release `handle` `count` times (one message). */
void wc_weight_release_handle(weightd_client *c, uint64_t handle, uint32_t count);
/* Map a weight (fstat size check + mmap); no-op when mapped. */
int wc_weight_map(weightd_weight *w, const char *slot, weightd_error *err);
/* Release several weights, telling the daemon in one message per client. Accepts NULL entries. */
void wc_weight_release_all(weightd_weight **ws, size_t n);
/* The daemon references a reply stands for (wc_conn_refs_fn): one per entry of a unit reply's
 * columns, one for a share. */
size_t wc_weight_reply_refs(weightd_client *c, const Weightd__Response *resp, uint64_t *out);

#endif
