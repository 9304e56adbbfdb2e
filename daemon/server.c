/* server.c - the listening socket, accepting with back-off, and each session's socket I/O. */
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
#include "peer.h"
#include "session.h"
#include "wire.h"

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

static void update_write_event(struct session *s)
{
	if (s->dead)
		return;
	if (wd_outq_frames(s->out))
		event_add(s->ev_write, NULL);
	else
		event_del(s->ev_write);
}

/* Flush what the socket takes now; arm EV_WRITE only while something is left. */
static void session_flush(struct session *s)
{
	int r = wd_outq_flush(s->out, s->fd);

	if (r < 0) {
		session_kill(s, "write failed");
		return;
	}
	if (r == 0 && s->close_after_flush) {
		session_kill(s, "closed after its last reply");
		return;
	}
	update_write_event(s);
}

void session_send(struct session *s, const Weightd__Response *resp, const int *fds, size_t nfds)
{
	size_t len = weightd__response__get_packed_size(resp);
	uint8_t stackbuf[4096], *buf = stackbuf;
	int r;

	if (s->dead) {
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		return;
	}
	if (len > sizeof(stackbuf)) {
		buf = malloc(len);
		if (!buf) {
			for (size_t i = 0; i < nfds; i++)
				close(fds[i]);
			session_kill(s, "out of memory packing a reply");
			return;
		}
	}
	weightd__response__pack(resp, buf);
	r = wd_outq_push(s->out, buf, len, fds, nfds);
	if (buf != stackbuf)
		free(buf);
	if (r < 0) {
		session_kill(s, "its reply could not be queued");
		return;
	}
	if (wd_outq_bytes(s->out) > s->d->cfg->client_max_queue_bytes) {
		log_warn("client %llu (pid %d) is not reading its replies (%zu bytes queued); "
			 "disconnecting it", (unsigned long long)s->id, (int)s->peer.pid,
			 wd_outq_bytes(s->out));
		session_kill(s, "reply queue over its limit");
		return;
	}
	session_flush(s);
}

void session_send_error(struct session *s, uint64_t id, const struct wd_error *err)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Error pe;

	resp.id = id;
	wire_error(err, &pe);
	resp.error = &pe;
	session_send(s, &resp, NULL, 0);
}

/*
 * The weights a client holds: a dense array (cheap to walk when the client goes) indexed by an
 * open-addressing table keyed by weight id, so holding, finding and releasing stay O(1) however
 * many weights one client holds.
 */
static size_t held_hash(uint64_t id, size_t cap)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

/* Slot holding `id`, or the empty slot where it would go. */
static size_t held_slot(const struct session *s, uint64_t id)
{
	size_t i = held_hash(id, s->held_icap);

	while (s->held_index[i] && s->held[s->held_index[i] - 1].w->id != id)
		i = (i + 1) & (s->held_icap - 1);
	return i;
}

static int held_index_grow(struct session *s)
{
	size_t ncap = s->held_icap ? s->held_icap * 2 : 32;
	uint32_t *idx = calloc(ncap, sizeof(*idx));

	if (!idx || ncap > UINT32_MAX) {
		free(idx);
		return -WD_E_EXHAUSTED;
	}
	free(s->held_index);
	s->held_index = idx;
	s->held_icap = ncap;
	for (size_t k = 0; k < s->n_held; k++)
		s->held_index[held_slot(s, s->held[k].w->id)] = (uint32_t)k + 1;
	return 0;
}

