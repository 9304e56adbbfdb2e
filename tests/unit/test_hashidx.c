/* SPDX-License-Identifier: Apache-2.0 */
/* test_hashidx.c - the open-addressing index of wd_hashidx.h: insert, find and delete under random
 * operations match a plain array scanned by hand; growth keeps every entry; deletion keeps probe
 * runs intact, also when every key collides (a constant hash); the caller's equality test is
 * asked only of entries whose kept hash bits match. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests.h"

#include "wd_hashidx.h"

/* The caller's side: a dense array of keys, swap-removed, and the hash in use. */
struct tab {
	struct wd_hashidx h;
	uint64_t key[4096];
	uint32_t n;
	bool constant; /* every key hashes the same: one long probe run */
};

static uint64_t hash_of(const struct tab *t, uint64_t key)
{
	return t->constant ? 7 : key;
}

static unsigned long eq_calls;

static bool eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct tab *t = ctx;

	eq_calls++;
	return t->key[pos] == *(const uint64_t *)key;
}

static uint32_t find(const struct tab *t, uint64_t key)
{
	return wd_hashidx_find(&t->h, hash_of(t, key), eq, t, &key);
}

/* Reference: a scan of the array. */
static uint32_t scan(const struct tab *t, uint64_t key)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->key[i] == key)
			return i + 1;
	return 0;
}

static void add(struct tab *t, uint64_t key)
{
	assert_int_equal(wd_hashidx_reserve(&t->h, t->n + 1), 0);
	assert_true(t->h.cap >= 2 * ((size_t)t->n + 1));
	assert_int_equal(wd_hashidx_pos(&t->h, wd_hashidx_slot(&t->h, hash_of(t, key), eq, t, &key)), 0);
	t->key[t->n] = key;
	wd_hashidx_put(&t->h, hash_of(t, key), t->n);
	t->n++;
}

static void del(struct tab *t, uint64_t key)
{
	size_t i = wd_hashidx_slot(&t->h, hash_of(t, key), eq, t, &key);
	uint32_t pos = wd_hashidx_pos(&t->h, i) - 1, last = t->n - 1;

	assert_int_not_equal(wd_hashidx_pos(&t->h, i), 0);
	wd_hashidx_delete(&t->h, i);
	if (pos != last) {
		t->key[pos] = t->key[last];
		wd_hashidx_move(&t->h, hash_of(t, t->key[pos]), last, pos);
	}
	t->n--;
}

/* Every entry found at its position, and exactly n slots used. */
static void check_all(const struct tab *t)
{
	size_t used = 0;

	for (uint32_t i = 0; i < t->n; i++)
		assert_int_equal(find(t, t->key[i]), i + 1);
	for (size_t i = 0; i < t->h.cap; i++)
		used += wd_hashidx_pos(&t->h, i) != 0;
	assert_int_equal(used, t->n);
}

static void random_ops(struct tab *t, unsigned seed, uint64_t keyspace)
{
	srand(seed);
	for (int op = 0; op < 20000; op++) {
		uint64_t key = (uint64_t)rand() % keyspace;
		uint32_t ref = scan(t, key);

		assert_int_equal(find(t, key), ref);
		if (ref && rand() % 2)
			del(t, key);
		else if (!ref && t->n < 4096)
			add(t, key);
		if (op % 997 == 0)
			check_all(t);
	}
	check_all(t);
}

static void random_against_reference(void **state)
{
	struct tab *t = calloc(1, sizeof(*t));

	(void)state;
	assert_non_null(t);
	assert_int_equal(find(t, 1), 0); /* no capacity yet */
	random_ops(t, 1, 3000);
	wd_hashidx_free(&t->h);
	free(t);
}

/* Consecutive and multiplied keys, to give the mixing structured input too. */
static void random_structured_keys(void **state)
{
	struct tab *t = calloc(1, sizeof(*t));

	(void)state;
	assert_non_null(t);
	srand(2);
	for (uint64_t k = 0; k < 2000; k++)
		add(t, k << 32);
	check_all(t);
	for (uint64_t k = 0; k < 2000; k += 3)
		del(t, k << 32);
	check_all(t);
	for (uint64_t k = 0; k < 2000; k++)
		assert_int_equal(find(t, k << 32) != 0, k % 3 != 0);
	wd_hashidx_free(&t->h);
	free(t);
}

static void growth_keeps_everything(void **state)
{
	struct tab *t = calloc(1, sizeof(*t));
	size_t caps = 0, last = 0;

	(void)state;
	assert_non_null(t);
	for (uint64_t k = 1; k <= 4096; k++) {
		add(t, k * 0x1000193);
		if (t->h.cap != last) {
			assert_true((t->h.cap & (t->h.cap - 1)) == 0); /* a power of two */
			last = t->h.cap;
			caps++;
			check_all(t);
		}
	}
	assert_true(caps >= 6); /* 16 -> ... -> 8192 */
	assert_int_equal(t->h.cap, 8192);
	check_all(t);
	/* reserving for what fits already keeps the table */
	uint64_t *before = t->h.slot;
	assert_int_equal(wd_hashidx_reserve(&t->h, 4096), 0);
	assert_ptr_equal(t->h.slot, before);
	wd_hashidx_clear(&t->h);
	assert_int_equal(find(t, 1 * 0x1000193), 0);
	wd_hashidx_free(&t->h);
	assert_null(t->h.slot);
	assert_int_equal(t->h.cap, 0);
	free(t);
}

