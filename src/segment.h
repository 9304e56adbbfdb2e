/* SPDX-License-Identifier: Apache-2.0 */
/* segment.h - the files that hold weights: POSIX shared memory in /dev/shm, or files in a
 * private tmpfs directory (segment_dir). */
#ifndef WD_SEGMENT_H
#define WD_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define WD_SEGMENT_NAME_MAX 200
/* Hex digits of the random part of a name weightd makes: "/<prefix>.<32 hex digits>". */
#define WD_SEGMENT_RANDOM_HEX 32
/* Longest segment_dir, with room for a name under it within PATH_MAX. */
#define WD_SEGMENT_DIR_MAX 3800

struct wd_segment {
	int fd;        /* O_RDWR, owned; -1 once sealed or closed */
	int ro_fd;     /* O_RDONLY on the same object: what clients get (dup'd/sent) */
	uint64_t size;
	char name[WD_SEGMENT_NAME_MAX]; /* "/prefix.xxxx" as given to shm_open */
};

/*
 * Where every other function of this module creates, opens, lists and removes names. NULL or "":
 * /dev/shm, with shm_open's semantics (the default). Otherwise `dir` must be a directory on a
 * tmpfs owned by this process's effective uid and not writable by group or others, so nobody
 * else can create, replace or remove a name in it: -WEIGHTD_E_NOT_FOUND, _INVALID_ARGUMENT or
 * _PERMISSION_DENIED with a message naming the directory and the fix otherwise. The directory is
 * held open, so later renames of its path do not matter. Called once at start, before any other
 * call of this module and before other threads use it.
 */
int wd_segment_set_dir(const char *dir, weightd_error *err);

/* The directory names live in: "/dev/shm" or segment_dir. Valid until the next set_dir. */
const char *wd_segment_dir(void);

/* True when names live in segment_dir: only weightd's uid can create names there, so nothing
 * under the prefix can be foreign. */
bool wd_segment_dir_private(void);

/* The page size the kernel backs segments with there: 2 MiB (the huge page size) when it gives
 * huge pages to a segment that spans one, else 4096. Made by a sparse probe file under `prefix`,
 * removed at once. */
uint64_t wd_segment_page_size(const char *prefix);

/*
 * Create a new shm object `name` (must start with '/', no other '/') with mode 0600, O_EXCL, and
 * reserve `size` bytes with posix_fallocate so a full /dev/shm fails here
 * (-WEIGHTD_E_RESOURCE_EXHAUSTED naming bytes needed) instead of as SIGBUS later. size 0 is allowed
 * (nothing reserved). On failure nothing is left behind (the name is unlinked).
 * -WEIGHTD_E_INVALID_ARGUMENT for a malformed name or one already in use (that object is left
 * alone).
 */
int wd_segment_create(const char *name, uint64_t size, struct wd_segment *ret, weightd_error *err);

/*
 * What weightd creates: a new object named "/<prefix>." + 32 lowercase hex digits of getrandom(),
 * so the name says nothing about the weight (the identity key stays in the daemon and its state
 * index) and nobody can take it first. A name already in use (EEXIST) is drawn again. The name is
 * in ret->name. Otherwise as wd_segment_create.
 */
int wd_segment_create_unique(const char *prefix, uint64_t size, struct wd_segment *ret,
			     weightd_error *err);

/* Is `name` ("/..." as shm_open takes it) one weightd makes under `prefix`? Only such names are
 * adopted from the state index, unlinked on eviction, or purged. */
bool wd_segment_name_matches(const char *prefix, const char *name);

/* Like wd_segment_create_unique (a random name under prefix), but the object is sized with
 * ftruncate and nothing is reserved: pages come as the weights packed into it are written
 * (a write into a full /dev/shm fails with ENOSPC; nothing maps it writable). Callers check
 * wd_segment_shm_free first. */
int wd_segment_create_sparse(const char *prefix, uint64_t size, struct wd_segment *ret,
			     weightd_error *err);

/* Bytes the segments' filesystem has free for this process (statvfs f_bavail), UINT64_MAX if it
 * cannot say. */
