/* SPDX-License-Identifier: Apache-2.0 */
/* preload.h - checkpoints the daemon keeps resident itself (`preload = yes` in their section). */
#ifndef WD_PRELOAD_H
#define WD_PRELOAD_H

#include <stdbool.h>
#include <stddef.h>

struct daemon;

/*
 * Bring the daemon's own holds in line with the catalog. Every ready checkpoint whose section says
 * `preload = yes` gets each of its tensors materialized as stored (full selection, the weight a
 * client asking for that tensor gets) and held by the daemon: one reference per weight, counted in
 * status like a client's, so the weight is never evicted. Holds on a checkpoint that is no longer
 * current (removed, replaced by a new generation, preload turned off) are given back, and the
 * weights become ordinary unreferenced ones (a replaced generation's are dropped at once).
 * Called once the daemon serves, and after every reload. Main thread.
 */
void preload_sync(struct daemon *d);

struct csource;
/* How far the daemon's holds on cs (this generation) are: tensors held, of how many, and how many
 * could not be materialized. False when cs has no preload going (not preloaded, not ready yet).
 * Linear in the preloaded checkpoints. */
bool preload_progress(const struct daemon *d, const struct csource *cs, size_t *ret_held,
		      size_t *ret_total, size_t *ret_failed);
/* Give back every hold (shutdown, after the worker pool has stopped). */
void preload_free(struct daemon *d);

#endif
