/* SPDX-License-Identifier: Apache-2.0 */
/* request_query.c - the requests that read the daemon's state: hello, list, describe, status and
 * subscribe. Main thread only. */
#include "request_query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "aws_cred.h"
#include "clock.h"
#include "daemon.h"
#include "health.h"
#include "preload.h"
#include "log.h"
#include "remote.h"
#include "request.h"
#include "segment.h"
#include "session.h"
#include "uid.h"
#include "wd_limits.h"

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
	weightd_error e;

	wd_error_clear(&e);
	if (cmin > cmax)
		wd_error_set(&e, WEIGHTD_E_INVALID_ARGUMENT,
			     "hello: protocol_version %u (the oldest the client speaks) is above "
			     "max_protocol_version %u", cmin, cmax);
	else if (cmax == 0)
		wd_error_set(&e, WEIGHTD_E_UNSUPPORTED_VERSION,
			     "hello: the client gave no protocol version; this weightd %s speaks "
			     "protocol versions %u to %u", WD_VERSION, PROTO_MIN, PROTO_MAX);
	else if (v < cmin || v < PROTO_MIN)
		wd_error_set(&e, WEIGHTD_E_UNSUPPORTED_VERSION,
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

void request_query_hello(struct session *s, uint64_t id, const Weightd__Hello *h)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__HelloReply hr = WEIGHTD__HELLO_REPLY__INIT;
	const struct config *cfg = s->d->cfg;
	uint32_t version = hello_version(s, id, h);

	if (!version)
		return;
	s->protocol = version;
	session_set_name(s, h->client_name);
	hr.protocol_version = version;
	hr.min_protocol_version = PROTO_MIN;
	hr.max_protocol_version = PROTO_MAX;
	hr.server_version = WD_VERSION;
	hr.digest_algorithm = (Weightd__DigestAlgorithm)cfg->digest;
	hr.max_frame_bytes = cfg->max_frame_bytes;
	hr.max_pending_requests = cfg->client_max_pending;
	hr.max_unit_entries = cfg->max_unit_entries;
	hr.max_recipe_nodes = REQUEST_MAX_RECIPE_NODES;
	hr.max_message_bytes = cfg->max_message_bytes;
	hr.segment_max_bytes = cfg->segment_max_bytes;
	hr.max_client_bytes = cfg->client_max_bytes;
	hr.max_client_weights = cfg->client_max_weights;
	hr.instance = s->d->instance;
	hr.max_queue_fds = cfg->client_max_queue_fds;
	hr.idle_timeout_ms = cfg->idle_timeout_ms;
	hr.frame_timeout_ms = cfg->frame_timeout_ms;
	hr.max_uid_segments = (uint32_t)uid_max_segments(s->uu, cfg);
	hr.max_client_segments = cfg->client_max_segments;
	if (!s->peer.privileged && hr.max_uid_segments < hr.max_client_segments)
		hr.max_client_segments = hr.max_uid_segments; /* the uid's limit comes first */
	hr.max_uid_weights = cfg->uid_max_weights;
	resp.body_case = WEIGHTD__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	session_reply(s, &resp, id, NULL, 0);
}

/* Fill a wire SourceInfo from a catalog entry; strings are borrowed from cs. */
static void source_info(const struct csource *cs, Weightd__SourceInfo *si)
{
	weightd__source_info__init(si);
	si->name = cs->name;
	si->path = cs->path;
	si->generation = cs->generation;
	si->location = (char *)wd_source_location_of(cs->path);
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
		si->state = cs->state == CSOURCE_FAILED	 ? "failed" :
			    cs->state == CSOURCE_LOADING ? "loading" :
							   "removed";
		si->error = (char *)cs->error.message;
	}
}

/* The health fields of a SourceInfo (list and status): required, preload and how far it is, a
 * failed admission's count and the wait until it is tried again. */
static void source_health(const struct daemon *d, const struct csource *cs, Weightd__SourceInfo *si)
{
	uint64_t now = wd_clock_ms();
	size_t held, total, failed;

	si->required = cs->conf->required;
	si->preload = cs->conf->preload;
	si->preloaded = cs->conf->preload && cs->state == CSOURCE_READY &&
			preload_progress(d, cs, &held, &total, &failed) && held == total;
	if (cs->state == CSOURCE_FAILED || cs->state == CSOURCE_LOADING)
		si->admit_failures = cs->admit_failures;
	if (cs->state == CSOURCE_FAILED && cs->retry_at_ms)
		si->retry_in_ms = cs->retry_at_ms > now ? cs->retry_at_ms - now : 0;
}

