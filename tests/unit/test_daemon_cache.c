/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_cache.c - the cache on its own (no pool: jobs run inline): packing offsets and
 * segment caps, dedupe, references, budget and LRU eviction order, idle limits, and pages given
 * back when a weight leaves a segment that lives on. Expected offsets are worked out here from
 * the packing rule (64-byte alignment, page alignment for weights of a page or more, 2 MiB
 * alignment for weights of 2 MiB or more). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "st_writer.h"
#include "state.h"
#include "stats.h"

#define N_T 11
static const uint64_t t_bytes[N_T] = { 1000,  5000, 100,  8192,	    64,	     3,
				       70000, 10,   3000, 3u << 20, 2u << 20 };

struct env {
	char dir[4096];
	struct csource *cs;
	struct stats stats;
	char instance[64];
};

static struct env E;

static int lookup(void *ctx, const char *checkpoint, const struct wd_source **ret_src,
		  weightd_error *err)
{
	(void)ctx;
	(void)checkpoint;
	(void)err;
	*ret_src = E.cs->src;
	return 0;
}

static int setup(void **state)
{
	struct stw_tensor ts[N_T];
	char names[N_T][8], path[4200];
	struct wd_limits lim = WD_LIMITS_DEFAULT;
	weightd_error err;

	(void)state;
	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < N_T; i++) {
		snprintf(names[i], sizeof(names[i]), "w%d", i);
		ts[i].name = names[i];
		ts[i].dtype = "U8";
		ts[i].ndim = 1;
		ts[i].shape[0] = t_bytes[i];
		ts[i].seed = (uint32_t)i;
	}
	if (stw_tmpdir(E.dir, sizeof(E.dir)) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/c.safetensors", E.dir);
	if (stw_write(path, ts, N_T, NULL, 0, NULL) < 0)
		return -1;
	E.cs = calloc(1, sizeof(*E.cs));
	E.cs->name = strdup("c");
	E.cs->path = strdup(path);
	E.cs->refs = 1;
	E.cs->stats = calloc(1, sizeof(*E.cs->stats));
	E.cs->stats->refs = 1;
	E.cs->generation = 1;
	if (wd_source_open("c", path, &lim, &E.cs->src, &err) < 0)
		return -1;
	snprintf(E.instance, sizeof(E.instance), "wdcachetest%d", (int)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	catalog_source_unref(E.cs);
	stw_rmtree(E.dir);
	wd_segment_purge(E.instance);
	return 0;
}

static struct cache *new_cache(uint64_t budget, uint64_t segment_max, uint32_t idle_weights,
			       uint32_t idle_segments)
{
	struct cache_params p = {
		.budget = budget, .segment_max = segment_max, .max_idle_weights = idle_weights,
		.max_idle_segments = idle_segments, .state_dir = "", .instance = E.instance,
		.pool = NULL, .stats = &E.stats,
	};

	memset(&E.stats, 0, sizeof(E.stats));
	return cache_new(&p);
}

/* The weight (held for the test) goes where the request said. */
static void on_ready(struct weight *w, const weightd_error *err, uint64_t bytes_read, void *arg)
{
	(void)err;
	(void)bytes_read;
	*(struct weight **)arg = w;
}

/*
 * Ask for tensor wI through pack (NULL: alone). Returns the cache's code; *ret the weight (held)
 * when it is there by the time the pack ends (the caller ends it).
 */
static int ask(struct cache *c, struct cache_pack *pack, int i, struct weight **ret)
{
	const struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT;
	struct wd_resolver res = { NULL, lookup };
	struct wd_rnode node;
	struct wd_recipe rec = { &node, 1 };
	struct wd_plan *plan = NULL;
	weightd_error err;
	char name[8];

	snprintf(name, sizeof(name), "w%d", i);
	memset(&node, 0, sizeof(node));
	node.op = WD_OP_SOURCE;
	node.checkpoint = "c";
	node.tensor = name;
	node.sel.kind = WD_SEL_FULL;
	wd_error_clear(&err);
	assert_int_equal(wd_recipe_preflight(&rec, &res, &lim, &plan, &err), 0);
	*ret = NULL;
	/* jobs run inline: alone, the callback has filled *ret by the time this returns; in a
	 * pack, when the pack ends */
	return cache_request(c, pack, plan, &E.cs, 1, on_ready, ret, ret, &err);
}

static struct weight *ask_ok(struct cache *c, int i)
{
	struct weight *w;

	assert_true(ask(c, NULL, i, &w) >= 0);
	assert_non_null(w);
	return w;
}

/* Every byte of w in its segment is tensor i's pattern. */
static void check_bytes(const struct weight *w, int i)
{
	uint8_t *buf = malloc(w->nbytes ? w->nbytes : 1);

	assert_int_equal(pread(w->segment->seg.ro_fd, buf, w->nbytes, (off_t)w->offset),
			 (ssize_t)w->nbytes);
	for (uint64_t k = 0; k < w->nbytes; k++)
		assert_int_equal(buf[k], stw_pattern_byte(k, (uint32_t)i));
	free(buf);
}

/* One pack of w0..w3: one segment, offsets by the rule. */
static void pack_offsets(void **state)
{
	struct cache *c = new_cache(1u << 20, 1u << 20, 0, 0);
	struct cache_pack *pk = cache_pack_begin(c);
	struct weight *w[4];
	/* w0 1000 B at 0; w1 5000 B (a page or more) at the next page, 4096; w2 100 B at the next
	 * 64 after 9096, 9152; w3 8192 B at the next page after 9252, 12288 */
	const uint64_t want[4] = { 0, 4096, 9152, 12288 };

	(void)state;
	for (int i = 0; i < 4; i++)
		assert_int_equal(ask(c, pk, i, &w[i]), 0);
	/* nothing is filled before the pack ends */
	assert_int_equal(cache_count(c), 0);
	cache_pack_end(c, pk);
	assert_int_equal(cache_count(c), 4);
	assert_int_equal(cache_segment_count(c), 1);
	for (int i = 0; i < 4; i++) {
		struct weight *x = NULL;

		assert_non_null(w[i]);
		assert_ptr_equal(w[i]->segment, w[0]->segment);
		assert_int_equal(w[i]->offset, want[i]);
		assert_int_equal(w[i]->nbytes, t_bytes[i]);
		check_bytes(w[i], i);
		assert_int_equal(ask(c, NULL, i, &x), 1);   /* equal recipe: a hit, the same weight */
		assert_ptr_equal(x, w[i]);
		assert_int_equal(x->refs, 2);
		cache_drop(c, x);
		cache_drop(c, w[i]);
	}
	assert_int_equal(w[0]->segment->held, 0);
	assert_int_equal(cache_segment_bytes(c), 12288 + 8192);
	cache_free(c, true);
	assert_int_equal(wd_segment_purge(E.instance), 0);  /* nothing left behind */
}

/* Weights of 2 MiB or more start on a 2 MiB boundary (PMD-mapped on a huge-page tmpfs); smaller
 * ones still pack after them. */
static void pack_huge_offsets(void **state)
{
	struct cache *c = new_cache(64u << 20, 64u << 20, 0, 0);
	struct cache_pack *pk = cache_pack_begin(c);
	struct weight *w[4];
	/* w0 1000 B at 0; w9 3 MiB at 2 MiB; w2 100 B right after it, 5 MiB; w10 2 MiB at the
	 * next 2 MiB boundary after 5 MiB + 100, 6 MiB */
	const int which[4] = { 0, 9, 2, 10 };
	const uint64_t want[4] = { 0, 2u << 20, 5u << 20, 6u << 20 };

	(void)state;
	for (int i = 0; i < 4; i++)
		assert_int_equal(ask(c, pk, which[i], &w[i]), 0);
	cache_pack_end(c, pk);
	assert_int_equal(cache_segment_count(c), 1);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(w[i]->offset, want[i]);
		check_bytes(w[i], which[i]);
	}
	assert_int_equal(cache_segment_bytes(c), 8u << 20);
	for (int i = 0; i < 4; i++)
		cache_drop(c, w[i]);
	cache_free(c, true);
	assert_int_equal(wd_segment_purge(E.instance), 0);
}

