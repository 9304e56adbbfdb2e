/* SPDX-License-Identifier: Apache-2.0 */
/* test_digest.c - content digests (XXH3-128 by default, SHA-256 on request, composed over
 * chunks), weights filled by both workers at once, small weights filled in batches, and
 * re-adoption of weights hashed with another algorithm. */
#include <openssl/evp.h>
#include <xxhash.h>

#include "fixture.h"

static char ckpt[400];   /* the fixture's path */

#define N_SMALL 96

/*
 * d.safetensors: "big" (F32, 40 MiB: three digest chunks, filled by both workers), "half" (BF16,
 * 20 MiB: cast to F32 it is 40 MiB, again in chunks), and N_SMALL small U8 tensors s0.. of
 * varied sizes (filled in batches).
 */
static void fixture(char *path, size_t cap)
{
	char cmd[8192];
	int n;

	harness_path(&H, "d.safetensors", path, cap);
	snprintf(ckpt, sizeof(ckpt), "%s", path);
	n = snprintf(cmd, sizeof(cmd), "safetensors %s --seed 3 --tensor big:F32:2560x4096 "
		     "--tensor half:BF16:5120x2048", path);
	for (int i = 0; i < N_SMALL; i++)
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --tensor s%d:U8:%d", i,
			      1 + i * 997 % 70000);
	assert_true(n < (int)sizeof(cmd));
	it_fixture("%s", cmd);
}

/* One hash over len bytes in canonical bytes, straight from libxxhash or OpenSSL. */
static void hash1(weightd_digest_algorithm alg, const void *p, size_t len, uint8_t *out)
{
	if (alg == WEIGHTD_DIGEST_SHA256) {
		unsigned int n = 32;
		assert_int_equal(EVP_Digest(p, len, out, &n, EVP_sha256(), NULL), 1);
	} else {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits(p, len));
		memcpy(out, c.digest, 16);
	}
}

/* The digest client.h documents: the plain hash up to one chunk, else the hash of the
 * concatenated chunk hashes. */
static void documented(weightd_digest_algorithm alg, const uint8_t *p, uint64_t len,
		       uint8_t *out)
{
	size_t dl = alg == WEIGHTD_DIGEST_SHA256 ? 32 : 16;
	uint64_t n = (len + WEIGHTD_DIGEST_CHUNK - 1) / WEIGHTD_DIGEST_CHUNK;
	uint8_t *cat;

	if (len <= WEIGHTD_DIGEST_CHUNK) {
		hash1(alg, p, (size_t)len, out);
		return;
	}
	cat = malloc(n * dl);
	assert_non_null(cat);
	for (uint64_t k = 0; k < n; k++) {
		uint64_t off = k * WEIGHTD_DIGEST_CHUNK;
		hash1(alg, p + off, (size_t)(len - off < WEIGHTD_DIGEST_CHUNK ? len - off :
					     WEIGHTD_DIGEST_CHUNK), cat + k * dl);
	}
	hash1(alg, cat, n * dl, out);
	free(cat);
}

/* A tensor's bytes read from the fixture file (malloc'd). */
static uint8_t *file_bytes(const weightd_description *d, const char *name, uint64_t *ret_len)
{
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		uint8_t *p;
		int fd;

		if (strcmp(t->name, name) != 0)
			continue;
		p = malloc(t->nbytes ? t->nbytes : 1);
		fd = open(ckpt, O_RDONLY | O_CLOEXEC);
		assert_non_null(p);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, p, t->nbytes, (off_t)t->offset), (ssize_t)t->nbytes);
		close(fd);
		*ret_len = t->nbytes;
		return p;
	}
	fail_msg("no tensor %s", name);
	return NULL;
}

