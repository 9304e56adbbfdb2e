/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_fair.c - one local uid tries to take more than its share of what weightd has: the
 * main loop (a message of endless empty frames), the connection slots (connections that never
 * ask for anything), the weight limits (references to one weight), and what it may learn of
 * checkpoints it may not read. Each attack, scaled down to run in seconds, must leave another uid
 * served throughout, tell the attacker why it was refused, and leave the daemon's fds, memory and
 * /dev/shm as they were. Needs root (the attacker and the victim are other uids). */
#include <fcntl.h>

#include "fixture.h"
#include "hostile.h"

/* The victim is served, and within `bound_ms`. */
static void victim_served_within(int64_t bound_ms)
{
	int64_t t0 = it_now_ms(), took;

	hostile_victim_served(&H);
	took = it_now_ms() - t0;
	if (took > bound_ms)
		fail_msg("the victim took %lld ms to be served (bound %lld ms)", (long long)took,
			 (long long)bound_ms);
}

/* An empty frame flagged "more frames follow". */
static const uint8_t EMPTY_MORE[8] = { 0, 0, 0, 0, 0, 0, 0, 0x80 };

/*
 * Empty continuation frames carry no bytes, so no byte limit stopped a message made of them: one
 * connection sent billions, holding the main loop. A request now spans at most one frame per
 * 4 KiB of max_message, empty ones included, and frame_timeout runs from its first frame to its
 * last. Scaled: max_message 1 MiB (257 frames), frame_timeout 1.5 s, 8 flooding connections and
 * one sending an empty frame every 100 ms.
 */
