/* SPDX-License-Identifier: Apache-2.0 */
/* test_page_cache.c - a checkpoint is held once: after weightd has copied a checkpoint's bytes
 * into shared memory, its file pages leave the page cache (drop_page_cache, default yes); with
 * the key off they stay, and a reload turns it on for the fills after it. Resident pages are
 * counted as fincore counts them: mincore() over a mapping of the file. */
#include <sys/mman.h>
#include <sys/statfs.h>

#include "fixture.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static char ckpt[512];

/* c.safetensors: a (20 MiB, filled in chunks by both workers), b (12 MiB) and eight 64 KiB
 * tensors c..j (one run), U8, bytes pattern with seeds 0..9. */
#define N_TENSORS 10
static const char *const names[N_TENSORS] = { "a", "b", "c", "d", "e", "f", "g", "h", "i", "j" };

static int setup(void **state)
{
	if (harness_init(&H) != 0)
		return -1;
	harness_path(&H, "c.safetensors", ckpt, sizeof(ckpt));
	it_fixture(
		"safetensors %s --seed 0 --tensor a:U8:20971520 --tensor b:U8:12582912 "
		"--tensor c:U8:65536 --tensor d:U8:65536 --tensor e:U8:65536 --tensor f:U8:65536 "
		"--tensor g:U8:65536 --tensor h:U8:65536 --tensor i:U8:65536 --tensor j:U8:65536",
		ckpt);
	return 0;
}

/* Pages of `path` in the page cache, and its size in pages. */
static size_t resident_pages(const char *path, size_t *ret_pages)
{
	long page = sysconf(_SC_PAGESIZE);
	struct stat st;
	unsigned char *vec;
	size_t pages, n = 0;
	void *map;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	pages = ((size_t)st.st_size + (size_t)page - 1) / (size_t)page;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(map != MAP_FAILED);
	vec = malloc(pages);
	assert_non_null(vec);
	assert_int_equal(mincore(map, (size_t)st.st_size, vec), 0);
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	munmap(map, (size_t)st.st_size);
	close(fd);
	*ret_pages = pages;
	return n;
}

/* Resident pages of `path` once weightd's drops have landed: they run on a low-priority thread
 * after the fills that read the pages, so they are waited for (up to 10 s) until at most
 * `most` pages stay. */
static size_t resident_after_drops(const char *path, size_t most, size_t *ret_pages)
{
	int64_t end = it_now_ms() + 10000;
	size_t res;

	while ((res = resident_pages(path, ret_pages)) > most && it_now_ms() < end)
		usleep(10000);
	return res;
}

/* Read the whole file, so that it is in the page cache (clean), and check that it is. */
static size_t warm(const char *path)
{
	static uint8_t buf[1 << 20];
	size_t pages, res;
	ssize_t k;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	/* written back first: dirty pages cannot be dropped, and a checkpoint served is on disk */
	assert_int_equal(fsync(fd), 0);
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		;
	assert_int_equal(k, 0);
	close(fd);
	res = resident_pages(path, &pages);
	if (res < pages * 95 / 100)
		fail_msg("%s: %zu of %zu pages cached after reading it", path, res, pages);
	return pages;
}

/* Page-cache hints mean nothing where the file itself is memory. */
static bool page_cache_applies(void)
{
	struct statfs sf;

	assert_int_equal(statfs(ckpt, &sf), 0);
	if (sf.f_type == TMPFS_MAGIC) {
		print_message("skipped: %s is on tmpfs, whose pages are the file\n", ckpt);
		return false;
	}
	return true;
}

/* Every tensor served is the checkpoint's bytes. */
static void check_served(void)
{
	weightd_client *c = it_connect(&H);

	for (unsigned k = 0; k < N_TENSORS; k++) {
		weightd_weight *w = it_get_ok(c, "c", names[k]);
		int64_t bad = it_pattern_mismatch(it_map(w), weightd_weight_nbytes(w), k);

		if (bad >= 0)
			fail_msg("%s: byte %lld differs from the checkpoint's", names[k],
				 (long long)bad);
		weightd_release(w);
	}
	weightd_close(c);
}

static void start_preloading(const char *key)
{
	char sect[800];

	snprintf(sect, sizeof(sect), "[checkpoint:c]\npath = %s\npreload = yes\n%s", ckpt, key);
	it_start(&H, "workers = 2\n", sect);
	it_wait_references(&H, N_TENSORS);
}

static void a_preload_leaves_the_file_out_of_the_page_cache(void **state)
{
	size_t pages, res;

	if (!page_cache_applies())
		skip();
	pages = warm(ckpt);
	start_preloading("");
	/* what stays: the header's pages, read at admission, and a page at a chunk's edge */
	res = resident_after_drops(ckpt, 16, &pages);
	if (res > 16)
		fail_msg("%zu of the checkpoint's %zu pages still cached after the preload", res,
			 pages);
	check_served();
}

static void drop_page_cache_no_leaves_the_file_cached(void **state)
{
	size_t pages, res;

	if (!page_cache_applies())
		skip();
	warm(ckpt);
	start_preloading("drop_page_cache = no\n");
	usleep(300000); /* time for any drop the preload queued to land */
	res = resident_pages(ckpt, &pages);
	if (res < pages * 95 / 100)
		fail_msg(
			"only %zu of the checkpoint's %zu pages cached after a preload that keeps them",
			res, pages);
	check_served();
}

/* A reload turns the key on for what is filled after it, on the same generation. */
static void a_reload_applies_drop_page_cache(void **state)
{
	char sect[800];
	weightd_client *c;
	weightd_error err;
	size_t pages, res;

	if (!page_cache_applies())
		skip();
	snprintf(sect, sizeof(sect), "[checkpoint:c]\npath = %s\ndrop_page_cache = no\n", ckpt);
	it_start(&H, "workers = 2\n", sect);
	warm(ckpt);
	c = it_connect(&H);
	weightd_release(it_get_ok(c, "c", "a"));
	res = resident_pages(ckpt, &pages);
	assert_true(res >= pages * 95 / 100);

	snprintf(sect, sizeof(sect), "[checkpoint:c]\npath = %s\n", ckpt);
	assert_int_equal(harness_write_config(&H, "workers = 2\n", sect), 0);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	if (weightd_evict(c, NULL, NULL, &err) < 0)
		fail_msg("evict: %s", err.message);
	weightd_release(it_get_ok(c, "c", "a"));
	/* a's pages are gone; b..j's and the header's stay */
	res = resident_after_drops(ckpt, pages - 20971520 / (size_t)sysconf(_SC_PAGESIZE) + 16,
				   &pages);
	if (res > pages - 20971520 / (size_t)sysconf(_SC_PAGESIZE) + 16)
		fail_msg("%zu of %zu pages cached after a was filled with drop_page_cache on", res,
			 pages);
	weightd_close(c);
}

TEST_MAIN(NULL, NULL,
	  cmocka_unit_test_setup_teardown(a_preload_leaves_the_file_out_of_the_page_cache, setup,
					  fixture_cleanup),
	  cmocka_unit_test_setup_teardown(drop_page_cache_no_leaves_the_file_cached, setup,
					  fixture_cleanup),
	  cmocka_unit_test_setup_teardown(a_reload_applies_drop_page_cache, setup, fixture_cleanup))
