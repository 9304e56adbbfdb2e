/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_unitreply.c - feeds arbitrary bytes as weightd's answer to a unit: libweightd's reply
 * checks (the PackedWeights columns), the weights made from a reply that passes, and validating
 * them (every segment mapped). Whatever the bytes say, nothing may crash, leak an fd or a
 * mapping, or read outside what was checked. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "fake_client.h"
#include "msg.h"
#include "unit.h"
#include "weight.h"
#include "weightd/client.h"

/*
 * Input: byte 0 gives the number of fds that come with the reply (bits 1-2: 0 to 3, each a 4 KiB
 * memfd; bit 0 is not used, so inputs written when it picked a connection still read the same);
 * the rest is the Response. The unit is always the same: three whole-tensor slots (one declared
 * F32 [2, 3]) and two aliases, one of the other. A stand-in daemon answers the connection's
 * hello and takes the releases libweightd sends back.
 */
static struct fake *fake;
static weightd_client *client;

/* Only releases come after the hello, quiet ones (answered by weightd only when they fail):
 * replying would fill a socket nobody reads. */
static void on_request(struct fake *f, const Weightd__Request *req)
{
	(void)f;
	(void)req;
}

/* Forget the requests a fake recorded and has handled (it keeps a bounded number). Requests are
 * recorded and handled in order, so those are the first `handled`; one being handled is kept. */
static void forget(struct fake *f)
{
	size_t h;

	pthread_mutex_lock(&f->mu);
	h = atomic_load(&f->handled);
	for (size_t i = 0; i < h; i++)
		weightd__request__free_unpacked(f->reqs[i], NULL);
	memmove(f->reqs, f->reqs + h, (f->n_reqs - h) * sizeof(f->reqs[0]));
	f->n_reqs -= h;
	atomic_fetch_sub(&f->handled, h);
	pthread_mutex_unlock(&f->mu);
}

static void init(void)
{
	if (!client)
		client = fake_connect_for_life(on_request, "fuzz_unitreply", &fake);
}

static weightd_unit *make_unit(weightd_client *c)
{
	static const uint64_t shape[] = { 2, 3 };
	weightd_unit *u = NULL;
	weightd_error err;
	static void *dest[5];

	if (weightd_unit_new(c, &u, &err) < 0 ||
	    weightd_unit_slot(u, "a", NULL, NULL, 0, &dest[0], &err) < 0 ||
	    weightd_unit_slot(u, "b", "F32", shape, 2, &dest[1], &err) < 0 ||
	    weightd_unit_slot(u, "c", NULL, NULL, 0, &dest[2], &err) < 0 ||
	    weightd_unit_slot(u, "x", NULL, NULL, 0, &dest[3], &err) < 0 ||
	    weightd_unit_slot(u, "y", NULL, NULL, 0, &dest[4], &err) < 0 ||
	    weightd_unit_set_tensor(u, "a", "m", "a", NULL, &err) < 0 ||
	    weightd_unit_set_tensor(u, "b", "m", "b", NULL, &err) < 0 ||
	    weightd_unit_set_tensor(u, "c", "n", "t", NULL, &err) < 0 ||
	    weightd_unit_set_alias(u, "x", "a", &err) < 0 ||
	    weightd_unit_set_alias(u, "y", "x", &err) < 0) {
		fprintf(stderr, "fuzz_unitreply: building the unit: %s\n", err.message);
		abort();
	}
	return u;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t page[4096];
	weightd_client *c;
	Weightd__Response *resp;
	weightd_unit *u;
	weightd_error err;
	uint32_t nfds;
	int *fds;

	if (size < 1)
		return 0;
	init();
	c = client;
	nfds = (data[0] >> 1) & 3;
	resp = wd_msg_unpack_cached(&weightd__response__descriptor, data + 1, size - 1,
				    wc_conn_msgs(c));
	if (!resp)
		return 0;
	fds = malloc((nfds ? nfds : 1) * sizeof(*fds));
	if (!fds)
		abort();
	for (uint32_t i = 0; i < nfds; i++) {
		memset(page, (int)i, sizeof(page));
		fds[i] = fake_memfd(page, sizeof(page));
	}
	if (resp->error || resp->body_case != WEIGHTD__RESPONSE__BODY_MATERIALIZE) {
		/* what wc_conn_pending_take refuses before a reply reaches the unit: given back whole */
		wc_conn_discard(c, wc_weight_reply_refs, resp, fds, nfds);
		forget(fake);
		return 0;
	}
	u = make_unit(c);
	/* takes resp and fds in every case; holds the unit on success */
	if (wc_unit_take_reply(u, resp, fds, nfds, &err) == 0 &&
	    weightd_unit_validate(u, &err) == 0)
		weightd_unit_bind(u); /* cannot fail once validated */
	weightd_unit_free(u);
	forget(fake);
	return 0;
}
