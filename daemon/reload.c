/* SPDX-License-Identifier: Apache-2.0 */
/* reload.c - re-reading the configuration: checkpoints swapped in, [daemon] keys applied per key. */
#include "reload.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "cache.h"
#include "catalog.h"
#include "config.h"
#include "daemon.h"
#include "log.h"
#include "pool.h"
#include "preload.h"
#include "server.h"

struct reload_waiter {
	uint64_t session, request;
};

struct reload_job {
	struct pool_task task;           /* first: the pool hands back this pointer */
	struct daemon *d;
	struct reload *owner;            /* NULL once reload_free ran */
	struct config *ncfg;
	struct catalog_plan *plan;
	weightd_error err;
	int status;
	struct reload_waiter *waiters;   /* answered when this run is applied */
	size_t n_waiters;
};

struct reload {
	struct daemon *d;
	struct reload_job *running;
	struct reload_waiter *next;      /* asked while a run was under way */
	size_t n_next;
	bool again;                      /* a signal asked while a run was under way */
};

static void reload_start(struct reload *r);

struct reload *reload_new(struct daemon *d)
{
	struct reload *r = calloc(1, sizeof(*r));

	if (r)
		r->d = d;
	return r;
}

void reload_free(struct reload *r)
{
	if (!r)
		return;
	if (r->running)
		r->running->owner = NULL;
	free(r->next);
	free(r);
}

static void on_changed(struct csource *cs, const char *what, void *arg)
{
	struct daemon *d = arg;

	server_notify(d->server, cs, what);
}