/* Empty slot i and shift later members of its probe run back (linear probing deletion). */
static void held_index_delete(struct session *s, size_t i)
{
	size_t mask = s->held_icap - 1, j = i;

	s->held_index[i] = 0;
	for (;;) {
		size_t k;

		j = (j + 1) & mask;
		if (!s->held_index[j])
			return;
		k = held_hash(s->held[s->held_index[j] - 1].w->id, s->held_icap);
		/* leave j where it is if its home k lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		s->held_index[i] = s->held_index[j];
		s->held_index[j] = 0;
		i = j;
	}
}

struct held *session_find_held(struct session *s, uint64_t handle)
{
	size_t i;

	if (!s->held_icap)
		return NULL;
	i = held_slot(s, handle);
	return s->held_index[i] ? &s->held[s->held_index[i] - 1] : NULL;
}

int session_hold(struct session *s, struct weight *w)
{
	struct held *h = session_find_held(s, w->id);

	if (h) {
		h->count++;
		return 0;
	}
	if ((s->n_held + 1) * 2 > s->held_icap && held_index_grow(s) < 0)
		return -WD_E_EXHAUSTED;
	if (s->n_held == s->cap_held) {
		size_t ncap = s->cap_held ? s->cap_held * 2 : 16;
		struct held *nh = realloc(s->held, ncap * sizeof(*nh));
		if (!nh)
			return -WD_E_EXHAUSTED;
		s->held = nh;
		s->cap_held = ncap;
	}
	s->held[s->n_held].w = w;
	s->held[s->n_held].count = 1;
	s->held_index[held_slot(s, w->id)] = (uint32_t)s->n_held + 1;
	s->n_held++;
	s->held_bytes += w->nbytes;
	w->holders++;
	return 0;
}

bool session_release(struct session *s, struct weight *w)
{
	struct held *h = session_find_held(s, w->id);
	size_t pos, last;

	if (!h)
		return false;
	if (--h->count == 0) {
		pos = (size_t)(h - s->held);
		last = s->n_held - 1;
		held_index_delete(s, held_slot(s, w->id));
		if (pos != last) {
			s->held[pos] = s->held[last];
			s->held_index[held_slot(s, s->held[pos].w->id)] = (uint32_t)pos + 1;
		}
		s->n_held--;
		w->holders--;
		s->held_bytes -= w->nbytes;
	}
	cache_drop(s->d->cache, w);
	return true;
}

static void session_free(struct session *s)
{
	event_free(s->ev_read);
	event_free(s->ev_write);
	wd_inbuf_free(s->in);
	wd_outq_free(s->out);
	for (size_t i = 0; i < s->n_subs; i++)
		free(s->subs[i]);
	free(s->subs);
	free(s->held);
	free(s->held_index);
	peer_clear(&s->peer);
	free(s);
}

void session_kill(struct session *s, const char *why)
{
	struct server *srv = s->srv;

	if (s->dead)
		return;
	s->dead = true;
	log_debug("client %llu (pid %d uid %u): %s", (unsigned long long)s->id, (int)s->peer.pid,
		  (unsigned)s->peer.uid, why);
	event_del(s->ev_read);
	event_del(s->ev_write);
	close(s->fd);
	s->fd = -1;
	/* Everything it held goes back; mappings it made stay valid in its own process. */
	while (s->n_held) {
		struct held *h = &s->held[s->n_held - 1];
		struct weight *w = h->w;
		uint32_t n = h->count;
		w->holders--;
		s->n_held--;
		while (n--)
			cache_drop(s->d->cache, w);
	}
	s->held_bytes = 0;
	request_session_gone(s);
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

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	int r = wd_inbuf_read(s->in, s->fd);

	if (r == WD_FRAME_AGAIN)
		return;
	if (r == 0) {
		session_kill(s, "disconnected");
		return;
	}
	if (r < 0) {
		session_kill(s, "read failed or sent file descriptors");
		return;
	}
	for (;;) {
		struct wd_frame f;
		Weightd__Request *req;

		if (s->dead)
			return;
		r = wd_inbuf_next(s->in, &f);
		if (r == 0)
			break;
		if (r < 0) {
			log_warn("client %llu (pid %d): malformed frame; disconnecting it",
				 (unsigned long long)s->id, (int)s->peer.pid);
			session_kill(s, "malformed frame");
			return;
		}
		if (f.nfds) {
			wd_frame_close_fds(&f);
			session_kill(s, "sent file descriptors");
			return;
		}
		req = weightd__request__unpack(NULL, f.len, f.payload);
		if (!req) {
			log_warn("client %llu (pid %d): undecodable request; disconnecting it",
				 (unsigned long long)s->id, (int)s->peer.pid);
			session_kill(s, "undecodable request");
			return;
		}
		request_dispatch(s, req);
		weightd__request__free_unpacked(req, NULL);
	}
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	session_flush(arg);
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
		s = calloc(1, sizeof(*s));
		if (!s) {
			close(fd);
			continue;
		}
		s->srv = srv;
		s->d = srv->d;
		s->fd = fd;
		s->id = ++srv->next_id;
		if (peer_read(fd, &s->peer) < 0) {
			/* its groups decide what it may read: refuse it rather than guess */
			log_warn("refusing a client: no memory to read its groups");
			close(fd);
			free(s);
			continue;
		}
		s->privileged = s->peer.uid == 0 || s->peer.uid == geteuid();
		s->in = wd_inbuf_new(srv->d->cfg->max_frame_bytes, 0);
		s->out = wd_outq_new();
		s->ev_read = event_new(srv->d->base, fd, EV_READ | EV_PERSIST, on_read, s);
		s->ev_write = event_new(srv->d->base, fd, EV_WRITE | EV_PERSIST, on_write, s);
		if (!s->in || !s->out || !s->ev_read || !s->ev_write || event_add(s->ev_read, NULL)) {
			close(fd);
			s->fd = -1;
			session_free(s);
			continue;
		}
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
