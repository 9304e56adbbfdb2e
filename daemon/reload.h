/* SPDX-License-Identifier: Apache-2.0 */
/* reload.h - SIGHUP and `weightctl reload`: re-read the configuration and apply it live. */
#ifndef WD_RELOAD_H
#define WD_RELOAD_H

#include <stdint.h>

struct daemon;
struct reload;

/* The reload state of daemon `d` (d->cfg, catalog, cache, pool, server must outlive its use). */
struct reload *reload_new(struct daemon *d);

/*
 * Ask for a reload; session/request name the admin request to answer through
 * server_reload_done (session 0: a signal, nobody to answer). The config file and every new or
 * changed checkpoint header are read by a worker (the main thread never waits on disk); the main
 * thread only swaps the result in. One reload runs at a time: one asked for meanwhile runs after
 * it, since the files may have changed after the running one read them.
 *
 * Applied live: the checkpoints, budget, log_level (unless --log-level was given), max_clients,
 * max_frame (new connections), client_max_pending, client_max_queue, client_max_bytes,
 * client_max_weights. The others (socket, socket_mode, socket_group, shm_prefix, state_dir,
 * verify_adopted, workers) need a restart: a change to one is logged as a warning, naming the
 * key, and the running value is kept.
 */
void reload_request(struct reload *r, uint64_t session, uint64_t request);

/* Forget waiting requests. A reload still on a worker then finishes into nothing: call this
 * after the pool has run every done() (pool_free). Accepts NULL. */
void reload_free(struct reload *r);

#endif
