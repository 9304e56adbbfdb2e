/* SPDX-License-Identifier: Apache-2.0 */
/* heap.h - the daemon's heap: glibc's malloc tuned at start-up, and room made ahead of a large
 * unit in transparent huge pages. */
#ifndef WD_HEAP_H
#define WD_HEAP_H

#include <stddef.h>

/* At start-up, before anything is allocated: keep freed heap for the next request (mallopt). */
void heap_tune(void);

/*
 * About to make `bytes` of small objects (a large unit's plans, jobs, weights): extend the heap by
 * that much at once and ask for transparent huge pages over it (MADV_HUGEPAGE, for the kernel's
 * "madvise" mode), so that it faults in 2 MiB at a time instead of 4 KiB. Nothing is touched
 * here: pages are only made as the objects are. The heap then keeps that much free memory
 * (the trim threshold is raised to it) until a departing client's memory is trimmed. A no-op
 * for small amounts, when transparent huge pages are off or always on, or when GLIBC_TUNABLES
 * names malloc settings.
 */
void heap_reserve(size_t bytes);

#endif
