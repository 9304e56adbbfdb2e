/* SPDX-License-Identifier: Apache-2.0 */
/* files.h - whole files read and written by tests, failing the cmocka test when they cannot be. */
#ifndef WD_TEST_FILES_H
#define WD_TEST_FILES_H

#include <stddef.h>
#include <sys/types.h>

/* The whole of `path` (read to its end, so pipes and /proc files too), NUL-terminated, in a
 * malloc'd buffer; its length in *ret_len when not NULL. */
void *tf_read(const char *path, size_t *ret_len);

/* `path` made to hold `text`, then given `mode` (0: left as created). */
void tf_write(const char *path, const char *text, mode_t mode);

#endif
