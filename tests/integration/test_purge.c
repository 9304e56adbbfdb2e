/* SPDX-License-Identifier: Apache-2.0 */
/* test_purge.c - weightd --purge's command line as an operator meets it: its help, each way of
 * calling it wrongly refused with status 2 (or 1 for a config that cannot be read), and a purge of
 * an instance that left nothing removing nothing. Purging a real instance is in test_lifecycle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static struct harness H;

static int setup(void **state)
{
	return harness_init(&H) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	harness_cleanup(&H);
	return 0;
}

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
	assert_int_equal(purge(out, sizeof(out), "--prefix", H.prefix, "--force", NULL, NULL), 2);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(help_is_printed, setup, teardown),
		cmocka_unit_test_setup_teardown(wrong_calls_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(nothing_left_nothing_removed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
