/* SPDX-License-Identifier: Apache-2.0 */
/* remote_plan.c - the coalescer: the byte ranges wanted of remote objects planned as few large
 * range requests, a gap bridged where its bytes cost less than one more request. */
#include <errno.h>
#include <stdlib.h>

#include "remote.h"

/* The want order: by object, then offset, then the longer first (it decides a request's end),
 * then as given (a total order: the plan is the same for the same wants). */
static int want_cmp(const void *a, const void *b, void *arg)
{
	const struct wd_remote_want *wants = arg;
	const struct wd_remote_want *x = &wants[*(const size_t *)a];
	const struct wd_remote_want *y = &wants[*(const size_t *)b];

	if (x->obj != y->obj)
		return x->obj < y->obj ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* One more request at the end of *reqs (grown by doubling). 0 or -ENOMEM. */
static int push(struct wd_remote_req **reqs, size_t *n, size_t *cap, struct wd_remote_req q)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		struct wd_remote_req *nr = realloc(*reqs, nc * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		*reqs = nr;
		*cap = nc;
	}
	(*reqs)[(*n)++] = q;
	return 0;
}

int wd_remote_plan(const struct wd_remote_want *wants, size_t n, uint64_t chunk, bool merge,
		   uint64_t gap, size_t *order, struct wd_remote_req **ret, size_t *ret_n)
{
	struct wd_remote_req *reqs = NULL, cur = { 0 };
	size_t nreq = 0, cap = 0;
	bool open = false;
	uint64_t used = 0; /* bytes of cur that some want covers (wants in order: their union) */
	uint64_t covered_to = 0;

	if (chunk == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, n, sizeof(*order), want_cmp, (void *)wants);
	for (size_t i = 0; i < n; i++) {
		const struct wd_remote_want *w = &wants[order[i]];
		uint64_t end = w->off + w->len, at;

		if (w->len == 0)
			continue; /* nothing to read: no request covers it */
		if (open) {
			uint64_t cur_end = cur.off + cur.len;
			uint64_t new_end = end > cur_end ? end : cur_end;
			uint64_t hole = w->off > cur_end ? w->off - cur_end : 0;

			/* (a want may start before the open request: the tail of a long one) */
			if (w->obj == cur.obj && merge && w->off >= cur.off && hole <= gap &&
			    new_end - cur.off <= chunk) {
				uint64_t from = w->off > covered_to ? w->off : covered_to;
				if (end > from)
					used += end - from;
				if (end > covered_to)
					covered_to = end;
				cur.len = new_end - cur.off;
				cur.last = i + 1;
				continue;
			}
			cur.waste = cur.len - used;
			if (push(&reqs, &nreq, &cap, cur) < 0)
				goto oom;
			open = false;
		}
		/* a want longer than a request: whole requests of it alone, its tail opens the next */
		for (at = w->off; end - at > chunk; at += chunk)
			if (push(&reqs, &nreq, &cap,
				 (struct wd_remote_req){ .obj = w->obj, .off = at, .len = chunk,
							 .first = i, .last = i + 1 }) < 0)
				goto oom;
		cur = (struct wd_remote_req){
			.obj = w->obj, .off = at, .len = end - at, .first = i, .last = i + 1
		};
		used = end - at;
		covered_to = end;
		open = true;
		if (!merge) {
			if (push(&reqs, &nreq, &cap, cur) < 0)
				goto oom;
			open = false;
		}
	}
	if (open) {
		cur.waste = cur.len - used;
		if (push(&reqs, &nreq, &cap, cur) < 0)
			goto oom;
	}
	*ret = reqs;
	*ret_n = nreq;
	return 0;
oom:
	free(reqs);
	return -ENOMEM;
}
