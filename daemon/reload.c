/* SPDX-License-Identifier: Apache-2.0 */
/* reload.c - re-reading the configuration: checkpoints swapped in, [daemon] keys applied or kept
 * as their rows in config_keys[] say. */
#include "reload.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "cache.h"
#include "catalog.h"
#include "fault.h"
#include "config.h"
#include "daemon.h"
#include "fill.h"
#include "log.h"
#include "netcheck.h"
#include "pool.h"
#include "preload.h"

struct reload_waiter {
	reload_done_fn *done;
	uint64_t session, request;
};

struct reload_job {
	struct pool_task task;           /* first: the pool hands back this pointer */
	struct daemon *d;
	struct reload *owner;            /* NULL once reload_free ran */
	struct config *ncfg;
	char **names; /* a recheck of these checkpoints only (watch), not a reload
					  * of the file; NULL: the file */
	size_t n_names;
	struct catalog_plan *plan;
	weightd_error err;
	int status;
	struct reload_waiter *waiters;   /* answered when this run is applied */
	size_t n_waiters;
	struct reload_report rep; /* what it did, for who asked */
};

struct reload {
	struct daemon *d;
	reload_changed_fn *changed;
	reload_applied_fn *applied;
	struct reload_job *running;
	struct reload_job *applying; /* whose report on_changed adds to */
	char **recheck;		     /* checkpoints to recheck (watch) */
	size_t n_recheck;
	struct reload_waiter *next;      /* asked while a run was under way */
	size_t n_next;
	bool again;                      /* a signal asked while a run was under way */
};

static void reload_start(struct reload *r);

struct reload *reload_new(struct daemon *d, reload_changed_fn *changed, reload_applied_fn *applied)
{
	struct reload *r = calloc(1, sizeof(*r));

	if (r) {
		r->d = d;
		r->changed = changed;
		r->applied = applied;
	}
	return r;
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Add one sentence to j's report (and log it at `level`, unless 0). */
static void report(struct reload_job *j, bool warning, int level, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void report(struct reload_job *j, bool warning, int level, const char *fmt, ...)
{
	char ***lines = warning ? &j->rep.warnings : &j->rep.changes;
	size_t *n = warning ? &j->rep.n_warnings : &j->rep.n_changes;
	char *line = NULL, **nl;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&line, fmt, ap) < 0)
		line = NULL;
	va_end(ap);
	if (!line)
		return;
	if (level)
		log_msg(level, "reload: %s", line);
	nl = realloc(*lines, (*n + 1) * sizeof(*nl));
	if (!nl) {
		free(line);
		return;
	}
	nl[(*n)++] = line;
	*lines = nl;
}

void reload_free(struct reload *r)
{
	if (!r)
		return;
	if (r->running)
		r->running->owner = NULL;
	free_names(r->recheck, r->n_recheck);
	free(r->next);
	free(r);
}

static void on_changed(struct csource *cs, const char *what, void *arg)
{
	struct reload *r = arg;

	/* said as it is: a checkpoint whose admission had failed and is admitted now did not
	 * change its files, and one that fails again has no new generation to serve */
	if (r->applying && strcmp(what, "generation") == 0 && cs->state == CSOURCE_FAILED)
		report(r->applying, true, 0,
		       "checkpoint %s: admitted again, and failed again (%u time%s in a row): %s",
		       cs->name, cs->admit_failures + 1, cs->admit_failures ? "s" : "",
		       cs->error.message);
	else if (r->applying && strcmp(what, "generation") == 0 &&
		 cs->why_new == CSOURCE_NEW_ADMITTED)
		report(r->applying, false, 0,
		       "checkpoint %s: admitted now, as generation %llu (its earlier admission had "
		       "failed)",
		       cs->name, (unsigned long long)cs->generation);
	else if (r->applying && strcmp(what, "generation") == 0 &&
		 cs->why_new == CSOURCE_NEW_LOCATION)
		report(r->applying, false, 0,
		       "checkpoint %s: new generation %llu (its section now names other files or "
		       "another way to reach them)",
		       cs->name, (unsigned long long)cs->generation);
	else if (r->applying && strcmp(what, "generation") == 0)
		report(r->applying, false, 0,
		       "checkpoint %s: new generation %llu (its files changed)", cs->name,
		       (unsigned long long)cs->generation);
	else if (r->applying)
		report(r->applying, false, 0, "checkpoint %s: removed", cs->name);
	if (r->changed)
		r->changed(r->d, cs, what);
}

