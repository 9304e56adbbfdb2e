/* SPDX-License-Identifier: Apache-2.0 */
/* test_gguf.c - GGUF end to end: a real weightd serving GGUF files this test writes from the
 * specification, driven by separate client processes (libweightd, weightctl). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "gguf_writer.h"
#include "harness.h"
#include "quant_ref.h"
#include "weightd/client.h"

/*
 * The files, written here byte by byte with tests/common/gguf_writer.h:
 *
 *   model.gguf      GGUF v3, general.alignment 64, metadata of several kinds (a 40-token
 *                   vocabulary, a short i32 array, a nested array, f32/f64/bool/i64 values), and
 *                   one tensor per quantized type the daemon can cast, filled with blocks from
 *                   tests/common/quant_ref.h (so the test knows every element's value without
 *                   decoding), plus a 3-d Q8_0 tensor and F32/F16 element tensors.
 *   legacy.gguf     GGUF v2, default alignment 32, one Q8_0 tensor.
 *   outside.gguf    a tensor whose data runs past the end of the file.
 *   misaligned.gguf a tensor whose offset is not a multiple of the alignment.
 *
 * Shapes below are row-major (outermost first), as weightd reports them; the file stores the
 * reverse (innermost first), which is what the test writes.
 */

#define MODEL_ALIGN 64u
#define MAX_T 16

struct tensor {
	const char *name;
	const char *type;    /* ggml's name */
	uint32_t ggml;
	unsigned be, bb;     /* elements and bytes per block, stated here from the block structs */
	int ndim;
	uint64_t shape[4];   /* row-major */
	uint64_t nelems, nbytes;
	uint64_t rel;        /* offset in the data section */
	uint64_t abs;        /* offset in the file */
	uint8_t *data;
	double *want;        /* each element's value (quantized tensors) */
};

struct file {
	char path[512];
	uint32_t version, align;
	size_t n;
	struct tensor t[MAX_T];
	uint64_t data_start, size;
	size_t n_meta;
};

static struct file model, legacy;
static char bad_outside[512], bad_misaligned[512], st_path[512];

/* --- writing the files -------------------------------------------------------------------- */

static void add_tensor(struct file *f, const char *name, const char *type, uint32_t ggml,
		       unsigned be, unsigned bb, int ndim, const uint64_t *shape)
{
	struct tensor *t = &f->t[f->n++];
	const struct qr_fmt *q = qr_fmt_named(type);

	assert_true(f->n <= MAX_T);
	t->name = name;
	t->type = type;
	t->ggml = ggml;
	t->be = be;
	t->bb = bb;
	t->ndim = ndim;
	t->nelems = 1;
	for (int i = 0; i < ndim; i++) {
		t->shape[i] = shape[i];
		t->nelems *= shape[i];
	}
	assert_int_equal(t->nelems % be, 0);
	t->nbytes = t->nelems / be * bb;
	t->data = calloc(1, t->nbytes);
	assert_non_null(t->data);
	if (q) {
		assert_int_equal(q->elems, be);
		assert_int_equal(q->bytes, bb);
		t->want = calloc(t->nelems, sizeof(double));
		assert_non_null(t->want);
		for (uint64_t b = 0; b < t->nelems / be; b++)
			q->make(t->data + b * bb, t->want + b * be);
	} else {
		for (uint64_t i = 0; i < t->nbytes; i++)
			t->data[i] = (uint8_t)(i * 7 + f->n * 13);
	}
}

/* Header, metadata (written by `meta`), tensor infos, padding, data; offsets are laid out here. */
static void write_file(struct file *f, void (*meta)(struct gw *g, struct file *f))
{
	struct gw g, m;
	uint64_t off = 0;

	gw_init(&g);
	gw_init(&m);
	meta(&m, f); /* sets f->n_meta, which the header gives first */
	gw_header(&g, f->version, f->n, f->n_meta);
	gw_raw(&g, m.p, m.len);
	gw_free(&m);
	for (size_t i = 0; i < f->n; i++) {
		struct tensor *t = &f->t[i];
		uint64_t dims[4];

		for (int d = 0; d < t->ndim; d++)
			dims[d] = t->shape[t->ndim - 1 - d]; /* GGUF: innermost first */
		t->rel = off;
		gw_tinfo(&g, t->name, (uint32_t)t->ndim, dims, t->ggml, off);
		off += (t->nbytes + f->align - 1) / f->align * f->align;
	}
	gw_pad(&g, f->align);
	f->data_start = g.len;
	for (size_t i = 0; i < f->n; i++) {
		f->t[i].abs = f->data_start + f->t[i].rel;
		gw_raw(&g, f->t[i].data, f->t[i].nbytes);
		gw_pad(&g, f->align);
	}
	f->size = g.len;
	assert_int_equal(gw_save(&g, f->path), 0);
	gw_free(&g);
}

/*
 * A long multi-line value, as chat templates are: 12 lines of 30 bytes and an "é" (2 bytes in
 * UTF-8) at bytes 96-97. Shown with each newline as the two characters \n, the é straddles the
 * 100th byte, where the table cuts values: it must not be split.
 */
static const char *chat_template(void)
{
	static char t[400];

	if (!t[0]) {
		for (int i = 0; i < 12; i++)
			snprintf(t + 30 * i, sizeof(t) - 30 * (size_t)i,
				 "{%% for m in messages %%}%02d....\n", i);
		memcpy(t + 96, "\xc3\xa9", 2);
	}
	return t;
}

