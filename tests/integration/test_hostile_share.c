/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_share.c - one local uid pipelines requests that keep the daemon's main thread busy
 * (describe of a checkpoint of many tensors) over many connections: another uid is served
 * between them, not after all of them, and every one of the attacker's requests is answered. */
#include "fixture.h"
#include "hostile.h"
#include "st_writer.h"

#include <fcntl.h>
#include <poll.h>

/* "many": MANY_TENSORS U8[4] tensors, so a describe of it takes the daemon milliseconds. */
#define MANY_TENSORS 40000
#define CONNS 12         /* the attacker's connections */
#define PER_CONN 4       /* describes pipelined on each */
#define ERR_NONE 0

static void start_many(void)
{
	static struct stw_tensor ts[MANY_TENSORS];
	static char names[MANY_TENSORS][16];
	char path[512], sections[700];

	if (geteuid() != 0)
		skip(); /* other uids need root; the suite runs as root in CI */
	if (harness_init(&H) < 0)
		fail_msg("cannot prepare the test directory");
	for (int i = 0; i < MANY_TENSORS; i++) {
		snprintf(names[i], sizeof(names[i]), "t%05d", i);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = "U8", .ndim = 1,
					    .shape = { 4 } };
	}
	harness_path(&H, "many.safetensors", path, sizeof(path));
	assert_int_equal(stw_write(path, ts, MANY_TENSORS, NULL, 0, NULL), 0);
	chmod(path, 0644);
	snprintf(sections, sizeof(sections), "[checkpoint:many]\npath = %s\n", path);
	it_start(&H, NULL, sections);
}

/* Read one whole response frame (any size up to 64 MiB): its error code (0: none) and whether
 * it carries a describe reply. Exits the child on a broken stream. */
static uint64_t read_reply(int fd, bool *is_describe)
{
	uint8_t hdr[8], *buf;
	uint64_t code = 0;
	uint32_t len;
	struct slice m, e = { 0 }, body = { 0 };

	if (!read_exact(fd, hdr, 8, 60000))
		_exit(20);
	len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	      (uint32_t)hdr[3] << 24;
	if (len > (64u << 20) || !(buf = malloc(len ? len : 1)))
		_exit(21);
	if (!read_exact(fd, buf, len, 60000))
		_exit(22);
	m.p = buf;
	m.n = len;
	if (pb_find(m, 2, NULL, &e))
		pb_find(e, 1, &code, NULL);
	*is_describe = pb_find(m, 12, NULL, &body);
	free(buf);
	return code;
}

/* Pipeline PER_CONN describes of "many" on each of `conns` (one write each). */
static void flood(const int *conns)
{
	for (int c = 0; c < CONNS; c++)
		for (int k = 0; k < PER_CONN; k++) {
			struct pb d = { .n = 0 };

			pb_str(&d, 1, "many");
			send_frame(conns[c], 100 + (uint64_t)k, 12, &d);
		}
}

/* Every describe answered, each a describe reply (none lost, none refused). */
static void read_all(const int *conns, int skip_first_of_conn0)
{
	for (int c = 0; c < CONNS; c++)
		for (int k = (c == 0 ? skip_first_of_conn0 : 0); k < PER_CONN; k++) {
			bool ok = false;

			if (read_reply(conns[c], &ok) != ERR_NONE || !ok)
				_exit(23);
		}
}

static void open_conns(int *conns)
{
	for (int c = 0; c < CONNS; c++) {
		struct resp r;

		conns[c] = it_raw_connect(&H);
		if (conns[c] < 0)
			_exit(10);
		send_hello(conns[c], 1, 3);
		read_resp(conns[c], &r);
		if (r.code != 0)
			_exit(11);
	}
}

static weightd_status *status_now(weightd_client *c)
{
	weightd_status *st = NULL;
	weightd_error err;

	if (weightd_status_summary(c, &st, &err) < 0) {
		fprintf(stderr, "status: %s\n", err.message);
		_exit(30);
	}
	return st;
}

/*
 * The attacker (CONNS connections, PER_CONN describes pipelined on each) and a victim of
 * another uid that asks for a status once the attacker's first reply is out. The daemon's request
 * counter, read by the victim before and with that status, says how many of the attacker's
 * requests were served first: without the per-uid share, the turn of every attacker connection
 * already readable (about CONNS describes); with it, the one being served and perhaps one more
 * after its wait. All of the attacker's requests are answered, and the daemon counts the waits.
 * `idle`: the victim has sent nothing for longer than counts as active (FAIR_ACTIVE_NS in
 * server.c) when the flood starts, so nothing holds the attacker back when its request arrives:
 * it is still read and served before the attacker's next describe.
 */
