/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_holds.c - a client's held-weight index and its table of segments held in: holds,
 * finds and releases agree with a plain reference count under heavy collisions and random order,
 * and the per-client and per-uid hold limits count what they name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests.h"

#include "cache.h"
#include "daemon.h"
#include "holds.h"
#include "uid.h"

/* An empty set of holds over a fresh cache. */
static void bare_holds(struct daemon *d, struct holds *hs, struct cache_params *cp)
{
	memset(d, 0, sizeof(*d));
	memset(hs, 0, sizeof(*hs));
	d->cache = cache_new(cp);
	assert_non_null(d->cache);
	holds_init(hs, d->cache, NULL, NULL, 0, false);
}

static void bare_holds_free(struct daemon *d, struct holds *hs)
{
	holds_free(hs);
	cache_free(d->cache, false);
}

/* One random step: hold w once more (`hold`) or release it once, counting in *want. */
static void hold_or_release(struct daemon *d, struct holds *hs, struct weight *w, uint32_t *want,
			    bool hold)
{
	if (hold) {
		cache_hold(d->cache, w);
		assert_int_equal(holds_hold(hs, w), 0);
		++*want;
	} else {
		assert_true(holds_release(hs, w->id));
		--*want;
	}
}

#define N 5000

static void held_index_matches_a_reference_count(void **state)
{
	static struct weight w[N];
	static uint32_t want[N];
	static struct cache_segment seg; /* never created: its weights stay off the idle counts */
	struct cache_params cp = { .budget = 1ull << 40 };
	struct daemon d;
	struct holds hs;
	unsigned seed = 12345;

	(void)state;
	bare_holds(&d, &hs, &cp);
	for (size_t i = 0; i < N; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		/* ids spaced so many share a hash slot's neighbourhood */
		w[i].id = 1 + i * 64;
		w[i].nbytes = i + 1;
		w[i].segment = &seg;
	}
	for (int step = 0; step < 200000; step++) {
		size_t i = (size_t)(rand_r(&seed) % N);

		hold_or_release(&d, &hs, &w[i], &want[i], want[i] == 0 || rand_r(&seed) % 3 != 0);
		if (step % 997 == 0) {
			size_t distinct = 0;
			uint64_t bytes = 0;
			for (size_t k = 0; k < N; k++) {
				struct held *h = holds_find(&hs, w[k].id);
				if (want[k]) {
					assert_non_null(h);
					assert_ptr_equal(h->w, &w[k]);
					assert_int_equal(h->count, want[k]);
					assert_int_equal(w[k].holders, 1);
					distinct++;
					bytes += w[k].nbytes;
				} else {
					assert_null(h);
					assert_int_equal(w[k].holders, 0);
				}
				assert_int_equal(w[k].refs, want[k]);
			}
			assert_int_equal(hs.n_held, distinct);
			assert_int_equal(hs.held_bytes, bytes);
		}
	}
	/* releasing what is not held is refused and changes nothing */
	for (size_t k = 0; k < N; k++)
		if (!want[k])
			assert_false(holds_release(&hs, w[k].id));
	while (hs.n_held) {
		struct weight *x = hs.held[0].w;
		assert_true(holds_release(&hs, x->id));
	}
	assert_int_equal(hs.held_bytes, 0);
	bare_holds_free(&d, &hs);
}

/*
 * The index grows by doubling as distinct weights are held and looked up, always at least twice
 * the number held once a lookup has indexed them (so probing stays short), and every weight
 * stays findable across each growth; holding a weight again only counts; releasing everything
 * leaves no reference, no holder, no bytes, and the weights back with the cache unreferenced.
 */
