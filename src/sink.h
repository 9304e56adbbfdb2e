/* SPDX-License-Identifier: Apache-2.0 */
/* sink.h - writing a weight's bytes (or one range of them, or a run of whole small weights) into
 * its segment, hashing them on the way: the one place bytes go into a segment. */
#ifndef WD_SINK_H
#define WD_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

/*
 * A hasher is a thread that computes a sink's SHA-256 behind its writes, so hashing (about as
 * costly as the copy itself) runs on another core while the producer reads and writes the next
 * chunks. Only SHA-256 sinks use it: XXH3-128 runs at memory speed, so it is cheaper inline, on
 * bytes still in cache from the read, than handed to another thread. It owns a ring of
 * WD_HASHER_SLOTS buffers: the producer fills one (wd_sink_buffer) and passes it to
 * wd_sink_write, which queues it for hashing and writes it at the same time; the slot comes back
 * once hashed. One hasher serves one sink at a time (a worker's jobs run one
 * after another). Owned by a worker's scratch.
 */
struct wd_hasher;

#define WD_HASHER_SLOTS 4

/*
 * A sink receives `size` bytes strictly in order and pwrites them into fd at base, base + 1, ...,
 * updating the content digest (digest.h: chunked, of algorithm `alg`) of everything written.
 * Writing past `size` is -WEIGHTD_E_INTERNAL. fd < 0 makes a sink that only hashes (tests). A sink
 * over one whole weight gives the weight's digest; a sink over one WD_DIGEST_CHUNK-aligned chunk
 * gives that chunk's digest (for wd_content_compose).
 *
 * progress (optional, NULL after init): when set, every write also adds the bytes written there
 * with a relaxed atomic add, so another thread (the daemon's main loop answering status) can
 * read how far a materialization is with __atomic_load_n, however many sinks fill its ranges.
 */
struct wd_sink {
	int fd;
	uint64_t base;              /* where in fd the sink's range starts */
	uint64_t size;
	uint64_t written;
	struct wd_content dg;
	struct wd_hasher *hasher;   /* set by wd_sink_pipeline; NULL: hashed inline */
	uint64_t *progress;
};

/* A sink over a whole weight at offset 0 with the default digest. 0 or a negative code. */
int wd_sink_init(struct wd_sink *s, int fd, uint64_t size);
/* A sink writing `size` bytes at `base` of fd, with a digest of algorithm alg. */
int wd_sink_init_range(struct wd_sink *s, int fd, uint64_t base, uint64_t size,
		       enum wd_digest_alg alg);
/*
 * Hash this sink on `h` from now on (call it before the first write). Does nothing when h is
 * NULL or busy with another sink, when the sink is no larger than one slot (nothing would
 * overlap), or when its digest is not SHA-256: the sink then hashes inline, with the same result.
 */
void wd_sink_pipeline(struct wd_sink *s, struct wd_hasher *h);
/*
 * Where to produce the next write without a copy: a free slot of the sink's hasher (waiting for
 * one if all are being hashed), *ret_cap bytes long. NULL when the sink hashes inline. Only the
 * last buffer returned may be passed to wd_sink_write, at most once and at most *ret_cap bytes.
 */
uint8_t *wd_sink_buffer(struct wd_sink *s, size_t *ret_cap);
/* Any buffer may be written; a slot from wd_sink_buffer is hashed behind the write, any other
 * buffer after the queued slots, inline. */
int wd_sink_write(struct wd_sink *s, const void *buf, size_t len, weightd_error *err);
/* All `size` bytes must have been written (-WEIGHTD_E_INTERNAL otherwise); writes the digest
 * (wd_digest_len of the sink's algorithm, at most WD_DIGEST_MAX bytes). Waits for the hasher,
 * which is then free for another sink. */
int wd_sink_finish(struct wd_sink *s, uint8_t *digest, weightd_error *err);
/* Release the hash state on a failure path (after waiting for the hasher). Accepts a finished
 * sink. */
void wd_sink_abort(struct wd_sink *s);

/* The most zero bytes written between two parts of a run (a gap of alignment padding). */
#define WD_SINK_GAP_MAX 4096
/* iovecs per pwritev of a run (IOV_MAX): a run of up to half as many parts is one pwritev. */
#define WD_SINK_RUN_IOV 1024

/* One whole weight of a run (wd_sink_write_run). */
struct wd_sink_part {
	uint64_t base;               /* where in fd its bytes go */
	uint64_t size;
	enum wd_digest_alg alg;
	uint8_t *digest;             /* out: its content digest, wd_digest_len(alg) bytes */
	uint64_t *progress;          /* optional: gets size added once its bytes are written */
};

/*
 * Write a run of whole weights: parts[0..n), in ascending order of base with at most
 * WD_SINK_GAP_MAX bytes between the end of one and the base of the next (zeros are written
 * there), take their bytes back to back from buf (parts[0].size bytes, then parts[1].size, ...).
 * Each part is a sink over one weight (wd_sink_init_range, wd_sink_write of its bytes,
 * wd_sink_finish) whose writes are gathered: its digest is the one such a sink gives, and the
 * whole run costs one pwritev per WD_SINK_RUN_IOV iovecs, not one pwrite per weight. Hashed
 * inline (a run's parts are small). 0, or a negative code with err set; then the digests are
 * undefined and any part may be partly written.
 */
int wd_sink_write_run(int fd, const uint8_t *buf, const struct wd_sink_part *parts, size_t n,
		      weightd_error *err);

/* A worker's scratch buffers (bounce buffer for pread, conversion space) and its hasher. Kept
 * warm per thread. */
struct wd_scratch {
	uint8_t *buf;
	size_t cap;
	uint8_t *buf2;
	size_t cap2;
	struct wd_hasher *hasher;   /* slots of bytes / WD_HASHER_SLOTS; NULL if no thread started */
};

/* Small enough that what a read brings in is still in the core's cache when it is hashed and
 * written: steps of several MiB fall out of it and fill slower, with or without hashing. */
#define WD_SCRATCH_BYTES (512u << 10)

/* Buffers of `bytes` each and a hasher (whose thread failing to start leaves hasher NULL, not
 * an error: sinks then hash inline). 0 or -WEIGHTD_E_RESOURCE_EXHAUSTED. */
int wd_scratch_init(struct wd_scratch *s, size_t bytes);
/* Stops the hasher's thread. Accepts NULL and a zeroed struct. */
void wd_scratch_free(struct wd_scratch *s);

#endif