static void model_meta(struct gw *g, struct file *f)
{
	char tok[32];

	gw_kv_str(g, "general.architecture", "llama");
	gw_kv_str(g, "general.name", "tiny-gguf");
	gw_kv_u32(g, "general.alignment", MODEL_ALIGN);
	gw_kv_str(g, "tokenizer.ggml.model", "gpt2");
	gw_kv_u32(g, "llama.context_length", 2048);
	gw_kv_u32(g, "llama.block_count", 2);
	gw_kv_u32(g, "llama.embedding_length", 64);
	gw_key(g, "llama.rope.freq_base", GW_F32);
	gw_f32(g, 10000.5f);
	gw_key(g, "tokenizer.ggml.tokens", GW_ARRAY);
	gw_arr(g, GW_STRING, 40);
	for (int i = 0; i < 40; i++) {
		snprintf(tok, sizeof(tok), "tok%d", i);
		gw_str(g, tok);
	}
	gw_key(g, "tokenizer.ggml.token_type", GW_ARRAY);
	gw_arr(g, GW_I32, 3);
	gw_u32(g, 1);
	gw_u32(g, 2);
	gw_u32(g, (uint32_t)-3);
	gw_key(g, "test.nested", GW_ARRAY);
	gw_arr(g, GW_ARRAY, 2);
	gw_arr(g, GW_U8, 2);
	gw_u8(g, 1);
	gw_u8(g, 2);
	gw_arr(g, GW_U8, 1);
	gw_u8(g, 3);
	gw_key(g, "test.flag", GW_BOOL);
	gw_u8(g, 1);
	gw_key(g, "test.i64", GW_I64);
	gw_u64(g, (uint64_t)-5);
	gw_key(g, "test.f64", GW_F64);
	gw_f64(g, 0.25);
	gw_kv_str(g, "tokenizer.chat_template", chat_template());
	f->n_meta = 15;
}

static void legacy_meta(struct gw *g, struct file *f)
{
	gw_kv_str(g, "general.architecture", "gpt2");
	f->n_meta = 1;
}

/* Every quantized type the daemon casts, two blocks per row. */
static const struct qtype {
	const char *type, *name;
	uint32_t ggml;
	unsigned be, bb;
} qtypes[] = {
	{ "Q8_0", "blk.0.q8_0.weight", GG_Q8_0, 32, 34 },
	{ "Q4_0", "blk.0.q4_0.weight", GG_Q4_0, 32, 18 },
	{ "Q4_1", "blk.0.q4_1.weight", GG_Q4_1, 32, 20 },
	{ "Q5_0", "blk.0.q5_0.weight", GG_Q5_0, 32, 22 },
	{ "Q5_1", "blk.0.q5_1.weight", GG_Q5_1, 32, 24 },
	{ "Q4_K", "blk.0.q4_k.weight", GG_Q4_K, 256, 144 },
	{ "Q5_K", "blk.0.q5_k.weight", GG_Q5_K, 256, 176 },
	{ "Q6_K", "blk.0.q6_k.weight", GG_Q6_K, 256, 210 },
};
#define NQ (sizeof(qtypes) / sizeof(qtypes[0]))

static void make_model(void)
{
	static const uint64_t norm[] = { 64 }, embd[] = { 2, 3, 4 }, qkv[] = { 3, 4, 64 };

	harness_path(&H, "model.gguf", model.path, sizeof(model.path));
	model.version = 3;
	model.align = MODEL_ALIGN;
	for (size_t i = 0; i < NQ; i++) {
		const struct qtype *q = &qtypes[i];
		uint64_t shape[2] = { q->be == 32 ? 4 : 3, 2 * q->be };

		add_tensor(&model, q->name, q->type, q->ggml, q->be, q->bb, 2, shape);
	}
	add_tensor(&model, "blk.1.attn_qkv.weight", "Q8_0", GG_Q8_0, 32, 34, 3, qkv);
	add_tensor(&model, "output_norm.weight", "F32", GG_F32, 1, 4, 1, norm);
	add_tensor(&model, "token_embd.weight", "F16", GG_F16, 1, 2, 3, embd);
	write_file(&model, model_meta);
}

static void make_legacy(void)
{
	static const uint64_t shape[] = { 2, 32 };

	harness_path(&H, "legacy.gguf", legacy.path, sizeof(legacy.path));
	legacy.version = 2;
	legacy.align = 32;
	add_tensor(&legacy, "w", "Q8_0", GG_Q8_0, 32, 34, 2, shape);
	write_file(&legacy, legacy_meta);
}

/* A Q4_0 tensor [1, 32] (18 bytes) at data offset 0, but the file ends 6 bytes into the data. */
static void make_outside(void)
{
	static const uint64_t dims[] = { 32, 1 };
	struct gw g;

	harness_path(&H, "outside.gguf", bad_outside, sizeof(bad_outside));
	gw_init(&g);
	gw_header(&g, 3, 1, 1);
	gw_kv_str(&g, "general.architecture", "llama");
	gw_tinfo(&g, "blk.0.cut.weight", 2, dims, GG_Q4_0, 0);
	gw_pad(&g, 32);
	gw_zeros(&g, 6);
	assert_int_equal(gw_save(&g, bad_outside), 0);
	gw_free(&g);
}

