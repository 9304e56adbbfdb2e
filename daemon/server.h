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

/*
 * Create, bind and listen on cfg->socket_path (mode and group from cfg). A stale socket file left
 * by a dead daemon is replaced; a live one (connect succeeds) is an error. Returns 0 with the
 * listening socket in *ret_fd (owned by the caller), or a negative error with *ret_fd untouched.
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
