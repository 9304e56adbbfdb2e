/* SPDX-License-Identifier: Apache-2.0 */
/* bench_share.c - a get's latency while another uid floods weightd: with full status requests of
 * the 91,991 weights of the DeepSeek-V3-shaped checkpoint, with messages of empty frames, and with
 * queued large fills, each beside the same gets with nobody else in the same run. */

/*
 * Usage (from a build directory, as root: the flood runs as uid 65534):
 *
 *     tests/bench/bench_share [--conns C] [--pipeline K] [--gets G] [--rounds R]
 *
 * Defaults: 8 connections, 4 requests pipelined on each, 1,000 gets per side, 5 rounds of queued
 * fills. A private weightd (tests/common/harness.c, 2 workers) serves the checkpoint of
 * tests/common/deepseek.h, all of it materialized once as one unit (then freed: the weights stay
 * cached, so a full status lists 91,991 of them, about 14 MB), "cold" (256 tensors of 64 KiB)
 * and "big" (16 tensors of 64 MiB).
 *
 *   status  a full status (with every weight) on a raw connection, alone: request to the last
 *           byte of the reply, 10 times. The daemon's cost of one expensive request.
 *   alone   G warm gets (materialize, finish, map, release of one weight), 1 ms apart.
 *   flood   the same G gets while C processes of another uid keep a connection each busy,
 *           sending K status requests at once and reading the K replies, over and over.
 *
 * Printed: the status's median, the gets' median, 99th percentile and worst on each side, how
 * many statuses the flood was served meanwhile and how often weightd held its uid back. A
 * request is never cut short, so a get may wait for the one being served, and that one runs
 * slower than alone while the flood's processes share the machine's CPUs (1.5-2x on 2 cores):
 * the target is a worst get of at most 3 statuses alone. With the per-uid share alone (before
 * server.c's gate and its serving of recently expensive uids after the others) the worst get
 * still waited 18-35 statuses here: each pass of the loop served every flood connection whose
 * turn had come, and a client held up that long stopped counting as active.
 *
 *   empty   the same G warm gets while C processes of another uid each send empty frames
 *           flagged "more frames follow" as fast as the daemon takes them, reconnecting when
 *           it closes them. Target: a p99 at most twice the p99 with nobody else.
 *   fills   cold gets of 64 KiB tensors, each read for the first time: 9 on the idle daemon,
 *           then in each of R rounds 3 while another uid has 16 cold fills of 64 MiB queued
 *           (all in flight before the first get; evicted after the round). One chunk's fill
 *           time is what one worker takes for 16 MiB at the rate the round's fills went.
 *           Target: a median at most twice the idle median plus one chunk's fill time.
 *
 * Exit status 1 when a target is missed or a run failed.
 */
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>

#include "bench.h"
#include "deepseek.h"
#include "itest.h"
#include "rawwire.h"

#define MAX_GETS 4096
#define MAX_CONNS 32
#define STATUS_RUNS 10
#define FLOOD_UID 65534
#define MAX_ROUNDS     20
#define COLD_N	       256
#define COLD_IDLE      9
#define COLD_PER_ROUND 3
#define BIG_N	       16
#define BIG_BYTES      (64ull << 20)
#define CHUNK_BYTES    (16ull << 20) /* a large fill's chunk (WD_DIGEST_CHUNK) */
#define WORKERS	       2

static struct harness H;
static const struct harness_opts QUIET = { .file_log_level = true };
static struct ds_ckpt CK;

/* Read one whole message (its frames up to the last; a status carries no fds), dropping the
 * bytes. False when the connection failed. */
static bool read_message(int fd)
{
	static uint8_t buf[1 << 20];
	uint8_t h[8];
	uint32_t len, word;

	do {
		if (!read_exact(fd, h, 8, 30000))
			return false;
		len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
		word = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
		if (word & 0x7fffffffu)
			return false;
		while (len) {
			uint32_t k = len < sizeof(buf) ? len : (uint32_t)sizeof(buf);

			if (!read_exact(fd, buf, k, 30000))
				return false;
			len -= k;
		}
	} while (word & 0x80000000u);
	return true;
}

/* A raw connection that has said hello; -1 on failure. */
static int raw_hello(void)
{
	int fd = it_raw_connect(&H);
	struct resp r;

	if (fd < 0)
		return -1;
	send_hello(fd, 1, 3);
	read_resp(fd, &r);
	return r.code == 0 ? fd : -1;
}

