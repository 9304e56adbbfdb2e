/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_restart_holds.c - held means held: no restart of weightd (SIGTERM, SIGKILL idle or mid-fill)
 * and nothing after it (budget pressure from another client, weightctl evict, a reload with the
 * file replaced, weightd --purge) changes a byte a running engine maps, whether that engine never
 * talks to weightd again, lives in a PID namespace of its own, forked after binding, or
 * reconnects; and through a restart as weightd.service and weightd.socket make it. Each engine is
 * a separate process on the real libweightd; its bytes are checked by a digest it takes at bind
 * and against the fixture's pattern, before, during and after.
 */
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>

#include "fixture.h"

/* Checkpoint h: N_T tensors of 1 MiB, t0..t19, each its own pattern seed (k). */
#define N_T 20
#define T_BYTES (1u << 20)
static char names[N_T][8];
static const char *name_of[N_T];

static void fixture(const char *file, unsigned seed)
{
	char args[4096], path[512];
	int n;

	harness_path(&H, file, path, sizeof(path));
	n = snprintf(args, sizeof(args), "safetensors %s --seed %u", path, seed);
	for (int k = 0; k < N_T; k++) {
		snprintf(names[k], sizeof(names[k]), "t%d", k);
		name_of[k] = names[k];
		n += snprintf(args + n, sizeof(args) - (size_t)n, " --tensor t%d:U8:%u", k, T_BYTES);
	}
	it_fixture("%s", args);
}

/* weightd with checkpoint h (and big, when asked) and a budget of 12 MiB: ten held tensors
 * leave room for two more. */
static void start(const char *extra)
{
	char sec[2048], path[512], big[512];

	fixture("h.safetensors", 0);
	harness_path(&H, "h.safetensors", path, sizeof(path));
	harness_path(&H, "big.safetensors", big, sizeof(big));
	snprintf(sec, sizeof(sec), "[checkpoint:h]\npath = %s\n%s%s%s", path,
		 access(big, F_OK) == 0 ? "[checkpoint:big]\npath = " : "",
		 access(big, F_OK) == 0 ? big : "", access(big, F_OK) == 0 ? "\n" : "");
	it_start(&H, extra ? extra : "budget = 12M", sec);
}

/* FNV-1a over n bytes, continued from h: the engine's own digest of what it maps. */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* --- the engine: a separate process holding tensors [from, from + n) of h as one bound unit --- */

enum engine_mode {
	ENGINE_SILENT,   /* binds, then never calls weightd again */
	ENGINE_TALKS,    /* on 't', calls weightd again (status, events, a share) */
	ENGINE_FORKED,   /* binds, forks: the child holds, the parent releases and exits */
	ENGINE_PIDNS,    /* ENGINE_SILENT in a PID namespace of its own */
};

struct engine {
	pid_t pid;
	int to;
	FILE *from;
};

/* The digest of every slot, or "name" of the first slot off its pattern in *bad. */
static uint64_t unit_digest(weightd_unit *u, int from, int n, const char **bad)
{
	uint64_t h = 0xcbf29ce484222325ull;

	*bad = NULL;
	for (int k = from; k < from + n; k++) {
		const uint8_t *p = weightd_unit_data(u, name_of[k]);

		if (!p || it_pattern_mismatch(p, T_BYTES, (unsigned)k) >= 0) {
			if (!*bad)
				*bad = name_of[k];
			continue;
		}
		h = fnv(h, p, T_BYTES);
	}
	return h;
}

