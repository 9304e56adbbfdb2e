/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_unit.c - libweightd's units against a fake weightd: one request per unit,
 * all-or-nothing finish and validate (nothing left behind on failure), bind, preflight. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_client.h"
#include "weightd/client.h"

#define SENTINEL ((void *)0x5e5e)

/* ---- the fake's behaviour ------------------------------------------------------------- */

enum mode {
	M_OK,          /* answer as declared */
	M_LIE_DTYPE,   /* slot "b" served as I8 although it declares U8 */
	M_SHORT,       /* slot "c"'s segment one byte short of its declared size */
	M_ERROR,       /* refuse the unit naming slot "c" and node 1 */
	M_UNUSED_FD,   /* one fd more than the weights use */
	M_DUP,         /* every entry the same weight (one fd, one handle) */
};

struct script {
	enum mode mode;
};

/* The source output that output `name` resolves to (following aliases), or -1. */
static int owner_of(const Weightd__Unit *u, const struct fake_source *src, size_t n,
		    const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(src[i].name, name))
			return (int)i;
	for (size_t i = 0; i < u->n_aliases; i++)
		if (!strcmp(u->aliases[i]->name, name))
			return owner_of(u, src, n, u->aliases[i]->target);
	return -1;
}

/*
 * Answer in the daemon's order: the entries and the tensor columns (segment k, fd k, for
 * source k), then the aliases as their owner. Weights are named for their slots: handle 1000
 * for slot "a", 1001 for "b", and so on. Preflights get WeightInfos.
 */
static void h_unit(struct fake *f, const Weightd__Request *req)
{
	struct script *sc = f->ctx;
	const Weightd__Unit *u;
	bool pre = req->body_case == WEIGHTD__REQUEST__BODY_PREFLIGHT;
	Weightd__UnitReply ur = WEIGHTD__UNIT_REPLY__INIT;
	struct fake_source src[16];
	static struct fake_packed pk;
	struct fake_wi wi[16];
	Weightd__WeightInfo *wp[16];
	uint64_t size[17];
	int fds[17];
	size_t n, nw = 0, nfds = 0;

	if (req->body_case != WEIGHTD__REQUEST__BODY_MATERIALIZE && !pre) {
		fake_reply_empty(f, req);
		return;
	}
	u = pre ? req->preflight : req->materialize;
	if (sc->mode == M_ERROR) {
		fake_reply_error(f, req->id, WEIGHTD_E_SLOT_MISMATCH, "c", 1,
				 "slot \"c\" is declared BF16 [4] but its recipe gives F32 [4]");
		return;
	}
	n = fake_unit_sources(u, src, 16);
	fake_packed_init(&pk);
	for (size_t i = 0; i < n + u->n_aliases; i++) {
		bool alias = i >= n;
		const char *name = alias ? u->aliases[i - n]->name : src[i].name;
		int oi = owner_of(u, src, n, name);
		const struct fake_source *owner = &src[oi];
		const char *dtype = owner->dtype ? owner->dtype : "U8";
		uint64_t shape[8] = { 8 }, handle;
		size_t ndim = owner->dtype ? owner->ndim : 1, nb;
		uint8_t data[256];

		if (owner->dtype && ndim)
			memcpy(shape, owner->shape, ndim * sizeof(uint64_t));
		nb = fake_dtype_size(dtype);
		for (size_t k = 0; k < ndim; k++)
			nb *= shape[k];
		if (sc->mode == M_LIE_DTYPE && !strcmp(owner->name, "b"))
			dtype = "I8";
		handle = sc->mode == M_DUP ? 1000 : 1000 + (uint64_t)(owner->name[0] - 'a');
		if (sc->mode == M_DUP)
			oi = 0;
		fake_content(sc->mode == M_DUP ? src[0].name : owner->name, data, nb);
		if (pre) {
			fake_wi_fill(&wi[nw], name, 0, dtype, shape, ndim, data, nb, 0,
				     alias ? owner->name : NULL);
			wp[nw] = &wi[nw].wi;
			nw++;
		} else if (alias) {
			fake_packed_alias(&pk, (uint32_t)oi);
		} else {
			fake_packed_add(&pk, handle, dtype, shape, ndim, data, nb, (uint32_t)oi, 0);
			if (sc->mode != M_DUP || i == 0) {
				size[nfds] = nb;
				fds[nfds++] = fake_memfd(data, sc->mode == M_SHORT &&
							 !strcmp(name, "c") ? nb - 1 : nb);
			}
		}
	}
	if (pre) {
		ur.n_weights = nw;
		ur.weights = wp;
		fake_reply_unit(f, req, &ur, NULL, 0);
		return;
	}
	if (sc->mode == M_UNUSED_FD) {
		size[nfds] = 1;
		fds[nfds++] = fake_memfd("x", 1);
	}
	fake_reply_packed(f, req, &pk, size, fds, nfds, 4242);
}