/* Two F32 tensors; the second starts at data offset 8, not a multiple of the alignment 32. */
static void make_misaligned(void)
{
	static const uint64_t dims[] = { 2 };
	struct gw g;

	harness_path(&H, "misaligned.gguf", bad_misaligned, sizeof(bad_misaligned));
	gw_init(&g);
	gw_header(&g, 3, 2, 1);
	gw_kv_str(&g, "general.architecture", "llama");
	gw_tinfo(&g, "a", 1, dims, GG_F32, 0);
	gw_tinfo(&g, "b.skewed", 1, dims, GG_F32, 8);
	gw_pad(&g, 32);
	gw_zeros(&g, 64);
	assert_int_equal(gw_save(&g, bad_misaligned), 0);
	gw_free(&g);
}

static const struct tensor *model_tensor(const char *name)
{
	for (size_t i = 0; i < model.n; i++)
		if (strcmp(model.t[i].name, name) == 0)
			return &model.t[i];
	fail_msg("no tensor %s in the test's model", name);
	return NULL;
}

static int setup(void **state)
{
	char sections[4096];

	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	make_model();
	make_legacy();
	make_outside();
	make_misaligned();
	/* a safetensors source beside them: its output must stay as it was */
	if (harness_sample(&H, "tiny.safetensors", st_path, sizeof(st_path)) < 0)
		return -1;
	snprintf(sections, sizeof(sections),
		 "[checkpoint:model]\npath = %s\n\n[checkpoint:legacy]\npath = %s\n\n"
		 "[checkpoint:outside]\npath = %s\n\n[checkpoint:misaligned]\npath = %s\n\n"
		 "[checkpoint:tiny]\npath = %s\n",
		 model.path, legacy.path, bad_outside, bad_misaligned, st_path);
	return fixture_start(NULL, sections);
}

static int teardown(void **state)
{
	(void)state;
	harness_cleanup(&H);
	for (size_t i = 0; i < model.n; i++) {
		free(model.t[i].data);
		free(model.t[i].want);
	}
	for (size_t i = 0; i < legacy.n; i++) {
		free(legacy.t[i].data);
		free(legacy.t[i].want);
	}
	return 0;
}

/* --- helpers ------------------------------------------------------------------------------ */

/* Materialize a source tensor (sel may be NULL); returns the code, *ret the weight on success. */
static int get_tensor(weightd_client *c, const char *ckpt, const char *tensor,
		      const weightd_selection *sel, weightd_weight **ret, weightd_error *err)
{
	weightd_inflight *f = NULL;
	int r = weightd_materialize(c, ckpt, tensor, sel, &f, err);

	if (r == 0)
		r = weightd_finish(f, ret, err);
	return r;
}

static const uint8_t *map_or_fail(weightd_weight *w)
{
	const void *p = NULL;
	weightd_error err;

	if (weightd_weight_map(w, &p, &err) < 0)
		fail_msg("map: %s", err.message);
	return p;
}

/* cast(source(ckpt, tensor, sel), dtype) as a recipe. */
static weightd_recipe *cast_recipe(const char *ckpt, const char *tensor,
				   const weightd_selection *sel, const char *dtype)
{
	weightd_recipe *r = NULL;
	weightd_error err;
	int src;

	if (weightd_recipe_new(&r, &err) < 0 ||
	    (src = weightd_recipe_source(r, ckpt, tensor, sel, &err)) < 0 ||
	    weightd_recipe_cast(r, src, dtype, &err) < 0)
		fail_msg("recipe: %s", err.message);
	return r;
}

static int get_recipe(weightd_client *c, const weightd_recipe *r, weightd_weight **ret,
		      weightd_error *err)
{
	weightd_inflight *f = NULL;
	int rc = weightd_materialize_recipe(c, r, &f, err);

	if (rc == 0)
		rc = weightd_finish(f, ret, err);
	return rc;
}

/* Run a command line through sh with stdout and stderr captured together; its exit status. */
static int __attribute__((format(printf, 3, 4))) run_sh(char *out, size_t cap, const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return harness_run(argv, out, cap, (uid_t)-1);
}

static bool has_line_with(const char *text, const char *a, const char *b, const char *c)
{
	const char *p = text;

	while (p && *p) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char line[1024];

		if (len > sizeof(line) - 1)
			len = sizeof(line) - 1;
		memcpy(line, p, len);
		line[len] = '\0';
		if (strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c)))
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

/* A member of a JSON object as a string (NULL if absent or not one) or an integer (0 then). */
static const char *jstr(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static json_int_t jint(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v))
		fail_msg("JSON member %s is not an integer", key);
	return json_integer_value(v);
}

/* --- the rounding rules the casts must follow, written from IEEE 754 ---------------------- */

/*
 * Round a float to binary16, nearest with ties to even: scale the value so that one unit is the
 * spacing of binary16 numbers at its magnitude (2^-24 below the normal range, 2^(e-10) in binade
 * e), round that to an integer with rint (ties to even in the default rounding mode, exact since
 * the scaled value is a float times a power of two), and assemble sign, exponent and fraction.
 * A result past 65504 is infinity.
 */
static uint16_t ref_f16(float f)
{
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	double a = fabs((double)f), n;
	int e;

	if (isnan(f))
		return sign | 0x7e00;
	if (isinf(f))
		return sign | 0x7c00;
	if (a == 0)
		return sign;
	frexp(a, &e);
	e -= 1; /* a in [2^e, 2^(e+1)) */
	if (e < -14)
		return sign | (uint16_t)rint(ldexp(a, 24)); /* 1024 is the least normal, 0x0400 */
	n = rint(ldexp(a, 10 - e));                         /* in [1024, 2048] */
	if (n == 2048) {
		n = 1024;
		e++;
	}
	if (e > 15)
		return sign | 0x7c00;
	return sign | (uint16_t)((e + 15) << 10 | ((int)n - 1024));
}

