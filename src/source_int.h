/* SPDX-License-Identifier: Apache-2.0 */
/* source_int.h - a checkpoint source's insides, shared by source.c (opening, parsing, lookup)
 * and source_pin.c (the pins checked on every read). */
#ifndef WD_SOURCE_INT_H
#define WD_SOURCE_INT_H

#include <stdint.h>
#include <sys/stat.h>

#include "source.h"
#include "tensor.h"
#include "wd_hashidx.h"

struct wd_file {
	char *name;  /* relative to the source path; "" for a single-file source */
	char *path;  /* absolute path (symlinks kept) that wd_source_check stats */
	int fd;
	struct wd_file_id id;
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

#endif
