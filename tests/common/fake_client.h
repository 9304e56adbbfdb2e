/* SPDX-License-Identifier: Apache-2.0 */
/* fake_client.h - libweightd connected to a fake weightd (fake_weightd.h): the connection and
 * the checks libweightd's unit tests share (fake_client.c; its checks fail the cmocka test). */
#ifndef WD_TEST_FAKE_CLIENT_H
#define WD_TEST_FAKE_CLIENT_H

#include "fake_weightd.h"
#include "weightd/client.h"

/* A fake weightd and a client connected to it. */
struct fake_client {
	struct fake *f;
	weightd_client *c;
	int fds_before;              /* this process's fds once connected */
};

/*
 * Start a fake answering with h (ctx for it) whose hello names `version` (0: FAKE_VERSION) and
 * connect to it. 0, or -1 (a failed cmocka setup) when connecting fails or fds or mappings of
 * fake weights are open already.
 */
int fake_client_start(struct fake_client *fc, fake_handler h, void *ctx, unsigned version);

void fake_client_stop(struct fake_client *fc);

/*
 * For programs that keep one connection for their whole life (fuzzers): a fake answering with
 * h and a client connected to it as `who`, both closed at exit; *ret_fake the fake when not NULL.
 * Aborts when it cannot connect.
 */
weightd_client *fake_connect_for_life(fake_handler h, const char *who, struct fake **ret_fake);

/* Handles released so far, after a round trip that guarantees the fake saw every release (the
 * fake must answer a list). */
size_t fake_client_released(struct fake_client *fc, uint64_t *rel, size_t cap);

/* Nothing is held: the fds are those there were once connected, and no fake weight is open or
 * mapped. */
void fake_client_assert_idle(struct fake_client *fc);

/* p holds the bytes fake_content makes for name. */
void fake_assert_content(const void *p, const char *name, size_t n);

#endif