#define EF_CONNS 8
static void empty_frames_are_bounded_in_count_and_time(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	char line[1200];
	weightd_status *st;
	pid_t pid;

	(void)state;
	hostile_start(&H, "max_message = 1M\nframe_timeout = 1500ms\n");
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		uint8_t batch[8 * 512];
		int fl[EF_CONNS], slow;
		bool done[EF_CONNS] = { false };
		int left = EF_CONNS;
		int64_t end;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		for (size_t i = 0; i < sizeof(batch); i += 8)
			memcpy(batch + i, EMPTY_MORE, 8);
		slow = hostile_conn(&H);
		for (int i = 0; i < EF_CONNS; i++) {
			fl[i] = hostile_conn(&H);
			fcntl(fl[i], F_SETFL, fcntl(fl[i], F_GETFL) | O_NONBLOCK);
		}
		chan_say(ch.to_parent[1], "flooding\n");
		/* flood until the daemon answers each connection (its closing error), at most 10 s */
		end = it_now_ms() + 10000;
		while (left && it_now_ms() < end) {
			for (int i = 0; i < EF_CONNS; i++) {
				struct pollfd pf = { .fd = fl[i], .events = POLLIN };
				uint64_t code = 0;
				char msg[1024];

				if (done[i])
					continue;
				(void)send(fl[i], batch, sizeof(batch),
					   MSG_NOSIGNAL | MSG_DONTWAIT);
				if (poll(&pf, 1, 0) <= 0)
					continue;
				fcntl(fl[i], F_SETFL, fcntl(fl[i], F_GETFL) & ~O_NONBLOCK);
				if (hostile_closing_error(fl[i], &code, msg, sizeof(msg), 5000) !=
					    1 ||
				    !hostile_eof(fl[i]))
					_exit(20);
				chan_say(ch.to_parent[1], "flood %llu %s\n",
					 (unsigned long long)code, msg);
				done[i] = true;
				left--;
				close(fl[i]);
			}
		}
		if (left)
			_exit(21); /* still taking empty frames after 10 s */
		/* a trickle: one empty frame every 100 ms, never the last one */
		fcntl(slow, F_SETFL, fcntl(slow, F_GETFL) | O_NONBLOCK);
		end = it_now_ms() + 10000;
		for (;;) {
			struct pollfd pf = { .fd = slow, .events = POLLIN };
			uint64_t code = 0;
			char msg[1024];

			if (it_now_ms() > end)
				_exit(22); /* never timed out */
			(void)send(slow, EMPTY_MORE, 8, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (poll(&pf, 1, 100) <= 0)
				continue;
			fcntl(slow, F_SETFL, fcntl(slow, F_GETFL) & ~O_NONBLOCK);
			if (hostile_closing_error(slow, &code, msg, sizeof(msg), 5000) != 1 ||
			    !hostile_eof(slow))
				_exit(23);
			chan_say(ch.to_parent[1], "slow %llu %s\n", (unsigned long long)code, msg);
			break;
		}
		close(slow);
		_exit(0);
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	/* served while the flood goes on */
	victim_served_within(2000);
	for (int i = 0; i < EF_CONNS; i++) {
		assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
		if (strncmp(line, "flood 9 ", 8) != 0 || !strstr(line, "257 frames") ||
		    !strstr(line, "max_message"))
			fail_msg("the flood of empty frames was closed with: %s", line);
	}
	victim_served_within(2000);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (strncmp(line, "slow 9 ", 7) != 0 || !strstr(line, "frame_timeout"))
		fail_msg("the trickle of empty frames was closed with: %s", line);
	hostile_reap(&ch, pid);
	st = it_status_of(&H);
	assert_true(st->clients_timed_out >= 1);
	assert_int_equal(st->partial_frame_bytes, 0);
	weightd_status_free(st);
	victim_served_within(2000);
	hostile_back_to_base(&H, &base);
}

/*
 * 17 uids with 64 silent connections each used to take all 1,024 slots, and a new uid was refused
 * until idle_timeout. Now a connection that sends no request within first_request_timeout is
 * closed, and when the slots are full a new uid's connection makes the oldest idle connection of
 * the uid with the most give way. Scaled: 6 slots, first_request_timeout 1 s.
 */
#define SL_SLOTS 6
static void silent_connections_give_their_slots_back(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	char line[1200], extra[256];
	weightd_status *st;
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra),
		 "max_clients = %d\nmax_clients_per_uid = %d\n"
		 "first_request_timeout = 1s\n",
		 SL_SLOTS, SL_SLOTS);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		int conns[SL_SLOTS], silent;
		uint64_t code = 0;
		char msg[1024];
		int64_t t0;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		/* a connection that never says anything is closed, and told why */
		t0 = it_now_ms();
		silent = it_raw_connect(&H);
		if (silent < 0 ||
		    hostile_closing_error(silent, &code, msg, sizeof(msg), 5000) != 1 ||
		    !hostile_eof(silent))
			_exit(30);
		chan_say(ch.to_parent[1], "silent %llu %lld %s\n", (unsigned long long)code,
			 (long long)(it_now_ms() - t0), msg);
		close(silent);
		/* every slot, by connections that said hello and then nothing, oldest first */
		for (int i = 0; i < SL_SLOTS; i++) {
			conns[i] = hostile_conn(&H);
			usleep(20000);
		}
		chan_say(ch.to_parent[1], "full\n");
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(31);
		/* the oldest gave way, told why; the others are still open */
		if (hostile_closing_error(conns[0], &code, msg, sizeof(msg), 5000) != 1 ||
		    !hostile_eof(conns[0]))
			_exit(32);
		chan_say(ch.to_parent[1], "gave %llu %s\n", (unsigned long long)code, msg);
		for (int i = 1; i < SL_SLOTS; i++) {
			struct pollfd pf = { .fd = conns[i], .events = POLLIN };

			if (poll(&pf, 1, 0) != 0)
				_exit(33);
		}
		for (int i = 0; i < SL_SLOTS; i++)
			close(conns[i]);
		_exit(0);
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	{
		long long ms = 0;
		char *msg = NULL;

		if (strncmp(line, "silent 9 ", 9) != 0 || sscanf(line + 9, "%lld", &ms) != 1 ||
		    !(msg = strstr(line, "first_request_timeout")) || ms < 900 || ms > 3000)
			fail_msg("the silent connection was closed with: %s", line);
	}
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "full");
	/* a new uid gets in while the slots are full */
	victim_served_within(2000);
	chan_say(ch.to_child[1], "check\n");
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (strncmp(line, "gave 9 ", 7) != 0 || !strstr(line, "max_clients") ||
	    !strstr(line, "uid 65534") || !strstr(line, "gave way"))
		fail_msg("the connection that gave way was told: %s", line);
	hostile_reap(&ch, pid);
	st = it_status_of(&H);
	assert_true(st->clients_timed_out >= 1);
	weightd_status_free(st);
	victim_served_within(2000);
	hostile_back_to_base(&H, &base);
}

