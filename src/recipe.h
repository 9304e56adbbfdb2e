/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.h - derived weights: a recipe's validation, shape inference, identity and execution. */
#ifndef WD_RECIPE_H
#define WD_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "dtype.h"
#include "error.h"
#include "wd_limits.h"
#include "sink.h"
#include "source.h"

enum wd_sel_kind {
	WD_SEL_FULL = 0,
	WD_SEL_RANGE = 1,
	WD_SEL_INDICES = 2,
	WD_SEL_ELEMENTS = 3,
	WD_SEL_SHARD = 4,
};

/*
 * Same numbers as weightd.Selection.Kind / weightd.Op.
 *
 * SHARD(axis, rank, world) is the range torch.tensor_split(x, world, axis)[rank] takes: with
 * dim = q * world + m (0 <= m < world), the first m ranks take q + 1 rows and the others q, in
 * rank order, so the ranks' outputs concatenated on `axis` are the whole tensor. A rank left with
 * no rows (world > dim) is a zero-sized output. With `even`, an axis that does not divide by
 * world is refused instead (WEIGHTD_E_SHAPE_MISMATCH), as vLLM and Megatron do. On the innermost axis of a block type (Q4_0, ...)
 * the rule splits whole blocks instead of elements.
 *
 * Block types keep their packed bytes: selections on outer axes are free; on the innermost axis a
 * RANGE must start and end on block boundaries, INDICES are refused, ELEMENTS must start and end
 * on block boundaries with an innermost output dimension of whole blocks. Those errors are
 * WEIGHTD_E_UNSUPPORTED naming the block size.
 */
struct wd_selection {
	enum wd_sel_kind kind;
	uint32_t axis;
	uint64_t start, end;       /* RANGE: [start,end) on axis; ELEMENTS: flat [start,end) */
	const uint64_t *indices;   /* INDICES (borrowed) */
	size_t n_indices;
	uint64_t shape[WD_MAX_DIMS]; /* ELEMENTS: output shape */
	int ndim;
	uint32_t rank, world;      /* SHARD */
	bool even;		   /* SHARD: refuse an axis that does not divide by world */
};

enum wd_op {
	WD_OP_SOURCE = 0,
	WD_OP_SELECT = 1,
	WD_OP_CONCAT = 2,
	WD_OP_STACK = 3,
	WD_OP_RESHAPE = 4,
	WD_OP_TRANSPOSE = 5,
	WD_OP_CAST = 6,
	WD_OP_VIEW = 7,
	WD_OP_DEQUANT_BLOCK = 8,
};

#define WD_OP_LAST WD_OP_DEQUANT_BLOCK

/*
 * One node. Strings and arrays are borrowed from whoever built the recipe (e.g. a decoded frame).
 * CONCAT/STACK axes may be negative and count from the end, as in PyTorch: concat takes
 * [-ndim, ndim), stack [-(ndim + 1), ndim + 1). RESHAPE keeps the element count, VIEW the byte
 * count. CAST from a block type dequantizes (wd_dequant_f32) and converts from F32; casts to block
 * types do not exist. TRANSPOSE of a block type must leave the innermost axis in place.
 *
 * DEQUANT_BLOCK takes inputs[0] = data (F8_E4M3, F8_E5M2, BF16, F16 or F32) and inputs[1] = scale
 * (F32) and gives `dtype` (F32, BF16 or F16) of the data's shape: element x[i] times
 * scale[i / block] on every axis (block[] has one entry per data axis, each >= 1; n_block is that
 * count), computed in F32 (the product of the exact F32 values of both, rounded once to F32 by
 * the FPU, as PyTorch computes x.float() * s) and then converted once to `dtype` by the cast
 * rules. The scale's shape must be the block grid: ceil(dim / block) on every axis, so edge
 * blocks may be partial. A mismatch is WEIGHTD_E_SCALE_MISMATCH naming the axis.
 */
