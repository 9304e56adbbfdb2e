/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c - the optional HTTP endpoint (metrics_listen): GET /metrics and nothing else. */
#include "metrics.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "admit.h"
#include "cache.h"
#include "catalog.h"
#include "clock.h"
#include "config.h"
#include "daemon.h"
#include "health.h"
#include "log.h"
#include "remote.h"
#include "source.h"

/*
 * A scraper sends one small request and reads one reply of a few KB per checkpoint, so the
 * server stays tiny: at most METRICS_MAX_CONNS connections at once (more are closed at accept),
 * a request head of at most METRICS_MAX_REQUEST bytes, METRICS_TIMEOUT_S to send it and to read
 * the reply, one request per connection. The reply is built from counters the main thread keeps
 * (O(checkpoints)) and written without blocking; nothing here waits on a client.
 */
#define METRICS_MAX_CONNS   8
#define METRICS_MAX_REQUEST 8192
#define METRICS_TIMEOUT_S   10

struct metrics {
	struct daemon *d;
	struct evconnlistener *listener;
	struct bufferevent *conns[METRICS_MAX_CONNS];
	unsigned n_conns;
};

/* --- the exposition ----------------------------------------------------------------------- */

static void family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(out, "# HELP weightd_%s %s\n# TYPE weightd_%s %s\n", name, help, name,
			    type);
}

static void u64(struct evbuffer *out, const char *name, const char *type, const char *help,
		uint64_t v)
{
	family(out, name, type, help);
	evbuffer_add_printf(out, "weightd_%s %" PRIu64 "\n", name, v);
}

/* A label value as the text format wants it: backslash, double quote and newline escaped. */
static void label(struct evbuffer *out, const char *v)
{
	evbuffer_add(out, "\"", 1);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			evbuffer_add_printf(out, "\\%c", *v);
		else if (*v == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, v, 1);
	}
	evbuffer_add(out, "\"", 1);
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(const struct csource *const *)a)->name,
		      (*(const struct csource *const *)b)->name);
}

enum per_source {
	PS_GENERATION,
	PS_READY,
	PS_REFUSED,
	PS_RESIDENT,
	PS_HELD,
	PS_MATERIALIZED,
	PS_CLIENTS,
	PS_ERRORS,
	PS_REMOTE_BYTES,
	PS_REMOTE_REQUESTS,
	PS_REMOTE_RETRIES,
	PS_REMOTE_ERRORS,
	PS_HEALTHY,
	PS_ADMIT_FAILURES,
	PS_RETRY_IN
};

static uint64_t source_value(const struct daemon *d, const struct csource *cs,
			     enum per_source what)
{
	struct wd_remote_counters rc;
	uint64_t now;

	switch (what) {
	case PS_GENERATION: return cs->generation;
	case PS_READY: return cs->state == CSOURCE_READY;
	case PS_REFUSED: return cs->state == CSOURCE_READY && cs->refused.code != 0;
	case PS_RESIDENT: return cs->stats->resident_bytes;
	case PS_HELD: return cs->stats->resident_bytes - cs->stats->idle_bytes;
	case PS_MATERIALIZED: return cs->stats->materialized_bytes;
	case PS_CLIENTS: return cs->stats->clients;
	case PS_ERRORS: return cs->stats->errors;
	case PS_REMOTE_BYTES: return catalog_remote_counters(cs, &rc), rc.bytes;
	case PS_REMOTE_REQUESTS: return catalog_remote_counters(cs, &rc), rc.requests;
	case PS_REMOTE_RETRIES: return catalog_remote_counters(cs, &rc), rc.retries;
	case PS_REMOTE_ERRORS: return catalog_remote_counters(cs, &rc), rc.errors;
	case PS_HEALTHY: return health_checkpoint_ready(d, cs);
	case PS_ADMIT_FAILURES:
		return cs->state == CSOURCE_FAILED || cs->state == CSOURCE_LOADING ?
			       cs->admit_failures :
			       0;
	case PS_RETRY_IN:
		now = wd_clock_ms();
		return cs->state == CSOURCE_FAILED && cs->retry_at_ms > now ?
			       (cs->retry_at_ms - now + 999) / 1000 :
			       0;
	}
	return 0;
}

