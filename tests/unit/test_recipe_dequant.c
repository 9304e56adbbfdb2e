/* SPDX-License-Identifier: Apache-2.0 */
/* test_recipe_dequant.c - dequant_block recipes against values computed here from the format
 * definitions (tests/common/float_ref.h): every input and output dtype, partial edge blocks,
 * selections that move below it (uneven shards off block boundaries, index lists), stacks over
 * many experts, folding a cast, every error class, and a recipe at the node limit. */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "../common/float_ref.h"
#include "../common/st_writer.h"
#include "rnodes.h"
#include "digest.h"
#include "recipe.h"
#include "sink.h"
#include "source.h"

/* ---- the checkpoint ------------------------------------------------------------------------- */

/*
 * dq.safetensors:
 *   w8 F8_E4M3 [37, 50], w5 F8_E5M2 [37, 50], wb BF16 [37, 50], wh F16 [37, 50]: every byte or
 *   16-bit pattern from a multiplicative sequence (NaNs, infinities and subnormals included)
 *   ws F32 [5, 4]: the scales of a [37, 50] tensor in [8, 16] blocks (edge blocks 5 x 2)
 *   x3 F8_E4M3 [3, 10, 12], xs F32 [2, 3, 3]: blocks [2, 4, 5]
 *   g.E, u.E F8_E4M3 [20, 24], gs.E, us.E F32 [3, 2] for E < NEXP: experts in [8, 16] blocks
 *   bad_s F32 [5, 5], bf_s BF16 [5, 4], wi I32 [37, 50]: for the errors
 */
#define R 37
#define C 50
#define BR 8
#define BC 16
#define GR 5
#define GC 4
#define NEXP 12
#define ER 20
#define EC 24

static uint8_t w8[R * C], w5[R * C], x3[3 * 10 * 12], gd[NEXP][ER * EC], ud[NEXP][ER * EC];
static uint16_t wb[R * C], wh[R * C];
static float ws[GR * GC], xs[2 * 3 * 3], gsc[NEXP][3 * 2], usc[NEXP][3 * 2], bad_s[25];
static uint16_t bf_s[GR * GC];
static int32_t wi[R * C];

static char dir[256];
static struct wd_source *src;

static float scale_value(uint32_t k, uint32_t seed)
{
	/* not powers of two, so the product is rounded */
	return (float)((k * 7 + seed * 3) % 11 + 1) * 0.0371f * (k % 3 == 2 ? -1.0f : 1.0f);
}

