/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for src/source_remote.c: checkpoint sources read over HTTP(S) and S3 from real servers on
 * loopback (tests/remote/servers.py): admission reads headers only, reads match the local file,
 * the pin, identity, credentials, and URLs shown without their query. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"
#include "files.h"

#include "gguf_writer.h"
#include "remote.h"
#include "servers.h"
#include "source.h"
#include "source_int.h" /* WD_SOURCE_REMOTE_PREFIX */
#include "st_writer.h"

/* GCC 12 misreads stw_header's growing buffer once inlined into this file's callers (false
 * stringop-overflow and array-bounds reports) */
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Warray-bounds"

static char root[4096];
static struct wd_servers srv;
static char token_file[4200], cred_file[4200], bad_cred_file[4200];

static const struct stw_tensor single_ts[] = {
	{ .name = "a.weight", .dtype = "F32", .ndim = 2, .shape = { 64, 32 }, .seed = 1 },
	{ .name = "b.bias", .dtype = "BF16", .ndim = 1, .shape = { 300 }, .seed = 2 },
};
/* the sharded directory: shard 1 holds x and y, shard 2 holds z (4 MiB: a payload worth not
 * reading at admission) */
static const struct stw_tensor shard1_ts[] = {
	{ .name = "x", .dtype = "F32", .ndim = 1, .shape = { 1000 }, .seed = 3 },
	{ .name = "y", .dtype = "F16", .ndim = 2, .shape = { 10, 10 }, .seed = 4 },
};
static const struct stw_tensor shard2_ts[] = {
	{ .name = "z", .dtype = "F32", .ndim = 2, .shape = { 1024, 1024 }, .seed = 5 },
};

static void put_st(const char *path, const struct stw_tensor *ts, size_t n)
{
	assert_int_equal(stw_write(path, ts, n, NULL, 0, NULL), 0);
}

static void write_tree(void)
{
	char p[4300];
	struct gw g;
	const struct gw_tensor gts[1] = { { "w", 1, { 8 }, GG_F32, 32 } };
	size_t ds;
	FILE *f;

	snprintf(p, sizeof(p), "%s/single.safetensors", root);
	put_st(p, single_ts, 2);
	snprintf(p, sizeof(p), "%s/dir", root);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/dir/model-00001-of-00002.safetensors", root);
	put_st(p, shard1_ts, 2);
	snprintf(p, sizeof(p), "%s/dir/model-00002-of-00002.safetensors", root);
	put_st(p, shard2_ts, 1);
	snprintf(p, sizeof(p), "%s/dir/model.safetensors.index.json", root);
	tf_write(p,
		   "{\"metadata\": {}, \"weight_map\": {"
		   "\"x\": \"model-00001-of-00002.safetensors\","
		   "\"y\": \"model-00001-of-00002.safetensors\","
		   "\"z\": \"model-00002-of-00002.safetensors\"}}",
		   0644);
	snprintf(p, sizeof(p), "%s/noindex", root);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/noindex/model.safetensors", root);
	put_st(p, single_ts, 2);
	gw_init(&g);
	gw_file(&g, 0, 1, gts, &ds);
	gw_zeros(&g, 32);
	snprintf(p, sizeof(p), "%s/tiny.gguf", root);
	f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(g.p, 1, g.len, f), g.len);
	assert_int_equal(fclose(f), 0);
	gw_free(&g);
}

static int setup(void **state)
{
	char text[512];

	(void)state;
	if (stw_tmpdir(root, sizeof(root)))
		return -1;
	write_tree();
	wd_servers_try(root, true, &srv);
	if (!srv.up)
		return 0;
	snprintf(token_file, sizeof(token_file), "%s.token", root);
	snprintf(text, sizeof(text), "%s\n", srv.token);
	tf_write(token_file, text, 0600);
	snprintf(cred_file, sizeof(cred_file), "%s.cred", root);
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n"
		 "[test]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		 srv.s3_key, srv.s3_secret);
	tf_write(cred_file, text, 0600);
	snprintf(bad_cred_file, sizeof(bad_cred_file), "%s.badcred", root);
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = wr0ngSecretValue\n",
		 srv.s3_key);
	tf_write(bad_cred_file, text, 0600);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_stop(&srv);
	unlink(token_file);
	unlink(cred_file);
	unlink(bad_cred_file);
	stw_rmtree(root);
	return 0;
}

