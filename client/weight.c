/* SPDX-License-Identifier: Apache-2.0 */
/* weight.c - libweightd's weights: a range of a held segment standing for daemon references,
 * made from what a reply says, mapped, duplicated, shared and released. */
#include "weight.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "conn.h"
#include "err.h"
#include "msg.h"
#include "seg.h"

/*
 * The daemon references one received fd stands for, shared by a weight and its local
 * duplicates. The daemon counts one reference per unit entry (two entries with the same recipe
 * share one fd but hold two; aliases hold none) and one per share; `count` is how many, and the
 * handle is released that many times when the last local holder lets go.
 */
struct wc_ref {
	atomic_uint holders;
	struct wc_held held;         /* handle, count, and where it lies, as the connection knows it */
	weightd_client *c;           /* holds a client reference */
};

/* --- weights ----------------------------------------------------------------------------- */

int wc_weight_info_check(const Weightd__WeightInfo *wi, weightd_error *err)
{
	if (!wi->dtype || !wi->dtype[0])
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd described weight \"%s\" without a dtype", wi->name);
	if (wi->n_shape > WEIGHTD_MAX_DIMS)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd described weight \"%s\" with %zu dimensions (at most %d)",
				  wi->name, wi->n_shape, WEIGHTD_MAX_DIMS);
	if (wi->key.len && wi->key.len != WEIGHTD_DIGEST_LEN)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd sent a key for \"%s\" that is not %d bytes", wi->name,
				  WEIGHTD_DIGEST_LEN);
	if (wi->digest.len && wc_weight_digest_algorithm((int)wi->digest_algorithm,
							 wi->digest.len) == WEIGHTD_DIGEST_UNKNOWN)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd sent a %zu-byte digest for \"%s\" with algorithm %d, which "
				  "this library does not know at that length", wi->digest.len,
				  wi->name, (int)wi->digest_algorithm);
	return 0;
}

weightd_digest_algorithm wc_weight_digest_algorithm(int alg, size_t len)
{
	switch (alg) {
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_UNSPECIFIED:
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_SHA256:
		return len == 32 ? WEIGHTD_DIGEST_SHA256 : WEIGHTD_DIGEST_UNKNOWN;
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_XXH3_128:
		return len == 16 ? WEIGHTD_DIGEST_XXH3_128 : WEIGHTD_DIGEST_UNKNOWN;
	default:
		return WEIGHTD_DIGEST_UNKNOWN;
	}
}

const char *weightd_digest_algorithm_name(weightd_digest_algorithm a)
{
	switch (a) {
	case WEIGHTD_DIGEST_SHA256: return "sha256";
	case WEIGHTD_DIGEST_XXH3_128: return "xxh3-128";
	default: return "unknown";
	}
}

/* A weight with its name and dtype in the same allocation (one malloc per weight of a reply). */
static weightd_weight *weight_alloc(const char *name, const char *dtype, struct wc_arena *a)
{
	size_t nl = strlen(name ? name : "") + 1, dl = strlen(dtype ? dtype : "") + 1;
	weightd_weight *w;

	if (nl > SIZE_MAX - sizeof(*w) - dl)
		return NULL;
	if (a) {
		w = wc_arena_alloc(a, sizeof(*w) + nl + dl);
		if (!w)
			return NULL;
		memset(w, 0, sizeof(*w));
		w->in_arena = true;
	} else {
		w = calloc(1, sizeof(*w) + nl + dl);
	}
	if (!w)
		return NULL;
	w->name = (char *)(w + 1);
	w->dtype = w->name + nl;
	memcpy(w->name, name ? name : "", nl);
	memcpy(w->dtype, dtype ? dtype : "", dl);
	return w;
}

/* Free a weight of this process: its hold on the segment's range is counted down (the unlock,
 * if any, is left to the caller's wc_seg_unhold_commit), then its segment reference dropped. */
static void weight_free_local(weightd_weight *w)
{
	wc_seg_unhold(w->seg, w->offset, w->nbytes);
	wc_seg_unref(w->seg);
	if (!w->in_arena)
		free(w);
}

void wc_weight_release_handle(weightd_client *c, uint64_t handle, uint32_t count)
{
	uint64_t one[4] = { handle, handle, handle, handle }, *many = one;

	if (count == 0)
		return;
	if (count > 4) {
		many = malloc(count * sizeof(*many));
		if (!many) {   /* one at a time, then */
			for (uint32_t i = 0; i < count; i++)
				wc_conn_release(c, &handle, 1);
			return;
		}
		for (uint32_t i = 0; i < count; i++)
			many[i] = handle;
	}
	wc_conn_release(c, many, count);
	if (many != one)
		free(many);
}