/* segment_max caps a segment: a weight that does not fit starts the next one; one larger than
 * the cap is alone. */
static void pack_cap(void **state)
{
	struct cache *c = new_cache(1u << 20, 8192, 0, 0);
	struct cache_pack *pk = cache_pack_begin(c);
	struct weight *a, *b, *x, *big, *d;

	(void)state;
	assert_int_equal(ask(c, pk, 0, &a), 0);   /* seg A at 0 */
	assert_int_equal(ask(c, pk, 1, &b), 0);   /* 4096 + 5000 > 8192: seg B at 0 */
	assert_int_equal(ask(c, pk, 2, &x), 0);   /* seg B at 5056 */
	assert_int_equal(ask(c, pk, 6, &big), 0); /* 70000 > 8192: seg C, alone */
	assert_int_equal(ask(c, pk, 4, &d), 0);   /* seg C is full: seg D at 0 */
	cache_pack_end(c, pk);
	assert_int_equal(cache_segment_count(c), 4);
	{
		assert_ptr_not_equal(a->segment, b->segment);
		assert_ptr_equal(b->segment, x->segment);
		assert_int_equal(b->offset, 0);
		assert_int_equal(x->offset, 5056);
		assert_int_equal(big->offset, 0);
		assert_int_equal(big->segment->seg.size, 70000);
		assert_int_equal(big->segment->n_weights, 1);
		assert_ptr_not_equal(d->segment, big->segment);
		check_bytes(big, 6);
		check_bytes(x, 2);
		cache_drop(c, a);
		cache_drop(c, b);
		cache_drop(c, x);
		cache_drop(c, big);
		cache_drop(c, d);
	}
	cache_free(c, true);
}

