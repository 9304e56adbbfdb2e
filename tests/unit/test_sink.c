/* SPDX-License-Identifier: Apache-2.0 */
/* test_sink.c - in-order writer with a running content digest (XXH3-128 by default, SHA-256,
 * chunked), range sinks, runs of whole weights, and scratch buffers: src/sink.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <xxhash.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sink.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/wd-sink-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/out", dir);
	unlink(path);
	return rmdir(dir);
}

static int open_out(int flags)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/out", dir);
	return open(path, flags | O_CREAT | O_CLOEXEC, 0600);
}

/* SHA-256 straight from OpenSSL in one call: independent of the sink's incremental use. */
static void oneshot(const void *data, size_t len, uint8_t out[32])
{
	unsigned int n = 32;

	assert_int_equal(EVP_Digest(data, len, out, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, 32);
}

/* Most tests here check SHA-256 sinks against OpenSSL (and the hasher thread serves SHA-256
 * only); the default algorithm has tests of its own below. */
static int sha_sink(struct wd_sink *s, int fd, uint64_t size)
{
	return wd_sink_init_range(s, fd, 0, size, WD_DIGEST_SHA256);
}

static void unhex(const char *hex, uint8_t out[32])
{
	for (int i = 0; i < 32; i++)
		assert_int_equal(sscanf(hex + 2 * i, "%2hhx", &out[i]), 1);
}

/* Uneven chunks land in order in the file, and the digest is that of the whole. */
static void test_in_order(void **state)
{
	static const size_t chunks[] = { 1, 7, 4096, 65537, 3, 0, 100000 };
	const size_t size = (1u << 20) + 13;
	uint8_t *data = malloc(size), *back = malloc(size);
	uint8_t digest[32], want[32];
	struct wd_sink s;
	weightd_error err;
	size_t off = 0, ci = 0;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	for (size_t i = 0; i < size; i++)
		data[i] = (uint8_t)((i * 2654435761u) >> 13);
	assert_int_equal(sha_sink(&s, fd, size), 0);
	while (off < size) {
		size_t n = chunks[ci++ % (sizeof(chunks) / sizeof(chunks[0]))];

		if (n > size - off)
			n = size - off;
		assert_int_equal(wd_sink_write(&s, data + off, n, &err), 0);
		off += n;
		assert_int_equal(s.written, off);
	}
	assert_int_equal(wd_sink_finish(&s, digest, &err), 0);
	oneshot(data, size, want);
	assert_memory_equal(digest, want, 32);
	assert_int_equal(pread(fd, back, size, 0), (ssize_t)size);
	assert_memory_equal(back, data, size);
	wd_sink_abort(&s); /* accepted after finish */
	close(fd);
	free(data);
	free(back);
}

/* Hash-only sinks against the FIPS 180-2 known answers. */
static void test_known_vectors(void **state)
{
	uint8_t digest[32], want[32], a[1000];
	struct wd_sink s;

	assert_int_equal(sha_sink(&s, -1, 3), 0);
	assert_int_equal(wd_sink_write(&s, "abc", 3, NULL), 0);
	assert_int_equal(wd_sink_finish(&s, digest, NULL), 0);
	unhex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", want);
	assert_memory_equal(digest, want, 32);

	assert_int_equal(sha_sink(&s, -1, 0), 0);
	assert_int_equal(wd_sink_finish(&s, digest, NULL), 0);
	unhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", want);
	assert_memory_equal(digest, want, 32);

	memset(a, 'a', sizeof(a));
	assert_int_equal(sha_sink(&s, -1, 1000000), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(wd_sink_write(&s, a, sizeof(a), NULL), 0);
	assert_int_equal(wd_sink_finish(&s, digest, NULL), 0);
	unhex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", want);
	assert_memory_equal(digest, want, 32);
}

/* Writing past the size is refused without writing or hashing anything of that call. */
static void test_overrun(void **state)
{
	uint8_t digest[32], want[32], back[16];
	struct wd_sink s;
	weightd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	assert_int_equal(sha_sink(&s, fd, 10), 0);
	assert_int_equal(wd_sink_write(&s, "012345", 6, &err), 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(wd_sink_write(&s, "6789X", 5, &err), -WEIGHTD_E_INTERNAL);
	assert_int_equal(err.code, WEIGHTD_E_INTERNAL);
	assert_non_null(strstr(err.message, "10"));
	assert_int_equal(s.written, 6);
	assert_int_equal(lseek(fd, 0, SEEK_END), 6);
	assert_int_equal(wd_sink_write(&s, "6789", 4, &err), 0);
	assert_int_equal(wd_sink_write(&s, "X", 1, &err), -WEIGHTD_E_INTERNAL);
	assert_int_equal(wd_sink_finish(&s, digest, &err), 0);
	oneshot("0123456789", 10, want);
	assert_memory_equal(digest, want, 32);
	assert_int_equal(pread(fd, back, sizeof(back), 0), 10);
	assert_memory_equal(back, "0123456789", 10);
	close(fd);
}

/* Finishing early is an error naming both counts; the digest output is left alone. */
static void test_short_finish(void **state)
{
	uint8_t digest[32], untouched[32];
	struct wd_sink s;
	weightd_error err;

	assert_int_equal(sha_sink(&s, -1, 10), 0);
	assert_int_equal(wd_sink_write(&s, "012345678", 9, &err), 0);
	memset(digest, 0xaa, sizeof(digest));
	memset(untouched, 0xaa, sizeof(untouched));
	memset(&err, 0, sizeof(err));
	assert_int_equal(wd_sink_finish(&s, digest, &err), -WEIGHTD_E_INTERNAL);
	assert_int_equal(err.code, WEIGHTD_E_INTERNAL);
	assert_non_null(strstr(err.message, "9"));
	assert_non_null(strstr(err.message, "10"));
	assert_memory_equal(digest, untouched, 32);
	wd_sink_abort(&s); /* and the failed sink can still be aborted */
}

/* A failing pwrite (a read-only fd) is an I/O error. */
static void test_write_error(void **state)
{
	struct wd_sink s;
	weightd_error err;
	int fd = open_out(O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(sha_sink(&s, fd, 4), 0);
	assert_int_equal(wd_sink_write(&s, "abcd", 4, &err), -WEIGHTD_E_IO);
	assert_int_equal(err.code, WEIGHTD_E_IO);
	wd_sink_abort(&s);
	close(fd);
}

/* The optional progress counter follows every accepted write (file-backed and hash-only sinks),
 * starts unset, and does not move on a refused write. */
static void test_progress(void **state)
{
	static const size_t chunks[] = { 5, 4096, 1, 70000 };
	uint8_t buf[70000] = { 0 };
	uint64_t progress = 12345, sum = 0;
	struct wd_sink s;
	weightd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	for (int backed = 0; backed < 2; backed++) {
		assert_int_equal(sha_sink(&s, backed ? fd : -1, 74112), 0);
		assert_null(s.progress);
		assert_int_equal(wd_sink_write(&s, buf, 10, &err), 0);
		assert_int_equal(progress, 12345); /* no counter set: nothing stored */
		s.progress = &progress;
		progress = 10;   /* the counter adds what is written from now on */
		sum = 10;
		for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
			assert_int_equal(wd_sink_write(&s, buf, chunks[i], &err), 0);
			sum += chunks[i];
			assert_int_equal(__atomic_load_n(&progress, __ATOMIC_RELAXED), sum);
		}
		assert_int_equal(sum, 74112);
		assert_int_equal(wd_sink_write(&s, buf, 1, &err), -WEIGHTD_E_INTERNAL);
		assert_int_equal(progress, 74112);
		wd_sink_abort(&s);
		progress = 12345;
	}
	close(fd);
}

/* Produce `size` bytes of `data` into s: mostly through the hasher's slots (filled to varying
 * lengths), now and then straight from `data` (hashed inline, after the queue). */
static void produce(struct wd_sink *s, const uint8_t *data, size_t size)
{
	static const size_t cut[] = { 0, 1, 4095, 7, 0, 0, 333 };   /* 0: a full slot */
	weightd_error err;
	size_t off = 0, k = 0;

	while (off < size) {
		size_t cap = 0, n;
		uint8_t *slot = wd_sink_buffer(s, &cap);

		assert_non_null(slot);
		n = cut[k % (sizeof(cut) / sizeof(cut[0]))] ? cut[k % (sizeof(cut) / sizeof(cut[0]))] : cap;
		if (n > cap)
			n = cap;
		if (n > size - off)
			n = size - off;
		if (k % 5 == 3) {
			assert_int_equal(wd_sink_write(s, data + off, n, &err), 0);
		} else {
			memcpy(slot, data + off, n);
			assert_int_equal(wd_sink_write(s, slot, n, &err), 0);
		}
		off += n;
		k++;
		assert_int_equal(s->written, off);
	}
}

/* Hashed on the hasher thread behind the writes: the same file and the same digest, twice in a
 * row on one hasher. */
static void test_pipeline(void **state)
{
	const size_t size = (1u << 20) + 13;
	uint8_t *data = malloc(size), *back = malloc(size);
	uint8_t digest[32], want[32];
	struct wd_scratch sc;
	struct wd_sink s;
	weightd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	assert_int_equal(wd_scratch_init(&sc, 4 * 4096), 0);
	assert_non_null(sc.hasher);
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < size; i++)
			data[i] = (uint8_t)(((i + (size_t)round) * 2654435761u) >> 13);
		assert_int_equal(sha_sink(&s, fd, size), 0);
		wd_sink_pipeline(&s, sc.hasher);
		assert_ptr_equal(s.hasher, sc.hasher);
		produce(&s, data, size);
		assert_int_equal(wd_sink_finish(&s, digest, &err), 0);
		assert_null(s.hasher);
		oneshot(data, size, want);
		assert_memory_equal(digest, want, 32);
		assert_int_equal(pread(fd, back, size, 0), (ssize_t)size);
		assert_memory_equal(back, data, size);
	}
	wd_scratch_free(&sc);
	close(fd);
	free(data);
	free(back);
}

/* A hasher serves one sink at a time; a sink of one slot or less is not worth it. Either way
 * the sink hashes inline with the same result. An aborted sink frees the hasher. */
static void test_pipeline_refused_and_aborted(void **state)
{
	static uint8_t data[100000];
	uint8_t digest[32], want[32];
	struct wd_scratch sc;
	struct wd_sink a, b, small;
	weightd_error err;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(wd_scratch_init(&sc, 4 * 1000), 0);
	assert_int_equal(sha_sink(&a, -1, sizeof(data)), 0);
	assert_int_equal(sha_sink(&b, -1, sizeof(data)), 0);
	assert_int_equal(sha_sink(&small, -1, 1000), 0);
	wd_sink_pipeline(&a, sc.hasher);
	wd_sink_pipeline(&b, sc.hasher);
	wd_sink_pipeline(&small, sc.hasher);
	assert_ptr_equal(a.hasher, sc.hasher);
	assert_null(b.hasher);
	assert_null(small.hasher);
	assert_null(wd_sink_buffer(&b, &(size_t){ 0 }));
	produce(&a, data, 50000);
	assert_int_equal(wd_sink_write(&b, data, sizeof(data), &err), 0);
	assert_int_equal(wd_sink_write(&small, data, 1000, &err), 0);
	assert_int_equal(wd_sink_finish(&b, digest, &err), 0);
	oneshot(data, sizeof(data), want);
	assert_memory_equal(digest, want, 32);
	assert_int_equal(wd_sink_finish(&small, digest, &err), 0);
	oneshot(data, 1000, want);
	assert_memory_equal(digest, want, 32);

	wd_sink_abort(&a);
	assert_null(a.hasher);

	/* overrunning through a slot is refused and queues nothing */
	assert_int_equal(sha_sink(&a, -1, 5000), 0);
	wd_sink_pipeline(&a, sc.hasher);
	assert_ptr_equal(a.hasher, sc.hasher);
	produce(&a, data, 4999);
	{
		size_t cap = 0;
		uint8_t *slot = wd_sink_buffer(&a, &cap);
		memcpy(slot, data + 4999, 2);
		memset(&err, 0, sizeof(err));
		assert_int_equal(wd_sink_write(&a, slot, 2, &err), -WEIGHTD_E_INTERNAL);
		assert_int_equal(err.code, WEIGHTD_E_INTERNAL);
		assert_ptr_equal(wd_sink_buffer(&a, &cap), slot);
		assert_int_equal(wd_sink_write(&a, slot, 1, &err), 0);
	}
	assert_int_equal(wd_sink_finish(&a, digest, &err), 0);
	oneshot(data, 5000, want);
	assert_memory_equal(digest, want, 32);

	assert_int_equal(sha_sink(&b, -1, sizeof(data)), 0);
	wd_sink_pipeline(&b, sc.hasher);
	assert_ptr_equal(b.hasher, sc.hasher);
	produce(&b, data, sizeof(data));
	assert_int_equal(wd_sink_finish(&b, digest, &err), 0);
	oneshot(data, sizeof(data), want);
	assert_memory_equal(digest, want, 32);
	wd_scratch_free(&sc);
}

/* ---- the content digest: default algorithm, chunks, ranges ----------------------------------- */

/* XXH3-128 straight from libxxhash, in its canonical (big-endian) bytes. */
static void xxh_oneshot(const void *data, size_t len, uint8_t out[16])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
	memcpy(out, c.digest, 16);
}

