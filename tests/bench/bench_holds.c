/* SPDX-License-Identifier: Apache-2.0 */
/* bench_holds.c - what the kernel-tracked holds cost (src/holdlock.h): a warm single get, a warm
 * unit of 1,000 weights and a warm unit of all 91,991 weights of the DeepSeek-V3-shaped
 * checkpoint, with the locks and without them, side by side in one run. */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_holds [--runs R] [--gets G] [--reps K]
 *
 * Defaults: 5 runs; per run and side, 2,000 single gets, 20 units of 1,000 and 3 units of all
 * 91,991. Two private weightds serve the same checkpoint (written to a temp dir), one with
 * hold_locks = yes (the default: each reply's fd a description of the client's own, locked over
 * its weights; the client locks what it binds and unlocks what it lets go), one with
 * hold_locks = no and a client with WEIGHTD_HOLD_LOCKS=0 (weightd's own descriptor lent, no
 * lock anywhere): the reference. Each side is measured by a fresh client process, the sides
 * alternating in order run by run, after one warm-up pass each. Measured:
 *
 *   single    materialize + finish + map + release of one small tensor (cycling through 64): the
 *             process holds nothing else, so each get maps its segment anew and each release
 *             lets it go (and with locks weightd opens and closes the process's description of
 *             it): the worst case
 *   held      the same while the process holds a unit of those 64 tensors: an engine fetching
 *             more while it runs, the segment mapped throughout
 *   unit1k    a unit of 1,000 tensors: submit + validate + bind, then free
 *   unit      a unit of all 91,991 tensors: submit + validate + bind, then free
 *
 * Printed: per run the median of each, then the medians over runs, with the reference's own
 * time and rate beside the ratio (with locks / without).
 */
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "bench.h"
#include "deepseek.h"
#include "harness.h"
#include "weightd/client.h"

#define MAX_RUNS 32
#define MAX_REPS 4096

static struct ds_ckpt CK;

/* A unit of tensors [0, n) of the checkpoint, submitted, validated and bound, then freed. */
static int unit_round(weightd_client *c, size_t n, double *ret_s)
{
	weightd_unit *u = NULL;
	weightd_error err;
	double t0;
	int r = ds_unit_declare(c, &CK, n, "ds", &u, &err);

	t0 = bench_now();
	if (r >= 0)
		r = bench_unit_bind(u, &err);
	weightd_unit_free(u);
	*ret_s = bench_now() - t0;
	if (r < 0)
		fprintf(stderr, "bench_holds: a unit of %zu: %s\n", n, err.message);
	return r;
}

/*
 * The measuring process: one client on `sock`, warm, writes single, held, unit1k and unit (the
 * median seconds of each over its repetitions) as four raw doubles on stdout.
 */
static int measure(const char *sock, int gets, int reps)
{
	static double s[MAX_REPS], hs[MAX_REPS], k[MAX_REPS], a[MAX_REPS];
	weightd_client *c = NULL;
	weightd_unit *keep = NULL;
	weightd_error err;
	int big = reps < 3 ? reps : 3;

	if (weightd_connect(sock, "bench_holds", &c, &err) < 0) {
		fprintf(stderr, "bench_holds: %s\n", err.message);
		return 1;
	}
	for (int i = 0; i < gets; i++) {
		double t0 = bench_now();

		if (bench_get(c, "ds", CK.t[(size_t)i % 64].name) < 0)
			return 1;
		s[i % MAX_REPS] = bench_now() - t0;
	}
	/* the 64 held as a unit meanwhile */
	if (ds_unit_declare(c, &CK, 64, "ds", &keep, &err) < 0 || bench_unit_bind(keep, &err) < 0)
		return 1;
	for (int i = 0; i < gets; i++) {
		double t0 = bench_now();

		if (bench_get(c, "ds", CK.t[(size_t)i % 64].name) < 0)
			return 1;
		hs[i % MAX_REPS] = bench_now() - t0;
	}
	weightd_unit_free(keep);
	for (int i = 0; i < reps; i++)
		if (unit_round(c, 1000, &k[i]) < 0)
			return 1;
	for (int i = 0; i < big; i++)
		if (unit_round(c, DS_TENSORS, &a[i]) < 0)
			return 1;
	{
		double out[4] = { bench_median(s, gets < MAX_REPS ? gets : MAX_REPS),
				  bench_median(hs, gets < MAX_REPS ? gets : MAX_REPS),
				  bench_median(k, reps), bench_median(a, big) };

		/* the four figures, raw, to the parent (run_side) */
		if (write(STDOUT_FILENO, out, sizeof(out)) != (ssize_t)sizeof(out))
			return 1;
	}
	weightd_close(c);
	return 0;
}

/* What the measuring process is run with (run_side hands it to side_child). */
static struct {
	const char *self, *sock;
	bool locks;
	char gets[16], reps[16];
} side;

/* In the forked child: this program again as the measuring process, its stdout the pipe. */
static void side_child(int arg, int fd)
{
	(void)arg;
	if (dup2(fd, STDOUT_FILENO) < 0)
		_exit(126);
	if (!side.locks)
		setenv("WEIGHTD_HOLD_LOCKS", "0", 1);
	execl(side.self, side.self, "--measure", side.sock, side.gets, side.reps, (char *)NULL);
	_exit(127);
}

/* Run this program as the measuring process against `sock`, locks or not: its four figures. */
static int run_side(const char *self, const char *sock, bool locks, int gets, int reps,
		    double out[4])
{
	side.self = self;
	side.sock = sock;
	side.locks = locks;
	snprintf(side.gets, sizeof(side.gets), "%d", gets);
	snprintf(side.reps, sizeof(side.reps), "%d", reps);
	return bench_child_result(side_child, 0, out, 4 * sizeof(double));
}

