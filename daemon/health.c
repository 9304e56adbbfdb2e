/* SPDX-License-Identifier: Apache-2.0 */
/* health.c - whether weightd is ready: its preloaded checkpoints resident, its required ones
 * admitted; the one rule `weightctl health --ready`, status and metrics all show. */
#include "health.h"

#include <stdio.h>
#include <string.h>

#include "catalog.h"
#include "clock.h"
#include "daemon.h"
#include "preload.h"

/* What keeps cs from being ready, into buf; false when nothing does. */
static bool blocker(const struct daemon *d, const struct csource *cs, char *buf, size_t cap)
{
	size_t held, total, failed;
	uint64_t now = wd_clock_ms();

	if (cs->state == CSOURCE_REMOVED || (!cs->conf->preload && !cs->conf->required))
		return false;
	if (cs->state == CSOURCE_FAILED) {
		if (cs->retry_at_ms)
			snprintf(buf, cap, "checkpoint %s failed (retrying in %llu s): %s",
				 cs->name,
				 (unsigned long long)((cs->retry_at_ms > now ?
							       cs->retry_at_ms - now + 999 :
							       0) /
						      1000),
				 cs->error.message);
		else
			snprintf(buf, cap, "checkpoint %s failed: %s", cs->name, cs->error.message);
		return true;
	}
	if (cs->state == CSOURCE_LOADING) {
		snprintf(buf, cap, "checkpoint %s is still being admitted", cs->name);
		return true;
	}
	if (!cs->conf->preload)
		return false;
	if (!preload_progress(d, cs, &held, &total, &failed)) {
		snprintf(buf, cap, "checkpoint %s is not preloaded yet", cs->name);
		return true;
	}
	if (held == total)
		return false;
	if (failed)
		snprintf(buf, cap,
			 "checkpoint %s: %zu of %zu tensors preloaded, %zu could not be "
			 "materialized (the log says why; a reload tries again)",
			 cs->name, held, total, failed);
	else
		snprintf(buf, cap, "checkpoint %s: %zu of %zu tensors preloaded so far", cs->name,
			 held, total);
	return true;
}

bool health_checkpoint_ready(const struct daemon *d, const struct csource *cs)
{
	char buf[64];

	return !blocker(d, cs, buf, sizeof(buf));
}

bool health_ready(const struct daemon *d, const struct peer *peer, char *why, size_t cap)
{
	char one[sizeof(((weightd_error *)0)->message) + 256];
	size_t named = 0, hidden = 0, more = 0, len = 0;

	if (why && cap)
		why[0] = '\0';
	for (size_t i = 0; i < catalog_count(d->catalog); i++) {
		const struct csource *cs = catalog_at(d->catalog, i);

		if (!blocker(d, cs, one, sizeof(one)))
			continue;
		if (peer && !catalog_allowed(cs, peer)) {
			hidden++;
		} else if (named < 3) {
			if (why && len < cap)
				len += (size_t)snprintf(why + len, cap - len, "%s%s",
							named ? "; " : "", one);
			named++;
		} else {
			more++;
		}
	}
	if (!named && !hidden)
		return true;
	if (why && len < cap && more)
		len += (size_t)snprintf(why + len, cap - len, "; and %zu more", more);
	if (why && len < cap && hidden)
		snprintf(why + len, cap - len,
			 "%s%zu checkpoint%s this client may not see %s not ready",
			 named ? "; " : "", hidden, hidden == 1 ? "" : "s",
			 hidden == 1 ? "is" : "are");
	return false;
}
