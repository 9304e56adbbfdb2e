/* SPDX-License-Identifier: Apache-2.0 */
/* bench_share.c - a warm get's latency while another uid floods weightd with full status requests
 * of the 91,991 weights of the DeepSeek-V3-shaped checkpoint, beside the same gets with nobody
 * else and beside one such status served alone, in the same run. */

/*
 * Usage (from a build directory, as root: the flood runs as uid 65534):
 *
 *     tests/bench/bench_share [--conns C] [--pipeline K] [--gets G]
 *
 * Defaults: 8 connections, 4 requests pipelined on each, 1,000 gets per side. A private weightd
 * (tests/integration/harness.c) serves the checkpoint of tests/common/deepseek.h, all of it
 * materialized once as one unit (then freed: the weights stay cached, so a full status lists
 * 91,991 of them, about 14 MB).
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
 * turn had come, and a client held up that long stopped counting as active. Exit status 1 when
 * the target is missed or a run failed.
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

/* Send K statuses, read the K replies, over and over; one byte to `report` per reply read. */
static void flood(int k, int report)
{
	int fd;

	/* nice: 8 processes copying 14 MB replies on a machine of 2 cores would otherwise keep the
	 * victim's process off the CPU for tens of ms, which no daemon can help */
	if (nice(19) < 0 || setgroups(0, NULL) < 0 || setgid(FLOOD_UID) < 0 || setuid(FLOOD_UID) < 0)
		_exit(2);
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

int main(int argc, char **argv)
{
	double st[STATUS_RUNS], m0, p0, w0, m1, p1, w1, ms;
	int conns = 8, k = 4, g = 1000, rc = 1, pipefd[2] = { -1, -1 }, raw = -1, ready = 0;
	uint64_t d0, d1, weights = 0;
	unsigned long served = 0;
	weightd_client *c = NULL;
	weightd_error err;
	char dir[400], sec[600], ch;
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
		else {
			fprintf(stderr, "usage: bench_share [--conns C<=%d] [--pipeline K<=4] "
				"[--gets 100<=G<=%d]\n", MAX_CONNS, MAX_GETS);
			return 2;
		}
	}
	if (geteuid() != 0) {
		fprintf(stderr, "bench_share: needs root (the flood runs as uid %d)\n", FLOOD_UID);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
	if (ds_table(&ds_tiny, &CK) < 0 || harness_init(&H) < 0)
		goto out;
	harness_path(&H, "ds", dir, sizeof(dir));
	printf("writing the DeepSeek-V3-shaped checkpoint (%d tensors) ...\n", DS_TENSORS);
	fflush(stdout);
	if (mkdir(dir, 0755) < 0 || ds_write(&CK, dir) < 0) {
		fprintf(stderr, "bench_share: cannot write the checkpoint in %s\n", dir);
		goto out;
	}
	snprintf(sec, sizeof(sec), "[checkpoint:ds]\npath = %s\n", dir);
	if (harness_write_config(&H, "log_level = warning", sec) < 0 || harness_start_opts(&H, &QUIET) < 0)
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

	if (pipe(pipefd) < 0)
		goto out;
	for (; children < conns; children++) {
		if ((child[children] = fork()) < 0)
			goto out;
		if (child[children] == 0) {
			close(pipefd[0]);
			flood(k, pipefd[1]);
		}
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	while (ready < conns && read(pipefd[0], &ch, 1) == 1)
		ready += ch == 'R';
	if (ready < conns) {
		fprintf(stderr, "bench_share: the flood could not connect as uid %d\n", FLOOD_UID);
		goto out;
	}
	usleep(500 * 1000); /* the flood in full swing */
	fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
	while (read(pipefd[0], &ch, 1) == 1)
		;
	if (gets(c, g, &m1, &p1, &w1) < 0)
		goto out;
	while (read(pipefd[0], &ch, 1) == 1)
		served++;
	d1 = deferred_now(c, &weights);

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
	rc = w1 <= 3 * ms ? 0 : 1;
out:
	for (int i = 0; i < children; i++) {
		kill(child[i], SIGKILL);
		waitpid(child[i], NULL, 0);
	}
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