static void held_index_grows_and_releases_everything(void **state)
{
	enum { M = 1000 };
	static struct weight w[M];
	static struct cache_segment seg; /* never created: its weights stay off the idle counts */
	struct cache_params cp = { .budget = 1ull << 40 };
	struct daemon d;
	struct holds hs;
	size_t last_cap = 0, growths = 0;

	(void)state;
	bare_holds(&d, &hs, &cp);
	for (size_t i = 0; i < M; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = 1000 + i; /* consecutive ids: the worst case for a weak hash */
		w[i].nbytes = 4096;
		w[i].segment = &seg;
		cache_hold(d.cache, &w[i]);
		assert_int_equal(holds_hold(&hs, &w[i]), 0);
		assert_ptr_equal(holds_find(&hs, w[i].id)->w, &w[i]);
		assert_int_equal(hs.n_indexed, hs.n_held);
		assert_true(hs.held_index.cap >= 2 * hs.n_held);
		assert_int_equal(hs.held_index.cap & (hs.held_index.cap - 1), 0);
		if (hs.held_index.cap != last_cap) {
			growths++;
			last_cap = hs.held_index.cap;
			for (size_t k = 0; k <= i; k++) {
				struct held *h = holds_find(&hs, w[k].id);

				assert_non_null(h);
				assert_ptr_equal(h->w, &w[k]);
			}
		}
	}
	assert_int_equal(hs.n_held, M);
	assert_true(growths >= 6); /* 32 -> 4096 */
	assert_true(hs.held_bytes == (uint64_t)M * 4096);
	assert_null(holds_find(&hs, 999));
	assert_null(holds_find(&hs, 1000 + M));
	/* a second hold of the same weight: one entry, two references */
	cache_hold(d.cache, &w[7]);
	assert_int_equal(holds_hold(&hs, &w[7]), 0);
	assert_int_equal(hs.n_held, M);
	assert_int_equal(holds_find(&hs, w[7].id)->count, 2);
	assert_int_equal(w[7].refs, 2);
	assert_int_equal(w[7].holders, 1);
	assert_true(hs.held_bytes == (uint64_t)M * 4096);
	/* release in an order unlike the holding order (odd ids first, then even) */
	assert_true(holds_release(&hs, w[7].id));
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = (size_t)(1 - pass); i < M; i += 2) {
			assert_true(holds_release(&hs, w[i].id));
			assert_null(holds_find(&hs, w[i].id));
			assert_false(holds_release(&hs, w[i].id));
		}
	assert_int_equal(hs.n_held, 0);
	assert_true(hs.held_bytes == 0);
	for (size_t i = 0; i < M; i++) {
		assert_int_equal(w[i].refs, 0);
		assert_int_equal(w[i].holders, 0);
	}
	bare_holds_free(&d, &hs);
}

/*
 * Weights spread over SEGS segments, held and released at random: the client holds a segment
 * exactly while it holds one of its weights, and n_segs and its uid's segment and weight counts
 * follow (deletion from the open-addressing table keeps every other segment findable). Then
 * holds_check: a reply adding segments past client_max_segments or uid_max_segments, or
 * weights past uid_max_weights, is refused naming that limit; one adding only segments already
 * held is not.
 */
static void segments_held_are_counted_per_client_and_uid(void **state)
{
	enum { W = 3000, SEGS = 300 };
	static struct weight w[W];
	static struct cache_segment seg[SEGS];
	static uint32_t want[W];
	struct cache_params cp = { .budget = 1ull << 40 };
	struct config cfg;
	struct uid_usage uu;
	struct daemon d;
	struct holds hs;
	weightd_error err;
	struct cache_segment *add[3];
	unsigned seed = 777;

	(void)state;
	memset(&d, 0, sizeof(d));
	memset(&hs, 0, sizeof(hs));
	memset(&uu, 0, sizeof(uu));
	memset(&cfg, 0, sizeof(cfg));
	d.cache = cache_new(&cp);
	assert_non_null(d.cache);
	d.cfg = &cfg;
	holds_init(&hs, d.cache, &cfg, &uu, 0, false);
	for (size_t i = 0; i < SEGS; i++) {
		memset(&seg[i], 0, sizeof(seg[i]));
		seg[i].id = 1 + i * 1024; /* spaced: many share a slot's neighbourhood */
	}
	for (size_t i = 0; i < W; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = 1 + i;
		w[i].nbytes = 64;
		w[i].segment = &seg[i % SEGS];
	}
	for (int step = 0; step < 100000; step++) {
		size_t i = (size_t)(rand_r(&seed) % W);

		hold_or_release(&d, &hs, &w[i], &want[i], want[i] == 0 || rand_r(&seed) % 2);
		if (step % 4999 == 0) {
			size_t nsegs = 0, nrefs = 0;

			for (size_t g = 0; g < SEGS; g++) {
				bool held = false;

				for (size_t k = g; k < W; k += SEGS)
					held |= want[k] > 0;
				assert_int_equal(holds_segment(&hs, &seg[g]), held);
				nsegs += held;
			}
			for (size_t k = 0; k < W; k++)
				nrefs += want[k];
			assert_int_equal(hs.n_segs, nsegs);
			assert_int_equal(uu.segments, nsegs);
			assert_int_equal(hs.refs, nrefs);
			assert_int_equal(uu.weights, nrefs); /* references, not distinct weights */
			assert_true(hs.segs_index.cap >= 2 * hs.n_segs);
		}
	}
	/* the limits: exactly at them passes, one past fails naming the limit */
	while (hs.n_held)
		assert_true(holds_release(&hs, hs.held[0].id));
	assert_int_equal(hs.n_segs, 0);
	assert_int_equal(uu.segments, 0);
	for (size_t g = 0; g < 2; g++) {
		cache_hold(d.cache, &w[g]);
		assert_int_equal(holds_hold(&hs, &w[g]), 0);
	}
	cfg.client_max_segments = 3;
	cfg.uid_max_segments = 5;
	cfg.uid_max_weights = 10;
	add[0] = &seg[0];
	add[1] = &seg[1];
	add[2] = &seg[2];
	wd_error_clear(&err);
	assert_int_equal(holds_check(&hs, add, 2, 8, &err), 0); /* held already */
	assert_int_equal(holds_check(&hs, add, 3, 1, &err), 0); /* 3 of 3 */
	add[1] = &seg[3];
	assert_int_equal(holds_check(&hs, add, 3, 1, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "client_max_segments"));
	cfg.client_max_segments = 100;
	uu.segments = 4; /* another connection of the uid holds 2 more */
	wd_error_clear(&err);
	assert_int_equal(holds_check(&hs, add, 3, 1, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "uid_max_segments"));
	assert_non_null(strstr(err.message, "its limit is 5"));
	uu.segments = 2;
	wd_error_clear(&err);
	assert_int_equal(holds_check(&hs, add, 1, 9, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "uid_max_weights"));
	while (hs.n_held)
		assert_true(holds_release(&hs, hs.held[0].id));
	assert_int_equal(uu.weights, 0);
	bare_holds_free(&d, &hs);
}


