/* SPDX-License-Identifier: Apache-2.0 */
/* recipe_plan.c - preflight: builds the graph, decides how each node is read, accounts, labels. */
#include "recipe_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "wd_hashidx.h"

/* ---- analysis: how each node is read, what is kept in memory, what is read from files --------- */

static enum xcls eff_cls(const struct xnode *x)
{
	return x->temp ? C_MEM : x->cls;
}

static enum xcls join_cls(enum xcls a, enum xcls b)
{
	if (a == C_SEQ || b == C_SEQ)
		return C_SEQ;
	return a == b ? a : C_MIXED;
}

/* Make x a temporary; `scale`: only because a dequantization reads it as its scale (the one
 * kind a range of the output needs in part, so ranges can still be split: wd_plan_splittable). */
static void mark_temp(struct xnode *x, uint32_t cause, bool scale, bool *changed)
{
	if (!x->temp) {
		x->temp = true;
		x->scale_temp = scale;
		x->cause = cause;
		*changed = true;
	} else if (!scale) {
		x->scale_temp = false;
	}
}

/*
 * Decide which reachable nodes are evaluated into temporaries: the input of a transpose (read out
 * of order); the input of a selection unless it is plain file or memory bytes (a selection reads
 * parts, out of order); the scale of a dequantization; and an in-order-only node used more than
 * once. Repeated until nothing changes, since a temporary changes how its consumers are read.
 * A pass visits inputs before their consumers, so it only needs another pass when a node became
 * a temporary after one of its consumers was visited, and each such change climbs one level of
 * the graph: at most max_depth + 1 linear passes.
 */
static void classify(struct wd_plan *p)
{
	bool changed;

	for (size_t i = 0; i < p->nx; i++)
		p->x[i].reach = false, p->x[i].uses = 0;
	p->x[p->root].reach = true;
	for (size_t i = 0; i < p->nx; i++)
		p->x[i].temp = p->x[i].scale_temp = false;
	for (size_t i = p->root + 1; i-- > 0;) {
		if (!p->x[i].reach)
			continue;
		for (size_t k = 0; k < p->x[i].n_in; k++) {
			p->x[p->x[i].in[k]].reach = true;
			p->x[p->x[i].in[k]].uses++;
		}
	}
	do {
		changed = false;
		for (size_t i = 0; i <= p->root; i++) {
			struct xnode *x = &p->x[i];
			if (!x->reach)
				continue;
			switch (x->op) {
			case X_LEAF:
				x->cls = C_FILE;
				break;
			case X_SELECT: {
				struct xnode *y = &p->x[x->in[0]];
				if (eff_cls(y) == C_MIXED || eff_cls(y) == C_SEQ)
					mark_temp(y, x->orig, false, &changed);
				x->cls = eff_cls(y);
				break;
			}
			case X_CONCAT:
			case X_STACK:
				x->cls = eff_cls(&p->x[x->in[0]]);
				for (size_t k = 1; k < x->n_in; k++)
					x->cls = join_cls(x->cls, eff_cls(&p->x[x->in[k]]));
				break;
			case X_VIEW:
				x->cls = eff_cls(&p->x[x->in[0]]);
				break;
			case X_CAST:
				x->cls = C_SEQ;
				break;
			case X_DEQUANT:
				/* the scale is read at random, once per block: kept in memory */
				mark_temp(&p->x[x->in[1]], x->orig, true, &changed);
				x->cls = C_SEQ;
				break;
			case X_TRANSPOSE:
				mark_temp(&p->x[x->in[0]], x->orig, false, &changed);
				x->cls = C_MEM;
				break;
			}
			if (x->cls == C_SEQ && x->uses > 1)
				mark_temp(x, x->orig, false, &changed);
		}
	} while (changed);
}

