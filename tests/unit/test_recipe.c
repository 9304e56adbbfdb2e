/* SPDX-License-Identifier: Apache-2.0 */
/* test_recipe.c - recipes: every preflight error, results against independent index arithmetic,
 * identity keys, exact read accounting, and files that change between preflight and execution. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"
#include <xxhash.h>

#include "convert.h"
#include "digest.h"
#include "recipe.h"
#include "sink.h"
#include "source.h"

/* ---- files the tests write -------------------------------------------------------------------- */

static char dir[] = "/tmp/wd-test-recipe-XXXXXX";

static void path_of(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

struct wt {
	const char *name;
	const char *dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	const void *data;
	size_t nbytes;
};

/* safetensors: u64 LE header length, the JSON header (padded with spaces to 8), the data. */
static void write_st(const char *name, const struct wt *t, size_t n)
{
	char path[256], hdr[4096];
	size_t off = 0, data = 0;
	uint8_t len8[8];
	FILE *f;

	off += (size_t)snprintf(hdr + off, sizeof(hdr) - off, "{");
	for (size_t i = 0; i < n; i++) {
		off += (size_t)snprintf(hdr + off, sizeof(hdr) - off, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
					i ? "," : "", t[i].name, t[i].dtype);
		for (int d = 0; d < t[i].ndim; d++)
			off += (size_t)snprintf(hdr + off, sizeof(hdr) - off, "%s%llu", d ? "," : "",
						(unsigned long long)t[i].shape[d]);
		off += (size_t)snprintf(hdr + off, sizeof(hdr) - off, "],\"data_offsets\":[%zu,%zu]}", data,
					data + t[i].nbytes);
		data += t[i].nbytes;
	}
	off += (size_t)snprintf(hdr + off, sizeof(hdr) - off, "}");
	while (off % 8)
		hdr[off++] = ' ';
	assert_true(off < sizeof(hdr));
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)off >> (8 * i));
	path_of(path, sizeof(path), name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(len8, 1, 8, f), 8);
	assert_int_equal(fwrite(hdr, 1, off, f), off);
	for (size_t i = 0; i < n; i++)
		if (t[i].nbytes)
			assert_int_equal(fwrite(t[i].data, 1, t[i].nbytes, f), t[i].nbytes);
	assert_int_equal(fclose(f), 0);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* GGUF v3 with one tensor, written from ggml's docs/gguf.md: magic, version, counts, the tensor
 * info (name, dims innermost first, type, offset), padding to 32, data. */
static void write_gguf(const char *name, const char *tensor, uint64_t rows, uint64_t cols,
		       uint32_t ggml_type, const void *data, size_t nbytes)
{
	uint8_t hdr[512];
	size_t off = 0, nl = strlen(tensor);
	char path[256];
	FILE *f;

	memcpy(hdr, "GGUF", 4), off = 4;
	put_le(hdr + off, 3, 4), off += 4;
	put_le(hdr + off, 1, 8), off += 8;   /* tensors */
	put_le(hdr + off, 0, 8), off += 8;   /* metadata */
	put_le(hdr + off, nl, 8), off += 8;
	memcpy(hdr + off, tensor, nl), off += nl;
	put_le(hdr + off, 2, 4), off += 4;
	put_le(hdr + off, cols, 8), off += 8;
	put_le(hdr + off, rows, 8), off += 8;
	put_le(hdr + off, ggml_type, 4), off += 4;
	put_le(hdr + off, 0, 8), off += 8;
	while (off % 32)
		hdr[off++] = 0;
	path_of(path, sizeof(path), name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(hdr, 1, off, f), off);
	assert_int_equal(fwrite(data, 1, nbytes, f), nbytes);
	assert_int_equal(fclose(f), 0);
}

/* ---- the test checkpoint ---------------------------------------------------------------------- */

/*
 * model.safetensors:
 *   a F32 [4,6]  a[i][j] = 16i + j          b F32 [4,6]  b[i][j] = 100 + 16i + j
 *   c F32 [2,6]  c[i][j] = -(16i + j) - 1   h U16 [3,5]  h[i][j] = 0x100 + 5i + j
 *   w I32 [10,3] w[i][j] = 3i + j           s F32 []     7
 *   z U8 [0]                                 t U16 [70,130] t[i][j] = 131i + j
 * quant.gguf: q Q8_0 [4,64]: row r, block k: scale d = 2^-(r+k) (f16), quants qs[m] = m - 16 + r
 */
static float av(int i, int j) { return (float)(16 * i + j); }
static float bv(int i, int j) { return (float)(100 + 16 * i + j); }
static float cv(int i, int j) { return (float)(-(16 * i + j) - 1); }
static uint16_t hv(int i, int j) { return (uint16_t)(0x100 + 5 * i + j); }
static int32_t wv(int i, int j) { return 3 * i + j; }
static uint16_t tv(int i, int j) { return (uint16_t)(131 * i + j); }

static uint8_t q_bytes[4 * 2 * 34];

static uint16_t f16_pow2(int e) /* 2^e as IEEE half, normal range only */
{
	return (uint16_t)((e + 15) << 10);
}

static float q_value(int r, int col)
{
	int k = col / 32, m = col % 32;
	return (float)(m - 16 + r) / (float)(1 << (r + k));
}

static struct wd_source *model, *model2, *quant, *victim;

static void make_model(const char *name)
{
	static float a[24], b[24], c[12], s = 7.0f;
	static uint16_t h[15];
	static int32_t w[30];
	static uint16_t tt[70 * 130];
	struct wt t[] = {
		{ "a", "F32", 2, { 4, 6 }, a, sizeof(a) },
		{ "b", "F32", 2, { 4, 6 }, b, sizeof(b) },
		{ "c", "F32", 2, { 2, 6 }, c, sizeof(c) },
		{ "h", "U16", 2, { 3, 5 }, h, sizeof(h) },
		{ "w", "I32", 2, { 10, 3 }, w, sizeof(w) },
		{ "s", "F32", 0, { 0 }, &s, sizeof(s) },
		{ "z", "U8", 1, { 0 }, NULL, 0 },
		{ "t", "U16", 2, { 70, 130 }, tt, sizeof(tt) },
	};

	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 6; j++)
			a[i * 6 + j] = av(i, j), b[i * 6 + j] = bv(i, j);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 6; j++)
			c[i * 6 + j] = cv(i, j);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 5; j++)
			h[i * 5 + j] = hv(i, j);
	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 3; j++)
			w[i * 3 + j] = wv(i, j);
	for (int i = 0; i < 70; i++)
		for (int j = 0; j < 130; j++)
			tt[i * 130 + j] = tv(i, j);
	write_st(name, t, sizeof(t) / sizeof(t[0]));
}

static struct wd_source *open_src(const char *name, const char *file)
{
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct wd_source *src = NULL;
	weightd_error err;
	char path[256];
	int r;

	path_of(path, sizeof(path), file);
	r = wd_source_open(name, path, &lim, &src, &err);
	if (r < 0)
		print_message("open %s: %s\n", path, err.message);
	assert_int_equal(r, 0);
	return src;
}

static int group_setup(void **state)
{
	if (!mkdtemp(dir))
		return -1;
	make_model("model.safetensors");
	make_model("copy.safetensors");
	for (int r = 0; r < 4; r++)
		for (int k = 0; k < 2; k++) {
			uint8_t *blk = q_bytes + (r * 2 + k) * 34;
			put_le(blk, f16_pow2(-(r + k)), 2);
			for (int m = 0; m < 32; m++)
				blk[2 + m] = (uint8_t)(int8_t)(m - 16 + r);
		}
	write_gguf("quant.gguf", "q", 4, 64, 8 /* Q8_0 */, q_bytes, sizeof(q_bytes));
	model = open_src("model", "model.safetensors");
	model2 = open_src("model-again", "model.safetensors");
	quant = open_src("quant", "quant.gguf");
	return 0;
}

static int group_teardown(void **state)
{
	char path[256];
	const char *files[] = { "model.safetensors", "copy.safetensors", "quant.gguf",
				"victim.safetensors", "victim.new" };

	wd_source_free(model);
	wd_source_free(model2);
	wd_source_free(quant);
	wd_source_free(victim);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		path_of(path, sizeof(path), files[i]);
		unlink(path);
	}
	return rmdir(dir);
}

/* ---- resolver --------------------------------------------------------------------------------- */

static struct wd_source *copy_src;

static int lookup(void *ctx, const char *ck, const struct wd_source **ret, weightd_error *err)
{
	struct { const char *name; struct wd_source *src; } reg[] = {
		{ "model", model }, { "model-again", model2 }, { "quant", quant },
		{ "victim", victim }, { "copy", copy_src },
	};

	for (size_t i = 0; i < sizeof(reg) / sizeof(reg[0]); i++)
		if (reg[i].src && strcmp(reg[i].name, ck) == 0) {
			*ret = reg[i].src;
			return 0;
		}
	return wd_error_set(err, WEIGHTD_E_UNKNOWN_SOURCE, "no checkpoint is called \"%s\"", ck);
}

static const struct wd_resolver resolver = { NULL, lookup };

/* ---- recipe builder --------------------------------------------------------------------------- */

#define RB_MAX 300

struct rb {
	struct wd_rnode n[RB_MAX];
	uint32_t in[RB_MAX][8];
	size_t len;
};

static struct wd_selection FULL(void)
{
	struct wd_selection s = { .kind = WD_SEL_FULL };
	return s;
}

static struct wd_selection RANGE(uint32_t axis, uint64_t start, uint64_t end)
{
	struct wd_selection s = { .kind = WD_SEL_RANGE, .axis = axis, .start = start, .end = end };
	return s;
}

static struct wd_selection SHARD(uint32_t axis, uint32_t rank, uint32_t world)
{
	struct wd_selection s = { .kind = WD_SEL_SHARD, .axis = axis, .rank = rank, .world = world };
	return s;
}

static struct wd_selection INDICES(uint32_t axis, const uint64_t *idx, size_t n)
{
	struct wd_selection s = { .kind = WD_SEL_INDICES, .axis = axis, .indices = idx, .n_indices = n };
	return s;
}

