/* SPDX-License-Identifier: Apache-2.0 */
/* give.c - the segment fds a reply hands a client: a description of its own per segment, locked
 * over the reply's weights before it leaves, so that they are protected from the moment they are
 * sent, whatever happens to weightd before the client reads the reply. */
#include "give.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "holdlock.h"

int give_fds(struct cache_segment *const *segs, size_t n, size_t n_entries, give_entry_fn *entry,
	     void *arg, int *fds, weightd_error *err)
{
	struct wd_hold_range *ranges = NULL;
	size_t *start = NULL, opened = 0;
	uint32_t *seg_of = NULL;
	int r = 0;

	ranges = malloc((n_entries ? n_entries : 1) * sizeof(*ranges));
	seg_of = malloc((n_entries ? n_entries : 1) * sizeof(*seg_of));
	start = calloc(n + 1, sizeof(*start));
	if (!ranges || !seg_of || !start) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory answering the unit");
		goto out;
	}
	/* the entries grouped by segment (a counting sort: linear however many segments) */
	for (size_t i = 0; i < n_entries; i++) {
		uint64_t off, len;

		entry(arg, i, &seg_of[i], &off, &len);
		start[seg_of[i] + 1]++;
	}
	for (size_t k = 0; k < n; k++)
		start[k + 1] += start[k];
	for (size_t i = 0; i < n_entries; i++) {
		uint64_t off, len;
		uint32_t k;

		entry(arg, i, &k, &off, &len);
		ranges[start[k]++] = (struct wd_hold_range){ off, len };
	}
	/* start[k] is now where segment k's ranges end */
	for (size_t k = 0; k < n; k++) {
		size_t from = k ? start[k - 1] : 0;
		int fd = wd_segment_open_ro(&segs[k]->seg), e;

		if (fd < 0) {
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "resource exhausted: weightd cannot open a descriptor of segment "
					 "%s for the client: %s", segs[k]->seg.name, strerror(errno));
			goto out;
		}
		fds[opened++] = fd;
		e = wd_holdlock_runs(fd, ranges + from, start[k] - from);
		if (e < 0) {
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "resource exhausted: weightd cannot lock the weights of segment "
					 "%s for the client: %s", segs[k]->seg.name, strerror(-e));
			goto out;
		}
	}
out:
	if (r < 0)
		for (size_t k = 0; k < opened; k++)
			close(fds[k]);
	free(ranges);
	free(seg_of);
	free(start);
	return r;
}
