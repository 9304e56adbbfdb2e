/* request.c - what each request does: hello, list, describe, release, status, the admin
 * requests, and the dispatch (units and share are in request_unit.c). Main thread only. */
#include <errno.h>
#include <stdarg.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "reload.h"
#include "request.h"
#include "server.h"
#include "session.h"
#include "wire.h"

/* --- replies ---------------------------------------------------------------------------------- */

static void reply(struct session *s, Weightd__Response *resp, uint64_t id, const int *fds,
		  size_t nfds)
{
	resp->id = id;
	session_send(s, resp, fds, nfds);
}

static void fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void fail(struct session *s, uint64_t id, int code, const char *fmt, ...)
{
	struct wd_error e;
	va_list ap;

	wd_error_clear(&e);
	e.code = code;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	session_send_error(s, id, &e);
}

static void source_info(const struct csource *cs, Weightd__SourceInfo *si)
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
	} else {
		si->kind = "";
		si->state = cs->state == CSOURCE_FAILED ? "failed" : "removed";
		si->error = (char *)cs->error.msg;
	}
}

/* --- hello, list, describe -------------------------------------------------------------------- */

#define PROTO_MIN ((uint32_t)WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_MIN)
#define PROTO_MAX ((uint32_t)WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT)

/*
 * The version of a connection: the newest in both the client's range (protocol_version ..
 * max_protocol_version; a client that sends no maximum speaks protocol_version only) and ours.
 * None in common: ERR_UNSUPPORTED_VERSION naming both ranges and which side to upgrade, and the
 * connection is closed once that is sent. Returns the version, or 0 with the error sent.
 */
static uint32_t hello_version(struct session *s, uint64_t id, const Weightd__Hello *h)
{
	uint32_t cmin = h->protocol_version;
	uint32_t cmax = h->max_protocol_version ? h->max_protocol_version : cmin;
	uint32_t v = cmax < PROTO_MAX ? cmax : PROTO_MAX;
	struct wd_error e;

	wd_error_clear(&e);
	if (cmin > cmax)
		wd_error_set(&e, WD_E_INVALID,
			     "hello: protocol_version %u (the oldest the client speaks) is above "
			     "max_protocol_version %u", cmin, cmax);
	else if (cmax == 0)
		wd_error_set(&e, WD_E_VERSION,
			     "hello: the client gave no protocol version; this weightd %s speaks "
			     "protocol versions %u to %u", WD_VERSION, PROTO_MIN, PROTO_MAX);
	else if (v < cmin || v < PROTO_MIN)
		wd_error_set(&e, WD_E_VERSION,
			     "no protocol version in common: the client speaks protocol versions %u "
			     "to %u, this weightd %s speaks %u to %u; upgrade %s", cmin, cmax,
			     WD_VERSION, PROTO_MIN, PROTO_MAX,
			     cmax < PROTO_MIN ? "the client's libweightd" : "weightd");
	else
		return v;
	/* set first: the reply may be flushed inside session_send_error */
	s->close_after_flush = true;
	session_send_error(s, id, &e);
	return 0;
}

static void do_hello(struct session *s, uint64_t id, const Weightd__Hello *h)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__HelloReply hr = WEIGHTD__HELLO_REPLY__INIT;
	const struct config *cfg = s->d->cfg;
	uint32_t version = hello_version(s, id, h);

	if (!version)
		return;
	s->protocol = version;
	hr.protocol_version = version;
	hr.min_protocol_version = PROTO_MIN;
	hr.max_protocol_version = PROTO_MAX;
	hr.server_version = WD_VERSION;
	hr.max_frame_bytes = cfg->max_frame_bytes;
	hr.max_pending_requests = cfg->client_max_pending;
	hr.max_unit_entries = cfg->max_unit_entries;
	hr.max_recipe_nodes = REQUEST_MAX_RECIPE_NODES;
	hr.max_message_bytes = cfg->max_message_bytes;
	hr.segment_max_bytes = cfg->segment_max_bytes;
	hr.max_client_bytes = cfg->client_max_bytes;
	hr.max_client_weights = cfg->client_max_weights;
	hr.instance = s->d->instance;
	resp.body_case = WEIGHTD__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	reply(s, &resp, id, NULL, 0);
}

