/* SPDX-License-Identifier: Apache-2.0 */
/* test_faults.c - faults weightd must survive: a checkpoint changed while it is read, /dev/shm or
 * the budget too small, a client killed mid-request, a client that stops reading, running out
 * of file descriptors, and a thousand clients at once. Each test runs its own weightd and ends
 * with the leak check (segments, fds and references). */
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include "bytes.h"
#include "fixture.h"

#define BIG_BYTES (256ull * MiB)
#define BIG_TENSOR "big.0.weight"

/* big.safetensors: one 256 MiB tensor (wd-mkfixture big), plus s.safetensors: a small one. */
static void big_and_small(char *big, size_t cap, const char *extra_daemon)
{
	char small[512], sec[2048];

	harness_path(&H, "big.safetensors", big, cap);
	harness_path(&H, "s.safetensors", small, sizeof(small));
	it_fixture("big %s 256M --tensor-bytes 256M", big);
	it_fixture("safetensors %s --seed 5 --tensor t:U8:65536", small);
	snprintf(sec, sizeof(sec), "[checkpoint:big]\npath = %s\n\n[checkpoint:s]\npath = %s\n", big,
		 small);
	it_start(&H, extra_daemon, sec);
}

/* Poll (every 2 ms) until a materialization is running; false after 10 s. */
static bool wait_in_flight(weightd_client *c)
{
	int64_t end = it_now_ms() + 10000;

	while (it_now_ms() < end) {
		weightd_status *st = it_status(c);
		bool running = st->materializations_in_flight > 0;

		weightd_status_free(st);
		if (running)
			return true;
		usleep(2000);
	}
	return false;
}

static void still_serving(weightd_client *c)
{
	weightd_weight *w = it_get_ok(c, "s", "t");

	assert_int_equal(it_pattern_mismatch(it_map(w), 65536, 5), -1);
	weightd_release(w);
}

enum change { TRUNCATE, OVERWRITE, REPLACE };

/* Change the checkpoint file under a running read, as each kind of writer would. */
/* What a change needs made beforehand, so that the change itself is one quick call while the
 * read runs (writing the replacement file meanwhile let a fast read finish first). */
static void prepare_change(const char *path, enum change how)
{
	char tmp[600];

	if (how != REPLACE)
		return;
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	it_fixture("safetensors %s --tensor other:U8:16", tmp);
}

static void change_file(const char *path, enum change how)
{
	char tmp[600];
	int fd;

	switch (how) {
	case TRUNCATE:
		assert_int_equal(truncate(path, (off_t)(BIG_BYTES / 2)), 0);
		break;
	case OVERWRITE:
		/* same size, new bytes in place (and so a new mtime) */
		fd = open(path, O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, "overwritten", 11, (off_t)(BIG_BYTES - 4096)), 11);
		close(fd);
		break;
	case REPLACE:
		/* a new file (prepare_change) renamed over the path: the old inode is still read
		 * to its end */
		snprintf(tmp, sizeof(tmp), "%s.new", path);
		assert_int_equal(rename(tmp, path), 0);
		break;
	}
}

/*
 * A checkpoint truncated, overwritten in place or replaced while its tensor is being read: that
 * request fails with source-changed naming the file; nothing is served, no segment is left, the
 * reservation is returned, nobody gets SIGBUS, and the daemon keeps serving.
 */
