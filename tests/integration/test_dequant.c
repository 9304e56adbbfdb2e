/* SPDX-License-Identifier: Apache-2.0 */
/* test_dequant.c - a real weightd serving fused, dequantized, sharded MoE expert weights: two
 * processes bind vLLM-style w13 and w2 for tensor-parallel rank 3 of 8 from an FP8 checkpoint
 * with block scales (a sharded directory), every byte checked against values computed here from
 * the format definitions; the second process reads nothing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "float_ref.h"
#include "itest.h"
#include "st_writer.h"

/*
 * The checkpoint, DeepSeek-V3's layout in miniature: for each expert e < NE,
 *   experts.e.gate_proj.weight, experts.e.up_proj.weight   F8_E4M3 [I, H]
 *   experts.e.down_proj.weight                             F8_E4M3 [H, I]
 *   each with a .weight_scale_inv F32 holding one scale per block: [I, H] in [BI, BH] blocks,
 *   [H, I] in [BH, BI] blocks (I = 43 and H = 72 leave partial edge blocks on every axis).
 * Experts 0..3 are in one shard file, 4..7 in the other.
 *
 * Rank 3 of 8 of I = 43 (torch.tensor_split: 6,6,6,5,5,5,5,5) is rows 18..22, which start two
 * rows into a 4-row block and end in the next one.
 */
#define NE 8
#define I 43
#define H 72
#define BI 4
#define BH 32
#define GI 11 /* ceil(I / BI) */
#define GH 3  /* ceil(H / BH) */
#define RANK 3
#define WORLD 8
#define R0 18
#define RN 5

static struct harness HS;

static uint8_t fp8_byte(int e, int which, uint64_t k)
{
	return (uint8_t)(k * (which == 2 ? 97u : which ? 61u : 37u) + (uint64_t)e * 13u + (unsigned)which);
}

static float scale_of(int e, int which, uint64_t k)
{
	return (float)((k * 5 + (uint64_t)e * 3 + (uint64_t)which) % 13 + 1) * 0.00731f;
}

static int make_checkpoint(const char *dir)
{
	static const char *const kinds[] = { "gate_proj", "up_proj", "down_proj" };
	struct stw_tensor ts[2][4 * 3 * 2];
	char names[NE * 3 * 2][64], path[400], *index = NULL;
	uint8_t *data[NE * 3];
	float *scales[NE * 3];
	size_t n[2] = { 0, 0 }, cap = 1 << 16, len = 0;
	FILE *f;
	int r = -1;

	index = malloc(cap);
	if (!index)
		return -1;
	len += (size_t)snprintf(index + len, cap - len, "{\"metadata\":{},\"weight_map\":{");
	for (int e = 0; e < NE; e++)
		for (int w = 0; w < 3; w++) {
			int k = e * 3 + w, file = e < NE / 2 ? 0 : 1;
			uint64_t rows = w == 2 ? H : I, cols = w == 2 ? I : H;
			uint64_t grows = w == 2 ? GH : GI, gcols = w == 2 ? GI : GH;

			data[k] = malloc(rows * cols);
			scales[k] = malloc(grows * gcols * sizeof(float));
			if (!data[k] || !scales[k])
				return -1;
			for (uint64_t x = 0; x < rows * cols; x++)
				data[k][x] = fp8_byte(e, w, x);
			for (uint64_t x = 0; x < grows * gcols; x++)
				scales[k][x] = scale_of(e, w, x);
			snprintf(names[2 * k], 64, "experts.%d.%s.weight", e, kinds[w]);
			snprintf(names[2 * k + 1], 64, "experts.%d.%s.weight_scale_inv", e, kinds[w]);
			ts[file][n[file]++] = (struct stw_tensor){ .name = names[2 * k], .dtype = "F8_E4M3",
				.ndim = 2, .shape = { rows, cols }, .data = data[k], .nbytes = rows * cols };
			ts[file][n[file]++] = (struct stw_tensor){ .name = names[2 * k + 1], .dtype = "F32",
				.ndim = 2, .shape = { grows, gcols }, .data = scales[k],
				.nbytes = grows * gcols * sizeof(float) };
			len += (size_t)snprintf(index + len, cap - len,
						"%s\"%s\":\"model-%05d-of-00002.safetensors\","
						"\"%s\":\"model-%05d-of-00002.safetensors\"",
						k ? "," : "", names[2 * k], file + 1, names[2 * k + 1],
						file + 1);
		}
	len += (size_t)snprintf(index + len, cap - len, "}}");
	for (int file = 0; file < 2; file++) {
		snprintf(path, sizeof(path), "%s/model-%05d-of-00002.safetensors", dir, file + 1);
		if (stw_write(path, ts[file], n[file], NULL, 0, NULL) < 0)
			goto out;
	}
	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
	f = fopen(path, "w");
	if (!f || fwrite(index, 1, len, f) != len || fclose(f) != 0)
		goto out;
	r = 0;
out:
	for (int k = 0; k < NE * 3; k++) {
		free(data[k]);
		free(scales[k]);
	}
	free(index);
	return r;
}