static void engine_loop(weightd_client *c, weightd_unit *u, int from, int n, uint64_t d0, int in,
			int out)
{
	const char *bad;
	char op;

	while (read(in, &op, 1) == 1) {
		if (op == 'c') {
			uint64_t d = unit_digest(u, from, n, &bad);

			it_say(out, "%s %s\n", bad ? "changed" : d == d0 ? "same" : "differs",
			    bad ? bad : "-");
		} else if (op == 't') {
			/* talk again: the first call connects anew and re-attaches what is held */
			weightd_status *st = NULL;
			weightd_event_list *ev = NULL;
			weightd_weight *sh = NULL;
			weightd_error err;
			int r = weightd_status_get(c, &st, &err);
			uint64_t attached = UINT64_MAX;

			weightd_status_free(st);
			if (r == 0 && weightd_poll_events(c, 0, &ev, &err) == 0) {
				for (size_t i = 0; i < ev->count; i++)
					if (strcmp(ev->events[i].what, WEIGHTD_EVENT_RECONNECTED) == 0)
						attached = ev->events[i].generation;
				weightd_event_list_free(ev);
			}
			if (r == 0)
				r = weightd_share(weightd_unit_weight(u, name_of[from]), &sh, &err);
			if (r == 0 && it_pattern_mismatch(it_map(sh), T_BYTES, (unsigned)from) >= 0)
				r = -1;
			weightd_release(sh);
			it_say(out, "talked %d reattached %lld %s\n", r,
			    attached == UINT64_MAX ? -1ll : (long long)attached,
			    r < 0 && r != -1 ? err.message : "-");
		} else if (op == 'g') {
			/* the tensor after its range, fetched and let go */
			weightd_weight *w = NULL;
			weightd_error err;
			int r = it_get(c, "h", name_of[from + n], &w, &err);

			if (r == 0 &&
			    it_pattern_mismatch(it_map(w), T_BYTES, (unsigned)(from + n)) >= 0)
				r = -1;
			weightd_release(w);
			it_say(out, "got %d\n", r);
		} else {
			break;
		}
	}
	weightd_unit_free(u);
	weightd_close(c);
	_exit(0);
}

/* The engine's process body: connect, bind, say "bound DIGEST", then obey. */
static void engine_main(enum engine_mode mode, int from, int n, int in, int out)
{
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	const char *bad;
	uint64_t d0;

	if (weightd_connect(H.sock, "engine", &c, &err) < 0 ||
	    it_unit_of(c, "h", name_of + from, (size_t)n, true, &u, &err) < 0) {
		it_say(out, "error %s\n", err.message);
		_exit(1);
	}
	weightd_unit_bind(u);
	d0 = unit_digest(u, from, n, &bad);
	if (bad) {
		it_say(out, "error %s differs at bind\n", bad);
		_exit(1);
	}
	if (mode == ENGINE_FORKED) {
		pid_t kid = fork();

		if (kid < 0)
			_exit(4);
		if (kid > 0) {
			/* the parent lets go of everything (a release weightd hears) and leaves: the
			 * child's mapping is all that keeps the weights */
			weightd_unit_free(u);
			weightd_close(c);
			_exit(0);
		}
		/* the child: its copy of the client is the parent's; it only computes */
	}
	it_say(out, "bound %llu\n", (unsigned long long)d0);
	engine_loop(c, u, from, n, d0, in, out);
}

static void engine_start(struct engine *e, enum engine_mode mode, int from, int n)
{
	int to[2], back[2];
	char line[512];

	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(back), 0);
	e->pid = fork();
	assert_true(e->pid >= 0);
	if (e->pid == 0) {
		close(to[1]);
		close(back[0]);
		if (mode == ENGINE_PIDNS) {
			pid_t inner;
			int status;

			/* the engine is pid 1 of a namespace of its own */
			if (unshare(CLONE_NEWPID) < 0)
				_exit(5);
			inner = fork();
			if (inner < 0)
				_exit(6);
			if (inner == 0) {
				if (getpid() != 1)
					_exit(7);
				engine_main(ENGINE_SILENT, from, n, to[0], back[1]);
			}
			close(to[0]);
			close(back[1]);
			if (waitpid(inner, &status, 0) < 0)
				_exit(8);
			_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 9);
		}
		engine_main(mode, from, n, to[0], back[1]);
	}
	close(to[0]);
	close(back[1]);
	e->to = to[1];
	e->from = fdopen(back[0], "r");
	assert_non_null(e->from);
	assert_non_null(fgets(line, sizeof(line), e->from));
	if (strncmp(line, "bound ", 6) != 0)
		fail_msg("engine: %s", line);
}