/* ---- helpers ---------------------------------------------------------------------------- */

struct env {
	struct script sc;
	struct fake_client fc;
	void *pa, *pb, *pc, *pd, *pe;
};

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	e->pa = e->pb = e->pc = e->pd = e->pe = SENTINEL;
	*state = e;
	return fake_client_start(&e->fc, h_unit, &e->sc, 0);
}

static int teardown(void **state)
{
	struct env *e = *state;

	fake_client_stop(&e->fc);
	free(e);
	return 0;
}

/*
 * The unit every test uses:
 *   a  F32 [2,3]   tensor ck:a
 *   b  U8  [5]     tensor ck:b, rows 0..5
 *   c  BF16 [4]    recipe cast(ck:c, BF16)
 *   d  F32 [2,3]   alias of a
 *   e  (anything)  alias of d (an alias of an alias)
 */
static weightd_unit *make_unit(struct env *e)
{
	static const uint64_t sa[] = { 2, 3 }, sb[] = { 5 }, sc[] = { 4 };
	weightd_selection *sel;
	weightd_recipe *r;
	weightd_unit *u;
	weightd_error err;
	int n;

	assert_int_equal(weightd_unit_new(e->fc.c, &u, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "a", "F32", sa, 2, &e->pa, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "b", "U8", sb, 1, &e->pb, &err), 1);
	assert_int_equal(weightd_unit_slot(u, "c", "BF16", sc, 1, &e->pc, &err), 2);
	assert_int_equal(weightd_unit_slot(u, "d", "F32", sa, 2, &e->pd, &err), 3);
	assert_int_equal(weightd_unit_slot(u, "e", NULL, NULL, 0, &e->pe, &err), 4);
	assert_int_equal(weightd_unit_set_tensor(u, "a", "ck", "a", NULL, &err), 0);
	assert_int_equal(weightd_selection_range(0, 0, 5, &sel, &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "b", "ck", "b", sel, &err), 0);
	weightd_selection_free(sel);
	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	n = weightd_recipe_source(r, "ck", "c", NULL, &err);
	assert_int_equal(n, 0);
	assert_int_equal(weightd_recipe_cast(r, n, "BF16", &err), 1);
	assert_int_equal(weightd_unit_set_recipe(u, "c", r, &err), 0);
	weightd_recipe_free(r);   /* the unit keeps its own copy */
	assert_int_equal(weightd_unit_set_alias(u, "d", "a", &err), 0);
	assert_int_equal(weightd_unit_set_alias(u, "e", "d", &err), 0);
	return u;
}