/* Temporaries within max_temp_bytes; read_bytes exact. */
static int account(struct build *b)
{
	struct wd_plan *p = b->p;
	uint64_t temp = 0, total;

	for (size_t i = 0; i <= p->root; i++) {
		struct xnode *x = &p->x[i];
		uint64_t c = 0;
		bool ok = true;

		if (!x->reach)
			continue;
		switch (x->op) {
		case X_LEAF:
			c = x->nbytes;
			break;
		case X_SELECT:
			c = eff_cls(&p->x[x->in[0]]) == C_FILE ? x->nbytes : 0;
			break;
		case X_CONCAT:
		case X_STACK:
		case X_VIEW:
		case X_CAST:
		case X_DEQUANT:
			for (size_t k = 0; k < x->n_in && ok; k++) {
				const struct xnode *y = &p->x[x->in[k]];
				ok = wd_add_u64(c, y->temp ? 0 : y->cost, &c);
			}
			break;
		case X_TRANSPOSE:
			c = 0;
			break;
		}
		if (!ok)
			return nerr(b, x->orig, WEIGHTD_E_OVERFLOW, -1, 0, 0,
				    "the bytes this recipe reads exceed 2^64");
		x->cost = c;
		p->n_casts += x->op == X_CAST || x->op == X_DEQUANT;
		x->slot = x->temp || x->op == X_CAST || x->op == X_DEQUANT ? (uint32_t)p->n_slots++
									 : UINT32_MAX;
		if (x->temp) {
			if (!wd_add_u64(temp, x->nbytes, &temp) || temp > b->lim.max_temp_bytes)
				return nerr(b, x->cause, WEIGHTD_E_RECIPE_TOO_LARGE, -1, i64(b->lim.max_temp_bytes),
					    i64(temp), "evaluating this needs more than the %" PRIu64
					    " bytes of working memory allowed", b->lim.max_temp_bytes);
		}
	}
	total = 0;
	for (size_t i = 0; i < p->root; i++)
		if (p->x[i].reach && p->x[i].temp && !wd_add_u64(total, p->x[i].cost, &total))
			return nerr(b, p->x[i].cause, WEIGHTD_E_OVERFLOW, -1, 0, 0,
				    "the bytes this recipe reads exceed 2^64");
	p->temp_read = total;
	if (!wd_add_u64(total, p->x[p->root].cost, &total))
		return nerr(b, p->x[p->root].orig, WEIGHTD_E_OVERFLOW, -1, 0, 0,
			    "the bytes this recipe reads exceed 2^64");
	p->temp_bytes = temp;
	p->read_bytes = total;
	return 0;
}

/*
 * The distinct files (source, file) and sources of many leaves, collected in linear time: a
 * wd_hashidx over p->files and one over p->srcs.
 */
static uint64_t pfile_hash(const struct wd_source *src, uint32_t file)
{
	return ((uint64_t)(uintptr_t)src * 0x9E3779B97F4A7C15ull) ^ (file * 0xC2B2AE3D27D4EB4Full);
}

static bool file_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct pfile *f = &((const struct wd_plan *)ctx)->files[pos];
	const struct pfile *k = key;

	return f->src == k->src && f->file == k->file;
}

static bool src_eq(const void *ctx, uint32_t pos, const void *key)
{
	return ((const struct wd_plan *)ctx)->srcs[pos] == key;
}

