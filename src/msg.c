/* SPDX-License-Identifier: Apache-2.0 */
/* msg.c - decoding a frame's message into an arena, the blocks kept between messages, and
 * transparent huge pages for large ones. */
#include "msg.h"

#include <errno.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>

/* --- transparent huge pages ---------------------------------------------------------------- */

void wd_msg_advise_huge(void *p, size_t len)
{
	uintptr_t a = ((uintptr_t)p + WD_HUGE_PAGE - 1) & ~(uintptr_t)(WD_HUGE_PAGE - 1);
	uintptr_t e = ((uintptr_t)p + len) & ~(uintptr_t)(WD_HUGE_PAGE - 1);

	if (e > a)
		madvise((void *)a, e - a, MADV_HUGEPAGE);   /* advice: failure changes nothing */
}

/* --- decoding a frame's message ------------------------------------------------------------ */

#define ARENA_BLOCK_MAX (8u << 20)

/* One block of an arena; the first block's first allocation is the message itself, so the message
 * finds its arena. The blocks after the first are linked from it (the first block is the list's
 * head: the message knows only it). */
struct arena_block {
	SLIST_ENTRY(arena_block) link;
	size_t used, cap;
	size_t mapped;               /* bytes of its own mapping (huge pages), or 0: malloc'd */
	struct wd_msg_cache *cache;  /* where the blocks go when the message is freed, or NULL */
	_Alignas(max_align_t) unsigned char data[];
};

/*
 * A block of at least `cap` bytes. One of 2 MiB or more is a mapping of its own, aligned to and
 * advised for transparent huge pages (MADV_HUGEPAGE; the kernel's "madvise" mode honours it):
 * a large unit's memory then faults in 2 MiB at a time instead of 4 KiB, which on a virtual
 * machine, where a fault is expensive, would be most of what binding a 90,000-weight unit costs a
 * fresh process. Smaller blocks come from malloc.
 */
static struct arena_block *block_new(size_t cap)
{
	struct arena_block *b;
	size_t total, len;
	uintptr_t p, a;
	void *m;

	if (cap > SIZE_MAX - sizeof(*b) - 2 * WD_HUGE_PAGE)
		return NULL;
	total = sizeof(*b) + cap;
	if (total < WD_HUGE_PAGE) {
		b = malloc(total);
		if (b) {
			b->cap = cap;
			b->mapped = 0;
		}
		return b;
	}
	len = (total + WD_HUGE_PAGE - 1) & ~(WD_HUGE_PAGE - 1);
	m = mmap(NULL, len + WD_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	/* keep the aligned len bytes, give back the rest on either side */
	p = (uintptr_t)m;
	a = (p + WD_HUGE_PAGE - 1) & ~(uintptr_t)(WD_HUGE_PAGE - 1);
	if (a > p)
		munmap(m, a - p);
	if (p + len + WD_HUGE_PAGE > a + len)
		munmap((void *)(a + len), p + len + WD_HUGE_PAGE - (a + len));
	wd_msg_advise_huge((void *)a, len);
	b = (struct arena_block *)a;
	b->cap = len - sizeof(*b);
	b->mapped = len;
	return b;
}

static void block_free(struct arena_block *b)
{
	if (b && b->mapped)
		munmap(b, b->mapped);
	else
		free(b);
}

struct arena {
	struct arena_block *first, *cur;
	size_t hint;                 /* the first block's size */
	struct wd_msg_cache *cache;
	bool oom;                    /* a block could not be had */
};

/*
 * Blocks of freed messages, kept for the next ones. A large reply decodes into megabytes; malloc
 * hands blocks that size back to the kernel when they are freed, so every such reply faulted its
 * arena in anew (on a virtual machine a first touch costs microseconds a page: a 10,000-weight
 * unit reply spent more time faulting its arena in than decoding it). Holds at most `max` bytes;
 * referenced by the owner and by every message decoded into it, so a message may outlive the
 * connection it came from.
 */
struct wd_msg_cache {
	pthread_mutex_t mu;
	SLIST_HEAD(, arena_block) blocks;
	size_t bytes, max;
	atomic_uint refs;
};

struct wd_msg_cache *wd_msg_cache_new(size_t max_bytes)
{
	struct wd_msg_cache *mc = calloc(1, sizeof(*mc));

	if (!mc)
		return NULL;
	pthread_mutex_init(&mc->mu, NULL);
	SLIST_INIT(&mc->blocks);
	mc->max = max_bytes;
	atomic_init(&mc->refs, 1);
	return mc;
}

void wd_msg_cache_unref(struct wd_msg_cache *mc)
{
	struct arena_block *b;

	if (!mc || atomic_fetch_sub(&mc->refs, 1) != 1)
		return;
	while ((b = SLIST_FIRST(&mc->blocks))) {
		SLIST_REMOVE_HEAD(&mc->blocks, link);
		block_free(b);
	}
	pthread_mutex_destroy(&mc->mu);
	free(mc);
}

size_t wd_msg_cache_bytes(struct wd_msg_cache *mc)
{
	size_t n;

	pthread_mutex_lock(&mc->mu);
	n = mc->bytes;
	pthread_mutex_unlock(&mc->mu);
	return n;
}

/* A kept block of at least `cap` bytes (the smallest that fits, and at most four times that, so
 * a small request does not sit on a large block the next large one needs), or NULL. */
static struct arena_block *msg_cache_take(struct wd_msg_cache *mc, size_t cap)
{
	struct arena_block *b, *best = NULL, *prev = NULL, *best_prev = NULL;

