/* SPDX-License-Identifier: Apache-2.0 */
/* bench_populate.c - a new process binding a large warm unit and touching every page of it, with
 * populate at validate (weightd_unit_set_populate) beside demand faulting, in the same run, on
 * /dev/shm and on a huge-page tmpfs (segment_dir). */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_populate [--size BYTES] [--runs R]
 *
 * Defaults: 1 GiB (eight U8 tensors of 128 MiB), 7 runs of each side. A private weightd
 * (tests/common/harness.c) serves the checkpoint; the whole of it is materialized once as
 * a unit and freed before timing, so every run maps weights already in shared memory. All of it
 * twice: with segments on /dev/shm (4 KiB pages), then with segment_dir on a tmpfs mounted with
 * huge=within_size (2 MiB pages) in a mount namespace of the benchmark's own (root only; skipped
 * with the reason otherwise).
 *
 * Each run is a new process (its page tables start empty, as an engine's do) that connects,
 * submits the whole checkpoint as one unit and waits for the reply, then, timed:
 *
 *   demand    validate + bind, then one read per page of every slot (each page faulted in on
 *             first touch: the reference).
 *   populate  the same with weightd_unit_set_populate(u, 1): validate pre-faults the unit's
 *             pages, and the reads that follow take no fault.
 *
 * The sides alternate run by run. Printed: medians of validate, of the touch and of their sum
 * (time from validate to every page touched) per side, the page faults of the touch, each
 * side's rate, and demand / populate (above 1: populate gets the process to a fully touched
 * unit sooner). There is no target: populate moves the faults before serving, and the ratio
 * says what that costs or saves in all. Exit status 1 when a run failed.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "harness.h"
#include "itest.h"

#define MAX_RUNS  64
#define N_TENSORS 8

static struct harness H;

struct sample {
	double validate, touch;
	long faults;
	int ok;
};

/* In a new process: one timed run; the sample is written to fd. */
static void run_child(int populate, int fd)
{
	struct sample s = { 0 };
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	volatile uint8_t sink = 0;
	struct rusage ru;
	double t0, t1;
	long f0;

	if (weightd_connect(H.sock, "bench_populate", &c, &err) < 0 ||
	    it_unit_of_numbered(c, "p", "t", N_TENSORS, false, &u, &err) < 0 ||
	    weightd_unit_set_populate(u, populate, &err) < 0) {
		fprintf(stderr, "bench_populate: %s\n", err.message);
		_exit(1);
	}
	t0 = bench_now();
	if (weightd_unit_validate(u, &err) < 0) {
		fprintf(stderr, "bench_populate: validate: %s\n", err.message);
		_exit(1);
	}
	weightd_unit_bind(u);
	t1 = bench_now();
	getrusage(RUSAGE_SELF, &ru);
	f0 = ru.ru_minflt;
	for (int i = 0; i < N_TENSORS; i++) {
		char name[16];
		const uint8_t *p;
		uint64_t n;

		snprintf(name, sizeof(name), "t%d", i);
		p = weightd_unit_data(u, name);
		n = weightd_weight_nbytes(weightd_unit_weight(u, name));
		for (uint64_t at = 0; at < n; at += page)
			sink += p[at];
	}
	s.touch = bench_now() - t1;
	s.validate = t1 - t0;
	getrusage(RUSAGE_SELF, &ru);
	s.faults = ru.ru_minflt - f0;
	s.ok = 1;
	(void)sink;
	if (write(fd, &s, sizeof(s)) != (ssize_t)sizeof(s))
		_exit(1);
	weightd_unit_free(u);
	weightd_close(c);
	_exit(0);
}

static int run(int populate, struct sample *s)
{
	if (bench_child_result(run_child, populate, s, sizeof(*s)) < 0 || !s->ok)
		return -1;
	return 0;
}

static void print_side(const char *what, struct sample *s, int runs, uint64_t bytes,
		       double *ret_total)
{
	double v[MAX_RUNS], t[MAX_RUNS], sum[MAX_RUNS], f[MAX_RUNS];

	for (int i = 0; i < runs; i++) {
		v[i] = s[i].validate;
		t[i] = s[i].touch;
		sum[i] = s[i].validate + s[i].touch;
		f[i] = (double)s[i].faults;
	}
	*ret_total = bench_median(sum, runs);
	printf("  %-9s validate %8.1f ms  touch %8.1f ms (%6.0f faults)  validate..touched "
	       "%8.1f ms  (%.2f GB/s)\n",
	       what, bench_median(v, runs) * 1e3, bench_median(t, runs) * 1e3,
	       bench_median(f, runs), *ret_total * 1e3, (double)bytes / *ret_total / 1e9);
}

