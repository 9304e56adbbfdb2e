/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_workers.c - one local uid queues many large cold fills; another uid's small cold
 * get must still be served within about one chunk's fill time of what it takes on an idle
 * daemon, and the daemon's fds, memory and /dev/shm come back to where they were. Needs root
 * (the attacker and the victim are other uids). */
#include <sys/mman.h>

#include "fixture.h"
#include "hostile.h"

#define BIG_N	    16
#define BIG_BYTES   (64ull << 20)
#define CHUNK_BYTES (16ull << 20) /* what one worker fills before it looks at the queue again */

/* A daemon with "tiny", "secret" and "big": BIG_N tensors of BIG_BYTES that anyone may read. */
static void start_with_big(const char *extra)
{
	char sections[4096], big[512], args[2048];
	size_t n;

	if (geteuid() != 0)
		skip();
	if (harness_init(&H) < 0 || hostile_fixtures(&H, sections, sizeof(sections)) < 0)
		fail_msg("cannot prepare the test directory");
	harness_path(&H, "big.safetensors", big, sizeof(big));
	n = (size_t)snprintf(args, sizeof(args), "safetensors %s", big);
	for (int i = 0; i < BIG_N; i++)
		n += (size_t)snprintf(args + n, sizeof(args) - n, " --tensor b%d:U8:%llu", i,
				      BIG_BYTES);
	if (harness_mkfixture(args) < 0)
		fail_msg("cannot write %s", big);
	chmod(big, 0644);
	n = strlen(sections);
	snprintf(sections + n, sizeof(sections) - n, "\n[checkpoint:big]\npath = %s\n", big);
	it_start(&H, extra, sections);
}

/* The victim's cold get of `ckpt`:`tensor` (`bytes` of pattern `seed`), in a child as
 * UID_VICTIM: how long from its request to the reply, in ms (the bytes are checked after;
 * fails the test if it was not served). */
static int64_t victim_get(const char *ckpt, const char *tensor, unsigned seed, uint64_t bytes)
{
	int64_t ms;

	hostile_victim_get(&H, ckpt, tensor, seed, bytes, &ms);
	return ms;
}

static int64_t victim_cold_get(const char *tensor, unsigned seed)
{
	return victim_get("tiny", tensor, seed, TENSOR_BYTES);
}

/*
 * In a child as UID_ATTACKER: ask for every big tensor at once on one connection, say "queued"
 * on `ch`, wait for all of them, say "filled <ms from the first request>", release, exit. In
 * the parent: returns the child's pid once every fill is in flight.
 */
static pid_t attacker_queues_fills(struct hostile_chan *ch)
{
	char line[256];
	pid_t pid;

	chan_open(ch);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_inflight *f[BIG_N];
		weightd_weight *w[BIG_N];
		weightd_client *c = NULL;
		weightd_error err;
		char name[16];
		int64_t t0;

		chan_child(ch);
		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "attacker", &c, &err) < 0)
			_exit(10);
		t0 = it_now_ms();
		for (int i = 0; i < BIG_N; i++) {
			snprintf(name, sizeof(name), "b%d", i);
			if (weightd_materialize(c, "big", name, NULL, &f[i], &err) < 0)
				_exit(11);
		}
		chan_say(ch->to_parent[1], "queued\n");
		for (int i = 0; i < BIG_N; i++)
			if (weightd_finish(f[i], &w[i], &err) < 0 ||
			    weightd_weight_nbytes(w[i]) != BIG_BYTES) {
				fprintf(stderr, "attacker: b%d: %s\n", i, err.message);
				_exit(12);
			}
		chan_say(ch->to_parent[1], "filled %lld\n", (long long)(it_now_ms() - t0));
		for (int i = 0; i < BIG_N; i++)
			weightd_release(w[i]);
		weightd_close(c);
		_exit(0);
	}
	chan_parent(ch);
	assert_true(chan_hear(ch->to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "queued");
	/* every fill is in flight before the victim asks */
	for (int64_t end = it_now_ms() + 10000;;) {
		weightd_status *st = it_status_of(&H);
		uint64_t n = st->materializations_in_flight;

		weightd_status_free(st);
		if (n >= BIG_N)
			break;
		if (it_now_ms() > end)
			fail_msg("only %llu of the attacker's %d fills were ever in flight",
				 (unsigned long long)n, BIG_N);
		usleep(2000);
	}
	return pid;
}

