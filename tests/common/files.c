/* SPDX-License-Identifier: Apache-2.0 */
/* files.c - whole files read and written by tests, failing the cmocka test when they cannot be. */
#include "files.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cmocka.h>

void *tf_read(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	size_t len = 0, cap = 4096, got;
	char *buf = malloc(cap);

	if (!f)
		fail_msg("cannot open %s", path);
	assert_non_null(buf);
	while ((got = fread(buf + len, 1, cap - 1 - len, f)) > 0) {
		len += got;
		if (len + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
	}
	assert_false(ferror(f));
	fclose(f);
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
	return buf;
}

void tf_write(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	if (!f)
		fail_msg("cannot create %s", path);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
	if (mode)
		assert_int_equal(chmod(path, mode), 0);
}
