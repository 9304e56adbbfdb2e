/* SPDX-License-Identifier: Apache-2.0 */
/* request_clients.c - the clients request: who is connected and what each holds (weightctl
 * clients). Main thread only. */
#include "request_clients.h"

#include <stdlib.h>

#include "clock.h"
#include "daemon.h"
#include "session.h"

/*
 * Who is connected is itself something to keep from other uids (which engines run, as whom,
 * since when): an ordinary peer sees its own uid's connections, as `ps` shows a user its own
 * processes; the admin socket's peers see every one. The table is as long as the connections,
 * which max_clients bounds.
 */
void request_clients(struct session *s, uint64_t id)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__ClientsReply cr = WEIGHTD__CLIENTS_REPLY__INIT;
	struct daemon *d = s->d;
	struct session *o;
	size_t n = 0, i = 0;
	Weightd__ClientInfo *ci;
	Weightd__ClientInfo **cp;
	uint64_t now = wd_clock_ms();

	LIST_FOREACH(o, &d->sessions, link)
	n++;
	ci = calloc(n ? n : 1, sizeof(*ci));
	cp = calloc(n ? n : 1, sizeof(*cp));
	if (!ci || !cp) {
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	LIST_FOREACH(o, &d->sessions, link)
	{
		Weightd__ClientInfo *x = &ci[i];

		if (i == n)
			break;
		if (!s->peer.privileged && o->peer.uid != s->peer.uid)
			continue;
		weightd__client_info__init(x);
		x->id = o->id;
		x->uid = (uint32_t)o->peer.uid;
		x->gid = (uint32_t)o->peer.gid;
		x->pid = (int32_t)o->peer.pid;
		x->name = o->name;
		x->bytes = o->holds.held_bytes;
		x->weights = o->holds.refs;
		x->segments = o->holds.n_segs;
		x->pending = o->holds.pending;
		x->connected_ms = now - o->connected_ms;
		x->admin = o->peer.admin_socket;
		cp[i++] = x;
	}
	cr.n_clients = i;
	cr.clients = cp;
	resp.body_case = WEIGHTD__RESPONSE__BODY_CLIENTS;
	resp.clients = &cr;
	session_reply(s, &resp, id, NULL, 0);
out:
	free(ci);
	free(cp);
}