static void hash_oneshot(enum wd_digest_alg alg, const void *data, size_t len, uint8_t *out)
{
	if (alg == WD_DIGEST_SHA256)
		oneshot(data, len, out);
	else
		xxh_oneshot(data, len, out);
}

/*
 * The digest as documented in digest.h, computed here from the libraries directly: the plain
 * hash up to one chunk, else the hash of the concatenated chunk hashes.
 */
static void documented_digest(enum wd_digest_alg alg, const uint8_t *data, size_t len,
			      uint8_t *out)
{
	size_t dl = alg == WD_DIGEST_SHA256 ? 32 : 16, n = (len + WD_DIGEST_CHUNK - 1) / WD_DIGEST_CHUNK;
	uint8_t *cat;

	if (len <= WD_DIGEST_CHUNK) {
		hash_oneshot(alg, data, len, out);
		return;
	}
	cat = malloc(n * dl);
	assert_non_null(cat);
	for (size_t i = 0; i < n; i++) {
		size_t off = i * WD_DIGEST_CHUNK;
		hash_oneshot(alg, data + off, len - off < WD_DIGEST_CHUNK ? len - off : WD_DIGEST_CHUNK,
			     cat + i * dl);
	}
	hash_oneshot(alg, cat, n * dl, out);
	free(cat);
}

