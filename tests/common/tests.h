/* SPDX-License-Identifier: Apache-2.0 */
/* tests.h - the main() of every cmocka test program, written once (modelled on systemd's
 * src/shared/tests.h and its DEFINE_TEST_MAIN). Header only. */
#ifndef WD_TESTS_H
#define WD_TESTS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <unistd.h>

#include <cmocka.h>

/*
 * main() running the tests given (cmocka_unit_test(...) and its kin) as one group, with the
 * group's setup and teardown (either may be NULL). The program's exit status is cmocka's: the
 * number of tests that failed.
 */
#define TEST_MAIN(setup, teardown, ...)                                     \
	int main(void)                                                      \
	{                                                                   \
		const struct CMUnitTest tests_[] = { __VA_ARGS__ };         \
		return cmocka_run_group_tests(tests_, (setup), (teardown)); \
	}

/* TEST_MAIN with a watchdog: SIGALRM ends the program after `seconds`, so a hung daemon fails
 * the test instead of stalling CI. */
#define TEST_MAIN_WATCHDOG(seconds, setup, teardown, ...)                   \
	int main(void)                                                      \
	{                                                                   \
		const struct CMUnitTest tests_[] = { __VA_ARGS__ };         \
		alarm(seconds);                                             \
		return cmocka_run_group_tests(tests_, (setup), (teardown)); \
	}

#endif