void wc_weight_desc_of(const Weightd__WeightInfo *wi, struct wc_weight_desc *ret)
{
	ret->handle = wi->handle;
	ret->name = wi->name;
	ret->dtype = wi->dtype;
	ret->ndim = wi->n_shape;
	ret->shape = wi->shape;
	ret->nbytes = wi->nbytes;
	ret->generation = wi->generation;
	ret->offset = wi->offset;
	ret->digest = wi->digest.data;
	ret->digest_len = wi->digest.len;
	ret->digest_algorithm = (int)wi->digest_algorithm;
	ret->key = wi->key.len == WEIGHTD_DIGEST_LEN ? wi->key.data : NULL;
}

bool wc_weight_fits(uint64_t offset, uint64_t nbytes, uint64_t size)
{
	return offset <= size && nbytes <= size - offset && offset % 64 == 0;
}

int wc_weight_new(weightd_client *c, const struct wc_weight_desc *d, struct wc_seg *sg,
		  uint32_t count, struct wc_arena *a, weightd_weight **ret, weightd_error *err)
{
	weightd_weight *w;
	struct wc_ref *ref;
	int r;

	/* A segment the daemon described was checked to hold its declared size; one it did not
	 * (id 0) is checked when the weight is mapped, against what fstat found. */
	if (sg->id && !wc_weight_fits(d->offset, d->nbytes, sg->size)) {
		r = wc_err_set(err, WEIGHTD_E_PROTOCOL,
			       "weightd placed weight \"%s\" (%llu bytes) at offset %llu of a "
			       "%llu-byte segment", d->name, (unsigned long long)d->nbytes,
			       (unsigned long long)d->offset, (unsigned long long)sg->size);
		wc_seg_unref(sg);
		wc_weight_release_handle(c, d->handle, count);
		return r;
	}
	w = weight_alloc(d->name, d->dtype, a);
	ref = calloc(1, sizeof(*ref));
	if (!w || !ref || wc_seg_hold(sg, d->offset, d->nbytes) < 0) {
		free(ref);
		if (w && !w->in_arena)
			free(w);
		wc_seg_unref(sg);
		wc_weight_release_handle(c, d->handle, count);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	atomic_init(&ref->holders, 1);
	ref->held.handle = d->handle;
	ref->held.count = count;
	ref->held.seg = sg;
	ref->held.offset = d->offset;
	ref->held.nbytes = d->nbytes;
	if (d->key)
		memcpy(ref->held.key, d->key, WEIGHTD_DIGEST_LEN);
	ref->c = c;
	wc_conn_ref(c);
	wc_conn_held_add(c, &ref->held);
	w->ref = ref;
	w->seg = sg;
	w->offset = d->offset;
	w->ndim = d->ndim;
	if (d->ndim)   /* a 0-d scalar may come with no array at all */
		memcpy(w->shape, d->shape, d->ndim * sizeof(uint64_t));
	w->nbytes = d->nbytes;
	w->generation = d->generation;
	w->digest_alg = wc_weight_digest_algorithm(d->digest_algorithm, d->digest_len);
	if (w->digest_alg != WEIGHTD_DIGEST_UNKNOWN) {
		w->digest_len = d->digest_len;
		memcpy(w->digest, d->digest, d->digest_len);
	}
	if (d->key)
		memcpy(w->key, d->key, WEIGHTD_DIGEST_LEN);
	*ret = w;
	return 0;
}

int weightd_weight_fd(const weightd_weight *w) { return w ? w->seg->fd : -1; }
uint64_t weightd_weight_offset(const weightd_weight *w) { return w ? w->offset : 0; }
uint64_t weightd_weight_segment(const weightd_weight *w) { return w ? w->seg->id : 0; }
const char *weightd_weight_name(const weightd_weight *w) { return w ? w->name : NULL; }
const char *weightd_weight_dtype(const weightd_weight *w) { return w ? w->dtype : NULL; }
size_t weightd_weight_ndim(const weightd_weight *w) { return w ? w->ndim : 0; }
const uint64_t *weightd_weight_shape(const weightd_weight *w) { return w ? w->shape : NULL; }
uint64_t weightd_weight_nbytes(const weightd_weight *w) { return w ? w->nbytes : 0; }
const uint8_t *weightd_weight_digest(const weightd_weight *w) { return w ? w->digest : NULL; }
size_t weightd_weight_digest_len(const weightd_weight *w) { return w ? w->digest_len : 0; }
weightd_digest_algorithm weightd_weight_digest_algorithm(const weightd_weight *w)
{
	return w ? w->digest_alg : WEIGHTD_DIGEST_UNKNOWN;
}
const uint8_t *weightd_weight_key(const weightd_weight *w) { return w ? w->key : NULL; }
uint64_t weightd_weight_handle(const weightd_weight *w) { return w ? w->ref->held.handle : 0; }
uint64_t weightd_weight_generation(const weightd_weight *w) { return w ? w->generation : 0; }

/*
 * The weight is a range of its segment, which was checked (fstat) to cover its announced size
 * when it arrived; the segment is mapped once and the weight points into it.
 */
int wc_weight_map(weightd_weight *w, const char *slot, weightd_error *err)
{
	int r;

	if (w->mapped)
		return 0;
	if (w->offset > w->seg->size || w->nbytes > w->seg->size - w->offset) {
		r = wc_err_set(err, WEIGHTD_E_BYTE_COUNT_MISMATCH,
			       "the shared memory of weight \"%s\" holds %llu bytes but the weight "
			       "needs %llu", w->name, (unsigned long long)w->seg->size,
			       (unsigned long long)(w->offset + w->nbytes));
		if (err) {
			err->expected = (int64_t)(w->offset + w->nbytes);
			err->actual = (int64_t)w->seg->size;
		}
		wc_err_about(err, NULL, NULL, slot);
		return r;
	}
	if (w->nbytes == 0) {
		w->map = NULL;
		w->mapped = true;
		return 0;
	}
	r = wc_seg_map(w->seg, w->name, err);
	if (r < 0) {
		wc_err_about(err, NULL, NULL, slot);
		return r;
	}
	w->map = (uint8_t *)w->seg->map + w->offset;
	w->mapped = true;
	return 0;
}

int weightd_weight_map(weightd_weight *w, const void **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (!w || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_weight_map: no weight");
	r = wc_weight_map(w, NULL, err);
	if (r == 0)
		*ret = w->map;
	return r;
}

/* Drop one local holder of a reference; returns true when it was the last (the caller tells
 * the daemon and frees the ref). */
static bool ref_drop(struct wc_ref *ref)
{
	return atomic_fetch_sub(&ref->holders, 1) == 1;
}

void wc_weight_release_all(weightd_weight **ws, size_t n)
{
	uint64_t *handles = NULL;
	weightd_client *c = NULL;
	size_t nh = 0, total = 0, nc = 0;

	struct wc_seg *at = NULL;   /* the segment whose unlocks are being gathered */
	uint64_t handle;

	for (size_t i = 0; i < n; i++)
		total += ws[i] ? ws[i]->ref->held.count : 0;
	handles = total ? calloc(total, sizeof(*handles)) : NULL;
	for (size_t i = 0; i < n; i++) {
		weightd_weight *w = ws[i];
		struct wc_ref *ref;

		if (!w)
			continue;
		/* The unlocks of one segment's weights are made together (a unit's weights lie side
		 * by side): the segment is kept while they are gathered. */
		if (w->seg != at) {
			if (at) {
				wc_seg_unhold_commit(at);
				wc_seg_unref(at);
			}
			at = w->seg;
			wc_seg_ref(at);
		}
		ref = w->ref;
		weight_free_local(w);
		if (!ref_drop(ref))
			continue;
		/* its handle, when taken on the connection there is now (one taken before a restart
		 * of weightd and not re-attached names nothing there) */
		handle = wc_conn_held_remove(ref->c, &ref->held);
		/* Batch the handles of one client into one message; a weight of another client
		 * (or any, when out of memory) is told on its own. */
		if (handles && (!c || c == ref->c)) {
			c = ref->c;
			for (uint32_t k = 0; handle && k < ref->held.count; k++)
				handles[nh++] = handle;
			nc++;
		} else {
			wc_weight_release_handle(ref->c, handle, handle ? ref->held.count : 0);
			wc_conn_unref(ref->c);
		}
		free(ref);
	}
	if (at) {
		wc_seg_unhold_commit(at);
		wc_seg_unref(at);
	}
	if (c) {
		wc_conn_release(c, handles, nh);
		for (size_t i = 0; i < nc; i++)
			wc_conn_unref(c);
	}
	free(handles);
}

/* weightd locked a reply's weights on this client's descriptions before sending it (give.c); one
 * given back unread must not leave them locked on a segment this process keeps. */
static void unlock_given_back(weightd_client *c, uint64_t seg_id, uint64_t off, uint64_t len)
{
	struct wc_seg *sg = seg_id ? wc_seg_find(wc_conn_segs(c), seg_id) : NULL;

	if (sg) {
		wc_seg_unlock_range(sg, off, len);
		wc_seg_unref(sg);
	}
}

size_t wc_weight_reply_refs(weightd_client *c, const Weightd__Response *resp, uint64_t *out)
{
	const Weightd__PackedWeights *pw;
	const Weightd__UnitReply *ur;
	size_t n = 0;

	if (resp->body_case == WEIGHTD__RESPONSE__BODY_MATERIALIZE && (ur = resp->materialize) &&
	    (pw = ur->packed)) {
		if (out && pw->n_handle)
			memcpy(out, pw->handle, pw->n_handle * sizeof(*out));
		n = pw->n_handle;
		for (size_t k = 0; out && k < pw->n_handle && k < pw->n_segment &&
				   k < pw->n_offset && k < pw->n_nbytes; k++)
			if (pw->segment[k] < ur->n_segments && ur->segments[pw->segment[k]])
				unlock_given_back(c, ur->segments[pw->segment[k]]->id, pw->offset[k],
						  pw->nbytes[k]);
	} else if (resp->body_case == WEIGHTD__RESPONSE__BODY_SHARE && resp->share &&
		   resp->share->weight) {
		if (out) {
			out[n] = resp->share->weight->handle;
			if (resp->share->segment)
				unlock_given_back(c, resp->share->segment->id,
						  resp->share->weight->offset,
						  resp->share->weight->nbytes);
		}
		n++;
	}
	return n;
}

void weightd_release(weightd_weight *w)
{
	wc_weight_release_all(&w, w ? 1 : 0);
}

int weightd_weight_dup(const weightd_weight *w, weightd_weight **ret, weightd_error *err)
{
	weightd_weight *d;

	wc_err_clear(err);
	if (!w || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_weight_dup: no weight");
	d = weight_alloc(w->name, w->dtype, NULL);
	if (!d)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	if (wc_seg_hold(w->seg, w->offset, w->nbytes) < 0) {
		free(d);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	if (wc_seg_hold_commit(w->seg, err) < 0) {
		wc_seg_unhold(w->seg, w->offset, w->nbytes);
		wc_seg_unhold_commit(w->seg);
		free(d);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	wc_seg_ref(w->seg);
	d->seg = w->seg;
	d->offset = w->offset;
	d->ndim = w->ndim;
	memcpy(d->shape, w->shape, sizeof(d->shape));
	d->nbytes = w->nbytes;
	d->generation = w->generation;
	memcpy(d->digest, w->digest, sizeof(d->digest));
	d->digest_len = w->digest_len;
	d->digest_alg = w->digest_alg;
	memcpy(d->key, w->key, sizeof(d->key));
	atomic_fetch_add(&w->ref->holders, 1);
	d->ref = w->ref;
	*ret = d;
	return 0;
}

int weightd_share(const weightd_weight *w, weightd_weight **ret, weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Share sh = WEIGHTD__SHARE__INIT;
	Weightd__Response *resp = NULL;
	int *fds = NULL;
	uint32_t nfds = 0;
	int r;

	wc_err_clear(err);
	if (!w || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_share: no weight");
	sh.handle = w->ref->held.handle;
	req.body_case = WEIGHTD__REQUEST__BODY_SHARE;
	req.share = &sh;
	r = wc_conn_call(w->ref->c, &req, WEIGHTD__RESPONSE__BODY_SHARE, wc_weight_reply_refs,
			 &resp, &fds, &nfds, err);
	if (r < 0) {
		wc_err_about(err, NULL, w->name, NULL);
		return r;
	}
	if (!resp->share || !resp->share->weight || nfds != 1) {
		r = wc_err_set(err, WEIGHTD_E_PROTOCOL,
			       "weightd answered a share of \"%s\" with %u fds and %s weight",
			       w->name, nfds, resp->share && resp->share->weight ? "a" : "no");
		goto fail;
	}
	r = wc_weight_info_check(resp->share->weight, err);
	if (r < 0)
		goto fail;
	{
		const Weightd__SegmentInfo *si = resp->share->segment;
		struct wc_weight_desc d;
		struct wc_seg *sg;

		int spare = -1;

		r = wc_seg_get(wc_conn_segs(w->ref->c), si ? si->id : 0, si ? si->size : 0, fds[0],
			       &sg, &spare, err);
		fds[0] = -1;
		if (r < 0) {
			wc_conn_release(w->ref->c, &resp->share->weight->handle, 1);
			goto out;
		}
		wc_weight_desc_of(resp->share->weight, &d);
		wc_seg_ref(sg);   /* kept while the lock is taken */
		r = wc_weight_new(w->ref->c, &d, sg, 1, NULL, ret, err);
		if (r == 0 && wc_seg_hold_commit(sg, err) < 0) {
			weightd_release(*ret);
			*ret = NULL;
			r = -WEIGHTD_E_RESOURCE_EXHAUSTED;
		}
		wc_seg_unref(sg);
		if (spare >= 0)
			close(spare);
	}
	goto out;
fail:
	if (resp->share && resp->share->weight && nfds >= 1)
		wc_conn_release(w->ref->c, &resp->share->weight->handle, 1);
out:
	wc_conn_close_fds(fds, nfds);
	wd_msg_free(resp);
	return r;
}
