/* SPDX-License-Identifier: Apache-2.0 */
/* recipe_dequant.c - block-scale dequantization in recipes: validation, moving selections below
 * it, and the F32 kernel that applies one scale per block. */
#include "recipe_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

static bool data_dtype_ok(enum wd_dtype t)
{
	return t == WD_F8_E4M3 || t == WD_F8_E5M2 || t == WD_BF16 || t == WD_F16 || t == WD_F32;
}

static bool out_dtype_ok(enum wd_dtype t)
{
	return t == WD_F32 || t == WD_BF16 || t == WD_F16;
}

/* ceil(a / b) for b >= 1, without overflow. */
static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

int wd_recipe_build_dequant(struct build *b, uint32_t i, const struct wd_rnode *rn)
{
	uint32_t din = b->map[rn->inputs[0]], sin = b->map[rn->inputs[1]];
	const struct xnode *x = &b->p->x[din], *s = &b->p->x[sin];
	uint64_t grid[WD_MAX_DIMS] = { 0 };
	char ds[160], bs[160], gs[160], ss[160];
	uint32_t ins[2] = { din, sin };
	struct xnode n;
	int r;

	if (!wd_dtype_info(rn->dtype))
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, 0, (int64_t)rn->dtype,
			    "dequant_block needs a target dtype (F32, BF16 or F16)");
	if (!out_dtype_ok(rn->dtype))
		return nerr(b, i, WEIGHTD_E_UNSUPPORTED_CAST, -1, WD_F32, rn->dtype,
			    "dequant_block gives F32, BF16 or F16, not %s", wd_dtype_name(rn->dtype));
	if (!data_dtype_ok(x->dtype))
		return nerr(b, i, WEIGHTD_E_UNSUPPORTED_CAST, -1, x->dtype, rn->dtype,
			    "dequant_block takes F8_E4M3, F8_E5M2, BF16, F16 or F32 data, but its "
			    "data (input 0, node %" PRIu32 ") is %s", rn->inputs[0],
			    wd_dtype_name(x->dtype));
	if (s->dtype != WD_F32)
		return nerr(b, i, WEIGHTD_E_DTYPE_MISMATCH, -1, WD_F32, s->dtype,
			    "the scale (input 1, node %" PRIu32 ") is %s but must be F32",
			    rn->inputs[1], wd_dtype_name(s->dtype));
	if (rn->n_block < 0 || rn->n_block > WD_MAX_DIMS || rn->n_block != x->ndim)
		return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, -1, x->ndim, rn->n_block,
			    "the block shape has %d entr%s but the data (node %" PRIu32 ") has %d "
			    "dimension%s", rn->n_block, rn->n_block == 1 ? "y" : "ies", rn->inputs[0],
			    x->ndim, x->ndim == 1 ? "" : "s");
	for (int d = 0; d < x->ndim; d++) {
		if (rn->block[d] == 0)
			return nerr(b, i, WEIGHTD_E_INVALID_ARGUMENT, d, 1, 0,
				    "the block size on axis %d is 0 (at least 1)", d);
		grid[d] = ceil_div(x->shape[d], rn->block[d]);
	}
	if (s->ndim != x->ndim || memcmp(s->shape, grid, sizeof(uint64_t) * (size_t)x->ndim)) {
		int ax = -1;

		for (int d = 0; d < x->ndim && d < s->ndim && ax < 0; d++)
			if (s->shape[d] != grid[d])
				ax = d;
		shape_str(x->shape, x->ndim, ds, sizeof(ds));
		shape_str(rn->block, rn->n_block, bs, sizeof(bs));
		shape_str(grid, x->ndim, gs, sizeof(gs));
		shape_str(s->shape, s->ndim, ss, sizeof(ss));
		return nerr(b, i, WEIGHTD_E_SCALE_MISMATCH, ax,
			    ax >= 0 ? i64(grid[ax]) : x->ndim, ax >= 0 ? i64(s->shape[ax]) : s->ndim,
			    "the scale (input 1, node %" PRIu32 ") has shape %s, but data of shape %s "
			    "in blocks of %s needs one scale per block, shape %s (edge blocks may be "
			    "partial)", rn->inputs[1], ss, ds, bs, gs);
	}
	memset(&n, 0, sizeof(n));
	n.op = X_DEQUANT;
	n.orig = i;
	n.dtype = rn->dtype;
	n.ndim = x->ndim;
	memcpy(n.shape, x->shape, sizeof(n.shape));
	memcpy(n.block, rn->block, sizeof(uint64_t) * (size_t)x->ndim);
	r = wd_recipe_finish_shape(b, i, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return wd_recipe_xadd(b, &n, ins, 2, &b->map[i]);
}

bool wd_recipe_dequant_can_select(const struct nsel *s)
{
	return s->kind == WD_SEL_RANGE || s->kind == WD_SEL_INDICES;
}

bool wd_recipe_dequant_folds(const struct xnode *x, enum wd_dtype to)
{
	return x->op == X_DEQUANT && x->dtype == WD_F32 && out_dtype_ok(to);
}

/*
 * A range [a, b) on axis k selects the same range of the data and the scale rows that cover it,
 * (a + phase) / block .. ceil((b + phase) / block); the new phase is (a + phase) % block. An
 * index list selects the same rows of the data and, for each, the scale row that covers it; the
 * block on that axis becomes 1 (each output row has its own scale row).
 */
