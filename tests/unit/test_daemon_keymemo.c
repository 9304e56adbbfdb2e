/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_keymemo.c - the memo of plain entries' keys: found only under the same identity and
 * name, replaced in place, never for an all-zero identity, and bounded (full: starts again). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests.h"

#include "keymemo.h"

static void fill(uint8_t out[32], uint8_t v)
{
	memset(out, v, 32);
}

static void remembered_by_identity_and_name(void **state)
{
	struct keymemo *m = keymemo_new(16);
	uint8_t id_a[32], id_b[32], k1[32], k2[32], got[32];

	(void)state;
	assert_non_null(m);
	fill(id_a, 0xa1);
	fill(id_b, 0xb2);
	fill(k1, 0x11);
	fill(k2, 0x22);
	assert_false(keymemo_get(m, id_a, "w", got));
	keymemo_put(m, id_a, "w", k1);
	assert_true(keymemo_get(m, id_a, "w", got));
	assert_memory_equal(got, k1, 32);
	/* another source (identity) or another tensor is another entry */
	assert_false(keymemo_get(m, id_b, "w", got));
	assert_false(keymemo_get(m, id_a, "w2", got));
	assert_false(keymemo_get(m, id_a, "", got));
	/* an identity differing in its last byte only is another identity */
	id_b[0] = 0xa1;
	memset(id_b, 0xa1, 31);
	assert_false(keymemo_get(m, id_b, "w", got));
	/* put again replaces */
	keymemo_put(m, id_a, "w", k2);
	assert_int_equal(keymemo_count(m), 1);
	assert_true(keymemo_get(m, id_a, "w", got));
	assert_memory_equal(got, k2, 32);
	keymemo_free(m);
}

static void zero_identity_is_never_remembered(void **state)
{
	struct keymemo *m = keymemo_new(16);
	uint8_t zero[32] = { 0 }, k[32], got[32];

	(void)state;
	fill(k, 0x33);
	keymemo_put(m, zero, "w", k);
	assert_int_equal(keymemo_count(m), 0);
	assert_false(keymemo_get(m, zero, "w", got));
	keymemo_free(m);
}

/* Many names (the table grows past its first size), then the bound: at max entries a new put
 * starts the memo again, so it never holds more than max. */
static void grows_and_stays_bounded(void **state)
{
	const size_t max = 1000;
	struct keymemo *m = keymemo_new(max);
	uint8_t id[32], k[32], got[32];
	char name[32];

	(void)state;
	fill(id, 0x5c);
	for (size_t i = 0; i < max; i++) {
		snprintf(name, sizeof(name), "layer.%zu.weight", i);
		memset(k, 0, sizeof(k));
		memcpy(k, &i, sizeof(i));
		keymemo_put(m, id, name, k);
	}
	assert_int_equal(keymemo_count(m), max);
	for (size_t i = 0; i < max; i++) {
		size_t v;

		snprintf(name, sizeof(name), "layer.%zu.weight", i);
		assert_true(keymemo_get(m, id, name, got));
		memcpy(&v, got, sizeof(v));
		assert_int_equal(v, i);
	}
	keymemo_put(m, id, "one.more", k);
	assert_int_equal(keymemo_count(m), 1);
	assert_true(keymemo_get(m, id, "one.more", got));
	assert_false(keymemo_get(m, id, "layer.0.weight", got));
	keymemo_free(m);
	keymemo_free(NULL);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(remembered_by_identity_and_name),
	  cmocka_unit_test(zero_identity_is_never_remembered),
	  cmocka_unit_test(grows_and_stays_bounded))
