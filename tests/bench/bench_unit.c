/* SPDX-License-Identifier: Apache-2.0 */
/* bench_unit.c - the per-weight cost of serving warm weights: a 1,000-weight unit and a single
 * weight, each beside a raw fd-passing probe measured in the same run. */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_unit [--weights N] [--bytes B] [--rounds R] [--iters K]
 *
 * Defaults: 1,000 weights of 4,096 bytes, 15 rounds of 10 iterations of each side. A private
 * weightd (tests/common/harness.c: temp dir, socket, shm prefix) serves a generated
 * checkpoint of N U8 tensors; everything is materialized once before timing (warm).
 *
 *   unit    submit + validate (every weight mapped) + bind + free of an N-slot unit, one slot
 *           per tensor; declaring the slots is timed apart and printed beside it.
 *   probe   raw_probe.h: a server process passes N read-only shm fds over a socketpair (250
 *           per sendmsg); the client fstats and maps each, then unmaps and closes them all.
 *   get     weightd_materialize + weightd_finish + weightd_weight_map + weightd_release of one
 *           cached weight.
 *   probe1  the same probe with one fd: request, fd, mmap, munmap, close.
 *   scale   declare + submit + validate + bind + free of a unit of 10N slots beside the N-slot
 *           unit, both warm, until weightd has also released it (free does not wait for that:
 *           a list round trip after it does), the two sizes alternating (each runs right after
 *           the other, never after itself, whose working set would still be in the caches),
 *           so that neither pays for the other's release nor finds its data cached by its own
 *           previous run. The time per slot
 *           must not grow with the unit (10x the slots at most 11x the time; libweightd's slot
 *           lookup is O(1), the daemon's checks linear).
 *           Printed beside it: page faults and CPU time per slot in each process (the client
 *           from getrusage, weightd from /proc, both over every timed unit of that size), so a
 *           ratio above 10 says which side grew.
 *
 * The sides alternate round by round so both see the same machine; printed are medians of
 * every iteration, each side's own rate, and the ratios against the targets (unit <= 1.0x
 * probe, get <= 1.3x probe1). Exit status 1 when a target is missed or a run failed.
 */
#include <stdbool.h>
#include <sys/resource.h>

#include "harness.h"
#include "raw_probe.h"
#include "st_writer.h"
#include "weightd/client.h"

#define MAX_SAMPLES 4096

#define SCALE 10

struct setup {
	struct harness h;
	int n;     /* slots of the unit compared with the probe */
	int total; /* tensors in the checkpoint: SCALE x n, for the scaling part */
	uint64_t bytes;
	char **names;
	void **ptrs;
};

/*
 * Declare, submit, validate, bind and free a unit of the first n tensors. With `settle`, the
 * cycle ends only when weightd has also done the release that free sends without waiting: a
 * list request after it is answered in order (its round trip, tens of microseconds, is part of
 * every cycle measured so). Without it a unit's release is paid by whatever comes next.
 */
static int unit_once_settled(struct setup *s, int n, weightd_client *c, bool settle,
			     double *ret_declare, double *ret_cycle, uint64_t *ret_read)
{
	uint64_t shape[1] = { s->bytes };
	weightd_unit *u = NULL;
	weightd_error err;
	double t0 = bench_now(), t1;
	int r = weightd_unit_new(c, &u, &err);

	for (int i = 0; r >= 0 && i < n; i++) {
		r = weightd_unit_slot(u, s->names[i], "U8", shape, 1, &s->ptrs[i], &err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, s->names[i], "u", s->names[i], NULL, &err);
	}
	t1 = bench_now();
	if (r >= 0)
		r = weightd_unit_submit(u, &err);
	if (r >= 0)
		r = weightd_unit_validate(u, &err);
	if (r >= 0) {
		weightd_unit_bind(u);
		*ret_read = weightd_unit_bytes_read(u);
	}
	weightd_unit_free(u);
	if (r >= 0 && settle) {
		weightd_source_list *l = NULL;

		r = weightd_list(c, &l, &err);
		weightd_source_list_free(l);
	}
	*ret_cycle = bench_now() - t1;
	*ret_declare = t1 - t0;
	if (r < 0)
		fprintf(stderr, "bench_unit: unit of %d weights: %s\n", n, err.message);
	return r;
}

static int unit_once(struct setup *s, int n, weightd_client *c, double *ret_declare,
		     double *ret_cycle, uint64_t *ret_read)
{
	return unit_once_settled(s, n, c, false, ret_declare, ret_cycle, ret_read);
}

