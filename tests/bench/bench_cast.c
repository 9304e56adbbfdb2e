/* SPDX-License-Identifier: Apache-2.0 */
/* bench_cast.c - cast throughput of one thread in warm memory, beside memcpy of the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "convert.h"
#include "dtype.h"

/*
 * For each hot pair and three working-set sizes (fits in L2, fits in L3, ~64 MiB of f32), every run
 * times wd_convert, wd_convert_scalar and memcpy of the source bytes, interleaved so all three see
 * the same machine; the table shows medians. ratio = memcpy time / cast time for the same source
 * bytes (the target is >= 0.5). "moved" counts bytes read plus written per second, for both, and
 * "bw ratio" compares those: a widening cast writes twice the bytes a memcpy of its source does,
 * so where stores are the limit its ratio stays near 0.5 while its bw ratio shows how close it
 * runs to the copy's bandwidth.
 *
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so time the thread spends descheduled
 * on a shared machine does not count against either side; the load average is printed with the
 * results.
 *
 * Usage: bench_cast [RUNS]   (default 7)
 */

struct pair {
	const char *name;
	enum wd_dtype from, to;
};

static const struct pair pairs[] = {
	{ "f32->bf16", WD_F32, WD_BF16 }, { "bf16->f32", WD_BF16, WD_F32 },
	{ "f16->f32", WD_F16, WD_F32 },   { "f32->f16", WD_F32, WD_F16 },
	{ "bf16->f16", WD_BF16, WD_F16 },
};

static const struct {
	const char *name;
	size_t elems;
} sizes[] = {
	{ "L2", (size_t)48 << 10 },      /* 192 KiB of f32 + 96 KiB of 16-bit */
	{ "L3", (size_t)1 << 20 },       /* 4 MiB + 2 MiB */
	{ "64MiB", (size_t)16 << 20 },   /* 64 MiB + 32 MiB */
};

static volatile unsigned char sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd32(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x9E3779B97F4A7C15ull) >> 32);
}

/* Realistic weights: finite values of moderate size, either sign, encoded in the source dtype. */
static void fill(enum wd_dtype t, void *buf, size_t n)
{
	float *tmp = malloc(n * sizeof(float));
	if (!tmp) {
		perror("malloc");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		tmp[i] = ((float)rnd32() / 4294967296.0f - 0.5f) * 0.25f;
	wd_convert(WD_F32, tmp, t, buf, n);
	free(tmp);
}

static void *xalloc(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes) != 0) {
		fprintf(stderr, "out of memory for %zu bytes\n", bytes);
		exit(1);
	}
	memset(p, 1, bytes); /* fault the pages in now */
	return p;
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 7;
	double worst = 1e9;

	if (runs < 1 || runs > 1000) {
		fprintf(stderr, "usage: %s [RUNS]\n", argv[0]);
		return 2;
	}
	char load[64] = "?";
	FILE *la = fopen("/proc/loadavg", "r");

	if (la) {
		if (!fgets(load, sizeof(load), la))
			strcpy(load, "?");
		load[strcspn(load, "\n")] = 0;
		fclose(la);
	}
	printf("weightd cast benchmark: vector path %s, 1 thread, median of %d runs of thread CPU "
	       "time, load average %s\n", wd_convert_isa(), runs, load);
	printf("ratio = memcpy time / cast time for the same source bytes (target >= 0.5);\n"
	       "moved = bytes read + written per second; bw ratio = cast moved / memcpy moved\n\n");
	printf("%-10s %-6s %9s | %11s %11s %11s | %11s %12s | %6s %8s\n", "pair", "set", "elems",
	       "cast GB/s", "scalar GB/s", "memcpy GB/s", "cast moved", "memcpy moved", "ratio",
	       "bw ratio");

	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
			size_t n = sizes[z].elems;
			size_t sb = n * wd_dtype_size(pairs[p].from), db = n * wd_dtype_size(pairs[p].to);
			/* enough repetitions that one run moves at least 256 MiB of source bytes */
			size_t reps = ((size_t)256 << 20) / sb;
			unsigned char *src = xalloc(sb), *dst = xalloc(db), *cpy = xalloc(sb);
			double *tc = calloc((size_t)runs, sizeof(double));
			double *ts = calloc((size_t)runs, sizeof(double));
			double *tm = calloc((size_t)runs, sizeof(double));
			double c, s, m, t0;

			if (!tc || !ts || !tm) {
				perror("calloc");
				return 1;
			}
			if (reps < 1)
				reps = 1;
			fill(pairs[p].from, src, n);
			wd_convert(pairs[p].from, src, pairs[p].to, dst, n); /* warm */
			memcpy(cpy, src, sb);
			for (int r = 0; r < runs; r++) {
				t0 = now();
				for (size_t k = 0; k < reps; k++)
					wd_convert(pairs[p].from, src, pairs[p].to, dst, n);
				tc[r] = (now() - t0) / (double)reps;
				sink = dst[(size_t)r % db];
				t0 = now();
				for (size_t k = 0; k < reps; k++) {
					memcpy(cpy, src, sb);
					sink = cpy[k % sb];
				}
				tm[r] = (now() - t0) / (double)reps;
				t0 = now();
				for (size_t k = 0; k < (reps + 7) / 8; k++)
					wd_convert_scalar(pairs[p].from, src, pairs[p].to, dst, n);
				ts[r] = (now() - t0) / (double)((reps + 7) / 8);
				sink = dst[(size_t)r % db];
			}
			c = bench_median(tc, runs);
			s = bench_median(ts, runs);
			m = bench_median(tm, runs);
			printf("%-10s %-6s %9zu | %11.2f %11.2f %11.2f | %11.2f %12.2f | %6.2f %8.2f\n",
			       pairs[p].name, sizes[z].name, n, (double)sb / c / 1e9,
			       (double)sb / s / 1e9, (double)sb / m / 1e9, (double)(sb + db) / c / 1e9,
			       2.0 * (double)sb / m / 1e9, m / c,
			       ((double)(sb + db) / c) / (2.0 * (double)sb / m));
			if (m / c < worst)
				worst = m / c;
			fflush(stdout);
			free(src), free(dst), free(cpy), free(tc), free(ts), free(tm);
		}
	}
	printf("\nlowest ratio: %.2f\n", worst);
	return 0;
}
