/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_cache.c - what one uid can leave behind in the cache, pin in it or cost the event
 * loop through unit requests: thousands of tiny distinct weights taken and abandoned or held,
 * and a unit of chained aliases sent by a uid that may read nothing it names. Needs root (the
 * other uid is 65534). */
#include <sys/resource.h>

#include "fixture.h"
#include "hostile.h"

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
	pid = hostile_attack(&H, "max_idle_segments = 16\nmax_idle_weights = 64", &base);
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

/* Byte i of tiny:t0 as a weight of its own (one request: one segment of its own). */
static int take_byte(weightd_client *c, size_t i, weightd_weight **ret, weightd_error *err)
{
	weightd_selection *sel = NULL;
	weightd_inflight *f = NULL;
	int r = weightd_selection_range(0, i, i + 1, &sel, err);

	if (r == 0)
		r = weightd_materialize(c, "tiny", "t0", sel, &f, err);
	weightd_selection_free(sel);
	if (r == 0)
		r = weightd_finish(f, ret, err);
	return r;
}

/* Take bytes first, first + 1, ... on c until a request fails; how many succeeded (held in
 * held[], at most cap), the failure in *err. */
static size_t take_until_refused(weightd_client *c, size_t first, weightd_weight **held,
				 size_t cap, weightd_error *err)
{
	size_t n = 0;

	while (n < cap && take_byte(c, first + n, &held[n], err) == 0)
		n++;
	return n;
}

/* Bytes 2i and 2i + 1 of tiny:t0 as a unit of two weights (a request of more than one new
 * weight: a segment of its own; single gets would share one). */
static int take_pair(weightd_client *c, size_t i, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, err);

	for (size_t k = 0; r >= 0 && k < 2; k++) {
		weightd_selection *sel = NULL;
		char slot[8];

		snprintf(slot, sizeof(slot), "b%zu", k);
		r = weightd_selection_range(0, 2 * i + k, 2 * i + k + 1, &sel, err);
		if (r >= 0)
			r = weightd_unit_slot(u, slot, NULL, NULL, 0, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, slot, "tiny", "t0", sel, err);
		weightd_selection_free(sel);
	}
	return it_unit_end(u, r, false, ret, err);
}

/* take_pair(first), take_pair(first + 1), ... until one fails; how many succeeded. */
static size_t take_pairs_until_refused(weightd_client *c, size_t first, weightd_unit **held,
				       size_t cap, weightd_error *err)
{
	size_t n = 0;

	while (n < cap && take_pair(c, first + n, &held[n], err) == 0)
		n++;
	return n;
}

#define CLIENT_SEGS 24   /* client_max_segments in this test's config */
#define UID_SEGS 40      /* uid_max_segments */

/*
 * The attack: a uid takes tiny weights two by two, each pair its own request and so its own
 * segment, and HOLDS them. Every segment held pins one daemon fd, and nothing but bytes used to bound
 * them: enough of them brought the daemon to its RLIMIT_NOFILE. Now the segments one connection
 * holds weights in are capped (client_max_segments), and so are those of all connections of a
 * uid (uid_max_segments): the request past either fails with limit-exceeded naming the limit
 * and its value (both told in hello); the daemon's fds stay within base + the uid's cap while
 * the attacker holds everything; another uid is served meanwhile; releasing gives the room
 * back; and when the attacker leaves, fds, memory and /dev/shm come back to where they were.
 */