/* The same for bfloat16: 8 exponent bits like float, 7 fraction bits; float's subnormals have
 * spacing 2^-133 in bfloat16. */
static uint16_t ref_bf16(float f)
{
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	double a = fabs((double)f), n;
	int e;

	if (isnan(f))
		return sign | 0x7fc0;
	if (isinf(f))
		return sign | 0x7f80;
	if (a == 0)
		return sign;
	frexp(a, &e);
	e -= 1;
	if (e < -126)
		return sign | (uint16_t)rint(ldexp(a, 133));
	n = rint(ldexp(a, 7 - e)); /* in [128, 256] */
	if (n == 256) {
		n = 128;
		e++;
	}
	if (e > 127)
		return sign | 0x7f80;
	return sign | (uint16_t)((e + 127) << 7 | ((int)n - 128));
}

/* Check a cast result element by element; zeros compare equal whatever their sign. */
static void check_cast(const char *what, const char *dtype, const uint8_t *got,
		       const double *want, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++) {
		float w = (float)want[k];

		if (strcmp(dtype, "F32") == 0) {
			float g;

			memcpy(&g, got + 4 * k, 4);
			if (g != w)
				fail_msg("%s as F32, element %" PRIu64 ": got %.9g, want %.9g",
					 what, k, (double)g, (double)w);
		} else {
			uint16_t g, e = strcmp(dtype, "F16") == 0 ? ref_f16(w) : ref_bf16(w);

			memcpy(&g, got + 2 * k, 2);
			if (g != e && !((g & 0x7fff) == 0 && (e & 0x7fff) == 0))
				fail_msg("%s as %s, element %" PRIu64 " (%.9g): got 0x%04x, "
					 "want 0x%04x", what, dtype, k, (double)w, g, e);
		}
	}
}

/* --- tests -------------------------------------------------------------------------------- */

/* The library's describe: kind, metadata as the daemon renders it, the tensor table in file order
 * with row-major shapes, types, block geometry, exact byte lengths and absolute offsets. */
static void describe_reports_metadata_and_table(void **state)
{
	static const struct {
		const char *key, *type, *value;
	} meta[] = {
		{ "general.architecture", "string", "llama" },
		{ "general.name", "string", "tiny-gguf" },
		{ "general.alignment", "u32", "64" },
		{ "tokenizer.ggml.model", "string", "gpt2" },
		{ "llama.context_length", "u32", "2048" },
		{ "llama.rope.freq_base", "f32", "10000.5" },
		{ "tokenizer.ggml.tokens", "array[string]", "[40 x string]" },
		{ "tokenizer.ggml.token_type", "array[i32]", "[1, 2, -3]" },
		{ "test.nested", "array[array[u8]]", "[[1, 2], [3]]" },
		{ "test.flag", "bool", "true" },
		{ "test.i64", "i64", "-5" },
		{ "test.f64", "f64", "0.25" },
	};
	weightd_client *c = it_connect(&H);
	weightd_description *d = NULL;
	weightd_error err;

	(void)state;
	if (weightd_describe(c, "model", &d, &err) < 0)
		fail_msg("describe: %s", err.message);
	assert_string_equal(d->source.kind, "gguf");
	assert_string_equal(d->source.state, "ready");
	assert_int_equal(d->source.tensors, model.n);
	assert_int_equal(d->n_metadata, model.n_meta);
	for (size_t i = 0; i < sizeof(meta) / sizeof(meta[0]); i++) {
		bool found = false;

		for (size_t j = 0; j < d->n_metadata; j++) {
			if (strcmp(d->metadata[j].key, meta[i].key) != 0)
				continue;
			found = true;
			assert_string_equal(d->metadata[j].type, meta[i].type);
			assert_string_equal(d->metadata[j].value, meta[i].value);
		}
		if (!found)
			fail_msg("metadata key %s missing", meta[i].key);
	}
	assert_int_equal(d->n_tensors, model.n);
	for (size_t i = 0; i < model.n; i++) {
		const weightd_tensor_info *ti = &d->tensors[i];
		const struct tensor *t = &model.t[i];

		assert_string_equal(ti->name, t->name);
		assert_string_equal(ti->dtype, t->type);
		assert_int_equal(ti->ndim, t->ndim);
		for (int k = 0; k < t->ndim; k++)
			assert_int_equal(ti->shape[k], t->shape[k]);
		assert_int_equal(ti->nbytes, t->nbytes);
		assert_int_equal(ti->offset, t->abs);
		assert_int_equal(ti->offset % MODEL_ALIGN, model.data_start % MODEL_ALIGN);
		assert_int_equal(ti->block_elems, t->be);
		assert_int_equal(ti->block_bytes, t->bb);
	}
	weightd_description_free(d);

	/* version 2 with the default alignment */
	if (weightd_describe(c, "legacy", &d, &err) < 0)
		fail_msg("describe legacy: %s", err.message);
	assert_int_equal(d->n_tensors, 1);
	assert_int_equal(d->tensors[0].offset, legacy.t[0].abs);
	assert_int_equal(d->tensors[0].offset % 32, 0);
	assert_int_equal(d->tensors[0].shape[0], 2);
	assert_int_equal(d->tensors[0].shape[1], 32);
	weightd_description_free(d);
	weightd_close(c);
}

