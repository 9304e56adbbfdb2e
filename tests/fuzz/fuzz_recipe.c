/* fuzz_recipe.c - turns arbitrary bytes into a recipe node list over a small fixed checkpoint and
 * runs preflight on it; what preflight accepts is executed and checked against its own promises. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checked.h"
#include "recipe.h"
#include "sink.h"
#include "source.h"
#include "st_writer.h"

/*
 * The checkpoint "m": one tensor of each kind of element type, small enough to execute every
 * accepted recipe. Tensor names are drawn from this list plus one that does not exist.
 */
static const struct stw_tensor fixture[] = {
	{ "a", "F32", 2, { 4, 6 }, NULL, 0, STW_VALUES, 1 },
	{ "b", "F16", 2, { 6, 4 }, NULL, 0, STW_VALUES, 2 },
	{ "c", "BF16", 3, { 2, 3, 4 }, NULL, 0, STW_BYTES, 3 },
	{ "d", "U8", 1, { 24 }, NULL, 0, STW_BYTES, 4 },
	{ "e", "I32", 2, { 3, 8 }, NULL, 0, STW_BYTES, 5 },
	{ "f", "F8_E4M3", 2, { 4, 6 }, NULL, 0, STW_BYTES, 6 },
	{ "g", "F64", 2, { 2, 2 }, NULL, 0, STW_VALUES, 7 },
	{ "h", "F8_E5M2", 1, { 5 }, NULL, 0, STW_BYTES, 8 },
};
#define N_FIXTURE (sizeof(fixture) / sizeof(fixture[0]))
static const char *const names[N_FIXTURE + 1] = { "a", "b", "c", "d", "e", "f", "g", "h", "nope" };

#define MAX_NODES 12
#define MAX_IN 4
#define MAX_IDX 6

static struct wd_source *src;
static char dir[64];
static char path[128];

static void cleanup(void)
{
	wd_source_free(src);
	unlink(path);
	rmdir(dir);
}

/* Write and admit the checkpoint once per process. */
static void init(void)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct wd_error err;

	if (src)
		return;
	snprintf(dir, sizeof(dir), "/tmp/wdfuzz-recipe.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/m.safetensors", dir);
	if (stw_write(path, fixture, N_FIXTURE, NULL, 0, NULL) != 0 ||
	    wd_source_open("m", path, &lim, &src, &err) != 0) {
		fprintf(stderr, "fuzz_recipe: cannot make the fixture: %s\n", err.msg);
		abort();
	}
	atexit(cleanup);
}

static int lookup(void *ctx, const char *ck, const struct wd_source **ret, struct wd_error *err)
{
	(void)ctx;
	if (strcmp(ck, "m") == 0) {
		*ret = src;
		return 0;
	}
	return wd_error_set(err, WD_E_UNKNOWN_SOURCE, "no checkpoint is called \"%s\"", ck);
}

/* --- bytes -> nodes ---------------------------------------------------------------------------- */

struct rd {
	const uint8_t *p;
	size_t n;
};

static uint8_t rb(struct rd *r)
{
	if (!r->n)
		return 0;
	r->n--;
	return *r->p++;
}

/* A size or position: mostly small (0..8), sometimes a power of two up to 2^63 or the maximum. */
static uint64_t rnum(struct rd *r)
{
	uint8_t b = rb(r);

	if (b == 0xff)
		return UINT64_MAX;
	if (b & 0x80)
		return 1ull << (b & 63);
	return b % 9;
}

static void rsel(struct rd *r, struct wd_selection *s, uint64_t *idx)
{
	memset(s, 0, sizeof(*s));
	s->kind = (enum wd_sel_kind)(rb(r) % 5);
	s->axis = rb(r);
	s->axis = s->axis & 0x80 ? s->axis : s->axis % 4;
	switch (s->kind) {
	case WD_SEL_RANGE:
		s->start = rnum(r);
		s->end = rnum(r);
		break;
	case WD_SEL_INDICES:
		s->n_indices = rb(r) % (MAX_IDX + 1);
		for (size_t i = 0; i < s->n_indices; i++)
			idx[i] = rnum(r);
		s->indices = idx;
		break;
	case WD_SEL_ELEMENTS:
		s->start = rnum(r);
		s->end = rnum(r);
		s->ndim = rb(r) % 4;
		for (int i = 0; i < s->ndim; i++)
			s->shape[i] = rnum(r);
		break;
	case WD_SEL_SHARD:
		s->rank = rb(r) % 5;
		s->world = rb(r) % 5;
		break;
	default:
		break;
	}
}

