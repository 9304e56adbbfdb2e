/* SPDX-License-Identifier: Apache-2.0 */
/* recipe_build.c - recipe nodes into the normalised graph: validation, shape inference, digests. */
#include "recipe_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "convert.h"
#include "dequant.h"

int wd_recipe_vnerr(struct build *b, uint32_t node, int code, int32_t axis, int64_t expected,
		    int64_t actual, const char *fmt, va_list ap)
{
	weightd_error *err = b->err;
	const struct wd_rnode *n = node < b->r->n_nodes ? &b->r->nodes[node] : NULL;
	char text[640];

	if (!err)
		return -code;
	vsnprintf(text, sizeof(text), fmt, ap);
	wd_error_clear(err);
	err->node = node + 1;
	err->axis = axis;
	err->expected = expected;
	err->actual = actual;
	if (n && n->op == WD_OP_SOURCE)
		wd_error_about(err, n->checkpoint, n->tensor);
	return wd_error_set(err, code, "node %" PRIu32 " (%s): %s", node, n ? op_name(n->op) : "?",
			    text);
}

/* A plan-owned copy of `len` bytes. */
static void *own(struct build *b, const void *data, size_t len)
{
	struct wd_plan *p = b->p;
	char *c;

	if (p->n_owned == p->cap_owned) {
		size_t cap = p->cap_owned ? 2 * p->cap_owned : 16;
		char **o = realloc(p->owned, cap * sizeof(*o));
		if (!o)
			return NULL;
		p->owned = o;
		p->cap_owned = cap;
	}
	c = malloc(len ? len : 1);
	if (!c)
		return NULL;
	if (len)
		memcpy(c, data, len);
	p->owned[p->n_owned++] = c;
	return c;
}

static void put_u32(struct wd_sha256 *s, uint32_t v)
{
	uint8_t b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	wd_sha256_update(s, b, 4);
}

static void put_u64(struct wd_sha256 *s, uint64_t v)
{
	uint8_t b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	wd_sha256_update(s, b, 8);
}

static void put_str(struct wd_sha256 *s, const char *str)
{
	size_t n = strlen(str);

	put_u64(s, n);
	wd_sha256_update(s, str, n);
}

/*
 * A LEAF's digest in one pass over one buffer: the same bytes xdigest's encoding gives (the tag,
 * the operation, the source's identity, the tensor name, no inputs), so the key of a whole stored
 * tensor costs one SHA-256 of about a hundred bytes.
 */
int wd_recipe_leaf_digest(const struct wd_source *src, const char *tensor,
			  uint8_t out[WD_DIGEST_LEN])
{
	static const char tag[] = "weightd.recipe.1";
	const size_t tag_len = sizeof(tag) - 1, len = strlen(tensor);
	uint8_t buf[512], *q = buf;
	struct wd_sha256 s;

	/* the fixed part: the tag's length and bytes, the operation, the identity */
	for (int i = 0; i < 8; i++)
		*q++ = (uint8_t)((uint64_t)tag_len >> (8 * i));
	memcpy(q, tag, tag_len);
	q += tag_len;
	for (int i = 0; i < 4; i++)
		*q++ = (uint8_t)((uint32_t)X_LEAF >> (8 * i));
	wd_source_identity(src, q);
	q += WD_DIGEST_LEN;
	for (int i = 0; i < 8; i++)
		*q++ = (uint8_t)((uint64_t)len >> (8 * i));
	if (len + 8 <= sizeof(buf) - (size_t)(q - buf)) {
		memcpy(q, tensor, len);
		q += len;
		memset(q, 0, 8); /* no inputs */
		q += 8;
		return wd_sha256(buf, (size_t)(q - buf), out);
	}
	if (wd_sha256_init(&s) < 0)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	wd_sha256_update(&s, buf, (size_t)(q - buf));
	wd_sha256_update(&s, tensor, len);
	put_u64(&s, 0);
	wd_sha256_final(&s, out);
	return 0;
}

/*
 * The canonical encoding of one xnode, hashed: a version tag, the operation, its parameters in a
 * fixed order (integers little-endian, strings and arrays prefixed by their length), then the
 * number of inputs and each input's digest. Dtypes are encoded by name, not enum number.
 */
static int xdigest(struct build *b, struct xnode *x)
{
	struct wd_sha256 s;

	if (x->op == X_LEAF) {
		if (wd_recipe_leaf_digest(x->src, x->tensor, x->digest) < 0)
			return nerr(b, x->orig, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0,
				    "cannot start a SHA-256 digest");
		return 0;
	}
	if (wd_sha256_init(&s) < 0)
		return nerr(b, x->orig, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "cannot start a SHA-256 digest");
	put_str(&s, "weightd.recipe.1");
	put_u32(&s, (uint32_t)x->op);
	switch (x->op) {
	case X_LEAF: /* wd_recipe_leaf_digest */
		break;
	case X_SELECT:
		put_u32(&s, (uint32_t)x->kind);
		put_u32(&s, x->axis);
		put_u64(&s, x->start);
		put_u64(&s, x->end);
		put_u64(&s, x->n_idx);
		if (x->n_idx)
			wd_sha256_update(&s, x->idx_digest, WD_DIGEST_LEN);
		put_u32(&s, (uint32_t)x->ndim);
		for (int i = 0; i < x->ndim; i++)
			put_u64(&s, x->shape[i]);
		break;
	case X_CONCAT:
	case X_STACK:
		put_u32(&s, x->axis);
		break;
	case X_VIEW:
		put_str(&s, wd_dtype_name(x->dtype));
		put_u32(&s, (uint32_t)x->ndim);
		for (int i = 0; i < x->ndim; i++)
			put_u64(&s, x->shape[i]);
		break;
	case X_TRANSPOSE:
		put_u32(&s, (uint32_t)x->ndim);
		for (int i = 0; i < x->ndim; i++)
			put_u32(&s, x->perm[i]);
		break;
	case X_CAST:
		put_str(&s, wd_dtype_name(x->dtype));
		break;
	case X_DEQUANT:
		put_str(&s, wd_dtype_name(x->dtype));
		put_u32(&s, (uint32_t)x->ndim);
		for (int i = 0; i < x->ndim; i++) {
			put_u64(&s, x->block[i]);
			put_u64(&s, x->phase[i]);
		}
		break;
	}
	put_u64(&s, x->n_in);
	for (size_t i = 0; i < x->n_in; i++)
		wd_sha256_update(&s, b->p->x[x->in[i]].digest, WD_DIGEST_LEN);
	wd_sha256_final(&s, x->digest);
	return 0;
}