static void checkpoint_changed_during_materialization(void **state)
{
	const enum change kinds[] = { TRUNCATE, OVERWRITE, REPLACE };
	const char *names[] = { "truncated", "overwritten", "replaced" };
	char big[512];
	weightd_client *c, *watch;
	weightd_status *st;
	int base;

	big_and_small(big, sizeof(big), NULL);
	base = it_fd_base(&H);
	c = it_connect(&H);
	watch = it_connect(&H);
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		int caught = 0;

		for (int attempt = 0; attempt < 3 && !caught; attempt++) {
			weightd_inflight *f = NULL;
			weightd_weight *w = NULL;
			weightd_error err;
			uint64_t failed_before;
			int r;

			if (k > 0 || attempt > 0) {
				/* a fresh checkpoint, admitted as a new generation */
				char tmp[600];
				snprintf(tmp, sizeof(tmp), "%s.fresh", big);
				it_fixture("big %s 256M --tensor-bytes 256M", tmp);
				assert_int_equal(rename(tmp, big), 0);
				if (weightd_reload(watch, &err) < 0)
					fail_msg("reload: %s", err.message);
			}
			st = it_status(watch);
			failed_before = st->materializations_failed;
			weightd_status_free(st);
			prepare_change(big, kinds[k]);
			assert_int_equal(weightd_materialize(c, "big", BIG_TENSOR, NULL, &f, &err), 0);
			assert_true(wait_in_flight(watch));
			change_file(big, kinds[k]);
			r = weightd_finish(f, &w, &err);
			if (r == 0) {
				/* the read won the race: not what this round tests; try again */
				print_message("%s: the read finished first; again\n", names[k]);
				weightd_release(w);
				continue;
			}
			caught = 1;
			assert_int_equal(r, -WEIGHTD_E_SOURCE_CHANGED);
			assert_non_null(strstr(err.message, big));
			st = it_wait_quiet(&H, 0, 2, 10000);
			assert_int_equal(st->materializations_failed, failed_before + 1);
			assert_int_equal(st->materializations_in_flight, 0);
			assert_null(it_weight(st, "big", BIG_TENSOR));
			{
				uint64_t held = 0;
				for (size_t i = 0; i < st->n_weights; i++)
					held += st->weight_list[i].nbytes;
				assert_int_equal(st->bytes_resident, held); /* reservation returned */
			}
			assert_int_equal(harness_segments(&H), (int)st->segments);
			weightd_status_free(st);
			still_serving(c);
		}
		if (!caught)
			fail_msg("%s: every read finished before the file could be changed", names[k]);
	}
	/* the daemon itself never faulted */
	assert_int_equal(kill(H.pid, 0), 0);
	weightd_close(watch);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* --- shared memory too small ----------------------------------------------------------------- */

/*
 * A daemon whose /dev/shm is a private 32 MiB tmpfs that something else has mostly filled: the
 * reservation fails cleanly (resource exhausted, naming bytes needed and free), nothing is left
 * behind, and once there is room the same request works.
 */
