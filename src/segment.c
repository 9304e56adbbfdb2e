/* SPDX-License-Identifier: Apache-2.0 */
/* segment.c - the files that hold weights, in /dev/shm or a private tmpfs directory: create,
 * seal, adopt, list, purge. */
#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <linux/magic.h> /* TMPFS_MAGIC */

#include "holdlock.h"

#define SHM_DIR "/dev/shm"

/*
 * Where segments live. -1: /dev/shm, opened by path as shm_open does (O_NOFOLLOW, O_CLOEXEC);
 * otherwise a directory opened once by wd_segment_set_dir, whose names are opened relative to it,
 * so a path renamed or replaced later does not move weightd's segments. Set once at start.
 */
static int dir_fd = -1;
static char dir_path[WD_SEGMENT_DIR_MAX] = SHM_DIR;

/* The path to hand to *at(at_fd(), ...) for "/<name>". */
static int at_fd(void)
{
	return dir_fd >= 0 ? dir_fd : AT_FDCWD;
}

static const char *rel(const char *name, char *buf, size_t cap)
{
	if (dir_fd >= 0)
		return name + 1;
	snprintf(buf, cap, SHM_DIR "%s", name);
	return buf;
}

static int seg_open(const char *name, int flags, mode_t mode)
{
	char buf[WD_SEGMENT_NAME_MAX + sizeof(SHM_DIR)];

	return openat(at_fd(), rel(name, buf, sizeof(buf)), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

static int seg_unlink(const char *name)
{
	char buf[WD_SEGMENT_NAME_MAX + sizeof(SHM_DIR)];

	return unlinkat(at_fd(), rel(name, buf, sizeof(buf)), 0);
}

int wd_segment_set_dir(const char *dir, weightd_error *err)
{
	struct statfs sf;
	struct stat st;
	int fd, rc;

	if (!dir || !dir[0]) {
		if (dir_fd >= 0)
			close(dir_fd);
		dir_fd = -1;
		snprintf(dir_path, sizeof(dir_path), SHM_DIR);
		return 0;
	}
	if (dir[0] != '/' || strlen(dir) >= sizeof(dir_path))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "segment_dir \"%s\" must be an absolute path shorter than %zu "
				    "characters",
				    dir, sizeof(dir_path));
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return wd_error_set(
			err, errno == ENOENT ? WEIGHTD_E_NOT_FOUND : WEIGHTD_E_IO,
			"segment_dir %s: %s; mount a tmpfs there owned by uid %u with "
			"mode 0700 (var-lib-weightd-segments.mount does), or set segment_dir empty "
			"to use /dev/shm",
			dir, strerror(errno), (unsigned)geteuid());
	if (fstatfs(fd, &sf) < 0 || fstat(fd, &st) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "segment_dir %s: %s", dir, strerror(errno));
		goto fail;
	}
	if (sf.f_type != TMPFS_MAGIC) {
		rc = wd_error_set(
			err, WEIGHTD_E_INVALID_ARGUMENT,
			"segment_dir %s is not a tmpfs (filesystem type 0x%llx): weights there "
			"would be written to disk; mount one there (mount -t tmpfs -o "
			"huge=within_size,mode=0700,uid=%u tmpfs %s)",
			dir, (unsigned long long)sf.f_type, (unsigned)geteuid(), dir);
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		rc = wd_error_set(
			err, WEIGHTD_E_PERMISSION_DENIED,
			"segment_dir %s is owned by uid %u, not by weightd's uid %u: another "
			"user could replace weightd's segments; chown %u %s",
			dir, (unsigned)st.st_uid, (unsigned)geteuid(), (unsigned)geteuid(), dir);
		goto fail;
	}
	if (st.st_mode & 022) {
		rc = wd_error_set(
			err, WEIGHTD_E_PERMISSION_DENIED,
			"segment_dir %s is writable by group or others (mode %04o): anyone "
			"could plant names there; chmod go-w %s",
			dir, (unsigned)(st.st_mode & 07777), dir);
		goto fail;
	}
	if (dir_fd >= 0)
		close(dir_fd);
	dir_fd = fd;
	snprintf(dir_path, sizeof(dir_path), "%s", dir);
	return 0;
fail:
	close(fd);
	return rc;
}