/* Worker: the file, then the headers of new and changed checkpoints. */
static void reload_work(struct pool_task *t, struct wd_scratch *scratch)
{
	struct reload_job *j = (struct reload_job *)t;

	(void)scratch;
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

/* A key that only a restart applies: warn when the file now says otherwise. */
static void needs_restart(const char *key, bool changed, const char *now, const char *file)
{
	if (changed)
		log_warn("reload: %s changed to %s in the configuration, but it takes effect only when "
			 "weightd restarts; still %s", key, file, now);
}

/*
 * Apply what can change live, one message per key that changed; keep the running value of the
 * others (logged). `cur` is the running configuration, `ncfg` the file just read.
 */
static void apply_daemon_keys(struct daemon *d, const struct config *ncfg)
{
	struct config *cur = d->cfg;
	char a[64], b[64];

	/* under socket activation systemd's socket unit decides these three: nothing to say */
	if (!d->socket_activated) {
		needs_restart("socket", str_differs(cur->socket_path, ncfg->socket_path),
			      cur->socket_path, ncfg->socket_path);
		snprintf(a, sizeof(a), "%04o", (unsigned)cur->socket_mode);
		snprintf(b, sizeof(b), "%04o", (unsigned)ncfg->socket_mode);
		needs_restart("socket_mode", cur->socket_mode != ncfg->socket_mode, a, b);
		snprintf(a, sizeof(a), "gid %ld",
			 cur->socket_group == (gid_t)-1 ? -1L : (long)cur->socket_group);
		snprintf(b, sizeof(b), "gid %ld",
			 ncfg->socket_group == (gid_t)-1 ? -1L : (long)ncfg->socket_group);
		needs_restart("socket_group", cur->socket_group != ncfg->socket_group, a, b);
	}
	needs_restart("shm_prefix", str_differs(cur->shm_prefix, ncfg->shm_prefix), cur->shm_prefix,
		      ncfg->shm_prefix);
	/* an unusable state directory was switched off at start ("" here): nothing to compare */
	if (cur->state_dir[0])
		needs_restart("state_dir", str_differs(cur->state_dir, ncfg->state_dir),
			      cur->state_dir, ncfg->state_dir[0] ? ncfg->state_dir : "(none)");
	needs_restart("verify_adopted", cur->verify_adopted != ncfg->verify_adopted,
		      cur->verify_adopted ? "yes" : "no", ncfg->verify_adopted ? "yes" : "no");
	/* compared by effect: "0" and the CPU count it means are the same */
	{
		unsigned now = pool_threads(d->pool);
		unsigned want = ncfg->workers ? ncfg->workers : pool_default_threads();

		snprintf(a, sizeof(a), "%u", now);
		snprintf(b, sizeof(b), "%u", want);
		needs_restart("workers", now != want, a, b);
	}

	if (cur->budget_bytes != ncfg->budget_bytes) {
		uint64_t budget = daemon_effective_budget(ncfg), evicted;

		cur->budget_bytes = ncfg->budget_bytes;
		evicted = cache_set_budget(d->cache, budget);
		log_notice("reload: budget is now %" PRIu64 " bytes (%" PRIu64 " unheld weights evicted)",
			   budget, evicted);
	}
	if (cur->log_level != ncfg->log_level) {
		cur->log_level = ncfg->log_level;
		if (d->log_level_cli >= 0) {
			log_notice("reload: log_level in the file is ignored: --log-level %s was given",
				   log_level_name(d->log_level_cli));
		} else {
			int level = ncfg->log_level >= 0 ? ncfg->log_level : LOG_LVL_INFO;
			bool quieter = level < log_get_level();

			/* said while the more talkative of the two levels holds, so it shows */
			if (quieter)
				log_notice("reload: log_level is now %s", log_level_name(level));
			log_set_level(level);
			if (!quieter)
				log_notice("reload: log_level is now %s", log_level_name(level));
		}
	}
#define LIVE(field, key, what)                                                                      \
	if (cur->field != ncfg->field) {                                                            \
		log_notice("reload: " key " is now %" PRIu64 " (was %" PRIu64 ")" what,              \
			   (uint64_t)ncfg->field, (uint64_t)cur->field);                              \
		cur->field = ncfg->field;                                                           \
	}
	LIVE(max_clients, "max_clients", "")
	LIVE(max_frame_bytes, "max_frame", "; connections made before keep theirs")
	LIVE(client_max_pending, "client_max_pending", "")
	LIVE(client_max_queue_bytes, "client_max_queue", "")
	LIVE(client_max_bytes, "client_max_bytes", "")
	LIVE(client_max_weights, "client_max_weights", "")
	LIVE(max_message_bytes, "max_message", "; connections made before keep theirs")
	LIVE(max_unit_entries, "max_unit_entries", "")
#undef LIVE
	if (cur->segment_max_bytes != ncfg->segment_max_bytes ||
	    cur->max_idle_weights != ncfg->max_idle_weights ||
	    cur->max_idle_segments != ncfg->max_idle_segments) {
		uint64_t evicted;

		cur->segment_max_bytes = ncfg->segment_max_bytes;
		cur->max_idle_weights = ncfg->max_idle_weights;
		cur->max_idle_segments = ncfg->max_idle_segments;
		evicted = cache_set_limits(d->cache, cur->segment_max_bytes, cur->max_idle_weights,
					   cur->max_idle_segments);
		log_notice("reload: segment_max is now %" PRIu64 ", max_idle_weights %" PRIu32
			   ", max_idle_segments %" PRIu32 " (%" PRIu64 " unheld weights evicted)",
			   cur->segment_max_bytes, cur->max_idle_weights, cur->max_idle_segments,
			   evicted);
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
		catalog_reload_apply(d->catalog, j->plan, on_changed, d);
		/* Holds on replaced generations go back first, so their weights can be dropped with
		 * the other stale ones before the new generations are preloaded. */
		preload_sync(d);
		cache_drop_stale(d->cache);
		apply_daemon_keys(d, j->ncfg);
	}
	daemon_notify_ready(d);
	for (size_t i = 0; i < j->n_waiters; i++)
		server_reload_done(d->server, j->waiters[i].session, j->waiters[i].request,
				   j->status < 0 ? &j->err : NULL);
	if (r->again || r->n_next)
		reload_start(r);
out:
	config_free(j->ncfg);
	free(j->waiters);
	free(j);
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
	j->waiters = r->next;
	j->n_waiters = r->n_next;
	r->next = NULL;
	r->n_next = 0;
	r->again = false;
	wd_error_clear(&j->err);
	j->task.work = reload_work;
	j->task.done = reload_done;
	r->running = j;
	sd_notify(0, "RELOADING=1");
	log_notice("reloading %s", r->d->cfg->path);
	pool_submit(r->d->pool, &j->task);
}

void reload_request(struct reload *r, uint64_t session, uint64_t request)
{
	if (session) {
		struct reload_waiter *w = realloc(r->next, (r->n_next + 1) * sizeof(*w));

		if (!w) {
			weightd_error err;

			wd_error_clear(&err);
			wd_error_set(&err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
			server_reload_done(r->d->server, session, request, &err);
			return;
		}
		r->next = w;
		r->next[r->n_next].session = session;
		r->next[r->n_next].request = request;
		r->n_next++;
	} else {
		r->again = true;
	}
	if (!r->running)
		reload_start(r);
}