void metrics_format(struct daemon *d, struct evbuffer *out)
{
	static const struct {
		enum per_source what;
		const char *name, *type, *help;
	} per_source[] = {
		{ PS_GENERATION, "source_generation", "gauge",
		  "Generation of each checkpoint source (grows when its files change and the daemon "
		  "reloads)." },
		{ PS_READY, "source_ready", "gauge",
		  "1 when a checkpoint source is admitted and serving, 0 when it failed or was "
		  "removed." },
		{ PS_REFUSED, "source_refused", "gauge",
		  "1 when a checkpoint's changed files were refused by the last reload and its "
		  "previous generation is still served (the error is in weightctl list), else 0." },
		{ PS_RESIDENT, "source_resident_bytes", "gauge",
		  "Bytes of each checkpoint's weights in shared memory (a derived weight counts under "
		  "the first checkpoint it reads)." },
		{ PS_HELD, "source_held_bytes", "gauge",
		  "Of those, bytes of the weights a client or a request references." },
		{ PS_MATERIALIZED, "source_materialized_bytes_total", "counter",
		  "Bytes each checkpoint's finished materializations wrote into shared memory." },
		{ PS_CLIENTS, "source_clients", "gauge",
		  "Clients holding at least one of each checkpoint's weights." },
		{ PS_ERRORS, "source_errors_total", "counter",
		  "Failed materializations of each checkpoint's weights, and requests refused because "
		  "it is not served." },
		{ PS_REMOTE_BYTES, "source_remote_bytes_total", "counter",
		  "Bytes each remote checkpoint received from its store: its weights' and the "
		  "metadata its admission reads (0 for a local checkpoint)." },
		{ PS_REMOTE_REQUESTS, "source_remote_requests_total", "counter",
		  "Requests sent to each remote checkpoint's store, retries included." },
		{ PS_REMOTE_RETRIES, "source_remote_retries_total", "counter",
		  "Of those, the retries (after a 5xx, 429, SlowDown, a reset or a cut-off body)." },
		{ PS_REMOTE_ERRORS, "source_remote_errors_total", "counter",
		  "Reads of each remote checkpoint that failed after their retries." },
		{ PS_HEALTHY, "source_healthy", "gauge",
		  "0 when the checkpoint keeps the daemon from being ready (preload = yes and not all "
		  "resident, or required = yes and not admitted), else 1." },
		{ PS_ADMIT_FAILURES, "source_admit_failures", "gauge",
		  "Failed admissions in a row of a remote checkpoint that is failed or being "
		  "admitted again (0 once admitted)." },
		{ PS_RETRY_IN, "source_admit_retry_seconds", "gauge",
		  "Seconds until a failed remote checkpoint is admitted again (0: not waiting)." },
	};
	uint64_t adm_failed, adm_retries;
	size_t ns = catalog_count(d->catalog);
	struct csource **srcs = calloc(ns ? ns : 1, sizeof(*srcs));
	const struct stats *st = &d->stats;

	family(out, "info", "gauge",
	       "The daemon's version and shared-memory prefix (its instance); always 1.");
	evbuffer_add_printf(out, "weightd_info{version=");
	label(out, WD_VERSION);
	evbuffer_add_printf(out, ",shm_prefix=");
	label(out, d->instance);
	evbuffer_add_printf(out, "} 1\n");
	family(out, "uptime_seconds", "gauge", "Seconds since the daemon started.");
	evbuffer_add_printf(out, "weightd_uptime_seconds %.3f\n",
			    (double)daemon_uptime_ms(d) / 1000);
	u64(out, "resident_bytes", "gauge",
	    "Bytes of shared memory held by weights and by materializations in flight.",
	    cache_resident(d->cache));
	u64(out, "budget_bytes", "gauge", "The memory budget in bytes.", cache_budget(d->cache));
	u64(out, "weights", "gauge", "Weights resident in shared memory.", cache_count(d->cache));
	u64(out, "clients", "gauge", "Connected clients.", d->stats.clients);
	u64(out, "references", "gauge", "References clients hold on weights.",
	    cache_references(d->cache));
	u64(out, "segments", "gauge", "Shared-memory segments (each holds one or many weights).",
	    cache_segment_count(d->cache));
	u64(out, "segment_bytes", "gauge", "Sizes of the shared-memory segments, in bytes.",
	    cache_segment_bytes(d->cache));
	u64(out, "segment_page_bytes", "gauge",
	    "Page size the kernel gives segments: 2097152 on huge pages, else 4096.", d->page_bytes);
	u64(out, "segment_huge_bytes", "gauge", "Bytes of the segments in whole huge pages.",
	    cache_huge_bytes(d->cache));
	u64(out, "locked_weights", "gauge",
	    "Weights no connected client references, kept because processes map them.",
	    cache_locked_weights(d->cache));
	u64(out, "locked_bytes", "gauge", "Bytes of those weights.", cache_locked_bytes(d->cache));
	u64(out, "idle_weights", "gauge", "Cached weights no client references.",
	    cache_idle_weights(d->cache));
	u64(out, "idle_segments", "gauge", "Segments none of whose weights any client references.",
	    cache_idle_segments(d->cache));
	u64(out, "materializations_total", "counter", "Materializations that finished.",
	    st->materializations);
	u64(out, "materializations_failed_total", "counter", "Materializations that failed.",
	    st->materializations_failed);
	u64(out, "materializations_in_flight", "gauge", "Materializations queued or running.",
	    st->in_flight);
	u64(out, "checkpoint_read_bytes_total", "counter",
	    "Bytes read from checkpoint files by materializations.", st->bytes_read);
	u64(out, "materialized_bytes_total", "counter",
	    "Bytes of weights materialized into shared memory.", st->bytes_materialized);
	family(out, "materialization_seconds_total", "counter",
	       "Wall-clock seconds spent by finished materializations.");
	evbuffer_add_printf(out, "weightd_materialization_seconds_total %.9f\n",
			    (double)st->materialize_ns / 1e9);
	u64(out, "evictions_total", "counter", "Weights evicted to make room or by request.",
	    st->evictions);
	u64(out, "readoptions_total", "counter",
	    "Weights re-adopted from shared memory after a restart instead of read again.",
	    st->readoptions);
	u64(out, "foreign_segments", "gauge",
	    "Objects under the instance's /dev/shm prefix that weightd did not make (ignored).",
	    daemon_foreign_segments(d));
	u64(out, "clients_refused_total", "counter",
	    "Connections refused by max_clients or max_clients_per_uid.", st->clients_refused);
	u64(out, "clients_timed_out_total", "counter",
	    "Connections closed idle or stuck in the middle of a frame.", st->clients_timed_out);
	u64(out, "partial_frame_bytes", "gauge", "Bytes of requests being received.",
	    st->partial_bytes);
	u64(out, "temp_bytes", "gauge", "Recipe temporaries reserved by running materializations.",
	    st->temp_bytes);
	u64(out, "requests_total", "counter", "Requests taken from clients.", st->requests);
	u64(out, "requests_deferred_total", "counter",
	    "Times a uid's connections were held back for other uids' share of the main thread.",
	    st->requests_deferred);
	u64(out, "ready", "gauge",
	    "1 when every preload = yes checkpoint is resident and every required = yes one is "
	    "admitted (weightctl health --ready), else 0.",
	    health_ready(d, NULL, NULL, 0));
	admit_counters(d->admit, &adm_failed, &adm_retries);
	u64(out, "admissions_failed_total", "counter",
	    "Admissions of remote checkpoints that failed, at start, on a retry or on a reload.",
	    adm_failed);
	u64(out, "admission_retries_total", "counter",
	    "Failed remote admissions tried again by themselves (after their backoff).", adm_retries);
	if (!srcs) /* out of memory: the daemon's series without the per-checkpoint ones */
		return;
	for (size_t i = 0; i < ns; i++)
		srcs[i] = catalog_at(d->catalog, i);
	qsort(srcs, ns, sizeof(*srcs), by_name);
	for (size_t f = 0; f < sizeof(per_source) / sizeof(per_source[0]); f++) {
		family(out, per_source[f].name, per_source[f].type, per_source[f].help);
		for (size_t i = 0; i < ns; i++) {
			evbuffer_add_printf(out, "weightd_%s{source=", per_source[f].name);
			label(out, srcs[i]->name);
			evbuffer_add_printf(out, "} %" PRIu64 "\n",
					    source_value(d, srcs[i], per_source[f].what));
		}
	}
	free(srcs);
}