static struct wd_source_remote_conf http_conf(void)
{
	return (struct wd_source_remote_conf){ .allow_http = true };
}

static struct wd_source_remote_conf https_conf(void)
{
	return (struct wd_source_remote_conf){ .ca_file = srv.ca };
}

static struct wd_source_remote_conf s3_conf(const char *file, const char *profile)
{
	static char endpoint[64];

	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", srv.s3);
	return (struct wd_source_remote_conf){ .endpoint = endpoint,
					       .region = "us-east-1",
					       .path_style = true,
					       .credentials_file = file,
					       .profile = profile,
					       .allow_http = true };
}

/* Every byte of tensor `name` read through src equals the local file's. */
static void assert_tensor_bytes(const struct wd_source *src, const char *local, const char *name)
{
	const struct wd_tensor_info *t = wd_source_find(src, name);
	weightd_error err;
	uint8_t *got, *want;
	FILE *f;

	assert_non_null(t);
	got = malloc(t->nbytes);
	want = malloc(t->nbytes);
	assert_int_equal(wd_source_pread(src, t->file, got, t->nbytes, t->offset, &err), 0);
	f = fopen(local, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)t->offset, SEEK_SET), 0);
	assert_int_equal(fread(want, 1, t->nbytes, f), t->nbytes);
	fclose(f);
	assert_memory_equal(got, want, t->nbytes);
	free(got);
	free(want);
}

static void open_ok(const char *url, const struct wd_source_remote_conf *rc, struct wd_source **ret)
{
	weightd_error err;
	int r;

	wd_error_clear(&err);
	r = wd_source_open_at("m", url, rc, NULL, ret, &err);
	if (r)
		fail_msg("%s: %s", url, err.message);
}

/* One object over plain HTTP: its table, its bytes, its kind and identity. */
static void test_http_single(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	struct wd_source *a, *b, *local;
	uint8_t ia[32], ib[32], il[32];
	char url[256], path[4300];
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/single.safetensors", srv.http);
	snprintf(path, sizeof(path), "%s/single.safetensors", root);
	open_ok(url, &rc, &a);
	assert_true(wd_source_is_remote(a));
	assert_string_equal(wd_source_location_kind(a), "http");
	assert_int_equal(wd_source_kind(a), WD_SOURCE_SAFETENSORS);
	assert_int_equal(wd_source_tensor_count(a), 2);
	assert_non_null(wd_source_remote_object(a, 0));
	assert_true(wd_source_remote_object(a, 0)->etag[0] != '\0');
	assert_tensor_bytes(a, path, "a.weight");
	assert_tensor_bytes(a, path, "b.bias");
	assert_int_equal(wd_source_check(a, 0, &err), 0);
	assert_int_equal(wd_source_check_path(a, 0, &err), 0);
	/* the same object twice: the same identity; the local file: another */
	open_ok(url, &rc, &b);
	assert_int_equal(wd_source_open(path, path, NULL, &local, &err), 0);
	wd_source_identity(a, ia);
	wd_source_identity(b, ib);
	wd_source_identity(local, il);
	assert_memory_equal(ia, ib, 32);
	assert_memory_not_equal(ia, il, 32);
	wd_source_free(a);
	wd_source_free(b);
	wd_source_free(local);
}

/* Plain http:// needs allow_http. */
static void test_http_refused(void **state)
{
	struct wd_source *s = NULL;
	char url[256];
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/single.safetensors", srv.http);
	assert_int_equal(wd_source_open_at("m", url, NULL, NULL, &s, &err),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "allow_http"));
	assert_null(s);
}