static void assert_unpublished(struct env *e)
{
	assert_ptr_equal(e->pa, SENTINEL);
	assert_ptr_equal(e->pb, SENTINEL);
	assert_ptr_equal(e->pc, SENTINEL);
	assert_ptr_equal(e->pd, SENTINEL);
	assert_ptr_equal(e->pe, SENTINEL);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_one_request_with_declarations_and_aliases(void **state)
{
	struct env *e = *state;
	const Weightd__Request *req;
	const Weightd__Unit *wu;
	weightd_unit *u = make_unit(e);
	weightd_error err;

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_finish(u, &err), 0);
	assert_int_equal(fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_MATERIALIZE), 1);
	req = fake_nth(e->fc.f, WEIGHTD__REQUEST__BODY_MATERIALIZE, 0);
	wu = req->materialize;
	/* the whole tensor travels in the columns, declared; the recipes as entries */
	assert_non_null(wu->tensors);
	assert_int_equal(wu->tensors->names.len, 2);
	assert_string_equal((const char *)wu->tensors->names.data, "a");
	assert_int_equal(wu->tensors->n_checkpoints, 1);
	assert_string_equal(wu->tensors->checkpoints[0], "ck");
	assert_null(wu->tensors->tensors.data);   /* named like its slot */
	assert_int_equal(wu->tensors->n_dtype, 1);
	assert_string_equal(wu->tensors->dtypes[wu->tensors->dtype[0] - 1], "F32");
	assert_int_equal(wu->tensors->ndim[0], 2);
	assert_int_equal(wu->tensors->n_dims, 2);
	assert_int_equal(wu->tensors->dims[0], 2);
	assert_int_equal(wu->tensors->dims[1], 3);
	assert_int_equal(wu->n_entries, 2);
	assert_string_equal(wu->entries[0]->name, "b");
	assert_true(wu->entries[0]->check_slot);
	assert_string_equal(wu->entries[0]->dtype, "U8");
	assert_int_equal(wu->entries[0]->n_shape, 1);
	assert_int_equal(wu->entries[0]->shape[0], 5);
	assert_int_equal(wu->entries[0]->recipe->n_nodes, 1);
	assert_string_equal(wu->entries[0]->recipe->nodes[0]->checkpoint, "ck");
	assert_string_equal(wu->entries[0]->recipe->nodes[0]->tensor, "b");
	assert_int_equal(wu->entries[0]->recipe->nodes[0]->selection->kind,
			 WEIGHTD__SELECTION__KIND__SEL_RANGE);
	assert_int_equal(wu->entries[0]->recipe->nodes[0]->selection->end, 5);
	assert_int_equal(wu->entries[1]->recipe->n_nodes, 2);
	assert_int_equal(wu->entries[1]->recipe->nodes[1]->op, WEIGHTD__OP__OP_CAST);
	assert_int_equal(wu->entries[1]->recipe->nodes[1]->n_inputs, 1);
	assert_int_equal(wu->entries[1]->recipe->nodes[1]->inputs[0], 0);
	assert_string_equal(wu->entries[1]->recipe->nodes[1]->dtype, "BF16");
	assert_int_equal(wu->n_aliases, 2);
	assert_string_equal(wu->aliases[0]->name, "d");
	assert_string_equal(wu->aliases[0]->target, "a");
	assert_string_equal(wu->aliases[1]->name, "e");
	assert_string_equal(wu->aliases[1]->target, "d");
	assert_int_equal(weightd_unit_bytes_read(u), 4242);
	weightd_unit_free(u);
}

static void test_validate_then_bind_publishes_every_pointer(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;
	uint64_t rel[16];
	int wfds;

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), 0);   /* finishes by itself */
	assert_unpublished(e);                                  /* validate publishes nothing */
	fake_settle(e->fc.f);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 3);                              /* one fd per distinct weight */
	assert_int_equal(fake_count_maps(), 3);                 /* each mapped once */

	weightd_unit_bind(u);
	assert_ptr_not_equal(e->pa, SENTINEL);
	assert_ptr_not_equal(e->pb, SENTINEL);
	assert_ptr_not_equal(e->pc, SENTINEL);
	assert_ptr_equal(e->pd, e->pa);                         /* aliases: the same memory */
	assert_ptr_equal(e->pe, e->pa);
	fake_assert_content(e->pa, "a", 24);
	fake_assert_content(e->pb, "b", 5);
	fake_assert_content(e->pc, "c", 8);
	assert_ptr_equal(weightd_unit_data(u, "c"), e->pc);
	assert_string_equal(weightd_weight_dtype(weightd_unit_weight(u, "c")), "BF16");
	assert_int_equal(weightd_weight_handle(weightd_unit_weight(u, "e")), 1000);

	/* free: unmapped, closed, and each entry's reference released exactly once */
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 3);
	assert_int_equal(rel[0] + rel[1] + rel[2], 1000 + 1001 + 1002);
	assert_int_equal(fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_RELEASE), 1);   /* one message */
}

