/* SPDX-License-Identifier: Apache-2.0 */
/* inflight.h - requests whose reply a caller collects later (weightd_inflight), of any kind: the
 * kind says how its reply becomes the result (inflight.c). */
#ifndef WC_INFLIGHT_H
#define WC_INFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

struct wc_annot;
struct wc_pending;

/* What an inflight waits for, and how its reply becomes its result. */
struct wc_inflight_kind {
	int body;                    /* the reply's Weightd__Response body */
	/* Turn the reply into *ret, taking resp and fds in every case; 0 or -code with err
	 * filled. */
	int (*settle)(weightd_inflight *f, Weightd__Response *resp, int *fds, uint32_t nfds,
		      void **ret, weightd_error *err);
	void (*result_free)(void *result);
	/* Errors lead with the slot weightd names (the caller named its slots); else the slot is
	 * forgotten, so the error is about the tensor. */
	bool name_slot;
};

struct weightd_inflight {
	weightd_client *c;           /* holds a client reference */
	const struct wc_inflight_kind *kind;
	struct wc_pending *p;
	bool settled;                /* the reply has been turned into result or err */
	void *result;                /* the kind's, once settled without error */
	weightd_error err;
	struct wc_annot *annots;
	size_t n_annots;
	char checkpoint[128], tensor[256];
	char *name;                  /* a materialization's entry: its weight's name */
};

int wc_inflight_new(weightd_client *c, const struct wc_inflight_kind *kind, weightd_inflight **ret,
		    weightd_error *err);
/* Wait for the reply and turn it into f->result; returns 0 or -code with err filled. */
int wc_inflight_wait_settle(weightd_inflight *f, weightd_error *err);

#endif
