/* SPDX-License-Identifier: Apache-2.0 */
/* crashloop.c - weightd killed at random moments, again and again, while several client processes
 * get, cast and hold weights under budget pressure; every byte any of them is served or keeps
 * mapped is checked against an independent oracle. */

/*
 * Usage (from a build directory):
 *
 *     tests/stress/wd-crashloop [--seconds S] [--clients K] [--seed N]
 *
 * Defaults: 60 s, 3 clients, seed from the clock (printed: the same seed gives the same choices,
 * not the same timing). A private weightd serves checkpoint "c": 48 U8 tensors of 256 KiB, each
 * its own pattern (wd-mkfixture's documented rule, computed here anew), under a 10 MiB budget.
 * Each client, one libweightd connection for its whole life, loops until the time is up:
 *
 *   get    a single get of a random tensor, its bytes checked, released
 *   cast   the same tensor cast to F32 by a recipe, each value checked to be its byte (exact)
 *   hold   a unit of 4 random tensors bound and kept, its digest taken at bind; a client keeps
 *          one at a time and lets it go after a while
 *   check  the held unit's bytes against its digest (after every other step too)
 *
 * Meanwhile the parent kills weightd (SIGKILL, or SIGTERM one time in four) after a random
 * 20-700 ms, and starts it again. An error a client expects (weightd down: disconnected;
 * stopping: cancelled; the budget full of held weights: resource-exhausted) is counted, not
 * failed; wrong bytes and a
 * held mapping that changed are the failures. Printed at the end: kills, the clients' steps,
 * checks and reconnections, and the two failure counts. Exit status 1 when either is not 0 (or
 * the run could not be made).
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "itest.h"

#define N_T 48
#define T_BYTES (256u << 10)
#define HOLD 4
#define MAX_CLIENTS 16

struct counters {
	atomic_ullong gets, casts, holds, checks, reconnects;
	atomic_ullong expected_errors, other_errors;
	atomic_ullong wrong_bytes, changed_holds;
	char last_other[256];
};

static struct harness H;
static struct counters *C;
static char names[N_T][8];

/* A small PRNG of our own (xorshift64*): the seed decides every choice. */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static uint64_t fnv(const uint8_t *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void expected_or_not(int r, const weightd_error *err)
{
	/* weightd down, or stopping (what it had queued is cancelled), or the budget full */
	if (r == -WEIGHTD_E_DISCONNECTED || r == -WEIGHTD_E_CANCELLED ||
	    r == -WEIGHTD_E_RESOURCE_EXHAUSTED) {
		C->expected_errors++;
		if (r == -WEIGHTD_E_DISCONNECTED)
			usleep(2000); /* not a busy loop while weightd is down */
		return;
	}
	C->other_errors++;
	snprintf(C->last_other, sizeof(C->last_other), "%s: %s", weightd_code_name(r),
		 err->message);
}

static void one_get(weightd_client *c, int k)
{
	weightd_inflight *f = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p;
	int r = weightd_materialize(c, "c", names[k], NULL, &f, &err);

	if (r == 0)
		r = weightd_finish(f, &w, &err);
	if (r == 0)
		r = weightd_weight_map(w, &p, &err);
	if (r < 0) {
		expected_or_not(r, &err);
	} else {
		C->gets++;
		if (weightd_weight_nbytes(w) != T_BYTES ||
		    it_pattern_mismatch(p, T_BYTES, (unsigned)k) >= 0)
			C->wrong_bytes++;
	}
	weightd_release(w);
}

static void one_cast(weightd_client *c, int k)
{
	weightd_recipe *rc = NULL;
	weightd_inflight *f = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p;
	int r = weightd_recipe_new(&rc, &err);

	if (r == 0)
		r = weightd_recipe_source(rc, "c", names[k], NULL, &err);
	if (r >= 0)
		r = weightd_recipe_cast(rc, r, "F32", &err);
	if (r >= 0)
		r = weightd_materialize_recipe(c, rc, &f, &err);
	weightd_recipe_free(rc);
	if (r >= 0)
		r = weightd_finish(f, &w, &err);
	if (r >= 0)
		r = weightd_weight_map(w, &p, &err);
	if (r < 0) {
		expected_or_not(r, &err);
	} else {
		const float *v = p;
		bool ok = weightd_weight_nbytes(w) == 4ull * T_BYTES;

		for (uint64_t i = 0; ok && i < T_BYTES; i++)
			ok = v[i] == (float)it_pattern_byte(i, (unsigned)k);
		C->casts++;
		if (!ok)
			C->wrong_bytes++;
	}
	weightd_release(w);
}

struct held {
	weightd_unit *u;
	int k[HOLD];
	uint64_t digest;
	int left; /* steps until it is let go */
};

static uint64_t held_digest(const struct held *h)
{
	uint64_t d = 0xcbf29ce484222325ull;

	for (int i = 0; i < HOLD; i++)
		d = fnv(weightd_unit_data(h->u, names[h->k[i]]), T_BYTES, d);
	return d;
}

static void hold(weightd_client *c, struct held *h, uint64_t *s)
{
	const char *pick[HOLD];
	weightd_error err;
	int r;

	for (int i = 0; i < HOLD; i++) {
		/* distinct tensors */
		do
			h->k[i] = (int)(rnd(s) % N_T);
		while (i && (h->k[i] == h->k[0] || (i > 1 && h->k[i] == h->k[1]) ||
			     (i > 2 && h->k[i] == h->k[2])));
		pick[i] = names[h->k[i]];
	}
	r = it_unit_of(c, "c", pick, HOLD, true, &h->u, &err);
	if (r < 0) {
		h->u = NULL;
		expected_or_not(r, &err);
		return;
	}
	weightd_unit_bind(h->u);
	for (int i = 0; i < HOLD; i++)
		if (it_pattern_mismatch(weightd_unit_data(h->u, names[h->k[i]]), T_BYTES,
					(unsigned)h->k[i]) >= 0)
			C->wrong_bytes++;
	h->digest = held_digest(h);
	h->left = 20 + (int)(rnd(s) % 200);
	C->holds++;
}

static void check(struct held *h)
{
	if (!h->u)
		return;
	C->checks++;
	if (held_digest(h) != h->digest)
		C->changed_holds++;
}

static void client_main(int id, uint64_t seed, int64_t until)
{
	weightd_client *c = NULL;
	struct held h = { 0 };
	weightd_error err;
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)id + 1;

	/* the first connection may meet weightd down: try until it answers */
	while (weightd_connect(H.sock, "crashloop", &c, &err) < 0) {
		if (it_now_ms() > until)
			_exit(0);
		usleep(10000);
	}
	while (it_now_ms() < until) {
		int k = (int)(rnd(&s) % N_T), op = (int)(rnd(&s) % 10);
		weightd_event_list *ev = NULL;

		if (op < 5)
			one_get(c, k);
		else if (op < 8)
			one_cast(c, k);
		else if (!h.u)
			hold(c, &h, &s);
		check(&h);
		if (h.u && --h.left <= 0) {
			weightd_unit_free(h.u);
			h.u = NULL;
		}
		if (weightd_poll_events(c, 0, &ev, &err) == 0) {
			for (size_t i = 0; i < ev->count; i++)
				C->reconnects += strcmp(ev->events[i].what,
							WEIGHTD_EVENT_RECONNECTED) == 0;
			weightd_event_list_free(ev);
		}
	}
	check(&h);
	weightd_unit_free(h.u);
	weightd_close(c);
	_exit(0);
}