static void test_validate_failure_undoes_everything(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;
	uint64_t rel[16];

	e->sc.mode = M_LIE_DTYPE;
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_DTYPE_MISMATCH);
	assert_string_equal(err.slot, "b");
	assert_string_equal(err.checkpoint, "ck");
	assert_string_equal(err.tensor, "b");
	assert_non_null(strstr(err.message, "slot \"b\""));
	assert_non_null(strstr(err.message, "I8"));
	assert_non_null(strstr(err.message, "U8"));
	weightd_unit_bind(u);                 /* not validated: publishes nothing */
	assert_unpublished(e);
	fake_client_assert_idle(&e->fc);
	assert_null(weightd_unit_weight(u, "a"));
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 3);
	weightd_unit_free(u);
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 3);   /* nothing left to release */
}

static void test_short_segment_refused_holds_nothing(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;

	/* c's segment is a byte short of the size the reply declares: the fstat check refuses the
	 * reply, and the segments already taken (and every reference) must go again */
	e->sc.mode = M_SHORT;
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_BYTE_COUNT_MISMATCH);
	assert_non_null(strstr(err.message, "holds 7 bytes"));
	assert_unpublished(e);
	fake_client_assert_idle(&e->fc);

	/* the unit is back to before submit: the same unit goes through once the daemon is fine */
	e->sc.mode = M_OK;
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), 0);
	weightd_unit_bind(u);
	fake_assert_content(e->pc, "c", 8);
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

static void test_daemon_refusal_holds_nothing(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;
	int done = 0;

	e->sc.mode = M_ERROR;
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	for (int i = 0; i < 500 && !done; i++) {
		assert_int_equal(weightd_unit_poll(u, &done, &err), 0);
		if (!done)
			fake_sleep_ms(10);
	}
	assert_true(done);
	assert_int_equal(weightd_unit_finish(u, &err), -WEIGHTD_E_SLOT_MISMATCH);
	assert_string_equal(err.slot, "c");
	assert_int_equal(err.node, 1);
	assert_non_null(strstr(err.message, "slot \"c\""));
	assert_unpublished(e);
	fake_client_assert_idle(&e->fc);
	assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	weightd_unit_free(u);
}

static void test_inconsistent_reply_refused_and_released(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;
	uint64_t rel[16];

	e->sc.mode = M_UNUSED_FD;
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_finish(u, &err), -WEIGHTD_E_PROTOCOL);
	fake_client_assert_idle(&e->fc);
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 3);   /* every entry's reference let go */
	weightd_unit_free(u);
}

static void test_identical_entries_share_fd_and_release_each(void **state)
{
	struct env *e = *state;
	static const uint64_t s[] = { 4 };
	weightd_unit *u;
	weightd_error err;
	uint64_t rel[16];
	int wfds;

	e->sc.mode = M_DUP;
	assert_int_equal(weightd_unit_new(e->fc.c, &u, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "x", "F16", s, 1, &e->pa, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "y", "F16", s, 1, &e->pb, &err), 1);
	assert_int_equal(weightd_unit_set_tensor(u, "x", "ck", "t", NULL, &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "y", "ck", "t", NULL, &err), 0);
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), 0);
	weightd_unit_bind(u);
	assert_ptr_equal(e->pa, e->pb);
	fake_settle(e->fc.f);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 1);
	weightd_unit_free(u);
	/* weightd holds one reference per entry: both are released */
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 2);
	assert_int_equal(rel[0], 1000);
	assert_int_equal(rel[1], 1000);
	fake_client_assert_idle(&e->fc);
}

static void test_preflight_infers_without_fds(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_inflight *f;
	weightd_preflight *p;
	weightd_error err;

	assert_int_equal(weightd_unit_preflight(u, &f, &err), 0);
	assert_int_equal(weightd_preflight_finish(f, &p, &err), 0);
	assert_int_equal(fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_PREFLIGHT), 1);
	assert_int_equal(fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_MATERIALIZE), 0);
	assert_int_equal(p->count, 5);
	/* in the daemon's order: the recipes, the whole tensor, the aliases */
	assert_string_equal(p->outputs[0].name, "b");
	assert_string_equal(p->outputs[2].name, "a");
	assert_string_equal(p->outputs[2].dtype, "F32");
	assert_int_equal(p->outputs[2].ndim, 2);
	assert_int_equal(p->outputs[2].nbytes, 24);
	assert_string_equal(p->outputs[2].alias_of, "");
	assert_non_null(p->outputs[2].key);
	assert_string_equal(p->outputs[3].name, "d");
	assert_string_equal(p->outputs[3].alias_of, "a");
	assert_string_equal(p->outputs[4].alias_of, "a");
	weightd_preflight_free(p);
	/* preflight does not submit: the unit can still change */
	assert_int_equal(weightd_unit_set_alias(u, "e", "b", &err), 0);
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

