/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_limits.c - one local uid attacks weightd's resources: fds queued in replies it never
 * reads, every connection slot, idle connections, half-sent frames; and a client that half-closes
 * its socket. Each attack, scaled down by the limits in the test's config, must leave another uid
 * served throughout, tell the attacker why it was refused, and leave the daemon's fds, memory and
 * /dev/shm as they were. Needs root (the attacker and the victim are other uids). */
#include <fcntl.h>

#include "fixture.h"
#include "hostile.h"

/* A raw connection as the current uid that said hello; non-blocking when asked. */
static int attacker_conn(bool nonblock)
{
	int fd = hostile_conn(&H);

	if (nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

/* Send as many Share{handle} frames as the socket takes now, up to n. Returns how many went. */
static int send_shares(int fd, uint64_t first_id, uint64_t handle, int n)
{
	int sent = 0;

	for (; sent < n; sent++) {
		struct pb share = { .n = 0 };
		uint8_t f[64];
		size_t len;
		ssize_t k;

		pb_uint(&share, 1, handle);
		len = frame(f, first_id + (uint64_t)sent, 15, &share);
		k = send(fd, f, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (k != (ssize_t)len)
			_exit(12); /* a partial frame would desynchronise the rest */
	}
	return sent;
}

/*
 * Share requests whose replies are never read used to pin one dup'd fd each. Now a client
 * stops being read once its replies hold client_max_queue_fds, and all of a uid's connections
 * once they hold uid_max_queue_fds together: the daemon's fd table stays bounded, the requests
 * wait (none is lost: each gets its reply once the attacker reads), and other uids are served.
 */
#define QFDS_CLIENT 16
#define QFDS_UID 40
#define QCONNS 3
#define QSHARES 300

static void queued_fds_are_bounded_per_client_and_uid(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	char line[256], extra[256];
	weightd_status *st;
	int fds, want_max, replies = 0;
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra), "client_max_queue_fds = %d\nuid_max_queue_fds = %d\n",
		 QFDS_CLIENT, QFDS_UID);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		int conns[QCONNS], sent[QCONNS], got = 0;
		uint64_t handle[QCONNS];

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		for (int i = 0; i < QCONNS; i++) {
			conns[i] = attacker_conn(false);
			handle[i] = materialized_handle(conns[i], 2, "t0");
			fcntl(conns[i], F_SETFL, fcntl(conns[i], F_GETFL) | O_NONBLOCK);
			sent[i] = send_shares(conns[i], 100, handle[i], QSHARES);
		}
		chan_say(ch.to_parent[1], "sent %d %d %d\n", sent[0], sent[1], sent[2]);
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(13);
		/* now read: every share that went out is answered, with its fd */
		for (int i = 0; i < QCONNS; i++) {
			fcntl(conns[i], F_SETFL, fcntl(conns[i], F_GETFL) & ~O_NONBLOCK);
			for (int k = 0; k < sent[i]; k++) {
				struct resp r;

				read_resp(conns[i], &r);
				if (r.code != 0 || r.body != 15)
					_exit(14);
				got++;
			}
			close(conns[i]);
		}
		chan_say(ch.to_parent[1], "replies %d\n", got);
		_exit(0);
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	{
		int s0, s1, s2;

		assert_int_equal(sscanf(line, "sent %d %d %d", &s0, &s1, &s2), 3);
		/* the attack is real: far more requests than the limits let through */
		assert_true(s0 + s1 + s2 > 2 * QFDS_UID);
	}
	/* The daemon's fds settle at: base + cached weights + checkpoint files + the attacker's
	 * connections + at most QFDS_UID queued (each connection at most QFDS_CLIENT). */
	st = it_status_of(&H);
	want_max = base.fds + (int)st->weights + it_source_files(st) + QCONNS + QFDS_UID;
	weightd_status_free(st);
	fds = harness_settled_fds(&H);
	if (fds > want_max) {
		harness_dump_fds(H.pid);
		fail_msg("%d fds open during the attack, at most %d expected", fds, want_max);
	}
	/* Of the 900 shares it sent, the daemon took no more than the uid's limit lets through
	 * (each share taken is one more reference the attacker holds, besides its 3 units);
	 * counted again after a while, so a resumed session would show. */
	for (int64_t end = it_now_ms() + 10000;;) {
		st = it_status_of(&H);
		if (st->references >= QCONNS + QFDS_CLIENT || it_now_ms() > end)
			break;
		weightd_status_free(st);
		usleep(20000);
	}
	assert_true(st->references >= QCONNS + QFDS_CLIENT); /* it did serve some */
	weightd_status_free(st);
	usleep(300000);
	st = it_status_of(&H);
	if (st->references > QCONNS + QFDS_UID + QCONNS)
		fail_msg("%llu references: the daemon took more shares than its fd limits allow",
			 (unsigned long long)st->references);
	weightd_status_free(st);
	hostile_victim_served(&H);
	chan_say(ch.to_child[1], "read\n");
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	assert_true(sscanf(line, "replies %d", &replies) == 1 && replies > 2 * QFDS_UID);
	hostile_reap(&ch, pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * fds a client has read stop counting against its uid even when it then goes quiet: answers
 * that went out after the daemon last looked at the connection (cold materializations, answered
 * as their fills finish) are charged until the kernel is seen to have handed them over. Another
 * connection of the same uid must then be served at once, its hello and a request answered.
 */
#define SETTLE_FDS 8

static void read_fds_stop_counting_for_a_quiet_client(void **state)
{
	char extra[256];
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra), "client_max_queue_fds = %d\nuid_max_queue_fds = %d\n",
		 SETTLE_FDS, SETTLE_FDS);
	hostile_start(&H, extra);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static const char *const names[SETTLE_FDS] = { "t0", "t1", "t2", "t3",
							       "m0", "m1", "t0", "t1" };
		uint8_t buf[SETTLE_FDS * 256];
		size_t len = 0;
		struct resp r;
		int a, b;

		hostile_become(UID_ATTACKER);
		a = attacker_conn(false);
		/* in one write, so all are read before any fill finishes: every answer goes out
		 * from a finished fill, with one segment fd each */
		for (int i = 0; i < SETTLE_FDS; i++) {
			struct pb unit;

			unit_of(&unit, &names[i], 1);
			len += frame(buf + len, 10 + (uint64_t)i, 14, &unit);
		}
		send_all(a, buf, len);
		for (int i = 0; i < SETTLE_FDS; i++) {
			read_resp(a, &r);
			if (r.code != 0 || r.body != 14 || r.nfds != 1)
				_exit(20);
		}
		/* a stays open and silent; a hang below fails instead of blocking */
		alarm(2);
		b = attacker_conn(false);
		(void)materialized_handle(b, 2, "t2");
		alarm(0);
		close(b);
		close(a);
		_exit(0);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
}

/*
 * One uid filling max_clients used to lock everyone out. Now it gets max_clients_per_uid
 * connections and a clear refusal past that (raw and through libweightd); another uid still
 * connects, and root gets in past max_clients (its reserve) and its admin requests work.
 */
#define PER_UID 4
#define MAX_CLIENTS 6

static void connections_are_capped_per_uid(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	char line[1200], extra[256];
	weightd_client *root[MAX_CLIENTS];
	weightd_status *st;
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra), "max_clients_per_uid = %d\nmax_clients = %d\n", PER_UID,
		 MAX_CLIENTS);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		int conns[PER_UID], extra_fd;
		uint64_t code = 0;
		char msg[1024];
		weightd_client *c = NULL;
		weightd_error err;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		for (int i = 0; i < PER_UID; i++)
			conns[i] = attacker_conn(false);
		extra_fd = it_raw_connect(&H);
		if (extra_fd < 0 || hostile_closing_error(extra_fd, &code, msg, sizeof(msg), 5000) != 1 ||
		    !hostile_eof(extra_fd))
			_exit(20);
		chan_say(ch.to_parent[1], "raw %llu %s\n", (unsigned long long)code, msg);
		close(extra_fd);
		if (weightd_connect(H.sock, "one-too-many", &c, &err) == 0)
			_exit(21);
		chan_say(ch.to_parent[1], "lib %d %s\n", err.code, err.message);
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(22);
		for (int i = 0; i < PER_UID; i++)
			close(conns[i]);
		_exit(0);
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (strncmp(line, "raw 9 ", 6) != 0 || !strstr(line, "max_clients_per_uid") ||
	    !strstr(line, "uid 65534"))
		fail_msg("refusal of the raw connection: %s", line);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	if (strncmp(line, "lib ", 4) != 0 || !strstr(line, "max_clients_per_uid"))
		fail_msg("refusal through libweightd: %s", line);
	/* another uid is served while the attacker holds its share of the slots, once the daemon
	 * has seen its two refused connections close (until then they count as connected: a
	 * refused client may still be reading why) */
	for (int64_t end = it_now_ms() + 10000;;) {
		bool settled;

		st = it_status_of(&H); /* root's, the one asking included */
		settled = st->clients == PER_UID + 1;
		weightd_status_free(st);
		if (settled || it_now_ms() > end)
			break;
		usleep(20000);
	}
	hostile_victim_served(&H);
	/* root: past max_clients (4 attacker + 6 root > 6), and its admin requests go through */
	for (int i = 0; i < MAX_CLIENTS; i++)
		root[i] = it_connect(&H);
	{
		uint64_t nw = 0, nb = 0;
		weightd_error err;

		if (weightd_evict(root[MAX_CLIENTS - 1], &nw, &nb, &err) < 0)
			fail_msg("root's evict past max_clients: %s", err.message);
	}
	/* the refused connections are gone once the daemon has seen them close */
	for (int64_t end = it_now_ms() + 10000;;) {
		st = it_status(root[0]);
		if (st->clients == PER_UID + MAX_CLIENTS || it_now_ms() > end)
			break;
		weightd_status_free(st);
		usleep(20000);
	}
	assert_true(st->clients_refused >= 2);
	assert_int_equal(st->clients, PER_UID + MAX_CLIENTS);
	weightd_status_free(st);
	for (int i = 0; i < MAX_CLIENTS; i++)
		weightd_close(root[i]);
	chan_say(ch.to_child[1], "done\n");
	hostile_reap(&ch, pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * Idle connections (nothing held, nothing pending) are closed after idle_timeout with a reason;
 * a client that holds a weight is never idle, however long it stays quiet.
 */
static void idle_connections_time_out(void **state)
{
	struct hostile_base base;
	char extra[128];
	weightd_client *holder;
	weightd_weight *w;
	weightd_status *st;
	int conns[3];
	pid_t pid;
	struct hostile_chan ch;
	char line[1200];

	(void)state;
	hostile_start(&H, "idle_timeout = 1500ms\n");
	(void)extra;
	base = hostile_baseline(&H);
	holder = it_connect(&H);
	/* hello says how long: a client can plan for it */
	assert_true(weightd_server(holder)->idle_timeout_ms == 1500);
	assert_true(weightd_server(holder)->frame_timeout_ms == 30000);
	assert_int_equal(weightd_server(holder)->max_queue_fds, 1024);
	w = it_get_ok(holder, "tiny", "t1");
	pid = hostile_fork(&ch);
	if (pid == 0) {
		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		for (int i = 0; i < 3; i++)
			conns[i] = attacker_conn(false);
		for (int i = 0; i < 3; i++) {
			uint64_t code = 0;
			char msg[1024];

			if (hostile_closing_error(conns[i], &code, msg, sizeof(msg), 10000) != 1 ||
			    !hostile_eof(conns[i]))
				_exit(30);
			chan_say(ch.to_parent[1], "%llu %s\n", (unsigned long long)code, msg);
		}
		_exit(0);
	}
	chan_parent(&ch);
	for (int i = 0; i < 3; i++) {
		assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
		if (strncmp(line, "9 ", 2) != 0 || !strstr(line, "idle_timeout"))
			fail_msg("idle connection closed with: %s", line);
	}
	hostile_reap(&ch, pid);
	/* the holder sat quiet just as long and is still served, its weight intact */
	assert_int_equal(it_pattern_mismatch(it_map(w), TENSOR_BYTES, 1), -1);
	st = it_status(holder);
	assert_true(st->clients_timed_out >= 3);
	weightd_status_free(st);
	hostile_victim_served(&H);
	weightd_release(w);
	weightd_close(holder);
	hostile_back_to_base(&H, &base);
}

/*
 * 200 clients each holding a half-sent 4 MB frame used to grow the daemon by 820 MB. Now
 * bytes of frames being received are charged when a header announces them (before the buffer
 * grows) against uid_max_partial and max_partial: past them the client is refused, and one stuck
 * mid-frame is closed after frame_timeout. Scaled: 1 MiB frames, 8 MiB per uid, 64 attempts.
 */
#define PF_FRAME (1u << 20)
#define PF_UID_MAX (8u << 20)
#define PF_CONNS 64

/*
 * In a child: as `uid`, open n connections, each announcing a frame of PF_FRAME - 64 bytes and
 * sending all of it but 16 bytes (as far as the daemon takes it). Says "sent", waits for a line,
 * then reads how each connection was closed and says "R T M": refused for the uid's limit, timed
 * out, refused for the total. Exits 0, or nonzero if a connection ended without a clear error.
 */
static void half_frames_child(struct hostile_chan *ch, uid_t uid, int n)
{
	static uint8_t junk[PF_FRAME];
	int conns[PF_CONNS], r = 0, t = 0, m = 0;
	char line[64];

	chan_child(ch);
	hostile_become(uid);
	memset(junk, 0x55, sizeof(junk));
	for (int i = 0; i < n; i++) {
		uint32_t len = PF_FRAME - 64;
		uint8_t hdr[8] = { (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
				   (uint8_t)(len >> 24), 0, 0, 0, 0 };
		size_t off = 0;

		conns[i] = it_raw_connect(&H);
		if (conns[i] < 0 || send(conns[i], hdr, 8, MSG_NOSIGNAL) != 8)
			_exit(40);
		fcntl(conns[i], F_SETFL, fcntl(conns[i], F_GETFL) | O_NONBLOCK);
		for (int tries = 0; off < len - 16 && tries < 200; tries++) {
			ssize_t k = send(conns[i], junk, len - 16 - off, MSG_NOSIGNAL);

			if (k > 0)
				off += (size_t)k;
			else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
				break; /* refused and closed: nothing more goes */
			else
				usleep(2000);
		}
	}
	chan_say(ch->to_parent[1], "sent\n");
	if (!chan_hear(ch->to_child[0], line, sizeof(line)))
		_exit(41);
	for (int i = 0; i < n; i++) {
		uint64_t code = 0;
		char msg[1024];

		fcntl(conns[i], F_SETFL, fcntl(conns[i], F_GETFL) & ~O_NONBLOCK);
		if (hostile_closing_error(conns[i], &code, msg, sizeof(msg), 15000) != 1 ||
		    code != ERR_LIMIT_EXCEEDED)
			_exit(42);
		if (strstr(msg, "uid_max_partial"))
			r++;
		else if (strstr(msg, "frame_timeout"))
			t++;
		else if (strstr(msg, "max_partial"))
			m++;
		else
			_exit(43);
		close(conns[i]);
	}
	chan_say(ch->to_parent[1], "%d %d %d\n", r, t, m);
	_exit(0);
}

static void partial_frames_are_bounded_and_time_out(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	char line[256], extra[256];
	weightd_status *st;
	int refused = 0, timed_out = 0;
	long rss;
	pid_t pid;

	(void)state;
	snprintf(extra, sizeof(extra), "max_frame = %u\nuid_max_partial = %u\nframe_timeout = 3s\n"
		 "max_clients_per_uid = 100\n", PF_FRAME, PF_UID_MAX);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0)
		half_frames_child(&ch, UID_ATTACKER, PF_CONNS);
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	/* during the attack: what the daemon holds for it is within the uid's limit (looked at
	 * until the daemon has read the attacker's headers, on a busy machine that takes a while) */
	for (int64_t end = it_now_ms() + 10000;;) {
		st = it_status_of(&H);
		assert_true(st->partial_frame_bytes <= PF_UID_MAX);
		if (st->partial_frame_bytes >= 4 * (PF_FRAME - 64) || it_now_ms() > end)
			break;
		weightd_status_free(st);
		usleep(20000);
	}
	assert_true(st->partial_frame_bytes >= 4 * (PF_FRAME - 64)); /* the attack is real */
	weightd_status_free(st);
	rss = harness_rss_kb(H.pid);
	if (HOSTILE_RSS_MEANINGFUL &&
	    rss > base.rss_kb + (long)PF_UID_MAX / 1024 + HOSTILE_RSS_SLACK_KB)
		fail_msg("daemon RSS %ld KiB during the attack, %ld before (uid limit %u KiB)", rss,
			 base.rss_kb, PF_UID_MAX / 1024);
	hostile_victim_served(&H);
	chan_say(ch.to_child[1], "read\n");
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	assert_int_equal(sscanf(line, "%d %d %*d", &refused, &timed_out), 2);
	assert_int_equal(refused + timed_out, PF_CONNS);
	assert_true(refused > 0 && timed_out > 0);
	hostile_reap(&ch, pid);
	st = it_status_of(&H);
	assert_int_equal(st->partial_frame_bytes, 0);
	assert_true(st->clients_timed_out >= (uint64_t)timed_out);
	assert_true(st->clients_refused >= (uint64_t)refused);
	weightd_status_free(st);
	assert_true(harness_log_contains(&H, "uid_max_partial"));
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * The total (max_partial) is shared fairly: three uids sending large frames fill it, and past it
 * only a uid holding more than its share is refused ("max_partial"); another uid sending small
 * requests is served all along. Scaled: 1 MiB frames, 2 MiB per uid, 4 MiB in all.
 */
static void partial_total_is_shared_fairly(void **state)
{
	static const uid_t uids[] = { UID_ATTACKER, 2, 3 };
	struct hostile_chan ch[3];
	struct hostile_base base;
	char line[256], extra[256];
	weightd_status *st;
	int total_refusals = 0;
	pid_t pid[3];

	(void)state;
	snprintf(extra, sizeof(extra), "max_frame = %u\nuid_max_partial = 2M\nmax_partial = 4M\n"
		 "frame_timeout = 3s\n", PF_FRAME);
	hostile_start(&H, extra);
	base = hostile_baseline(&H);
	for (int k = 0; k < 3; k++) {
		chan_open(&ch[k]);
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] == 0)
			half_frames_child(&ch[k], uids[k], 3);
		chan_parent(&ch[k]);
		assert_true(chan_hear(ch[k].to_parent[0], line, sizeof(line)));
	}
	/* the total is passed by at most one fair share, and another uid is served */
	st = it_status_of(&H);
	assert_true(st->partial_frame_bytes <= (4u << 20) + (4u << 20) / 3);
	weightd_status_free(st);
	hostile_victim_served(&H);
	for (int k = 0; k < 3; k++) {
		int r = 0, t = 0, m = 0;

		chan_say(ch[k].to_child[1], "read\n");
		assert_true(chan_hear(ch[k].to_parent[0], line, sizeof(line)));
		assert_int_equal(sscanf(line, "%d %d %d", &r, &t, &m), 3);
		assert_int_equal(r + t + m, 3);
		total_refusals += m;
		it_wait_child_ok(pid[k]);
		close(ch[k].to_child[1]);
		close(ch[k].to_parent[0]);
	}
	assert_true(total_refusals >= 1);
	assert_true(harness_log_contains(&H, "more than max_partial"));
	st = it_status_of(&H);
	assert_int_equal(st->partial_frame_bytes, 0);
	weightd_status_free(st);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * Unit requests in flight are capped per uid as well as per connection: a uid pipelining more
 * than uid_max_pending materializations gets a clear refusal for the extra ones (the others are
 * served), and another uid is served.
 */
static void unit_requests_in_flight_are_capped_per_uid(void **state)
{
	struct hostile_base base;
	pid_t pid;

	(void)state;
	hostile_start(&H, "uid_max_pending = 2\nclient_max_pending = 8\n");
	base = hostile_baseline(&H); /* caches t2 only: t0, t1, t3 below are made, not hits */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static const char *const tensors[] = { "t0", "t1", "t3" };
		uint8_t all[3 * 256];
		size_t n = 0;
		int ok = 0, refused = 0, fd;

		hostile_become(UID_ATTACKER);
		fd = attacker_conn(false);
		/* three requests in one write: the daemon takes them in one go, before any is done */
		for (int i = 0; i < 3; i++) {
			struct pb unit;

			unit_of(&unit, &tensors[i], 1);
			n += frame(all + n, 10 + (uint64_t)i, 14, &unit);
		}
		send_all(fd, all, n);
		for (int i = 0; i < 3; i++) {
			struct resp r;

			read_resp(fd, &r);
			if (r.code == 0)
				ok++;
			else if (r.code == ERR_LIMIT_EXCEEDED && r.id == 12 &&
				 strstr(r.message, "uid_max_pending") && strstr(r.message, "uid 65534"))
				refused++;
		}
		_exit(ok == 2 && refused == 1 ? 0 : 70);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * A client that sends its requests and shuts down its sending side (SHUT_WR) still
 * gets every reply, fds included, and then the daemon closes the connection.
 */
static void half_closed_client_gets_its_replies(void **state)
{
	struct hostile_base base;
	pid_t pid;

	(void)state;
	pid = hostile_attack(&H, NULL, &base);
	if (pid == 0) {
		const char *tensor = "t3";
		struct pb unit, empty = { .n = 0 }, h = { .n = 0 };
		bool seen[4] = { false };
		int fd;

		hostile_become(UID_ATTACKER);
		fd = it_raw_connect(&H);
		if (fd < 0)
			_exit(50);
		pb_uint(&h, 1, WEIGHTD_PROTOCOL_VERSION);
		pb_str(&h, 2, "half-close");
		send_frame(fd, 1, 10, &h);
		unit_of(&unit, &tensor, 1);
		send_frame(fd, 2, 14, &unit);
		send_frame(fd, 3, 17, &empty);
		if (shutdown(fd, SHUT_WR) < 0)
			_exit(51);
		for (int i = 0; i < 3; i++) {
			struct resp r;

			read_resp(fd, &r);
			if (r.code != 0 || r.id < 1 || r.id > 3 || seen[r.id])
				_exit(52);
			seen[r.id] = true;
		}
		if (!hostile_eof(fd))
			_exit(53);
		_exit(0);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

TEST_MAIN_WATCHDOG(600, NULL, NULL, TEST(queued_fds_are_bounded_per_client_and_uid),
		   TEST(read_fds_stop_counting_for_a_quiet_client),
		   TEST(connections_are_capped_per_uid), TEST(idle_connections_time_out),
		   TEST(partial_frames_are_bounded_and_time_out),
		   TEST(partial_total_is_shared_fairly),
		   TEST(unit_requests_in_flight_are_capped_per_uid),
		   TEST(half_closed_client_gets_its_replies))