/* --- the HTTP server ---------------------------------------------------------------------- */

static void conn_close(struct metrics *m, struct bufferevent *bev)
{
	for (unsigned i = 0; i < m->n_conns; i++)
		if (m->conns[i] == bev) {
			m->conns[i] = m->conns[--m->n_conns];
			break;
		}
	bufferevent_free(bev);
}

static void reply(struct bufferevent *bev, const char *status, const char *extra,
		  struct evbuffer *body)
{
	struct evbuffer *out = bufferevent_get_output(bev);

	evbuffer_add_printf(out,
			    "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
			    status, body ? evbuffer_get_length(body) : 0, extra);
	if (body)
		evbuffer_add_buffer(out, body);
}

/* The head of one request has come (or too much of it): answer it, then close once it is sent. */
static void on_read(struct bufferevent *bev, void *arg)
{
	struct metrics *m = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char line[128] = "";
	const char *target;

	if (end.pos < 0) {
		if (evbuffer_get_length(in) <= METRICS_MAX_REQUEST)
			return;
		reply(bev, "431 Request Header Fields Too Large", "", NULL);
		goto done;
	}
	/* the request line: "GET /metrics HTTP/1.1" */
	if (evbuffer_copyout(in, line, sizeof(line) - 1) < 0)
		line[0] = '\0';
	line[strcspn(line, "\r\n")] = '\0';
	target = strchr(line, ' ') ? strchr(line, ' ') + 1 : "";
	if (strncmp(line, "GET ", 4) != 0) {
		reply(bev, "405 Method Not Allowed", "Allow: GET\r\n", NULL);
	} else if (strcmp(target, "/metrics HTTP/1.1") != 0 &&
		   strcmp(target, "/metrics HTTP/1.0") != 0) {
		reply(bev, "404 Not Found", "", NULL);
	} else {
		struct evbuffer *body = evbuffer_new();

		if (!body) {
			reply(bev, "503 Service Unavailable", "", NULL);
			goto done;
		}
		metrics_format(m->d, body);
		reply(bev, "200 OK", "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
		      body);
		evbuffer_free(body);
	}
done:
	/* one request per connection: what else it sent is not read */
	bufferevent_disable(bev, EV_READ);
	evbuffer_drain(in, evbuffer_get_length(in));
}