static void test_free_while_submitted_releases_later(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;
	uint64_t rel[16];

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	weightd_unit_free(u);
	fake_client_released(&e->fc, rel, 16);                         /* reads the abandoned unit's reply */
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 3);
	fake_client_assert_idle(&e->fc);
	assert_unpublished(e);
}

static void test_declaration_errors(void **state)
{
	struct env *e = *state;
	static const uint64_t s9[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	weightd_unit *u;
	weightd_error err;

	assert_int_equal(weightd_unit_new(e->fc.c, &u, &err), 0);
	assert_int_equal(weightd_unit_submit(u, &err), -WEIGHTD_E_EMPTY_INPUTS);
	assert_int_equal(weightd_unit_slot(u, "w", "F32", NULL, 0, NULL, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "w", "F32", NULL, 0, NULL, &err),
			 -WEIGHTD_E_DUPLICATE_NAME);
	assert_string_equal(err.slot, "w");
	assert_int_equal(weightd_unit_slot(u, "v", "F33", NULL, 0, NULL, &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "F33"));
	assert_int_equal(weightd_unit_slot(u, "v", "F32", s9, 9, NULL, &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(weightd_unit_set_alias(u, "nope", "w", &err), -WEIGHTD_E_NOT_FOUND);
	assert_string_equal(err.slot, "nope");
	/* a slot without a source is named when submitting; nothing is sent */
	assert_int_equal(weightd_unit_submit(u, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_string_equal(err.slot, "w");
	assert_non_null(strstr(err.message, "slot \"w\" has no source"));
	assert_int_equal(fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_MATERIALIZE), 0);
	/* once submitted, slots are fixed */
	assert_int_equal(weightd_unit_set_tensor(u, "w", "ck", "a", NULL, &err), 0);
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "z", NULL, NULL, 0, NULL, &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(weightd_unit_submit(u, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	weightd_unit_free(u);
}

/* Bytes malloc holds for the whole process (every arena), and the memory a unit cycle took. */
static size_t heap_in_use(void)
{
	return mallinfo2().uordblks;
}

static size_t unit_cycle_growth(struct env *e)
{
	weightd_unit *u;
	weightd_error err;
	size_t before, during;

	fake_settle(e->fc.f);
	before = heap_in_use();
	u = make_unit(e);
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), 0);
	weightd_unit_bind(u);
	during = heap_in_use();
	weightd_unit_free(u);
	fake_settle(e->fc.f);
	return during > before ? during - before : 0;
}

/*
 * A unit's memory (its arena, slot array, request and reply) goes back to the connection when
 * the unit is freed, and the next unit of the same shape is built in it: malloc is asked for
 * almost nothing new. (Given back to malloc instead, a large unit's memory went back to the
 * kernel and was faulted in again by the next unit.)
 */
static void test_next_unit_reuses_the_memory_of_the_last(void **state)
{
	struct env *e = *state;
	size_t first, second, third;

#if defined(__SANITIZE_ADDRESS__)
	skip();   /* ASan's allocator keeps no mallinfo2 figures */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	skip();
#endif
#endif
	first = unit_cycle_growth(e);
	second = unit_cycle_growth(e);
	third = unit_cycle_growth(e);
	print_message("heap growth while a unit is held: first %zu bytes, then %zu, %zu\n", first,
		      second, third);
	assert_true(second * 8 < first);
	assert_true(third * 8 < first);
}

/* ---- populate at validate --------------------------------------------------------------- */

/* What madvise(MADV_POPULATE_READ) does in these tests (-Wl,--wrap=madvise): 0 lets the kernel
 * do it; an errno makes the call fail with it, as a kernel without it (EINVAL) or out of memory
 * for page tables (ENOMEM) would. Other advice always reaches the kernel. */
static int populate_errno;
static int populate_calls;
int __real_madvise(void *addr, size_t len, int advice);

int __wrap_madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_POPULATE_READ) {
		populate_calls++;
		if (populate_errno) {
			errno = populate_errno;
			return -1;
		}
	}
	return __real_madvise(addr, len, advice);
}

/* Whether the page holding p is in this process's page tables (/proc/self/pagemap's present
 * bit, readable without privileges). Not mincore(): that tells whether the page is in memory at
 * all, which a segment's pages always are, mapped here or not. */
static bool page_present(const void *p)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t ent = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &ent, sizeof(ent), (off_t)((uintptr_t)p / (uintptr_t)page * 8)),
			 sizeof(ent));
	close(fd);
	return (ent >> 63) & 1;
}

