/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.c - helpers on the shared daemon context. */
#include "daemon.h"

#include <sys/statvfs.h>
#include <systemd/sd-daemon.h>

#include "cache.h"
#include "catalog.h"
#include "bytes.h"
#include "clock.h"
#include "log.h"
#include "segment.h"
#include "session.h"
#include "shmscan.h"

uint64_t daemon_uptime_ms(const struct daemon *d)
{
	return (wd_clock_ns() - d->started_ns) / 1000000u;
}

uint64_t daemon_effective_budget(const struct config *cfg)
{
	struct statvfs sv;
	uint64_t shm = 0;

	if (statvfs(wd_segment_dir(), &sv) == 0)
		shm = (uint64_t)sv.f_blocks * sv.f_frsize;
	if (cfg->budget_bytes == 0)
		return shm / 2;
	if (shm && cfg->budget_bytes > shm) {
		char b[WD_BYTES_TEXT], h[WD_BYTES_TEXT];

		/* Fills never outrun the tmpfs (space is reserved before a byte is written), so
		 * this costs refusals, never a SIGBUS; but say what to give weightd. A container's
		 * /dev/shm is 64 MiB unless its pod says otherwise. */
		log_warn("budget %s is more than %s holds (%s); using %s: give weightd a tmpfs that "
			 "holds the budget: segment_dir on a tmpfs of the node (a hostPath, as "
			 "deploy/kubernetes does), a /dev/shm volume of medium Memory with a "
			 "sizeLimit above the budget, podman --shm-size, or a lower budget",
			 wd_bytes_text(b, cfg->budget_bytes), wd_segment_dir(),
			 wd_bytes_text(h, shm), h);
		return shm;
	}
	return cfg->budget_bytes;
}

/* READY=1 together with a STATUS= line, in one datagram (one short-lived socket, not two). */
void daemon_notify_ready(struct daemon *d)
{
	size_t ready = 0;

	for (size_t i = 0; i < catalog_count(d->catalog); i++)
		ready += catalog_at(d->catalog, i)->state == CSOURCE_READY;
	sd_notifyf(0, "READY=1\nSTATUS=Serving %zu of %zu checkpoints; %llu weights resident",
		   ready, catalog_count(d->catalog), (unsigned long long)cache_count(d->cache));
}

uint64_t daemon_foreign_segments(struct daemon *d)
{
	shmscan_poke(d->shmscan);
	d->stats.foreign_segments = shmscan_count(d->shmscan, NULL);
	return d->stats.foreign_segments;
}

struct session *daemon_session(const struct daemon *d, uint64_t id)
{
	struct session *s;

	LIST_FOREACH(s, &d->sessions, link)
	if (s->id == id)
		return s;
	return NULL;
}

void daemon_foreach_session(struct daemon *d, void (*fn)(struct session *s, void *arg), void *arg)
{
	struct session *s, *next;

	for (s = LIST_FIRST(&d->sessions); s; s = next) {
		next = LIST_NEXT(s, link); /* s may die (it leaves the list) */
		fn(s, arg);
	}
}