/* Format-preserving: the weight's bytes are the file's bytes, packed blocks as stored. */
static void quantized_blocks_stay_packed(void **state)
{
	weightd_client *c = it_connect(&H);
	weightd_error err;

	(void)state;
	for (size_t i = 0; i < model.n; i++) {
		const struct tensor *t = &model.t[i];
		weightd_weight *w = NULL;

		if (get_tensor(c, "model", t->name, NULL, &w, &err) < 0)
			fail_msg("%s: %s", t->name, err.message);
		assert_string_equal(weightd_weight_dtype(w), t->type);
		assert_int_equal(weightd_weight_nbytes(w), t->nbytes);
		assert_int_equal(weightd_weight_ndim(w), t->ndim);
		for (int k = 0; k < t->ndim; k++)
			assert_int_equal(weightd_weight_shape(w)[k], t->shape[k]);
		assert_memory_equal(map_or_fail(w), t->data, t->nbytes);
		weightd_release(w);
	}
	{
		weightd_weight *w = NULL;

		if (get_tensor(c, "legacy", "w", NULL, &w, &err) < 0)
			fail_msg("legacy w: %s", err.message);
		assert_memory_equal(map_or_fail(w), legacy.t[0].data, legacy.t[0].nbytes);
		weightd_release(w);
	}
	weightd_close(c);
}

/* Ranges on outer axes take the right rows of blocks, still packed. */
static void outer_axis_selections_take_rows_of_blocks(void **state)
{
	weightd_client *c = it_connect(&H);
	weightd_selection *sel = NULL;
	weightd_weight *w = NULL;
	weightd_error err;

	(void)state;
	/* rows 1..3 of each 2-d quantized tensor: two rows of two blocks each, contiguous */
	for (size_t i = 0; i < NQ; i++) {
		const struct tensor *t = model_tensor(qtypes[i].name);
		uint64_t row = t->shape[1] / t->be * t->bb;

		assert_int_equal(weightd_selection_range(0, 1, 3, &sel, &err), 0);
		if (get_tensor(c, "model", t->name, sel, &w, &err) < 0)
			fail_msg("%s[1:3]: %s", t->name, err.message);
		assert_int_equal(weightd_weight_nbytes(w), 2 * row);
		assert_int_equal(weightd_weight_shape(w)[0], 2);
		assert_int_equal(weightd_weight_shape(w)[1], t->shape[1]);
		assert_memory_equal(map_or_fail(w), t->data + row, 2 * row);
		weightd_release(w);
		weightd_selection_free(sel);
	}

	/* the middle axis of the 3-d [3, 4, 64] Q8_0 tensor: rows 1 and 2 of each outer slice */
	{
		const struct tensor *t = model_tensor("blk.1.attn_qkv.weight");
		uint64_t row = 2 * 34, got_len;
		const uint8_t *got;

		assert_int_equal(weightd_selection_range(1, 1, 3, &sel, &err), 0);
		if (get_tensor(c, "model", t->name, sel, &w, &err) < 0)
			fail_msg("%s[:,1:3]: %s", t->name, err.message);
		got = map_or_fail(w);
		got_len = weightd_weight_nbytes(w);
		assert_int_equal(got_len, 3 * 2 * row);
		for (uint64_t o = 0; o < 3; o++)
			assert_memory_equal(got + o * 2 * row, t->data + (o * 4 + 1) * row,
					    2 * row);
		weightd_release(w);
		weightd_selection_free(sel);
	}
	weightd_close(c);
}

/* The innermost axis: whole blocks work; part of a block is an error naming tensor, axis and
 * block size, and the daemon keeps serving. */
static void innermost_axis_needs_whole_blocks(void **state)
{
	static const struct {
		const char *tensor;
		uint64_t start, end;
		const char *block;
	} bad[] = {
		{ "blk.0.q4_0.weight", 0, 16, "32" },
		{ "blk.0.q8_0.weight", 16, 48, "32" },
		{ "blk.0.q5_1.weight", 32, 40, "32" },
		{ "blk.0.q4_k.weight", 0, 128, "256" },
		{ "blk.0.q6_k.weight", 256, 500, "256" },
	};
	weightd_client *c = it_connect(&H);
	weightd_selection *sel = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	char out[4096];
	int rc;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(weightd_selection_range(1, bad[i].start, bad[i].end, &sel, &err),
				 0);
		rc = get_tensor(c, "model", bad[i].tensor, sel, &w, &err);
		weightd_selection_free(sel);
		if (rc == 0)
			fail_msg("%s[:, %" PRIu64 ":%" PRIu64 "] was served", bad[i].tensor,
				 bad[i].start, bad[i].end);
		assert_int_equal(rc, -WEIGHTD_E_UNSUPPORTED);
		if (!strstr(err.message, bad[i].tensor) || !strstr(err.message, "axis 1") ||
		    !strstr(err.message, bad[i].block))
			fail_msg("the error does not name tensor, axis and block size: %s",
				 err.message);
		assert_string_equal(err.tensor, bad[i].tensor);
		assert_int_equal(err.axis, 1);
	}

	/* the second block of every row of each 2-d tensor */
	for (size_t i = 0; i < NQ; i++) {
		const struct tensor *t = model_tensor(qtypes[i].name);
		const uint8_t *got;

		assert_int_equal(weightd_selection_range(1, t->be, 2 * t->be, &sel, &err), 0);
		if (get_tensor(c, "model", t->name, sel, &w, &err) < 0)
			fail_msg("%s[:, %u:%u]: %s", t->name, t->be, 2 * t->be, err.message);
		weightd_selection_free(sel);
		assert_int_equal(weightd_weight_nbytes(w), t->shape[0] * t->bb);
		assert_int_equal(weightd_weight_shape(w)[1], t->be);
		got = map_or_fail(w);
		for (uint64_t r = 0; r < t->shape[0]; r++)
			assert_memory_equal(got + r * t->bb, t->data + (2 * r + 1) * t->bb, t->bb);
		weightd_release(w);
	}

	/* the same rule from weightctl, and weightd still serves afterwards */
	rc = run_sh(out, sizeof(out),
		    "%s --socket %s get model blk.0.q4_0.weight --range 1:0:16 2>&1",
		    harness_weightctl(), H.sock);
	assert_int_equal(rc, 1);
	if (!strstr(out, "blk.0.q4_0.weight") || !strstr(out, "axis 1") || !strstr(out, "32"))
		fail_msg("weightctl get said: %s", out);
	assert_int_equal(get_tensor(c, "model", "output_norm.weight", NULL, &w, &err), 0);
	weightd_release(w);
	weightd_close(c);
}

