/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - the listening socket, accepting with back-off, the per-uid and total connection
 * limits, the list of sessions, their timeouts (a periodic tick) and their lifetime: what a
 * killed one holds goes back, and it is freed from the loop. */
#include "server.h"

#include <errno.h>
#include <event2/event.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "group.h"
#include "holds.h"
#include "log.h"
#include "peer.h"
#include "request.h"
#include "session.h"
#include "uid.h"

struct server {
	struct daemon *d;
	int lfd;
	int admin_lfd;		  /* the admin socket, or -1 (single_socket) */
	struct event *ev_accept;
	struct event *ev_admin_accept;
	struct event *ev_backoff;
	struct event *ev_reap;
	SLIST_HEAD(, session) dead;
	struct uid_table *uids;
	struct event *ev_tick; /* timeouts and paused sessions */
	size_t n;
	uint64_t next_id;
	bool accept_paused; /* out of descriptors: accept retried on a timer */
};

/*
 * The socket could not be given socket_group: only a member of the group (or root) may chown a
 * file to it, and that is what the fix is about. Names the socket, the user, the group and what
 * to do.
 */
static int socket_group_error(const char *path, gid_t gid, int e, weightd_error *err)
{
	const struct passwd *pw = getpwuid(geteuid());
	char user[64], group[64];
	const struct group *gr;

	snprintf(user, sizeof(user), "%s", pw ? pw->pw_name : "");
	if (!user[0])
		snprintf(user, sizeof(user), "%u", (unsigned)geteuid());
	gr = getgrgid(gid);
	snprintf(group, sizeof(group), "%s", gr ? gr->gr_name : "");
	if (!group[0])
		snprintf(group, sizeof(group), "%u", (unsigned)gid);
	if (e == EPERM && !wd_group_member(gid))
		return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				    "setting up %s: cannot give it socket_group %s: weightd runs as user "
				    "%s (uid %u), which is not a member of %s; add it to the group "
				    "(usermod -aG %s %s) and restart weightd, or unset socket_group",
				    path, group, user, (unsigned)geteuid(), group, group, user);
	return wd_error_set(err, WEIGHTD_E_IO,
			    "setting up %s: cannot give it socket_group %s as user %s (uid %u): %s",
			    path, group, user, (unsigned)geteuid(), strerror(e));
}

/* Bind and listen on `path` with `mode` and `group` ((gid_t)-1: as created). */
static int bind_path(const char *path, mode_t mode, gid_t group, int *ret_fd, weightd_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "socket path %s is longer than %zu bytes",
				    path, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wd_error_set(err, WEIGHTD_E_IO, "socket: %s", strerror(errno));
	if (lstat(sa.sun_path, &st) == 0) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			close(fd);
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s exists and is not a socket",
					    sa.sun_path);
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "another weightd is already listening on %s", sa.sun_path);
		}
		if (probe >= 0)
			close(probe);
		unlink(sa.sun_path); /* stale: left by a daemon that died */
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return wd_error_set(err, WEIGHTD_E_IO, "bind %s: %s", sa.sun_path, strerror(e));
	}
	if (group != (gid_t)-1 && chown(sa.sun_path, (uid_t)-1, group) < 0) {
		int e = errno;

		close(fd);
		unlink(sa.sun_path);
		return socket_group_error(sa.sun_path, group, e, err);
	}
	if (chmod(sa.sun_path, mode) < 0 || listen(fd, SOMAXCONN) < 0) {
		int e = errno;
		close(fd);
		unlink(sa.sun_path);
		return wd_error_set(err, WEIGHTD_E_IO, "setting up %s: %s", sa.sun_path, strerror(e));
	}
	*ret_fd = fd;
	return 0;
}

int server_bind(const struct config *cfg, int *ret_fd, weightd_error *err)
{
	return bind_path(cfg->socket_path, cfg->socket_mode, cfg->socket_group, ret_fd, err);
}