/* Two connections (1 and 2) of uid 65534 over a fresh cache, for the per-uid tests below. */
struct two_conns {
	struct daemon d;
	struct config cfg;
	struct uid_usage uu;
	struct holds a, b;
};

static void two_conns_open(struct two_conns *t, uint64_t budget)
{
	struct cache_params cp = { .budget = budget };

	memset(t, 0, sizeof(*t));
	t->d.cache = cache_new(&cp);
	assert_non_null(t->d.cache);
	t->uu.uid = 65534;
	holds_init(&t->a, t->d.cache, &t->cfg, &t->uu, 1, false);
	holds_init(&t->b, t->d.cache, &t->cfg, &t->uu, 2, false);
}

static void two_conns_close(struct two_conns *t)
{
	holds_free(&t->a);
	holds_free(&t->b);
	cache_free(t->d.cache, false);
}

/*
 * Holds taken without a lookup are not indexed (a unit bound and then freed whole never builds
 * the index); the first lookup indexes all of them, and each is found.
 */
static void holds_are_indexed_when_looked_up(void **state)
{
	enum { M = 500 };
	static struct weight w[M];
	static struct cache_segment seg;
	struct cache_params cp = { .budget = 1ull << 40 };
	struct daemon d;
	struct holds hs;

	(void)state;
	bare_holds(&d, &hs, &cp);
	for (size_t i = 0; i < M; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = 50 + i;
		w[i].nbytes = 64;
		w[i].segment = &seg;
		cache_hold(d.cache, &w[i]);
		assert_int_equal(holds_hold_found(&hs, &w[i], NULL), 0);
	}
	assert_int_equal(hs.n_held, M);
	assert_int_equal(hs.n_indexed, 0);
	assert_int_equal(hs.held_index.cap, 0);
	assert_null(holds_find(&hs, 49));
	assert_int_equal(hs.n_indexed, M);
	assert_true(hs.held_index.cap >= 2 * M);
	for (size_t i = 0; i < M; i++)
		assert_ptr_equal(holds_find(&hs, w[i].id)->w, &w[i]);
	while (hs.n_held)
		assert_true(holds_release(&hs, hs.held[hs.n_held - 1].id));
	assert_int_equal(hs.n_indexed, 0);
	bare_holds_free(&d, &hs);
}

/*
 * A unit's free: the handles of the newest holds, in the order taken, each as often as it is
 * held, are released in one pass, and the index is never built for them. Anything else (out of
 * order, a count short, an older weight among them, a handle not held, nothing) is refused with
 * nothing changed, for the one-by-one release to handle.
 */