static int group_setup(void **state)
{
	struct stw_tensor t[8 + 4 * NEXP];
	char names[4 * NEXP][16], path[300];
	size_t n = 0;
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	weightd_error err;

	(void)state;
	for (uint32_t k = 0; k < R * C; k++) {
		w8[k] = (uint8_t)(k * 73 + 5);
		w5[k] = (uint8_t)(k * 151 + 3);
		wb[k] = (uint16_t)(k * 40503u + 7);
		wh[k] = (uint16_t)(k * 24593u + 11);
		wi[k] = (int32_t)k;
	}
	for (uint32_t k = 0; k < GR * GC; k++) {
		ws[k] = scale_value(k, 0);
		bf_s[k] = 0x3f80;
	}
	for (uint32_t k = 0; k < 25; k++)
		bad_s[k] = 1.0f;
	for (uint32_t k = 0; k < sizeof(x3); k++)
		x3[k] = (uint8_t)(k * 29 + 1);
	for (uint32_t k = 0; k < 18; k++)
		xs[k] = scale_value(k, 5);
	for (uint32_t e = 0; e < NEXP; e++) {
		for (uint32_t k = 0; k < ER * EC; k++) {
			gd[e][k] = (uint8_t)(k * 37 + e * 11 + 1);
			ud[e][k] = (uint8_t)(k * 53 + e * 17 + 2);
		}
		for (uint32_t k = 0; k < 6; k++) {
			gsc[e][k] = scale_value(k, 2 * e + 1);
			usc[e][k] = scale_value(k, 2 * e + 2);
		}
	}
#define T(nm, dt, arr, ...) t[n++] = (struct stw_tensor){ .name = nm, .dtype = dt, \
	.ndim = (int)(sizeof((uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t)), \
	.shape = { __VA_ARGS__ }, .data = arr, .nbytes = sizeof(arr) }
	T("w8", "F8_E4M3", w8, R, C);
	T("w5", "F8_E5M2", w5, R, C);
	T("wb", "BF16", wb, R, C);
	T("wh", "F16", wh, R, C);
	T("ws", "F32", ws, GR, GC);
	T("x3", "F8_E4M3", x3, 3, 10, 12);
	T("xs", "F32", xs, 2, 3, 3);
	T("bad_s", "F32", bad_s, 5, 5);
	for (uint32_t e = 0; e < NEXP; e++) {
		snprintf(names[4 * e], 16, "g.%u", e);
		snprintf(names[4 * e + 1], 16, "u.%u", e);
		snprintf(names[4 * e + 2], 16, "gs.%u", e);
		snprintf(names[4 * e + 3], 16, "us.%u", e);
		T(names[4 * e], "F8_E4M3", gd[e], ER, EC);
		T(names[4 * e + 1], "F8_E4M3", ud[e], ER, EC);
		T(names[4 * e + 2], "F32", gsc[e], 3, 2);
		T(names[4 * e + 3], "F32", usc[e], 3, 2);
	}
#undef T
	{
		struct stw_tensor more[] = {
			{ .name = "bf_s", .dtype = "BF16", .ndim = 2, .shape = { GR, GC }, .data = bf_s,
			  .nbytes = sizeof(bf_s) },
			{ .name = "wi", .dtype = "I32", .ndim = 2, .shape = { R, C }, .data = wi,
			  .nbytes = sizeof(wi) },
		};
		struct stw_tensor all[sizeof(t) / sizeof(t[0]) + 2];

		memcpy(all, t, n * sizeof(t[0]));
		memcpy(all + n, more, sizeof(more));
		if (stw_tmpdir(dir, sizeof(dir)) < 0)
			return -1;
		snprintf(path, sizeof(path), "%s/dq.safetensors", dir);
		if (stw_write(path, all, n + 2, NULL, 0, NULL) < 0)
			return -1;
	}
	if (wd_source_open("dq", path, &lim, &src, &err) < 0) {
		print_message("open: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	wd_source_free(src);
	return stw_rmtree(dir);
}

static int lookup(void *ctx, const char *ck, const struct wd_source **ret, weightd_error *err)
{
	(void)ctx;
	if (strcmp(ck, "dq") == 0) {
		*ret = src;
		return 0;
	}
	return wd_error_set(err, WEIGHTD_E_UNKNOWN_SOURCE, "no checkpoint is called \"%s\"", ck);
}

static const struct wd_resolver resolver = { NULL, lookup };

/* ---- the reference -------------------------------------------------------------------------- */

/* Element k of a stored tensor as its exact F32 value. */
static float decode(enum wd_dtype t, const void *data, uint64_t k)
{
	switch (t) {
	case WD_F8_E4M3: return ref_e4m3(((const uint8_t *)data)[k]);
	case WD_F8_E5M2: return ref_e5m2(((const uint8_t *)data)[k]);
	case WD_BF16: return ref_bf16(((const uint16_t *)data)[k]);
	case WD_F16: return ref_f16(((const uint16_t *)data)[k]);
	default: fail_msg("no reference for dtype %d", (int)t);
	}
	return 0;
}

/* Element k of an output in dtype t; the expected value is x (already computed in F32):
 * bit-exact, except that a NaN only has to be a NaN of the same sign. */
static void check_elem(enum wd_dtype t, const uint8_t *out, uint64_t k, float x, const char *what)
{
	uint32_t got, want;
	bool nan_ok;

	switch (t) {
	case WD_F32:
		memcpy(&got, out + 4 * k, 4);
		want = ref_f32_bits(x);
		nan_ok = isnan(x) && (got & 0x7f800000) == 0x7f800000 && (got & 0x7fffff) &&
			 (got >> 31) == (want >> 31);
		break;
	case WD_BF16:
		got = (uint32_t)out[2 * k] | (uint32_t)out[2 * k + 1] << 8;
		want = ref_to_bf16(x);
		nan_ok = isnan(x) && (got & 0x7f80) == 0x7f80 && (got & 0x7f) && (got >> 15) == (want >> 15);
		break;
	case WD_F16:
		got = (uint32_t)out[2 * k] | (uint32_t)out[2 * k + 1] << 8;
		want = ref_to_f16(x);
		nan_ok = isnan(x) && (got & 0x7c00) == 0x7c00 && (got & 0x3ff) && (got >> 15) == (want >> 15);
		break;
	default:
		fail_msg("no output check for dtype %d", (int)t);
		return;
	}
	if (got != want && !nan_ok)
		fail_msg("%s: element %llu is 0x%x, expected 0x%x (%.9g)", what, (unsigned long long)k,
			 got, want, (double)x);
}

/* The dequantized value of element (i, j) of a [rows, cols] tensor in [br, bc] blocks. */
static float dq2(enum wd_dtype t, const void *data, const float *scale, uint64_t cols, uint64_t br,
		 uint64_t bc, uint64_t i, uint64_t j)
{
	uint64_t gc = (cols + bc - 1) / bc;

	return decode(t, data, i * cols + j) * scale[(i / br) * gc + j / bc];
}

/* ---- building and running recipes ----------------------------------------------------------- */

/* A source node of the test checkpoint "dq". */
static uint32_t r_src(struct rnodes *b, const char *tensor)
{
	return rnodes_source(b, "dq", tensor);
}

static uint32_t r_sel(struct rnodes *b, uint32_t in, struct wd_selection s)
{
	uint32_t i = rnodes_add(b, WD_OP_SELECT, &in, 1);

	b->n[i].sel = s;
	return i;
}

static uint32_t r_shard(struct rnodes *b, uint32_t in, uint32_t axis, uint32_t rank, uint32_t world)
{
	struct wd_selection s = { .kind = WD_SEL_SHARD, .axis = axis, .rank = rank, .world = world };

	return r_sel(b, in, s);
}

static uint32_t r_dq(struct rnodes *b, uint32_t data, uint32_t scale, enum wd_dtype to, int nb, ...)
{
	uint32_t in[2] = { data, scale }, i = rnodes_add(b, WD_OP_DEQUANT_BLOCK, in, 2);
	va_list ap;

	b->n[i].dtype = to;
	b->n[i].n_block = nb;
	va_start(ap, nb);
	for (int d = 0; d < nb; d++)
		b->n[i].block[d] = va_arg(ap, uint64_t);
	va_end(ap);
	return i;
}

static uint32_t r_join(struct rnodes *b, enum wd_op op, int32_t axis, const uint32_t *in, size_t n)
{
	uint32_t i = rnodes_add(b, op, in, n);

	b->n[i].axis = axis;
	return i;
}

static int preflight(const struct rnodes *b, struct wd_plan **ret, weightd_error *err)
{
	struct wd_recipe r = { b->n, b->len };

	return wd_recipe_preflight(&r, &resolver, NULL, ret, err);
}

static struct wd_plan *plan_ok(const struct rnodes *b)
{
	struct wd_plan *p = NULL;
	weightd_error err;
	int r = preflight(b, &p, &err);

	if (r < 0)
		fail_msg("preflight: %s", err.message);
	return p;
}

/* Execute into a memfd sink with a scratch of `scratch` bytes; the bytes (malloc'd) and the
 * checkpoint bytes read. */
static uint8_t *run(const struct wd_plan *p, size_t scratch, uint64_t *ret_read)
{
	struct wd_scratch sc;
	struct wd_sink sink;
	weightd_error err;
	uint64_t n = wd_plan_nbytes(p), got = 0;
	uint8_t digest[WD_DIGEST_LEN], *out = malloc(n);
	int fd = memfd_create("wd-test-dequant", MFD_CLOEXEC), r;

	assert_true(fd >= 0);
	assert_non_null(out);
	assert_int_equal(wd_scratch_init(&sc, scratch), 0);
	assert_int_equal(wd_sink_init(&sink, fd, n), 0);
	r = wd_plan_execute(p, &sink, &sc, &got, &err);
	if (r < 0)
		fail_msg("execute: %s", err.message);
	assert_int_equal(wd_sink_finish(&sink, digest, &err), 0);
	assert_int_equal(pread(fd, out, n, 0), (ssize_t)n);
	wd_scratch_free(&sc);
	close(fd);
	if (ret_read)
		*ret_read = got;
	return out;
}

static size_t dsize(enum wd_dtype t)
{
	return t == WD_F32 ? 4 : 2;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* Every input dtype to every output dtype, whole tensor, partial edge blocks on both axes; read
 * exactly the data and the scale once; several scratch sizes (odd ones split elements). */
static void whole_tensor_every_dtype(void **state)
{
	static const struct { const char *name; enum wd_dtype t; const void *data; } ins[] = {
		{ "w8", WD_F8_E4M3, w8 }, { "w5", WD_F8_E5M2, w5 }, { "wb", WD_BF16, wb },
		{ "wh", WD_F16, wh },
	};
	static const enum wd_dtype outs[] = { WD_BF16, WD_F16, WD_F32 };
	static const size_t scratch[] = { 4u << 20, 13, 100 };

	(void)state;
	for (size_t a = 0; a < 4; a++)
		for (size_t o = 0; o < 3; o++)
			for (size_t s = 0; s < 3; s++) {
				struct rnodes b;
				struct wd_plan *p;
				uint64_t rd;
				uint8_t *out;
				char what[64];

				rnodes_init(&b, 8, 8);
				r_dq(&b, r_src(&b, ins[a].name), r_src(&b, "ws"), outs[o], 2, BR, BC);
				p = plan_ok(&b);
				assert_int_equal(wd_plan_dtype(p), outs[o]);
				assert_int_equal(wd_plan_ndim(p), 2);
				assert_int_equal(wd_plan_shape(p)[0], R);
				assert_int_equal(wd_plan_shape(p)[1], C);
				assert_int_equal(wd_plan_nbytes(p), (uint64_t)R * C * dsize(outs[o]));
				assert_int_equal(wd_plan_read_bytes(p),
						 (uint64_t)R * C * (ins[a].t == WD_F8_E4M3 ||
								    ins[a].t == WD_F8_E5M2 ? 1 : 2) +
						 sizeof(ws));
				out = run(p, scratch[s], &rd);
				assert_int_equal(rd, wd_plan_read_bytes(p));
				snprintf(what, sizeof(what), "%s to %s", ins[a].name,
					 wd_dtype_name(outs[o]));
				for (uint64_t i = 0; i < R; i++)
					for (uint64_t j = 0; j < C; j++)
						check_elem(outs[o], out, i * C + j,
							   dq2(ins[a].t, ins[a].data, ws, C, BR, BC, i, j),
							   what);
				free(out);
				wd_plan_free(p);
				rnodes_free(&b);
			}
}

/* Three dimensions, blocks [2, 4, 5] of [3, 10, 12]: every axis has a partial edge block. */
static void three_dims_partial_blocks(void **state)
{
	struct rnodes b;
	struct wd_plan *p;
	uint8_t *out;

	(void)state;
	rnodes_init(&b, 8, 8);
	r_dq(&b, r_src(&b, "x3"), r_src(&b, "xs"), WD_BF16, 3, 2, 4, 5);
	p = plan_ok(&b);
	out = run(p, 4u << 20, NULL);
	for (uint64_t i = 0; i < 3; i++)
		for (uint64_t j = 0; j < 10; j++)
			for (uint64_t k = 0; k < 12; k++) {
				uint64_t e = (i * 10 + j) * 12 + k;
				float v = ref_e4m3(x3[e]) * xs[((i / 2) * 3 + j / 4) * 3 + k / 5];
				check_elem(WD_BF16, out, e, v, "x3");
			}
	free(out);
	wd_plan_free(p);
	rnodes_free(&b);
}

/*
 * Rank 3 of 8 on each axis: 37 rows split 5,5,5,5,5,4,4,4 (rank 3: rows 15..19, off the [8]
 * block boundary), 50 columns 7,7,6,6,6,6,6,6 (rank 3: 20..25). Only the selected data bytes
 * and the two scale rows by one scale column that cover them are read; the shards of all 8x8
 * ranks tile the whole dequantized tensor.
 */
static void shards_select_the_matching_scale_blocks(void **state)
{
	uint8_t *whole;
	struct rnodes b;
	struct wd_plan *p;
	uint64_t rd;

	(void)state;
	rnodes_init(&b, 8, 8);
	r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_BF16, 2, BR, BC);
	p = plan_ok(&b);
	whole = run(p, 4u << 20, NULL);
	wd_plan_free(p);
	rnodes_free(&b);
	for (uint32_t ri = 0; ri < 8; ri++)
		for (uint32_t rj = 0; rj < 8; rj++) {
			uint64_t r0 = ri * 4 + (ri < 5 ? ri : 5), nr = ri < 5 ? 5 : 4;
			uint64_t c0 = rj * 6 + (rj < 2 ? rj : 2), nc = rj < 2 ? 7 : 6;
			uint8_t *out;

			rnodes_init(&b, 8, 8);
			r_shard(&b, r_shard(&b, r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_BF16, 2,
						     BR, BC), 0, ri, 8), 1, rj, 8);
			p = plan_ok(&b);
			assert_int_equal(wd_plan_shape(p)[0], nr);
			assert_int_equal(wd_plan_shape(p)[1], nc);
			if (ri == 3 && rj == 3) {
				/* rows 15..19: scale rows 1..2; columns 20..25: scale column 1 */
				assert_int_equal(r0, 15);
				assert_int_equal(c0, 20);
				assert_int_equal(wd_plan_read_bytes(p), 5 * 6 + 2 * 1 * 4);
			}
			out = run(p, 64, &rd);
			assert_int_equal(rd, wd_plan_read_bytes(p));
			for (uint64_t i = 0; i < nr; i++) {
				for (uint64_t j = 0; j < nc; j++)
					check_elem(WD_BF16, out, i * nc + j,
						   dq2(WD_F8_E4M3, w8, ws, C, BR, BC, r0 + i, c0 + j),
						   "shard");
				assert_memory_equal(out + i * nc * 2, whole + ((r0 + i) * C + c0) * 2,
						    nc * 2);
			}
			free(out);
			wd_plan_free(p);
			rnodes_free(&b);
		}
	free(whole);
}

/* An index list (repeats, reversed, across blocks) and an element range over a dequantization. */
static void indices_and_elements(void **state)
{
	static const uint64_t idx[] = { 36, 0, 9, 9, 17, 8 };
	struct wd_selection si = { .kind = WD_SEL_INDICES, .axis = 0, .indices = idx, .n_indices = 6 };
	struct wd_selection sj = { .kind = WD_SEL_INDICES, .axis = 1, .indices = idx, .n_indices = 6 };
	struct wd_selection se = { .kind = WD_SEL_ELEMENTS, .start = 45, .end = 45 + 6 * 11,
				   .ndim = 2, .shape = { 6, 11 } };
	struct rnodes b;
	struct wd_plan *p;
	uint8_t *out;
	uint64_t rd;

	(void)state;
	rnodes_init(&b, 8, 8);
	r_sel(&b, r_sel(&b, r_dq(&b, r_src(&b, "wh"), r_src(&b, "ws"), WD_F32, 2, BR, BC), si), sj);
	p = plan_ok(&b);
	out = run(p, 4u << 20, &rd);
	assert_int_equal(rd, wd_plan_read_bytes(p));
	for (uint64_t i = 0; i < 6; i++)
		for (uint64_t j = 0; j < 6; j++)
			check_elem(WD_F32, out, i * 6 + j, dq2(WD_F16, wh, ws, C, BR, BC, idx[i], idx[j]),
				   "indices");
	free(out);
	wd_plan_free(p);
	rnodes_free(&b);

	rnodes_init(&b, 8, 8);
	r_sel(&b, r_dq(&b, r_src(&b, "w5"), r_src(&b, "ws"), WD_F16, 2, BR, BC), se);
	p = plan_ok(&b);
	out = run(p, 13, &rd);
	assert_int_equal(rd, wd_plan_read_bytes(p));
	for (uint64_t k = 0; k < 66; k++)
		check_elem(WD_F16, out, k, dq2(WD_F8_E5M2, w5, ws, C, BR, BC, (45 + k) / C, (45 + k) % C),
			   "elements");
	free(out);
	wd_plan_free(p);
	rnodes_free(&b);
}

static void key_of(struct rnodes *b, uint8_t key[WD_DIGEST_LEN])
{
	struct wd_plan *p = plan_ok(b);

	memcpy(key, wd_plan_key(p), WD_DIGEST_LEN);
	wd_plan_free(p);
	rnodes_free(b);
}

/* Equal outputs, one key: a block-aligned shard of the dequantization and the dequantization of
 * the shards; a cast of an F32 dequantization and the dequantization straight to the dtype. */
static void normalised_forms_share_a_key(void **state)
{
	struct wd_selection rows = { .kind = WD_SEL_RANGE, .axis = 0, .start = 8, .end = 24 };
	struct wd_selection srows = { .kind = WD_SEL_RANGE, .axis = 0, .start = 1, .end = 3 };
	uint8_t k1[WD_DIGEST_LEN], k2[WD_DIGEST_LEN], k3[WD_DIGEST_LEN];
	struct rnodes b;

	(void)state;
	rnodes_init(&b, 8, 8);
	r_sel(&b, r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_BF16, 2, BR, BC), rows);
	key_of(&b, k1);
	rnodes_init(&b, 8, 8);
	r_dq(&b, r_sel(&b, r_src(&b, "w8"), rows), r_sel(&b, r_src(&b, "ws"), srows), WD_BF16, 2, BR, BC);
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);
	/* off the block boundary it is a different weight */
	rows.start = 9;
	rnodes_init(&b, 8, 8);
	r_sel(&b, r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_BF16, 2, BR, BC), rows);
	key_of(&b, k3);
	assert_memory_not_equal(k1, k3, WD_DIGEST_LEN);

	rnodes_init(&b, 8, 8);
	{
		uint32_t d = r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_F32, 2, BR, BC);
		uint32_t c = rnodes_add(&b, WD_OP_CAST, &d, 1);
		b.n[c].dtype = WD_BF16;
	}
	key_of(&b, k1);
	rnodes_init(&b, 8, 8);
	r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_BF16, 2, BR, BC);
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);
}