/*
 * References were not counted: 500 shares of one weight passed a uid_max_weights of 300, and each
 * is a count the daemon keeps. Now every reference counts as a weight toward uid_max_weights
 * (and client_max_weights): the uid holds exactly its limit of references, the next share and
 * the next unit naming the weight again are refused naming uid_max_weights, another uid is
 * served meanwhile, and everything comes back when the attacker leaves.
 */
#define RF_MAX 300
static void references_count_toward_the_weight_limit(void **state)
{
	struct hostile_base base;
	struct hostile_chan ch;
	char line[1200], extra[64];
	weightd_status *st;
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra), "uid_max_weights = %d\n", RF_MAX);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		static weightd_weight *held[2 * RF_MAX];
		weightd_client *c = NULL;
		weightd_weight *w = NULL;
		weightd_error err;
		size_t n = 1;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "sharer", &c, &err) < 0 ||
		    it_get(c, "tiny", "t0", &held[0], &err) < 0)
			_exit(40);
		while (n < 2 * RF_MAX && weightd_share(held[0], &held[n], &err) == 0)
			n++;
		if (n != RF_MAX || err.code != WEIGHTD_E_LIMIT_EXCEEDED)
			_exit(41);
		chan_say(ch.to_parent[1], "share %zu %s\n", n, err.message);
		if (it_get(c, "tiny", "t0", &w, &err) == 0 || err.code != WEIGHTD_E_LIMIT_EXCEEDED)
			_exit(42);
		chan_say(ch.to_parent[1], "get %s\n", err.message);
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(43);
		_exit(0); /* leaves holding them all */
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (strncmp(line, "share 300 ", 10) != 0 || !strstr(line, "uid_max_weights") ||
	    !strstr(line, "its limit is 300") || !strstr(line, "a weight held twice counts twice"))
		fail_msg("the share past the limit was refused with: %s", line);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (strncmp(line, "get ", 4) != 0 || !strstr(line, "uid_max_weights"))
		fail_msg("a get of the same weight past the limit was refused with: %s", line);
	st = it_status_of(&H);
	assert_int_equal(st->references, RF_MAX);
	weightd_status_free(st);
	victim_served_within(2000); /* while the attacker holds its 300 */
	chan_say(ch.to_child[1], "go\n");
	hostile_reap(&ch, pid);
	victim_served_within(2000);
	hostile_back_to_base(&H, &base);
}

/* A unit of one slot "w" whose recipe stacks `copies` of tiny's m0 (F32 [256, 256], 256 KiB)
 * and casts them to F64: 512 KiB of weight per copy read, made from one 256 KiB tensor. */
static int amplified(weightd_client *c, int copies, weightd_unit **ret, weightd_error *err)
{
	static const char src[] = "{\"op\":\"source\",\"checkpoint\":\"tiny\",\"tensor\":\"m0\"}";
	char json[8192];
	size_t n = 0;
	int r;

	n += (size_t)snprintf(json + n, sizeof(json) - n,
			      "{\"slots\":[{\"name\":\"w\",\"recipe\":{\"op\":\"cast\",\"dtype\":"
			      "\"F64\",\"input\":{\"op\":\"stack\",\"axis\":0,\"inputs\":[");
	for (int i = 0; i < copies; i++)
		n += (size_t)snprintf(json + n, sizeof(json) - n, "%s%s", i ? "," : "", src);
	snprintf(json + n, sizeof(json) - n, "]}}}]}");
	r = weightd_unit_from_json(c, json, strlen(json), ret, err);
	if (r == 0)
		r = weightd_unit_submit(*ret, err);
	if (r == 0)
		r = weightd_unit_validate(*ret, err);
	if (r < 0) {
		weightd_unit_free(*ret);
		*ret = NULL;
	}
	return r;
}

