/* SPDX-License-Identifier: Apache-2.0 */
/* watch.c - inotify on the files of checkpoints with `watch = yes`, debounced into reloads. */
#include "watch.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "clock.h"
#include "daemon.h"
#include "log.h"

/* Every way a file can be replaced or changed: written (a copy in progress: each write pushes
 * the reload back), closed after writing, renamed over or away, created, removed, and the
 * watched directory itself moved or removed. */
#define WATCH_MASK                                                                          \
	(IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | \
	 IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
#define WATCH_MIN_DELAY_MS 10

/* A watched checkpoint: its changes not reloaded yet. */
struct watched {
	char *name;
	uint64_t delay_ms;
	uint64_t last_ms; /* when its files last changed */
	bool dirty;
};

/* One inotify watch on behalf of one checkpoint. */
struct wentry {
	int wd;
	size_t ck;  /* index in watch.cks */
	char *base; /* only events about this name count; NULL: every event of the directory */
};

struct watch {
	struct daemon *d;
	watch_fire_fn *fire;
	int fd;
	struct event *ev, *timer;
	struct watched *cks;
	size_t n_cks;
	struct wentry *e;
	size_t n_e;
};

static uint64_t now_ms(void)
{
	return wd_clock_ns() / 1000000;
}

static void free_entries(struct watched *cks, size_t n_cks, struct wentry *e, size_t n_e)
{
	for (size_t i = 0; i < n_cks; i++)
		free(cks[i].name);
	for (size_t i = 0; i < n_e; i++)
		free(e[i].base);
	free(cks);
	free(e);
}

/* Arm the timer for the first dirty checkpoint to become quiet. */
static void arm(struct watch *w)
{
	uint64_t now = now_ms(), next = UINT64_MAX;

	for (size_t i = 0; i < w->n_cks; i++) {
		uint64_t due;

		if (!w->cks[i].dirty)
			continue;
		due = w->cks[i].last_ms + w->cks[i].delay_ms;
		if (due < next)
			next = due;
	}
	if (next == UINT64_MAX) {
		evtimer_del(w->timer);
	} else {
		uint64_t wait = next > now ? next - now : 0;
		struct timeval tv = { (time_t)(wait / 1000), (suseconds_t)(wait % 1000 * 1000) };

		evtimer_add(w->timer, &tv);
	}
}

static void mark(struct watch *w, size_t ck, uint64_t now)
{
	if (!w->cks[ck].dirty)
		log_info("checkpoint %s: its files changed; reloading it once they have been left "
			 "alone for %llu ms",
			 w->cks[ck].name, (unsigned long long)w->cks[ck].delay_ms);
	w->cks[ck].dirty = true;
	w->cks[ck].last_ms = now;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct watch *w = arg;
	uint64_t now = now_ms();
	char **names = calloc(w->n_cks ? w->n_cks : 1, sizeof(*names));
	size_t n = 0;

	(void)fd;
	(void)what;
	if (!names) {
		log_err("watch: out of memory; trying again later");
		arm(w);
		return;
	}
	for (size_t i = 0; i < w->n_cks; i++) {
		if (!w->cks[i].dirty || now < w->cks[i].last_ms + w->cks[i].delay_ms)
			continue;
		w->cks[i].dirty = false;
		names[n++] = w->cks[i].name;
	}
	if (n)
		w->fire(w->d, names, n);
	free(names);
	arm(w);
}

static void on_events(evutil_socket_t fd, short what, void *arg)
{
	struct watch *w = arg;
	char buf[16 * (sizeof(struct inotify_event) + NAME_MAX + 1)]
		__attribute__((aligned(__alignof__(struct inotify_event))));
	uint64_t now = now_ms();
	bool any = false;

	(void)what;
	for (;;) {
		ssize_t len = read(fd, buf, sizeof(buf));

		if (len < 0 && errno == EINTR)
			continue;
		if (len <= 0)
			break;
		for (char *p = buf; p < buf + len;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			p += sizeof(*ev) + ev->len;
			if (ev->mask & IN_Q_OVERFLOW) {
				/* events were lost: any watched file may have changed */
				for (size_t i = 0; i < w->n_cks; i++)
					mark(w, i, now);
				any = true;
				continue;
			}
			for (size_t i = 0; i < w->n_e; i++) {
				const struct wentry *e = &w->e[i];

				if (e->wd != ev->wd || (ev->mask & IN_IGNORED))
					continue;
				if (e->base && (!ev->len || strcmp(ev->name, e->base) != 0))
					continue;
				mark(w, e->ck, now);
				any = true;
			}
		}
	}
	if (any)
		arm(w);
}

struct watch *watch_new(struct daemon *d, watch_fire_fn *fire)
{
	struct watch *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->d = d;
	w->fire = fire;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		log_warn("watch: inotify is not available (%s); `watch = yes` has no effect",
			 strerror(errno));
		free(w);
		return NULL;
	}
	w->ev = event_new(d->base, w->fd, EV_READ | EV_PERSIST, on_events, w);
	w->timer = evtimer_new(d->base, on_timer, w);
	if (!w->ev || !w->timer || event_add(w->ev, NULL) < 0) {
		watch_free(w);
		return NULL;
	}
	return w;
}

