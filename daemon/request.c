/* SPDX-License-Identifier: Apache-2.0 */
/* request.c - dispatch of decoded requests to their modules (units in unit.c, share and release in
 * request_holds.c, queries in request_query.c and request_clients.c, admin requests in
 * request_admin.c). They answer
 * through session_reply and session_fail (session.c), never back through here. Main thread only. */
#include "request.h"

#include "request_admin.h"
#include "request_clients.h"
#include "request_holds.h"
#include "request_query.h"
#include "session.h"
#include "unit.h"

void request_dispatch(struct session *s, Weightd__Request *req)
{
	switch (req->body_case) {
	case WEIGHTD__REQUEST__BODY_HELLO: request_query_hello(s, req->id, req->hello); break;
	case WEIGHTD__REQUEST__BODY_LIST: request_query_list(s, req->id); break;
	case WEIGHTD__REQUEST__BODY_DESCRIBE: request_query_describe(s, req->id, req->describe); break;
	case WEIGHTD__REQUEST__BODY_PREFLIGHT:
		unit_request(s, req->id, req->preflight, true);
		break;
	case WEIGHTD__REQUEST__BODY_MATERIALIZE:
		unit_request(s, req->id, req->materialize, false);
		break;
	case WEIGHTD__REQUEST__BODY_SHARE: request_holds_share(s, req->id, req->share); break;
	case WEIGHTD__REQUEST__BODY_RELEASE:
		request_holds_release(s, req->id, req->release, req->quiet);
		break;
	case WEIGHTD__REQUEST__BODY_STATUS:
		request_query_status(s, req->id, req->status && req->status->omit_weights);
		break;
	case WEIGHTD__REQUEST__BODY_RELOAD: request_admin_reload(s, req->id); break;
	case WEIGHTD__REQUEST__BODY_EVICT: request_admin_evict(s, req->id, req->evict); break;
	case WEIGHTD__REQUEST__BODY_SUBSCRIBE: request_query_subscribe(s, req->id, req->subscribe); break;
	case WEIGHTD__REQUEST__BODY_REATTACH: request_holds_reattach(s, req->id, req->reattach); break;
	case WEIGHTD__REQUEST__BODY_CLIENTS: request_clients(s, req->id); break;
	default:
		/* A newer client's request this daemon does not know: say so, keep the connection. */
		session_fail(s, req->id, WEIGHTD_E_UNSUPPORTED,
			     "this weightd does not know that request");
		break;
	}
}

void request_session_gone(struct session *s)
{
	unit_session_gone(s);
}
