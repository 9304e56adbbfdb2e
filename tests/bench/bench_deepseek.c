/* SPDX-License-Identifier: Apache-2.0 */
/* bench_deepseek.c - the DeepSeek-V3-shaped checkpoint (91,991 tiny tensors in 163 shards,
 * tests/common/deepseek.h) as one unit: warm binding beside the raw fd-passing probe, and cold
 * materialization beside a plain copy of the same bytes into /dev/shm, in the same run. */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_deepseek [--tensors N] [--runs R] [--scale mid]
 *
 * Defaults: all 91,991 tensors, 5 runs, the tiny table (tests/common/deepseek.h, about 45 MB,
 * 480 bytes per tensor on average). --scale mid writes the same table with the hidden size, the
 * intermediates, the LoRA ranks and the vocabulary 4x as large (about 0.6 GB, 6.5 KB per tensor:
 * closer to the published model's average, still well under 1 GiB of /tmp and /dev/shm). --tensors N takes the first N of the table (in file
 * order), for a daemon that cannot take the whole model in one unit. A private weightd
 * (tests/common/harness.c) serves the checkpoint, written to a temp dir (so in the page
 * cache: both sides copy from memory). Each run:
 *
 *   copy   the reference: every tensor's bytes, shard by shard, pread into a 1 MiB buffer and
 *          pwritten into one new /dev/shm object (sized first), then unlinked.
 *   cold   weightd with no segment and no state record: submit + validate (every weight
 *          mapped) + bind of the N-slot unit, declared beforehand.
 *   warm   three times with everything cached: submit + validate + bind, then free (apart).
 *   probe  raw_probe.h with 1,000 fds, 10 round trips: the cost of passing and mapping an fd.
 *
 * Printed: medians, each side's rate, cold as a fraction of the copy's speed (target >= 0.8)
 * with the CPU time weightd used meanwhile (all its threads, from /proc) per weight, the warm
 * unit as a fraction of the copy's speed (the ceiling of the cold one: the same work with
 * nothing to make), and the warm unit's cost per weight beside the probe's cost per fd. Exit
 * status 1 when the cold target is missed or a run failed.
 */
#include <dirent.h>
#include <stdbool.h>
#include <sys/resource.h>

#include "bench.h"
#include "deepseek.h"
#include "harness.h"
#include "raw_probe.h"
#include "weightd/client.h"

#define MAX_RUNS 32
#define WARM_ITERS 3
#define PROBE_FDS 1000
#define PROBE_ITERS 10

static struct harness H;
/* the config's log_level (warning), not the harness's debug: a line per weight is not what
 * users run with */
static const struct harness_opts QUIET = { .file_log_level = true };
static struct ds_ckpt CK;
/* ds_tiny with hidden, intermediates, LoRA ranks and vocabulary 4x (divided by 32, not 128) */
static const struct ds_dims ds_mid = { 224, 64, 576, 48, 16, 4, 8, 4, 8, 4040, 16 };
static size_t N;

