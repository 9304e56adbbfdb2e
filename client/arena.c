/* SPDX-License-Identifier: Apache-2.0 */
/* arena.c - a unit's memory: bump allocation in blocks from the client's block cache. */
#include "arena.h"

#include <stdint.h>
#include <string.h>

#include "msg.h"

/*
 * Each block starts with a pointer to the previous one; allocations follow, 16-byte aligned.
 * Blocks come from and go back to the connection's wd_msg_cache, so the memory of one unit
 * serves the next without being given back to the kernel and faulted in again.
 */
#define ARENA_FIRST (64u << 10)
#define ARENA_MAX (8u << 20)      /* from 2 MiB on, blocks are huge pages (src/msg.c) */
#define ARENA_HDR 16

void wc_arena_init(struct wc_arena *a, struct wd_msg_cache *mc)
{
	memset(a, 0, sizeof(*a));
	a->mc = mc;
}

void *wc_arena_alloc(struct wc_arena *a, size_t size)
{
	size_t need, cap;
	unsigned char *b;
	void *p;

	if (size > SIZE_MAX - 15 - ARENA_HDR)
		return NULL;
	size = (size + 15) & ~(size_t)15;
	if (a->left < size) {
		need = size + ARENA_HDR;
		cap = a->next ? a->next : ARENA_FIRST;
		if (cap < need)
			cap = need;
		b = wd_msg_cache_alloc(a->mc, cap);
		if (!b)
			return NULL;
		memcpy(b, &a->last, sizeof(a->last));
		a->last = b;
		a->cur = b + ARENA_HDR;
		a->left = cap - ARENA_HDR;
		a->next = a->next ? (a->next < ARENA_MAX ? a->next * 2 : ARENA_MAX) : ARENA_FIRST * 2;
	}
	p = a->cur;
	a->cur += size;
	a->left -= size;
	return p;
}

char *wc_arena_strdup(struct wc_arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = wc_arena_alloc(a, n);

	if (d)
		memcpy(d, s, n);
	return d;
}

void wc_arena_free(struct wc_arena *a)
{
	unsigned char *b = a->last;

	while (b) {
		unsigned char *prev;

		memcpy(&prev, b, sizeof(prev));
		wd_msg_free(b);
		b = prev;
	}
	a->last = a->cur = NULL;
	a->left = 0;
	a->next = 0;
}
