/* SPDX-License-Identifier: Apache-2.0 */
/* test_segment.c - POSIX shm segments: src/segment.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>

#include "segment.h"

/*
 * getrandom() as segment.c sees it (linked with --wrap=getrandom): the real one, unless a test
 * scripts the bytes it returns: script_fill[k] fills the whole buffer of the k-th call.
 */
ssize_t __real_getrandom(void *buf, size_t len, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags);

static const uint8_t *script_fill;
static size_t script_n, script_calls;

ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags)
{
	if (script_calls < script_n) {
		memset(buf, script_fill[script_calls++], len);
		return (ssize_t)len;
	}
	return __real_getrandom(buf, len, flags);
}

/* Every name a test makes is "/<prefix>.<x>" with a prefix unique to this run. */
static char prefix[64];

static void seg_name(char *out, size_t n, const char *suffix)
{
	snprintf(out, n, "/%s.%s", prefix, suffix);
}

/* Whether /dev/shm holds `name` (with its leading '/'), looked up with plain stat. */
static int shm_exists(const char *name)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "/dev/shm%s", name);
	return stat(path, &st) == 0;
}

static int setup(void **state)
{
	snprintf(prefix, sizeof(prefix), "wdtest%ld", (long)getpid());
	return 0;
}

/* Removes whatever a failed test left under the prefix, without the code under test. */
static int teardown(void **state)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t n = strlen(prefix);

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, prefix, n) == 0 &&
		    (e->d_name[n] == '\0' || e->d_name[n] == '.' || strncmp(e->d_name + n, "x.", 2) == 0))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	return 0;
}

