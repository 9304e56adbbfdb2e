/* SPDX-License-Identifier: Apache-2.0 */
/* test_stop.c - the daemon's ends and edges with clients on it: a stop while a client holds a
 * weight and a preloaded checkpoint is held (the daemon exits 0, the client hears it is gone, the
 * weight it mapped stays readable), and root's reserve beyond max_clients running out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "harness.h"
#include "weightd/client.h"

static void a_stop_with_a_client_and_a_preload_ends_cleanly(void **state)
{
	char path[512], sect[700];
	weightd_client *c;
	weightd_weight *w, *w2 = NULL;
	weightd_error err;
	const uint8_t *p;
	uint8_t before[64];
	int status;

	harness_path(&H, "p.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 3 --tensor a:U8:65536 --tensor b:U8:65536", path);
	snprintf(sect, sizeof(sect), "[checkpoint:p]\npath = %s\npreload = yes\n", path);
	it_start(&H, NULL, sect);
	it_wait_references(&H, 2);

	c = it_connect(&H);
	w = it_get_ok(c, "p", "a");
	p = it_map(w);
	memcpy(before, p, sizeof(before));

	status = harness_stop(&H);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* the client is told the daemon is gone; what it mapped stays as it was */
	assert_true(it_get(c, "p", "b", &w2, &err) < 0);
	assert_int_equal(err.code, WEIGHTD_E_DISCONNECTED);
	assert_null(w2);
	assert_memory_equal(p, before, sizeof(before));
	weightd_release(w);
	weightd_close(c);
}

/* Root (these tests' uid) may connect past max_clients by its reserve of 16, no further. */
static void roots_reserve_runs_out(void **state)
{
	weightd_client *c[18] = { NULL };
	weightd_status *st;
	weightd_error err;

	it_start(&H, "max_clients = 1\n", NULL);
	for (int i = 0; i < 17; i++)
		c[i] = it_connect(&H);
	assert_int_equal(weightd_connect(H.sock, "one too many", &c[17], &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_int_equal(err.code, WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "max_clients 1"));
	/* the others are served, and the refusal is counted */
	st = it_status(c[0]);
	assert_int_equal(st->clients_refused, 1);
	weightd_status_free(st);
	for (int i = 0; i < 17; i++)
		weightd_close(c[i]);
	assert_int_equal(harness_stop(&H), 0);
}

TEST_MAIN(NULL, NULL, TEST_IN_DIR(a_stop_with_a_client_and_a_preload_ends_cleanly),
	  TEST_IN_DIR(roots_reserve_runs_out))
