/* SPDX-License-Identifier: Apache-2.0 */
/* server.h - the listening socket, client sessions, and the requests they send. */
#ifndef WD_SERVER_H
#define WD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"

struct daemon;
struct server;
struct uid_usage;

/*
 * Create, bind and listen on cfg->socket_path (mode and group from cfg). A stale socket file left
 * by a dead daemon is replaced; a live one (connect succeeds) is an error. Returns the fd.
 */
int server_bind(const struct config *cfg, int *ret_fd, weightd_error *err);

/* Serve on a listening socket (owned from now on). NULL on allocation failure. */
struct server *server_new(struct daemon *d, int listen_fd);
/* Disconnect every client and close the socket. Accepts NULL. */
void server_free(struct server *s);

size_t server_clients(const struct server *s);

/* Serve an accepted (or otherwise connected) socket, fd owned from now on: the per-uid and total
 * connection limits apply. accept() uses it; so do tests that drive a socketpair. */
void server_add_client(struct server *s, int fd);

/* Unit requests in flight over every connection of `uid` (linear in the clients connected). */
size_t server_uid_pending(const struct server *s, uid_t uid);
/* The per-uid limits on what pins daemon fds, as enforced: uid_max_segments and
 * uid_max_queue_fds cut to a quarter of the daemon's RLIMIT_NOFILE at start, uid_max_pending to
 * an eighth (together they leave a quarter of it to everyone else whatever one uid does). */
uint64_t server_uid_max_segments(const struct server *s);
uint64_t server_uid_max_queue_fds(const struct server *s);
uint64_t server_uid_max_pending(const struct server *s);

/* How many uids have requests being received (at least 1): the share of max_partial each may
 * count on when the total is reached. Linear in the uids connected; called only then. */
size_t server_uids_receiving(const struct server *s);

/* Monotonic nanoseconds (what the fair share of the main thread is counted in). */
uint64_t server_now_ns(void);
/* A request of uu's took `spent` ns of the main thread, ending at `now`: charge it (server.c). */
void server_charge(struct server *s, struct uid_usage *uu, uint64_t now, uint64_t spent);
/* False from an expensive request of uu's until the loop has polled its sockets again: none of
 * its sessions takes a request meanwhile (each looks again after the poll). */
bool server_polled(const struct server *s, const struct uid_usage *uu);
/* uu had an expensive request lately (what it sends waits for the pass's other sockets). */
bool server_uid_heavy(const struct uid_usage *uu, uint64_t now);
/* uu sent something at `now`: it counts as active (server_charge) from then. */
void server_touch(struct server *s, struct uid_usage *uu, uint64_t now);
/* How long uu's connections must still wait before their next request (0: none). */
uint64_t server_uid_wait_ns(const struct uid_usage *uu, uint64_t now);

/* A session was killed: take it off the list and free it later from the loop (session.c). */
struct session;
void server_session_dead(struct server *s, struct session *sess);

/* Tell subscribed clients that may read `cs` that it changed ("generation" or "removed"). */
struct csource;
void server_notify(struct server *s, const struct csource *cs, const char *what);

/* Answer a reload request (reload_request in reload.c) of client `session` (if it is still connected): err NULL = success. */
void server_reload_done(struct server *s, uint64_t session, uint64_t request,
			const weightd_error *err);

#endif
