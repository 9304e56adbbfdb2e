/* SPDX-License-Identifier: Apache-2.0 */
/* test_purge.c - weightd --purge's command line as an operator meets it: its help, each way of
 * calling it wrongly refused with status 2 (or 1 for a config that cannot be read), a purge of
 * an instance that left nothing removing nothing, and a purge by root of a segment_dir owned by
 * weightd's user. Purging a real instance is in test_lifecycle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"

/* weightd --purge with up to seven more arguments (up to the first NULL), stdout in out. */
static int purge(char *out, size_t cap, ...)
{
	char *argv[10] = { (char *)harness_weightd(), "--purge" };
	va_list ap;

	va_start(ap, cap);
	for (size_t i = 2; i < 9 && (argv[i] = va_arg(ap, char *)); i++)
		;
	va_end(ap);
	out[0] = '\0';
	return harness_run(argv, out, cap, (uid_t)-1);
}

static void help_is_printed(void **state)
{
	char out[4096];

	assert_int_equal(purge(out, sizeof(out), "--help", NULL, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "usage: weightd --purge --config FILE"));
	assert_non_null(strstr(out, "--prefix P"));
	assert_non_null(strstr(out, "unless --force"));
}

static void wrong_calls_are_refused(void **state)
{
	char out[4096], missing[400];

	/* neither --config nor --prefix, both, or --state-dir beside --config */
	assert_int_equal(purge(out, sizeof(out), NULL, NULL, NULL, NULL, NULL), 2);
	assert_int_equal(purge(out, sizeof(out), "--config", H.conf, "--prefix", H.prefix, NULL), 2);
	assert_int_equal(purge(out, sizeof(out), "--config", H.conf, "--state-dir", H.dir, NULL), 2);
	/* an argument that is no option, an unknown option, an option without its value */
	assert_int_equal(purge(out, sizeof(out), "--prefix", H.prefix, "extra", NULL, NULL), 2);
	assert_int_equal(purge(out, sizeof(out), "--prefix", H.prefix, "--yes", NULL, NULL), 2);
	assert_int_equal(purge(out, sizeof(out), "--prefix", NULL, NULL, NULL, NULL), 2);
	/* a prefix no instance could have */
	assert_int_equal(purge(out, sizeof(out), "--prefix", ".hidden", NULL, NULL, NULL), 2);
	assert_int_equal(purge(out, sizeof(out), "--prefix", "a/b", NULL, NULL, NULL), 2);
	assert_int_equal(purge(out, sizeof(out), "--prefix", "", NULL, NULL, NULL), 2);
	/* a config that cannot be read */
	snprintf(missing, sizeof(missing), "%s/no-such.conf", H.dir);
	assert_int_equal(purge(out, sizeof(out), "--config", missing, NULL, NULL, NULL), 1);
	assert_string_equal(out, "");         /* nothing claimed done */
}

static void nothing_left_nothing_removed(void **state)
{
	char out[4096], sock[400];

	/* nobody listens on this socket path; the prefix is this test's own */
	snprintf(sock, sizeof(sock), "%s/nobody.sock", H.dir);
	assert_int_equal(purge(out, sizeof(out), "--prefix", H.prefix, "--socket", sock, NULL), 0);
	assert_non_null(strstr(out, "removed 0 segments under /dev/shm/"));
	assert_non_null(strstr(out, "and 0 state records"));
	assert_int_equal(purge(out, sizeof(out), "--json", "--prefix", H.prefix, "--state-dir",
			       H.dir, "--socket", sock, NULL),
			 0);
	assert_non_null(strstr(out, "\"segments\": 0"));
	assert_non_null(strstr(out, "\"state_records\": 0"));
	assert_non_null(strstr(out, H.prefix));
}

/*
 * The package's removal purges as root, while a segment_dir belongs to weightd's user and must
 * pass the daemon's checks (owned by its uid, mode 0700): the purge acts as that user, removes
 * its segments there and leaves other names alone. A directory that fails the checks is refused
 * with status 1, naming it.
 */
static void segment_dir_of_another_user(void **state)
{
	char out[4096], sock[400], dir[64], seg[200], other[200];
	FILE *f;

	if (geteuid() != 0)
		skip(); /* giving the directory to another uid needs root */
	snprintf(sock, sizeof(sock), "%s/nobody.sock", H.dir);
	snprintf(dir, sizeof(dir), "/dev/shm/wdtest-purge-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(seg, sizeof(seg), "%s/%s.%032x", dir, H.prefix, 7);
	snprintf(other, sizeof(other), "%s/%s.notours", dir, H.prefix);
	assert_non_null(f = fopen(seg, "w"));
	fclose(f);
	assert_non_null(f = fopen(other, "w"));
	fclose(f);
	assert_int_equal(chown(seg, 65534, 65534), 0);
	assert_int_equal(chown(other, 65534, 65534), 0);
	assert_int_equal(chmod(dir, 0770), 0);
	assert_int_equal(chown(dir, 65534, 65534), 0);
#ifdef __SANITIZE_ADDRESS__
	/* The purge takes the directory owner's uid, which leaves it not dumpable, and
	 * LeakSanitizer cannot inspect such a process at its exit (a fatal error, not a leak). */
	setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 1);
#endif
	assert_int_equal(purge(out, sizeof(out), "--prefix", H.prefix, "--segment-dir", dir,
			       "--socket", sock, NULL),
			 1); /* group-writable: refused */
	assert_int_equal(access(seg, F_OK), 0);
	assert_int_equal(chmod(dir, 0700), 0);
	assert_int_equal(purge(out, sizeof(out), "--prefix", H.prefix, "--segment-dir", dir,
			       "--socket", sock, NULL),
			 0);
	assert_non_null(strstr(out, "removed 1 segment under "));
	assert_non_null(strstr(out, dir));
	assert_int_equal(access(seg, F_OK), -1);
	assert_int_equal(access(other, F_OK), 0); /* not a name weightd makes */
	assert_int_equal(unlink(other), 0);
	assert_int_equal(rmdir(dir), 0);
}

TEST_MAIN(NULL, NULL, TEST_IN_DIR(help_is_printed), TEST_IN_DIR(wrong_calls_are_refused),
	  TEST_IN_DIR(nothing_left_nothing_removed), TEST_IN_DIR(segment_dir_of_another_user))