/*
 * vLLM's fused w13 for tensor-parallel rank 3 of 8: stack over the experts of
 * concat(gate, up) on axis 0, each a dequantized rank-3 shard of its intermediate axis (20 rows:
 * 3,3,3,3,2,2,2,2: rank 3 takes rows 9..11, across the [8] block boundary).
 */
static void stack_of_fused_expert_shards(void **state)
{
	struct rnodes b;
	uint32_t experts[NEXP];
	struct wd_plan *p;
	uint8_t *out;
	uint64_t rd, per = 2 * 3 * EC;

	(void)state;
	rnodes_init(&b, 16 * NEXP, 32 * NEXP);
	for (uint32_t e = 0; e < NEXP; e++) {
		char *g = malloc(16), *u = malloc(16), *gs = malloc(16), *us = malloc(16);
		uint32_t parts[2];

		snprintf(g, 16, "g.%u", e), snprintf(u, 16, "u.%u", e);
		snprintf(gs, 16, "gs.%u", e), snprintf(us, 16, "us.%u", e);
		parts[0] = r_shard(&b, r_dq(&b, r_src(&b, g), r_src(&b, gs), WD_BF16, 2, BR, BC), 0, 3, 8);
		parts[1] = r_shard(&b, r_dq(&b, r_src(&b, u), r_src(&b, us), WD_BF16, 2, BR, BC), 0, 3, 8);
		experts[e] = r_join(&b, WD_OP_CONCAT, 0, parts, 2);
	}
	r_join(&b, WD_OP_STACK, 0, experts, NEXP);
	p = plan_ok(&b);
	assert_int_equal(wd_plan_ndim(p), 3);
	assert_int_equal(wd_plan_shape(p)[0], NEXP);
	assert_int_equal(wd_plan_shape(p)[1], 6);
	assert_int_equal(wd_plan_shape(p)[2], EC);
	/* rows 9..11 of each: 3 x 24 data bytes and scale rows 1 (both columns) per tensor */
	assert_int_equal(wd_plan_read_bytes(p), NEXP * 2 * (3 * EC + 2 * 4));
	out = run(p, 4u << 20, &rd);
	assert_int_equal(rd, wd_plan_read_bytes(p));
	for (uint64_t e = 0; e < NEXP; e++)
		for (uint64_t i = 0; i < 6; i++)
			for (uint64_t j = 0; j < EC; j++) {
				bool up = i >= 3;
				float v = dq2(WD_F8_E4M3, up ? ud[e] : gd[e], up ? usc[e] : gsc[e], EC, BR,
					      BC, 9 + i % 3, j);
				check_elem(WD_BF16, out, e * per + i * EC + j, v, "w13");
			}
	free(out);
	wd_plan_free(p);
	for (size_t i = 0; i < b.len; i++)
		if (b.n[i].op == WD_OP_SOURCE)
			free((char *)b.n[i].tensor);
	rnodes_free(&b);
}

