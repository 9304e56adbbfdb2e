/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_status.c - weightctl status and metrics: the daemon's counters, for people and Prometheus. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weightctl.h"

int by_segment_id(const void *a, const void *b)
{
	const weightd_segment_status *x = *(const weightd_segment_status *const *)a;
	const weightd_segment_status *y = *(const weightd_segment_status *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

int by_weight_label(const void *a, const void *b)
{
	const weightd_weight_status *x = *(const weightd_weight_status *const *)a;
	const weightd_weight_status *y = *(const weightd_weight_status *const *)b;
	int c = strcmp(x->label, y->label);

	return c ? c : x->handle < y->handle ? -1 : x->handle > y->handle;
}

/* The counters of src, one of s's sources. */
static const weightd_source_stats *source_stats(const weightd_status *s,
						const weightd_source_info *src)
{
	return &s->source_stats[src - s->sources];
}

/* The remote traffic of src, one of s's sources (zeros for a local one). */
static const weightd_source_remote *source_remote(const weightd_status *s,
						  const weightd_source_info *src)
{
	static const weightd_source_remote none;

	return s->source_remote ? &s->source_remote[src - s->sources] : &none;
}

/* A job's rate in bytes per second, from its bytes done and how long it has been in flight
 * (0 when not known). */
static uint64_t job_rate(const weightd_status *s, size_t i)
{
	uint64_t ms = s->job_elapsed_ms ? s->job_elapsed_ms[i] : 0;

	return ms ? (uint64_t)((double)s->jobs[i].done * 1000.0 / (double)ms) : 0;
}

/* The materializations in flight, each with its bytes done of its total and its rate. */
static void status_jobs(const weightd_status *s)
{
	static const char *const head[] = { "JOB", "DONE", "OF", "%", "RATE", "FOR" };
	static const bool num[] = { 0, 1, 1, 1, 1, 1 };
	struct table t = { .ncols = 6, .head = head, .numeric = num };

	if (!s->n_jobs)
		return;
	putchar('\n');
	for (size_t i = 0; i < s->n_jobs; i++) {
		const weightd_job_status *j = &s->jobs[i];
		char *rate = output_fmt_bytes(job_rate(s, i));

		output_table_row(&t, output_strdup(j->label), output_fmt_bytes(j->done),
				 output_fmt_bytes(j->nbytes),
				 output_fmt("%.0f", j->nbytes ? 100.0 * (double)j->done /
									(double)j->nbytes :
								100.0),
				 s->job_elapsed_ms ? output_fmt("%s/s", rate) : output_strdup("-"),
				 output_fmt("%.1f s", s->job_elapsed_ms ?
							      (double)s->job_elapsed_ms[i] / 1000 :
							      0.0));
		free(rate);
	}
	output_table_print(&t);
}

/* The remote checkpoints' traffic with their stores, when there is any. */
static void status_remote(const weightd_status *s, const void **srcs)
{
	static const char *const head[] = { "CHECKPOINT", "REMOTE", "REQUESTS", "RETRIES",
					    "ERRORS" };
	static const bool num[] = { 0, 1, 1, 1, 1 };
	struct table t = { .ncols = 5, .head = head, .numeric = num };
	bool any = false;

	for (size_t i = 0; i < s->n_sources; i++) {
		const weightd_source_remote *sr = source_remote(s, srcs[i]);

		if (!sr->requests)
			continue;
		any = true;
		output_table_row(&t, output_strdup(((const weightd_source_info *)srcs[i])->name),
				 output_fmt_bytes(sr->bytes), output_fmt("%" PRIu64, sr->requests),
				 output_fmt("%" PRIu64, sr->retries),
				 output_fmt("%" PRIu64, sr->errors));
	}
	if (any) {
		putchar('\n');
		output_table_print(&t);
	}
}

int cmd_status(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	const void **srcs, **segs, **wts;
	weightd_status *s;
	weightd_error err;

	if (weightd_status_get(c, &s, &err) < 0)
		return output_fail_err(&err);
	srcs = output_sorted(s->sources, s->n_sources, sizeof(*s->sources), by_source_name);
	segs = output_sorted(s->segment_list, s->n_segments, sizeof(*s->segment_list),
			     by_segment_id);
	wts = output_sorted(s->weight_list, s->n_weights, sizeof(*s->weight_list), by_weight_label);
	if (o->json) {
		json_t *src = json_array(), *ws = json_array(), *gs = json_array(), *j;

		for (size_t i = 0; i < s->n_sources; i++) {
			const weightd_source_stats *ss = source_stats(s, srcs[i]);
			const weightd_source_remote *sr = source_remote(s, srcs[i]);
			json_t *js = json_source(srcs[i]);

			json_source_health(js, s->source_health ?
						       &s->source_health[(const weightd_source_info *)srcs[i] -
									 s->sources] :
						       NULL);
			json_object_set_new(js, "resident_bytes",
					    json_integer((json_int_t)ss->resident_bytes));
			json_object_set_new(js, "held_bytes",
					    json_integer((json_int_t)ss->held_bytes));
			json_object_set_new(js, "materialized_bytes",
					    json_integer((json_int_t)ss->materialized_bytes));
			json_object_set_new(js, "clients", json_integer((json_int_t)ss->clients));
			json_object_set_new(js, "errors", json_integer((json_int_t)ss->errors));
			json_object_set_new(js, "remote",
					    json_pack("{s:I, s:I, s:I, s:I}", "bytes",
						      (json_int_t)sr->bytes, "requests",
						      (json_int_t)sr->requests, "retries",
						      (json_int_t)sr->retries, "errors",
						      (json_int_t)sr->errors));
			json_array_append_new(src, js);
		}
		for (size_t i = 0; i < s->n_segments; i++) {
			const weightd_segment_status *g = segs[i];

			json_array_append_new(gs, json_pack(
				"{s:I, s:s, s:I, s:i, s:i, s:s, s:b, s:b}", "id", (json_int_t)g->id,
				"name", g->name, "size", (json_int_t)g->size, "weights", (int)g->weights,
				"held", (int)g->held, "source", g->source, "adopted", g->adopted,
				"filling", g->filling));
		}
		for (size_t i = 0; i < s->n_weights; i++) {
			const weightd_weight_status *w = wts[i];
			char *dg = w->digest ? output_fmt_hex(w->digest, w->digest_len) :
					       output_strdup("");

			json_array_append_new(
				ws,
				json_pack(
					"{s:I, s:s, s:s, s:o, s:I, s:i, s:i, s:I, s:s, s:s, s:s, s:b, s:I, s:I}",
					"handle", (json_int_t)w->handle, "label", w->label, "dtype",
					w->dtype, "shape", output_json_shape(w->shape, w->ndim),
					"bytes", (json_int_t)w->nbytes, "refs", (int)w->refs,
					"clients", (int)w->clients, "generation",
					(json_int_t)w->generation, "digest", dg, "digest_algorithm",
					weightd_digest_algorithm_name(w->digest_algorithm),
					"source", w->source, "adopted", w->adopted, "segment",
					(json_int_t)w->segment, "offset", (json_int_t)w->offset));
			free(dg);
		}
		j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
			      " s:I, s:I, s:I, s:o, s:o}",
			      "instance", s->instance, "server_version", s->server_version,
			      "uptime_ms", (json_int_t)s->uptime_ms,
			      "bytes_resident", (json_int_t)s->bytes_resident,
			      "budget_bytes", (json_int_t)s->budget_bytes,
			      "weights", (json_int_t)s->weights, "clients", (json_int_t)s->clients,
			      "bytes_read", (json_int_t)s->bytes_read,
			      "materializations", (json_int_t)s->materializations,
			      "materializations_failed", (json_int_t)s->materializations_failed,
			      "materializations_in_flight",
			      (json_int_t)s->materializations_in_flight,
			      "evictions", (json_int_t)s->evictions,
			      "readoptions", (json_int_t)s->readoptions,
			      "bytes_materialized", (json_int_t)s->bytes_materialized,
			      "materialize_ns", (json_int_t)s->materialize_ns,
			      "references", (json_int_t)s->references, "sources", src,
			      "weight_list", ws);
		if (j) {
			json_object_set_new(j, "segments", json_integer((json_int_t)s->segments));
			json_object_set_new(j, "segment_bytes",
					    json_integer((json_int_t)s->segment_bytes));
			json_object_set_new(j, "segment_dir",
					    json_string(s->segment_dir ? s->segment_dir : ""));
			json_object_set_new(j, "segment_page_bytes",
					    json_integer((json_int_t)s->segment_page_bytes));
			json_object_set_new(j, "segment_huge_bytes",
					    json_integer((json_int_t)s->segment_huge_bytes));
			json_object_set_new(j, "locked_weights",
					    json_integer((json_int_t)s->locked_weights));
			json_object_set_new(j, "locked_bytes",
					    json_integer((json_int_t)s->locked_bytes));
			json_object_set_new(j, "idle_weights",
					    json_integer((json_int_t)s->idle_weights));
			json_object_set_new(j, "idle_segments",
					    json_integer((json_int_t)s->idle_segments));
			json_object_set_new(j, "segment_list", gs);
			json_object_set_new(j, "foreign_segments",
					    json_integer((json_int_t)s->foreign_segments));
			json_object_set_new(j, "clients_refused",
					    json_integer((json_int_t)s->clients_refused));
			json_object_set_new(j, "clients_timed_out",
					    json_integer((json_int_t)s->clients_timed_out));
			json_object_set_new(j, "partial_frame_bytes",
					    json_integer((json_int_t)s->partial_frame_bytes));
			json_object_set_new(j, "temp_bytes", json_integer((json_int_t)s->temp_bytes));
			json_object_set_new(j, "digest_algorithm", json_string(
				weightd_digest_algorithm_name(s->digest_algorithm)));
			json_object_set_new(j, "digest_chunk_bytes", json_integer(
				(json_int_t)s->digest_chunk_bytes));
			json_object_set_new(j, "requests", json_integer((json_int_t)s->requests));
			json_object_set_new(j, "requests_deferred",
					    json_integer((json_int_t)s->requests_deferred));
			if (s->health_known) {
				json_object_set_new(j, "ready", json_boolean(s->ready));
				json_object_set_new(j, "not_ready",
						    json_string(s->not_ready ? s->not_ready : ""));
			}
			json_object_set_new(j, "admissions_failed",
					    json_integer((json_int_t)s->admissions_failed));
			json_object_set_new(j, "admission_retries",
					    json_integer((json_int_t)s->admission_retries));
			{
				json_t *jobs = json_array();

				for (size_t i = 0; i < s->n_jobs; i++)
					json_array_append_new(
						jobs,
						json_pack("{s:s, s:I, s:I, s:I, s:I}", "label",
							  s->jobs[i].label, "done",
							  (json_int_t)s->jobs[i].done, "bytes",
							  (json_int_t)s->jobs[i].nbytes, "elapsed_ms",
							  (json_int_t)(s->job_elapsed_ms ?
									       s->job_elapsed_ms[i] :
									       0),
							  "rate", (json_int_t)job_rate(s, i)));
				json_object_set_new(j, "jobs", jobs);
			}
		} else {
			json_decref(gs);
		}
		free(srcs);
		free(segs);
		free(wts);
		weightd_status_free(s);
		return output_print_json(j);
	}
	{
		char *res = output_fmt_bytes(s->bytes_resident),
		     *bud = output_fmt_bytes(s->budget_bytes);
		char *rd = output_fmt_bytes(s->bytes_read),
		     *mat = output_fmt_bytes(s->bytes_materialized);

		printf("instance                    %s\nversion                     %s\n"
		       "uptime                      %.1f s\n"
		       "resident                    %" PRIu64 " (%s) of budget %" PRIu64 " (%s)\n"
		       "weights                     %" PRIu64 "\nreferences                  %" PRIu64
		       "\nclients                     %" PRIu64 "\n"
		       "checkpoint bytes read       %" PRIu64 " (%s)\n"
		       "materializations            %" PRIu64 " (%" PRIu64 " failed, %" PRIu64
		       " in flight)\nbytes materialized          %" PRIu64 " (%s) in %.3f s\n"
		       "evictions                   %" PRIu64 "\nre-adoptions                %" PRIu64
		       "\n", s->instance, s->server_version, (double)s->uptime_ms / 1000,
		       s->bytes_resident, res, s->budget_bytes, bud, s->weights, s->references,
		       s->clients, s->bytes_read, rd, s->materializations,
		       s->materializations_failed, s->materializations_in_flight,
		       s->bytes_materialized, mat, (double)s->materialize_ns / 1e9, s->evictions,
		       s->readoptions);
		printf("refused / timed-out clients %" PRIu64 " / %" PRIu64 "\n"
		       "foreign objects in /dev/shm %" PRIu64 " (ignored)\n"
		       "requests (held back)        %" PRIu64 " (%" PRIu64 ")\n", s->clients_refused,
		       s->clients_timed_out, s->foreign_segments, s->requests, s->requests_deferred);
		printf("digest                      %s\n",
		       weightd_digest_algorithm_name(s->digest_algorithm));
		if (s->health_known)
			printf("ready                       %s%s\n", s->ready ? "yes" : "no: ",
			       s->ready ? "" : s->not_ready);
		printf("remote admissions failed    %" PRIu64 " (%" PRIu64 " retried)\n",
		       s->admissions_failed, s->admission_retries);
		free(res);
		free(bud);
		free(rd);
		free(mat);
		res = output_fmt_bytes(s->segment_bytes);
		printf("segments                    %" PRIu64 " (%s)\n"
		       "idle                        %" PRIu64 " weights, %" PRIu64 " segments\n",
		       s->segments, res, s->idle_weights, s->idle_segments);
		free(res);
		res = output_fmt_bytes(s->locked_bytes);
		printf("mapped, not connected       %" PRIu64 " weights (%s) kept for processes that "
		       "map them\n", s->locked_weights, res);
		free(res);
		if (s->segment_dir) {
			res = output_fmt_bytes(s->segment_huge_bytes);
			printf("segments in                 %s, %s pages (%s on huge pages)\n",
			       s->segment_dir, s->segment_page_bytes >= (2u << 20) ? "2 MiB" : "4 KiB",
			       res);
			free(res);
		}
	}
	if (s->n_sources) {
		static const char *const head[] = { "CHECKPOINT",   "RESIDENT", "HELD",
						    "MATERIALIZED", "CLIENTS",	"ERRORS" };
		static const bool num[] = { 0, 1, 1, 1, 1, 1 };
		struct table t = { .ncols = 6, .head = head, .numeric = num };

		putchar('\n');
		table_sources(s->sources, s->source_health, s->n_sources);
		putchar('\n');
		for (size_t i = 0; i < s->n_sources; i++) {
			const weightd_source_stats *ss = source_stats(s, srcs[i]);

			output_table_row(
				&t, output_strdup(((const weightd_source_info *)srcs[i])->name),
				output_fmt_bytes(ss->resident_bytes),
				output_fmt_bytes(ss->held_bytes),
				output_fmt_bytes(ss->materialized_bytes),
				output_fmt("%" PRIu64, ss->clients),
				output_fmt("%" PRIu64, ss->errors));
		}
		output_table_print(&t);
		status_remote(s, srcs);
	}
	status_jobs(s);
	if (s->n_segments) {
		static const char *const head[] = { "SEGMENT", "NAME", "BYTES", "WEIGHTS", "HELD",
						    "SOURCE", "STATE" };
		static const bool num[] = { 1, 0, 1, 1, 1, 0, 0 };
		struct table t = { .ncols = 7, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < s->n_segments; i++) {
			const weightd_segment_status *g = segs[i];

			output_table_row(&t, output_fmt("%" PRIu64, g->id), output_strdup(g->name),
					 output_fmt_bytes(g->size), output_fmt("%u", g->weights),
					 output_fmt("%u", g->held), output_strdup(g->source),
					 output_strdup(g->filling ? "filling" :
						       g->adopted ? "adopted" :
								    "ready"));
		}
		output_table_print(&t);
	}
	if (s->n_weights) {
		static const char *const head[] = { "HANDLE", "WEIGHT", "DTYPE", "SHAPE", "BYTES",
						    "REFS", "CLIENTS", "GEN", "ADOPTED", "SEGMENT",
						    "OFFSET" };
		static const bool num[] = { 1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1 };
		struct table t = { .ncols = 11, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < s->n_weights; i++) {
			const weightd_weight_status *w = wts[i];

			output_table_row(
				&t, output_fmt("%" PRIu64, w->handle), output_strdup(w->label),
				output_strdup(w->dtype), output_fmt_shape(w->shape, w->ndim),
				output_fmt_bytes(w->nbytes), output_fmt("%u", w->refs),
				output_fmt("%u", w->clients), output_fmt("%" PRIu64, w->generation),
				output_strdup(w->adopted ? "yes" : "no"),
				output_fmt("%" PRIu64, w->segment),
				output_fmt("%" PRIu64, w->offset));
		}
		output_table_print(&t);
	}
	free(srcs);
	free(segs);
	free(wts);
	weightd_status_free(s);
	return 0;
}

/* HELP and TYPE of one metric family. Help texts are constants without '\' or newlines. */
static void prom_family(const char *name, const char *type, const char *help)
{
	printf("# HELP weightd_%s %s\n# TYPE weightd_%s %s\n", name, help, name, type);
}

static void prom_u64(const char *name, const char *type, const char *help, uint64_t v)
{
	prom_family(name, type, help);
	printf("weightd_%s %" PRIu64 "\n", name, v);
}

/* A label value as the text format wants it: backslash, double quote and newline escaped. */
static void prom_label(const char *v)
{
	putchar('"');
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			printf("\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", stdout);
		else
			putchar(*v);
	}
	putchar('"');
}

