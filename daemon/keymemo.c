/* SPDX-License-Identifier: Apache-2.0 */
/* keymemo.c - recipe keys of plain source entries by (source identity, tensor name). */
#include "keymemo.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct memo_entry {
	uint64_t hash;               /* 0: empty */
	uint8_t identity[32];
	uint8_t key[32];
	char *tensor;
};

struct keymemo {
	struct memo_entry *tab;      /* open addressing, linear probing; cap a power of two */
	size_t cap, n, max;
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
	for (size_t i = 0; i < m->cap; i++)
		free(m->tab[i].tensor);
	free(m->tab);
	m->tab = NULL;
	m->cap = m->n = 0;
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

/* Never 0 (0 marks an empty slot). */
static uint64_t hash_of(const uint8_t identity[32], const char *tensor, size_t len)
{
	uint64_t seed;
	uint64_t h;

	memcpy(&seed, identity, sizeof(seed));
	h = XXH3_64bits_withSeed(tensor, len, seed);
	return h ? h : 1;
}

static struct memo_entry *find(const struct keymemo *m, uint64_t h, const uint8_t identity[32],
			       const char *tensor)
{
	for (size_t i = (size_t)h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct memo_entry *e = &m->tab[i];

		if (!e->hash || (e->hash == h && memcmp(e->identity, identity, 32) == 0 &&
				 strcmp(e->tensor, tensor) == 0))
			return e;
	}
}

bool keymemo_get(const struct keymemo *m, const uint8_t identity[32], const char *tensor,
		 uint8_t ret_key[32])
{
	const struct memo_entry *e;

	if (!m || !m->n || zero_identity(identity))
		return false;
	e = find(m, hash_of(identity, tensor, strlen(tensor)), identity, tensor);
	if (!e->hash)
		return false;
	memcpy(ret_key, e->key, 32);
	return true;
}

/* Twice the size (at least 64 slots), entries moved: the table stays at most half full. */
static int grow(struct keymemo *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	struct memo_entry *nt = calloc(ncap, sizeof(*nt)), *old = m->tab;
	size_t ocap = m->cap;

	if (!nt)
		return -1;
	m->tab = nt;
	m->cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].hash)
			*find(m, old[i].hash, old[i].identity, old[i].tensor) = old[i];
	free(old);
	return 0;
}

void keymemo_put(struct keymemo *m, const uint8_t identity[32], const char *tensor,
		 const uint8_t key[32])
{
	size_t len;
	uint64_t h;
	struct memo_entry *e;

	if (!m || zero_identity(identity))
		return;
	if (m->n >= m->max)
		clear(m);   /* the bound: start again rather than track recency */
	if ((m->n + 1) * 2 > m->cap && grow(m) < 0)
		return;
	len = strlen(tensor);
	h = hash_of(identity, tensor, len);
	e = find(m, h, identity, tensor);
	if (e->hash) {
		memcpy(e->key, key, 32);
		return;
	}
	e->tensor = malloc(len + 1);
	if (!e->tensor)
		return;
	memcpy(e->tensor, tensor, len + 1);
	e->hash = h;
	memcpy(e->identity, identity, 32);
	memcpy(e->key, key, 32);
	m->n++;
}