/* One probe run holds everything: deleting anywhere in it must leave the rest reachable. */
static void constant_hash_deletion(void **state)
{
	struct tab *t = calloc(1, sizeof(*t));

	(void)state;
	assert_non_null(t);
	t->constant = true;
	for (uint64_t k = 0; k < 200; k++)
		add(t, k);
	check_all(t);
	del(t, 0);   /* the run's head */
	del(t, 100); /* its middle */
	del(t, 199); /* its tail */
	check_all(t);
	assert_int_equal(find(t, 0), 0);
	assert_int_equal(find(t, 100), 0);
	assert_int_equal(find(t, 199), 0);
	assert_int_not_equal(find(t, 1), 0);
	assert_int_not_equal(find(t, 198), 0);
	random_ops(t, 3, 400);
	wd_hashidx_free(&t->h);
	free(t);
}

/* Runs that wrap past the end of the table: deletion must compare homes cyclically. */
static uint64_t home_hash(const struct wd_hashidx *h, size_t want)
{
	for (uint64_t x = 0;; x++)
		if (wd_hashidx_home(h, x) == want)
			return x;
}

static void wrapping_runs(void **state)
{
	struct tab *t = calloc(1, sizeof(*t));
	uint64_t e[3], s0;
	size_t found = 0, last;

	(void)state;
	assert_non_null(t);
	assert_int_equal(wd_hashidx_reserve(&t->h, 1), 0);
	last = t->h.cap - 1;
	/* keys are their own hashes: three homed at the last slot (they wrap to 0 and 1), then one
	 * homed at 0, pushed to 2 */
	for (uint64_t x = 0; found < 3; x++)
		if (wd_hashidx_home(&t->h, x) == last)
			e[found++] = x;
	s0 = home_hash(&t->h, 0);
	for (int i = 0; i < 3; i++)
		add(t, e[i]);
	add(t, s0);
	assert_int_equal(t->h.cap, last + 1); /* no growth: 4 entries in 16 */
	assert_int_equal(wd_hashidx_pos(&t->h, 2), 4);
	del(t, e[0]);
	check_all(t);
	/* the run shifted back: e[1], e[2] at the last slot and 0, s0 at 1 */
	assert_int_equal(t->key[wd_hashidx_pos(&t->h, 1) - 1], s0);
	del(t, e[1]);
	del(t, e[2]);
	check_all(t);
	assert_int_equal(t->key[wd_hashidx_pos(&t->h, 0) - 1], s0); /* back home */
	wd_hashidx_free(&t->h);
	free(t);
}

/*
 * The equality test is asked only where the kept bits match: a lookup of an absent key whose
 * bits no entry shares asks it nothing, a lookup of a present one asks it once (distinct bits
 * are chosen by the test: keys are drawn until their bits, the high half of the key times the
 * golden-ratio constant, are new). Deleting asks it only in its own lookup.
 */
static bool bits_taken(const uint32_t *bits, size_t n, uint32_t b)
{
	for (size_t i = 0; i < n; i++)
		if (bits[i] == b)
			return true;
	return false;
}

static void equality_only_where_bits_match(void **state)
{
	struct tab *t = calloc(1, sizeof(*t));
	static uint32_t bits[3000];
	uint64_t absent[1000], x = 12345;
	size_t nb = 0, na = 0;

	(void)state;
	assert_non_null(t);
	while (nb < 3000) {
		uint32_t b;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		b = (uint32_t)((x * 0x9E3779B97F4A7C15ull) >> 32);
		if (bits_taken(bits, nb, b))
			continue;
		bits[nb++] = b;
		if (t->n < 2000)
			add(t, x); /* grows the table from 16 to 4096 slots */
		else
			absent[na++] = x;
	}
	eq_calls = 0;
	for (size_t i = 0; i < na; i++)
		assert_int_equal(find(t, absent[i]), 0);
	assert_int_equal(eq_calls, 0);
	for (uint32_t i = 0; i < t->n; i++)
		assert_int_equal(find(t, t->key[i]), i + 1);
	assert_int_equal(eq_calls, t->n);
	eq_calls = 0;
	while (t->n > 1000)
		del(t, t->key[t->n / 2]); /* its own lookup asks once; the shifts ask nothing */
	assert_int_equal(eq_calls, 1000);
	check_all(t);
	wd_hashidx_free(&t->h);
	free(t);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(random_against_reference),
	  cmocka_unit_test(random_structured_keys), cmocka_unit_test(growth_keeps_everything),
	  cmocka_unit_test(constant_hash_deletion), cmocka_unit_test(wrapping_runs),
	  cmocka_unit_test(equality_only_where_bits_match))
