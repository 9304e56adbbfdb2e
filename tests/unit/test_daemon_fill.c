/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_daemon_fill.c - daemon/fill.c over remote checkpoints: a stored weight fetched in parallel
 * ranges straight into its segment, digested as it lands (the same bytes and digest as the local
 * fill of the same file), a failure or a stop that ends the fill with a typed error. Against
 * nginx and the fault proxy of tests/remote/servers.py on loopback.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "fill.h"
#include "recipe.h"
#include "remote.h"
#include "servers.h"
#include "source.h"
#include "st_writer.h"

#define BIG_BYTES   ((40ull << 20) + 5) /* three digest chunks, the last short */
#define SMALL_BYTES 1000u

static char root[4096];
static struct wd_servers srv;

static int setup(void **state)
{
	const struct stw_tensor ts[] = {
		{ .name = "small", .dtype = "U8", .ndim = 1, .shape = { SMALL_BYTES }, .seed = 3 },
		{ .name = "big", .dtype = "U8", .ndim = 1, .shape = { BIG_BYTES }, .seed = 5 },
		{ .name = "s0", .dtype = "U8", .ndim = 1, .shape = { 100003 }, .seed = 10 },
		{ .name = "s1", .dtype = "U8", .ndim = 1, .shape = { 100003 }, .seed = 11 },
		{ .name = "s2", .dtype = "U8", .ndim = 1, .shape = { 100003 }, .seed = 12 },
		{ .name = "s3", .dtype = "U8", .ndim = 1, .shape = { 100003 }, .seed = 13 },
		{ .name = "s4", .dtype = "U8", .ndim = 1, .shape = { 100003 }, .seed = 14 },
		{ .name = "s5", .dtype = "U8", .ndim = 1, .shape = { 100003 }, .seed = 15 },
	};

	(void)state;
	return wd_servers_serve_tensors(&srv, root, sizeof(root), ts, sizeof(ts) / sizeof(ts[0]), false);
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_end(&srv, root);
	return 0;
}

static int lookup(void *ctx, const char *checkpoint, const struct wd_source **ret,
		  weightd_error *err)
{
	(void)checkpoint;
	(void)err;
	*ret = ctx;
	return 0;
}

/* The remote source: m.safetensors through the fault proxy (its log shows every range). */
static struct wd_source *open_remote(unsigned retries)
{
	struct wd_source_remote_conf rc = { .allow_http = true, .retries = retries };
	struct wd_source *s = NULL;
	char url[256];
	weightd_error err;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/m.safetensors", srv.fault);
	wd_error_clear(&err);
	if (wd_source_open_at("m", url, &rc, NULL, &s, &err) < 0)
		fail_msg("%s: %s", url, err.message);
	return s;
}

static struct wd_source *open_local(void)
{
	struct wd_source *s = NULL;
	char path[4200];
	weightd_error err;

	snprintf(path, sizeof(path), "%s/m.safetensors", root);
	wd_error_clear(&err);
	if (wd_source_open("m", path, NULL, &s, &err) < 0)
		fail_msg("%s: %s", path, err.message);
	return s;
}

struct filled {
	int rc;
	weightd_error err;
	uint8_t digest[WD_DIGEST_MAX];
	uint64_t read, progress;
	int fd; /* the "segment": the weight at offset 4096 */
};

/* Fill tensor `name` of src into a fresh memfd at offset 4096, as a worker without helpers. */
static void fill(const struct wd_source *src, const char *name, uint64_t nbytes,
		 enum wd_digest_alg alg, struct filled *f)
{
	const struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	struct wd_resolver res = { (void *)src, lookup };
	struct wd_scratch scratch;
	struct wd_plan *plan = NULL;

	memset(f, 0, sizeof(*f));
	f->fd = memfd_create("fill-test", MFD_CLOEXEC);
	assert_true(f->fd >= 0);
	assert_int_equal(ftruncate(f->fd, (off_t)(4096 + nbytes)), 0);
	assert_int_equal(wd_scratch_init(&scratch, WD_SCRATCH_BYTES), 0);
	assert_int_equal(wd_recipe_preflight_tensor("m", name, &res, &lim, &plan, &f->err), 0);
	wd_error_clear(&f->err);
	f->rc = fill_weight(NULL, plan, f->fd, 4096, nbytes, alg, &f->progress, &scratch, f->digest,
			    &f->read, &f->err);
	wd_plan_free(plan);
	wd_scratch_free(&scratch);
}

