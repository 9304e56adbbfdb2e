/* sink.h - writing a weight's bytes into its segment in order, hashing them on the way. */
#ifndef WD_SINK_H
#define WD_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

/*
 * A hasher is a thread that computes a sink's SHA-256 behind its writes, so hashing (about as
 * costly as the copy itself) runs on another core while the producer reads and writes the next
 * chunks. It owns a ring of WD_HASHER_SLOTS buffers: the producer fills one (wd_sink_buffer) and
 * passes it to wd_sink_write, which queues it for hashing and pwrites it at the same time; the
 * slot comes back once hashed. One hasher serves one sink at a time (a worker's jobs run one
 * after another). Owned by a worker's scratch.
 */
struct wd_hasher;

#define WD_HASHER_SLOTS 4

/*
 * A sink receives the output of a materialization strictly in order from offset 0 to size and
 * pwrites it into fd, updating a SHA-256 of everything written. Writing past `size` is
 * -WD_E_INTERNAL. fd < 0 makes a sink that only hashes (tests, preflight of digests).
 *
 * progress (optional, NULL after wd_sink_init): when set, every write also stores the bytes
 * written so far there with a relaxed atomic store, so another thread (the daemon's main loop
 * answering status) can read how far a materialization is with __atomic_load_n.
 */
struct wd_sink {
	int fd;
	uint64_t base;              /* where in fd the weight starts (0 after wd_sink_init) */
	uint64_t size;
	uint64_t written;
	struct wd_sha256 sha;
	struct wd_hasher *hasher;   /* set by wd_sink_pipeline; NULL: hashed inline */
	uint64_t *progress;
};

int wd_sink_init(struct wd_sink *s, int fd, uint64_t size);
/*
 * Hash this sink on `h` from now on (call it before the first write). Does nothing when h is
 * NULL or busy with another sink, or when the sink is no larger than one slot (nothing would
 * overlap): the sink then hashes inline, with the same result.
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
int wd_sink_write(struct wd_sink *s, const void *buf, size_t len, struct wd_error *err);
/* All `size` bytes must have been written (-WD_E_INTERNAL otherwise); gives the digest. Waits
 * for the hasher, which is then free for another sink. */
int wd_sink_finish(struct wd_sink *s, uint8_t digest[WD_DIGEST_LEN], struct wd_error *err);
/* Release the hash state on a failure path (after waiting for the hasher). Accepts a finished
 * sink. */
void wd_sink_abort(struct wd_sink *s);

/* A worker's scratch buffers (bounce buffer for pread, conversion space) and its hasher. Kept
 * warm per thread. */
struct wd_scratch {
	uint8_t *buf;
	size_t cap;
	uint8_t *buf2;
	size_t cap2;
	struct wd_hasher *hasher;   /* slots of bytes / WD_HASHER_SLOTS; NULL if no thread started */
};

#define WD_SCRATCH_BYTES (4u << 20)

/* Buffers of `bytes` each and a hasher (whose thread failing to start leaves hasher NULL, not
 * an error: sinks then hash inline). 0 or -WD_E_EXHAUSTED. */
int wd_scratch_init(struct wd_scratch *s, size_t bytes);
/* Stops the hasher's thread. Accepts NULL and a zeroed struct. */
void wd_scratch_free(struct wd_scratch *s);

#endif