static uint8_t *pattern(size_t len, unsigned seed)
{
	uint8_t *p = malloc(len ? len : 1);

	assert_non_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(((i + seed) * 2654435761u) >> 11);
	return p;
}

/* A sink made with wd_sink_init hashes XXH3-128, whatever the write sizes; 16 bytes result. */
static void test_default_is_xxh3(void **state)
{
	static const size_t sizes[] = { 0, 1, 240, 4097, 1000003 };
	weightd_error err;

	assert_int_equal(WD_DIGEST_DEFAULT, WD_DIGEST_XXH3_128);
	assert_int_equal(wd_digest_len(WD_DIGEST_XXH3_128), 16);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint8_t *data = pattern(sizes[k], (unsigned)k), digest[WD_DIGEST_MAX], want[16];
		struct wd_sink s;

		assert_int_equal(wd_sink_init(&s, -1, sizes[k]), 0);
		for (size_t off = 0; off < sizes[k];) {
			size_t n = sizes[k] - off < 777 + off / 3 ? sizes[k] - off : 777 + off / 3;
			assert_int_equal(wd_sink_write(&s, data + off, n, &err), 0);
			off += n;
		}
		memset(digest, 0xee, sizeof(digest));
		assert_int_equal(wd_sink_finish(&s, digest, &err), 0);
		xxh_oneshot(data, sizes[k], want);
		assert_memory_equal(digest, want, 16);
		assert_int_equal(digest[16], 0xee);   /* nothing written past its length */
		free(data);
	}
}

