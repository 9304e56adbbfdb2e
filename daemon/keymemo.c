/* SPDX-License-Identifier: Apache-2.0 */
/* keymemo.c - recipe keys of plain source entries by (source identity, tensor name). */
#include "keymemo.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "wd_hashidx.h"

struct memo_entry {
	uint64_t hash;
	uint8_t identity[32];
	uint8_t key[32];
	char *tensor;
};

struct keymemo {
	struct memo_entry *e;        /* dense: n of cap */
	size_t n, cap, max;
	struct wd_hashidx ix;        /* by hash_of: position in e */
};

struct keymemo *keymemo_new(size_t max_entries)
{
	struct keymemo *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->max = max_entries ? max_entries : 1;
	return m;
}

static void clear(struct keymemo *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->e[i].tensor);
	free(m->e);
	m->e = NULL;
	m->n = m->cap = 0;
	wd_hashidx_free(&m->ix);
}

void keymemo_free(struct keymemo *m)
{
	if (!m)
		return;
	clear(m);
	free(m);
}

size_t keymemo_count(const struct keymemo *m)
{
	return m ? m->n : 0;
}

static bool zero_identity(const uint8_t identity[32])
{
	static const uint8_t zero[32];

	return memcmp(identity, zero, 32) == 0;
}

static uint64_t hash_of(const uint8_t identity[32], const char *tensor, size_t len)
{
	uint64_t seed;

	memcpy(&seed, identity, sizeof(seed));
	return XXH3_64bits_withSeed(tensor, len, seed);
}

/* What is looked for: the hash first (cheap to compare), then identity and name. */
struct memo_key {
	uint64_t hash;
	const uint8_t *identity;
	const char *tensor;
};

static uint64_t memo_at(const void *ctx, uint32_t pos)
{
	const struct keymemo *m = ctx;
	return m->e[pos].hash;
}

static bool memo_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct memo_entry *e = &((const struct keymemo *)ctx)->e[pos];
	const struct memo_key *k = key;

	return e->hash == k->hash && memcmp(e->identity, k->identity, 32) == 0 &&
	       strcmp(e->tensor, k->tensor) == 0;
}

bool keymemo_get(const struct keymemo *m, const uint8_t identity[32], const char *tensor,
		 uint8_t ret_key[32])
{
	struct memo_key k;
	uint32_t at;

	if (!m || !m->n || zero_identity(identity))
		return false;
	k.hash = hash_of(identity, tensor, strlen(tensor));
	k.identity = identity;
	k.tensor = tensor;
	at = wd_hashidx_find(&m->ix, k.hash, memo_eq, m, &k);
	if (!at)
		return false;
	memcpy(ret_key, m->e[at - 1].key, 32);
	return true;
}

void keymemo_put(struct keymemo *m, const uint8_t identity[32], const char *tensor,
		 const uint8_t key[32])
{
	size_t len, i;
	struct memo_key k;
	struct memo_entry *e;

	if (!m || zero_identity(identity))
		return;
	if (m->n >= m->max)
		clear(m);   /* the bound: start again rather than track recency */
	if (m->n == m->cap) {
		size_t ncap = m->cap ? m->cap * 2 : 32;
		struct memo_entry *ne = realloc(m->e, ncap * sizeof(*ne));

		if (!ne)
			return;
		m->e = ne;
		m->cap = ncap;
	}
	if (wd_hashidx_reserve(&m->ix, m->n + 1, memo_at, m) < 0)
		return;
	len = strlen(tensor);
	k.hash = hash_of(identity, tensor, len);
	k.identity = identity;
	k.tensor = tensor;
	i = wd_hashidx_slot(&m->ix, k.hash, memo_eq, m, &k);
	if (m->ix.slot[i]) {
		memcpy(m->e[m->ix.slot[i] - 1].key, key, 32);
		return;
	}
	e = &m->e[m->n];
	e->tensor = malloc(len + 1);
	if (!e->tensor)
		return;
	memcpy(e->tensor, tensor, len + 1);
	e->hash = k.hash;
	memcpy(e->identity, identity, 32);
	memcpy(e->key, key, 32);
	m->ix.slot[i] = (uint32_t)++m->n;
}