/* Add a watch on `path` for checkpoint ck; false only when out of memory. */
static bool add(struct watch *w, struct wentry **e, size_t *n, size_t *cap, const char *path,
		size_t ck, const char *base, const char *name)
{
	int wd = inotify_add_watch(w->fd, path, WATCH_MASK);

	if (wd < 0) {
		log_warn("checkpoint %s: cannot watch %s: %s", name, path, strerror(errno));
		return true;
	}
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 8;
		struct wentry *ne = realloc(*e, ncap * sizeof(*ne));

		if (!ne)
			return false;
		*e = ne;
		*cap = ncap;
	}
	(*e)[*n].wd = wd;
	(*e)[*n].ck = ck;
	(*e)[*n].base = base ? strdup(base) : NULL;
	if (base && !(*e)[*n].base)
		return false;
	(*n)++;
	return true;
}

void watch_sync(struct watch *w)
{
	struct catalog *c;
	struct watched *cks = NULL;
	struct wentry *e = NULL;
	size_t n_cks = 0, n_e = 0, cap = 0;

	if (!w)
		return;
	c = w->d->catalog;
	cks = calloc(catalog_count(c) + 1, sizeof(*cks));
	if (!cks)
		goto oom;
	/* The new watches first: an inode watched before keeps its watch (and no event is lost
	 * between taking one down and putting it up again). */
	for (size_t i = 0; i < catalog_count(c); i++) {
		const struct csource *cs = catalog_at(c, i);
		char *dir, *slash;
		struct stat st;
		bool ok;

		if (!cs->conf->watch || cs->state == CSOURCE_REMOVED)
			continue;
		cks[n_cks].name = strdup(cs->name);
		if (!cks[n_cks].name)
			goto oom;
		cks[n_cks].delay_ms = cs->conf->watch_delay_ms < WATCH_MIN_DELAY_MS ?
					      WATCH_MIN_DELAY_MS :
					      cs->conf->watch_delay_ms;
		for (size_t j = 0; j < w->n_cks; j++)
			if (strcmp(w->cks[j].name, cs->name) == 0 && w->cks[j].dirty) {
				cks[n_cks].dirty = true; /* still to be reloaded */
				cks[n_cks].last_ms = w->cks[j].last_ms;
			}
		/* its parent sees it replaced by rename (a file or a whole directory) */
		dir = strdup(cs->path);
		if (!dir)
			goto oom;
		slash = strrchr(dir, '/');
		if (slash == dir)
			slash[1] = '\0';
		else if (slash)
			*slash = '\0';
		ok = add(w, &e, &n_e, &cap, dir, n_cks,
			 slash ? cs->path + (slash - dir) + 1 : cs->path, cs->name);
		free(dir);
		/* a sharded checkpoint's directory sees its shards and index replaced or written */
		if (ok && stat(cs->path, &st) == 0 && S_ISDIR(st.st_mode))
			ok = add(w, &e, &n_e, &cap, cs->path, n_cks, NULL, cs->name);
		if (!ok)
			goto oom;
		n_cks++;
	}
	/* then the watches nothing needs any more */
	for (size_t i = 0; i < w->n_e; i++) {
		bool kept = false;

		for (size_t j = 0; j < n_e && !kept; j++)
			kept = e[j].wd == w->e[i].wd;
		for (size_t j = 0; j < i && !kept; j++)
			kept = w->e[j].wd == w->e[i].wd; /* taken down already */
		if (!kept)
			inotify_rm_watch(w->fd, w->e[i].wd);
	}
	free_entries(w->cks, w->n_cks, w->e, w->n_e);
	w->cks = cks;
	w->n_cks = n_cks;
	w->e = e;
	w->n_e = n_e;
	arm(w);
	return;
oom:
	log_err("watch: out of memory; the watches stay as they were");
	free_entries(cks, n_cks + (cks && cks[n_cks].name ? 1 : 0), e, n_e);
}

void watch_free(struct watch *w)
{
	if (!w)
		return;
	if (w->ev)
		event_free(w->ev);
	if (w->timer)
		event_free(w->timer);
	if (w->fd >= 0)
		close(w->fd);
	free_entries(w->cks, w->n_cks, w->e, w->n_e);
	free(w);
}