/*
 * Budget and LRU: unreferenced weights go least recently released first, only as many as the
 * new one needs; a request that could never fit evicts nothing; held weights are never evicted.
 */
static void budget_and_lru_order(void **state)
{
	struct cache *c = new_cache(16384, 1u << 20, 0, 0);
	struct weight *w0, *w1, *w3, *w8, *x;
	uint64_t bytes = 0;
	uint8_t k1[32];

	(void)state;
	w0 = ask_ok(c, 0);
	w1 = ask_ok(c, 1);
	w3 = ask_ok(c, 3);
	memcpy(k1, w1->key, 32);
	assert_int_equal(cache_resident(c), 1000 + 5000 + 8192);
	/* released in the order w1, w0, w3 */
	cache_drop(c, w1);
	cache_drop(c, w0);
	cache_drop(c, w3);
	assert_int_equal(cache_idle_weights(c), 3);
	/* 70000 bytes can never fit 16384: refused, nothing evicted */
	assert_int_equal(ask(c, NULL, 6, &x), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_int_equal(cache_count(c), 3);
	assert_int_equal(E.stats.evictions, 0);
	/* 3000 bytes with 2192 free: the least recently released (w1) goes, and only it */
	w8 = ask_ok(c, 8);
	assert_int_equal(E.stats.evictions, 1);
	assert_int_equal(cache_count(c), 3);
	assert_null(cache_find(c, k1));
	{
		struct weight *a = ask_ok(c, 0);   /* still there: a hit */
		assert_int_equal(E.stats.evictions, 1);
		/* a is held now; evicting every unreferenced weight takes w3 only */
		assert_int_equal(cache_evict_all(c, &bytes), 1);
		assert_int_equal(bytes, 8192);
		assert_ptr_equal(cache_find(c, a->key), a);
		cache_drop(c, a);
	}
	cache_drop(c, w8);
	assert_int_equal(cache_references(c), 0);
	cache_free(c, true);
}

/* The idle-weight limit evicts the least recently released beyond it. */
static void idle_weight_limit(void **state)
{
	struct cache *c = new_cache(1u << 20, 1u << 20, 2, 0);
	struct weight *w0 = ask_ok(c, 0), *w2 = ask_ok(c, 2), *w4 = ask_ok(c, 4);
	uint8_t k0[32];

	(void)state;
	memcpy(k0, w0->key, 32);
	cache_drop(c, w0);
	cache_drop(c, w2);
	assert_int_equal(E.stats.evictions, 0);
	cache_drop(c, w4);          /* a third idle weight: w0, released first, goes */
	assert_int_equal(E.stats.evictions, 1);
	assert_int_equal(cache_idle_weights(c), 2);
	assert_null(cache_find(c, k0));
	cache_free(c, true);
}

/*
 * A weight evicted out of a segment that lives on (a neighbour is held) gives its whole pages
 * back at once; the segment goes with its last weight.
 */
static void eviction_punches_pages(void **state)
{
	struct cache *c = new_cache(1u << 20, 1u << 20, 0, 0);
	struct cache_pack *pk = cache_pack_begin(c);
	struct weight *w1, *w3;
	struct stat before, after;
	uint64_t bytes = 0;

	(void)state;
	assert_int_equal(ask(c, pk, 1, &w1), 0);
	assert_int_equal(ask(c, pk, 3, &w3), 0);
	cache_pack_end(c, pk);
	assert_ptr_equal(w1->segment, w3->segment);
	assert_int_equal(w1->offset, 0);
	assert_int_equal(w3->offset, 8192);   /* after 5000, at the next page */
	assert_int_equal(fstat(w3->segment->seg.ro_fd, &before), 0);
	cache_drop(c, w1);
	assert_int_equal(cache_evict_all(c, &bytes), 1);
	assert_int_equal(fstat(w3->segment->seg.ro_fd, &after), 0);
	/* w1 covered page 0 whole (and part of page 1): at least that page went back */
	assert_true((before.st_blocks - after.st_blocks) * 512 >= 4096);
	check_bytes(w3, 3);                    /* the neighbour is untouched */
	assert_int_equal(cache_segment_count(c), 1);
	cache_drop(c, w3);
	assert_int_equal(cache_evict_all(c, &bytes), 1);
	assert_int_equal(cache_segment_count(c), 0);
	assert_int_equal(wd_segment_purge(E.instance), 0);
	cache_free(c, true);
}

/* state_recover's adopt: count the weights of the one record, keep it. */
static int count_record(const struct state_segment *rec, void *arg)
{
	*(size_t *)arg += rec->n_weights;
	return (int)rec->n_weights;
}

/* state_recover's adopt: into the cache arg. */
static int adopt_into(const struct state_segment *rec, void *arg)
{
	return cache_adopt(arg, rec);
}

/* The weights the state index lists for the cache's instance. */
static size_t recorded_weights(const char *dir)
{
	size_t n = 0;
	int removed = 0;

	state_recover(dir, E.instance, count_record, &n, &removed);
	assert_int_equal(removed, 0);
	return n;
}

/*
 * Single gets (shared packs of one weight each) go into one arena: offsets by the packing rule
 * as if they were one pack, the arena made whole at once (sparse, its huge pages counted as the
 * weights reach them), write access dropped between
 * gets, and each weight added to the arena's state record before its request is answered. An
 * evicted weight is punched out and leaves the record; the next get still goes into the arena.
 */
static void single_gets_share_an_arena(void **state)
{
	/* as on a huge-page tmpfs: the arena's huge pages count as its weights reach them */
	struct cache_params p = {
		.budget = 8u << 20,
		.segment_max = 8u << 20,
		.instance = E.instance,
		.stats = &E.stats,
		.page_bytes = 2u << 20,
	};
	const uint64_t want[4] = { 0, 4096, 9152, 12288 };
	struct weight *w[5];
	struct cache_segment *sg;
	char dir[4200];
	uint64_t bytes = 0;
	struct cache *c;
	weightd_error err;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/state", E.dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(state_init(dir, E.instance, &err), 0);
	p.state_dir = dir;
	c = cache_new(&p);
	assert_non_null(c);
	for (int i = 0; i < 4; i++) {
		struct cache_pack *pk = cache_pack_begin_shared(c);

		assert_int_equal(ask(c, pk, i, &w[i]), 0);
		cache_pack_end(c, pk);
		assert_non_null(w[i]);
		assert_int_equal(recorded_weights(dir), (size_t)i + 1);
	}
	sg = w[0]->segment;
	assert_int_equal(cache_segment_count(c), 1);
	/* min(segment_max, budget) in whole 2 MiB pages; of it, one huge page is reached */
	assert_int_equal(sg->seg.size, 8u << 20);
	assert_int_equal(cache_huge_bytes(c), 2u << 20);
	assert_int_equal(sg->seg.fd, -1);
	for (int i = 0; i < 4; i++) {
		assert_ptr_equal(w[i]->segment, sg);
		assert_int_equal(w[i]->offset, want[i]);
		check_bytes(w[i], i);
	}
	/* w1 (5000 bytes at 4096: page 1 whole) evicted: punched, and gone from the record */
	cache_drop(c, w[1]);
	assert_int_equal(cache_evict_all(c, &bytes), 1);
	assert_int_equal(recorded_weights(dir), 3);
	check_bytes(w[3], 3);
	/* the arena is still open: the next get lands after the last weight placed */
	{
		struct cache_pack *pk = cache_pack_begin_shared(c);

		assert_int_equal(ask(c, pk, 4, &w[4]), 0);
		cache_pack_end(c, pk);
	}
	assert_ptr_equal(w[4]->segment, sg);
	assert_int_equal(w[4]->offset, 12288 + 8192);
	check_bytes(w[4], 4);
	assert_int_equal(recorded_weights(dir), 4);
	cache_drop(c, w[0]);
	cache_drop(c, w[2]);
	cache_drop(c, w[3]);
	cache_drop(c, w[4]);
	/* a restart re-adopts the four from the record, and counts only the huge page they reach */
	cache_free(c, false);
	c = cache_new(&p);
	assert_non_null(c);
	{
		int removed = 0;

		assert_int_equal(state_recover(dir, E.instance, adopt_into, c, &removed), 4);
	}
	assert_int_equal(cache_count(c), 4);
	assert_int_equal(cache_huge_bytes(c), 2u << 20);
	cache_free(c, true);
	assert_int_equal(wd_segment_purge(E.instance), 0);
	state_purge(dir, E.instance);
	stw_rmtree(dir);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(pack_offsets), cmocka_unit_test(pack_huge_offsets),
	  cmocka_unit_test(pack_cap), cmocka_unit_test(budget_and_lru_order),
	  cmocka_unit_test(idle_weight_limit), cmocka_unit_test(eviction_punches_pages),
	  cmocka_unit_test(single_gets_share_an_arena))