struct wd_rnode {
	enum wd_op op;
	const char *checkpoint;     /* SOURCE */
	const char *tensor;         /* SOURCE */
	struct wd_selection sel;    /* SOURCE, SELECT */
	const uint32_t *inputs;     /* earlier node indices */
	size_t n_inputs;
	int32_t axis;               /* CONCAT, STACK */
	uint64_t shape[WD_MAX_DIMS];/* RESHAPE, VIEW */
	int ndim;
	uint32_t perm[WD_MAX_DIMS]; /* TRANSPOSE */
	int n_perm;
	enum wd_dtype dtype;        /* CAST, VIEW, DEQUANT_BLOCK */
	bool truncate; /* CAST: a float to integer or BOOL cast is asked for knowingly */
	uint64_t block[WD_MAX_DIMS];/* DEQUANT_BLOCK */
	int n_block;
};

/* A flat node list; inputs refer to earlier nodes only; the last node is the output. */
struct wd_recipe {
	const struct wd_rnode *nodes;
	size_t n_nodes;
};

struct wd_recipe_limits {
	uint32_t max_nodes;       /* nodes in one recipe */
	uint32_t max_depth;       /* longest input chain */
	uint64_t max_indices;     /* total indices over all INDICES selections */
	uint64_t max_output_bytes;/* one output weight */
	uint64_t max_temp_bytes;  /* intermediate memory execution may need (transpose, gathers) */
};

/* Their defaults, WD_RECIPE_LIMITS_DEFAULT, and WD_RECIPE_MAX_NODES are in wd_limits.h. */

/*
 * How a recipe names its sources. lookup returns 0 and the source (kept alive by the caller for
 * the plan's whole life) or a negative code: -WEIGHTD_E_UNKNOWN_SOURCE,
 * -WEIGHTD_E_PERMISSION_DENIED... with err set.
 */
struct wd_resolver {
	void *ctx;
	int (*lookup)(void *ctx, const char *checkpoint, const struct wd_source **ret_src,
		      weightd_error *err);
};

struct wd_plan;

/*
 * Preflight: validate every node, infer the output dtype/shape/bytes with overflow-checked
 * arithmetic, compute the identity key, and build an execution plan. Reads metadata only, never
 * payload. On failure returns -code with err naming the node (err->node = index + 1), the tensor
 * and checkpoint where they apply, and the rule broken (codes WEIGHTD_E_UNKNOWN_SOURCE ...
 * WEIGHTD_E_RECIPE_TOO_LARGE). The message starts "node N (op): " where N is the node's index in
 * the list (0-based, as inputs name nodes). An output may have no elements (a 0-byte weight), but a
 * selection that takes nothing from an axis that has rows (an empty range or index list, a shard
 * rank left with nothing) is WEIGHTD_E_ZERO_SIZED: it is almost always a mistake, such as a world
 * size above the row count. An input that is not an earlier node, or a wrong input count, is
 * WEIGHTD_E_INVALID_ARGUMENT; a selection outside its input is WEIGHTD_E_OUT_OF_RANGE. Nodes the
 * output does not depend on are validated but not read. Execution keeps some values in memory (a
 * transpose's input; the input of a selection that cannot be read piecewise from files) and
 * max_temp_bytes bounds their sum (WEIGHTD_E_RECIPE_TOO_LARGE naming the node that needs it). The
 * plan does not borrow from `r`: it copies what it needs.
 */
int wd_recipe_preflight(const struct wd_recipe *r, const struct wd_resolver *res,
			const struct wd_recipe_limits *lim, struct wd_plan **ret, weightd_error *err);

/*
 * wd_recipe_preflight of the recipe of one SOURCE node (checkpoint, tensor) with no selection:
 * the whole stored tensor as it is. The same plan, key, label and errors, made in a fraction of
 * the time (no general graph): the path of a unit's plain entries.
 */
int wd_recipe_preflight_tensor(const char *checkpoint, const char *tensor,
			       const struct wd_resolver *res, const struct wd_recipe_limits *lim,
			       struct wd_plan **ret, weightd_error *err);

void wd_plan_free(struct wd_plan *p);

enum wd_dtype wd_plan_dtype(const struct wd_plan *p);
int wd_plan_ndim(const struct wd_plan *p);
const uint64_t *wd_plan_shape(const struct wd_plan *p);
uint64_t wd_plan_nbytes(const struct wd_plan *p);
/* SHA-256 of the canonical encoding of the recipe with each source replaced by its identity
 * (wd_source_identity) and tensor name: equal keys = equal bytes. The recipe is normalised first
 * (shard -> range, negative axes resolved, no-op nodes and unused nodes dropped, reshape/view
 * chains collapsed, selections moved below casts and block-scale dequantizations, a cast of an
 * F32 dequantization folded into it), so e.g. shard(cast(x)) and cast(shard(x)) share one key,
 * and so do one file's tensors under two checkpoint names. */
