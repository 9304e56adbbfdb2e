/* SPDX-License-Identifier: Apache-2.0 */
/* unit.h - units: a unit request preflighted or made, and answered all or nothing. Main thread
 * only. */
#ifndef WD_UNIT_H
#define WD_UNIT_H

#include <stdbool.h>
#include <stdint.h>

#include "weightd.pb-c.h"

struct session;

/*
 * Preflight or materialize unit `pu` for request `id` of `s`: the limits on units in flight (per
 * connection and, for a materialization, per uid), every name and entry checked before anything
 * is made, the cached weights taken and the new ones packed into segments together, answered all
 * or nothing (a preflight at once, a materialization once every weight is made).
 */
void unit_request(struct session *s, uint64_t id, const Weightd__Unit *pu, bool preflight);
/* Orphan every unit request of a dying session: each finishes without replying, giving its
 * references back. */
void unit_session_gone(struct session *s);

#endif