/* Ask the engine to look at its memory: "same" when every byte is as it was at bind. */
static void engine_expect_same(struct engine *e)
{
	char line[512];

	assert_int_equal(write(e->to, "c", 1), 1);
	assert_non_null(fgets(line, sizeof(line), e->from));
	if (strcmp(line, "same -\n") != 0)
		fail_msg("the engine's memory changed: %s", line);
}

static void engine_stop(struct engine *e)
{
	assert_int_equal(write(e->to, "q", 1), 1);
	close(e->to);
	fclose(e->from);
	it_wait_child_ok(e->pid);
}

/* --- what the rest of the node does --------------------------------------------------------- */

/* The weights kept for processes that map them, as status says. */
static uint64_t locked_weights(uint64_t *ret_bytes)
{
	weightd_status *st = it_status_of(&H);
	uint64_t n = st->locked_weights;

	if (ret_bytes)
		*ret_bytes = st->locked_bytes;
	weightd_status_free(st);
	return n;
}

static void wait_locked(uint64_t want)
{
	int64_t until = it_now_ms() + 20000;

	while (locked_weights(NULL) != want) {
		if (it_now_ms() > until)
			fail_msg("locked weights stayed at %llu, not %llu",
				 (unsigned long long)locked_weights(NULL), (unsigned long long)want);
		usleep(50000);
	}
}

/* Another engine wants tensors [from, from + n): 0, or the error code (nothing held after). */
static int other_unit(int from, int n, bool check)
{
	weightd_client *c = it_connect(&H);
	weightd_unit *u = NULL;
	weightd_error err;
	int r = it_unit_of(c, "h", name_of + from, (size_t)n, true, &u, &err);

	if (r == 0 && check)
		for (int k = from; k < from + n; k++)
			if (it_pattern_mismatch(weightd_unit_data(u, name_of[k]), T_BYTES,
						(unsigned)k) >= 0)
				fail_msg("%s is served wrong", name_of[k]);
	weightd_unit_free(u);
	weightd_close(c);
	return r;
}

/* Run argv (at most 6 words), its stdout and stderr together in out (a shell joins them); its
 * exit status, or -1. */
static int run(char *const argv[], char *out, size_t cap)
{
	char *sh[10] = { "/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1" };
	size_t n = 3;

	for (size_t i = 0; argv[i] && n < 9; i++)
		sh[n++] = argv[i];
	sh[n] = NULL;
	return harness_run(sh, out, cap, (uid_t)-1);
}

/* Wait until no client references any weight (the locks aside). */
static void wait_no_references(void)
{
	int64_t until = it_now_ms() + 20000;

	for (;;) {
		weightd_status *st = it_status_of(&H);
		bool none = st->references == st->locked_weights;

		weightd_status_free(st);
		if (none)
			return;
		if (it_now_ms() > until)
			fail_msg("clients still hold references");
		usleep(20000);
	}
}

static void weightctl_evict(void)
{
	char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "evict", NULL };
	char out[4096];

	assert_int_equal(run(argv, out, sizeof(out)), 0);
}

/*
 * After the restart: engine A holds t0..t9 (10 MiB) through its locks alone. weightd keeps them,
 * counted as held, so another engine's t10..t19 do not fit in the 12 MiB budget and weightctl
 * evict takes none of them; A's bytes never change. Once A lets go, they are weightd's to evict
 * again and the other engine's unit fits, with the right bytes.
 */
