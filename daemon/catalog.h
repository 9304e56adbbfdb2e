/* SPDX-License-Identifier: Apache-2.0 */
/* catalog.h - the checkpoint sources a daemon serves, their admission state and access rules. */
#ifndef WD_CATALOG_H
#define WD_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"
#include "remote.h"
#include "source.h"
#include "wd_limits.h"

struct peer; /* who is asking (peer.h) */

/* LOADING: a remote checkpoint whose headers are being read off the main loop (admit.c). */
enum csource_state { CSOURCE_READY, CSOURCE_FAILED, CSOURCE_REMOVED, CSOURCE_LOADING };

/*
 * What one checkpoint name has in the cache and has done, for status and metrics. Kept up to date
 * where bytes come and go (never by walking the weights), and shared by every generation of the
 * name (a reload that replaces the entry hands the counters on), so its series run on across
 * reloads. A weight counts under the first checkpoint it reads. Reference counted by the entries
 * of the name; main thread only.
 */
struct csource_stats {
	uint64_t resident_bytes;     /* finished weights made from it, in the cache */
	uint64_t idle_bytes;	     /* of those, the ones nobody references (on the LRU list) */
	uint64_t materialized_bytes; /* counter: bytes its finished materializations wrote */
	uint64_t errors;	     /* counter: failed materializations and refused requests */
	uint64_t clients;	     /* clients holding at least one of its weights */
	/* a remote checkpoint's counters of the generations it no longer serves (each generation
	 * has its own connection to the store, whose counters start at zero) */
	struct wd_remote_counters remote_done;
	unsigned refs;
};

/*
 * One named checkpoint. Reference counted: the catalog holds one reference while the entry is
 * current; every in-flight materialization and every weight made from it holds another, so a
 * reload that replaces or removes the entry never frees a source something still reads.
 */
struct csource {
	char *name;
	char *path;		   /* as it may be shown: a URL without its query */
	struct wd_source *src;     /* NULL when FAILED */
	enum csource_state state;
	weightd_error error;     /* why it FAILED */
	/* READY, but the files now on disk were refused by the last reload: why (code 0: they were
	 * not). This generation stays served meanwhile. */
	weightd_error refused;
	uint64_t generation;       /* 1, 2, ... bumped when a reload finds the files changed */
	struct source_conf *conf;  /* copy of its config section (allow lists, preload) */
	struct csource_stats *stats; /* never NULL; shared with the name's other generations */
	const struct catalog *catalog; /* what opened it (its limits and remote settings) */
	/* LOADING: its section as it was when admission began, which the admission thread reads
	 * (conf may be replaced by a reload meanwhile); NULL otherwise */
	struct source_conf *load_conf;
	/* a remote entry's failed admissions in a row (carried on to a new generation that fails
	 * too) and, when FAILED, when admit.c tries it again (wd_clock_ms; 0: not yet set) */
	uint32_t admit_failures;
	uint64_t retry_at_ms;
	bool failure_counted; /* FAILED, and admit.c has counted it */
	/* what a reload that replaced the previous generation with this one found (reload.c says
	 * it): CSOURCE_NEW_FILES its files changed, _LOCATION its section names other objects, or
	 * another way to reach them, _ADMITTED the previous one had failed to be admitted */
	enum { CSOURCE_NEW_FILES, CSOURCE_NEW_LOCATION, CSOURCE_NEW_ADMITTED } why_new;
	unsigned refs;
};

struct catalog;

/* The remote settings of checkpoint section sc as wd_source_open_at takes them (borrowing its
 * strings), with [daemon]'s remote timeouts from cfg (NULL: wd_remote's defaults). */
void catalog_remote_conf(const struct source_conf *sc, const struct config *cfg,
			 struct wd_source_remote_conf *ret);

/* Admit every source of cfg (header validation only). Failed sources are kept as FAILED with
 * their error and logged; the catalog itself only fails on allocation failure. A remote source
 * is left LOADING, unopened: admit.c opens it off the main loop. */
struct catalog *catalog_new(const struct config *cfg, const struct wd_limits *lim);
void catalog_free(struct catalog *c);

