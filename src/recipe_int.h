/* SPDX-License-Identifier: Apache-2.0 */
/* recipe_int.h - private to the recipe engine: the normalised graph, the plan, shared helpers. */
#ifndef WD_RECIPE_INT_H
#define WD_RECIPE_INT_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "recipe.h"

/*
 * How it works.
 *
 * Preflight turns the recipe's node list into a normalised graph of "xnodes" (kept in the plan):
 * SOURCE becomes a LEAF (a whole stored tensor) plus a SELECT; SHARD becomes a RANGE; RESHAPE and
 * VIEW both become VIEW (a reinterpretation of the input's bytes) and chains of them collapse;
 * operations that change nothing (a cast to the same dtype, an identity permutation, a full
 * selection, a one-input concat) disappear; a one-input stack becomes a VIEW; and a selection over
 * a cast is moved below the cast (cast is element-wise, so the bytes are the same and only the
 * selected elements are read and converted). DEQUANT_BLOCK becomes DEQUANT (data, scale, block,
 * phase); a range or index selection over it moves below it onto both the data and the scale
 * rows that cover the selection (recipe_dequant.c), and a cast of an F32 DEQUANT folds into it. The identity key is a Merkle hash over this graph:
 * each xnode's digest is SHA-256 of a fixed, length-prefixed encoding of its operation, its
 * parameters and its inputs' digests, with a LEAF encoded as its source's identity and the tensor
 * name. Equal digests therefore mean equal operations over equal file bytes.
 *
 * Execution pulls bytes: read(node, off, len, dst) fills dst with bytes [off, off + len) of the
 * node's row-major output. Byte-preserving nodes (LEAF, SELECT, CONCAT, STACK, VIEW) only split
 * the range into pieces of their inputs, so a byte-preserving plan turns into preads of file
 * ranges straight into the destination; consecutive pieces that continue each other in the same
 * file are coalesced into one pread. A CAST (and a DEQUANT, whose scale is always a temporary)
 * reads its input sequentially through a small window and converts; at the root it converts
 * scratch->buf into scratch->buf2. A TRANSPOSE needs random
 * access to its input, which is evaluated once into a temporary buffer. Nodes whose output must be
 * read out of order or several times but cannot be (see classify) are evaluated into a temporary
 * buffer too; all temporaries together are bounded by max_temp_bytes. Because every node's output
 * is read either in full and in order, or from memory, the bytes execution reads are known at
 * preflight exactly (wd_plan_read_bytes).
 *
 * Where it lives: recipe_build.c builds and normalises the graph and its digests (node by node,
 * with every validation error); recipe_plan.c is preflight itself: it decides how each node is
 * read, accounts temporaries and file bytes, labels the plan and answers the wd_plan_* getters;
 * recipe_dequant.c holds the block-scale dequantization (validation, moving selections below it,
 * its kernel); recipe_exec.c executes a plan into a sink, or a byte range of it.
 */

enum xop { X_LEAF = 1, X_SELECT, X_CONCAT, X_STACK, X_VIEW, X_TRANSPOSE, X_CAST, X_DEQUANT };

/* How a node's output can be read: FILE = random access, every byte read from one file byte;
 * MEM = random access, from temporaries only; MIXED = random access, both; SEQ = in order only
 * (it holds a streamed cast). */
enum xcls { C_FILE, C_MEM, C_MIXED, C_SEQ };

#define CAST_WINDOW (256u << 10)
/* All cast windows of one execution together: a plan with many casts (a stack over hundreds of
 * dequantized experts) gets smaller windows, down to CAST_WINDOW_MIN each. */
#define CAST_WINDOWS_TOTAL (64u << 20)
#define CAST_WINDOW_MIN (16u << 10)
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
	/* DEQUANT: in[0] data, in[1] scale (F32, the block grid); output element i uses scale
	 * (i + phase) / block on every axis. phase is where element 0 sits in its first block, set
	 * when a range selection moves below the dequantization. */
	uint64_t block[WD_MAX_DIMS], phase[WD_MAX_DIMS];
	/* analysis */
	bool reach, temp;
	bool scale_temp;              /* a temporary only as a dequantization's scale */
	uint32_t uses;
	enum xcls cls;
	uint64_t cost;                /* file bytes read to produce the whole output once */
	uint32_t slot;                /* execution state index (casts, temporaries) or UINT32_MAX */
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
	uint64_t temp_read;           /* file bytes the temporaries read */
	size_t n_casts;               /* reachable casts and dequantizations */
	size_t n_slots;               /* nodes with execution state (xnode.slot) */
	struct xnode *x;
	size_t nx, capx;
	uint32_t root;
	const struct wd_source **srcs;
	size_t n_srcs;
	struct pfile *files;
	size_t n_files;
	bool one_block;               /* x, files, srcs and the tensor name live in p's allocation
				       * (wd_recipe_preflight_tensor) */
	char **owned;                 /* tensor names and index arrays the xnodes point into */
	size_t n_owned, cap_owned;
	char *label;                  /* at most LABEL_MAX bytes, in p's allocation */
};

/* ---- small helpers --------------------------------------------------------------------------- */

static inline const char *op_name(enum wd_op op)
{
	static const char *const op_names[] = {
		[WD_OP_SOURCE] = "source", [WD_OP_SELECT] = "select", [WD_OP_CONCAT] = "concat",
		[WD_OP_STACK] = "stack", [WD_OP_RESHAPE] = "reshape", [WD_OP_TRANSPOSE] = "transpose",
		[WD_OP_CAST] = "cast", [WD_OP_VIEW] = "view",
		[WD_OP_DEQUANT_BLOCK] = "dequant_block",
	};

	return (unsigned)op <= WD_OP_LAST ? op_names[op] : "unknown";
}