/*
 * What each generation in the catalog has counted with its store, taken just before a reload
 * swaps generations in: a generation it replaces (or removes) hands its counts on to the name's
 * counters, so that remote traffic counters run on across generations like the others. The
 * entries are referenced until then. NULL when out of memory (the counts then start again).
 */
struct remote_snap {
	struct csource *cs;
	struct wd_remote_counters c;
};

static struct remote_snap *remote_snap_take(const struct catalog *c, size_t *ret_n)
{
	size_t n = catalog_count(c);
	struct remote_snap *s = calloc(n ? n : 1, sizeof(*s));

	*ret_n = s ? n : 0;
	for (size_t i = 0; s && i < n; i++) {
		struct wd_remote *r;

		s[i].cs = catalog_at(c, i);
		catalog_source_ref(s[i].cs);
		r = s[i].cs->src ? wd_source_remote(s[i].cs->src) : NULL;
		if (r)
			wd_remote_counters(r, &s[i].c);
	}
	return s;
}

static void remote_snap_hand_on(struct remote_snap *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct wd_remote_counters *done = &s[i].cs->stats->remote_done;

		if (s[i].cs->state == CSOURCE_REMOVED) {
			done->bytes += s[i].c.bytes;
			done->requests += s[i].c.requests;
			done->retries += s[i].c.retries;
			done->errors += s[i].c.errors;
			done->ranges += s[i].c.ranges;
			done->gap_bytes += s[i].c.gap_bytes;
		}
		catalog_source_unref(s[i].cs);
	}
	free(s);
}

/* Worker: the file, then the headers of new and changed checkpoints. */
static void reload_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct reload_job *j = (struct reload_job *)t;

	(void)scratch;
	if (j->names) {
		j->plan = catalog_recheck_prepare(j->d->catalog, j->names, j->n_names);
		if (!j->plan)
			j->status = wd_error_set(&j->err, WEIGHTD_E_RESOURCE_EXHAUSTED,
						 "out of memory reading the checkpoints");
		return;
	}
	j->status = config_load(j->d->cfg->path, &j->ncfg, &j->err);
	if (j->status < 0)
		return;
	j->plan = catalog_reload_prepare(j->d->catalog, j->ncfg);
	if (!j->plan)
		j->status = wd_error_set(&j->err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "out of memory reading the checkpoints");
}

static bool str_differs(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") != 0;
}

#define NEW_CONNS_NOTE "; connections made before keep theirs"

/* A key that only a restart applies: warn when the file now says otherwise. */
static void needs_restart(struct reload_job *j, const char *key, bool changed, const char *now,
			  const char *file)
{
	if (changed)
		report(j, true, LOG_LVL_WARNING,
		       "%s changed to %s in the configuration, but weightd keeps %s until it restarts "
		       "(systemctl restart weightd)",
		       key, file, now);
}

/* A group as a reload names it. */
static void group_words(char *buf, size_t cap, gid_t g)
{
	if (g == (gid_t)-1)
		snprintf(buf, cap, "no group (the socket's group as created)");
	else
		snprintf(buf, cap, "gid %ld", (long)g);
}