static int setup(void **state)
{
	char sections[600], dir[400];

	(void)state;
	if (harness_init(&HS) < 0)
		return -1;
	harness_path(&HS, "ds", dir, sizeof(dir));
	if (mkdir(dir, 0700) < 0 || make_checkpoint(dir) < 0)
		return -1;
	snprintf(sections, sizeof(sections), "[checkpoint:ds]\npath = %s\n", dir);
	if (harness_write_config(&HS, NULL, sections) < 0 || harness_start(&HS) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_cleanup(&HS);
	return 0;
}

/* ---- the recipes ---------------------------------------------------------------------------- */

/* dequant_block(w, w.weight_scale_inv) to BF16, then the rank's shard on `axis`; its index. */
static int dq_shard(weightd_recipe *r, int e, const char *kind, const uint64_t *block, uint32_t axis)
{
	char w[64], s[80];
	weightd_selection *sel = NULL;
	weightd_error err;
	int d, sc, q, out;

	snprintf(w, sizeof(w), "experts.%d.%s.weight", e, kind);
	snprintf(s, sizeof(s), "experts.%d.%s.weight_scale_inv", e, kind);
	d = weightd_recipe_source(r, "ds", w, NULL, &err);
	sc = weightd_recipe_source(r, "ds", s, NULL, &err);
	q = weightd_recipe_dequant_block(r, d, sc, block, 2, "BF16", &err);
	if (q < 0 || weightd_selection_shard(axis, RANK, WORLD, &sel, &err) < 0)
		fail_msg("building: %s", err.message);
	out = weightd_recipe_select(r, q, sel, &err);
	weightd_selection_free(sel);
	if (out < 0)
		fail_msg("building: %s", err.message);
	return out;
}

/* w13 = stack over n experts of concat(gate, up) on axis 0, each a rank-3 shard of its rows:
 * [n, 2 * RN, H]; expert k is stored expert k % NE. Built with the C builder: 9 nodes per expert
 * and the stack. */
static weightd_recipe *w13_recipe_of(int n)
{
	static const uint64_t block[2] = { BI, BH };
	weightd_recipe *r = NULL;
	weightd_error err;
	int *experts = malloc((size_t)n * sizeof(*experts));

	assert_non_null(experts);
	if (weightd_recipe_new(&r, &err) < 0)
		fail_msg("%s", err.message);
	for (int e = 0; e < n; e++) {
		int parts[2] = { dq_shard(r, e % NE, "gate_proj", block, 0),
				 dq_shard(r, e % NE, "up_proj", block, 0) };

		experts[e] = weightd_recipe_concat(r, 0, parts, 2, &err);
		if (experts[e] < 0)
			fail_msg("%s", err.message);
	}
	if (weightd_recipe_stack(r, 0, experts, (size_t)n, &err) < 0)
		fail_msg("%s", err.message);
	free(experts);
	return r;
}

static weightd_recipe *w13_recipe(void)
{
	return w13_recipe_of(NE);
}

/* w2 = stack over experts of down, each a rank-3 shard of its columns: [NE, H, RN], as JSON
 * (malloc'd). */
static char *w2_json(void)
{
	size_t cap = 1 << 16, len = 0;
	char *json = malloc(cap);

	assert_non_null(json);
	len += (size_t)snprintf(json + len, cap - len, "{\"op\":\"stack\",\"axis\":0,\"inputs\":[");
	for (int e = 0; e < NE; e++)
		len += (size_t)snprintf(json + len, cap - len,
			"%s{\"op\":\"select\",\"select\":{\"shard\":[1,%d,%d]},\"input\":"
			"{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[%d,%d],"
			"\"input\":{\"op\":\"source\",\"checkpoint\":\"ds\","
			"\"tensor\":\"experts.%d.down_proj.weight\"},"
			"\"scale\":{\"op\":\"source\",\"checkpoint\":\"ds\","
			"\"tensor\":\"experts.%d.down_proj.weight_scale_inv\"}}}",
			e ? "," : "", RANK, WORLD, BH, BI, e, e);
	snprintf(json + len, cap - len, "]}");
	return json;
}

static weightd_recipe *w2_recipe(void)
{
	char *json = w2_json();
	weightd_recipe *r = NULL;
	weightd_error err;

	if (weightd_recipe_from_json(json, strlen(json), &r, &err) < 0)
		fail_msg("w2 JSON: %s", err.message);
	free(json);
	return r;
}

/* ---- the independent computation ------------------------------------------------------------ */

/* BF16 bits of dequantized element (i, j) of expert e's tensor `which` (0 gate, 1 up, 2 down). */
static uint16_t want_bf16(int e, int which, uint64_t i, uint64_t j)
{
	uint64_t cols = which == 2 ? I : H, bi = which == 2 ? BH : BI, bj = which == 2 ? BI : BH;
	uint64_t gcols = which == 2 ? GI : GH;
	float x = ref_e4m3(fp8_byte(e, which, i * cols + j)) * scale_of(e, which, (i / bi) * gcols + j / bj);

	return ref_to_bf16(x);
}

/* 0 if the bytes match, else a message about the first difference (NaN: any NaN of that sign). */
static int check_bf16(const uint8_t *p, uint64_t k, uint16_t want, const char *what, int e)
{
	uint16_t got = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
	bool nan = (want & 0x7f80) == 0x7f80 && (want & 0x7f);

	if (got == want || (nan && (got & 0x7f80) == 0x7f80 && (got & 0x7f) &&
			    (got & 0x8000) == (want & 0x8000)))
		return 0;
	fprintf(stderr, "%s expert %d element %llu: 0x%04x, expected 0x%04x\n", what, e,
		(unsigned long long)k, got, want);
	return -1;
}

/*
 * One engine process: declare w13 and w2 with their shapes, submit, validate, bind, check every
 * byte, and check how many checkpoint bytes this submit made the daemon read.
 */
static int engine(uint64_t want_read)
{
	static const uint64_t s13[3] = { NE, 2 * RN, H }, s2[3] = { NE, H, RN };
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_recipe *r13 = w13_recipe(), *r2 = w2_recipe();
	weightd_error err;
	void *w13 = NULL, *w2 = NULL;
	int bad = 0;

	if (weightd_connect(HS.sock, "engine", &c, &err) < 0 || weightd_unit_new(c, &u, &err) < 0 ||
	    weightd_unit_slot(u, "w13", "BF16", s13, 3, &w13, &err) < 0 ||
	    weightd_unit_slot(u, "w2", "BF16", s2, 3, &w2, &err) < 0 ||
	    weightd_unit_set_recipe(u, "w13", r13, &err) < 0 ||
	    weightd_unit_set_recipe(u, "w2", r2, &err) < 0 || weightd_unit_submit(u, &err) < 0 ||
	    weightd_unit_validate(u, &err) < 0) {
		fprintf(stderr, "engine: %s\n", err.message);
		return 1;
	}
	weightd_unit_bind(u);
	for (int e = 0; e < NE; e++)
		for (uint64_t i = 0; i < 2 * RN; i++)
			for (uint64_t j = 0; j < H && !bad; j++)
				bad |= check_bf16(w13, ((uint64_t)e * 2 * RN + i) * H + j,
						  want_bf16(e, i >= RN, R0 + i % RN, j), "w13", e);
	for (int e = 0; e < NE; e++)
		for (uint64_t i = 0; i < H; i++)
			for (uint64_t j = 0; j < RN && !bad; j++)
				bad |= check_bf16(w2, ((uint64_t)e * H + i) * RN + j,
						  want_bf16(e, 2, i, R0 + j), "w2", e);
	if (weightd_unit_bytes_read(u) != want_read) {
		fprintf(stderr, "engine: the daemon read %llu bytes, expected %llu\n",
			(unsigned long long)weightd_unit_bytes_read(u), (unsigned long long)want_read);
		bad = 1;
	}
	weightd_unit_free(u);
	weightd_recipe_free(r13);
	weightd_recipe_free(r2);
	weightd_close(c);
	return bad ? 1 : 0;
}

/*
 * The first engine makes both weights: the daemon reads exactly the rank's rows (or columns) of
 * every FP8 tensor and the scale blocks covering them (rows 18..22 lie in scale rows 4 and 5):
 * per expert 2 x (5 x 72 + 2 x 3 x 4) for w13 and 72 x 5 + 3 x 2 x 4 for w2. The second engine,
 * another process, gets the same segments and makes the daemon read nothing.
 */
static void two_engines_bind_fused_dequantized_shards(void **state)
{
	const uint64_t per13 = 2 * (RN * H + 2 * GH * 4), per2 = H * RN + GH * 2 * 4;
	weightd_status *st;
	pid_t pid;

	(void)state;
	for (int k = 0; k < 2; k++) {
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			_exit(engine(k == 0 ? NE * (per13 + per2) : 0));
		it_wait_child_ok(pid);
	}
	st = it_status_of(&HS);
	assert_int_equal(st->bytes_read, NE * (per13 + per2));
	assert_int_equal(st->materializations_failed, 0);
	weightd_status_free(st);
}

/* Preflight names the node and the rule when the scale does not match the blocks. */
static void preflight_names_the_scale_mismatch(void **state)
{
	static const char json[] =
		"{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[128,128],"
		"\"input\":{\"op\":\"source\",\"checkpoint\":\"ds\",\"tensor\":\"experts.0.gate_proj.weight\"},"
		"\"scale\":{\"op\":\"source\",\"checkpoint\":\"ds\","
		"\"tensor\":\"experts.0.gate_proj.weight_scale_inv\"}}";
	weightd_client *c = it_connect(&HS);
	weightd_unit *u = NULL;
	weightd_inflight *f = NULL;
	weightd_preflight *p = NULL;
	weightd_error err;
	int r;

	(void)state;
	assert_int_equal(weightd_unit_from_json(c, json, strlen(json), &u, &err), 0);
	r = weightd_unit_preflight(u, &f, &err);
	if (r == 0)
		r = weightd_preflight_finish(f, &p, &err);
	assert_int_equal(r, -WEIGHTD_E_SCALE_MISMATCH);
	assert_int_equal(err.node, 3);
	assert_non_null(strstr(err.message, "node 2 (dequant_block): the scale (input 1, node 1) has "
				       "shape [11, 3], but data of shape [43, 72] in blocks of "
				       "[128, 128] needs one scale per block, shape [1, 1]"));
	assert_non_null(strstr(err.message, "(node 2 is at $ in the recipe JSON)"));
	weightd_preflight_free(p);
	weightd_unit_free(u);
	weightd_close(c);
}

/* weightctl preflight FILE.json: the dtype, shape and bytes of w2; reads no payload. */
static void weightctl_preflights_the_fused_weight(void **state)
{
	char path[400], out[4096];
	char *json = w2_json();
	char *argv[] = { (char *)harness_weightctl(), "--socket", HS.sock, "preflight", path, NULL };
	weightd_status *st0 = it_status_of(&HS), *st1;
	FILE *f;

	(void)state;
	harness_path(&HS, "w2.json", path, sizeof(path));
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(json, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(harness_run(argv, out, sizeof(out), (uid_t)-1), 0);
	assert_non_null(strstr(out, "BF16"));
	assert_non_null(strstr(out, "[8, 72, 5]"));
	assert_non_null(strstr(out, "5760"));        /* 8 x 72 x 5 x 2 bytes */
	st1 = it_status_of(&HS);
	assert_int_equal(st1->bytes_read, st0->bytes_read);
	weightd_status_free(st0);
	weightd_status_free(st1);
	free(json);
}

/*
 * The largest recipe the daemon takes: w13 over 7,281 experts is 65,530 nodes (the limit is
 * 65,536), about 3 MB on the wire. The daemon preflights and makes it; every byte is checked.
 */
static void node_limit_recipe_through_the_daemon(void **state)
{
	const int n = (65536 - 1) / 9;
	const uint64_t shape[3] = { (uint64_t)n, 2 * RN, H };
	weightd_client *c = it_connect(&HS);
	weightd_recipe *r = w13_recipe_of(n);
	weightd_unit *u = NULL;
	weightd_error err;
	const uint8_t *w;
	int bad = 0;

	(void)state;
	assert_int_equal(weightd_recipe_nodes(r), 65530);
	assert_true(weightd_server(c)->max_recipe_nodes >= 65530);
	if (weightd_unit_new(c, &u, &err) < 0 ||
	    weightd_unit_slot(u, "w13", "BF16", shape, 3, NULL, &err) < 0 ||
	    weightd_unit_set_recipe(u, "w13", r, &err) < 0 || weightd_unit_submit(u, &err) < 0 ||
	    weightd_unit_validate(u, &err) < 0)
		fail_msg("%s", err.message);
	weightd_unit_bind(u);
	w = weightd_unit_data(u, "w13");
	assert_non_null(w);
	for (int e = 0; e < n && !bad; e++)
		for (uint64_t i = 0; i < 2 * RN; i++)
			for (uint64_t j = 0; j < H && !bad; j++)
				bad |= check_bf16(w, ((uint64_t)e * 2 * RN + i) * H + j,
						  want_bf16(e % NE, i >= RN, R0 + i % RN, j), "w13", e);
	assert_int_equal(bad, 0);
	weightd_unit_free(u);
	weightd_recipe_free(r);
	weightd_close(c);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(two_engines_bind_fused_dequantized_shards),
	  cmocka_unit_test(preflight_names_the_scale_mismatch),
	  cmocka_unit_test(weightctl_preflights_the_fused_weight),
	  cmocka_unit_test(node_limit_recipe_through_the_daemon))