/* ---- ranges on several threads ------------------------------------------------------------ */

struct range_job {
	const struct wd_plan *p;
	uint64_t off, len, read;
	uint8_t *dst;                 /* the whole output buffer */
	int rc;
	char msg[512];
};

/* One range into a sink of its own (a memfd of len bytes), then copied to dst + off. */
static void *range_thread(void *arg)
{
	struct range_job *j = arg;
	struct wd_scratch sc;
	struct wd_sink sink;
	weightd_error err;
	uint8_t digest[WD_DIGEST_LEN];
	int fd = memfd_create("wd-test-range", MFD_CLOEXEC);

	j->read = 0;
	j->rc = -1;
	snprintf(j->msg, sizeof(j->msg), "set-up failed");
	if (fd < 0 || wd_scratch_init(&sc, 1000) < 0)
		return NULL;
	if (wd_sink_init(&sink, fd, j->len) == 0) {
		j->rc = wd_plan_execute_range(j->p, j->off, j->len, &sink, &sc, &j->read, &err);
		if (j->rc == 0)
			j->rc = wd_sink_finish(&sink, digest, &err);
		else
			wd_sink_abort(&sink);
		if (j->rc < 0)
			snprintf(j->msg, sizeof(j->msg), "%s", err.message);
		else if (pread(fd, j->dst + j->off, j->len, 0) != (ssize_t)j->len)
			j->rc = -1, snprintf(j->msg, sizeof(j->msg), "short read back");
	}
	wd_scratch_free(&sc);
	close(fd);
	return NULL;
}

