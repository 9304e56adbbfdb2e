/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_recipe.c - bytes -> a recipe over two small fixed checkpoints -> preflight must fail
 * cleanly or give a plan whose execution writes exactly its bytes and reads exactly what it said. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recipe.h"
#include "sink.h"
#include "source.h"

static char dir[] = "/tmp/wd-fuzz-recipe-XXXXXX";
static char st_path[64], gg_path[64];
static struct wd_source *st_src, *gg_src;
static struct wd_scratch scratch_big, scratch_small;

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* safetensors with a F32 [4,6], h U16 [3,5], s F32 [], g BF16 [2,8], i I8 [16], f F8_E4M3 [4,6],
 * fs F32 [2,2] (f's scales in [2,4] blocks); byte k of the data section is (k * 37 + 11) & 0xff. */
static void write_st(void)
{
	static const char hdr[] =
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[4,6],\"data_offsets\":[0,96]},"
		"\"h\":{\"dtype\":\"U16\",\"shape\":[3,5],\"data_offsets\":[96,126]},"
		"\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[126,130]},"
		"\"g\":{\"dtype\":\"BF16\",\"shape\":[2,8],\"data_offsets\":[130,162]},"
		"\"i\":{\"dtype\":\"I8\",\"shape\":[16],\"data_offsets\":[162,178]},"
		"\"f\":{\"dtype\":\"F8_E4M3\",\"shape\":[4,6],\"data_offsets\":[178,202]},"
		"\"fs\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[202,218]}}";
	uint8_t len8[8], data[218];
	FILE *f = fopen(st_path, "wb");

	if (!f)
		abort();
	put_le(len8, sizeof(hdr) - 1, 8);
	for (size_t k = 0; k < sizeof(data); k++)
		data[k] = (uint8_t)((k * 37 + 11) & 0xff);
	if (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, sizeof(hdr) - 1, f) != sizeof(hdr) - 1 ||
	    fwrite(data, 1, sizeof(data), f) != sizeof(data) || fclose(f))
		abort();
}

/* GGUF v3, one Q8_0 tensor q of shape [2,64] (dims 64, 2): four blocks, scale 1.0 (f16 0x3c00). */
static void write_gguf(void)
{
	uint8_t b[96 + 4 * 34];
	size_t off = 0;
	FILE *f = fopen(gg_path, "wb");

	if (!f)
		abort();
	memset(b, 0, sizeof(b));
	memcpy(b, "GGUF", 4), off = 4;
	put_le(b + off, 3, 4), off += 4;
	put_le(b + off, 1, 8), off += 8;
	put_le(b + off, 0, 8), off += 8;
	put_le(b + off, 1, 8), off += 8;
	b[off++] = 'q';
	put_le(b + off, 2, 4), off += 4;
	put_le(b + off, 64, 8), off += 8;
	put_le(b + off, 2, 8), off += 8;
	put_le(b + off, 8, 4), off += 4;
	put_le(b + off, 0, 8), off += 8;
	off = (off + 31) / 32 * 32;
	for (int k = 0; k < 4; k++) {
		put_le(b + off, 0x3c00, 2);
		for (int m = 0; m < 32; m++)
			b[off + 2 + (size_t)m] = (uint8_t)(m * 5 - 80);
		off += 34;
	}
	if (fwrite(b, 1, off, f) != off || fclose(f))
		abort();
}

static void cleanup(void)
{
	wd_source_free(st_src);
	wd_source_free(gg_src);
	wd_scratch_free(&scratch_big);
	wd_scratch_free(&scratch_small);
	unlink(st_path);
	unlink(gg_path);
	rmdir(dir);
}

static void init(void)
{
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	weightd_error err;

	if (!mkdtemp(dir))
		abort();
	snprintf(st_path, sizeof(st_path), "%s/m.safetensors", dir);
	snprintf(gg_path, sizeof(gg_path), "%s/q.gguf", dir);
	write_st();
	write_gguf();
	if (wd_source_open("m", st_path, &lim, &st_src, &err) < 0 ||
	    wd_source_open("q", gg_path, &lim, &gg_src, &err) < 0) {
		fprintf(stderr, "fuzz_recipe: %s\n", err.message);
		abort();
	}
	if (wd_scratch_init(&scratch_big, 4096) < 0 || wd_scratch_init(&scratch_small, 5) < 0)
		abort();
	atexit(cleanup);
}

static int lookup(void *ctx, const char *ck, const struct wd_source **ret, weightd_error *err)
{
	if (strcmp(ck, "m") == 0)
		*ret = st_src;
	else if (strcmp(ck, "q") == 0)
		*ret = gg_src;
	else
		return wd_error_set(err, WEIGHTD_E_UNKNOWN_SOURCE, "no checkpoint \"%s\"", ck);
	return 0;
}

struct rd {
	const uint8_t *p;
	size_t n;
};

static uint8_t u8(struct rd *r)
{
	if (!r->n)
		return 0;
	r->n--;
	return *r->p++;
}

/* Mostly small numbers, sometimes any 64-bit value. */
static uint64_t num(struct rd *r)
{
	uint8_t b = u8(r);
	uint64_t v = 0;

	if (!(b & 0x80))
		return b % 80;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)u8(r) << (8 * i);
	return v;
}

