/* SPDX-License-Identifier: Apache-2.0 */
/* columns.c - a materialize reply's columns (PackedWeights): their checks, and each weight's
 * description read from them. */
#include "columns.h"

#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "err.h"
#include "weight.h"

#define PACKED_HASH 32               /* bytes of digest and of key per weight */

/* The bytes of a digest sent with algorithm alg (DIGEST_UNSPECIFIED: none sent); SIZE_MAX for
 * an algorithm this library does not know. */
static size_t digest_len(uint8_t alg)
{
	switch (alg) {
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_UNSPECIFIED: return 0;
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_SHA256: return 32;
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_XXH3_128: return 16;
	default: return SIZE_MAX;
	}
}

/* The reply's segments: one per fd, listed in fd order. */
static int check_segments(const Weightd__UnitReply *ur, uint32_t nfds, weightd_error *err)
{
	if (ur->n_segments != nfds)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd answered a unit with %zu segments but %u fds",
				  ur->n_segments, nfds);
	for (size_t i = 0; i < ur->n_segments; i++)
		if (ur->segments[i]->fd_index != i)
			return wc_err_set(err, WEIGHTD_E_PROTOCOL,
					  "weightd listed segment %zu of its answer with fd %u", i,
					  ur->segments[i]->fd_index);
	return 0;
}

/* Every column as long as n entries and n_aliases aliases make it. */
static int check_lengths(const Weightd__PackedWeights *pw, size_t n, size_t n_aliases,
			 weightd_error *err)
{
	const struct {
		const char *name;
		size_t have, want;
	} col[] = {
		{ "handle", pw->n_handle, n },
		{ "segment", pw->n_segment, n },
		{ "offset", pw->n_offset, n },
		{ "nbytes", pw->n_nbytes, n },
		{ "generation", pw->n_generation, n },
		{ "dtype", pw->n_dtype, n },
		{ "ndim", pw->n_ndim, n },
		{ "digest_algorithm", pw->digest_algorithm.len, n },
		{ "digests", pw->digests.len, n * PACKED_HASH },
		{ "keys", pw->keys.len, n * PACKED_HASH },
		{ "alias_owner", pw->n_alias_owner, n_aliases },
	};

	for (size_t i = 0; i < sizeof(col) / sizeof(col[0]); i++)
		if (col[i].have != col[i].want)
			return wc_err_set(err, WEIGHTD_E_PROTOCOL,
					  "weightd's packed answer to a unit of %zu entries and "
					  "%zu aliases has %zu values in its %s column, not %zu",
					  n, n_aliases, col[i].have, col[i].name, col[i].want);
	for (size_t i = 0; i < pw->n_dtypes; i++)
		if (wd_dtype_from_name(pw->dtypes[i]) == WD_DTYPE_INVALID)
			return wc_err_set(err, WEIGHTD_E_PROTOCOL,
					  "weightd's packed answer names dtype \"%s\", which this "
					  "libweightd does not know", pw->dtypes[i]);
	return 0;
}

/* Entry k of a reply whose columns have the right lengths, its dimensions at dims[at]. */
static int check_weight(const Weightd__UnitReply *ur, size_t k, size_t at, weightd_error *err)
{
	const Weightd__PackedWeights *pw = ur->packed;
	uint8_t alg = pw->digest_algorithm.data[k];
	size_t dl = digest_len(alg);
	const Weightd__SegmentInfo *si;
	static const uint8_t zero[PACKED_HASH];

	if (pw->segment[k] >= ur->n_segments)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd's packed answer puts weight %zu in segment %u of %zu", k,
				  pw->segment[k], ur->n_segments);
	if (pw->dtype[k] >= pw->n_dtypes)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd's packed answer gives weight %zu dtype %u of %zu", k,
				  pw->dtype[k], pw->n_dtypes);
	if (pw->ndim[k] > WEIGHTD_MAX_DIMS)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd's packed answer gives weight %zu %u dimensions (at most %d)",
				  k, pw->ndim[k], WEIGHTD_MAX_DIMS);
	if (pw->ndim[k] > pw->n_dims - at)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd's packed answer gives weight %zu dimensions past the end "
				  "of its %zu dims", k, pw->n_dims);
	if (dl == SIZE_MAX)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd's packed answer gives weight %zu digest algorithm %u, which "
				  "this libweightd does not know", k, alg);
	if (memcmp(pw->digests.data + k * PACKED_HASH + dl, zero, PACKED_HASH - dl) != 0)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd's packed answer gives weight %zu a %zu-byte digest not "
				  "followed by zeros", k, dl);
	si = ur->segments[pw->segment[k]];
	if (!wc_weight_fits(pw->offset[k], pw->nbytes[k], si->size))
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd placed weight %zu (%llu bytes) at offset %llu of its "
				  "%llu-byte segment %u", k, (unsigned long long)pw->nbytes[k],
				  (unsigned long long)pw->offset[k], (unsigned long long)si->size,
				  pw->segment[k]);
	return 0;
}