/* Run p as k ranges ending at ends[0..k) on k threads at once into out; the bytes read in all. */
static uint64_t run_ranges(const struct wd_plan *p, const uint64_t *ends, size_t k, uint8_t *out)
{
	struct range_job jobs[8];
	pthread_t th[8];
	uint64_t total = 0, prev = 0;

	assert_true(k <= 8);
	for (size_t i = 0; i < k; i++) {
		jobs[i] = (struct range_job){ .p = p, .off = prev, .len = ends[i] - prev, .dst = out };
		prev = ends[i];
	}
	for (size_t i = 0; i < k; i++)
		assert_int_equal(pthread_create(&th[i], NULL, range_thread, &jobs[i]), 0);
	for (size_t i = 0; i < k; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		if (jobs[i].rc < 0)
			fail_msg("range %zu of %zu: %s", i, k, jobs[i].msg);
		total += jobs[i].read;
	}
	return total;
}

/*
 * The fused experts of stack_of_fused_expert_shards made as 1, 3 and 7 ranges on as many threads
 * at once give the bytes of one execution. Split between experts, the ranges read exactly what
 * one execution reads (each computes only the scales of its own experts); split anywhere else
 * (inside an expert, inside a BF16 element) the bytes are the same and the extra reads are at
 * most the scales once per extra range. A plan with a transpose is not splittable; this one is.
 */