/* Everything is written: the connection is done. */
static void on_write(struct bufferevent *bev, void *arg)
{
	if (!(bufferevent_get_enabled(bev) & EV_READ))
		conn_close(arg, bev);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	(void)what; /* end of file, an error or a timeout: all close it */
	conn_close(arg, bev);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
		      void *arg)
{
	struct metrics *m = arg;
	struct timeval tv = { METRICS_TIMEOUT_S, 0 };
	struct bufferevent *bev;

	(void)l;
	(void)sa;
	(void)len;
	if (m->n_conns == METRICS_MAX_CONNS) {
		log_debug("metrics: %d connections already; one more closed", METRICS_MAX_CONNS);
		evutil_closesocket(fd);
		return;
	}
	bev = bufferevent_socket_new(m->d->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		evutil_closesocket(fd);
		return;
	}
	m->conns[m->n_conns++] = bev;
	bufferevent_setcb(bev, on_read, on_write, on_event, m);
	bufferevent_setwatermark(bev, EV_READ, 0, METRICS_MAX_REQUEST + 1);
	bufferevent_set_timeouts(bev, &tv, &tv);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

struct metrics *metrics_new(struct daemon *d, weightd_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct metrics *m;
	const char *why = NULL;

	if (!d->cfg->metrics_listen || !d->cfg->metrics_listen[0])
		return NULL;
	if (config_parse_listen(d->cfg->metrics_listen, d->cfg->metrics_public, &ss, &len, &why) < 0) {
		wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "metrics_listen: %s", why);
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	m->d = d;
	m->listener = evconnlistener_new_bind(d->base, on_accept, m,
					      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
						      LEV_OPT_CLOSE_ON_EXEC,
					      16, (struct sockaddr *)&ss, (int)len);
	if (!m->listener) {
		wd_error_set(
			err, WEIGHTD_E_INVALID_ARGUMENT,
			"metrics_listen: cannot listen on %s: %s (another process has the port? "
			"choose another, or set metrics_listen empty to turn the endpoint off)",
			d->cfg->metrics_listen, strerror(errno));
		free(m);
		return NULL;
	}
	log_notice("metrics served on http://%s/metrics", d->cfg->metrics_listen);
	return m;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	while (m->n_conns)
		conn_close(m, m->conns[0]);
	evconnlistener_free(m->listener);
	free(m);
}
