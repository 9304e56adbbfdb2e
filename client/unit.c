/* SPDX-License-Identifier: Apache-2.0 */
/* unit.c - libweightd's units: slots, submit and finish, validate-then-bind, preflight. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "unit_int.h"
#include "wd_hashidx.h"

int weightd_unit_new(weightd_client *c, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_new: no client or no result pointer");
	u = calloc(1, sizeof(*u));
	if (!u)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	u->c = c;
	wc_client_ref(c);
	wc_arena_init(&u->arena, c->msgs);
	*ret = u;
	return 0;
}

static bool slot_eq(const void *ctx, uint32_t pos, const void *key)
{
	const weightd_unit *u = ctx;
	return strcmp(u->slots[pos].name, key) == 0;
}

/* O(1): slot lookup is by hash, so declaring and answering a unit of n slots is linear. */
struct slot *wc_unit_find_slot(const weightd_unit *u, const char *name)
{
	uint32_t at;

	if (!name)
		return NULL;
	/* a slot is usually given its source right after it is declared: the newest slot is
	 * compared first, saving a random probe of a large unit's index */
	if (u->n && strcmp(u->slots[u->n - 1].name, name) == 0)
		return &u->slots[u->n - 1];
	at = wd_hashidx_find(&u->index, wc_name_hash(name), slot_eq, u, name);
	return at ? &u->slots[at - 1] : NULL;
}

/* The calls that change slots are only allowed before submit (and after a failure). */
static int check_new(const weightd_unit *u, const char *call, weightd_error *err)
{
	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: unit is NULL", call);
	if (u->state != U_NEW)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "%s: the unit was already submitted; slots can change only before "
				  "submit or after a failed finish or validate", call);
	return 0;
}

int weightd_unit_slot(weightd_unit *u, const char *name, const char *dtype,
		      const uint64_t *shape, size_t ndim, void **dest, weightd_error *err)
{
	struct slot *s;
	int r;

	r = check_new(u, "weightd_unit_slot", err);
	if (r < 0)
		return r;
	if (!name || !name[0])
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "a slot needs a non-empty name");
	if (wc_unit_find_slot(u, name)) {
		r = wc_err_set(err, WEIGHTD_E_DUPLICATE_NAME,
			       "slot \"%s\" is declared twice in the unit", name);
		wc_err_about(err, NULL, NULL, name);
		return r;
	}
	if (dtype && wd_dtype_from_name(dtype) == WD_DTYPE_INVALID) {
		r = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
			       "slot \"%s\" declares unknown dtype \"%s\"", name, dtype);
		wc_err_about(err, NULL, NULL, name);
		return r;
	}
	if (dtype && (ndim > WEIGHTD_MAX_DIMS || (ndim && !shape))) {
		r = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
			       "slot \"%s\" declares %zu dimensions (at most %d)", name, ndim,
			       WEIGHTD_MAX_DIMS);
		wc_err_about(err, NULL, NULL, name);
		return r;
	}
	if (u->n > (size_t)INT32_MAX - 1)
		return wc_err_set(err, WEIGHTD_E_LIMIT_EXCEEDED, "too many slots in one unit");
	if (u->n == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 16;
		struct slot *slots = wd_msg_cache_alloc(u->c->msgs, cap * sizeof(*slots));

		if (!slots)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		if (u->n)
			memcpy(slots, u->slots, u->n * sizeof(*slots));
		wd_msg_free(u->slots);
		u->slots = slots;
		u->cap = cap;
	}
	if (wd_hashidx_reserve(&u->index, u->n + 1) < 0)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	s = &u->slots[u->n];
	memset(s, 0, sizeof(*s));
	s->name = wc_arena_strdup(&u->arena, name);
	if (!s->name)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	s->dtype = dtype ? wd_dtype_name(wd_dtype_from_name(dtype)) : NULL;
	if (dtype && ndim) {
		uint64_t *sh = wc_arena_alloc(&u->arena, ndim * sizeof(*shape));

		if (!sh)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(sh, shape, ndim * sizeof(*shape));
		s->shape = sh;
		s->ndim = (uint32_t)ndim;
	}
	s->dest = dest;
	wd_hashidx_put(&u->index, wc_name_hash(s->name), (uint32_t)u->n);
	return (int)u->n++;
}

static struct slot *slot_for_set(weightd_unit *u, const char *slot, const char *call,
				 weightd_error *err, int *rc)
{
	struct slot *s;

	*rc = check_new(u, call, err);
	if (*rc < 0)
		return NULL;
	s = wc_unit_find_slot(u, slot);
	if (!s) {
		*rc = wc_err_set(err, WEIGHTD_E_NOT_FOUND, "%s: the unit has no slot \"%s\"", call,
				 slot ? slot : "(null)");
		wc_err_about(err, NULL, NULL, slot);
	}
	return s;
}