static void ranges_on_threads_make_the_same_bytes(void **state)
{
	static const size_t splits[] = { 1, 3, 7 };
	static char names[4 * NEXP][16];
	const uint64_t per = 2 * 3 * EC * 2;       /* one expert's bytes in the output */
	struct rnodes b;
	uint32_t experts[NEXP];
	struct wd_plan *p;
	uint8_t *whole, *out;
	uint64_t n;

	(void)state;
	rnodes_init(&b, 16 * NEXP, 32 * NEXP);
	for (uint32_t e = 0; e < NEXP; e++) {
		uint32_t parts[2];

		snprintf(names[4 * e], 16, "g.%u", e), snprintf(names[4 * e + 1], 16, "u.%u", e);
		snprintf(names[4 * e + 2], 16, "gs.%u", e), snprintf(names[4 * e + 3], 16, "us.%u", e);
		parts[0] = r_shard(&b, r_dq(&b, r_src(&b, names[4 * e]), r_src(&b, names[4 * e + 2]),
					    WD_BF16, 2, BR, BC), 0, 3, 8);
		parts[1] = r_shard(&b, r_dq(&b, r_src(&b, names[4 * e + 1]), r_src(&b, names[4 * e + 3]),
					    WD_BF16, 2, BR, BC), 0, 3, 8);
		experts[e] = r_join(&b, WD_OP_CONCAT, 0, parts, 2);
	}
	r_join(&b, WD_OP_STACK, 0, experts, NEXP);
	p = plan_ok(&b);
	assert_true(wd_plan_splittable(p));
	n = wd_plan_nbytes(p);
	assert_int_equal(n, NEXP * per);
	assert_int_equal(wd_plan_temp_read_bytes(p), NEXP * 2 * 2 * 4); /* two scale floats each */
	whole = run(p, 4u << 20, NULL);
	out = malloc(n);
	assert_non_null(out);
	for (size_t s = 0; s < 3; s++)
		for (int how = 0; how < 3; how++) {  /* between experts, on elements, anywhere */
			size_t k = splits[s];
			uint64_t ends[8], total;

			for (size_t i = 0; i < k; i++) {
				uint64_t end = n * (i + 1) / k;

				if (i + 1 < k)
					end = how == 0 ? end / per * per : how == 1 ? end / 2 * 2 : end | 1;
				ends[i] = end;
			}
			memset(out, 0xee, n);
			total = run_ranges(p, ends, k, out);
			assert_memory_equal(out, whole, n);
			if (how == 0)
				assert_int_equal(total, wd_plan_read_bytes(p));
			assert_true(total >= wd_plan_read_bytes(p));
			assert_true(total <= wd_plan_read_bytes(p) + (k - 1) * wd_plan_temp_read_bytes(p) +
					     (how == 2 ? k : 0));
		}
	free(out);
	free(whole);
	wd_plan_free(p);
	rnodes_free(&b);

	/* a transpose keeps its whole input: not splittable (ranges would each compute it) */
	rnodes_init(&b, 8, 8);
	{
		uint32_t q = r_dq(&b, r_src(&b, "w8"), r_src(&b, "ws"), WD_BF16, 2, BR, BC);
		uint32_t t = rnodes_add(&b, WD_OP_TRANSPOSE, &q, 1);

		b.n[t].n_perm = 2;
		b.n[t].perm[0] = 1;
		b.n[t].perm[1] = 0;
	}
	p = plan_ok(&b);
	assert_false(wd_plan_splittable(p));
	wd_plan_free(p);
	rnodes_free(&b);
}