void request_query_list(struct session *s, uint64_t id)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__ListReply lr = WEIGHTD__LIST_REPLY__INIT;
	size_t n = catalog_count(s->d->catalog);
	Weightd__SourceInfo *infos = calloc(n ? n : 1, sizeof(*infos));
	Weightd__SourceInfo **ptrs = calloc(n ? n : 1, sizeof(*ptrs));

	if (!infos || !ptrs) {
		free(infos);
		free(ptrs);
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct csource *cs = catalog_at(s->d->catalog, i);
		if (cs->state == CSOURCE_REMOVED || !catalog_allowed(cs, &s->peer))
			continue;
		source_info(cs, &infos[lr.n_sources]);
		source_health(s->d, cs, &infos[lr.n_sources]);
		ptrs[lr.n_sources] = &infos[lr.n_sources];
		lr.n_sources++;
	}
	lr.sources = ptrs;
	resp.body_case = WEIGHTD__RESPONSE__BODY_LIST;
	resp.list = &lr;
	session_reply(s, &resp, id, NULL, 0);
	free(infos);
	free(ptrs);
}


void request_query_describe(struct session *s, uint64_t id, const Weightd__Describe *dq)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__DescribeReply dr = WEIGHTD__DESCRIBE_REPLY__INIT;
	Weightd__SourceInfo si;
	Weightd__TensorInfo *ti = NULL, **tp = NULL;
	Weightd__MetaEntry *me = NULL, **mp = NULL;
	Weightd__RemoteObject *ro = NULL, **rp = NULL;
	struct wd_aws_cred_info cred;
	struct csource *cs;
	weightd_error e;
	size_t nt, nm, no;

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
	no = wd_source_is_remote(cs->src) ? wd_source_file_count(cs->src) : 0;
	ro = calloc(no ? no : 1, sizeof(*ro));
	rp = calloc(no ? no : 1, sizeof(*rp));
	if (!ti || !tp || !me || !mp || !ro || !rp) {
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	source_info(cs, &si);
	if (no && wd_remote_aws_cred(wd_source_remote(cs->src))) {
		wd_aws_cred_info(wd_remote_aws_cred(wd_source_remote(cs->src)), &cred);
		si.credentials = cred.source;
		si.credentials_key_id = cred.access_key;
		si.credentials_expires = cred.expires;
		si.credentials_refreshes = cred.refreshes;
	}
	for (size_t i = 0; i < no; i++) {
		const struct wd_remote_object *o = wd_source_remote_object(cs->src, (uint32_t)i);

		weightd__remote_object__init(&ro[i]);
		ro[i].url = (char *)o->shown;
		ro[i].size = o->size;
		ro[i].etag = (char *)o->etag;
		ro[i].version = (char *)o->version;
		rp[i] = &ro[i];
	}
	si.n_objects = no;
	si.objects = rp;
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
	session_reply(s, &resp, id, NULL, 0);
out:
	free(ti);
	free(tp);
	free(me);
	free(mp);
	free(ro);
	free(rp);
}


/*
 * What a peer may see of the daemon's state: root and the daemon's own user everything, anyone
 * else only the checkpoints it may read and the weights and jobs made from them (paths, labels,
 * digests, sources). A weight whose checkpoint is no longer configured is shown to the privileged
 * only.
 */
static bool may_see(const struct session *s, const struct csource *cs)
{
	if (!cs || cs->state == CSOURCE_REMOVED)
		return s->peer.privileged;
	return catalog_allowed(cs, &s->peer);
}

/*
 * A segment, and every weight in it, is shown to whoever may read EVERY checkpoint its weights
 * read (a recipe may read several, and they all share the segment): the segment's references to
 * them, or, for one adopted after a restart, the names its state record gave, joined by '+'.
 * A name that is not configured any more (or a list cut short) shows it to the privileged only.
 */
static bool may_see_segment(const struct session *s, const struct cache_segment *sg)
{
	char names[sizeof(sg->source)];
	char *p = names;

	if (s->peer.privileged)
		return true;
	if (sg->n_group) {
		for (size_t i = 0; i < sg->n_group; i++)
			if (!may_see(s, sg->group[i]))
				return false;
		return true;
	}
	snprintf(names, sizeof(names), "%s", sg->source);
	for (;;) {
		char *plus = strchr(p, '+');

		if (plus)
			*plus = '\0';
		if (!may_see(s, catalog_find(s->d->catalog, p)))
			return false;
		if (!plus)
			return true;
		p = plus + 1;
	}
}

static bool may_see_weight(const struct session *s, const struct weight *w)
{
	return (!w->csource || may_see(s, w->csource)) && may_see_segment(s, w->segment);
}

struct status_walk {
	struct session *s;
	Weightd__WeightStatus *ws;
	Weightd__WeightStatus **wp;
	size_t n;
};