static inline int64_t i64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint32_t block_elems(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return i ? i->block_elems : 1;
}

static inline uint32_t unit_bytes(enum wd_dtype t)
{
	const struct wd_dtype_info *i = wd_dtype_info(t);
	return i ? i->block_bytes : 1;
}

/* Shape in storage units: the innermost dimension counts blocks for block types. */
static inline void unit_shape(const struct xnode *x, uint64_t *us)
{
	memcpy(us, x->shape, sizeof(uint64_t) * (size_t)x->ndim);
	if (x->ndim)
		us[x->ndim - 1] /= block_elems(x->dtype);
}

/* Bytes of one index step on axis k: product of the unit shape after k times the unit size. */
static inline uint64_t inner_bytes(const struct xnode *x, int k)
{
	uint64_t us[WD_MAX_DIMS], n = unit_bytes(x->dtype);

	unit_shape(x, us);
	for (int d = k + 1; d < x->ndim; d++)
		n *= us[d];
	return n;
}

static inline bool same_shape(int na, const uint64_t *a, int nb, const uint64_t *b)
{
	return na == nb && memcmp(a, b, sizeof(uint64_t) * (size_t)na) == 0;
}

/* "[2, 3]" into out. */
static inline void shape_str(const uint64_t *shape, int ndim, char *out, size_t cap)
{
	size_t off = 0;

	off += (size_t)snprintf(out, cap, "[");
	for (int i = 0; i < ndim && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%" PRIu64, i ? ", " : "", shape[i]);
	if (off < cap)
		snprintf(out + off, cap - off, "]");
}

/* ---- building the graph (recipe_build.c) ----------------------------------------------------- */

struct build {
	const struct wd_recipe *r;
	const struct wd_resolver *res;
	struct wd_recipe_limits lim;
	struct wd_plan *p;
	uint32_t *map;                /* recipe node -> xnode of its output */
	uint32_t *depth;
	char (*seltxt)[96];           /* per recipe node: its selection, for the label */
	uint64_t n_indices;
	size_t cap_srcs;              /* capacity of p->srcs */
	size_t max_x;                 /* graph size up to which selections move below casts */
	weightd_error *err;
};

/* Fill err for recipe node `node`: "node N (op): <sentence>", with the structured fields. */
__attribute__((format(printf, 7, 0)))
int wd_recipe_vnerr(struct build *b, uint32_t node, int code, int32_t axis, int64_t expected,
		    int64_t actual, const char *fmt, va_list ap);

/* wd_recipe_vnerr with the sentence's arguments; returns -code. */
__attribute__((format(printf, 7, 8)))
static inline int nerr(struct build *b, uint32_t node, int code, int32_t axis, int64_t expected,
		       int64_t actual, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = wd_recipe_vnerr(b, node, code, axis, expected, actual, fmt, ap);
	va_end(ap);
	return r;
}

/* Check recipe node i's inputs and add its normalised xnodes; b->map[i] names its output. */
int wd_recipe_build_node(struct build *b, uint32_t i);

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

/* Source node i, checked (its checkpoint resolved, its tensor found, its bytes matching its
 * shape): *ret is its LEAF xnode, all but the tensor name (which the caller copies) and the
 * digest. */
int wd_recipe_leaf(struct build *b, uint32_t i, const struct wd_rnode *rn, struct xnode *ret);
/* The digest of a LEAF of `tensor` in `src` (its xnode digest, and the key of a recipe that takes
 * the whole tensor as it is); 0 or -WEIGHTD_E_RESOURCE_EXHAUSTED. */
int wd_recipe_leaf_digest(const struct wd_source *src, const char *tensor,
			  uint8_t out[WD_DIGEST_LEN]);

/* Graph building blocks shared with recipe_dequant.c (recipe_build.c). */
int wd_recipe_finish_shape(struct build *b, uint32_t node, enum wd_dtype t, int ndim,
			   const uint64_t *shape, uint64_t *ret_bytes);
int wd_recipe_xadd(struct build *b, const struct xnode *proto, const uint32_t *in, size_t n_in,
		   uint32_t *ret);
int wd_recipe_make_select(struct build *b, uint32_t node, uint32_t in, const struct nsel *s,
			  uint32_t *ret);
/* Copy s->idx into the plan and hash it (INDICES only). */
int wd_recipe_own_indices(struct build *b, uint32_t node, struct nsel *s);

/* ---- block-scale dequantization (recipe_dequant.c) ------------------------------------------- */

/* Validate DEQUANT_BLOCK node i (inputs checked) and add its xnode. */
int wd_recipe_build_dequant(struct build *b, uint32_t i, const struct wd_rnode *rn);
/* Whether selection s of dequant xnode `in` can move below it (RANGE and INDICES can). */
bool wd_recipe_dequant_can_select(const struct nsel *s);
/* select(dequant(x, scale)) as dequant(select(x), select'(scale)), phase and block adjusted. */
int wd_recipe_select_dequant(struct build *b, uint32_t node, uint32_t in, const struct nsel *s,
			     uint32_t *ret);
/* cast(dequant(.., F32), to) as dequant(.., to): one rounding instead of two, same bytes. */
bool wd_recipe_dequant_folds(const struct xnode *x, enum wd_dtype to);
/*
 * Execution: output elements [e0, e0 + n) of dequant xnode x, from its data elements `in`
 * (n of dtype `from`) and its scale's F32 values `scale` (the whole grid), through the F32 buffer `mid`
 * (n floats) into `out` (n elements of x->dtype). The scale's shape is taken from `sx`.
 */
void wd_recipe_dequant_run(const struct xnode *x, enum wd_dtype from, const struct xnode *sx,
			   const float *scale, uint64_t e0, size_t n, const void *in, float *mid,
			   void *out);

#endif
