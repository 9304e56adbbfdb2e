/* SPDX-License-Identifier: Apache-2.0 */
/* request.c - dispatch of decoded requests, the helpers every request module shares (replies,
 * errors, source info), share and release. Units are in unit.c, queries in request_query.c,
 * admin requests in request_admin.c. Main thread only. */
#include <stdarg.h>
#include <stdio.h>

#include "request.h"

#include "daemon.h"
#include "holds.h"
#include "request_admin.h"
#include "request_query.h"
#include "session.h"
#include "unit.h"

/* --- replies ---------------------------------------------------------------------------------- */

void request_reply(struct session *s, Weightd__Response *resp, uint64_t id, const int *fds,
		   size_t nfds)
{
	resp->id = id;
	session_send(s, resp, fds, nfds);
}

static void vfail(struct session *s, uint64_t id, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

static void vfail(struct session *s, uint64_t id, int code, const char *fmt, va_list ap)
{
	weightd_error e;

	wd_error_clear(&e);
	e.code = code;
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	session_send_error(s, id, &e);
}

void request_fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(s, id, code, fmt, ap);
	va_end(ap);
}

static void reply(struct session *s, Weightd__Response *resp, uint64_t id, const int *fds,
		  size_t nfds)
{
	request_reply(s, resp, id, fds, nfds);
}

static void fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(s, id, code, fmt, ap);
	va_end(ap);
}

void request_source_info(const struct csource *cs, Weightd__SourceInfo *si)
{
	weightd__source_info__init(si);
	si->name = cs->name;
	si->path = cs->path;
	si->generation = cs->generation;
	if (cs->state == CSOURCE_READY) {
		si->kind = (char *)wd_source_kind_name(wd_source_kind(cs->src));
		si->tensors = wd_source_tensor_count(cs->src);
		si->bytes = wd_source_bytes(cs->src);
		si->files = (uint32_t)wd_source_file_count(cs->src);
		si->state = "ready";
		if (cs->refused.code)
			si->error = (char *)cs->refused.message;
	} else {
		si->kind = "";
		si->state = cs->state == CSOURCE_FAILED ? "failed" : "removed";
		si->error = (char *)cs->error.message;
	}
}

/* --- share, release --------------------------------------------------------------------------- */

/* A reply's WeightInfo for w named `name` (strings and bytes borrowed from w). */
static void request_weight_info(Weightd__WeightInfo *wi, const struct weight *w, const char *name)
{
	weightd__weight_info__init(wi);
	wi->name = (char *)name;
	wi->handle = w->id;
	wi->dtype = (char *)wd_dtype_name(w->dtype);
	wi->n_shape = (size_t)w->ndim;
	wi->shape = (uint64_t *)w->shape;
	wi->nbytes = w->nbytes;
	wi->digest.data = (uint8_t *)w->digest;
	wi->digest.len = wd_digest_len(w->digest_alg);
	wi->digest_algorithm = (Weightd__DigestAlgorithm)w->digest_alg;
	wi->key.data = (uint8_t *)w->key;
	wi->key.len = 32;
	wi->generation = w->generation;
	wi->segment = w->segment->id;
	wi->offset = w->offset;
}

void request_share(struct session *s, uint64_t id, const Weightd__Share *sh)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__ShareReply sr = WEIGHTD__SHARE_REPLY__INIT;
	Weightd__SegmentInfo si = WEIGHTD__SEGMENT_INFO__INIT;
	Weightd__WeightInfo wi;
	struct weight *w = NULL;
	int fd, r = holds_share(&s->holds, sh->handle, &w);

	if (r == -WEIGHTD_E_NOT_FOUND) {
		char buf[32];
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)sh->handle);
		request_fail(s, id, WEIGHTD_E_NOT_FOUND, "this client holds no weight with handle %s", buf);
		return;
	}
	if (r == -WEIGHTD_E_LIMIT_EXCEEDED) {
		request_fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED, "the client holds its maximum number of weights");
		return;
	}
	if (r < 0) {
		request_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	fd = w->segment->seg.ro_fd; /* lent: held by the client (twice now) while it is sent */
	request_weight_info(&wi, w, w->label);
	si.id = w->segment->id;
	si.size = w->segment->seg.size;
	si.fd_index = 0;
	sr.weight = &wi;
	sr.segment = &si;
	resp.body_case = WEIGHTD__RESPONSE__BODY_SHARE;
	resp.share = &sr;
	resp.id = id;
	session_send_borrowed(s, &resp, &fd, 1);
}

static void do_release(struct session *s, uint64_t id, const Weightd__Release *rl, bool quiet)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;
	uint64_t missing = 0;
	int r;

	if (rl->n_handles > s->d->cfg->max_unit_entries) {
		fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED, "limit exceeded: a release of %zu handles; at most %u "
		     "(max_unit_entries)", rl->n_handles, s->d->cfg->max_unit_entries);
		return;
	}
	r = holds_release_all(&s->holds, rl->handles, rl->n_handles, &missing);
	if (r == -WEIGHTD_E_NOT_FOUND) {
		fail(s, id, WEIGHTD_E_NOT_FOUND,
		     "this client does not hold weight %llu (as many times as it releases it)",
		     (unsigned long long)missing);
		return;
	}
	if (r < 0) {
		fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (quiet)
		return;   /* nobody waits for it: one round trip is one message each way */
	resp.body_case = WEIGHTD__RESPONSE__BODY_RELEASE;
	resp.release = &empty;
	reply(s, &resp, id, NULL, 0);
}

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
	case WEIGHTD__REQUEST__BODY_SHARE: request_share(s, req->id, req->share); break;
	case WEIGHTD__REQUEST__BODY_RELEASE: do_release(s, req->id, req->release, req->quiet); break;
	case WEIGHTD__REQUEST__BODY_STATUS:
		request_query_status(s, req->id, req->status && req->status->omit_weights);
		break;
	case WEIGHTD__REQUEST__BODY_RELOAD: request_admin_reload(s, req->id); break;
	case WEIGHTD__REQUEST__BODY_EVICT: request_admin_evict(s, req->id, req->evict); break;
	case WEIGHTD__REQUEST__BODY_SUBSCRIBE: request_query_subscribe(s, req->id, req->subscribe); break;
	default:
		/* A newer client's request this daemon does not know: say so, keep the connection. */
		fail(s, req->id, WEIGHTD_E_UNSUPPORTED, "this weightd does not know that request");
		break;
	}
}

void request_session_gone(struct session *s)
{
	unit_session_gone(s);
}
