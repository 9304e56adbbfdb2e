/* SPDX-License-Identifier: Apache-2.0 */
/* fill.h - filling one weight's bytes into its segment on a worker: in chunks shared with the
 * other workers when the weight is large, else in order. */
#ifndef WD_FILL_H
#define WD_FILL_H

#include <stdint.h>

#include "digest.h"
#include "error.h"
#include "pool.h"
#include "recipe.h"
#include "sink.h"

/*
 * Worker thread: write plan's nbytes of output at [base, base + nbytes) of fd (the segment's
 * writable fd) and compute their content digest of algorithm alg (digest.h) into ret_digest.
 *
 * A weight above WD_DIGEST_CHUNK whose plan produces ranges independently (wd_plan_splittable)
 * is filled chunk by chunk by this worker and by helpers it posts at the back of `pool`'s
 * queue, up to one per other worker (so other workers finish the weights queued before joining
 * this one): whoever is free claims the next chunk, fills it with its
 * own pread/pwrite or cast and hashes it, and the chunk digests are composed at the end. A
 * worker slowed by a busy core simply fills fewer chunks. Any other weight is filled in order
 * here, its SHA-256 (if that is the algorithm) on the scratch's hasher thread.
 *
 * progress (may be NULL) gets the bytes written added as they are. *ret_bytes_read gets the
 * checkpoint bytes read added. Returns 0, or a negative code with err set (the first failure
 * of any chunk; no chunk is started after one failed). Returns only when no helper touches
 * anything of this call any more.
 */
int fill_weight(struct pool *pool, const struct wd_plan *plan, int fd, uint64_t base,
		uint64_t nbytes, enum wd_digest_alg alg, uint64_t *progress,
		struct wd_scratch *scratch, uint8_t *ret_digest, uint64_t *ret_bytes_read,
		weightd_error *err);

#endif
