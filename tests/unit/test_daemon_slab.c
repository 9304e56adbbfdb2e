/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_slab.c - the weights' slab: objects aligned, zeroed and distinct across several
 * chunks; freed ones reused; chunks unmapped when empty but for one spare; each object inside a
 * 2 MiB-aligned chunk (what a huge page needs). Built with AddressSanitizer the slab hands out
 * heap objects instead: the checks that do not depend on chunks still run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests.h"

#include "slab.h"

#define OBJ 384 /* sizeof(struct weight) today; any multiple of 64 behaves alike */

/* Three and a half chunks' worth: 2 MiB holds (2 MiB - header) / 384 = 5,461 objects. */
#define N 19000

static void objects_aligned_zeroed_distinct(void **state)
{
	struct slab s;
	uint8_t **p = calloc(N, sizeof(*p));

	(void)state;
	assert_non_null(p);
	slab_init(&s, 300); /* rounded up to 320 */
	assert_int_equal(s.size, 320);
	slab_init(&s, OBJ);
	assert_int_equal(s.size, OBJ);
	for (size_t i = 0; i < N; i++) {
		p[i] = slab_alloc(&s);
		assert_non_null(p[i]);
		assert_int_equal((uintptr_t)p[i] % 64, 0);
		for (size_t k = 0; k < OBJ; k++)
			assert_int_equal(p[i][k], 0);
		memset(p[i], (int)(i % 251) + 1, OBJ); /* overlapping objects would overwrite */
	}
	assert_int_equal(s.used, N);
	for (size_t i = 0; i < N; i++)
		for (size_t k = 0; k < OBJ; k += 61)
			assert_int_equal(p[i][k], (i % 251) + 1);
#ifndef SLAB_PLAIN
	/* N objects of 384 bytes need 4 chunks; every object lies inside its chunk, past its
	 * header */
	assert_int_equal(s.chunks, 4);
	for (size_t i = 0; i < N; i++) {
		uintptr_t base = (uintptr_t)p[i] & ~(uintptr_t)(SLAB_CHUNK - 1);

		assert_true((uintptr_t)p[i] >= base + 64);
		assert_true((uintptr_t)p[i] + OBJ <= base + SLAB_CHUNK);
	}
#endif
	for (size_t i = 0; i < N; i++)
		slab_free(&s, p[i]);
	assert_int_equal(s.used, 0);
#ifndef SLAB_PLAIN
	assert_int_equal(s.chunks, 1); /* the spare */
#endif
	slab_free(&s, NULL);
	slab_fini(&s);
	free(p);
}

/* Freed objects come back (zeroed again) before a new chunk is mapped. */
static void freed_objects_reused(void **state)
{
	struct slab s;
	uint8_t *a[100], *b;

	(void)state;
	slab_init(&s, OBJ);
	for (int i = 0; i < 100; i++)
		a[i] = slab_alloc(&s);
	memset(a[50], 0xee, OBJ);
	slab_free(&s, a[50]);
	b = slab_alloc(&s);
	assert_non_null(b);
	for (size_t k = 0; k < OBJ; k++)
		assert_int_equal(b[k], 0);
#ifndef SLAB_PLAIN
	assert_ptr_equal(b, a[50]);
	assert_int_equal(s.chunks, 1);
#endif
	a[50] = b;
	for (int i = 0; i < 100; i++)
		slab_free(&s, a[i]);
	slab_fini(&s);
}

/* Freed in a scattered order across chunks: used counts stay right, emptied chunks go (one
 * kept), and the slab serves again afterwards. */
static void scattered_frees_return_chunks(void **state)
{
	struct slab s;
	uint8_t **p = calloc(N, sizeof(*p));
	size_t left = N;

	(void)state;
	assert_non_null(p);
	slab_init(&s, OBJ);
	for (size_t i = 0; i < N; i++)
		assert_non_null(p[i] = slab_alloc(&s));
	/* every third, then the rest from the end */
	for (size_t i = 0; i < N; i += 3, left--)
		slab_free(&s, p[i]), p[i] = NULL;
	assert_int_equal(s.used, left);
#ifndef SLAB_PLAIN
	assert_int_equal(s.chunks, 4); /* none is empty yet */
#endif
	for (size_t i = N; i-- > 0;)
		if (p[i])
			slab_free(&s, p[i]), p[i] = NULL;
	assert_int_equal(s.used, 0);
#ifndef SLAB_PLAIN
	assert_int_equal(s.chunks, 1);
#endif
	for (size_t i = 0; i < 10; i++)
		assert_non_null(p[i] = slab_alloc(&s));
#ifndef SLAB_PLAIN
	assert_int_equal(s.chunks, 1); /* the spare serves */
#endif
	for (size_t i = 0; i < 10; i++)
		slab_free(&s, p[i]);
	slab_fini(&s);
	assert_int_equal(s.chunks, 0);
	free(p);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(objects_aligned_zeroed_distinct),
	  cmocka_unit_test(freed_objects_reused), cmocka_unit_test(scattered_frees_return_chunks))