static void test_create_seal_read_only(void **state)
{
	struct wd_segment seg;
	weightd_error err;
	char name[128];
	struct stat st;
	const size_t size = 1u << 20;
	uint8_t *pattern = malloc(size), *back = malloc(size);
	void *map;

	seg_name(name, sizeof(name), "a");
	for (size_t i = 0; i < size; i++)
		pattern[i] = (uint8_t)(i * 31 + 7);
	assert_int_equal(wd_segment_create(name, size, &seg, &err), 0);
	assert_string_equal(seg.name, name);
	assert_int_equal(seg.size, size);
	assert_true(seg.fd >= 0 && seg.ro_fd >= 0 && seg.fd != seg.ro_fd);
	assert_true(shm_exists(name));

	/* mode 0600, fully reserved (blocks allocated, not just a sparse size), close-on-exec */
	assert_int_equal(fstat(seg.ro_fd, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_size, (off_t)size);
	assert_true((uint64_t)st.st_blocks * 512 >= size);
	assert_int_equal(fcntl(seg.ro_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_int_equal(fcntl(seg.fd, F_GETFL) & O_ACCMODE, O_RDWR);
	assert_true(fcntl(seg.fd, F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(seg.ro_fd, F_GETFD) & FD_CLOEXEC);

	assert_int_equal(pwrite(seg.fd, pattern, size, 0), (ssize_t)size);
	wd_segment_seal(&seg);
	assert_int_equal(seg.fd, -1);
	wd_segment_seal(&seg); /* idempotent */

	/* Readable through ro_fd, by pread and by a shared read-only mapping. */
	assert_int_equal(pread(seg.ro_fd, back, size, 0), (ssize_t)size);
	assert_memory_equal(back, pattern, size);
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, seg.ro_fd, 0);
	assert_true(map != MAP_FAILED);
	assert_memory_equal(map, pattern, size);
	munmap(map, size);

	/* Never writable: write() and a writable shared mapping both fail. */
	errno = 0;
	assert_int_equal(write(seg.ro_fd, "x", 1), -1);
	assert_int_equal(errno, EBADF);
	errno = 0;
	assert_true(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, seg.ro_fd, 0) == MAP_FAILED);
	assert_int_equal(errno, EACCES);
	errno = 0;
	assert_int_equal(ftruncate(seg.ro_fd, 0), -1);

	wd_segment_close(&seg);
	assert_int_equal(seg.ro_fd, -1);
	wd_segment_close(&seg);
	wd_segment_close(NULL);
	wd_segment_seal(NULL);
	assert_true(shm_exists(name)); /* close keeps the name */
	assert_int_equal(wd_segment_unlink(name), 0);
	assert_false(shm_exists(name));
	assert_int_equal(wd_segment_unlink(name), 0); /* ENOENT is success */
	free(pattern);
	free(back);
}

static void test_zero_size(void **state)
{
	struct wd_segment seg;
	char name[128];
	struct stat st;

	seg_name(name, sizeof(name), "zero");
	assert_int_equal(wd_segment_create(name, 0, &seg, NULL), 0);
	assert_int_equal(fstat(seg.ro_fd, &st), 0);
	assert_int_equal(st.st_size, 0);
	wd_segment_close(&seg);
	assert_int_equal(wd_segment_unlink(name), 0);
}

/* O_EXCL: a second create of a live name fails and leaves the first object whole. */
static void test_exclusive(void **state)
{
	struct wd_segment a, b;
	weightd_error err;
	char name[128], got[4];

	seg_name(name, sizeof(name), "excl");
	assert_int_equal(wd_segment_create(name, 4096, &a, NULL), 0);
	assert_int_equal(pwrite(a.fd, "keep", 4, 0), 4);
	memset(&b, 0x5a, sizeof(b));
	assert_int_equal(wd_segment_create(name, 4096, &b, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, name));
	assert_non_null(strstr(err.message, "already exists"));
	assert_int_equal(b.fd, 0x5a5a5a5a); /* output untouched on failure */
	assert_true(shm_exists(name));
	assert_int_equal(pread(a.ro_fd, got, 4, 0), 4);
	assert_memory_equal(got, "keep", 4);
	wd_segment_close(&a);
	assert_int_equal(wd_segment_unlink(name), 0);
}

static void test_bad_names(void **state)
{
	static const char *bad[] = { "noslash", "/", "/a/b", "//a", "/.", "/..", "" };
	struct wd_segment seg;
	weightd_error err;
	char longname[WD_SEGMENT_NAME_MAX + 1];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(wd_segment_create(bad[i], 1, &seg, &err), -WEIGHTD_E_INVALID_ARGUMENT);
		assert_int_equal(err.code, WEIGHTD_E_INVALID_ARGUMENT);
		assert_int_equal(wd_segment_adopt(bad[i], &seg, NULL), -WEIGHTD_E_INVALID_ARGUMENT);
		assert_int_equal(wd_segment_unlink(bad[i]), -WEIGHTD_E_INVALID_ARGUMENT);
	}
	memset(longname, 'a', sizeof(longname));
	memcpy(longname, "/", 1);
	memcpy(longname + 1, prefix, strlen(prefix));
	longname[1 + strlen(prefix)] = '.';
	longname[WD_SEGMENT_NAME_MAX] = '\0';
	assert_int_equal(wd_segment_create(longname, 1, &seg, NULL), -WEIGHTD_E_INVALID_ARGUMENT);
	longname[WD_SEGMENT_NAME_MAX - 1] = '\0'; /* 199 chars + NUL fits the 200-byte field */
	assert_int_equal(wd_segment_create(longname, 1, &seg, NULL), 0);
	assert_string_equal(seg.name, longname);
	wd_segment_close(&seg);
	assert_int_equal(wd_segment_unlink(longname), 0);
}

/* Check the failure of a reservation that cannot fit: code, message, and no name left behind. */
static int check_exhausted(const char *name, uint64_t size)
{
	struct wd_segment seg;
	weightd_error err;
	char need[32];

	memset(&err, 0, sizeof(err));
	if (wd_segment_create(name, size, &seg, &err) != -WEIGHTD_E_RESOURCE_EXHAUSTED)
		return 1;
	snprintf(need, sizeof(need), "%llu", (unsigned long long)size);
	if (!strstr(err.message, need) || !strstr(err.message, "/dev/shm"))
		return 2;
	if (shm_exists(name))
		return 3;
	return 0;
}

/*
 * A full /dev/shm fails at reservation. In a private mount namespace a 1 MiB tmpfs is mounted
 * over /dev/shm and 4 MiB asked for (skipped where mounting is not allowed); on the real /dev/shm
 * a size far beyond its free space (1 PiB) must fail the same way.
 */
static void test_exhausted(void **state)
{
	char name[128];
	struct statvfs vfs;
	pid_t pid;
	int status;

	seg_name(name, sizeof(name), "full");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m,mode=1777"))
			_exit(77);
		{
			struct wd_segment seg;
			int rc = check_exhausted(name, 4u << 20);
			if (rc)
				_exit(rc);
			/* what fits still works there */
			if (wd_segment_create(name, 512u << 10, &seg, NULL))
				_exit(4);
			wd_segment_close(&seg);
		}
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		fprintf(stderr, "note: cannot mount a private tmpfs here; only the 1 PiB case runs\n");
	else
		assert_int_equal(WEXITSTATUS(status), 0);

	assert_int_equal(statvfs("/dev/shm", &vfs), 0);
	if (vfs.f_blocks == 0) {
		skip(); /* an unlimited tmpfs would try to allocate the petabyte */
		return;
	}
	assert_true((uint64_t)vfs.f_bavail * vfs.f_frsize < (1ull << 50));
	assert_int_equal(check_exhausted(name, 1ull << 50), 0);
	assert_int_equal(check_exhausted(name, UINT64_MAX), 0);
}

static void test_adopt(void **state)
{
	struct wd_segment seg, ad;
	weightd_error err;
	char name[128], other[128], got[5];
	int fd;

	seg_name(name, sizeof(name), "adopt");
	assert_int_equal(wd_segment_create(name, 12345, &seg, NULL), 0);
	assert_int_equal(pwrite(seg.fd, "hello", 5, 12340), 5);
	wd_segment_seal(&seg);
	wd_segment_close(&seg);

	assert_int_equal(wd_segment_adopt(name, &ad, &err), 0);
	assert_int_equal(ad.fd, -1);
	assert_true(ad.ro_fd >= 0);
	assert_int_equal(ad.size, 12345);
	assert_string_equal(ad.name, name);
	assert_int_equal(fcntl(ad.ro_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_true(fcntl(ad.ro_fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(pread(ad.ro_fd, got, 5, 12340), 5);
	assert_memory_equal(got, "hello", 5);
	assert_int_equal(write(ad.ro_fd, "x", 1), -1);

	/* Unlinking keeps an open fd (and its contents) valid; the name is gone for adopt. */
	assert_int_equal(wd_segment_unlink(name), 0);
	assert_int_equal(pread(ad.ro_fd, got, 5, 12340), 5);
	assert_memory_equal(got, "hello", 5);
	wd_segment_close(&ad);
	assert_int_equal(wd_segment_adopt(name, &ad, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, name));

	/* An object others could write is not adopted. */
	seg_name(other, sizeof(other), "open");
	fd = shm_open(other, O_CREAT | O_EXCL | O_RDWR, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0666), 0);
	close(fd);
	assert_int_equal(wd_segment_adopt(other, &ad, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_int_equal(shm_unlink(other), 0);
}

struct seen {
	char names[16][128];
	uint64_t sizes[16];
	int n;
	int stop_after;
};

static int record(const char *name, uint64_t size, void *arg)
{
	struct seen *s = arg;

	if (s->n < 16) {
		snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name);
		s->sizes[s->n] = size;
	}
	s->n++;
	return s->stop_after && s->n >= s->stop_after ? 99 : 0;
}

static int seen_size(const struct seen *s, const char *name)
{
	for (int i = 0; i < s->n && i < 16; i++)
		if (strcmp(s->names[i], name) == 0)
			return (int)s->sizes[i];
	return -1;
}

/* Only "<prefix>." names belong to a prefix: "<prefix>x.*" and bare "<prefix>" do not. */
static void test_list_purge(void **state)
{
	static const char *mine[] = { "a", "b.c", "" };
	char name[160], p2[80];
	struct wd_segment seg;
	struct seen s;

	for (int i = 0; i < 3; i++) {
		seg_name(name, sizeof(name), mine[i]);
		assert_int_equal(wd_segment_create(name, (uint64_t)(i + 1) * 100, &seg, NULL), 0);
		wd_segment_close(&seg);
	}
	/* neighbours: "<prefix>x.d" and "<prefix>" */
	snprintf(name, sizeof(name), "/%sx.d", prefix);
	assert_int_equal(wd_segment_create(name, 1, &seg, NULL), 0);
	wd_segment_close(&seg);
	snprintf(name, sizeof(name), "/%s", prefix);
	assert_int_equal(wd_segment_create(name, 1, &seg, NULL), 0);
	wd_segment_close(&seg);

	memset(&s, 0, sizeof(s));
	assert_int_equal(wd_segment_list(prefix, record, &s), 0);
	assert_int_equal(s.n, 3);
	for (int i = 0; i < 3; i++) {
		seg_name(name, sizeof(name), mine[i]);
		assert_int_equal(seen_size(&s, name), (i + 1) * 100);
	}

	/* fn's first nonzero return stops the scan and is returned. */
	memset(&s, 0, sizeof(s));
	s.stop_after = 2;
	assert_int_equal(wd_segment_list(prefix, record, &s), 99);
	assert_int_equal(s.n, 2);

	/* the longer prefix sees only its own */
	snprintf(p2, sizeof(p2), "%sx", prefix);
	memset(&s, 0, sizeof(s));
	assert_int_equal(wd_segment_list(p2, record, &s), 0);
	assert_int_equal(s.n, 1);

	/* purge takes only names weightd makes: these three are not of that form */
	assert_int_equal(wd_segment_purge(prefix), 0);
	for (int i = 0; i < 3; i++) {
		seg_name(name, sizeof(name), mine[i]);
		assert_true(shm_exists(name));
		assert_int_equal(wd_segment_unlink(name), 0);
	}
	snprintf(name, sizeof(name), "/%sx.d", prefix);
	assert_true(shm_exists(name));
	assert_int_equal(wd_segment_unlink(name), 0);
	snprintf(name, sizeof(name), "/%s", prefix);
	assert_true(shm_exists(name));
	assert_int_equal(wd_segment_unlink(name), 0);

	assert_int_equal(wd_segment_list("bad/prefix", record, &s), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_segment_purge(".hidden"), -WEIGHTD_E_INVALID_ARGUMENT);
}

/*
 * Names weightd makes are "/<prefix>." + 32 lowercase hex digits, differ every time, are what
 * purge removes, and nothing else under the prefix counts as weightd's (foreign objects).
 */
static void test_unique_names(void **state)
{
	struct wd_segment a, b;
	weightd_error err;
	char name[160], other[160];
	size_t plen = strlen(prefix);
	int foreign;

	assert_int_equal(wd_segment_create_unique(prefix, 4096, &a, &err), 0);
	assert_int_equal(wd_segment_create_unique(prefix, 0, &b, &err), 0);
	assert_string_not_equal(a.name, b.name);
	assert_int_equal(strlen(a.name), 1 + plen + 1 + 32);
	assert_true(strncmp(a.name + 1, prefix, plen) == 0 && a.name[1 + plen] == '.');
	for (size_t i = 2 + plen; a.name[i]; i++)
		assert_non_null(strchr("0123456789abcdef", a.name[i]));
	assert_true(shm_exists(a.name));
	assert_int_equal(a.size, 4096);
	assert_true(wd_segment_name_matches(prefix, a.name));
	assert_true(wd_segment_owned(a.name));

	/* lookalikes: wrong length, upper case, another prefix, no dot */
	snprintf(name, sizeof(name), "%s", a.name);
	name[strlen(name) - 1] = '\0';
	assert_false(wd_segment_name_matches(prefix, name));
	snprintf(name, sizeof(name), "%s0", a.name);
	assert_false(wd_segment_name_matches(prefix, name));
	snprintf(name, sizeof(name), "/%s.0123456789ABCDEF0123456789abcdef", prefix);
	assert_false(wd_segment_name_matches(prefix, name));
	snprintf(name, sizeof(name), "/%sx.0123456789abcdef0123456789abcdef", prefix);
	assert_false(wd_segment_name_matches(prefix, name));
	assert_false(wd_segment_name_matches(prefix, NULL));
	assert_false(wd_segment_name_matches("bad/prefix", a.name));

	/* a squatter's object under the prefix (any name not of the pattern) is foreign */
	seg_name(other, sizeof(other), "squat");
	{
		struct wd_segment sq;

		assert_int_equal(wd_segment_create(other, 1, &sq, NULL), 0);
		wd_segment_close(&sq);
	}
	/* an earlier weightd's key-derived name, ours: not foreign, and purged */
	{
		struct wd_segment old;
		char legacy[200];

		snprintf(legacy, sizeof(legacy), "/%s.%064d", prefix, 0);
		assert_true(wd_segment_name_legacy(prefix, legacy));
		assert_false(wd_segment_name_matches(prefix, legacy));
		assert_false(wd_segment_name_legacy(prefix, a.name));
		assert_int_equal(wd_segment_create(legacy, 1, &old, NULL), 0);
		wd_segment_close(&old);
	}
	foreign = wd_segment_foreign(prefix, 0, NULL, NULL, NULL);
	assert_int_equal(foreign, 1);

	/* purge removes ours only (the legacy one included) */
	wd_segment_close(&a);
	wd_segment_close(&b);
	assert_int_equal(wd_segment_purge(prefix), 3);
	assert_false(shm_exists(a.name));
	assert_false(shm_exists(b.name));
	assert_true(shm_exists(other));
	assert_int_equal(wd_segment_unlink(other), 0);
	assert_int_equal(wd_segment_create_unique("bad/prefix", 1, &a, &err), -WEIGHTD_E_INVALID_ARGUMENT);
}

/* A name already taken (by anyone) is never reused or touched: a fresh one is drawn. */
static void test_unique_retries_on_eexist(void **state)
{
	static const uint8_t fills[] = { 0xab, 0xab, 0xcd };
	struct wd_segment a, b;
	char taken[160], want[160];
	int fd;

	(void)state;
	/* someone else's object under the name the first draw gives */
	snprintf(taken, sizeof(taken), "/%s.abababababababababababababababab", prefix);
	snprintf(want, sizeof(want), "/%s.cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd", prefix);
	fd = shm_open(taken, O_CREAT | O_EXCL | O_RDWR, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	/* first draw: the taken name; second: the same again; third: a free one */
	script_fill = fills;
	script_calls = 0;
	script_n = 3;
	assert_int_equal(wd_segment_create_unique(prefix, 4096, &a, NULL), 0);
	assert_int_equal(script_calls, 3);
	assert_string_equal(a.name, want);
	assert_int_equal(a.size, 4096);
	/* the taken object is as it was */
	{
		char path[200];
		struct stat st;

		snprintf(path, sizeof(path), "/dev/shm%s", taken);
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_size, 1);
	}
	/* always taken: the last error says so, and nothing is left behind */
	{
		static uint8_t same[8];

		memset(same, 0xab, sizeof(same));
		script_fill = same;
		script_calls = 0;
		script_n = sizeof(same);
		assert_int_equal(wd_segment_create_unique(prefix, 1, &b, NULL), -WEIGHTD_E_INVALID_ARGUMENT);
		assert_int_equal(script_calls, 8);
	}
	script_n = 0;
	wd_segment_close(&a);
	assert_int_equal(wd_segment_unlink(a.name), 0);
	assert_int_equal(wd_segment_unlink(taken), 0);
}

/* A file under `dir` (with the leading '/' of a segment name). */
static int dir_has(const char *dir, const char *name)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s%s", dir, name);
	return lstat(path, &st) == 0;
}

/*
 * segment_dir: refused unless a tmpfs directory of this uid that group and others cannot write,
 * each refusal naming the directory; once set, every operation happens in it and none in
 * /dev/shm, and the directory is private (no foreign names possible).
 */
static void test_segment_dir(void **state)
{
	char dir[64], planted[128], cwd[512];
	struct wd_segment a, b, ad;
	weightd_error err;
	struct statfs sf;
	int fd;

	(void)state;
	snprintf(dir, sizeof(dir), "/dev/shm/wdtest-dir-XXXXXX");
	assert_non_null(mkdtemp(dir));

	memset(&err, 0, sizeof(err));
	assert_int_equal(wd_segment_set_dir("/nonexistent/wd-segments", &err),
			 -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "/nonexistent/wd-segments"));
	assert_int_equal(wd_segment_set_dir("relative/dir", &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	if (statfs(cwd, &sf) == 0 && sf.f_type != TMPFS_MAGIC) {
		assert_int_equal(wd_segment_set_dir(cwd, &err), -WEIGHTD_E_INVALID_ARGUMENT);
		assert_non_null(strstr(err.message, "is not a tmpfs"));
		assert_non_null(strstr(err.message, cwd));
	}
	assert_int_equal(chmod(dir, 0770), 0);
	assert_int_equal(wd_segment_set_dir(dir, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "writable by group or others"));
	assert_non_null(strstr(err.message, dir));
	assert_int_equal(chmod(dir, 0700), 0);
	if (geteuid() == 0) {
		assert_int_equal(chown(dir, 65534, 65534), 0);
		assert_int_equal(wd_segment_set_dir(dir, &err), -WEIGHTD_E_PERMISSION_DENIED);
		assert_non_null(strstr(err.message, "owned by uid 65534"));
		assert_int_equal(chown(dir, 0, 0), 0);
	}
	assert_false(wd_segment_dir_private()); /* every refusal left /dev/shm in place */
	assert_string_equal(wd_segment_dir(), "/dev/shm");

	assert_int_equal(wd_segment_set_dir(dir, &err), 0);
	assert_true(wd_segment_dir_private());
	assert_string_equal(wd_segment_dir(), dir);
	assert_int_equal(wd_segment_create_unique(prefix, 8192, &a, &err), 0);
	assert_true(dir_has(dir, a.name));
	assert_false(shm_exists(a.name));
	assert_true(wd_segment_owned(a.name));
	assert_int_equal(wd_segment_create_sparse(prefix, 1u << 20, &b, &err), 0);
	assert_true(dir_has(dir, b.name));
	assert_int_equal(wd_segment_punch(&b, 0, 1u << 20), 0);
	wd_segment_seal(&a);
	wd_segment_close(&a);
	assert_int_equal(wd_segment_adopt(a.name, &ad, &err), 0);
	assert_int_equal(ad.size, 8192);
	wd_segment_close(&ad);
	assert_true(wd_segment_shm_free() != UINT64_MAX);
	/* names are listed there (a planted one is still told apart, if root ever put one) */
	snprintf(planted, sizeof(planted), "%s/%s.planted", dir, prefix);
	fd = open(planted, O_CREAT | O_EXCL | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(wd_segment_foreign(prefix, 0, NULL, NULL, NULL), 1);
	wd_segment_close(&b);
	assert_int_equal(wd_segment_purge(prefix), 2);
	assert_false(dir_has(dir, a.name));
	assert_false(dir_has(dir, b.name));
	assert_int_equal(unlink(planted), 0);
	assert_true(wd_segment_page_size(prefix) >= 4096);
	assert_int_equal(wd_segment_set_dir(NULL, &err), 0);
	assert_false(wd_segment_dir_private());
	assert_string_equal(wd_segment_dir(), "/dev/shm");
	assert_int_equal(rmdir(dir), 0); /* the probe left nothing */
}

/*
 * A tmpfs mounted with huge=within_size gives 2 MiB pages to segments that span one, and the
 * probe says so; /dev/shm here does not (shmem_enabled never, mounted without huge=). In a
 * private mount namespace, skipped where mounting is not allowed.
 */
static void test_page_size(void **state)
{
	char dir[64];
	pid_t pid;
	int status;

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/wdtest-huge-XXXXXX");
	assert_non_null(mkdtemp(dir));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700,huge=within_size"))
			_exit(77);
		if (wd_segment_set_dir(dir, NULL) < 0)
			_exit(1);
		if (wd_segment_page_size(prefix) != 2u << 20)
			_exit(2);
		if (mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700,huge=never") ||
		    wd_segment_set_dir(dir, NULL) < 0)
			_exit(3);
		if (wd_segment_page_size(prefix) != 4096)
			_exit(4);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	rmdir(dir);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77) {
		fprintf(stderr, "note: cannot mount a tmpfs here (not root?); skipped\n");
		skip();
		return;
	}
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_prefix_valid(void **state)
{
	char max[66];

	assert_true(wd_segment_prefix_valid("wd"));
	assert_true(wd_segment_prefix_valid("a"));
	assert_true(wd_segment_prefix_valid("Weight-d_1.x"));
	assert_true(wd_segment_prefix_valid("a."));
	assert_false(wd_segment_prefix_valid(NULL));
	assert_false(wd_segment_prefix_valid(""));
	assert_false(wd_segment_prefix_valid(".wd"));
	assert_false(wd_segment_prefix_valid("w/d"));
	assert_false(wd_segment_prefix_valid("w d"));
	assert_false(wd_segment_prefix_valid("wé"));
	assert_false(wd_segment_prefix_valid("w*"));
	memset(max, 'p', 64);
	max[64] = '\0';
	assert_true(wd_segment_prefix_valid(max));
	max[64] = 'p';
	max[65] = '\0';
	assert_false(wd_segment_prefix_valid(max));
}

TEST_MAIN(setup, teardown, cmocka_unit_test_teardown(test_create_seal_read_only, teardown),
	  cmocka_unit_test_teardown(test_zero_size, teardown),
	  cmocka_unit_test_teardown(test_exclusive, teardown),
	  cmocka_unit_test_teardown(test_bad_names, teardown),
	  cmocka_unit_test_teardown(test_exhausted, teardown),
	  cmocka_unit_test_teardown(test_adopt, teardown),
	  cmocka_unit_test_teardown(test_list_purge, teardown),
	  cmocka_unit_test_teardown(test_unique_names, teardown),
	  cmocka_unit_test_teardown(test_unique_retries_on_eexist, teardown),
	  cmocka_unit_test_teardown(test_segment_dir, teardown), cmocka_unit_test(test_page_size),
	  cmocka_unit_test(test_prefix_valid))
