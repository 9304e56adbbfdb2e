/* SPDX-License-Identifier: Apache-2.0 */
/* fixture.h - the one private weightd of an integration test program (`H`), made, started and
 * removed in one place (fixture.c); with itest.h's helpers, what a test starts, stops and
 * inspects weightd through. A program that runs several daemons at once keeps its others in
 * harnesses of its own (harness.h). TEST registers a test that cleans up after itself. */
#ifndef WD_FIXTURE_H
#define WD_FIXTURE_H

#include "deepseek.h"
#include "itest.h"
#include "tests.h"

/* The program's daemon: its temp dir, socket, prefix, process. Zero until fixture_init or
 * harness_init(&H) makes it, and again after fixture_cleanup. */
extern struct harness H;

/* A cmocka setup: H's temp dir made and its names picked, nothing started. 0, or -1. */
int fixture_init(void **state);

/* A cmocka teardown, of a test or of the group: when H was made, its daemon stopped and its temp
 * dir and segments removed; H zeroed for the next test either way. Returns 0. */
int fixture_cleanup(void **state);

/* For a group setup: H's configuration written (`extra` [daemon] lines, then `sections`) and its
 * daemon started and ready. 0, or -1 with the daemon's log printed. */
int fixture_start(const char *extra, const char *sections);

/* The DeepSeek-V3-shaped checkpoint at tiny size (deepseek.h), for the programs that serve it:
 * its table (made by the group setup fixture_ds_table, freed by fixture_ds_free) and the
 * directory it is written to in H's temp dir (by fixture_ds_write, a test's setup). */
extern struct ds_ckpt DS;
extern char DS_DIR[400];
int fixture_ds_table(void **state);
int fixture_ds_free(void **state);
int fixture_ds_write(void **state);
/* H started serving DS_DIR as checkpoint "ds" with `extra` [daemon] lines and the daemon's
 * RLIMIT_NOFILE at 4096 (what LimitNOFILE=4096 gives a service), or the test fails. */
void fixture_ds_start(const char *extra);

/* A test whose daemon is gone when it ends, passed or failed. */
#define TEST(fn) cmocka_unit_test_teardown(fn, fixture_cleanup)
/* The same, begun with a fresh temp dir (fixture_init) and nothing started. */
#define TEST_IN_DIR(fn) cmocka_unit_test_setup_teardown(fn, fixture_init, fixture_cleanup)

#endif
