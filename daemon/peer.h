/* SPDX-License-Identifier: Apache-2.0 */
/* peer.h - who is at the other end of a client connection: pid, uid, gid and every group. */
#ifndef WD_PEER_H
#define WD_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Who is asking: from SO_PEERCRED and SO_PEERGROUPS at accept time. */
struct peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	gid_t *groups;
	size_t n_groups;
	/* sees and reads everything, takes no share: root or the daemon's own uid as peer_read
	 * sets it; server.c then takes it away on the engine socket (unless single_socket) and
	 * gives it to admin_users/admin_groups on the admin socket */
	bool privileged;
	bool admin;	   /* may send administrative requests (reload, evict) */
	bool admin_socket; /* came through the admin socket */
};

/*
 * Fill *ret from SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket. Every supplementary
 * group is read, however many (the buffer grows while the kernel says ERANGE), so allow_groups
 * never misses one. The peer is privileged when its uid is 0 or the daemon's effective uid. What
 * cannot be read is left as "nobody": uid and gid (uid_t)-1, no groups, not privileged.
 * Returns 0, or -WEIGHTD_E_RESOURCE_EXHAUSTED when memory for the groups is not to be had (the peer
 * then has only its primary group, and the caller should refuse it rather than guess). ret->groups
 * is malloc'd; free it with peer_clear.
 */
int peer_read(int fd, struct peer *ret);

/* Free what peer_read allocated. Accepts NULL. */
void peer_clear(struct peer *p);

#endif