/* Each error class names the dequant_block node and what is wrong with which input. */
static void errors_name_the_node(void **state)
{
	static const struct {
		const char *what, *data, *scale;
		enum wd_dtype to;
		int nb;
		uint64_t b0, b1;
		int code;
		const char *text;
	} cases[] = {
		{ "scale shape", "w8", "bad_s", WD_BF16, 2, BR, BC, WEIGHTD_E_SCALE_MISMATCH,
		  "node 2 (dequant_block): the scale (input 1, node 1) has shape [5, 5], but data "
		  "of shape [37, 50] in blocks of [8, 16] needs one scale per block, shape [5, 4]" },
		{ "scale for other blocks", "w8", "ws", WD_BF16, 2, 8, 8, WEIGHTD_E_SCALE_MISMATCH,
		  "shape [5, 7]" },
		{ "scale not F32", "w8", "bf_s", WD_BF16, 2, BR, BC, WEIGHTD_E_DTYPE_MISMATCH,
		  "node 2 (dequant_block): the scale (input 1, node 1) is BF16 but must be F32" },
		{ "integer data", "wi", "ws", WD_BF16, 2, BR, BC, WEIGHTD_E_UNSUPPORTED_CAST,
		  "node 2 (dequant_block): dequant_block takes F8_E4M3, F8_E5M2, BF16, F16 or F32 "
		  "data, but its data (input 0, node 0) is I32" },
		{ "FP8 output", "w8", "ws", WD_F8_E4M3, 2, BR, BC, WEIGHTD_E_UNSUPPORTED_CAST,
		  "gives F32, BF16 or F16, not F8_E4M3" },
		{ "no dtype", "w8", "ws", WD_DTYPE_INVALID, 2, BR, BC, WEIGHTD_E_INVALID_ARGUMENT,
		  "target dtype" },
		{ "block rank", "w8", "ws", WD_BF16, 1, 128, 0, WEIGHTD_E_INVALID_ARGUMENT,
		  "the block shape has 1 entry but the data (node 0) has 2 dimensions" },
		{ "zero block", "w8", "ws", WD_BF16, 2, 0, BC, WEIGHTD_E_INVALID_ARGUMENT,
		  "the block size on axis 0 is 0" },
	};

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct rnodes b;
		struct wd_plan *p = NULL;
		weightd_error err;
		uint32_t d, s, n;
		int r;

		rnodes_init(&b, 8, 8);
		d = r_src(&b, cases[c].data);
		s = r_src(&b, cases[c].scale);
		n = r_dq(&b, d, s, cases[c].to, cases[c].nb, cases[c].b0, cases[c].b1);
		r = preflight(&b, &p, &err);
		if (r != -cases[c].code || !strstr(err.message, cases[c].text))
			fail_msg("%s: got %d: %s", cases[c].what, r, err.message);
		assert_null(p);
		assert_int_equal(err.node, n + 1);
		rnodes_free(&b);
	}
	/* a wrong input count */
	{
		struct rnodes b;
		struct wd_plan *p = NULL;
		weightd_error err;
		uint32_t d;

		rnodes_init(&b, 8, 8);
		d = r_src(&b, "w8");
		rnodes_add(&b, WD_OP_DEQUANT_BLOCK, &d, 1);
		assert_int_equal(preflight(&b, &p, &err), -WEIGHTD_E_INVALID_ARGUMENT);
		assert_non_null(strstr(err.message, "node 1 (dequant_block): dequant_block takes two inputs"));
		rnodes_free(&b);
	}
}

