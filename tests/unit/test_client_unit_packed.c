/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_unit_packed.c - units in protocol version 3's columns against a fake weightd:
 * the columns whole-tensor slots travel in, a packed reply bound slot by slot, and every
 * malformed packed reply refused with nothing left behind. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_client.h"
#include "weightd/client.h"

#define MAX_OUT 64

/* ---- the fake's behaviour ------------------------------------------------------------- */

/* What the fake does wrong in its packed answer (C_NONE: nothing). */
enum corrupt {
	C_NONE,
	C_LEN_HANDLE, C_LEN_SEGMENT, C_LEN_OFFSET, C_LEN_NBYTES, C_LEN_GENERATION, C_LEN_DTYPE,
	C_LEN_NDIM, C_LEN_ALG, C_LEN_DIGESTS, C_LEN_KEYS, C_LEN_ALIAS_OWNER,
	C_DIMS_EXTRA,      /* one dimension more than the weights have */
	C_DIMS_SHORT,      /* the last weight's dimensions run past the column */
	C_NDIM_MAX,        /* 9 dimensions */
	C_SEGMENT_RANGE,   /* a weight in a segment the reply does not have */
	C_SEGMENT_LIST,    /* one SegmentInfo fewer than fds */
	C_FD_INDEX,        /* the segments listed out of fd order */
	C_DTYPE_RANGE,     /* a dtype index past the table */
	C_DTYPE_UNKNOWN,   /* a dtype name this library does not know */
	C_ALG_UNKNOWN,     /* digest algorithm 9 */
	C_DIGEST_PAD,      /* XXH3-128 with 32 bytes of digest */
	C_OUTSIDE,         /* a weight ending past its segment */
	C_OVERFLOW,        /* offset + nbytes wraps around */
	C_OWNER_RANGE,     /* an alias answered by entry n */
	C_OWNER_WRONG,     /* an alias answered by an entry its target is not */
	C_FD_UNUSED,       /* a segment and fd no weight lies in */
	C_UNALIKE,         /* two entries of one handle at different places */
	C_NO_WEIGHTS,      /* no columns */
	C_COUNT
};

struct script {
	bool refuse;                 /* answer units with an error */
	bool xxh3;                   /* digests as XXH3-128: 16 bytes and 16 zeros */
	enum corrupt corrupt;
	size_t expect_released;      /* handles the last answer gave (what a failure releases) */
};

/* One output of a unit request, in the daemon's order: entries, tensor entries, aliases. */
struct out {
	const char *name, *ck, *tn;  /* entries: the (first) source tensor */
	const char *dtype;           /* declared, else U8 [8] */
	uint64_t shape[8];
	size_t ndim, nbytes;
	const char *target;          /* aliases */
	size_t owner;                /* the entry it resolves to (an entry: itself) */
	size_t dist;                 /* the first entry of the same source: same handle */
	uint32_t seg;
	uint64_t offset;
};

static void out_declare(struct out *o, const char *dtype, const uint64_t *shape, size_t ndim)
{
	o->dtype = dtype ? dtype : "U8";
	o->ndim = dtype ? ndim : 1;
	if (dtype && ndim)
		memcpy(o->shape, shape, ndim * sizeof(uint64_t));
	else if (!dtype)
		o->shape[0] = 8;
	o->nbytes = fake_dtype_size(o->dtype);
	for (size_t i = 0; i < o->ndim; i++)
		o->nbytes *= o->shape[i];
}