/* kB of shared memory on huge pages (/proc/meminfo ShmemHugePages), or -1. */
static long shmem_huge_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "ShmemHugePages: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/*
 * Start weightd on the checkpoint (segments in segment_dir, or /dev/shm when NULL), warm the
 * whole of it, and time both sides alternately. 0, or -1 when a run failed.
 */
static int measure(const char *ckpt, const char *segment_dir, uint64_t size, int runs)
{
	static struct sample demand[MAX_RUNS], populate[MAX_RUNS];
	char extra[600], sec[800];
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	long huge0 = shmem_huge_kb();
	double td, tp;
	int rc = -1;

	snprintf(extra, sizeof(extra), "log_level = warning\nbudget = %lluM\n%s%s%s",
		 (unsigned long long)(size >> 20) + 64, segment_dir ? "segment_dir = " : "",
		 segment_dir ? segment_dir : "", segment_dir ? "\n" : "");
	snprintf(sec, sizeof(sec), "[checkpoint:p]\npath = %s\n", ckpt);
	if (harness_write_config(&H, extra, sec) < 0 || harness_start(&H) < 0) {
		fprintf(stderr, "bench_populate: weightd did not start\n");
		return -1;
	}
	if (weightd_connect(H.sock, "bench_populate", &c, &err) < 0 ||
	    it_unit_of_numbered(c, "p", "t", N_TENSORS, false, &u, &err) < 0) {
		fprintf(stderr, "bench_populate: warming: %s\n", err.message);
		goto out;
	}
	weightd_unit_free(u); /* the weights stay cached */
	printf("a %llu MiB unit in %s (%ld MiB more of shared memory on huge pages), %d runs per "
	       "side, alternating\n",
	       (unsigned long long)(size >> 20), segment_dir ? segment_dir : "/dev/shm",
	       (shmem_huge_kb() - huge0) >> 10, runs);
	for (int i = 0; i < runs; i++)
		if (run(i % 2, i % 2 ? &populate[i] : &demand[i]) < 0 ||
		    run(!(i % 2), i % 2 ? &demand[i] : &populate[i]) < 0) {
			fprintf(stderr, "bench_populate: run %d failed\n", i);
			goto out;
		}
	print_side("demand", demand, runs, size, &td);
	print_side("populate", populate, runs, size, &tp);
	printf("  demand / populate, validate..touched: %.2fx  (demand's own rate %.2f GB/s)\n\n",
	       td / tp, (double)size / td / 1e9);
	rc = 0;
out:
	weightd_close(c);
	harness_stop(&H);
	return rc;
}

/*
 * A tmpfs mounted with huge=within_size at dir, in a mount namespace of this process's own (the
 * daemon and the clients it forks share it; the machine's mounts are untouched, and the mount
 * goes when they exit). 0, or -1 with the reason printed.
 */
static int huge_tmpfs(const char *dir, uint64_t size)
{
	char opts[128];

	snprintf(opts, sizeof(opts), "huge=within_size,mode=0700,size=%llum",
		 (unsigned long long)(size >> 20) * 2 + 128);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mkdir(dir, 0700) < 0 || mount("tmpfs", dir, "tmpfs", 0, opts) < 0) {
		printf("huge-page tmpfs: skipped (%s; needs root)\n", strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t size = 1ull << 30;
	int runs = 7, rc = 1;
	char path[512], args[1024], dir[512];

	if (!bench_args_size_runs(argc, argv, N_TENSORS * 4096ull, N_TENSORS * 4096ull, MAX_RUNS,
				  &size, &runs))
		return 2;
#ifdef WD_BENCH_WEIGHTD
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
	setenv("WD_MKFIXTURE", WD_BENCH_MKFIXTURE, 0);
#endif
	if (harness_init(&H) < 0) {
		fprintf(stderr, "bench_populate: cannot make a temp dir: %s\n", strerror(errno));
		return 1;
	}
	harness_path(&H, "p.safetensors", path, sizeof(path));
	snprintf(args, sizeof(args), "safetensors %s --seed 0", path);
	for (int i = 0; i < N_TENSORS; i++)
		snprintf(args + strlen(args), sizeof(args) - strlen(args), " --tensor t%d:U8:%llu",
			 i, (unsigned long long)(size / N_TENSORS));
	if (harness_mkfixture(args) < 0) {
		fprintf(stderr, "bench_populate: cannot write the checkpoint\n");
		goto out;
	}
	printf("weightd %s\n\n", harness_weightd());
	if (measure(path, NULL, size, runs) < 0)
		goto out;
	harness_path(&H, "huge", dir, sizeof(dir));
	if (huge_tmpfs(dir, size) == 0 && measure(path, dir, size, runs) < 0)
		goto out;
	rc = 0;
out:
	harness_cleanup(&H);
	return rc;
}
