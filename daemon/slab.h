/* SPDX-License-Identifier: Apache-2.0 */
/* slab.h - fixed-size objects carved from 2 MiB chunks the kernel may back with huge pages.
 * Main thread only (no locking). */
#ifndef WD_SLAB_H
#define WD_SLAB_H

/*
 * Why: the cache's weights live as long as the cache keeps them, and a unit of 100,000 weights
 * walks 100,000 of them several times per request. Each weight on its own heap allocation would put
 * 8 of them on a 4 KiB page: 100,000 weights span 12,500 pages, far more than the CPU's TLB
 * maps, so every weight a walk touched would be a page-table walk as well as a cache miss (on a
 * virtual machine, an expensive one). Here a chunk is 2 MiB, aligned and advised for
 * transparent huge pages, holding about 5,000 weights: 100,000 weights are 20 TLB entries.
 *
 * Objects are 64-byte aligned and zeroed when handed out. A chunk whose objects are all free
 * is unmapped, except one kept as a spare so that a count hovering at a chunk's edge does not
 * map and unmap a chunk each time. Built with AddressSanitizer, every object is its own heap
 * allocation instead, so that the sanitizer's checks and leak report still see each one.
 */

#include <stddef.h>

#define SLAB_CHUNK ((size_t)2 << 20)

/* SLAB_PLAIN: objects are heap allocations of their own (AddressSanitizer builds). */
#if defined(__SANITIZE_ADDRESS__)
#define SLAB_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_PLAIN 1
#endif
#endif

struct slab_chunk;

struct slab {
	size_t size;                 /* object size, rounded up to 64 */
	size_t per_chunk;            /* objects per chunk */
	struct slab_chunk *partial;  /* chunks with a free object (a doubly linked list) */
	struct slab_chunk *spare;    /* an empty chunk kept mapped, or NULL */
	struct slab_chunk *all;      /* every chunk mapped (a singly linked list) */
	size_t chunks;               /* chunks mapped, the spare included */
	size_t used;                 /* objects handed out */
};

/* An empty slab of objects of `size` bytes (at most SLAB_CHUNK / 4). Maps nothing yet. */
void slab_init(struct slab *s, size_t size);
/* A zeroed object, 64-byte aligned, or NULL when out of memory. */
void *slab_alloc(struct slab *s);
/* Give back an object of this slab (NULL is ignored). */
void slab_free(struct slab *s, void *p);
/* Unmap every chunk; objects still handed out are gone with them. */
void slab_fini(struct slab *s);

#endif
