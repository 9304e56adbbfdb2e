/* SPDX-License-Identifier: Apache-2.0 */
/* bench.h - what the benchmarks share: the monotonic clock in seconds, the median of a run's
 * samples, and one warm get through libweightd. Header-only (static inline functions). */
#ifndef WD_BENCH_H
#define WD_BENCH_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
