/* SPDX-License-Identifier: Apache-2.0 */
/* request_holds.h - share and release requests, answered from the client's holds. */
#ifndef WD_REQUEST_HOLDS_H
#define WD_REQUEST_HOLDS_H

#include <stdbool.h>
#include <stdint.h>

#include "weightd.pb-c.h"

struct session;

/* Another reference (and fd of its segment) for a weight the client holds. */
void request_holds_share(struct session *s, uint64_t id, const Weightd__Share *sh);
/* Let go of every handle of `rl`, all or nothing; answered only on failure when `quiet`. */
void request_holds_release(struct session *s, uint64_t id, const Weightd__Release *rl, bool quiet);
/* A client back after a restart: the weights it still maps become its references again, each
 * one that weightd has at that very place and that the client may read, within its limits. */
void request_holds_reattach(struct session *s, uint64_t id, const Weightd__Reattach *ra);

#endif