/* K full status requests (StatusRequest with no field set) in one write. */
static void send_statuses(int fd, int k)
{
	uint8_t f[4 * 16];
	size_t n = 0;

	for (int i = 0; i < k; i++)
		n += it_status_frame(f + n, (uint8_t)(2 + i));
	send_all(fd, f, n);
}

/* --- the flood: a process of another uid per connection -------------------------------------- */

/* The flood's uid and a low priority: 8 processes copying 14 MB replies on a machine of 2 cores
 * would otherwise keep the victim's process off the CPU for tens of ms, which no daemon can
 * help. */
static void become_flood_uid(void)
{
	if (nice(19) < 0 || setgroups(0, NULL) < 0 || setgid(FLOOD_UID) < 0 ||
	    setuid(FLOOD_UID) < 0)
		_exit(2);
}

/* Send K statuses, read the K replies, over and over; one byte to `report` per reply read. */
static void flood(int k, int report)
{
	int fd;

	become_flood_uid();
	if ((fd = raw_hello()) < 0)
		_exit(3);
	if (write(report, "R", 1) != 1)
		_exit(4);
	for (;;) {
		send_statuses(fd, k);
		for (int i = 0; i < k; i++)
			if (!read_message(fd) || write(report, "s", 1) != 1)
				_exit(5);
	}
}

/* Messages of empty frames flagged "more frames follow", never the last one, as fast as the
 * daemon takes them; reconnect when it closes the connection. One 'R' to `report` once
 * connected. */
static void flood_empty(int k, int report)
{
	static uint8_t batch[8 * 512];
	bool said = false;

	(void)k;
	become_flood_uid();
	for (size_t i = 0; i < sizeof(batch); i += 8)
		batch[i + 7] = 0x80;
	for (;;) {
		int fd = raw_hello();

		if (fd < 0) {
			usleep(10000);
			continue;
		}
		if (!said && write(report, "R", 1) != 1)
			_exit(4);
		said = true;
		while (send(fd, batch, sizeof(batch), MSG_NOSIGNAL) > 0)
			;
		close(fd);
	}
}

/* Ask for the 16 big tensors at once; 'Q' to `report` once all are sent, then the ms from the
 * first request to the last reply as a double; release and exit. */
static void queue_fills(int report)
{
	weightd_inflight *f[BIG_N];
	weightd_weight *w[BIG_N];
	weightd_client *c = NULL;
	weightd_error err;
	char name[16];
	double t0, ms;

	if (setgroups(0, NULL) < 0 || setgid(FLOOD_UID) < 0 || setuid(FLOOD_UID) < 0 ||
	    weightd_connect(H.sock, "fills", &c, &err) < 0)
		_exit(2);
	t0 = bench_now();
	for (int i = 0; i < BIG_N; i++) {
		snprintf(name, sizeof(name), "b%d", i);
		if (weightd_materialize(c, "big", name, NULL, &f[i], &err) < 0)
			_exit(3);
	}
	if (write(report, "Q", 1) != 1)
		_exit(4);
	for (int i = 0; i < BIG_N; i++)
		if (weightd_finish(f[i], &w[i], &err) < 0) {
			fprintf(stderr, "bench_share: fill b%d: %s\n", i, err.message);
			_exit(5);
		}
	ms = (bench_now() - t0) * 1e3;
	if (write(report, &ms, sizeof(ms)) != (ssize_t)sizeof(ms))
		_exit(6);
	for (int i = 0; i < BIG_N; i++)
		weightd_release(w[i]);
	weightd_close(c);
	_exit(0);
}

/* --- the victim ------------------------------------------------------------------------------ */

/* G gets 1 ms apart: median, 99th percentile and worst into m, p99, worst (ms). */
static int gets(weightd_client *c, int g, double *m, double *p99, double *worst)
{
	static double t[MAX_GETS];

	for (int i = 0; i < g; i++) {
		double t0 = bench_now();

		if (bench_get(c, "ds", CK.t[(size_t)i * 7919 % CK.n].name) < 0)
			return -1;
		t[i] = bench_now() - t0;
		usleep(1000);
	}
	*m = bench_median(t, g) * 1e3; /* sorts t */
	*p99 = t[g * 99 / 100] * 1e3;
	*worst = t[g - 1] * 1e3;
	return 0;
}