static void pressure_then_release(struct engine *a)
{
	uint64_t bytes = 0;

	assert_int_equal(locked_weights(&bytes), 10);
	assert_int_equal(bytes, 10ull * T_BYTES);
	engine_expect_same(a);
	assert_int_equal(other_unit(10, 10, false), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	engine_expect_same(a);
	weightctl_evict();
	engine_expect_same(a);
	assert_int_equal(locked_weights(NULL), 10);
	/* single gets of what fits, and fresh gets of what A holds: the right bytes */
	assert_int_equal(other_unit(10, 2, true), 0);
	assert_int_equal(other_unit(0, 10, true), 0);
	engine_expect_same(a);
	engine_stop(a);
	wait_locked(0);
	assert_int_equal(other_unit(10, 10, true), 0);
}

static void held_through_sigkill_idle(void **state)
{
	struct engine a;

	(void)state;
	start(NULL);
	engine_start(&a, ENGINE_SILENT, 0, 10);
	engine_expect_same(&a);
	harness_kill(&H);
	engine_expect_same(&a);
	assert_int_equal(harness_start(&H), 0);
	pressure_then_release(&a);
}

static void held_through_sigterm(void **state)
{
	struct engine a;

	(void)state;
	start(NULL);
	engine_start(&a, ENGINE_SILENT, 0, 10);
	assert_int_equal(harness_stop(&H), 0);
	engine_expect_same(&a);
	assert_int_equal(harness_start(&H), 0);
	pressure_then_release(&a);
}

/* weightd killed while it fills a 192 MiB tensor for another client. */
static void held_through_sigkill_mid_fill(void **state)
{
	char big[512];
	struct engine a;
	weightd_client *c;
	weightd_inflight *f = NULL;
	weightd_error err;

	(void)state;
	harness_path(&H, "big.safetensors", big, sizeof(big));
	it_fixture("safetensors %s --seed 3 --tensor big:U8:201326592", big);
	start("budget = 220M");
	engine_start(&a, ENGINE_SILENT, 0, 10);
	c = it_connect(&H);
	assert_int_equal(weightd_materialize(c, "big", "big", NULL, &f, &err), 0);
	/* the fill is under way (its job shows), then weightd dies */
	for (int64_t until = it_now_ms() + 10000;;) {
		weightd_status *st = it_status_of(&H);
		bool filling = st->materializations_in_flight > 0;

		weightd_status_free(st);
		if (filling)
			break;
		assert_true(it_now_ms() < until);
		usleep(1000);
	}
	harness_kill(&H);
	assert_true(weightd_finish(f, NULL, &err) < 0);
	weightd_close(c);
	engine_expect_same(&a);
	assert_int_equal(harness_start(&H), 0);
	engine_expect_same(&a);
	assert_int_equal(locked_weights(NULL), 10);
	/* every weight served after the crash is whole: the big one made anew, t0..t19 exact */
	c = it_connect(&H);
	{
		weightd_weight *w = it_get_ok(c, "big", "big");

		assert_true(it_pattern_mismatch(it_map(w), 201326592, 3) < 0);
		weightd_release(w);
	}
	weightd_close(c);
	assert_int_equal(other_unit(0, 10, true), 0);
	engine_expect_same(&a);
	engine_stop(&a);
	wait_locked(0);
}

/* After the restart the checkpoint's file is replaced and weightd reloads it: the old
 * generation's weights can never be asked for again, but A maps them, so they stay. */
static void held_through_reload_with_file_replaced(void **state)
{
	char path[512], tmp[600];
	struct engine a;
	weightd_client *c;

	(void)state;
	start("budget = 40M");
	engine_start(&a, ENGINE_SILENT, 0, 10);
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	harness_path(&H, "h.safetensors", path, sizeof(path));
	fixture("h2.safetensors", 7);
	snprintf(tmp, sizeof(tmp), "%s/h2.safetensors", H.dir);
	assert_int_equal(rename(tmp, path), 0);
	c = it_connect(&H);
	{
		weightd_error err;

		assert_int_equal(weightd_reload(c, &err), 0);
	}
	engine_expect_same(&a);
	weightctl_evict();
	engine_expect_same(&a);
	assert_int_equal(locked_weights(NULL), 10);
	/* the new generation is served with its own bytes (seed 7) */
	{
		weightd_weight *w = it_get_ok(c, "h", "t0");

		assert_true(it_pattern_mismatch(it_map(w), T_BYTES, 7) < 0);
		weightd_release(w);
	}
	weightd_close(c);
	engine_stop(&a);
	wait_locked(0);
}

/* A segment a restart cannot re-adopt (its state record never written: a crash between the two,
 * or a failed write) but that an engine still maps is kept for it, then removed once the engine
 * lets go, without another restart: before, it stayed on disk, belonging to no weight, until the
 * next start. */
static void a_segment_kept_for_its_mapper_goes_when_it_lets_go(void **state)
{
	char dir[700], instance[128];
	weightd_status *st;
	struct engine a;
	struct dirent *e;
	int64_t until;
	DIR *d;

	(void)state;
	start("budget = 40M");
	engine_start(&a, ENGINE_SILENT, 0, 4);
	st = it_status_of(&H);
	snprintf(instance, sizeof(instance), "%s", st->instance);
	weightd_status_free(st);
	harness_kill(&H);
	snprintf(dir, sizeof(dir), "%s/state/%s", H.dir, instance);
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d))) {
		char p[1024];

		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (strstr(e->d_name, ".json"))
			assert_int_equal(unlink(p), 0);
	}
	closedir(d);
	assert_int_equal(harness_start(&H), 0);
	assert_true(harness_log_contains(&H, "could not be re-adopted"));
	assert_true(harness_segments(&H) >= 1);
	engine_expect_same(&a);
	engine_stop(&a);
	until = it_now_ms() + 20000;
	while (harness_segments(&H) != 0 && it_now_ms() < until)
		usleep(20000);
	assert_int_equal(harness_segments(&H), 0);
}

