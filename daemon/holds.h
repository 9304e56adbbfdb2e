/* SPDX-License-Identifier: Apache-2.0 */
/* holds.h - what one client holds: the weights it has references on, the segments they lie in,
 * and the unit requests it has in flight (what they will add), with the per-client and per-uid
 * limits on them. Main thread only. */
#ifndef WD_HOLDS_H
#define WD_HOLDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "wd_hashidx.h"

struct cache;
struct cache_segment;
struct config;
struct held_segment;
struct csource_stats;
struct uid_usage;
struct weight;

/* A checkpoint one client holds weights of: `weights` of them (each counted once). */
struct held_checkpoint {
	struct csource_stats *stats;
	uint64_t weights;
};

/* The description of a segment this client is given (give.c): one per segment, so that every fd
 * the client gets for it is the same description, the one it keeps and locks on. */
struct holds_segfd {
	uint64_t seg_id;
	int fd;
};

struct held {
	struct weight *w;
	uint64_t id;	/* w->id, here so that a lookup by handle does not touch w */
	uint32_t count; /* references this client holds on w */
};

/*
 * One client's holds. Readable by anyone; written only by holds.c (its uid's segments, weights
 * and pending counts follow). Zeroed memory is an empty set that holds_init makes usable.
 */
struct holds {
	struct cache *cache;
	const struct config *cfg;
	struct uid_usage *uu; /* its uid's totals (NULL: none, e.g. unit tests) */
	uint64_t client;      /* the session's id, for the log */
	bool exempt;	      /* root or the daemon's user: no per-uid limit */
	struct held *held;    /* dense: in the order taken, until a release moves the last one */
	size_t n_held, cap_held;
	struct wd_hashidx held_index; /* by weight id: position in held, for held[0, n_indexed) */
	/* the newest holds are indexed only when a lookup needs them: a unit bound and then freed
	 * whole never touches the index */
	size_t n_indexed;
	uint64_t held_bytes;	   /* bytes of the distinct weights held */
	uint64_t refs;		   /* references held: a weight held twice counts twice */
	struct held_segment *segs; /* segments held in: dense, unordered */
	size_t n_segs, segs_cap;
	struct wd_hashidx segs_index; /* by segment id: position in segs */
	/* the checkpoints it holds weights of, for their count of clients: few, searched in
	 * order (the last one found first) */
	struct held_checkpoint *ckpts;
	size_t n_ckpts, cap_ckpts, last_ckpt;
	struct holds_segfd *segfds;   /* dense, few: searched in order (the last one found first) */
	size_t n_segfds, cap_segfds, last_segfd;
	uint32_t pending;	      /* unit requests not yet answered */
	uint64_t pending_bytes;	      /* bytes of weights those requests will add */
	uint32_t pending_weights;     /* references they will add (one per entry) */
	uint64_t unit_memory;	      /* heap its unit requests are counted for (holds_unit_memory) */
};

/* Make h (zeroed, or after holds_free) an empty set of client `client`: weights go back to
 * `cache`, limits are read from cfg (NULL when holds_check is never called), and uu's counts
 * follow (uu may be NULL). */
void holds_init(struct holds *h, struct cache *cache, const struct config *cfg,
		struct uid_usage *uu, uint64_t client, bool exempt);
/* The client is gone: every reference goes back to the cache (mappings it made stay valid in its
 * own process), its requests in flight stop counting, and h leaves its uid. */
void holds_clear(struct holds *h);
/* Free what h allocated (after holds_clear, or when nothing was held). */
void holds_free(struct holds *h);

/* Record one more reference of this client on w (the cache reference is already taken). */
int holds_hold(struct holds *h, struct weight *w);
/* holds_hold of a weight the caller looked up with holds_find since the last hold or release
 * (found: what that returned), so that a large unit looks each weight up once. */
int holds_hold_found(struct holds *h, struct weight *w, struct held *found);
/* Give back one reference on the weight of `handle`; false if the client holds none. */
bool holds_release(struct holds *h, uint64_t handle);
/*
 * The release of a unit's free: handles[0..n) give back every reference on the weights held
 * last, in the order they were taken (each handle as many times in a row as it is held). Then
 * they are released in one pass, with no lookup, and true is returned; otherwise nothing changes
 * and false says to release them one by one.
 */
