/* SPDX-License-Identifier: Apache-2.0 */
/* parallel.h - a loop over independent items run on a few short-lived threads. */
#ifndef WD_PARALLEL_H
#define WD_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Call fn(arg, i) for i = 0 .. n-1 on up to `threads` threads, the caller's among them. Indices
 * are claimed in increasing order, one at a time; once a call returns false no further index is
 * claimed (calls already running finish). Returns when every claimed call has returned, having
 * claimed the indices below the returned count. Helper threads run with every signal blocked; if
 * none can be started, the caller runs the loop alone. fn must be safe to run concurrently with
 * itself for different indices.
 */
size_t wd_parallel_for(size_t n, unsigned threads, bool (*fn)(void *arg, size_t i), void *arg);

/* Threads worth asking wd_parallel_for for: the CPUs online, at most 8. */
unsigned wd_parallel_width(void);

#endif