/* The outputs of a unit request, either form; returns their number, *ret_ent the entries'. */
static size_t parse_unit(const Weightd__Unit *u, struct out *o, size_t *ret_ent)
{
	const Weightd__TensorEntries *te = u->tensors;
	size_t n = 0, n_ent;

	memset(o, 0, MAX_OUT * sizeof(*o));
	for (size_t i = 0; i < u->n_entries; i++, n++) {
		const Weightd__UnitEntry *e = u->entries[i];

		o[n].name = e->name;
		o[n].ck = e->recipe->nodes[0]->checkpoint;
		o[n].tn = e->recipe->nodes[0]->tensor;
		out_declare(&o[n], e->check_slot ? e->dtype : NULL, e->shape, e->n_shape);
	}
	if (te) {
		const char *name = (const char *)te->names.data, *end = name + te->names.len;
		const char *tn = (const char *)te->tensors.data;
		size_t dims = 0;

		for (size_t k = 0; name < end; k++, n++) {
			assert_true(n < MAX_OUT);
			o[n].name = name;
			o[n].tn = tn && *tn ? tn : name;
			o[n].ck = te->checkpoints[te->n_checkpoint ? te->checkpoint[k] : 0];
			if (te->n_dtype && te->dtype[k]) {
				out_declare(&o[n], te->dtypes[te->dtype[k] - 1], te->dims + dims,
					    te->ndim[k]);
				dims += te->ndim[k];
			} else {
				out_declare(&o[n], NULL, NULL, 0);
			}
			name += strlen(name) + 1;
			if (tn)
				tn += strlen(tn) + 1;
		}
	}
	n_ent = n;
	for (size_t i = 0; i < u->n_aliases; i++, n++) {
		o[n].name = u->aliases[i]->name;
		o[n].target = u->aliases[i]->target;
	}
	for (size_t i = 0; i < n; i++) {
		size_t at = i;

		while (o[at].target)   /* follow aliases to their entry */
			for (size_t j = 0; j < n; j++)
				if (!strcmp(o[j].name, o[at].target)) {
					at = j;
					break;
				}
		o[i].owner = at;
		o[i].dist = i;
		for (size_t j = 0; j < i && i < n_ent; j++)
			if (!strcmp(o[j].ck, o[i].ck) && !strcmp(o[j].tn, o[i].tn)) {
				o[i].dist = o[j].dist;
				break;
			}
	}
	*ret_ent = n_ent;
	return n;
}

/* Spoil a packed answer the way c says. */
static void corrupt(enum corrupt c, struct fake_packed *p, Weightd__UnitReply *ur,
		    Weightd__SegmentInfo *si, int *fds, size_t *nfds)
{
	Weightd__PackedWeights *pw = &p->pw;

	switch (c) {
	case C_LEN_HANDLE: pw->n_handle--; break;
	case C_LEN_SEGMENT: pw->n_segment--; break;
	case C_LEN_OFFSET: pw->n_offset--; break;
	case C_LEN_NBYTES: pw->n_nbytes--; break;
	case C_LEN_GENERATION: pw->n_generation--; break;
	case C_LEN_DTYPE: pw->n_dtype--; break;
	case C_LEN_NDIM: pw->n_ndim--; break;
	case C_LEN_ALG: pw->digest_algorithm.len--; break;
	case C_LEN_DIGESTS: pw->digests.len -= 16; break;
	case C_LEN_KEYS: pw->keys.len--; break;
	case C_LEN_ALIAS_OWNER: p->alias_owner[pw->n_alias_owner++] = 0; break;
	case C_DIMS_EXTRA: p->dims[pw->n_dims++] = 1; break;
	case C_DIMS_SHORT: p->ndim[pw->n_ndim - 1]++; break;
	case C_NDIM_MAX: p->ndim[0] = 9; break;
	case C_SEGMENT_RANGE: p->segment[0] = (uint32_t)*nfds; break;
	case C_SEGMENT_LIST: ur->n_segments--; break;
	case C_FD_INDEX: si[0].fd_index = 1; si[1].fd_index = 0; break;
	case C_DTYPE_RANGE: p->dtype[0] = (uint32_t)pw->n_dtypes; break;
	case C_DTYPE_UNKNOWN: p->dtypes[0] = (char *)"Q9_Z"; break;
	case C_ALG_UNKNOWN: p->alg[0] = 9; break;
	case C_DIGEST_PAD: p->alg[0] = WEIGHTD__DIGEST_ALGORITHM__DIGEST_XXH3_128; break;
	case C_OUTSIDE: p->offset[0] = si[p->segment[0]].size; break;
	case C_OVERFLOW: p->offset[0] = UINT64_MAX & ~(uint64_t)63; break;
	case C_OWNER_RANGE: p->alias_owner[0] = (uint32_t)pw->n_handle; break;
	case C_OWNER_WRONG: p->alias_owner[0] = (p->alias_owner[0] + 1) % 5; break;
	case C_FD_UNUSED:
		si[*nfds].id = 999;
		si[*nfds].size = 64;
		si[*nfds].fd_index = (uint32_t)*nfds;
		ur->n_segments++;
		fds[(*nfds)++] = fake_memfd("spare", 5);
		break;
	case C_UNALIKE:   /* entry 1 claims entry 0's handle, but lies elsewhere */
		p->handle[1] = p->handle[0];
		break;
	case C_NO_WEIGHTS: ur->packed = NULL; break;
	default: break;
	}
}