const char *wd_segment_dir(void)
{
	return dir_path;
}

bool wd_segment_dir_private(void)
{
	return dir_fd >= 0;
}

/*
 * A tmpfs reports st_blksize as the huge page size for a file it would back with huge pages
 * (shmem_getattr): on a mount with huge=always, or huge=within_size once the file spans a whole
 * huge page, or anywhere when transparent_hugepage/shmem_enabled is "force". A directory's own
 * blksize does not say, so a sparse probe of 2 MiB is made under the prefix and removed.
 */
uint64_t wd_segment_page_size(const char *prefix)
{
	struct wd_segment seg;
	struct stat st;
	uint64_t page = 4096;

	if (wd_segment_create_sparse(prefix, 2u << 20, &seg, NULL) < 0)
		return page;
	if (fstat(seg.fd, &st) == 0 && st.st_blksize > 4096)
		page = (uint64_t)st.st_blksize;
	wd_segment_close(&seg);
	seg_unlink(seg.name);
	return page;
}

/* "/x" with no other '/', shorter than WD_SEGMENT_NAME_MAX, not "/." or "/..". */
static bool name_valid(const char *name)
{
	size_t n;

	if (!name || name[0] != '/')
		return false;
	n = strlen(name);
	if (n < 2 || n >= WD_SEGMENT_NAME_MAX || strchr(name + 1, '/'))
		return false;
	return strcmp(name, "/.") != 0 && strcmp(name, "/..") != 0;
}

/* An open of a shm object failed (errno): out of descriptors names the process and the limit. */
static int open_error(weightd_error *err, const char *what, const char *name)
{
	int e = errno;
	char why[300];

	if (e == EMFILE || e == ENFILE) {
		if (e == ENFILE)
			snprintf(why, sizeof(why), "the system-wide table of open files is full "
				 "(fs.file-max)");
		else
			wd_nofile_text(why, sizeof(why), "weightd",
				       "LimitNOFILE= in weightd.service, or ulimit -n");
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "resource exhausted: %s %s: %s: %s", what,
				    name, strerror(e), why);
	}
	return wd_error_set(err, WEIGHTD_E_IO, "%s %s: %s", what, name, strerror(e));
}

/*
 * The read-only fd is a second open of the name, so the description clients receive never had
 * write access. It is checked to be the same inode as the writable one in case the name was
 * replaced in between.
 */
static int create_named(const char *name, uint64_t size, struct wd_segment *ret,
			weightd_error *err, bool *ret_exists);

int wd_segment_create(const char *name, uint64_t size, struct wd_segment *ret, weightd_error *err)
{
	bool exists = false;

	return create_named(name, size, ret, err, &exists);
}