static struct wd_selection ELEMENTS(uint64_t start, uint64_t end, int ndim, ...)
{
	struct wd_selection s = { .kind = WD_SEL_ELEMENTS, .start = start, .end = end, .ndim = ndim };
	va_list ap;

	va_start(ap, ndim);
	for (int i = 0; i < ndim; i++)
		s.shape[i] = va_arg(ap, uint64_t);
	va_end(ap);
	return s;
}

static struct wd_rnode *rb_add(struct rb *b, enum wd_op op, int nin, va_list *ap)
{
	struct wd_rnode *n;

	assert_true(b->len < RB_MAX);
	n = &b->n[b->len];
	memset(n, 0, sizeof(*n));
	n->op = op;
	n->inputs = b->in[b->len];
	n->n_inputs = (size_t)nin;
	for (int i = 0; i < nin; i++)
		b->in[b->len][i] = va_arg(*ap, uint32_t);
	b->len++;
	return n;
}

static uint32_t r_src(struct rb *b, const char *ck, const char *t, struct wd_selection sel)
{
	struct wd_rnode *n = rb_add(b, WD_OP_SOURCE, 0, NULL);
	n->checkpoint = ck;
	n->tensor = t;
	n->sel = sel;
	return (uint32_t)b->len - 1;
}

static uint32_t r_sel(struct rb *b, uint32_t in, struct wd_selection sel)
{
	struct wd_rnode *n = rb_add(b, WD_OP_SELECT, 0, NULL);
	b->in[b->len - 1][0] = in;
	n->n_inputs = 1;
	n->sel = sel;
	return (uint32_t)b->len - 1;
}

static uint32_t r_join(struct rb *b, enum wd_op op, int32_t axis, int nin, ...)
{
	va_list ap;
	struct wd_rnode *n;

	va_start(ap, nin);
	n = rb_add(b, op, nin, &ap);
	va_end(ap);
	n->axis = axis;
	return (uint32_t)b->len - 1;
}

static uint32_t r_one(struct rb *b, enum wd_op op, uint32_t in)
{
	struct wd_rnode *n = rb_add(b, op, 0, NULL);
	b->in[b->len - 1][0] = in;
	n->n_inputs = 1;
	return (uint32_t)b->len - 1;
}

static uint32_t r_shape(struct rb *b, enum wd_op op, uint32_t in, enum wd_dtype dt, int ndim, ...)
{
	uint32_t i = r_one(b, op, in);
	va_list ap;

	va_start(ap, ndim);
	b->n[i].ndim = ndim;
	for (int d = 0; d < ndim; d++)
		b->n[i].shape[d] = va_arg(ap, uint64_t);
	va_end(ap);
	b->n[i].dtype = dt;
	return i;
}

#define r_reshape(b, in, ndim, ...) r_shape(b, WD_OP_RESHAPE, in, WD_DTYPE_INVALID, ndim, __VA_ARGS__)
#define r_view(b, in, dt, ndim, ...) r_shape(b, WD_OP_VIEW, in, dt, ndim, __VA_ARGS__)

static uint32_t r_transpose(struct rb *b, uint32_t in, int n, ...)
{
	uint32_t i = r_one(b, WD_OP_TRANSPOSE, in);
	va_list ap;

	va_start(ap, n);
	b->n[i].n_perm = n;
	for (int d = 0; d < n; d++)
		b->n[i].perm[d] = va_arg(ap, uint32_t);
	va_end(ap);
	return i;
}

static uint32_t r_cast(struct rb *b, uint32_t in, enum wd_dtype dt)
{
	uint32_t i = r_one(b, WD_OP_CAST, in);
	b->n[i].dtype = dt;
	return i;
}

static int preflight(struct rb *b, const struct wd_recipe_limits *lim, struct wd_plan **ret,
		     weightd_error *err)
{
	struct wd_recipe r = { b->n, b->len };
	return wd_recipe_preflight(&r, &resolver, lim, ret, err);
}

/* ---- running a plan --------------------------------------------------------------------------- */

/* Execute into a memfd-backed sink, hashing inline or (pipeline) on the scratch's hasher thread
 * as the daemon does; the output bytes in *ret (malloc'd). */
static int execute(const struct wd_plan *p, size_t scratch_bytes, bool pipeline, uint8_t **ret,
		   uint64_t *ret_read, uint8_t digest[WD_DIGEST_LEN], weightd_error *err)
{
	struct wd_scratch sc;
	struct wd_sink sink;
	uint64_t n = wd_plan_nbytes(p);
	int fd = memfd_create("wd-test-recipe", MFD_CLOEXEC), r;
	uint8_t *out = malloc(n);

	assert_true(fd >= 0);
	assert_non_null(out);
	assert_int_equal(wd_scratch_init(&sc, scratch_bytes), 0);
	assert_int_equal(wd_sink_init(&sink, fd, n), 0);
	if (pipeline)
		wd_sink_pipeline(&sink, sc.hasher);
	*ret_read = 0;
	r = wd_plan_execute(p, &sink, &sc, ret_read, err);
	if (r == 0) {
		assert_int_equal(wd_sink_finish(&sink, digest, err), 0);
		assert_int_equal(pread(fd, out, n, 0), (ssize_t)n);
		*ret = out;
	} else {
		wd_sink_abort(&sink);
		free(out);
	}
	wd_scratch_free(&sc);
	close(fd);
	return r;
}

/*
 * The output produced in three ranges cut at arbitrary offsets, last range first, each into its
 * own sink at its offset of one file (as workers filling one weight at once do): the file holds
 * exactly `want`, and each range's sink gives the XXH3-128 of that range's bytes.
 */
static void expect_ranges(const struct wd_plan *p, const void *want, size_t nbytes)
{
	uint64_t cut[4] = { 0, nbytes / 3, nbytes - nbytes / 5, nbytes };
	int fd = memfd_create("wd-test-ranges", MFD_CLOEXEC);
	uint8_t *out = malloc(nbytes ? nbytes : 1);
	struct wd_scratch sc;
	weightd_error err;

	assert_true(fd >= 0);
	assert_non_null(out);
	assert_int_equal(wd_scratch_init(&sc, 64), 0);
	assert_int_equal(ftruncate(fd, (off_t)nbytes), 0);
	for (int k = 2; k >= 0; k--) {
		uint64_t len = cut[k + 1] - cut[k], read = 0;
		uint8_t digest[WD_DIGEST_MAX], expect[16];
		struct wd_sink sink;
		XXH128_canonical_t canon;
		int r;

		assert_int_equal(wd_sink_init_range(&sink, fd, cut[k], len, WD_DIGEST_XXH3_128), 0);
		r = wd_plan_execute_range(p, cut[k], len, &sink, &sc, &read, &err);
		if (r < 0)
			print_message("range %llu+%llu: %s\n", (unsigned long long)cut[k],
				      (unsigned long long)len, err.message);
		assert_int_equal(r, 0);
		assert_int_equal(wd_sink_finish(&sink, digest, &err), 0);
		XXH128_canonicalFromHash(&canon, XXH3_128bits((const uint8_t *)want + cut[k], len));
		memcpy(expect, canon.digest, 16);
		assert_memory_equal(digest, expect, 16);
	}
	assert_int_equal(pread(fd, out, nbytes, 0), (ssize_t)nbytes);
	assert_memory_equal(out, want, nbytes);
	wd_scratch_free(&sc);
	free(out);
	close(fd);
}

/*
 * Preflight and run b; the output must be dtype/shape with exactly the bytes `want` (its digest
 * too, and the same bytes when made in ranges), with exactly `want_read` checkpoint bytes read, under several scratch sizes (odd small
 * ones split every piece across chunks).
 */
static void expect_result(struct rb *b, enum wd_dtype dt, int ndim, const uint64_t *shape,
			  const void *want, size_t nbytes, uint64_t want_read)
{
	static const size_t scratch[] = { 4u << 20, 13, 64 };
	struct wd_plan *p = NULL;
	weightd_error err;
	uint8_t want_digest[16];
	XXH128_canonical_t canon;
	int r = preflight(b, NULL, &p, &err);

	if (r < 0)
		print_message("preflight: %s\n", err.message);
	assert_int_equal(r, 0);
	assert_int_equal(wd_plan_dtype(p), dt);
	assert_int_equal(wd_plan_ndim(p), ndim);
	assert_memory_equal(wd_plan_shape(p), shape, sizeof(uint64_t) * (size_t)ndim);
	assert_int_equal(wd_plan_nbytes(p), nbytes);
	assert_int_equal(wd_plan_read_bytes(p), want_read);
	/* the default digest, XXH3-128 in canonical bytes, from libxxhash itself (these outputs
	 * are below one digest chunk: the plain hash of the bytes) */
	assert_true(nbytes <= WD_DIGEST_CHUNK);
	XXH128_canonicalFromHash(&canon, XXH3_128bits(want, nbytes));
	memcpy(want_digest, canon.digest, sizeof(want_digest));
	for (size_t k = 0; k < 2 * sizeof(scratch) / sizeof(scratch[0]); k++) {
		uint8_t *out = NULL, digest[WD_DIGEST_LEN];
		uint64_t got_read;
		size_t bytes = scratch[k / 2];

		r = execute(p, bytes, k % 2, &out, &got_read, digest, &err);
		if (r < 0)
			print_message("execute (scratch %zu%s): %s\n", bytes, k % 2 ? ", pipelined" : "",
				      err.message);
		assert_int_equal(r, 0);
		assert_memory_equal(out, want, nbytes);
		assert_memory_equal(digest, want_digest, sizeof(want_digest));
		assert_int_equal(got_read, want_read);
		free(out);
	}
	expect_ranges(p, want, nbytes);
	wd_plan_free(p);
}