/* Declare the first N tensors as one unit (not timed). */
static int declare(weightd_client *c, weightd_unit **ret)
{
	weightd_error err;
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, &err);

	for (size_t i = 0; r >= 0 && i < N; i++) {
		const struct ds_tensor *t = &CK.t[i];
		r = weightd_unit_slot(u, t->name, ds_dtype(t->kind), t->shape, (size_t)t->ndim, NULL, &err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, t->name, "ds", t->name, NULL, &err);
	}
	if (r < 0) {
		fprintf(stderr, "bench_deepseek: declaring the unit: %s\n", err.message);
		weightd_unit_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

/* Submit + validate (+ bind); *ret_s the time, *ret_free the time free takes. */
static int bind_unit(weightd_client *c, double *ret_s, double *ret_free, uint64_t *ret_read)
{
	weightd_unit *u = NULL;
	weightd_error err;
	double t0, t1;
	int r = declare(c, &u);

	if (r < 0)
		return r;
	t0 = bench_now();
	r = bench_unit_bind(u, &err);
	*ret_s = bench_now() - t0;
	if (r < 0)
		fprintf(stderr, "bench_deepseek: a unit of %zu tensors: %s\n(a weightd that cannot take "
				"the whole model as one unit can be measured on part of it: --tensors 3000)\n",
			N, err.message);
	else
		*ret_read = weightd_unit_bytes_read(u);
	t1 = bench_now();
	weightd_unit_free(u);
	*ret_free = bench_now() - t1;
	return r;
}

/* The reference: the same bytes into one new /dev/shm object with pread + pwrite. */
static double copy_reference(const char *dir, uint64_t total)
{
	const size_t chunk = 1u << 20;
	char path[700], name[64], shm[96];
	uint8_t *buf = malloc(chunk);
	uint64_t out = 0;
	double t0 = bench_now(), t;
	int dst;

	snprintf(shm, sizeof(shm), "/%s.copy", H.prefix);
	dst = shm_open(shm, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (!buf || dst < 0 || ftruncate(dst, (off_t)total) < 0)
		goto fail;
	for (uint32_t s = 0; s < DS_SHARDS && CK.shard_first[s] < N; s++) {
		size_t a = CK.shard_first[s], b = CK.shard_first[s + 1] < N ? CK.shard_first[s + 1] : N;
		uint64_t at = CK.t[a].offset, end = CK.t[b - 1].offset + CK.t[b - 1].nbytes;
		int src;

		ds_shard_name(s, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		src = open(path, O_RDONLY | O_CLOEXEC);
		if (src < 0)
			goto fail;
		while (at < end) {
			size_t len = end - at < chunk ? (size_t)(end - at) : chunk;
			if (pread(src, buf, len, (off_t)at) != (ssize_t)len ||
			    pwrite(dst, buf, len, (off_t)out) != (ssize_t)len) {
				close(src);
				goto fail;
			}
			at += len;
			out += len;
		}
		close(src);
	}
	t = bench_now() - t0;
	close(dst);
	shm_unlink(shm);
	free(buf);
	return t;
fail:
	fprintf(stderr, "bench_deepseek: the reference copy failed: %s\n", strerror(errno));
	if (dst >= 0)
		close(dst);
	shm_unlink(shm);
	free(buf);
	return -1;
}

/* CPU seconds (user + system, every thread) the daemon has used so far; -1 if unknown. */
static double daemon_cpu(void)
{
	long ticks = harness_cpu_ticks(H.pid);

	return ticks < 0 ? -1 : (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

/* Stop the daemon, remove every segment and state record it made, start it again. */
static int restart_cold(void)
{
	harness_stop(&H);
	harness_make_cold(&H);
	return harness_start_opts(&H, &QUIET);
}

int main(int argc, char **argv)
{
	static double t_copy[MAX_RUNS], t_cold[MAX_RUNS], cpu_cold[MAX_RUNS], t_warm[MAX_RUNS * WARM_ITERS],
		t_free[MAX_RUNS * WARM_ITERS], t_probe[MAX_RUNS * PROBE_ITERS];
	struct probe p = { .sock = -1 };
	struct rlimit rl;
	weightd_client *c = NULL;
	weightd_error err;
	char dir[400];
	int runs = 5, nw = 0, np = 0, rc = 1;
	uint64_t bytes = 0, cold_read_min = UINT64_MAX, warm_read = 0;
	const struct ds_dims *dims = &ds_tiny;
	double m_copy, m_cold, m_cpu, m_warm, m_free, m_probe, la[3] = { 0, 0, 0 };

	N = DS_TENSORS;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--tensors") == 0 && i + 1 < argc && atol(argv[i + 1]) > 0 &&
		    atol(argv[i + 1]) <= DS_TENSORS)
			N = (size_t)atol(argv[++i]);
		else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc &&
			 (strcmp(argv[i + 1], "tiny") == 0 || strcmp(argv[i + 1], "mid") == 0))
			dims = strcmp(argv[++i], "mid") == 0 ? &ds_mid : &ds_tiny;
		else if (bench_arg_runs(argc, argv, &i, MAX_RUNS, &runs))
			continue;
		else {
			fprintf(stderr, "usage: bench_deepseek [--tensors N<=%d] [--runs R<=%d] "
				"[--scale tiny|mid]\n",
				DS_TENSORS, MAX_RUNS);
			return 2;
		}
	}
	bench_prepare();
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);

	if (ds_serve(&H, dims, &CK, &QUIET, "log_level = warning") < 0 ||
	    probe_start(&p, PROBE_FDS, 4096) < 0)
		goto out;
	harness_path(&H, "ds", dir, sizeof(dir));
	for (size_t i = 0; i < N; i++)
		bytes += CK.t[i].nbytes;
	printf("unit: %zu tensors, %llu bytes; weightd %s; %d runs\n\n", N, (unsigned long long)bytes,
	       harness_weightd(), runs);
	printf("%4s  %10s  %10s  %12s  %10s  %10s\n", "run", "copy (s)", "cold (s)", "cold read", "warm (s)",
	       "probe (ms)");
	fflush(stdout);

	for (int r = 0; r < runs; r++) {
		uint64_t rd = 0;
		double fr, cpu0;

		t_copy[r] = copy_reference(dir, bytes);
		if (t_copy[r] < 0 || restart_cold() < 0)
			goto out;
		if (weightd_connect(H.sock, "bench_deepseek", &c, &err) < 0) {
			fprintf(stderr, "bench_deepseek: %s\n", err.message);
			goto out;
		}
		cpu0 = daemon_cpu();
		if (bind_unit(c, &t_cold[r], &fr, &rd) < 0)
			goto out;
		cpu_cold[r] = daemon_cpu() - cpu0;
		if (rd < cold_read_min)
			cold_read_min = rd;
		for (int k = 0; k < WARM_ITERS; k++) {
			rd = 0;
			if (bind_unit(c, &t_warm[nw], &t_free[nw], &rd) < 0)
				goto out;
			warm_read += rd;
			nw++;
		}
		weightd_close(c);
		c = NULL;
		for (int k = 0; k < PROBE_ITERS; k++) {
			double t0 = bench_now();
			if (probe_round(&p) < 0) {
				fprintf(stderr, "bench_deepseek: the raw probe failed: %s\n", strerror(errno));
				goto out;
			}
			t_probe[np++] = bench_now() - t0;
		}
		printf("%4d  %10.4f  %10.4f  %12llu  %10.4f  %10.3f\n", r + 1, t_copy[r], t_cold[r],
		       (unsigned long long)cold_read_min, t_warm[nw - 1], t_probe[np - 1] * 1e3);
		fflush(stdout);
	}
	m_copy = bench_median(t_copy, runs);
	m_cold = bench_median(t_cold, runs);
	m_cpu = bench_median(cpu_cold, runs);
	m_warm = bench_median(t_warm, nw);
	m_free = bench_median(t_free, nw);
	m_probe = bench_median(t_probe, np);
	if (getloadavg(la, 3) < 0)
		la[0] = -1;

	printf("\ncold materialization of %zu tensors (%llu bytes), medians of %d:\n", N,
	       (unsigned long long)bytes, runs);
	printf("  plain copy into /dev/shm (pread + pwrite)   %9.4f s  (%.3f GB/s)\n", m_copy,
	       (double)bytes / m_copy / 1e9);
	printf("  weightd: submit + validate + bind, cold    %9.4f s  (%.3f GB/s, %.0f weights/s)\n",
	       m_cold, (double)bytes / m_cold / 1e9, (double)N / m_cold);
	printf("  weightd's CPU time (all threads) meanwhile %9.4f s  = %.3f us per weight\n", m_cpu,
	       m_cpu / (double)N * 1e6);
	printf("  -> %.3g of the copy's speed (target >= 0.8): %s; bytes read: %llu of %llu\n",
	       m_copy / m_cold, m_copy / m_cold >= 0.8 ? "met" : "MISSED",
	       (unsigned long long)cold_read_min, (unsigned long long)bytes);
	/* A cold unit does everything a warm one does (request, lookups, reply, every weight
	 * mapped) and makes the weights besides: the warm unit's speed is the most it can reach. */
	printf("  ceiling: the same unit warm, nothing to make, is %.3g of the copy's speed (below)\n\n",
	       m_copy / m_warm);
	printf("warm binding of the unit, medians of %d (probe: %d):\n", nw, np);
	printf("  weightd: submit + validate + bind           %9.4f s  = %.3f us per weight\n", m_warm,
	       m_warm / (double)N * 1e6);
	printf("  weightd: free                               %9.4f s  = %.3f us per weight\n", m_free,
	       m_free / (double)N * 1e6);
	printf("  raw probe, %d fds: request, fstat+mmap each %8.4f s  = %.3f us per fd "
	       "(%.0f fds/s)\n", PROBE_FDS, m_probe, m_probe / PROBE_FDS * 1e6, PROBE_FDS / m_probe);
	printf("  -> a weight costs %.3fx an fd of the probe; checkpoint bytes read while warm: %llu\n",
	       (m_warm / (double)N) / (m_probe / PROBE_FDS), (unsigned long long)warm_read);
	printf("load average %.2f (the machine may be shared)\n", la[0]);
	rc = m_copy / m_cold >= 0.8 && warm_read == 0 ? 0 : 1;
out:
	weightd_close(c);
	probe_stop(&p);
	harness_cleanup(&H);
	ds_free(&CK);
	return rc;
}