static void do_list(struct session *s, uint64_t id)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__ListReply lr = WEIGHTD__LIST_REPLY__INIT;
	size_t n = catalog_count(s->d->catalog);
	Weightd__SourceInfo *infos = calloc(n ? n : 1, sizeof(*infos));
	Weightd__SourceInfo **ptrs = calloc(n ? n : 1, sizeof(*ptrs));

	if (!infos || !ptrs) {
		free(infos);
		free(ptrs);
		fail(s, id, WD_E_EXHAUSTED, "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct csource *cs = catalog_at(s->d->catalog, i);
		if (cs->state == CSOURCE_REMOVED || !catalog_allowed(cs, &s->peer))
			continue;
		source_info(cs, &infos[lr.n_sources]);
		ptrs[lr.n_sources] = &infos[lr.n_sources];
		lr.n_sources++;
	}
	lr.sources = ptrs;
	resp.body_case = WEIGHTD__RESPONSE__BODY_LIST;
	resp.list = &lr;
	reply(s, &resp, id, NULL, 0);
	free(infos);
	free(ptrs);
}

static void do_describe(struct session *s, uint64_t id, const Weightd__Describe *dq)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__DescribeReply dr = WEIGHTD__DESCRIBE_REPLY__INIT;
	Weightd__SourceInfo si;
	Weightd__TensorInfo *ti = NULL, **tp = NULL;
	Weightd__MetaEntry *me = NULL, **mp = NULL;
	struct csource *cs;
	struct wd_error e;
	size_t nt, nm;

	wd_error_clear(&e);
	if (catalog_resolve(s->d->catalog, dq->checkpoint, &s->peer, &cs, &e) < 0) {
		session_send_error(s, id, &e);
		return;
	}
	nt = wd_source_tensor_count(cs->src);
	nm = wd_source_meta_count(cs->src);
	ti = calloc(nt ? nt : 1, sizeof(*ti));
	tp = calloc(nt ? nt : 1, sizeof(*tp));
	me = calloc(nm ? nm : 1, sizeof(*me));
	mp = calloc(nm ? nm : 1, sizeof(*mp));
	if (!ti || !tp || !me || !mp) {
		fail(s, id, WD_E_EXHAUSTED, "out of memory");
		goto out;
	}
	source_info(cs, &si);
	for (size_t i = 0; i < nt; i++) {
		const struct wd_tensor_info *t = wd_source_tensor(cs->src, i);
		const struct wd_dtype_info *di = wd_dtype_info(t->dtype);

		weightd__tensor_info__init(&ti[i]);
		ti[i].name = t->name;
		ti[i].dtype = (char *)wd_dtype_name(t->dtype);
		ti[i].n_shape = (size_t)t->ndim;
		ti[i].shape = (uint64_t *)t->shape;
		ti[i].nbytes = t->nbytes;
		ti[i].offset = t->offset;
		ti[i].file = (char *)wd_source_file_name(cs->src, t->file);
		ti[i].block_elems = di ? di->block_elems : 0;
		ti[i].block_bytes = di ? di->block_bytes : 0;
		tp[i] = &ti[i];
	}
	for (size_t i = 0; i < nm; i++) {
		const struct wd_meta *m = wd_source_meta(cs->src, i);
		weightd__meta_entry__init(&me[i]);
		me[i].key = m->key;
		me[i].value = m->value;
		me[i].type = m->type;
		mp[i] = &me[i];
	}
	dr.source = &si;
	dr.n_tensors = nt;
	dr.tensors = tp;
	dr.n_metadata = nm;
	dr.metadata = mp;
	resp.body_case = WEIGHTD__RESPONSE__BODY_DESCRIBE;
	resp.describe = &dr;
	reply(s, &resp, id, NULL, 0);
out:
	free(ti);
	free(tp);
	free(me);
	free(mp);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void do_release(struct session *s, uint64_t id, const Weightd__Release *rl)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;
	uint64_t *sorted;

	if (rl->n_handles > s->d->cfg->max_unit_entries) {
		fail(s, id, WD_E_LIMIT, "limit exceeded: a release of %zu handles; at most %u "
		     "(max_unit_entries)", rl->n_handles, s->d->cfg->max_unit_entries);
		return;
	}
	sorted = malloc((rl->n_handles ? rl->n_handles : 1) * sizeof(*sorted));
	if (!sorted) {
		fail(s, id, WD_E_EXHAUSTED, "out of memory");
		return;
	}
	/* All handles are checked before any is released: a bad list changes nothing. A handle may
	 * appear as often as the client holds it. */
	if (rl->n_handles)
		memcpy(sorted, rl->handles, rl->n_handles * sizeof(*sorted));
	qsort(sorted, rl->n_handles, sizeof(*sorted), cmp_u64);
	for (size_t i = 0; i < rl->n_handles;) {
		struct held *h = session_find_held(s, sorted[i]);
		size_t j = i;

		while (j < rl->n_handles && sorted[j] == sorted[i])
			j++;
		if (!h || h->count < j - i) {
			fail(s, id, WD_E_NOT_FOUND,
			     "this client does not hold weight %llu (as many times as it releases it)",
			     (unsigned long long)sorted[i]);
			free(sorted);
			return;
		}
		i = j;
	}
	free(sorted);
	for (size_t i = 0; i < rl->n_handles; i++)
		session_release(s, session_find_held(s, rl->handles[i])->w);
	resp.body_case = WEIGHTD__RESPONSE__BODY_RELEASE;
	resp.release = &empty;
	reply(s, &resp, id, NULL, 0);
}

