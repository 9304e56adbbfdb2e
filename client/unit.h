/* SPDX-License-Identifier: Apache-2.0 */
/* unit.h - what of libweightd's units other files use (unit.c). */
#ifndef WC_UNIT_H
#define WC_UNIT_H

#include <stdint.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

/* Give slot `slot` (declared, in a unit not yet submitted) the recipe r, taking it. */
void wc_unit_take_recipe(weightd_unit *u, const char *slot, weightd_recipe *r);

/*
 * Check a materialize reply against the unit (submitted, or being declared) and give every slot
 * its weight: the unit is then held (validate maps it), else back to being declared. Takes resp
 * and fds in every case; on failure every fd is closed and every reference released. The
 * outputs are, in order, the SRC_RECIPE slots, the SRC_TENSOR slots and the aliases (each in
 * slot order).
 */
int wc_unit_take_reply(weightd_unit *u, Weightd__Response *resp, int *fds, uint32_t nfds,
		       weightd_error *err);

#endif