static void slot_clear_src(struct slot *s)
{
	weightd_recipe_free(s->recipe);
	if (s->src == SRC_ALIAS)   /* a tensor's strings are in the unit's arena */
		free(s->alias);
	s->recipe = NULL;
	s->alias = NULL;
	s->src = SRC_NONE;
}

int weightd_unit_set_recipe(weightd_unit *u, const char *slot, const weightd_recipe *r,
			    weightd_error *err)
{
	weightd_recipe *copy = NULL;
	struct slot *s;
	int rc;

	s = slot_for_set(u, slot, "weightd_unit_set_recipe", err, &rc);
	if (!s)
		return rc;
	if (!r || r->n == 0) {
		rc = wc_err_set(err, WEIGHTD_E_EMPTY_INPUTS, "slot \"%s\" was given an empty recipe",
				slot);
		wc_err_about(err, NULL, NULL, slot);
		return rc;
	}
	rc = wc_recipe_copy(r, &copy, err);
	if (rc < 0)
		return rc;
	slot_clear_src(s);
	s->recipe = copy;
	s->src = SRC_RECIPE;
	return 0;
}

int weightd_unit_set_tensor(weightd_unit *u, const char *slot, const char *checkpoint,
			    const char *tensor, const weightd_selection *sel, weightd_error *err)
{
	weightd_recipe *r = NULL;
	struct slot *s;
	int rc;

	s = slot_for_set(u, slot, "weightd_unit_set_tensor", err, &rc);
	if (!s)
		return rc;
	if (!sel && checkpoint && checkpoint[0] && tensor && tensor[0]) {
		size_t cl = strlen(checkpoint) + 1, tl = strlen(tensor) + 1;
		char *src = wc_arena_alloc(&u->arena, cl + tl);

		if (!src)
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(src, checkpoint, cl);
		memcpy(src + cl, tensor, tl);
		slot_clear_src(s);
		s->alias = src;
		s->src = SRC_TENSOR;
		return 0;
	}
	rc = weightd_recipe_new(&r, err);
	if (rc == 0)
		rc = weightd_recipe_source(r, checkpoint, tensor, sel, err);
	if (rc < 0) {
		weightd_recipe_free(r);
		wc_err_about(err, checkpoint, tensor, slot);
		return rc;
	}
	slot_clear_src(s);
	s->recipe = r;
	s->src = SRC_RECIPE;
	return 0;
}

int weightd_unit_set_alias(weightd_unit *u, const char *slot, const char *target,
			   weightd_error *err)
{
	struct slot *s;
	char *t;
	int rc;

	s = slot_for_set(u, slot, "weightd_unit_set_alias", err, &rc);
	if (!s)
		return rc;
	if (!target || !target[0]) {
		rc = wc_err_set(err, WEIGHTD_E_BAD_ALIAS, "slot \"%s\" is made an alias of nothing",
				slot);
		wc_err_about(err, NULL, NULL, slot);
		return rc;
	}
	t = strdup(target);
	if (!t)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	slot_clear_src(s);
	s->alias = t;
	s->src = SRC_ALIAS;
	return 0;
}

int weightd_unit_submit(weightd_unit *u, weightd_error *err)
{
	int rc;

	rc = check_new(u, "weightd_unit_submit", err);
	if (rc < 0)
		return rc;
	rc = wc_unit_send(u, false, &u->p, err);
	if (rc == 0)
		u->state = U_SUBMITTED;
	return rc;
}

int weightd_unit_poll(weightd_unit *u, int *ret_done, weightd_error *err)
{
	wc_err_clear(err);
	if (!u || !ret_done)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_unit_poll: no unit");
	if (u->state != U_SUBMITTED) {
		*ret_done = u->state != U_NEW;
		return 0;
	}
	*ret_done = wc_wait(u->c, u->p, 0);
	return 0;
}

/* Error about slot s: names the slot, and the checkpoint and tensor its recipe reads. */
static void about_slot(const struct slot *s, weightd_error *err)
{
	const char *ck = NULL, *tn = NULL;

	if (!err)
		return;
	if (s->src == SRC_TENSOR) {
		ck = slot_ckpt(s);
		tn = slot_tensor(s);
	} else {
		wc_recipe_about(s->recipe, &ck, &tn);
	}
	if (!err->checkpoint[0] && !err->tensor[0])
		wc_err_about(err, ck, tn, NULL);
	if (!err->slot[0])
		wc_err_about(err, NULL, NULL, s->name);
}