/* weightd --purge of a stopped instance while A maps its weights: refused, naming them; forced,
 * it unlinks names only, and A's bytes stay. */
static void purge_refuses_while_mapped(void **state)
{
	char out[4096];
	char *purge[] = { (char *)harness_weightd(), "--purge", "--config", H.conf, NULL };
	char *force[] = { (char *)harness_weightd(), "--purge", "--config", H.conf, "--force", NULL };
	struct engine a;
	int rc;

	(void)state;
	start(NULL);
	engine_start(&a, ENGINE_SILENT, 0, 10);
	assert_int_equal(harness_stop(&H), 0);
	rc = run(purge, out, sizeof(out));
	assert_int_equal(rc, 1);
	if (!strstr(out, "processes still map 10 MiB in 1 segment") || !strstr(out, "--force"))
		fail_msg("purge said: %s", out);
	assert_true(harness_segments(&H) > 0);
	engine_expect_same(&a);
	rc = run(force, out, sizeof(out));
	assert_int_equal(rc, 0);
	if (!strstr(out, "still mapped by processes"))
		fail_msg("forced purge said: %s", out);
	assert_int_equal(harness_segments(&H), 0);
	engine_expect_same(&a);
	engine_stop(&a);
}

static void engine_in_its_own_pid_namespace(void **state)
{
	struct engine a;

	(void)state;
	start(NULL);
	engine_start(&a, ENGINE_PIDNS, 0, 10);
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	pressure_then_release(&a);
}

/* The engine forks after binding; the parent releases everything and exits. weightd, told of
 * the release, would evict the weights at once; the child still maps them, so they stay, before
 * a restart and after it. */