static void held_segments_are_capped_per_client_and_uid(void **state)
{
	struct hostile_base base;
	struct hostile_chan ch;
	char line[512];
	pid_t pid;
	int fds;

	(void)state;
	hostile_start(&H, "client_max_segments = 24\nuid_max_segments = 40\n"
		      "max_idle_segments = 16\nmax_idle_weights = 64\n");
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		static weightd_unit *held[2 * UID_SEGS];
		weightd_client *c1 = NULL, *c2 = NULL;
		const weightd_server_info *si;
		weightd_unit *again = NULL;
		weightd_error err;
		size_t n1, n2;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "pinner", &c1, &err) < 0 ||
		    weightd_connect(H.sock, "pinner2", &c2, &err) < 0)
			_exit(70);
		si = weightd_server(c1);
		if (si->max_client_segments != CLIENT_SEGS || si->max_uid_segments != UID_SEGS) {
			fprintf(stderr, "pinner: hello says %u and %u\n", si->max_client_segments,
				si->max_uid_segments);
			_exit(71);
		}
		n1 = take_pairs_until_refused(c1, 0, held, 2 * UID_SEGS, &err);
		if (n1 != CLIENT_SEGS || err.code != WEIGHTD_E_LIMIT_EXCEEDED ||
		    !strstr(err.message, "client_max_segments") || !strstr(err.message, "24")) {
			fprintf(stderr, "pinner: %zu held, then: %s\n", n1, err.message);
			_exit(72);
		}
		n2 = take_pairs_until_refused(c2, 1000, held + n1, 2 * UID_SEGS - n1, &err);
		if (n1 + n2 != UID_SEGS || err.code != WEIGHTD_E_LIMIT_EXCEEDED ||
		    !strstr(err.message, "uid_max_segments") || !strstr(err.message, "40")) {
			fprintf(stderr, "pinner: %zu more held, then: %s\n", n2, err.message);
			_exit(73);
		}
		chan_say(ch.to_parent[1], "holding\n");
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(74);
		/* what is released is room again */
		weightd_unit_free(held[0]);
		if (take_pair(c1, 5000, &again, &err) < 0) {
			fprintf(stderr, "pinner: after a release: %s\n", err.message);
			_exit(75);
		}
		_exit(0); /* leaves holding everything */
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	/* the attacker holds UID_SEGS segments: the daemon pins two fds for each (the segment's
	 * and the connection's own description of it, which its locks go on), no more (its two
	 * connections, and the idle segments of the refused requests, besides) */
	fds = harness_count_fds(H.pid);
	if (fds > base.fds + 2 * UID_SEGS + 2 + 16 + 4)
		fail_msg("the daemon has %d fds while one uid holds its %d segments (base %d)", fds,
			 UID_SEGS, base.fds);
	hostile_victim_served(&H);
	chan_say(ch.to_child[1], "go on\n");
	hostile_reap(&ch, pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * Weights held cost daemon memory however small: over all connections of a uid they are capped
 * by uid_max_weights (told in hello). Two connections of the attacker take 8 in all, the ninth
 * fails naming the limit, another uid is served, and all comes back when the attacker leaves.
 */
static void held_weights_are_capped_per_uid(void **state)
{
	struct hostile_base base;
	struct hostile_chan ch;
	char line[64];
	pid_t pid;

	(void)state;
	hostile_start(&H, "uid_max_weights = 8\n");
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		static weightd_weight *held[16];
		weightd_client *c1 = NULL, *c2 = NULL;
		weightd_error err;
		size_t n1, n2;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "w1", &c1, &err) < 0 ||
		    weightd_connect(H.sock, "w2", &c2, &err) < 0)
			_exit(70);
		if (weightd_server(c1)->max_uid_weights != 8)
			_exit(71);
		n1 = take_until_refused(c1, 0, held, 5, &err);
		n2 = take_until_refused(c2, 100, held + n1, 16 - n1, &err);
		if (n1 != 5 || n1 + n2 != 8 || err.code != WEIGHTD_E_LIMIT_EXCEEDED ||
		    !strstr(err.message, "uid_max_weights") || !strstr(err.message, "its limit is 8")) {
			fprintf(stderr, "w: %zu + %zu held, then: %s\n", n1, n2, err.message);
			_exit(72);
		}
		chan_say(ch.to_parent[1], "holding\n");
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(73);
		_exit(0); /* leaves holding them */
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	hostile_victim_served(&H); /* while the attacker holds its 8 */
	chan_say(ch.to_child[1], "go\n");
	hostile_reap(&ch, pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * However high they are set, the per-uid limits on what pins daemon fds are cut to a share of
 * the daemon's RLIMIT_NOFILE (for a uid alone, a sixteenth for segments held, two fds each, a
 * sixteenth for fds queued, a thirty-second for unit requests in flight), with a warning naming each value the
 * config gives: hello tells another uid the limits in force.
 * Root is exempt from the uid's limits, as from the others, and told its own connection's.
 */
static void uid_fd_limits_stay_under_rlimit_nofile(void **state)
{
	char sections[2048];
	weightd_client *c;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		skip();
	if (harness_init(&H) < 0 || hostile_fixtures(&H, sections, sizeof(sections)) < 0 ||
	    harness_write_config(&H,
				 "uid_max_segments = 1000000\nclient_max_segments = 100000\n"
				 "uid_max_queue_fds = 4096\nuid_max_pending = 1024\n",
				 sections) < 0)
		fail_msg("cannot prepare the test directory");
	assert_int_equal(harness_start_with_nofile(&H, 256), 0);
	assert_true(harness_log_contains(&H, "uid_max_segments 1000000 is more than 1/16"));
	assert_true(harness_log_contains(&H, "uid_max_queue_fds 4096 is more than 1/16"));
	assert_true(harness_log_contains(&H, "uid_max_pending 1024 is more than 1/32"));
	assert_true(harness_log_contains(&H, "(RLIMIT_NOFILE 256), the most a uid alone may take; "
					     "16 is used instead"));
	c = it_connect(&H);
	assert_int_equal(weightd_server(c)->max_uid_segments, 16);
	assert_int_equal(weightd_server(c)->max_client_segments, 100000);
	weightd_close(c);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_error err;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "told", &c, &err) < 0)
			_exit(70);
		if (weightd_server(c)->max_uid_segments != 16 ||
		    weightd_server(c)->max_client_segments != 16)
			_exit(71);
		weightd_close(c);
		_exit(0);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
}

