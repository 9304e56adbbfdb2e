/* SPDX-License-Identifier: Apache-2.0 */
/* source_int.h - a checkpoint source's insides, shared by source.c (opening, parsing, lookup),
 * source_pin.c (the pins checked on every read) and source_remote.c (sources in object storage
 * or on a web server). */
#ifndef WD_SOURCE_INT_H
#define WD_SOURCE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "source.h"
#include "tensor.h"
#include "wd_hashidx.h"

struct wd_file {
	char *name;  /* relative to the source path; "" for a single-file source */
	char *path;  /* absolute path (symlinks kept) that wd_source_check stats */
	int fd;	     /* -1 for a remote object */
	struct wd_file_id id;	      /* remote: size only */
	struct wd_remote_object *obj; /* remote: the object as pinned; NULL locally */
	uint8_t head[8];	      /* remote safetensors: the 8-byte header length, once read */
	bool head_read;
	uint8_t *prefix;   /* remote: the object's first bytes, read with its pin, until its header
			      is parsed (then freed); NULL when none were kept */
	size_t prefix_len;
};

struct wd_source {
	char *name;
	char *path;
	enum wd_source_kind kind;
	struct wd_tensor_table table;
	const struct wd_tensor_info **by_name; /* table entries sorted by name */
	/* by_name positions by name hash: a unit of 100,000 plain entries finds each of its tensors
	 * with one probe, not 17 string comparisons across a table of 100,000 names (cap 0 when
	 * there was no memory for it: lookups then search by_name) */
	struct wd_hashidx index;
	struct wd_remote *remote; /* NULL for a local source */
	struct wd_file *files;
	size_t n_files;
	uint64_t bytes;
	uint8_t identity[32]; /* wd_source_identity, computed once the files are pinned */
	int keep_files;	      /* wd_source_keep_files: the paths are no longer compared (atomic) */
	int drop_cache;	      /* wd_source_set_drop_cache (atomic) */
};

/* A stat's modification time in nanoseconds (what a pin records). */
static inline int64_t wd_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* --- source.c, for source_remote.c ------------------------------------------------------- */

/* Open every shard model.safetensors.index.json (json, len bytes) names, parse their headers and
 * check them against it. `dir` names the directory in messages. */
int wd_source_open_sharded(struct wd_source *src, const char *dir, const char *json, size_t len,
			   const struct wd_limits *lim, weightd_error *err);

/* --- source_remote.c --------------------------------------------------------------------- */

/* Open the remote location `url` into src (kind, files, table). */
int wd_source_remote_open(struct wd_source *src, const char *url,
			  const struct wd_source_remote_conf *rc, const struct wd_limits *lim,
			  weightd_error *err);
/* Remote objects pinned, or shard headers read, at once during admission. */
#define WD_SOURCE_REMOTE_WIDTH 16u
/* A member's first bytes read with its pin (its safetensors header, mostly), for the first
 * WD_SOURCE_REMOTE_PREFIX_FILES members of a directory: 32 MiB held at most while admitting. */
#define WD_SOURCE_REMOTE_PREFIX	      (128u << 10)
#define WD_SOURCE_REMOTE_PREFIX_FILES 256u
/* The read-ahead window of a thread's small reads of a remote object (recipes' inputs). */
#define WD_SOURCE_REMOTE_READAHEAD (1u << 20)

/* Pin members names[0..n) of a remote directory side by side and append them to src->files in
 * order, up to the first that fails (whose error is returned); *ret_added says how many. */
int wd_source_remote_members(struct wd_source *src, char *const *names, size_t n, size_t *ret_added,
			     weightd_error *err);
/* Pin member `name` of a remote directory and append it to src->files. */
int wd_source_remote_member(struct wd_source *src, const char *name, weightd_error *err);
/* The 8 bytes a remote safetensors object starts with (read once, then kept). */
int wd_source_remote_head(struct wd_source *src, uint32_t file, uint8_t ret[8], weightd_error *err);
/* Parse file `file`'s safetensors header into table, by two range reads. */
int wd_source_remote_read_st(struct wd_source *src, uint32_t file, const struct wd_limits *lim,
			     struct wd_tensor_table *table, weightd_error *err);
/* Is the object still the one pinned (one request)? */
int wd_source_remote_check(const struct wd_source *src, uint32_t file, weightd_error *err);
/* Read [off, off + len) of a remote file (bounds checked by the caller). */
int wd_source_remote_pread(const struct wd_source *src, uint32_t file, void *buf, size_t len,
			   uint64_t off, weightd_error *err);
/* Feed the identity digest with the remote files' pins. */
struct wd_sha256;
void wd_source_remote_identity(const struct wd_source *src, struct wd_sha256 *s);
/* Free what a remote source holds beyond the common fields. */
void wd_source_remote_free(struct wd_source *src);

#endif
