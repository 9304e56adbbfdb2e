/* SPDX-License-Identifier: Apache-2.0 */
/* shmscan.h - counting the objects under the /dev/shm prefix that weightd did not make, on a
 * thread of its own, so no request pays for a directory anyone can fill. */
#ifndef WD_SHMSCAN_H
#define WD_SHMSCAN_H

#include <stdbool.h>
#include <stdint.h>

struct shmscan;

/* A scanner for names under `instance` (copied). Starts no thread until the first poke. NULL on
 * out of memory. */
struct shmscan *shmscan_new(const char *instance);

/*
 * Main thread, O(1): ask for a new look when the last one began WD_FOREIGN_SCAN_INTERVAL_MS ago
 * or more and none is running; otherwise nothing. A look reads at most WD_FOREIGN_SCAN_ENTRIES
 * directory entries, at a lower CPU priority, and logs a warning when it finds more foreign
 * objects than the look before. Accepts NULL.
 */
void shmscan_poke(struct shmscan *s);

/* A look on the calling thread, now: for the start, before any client is served, so the first
 * status already counts what was there. Accepts NULL. */
void shmscan_look_now(struct shmscan *s);

/* What the last finished look counted (0 before the first, or for NULL). *ret_partial (may be
 * NULL): that look stopped at its cap, so there may be more. */
uint64_t shmscan_count(struct shmscan *s, bool *ret_partial);

/* Wait for a running look to end, stop the thread, free. Accepts NULL. */
void shmscan_free(struct shmscan *s);

#endif