/* Byte i of tensor with `seed` (tests/common/st_writer.h's pattern, computed here). */
static void check_bytes(int fd, uint64_t nbytes, uint32_t seed)
{
	uint8_t *p = mmap(NULL, 4096 + nbytes, PROT_READ, MAP_SHARED, fd, 0);

	assert_true(p != MAP_FAILED);
	for (uint64_t i = 0; i < nbytes; i++)
		if (p[4096 + i] != (uint8_t)((i * 131 + seed * 7 + 13) & 0xff))
			fail_msg("byte %llu differs", (unsigned long long)i);
	munmap(p, 4096 + nbytes);
}

/* The proxy's log since the last reset: requests, and the largest range asked for. */
static void proxy_log(int *ret_requests, uint64_t *ret_largest)
{
	char *body = wd_servers_get(srv.fault, "/__stats");
	json_t *j = json_loads(body, 0, NULL), *ranges;
	size_t i;
	json_t *r;

	assert_non_null(j);
	*ret_requests = (int)json_integer_value(json_object_get(j, "requests"));
	*ret_largest = 0;
	ranges = json_object_get(j, "ranges");
	json_array_foreach(ranges, i, r) {
		unsigned long long a, b;
		if (sscanf(json_string_value(json_array_get(r, 1)), "bytes=%llu-%llu", &a, &b) ==
			    2 &&
		    b - a + 1 > *ret_largest)
			*ret_largest = b - a + 1;
	}
	json_decref(j);
	free(body);
}

/*
 * A stored weight of a remote object lands in its segment through many ranges of remote_chunk
 * bytes at once (the node's slots show more than one in flight), with the same bytes and the
 * same digest, of either algorithm, as the local fill of the same file; progress counts every
 * byte once.
 */
static void test_remote_weight_is_fetched_in_parallel_ranges(void **state)
{
	enum wd_digest_alg algs[] = { WD_DIGEST_XXH3_128, WD_DIGEST_SHA256 };
	struct wd_source *remote, *local;
	struct filled fr, fl;
	unsigned in_use, peak;
	uint64_t largest;
	int requests;

	(void)state;
	NEED_SERVERS(&srv);
	remote = open_remote(0);
	local = open_local();
	/* ranges of 1 MiB (a chunk in 16 pieces, hashed from the segment) and of 16 MiB (a chunk
	 * per request, hashed as it arrives) */
	for (size_t k = 0; k < 4; k++) {
		size_t a = k % 2;
		uint64_t chunk = k < 2 ? 1u << 20 : 16u << 20;
		fill_remote_set(6, chunk, WD_REMOTE_GAP_DEFAULT);
		free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
		fill(remote, "big", BIG_BYTES, algs[a], &fr);
		if (fr.rc)
			fail_msg("%s", fr.err.message);
		proxy_log(&requests, &largest);
		/* ranges of at most `chunk`, no more (nothing read twice) */
		assert_int_equal(requests, (int)((BIG_BYTES + chunk - 1) / chunk));
		assert_true(largest <= chunk);
		wd_remote_slots(&in_use, &peak);
		assert_int_equal(in_use, 0);
		assert_true(peak > 1);
		assert_int_equal(fr.read, BIG_BYTES);
		assert_int_equal(fr.progress, BIG_BYTES);
		check_bytes(fr.fd, BIG_BYTES, 5);
		fill(local, "big", BIG_BYTES, algs[a], &fl);
		assert_int_equal(fl.rc, 0);
		assert_memory_equal(fr.digest, fl.digest, wd_digest_len(algs[a]));
		close(fr.fd);
		close(fl.fd);
	}
	/* a weight under one chunk is one range, and its digest the plain hash of its bytes */
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	fill(remote, "small", SMALL_BYTES, WD_DIGEST_XXH3_128, &fr);
	assert_int_equal(fr.rc, 0);
	proxy_log(&requests, &largest);
	assert_int_equal(requests, 1);
	check_bytes(fr.fd, SMALL_BYTES, 3);
	fill(local, "small", SMALL_BYTES, WD_DIGEST_XXH3_128, &fl);
	assert_memory_equal(fr.digest, fl.digest, 16);
	close(fr.fd);
	close(fl.fd);
	fill_remote_set(0, WD_REMOTE_CHUNK_DEFAULT, WD_REMOTE_GAP_DEFAULT);
	wd_source_free(remote);
	wd_source_free(local);
}