uint64_t wd_segment_shm_free(void);

/* Give the pages of [off, off + len) back to the system (FALLOC_FL_PUNCH_HOLE) while the object
 * lives: an evicted weight's memory. 0 or -WEIGHTD_E_IO. */
int wd_segment_punch(const struct wd_segment *seg, uint64_t off, uint64_t len);

/* Drop write access: close the O_RDWR fd after filling. ro_fd stays. */
void wd_segment_seal(struct wd_segment *seg);
/* Write access again to a sealed segment (one that takes more weights over time): fd reopened
 * from ro_fd, the same object whatever its name now points at. 0 (also when not sealed), or
 * -WEIGHTD_E_IO / -WEIGHTD_E_RESOURCE_EXHAUSTED (out of descriptors) with err set. */
int wd_segment_unseal(struct wd_segment *seg, weightd_error *err);

/* A read-only open file description of the segment's object of its own (through ro_fd, so it
 * is the very object), close-on-exec: what a client gets, so that the locks it takes on it are
 * its own (holdlock.h). The fd, or a negative weightd code (errno set: EMFILE, ENFILE). */
int wd_segment_open_ro(const struct wd_segment *seg);
/* Re-open an existing object read-only (re-adoption after a restart): fills ro_fd and size. */
int wd_segment_adopt(const char *name, struct wd_segment *ret, weightd_error *err);

/* Close fds (not the name). Accepts NULL / closed. */
void wd_segment_close(struct wd_segment *seg);

/* shm_unlink(name); mappings and fds elsewhere stay valid. 0 or -WEIGHTD_E_IO (ENOENT is success).
 */
int wd_segment_unlink(const char *name);

/*
 * Call fn(name, size, arg) for every regular file in the segments' directory whose name starts
 * with "<prefix>." (the name passed to fn has a leading '/'). Stops at fn's first nonzero return
 * and returns it.
 */
int wd_segment_list(const char *prefix, int (*fn)(const char *name, uint64_t size, void *arg),
		    void *arg);

/* Is `name` of the form earlier versions of weightd used, "/<prefix>." + the 64 hex digits of a
 * weight's key? Such objects, when this uid owns them, are old leftovers of ours: never adopted
 * (a name derived from the key could have been taken first), but removed at start and by purge,
 * so an upgrade leaves nothing behind. */
bool wd_segment_name_legacy(const char *prefix, const char *name);

/* Is the object `name` a regular file owned by this process's effective uid? */
bool wd_segment_owned(const char *name);

/*
 * Objects under `prefix` that weightd did not make: a name not of wd_segment_name_matches' form, or
 * not owned by this uid. They are never adopted, served or unlinked; fn(name, arg) (may be NULL)
 * is called for each so the caller can report them. Returns how many, or a negative code. At most
 * `max_entries` directory entries are read (0: all), so a directory anyone can fill costs a
 * bounded time; *ret_partial (may be NULL) tells whether the count stopped there.
 */
int wd_segment_foreign(const char *prefix, uint64_t max_entries, bool *ret_partial,
		       void (*fn)(const char *name, void *arg), void *arg);

/* Unlink every object under `prefix` whose name weightd makes (wd_segment_name_matches), and
 * legacy names this uid owns; others are left alone. Returns how many, or a negative code. */
int wd_segment_purge(const char *prefix);
/*
 * The bytes of segment `name` that processes have locked (holdlock.h: what they map), in
 * *ret_bytes: 0, or a negative weightd code (-WEIGHTD_E_NOT_FOUND when there is no such object).
 */
int wd_segment_locked_bytes(const char *name, uint64_t *ret_bytes);
/* Over every segment weightd makes under prefix: how many have locked bytes, and how many bytes
 * in all (wd_segment_locked_bytes). 0 or a negative weightd code. */
int wd_segment_locked(const char *prefix, uint64_t *ret_segments, uint64_t *ret_bytes);

/* A prefix is 1..64 characters of [A-Za-z0-9_.-], not starting with '.'. */
int wd_segment_prefix_valid(const char *prefix);

#endif
