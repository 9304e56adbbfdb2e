/* SPDX-License-Identifier: Apache-2.0 */
/* test_source.c - checkpoint sources: single files, directories, sharded indexes, pins and change detection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source.h"
#include "st_writer.h"

/* stw_test_dir/<fmt...>, in one of a few rotating buffers. */
static const char *tpath(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *tpath(const char *fmt, ...)
{
	static char bufs[4][4300];
	static int next;
	char rel[200];
	char *p = bufs[next++ % 4];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	snprintf(p, 4300, "%s/%s", stw_test_dir, rel);
	return p;
}

/* Byte i of a bytes-pattern tensor with this seed, computed here independently of st_writer.h. */
static uint8_t want_byte(uint64_t i, uint32_t seed)
{
	return (uint8_t)((i * 131 + seed * 7 + 13) % 256);
}

static struct wd_source *open_ok(const char *name, const char *path)
{
	struct wd_source *src = NULL;
	weightd_error err;
	int r;

	wd_error_clear(&err);
	r = wd_source_open(name, path, NULL, &src, &err);
	if (r)
		print_error("opening %s: %d %s\n", path, r, err.message);
	assert_int_equal(r, 0);
	assert_non_null(src);
	return src;
}

/* Opening fails with code and a message that holds needle; *ret stays untouched. */
static void open_bad(const char *path, int code, const char *needle)
{
	struct wd_source *src = (struct wd_source *)0x1;
	weightd_error err;
	int r;

	wd_error_clear(&err);
	r = wd_source_open("ckpt", path, NULL, &src, &err);
	if (r != -code || !strstr(err.message, needle))
		print_error("opening %s -> %d (%s), wanted %d with \"%s\"\n", path, r, err.message,
			    -code, needle);
	assert_int_equal(r, -code);
	assert_int_equal(err.code, code);
	assert_non_null(strstr(err.message, needle));
	assert_string_equal(err.checkpoint, "ckpt");
	assert_ptr_equal(src, (struct wd_source *)0x1);
}

static void check_tensor_bytes(const struct wd_source *src, const char *name, uint32_t seed)
{
	const struct wd_tensor_info *t = wd_source_find(src, name);
	weightd_error err;
	uint8_t *buf;

	assert_non_null(t);
	assert_string_equal(t->name, name);
	buf = malloc(t->nbytes + 1);
	assert_non_null(buf);
	assert_int_equal(wd_source_pread(src, t->file, buf, t->nbytes, t->offset, &err), 0);
	for (uint64_t i = 0; i < t->nbytes; i++)
		assert_int_equal(buf[i], want_byte(i, seed));
	free(buf);
}

static const struct stw_tensor k_four[] = {
	{ .name = "w.f32", .dtype = "F32", .ndim = 2, .shape = { 3, 5 }, .seed = 11 },
	{ .name = "b.bf16", .dtype = "BF16", .ndim = 1, .shape = { 7 }, .seed = 12 },
	{ .name = "s.i8", .dtype = "I8", .ndim = 0, .seed = 13 },
	{ .name = "a.u64", .dtype = "U64", .ndim = 2, .shape = { 2, 2 }, .seed = 14 },
};

static void single_file_opens_and_reads_the_right_bytes(void **state)
{
	const char *meta[] = { "format", "pt" };
	const char *path = tpath("one.safetensors");
	struct wd_source *src;
	const struct wd_file_id *id;
	struct stat st;
	weightd_error err;
	uint64_t ds;
	uint8_t b[5];

	(void)state;
	assert_int_equal(stw_write(path, k_four, 4, meta, 1, &ds), 0);
	assert_int_equal(stat(path, &st), 0);
	src = open_ok("one", path);
	assert_string_equal(wd_source_name(src), "one");
	assert_string_equal(wd_source_path(src), path);
	assert_int_equal(wd_source_kind(src), WD_SOURCE_SAFETENSORS);
	assert_string_equal(wd_source_kind_name(wd_source_kind(src)), "safetensors");
	assert_int_equal(wd_source_tensor_count(src), 4);
	assert_int_equal(wd_source_file_count(src), 1);
	assert_string_equal(wd_source_file_name(src, 0), "");
	id = wd_source_file_id(src, 0);
	assert_non_null(id);
	assert_int_equal(id->dev, st.st_dev);
	assert_int_equal(id->ino, st.st_ino);
	assert_int_equal(id->size, st.st_size);
	assert_int_equal(id->mtime_ns, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	assert_int_equal(wd_source_bytes(src), 60 + 14 + 1 + 32);
	assert_int_equal(wd_source_meta_count(src), 1);
	assert_string_equal(wd_source_meta(src, 0)->key, "format");
	assert_null(wd_source_meta(src, 1));
	/* file order = offset order = write order */
	assert_string_equal(wd_source_tensor(src, 0)->name, "w.f32");
	assert_int_equal(wd_source_tensor(src, 0)->offset, ds);
	assert_string_equal(wd_source_tensor(src, 3)->name, "a.u64");
	assert_int_equal(wd_source_tensor(src, 3)->offset, ds + 60 + 14 + 1);
	assert_null(wd_source_tensor(src, 4));
	for (size_t i = 0; i < 4; i++)
		check_tensor_bytes(src, k_four[i].name, k_four[i].seed);
	assert_null(wd_source_find(src, "nope"));
	assert_null(wd_source_find(src, "w.f3"));
	/* a read in the middle of a tensor */
	assert_int_equal(wd_source_pread(src, 0, b, 5, ds + 7, &err), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(b[i], want_byte(7 + i, 11));
	/* reads past the pinned size, or of a file that does not exist, are refused */
	assert_int_equal(wd_source_pread(src, 0, b, 5, (uint64_t)st.st_size - 4, &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_source_pread(src, 0, b, 5, UINT64_MAX - 2, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_source_pread(src, 1, b, 1, 0, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_source_check(src, 0, &err), 0);
	assert_int_equal(wd_source_check(src, 1, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	wd_source_free(src);
	wd_source_free(NULL);
}

static void lookup_by_name_finds_every_tensor(void **state)
{
	enum { N = 600 };
	static struct stw_tensor ts[N];
	static char names[N][16];
	struct wd_source *src;

	(void)state;
	/* names written in descending order, so file order and name order differ */
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "t%04d", (N - 1 - i) * 2);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = "U8", .ndim = 1, .shape = { 1 }, .seed = (uint32_t)i };
	}
	assert_int_equal(stw_write(tpath("many.safetensors"), ts, N, NULL, 0, NULL), 0);
	src = open_ok("many", tpath("many.safetensors"));
	for (int i = 0; i < N; i++) {
		char absent[16];
		const struct wd_tensor_info *t = wd_source_find(src, names[i]);
		assert_non_null(t);
		assert_string_equal(t->name, names[i]);
		assert_ptr_equal(t, wd_source_tensor(src, (size_t)i));
		snprintf(absent, sizeof(absent), "t%04d", (N - 1 - i) * 2 + 1);
		assert_null(wd_source_find(src, absent));
	}
	assert_null(wd_source_find(src, ""));
	assert_null(wd_source_find(src, "zzz"));
	wd_source_free(src);
}

/* A name that is not there brings the nearest names back, nearest first, in a checkpoint of
 * 100,000 tensors named as Llama's are; a name near nothing brings none. */
static void a_missing_name_suggests_the_nearest(void **state)
{
	enum { N = 100000 };
	static const char *const kinds[] = { "self_attn.q_proj",
					     "self_attn.k_proj",
					     "self_attn.v_proj",
					     "self_attn.o_proj",
					     "mlp.gate_proj",
					     "mlp.up_proj",
					     "mlp.down_proj",
					     "input_layernorm",
					     "post_attention_layernorm",
					     "embed" };
	struct stw_tensor *ts = calloc(N, sizeof(*ts));
	char(*names)[64] = calloc(N, 64);
	const char *near[8];
	struct wd_source *src;
	size_t n;

	(void)state;
	assert_non_null(ts);
	assert_non_null(names);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], 64, "model.layers.%d.%s.weight", i / 10, kinds[i % 10]);
		ts[i] = (struct stw_tensor){
			.name = names[i], .dtype = "U8", .ndim = 1, .shape = { 1 }
		};
	}
	assert_int_equal(stw_write(tpath("llama.safetensors"), ts, N, NULL, 0, NULL), 0);
	src = open_ok("llama", tpath("llama.safetensors"));

	n = wd_source_suggest(src, "model.layers.7.self_attn.q_prj.weight", near, 3);
	assert_int_equal(n, 3);
	assert_string_equal(near[0], "model.layers.7.self_attn.q_proj.weight");
	n = wd_source_suggest(src, "model.layers.7.mlp.up.weight", near, 1);
	assert_int_equal(n, 1);
	assert_string_equal(near[0], "model.layers.7.mlp.up_proj.weight");
	/* more than asked for is never written */
	near[1] = NULL;
	assert_int_equal(wd_source_suggest(src, "model.layers.7.mlp.up.weight", near, 1), 1);
	assert_null(near[1]);
	assert_int_equal(wd_source_suggest(src, "lm_head.bias", near, 3), 0);
	assert_int_equal(wd_source_suggest(src, "", near, 3), 0);
	wd_source_free(src);
	free(names);
	free(ts);
}

static void directory_with_one_safetensors_file_is_that_file(void **state)
{
	struct wd_source *src;

	(void)state;
	assert_int_equal(mkdir(tpath("lone"), 0755), 0);
	assert_int_equal(stw_write(tpath("lone/model.safetensors"), k_four, 2, NULL, 0, NULL), 0);
	tf_write(tpath("lone/README.md"), "hello\n", 0);
	tf_write(tpath("lone/config.json"), "{}\n", 0);
	src = open_ok("lone", tpath("lone"));
	assert_int_equal(wd_source_kind(src), WD_SOURCE_SAFETENSORS);
	assert_int_equal(wd_source_file_count(src), 1);
	assert_string_equal(wd_source_file_name(src, 0), "model.safetensors");
	assert_int_equal(wd_source_tensor_count(src), 2);
	check_tensor_bytes(src, "b.bf16", 12);
	wd_source_free(src);

	assert_int_equal(mkdir(tpath("none"), 0755), 0);
	tf_write(tpath("none/README.md"), "hello\n", 0);
	open_bad(tpath("none"), WEIGHTD_E_NOT_FOUND,
		 "no model.safetensors.index.json and no *.safetensors file");

	assert_int_equal(stw_write(tpath("lone/other.safetensors"), k_four, 1, NULL, 0, NULL), 0);
	open_bad(tpath("lone"), WEIGHTD_E_BAD_CHECKPOINT, "has 2 *.safetensors files");
}

static void bad_paths_are_reported(void **state)
{
	(void)state;
	open_bad(tpath("does-not-exist"), WEIGHTD_E_NOT_FOUND, "does-not-exist");
	open_bad("/dev/null", WEIGHTD_E_BAD_CHECKPOINT, "neither a regular file nor a directory");
	assert_int_equal(stw_write_json(tpath("broken.safetensors"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "abcd", 4), 0);
	/* the message names the file and the tensor; err names the checkpoint */
	open_bad(tpath("broken.safetensors"), WEIGHTD_E_BAD_CHECKPOINT, tpath("broken.safetensors"));
	open_bad(tpath("broken.safetensors"), WEIGHTD_E_BAD_CHECKPOINT, "tensor 'a'");
}

/* Two shards: a.safetensors holds x, y; b.safetensors holds z. */
static void make_shards(const char *dir)
{
	static const struct stw_tensor a[] = {
		{ .name = "x", .dtype = "F16", .ndim = 2, .shape = { 4, 4 }, .seed = 1 },
		{ .name = "y", .dtype = "I32", .ndim = 1, .shape = { 3 }, .seed = 2 },
	};
	static const struct stw_tensor b[] = { { .name = "z", .dtype = "F64", .ndim = 1, .shape = { 5 }, .seed = 3 } };
	const char *meta_a[] = { "format", "pt" }, *meta_b[] = { "format", "other" };
	char p[4400];

	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(p, sizeof(p), "%s/a.safetensors", dir);
	assert_int_equal(stw_write(p, a, 2, meta_a, 1, NULL), 0);
	snprintf(p, sizeof(p), "%s/b.safetensors", dir);
	assert_int_equal(stw_write(p, b, 1, meta_b, 1, NULL), 0);
}

static void write_index(const char *dir, const char *weight_map)
{
	char p[4400], text[2048];

	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
	snprintf(text, sizeof(text), "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {%s}}", weight_map);
	tf_write(p, text, 0);
}

static void sharded_directory_opens_every_shard(void **state)
{
	const char *dir = tpath("sharded");
	struct wd_source *src;
	const struct wd_tensor_info *t;

	(void)state;
	make_shards(dir);
	write_index(dir, "\"z\": \"b.safetensors\", \"x\": \"a.safetensors\", \"y\": \"a.safetensors\"");
	src = open_ok("sh", dir);
	assert_int_equal(wd_source_kind(src), WD_SOURCE_SHARDED);
	assert_int_equal(wd_source_file_count(src), 2);
	/* files in index first-seen order */
	assert_string_equal(wd_source_file_name(src, 0), "b.safetensors");
	assert_string_equal(wd_source_file_name(src, 1), "a.safetensors");
	assert_int_equal(wd_source_tensor_count(src), 3);
	assert_int_equal(wd_source_bytes(src), 32 + 12 + 40);
	t = wd_source_find(src, "z");
	assert_non_null(t);
	assert_int_equal(t->file, 0);
	assert_int_equal(t->nbytes, 40);
	t = wd_source_find(src, "y");
	assert_non_null(t);
	assert_int_equal(t->file, 1);
	check_tensor_bytes(src, "x", 1);
	check_tensor_bytes(src, "y", 2);
	check_tensor_bytes(src, "z", 3);
	/* metadata is the first shard's */
	assert_int_equal(wd_source_meta_count(src), 1);
	assert_string_equal(wd_source_meta(src, 0)->value, "other");
	assert_int_equal(wd_source_check(src, 0, NULL), 0);
	assert_int_equal(wd_source_check(src, 1, NULL), 0);
	wd_source_free(src);
}

static void index_and_shards_must_agree(void **state)
{
	(void)state;
	/* a shard the index names is missing */
	make_shards(tpath("s1"));
	write_index(tpath("s1"), "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"c.safetensors\"");
	open_bad(tpath("s1"), WEIGHTD_E_BAD_CHECKPOINT, "c.safetensors does not exist");

	/* a tensor in the index that its shard lacks */
	make_shards(tpath("s2"));
	write_index(tpath("s2"), "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\", \"w\": \"b.safetensors\"");
	open_bad(tpath("s2"), WEIGHTD_E_BAD_CHECKPOINT,
		 "assigns tensor 'w' to shard b.safetensors, but that shard has no such tensor");

	/* a tensor in a shard that the index does not list */
	make_shards(tpath("s3"));
	write_index(tpath("s3"), "\"x\": \"a.safetensors\", \"z\": \"b.safetensors\"");
	open_bad(
		tpath("s3"), WEIGHTD_E_BAD_CHECKPOINT,
		"tensor 'y' is in shard a.safetensors but model.safetensors.index.json does not list it");

	/* a tensor assigned to the wrong shard */
	make_shards(tpath("s4"));
	write_index(tpath("s4"), "\"x\": \"a.safetensors\", \"y\": \"b.safetensors\", \"z\": \"b.safetensors\"");
	open_bad(tpath("s4"), WEIGHTD_E_BAD_CHECKPOINT,
		 "assigns tensor 'y' to shard b.safetensors, but it is in shard a.safetensors");

	/* the same tensor in two shards */
	{
		static const struct stw_tensor dup[] = { { .name = "x", .dtype = "U8", .ndim = 1, .shape = { 2 } } };
		make_shards(tpath("s5"));
		assert_int_equal(stw_write(tpath("s5/c.safetensors"), dup, 1, NULL, 0, NULL), 0);
		write_index(tpath("s5"), "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\", \"q\": \"c.safetensors\"");
		open_bad(tpath("s5"), WEIGHTD_E_BAD_CHECKPOINT,
			 "tensor 'x' appears in both a.safetensors and c.safetensors");
	}

	/* a shard with a bad header: the error names the shard file */
	make_shards(tpath("s6"));
	assert_int_equal(stw_write_json(tpath("s6/b.safetensors"), "{\"z\":{\"dtype\":\"F64\",\"shape\":[5],\"data_offsets\":[0,8]}}", "12345678", 8), 0);
	write_index(tpath("s6"), "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\"");
	open_bad(tpath("s6"), WEIGHTD_E_BAD_CHECKPOINT,
		 "s6/b.safetensors: safetensors header: tensor 'z'");

	/* a broken index file */
	make_shards(tpath("s7"));
	tf_write(tpath("s7/model.safetensors.index.json"), "{\"weight_map\": ", 0);
	open_bad(tpath("s7"), WEIGHTD_E_BAD_CHECKPOINT,
		 "model.safetensors.index.json: index file: not valid JSON");
}

/* Shards s00..s23, tensor t<i> in shard i (with `extra`, also u<i>, which the index does not
 * list); `broken` shards get a header whose offsets are wrong and `missing` is not written (-1:
 * none). */
static void make_many_shards(const char *dir, int n, const int *broken, int n_broken, int missing,
			     bool extra)
{
	char p[4400], name[16], name2[16], map[4096] = "";
	size_t off = 0;

	assert_int_equal(mkdir(dir, 0755), 0);
	for (int i = 0; i < n; i++) {
		struct stw_tensor t[2] = {
			{ .name = name, .dtype = "F32", .ndim = 1, .shape = { 2 }, .seed = (uint32_t)i },
			{ .name = name2, .dtype = "U8", .ndim = 1, .shape = { 3 }, .seed = (uint32_t)i },
		};
		bool bad = false;

		snprintf(name, sizeof(name), "t%d", i);
		snprintf(name2, sizeof(name2), "u%d", i);
		off += (size_t)snprintf(map + off, sizeof(map) - off, "%s\"t%d\": \"s%02d.safetensors\"",
					i ? ", " : "", i, i);
		snprintf(p, sizeof(p), "%s/s%02d.safetensors", dir, i);
		for (int b = 0; b < n_broken; b++)
			bad |= broken[b] == i;
		if (i == missing)
			continue;
		if (bad) {
			char json[128];

			snprintf(json, sizeof(json), "{\"t%d\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", i);
			assert_int_equal(stw_write_json(p, json, "abcd", 4), 0);
		} else {
			assert_int_equal(stw_write(p, t, extra ? 2 : 1, NULL, 0, NULL), 0);
		}
	}
	write_index(dir, map);
}

static void many_shards_open_and_fail_in_index_order(void **state)
{
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct wd_source *src;
	weightd_error err;
	char name[16];

	(void)state;
	/* headers parsed side by side, joined in index order */
	make_many_shards(tpath("many"), 24, NULL, 0, -1, false);
	src = open_ok("many", tpath("many"));
	assert_int_equal(wd_source_tensor_count(src), 24);
	for (int i = 0; i < 24; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		assert_int_equal(wd_source_find(src, name)->file, (uint32_t)i);
		check_tensor_bytes(src, name, (uint32_t)i);
	}
	wd_source_free(src);

	/* two broken shards and a missing one after them: the first broken shard in order */
	make_many_shards(tpath("many_bad"), 24, (const int[]){ 17, 9 }, 2, 20, false);
	open_bad(tpath("many_bad"), WEIGHTD_E_BAD_CHECKPOINT, "many_bad/s09.safetensors: safetensors header: tensor 't9'");
	/* a missing shard before the broken ones: the walk in order would stop there... after
	 * parsing the shards before it, which are fine */
	make_many_shards(tpath("many_gone"), 24, (const int[]){ 17 }, 1, 6, false);
	open_bad(tpath("many_gone"), WEIGHTD_E_BAD_CHECKPOINT, "s06.safetensors does not exist");

	/* two tensors a shard (the index lists 24, under the limit): the limit of 30 crossed at
	 * the 16th shard, before a broken 21st: the limit */
	lim.max_tensors = 30;
	make_many_shards(tpath("many_limit"), 24, (const int[]){ 20 }, 1, -1, true);
	wd_error_clear(&err);
	assert_int_equal(wd_source_open("ckpt", tpath("many_limit"), &lim, &src, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "more than the limit of 30 tensors"));
	/* a broken 6th before the limit is crossed: the broken shard */
	make_many_shards(tpath("many_limit2"), 24, (const int[]){ 5 }, 1, -1, true);
	wd_error_clear(&err);
	assert_int_equal(wd_source_open("ckpt", tpath("many_limit2"), &lim, &src, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "s05.safetensors: safetensors header: tensor 't5'"));
}

static void index_names_cannot_escape_the_directory(void **state)
{
	struct wd_source *src;

	(void)state;
	/* by name */
	make_shards(tpath("e1"));
	write_index(tpath("e1"), "\"x\": \"../e1/a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\"");
	open_bad(tpath("e1"), WEIGHTD_E_BAD_CHECKPOINT, "contains \"..\"");
	write_index(tpath("e1"), "\"x\": \"/etc/passwd\"");
	open_bad(tpath("e1"), WEIGHTD_E_BAD_CHECKPOINT, "absolute path");

	/* A symlink placed in the directory is followed wherever it points: that is how the Hugging
	 * Face hub cache lays out snapshots (snapshots/REV/x.safetensors -> ../../blobs/HASH). */
	make_shards(tpath("e2"));
	assert_int_equal(rename(tpath("e2/b.safetensors"), tpath("outside.safetensors")), 0);
	assert_int_equal(symlink("../outside.safetensors", tpath("e2/b.safetensors")), 0);
	write_index(tpath("e2"), "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\"");
	src = open_ok("e2", tpath("e2"));
	check_tensor_bytes(src, "z", 3);
	wd_source_free(src);
	/* the same for a directory's lone file */
	assert_int_equal(mkdir(tpath("e3"), 0755), 0);
	assert_int_equal(symlink("../outside.safetensors", tpath("e3/m.safetensors")), 0);
	src = open_ok("e3", tpath("e3"));
	wd_source_free(src);

	/* a symlink that stays inside is fine */
	make_shards(tpath("e4"));
	assert_int_equal(mkdir(tpath("e4/blobs"), 0755), 0);
	assert_int_equal(rename(tpath("e4/b.safetensors"), tpath("e4/blobs/1234")), 0);
	assert_int_equal(symlink("blobs/1234", tpath("e4/b.safetensors")), 0);
	write_index(tpath("e4"), "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\"");
	src = open_ok("e4", tpath("e4"));
	check_tensor_bytes(src, "z", 3);
	assert_int_equal(wd_source_check(src, 1, NULL), 0);
	wd_source_free(src);
}

static void replaced_file_is_detected(void **state)
{
	const char *path = tpath("r.safetensors"), *tmp = tpath("r.safetensors.new");
	struct wd_source *src;
	weightd_error err;
	const struct wd_tensor_info *t;
	uint8_t b[4];

	(void)state;
	assert_int_equal(stw_write(path, k_four, 4, NULL, 0, NULL), 0);
	src = open_ok("r", path);
	assert_int_equal(wd_source_check(src, 0, &err), 0);
	/* identical contents, new inode, renamed over the old path */
	assert_int_equal(stw_write(tmp, k_four, 4, NULL, 0, NULL), 0);
	assert_int_equal(rename(tmp, path), 0);
	wd_error_clear(&err);
	assert_int_equal(wd_source_check(src, 0, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "was replaced since it was opened"));
	assert_non_null(strstr(err.message, path));
	assert_string_equal(err.checkpoint, "r");
	/* the pinned inode still holds the admitted bytes, which pread returns */
	t = wd_source_find(src, "w.f32");
	assert_int_equal(wd_source_pread(src, 0, b, 4, t->offset, &err), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(b[i], want_byte((uint64_t)i, 11));
	/* removed altogether */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(wd_source_check(src, 0, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "is gone"));
	wd_source_free(src);
}

static void truncated_file_is_detected(void **state)
{
	const char *path = tpath("t.safetensors");
	struct wd_source *src;
	weightd_error err;
	const struct wd_tensor_info *first, *last;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(stw_write(path, k_four, 4, NULL, 0, NULL), 0);
	src = open_ok("t", path);
	first = wd_source_tensor(src, 0);
	last = wd_source_tensor(src, 3);
	assert_int_equal(truncate(path, (off_t)(last->offset + 3)), 0);
	wd_error_clear(&err);
	assert_int_equal(wd_source_pread(src, 0, buf, last->nbytes, last->offset, &err),
			 -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "truncated since"));
	assert_string_equal(err.checkpoint, "t");
	/* even a read that still fits is refused once the size moved */
	assert_int_equal(wd_source_pread(src, 0, buf, 4, first->offset, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_int_equal(wd_source_check(src, 0, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "changed size"));
	wd_source_free(src);
}

static void modified_file_is_detected(void **state)
{
	const char *path = tpath("m.safetensors");
	struct wd_source *src;
	weightd_error err;
	struct timespec ts[2];
	struct stat st;
	const struct wd_tensor_info *t;
	uint8_t buf[4] = { 0xde, 0xad, 0xbe, 0xef };
	int fd;

	(void)state;
	assert_int_equal(stw_write(path, k_four, 4, NULL, 0, NULL), 0);
	src = open_ok("m", path);
	t = wd_source_find(src, "b.bf16");
	/* rewrite four bytes in place (same inode, same size) */
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, 4, (off_t)t->offset), 4);
	assert_int_equal(close(fd), 0);
	/* make the mtime move even on a coarse clock: one second later than the admitted one */
	assert_int_equal(stat(path, &st), 0);
	ts[0] = st.st_atim;
	ts[1].tv_sec = wd_source_file_id(src, 0)->mtime_ns / 1000000000 + 1;
	ts[1].tv_nsec = 0;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	wd_error_clear(&err);
	assert_int_equal(wd_source_check(src, 0, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "was modified since it was opened"));
	assert_int_equal(wd_source_pread(src, 0, buf, 4, t->offset, &err), -WEIGHTD_E_SOURCE_CHANGED);
	wd_source_free(src);

	/* a touch alone (same bytes) is also a change: identity is what is pinned */
	assert_int_equal(stw_write(path, k_four, 4, NULL, 0, NULL), 0);
	src = open_ok("m", path);
	ts[1].tv_sec = wd_source_file_id(src, 0)->mtime_ns / 1000000000 - 100;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(wd_source_check(src, 0, &err), -WEIGHTD_E_SOURCE_CHANGED);
	wd_source_free(src);
}

static void shard_change_is_detected_per_file(void **state)
{
	const char *dir = tpath("c1");
	struct wd_source *src;
	weightd_error err;

	(void)state;
	make_shards(dir);
	write_index(dir, "\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\"");
	src = open_ok("c1", dir);
	assert_int_equal(truncate(tpath("c1/b.safetensors"), 10), 0);
	assert_int_equal(wd_source_check(src, 0, &err), 0);
	assert_int_equal(wd_source_check(src, 1, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "c1/b.safetensors"));
	wd_source_free(src);
}

static void identity_follows_the_files(void **state)
{
	const char *path = tpath("id.safetensors");
	struct wd_source *a, *b;
	uint8_t ia[32], ib[32], zero[32] = { 0 };
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { 1000000, 0 } };

	(void)state;
	assert_int_equal(stw_write(path, k_four, 4, NULL, 0, NULL), 0);
	a = open_ok("id", path);
	b = open_ok("other-name", path);
	wd_source_identity(a, ia);
	wd_source_identity(b, ib);
	assert_memory_equal(ia, ib, 32);
	assert_memory_not_equal(ia, zero, 32);
	wd_source_free(b);
	/* same bytes, different mtime: a different identity */
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	b = open_ok("id", path);
	wd_source_identity(b, ib);
	assert_memory_not_equal(ia, ib, 32);
	wd_source_free(a);
	wd_source_free(b);
}

/* A minimal GGUF v3 file: one F32 tensor "w" of 4 elements at data offset 0, alignment 32. */
static void gguf_files_are_routed_to_the_gguf_parser(void **state)
{
	uint8_t f[80] = { 0 };
	size_t o = 0;
	struct wd_source *src = NULL;
	weightd_error err;
	const struct wd_tensor_info *t;
	int r, fd;

	(void)state;
	memcpy(f, "GGUF", 4);
	o = 4;
	stw_put_le(f + o, 3, 4), o += 4;  /* version */
	stw_put_le(f + o, 1, 8), o += 8;  /* tensor count */
	stw_put_le(f + o, 0, 8), o += 8;  /* metadata kv count */
	stw_put_le(f + o, 1, 8), o += 8;  /* name length */
	f[o++] = 'w';
	stw_put_le(f + o, 1, 4), o += 4;  /* n_dims */
	stw_put_le(f + o, 4, 8), o += 8;  /* ne[0] */
	stw_put_le(f + o, 0, 4), o += 4;  /* GGML_TYPE_F32 */
	stw_put_le(f + o, 0, 8), o += 8;  /* offset in the data section */
	assert_int_equal(o, 57);
	for (int i = 0; i < 16; i++)
		f[64 + i] = want_byte((uint64_t)i, 0);
	fd = open(tpath("m.gguf"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, f, sizeof(f)), sizeof(f));
	assert_int_equal(close(fd), 0);

	wd_error_clear(&err);
	r = wd_source_open("g", tpath("m.gguf"), NULL, &src, &err);
	assert_int_equal(r, 0);
	assert_int_equal(wd_source_kind(src), WD_SOURCE_GGUF);
	assert_string_equal(wd_source_kind_name(WD_SOURCE_GGUF), "gguf");
	t = wd_source_find(src, "w");
	assert_non_null(t);
	assert_int_equal(t->dtype, WD_F32);
	assert_int_equal(t->offset, 64);
	assert_int_equal(t->nbytes, 16);
	check_tensor_bytes(src, "w", 0);
	wd_source_free(src);
}

/* A *.gguf file without the magic is a damaged GGUF file, told in GGUF words. */
static void gguf_named_files_without_the_magic_say_so(void **state)
{
	/* 8 bytes that a safetensors reader would take for a huge header length */
	static const uint8_t junk[32] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'x' };
	static const char *const names[] = { "bad.gguf", "BAD.GGUF", "tiny.gguf" };
	struct wd_source *src = NULL;
	weightd_error err;
	int fd;

	(void)state;
	for (int i = 0; i < 3; i++) {
		fd = open(tpath("%s", names[i]), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, junk, i == 2 ? 3 : sizeof(junk)), i == 2 ? 3 : (ssize_t)sizeof(junk));
		assert_int_equal(close(fd), 0);
		wd_error_clear(&err);
		assert_int_equal(wd_source_open("g", tpath("%s", names[i]), NULL, &src, &err),
				 -WEIGHTD_E_BAD_CHECKPOINT);
		assert_null(src);
		assert_null(strstr(err.message, "safetensors"));
		if (i < 2)
			assert_non_null(strstr(
				err.message,
				"GGUF magic missing: the file starts with bytes ff ff ff ff"));
		else
			assert_non_null(strstr(err.message, "GGUF header is truncated"));
		assert_non_null(strstr(err.message, names[i]));
	}
	/* the same bytes under another name are read as safetensors */
	fd = open(tpath("bad.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	assert_int_equal(close(fd), 0);
	assert_int_equal(wd_source_open("g", tpath("bad.bin"), NULL, &src, &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "safetensors header"));
}

TEST_MAIN(stw_setup, stw_teardown, cmocka_unit_test(single_file_opens_and_reads_the_right_bytes),
	  cmocka_unit_test(lookup_by_name_finds_every_tensor),
	  cmocka_unit_test(a_missing_name_suggests_the_nearest),
	  cmocka_unit_test(directory_with_one_safetensors_file_is_that_file),
	  cmocka_unit_test(bad_paths_are_reported),
	  cmocka_unit_test(sharded_directory_opens_every_shard),
	  cmocka_unit_test(index_and_shards_must_agree),
	  cmocka_unit_test(many_shards_open_and_fail_in_index_order),
	  cmocka_unit_test(index_names_cannot_escape_the_directory),
	  cmocka_unit_test(replaced_file_is_detected), cmocka_unit_test(truncated_file_is_detected),
	  cmocka_unit_test(modified_file_is_detected),
	  cmocka_unit_test(shard_change_is_detected_per_file),
	  cmocka_unit_test(identity_follows_the_files),
	  cmocka_unit_test(gguf_files_are_routed_to_the_gguf_parser),
	  cmocka_unit_test(gguf_named_files_without_the_magic_say_so))
