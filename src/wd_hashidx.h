/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wd_hashidx.h - an open-addressing index into the caller's own array (header only).
 *
 * The caller keeps its entries in a dense array of its own; the index maps a key to the entry's
 * position. Each slot holds the entry's position + 1 (0 = empty) beside 32 bits of its mixed
 * hash, the bits its home slot is taken from. Linear probing, a power-of-two capacity kept at
 * most half full, backward-shift deletion (no tombstones, so probe runs stay short). The caller
 * supplies the hash of a key (any 64-bit value: the index mixes it) and, for lookups, an
 * equality test between a key and the entry at a position; it is asked only of entries whose
 * stored hash bits match, and growth and deletion need no callback at all, since each slot
 * knows its home. Why the bits are kept: the entries of a large table (a unit of 100,000 slots)
 * lie far beyond the CPU caches, and every equality test on a passing neighbour in a probe run,
 * and every rehash of an entry on growth, would be a wait on the caller's memory; the slot array
 * itself is read anyway. Callbacks passed as constants inline at -O2 and above.
 *
 * Typical use, with entries in `e[0..n)`:
 *	size_t i = wd_hashidx_slot(&h, hash(key), eq, ctx, key);
 *	if (wd_hashidx_pos(&h, i)) ... found: e[wd_hashidx_pos(&h, i) - 1]
 *	else if (wd_hashidx_reserve(&h, n + 1) == 0) { e[n] = ...; wd_hashidx_put(&h, hash(key), n++); }
 * (reserve may rebuild the table: a slot index found before it is stale after it; put finds
 * its own slot. Without a reserve in between, wd_hashidx_set fills the slot found.)
 */
#ifndef WD_HASHIDX_H
#define WD_HASHIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct wd_hashidx {
	uint64_t *slot; /* (mixed hash >> 32) << 32 | (position + 1), 0 = empty; NULL until the
			 * first reserve (read it through wd_hashidx_pos) */
	size_t cap;     /* power of two, at most 2^31; 0 before the first reserve */
};

/* The equality of the entry at position pos with key. */
typedef bool (*wd_hashidx_eq_fn)(const void *ctx, uint32_t pos, const void *key);

/* The 32 bits of a hash a slot keeps: the high half of the mixed hash. */
static inline uint32_t wd_hashidx_bits(uint64_t hash)
{
	return (uint32_t)((hash * 0x9E3779B97F4A7C15ull) >> 32);
}

static inline size_t wd_hashidx_home(const struct wd_hashidx *h, uint64_t hash)
{
	return (size_t)wd_hashidx_bits(hash) & (h->cap - 1);
}

/* Position + 1 of the entry in slot i, 0 when it is empty. */
static inline uint32_t wd_hashidx_pos(const struct wd_hashidx *h, size_t i)
{
	return (uint32_t)h->slot[i];
}

/* Fill slot i (empty, as wd_hashidx_slot found it for hash) with position pos. */
static inline void wd_hashidx_set(struct wd_hashidx *h, size_t i, uint64_t hash, uint32_t pos)
{
	h->slot[i] = (uint64_t)wd_hashidx_bits(hash) << 32 | ((uint64_t)pos + 1);
}

/*
 * The slot holding the entry equal to key, or the empty slot where it would go. The table must
 * have a capacity (use wd_hashidx_find on a table that may have none).
 */
static inline size_t wd_hashidx_slot(const struct wd_hashidx *h, uint64_t hash, wd_hashidx_eq_fn eq,
				  const void *ctx, const void *key)
{
	uint64_t bits = (uint64_t)wd_hashidx_bits(hash) << 32;
	size_t mask = h->cap - 1, i = (size_t)(bits >> 32) & mask;

	for (;; i = (i + 1) & mask) {
		uint64_t v = h->slot[i];

		if (!v || ((v & 0xffffffff00000000ull) == bits && eq(ctx, (uint32_t)v - 1, key)))
			return i;
	}
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
	return wd_hashidx_pos(h, wd_hashidx_slot(h, hash, eq, ctx, key));
}

/* Put a slot's value at the first empty slot from its home (a table with room). */
static inline void wd_hashidx_put_value(uint64_t *slot, size_t mask, uint64_t v)
{
	size_t i = (size_t)(v >> 32) & mask;

	while (slot[i])
		i = (i + 1) & mask;
	slot[i] = v;
}

/* Index position pos (not yet in the table) under hash; the table must have room. */
static inline void wd_hashidx_put(struct wd_hashidx *h, uint64_t hash, uint32_t pos)
{
	wd_hashidx_put_value(h->slot, h->cap - 1,
			     (uint64_t)wd_hashidx_bits(hash) << 32 | ((uint64_t)pos + 1));
}

/*
 * Make room for n entries (capacity at least 2n, at least 16). A grown table keeps every entry
 * it holds, moved by the hash bits each slot keeps. 0, or -1 when out of memory or past 2^30
 * entries (the table is then left as it was).
 */
static inline int wd_hashidx_reserve(struct wd_hashidx *h, size_t n)
{
	size_t ncap = h->cap ? h->cap : 16;
	uint64_t *old = h->slot, *slot;

	while (ncap / 2 < n) {
		if (ncap > ((size_t)1 << 30))
			return -1;
		ncap *= 2;
	}
	if (ncap == h->cap)
		return 0;
	slot = calloc(ncap, sizeof(*slot));
	if (!slot)
		return -1;
	for (size_t k = 0; k < h->cap; k++)
		if (old[k])
			wd_hashidx_put_value(slot, ncap - 1, old[k]);
	h->slot = slot;
	h->cap = ncap;
	free(old);
	return 0;
}

/* Empty slot i and shift later members of its probe run back so every run stays unbroken. */
static inline void wd_hashidx_delete(struct wd_hashidx *h, size_t i)
{
	size_t mask = h->cap - 1, j = i;

	h->slot[i] = 0;
	for (;;) {
		size_t k;

		j = (j + 1) & mask;
		if (!h->slot[j])
			return;
		k = (size_t)(h->slot[j] >> 32) & mask;
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

	while ((uint32_t)h->slot[i] != from + 1)
		i = (i + 1) & mask;
	h->slot[i] = (h->slot[i] & 0xffffffff00000000ull) | ((uint64_t)to + 1);
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
