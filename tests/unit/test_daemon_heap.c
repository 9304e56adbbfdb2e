/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_heap.c - room made in the heap ahead of a large unit: asked for in huge pages
 * (MADV_HUGEPAGE over it, seen in /proc/self/smaps), kept after it is freed (not trimmed), and
 * nothing done for small amounts. Skipped where transparent huge pages are not in "madvise"
 * mode, GLIBC_TUNABLES sets malloc itself, or the sanitizer's allocator replaces glibc's. */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "heap.h"

/* Bytes of mappings whose VmFlags say "hg" (MADV_HUGEPAGE). */
static size_t huge_advised_bytes(void)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	unsigned long lo = 0, hi = 0;
	size_t total = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
			lo = a;
			hi = b;
		} else if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " hg")) {
			total += hi - lo;
		}
	}
	fclose(f);
	return total;
}

#if defined(__SANITIZE_ADDRESS__)
#define WD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WD_ASAN 1
#endif
#endif

static bool applies(void)
{
	const char *t = getenv("GLIBC_TUNABLES");

#ifdef WD_ASAN
	return false; /* the sanitizer's allocator, not glibc's heap */
#endif
	char buf[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	return strstr(buf, "[madvise]") && !(t && strstr(t, "glibc.malloc."));
}

static void small_amounts_change_nothing(void **state)
{
	size_t before;

	(void)state;
	if (!applies())
		skip();
	before = huge_advised_bytes();
	heap_reserve(1 << 20);
	heap_reserve(31u << 20);
	assert_int_equal(huge_advised_bytes(), before);
}

static void room_in_huge_pages_kept_free(void **state)
{
	const size_t want = (size_t)96 << 20;
	size_t before;
	struct mallinfo2 mi;

	(void)state;
	if (!applies())
		skip();
	before = huge_advised_bytes();
	heap_reserve(want);
	/* every 16 MiB block but its first and last partial huge page was advised */
	assert_true(huge_advised_bytes() >= before + want - 6 * ((size_t)2 << 20));
	/* the room was freed into the heap and stays there, above the usual 64 MiB trim threshold */
	mi = mallinfo2();
	assert_true(mi.fordblks >= want);
	/* and it is used: a small object comes from the heap, not from a fresh mapping */
	{
		void *p = malloc(4096);

		assert_non_null(p);
		mi = mallinfo2();
		assert_true(mi.fordblks >= want - 8192);
		free(p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(small_amounts_change_nothing),
		cmocka_unit_test(room_in_huge_pages_kept_free),
	};

	heap_tune();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
