/* SPDX-License-Identifier: Apache-2.0 */
/* request_admin.c - the admin requests (reload, evict), answered on the admin socket only (or,
 * with single_socket, to root and the daemon's own user). Main thread only. */
#include "request_admin.h"

#include "daemon.h"
#include "reload.h"
#include "request.h"
#include "session.h"

/*
 * Whether s may change what every client sees: only a peer server.c made admin (the admin
 * socket's, or root and weightd's user under single_socket). The refusal names the admin socket,
 * so that whoever meets it on the engine socket knows where an operator goes instead.
 */
static bool require_privilege(struct session *s, uint64_t id, const char *what)
{
	const struct config *cfg = s->d->cfg;

	if (s->peer.admin)
		return true;
	if (cfg->single_socket)
		session_fail(s, id, WEIGHTD_E_PERMISSION_DENIED,
			     "permission denied: only root or the daemon's own user may %s", what);
	else
		session_fail(s, id, WEIGHTD_E_PERMISSION_DENIED,
			     "permission denied: to %s is an administrative request, answered only "
			     "on the admin socket %s (to root, weightd's user, admin_users and "
			     "admin_groups); on the engine socket uid %u is an ordinary client, root "
			     "included (weightctl --admin-socket PATH)",
			     what, cfg->admin_socket, (unsigned)s->peer.uid);
	return false;
}

/* The answer to a reload request, if its client is still connected. */
static void reload_answered(struct daemon *d, uint64_t session, uint64_t request,
			    const struct reload_report *rep, const weightd_error *err)
{
	struct session *s = daemon_session(d, session);

	if (!s)
		return;
	if (s->reloads)
		s->reloads--;
	if (err) {
		session_send_error(s, request, err);
	} else {
		Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
		Weightd__ReloadReply rr = WEIGHTD__RELOAD_REPLY__INIT;

		rr.changes = rep->changes;
		rr.n_changes = rep->n_changes;
		rr.warnings = rep->warnings;
		rr.n_warnings = rep->n_warnings;
		resp.id = request;
		resp.body_case = WEIGHTD__RESPONSE__BODY_RELOAD;
		resp.reload = &rr;
		session_send(s, &resp, NULL, 0);
	}
	session_check_done(s);
}

/* Answered by reload_answered once the reload has been applied or has failed. */
void request_admin_reload(struct session *s, uint64_t id)
{
	if (!require_privilege(s, id, "reload the configuration"))
		return;
	if (!s->d->reload) {
		session_fail(s, id, WEIGHTD_E_UNSUPPORTED, "reload is not available");
		return;
	}
	s->reloads++;
	reload_request(s->d->reload, reload_answered, s->id, id);
}

void request_admin_evict(struct session *s, uint64_t id, const Weightd__Evict *ev)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__EvictReply er = WEIGHTD__EVICT_REPLY__INIT;
	uint64_t bytes = 0;

	if (!require_privilege(s, id, "evict weights"))
		return;
	er.weights = cache_evict_all(s->d->cache, &bytes);
	er.bytes = bytes;
	resp.body_case = WEIGHTD__RESPONSE__BODY_EVICT;
	resp.evict = &er;
	session_reply(s, &resp, id, NULL, 0);
}