/* Preflight must fail with `code` about recipe node `node` (0-based), its message naming it. */
static void expect_error(struct rb *b, const struct wd_recipe_limits *lim, int code, uint32_t node,
			 const char *needle)
{
	struct wd_plan *p = NULL;
	weightd_error err;
	char head[64];
	int r = preflight(b, lim, &p, &err);

	if (r != -code || (int)err.node != (int)node + 1 || !strstr(err.message, needle))
		print_message("want %s at node %u (\"%s\"); got %d at node %u: %s\n",
			      wd_code_name(code), node, needle, r, err.node, err.message);
	assert_int_equal(r, -code);
	assert_int_equal(err.code, code);
	assert_null(p);
	assert_int_equal(err.node, node + 1);
	snprintf(head, sizeof(head), "node %u (", node);
	assert_non_null(strstr(err.message, head));
	assert_non_null(strstr(err.message, needle));
}

/* ---- preflight errors ------------------------------------------------------------------------- */

static void test_error_unknown_source_and_tensor(void **state)
{
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	weightd_error err;

	r_src(&b, "model", "a", FULL());
	r_src(&b, "nope", "a", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	expect_error(&b, NULL, WEIGHTD_E_UNKNOWN_SOURCE, 1, "nope");
	preflight(&b, NULL, &p, &err);
	assert_string_equal(err.checkpoint, "nope");

	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "missing", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	expect_error(&b, NULL, WEIGHTD_E_UNKNOWN_TENSOR, 1, "missing");
	preflight(&b, NULL, &p, &err);
	assert_string_equal(err.checkpoint, "model");
	assert_string_equal(err.tensor, "missing");
}

static void test_error_inputs(void **state)
{
	struct rb b = { .len = 0 };

	r_src(&b, "model", "a", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 0);
	expect_error(&b, NULL, WEIGHTD_E_EMPTY_INPUTS, 1, "concat");

	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_join(&b, WD_OP_STACK, 0, 0);
	expect_error(&b, NULL, WEIGHTD_E_EMPTY_INPUTS, 1, "at least one");

	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_one(&b, WD_OP_CAST, 0);
	b.n[1].n_inputs = 0;
	expect_error(&b, NULL, WEIGHTD_E_EMPTY_INPUTS, 1, "cast");

	/* An input that is the node itself or comes later. */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	expect_error(&b, NULL, WEIGHTD_E_INVALID_ARGUMENT, 1, "does not come before");
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_cast(&b, 2, WD_F32);
	r_cast(&b, 0, WD_F32);
	expect_error(&b, NULL, WEIGHTD_E_INVALID_ARGUMENT, 1, "node 2");
}

static void test_error_dtype_shape_axis(void **state)
{
	struct rb b = { .len = 0 };

	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "h", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	expect_error(&b, NULL, WEIGHTD_E_DTYPE_MISMATCH, 2, "U16");

	/* a [4,6] and c [2,6] join on axis 0 but not on axis 1, nor stack. */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "c", FULL());
	r_join(&b, WD_OP_CONCAT, 1, 2, 0u, 1u);
	{
		struct wd_plan *p = NULL;
		weightd_error err;
		expect_error(&b, NULL, WEIGHTD_E_SHAPE_MISMATCH, 2, "axis 0");
		preflight(&b, NULL, &p, &err);
		assert_int_equal(err.axis, 0);
		assert_int_equal(err.expected, 4);
		assert_int_equal(err.actual, 2);
	}
	b.n[2].op = WD_OP_STACK;
	b.n[2].axis = 0;
	expect_error(&b, NULL, WEIGHTD_E_SHAPE_MISMATCH, 2, "equal shapes");
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "w", RANGE(0, 0, 1));
	r_reshape(&b, 1, 1, (uint64_t)3);
	r_view(&b, 2, WD_F32, 1, (uint64_t)3);
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 3u);
	expect_error(&b, NULL, WEIGHTD_E_SHAPE_MISMATCH, 4, "dimensions");

	/* Join axes: concat on [-2, 2), stack on [-3, 3) for 2-d inputs. */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_CONCAT, 2, 2, 0u, 1u);
	expect_error(&b, NULL, WEIGHTD_E_AXIS_OUT_OF_RANGE, 2, "axis 2");
	b.n[2].axis = -3;
	expect_error(&b, NULL, WEIGHTD_E_AXIS_OUT_OF_RANGE, 2, "axis -3");
	b.n[2].op = WD_OP_STACK;
	b.n[2].axis = 3;
	expect_error(&b, NULL, WEIGHTD_E_AXIS_OUT_OF_RANGE, 2, "axis 3");
	b.n[2].axis = -4;
	expect_error(&b, NULL, WEIGHTD_E_AXIS_OUT_OF_RANGE, 2, "axis -4");
	/* A 0-d tensor has no axis to concatenate on. */
	b.len = 0;
	r_src(&b, "model", "s", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 0u);
	expect_error(&b, NULL, WEIGHTD_E_AXIS_OUT_OF_RANGE, 1, "axis 0");
	/* A selection's axis beyond the input. */
	b.len = 0;
	r_src(&b, "model", "a", RANGE(2, 0, 1));
	expect_error(&b, NULL, WEIGHTD_E_AXIS_OUT_OF_RANGE, 0, "axis 2");
}

static void test_error_counts_and_perm(void **state)
{
	struct rb b = { .len = 0 };

	r_src(&b, "model", "a", FULL());
	r_reshape(&b, 0, 2, (uint64_t)5, (uint64_t)5);
	expect_error(&b, NULL, WEIGHTD_E_ELEMENT_COUNT_MISMATCH, 1, "25 elements");
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_view(&b, 0, WD_F16, 2, (uint64_t)4, (uint64_t)6);
	expect_error(&b, NULL, WEIGHTD_E_BYTE_COUNT_MISMATCH, 1, "48 bytes");
	b.len = 0;
	r_src(&b, "model", "a", ELEMENTS(0, 10, 2, (uint64_t)3, (uint64_t)3));
	expect_error(&b, NULL, WEIGHTD_E_ELEMENT_COUNT_MISMATCH, 0, "holds 9");

	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_transpose(&b, 0, 2, 0u, 0u);
	expect_error(&b, NULL, WEIGHTD_E_NOT_A_PERMUTATION, 1, "twice");
	b.n[1].perm[1] = 2;
	expect_error(&b, NULL, WEIGHTD_E_NOT_A_PERMUTATION, 1, "not an axis");
	b.n[1].n_perm = 3;
	expect_error(&b, NULL, WEIGHTD_E_NOT_A_PERMUTATION, 1, "3 entries");
}

/*
 * A selection that takes nothing from an axis that has rows is a mistake (typically a world size
 * above the row count) and is refused as zero-sized; an output of no elements is otherwise valid.
 */
static void test_error_zero_sized(void **state)
{
	struct rb b = { .len = 0 };

	r_src(&b, "model", "a", RANGE(1, 2, 2));
	expect_error(&b, NULL, WEIGHTD_E_ZERO_SIZED, 0,
		     "the range 2:2 on axis 1 is empty (the axis has 6 rows)");
	b.len = 0;
	r_src(&b, "model", "a", SHARD(0, 3, 5));  /* 4 rows over 5 ranks: rank 4 gets none */
	b.n[0].sel.rank = 4;
	expect_error(&b, NULL, WEIGHTD_E_ZERO_SIZED, 0, "gets nothing");
	b.len = 0;
	r_src(&b, "model", "a", INDICES(0, NULL, 0));
	expect_error(&b, NULL, WEIGHTD_E_ZERO_SIZED, 0, "the index list is empty (axis 0 has 4 rows)");
	b.len = 0;
	r_src(&b, "model", "a", ELEMENTS(3, 3, 1, (uint64_t)0));
	expect_error(&b, NULL, WEIGHTD_E_ZERO_SIZED, 0,
		     "elements 3:3 are empty (the input has 24 elements)");
	/* a zero dimension that does not hold the input's elements is a count mismatch */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_reshape(&b, 0, 3, (uint64_t)4, (uint64_t)0, (uint64_t)6);
	expect_error(&b, NULL, WEIGHTD_E_ELEMENT_COUNT_MISMATCH, 1,
		     "holds 0 elements but the input has 24");
}

/* Zero-element tensors and everything derived from them are 0-byte weights, read from nowhere. */
static void test_zero_elements_are_valid_outputs(void **state)
{
	struct rb b = { .len = 0 };
	const uint64_t s0[] = { 0 }, s30[] = { 3, 0 }, s03[] = { 0, 3 }, s20[] = { 2, 0 };
	uint32_t z, z2;

	(void)state;
	r_src(&b, "model", "z", FULL());
	expect_result(&b, WD_U8, 1, s0, "", 0, 0);
	r_cast(&b, 0, WD_F32);
	expect_result(&b, WD_F32, 1, s0, "", 0, 0);
	b.len = 0;
	z = r_src(&b, "model", "z", FULL());
	z = r_reshape(&b, z, 2, (uint64_t)3, (uint64_t)0);
	expect_result(&b, WD_U8, 2, s30, "", 0, 0);
	r_transpose(&b, z, 2, 1u, 0u);
	expect_result(&b, WD_U8, 2, s03, "", 0, 0);
	b.len = 0;
	z = r_src(&b, "model", "z", FULL());
	z2 = r_src(&b, "model", "z", RANGE(0, 0, 0));
	r_join(&b, WD_OP_CONCAT, 0, 2, z, z2);
	expect_result(&b, WD_U8, 1, s0, "", 0, 0);
	b.len = 0;
	z = r_src(&b, "model", "z", SHARD(0, 2, 4));  /* every rank of an empty axis gets nothing */
	z2 = r_src(&b, "model", "z", INDICES(0, NULL, 0));
	r_join(&b, WD_OP_STACK, 0, 2, z, z2);
	expect_result(&b, WD_U8, 2, s20, "", 0, 0);
	b.len = 0;
	r_src(&b, "model", "z", ELEMENTS(0, 0, 2, (uint64_t)3, (uint64_t)0));
	expect_result(&b, WD_U8, 2, s30, "", 0, 0);
}

/* Float (or block) to integer or BOOL drops the fraction: refused unless the cast says
 * truncate; float narrowing and integer casts stay allowed. */
/* An even shard refuses an axis that does not divide by world and says which rule it applied;
 * one that divides is the same as the default's. */
