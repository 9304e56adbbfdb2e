/* SPDX-License-Identifier: Apache-2.0 */
/* fake_client.c - a libweightd client of a fake weightd, and the checks on what it holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fake_client.h"

int fake_client_start(struct fake_client *fc, fake_handler h, void *ctx, unsigned version)
{
	weightd_error err;
	int wfds;

	fc->f = fake_start(h, ctx);
	if (version)
		atomic_store(&fc->f->hello_version, version);
	if (weightd_connect(fc->f->path, "unit-test", &fc->c, &err) < 0) {
		fprintf(stderr, "connect: %s\n", err.message);
		return -1;
	}
	fake_settle(fc->f);
	fc->fds_before = fake_count_fds(&wfds);
	return wfds == 0 && fake_count_maps() == 0 ? 0 : -1;
}

void fake_client_stop(struct fake_client *fc)
{
	weightd_close(fc->c);
	fake_stop(fc->f);
}

size_t fake_client_released(struct fake_client *fc, uint64_t *rel, size_t cap)
{
	weightd_source_list *l;
	weightd_error err;

	assert_int_equal(weightd_list(fc->c, &l, &err), 0);
	weightd_source_list_free(l);
	return fake_released(fc->f, rel, cap);
}

void fake_client_assert_idle(struct fake_client *fc)
{
	int wfds;

	fake_settle(fc->f);
	assert_int_equal(fake_count_fds(&wfds), fc->fds_before);
	assert_int_equal(wfds, 0);
	assert_int_equal(fake_count_maps(), 0);
}

void fake_assert_content(const void *p, const char *name, size_t n)
{
	uint8_t want[256];

	assert_true(n <= sizeof(want));
	assert_non_null(p);
	fake_content(name, want, n);
	assert_memory_equal(p, want, n);
}

static struct fake *life_fake;
static weightd_client *life_client;

static void life_end(void)
{
	weightd_close(life_client);
	fake_stop(life_fake);
}

weightd_client *fake_connect_for_life(fake_handler h, const char *who, struct fake **ret_fake)
{
	weightd_error err;

	if (life_client)
		abort();
	life_fake = fake_start(h, NULL);
	if (weightd_connect(life_fake->path, who, &life_client, &err) < 0) {
		fprintf(stderr, "%s: connect: %s\n", who, err.message);
		abort();
	}
	atexit(life_end);
	if (ret_fake)
		*ret_fake = life_fake;
	return life_client;
}
