/* SPDX-License-Identifier: Apache-2.0 */
/* slab.c - fixed-size objects in 2 MiB chunks advised for huge pages (slab.h says why). */
#include "slab.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* At the start of every chunk; the objects follow, from the first 64-byte boundary after it.
 * An object's chunk is its address rounded down to SLAB_CHUNK. */
struct slab_chunk {
	struct slab_chunk *prev, *next; /* in s->partial, while listed */
	struct slab_chunk *all_next;    /* every chunk mapped (s->all) */
	void *free;                     /* freed objects, linked through their first word */
	size_t used;                    /* objects handed out */
	size_t carved;                  /* objects ever handed out: the rest are untouched */
	bool listed;
};

#define SLAB_HEAD (((sizeof(struct slab_chunk) + 63) / 64) * 64)

void slab_init(struct slab *s, size_t size)
{
	memset(s, 0, sizeof(*s));
	s->size = size ? ((size + 63) / 64) * 64 : 64;
	s->per_chunk = (SLAB_CHUNK - SLAB_HEAD) / s->size;
}

#ifdef SLAB_PLAIN

void *slab_alloc(struct slab *s)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, s->size) != 0)
		return NULL;
	memset(p, 0, s->size);
	s->used++;
	return p;
}

void slab_free(struct slab *s, void *p)
{
	if (!p)
		return;
	s->used--;
	free(p);
}

void slab_fini(struct slab *s)
{
	s->used = 0;
}

#else

static struct slab_chunk *chunk_of(const void *p)
{
	return (struct slab_chunk *)((uintptr_t)p & ~(uintptr_t)(SLAB_CHUNK - 1));
}

/* A new chunk, aligned to its size (what a huge page needs): twice the size is mapped and the
 * ends beyond the aligned middle are unmapped again. */
static struct slab_chunk *chunk_map(void)
{
	uint8_t *m = mmap(NULL, 2 * SLAB_CHUNK, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *a;

	if (m == MAP_FAILED)
		return NULL;
	a = (uint8_t *)(((uintptr_t)m + SLAB_CHUNK - 1) & ~(uintptr_t)(SLAB_CHUNK - 1));
	if (a > m)
		munmap(m, (size_t)(a - m));
	if (a + SLAB_CHUNK < m + 2 * SLAB_CHUNK)
		munmap(a + SLAB_CHUNK, (size_t)(m + 2 * SLAB_CHUNK - (a + SLAB_CHUNK)));
	madvise(a, SLAB_CHUNK, MADV_HUGEPAGE); /* advice: without it, 4 KiB pages as before */
	return (struct slab_chunk *)(void *)a; /* anonymous memory: the header is zero already */
}

static void list_add(struct slab *s, struct slab_chunk *c)
{
	c->prev = NULL;
	c->next = s->partial;
	if (s->partial)
		s->partial->prev = c;
	s->partial = c;
	c->listed = true;
}

static void list_remove(struct slab *s, struct slab_chunk *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		s->partial = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	c->listed = false;
}

void *slab_alloc(struct slab *s)
{
	struct slab_chunk *c = s->partial;
	void *p;

	if (!c) {
		c = s->spare;
		s->spare = NULL;
		if (!c) {
			c = chunk_map();
			if (!c)
				return NULL;
			c->all_next = s->all;
			s->all = c;
			s->chunks++;
		}
		list_add(s, c);
	}
	if (c->free) {
		p = c->free;
		memcpy(&c->free, p, sizeof(void *));
	} else {
		p = (uint8_t *)c + SLAB_HEAD + c->carved * s->size;
		c->carved++;
	}
	c->used++;
	if (c->used == s->per_chunk)
		list_remove(s, c);
	s->used++;
	memset(p, 0, s->size);
	return p;
}

void slab_free(struct slab *s, void *p)
{
	struct slab_chunk *c;

	if (!p)
		return;
	c = chunk_of(p);
	memcpy(p, &c->free, sizeof(void *));
	c->free = p;
	c->used--;
	s->used--;
	if (!c->listed)
		list_add(s, c);
	if (c->used)
		return;
	/* empty: kept as the spare (forgetting its objects), or unmapped */
	list_remove(s, c);
	if (!s->spare) {
		c->free = NULL;
		c->carved = 0;
		s->spare = c;
		return;
	}
	for (struct slab_chunk **pp = &s->all; *pp; pp = &(*pp)->all_next)
		if (*pp == c) {
			*pp = c->all_next;
			break;
		}
	munmap(c, SLAB_CHUNK);
	s->chunks--;
}

void slab_fini(struct slab *s)
{
	while (s->all) {
		struct slab_chunk *c = s->all;

		s->all = c->all_next;
		munmap(c, SLAB_CHUNK);
	}
	s->partial = s->spare = NULL;
	s->chunks = 0;
	s->used = 0;
}

#endif