/*
 * Weights around and above the chunk size, both algorithms: the sink's digest (fed in uneven
 * writes that straddle chunk boundaries) equals the documented composition computed here; range
 * sinks over each chunk, composed with wd_content_compose, give the same digest, and write
 * their bytes at their offsets.
 */
static void test_chunked_digest(void **state)
{
	const size_t sizes[] = { WD_DIGEST_CHUNK, WD_DIGEST_CHUNK + 1, 2 * WD_DIGEST_CHUNK + 12345 };
	const enum wd_digest_alg algs[] = { WD_DIGEST_XXH3_128, WD_DIGEST_SHA256 };
	weightd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	for (size_t a = 0; a < 2; a++) {
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			size_t len = sizes[k], dl = wd_digest_len(algs[a]);
			size_t nchunks = (size_t)wd_content_chunks(len);
			uint8_t *data = pattern(len, (unsigned)(k + 10 * a)), *back = malloc(len);
			uint8_t digest[WD_DIGEST_MAX], want[WD_DIGEST_MAX], *chunks;
			struct wd_sink s;

			assert_non_null(back);
			documented_digest(algs[a], data, len, want);
			assert_int_equal(wd_sink_init_range(&s, -1, 0, len, algs[a]), 0);
			for (size_t off = 0; off < len;) {
				size_t n = len - off < 3000007 ? len - off : 3000007;
				assert_int_equal(wd_sink_write(&s, data + off, n, &err), 0);
				off += n;
			}
			assert_int_equal(wd_sink_finish(&s, digest, &err), 0);
			assert_memory_equal(digest, want, dl);

			/* chunk by chunk, last chunk first, into the file at their offsets */
			chunks = malloc(nchunks * dl);
			assert_non_null(chunks);
			assert_int_equal(ftruncate(fd, 0), 0);
			for (size_t i = nchunks; i-- > 0;) {
				uint64_t off = (uint64_t)i * WD_DIGEST_CHUNK;
				uint64_t n = len - off < WD_DIGEST_CHUNK ? len - off : WD_DIGEST_CHUNK;
				assert_int_equal(wd_sink_init_range(&s, fd, off, n, algs[a]), 0);
				assert_int_equal(wd_sink_write(&s, data + off, (size_t)n, &err), 0);
				assert_int_equal(wd_sink_finish(&s, chunks + i * dl, &err), 0);
			}
			assert_int_equal(wd_content_compose(algs[a], chunks, nchunks, digest), 0);
			assert_memory_equal(digest, want, dl);
			assert_int_equal(pread(fd, back, len, 0), (ssize_t)len);
			assert_memory_equal(back, data, len);
			free(chunks);
			free(back);
			free(data);
		}
	}
	close(fd);
}