static void test_error_even_shard(void **state)
{
	struct rb b = { .len = 0 };
	struct wd_selection s = SHARD(0, 1, 3);
	struct wd_plan *p = NULL;
	weightd_error err;

	(void)state;
	s.even = true;
	r_src(&b, "model", "w", s); /* w [10,3] */
	expect_error(&b, NULL, WEIGHTD_E_SHAPE_MISMATCH, 0,
		     "even shard: rows 10 of axis 0 do not divide by world 3");
	expect_error(&b, NULL, WEIGHTD_E_SHAPE_MISMATCH, 0, "torch.tensor_split");
	/* the default split takes it, 4/3/3 */
	b.len = 0;
	r_src(&b, "model", "w", SHARD(0, 1, 3));
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	wd_plan_free(p);
	p = NULL;
	/* 10 rows over 2 ranks divide */
	b.len = 0;
	s = SHARD(0, 1, 2);
	s.even = true;
	r_src(&b, "model", "w", s);
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	wd_plan_free(p);
}

static void test_error_lossy_cast(void **state)
{
	static const enum wd_dtype lossy[] = { WD_U8, WD_BOOL, WD_I32, WD_I64 };
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	weightd_error err;

	(void)state;
	for (size_t k = 0; k < sizeof(lossy) / sizeof(lossy[0]); k++) {
		b.len = 0;
		r_src(&b, "model", "a", FULL());
		r_cast(&b, 0, WD_BF16);
		r_cast(&b, 1, lossy[k]);
		expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED_CAST, 2, "loses the fraction");
		expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED_CAST, 2, "\"truncate\": true");
		b.n[2].truncate = true;
		assert_int_equal(preflight(&b, NULL, &p, &err), 0);
		wd_plan_free(p);
		p = NULL;
	}
	b.len = 0;
	r_src(&b, "quant", "q", FULL());
	r_cast(&b, 0, WD_I8);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED_CAST, 1, "from Q8_0 to I8 loses the fraction");
	/* narrowing floats, and integers to anything, are what users ask for */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_cast(&b, 0, WD_F8_E4M3);
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	wd_plan_free(p);
	p = NULL;
	b.len = 0;
	r_src(&b, "model", "w", FULL());
	r_cast(&b, 0, WD_U8);
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	wd_plan_free(p);
}

static void test_error_cast_overflow(void **state)
{
	struct rb b = { .len = 0 };

	r_src(&b, "model", "a", FULL());
	r_cast(&b, 0, WD_Q4_0);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED_CAST, 1, "from F32 to Q4_0");
	b.len = 0;
	r_src(&b, "quant", "q", FULL());
	r_cast(&b, 0, WD_Q4_0);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED_CAST, 1, "from Q8_0 to Q4_0");

	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_reshape(&b, 0, 3, (uint64_t)1 << 32, (uint64_t)1 << 32, (uint64_t)2);
	expect_error(&b, NULL, WEIGHTD_E_OVERFLOW, 1, "2^64");
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_view(&b, 0, WD_F64, 2, (uint64_t)1 << 62, (uint64_t)2);
	expect_error(&b, NULL, WEIGHTD_E_OVERFLOW, 1, "2^64");
}

static void test_error_limits(void **state)
{
	struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	weightd_error err;
	static uint64_t idx[8];

	/* Too deep: a chain of casts is depth 1 + n. */
	r_src(&b, "model", "a", FULL());
	for (uint32_t i = 0; i < 4; i++)
		r_cast(&b, i, WD_F32);
	lim.max_depth = 4;
	expect_error(&b, &lim, WEIGHTD_E_RECIPE_TOO_DEEP, 4, "5 operations deep");
	lim.max_depth = 5;
	assert_int_equal(preflight(&b, &lim, &p, &err), 0);
	wd_plan_free(p);
	p = NULL;

	/* Too many nodes: the error names the first node past the limit. */
	lim = (struct wd_recipe_limits)WD_RECIPE_LIMITS_DEFAULT;
	lim.max_nodes = 4;
	expect_error(&b, &lim, WEIGHTD_E_RECIPE_TOO_LARGE, 4, "5 nodes");

	/* Output too large. */
	lim = (struct wd_recipe_limits)WD_RECIPE_LIMITS_DEFAULT;
	lim.max_output_bytes = 95;
	expect_error(&b, &lim, WEIGHTD_E_RECIPE_TOO_LARGE, 4, "96 bytes");

	/* Too many indices in all. */
	lim = (struct wd_recipe_limits)WD_RECIPE_LIMITS_DEFAULT;
	lim.max_indices = 10;
	b.len = 0;
	r_src(&b, "model", "a", INDICES(0, idx, 6));
	r_sel(&b, 0, INDICES(1, idx, 5));
	expect_error(&b, &lim, WEIGHTD_E_RECIPE_TOO_LARGE, 1, "indices");
	lim.max_indices = 11;
	assert_int_equal(preflight(&b, &lim, &p, &err), 0);
	wd_plan_free(p);
	p = NULL;

	/* Working memory: a transpose holds its input (96 bytes) in memory. */
	lim = (struct wd_recipe_limits)WD_RECIPE_LIMITS_DEFAULT;
	lim.max_temp_bytes = 95;
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_transpose(&b, 0, 2, 1u, 0u);
	expect_error(&b, &lim, WEIGHTD_E_RECIPE_TOO_LARGE, 1, "working memory");
	lim.max_temp_bytes = 96;
	assert_int_equal(preflight(&b, &lim, &p, &err), 0);
	wd_plan_free(p);
}

static void test_error_selection_range(void **state)
{
	static const uint64_t idx[] = { 1, 4, 2 };
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	weightd_error err;

	r_src(&b, "model", "a", RANGE(1, 2, 7));
	expect_error(&b, NULL, WEIGHTD_E_OUT_OF_RANGE, 0, "2:7");
	preflight(&b, NULL, &p, &err);
	assert_int_equal(err.axis, 1);
	assert_int_equal(err.expected, 6);
	assert_int_equal(err.actual, 7);
	b.n[0].sel = RANGE(0, 3, 1);
	expect_error(&b, NULL, WEIGHTD_E_OUT_OF_RANGE, 0, "3:1");
	b.n[0].sel = INDICES(0, idx, 3);
	expect_error(&b, NULL, WEIGHTD_E_OUT_OF_RANGE, 0, "index 1 is 4");
	b.n[0].sel = SHARD(0, 4, 4);
	expect_error(&b, NULL, WEIGHTD_E_OUT_OF_RANGE, 0, "rank 4");
	b.n[0].sel = SHARD(0, 0, 0);
	expect_error(&b, NULL, WEIGHTD_E_INVALID_ARGUMENT, 0, "world");
	b.n[0].sel = ELEMENTS(20, 26, 1, (uint64_t)6);
	expect_error(&b, NULL, WEIGHTD_E_OUT_OF_RANGE, 0, "20:26");
	/* The same through a select node. */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_sel(&b, 0, RANGE(0, 0, 5));
	expect_error(&b, NULL, WEIGHTD_E_OUT_OF_RANGE, 1, "0:5");
}

static void test_error_blocks(void **state)
{
	static const uint64_t idx[] = { 0, 1 };
	struct rb b = { .len = 0 };

	r_src(&b, "quant", "q", RANGE(1, 0, 16));
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED, 0, "whole blocks");
	b.n[0].sel = INDICES(1, idx, 2);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED, 0, "split blocks");
	b.n[0].sel = ELEMENTS(0, 48, 2, (uint64_t)3, (uint64_t)16);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED, 0, "whole blocks");
	b.n[0].sel = SHARD(1, 2, 4);   /* 2 blocks over 4 ranks */
	expect_error(&b, NULL, WEIGHTD_E_ZERO_SIZED, 0, "blocks");
	b.len = 0;
	r_src(&b, "quant", "q", FULL());
	r_transpose(&b, 0, 2, 1u, 0u);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED, 1, "innermost");
	b.len = 0;
	r_src(&b, "quant", "q", FULL());
	r_reshape(&b, 0, 2, (uint64_t)256, (uint64_t)1);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED, 1, "whole blocks");
	b.len = 0;
	r_src(&b, "quant", "q", FULL());
	r_join(&b, WD_OP_STACK, 2, 2, 0u, 0u);
	expect_error(&b, NULL, WEIGHTD_E_UNSUPPORTED, 1, "whole blocks");
}

/* ---- results against independent arithmetic --------------------------------------------------- */

static void test_source_selections(void **state)
{
	static const uint64_t rows[] = { 3, 0, 3 }, cols[] = { 5, 0, 2 };
	uint64_t shape[3];
	float f[64];
	struct rb b = { .len = 0 };
	int n;

	/* Full tensor. */
	r_src(&b, "model", "a", FULL());
	for (int i = 0; i < 24; i++)
		f[i] = av(i / 6, i % 6);
	shape[0] = 4, shape[1] = 6;
	expect_result(&b, WD_F32, 2, shape, f, 96, 96);

	/* Range on the inner axis. */
	b.len = 0;
	r_src(&b, "model", "a", RANGE(1, 1, 4));
	n = 0;
	for (int i = 0; i < 4; i++)
		for (int j = 1; j < 4; j++)
			f[n++] = av(i, j);
	shape[0] = 4, shape[1] = 3;
	expect_result(&b, WD_F32, 2, shape, f, 48, 48);

	/* A select of a select: rows 1:3 of columns 1:4. */
	r_sel(&b, 0, RANGE(0, 1, 3));
	n = 0;
	for (int i = 1; i < 3; i++)
		for (int j = 1; j < 4; j++)
			f[n++] = av(i, j);
	shape[0] = 2;
	expect_result(&b, WD_F32, 2, shape, f, 24, 24);

	/* Indices, repeated, on each axis. */
	b.len = 0;
	r_src(&b, "model", "a", INDICES(0, rows, 3));
	n = 0;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < 6; j++)
			f[n++] = av((int)rows[k], j);
	shape[0] = 3, shape[1] = 6;
	expect_result(&b, WD_F32, 2, shape, f, 72, 72);
	b.len = 0;
	r_src(&b, "model", "a", INDICES(1, cols, 3));
	n = 0;
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 3; k++)
			f[n++] = av(i, (int)cols[k]);
	shape[0] = 4, shape[1] = 3;
	expect_result(&b, WD_F32, 2, shape, f, 48, 48);

	/* A run of elements with its own shape. */
	b.len = 0;
	r_src(&b, "model", "a", ELEMENTS(5, 17, 2, (uint64_t)3, (uint64_t)4));
	for (int k = 0; k < 12; k++)
		f[k] = av((5 + k) / 6, (5 + k) % 6);
	shape[0] = 3, shape[1] = 4;
	expect_result(&b, WD_F32, 2, shape, f, 48, 48);

	/* A 0-d tensor. */
	b.len = 0;
	r_src(&b, "model", "s", FULL());
	f[0] = 7.0f;
	expect_result(&b, WD_F32, 0, shape, f, 4, 4);
}

