/* SPDX-License-Identifier: Apache-2.0 */
/* wire.h - conversions between protobuf messages and weightd's core structs. */
#ifndef WD_WIRE_H
#define WD_WIRE_H

#include "error.h"
#include "recipe.h"
#include "weightd.pb-c.h"

/*
 * Build a core recipe from a wire recipe. The nodes borrow strings and arrays from `pr`, which
 * must outlive them; free the array with free(). Checks what the core types cannot hold (too many
 * nodes or dims, unknown dtype or op names) with errors naming the node.
 */
int wire_recipe(const Weightd__Recipe *pr, uint32_t max_nodes, struct wd_rnode **ret_nodes,
		size_t *ret_n, weightd_error *err);

/* Fill a wire Error from a core error. Strings point into `e`, which must outlive `pe`. */
void wire_error(const weightd_error *e, Weightd__Error *pe);

#endif