static int start(struct harness *h, const char *dir, bool locks)
{
	char sec[600];

	snprintf(sec, sizeof(sec), "[checkpoint:ds]\npath = %s\n", dir);
	if (harness_init(h) < 0 ||
	    harness_write_config(h, locks ? "log_level = warning\nbudget = 8G"
					  : "log_level = warning\nbudget = 8G\nhold_locks = no",
				 sec) < 0)
		return -1;
	return harness_start_opts(h, &(struct harness_opts){ .file_log_level = true });
}

int main(int argc, char **argv)
{
	static double on[4][MAX_RUNS], off[4][MAX_RUNS];
	static const char *const what[4] = { "warm single get", "... segment held",
					     "warm unit of 1,000", "warm unit of 91,991" };
	static const double per[4] = { 1, 1, 1000, DS_TENSORS };
	struct harness h_on, h_off, h_ck;
	char dir[400];
	int runs = 5, gets = 2000, reps = 20, rc = 1;
	double la[3] = { 0, 0, 0 }, warm[4];

	if (argc == 5 && strcmp(argv[1], "--measure") == 0) {
		if (ds_table(&ds_tiny, &CK) < 0)
			return 1;
		return measure(argv[2], atoi(argv[3]), atoi(argv[4]));
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0 &&
		    atoi(argv[i + 1]) <= MAX_RUNS)
			runs = atoi(argv[++i]);
		else if (strcmp(argv[i], "--gets") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			gets = atoi(argv[++i]);
		else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0 &&
			 atoi(argv[i + 1]) <= MAX_REPS)
			reps = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bench_holds [--runs R<=%d] [--gets G] [--reps K<=%d]\n",
				MAX_RUNS, MAX_REPS);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
	memset(&h_on, 0, sizeof(h_on));
	memset(&h_off, 0, sizeof(h_off));
	memset(&h_ck, 0, sizeof(h_ck));
	/* the checkpoint lives in a directory of its own, which both daemons read */
	if (ds_table(&ds_tiny, &CK) < 0 || harness_init(&h_ck) < 0)
		goto out;
	harness_path(&h_ck, "ds", dir, sizeof(dir));
	printf("writing the DeepSeek-V3-shaped checkpoint (%d tensors, %d shards) ...\n",
	       DS_TENSORS, DS_SHARDS);
	fflush(stdout);
	if (mkdir(dir, 0755) < 0 || ds_write(&CK, dir) < 0) {
		fprintf(stderr, "bench_holds: cannot write the checkpoint in %s\n", dir);
		goto out;
	}
	if (start(&h_on, dir, true) < 0 || start(&h_off, dir, false) < 0)
		goto out;
	/* warm both: every weight made once on each side */
	if (run_side(argv[0], h_on.sock, true, 64, 1, warm) < 0 ||
	    run_side(argv[0], h_off.sock, false, 64, 1, warm) < 0)
		goto out;
	printf("%d runs; per side and run %d single gets, %d units of 1,000, %d of %d\n\n", runs,
	       gets, reps, reps < 3 ? reps : 3, DS_TENSORS);
	printf("%4s  %-7s  %12s  %12s  %12s  %12s\n", "run", "locks", "single (us)", "held (us)",
	       "1,000 (ms)", "91,991 (ms)");
	for (int r = 0; r < runs; r++) {
		double a[4], b[4];
		bool on_first = r % 2 == 0;

		if (run_side(argv[0], on_first ? h_on.sock : h_off.sock, on_first, gets, reps,
			     on_first ? a : b) < 0 ||
		    run_side(argv[0], on_first ? h_off.sock : h_on.sock, !on_first, gets, reps,
			     on_first ? b : a) < 0) {
			fprintf(stderr, "bench_holds: a measuring run failed\n");
			goto out;
		}
		for (int i = 0; i < 4; i++) {
			on[i][r] = a[i];
			off[i][r] = b[i];
		}
		printf("%4d  %-7s  %12.2f  %12.2f  %12.3f  %12.1f\n", r + 1, "with", a[0] * 1e6,
		       a[1] * 1e6, a[2] * 1e3, a[3] * 1e3);
		printf("%4s  %-7s  %12.2f  %12.2f  %12.3f  %12.1f\n", "", "without", b[0] * 1e6,
		       b[1] * 1e6, b[2] * 1e3, b[3] * 1e3);
		fflush(stdout);
	}
	if (getloadavg(la, 3) < 0)
		la[0] = -1;
	printf("\nmedians of %d runs (with locks / without: the cost of the holds; goal <= 1.10):\n",
	       runs);
	for (int i = 0; i < 4; i++) {
		double m_on = bench_median(on[i], runs), m_off = bench_median(off[i], runs);

		printf("  %-20s  with %10.3f ms  without %10.3f ms (%.0f weights/s)  -> %.3fx\n",
		       what[i], m_on * 1e3, m_off * 1e3, per[i] / m_off, m_on / m_off);
	}
	printf("load average %.2f (the machine may be shared)\n", la[0]);
	rc = 0;
out:
	/* only what was made: a harness never initialised has no directory to remove */
	if (h_on.dir[0])
		harness_cleanup(&h_on);
	if (h_off.dir[0])
		harness_cleanup(&h_off);
	if (h_ck.dir[0])
		harness_cleanup(&h_ck);
	ds_free(&CK);
	return rc;
}
