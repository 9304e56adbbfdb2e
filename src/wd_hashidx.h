/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wd_hashidx.h - an open-addressing index into the caller's own array (header only).
 *
 * The caller keeps its entries in a dense array of its own; the index maps a key to the entry's
 * position. Each slot holds position + 1 (0 = empty). Linear probing, a power-of-two capacity
 * kept at most half full, backward-shift deletion (no tombstones, so probe runs stay short). The
 * caller supplies the hash of a key (any 64-bit value: the index mixes it) and, for lookups, an
 * equality test between a key and the entry at a position; for growth and deletion, the hash of
 * the entry at a position. Callbacks passed as constants inline at -O2 and above.
 *
 * Typical use, with entries in `e[0..n)`:
 *	size_t i = wd_hashidx_slot(&h, hash(key), eq, ctx, key);
 *	if (h.slot[i]) ... found: e[h.slot[i] - 1]
 *	else if (wd_hashidx_reserve(&h, n + 1, hash_at, ctx) == 0) { e[n] = ...; wd_hashidx_put(&h, hash(key), n++); }
 */
#ifndef WD_HASHIDX_H
#define WD_HASHIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct wd_hashidx {
	uint32_t *slot; /* position + 1, 0 = empty; NULL until the first reserve */
	size_t cap;     /* power of two, 0 before the first reserve */
};

/* The hash of the entry at position pos; the equality of the entry at pos with key. */
typedef uint64_t (*wd_hashidx_at_fn)(const void *ctx, uint32_t pos);
typedef bool (*wd_hashidx_eq_fn)(const void *ctx, uint32_t pos, const void *key);

static inline size_t wd_hashidx_home(const struct wd_hashidx *h, uint64_t hash)
{
	return (size_t)((hash * 0x9E3779B97F4A7C15ull) >> 32) & (h->cap - 1);
}

/*
 * The slot holding the entry equal to key, or the empty slot where it would go. The table must
 * have a capacity (use wd_hashidx_find on a table that may have none).
 */
static inline size_t wd_hashidx_slot(const struct wd_hashidx *h, uint64_t hash, wd_hashidx_eq_fn eq,
				  const void *ctx, const void *key)
{
	size_t mask = h->cap - 1, i = wd_hashidx_home(h, hash);

	while (h->slot[i] && !eq(ctx, h->slot[i] - 1, key))
		i = (i + 1) & mask;
	return i;
}

/* Ask ahead for the slot a lookup of hash starts at (a table far larger than the CPU caches
 * otherwise costs each lookup a wait on memory). */
static inline void wd_hashidx_prefetch(const struct wd_hashidx *h, uint64_t hash)
{
	if (h->cap)
		__builtin_prefetch(&h->slot[wd_hashidx_home(h, hash)]);
}

/* Position + 1 of the entry equal to key, 0 if none. */
static inline uint32_t wd_hashidx_find(const struct wd_hashidx *h, uint64_t hash, wd_hashidx_eq_fn eq,
				    const void *ctx, const void *key)
{
	if (!h->cap)
		return 0;
	return h->slot[wd_hashidx_slot(h, hash, eq, ctx, key)];
}

/* Index position pos (not yet in the table) under hash; the table must have room. */
static inline void wd_hashidx_put(struct wd_hashidx *h, uint64_t hash, uint32_t pos)
{
	size_t mask = h->cap - 1, i = wd_hashidx_home(h, hash);

	while (h->slot[i])
		i = (i + 1) & mask;
	h->slot[i] = pos + 1;
}

/*
 * Make room for n entries (capacity at least 2n, at least 16). A grown table is rebuilt from
 * positions [0, have), the ones indexed now. 0, or -1 when out of memory or past 2^31 entries
 * (the table is then left as it was).
 */
static inline int wd_hashidx_reserve_from(struct wd_hashidx *h, size_t n, size_t have, wd_hashidx_at_fn at,
				       const void *ctx)
{
	size_t ncap = h->cap ? h->cap : 16;
	uint32_t *old = h->slot;

	while (ncap / 2 < n) {
		if (ncap > (size_t)UINT32_MAX / 2)
			return -1;
		ncap *= 2;
	}
	if (ncap == h->cap)
		return 0;
	h->slot = calloc(ncap, sizeof(*h->slot));
	if (!h->slot) {
		h->slot = old;
		return -1;
	}
	h->cap = ncap;
	free(old);
	for (size_t k = 0; k < have; k++)
		wd_hashidx_put(h, at(ctx, (uint32_t)k), (uint32_t)k);
	return 0;
}

/* Room for n entries when positions [0, n - 1) are the ones indexed (the add-one case). */
static inline int wd_hashidx_reserve(struct wd_hashidx *h, size_t n, wd_hashidx_at_fn at, const void *ctx)
{
	return wd_hashidx_reserve_from(h, n, n ? n - 1 : 0, at, ctx);
}

/* Empty slot i and shift later members of its probe run back so every run stays unbroken. */
static inline void wd_hashidx_delete(struct wd_hashidx *h, size_t i, wd_hashidx_at_fn at, const void *ctx)
{
	size_t mask = h->cap - 1, j = i;

	h->slot[i] = 0;
	for (;;) {
		size_t k;

		j = (j + 1) & mask;
		if (!h->slot[j])
			return;
		k = wd_hashidx_home(h, at(ctx, h->slot[j] - 1));
		/* j stays if its home k lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		h->slot[i] = h->slot[j];
		h->slot[j] = 0;
		i = j;
	}
}

/* The entry at position from, indexed under hash, now lives at position to (after a swap). */
static inline void wd_hashidx_move(struct wd_hashidx *h, uint64_t hash, uint32_t from, uint32_t to)
{
	size_t mask = h->cap - 1, i = wd_hashidx_home(h, hash);

	while (h->slot[i] != from + 1)
		i = (i + 1) & mask;
	h->slot[i] = to + 1;
}

/* Every slot empty, capacity kept. */
static inline void wd_hashidx_clear(struct wd_hashidx *h)
{
	for (size_t i = 0; i < h->cap; i++)
		h->slot[i] = 0;
}

static inline void wd_hashidx_free(struct wd_hashidx *h)
{
	free(h->slot);
	h->slot = NULL;
	h->cap = 0;
}

#endif
