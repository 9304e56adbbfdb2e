/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.h - the optional HTTP endpoint (metrics_listen) that serves GET /metrics. */
#ifndef WD_METRICS_H
#define WD_METRICS_H

#include "error.h"

struct csource;
struct daemon;
struct evbuffer;
struct metrics;
struct wd_remote_counters;

/* Listen on d->cfg->metrics_listen (a loopback address, checked when the file was read). NULL
 * with *ret_err untouched when the key is empty (off); NULL and err set when the address cannot
 * be bound. */
struct metrics *metrics_new(struct daemon *d, weightd_error *err);
/* Close the listener and every connection. Accepts NULL. */
void metrics_free(struct metrics *m);

/* The daemon's counters in the Prometheus text format (version 0.0.4), the families and types
 * weightctl metrics writes, appended to out. Every checkpoint is listed (the endpoint listens on
 * loopback only). */
void metrics_format(struct daemon *d, struct evbuffer *out);

#endif
