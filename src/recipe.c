/* recipe.c - recipes: validation and shape inference, identity keys, and streaming execution. */
#include "recipe.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "checked.h"
#include "convert.h"
#include "dequant.h"

/*
 * How it works.
 *
 * Preflight turns the recipe's node list into a normalised graph of "xnodes" (kept in the plan):
 * SOURCE becomes a LEAF (a whole stored tensor) plus a SELECT; SHARD becomes a RANGE; RESHAPE and
 * VIEW both become VIEW (a reinterpretation of the input's bytes) and chains of them collapse;
 * operations that change nothing (a cast to the same dtype, an identity permutation, a full
 * selection, a one-input concat) disappear; a one-input stack becomes a VIEW; and a selection over
 * a cast is moved below the cast (cast is element-wise, so the bytes are the same and only the
 * selected elements are read and converted). The identity key is a Merkle hash over this graph:
 * each xnode's digest is SHA-256 of a fixed, length-prefixed encoding of its operation, its
 * parameters and its inputs' digests, with a LEAF encoded as its source's identity and the tensor
 * name. Equal digests therefore mean equal operations over equal file bytes.
 *
 * Execution pulls bytes: read(node, off, len, dst) fills dst with bytes [off, off + len) of the
 * node's row-major output. Byte-preserving nodes (LEAF, SELECT, CONCAT, STACK, VIEW) only split
 * the range into pieces of their inputs, so a byte-preserving plan turns into preads of file
 * ranges straight into the destination; consecutive pieces that continue each other in the same
 * file are coalesced into one pread. A CAST reads its input sequentially through a small window
 * and converts; at the root it converts scratch->buf into scratch->buf2. A TRANSPOSE needs random
 * access to its input, which is evaluated once into a temporary buffer. Nodes whose output must be
 * read out of order or several times but cannot be (see classify) are evaluated into a temporary
 * buffer too; all temporaries together are bounded by max_temp_bytes. Because every node's output
 * is read either in full and in order, or from memory, the bytes execution reads are known at
 * preflight exactly (wd_plan_read_bytes).
 */

enum xop { X_LEAF = 1, X_SELECT, X_CONCAT, X_STACK, X_VIEW, X_TRANSPOSE, X_CAST };

/* How a node's output can be read: FILE = random access, every byte read from one file byte;
 * MEM = random access, from temporaries only; MIXED = random access, both; SEQ = in order only
 * (it holds a streamed cast). */
enum xcls { C_FILE, C_MEM, C_MIXED, C_SEQ };

#define MAX_XNODES 65536
#define CAST_WINDOW (256u << 10)
#define LABEL_MAX 512

struct xnode {
	enum xop op;
	uint32_t orig;                /* recipe node it came from, for messages */
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint64_t nbytes;
	uint32_t *in;                 /* inputs (xnode indices, all smaller than this one) */
	size_t n_in;
	/* LEAF */
	const struct wd_source *src;
	const char *tensor;           /* plan-owned copy */
	uint32_t file;
	uint64_t offset;
	/* SELECT, in element coordinates: RANGE, INDICES or ELEMENTS */
	enum wd_sel_kind kind;
	uint32_t axis;                /* also CONCAT, STACK (normalised, non-negative) */
	uint64_t start, end;
	const uint64_t *idx;          /* plan-owned */
	size_t n_idx;
	uint8_t idx_digest[WD_DIGEST_LEN]; /* SHA-256 of the indices, little-endian u64 each */
	/* CONCAT, STACK: bytes each input contributes to one output row, and their running sums */
	uint64_t *piece, *prefix;
	uint64_t row;
	/* TRANSPOSE */
	uint32_t perm[WD_MAX_DIMS];
	/* analysis */
	bool reach, temp;
	uint32_t uses;
	enum xcls cls;
	uint64_t cost;                /* file bytes read to produce the whole output once */
	uint32_t cause;               /* recipe node that made it a temporary */
	uint8_t digest[WD_DIGEST_LEN];
};

struct pfile {
	const struct wd_source *src;
	uint32_t file;
};

struct wd_plan {
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint64_t nbytes;
	uint8_t key[WD_DIGEST_LEN];
	uint64_t read_bytes;
	uint64_t temp_bytes;
	struct xnode *x;
	size_t nx, capx;
	uint32_t root;
	const struct wd_source **srcs;
	size_t n_srcs;
	struct pfile *files;
	size_t n_files;
	char **owned;                 /* tensor names and index arrays the xnodes point into */
	size_t n_owned, cap_owned;
	char label[LABEL_MAX];
};

/* ---- small helpers --------------------------------------------------------------------------- */

static const char *const op_names[] = {
	[WD_OP_SOURCE] = "source", [WD_OP_SELECT] = "select", [WD_OP_CONCAT] = "concat",
	[WD_OP_STACK] = "stack", [WD_OP_RESHAPE] = "reshape", [WD_OP_TRANSPOSE] = "transpose",
	[WD_OP_CAST] = "cast", [WD_OP_VIEW] = "view",
};

static const char *op_name(enum wd_op op)
{
	return (unsigned)op <= WD_OP_VIEW ? op_names[op] : "unknown";
}

static int64_t i64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint32_t block_elems(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return i ? i->block_elems : 1;
}

static uint32_t unit_bytes(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return i ? i->block_bytes : 1;
}

/* Shape in storage units: the innermost dimension counts blocks for block types. */
static void unit_shape(const struct xnode *x, uint64_t *us)
{
	memcpy(us, x->shape, sizeof(uint64_t) * (size_t)x->ndim);
	if (x->ndim)
		us[x->ndim - 1] /= block_elems(x->dtype);
}

/* Bytes of one index step on axis k: product of the unit shape after k times the unit size. */
static uint64_t inner_bytes(const struct xnode *x, int k)
{
	uint64_t us[WD_MAX_DIMS], n = unit_bytes(x->dtype);

	unit_shape(x, us);
	for (int d = k + 1; d < x->ndim; d++)
		n *= us[d];
	return n;
}

static bool same_shape(int na, const uint64_t *a, int nb, const uint64_t *b)
{
	return na == nb && memcmp(a, b, sizeof(uint64_t) * (size_t)na) == 0;
}

