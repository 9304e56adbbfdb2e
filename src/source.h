/* SPDX-License-Identifier: Apache-2.0 */
/* source.h - a checkpoint source: one safetensors file, a sharded directory, or a GGUF file, on
 * local disk or remote (source.c, source_pin.c, source_remote.c). */
#ifndef WD_SOURCE_H
#define WD_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "wd_limits.h"
#include "tensor.h"

enum wd_source_kind {
	WD_SOURCE_SAFETENSORS = 1,
	WD_SOURCE_SHARDED = 2,
	WD_SOURCE_GGUF = 3,
};

/* The identity a file is pinned by. */
struct wd_file_id {
	dev_t dev;
	ino_t ino;
	uint64_t size;
	int64_t mtime_ns;
};

struct wd_source;
struct wd_remote;
struct wd_remote_object;

/*
 * How to reach a remote source (`path` s3://, https:// or http://): what its checkpoint section
 * says. Strings are borrowed for the call; NULL or "" (0) picks the default. The secret files are
 * read at open, refused when others can read them, and their contents kept only inside the
 * remote handle (never in an error).
 */
struct wd_source_remote_conf {
	const char *endpoint;	      /* s3: scheme://host[:port] */
	const char *region;	      /* s3: signing region */
	bool path_style;	      /* s3: endpoint/bucket/key */
	const char *credentials_file; /* s3: AWS shared-credentials INI; NULL: the environment */
	const char *profile;	      /* s3: its profile (NULL: AWS_PROFILE, else "default") */
	int credentials;	      /* s3: an enum wd_aws_source (aws_cred.h); 0: auto */
	bool imds_v1;		      /* s3: IMDSv1 allowed */
	const char *token_file;	      /* http(s): bearer token */
	const char *ca_file;	      /* PEM bundle that verifies servers */
	bool allow_http;	      /* plain http:// allowed */
	unsigned connect_timeout_ms, low_speed_time_s, retries; /* 0: wd_remote's defaults */
	const char *azure_credentials; /* az: a wd_azure_source_parse word (NULL: auto) */
	const char *azure_key_file;    /* az: the account key (NULL: AZURE_STORAGE_KEY) */
};

/*
 * Open and validate a source (header only; payload untouched). `path` is a safetensors file, a GGUF
 * file (detected by magic), or a directory holding model.safetensors.index.json (or exactly one
 * *.safetensors file). Every shard header is parsed and must agree with the index. Each file is
 * opened O_RDONLY|O_CLOEXEC and pinned by identity. Returns 0 and *ret, or a negative code with err
 * naming the file and what is wrong.
 */
int wd_source_open(const char *name, const char *path, const struct wd_limits *lim,
		   struct wd_source **ret, weightd_error *err);

/*
 * wd_source_open for a path that may be remote (wd_source_is_url): an s3://, https:// or http://
 * object (.safetensors, or .gguf by magic or name) or directory (a trailing '/', read through its
 * model.safetensors.index.json; there is no listing to fall back on). Only metadata is read: the
 * index, and each shard's 8-byte length and header by range reads (GGUF: the header by growing
 * range reads). Each object is pinned by ETag, size and version id; every later read carries
 * If-Match. `rc` may be NULL (defaults, credentials from the environment). A local path is
 * wd_source_open's, rc ignored. Errors name the URL without its query, the HTTP status and S3's
 * error code; never a secret.
 */
int wd_source_open_at(const char *name, const char *path, const struct wd_source_remote_conf *rc,
		      const struct wd_limits *lim, struct wd_source **ret, weightd_error *err);

/* Does `path` name a remote source rather than a local file or directory? */
bool wd_source_is_url(const char *path);
/* `path` as it may be shown (logs, status, describe): a URL without userinfo, query or
 * fragment; a local path as it is. Always NUL-terminated within cap. */
void wd_source_show_path(const char *path, char *buf, size_t cap);
/* Is src read from object storage or a web server? */
bool wd_source_is_remote(const struct wd_source *src);
/* The kind of location: "s3", "az", "https", "http", or "file". */
const char *wd_source_location_kind(const struct wd_source *src);
/* The same for a path (or its shown form). */
const char *wd_source_location_of(const char *path);
/* A remote source's handle (counters, wd_remote_fetch), or NULL for a local one. */
struct wd_remote *wd_source_remote(const struct wd_source *src);

/* Empty the calling thread's read-ahead window over remote objects (wd_source_pread keeps the
 * last MiB a request brought): its next read asks the store again. */
void wd_source_remote_readahead_drop(void);
/*
 * Staged remote bytes: a caller that fetched byte ranges of remote objects ahead (into fd, a
 * memfd, span i's bytes at spans[i].at) registers them, and every thread's wd_source_pread of a
 * range wholly inside one span is then served from fd rather than asked of the store. Spans
 * are sorted by object (pointer order) and offset, and do not overlap. The objects must outlive
 * the registration. Returns a handle for wd_source_remote_unstage, or NULL (out of memory:
 * nothing is served from it). Neither takes fd or spans: both stay the caller's, and must
 * stay until unstaged.
 */