/*
 * One uid held the whole 2 GiB budget in 2.9 s by stacking and casting one 4 MiB tensor, and
 * another uid's 64-byte get then failed for want of room. Now a uid may hold uid_budget_share
 * (50%) of the budget, counting each weight for the bytes it has as made: the attacker's units
 * pass until the next would take it past 32 MiB of a 64 MiB budget, which is refused naming the
 * share and the keys to raise, while another uid is served throughout and root (exempt) may still
 * hold more than the share. When the attacker leaves, its weights are cached for nobody (the
 * budget evicts them for others) and an evict gives /dev/shm back.
 */
#define BS_BUDGET_MIB 64
static void one_uid_holds_at_most_its_share_of_the_budget(void **state)
{
	struct hostile_base base;
	struct hostile_chan ch;
	char line[1200], extra[64];
	weightd_client *root;
	weightd_unit *big = NULL;
	weightd_status *st;
	weightd_error err;
	uint64_t n_ev = 0, b_ev = 0;
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra), "budget = %dM\n", BS_BUDGET_MIB);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		weightd_unit *held[64];
		weightd_client *c = NULL;
		int n = 0;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "amplifier", &c, &err) < 0)
			_exit(60);
		/* 4.5 MiB, 5 MiB, 5.5 MiB, ...: distinct weights, each made from m0 alone */
		while (n < 64 && amplified(c, 9 + n, &held[n], &err) == 0)
			n++;
		chan_say(ch.to_parent[1], "held %d %llu %s\n", n, (unsigned long long)err.code,
			 err.message);
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(61);
		_exit(0); /* leaves holding them */
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	/* 4.5 + 5 + 5.5 + 6 + 6.5 = 27.5 MiB held; 7 MiB more would pass 32 MiB */
	if (strncmp(line, "held 5 9 ", 9) != 0 || !strstr(line, "uid 65534") ||
	    !strstr(line, "its share of the budget is 32 MiB") ||
	    !strstr(line, "uid_budget_share 50% of 64 MiB") ||
	    !strstr(line, "raise `uid_budget_share`") || !strstr(line, "`budget_users`"))
		fail_msg("the attacker's units ended with: %s", line);
	st = it_status_of(&H);
	assert_true(st->bytes_resident <= (uint64_t)BS_BUDGET_MIB / 2 * 1024 * 1024 + 65536);
	weightd_status_free(st);
	/* the victim is served while the attacker holds its share */
	victim_served_within(2000);
	/* root may hold past the share: 35 MiB, in the room the attacker cannot take */
	root = it_connect(&H);
	if (amplified(root, 70, &big, &err) < 0)
		fail_msg("root's 35 MiB unit: %s", err.message);
	weightd_unit_free(big);
	chan_say(ch.to_child[1], "go\n");
	hostile_reap(&ch, pid);
	victim_served_within(2000);
	/* nothing is held; what is cached for nobody goes with an evict, and /dev/shm with it */
	st = it_wait_quiet(&H, 0, 0, 10000);
	weightd_status_free(st);
	assert_int_equal(weightd_evict(root, &n_ev, &b_ev, &err), 0);
	weightd_close(root);
	assert_int_equal(harness_segments(&H), 0);
	hostile_back_to_base(&H, &base);
}

/* A unit of n distinct slots s0, s1, ...: slot i is byte i of tiny's t0 (n <= 65536), submitted
 * and finished (no mapping). */
