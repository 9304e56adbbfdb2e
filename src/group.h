/* SPDX-License-Identifier: Apache-2.0 */
/* group.h - whether this process is in a group (group.c), asked by libweightd of a socket's
 * directory and by weightd of the socket's group. */
#ifndef WD_GROUP_H
#define WD_GROUP_H

#include <stdbool.h>
#include <sys/types.h>

/* Is this process in group gid: its effective group or one of its supplementary groups? When
 * the supplementary list cannot be read (no memory), only the effective group counts. */
bool wd_group_member(gid_t gid);

#endif
