/* SPDX-License-Identifier: Apache-2.0 */
/* catalog.c - admission of configured checkpoints, access checks, and generations on reload. */
#include "catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aws_cred.h"
#include "log.h"
#include "peer.h"
#include "remote.h"
#include "wd_strdup.h"

struct catalog {
	struct csource **items;
	size_t n;
	struct wd_limits lim;
	/* [daemon]'s remote_* keys, as read at start */
	unsigned remote_connect_timeout_ms, remote_low_speed_time_s, remote_retries;
};

static void conf_free(struct source_conf *c);

static struct source_conf *conf_copy(const struct source_conf *sc)
{
	struct source_conf *c = calloc(1, sizeof(*c));
	bool oom = false;

	if (!c)
		return NULL;
	c->endpoint = wd_strdup_opt(sc->endpoint, &oom);
	c->region = wd_strdup_opt(sc->region, &oom);
	c->path_style = sc->path_style;
	c->credentials_file = wd_strdup_opt(sc->credentials_file, &oom);
	c->profile = wd_strdup_opt(sc->profile, &oom);
	c->credentials = wd_strdup_opt(sc->credentials, &oom);
	c->imds_v1 = sc->imds_v1;
	c->token_file = wd_strdup_opt(sc->token_file, &oom);
	c->ca_file = wd_strdup_opt(sc->ca_file, &oom);
	c->allow_http = sc->allow_http;
	c->azure_credentials = wd_strdup_opt(sc->azure_credentials, &oom);
	c->azure_key_file = wd_strdup_opt(sc->azure_key_file, &oom);
	c->name = strdup(sc->name);
	c->path = strdup(sc->path);
	c->allow_any = sc->allow_any;
	c->preload = sc->preload;
	c->required = sc->required;
	c->watch = sc->watch;
	c->watch_delay_ms = sc->watch_delay_ms;
	c->drop_page_cache = sc->drop_page_cache;
	c->line = sc->line;
	if (sc->n_uids) {
		c->allow_uids = malloc(sc->n_uids * sizeof(uid_t));
		if (c->allow_uids) {
			memcpy(c->allow_uids, sc->allow_uids, sc->n_uids * sizeof(uid_t));
			c->n_uids = sc->n_uids;
		}
	}
	if (sc->n_gids) {
		c->allow_gids = malloc(sc->n_gids * sizeof(gid_t));
		if (c->allow_gids) {
			memcpy(c->allow_gids, sc->allow_gids, sc->n_gids * sizeof(gid_t));
			c->n_gids = sc->n_gids;
		}
	}
	if (oom || !c->name || !c->path || c->n_uids != sc->n_uids || c->n_gids != sc->n_gids) {
		conf_free(c);
		return NULL;
	}
	return c;
}

static void conf_free(struct source_conf *c)
{
	if (!c)
		return;
	free(c->name);
	free(c->path);
	free(c->allow_uids);
	free(c->allow_gids);
	free(c->endpoint);
	free(c->region);
	free(c->credentials_file);
	free(c->profile);
	free(c->credentials);
	free(c->token_file);
	free(c->ca_file);
	free(c->azure_credentials);
	free(c->azure_key_file);
	free(c);
}

void catalog_remote_conf(const struct source_conf *sc, const struct config *cfg,
			 struct wd_source_remote_conf *ret)
{
	*ret = (struct wd_source_remote_conf){
		.endpoint = sc->endpoint,
		.region = sc->region,
		.path_style = sc->path_style,
		.credentials_file = sc->credentials_file,
		.profile = sc->profile,
		.credentials = sc->credentials ? wd_aws_cred_source_parse(sc->credentials) : 0,
		.imds_v1 = sc->imds_v1,
		.token_file = sc->token_file,
		.ca_file = sc->ca_file,
		.allow_http = sc->allow_http,
		.azure_credentials = sc->azure_credentials,
		.azure_key_file = sc->azure_key_file,
	};
	if (cfg) {
		ret->connect_timeout_ms = (unsigned)cfg->remote_connect_timeout_ms;
		ret->low_speed_time_s = (unsigned)((cfg->remote_low_speed_time_ms + 999) / 1000);
		ret->retries = cfg->remote_retries;
	}
}

