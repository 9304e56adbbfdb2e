/* SPDX-License-Identifier: Apache-2.0 */
/* bench_singles.c - the DeepSeek-V3-shaped checkpoint (91,991 tiny tensors in 163 shards,
 * tests/common/deepseek.h) fetched cold as single gets, one at a time and many in flight,
 * beside the same tensors fetched cold as one unit, in the same run: the cost per weight of
 * each. */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_singles [--tensors N] [--runs R] [--window W]
 *
 * Defaults: all 91,991 tensors, 3 runs, 200 requests in flight. A private weightd
 * (tests/common/harness.c, log_level warning) serves the checkpoint, written to a temp dir
 * (so in the page cache). Each run starts weightd anew with no segment and no state record
 * before each of:
 *
 *   unit     the reference: the N tensors as one unit, submit + validate (every weight mapped)
 *            + bind, declared beforehand.
 *   single   each tensor on its own: weightd_materialize, weightd_finish, weightd_weight_map,
 *            the next one sent when the last is mapped; every weight held to the end.
 *   window   the same with W requests in flight: W sent, then each finished and mapped.
 *
 * Printed: medians, each one's cost per weight and rate, the single gets' cost as a multiple of
 * the unit's (with the unit's own rate beside it), and the fds and mappings the client held for
 * the N single gets. Exit status 1 when a run failed.
 */
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>

#include "bench.h"
#include "deepseek.h"
#include "harness.h"
#include "itest.h"
#include "weightd/client.h"

#define MAX_RUNS 32

static struct harness H;
static const struct harness_opts QUIET = { .file_log_level = true };
static struct ds_ckpt CK;
static size_t N, WINDOW = 200;

/* Stop the daemon, remove every segment and state record it made, start it again. */
static int restart_cold(void)
{
	harness_stop(&H);
	harness_make_cold(&H);
	return harness_start_opts(&H, &QUIET);
}

/* The reference: the N tensors as one unit, cold. */
static int unit_cold(weightd_client *c, double *ret_s)
{
	weightd_error err;
	weightd_unit *u = NULL;
	double t0;
	int r = ds_unit_declare(c, &CK, N, "ds", &u, &err);

	t0 = bench_now();
	if (r >= 0)
		r = bench_unit_bind(u, &err);
	*ret_s = bench_now() - t0;
	if (r < 0)
		fprintf(stderr, "bench_singles: a unit of %zu tensors: %s\n", N, err.message);
	weightd_unit_free(u);
	return r;
}

/* The N tensors as single gets, `window` in flight; every weight held until all are mapped.
 * *ret_fds / *ret_maps: what the client holds for them then. */
static int singles_cold(weightd_client *c, size_t window, double *ret_s, int *ret_fds,
			int *ret_maps)
{
	weightd_weight **ws = calloc(N, sizeof(*ws));
	weightd_inflight **fl = calloc(window, sizeof(*fl));
	int fds0 = it_count_dir("/proc/self/fd"), maps0 = it_count_lines("/proc/self/maps"), r = 0;
	weightd_error err;
	size_t got = 0;
	double t0 = bench_now();

	for (size_t first = 0; ws && fl && r >= 0 && first < N; first += window) {
		size_t n = N - first < window ? N - first : window, sent = 0;

		for (; r >= 0 && sent < n; sent++)
			r = weightd_materialize(c, "ds", CK.t[first + sent].name, NULL, &fl[sent],
						&err);
		if (r < 0)
			sent--;
		for (size_t k = 0; k < sent; k++) {
			const void *p;
			int q = weightd_finish(fl[k], &ws[first + k], &err);

			if (q >= 0)
				q = weightd_weight_map(ws[first + k], &p, &err);
			if (q >= 0)
				got++;
			else if (r >= 0)
				r = q;
		}
	}
	*ret_s = bench_now() - t0;
	*ret_fds = it_count_dir("/proc/self/fd") - fds0;
	*ret_maps = it_count_lines("/proc/self/maps") - maps0;
	if (!ws || !fl)
		r = -1;
	if (r < 0)
		fprintf(stderr, "bench_singles: single gets (%zu in flight) after %zu: %s\n",
			window, got, ws && fl ? err.message : "out of memory");
	for (size_t i = 0; ws && i < N; i++)
		weightd_release(ws[i]);
	free(ws);
	free(fl);
	return r;
}