bool holds_release_newest(struct holds *h, const uint64_t *handles, size_t n);
/*
 * Release handles[0..n), all or nothing: a handle may appear as often as the client holds it.
 * 0; -WEIGHTD_E_NOT_FOUND with *ret_missing the first handle not held (as many times) and
 * nothing released; -WEIGHTD_E_RESOURCE_EXHAUSTED when out of memory, nothing released.
 * Linear in n.
 */
int holds_release_all(struct holds *h, const uint64_t *handles, size_t n, uint64_t *ret_missing);
/*
 * Another reference for a weight the client holds (the client's and the cache's): *ret_w is it.
 * A reference counts toward the weight limits like a weight of its own (otherwise shares of one
 * weight would pass them). -WEIGHTD_E_NOT_FOUND when it holds none of `handle`,
 * -WEIGHTD_E_LIMIT_EXCEEDED at client_max_weights or (exempt clients aside) uid_max_weights, with
 * err naming the limit and the counts, -WEIGHTD_E_RESOURCE_EXHAUSTED when out of memory; nothing
 * changes then.
 */
int holds_share(struct holds *h, uint64_t handle, struct weight **ret_w, weightd_error *err);
/* The hold of the weight of `handle`, or NULL. */
struct held *holds_find(struct holds *h, uint64_t handle);
/* Is the client holding a weight of sg? */
bool holds_segment(const struct holds *h, const struct cache_segment *sg);
/*
 * The client's own description of sg (read-only, opened the first time and kept while the
 * client holds weights of sg): what every reply's fd for sg is, so that the locks weightd takes
 * on it for a reply are the client's own (src/holdlock.h). Borrowed: the holds close it. -1 with
 * errno set when it cannot be opened.
 */
int holds_segment_fd(struct holds *h, struct cache_segment *sg);
/* Let go of the descriptions of segments given but never held (a reply that failed) once they
 * outnumber what the client holds; before a reply takes any (its own would go too). */
void holds_segment_fds_trim(struct holds *h);
/*
 * May the client take new_refs more references on weights lying in segs[0..n) (distinct
 * segments)? Checks client_max_segments, and (exempt clients aside, as from the other per-uid
 * limits) uid_max_segments as uid_max_segments gives it and uid_max_weights, which counts
 * references (a weight held twice, by one connection or two, counts twice); 0, or
 * -WEIGHTD_E_LIMIT_EXCEEDED naming the limit, its value and the counts.
 */
int holds_check(const struct holds *h, struct cache_segment *const *segs, size_t n,
		uint64_t new_refs, weightd_error *err);

/*
 * May the client's uid hold `bytes` more bytes of weights (not held by this client yet, or being
 * made for it)? Its share is uid_budget_share percent of `budget`, over all its connections with
 * their requests in flight; root, the daemon's user and the users of budget_users may hold the
 * whole budget. 0, or -WEIGHTD_E_LIMIT_EXCEEDED naming the share, the counts and the keys to
 * raise.
 */
int holds_check_budget(const struct holds *h, uint64_t bytes, uint64_t budget, weightd_error *err);

/*
 * A request is about to be decoded, or a unit planned (its outputs, names, plans and jobs),
 * taking about `bytes` of daemon heap (`what`: the error's words for it, "a unit of N entries"):
 * 0 and it counts (the client's and its uid's) until holds_unit_memory_done with the same bytes,
 * or -WEIGHTD_E_LIMIT_EXCEEDED naming uid_max_unit_memory and the counts when it would take the
 * uid past that (root and the daemon's user are counted, never refused). `alone`: only `bytes`
 * itself is held to the limit (requests are decoded one at a time, so a decode never adds to
 * another; it is counted all the same, so that the unit it carries sees it).
 */
int holds_unit_memory(struct holds *h, uint64_t bytes, bool alone, const char *what,
		      weightd_error *err);
void holds_unit_memory_done(struct holds *h, uint64_t bytes);

/* A unit request will add `weights` references and `bytes` bytes of weights not held yet: it
 * counts as pending (the client's and its uid's) until holds_pending_done with the same figures. */
void holds_pending_add(struct holds *h, uint64_t bytes, uint32_t weights);
void holds_pending_done(struct holds *h, uint64_t bytes, uint32_t weights);

#endif