/* Dequantization through the daemon, element by element against the values the blocks were made
 * from, for every listed type and every float target. */
static void casts_match_the_block_formulas(void **state)
{
	static const char *const targets[] = { "F32", "F16", "BF16" };
	weightd_client *c = it_connect(&H);
	weightd_error err;
	char what[128];

	(void)state;
	for (size_t i = 0; i < NQ; i++) {
		const struct tensor *t = model_tensor(qtypes[i].name);

		for (size_t j = 0; j < 3; j++) {
			weightd_recipe *r = cast_recipe("model", t->name, NULL, targets[j]);
			weightd_weight *w = NULL;
			size_t esize = j == 0 ? 4 : 2;

			if (get_recipe(c, r, &w, &err) < 0)
				fail_msg("cast %s to %s: %s", t->name, targets[j], err.message);
			assert_string_equal(weightd_weight_dtype(w), targets[j]);
			assert_int_equal(weightd_weight_ndim(w), 2);
			assert_int_equal(weightd_weight_shape(w)[0], t->shape[0]);
			assert_int_equal(weightd_weight_shape(w)[1], t->shape[1]);
			assert_int_equal(weightd_weight_nbytes(w), t->nelems * esize);
			snprintf(what, sizeof(what), "%s (%s)", t->name, t->type);
			check_cast(what, targets[j], map_or_fail(w), t->want, t->nelems);
			weightd_release(w);
			weightd_recipe_free(r);
		}
	}
	/* the v2 file's tensor too */
	{
		weightd_recipe *r = cast_recipe("legacy", "w", NULL, "F32");
		weightd_weight *w = NULL;

		if (get_recipe(c, r, &w, &err) < 0)
			fail_msg("cast legacy w: %s", err.message);
		check_cast("legacy w", "F32", map_or_fail(w), legacy.t[0].want, legacy.t[0].nelems);
		weightd_release(w);
		weightd_recipe_free(r);
	}
	weightd_close(c);
}

/*
 * A child process: materializes cast(model:blk.0.q6_k.weight[1:3], F32), checks every value
 * against the block formulas, and reports "dev ino ok|bad" on `out`; then waits for the parent
 * to close `in` before releasing.
 */
static void sharer(int in, int out)
{
	const struct tensor *t = model_tensor("blk.0.q6_k.weight");
	weightd_client *c = NULL;
	weightd_selection *sel = NULL;
	weightd_recipe *r;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p = NULL;
	struct stat st;
	char line[128], x;
	bool ok = true;
	int n;

	if (weightd_connect(H.sock, "sharer", &c, &err) < 0 ||
	    weightd_selection_range(0, 1, 3, &sel, &err) < 0)
		_exit(1);
	r = cast_recipe("model", t->name, sel, "F32");
	if (get_recipe(c, r, &w, &err) < 0 || weightd_weight_map(w, &p, &err) < 0 ||
	    fstat(weightd_weight_fd(w), &st) < 0)
		_exit(2);
	for (uint64_t k = 0; k < 2 * t->shape[1]; k++) {
		float g;

		memcpy(&g, (const uint8_t *)p + 4 * k, 4);
		ok &= g == (float)t->want[t->shape[1] + k];
	}
	n = snprintf(line, sizeof(line), "%llu %llu %s\n", (unsigned long long)st.st_dev,
		     (unsigned long long)st.st_ino, ok ? "ok" : "bad");
	if (write(out, line, (size_t)n) != n)
		_exit(3);
	while (read(in, &x, 1) > 0)
		;
	weightd_release(w);
	weightd_recipe_free(r);
	weightd_selection_free(sel);
	weightd_close(c);
	_exit(0);
}

struct proc {
	pid_t pid;
	int cmd;
	FILE *out;
};

static void sharer_start(struct proc *p)
{
	int to, from;

	p->pid = it_fork_piped(&to, &from);
	if (p->pid == 0)
		sharer(to, from);
	p->cmd = to;
	p->out = fdopen(from, "r");
}