/* One sample weightd_source_<name>{source="..."} of a per-checkpoint family. */
static void prom_source(const weightd_source_info *src, const char *name, uint64_t v)
{
	printf("weightd_source_%s{source=", name);
	prom_label(src->name);
	printf("} %" PRIu64 "\n", v);
}

/*
 * The daemon's counters in the Prometheus text exposition format (version 0.0.4), every name
 * prefixed weightd_, counters ending in _total. All values come from one status reply, so they
 * are consistent with each other.
 */
int cmd_metrics(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	const void **srcs;
	weightd_status *s;
	weightd_error err;
	double secs;

	/* counters only: the list of weights would be most of the reply on a large cache */
	if (weightd_status_summary(c, &s, &err) < 0)
		return output_fail_err(&err);
	secs = (double)s->materialize_ns / 1e9;
	srcs = output_sorted(s->sources, s->n_sources, sizeof(*s->sources), by_source_name);
	/* not "instance": Prometheus sets that label on every target it scrapes */
	prom_family("info", "gauge",
		    "The daemon's version and shared-memory prefix (its instance); always 1.");
	fputs("weightd_info{version=", stdout);
	prom_label(s->server_version);
	fputs(",shm_prefix=", stdout);
	prom_label(s->instance);
	fputs("} 1\n", stdout);
	prom_family("uptime_seconds", "gauge", "Seconds since the daemon started.");
	printf("weightd_uptime_seconds %.3f\n", (double)s->uptime_ms / 1000);
	prom_u64("resident_bytes", "gauge",
		 "Bytes of shared memory held by weights and by materializations in flight.",
		 s->bytes_resident);
	prom_u64("budget_bytes", "gauge", "The memory budget in bytes.", s->budget_bytes);
	prom_u64("weights", "gauge", "Weights resident in shared memory.", s->weights);
	prom_u64("clients", "gauge", "Connected clients.", s->clients);
	prom_u64("references", "gauge", "References clients hold on weights.", s->references);
	prom_u64("segments", "gauge", "Shared-memory segments (each holds one or many weights).",
		 s->segments);
	prom_u64("segment_bytes", "gauge", "Sizes of the shared-memory segments, in bytes.",
		 s->segment_bytes);
	prom_u64("segment_page_bytes", "gauge",
		 "Page size the kernel gives segments: 2097152 on huge pages, else 4096.",
		 s->segment_page_bytes);
	prom_u64("segment_huge_bytes", "gauge", "Bytes of the segments in whole huge pages.",
		 s->segment_huge_bytes);
	prom_u64("locked_weights", "gauge",
		 "Weights no connected client references, kept because processes map them.",
		 s->locked_weights);
	prom_u64("locked_bytes", "gauge", "Bytes of those weights.", s->locked_bytes);
	prom_u64("idle_weights", "gauge", "Cached weights no client references.", s->idle_weights);
	prom_u64("idle_segments", "gauge",
		 "Segments none of whose weights any client references.", s->idle_segments);
	prom_u64("materializations_total", "counter", "Materializations that finished.",
		 s->materializations);
	prom_u64("materializations_failed_total", "counter", "Materializations that failed.",
		 s->materializations_failed);
	prom_u64("materializations_in_flight", "gauge", "Materializations queued or running.",
		 s->materializations_in_flight);
	prom_u64("checkpoint_read_bytes_total", "counter",
		 "Bytes read from checkpoint files by materializations.", s->bytes_read);
	prom_u64("materialized_bytes_total", "counter",
		 "Bytes of weights materialized into shared memory.", s->bytes_materialized);
	prom_family("materialization_seconds_total", "counter",
		    "Wall-clock seconds spent by finished materializations.");
	printf("weightd_materialization_seconds_total %.9f\n", secs);
	prom_u64("evictions_total", "counter", "Weights evicted to make room or by request.",
		 s->evictions);
	prom_u64("readoptions_total", "counter",
		 "Weights re-adopted from shared memory after a restart instead of read again.",
		 s->readoptions);
	prom_u64("foreign_segments", "gauge",
		 "Objects under the instance's /dev/shm prefix that weightd did not make (ignored).",
		 s->foreign_segments);
	prom_u64("clients_refused_total", "counter",
		 "Connections refused by max_clients or max_clients_per_uid.", s->clients_refused);
	prom_u64("clients_timed_out_total", "counter",
		 "Connections closed idle or stuck in the middle of a frame.", s->clients_timed_out);
	prom_u64("partial_frame_bytes", "gauge", "Bytes of requests being received.",
		 s->partial_frame_bytes);
	prom_u64("temp_bytes", "gauge", "Recipe temporaries reserved by running materializations.",
		 s->temp_bytes);
	prom_u64("requests_total", "counter", "Requests taken from clients.", s->requests);
	prom_u64("requests_deferred_total", "counter",
		 "Times a uid's connections were held back for other uids' share of the main thread.",
		 s->requests_deferred);
	if (s->health_known)
		prom_u64("ready", "gauge",
			 "1 when every preload = yes checkpoint is resident and every required = yes "
			 "one is admitted (weightctl health --ready), else 0.",
			 (uint64_t)s->ready);
	prom_u64("admissions_failed_total", "counter",
		 "Admissions of remote checkpoints that failed, at start, on a retry or on a reload.",
		 s->admissions_failed);
	prom_u64("admission_retries_total", "counter",
		 "Failed remote admissions tried again by themselves (after their backoff).",
		 s->admission_retries);
	prom_family("source_generation", "gauge",
		    "Generation of each checkpoint source (grows when its files change and the "
		    "daemon reloads).");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "generation",
			    ((const weightd_source_info *)srcs[i])->generation);
	prom_family("source_ready", "gauge",
		    "1 when a checkpoint source is admitted and serving, 0 when it failed or was "
		    "removed.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "ready",
			    strcmp(((const weightd_source_info *)srcs[i])->state, "ready") == 0);
	prom_family(
		"source_refused", "gauge",
		"1 when a checkpoint's changed files were refused by the last reload and its "
		"previous generation is still served (the error is in weightctl list), else 0.");
	for (size_t i = 0; i < s->n_sources; i++) {
		const weightd_source_info *src = srcs[i];

		prom_source(src, "refused",
			    strcmp(src->state, "ready") == 0 && src->error[0] != '\0');
	}
	prom_family("source_resident_bytes", "gauge",
		    "Bytes of each checkpoint's weights in shared memory (a derived weight counts "
		    "under the first checkpoint it reads).");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "resident_bytes", source_stats(s, srcs[i])->resident_bytes);
	prom_family("source_held_bytes", "gauge",
		    "Of those, bytes of the weights a client or a request references.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "held_bytes", source_stats(s, srcs[i])->held_bytes);
	prom_family("source_materialized_bytes_total", "counter",
		    "Bytes each checkpoint's finished materializations wrote into shared memory.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "materialized_bytes_total",
			    source_stats(s, srcs[i])->materialized_bytes);
	prom_family("source_clients", "gauge",
		    "Clients holding at least one of each checkpoint's weights.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "clients", source_stats(s, srcs[i])->clients);
	prom_family("source_errors_total", "counter",
		    "Failed materializations of each checkpoint's weights, and requests refused "
		    "because it is not served.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "errors_total", source_stats(s, srcs[i])->errors);
	prom_family("source_remote_bytes_total", "counter",
		    "Bytes each remote checkpoint received from its store: its weights' and the "
		    "metadata its admission reads (0 for a local checkpoint).");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "remote_bytes_total", source_remote(s, srcs[i])->bytes);
	prom_family("source_remote_requests_total", "counter",
		    "Requests sent to each remote checkpoint's store, retries included.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "remote_requests_total", source_remote(s, srcs[i])->requests);
	prom_family(
		"source_remote_retries_total", "counter",
		"Of those, the retries (after a 5xx, 429, SlowDown, a reset or a cut-off body).");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "remote_retries_total", source_remote(s, srcs[i])->retries);
	prom_family("source_remote_errors_total", "counter",
		    "Reads of each remote checkpoint that failed after their retries.");
	for (size_t i = 0; i < s->n_sources; i++)
		prom_source(srcs[i], "remote_errors_total", source_remote(s, srcs[i])->errors);
	if (s->health_known) {
		prom_family("source_healthy", "gauge",
			    "0 when the checkpoint keeps the daemon from being ready (preload = yes and "
			    "not all resident, or required = yes and not admitted), else 1.");
		for (size_t i = 0; i < s->n_sources; i++) {
			const weightd_source_info *src = srcs[i];
			const weightd_source_health *h = &s->source_health[src - s->sources];
			bool admitted = strcmp(src->state, "ready") == 0;

			prom_source(src, "healthy",
				    !((h->required && !admitted) ||
				      (h->preload && (!admitted || !h->preloaded))) ||
					    strcmp(src->state, "removed") == 0);
		}
		prom_family("source_admit_failures", "gauge",
			    "Failed admissions in a row of a remote checkpoint that is failed or being "
			    "admitted again (0 once admitted).");
		for (size_t i = 0; i < s->n_sources; i++)
			prom_source(srcs[i], "admit_failures",
				    s->source_health[(const weightd_source_info *)srcs[i] - s->sources]
					    .admit_failures);
		prom_family("source_admit_retry_seconds", "gauge",
			    "Seconds until a failed remote checkpoint is admitted again (0: not "
			    "waiting).");
		for (size_t i = 0; i < s->n_sources; i++)
			prom_source(
				srcs[i], "admit_retry_seconds",
				(s->source_health[(const weightd_source_info *)srcs[i] - s->sources]
					 .retry_in_ms +
				 999) / 1000);
	}
	free(srcs);
	weightd_status_free(s);
	return 0;
}

