/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_log.c - level names parse and print both ways, lines below the level are dropped,
 * and each line carries its level as journald's "<N>" prefix or as plain "weightd: level: ". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "log.h"

static void levels_parse_and_print(void **state)
{
	static const struct { const char *name; int level; } names[] = {
		{ "error", LOG_LVL_ERR }, { "warning", LOG_LVL_WARNING },
		{ "notice", LOG_LVL_NOTICE }, { "info", LOG_LVL_INFO }, { "debug", LOG_LVL_DEBUG },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_int_equal(log_level_parse(names[i].name), names[i].level);
		assert_string_equal(log_level_name(names[i].level), names[i].name);
	}
	assert_int_equal(log_level_parse("err"), LOG_LVL_ERR);       /* short forms */
	assert_int_equal(log_level_parse("warn"), LOG_LVL_WARNING);
	assert_int_equal(log_level_parse("Info"), -1);               /* names are lower case */
	assert_int_equal(log_level_parse("verbose"), -1);
	assert_int_equal(log_level_parse(""), -1);
	assert_int_equal(log_level_parse(NULL), -1);
	assert_string_equal(log_level_name(0), "?");
	assert_string_equal(log_level_name(8), "?");
	log_set_level(LOG_LVL_DEBUG);
	assert_int_equal(log_get_level(), LOG_LVL_DEBUG);
}

/* What log_msg wrote to stderr while `fn` ran, as one string (owned by the caller). */
static char *captured(void (*fn)(void))
{
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	char *buf = calloc(1, 4096);
	size_t n;

	assert_non_null(tmp);
	assert_non_null(buf);
	assert_true(saved >= 0);
	fflush(stderr);
	assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
	fn();
	fflush(stderr);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	rewind(tmp);
	n = fread(buf, 1, 4095, tmp);
	buf[n] = '\0';
	fclose(tmp);
	return buf;
}

static void log_each_level(void)
{
	log_err("e %d", 1);
	log_warn("w %s", "two");
	log_notice("n");
	log_info("i");
	log_debug("d");
}

static void lines_below_the_level_are_dropped(void **state)
{
	char *out;

	log_set_prefix(0);
	log_set_level(LOG_LVL_NOTICE);
	out = captured(log_each_level);
	assert_string_equal(out, "weightd: error: e 1\n"
				 "weightd: warning: w two\n"
				 "weightd: notice: n\n");
	free(out);

	log_set_level(LOG_LVL_DEBUG);
	out = captured(log_each_level);
	assert_non_null(strstr(out, "weightd: info: i\n"));
	assert_non_null(strstr(out, "weightd: debug: d\n"));
	free(out);

	log_set_level(LOG_LVL_ERR);
	out = captured(log_each_level);
	assert_string_equal(out, "weightd: error: e 1\n");
	free(out);
}

static void journald_lines_carry_the_priority(void **state)
{
	char *out;

	log_set_prefix(1);
	log_set_level(LOG_LVL_INFO);
	out = captured(log_each_level);
	assert_string_equal(out, "<3>e 1\n<4>w two\n<5>n\n<6>i\n");
	free(out);
	log_set_prefix(0);
}

static void log_long_line(void)
{
	char big[4000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	log_err("%s", big);
}

static void a_long_line_is_cut_not_overrun(void **state)
{
	char *out;
	size_t len;

	log_set_prefix(1);
	log_set_level(LOG_LVL_INFO);
	out = captured(log_long_line);
	len = strlen(out);
	/* one line: "<3>", the message cut to the line buffer (a few thousand bytes), a newline */
	assert_true(len > 1000 && len < 3 + 3999 + 1);
	assert_memory_equal(out, "<3>xxx", 6);
	assert_ptr_equal(strchr(out, '\n'), out + len - 1);
	free(out);
	log_set_prefix(0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(levels_parse_and_print),
	  cmocka_unit_test(lines_below_the_level_are_dropped),
	  cmocka_unit_test(journald_lines_carry_the_priority),
	  cmocka_unit_test(a_long_line_is_cut_not_overrun))
