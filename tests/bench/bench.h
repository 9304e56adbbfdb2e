/* SPDX-License-Identifier: Apache-2.0 */
/* bench.h - what the benchmarks share: the monotonic clock in seconds, the median of a run's
 * samples, one warm get through libweightd, sizes on the command line and the tools built
 * beside them. Header-only (static inline functions). */
#ifndef WD_BENCH_H
#define WD_BENCH_H

#include <libgen.h>
#include <signal.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "weightd/client.h"

static inline double bench_now(void)
{
	return (double)wd_clock_ns() * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One get of ckpt:tensor as an engine does it: materialize, finish, map, release. 0 or -1 (the
 * error printed). */
static inline int bench_get(weightd_client *c, const char *ckpt, const char *tensor)
{
	weightd_inflight *f = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p;
	int r = weightd_materialize(c, ckpt, tensor, NULL, &f, &err);

	if (r >= 0)
		r = weightd_finish(f, &w, &err);
	if (r >= 0)
		r = weightd_weight_map(w, &p, &err);
	weightd_release(w);
	if (r < 0)
		fprintf(stderr, "get %s:%s: %s\n", ckpt, tensor, err.message);
	return r;
}

/* A size on the command line: a number with an optional K, M or G (powers of 1024). 0 with *ret,
 * or -1 for anything else or zero. */
static inline int bench_parse_size(const char *s, unsigned long long *ret)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'G':
	case 'g':
		v <<= 30;
		end++;
		break;
	case 'M':
	case 'm':
		v <<= 20;
		end++;
		break;
	case 'K':
	case 'k':
		v <<= 10;
		end++;
		break;
	default: break;
	}
	if (*end || v == 0)
		return -1;
	*ret = v;
	return 0;
}

/* The path of a tool: the environment variable `env` when set, else `rel` beside this program. */
static inline void bench_find_tool(const char *env, const char *rel, char *out, size_t cap)
{
	char self[PATH_MAX];
	ssize_t n;

	if (getenv(env)) {
		snprintf(out, cap, "%s", getenv(env));
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	snprintf(out, cap, "%s/%s", dirname(self), rel);
}

/* A declared unit submitted, validated and bound; the first failing call's return. */
static inline int bench_unit_bind(weightd_unit *u, weightd_error *err)
{
	int r = weightd_unit_submit(u, err);

	if (r >= 0)
		r = weightd_unit_validate(u, err);
	if (r >= 0)
		weightd_unit_bind(u);
	return r;
}

/* A unit of every tensor d lists (checkpoint `ckpt`), each slot declared with the tensor's dtype
 * and shape, submitted and validated. *ret is the unit (NULL if none was made), the caller's to
 * free whether or not it succeeded; the return is the first failing call's. */
static inline int bench_unit_described(weightd_client *c, const char *ckpt,
				       const weightd_description *d, weightd_unit **ret,
				       weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, err);

	for (size_t i = 0; r >= 0 && i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		r = weightd_unit_slot(u, t->name, t->dtype, t->shape, t->ndim, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, t->name, ckpt, t->name, NULL, err);
	}
	if (r >= 0)
		r = weightd_unit_submit(u, err);
	if (r >= 0)
		r = weightd_unit_validate(u, err);
	*ret = u;
	return r;
}

/* Run child(arg, fd) in a forked process that writes `len` bytes of its result to fd and exits;
 * those bytes into out. 0 when they all came and the child exited 0, else -1. */
static inline int bench_child_result(void (*child)(int arg, int fd), int arg, void *out,
				     size_t len)
{
	int p[2], status;
	pid_t pid;
	ssize_t k;

	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		child(arg, p[1]);
		_exit(1);
	}
	close(p[1]);
	k = read(p[0], out, len);
	close(p[0]);
	waitpid(pid, &status, 0);
	return k == (ssize_t)len && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Is argv[*i] "--runs" followed by a number from 1 to max? Then *ret is that number, *i has moved
 * past it and the answer is true; else nothing changes. */
static inline bool bench_arg_runs(int argc, char **argv, int *i, int max, int *ret)
{
	if (strcmp(argv[*i], "--runs") != 0 || *i + 1 >= argc || atoi(argv[*i + 1]) <= 0 ||
	    atoi(argv[*i + 1]) > max)
		return false;
	*ret = atoi(argv[++*i]);
	return true;
}

/*
 * The arguments of a benchmark over one size: `--size BYTES` (at least `min_size`, rounded down
 * to a multiple of `unit`) and `--runs R` (1..max). false, after printing the usage, on anything
 * else.
 */
static inline bool bench_args_size_runs(int argc, char **argv, unsigned long long min_size,
					unsigned long long unit, int max, uint64_t *size,
					int *runs)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--size") == 0 && i + 1 < argc &&
		    strtoull(argv[i + 1], NULL, 0) >= min_size)
			*size = strtoull(argv[++i], NULL, 0);
		else if (!bench_arg_runs(argc, argv, &i, max, runs)) {
			fprintf(stderr, "usage: %s [--size BYTES] [--runs R (1..%d)]\n", argv[0], max);
			return false;
		}
	}
	*size = *size / unit * unit;
	return true;
}

#ifdef WD_BENCH_WEIGHTD
/* What every benchmark does first: a daemon that goes away is an error, not a signal; the
 * weightd started is the one built beside it unless WD_WEIGHTD names another. */
static inline void bench_prepare(void)
{
	signal(SIGPIPE, SIG_IGN);
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
}
#endif

#endif