int main(int argc, char **argv)
{
	static double t_unit[MAX_RUNS], t_single[MAX_RUNS], t_window[MAX_RUNS];
	struct rlimit rl;
	weightd_client *c = NULL;
	weightd_error err;
	int runs = 3, rc = 1, fds = 0, maps = 0, wfds = 0, wmaps = 0;
	uint64_t bytes = 0;
	double m_unit, m_single, m_window, la[3] = { 0, 0, 0 };

	N = DS_TENSORS;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--tensors") == 0 && i + 1 < argc && atol(argv[i + 1]) > 0 &&
		    atol(argv[i + 1]) <= DS_TENSORS)
			N = (size_t)atol(argv[++i]);
		else if (bench_arg_runs(argc, argv, &i, MAX_RUNS, &runs))
			continue;
		else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= 256)
			WINDOW = (size_t)atoi(argv[++i]);
		else {
			fprintf(stderr,
				"usage: bench_singles [--tensors N<=%d] [--runs R<=%d] "
				"[--window W<=256]\n",
				DS_TENSORS, MAX_RUNS);
			return 2;
		}
	}
	bench_prepare();
	/* the client as engines run it: ulimit -n 1024 */
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
	setrlimit(RLIMIT_NOFILE, &rl);

	if (ds_serve(&H, &ds_tiny, &CK, &QUIET, "log_level = warning") < 0)
		goto out;
	for (size_t i = 0; i < N; i++)
		bytes += CK.t[i].nbytes;
	printf("%zu tensors, %llu bytes; weightd %s; %d runs; client ulimit -n %llu\n\n", N,
	       (unsigned long long)bytes, harness_weightd(), runs, (unsigned long long)rl.rlim_cur);
	printf("%4s  %10s  %12s  %12s\n", "run", "unit (s)", "single (s)", "window (s)");
	fflush(stdout);

	for (int r = 0; r < runs; r++) {
		if (restart_cold() < 0 || weightd_connect(H.sock, "bench_singles", &c, &err) < 0 ||
		    unit_cold(c, &t_unit[r]) < 0)
			goto out;
		weightd_close(c);
		c = NULL;
		if (restart_cold() < 0 || weightd_connect(H.sock, "bench_singles", &c, &err) < 0 ||
		    singles_cold(c, 1, &t_single[r], &fds, &maps) < 0)
			goto out;
		weightd_close(c);
		c = NULL;
		if (restart_cold() < 0 || weightd_connect(H.sock, "bench_singles", &c, &err) < 0 ||
		    singles_cold(c, WINDOW, &t_window[r], &wfds, &wmaps) < 0)
			goto out;
		weightd_close(c);
		c = NULL;
		printf("%4d  %10.4f  %12.4f  %12.4f\n", r + 1, t_unit[r], t_single[r], t_window[r]);
		fflush(stdout);
	}
	m_unit = bench_median(t_unit, runs);
	m_single = bench_median(t_single, runs);
	m_window = bench_median(t_window, runs);
	if (getloadavg(la, 3) < 0)
		la[0] = -1;

	printf("\ncold, %zu tensors (%llu bytes), medians of %d:\n", N, (unsigned long long)bytes,
	       runs);
	printf("  one unit (reference)                %9.4f s  = %7.3f us per weight (%.0f weights/s)\n",
	       m_unit, m_unit / (double)N * 1e6, (double)N / m_unit);
	printf("  single gets, one at a time          %9.4f s  = %7.3f us per weight (%.0f weights/s)"
	       "  -> %.2fx the unit's cost\n",
	       m_single, m_single / (double)N * 1e6, (double)N / m_single, m_single / m_unit);
	printf("  single gets, %3zu in flight          %9.4f s  = %7.3f us per weight (%.0f weights/s)"
	       "  -> %.2fx the unit's cost\n",
	       WINDOW, m_window, m_window / (double)N * 1e6, (double)N / m_window,
	       m_window / m_unit);
	printf("  held by the client for %zu single gets: %d fds, %d mappings (one at a time); "
	       "%d fds, %d mappings (%zu in flight)\n",
	       N, fds, maps, wfds, wmaps, WINDOW);
	printf("load average %.2f (the machine may be shared)\n", la[0]);
	rc = 0;
out:
	weightd_close(c);
	harness_cleanup(&H);
	ds_free(&CK);
	return rc;
}