static void test_shard(void **state)
{
	/* w [10,3] over 4 ranks: torch.tensor_split gives rows 3,3,2,2. */
	static const int sizes[] = { 3, 3, 2, 2 };
	int32_t want[30], all[30];
	uint64_t shape[2] = { 0, 3 };
	size_t filled = 0;
	int row0 = 0;

	for (int r = 0; r < 4; r++) {
		struct rb b = { .len = 0 };
		struct wd_plan *p = NULL;
		weightd_error err;
		uint8_t *out, digest[WD_DIGEST_LEN];
		uint64_t got;
		int n = 0;

		r_src(&b, "model", "w", SHARD(0, (uint32_t)r, 4));
		for (int i = row0; i < row0 + sizes[r]; i++)
			for (int j = 0; j < 3; j++)
				want[n++] = wv(i, j);
		shape[0] = (uint64_t)sizes[r];
		expect_result(&b, WD_I32, 2, shape, want, (size_t)n * 4, (uint64_t)n * 4);
		row0 += sizes[r];
		assert_int_equal(preflight(&b, NULL, &p, &err), 0);
		assert_int_equal(execute(p, 1 << 20, true, &out, &got, digest, &err), 0);
		memcpy((uint8_t *)all + filled, out, wd_plan_nbytes(p));
		filled += wd_plan_nbytes(p);
		free(out);
		wd_plan_free(p);
	}
	/* The ranks concatenated are the whole tensor. */
	assert_int_equal(filled, sizeof(all));
	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 3; j++)
			assert_int_equal(all[i * 3 + j], wv(i, j));

	/* The inner axis: 6 columns of a over 4 ranks are 2,2,1,1. */
	{
		static const int cs[] = { 2, 2, 1, 1 }, c0[] = { 0, 2, 4, 5 };
		for (int r = 0; r < 4; r++) {
			struct rb b = { .len = 0 };
			float f[8];
			int n = 0;
			r_src(&b, "model", "a", FULL());
			r_sel(&b, 0, SHARD(1, (uint32_t)r, 4));
			for (int i = 0; i < 4; i++)
				for (int j = c0[r]; j < c0[r] + cs[r]; j++)
					f[n++] = av(i, j);
			shape[0] = 4, shape[1] = (uint64_t)cs[r];
			expect_result(&b, WD_F32, 2, shape, f, (size_t)n * 4, (uint64_t)n * 4);
		}
	}
}

static void test_concat_stack(void **state)
{
	float f[96];
	uint64_t shape[3];
	struct rb b = { .len = 0 };
	int n = 0;

	/* Axis 0: a then c. */
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "c", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			f[n++] = i < 4 ? av(i, j) : cv(i - 4, j);
	shape[0] = 6, shape[1] = 6;
	expect_result(&b, WD_F32, 2, shape, f, 144, 144);

	/* Axis -1 (= 1): a, b, a. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_CONCAT, -1, 3, 0u, 1u, 0u);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 18; j++)
			f[n++] = j < 6 ? av(i, j) : j < 12 ? bv(i, j - 6) : av(i, j - 12);
	shape[0] = 4, shape[1] = 18;
	expect_result(&b, WD_F32, 2, shape, f, 288, 288);

	/* Stack on each of the three possible axes. */
	for (int axis = 0; axis < 3; axis++) {
		b.len = 0;
		n = 0;
		r_src(&b, "model", "a", FULL());
		r_src(&b, "model", "b", FULL());
		r_join(&b, WD_OP_STACK, axis, 2, 0u, 1u);
		uint64_t d[3] = { 4, 6, 0 };
		for (int k = 2; k > axis; k--)
			d[k] = d[k - 1];
		d[axis] = 2;
		for (uint64_t x = 0; x < d[0]; x++)
			for (uint64_t y = 0; y < d[1]; y++)
				for (uint64_t z = 0; z < d[2]; z++) {
					uint64_t ix[3] = { x, y, z }, which = ix[axis], rc[2];
					for (int k = 0, m = 0; k < 3; k++)
						if (k != axis)
							rc[m++] = ix[k];
					f[n++] = which ? bv((int)rc[0], (int)rc[1]) : av((int)rc[0], (int)rc[1]);
				}
		expect_result(&b, WD_F32, 3, d, f, 192, 192);
	}

	/* Range on axis 1 of a concat on axis 1 (reads only the selected bytes). */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_CONCAT, 1, 2, 0u, 1u);
	r_sel(&b, 2, RANGE(1, 4, 9));
	for (int i = 0; i < 4; i++)
		for (int j = 4; j < 9; j++)
			f[n++] = j < 6 ? av(i, j) : bv(i, j - 6);
	shape[0] = 4, shape[1] = 5;
	expect_result(&b, WD_F32, 2, shape, f, 80, 80);
}

static void test_transpose_reshape_view(void **state)
{
	float f[96];
	uint64_t shape[3];
	uint8_t bytes[96];
	struct rb b = { .len = 0 };
	int n = 0;

	r_src(&b, "model", "a", FULL());
	r_transpose(&b, 0, 2, 1u, 0u);
	for (int j = 0; j < 6; j++)
		for (int i = 0; i < 4; i++)
			f[n++] = av(i, j);
	shape[0] = 6, shape[1] = 4;
	expect_result(&b, WD_F32, 2, shape, f, 96, 96);

	/* 3-d: stack(a, b) [2,4,6] transposed by [2,0,1] -> [6,2,4]: out[j][s][i] = (s ? b : a)[i][j]. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_STACK, 0, 2, 0u, 1u);
	r_transpose(&b, 2, 3, 2u, 0u, 1u);
	for (int j = 0; j < 6; j++)
		for (int s = 0; s < 2; s++)
			for (int i = 0; i < 4; i++)
				f[n++] = s ? bv(i, j) : av(i, j);
	shape[0] = 6, shape[1] = 2, shape[2] = 4;
	expect_result(&b, WD_F32, 3, shape, f, 192, 192);

	/* Batched swap of the last two axes: stack(a, b) [2,4,6] by [0,2,1] -> [2,6,4]. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_STACK, 0, 2, 0u, 1u);
	r_transpose(&b, 2, 3, 0u, 2u, 1u);
	for (int s = 0; s < 2; s++)
		for (int j = 0; j < 6; j++)
			for (int i = 0; i < 4; i++)
				f[n++] = s ? bv(i, j) : av(i, j);
	shape[0] = 2, shape[1] = 6, shape[2] = 4;
	expect_result(&b, WD_F32, 3, shape, f, 192, 192);

	/* Larger than one tile each way: t [70,130]^T. */
	{
		static uint16_t tw[130 * 70];
		b.len = 0;
		n = 0;
		r_src(&b, "model", "t", FULL());
		r_transpose(&b, 0, 2, 1u, 0u);
		for (int j = 0; j < 130; j++)
			for (int i = 0; i < 70; i++)
				tw[n++] = tv(i, j);
		shape[0] = 130, shape[1] = 70;
		expect_result(&b, WD_U16, 2, shape, tw, sizeof(tw), sizeof(tw));
	}

	/* A range of a transpose: rows 1:3 of a^T. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_transpose(&b, 0, 2, 1u, 0u);
	r_sel(&b, 1, RANGE(0, 1, 3));
	for (int j = 1; j < 3; j++)
		for (int i = 0; i < 4; i++)
			f[n++] = av(i, j);
	shape[0] = 2, shape[1] = 4;
	expect_result(&b, WD_F32, 2, shape, f, 32, 96);

	/* Reshape then a range on the new inner axis. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_reshape(&b, 0, 2, (uint64_t)2, (uint64_t)12);
	r_sel(&b, 1, RANGE(1, 3, 9));
	for (int r = 0; r < 2; r++)
		for (int k = 3; k < 9; k++)
			f[n++] = av((r * 12 + k) / 6, (r * 12 + k) % 6);
	shape[0] = 2, shape[1] = 6;
	expect_result(&b, WD_F32, 2, shape, f, 48, 48);

	/* View: F32 [4,6] as U16 [4,12], then columns 2:4 (the two halves of element 1). */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_view(&b, 0, WD_U16, 2, (uint64_t)4, (uint64_t)12);
	r_sel(&b, 1, RANGE(1, 2, 4));
	for (int i = 0; i < 4; i++) {
		float v = av(i, 1);
		uint32_t u;
		memcpy(&u, &v, 4);
		for (int k = 0; k < 4; k++)
			bytes[n++] = (uint8_t)(u >> (8 * k));
	}
	shape[0] = 4, shape[1] = 2;
	expect_result(&b, WD_U16, 2, shape, bytes, 16, 16);

	/* A selection over a mix of file bytes and computed bytes: concat(a, (reshape(a) [6,4])^T)
	 * on axis 1, then columns 5:8. The concat is evaluated once into memory. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_reshape(&b, 0, 2, (uint64_t)6, (uint64_t)4);
	r_transpose(&b, 1, 2, 1u, 0u);       /* t[i][j] = a_flat[j*4 + i], shape [4,6] */
	r_join(&b, WD_OP_CONCAT, 1, 2, 0u, 2u);
	r_sel(&b, 3, RANGE(1, 5, 8));
	for (int i = 0; i < 4; i++)
		for (int j = 5; j < 8; j++) {
			int k = j < 6 ? -1 : (j - 6) * 4 + i;
			f[n++] = j < 6 ? av(i, j) : av(k / 6, k % 6);
		}
	shape[0] = 4, shape[1] = 3;
	expect_result(&b, WD_F32, 2, shape, f, 48, 192);
}

