/* SPDX-License-Identifier: Apache-2.0 */
/* peer.c - the credentials of a client connection, all of its groups included. */
#include "peer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "wd_limits.h"

int peer_read(int fd, struct peer *p)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	size_t cap = 64;

	memset(p, 0, sizeof(*p));
	p->uid = (uid_t)-1;
	p->gid = (gid_t)-1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		p->pid = cred.pid;
		p->uid = cred.uid;
		p->gid = cred.gid;
		p->privileged = cred.uid == 0 || cred.uid == geteuid();
	}
#ifdef SO_PEERGROUPS
	/* The kernel says ERANGE with the length it needs when the buffer is too small. */
	for (;;) {
		gid_t *g = malloc(cap * sizeof(gid_t));

		if (!g)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		len = (socklen_t)(cap * sizeof(gid_t));
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) == 0) {
			if (len == 0) {
				free(g);
				return 0;
			}
			p->groups = g;
			p->n_groups = len / sizeof(gid_t);
			return 0;
		}
		free(g);
		if (errno != ERANGE || cap >= WD_MAX_PEER_GROUPS)
			return 0;
		cap = len / sizeof(gid_t) > cap ? len / sizeof(gid_t) : 2 * cap;
		if (cap > WD_MAX_PEER_GROUPS)
			cap = WD_MAX_PEER_GROUPS;
	}
#else
	return 0;
#endif
}

void peer_clear(struct peer *p)
{
	if (!p)
		return;
	free(p->groups);
	p->groups = NULL;
	p->n_groups = 0;
}
