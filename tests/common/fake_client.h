/* SPDX-License-Identifier: Apache-2.0 */
/* fake_client.h - libweightd connected to a fake weightd (fake_weightd.h): the connection and
 * the checks libweightd's unit tests share. Include after <cmocka.h>. */
#ifndef WD_TEST_FAKE_CLIENT_H
#define WD_TEST_FAKE_CLIENT_H

#include "fake_weightd.h"
#include "weightd/client.h"

/* A fake weightd and a client connected to it. */
struct fake_client {
	struct fake *f;
	weightd_client *c;
	int fds_before;              /* this process's fds once connected */
};

/*
 * Start a fake answering with h (ctx for it) whose hello names `version` (0: FAKE_VERSION) and
 * connect to it. 0, or -1 (a failed cmocka setup) when connecting fails or fds or mappings of
 * fake weights are open already.
 */
static inline int fake_client_start(struct fake_client *fc, fake_handler h, void *ctx,
				    unsigned version)
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

static inline void fake_client_stop(struct fake_client *fc)
{
	weightd_close(fc->c);
	fake_stop(fc->f);
}

/* Handles released so far, after a round trip that guarantees the fake saw every release (the
 * fake must answer a list). */
static inline size_t fake_client_released(struct fake_client *fc, uint64_t *rel, size_t cap)
{
	weightd_source_list *l;
	weightd_error err;

	assert_int_equal(weightd_list(fc->c, &l, &err), 0);
	weightd_source_list_free(l);
	return fake_released(fc->f, rel, cap);
}

/* Nothing is held: the fds are those there were once connected, and no fake weight is open or
 * mapped. */
static inline void fake_client_assert_idle(struct fake_client *fc)
{
	int wfds;

	fake_settle(fc->f);
	assert_int_equal(fake_count_fds(&wfds), fc->fds_before);
	assert_int_equal(wfds, 0);
	assert_int_equal(fake_count_maps(), 0);
}

/* p holds the bytes fake_content makes for name. */
static inline void fake_assert_content(const void *p, const char *name, size_t n)
{
	uint8_t want[256];

	assert_true(n <= sizeof(want));
	assert_non_null(p);
	fake_content(name, want, n);
	assert_memory_equal(p, want, n);
}

#endif