/*
 * Answer a unit: entries in up to two segments (weight d in segment d % 2, 64-byte aligned),
 * the same source tensor the same handle (1000 + its first entry), aliases as their entry; as
 * packed columns, spoiled as the script says. Preflights get WeightInfos.
 */
static void h_unit(struct fake *f, const Weightd__Request *req)
{
	struct script *sc = f->ctx;
	bool pre = req->body_case == WEIGHTD__REQUEST__BODY_PREFLIGHT;
	Weightd__UnitReply ur = WEIGHTD__UNIT_REPLY__INIT;
	Weightd__SegmentInfo si[3], *sp[3];
	static struct fake_packed p;
	static struct fake_wi wi[MAX_OUT];
	static struct out o[MAX_OUT];
	static uint8_t seg[2][4096];
	Weightd__WeightInfo *wp[MAX_OUT];
	size_t n, n_ent, len[2] = { 0, 0 }, nfds = 0, n_dist = 0;
	int fds[3];

	if (req->body_case != WEIGHTD__REQUEST__BODY_MATERIALIZE && !pre) {
		fake_reply_empty(f, req);
		return;
	}
	if (sc->refuse) {
		fake_reply_error(f, req->id, WEIGHTD_E_UNKNOWN_TENSOR, "", 0, "no");
		return;
	}
	n = parse_unit(pre ? req->preflight : req->materialize, o, &n_ent);
	for (size_t k = 0; k < n_ent; k++) {
		struct out *e = &o[k];

		if (e->dist == k) {
			e->seg = (uint32_t)(n_dist++ % 2);
			e->offset = (len[e->seg] + 63) & ~(uint64_t)63;
			fake_content(e->name, seg[e->seg] + e->offset, e->nbytes);
			len[e->seg] = e->offset + e->nbytes;
		} else {
			e->seg = o[e->dist].seg;
			e->offset = o[e->dist].offset;
		}
	}
	for (uint32_t i = 0; i < 2 && len[i]; i++, nfds++) {
		weightd__segment_info__init(&si[i]);
		si[i].id = req->id * 10 + i;
		si[i].size = len[i];
		si[i].fd_index = i;
		sp[i] = &si[i];
		fds[i] = fake_memfd(seg[i], len[i]);
	}
	weightd__segment_info__init(&si[2]);
	sp[2] = &si[2];
	fake_packed_init(&p);
	for (size_t i = 0; i < n; i++) {
		const struct out *e = &o[o[i].owner], *d = &o[e->dist];

		if (i < n_ent)
			fake_packed_add(&p, 1000 + e->dist, e->dtype, e->shape, e->ndim,
					seg[d->seg] + d->offset, e->nbytes, d->seg, d->offset);
		else
			fake_packed_alias(&p, (uint32_t)o[i].owner);
		fake_wi_fill(&wi[i], o[i].name, pre ? 0 : 1000 + e->dist, e->dtype, e->shape,
			     e->ndim, seg[d->seg] + d->offset, e->nbytes, d->seg,
			     i < n_ent ? NULL : e->name);
		wi[i].wi.segment = si[d->seg].id;
		wi[i].wi.offset = d->offset;
		wp[i] = &wi[i].wi;
	}
	for (size_t k = 0; sc->xxh3 && k < n_ent; k++) {
		p.alg[k] = WEIGHTD__DIGEST_ALGORITHM__DIGEST_XXH3_128;
		memset(p.digests + k * 32 + 16, 0, 16);
	}
	ur.bytes_read = 4242;
	if (pre) {
		ur.n_weights = n;
		ur.weights = wp;
	} else {
		ur.packed = &p.pw;
	}
	if (!pre) {
		ur.n_segments = nfds;
		ur.segments = sp;
		corrupt(sc->corrupt, &p, &ur, si, fds, &nfds);
		sc->expect_released = ur.packed ? p.pw.n_handle : 0;
	} else {
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		nfds = 0;
	}
	fake_reply_unit(f, req, &ur, fds, nfds);
}

/* ---- helpers ---------------------------------------------------------------------------- */

struct env {
	struct script sc;
	struct fake_client fc;
	void *pa, *pr, *pd, *pb, *ps, *pc, *pe;
};