int server_bind_admin(const struct config *cfg, int *ret_fd, weightd_error *err)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	/* its directory is what engine pods must not mount: made here when missing, never
	 * opened up when it exists (the operator's modes stand) */
	snprintf(dir, sizeof(dir), "%s", cfg->admin_socket);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return wd_error_set(err, WEIGHTD_E_IO,
					    "making %s for the admin socket: %s (set `admin_socket` "
					    "to a path this user may create, or `single_socket = "
					    "yes` for one socket)",
					    dir, strerror(errno));
	}
	int r = bind_path(cfg->admin_socket, cfg->admin_socket_mode, cfg->admin_socket_group,
			  ret_fd, err);

	if (r < 0 && err) {
		wd_error_prefix(err, "admin socket");
		if (strlen(err->message) + 90 < sizeof(err->message))
			strcat(err->message, " (set `admin_socket` to a path this user may create, or "
					     "`single_socket = yes` for one socket)");
	}
	return r;
}

/* Free dead sessions outside of their own callbacks. */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	struct session *s;

	size_t freed = 0;

	while ((s = SLIST_FIRST(&srv->dead))) {
		SLIST_REMOVE_HEAD(&srv->dead, dead_link);
		freed += s->partial_peak;
		holds_free(&s->holds);
		session_free(s);
	}
	/* Large frame buffers come back from the heap's middle, which malloc keeps: hand them
	 * back, so memory a client made us take returns when it goes. */
	if (freed >= (1u << 20))
		malloc_trim(0);
}

/* A session's socket is closed: what it holds goes back (mappings it made stay valid in its own
 * process), its requests in flight are orphaned, and it is freed from the loop, outside its own
 * callbacks. */
static void on_session_dead(struct session *s)
{
	struct server *srv = s->owner;

	holds_clear(&s->holds);
	request_session_gone(s);
	uid_put(s->uu);
	s->uu = NULL;
	LIST_REMOVE(s, link);
	srv->n--;
	srv->d->stats.clients = srv->n;
	SLIST_INSERT_HEAD(&srv->dead, s, dead_link);
	event_active(srv->ev_reap, EV_TIMEOUT, 0);
}

static void on_backoff(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;

	event_add(srv->ev_accept, NULL);
	if (srv->ev_admin_accept)
		event_add(srv->ev_admin_accept, NULL);
}

static void add_client(struct server *srv, int fd, bool admin_socket);

static void accept_on(struct server *srv, evutil_socket_t lfd, bool admin_socket)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

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
				if (srv->ev_admin_accept)
					event_del(srv->ev_admin_accept);
				evtimer_add(srv->ev_backoff, &tv);
			}
			return;
		}
		if (srv->accept_paused) {
			log_notice("accepting connections again (%zu clients)", srv->n);
			srv->accept_paused = false;
		}
		add_client(srv, fd, admin_socket);
	}
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	accept_on(arg, lfd, false);
}

static void on_admin_accept(evutil_socket_t lfd, short what, void *arg)
{
	accept_on(arg, lfd, true);
}

static const struct session_ops session_ops = {
	.dispatch = request_dispatch,
	.dead = on_session_dead,
};

/*
 * Connections are capped in total (max_clients) and per uid (max_clients_per_uid), so one uid
 * cannot take every slot. Root and the daemon's own user are exempt from the per-uid cap and have
 * ADMIN_RESERVE slots beyond max_clients, so an operator can always get in. A refused client is
 * told why (an error frame) before it is closed.
 */
#define ADMIN_RESERVE 16

/*
 * The slots are full and `s` (unprivileged, its uid counted) has just come: the oldest idle
 * connection of the uid with the most connections, if that uid has more than s's, gives way to
 * it (told why, and closed), so uids holding many slots cannot keep a new uid out until their
 * idle_timeout. Root's and the daemon's own connections never give way. Linear in the sessions,
 * only when the slots are full. True when one gave way.
 */