static int wide_unit(weightd_client *c, size_t n, weightd_error *err)
{
	weightd_unit *u = NULL;
	char name[24];
	int r = weightd_unit_new(c, &u, err);

	for (size_t i = 0; r == 0 && i < n; i++) {
		weightd_selection *sel = NULL;

		snprintf(name, sizeof(name), "s%zu", i);
		r = weightd_unit_slot(u, name, NULL, NULL, 0, NULL, err); /* its index */
		if (r >= 0)
			r = weightd_selection_range(0, i, i + 1, &sel, err);
		if (r == 0)
			r = weightd_unit_set_tensor(u, name, "tiny", "t0", sel, err);
		weightd_selection_free(sel);
	}
	if (r == 0)
		r = weightd_unit_submit(u, err);
	if (r == 0)
		r = weightd_unit_finish(u, err);
	weightd_unit_free(u);
	return r;
}

/*
 * A million-entry unit made weightd take about 950 MB while it decoded and planned it, and 8
 * connections sending such units took it to 1.18 GB. Now what a uid's requests take to decode
 * (6 bytes per byte received) and its units to plan and make (2 KiB per entry) is counted
 * against uid_max_unit_memory before any of it is taken. Scaled to a 16 MiB limit: 8 connections
 * at once each send a unit of 60,000 entries (about 21 MB on the wire) and are refused naming
 * the limit (or uid_max_partial, which bounds what they send at once), with the daemon's peak
 * memory within what their bytes received take; a unit of 8,000 entries, whose decoding fits
 * but whose planning does not, is refused and its connection stays usable; a unit of 1,000
 * entries is served; another uid is served throughout.
 */
#define UM_CONNS   8
#define UM_ENTRIES 60000
static void unit_memory_is_bounded_per_uid(void **state)
{
	struct hostile_base base;
	struct hostile_chan ch;
	char line[1200];
	long hwm0, hwm1;
	pid_t pid;

	(void)state;
	hostile_start(&H, "uid_max_unit_memory = 16M\nuid_max_partial = 32M\n");
	base = hostile_baseline(&H);
	hwm0 = harness_hwm_kb(H.pid);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_error err;
		pid_t kids[UM_CONNS];

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		/* all at once, one connection per process */
		for (int i = 0; i < UM_CONNS; i++) {
			kids[i] = fork();
			if (kids[i] != 0)
				continue;
			if (weightd_connect(H.sock, "wide", &c, &err) < 0)
				_exit(80);
			if (wide_unit(c, UM_ENTRIES, &err) == 0) {
				fprintf(stderr, "wide: 60,000 entries were served\n");
				_exit(81);
			}
			chan_say(ch.to_parent[1], "wide %s\n", err.message);
			weightd_close(c);
			_exit(0);
		}
		for (int i = 0; i < UM_CONNS; i++) {
			int st = 0;

			if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) ||
			    WEXITSTATUS(st) != 0) {
				fprintf(stderr, "wide: a connection ended with %#x\n", st);
				_exit(82);
			}
		}
		/* decoding fits, planning does not: refused, and the connection goes on */
		if (weightd_connect(H.sock, "planner", &c, &err) < 0)
			_exit(83);
		if (wide_unit(c, 8000, &err) == 0) {
			fprintf(stderr, "planner: 8,000 entries were served\n");
			_exit(84);
		}
		chan_say(ch.to_parent[1], "plan %s\n", err.message);
		if (wide_unit(c, 1000, &err) < 0) {
			fprintf(stderr, "planner: 1,000 entries: %s\n", err.message);
			_exit(85);
		}
		weightd_close(c);
		_exit(0);
	}
	chan_parent(&ch);
	for (int i = 0; i < UM_CONNS; i++) {
		assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
		if (!strstr(line, "limit exceeded") ||
		    (!(strstr(line, "`uid_max_unit_memory`") && strstr(line, "uid 65534") &&
		       strstr(line, "its limit is 16 MiB")) &&
		     !strstr(line, "uid_max_partial")))
			fail_msg("a unit of 60,000 entries was refused with: %s", line);
		if (i == 0)
			victim_served_within(2000);
	}
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (!strstr(line, "planning a unit of 8000 entries") ||
	    !strstr(line, "`uid_max_unit_memory`"))
		fail_msg("a unit of 8,000 entries was refused with: %s", line);
	hostile_reap(&ch, pid);
	hwm1 = harness_hwm_kb(H.pid);
	fprintf(stderr, "daemon peak memory %ld KiB before, %ld KiB after\n", hwm0, hwm1);
	if (HOSTILE_RSS_MEANINGFUL && hwm1 > hwm0 + 56 * 1024)
		fail_msg("the daemon's peak memory grew from %ld KiB to %ld KiB", hwm0, hwm1);
	victim_served_within(2000);
	hostile_back_to_base(&H, &base);
}

