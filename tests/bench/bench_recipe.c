/* bench_recipe.c - MoE recipes: preflight cost per node from 1k to 64k nodes (linear time), and
 * dequant_block throughput beside a plain cast of the same FP8 bytes. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recipe.h"
#include "sink.h"
#include "source.h"
#include "st_writer.h"

/*
 * Part 1. A checkpoint of NEXP experts (gate, up: F8_E4M3 [256, 512] with F32 scales in 128x128
 * blocks). Recipes are vLLM's w13 for rank 3 of 8 (a stack over E experts of concat(gate, up),
 * each a dequantized shard: 9 nodes per expert), E cycling through the stored experts, from about
 * 1,000 to 65,000 nodes. Each size is preflighted RUNS times; the table shows the median time per
 * node and its ratio to the per-node time of the smallest recipe, measured in the same run (1.0:
 * linear; quadratic work would grow the ratio with the size).
 *
 * Part 2. One [2048, 7168] F8_E4M3 tensor with [16, 56] scales, made into BF16 by dequant_block
 * and, as the reference, by a plain cast (the same bytes read, the same conversion kernel for the
 * FP8 decode and the BF16 rounding, no scale): both through the same plan execution into a warm
 * buffer (no hashing), medians of RUNS, on one thread and as 2 ranges on 2 threads.
 *
 * Times are the process's CPU time (CLOCK_PROCESS_CPUTIME_ID), so a shared, busy machine does not
 * count against either side; with 2 threads the rate is therefore per CPU-second (what splitting
 * costs in work, not the wall-clock gain). The load average is printed.
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

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static int lookup(void *ctx, const char *ck, const struct wd_source **ret, struct wd_error *err)
{
	(void)ctx;
	if (strcmp(ck, "m") == 0) {
		*ret = src;
		return 0;
	}
	return wd_error_set(err, WD_E_UNKNOWN_SOURCE, "no checkpoint \"%s\"", ck);
}

static const struct wd_resolver resolver = { NULL, lookup };

struct rb {
	struct wd_rnode *n;
	uint32_t *pool;
	size_t len, used;
};

static uint32_t add(struct rb *b, enum wd_op op, const uint32_t *in, size_t nin)
{
	struct wd_rnode *n = &b->n[b->len];

	memset(n, 0, sizeof(*n));
	n->op = op;
	n->inputs = b->pool + b->used;
	n->n_inputs = nin;
	if (nin)
		memcpy(b->pool + b->used, in, nin * sizeof(*in));
	b->used += nin;
	return (uint32_t)b->len++;
}

static uint32_t source(struct rb *b, const char *t)
{
	uint32_t i = add(b, WD_OP_SOURCE, NULL, 0);

	b->n[i].checkpoint = "m";
	b->n[i].tensor = t;
	return i;
}

static uint32_t dq(struct rb *b, uint32_t d, uint32_t s, uint64_t b0, uint64_t b1)
{
	uint32_t in[2] = { d, s }, i = add(b, WD_OP_DEQUANT_BLOCK, in, 2);

	b->n[i].dtype = WD_BF16;
	b->n[i].n_block = 2;
	b->n[i].block[0] = b0;
	b->n[i].block[1] = b1;
	return i;
}

static char names[NEXP][4][24];

/* w13 over e experts into b (capacity 9 e + 1 nodes). */
static void build_w13(struct rb *b, size_t e, uint32_t *experts)
{
	b->len = b->used = 0;
	for (size_t k = 0; k < e; k++) {
		uint32_t parts[2];
		size_t x = k % NEXP;

		for (int w = 0; w < 2; w++) {
			uint32_t q = dq(b, source(b, names[x][w]), source(b, names[x][w + 2]), 128, 128);

			parts[w] = add(b, WD_OP_SELECT, &q, 1);
			b->n[parts[w]].sel = (struct wd_selection){ .kind = WD_SEL_SHARD, .axis = 0,
								     .rank = 3, .world = 8 };
		}
		experts[k] = add(b, WD_OP_CONCAT, parts, 2);
	}
	add(b, WD_OP_STACK, experts, e);
}

struct rjob {
	const struct wd_plan *p;
	uint64_t off, len;
	uint8_t *dst;
	struct wd_scratch sc;
	int rc;
};

static int to_buf(void *ctx, uint64_t off, const void *buf, size_t len, struct wd_error *err)
{
	(void)err;
	memcpy((uint8_t *)ctx + off, buf, len);
	return 0;
}

static void *rjob_run(void *arg)
{
	struct rjob *j = arg;
	struct wd_range_out out = { j->dst, to_buf };
	struct wd_error err;

	j->rc = wd_plan_execute_range(j->p, j->off, j->len, &out, &j->sc, NULL, &err);
	if (j->rc < 0)
		fprintf(stderr, "bench_recipe: %s\n", err.msg);
	return NULL;
}