/*
 * A recipe of exactly the node limit (65,536): a stack over 9,362 fused experts (7 nodes each,
 * reusing the 12 experts' tensors), plus one view to reach the limit. Quadratic work in any pass
 * (normalising, building, planning, executing) would not finish within the test's timeout; one
 * node more is refused before anything is built.
 */
static void node_limit_recipe_runs(void **state)
{
	const size_t per = 7, n_exp = (WD_RECIPE_MAX_NODES - 2) / per;
	static const char *g[NEXP], *u[NEXP], *gs[NEXP], *us[NEXP];
	static char names[4 * NEXP][16];
	struct rnodes b;
	uint32_t *experts = malloc(n_exp * sizeof(*experts)), top, v;
	struct wd_plan *p;
	weightd_error err;
	uint8_t *out;
	uint64_t rd, row = 2 * ER * EC * 2;

	(void)state;
	assert_non_null(experts);
	for (uint32_t e = 0; e < NEXP; e++) {
		snprintf(names[4 * e], 16, "g.%u", e), g[e] = names[4 * e];
		snprintf(names[4 * e + 1], 16, "u.%u", e), u[e] = names[4 * e + 1];
		snprintf(names[4 * e + 2], 16, "gs.%u", e), gs[e] = names[4 * e + 2];
		snprintf(names[4 * e + 3], 16, "us.%u", e), us[e] = names[4 * e + 3];
	}
	rnodes_init(&b, WD_RECIPE_MAX_NODES + 1, 4 * WD_RECIPE_MAX_NODES);
	for (size_t e = 0; e < n_exp; e++) {
		uint32_t parts[2];

		parts[0] = r_dq(&b, r_src(&b, g[e % NEXP]), r_src(&b, gs[e % NEXP]), WD_BF16, 2, BR, BC);
		parts[1] = r_dq(&b, r_src(&b, u[e % NEXP]), r_src(&b, us[e % NEXP]), WD_BF16, 2, BR, BC);
		experts[e] = r_join(&b, WD_OP_CONCAT, 0, parts, 2);
	}
	top = r_join(&b, WD_OP_STACK, 0, experts, n_exp);
	while (b.len < WD_RECIPE_MAX_NODES) {
		v = rnodes_add(&b, WD_OP_RESHAPE, &top, 1);
		b.n[v].ndim = 2;
		b.n[v].shape[0] = n_exp * 2 * ER;
		b.n[v].shape[1] = EC;
		top = v;
	}
	assert_int_equal(b.len, WD_RECIPE_MAX_NODES);
	p = plan_ok(&b);
	out = run(p, 4u << 20, &rd);
	assert_int_equal(rd, wd_plan_read_bytes(p));
	for (size_t e = 0; e < n_exp; e += 1009) /* a sample of experts, every element */
		for (uint64_t i = 0; i < 2 * ER; i++)
			for (uint64_t j = 0; j < EC; j++) {
				bool up = i >= ER;
				size_t x = e % NEXP;
				float val = dq2(WD_F8_E4M3, up ? ud[x] : gd[x], up ? usc[x] : gsc[x], EC, BR,
						BC, i % ER, j);
				check_elem(WD_BF16, out + e * row, i * EC + j, val, "limit");
			}
	free(out);
	wd_plan_free(p);

	/* one more node: refused, naming the limit and the first node past it */
	v = rnodes_add(&b, WD_OP_CAST, &top, 1);
	b.n[v].dtype = WD_F32;
	p = NULL;
	assert_int_equal(preflight(&b, &p, &err), -WEIGHTD_E_RECIPE_TOO_LARGE);
	assert_null(p);
	assert_int_equal(err.node, WD_RECIPE_MAX_NODES + 1);
	assert_non_null(strstr(err.message, "the recipe has 65537 nodes, more than the 65536 allowed"));
	rnodes_free(&b);
	free(experts);
}

TEST_MAIN(group_setup, group_teardown, cmocka_unit_test(whole_tensor_every_dtype),
	  cmocka_unit_test(three_dims_partial_blocks),
	  cmocka_unit_test(shards_select_the_matching_scale_blocks),
	  cmocka_unit_test(indices_and_elements), cmocka_unit_test(normalised_forms_share_a_key),
	  cmocka_unit_test(stack_of_fused_expert_shards),
	  cmocka_unit_test(ranges_on_threads_make_the_same_bytes),
	  cmocka_unit_test(errors_name_the_node), cmocka_unit_test(node_limit_recipe_runs))
