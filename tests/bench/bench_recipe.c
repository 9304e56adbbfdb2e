/* SPDX-License-Identifier: Apache-2.0 */
/* bench_recipe.c - MoE recipes: preflight cost per node from 1k to 64k nodes (linear time), and
 * dequant_block throughput beside a plain cast of the same FP8 bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "recipe.h"
#include "rnodes.h"
#include "sink.h"
#include "source.h"
#include "st_writer.h"

/*
 * Part 1. A checkpoint of NEXP experts (gate, up: F8_E4M3 [256, 512] with F32 scales in 128x128
 * blocks). Recipes are vLLM's w13 for rank 3 of 8 (a stack over E experts of concat(gate, up),
 * each a dequantized shard: 9 nodes per expert), E cycling through the stored experts, from about
 * 1,000 to 65,000 nodes. Each size is preflighted RUNS times; the table shows the median time per
 * node and its ratio to the per-node time of the smallest recipe, measured in the same run (1.0:
 * linear; quadratic work would grow the ratio with the size). "1-expert range" is the median
 * time to execute the bytes of one expert (64 KiB, into a hash-only sink) as a parallel fill's
 * range: it should not grow with the plan.
 *
 * Part 2. One [2048, 7168] F8_E4M3 tensor with [16, 56] scales, made into a weight in shared
 * memory as the daemon's fill does (plan execution into a sink: pwrite and SHA-256): as stored
 * (a copy), by a plain cast to BF16 (the reference: the same bytes read and the same BF16 bytes
 * written and hashed, no scale), and by dequant_block to BF16. Medians of RUNS.
 *
 * Times are the process's CPU time (CLOCK_PROCESS_CPUTIME_ID), so a shared, busy machine does not
 * count against either side. The load average is printed.
 *
 * Usage: bench_recipe [RUNS]   (default 5)
 */

#define NEXP 64
#define ER 256
#define EC 512
#define BIGR 2048
#define BIGC 7168

static struct wd_source *src;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int lookup(void *ctx, const char *ck, const struct wd_source **ret, weightd_error *err)
{
	(void)ctx;
	if (strcmp(ck, "m") == 0) {
		*ret = src;
		return 0;
	}
	return wd_error_set(err, WEIGHTD_E_UNKNOWN_SOURCE, "no checkpoint \"%s\"", ck);
}

static const struct wd_resolver resolver = { NULL, lookup };

static uint32_t source(struct rnodes *b, const char *t)
{
	return rnodes_source(b, "m", t);
}

static uint32_t dq(struct rnodes *b, uint32_t d, uint32_t s, uint64_t b0, uint64_t b1)
{
	uint32_t in[2] = { d, s }, i = rnodes_add(b, WD_OP_DEQUANT_BLOCK, in, 2);

	b->n[i].dtype = WD_BF16;
	b->n[i].n_block = 2;
	b->n[i].block[0] = b0;
	b->n[i].block[1] = b1;
	return i;
}

static char names[NEXP][4][24];

/* w13 over e experts into b (capacity 9 e + 1 nodes). */
static void build_w13(struct rnodes *b, size_t e, uint32_t *experts)
{
	rnodes_clear(b);
	for (size_t k = 0; k < e; k++) {
		uint32_t parts[2];
		size_t x = k % NEXP;

		for (int w = 0; w < 2; w++) {
			uint32_t q = dq(b, source(b, names[x][w]), source(b, names[x][w + 2]), 128, 128);

			parts[w] = rnodes_add(b, WD_OP_SELECT, &q, 1);
			b->n[parts[w]].sel = (struct wd_selection){ .kind = WD_SEL_SHARD, .axis = 0,
								     .rank = 3, .world = 8 };
		}
		experts[k] = rnodes_add(b, WD_OP_CONCAT, parts, 2);
	}
	rnodes_add(b, WD_OP_STACK, experts, e);
}

/* CPU seconds to execute p into a sink over fd (pwrite into shared memory plus the SHA-256 the
 * daemon computes on the way, as a real fill does). */
static double time_plan(const struct wd_plan *p, int fd, struct wd_scratch *sc)
{
	struct wd_sink sink;
	weightd_error err;
	uint8_t digest[WD_DIGEST_LEN];
	double t0 = now();

	if (wd_sink_init(&sink, fd, wd_plan_nbytes(p)) < 0 ||
	    wd_plan_execute(p, &sink, sc, NULL, &err) < 0 || wd_sink_finish(&sink, digest, &err) < 0) {
		fprintf(stderr, "bench_recipe: %s\n", err.message);
		exit(1);
	}
	return now() - t0;
}