/* The attacker's fills are done: how long they took from its first request, in ms. */
static int64_t attacker_done(struct hostile_chan *ch, pid_t pid)
{
	char line[256];
	long long ms = 0;

	assert_true(chan_hear(ch->to_parent[0], line, sizeof(line)));
	if (sscanf(line, "filled %lld", &ms) != 1)
		fail_msg("the attacker said: %s", line);
	it_wait_child_ok(pid);
	close(ch->to_child[1]);
	close(ch->to_parent[0]);
	return (int64_t)ms;
}

/*
 * Workers served jobs first come, first served: 12 queued cold 256 MiB fills of one uid made
 * another uid's cold 64-byte get wait 3.6 s. Workers now serve uids fairly over bytes, and a
 * worker filling a large weight serves another uid's due job between two of its chunks, so the
 * victim waits for about one chunk per worker, not for the queue. Scaled: 16 fills of 64 MiB
 * queued at once by one connection; the victim's cold gets of 64 KiB tensors during them must
 * take at most twice as long as on the idle daemon plus two chunks' fill time (a chunk's time
 * measured from the attack's own rate) plus 100 ms for a shared machine. The attacker is not
 * refused (each fill is within its limits): its fills all complete, after the victim's.
 */
static void queued_fills_do_not_stall_another_uids_cold_get(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	int64_t idle, took[2], bound, attack_ms;
	double chunk_ms;
	pid_t pid;

	(void)state;
	start_with_big("budget = 6G\nworkers = 2\n");
	base = hostile_baseline(&H);
	idle = victim_cold_get("t0", 0);
	pid = attacker_queues_fills(&ch);
	took[0] = victim_cold_get("t1", 1);
	took[1] = victim_cold_get("t3", 3);
	attack_ms = attacker_done(&ch, pid);
	chunk_ms = (double)attack_ms * (double)CHUNK_BYTES / (double)(BIG_N * BIG_BYTES);
	bound = 2 * idle + (int64_t)(2 * chunk_ms) + 100;
	print_message("victim's cold get: %lld ms idle; %lld and %lld ms while %d x %llu MiB fills "
		      "were queued (%lld ms for all of them, %.1f ms a chunk); bound %lld ms\n",
		      (long long)idle, (long long)took[0], (long long)took[1], BIG_N,
		      BIG_BYTES >> 20, (long long)attack_ms, chunk_ms, (long long)bound);
	for (int i = 0; i < 2; i++)
		if (took[i] > bound)
			fail_msg(
				"the victim's cold get took %lld ms while another uid's fills were "
				"queued (%lld ms idle, bound %lld ms)",
				(long long)took[i], (long long)idle, (long long)bound);
	hostile_back_to_base(&H, &base);
}

/*
 * A weight two uids wait for is made once, by the job of the uid that asked first. When the
 * other asks while that job is still queued behind the first uid's other fills, the job moves
 * into the second uid's share, so the second waits for one fill, not for the first uid's
 * queue. Scaled: the victim asks for the last of the attacker's 16 queued fills; it must have
 * it in under half the time all 16 take (it would otherwise come last).
 */
static void a_weight_both_wait_for_is_not_held_back_by_the_others_queue(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	int64_t took, attack_ms;
	char name[16];
	pid_t pid;

	(void)state;
	start_with_big("budget = 6G\nworkers = 2\n");
	base = hostile_baseline(&H);
	pid = attacker_queues_fills(&ch);
	snprintf(name, sizeof(name), "b%d", BIG_N - 1);
	took = victim_get("big", name, BIG_N - 1, BIG_BYTES);
	attack_ms = attacker_done(&ch, pid);
	print_message(
		"victim's get of %s, the last of the %d queued: %lld ms; all of them: %lld ms\n",
		name, BIG_N, (long long)took, (long long)attack_ms);
	if (took * 2 > attack_ms)
		fail_msg("the victim waited %lld ms for %s, queued last by another uid whose fills "
			 "took %lld ms",
			 (long long)took, name, (long long)attack_ms);
	hostile_back_to_base(&H, &base);
}

TEST_MAIN_WATCHDOG(
	600, NULL, NULL, TEST(queued_fills_do_not_stall_another_uids_cold_get),
	cmocka_unit_test_teardown(a_weight_both_wait_for_is_not_held_back_by_the_others_queue,
				  fixture_cleanup))
