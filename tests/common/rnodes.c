/* SPDX-License-Identifier: Apache-2.0 */
/* rnodes.c - recipe nodes built in memory for tests and benchmarks that run plans directly. */
#include "rnodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rnodes_init(struct rnodes *b, size_t cap, size_t pool)
{
	memset(b, 0, sizeof(*b));
	b->n = calloc(cap ? cap : 1, sizeof(*b->n));
	b->pool = calloc(pool ? pool : 1, sizeof(*b->pool));
	if (!b->n || !b->pool) {
		fprintf(stderr, "rnodes: out of memory\n");
		exit(1);
	}
	b->cap = cap;
	b->pool_cap = pool;
}

void rnodes_free(struct rnodes *b)
{
	free(b->n);
	free(b->pool);
	memset(b, 0, sizeof(*b));
}

void rnodes_clear(struct rnodes *b)
{
	b->len = b->used = 0;
}

uint32_t rnodes_add(struct rnodes *b, enum wd_op op, const uint32_t *in, size_t nin)
{
	struct wd_rnode *n;

	if (b->len >= b->cap || b->used + nin > b->pool_cap) {
		fprintf(stderr, "rnodes: more than %zu nodes or %zu inputs\n", b->cap, b->pool_cap);
		abort();
	}
	n = &b->n[b->len];
	memset(n, 0, sizeof(*n));
	n->op = op;
	n->inputs = b->pool + b->used;
	n->n_inputs = nin;
	if (nin)
		memcpy(b->pool + b->used, in, nin * sizeof(*in));
	b->used += nin;
	return (uint32_t)b->len++;
}

uint32_t rnodes_source(struct rnodes *b, const char *ckpt, const char *tensor)
{
	uint32_t i = rnodes_add(b, WD_OP_SOURCE, NULL, 0);

	b->n[i].checkpoint = ckpt;
	b->n[i].tensor = tensor;
	b->n[i].sel.kind = WD_SEL_FULL;
	return i;
}
