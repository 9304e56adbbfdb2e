/* SPDX-License-Identifier: Apache-2.0 */
/* query.c - libweightd's read-only questions (list, describe, status, clients) and admin
 * requests. */
#include "weightd/client.h"

#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "err.h"
#include "msg.h"
#include "weight.h"

/*
 * Result structs point straight into the decoded reply, which they keep: protobuf-c strings are
 * NUL-terminated and its repeated uint64 fields are plain arrays, so nothing is copied.
 */

static void source_from_wire(weightd_source_info *o, const Weightd__SourceInfo *s)
{
	static const Weightd__SourceInfo empty = WEIGHTD__SOURCE_INFO__INIT;

	if (!s)
		s = &empty;
	o->name = s->name;
	o->kind = s->kind;
	o->path = s->path;
	o->tensors = s->tensors;
	o->bytes = s->bytes;
	o->generation = s->generation;
	o->state = s->state;
	o->error = s->error;
	o->files = s->files;
}

/* --- list -------------------------------------------------------------------------------- */

struct source_list {
	weightd_source_list pub;
	Weightd__Response *resp;
	weightd_source_info *items;
	weightd_source_health *health;
};

static void health_from_wire(weightd_source_health *o, const Weightd__SourceInfo *s)
{
	if (!s)
		return;
	o->required = s->required ? 1 : 0;
	o->preload = s->preload ? 1 : 0;
	o->preloaded = s->preloaded ? 1 : 0;
	o->admit_failures = s->admit_failures;
	o->retry_in_ms = s->retry_in_ms;
}

/* What the calls below share: a request with an empty body (list, clients; the body's members
 * share one union slot, all `Weightd__Empty *`), and the arrays a reply is converted into. */
static int call_empty(weightd_client *c, Weightd__Request__BodyCase body,
		      Weightd__Response__BodyCase want, Weightd__Response **resp, weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;

	req.body_case = body;
	req.list = &empty;
	return wc_conn_call(c, &req, want, wc_weight_reply_refs, resp, NULL, NULL, err);
}

/* parts[i]: count[i] (at least one) zeroed items of size[i] bytes. 0, or -1 with none kept. */
static int alloc_parts(void **parts, const size_t *count, const size_t *size, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		parts[i] = calloc(count[i] ? count[i] : 1, size[i]);
		if (!parts[i]) {
			while (i--) {
				free(parts[i]);
				parts[i] = NULL;
			}
			return -1;
		}
	}
	return 0;
}

/* A conversion out of memory: its wrapper and the reply freed, the error said. */
static int convert_oom(void *wrapper, Weightd__Response *resp, weightd_error *err)
{
	free(wrapper);
	wd_msg_free(resp);
	return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
}

int weightd_list(weightd_client *c, weightd_source_list **ret, weightd_error *err)
{
	Weightd__Response *resp = NULL;
	struct source_list *l;
	void *parts[2];
	size_t n;
	int r;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_list: no client");
	r = call_empty(c, WEIGHTD__REQUEST__BODY_LIST, WEIGHTD__RESPONSE__BODY_LIST, &resp, err);
	if (r < 0)
		return r;
	n = resp->list ? resp->list->n_sources : 0;
	l = calloc(1, sizeof(*l));
	if (!l || alloc_parts(parts, (size_t[]){ n, n },
			      (size_t[]){ sizeof(*l->items), sizeof(*l->health) }, 2) < 0)
		return convert_oom(l, resp, err);
	l->items = parts[0];
	l->health = parts[1];
	for (size_t i = 0; i < n; i++) {
		source_from_wire(&l->items[i], resp->list->sources[i]);
		health_from_wire(&l->health[i], resp->list->sources[i]);
	}
	l->resp = resp;
	l->pub.count = n;
	l->pub.sources = l->items;
	l->pub.health = l->health;
	*ret = &l->pub;
	return 0;
}

void weightd_source_list_free(weightd_source_list *pub)
{
	struct source_list *l = (struct source_list *)pub;

	if (!l)
		return;
	wd_msg_free(l->resp);
	free(l->items);
	free(l->health);
	free(l);
}

/* --- describe ---------------------------------------------------------------------------- */

struct description {
	weightd_description pub;
	Weightd__Response *resp;
	weightd_tensor_info *tensors;
	weightd_meta_entry *meta;
	weightd_remote_object *objects;
};