#define MAX_N 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const cks[] = { "m", "q", "x" };
	static const char *const names[] = { "a", "h", "s", "g", "i", "q", "nope", "", "f", "fs" };
	static struct wd_rnode nodes[MAX_N];
	static uint32_t inputs[MAX_N][6];
	static uint64_t idx[MAX_N][8];
	struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	struct wd_resolver res = { NULL, lookup };
	struct rd r = { data, size };
	struct wd_plan *plan = NULL;
	weightd_error err;
	size_t n;

	if (!st_src)
		init();
	n = 1 + u8(&r) % MAX_N;
	lim.max_temp_bytes = 1 + num(&r) * 64;
	lim.max_depth = 1 + u8(&r) % 40;
	for (size_t i = 0; i < n; i++) {
		struct wd_rnode *x = &nodes[i];
		uint8_t b;

		memset(x, 0, sizeof(*x));
		x->op = (enum wd_op)(u8(&r) % (WD_OP_LAST + 2));
		x->checkpoint = cks[u8(&r) % 3];
		x->tensor = names[u8(&r) % 10];
		b = u8(&r);
		x->sel.kind = (enum wd_sel_kind)(b % 6);
		x->sel.axis = u8(&r) % 4;
		x->sel.start = num(&r);
		x->sel.end = num(&r);
		x->sel.n_indices = u8(&r) % 9;
		for (size_t k = 0; k < x->sel.n_indices; k++)
			idx[i][k] = num(&r);
		x->sel.indices = b & 0x40 ? NULL : idx[i];
		x->sel.ndim = (int)(u8(&r) % 11) - 1;
		for (int d = 0; d < WD_MAX_DIMS; d++)
			x->sel.shape[d] = d < x->sel.ndim ? num(&r) : 0;
		x->sel.rank = u8(&r) % 6;
		x->sel.world = u8(&r) % 6;
		x->n_inputs = u8(&r) % 5;
		/* Mostly earlier nodes; with bit 0x10 of the selection byte, any number up to n. */
		for (size_t k = 0; k < x->n_inputs; k++)
			inputs[i][k] = b & 0x10 || i == 0 ? u8(&r) % (uint32_t)(n + 1)
							  : u8(&r) % (uint32_t)i;
		x->inputs = b & 0x20 ? NULL : inputs[i];
		x->axis = (int8_t)u8(&r) % 6;
		x->ndim = (int)(u8(&r) % 11) - 1;
		for (int d = 0; d < WD_MAX_DIMS; d++)
			x->shape[d] = d < x->ndim ? num(&r) : 0;
		x->n_perm = (int)(u8(&r) % 11) - 1;
		for (int d = 0; d < WD_MAX_DIMS; d++)
			x->perm[d] = u8(&r) % 10;
		x->dtype = (enum wd_dtype)(u8(&r) % (WD_DTYPE_COUNT + 1));
		x->n_block = (int)(u8(&r) % 11) - 1;
		for (int d = 0; d < WD_MAX_DIMS; d++)
			x->block[d] = d < x->n_block ? num(&r) : 0;
	}
	{
		struct wd_recipe rec = { nodes, n };
		bool verbose = getenv("WD_FUZZ_VERBOSE") != NULL;
		if (wd_recipe_preflight(&rec, &res, &lim, &plan, &err) < 0) {
			if (verbose)
				fprintf(stderr, "%s: %s\n", wd_code_name(err.code), err.message);
			if (err.code == 0 || !err.message[0])
				abort();
			return 0;
		}
		if (verbose)
			fprintf(stderr, "plan %s: %llu bytes, reads %llu\n", wd_plan_label(plan),
				(unsigned long long)wd_plan_nbytes(plan),
				(unsigned long long)wd_plan_read_bytes(plan));
		/* The key is a function of the recipe. */
		struct wd_plan *again = NULL;
		if (wd_recipe_preflight(&rec, &res, &lim, &again, &err) < 0 ||
		    memcmp(wd_plan_key(plan), wd_plan_key(again), WD_DIGEST_LEN) != 0)
			abort();
		wd_plan_free(again);
	}
	if (wd_plan_nbytes(plan) <= (1u << 20)) {
		struct wd_scratch *sc = u8(&r) & 1 ? &scratch_small : &scratch_big;
		struct wd_sink sink;
		uint8_t digest[WD_DIGEST_LEN];
		uint64_t got = 0;

		if (wd_sink_init(&sink, -1, wd_plan_nbytes(plan)) < 0)
			abort();
		if (wd_plan_execute(plan, &sink, sc, &got, &err) < 0) {
			fprintf(stderr, "fuzz_recipe: %s failed: %s\n", wd_plan_label(plan), err.message);
			abort();
		}
		if (wd_sink_finish(&sink, digest, &err) < 0 || got != wd_plan_read_bytes(plan)) {
			fprintf(stderr, "fuzz_recipe: %s: read %llu, said %llu; %s\n", wd_plan_label(plan),
				(unsigned long long)got, (unsigned long long)wd_plan_read_bytes(plan), err.message);
			abort();
		}
	}
	wd_plan_free(plan);
	return 0;
}
