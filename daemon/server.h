/* SPDX-License-Identifier: Apache-2.0 */
/* server.h - the listening socket and the sessions of the clients it accepted: their connection
 * limits, timeouts and lifetime. */
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

/* server_bind for the admin socket (cfg->admin_socket, admin_socket_mode, admin_socket_group);
 * its directory is made (0755) when it is missing. */
int server_bind_admin(const struct config *cfg, int *ret_fd, weightd_error *err);

/* Serve on a listening socket (owned from now on). NULL on allocation failure. */
struct server *server_new(struct daemon *d, int listen_fd);
/* Serve the admin socket too (fd owned from now on, closed by server_free): its peers are
 * root, weightd's user and admin_users/admin_groups, privileged; anyone else is refused. 0, or
 * -1 when out of memory. */
int server_listen_admin(struct server *s, int fd);
/* Disconnect every client and close the socket. Accepts NULL. */
void server_free(struct server *s);

/* Connected clients (also d->stats.clients, which the handlers and metrics read). */
size_t server_clients(const struct server *s);

/* Serve an accepted (or otherwise connected) socket as one of the engine socket's, fd owned from
 * now on: the per-uid and total connection limits apply. Tests that drive a socketpair use it. */
void server_add_client(struct server *s, int fd);

#endif