int weightd_describe(weightd_client *c, const char *checkpoint, weightd_description **ret,
		     weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Describe d = WEIGHTD__DESCRIBE__INIT;
	Weightd__Response *resp = NULL;
	const Weightd__DescribeReply *dr;
	struct description *o;
	void *parts[3];
	int r;

	wc_err_clear(err);
	if (!c || !checkpoint || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_describe: no client or no checkpoint name");
	d.checkpoint = (char *)checkpoint;
	req.body_case = WEIGHTD__REQUEST__BODY_DESCRIBE;
	req.describe = &d;
	r = wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_DESCRIBE, wc_weight_reply_refs, &resp,
			 NULL, NULL, err);
	if (r < 0) {
		if (err && !err->checkpoint[0])
			wc_err_about(err, checkpoint, NULL, NULL);
		return r;
	}
	dr = resp->describe;
	o = calloc(1, sizeof(*o));
	if (!o || (dr && alloc_parts(parts,
				     (size_t[]){ dr->n_tensors, dr->n_metadata,
						 dr->source ? dr->source->n_objects : 0 },
				     (size_t[]){ sizeof(*o->tensors), sizeof(*o->meta),
						 sizeof(*o->objects) },
				     3) < 0))
		return convert_oom(o, resp, err);
	if (dr) {
		o->tensors = parts[0];
		o->meta = parts[1];
		o->objects = parts[2];
	}
	source_from_wire(&o->pub.source, dr ? dr->source : NULL);
	for (size_t i = 0; dr && i < dr->n_tensors; i++) {
		const Weightd__TensorInfo *t = dr->tensors[i];
		weightd_tensor_info *ti = &o->tensors[i];

		ti->name = t->name;
		ti->dtype = t->dtype;
		ti->ndim = t->n_shape;
		ti->shape = t->shape;
		ti->nbytes = t->nbytes;
		ti->offset = t->offset;
		ti->file = t->file;
		ti->block_elems = t->block_elems;
		ti->block_bytes = t->block_bytes;
	}
	for (size_t i = 0; dr && i < dr->n_metadata; i++) {
		o->meta[i].key = dr->metadata[i]->key;
		o->meta[i].value = dr->metadata[i]->value;
		o->meta[i].type = dr->metadata[i]->type;
	}
	for (size_t i = 0; dr && dr->source && i < dr->source->n_objects; i++) {
		const Weightd__RemoteObject *ro = dr->source->objects[i];

		o->objects[i].url = ro->url;
		o->objects[i].size = ro->size;
		o->objects[i].etag = ro->etag;
		o->objects[i].version = ro->version;
	}
	o->pub.location =
		dr && dr->source && dr->source->location[0] ? dr->source->location : "file";
	o->pub.n_objects = dr && dr->source ? dr->source->n_objects : 0;
	o->pub.objects = o->objects;
	o->pub.credentials = dr && dr->source ? dr->source->credentials : "";
	o->pub.credentials_key_id = dr && dr->source ? dr->source->credentials_key_id : "";
	o->pub.credentials_expires = dr && dr->source ? dr->source->credentials_expires : 0;
	o->resp = resp;
	o->pub.n_tensors = dr ? dr->n_tensors : 0;
	o->pub.tensors = o->tensors;
	o->pub.n_metadata = dr ? dr->n_metadata : 0;
	o->pub.metadata = o->meta;
	*ret = &o->pub;
	return 0;
}

void weightd_description_free(weightd_description *pub)
{
	struct description *o = (struct description *)pub;

	if (!o)
		return;
	wd_msg_free(o->resp);
	free(o->tensors);
	free(o->meta);
	free(o->objects);
	free(o);
}

/* --- status ------------------------------------------------------------------------------ */

struct status {
	weightd_status pub;
	Weightd__Response *resp;
	weightd_source_info *sources;
	weightd_source_stats *source_stats;
	weightd_source_remote *source_remote;
	weightd_weight_status *weights;
	weightd_job_status *jobs;
	weightd_segment_status *segs;
	weightd_source_health *health;
	uint64_t *job_elapsed;
};