/* Apply the JSON paths of the unit's recipes to an error naming a node. */
static void annotate(const weightd_unit *u, weightd_error *err)
{
	const struct slot *s;

	if (!err || !err->node)
		return;
	s = wc_unit_find_slot(u, err->slot);
	if (!s && u->n == 1)
		s = &u->slots[0];
	if (s && s->src == SRC_RECIPE) {
		struct wc_annot *as = NULL;
		size_t n = 0;

		if (wc_annot_add(&as, &n, err->slot[0] ? err->slot : NULL, s->recipe) == 0)
			wc_annot_apply(as, n, err);
		wc_annot_free(as, n);
	}
}

int weightd_unit_finish(weightd_unit *u, weightd_error *err)
{
	Weightd__Response *resp = NULL;
	int *fds = NULL;
	uint32_t nfds = 0;
	int rc;

	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_unit_finish: unit is NULL");
	if (u->state == U_HELD || u->state == U_VALID)
		return 0;
	if (u->state != U_SUBMITTED)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_finish: the unit was not submitted");
	wc_wait(u->c, u->p, -1);
	rc = wc_pending_take(u->p, WEIGHTD__RESPONSE__BODY_MATERIALIZE, &resp, &fds, &nfds, err);
	if (rc == 0)
		rc = wc_unit_take_reply(u, resp, fds, nfds, err);
	else
		annotate(u, err);
	wc_pending_free(u->c, u->p);
	u->p = NULL;
	if (rc < 0) {
		const struct slot *s = err ? wc_unit_find_slot(u, err->slot) : NULL;

		if (s)
			about_slot(s, err);
		wc_err_name_slot(err);
		u->state = U_NEW;
		return rc;
	}
	u->state = U_HELD;
	return 0;
}

/* Release everything the unit holds (unmapping it) and go back to NEW. */
static void unit_drop_weights(weightd_unit *u)
{
	wc_weights_release(u->weights, u->n_weights);
	wd_msg_free(u->weights);
	u->weights = NULL;
	u->n_weights = 0;
	for (size_t i = 0; i < u->n; i++) {
		u->slots[i].w = NULL;
		u->slots[i].data = NULL;
	}
	u->state = U_NEW;
}

/* Everything about slot s's weight that can be checked without touching the fd. */
static int check_slot(const struct slot *s, weightd_error *err)
{
	const weightd_weight *w = s->w;
	enum wd_dtype dt = wd_dtype_from_name(w->dtype);
	uint64_t elems, bytes;
	int rc;

	if (dt == WD_DTYPE_INVALID) {
		rc = wc_err_set(err, WEIGHTD_E_UNSUPPORTED,
				"weightd served dtype %s, which this libweightd does not know", w->dtype);
		goto fail;
	}
	if (s->dtype && strcmp(s->dtype, w->dtype) != 0) {
		rc = wc_err_set(err, WEIGHTD_E_DTYPE_MISMATCH,
				"weightd served dtype %s, the slot declares %s", w->dtype, s->dtype);
		goto fail;
	}
	if (s->dtype && s->ndim != w->ndim) {
		rc = wc_err_set(err, WEIGHTD_E_SHAPE_MISMATCH,
				"weightd served %zu dimensions, the slot declares %u", w->ndim, s->ndim);
		if (err) {
			err->expected = (int64_t)s->ndim;
			err->actual = (int64_t)w->ndim;
		}
		goto fail;
	}
	for (size_t i = 0; s->dtype && i < s->ndim; i++)
		if (s->shape[i] != w->shape[i]) {
			rc = wc_err_set(err, WEIGHTD_E_SHAPE_MISMATCH,
					"weightd served %llu along axis %zu, the slot declares %llu",
					(unsigned long long)w->shape[i], i, (unsigned long long)s->shape[i]);
			if (err) {
				err->axis = (int32_t)i;
				err->expected = (int64_t)s->shape[i];
				err->actual = (int64_t)w->shape[i];
			}
			goto fail;
		}
	if (!wd_shape_elems(w->shape, (int)w->ndim, &elems) || !wd_dtype_bytes(dt, elems, &bytes)) {
		rc = wc_err_set(err, WEIGHTD_E_OVERFLOW,
				"the served shape's byte count overflows or is not a whole number of %s "
				"blocks", w->dtype);
		goto fail;
	}
	if (bytes != w->nbytes) {
		rc = wc_err_set(err, WEIGHTD_E_BYTE_COUNT_MISMATCH,
				"weightd served %llu bytes, but %s of that shape takes %llu",
				(unsigned long long)w->nbytes, w->dtype, (unsigned long long)bytes);
		if (err) {
			err->expected = (int64_t)bytes;
			err->actual = (int64_t)w->nbytes;
		}
		goto fail;
	}
	return 0;
fail:
	about_slot(s, err);
	wc_err_name_slot(err);
	return rc;
}

