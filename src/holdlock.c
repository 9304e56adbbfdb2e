/* SPDX-License-Identifier: Apache-2.0 */
/* holdlock.c - OFD byte-range read locks over held weights: taken, dropped, tested and counted. */
#include "holdlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A lock of `type` over [off, off + len) (l_pid 0, as OFD locks require); 0, or
 * -EOVERFLOW when the range is past what off_t holds. */
static int range(struct flock *fl, short type, uint64_t off, uint64_t len)
{
	memset(fl, 0, sizeof(*fl));
	if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
		return -EOVERFLOW;
	fl->l_type = type;
	fl->l_whence = SEEK_SET;
	fl->l_start = (off_t)off;
	fl->l_len = (off_t)len;
	return 0;
}

static int set(int fd, short type, uint64_t off, uint64_t len)
{
	struct flock fl;
	int r;

	if (len == 0)
		return 0;
	r = range(&fl, type, off, len);
	if (r < 0)
		return r;
	while (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

int wd_holdlock_lock(int fd, uint64_t off, uint64_t len)
{
	return set(fd, F_RDLCK, off, len);
}

int wd_holdlock_unlock(int fd, uint64_t off, uint64_t len)
{
	return set(fd, F_UNLCK, off, len);
}

int wd_holdlock_test(int fd, uint64_t off, uint64_t len, uint64_t *ret_start, uint64_t *ret_end)
{
	struct flock fl;
	uint64_t s, e;
	int r;

	if (len == 0)
		return 0;
	/* a write lock conflicts with any lock another description holds; fd's own never do */
	r = range(&fl, F_WRLCK, off, len);
	if (r < 0)
		return r;
	while (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	if (fl.l_type == F_UNLCK)
		return 0;
	s = fl.l_start < 0 ? 0 : (uint64_t)fl.l_start;
	e = fl.l_len == 0 ? UINT64_MAX : s + (uint64_t)fl.l_len; /* 0: to the end of the file */
	if (s < off)
		s = off;
	if (e > off + len || e < s)
		e = off + len;
	if (ret_start)
		*ret_start = s;
	if (ret_end)
		*ret_end = e;
	return 1;
}

static int range_cmp(const void *a, const void *b)
{
	const struct wd_hold_range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

int wd_holdlock_runs(int fd, struct wd_hold_range *r, size_t n)
{
	uint64_t start = 0, end = 0;
	bool open = false, sorted = true;
	int runs = 0, e;

	for (size_t i = 1; i < n && sorted; i++)
		sorted = r[i - 1].off <= r[i].off;
	if (!sorted)
		qsort(r, n, sizeof(*r), range_cmp);
	for (size_t i = 0; i < n; i++) {
		uint64_t s = r[i].off, t = r[i].off + r[i].len;

		if (r[i].len == 0)
			continue;
		if (open && s <= end + WD_HOLD_GAP - 1 && s >= start) {
			if (t > end)
				end = t;
			continue;
		}
		if (open) {
			e = wd_holdlock_lock(fd, start, end - start);
			if (e < 0)
				return e;
			runs++;
		}
		start = s;
		end = t;
		open = true;
	}
	if (open) {
		e = wd_holdlock_lock(fd, start, end - start);
		if (e < 0)
			return e;
		runs++;
	}
	return runs;
}

int wd_holdlock_count(int fd, uint64_t size, uint64_t max_tests, uint64_t *ret_bytes,
		      uint64_t *ret_runs)
{
	/* Each lock found splits what is left to test in two: a stack of intervals, depth-first. */
	struct wd_hold_range *stack = NULL;
	size_t n = 0, cap = 0;
	uint64_t bytes = 0, runs = 0, tests = 0;
	int r = 0;

	if (size) {
		stack = malloc(16 * sizeof(*stack));
		if (!stack)
			return -ENOMEM;
		cap = 16;
		stack[n++] = (struct wd_hold_range){ 0, size };
	}
	while (n) {
		struct wd_hold_range iv = stack[--n];
		uint64_t s, e;
		int t;

		if (iv.len == 0)
			continue;
		if (tests++ == max_tests) {
			r = -E2BIG;
			break;
		}
		t = wd_holdlock_test(fd, iv.off, iv.len, &s, &e);
		if (t < 0) {
			r = t;
			break;
		}
		if (t == 0)
			continue;
		bytes += e - s;
		runs++;
		if (n + 2 > cap) {
			struct wd_hold_range *ns = realloc(stack, 2 * cap * sizeof(*ns));

			if (!ns) {
				r = -ENOMEM;
				break;
			}
			stack = ns;
			cap *= 2;
		}
		stack[n++] = (struct wd_hold_range){ iv.off, s - iv.off };
		stack[n++] = (struct wd_hold_range){ e, iv.off + iv.len - e };
	}
	free(stack);
	if (ret_bytes)
		*ret_bytes = bytes;
	if (ret_runs)
		*ret_runs = runs;
	return r;
}