/* "[2, 3]" into out. */
static void shape_str(const uint64_t *shape, int ndim, char *out, size_t cap)
{
	size_t off = 0;

	off += (size_t)snprintf(out, cap, "[");
	for (int i = 0; i < ndim && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%" PRIu64, i ? ", " : "", shape[i]);
	if (off < cap)
		snprintf(out + off, cap - off, "]");
}

/* ---- building the graph ---------------------------------------------------------------------- */

struct build {
	const struct wd_recipe *r;
	const struct wd_resolver *res;
	struct wd_recipe_limits lim;
	struct wd_plan *p;
	uint32_t *map;                /* recipe node -> xnode of its output */
	uint32_t *depth;
	char (*seltxt)[96];           /* per recipe node: its selection, for the label */
	uint64_t n_indices;
	size_t max_x;                 /* graph size up to which selections move below casts */
	struct wd_error *err;
};

/* Fill err for recipe node `node`: "node N (op): <sentence>", with the structured fields. */
__attribute__((format(printf, 7, 8)))
static int nerr(struct build *b, uint32_t node, int code, int32_t axis, int64_t expected,
		int64_t actual, const char *fmt, ...)
{
	struct wd_error *err = b->err;
	const struct wd_rnode *n = node < b->r->n_nodes ? &b->r->nodes[node] : NULL;
	char text[640];
	va_list ap;

	if (!err)
		return -code;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
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
 * The canonical encoding of one xnode, hashed: a version tag, the operation, its parameters in a
 * fixed order (integers little-endian, strings and arrays prefixed by their length), then the
 * number of inputs and each input's digest. Dtypes are encoded by name, not enum number.
 */
static int xdigest(struct build *b, struct xnode *x)
{
	struct wd_sha256 s;
	uint8_t id[WD_DIGEST_LEN];

	if (wd_sha256_init(&s) < 0)
		return nerr(b, x->orig, WD_E_EXHAUSTED, -1, 0, 0, "cannot start a SHA-256 digest");
	put_str(&s, "weightd.recipe.1");
	put_u32(&s, (uint32_t)x->op);
	switch (x->op) {
	case X_LEAF:
		wd_source_identity(x->src, id);
		wd_sha256_update(&s, id, sizeof(id));
		put_str(&s, x->tensor);
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
	}
	put_u64(&s, x->n_in);
	for (size_t i = 0; i < x->n_in; i++)
		wd_sha256_update(&s, b->p->x[x->in[i]].digest, WD_DIGEST_LEN);
	wd_sha256_final(&s, x->digest);
	return 0;
}

/*
 * Check an output's dtype/shape and compute its byte length: no zero-sized output, no overflow,
 * and for block types an innermost dimension made of whole blocks.
 */
static int finish_shape(struct build *b, uint32_t node, enum wd_dtype t, int ndim,
			const uint64_t *shape, uint64_t *ret_bytes)
{
	uint32_t be = block_elems(t);
	uint64_t elems;
	char s[160];

	if (!wd_shape_elems(shape, ndim, &elems)) {
		shape_str(shape, ndim, s, sizeof(s));
		return nerr(b, node, WD_E_OVERFLOW, -1, 0, 0,
			    "the output shape %s has more than 2^64 elements", s);
	}
	if (elems == 0) {
		shape_str(shape, ndim, s, sizeof(s));
		return nerr(b, node, WD_E_ZERO_SIZED, -1, 0, 0, "the output shape %s has no elements", s);
	}
	if (be > 1 && (ndim == 0 || shape[ndim - 1] % be)) {
		shape_str(shape, ndim, s, sizeof(s));
		return nerr(b, node, WD_E_UNSUPPORTED, ndim - 1, be, ndim ? i64(shape[ndim - 1]) : 0,
			    "%s stores blocks of %" PRIu32 " elements along the innermost axis, and the "
			    "output shape %s does not hold whole blocks there",
			    wd_dtype_name(t), be, s);
	}
	if (!wd_dtype_bytes(t, elems, ret_bytes))
		return nerr(b, node, WD_E_OVERFLOW, -1, 0, 0,
			    "%" PRIu64 " elements of %s are more than 2^64 bytes", elems, wd_dtype_name(t));
	return 0;
}

/* Append a copy of *proto (its inputs copied too), digest it, return its index. */
static int xadd(struct build *b, const struct xnode *proto, const uint32_t *in, size_t n_in,
		uint32_t *ret)
{
	struct wd_plan *p = b->p;
	struct xnode *x;
	int r;

	if (p->nx >= MAX_XNODES)
		return nerr(b, proto->orig, WD_E_TOO_LARGE, -1, MAX_XNODES, i64(p->nx),
			    "the recipe expands to more than %d operations", MAX_XNODES);
	if (p->nx == p->capx) {
		size_t cap = p->capx ? 2 * p->capx : 16;
		struct xnode *nx = realloc(p->x, cap * sizeof(*nx));
		if (!nx)
			return nerr(b, proto->orig, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
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
			return nerr(b, proto->orig, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
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

/* A selection after validation, in element coordinates, with its output shape. */
struct nsel {
	enum wd_sel_kind kind;        /* FULL, RANGE, INDICES or ELEMENTS */
	uint32_t axis;
	uint64_t start, end;
	const uint64_t *idx;
	size_t n_idx;
	uint8_t idx_digest[WD_DIGEST_LEN];
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
};

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
			return nerr(b, node, WD_E_AXIS_RANGE, (int32_t)min_u64(s->axis, INT32_MAX), ndim,
				    s->axis, "the selection is on axis %" PRIu32 " but the input has %d "
				    "dimension%s", s->axis, ndim, ndim == 1 ? "" : "s");
		dim = shape[s->axis];
		ret->axis = s->axis;
		break;
	case WD_SEL_ELEMENTS:
		break;
	default:
		return nerr(b, node, WD_E_INVALID, -1, 0, (int64_t)s->kind, "unknown selection kind %d",
			    (int)s->kind);
	}
	k = (int)s->axis;
	switch (s->kind) {
	case WD_SEL_SHARD: {
		/* torch.tensor_split: the first dim % world ranks take one row more. On the innermost
		 * axis of a block type the rows are blocks. */
		uint32_t step = k == ndim - 1 ? be : 1;
		uint64_t units = dim / step, q, m, cnt;

		if (s->world == 0)
			return nerr(b, node, WD_E_INVALID, k, 1, 0, "a shard needs a world size of at least 1");
		if (s->rank >= s->world)
			return nerr(b, node, WD_E_OUT_OF_RANGE, k, s->world, s->rank,
				    "shard rank %" PRIu32 " is not below the world size %" PRIu32,
				    s->rank, s->world);
		q = units / s->world;
		m = units % s->world;
		cnt = q + (s->rank < m ? 1 : 0);
		if (cnt == 0)
			return nerr(b, node, WD_E_ZERO_SIZED, k, s->world, i64(units),
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
			return nerr(b, node, WD_E_OUT_OF_RANGE, k, i64(dim),
				    i64(s->start > s->end ? s->start : s->end),
				    "the range %" PRIu64 ":%" PRIu64 " on axis %d is outside 0:%" PRIu64,
				    s->start, s->end, k, dim);
		if (s->start == s->end)
			return nerr(b, node, WD_E_ZERO_SIZED, k, 1, 0,
				    "the range %" PRIu64 ":%" PRIu64 " on axis %d is empty", s->start,
				    s->end, k);
		ret->kind = WD_SEL_RANGE;
		ret->start = s->start;
		ret->end = s->end;
		break;
	case WD_SEL_INDICES:
		if (s->n_indices == 0)
			return nerr(b, node, WD_E_ZERO_SIZED, k, 1, 0, "the index list is empty");
		if (!s->indices)
			return nerr(b, node, WD_E_INVALID, k, 0, 0, "the index list is missing");
		if (!wd_add_u64(b->n_indices, s->n_indices, &n) || n > b->lim.max_indices)
			return nerr(b, node, WD_E_TOO_LARGE, k, i64(b->lim.max_indices), i64(n),
				    "the recipe holds more than %" PRIu64 " indices in all",
				    b->lim.max_indices);
		b->n_indices = n;
		for (size_t i = 0; i < s->n_indices; i++)
			if (s->indices[i] >= dim)
				return nerr(b, node, WD_E_OUT_OF_RANGE, k, i64(dim), i64(s->indices[i]),
					    "index %zu is %" PRIu64 " but axis %d has %" PRIu64 " rows",
					    i, s->indices[i], k, dim);
		if (be > 1 && k == ndim - 1)
			return nerr(b, node, WD_E_UNSUPPORTED, k, be, 1,
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
			return nerr(b, node, WD_E_OVERFLOW, -1, 0, 0, "the input has more than 2^64 elements");
		if (s->start > s->end || s->end > total)
			return nerr(b, node, WD_E_OUT_OF_RANGE, -1, i64(total),
				    i64(s->start > s->end ? s->start : s->end),
				    "elements %" PRIu64 ":%" PRIu64 " are outside 0:%" PRIu64, s->start,
				    s->end, total);
		if (s->start == s->end)
			return nerr(b, node, WD_E_ZERO_SIZED, -1, 1, 0, "elements %" PRIu64 ":%" PRIu64
				    " are empty", s->start, s->end);
		if (s->ndim < 0 || s->ndim > WD_MAX_DIMS)
			return nerr(b, node, WD_E_INVALID, -1, WD_MAX_DIMS, s->ndim,
				    "the element selection's shape has %d dimensions (at most %d)", s->ndim,
				    WD_MAX_DIMS);
		for (int d = 0; d < s->ndim; d++)
			if (s->shape[d] == 0)
				return nerr(b, node, WD_E_ZERO_SIZED, d, 1, 0,
					    "the element selection's shape has size 0 on axis %d", d);
		if (!wd_shape_elems(s->shape, s->ndim, &n))
			return nerr(b, node, WD_E_OVERFLOW, -1, 0, 0,
				    "the element selection's shape has more than 2^64 elements");
		if (n != s->end - s->start)
			return nerr(b, node, WD_E_ELEMENT_COUNT, -1, i64(s->end - s->start), i64(n),
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
			return nerr(b, node, WD_E_UNSUPPORTED, ndim - 1, be, 0,
				    "%s is %s, stored in blocks of %" PRIu32 " elements along its "
				    "innermost axis (axis %d); elements %" PRIu64 ":%" PRIu64 " as shape "
				    "with innermost size %" PRIu64 " do not cover whole blocks (start, end "
				    "and that size must be multiples of %" PRIu32 ")",
				    sel_input(b, node, what, sizeof(what)), wd_dtype_name(t), be,
				    ndim - 1, ret->start, ret->end,
				    ret->ndim > 0 ? ret->shape[ret->ndim - 1] : 1, be);
		return nerr(b, node, WD_E_UNSUPPORTED, k, be, i64(ret->start % be ? ret->start
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
static int own_indices(struct build *b, uint32_t node, struct nsel *s)
{
	struct wd_sha256 sha;

	if (s->kind != WD_SEL_INDICES)
		return 0;
	s->idx = own(b, s->idx, s->n_idx * sizeof(uint64_t));
	if (!s->idx || wd_sha256_init(&sha) < 0)
		return nerr(b, node, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
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
	memset(&n, 0, sizeof(n));
	n.op = X_CAST;
	n.orig = node;
	n.dtype = to;
	n.ndim = x->ndim;
	memcpy(n.shape, x->shape, sizeof(n.shape));
	r = finish_shape(b, node, to, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return xadd(b, &n, &in, 1, ret);
}

/*
 * A selection of xnode `in`. Over a cast whose input keeps whole blocks under the same selection,
 * the selection moves below the cast (same bytes, fewer read and converted).
 */
static int make_select(struct build *b, uint32_t node, uint32_t in, const struct nsel *s,
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
			r = make_select(b, node, x->in[0], s, &below);
			if (r < 0)
				return r;
			return make_cast(b, node, below, to, ret);
		}
	}
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
	r = finish_shape(b, node, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return xadd(b, &n, &in, 1, ret);
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
	r = finish_shape(b, node, t, ndim, shape, &n.nbytes);
	if (r < 0)
		return r;
	if (n.nbytes != bx->nbytes)
		return nerr(b, node, WD_E_INTERNAL, -1, i64(bx->nbytes), i64(n.nbytes),
			    "a reinterpretation changed the byte length");
	return xadd(b, &n, &base, 1, ret);
}

static int find_source(struct build *b, const struct wd_source *src)
{
	struct wd_plan *p = b->p;

	for (size_t i = 0; i < p->n_srcs; i++)
		if (p->srcs[i] == src)
			return 0;
	const struct wd_source **s = realloc(p->srcs, (p->n_srcs + 1) * sizeof(*s));
	if (!s)
		return -WD_E_EXHAUSTED;
	p->srcs = s;
	p->srcs[p->n_srcs++] = src;
	return 0;
}

static int build_source(struct build *b, uint32_t i, const struct wd_rnode *rn)
{
	const char *ck = rn->checkpoint ? rn->checkpoint : "";
	const char *tn = rn->tensor ? rn->tensor : "";
	const struct wd_source *src = NULL;
	const struct wd_tensor_info *ti;
	struct xnode n;
	struct nsel s;
	uint32_t leaf;
	int r;

	if (rn->n_inputs)
		return nerr(b, i, WD_E_INVALID, -1, 0, i64(rn->n_inputs),
			    "a source takes no inputs but %zu are given", rn->n_inputs);
	wd_error_clear(b->err);
	r = b->res->lookup(b->res->ctx, ck, &src, b->err);
	if (r < 0 || !src) {
		if (r >= 0)
			r = -WD_E_UNKNOWN_SOURCE;
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
	if (!ti)
		return nerr(b, i, WD_E_UNKNOWN_TENSOR, -1, 0, 0,
			    "checkpoint \"%s\" has no tensor \"%s\"", ck, tn);
	if (ti->ndim < 0 || ti->ndim > WD_MAX_DIMS)
		return nerr(b, i, WD_E_INTERNAL, -1, WD_MAX_DIMS, ti->ndim,
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
	r = finish_shape(b, i, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	if (n.nbytes != ti->nbytes)
		return nerr(b, i, WD_E_BAD_CHECKPOINT, -1, i64(n.nbytes), i64(ti->nbytes),
			    "tensor \"%s\" holds %" PRIu64 " bytes but its shape needs %" PRIu64, tn,
			    ti->nbytes, n.nbytes);
	n.tensor = own(b, tn, strlen(tn) + 1);
	if (!n.tensor || find_source(b, src) < 0)
		return nerr(b, i, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
	r = xadd(b, &n, NULL, 0, &leaf);
	if (r < 0)
		return r;
	r = check_sel(b, i, &rn->sel, n.dtype, n.ndim, n.shape, &s);
	if (r < 0)
		return r;
	r = own_indices(b, i, &s);
	if (r < 0)
		return r;
	return make_select(b, i, leaf, &s, &b->map[i]);
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
		return nerr(b, i, WD_E_AXIS_RANGE, rn->axis, out_ndim, rn->axis,
			    "axis %" PRId32 " is outside %s%d:%d for inputs of %d dimension%s",
			    rn->axis, out_ndim ? "-" : "", out_ndim, out_ndim, ndim,
			    ndim == 1 ? "" : "s");
	if (out_ndim > WD_MAX_DIMS)
		return nerr(b, i, WD_E_TOO_LARGE, (int32_t)axis, WD_MAX_DIMS, out_ndim,
			    "stacking gives %d dimensions (at most %d)", out_ndim, WD_MAX_DIMS);
	for (size_t k = 1; k < rn->n_inputs; k++) {
		const struct xnode *x = &b->p->x[b->map[rn->inputs[k]]];

		if (x->dtype != first->dtype)
			return nerr(b, i, WD_E_DTYPE_MISMATCH, -1, first->dtype, x->dtype,
				    "input %zu (node %" PRIu32 ") is %s but input 0 (node %" PRIu32
				    ") is %s", k, rn->inputs[k], wd_dtype_name(x->dtype),
				    rn->inputs[0], wd_dtype_name(first->dtype));
		if (x->ndim != ndim)
			return nerr(b, i, WD_E_SHAPE_MISMATCH, -1, ndim, x->ndim,
				    "input %zu (node %" PRIu32 ") has %d dimensions but input 0 has %d",
				    k, rn->inputs[k], x->ndim, ndim);
		for (int d = 0; d < ndim; d++)
			if (x->shape[d] != first->shape[d] && (stack || d != axis))
				return nerr(b, i, WD_E_SHAPE_MISMATCH, d, i64(first->shape[d]),
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
				return nerr(b, i, WD_E_OVERFLOW, (int32_t)axis, 0, 0,
					    "the joined axis is longer than 2^64");
		shape[axis] = total;
	}
	memset(&n, 0, sizeof(n));
	r = finish_shape(b, i, first->dtype, out_ndim, shape, &n.nbytes);
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
		return nerr(b, i, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
	for (size_t k = 0; k < rn->n_inputs; k++)
		in[k] = b->map[rn->inputs[k]];
	r = xadd(b, &n, in, rn->n_inputs, &b->map[i]);
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
		return nerr(b, i, WD_E_INVALID, -1, 0, (int64_t)t, "a view needs a dtype");
	if (rn->ndim < 0 || rn->ndim > WD_MAX_DIMS)
		return nerr(b, i, WD_E_INVALID, -1, WD_MAX_DIMS, rn->ndim,
			    "the shape has %d dimensions (at most %d)", rn->ndim, WD_MAX_DIMS);
	for (int d = 0; d < rn->ndim; d++)
		if (rn->shape[d] == 0)
			return nerr(b, i, WD_E_ZERO_SIZED, d, 1, 0, "the shape has size 0 on axis %d", d);
	if (!wd_shape_elems(rn->shape, rn->ndim, &elems))
		return nerr(b, i, WD_E_OVERFLOW, -1, 0, 0, "the shape has more than 2^64 elements");
	shape_str(rn->shape, rn->ndim, s, sizeof(s));
	if (!view) {
		wd_shape_elems(x->shape, x->ndim, &in_elems);
		if (elems != in_elems)
			return nerr(b, i, WD_E_ELEMENT_COUNT, -1, i64(in_elems), i64(elems),
				    "the shape %s holds %" PRIu64 " elements but the input has %" PRIu64,
				    s, elems, in_elems);
	} else {
		uint32_t be = block_elems(t);
		if (be > 1 && (rn->ndim == 0 || rn->shape[rn->ndim - 1] % be))
			return finish_shape(b, i, t, rn->ndim, rn->shape, &nbytes);
		if (!wd_dtype_bytes(t, elems, &nbytes))
			return nerr(b, i, WD_E_OVERFLOW, -1, 0, 0,
				    "%s %s is more than 2^64 bytes", wd_dtype_name(t), s);
		if (nbytes != x->nbytes)
			return nerr(b, i, WD_E_BYTE_COUNT, -1, i64(x->nbytes), i64(nbytes),
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
		return nerr(b, i, WD_E_NOT_PERMUTATION, -1, x->ndim, rn->n_perm,
			    "the permutation has %d entries but the input has %d dimensions",
			    rn->n_perm, x->ndim);
	for (int d = 0; d < rn->n_perm; d++) {
		if (rn->perm[d] >= (uint32_t)x->ndim || seen[rn->perm[d]])
			return nerr(b, i, WD_E_NOT_PERMUTATION, d, x->ndim, rn->perm[d],
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
		return nerr(b, i, WD_E_UNSUPPORTED, x->ndim - 1, x->ndim - 1, rn->perm[x->ndim - 1],
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
	r = finish_shape(b, i, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return xadd(b, &n, &in, 1, &b->map[i]);
}

static int build_cast(struct build *b, uint32_t i, const struct wd_rnode *rn, const struct xnode *x)
{
	enum wd_dtype from = x->dtype, to = rn->dtype;
	bool ok;

	if (!wd_dtype_info(to))
		return nerr(b, i, WD_E_INVALID, -1, 0, (int64_t)to, "a cast needs a target dtype");
	if (from == to)
		ok = true;
	else if (!wd_dtype_is_element(to))
		ok = false;
	else if (wd_dtype_is_element(from))
		ok = wd_convert_supported(from, to);
	else
		ok = wd_dequant_supported(from) && (to == WD_F32 || wd_convert_supported(WD_F32, to));
	if (!ok)
		return nerr(b, i, WD_E_UNSUPPORTED_CAST, -1, from, to, "there is no cast from %s to %s",
			    wd_dtype_name(from), wd_dtype_name(to));
	return make_cast(b, i, b->map[rn->inputs[0]], to, &b->map[i]);
}

/* Inputs exist, come earlier, and are as many as the operation takes; depth within limits. */
static int check_inputs(struct build *b, uint32_t i, const struct wd_rnode *rn)
{
	uint32_t depth = 0;

	if ((unsigned)rn->op > WD_OP_VIEW)
		return nerr(b, i, WD_E_INVALID, -1, 0, (int64_t)rn->op, "unknown operation %d",
			    (int)rn->op);
	if (rn->op != WD_OP_SOURCE) {
		if (rn->n_inputs == 0)
			return nerr(b, i, WD_E_EMPTY_INPUTS, -1, 1, 0, "%s needs %s input",
				    op_name(rn->op), rn->op == WD_OP_CONCAT || rn->op == WD_OP_STACK ?
				    "at least one" : "one");
		if (rn->op != WD_OP_CONCAT && rn->op != WD_OP_STACK && rn->n_inputs != 1)
			return nerr(b, i, WD_E_INVALID, -1, 1, i64(rn->n_inputs),
				    "%s takes one input but %zu are given", op_name(rn->op), rn->n_inputs);
		if (rn->n_inputs > b->lim.max_nodes)
			return nerr(b, i, WD_E_TOO_LARGE, -1, b->lim.max_nodes, i64(rn->n_inputs),
				    "%zu inputs are more than the %" PRIu32 " allowed", rn->n_inputs,
				    b->lim.max_nodes);
		if (!rn->inputs)
			return nerr(b, i, WD_E_INVALID, -1, 0, 0, "the input list is missing");
	}
	for (size_t k = 0; k < rn->n_inputs && rn->op != WD_OP_SOURCE; k++) {
		if (rn->inputs[k] >= i)
			return nerr(b, i, WD_E_INVALID, -1, i, rn->inputs[k],
				    "input %zu is node %" PRIu32 ", which does not come before node %"
				    PRIu32, k, rn->inputs[k], i);
		if (b->depth[rn->inputs[k]] > depth)
			depth = b->depth[rn->inputs[k]];
	}
	b->depth[i] = depth + 1;
	if (b->depth[i] > b->lim.max_depth)
		return nerr(b, i, WD_E_TOO_DEEP, -1, b->lim.max_depth, b->depth[i],
			    "the recipe is %" PRIu32 " operations deep here (at most %" PRIu32 ")",
			    b->depth[i], b->lim.max_depth);
	return 0;
}

static int build_node(struct build *b, uint32_t i)
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
	x = &b->p->x[b->map[rn->inputs[0]]];
	switch (rn->op) {
	case WD_OP_SELECT:
		r = check_sel(b, i, &rn->sel, x->dtype, x->ndim, x->shape, &s);
		if (r < 0)
			return r;
		r = own_indices(b, i, &s);
		if (r < 0)
			return r;
		return make_select(b, i, b->map[rn->inputs[0]], &s, &b->map[i]);
	case WD_OP_RESHAPE:
	case WD_OP_VIEW:
		return build_reshape_view(b, i, rn, x);
	case WD_OP_TRANSPOSE:
		return build_transpose(b, i, rn, x);
	case WD_OP_CAST:
		return build_cast(b, i, rn, x);
	default:
		return nerr(b, i, WD_E_INVALID, -1, 0, (int64_t)rn->op, "unknown operation");
	}
}

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

static void mark_temp(struct xnode *x, uint32_t cause, bool *changed)
{
	if (!x->temp) {
		x->temp = true;
		x->cause = cause;
		*changed = true;
	}
}

/*
 * Decide which reachable nodes are evaluated into temporaries: the input of a transpose (read out
 * of order); the input of a selection unless it is plain file or memory bytes (a selection reads
 * parts, out of order); and an in-order-only node used more than once. Repeated until nothing
 * changes, since a temporary changes how its consumers are read.
 */
static void classify(struct wd_plan *p)
{
	bool changed;

	for (size_t i = 0; i < p->nx; i++)
		p->x[i].reach = false, p->x[i].uses = 0;
	p->x[p->root].reach = true;
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
					mark_temp(y, x->orig, &changed);
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
			case X_TRANSPOSE:
				mark_temp(&p->x[x->in[0]], x->orig, &changed);
				x->cls = C_MEM;
				break;
			}
			if (x->cls == C_SEQ && x->uses > 1)
				mark_temp(x, x->orig, &changed);
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
			return nerr(b, x->orig, WD_E_OVERFLOW, -1, 0, 0,
				    "the bytes this recipe reads exceed 2^64");
		x->cost = c;
		if (x->temp) {
			if (!wd_add_u64(temp, x->nbytes, &temp) || temp > b->lim.max_temp_bytes)
				return nerr(b, x->cause, WD_E_TOO_LARGE, -1, i64(b->lim.max_temp_bytes),
					    i64(temp), "evaluating this needs more than the %" PRIu64
					    " bytes of working memory allowed", b->lim.max_temp_bytes);
		}
	}
	total = p->x[p->root].cost;
	for (size_t i = 0; i < p->root; i++)
		if (p->x[i].reach && p->x[i].temp && !wd_add_u64(total, p->x[i].cost, &total))
			return nerr(b, p->x[i].cause, WD_E_OVERFLOW, -1, 0, 0,
				    "the bytes this recipe reads exceed 2^64");
	p->temp_bytes = temp;
	p->read_bytes = total;
	return 0;
}

/* Distinct sources and files of the reachable leaves; join geometry. */
static int prepare(struct build *b)
{
	struct wd_plan *p = b->p;

	p->n_srcs = 0;
	for (size_t i = 0; i <= p->root; i++) {
		struct xnode *x = &p->x[i];
		bool seen = false;

		if (!x->reach)
			continue;
		if (x->op == X_CONCAT || x->op == X_STACK) {
			x->piece = calloc(x->n_in, sizeof(uint64_t));
			x->prefix = calloc(x->n_in, sizeof(uint64_t));
			if (!x->piece || !x->prefix)
				return nerr(b, x->orig, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
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
		for (size_t k = 0; k < p->n_files; k++)
			seen |= p->files[k].src == x->src && p->files[k].file == x->file;
		if (!seen) {
			struct pfile *f = realloc(p->files, (p->n_files + 1) * sizeof(*f));
			if (!f)
				return nerr(b, x->orig, WD_E_EXHAUSTED, -1, 0, 0, "out of memory");
			p->files = f;
			p->files[p->n_files].src = x->src;
			p->files[p->n_files].file = x->file;
			p->n_files++;
		}
		seen = false;
		for (size_t k = 0; k < p->n_srcs; k++)
			seen |= p->srcs[k] == x->src;
		if (!seen)
			p->srcs[p->n_srcs++] = x->src;
	}
	return 0;
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
	default:
		sb_add(sb, ")");
		break;
	}
}

static void make_label(const struct build *b)
{
	struct sbuf sb = { b->p->label, sizeof(b->p->label), 0 };

	b->p->label[0] = '\0';
	label_node(b, (uint32_t)(b->r->n_nodes - 1), &sb);
	if (sb.len + 1 >= sb.cap)
		memcpy(b->p->label + sb.cap - 4, "...", 4);
}

/* ---- preflight ------------------------------------------------------------------------------- */

int wd_recipe_preflight(const struct wd_recipe *r, const struct wd_resolver *res,
			const struct wd_recipe_limits *lim, struct wd_plan **ret, struct wd_error *err)
{
	static const struct wd_recipe_limits defaults = WD_RECIPE_LIMITS_DEFAULT;
	struct build b = { .r = r, .res = res, .lim = lim ? *lim : defaults, .err = err };
	struct wd_plan *p = NULL;
	const struct xnode *root;
	int rc;

	wd_error_clear(err);
	if (!r || r->n_nodes == 0)
		return wd_error_set(err, WD_E_EMPTY_INPUTS, "the recipe has no nodes");
	if (!r->nodes || !res || !res->lookup)
		return wd_error_set(err, WD_E_INVALID, "the recipe or its resolver is missing");
	if (r->n_nodes > b.lim.max_nodes) /* names the first node past the limit */
		return nerr(&b, b.lim.max_nodes, WD_E_TOO_LARGE, -1, b.lim.max_nodes, i64(r->n_nodes),
			    "the recipe has %zu nodes, more than the %" PRIu32 " allowed", r->n_nodes,
			    b.lim.max_nodes);
	p = calloc(1, sizeof(*p));
	b.p = p;
	b.max_x = 4 * r->n_nodes + 64;
	b.map = calloc(r->n_nodes, sizeof(*b.map));
	b.depth = calloc(r->n_nodes, sizeof(*b.depth));
	b.seltxt = calloc(r->n_nodes, sizeof(*b.seltxt));
	if (!p || !b.map || !b.depth || !b.seltxt) {
		rc = wd_error_set(err, WD_E_EXHAUSTED, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < r->n_nodes; i++) {
		rc = build_node(&b, i);
		if (rc < 0)
			goto out;
	}
	p->root = b.map[r->n_nodes - 1];
	root = &p->x[p->root];
	if (root->nbytes > b.lim.max_output_bytes) {
		rc = nerr(&b, (uint32_t)r->n_nodes - 1, WD_E_TOO_LARGE, -1, i64(b.lim.max_output_bytes),
			  i64(root->nbytes), "the output is %" PRIu64 " bytes (at most %" PRIu64 ")",
			  root->nbytes, b.lim.max_output_bytes);
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

void wd_plan_free(struct wd_plan *p)
{
	if (!p)
		return;
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

/* ---- execution ------------------------------------------------------------------------------- */

struct xstate {
	uint8_t *temp;               /* whole output, once `ready` (temp_alloc) */
	size_t temp_len;
	bool ready;
	/* a cast's window: converted output bytes [win_off, win_off + win_len) */
	uint8_t *inbuf, *win;
	float *mid;                  /* F32 between dequantization and the final conversion */
	size_t units;                /* capacity of inbuf, in input units */
	uint64_t win_off;
	size_t win_len;
};

struct exec {
	const struct wd_plan *p;
	struct xstate *st;
	struct wd_error *err;
	uint64_t bytes_read;
	/* one pending pread, extended while requests continue it */
	const struct xnode *pend_leaf;
	uint64_t pend_off;
	size_t pend_len;
	uint8_t *pend_dst;
};

static int flush(struct exec *e)
{
	const struct xnode *x = e->pend_leaf;
	int r;

	if (!e->pend_len)
		return 0;
	r = wd_source_pread(x->src, x->file, e->pend_dst, e->pend_len, e->pend_off, e->err);
	if (r < 0) {
		wd_error_about(e->err, wd_source_name(x->src), x->tensor);
		return r;
	}
	e->bytes_read += e->pend_len;
	e->pend_len = 0;
	return 0;
}

static int pend(struct exec *e, const struct xnode *x, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *q = e->pend_leaf;
	int r;

	if (e->pend_len && q->src == x->src && q->file == x->file &&
	    off == e->pend_off + e->pend_len && dst == e->pend_dst + e->pend_len) {
		e->pend_len += len;
		return 0;
	}
	r = flush(e);
	if (r < 0)
		return r;
	e->pend_leaf = x;
	e->pend_off = off;
	e->pend_len = len;
	e->pend_dst = dst;
	return 0;
}

static int read_node(struct exec *e, uint32_t i, uint64_t off, size_t len, uint8_t *dst);

/* Convert nunits input units (elements, or blocks of a block type) from `in` to `out`. */
static int convert_units(struct exec *e, enum wd_dtype from, const void *in, enum wd_dtype to,
			 void *out, size_t nunits, float *mid)
{
	size_t be = block_elems(from);
	float *f;

	if (be == 1) {
		wd_convert(from, in, to, out, nunits);
		return 0;
	}
	f = to == WD_F32 ? out : mid;
	if (wd_dequant_f32(from, in, nunits, f) < 0)
		return wd_error_set(e->err, WD_E_UNSUPPORTED_CAST, "cannot decode %s blocks",
				    wd_dtype_name(from));
	if (to != WD_F32)
		wd_convert(WD_F32, f, to, out, nunits * be);
	return 0;
}

/* Input units [u0, u0 + k) of cast i, read and converted into out. */
static int cast_units(struct exec *e, uint32_t i, uint64_t u0, size_t k, uint8_t *out)
{
	const struct xnode *x = &e->p->x[i], *y = &e->p->x[x->in[0]];
	struct xstate *s = &e->st[i];
	uint64_t ib = unit_bytes(y->dtype);
	int r;

	r = read_node(e, x->in[0], u0 * ib, k * ib, s->inbuf);
	if (r == 0)
		r = flush(e);
	if (r == 0)
		r = convert_units(e, y->dtype, s->inbuf, x->dtype, out, k, s->mid);
	return r;
}

/*
 * A cast's output, read in order: whole input units go straight into dst; a range that starts or
 * ends inside a unit goes through the window, which keeps the converted unit for the next read,
 * so every input byte is read exactly once.
 */
static int read_cast(struct exec *e, uint32_t i, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *x = &e->p->x[i], *y = &e->p->x[x->in[0]];
	struct xstate *s = &e->st[i];
	uint64_t ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
	uint64_t total_units = x->nbytes / ob;
	int r;

	while (len) {
		uint64_t u0 = off / ob;
		size_t k;

		if (s->win_len && off >= s->win_off && off < s->win_off + s->win_len) {
			size_t take = (size_t)min_u64(len, s->win_off + s->win_len - off);
			memcpy(dst, s->win + (off - s->win_off), take);
			off += take;
			dst += take;
			len -= take;
			continue;
		}
		if (off % ob == 0 && len >= ob &&
		    (block_elems(y->dtype) == 1 || x->dtype != WD_F32 || ((uintptr_t)dst & 3) == 0)) {
			k = (size_t)min_u64(len / ob, s->units);
			r = cast_units(e, i, u0, k, dst);
			if (r < 0)
				return r;
			off += k * ob;
			dst += k * ob;
			len -= k * ob;
			continue;
		}
		k = (size_t)min_u64(s->units, u0 < total_units ? total_units - u0 : 0);
		if (k == 0)
			return wd_error_set(e->err, WD_E_INTERNAL, "read past the end of a cast");
		r = cast_units(e, i, u0, k, s->win);
		if (r < 0)
			return r;
		s->win_off = u0 * ob;
		s->win_len = k * ob;
	}
	return 0;
}

static int read_select(struct exec *e, const struct xnode *x, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *y = &e->p->x[x->in[0]];
	uint64_t us[WD_MAX_DIMS], inner, row_in, row_out, base;
	uint32_t be = block_elems(y->dtype);
	int k = (int)x->axis, r;

	if (x->kind == WD_SEL_ELEMENTS)
		return read_node(e, x->in[0], x->start / be * unit_bytes(y->dtype) + off, len, dst);
	unit_shape(y, us);
	inner = inner_bytes(y, k);
	row_in = us[k] * inner;
	if (x->kind == WD_SEL_RANGE) {
		uint64_t step = k == y->ndim - 1 ? be : 1;
		base = x->start / step * inner;
		row_out = (x->end - x->start) / step * inner;
		while (len) {
			uint64_t o = off / row_out, rem = off % row_out;
			size_t take = (size_t)min_u64(len, row_out - rem);
			r = read_node(e, x->in[0], o * row_in + base + rem, take, dst);
			if (r < 0)
				return r;
			off += take;
			dst += take;
			len -= take;
		}
		return 0;
	}
	row_out = x->n_idx * inner;
	while (len) {
		uint64_t o = off / row_out, rem = off % row_out, j = rem / inner, in_off = rem % inner;
		size_t take = (size_t)min_u64(len, inner - in_off);
		r = read_node(e, x->in[0], o * row_in + x->idx[j] * inner + in_off, take, dst);
		if (r < 0)
			return r;
		off += take;
		dst += take;
		len -= take;
	}
	return 0;
}

static int read_join(struct exec *e, const struct xnode *x, uint64_t off, size_t len, uint8_t *dst)
{
	int r;

	while (len) {
		uint64_t o = off / x->row, rem = off % x->row;
		size_t lo = 0, hi = x->n_in - 1, take;

		while (lo < hi) {            /* last input whose prefix <= rem */
			size_t mid = (lo + hi + 1) / 2;
			if (x->prefix[mid] <= rem)
				lo = mid;
			else
				hi = mid - 1;
		}
		rem -= x->prefix[lo];
		take = (size_t)min_u64(len, x->piece[lo] - rem);
		r = read_node(e, x->in[lo], o * x->piece[lo] + rem, take, dst);
		if (r < 0)
			return r;
		off += take;
		dst += take;
		len -= take;
	}
	return 0;
}

/* A transpose's geometry in storage units: output shape, and the input stride of each output axis. */
struct tgeo {
	int nd;
	uint64_t ub;
	uint64_t ous[WD_MAX_DIMS];
	uint64_t step[WD_MAX_DIMS];
};

static void tgeo_init(const struct xnode *x, const struct xnode *y, struct tgeo *g)
{
	uint64_t ius[WD_MAX_DIMS], istride[WD_MAX_DIMS];

	g->nd = x->ndim;
	g->ub = unit_bytes(x->dtype);
	unit_shape(y, ius);
	unit_shape(x, g->ous);
	istride[g->nd - 1] = 1;
	for (int d = g->nd - 1; d > 0; d--)
		istride[d - 1] = istride[d] * ius[d];
	for (int d = 0; d < g->nd; d++)
		g->step[d] = istride[x->perm[d]];
}

/* Input unit of output unit u. */
static uint64_t tgeo_src(const struct tgeo *g, uint64_t u, uint64_t *idx)
{
	uint64_t sofs = 0;

	for (int d = g->nd - 1; d >= 0; d--) {
		idx[d] = u % g->ous[d];
		u /= g->ous[d];
		sofs += idx[d] * g->step[d];
	}
	return sofs;
}

/* Output bytes [off, off + len) unit by unit in output order, with an odometer over the index. */
static void transpose_span(const struct tgeo *g, const uint8_t *src, uint64_t off, size_t len,
			   uint8_t *dst)
{
	uint64_t idx[WD_MAX_DIMS], ub = g->ub, u = off / ub, end = off + len;
	uint64_t sofs = tgeo_src(g, u, idx);
	int nd = g->nd;

	while (off < end) {
		uint64_t ustart = u * ub, a = off - ustart, bnd = min_u64(ub, end - ustart);
		const uint8_t *s = src + sofs * ub;

		memcpy(dst, s + a, bnd - a);
		dst += bnd - a;
		off = ustart + bnd;
		u++;
		for (int d = nd - 1; d >= 0; d--) {
			idx[d]++;
			sofs += g->step[d];
			if (idx[d] < g->ous[d] || d == 0)
				break;
			sofs -= idx[d] * g->step[d];
			idx[d] = 0;
		}
	}
}

/* n units from s (stride sstride units) to consecutive units at d; constant sizes inline. */
static inline void gather_units(uint8_t *d, const uint8_t *s, uint64_t n, uint64_t sstride,
				uint64_t ub)
{
	uint64_t sb = sstride * ub;

	switch (ub) {
	case 1:
		for (uint64_t c = 0; c < n; c++)
			d[c] = s[c * sb];
		break;
	case 2:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + 2 * c, s + c * sb, 2);
		break;
	case 4:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + 4 * c, s + c * sb, 4);
		break;
	case 8:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + 8 * c, s + c * sb, 8);
		break;
	default:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + ub * c, s + c * sb, ub);
		break;
	}
}

#define TILE 64

/*
 * A transpose's output, computed from its input's temporary. Output order walks the input with a
 * large stride, one cache line per unit; when the input's innermost axis becomes the output's
 * second-to-last axis (every 2-d transpose, a batched swap of the last two axes), whole output
 * rows are instead filled in tiles of TILE rows x TILE columns, whose input lines stay in cache.
 */
static int read_transpose(struct exec *e, const struct xnode *x, uint64_t off, size_t len,
			  uint8_t *dst)
{
	const uint8_t *src = e->st[x->in[0]].temp;
	uint64_t end = off + len, idx[WD_MAX_DIMS], row_units, rb, head;
	struct tgeo g;

	tgeo_init(x, &e->p->x[x->in[0]], &g);
	if (g.nd < 2 || g.step[g.nd - 2] != 1 || g.step[g.nd - 1] == 1) {
		transpose_span(&g, src, off, len, dst);
		return 0;
	}
	row_units = g.ous[g.nd - 1];
	rb = row_units * g.ub;
	head = min_u64((off + rb - 1) / rb * rb, end) - off;      /* up to the first row start */
	transpose_span(&g, src, off, (size_t)head, dst);
	off += head;
	dst += head;
	while (end - off >= rb) {
		uint64_t row = off / rb, i2 = row % g.ous[g.nd - 2];
		uint64_t t_n = min_u64(min_u64((end - off) / rb, g.ous[g.nd - 2] - i2), TILE);
		uint64_t base = tgeo_src(&g, row * row_units, idx);

		for (uint64_t c0 = 0; c0 < row_units; c0 += TILE) {
			uint64_t cw = min_u64(TILE, row_units - c0);
			for (uint64_t t = 0; t < t_n; t++)
				gather_units(dst + t * rb + c0 * g.ub,
					     src + (base + t + c0 * g.step[g.nd - 1]) * g.ub, cw,
					     g.step[g.nd - 1], g.ub);
		}
		off += t_n * rb;
		dst += t_n * rb;
	}
	transpose_span(&g, src, off, (size_t)(end - off), dst);
	return 0;
}

static int read_node(struct exec *e, uint32_t i, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *x = &e->p->x[i];

	if (!len)
		return 0;
	if (e->st[i].ready) {
		memcpy(dst, e->st[i].temp + off, len);
		return 0;
	}
	switch (x->op) {
	case X_LEAF:
		return pend(e, x, x->offset + off, len, dst);
	case X_SELECT:
		return read_select(e, x, off, len, dst);
	case X_CONCAT:
	case X_STACK:
		return read_join(e, x, off, len, dst);
	case X_VIEW:
		return read_node(e, x->in[0], off, len, dst);
	case X_TRANSPOSE:
		return read_transpose(e, x, off, len, dst);
	case X_CAST:
		return read_cast(e, i, off, len, dst);
	}
	return wd_error_set(e->err, WD_E_INTERNAL, "unknown plan operation");
}

/*
 * Working memory for a whole intermediate value. Large ones are mapped with MAP_POPULATE (and
 * transparent huge pages asked for): faulting fresh pages in one at a time costs more than the
 * copy that fills them.
 */
static void *temp_alloc(size_t n)
{
	void *p;

	if (n < (1u << 20))
		return malloc(n);
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, n, MADV_HUGEPAGE);
	return p;
}

static void temp_free(void *p, size_t n)
{
	if (!p)
		return;
	if (n < (1u << 20))
		free(p);
	else
		munmap(p, n);
}

static void exec_free(struct exec *e)
{
	if (!e->st)
		return;
	for (size_t i = 0; i < e->p->nx; i++) {
		temp_free(e->st[i].temp, e->st[i].temp_len);
		free(e->st[i].inbuf);
		free(e->st[i].win);
		free(e->st[i].mid);
	}
	free(e->st);
	e->st = NULL;
}

/* Windows for every reachable cast (the root's input and output use the scratch buffers). */
static int exec_alloc(struct exec *e)
{
	const struct wd_plan *p = e->p;

	e->st = calloc(p->nx, sizeof(*e->st));
	if (!e->st)
		return wd_error_set(e->err, WD_E_EXHAUSTED, "out of memory for the plan's state");
	for (size_t i = 0; i <= p->root; i++) {
		const struct xnode *x = &p->x[i], *y;
		struct xstate *s = &e->st[i];
		uint64_t ib, ob, mb, per;

		if (!x->reach || x->op != X_CAST)
			continue;
		y = &p->x[x->in[0]];
		ib = unit_bytes(y->dtype);
		ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
		mb = block_elems(y->dtype) > 1 && x->dtype != WD_F32 ? block_elems(y->dtype) * 4 : 0;
		per = ib > ob ? ib : ob;
		if (mb > per)
			per = mb;
		s->units = CAST_WINDOW / per ? CAST_WINDOW / per : 1;
		s->inbuf = malloc(s->units * ib);
		s->win = malloc(s->units * ob);
		if (mb)
			s->mid = malloc(s->units * mb);
		if (!s->inbuf || !s->win || (mb && !s->mid))
			return wd_error_set(e->err, WD_E_EXHAUSTED, "out of memory for a cast's buffers");
	}
	return 0;
}

static int check_files(struct exec *e)
{
	for (size_t i = 0; i < e->p->n_files; i++) {
		int r = wd_source_check(e->p->files[i].src, e->p->files[i].file, e->err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Whether the scratch buffers hold at least one input unit of the root cast and its output. */
static bool root_cast_fits(const struct wd_plan *p, const struct wd_scratch *sc)
{
	const struct xnode *x = &p->x[p->root], *y;

	if (x->op != X_CAST || !sc->buf2)
		return false;
	y = &p->x[x->in[0]];
	return sc->cap >= unit_bytes(y->dtype) &&
	       sc->cap2 >= (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
}

/*
 * The root cast: input chunks in scratch->buf, converted straight into the sink's next slot when
 * it pipelines its hashing (else into scratch->buf2), written.
 */
static int run_root_cast(struct exec *e, struct wd_sink *sink, struct wd_scratch *sc)
{
	const struct xnode *x = &e->p->x[e->p->root], *y = &e->p->x[x->in[0]];
	const struct xstate *s = &e->st[e->p->root];
	uint64_t ib = unit_bytes(y->dtype), ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
	uint64_t total = x->nbytes / ob, k = min_u64(sc->cap / ib, sc->cap2 / ob);
	int r;

	if (s->mid)
		k = min_u64(k, s->units);
	for (uint64_t u = 0; u < total;) {
		size_t cap = 0, n;
		uint8_t *out = wd_sink_buffer(sink, &cap);
		uint64_t kk = k;

		if (out && cap >= ob)
			kk = min_u64(k, cap / ob);
		else
			out = sc->buf2;
		n = (size_t)min_u64(kk, total - u);
		r = read_node(e, x->in[0], u * ib, n * ib, sc->buf);
		if (r == 0)
			r = flush(e);
		if (r == 0)
			r = convert_units(e, y->dtype, sc->buf, x->dtype, out, n, s->mid);
		if (r == 0)
			r = wd_sink_write(sink, out, n * ob, e->err);
		if (r < 0)
			return r;
		u += n;
	}
	return 0;
}

/* Any other root: produced chunk by chunk into the sink's next slot (or scratch->buf), written. */
static int run_root(struct exec *e, struct wd_sink *sink, struct wd_scratch *sc)
{
	const struct wd_plan *p = e->p;
	int r = 0;

	for (uint64_t off = 0; off < p->nbytes && r == 0;) {
		size_t cap = 0, n;
		uint8_t *out = wd_sink_buffer(sink, &cap);

		if (!out) {
			out = sc->buf;
			cap = sc->cap;
		}
		n = (size_t)min_u64(cap, p->nbytes - off);
		r = read_node(e, p->root, off, n, out);
		if (r == 0)
			r = flush(e);
		if (r == 0)
			r = wd_sink_write(sink, out, n, e->err);
		off += n;
	}
	return r;
}

int wd_plan_execute(const struct wd_plan *p, struct wd_sink *sink, struct wd_scratch *scratch,
		    uint64_t *ret_bytes_read, struct wd_error *err)
{
	struct exec e = { .p = p, .err = err };
	int r;

	if (!scratch || !scratch->buf || !scratch->cap)
		return wd_error_set(err, WD_E_INTERNAL, "materialization needs a scratch buffer");
	if (sink->size - sink->written != p->nbytes)
		return wd_error_set(err, WD_E_INTERNAL,
				    "the sink takes %" PRIu64 " bytes but the weight is %" PRIu64,
				    sink->size - sink->written, p->nbytes);
	r = check_files(&e);
	if (r < 0)
		goto out;
	r = exec_alloc(&e);
	if (r < 0)
		goto out;
	/* Temporaries in creation order: each one's inputs are ready before it. */
	for (size_t i = 0; i < p->root; i++) {
		const struct xnode *x = &p->x[i];
		if (!x->reach || !x->temp)
			continue;
		e.st[i].temp = temp_alloc(x->nbytes);
		e.st[i].temp_len = x->nbytes;
		if (!e.st[i].temp) {
			r = wd_error_set(err, WD_E_EXHAUSTED, "no memory for %" PRIu64
					 " bytes of working space", x->nbytes);
			goto out;
		}
		r = read_node(&e, (uint32_t)i, 0, x->nbytes, e.st[i].temp);
		if (r == 0)
			r = flush(&e);
		if (r < 0)
			goto out;
		e.st[i].ready = true;
	}
	if (root_cast_fits(p, scratch))
		r = run_root_cast(&e, sink, scratch);
	else
		r = run_root(&e, sink, scratch);
	if (r < 0)
		goto out;
	r = check_files(&e);
out:
	if (r < 0 && err)
		wd_error_prefix(err, "materializing %s", p->label);
	exec_free(&e);
	if (ret_bytes_read)
		*ret_bytes_read += e.bytes_read;
	return r;
}