static void test_quantized(void **state)
{
	uint8_t want[272];
	float f[256];
	uint64_t shape[2];
	struct rb b = { .len = 0 };
	int n = 0;

	/* Blocks are kept packed; a range on the inner axis covering the second block of each row. */
	r_src(&b, "quant", "q", RANGE(1, 32, 64));
	for (int r = 0; r < 4; r++)
		memcpy(want + r * 34, q_bytes + (r * 2 + 1) * 34, 34);
	shape[0] = 4, shape[1] = 32;
	expect_result(&b, WD_Q8_0, 2, shape, want, 136, 136);

	/* Shard of the inner axis over 2 ranks goes by blocks. */
	b.len = 0;
	r_src(&b, "quant", "q", SHARD(1, 1, 2));
	expect_result(&b, WD_Q8_0, 2, shape, want, 136, 136);

	/* Rows 1:3, reshaped to one row of 128 elements. */
	b.len = 0;
	r_src(&b, "quant", "q", RANGE(0, 1, 3));
	r_reshape(&b, 0, 1, (uint64_t)128);
	shape[0] = 128;
	expect_result(&b, WD_Q8_0, 1, shape, q_bytes + 68, 136, 136);

	/* Dequantized to F32: x = d * q, computed here from the block formula. */
	b.len = 0;
	r_src(&b, "quant", "q", FULL());
	r_cast(&b, 0, WD_F32);
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 64; c++)
			f[n++] = q_value(r, c);
	shape[0] = 4, shape[1] = 64;
	expect_result(&b, WD_F32, 2, shape, f, 1024, 272);

	/* Columns 8:24 of the dequantized tensor: not whole blocks, so the whole cast is evaluated. */
	r_sel(&b, 1, RANGE(1, 8, 24));
	n = 0;
	for (int r = 0; r < 4; r++)
		for (int c = 8; c < 24; c++)
			f[n++] = q_value(r, c);
	shape[1] = 16;
	expect_result(&b, WD_F32, 2, shape, f, 256, 272);

	/* Row 2 of the dequantized tensor: the selection moves below the cast, one row is read. */
	b.len = 0;
	n = 0;
	r_src(&b, "quant", "q", FULL());
	r_cast(&b, 0, WD_F32);
	r_sel(&b, 1, RANGE(0, 2, 3));
	for (int c = 0; c < 64; c++)
		f[n++] = q_value(2, c);
	shape[0] = 1, shape[1] = 64;
	expect_result(&b, WD_F32, 2, shape, f, 256, 68);
}

/* ---- casts (need the conversion kernels) ------------------------------------------------------ */

/* An integer 0 < |v| < 2048 as IEEE half, from the definition. */
static uint16_t f16_of_int(int v)
{
	uint16_t sign = v < 0 ? 0x8000 : 0;
	int m = v < 0 ? -v : v, e = 0;

	if (m == 0)
		return sign;
	while ((m >> e) > 1)
		e++;
	return (uint16_t)(sign | ((e + 15) << 10) | ((m << (10 - e)) & 0x3ff));
}

static void test_casts(void **state)
{
	uint16_t h[96];
	double d[24];
	float f[24];
	uint64_t shape[2] = { 4, 6 };
	struct rb b = { .len = 0 };
	int n = 0;

	/* F32 -> F16 of small integers (exact). */
	r_src(&b, "model", "a", FULL());
	r_cast(&b, 0, WD_F16);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 6; j++)
			h[n++] = f16_of_int(16 * i + j);
	expect_result(&b, WD_F16, 2, shape, h, 48, 96);

	/* F32 -> BF16: exact values, so the top half of each F32. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "b", FULL());
	r_cast(&b, 0, WD_BF16);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 6; j++) {
			float v = bv(i, j);
			uint32_t u;
			memcpy(&u, &v, 4);
			h[n++] = (uint16_t)(u >> 16);
		}
	expect_result(&b, WD_BF16, 2, shape, h, 48, 96);

	/* Round trip F32 -> F16 -> F32 of exact values is the source bytes. */
	b.len = 0;
	r_src(&b, "model", "c", FULL());
	r_cast(&b, 0, WD_F16);
	r_cast(&b, 1, WD_F32);
	for (int k = 0; k < 12; k++)
		f[k] = cv(k / 6, k % 6);
	shape[0] = 2;
	expect_result(&b, WD_F32, 2, shape, f, 48, 48);

	/* Cast of a transpose, to F64. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_transpose(&b, 0, 2, 1u, 0u);
	r_cast(&b, 1, WD_F64);
	for (int j = 0; j < 6; j++)
		for (int i = 0; i < 4; i++)
			d[n++] = av(i, j);
	shape[0] = 6, shape[1] = 4;
	expect_result(&b, WD_F64, 2, shape, d, 192, 96);

	/* Two casts joined on the inner axis: each streams through its window. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_cast(&b, 0, WD_F16);
	r_cast(&b, 1, WD_F16);
	r_join(&b, WD_OP_CONCAT, 1, 2, 2u, 3u);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 12; j++)
			h[n++] = f16_of_int(j < 6 ? 16 * i + j : 100 + 16 * i + j - 6);
	shape[0] = 4, shape[1] = 12;
	expect_result(&b, WD_F16, 2, shape, h, 96, 192);

	/* One cast used twice: evaluated once, read once. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_cast(&b, 0, WD_F16);
	r_join(&b, WD_OP_CONCAT, 1, 2, 1u, 1u);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 12; j++)
			h[n++] = f16_of_int(16 * i + j % 6);
	expect_result(&b, WD_F16, 2, shape, h, 96, 96);

	/* A view of a cast: F16 [4,6] as U8 [48]. */
	b.len = 0;
	n = 0;
	r_src(&b, "model", "a", FULL());
	r_cast(&b, 0, WD_F16);
	r_view(&b, 1, WD_U8, 1, (uint64_t)48);
	for (int k = 0; k < 24; k++)
		h[k] = f16_of_int(16 * (k / 6) + k % 6);
	shape[0] = 48;
	expect_result(&b, WD_U8, 1, shape, h, 48, 96);
}

/* shard(cast(x)) is cast(shard(x)): same key, same bytes, and only the shard is read. */
static void test_cast_and_shard(void **state)
{
	struct rb b1 = { .len = 0 }, b2 = { .len = 0 };
	struct wd_plan *p1 = NULL, *p2 = NULL;
	weightd_error err;
	uint16_t h[12];
	uint64_t shape[2] = { 2, 6 };
	int n = 0;

	r_src(&b1, "model", "a", FULL());
	r_cast(&b1, 0, WD_BF16);
	r_sel(&b1, 1, SHARD(0, 1, 2));
	r_src(&b2, "model", "a", SHARD(0, 1, 2));
	r_cast(&b2, 0, WD_BF16);
	assert_int_equal(preflight(&b1, NULL, &p1, &err), 0);
	assert_int_equal(preflight(&b2, NULL, &p2, &err), 0);
	assert_memory_equal(wd_plan_key(p1), wd_plan_key(p2), WD_DIGEST_LEN);
	for (int i = 2; i < 4; i++)
		for (int j = 0; j < 6; j++) {
			float v = av(i, j);
			uint32_t u;
			memcpy(&u, &v, 4);
			h[n++] = (uint16_t)(u >> 16);
		}
	expect_result(&b1, WD_BF16, 2, shape, h, 24, 48);
	expect_result(&b2, WD_BF16, 2, shape, h, 24, 48);
	wd_plan_free(p1);
	wd_plan_free(p2);
}

/* ---- where a plan reads (wd_plan_spans) ------------------------------------------------------- */

/* The spans of b's plan: exactly n, each of tensor want[i] of "model" from byte want_lo[i] of
 * it (row-major, as written by make_model) for want_len[i] bytes. */
static void expect_spans(struct rb *b, size_t n, const char *const *want, const uint64_t *want_lo,
			 const uint64_t *want_len)
{
	struct wd_plan *p = NULL;
	struct wd_plan_span *s = NULL;
	weightd_error err;
	size_t got = 0;

	assert_int_equal(preflight(b, NULL, &p, &err), 0);
	assert_int_equal(wd_plan_spans(p, &s, &got), 0);
	assert_int_equal(got, n);
	for (size_t i = 0; i < n; i++) {
		const struct wd_tensor_info *t = wd_source_find(model, want[i]);

		assert_non_null(t);
		assert_ptr_equal(s[i].src, model);
		assert_int_equal(s[i].file, t->file);
		assert_int_equal(s[i].off, t->offset + want_lo[i]);
		assert_int_equal(s[i].len, want_len[i]);
	}
	free(s);
	wd_plan_free(p);
}

/* t is U16 [70, 130]: a row is 260 bytes. A shard on the first axis reads its rows, a range on
 * the inner axis everything from its first column in row 0 to its last in row 69, a gather the
 * rows from its least index to its greatest, a cast (even over a selection moved below it) what
 * the selection reads, a concat each input whole. */
static void test_spans(void **state)
{
	static const uint64_t idx[] = { 9, 2, 5 };
	const char *const t1[] = { "t" }, *const ab[] = { "a", "b" };
	const uint64_t row = 260;
	struct rb b = { .len = 0 };

	(void)state;
	r_src(&b, "model", "t", SHARD(0, 1, 2));
	expect_spans(&b, 1, t1, (const uint64_t[]){ 35 * row }, (const uint64_t[]){ 35 * row });
	b.len = 0;
	r_src(&b, "model", "t", RANGE(1, 10, 20));
	expect_spans(&b, 1, t1, (const uint64_t[]){ 20 }, (const uint64_t[]){ 69 * row + 40 - 20 });
	b.len = 0;
	r_src(&b, "model", "t", INDICES(0, idx, 3));
	expect_spans(&b, 1, t1, (const uint64_t[]){ 2 * row }, (const uint64_t[]){ 8 * row });
	b.len = 0;
	r_src(&b, "model", "t", FULL());
	r_cast(&b, 0, WD_F32);
	expect_spans(&b, 1, t1, (const uint64_t[]){ 0 }, (const uint64_t[]){ 70 * row });
	b.len = 0;
	r_src(&b, "model", "t", FULL());
	r_cast(&b, 0, WD_F32);
	r_sel(&b, 1, SHARD(0, 0, 2));
	expect_spans(&b, 1, t1, (const uint64_t[]){ 0 }, (const uint64_t[]){ 35 * row });
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	expect_spans(&b, 2, ab, (const uint64_t[]){ 0, 0 }, (const uint64_t[]){ 96, 96 });
}