/*
 * Open the source of a LOADING entry as its section says (any thread: reads only what never
 * changes). 0 and *ret, or a negative code with err.
 */
int catalog_open(const struct csource *cs, struct wd_source **ret, weightd_error *err);
/*
 * Main thread: the admission of a LOADING entry ended; src (taken over, NULL on failure) makes
 * it READY, else err (NULL: out of memory) makes it FAILED, logged either way. False, and src
 * freed, when the entry is no longer LOADING (a reload replaced or removed it meanwhile).
 */
bool catalog_admitted(struct csource *cs, struct wd_source *src, const weightd_error *err);

/*
 * Main thread: admit a FAILED remote entry again (admit.c's retry): it becomes LOADING, with its
 * current section, for admit_start. False (nothing done) when it is not FAILED, not remote, or
 * out of memory.
 */
bool catalog_retry(struct csource *cs);

size_t catalog_count(const struct catalog *c);
struct csource *catalog_at(const struct catalog *c, size_t i);
/* The current entry by name (READY or FAILED), or NULL. */
struct csource *catalog_find(const struct catalog *c, const char *name);

/*
 * True when `peer` may read `cs`: a privileged peer (root, the daemon's own user) reads every
 * checkpoint; anyone else by its allow lists (no lists: anyone who can reach the socket). The one
 * access rule: listing, describing, status, events and units all ask it.
 */
bool catalog_allowed(const struct csource *cs, const struct peer *peer);

/*
 * Resolve a checkpoint name for a peer: 0 and *ret (a borrowed entry) or -WEIGHTD_E_UNKNOWN_SOURCE
 * (no such name, or one the peer may not read: the same code and words for both),
 * -WEIGHTD_E_BAD_CHECKPOINT (admission failed: err carries the admission error).
 */
int catalog_resolve(const struct catalog *c, const char *name, const struct peer *peer,
		    struct csource **ret, weightd_error *err);

/* Append to a -WEIGHTD_E_SOURCE_CHANGED error from reading `cs` what the operator can do about
 * it (reload, or watch the files); other errors are left as they are. */
void catalog_explain_changed(const struct csource *cs, weightd_error *err);

void catalog_source_ref(struct csource *cs);
void catalog_source_unref(struct csource *cs);

/*
 * Re-read sources from a new config: new names are admitted, missing ones become REMOVED (they
 * stop taking new requests), and a source whose files' identities changed gets a new generation
 * (a new wd_source; the old stays alive while referenced). When the changed files of a READY
 * source cannot be admitted, the entry stays READY on its current generation and records why in
 * `refused`: clients keep being served what was last good. In two steps, so the main thread never
 * reads checkpoint headers. prepare runs on a worker (one reload at a time): it only reads the
 * catalog, decides for each source of cfg whether the current entry stays (same path, same files)
 * or a new one is admitted, and admits those. apply runs on the main thread: it swaps the result
 * in, calls changed(cs, what, arg) for every entry that got a new generation ("generation") or was
 * removed ("removed"), and frees the plan. cfg must outlive the plan; catalog_plan_free drops an
 * unapplied one.
 */
struct catalog_plan;
struct catalog_plan *catalog_reload_prepare(const struct catalog *c, const struct config *cfg);
void catalog_reload_apply(struct catalog *c, struct catalog_plan *p,
			  void (*changed)(struct csource *cs, const char *what, void *arg), void *arg);
void catalog_plan_free(struct catalog_plan *p);
/* catalog_reload_prepare for the checkpoints `names[0..n)` only, as their sections in the
 * catalog stand (a watched checkpoint whose files changed): the others stay as they are. */
struct catalog_plan *catalog_recheck_prepare(const struct catalog *c, char *const *names, size_t n);

/* A remote checkpoint's traffic with its store since start: what the generations it no longer
 * serves counted until the reload that replaced them, and what its current one has counted
 * (every generation has its own connections). All zero for a local checkpoint. Main thread. */
void catalog_remote_counters(const struct csource *cs, struct wd_remote_counters *ret);

#endif