/* A CONFIG_RESTART key: the running value stays; say so when the file differs. */
static void check_restart(struct reload_job *j, struct daemon *d, const struct config_key *k,
			  const struct config *ncfg)
{
	const struct config *cur = d->cfg;
	uint64_t a = config_key_get(k, cur), b = config_key_get(k, ncfg);
	char sa[64], sb[64];

	/* under socket activation systemd's socket unit decides these: nothing to say */
	if ((k->flags & CONFIG_SOCKET_UNIT) && d->socket_activated)
		return;
	switch (k->type) {
	case CONFIG_T_PATH:
	case CONFIG_T_NAME:
	case CONFIG_T_LISTEN: {
		const char *sa_ = config_key_str(k, cur), *sb_ = config_key_str(k, ncfg);

		/* an unusable directory was switched off at start ("" here): nothing to compare */
		if ((k->flags & CONFIG_EMPTY_OK) && !sa_[0])
			return;
		needs_restart(j, k->name, str_differs(sa_, sb_), sa_,
			      (k->flags & CONFIG_EMPTY_OK) && !sb_[0] ? "(none)" : sb_);
		return;
	}
	case CONFIG_T_MODE:
		snprintf(sa, sizeof(sa), "%04o", (unsigned)a);
		snprintf(sb, sizeof(sb), "%04o", (unsigned)b);
		break;
	case CONFIG_T_GROUP:
		group_words(sa, sizeof(sa), (gid_t)a);
		group_words(sb, sizeof(sb), (gid_t)b);
		break;
	case CONFIG_T_BOOL:
		snprintf(sa, sizeof(sa), "%s", a ? "yes" : "no");
		snprintf(sb, sizeof(sb), "%s", b ? "yes" : "no");
		break;
	default:
		/* workers, compared by effect: "0" and the CPU count it means are the same */
		if (k->field == offsetof(struct config, workers)) {
			a = pool_threads(d->pool);
			b = ncfg->workers ? ncfg->workers : pool_default_threads();
		}
		snprintf(sa, sizeof(sa), "%" PRIu64, a);
		snprintf(sb, sizeof(sb), "%" PRIu64, b);
		break;
	}
	needs_restart(j, k->name, a != b, sa, sb);
}

static void apply_log_level(struct reload_job *j, struct daemon *d, const struct config *ncfg)
{
	d->cfg->log_level = ncfg->log_level;
	if (d->log_level_cli >= 0) {
		report(j, true, LOG_LVL_NOTICE,
		       "log_level in the file is ignored: --log-level %s was given",
		       log_level_name(d->log_level_cli));
	} else {
		int level = ncfg->log_level >= 0 ? ncfg->log_level : LOG_LVL_INFO;
		bool quieter = level < log_get_level();

		/* said while the more talkative of the two levels holds, so it shows */
		if (quieter)
			report(j, false, LOG_LVL_NOTICE, "log_level is now %s",
			       log_level_name(level));
		log_set_level(level);
		if (!quieter)
			report(j, false, LOG_LVL_NOTICE, "log_level is now %s",
			       log_level_name(level));
	}
}

/*
 * Apply what can change live, one message per key that changed; keep the running value of the
 * others (logged for CONFIG_RESTART keys). `d->cfg` is the running configuration, `ncfg` the file
 * just read. Keys are taken in the order of config_keys[].
 */