/*
 * Small stored weights of one remote object, as a batch holds them, are fetched together:
 * coalesced into as few requests of at most remote_chunk bytes as fit (all six in one, two a
 * request, or each cut in two so that it straddles two requests), several at once, each weight
 * with its own bytes, each digest the plain hash of its bytes (the local fill's) whether it
 * arrived in one request or two, each progress counted whole.
 */
static void test_a_run_of_small_weights_is_fetched_together(void **state)
{
	const struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	/* remote_chunk, and the requests it takes: 6 x 100003 bytes (and the file's padding) */
	const struct {
		uint64_t chunk;
		int requests;
	} cases[] = { { 1u << 20, 1 }, { 256u << 10, 3 }, { 64u << 10, 12 } };
	struct wd_source *remote, *local;
	struct wd_resolver res;
	struct wd_plan *plans[6];
	struct fill_part parts[6];
	uint8_t digests[6][WD_DIGEST_MAX];
	uint64_t progress[6] = { 0 };
	struct wd_scratch scratch;
	struct filled fl;
	weightd_error err;
	unsigned in_use, peak;
	uint64_t largest;
	int requests, fd = memfd_create("fill-test", MFD_CLOEXEC);

	(void)state;
	NEED_SERVERS(&srv);
	remote = open_remote(0);
	local = open_local();
	res = (struct wd_resolver){ remote, lookup };
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(wd_scratch_init(&scratch, WD_SCRATCH_BYTES), 0);
	for (int i = 0; i < 6; i++) {
		char name[8];
		snprintf(name, sizeof(name), "s%d", i);
		assert_int_equal(wd_recipe_preflight_tensor("m", name, &res, &lim, &plans[i], &err),
				 0);
		/* in the segment in another order than in the file, with gaps */
		parts[i] = (struct fill_part){ plans[i],
					       { .base = (uint64_t)(5 - i) * 150000 + 7,
						 .size = 100003,
						 .alg = WD_DIGEST_XXH3_128,
						 .digest = digests[i],
						 .progress = &progress[i] } };
	}
	assert_int_equal(fill_remote_run_length(parts, 6), 6);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		fill_remote_set(4, cases[c].chunk, WD_REMOTE_GAP_DEFAULT);
		free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
		assert_int_equal(ftruncate(fd, 0), 0);
		assert_int_equal(ftruncate(fd, 1 << 20), 0);
		memset(progress, 0, sizeof(progress));
		memset(digests, 0, sizeof(digests));
		wd_error_clear(&err);
		assert_int_equal(fill_remote_run(NULL, fd, parts, 6, &scratch, &err), 0);
		proxy_log(&requests, &largest);
		assert_int_equal(requests, cases[c].requests);
		assert_true(largest <= cases[c].chunk);
		if (cases[c].requests > 1) {
			wd_remote_slots(&in_use, &peak);
			assert_true(peak > 1);
		}
		for (int i = 0; i < 6; i++) {
			uint8_t *p = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
			char name[8];
			assert_true(p != MAP_FAILED);
			for (uint64_t b = 0; b < 100003; b++)
				if (p[parts[i].out.base + b] !=
				    (uint8_t)((b * 131 + (10 + i) * 7 + 13) & 0xff))
					fail_msg("s%d: byte %llu differs", i, (unsigned long long)b);
			munmap(p, 1 << 20);
			assert_int_equal(progress[i], 100003);
			snprintf(name, sizeof(name), "s%d", i);
			fill(local, name, 100003, WD_DIGEST_XXH3_128, &fl);
			assert_int_equal(fl.rc, 0);
			assert_memory_equal(digests[i], fl.digest, 16);
			close(fl.fd);
		}
	}
	for (int i = 0; i < 6; i++)
		wd_plan_free(plans[i]);
	/* a local weight starts no remote run */
	res = (struct wd_resolver){ local, lookup };
	assert_int_equal(wd_recipe_preflight_tensor("m", "s0", &res, &lim, &plans[0], &err), 0);
	parts[0].plan = plans[0];
	assert_int_equal(fill_remote_run_length(parts, 1), 0);
	wd_plan_free(plans[0]);
	fill_remote_set(0, WD_REMOTE_CHUNK_DEFAULT, WD_REMOTE_GAP_DEFAULT);
	wd_scratch_free(&scratch);
	close(fd);
	wd_source_free(remote);
	wd_source_free(local);
}