/* --- status, admin, subscribe ------------------------------------------------------------------ */

struct status_walk {
	Weightd__WeightStatus *ws;
	Weightd__WeightStatus **wp;
	size_t n;
};

static void status_weight(struct weight *w, void *arg)
{
	struct status_walk *sw = arg;
	Weightd__WeightStatus *x = &sw->ws[sw->n];

	weightd__weight_status__init(x);
	x->handle = w->id;
	x->label = w->label;
	x->dtype = (char *)wd_dtype_name(w->dtype);
	x->n_shape = (size_t)w->ndim;
	x->shape = w->shape;
	x->nbytes = w->nbytes;
	x->refs = w->refs;
	x->clients = w->holders;
	x->generation = w->generation;
	x->digest.data = w->digest;
	x->digest.len = 32;
	x->source = w->source;
	x->adopted = w->adopted;
	x->segment = w->segment->id;
	x->offset = w->offset;
	sw->wp[sw->n] = x;
	sw->n++;
}

struct job_walk {
	Weightd__JobStatus *js;
	Weightd__JobStatus **jp;
	size_t n, cap;
};

static void status_job(const struct cache_job_info *j, void *arg)
{
	struct job_walk *jw = arg;
	Weightd__JobStatus *x;

	if (jw->n == jw->cap)
		return;
	x = &jw->js[jw->n];
	weightd__job_status__init(x);
	x->key.data = (uint8_t *)j->key;
	x->key.len = 32;
	x->label = (char *)j->label;
	x->nbytes = j->nbytes;
	x->done = j->done;
	jw->jp[jw->n++] = x;
}

struct seg_walk {
	Weightd__SegmentStatus *ss;
	Weightd__SegmentStatus **sp;
	size_t n, cap;
};

static void status_segment(struct cache_segment *sg, void *arg)
{
	struct seg_walk *sw = arg;
	Weightd__SegmentStatus *x;

	if (sw->n == sw->cap)
		return;
	x = &sw->ss[sw->n];
	weightd__segment_status__init(x);
	x->id = sg->id;
	x->name = sg->seg.name;
	x->size = sg->seg.size;
	x->weights = sg->n_weights;
	x->held = sg->held;
	x->source = sg->source;
	x->adopted = sg->adopted;
	x->filling = sg->n_jobs > 0;
	sw->sp[sw->n++] = x;
}

static void do_status(struct session *s, uint64_t id)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__StatusReply st = WEIGHTD__STATUS_REPLY__INIT;
	struct daemon *d = s->d;
	size_t ns = catalog_count(d->catalog), nw = cache_count(d->cache);
	Weightd__SourceInfo *si = calloc(ns ? ns : 1, sizeof(*si));
	Weightd__SourceInfo **sp = calloc(ns ? ns : 1, sizeof(*sp));
	struct status_walk sw = { calloc(nw ? nw : 1, sizeof(*sw.ws)), calloc(nw ? nw : 1, sizeof(*sw.wp)), 0 };
	size_t nj = cache_job_count(d->cache);
	struct job_walk jw = { calloc(nj ? nj : 1, sizeof(*jw.js)), calloc(nj ? nj : 1, sizeof(*jw.jp)),
			       0, nj };
	size_t ng = cache_segment_count(d->cache);
	struct seg_walk gw = { calloc(ng ? ng : 1, sizeof(*gw.ss)), calloc(ng ? ng : 1, sizeof(*gw.sp)),
			       0, ng };

	if (!si || !sp || !sw.ws || !sw.wp || !jw.js || !jw.jp || !gw.ss || !gw.sp) {
		fail(s, id, WD_E_EXHAUSTED, "out of memory");
		goto out;
	}
	st.instance = d->instance;
	st.server_version = WD_VERSION;
	st.uptime_ms = daemon_uptime_ms(d);
	st.bytes_resident = cache_resident(d->cache);
	st.budget_bytes = cache_budget(d->cache);
	st.weights = nw;
	st.clients = server_clients(d->server);
	st.bytes_read = d->stats.bytes_read;
	st.materializations = d->stats.materializations;
	st.materializations_failed = d->stats.materializations_failed;
	st.materializations_in_flight = d->stats.in_flight;
	st.evictions = d->stats.evictions;
	st.readoptions = d->stats.readoptions;
	st.bytes_materialized = d->stats.bytes_materialized;
	st.materialize_ns = d->stats.materialize_ns;
	st.references = cache_references(d->cache);
	st.segments = cache_segment_count(d->cache);
	st.segment_bytes = cache_segment_bytes(d->cache);
	st.idle_weights = cache_idle_weights(d->cache);
	st.idle_segments = cache_idle_segments(d->cache);
	cache_foreach_segment(d->cache, status_segment, &gw);
	st.n_segment_list = gw.n;
	st.segment_list = gw.sp;
	for (size_t i = 0; i < ns; i++) {
		source_info(catalog_at(d->catalog, i), &si[st.n_sources]);
		sp[st.n_sources] = &si[st.n_sources];
		st.n_sources++;
	}
	st.sources = sp;
	cache_foreach(d->cache, status_weight, &sw);
	st.n_weight_list = sw.n;
	st.weight_list = sw.wp;
	cache_foreach_job(d->cache, status_job, &jw);
	st.n_jobs = jw.n;
	st.jobs = jw.jp;
	resp.body_case = WEIGHTD__RESPONSE__BODY_STATUS;
	resp.status = &st;
	reply(s, &resp, id, NULL, 0);
