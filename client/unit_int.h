/* SPDX-License-Identifier: Apache-2.0 */
/* unit_int.h - a unit's slots, shared by unit.c (slots, validate, bind), unit_request.c (the
 * request it sends) and unit_reply.c (the reply it takes). */
#ifndef WC_UNIT_INT_H
#define WC_UNIT_INT_H

#include <stdbool.h>
#include <string.h>

#include "internal.h"
#include "wd_hashidx.h"

/*
 * SRC_TENSOR is weightd_unit_set_tensor without a selection, the usual entry of a large unit:
 * kept as two strings instead of a weightd_recipe (whose node alone is 384 bytes), and sent as
 * a row of the unit's tensor columns.
 */
enum slot_src { SRC_NONE, SRC_TENSOR, SRC_RECIPE, SRC_ALIAS };

/* 72 bytes: every step of a unit walks the slots, so a 100,000-slot unit's should stay small. */
struct slot {
	char *name;                  /* in the unit's arena */
	const char *dtype;           /* declared (wd_dtype_name's), or NULL: no expectation */
	const uint64_t *shape;       /* ndim dimensions, in the unit's arena (when declared) */
	void **dest;
	weightd_recipe *recipe;      /* SRC_RECIPE (owned) */
	char *alias;                 /* SRC_ALIAS: the target slot (owned); SRC_TENSOR:
				      * "checkpoint\0tensor" (in the unit's arena) */
	weightd_weight *w;           /* after finish: borrowed from unit->weights */
	const void *data;            /* after validate */
	uint32_t ndim;
	enum slot_src src;
};

/*
 * NEW: being declared (or back after a failure). SUBMITTED: a request is out. HELD: the reply
 * came; weights are held, nothing mapped. VALID: validated; bind may publish.
 */
enum unit_state { U_NEW, U_SUBMITTED, U_HELD, U_VALID };

struct weightd_unit {
	weightd_client *c;           /* holds a client reference */
	struct slot *slots;
	size_t n, cap;
	struct wd_hashidx index;     /* slots by name: position in slots */
	enum unit_state state;
	struct wc_pending *p;
	weightd_weight **weights;    /* one per fd of the reply */
	size_t n_weights;
	uint64_t bytes_read;
	/* Names, tensor sources and weights live in the arena; the slot array, the request's
	 * arrays and finish's scratch are blocks of the connection's cache. All of it serves the
	 * next unit when this one is freed, instead of going back to the kernel and being faulted
	 * in again (microseconds a page on a virtual machine: it made a 10,000-slot unit cost
	 * 20x a 1,000-slot one). Sources set again on a slot stay in the arena until the unit is
	 * freed. */
	struct wc_arena arena;
};

/* The checkpoint and tensor of a SRC_TENSOR slot. */
static inline const char *slot_ckpt(const struct slot *s)
{
	return s->alias;
}

static inline const char *slot_tensor(const struct slot *s)
{
	return s->alias + strlen(s->alias) + 1;
}

/* FNV-1a of a slot name, then a 64-bit finalizer: names that differ only in their last digits
 * ("layers.61.mlp.experts.255.up_proj.weight") differ in FNV's high bits more than its low ones,
 * and wd_hashidx uses the low ones. */
static inline size_t wc_name_hash(const char *name)
{
	uint64_t h = 1469598103934665603ull;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (size_t)h;
}

/* Room for n of something in a block being laid out: its offset, advanced past it (16-byte
 * aligned). The callers' sizes are bounded by the slot count, so the sums cannot overflow. */
static inline size_t wc_take(size_t *at, size_t n, size_t size)
{
	size_t off = *at;

	*at += (n * size + 15) & ~(size_t)15;
	return off;
}

/* The slot named `name`, or NULL (unit.c; by hash). */
struct slot *wc_unit_find_slot(const weightd_unit *u, const char *name);

/* Send the unit as a materialize or preflight request (unit_request.c). */
int wc_unit_send(weightd_unit *u, bool preflight, struct wc_pending **ret_p, weightd_error *err);

/*
 * Check a materialize reply against the unit and give every slot its weight (unit_reply.c).
 * Takes resp and fds in every case; on failure every fd is closed and every reference released.
 * The outputs are, in order, the SRC_RECIPE slots, the SRC_TENSOR slots and the aliases (each
 * in slot order).
 */
int wc_unit_take_reply(weightd_unit *u, Weightd__Response *resp, int *fds, uint32_t nfds,
		       weightd_error *err);

#endif