/* ---- identity keys ---------------------------------------------------------------------------- */

static void key_of(struct rb *b, uint8_t key[WD_DIGEST_LEN])
{
	struct wd_plan *p = NULL;
	weightd_error err;
	int r = preflight(b, NULL, &p, &err);

	if (r < 0)
		print_message("preflight: %s\n", err.message);
	assert_int_equal(r, 0);
	memcpy(key, wd_plan_key(p), WD_DIGEST_LEN);
	wd_plan_free(p);
}

static void test_keys(void **state)
{
	uint8_t k1[WD_DIGEST_LEN], k2[WD_DIGEST_LEN], k[4][WD_DIGEST_LEN];
	struct rb b = { .len = 0 };

	/* The same recipe twice. */
	r_src(&b, "model", "a", SHARD(0, 1, 4));
	key_of(&b, k1);
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);

	/* Every rank its own key. */
	for (uint32_t r = 0; r < 4; r++) {
		b.n[0].sel = SHARD(0, r, 4);
		key_of(&b, k[r]);
		for (uint32_t q = 0; q < r; q++)
			assert_memory_not_equal(k[q], k[r], WD_DIGEST_LEN);
	}
	/* A shard is the range it stands for; a select node is the same as a source selection. */
	b.n[0].sel = RANGE(0, 1, 2);
	key_of(&b, k2);
	assert_memory_equal(k[1], k2, WD_DIGEST_LEN);
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_sel(&b, 0, SHARD(0, 1, 4));
	key_of(&b, k2);
	assert_memory_equal(k[1], k2, WD_DIGEST_LEN);

	/* The same file under two checkpoint names: same key. A copy of the file: another key. */
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	key_of(&b, k1);
	b.n[0].checkpoint = "model-again";
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);
	copy_src = open_src("copy", "copy.safetensors");
	b.n[0].checkpoint = "copy";
	key_of(&b, k2);
	assert_memory_not_equal(k1, k2, WD_DIGEST_LEN);
	wd_source_free(copy_src);
	copy_src = NULL;

	/* Another tensor, another key; a whole-axis range is the full tensor; unused nodes and
	 * reshape chains do not matter. */
	b.n[0].checkpoint = "model";
	b.n[0].tensor = "b";
	key_of(&b, k2);
	assert_memory_not_equal(k1, k2, WD_DIGEST_LEN);
	b.len = 0;
	r_src(&b, "model", "h", FULL());
	r_src(&b, "model", "a", RANGE(1, 0, 6));
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_reshape(&b, 0, 1, (uint64_t)24);
	r_reshape(&b, 1, 2, (uint64_t)4, (uint64_t)6);
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);
	/* A reshape that changes the shape changes the key; so does concat order. */
	b.n[2].shape[0] = 6, b.n[2].shape[1] = 4;
	key_of(&b, k2);
	assert_memory_not_equal(k1, k2, WD_DIGEST_LEN);
	b.len = 0;
	r_src(&b, "model", "a", FULL());
	r_src(&b, "model", "b", FULL());
	r_join(&b, WD_OP_CONCAT, 0, 2, 0u, 1u);
	key_of(&b, k1);
	b.in[2][0] = 1, b.in[2][1] = 0;
	key_of(&b, k2);
	assert_memory_not_equal(k1, k2, WD_DIGEST_LEN);
	/* Index lists: order and values matter. */
	{
		static const uint64_t i1[] = { 3, 0, 3 }, i2[] = { 3, 0, 2 }, i3[] = { 0, 3, 3 };
		struct rb c = { .len = 0 };
		uint8_t a1[WD_DIGEST_LEN], a2[WD_DIGEST_LEN], a3[WD_DIGEST_LEN];
		r_src(&c, "model", "a", INDICES(0, i1, 3));
		key_of(&c, a1);
		c.n[0].sel = INDICES(0, i2, 3);
		key_of(&c, a2);
		c.n[0].sel = INDICES(0, i3, 3);
		key_of(&c, a3);
		assert_memory_not_equal(a1, a2, WD_DIGEST_LEN);
		assert_memory_not_equal(a1, a3, WD_DIGEST_LEN);
		assert_memory_not_equal(a2, a3, WD_DIGEST_LEN);
		c.n[0].sel = INDICES(0, i1, 3);
		key_of(&c, a2);
		assert_memory_equal(a1, a2, WD_DIGEST_LEN);
	}
	/* Axis -2 is axis 0. */
	b.in[2][0] = 0, b.in[2][1] = 1;
	b.n[2].axis = -2;
	key_of(&b, k2);
	assert_memory_equal(k1, k2, WD_DIGEST_LEN);
}

static void test_label(void **state)
{
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	weightd_error err;

	r_src(&b, "model", "a", RANGE(0, 0, 2));
	r_cast(&b, 0, WD_F32);
	r_transpose(&b, 1, 2, 1u, 0u);
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	assert_string_equal(wd_plan_label(p), "transpose(cast(model:a[0:2,:], F32), [1, 0])");
	assert_int_equal(wd_plan_source_count(p), 1);
	assert_ptr_equal(wd_plan_source(p, 0), model);
	wd_plan_free(p);
}

/* ---- the plan of a whole stored tensor ----------------------------------------------------------- */

/* A resolver that gives `model` whatever the name (for checkpoint names of any length). */
static int lookup_any(void *ctx, const char *ck, const struct wd_source **ret, weightd_error *err)
{
	(void)ctx;
	(void)ck;
	(void)err;
	*ret = model;
	return 0;
}

static const struct wd_resolver resolver_any = { NULL, lookup_any };

/* The key of a whole tensor as the canonical encoding defines it, hashed field by field here:
 * the tag, the LEAF operation (1), the source's identity, the tensor name, no inputs. Keys are
 * kept in state records, so this must never change. */
static void leaf_key(const struct wd_source *src, const char *tensor, uint8_t out[WD_DIGEST_LEN])
{
	static const char tag[] = "weightd.recipe.1";
	uint8_t id[32], b8[8], b4[4] = { 1, 0, 0, 0 };
	struct wd_sha256 s;

	assert_int_equal(wd_sha256_init(&s), 0);
	put_le(b8, sizeof(tag) - 1, 8);
	wd_sha256_update(&s, b8, 8);
	wd_sha256_update(&s, tag, sizeof(tag) - 1);
	wd_sha256_update(&s, b4, 4);
	wd_source_identity(src, id);
	wd_sha256_update(&s, id, sizeof(id));
	put_le(b8, strlen(tensor), 8);
	wd_sha256_update(&s, b8, 8);
	wd_sha256_update(&s, tensor, strlen(tensor));
	memset(b8, 0, 8);
	wd_sha256_update(&s, b8, 8);
	wd_sha256_final(&s, out);
}

/* wd_recipe_preflight_tensor against wd_recipe_preflight of the one-node recipe: the same key
 * (and the key of the encoding), shape, accounting, label, sources, file range and bytes. */
static void expect_same_plan(const struct wd_resolver *res, const char *ck, const char *tensor,
			     const struct wd_source *src)
{
	struct rb b = { .len = 0 };
	struct wd_recipe r;
	struct wd_plan *gen = NULL, *fast = NULL;
	const struct wd_source *gs, *fs;
	uint32_t gfile, ffile;
	uint64_t goff, foff, gread, fread;
	uint8_t want[WD_DIGEST_LEN], gd[WD_DIGEST_LEN] = { 0 }, fd[WD_DIGEST_LEN] = { 0 };
	uint8_t *gout = NULL, *fout = NULL;
	weightd_error err;
	bool granged;

	r_src(&b, ck, tensor, FULL());
	r.nodes = b.n;
	r.n_nodes = b.len;
	assert_int_equal(wd_recipe_preflight(&r, res, NULL, &gen, &err), 0);
	assert_int_equal(wd_recipe_preflight_tensor(ck, tensor, res, NULL, &fast, &err), 0);
	leaf_key(src, tensor, want);
	assert_memory_equal(wd_plan_key(gen), want, WD_DIGEST_LEN);
	assert_memory_equal(wd_plan_key(fast), want, WD_DIGEST_LEN);
	assert_int_equal(wd_plan_dtype(fast), wd_plan_dtype(gen));
	assert_int_equal(wd_plan_ndim(fast), wd_plan_ndim(gen));
	if (wd_plan_ndim(gen))
		assert_memory_equal(wd_plan_shape(fast), wd_plan_shape(gen),
				    sizeof(uint64_t) * (size_t)wd_plan_ndim(gen));
	assert_int_equal(wd_plan_nbytes(fast), wd_plan_nbytes(gen));
	assert_int_equal(wd_plan_read_bytes(fast), wd_plan_read_bytes(gen));
	assert_int_equal(wd_plan_temp_bytes(fast), wd_plan_temp_bytes(gen));
	assert_string_equal(wd_plan_label(fast), wd_plan_label(gen));
	assert_int_equal(wd_plan_source_count(fast), 1);
	assert_int_equal(wd_plan_source_count(gen), 1);
	assert_ptr_equal(wd_plan_source(fast, 0), src);
	assert_ptr_equal(wd_plan_source(gen, 0), src);
	granged = wd_plan_file_range(gen, &gs, &gfile, &goff);
	assert_int_equal(wd_plan_file_range(fast, &fs, &ffile, &foff), granged);
	if (granged) {
		assert_ptr_equal(fs, gs);
		assert_int_equal(ffile, gfile);
		assert_int_equal(foff, goff);
	}
	assert_int_equal(execute(gen, 1 << 16, false, &gout, &gread, gd, &err), 0);
	assert_int_equal(execute(fast, 1 << 16, false, &fout, &fread, fd, &err), 0);
	assert_int_equal(fread, gread);
	assert_memory_equal(fd, gd, WD_DIGEST_LEN);
	if (wd_plan_nbytes(gen))
		assert_memory_equal(fout, gout, wd_plan_nbytes(gen));
	free(gout);
	free(fout);
	wd_plan_free(gen);
	wd_plan_free(fast);
}

