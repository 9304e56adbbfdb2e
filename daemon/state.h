/* state.h - the state index: one small record per weight in the state directory, so a restarted
 * daemon re-adopts its segments instead of rereading checkpoints. */
#ifndef WD_STATE_H
#define WD_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "dtype.h"
#include "error.h"
#include "wd_limits.h"

struct state_record {
	uint8_t key[32];
	uint8_t digest[32];  /* wd_digest_len(digest_alg) bytes used */
	enum wd_digest_alg digest_alg; /* records written before it existed: SHA-256 */
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint64_t nbytes;
	char segment[256];   /* shm name, "/prefix.keyhex" */
	char label[512];
	char source[128];
	uint64_t generation;
	uint64_t ino;        /* the segment's inode when written (0: not recorded) */
};

/*
 * Records live in DIR/INSTANCE/<keyhex>.json, written to a temp file and renamed, so a crash leaves
 * either the old state or the new. dir "" disables the index (every function is then a no-op).
 */
/* Create DIR/INSTANCE (mode 0700). */
int state_init(const char *dir, const char *instance, struct wd_error *err);
/* Write a record (thread-safe: any worker may call it). */
int state_write(const char *dir, const char *instance, const struct state_record *rec,
		struct wd_error *err);
/* Remove the record for key (ENOENT is fine). */
void state_remove(const char *dir, const char *instance, const uint8_t key[32]);

/*
 * At start: for every record, call adopt(rec, arg); a nonzero return (segment missing, wrong size,
 * digest mismatch) removes the record. Then unlink every segment under the prefix that no adopted
 * record names. Returns the number adopted; *ret_removed counts segments unlinked.
 */
int state_recover(const char *dir, const char *instance,
		  int (*adopt)(const struct state_record *rec, void *arg), void *arg,
		  int *ret_removed);

/* Remove every record of an instance (weightd --purge). */
int state_purge(const char *dir, const char *instance);

#endif