static int make_checkpoint(struct setup *s)
{
	struct stw_tensor *ts = calloc((size_t)s->total, sizeof(*ts));
	char path[512], sec[700];
	int r = -1;

	s->names = calloc((size_t)s->total, sizeof(char *));
	s->ptrs = calloc((size_t)s->total, sizeof(void *));
	if (!ts || !s->names || !s->ptrs)
		goto out;
	for (int i = 0; i < s->total; i++) {
		s->names[i] = malloc(32);
		if (!s->names[i])
			goto out;
		snprintf(s->names[i], 32, "w.%06d", i);
		ts[i] = (struct stw_tensor){ .name = s->names[i], .dtype = "U8", .ndim = 1,
					     .shape = { s->bytes }, .pattern = STW_BYTES,
					     .seed = (uint32_t)i };
	}
	harness_path(&s->h, "u.safetensors", path, sizeof(path));
	if (stw_write(path, ts, (size_t)s->total, NULL, 0, NULL) < 0)
		goto out;
	snprintf(sec, sizeof(sec), "[checkpoint:u]\npath = %s\n", path);
	if (harness_write_config(&s->h, "log_level = warning", sec) < 0)
		goto out;
	r = 0;
out:
	free(ts);
	return r;
}

static void print_side(const char *what, double med, double per, const char *unit)
{
	printf("  %-48s median %9.3f ms  (%.0f %s/s)\n", what, med * 1e3, per / med, unit);
}

/* CPU seconds this process has used (every thread). */
static double cpu_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

/* CPU seconds process `pid` has used (every thread; clock-tick resolution). */
static double cpu_of(pid_t pid)
{
	return (double)harness_cpu_ticks(pid) / (double)sysconf(_SC_CLK_TCK);
}