static void test_tensor_plan_is_the_general_plan(void **state)
{
	static const char *const names[] = { "a", "h", "w", "s", "z", "t" };
	char *long_ck = malloc(600);

	/* F32, U16, I32, a scalar, an empty tensor, a larger one; under two names of one file */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		expect_same_plan(&resolver, "model", names[i], model);
		expect_same_plan(&resolver, "model-again", names[i], model2);
	}
	/* a block type from a GGUF file */
	expect_same_plan(&resolver, "quant", "q", quant);
	/* a label too long for the plan: cut the same way */
	assert_non_null(long_ck);
	memset(long_ck, 'm', 599);
	long_ck[599] = '\0';
	expect_same_plan(&resolver_any, long_ck, "a", model);
	long_ck[509] = '\0'; /* "m...m:a" is 511 characters: one too many to fit whole */
	expect_same_plan(&resolver_any, long_ck, "a", model);
	long_ck[508] = '\0'; /* 510: fits */
	expect_same_plan(&resolver_any, long_ck, "a", model);
	free(long_ck);
}

/* Failures word the same error as the general path: code, node, message, checkpoint, tensor. */
static void expect_same_error(const char *ck, const char *tensor,
			      const struct wd_recipe_limits *lim, int code)
{
	struct rb b = { .len = 0 };
	struct wd_recipe r;
	struct wd_plan *gen = NULL, *fast = NULL;
	weightd_error ge, fe;

	r_src(&b, ck, tensor, FULL());
	r.nodes = b.n;
	r.n_nodes = b.len;
	assert_int_equal(wd_recipe_preflight(&r, &resolver, lim, &gen, &ge), -code);
	assert_int_equal(wd_recipe_preflight_tensor(ck, tensor, &resolver, lim, &fast, &fe), -code);
	assert_null(gen);
	assert_null(fast);
	assert_int_equal(fe.code, ge.code);
	assert_int_equal(fe.node, ge.node);
	assert_int_equal(fe.expected, ge.expected);
	assert_int_equal(fe.actual, ge.actual);
	assert_string_equal(fe.message, ge.message);
	assert_string_equal(fe.checkpoint, ge.checkpoint);
	assert_string_equal(fe.tensor, ge.tensor);
}

static void test_tensor_plan_errors(void **state)
{
	struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;

	expect_same_error("nowhere", "a", NULL, WEIGHTD_E_UNKNOWN_SOURCE);
	expect_same_error("model", "nothing", NULL, WEIGHTD_E_UNKNOWN_TENSOR);
	lim.max_output_bytes = 95; /* "a" is 96 bytes */
	expect_same_error("model", "a", &lim, WEIGHTD_E_RECIPE_TOO_LARGE);
	lim = (struct wd_recipe_limits)WD_RECIPE_LIMITS_DEFAULT;
	lim.max_depth = 0;
	expect_same_error("model", "a", &lim, WEIGHTD_E_RECIPE_TOO_DEEP);
}

/* ---- files that change ------------------------------------------------------------------------ */

static void make_victim(const char *file)
{
	static float v[64];
	struct wt t[] = { { "v", "F32", 2, { 8, 8 }, v, sizeof(v) } };

	for (int i = 0; i < 64; i++)
		v[i] = (float)i;
	write_st(file, t, 1);
}

static void test_changed_files(void **state)
{
	char path[256], path_new[256];
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	weightd_error err;
	uint8_t *out, digest[WD_DIGEST_LEN];
	uint64_t got = 0;
	struct stat st;

	path_of(path, sizeof(path), "victim.safetensors");
	path_of(path_new, sizeof(path_new), "victim.new");

	/* Truncated after admission: preflight still works (it reads no payload), execution fails. */
	make_victim("victim.safetensors");
	victim = open_src("victim", "victim.safetensors");
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(truncate(path, st.st_size - 256), 0);
	r_src(&b, "victim", "v", RANGE(0, 2, 6));
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	assert_int_equal(wd_plan_nbytes(p), 128);
	assert_int_equal(wd_plan_read_bytes(p), 128);
	assert_int_equal(execute(p, 1 << 20, true, &out, &got, digest, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_int_equal(err.code, WEIGHTD_E_SOURCE_CHANGED);
	wd_plan_free(p);
	p = NULL;
	wd_source_free(victim);

	/* Replaced by another file renamed over it (the open file is intact, the path is not). */
	make_victim("victim.safetensors");
	victim = open_src("victim", "victim.safetensors");
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	assert_int_equal(execute(p, 1 << 20, true, &out, &got, digest, &err), 0);
	free(out);
	make_victim("victim.new");
	assert_int_equal(rename(path_new, path), 0);
	assert_int_equal(execute(p, 1 << 20, true, &out, &got, digest, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "victim"));
	wd_plan_free(p);
	wd_source_free(victim);
	victim = NULL;
}

/* ---- dropping what was read from the page cache ---------------------------------------------- */

/* The POSIX_FADV_DONTNEED calls made (wd_source_drop_cache, linked with --wrap). */
static int dontneed_calls;
static uint64_t dontneed_bytes;

int __real_posix_fadvise(int fd, off_t off, off_t len, int advice);
int __wrap_posix_fadvise(int fd, off_t off, off_t len, int advice)
{
	if (advice == POSIX_FADV_DONTNEED) {
		dontneed_calls++;
		dontneed_bytes += (uint64_t)len;
	}
	return __real_posix_fadvise(fd, off, len, advice);
}

/*
 * A 40 MiB tensor read in 1 MiB steps: nothing dropped while the source does not drop its cache;
 * once it does, one call per 16 MiB of reads, not one per read, covering every whole page of the
 * tensor. Split into ranges (as workers fill chunks), each drops its own pages only.
 */
static void test_drop_page_cache(void **state)
{
	const uint64_t n = (40u << 20) + 100;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), off, whole, got = 0;
	uint8_t *data = calloc(1, n), *out, digest[WD_DIGEST_LEN];
	struct wt t[] = { { "v", "U8", 1, { n }, data, n } };
	struct rb b = { .len = 0 };
	struct wd_plan *p = NULL;
	const struct wd_source *src;
	weightd_error err;
	uint32_t file;

	assert_non_null(data);
	write_st("victim.safetensors", t, 1);
	free(data);
	victim = open_src("victim", "victim.safetensors");
	r_src(&b, "victim", "v", FULL());
	assert_int_equal(preflight(&b, NULL, &p, &err), 0);
	assert_true(wd_plan_file_range(p, &src, &file, &off));
	whole = (off + n) / page * page - (off + page - 1) / page * page;

	dontneed_calls = 0;
	assert_int_equal(execute(p, 1 << 20, false, &out, &got, digest, &err), 0);
	free(out);
	assert_int_equal(dontneed_calls, 0);

	wd_source_set_drop_cache(victim, true);
	dontneed_bytes = 0;
	assert_int_equal(execute(p, 1 << 20, false, &out, &got, digest, &err), 0);
	free(out);
	assert_true(dontneed_calls >= 2 && dontneed_calls <= 4);
	assert_int_equal(dontneed_bytes, whole);

	/* in three ranges, as workers fill chunks: none drops a page it shares with the next one */
	dontneed_bytes = 0;
	for (int k = 0; k < 3; k++) {
		uint64_t start = n / 3 * (uint64_t)k, len = k == 2 ? n - start : n / 3, read = 0;
		struct wd_scratch sc;
		struct wd_sink sink;

		assert_int_equal(wd_scratch_init(&sc, 1 << 20), 0);
		assert_int_equal(wd_sink_init_range(&sink, -1, 0, len, WD_DIGEST_XXH3_128), 0);
		assert_int_equal(wd_plan_execute_range(p, start, len, &sink, &sc, &read, &err), 0);
		assert_int_equal(wd_sink_finish(&sink, digest, &err), 0);
		wd_scratch_free(&sc);
	}
	assert_true(dontneed_bytes <= whole);
	assert_true(dontneed_bytes + 2 * page >= whole);
	wd_plan_free(p);
	wd_source_free(victim);
	victim = NULL;
}

TEST_MAIN(group_setup, group_teardown, cmocka_unit_test(test_error_unknown_source_and_tensor),
	  cmocka_unit_test(test_error_inputs), cmocka_unit_test(test_error_dtype_shape_axis),
	  cmocka_unit_test(test_error_counts_and_perm), cmocka_unit_test(test_error_zero_sized),
	  cmocka_unit_test(test_zero_elements_are_valid_outputs),
	  cmocka_unit_test(test_error_lossy_cast), cmocka_unit_test(test_error_even_shard),
	  cmocka_unit_test(test_error_cast_overflow), cmocka_unit_test(test_error_limits),
	  cmocka_unit_test(test_error_selection_range), cmocka_unit_test(test_error_blocks),
	  cmocka_unit_test(test_source_selections), cmocka_unit_test(test_shard),
	  cmocka_unit_test(test_concat_stack), cmocka_unit_test(test_transpose_reshape_view),
	  cmocka_unit_test(test_quantized), cmocka_unit_test(test_casts),
	  cmocka_unit_test(test_cast_and_shard), cmocka_unit_test(test_spans),
	  cmocka_unit_test(test_keys),
	  cmocka_unit_test(test_label), cmocka_unit_test(test_tensor_plan_is_the_general_plan),
	  cmocka_unit_test(test_tensor_plan_errors), cmocka_unit_test(test_changed_files),
	  cmocka_unit_test(test_drop_page_cache))