const uint8_t *wd_plan_key(const struct wd_plan *p);
/* Bytes execution will read from checkpoints (for accounting and tests). */
uint64_t wd_plan_read_bytes(const struct wd_plan *p);
/* Whether the output is one byte range of one checkpoint file, as it is (a tensor, or a view
 * of one): its source, file index and offset there. Such plans over consecutive ranges of one
 * file may be filled with one wd_source_pread of them all (checked with wd_source_check before
 * and after, as wd_plan_execute does). */
bool wd_plan_file_range(const struct wd_plan *p, const struct wd_source **ret_src,
			uint32_t *ret_file, uint64_t *ret_offset);
/*
 * Where execution reads: one span per stored tensor it reads from (source, file, and the
 * smallest byte range of the file holding every byte it reads of that tensor: half a tensor for
 * a shard on the first axis, the rows between the first and last index for a gather, the whole
 * tensor otherwise). A bound, not a promise to read every byte: a shard on an inner axis reads
 * part of each row. Lets a caller fetch a remote recipe's inputs together before executing it
 * (daemon/fill.c). 0 and *ret (malloc'd, *ret_n entries, in node order; NULL when there are
 * none), or -WEIGHTD_E_RESOURCE_EXHAUSTED.
 */
struct wd_plan_span {
	const struct wd_source *src;
	uint32_t file;
	uint64_t off, len;
};
int wd_plan_spans(const struct wd_plan *p, struct wd_plan_span **ret, size_t *ret_n);
/* Bytes of heap temporaries execution will allocate (transposes, gathers), at most
 * max_temp_bytes of its limits; 0 for plans that stream. */
uint64_t wd_plan_temp_bytes(const struct wd_plan *p);
/* Sources the plan reads (distinct), valid while the plan lives. */
size_t wd_plan_source_count(const struct wd_plan *p);
const struct wd_source *wd_plan_source(const struct wd_plan *p, size_t i);
/* A short human label, e.g. "model:layers.0.q[0:512,:]" or "cast(model:w, F16)". */
const char *wd_plan_label(const struct wd_plan *p);

/*
 * Execute: write the output into `sink` strictly in order. Reads with wd_source_pread (no mapping
 * of checkpoints), checks every source file with wd_source_check before and after reading, and
 * adds the checkpoint bytes read to *ret_bytes_read. Byte-preserving plans stream file ranges
 * through scratch->buf (or the sink's slots, when it pipelines its hashing: wd_sink_buffer) into
 * the sink with no whole-tensor intermediate copy. What it read is handed to wd_source_drop_cache
 * once written, in extents of consecutive reads. Thread-safe: the plan is only read, so one
 * plan may run on several threads at once (wd_plan_execute_range) and different plans
 * concurrently.
 */
int wd_plan_execute(const struct wd_plan *p, struct wd_sink *sink, struct wd_scratch *scratch,
		    uint64_t *ret_bytes_read, weightd_error *err);

/*
 * The same for output bytes [start, start + len) only, into a sink of len bytes: what one of
 * several workers filling one weight at once runs. Concurrent calls on one plan are safe (the
 * plan is only read; each call has its own state). Reads only what that range needs: the file
 * bytes it streams, and the intermediate values it reads, each computed whole when first needed
 * (for a stack of dequantized experts, the scales of the experts the range covers). Ranges split
 * anywhere give the same bytes; split on element boundaries of the casts they stream, they read
 * each streamed file byte once over all of them.
 */
int wd_plan_execute_range(const struct wd_plan *p, uint64_t start, uint64_t len,
			  struct wd_sink *sink, struct wd_scratch *scratch, uint64_t *ret_bytes_read,
			  weightd_error *err);
/* Whether ranges of the output can be produced independently at no real extra cost: the only
 * intermediate values kept whole are dequantization scales (each range computes the few it
 * needs; wd_plan_temp_read_bytes bounds what they read). */
bool wd_plan_splittable(const struct wd_plan *p);
/* Checkpoint bytes the plan's intermediate values read (included in wd_plan_read_bytes). */
uint64_t wd_plan_temp_read_bytes(const struct wd_plan *p);

#endif
