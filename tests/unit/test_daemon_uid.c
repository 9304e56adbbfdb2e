/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_uid.c - the per-uid fd limits as shares of RLIMIT_NOFILE between the uids
 * connected: they shrink as uids come, keep a share for a uid not yet seen, grow back as uids
 * go; root and the daemon's own uid take none (they keep what a uid alone may take); the
 * configured values cap them. */
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "config.h"
#include "uid.h"

#define NOFILE 1600

static struct rlimit saved;

static int setup(void **state)
{
	struct rlimit rl;

	(void)state;
	if (getrlimit(RLIMIT_NOFILE, &saved) < 0)
		return -1;
	rl = saved;
	rl.rlim_cur = NOFILE;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < NOFILE)
		return -1;
	return setrlimit(RLIMIT_NOFILE, &rl);
}

static int teardown(void **state)
{
	(void)state;
	return setrlimit(RLIMIT_NOFILE, &saved);
}

static void expect_limits(const struct uid_usage *uu, const struct config *cfg, unsigned sharing)
{
	/* half of RLIMIT_NOFILE for n + 1 shares: a half, a quarter, a quarter, each of things that
	 * keep two fds open (a segment held: its own and the client's description of it) */
	assert_int_equal(uid_max_segments(uu, cfg), NOFILE / 8 / (sharing + 1));
	assert_int_equal(uid_max_queue_fds(uu, cfg), NOFILE / 8 / (sharing + 1));
	assert_int_equal(uid_max_pending(uu, cfg), NOFILE / 16 / (sharing + 1));
}

static void shares_follow_the_uids_connected(void **state)
{
	struct event_base *base = event_base_new();
	struct config cfg;
	struct uid_table *t;
	struct uid_usage *a, *a2, *b, *c, *root, *plain_root, *self = NULL;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.uid_max_segments = 1u << 20;
	cfg.uid_max_queue_fds = 1u << 20;
	cfg.uid_max_pending = 1u << 20;
	assert_non_null(base);
	t = uid_table_new(base, &cfg);
	assert_non_null(t);

	a = uid_get(t, 1000, false);
	expect_limits(a, &cfg, 1); /* alone: one share, one kept for the next */
	a2 = uid_get(t, 1000, false);	   /* a second connection of the same uid */
	assert_ptr_equal(a, a2);
	expect_limits(a, &cfg, 1);
	b = uid_get(t, 1001, false);
	c = uid_get(t, 1002, false);
	expect_limits(a, &cfg, 3);
	expect_limits(c, &cfg, 3);
	/* administering root (exempt) takes no share and keeps a uid alone's */
	root = uid_get(t, 0, true);
	expect_limits(a, &cfg, 3);
	expect_limits(root, &cfg, 1);
	/* root on the engine socket is a uid like any: its own record, which takes a share */
	plain_root = uid_get(t, 0, false);
	assert_ptr_not_equal(plain_root, root);
	expect_limits(a, &cfg, 4);
	expect_limits(plain_root, &cfg, 4);
	expect_limits(root, &cfg, 1);
	uid_put(plain_root);
	expect_limits(a, &cfg, 3);
	if (geteuid() != 0) {
		self = uid_get(t, geteuid(), true);
		expect_limits(a, &cfg, 3);
	}
	uid_put(c);
	uid_put(b);
	expect_limits(a, &cfg, 1);
	uid_put(a2); /* one connection of 1000 left: still counted */
	expect_limits(a, &cfg, 1);
	b = uid_get(t, 1001, false);
	expect_limits(b, &cfg, 2);
	uid_put(b);
	uid_put(a);
	expect_limits(root, &cfg, 1); /* nobody shares: what a uid alone may take */

	/* the configured values cap each share */
	cfg.uid_max_segments = 7;
	a = uid_get(t, 1000, false);
	assert_int_equal(uid_max_segments(a, &cfg), 7);
	assert_int_equal(uid_max_queue_fds(a, &cfg), NOFILE / 8 / 2);
	uid_put(a);
	uid_put(root);
	uid_put(self);
	uid_table_free(t);
	event_base_free(base);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(shares_follow_the_uids_connected))
