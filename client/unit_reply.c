/* SPDX-License-Identifier: Apache-2.0 */
/* unit_reply.c - a unit's materialize reply, its columns checked against the slots, then made
 * into the unit's weights. */
#include "unit_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * What a reply comes to: its distinct weights (one per handle) and each slot's. Weight d was
 * first named by entry first[d]; the unit's entries hold refs[d] daemon references on it; its
 * dimensions start at dims[at[d]]. Every array but ws is in one block.
 */
struct reply {
	weightd_unit *u;
	const Weightd__UnitReply *ur;
	const Weightd__PackedWeights *pw;
	size_t n_dist;
	uint32_t *first, *refs;            /* per distinct weight */
	size_t *at;
	uint32_t *dist_of;                 /* per slot: its weight */
	uint32_t *out_of;                  /* per slot: its output */
	uint32_t *slot_of;                 /* per output: its slot */
	struct wc_seg **segs;              /* per fd, once made */
	weightd_weight **ws;               /* per distinct weight: the unit's on success */
	struct wd_hashidx by_handle;       /* positions in first */
	void *block;
};

static uint64_t dist_handle(const struct reply *r, size_t d)
{
	return r->pw->handle[r->first[d]];
}

static uint32_t dist_segment(const struct reply *r, size_t d)
{
	return r->pw->segment[r->first[d]];
}

static void dist_desc(const struct reply *r, size_t d, struct wc_weight_desc *ret)
{
	size_t i = r->first[d];

	wc_packed_desc(r->pw, i, r->at[d], r->u->slots[r->slot_of[i]].name, ret);
}

static bool handle_eq(const void *ctx, uint32_t pos, const void *key)
{
	return dist_handle(ctx, pos) == *(const uint64_t *)key;
}

/* The distinct weight of handle h: the one found, or a new one first named by output i. */
static uint32_t weight_of(struct reply *r, size_t i, uint64_t h, bool *ret_new)
{
	size_t x = wd_hashidx_slot(&r->by_handle, h, handle_eq, r, &h);

	*ret_new = !wd_hashidx_pos(&r->by_handle, x);
	if (*ret_new) {
		r->first[r->n_dist] = (uint32_t)i;
		wd_hashidx_set(&r->by_handle, x, h, (uint32_t)r->n_dist++);
	}
	return wd_hashidx_pos(&r->by_handle, x) - 1;
}

/* Every array, zeroed, from the connection's block cache (n outputs, as many as slots). */
static int reply_alloc(struct reply *r, uint32_t nfds, weightd_error *err)
{
	const weightd_unit *u = r->u;
	size_t n = u->n, at = 0, o_first, o_refs, o_at, o_dist, o_out, o_slot, o_segs;
	unsigned char *b;

	o_first = wc_take(&at, n, sizeof(*r->first));
	o_refs = wc_take(&at, n, sizeof(*r->refs));
	o_at = wc_take(&at, n, sizeof(*r->at));
	o_dist = wc_take(&at, n, sizeof(*r->dist_of));
	o_out = wc_take(&at, n, sizeof(*r->out_of));
	o_slot = wc_take(&at, n, sizeof(*r->slot_of));
	o_segs = wc_take(&at, nfds, sizeof(*r->segs));
	b = r->block = wd_msg_cache_alloc(u->c->msgs, at ? at : 16);
	r->ws = wd_msg_cache_alloc(u->c->msgs, n * sizeof(*r->ws));
	if (!b || !r->ws || wd_hashidx_reserve(&r->by_handle, n) < 0)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	memset(b, 0, at);
	memset(r->ws, 0, n * sizeof(*r->ws));
	r->first = (uint32_t *)(void *)(b + o_first);
	r->refs = (uint32_t *)(void *)(b + o_refs);
	r->at = (size_t *)(void *)(b + o_at);
	r->dist_of = (uint32_t *)(void *)(b + o_dist);
	r->out_of = (uint32_t *)(void *)(b + o_out);
	r->slot_of = (uint32_t *)(void *)(b + o_slot);
	r->segs = (struct wc_seg **)(void *)(b + o_segs);
	return 0;
}

/*
 * The columns. Their weights carry no names: each slot's output is found by walking the slots
 * with one counter per kind (the SRC_RECIPE entries come first, then the SRC_TENSOR entries,
 * then the aliases, each in slot order), so matching costs no lookup. The columns are checked
 * (wc_packed_check), then entries of one handle must be described alike, and each alias must be
 * answered by the entry its target is: its target itself, or the same entry as the alias it
 * names (the one hash lookup, only for an alias of an alias). Errors name the slot.
 */
