/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.h - the one daemon context every main-thread module shares. */
#ifndef WD_DAEMON_H
#define WD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "stats.h"

struct event_base;
struct catalog;
struct cache;
struct keymemo;
struct pool;
struct server;
struct session;
struct preload_set;
struct admit;

struct state_kept;

struct daemon {
	struct config *cfg;
	struct event_base *base;
	struct catalog *catalog;
	struct cache *cache;
	struct keymemo *keymemo;        /* recipe keys of plain source entries (keymemo.c) */
	struct pool *pool;
	struct server *server;
	/* the sessions connected and not yet killed: server.c keeps the list (it owns them), the
	 * handlers reach them through daemon_session and daemon_foreach_session */
	LIST_HEAD(, session) sessions;
	LIST_HEAD(, preload_set) preloads; /* the daemon's own holds (preload.c) */
	struct reload *reload;          /* reload.c */
	/* segments not re-adopted at start because processes mapped them: removed once they let
	 * go (state_kept_recheck, every second) */
	struct state_kept *kept;
	struct admit *admit;		/* admit.c: remote checkpoints being admitted */
	struct watch *watch;		/* watch.c; NULL without inotify */
	struct shmscan *shmscan;	/* foreign names under the /dev/shm prefix (shmscan.c); NULL
					 * with a segment_dir, where nobody else can make any */
	struct stats stats;
	uint64_t started_ns;            /* wd_clock_ns() at start */
	char instance[80];              /* shm prefix, shown to clients */
	uint64_t page_bytes;            /* page size segments get: 2 MiB on huge pages, else 4096 */
	int log_level_cli;              /* --log-level, or -1: the file's log_level decides */
	bool socket_activated;          /* the socket came from systemd (socket* keys unused) */
	bool stopping;
};

/* Milliseconds since start (monotonic). */
uint64_t daemon_uptime_ms(const struct daemon *d);

/* The budget cfg asks for: as configured, never more than the segments' filesystem (/dev/shm or
 * segment_dir) holds (logged when capped); 0 in the file means half of it. */
uint64_t daemon_effective_budget(const struct config *cfg);

/* Tell systemd READY=1 with a STATUS= line (checkpoints served, weights resident). */
void daemon_notify_ready(struct daemon *d);

/* Objects under the prefix weightd did not make, as the last look found them; asks for a new
 * look (off the main loop, rate-limited). O(1). */
uint64_t daemon_foreign_segments(struct daemon *d);

/* The connected (not yet killed) session with this id, or NULL. Linear in the clients. */
struct session *daemon_session(const struct daemon *d, uint64_t id);

/* Call fn on every connected session; fn may kill the one it is given. */
void daemon_foreach_session(struct daemon *d, void (*fn)(struct session *s, void *arg), void *arg);

#endif