/* Distinct sources and files of the reachable leaves (in first-use order); join geometry. */
static int prepare(struct build *b)
{
	struct wd_plan *p = b->p;
	struct wd_hashidx files = { NULL, 0 }, srcs = { NULL, 0 };
	size_t leaves = 0;
	int rc = 0;

	for (size_t i = 0; i <= p->root; i++)
		leaves += p->x[i].reach && p->x[i].op == X_LEAF;
	/* files and sources: at most one each per leaf */
	if (wd_hashidx_reserve(&files, leaves) < 0 || wd_hashidx_reserve(&srcs, leaves) < 0 ||
	    !(p->files = malloc((leaves ? leaves : 1) * sizeof(*p->files)))) {
		wd_hashidx_free(&files);
		wd_hashidx_free(&srcs);
		return nerr(b, p->x[p->root].orig, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
	}
	p->n_srcs = 0;
	for (size_t i = 0; i <= p->root; i++) {
		struct xnode *x = &p->x[i];

		if (!x->reach)
			continue;
		if (x->op == X_CONCAT || x->op == X_STACK) {
			x->piece = calloc(x->n_in, sizeof(uint64_t));
			x->prefix = calloc(x->n_in, sizeof(uint64_t));
			if (!x->piece || !x->prefix) {
				rc = nerr(b, x->orig, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
				break;
			}
			x->row = 0;
			for (size_t k = 0; k < x->n_in; k++) {
				const struct xnode *y = &p->x[x->in[k]];
				/* concat: the input's rows on the axis; stack: the whole input from the
				 * axis inwards. Either way, the input's bytes per outer index. */
				x->piece[k] = inner_bytes(y, (int)x->axis - 1);
				x->prefix[k] = x->row;
				x->row += x->piece[k];
			}
			continue;
		}
		if (x->op != X_LEAF)
			continue;
		struct pfile key = { x->src, x->file };
		uint64_t hf = pfile_hash(x->src, x->file), hs = pfile_hash(x->src, UINT32_MAX);
		size_t k = wd_hashidx_slot(&files, hf, file_eq, p, &key);

		if (!wd_hashidx_pos(&files, k)) {
			p->files[p->n_files] = key;
			wd_hashidx_set(&files, k, hf, (uint32_t)p->n_files++);
		}
		/* every source was noted while building, so p->srcs has room for the distinct ones */
		k = wd_hashidx_slot(&srcs, hs, src_eq, p, x->src);
		if (!wd_hashidx_pos(&srcs, k)) {
			p->srcs[p->n_srcs] = x->src;
			wd_hashidx_set(&srcs, k, hs, (uint32_t)p->n_srcs++);
		}
	}
	wd_hashidx_free(&files);
	wd_hashidx_free(&srcs);
	return rc;
}

/* ---- label ----------------------------------------------------------------------------------- */

struct sbuf {
	char *s;
	size_t cap, len;
};

__attribute__((format(printf, 2, 3)))
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->len + 1 >= b->cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		b->len = min_u64(b->len + (size_t)n, b->cap - 1);
}

static void label_node(const struct build *b, uint32_t i, struct sbuf *sb)
{
	const struct wd_rnode *n = &b->r->nodes[i];
	char s[160];

	if (sb->len + 1 >= sb->cap)
		return;
	switch (n->op) {
	case WD_OP_SOURCE:
		sb_add(sb, "%s:%s%s", n->checkpoint ? n->checkpoint : "", n->tensor ? n->tensor : "",
		       b->seltxt[i]);
		return;
	case WD_OP_SELECT:
		label_node(b, n->inputs[0], sb);
		sb_add(sb, "%s", b->seltxt[i]);
		return;
	case WD_OP_CONCAT:
	case WD_OP_STACK:
		sb_add(sb, "%s(%" PRId32, op_name(n->op), n->axis);
		for (size_t k = 0; k < n->n_inputs && sb->len + 1 < sb->cap; k++) {
			sb_add(sb, ", ");
			label_node(b, n->inputs[k], sb);
		}
		sb_add(sb, ")");
		return;
	default:
		break;
	}
	sb_add(sb, "%s(", op_name(n->op));
	label_node(b, n->inputs[0], sb);
	switch (n->op) {
	case WD_OP_RESHAPE:
		shape_str(n->shape, n->ndim, s, sizeof(s));
		sb_add(sb, ", %s)", s);
		break;
	case WD_OP_VIEW:
		shape_str(n->shape, n->ndim, s, sizeof(s));
		sb_add(sb, ", %s, %s)", wd_dtype_name(n->dtype), s);
		break;
	case WD_OP_TRANSPOSE:
		sb_add(sb, ", [");
		for (int d = 0; d < n->n_perm; d++)
			sb_add(sb, "%s%" PRIu32, d ? ", " : "", n->perm[d]);
		sb_add(sb, "])");
		break;
	case WD_OP_CAST:
		sb_add(sb, ", %s)", wd_dtype_name(n->dtype));
		break;
	case WD_OP_DEQUANT_BLOCK:
		sb_add(sb, ", ");
		label_node(b, n->inputs[1], sb);
		shape_str(n->block, n->n_block, s, sizeof(s));
		sb_add(sb, ", %s, %s)", s, wd_dtype_name(n->dtype));
		break;
	default:
		sb_add(sb, ")");
		break;
	}
}

static void make_label(const struct build *b)
{
	struct sbuf sb = { b->p->label, LABEL_MAX, 0 };

	b->p->label[0] = '\0';
	label_node(b, (uint32_t)(b->r->n_nodes - 1), &sb);
	if (sb.len + 1 >= sb.cap)
		memcpy(b->p->label + sb.cap - 4, "...", 4);
}

/* ---- preflight ------------------------------------------------------------------------------- */

int wd_recipe_preflight(const struct wd_recipe *r, const struct wd_resolver *res,
			const struct wd_recipe_limits *lim, struct wd_plan **ret, weightd_error *err)
{
	static const struct wd_recipe_limits defaults = WD_RECIPE_LIMITS_DEFAULT;
	struct build b = { .r = r, .res = res, .lim = lim ? *lim : defaults, .err = err };
	struct wd_plan *p = NULL;
	const struct xnode *root;
	int rc;

	wd_error_clear(err);
	if (!r || r->n_nodes == 0)
		return wd_error_set(err, WEIGHTD_E_EMPTY_INPUTS, "the recipe has no nodes");
	if (!r->nodes || !res || !res->lookup)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "the recipe or its resolver is missing");
	if (r->n_nodes > b.lim.max_nodes) /* names the first node past the limit */
		return nerr(&b, b.lim.max_nodes, WEIGHTD_E_RECIPE_TOO_LARGE, -1, b.lim.max_nodes, i64(r->n_nodes),
			    "the recipe has %zu nodes, more than the %" PRIu32 " allowed", r->n_nodes,
			    b.lim.max_nodes);
	p = calloc(1, sizeof(*p) + LABEL_MAX);
	if (p)
		p->label = (char *)(p + 1);
	b.p = p;
	b.max_x = 4 * r->n_nodes + 64;
	b.map = calloc(r->n_nodes, sizeof(*b.map));
	b.depth = calloc(r->n_nodes, sizeof(*b.depth));
	b.seltxt = calloc(r->n_nodes, sizeof(*b.seltxt));
	if (!p || !b.map || !b.depth || !b.seltxt) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < r->n_nodes; i++) {
		rc = wd_recipe_build_node(&b, i);
		if (rc < 0)
			goto out;
	}
	p->root = b.map[r->n_nodes - 1];
	root = &p->x[p->root];
	if (root->nbytes > b.lim.max_output_bytes) {
		rc = nerr(&b, (uint32_t)r->n_nodes - 1, WEIGHTD_E_RECIPE_TOO_LARGE, -1,
			  i64(b.lim.max_output_bytes), i64(root->nbytes),
			  "the output is %" PRIu64 " bytes (at most %" PRIu64 ")", root->nbytes,
			  b.lim.max_output_bytes);
		goto out;
	}
	p->dtype = root->dtype;
	p->ndim = root->ndim;
	memcpy(p->shape, root->shape, sizeof(p->shape));
	p->nbytes = root->nbytes;
	memcpy(p->key, root->digest, WD_DIGEST_LEN);
	classify(p);
	rc = account(&b);
	if (rc < 0)
		goto out;
	rc = prepare(&b);
	if (rc < 0)
		goto out;
	make_label(&b);
	wd_error_clear(err);
	*ret = p;
	p = NULL;