/* A sharded directory over HTTPS (a CA the test made): admission reads the index and pins each
 * shard with one request for its first WD_SOURCE_REMOTE_PREFIX bytes, which hold its header
 * here; no shard is asked for anything else (the fault proxy counts the ranges). */
static void test_sharded_headers_only(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	struct wd_source *s;
	char url[256], path[4300], *stats;
	json_error_t je;
	json_t *j, *ranges, *e;
	size_t i, shard_requests = 0;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/dir/", srv.https);
	rc = https_conf();
	open_ok(url, &rc, &s);
	assert_int_equal(wd_source_kind(s), WD_SOURCE_SHARDED);
	assert_int_equal(wd_source_file_count(s), 2);
	assert_string_equal(wd_source_location_kind(s), "https");
	snprintf(path, sizeof(path), "%s/dir/model-00002-of-00002.safetensors", root);
	assert_tensor_bytes(s, path, "z");
	wd_source_free(s);

	rc = http_conf();
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/dir/", srv.fault);
	open_ok(url, &rc, &s);
	stats = wd_servers_get(srv.fault, "/__stats");
	assert_non_null(stats);
	j = json_loads(stats, 0, &je);
	assert_non_null(j);
	ranges = json_object_get(j, "ranges");
	assert_true(json_array_size(ranges) > 0);
	json_array_foreach(ranges, i, e) {
		const char *p = json_string_value(json_array_get(e, 0));
		const char *range = json_string_value(json_array_get(e, 1));
		unsigned long long from, to;

		if (strstr(p, "index.json"))
			continue;
		/* one pin with the prefix per shard, and nothing more */
		assert_int_equal(sscanf(range, "bytes=%llu-%llu", &from, &to), 2);
		assert_int_equal(from, 0);
		assert_int_equal(to, WD_SOURCE_REMOTE_PREFIX - 1);
		shard_requests++;
	}
	assert_int_equal(shard_requests, wd_source_file_count(s));
	json_decref(j);
	free(stats);
	wd_source_free(s);
}

/* Requests the fault proxy has seen since its last reset. */
static long proxy_requests(void)
{
	char *body = wd_servers_get(srv.fault, "/__stats");
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	long n = j ? (long)json_integer_value(json_object_get(j, "requests")) : -1;

	json_decref(j);
	free(body);
	return n;
}

/*
 * Small reads of a remote object (a recipe's inputs) go through a read-ahead window: a hundred
 * 1000-byte reads close together take one request, a read past the window one more, a read
 * back inside that window none, and a read as large as the window goes straight to the server;
 * every byte is the file's.
 */
