/* SPDX-License-Identifier: Apache-2.0 */
/* request_admin.h - admin requests (reload, evict): the admin socket's peers only. */
#ifndef WD_REQUEST_ADMIN_H
#define WD_REQUEST_ADMIN_H

#include <stdint.h>

#include "weightd.pb-c.h"

struct session;

/* Start a reload; it is answered once it has been applied or has failed. */
void request_admin_reload(struct session *s, uint64_t id);
/* Evict every weight no client holds. */
void request_admin_evict(struct session *s, uint64_t id, const Weightd__Evict *ev);

#endif