static void engine_forked_after_binding(void **state)
{
	struct engine a;

	(void)state;
	start(NULL);
	engine_start(&a, ENGINE_FORKED, 0, 10);
	/* the parent's release reached weightd: no client references them */
	wait_no_references();
	weightctl_evict();
	engine_expect_same(&a);
	assert_int_equal(locked_weights(NULL), 10);
	assert_int_equal(other_unit(10, 10, false), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	engine_expect_same(&a);
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	pressure_then_release(&a);
}

/* An engine that calls weightd after the restart: its client connects again by itself, re-attaches
 * the ten weights (one event says so), and they are its own again: a share works. */
static void engine_reconnects_and_reattaches(void **state)
{
	char line[512];
	struct engine a;
	weightd_status *st;

	(void)state;
	start(NULL);
	engine_start(&a, ENGINE_TALKS, 0, 10);
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	assert_int_equal(locked_weights(NULL), 10);
	assert_int_equal(write(a.to, "t", 1), 1);
	assert_non_null(fgets(line, sizeof(line), a.from));
	assert_string_equal(line, "talked 0 reattached 10 -\n");
	/* the engine's references: ten, one each, besides the locks */
	st = it_status_of(&H);
	assert_int_equal(st->clients, 2);
	for (int k = 0; k < 10; k++) {
		const weightd_weight_status *ws = it_weight(st, "h", name_of[k]);

		assert_non_null(ws);
		assert_int_equal(ws->clients, 1);
	}
	weightd_status_free(st);
	engine_expect_same(&a);
	assert_int_equal(other_unit(10, 10, false), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	engine_stop(&a);
	wait_locked(0);
	wait_no_references();
	assert_int_equal(other_unit(10, 10, true), 0);
}

/*
 * After a reconnection weightd lends the engine a new description of a segment it already
 * maps (its old one went with the old weightd); libweightd moves its locks onto it. A weight
 * of that segment the engine fetches and lets go afterwards is then not pinned: weightd may
 * evict it, while the five the engine holds stay.
 */
static void a_reconnected_engine_pins_only_what_it_holds(void **state)
{
	char line[512];
	struct engine a;
	weightd_client *c;
	weightd_status *st;
	weightd_error err;
	uint64_t ev = 0, bytes = 0;

	(void)state;
	start(NULL);
	assert_int_equal(other_unit(0, 10, true), 0); /* t0..t9 in one segment */
	engine_start(&a, ENGINE_TALKS, 0, 5);
	harness_kill(&H);
	assert_int_equal(harness_start(&H), 0);
	assert_int_equal(write(a.to, "t", 1), 1);
	assert_non_null(fgets(line, sizeof(line), a.from));
	assert_string_equal(line, "talked 0 reattached 5 -\n");
	assert_int_equal(write(a.to, "g", 1), 1);
	assert_non_null(fgets(line, sizeof(line), a.from));
	assert_string_equal(line, "got 0\n");
	c = it_connect(&H);
	for (int i = 0;; i++) {
		bool gone;

		assert_int_equal(weightd_evict(c, &ev, &bytes, &err), 0);
		st = it_status(c);
		gone = it_weight(st, "h", "t5") == NULL;
		weightd_status_free(st);
		if (gone)
			break;
		assert_true(i < 150);
		usleep(20000);
	}
	weightd_close(c);
	engine_expect_same(&a);
	engine_stop(&a);
	wait_locked(0);
}

/* --- a restart as weightd.service and weightd.socket make it ----------------------------- */

/* What systemd/weightd.service says a stop is: its KillSignal (SIGTERM when not set) and its
 * TimeoutStopSec in seconds (then SIGKILL). */
static void unit_stop(int *ret_sig, int *ret_timeout_s)
{
	char path[600], line[512];
	const char *src = getenv("WD_SOURCE_DIR");
	FILE *f;

	*ret_sig = SIGTERM;
	*ret_timeout_s = 90; /* systemd's default */
	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/systemd/weightd.service", src);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "KillSignal=", 11) == 0)
			*ret_sig = strncmp(line + 11, "SIGKILL", 7) == 0 ? SIGKILL :
				   strncmp(line + 11, "SIGINT", 6) == 0 ? SIGINT : SIGTERM;
		if (strncmp(line, "TimeoutStopSec=", 15) == 0)
			*ret_timeout_s = atoi(line + 15);
		assert_true(strncmp(line, "Type=", 5) != 0 || strncmp(line, "Type=notify", 11) == 0);
	}
	fclose(f);
}

/* weightd started as systemd starts the service behind weightd.socket: the listening socket as fd
 * 3 (LISTEN_FDS, LISTEN_PID), readiness on NOTIFY_SOCKET (Type=notify); ready when it says so. */
static void unit_start(int listen_fd)
{
	pid_t pid;

	harness_forget_notify(&H);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char n[32];

		if (dup2(listen_fd, 3) < 0)
			_exit(126);
		snprintf(n, sizeof(n), "%d", (int)getpid());
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_PID", n, 1);
		setenv("NOTIFY_SOCKET", H.notify, 1);
		execl(harness_weightd(), "weightd", "--config", H.conf, "--foreground", (char *)NULL);
		_exit(127);
	}
	H.pid = pid;
	if (harness_wait_notify(&H, "READY=1", 30000) < 0) {
		harness_dump_log(&H);
		fail_msg("weightd did not say READY=1");
	}
}

