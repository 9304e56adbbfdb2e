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

/* Tensor names are copied into chunks one after another, not each into an allocation of its
 * own: a unit's entries are usually looked up in the order they were remembered, so their names
 * are then read in address order too. */
#define NAMES_CHUNK (64 * 1024)

struct names_chunk {
	struct names_chunk *next;
	size_t used, cap;
	char text[];
};

struct keymemo {
	struct memo_entry *e;        /* dense: n of cap */
	size_t n, cap, max;
	struct wd_hashidx ix;        /* by hash_of: position in e */
	struct names_chunk *names;   /* the newest first */
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
	while (m->names) {
		struct names_chunk *next = m->names->next;

		free(m->names);
		m->names = next;
	}
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

static bool memo_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct memo_entry *e = &((const struct keymemo *)ctx)->e[pos];
	const struct memo_key *k = key;

	return e->hash == k->hash && memcmp(e->identity, k->identity, 32) == 0 &&
	       strcmp(e->tensor, k->tensor) == 0;
}

void keymemo_prefetch(const struct keymemo *m, const uint8_t identity[32], const char *tensor)
{
	if (m && m->n)
		wd_hashidx_prefetch(&m->ix, hash_of(identity, tensor, strlen(tensor)));
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

/* A copy of tensor (len bytes and a NUL) in the memo's chunks; NULL when out of memory. */
static char *copy_name(struct keymemo *m, const char *tensor, size_t len)
{
	struct names_chunk *c = m->names;
	char *p;

	if (!c || c->cap - c->used < len + 1) {
		size_t cap = len + 1 > NAMES_CHUNK ? len + 1 : NAMES_CHUNK;

		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->used = 0;
		c->cap = cap;
		c->next = m->names;
		m->names = c;
	}
	p = memcpy(c->text + c->used, tensor, len + 1);
	c->used += len + 1;
	return p;
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
	if (wd_hashidx_reserve(&m->ix, m->n + 1) < 0)
		return;
	len = strlen(tensor);
	k.hash = hash_of(identity, tensor, len);
	k.identity = identity;
	k.tensor = tensor;
	i = wd_hashidx_slot(&m->ix, k.hash, memo_eq, m, &k);
	if (wd_hashidx_pos(&m->ix, i)) {
		memcpy(m->e[wd_hashidx_pos(&m->ix, i) - 1].key, key, 32);
		return;
	}
	e = &m->e[m->n];
	e->tensor = copy_name(m, tensor, len);
	if (!e->tensor)
		return;
	e->hash = k.hash;
	memcpy(e->identity, identity, 32);
	memcpy(e->key, key, 32);
	wd_hashidx_set(&m->ix, i, k.hash, (uint32_t)m->n++);
}