/* "/<prefix>." followed by exactly `digits` lowercase hex digits. */
static bool name_is_hex(const char *prefix, const char *name, int digits)
{
	size_t plen;

	if (!name || name[0] != '/' || !wd_segment_prefix_valid(prefix))
		return false;
	plen = strlen(prefix);
	if (strncmp(name + 1, prefix, plen) != 0 || name[1 + plen] != '.')
		return false;
	name += 2 + plen;
	for (int i = 0; i < digits; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return name[digits] == '\0';
}

bool wd_segment_name_matches(const char *prefix, const char *name)
{
	return name_is_hex(prefix, name, WD_SEGMENT_RANDOM_HEX);
}

bool wd_segment_name_legacy(const char *prefix, const char *name)
{
	return name_is_hex(prefix, name, 64);
}

/*
 * The name carries 128 random bits from getrandom(): nobody can create it before us, so a taken
 * name means a collision with another object (practically never) or a squatter guessing (hopeless):
 * either way a fresh name is drawn, a bounded number of times.
 */
int wd_segment_create_unique(const char *prefix, uint64_t size, struct wd_segment *ret,
			     weightd_error *err)
{
	static const char hexd[] = "0123456789abcdef";
	char name[WD_SEGMENT_NAME_MAX];
	int rc = 0;

	if (!wd_segment_prefix_valid(prefix))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "invalid shared-memory prefix \"%s\"",
				    prefix ? prefix : "(null)");
	for (int attempt = 0; attempt < 8; attempt++) {
		uint8_t rnd[WD_SEGMENT_RANDOM_HEX / 2];
		size_t got = 0, off;
		bool exists = false;

		while (got < sizeof(rnd)) {
			ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return wd_error_set(err, WEIGHTD_E_IO, "getrandom for a segment name: %s",
						    strerror(errno));
			got += (size_t)n;
		}
		off = (size_t)snprintf(name, sizeof(name), "/%s.", prefix);
		for (size_t i = 0; i < sizeof(rnd); i++) {
			name[off++] = hexd[rnd[i] >> 4];
			name[off++] = hexd[rnd[i] & 15];
		}
		name[off] = '\0';
		rc = create_named(name, size, ret, err, &exists);
		if (!exists)
			return rc;
	}
	return rc; /* eight collisions in a row: the last error says so */
}

static int create_named(const char *name, uint64_t size, struct wd_segment *ret,
			weightd_error *err, bool *ret_exists)
{
	struct stat st_rw, st_ro;
	int fd = -1, ro_fd = -1;
	bool created = false;
	int rc;

	if (!name_valid(name))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "segment name \"%s\" must be \"/\" followed by 1 to %d characters "
				    "without '/'", name ? name : "(null)", WD_SEGMENT_NAME_MAX - 2);
	if (size > (uint64_t)INT64_MAX)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "segment %s: need %llu bytes in %s, more than a file can hold",
				    name, (unsigned long long)size, dir_path);
	fd = seg_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0 && errno == EEXIST) {
		*ret_exists = true;
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "shared memory %s already exists", name);
		goto fail;
	}
	if (fd < 0) {
		rc = open_error(err, "creating shared memory", name);
		goto fail;
	}
	created = true;
	/* shm_open applies the umask; the mode must be exactly 0600 whatever it is. */
	if (fchmod(fd, 0600) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "setting mode 0600 on shared memory %s: %s", name,
				  strerror(errno));
		goto fail;
	}
	if (size) {
		int e;

		do
			e = posix_fallocate(fd, 0, (off_t)size);
		while (e == EINTR);
		if (e == ENOSPC || e == EFBIG) {
			rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					  "segment %s: need %llu bytes in %s: %s", name,
					  (unsigned long long)size, dir_path, strerror(e));
			goto fail;
		}
		if (e) {
			rc = wd_error_set(err, WEIGHTD_E_IO, "reserving %llu bytes for segment %s: %s",
					  (unsigned long long)size, name, strerror(e));
			goto fail;
		}
	}
	ro_fd = seg_open(name, O_RDONLY, 0);
	if (ro_fd < 0) {
		rc = open_error(err, "re-opening read-only the shared memory", name);
		goto fail;
	}
	if (fstat(fd, &st_rw) < 0 || fstat(ro_fd, &st_ro) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "fstat of shared memory %s: %s", name,
				  strerror(errno));
		goto fail;
	}
	if (st_rw.st_dev != st_ro.st_dev || st_rw.st_ino != st_ro.st_ino) {
		rc = wd_error_set(err, WEIGHTD_E_IO,
				  "shared memory %s was replaced while it was being created", name);
		created = false; /* the name is someone else's now */
		goto fail;
	}
	ret->fd = fd;
	ret->ro_fd = ro_fd;
	ret->size = size;
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	return 0;
fail:
	if (ro_fd >= 0)
		close(ro_fd);
	if (fd >= 0)
		close(fd);
	if (created)
		seg_unlink(name);
	return rc;
}