int wd_recipe_select_dequant(struct build *b, uint32_t node, uint32_t in, const struct nsel *s,
			     uint32_t *ret)
{
	struct xnode n = b->p->x[in];
	uint32_t data = n.in[0], scale = n.in[1], ins[2];
	const struct xnode *sx = &b->p->x[scale];
	uint32_t k = s->axis;
	uint64_t bk = n.block[k], ph = n.phase[k], *idx = NULL;
	struct nsel ss;
	int r;

	memset(&ss, 0, sizeof(ss));
	ss.axis = k;
	ss.ndim = sx->ndim;
	memcpy(ss.shape, sx->shape, sizeof(ss.shape));
	if (s->kind == WD_SEL_RANGE) {
		ss.kind = WD_SEL_RANGE;
		ss.start = (s->start + ph) / bk;
		ss.end = (s->end - 1 + ph) / bk + 1;
		ss.shape[k] = ss.end - ss.start;
		if (ss.start == 0 && ss.end == sx->shape[k])
			ss.kind = WD_SEL_FULL;
		n.phase[k] = (s->start + ph) % bk;
	} else {
		idx = malloc((s->n_idx ? s->n_idx : 1) * sizeof(*idx));
		if (!idx)
			return nerr(b, node, WEIGHTD_E_RESOURCE_EXHAUSTED, -1, 0, 0, "out of memory");
		for (size_t j = 0; j < s->n_idx; j++)
			idx[j] = (s->idx[j] + ph) / bk;
		ss.kind = WD_SEL_INDICES;
		ss.idx = idx;
		ss.n_idx = s->n_idx;
		ss.shape[k] = s->n_idx;
		r = wd_recipe_own_indices(b, node, &ss);
		free(idx);
		if (r < 0)
			return r;
		n.block[k] = 1;
		n.phase[k] = 0;
	}
	r = wd_recipe_make_select(b, node, data, s, &ins[0]);
	if (r < 0)
		return r;
	r = wd_recipe_make_select(b, node, scale, &ss, &ins[1]);
	if (r < 0)
		return r;
	n.orig = node;
	memcpy(n.shape, s->shape, sizeof(n.shape));
	r = wd_recipe_finish_shape(b, node, n.dtype, n.ndim, n.shape, &n.nbytes);
	if (r < 0)
		return r;
	return wd_recipe_xadd(b, &n, ins, 2, ret);
}

/* FP8 decodes through a table of its 256 codes, made once by the cast kernels (so the values are
 * theirs, bit for bit): a load per element instead of the bit manipulation of a generic decode. */
static float lut_e4m3[256], lut_e5m2[256];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void)
{
	uint8_t codes[256];

	for (int i = 0; i < 256; i++)
		codes[i] = (uint8_t)i;
	wd_convert(WD_F8_E4M3, codes, WD_F32, lut_e4m3, 256);
	wd_convert(WD_F8_E5M2, codes, WD_F32, lut_e5m2, 256);
}

/*
 * Decode, scale, round. The output's elements [e0, e0 + n) are walked row by row (a row: the
 * innermost axis); each row finds its scale row once, then runs of up to one block share a scale.
 */
void wd_recipe_dequant_run(const struct xnode *x, enum wd_dtype from, const struct xnode *sx,
			   const float *scale, uint64_t e0, size_t n, const void *in, float *mid,
			   void *out)
{
	int nd = x->ndim;
	uint64_t last = nd ? x->shape[nd - 1] : 1;
	uint64_t bl = nd ? x->block[nd - 1] : 1, pl = nd ? x->phase[nd - 1] : 0;
	uint64_t sstride[WD_MAX_DIMS];
	const float *lut = NULL;
	const uint8_t *codes = in;
	size_t done = 0;

	if (from == WD_F8_E4M3 || from == WD_F8_E5M2) {
		pthread_once(&lut_once, lut_init);
		lut = from == WD_F8_E4M3 ? lut_e4m3 : lut_e5m2;
	} else {
		wd_convert(from, in, WD_F32, mid, n);    /* exact: every input type widens to F32 */
	}
	if (nd)
		sstride[nd - 1] = 1;
	for (int d = nd - 1; d > 0; d--)
		sstride[d - 1] = sstride[d] * sx->shape[d];
	while (done < n) {
		uint64_t e = e0 + done, row = e / last, col = e % last, soff = 0;
		size_t run = (size_t)min_u64(n - done, last - col);

		for (int d = nd - 2; d >= 0; d--) {
			uint64_t id = row % x->shape[d];
			row /= x->shape[d];
			soff += (id + x->phase[d]) / x->block[d] * sstride[d];
		}
		for (size_t j = 0; j < run;) {
			uint64_t c = col + j, blk = (c + pl) / bl;
			uint64_t stop = (blk + 1) * bl - pl;           /* first column of the next block */
			size_t m = (size_t)min_u64(run - j, stop - c);
			float sc = scale[soff + (nd ? blk : 0)];
			float *f = mid + done + j;

			if (lut) {
				const uint8_t *q = codes + done + j;
				for (size_t t = 0; t < m; t++)
					f[t] = lut[q[t]] * sc;
			} else {
				for (size_t t = 0; t < m; t++)
					f[t] = f[t] * sc;
			}
			j += m;
		}
		done += run;
	}
	if (x->dtype == WD_F32)
		memcpy(out, mid, n * sizeof(float));
	else
		wd_convert(WD_F32, mid, x->dtype, out, n);
}