static int status_call(weightd_client *c, bool omit_weights, const char *call,
		       weightd_status **ret, weightd_error *err)
{
	static const Weightd__StatusReply empty_reply = WEIGHTD__STATUS_REPLY__INIT;
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__StatusRequest sreq = WEIGHTD__STATUS_REQUEST__INIT;
	Weightd__Response *resp = NULL;
	const Weightd__StatusReply *sr;
	struct status *o;
	void *parts[8];
	int r;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: no client", call);
	sreq.omit_weights = omit_weights;
	req.body_case = WEIGHTD__REQUEST__BODY_STATUS;
	req.status = &sreq;
	r = wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_STATUS, wc_weight_reply_refs, &resp, NULL,
			 NULL, err);
	if (r < 0)
		return r;
	/* a daemon that does not know omit_weights sends the list anyway: dropped (the message
	 * lives in its arena, freed whole) */
	if (omit_weights && resp->status)
		resp->status->n_weight_list = 0;
	sr = resp->status ? resp->status : &empty_reply;
	o = calloc(1, sizeof(*o));
	if (!o ||
	    alloc_parts(parts,
			(size_t[]){ sr->n_sources, sr->n_sources, sr->n_sources, sr->n_weight_list,
				    sr->n_jobs, sr->n_segment_list, sr->n_sources, sr->n_jobs },
			(size_t[]){ sizeof(*o->sources), sizeof(*o->source_stats),
				    sizeof(*o->source_remote), sizeof(*o->weights), sizeof(*o->jobs),
				    sizeof(*o->segs), sizeof(*o->health), sizeof(*o->job_elapsed) },
			8) < 0)
		return convert_oom(o, resp, err);
	o->sources = parts[0];
	o->source_stats = parts[1];
	o->source_remote = parts[2];
	o->weights = parts[3];
	o->jobs = parts[4];
	o->segs = parts[5];
	o->health = parts[6];
	o->job_elapsed = parts[7];
	o->pub.instance = sr->instance;
	o->pub.server_version = sr->server_version;
	o->pub.uptime_ms = sr->uptime_ms;
	o->pub.bytes_resident = sr->bytes_resident;
	o->pub.budget_bytes = sr->budget_bytes;
	o->pub.weights = sr->weights;
	o->pub.clients = sr->clients;
	o->pub.bytes_read = sr->bytes_read;
	o->pub.materializations = sr->materializations;
	o->pub.materializations_failed = sr->materializations_failed;
	o->pub.materializations_in_flight = sr->materializations_in_flight;
	o->pub.evictions = sr->evictions;
	o->pub.readoptions = sr->readoptions;
	o->pub.bytes_materialized = sr->bytes_materialized;
	o->pub.materialize_ns = sr->materialize_ns;
	o->pub.references = sr->references;
	o->pub.foreign_segments = sr->foreign_segments;
	o->pub.segment_dir = sr->segment_dir && sr->segment_dir[0] ? sr->segment_dir : NULL;
	o->pub.segment_page_bytes = sr->segment_page_bytes;
	o->pub.segment_huge_bytes = sr->segment_huge_bytes;
	o->pub.locked_weights = sr->locked_weights;
	o->pub.locked_bytes = sr->locked_bytes;
	o->pub.clients_refused = sr->clients_refused;
	o->pub.clients_timed_out = sr->clients_timed_out;
	o->pub.partial_frame_bytes = sr->partial_frame_bytes;
	o->pub.temp_bytes = sr->temp_bytes;
	/* a daemon that does not say (UNSPECIFIED) fills with SHA-256 */
	switch (sr->digest_algorithm) {
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_UNSPECIFIED:
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_SHA256:
		o->pub.digest_algorithm = WEIGHTD_DIGEST_SHA256;
		break;
	case WEIGHTD__DIGEST_ALGORITHM__DIGEST_XXH3_128:
		o->pub.digest_algorithm = WEIGHTD_DIGEST_XXH3_128;
		break;
	default:
		o->pub.digest_algorithm = WEIGHTD_DIGEST_UNKNOWN;
		break;
	}
	o->pub.digest_chunk_bytes = sr->digest_chunk_bytes;
	o->pub.requests = sr->requests;
	o->pub.requests_deferred = sr->requests_deferred;
	for (size_t i = 0; i < sr->n_sources; i++) {
		const Weightd__SourceInfo *si = sr->sources[i];

		source_from_wire(&o->sources[i], si);
		health_from_wire(&o->health[i], si);
		if (!si)
			continue;
		o->source_stats[i].resident_bytes = si->resident_bytes;
		o->source_stats[i].held_bytes = si->held_bytes;
		o->source_stats[i].materialized_bytes = si->materialized_bytes;
		o->source_stats[i].clients = si->clients;
		o->source_stats[i].errors = si->errors;
		o->source_remote[i].bytes = si->remote_bytes;
		o->source_remote[i].requests = si->remote_requests;
		o->source_remote[i].retries = si->remote_retries;
		o->source_remote[i].errors = si->remote_errors;
	}
	for (size_t i = 0; i < sr->n_weight_list; i++) {
		const Weightd__WeightStatus *w = sr->weight_list[i];
		weightd_weight_status *ws = &o->weights[i];

		ws->handle = w->handle;
		ws->label = w->label;
		ws->dtype = w->dtype;
		ws->ndim = w->n_shape;
		ws->shape = w->shape;
		ws->nbytes = w->nbytes;
		ws->refs = w->refs;
		ws->clients = w->clients;
		ws->generation = w->generation;
		ws->digest_algorithm =
			wc_weight_digest_algorithm((int)w->digest_algorithm, w->digest.len);
		ws->digest_len = ws->digest_algorithm ? w->digest.len : 0;
		ws->digest = ws->digest_len ? w->digest.data : NULL;
		ws->source = w->source;
		ws->adopted = w->adopted ? 1 : 0;
		ws->segment = w->segment;
		ws->offset = w->offset;
	}
	for (size_t i = 0; i < sr->n_segment_list; i++) {
		const Weightd__SegmentStatus *g = sr->segment_list[i];
		weightd_segment_status *gs = &o->segs[i];

		gs->id = g->id;
		gs->name = g->name;
		gs->size = g->size;
		gs->weights = g->weights;
		gs->held = g->held;
		gs->source = g->source;
		gs->adopted = g->adopted ? 1 : 0;
		gs->filling = g->filling ? 1 : 0;
	}
	o->pub.segments = sr->segments;
	o->pub.segment_bytes = sr->segment_bytes;
	o->pub.idle_weights = sr->idle_weights;
	o->pub.idle_segments = sr->idle_segments;
	o->pub.n_segments = sr->n_segment_list;
	o->pub.segment_list = o->segs;
	for (size_t i = 0; i < sr->n_jobs; i++) {
		const Weightd__JobStatus *j = sr->jobs[i];
		weightd_job_status *js = &o->jobs[i];

		js->key = j->key.len == WEIGHTD_DIGEST_LEN ? j->key.data : NULL;
		js->label = j->label;
		js->nbytes = j->nbytes;
		js->done = j->done;
		o->job_elapsed[i] = j->elapsed_ms;
	}
	o->pub.health_known = sr->health_known ? 1 : 0;
	o->pub.ready = sr->ready ? 1 : 0;
	o->pub.not_ready = sr->health_known && !sr->ready ? sr->not_ready : NULL;
	o->pub.admissions_failed = sr->admissions_failed;
	o->pub.admission_retries = sr->admission_retries;
	o->pub.source_health = o->health;
	o->pub.job_elapsed_ms = o->job_elapsed;
	o->resp = resp;
	o->pub.n_jobs = sr->n_jobs;
	o->pub.jobs = o->jobs;
	o->pub.n_sources = sr->n_sources;
	o->pub.sources = o->sources;
	o->pub.source_stats = o->source_stats;
	o->pub.source_remote = o->source_remote;
	o->pub.n_weights = sr->n_weight_list;
	o->pub.weight_list = o->weights;
	*ret = &o->pub;
	return 0;
}