/* The whole checkpoint as one unit, materialized and freed: 91,991 cached weights. */
static int populate(weightd_client *c)
{
	weightd_unit *u = NULL;
	weightd_error err;
	int r = weightd_unit_new(c, &u, &err);

	for (size_t i = 0; r >= 0 && i < CK.n; i++) {
		r = weightd_unit_slot(u, CK.t[i].name, NULL, NULL, 0, NULL, &err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, CK.t[i].name, "ds", CK.t[i].name, NULL, &err);
	}
	if (r >= 0)
		r = weightd_unit_submit(u, &err);
	if (r >= 0)
		r = weightd_unit_validate(u, &err);
	if (r < 0)
		fprintf(stderr, "bench_share: materializing the checkpoint: %s\n", err.message);
	weightd_unit_free(u);
	return r;
}

/* A cold get of the next "cold" tensor: its time in ms, or -1. */
static double cold_get(weightd_client *c, int *next)
{
	char name[16];
	double t0 = bench_now();

	if (*next >= COLD_N)
		return -1;
	snprintf(name, sizeof(name), "c%d", (*next)++);
	if (bench_get(c, "cold", name) < 0)
		return -1;
	return (bench_now() - t0) * 1e3;
}

static uint64_t in_flight(weightd_client *c)
{
	weightd_status *st = NULL;
	weightd_error err;
	uint64_t n = 0;

	if (weightd_status_summary(c, &st, &err) == 0)
		n = st->materializations_in_flight;
	weightd_status_free(st);
	return n;
}

/*
 * The fills row: the idle median of COLD_IDLE cold gets into *idle; over `rounds` rounds the
 * median and worst of the cold gets made while another uid's 16 fills were queued, and the
 * median of one chunk's fill time by one worker. 0 or -1.
 */