static void sharer_end(struct proc *p)
{
	int status;

	close(p->cmd);
	fclose(p->out);
	assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* Two processes asking for the same dequantized weight map one segment, read once. */
static void two_processes_share_a_dequantized_weight(void **state)
{
	const struct tensor *t = model_tensor("blk.0.q6_k.weight");
	weightd_client *c = it_connect(&H);
	weightd_status *st;
	struct proc a, b;
	char la[128], lb[128];
	uint64_t read0, read_a;
	bool seen = false;

	(void)state;
	st = it_status(c);
	read0 = st->bytes_read;
	weightd_status_free(st);

	sharer_start(&a);
	assert_non_null(fgets(la, sizeof(la), a.out));
	st = it_status(c);
	read_a = st->bytes_read;
	weightd_status_free(st);
	/* A made the daemon read the two selected rows of Q6_K blocks, nothing more */
	assert_int_equal(read_a - read0, 2 * (t->shape[1] / 256) * 210);

	sharer_start(&b);
	assert_non_null(fgets(lb, sizeof(lb), b.out));
	assert_non_null(strstr(la, " ok"));
	assert_string_equal(la, lb); /* same device and inode: one segment */

	st = it_status(c);
	assert_int_equal(st->bytes_read, read_a); /* B read nothing */
	for (size_t i = 0; i < st->n_weights; i++) {
		const weightd_weight_status *ws = &st->weight_list[i];

		if (strcmp(ws->dtype, "F32") == 0 && strstr(ws->label, "q6_k") &&
		    ws->nbytes == 2 * t->shape[1] * 4) {
			seen = true;
			assert_int_equal(ws->clients, 2);
		}
	}
	assert_true(seen);
	weightd_status_free(st);
	/* B was forked holding A's command pipe too: end B first, so A then sees end of file */
	sharer_end(&b);
	sharer_end(&a);
	weightd_close(c);
}

/* weightctl describe: the GGUF summary first, then the table with types and block layout. */
static void weightctl_describe_summarises_gguf(void **state)
{
	static char out[65536];
	int rc;

	(void)state;
	rc = run_sh(out, sizeof(out), "%s --socket %s describe model", harness_weightctl(), H.sock);
	assert_int_equal(rc, 0);
	/* the summary comes before the tensor table */
	{
		const char *arch = strstr(out, "architecture"), *table = strstr(out, "TENSOR");

		assert_non_null(arch);
		assert_non_null(table);
		assert_true(arch < table);
	}
	if (!has_line_with(out, "architecture", "llama", NULL) ||
	    !has_line_with(out, "model name", "tiny-gguf", NULL) ||
	    !has_line_with(out, "tokenizer", "gpt2", NULL) ||
	    !has_line_with(out, "tensors", "11", NULL) ||
	    !has_line_with(out, "metadata keys", "15", NULL) ||
	    !has_line_with(out, "context length", "2048", NULL) ||
	    !has_line_with(out, "block count", "2", NULL) ||
	    !has_line_with(out, "vocabulary", "40", NULL) ||
	    !has_line_with(out, "tokenizer.ggml.tokens", "[40 x string]", NULL))
		fail_msg("summary missing from:\n%s", out);
	/* a long multi-line value stays on its line, cut and escaped (whole in --json) */
	{
		const char *l = strstr(out, "tokenizer.chat_template"), *end;

		assert_non_null(l);
		end = strchr(l, '\n');
		assert_non_null(end);
		assert_true(end - l < 180);
		assert_non_null(strstr(l, "{% for m in messages %}00....\\n{% for m"));
		assert_true(end[-3] == '.' && end[-2] == '.' && end[-1] == '.');
		assert_true((end[-4] & 0xc0) != 0xc0); /* no lead byte left without its tail */
	}
	for (size_t i = 0; i < model.n; i++) {
		const struct tensor *t = &model.t[i];
		char shape[64], block[64], bytes[32];
		size_t len = 0;

		len += (size_t)snprintf(shape + len, sizeof(shape) - len, "[");
		for (int k = 0; k < t->ndim; k++)
			len += (size_t)snprintf(shape + len, sizeof(shape) - len, "%s%" PRIu64,
						k ? ", " : "", t->shape[k]);
		snprintf(shape + len, sizeof(shape) - len, "]");
		snprintf(block, sizeof(block), "%u el / %u B", t->be, t->bb);
		snprintf(bytes, sizeof(bytes), " %" PRIu64 " ", t->nbytes);
		if (!has_line_with(out, t->name, shape, block) ||
		    !has_line_with(out, t->name, bytes, NULL))
			fail_msg("no row \"%s %s %s %s\" in:\n%s", t->name, t->type, shape, block,
				 out);
		{
			char typecol[32];

			snprintf(typecol, sizeof(typecol), "  %s  ", t->type);
			assert_true(has_line_with(out, t->name, typecol, NULL));
		}
	}

	/* --json */
	rc = run_sh(out, sizeof(out), "%s --socket %s --json describe model", harness_weightctl(),
		    H.sock);
	assert_int_equal(rc, 0);
	{
		json_error_t je;
		json_t *j = json_loads(out, 0, &je), *sum, *ts;

		if (!j)
			fail_msg("describe --json is not JSON (%s): %s", je.text, out);
		sum = json_object_get(j, "gguf");
		assert_non_null(sum);
		assert_string_equal(jstr(sum, "architecture"), "llama");
		assert_string_equal(jstr(sum, "name"), "tiny-gguf");
		assert_string_equal(jstr(sum, "tokenizer"), "gpt2");
		assert_int_equal(jint(sum, "tensors"), 11);
		assert_int_equal(jint(sum, "metadata_keys"), 15);
		assert_int_equal(jint(sum, "context_length"), 2048);
		assert_int_equal(jint(sum, "block_count"), 2);
		assert_int_equal(jint(sum, "embedding_length"), 64);
		assert_int_equal(jint(sum, "vocabulary"), 40);
		assert_true(json_is_null(json_object_get(sum, "head_count")));
		assert_true(json_is_object(json_object_get(sum, "types")));
		assert_int_equal(jint(json_object_get(sum, "types"), "Q8_0"), 2);
		assert_int_equal(jint(json_object_get(sum, "types"), "Q4_K"), 1);
		assert_int_equal(jint(json_object_get(sum, "types"), "F16"), 1);
		assert_int_equal(json_object_size(json_object_get(sum, "types")), 10);
		ts = json_object_get(j, "tensors");
		assert_int_equal(json_array_size(ts), model.n);
		for (size_t i = 0; i < model.n; i++) {
			const struct tensor *t = &model.t[i];
			json_t *x = json_array_get(ts, i), *sh = json_object_get(x, "shape");

			assert_string_equal(jstr(x, "name"), t->name);
			assert_string_equal(jstr(x, "dtype"), t->type);
			assert_int_equal(json_array_size(sh), t->ndim);
			for (int k = 0; k < t->ndim; k++)
				assert_int_equal(json_integer_value(json_array_get(sh, (size_t)k)),
						 t->shape[k]);
			assert_int_equal(jint(x, "bytes"), t->nbytes);
			assert_int_equal(jint(x, "offset"), t->abs);
			assert_int_equal(jint(x, "block_elems"), t->be);
			assert_int_equal(jint(x, "block_bytes"), t->bb);
		}
		assert_int_equal(json_array_size(json_object_get(j, "metadata")), model.n_meta);
		for (size_t i = 0; i < model.n_meta; i++) {
			json_t *m = json_array_get(json_object_get(j, "metadata"), i);

			if (strcmp(jstr(m, "key"), "tokenizer.chat_template") == 0)
				assert_string_equal(jstr(m, "value"), chat_template());
		}
		json_decref(j);
	}

	/* a safetensors source keeps its output: no GGUF summary */
	rc = run_sh(out, sizeof(out), "%s --socket %s describe tiny", harness_weightctl(), H.sock);
	assert_int_equal(rc, 0);
	assert_null(strstr(out, "architecture"));
	assert_true(has_line_with(out, "kind", "safetensors", NULL));
	rc = run_sh(out, sizeof(out), "%s --socket %s --json describe tiny", harness_weightctl(),
		    H.sock);
	assert_int_equal(rc, 0);
	{
		json_t *j = json_loads(out, 0, NULL);

		assert_non_null(j);
		assert_null(json_object_get(j, "gguf"));
		assert_non_null(json_object_get(j, "tensors"));
		json_decref(j);
	}
}

/* Bad GGUF files: --check-config and describe name the file and what is wrong; the daemon serves
 * everything else. */
static void bad_files_are_reported_and_others_served(void **state)
{
	static char out[16384];
	weightd_client *c = it_connect(&H);
	weightd_description *d = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	char *argv[] = { (char *)harness_weightd(), "--config", H.conf, "--check-config", NULL };
	int rc;

	(void)state;
	rc = harness_run(argv, out, sizeof(out), (uid_t)-1);
	assert_int_equal(rc, 1);
	if (!has_line_with(out, "checkpoint model: ok", "gguf", NULL) ||
	    !has_line_with(out, "checkpoint legacy: ok", "gguf", NULL) ||
	    !has_line_with(out, "checkpoint tiny: ok", NULL, NULL) ||
	    !has_line_with(out, "checkpoint outside: FAILED", bad_outside,
			   "past the end of the file") ||
	    !has_line_with(out, "checkpoint outside: FAILED", "blk.0.cut.weight", NULL) ||
	    !has_line_with(out, "checkpoint misaligned: FAILED", bad_misaligned,
			   "not a multiple of the alignment 32") ||
	    !has_line_with(out, "checkpoint misaligned: FAILED", "b.skewed", NULL))
		fail_msg("--check-config said:\n%s", out);

	assert_int_equal(weightd_describe(c, "outside", &d, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, bad_outside));
	assert_non_null(strstr(err.message, "past the end of the file"));
	assert_int_equal(weightd_describe(c, "misaligned", &d, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, bad_misaligned));
	assert_non_null(strstr(err.message, "alignment"));

	rc = run_sh(out, sizeof(out), "%s --socket %s describe outside 2>&1", harness_weightctl(),
		    H.sock);
	assert_int_equal(rc, 1);
	if (!strstr(out, bad_outside) || !strstr(out, "past the end of the file"))
		fail_msg("weightctl describe outside said: %s", out);
	rc = run_sh(out, sizeof(out), "%s --socket %s list", harness_weightctl(), H.sock);
	assert_int_equal(rc, 0);
	assert_true(has_line_with(out, "misaligned", "failed", NULL));
	assert_true(has_line_with(out, "model", "gguf", "ready"));

	/* still serving the good sources */
	assert_int_equal(get_tensor(c, "model", "blk.0.q4_k.weight", NULL, &w, &err), 0);
	weightd_release(w);
	assert_int_equal(get_tensor(c, "tiny", "model.norm.weight", NULL, &w, &err), 0);
	weightd_release(w);
	weightd_close(c);
}

TEST_MAIN_WATCHDOG(240, setup, teardown, cmocka_unit_test(describe_reports_metadata_and_table),
		   cmocka_unit_test(quantized_blocks_stay_packed),
		   cmocka_unit_test(outer_axis_selections_take_rows_of_blocks),
		   cmocka_unit_test(innermost_axis_needs_whole_blocks),
		   cmocka_unit_test(casts_match_the_block_formulas),
		   cmocka_unit_test(two_processes_share_a_dequantized_weight),
		   cmocka_unit_test(weightctl_describe_summarises_gguf),
		   cmocka_unit_test(bad_files_are_reported_and_others_served))
