/* SPDX-License-Identifier: Apache-2.0 */
/* request_holds.c - share and release: the replies to a client's requests on the weights it
 * holds (the checks and the table are holds.c's). Main thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "request_holds.h"

#include "cache.h"
#include "catalog.h"
#include "daemon.h"
#include "give.h"
#include "holds.h"
#include "log.h"
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

struct give_one {
	const struct weight *w;
};

static void give_one_entry(void *arg, size_t i, uint32_t *ret_seg, uint64_t *ret_off,
			   uint64_t *ret_len)
{
	const struct give_one *one = arg;

	(void)i;
	*ret_seg = 0;
	*ret_off = one->w->offset;
	/* a share is of a weight the client holds through the very object it shares (alive while
	 * the share is answered), so the client's own lock covers it */
	*ret_len = 0;
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
	/* the client's own description of the segment, locked over the weight (give.c); with
	 * hold_locks off, weightd's own: either is lent, held (by the client's holds, or by the
	 * client's reference twice now) while it is sent */
	fd = w->segment->seg.ro_fd;
	if (s->d->cfg->hold_locks) {
		struct give_one one = { w };

		if (give_fds(&s->holds, &w->segment, 1, 1, give_one_entry, &one, &fd, &err) < 0) {
			holds_release(&s->holds, w->id);
			session_send_error(s, id, &err);
			return;
		}
	}
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

/* May the client read every checkpoint weight w reads? A re-adopted weight names them joined by
 * '+' (cache_join_sources); a list cut short names one that is not served, so: no. */
static bool may_read(struct session *s, const struct weight *w)
{
	char names[sizeof(w->source)], *save = NULL, *name;
	bool any = false;

	snprintf(names, sizeof(names), "%s", w->source);
	for (name = strtok_r(names, "+", &save); name; name = strtok_r(NULL, "+", &save)) {
		const struct csource *cs = catalog_find(s->d->catalog, name);

		if (!cs || !catalog_allowed(cs, &s->peer))
			return false;
		any = true;
	}
	return any && (!w->source[0] || w->source[strlen(w->source) - 1] != '+');
}

/* The inode of sg's object (recorded when it was made or adopted). */
static uint64_t seg_ino(struct cache_segment *sg)
{
	struct stat st;

	if (!sg->ino && fstat(sg->seg.ro_fd, &st) == 0)
		sg->ino = (uint64_t)st.st_ino;
	return sg->ino;
}

void request_holds_reattach(struct session *s, uint64_t id, const Weightd__Reattach *ra)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__ReattachReply rr = WEIGHTD__REATTACH_REPLY__INIT;
	size_t n = ra->n_ino;
	uint64_t *handles = NULL, *segments = NULL, attached = 0;
	uint64_t refs_left = 4 * (uint64_t)s->d->cfg->max_unit_entries;
	weightd_error err;

	if (ra->n_offset != n || ra->n_nbytes != n || ra->n_count != n ||
	    ra->keys.len != n * 32) {
		session_fail(s, id, WEIGHTD_E_INVALID_ARGUMENT,
			     "a reattach request whose columns differ in length (%zu inodes, %zu "
			     "offsets, %zu sizes, %zu counts, %zu key bytes)", n, ra->n_offset,
			     ra->n_nbytes, ra->n_count, ra->keys.len);
		return;
	}
	if (n > s->d->cfg->max_unit_entries) {
		session_fail(s, id, WEIGHTD_E_LIMIT_EXCEEDED,
			     "limit exceeded: a reattach of %zu weights; at most %u (max_unit_entries)",
			     n, s->d->cfg->max_unit_entries);
		return;
	}
	handles = calloc(n ? n : 1, sizeof(*handles));
	segments = calloc(n ? n : 1, sizeof(*segments));
	if (!handles || !segments) {
		free(handles);
		free(segments);
		session_fail(s, id, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct weight *w = cache_find(s->d->cache, ra->keys.data + 32 * i);
		struct cache_segment *sg = w ? w->segment : NULL;
		uint32_t count = ra->count[i];

		/* the very weight at the very place the client maps, of checkpoints it may read */
		if (!w || count == 0 || !sg->created || w->offset != ra->offset[i] ||
		    w->nbytes != ra->nbytes[i] || seg_ino(sg) != ra->ino[i] || !may_read(s, w))
			continue;
		/* a count the client says is work on the main thread: bounded per weight by the
		 * client's reference limit, and per request to a few references a weight (beyond,
		 * the weight stays counted as mapped, its lock protecting it all the same) */
		if ((s->d->cfg->client_max_weights &&
		     s->holds.refs + count > s->d->cfg->client_max_weights) ||
		    count > refs_left)
			continue;
		wd_error_clear(&err);
		if (holds_check(&s->holds, &sg, 1, count, &err) < 0)
			continue; /* over its limits: its memory stays counted as mapped */
		refs_left -= count;
		for (uint32_t k = 0; k < count; k++) {
			cache_hold(s->d->cache, w);
			if (holds_hold(&s->holds, w) < 0) {
				/* out of memory: none of them, as if it were not there */
				cache_drop(s->d->cache, w);
				while (k--)
					holds_release(&s->holds, w->id);
				handles[i] = 0;
				break;
			}
			handles[i] = w->id;
		}
		if (handles[i]) {
			segments[i] = sg->id;
			attached++;
		}
	}
	log_info("client %llu (pid %d) re-attached %llu of the %zu weights it held before the "
		 "restart", (unsigned long long)s->id, (int)s->peer.pid,
		 (unsigned long long)attached, n);
	rr.n_handle = n;
	rr.handle = handles;
	rr.n_segment = n;
	rr.segment = segments;
	resp.body_case = WEIGHTD__RESPONSE__BODY_REATTACH;
	resp.reattach = &rr;
	resp.id = id;
	session_send(s, &resp, NULL, 0);
	free(handles);
	free(segments);
}
