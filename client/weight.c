/* SPDX-License-Identifier: Apache-2.0 */
/* weight.c - libweightd's weights (fd, mapping, daemon reference) and in-flight requests. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

/* --- segments ---------------------------------------------------------------------------- */

void wc_nofile_text(char *buf, size_t cap)
{
	wd_nofile_text(buf, cap, "this process",
		       "ulimit -n, setrlimit(RLIMIT_NOFILE), or LimitNOFILE= for a service");
}

static size_t seg_bucket(uint64_t id, size_t cap)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static int seg_table_grow(weightd_client *c)
{
	size_t ncap = c->seg_cap ? c->seg_cap * 2 : 64;
	struct wc_seg **nt = calloc(ncap, sizeof(*nt));

	if (!nt)
		return -1;
	for (size_t i = 0; i < c->seg_cap; i++)
		while (c->seg_tab[i]) {
			struct wc_seg *sg = c->seg_tab[i];
			size_t b = seg_bucket(sg->id, ncap);

			c->seg_tab[i] = sg->next;
			sg->next = nt[b];
			nt[b] = sg;
		}
	free(c->seg_tab);
	c->seg_tab = nt;
	c->seg_cap = ncap;
	return 0;
}

int wc_seg_get(weightd_client *c, uint64_t id, uint64_t size, int fd, struct wc_seg **ret,
	       weightd_error *err)
{
	struct wc_seg *sg = NULL;
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0) {
		r = wc_err_set(err, WEIGHTD_E_IO, "cannot stat a shared-memory segment from weightd: %s",
			       strerror(errno));
		close(fd);
		return r;
	}
	if (size == 0)
		size = (uint64_t)st.st_size;
	if ((uint64_t)st.st_size < size) {
		r = wc_err_set(err, WEIGHTD_E_BYTE_COUNT_MISMATCH,
			       "segment %llu from weightd holds %lld bytes, but weightd says %llu",
			       (unsigned long long)id, (long long)st.st_size,
			       (unsigned long long)size);
		close(fd);
		return r;
	}
	pthread_mutex_lock(&c->seg_mu);
	if (id && c->seg_cap)
		for (sg = c->seg_tab[seg_bucket(id, c->seg_cap)]; sg; sg = sg->next)
			if (sg->id == id)
				break;
	if (sg) {
		if (sg->dev != (uint64_t)st.st_dev || sg->ino != (uint64_t)st.st_ino ||
		    sg->size != size) {
			pthread_mutex_unlock(&c->seg_mu);
			close(fd);
			return wc_err_set(err, WEIGHTD_E_PROTOCOL,
					  "weightd sent segment %llu as a different object than before",
					  (unsigned long long)id);
		}
		sg->refs++;
		pthread_mutex_unlock(&c->seg_mu);
		close(fd);   /* this client has the segment already: one fd per segment */
		*ret = sg;
		return 0;
	}
	sg = calloc(1, sizeof(*sg));
	if (!sg || (id && c->seg_n + 1 > c->seg_cap && seg_table_grow(c) < 0)) {
		pthread_mutex_unlock(&c->seg_mu);
		free(sg);
		close(fd);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	sg->id = id;
	sg->fd = fd;
	sg->size = size;
	sg->dev = (uint64_t)st.st_dev;
	sg->ino = (uint64_t)st.st_ino;
	sg->refs = 1;
	sg->c = c;
	if (id) {
		size_t b = seg_bucket(id, c->seg_cap);

		sg->next = c->seg_tab[b];
		c->seg_tab[b] = sg;
	}
	c->seg_n++;
	pthread_mutex_unlock(&c->seg_mu);
	*ret = sg;
	return 0;
}

void wc_seg_ref(struct wc_seg *sg)
{
	pthread_mutex_lock(&sg->c->seg_mu);
	sg->refs++;
	pthread_mutex_unlock(&sg->c->seg_mu);
}

void wc_seg_unref(struct wc_seg *sg)
{
	weightd_client *c;

	if (!sg)
		return;
	c = sg->c;
	pthread_mutex_lock(&c->seg_mu);
	if (--sg->refs) {
		pthread_mutex_unlock(&c->seg_mu);
		return;
	}
	if (sg->id) {
		struct wc_seg **pp = &c->seg_tab[seg_bucket(sg->id, c->seg_cap)];

		while (*pp && *pp != sg)
			pp = &(*pp)->next;
		if (*pp)
			*pp = sg->next;
	}
	c->seg_n--;
	pthread_mutex_unlock(&c->seg_mu);
	if (sg->mapped && sg->map)
		munmap(sg->map, (size_t)sg->size);
	close(sg->fd);
	free(sg);
}

