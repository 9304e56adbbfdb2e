/* SPDX-License-Identifier: Apache-2.0 */
/* frame_int.h - what frame_send.c and frame_recv.c share: the header's byte order, closing a run
 * of fds, and the rule that each batch of fds travels with at least one byte. */
#ifndef WD_FRAME_INT_H
#define WD_FRAME_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "frame.h"

static inline void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Close fds[from..to); fds may be NULL when the range is empty. */
static inline void close_fds(const int *fds, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/*
 * A frame of `bytes` bytes (header included) can carry `nfds` fds only if every batch of
 * WD_FRAME_FDS_PER_MSG fds gets at least one byte of its own.
 */
static inline bool fds_fit(size_t bytes, size_t nfds)
{
	return (nfds + WD_FRAME_FDS_PER_MSG - 1) / WD_FRAME_FDS_PER_MSG <= bytes;
}

#endif