static void newest_holds_are_released_in_one_pass(void **state)
{
	enum { OLD = 3, NEW = 6 };
	static struct weight w[OLD + NEW];
	static struct cache_segment seg;
	struct cache_params cp = { .budget = 1ull << 40 };
	struct daemon d;
	struct holds hs;
	uint64_t h[NEW + 1], bytes_old = 0;
	size_t cap;

	(void)state;
	bare_holds(&d, &hs, &cp);
	for (size_t i = 0; i < OLD + NEW; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = 900 + 7 * i;
		w[i].nbytes = 100 + i;
		w[i].segment = &seg;
	}
	/* the older holds, looked up (so indexed) */
	for (size_t i = 0; i < OLD; i++) {
		cache_hold(d.cache, &w[i]);
		assert_int_equal(holds_hold(&hs, &w[i]), 0);
		bytes_old += w[i].nbytes;
	}
	assert_non_null(holds_find(&hs, w[0].id));
	cap = hs.held_index.cap;
	/* a unit's holds: each new weight once, the third twice (an entry and its repeat) */
	for (size_t i = OLD; i < OLD + NEW; i++) {
		cache_hold(d.cache, &w[i]);
		assert_int_equal(holds_hold_found(&hs, &w[i], NULL), 0);
	}
	cache_hold(d.cache, &w[OLD + 2]);
	hs.held[OLD + 2].count++; /* what holds_hold of the repeat does, without a lookup */
	assert_int_equal(hs.n_indexed, OLD);

	for (size_t i = 0, k = 0; i < NEW; i++) {
		h[k++] = w[OLD + i].id;
		if (i == 2)
			h[k++] = w[OLD + i].id;
	}
	/* refused, nothing changed: swapped, a count short, an older one, unknown, empty */
	{
		uint64_t bad[NEW + 1];

		memcpy(bad, h, sizeof(bad));
		bad[0] = h[1];
		bad[1] = h[0];
		assert_false(holds_release_newest(&hs, bad, NEW + 1));
		assert_false(holds_release_newest(&hs, h, NEW)); /* the last one missing */
		memcpy(bad, h, sizeof(bad));
		bad[3] = h[4]; /* w[OLD+2] once */
		assert_false(holds_release_newest(&hs, bad + 1, NEW));
		memcpy(bad, h, sizeof(bad));
		bad[0] = w[OLD - 1].id;
		assert_false(holds_release_newest(&hs, bad, NEW + 1));
		bad[0] = 1;
		assert_false(holds_release_newest(&hs, bad, NEW + 1));
		assert_false(holds_release_newest(&hs, h, 0));
	}
	assert_int_equal(hs.n_held, OLD + NEW);
	for (size_t i = OLD; i < OLD + NEW; i++)
		assert_int_equal(w[i].refs, i == OLD + 2 ? 2 : 1);

	assert_true(holds_release_newest(&hs, h, NEW + 1));
	assert_int_equal(hs.n_held, OLD);
	assert_int_equal(hs.held_bytes, bytes_old);
	assert_int_equal(hs.held_index.cap, cap); /* never indexed */
	for (size_t i = 0; i < OLD + NEW; i++) {
		assert_int_equal(w[i].refs, i < OLD);
		assert_int_equal(w[i].holders, i < OLD);
	}
	for (size_t i = 0; i < OLD; i++)
		assert_ptr_equal(holds_find(&hs, w[i].id)->w, &w[i]);
	assert_null(holds_find(&hs, w[OLD].id));
	while (hs.n_held)
		assert_true(holds_release(&hs, hs.held[0].id));
	bare_holds_free(&d, &hs);
}

/*
 * A uid's share of the budget: the bytes of distinct weights each of its connections holds and
 * what their requests in flight will add, summed, up to uid_budget_share percent of the budget.
 * Exactly the share passes and a byte past it fails naming the share and both keys; root and the
 * daemon's user (exempt) and the users of budget_users pass whatever they hold.
 */
