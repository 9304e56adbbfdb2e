/* server.h - the listening socket, client sessions, and the requests they send. */
#ifndef WD_SERVER_H
#define WD_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "error.h"

struct daemon;
struct server;

/*
 * Create, bind and listen on cfg->socket_path (mode and group from cfg). A stale socket file left
 * by a dead daemon is replaced; a live one (connect succeeds) is an error. Returns the fd.
 */
int server_bind(const struct config *cfg, int *ret_fd, struct wd_error *err);

/* Serve on a listening socket (owned from now on). NULL on allocation failure. */
struct server *server_new(struct daemon *d, int listen_fd);
/* Disconnect every client and close the socket. Accepts NULL. */
void server_free(struct server *s);

size_t server_clients(const struct server *s);

/* Tell subscribed clients that `checkpoint` changed ("generation" or "removed"). */
void server_notify(struct server *s, const char *checkpoint, uint64_t generation, const char *what);

/* Answer a reload request (reload_request in reload.c) of client `session` (if it is still connected): err NULL = success. */
void server_reload_done(struct server *s, uint64_t session, uint64_t request,
			const struct wd_error *err);

#endif