static int setup_version(void **state, unsigned version)
{
	struct env *e = calloc(1, sizeof(*e));

	*state = e;
	if (fake_client_start(&e->fc, h_unit, &e->sc, version) < 0)
		return -1;
	return weightd_server(e->fc.c)->protocol_version == version ? 0 : -1;
}

static int setup3(void **state)
{
	return setup_version(state, 3);
}

static int teardown(void **state)
{
	struct env *e = *state;

	fake_client_stop(&e->fc);
	free(e);
	return 0;
}

/*
 * The unit most tests use, its slots in this order:
 *   a  F32 [2,3]   tensor ck:a
 *   r  BF16 [4]    recipe cast(ck:r, BF16)
 *   d  F32 [2,3]   alias of a
 *   b  (anything)  tensor ck:b
 *   s  F32 [2,3]   tensor ck:a again (the same weight as a)
 *   c  U8 [5]      tensor ck2:other (another checkpoint, a tensor not named like its slot)
 *   e  (anything)  alias of d (an alias of an alias)
 * In version 3 its outputs are r; a, b, s, c; d, e (entries, tensor entries, aliases).
 */
static weightd_unit *make_unit(struct env *e)
{
	static const uint64_t s23[] = { 2, 3 }, s4[] = { 4 }, s5[] = { 5 };
	weightd_recipe *r;
	weightd_unit *u;
	weightd_error err;

	e->pa = e->pr = e->pd = e->pb = e->ps = e->pc = e->pe = NULL;
	assert_int_equal(weightd_unit_new(e->fc.c, &u, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "a", "F32", s23, 2, &e->pa, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "r", "BF16", s4, 1, &e->pr, &err), 1);
	assert_int_equal(weightd_unit_slot(u, "d", "F32", s23, 2, &e->pd, &err), 2);
	assert_int_equal(weightd_unit_slot(u, "b", NULL, NULL, 0, &e->pb, &err), 3);
	assert_int_equal(weightd_unit_slot(u, "s", "F32", s23, 2, &e->ps, &err), 4);
	assert_int_equal(weightd_unit_slot(u, "c", "U8", s5, 1, &e->pc, &err), 5);
	assert_int_equal(weightd_unit_slot(u, "e", NULL, NULL, 0, &e->pe, &err), 6);
	assert_int_equal(weightd_unit_set_tensor(u, "a", "ck", "a", NULL, &err), 0);
	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	assert_int_equal(weightd_recipe_source(r, "ck", "r", NULL, &err), 0);
	assert_int_equal(weightd_recipe_cast(r, 0, "BF16", &err), 1);
	assert_int_equal(weightd_unit_set_recipe(u, "r", r, &err), 0);
	weightd_recipe_free(r);
	assert_int_equal(weightd_unit_set_alias(u, "d", "a", &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "b", "ck", "b", NULL, &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "s", "ck", "a", NULL, &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "c", "ck2", "other", NULL, &err), 0);
	assert_int_equal(weightd_unit_set_alias(u, "e", "d", &err), 0);
	return u;
}

/* The bound unit of make_unit holds what the fake served, whichever form it came in. */
static void assert_bound(struct env *e)
{
	fake_assert_content(e->pa, "a", 24);
	fake_assert_content(e->pr, "r", 8);
	fake_assert_content(e->pb, "b", 8);
	fake_assert_content(e->pc, "c", 5);
	assert_ptr_equal(e->ps, e->pa);   /* the same source: one weight */
	assert_ptr_equal(e->pd, e->pa);   /* aliases: the same memory */
	assert_ptr_equal(e->pe, e->pa);
}

static const Weightd__Unit *last_unit(struct env *e)
{
	size_t n = fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_MATERIALIZE);

	assert_true(n > 0);
	return fake_nth(e->fc.f, WEIGHTD__REQUEST__BODY_MATERIALIZE, n - 1)->materialize;
}

/* ---- the request ------------------------------------------------------------------------ */

