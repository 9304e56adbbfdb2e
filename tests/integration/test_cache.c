/* SPDX-License-Identifier: Apache-2.0 */
/* test_cache.c - a cache of more weights than its first hash table holds (1,024): every weight is
 * still found by key (a second unit reads nothing) and by handle (each release lands), across
 * the table's growth; cached plain entries (found through the daemon's memo of keys, without a
 * plan) are checked and deduplicated as cold ones are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "harness.h"
#include "st_writer.h"
#include "weightd/client.h"

#define N 2500 /* past 1,024 and 2,048: the tables grow twice */

static char names[N][16];

static int setup(void **state)
{
	static struct stw_tensor ts[N];
	char path[512], sect[1024];

	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "w%d", i);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = "U8", .ndim = 1,
					     .shape = { 64 }, .seed = (uint32_t)i };
	}
	harness_path(&H, "many.safetensors", path, sizeof(path));
	if (stw_write(path, ts, N, NULL, 0, NULL) < 0)
		return -1;
	snprintf(sect, sizeof(sect), "[checkpoint:many]\npath = %s\n", path);
	return fixture_start(NULL, sect);
}

/* Every weight of "many" as one unit, validated and bound. */
static weightd_unit *unit_of_all(weightd_client *c)
{
	static const char *ptrs[N];
	weightd_unit *u = NULL;
	weightd_error err;

	for (int i = 0; i < N; i++)
		ptrs[i] = names[i];
	if (it_unit_of(c, "many", ptrs, N, true, &u, &err) < 0)
		fail_msg("unit: %s", err.message);
	weightd_unit_bind(u);
	return u;
}

static void thousands_of_weights_are_found_by_key_and_handle(void **state)
{
	weightd_client *c = it_connect(&H);
	weightd_unit *u1, *u2;
	weightd_status *st;

	(void)state;
	u1 = unit_of_all(c);
	assert_int_equal(weightd_unit_bytes_read(u1), (uint64_t)N * 64);
	for (int i = 0; i < N; i += 97) {
		const uint8_t *p = weightd_unit_data(u1, names[i]);

		assert_int_equal(it_pattern_mismatch(p, 64, (unsigned)i), -1);
	}
	st = it_status(c);
	assert_int_equal(st->weights, N);
	assert_int_equal(st->references, N);
	weightd_status_free(st);

	/* every one is found by its key: nothing is read again */
	u2 = unit_of_all(c);
	assert_int_equal(weightd_unit_bytes_read(u2), 0);
	for (int i = 0; i < N; i++)
		assert_non_null(weightd_unit_data(u2, names[i]));
	st = it_status(c);
	assert_int_equal(st->weights, N);
	assert_int_equal(st->references, 2 * N);
	weightd_status_free(st);

	/* and by handle: each release lands on its weight */
	weightd_unit_free(u1);
	weightd_unit_free(u2);
	st = it_wait_quiet(&H, 0, 1, 30000); /* c is still connected */
	assert_int_equal(st->references, 0);
	assert_int_equal(st->weights, N);
	weightd_status_free(st);
	weightd_close(c);
}

/* A cached tensor asked for again (the warm path): a declared slot that does not match is refused
 * with the words a cold one gets, and two slots of one tensor share one weight, one reference
 * each. Nothing is read. */
static void warm_plain_entries_are_checked_and_deduplicated(void **state)
{
	static const uint64_t good[1] = { 64 }, bad[1] = { 65 };
	weightd_client *c = it_connect(&H);
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;

	(void)state;
	for (int pass = 0; pass < 2; pass++) {   /* cold (or cached by the test before), then warm */
		assert_int_equal(weightd_unit_new(c, &u, &err), 0);
		assert_true(weightd_unit_slot(u, "x", "U8", bad, 1, NULL, &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(u, "x", "many", names[7], NULL, &err), 0);
		assert_int_equal(weightd_unit_submit(u, &err), 0);
		assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_SLOT_MISMATCH);
		assert_string_equal(err.slot, "x");
		assert_non_null(strstr(err.message, "is declared U8 [65] but its recipe gives U8 [64]"));
		weightd_unit_free(u);
		if (pass == 0) {   /* make sure it is cached for the second pass */
			weightd_inflight *f = NULL;
			weightd_weight *w = NULL;

			assert_int_equal(weightd_materialize(c, "many", names[7], NULL, &f, &err), 0);
			assert_int_equal(weightd_finish(f, &w, &err), 0);
			weightd_release(w);
		}
	}
	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	assert_true(weightd_unit_slot(u, "a", "U8", good, 1, NULL, &err) >= 0);
	assert_true(weightd_unit_slot(u, "b", "U8", good, 1, NULL, &err) >= 0);
	assert_int_equal(weightd_unit_set_tensor(u, "a", "many", names[7], NULL, &err), 0);
	assert_int_equal(weightd_unit_set_tensor(u, "b", "many", names[7], NULL, &err), 0);
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
		fail_msg("warm unit: %s", err.message);
	assert_int_equal(weightd_unit_bytes_read(u), 0);
	assert_ptr_equal(weightd_unit_weight(u, "a"), weightd_unit_weight(u, "b"));
	assert_int_equal(it_pattern_mismatch(weightd_unit_data(u, "a"), 64, 7u), -1);
	st = it_status(c);
	assert_int_equal(st->references, 2);
	weightd_status_free(st);
	weightd_unit_free(u);
	st = it_wait_quiet(&H, 0, 1, 30000);
	assert_int_equal(st->references, 0);
	weightd_status_free(st);
	weightd_close(c);
}

TEST_MAIN_WATCHDOG(240, setup, fixture_cleanup,
		   cmocka_unit_test(thousands_of_weights_are_found_by_key_and_handle),
		   cmocka_unit_test(warm_plain_entries_are_checked_and_deduplicated))