static void full_dev_shm_is_a_clean_error(void **state)
{
	struct harness_opts o = { .shm_size = "32m" };
	char path[512], sec[1024], filler[256];
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	int base, fd, r;

	harness_path(&H, "m.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 3 --tensor t16:U8:16777216 --tensor s:U8:65536", path);
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	assert_int_equal(harness_write_config(&H, "budget = 1G", sec), 0);
	r = harness_start_opts(&H, &o);
	if (r == HARNESS_UNSUPPORTED)
		skip();
	assert_int_equal(r, 0);
	/* the budget is capped to what this /dev/shm holds */
	assert_true(harness_log_contains(&H, "more than /dev/shm holds"));
	base = it_fd_base(&H);

	/* someone else's 20 MiB in the same /dev/shm */
	snprintf(filler, sizeof(filler), "%s/someone-else", H.shm_dir);
	fd = open(filler, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(posix_fallocate(fd, 0, 20 * MiB), 0);
	close(fd);
	assert_true(harness_shm_free(&H) < 16 * MiB);

	c = it_connect(&H);
	assert_int_equal(it_get(c, "m", "t16", &w, &err), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(err.message, "needs 16 MiB of shared memory"));
	assert_non_null(strstr(err.message, "/dev/shm has only"));
	assert_int_equal(err.expected, 16777216);
	assert_true(err.actual < 16 * (int64_t)MiB);
	/* nothing half-made: no segment, no reservation, and the rest is served */
	assert_int_equal(harness_segments(&H), 0);
	w = it_get_ok(c, "m", "s");
	assert_int_equal(it_pattern_mismatch(it_map(w), 65536, 4), -1);
	weightd_release(w);

	/* room again: the same request works */
	assert_int_equal(unlink(filler), 0);
	w = it_get_ok(c, "m", "t16");
	assert_int_equal(it_pattern_mismatch(it_map(w), 16 * MiB, 3), -1);
	weightd_release(w);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/*
 * A tensor larger than the machine's /dev/shm (a sparse checkpoint, so it costs no disk): the
 * request fails cleanly at reservation, and nothing in /dev/shm is touched.
 */
static void request_larger_than_dev_shm(void **state)
{
	char path[512], sec[1024], header[256];
	struct statvfs sv;
	uint64_t shm_total, n;
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	size_t hlen;
	uint8_t len8[8];
	int fd, base;

	assert_int_equal(statvfs("/dev/shm", &sv), 0);
	shm_total = (uint64_t)sv.f_blocks * sv.f_frsize;
	n = (shm_total / MiB + 1024) * MiB; /* 1 GiB more than /dev/shm holds */
	/* safetensors by hand: u64 LE header length, JSON header padded with spaces, data */
	hlen = (size_t)snprintf(header, sizeof(header),
				"{\"huge\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
				(unsigned long long)n, (unsigned long long)n);
	while (hlen % 8)
		header[hlen++] = ' ';
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
	harness_path(&H, "huge.safetensors", path, sizeof(path));
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, len8, 8), 8);
	assert_int_equal(write(fd, header, hlen), (ssize_t)hlen);
	assert_int_equal(ftruncate(fd, (off_t)(8 + hlen + n)), 0);
	close(fd);
	snprintf(sec, sizeof(sec), "[checkpoint:huge]\npath = %s\n", path);
	it_start(&H, "budget = 1P", sec);
	base = it_fd_base(&H);

	c = it_connect(&H);
	assert_int_equal(it_get(c, "huge", "huge", &w, &err), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_int_equal(err.expected, (int64_t)n);
	assert_true(err.actual <= (int64_t)shm_total);
	{
		char size[WD_BYTES_TEXT], num[WD_BYTES_TEXT + 8];

		snprintf(num, sizeof(num), "needs %s", wd_bytes_text(size, n));
		assert_non_null(strstr(err.message, num));
	}
	assert_int_equal(harness_segments(&H), 0);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* --- a client killed mid-request ------------------------------------------------------------- */

/* A child that connects and asks for the big tensor, to be killed while it waits. */
static pid_t doomed_getter(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *k = NULL;
		weightd_weight *kw = NULL;
		weightd_error err;

		if (weightd_connect(H.sock, "doomed", &k, &err) < 0)
			_exit(1);
		it_get(k, "big", BIG_TENSOR, &kw, &err);
		_exit(2); /* not reached in time */
	}
	return pid;
}

/*
 * Two clients ask for the same big tensor; the first is killed while the job runs. The job
 * finishes for the second, which gets correct bytes; the dead client's reference never
 * existed, and a third asking afterwards reads nothing.
 */
static void client_killed_while_its_materialization_runs(void **state)
{
	char big[512];
	weightd_client *c, *b;
	weightd_inflight *fb = NULL;
	weightd_weight *w = NULL;
	weightd_status *st;
	weightd_error err;
	int base, status;
	pid_t pid;

	big_and_small(big, sizeof(big), NULL);
	base = it_fd_base(&H);
	c = it_connect(&H);

	/* alone: killed mid-job, the job finishes and the weight is kept, unreferenced */
	pid = doomed_getter();
	assert_true(wait_in_flight(c));
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	st = it_wait_quiet(&H, 0, 1, 30000);
	assert_int_equal(st->materializations_in_flight, 0);
	assert_int_equal(st->references, 0);
	assert_int_equal(st->clients, 2); /* c and the one asking: the killed client is gone */
	assert_int_equal(st->materializations + st->materializations_failed, 1);
	weightd_status_free(st);
	assert_int_equal(harness_segments(&H), 1);

	/* it was made once: asking again reads nothing */
	w = it_get_ok(c, "big", BIG_TENSOR);
	st = it_status(c);
	assert_int_equal(st->bytes_read, BIG_BYTES);
	weightd_status_free(st);
	weightd_release(w);
	{
		uint64_t n = 0, bytes = 0;
		assert_int_equal(weightd_evict(c, &n, &bytes, &err), 0);
		assert_int_equal(n, 1);
	}

	/* joined: one of two waiters dies; the other still gets the weight */
	pid = doomed_getter();
	assert_true(wait_in_flight(c));
	b = it_connect(&H);
	assert_int_equal(weightd_materialize(b, "big", BIG_TENSOR, NULL, &fb, &err), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	if (weightd_finish(fb, &w, &err) < 0)
		fail_msg("the surviving waiter: %s", err.message);
	{
		/* wd-mkfixture big: tensor 0 has the bytes pattern with seed 0 */
		const uint8_t *p = it_map(w);
		assert_int_equal(it_pattern_mismatch(p, BIG_BYTES, 0), -1);
	}
	st = it_status(c);
	assert_int_equal(st->references, 1);
	assert_int_equal(st->bytes_read, 2 * BIG_BYTES);
	weightd_status_free(st);
	weightd_release(w);
	weightd_close(b);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* --- a client that stops reading ------------------------------------------------------------- */

/*
 * A client that sends status requests as fast as it can and never reads a reply: its reply queue
 * is capped (client_max_queue), it is disconnected, and a well-behaved client is served all
 * along. The daemon's memory does not grow with the flood.
 */
static void client_that_stops_reading_is_disconnected(void **state)
{
	char path[512], sec[1024];
	uint8_t frame[64];
	size_t flen;
	long rss0, rss1;
	uint64_t sent = 0;
	int raw, base, e = 0, to_child[2], from_child[2];
	pid_t good;
	struct pollfd p;
	char x;

	harness_path(&H, "m.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 5 --tensor t:U8:65536", path);
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	it_start(&H, "max_frame = 64K\nclient_max_queue = 64K", sec);
	base = it_fd_base(&H);
	rss0 = harness_rss_kb(H.pid);

	/* a well-behaved client in another process, asking over and over until told to stop; it
	 * reports each round on a pipe */
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(from_child), 0);
	good = fork();
	assert_true(good >= 0);
	if (good == 0) {
		weightd_client *c = NULL;
		weightd_error err;
		char stop;

		close(to_child[1]);
		close(from_child[0]);
		fcntl(to_child[0], F_SETFL, O_NONBLOCK);
		if (weightd_connect(H.sock, "good", &c, &err) < 0)
			_exit(1);
		while (read(to_child[0], &stop, 1) != 1) {
			weightd_weight *w = NULL;
			weightd_status *st = NULL;
			int64_t t0 = it_now_ms();
			if (weightd_status_get(c, &st, &err) < 0 || it_get(c, "m", "t", &w, &err) < 0)
				_exit(2);
			if (it_pattern_mismatch(it_map(w), 65536, 5) >= 0)
				_exit(3);
			weightd_status_free(st);
			weightd_release(w);
			if (it_now_ms() - t0 > 5000)
				_exit(4); /* starved by the flood */
			if (write(from_child[1], "r", 1) != 1)
				_exit(5);
		}
		weightd_close(c);
		_exit(0);
	}
	close(to_child[0]);
	close(from_child[1]);
	assert_int_equal(read(from_child[0], &x, 1), 1); /* served before the flood */

	raw = it_raw_connect(&H);
	assert_true(raw >= 0);
	fcntl(raw, F_SETFL, O_NONBLOCK);
	flen = it_status_frame(frame, 7);
	/* flood until the daemon hangs up on us (or a generous bound) */
	while (sent < 2000000) {
		ssize_t n = send(raw, frame, flen, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN) {
			p.fd = raw;
			p.events = POLLOUT;
			p.revents = 0;
			poll(&p, 1, 100);
			continue;
		}
		if (n < 0) {
			e = errno;
			break;
		}
		assert_int_equal(n, (ssize_t)flen);
		sent++;
	}
	assert_true(e == EPIPE || e == ECONNRESET);
	assert_true(harness_log_contains(&H, "is not reading its replies"));
	rss1 = harness_rss_kb(H.pid);
	print_message("flood: %llu requests sent before the disconnect; daemon RSS %ld -> %ld KiB\n",
		      (unsigned long long)sent, rss0, rss1);
	assert_true(rss1 - rss0 < 16 * 1024);
	close(raw);

	/* the well-behaved client is still served, round after round */
	for (int i = 0; i < 3; i++) {
		p.fd = from_child[0];
		p.events = POLLIN;
		assert_int_equal(poll(&p, 1, 10000), 1);
		assert_int_equal(read(from_child[0], &x, 1), 1);
	}
	assert_int_equal(write(to_child[1], "q", 1), 1);
	close(to_child[1]);
	it_wait_child_ok(good);
	close(from_child[0]);
	it_leak_check(&H, base, 0);
}

/* --- out of file descriptors ----------------------------------------------------------------- */

#define NOFILE 48

/*
 * A daemon with RLIMIT_NOFILE 48 and more connections than that: accept backs off instead of
 * spinning, requests that need a descriptor fail cleanly, and once connections close the waiting
 * client is accepted and served.
 */
static void accept_backs_off_when_out_of_fds(void **state)
{
	char path[512], sec[1024];
	int raw[80], n_raw = 0, base, r, to[2], from[2];
	struct pollfd p = { -1, 0, 0 };
	weightd_status *st;
	weightd_client *pre;
	char x;
	weightd_weight *w = NULL;
	weightd_error err;
	long t0, t1;
	pid_t late;

	harness_path(&H, "m.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 5 --tensor t:U8:65536 --tensor u:U8:65536", path);
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	assert_int_equal(harness_write_config(&H, NULL, sec), 0);
	r = harness_start_with_nofile(&H, NOFILE);
	if (r == HARNESS_UNSUPPORTED)
		skip();
	assert_int_equal(r, 0);
	base = it_fd_base(&H);
	pre = it_connect(&H);

	/* more connections than descriptors: the daemon takes what it can, the rest wait */
	for (n_raw = 0; n_raw < 80; n_raw++) {
		raw[n_raw] = it_raw_connect(&H);
		assert_true(raw[n_raw] >= 0);
	}
	for (int i = 0; i < 500 && !harness_log_contains(&H, "pausing new connections"); i++)
		usleep(10000);
	assert_true(harness_log_contains(&H, "pausing new connections"));
	/* every slot below the limit is taken (fds inherited above it may come on top) */
	assert_true(harness_settled_fds(&H) >= NOFILE);

	/* backing off, not spinning: well under a tenth of a CPU over a second */
	t0 = harness_cpu_ticks(H.pid);
	sleep(1);
	t1 = harness_cpu_ticks(H.pid);
	print_message("daemon CPU while out of descriptors: %ld ticks in 1 s\n", t1 - t0);
	assert_true(t1 - t0 < sysconf(_SC_CLK_TCK) / 10);

	/* a connected client asking for a new weight gets a clean error, not a hang */
	assert_int_equal(it_get(pre, "m", "t", &w, &err), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(err.message, "Too many open files"));

	/* a client arriving now waits in the backlog ... */
	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	late = fork();
	assert_true(late >= 0);
	if (late == 0) {
		weightd_client *c = NULL;
		weightd_weight *lw = NULL;
		char go;
		close(to[1]);
		close(from[0]);
		for (int i = 0; i < n_raw; i++)
			close(raw[i]); /* the parent's connections: only the parent may hold them */
		if (weightd_connect(H.sock, "late", &c, &err) < 0)
			_exit(1);
		if (write(from[1], "c", 1) != 1 || read(to[0], &go, 1) != 1)
			_exit(2);
		if (it_get(c, "m", "u", &lw, &err) < 0)
			_exit(3);
		if (it_pattern_mismatch(it_map(lw), 65536, 6) >= 0)
			_exit(4);
		weightd_release(lw);
		weightd_close(c);
		_exit(0);
	}
	close(to[0]);
	close(from[1]);
	p.fd = from[0];
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, 300), 0); /* not answered while the daemon has no fd */
	/* ... and is accepted once descriptors come back, then served */
	for (int i = 0; i < n_raw; i++)
		close(raw[i]);
	assert_int_equal(poll(&p, 1, 10000), 1);
	assert_int_equal(read(from[0], &x, 1), 1);
	assert_true(harness_log_contains(&H, "accepting connections again"));
	/* the closed connections still in the backlog are accepted and dropped too */
	st = it_wait_quiet(&H, 0, 2, 10000);
	assert_int_equal(st->clients, 3); /* pre, late and the one asking */
	weightd_status_free(st);
	assert_int_equal(write(to[1], "g", 1), 1);
	close(to[1]);
	close(from[0]);
	it_wait_child_ok(late);
	w = it_get_ok(pre, "m", "t");
	assert_int_equal(it_pattern_mismatch(it_map(w), 65536, 5), -1);
	weightd_release(w);
	weightd_close(pre);
	it_leak_check(&H, base, 0);
}