static void test_small_reads_share_a_request(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	struct wd_source *s;
	char url[256], path[4300];
	uint8_t *want, *got = malloc(WD_SOURCE_REMOTE_READAHEAD);
	uint32_t file = UINT32_MAX;
	weightd_error err;
	FILE *f;
	long size;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(path, sizeof(path), "%s/dir/model-00002-of-00002.safetensors", root);
	f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	assert_true(size > 3 * (long)WD_SOURCE_REMOTE_READAHEAD);
	want = malloc((size_t)size);
	fseek(f, 0, SEEK_SET);
	assert_int_equal(fread(want, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/dir/", srv.fault);
	open_ok(url, &rc, &s);
	for (uint32_t k = 0; k < wd_source_file_count(s); k++)
		if (strstr(wd_source_file_name(s, k), "00002"))
			file = k;
	assert_true(file != UINT32_MAX);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	wd_error_clear(&err);
	for (uint64_t off = 4096; off < 4096 + 100 * 1000; off += 1000) {
		assert_int_equal(wd_source_pread(s, file, got, 1000, off, &err), 0);
		assert_memory_equal(got, want + off, 1000);
	}
	assert_int_equal(proxy_requests(), 1);
	assert_int_equal(wd_source_pread(s, file, got, 1000, 2u << 20, &err), 0);
	assert_memory_equal(got, want + (2u << 20), 1000);
	assert_int_equal(proxy_requests(), 2);
	assert_int_equal(wd_source_pread(s, file, got, 5000, (2u << 20) + 500, &err), 0);
	assert_memory_equal(got, want + (2u << 20) + 500, 5000);
	assert_int_equal(proxy_requests(), 2);
	assert_int_equal(wd_source_pread(s, file, got, WD_SOURCE_REMOTE_READAHEAD, 100, &err), 0);
	assert_memory_equal(got, want + 100, WD_SOURCE_REMOTE_READAHEAD);
	assert_int_equal(proxy_requests(), 3);
	wd_source_free(s);
	free(want);
	free(got);
}

/* The Hugging Face resolve layout redirects; the bearer-protected path wants the token. */
static void test_https_redirect_and_token(void **state)
{
	struct wd_source_remote_conf rc = https_conf();
	struct wd_source *s = NULL;
	char url[256], path[4300], loose[4300];
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(path, sizeof(path), "%s/single.safetensors", root);
	snprintf(url, sizeof(url),
		 "https://127.0.0.1:%d/hf/org/repo/resolve/main/single.safetensors", srv.https);
	open_ok(url, &rc, &s);
	assert_tensor_bytes(s, path, "a.weight");
	wd_source_free(s);

	snprintf(url, sizeof(url), "https://127.0.0.1:%d/private/single.safetensors", srv.https);
	assert_int_equal(wd_source_open_at("m", url, &rc, NULL, &s, &err),
			 -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "401"));
	rc.token_file = token_file;
	open_ok(url, &rc, &s);
	assert_tensor_bytes(s, path, "b.bias");
	wd_source_free(s);
	s = NULL;

	/* a token file others can read is refused, naming the file */
	snprintf(loose, sizeof(loose), "%s.loose", token_file);
	tf_write(loose, srv.token, 0644);
	rc.token_file = loose;
	assert_int_equal(wd_source_open_at("m", url, &rc, NULL, &s, &err),
			 -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, loose));
	assert_null(strstr(err.message, srv.token));
	unlink(loose);

	/* without the CA, the server's certificate does not verify */
	rc = (struct wd_source_remote_conf){ 0 };
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/single.safetensors", srv.https);
	assert_true(wd_source_open_at("m", url, &rc, NULL, &s, &err) < 0);
}

/* S3, path-style, signed (botocore checks every signature): a profile's keys open it, a wrong
 * secret is refused with S3's code and never shown. */
static void test_s3(void **state)
{
	struct wd_source_remote_conf rc = s3_conf(cred_file, "test");
	struct wd_source *s = NULL;
	char url[256], path[4300];
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(url, sizeof(url), "s3://%s/dir/", srv.bucket);
	open_ok(url, &rc, &s);
	assert_string_equal(wd_source_location_kind(s), "s3");
	assert_int_equal(wd_source_tensor_count(s), 3);
	snprintf(path, sizeof(path), "%s/dir/model-00001-of-00002.safetensors", root);
	assert_tensor_bytes(s, path, "y");
	wd_source_free(s);
	s = NULL;

	snprintf(url, sizeof(url), "s3://%s/single.safetensors", srv.bucket);
	rc = s3_conf(bad_cred_file, NULL);
	assert_int_equal(wd_source_open_at("m", url, &rc, NULL, &s, &err),
			 -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "403"));
	assert_non_null(strstr(err.message, "SignatureDoesNotMatch"));
	assert_null(strstr(err.message, "wr0ngSecretValue"));
	assert_null(s);
}

/* GGUF by magic, read by growing range reads. */
static void test_gguf(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	struct wd_source *s;
	char url[256];

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/tiny.gguf", srv.http);
	open_ok(url, &rc, &s);
	assert_int_equal(wd_source_kind(s), WD_SOURCE_GGUF);
	assert_non_null(wd_source_find(s, "w"));
	wd_source_free(s);
}