int weightd_status_get(weightd_client *c, weightd_status **ret, weightd_error *err)
{
	return status_call(c, false, "weightd_status_get", ret, err);
}

int weightd_status_summary(weightd_client *c, weightd_status **ret, weightd_error *err)
{
	return status_call(c, true, "weightd_status_summary", ret, err);
}

void weightd_status_free(weightd_status *pub)
{
	struct status *o = (struct status *)pub;

	if (!o)
		return;
	wd_msg_free(o->resp);
	free(o->sources);
	free(o->source_stats);
	free(o->source_remote);
	free(o->weights);
	free(o->jobs);
	free(o->segs);
	free(o->health);
	free(o->job_elapsed);
	free(o);
}

/* --- administration ---------------------------------------------------------------------- */

/* A reload's answer, holding the reply its lists point into. */
struct reload_info {
	weightd_reload_info pub;
	Weightd__Response *resp;
};

static int reload_call(weightd_client *c, const char *fn, Weightd__Response **ret,
		       weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;

	wc_err_clear(err);
	if (!c)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: no client", fn);
	req.body_case = WEIGHTD__REQUEST__BODY_RELOAD;
	req.reload = &empty;
	return wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_RELOAD, wc_weight_reply_refs, ret,
			    NULL, NULL, err);
}