/* Where a remote checkpoint's keys came from, their key id and expiry: never the secret. */
static void log_credentials(const char *name, const struct wd_source *src)
{
	struct wd_aws_cred *c =
		wd_source_is_remote(src) ? wd_remote_aws_cred(wd_source_remote(src)) : NULL;
	struct wd_aws_cred_info in;
	char when[64] = "no expiry";

	if (!c)
		return;
	wd_aws_cred_info(c, &in);
	if (in.expires) {
		time_t t = (time_t)in.expires;
		struct tm tm;
		if (gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "expires %Y-%m-%dT%H:%M:%SZ", &tm);
	}
	log_info("checkpoint %s: credentials from %s, access key id %s, %s", name, in.source,
		 in.access_key, when);
}

static void catalog_source_unref_final(struct csource *cs);

/* Open one source; a failure is recorded in the entry, not returned. */
static struct csource *catalog_source_admit(const struct catalog *c, const struct source_conf *sc,
					    uint64_t generation, bool defer_remote)
{
	struct csource *cs = calloc(1, sizeof(*cs));
	struct wd_source_remote_conf rc;
	char shown[1024];

	if (!cs)
		return NULL;
	/* what is shown of the path (status, logs, errors): a URL without its query */
	wd_source_show_path(sc->path, shown, sizeof(shown));
	catalog_remote_conf(sc, NULL, &rc);
	rc.connect_timeout_ms = c->remote_connect_timeout_ms;
	rc.low_speed_time_s = c->remote_low_speed_time_s;
	rc.retries = c->remote_retries;
	cs->conf = conf_copy(sc);
	cs->name = strdup(sc->name);
	cs->path = strdup(shown);
	cs->stats = calloc(1, sizeof(*cs->stats));
	if (!cs->conf || !cs->name || !cs->path || !cs->stats) {
		free(cs->stats);
		conf_free(cs->conf);
		free(cs->name);
		free(cs->path);
		free(cs);
		return NULL;
	}
	cs->refs = 1;
	cs->stats->refs = 1;
	cs->generation = generation;
	cs->catalog = c;
	wd_error_clear(&cs->error);
	wd_error_clear(&cs->refused);
	if (defer_remote && wd_source_is_url(sc->path)) {
		cs->state = CSOURCE_LOADING;
		cs->load_conf = conf_copy(sc);
		if (!cs->load_conf) {
			cs->refs = 0;
			catalog_source_unref_final(cs);
			return NULL;
		}
		wd_error_set(&cs->error, WEIGHTD_E_BAD_CHECKPOINT,
			     "checkpoint \"%s\" is still being admitted (its index and headers are "
			     "being read from %s): ask again shortly",
			     sc->name, cs->path);
		log_info("checkpoint %s: admitting %s", sc->name, cs->path);
		return cs;
	}
	if (wd_source_open_at(sc->name, sc->path, &rc, &c->lim, &cs->src, &cs->error) < 0) {
		cs->src = NULL;
		cs->state = CSOURCE_FAILED;
		wd_error_about(&cs->error, sc->name, NULL);
		/* a reload that keeps the last good generation says so itself */
		if (generation == 1)
			log_err("checkpoint %s (%s): %s", sc->name, cs->path, cs->error.message);
	} else {
		cs->state = CSOURCE_READY;
		wd_source_set_drop_cache(cs->src, sc->drop_page_cache);
		log_info("checkpoint %s: %s, %zu tensors, %llu bytes (%s)", sc->name,
			 wd_source_kind_name(wd_source_kind(cs->src)),
			 wd_source_tensor_count(cs->src),
			 (unsigned long long)wd_source_bytes(cs->src), cs->path);
		log_credentials(sc->name, cs->src);
	}
	return cs;
}