int wd_segment_create_sparse(const char *prefix, uint64_t size, struct wd_segment *ret,
			     weightd_error *err)
{
	int rc = wd_segment_create_unique(prefix, 0, ret, err);

	if (rc < 0)
		return rc;
	if (size > (uint64_t)INT64_MAX || ftruncate(ret->fd, (off_t)size) < 0) {
		rc = wd_error_set(err, size > (uint64_t)INT64_MAX || errno == EFBIG ? WEIGHTD_E_RESOURCE_EXHAUSTED
										       : WEIGHTD_E_IO,
				  "sizing shared memory %s to %llu bytes: %s", ret->name,
				  (unsigned long long)size, strerror(errno));
		wd_segment_close(ret);
		seg_unlink(ret->name);
		return rc;
	}
	ret->size = size;
	return 0;
}

uint64_t wd_segment_shm_free(void)
{
	struct statvfs sv;

	if (dir_fd >= 0 ? fstatvfs(dir_fd, &sv) < 0 : statvfs(SHM_DIR, &sv) < 0)
		return UINT64_MAX;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/*
 * Only whole pages inside the range are punched (a weight packed at a 64-byte offset may share
 * its first and last page with neighbours, which stay). The segment is re-opened by name for
 * writing when the caller holds only its read-only fd, and checked to be the same object.
 */
int wd_segment_punch(const struct wd_segment *seg, uint64_t off, uint64_t len)
{
	const uint64_t page = 4096;
	uint64_t from = (off + page - 1) / page * page, to = (off + len) / page * page;
	struct stat a, b;
	int fd = seg->fd, r = 0;

	if (to <= from)
		return 0;
	if (fd < 0) {
		fd = seg_open(seg->name, O_RDWR, 0);
		if (fd < 0)
			return -WEIGHTD_E_IO;
		if (fstat(fd, &a) < 0 || fstat(seg->ro_fd, &b) < 0 || a.st_ino != b.st_ino ||
		    a.st_dev != b.st_dev) {
			close(fd);
			return -WEIGHTD_E_IO;
		}
	}
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from,
		      (off_t)(to - from)) < 0)
		r = -WEIGHTD_E_IO;
	if (fd != seg->fd)
		close(fd);
	return r;
}

void wd_segment_seal(struct wd_segment *seg)
{
	if (!seg || seg->fd < 0)
		return;
	close(seg->fd);
	seg->fd = -1;
}

int wd_segment_unseal(struct wd_segment *seg, weightd_error *err)
{
	char path[64];

	if (seg->fd >= 0)
		return 0;
	/* through the descriptor, not the name: no other object can be opened in its place */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", seg->ro_fd);
	seg->fd = open(path, O_RDWR | O_CLOEXEC);
	if (seg->fd >= 0)
		return 0;
	return open_error(err, "reopening for writing shared memory", seg->name);
}

int wd_segment_open_ro(const struct wd_segment *seg)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", seg->ro_fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	return errno == EMFILE || errno == ENFILE || errno == ENOMEM ? -WEIGHTD_E_RESOURCE_EXHAUSTED
								     : -WEIGHTD_E_IO;
}

/*
 * Only an object this user owns and nobody else can write is adopted: anything else under the
 * prefix could change under the clients that map it.
 */
