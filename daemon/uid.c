/* SPDX-License-Identifier: Apache-2.0 */
/* uid.c - per-uid accounting: one record per connected uid, the per-uid fd limits as shares of
 * the daemon's RLIMIT_NOFILE between the uids connected, and the fair share of the main thread
 * between uids. */
#include "uid.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "log.h"

struct uid_table {
	struct event_base *base;
	const struct config *cfg;
	LIST_HEAD(, uid_usage) uids; /* one per uid with a connection, or still owing its share */
	uint64_t busy_ns;	     /* time spent in expensive requests, all uids, ever */
	uint64_t nofile;  /* RLIMIT_NOFILE at start: the per-uid fd limits are shares of it */
	uint32_t sharing; /* uids with a connection that take a share (not exempt ones) */
};

/*
 * What one uid can make the daemon keep open: two fds per segment it holds a weight in, the
 * segment's own and the connection's description of it, the one its kernel locks go on
 * (uid_max_segments), the fds queued in its replies (uid_max_queue_fds), and about two per unit
 * request in flight (the segment being filled, writable and read-only: uid_max_pending).
 *
 * Half of the daemon's RLIMIT_NOFILE (N, as it was at start) is shared by the uids connected
 * now, one share each plus one share kept for a uid not yet seen: with n uids connected, each
 * may keep open N/2/(n+1) fds, half of them for segments (two fds each), a quarter for queued fds
 * and a quarter for requests in flight (two fds each). A uid alone thus may have N/16 segments,
 * N/16 queued fds and N/32 requests; n uids that come together keep open at most n/(n+1) of the half, leaving a
 * share for the next uid and the other half for connections, checkpoint files, root and the
 * daemon's own uid (which take no share and are not limited by it). A uid that holds more than
 * its share when others come keeps it, but takes no more until it is back under. The configured
 * value caps each share. Uids that come one after another, each filling its share before the
 * next, keep open at most N/2 * (1/2 + 1/3 + ... + 1/(k+1)) for k of them (0.64 N for 4).
 */
#define SHARE_SEGMENTS	8u /* N over this, over (n + 1), for n uids sharing */
#define SHARE_QUEUE_FDS 8u
#define SHARE_PENDING	16u
static uint64_t nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return (uint64_t)rl.rlim_cur;
}

static uint64_t cut(uint64_t configured, uint64_t share)
{
	return configured < share ? configured : share;
}

/* What one of n uids sharing may take of what N over `part` shares out. */
static uint64_t share(uint64_t nofile, unsigned part, uint32_t n)
{
	return nofile / part / ((uint64_t)n + 1);
}

/* A value the file gives that is more than a uid alone may take is worth a warning; a default
 * is meant to be cut. */
static void warn_cut(const char *key, bool given, uint64_t configured, uint64_t nofile,
		     unsigned part)
{
	if (given && share(nofile, part, 1) < configured)
		log_warn(
			"%s %llu is more than 1/%u of weightd's limit of open files (RLIMIT_NOFILE "
			"%llu), the most a uid alone may take; %llu is used instead, less while "
			"other uids are connected (raise LimitNOFILE= in weightd.service, or "
			"ulimit -n)",
			key, (unsigned long long)configured, part * 2, (unsigned long long)nofile,
			(unsigned long long)share(nofile, part, 1));
}

struct uid_table *uid_table_new(struct event_base *base, const struct config *cfg)
{
	struct uid_table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->base = base;
	t->cfg = cfg;
	LIST_INIT(&t->uids);
	t->nofile = nofile_limit();
	if (t->nofile != UINT64_MAX) {
		warn_cut("uid_max_segments", cfg->uid_max_segments_set, cfg->uid_max_segments,
			 t->nofile, SHARE_SEGMENTS);
		warn_cut("uid_max_queue_fds", cfg->uid_max_queue_fds_set, cfg->uid_max_queue_fds,
			 t->nofile, SHARE_QUEUE_FDS);
		warn_cut("uid_max_pending", cfg->uid_max_pending_set, cfg->uid_max_pending,
			 t->nofile, SHARE_PENDING);
	}
	return t;
}