int wc_columns_check(const Weightd__UnitReply *ur, size_t n, size_t n_aliases, uint32_t nfds,
		     size_t *ret_at, weightd_error *err)
{
	const Weightd__PackedWeights *pw = ur->packed;
	uint8_t local[64], *used = local;   /* per fd: an entry lies in it */
	size_t at = 0, k;
	int rc;

	*ret_at = SIZE_MAX;
	if (nfds > sizeof(local))
		used = calloc(nfds, 1);
	else
		memset(local, 0, sizeof(local));
	if (!used)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	rc = check_segments(ur, nfds, err);
	if (rc == 0)
		rc = check_lengths(pw, n, n_aliases, err);
	for (k = 0; rc == 0 && k < n; k++) {
		rc = check_weight(ur, k, at, err);
		if (rc < 0) {
			*ret_at = k;
			break;
		}
		used[pw->segment[k]] = 1;
		at += pw->ndim[k];
	}
	if (rc == 0 && at != pw->n_dims)
		rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
				"weightd's packed answer has %zu dims for weights of %zu dimensions",
				pw->n_dims, at);
	for (k = 0; rc == 0 && k < n_aliases; k++)
		if (pw->alias_owner[k] >= n) {
			rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
					"weightd's packed answer resolves alias %zu to entry %u of %zu",
					k, pw->alias_owner[k], n);
			*ret_at = n + k;
		}
	for (uint32_t i = 0; rc == 0 && i < nfds; i++)
		if (!used[i])
			rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
					"weightd sent fd %u with the unit but no entry lies in it", i);
	if (used != local)
		free(used);
	return rc;
}

void wc_columns_desc(const Weightd__PackedWeights *pw, size_t k, size_t at, const char *name,
		     struct wc_weight_desc *ret)
{
	uint8_t alg = pw->digest_algorithm.data[k];

	ret->handle = pw->handle[k];
	ret->name = name;
	ret->dtype = pw->dtypes[pw->dtype[k]];
	ret->ndim = pw->ndim[k];
	ret->shape = pw->dims + at;
	ret->nbytes = pw->nbytes[k];
	ret->generation = pw->generation[k];
	ret->offset = pw->offset[k];
	ret->digest = pw->digests.data + k * PACKED_HASH;
	ret->digest_len = digest_len(alg);
	ret->digest_algorithm = alg;
	ret->key = pw->keys.data + k * PACKED_HASH;
}

bool wc_columns_alike(const Weightd__PackedWeights *pw, size_t k, size_t ka, size_t l, size_t la)
{
	return pw->segment[k] == pw->segment[l] && pw->offset[k] == pw->offset[l] &&
	       pw->nbytes[k] == pw->nbytes[l] && pw->ndim[k] == pw->ndim[l] &&
	       strcmp(pw->dtypes[pw->dtype[k]], pw->dtypes[pw->dtype[l]]) == 0 &&
	       (!pw->ndim[k] ||
		memcmp(pw->dims + ka, pw->dims + la, pw->ndim[k] * sizeof(*pw->dims)) == 0);
}