int wd_segment_adopt(const char *name, struct wd_segment *ret, weightd_error *err)
{
	struct stat st;
	int fd = -1;
	int rc;

	if (!name_valid(name))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "segment name \"%s\" is not a valid name",
				    name ? name : "(null)");
	fd = seg_open(name, O_RDONLY, 0);
	if (fd < 0) {
		rc = errno == ENOENT ? wd_error_set(err, WEIGHTD_E_NOT_FOUND, "opening shared memory %s: %s",
						    name, strerror(errno))
				     : open_error(err, "opening shared memory", name);
		goto fail;
	}
	if (fstat(fd, &st) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "fstat of shared memory %s: %s", name,
				  strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
		rc = wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				  "shared memory %s is not a file owned by uid %u and writable only by "
				  "it (uid %u, mode %04o)", name, (unsigned)geteuid(),
				  (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	ret->fd = -1;
	ret->ro_fd = fd;
	ret->size = (uint64_t)st.st_size;
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	return rc;
}

void wd_segment_close(struct wd_segment *seg)
{
	if (!seg)
		return;
	if (seg->fd >= 0)
		close(seg->fd);
	if (seg->ro_fd >= 0)
		close(seg->ro_fd);
	seg->fd = -1;
	seg->ro_fd = -1;
}

int wd_segment_unlink(const char *name)
{
	if (!name_valid(name))
		return -WEIGHTD_E_INVALID_ARGUMENT;
	if (seg_unlink(name) < 0 && errno != ENOENT)
		return -WEIGHTD_E_IO;
	return 0;
}

int wd_segment_prefix_valid(const char *prefix)
{
	size_t n = 0;

	if (!prefix || prefix[0] == '.')
		return 0;
	for (const char *p = prefix; *p; p++, n++) {
		char c = *p;

		if (n >= 64)
			return 0;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return n > 0;
}

/* A directory entry belongs to the prefix when it starts with "<prefix>.". */
static bool under_prefix(const char *entry, const char *prefix, size_t plen)
{
	return strncmp(entry, prefix, plen) == 0 && entry[plen] == '.';
}

/*
 * Regular files only (anything else is not a segment of ours). Entries that vanish between
 * readdir and fstatat are skipped. At most max_entries entries are read (0: all); *ret_partial
 * says whether the walk stopped there.
 */
static int list_capped(const char *prefix, uint64_t max_entries, bool *ret_partial,
		       int (*fn)(const char *name, uint64_t size, void *arg), void *arg)
{
	uint64_t seen = 0;
	size_t plen;
	DIR *d = NULL;
	struct dirent *e;
	int rc = 0;

	if (ret_partial)
		*ret_partial = false;
	if (!wd_segment_prefix_valid(prefix))
		return -WEIGHTD_E_INVALID_ARGUMENT;
	plen = strlen(prefix);
	if (dir_fd >= 0) {
		/* a description of its own: a dup would share the offset with another lister */
		int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d && fd >= 0)
			close(fd);
	} else {
		d = opendir(SHM_DIR);
	}
	if (!d)
		return -WEIGHTD_E_IO;
	for (;;) {
		char name[WD_SEGMENT_NAME_MAX];
		struct stat st;

		if (max_entries && seen++ >= max_entries) {
			if (ret_partial)
				*ret_partial = true;
			break;
		}
		errno = 0;
		e = readdir(d);
		if (!e) {
			if (errno)
				rc = -WEIGHTD_E_IO;
			break;
		}
		if (!under_prefix(e->d_name, prefix, plen) ||
		    strlen(e->d_name) + 2 > sizeof(name))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			rc = -WEIGHTD_E_IO;
			break;
		}
		if (!S_ISREG(st.st_mode))
			continue;
		snprintf(name, sizeof(name), "/%s", e->d_name);
		rc = fn(name, (uint64_t)st.st_size, arg);
		if (rc)
			break;
	}
	closedir(d);
	return rc;
}

int wd_segment_list(const char *prefix, int (*fn)(const char *name, uint64_t size, void *arg),
		    void *arg)
{
	return list_capped(prefix, 0, NULL, fn, arg);
}