int catalog_open(const struct csource *cs, struct wd_source **ret, weightd_error *err)
{
	const struct catalog *c = cs->catalog;
	struct wd_source_remote_conf rc;

	catalog_remote_conf(cs->load_conf, NULL, &rc);
	rc.connect_timeout_ms = c->remote_connect_timeout_ms;
	rc.low_speed_time_s = c->remote_low_speed_time_s;
	rc.retries = c->remote_retries;
	return wd_source_open_at(cs->name, cs->load_conf->path, &rc, &c->lim, ret, err);
}

bool catalog_admitted(struct csource *cs, struct wd_source *src, const weightd_error *err)
{
	if (cs->state != CSOURCE_LOADING) {
		wd_source_free(src);
		return false;
	}
	if (src) {
		cs->src = src;
		cs->state = CSOURCE_READY;
		cs->admit_failures = 0;
		cs->retry_at_ms = 0;
		wd_error_clear(&cs->error);
		wd_source_set_drop_cache(cs->src, cs->conf->drop_page_cache);
		log_info("checkpoint %s: %s, %zu tensors, %llu bytes (%s)", cs->name,
			 wd_source_kind_name(wd_source_kind(src)), wd_source_tensor_count(src),
			 (unsigned long long)wd_source_bytes(src), cs->path);
		log_credentials(cs->name, src);
		return true;
	}
	cs->state = CSOURCE_FAILED;
	if (err)
		cs->error = *err;
	else
		wd_error_set(&cs->error, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	wd_error_about(&cs->error, cs->name, NULL);
	log_err("checkpoint %s (%s): %s", cs->name, cs->path, cs->error.message);
	return true;
}

bool catalog_retry(struct csource *cs)
{
	if (cs->state != CSOURCE_FAILED || !wd_source_is_url(cs->conf->path))
		return false;
	conf_free(cs->load_conf);
	cs->load_conf = conf_copy(cs->conf);
	if (!cs->load_conf)
		return false;
	cs->state = CSOURCE_LOADING;
	cs->retry_at_ms = 0;
	cs->failure_counted = false;
	wd_error_set(&cs->error, WEIGHTD_E_BAD_CHECKPOINT,
		     "checkpoint \"%s\" is being admitted again (%u earlier attempt%s failed; its "
		     "index and headers are being read from %s): ask again shortly",
		     cs->name, cs->admit_failures, cs->admit_failures == 1 ? "" : "s", cs->path);
	log_info("checkpoint %s: admitting %s again", cs->name, cs->path);
	return true;
}

void catalog_source_ref(struct csource *cs)
{
	cs->refs++;
}

static void catalog_source_unref_final(struct csource *cs)
{
	wd_source_free(cs->src);
	conf_free(cs->conf);
	conf_free(cs->load_conf);
	if (--cs->stats->refs == 0)
		free(cs->stats);
	free(cs->name);
	free(cs->path);
	free(cs);
}

void catalog_source_unref(struct csource *cs)
{
	if (!cs || --cs->refs)
		return;
	catalog_source_unref_final(cs);
}

struct catalog *catalog_new(const struct config *cfg, const struct wd_limits *lim)
{
	struct catalog *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->lim = *lim;
	c->remote_connect_timeout_ms = (unsigned)cfg->remote_connect_timeout_ms;
	c->remote_low_speed_time_s = (unsigned)((cfg->remote_low_speed_time_ms + 999) / 1000);
	c->remote_retries = cfg->remote_retries;
	c->items = calloc(cfg->n_sources ? cfg->n_sources : 1, sizeof(*c->items));
	if (!c->items) {
		free(c);
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_sources; i++) {
		struct csource *cs = catalog_source_admit(c, &cfg->sources[i], 1, true);
		if (!cs) {
			catalog_free(c);
			return NULL;
		}
		c->items[c->n++] = cs;
	}
	return c;
}

void catalog_free(struct catalog *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		catalog_source_unref(c->items[i]);
	free(c->items);
	free(c);
}

size_t catalog_count(const struct catalog *c)
{
	return c->n;
}

struct csource *catalog_at(const struct catalog *c, size_t i)
{
	return i < c->n ? c->items[i] : NULL;
}

struct csource *catalog_find(const struct catalog *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->items[i]->name, name) == 0)
			return c->items[i];
	return NULL;
}