/* --- a thousand clients ---------------------------------------------------------------------- */

#define PROCS 4
#define PER_PROC 250

/* One of the client processes: PER_PROC connections, each binding t, all open at once. */
static void crowd_child(int in, int out)
{
	static weightd_client *cs[PER_PROC];
	static weightd_inflight *fs[PER_PROC];
	static weightd_weight *ws[PER_PROC];
	struct rlimit rl;
	weightd_error err;
	int ok = 0;
	char x;

	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	for (int i = 0; i < PER_PROC; i++)
		if (weightd_connect(H.sock, "crowd", &cs[i], &err) < 0)
			_exit(1);
	if (write(out, "c", 1) != 1 || read(in, &x, 1) != 1)
		_exit(2);
	for (int i = 0; i < PER_PROC; i++)
		if (weightd_materialize(cs[i], "m", "t", NULL, &fs[i], &err) < 0)
			_exit(3);
	for (int i = 0; i < PER_PROC; i++) {
		if (weightd_finish(fs[i], &ws[i], &err) < 0)
			continue;
		ok += it_pattern_mismatch(it_map(ws[i]), 65536, 5) < 0;
	}
	if (write(out, &(uint8_t){ (uint8_t)(ok == PER_PROC) }, 1) != 1 || read(in, &x, 1) != 1)
		_exit(4);
	for (int i = 0; i < PER_PROC; i++) {
		weightd_release(ws[i]);
		weightd_close(cs[i]);
	}
	_exit(0);
}