/* Submit and validate the test unit with populate set to `on`; returns how many of its three
 * distinct weights' pages are in the page tables before anything reads them. */
static int validate_and_count_present(struct env *e, int on, weightd_unit **ret)
{
	weightd_unit *u = make_unit(e);
	weightd_error err;
	int n = 0;

	assert_int_equal(weightd_unit_set_populate(u, on, &err), 0);
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	populate_calls = 0;
	if (weightd_unit_validate(u, &err) < 0)
		fail_msg("validate: %s", err.message);
	n += page_present(weightd_unit_data(u, "a"));
	n += page_present(weightd_unit_data(u, "b"));
	n += page_present(weightd_unit_data(u, "c"));
	*ret = u;
	return n;
}

static void test_populate_prefaults_at_validate(void **state)
{
	struct env *e = *state;
	weightd_unit *u;

	populate_errno = 0;
	/* off (the default): validate maps, nothing is faulted in until read */
	assert_int_equal(validate_and_count_present(e, 0, &u), 0);
	assert_int_equal(populate_calls, 0);
	weightd_unit_free(u);
	/* on: every weight's page is in the page tables when validate returns, one call each
	 * (three segments) */
	assert_int_equal(validate_and_count_present(e, 1, &u), 3);
	assert_int_equal(populate_calls, 3);
	weightd_unit_bind(u);
	fake_assert_content(e->pa, "a", 24);
	weightd_unit_free(u);
	assert_int_equal(weightd_unit_set_populate(NULL, 1, NULL), -WEIGHTD_E_INVALID_ARGUMENT);
}

/* A kernel before 5.14 refuses MADV_POPULATE_READ with EINVAL: each page is read instead. */
static void test_populate_without_madvise_reads_each_page(void **state)
{
	struct env *e = *state;
	weightd_unit *u;

	populate_errno = EINVAL;
	assert_int_equal(validate_and_count_present(e, 1, &u), 3);
	populate_errno = 0;
	weightd_unit_free(u);
}

/* Populating is advisory: refused, it leaves validate successful and the unit bound. */
static void test_populate_refused_still_validates(void **state)
{
	struct env *e = *state;
	weightd_unit *u;

	populate_errno = ENOMEM;
	assert_int_equal(validate_and_count_present(e, 1, &u), 0);
	populate_errno = 0;
	assert_int_equal(populate_calls, 3);
	weightd_unit_bind(u);
	fake_assert_content(e->pa, "a", 24);
	fake_assert_content(e->pc, "c", 8);
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

TEST_MAIN(NULL, NULL,
	  cmocka_unit_test_setup_teardown(test_one_request_with_declarations_and_aliases, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_validate_then_bind_publishes_every_pointer, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_validate_failure_undoes_everything, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_short_segment_refused_holds_nothing, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_daemon_refusal_holds_nothing, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_inconsistent_reply_refused_and_released, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_identical_entries_share_fd_and_release_each, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_preflight_infers_without_fds, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_free_while_submitted_releases_later, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_declaration_errors, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_next_unit_reuses_the_memory_of_the_last, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_populate_prefaults_at_validate, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_populate_without_madvise_reads_each_page, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_populate_refused_still_validates, setup, teardown))