static int check_packed(struct reply *r, uint32_t nfds, weightd_error *err)
{
	weightd_unit *u = r->u;
	const Weightd__PackedWeights *pw = r->pw;
	size_t n_of[SRC_ALIAS + 1] = { 0 }, n_ent, next_rec, next_ten, next_al, at = 0, bad;
	const struct slot *s;
	int rc;

	for (size_t i = 0; i < u->n; i++)
		n_of[u->slots[i].src]++;
	n_ent = u->n - n_of[SRC_ALIAS];
	next_rec = 0;
	next_ten = n_of[SRC_RECIPE];
	next_al = n_ent;
	for (size_t i = 0; i < u->n; i++) {
		enum slot_src src = u->slots[i].src;
		size_t o = src == SRC_ALIAS ? next_al++ : src == SRC_TENSOR ? next_ten++ : next_rec++;

		r->out_of[i] = (uint32_t)o;
		r->slot_of[o] = (uint32_t)i;
	}
	rc = wc_packed_check(r->ur, n_ent, n_of[SRC_ALIAS], nfds, &bad, err);
	if (rc < 0) {
		if (bad != SIZE_MAX)
			wc_err_about(err, NULL, NULL, u->slots[r->slot_of[bad]].name);
		return rc;
	}
	for (size_t k = 0; k < n_ent; k++) {
		bool fresh;
		uint32_t d = weight_of(r, k, pw->handle[k], &fresh);

		s = &u->slots[r->slot_of[k]];
		if (fresh) {
			r->at[d] = at;
		} else if (!wc_packed_alike(pw, r->first[d], r->at[d], k, at)) {
			rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
					"weightd described weight %llu differently for \"%s\" and \"%s\"",
					(unsigned long long)pw->handle[k],
					u->slots[r->slot_of[r->first[d]]].name, s->name);
			wc_err_about(err, NULL, NULL, s->name);
			return rc;
		}
		r->refs[d]++;
		r->dist_of[s - u->slots] = d;
		at += pw->ndim[k];
	}
	for (size_t j = 0; j < n_of[SRC_ALIAS]; j++) {
		uint32_t owner = pw->alias_owner[j];
		const struct slot *e = &u->slots[r->slot_of[owner]], *t;

		s = &u->slots[r->slot_of[n_ent + j]];
		if (strcmp(s->alias, e->name) != 0) {
			t = wc_unit_find_slot(u, s->alias);
			if (!t || t->src != SRC_ALIAS ||
			    pw->alias_owner[r->out_of[t - u->slots] - n_ent] != owner) {
				rc = wc_err_set(err, WEIGHTD_E_PROTOCOL,
						"weightd answered alias \"%s\" of \"%s\" with the weight "
						"of \"%s\"", s->name, s->alias, e->name);
				wc_err_about(err, NULL, NULL, s->name);
				return rc;
			}
		}
		r->dist_of[s - u->slots] = r->dist_of[e - u->slots];
	}
	return 0;
}

/*
 * Turn a checked reply into the unit's weights: one segment per fd (found in the client's table
 * when this client holds it already), one weight per distinct weight holding as many daemon
 * references as entries name it, each slot its weight. Takes resp and fds in every case; on
 * failure every fd is closed and every reference released.
 */
static int commit(struct reply *r, Weightd__Response *resp, int *fds, uint32_t nfds,
		  weightd_error *err)
{
	weightd_unit *u = r->u;
	const Weightd__UnitReply *ur = r->ur;
	size_t n_dist = r->n_dist, n_made = 0, n_segs = 0;
	int rc = 0;

	/* From here the fds become segments (one reference each, dropped at the end). */
	for (uint32_t i = 0; i < nfds; i++) {
		const Weightd__SegmentInfo *si = ur->segments[i];   /* checked: one per fd */

		rc = wc_seg_get(u->c, si->id, si->size, fds[i], &r->segs[i], err);
		fds[i] = -1;
		n_segs = i + 1;
		if (rc < 0) {
			r->segs[i] = NULL;
			goto fail_segs;
		}
	}
	for (size_t d = 0; d < n_dist; d++) {
		struct wc_seg *sg = r->segs[dist_segment(r, d)];
		struct wc_weight_desc wd;

		dist_desc(r, d, &wd);
		wc_seg_ref(sg);
		rc = wc_weight_new(u->c, &wd, sg, r->refs[d], &u->arena, &r->ws[d], err);
		n_made = d + 1;
		if (rc < 0) {   /* its segment reference is dropped and its references released */
			r->ws[d] = NULL;
			goto fail_made;
		}
	}
	for (size_t i = 0; i < u->n; i++)
		u->slots[i].w = r->ws[r->dist_of[i]];
	for (uint32_t i = 0; i < nfds; i++)
		wc_seg_unref(r->segs[i]);
	u->weights = r->ws;
	u->n_weights = n_dist;
	u->bytes_read = ur->bytes_read;
	r->ws = NULL;   /* the unit's now */
	free(fds);
	wd_msg_free(resp);
	return 0;

fail_made:
	/* weights made so far are released by their objects; the rest by their handles */
	wc_weights_release(r->ws, n_made);
	for (size_t d = n_made; d < n_dist; d++)
		wc_release_handle(u->c, dist_handle(r, d), r->refs[d]);
	n_dist = 0;
fail_segs:
	for (size_t d = 0; d < n_dist; d++)
		wc_release_handle(u->c, dist_handle(r, d), r->refs[d]);
	for (size_t i = 0; i < n_segs; i++)
		wc_seg_unref(r->segs[i]);
	for (uint32_t i = (uint32_t)n_segs; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	wd_msg_free(resp);
	return rc;
}

int wc_unit_take_reply(weightd_unit *u, Weightd__Response *resp, int *fds, uint32_t nfds,
		       weightd_error *err)
{
	struct reply r = { .u = u, .ur = resp->materialize };
	int rc;

	r.pw = r.ur ? r.ur->packed : NULL;
	if (!r.pw)
		rc = wc_err_set(err, WEIGHTD_E_PROTOCOL, "weightd answered a unit without weights");
	else
		rc = reply_alloc(&r, nfds, err);
	if (rc == 0)
		rc = check_packed(&r, nfds, err);
	if (rc == 0)
		rc = commit(&r, resp, fds, nfds, err);
	else
		wc_reply_discard(u->c, resp, fds, nfds);
	wd_hashidx_free(&r.by_handle);
	wd_msg_free(r.block);
	wd_msg_free(r.ws);
	return rc;
}
