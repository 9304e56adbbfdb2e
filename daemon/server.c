/* server.c - the listening socket, accepting with back-off, the list of sessions, and what is
 * said to all of them (events, reload answers). */
#include "server.h"

#include <errno.h>
#include <stdbool.h>
#include <event2/event.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "session.h"
#include "wire.h"

void (*server_reload_hook)(struct daemon *d, uint64_t session, uint64_t request);

struct server {
	struct daemon *d;
	int lfd;
	struct event *ev_accept;
	struct event *ev_backoff;
	struct event *ev_reap;
	struct session *sessions;
	struct session *dead;
	size_t n;
	uint64_t next_id;
	bool accept_paused;       /* out of descriptors: accept retried on a timer */
};

int server_bind(const struct config *cfg, int *ret_fd, struct wd_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (strlen(cfg->socket_path) >= sizeof(sa.sun_path))
		return wd_error_set(err, WD_E_INVALID, "socket path %s is longer than %zu bytes",
				    cfg->socket_path, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, cfg->socket_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wd_error_set(err, WD_E_IO, "socket: %s", strerror(errno));
	if (lstat(sa.sun_path, &st) == 0) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			close(fd);
			return wd_error_set(err, WD_E_INVALID, "%s exists and is not a socket",
					    sa.sun_path);
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return wd_error_set(err, WD_E_INVALID,
					    "another weightd is already listening on %s", sa.sun_path);
		}
		if (probe >= 0)
			close(probe);
		unlink(sa.sun_path); /* stale: left by a daemon that died */
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return wd_error_set(err, WD_E_IO, "bind %s: %s", sa.sun_path, strerror(e));
	}
	if (chmod(sa.sun_path, cfg->socket_mode) < 0 ||
	    (cfg->socket_group != (gid_t)-1 && chown(sa.sun_path, (uid_t)-1, cfg->socket_group) < 0) ||
	    listen(fd, SOMAXCONN) < 0) {
		int e = errno;
		close(fd);
		unlink(sa.sun_path);
		return wd_error_set(err, WD_E_IO, "setting up %s: %s", sa.sun_path, strerror(e));
	}
	*ret_fd = fd;
	return 0;
}

/* Free dead sessions outside of their own callbacks. */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	struct session *s;

	while ((s = srv->dead)) {
		srv->dead = s->dead_next;
		session_free(s);
	}
}

void server_session_dead(struct server *srv, struct session *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		srv->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	srv->n--;
	s->dead_next = srv->dead;
	srv->dead = s;
	event_active(srv->ev_reap, EV_TIMEOUT, 0);
}

static void on_backoff(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;

	event_add(srv->ev_accept, NULL);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct server *srv = arg;

	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct session *s;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* Out of descriptors: stop accepting for a moment instead of spinning
				 * (the pending connection would make the listener readable at once).
				 * Said once per episode, not every 100 ms. */
				struct timeval tv = { 0, 100000 };
				if (!srv->accept_paused)
					log_warn("accept: %s; pausing new connections (%zu clients; "
						 "retrying every 100 ms)", strerror(errno), srv->n);
				srv->accept_paused = true;
				event_del(srv->ev_accept);
				evtimer_add(srv->ev_backoff, &tv);
			}
			return;
		}
		if (srv->accept_paused) {
			log_notice("accepting connections again (%zu clients)", srv->n);
			srv->accept_paused = false;
		}
		if (srv->n >= srv->d->cfg->max_clients) {
			log_warn("refusing a connection: %zu clients connected (max_clients)", srv->n);
			close(fd);
			continue;
		}
		s = session_new(srv, srv->d, fd, ++srv->next_id);
		if (!s)
			continue;
		s->next = srv->sessions;
		if (srv->sessions)
			srv->sessions->prev = s;
		srv->sessions = s;
		srv->n++;
		log_debug("client %llu connected: pid %d uid %u gid %u", (unsigned long long)s->id,
			  (int)s->peer.pid, (unsigned)s->peer.uid, (unsigned)s->peer.gid);
	}
}

struct server *server_new(struct daemon *d, int listen_fd)
{
	struct server *srv = calloc(1, sizeof(*srv));

	if (!srv) {
		close(listen_fd);
		return NULL;
	}
	srv->d = d;
	srv->lfd = listen_fd;
	srv->ev_accept = event_new(d->base, listen_fd, EV_READ | EV_PERSIST, on_accept, srv);
	srv->ev_backoff = evtimer_new(d->base, on_backoff, srv);
	srv->ev_reap = event_new(d->base, -1, 0, on_reap, srv);
	if (!srv->ev_accept || !srv->ev_backoff || !srv->ev_reap || event_add(srv->ev_accept, NULL)) {
		server_free(srv);
		return NULL;
	}
	return srv;
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	while (srv->sessions)
		session_kill(srv->sessions, "daemon stopping");
	on_reap(-1, 0, srv);
	if (srv->ev_accept)
		event_free(srv->ev_accept);
	if (srv->ev_backoff)
		event_free(srv->ev_backoff);
	if (srv->ev_reap)
		event_free(srv->ev_reap);
	close(srv->lfd);
	free(srv);
}

size_t server_clients(const struct server *srv)
{
	return srv->n;
}

void server_notify(struct server *srv, const char *checkpoint, uint64_t generation, const char *what)
{
	for (struct session *s = srv->sessions; s; s = s->next) {
		bool want = false;

		for (size_t i = 0; i < s->n_subs && !want; i++)
			want = strcmp(s->subs[i], "*") == 0 || strcmp(s->subs[i], checkpoint) == 0;
		if (want) {
			Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
			Weightd__Event ev = WEIGHTD__EVENT__INIT;

			ev.checkpoint = (char *)checkpoint;
			ev.generation = generation;
			ev.what = (char *)what;
			resp.body_case = WEIGHTD__RESPONSE__BODY_EVENT;
			resp.event = &ev;
			session_send(s, &resp, NULL, 0);
		}
	}
}

void server_reload_done(struct server *srv, uint64_t session, uint64_t request,
			const struct wd_error *err)
{
	for (struct session *s = srv->sessions; s; s = s->next) {
		if (s->id != session)
			continue;
		if (err) {
			session_send_error(s, request, err);
		} else {
			Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
			Weightd__Empty empty = WEIGHTD__EMPTY__INIT;

			resp.id = request;
			resp.body_case = WEIGHTD__RESPONSE__BODY_RELOAD;
			resp.reload = &empty;
			session_send(s, &resp, NULL, 0);
		}
		return;
	}
}
