/* SPDX-License-Identifier: Apache-2.0 */
/* fill.h - new weights' bytes into their segment on a worker: a large weight in chunks shared
 * with the other workers, a run of small ones from one read, any other in order. */
#ifndef WD_FILL_H
#define WD_FILL_H

#include <stdbool.h>
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
 * is filled chunk by chunk by this worker and by helpers it posts behind its owner's other
 * queued tasks (pool_help), up to one per other worker (so other workers finish the weights
 * queued before joining this one): whoever is free claims the next chunk, fills it with its
 * own pread/pwrite or cast and hashes it, and the chunk digests are composed at the end. A
 * worker slowed by a busy core simply fills fewer chunks. Between chunks each of them serves
 * another owner's task that is due first (pool_yield). Any other weight is filled in order
 * here, its SHA-256 (if that is the algorithm) on the scratch's hasher thread.
 *
 * progress (may be NULL) gets the bytes written added as they are. *ret_bytes_read gets the
 * checkpoint bytes read added. Returns 0, or a negative code with err set (the first failure
 * of any chunk; no chunk is started after one failed). Returns only when no helper touches
 * anything of this call any more.
 *
 * A weight that is one byte range of a remote object as stored (wd_plan_file_range over a
 * remote source) is fetched instead: ranges of remote_chunk bytes over up to
 * remote_concurrency connections (fill_remote_set; the node's limit, shared with every other
 * fill), each written straight into fd as it arrives, each WD_DIGEST_CHUNK chunk hashed from fd
 * as soon as it is whole. No helper is posted; progress counts bytes as they arrive. While the
 * server sends nothing for WD_REMOTE_STALL_MS, the worker serves another owner's task that is
 * due (pool_yield), so a hung server does not keep it from everyone else. Recipes
 * over remote sources take the paths above, reading what they need through wd_source_pread.
 */
int fill_weight(struct pool *pool, const struct wd_plan *plan, int fd, uint64_t base,
		uint64_t nbytes, enum wd_digest_alg alg, uint64_t *progress,
		struct wd_scratch *scratch, uint8_t *ret_digest, uint64_t *ret_bytes_read,
		weightd_error *err);

/*
 * Remote checkpoints' payload: range requests in flight at once, node-wide (remote_concurrency,
 * wd_remote_set_limit), the bytes of each (remote_chunk), and the gap between two weights of
 * one object that a request bridges rather than asking again (remote_gap). Main thread; fills
 * started after it use them.
 */
void fill_remote_set(unsigned concurrency, uint64_t chunk, uint64_t gap);

/* The most weights in one run (fill_run), and in one remote run (fill_remote_run: a request
 * carries many, so more of them make fewer and larger requests). */
#define FILL_RUN_MAX	    256
#define FILL_REMOTE_RUN_MAX 8192

/* One weight of a run: its plan, and where its bytes go (out.base: its offset in the segment). */
struct fill_part {
	const struct wd_plan *plan;
	struct wd_sink_part out;
};

/*
 * How many of parts[0..n) from the first form a run (1: none): whole weights, each one byte
 * range of a checkpoint file as it is (wd_plan_file_range), the ranges consecutive in one file
 * and cap bytes at most in all, their offsets in the segment ascending with at most
 * WD_SINK_GAP_MAX bytes between them, at most FILL_RUN_MAX. A DeepSeek shard's tiny tensors in
 * file order, packed in order, are one.
 */
size_t fill_run_length(const struct fill_part *parts, size_t n, size_t cap);

/*
 * How many of parts[0..n) from the first are stored weights of one remote location (each one
 * byte range of an object as it is, wd_plan_file_range over a remote source, of at most
 * WD_DIGEST_CHUNK bytes; any of the location's objects, a checkpoint's shards), at most
 * FILL_REMOTE_RUN_MAX: 0 when parts[0] is not one.
 */
size_t fill_remote_run_length(const struct fill_part *parts, size_t n);

/*
 * Worker thread: fetch a run found by fill_remote_run_length into fd with one coalesced
 * wd_remote_fetch: each object's weights read by as few requests of at most remote_chunk
 * bytes as remote_gap allows (a shard's run of tiny tensors in one request, not one each),
 * those requests spread over up to remote_concurrency connections across the objects, each
 * request's bytes streamed into every weight it covers. A weight one request reads is hashed as
 * it arrives; one that straddles two requests is hashed from the segment once both are done.
 * While the server sends nothing the worker serves other owners' tasks that are due
 * (pool_yield; pool may be NULL). 0, or a negative code with err set: the weights are then to
 * be filled one by one (fill_weight), which says precisely which failed; except after
 * WEIGHTD_E_SOURCE_CHANGED or WEIGHTD_E_CANCELLED, which fail every weight of the run.
 */
int fill_remote_run(struct pool *pool, int fd, const struct fill_part *parts, size_t n,
		    struct wd_scratch *scratch, weightd_error *err);

/*
 * A recipe over remote checkpoints (a shard, cast, concat, stack or dequantization) reads small
 * pieces of its inputs as it runs. Staged, its inputs are fetched first, together: the byte
 * spans the recipes of a group read (wd_plan_spans), an input several of them share taken
 * once, planned by the coalescer (remote_gap, remote_chunk) and fetched over remote_concurrency
 * connections into a memfd; the recipes' reads are then served from it (wd_source_remote_stage)
 * and the memfd is freed when the group is done. A stage holds at most FILL_STAGE_MAX bytes and
 * only what max_temp leaves free (fill_stage_room). fill_weight stages a recipe of its own;
 * one that reads more than a stage holds but one large input and little else (a cast of a whole
 * embedding) is staged a slice per chunk as it is filled in parallel. A recipe that is neither,
 * or finds no room, or whose stage cannot be fetched, reads as it goes (what is wrong with a
 * store it then reports itself).
 */
#define FILL_STAGE_MAX (64u << 20)

struct fill_stage {
	int fd;
	uint64_t bytes;               /* reserved of the room */
	struct wd_stage_span *spans;
	struct wd_stage *reg;
	bool was_open;
};

/* Is p a weight computed by a recipe that reads a remote checkpoint (worth staging)? */
bool fill_stage_wanted(const struct fill_part *p);
/*
 * Worker thread: stage the inputs of the parts from parts[0] whose inputs fit one stage
 * together; returns how many parts that is (at least 1 when n > 0; parts that need no stage
 * count too). Whether or not anything could be staged, the caller fills those parts, then calls
 * fill_stage_end(st). Between the two, fill_weight on this thread stages nothing of its own.
 */
size_t fill_stage_begin(struct pool *pool, const struct fill_part *parts, size_t n,
			struct wd_scratch *scratch, struct fill_stage *st);
void fill_stage_end(struct fill_stage *st);
/* Main thread: the bytes stages may hold together (what max_temp leaves after the running
 * recipes' temporaries). */
void fill_stage_room(uint64_t room);
/* What stages hold now, all workers together. */
uint64_t fill_stage_used(void);

/*
 * Worker thread: fill a run found by fill_run_length into fd (the segment's writable fd): one
 * pread of all of it into scratch->buf, the file checked before and after as wd_plan_execute
 * checks it, then the sink writes every weight (wd_sink_write_run) with its digest. A few
 * syscalls for the run where each weight alone costs a check, a read and a write; once written,
 * the range read leaves the page cache when its source drops it (wd_source_drop_cache). 0, or a
 * negative code with err set: the weights are then to be filled one by one (fill_weight), which
 * says precisely which failed.
 */
int fill_run(int fd, const struct fill_part *parts, size_t n, struct wd_scratch *scratch,
	     weightd_error *err);

#endif