static void status_weight(struct weight *w, void *arg)
{
	struct status_walk *sw = arg;
	Weightd__WeightStatus *x = &sw->ws[sw->n];

	if (!may_see_weight(sw->s, w))
		return;

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
	x->digest.len = wd_digest_len(w->digest_alg);
	x->digest_algorithm = (Weightd__DigestAlgorithm)w->digest_alg;
	x->source = w->source;
	x->adopted = w->adopted;
	x->segment = w->segment->id;
	x->offset = w->offset;
	sw->wp[sw->n] = x;
	sw->n++;
}

struct job_walk {
	struct session *s;
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
	for (size_t i = 0; i < j->n_sources; i++)
		if (!may_see(jw->s, j->sources[i]))
			return;
	x = &jw->js[jw->n];
	weightd__job_status__init(x);
	x->key.data = (uint8_t *)j->key;
	x->key.len = 32;
	x->label = (char *)j->label;
	x->nbytes = j->nbytes;
	x->done = j->done;
	x->elapsed_ms = j->elapsed_ms;
	jw->jp[jw->n++] = x;
}

struct seg_walk {
	struct session *s;
	Weightd__SegmentStatus *ss;
	Weightd__SegmentStatus **sp;
	char (*src)[sizeof(((struct cache_segment *)0)->source)]; /* its checkpoints, joined */
	size_t n, cap;
};

/* A segment is shown to whoever may see every checkpoint its weights come from. */
static void status_segment(struct cache_segment *sg, void *arg)
{
	struct seg_walk *gw = arg;
	Weightd__SegmentStatus *x;

	if (gw->n == gw->cap || !may_see_segment(gw->s, sg))
		return;
	x = &gw->ss[gw->n];
	weightd__segment_status__init(x);
	x->id = sg->id;
	x->name = sg->seg.name;
	x->size = sg->seg.size;
	x->weights = sg->n_weights;
	x->held = sg->held;
	cache_seg_source(sg, gw->src[gw->n], sizeof(gw->src[0]));
	x->source = gw->src[gw->n];
	x->adopted = sg->adopted;
	x->filling = sg->n_jobs > 0;
	gw->sp[gw->n++] = x;
}

/* A checkpoint's share of the cache and its counters: kept as they change, so O(1) here. */
static void status_source_counters(const struct csource *cs, Weightd__SourceInfo *si)
{
	const struct csource_stats *st = cs->stats;
	struct wd_remote_counters rc;

	si->resident_bytes = st->resident_bytes;
	si->held_bytes = st->resident_bytes - st->idle_bytes;
	si->materialized_bytes = st->materialized_bytes;
	si->clients = st->clients;
	si->errors = st->errors;
	catalog_remote_counters(cs, &rc);
	si->remote_bytes = rc.bytes;
	si->remote_requests = rc.requests;
	si->remote_retries = rc.retries;
	si->remote_errors = rc.errors;
}

