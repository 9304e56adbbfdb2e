/* SPDX-License-Identifier: Apache-2.0 */
/* test_lifecycle.c - memory budget and eviction, per-client limits, preload, hot reload, and a
 * restart after kill -9 without rereads; each against a real weightd, each ending with the leak
 * check (segments, fds and references). */
#include <jansson.h>
#include <signal.h>
#include <sys/mman.h>

#include "fixture.h"

/* m.safetensors: five 1 MiB U8 tensors a..e, bytes pattern with seeds 0..4. */
/* Checkpoint m (at `path`) of five 1 MiB tensors a..e (and `extra`), served by a weightd with
 * `budget`; returns a connection to it, and the daemon's fd count before it in `fd_base`. */
static weightd_client *five_mib_tensors(char *path, size_t cap, const char *extra,
					const char *budget, int *fd_base)
{
	char sec[1024];

	harness_path(&H, "m.safetensors", path, cap);
	it_fixture("safetensors %s --seed 0 --tensor a:U8:1048576 --tensor b:U8:1048576 "
		   "--tensor c:U8:1048576 --tensor d:U8:1048576 --tensor e:U8:1048576 %s",
		   path, extra ? extra : "");
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	it_start(&H, budget, sec);
	if (fd_base)
		*fd_base = it_fd_base(&H);
	return it_connect(&H);
}

static void check_pattern(weightd_weight *w, unsigned seed)
{
	const uint8_t *p = it_map(w);
	int64_t bad = it_pattern_mismatch(p, weightd_weight_nbytes(w), seed);

	if (bad >= 0)
		fail_msg("%s: byte %lld differs from the checkpoint's", weightd_weight_name(w),
			 (long long)bad);
}

/* --- eviction -------------------------------------------------------------------------------- */