bool catalog_allowed(const struct csource *cs, const struct peer *peer)
{
	const struct source_conf *sc = cs->conf;

	if (peer->privileged || sc->allow_any)
		return true;
	for (size_t i = 0; i < sc->n_uids; i++)
		if (sc->allow_uids[i] == peer->uid)
			return true;
	for (size_t i = 0; i < sc->n_gids; i++) {
		if (sc->allow_gids[i] == peer->gid)
			return true;
		for (size_t j = 0; j < peer->n_groups; j++)
			if (sc->allow_gids[i] == peer->groups[j])
				return true;
	}
	return false;
}

int catalog_resolve(const struct catalog *c, const char *name, const struct peer *peer,
		    struct csource **ret, weightd_error *err)
{
	struct csource *cs = catalog_find(c, name);

	/* A checkpoint the peer may not read gets the same answer, word for word, as a name that is
	 * not served: otherwise the answer would confirm the names of checkpoints it may not read.
	 * The message names the peer so that whoever is refused knows which allow list to ask for. */
	if (!cs || cs->state == CSOURCE_REMOVED || !catalog_allowed(cs, peer)) {
		wd_error_about(err, name, NULL);
		return wd_error_set(err, WEIGHTD_E_UNKNOWN_SOURCE,
				    "no checkpoint named \"%s\" that uid %u (gid %u) may read is "
				    "served (`weightctl list` shows those it may)",
				    name, (unsigned)peer->uid, (unsigned)peer->gid);
	}
	if (cs->state == CSOURCE_LOADING) {
		wd_error_about(err, name, NULL);
		return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "%s", cs->error.message);
	}
	if (cs->state == CSOURCE_FAILED) {
		cs->stats->errors++;
		wd_error_about(err, name, NULL);
		return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "checkpoint \"%s\" (%s) is not served: %s",
				    name, cs->path, cs->error.message);
	}
	*ret = cs;
	return 0;
}

void catalog_explain_changed(const struct csource *cs, weightd_error *err)
{
	size_t n = strlen(err->message);

	if (err->code != WEIGHTD_E_SOURCE_CHANGED || !cs)
		return;
	if (cs->conf->watch)
		snprintf(err->message + n, sizeof(err->message) - n,
			 "; weightd reloads checkpoint \"%s\" once its files have been left alone "
			 "for %llu ms: ask again then",
			 cs->name, (unsigned long long)cs->conf->watch_delay_ms);
	else if (wd_source_is_url(cs->conf->path))
		/* watch is refused for remote checkpoints: a reload is the one way */
		snprintf(err->message + n, sizeof(err->message) - n,
			 "; an operator's `weightctl reload` serves the new objects of checkpoint "
			 "\"%s\" (its ETags are checked again)",
			 cs->name);
	else
		snprintf(err->message + n, sizeof(err->message) - n,
			 "; run `weightctl reload` to serve the new files of checkpoint \"%s\", or "
			 "set `watch = yes` in its section to have weightd reload it by itself",
			 cs->name);
}

/* Did any file of a ready source change identity since it was admitted? */
static bool source_changed(const struct csource *cs)
{
	weightd_error e;

	if (!cs->src)
		return true;
	for (size_t f = 0; f < wd_source_file_count(cs->src); f++)
		if (wd_source_check_path(cs->src, (uint32_t)f, &e) < 0)
			return true;
	return false;
}

struct plan_item {
	const struct source_conf *sc;
	struct csource *old;         /* current entry of that name, or NULL */
	struct csource *fresh;       /* newly admitted entry, or NULL when `old` stays */
	struct source_conf *conf;    /* old stays: its new access rules */
	weightd_error refused;	     /* old stays because its new files were refused: why */
	bool has_refused;
	bool untouched; /* not rechecked: old stays as it is */
};

