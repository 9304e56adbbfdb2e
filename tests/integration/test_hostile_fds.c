/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_fds.c - a few local uids, each within its limits, try to take every fd weightd may
 * open; another uid's cold get must still be served, each attacker is told which limit stopped
 * it, and the daemon's fds, memory and /dev/shm come back to where they were. Needs root (the
 * attackers and the victim are other uids). */
#include "fixture.h"
#include "hostile.h"

/* The victim's cold get of tiny:`tensor` (pattern `seed`), in a child as UID_VICTIM: how long
 * from fork to the checked bytes, in ms (fails the test if it was not served). */
static int64_t victim_cold_get(const char *tensor, unsigned seed)
{
	int64_t t0 = it_now_ms();

	hostile_victim_get(&H, "tiny", tensor, seed, TENSOR_BYTES, NULL);
	return it_now_ms() - t0;
}

#define NOFILE	  512
#define ATTACKERS 4
#define MAX_GETS  200

/*
 * Each attacker connects, says "ready" on `say` and waits for a line on `hear`; then it holds
 * weights in as many segments as it may: one-byte slices of one tensor from `first` on (each
 * attacker its own), each a weight of its own in a segment of its own, until refused. Says "held N", the code and the refusal, then waits for a
 * line before it lets go.
 */
static void attacker(uid_t uid, uint64_t first, int say, int hear)
{
	weightd_unit *held[MAX_GETS];
	weightd_client *c = NULL;
	weightd_error err;
	char line[64];
	int n = 0;

	hostile_become(uid);
	if (weightd_connect(H.sock, "attacker", &c, &err) < 0)
		_exit(10);
	chan_say(say, "ready\n");
	if (!chan_hear(hear, line, sizeof(line)))
		_exit(13);
	/* units of two new weights (bytes 2k and 2k + 1 of t0): a segment each (single gets would
	 * share one) */
	for (; n < MAX_GETS; n++) {
		uint64_t k = 2 * (first + (uint64_t)n);
		int r = weightd_unit_new(c, &held[n], &err);

		for (uint64_t b = 0; r >= 0 && b < 2; b++) {
			weightd_selection *sel = NULL;
			char slot[8];

			snprintf(slot, sizeof(slot), "b%d", (int)b);
			r = weightd_selection_range(0, k + b, k + b + 1, &sel, &err);
			if (r >= 0)
				r = weightd_unit_slot(held[n], slot, NULL, NULL, 0, NULL, &err);
			if (r >= 0)
				r = weightd_unit_set_tensor(held[n], slot, "tiny", "t0", sel, &err);
			weightd_selection_free(sel);
		}
		if (r >= 0)
			r = weightd_unit_submit(held[n], &err);
		if (r >= 0)
			r = weightd_unit_finish(held[n], &err);
		if (r < 0) {
			weightd_unit_free(held[n]);
			break;
		}
	}
	/* one line: how many it holds, the code and message of the refusal */
	chan_say(say, "held %d %d %.400s\n", n, (int)err.code, n < MAX_GETS ? err.message : "");
	if (!chan_hear(hear, line, sizeof(line)))
		_exit(12);
	for (int i = 0; i < n; i++)
		weightd_unit_free(held[i]);
	weightd_close(c);
	_exit(0);
}

/*
 * Each uid could keep a quarter of RLIMIT_NOFILE open in segments it holds, whatever the others
 * did, so 4 uids took all 20,000 of weightd's fds and a fifth uid's cold get failed with "Too
 * many open files". Now half of the fds is shared by the uids connected, a share each plus one
 * kept for a uid not yet seen. Scaled: RLIMIT_NOFILE 512, 4 attacker uids that come together
 * and take all they may (a uid alone could have 64 segments; 4 together 25 each); the victim's
 * cold get is served within 2 s while they hold it all, each attacker is refused naming
 * uid_max_segments, and the daemon never keeps more than half its fds open.
 */
static void a_few_uids_cannot_take_every_fd(void **state)
{
	struct hostile_chan ch[ATTACKERS];
	struct hostile_base base;
	pid_t pid[ATTACKERS];
	char line[600];
	int held = 0, fds;
	int64_t took;

	(void)state;
	if (geteuid() != 0)
		skip();
	{
		char sections[2048];

		if (harness_init(&H) < 0 || hostile_fixtures(&H, sections, sizeof(sections)) < 0)
			fail_msg("cannot prepare the test directory");
		if (harness_write_config(&H, "", sections) < 0 ||
		    harness_start_with_nofile(&H, NOFILE) < 0)
			fail_msg("weightd did not start");
	}
	base = hostile_baseline(&H);
	for (int i = 0; i < ATTACKERS; i++) {
		chan_open(&ch[i]);
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			chan_child(&ch[i]);
			attacker((uid_t)(UID_ATTACKER - i), (uint64_t)i * MAX_GETS,
				 ch[i].to_parent[1], ch[i].to_child[0]);
		}
		chan_parent(&ch[i]);
	}
	for (int i = 0; i < ATTACKERS; i++) {
		assert_true(chan_hear(ch[i].to_parent[0], line, sizeof(line)));
		assert_string_equal(line, "ready");
	}
	for (int i = 0; i < ATTACKERS; i++)
		chan_say(ch[i].to_child[1], "take\n");
	for (int i = 0; i < ATTACKERS; i++) {
		int n = 0, code = 0;

		assert_true(chan_hear(ch[i].to_parent[0], line, sizeof(line)));
		if (sscanf(line, "held %d %d", &n, &code) != 2 || n == MAX_GETS ||
		    code != ERR_LIMIT_EXCEEDED || !strstr(line, "uid_max_segments") ||
		    !strstr(line, "uids"))
			fail_msg("attacker %d: %s", i, line);
		held += n;
	}
	fds = harness_settled_fds(&H);
	print_message("%d attackers hold weights in %d segments; weightd has %d fds open of %d\n",
		      ATTACKERS, held, fds, NOFILE);
	if (fds > NOFILE / 2)
		fail_msg("weightd has %d of its %d fds open while %d uids hold all they may", fds,
			 NOFILE, ATTACKERS);
	took = victim_cold_get("t1", 1);
	if (took > 2000)
		fail_msg("the victim took %lld ms to be served", (long long)took);
	for (int i = 0; i < ATTACKERS; i++) {
		chan_say(ch[i].to_child[1], "go\n");
		it_wait_child_ok(pid[i]);
		close(ch[i].to_child[1]);
		close(ch[i].to_parent[0]);
	}
	hostile_back_to_base(&H, &base);
}

TEST_MAIN_WATCHDOG(600, NULL, NULL, TEST(a_few_uids_cannot_take_every_fd))