void wc_seg_table_free(weightd_client *c)
{
	free(c->seg_tab);
	c->seg_tab = NULL;
	c->seg_cap = c->seg_n = 0;
}

/* Map the whole segment once (under the table's lock, so two threads never map it twice). */
static int seg_map(struct wc_seg *sg, const char *name, weightd_error *err)
{
	int r = 0;

	pthread_mutex_lock(&sg->c->seg_mu);
	if (!sg->mapped) {
		if (sg->size > SIZE_MAX) {
			r = wc_err_set(err, WEIGHTD_E_OVERFLOW,
				       "the segment of weight \"%s\" is too large to map here", name);
		} else if (sg->size) {
			void *p = mmap(NULL, (size_t)sg->size, PROT_READ, MAP_SHARED, sg->fd, 0);

			if (p == MAP_FAILED) {
				int e = errno;

				r = wc_err_set(err, e == ENOMEM ? WEIGHTD_E_RESOURCE_EXHAUSTED : WEIGHTD_E_IO,
					       "cannot map the segment of weight \"%s\" (%llu bytes): "
					       "%s%s", name, (unsigned long long)sg->size, strerror(e),
					       e == ENOMEM ? " (out of address space or of mappings: "
					       "see vm.max_map_count)" : "");
			} else {
				sg->map = p;
				sg->mapped = true;
			}
		} else {
			sg->mapped = true;
		}
	}
	pthread_mutex_unlock(&sg->c->seg_mu);
	return r;
}

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
	if (wi->digest.len && wc_digest_algorithm((int)wi->digest_algorithm, wi->digest.len) ==
			      WEIGHTD_DIGEST_UNKNOWN)
		return wc_err_set(err, WEIGHTD_E_PROTOCOL,
				  "weightd sent a %zu-byte digest for \"%s\" with algorithm %d, which "
				  "this library does not know at that length", wi->digest.len,
				  wi->name, (int)wi->digest_algorithm);
	return 0;
}

weightd_digest_algorithm wc_digest_algorithm(int alg, size_t len)
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

static void weight_free_local(weightd_weight *w)
{
	wc_seg_unref(w->seg);
	if (!w->in_arena)
		free(w);
}

void wc_release_handle(weightd_client *c, uint64_t handle, uint32_t count)
{
	uint64_t one[4] = { handle, handle, handle, handle }, *many = one;

	if (count == 0)
		return;
	if (count > 4) {
		many = malloc(count * sizeof(*many));
		if (!many) {   /* one at a time, then */
			for (uint32_t i = 0; i < count; i++)
				wc_send_release(c, &handle, 1);
			return;
		}
		for (uint32_t i = 0; i < count; i++)
			many[i] = handle;
	}
	wc_send_release(c, many, count);
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
		wc_release_handle(c, d->handle, count);
		return r;
	}
	w = weight_alloc(d->name, d->dtype, a);
	ref = calloc(1, sizeof(*ref));
	if (!w || !ref) {
		free(ref);
		if (w)
			weight_free_local(w);
		wc_seg_unref(sg);
		wc_release_handle(c, d->handle, count);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	atomic_init(&ref->holders, 1);
	ref->handle = d->handle;
	ref->count = count;
	ref->c = c;
	wc_client_ref(c);
	w->ref = ref;
	w->seg = sg;
	w->offset = d->offset;
	w->ndim = d->ndim;
	if (d->ndim)   /* a 0-d scalar may come with no array at all */
		memcpy(w->shape, d->shape, d->ndim * sizeof(uint64_t));
	w->nbytes = d->nbytes;
	w->generation = d->generation;
	w->digest_alg = wc_digest_algorithm(d->digest_algorithm, d->digest_len);
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
uint64_t weightd_weight_handle(const weightd_weight *w) { return w ? w->ref->handle : 0; }
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
	r = seg_map(w->seg, w->name, err);
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

void wc_weights_release(weightd_weight **ws, size_t n)
{
	uint64_t *handles = NULL;
	weightd_client *c = NULL;
	size_t nh = 0, total = 0, nc = 0;

	for (size_t i = 0; i < n; i++)
		total += ws[i] ? ws[i]->ref->count : 0;
	handles = total ? calloc(total, sizeof(*handles)) : NULL;
	for (size_t i = 0; i < n; i++) {
		weightd_weight *w = ws[i];
		struct wc_ref *ref;

		if (!w)
			continue;
		ref = w->ref;
		weight_free_local(w);
		if (!ref_drop(ref))
			continue;
		/* Batch the handles of one client into one message; a weight of another client
		 * (or any, when out of memory) is told on its own. */
		if (handles && (!c || c == ref->c)) {
			c = ref->c;
			for (uint32_t k = 0; k < ref->count; k++)
				handles[nh++] = ref->handle;
			nc++;
		} else {
			wc_release_handle(ref->c, ref->handle, ref->count);
			wc_client_unref(ref->c);
		}
		free(ref);
	}
	if (c) {
		wc_send_release(c, handles, nh);
		for (size_t i = 0; i < nc; i++)
			wc_client_unref(c);
	}
	free(handles);
}

void weightd_release(weightd_weight *w)
{
	wc_weights_release(&w, w ? 1 : 0);
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
	sh.handle = w->ref->handle;
	req.body_case = WEIGHTD__REQUEST__BODY_SHARE;
	req.share = &sh;
	r = wc_call(w->ref->c, &req, WEIGHTD__RESPONSE__BODY_SHARE, &resp, &fds, &nfds, err);
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

		r = wc_seg_get(w->ref->c, si ? si->id : 0, si ? si->size : 0, fds[0], &sg, err);
		fds[0] = -1;
		if (r < 0) {
			wc_send_release(w->ref->c, &resp->share->weight->handle, 1);
			goto out;
		}
		wc_weight_desc_of(resp->share->weight, &d);
		r = wc_weight_new(w->ref->c, &d, sg, 1, NULL, ret, err);
	}
	goto out;
fail:
	if (resp->share && resp->share->weight && nfds >= 1)
		wc_send_release(w->ref->c, &resp->share->weight->handle, 1);
out:
	wc_close_fds(fds, nfds);
	wd_msg_free(resp);
	return r;
}

