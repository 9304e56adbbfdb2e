/* SPDX-License-Identifier: Apache-2.0 */
/* columns.h - a materialize reply's columns (PackedWeights): checked whole, then read one
 * weight at a time (columns.c). */
#ifndef WC_COLUMNS_H
#define WC_COLUMNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

struct wc_weight_desc;

/*
 * Check a packed reply for n entries and n_aliases aliases that came with nfds fds, before any
 * of it is used: every column's length; each weight's segment, dtype, dimensions and digest
 * algorithm; each weight inside its segment; the segments listed once each, in fd order, and
 * every one used; each alias answered by an entry. On failure *ret_at is the output the error
 * is about (entry k, or alias j as n + j; SIZE_MAX: the reply as a whole), for the caller to name.
 */
int wc_columns_check(const Weightd__UnitReply *ur, size_t n, size_t n_aliases, uint32_t nfds,
		     size_t *ret_at, weightd_error *err);
/* The description of checked entry k, whose dimensions start at dims[at], named `name`. */
void wc_columns_desc(const Weightd__PackedWeights *pw, size_t k, size_t at, const char *name,
		     struct wc_weight_desc *ret);
/* Whether checked entries k and l (their dimensions at ka and la) describe a weight alike. */
bool wc_columns_alike(const Weightd__PackedWeights *pw, size_t k, size_t ka, size_t l, size_t la);

#endif