out:
	free(si);
	free(sp);
	free(sw.ws);
	free(sw.wp);
	free(jw.js);
	free(jw.jp);
	free(gw.ss);
	free(gw.sp);
}

static bool require_privilege(struct session *s, uint64_t id, const char *what)
{
	if (s->privileged)
		return true;
	fail(s, id, WD_E_PERMISSION, "only root or the daemon's own user may %s", what);
	return false;
}

/* Answered by server_reload_done once the reload has been applied. */
static void do_reload(struct session *s, uint64_t id)
{
	if (!require_privilege(s, id, "reload the configuration"))
		return;
	if (!s->d->reload) {
		fail(s, id, WD_E_UNSUPPORTED, "reload is not available");
		return;
	}
	reload_request(s->d->reload, s->id, id);
}

static void do_evict(struct session *s, uint64_t id, const Weightd__Evict *ev)
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
	reply(s, &resp, id, NULL, 0);
}

/* A subscription replaces the previous one; an empty list unsubscribes. */
static void do_subscribe(struct session *s, uint64_t id, const Weightd__Subscribe *sub)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;
	char **subs = NULL;
	size_t n = 0;

	if (sub->n_checkpoints > 4096) {
		fail(s, id, WD_E_LIMIT, "at most %d subscriptions per client", 4096);
		return;
	}
	if (sub->n_checkpoints) {
		subs = calloc(sub->n_checkpoints, sizeof(*subs));
		if (!subs) {
			fail(s, id, WD_E_EXHAUSTED, "out of memory");
			return;
		}
	}
	for (; n < sub->n_checkpoints; n++) {
		subs[n] = strdup(sub->checkpoints[n]);
		if (!subs[n]) {
			while (n--)
				free(subs[n]);
			free(subs);
			fail(s, id, WD_E_EXHAUSTED, "out of memory");
			return;
		}
	}
	for (size_t i = 0; i < s->n_subs; i++)
		free(s->subs[i]);
	free(s->subs);
	s->subs = subs;
	s->n_subs = n;
	resp.body_case = WEIGHTD__RESPONSE__BODY_SUBSCRIBE;
	resp.subscribe = &empty;
	reply(s, &resp, id, NULL, 0);
}

void request_dispatch(struct session *s, Weightd__Request *req)
{
	switch (req->body_case) {
	case WEIGHTD__REQUEST__BODY_HELLO: do_hello(s, req->id, req->hello); break;
	case WEIGHTD__REQUEST__BODY_LIST: do_list(s, req->id); break;
	case WEIGHTD__REQUEST__BODY_DESCRIBE: do_describe(s, req->id, req->describe); break;
	case WEIGHTD__REQUEST__BODY_PREFLIGHT: request_unit(s, req->id, req->preflight, true); break;
	case WEIGHTD__REQUEST__BODY_MATERIALIZE: request_unit(s, req->id, req->materialize, false); break;
	case WEIGHTD__REQUEST__BODY_SHARE: request_share(s, req->id, req->share); break;
	case WEIGHTD__REQUEST__BODY_RELEASE: do_release(s, req->id, req->release); break;
	case WEIGHTD__REQUEST__BODY_STATUS: do_status(s, req->id); break;
	case WEIGHTD__REQUEST__BODY_RELOAD: do_reload(s, req->id); break;
	case WEIGHTD__REQUEST__BODY_EVICT: do_evict(s, req->id, req->evict); break;
	case WEIGHTD__REQUEST__BODY_SUBSCRIBE: do_subscribe(s, req->id, req->subscribe); break;
	default:
		/* A newer client's request this daemon does not know: say so, keep the connection. */
		fail(s, req->id, WD_E_UNSUPPORTED, "this weightd does not know that request");
		break;
	}
}