static bool make_room(struct server *srv, struct session *s)
{
	struct session *o, *pick = NULL;

	if (s->uu->conns > srv->d->cfg->max_clients_per_uid)
		return false; /* refused for its own uid's limit anyway */
	LIST_FOREACH(o, &srv->d->sessions, link)
	{
		if (o == s || o->peer.privileged || !o->uu || o->uu->conns <= s->uu->conns ||
		    !session_idle(o))
			continue;
		if (!pick || o->uu->conns > pick->uu->conns ||
		    (o->uu == pick->uu && o->active_ms < pick->active_ms))
			pick = o;
	}
	if (!pick)
		return false;
	srv->d->stats.clients_refused++;
	log_info("client %llu (pid %d uid %u): idle, and its uid has the most connections (%u); "
		 "closing it for a new client of uid %u",
		 (unsigned long long)pick->id, (int)pick->peer.pid, (unsigned)pick->peer.uid,
		 pick->uu->conns, (unsigned)s->peer.uid);
	session_refuse(
		pick, WEIGHTD_E_LIMIT_EXCEEDED,
		"closed: all %u connection slots are taken (max_clients), uid %u has the most "
		"(%u), and this one was its oldest idle connection: it gave way to another uid",
		srv->d->cfg->max_clients, (unsigned)pick->peer.uid, pick->uu->conns);
	return true;
}

static bool listed(const struct peer *p, const struct config *cfg)
{
	for (size_t i = 0; i < cfg->n_admin_uids; i++)
		if (cfg->admin_uids[i] == p->uid)
			return true;
	for (size_t i = 0; i < cfg->n_admin_gids; i++) {
		if (cfg->admin_gids[i] == p->gid)
			return true;
		for (size_t j = 0; j < p->n_groups; j++)
			if (cfg->admin_gids[i] == p->groups[j])
				return true;
	}
	return false;
}

/*
 * What a peer may do follows the socket it came through. single_socket: as peer_read says (root
 * and weightd's user administer). Otherwise the engine socket makes everyone an ordinary client,
 * root included (access lists, shares, no admin requests), and the admin socket serves root,
 * weightd's user and admin_users/admin_groups, all privileged; anyone else there is refused.
 */
static void decide_role(const struct config *cfg, struct peer *p, bool admin_socket)
{
	p->admin_socket = admin_socket;
	if (cfg->single_socket)
		p->admin = p->privileged;
	else if (!admin_socket)
		p->privileged = p->admin = false;
	else
		p->privileged = p->admin = p->privileged || listed(p, cfg);
}

void server_add_client(struct server *srv, int fd)
{
	add_client(srv, fd, false);
}

static void add_client(struct server *srv, int fd, bool admin_socket)
{
	const struct config *cfg = srv->d->cfg;
	struct session *s = session_new(&session_ops, srv, srv->d, fd, ++srv->next_id);

	if (!s)
		return;
	decide_role(cfg, &s->peer, admin_socket);
	s->uu = uid_get(srv->uids, s->peer.uid, s->peer.privileged);
	if (!s->uu) {
		close(s->fd);
		session_free(s);
		return;
	}
	holds_init(&s->holds, srv->d->cache, cfg, s->uu, s->id, s->peer.privileged);
	LIST_INSERT_HEAD(&srv->d->sessions, s, link);
	srv->n++;
	srv->d->stats.clients = srv->n;
	log_debug("client %llu connected: pid %d uid %u gid %u", (unsigned long long)s->id,
		  (int)s->peer.pid, (unsigned)s->peer.uid, (unsigned)s->peer.gid);
	if (srv->n > cfg->max_clients + (s->peer.privileged ? ADMIN_RESERVE : 0) &&
	    (s->peer.privileged || !make_room(srv, s))) {
		srv->d->stats.clients_refused++;
		session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED,
			       "limit exceeded: %zu clients are connected (max_clients "
			       "%u)",
			       srv->n - 1, cfg->max_clients);
	} else if (!s->peer.privileged && s->uu->conns > cfg->max_clients_per_uid) {
		srv->d->stats.clients_refused++;
		session_refuse(s, WEIGHTD_E_LIMIT_EXCEEDED, "limit exceeded: uid %u has %u connections "
			       "(max_clients_per_uid %u)", (unsigned)s->peer.uid, s->uu->conns - 1,
			       cfg->max_clients_per_uid);
	} else if (admin_socket && !s->peer.admin) {
		srv->d->stats.clients_refused++;
		session_refuse(s, WEIGHTD_E_PERMISSION_DENIED,
			       "permission denied: the admin socket %s serves root, weightd's user, "
			       "admin_users and admin_groups only, and uid %u (gid %u) is none of them; "
			       "connect to the engine socket %s instead",
			       cfg->admin_socket, (unsigned)s->peer.uid, (unsigned)s->peer.gid,
			       cfg->socket_path);
	}
}