struct catalog_plan {
	size_t n;
	struct plan_item items[];
};

static bool str_same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Would sc reach the same objects the same way as the entry's section? */
static bool same_location(const struct source_conf *a, const struct source_conf *b)
{
	return strcmp(a->path, b->path) == 0 && str_same(a->endpoint, b->endpoint) &&
	       str_same(a->region, b->region) && a->path_style == b->path_style &&
	       str_same(a->credentials_file, b->credentials_file) &&
	       str_same(a->profile, b->profile) && str_same(a->token_file, b->token_file) &&
	       str_same(a->credentials, b->credentials) && a->imds_v1 == b->imds_v1 &&
	       str_same(a->ca_file, b->ca_file) && a->allow_http == b->allow_http &&
	       str_same(a->azure_credentials, b->azure_credentials) &&
	       str_same(a->azure_key_file, b->azure_key_file);
}

/* Worker: decide whether `it->old` stays or checkpoint `sc` is admitted anew. */
static void plan_decide(const struct catalog *c, struct plan_item *it, const struct source_conf *sc)
{
	it->sc = sc;
	if (it->old && it->old->state == CSOURCE_LOADING && same_location(it->old->conf, sc)) {
		it->conf = conf_copy(sc); /* being admitted: that goes on, with the new rules */
		return;
	}
	if (it->old && it->old->state == CSOURCE_READY && same_location(it->old->conf, sc) &&
	    !source_changed(it->old)) {
		it->conf = conf_copy(sc); /* same files: keep the entry, take the new rules */
		return;
	}
	/* on a reload's worker already: a remote checkpoint is opened here too, so that a changed
	 * one replaces the last good generation only once it is admitted */
	it->fresh = catalog_source_admit(c, sc, it->old ? it->old->generation + 1 : 1, false);
	if (it->fresh && it->old)
		it->fresh->why_new = it->old->state == CSOURCE_FAILED ? CSOURCE_NEW_ADMITTED :
				     !same_location(it->old->conf, sc) ? CSOURCE_NEW_LOCATION :
									  CSOURCE_NEW_FILES;
	if (it->fresh && it->fresh->state == CSOURCE_FAILED && it->old &&
	    it->old->state == CSOURCE_READY) {
		/* the new files are broken: the last good generation goes on serving */
		it->refused = it->fresh->error;
		it->has_refused = true;
		catalog_source_unref(it->fresh);
		it->fresh = NULL;
		it->conf = conf_copy(sc);
	} else if (it->fresh && it->fresh->state == CSOURCE_FAILED && it->old) {
		log_err("checkpoint %s (%s): %s", sc->name, it->fresh->path,
			it->fresh->error.message);
	}
}

struct catalog_plan *catalog_reload_prepare(const struct catalog *c, const struct config *cfg)
{
	struct catalog_plan *p = calloc(1, sizeof(*p) + cfg->n_sources * sizeof(p->items[0]));

	if (!p)
		return NULL;
	for (size_t i = 0; i < cfg->n_sources; i++) {
		struct plan_item *it = &p->items[p->n++];

		it->old = catalog_find(c, cfg->sources[i].name);
		plan_decide(c, it, &cfg->sources[i]);
	}
	return p;
}

struct catalog_plan *catalog_recheck_prepare(const struct catalog *c, char *const *names, size_t n)
{
	struct catalog_plan *p = calloc(1, sizeof(*p) + c->n * sizeof(p->items[0]));

	if (!p)
		return NULL;
	for (size_t i = 0; i < c->n; i++) {
		struct plan_item *it = &p->items[p->n++];
		bool named = false;

		it->old = c->items[i];
		for (size_t j = 0; j < n && !named; j++)
			named = strcmp(names[j], it->old->name) == 0;
		if (named)
			plan_decide(c, it, it->old->conf);
		else
			it->untouched = true;
	}
	return p;
}

void catalog_plan_free(struct catalog_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		catalog_source_unref(p->items[i].fresh);
		conf_free(p->items[i].conf);
	}
	free(p);
}