/* --- in-flight requests ------------------------------------------------------------------ */

int wc_inflight_new(weightd_client *c, enum wc_kind kind, weightd_inflight **ret,
		    weightd_error *err)
{
	weightd_inflight *f = calloc(1, sizeof(*f));

	if (!f)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	wc_err_clear(&f->err);
	f->kind = kind;
	f->c = c;
	wc_client_ref(c);
	*ret = f;
	return 0;
}

/*
 * The reply to a single materialization: columns of one entry (named `name`, the entry's name)
 * and exactly one fd. Takes resp and fds in every case; anything not kept is closed and
 * released.
 */
static int single_weight(weightd_client *c, Weightd__Response *resp, int *fds, uint32_t nfds,
			 const char *name, weightd_weight **ret, weightd_error *err)
{
	const Weightd__UnitReply *ur = resp->materialize;
	const Weightd__PackedWeights *pw = ur ? ur->packed : NULL;
	struct wc_weight_desc d;
	size_t bad;
	int r;

	if (!pw) {
		r = wc_err_set(err, WEIGHTD_E_PROTOCOL,
			       "weightd answered a materialization without its columns");
	} else {
		r = wc_packed_check(ur, 1, 0, nfds, &bad, err);
		if (r == 0)
			wc_packed_desc(pw, 0, 0, name, &d);
	}
	if (r < 0) {
		wc_reply_discard(c, resp, fds, nfds);
		return r;
	}
	{
		const Weightd__SegmentInfo *si = ur->segments[0];   /* checked: one, for fds[0] */
		struct wc_seg *sg;

		r = wc_seg_get(c, si->id, si->size, fds[0], &sg, err);
		if (r == 0)
			r = wc_weight_new(c, &d, sg, 1, NULL, ret, err);
		else
			wc_release_handle(c, d.handle, 1);
	}
	free(fds);
	wd_msg_free(resp);
	return r;
}

/*
 * A single materialization is sent as a one-entry unit, but the caller named no slot: forget the
 * slot weightd reported (its message does not name it), so the error is about the tensor.
 */
static void unslot(weightd_error *err)
{
	err->slot[0] = '\0';
}

/* Turn a finished reply into f->w / f->pre or f->err, once. Returns 0 or -code. */
static int settle(weightd_inflight *f)
{
	Weightd__Response *resp = NULL;
	int *fds = NULL;
	uint32_t nfds = 0;
	int r;

	if (f->settled)
		return f->err.code ? -f->err.code : 0;
	r = wc_pending_take(f->p, f->kind == WC_MATERIALIZE ? WEIGHTD__RESPONSE__BODY_MATERIALIZE :
			    WEIGHTD__RESPONSE__BODY_PREFLIGHT, &resp, &fds, &nfds, &f->err);
	if (r == 0) {
		if (f->kind == WC_MATERIALIZE) {
			r = single_weight(f->c, resp, fds, nfds, f->name, &f->w, &f->err);
		} else {
			wc_close_fds(fds, nfds);
			r = wc_preflight_from_reply(resp, &f->pre, &f->err);
		}
	}
	if (r < 0) {
		wc_annot_apply(f->annots, f->n_annots, &f->err);
		if (f->kind == WC_PREFLIGHT)
			wc_err_name_slot(&f->err);
		else
			unslot(&f->err);
		if (!f->err.checkpoint[0] && !f->err.tensor[0])
			wc_err_about(&f->err, f->checkpoint, f->tensor, NULL);
	}
	wc_pending_free(f->c, f->p);
	f->p = NULL;
	f->settled = true;
	return r;
}