/* A replaced object: the pin notices it, and a read never returns the new bytes. */
static void test_replaced(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	static const struct stw_tensor other[] = {
		{ .name = "a.weight", .dtype = "F32", .ndim = 2, .shape = { 64, 32 }, .seed = 9 },
		{ .name = "b.bias", .dtype = "BF16", .ndim = 1, .shape = { 300 }, .seed = 2 },
	};
	const struct wd_tensor_info *t;
	struct wd_source *s;
	char url[256], path[4300], tmp[4300];
	weightd_error err;
	uint8_t buf[64];

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(path, sizeof(path), "%s/swapme.safetensors", root);
	put_st(path, single_ts, 2);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/swapme.safetensors", srv.http);
	open_ok(url, &rc, &s);
	sleep(1); /* nginx's ETag is mtime (seconds) and size */
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	put_st(tmp, other, 2);
	assert_int_equal(rename(tmp, path), 0);
	assert_int_equal(wd_source_check_path(s, 0, &err), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "replaced"));
	t = wd_source_find(s, "a.weight");
	assert_int_equal(wd_source_pread(s, t->file, buf, sizeof(buf), t->offset, &err),
			 -WEIGHTD_E_SOURCE_CHANGED);
	wd_source_free(s);
}

/* A URL's query (a presigned signature) is sent but never shown; a directory without an index
 * says so, naming the URL. */
static void test_query_never_shown(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	struct wd_source *s = NULL;
	char url[256], shown[256];
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(url, sizeof(url),
		 "http://user:pw@127.0.0.1:%d/single.safetensors?X-Amz-Signature=deadbeefSIG",
		 srv.http);
	wd_source_show_path(url, shown, sizeof(shown));
	assert_null(strstr(shown, "deadbeefSIG"));
	assert_null(strstr(shown, "pw@"));
	open_ok(url, &rc, &s);
	assert_null(strstr(wd_source_path(s), "deadbeefSIG"));
	assert_null(strstr(wd_source_remote_object(s, 0)->shown, "deadbeefSIG"));
	wd_source_free(s);
	s = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/nothere.safetensors?sig=deadbeefSIG",
		 srv.http);
	assert_int_equal(wd_source_open_at("m", url, &rc, NULL, &s, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "404"));
	assert_non_null(strstr(err.message, "nothere.safetensors"));
	assert_null(strstr(err.message, "deadbeefSIG"));

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/noindex/", srv.http);
	assert_int_equal(wd_source_open_at("m", url, &rc, NULL, &s, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "model.safetensors.index.json"));
	assert_null(s);
}

/* An index naming a shard the server does not have: the shard is named, nothing is kept. */
static void test_missing_shard(void **state)
{
	struct wd_source_remote_conf rc = http_conf();
	struct wd_source *s = NULL;
	char url[256], p[4300];
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(p, sizeof(p), "%s/holey", root);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/holey/a.safetensors", root);
	put_st(p, shard1_ts, 2);
	snprintf(p, sizeof(p), "%s/holey/model.safetensors.index.json", root);
	tf_write(p,
		   "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\","
		   " \"z\": \"gone.safetensors\"}}",
		   0644);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/holey/", srv.http);
	assert_int_equal(wd_source_open_at("m", url, &rc, NULL, &s, &err),
			 -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "gone.safetensors does not exist"));
	assert_non_null(strstr(err.message, "404"));
	assert_null(s);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_http_single), cmocka_unit_test(test_http_refused),
	  cmocka_unit_test(test_sharded_headers_only),
	  cmocka_unit_test(test_https_redirect_and_token), cmocka_unit_test(test_s3),
	  cmocka_unit_test(test_gguf), cmocka_unit_test(test_replaced),
	  cmocka_unit_test(test_query_never_shown), cmocka_unit_test(test_missing_shard),
	  cmocka_unit_test(test_small_reads_share_a_request))