/*
 * Check an output's dtype/shape and compute its byte length: no overflow, and for block types an
 * innermost dimension made of whole blocks. An output of no elements is valid (0 bytes).
 */
int wd_recipe_finish_shape(struct build *b, uint32_t node, enum wd_dtype t, int ndim,
			const uint64_t *shape, uint64_t *ret_bytes)
{
	uint32_t be = block_elems(t);
	uint64_t elems;
	char s[160];

	if (!wd_shape_elems(shape, ndim, &elems)) {
		shape_str(shape, ndim, s, sizeof(s));
		return nerr(b, node, WEIGHTD_E_OVERFLOW, -1, 0, 0,
			    "the output shape %s has more than 2^64 elements", s);
	}
	if (be > 1 && (ndim == 0 || shape[ndim - 1] % be)) {
		shape_str(shape, ndim, s, sizeof(s));
		return nerr(b, node, WEIGHTD_E_UNSUPPORTED, ndim - 1, be, ndim ? i64(shape[ndim - 1]) : 0,
			    "%s stores blocks of %" PRIu32 " elements along the innermost axis, and the "
			    "output shape %s does not hold whole blocks there",
			    wd_dtype_name(t), be, s);
	}
	if (!wd_dtype_bytes(t, elems, ret_bytes))
		return nerr(b, node, WEIGHTD_E_OVERFLOW, -1, 0, 0,
			    "%" PRIu64 " elements of %s are more than 2^64 bytes", elems, wd_dtype_name(t));
	return 0;
}