/* The hasher thread takes SHA-256 sinks only: an XXH3 sink hashes inline. */
static void test_pipeline_only_for_sha256(void **state)
{
	struct wd_scratch sc;
	struct wd_sink s;

	assert_int_equal(wd_scratch_init(&sc, 4 * 1000), 0);
	assert_non_null(sc.hasher);
	assert_int_equal(wd_sink_init(&s, -1, 100000), 0);
	wd_sink_pipeline(&s, sc.hasher);
	assert_null(s.hasher);
	assert_null(wd_sink_buffer(&s, &(size_t){ 0 }));
	wd_sink_abort(&s);
	wd_scratch_free(&sc);
}

/* Names both ways; unknown names are refused. */
static void test_algorithm_names(void **state)
{
	assert_string_equal(wd_digest_name(WD_DIGEST_XXH3_128), "xxh3-128");
	assert_string_equal(wd_digest_name(WD_DIGEST_SHA256), "sha256");
	assert_int_equal(wd_digest_from_name("XXH3-128"), WD_DIGEST_XXH3_128);
	assert_int_equal(wd_digest_from_name("sha256"), WD_DIGEST_SHA256);
	assert_int_equal(wd_digest_from_name("md5"), WD_DIGEST_NONE);
	assert_int_equal(wd_digest_len(WD_DIGEST_NONE), 0);
	assert_int_equal(wd_content_compose(WD_DIGEST_NONE, (const uint8_t *)"x", 1,
					    (uint8_t[32]){ 0 }), -WEIGHTD_E_INVALID_ARGUMENT);
}