static void test_columns_carry_whole_tensor_slots(void **state)
{
	static const uint32_t ck[] = { 0, 0, 0, 1 }, dt[] = { 1, 0, 1, 2 }, nd[] = { 2, 0, 2, 1 };
	static const uint64_t dims[] = { 2, 3, 2, 3, 5 };
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	const Weightd__TensorEntries *te;
	const Weightd__Unit *wu;
	weightd_error err;

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_finish(u, &err), 0);
	wu = last_unit(e);
	/* only the recipe is a UnitEntry */
	assert_int_equal(wu->n_entries, 1);
	assert_string_equal(wu->entries[0]->name, "r");
	assert_int_equal(wu->entries[0]->recipe->n_nodes, 2);
	assert_int_equal(wu->n_aliases, 2);
	assert_string_equal(wu->aliases[0]->name, "d");
	assert_string_equal(wu->aliases[0]->target, "a");
	assert_string_equal(wu->aliases[1]->name, "e");
	assert_string_equal(wu->aliases[1]->target, "d");
	te = wu->tensors;
	assert_non_null(te);
	assert_int_equal(te->names.len, 8);
	assert_memory_equal(te->names.data, "a\0b\0s\0c\0", 8);
	/* s and c read tensors not named like them: the column is there, "" for the others */
	assert_int_equal(te->tensors.len, 10);
	assert_memory_equal(te->tensors.data, "\0\0a\0other\0", 10);
	assert_int_equal(te->n_checkpoints, 2);
	assert_string_equal(te->checkpoints[0], "ck");
	assert_string_equal(te->checkpoints[1], "ck2");
	assert_int_equal(te->n_checkpoint, 4);
	assert_memory_equal(te->checkpoint, ck, sizeof(ck));
	assert_int_equal(te->n_dtypes, 2);
	assert_string_equal(te->dtypes[0], "F32");
	assert_string_equal(te->dtypes[1], "U8");
	assert_int_equal(te->n_dtype, 4);
	assert_memory_equal(te->dtype, dt, sizeof(dt));
	assert_int_equal(te->n_ndim, 4);
	assert_memory_equal(te->ndim, nd, sizeof(nd));
	assert_int_equal(te->n_dims, 5);
	assert_memory_equal(te->dims, dims, sizeof(dims));
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

static void test_columns_left_out_when_they_say_nothing(void **state)
{
	struct env *e = *state;
	const Weightd__TensorEntries *te;
	void *px = NULL, *pw = NULL;
	weightd_unit *u;
	weightd_error err;

	assert_int_equal(weightd_unit_new(e->fc.c, &u, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "x", NULL, NULL, 0, &px, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "w", NULL, NULL, 0, &pw, &err), 1);
	assert_int_equal(weightd_unit_slot(u, "yy", NULL, NULL, 0, NULL, &err), 2);
	assert_int_equal(weightd_unit_set_tensor(u, "x", "ck", "x", NULL, &err), 0);
	assert_int_equal(weightd_unit_set_alias(u, "w", "x", &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "yy", "ck", "yy", NULL, &err), 0);
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), 0);
	weightd_unit_bind(u);
	fake_assert_content(px, "x", 8);
	assert_ptr_equal(pw, px);
	fake_assert_content(weightd_unit_data(u, "yy"), "yy", 8);
	te = last_unit(e)->tensors;
	assert_int_equal(last_unit(e)->n_entries, 0);
	assert_non_null(te);
	assert_int_equal(te->names.len, 5);
	assert_memory_equal(te->names.data, "x\0yy\0", 5);
	assert_int_equal(te->tensors.len, 0);       /* every tensor named like its slot */
	assert_int_equal(te->n_checkpoints, 1);
	assert_int_equal(te->n_checkpoint, 0);      /* one checkpoint */
	assert_int_equal(te->n_dtypes, 0);          /* nothing declared */
	assert_int_equal(te->n_dtype, 0);
	assert_int_equal(te->n_ndim, 0);
	assert_int_equal(te->n_dims, 0);
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

static void test_checkpoint_table_of_many(void **state)
{
	struct env *e = *state;
	const Weightd__TensorEntries *te;
	weightd_unit *u;
	weightd_error err;
	char name[32], ck[32];

	/* 600 slots over 150 checkpoints, in runs and jumps: each named once in the table, in the
	 * order they first appear, and each slot pointing at its own */
	e->sc.refuse = true;
	assert_int_equal(weightd_unit_new(e->fc.c, &u, &err), 0);
	for (int i = 0; i < 600; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		snprintf(ck, sizeof(ck), "ck%d", (i / 2 * 7) % 150);
		assert_int_equal(weightd_unit_slot(u, name, NULL, NULL, 0, NULL, &err), i);
		assert_int_equal(weightd_unit_set_tensor(u, name, ck, name, NULL, &err), 0);
	}
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_finish(u, &err), -WEIGHTD_E_UNKNOWN_TENSOR);
	te = last_unit(e)->tensors;
	assert_int_equal(te->n_checkpoints, 150);
	assert_int_equal(te->n_checkpoint, 600);
	for (int i = 0; i < 600; i++) {
		snprintf(ck, sizeof(ck), "ck%d", (i / 2 * 7) % 150);
		assert_true(te->checkpoint[i] < 150);
		assert_string_equal(te->checkpoints[te->checkpoint[i]], ck);
		if (i > 0 && te->checkpoint[i] > te->checkpoint[i - 1])   /* a new one: the next */
			assert_int_equal(te->checkpoint[i], te->checkpoint[i - 1] + 1);
	}
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