/* Every tensor of d, plus cast(half, F32) as "half32", in one unit, bound. */
static weightd_unit *bind_all(weightd_client *c, const weightd_description *d, bool with_cast)
{
	weightd_unit *u = NULL;
	weightd_error err;

	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	for (size_t i = 0; i < d->n_tensors; i++) {
		const char *n = d->tensors[i].name;
		if (weightd_unit_slot(u, n, NULL, NULL, 0, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, n, "d", n, NULL, &err) < 0)
			fail_msg("slot %s: %s", n, err.message);
	}
	if (with_cast) {
		weightd_recipe *r = NULL;
		int src;
		if (weightd_unit_slot(u, "half32", NULL, NULL, 0, NULL, &err) < 0 ||
		    weightd_recipe_new(&r, &err) < 0 ||
		    (src = weightd_recipe_source(r, "d", "half", NULL, &err)) < 0 ||
		    weightd_recipe_cast(r, src, "F32", &err) < 0 ||
		    weightd_unit_set_recipe(u, "half32", r, &err) < 0)
			fail_msg("cast recipe: %s", err.message);
		weightd_recipe_free(r);
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
		fail_msg("unit: %s", err.message);
	weightd_unit_bind(u);
	return u;
}

/* The weight in slot `name` carries the digest of algorithm alg of exactly `bytes`. */
static void expect_digest(weightd_unit *u, const char *name, weightd_digest_algorithm alg,
			  const uint8_t *bytes, uint64_t len)
{
	const weightd_weight *w = weightd_unit_weight(u, name);
	uint8_t want[32];

	assert_non_null(w);
	assert_int_equal(weightd_weight_digest_algorithm(w), alg);
	assert_int_equal(weightd_weight_digest_len(w), alg == WEIGHTD_DIGEST_SHA256 ? 32 : 16);
	documented(alg, bytes, len, want);
	if (memcmp(weightd_weight_digest(w), want, weightd_weight_digest_len(w)) != 0)
		fail_msg("%s: the daemon's %s digest differs from the bytes' own", name,
			 weightd_digest_algorithm_name(alg));
}

/*
 * Default configuration: every weight (a 40 MiB one and a 40 MiB cast filled chunk by chunk by
 * both workers, and the small ones filled in batches, runs of them from one read) holds exactly the file's bytes (the cast:
 * each BF16 widened by the IEEE rule, computed here), and carries the XXH3-128 digest of those
 * bytes as the test computes it with libxxhash.
 */
static void default_digest_is_xxh3_of_the_bytes(void **state)
{
	char path[400], sec[600];
	weightd_description *d = NULL;
	weightd_client *c;
	weightd_status *st;
	weightd_error err;
	weightd_unit *u;

	fixture(path, sizeof(path));
	snprintf(sec, sizeof(sec), "[checkpoint:d]\npath = %s\n", path);
	it_start(&H, "log_level = debug", sec);
	c = it_connect(&H);
	assert_int_equal(weightd_describe(c, "d", &d, &err), 0);
	u = bind_all(c, d, true);
	for (size_t i = 0; i < d->n_tensors; i++) {
		const char *n = d->tensors[i].name;
		uint64_t len;
		uint8_t *want = file_bytes(d, n, &len);

		assert_int_equal(weightd_weight_nbytes(weightd_unit_weight(u, n)), len);
		if (memcmp(weightd_unit_data(u, n), want, len) != 0)
			fail_msg("%s: the bound bytes differ from the file's", n);
		expect_digest(u, n, WEIGHTD_DIGEST_XXH3_128, want, len);
		free(want);
	}
	{
		uint64_t len;
		uint8_t *half = file_bytes(d, "half", &len);
		uint32_t *want = malloc(len * 2);

		assert_non_null(want);
		for (uint64_t k = 0; k < len / 2; k++) {
			uint16_t b = (uint16_t)(half[2 * k] | half[2 * k + 1] << 8);
			if ((b & 0x7FFF) > 0x7F80)
				b |= 0x0040;  /* a NaN comes out quiet */
			want[k] = (uint32_t)b << 16;
		}
		assert_int_equal(weightd_weight_nbytes(weightd_unit_weight(u, "half32")), len * 2);
		if (memcmp(weightd_unit_data(u, "half32"), want, len * 2) != 0)
			fail_msg("half32: the cast's bytes differ from the widened BF16");
		expect_digest(u, "half32", WEIGHTD_DIGEST_XXH3_128, (const uint8_t *)want, len * 2);
		free(want);
		free(half);
	}

	/* the paths this test means to cover were taken */
	assert_true(harness_log_contains(&H, "filling d:big in 3 chunks, with up to 1 helper"));
	assert_true(harness_log_contains(&H, "filling cast(d:half, F32) in 3 chunks"));
	assert_true(harness_log_contains(&H, "small weights"));
	/* and consecutive small tensors were read together (fill.c, runs) */
	assert_true(harness_log_contains(&H, "weights (") &&
		    harness_log_contains(&H, ") from one read of d"));
	st = it_status(c);
	assert_int_equal(st->digest_algorithm, WEIGHTD_DIGEST_XXH3_128);
	assert_int_equal(st->digest_chunk_bytes, WEIGHTD_DIGEST_CHUNK);
	assert_int_equal(st->materializations, d->n_tensors + 1);
	for (size_t i = 0; i < st->n_weights; i++) {
		assert_int_equal(st->weight_list[i].digest_algorithm, WEIGHTD_DIGEST_XXH3_128);
		assert_int_equal(st->weight_list[i].digest_len, 16);
	}
	weightd_status_free(st);
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
	assert_int_equal(harness_stop(&H), 0);
}

/* /dev/shm path of the segment the weight of tensor `name` of checkpoint d lies in, and its
 * offset there, from status (segment names are random; status says which holds what). */
static void segment_path(weightd_client *c, const char *name, char *out, size_t cap,
			 uint64_t *ret_off)
{
	weightd_status *st = it_status(c);
	const weightd_weight_status *ws = it_weight(st, "d", name);

	assert_non_null(ws);
	*ret_off = ws->offset;
	for (size_t k = 0; k < st->n_segments; k++)
		if (st->segment_list[k].id == ws->segment) {
			snprintf(out, cap, "%s%s", H.shm_dir, st->segment_list[k].name);
			weightd_status_free(st);
			return;
		}
	fail_msg("no segment %llu in status", (unsigned long long)ws->segment);
}

/*
 * digest = sha256: the digests are SHA-256 (chunked as documented) computed here with OpenSSL.
 * Restarted with the default algorithm and verify_adopted, the daemon re-adopts those weights
 * checking them with the SHA-256 their records name, drops the one whose bytes were changed,
 * serves the others with their SHA-256 digests, and fills new weights with XXH3-128.
 */
static void sha256_on_request_and_readoption_across_algorithms(void **state)
{
	char path[400], sec[600], seg_big[300], seg_s[300];
	weightd_description *d = NULL;
	weightd_client *c;
	weightd_status *st;
	weightd_error err;
	weightd_unit *u;
	uint8_t big_digest[32];
	uint64_t off_big, off_s;
	int fd;

	fixture(path, sizeof(path));
	snprintf(sec, sizeof(sec), "[checkpoint:d]\npath = %s\n", path);
	it_start(&H, "digest = sha256\nverify_adopted = yes", sec);
	c = it_connect(&H);
	assert_int_equal(weightd_describe(c, "d", &d, &err), 0);
	u = bind_all(c, d, false);
	for (size_t i = 0; i < d->n_tensors; i++) {
		uint64_t len;
		uint8_t *want = file_bytes(d, d->tensors[i].name, &len);
		expect_digest(u, d->tensors[i].name, WEIGHTD_DIGEST_SHA256, want, len);
		free(want);
	}
	st = it_status(c);
	assert_int_equal(st->digest_algorithm, WEIGHTD_DIGEST_SHA256);
	weightd_status_free(st);
	memcpy(big_digest, weightd_weight_digest(weightd_unit_weight(u, "big")), 32);
	segment_path(c, "big", seg_big, sizeof(seg_big), &off_big);
	segment_path(c, "s5", seg_s, sizeof(seg_s), &off_s);
	weightd_unit_free(u);
	weightd_close(c);
	harness_kill(&H);

	/* one byte of s5 changed in place, in its (possibly shared) segment */
	fd = open(seg_s, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\x5a", 1, (off_t)off_s + 3), 1);
	close(fd);

	it_start(&H, "verify_adopted = yes", sec);
	assert_true(harness_log_contains(&H, "do not have the recorded sha256 digest"));
	/* s5 alone is dropped: its segment goes only when nothing else lies in it */
	assert_int_equal(access(seg_s, F_OK), strcmp(seg_s, seg_big) == 0 ? 0 : -1);
	assert_int_equal(access(seg_big, F_OK), 0);
	(void)off_big;
	st = it_status_of(&H);
	assert_int_equal(st->digest_algorithm, WEIGHTD_DIGEST_XXH3_128);
	assert_int_equal(st->readoptions, d->n_tensors - 1);
	{
		const weightd_weight_status *ws = it_weight(st, "d", "big");
		assert_non_null(ws);
		assert_true(ws->adopted);
		assert_int_equal(ws->digest_algorithm, WEIGHTD_DIGEST_SHA256);
		assert_int_equal(ws->digest_len, 32);
		assert_memory_equal(ws->digest, big_digest, 32);
		assert_null(it_weight(st, "d", "s5"));
	}
	weightd_status_free(st);

	/* served again: the adopted ones keep SHA-256, the dropped one is refilled with XXH3 */
	c = it_connect(&H);
	u = bind_all(c, d, false);
	assert_int_equal(weightd_unit_bytes_read(u), d->tensors[2 + 5].nbytes);
	for (size_t i = 0; i < d->n_tensors; i++) {
		const char *n = d->tensors[i].name;
		uint64_t len;
		uint8_t *want = file_bytes(d, n, &len);

		if (memcmp(weightd_unit_data(u, n), want, len) != 0)
			fail_msg("%s: the bound bytes differ from the file's", n);
		expect_digest(u, n, strcmp(n, "s5") == 0 ? WEIGHTD_DIGEST_XXH3_128 :
			      WEIGHTD_DIGEST_SHA256, want, len);
		free(want);
	}
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
	assert_int_equal(harness_stop(&H), 0);
}

/*
 * A checkpoint touched after it was admitted (same size, new modification time): the small
 * tensors' run fails its check, each is retried alone and fails as source-changed, naming the
 * file; nothing is left made or half-made, and the daemon serves the unchanged "big".
 */
static void changed_file_fails_a_run_cleanly(void **state)
{
	char path[400], sec[600];
	weightd_description *d = NULL;
	struct timespec later[2];
	weightd_client *c;
	weightd_status *st;
	weightd_error err;
	weightd_unit *u = NULL;
	int r;

	fixture(path, sizeof(path));
	snprintf(sec, sizeof(sec), "[checkpoint:d]\npath = %s\n", path);
	it_start(&H, "log_level = debug", sec);
	c = it_connect(&H);
	assert_int_equal(weightd_describe(c, "d", &d, &err), 0);
	clock_gettime(CLOCK_REALTIME, &later[0]);
	later[0].tv_sec += 100;
	later[1] = later[0];
	assert_int_equal(utimensat(AT_FDCWD, path, later, 0), 0);

	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	for (int i = 0; i < N_SMALL; i++) {
		char n[16];
		snprintf(n, sizeof(n), "s%d", i);
		assert_true(weightd_unit_slot(u, n, NULL, NULL, 0, NULL, &err) >= 0);
		assert_true(weightd_unit_set_tensor(u, n, "d", n, NULL, &err) >= 0);
	}
	r = weightd_unit_submit(u, &err);
	if (r == 0)
		r = weightd_unit_validate(u, &err);
	if (r != -WEIGHTD_E_SOURCE_CHANGED)
		fail_msg("expected source-changed, got %s: %s", weightd_code_name(r), err.message);
	assert_non_null(strstr(err.message, "d.safetensors"));
	weightd_unit_free(u);
	assert_true(harness_log_contains(&H, "a run of "));
	assert_true(harness_log_contains(&H, "failed; filling them one by one"));
	st = it_status(c);
	assert_int_equal(st->n_weights, 0);
	assert_int_equal(st->n_segments, 0);
	weightd_status_free(st);
	weightd_description_free(d);
	weightd_close(c);
	assert_int_equal(harness_stop(&H), 0);
}

/* An unknown algorithm in the configuration is refused at start, naming the key and value. */
static void unknown_algorithm_is_refused(void **state)
{
	assert_int_equal(harness_write_config(&H, "digest = md5", NULL), 0);
	assert_true(harness_start(&H) < 0);
	if (!harness_log_contains(&H, "digest: 'md5' is not a digest algorithm")) {
		harness_dump_log(&H);
		fail_msg("weightd did not say why it refused digest = md5");
	}
}

TEST_MAIN_WATCHDOG(280, NULL, NULL, TEST_IN_DIR(default_digest_is_xxh3_of_the_bytes),
		   TEST_IN_DIR(sha256_on_request_and_readoption_across_algorithms),
		   TEST_IN_DIR(changed_file_fails_a_run_cleanly),
		   TEST_IN_DIR(unknown_algorithm_is_refused))
