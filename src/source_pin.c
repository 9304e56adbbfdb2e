/* SPDX-License-Identifier: Apache-2.0 */
/* source_pin.c - a source's files stay what was opened: the pin (device, inode, size, mtime)
 * checked by path and by descriptor, and reads that notice a file changed under them. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checked.h"
#include "pagedrop.h"
#include "source_int.h"

/* Compare a stat with the pin; 0 when equal, else -WEIGHTD_E_SOURCE_CHANGED with a sentence about
 * what moved. */
static int compare_pin(const struct wd_source *src, const struct wd_file *f, const struct stat *st,
		       const char *how, weightd_error *err)
{
	int r;

	if (st->st_dev != f->id.dev || st->st_ino != f->id.ino)
		r = wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
				 "%s was replaced since it was opened (%s now names inode %llu, not %llu)",
				 f->path, how, (unsigned long long)st->st_ino, (unsigned long long)f->id.ino);
	else if ((uint64_t)st->st_size != f->id.size)
		r = wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
				 "%s changed size since it was opened (%s: %lld bytes, was %" PRIu64 ")",
				 f->path, how, (long long)st->st_size, f->id.size);
	else if (wd_mtime_ns(st) != f->id.mtime_ns)
		r = wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
				 "%s was modified since it was opened (%s: mtime %" PRId64 " ns, was %" PRId64 ")",
				 f->path, how, wd_mtime_ns(st), f->id.mtime_ns);
	else
		return 0;
	wd_error_about(err, src->name, NULL);
	return r;
}

/* Does the path still name the pinned file? */
static int check_path(const struct wd_source *src, const struct wd_file *f, weightd_error *err)
{
	struct stat st;

	if (stat(f->path, &st) < 0) {
		int e = errno;
		wd_error_about(err, src->name, NULL);
		if (e == ENOENT || e == ENOTDIR)
			return wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
					    "%s is gone (removed or renamed since it was opened)",
					    f->path);
		return wd_error_set(err, WEIGHTD_E_IO, "cannot stat %s: %s", f->path, strerror(e));
	}
	return compare_pin(src, f, &st, "the path", err);
}

static int check(const struct wd_source *src, uint32_t file, bool paths, weightd_error *err)
{
	const struct wd_file *f;
	struct stat st;
	int r;

	if (file >= src->n_files)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "source %s has no file %" PRIu32, src->name, file);
	f = &src->files[file];
	if (f->obj)
		return paths ? wd_source_remote_check(src, file, err) : 0;
	if (paths) {
		r = check_path(src, f, err);
		if (r)
			return r;
	}
	if (fstat(f->fd, &st) < 0) {
		wd_error_about(err, src->name, NULL);
		return wd_error_set(err, WEIGHTD_E_IO, "cannot fstat %s: %s", f->path, strerror(errno));
	}
	return compare_pin(src, f, &st, "the open file", err);
}

int wd_source_check(const struct wd_source *src, uint32_t file, weightd_error *err)
{
	/* a remote object's pin is every read's If-Match: asking the server here costs a request */
	if (src->remote)
		return file < src->n_files ?
			       0 :
			       wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "source %s has no file %" PRIu32, src->name, file);
	return check(src, file, !__atomic_load_n(&src->keep_files, __ATOMIC_RELAXED), err);
}

int wd_source_check_path(const struct wd_source *src, uint32_t file, weightd_error *err)
{
	return check(src, file, true, err);
}

void wd_source_keep_files(struct wd_source *src)
{
	__atomic_store_n(&src->keep_files, 1, __ATOMIC_RELAXED);
}

void wd_source_set_drop_cache(struct wd_source *src, bool on)
{
	__atomic_store_n(&src->drop_cache, on ? 1 : 0, __ATOMIC_RELAXED);
}

void wd_source_drop_cache(const struct wd_source *src, uint32_t file, uint64_t off, uint64_t len)
{
	if (!__atomic_load_n(&src->drop_cache, __ATOMIC_RELAXED) || file >= src->n_files ||
	    src->files[file].fd < 0 || len > src->files[file].id.size ||
	    off > src->files[file].id.size - len)
		return;
	wd_pagedrop_add(src, src->files[file].fd, off, len);
}

/*
 * Reads with pread only, then fstats the descriptor: bytes read from a file whose size or mtime
 * moved since admission are reported as -WEIGHTD_E_SOURCE_CHANGED rather than returned as good. (A
 * rename over the path leaves the pinned inode, and so these bytes, intact; wd_source_check notices
 * it.)
 */
int wd_source_pread(const struct wd_source *src, uint32_t file, void *buf, size_t len, uint64_t off,
		    weightd_error *err)
{
	const struct wd_file *f;
	uint8_t *p = buf;
	uint64_t end, pos = off;
	size_t left = len;
	struct stat st;

	if (file >= src->n_files)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "source %s has no file %" PRIu32, src->name, file);
	f = &src->files[file];
	if (!wd_add_u64(off, len, &end) || end > f->id.size) {
		wd_error_about(err, src->name, NULL);
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "read of %zu bytes at offset %" PRIu64 " is past the end of %s (%" PRIu64 " bytes)",
				    len, off, f->path, f->id.size);
	}
	if (f->obj)
		return wd_source_remote_pread(src, file, buf, len, off, err);
	while (left) {
		ssize_t k = pread(f->fd, p, left, (off_t)pos);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			wd_error_about(err, src->name, NULL);
			return wd_error_set(err, WEIGHTD_E_IO, "reading %s at offset %" PRIu64 ": %s", f->path, pos,
					    strerror(errno));
		}
		if (k == 0) {
			wd_error_about(err, src->name, NULL);
			return wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
					    "%s ends at byte %" PRIu64 " but held %" PRIu64 " bytes when opened (truncated since)",
					    f->path, pos, f->id.size);
		}
		p += k;
		pos += (uint64_t)k;
		left -= (size_t)k;
	}
	if (fstat(f->fd, &st) < 0) {
		wd_error_about(err, src->name, NULL);
		return wd_error_set(err, WEIGHTD_E_IO, "cannot fstat %s: %s", f->path, strerror(errno));
	}
	return compare_pin(src, f, &st, "the open file", err);
}