/* ---- the reply -------------------------------------------------------------------------- */

static void test_packed_reply_binds_every_slot(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	const weightd_weight *wa, *wr, *wb, *wc;
	weightd_error err;
	uint8_t want[24], digest[32], key[32];
	uint64_t rel[16];
	int wfds;

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	assert_int_equal(weightd_unit_validate(u, &err), 0);
	weightd_unit_bind(u);
	assert_bound(e);
	fake_settle(e->fc.f);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 2);                 /* one fd per segment */
	assert_int_equal(fake_count_maps(), 2);
	assert_int_equal(weightd_unit_bytes_read(u), 4242);

	/* each slot's weight, by the output the walk over the slots gave it */
	wr = weightd_unit_weight(u, "r");
	wa = weightd_unit_weight(u, "a");
	wb = weightd_unit_weight(u, "b");
	wc = weightd_unit_weight(u, "c");
	assert_int_equal(weightd_weight_handle(wr), 1000);
	assert_int_equal(weightd_weight_handle(wa), 1001);
	assert_int_equal(weightd_weight_handle(wb), 1002);
	assert_int_equal(weightd_weight_handle(wc), 1004);
	assert_ptr_equal(weightd_unit_weight(u, "s"), wa);
	assert_ptr_equal(weightd_unit_weight(u, "d"), wa);
	assert_ptr_equal(weightd_unit_weight(u, "e"), wa);
	assert_string_equal(weightd_weight_name(wa), "a");
	assert_string_equal(weightd_weight_name(wc), "c");
	assert_string_equal(weightd_weight_dtype(wr), "BF16");
	assert_string_equal(weightd_weight_dtype(wa), "F32");
	assert_string_equal(weightd_weight_dtype(wb), "U8");
	assert_int_equal(weightd_weight_ndim(wa), 2);
	assert_int_equal(weightd_weight_shape(wa)[0], 2);
	assert_int_equal(weightd_weight_shape(wa)[1], 3);
	assert_int_equal(weightd_weight_shape(wc)[0], 5);
	assert_int_equal(weightd_weight_nbytes(wc), 5);
	assert_int_equal(weightd_weight_generation(wc), 3);
	/* r and b share segment 0, a and c segment 1, each at 64-byte steps */
	assert_int_equal(weightd_weight_segment(wr), weightd_weight_segment(wb));
	assert_int_equal(weightd_weight_segment(wa), weightd_weight_segment(wc));
	assert_int_not_equal(weightd_weight_segment(wa), weightd_weight_segment(wr));
	assert_int_equal(weightd_weight_offset(wr), 0);
	assert_int_equal(weightd_weight_offset(wb), 64);
	assert_int_equal(weightd_weight_offset(wc), 64);
	fake_content("a", want, 24);
	wd_sha256(want, 24, digest);
	assert_int_equal(weightd_weight_digest_algorithm(wa), WEIGHTD_DIGEST_SHA256);
	assert_int_equal(weightd_weight_digest_len(wa), 32);
	assert_memory_equal(weightd_weight_digest(wa), digest, 32);
	memset(key, 1001 & 0xff, sizeof(key));
	assert_memory_equal(weightd_weight_key(wa), key, 32);

	/* free: one reference per entry (a's twice: a and s) in one message */
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 5);
	assert_int_equal(rel[0] + rel[1] + rel[2] + rel[3] + rel[4],
			 1000 + 1001 + 1002 + 1001 + 1004);
	assert_int_equal(fake_count(e->fc.f, WEIGHTD__REQUEST__BODY_RELEASE), 1);
}

