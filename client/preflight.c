/* SPDX-License-Identifier: Apache-2.0 */
/* preflight.c - a preflight reply as libweightd hands it out: what a unit would make (dtype,
 * shape, bytes, identity of each output), read from the daemon's reply without making anything. */
#include "internal.h"

#include <stdlib.h>

struct preflight {
	weightd_preflight pub;
	Weightd__Response *resp;     /* backs the strings and shapes */
	weightd_output_info *outs;
};

int wc_preflight_from_reply(Weightd__Response *resp, weightd_preflight **ret, weightd_error *err)
{
	const Weightd__UnitReply *ur = resp->preflight;
	struct preflight *p;
	size_t n = ur ? ur->n_weights : 0;

	for (size_t i = 0; i < n; i++) {
		int rc = wc_weight_info_check(ur->weights[i], err);

		if (rc < 0) {
			wd_msg_free(resp);
			return rc;
		}
	}
	p = calloc(1, sizeof(*p));
	if (p)
		p->outs = calloc(n ? n : 1, sizeof(*p->outs));
	if (!p || !p->outs) {
		free(p);
		wd_msg_free(resp);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const Weightd__WeightInfo *wi = ur->weights[i];
		weightd_output_info *o = &p->outs[i];

		o->name = wi->name;
		o->dtype = wi->dtype;
		o->ndim = wi->n_shape;
		o->shape = wi->shape;
		o->nbytes = wi->nbytes;
		o->alias_of = wi->alias_of ? wi->alias_of : "";
		o->key = wi->key.len == WEIGHTD_DIGEST_LEN ? wi->key.data : NULL;
	}
	p->resp = resp;
	p->pub.count = n;
	p->pub.outputs = p->outs;
	*ret = &p->pub;
	return 0;
}

void weightd_preflight_free(weightd_preflight *pub)
{
	struct preflight *p = (struct preflight *)pub;

	if (!p)
		return;
	wd_msg_free(p->resp);
	free(p->outs);
	free(p);
}
