/* SPDX-License-Identifier: Apache-2.0 */
/* give.c - the segment fds a reply hands a client: its own description of each segment (one per
 * segment, kept by its holds, so every fd it gets for a segment is the one it keeps and locks on),
 * locked over the reply's weights before it leaves, so that they are protected from the moment
 * they are sent, whatever happens to weightd before the client reads the reply. */
#include "give.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "holdlock.h"
#include "holds.h"

int give_fds(struct holds *h, struct cache_segment *const *segs, size_t n, size_t n_entries,
	     give_entry_fn *entry, void *arg, int *fds, weightd_error *err)
{
	struct wd_hold_range *ranges = NULL, *all = NULL;
	size_t *start = NULL;
	uint32_t *seg_of = NULL;
	int r = 0;

	ranges = malloc((n_entries ? n_entries : 1) * sizeof(*ranges));
	all = malloc((n_entries ? n_entries : 1) * sizeof(*all));
	seg_of = malloc((n_entries ? n_entries : 1) * sizeof(*seg_of));
	start = calloc(n + 1, sizeof(*start));
	if (!ranges || !all || !seg_of || !start) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory answering the unit");
		goto out;
	}
	/* the entries grouped by segment (a counting sort: linear however many segments), each
	 * weight read once (in a large unit each is a wait on memory) */
	for (size_t i = 0; i < n_entries; i++) {
		entry(arg, i, &seg_of[i], &all[i].off, &all[i].len);
		start[seg_of[i] + 1]++;
	}
	for (size_t k = 0; k < n; k++)
		start[k + 1] += start[k];
	for (size_t i = 0; i < n_entries; i++)
		ranges[start[seg_of[i]]++] = all[i];
	/* start[k] is now where segment k's ranges end */
	holds_segment_fds_trim(h);
	for (size_t k = 0; k < n; k++) {
		size_t from = k ? start[k - 1] : 0;
		int fd = holds_segment_fd(h, segs[k]), e;

		if (fd < 0) {
			char why[300];

			if (errno == EMFILE || errno == ENFILE)
				wd_nofile_text(why, sizeof(why), "weightd",
					       "LimitNOFILE= in weightd.service");
			else
				snprintf(why, sizeof(why), "%s", strerror(errno));
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "resource exhausted: weightd cannot open the client's own "
					 "descriptor of segment %s: %s", segs[k]->seg.name, why);
			goto out;
		}
		fds[k] = fd;
		e = wd_holdlock_runs(fd, ranges + from, start[k] - from);
		if (e < 0) {
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "resource exhausted: weightd cannot lock the weights of segment "
					 "%s for the client: %s", segs[k]->seg.name, strerror(-e));
			goto out;
		}
	}
out:
	free(ranges);
	free(all);
	free(seg_of);
	free(start);
	return r;
}