	pthread_mutex_lock(&mc->mu);
	SLIST_FOREACH(b, &mc->blocks, link) {
		if (b->cap >= cap && b->cap / 4 <= cap && (!best || b->cap < best->cap)) {
			best = b;
			best_prev = prev;
		}
		prev = b;
	}
	if (best) {
		if (best_prev)
			SLIST_NEXT(best_prev, link) = SLIST_NEXT(best, link);
		else
			SLIST_REMOVE_HEAD(&mc->blocks, link);
		mc->bytes -= best->cap;
	}
	pthread_mutex_unlock(&mc->mu);
	return best;
}

static void *arena_alloc(void *ad, size_t size)
{
	const size_t align = _Alignof(max_align_t);
	struct arena *a = ad;
	struct arena_block *b;
	size_t cap;
	void *p;

	if (size > SIZE_MAX - align - sizeof(*b))
		return NULL;
	size = (size + align - 1) & ~(align - 1);
	if (a->cur && a->cur->cap - a->cur->used >= size) {
		p = a->cur->data + a->cur->used;
		a->cur->used += size;
		return p;
	}
	cap = a->cur ? (a->cur->cap < ARENA_BLOCK_MAX / 2 ? a->cur->cap * 2 : ARENA_BLOCK_MAX)
		     : a->hint;
	if (cap < size)
		cap = size;
	b = a->cache ? msg_cache_take(a->cache, cap) : NULL;
	if (!b) {
		b = block_new(cap);
		if (!b) {
			a->oom = true;
			return NULL;
		}
	}
	b->cache = a->cache;
	b->used = size;
	if (!a->first) {
		SLIST_NEXT(b, link) = NULL;
		a->first = b;
	} else {
		SLIST_INSERT_AFTER(a->first, b, link);
	}
	a->cur = b;
	return b->data;
}

static void arena_free(void *ad, void *p)
{
	(void)ad;   /* everything goes at once, with the message */
	(void)p;
}

/* Free an arena's blocks, or keep them in its cache while it has room; drops the arena's
 * reference on the cache. */
static void arena_release(struct arena_block *b, struct wd_msg_cache *mc)
{
	while (b) {
		struct arena_block *next = SLIST_NEXT(b, link);
		bool kept = false;

		if (mc) {
			pthread_mutex_lock(&mc->mu);
			if (mc->bytes + b->cap <= mc->max) {
				SLIST_INSERT_HEAD(&mc->blocks, b, link);
				mc->bytes += b->cap;
				kept = true;
			}
			pthread_mutex_unlock(&mc->mu);
		}
		if (!kept)
			block_free(b);
		b = next;
	}
	wd_msg_cache_unref(mc);
}

void *wd_msg_unpack_cached(const struct ProtobufCMessageDescriptor *desc, const uint8_t *data,
			   size_t len, struct wd_msg_cache *mc)
{
	/* a decoded message is typically two to four times its wire size */
	struct arena a = { NULL, NULL, len < ARENA_BLOCK_MAX / 4 ? 4 * len + 256 : ARENA_BLOCK_MAX,
			   mc, false };
	ProtobufCAllocator alloc = { arena_alloc, arena_free, &a };
	ProtobufCMessage *m;

	if (mc)
		atomic_fetch_add(&mc->refs, 1);
	m = protobuf_c_message_unpack(desc, &alloc, len, data);
	/* protobuf-c allocates the message first: it is the first block's start */
	if (!m || !a.first || (void *)m != (void *)a.first->data) {
		arena_release(a.first, mc);
		errno = a.oom ? ENOMEM : EBADMSG;
		return NULL;
	}
	return m;
}

void *wd_msg_unpack(const struct ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len)
{
	return wd_msg_unpack_cached(desc, data, len, NULL);
}

void *wd_msg_cache_alloc(struct wd_msg_cache *mc, size_t size)
{
	struct arena_block *b = mc ? msg_cache_take(mc, size) : NULL;

	if (!b) {
		b = block_new(size);
		if (!b)
			return NULL;
	}
	b->used = size;
	b->cache = mc;
	SLIST_NEXT(b, link) = NULL;
	if (mc)
		atomic_fetch_add(&mc->refs, 1);
	return b->data;
}

void wd_msg_free(void *msg)
{
	struct arena_block *first;

	if (!msg)
		return;
	first = (struct arena_block *)((unsigned char *)msg - offsetof(struct arena_block, data));
	arena_release(first, first->cache);
}