static void a_uid_holds_at_most_its_share_of_the_budget(void **state)
{
	static struct weight w[2];
	static struct cache_segment seg;
	static struct two_conns t;
	struct holds *a = &t.a, *b = &t.b;
	struct uid_usage *uu = &t.uu;
	weightd_error err;
	uid_t listed[2] = { 7, 65534 };

	(void)state;
	memset(&seg, 0, sizeof(seg));
	two_conns_open(&t, 1ull << 40);
	t.cfg.uid_budget_share = 50;
	for (size_t i = 0; i < 2; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = 1 + i;
		w[i].nbytes = 300;
		w[i].segment = &seg;
	}
	/* two connections hold w[0] (each counts it), one holds w[1] twice (counted once) */
	for (size_t k = 0; k < 4; k++) {
		cache_hold(t.d.cache, &w[k == 3]);
		assert_int_equal(holds_hold(k == 1 ? b : a, &w[k == 3 ? 1 : k == 2]), 0);
	}
	assert_int_equal(uu->bytes, 900);
	holds_pending_add(b, 50, 1);
	assert_int_equal(uu->pending_bytes, 50);
	wd_error_clear(&err);
	assert_int_equal(holds_check_budget(a, 50, 2000, &err), 0); /* 1000 of 1000 */
	assert_int_equal(holds_check_budget(a, 51, 2000, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "uid 65534"));
	assert_non_null(strstr(err.message, "its share of the budget is 1000 bytes"));
	assert_non_null(strstr(err.message, "uid_budget_share 50%"));
	assert_non_null(strstr(err.message, "`budget_users`"));
	t.cfg.budget_uids = listed;
	t.cfg.n_budget_uids = 2;
	assert_int_equal(holds_check_budget(a, 1u << 20, 2000, &err), 0);
	t.cfg.n_budget_uids = 1; /* 7 only */
	assert_int_equal(holds_check_budget(a, 51, 2000, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	a->exempt = true;
	assert_int_equal(holds_check_budget(a, 1u << 20, 2000, &err), 0);
	/* everything given back: the uid's bytes follow */
	holds_pending_done(b, 50, 1);
	holds_clear(a);
	holds_clear(b);
	assert_int_equal(uu->bytes, 0);
	assert_int_equal(uu->pending_bytes, 0);
	two_conns_close(&t);
}

/*
 * Heap counted for a uid's requests: summed over its connections and held to
 * uid_max_unit_memory (a decode only by its own size), given back when done or when a
 * connection goes; exempt clients are counted and never refused.
 */
static void unit_memory_is_counted_per_uid(void **state)
{
	static struct two_conns t;
	struct holds *a = &t.a, *b = &t.b;
	struct uid_usage *uu = &t.uu;
	weightd_error err;

	(void)state;
	two_conns_open(&t, 1ull << 30);
	t.cfg.uid_max_unit_memory = 1000;
	wd_error_clear(&err);
	assert_int_equal(holds_unit_memory(a, 600, false, "a unit", &err), 0);
	assert_int_equal(holds_unit_memory(b, 400, false, "a unit", &err), 0); /* 1000 of 1000 */
	assert_int_equal(holds_unit_memory(b, 1, false, "planning x", &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "uid 65534"));
	assert_non_null(strstr(err.message, "for planning x"));
	assert_non_null(strstr(err.message, "`uid_max_unit_memory`"));
	assert_int_equal(uu->unit_memory, 1000);
	/* a decode is held to the limit by itself, and counted */
	assert_int_equal(holds_unit_memory(b, 1000, true, "decoding", &err), 0);
	assert_int_equal(holds_unit_memory(b, 1001, true, "decoding", &err),
			 -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_int_equal(uu->unit_memory, 2000);
	holds_unit_memory_done(b, 1000);
	holds_unit_memory_done(a, 600);
	assert_int_equal(uu->unit_memory, 400);
	a->exempt = true;
	assert_int_equal(holds_unit_memory(a, 5000, false, "a unit", &err), 0);
	assert_int_equal(uu->unit_memory, 5400);
	/* connections that go give back what they were counted for */
	holds_clear(a);
	holds_clear(b);
	assert_int_equal(uu->unit_memory, 0);
	two_conns_close(&t);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(held_index_matches_a_reference_count),
	  cmocka_unit_test(held_index_grows_and_releases_everything),
	  cmocka_unit_test(holds_are_indexed_when_looked_up),
	  cmocka_unit_test(newest_holds_are_released_in_one_pass),
	  cmocka_unit_test(segments_held_are_counted_per_client_and_uid),
	  cmocka_unit_test(a_uid_holds_at_most_its_share_of_the_budget),
	  cmocka_unit_test(unit_memory_is_counted_per_uid))