out:
	wd_plan_free(p);
	free(b.map);
	free(b.depth);
	free(b.seltxt);
	return rc;
}

/*
 * The plan of a recipe that is one source node taking its whole tensor: what wd_recipe_preflight
 * makes of it (one LEAF, read from its file as it is), made without the general graph: one
 * allocation, one SHA-256. The checks, their order and their errors are the general path's.
 */
int wd_recipe_preflight_tensor(const char *checkpoint, const char *tensor,
			       const struct wd_resolver *res, const struct wd_recipe_limits *lim,
			       struct wd_plan **ret, weightd_error *err)
{
	static const struct wd_recipe_limits defaults = WD_RECIPE_LIMITS_DEFAULT;
	struct wd_rnode rn;
	struct wd_recipe r = { &rn, 1 };
	uint32_t map = 0, depth = 0;
	char seltxt[1][96] = { "" };
	struct build b = { .r = &r, .res = res, .lim = lim ? *lim : defaults, .map = &map,
			   .depth = &depth, .seltxt = seltxt, .err = err };
	struct wd_plan *p;
	struct xnode n;
	size_t tlen, ck_len;
	bool fits;
	char *name;
	int rc;

	memset(&rn, 0, sizeof(rn));
	rn.op = WD_OP_SOURCE;
	rn.checkpoint = checkpoint;
	rn.tensor = tensor;
	/* limits no plain recipe meets (a node too many, a depth of one too deep): the general
	 * path words them */
	if (!res || !res->lookup || b.lim.max_nodes < 1 || b.lim.max_depth < 1)
		return wd_recipe_preflight(&r, res, lim, ret, err);
	wd_error_clear(err);
	rc = wd_recipe_leaf(&b, 0, &rn, &n);
	if (rc < 0)
		return rc;
	if (n.nbytes > b.lim.max_output_bytes)
		return nerr(&b, 0, WEIGHTD_E_RECIPE_TOO_LARGE, -1, i64(b.lim.max_output_bytes),
			    i64(n.nbytes), "the output is %" PRIu64 " bytes (at most %" PRIu64 ")",
			    n.nbytes, b.lim.max_output_bytes);
	tensor = tensor ? tensor : "";
	tlen = strlen(tensor);
	checkpoint = checkpoint ? checkpoint : "";
	ck_len = strlen(checkpoint);
	/* the label "checkpoint:tensor" whole, or cut by make_label at LABEL_MAX */
	fits = ck_len + 1 + tlen < LABEL_MAX - 1;
	p = calloc(1, sizeof(*p) + sizeof(*p->x) + sizeof(*p->files) + sizeof(*p->srcs) + tlen + 1 +
			      (fits ? ck_len + 1 + tlen + 1 : LABEL_MAX));
	if (!p)
		return nerr(&b, 0, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
	b.p = p;
	p->one_block = true;
	p->x = (struct xnode *)(p + 1);
	p->files = (struct pfile *)(p->x + 1);
	p->srcs = (const struct wd_source **)(p->files + 1);
	name = (char *)(p->srcs + 1);
	memcpy(name, tensor, tlen + 1);
	p->label = name + tlen + 1;
	n.tensor = name;
	if (wd_recipe_leaf_digest(n.src, name, n.digest) < 0) {
		free(p);
		return nerr(&b, 0, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0,
			    "cannot start a SHA-256 digest");
	}
	/* as classify and account leave a lone leaf: read from its file, in place, no state */
	n.reach = true;
	n.cls = C_FILE;
	n.cost = n.nbytes;
	n.slot = UINT32_MAX;
	p->x[0] = n;
	p->nx = p->capx = 1;
	p->root = 0;
	p->dtype = n.dtype;
	p->ndim = n.ndim;
	memcpy(p->shape, n.shape, sizeof(p->shape));
	p->nbytes = n.nbytes;
	memcpy(p->key, n.digest, WD_DIGEST_LEN);
	p->read_bytes = n.nbytes;
	p->files[0].src = n.src;
	p->files[0].file = n.file;
	p->n_files = 1;
	p->srcs[0] = n.src;
	p->n_srcs = 1;
	if (fits) { /* as make_label writes it */
		memcpy(p->label, checkpoint, ck_len);
		p->label[ck_len] = ':';
		memcpy(p->label + ck_len + 1, tensor, tlen + 1);
	} else {
		make_label(&b);
	}
	*ret = p;
	return 0;
}

void wd_plan_free(struct wd_plan *p)
{
	if (!p)
		return;
	if (p->one_block) {
		free(p);
		return;
	}
	for (size_t i = 0; i < p->nx; i++) {
		free(p->x[i].in);
		free(p->x[i].piece);
		free(p->x[i].prefix);
	}
	free(p->x);
	for (size_t i = 0; i < p->n_owned; i++)
		free(p->owned[i]);
	free(p->owned);
	free(p->srcs);
	free(p->files);
	free(p);
}

enum wd_dtype wd_plan_dtype(const struct wd_plan *p)
{
	return p->dtype;
}

int wd_plan_ndim(const struct wd_plan *p)
{
	return p->ndim;
}

const uint64_t *wd_plan_shape(const struct wd_plan *p)
{
	return p->shape;
}

uint64_t wd_plan_nbytes(const struct wd_plan *p)
{
	return p->nbytes;
}

const uint8_t *wd_plan_key(const struct wd_plan *p)
{
	return p->key;
}

uint64_t wd_plan_read_bytes(const struct wd_plan *p)
{
	return p->read_bytes;
}

bool wd_plan_file_range(const struct wd_plan *p, const struct wd_source **ret_src,
			uint32_t *ret_file, uint64_t *ret_offset)
{
	const struct xnode *x = &p->x[p->root];

	while (x->op == X_VIEW)
		x = &p->x[x->in[0]];
	if (x->op != X_LEAF || x->nbytes != p->nbytes || p->read_bytes != p->nbytes)
		return false;
	*ret_src = x->src;
	*ret_file = x->file;
	*ret_offset = x->offset;
	return true;
}

/* The bytes [*lo, *hi) of LEAF y that SELECT x over it reads. */
static void select_bounds(const struct xnode *x, const struct xnode *y, uint64_t *lo, uint64_t *hi)
{
	uint64_t us[WD_MAX_DIMS], inner, row_in, rows, first, last;
	uint32_t be = block_elems(y->dtype);
	int k = (int)x->axis;

	*lo = 0;
	*hi = y->nbytes;
	if (x->kind == WD_SEL_ELEMENTS) {
		*lo = x->start / be * unit_bytes(y->dtype);
		*hi = *lo + x->nbytes;
		return;
	}
	if ((x->kind != WD_SEL_RANGE && x->kind != WD_SEL_INDICES) || k >= y->ndim)
		return;
	unit_shape(y, us);
	inner = inner_bytes(y, k);
	row_in = us[k] * inner;
	if (!row_in)
		return;
	rows = y->nbytes / row_in;
	if (x->kind == WD_SEL_RANGE) {
		uint64_t step = k == y->ndim - 1 ? be : 1;
		first = x->start / step;
		last = (x->end + step - 1) / step;
	} else {
		if (!x->n_idx)
			return;
		first = UINT64_MAX;
		last = 0;
		for (size_t i = 0; i < x->n_idx; i++) {
			first = x->idx[i] < first ? x->idx[i] : first;
			last = x->idx[i] + 1 > last ? x->idx[i] + 1 : last;
		}
	}
	if (last <= first || last > us[k])
		return;
	*lo = first * inner;
	*hi = (rows - 1) * row_in + last * inner;
}

int wd_plan_spans(const struct wd_plan *p, struct wd_plan_span **ret, size_t *ret_n)
{
	uint64_t *lo = NULL, *hi = NULL;
	struct wd_plan_span *out = NULL;
	size_t n = 0;

	*ret = NULL;
	*ret_n = 0;
	lo = malloc((p->root + 1) * sizeof(*lo));
	hi = calloc(p->root + 1, sizeof(*hi));
	if (!lo || !hi)
		goto nomem;
	for (size_t i = 0; i <= p->root; i++)
		lo[i] = UINT64_MAX;
	/* each reachable leaf: the union of what its readers take of it */
	for (size_t i = 0; i <= p->root; i++) {
		const struct xnode *x = &p->x[i];

		if (!x->reach)
			continue;
		if (i == p->root && x->op == X_LEAF) {
			lo[i] = 0;
			hi[i] = x->nbytes;
		}
		for (size_t k = 0; k < x->n_in; k++) {
			const struct xnode *y = &p->x[x->in[k]];
			uint64_t a = 0, b = y->nbytes;

			if (y->op != X_LEAF)
				continue;
			if (x->op == X_SELECT)
				select_bounds(x, y, &a, &b);
			lo[x->in[k]] = a < lo[x->in[k]] ? a : lo[x->in[k]];
			hi[x->in[k]] = b > hi[x->in[k]] ? b : hi[x->in[k]];
		}
	}
	for (size_t i = 0; i <= p->root; i++)
		n += hi[i] > lo[i] && lo[i] != UINT64_MAX;
	if (n && !(out = malloc(n * sizeof(*out))))
		goto nomem;
	n = 0;
	for (size_t i = 0; i <= p->root; i++) {
		const struct xnode *x = &p->x[i];

		if (hi[i] > lo[i] && lo[i] != UINT64_MAX)
			out[n++] = (struct wd_plan_span){ x->src, x->file, x->offset + lo[i],
							  hi[i] - lo[i] };
	}
	free(lo);
	free(hi);
	*ret = out;
	*ret_n = n;
	return 0;
nomem:
	free(lo);
	free(hi);
	return -WEIGHTD_E_RESOURCE_EXHAUSTED;
}

uint64_t wd_plan_temp_bytes(const struct wd_plan *p)
{
	return p->temp_bytes;
}

uint64_t wd_plan_temp_read_bytes(const struct wd_plan *p)
{
	return p->temp_read;
}

size_t wd_plan_source_count(const struct wd_plan *p)
{
	return p->n_srcs;
}

const struct wd_source *wd_plan_source(const struct wd_plan *p, size_t i)
{
	return i < p->n_srcs ? p->srcs[i] : NULL;
}

const char *wd_plan_label(const struct wd_plan *p)
{
	return p->label;
}