/* `systemctl restart weightd`: the unit's stop (its signal, then SIGKILL after its timeout), then
 * its start, while weightd.socket keeps listening. */
static void unit_restart(int listen_fd)
{
	int sig, timeout_s, status = 0;
	int64_t until;

	unit_stop(&sig, &timeout_s);
	assert_int_equal(kill(H.pid, sig), 0);
	for (until = it_now_ms() + (int64_t)timeout_s * 1000;; usleep(10000)) {
		if (waitpid(H.pid, &status, WNOHANG) == H.pid)
			break;
		if (it_now_ms() > until) {
			kill(H.pid, SIGKILL);
			waitpid(H.pid, &status, 0);
			break;
		}
	}
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* stopped cleanly */
	H.pid = 0;
	unit_start(listen_fd);
}

/*
 * A restart through the systemd unit with its socket: the socket keeps listening while weightd
 * restarts, so an engine that calls meanwhile connects, waits for hello, and is answered by the
 * new weightd, its weights re-attached; one that never calls keeps its bytes under the pressure
 * that follows.
 */
static void held_through_a_restart_by_the_unit(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char sec[1024], path[512], line[512];
	struct engine a, b;
	int lfd;

	(void)state;
	fixture("h.safetensors", 0);
	harness_path(&H, "h.safetensors", path, sizeof(path));
	snprintf(sec, sizeof(sec), "[checkpoint:h]\npath = %s\n", path);
	assert_int_equal(harness_write_config(&H, "budget = 12M", sec), 0);
	/* weightd.socket: systemd binds and listens before weightd starts, and keeps it across */
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", H.sock);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(chmod(H.sock, 0666), 0);
	assert_int_equal(listen(lfd, 64), 0);
	assert_int_equal(fcntl(lfd, F_SETFD, 0), 0); /* passed on, as systemd does */
	unit_start(lfd);
	engine_start(&a, ENGINE_SILENT, 0, 5);
	engine_start(&b, ENGINE_TALKS, 5, 5);
	unit_restart(lfd);
	assert_int_equal(locked_weights(NULL), 10);
	assert_int_equal(write(b.to, "t", 1), 1);
	assert_non_null(fgets(line, sizeof(line), b.from));
	assert_string_equal(line, "talked 0 reattached 5 -\n");
	engine_expect_same(&a);
	engine_expect_same(&b);
	assert_int_equal(other_unit(10, 10, false), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	weightctl_evict();
	engine_expect_same(&a);
	engine_expect_same(&b);
	engine_stop(&a);
	engine_stop(&b);
	wait_locked(0);
	assert_int_equal(other_unit(10, 10, true), 0);
	close(lfd);
}

/*
 * A start after a stop that was not clean checks what it re-adopts for pages that are gone: the
 * state of a segment whose record still named a weight punched out before the kill (what an
 * eviction killed between its punch and its record once left, and a fresh get then served as
 * zeros). A hole is punched in a cached, unheld weight while weightd is down (after kill -9): it
 * is not re-adopted (the log says so), a fresh get makes it anew with the right bytes, and its
 * untouched neighbours are re-adopted as they were.
 */
static void unclean_start_verifies_what_it_readopts(void **state)
{
	char seg[600];
	weightd_client *c;
	weightd_status *st;
	const weightd_weight_status *w1;
	uint64_t off = 0;
	int fd;

	(void)state;
	start(NULL);
	assert_int_equal(other_unit(0, 4, true), 0);
	st = it_status_of(&H);
	w1 = it_weight(st, "h", "t1");
	assert_non_null(w1);
	seg[0] = '\0';
	for (size_t i = 0; i < st->n_segments; i++)
		if (st->segment_list[i].id == w1->segment)
			snprintf(seg, sizeof(seg), "%s%s", H.shm_dir, st->segment_list[i].name);
	off = w1->offset;
	weightd_status_free(st);
	assert_true(seg[0] != '\0');
	harness_kill(&H);
	fd = open(seg, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   (off_t)(off + 8192), 65536), 0);
	close(fd);
	assert_int_equal(harness_start(&H), 0);
	assert_true(harness_log_contains(&H, "not re-adopting h:t1"));
	assert_true(harness_log_contains(&H, "a hole in its pages"));
	st = it_status_of(&H);
	assert_null(it_weight(st, "h", "t1"));
	assert_non_null(it_weight(st, "h", "t0"));
	assert_true(it_weight(st, "h", "t0")->adopted);
	weightd_status_free(st);
	c = it_connect(&H);
	{
		weightd_weight *w = it_get_ok(c, "h", "t1");

		assert_true(it_pattern_mismatch(it_map(w), T_BYTES, 1) < 0);
		weightd_release(w);
	}
	weightd_close(c);
}