static void victim_against_flood(bool idle)
{
	struct hostile_chan atk, vic;
	char line[256];
	pid_t pa, pv;
	unsigned long long before = 0, between = 0, deferred = 0;

	start_many();
	chan_open(&atk);
	chan_open(&vic);
	pa = fork();
	assert_true(pa >= 0);
	if (pa == 0) {
		int conns[CONNS];
		bool ok = false;

		chan_child(&atk);
		hostile_become(UID_ATTACKER);
		open_conns(conns);
		chan_say(atk.to_parent[1], "connected\n");
		if (!chan_hear(atk.to_child[0], line, sizeof(line)))
			_exit(12);
		flood(conns);
		if (read_reply(conns[0], &ok) != ERR_NONE || !ok)
			_exit(13);
		chan_say(atk.to_parent[1], "first\n");
		read_all(conns, 1);
		chan_say(atk.to_parent[1], "all\n");
		_exit(0);
	}
	pv = fork();
	assert_true(pv >= 0);
	if (pv == 0) {
		weightd_client *c = NULL;
		weightd_status *st;
		weightd_error err;
		uint64_t r0;

		chan_child(&vic);
		hostile_become(UID_VICTIM);
		if (weightd_connect(H.sock, "victim", &c, &err) < 0)
			_exit(31);
		if (!chan_hear(vic.to_child[0], line, sizeof(line)))
			_exit(32);
		st = status_now(c);
		r0 = st->requests;
		weightd_status_free(st);
		chan_say(vic.to_parent[1], "ready\n");
		if (!chan_hear(vic.to_child[0], line, sizeof(line)))
			_exit(33);
		st = status_now(c);
		/* the attacker's requests served between the two (not this one) */
		chan_say(vic.to_parent[1], "%llu %llu\n", (unsigned long long)r0,
			 (unsigned long long)(st->requests - r0 - 1));
		weightd_status_free(st);
		weightd_close(c);
		_exit(0);
	}
	chan_parent(&atk);
	chan_parent(&vic);
	assert_true(chan_hear(atk.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "connected");
	chan_say(vic.to_child[1], "start\n");
	assert_true(chan_hear(vic.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "ready");
	if (idle)
		usleep(400 * 1000);
	chan_say(atk.to_child[1], "go\n");
	assert_true(chan_hear(atk.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "first");
	chan_say(vic.to_child[1], "go\n");
	assert_true(chan_hear(vic.to_parent[0], line, sizeof(line)));
	assert_int_equal(sscanf(line, "%llu %llu", &before, &between), 2);
	assert_true(chan_hear(atk.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "all");
	it_wait_child_ok(pa);
	it_wait_child_ok(pv);
	print_message("%s victim served after %llu of the attacker's %d requests\n",
		      idle ? "an idle" : "a busy", between, CONNS * PER_CONN);
	/* An idle victim's request also waits for its way from the attacker's first reply to the
	 * daemon (through the test's processes): nothing holds the attacker back meanwhile, nobody
	 * else is waiting. So the bound for it is one round of the attacker's connections, not
	 * half; without the share it was served after 37 to 48 of them. */
	if (between >= (idle ? CONNS : CONNS / 2))
		fail_msg("the victim waited for %llu of the attacker's requests (of %d, over %d "
			 "connections)", between, CONNS * PER_CONN, CONNS);
	{
		weightd_client *c = it_connect(&H);
		weightd_status *st = it_status(c);

		deferred = st->requests_deferred;
		assert_true(st->requests >= before + CONNS * PER_CONN);
		weightd_status_free(st);
		weightd_close(c);
	}
	if (!idle)
		assert_true(deferred > 0);
	harness_stop(&H);
}

static void expensive_requests_wait_for_other_uids(void **state)
{
	(void)state;
	victim_against_flood(false);
}

static void an_idle_client_is_served_between_them(void **state)
{
	(void)state;
	victim_against_flood(true);
}

/* A uid alone is never held back, however expensive its requests: nobody else is waiting. */
static void a_uid_alone_is_not_held_back(void **state)
{
	struct hostile_chan atk;
	char line[64];
	weightd_client *c;
	weightd_status *st;
	pid_t pa;

	(void)state;
	start_many();
	usleep(300 * 1000); /* the harness's own requests at start are no longer recent */
	chan_open(&atk);
	pa = fork();
	assert_true(pa >= 0);
	if (pa == 0) {
		int conns[CONNS];

		chan_child(&atk);
		hostile_become(UID_ATTACKER);
		open_conns(conns);
		flood(conns);
		read_all(conns, 0);
		chan_say(atk.to_parent[1], "all\n");
		_exit(0);
	}
	chan_parent(&atk);
	assert_true(chan_hear(atk.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "all");
	it_wait_child_ok(pa);
	c = it_connect(&H);
	st = it_status(c);
	assert_int_equal(st->requests_deferred, 0);
	weightd_status_free(st);
	weightd_close(c);
	harness_stop(&H);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(expensive_requests_wait_for_other_uids),
		cmocka_unit_test(an_idle_client_is_served_between_them),
		cmocka_unit_test(a_uid_alone_is_not_held_back),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