int wc_inflight_wait_settle(weightd_inflight *f, weightd_error *err)
{
	int r;

	if (!f->settled)
		wc_wait(f->c, f->p, -1);
	r = settle(f);
	if (r < 0)
		wc_err_copy(err, &f->err);
	return r;
}

/* src (NULL: "") into dst, truncated to fit: what snprintf "%s" does, at a get's speed. */
static void copy_text(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap - 1) : 0;

	memcpy(dst, src ? src : "", n);
	dst[n] = '\0';
}

/* Send a one-entry unit named `name` whose recipe is r. */
static int send_single(weightd_client *c, const char *name, const weightd_recipe *r,
		       weightd_inflight **ret, weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Unit unit = WEIGHTD__UNIT__INIT;
	Weightd__UnitEntry entry = WEIGHTD__UNIT_ENTRY__INIT, *entries[1] = { &entry };
	struct wc_pb_recipe pb;
	weightd_inflight *f = NULL;
	const char *ck, *tn;
	int rc;

	rc = wc_pb_recipe_init(&pb, r, err);
	if (rc < 0)
		return rc;
	rc = wc_inflight_new(c, WC_MATERIALIZE, &f, err);
	if (rc < 0)
		goto out;
	f->name = strdup(name);   /* a packed reply does not repeat it */
	rc = f->name ? wc_annot_add(&f->annots, &f->n_annots, name, r) : -1;
	if (rc < 0) {
		rc = wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	wc_recipe_about(r, &ck, &tn);
	copy_text(f->checkpoint, sizeof(f->checkpoint), ck);
	copy_text(f->tensor, sizeof(f->tensor), tn);
	entry.name = (char *)name;
	entry.recipe = &pb.msg;
	unit.n_entries = 1;
	unit.entries = entries;
	req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
	req.materialize = &unit;
	rc = wc_send(c, &req, &f->p, err);
	if (rc < 0) {
		wc_err_about(err, f->checkpoint, f->tensor, NULL);
		goto out;
	}
	*ret = f;
	f = NULL;
out:
	weightd_inflight_free(f);
	wc_pb_recipe_fini(&pb);
	return rc;
}

int weightd_materialize(weightd_client *c, const char *checkpoint, const char *tensor,
			const weightd_selection *sel, weightd_inflight **ret, weightd_error *err)
{
	weightd_recipe *r = NULL;
	int rc;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_materialize: no client or no result pointer");
	rc = weightd_recipe_new(&r, err);
	if (rc == 0)
		rc = weightd_recipe_source(r, checkpoint, tensor, sel, err);
	if (rc >= 0)
		rc = send_single(c, tensor, r, ret, err);
	weightd_recipe_free(r);
	return rc < 0 ? rc : 0;
}

int weightd_materialize_recipe(weightd_client *c, const weightd_recipe *r,
			       weightd_inflight **ret, weightd_error *err)
{
	const char *ck, *tn;

	wc_err_clear(err);
	if (!c || !r || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_materialize_recipe: no client, recipe or result pointer");
	wc_recipe_about(r, &ck, &tn);
	return send_single(c, tn ? tn : "output", r, ret, err);
}

int weightd_finish(weightd_inflight *f, weightd_weight **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (!f || !ret || f->kind != WC_MATERIALIZE) {
		weightd_inflight_free(f);
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_finish: not the handle of a materialization");
	}
	r = wc_inflight_wait_settle(f, err);
	if (r == 0) {
		*ret = f->w;
		f->w = NULL;
	}
	weightd_inflight_free(f);
	return r;
}

int weightd_borrow(weightd_inflight *f, const weightd_weight **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (!f || !ret || f->kind != WC_MATERIALIZE)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_borrow: not the handle of a materialization");
	if (!f->settled && !wc_wait(f->c, f->p, 0)) {
		*ret = NULL;
		return 0;
	}
	r = settle(f);
	if (r < 0)
		return wc_err_copy(err, &f->err);
	*ret = f->w;
	return 0;
}

void weightd_inflight_free(weightd_inflight *f)
{
	if (!f)
		return;
	if (f->p)
		wc_pending_free(f->c, f->p);
	weightd_release(f->w);
	weightd_preflight_free(f->pre);
	wc_annot_free(f->annots, f->n_annots);
	wc_client_unref(f->c);
	free(f->name);
	free(f);
}