int main(int argc, char **argv)
{
	char path[512], sec[1024], args[4096];
	pid_t kids[MAX_CLIENTS];
	int seconds = 60, clients = 3, n, kills = 0, terms = 0, rc = 1;
	uint64_t seed = (uint64_t)time(NULL), s;
	int64_t until;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			seconds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= MAX_CLIENTS)
			clients = atoi(argv[++i]);
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: wd-crashloop [--seconds S] [--clients K<=%d] "
				"[--seed N]\n", MAX_CLIENTS);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	C = mmap(NULL, sizeof(*C), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (C == MAP_FAILED || harness_init(&H) < 0)
		return 1;
	memset(C, 0, sizeof(*C));
	harness_path(&H, "c.safetensors", path, sizeof(path));
	n = snprintf(args, sizeof(args), "safetensors %s --seed 0", path);
	for (int k = 0; k < N_T; k++) {
		snprintf(names[k], sizeof(names[k]), "t%d", k);
		n += snprintf(args + n, sizeof(args) - (size_t)n, " --tensor t%d:U8:%u", k, T_BYTES);
	}
	if (harness_mkfixture(args) != 0) {
		fprintf(stderr, "wd-crashloop: cannot write the checkpoint\n");
		goto out;
	}
	snprintf(sec, sizeof(sec), "[checkpoint:c]\npath = %s\n", path);
	if (harness_write_config(&H, "budget = 10M\nlog_level = warning", sec) < 0 ||
	    harness_start_opts(&H, &(struct harness_opts){ .file_log_level = true }) < 0) {
		fprintf(stderr, "wd-crashloop: weightd did not start\n");
		goto out;
	}
	printf("wd-crashloop: seed %llu, %d s, %d clients, budget 10 MiB, %d tensors of %u KiB\n",
	       (unsigned long long)seed, seconds, clients, N_T, T_BYTES >> 10);
	fflush(stdout);
	until = it_now_ms() + (int64_t)seconds * 1000;
	for (int i = 0; i < clients; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			goto out;
		if (kids[i] == 0)
			client_main(i, seed, until);
	}
	s = seed + 0x51ed;
	while (it_now_ms() < until - 800) {
		usleep((useconds_t)(20000 + rnd(&s) % 680000));
		if (rnd(&s) % 4 == 0) {
			if (harness_stop(&H) < 0)
				break;
			terms++;
		} else {
			harness_kill(&H);
			kills++;
		}
		if (harness_start_opts(&H, &(struct harness_opts){ .file_log_level = true }) < 0) {
			fprintf(stderr, "wd-crashloop: weightd did not start again\n");
			harness_dump_log(&H);
			break;
		}
	}
	for (int i = 0; i < clients; i++) {
		int st;

		waitpid(kids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			C->other_errors++;
	}
	printf("wd-crashloop: %d kills (SIGKILL), %d stops (SIGTERM); %llu gets and %llu casts "
	       "checked, %llu units held, %llu checks of held units, %llu reconnections; %llu "
	       "expected errors (weightd down or stopping, or the budget full), %llu others\n",
	       kills, terms, (unsigned long long)C->gets, (unsigned long long)C->casts,
	       (unsigned long long)C->holds, (unsigned long long)C->checks,
	       (unsigned long long)C->reconnects, (unsigned long long)C->expected_errors,
	       (unsigned long long)C->other_errors);
	printf("wd-crashloop: wrong bytes %llu, changed held mappings %llu\n",
	       (unsigned long long)C->wrong_bytes, (unsigned long long)C->changed_holds);
	if (C->other_errors)
		printf("wd-crashloop: last unexpected error: %s\n", C->last_other);
	rc = C->wrong_bytes || C->changed_holds || C->other_errors || kills + terms == 0 ? 1 : 0;
out:
	harness_cleanup(&H);
	return rc;
}