/* Every session gets a look: timeouts, and sessions paused for their uid's fds. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	uint64_t now = wd_clock_ms();
	struct session *s, *next;

	for (s = LIST_FIRST(&srv->d->sessions); s; s = next) {
		next = LIST_NEXT(s, link); /* s may die (it leaves the list) */
		session_tick(s, now);
	}
	uid_sweep(srv->uids);
}

/* Often enough for the shortest timeout to be honoured within a quarter of itself. */
static struct timeval tick_interval(const struct config *cfg)
{
	uint64_t ms = 1000;

	if (cfg->first_request_timeout_ms && cfg->first_request_timeout_ms / 4 < ms)
		ms = cfg->first_request_timeout_ms / 4;
	if (cfg->idle_timeout_ms && cfg->idle_timeout_ms / 4 < ms)
		ms = cfg->idle_timeout_ms / 4;
	if (cfg->frame_timeout_ms && cfg->frame_timeout_ms / 4 < ms)
		ms = cfg->frame_timeout_ms / 4;
	if (ms < 20)
		ms = 20;
	return (struct timeval){ (time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000) };
}

struct server *server_new(struct daemon *d, int listen_fd)
{
	struct server *srv = calloc(1, sizeof(*srv));
	struct timeval tick;

	if (!srv) {
		close(listen_fd);
		return NULL;
	}
	srv->d = d;
	srv->lfd = listen_fd;
	srv->admin_lfd = -1;
	srv->uids = uid_table_new(d->base, d->cfg);
	srv->ev_accept = event_new(d->base, listen_fd, EV_READ | EV_PERSIST, on_accept, srv);
	srv->ev_backoff = evtimer_new(d->base, on_backoff, srv);
	srv->ev_reap = event_new(d->base, -1, 0, on_reap, srv);
	srv->ev_tick = event_new(d->base, -1, EV_PERSIST, on_tick, srv);
	tick = tick_interval(d->cfg);
	if (!srv->uids || !srv->ev_accept || !srv->ev_backoff || !srv->ev_reap || !srv->ev_tick ||
	    event_add(srv->ev_accept, NULL) || event_add(srv->ev_tick, &tick)) {
		server_free(srv);
		return NULL;
	}
	return srv;
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	while (!LIST_EMPTY(&srv->d->sessions))
		session_kill(LIST_FIRST(&srv->d->sessions), "daemon stopping");
	on_reap(-1, 0, srv);
	uid_table_free(srv->uids);
	if (srv->ev_accept)
		event_free(srv->ev_accept);
	if (srv->ev_admin_accept)
		event_free(srv->ev_admin_accept);
	if (srv->admin_lfd >= 0)
		close(srv->admin_lfd);
	if (srv->ev_backoff)
		event_free(srv->ev_backoff);
	if (srv->ev_reap)
		event_free(srv->ev_reap);
	if (srv->ev_tick)
		event_free(srv->ev_tick);
	close(srv->lfd);
	free(srv);
}

int server_listen_admin(struct server *srv, int fd)
{
	srv->admin_lfd = fd;
	srv->ev_admin_accept =
		event_new(srv->d->base, fd, EV_READ | EV_PERSIST, on_admin_accept, srv);
	if (!srv->ev_admin_accept || event_add(srv->ev_admin_accept, NULL) < 0)
		return -1;
	return 0;
}

size_t server_clients(const struct server *srv)
{
	return srv->n;
}