/*
 * weightd locks a reply's weights on the client's own description before sending it. A request
 * the client abandons leaves its reply to be given back unread: that must unlock what it locked on
 * a segment the client keeps (here because it holds t0 there), or t1 would stay pinned as
 * "mapped" for as long as the client holds anything in that segment.
 */
static void an_abandoned_reply_pins_nothing(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_inflight *f = NULL;
	weightd_status *st;
	weightd_error err;
	uint64_t ev = 0, bytes = 0;
	const char *two[2] = { "t0", "t1" };

	(void)state;
	start(NULL);
	assert_int_equal(other_unit(0, 2, true), 0); /* t0 and t1 made together, one segment */
	c = it_connect(&H);
	assert_int_equal(it_unit_of(c, "h", two, 1, true, &u, &err), 0); /* holds t0 */
	assert_int_equal(weightd_materialize(c, "h", "t1", NULL, &f, &err), 0);
	weightd_inflight_free(f);
	/* a round trip: the abandoned reply has come and been given back, t1 released */
	weightd_status_free(it_status(c));
	weightd_status_free(it_status(c));
	for (int i = 0; i < 100; i++) {
		bool gone;

		assert_int_equal(weightd_evict(c, &ev, &bytes, &err), 0);
		st = it_status(c);
		gone = it_weight(st, "h", "t1") == NULL;
		assert_int_equal(st->locked_weights, 0);
		weightd_status_free(st);
		if (gone)
			break;
		assert_true(i < 99);
		usleep(20000);
	}
	/* t0, held, stays whole */
	assert_int_equal(it_pattern_mismatch(weightd_unit_data(u, "t0"), T_BYTES, 0), -1);
	weightd_unit_free(u);
	weightd_close(c);
}

TEST_MAIN(NULL, NULL, TEST_IN_DIR(held_through_sigkill_idle), TEST_IN_DIR(held_through_sigterm),
	  TEST_IN_DIR(held_through_sigkill_mid_fill),
	  TEST_IN_DIR(held_through_reload_with_file_replaced),
	  TEST_IN_DIR(a_segment_kept_for_its_mapper_goes_when_it_lets_go),
	  TEST_IN_DIR(purge_refuses_while_mapped), TEST_IN_DIR(engine_in_its_own_pid_namespace),
	  TEST_IN_DIR(engine_forked_after_binding), TEST_IN_DIR(engine_reconnects_and_reattaches),
	  TEST_IN_DIR(unclean_start_verifies_what_it_readopts),
	  TEST_IN_DIR(an_abandoned_reply_pins_nothing),
	  TEST_IN_DIR(held_through_a_restart_by_the_unit),
	  TEST_IN_DIR(a_reconnected_engine_pins_only_what_it_holds))
