/* SPDX-License-Identifier: Apache-2.0 */
/* state.h - the state index: one small record per shared-memory segment in the state directory,
 * listing the weights it holds, so a restarted daemon re-adopts its segments instead of rereading
 * checkpoints. */
#ifndef WD_STATE_H
#define WD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "dtype.h"
#include "error.h"
#include "wd_limits.h"

/* One weight of a segment record. */
struct state_weight {
	uint8_t key[32];
	uint8_t digest[32];  /* wd_digest_len(digest_alg) bytes used */
	enum wd_digest_alg digest_alg; /* records written before it existed: SHA-256 */
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint64_t nbytes;
	uint64_t offset;     /* where in the segment it starts */
	char *label;         /* borrowed when writing; owned by the record when read */
};

struct state_segment {
	char segment[256];   /* shm name, "/prefix.<random hex>" */
	char source[128];    /* the checkpoint its weights come from (first source) */
	uint64_t generation;
	uint64_t size;       /* bytes of the object */
	uint64_t ino;        /* its inode when written (0: not recorded) */
	struct state_weight *weights;  /* when read (state_write asks for them one at a time) */
	size_t n_weights;
};

/* The weights of a record being written, one per call: fill *w and return true, or return
 * false after the last. */
typedef bool (*state_next_weight)(void *arg, struct state_weight *w);

/* Most weights one record may list (a record is read whole before anything is adopted). */
#define STATE_MAX_WEIGHTS 65536

/*
 * Records live in DIR/INSTANCE/<segment name>.json, written to a temp file and renamed, so a crash
 * leaves either the old state or the new. dir "" disables the index (every function is then a
 * no-op).
 */
/* Create DIR/INSTANCE (mode 0700). */
int state_init(const char *dir, const char *instance, weightd_error *err);
/* Write (or replace) the record of a segment: rec's header fields, then each weight next(arg)
 * gives (rec->weights is not read). The text is streamed through a buffer of fixed size, so a
 * record of 65,536 weights costs no more memory than one of ten. */
int state_write(const char *dir, const char *instance, const struct state_segment *rec,
		state_next_weight next, void *arg, weightd_error *err);
/* Add one weight to the record of `segment` that state_write wrote (and earlier appends grew),
 * in place: its cost is the weight's, not the record's. An error when the record is missing or
 * does not end as written (the caller then writes it whole). */
int state_append(const char *dir, const char *instance, const char *segment,
		 const struct state_weight *w, weightd_error *err);
/* Remove the record of segment `name` (ENOENT is fine). */
void state_remove(const char *dir, const char *instance, const char *segment);

/*
 * At start: for every record, call adopt(rec, arg), which returns how many of its weights it took;
 * 0 or less (segment missing, wrong size or inode, every weight refused) removes the record. Then
 * unlink every segment under the prefix that no adopted record names. Returns the number of
 * weights adopted; *ret_removed counts segments unlinked.
 */
int state_recover(const char *dir, const char *instance,
		  int (*adopt)(const struct state_segment *rec, void *arg), void *arg,
		  int *ret_removed);

/* The segments a recovery left in place, not adopted, because processes mapped them. */
struct state_kept {
	char **names;
	size_t n;
};

/* state_recover, the names of the segments it left for their mappers into *kept (freed with
 * state_kept_free): state_kept_recheck unlinks each once nobody maps it any more, so none stays
 * behind until the next start. */
int state_recover_keep(const char *dir, const char *instance,
		       int (*adopt)(const struct state_segment *rec, void *arg), void *arg,
		       int *ret_removed, struct state_kept *kept);

/* Unlink the kept segments no process maps any more (their locks say so); returns how many are
 * still kept. */
size_t state_kept_recheck(struct state_kept *kept);
void state_kept_free(struct state_kept *kept);

/* Free what a read record owns (labels, weights). */
void state_segment_fini(struct state_segment *rec);

/* Remove every record of an instance (weightd --purge). */
int state_purge(const char *dir, const char *instance);

/*
 * Whether the last run of the instance stopped cleanly: state_mark_clean(true) at a clean stop
 * leaves a marker that state_was_clean finds; state_mark_clean(false) at start removes it, so a
 * daemon killed in between is seen as such by the next start (which then verifies what it
 * re-adopts). Without a state directory every stop is clean.
 */
bool state_was_clean(const char *dir, const char *instance);
void state_mark_clean(const char *dir, const char *instance, bool clean);

#endif