/* fresh replaces old (a new generation of the name): it takes over old's counters, which old's
 * weights still add to, and drops its own (still zero: nothing was made from it yet). */
static void catalog_stats_hand_on(struct csource *fresh, struct csource *old)
{
	if (--fresh->stats->refs == 0)
		free(fresh->stats);
	fresh->stats = old->stats;
	fresh->stats->refs++;
}

void catalog_reload_apply(struct catalog *c, struct catalog_plan *p,
			  void (*changed)(struct csource *cs, const char *what, void *arg), void *arg)
{
	struct csource **items = calloc(p->n + c->n + 1, sizeof(*items));
	size_t n = 0;

	if (!items) {
		log_err("reload: out of memory; keeping the current checkpoints");
		catalog_plan_free(p);
		return;
	}
	for (size_t i = 0; i < p->n; i++) {
		struct plan_item *it = &p->items[i];

		if (!it->fresh) {
			/* kept (or its replacement could not be allocated): the old entry stays */
			if (!it->old)
				continue;
			if (it->untouched) {
				catalog_source_ref(it->old);
				items[n++] = it->old;
				continue;
			}
			if (it->conf) {
				conf_free(it->old->conf);
				it->old->conf = it->conf;
				it->conf = NULL;
				if (it->old->src)
					wd_source_set_drop_cache(it->old->src,
								 it->old->conf->drop_page_cache);
			}
			if (it->has_refused) {
				log_err("checkpoint %s: generation %llu refused, generation %llu is still "
					"served: %s",
					it->old->name, (unsigned long long)it->old->generation + 1,
					(unsigned long long)it->old->generation,
					it->refused.message);
				it->old->refused = it->refused;
				wd_source_keep_files(it->old->src);
				snprintf(it->old->refused.message, sizeof(it->old->refused.message),
					 "the changed files were refused, generation %llu is still "
					 "served: %s",
					 (unsigned long long)it->old->generation,
					 it->refused.message);
			} else if (it->old->refused.code) {
				log_notice(
					"checkpoint %s: its files are those of generation %llu again",
					it->old->name, (unsigned long long)it->old->generation);
				wd_error_clear(&it->old->refused);
			}
			catalog_source_ref(it->old);
			items[n++] = it->old;
			continue;
		}
		items[n++] = it->fresh;
		if (it->old)
			catalog_stats_hand_on(it->fresh, it->old);
		if (it->old && it->fresh->state == CSOURCE_FAILED)
			it->fresh->admit_failures = it->old->admit_failures;
		if (it->old) {
			log_notice("checkpoint %s: new generation %llu", it->fresh->name,
				   (unsigned long long)it->fresh->generation);
			it->old->state = CSOURCE_REMOVED;
			if (changed)
				changed(it->fresh, "generation", arg);
		}
		it->fresh = NULL; /* the catalog's reference now */
	}
	for (size_t i = 0; i < c->n; i++) {
		bool kept = false;
		for (size_t j = 0; j < n; j++)
			kept |= items[j] == c->items[i] || strcmp(items[j]->name, c->items[i]->name) == 0;
		if (!kept) {
			log_notice("checkpoint %s: removed from the configuration", c->items[i]->name);
			c->items[i]->state = CSOURCE_REMOVED;
			if (changed)
				changed(c->items[i], "removed", arg);
		}
		catalog_source_unref(c->items[i]);
	}
	free(c->items);
	c->items = items;
	c->n = n;
	catalog_plan_free(p);
}

void catalog_remote_counters(const struct csource *cs, struct wd_remote_counters *ret)
{
	struct wd_remote *r = cs->src ? wd_source_remote(cs->src) : NULL;
	struct wd_remote_counters now = { 0 };

	*ret = cs->stats->remote_done;
	if (!r)
		return;
	wd_remote_counters(r, &now);
	ret->bytes += now.bytes;
	ret->requests += now.requests;
	ret->retries += now.retries;
	ret->errors += now.errors;
	ret->ranges += now.ranges;
	ret->gap_bytes += now.gap_bytes;
}
