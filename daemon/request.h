/* request.h - what requests do, split by kind: request.c (hello, queries, admin, dispatch) and
 * request_unit.c (preflight and materialize of units, share). Main thread only. */
#ifndef WD_REQUEST_H
#define WD_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "recipe.h"
#include "weightd.pb-c.h"

struct session;

#define REQUEST_MAX_RECIPE_NODES WD_RECIPE_MAX_NODES

/* Preflight or materialize a unit: every limit and name checked before anything is made, the
 * new weights packed into segments together, answered all or nothing. */
void request_unit(struct session *s, uint64_t id, const Weightd__Unit *pu, bool preflight);
/* Another reference (and fd of its segment) for a weight the client holds. */
void request_share(struct session *s, uint64_t id, const Weightd__Share *sh);

#endif
