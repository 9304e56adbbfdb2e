/* SPDX-License-Identifier: Apache-2.0 */
/* unit_columns.h - a unit request's entries read as one sequence, whichever form each came in
 * (UnitEntry messages, then the TensorEntries columns, checked whole), and a unit's weights
 * written as the PackedWeights columns of its materialize reply. */
#ifndef WD_UNIT_COLUMNS_H
#define WD_UNIT_COLUMNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd.pb-c.h"
#include "error.h"

struct weight;

/* One entry of a unit, borrowed from the request (valid while it is). */
struct unit_columns_entry {
	const char *name;
	const Weightd__Recipe *recipe;  /* a UnitEntry's recipe (NULL for a column entry) */
	const char *checkpoint;         /* a plain entry (the whole stored tensor, nothing else): */
	const char *tensor;             /* its source; both NULL otherwise */
	bool check;                     /* dtype and shape declared (UnitEntry.check_slot) */
	const char *dtype;              /* declared: never NULL when check is set */
	const uint64_t *shape;
	size_t ndim;
};

/* The entries of a unit request: `n_msg` UnitEntry messages, then `n_cols` column entries. */
struct unit_columns {
	const Weightd__Unit *pu;
	size_t n_msg, n_cols, n;
	const char **names;             /* per column entry, into TensorEntries.names */
	const char **tensors;           /* per column entry, into TensorEntries.tensors (NULL: the
					 * tensors are named like the entries) */
	size_t *dims_at;                /* per column entry: its first dimension in dims (NULL:
					 * nothing declared) */
};

/*
 * Read a unit's entries: the columns checked whole (every column's length, every index in
 * range, every string ended), and the number of entries against `max` before anything is
 * allocated. -WEIGHTD_E_* with err set (naming the column and the entry) on failure.
 */
int unit_columns_init(struct unit_columns *ue, const Weightd__Unit *pu, uint32_t max,
		      weightd_error *err);
void unit_columns_fini(struct unit_columns *ue);
/* Entry i (0 <= i < ue->n). */
void unit_columns_get(const struct unit_columns *ue, size_t i, struct unit_columns_entry *e);

/*
 * The columns of a materialize reply: ws[i] is entry i's weight, fd_index[i] the index
 * of its segment in the reply, alias_owner[j] the entry alias j resolves to; dims is the sum of
 * the weights' ndim (the caller's walk over them counts it: one walk less). The arrays live in
 * *ret_block (free() it after packing); pw's strings and bytes point into it and into static
 * dtype names. -WEIGHTD_E_RESOURCE_EXHAUSTED when out of memory.
 */
int unit_columns_pack(Weightd__PackedWeights *pw, struct weight *const *ws, const uint32_t *fd_index,
		   size_t n, size_t dims, const uint32_t *alias_owner, size_t n_aliases,
		   void **ret_block);

#endif