int weightd_unit_validate(weightd_unit *u, weightd_error *err)
{
	int rc;

	wc_err_clear(err);
	if (!u)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_unit_validate: unit is NULL");
	if (u->state == U_VALID)
		return 0;
	if (u->state == U_SUBMITTED) {
		rc = weightd_unit_finish(u, err);
		if (rc < 0)
			return rc;
	}
	if (u->state != U_HELD)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_validate: the unit was not submitted");
	for (size_t i = 0; i < u->n; i++) {
		rc = check_slot(&u->slots[i], err);
		if (rc < 0)
			goto fail;
	}
	for (size_t i = 0; i < u->n; i++) {
		struct slot *s = &u->slots[i];

		rc = wc_weight_map(s->w, s->name, err);
		if (rc < 0) {
			about_slot(s, err);
			wc_err_name_slot(err);
			goto fail;
		}
		s->data = s->w->map;
	}
	u->state = U_VALID;
	return 0;
fail:
	unit_drop_weights(u);
	return rc;
}

void weightd_unit_bind(weightd_unit *u)
{
	if (!u || u->state != U_VALID)
		return;
	for (size_t i = 0; i < u->n; i++)
		if (u->slots[i].dest)
			*u->slots[i].dest = (void *)u->slots[i].data;
}

void weightd_unit_free(weightd_unit *u)
{
	if (!u)
		return;
	if (u->p)
		wc_pending_free(u->c, u->p);
	wc_weights_release(u->weights, u->n_weights);
	wd_msg_free(u->weights);
	for (size_t i = 0; i < u->n; i++)
		slot_clear_src(&u->slots[i]);
	wd_msg_free(u->slots);
	wd_hashidx_free(&u->index);
	wc_arena_free(&u->arena);   /* after the weights, which live in it */
	wc_client_unref(u->c);      /* last: the arena's blocks go to its cache */
	free(u);
}

size_t weightd_unit_slot_count(const weightd_unit *u)
{
	return u ? u->n : 0;
}

const char *weightd_unit_slot_name(const weightd_unit *u, size_t i)
{
	return u && i < u->n ? u->slots[i].name : NULL;
}

const weightd_weight *weightd_unit_weight(const weightd_unit *u, const char *slot)
{
	const struct slot *s;

	if (!u || (u->state != U_HELD && u->state != U_VALID))
		return NULL;
	s = wc_unit_find_slot(u, slot);
	return s ? s->w : NULL;
}

const void *weightd_unit_data(const weightd_unit *u, const char *slot)
{
	const struct slot *s;

	if (!u || u->state != U_VALID)
		return NULL;
	s = wc_unit_find_slot(u, slot);
	return s ? s->data : NULL;
}

uint64_t weightd_unit_bytes_read(const weightd_unit *u)
{
	return u ? u->bytes_read : 0;
}

/* --- preflight --------------------------------------------------------------------------- */

int weightd_unit_preflight(weightd_unit *u, weightd_inflight **ret, weightd_error *err)
{
	weightd_inflight *f = NULL;
	int rc;

	wc_err_clear(err);
	if (!u || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_preflight: no unit or no result pointer");
	rc = wc_inflight_new(u->c, WC_PREFLIGHT, &f, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < u->n; i++)
		if (u->slots[i].src == SRC_RECIPE &&
		    wc_annot_add(&f->annots, &f->n_annots, u->slots[i].name, u->slots[i].recipe) < 0) {
			weightd_inflight_free(f);
			return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
	if (u->n == 1 && (u->slots[0].src == SRC_RECIPE || u->slots[0].src == SRC_TENSOR)) {
		const char *ck, *tn;

		if (u->slots[0].src == SRC_TENSOR) {
			ck = slot_ckpt(&u->slots[0]);
			tn = slot_tensor(&u->slots[0]);
		} else {
			wc_recipe_about(u->slots[0].recipe, &ck, &tn);
		}
		snprintf(f->checkpoint, sizeof(f->checkpoint), "%s", ck ? ck : "");
		snprintf(f->tensor, sizeof(f->tensor), "%s", tn ? tn : "");
	}
	rc = wc_unit_send(u, true, &f->p, err);
	if (rc < 0) {
		weightd_inflight_free(f);
		return rc;
	}
	*ret = f;
	return 0;
}

int weightd_preflight_finish(weightd_inflight *f, weightd_preflight **ret, weightd_error *err)
{
	int r;

	wc_err_clear(err);
	if (!f || !ret || f->kind != WC_PREFLIGHT) {
		weightd_inflight_free(f);
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_preflight_finish: not the handle of a preflight");
	}
	r = wc_inflight_wait_settle(f, err);
	if (r == 0) {
		*ret = f->pre;
		f->pre = NULL;
	}
	weightd_inflight_free(f);
	return r;
}

void wc_unit_take_recipe(weightd_unit *u, const char *slot, weightd_recipe *r)
{
	struct slot *s = wc_unit_find_slot(u, slot);

	slot_clear_src(s);
	s->recipe = r;
	s->src = SRC_RECIPE;
}