int main(int argc, char **argv)
{
	static const size_t experts[] = { 114, 455, 1820, 7281 };
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct stw_tensor ts[4 * NEXP + 2];
	char dir[256], path[300];
	weightd_error err;
	struct rnodes b;
	uint32_t *ex = malloc(7281 * sizeof(*ex));
	double *t = calloc((size_t)runs, sizeof(double)), base = 0;
	size_t n = 0;

	if (runs < 1 || !ex || !t || stw_tmpdir(dir, sizeof(dir)) < 0)
		return 1;
	for (int e = 0; e < NEXP; e++)
		for (int w = 0; w < 4; w++) {
			snprintf(names[e][w], sizeof(names[e][w]), "%s.%d", (const char *[]){ "g", "u", "gs", "us" }[w], e);
			ts[n++] = (struct stw_tensor){ .name = names[e][w], .dtype = w < 2 ? "F8_E4M3" : "F32",
				.ndim = 2, .shape = { w < 2 ? ER : ER / 128, w < 2 ? EC : EC / 128 },
				.pattern = STW_BYTES, .seed = (uint32_t)(4 * e + w) };
		}
	ts[n++] = (struct stw_tensor){ .name = "big", .dtype = "F8_E4M3", .ndim = 2,
				       .shape = { BIGR, BIGC }, .pattern = STW_BYTES, .seed = 1 };
	ts[n++] = (struct stw_tensor){ .name = "big_s", .dtype = "F32", .ndim = 2,
				       .shape = { BIGR / 128, BIGC / 128 }, .pattern = STW_VALUES, .seed = 2 };
	snprintf(path, sizeof(path), "%s/m.safetensors", dir);
	if (stw_write(path, ts, n, NULL, 0, NULL) < 0 || wd_source_open("m", path, &lim, &src, &err) < 0) {
		fprintf(stderr, "bench_recipe: cannot write or open %s\n", path);
		return 1;
	}
	rnodes_init(&b, 9 * 7281 + 1, 4 * (9 * 7281 + 1));

	{
		double la[3] = { 0, 0, 0 };
		getloadavg(la, 3);
		printf("load average %.2f (CPU time below)\n", la[0]);
	}
	printf("preflight of w13 (stack of E fused dequantized expert shards), median of %d\n", runs);
	printf("%8s %8s %12s %14s %10s %20s\n", "experts", "nodes", "ms", "us/node", "ratio",
	       "1-expert range us");
	for (size_t s = 0; s < sizeof(experts) / sizeof(experts[0]); s++) {
		struct wd_recipe r;
		double per;

		build_w13(&b, experts[s], ex);
		r = (struct wd_recipe){ b.n, b.len };
		for (int k = 0; k < runs; k++) {
			struct wd_plan *p = NULL;
			double t0 = now();

			if (wd_recipe_preflight(&r, &resolver, NULL, &p, &err) < 0) {
				fprintf(stderr, "bench_recipe: %s\n", err.message);
				return 1;
			}
			t[k] = now() - t0;
			wd_plan_free(p);
		}
		per = bench_median(t, runs) / (double)b.len;
		if (s == 0)
			base = per;
		printf("%8zu %8zu %12.2f %14.3f %10.2f", experts[s], b.len,
		       bench_median(t, runs) * 1e3, per * 1e6, per / base);
		{
			struct wd_plan *p = NULL;
			struct wd_scratch sc;
			uint64_t one = 2 * (ER / 8) * EC * 2;

			if (wd_recipe_preflight(&r, &resolver, NULL, &p, &err) < 0 ||
			    wd_scratch_init(&sc, WD_SCRATCH_BYTES) < 0)
				return 1;
			for (int k = 0; k < runs; k++) {
				struct wd_sink sink;
				uint8_t digest[WD_DIGEST_LEN];
				double t0 = now();

				if (wd_sink_init(&sink, -1, one) < 0 ||
				    wd_plan_execute_range(p, one * (experts[s] / 2), one, &sink, &sc, NULL,
							  &err) < 0 ||
				    wd_sink_finish(&sink, digest, &err) < 0) {
					fprintf(stderr, "bench_recipe: %s\n", err.message);
					return 1;
				}
				t[k] = now() - t0;
			}
			printf(" %20.0f\n", bench_median(t, runs) * 1e6);
			wd_scratch_free(&sc);
			wd_plan_free(p);
		}
	}

	{
		struct wd_plan *pl[3] = { NULL, NULL, NULL };
		static const char *const what[3] = { "copy (FP8 as is)", "cast to BF16", "dequant_block" };
		struct wd_scratch sc;
		double mb = (double)BIGR * BIGC / 1e6, rate[3];
		int fd = memfd_create("bench-recipe", MFD_CLOEXEC);

		for (int k = 0; k < 3; k++) {
			b.len = b.used = 0;
			if (k == 0) {
				source(&b, "big");
			} else if (k == 1) {
				uint32_t in = source(&b, "big"), c = rnodes_add(&b, WD_OP_CAST, &in, 1);
				b.n[c].dtype = WD_BF16;
			} else {
				dq(&b, source(&b, "big"), source(&b, "big_s"), 128, 128);
			}
			if (wd_recipe_preflight(&(struct wd_recipe){ b.n, b.len }, &resolver, NULL, &pl[k],
						&err) < 0)
				return 1;
		}
		if (fd < 0 || wd_scratch_init(&sc, WD_SCRATCH_BYTES) < 0)
			return 1;
		printf("\nF8_E4M3 [%d, %d] (%.1f MB) made into a shared-memory weight (pwrite + SHA-256, "
		       "page cache warm), one thread, median of %d\n", BIGR, BIGC, mb, runs);
		printf("%20s %16s %24s\n", "plan", "MB in/cpu-s", "ratio to cast (ref)");
		for (int k = 0; k < 3; k++)
			time_plan(pl[k], fd, &sc);                    /* warm: pages and cache */
		for (int k = 0; k < 3; k++) {
			for (int i = 0; i < runs; i++)
				t[i] = time_plan(pl[k], fd, &sc);
			rate[k] = mb / bench_median(t, runs);
		}
		for (int k = 0; k < 3; k++)
			printf("%20s %16.0f %24.2f\n", what[k], rate[k], rate[k] / rate[1]);
		for (int k = 0; k < 3; k++)
			wd_plan_free(pl[k]);
		wd_scratch_free(&sc);
		close(fd);
	}
	wd_source_free(src);
	stw_rmtree(dir);
	rnodes_free(&b);
	free(ex);
	free(t);
	return 0;
}