/* The error a uid gets for checkpoint `ck` through describe ("describe"), a get ("get") or a
 * unit ("unit"): its code, and its message with `ck` written as "<NAME>". */
static int answer_for(weightd_client *c, const char *how, const char *ck, char *msg, size_t cap)
{
	static const char *const names[] = { "s0" };
	weightd_description *d = NULL;
	weightd_weight *w = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	char *at;
	int r;

	if (strcmp(how, "describe") == 0)
		r = weightd_describe(c, ck, &d, &err);
	else if (strcmp(how, "get") == 0)
		r = it_get(c, ck, "s0", &w, &err);
	else
		r = it_unit_of(c, ck, names, 1, false, &u, &err);
	if (r == 0)
		return 0;
	snprintf(msg, cap, "%s", err.message);
	while ((at = strstr(msg, ck))) {
		char rest[1024];

		snprintf(rest, sizeof(rest), "%s", at + strlen(ck));
		snprintf(at, cap - (size_t)(at - msg), "<NAME>%s", rest);
	}
	return err.code;
}

/*
 * `describe secret` answered "not allowed" while an unknown name answered "not served", so a uid
 * could confirm the names of checkpoints it may not read. Now describe, a get and a unit of a
 * checkpoint it may not read get the answer of a name that is not served, code and words alike
 * (but the name), and the answer still says what to do. Another uid is served throughout.
 */
static void names_it_may_not_read_are_not_confirmed(void **state)
{
	static const char *const hows[] = { "describe", "get", "unit" };
	struct hostile_base base;
	pid_t pid;

	(void)state;
	pid = hostile_attack(&H, NULL, &base);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_error err;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "prober", &c, &err) < 0)
			_exit(50);
		for (size_t i = 0; i < sizeof(hows) / sizeof(hows[0]); i++) {
			char secret[1024], unknown[1024];
			int a = answer_for(c, hows[i], "secret", secret, sizeof(secret));
			int b = answer_for(c, hows[i], "secreX", unknown, sizeof(unknown));

			if (a != WEIGHTD_E_UNKNOWN_SOURCE || b != a ||
			    strcmp(secret, unknown) != 0 || !strstr(secret, "uid 65534") ||
			    !strstr(secret, "may read") || !strstr(secret, "weightctl list")) {
				fprintf(stderr, "%s: secret %d \"%s\", unknown %d \"%s\"\n",
					hows[i], a, secret, b, unknown);
				_exit(51 + (int)i);
			}
		}
		weightd_close(c);
		_exit(0);
	}
	it_wait_child_ok(pid);
	victim_served_within(2000);
	hostile_back_to_base(&H, &base);
}

TEST_MAIN_WATCHDOG(600, NULL, NULL, TEST(empty_frames_are_bounded_in_count_and_time),
		   TEST(silent_connections_give_their_slots_back),
		   TEST(references_count_toward_the_weight_limit),
		   TEST(one_uid_holds_at_most_its_share_of_the_budget),
		   TEST(unit_memory_is_bounded_per_uid),
		   TEST(names_it_may_not_read_are_not_confirmed))
