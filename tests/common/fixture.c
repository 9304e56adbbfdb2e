/* SPDX-License-Identifier: Apache-2.0 */
/* fixture.c - the one private weightd of an integration test program: made, started and removed
 * for every test the same way. */
#include "fixture.h"

struct harness H;

int fixture_init(void **state)
{
	(void)state;
	return harness_init(&H) < 0 ? -1 : 0;
}

int fixture_cleanup(void **state)
{
	(void)state;
	if (H.dir[0]) /* not when the test was skipped before making one */
		harness_cleanup(&H);
	memset(&H, 0, sizeof(H));
	return 0;
}

int fixture_start(const char *extra, const char *sections)
{
	if (harness_write_config(&H, extra, sections) < 0 || harness_start(&H) < 0)
		return -1;
	return 0;
}

struct ds_ckpt DS;
char DS_DIR[400];

int fixture_ds_table(void **state)
{
	(void)state;
	return ds_table(&ds_tiny, &DS) < 0 ? -1 : 0;
}

int fixture_ds_free(void **state)
{
	(void)state;
	ds_free(&DS);
	return 0;
}

int fixture_ds_write(void **state)
{
	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "ds", DS_DIR, sizeof(DS_DIR));
	if (mkdir(DS_DIR, 0755) < 0 || ds_write(&DS, DS_DIR) < 0)
		return -1;
	return 0;
}

void fixture_ds_start(const char *extra)
{
	struct harness_opts o = { .nofile = 4096 };
	char sec[600];

	snprintf(sec, sizeof(sec), "[checkpoint:ds]\npath = %s\n", DS_DIR);
	if (harness_write_config(&H, extra, sec) < 0)
		fail_msg("cannot write the config in %s", H.dir);
	if (harness_start_opts(&H, &o) < 0)
		fail_msg("weightd did not start");
}
