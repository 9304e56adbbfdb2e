/* sink.h - writing a weight's bytes into its segment in order, hashing them on the way. */
#ifndef WD_SINK_H
#define WD_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

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
	uint64_t size;
	uint64_t written;
	struct wd_sha256 sha;
	uint64_t *progress;
};

int wd_sink_init(struct wd_sink *s, int fd, uint64_t size);
int wd_sink_write(struct wd_sink *s, const void *buf, size_t len, struct wd_error *err);
/* All `size` bytes must have been written (-WD_E_INTERNAL otherwise); gives the digest. */
int wd_sink_finish(struct wd_sink *s, uint8_t digest[WD_DIGEST_LEN], struct wd_error *err);
/* Release the hash state on a failure path. Accepts a finished sink. */
void wd_sink_abort(struct wd_sink *s);

/* A worker's scratch buffers (bounce buffer for pread, conversion space). Kept warm per thread. */
struct wd_scratch {
	uint8_t *buf;
	size_t cap;
	uint8_t *buf2;
	size_t cap2;
};

#define WD_SCRATCH_BYTES (4u << 20)

int wd_scratch_init(struct wd_scratch *s, size_t bytes);
void wd_scratch_free(struct wd_scratch *s);

#endif
