/* SPDX-License-Identifier: Apache-2.0 */
/* inflight.c - requests whose reply a caller collects later (weightd_inflight): waiting and
 * settling any kind, and the single-weight materialization (weightd_materialize, _finish,
 * _borrow). */
#include "inflight.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "columns.h"
#include "conn.h"
#include "err.h"
#include "msg.h"
#include "recipe.h"
#include "seg.h"
#include "weight.h"

int wc_inflight_new(weightd_client *c, const struct wc_inflight_kind *kind, weightd_inflight **ret,
		    weightd_error *err)
{
	weightd_inflight *f = calloc(1, sizeof(*f));

	if (!f)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	wc_err_clear(&f->err);
	f->kind = kind;
	f->c = c;
	wc_conn_ref(c);
	*ret = f;
	return 0;
}

/*
 * The reply to a single materialization: columns of one entry (named `name`, the entry's name)
 * and exactly one fd. Takes resp and fds in every case; anything not kept is closed and
 * released.
 */
static int single_weight(weightd_inflight *f, Weightd__Response *resp, int *fds, uint32_t nfds,
			 void **ret, weightd_error *err)
{
	weightd_client *c = f->c;
	const Weightd__UnitReply *ur = resp->materialize;
	const Weightd__PackedWeights *pw = ur ? ur->packed : NULL;
	struct wc_weight_desc d;
	size_t bad;
	int r;

	if (!pw) {
		r = wc_err_set(err, WEIGHTD_E_PROTOCOL,
			       "weightd answered a materialization without its columns");
	} else {
		r = wc_columns_check(ur, 1, 0, nfds, &bad, err);
		if (r == 0)
			wc_columns_desc(pw, 0, 0, f->name, &d);
	}
	if (r < 0) {
		wc_conn_discard(c, wc_weight_reply_refs, resp, fds, nfds);
		return r;
	}
	{
		const Weightd__SegmentInfo *si = ur->segments[0];   /* checked: one, for fds[0] */
		struct wc_seg *sg;
		weightd_weight *w = NULL;

		int spare = -1;

		r = wc_seg_get(wc_conn_segs(c), si->id, si->size, fds[0], &sg, &spare, err);
		if (r == 0) {
			wc_seg_ref(sg);   /* kept while the lock is taken */
			r = wc_weight_new(c, &d, sg, 1, NULL, &w, err);
			if (r == 0 && wc_seg_hold_commit(sg, err) < 0) {
				weightd_release(w);
				r = -WEIGHTD_E_RESOURCE_EXHAUSTED;
			}
			wc_seg_unref(sg);
		} else {
			wc_weight_release_handle(c, d.handle, 1);
		}
		if (spare >= 0)
			close(spare);
		if (r == 0)
			*ret = w;
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

static void release_weight(void *w)
{
	weightd_release(w);
}

static const struct wc_inflight_kind materialize = {
	.body = WEIGHTD__RESPONSE__BODY_MATERIALIZE,
	.settle = single_weight,
	.result_free = release_weight,
	.name_slot = false,
};

/* Turn a finished reply into f->result or f->err, once. Returns 0 or -code. */
static int settle(weightd_inflight *f)
{
	Weightd__Response *resp = NULL;
	int *fds = NULL;
	uint32_t nfds = 0;
	int r;

	if (f->settled)
		return f->err.code ? -f->err.code : 0;
	r = wc_conn_pending_take(f->p, f->kind->body, &resp, &fds, &nfds, &f->err);
	if (r == 0)
		r = f->kind->settle(f, resp, fds, nfds, &f->result, &f->err);
	if (r < 0) {
		wc_recipe_annot_apply(f->annots, f->n_annots, &f->err);
		if (f->kind->name_slot)
			wc_err_name_slot(&f->err);
		else
			unslot(&f->err);
		if (!f->err.checkpoint[0] && !f->err.tensor[0])
			wc_err_about(&f->err, f->checkpoint, f->tensor, NULL);
	}
	wc_conn_pending_free(f->c, f->p);
	f->p = NULL;
	f->settled = true;
	return r;
}

int wc_inflight_wait_settle(weightd_inflight *f, weightd_error *err)
{
	int r;

	if (!f->settled)
		wc_conn_wait(f->c, f->p, -1);
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

	rc = wc_recipe_pb_init(&pb, r, err);
	if (rc < 0)
		return rc;
	rc = wc_inflight_new(c, &materialize, &f, err);
	if (rc < 0)
		goto out;
	f->name = strdup(name);   /* a packed reply does not repeat it */
	rc = f->name ? wc_recipe_annot_add(&f->annots, &f->n_annots, name, r) : -1;
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
	rc = wc_conn_send(c, &req, wc_weight_reply_refs, &f->p, err);
	if (rc < 0) {
		wc_err_about(err, f->checkpoint, f->tensor, NULL);
		goto out;
	}
	*ret = f;
	f = NULL;
out:
	weightd_inflight_free(f);
	wc_recipe_pb_fini(&pb);
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
	if (!f || !ret || f->kind != &materialize) {
		weightd_inflight_free(f);
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_finish: not the handle of a materialization");
	}
	r = wc_inflight_wait_settle(f, err);
	if (r == 0) {
		*ret = f->result;
		f->result = NULL;
	}
	weightd_inflight_free(f);
	return r;
}

int weightd_borrow(weightd_inflight *f, const weightd_weight **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (!f || !ret || f->kind != &materialize)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_borrow: not the handle of a materialization");
	if (!f->settled && !wc_conn_wait(f->c, f->p, 0)) {
		*ret = NULL;
		return 0;
	}
	r = settle(f);
	if (r < 0)
		return wc_err_copy(err, &f->err);
	*ret = f->result;
	return 0;
}

void weightd_inflight_free(weightd_inflight *f)
{
	if (!f)
		return;
	if (f->p)
		wc_conn_pending_free(f->c, f->p);
	if (f->result)
		f->kind->result_free(f->result);
	wc_recipe_annot_free(f->annots, f->n_annots);
	wc_conn_unref(f->c);
	free(f->name);
	free(f);
}