void request_query_status(struct session *s, uint64_t id, bool omit_weights)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__StatusReply st = WEIGHTD__STATUS_REPLY__INIT;
	struct daemon *d = s->d;
	size_t ns = catalog_count(d->catalog), nw = cache_count(d->cache);
	size_t nlist = omit_weights ? 0 : nw;
	Weightd__SourceInfo *si = calloc(ns ? ns : 1, sizeof(*si));
	Weightd__SourceInfo **sp = calloc(ns ? ns : 1, sizeof(*sp));
	struct status_walk sw = { s, calloc(nlist ? nlist : 1, sizeof(*sw.ws)),
				  calloc(nlist ? nlist : 1, sizeof(*sw.wp)), 0 };
	size_t nj = cache_job_count(d->cache);
	struct job_walk jw = { s, calloc(nj ? nj : 1, sizeof(*jw.js)),
			       calloc(nj ? nj : 1, sizeof(*jw.jp)), 0, nj };
	size_t ng = cache_segment_count(d->cache);
	struct seg_walk gw = { s, calloc(ng ? ng : 1, sizeof(*gw.ss)),
			       calloc(ng ? ng : 1, sizeof(*gw.sp)),
			       calloc(ng ? ng : 1, sizeof(*gw.src)), 0, ng };
	char not_ready[2048];

	if (!si || !sp || !sw.ws || !sw.wp || !jw.js || !jw.jp || !gw.ss || !gw.sp || !gw.src) {
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	st.instance = d->instance;
	st.server_version = WD_VERSION;
	st.digest_algorithm = (Weightd__DigestAlgorithm)d->cfg->digest;
	st.digest_chunk_bytes = WD_DIGEST_CHUNK;
	st.uptime_ms = daemon_uptime_ms(d);
	st.bytes_resident = cache_resident(d->cache);
	st.budget_bytes = cache_budget(d->cache);
	st.weights = nw;
	st.clients = d->stats.clients;
	st.bytes_read = d->stats.bytes_read;
	st.materializations = d->stats.materializations;
	st.materializations_failed = d->stats.materializations_failed;
	st.materializations_in_flight = d->stats.in_flight;
	st.evictions = d->stats.evictions;
	st.readoptions = d->stats.readoptions;
	st.bytes_materialized = d->stats.bytes_materialized;
	st.materialize_ns = d->stats.materialize_ns;
	st.references = cache_references(d->cache);
	/* a count kept by another thread: any local user can fill /dev/shm with names */
	st.foreign_segments = daemon_foreign_segments(d);
	st.clients_refused = d->stats.clients_refused;
	st.clients_timed_out = d->stats.clients_timed_out;
	/* not counting this request's own frame, still charged while it is answered */
	st.partial_frame_bytes = d->stats.partial_bytes - s->partial_charged;
	st.temp_bytes = d->stats.temp_bytes;
	st.requests = d->stats.requests;
	st.requests_deferred = d->stats.requests_deferred;
	st.segments = cache_segment_count(d->cache);
	st.segment_bytes = cache_segment_bytes(d->cache);
	st.segment_dir = (char *)wd_segment_dir();
	st.segment_page_bytes = d->page_bytes;
	st.segment_huge_bytes = cache_huge_bytes(d->cache);
	st.locked_weights = cache_locked_weights(d->cache);
	st.locked_bytes = cache_locked_bytes(d->cache);
	st.idle_weights = cache_idle_weights(d->cache);
	st.idle_segments = cache_idle_segments(d->cache);
	st.health_known = true;
	st.ready = health_ready(d, &s->peer, not_ready, sizeof(not_ready));
	st.not_ready = not_ready;
	admit_counters(d->admit, &st.admissions_failed, &st.admission_retries);
	cache_foreach_segment(d->cache, status_segment, &gw);
	st.n_segment_list = gw.n;
	st.segment_list = gw.sp;
	for (size_t i = 0; i < ns; i++) {
		if (!may_see(s, catalog_at(d->catalog, i)))
			continue;
		source_info(catalog_at(d->catalog, i), &si[st.n_sources]);
		source_health(d, catalog_at(d->catalog, i), &si[st.n_sources]);
		status_source_counters(catalog_at(d->catalog, i), &si[st.n_sources]);
		sp[st.n_sources] = &si[st.n_sources];
		st.n_sources++;
	}
	st.sources = sp;
	if (!omit_weights)
		cache_foreach(d->cache, status_weight, &sw);
	st.n_weight_list = sw.n;
	st.weight_list = sw.wp;
	cache_foreach_job(d->cache, status_job, &jw);
	st.n_jobs = jw.n;
	st.jobs = jw.jp;
	resp.body_case = WEIGHTD__RESPONSE__BODY_STATUS;
	resp.status = &st;
	session_reply(s, &resp, id, NULL, 0);
out:
	free(si);
	free(sp);
	free(sw.ws);
	free(sw.wp);
	free(jw.js);
	free(jw.jp);
	free(gw.ss);
	free(gw.sp);
	free(gw.src);
}


void request_query_subscribe(struct session *s, uint64_t id, const Weightd__Subscribe *sub)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;
	char **subs = NULL;
	size_t n = 0;

	if (sub->n_checkpoints > WD_MAX_SUBSCRIPTIONS) {
		session_fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED, "at most %d subscriptions per client",
			     WD_MAX_SUBSCRIPTIONS);
		return;
	}
	if (sub->n_checkpoints) {
		subs = calloc(sub->n_checkpoints, sizeof(*subs));
		if (!subs) {
			session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	for (; n < sub->n_checkpoints; n++) {
		subs[n] = strdup(sub->checkpoints[n]);
		if (!subs[n]) {
			while (n--)
				free(subs[n]);
			free(subs);
			session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
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
	session_reply(s, &resp, id, NULL, 0);
}

struct notify {
	const struct csource *cs;
	const char *what;
};

static void notify_one(struct session *s, void *arg)
{
	const struct notify *n = arg;
	bool want = false;

	for (size_t i = 0; i < s->n_subs && !want; i++)
		want = strcmp(s->subs[i], "*") == 0 || strcmp(s->subs[i], n->cs->name) == 0;
	if (want && catalog_allowed(n->cs, &s->peer)) {
		Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
		Weightd__Event ev = WEIGHTD__EVENT__INIT;

		ev.checkpoint = n->cs->name;
		ev.generation = n->cs->generation;
		ev.what = (char *)n->what;
		resp.body_case = WEIGHTD__RESPONSE__BODY_EVENT;
		resp.event = &ev;
		session_send(s, &resp, NULL, 0);
	}
}

/* Only subscribers who may read the checkpoint hear about it ("*" means every one they may read;
 * root and the daemon's user may read all). */
void request_query_notify(struct daemon *d, const struct csource *cs, const char *what)
{
	struct notify n = { cs, what };

	daemon_foreach_session(d, notify_one, &n);
}
