/* SPDX-License-Identifier: Apache-2.0 */
/* health.h - whether weightd is ready: its preloaded checkpoints resident, its required ones
 * admitted. Main thread only. */
#ifndef WD_HEALTH_H
#define WD_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

struct csource;
struct daemon;
struct peer;

/*
 * Ready means every current `preload = yes` checkpoint is admitted and each of its tensors is
 * resident and held, and every `required = yes` checkpoint is admitted (not failed, not still
 * being admitted). When not ready, `why` (cap bytes, may be NULL) gets one sentence naming the
 * first checkpoints in the way, as `peer` may see them: a checkpoint it may not read is counted,
 * never named (NULL peer: every name). Linear in the checkpoints (times those preloaded).
 */
bool health_ready(const struct daemon *d, const struct peer *peer, char *why, size_t cap);

/* Whether cs alone stands in the way of readiness (the test health_ready makes of each). */
bool health_checkpoint_ready(const struct daemon *d, const struct csource *cs);

#endif