/* A server that keeps failing fails the fill with a typed error naming the URL and the status
 * (the caller discards the range: job_work punches it out). */
static void test_a_failing_server_fails_the_weight(void **state)
{
	struct wd_source *remote;
	struct filled fr;

	(void)state;
	NEED_SERVERS(&srv);
	remote = open_remote(1);
	fill_remote_set(4, 1u << 20, WD_REMOTE_GAP_DEFAULT);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	free(wd_servers_get(srv.fault, "/__ctl?fault=500&n=1000"));
	fill(remote, "big", BIG_BYTES, WD_DIGEST_XXH3_128, &fr);
	assert_int_equal(fr.rc, -WEIGHTD_E_IO);
	assert_non_null(strstr(fr.err.message, "/m.safetensors"));
	assert_non_null(strstr(fr.err.message, "HTTP 500"));
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	close(fr.fd);
	fill_remote_set(0, WD_REMOTE_CHUNK_DEFAULT, WD_REMOTE_GAP_DEFAULT);
	wd_source_free(remote);
}

/* Answers cut mid-body are resumed from their missing bytes, and a chunk hashed as it arrives
 * still sees each byte once: the digest is the local fill's. */
static void test_resumed_ranges_keep_the_digest(void **state)
{
	struct wd_source *remote, *local;
	struct filled fr, fl;

	(void)state;
	NEED_SERVERS(&srv);
	remote = open_remote(3);
	local = open_local();
	fill_remote_set(4, 16u << 20, WD_REMOTE_GAP_DEFAULT);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	free(wd_servers_get(srv.fault, "/__ctl?fault=drop&n=3&after=1000000"));
	fill(remote, "big", BIG_BYTES, WD_DIGEST_XXH3_128, &fr);
	if (fr.rc)
		fail_msg("%s", fr.err.message);
	assert_int_equal(fr.progress, BIG_BYTES);
	check_bytes(fr.fd, BIG_BYTES, 5);
	fill(local, "big", BIG_BYTES, WD_DIGEST_XXH3_128, &fl);
	assert_memory_equal(fr.digest, fl.digest, 16);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	close(fr.fd);
	close(fl.fd);
	fill_remote_set(0, WD_REMOTE_CHUNK_DEFAULT, WD_REMOTE_GAP_DEFAULT);
	wd_source_free(remote);
	wd_source_free(local);
}

static void *stop_soon(void *arg)
{
	(void)arg;
	usleep(300000);
	wd_remote_stop(true);
	return NULL;
}

/* A fill waiting on a stalled server ends soon after the daemon stops transfers (SIGTERM). */
static void test_stop_ends_a_stalled_fill(void **state)
{
	struct wd_source *remote;
	struct filled fr;
	struct timespec t0, t1;
	pthread_t t;

	(void)state;
	NEED_SERVERS(&srv);
	remote = open_remote(0);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	free(wd_servers_get(srv.fault, "/__ctl?fault=stall&n=1000&seconds=30"));
	pthread_create(&t, NULL, stop_soon, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fill(remote, "big", BIG_BYTES, WD_DIGEST_XXH3_128, &fr);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(t, NULL);
	wd_remote_stop(false);
	assert_int_equal(fr.rc, -WEIGHTD_E_CANCELLED);
	assert_true(t1.tv_sec - t0.tv_sec < 3);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	close(fr.fd);
	wd_source_free(remote);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_remote_weight_is_fetched_in_parallel_ranges),
	  cmocka_unit_test(test_a_run_of_small_weights_is_fetched_together),
	  cmocka_unit_test(test_a_failing_server_fails_the_weight),
	  cmocka_unit_test(test_resumed_ranges_keep_the_digest),
	  cmocka_unit_test(test_stop_ends_a_stalled_fill))