static void test_scratch(void **state)
{
	struct wd_scratch sc;
	const size_t bytes = 1u << 20;
	long page = sysconf(_SC_PAGESIZE);

	assert_int_equal(wd_scratch_init(&sc, bytes), 0);
	assert_non_null(sc.buf);
	assert_non_null(sc.buf2);
	assert_true(sc.buf != sc.buf2);
	assert_int_equal(sc.cap, bytes);
	assert_int_equal(sc.cap2, bytes);
	assert_int_equal((uintptr_t)sc.buf % (uintptr_t)page, 0);
	assert_int_equal((uintptr_t)sc.buf2 % (uintptr_t)page, 0);
	for (size_t i = 0; i < bytes; i += 4096)
		assert_int_equal(sc.buf[i] | sc.buf2[i], 0);
	memset(sc.buf, 1, bytes);
	memset(sc.buf2, 2, bytes);
	wd_scratch_free(&sc);
	assert_null(sc.buf);
	assert_null(sc.buf2);
	assert_null(sc.hasher);
	assert_int_equal(sc.cap, 0);
	wd_scratch_free(&sc);
	wd_scratch_free(NULL);
}

/*
 * A run: each part's digest is the plain digest of its bytes (what a sink over it alone gives),
 * each lands at its base with zeros in the gaps, each progress counter gets its size; a run
 * longer than one pwritev's iovecs is written whole too. A part that does not follow the one
 * before is refused.
 */
static void test_run(void **state)
{
	enum { N = 700 }; /* two iovecs a part: more than one pwritev */
	struct wd_sink_part parts[N];
	uint8_t digests[N][WD_DIGEST_MAX], want[WD_DIGEST_MAX];
	uint64_t progress[N] = { 0 }, base = 0, total = 0;
	weightd_error err;
	uint8_t *buf, *back;
	int fd = open_out(O_RDWR | O_TRUNC);

	(void)state;
	assert_true(fd >= 0);
	for (size_t i = 0; i < N; i++) {
		uint64_t size = 1 + (i * 37) % 300;

		base += i % 3 == 0 ? 0 : 64 - base % 64; /* packed, or aligned after a gap */
		parts[i] = (struct wd_sink_part){ .base = base, .size = size,
						  .alg = i % 2 ? WD_DIGEST_SHA256 : WD_DIGEST_XXH3_128,
						  .digest = digests[i], .progress = &progress[i] };
		base += size;
		total += size;
	}
	buf = pattern(total, 7);
	assert_int_equal(wd_sink_write_run(fd, buf, parts, N, &err), 0);
	back = malloc(base);
	assert_non_null(back);
	assert_int_equal(pread(fd, back, base, 0), (ssize_t)base);
	for (size_t i = 0, pos = 0, end = 0; i < N; i++) {
		for (size_t b = end; b < parts[i].base; b++)
			assert_int_equal(back[b], 0);
		assert_memory_equal(back + parts[i].base, buf + pos, parts[i].size);
		documented_digest(parts[i].alg, buf + pos, parts[i].size, want);
		assert_memory_equal(digests[i], want, wd_digest_len(parts[i].alg));
		assert_int_equal(progress[i], parts[i].size);
		pos += parts[i].size;
		end = parts[i].base + parts[i].size;
	}
	/* overlapping, then too far after the previous part */
	parts[1].base = parts[0].base;
	assert_true(wd_sink_write_run(fd, buf, parts, 2, &err) < 0);
	assert_int_equal(err.code, WEIGHTD_E_INTERNAL);
	parts[1].base = parts[0].base + parts[0].size + WD_SINK_GAP_MAX + 1;
	assert_true(wd_sink_write_run(fd, buf, parts, 2, &err) < 0);
	free(back);
	free(buf);
	close(fd);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_in_order), cmocka_unit_test(test_known_vectors),
	  cmocka_unit_test(test_overrun), cmocka_unit_test(test_short_finish),
	  cmocka_unit_test(test_write_error), cmocka_unit_test(test_progress),
	  cmocka_unit_test(test_pipeline), cmocka_unit_test(test_pipeline_refused_and_aborted),
	  cmocka_unit_test(test_default_is_xxh3), cmocka_unit_test(test_chunked_digest),
	  cmocka_unit_test(test_pipeline_only_for_sha256), cmocka_unit_test(test_algorithm_names),
	  cmocka_unit_test(test_scratch), cmocka_unit_test(test_run))