/* Append a copy of *proto (its inputs copied too), digest it, return its index. */
int wd_recipe_xadd(struct build *b, const struct xnode *proto, const uint32_t *in, size_t n_in,
		uint32_t *ret)
{
	/* Each recipe node adds at most two xnodes, plus what moving selections down adds (bounded
	 * by max_x, and by two per level of the recursion that does it): a bound on the graph
	 * that no recipe reaches, kept as a guard. */
	size_t cap_x = b->max_x + 2 * b->r->n_nodes + 4 * (size_t)b->lim.max_depth + 64;
	struct wd_plan *p = b->p;
	struct xnode *x;
	int r;

	if (p->nx >= cap_x)
		return nerr(b, proto->orig, WEIGHTD_E_INTERNAL, -1, i64(cap_x), i64(p->nx),
			    "the recipe expands to more than %zu operations", cap_x);
	if (p->nx == p->capx) {
		size_t cap = p->capx ? 2 * p->capx : 16;
		struct xnode *nx = realloc(p->x, cap * sizeof(*nx));
		if (!nx)
			return nerr(b, proto->orig, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
		p->x = nx;
		p->capx = cap;
	}
	x = &p->x[p->nx];
	*x = *proto;
	x->in = NULL;
	x->piece = x->prefix = NULL;
	x->n_in = 0;
	if (n_in) {
		x->in = malloc(n_in * sizeof(*x->in));
		if (!x->in)
			return nerr(b, proto->orig, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
		memcpy(x->in, in, n_in * sizeof(*in));
		x->n_in = n_in;
	}
	p->nx++;
	r = xdigest(b, x);
	if (r < 0)
		return r;
	*ret = (uint32_t)(p->nx - 1);
	return 0;
}

/* Whether a validated selection keeps whole blocks of dtype t (always true for element types). */
static bool sel_whole_blocks(const struct nsel *s, enum wd_dtype t, int in_ndim)
{
	uint32_t be = block_elems(t);

	if (be == 1)
		return true;
	switch (s->kind) {
	case WD_SEL_RANGE:
		return (int)s->axis != in_ndim - 1 || (s->start % be == 0 && s->end % be == 0);
	case WD_SEL_INDICES:
		return (int)s->axis != in_ndim - 1;
	case WD_SEL_ELEMENTS:
		return s->start % be == 0 && s->end % be == 0 && s->ndim > 0 &&
		       s->shape[s->ndim - 1] % be == 0;
	default:
		return true;
	}
}

/* What a selection of recipe node `node` applies to, for error sentences: "tensor
 * 'ckpt:name'" for a source node, "its input" otherwise. Returns buf. */
static const char *sel_input(const struct build *b, uint32_t node, char *buf, size_t cap)
{
	const struct wd_rnode *n = node < b->r->n_nodes ? &b->r->nodes[node] : NULL;

	if (n && n->op == WD_OP_SOURCE && n->tensor)
		snprintf(buf, cap, "tensor '%s:%s'", n->checkpoint ? n->checkpoint : "",
			 n->tensor);
	else
		snprintf(buf, cap, "its input");
	return buf;
}

/*
 * Validate selection `s` of recipe node `node` against an input of dtype t and shape
 * (ndim, shape); fill *ret. SHARD becomes RANGE; a selection of everything becomes FULL.
 */
static int check_sel(struct build *b, uint32_t node, const struct wd_selection *s, enum wd_dtype t,
		     int ndim, const uint64_t *shape, struct nsel *ret)
{
	uint32_t be = block_elems(t);
	uint64_t dim = 0, total = 0, n = 0;
	char *txt = b->seltxt[node];
	char what[WD_MAX_NAME + 160];
	int k;

	memset(ret, 0, sizeof(*ret));
	ret->ndim = ndim;
	memcpy(ret->shape, shape, sizeof(uint64_t) * (size_t)ndim);
	switch (s->kind) {
	case WD_SEL_FULL:
		ret->kind = WD_SEL_FULL;
		return 0;
	case WD_SEL_RANGE:
	case WD_SEL_SHARD:
	case WD_SEL_INDICES:
		if ((int64_t)s->axis >= ndim)
			return nerr(b, node, WEIGHTD_E_AXIS_OUT_OF_RANGE, (int32_t)min_u64(s->axis, INT32_MAX), ndim,
				    s->axis, "the selection is on axis %" PRIu32 " but the input has %d "
				    "dimension%s", s->axis, ndim, ndim == 1 ? "" : "s");
		dim = shape[s->axis];
		ret->axis = s->axis;
		break;
	case WD_SEL_ELEMENTS:
		break;
	default:
		return nerr(b, node, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, (int64_t)s->kind,
			    "unknown selection kind %d", (int)s->kind);
	}
	k = (int)s->axis;
	switch (s->kind) {
	case WD_SEL_SHARD: {
		/* torch.tensor_split: the first dim % world ranks take one row more. On the innermost
		 * axis of a block type the rows are blocks. */
		uint32_t step = k == ndim - 1 ? be : 1;
		uint64_t units = dim / step, q, m, cnt;

		if (s->world == 0)
			return nerr(b, node, WEIGHTD_E_INVALID_ARGUMENT, k, 1, 0,
				    "a shard needs a world size of at least 1");
		if (s->rank >= s->world)
			return nerr(b, node, WEIGHTD_E_OUT_OF_RANGE, k, s->world, s->rank,
				    "shard rank %" PRIu32 " is not below the world size %" PRIu32,
				    s->rank, s->world);
		q = units / s->world;
		m = units % s->world;
		if (s->even && m)
			return nerr(b, node, WEIGHTD_E_SHAPE_MISMATCH, k, i64(units - m + s->world),
				    i64(units),
				    "even shard: %s %" PRIu64
				    " of axis %d do not divide by world %" PRIu32
				    " (the even rule was asked for; without it rank %" PRIu32
				    " would take %" PRIu64 " of them, as torch.tensor_split does)",
				    step > 1 ? "blocks" : "rows", units, k, s->world, s->rank,
				    q + (s->rank < m ? 1 : 0));
		cnt = q + (s->rank < m ? 1 : 0);
		if (cnt == 0 && units > 0)
			return nerr(b, node, WEIGHTD_E_ZERO_SIZED, k, s->world, i64(units),
				    "rank %" PRIu32 " of a %" PRIu32 "-way shard of axis %d (%" PRIu64
				    " %s) gets nothing", s->rank, s->world, k, units,
				    step > 1 ? "blocks" : "rows");
		ret->kind = WD_SEL_RANGE;
		ret->start = ((uint64_t)s->rank * q + min_u64(s->rank, m)) * step;
		ret->end = ret->start + cnt * step;
		break;
	}
	case WD_SEL_RANGE:
		if (s->start > s->end || s->end > dim)
			return nerr(b, node, WEIGHTD_E_OUT_OF_RANGE, k, i64(dim),
				    i64(s->start > s->end ? s->start : s->end),
				    "the range %" PRIu64 ":%" PRIu64 " on axis %d is outside 0:%" PRIu64,
				    s->start, s->end, k, dim);
		if (s->start == s->end && dim > 0)
			return nerr(b, node, WEIGHTD_E_ZERO_SIZED, k, 1, 0,
				    "the range %" PRIu64 ":%" PRIu64 " on axis %d is empty (the axis has %"
				    PRIu64 " rows)", s->start, s->end, k, dim);
		ret->kind = WD_SEL_RANGE;
		ret->start = s->start;
		ret->end = s->end;
		break;
	case WD_SEL_INDICES:
		if (s->n_indices == 0 && dim > 0)
			return nerr(b, node, WEIGHTD_E_ZERO_SIZED, k, 1, 0,
				    "the index list is empty (axis %d has %" PRIu64 " rows)", k, dim);
		if (!s->indices && s->n_indices)
			return nerr(b, node, WEIGHTD_E_INVALID_ARGUMENT, k, 0, 0, "the index list is missing");
		if (!wd_add_u64(b->n_indices, s->n_indices, &n) || n > b->lim.max_indices)
			return nerr(b, node, WEIGHTD_E_RECIPE_TOO_LARGE, k, i64(b->lim.max_indices), i64(n),
				    "the recipe holds more than %" PRIu64 " indices in all",
				    b->lim.max_indices);
		b->n_indices = n;
		for (size_t i = 0; i < s->n_indices; i++)
			if (s->indices[i] >= dim)
				return nerr(b, node, WEIGHTD_E_OUT_OF_RANGE, k, i64(dim), i64(s->indices[i]),
					    "index %zu is %" PRIu64 " but axis %d has %" PRIu64 " rows",
					    i, s->indices[i], k, dim);
		if (be > 1 && k == ndim - 1)
			return nerr(b, node, WEIGHTD_E_UNSUPPORTED, k, be, 1,
				    "%s is %s, stored in blocks of %" PRIu32 " elements along its "
				    "innermost axis (axis %d); single indices on axis %d would split "
				    "blocks", sel_input(b, node, what, sizeof(what)), wd_dtype_name(t), be,
				    k, k);
		ret->kind = WD_SEL_INDICES;
		ret->idx = s->indices;
		ret->n_idx = s->n_indices;
		ret->shape[k] = s->n_indices;
		break;
	case WD_SEL_ELEMENTS:
		if (!wd_shape_elems(shape, ndim, &total))
			return nerr(b, node, WEIGHTD_E_OVERFLOW, -1, 0, 0, "the input has more than 2^64 elements");
		if (s->start > s->end || s->end > total)
			return nerr(b, node, WEIGHTD_E_OUT_OF_RANGE, -1, i64(total),
				    i64(s->start > s->end ? s->start : s->end),
				    "elements %" PRIu64 ":%" PRIu64 " are outside 0:%" PRIu64, s->start,
				    s->end, total);
		if (s->start == s->end && total > 0)
			return nerr(b, node, WEIGHTD_E_ZERO_SIZED, -1, 1, 0, "elements %" PRIu64 ":%" PRIu64
				    " are empty (the input has %" PRIu64 " elements)", s->start, s->end,
				    total);
		if (s->ndim < 0 || s->ndim > WD_MAX_DIMS)
			return nerr(b, node, WEIGHTD_E_INVALID_ARGUMENT, -1, WD_MAX_DIMS, s->ndim,
				    "the element selection's shape has %d dimensions (at most %d)", s->ndim,
				    WD_MAX_DIMS);
		if (!wd_shape_elems(s->shape, s->ndim, &n))
			return nerr(b, node, WEIGHTD_E_OVERFLOW, -1, 0, 0,
				    "the element selection's shape has more than 2^64 elements");
		if (n != s->end - s->start)
			return nerr(b, node, WEIGHTD_E_ELEMENT_COUNT_MISMATCH, -1, i64(s->end - s->start), i64(n),
				    "elements %" PRIu64 ":%" PRIu64 " are %" PRIu64 " but the shape holds %"
				    PRIu64, s->start, s->end, s->end - s->start, n);
		ret->kind = WD_SEL_ELEMENTS;
		ret->start = s->start;
		ret->end = s->end;
		ret->ndim = s->ndim;
		memcpy(ret->shape, s->shape, sizeof(uint64_t) * (size_t)s->ndim);
		break;
	default:
		break;
	}
	if (ret->kind == WD_SEL_RANGE)
		ret->shape[k] = ret->end - ret->start;
	if (!sel_whole_blocks(ret, t, ndim)) {
		if (ret->kind == WD_SEL_ELEMENTS)
			return nerr(b, node, WEIGHTD_E_UNSUPPORTED, ndim - 1, be, 0,
				    "%s is %s, stored in blocks of %" PRIu32 " elements along its "
				    "innermost axis (axis %d); elements %" PRIu64 ":%" PRIu64 " as shape "
				    "with innermost size %" PRIu64 " do not cover whole blocks (start, end "
				    "and that size must be multiples of %" PRIu32 ")",
				    sel_input(b, node, what, sizeof(what)), wd_dtype_name(t), be,
				    ndim - 1, ret->start, ret->end,
				    ret->ndim > 0 ? ret->shape[ret->ndim - 1] : 1, be);
		return nerr(b, node, WEIGHTD_E_UNSUPPORTED, k, be, i64(ret->start % be ? ret->start
									    : ret->end),
			    "%s is %s, stored in blocks of %" PRIu32 " elements along its innermost "
			    "axis (axis %d); the range %" PRIu64 ":%" PRIu64 " on axis %d does not "
			    "cover whole blocks (start and end must be multiples of %" PRIu32 ")",
			    sel_input(b, node, what, sizeof(what)), wd_dtype_name(t), be, k,
			    ret->start, ret->end, k, be);
	}
	/* The label text, before normalising a whole-axis range away. */
	if (ret->kind == WD_SEL_RANGE || ret->kind == WD_SEL_INDICES) {
		size_t off = (size_t)snprintf(txt, 96, "[");
		for (int d = 0; d < ndim && off < 96; d++) {
			const char *sep = d ? "," : "";
			if (d != k)
				off += (size_t)snprintf(txt + off, 96 - off, "%s:", sep);
			else if (ret->kind == WD_SEL_RANGE)
				off += (size_t)snprintf(txt + off, 96 - off, "%s%" PRIu64 ":%" PRIu64, sep,
							ret->start, ret->end);
			else
				off += (size_t)snprintf(txt + off, 96 - off, "%s{%zu indices}", sep,
							ret->n_idx);
		}
		if (off < 96)
			snprintf(txt + off, 96 - off, "]");
	} else if (ret->kind == WD_SEL_ELEMENTS) {
		snprintf(txt, 96, "[flat %" PRIu64 ":%" PRIu64 "]", ret->start, ret->end);
	}
	if (ret->kind == WD_SEL_RANGE && ret->start == 0 && ret->end == dim)
		ret->kind = WD_SEL_FULL;
	if (ret->kind == WD_SEL_ELEMENTS && ret->start == 0 && ret->end == total &&
	    same_shape(ret->ndim, ret->shape, ndim, shape))
		ret->kind = WD_SEL_FULL;
	return 0;
}

/* Copy an INDICES selection's list into the plan and hash it once for the key. */
int wd_recipe_own_indices(struct build *b, uint32_t node, struct nsel *s)
{
	struct wd_sha256 sha;

	if (s->kind != WD_SEL_INDICES)
		return 0;
	s->idx = own(b, s->idx, s->n_idx * sizeof(uint64_t));
	if (!s->idx || wd_sha256_init(&sha) < 0)
		return nerr(b, node, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
	for (size_t i = 0; i < s->n_idx;) {
		uint8_t buf[4096];
		size_t n = 0;
		for (; i < s->n_idx && n < sizeof(buf); i++, n += 8)
			for (int k = 0; k < 8; k++)
				buf[n + (size_t)k] = (uint8_t)(s->idx[i] >> (8 * k));
		wd_sha256_update(&sha, buf, n);
	}
	wd_sha256_final(&sha, s->idx_digest);
	return 0;
}

static int make_cast(struct build *b, uint32_t node, uint32_t in, enum wd_dtype to, uint32_t *ret)
{
	const struct xnode *x = &b->p->x[in];
	struct xnode n;
	int r;

	if (x->dtype == to) {
		*ret = in;
		return 0;
	}
	if (wd_recipe_dequant_folds(x, to)) {
		uint32_t ins[2] = { x->in[0], x->in[1] };

		n = *x;
		n.orig = node;
		n.dtype = to;
		r = wd_recipe_finish_shape(b, node, to, n.ndim, n.shape, &n.nbytes);
		if (r < 0)
			return r;
		return wd_recipe_xadd(b, &n, ins, 2, ret);
	}
	memset(&n, 0, sizeof(n));
	n.op = X_CAST;
	n.orig = node;
	n.dtype = to;
	n.ndim = x->ndim;
	memcpy(n.shape, x->shape, sizeof(n.shape));
	r = wd_recipe_finish_shape(b, node, to, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return wd_recipe_xadd(b, &n, &in, 1, ret);
}

/*
 * A selection of xnode `in`. Over a cast whose input keeps whole blocks under the same selection,
 * the selection moves below the cast (same bytes, fewer read and converted).
 */
int wd_recipe_make_select(struct build *b, uint32_t node, uint32_t in, const struct nsel *s,
		       uint32_t *ret)
{
	const struct xnode *x = &b->p->x[in];
	struct xnode n;
	uint32_t below;
	int r;

	if (s->kind == WD_SEL_FULL) {
		*ret = in;
		return 0;
	}
	if (x->op == X_CAST) {
		const struct xnode *y = &b->p->x[x->in[0]];
		enum wd_dtype to = x->dtype;

		if (b->p->nx + 2 <= b->max_x && sel_whole_blocks(s, y->dtype, y->ndim)) {
			r = wd_recipe_make_select(b, node, x->in[0], s, &below);
			if (r < 0)
				return r;
			return make_cast(b, node, below, to, ret);
		}
	}
	if (x->op == X_DEQUANT && b->p->nx + 4 <= b->max_x && wd_recipe_dequant_can_select(s))
		return wd_recipe_select_dequant(b, node, in, s, ret);
	memset(&n, 0, sizeof(n));
	n.op = X_SELECT;
	n.orig = node;
	n.dtype = x->dtype;
	n.kind = s->kind;
	n.axis = s->axis;
	n.start = s->start;
	n.end = s->end;
	n.idx = s->idx;
	n.n_idx = s->n_idx;
	memcpy(n.idx_digest, s->idx_digest, WD_DIGEST_LEN);
	n.ndim = s->ndim;
	memcpy(n.shape, s->shape, sizeof(n.shape));
	r = wd_recipe_finish_shape(b, node, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return wd_recipe_xadd(b, &n, &in, 1, ret);
}

/* A reinterpretation of `in`'s bytes as (t, shape); views of views collapse onto their base. */
static int make_view(struct build *b, uint32_t node, uint32_t in, enum wd_dtype t, int ndim,
		     const uint64_t *shape, uint32_t *ret)
{
	const struct xnode *x = &b->p->x[in];
	struct xnode n;
	uint32_t base = x->op == X_VIEW ? x->in[0] : in;
	const struct xnode *bx = &b->p->x[base];
	int r;

	if (bx->dtype == t && same_shape(bx->ndim, bx->shape, ndim, shape)) {
		*ret = base;
		return 0;
	}
	memset(&n, 0, sizeof(n));
	n.op = X_VIEW;
	n.orig = node;
	n.dtype = t;
	n.ndim = ndim;
	memcpy(n.shape, shape, sizeof(uint64_t) * (size_t)ndim);
	r = wd_recipe_finish_shape(b, node, t, ndim, shape, &n.nbytes);
	if (r < 0)
		return r;
	if (n.nbytes != bx->nbytes)
		return nerr(b, node, WEIGHTD_E_INTERNAL, -1, i64(bx->nbytes), i64(n.nbytes),
			    "a reinterpretation changed the byte length");
	return wd_recipe_xadd(b, &n, &base, 1, ret);
}

/*
 * Note the source of a leaf for the plan: appended unless it is the last one noted, so the list
 * stays linear in the leaves; prepare() keeps the distinct ones the output reads.
 */
static int note_source(struct build *b, const struct wd_source *src)
{
	struct wd_plan *p = b->p;

	if (p->n_srcs && p->srcs[p->n_srcs - 1] == src)
		return 0;
	if (p->n_srcs == b->cap_srcs) {
		size_t cap = b->cap_srcs ? 2 * b->cap_srcs : 8;
		const struct wd_source **n = realloc(p->srcs, cap * sizeof(*n));
		if (!n)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		p->srcs = n;
		b->cap_srcs = cap;
	}
	p->srcs[p->n_srcs++] = src;
	return 0;
}

int wd_recipe_leaf(struct build *b, uint32_t i, const struct wd_rnode *rn, struct xnode *ret)
{
	const char *ck = rn->checkpoint ? rn->checkpoint : "";
	const char *tn = rn->tensor ? rn->tensor : "";
	const struct wd_source *src = NULL;
	const struct wd_tensor_info *ti;
	struct xnode n;
	int r;

	if (rn->n_inputs)
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, i64(rn->n_inputs),
			    "a source takes no inputs but %zu are given", rn->n_inputs);
	wd_error_clear(b->err);
	r = b->res->lookup(b->res->ctx, ck, &src, b->err);
	if (r < 0 || !src) {
		if (r >= 0)
			r = -WEIGHTD_E_UNKNOWN_SOURCE;
		if (!b->err)
			return r;
		if (b->err->code == 0)
			return nerr(b, i, -r, -1, 0, 0, "checkpoint \"%s\" cannot be used", ck);
		b->err->node = i + 1;
		wd_error_about(b->err, ck, tn);
		wd_error_prefix(b->err, "node %" PRIu32 " (source)", i);
		return r;
	}
	ti = wd_source_find(src, tn);
	if (!ti) {
		const char *near[3];
		size_t n_near = wd_source_suggest(src, tn, near, 3);
		char hint[480] = "";

		if (n_near)
			snprintf(hint, sizeof(hint),
				 "; did you mean \"%.120s\"%s%.120s%s%s%.120s%s?", near[0],
				 n_near > 1 ? (n_near > 2 ? ", \"" : " or \"") : "",
				 n_near > 1 ? near[1] : "", n_near > 1 ? "\"" : "",
				 n_near > 2 ? " or \"" : "", n_near > 2 ? near[2] : "",
				 n_near > 2 ? "\"" : "");
		return nerr(b, i, WEIGHTD_E_UNKNOWN_TENSOR, -1, 0, 0,
			    "checkpoint \"%.120s\" has no tensor \"%.120s\"%s", ck, tn, hint);
	}
	if (ti->ndim < 0 || ti->ndim > WD_MAX_DIMS)
		return nerr(b, i, WEIGHTD_E_INTERNAL, -1, WD_MAX_DIMS, ti->ndim,
			    "tensor \"%s\" has %d dimensions", tn, ti->ndim);
	memset(&n, 0, sizeof(n));
	n.op = X_LEAF;
	n.orig = i;
	n.src = src;
	n.dtype = ti->dtype;
	n.ndim = ti->ndim;
	memcpy(n.shape, ti->shape, sizeof(uint64_t) * (size_t)ti->ndim);
	n.file = ti->file;
	n.offset = ti->offset;
	r = wd_recipe_finish_shape(b, i, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	if (n.nbytes != ti->nbytes)
		return nerr(b, i, WEIGHTD_E_BAD_CHECKPOINT, -1, i64(n.nbytes), i64(ti->nbytes),
			    "tensor \"%s\" holds %" PRIu64 " bytes but its shape needs %" PRIu64, tn,
			    ti->nbytes, n.nbytes);
	*ret = n;
	return 0;
}

static int build_source(struct build *b, uint32_t i, const struct wd_rnode *rn)
{
	const char *tn = rn->tensor ? rn->tensor : "";
	struct xnode n;
	struct nsel s;
	uint32_t leaf;
	int r;

	r = wd_recipe_leaf(b, i, rn, &n);
	if (r < 0)
		return r;
	n.tensor = own(b, tn, strlen(tn) + 1);
	if (!n.tensor || note_source(b, n.src) < 0)
		return nerr(b, i, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
	r = wd_recipe_xadd(b, &n, NULL, 0, &leaf);
	if (r < 0)
		return r;
	r = check_sel(b, i, &rn->sel, n.dtype, n.ndim, n.shape, &s);
	if (r < 0)
		return r;
	r = wd_recipe_own_indices(b, i, &s);
	if (r < 0)
		return r;
	return wd_recipe_make_select(b, i, leaf, &s, &b->map[i]);
}

static int build_join(struct build *b, uint32_t i, const struct wd_rnode *rn)
{
	bool stack = rn->op == WD_OP_STACK;
	const struct xnode *first = &b->p->x[b->map[rn->inputs[0]]];
	int ndim = first->ndim, out_ndim = stack ? ndim + 1 : ndim;
	int64_t axis = rn->axis;
	uint64_t shape[WD_MAX_DIMS], total = 0;
	struct xnode n;
	uint32_t *in = NULL;
	int r;

	if (axis < 0)
		axis += out_ndim;
	if (axis < 0 || axis >= out_ndim)
		return nerr(b, i, WEIGHTD_E_AXIS_OUT_OF_RANGE, rn->axis, out_ndim, rn->axis,
			    "axis %" PRId32 " is outside %s%d:%d for inputs of %d dimension%s",
			    rn->axis, out_ndim ? "-" : "", out_ndim, out_ndim, ndim,
			    ndim == 1 ? "" : "s");
	if (out_ndim > WD_MAX_DIMS)
		return nerr(b, i, WEIGHTD_E_RECIPE_TOO_LARGE, (int32_t)axis, WD_MAX_DIMS, out_ndim,
			    "stacking gives %d dimensions (at most %d)", out_ndim, WD_MAX_DIMS);
	for (size_t k = 1; k < rn->n_inputs; k++) {
		const struct xnode *x = &b->p->x[b->map[rn->inputs[k]]];

		if (x->dtype != first->dtype)
			return nerr(b, i, WEIGHTD_E_DTYPE_MISMATCH, -1, first->dtype, x->dtype,
				    "input %zu (node %" PRIu32 ") is %s but input 0 (node %" PRIu32
				    ") is %s", k, rn->inputs[k], wd_dtype_name(x->dtype),
				    rn->inputs[0], wd_dtype_name(first->dtype));
		if (x->ndim != ndim)
			return nerr(b, i, WEIGHTD_E_SHAPE_MISMATCH, -1, ndim, x->ndim,
				    "input %zu (node %" PRIu32 ") has %d dimensions but input 0 has %d",
				    k, rn->inputs[k], x->ndim, ndim);
		for (int d = 0; d < ndim; d++)
			if (x->shape[d] != first->shape[d] && (stack || d != axis))
				return nerr(b, i, WEIGHTD_E_SHAPE_MISMATCH, d, i64(first->shape[d]),
					    i64(x->shape[d]),
					    "input %zu (node %" PRIu32 ") has size %" PRIu64 " on axis %d "
					    "but input 0 has %" PRIu64 "%s", k, rn->inputs[k],
					    x->shape[d], d, first->shape[d],
					    stack ? " (stacked inputs must have equal shapes)" : "");
	}
	/* Output shape. */
	if (stack) {
		for (int d = 0, s = 0; d < out_ndim; d++)
			shape[d] = d == axis ? rn->n_inputs : first->shape[s++];
	} else {
		memcpy(shape, first->shape, sizeof(uint64_t) * (size_t)ndim);
		for (size_t k = 0; k < rn->n_inputs; k++)
			if (!wd_add_u64(total, b->p->x[b->map[rn->inputs[k]]].shape[axis], &total))
				return nerr(b, i, WEIGHTD_E_OVERFLOW, (int32_t)axis, 0, 0,
					    "the joined axis is longer than 2^64");
		shape[axis] = total;
	}
	memset(&n, 0, sizeof(n));
	r = wd_recipe_finish_shape(b, i, first->dtype, out_ndim, shape, &n.nbytes);
	if (r < 0)
		return r;
	if (rn->n_inputs == 1) {
		if (stack)
			return make_view(b, i, b->map[rn->inputs[0]], first->dtype, out_ndim, shape,
					 &b->map[i]);
		b->map[i] = b->map[rn->inputs[0]];
		return 0;
	}
	n.op = stack ? X_STACK : X_CONCAT;
	n.orig = i;
	n.dtype = first->dtype;
	n.ndim = out_ndim;
	n.axis = (uint32_t)axis;
	memcpy(n.shape, shape, sizeof(shape));
	in = malloc(rn->n_inputs * sizeof(*in));
	if (!in)
		return nerr(b, i, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
	for (size_t k = 0; k < rn->n_inputs; k++)
		in[k] = b->map[rn->inputs[k]];
	r = wd_recipe_xadd(b, &n, in, rn->n_inputs, &b->map[i]);
	free(in);
	return r;
}

static int build_reshape_view(struct build *b, uint32_t i, const struct wd_rnode *rn,
			      const struct xnode *x)
{
	bool view = rn->op == WD_OP_VIEW;
	enum wd_dtype t = view ? rn->dtype : x->dtype;
	uint64_t elems = 0, in_elems = 0, nbytes = 0;
	char s[160];

	if (view && !wd_dtype_info(t))
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, (int64_t)t, "a view needs a dtype");
	if (rn->ndim < 0 || rn->ndim > WD_MAX_DIMS)
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, WD_MAX_DIMS, rn->ndim,
			    "the shape has %d dimensions (at most %d)", rn->ndim, WD_MAX_DIMS);
	if (!wd_shape_elems(rn->shape, rn->ndim, &elems))
		return nerr(b, i, WEIGHTD_E_OVERFLOW, -1, 0, 0, "the shape has more than 2^64 elements");
	shape_str(rn->shape, rn->ndim, s, sizeof(s));
	if (!view) {
		wd_shape_elems(x->shape, x->ndim, &in_elems);
		if (elems != in_elems)
			return nerr(b, i, WEIGHTD_E_ELEMENT_COUNT_MISMATCH, -1, i64(in_elems), i64(elems),
				    "the shape %s holds %" PRIu64 " elements but the input has %" PRIu64,
				    s, elems, in_elems);
	} else {
		uint32_t be = block_elems(t);
		if (be > 1 && (rn->ndim == 0 || rn->shape[rn->ndim - 1] % be))
			return wd_recipe_finish_shape(b, i, t, rn->ndim, rn->shape, &nbytes);
		if (!wd_dtype_bytes(t, elems, &nbytes))
			return nerr(b, i, WEIGHTD_E_OVERFLOW, -1, 0, 0,
				    "%s %s is more than 2^64 bytes", wd_dtype_name(t), s);
		if (nbytes != x->nbytes)
			return nerr(b, i, WEIGHTD_E_BYTE_COUNT_MISMATCH, -1, i64(x->nbytes), i64(nbytes),
				    "%s %s is %" PRIu64 " bytes but the input is %" PRIu64 " bytes",
				    wd_dtype_name(t), s, nbytes, x->nbytes);
	}
	return make_view(b, i, b->map[rn->inputs[0]], t, rn->ndim, rn->shape, &b->map[i]);
}

static int build_transpose(struct build *b, uint32_t i, const struct wd_rnode *rn,
			   const struct xnode *x)
{
	bool seen[WD_MAX_DIMS] = { false }, identity = true;
	struct xnode n;
	uint32_t in = b->map[rn->inputs[0]];
	int r;

	if (rn->n_perm != x->ndim)
		return nerr(b, i, WEIGHTD_E_NOT_A_PERMUTATION, -1, x->ndim, rn->n_perm,
			    "the permutation has %d entries but the input has %d dimensions",
			    rn->n_perm, x->ndim);
	for (int d = 0; d < rn->n_perm; d++) {
		if (rn->perm[d] >= (uint32_t)x->ndim || seen[rn->perm[d]])
			return nerr(b, i, WEIGHTD_E_NOT_A_PERMUTATION, d, x->ndim, rn->perm[d],
				    "entry %d of the permutation is %" PRIu32 ", %s", d, rn->perm[d],
				    rn->perm[d] >= (uint32_t)x->ndim ? "not an axis of the input"
								      : "which appears twice");
		seen[rn->perm[d]] = true;
		identity &= rn->perm[d] == (uint32_t)d;
	}
	if (identity) {
		b->map[i] = in;
		return 0;
	}
	if (block_elems(x->dtype) > 1 && rn->perm[x->ndim - 1] != (uint32_t)x->ndim - 1)
		return nerr(b, i, WEIGHTD_E_UNSUPPORTED, x->ndim - 1, x->ndim - 1, rn->perm[x->ndim - 1],
			    "%s keeps blocks along the innermost axis, which a transpose must leave "
			    "in place", wd_dtype_name(x->dtype));
	memset(&n, 0, sizeof(n));
	n.op = X_TRANSPOSE;
	n.orig = i;
	n.dtype = x->dtype;
	n.ndim = x->ndim;
	for (int d = 0; d < x->ndim; d++) {
		n.perm[d] = rn->perm[d];
		n.shape[d] = x->shape[rn->perm[d]];
	}
	r = wd_recipe_finish_shape(b, i, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return wd_recipe_xadd(b, &n, &in, 1, &b->map[i]);
}

static int build_cast(struct build *b, uint32_t i, const struct wd_rnode *rn, const struct xnode *x)
{
	enum wd_dtype from = x->dtype, to = rn->dtype;
	bool ok;

	if (!wd_dtype_info(to))
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, (int64_t)to, "a cast needs a target dtype");
	if (from == to)
		ok = true;
	else if (!wd_dtype_is_element(to))
		ok = false;
	else if (wd_dtype_is_element(from))
		ok = wd_convert_supported(from, to);
	else
		ok = wd_dequant_supported(from) && (to == WD_F32 || wd_convert_supported(WD_F32, to));
	if (!ok)
		return nerr(b, i, WEIGHTD_E_UNSUPPORTED_CAST, -1, from, to, "there is no cast from %s to %s",
			    wd_dtype_name(from), wd_dtype_name(to));
	/* float to integer silently turns 0.7 into 0: only a recipe that says so gets it */
	if (from != to && !rn->truncate && !wd_dtype_info(to)->is_float &&
	    (wd_dtype_info(from)->is_float || !wd_dtype_is_element(from)))
		return nerr(
			b, i, WEIGHTD_E_UNSUPPORTED_CAST, -1, from, to,
			"a cast from %s to %s loses the fraction of every value; to cast anyway, "
			"set \"truncate\": true on the cast (weightd_recipe_cast_truncate() in C)",
			wd_dtype_name(from), wd_dtype_name(to));
	return make_cast(b, i, b->map[rn->inputs[0]], to, &b->map[i]);
}

/* Inputs exist, come earlier, and are as many as the operation takes; depth within limits. */
static int check_inputs(struct build *b, uint32_t i, const struct wd_rnode *rn)
{
	uint32_t depth = 0;

	if ((unsigned)rn->op > WD_OP_LAST)
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, (int64_t)rn->op, "unknown operation %d",
			    (int)rn->op);
	if (rn->op != WD_OP_SOURCE) {
		if (rn->n_inputs == 0)
			return nerr(b, i, WEIGHTD_E_EMPTY_INPUTS, -1, 1, 0, "%s needs %s",
				    op_name(rn->op), rn->op == WD_OP_CONCAT || rn->op == WD_OP_STACK ?
				    "at least one input" : rn->op == WD_OP_DEQUANT_BLOCK ?
				    "two inputs (data, scale)" : "one input");
		if (rn->op == WD_OP_DEQUANT_BLOCK && rn->n_inputs != 2)
			return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 2, i64(rn->n_inputs),
				    "dequant_block takes two inputs (data, scale) but %zu %s given",
				    rn->n_inputs, rn->n_inputs == 1 ? "is" : "are");
		if (rn->op != WD_OP_CONCAT && rn->op != WD_OP_STACK && rn->op != WD_OP_DEQUANT_BLOCK &&
		    rn->n_inputs != 1)
			return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 1, i64(rn->n_inputs),
				    "%s takes one input but %zu are given", op_name(rn->op), rn->n_inputs);
		if (rn->n_inputs > b->lim.max_nodes)
			return nerr(b, i, WEIGHTD_E_RECIPE_TOO_LARGE, -1, b->lim.max_nodes, i64(rn->n_inputs),
				    "%zu inputs are more than the %" PRIu32 " allowed", rn->n_inputs,
				    b->lim.max_nodes);
		if (!rn->inputs)
			return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, 0, "the input list is missing");
	}
	for (size_t k = 0; k < rn->n_inputs && rn->op != WD_OP_SOURCE; k++) {
		if (rn->inputs[k] >= i)
			return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, i, rn->inputs[k],
				    "input %zu is node %" PRIu32 ", which does not come before node %"
				    PRIu32, k, rn->inputs[k], i);
		if (b->depth[rn->inputs[k]] > depth)
			depth = b->depth[rn->inputs[k]];
	}
	b->depth[i] = depth + 1;
	if (b->depth[i] > b->lim.max_depth)
		return nerr(b, i, WEIGHTD_E_RECIPE_TOO_DEEP, -1, b->lim.max_depth, b->depth[i],
			    "the recipe is %" PRIu32 " operations deep here (at most %" PRIu32 ")",
			    b->depth[i], b->lim.max_depth);
	return 0;
}