/* Unreferenced weights go least-recently-released first; using a weight again makes it recent. */
static void eviction_follows_lru_order(void **state)
{
	char path[512];
	weightd_client *c;
	weightd_weight *wa, *wb, *wc, *wd, *we;
	weightd_status *st;
	int base;

	c = five_mib_tensors(path, sizeof(path), NULL, "budget = 3M", &base);

	wa = it_get_ok(c, "m", "a");
	wb = it_get_ok(c, "m", "b");
	wc = it_get_ok(c, "m", "c");
	/* released in the order b, a, c: b is the least recently released */
	weightd_release(wb);
	weightd_release(wa);
	weightd_release(wc);
	st = it_status(c);
	assert_int_equal(st->budget_bytes, 3 * MiB);
	assert_int_equal(st->bytes_resident, 3 * MiB);
	assert_int_equal(st->evictions, 0);
	weightd_status_free(st);

	wd = it_get_ok(c, "m", "d");
	st = it_status(c);
	assert_null(it_weight(st, "m", "b"));
	assert_non_null(it_weight(st, "m", "a"));
	assert_non_null(it_weight(st, "m", "c"));
	assert_non_null(it_weight(st, "m", "d"));
	assert_int_equal(st->evictions, 1);
	assert_int_equal(st->bytes_resident, 3 * MiB);
	weightd_status_free(st);

	/* a used again (a cache hit, nothing read) and released after c: now c is the oldest */
	wa = it_get_ok(c, "m", "a");
	check_pattern(wa, 0);
	weightd_release(wa);
	weightd_release(wd);
	we = it_get_ok(c, "m", "e");
	check_pattern(we, 4);
	st = it_status(c);
	assert_null(it_weight(st, "m", "c"));
	assert_non_null(it_weight(st, "m", "a"));
	assert_non_null(it_weight(st, "m", "d"));
	assert_non_null(it_weight(st, "m", "e"));
	assert_int_equal(st->evictions, 2);
	assert_int_equal(st->bytes_read, 5 * MiB); /* a, b, c, d, e once each; a's reuse read 0 */
	weightd_status_free(st);
	weightd_release(we);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* Build and finish a unit of full tensors of m; 0 or the error. The unit is returned on success. */
static int unit_of(weightd_client *c, const char *const *names, size_t n, weightd_unit **ret,
		   weightd_error *err)
{
	return it_unit_of(c, "m", names, n, false, ret, err);
}

/* A weight a client holds is never evicted; what cannot fit fails whole, evicting nothing. */
static void held_weights_stay_and_what_cannot_fit_fails_cleanly(void **state)
{
	char path[512];
	weightd_client *c;
	weightd_weight *wa, *wb, *wc, *wd = NULL, *wbig = NULL;
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;
	const char *abc[] = { "a", "b", "c" };
	uint64_t mats;
	int base;

	c = five_mib_tensors(path, sizeof(path), "--tensor big:U8:4194304", "budget = 3M", &base);

	wa = it_get_ok(c, "m", "a");
	wb = it_get_ok(c, "m", "b");
	wc = it_get_ok(c, "m", "c");
	/* the budget is full of held weights: d cannot have room */
	assert_int_equal(it_get(c, "m", "d", &wd, &err), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(err.message, "resource exhausted"));
	/* sizes as people read them, and what to change */
	assert_non_null(
		strstr(err.message, "needs 1 MiB but only 0 bytes of the 3 MiB budget is free"));
	assert_non_null(strstr(err.message, "(3 MiB is held by clients"));
	assert_non_null(strstr(err.message, "raise `budget` in weightd.conf"));
	assert_int_equal(err.expected, 1048576);
	assert_int_equal(err.actual, 0);
	st = it_status(c);
	assert_int_equal(st->evictions, 0);
	assert_int_equal(st->weights, 3);
	assert_int_equal(st->materializations_failed, 0); /* refused before anything started */
	weightd_status_free(st);
	assert_int_equal(harness_segments(&H), 1); /* single gets share an arena */
	check_pattern(wa, 0);
	check_pattern(wb, 1);
	check_pattern(wc, 2);

	/* once a is let go, d takes its room, and only its room */
	weightd_release(wa);
	wd = it_get_ok(c, "m", "d");
	check_pattern(wd, 3);
	st = it_status(c);
	assert_int_equal(st->evictions, 1);
	assert_null(it_weight(st, "m", "a"));
	assert_int_equal(it_weight(st, "m", "b")->refs, 1);
	weightd_status_free(st);

	/* 4 MiB can never fit a 3 MiB budget: refused without evicting the three cached weights */
	weightd_release(wb);
	weightd_release(wc);
	weightd_release(wd);
	st = it_status(c);
	mats = st->materializations;
	weightd_status_free(st);
	assert_int_equal(it_get(c, "m", "big", &wbig, &err), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(err.message, "needs 4 MiB but only 3 MiB of the 3 MiB budget"));
	assert_int_equal(err.expected, 4194304);
	assert_int_equal(err.actual, 3145728);
	st = it_status(c);
	assert_int_equal(st->evictions, 1);
	assert_int_equal(st->weights, 3);
	assert_int_equal(st->materializations, mats);
	assert_int_equal(st->materializations_in_flight, 0);
	assert_int_equal(st->references, 0);
	weightd_status_free(st);
	assert_int_equal(harness_segments(&H), 1);

	/* A unit whose new weights do not fit together fails whole: d is held, b and c are cached
	 * (the unit would take them), a would need 1 MiB and nothing else is free. */
	wd = it_get_ok(c, "m", "d");
	assert_int_equal(unit_of(c, abc, 3, &u, &err), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(err.message, "needs 1 MiB"));
	assert_string_equal(err.slot, "a");
	st = it_status(c);
	assert_int_equal(st->references, 1); /* only d: b and c went back */
	assert_int_equal(st->evictions, 1);
	assert_int_equal(st->weights, 3);
	weightd_status_free(st);
	/* with d released, the unit fits by evicting d */
	weightd_release(wd);
	assert_int_equal(unit_of(c, abc, 3, &u, &err), 0);
	assert_int_equal(weightd_unit_bytes_read(u), 1 * MiB);
	st = it_status(c);
	assert_null(it_weight(st, "m", "d"));
	assert_int_equal(st->evictions, 2);
	weightd_status_free(st);
	weightd_unit_free(u);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* --- per-client limits ----------------------------------------------------------------------- */

static void per_client_limits(void **state)
{
	char path[512], sec[1024];
	weightd_client *c1, *c2, *c3;
	weightd_weight *wa, *wb, *wa2, *ws1, *w = NULL, *wc2;
	weightd_inflight *f[3];
	weightd_weight *got[3] = { NULL, NULL, NULL };
	int rc[3];
	weightd_error err;
	int base;

	harness_path(&H, "m.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --tensor a:U8:1048576 --tensor b:U8:1048576 --tensor c:U8:1048576 "
		   "--tensor s1:U8:1024 --tensor s2:U8:1024", path);
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	it_start(&H, "client_max_weights = 3\nclient_max_bytes = 2621440", sec);
	base = it_fd_base(&H);
	c1 = it_connect(&H);
	c2 = it_connect(&H);
	assert_int_equal(weightd_server(c1)->max_client_weights, 3);
	assert_int_equal(weightd_server(c1)->max_client_bytes, 2621440);

	wa = it_get_ok(c1, "m", "a");
	wb = it_get_ok(c1, "m", "b");
	/* a third MiB would take c1 to 3 MiB, over its 2.5 MiB */
	assert_int_equal(it_get(c1, "m", "c", &w, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	/* the per-client cap refused it, so that is the key to raise, not the budget */
	assert_non_null(strstr(err.message,
			       "its limit is 2.5 MiB: raise `client_max_bytes` in weightd.conf"));
	assert_null(strstr(err.message, "`budget`"));
	/* ... which does not stop another client */
	wc2 = it_get_ok(c2, "m", "c");
	/* a weight c1 already holds adds no bytes, but its reference counts as a weight: a third
	 * reference fits, a fourth is over client_max_weights whether it is a new weight or a
	 * share of one held */
	wa2 = it_get_ok(c1, "m", "a");
	assert_int_equal(it_get(c1, "m", "s1", &w, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "client_max_weights"));
	assert_non_null(strstr(err.message, "a weight held twice counts twice"));
	assert_int_equal(weightd_share(wa, &w, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "client_max_weights"));
	weightd_release(wa2);
	/* a third weight fits the bytes; a fourth is over client_max_weights */
	ws1 = it_get_ok(c1, "m", "s1");
	assert_int_equal(it_get(c1, "m", "s2", &w, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "client_max_weights"));
	weightd_release(wa);
	weightd_release(wb);
	weightd_release(ws1);
	weightd_release(wc2);

	/* Requests in flight count too: three pipelined MiB requests, the third over the limit. */
	c3 = it_connect(&H);
	assert_int_equal(weightd_materialize(c3, "m", "a", NULL, &f[0], &err), 0);
	assert_int_equal(weightd_materialize(c3, "m", "b", NULL, &f[1], &err), 0);
	assert_int_equal(weightd_materialize(c3, "m", "c", NULL, &f[2], &err), 0);
	for (int i = 0; i < 3; i++)
		rc[i] = weightd_finish(f[i], &got[i], &err);
	assert_int_equal(rc[0], 0);
	assert_int_equal(rc[1], 0);
	assert_int_equal(rc[2], -WEIGHTD_E_LIMIT_EXCEEDED);
	for (int i = 0; i < 3; i++)
		weightd_release(got[i]);
	weightd_close(c3);
	weightd_close(c2);
	weightd_close(c1);
	it_leak_check(&H, base, 0);
}

/* --- preload --------------------------------------------------------------------------------- */

static weightd_status *wait_weights(uint64_t weights, uint64_t refs)
{
	int64_t end = it_now_ms() + 20000;
	weightd_client *c = it_connect(&H);
	weightd_status *st;

	for (;;) {
		st = it_status(c);
		if ((st->weights == weights && st->references == refs &&
		     st->materializations_in_flight == 0) || it_now_ms() > end)
			break;
		weightd_status_free(st);
		usleep(10000);
	}
	weightd_close(c);
	return st;
}

static void write_preload_config(const char *p_path, const char *preload, bool with_p)
{
	char sec[2048], m_path[512];

	harness_path(&H, "m.safetensors", m_path, sizeof(m_path));
	if (with_p)
		snprintf(sec, sizeof(sec), "[checkpoint:p]\npath = %s\npreload = %s\n\n"
			 "[checkpoint:m]\npath = %s\n", p_path, preload, m_path);
	else
		snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", m_path);
	assert_int_equal(harness_write_config(&H, "budget = 4M", sec), 0);
}

static void reload_ok(void)
{
	weightd_client *c = it_connect(&H);
	weightd_error err;

	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	weightd_close(c);
}

static const char *const p_names[] = { "p0", "p1", "p2", "p3" };

/* Bind all of p in one unit; check every byte against seeds seed..seed+3; return bytes read. */
static uint64_t bind_p(weightd_client *c, unsigned seed, uint64_t generation)
{
	weightd_unit *u = NULL;
	weightd_error err;
	uint64_t read;

	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	for (int i = 0; i < 4; i++) {
		assert_true(weightd_unit_slot(u, p_names[i], "U8", (uint64_t[]){ 262144 }, 1, NULL,
					      &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(u, p_names[i], "p", p_names[i], NULL, &err), 0);
	}
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	if (weightd_unit_validate(u, &err) < 0)
		fail_msg("validate: %s", err.message);
	for (int i = 0; i < 4; i++) {
		const uint8_t *mem = weightd_unit_data(u, p_names[i]);
		assert_int_equal(it_pattern_mismatch(mem, 262144, seed + (unsigned)i), -1);
		assert_int_equal(weightd_weight_generation(weightd_unit_weight(u, p_names[i])),
				 generation);
	}
	read = weightd_unit_bytes_read(u);
	weightd_unit_free(u);
	return read;
}

static void preload_keeps_a_checkpoint_resident(void **state)
{
	char p_path[512], m_path[512], tmp[600];
	weightd_client *c;
	weightd_status *st;
	uint64_t evicted = 99, bytes = 0;
	weightd_error err;
	int base;

	harness_path(&H, "p.safetensors", p_path, sizeof(p_path));
	harness_path(&H, "m.safetensors", m_path, sizeof(m_path));
	it_fixture("safetensors %s --seed 10 --tensor p0:U8:262144 --tensor p1:U8:262144 "
		   "--tensor p2:U8:262144 --tensor p3:U8:262144", p_path);
	it_fixture("safetensors %s --tensor x:U8:1048576", m_path);
	write_preload_config(p_path, "yes", true);
	assert_int_equal(harness_start(&H), 0);

	/* After READY the daemon materializes p on its own and holds every weight itself. */
	st = wait_weights(4, 4);
	assert_int_equal(st->weights, 4);
	assert_int_equal(st->references, 4);
	assert_int_equal(st->bytes_read, 1 * MiB);
	for (size_t i = 0; i < st->n_weights; i++) {
		assert_int_equal(st->weight_list[i].refs, 1);
		assert_int_equal(st->weight_list[i].clients, 0);
	}
	weightd_status_free(st);
	base = it_fd_base_refs(&H, 4);

	/* A client binding p reads nothing: the preloaded weights are the ones it gets. */
	c = it_connect(&H);
	assert_int_equal(bind_p(c, 10, 1), 0);
	/* Evicting everything unreferenced leaves the preloaded weights. */
	assert_int_equal(weightd_evict(c, &evicted, &bytes, &err), 0);
	assert_int_equal(evicted, 0);
	st = it_status(c);
	assert_int_equal(st->weights, 4);
	assert_int_equal(st->bytes_read, 1 * MiB);
	weightd_status_free(st);
	weightd_close(c);

	/* preload turned off: the daemon lets go; the weights become ordinary, evictable ones */
	write_preload_config(p_path, "no", true);
	reload_ok();
	st = wait_weights(4, 0);
	assert_int_equal(st->references, 0);
	weightd_status_free(st);
	c = it_connect(&H);
	assert_int_equal(weightd_evict(c, &evicted, &bytes, &err), 0);
	assert_int_equal(evicted, 4);
	assert_int_equal(bytes, 1 * MiB);
	weightd_close(c);

	/* on again: materialized again */
	write_preload_config(p_path, "yes", true);
	reload_ok();
	st = wait_weights(4, 4);
	assert_int_equal(st->bytes_read, 2 * MiB);
	weightd_status_free(st);

	/* a new version of the file: the new generation is preloaded, the old one dropped */
	snprintf(tmp, sizeof(tmp), "%s.new", p_path);
	it_fixture("safetensors %s --seed 20 --tensor p0:U8:262144 --tensor p1:U8:262144 "
		   "--tensor p2:U8:262144 --tensor p3:U8:262144", tmp);
	assert_int_equal(rename(tmp, p_path), 0);
	reload_ok();
	st = wait_weights(4, 4);
	assert_int_equal(st->weights, 4);
	for (size_t i = 0; i < st->n_weights; i++)
		assert_int_equal(st->weight_list[i].generation, 2);
	assert_int_equal(it_source(st, "p")->generation, 2);
	assert_int_equal(st->bytes_read, 3 * MiB);
	weightd_status_free(st);
	c = it_connect(&H);
	assert_int_equal(bind_p(c, 20, 2), 0);
	weightd_close(c);

	/* p removed from the configuration: its weights go */
	write_preload_config(p_path, "yes", false);
	reload_ok();
	st = wait_weights(0, 0);
	assert_int_equal(st->weights, 0);
	assert_null(it_source(st, "p"));
	weightd_status_free(st);
	it_leak_check(&H, base, 0);
}

/* --- reload ---------------------------------------------------------------------------------- */

static void write_abc_config(bool a, bool b, bool c)
{
	char sec[2048], pa[512], pb[512], pc[512];
	size_t len = 0;

	harness_path(&H, "A.safetensors", pa, sizeof(pa));
	harness_path(&H, "B.safetensors", pb, sizeof(pb));
	harness_path(&H, "C.safetensors", pc, sizeof(pc));
	sec[0] = '\0';
	if (a)
		len += (size_t)snprintf(sec + len, sizeof(sec) - len, "[checkpoint:A]\npath = %s\n\n", pa);
	if (b)
		len += (size_t)snprintf(sec + len, sizeof(sec) - len, "[checkpoint:B]\npath = %s\n\n", pb);
	if (c)
		snprintf(sec + len, sizeof(sec) - len, "[checkpoint:C]\npath = %s\n\n", pc);
	assert_int_equal(harness_write_config(&H, NULL, sec), 0);
}

/* Replace B's file with a new version (written aside, renamed over: how checkpoints land). */
static void new_b(unsigned seed)
{
	char pb[512], tmp[600];

	harness_path(&H, "B.safetensors", pb, sizeof(pb));
	snprintf(tmp, sizeof(tmp), "%s.new", pb);
	it_fixture("safetensors %s --seed %u --tensor t:U8:65536", tmp, seed);
	assert_int_equal(rename(tmp, pb), 0);
}

/* Collect events until `n` arrived (or 10 s); returns how many match checkpoint/what/generation. */
static int events_match(weightd_client *s, const char *ckpt, const char *what, uint64_t gen,
			weightd_event_list **all, size_t n)
{
	int64_t end = it_now_ms() + 10000;
	weightd_error err;
	int hits = 0;

	while ((*all == NULL || (*all)->count < n) && it_now_ms() < end) {
		weightd_event_list *l = NULL;
		if (weightd_poll_events(s, 200, &l, &err) < 0)
			fail_msg("poll events: %s", err.message);
		if (*all == NULL || l->count) {
			weightd_event_list_free(*all);
			*all = l;
		} else {
			weightd_event_list_free(l);
		}
	}
	for (size_t i = 0; *all && i < (*all)->count; i++) {
		const weightd_event *e = &(*all)->events[i];
		hits += strcmp(e->checkpoint, ckpt) == 0 && strcmp(e->what, what) == 0 &&
			e->generation == gen;
	}
	return hits;
}

static void reload_adds_removes_and_makes_new_generations(void **state)
{
	char pa[512], pc[512];
	weightd_client *x, *s, *c;
	weightd_weight *xa, *xb, *nb, *wc, *w = NULL;
	weightd_status *st;
	weightd_source_list *l = NULL;
	weightd_event_list *ev = NULL;
	weightd_error err;
	const char *all[] = { "*" };
	struct stat sx, sn;
	int base;

	harness_path(&H, "A.safetensors", pa, sizeof(pa));
	harness_path(&H, "C.safetensors", pc, sizeof(pc));
	it_fixture("safetensors %s --seed 0 --tensor t:U8:65536", pa);
	it_fixture("safetensors %s --seed 60 --tensor t:U8:65536", pc);
	new_b(30);
	write_abc_config(true, true, false);
	assert_int_equal(harness_start(&H), 0);
	base = it_fd_base(&H);

	x = it_connect(&H);
	s = it_connect(&H);
	c = it_connect(&H);
	assert_int_equal(weightd_subscribe(s, all, 1, &err), 0);
	xa = it_get_ok(x, "A", "t");
	xb = it_get_ok(x, "B", "t");
	check_pattern(xb, 30);
	assert_int_equal(weightd_weight_generation(xb), 1);

	/* C added, A removed, B's file replaced; admin reload */
	new_b(40);
	write_abc_config(false, true, true);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);

	assert_int_equal(weightd_list(c, &l, &err), 0);
	assert_int_equal(l->count, 2);
	for (size_t i = 0; i < l->count; i++)
		assert_true(strcmp(l->sources[i].name, "B") == 0 || strcmp(l->sources[i].name, "C") == 0);
	weightd_source_list_free(l);
	/* removed: no new requests */
	assert_int_equal(it_get(c, "A", "t", &w, &err), -WEIGHTD_E_UNKNOWN_SOURCE);
	/* added: served */
	wc = it_get_ok(c, "C", "t");
	check_pattern(wc, 60);
	/* changed: new requests get the new generation, a new segment with the new bytes */
	nb = it_get_ok(c, "B", "t");
	check_pattern(nb, 40);
	assert_int_equal(weightd_weight_generation(nb), 2);
	fstat(weightd_weight_fd(xb), &sx);
	fstat(weightd_weight_fd(nb), &sn);
	assert_true(sx.st_ino != sn.st_ino);
	/* ... while the old holders keep the old bytes, untouched */
	check_pattern(xb, 30);
	check_pattern(xa, 0);
	st = it_status(c);
	assert_int_equal(it_source(st, "B")->generation, 2);
	assert_null(it_source(st, "A"));
	assert_int_equal(st->weights, 4); /* A:t and B:t gen 1 (held by x), B:t gen 2, C:t */
	weightd_status_free(st);
	/* the subscriber was told */
	assert_int_equal(events_match(s, "B", "generation", 2, &ev, 2), 1);
	assert_int_equal(events_match(s, "A", "removed", 1, &ev, 2), 1);
	weightd_event_list_free(ev);
	ev = NULL;

	/* When the old holder lets go, the old generation's weights go (nothing can ask for them). */
	weightd_release(xa);
	weightd_release(xb);
	weightd_close(x);
	st = it_wait_quiet(&H, 2, 2, 10000);
	assert_int_equal(st->references, 2); /* c holds B:t gen 2 and C:t */
	assert_int_equal(st->weights, 2);
	for (size_t i = 0; i < st->n_weights; i++) {
		const weightd_weight_status *ws = &st->weight_list[i];
		assert_true((strcmp(ws->source, "B") == 0 && ws->generation == 2) ||
			    strcmp(ws->source, "C") == 0);
	}
	weightd_status_free(st);
	assert_int_equal(harness_segments(&H), 2);

	/* SIGHUP does the same */
	new_b(50);
	harness_forget_notify(&H); /* the admin reload's RELOADING=1 and READY=1 */
	assert_int_equal(kill(H.pid, SIGHUP), 0);
	assert_int_equal(harness_wait_notify(&H, "RELOADING=1", 10000), 0);
	assert_int_equal(harness_wait_notify(&H, "READY=1", 10000), 0);
	weightd_release(nb);
	nb = it_get_ok(c, "B", "t");
	check_pattern(nb, 50);
	assert_int_equal(weightd_weight_generation(nb), 3);
	assert_int_equal(events_match(s, "B", "generation", 3, &ev, 1), 1);
	weightd_event_list_free(ev);
	weightd_release(nb);
	weightd_release(wc);
	weightd_close(s);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* --- restart --------------------------------------------------------------------------------- */

#define N_RT 4
static const char *const rt_names[N_RT] = { "w0", "w1", "w2", "w3" };
static const uint64_t rt_bytes[N_RT] = { 256 * 64 * 4, 128 * 128 * 2, 100000, 33 * 7 * 2 };

static int bind_rt(weightd_client *c, weightd_unit **ret, weightd_error *err)
{
	int r = it_unit_of(c, "r", rt_names, N_RT, true, ret, err);

	if (r >= 0)
		weightd_unit_bind(*ret);
	return r;
}

/* "ok" when every slot holds the checkpoint's bytes, else the first bad slot. */
static const char *rt_verify(weightd_unit *u)
{
	for (int i = 0; i < N_RT; i++)
		if (it_pattern_mismatch(weightd_unit_data(u, rt_names[i]), rt_bytes[i],
					(unsigned)i) >= 0)
			return rt_names[i];
	return "ok";
}

/*
 * The client of the restart test. Binds r, prints "bound READ ino0 ino1 ...", then on 'd'
 * (daemon is down) checks its memory and that calls fail with disconnected, on 'r' (daemon is
 * back) reconnects, binds r again and prints "rebound READ ino0 ...", and checks the bytes.
 */
static void rt_child(int in, int out)
{
	weightd_client *c = NULL, *c2 = NULL;
	weightd_unit *u = NULL, *u2 = NULL;
	weightd_status *st = NULL;
	weightd_inflight *f = NULL;
	weightd_error err;
	char op;

	if (weightd_connect(H.sock, "restart-child", &c, &err) < 0 || bind_rt(c, &u, &err) < 0) {
		it_say(out, "error %s\n", err.message);
		_exit(1);
	}
	it_say(out, "bound %llu", (unsigned long long)weightd_unit_bytes_read(u));
	for (int i = 0; i < N_RT; i++) {
		struct stat sb;
		fstat(weightd_weight_fd(weightd_unit_weight(u, rt_names[i])), &sb);
		it_say(out, " %llu", (unsigned long long)sb.st_ino);
	}
	it_say(out, "\n");
	while (read(in, &op, 1) == 1) {
		if (op == 'd') {
			int r1 = weightd_status_get(c, &st, &err);
			int r2;
			it_say(out, "memory %s status %d %s\n", rt_verify(u), r1,
			    err.message[0] ? "message" : "silent");
			r2 = weightd_materialize(c, "r", "w0", NULL, &f, &err);
			if (r2 == 0)
				r2 = weightd_finish(f, NULL, &err);
			it_say(out, "materialize %d\n", r2);
		} else if (op == 'r') {
			if (weightd_connect(H.sock, "restart-child-again", &c2, &err) < 0 ||
			    bind_rt(c2, &u2, &err) < 0) {
				it_say(out, "error %s\n", err.message);
				_exit(1);
			}
			it_say(out, "rebound %llu", (unsigned long long)weightd_unit_bytes_read(u2));
			for (int i = 0; i < N_RT; i++) {
				struct stat sb;
				fstat(weightd_weight_fd(weightd_unit_weight(u2, rt_names[i])), &sb);
				it_say(out, " %llu", (unsigned long long)sb.st_ino);
			}
			it_say(out, " %s %s\n", rt_verify(u2), rt_verify(u));
		} else {
			break;
		}
	}
	weightd_unit_free(u);
	weightd_unit_free(u2);
	weightd_close(c);
	weightd_close(c2);
	_exit(0);
}

static void restart_after_kill9_rereads_nothing(void **state)
{
	char path[512], sec[1024], line[1024], line2[1024], bound_line[1024], junk[256], foreign[256], rec[600];
	int to, from, base, fd;
	unsigned long long read1, read2, ino1[N_RT], ino2[N_RT];
	uint64_t total = 0;
	weightd_status *st;
	FILE *out;
	pid_t pid;

	harness_path(&H, "r.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 0 --tensor w0:F32:256x64 --tensor w1:BF16:128x128 "
		   "--tensor w2:U8:100000 --tensor w3:F16:33x7", path);
	for (int i = 0; i < N_RT; i++)
		total += rt_bytes[i];
	snprintf(sec, sizeof(sec), "[checkpoint:r]\npath = %s\n", path);
	it_start(&H, NULL, sec);

	pid = it_fork_piped(&to, &from);
	if (pid == 0)
		rt_child(to, from);
	out = fdopen(from, "r");
	assert_non_null(fgets(bound_line, sizeof(bound_line), out));
	assert_int_equal(sscanf(bound_line, "bound %llu", &read1), 1);
	assert_int_equal(read1, total);

	/* Leftovers a crash can leave: a segment of ours the index does not vouch for, a record
	 * whose segment is gone, a temp file of an interrupted write; and an object under the prefix
	 * weightd never makes (not its name pattern), which must be left alone. */
	snprintf(junk, sizeof(junk), "%s/%s.0123456789abcdef0123456789abcdef", H.shm_dir, H.prefix);
	fd = open(junk, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "junk", 4), 4);
	close(fd);
	snprintf(foreign, sizeof(foreign), "%s/%s.squat", H.shm_dir, H.prefix);
	fd = open(foreign, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(rec, sizeof(rec), "%s/state/%s/%064d.json", H.dir, H.prefix, 0);
	fd = open(rec, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	dprintf(fd, "{\"version\":1,\"key\":\"%064d\",\"digest\":\"%064d\",\"dtype\":\"U8\","
		"\"shape\":[4],\"nbytes\":4,\"segment\":\"/%s.00000000000000000000000000000000\","
		"\"label\":\"r:gone\","
		"\"source\":\"r\",\"generation\":1}", 0, 0, H.prefix);
	close(fd);

	harness_kill(&H);
	/* the daemon is gone: the client's memory is intact and calls say so clearly */
	assert_int_equal(write(to, "d", 1), 1);
	assert_non_null(fgets(line, sizeof(line), out));
	snprintf(line2, sizeof(line2), "memory ok status %d message\n", -WEIGHTD_E_DISCONNECTED);
	assert_string_equal(line, line2);
	assert_non_null(fgets(line, sizeof(line), out));
	snprintf(line2, sizeof(line2), "materialize %d\n", -WEIGHTD_E_DISCONNECTED);
	assert_string_equal(line, line2);

	/* back: every weight re-adopted, the junk gone, nothing read */
	assert_int_equal(harness_start(&H), 0);
	assert_true(harness_log_contains(&H, "re-adopted 4 weights, removed 1 stale segments"));
	/* in a segment_dir only root could have put it there: never used or removed, and no look
	 * for such names runs (nobody else can make one) */
	assert_true(harness_log_contains(&H, ".squat; they are ignored") == !H.seg_dir[0]);
	st = it_status_of(&H);
	assert_int_equal(st->foreign_segments, H.seg_dir[0] ? 0 : 1);
	assert_int_equal(st->readoptions, N_RT);
	assert_int_equal(st->weights, N_RT);
	assert_int_equal(st->bytes_read, 0);
	for (size_t i = 0; i < st->n_weights; i++)
		assert_true(st->weight_list[i].adopted);
	weightd_status_free(st);
	assert_int_equal(access(junk, F_OK), -1);
	assert_int_equal(access(rec, F_OK), -1);
	assert_int_equal(access(foreign, F_OK), 0);
	assert_int_equal(unlink(foreign), 0);
	/* the unit's weights were made by one request: one segment, re-adopted whole */
	st = it_status_of(&H);
	assert_int_equal(st->segments, 1);
	weightd_status_free(st);
	assert_int_equal(harness_segments(&H), 1);
	base = it_fd_base(&H);

	/* the client reconnects and asks again: the very same segments, zero bytes read */
	assert_int_equal(write(to, "r", 1), 1);
	assert_non_null(fgets(line2, sizeof(line2), out));
	assert_int_equal(sscanf(line2, "rebound %llu", &read2), 1);
	assert_int_equal(read2, 0);
	assert_int_equal(sscanf(bound_line, "bound %*u %llu %llu %llu %llu", &ino1[0], &ino1[1],
				&ino1[2], &ino1[3]), 4);
	assert_int_equal(sscanf(line2, "rebound %*u %llu %llu %llu %llu", &ino2[0], &ino2[1],
				&ino2[2], &ino2[3]), 4);
	for (int i = 0; i < N_RT; i++)
		assert_int_equal(ino1[i], ino2[i]);
	/* the new unit has the checkpoint's bytes; the one bound before the crash still does */
	assert_non_null(strstr(line2, " ok ok\n"));
	st = it_status_of(&H);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);
	assert_int_equal(write(to, "q", 1), 1);
	close(to);
	fclose(out);
	it_wait_child_ok(pid);

	/* Re-adopted weights belong to their checkpoint again once asked for: a new version of the
	 * file and a reload drop them like any weight of an old generation. */
	{
		char tmp[600];
		weightd_client *c;
		weightd_error err;

		snprintf(tmp, sizeof(tmp), "%s.new", path);
		it_fixture("safetensors %s --seed 50 --tensor w0:F32:256x64", tmp);
		assert_int_equal(rename(tmp, path), 0);
		c = it_connect(&H);
		if (weightd_reload(c, &err) < 0)
			fail_msg("reload: %s", err.message);
		weightd_close(c);
		st = it_wait_quiet(&H, 0, 0, 10000);
		assert_int_equal(st->weights, 0);
		weightd_status_free(st);
	}
	it_leak_check(&H, base, 0);
}

/*
 * Re-adoption takes only what the state index vouches for: a segment replaced by another file
 * (same name, same bytes, new inode) is dropped, and with verify_adopted a segment whose bytes
 * changed is dropped too. Only those are read again.
 */
static void readoption_checks_what_the_index_vouches_for(void **state)
{
	char path[512], sec[1024], seg[4][320];
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;
	uint8_t *copy;
	int fd, base;

	harness_path(&H, "r.safetensors", path, sizeof(path));
	it_fixture("safetensors %s --seed 0 --tensor w0:F32:256x64 --tensor w1:BF16:128x128 "
		   "--tensor w2:U8:100000 --tensor w3:F16:33x7", path);
	snprintf(sec, sizeof(sec), "[checkpoint:r]\npath = %s\n", path);
	it_start(&H, "verify_adopted = yes", sec);
	/* each weight in a segment of its own: single gets share the open arena, and a restarted
	 * daemon opens a new one, so each is asked of a daemon of its own */
	for (int i = 0; i < N_RT; i++) {
		if (i) {
			weightd_close(c);
			harness_kill(&H);
			assert_int_equal(harness_start(&H), 0);
		}
		c = it_connect(&H);
		weightd_release(it_get_ok(c, "r", rt_names[i]));
	}
	st = it_status(c);
	assert_int_equal(st->segments, N_RT);
	for (int i = 0; i < N_RT; i++) {
		const weightd_weight_status *ws = it_weight(st, "r", rt_names[i]);

		assert_non_null(ws);
		assert_int_equal(ws->offset, 0);
		seg[i][0] = '\0';
		for (size_t k = 0; k < st->n_segments; k++)
			if (st->segment_list[k].id == ws->segment)
				snprintf(seg[i], sizeof(seg[i]), "%s%s", H.shm_dir,
					 st->segment_list[k].name);
		assert_int_equal(access(seg[i], F_OK), 0);
	}
	weightd_status_free(st);
	u = NULL;
	weightd_unit_free(u);
	weightd_close(c);
	harness_kill(&H);

	/* w1: one byte changed in place (the inode stays) */
	fd = open(seg[1], O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\xff", 1, 100), 1);
	close(fd);
	/* w2: the same bytes under the same name, but another file */
	copy = malloc(rt_bytes[2]);
	assert_non_null(copy);
	fd = open(seg[2], O_RDONLY);
	assert_int_equal(read(fd, copy, rt_bytes[2]), (ssize_t)rt_bytes[2]);
	close(fd);
	assert_int_equal(unlink(seg[2]), 0);
	fd = open(seg[2], O_CREAT | O_EXCL | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, copy, rt_bytes[2]), (ssize_t)rt_bytes[2]);
	close(fd);
	free(copy);

	assert_int_equal(harness_start(&H), 0);
	base = it_fd_base(&H);
	assert_true(harness_log_contains(&H, "do not have the recorded xxh3-128 digest"));
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, 2);
	assert_int_equal(st->weights, 2);
	assert_non_null(it_weight(st, "r", "w0"));
	assert_non_null(it_weight(st, "r", "w3"));
	weightd_status_free(st);
	assert_int_equal(access(seg[1], F_OK), -1);
	assert_int_equal(access(seg[2], F_OK), -1);
	assert_int_equal(harness_segments(&H), 2);

	/* asking again reads exactly the two that were dropped, and every byte is right */
	c = it_connect(&H);
	assert_int_equal(bind_rt(c, &u, &err), 0);
	assert_int_equal(weightd_unit_bytes_read(u), rt_bytes[1] + rt_bytes[2]);
	assert_string_equal(rt_verify(u), "ok");
	weightd_unit_free(u);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* --- weightctl status, weightd --purge ---------------------------------------------------- */

static int weightctl(char *out, size_t cap, const char *a1, const char *a2, const char *a3,
		     const char *a4, const char *a5)
{
	char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, (char *)a1, (char *)a2,
			 (char *)a3, (char *)a4, (char *)a5, NULL };

	return harness_run(argv, out, cap, (uid_t)-1);
}

/* weightd --purge with up to five more arguments (NULL-terminated), output in out. */
static int purge(char *out, size_t cap, const char *a1, const char *a2, const char *a3,
		 const char *a4, const char *a5)
{
	char *argv[] = { (char *)harness_weightd(), "--purge", (char *)a1, (char *)a2, (char *)a3,
			 (char *)a4, (char *)a5, NULL };

	return harness_run(argv, out, cap, (uid_t)-1);
}

static json_t *status_json(void)
{
	static char out[1 << 16];
	json_error_t jerr;
	json_t *j;

	assert_int_equal(weightctl(out, sizeof(out), "--json", "status", NULL, NULL, NULL), 0);
	j = json_loads(out, 0, &jerr);
	if (!j)
		fail_msg("weightctl status --json: %s", jerr.text);
	return j;
}

static json_int_t jint(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v))
		fail_msg("weightctl status --json: no integer \"%s\"", key);
	return json_integer_value(v);
}

/*
 * weightctl status shows what the lifecycle did: budget use, evictions, generations of sources
 * and weights, references per weight, and re-adoptions after a restart. weightd --purge removes
 * an instance's segments and records, and refuses while the daemon runs.
 */
static void weightctl_status_and_purge(void **state)
{
	char path[512], tmp[600], out[1 << 16];
	weightd_client *c;
	weightd_weight *wa, *wb, *wc;
	json_t *j, *ws;
	size_t i;
	int segs;

	c = five_mib_tensors(path, sizeof(path), NULL, "budget = 2M", NULL);
	wa = it_get_ok(c, "m", "a");
	weightd_release(wa);
	wb = it_get_ok(c, "m", "b");
	wc = it_get_ok(c, "m", "c"); /* evicts a */
	weightd_release(it_get_ok(c, "m", "b")); /* b: a second reference, let go */

	j = status_json();
	assert_int_equal(jint(j, "budget_bytes"), 2 * MiB);
	assert_int_equal(jint(j, "bytes_resident"), 2 * MiB);
	assert_int_equal(jint(j, "evictions"), 1);
	assert_int_equal(jint(j, "references"), 2);
	assert_int_equal(jint(j, "readoptions"), 0);
	assert_int_equal(jint(json_array_get(json_object_get(j, "sources"), 0), "generation"), 1);
	json_array_foreach(json_object_get(j, "weight_list"), i, ws) {
		assert_int_equal(jint(ws, "refs"), 1);
		assert_int_equal(jint(ws, "clients"), 1);
		assert_int_equal(jint(ws, "generation"), 1);
	}
	json_decref(j);
	assert_int_equal(weightctl(out, sizeof(out), "status", NULL, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "of budget 2097152"));
	assert_non_null(strstr(out, "evictions                   1"));
	assert_non_null(strstr(out, "re-adoptions                0"));
	assert_non_null(strstr(out, "REFS"));
	assert_non_null(strstr(out, "GEN"));
	weightd_release(wb);
	weightd_release(wc);

	/* a new version of m: generation 2 in the sources and in a new weight */
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	it_fixture("safetensors %s --seed 9 --tensor a:U8:1048576 --tensor b:U8:1048576", tmp);
	assert_int_equal(rename(tmp, path), 0);
	reload_ok();
	weightd_release(it_get_ok(c, "m", "a"));
	weightd_close(c);
	j = status_json();
	assert_int_equal(jint(json_array_get(json_object_get(j, "sources"), 0), "generation"), 2);
	json_array_foreach(json_object_get(j, "weight_list"), i, ws)
		assert_int_equal(jint(ws, "generation"), 2);
	json_decref(j);

	/* crash and restart: the re-adoption shows */
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	j = status_json();
	assert_int_equal(jint(j, "readoptions"), 1);
	json_array_foreach(json_object_get(j, "weight_list"), i, ws)
		assert_true(json_is_true(json_object_get(ws, "adopted")));
	json_decref(j);
	assert_int_equal(weightctl(out, sizeof(out), "status", NULL, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "re-adoptions                1"));

	/* purge refuses while the daemon runs, and leaves everything */
	segs = harness_segments(&H);
	assert_int_equal(segs, 1);
	assert_int_equal(purge(out, sizeof(out), "--config", H.conf, NULL, NULL, NULL), 1);
	assert_int_equal(harness_segments(&H), segs);

	/* stopped cleanly, the segments stay for the next start; purge takes them and the records */
	assert_int_equal(harness_stop(&H), 0);
	assert_int_equal(harness_segments(&H), segs);
	assert_int_equal(purge(out, sizeof(out), "--config", H.conf, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "removed 1 segment under"));
	assert_non_null(strstr(out, "1 state record"));
	assert_int_equal(harness_segments(&H), 0);

	/* the --prefix form, after a crash */
	assert_int_equal(harness_start(&H), 0);
	c = it_connect(&H);
	weightd_release(it_get_ok(c, "m", "a"));
	weightd_release(it_get_ok(c, "m", "b"));
	weightd_close(c);
	harness_kill(&H);
	assert_int_equal(harness_segments(&H), 1); /* both in one arena */
	snprintf(tmp, sizeof(tmp), "%s/state", H.dir);
	assert_int_equal(purge(out, sizeof(out), "--json", "--prefix", H.prefix, "--state-dir", NULL),
			 2); /* missing value: usage */
	{
		char *argv[] = { (char *)harness_weightd(),
				 "--purge",
				 "--socket",
				 H.sock,
				 "--json",
				 "--prefix",
				 H.prefix,
				 "--state-dir",
				 tmp,
				 H.seg_dir[0] ? "--segment-dir" : NULL,
				 H.seg_dir,
				 NULL };
		assert_int_equal(harness_run(argv, out, sizeof(out), (uid_t)-1), 0);
	}
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_int_equal(jint(j, "segments"), 1);
	assert_int_equal(jint(j, "state_records"), 1);
	json_decref(j);
	assert_int_equal(harness_segments(&H), 0);

	/* a start after a purge has nothing to re-adopt and reads again */
	assert_int_equal(harness_start(&H), 0);
	j = status_json();
	assert_int_equal(jint(j, "readoptions"), 0);
	assert_int_equal(jint(j, "weights"), 0);
	json_decref(j);
	it_leak_check(&H, it_fd_base(&H), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_IN_DIR(eviction_follows_lru_order),
		TEST_IN_DIR(held_weights_stay_and_what_cannot_fit_fails_cleanly),
		TEST_IN_DIR(per_client_limits),
		TEST_IN_DIR(preload_keeps_a_checkpoint_resident),
		TEST_IN_DIR(reload_adds_removes_and_makes_new_generations),
		TEST_IN_DIR(restart_after_kill9_rereads_nothing),
		TEST_IN_DIR(readoption_checks_what_the_index_vouches_for),
		TEST_IN_DIR(weightctl_status_and_purge),
	};

	if (getenv("WD_TEST_FILTER")) /* e.g. WD_TEST_FILTER='preload*' runs only those */
		cmocka_set_test_filter(getenv("WD_TEST_FILTER"));
	alarm(280); /* watchdog: a hung daemon fails the test instead of stalling CI */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
