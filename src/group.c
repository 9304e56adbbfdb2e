/* SPDX-License-Identifier: Apache-2.0 */
/* group.c - whether this process is in a group (its effective or a supplementary group). */
#include "group.h"

#include <stdlib.h>
#include <unistd.h>

bool wd_group_member(gid_t gid)
{
	int n = getgroups(0, NULL);
	gid_t *groups = n > 0 ? calloc((size_t)n, sizeof(*groups)) : NULL;
	bool found = getegid() == gid;

	if (groups)
		n = getgroups(n, groups);
	for (int i = 0; groups && i < n && !found; i++)
		found = groups[i] == gid;
	free(groups);
	return found;
}