int wd_recipe_build_node(struct build *b, uint32_t i)
{
	const struct wd_rnode *rn = &b->r->nodes[i];
	const struct xnode *x;
	struct nsel s;
	int r;

	r = check_inputs(b, i, rn);
	if (r < 0)
		return r;
	if (rn->op == WD_OP_SOURCE)
		return build_source(b, i, rn);
	if (rn->op == WD_OP_CONCAT || rn->op == WD_OP_STACK)
		return build_join(b, i, rn);
	if (rn->op == WD_OP_DEQUANT_BLOCK)
		return wd_recipe_build_dequant(b, i, rn);
	x = &b->p->x[b->map[rn->inputs[0]]];
	switch (rn->op) {
	case WD_OP_SELECT:
		r = check_sel(b, i, &rn->sel, x->dtype, x->ndim, x->shape, &s);
		if (r < 0)
			return r;
		r = wd_recipe_own_indices(b, i, &s);
		if (r < 0)
			return r;
		return wd_recipe_make_select(b, i, b->map[rn->inputs[0]], &s, &b->map[i]);
	case WD_OP_RESHAPE:
	case WD_OP_VIEW:
		return build_reshape_view(b, i, rn, x);
	case WD_OP_TRANSPOSE:
		return build_transpose(b, i, rn, x);
	case WD_OP_CAST:
		return build_cast(b, i, rn, x);
	default:
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, (int64_t)rn->op, "unknown operation");
	}
}
