/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_cache.c - what one uid can leave behind in the cache or cost the event loop through
 * unit requests: thousands of tiny distinct weights taken and abandoned, and a unit of chained
 * aliases sent by a uid that may read nothing it names. Needs root (the other uid is 65534). */
#include "hostile.h"

static struct harness H;

static int teardown(void **state)
{
	(void)state;
	if (H.dir[0])
		harness_cleanup(&H);
	memset(&H, 0, sizeof(H));
	return 0;
}

#define HOARD 1500       /* distinct one-byte weights the attacker takes */
#define IDLE_SEGMENTS 16 /* max_idle_segments in this test's config */
#define IDLE_WEIGHTS 64  /* max_idle_weights */

/*
 * The attack: a uid allowed on "tiny" asks for HOARD distinct weights (one byte each, every one
 * its own request, so every one its own segment), holds them all, then leaves. The daemon used to
 * keep a read-only fd per cached weight and evict only under byte pressure, so it sat at its fd
 * limit and a restart re-adopted the same state. Now what nobody holds is bounded in count: once
 * the attacker is gone the daemon keeps at most max_idle_segments segments (and their fds) and
 * max_idle_weights weights, another uid is served, and a restart re-adopts no more than that.
 */
static void abandoned_tiny_weights_are_bounded(void **state)
{
	struct hostile_base base;
	weightd_status *st;
	pid_t pid;

	(void)state;
	hostile_start(&H, "max_idle_segments = 16\nmax_idle_weights = 64");
	base = hostile_baseline(&H);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static weightd_weight *held[HOARD];
		weightd_client *c = NULL;
		weightd_error err;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "hoarder", &c, &err) < 0)
			_exit(70);
		for (size_t i = 0; i < HOARD; i += 64) {
			weightd_inflight *f[64] = { 0 };
			size_t n = HOARD - i < 64 ? HOARD - i : 64;

			for (size_t k = 0; k < n; k++) {
				weightd_selection *sel = NULL;

				if (weightd_selection_range(0, i + k, i + k + 1, &sel, &err) < 0 ||
				    weightd_materialize(c, "tiny", "t0", sel, &f[k], &err) < 0) {
					fprintf(stderr, "hoarder: request %zu: %s\n", i + k, err.message);
					_exit(71);
				}
				weightd_selection_free(sel);
			}
			for (size_t k = 0; k < n; k++)
				if (weightd_finish(f[k], &held[i + k], &err) < 0) {
					fprintf(stderr, "hoarder: weight %zu: %s\n", i + k, err.message);
					_exit(72);
				}
		}
		/* leave holding everything: the connection's end releases it all */
		_exit(0);
	}
	it_wait_child_ok(pid);

	st = it_wait_quiet(&H, 0, 0, 10000);
	if (st->segments > IDLE_SEGMENTS || st->weights > IDLE_WEIGHTS)
		fail_msg("after the hoarder left the daemon keeps %llu segments and %llu weights "
			 "(limits %d and %d)", (unsigned long long)st->segments,
			 (unsigned long long)st->weights, IDLE_SEGMENTS, IDLE_WEIGHTS);
	assert_true(st->evictions >= HOARD - IDLE_WEIGHTS);
	weightd_status_free(st);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base); /* fds: base + one per remaining segment, no more */

	/* a restart re-adopts what was left, not the attacker's whole hoard */
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	st = it_status_of(&H);
	assert_true(st->segments <= IDLE_SEGMENTS);
	assert_true(st->readoptions <= IDLE_WEIGHTS);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);
	hostile_victim_served(&H);
}

/*
 * The attack: a uid with no access to "secret" sends one entry on it and 65,536 aliases, each
 * naming the one before. Resolving such a chain used to be quadratic and ran before any access
 * check, blocking the event loop for minutes. Now the access check comes first: the request is
 * refused as permission-denied naming the checkpoint, and a victim of another uid is served
 * right after by the same daemon.
 */
static void aliases_of_a_forbidden_entry_are_refused_first(void **state)
{
	struct hostile_base base;
	pid_t pid;

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const size_t n = 65536;
		weightd_client *c = NULL;
		weightd_unit *u = NULL;
		weightd_error err;
		char name[24], target[24];
		int r;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "chainer", &c, &err) < 0 ||
		    weightd_unit_new(c, &u, &err) < 0 ||
		    weightd_unit_slot(u, "e", NULL, NULL, 0, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, "e", "secret", "s0", NULL, &err) < 0)
			_exit(70);
		for (size_t i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "a%zu", i);
			if (i)
				snprintf(target, sizeof(target), "a%zu", i - 1);
			else
				snprintf(target, sizeof(target), "e");
			if (weightd_unit_slot(u, name, NULL, NULL, 0, NULL, &err) < 0 ||
			    weightd_unit_set_alias(u, name, target, &err) < 0)
				_exit(71);
		}
		r = weightd_unit_submit(u, &err);
		if (r == 0)
			r = weightd_unit_validate(u, &err);
		if (r != -WEIGHTD_E_PERMISSION_DENIED || !strstr(err.message, "secret")) {
			fprintf(stderr, "chainer: got %d: %s\n", r, err.message);
			_exit(72);
		}
		weightd_unit_free(u);
		weightd_close(c);
		_exit(0);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(abandoned_tiny_weights_are_bounded, teardown),
		cmocka_unit_test_teardown(aliases_of_a_forbidden_entry_are_refused_first, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