static void a_thousand_concurrent_clients(void **state)
{
	char path[512], sec[1024];
	int to[PROCS][2], from[PROCS][2], base;
	pid_t pids[PROCS];
	long rss0, rss_connected, rss_served, hwm;
	weightd_status *st;
	weightd_client *c;
	char x;

	harness_path(&H, "m.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 5 --tensor t:U8:65536", path);
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	it_start(&H, NULL, sec);
	base = it_fd_base(&H);
	rss0 = harness_rss_kb(H.pid);

	for (int p = 0; p < PROCS; p++) {
		assert_int_equal(pipe(to[p]), 0);
		assert_int_equal(pipe(from[p]), 0);
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			close(to[p][1]);
			close(from[p][0]);
			crowd_child(to[p][0], from[p][1]);
		}
		close(to[p][0]);
		close(from[p][1]);
	}
	for (int p = 0; p < PROCS; p++)
		assert_int_equal(read(from[p][0], &x, 1), 1);
	c = it_connect(&H);
	st = it_status(c);
	assert_int_equal(st->clients, PROCS * PER_PROC + 1);
	weightd_status_free(st);
	rss_connected = harness_rss_kb(H.pid);

	/* all at once: every one of them is served */
	for (int p = 0; p < PROCS; p++)
		assert_int_equal(write(to[p][1], "g", 1), 1);
	for (int p = 0; p < PROCS; p++) {
		uint8_t all_ok = 0;
		assert_int_equal(read(from[p][0], &all_ok, 1), 1);
		assert_int_equal(all_ok, 1);
	}
	st = it_status(c);
	assert_int_equal(st->references, PROCS * PER_PROC);
	assert_int_equal(st->weights, 1);
	assert_int_equal(st->bytes_read, 65536); /* read once for a thousand clients */
	weightd_status_free(st);
	rss_served = harness_rss_kb(H.pid);
	hwm = harness_hwm_kb(H.pid);
	print_message("daemon RSS: %ld KiB idle, %ld KiB with %d clients, %ld KiB after serving "
		      "them (peak %ld KiB)\n", rss0, rss_connected, PROCS * PER_PROC, rss_served, hwm);
	/* bounded: well under 64 KiB per client */
	assert_true(hwm - rss0 < 64 * 1024);

	for (int p = 0; p < PROCS; p++) {
		assert_int_equal(write(to[p][1], "q", 1), 1);
		close(to[p][1]);
		close(from[p][0]);
		it_wait_child_ok(pids[p]);
	}
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_IN_DIR(checkpoint_changed_during_materialization),
		TEST_IN_DIR(full_dev_shm_is_a_clean_error),
		TEST_IN_DIR(request_larger_than_dev_shm),
		TEST_IN_DIR(client_killed_while_its_materialization_runs),
		TEST_IN_DIR(client_that_stops_reading_is_disconnected),
		TEST_IN_DIR(accept_backs_off_when_out_of_fds),
		TEST_IN_DIR(a_thousand_concurrent_clients),
	};

	if (getenv("WD_TEST_FILTER")) /* e.g. WD_TEST_FILTER='preload*' runs only those */
		cmocka_set_test_filter(getenv("WD_TEST_FILTER"));
	alarm(290); /* watchdog: a hung daemon fails the test instead of stalling CI */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