/* `weightd --check-config` on h's config with RLIMIT_NOFILE `nofile`: its stdout in out. */
static void check_config_with_nofile(const struct harness *h, unsigned long nofile, char *out,
				     size_t cap)
{
	struct harness_run_as as = { .uid = (uid_t)-1, .nofile = nofile };
	char *argv[] = { (char *)harness_weightd(), "--config", (char *)h->conf, "--check-config",
			 NULL };

	assert_int_equal(harness_run_with(argv, out, cap, &as), 0);
}

/*
 * The per-uid fd limits left at their defaults are derived from the RLIMIT_NOFILE the daemon
 * runs under, without a warning: under the shipped unit's LimitNOFILE=65536 and under a lower
 * 20000, which once warned on every start (the values are a uid alone's). The derived values are what hello tells a client
 * and what --check-config prints.
 */
static void default_uid_fd_limits_fit_rlimit_nofile_silently(void **state)
{
	static const struct {
		unsigned long nofile;
		unsigned segments, queue_fds, pending;
	} runs[] = { { 65536, 4096, 4096, 1024 },
		     { 20000, 1250, 1250, 625 },
		     { 4000, 250, 250, 125 } };
	char sections[2048], out[4096], want[256];
	int r, tried = 0;

	(void)state;
	if (geteuid() != 0)
		skip();
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		weightd_client *c;

		if (harness_init(&H) < 0 || hostile_fixtures(&H, sections, sizeof(sections)) < 0 ||
		    harness_write_config(&H, NULL, sections) < 0)
			fail_msg("cannot prepare the test directory");
		r = harness_start_with_nofile(&H, runs[i].nofile);
		if (r == HARNESS_UNSUPPORTED) { /* a hard limit this process may not raise */
			fprintf(stderr, "RLIMIT_NOFILE %lu not to be had here: not tried\n",
				runs[i].nofile);
			harness_cleanup(&H);
			memset(&H, 0, sizeof(H));
			continue;
		}
		assert_int_equal(r, 0);
		tried++;
		if (harness_log_contains(&H, "is more than 1/") ||
		    harness_log_contains(&H, "warning")) {
			harness_dump_log(&H);
			fail_msg("a default start under RLIMIT_NOFILE %lu warned", runs[i].nofile);
		}
		c = it_connect(&H);
		assert_int_equal(weightd_server(c)->max_uid_segments, runs[i].segments);
		weightd_close(c);
		check_config_with_nofile(&H, runs[i].nofile, out, sizeof(out));
		snprintf(want, sizeof(want),
			 "per-uid limits for a uid alone (RLIMIT_NOFILE %lu; shares shrink as uids "
			 "connect): uid_max_segments %u, uid_max_queue_fds %u, uid_max_pending %u",
			 runs[i].nofile, runs[i].segments, runs[i].queue_fds, runs[i].pending);
		if (!strstr(out, want))
			fail_msg("--check-config printed:\n%s\nwithout: %s", out, want);
		harness_cleanup(&H);
		memset(&H, 0, sizeof(H));
	}
	assert_true(tried >= 2); /* 20000 and 4000 are under any hard limit a test runs with */
}

/*
 * The attack: a uid with no access to "secret" sends one entry on it and 65,536 aliases, each
 * naming the one before. Resolving such a chain used to be quadratic and ran before any access
 * check, blocking the event loop for minutes. Now the access check comes first: the request is
 * refused as unknown-source naming the checkpoint, and a victim of another uid is served
 * right after by the same daemon.
 */
static void aliases_of_a_forbidden_entry_are_refused_first(void **state)
{
	struct hostile_base base;
	pid_t pid;

	(void)state;
	pid = hostile_attack(&H, NULL, &base);
	if (pid == 0) {
		const size_t n = 65536;
		weightd_client *c = NULL;
		weightd_unit *u = NULL;
		weightd_error err;
		int r;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "chainer", &c, &err) < 0 ||
		    weightd_unit_new(c, &u, &err) < 0 ||
		    weightd_unit_slot(u, "e", NULL, NULL, 0, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, "e", "secret", "s0", NULL, &err) < 0)
			_exit(70);
		if (it_alias_chain(u, "e", n, &err) < 0)
			_exit(71);
		r = weightd_unit_submit(u, &err);
		if (r == 0)
			r = weightd_unit_validate(u, &err);
		if (r != -WEIGHTD_E_UNKNOWN_SOURCE || !strstr(err.message, "secret")) {
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

TEST_MAIN(NULL, NULL, TEST(abandoned_tiny_weights_are_bounded),
	  TEST(aliases_of_a_forbidden_entry_are_refused_first),
	  TEST(held_segments_are_capped_per_client_and_uid), TEST(held_weights_are_capped_per_uid),
	  TEST(uid_fd_limits_stay_under_rlimit_nofile),
	  TEST(default_uid_fd_limits_fit_rlimit_nofile_silently))
