/* SPDX-License-Identifier: Apache-2.0 */
/* reload.h - SIGHUP and `weightctl reload`: re-read the configuration and apply it live; and the
 * rechecks of watched checkpoints whose files changed. */
#ifndef WD_RELOAD_H
#define WD_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct csource;
struct daemon;
struct reload;

/* What a reload did, one sentence each (as reload_done_fn's caller owns them): changes applied,
 * and warnings about what it could not apply (keys that need a restart, checkpoints refused or
 * not served). */
struct reload_report {
	char **changes;
	size_t n_changes;
	char **warnings;
	size_t n_warnings;
};

/* What a reload reports, on the main thread. changed: a checkpoint got a new generation
 * ("generation") or was removed ("removed"). done: the reload asked for by request `request` of
 * client `session` has been applied (err NULL, rep what it did) or has failed (rep NULL, err says
 * why); the client may be gone by then. */
typedef void reload_changed_fn(struct daemon *d, const struct csource *cs, const char *what);
/* applied: a reload (of the file, or a recheck) has just been swapped in. */
typedef void reload_applied_fn(struct daemon *d);
typedef void reload_done_fn(struct daemon *d, uint64_t session, uint64_t request,
			    const struct reload_report *rep, const weightd_error *err);

/* The reload state of daemon `d` (d->cfg, catalog, cache, pool must outlive its use), reporting
 * every changed checkpoint to `changed` and every applied reload to `applied` (NULL: to
 * nobody). */
struct reload *reload_new(struct daemon *d, reload_changed_fn *changed, reload_applied_fn *applied);

/*
 * Ask for a reload; done(d, session, request, err) is called once it has been applied or has
 * failed (done NULL: a signal, nobody to answer), before this returns when out of memory. The
 * config file and every new or changed checkpoint header are read by a worker (the main thread
 * never waits on disk); the main thread only swaps the result in. One reload runs at a time: one
 * asked for meanwhile runs after it, since the files may have changed after the running one read
 * them.
 *
 * Applied live: the checkpoints, budget, log_level (unless --log-level was given), max_clients,
 * max_frame (new connections), client_max_pending, client_max_queue, client_max_bytes,
 * client_max_weights. The others (socket, socket_mode, socket_group, shm_prefix, state_dir,
 * verify_adopted, workers) need a restart: a change to one is logged and reported as a
 * warning, naming the key, and the running value is kept.
 */
void reload_request(struct reload *r, reload_done_fn *done, uint64_t session, uint64_t request);

/* Recheck checkpoints `names[0..n)` (copied): their files changed. Only they are looked at, as
 * their sections stand; the file is not read. Runs like a reload, one at a time with the others;
 * a reload of the file asked for first runs first. */
void reload_recheck(struct reload *r, char *const *names, size_t n);

/* Forget waiting requests. A reload still on a worker then finishes into nothing: call this
 * after the pool has run every done() (pool_free). Accepts NULL. */
void reload_free(struct reload *r);

#endif
