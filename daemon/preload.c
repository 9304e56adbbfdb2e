/* SPDX-License-Identifier: Apache-2.0 */
/* preload.c - the daemon's own holds on the weights of `preload = yes` checkpoints. Main thread. */
#include "preload.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "catalog.h"
#include "daemon.h"
#include "log.h"
#include "recipe.h"

struct preload_set;

struct pin {
	struct preload_set *set;
	struct weight *w;            /* one reference held while the set is live */
};

/* The holds for one generation of one checkpoint. */
struct preload_set {
	struct daemon *d;
	struct csource *cs;          /* reference held */
	struct pin *pins;            /* one per tensor, in file order */
	size_t n;
	size_t pending;              /* jobs whose callback has not run yet */
	size_t held;                 /* pins holding their weight (health asks, O(1)) */
	size_t failed;
	bool released;               /* holds given back; freed once pending reaches 0 */
	LIST_ENTRY(preload_set) link; /* in d->preloads */
};

static void set_free(struct preload_set *ps)
{
	catalog_source_unref(ps->cs);
	free(ps->pins);
	free(ps);
}

static void set_done_logging(struct preload_set *ps)
{
	size_t held = 0;

	for (size_t i = 0; i < ps->n; i++)
		held += ps->pins[i].w != NULL;
	if (ps->failed)
		log_warn("checkpoint %s: preloaded %zu of %zu tensors; %zu could not be "
			 "materialized (see above)", ps->cs->name, held, ps->n, ps->failed);
	else
		log_notice("checkpoint %s: preloaded all %zu tensors (generation %llu)",
			   ps->cs->name, ps->n, (unsigned long long)ps->cs->generation);
}

/* One answer less to wait for; the last one logs the outcome, or frees a released set. */
static void set_settle(struct preload_set *ps)
{
	if (--ps->pending)
		return;
	if (ps->released) {
		LIST_REMOVE(ps, link);
		set_free(ps);
		return;
	}
	set_done_logging(ps);
}

static void on_ready(struct weight *w, const weightd_error *err, uint64_t bytes_read, void *arg)
{
	struct pin *p = arg;
	struct preload_set *ps = p->set;

	if (!w) {
		ps->failed++;
		if (err->code != WEIGHTD_E_CANCELLED) /* stopping: not a problem of the checkpoint */
			log_warn("checkpoint %s: preloading failed: %s", ps->cs->name, err->message);
	} else if (ps->released) {
		cache_drop(ps->d->cache, w);
	} else {
		p->w = w;
		ps->held++;
	}
	set_settle(ps);
}

/* The resolver of a preload: exactly this generation of the checkpoint, nothing else. */
static int lookup_self(void *ctx, const char *checkpoint, const struct wd_source **ret_src,
		       weightd_error *err)
{
	struct csource *cs = ctx;

	if (strcmp(checkpoint, cs->name) != 0)
		return wd_error_set(err, WEIGHTD_E_UNKNOWN_SOURCE, "no checkpoint named \"%s\"", checkpoint);
	*ret_src = cs->src;
	return 0;
}

/* Ask for every tensor of cs; the callbacks fill the pins. */
static void set_start(struct daemon *d, struct csource *cs)
{
	const struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	struct wd_resolver res = { cs, lookup_self };
	struct preload_set *ps = calloc(1, sizeof(*ps));
	size_t n = wd_source_tensor_count(cs->src);
	struct cache_pack *pack;

	if (ps)
		ps->pins = calloc(n ? n : 1, sizeof(*ps->pins));
	if (!ps || !ps->pins) {
		free(ps);
		log_err("checkpoint %s: out of memory starting its preload", cs->name);
		return;
	}
	ps->d = d;
	ps->cs = cs;
	catalog_source_ref(cs);
	ps->n = n;
	LIST_INSERT_HEAD(&d->preloads, ps, link);
	ps->pending = 1; /* held by this function until every tensor is asked for */
	log_info("checkpoint %s: preloading %zu tensors, %llu bytes", cs->name, n,
		 (unsigned long long)wd_source_bytes(cs->src));
	pack = cache_pack_begin(d->cache);
	for (size_t i = 0; i < n; i++) {
		const struct wd_tensor_info *t = wd_source_tensor(cs->src, i);
		struct wd_rnode node;
		struct wd_recipe rec = { &node, 1 };
		struct wd_plan *plan = NULL;
		struct weight *w = NULL;
		weightd_error err;
		int r;

		memset(&node, 0, sizeof(node));
		node.op = WD_OP_SOURCE;
		node.checkpoint = cs->name;
		node.tensor = t->name;
		node.sel.kind = WD_SEL_FULL;
		wd_error_clear(&err);
		ps->pins[i].set = ps;
		r = wd_recipe_preflight(&rec, &res, &lim, &plan, &err);
		if (r == 0)
			r = cache_request(d->cache, pack, plan, &cs, 1, on_ready, &ps->pins[i], &w,
					  &err);
		if (r == 1) {
			ps->pins[i].w = w;
			ps->held++;
		} else if (r == 0) {
			ps->pending++;
		} else {
			ps->failed++;
			log_warn("checkpoint %s: cannot preload %s: %s", cs->name, t->name, err.message);
		}
	}
	cache_pack_end(d->cache, pack); /* packs the checkpoint's tensors and starts filling */
	set_settle(ps);
}

/* Give the holds back; the weights become ordinary ones (or go, if their generation is gone). */
static void set_release(struct preload_set *ps)
{
	ps->released = true;
	for (size_t i = 0; i < ps->n; i++)
		if (ps->pins[i].w) {
			struct weight *w = ps->pins[i].w;
			ps->pins[i].w = NULL;
			cache_drop(ps->d->cache, w);
		}
	log_info("checkpoint %s: generation %llu no longer preloaded", ps->cs->name,
		 (unsigned long long)ps->cs->generation);
	if (ps->pending == 0) {
		LIST_REMOVE(ps, link);
		set_free(ps);
	}
}

void preload_sync(struct daemon *d)
{
	struct preload_set *ps, *next;

	for (ps = LIST_FIRST(&d->preloads); ps; ps = next) {
		struct csource *cur = catalog_find(d->catalog, ps->cs->name);

		next = LIST_NEXT(ps, link);
		if (ps->released)
			continue;
		if (cur != ps->cs || cur->state != CSOURCE_READY || !cur->conf->preload)
			set_release(ps);
	}
	for (size_t i = 0; i < catalog_count(d->catalog); i++) {
		struct csource *cs = catalog_at(d->catalog, i);
		bool have = false;

		if (cs->state != CSOURCE_READY || !cs->conf->preload)
			continue;
		for (ps = LIST_FIRST(&d->preloads); ps && !have; ps = LIST_NEXT(ps, link))
			have = !ps->released && ps->cs == cs;
		if (!have)
			set_start(d, cs);
	}
}

bool preload_progress(const struct daemon *d, const struct csource *cs, size_t *ret_held,
		      size_t *ret_total, size_t *ret_failed)
{
	const struct preload_set *ps;

	LIST_FOREACH(ps, &d->preloads, link)
	{
		if (ps->released || ps->cs != cs)
			continue;
		*ret_held = ps->held;
		*ret_total = ps->n;
		*ret_failed = ps->failed;
		return true;
	}
	return false;
}

void preload_free(struct daemon *d)
{
	struct preload_set *ps;

	while ((ps = LIST_FIRST(&d->preloads))) {
		LIST_REMOVE(ps, link);
		for (size_t i = 0; i < ps->n; i++)
			if (ps->pins[i].w)
				cache_drop(d->cache, ps->pins[i].w);
		set_free(ps);
	}
}
