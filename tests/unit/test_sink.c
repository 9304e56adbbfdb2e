/* test_sink.c - in-order writer with running SHA-256, and scratch buffers: src/sink.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <openssl/evp.h>
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
	struct wd_error err;
	size_t off = 0, ci = 0;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	for (size_t i = 0; i < size; i++)
		data[i] = (uint8_t)((i * 2654435761u) >> 13);
	assert_int_equal(wd_sink_init(&s, fd, size), 0);
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

	assert_int_equal(wd_sink_init(&s, -1, 3), 0);
	assert_int_equal(wd_sink_write(&s, "abc", 3, NULL), 0);
	assert_int_equal(wd_sink_finish(&s, digest, NULL), 0);
	unhex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", want);
	assert_memory_equal(digest, want, 32);

	assert_int_equal(wd_sink_init(&s, -1, 0), 0);
	assert_int_equal(wd_sink_finish(&s, digest, NULL), 0);
	unhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", want);
	assert_memory_equal(digest, want, 32);

	memset(a, 'a', sizeof(a));
	assert_int_equal(wd_sink_init(&s, -1, 1000000), 0);
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
	struct wd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	assert_int_equal(wd_sink_init(&s, fd, 10), 0);
	assert_int_equal(wd_sink_write(&s, "012345", 6, &err), 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(wd_sink_write(&s, "6789X", 5, &err), -WD_E_INTERNAL);
	assert_int_equal(err.code, WD_E_INTERNAL);
	assert_non_null(strstr(err.msg, "10"));
	assert_int_equal(s.written, 6);
	assert_int_equal(lseek(fd, 0, SEEK_END), 6);
	assert_int_equal(wd_sink_write(&s, "6789", 4, &err), 0);
	assert_int_equal(wd_sink_write(&s, "X", 1, &err), -WD_E_INTERNAL);
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
	struct wd_error err;

	assert_int_equal(wd_sink_init(&s, -1, 10), 0);
	assert_int_equal(wd_sink_write(&s, "012345678", 9, &err), 0);
	memset(digest, 0xaa, sizeof(digest));
	memset(untouched, 0xaa, sizeof(untouched));
	memset(&err, 0, sizeof(err));
	assert_int_equal(wd_sink_finish(&s, digest, &err), -WD_E_INTERNAL);
	assert_int_equal(err.code, WD_E_INTERNAL);
	assert_non_null(strstr(err.msg, "9"));
	assert_non_null(strstr(err.msg, "10"));
	assert_memory_equal(digest, untouched, 32);
	wd_sink_abort(&s); /* and the failed sink can still be aborted */
}

/* A failing pwrite (a read-only fd) is an I/O error. */
static void test_write_error(void **state)
{
	struct wd_sink s;
	struct wd_error err;
	int fd = open_out(O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(wd_sink_init(&s, fd, 4), 0);
	assert_int_equal(wd_sink_write(&s, "abcd", 4, &err), -WD_E_IO);
	assert_int_equal(err.code, WD_E_IO);
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
	struct wd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	for (int backed = 0; backed < 2; backed++) {
		assert_int_equal(wd_sink_init(&s, backed ? fd : -1, 74112), 0);
		assert_null(s.progress);
		assert_int_equal(wd_sink_write(&s, buf, 10, &err), 0);
		assert_int_equal(progress, 12345); /* no counter set: nothing stored */
		s.progress = &progress;
		sum = 10;
		for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
			assert_int_equal(wd_sink_write(&s, buf, chunks[i], &err), 0);
			sum += chunks[i];
			assert_int_equal(__atomic_load_n(&progress, __ATOMIC_RELAXED), sum);
		}
		assert_int_equal(sum, 74112);
		assert_int_equal(wd_sink_write(&s, buf, 1, &err), -WD_E_INTERNAL);
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
	struct wd_error err;
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
	struct wd_error err;
	int fd = open_out(O_RDWR | O_TRUNC);

	assert_true(fd >= 0);
	assert_int_equal(wd_scratch_init(&sc, 4 * 4096), 0);
	assert_non_null(sc.hasher);
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < size; i++)
			data[i] = (uint8_t)(((i + (size_t)round) * 2654435761u) >> 13);
		assert_int_equal(wd_sink_init(&s, fd, size), 0);
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
	struct wd_error err;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(wd_scratch_init(&sc, 4 * 1000), 0);
	assert_int_equal(wd_sink_init(&a, -1, sizeof(data)), 0);
	assert_int_equal(wd_sink_init(&b, -1, sizeof(data)), 0);
	assert_int_equal(wd_sink_init(&small, -1, 1000), 0);
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
	assert_int_equal(wd_sink_init(&a, -1, 5000), 0);
	wd_sink_pipeline(&a, sc.hasher);
	assert_ptr_equal(a.hasher, sc.hasher);
	produce(&a, data, 4999);
	{
		size_t cap = 0;
		uint8_t *slot = wd_sink_buffer(&a, &cap);
		memcpy(slot, data + 4999, 2);
		memset(&err, 0, sizeof(err));
		assert_int_equal(wd_sink_write(&a, slot, 2, &err), -WD_E_INTERNAL);
		assert_int_equal(err.code, WD_E_INTERNAL);
		assert_ptr_equal(wd_sink_buffer(&a, &cap), slot);
		assert_int_equal(wd_sink_write(&a, slot, 1, &err), 0);
	}
	assert_int_equal(wd_sink_finish(&a, digest, &err), 0);
	oneshot(data, 5000, want);
	assert_memory_equal(digest, want, 32);

	assert_int_equal(wd_sink_init(&b, -1, sizeof(data)), 0);
	wd_sink_pipeline(&b, sc.hasher);
	assert_ptr_equal(b.hasher, sc.hasher);
	produce(&b, data, sizeof(data));
	assert_int_equal(wd_sink_finish(&b, digest, &err), 0);
	oneshot(data, sizeof(data), want);
	assert_memory_equal(digest, want, 32);
	wd_scratch_free(&sc);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_order),
		cmocka_unit_test(test_known_vectors),
		cmocka_unit_test(test_overrun),
		cmocka_unit_test(test_short_finish),
		cmocka_unit_test(test_write_error),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_pipeline),
		cmocka_unit_test(test_pipeline_refused_and_aborted),
		cmocka_unit_test(test_scratch),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