static void test_digest_of_16_bytes(void **state)
{
	struct env *e = *state;
	weightd_inflight *f;
	weightd_weight *w;
	weightd_error err;
	uint8_t want[8], digest[32];

	/* XXH3-128 travels in 32 bytes, the last 16 zero: the weight has a 16-byte digest (the
	 * fake sends the first half of the SHA-256 under that name) */
	e->sc.xxh3 = true;
	assert_int_equal(weightd_materialize(e->fc.c, "ck", "t", NULL, &f, &err), 0);
	assert_int_equal(weightd_finish(f, &w, &err), 0);
	assert_int_equal(weightd_weight_digest_algorithm(w), WEIGHTD_DIGEST_XXH3_128);
	assert_int_equal(weightd_weight_digest_len(w), 16);
	fake_content("t", want, 8);
	wd_sha256(want, 8, digest);
	assert_memory_equal(weightd_weight_digest(w), digest, 16);
	weightd_release(w);
	fake_client_assert_idle(&e->fc);
}

/* What each spoilt answer must be refused for, and the slot the error names ("": none). */
static const struct {
	const char *text, *slot;
} refusal[C_COUNT] = {
	[C_LEN_HANDLE] = { "values in its handle column, not 5", "" },
	[C_LEN_SEGMENT] = { "values in its segment column", "" },
	[C_LEN_OFFSET] = { "values in its offset column", "" },
	[C_LEN_NBYTES] = { "values in its nbytes column", "" },
	[C_LEN_GENERATION] = { "values in its generation column", "" },
	[C_LEN_DTYPE] = { "values in its dtype column", "" },
	[C_LEN_NDIM] = { "values in its ndim column", "" },
	[C_LEN_ALG] = { "values in its digest_algorithm column", "" },
	[C_LEN_DIGESTS] = { "144 values in its digests column, not 160", "" },
	[C_LEN_KEYS] = { "values in its keys column", "" },
	[C_LEN_ALIAS_OWNER] = { "3 values in its alias_owner column, not 2", "" },
	[C_DIMS_EXTRA] = { "has 8 dims for weights of 7 dimensions", "" },
	[C_DIMS_SHORT] = { "gives weight 4 dimensions past the end", "c" },
	[C_NDIM_MAX] = { "gives weight 0 9 dimensions", "r" },
	[C_SEGMENT_RANGE] = { "puts weight 0 in segment 2 of 2", "r" },
	[C_SEGMENT_LIST] = { "with 1 segments but 2 fds", "" },
	[C_FD_INDEX] = { "listed segment 0 of its answer with fd 1", "" },
	[C_DTYPE_RANGE] = { "gives weight 0 dtype 3 of 3", "r" },
	[C_DTYPE_UNKNOWN] = { "names dtype \"Q9_Z\"", "" },
	[C_ALG_UNKNOWN] = { "gives weight 0 digest algorithm 9", "r" },
	[C_DIGEST_PAD] = { "gives weight 0 a 16-byte digest not followed by zeros", "r" },
	[C_OUTSIDE] = { "placed weight 0 (8 bytes) at offset 72", "r" },
	[C_OVERFLOW] = { "placed weight 0 (8 bytes) at offset 18446744073709551552", "r" },
	[C_OWNER_RANGE] = { "resolves alias 0 to entry 5 of 5", "d" },
	[C_OWNER_WRONG] = { "answered alias \"d\" of \"a\" with the weight of \"b\"", "d" },
	[C_FD_UNUSED] = { "sent fd 2 with the unit but no entry lies in it", "" },
	[C_UNALIKE] = { "described weight 1000 differently for \"r\" and \"a\"", "a" },
	[C_NO_WEIGHTS] = { "answered a unit without weights", "" },
};