void uid_table_free(struct uid_table *t)
{
	if (!t)
		return;
	while (!LIST_EMPTY(&t->uids)) {
		struct uid_usage *uu = LIST_FIRST(&t->uids);

		LIST_REMOVE(uu, link);
		free(uu);
	}
	free(t);
}

struct uid_usage *uid_get(struct uid_table *t, uid_t uid, bool exempt)
{
	struct uid_usage *uu;

	LIST_FOREACH(uu, &t->uids, link)
	if (uu->uid == uid && uu->exempt == exempt)
		goto found;
	uu = calloc(1, sizeof(*uu));
	if (!uu)
		return NULL;
	uu->table = t;
	uu->uid = uid;
	uu->exempt = exempt;
	LIST_INSERT_HEAD(&t->uids, uu, link);
found:
	if (uu->conns++ == 0 && !exempt)
		t->sharing++;
	return uu;
}

void uid_put(struct uid_usage *uu)
{
	if (!uu)
		return;
	if (--uu->conns == 0 && uu->table && !uu->exempt)
		uu->table->sharing--;
	if (uu->conns || uu->busy_until_ns > wd_clock_ns())
		return;
	LIST_REMOVE(uu, link);
	free(uu);
}

void uid_sweep(struct uid_table *t)
{
	struct uid_usage *uu, *next;
	uint64_t now = wd_clock_ns();

	for (uu = LIST_FIRST(&t->uids); uu; uu = next) {
		next = LIST_NEXT(uu, link);
		if (!uu->conns && uu->busy_until_ns <= now) {
			LIST_REMOVE(uu, link);
			free(uu);
		}
	}
}

size_t uid_receiving(const struct uid_table *t)
{
	const struct uid_usage *uu;
	size_t n = 0;

	if (t)
		LIST_FOREACH(uu, &t->uids, link)
	n += uu->partial > 0;
	return n ? n : 1;
}

/* The uids sharing as uu sees them (itself included). An exempt record (root and the daemon's
 * uid where they administer) takes no share and keeps what a uid alone may take: theirs is the
 * reserve an operator needs. */
static uint32_t sharing(const struct uid_usage *uu)
{
	const struct uid_table *t = uu->table;

	if (uu->exempt || !t->sharing)
		return 1;
	return t->sharing;
}

uint32_t uid_sharers(const struct uid_usage *uu)
{
	return uu && uu->table ? sharing(uu) : 1;
}

uint64_t uid_max_segments(const struct uid_usage *uu, const struct config *cfg)
{
	if (!uu || !uu->table)
		return cfg->uid_max_segments;
	return cut(uu->table->cfg->uid_max_segments,
		   share(uu->table->nofile, SHARE_SEGMENTS, sharing(uu)));
}

uint64_t uid_max_queue_fds(const struct uid_usage *uu, const struct config *cfg)
{
	if (!uu || !uu->table)
		return cfg->uid_max_queue_fds;
	return cut(uu->table->cfg->uid_max_queue_fds,
		   share(uu->table->nofile, SHARE_QUEUE_FDS, sharing(uu)));
}

void uid_limits_text(const struct config *cfg, char *buf, size_t cap)
{
	uint64_t nofile = nofile_limit();
	char lim[24] = "unlimited";

	if (nofile != UINT64_MAX)
		snprintf(lim, sizeof(lim), "%llu", (unsigned long long)nofile);
	snprintf(
		buf, cap,
		"per-uid limits for a uid alone (RLIMIT_NOFILE %s; shares shrink as uids connect): "
		"uid_max_segments %llu, uid_max_queue_fds %llu, uid_max_pending %llu",
		lim,
		(unsigned long long)cut(cfg->uid_max_segments, share(nofile, SHARE_SEGMENTS, 1)),
		(unsigned long long)cut(cfg->uid_max_queue_fds, share(nofile, SHARE_QUEUE_FDS, 1)),
		(unsigned long long)cut(cfg->uid_max_pending, share(nofile, SHARE_PENDING, 1)));
}

uint64_t uid_max_pending(const struct uid_usage *uu, const struct config *cfg)
{
	if (!uu || !uu->table)
		return cfg->uid_max_pending;
	return cut(uu->table->cfg->uid_max_pending,
		   share(uu->table->nofile, SHARE_PENDING, sharing(uu)));
}

