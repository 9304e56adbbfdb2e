/* SPDX-License-Identifier: Apache-2.0 */
/* pagedrop.h - dropping file ranges already copied elsewhere from the page cache, off the
 * critical path of the copy: one low-priority thread, adjacent ranges joined (pagedrop.c). */
#ifndef WD_PAGEDROP_H
#define WD_PAGEDROP_H

#include <stdint.h>

/*
 * Start the process's drop thread (once; 0 when running, else a negative errno and drops stay
 * synchronous). It drops at a low priority (nice 10) while no copy runs (wd_pagedrop_pause), so
 * the copies no longer pay for freeing the pages they read, and a job's ranges are joined into
 * one posix_fadvise each.
 */
int wd_pagedrop_start(void);

/* Drop what is queued, then end the thread; later drops are synchronous again. */
void wd_pagedrop_stop(void);

/*
 * Bytes [off, off + len) of fd, a file of `owner`, have been copied elsewhere: evict the pages
 * wholly inside them (POSIX_FADV_DONTNEED; a page shared with a neighbouring range may be about
 * to be read for it). Queued for the thread when it runs, joined with a queued range of the same
 * owner and fd that it touches; else, or when the queue is full (a bound on what may sit in the
 * page cache twice), dropped now on the calling thread. Advisory: failures are ignored.
 * Thread-safe. fd must stay open until wd_pagedrop_forget(owner).
 */
void wd_pagedrop_add(const void *owner, int fd, uint64_t off, uint64_t len);

/* A copy from files starts / ends (worker tasks): queued drops wait while any runs, unless
 * enough bytes wait that they must not. Thread-safe; pairs nest. */
void wd_pagedrop_pause(void);
void wd_pagedrop_resume(void);

/* Forget owner's queued ranges and wait until none of them is being dropped: call it before
 * closing the fds given for owner. Thread-safe. */
void wd_pagedrop_forget(const void *owner);

#endif