struct wd_stage_span {
	const struct wd_remote_object *obj;
	uint64_t off, len, at;
};
struct wd_stage;
struct wd_stage *wd_source_remote_stage(int fd, const struct wd_stage_span *spans, size_t n);
/* Stop serving reads from a registration (reads in progress finish first). Accepts NULL. */
void wd_source_remote_unstage(struct wd_stage *st);
/* The pinned object behind file `file` of a remote source (URL, ETag, version), or NULL. */
const struct wd_remote_object *wd_source_remote_object(const struct wd_source *src, uint32_t file);

/* Closes its files. Accepts NULL. */
void wd_source_free(struct wd_source *src);

const char *wd_source_name(const struct wd_source *src);
const char *wd_source_path(const struct wd_source *src);
enum wd_source_kind wd_source_kind(const struct wd_source *src);
const char *wd_source_kind_name(enum wd_source_kind kind);

size_t wd_source_tensor_count(const struct wd_source *src);
const struct wd_tensor_info *wd_source_tensor(const struct wd_source *src, size_t i);
/* O(log n) by name; NULL when absent. */
const struct wd_tensor_info *wd_source_find(const struct wd_source *src, const char *tensor);
/*
 * For an error about a tensor src lacks: up to `max` (at most 8) of its tensor names nearest to
 * `tensor` by edit distance, nearest first, into ret; their count (0 when none is near). Work is
 * bounded for any checkpoint: one cheap pass over the names, and full distances only for a capped
 * number of names of about the same length and the same letters.
 */
size_t wd_source_suggest(const struct wd_source *src, const char *tensor, const char **ret,
			 size_t max);
size_t wd_source_meta_count(const struct wd_source *src);
const struct wd_meta *wd_source_meta(const struct wd_source *src, size_t i);

size_t wd_source_file_count(const struct wd_source *src);
/* File name relative to the source path ("" for a single-file source). */
const char *wd_source_file_name(const struct wd_source *src, uint32_t file);
const struct wd_file_id *wd_source_file_id(const struct wd_source *src, uint32_t file);
/* Sum of tensor bytes. */
uint64_t wd_source_bytes(const struct wd_source *src);

/* SHA-256 over the kind and every file's identity: equal identities = same bytes on disk (for a
 * remote source: every object's shown URL, ETag, size and version id, so equal identities = the
 * same objects, known without reading a payload byte). */
void wd_source_identity(const struct wd_source *src, uint8_t ret[32]);

/*
 * Check that file `file` is still the one admitted: the path still names the pinned inode and its
 * size and mtime are unchanged (only the open file after wd_source_keep_files). A remote object
 * is pinned by every read's If-Match instead: 0 without a request.
 * -WEIGHTD_E_SOURCE_CHANGED otherwise, with a sentence naming the file. Thread-safe.
 */
int wd_source_check(const struct wd_source *src, uint32_t file, weightd_error *err);

/*
 * From now on read `src` from the files it has open, whatever their paths name: wd_source_check
 * compares only the open files with their pins. For a generation kept serving after the files on
 * disk were replaced by ones that could not be admitted; a file changed in place is still
 * noticed. Thread-safe (callable while workers read).
 */
void wd_source_keep_files(struct wd_source *src);
/* wd_source_check with the path compared even after wd_source_keep_files: are the files on disk
 * still those admitted? For a remote object, one request asks whether its ETag, size and version
 * are still those pinned (what a reload compares). */
int wd_source_check_path(const struct wd_source *src, uint32_t file, weightd_error *err);

/*
 * pread exactly len bytes at off from file `file` (retrying short reads and EINTR). A short file
 * (truncated since admission) is -WEIGHTD_E_SOURCE_CHANGED; other errors -WEIGHTD_E_IO. Thread-safe
 * (pread only; the source is never mapped, so a truncated file cannot SIGBUS).
 */
int wd_source_pread(const struct wd_source *src, uint32_t file, void *buf, size_t len, uint64_t off,
		    weightd_error *err);

/*
 * Whether wd_source_drop_cache drops anything (off when opened): a daemon that keeps the bytes it
 * read in shared memory sets it, so that a checkpoint is not held twice, in its segments and in
 * the page cache. Thread-safe (callable while workers read).
 */
void wd_source_set_drop_cache(struct wd_source *src, bool on);

/*
 * Bytes [off, off + len) of file `file` have been read and are kept elsewhere: when the source
 * drops its cache, evict their pages from the page cache (posix_fadvise POSIX_FADV_DONTNEED),
 * through wd_pagedrop_add: later, by the drop thread and joined with the ranges next to it,
 * once the daemon has started it (else now). Only the pages wholly inside the range: a page it
 * shares with a neighbouring range may be about to be read for that one. Advisory: failures
 * are ignored. Thread-safe.
 */
void wd_source_drop_cache(const struct wd_source *src, uint32_t file, uint64_t off, uint64_t len);

#endif
