/* SPDX-License-Identifier: Apache-2.0 */
/* msg.h - a frame's message decoded into an arena (msg.c), the blocks a connection keeps between
 * messages (wd_msg_cache), and huge-page advice for large buffers. */
#ifndef WD_MSG_H
#define WD_MSG_H

#include <stddef.h>
#include <stdint.h>

#define WD_HUGE_PAGE ((size_t)2 << 20)   /* a transparent huge page on x86-64 and arm64 */

/* Ask for transparent huge pages over the 2 MiB-aligned part of [p, p + len) (MADV_HUGEPAGE,
 * honoured in the kernel's "madvise" mode): a large buffer then faults in 2 MiB at a time. */
void wd_msg_advise_huge(void *p, size_t len);

struct ProtobufCMessageDescriptor;

/*
 * Decode a message (a frame's payload, or several joined) with every allocation protobuf-c makes
 * for it taken from one arena: a few blocks, not one malloc per field and string, and one free for
 * all. The arena grows in blocks of at most 1 MiB (or one allocation, if larger); protobuf-c's
 * own scratch space is not given back before the message is freed, so a message holds at most
 * about twice what the same decode with malloc held. Returns the message, or NULL with errno
 * EBADMSG when it does not decode or ENOMEM when memory runs out. Free it with wd_msg_free only
 * (never with protobuf-c's free_unpacked, and never a part of it).
 */
void *wd_msg_unpack(const struct ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len);
/* Free a message from wd_msg_unpack, with everything in it. Accepts NULL. */
void wd_msg_free(void *msg);

/*
 * A cache of decoding blocks for messages that come again and again at a similar size (a
 * connection's replies): wd_msg_unpack_cached takes its blocks from it and wd_msg_free gives them
 * back, up to max_bytes kept; beyond that they are freed. Thread-safe. The cache lives until its
 * owner's wd_msg_cache_unref and the free of the last message decoded into it.
 */
struct wd_msg_cache;
struct wd_msg_cache *wd_msg_cache_new(size_t max_bytes);
void wd_msg_cache_unref(struct wd_msg_cache *mc);
/* Bytes of blocks the cache holds now (at most its max_bytes). */
size_t wd_msg_cache_bytes(struct wd_msg_cache *mc);
void *wd_msg_unpack_cached(const struct ProtobufCMessageDescriptor *desc, const uint8_t *data,
			   size_t len, struct wd_msg_cache *mc);
/* A block of `size` bytes (not zeroed; aligned for any type) from the cache, or a new one when it
 * has none that large; give it back with wd_msg_free. For what is built and dropped with each
 * request (a unit's slots, its encoding, its weights). */
void *wd_msg_cache_alloc(struct wd_msg_cache *mc, size_t size);

#endif