/* Seconds to make the whole output with `threads` ranges (split on the plan's alignment). */
static double time_plan(const struct wd_plan *p, int threads, uint8_t *dst, struct rjob *jobs)
{
	uint64_t n = wd_plan_nbytes(p), al = wd_plan_split_align(p), prev = 0;
	pthread_t th[2];
	double t0 = now();

	for (int i = 0; i < threads; i++) {
		uint64_t end = i + 1 == threads ? n : n * (uint64_t)(i + 1) / (uint64_t)threads / al * al;

		jobs[i].p = p;
		jobs[i].off = prev;
		jobs[i].len = end - prev;
		jobs[i].dst = dst;
		prev = end;
	}
	for (int i = 1; i < threads; i++)
		pthread_create(&th[i], NULL, rjob_run, &jobs[i]);
	rjob_run(&jobs[0]);
	for (int i = 1; i < threads; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < threads; i++)
		if (jobs[i].rc < 0)
			exit(1);
	return now() - t0;
}

int main(int argc, char **argv)
{
	static const size_t experts[] = { 114, 455, 1820, 7281 };
	int runs = argc > 1 ? atoi(argv[1]) : 5;
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct stw_tensor ts[4 * NEXP + 2];
	char dir[256], path[300];
	struct wd_error err;
	struct rb b;
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
	b.n = calloc(9 * 7281 + 1, sizeof(*b.n));
	b.pool = calloc(4 * (9 * 7281 + 1), sizeof(*b.pool));
	if (!b.n || !b.pool)
		return 1;

	{
		double la[3] = { 0, 0, 0 };
		getloadavg(la, 3);
		printf("load average %.2f (CPU time below)\n", la[0]);
	}
	printf("preflight of w13 (stack of E fused dequantized expert shards), median of %d\n", runs);
	printf("%8s %8s %12s %14s %10s\n", "experts", "nodes", "ms", "us/node", "ratio");
	for (size_t s = 0; s < sizeof(experts) / sizeof(experts[0]); s++) {
		struct wd_recipe r;
		double per;

		build_w13(&b, experts[s], ex);
		r = (struct wd_recipe){ b.n, b.len };
		for (int k = 0; k < runs; k++) {
			struct wd_plan *p = NULL;
			double t0 = now();

			if (wd_recipe_preflight(&r, &resolver, NULL, &p, &err) < 0) {
				fprintf(stderr, "bench_recipe: %s\n", err.msg);
				return 1;
			}
			t[k] = now() - t0;
			wd_plan_free(p);
		}
		per = median(t, runs) / (double)b.len;
		if (s == 0)
			base = per;
		printf("%8zu %8zu %12.2f %14.3f %10.2f\n", experts[s], b.len, median(t, runs) * 1e3,
		       per * 1e6, per / base);
	}

	{
		struct wd_plan *pd = NULL, *pc = NULL;
		struct rjob jobs[2];
		uint8_t *dst = malloc((size_t)BIGR * BIGC * 2);
		double mb = (double)BIGR * BIGC / 1e6;

		b.len = b.used = 0;
		dq(&b, source(&b, "big"), source(&b, "big_s"), 128, 128);
		if (!dst || wd_recipe_preflight(&(struct wd_recipe){ b.n, b.len }, &resolver, NULL, &pd, &err) < 0)
			return 1;
		b.len = b.used = 0;
		{
			uint32_t in = source(&b, "big"), c = add(&b, WD_OP_CAST, &in, 1);
			b.n[c].dtype = WD_BF16;
		}
		if (wd_recipe_preflight(&(struct wd_recipe){ b.n, b.len }, &resolver, NULL, &pc, &err) < 0)
			return 1;
		for (int i = 0; i < 2; i++)
			if (wd_scratch_init(&jobs[i].sc, WD_SCRATCH_BYTES) < 0)
				return 1;
		printf("\nF8_E4M3 [%d, %d] to BF16 (%.1f MB in, page cache warm), median of %d\n", BIGR,
		       BIGC, mb, runs);
		printf("%8s %22s %22s %8s\n", "threads", "dequant_block MB/cpu-s", "cast (ref) MB/cpu-s", "ratio");
		for (int threads = 1; threads <= 2; threads++) {
			double *tc = calloc((size_t)runs, sizeof(double)), d, c;

			time_plan(pc, threads, dst, jobs);           /* warm */
			for (int k = 0; k < runs; k++) {
				tc[k] = time_plan(pc, threads, dst, jobs);
				t[k] = time_plan(pd, threads, dst, jobs);
			}
			d = median(t, runs);
			c = median(tc, runs);
			printf("%8d %22.0f %22.0f %8.2f\n", threads, mb / d, mb / c, c / d);
			free(tc);
		}
		wd_plan_free(pd);
		wd_plan_free(pc);
		wd_scratch_free(&jobs[0].sc);
		wd_scratch_free(&jobs[1].sc);
		free(dst);
	}
	wd_source_free(src);
	stw_rmtree(dir);
	free(b.n);
	free(b.pool);
	free(ex);
	free(t);
	return 0;
}