static void apply_daemon_keys(struct reload_job *j, struct daemon *d, const struct config *ncfg)
{
	struct config *cur = d->cfg;
	bool cache_limits = false;

	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];
		uint64_t was, now;

		if (k->section != CONFIG_DAEMON || k->reload == CONFIG_START)
			continue;
		if (k->reload == CONFIG_RESTART) {
			check_restart(j, d, k, ncfg);
			continue;
		}
		was = config_key_get(k, cur);
		now = config_key_get(k, ncfg);
		if (was == now)
			continue;
		switch (k->field) {
		case offsetof(struct config, budget_bytes): {
			uint64_t budget = daemon_effective_budget(ncfg), evicted;

			cur->budget_bytes = ncfg->budget_bytes;
			evicted = cache_set_budget(d->cache, budget);
			report(j, false, LOG_LVL_NOTICE,
			       "budget is now %" PRIu64 " bytes (%" PRIu64
			       " unheld weights evicted)",
			       budget, evicted);
			break;
		}
		case offsetof(struct config, log_level): apply_log_level(j, d, ncfg); break;
		case offsetof(struct config, segment_max_bytes):
		case offsetof(struct config, max_idle_weights):
		case offsetof(struct config, max_idle_segments):
			cache_limits = true; /* one call for the three, below */
			break;
		default:
			report(j, false, LOG_LVL_NOTICE,
			       "%s is now %" PRIu64 " (was %" PRIu64 ")%s", k->name, now, was,
			       k->flags & CONFIG_NEW_CONNS ? NEW_CONNS_NOTE : "");
			config_key_copy(k, cur, ncfg);
			break;
		}
	}
	fill_remote_set(cur->remote_concurrency, cur->remote_chunk_bytes, cur->remote_gap_bytes);
	if (cache_limits) {
		uint64_t evicted;

		cur->segment_max_bytes = ncfg->segment_max_bytes;
		cur->max_idle_weights = ncfg->max_idle_weights;
		cur->max_idle_segments = ncfg->max_idle_segments;
		evicted = cache_set_limits(d->cache, cur->segment_max_bytes, cur->max_idle_weights,
					   cur->max_idle_segments);
		report(j, false, LOG_LVL_NOTICE,
		       "segment_max is now %" PRIu64 ", max_idle_weights %" PRIu32
		       ", max_idle_segments %" PRIu32 " (%" PRIu64 " unheld weights evicted)",
		       cur->segment_max_bytes, cur->max_idle_weights, cur->max_idle_segments,
		       evicted);
	}
}

/* After the swap: what the catalog now says about each checkpoint that a reload should name
 * (added, refused, not served). `before` are the names served before it. */
static void report_checkpoints(struct reload_job *j, struct catalog *c, char **before,
			       size_t n_before)
{
	for (size_t i = 0; i < catalog_count(c); i++) {
		const struct csource *cs = catalog_at(c, i);
		bool known = false;

		for (size_t k = 0; k < n_before && !known; k++)
			known = before[k] && strcmp(before[k], cs->name) == 0;
		if (cs->state == CSOURCE_FAILED)
			report(j, true, 0, "checkpoint %s is not served: %s", cs->name,
			       cs->error.message);
		else if (cs->refused.code)
			report(j, true, 0, "checkpoint %s: %s", cs->name, cs->refused.message);
		else if (!known)
			report(j, false, 0, "checkpoint %s: added (generation %llu)", cs->name,
			       (unsigned long long)cs->generation);
	}
}

/* Main thread: swap the result in, answer who asked, and run again if asked meanwhile. */
static void reload_done(struct pool_task *t)
{
	struct reload_job *j = (struct reload_job *)t;
	struct reload *r = j->owner;
	struct daemon *d = r ? r->d : NULL;

	if (!r || d->stopping || t->cancelled) {
		catalog_plan_free(j->plan);
		if (r)
			r->running = NULL;
		goto out;
	}
	r->running = NULL;
	if (j->status < 0) {
		log_err("reload failed, keeping the running configuration: %s", j->err.message);
	} else {
		size_t n_before = catalog_count(d->catalog), n_snap;
		char **before = calloc(n_before ? n_before : 1, sizeof(*before));
		struct remote_snap *snap;

		/* names only: a missing one (no memory) is reported as added, nothing worse */
		for (size_t i = 0; before && i < n_before; i++)
			before[i] = strdup(catalog_at(d->catalog, i)->name);
		snap = remote_snap_take(d->catalog, &n_snap);
		r->applying = j;
		catalog_reload_apply(d->catalog, j->plan, on_changed, r);
		r->applying = NULL;
		WD_FAULT_CRASH("weightd/reload/swapped");
		remote_snap_hand_on(snap, n_snap);
		/* Holds on replaced generations go back first, so their weights can be dropped with
		 * the other stale ones before the new generations are preloaded. */
		preload_sync(d);
		cache_drop_stale(d->cache);
		/* A recheck asked for meanwhile still runs: its files may have changed after
		 * this run read them (one that did not is a stat per file). */
		if (!j->names) {
			apply_daemon_keys(j, d, j->ncfg);
			netcheck_warn(j->ncfg);
		}
		report_checkpoints(j, d->catalog, before, before ? n_before : 0);
		free_names(before, before ? n_before : 0);
		if (r->applied)
			r->applied(d);
	}
	daemon_notify_ready(d);
	for (size_t i = 0; i < j->n_waiters; i++)
		j->waiters[i].done(d, j->waiters[i].session, j->waiters[i].request,
				   j->status < 0 ? NULL : &j->rep, j->status < 0 ? &j->err : NULL);
	if (r->again || r->n_next || r->n_recheck)
		reload_start(r);
out:
	free_names(j->rep.changes, j->rep.n_changes);
	free_names(j->rep.warnings, j->rep.n_warnings);
	free_names(j->names, j->n_names);
	config_free(j->ncfg);
	free(j->waiters);
	free(j);
}

