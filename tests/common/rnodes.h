/* SPDX-License-Identifier: Apache-2.0 */
/* rnodes.h - recipe nodes built in memory for tests and benchmarks that run plans directly. */
#ifndef WD_TEST_RNODES_H
#define WD_TEST_RNODES_H

#include <stddef.h>
#include <stdint.h>

#include "recipe.h"

/* A recipe's nodes, their inputs in one pool; `cap` nodes and `pool_cap` inputs at most. */
struct rnodes {
	struct wd_rnode *n;
	uint32_t *pool;
	size_t len, cap, used, pool_cap;
};

/* Room for `cap` nodes and `pool` inputs; exits the program when out of memory. */
void rnodes_init(struct rnodes *b, size_t cap, size_t pool);
void rnodes_free(struct rnodes *b);
/* Empties b, keeping its room. */
void rnodes_clear(struct rnodes *b);

/* Appends a node of `op` over inputs `in`: its index. Past the room the program aborts (a test's
 * own mistake). */
uint32_t rnodes_add(struct rnodes *b, enum wd_op op, const uint32_t *in, size_t nin);
/* A source node: the whole tensor `tensor` of checkpoint `ckpt` (strings not copied). */
uint32_t rnodes_source(struct rnodes *b, const char *ckpt, const char *tensor);

#endif
