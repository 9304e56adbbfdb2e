/* SPDX-License-Identifier: Apache-2.0 */
/* wd_strdup.h - an optional string copied, a failed allocation noted for the caller to check once
 * after several copies (header only). */
#ifndef WD_STRDUP_H
#define WD_STRDUP_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A copy of s, or NULL for a NULL s; when the copy cannot be made, NULL and *oom set true (left
 * as it was otherwise). */
static inline char *wd_strdup_opt(const char *s, bool *oom)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

#endif