/*
 * The main thread's time is shared between uids. A request that keeps it busy for FAIR_MIN_NS or
 * more while other uids are active puts its uid behind them: none of its connections takes
 * another request for that time multiplied by the number of those uids, so each of them gets as
 * much of the loop as it had. One uid pipelining expensive requests (a full status of many
 * thousand weights) over its connections thus holds others for at most the one request being
 * served, not for all of them in turn. Cheaper requests never wait, nor does a uid alone. A
 * request is not cut short: what a single one costs is bounded by the limits on its size.
 *
 * Two things keep a client that is waiting from losing its place:
 * - "active" is a request sent (read, even if not yet served) within FAIR_ACTIVE_NS of the
 *   loop's time not counting expensive requests (busy_ns): a client stuck behind them has not
 *   been idle;
 * - after an expensive request while other uids are connected, its uid takes no other request
 *   until the loop has polled its sockets (the gate): otherwise every connection of a flood
 *   whose turn came in the same pass of the loop would be served before anyone else was even
 *   read, however the uids stand. And for FAIR_ACTIVE_NS after it, what that uid sends is
 *   served from a timer, after the pass has served every socket found readable: one of its
 *   requests read just ahead of another client's in the same pass does not make that client
 *   wait for it too. A uid alone is held by neither.
 */
#define FAIR_MIN_NS    1000000ull    /* 1 ms */
#define FAIR_ACTIVE_NS 250000000ull  /* 250 ms */
#define FAIR_MAX_NS    2000000000ull /* a uid is held back at most 2 s ahead */

static bool uid_active(const struct uid_table *t, const struct uid_usage *o, uint64_t now)
{
	uint64_t idle;

	if (!o->conns || !o->active_ns)
		return false;
	idle = now - o->active_ns;
	idle = idle > t->busy_ns - o->active_busy_ns ? idle - (t->busy_ns - o->active_busy_ns) : 0;
	return idle < FAIR_ACTIVE_NS;
}

void uid_charge(struct uid_usage *uu, uint64_t now, uint64_t spent)
{
	struct uid_table *t = uu ? uu->table : NULL;
	const struct uid_usage *o;
	uint64_t others = 0, from;
	bool company = false;

	if (!t)
		return;
	uid_touch(uu, now);
	if (spent < FAIR_MIN_NS)
		return;
	t->busy_ns += spent;
	LIST_FOREACH(o, &t->uids, link)
	{
		company |= o != uu && o->conns;
		others += o != uu && uid_active(t, o, now);
	}
	if (company) { /* a uid alone is never held back, not even by a pass of the loop */
		event_base_gettimeofday_cached(t->base, &uu->gate);
		uu->heavy_ns = now;
	}
	if (!others)
		return;
	from = uu->busy_until_ns > now ? uu->busy_until_ns : now;
	uu->busy_until_ns = from + spent * others;
	if (uu->busy_until_ns > now + FAIR_MAX_NS)
		uu->busy_until_ns = now + FAIR_MAX_NS;
}

/*
 * libevent reads the clock once per pass of its loop, right after polling, and hands that time to
 * every callback of the pass: a different time means the loop has polled since the gate was set.
 * (Two passes within one microsecond would look like one: that only costs one more pass.) The
 * sockets found readable then are served before the timers that resume held sessions, so a
 * client whose request came during an expensive one is read before the next expensive one runs.
 */
bool uid_polled(const struct uid_usage *uu)
{
	struct timeval now;

	if (!uu || !uu->table || (!uu->gate.tv_sec && !uu->gate.tv_usec))
		return true;
	event_base_gettimeofday_cached(uu->table->base, &now);
	return now.tv_sec != uu->gate.tv_sec || now.tv_usec != uu->gate.tv_usec;
}

bool uid_heavy(const struct uid_usage *uu, uint64_t now)
{
	return uu && uu->heavy_ns && now - uu->heavy_ns < FAIR_ACTIVE_NS;
}

void uid_touch(struct uid_usage *uu, uint64_t now)
{
	if (!uu || !uu->table)
		return;
	uu->active_ns = now;
	uu->active_busy_ns = uu->table->busy_ns;
}

uint64_t uid_wait_ns(const struct uid_usage *uu, uint64_t now)
{
	return uu && uu->busy_until_ns > now ? uu->busy_until_ns - now : 0;
}