bool wd_segment_owned(const char *name)
{
	char buf[WD_SEGMENT_NAME_MAX + sizeof(SHM_DIR)];
	struct stat st;

	if (!name_valid(name))
		return false;
	return fstatat(at_fd(), rel(name, buf, sizeof(buf)), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

struct foreign_scan {
	const char *prefix;
	void (*fn)(const char *name, void *arg);
	void *arg;
	int n;
};

static int check_foreign(const char *name, uint64_t size, void *arg)
{
	struct foreign_scan *f = arg;

	(void)size;
	if ((wd_segment_name_matches(f->prefix, name) || wd_segment_name_legacy(f->prefix, name)) &&
	    wd_segment_owned(name))
		return 0;
	f->n++;
	if (f->fn)
		f->fn(name, f->arg);
	return 0;
}

int wd_segment_foreign(const char *prefix, uint64_t max_entries, bool *ret_partial,
		       void (*fn)(const char *name, void *arg), void *arg)
{
	struct foreign_scan f = { prefix, fn, arg, 0 };
	int rc = list_capped(prefix, max_entries, ret_partial, check_foreign, &f);

	return rc < 0 ? rc : f.n;
}

struct name_list {
	char **names;
	size_t n;
	size_t cap;
};

static int collect_name(const char *name, uint64_t size, void *arg)
{
	struct name_list *l = arg;
	char *copy;

	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 16;
		char **nn = realloc(l->names, sizeof(char *) * ncap);

		if (!nn)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		l->names = nn;
		l->cap = ncap;
	}
	copy = strdup(name);
	if (!copy)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	l->names[l->n++] = copy;
	return 0;
}

/* Names are collected first and unlinked after, so the directory is not changed mid-scan. Only
 * names weightd makes are unlinked: anything else under the prefix is someone else's. */
int wd_segment_purge(const char *prefix)
{
	struct name_list l = { 0 };
	int rc, count = 0;

	rc = wd_segment_list(prefix, collect_name, &l);
	if (rc)
		goto out;
	for (size_t i = 0; i < l.n; i++) {
		if (!wd_segment_name_matches(prefix, l.names[i]) &&
		    !(wd_segment_name_legacy(prefix, l.names[i]) && wd_segment_owned(l.names[i])))
			continue;
		if (seg_unlink(l.names[i]) == 0)
			count++;
		else if (errno != ENOENT && !rc)
			rc = -WEIGHTD_E_IO;
	}
	if (!rc)
		rc = count;
out:
	for (size_t i = 0; i < l.n; i++)
		free(l.names[i]);
	free(l.names);
	return rc;
}

/* A locked segment has a lock test per lock run at most: this bounds a hostile one. */
#define LOCK_TESTS_MAX (1u << 20)

int wd_segment_locked_bytes(const char *name, uint64_t *ret_bytes)
{
	struct stat st;
	uint64_t bytes = 0;
	int fd, r;

	*ret_bytes = 0;
	if (!name_valid(name))
		return -WEIGHTD_E_INVALID_ARGUMENT;
	fd = seg_open(name, O_RDONLY, 0);
	if (fd < 0)
		return errno == ENOENT ? -WEIGHTD_E_NOT_FOUND : -WEIGHTD_E_IO;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -WEIGHTD_E_IO;
	}
	r = wd_holdlock_count(fd, (uint64_t)st.st_size, LOCK_TESTS_MAX, &bytes, NULL);
	close(fd);
	*ret_bytes = bytes;
	/* tests that ran out still found locks: that is what matters to the callers */
	return r < 0 && !(r == -E2BIG && bytes) ? -WEIGHTD_E_IO : 0;
}

struct locked_scan {
	const char *prefix;
	uint64_t segments, bytes;
};

static int count_locked(const char *name, uint64_t size, void *arg)
{
	struct locked_scan *ls = arg;
	uint64_t bytes = 0;

	(void)size;
	if (!wd_segment_name_matches(ls->prefix, name))
		return 0;
	if (wd_segment_locked_bytes(name, &bytes) == 0 && bytes) {
		ls->segments++;
		ls->bytes += bytes;
	}
	return 0;
}

int wd_segment_locked(const char *prefix, uint64_t *ret_segments, uint64_t *ret_bytes)
{
	struct locked_scan ls = { prefix, 0, 0 };
	int rc = wd_segment_list(prefix, count_locked, &ls);

	*ret_segments = ls.segments;
	*ret_bytes = ls.bytes;
	return rc < 0 ? rc : 0;
}
