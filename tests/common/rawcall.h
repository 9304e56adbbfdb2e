/* SPDX-License-Identifier: Apache-2.0 */
/* rawcall.h - one request and its answer on a raw connection, packed and unpacked with the
 * generated protobuf-c code (proto/weightd.proto) and framed by src/frame.h, not through
 * libweightd: for tests that send what the library would not, or read replies as they are
 * (rawcall.c). */
#ifndef WD_RAWCALL_H
#define WD_RAWCALL_H

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>

#include "frame.h"
#include "weightd.pb-c.h"

/* A unit entry named `name` whose recipe is one source node: ckpt/tensor as stored. */
struct it_src_entry {
	Weightd__UnitEntry e;
	Weightd__Recipe rec;
	Weightd__Node node, *np;
};

void it_src_entry(struct it_src_entry *s, const char *name, const char *ckpt, const char *tensor);

/* Wait (10 s at most) for the next whole message on sock, read through `in`, into *fr. */
void it_raw_next(struct wd_inbuf *in, int sock, struct wd_frame *fr);

/*
 * Send req as one frame and wait (10 s at most) for the one message that answers it; returns it
 * unpacked (free with weightd__response__free_unpacked). The fds that came with it go to
 * *ret_fds / *ret_nfds (malloc'd, the caller closes and frees them), or, with ret_fds NULL,
 * there must be none.
 */
Weightd__Response *it_raw_call(int sock, Weightd__Request *req, int **ret_fds, uint32_t *ret_nfds);

#endif
