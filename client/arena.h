/* SPDX-License-Identifier: Apache-2.0 */
/* arena.h - a unit's memory: bump allocation from the connection's block cache (arena.c). */
#ifndef WC_ARENA_H
#define WC_ARENA_H

#include <stddef.h>

struct wd_msg_cache;

/* Bump allocation for what lives exactly as long as a unit (slot names, tensor sources, its
 * weights); freed all at once, its blocks kept by the connection for the next unit. */
struct wc_arena {
	struct wd_msg_cache *mc;
	unsigned char *last;         /* the newest block */
	unsigned char *cur;
	size_t left, next;
};
void wc_arena_init(struct wc_arena *a, struct wd_msg_cache *mc);
/* 16-byte aligned, not zeroed; NULL when out of memory. */
void *wc_arena_alloc(struct wc_arena *a, size_t size);
char *wc_arena_strdup(struct wc_arena *a, const char *s);
void wc_arena_free(struct wc_arena *a);

#endif