/*
 * Run a reload: where the running configuration has remote checkpoints, on a thread of its own
 * (pool_detach), since it reads their stores and a hung store would hold a worker from everyone
 * for its timeouts; a purely local one on the pool, as any other work.
 */
static void reload_submit(struct daemon *d, struct pool_task *t)
{
	bool remote = false;

	for (size_t i = 0; i < catalog_count(d->catalog) && !remote; i++)
		remote = wd_remote_is_url(catalog_at(d->catalog, i)->path);
	if (remote)
		pool_detach(d->pool, t);
	else
		pool_submit(d->pool, t);
}

static void reload_start(struct reload *r)
{
	struct reload_job *j = calloc(1, sizeof(*j));

	if (!j) {
		log_err("reload: out of memory; keeping the running configuration");
		return;
	}
	j->owner = r;
	j->d = r->d;
	wd_error_clear(&j->err);
	j->task.work = reload_work;
	j->task.done = reload_done;
	r->running = j;
	if (!r->again && !r->n_next) {
		/* only watched checkpoints changed: the file is not read */
		j->names = r->recheck;
		j->n_names = r->n_recheck;
		r->recheck = NULL;
		r->n_recheck = 0;
		for (size_t i = 0; i < j->n_names; i++)
			log_notice("checkpoint %s: reloading its changed files", j->names[i]);
		reload_submit(r->d, &j->task);
		return;
	}
	j->waiters = r->next;
	j->n_waiters = r->n_next;
	r->next = NULL;
	r->n_next = 0;
	r->again = false;
	sd_notify(0, "RELOADING=1");
	log_notice("reloading %s", r->d->cfg->path);
	reload_submit(r->d, &j->task);
}

void reload_recheck(struct reload *r, char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		bool known = false;
		char **nr;

		for (size_t k = 0; k < r->n_recheck && !known; k++)
			known = strcmp(r->recheck[k], names[i]) == 0;
		if (known)
			continue;
		nr = realloc(r->recheck, (r->n_recheck + 1) * sizeof(*nr));
		if (!nr || !(nr[r->n_recheck] = strdup(names[i]))) {
			if (nr)
				r->recheck = nr;
			log_err("checkpoint %s: out of memory; its changed files are not reloaded",
				names[i]);
			continue;
		}
		r->recheck = nr;
		r->n_recheck++;
	}
	if (!r->running && r->n_recheck)
		reload_start(r);
}

void reload_request(struct reload *r, reload_done_fn *done, uint64_t session, uint64_t request)
{
	if (done) {
		struct reload_waiter *w = realloc(r->next, (r->n_next + 1) * sizeof(*w));

		if (!w) {
			weightd_error err;

			wd_error_clear(&err);
			wd_error_set(&err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
			done(r->d, session, request, NULL, &err);
			return;
		}
		r->next = w;
		r->next[r->n_next].done = done;
		r->next[r->n_next].session = session;
		r->next[r->n_next].request = request;
		r->n_next++;
	} else {
		r->again = true;
	}
	if (!r->running)
		reload_start(r);
}