int weightd_reload(weightd_client *c, weightd_error *err)
{
	Weightd__Response *resp = NULL;
	int r = reload_call(c, "weightd_reload", &resp, err);

	if (r == 0)
		wd_msg_free(resp);
	return r;
}

int weightd_reload_report(weightd_client *c, weightd_reload_info **ret, weightd_error *err)
{
	Weightd__Response *resp = NULL;
	struct reload_info *o;
	int r;

	if (!ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_reload_report: no ret");
	r = reload_call(c, "weightd_reload_report", &resp, err);
	if (r < 0)
		return r;
	o = calloc(1, sizeof(*o));
	if (!o) {
		wd_msg_free(resp);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	o->resp = resp;
	if (resp->reload) {
		o->pub.n_changes = resp->reload->n_changes;
		o->pub.changes = (const char *const *)resp->reload->changes;
		o->pub.n_warnings = resp->reload->n_warnings;
		o->pub.warnings = (const char *const *)resp->reload->warnings;
	}
	*ret = &o->pub;
	return 0;
}

void weightd_reload_report_free(weightd_reload_info *pub)
{
	struct reload_info *o = (struct reload_info *)pub;

	if (!o)
		return;
	wd_msg_free(o->resp);
	free(o);
}

int weightd_evict(weightd_client *c, uint64_t *ret_weights, uint64_t *ret_bytes,
		  weightd_error *err)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Evict ev = WEIGHTD__EVICT__INIT;
	Weightd__Response *resp = NULL;
	int r;

	wc_err_clear(err);
	if (!c)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_evict: no client");
	ev.all_unreferenced = 1;
	req.body_case = WEIGHTD__REQUEST__BODY_EVICT;
	req.evict = &ev;
	r = wc_conn_call(c, &req, WEIGHTD__RESPONSE__BODY_EVICT, wc_weight_reply_refs, &resp, NULL,
			 NULL, err);
	if (r < 0)
		return r;
	if (ret_weights)
		*ret_weights = resp->evict ? resp->evict->weights : 0;
	if (ret_bytes)
		*ret_bytes = resp->evict ? resp->evict->bytes : 0;
	wd_msg_free(resp);
	return 0;
}

/* --- clients ----------------------------------------------------------------------------- */

struct client_list {
	weightd_client_list pub;
	Weightd__Response *resp;
	weightd_client_info *items;
};

int weightd_clients(weightd_client *c, weightd_client_list **ret, weightd_error *err)
{
	Weightd__Response *resp = NULL;
	struct client_list *l;
	void *parts[1];
	size_t n;
	int r;

	wc_err_clear(err);
	if (!c || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "weightd_clients: no client");
	r = call_empty(c, WEIGHTD__REQUEST__BODY_CLIENTS, WEIGHTD__RESPONSE__BODY_CLIENTS, &resp,
		       err);
	if (r < 0)
		return r;
	n = resp->clients ? resp->clients->n_clients : 0;
	l = calloc(1, sizeof(*l));
	if (!l || alloc_parts(parts, &n, (size_t[]){ sizeof(*l->items) }, 1) < 0)
		return convert_oom(l, resp, err);
	l->items = parts[0];
	for (size_t i = 0; i < n; i++) {
		const Weightd__ClientInfo *x = resp->clients->clients[i];
		weightd_client_info *o = &l->items[i];

		o->id = x->id;
		o->uid = x->uid;
		o->gid = x->gid;
		o->pid = x->pid;
		o->name = x->name;
		o->bytes = x->bytes;
		o->weights = x->weights;
		o->segments = x->segments;
		o->pending = x->pending;
		o->connected_ms = x->connected_ms;
		o->admin = x->admin ? 1 : 0;
	}
	l->resp = resp;
	l->pub.count = n;
	l->pub.clients = l->items;
	*ret = &l->pub;
	return 0;
}

void weightd_client_list_free(weightd_client_list *pub)
{
	struct client_list *l = (struct client_list *)pub;

	if (!l)
		return;
	wd_msg_free(l->resp);
	free(l->items);
	free(l);
}
