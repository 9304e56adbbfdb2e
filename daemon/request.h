/* SPDX-License-Identifier: Apache-2.0 */
/* request.h - dispatch of decoded requests and the helpers the request modules (request_query.c,
 * request_admin.c, request_holds.c, unit.c) share. */
#ifndef WD_REQUEST_H
#define WD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe.h"
#include "weightd.pb-c.h"

#define REQUEST_MAX_RECIPE_NODES WD_RECIPE_MAX_NODES

struct session;

/* Act on one decoded request of `s` (every reply goes through session_send). */
void request_dispatch(struct session *s, Weightd__Request *req);
/* A dying session's requests in flight finish without replying (unit_session_gone). */
void request_session_gone(struct session *s);

#endif
