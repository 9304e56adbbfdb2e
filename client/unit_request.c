/* SPDX-License-Identifier: Apache-2.0 */
/* unit_request.c - a unit's request: its slots as protobuf entries, in one block, sent. */
#include "unit_int.h"

#include <stdlib.h>
#include <string.h>

/* The wire form of a SRC_TENSOR slot: a one-node recipe, a source without a selection. */
struct pb_tensor {
	Weightd__Recipe msg;
	Weightd__Node node;
	Weightd__Node *ptr;
};

/* The wire form of the unit; points into the unit, which must outlive it. */
struct pb_unit {
	Weightd__Unit msg;
	Weightd__UnitEntry *entries;
	Weightd__UnitEntry **entry_ptrs;
	Weightd__Alias *aliases;
	Weightd__Alias **alias_ptrs;
	struct wc_pb_recipe *recipes;
	size_t n_recipes;
	struct pb_tensor *tensors;
	void *block;                 /* all the arrays above: one block of the connection's cache */
};

static void pb_unit_fini(struct pb_unit *pb)
{
	for (size_t i = 0; i < pb->n_recipes; i++)
		wc_pb_recipe_fini(&pb->recipes[i]);
	wd_msg_free(pb->block);
	memset(pb, 0, sizeof(*pb));
}

static int pb_unit_init(struct pb_unit *pb, const weightd_unit *u, weightd_error *err)
{
	size_t n_src[SRC_ALIAS + 1] = { 0 }, n_tensors = 0;
	int rc;

	memset(pb, 0, sizeof(*pb));
	weightd__unit__init(&pb->msg);
	if (u->n == 0)
		return wc_err_set(err, WEIGHTD_E_EMPTY_INPUTS, "the unit has no slots");
	{
		const weightd_server_info *si = weightd_server(u->c);

		/* Checked before anything is encoded or sent (the daemon checks again). */
		if (si->max_unit_entries && u->n > si->max_unit_entries) {
			rc = wc_err_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
					"limit exceeded: the unit has %zu slots; weightd allows at most "
					"%u entries and %u aliases (max_unit_entries)", u->n,
					si->max_unit_entries, si->max_unit_entries);
			if (err) {
				err->expected = si->max_unit_entries;
				err->actual = (int64_t)u->n;
			}
			return rc;
		}
	}
	for (size_t i = 0; i < u->n; i++) {
		if (u->slots[i].src == SRC_NONE) {
			rc = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					"slot \"%s\" has no source: give it a tensor, a recipe or "
					"make it an alias", u->slots[i].name);
			wc_err_about(err, NULL, NULL, u->slots[i].name);
			return rc;
		}
		n_src[u->slots[i].src]++;
	}
	/* Each array as long as its kind needs, all in one block. Every element is initialized
	 * before it is read. The sizes are bounded by the slot count (at most INT32_MAX slots of
	 * under 300 bytes each), so their sum cannot overflow. */
	{
		size_t n_ent = u->n - n_src[SRC_ALIAS], at = 0, o_ent, o_eptr, o_al, o_alptr,
		       o_rec, o_ten;
		unsigned char *b;

		o_ent = wc_take(&at, n_ent, sizeof(*pb->entries));
		o_eptr = wc_take(&at, n_ent, sizeof(*pb->entry_ptrs));
		o_al = wc_take(&at, n_src[SRC_ALIAS], sizeof(*pb->aliases));
		o_alptr = wc_take(&at, n_src[SRC_ALIAS], sizeof(*pb->alias_ptrs));
		o_rec = wc_take(&at, n_src[SRC_RECIPE], sizeof(*pb->recipes));
		o_ten = wc_take(&at, n_src[SRC_TENSOR], sizeof(*pb->tensors));
		b = pb->block = wd_msg_cache_alloc(u->c->msgs, at ? at : 16);
		if (b) {
			pb->entries = (Weightd__UnitEntry *)(void *)(b + o_ent);
			pb->entry_ptrs = (Weightd__UnitEntry **)(void *)(b + o_eptr);
			pb->aliases = (Weightd__Alias *)(void *)(b + o_al);
			pb->alias_ptrs = (Weightd__Alias **)(void *)(b + o_alptr);
			pb->recipes = (struct wc_pb_recipe *)(void *)(b + o_rec);
			pb->tensors = (struct pb_tensor *)(void *)(b + o_ten);
		}
	}
	if (!pb->block) {
		pb_unit_fini(pb);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < u->n; i++) {
		const struct slot *s = &u->slots[i];

		if (s->src == SRC_ALIAS) {
			Weightd__Alias *a = &pb->aliases[pb->msg.n_aliases];

			weightd__alias__init(a);
			a->name = s->name;
			a->target = s->alias;
			pb->alias_ptrs[pb->msg.n_aliases++] = a;
			continue;
		}
		Weightd__UnitEntry *e = &pb->entries[pb->msg.n_entries];

		weightd__unit_entry__init(e);
		if (s->src == SRC_TENSOR) {
			struct pb_tensor *t = &pb->tensors[n_tensors++];

			weightd__recipe__init(&t->msg);
			weightd__node__init(&t->node);
			t->node.op = WEIGHTD__OP__OP_SOURCE;
			t->node.checkpoint = (char *)slot_ckpt(s);
			t->node.tensor = (char *)slot_tensor(s);
			t->ptr = &t->node;
			t->msg.n_nodes = 1;
			t->msg.nodes = &t->ptr;
			e->recipe = &t->msg;
		} else {
			rc = wc_pb_recipe_init(&pb->recipes[pb->n_recipes], s->recipe, err);
			if (rc < 0) {
				wc_err_about(err, NULL, NULL, s->name);
				pb_unit_fini(pb);
				return rc;
			}
			e->recipe = &pb->recipes[pb->n_recipes++].msg;
		}
		e->name = s->name;
		if (s->dtype) {
			e->check_slot = 1;
			e->dtype = (char *)s->dtype;
			e->n_shape = s->ndim;
			e->shape = (uint64_t *)s->shape;
		}
		pb->entry_ptrs[pb->msg.n_entries++] = e;
	}
	pb->msg.entries = pb->entry_ptrs;
	pb->msg.aliases = pb->alias_ptrs;
	return 0;
}

int wc_unit_send(weightd_unit *u, bool preflight, struct wc_pending **ret_p,
		 weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	struct pb_unit pb;
	int rc;

	rc = pb_unit_init(&pb, u, err);
	if (rc < 0)
		return rc;
	if (preflight) {
		req.body_case = WEIGHTD__REQUEST__BODY_PREFLIGHT;
		req.preflight = &pb.msg;
	} else {
		req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
		req.materialize = &pb.msg;
	}
	rc = wc_send(u->c, &req, ret_p, err);
	pb_unit_fini(&pb);
	return rc;
}