static void rnode(struct rd *r, uint32_t i, struct wd_rnode *n, uint32_t *in, uint64_t *idx)
{
	uint8_t b;

	memset(n, 0, sizeof(*n));
	n->op = (enum wd_op)(rb(r) % 9); /* 8 is no operation */
	n->inputs = in;
	if (n->op == WD_OP_SOURCE) {
		b = rb(r);
		n->checkpoint = (b & 7) == 7 ? "x" : "m";
		n->tensor = names[(b >> 3) % (N_FIXTURE + 1)];
	} else if (n->op == WD_OP_CONCAT || n->op == WD_OP_STACK) {
		n->n_inputs = rb(r) % (MAX_IN + 1);
	} else {
		b = rb(r);
		n->n_inputs = (b & 0xf0) == 0xf0 ? b % 3 : 1;
	}
	for (size_t k = 0; k < n->n_inputs; k++)
		in[k] = rb(r) % (i + 1); /* i itself is not an earlier node: an error case */
	switch (n->op) {
	case WD_OP_SOURCE:
	case WD_OP_SELECT:
		rsel(r, &n->sel, idx);
		break;
	case WD_OP_CONCAT:
	case WD_OP_STACK:
		n->axis = (int8_t)rb(r);
		break;
	case WD_OP_VIEW:
	case WD_OP_CAST:
		n->dtype = (enum wd_dtype)(rb(r) % WD_DTYPE_COUNT);
		if (n->op == WD_OP_CAST)
			break;
		__attribute__((fallthrough)); /* a view has a shape too */
	case WD_OP_RESHAPE:
		n->ndim = rb(r) % 5;
		for (int d = 0; d < n->ndim; d++)
			n->shape[d] = rnum(r);
		break;
	case WD_OP_TRANSPOSE:
		n->n_perm = rb(r) % 5;
		for (int d = 0; d < n->n_perm; d++)
			n->perm[d] = rb(r) % 5;
		break;
	default:
		break;
	}
}

/* --- the promises ------------------------------------------------------------------------------ */

/* Execute with `scratch` bytes of scratch space into a hashing sink: must succeed, write exactly
 * the planned bytes and read exactly the planned checkpoint bytes. */
static void run(const struct wd_plan *p, size_t scratch, uint8_t digest[WD_DIGEST_LEN])
{
	struct wd_scratch sc;
	struct wd_sink sink;
	struct wd_error err;
	uint64_t read = 0;

	if (wd_scratch_init(&sc, scratch) != 0 || wd_sink_init(&sink, -1, wd_plan_nbytes(p)) != 0)
		abort();
	if (wd_plan_execute(p, &sink, &sc, &read, &err) != 0) {
		fprintf(stderr, "fuzz_recipe: a plan preflight accepted failed: %s\n", err.msg);
		__builtin_trap();
	}
	if (sink.written != wd_plan_nbytes(p) || read != wd_plan_read_bytes(p) ||
	    wd_sink_finish(&sink, digest, &err) != 0)
		__builtin_trap();
	wd_scratch_free(&sc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct wd_recipe_limits lim = { .max_nodes = MAX_NODES, .max_depth = 6,
		.max_indices = 16, .max_output_bytes = 1u << 16, .max_temp_bytes = 1u << 16 };
	const struct wd_resolver res = { NULL, lookup };
	struct wd_rnode nodes[MAX_NODES + 1];
	uint32_t in[MAX_NODES + 1][MAX_IN];
	uint64_t idx[MAX_NODES + 1][MAX_IDX];
	struct rd r = { data, size };
	struct wd_recipe rec = { nodes, 0 };
	struct wd_plan *p = NULL, *again = NULL;
	struct wd_error err;
	uint64_t elems, bytes;
	uint8_t d1[WD_DIGEST_LEN], d2[WD_DIGEST_LEN];
	int rc;

	init();
	rec.n_nodes = rb(&r) % (MAX_NODES + 2); /* up to one past the limit; 0 is an error too */
	for (uint32_t i = 0; i < rec.n_nodes; i++)
		rnode(&r, i, &nodes[i], in[i], idx[i]);

	rc = wd_recipe_preflight(&rec, &res, &lim, &p, &err);
	if (rc < 0) {
		char head[32];

		/* a refusal says what and, for a node, which one, first in its sentence */
		if (p || err.code != -rc || !err.msg[0] || err.node > rec.n_nodes)
			__builtin_trap();
		snprintf(head, sizeof(head), "node %u (", err.node - 1);
		if (err.node && strstr(err.msg, head) != err.msg)
			__builtin_trap();
		return 0;
	}
	/* an accepted recipe has a real, non-empty output within the limits */
	if (!wd_dtype_info(wd_plan_dtype(p)) || wd_plan_ndim(p) < 0 || wd_plan_ndim(p) > WD_MAX_DIMS ||
	    !wd_shape_elems(wd_plan_shape(p), wd_plan_ndim(p), &elems) || elems == 0 ||
	    !wd_dtype_bytes(wd_plan_dtype(p), elems, &bytes) || bytes != wd_plan_nbytes(p) ||
	    bytes > lim.max_output_bytes || !wd_plan_label(p)[0])
		__builtin_trap();
	/* the same recipe has the same identity */
	if (wd_recipe_preflight(&rec, &res, &lim, &again, &err) != 0 ||
	    memcmp(wd_plan_key(p), wd_plan_key(again), WD_DIGEST_LEN) != 0)
		__builtin_trap();
	wd_plan_free(again);
	/* and the same bytes whatever the scratch size */
	run(p, 1u << 16, d1);
	run(p, 61, d2);
	if (memcmp(d1, d2, WD_DIGEST_LEN) != 0)
		__builtin_trap();
	wd_plan_free(p);
	return 0;
}
