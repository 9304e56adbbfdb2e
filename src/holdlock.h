/* SPDX-License-Identifier: Apache-2.0 */
/* holdlock.h - the kernel's record of what a process maps: OFD byte-range read locks on a
 * segment's open file description, taken over held weights and tested before a range changes
 * (holdlock.c). */
#ifndef WD_HOLDLOCK_H
#define WD_HOLDLOCK_H

#include <stddef.h>
#include <stdint.h>

/*
 * The contract between libweightd and weightd, part of the wire protocol:
 *  - every segment fd weightd sends a client is that client's own open file description of the
 *    segment (one per client and segment, never weightd's or another client's), with a read lock
 *    already taken over the reply's weights in it, in runs as wd_holdlock_runs forms them;
 *  - libweightd keeps, on the one fd it keeps per segment, a read lock over every weight it
 *    holds (runs of held weights closer than WD_HOLD_GAP joined), and drops a range only when
 *    no weight of its own lies under it any more;
 *  - weightd never punches, reuses or unlinks a range that another open file description has
 *    locked (wd_holdlock_test).
 * A lock lives as long as its open file description, which a mapping keeps alive after the fd
 * is closed, and the kernel keeps it whatever happens to weightd or to the connection.
 */

/* Held ranges this close are locked as one run: the kernel keeps one lock per run (its lock
 * operations walk every lock of the file, so a lock per weight costs time quadratic in the
 * weights held), and a weight weightd packs in such a gap is smaller than it. */
#define WD_HOLD_GAP 4096u

struct wd_hold_range {
	uint64_t off, len;
};

/* Read-lock / unlock [off, off + len) on fd's open file description; 0 or -errno. len 0 does
 * nothing. */
int wd_holdlock_lock(int fd, uint64_t off, uint64_t len);
int wd_holdlock_unlock(int fd, uint64_t off, uint64_t len);
/*
 * Does an open file description other than fd's hold a lock on any byte of [off, off + len)?
 * 1 (and the lock found in ret_start and ret_end when not NULL, clipped to the range), 0, or
 * -errno.
 */
int wd_holdlock_test(int fd, uint64_t off, uint64_t len, uint64_t *ret_start, uint64_t *ret_end);
/*
 * Sort r[0..n) by offset and read-lock them on fd as runs (ranges closer than WD_HOLD_GAP
 * joined, zero-length ones skipped). Returns the number of runs locked, or -errno (what was
 * locked before the failure stays locked).
 */
int wd_holdlock_runs(int fd, struct wd_hold_range *r, size_t n);
/*
 * The bytes of [0, size) that other open file descriptions have locked (overlaps counted once),
 * in at most `max_tests` lock tests: 0, or -errno; -E2BIG when the tests ran out (the figures
 * then count what was found).
 */
int wd_holdlock_count(int fd, uint64_t size, uint64_t max_tests, uint64_t *ret_bytes,
		      uint64_t *ret_runs);

#endif