static void test_malformed_packed_replies_refused(void **state)
{
	struct env *e = *state;
	weightd_error err;
	uint64_t rel[512];
	size_t before;

	for (int c = C_NONE; c < C_COUNT; c++) {
		weightd_unit *u = make_unit(e);

		e->sc.corrupt = (enum corrupt)c;
		before = fake_client_released(&e->fc, rel, 512);
		assert_int_equal(weightd_unit_submit(u, &err), 0);
		if (c == C_NONE) {   /* the answer spoilt below is good as it is */
			assert_int_equal(weightd_unit_validate(u, &err), 0);
			weightd_unit_free(u);
			fake_client_assert_idle(&e->fc);
			continue;
		}
		if (weightd_unit_finish(u, &err) != -WEIGHTD_E_PROTOCOL ||
		    !strstr(err.message, refusal[c].text) || strcmp(err.slot, refusal[c].slot))
			fail_msg("spoilt answer %d: %s (code %d, slot \"%s\"; wanted \"%s\", slot "
				 "\"%s\")", c, err.message, err.code, err.slot, refusal[c].text,
				 refusal[c].slot);
		/* every fd closed, nothing mapped, every reference the answer gave released */
		fake_client_assert_idle(&e->fc);
		assert_int_equal(fake_client_released(&e->fc, rel, 512) - before, e->sc.expect_released);
		assert_null(weightd_unit_weight(u, "a"));
		weightd_unit_free(u);
		assert_int_equal(fake_client_released(&e->fc, rel, 512) - before, e->sc.expect_released);
	}
}

static void test_single_materialize_packed(void **state)
{
	struct env *e = *state;
	weightd_inflight *f;
	weightd_weight *w;
	const void *p;
	weightd_error err;
	uint64_t rel[16];

	assert_int_equal(weightd_materialize(e->fc.c, "ck", "t", NULL, &f, &err), 0);
	assert_int_equal(weightd_finish(f, &w, &err), 0);
	assert_string_equal(weightd_weight_name(w), "t");   /* the packed form leaves it out */
	assert_string_equal(weightd_weight_dtype(w), "U8");
	assert_int_equal(weightd_weight_nbytes(w), 8);
	assert_int_equal(weightd_weight_handle(w), 1000);
	assert_int_equal(weightd_weight_map(w, &p, &err), 0);
	fake_assert_content(p, "t", 8);
	weightd_release(w);
	fake_client_assert_idle(&e->fc);
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 1);

	e->sc.corrupt = C_LEN_KEYS;
	assert_int_equal(weightd_materialize(e->fc.c, "ck", "t", NULL, &f, &err), 0);
	assert_int_equal(weightd_finish(f, &w, &err), -WEIGHTD_E_PROTOCOL);
	assert_non_null(strstr(err.message, "keys column"));
	fake_client_assert_idle(&e->fc);
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 2);
}

static void test_preflight_on_version3(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_inflight *f;
	weightd_preflight *p;
	weightd_error err;

	assert_int_equal(weightd_unit_preflight(u, &f, &err), 0);
	assert_int_equal(weightd_preflight_finish(f, &p, &err), 0);
	assert_non_null(fake_nth(e->fc.f, WEIGHTD__REQUEST__BODY_PREFLIGHT, 0)->preflight->tensors);
	/* in the daemon's order: the recipe, the whole tensors, the aliases */
	assert_int_equal(p->count, 7);
	assert_string_equal(p->outputs[0].name, "r");
	assert_string_equal(p->outputs[1].name, "a");
	assert_string_equal(p->outputs[1].dtype, "F32");
	assert_int_equal(p->outputs[1].nbytes, 24);
	assert_string_equal(p->outputs[4].name, "c");
	assert_int_equal(p->outputs[4].nbytes, 5);
	assert_string_equal(p->outputs[6].name, "e");
	assert_string_equal(p->outputs[6].alias_of, "a");
	weightd_preflight_free(p);
	weightd_unit_free(u);
	fake_client_assert_idle(&e->fc);
}

static void test_free_while_submitted_releases_packed(void **state)
{
	struct env *e = *state;
	weightd_unit *u = make_unit(e);
	weightd_error err;
	uint64_t rel[16];

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	weightd_unit_free(u);
	fake_client_released(&e->fc, rel, 16);                         /* reads the abandoned unit's reply */
	assert_int_equal(fake_client_released(&e->fc, rel, 16), 5);    /* one per entry of the packed answer */
	fake_client_assert_idle(&e->fc);
}

TEST_MAIN(NULL, NULL,
	  cmocka_unit_test_setup_teardown(test_columns_carry_whole_tensor_slots, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_columns_left_out_when_they_say_nothing, setup3,
					  teardown),
	  cmocka_unit_test_setup_teardown(test_checkpoint_table_of_many, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_packed_reply_binds_every_slot, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_digest_of_16_bytes, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_malformed_packed_replies_refused, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_single_materialize_packed, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_preflight_on_version3, setup3, teardown),
	  cmocka_unit_test_setup_teardown(test_free_while_submitted_releases_packed, setup3,
					  teardown))