int main(int argc, char **argv)
{
	static double t_unit[MAX_SAMPLES], t_decl[MAX_SAMPLES], t_probe[MAX_SAMPLES],
		t_get[MAX_SAMPLES], t_probe1[MAX_SAMPLES], t_small[MAX_SAMPLES], t_big[MAX_SAMPLES];
	struct setup s = { .n = 1000, .bytes = 4096 };
	struct probe pn = { .sock = -1 }, p1 = { .sock = -1 };
	struct rlimit rl;
	weightd_client *c = NULL;
	weightd_error err;
	int rounds = 15, iters = 10, ns = 0, rc = 1;
	uint64_t read_warm = 0;
	double m_unit, m_decl, m_probe, m_get, m_probe1, m_small, m_big, la[3] = { 0, 0, 0 };
	long flt_small[2] = { 0, 0 }, flt_big[2] = { 0, 0 };
	double cpu_small[2] = { 0, 0 }, cpu_big[2] = { 0, 0 }; /* CPU seconds, client / daemon */
	bool ok_unit, ok_get, ok_scale;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			s.n = atoi(argv[++i]);
		else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			s.bytes = (uint64_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			iters = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bench_unit [--weights N] [--bytes B] [--rounds R] "
					"[--iters K]\n");
			return 2;
		}
	}
	if ((long)rounds * iters > MAX_SAMPLES) {
		fprintf(stderr, "bench_unit: rounds x iters must be at most %d\n", MAX_SAMPLES);
		return 2;
	}
	if ((long)s.n * SCALE > 4000000) {
		fprintf(stderr, "bench_unit: --weights must be at most %d\n", 4000000 / SCALE);
		return 2;
	}
	s.total = s.n * SCALE;
	signal(SIGPIPE, SIG_IGN);
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
	/* room for one fd per weight (what a daemon without packed segments needs) and the probe */
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);

	if (harness_init(&s.h) < 0 || make_checkpoint(&s) < 0 || harness_start(&s.h) < 0) {
		fprintf(stderr, "bench_unit: cannot set up the daemon in %s\n", s.h.dir);
		goto out;
	}
	if (probe_start(&pn, s.n, (size_t)s.bytes) < 0 || probe_start(&p1, 1, (size_t)s.bytes) < 0)
		goto out;
	if (weightd_connect(s.h.sock, "bench_unit", &c, &err) < 0) {
		fprintf(stderr, "bench_unit: %s\n", err.message);
		goto out;
	}
	/* warm: every weight materialized once; check the bytes once */
	{
		double d, cy;
		uint64_t rd;
		if (unit_once(&s, s.n, c, &d, &cy, &rd) < 0)
			goto out;
		printf("cold unit of %d x %llu B: %.3f ms (%llu bytes read)\n", s.n,
		       (unsigned long long)s.bytes, cy * 1e3, (unsigned long long)rd);
		if (unit_once(&s, s.total, c, &d, &cy, &rd) < 0)
			goto out;
	}
	printf("weightd %s; %d rounds x %d iterations per side\n\n", harness_weightd(), rounds, iters);
	fflush(stdout);
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < iters; k++) {
			double t0 = bench_now();
			if (probe_round(&pn) < 0) {
				fprintf(stderr, "bench_unit: the raw probe failed: %s\n", strerror(errno));
				goto out;
			}
			t_probe[ns + k] = bench_now() - t0;
		}
		for (int k = 0; k < iters; k++) {
			uint64_t rd = 0;
			if (unit_once(&s, s.n, c, &t_decl[ns + k], &t_unit[ns + k], &rd) < 0)
				goto out;
			read_warm += rd;
		}
		/* scaling: the whole cycle, declaring included and the daemon's release of it
		 * too, of n and of SCALE x n slots, alternating, so that each size runs after the
		 * other every time (a unit run right after itself finds its own working set in the
		 * caches) */
		for (int k = 0; k < iters; k++) {
			for (int big = 0; big < 2; big++) {
				double d, cy, c0 = cpu_self(), d0 = cpu_of(s.h.pid);
				uint64_t rd = 0;
				long f0 = harness_minor_faults(getpid()), g0 = harness_minor_faults(s.h.pid);
				int size = big ? s.total : s.n;

				if (unit_once_settled(&s, size, c, true, &d, &cy, &rd) < 0)
					goto out;
				(big ? t_big : t_small)[ns + k] = d + cy;
				read_warm += rd;
				if (r == 0 && k == 0)
					continue; /* the first of each size counts no faults and no CPU */
				(big ? flt_big : flt_small)[0] += harness_minor_faults(getpid()) - f0;
				(big ? flt_big : flt_small)[1] += harness_minor_faults(s.h.pid) - g0;
				(big ? cpu_big : cpu_small)[0] += cpu_self() - c0;
				(big ? cpu_big : cpu_small)[1] += cpu_of(s.h.pid) - d0;
			}
		}
		for (int k = 0; k < iters; k++) {
			double t0 = bench_now();
			if (probe_round(&p1) < 0)
				goto out;
			t_probe1[ns + k] = bench_now() - t0;
		}
		for (int k = 0; k < iters; k++) {
			double t0 = bench_now();
			if (bench_get(c, "u", s.names[k % s.n]) < 0)
				goto out;
			t_get[ns + k] = bench_now() - t0;
		}
		ns += iters;
	}
	m_probe = bench_median(t_probe, ns);
	m_unit = bench_median(t_unit, ns);
	m_decl = bench_median(t_decl, ns);
	m_probe1 = bench_median(t_probe1, ns);
	m_get = bench_median(t_get, ns);
	m_small = bench_median(t_small, ns);
	m_big = bench_median(t_big, ns);
	ok_unit = m_unit <= 1.0 * m_probe && read_warm == 0;
	ok_get = m_get <= 1.3 * m_probe1;
	ok_scale = m_big <= 1.1 * SCALE * m_small;
	if (getloadavg(la, 3) < 0)
		la[0] = -1;

	printf("a warm unit of %d weights (%llu B each), medians of %d:\n", s.n,
	       (unsigned long long)s.bytes, ns);
	print_side("raw probe: request, fds, fstat+mmap, unmap+close", m_probe, s.n, "fds");
	print_side("weightd: submit, validate, bind, free", m_unit, s.n, "weights");
	print_side("weightd: declaring the slots (apart)", m_decl, s.n, "slots");
	printf("  -> %.2fx the probe (target <= 1.0x): %s; checkpoint bytes read while warm: %llu\n\n",
	       m_unit / m_probe, ok_unit ? "met" : "MISSED", (unsigned long long)read_warm);
	printf("a warm single-weight get, medians of %d:\n", ns);
	print_side("raw probe: request, one fd, mmap, munmap+close", m_probe1, 1, "round trips");
	print_side("weightd: materialize, finish, map, release", m_get, 1, "gets");
	printf("  -> %.2fx the probe (target <= 1.3x): %s\n\n", m_get / m_probe1, ok_get ? "met" : "MISSED");
	printf("scaling: declare + submit + validate + bind + free, warm, alternating, medians of "
	       "%d each:\n", ns);
	print_side("weightd: a unit of n slots", m_small, s.n, "slots");
	printf("  %-48s median %9.3f ms  (%.0f slots/s)\n", "weightd: a unit of 10n slots", m_big * 1e3,
	       s.total / m_big);
	printf("  -> %dx the slots took %.2fx the time (target <= %.0fx): %s\n", SCALE, m_big / m_small,
	       1.1 * SCALE, ok_scale ? "met" : "MISSED");
	if (ns > 1) {
		double k = (double)(ns - 1), sn = k * s.n, sb = k * s.total; /* slots counted */

		printf("  page faults per slot, client / daemon: n %.3f / %.3f, 10n %.3f / %.3f\n",
		       (double)flt_small[0] / sn, (double)flt_small[1] / sn,
		       (double)flt_big[0] / sb, (double)flt_big[1] / sb);
		printf("  CPU time per slot, client / daemon: n %.3f / %.3f us, 10n %.3f / %.3f us "
		       "(%.2fx / %.2fx)\n", cpu_small[0] / sn * 1e6, cpu_small[1] / sn * 1e6,
		       cpu_big[0] / sb * 1e6, cpu_big[1] / sb * 1e6,
		       (cpu_big[0] / sb) / (cpu_small[0] / sn), (cpu_big[1] / sb) / (cpu_small[1] / sn));
	}
	printf("load average %.2f (the machine may be shared)\n", la[0]);
	rc = ok_unit && ok_get && ok_scale ? 0 : 1;
out:
	weightd_close(c);
	probe_stop(&pn);
	probe_stop(&p1);
	harness_cleanup(&s.h);
	if (s.names)
		for (int i = 0; i < s.total; i++)
			free(s.names[i]);
	free(s.names);
	free(s.ptrs);
	return rc;
}
