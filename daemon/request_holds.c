/* SPDX-License-Identifier: Apache-2.0 */
/* request_holds.c - share and release: the replies to a client's requests on the weights it
 * holds (the checks and the table are holds.c's). Main thread only. */
#include <stdio.h>

#include "request_holds.h"

#include "daemon.h"
#include "holds.h"
#include "request.h"
#include "session.h"

/* A reply's WeightInfo for w named `name` (strings and bytes borrowed from w). */
static void weight_info(Weightd__WeightInfo *wi, const struct weight *w, const char *name)
{
	weightd__weight_info__init(wi);
	wi->name = (char *)name;
	wi->handle = w->id;
	wi->dtype = (char *)wd_dtype_name(w->dtype);
	wi->n_shape = (size_t)w->ndim;
	wi->shape = (uint64_t *)w->shape;
	wi->nbytes = w->nbytes;
	wi->digest.data = (uint8_t *)w->digest;
	wi->digest.len = wd_digest_len(w->digest_alg);
	wi->digest_algorithm = (Weightd__DigestAlgorithm)w->digest_alg;
	wi->key.data = (uint8_t *)w->key;
	wi->key.len = 32;
	wi->generation = w->generation;
	wi->segment = w->segment->id;
	wi->offset = w->offset;
}

void request_holds_share(struct session *s, uint64_t id, const Weightd__Share *sh)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__ShareReply sr = WEIGHTD__SHARE_REPLY__INIT;
	Weightd__SegmentInfo si = WEIGHTD__SEGMENT_INFO__INIT;
	Weightd__WeightInfo wi;
	struct weight *w = NULL;
	weightd_error err;
	int fd, r;

	wd_error_clear(&err);
	r = holds_share(&s->holds, sh->handle, &w, &err);
	if (r == -WEIGHTD_E_NOT_FOUND) {
		char buf[32];
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)sh->handle);
		session_fail(s, id, WEIGHTD_E_NOT_FOUND,
			     "this client holds no weight with handle %s", buf);
		return;
	}
	if (r == -WEIGHTD_E_LIMIT_EXCEEDED) {
		session_send_error(s, id, &err);
		return;
	}
	if (r < 0) {
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	fd = w->segment->seg.ro_fd; /* lent: held by the client (twice now) while it is sent */
	weight_info(&wi, w, w->label);
	si.id = w->segment->id;
	si.size = w->segment->seg.size;
	si.fd_index = 0;
	sr.weight = &wi;
	sr.segment = &si;
	resp.body_case = WEIGHTD__RESPONSE__BODY_SHARE;
	resp.share = &sr;
	resp.id = id;
	session_send_borrowed(s, &resp, &fd, 1);
}

void request_holds_release(struct session *s, uint64_t id, const Weightd__Release *rl, bool quiet)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Empty empty = WEIGHTD__EMPTY__INIT;
	uint64_t missing = 0;
	int r;

	if (rl->n_handles > s->d->cfg->max_unit_entries) {
		session_fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED,
			     "limit exceeded: a release of %zu handles; at most %u "
			     "(max_unit_entries)",
			     rl->n_handles, s->d->cfg->max_unit_entries);
		return;
	}
	r = holds_release_all(&s->holds, rl->handles, rl->n_handles, &missing);
	if (r == -WEIGHTD_E_NOT_FOUND) {
		session_fail(
			s, id, WEIGHTD_E_NOT_FOUND,
			"this client does not hold weight %llu (as many times as it releases it)",
			(unsigned long long)missing);
		return;
	}
	if (r < 0) {
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (quiet)
		return; /* nobody waits for it: one round trip is one message each way */
	resp.body_case = WEIGHTD__RESPONSE__BODY_RELEASE;
	resp.release = &empty;
	session_reply(s, &resp, id, NULL, 0);
}