static int fills_row(weightd_client *c, int rounds, double *idle, double *med, double *worst,
		     double *chunk)
{
	static double t[MAX_ROUNDS * COLD_PER_ROUND], ch[MAX_ROUNDS], ti[COLD_IDLE];
	int next = 0, n = 0;

	for (int i = 0; i < COLD_IDLE; i++)
		if ((ti[i] = cold_get(c, &next)) < 0)
			return -1;
	*idle = bench_median(ti, COLD_IDLE);
	for (int r = 0; r < rounds; r++) {
		int p[2], status = 0;
		double ms = 0;
		weightd_error err;
		pid_t pid;
		char q = 0;

		if (pipe(p) < 0 || (pid = fork()) < 0)
			return -1;
		if (pid == 0) {
			close(p[0]);
			queue_fills(p[1]);
		}
		close(p[1]);
		if (read(p[0], &q, 1) != 1 || q != 'Q') {
			close(p[0]);
			waitpid(pid, NULL, 0);
			fprintf(stderr, "bench_share: the fills could not be queued as uid %d\n",
				FLOOD_UID);
			return -1;
		}
		for (double end = bench_now() + 10; in_flight(c) < BIG_N && bench_now() < end;)
			usleep(1000);
		for (int i = 0; i < COLD_PER_ROUND; i++)
			if ((t[n++] = cold_get(c, &next)) < 0)
				return -1;
		if (read(p[0], &ms, sizeof(ms)) != (ssize_t)sizeof(ms))
			ms = 0;
		close(p[0]);
		waitpid(pid, &status, 0);
		if (ms <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return -1;
		ch[r] = ms * (double)CHUNK_BYTES / (double)(BIG_N * BIG_BYTES) * WORKERS;
		if (weightd_evict(c, NULL, NULL, &err) < 0) { /* the big ones cold again */
			fprintf(stderr, "bench_share: evict: %s\n", err.message);
			return -1;
		}
	}
	*med = bench_median(t, n); /* sorts t */
	*worst = t[n - 1];
	*chunk = bench_median(ch, rounds);
	return 0;
}

static uint64_t deferred_now(weightd_client *c, uint64_t *weights)
{
	weightd_status *st = NULL;
	weightd_error err;
	uint64_t d = 0;

	if (weightd_status_summary(c, &st, &err) == 0) {
		d = st->requests_deferred;
		*weights = st->weights;
	}
	weightd_status_free(st);
	return d;
}

/* `conns` children of the flood's uid, each running `body` (k, the write end of a pipe), in
 * child[*n]; the read end in *rfd once every child said 'R' (connected). -1, saying `what`
 * could not connect, when one cannot be made or does not. */
static int start_flood(pid_t *child, int *n, int conns, void (*body)(int k, int report), int k,
		       int *rfd, const char *what)
{
	int pipefd[2], ready = 0;
	char ch;

	if (pipe(pipefd) < 0)
		return -1;
	*rfd = pipefd[0];
	for (; *n < conns; ++*n) {
		if ((child[*n] = fork()) < 0) {
			close(pipefd[1]);
			return -1;
		}
		if (child[*n] == 0) {
			close(pipefd[0]);
			body(k, pipefd[1]);
		}
	}
	close(pipefd[1]);
	while (ready < conns && read(pipefd[0], &ch, 1) == 1)
		ready += ch == 'R';
	if (ready < conns) {
		fprintf(stderr, "bench_share: %s could not connect as uid %d\n", what, FLOOD_UID);
		return -1;
	}
	return 0;
}

/* Kill and reap the n children. */
static void stop_flood(pid_t *child, int *n)
{
	for (int i = 0; i < *n; i++) {
		kill(child[i], SIGKILL);
		waitpid(child[i], NULL, 0);
	}
	*n = 0;
}

int main(int argc, char **argv)
{
	double st[STATUS_RUNS], m0, p0, w0, m1, p1, w1, m2, p2, w2, ms;
	double idle = 0, fmed = 0, fworst = 0, chunk = 0;
	int conns = 8, k = 4, g = 1000, rounds = 5, rc = 1, pipefd[2] = { -1, -1 }, raw = -1;
	uint64_t d0, d1, weights = 0;
	unsigned long served = 0;
	weightd_client *c = NULL;
	weightd_error err;
	char dir[400], sec[1600], args[1200], cold[400], big[400], ch;
	size_t an;
	pid_t child[MAX_CONNS];
	int children = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0 &&
		    atoi(argv[i + 1]) <= MAX_CONNS)
			conns = atoi(argv[++i]);
		else if (strcmp(argv[i], "--pipeline") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0 &&
			 atoi(argv[i + 1]) <= 4)
			k = atoi(argv[++i]);
		else if (strcmp(argv[i], "--gets") == 0 && i + 1 < argc && atoi(argv[i + 1]) >= 100 &&
			 atoi(argv[i + 1]) <= MAX_GETS)
			g = atoi(argv[++i]);
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) >= 1 && atoi(argv[i + 1]) <= MAX_ROUNDS)
			rounds = atoi(argv[++i]);
		else {
			fprintf(stderr,
				"usage: bench_share [--conns C<=%d] [--pipeline K<=4] "
				"[--gets 100<=G<=%d] [--rounds 1<=R<=%d]\n",
				MAX_CONNS, MAX_GETS, MAX_ROUNDS);
			return 2;
		}
	}
	if (geteuid() != 0) {
		fprintf(stderr, "bench_share: needs root (the flood runs as uid %d)\n", FLOOD_UID);
		return 2;
	}
	bench_prepare();
	setenv("WD_MKFIXTURE", WD_BENCH_MKFIXTURE, 0);
	if (ds_table(&ds_tiny, &CK) < 0 || harness_init(&H) < 0)
		goto out;
	harness_path(&H, "ds", dir, sizeof(dir));
	printf("writing the DeepSeek-V3-shaped checkpoint (%d tensors) ...\n", DS_TENSORS);
	fflush(stdout);
	if (mkdir(dir, 0755) < 0 || ds_write(&CK, dir) < 0) {
		fprintf(stderr, "bench_share: cannot write the checkpoint in %s\n", dir);
		goto out;
	}
	harness_path(&H, "cold.safetensors", cold, sizeof(cold));
	harness_path(&H, "big.safetensors", big, sizeof(big));
	printf("writing %d tensors of 64 KiB and %d of %llu MiB ...\n", COLD_N, BIG_N,
	       BIG_BYTES >> 20);
	fflush(stdout);
	an = (size_t)snprintf(args, sizeof(args), "safetensors %s", big);
	for (int i = 0; i < BIG_N; i++)
		an += (size_t)snprintf(args + an, sizeof(args) - an, " --tensor b%d:U8:%llu", i,
				       BIG_BYTES);
	if (harness_mkfixture(args) < 0)
		goto out;
	{
		/* 256 tensors: too many for one argument list of fixed size, so in a loop */
		static char cargs[COLD_N * 24 + 512];

		an = (size_t)snprintf(cargs, sizeof(cargs), "safetensors %s", cold);
		for (int i = 0; i < COLD_N; i++)
			an += (size_t)snprintf(cargs + an, sizeof(cargs) - an,
					       " --tensor c%d:U8:65536", i);
		if (harness_mkfixture(cargs) < 0)
			goto out;
	}
	snprintf(sec, sizeof(sec),
		 "[checkpoint:ds]\npath = %s\n\n[checkpoint:cold]\npath = %s\n\n"
		 "[checkpoint:big]\npath = %s\n",
		 dir, cold, big);
	if (harness_write_config(&H, "log_level = warning\nworkers = 2\nbudget = 6G", sec) < 0 ||
	    harness_start_opts(&H, &QUIET) < 0)
		goto out;
	if (weightd_connect(H.sock, "bench_share", &c, &err) < 0) {
		fprintf(stderr, "bench_share: %s\n", err.message);
		goto out;
	}
	if (populate(c) < 0 || (raw = raw_hello()) < 0)
		goto out;
	for (int i = 0; i < STATUS_RUNS; i++) {
		double t0 = bench_now();

		send_statuses(raw, 1);
		if (!read_message(raw))
			goto out;
		st[i] = bench_now() - t0;
	}
	ms = bench_median(st, STATUS_RUNS) * 1e3;
	if (gets(c, g, &m0, &p0, &w0) < 0)
		goto out;
	d0 = deferred_now(c, &weights);

	if (start_flood(child, &children, conns, flood, k, &pipefd[0], "the flood") < 0)
		goto out;
	usleep(500 * 1000); /* the flood in full swing */
	fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
	while (read(pipefd[0], &ch, 1) == 1)
		;
	if (gets(c, g, &m1, &p1, &w1) < 0)
		goto out;
	while (read(pipefd[0], &ch, 1) == 1)
		served++;
	d1 = deferred_now(c, &weights);
	stop_flood(child, &children);
	close(pipefd[0]);
	pipefd[0] = -1;

	/* empty frames */
	if (start_flood(child, &children, conns, flood_empty, 0, &pipefd[0], "the empty frames") <
	    0)
		goto out;
	usleep(500 * 1000);
	if (gets(c, g, &m2, &p2, &w2) < 0)
		goto out;
	stop_flood(child, &children);

	if (fills_row(c, rounds, &idle, &fmed, &fworst, &chunk) < 0)
		goto out;

	printf("\n%llu weights cached; one full status of them, alone (median of %d): %.1f ms\n",
	       (unsigned long long)weights, STATUS_RUNS, ms);
	printf("%d warm gets, 1 ms apart (ms):              median      p99    worst\n", g);
	printf("  nobody else                               %7.3f  %7.3f  %7.1f\n", m0, p0, w0);
	printf("  uid %d floods: %d conns x %d statuses %7.3f  %7.3f  %7.1f\n", FLOOD_UID, conns, k, m1,
	       p1, w1);
	printf("  the flood was served %lu full statuses meanwhile; its uid was held back %llu times\n",
	       served, (unsigned long long)(d1 - d0));
	printf("  -> the worst get waited %.2f full statuses (target <= 3): %s\n", w1 / ms,
	       w1 <= 3 * ms ? "met" : "MISSED");
	printf("  uid %d sends empty frames: %d conns      %7.3f  %7.3f  %7.1f\n", FLOOD_UID, conns,
	       m2, p2, w2);
	printf("  -> p99 %.2fx the p99 with nobody else, %.3f ms (target <= 2x): %s\n", p2 / p0, p0,
	       p2 <= 2 * p0 ? "met" : "MISSED");
	printf("%d + %d cold gets of 64 KiB (ms):            median             worst\n", COLD_IDLE,
	       rounds * COLD_PER_ROUND);
	printf("  idle daemon                               %7.3f\n", idle);
	printf("  uid %d has %d x %llu MiB fills queued   %7.3f           %7.1f\n", FLOOD_UID,
	       BIG_N, BIG_BYTES >> 20, fmed, fworst);
	printf("  -> one chunk's fill time %.1f ms (a worker at %.2f GB/s); median %.2fx idle "
	       "(target <= 2x idle + 1 chunk, %.1f ms): %s\n",
	       chunk, (double)CHUNK_BYTES / (chunk * 1e-3) / 1e9, fmed / idle, 2 * idle + chunk,
	       fmed <= 2 * idle + chunk ? "met" : "MISSED");
	rc = w1 <= 3 * ms && p2 <= 2 * p0 && fmed <= 2 * idle + chunk ? 0 : 1;
out:
	stop_flood(child, &children);
	for (int i = 0; i < 2; i++)
		if (pipefd[i] >= 0)
			close(pipefd[i]);
	if (raw >= 0)
		close(raw);
	weightd_close(c);
	harness_cleanup(&H);
	ds_free(&CK);
	return rc;
}
