/* SPDX-License-Identifier: Apache-2.0 */
/* request_query.h - requests that read the daemon's state: hello, list, describe, status,
 * subscribe (and the events subscribers are sent). Each answers request `id` of session `s`. */
#ifndef WD_REQUEST_QUERY_H
#define WD_REQUEST_QUERY_H

#include <stdbool.h>
#include <stdint.h>

#include "weightd.pb-c.h"

struct csource;
struct daemon;
struct session;

void request_query_hello(struct session *s, uint64_t id, const Weightd__Hello *h);
void request_query_list(struct session *s, uint64_t id);
void request_query_describe(struct session *s, uint64_t id, const Weightd__Describe *dq);
void request_query_status(struct session *s, uint64_t id, bool omit_weights);
/* A subscription replaces the previous one; an empty list unsubscribes. */
void request_query_subscribe(struct session *s, uint64_t id, const Weightd__Subscribe *sub);
/* Send an Event to every client subscribed to `cs` that may read it: cs got a new generation
 * (what "generation") or was removed ("removed"). A reload_changed_fn (reload.h). */
void request_query_notify(struct daemon *d, const struct csource *cs, const char *what);

#endif
