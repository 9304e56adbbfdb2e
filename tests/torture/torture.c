/* SPDX-License-Identifier: Apache-2.0 */
/* torture.c - wd-torture: step after step, a workload from a table run against a private weightd
 * while a fault from a table is injected (kill -9, an errno from libfiu, a crash point of
 * weightd's own, a full segment tmpfs, a source cut or rewritten, a client killed), then every
 * promise checked from outside by an independent checker; any violation stops the run with the
 * seed and the command that replays it. */

/*
 * Usage (scripts/torture builds and runs it; ctest runs fixed seeds):
 *
 *     wd-torture [--seconds S | --steps N] [--seed S] [--clients K] [--remote] [--quiet]
 *
 * WD_TORTURE_DEBUG=1 prints, when a check fails, the status weightd gave and which processes
 * hold its segments. WD_TORTURE_NO_FIU=1 leaves libfiu out (its faults and crash points too).
 *
 * Every choice comes from the seed through step_rng(seed, step): the workload, the fault, its
 * moment, the clients and their operations. A run that fails prints
 * "replay: scripts/torture --seed S --steps N", which makes the same choices up to the failing
 * step (the timing of the machine is not replayed; the choices are).
 *
 * The checker (check_step) is this file's own: the bytes every client maps are compared with
 * values computed here from wd-mkfixture's documented patterns and from tests/common's float and
 * FP8 references (float_ref.h, st_writer.h's values), never with weightd's code; held weights
 * are kept by a holder process that compares them with their digest at bind after every step;
 * the disk (segments, state records) is listed by this file and compared with what status says.
 */
#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "itest.h"
#include "servers.h"

#include "float_ref.h"
#include "st_writer.h"

/* ---- the checkpoints ------------------------------------------------------------------------ */

#define N_T	    32 /* c:t0..t31, U8, pattern seed k */
#define T_BYTES	    (256u << 10)
#define F_ROWS	    128 /* c:f F32 [128, 256], values seed F_SEED */
#define F_COLS	    256
#define F_SEED	    200
#define Q_N	    128 /* c:q F8_E4M3 [128, 128] bytes seed Q_SEED; c:qs F32 [4, 4] values */
#define Q_SEED	    201
#define QS_SEED	    202
#define Q_BLOCK	    32
#define N_R	    6 /* r:r0..r5, U8, 64 KiB, seed r_seed(generation, k) */
#define R_BYTES	    (64u << 10)
#define HOLD	    4
#define MAX_CLIENTS 8
#define BUDGET	    "5M" /* the c tensors alone are 8 MiB: pressure and eviction all the time */

static unsigned r_seed(unsigned gen, unsigned k)
{
	return (gen * 8 + k) & 0xff;
}

/* ---- what every process counts (shared memory) ---------------------------------------------- */

#define N_CODES 72

struct tally {
	atomic_ullong ops, ok, failed, bytes_checked;
	atomic_ullong by_code[N_CODES];
	atomic_ullong violations;
	atomic_int stop;
	atomic_uint epoch;	 /* moves whenever weightd dies or is started (the controller's) */
	atomic_int step_running; /* the prober asks status while it is set */
	atomic_ullong probes;	 /* status answers the prober timed */
	atomic_llong probe_max_ms;
	char why[1024];
	char last_err[512]; /* the last failure's code and sentence (racy; for a report) */
};

static struct tally *T;

static void violate(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violate(const char *fmt, ...)
{
	va_list ap;
	int first = atomic_fetch_add(&T->stop, 1) == 0;

	T->violations++;
	if (!first)
		return;
	va_start(ap, fmt);
	vsnprintf(T->why, sizeof(T->why), fmt, ap);
	va_end(ap);
}

/* xorshift64*: the seed decides every choice */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static unsigned below(uint64_t *s, unsigned n)
{
	return n ? (unsigned)(rnd(s) % n) : 0;
}

static uint64_t step_rng(uint64_t seed, unsigned step)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)step + 1) * 0xD1B54A32D192ED03ull;

	return s ? s : 1;
}

static uint64_t fnv(const uint8_t *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* ---- the tables ---------------------------------------------------------------------------- */

enum op {
	OP_GET,	    /* one tensor, single get */
	OP_UNIT,    /* a unit of HOLD tensors, validated */
	OP_WARM,    /* the same unit twice */
	OP_SHARE,   /* a weight shared, both mapped */
	OP_CAST,    /* U8 -> F32 or F32 -> BF16 */
	OP_SHARD,   /* a tensor-parallel shard of a tensor */
	OP_CONCAT,  /* two tensors end to end */
	OP_DEQUANT, /* FP8 with block scales to F32 */
	OP_RGET,    /* a tensor of the reloaded checkpoint r */
	OP_SWEEP,   /* eight tensors held together: budget pressure */
	N_OPS
};

#define M(op)	(1u << (op))
#define ALL_OPS ((1u << N_OPS) - 1)

enum action { ACT_NONE, ACT_EVICT_FIRST, ACT_EVICT, ACT_RELOAD };

/* A workload: the operations its clients pick from, and what the controller does meanwhile. Add
 * a row to add one. */
static const struct workload {
	const char *name;
	unsigned ops;
	enum action action;
	bool other_uid; /* half the clients as uid 65534 (when running as root) */
} workloads[] = {
	{ "cold-unit", M(OP_UNIT), ACT_EVICT_FIRST, false },
	{ "warm-unit", M(OP_WARM), ACT_NONE, false },
	{ "single-gets", M(OP_GET), ACT_NONE, false },
	{ "shares", M(OP_SHARE) | M(OP_GET), ACT_NONE, false },
	{ "cast", M(OP_CAST), ACT_NONE, false },
	{ "shard", M(OP_SHARD), ACT_NONE, false },
	{ "concat", M(OP_CONCAT), ACT_NONE, false },
	{ "dequant", M(OP_DEQUANT), ACT_NONE, false },
	{ "reload", M(OP_RGET) | M(OP_GET), ACT_RELOAD, false },
	{ "pressure", M(OP_SWEEP) | M(OP_GET), ACT_NONE, false },
	{ "evict", M(OP_GET) | M(OP_UNIT), ACT_EVICT, false },
	{ "uids", ALL_OPS, ACT_NONE, true },
	{ "mixed", ALL_OPS, ACT_NONE, false },
};
#define N_WORKLOADS (sizeof(workloads) / sizeof(workloads[0]))

enum fault_kind {
	F_NONE,
	F_KILL,	  /* kill -9 of weightd; arg: when (KILL_*) */
	F_FIU,	  /* a libc call fails through libfiu; call, errno (0: a short read or write) */
	F_POINT,  /* one of weightd's own crash points (src/fault.h) */
	F_TMPFS,  /* the segment tmpfs shrunk far below the budget */
	F_SOURCE, /* the checkpoint file cut (arg 0) or rewritten (arg 1) mid-fill */
	F_CLIENT, /* a client killed mid-request (arg 0) or the holder holding (arg 1) */
	F_REMOTE, /* the fault proxy in front of the remote checkpoint fails (--remote) */
};

enum { KILL_FILL, KILL_ANY, KILL_RELOAD, KILL_READOPT };

/* A fault: its kind and arguments, and how often it is picked relative to the others. */
static const struct fault {
	const char *name;
	enum fault_kind kind;
	const char *call; /* libfiu's point, or weightd's own */
	int err;	  /* errno for F_FIU; arg for the others */
	double p;	  /* probability each call fails (F_FIU) */
	int weight;
} faults[] = {
	{ "none", F_NONE, NULL, 0, 0, 6 },
	{ "kill-9 during fills", F_KILL, NULL, KILL_FILL, 0, 5 },
	{ "kill-9 at any moment", F_KILL, NULL, KILL_ANY, 0, 3 },
	{ "kill-9 during a reload", F_KILL, NULL, KILL_RELOAD, 0, 3 },
	{ "kill-9 during re-adoption", F_KILL, NULL, KILL_READOPT, 0, 3 },
	{ "EIO pread", F_FIU, "posix/io/rw/pread", EIO, 0.2, 2 },
	{ "EIO pwrite", F_FIU, "posix/io/rw/pwrite", EIO, 0.2, 1 },
	{ "EIO pwritev", F_FIU, "posix/io/rw/pwritev", EIO, 0.2, 1 },
	{ "EIO write", F_FIU, "posix/io/rw/write", EIO, 0.2, 1 },
	{ "EIO fsync", F_FIU, "posix/io/sync/fsync", EIO, 0.5, 1 },
	{ "EIO rename", F_FIU, "posix/io/dir/rename", EIO, 0.5, 1 },
	{ "ENOSPC pwrite", F_FIU, "posix/io/rw/pwrite", ENOSPC, 0.2, 1 },
	{ "ENOSPC write", F_FIU, "posix/io/rw/write", ENOSPC, 0.3, 1 },
	{ "ENOSPC ftruncate", F_FIU, "posix/io/rw/ftruncate", ENOSPC, 0.5, 1 },
	{ "EMFILE open", F_FIU, "posix/io/oc/open", EMFILE, 0.5, 1 },
	{ "EMFILE accept", F_FIU, "posix/io/net/accept", EMFILE, 0.3, 1 },
	{ "ENOMEM malloc", F_FIU, "libc/mm/malloc", ENOMEM, 0.002, 1 },
	{ "ENOMEM calloc", F_FIU, "libc/mm/calloc", ENOMEM, 0.01, 1 },
	{ "ENOMEM realloc", F_FIU, "libc/mm/realloc", ENOMEM, 0.01, 1 },
	{ "ENOMEM mmap", F_FIU, "posix/mm/mmap", ENOMEM, 0.2, 1 },
	{ "EINTR pread", F_FIU, "posix/io/rw/pread", EINTR, 0.3, 1 },
	{ "EINTR recvmsg", F_FIU, "posix/io/net/recvmsg", EINTR, 0.3, 1 },
	{ "EINTR sendmsg", F_FIU, "posix/io/net/sendmsg", EINTR, 0.3, 1 },
	{ "short pread", F_FIU, "posix/io/rw/pread/reduce", 0, 0.3, 2 },
	{ "short pwrite", F_FIU, "posix/io/rw/pwrite/reduce", 0, 0.3, 1 },
	{ "short pwritev", F_FIU, "posix/io/rw/pwritev/reduce", 0, 0.3, 1 },
	{ "short write", F_FIU, "posix/io/rw/write/reduce", 0, 0.3, 1 },
	{ "crash: segment written, not recorded", F_POINT, "weightd/state/unrecorded", 0, 0, 2 },
	{ "crash: reload swapped, stale not dropped", F_POINT, "weightd/reload/swapped", 0, 0, 2 },
	{ "crash: worker took a job", F_POINT, "weightd/pool/taken", 0, 0, 2 },
	{ "segment tmpfs far below the budget", F_TMPFS, NULL, 0, 0, 3 },
	{ "source cut mid-fill", F_SOURCE, NULL, 0, 0, 2 },
	{ "source rewritten mid-fill", F_SOURCE, NULL, 1, 0, 2 },
	{ "client killed mid-request", F_CLIENT, NULL, 0, 0, 2 },
	{ "holder killed holding", F_CLIENT, NULL, 1, 0, 2 },
	{ "remote store failing", F_REMOTE, NULL, 0, 0, 4 },
};
#define N_FAULTS (sizeof(faults) / sizeof(faults[0]))

static atomic_ullong fault_count[N_FAULTS];

/* ---- the run's state (the controller's) ------------------------------------------------------ */

static struct harness H;
static uint64_t seed;
static int n_clients = 3;
static bool quiet, as_root, have_fiu, have_tmpfs, remote;
static char c_path[512], r_path[512], tmpfs_dir[512], fiu_prefix[512];
static uint8_t *c_orig; /* the checkpoint's bytes, to put back after a source fault */
static size_t c_size;
static unsigned r_gen; /* the generation of r its file holds now */
static unsigned kills, restarts, readopt_kills, deaths_under_fault;
static long log_seen; /* how much of the daemon's log the sanitizer check has read */
static const char *preload_env[4];
static char preload_buf[1024], fifo_buf[600];
static struct wd_servers SV;

/* what a step's clients know: chosen by the controller before they fork */
struct step {
	unsigned no;
	const struct workload *w;
	const struct fault *f;
	uint64_t rng;
	int clients, dur_ms;
	bool faulty;  /* a fault is injected: requests may fail (typed) */
	bool may_die; /* weightd may be killed: disconnections are expected */
};

/* ---- the oracle ---------------------------------------------------------------------------- */

static bool same_f32(float a, float b)
{
	return (a != a && b != b) || ref_f32_bits(a) == ref_f32_bits(b);
}

static int typed(int code)
{
	return (code >= 1 && code <= 13) || (code >= 20 && code <= 33) ||
	       (code >= 40 && code <= 43) || code == 55 || code == 56 || code == 65;
}

/* A request failed: typed always; without a fault, only the budget may refuse it. */
static void failed(const struct step *st, int r, const weightd_error *err, const char *what)
{
	int code = -r;

	T->failed++;
	T->by_code[code > 0 && code < N_CODES ? code : 0]++;
	snprintf(T->last_err, sizeof(T->last_err), "%s: %s: %s", what, weightd_code_name(r),
		 err->message);
	if (!typed(code) || !err->message[0]) {
		violate("step %u: %s failed without a typed error (code %d, \"%s\")", st->no, what,
			r, err->message);
		return;
	}
	if (code == WEIGHTD_E_RESOURCE_EXHAUSTED)
		return;
	/* between a file replaced and the reload that follows, weightd says so */
	if (code == WEIGHTD_E_SOURCE_CHANGED && st->w->action == ACT_RELOAD)
		return;
	if (code == WEIGHTD_E_DISCONNECTED || code == WEIGHTD_E_CANCELLED) {
		if (!st->may_die && !st->faulty)
			violate("step %u: %s: %s: %s, and weightd was not killed", st->no, what,
				weightd_code_name(r), err->message);
		else
			usleep(2000);
		return;
	}
	if (!st->faulty)
		violate("step %u: %s failed with no fault injected: %s: %s", st->no, what,
			weightd_code_name(r), err->message);
}

static void wrong(const struct step *st, const char *what, uint64_t at)
{
	violate("step %u (%s, %s): %s: wrong byte at %llu", st->no, st->w->name, st->f->name, what,
		(unsigned long long)at);
}

/* ---- the clients' operations ----------------------------------------------------------------- */

static char tnames[N_T][8], rnames[N_R][8];

static int finish_map(weightd_inflight *f, weightd_weight **w, const void **p, weightd_error *err)
{
	int r = weightd_finish(f, w, err);

	if (r == 0)
		r = weightd_weight_map(*w, p, err);
	return r;
}

static int get_one(weightd_client *c, const char *ckpt, const char *name, weightd_weight **w,
		   const void **p, weightd_error *err)
{
	weightd_inflight *f = NULL;
	int r = weightd_materialize(c, ckpt, name, NULL, &f, err);

	*w = NULL;
	return r < 0 ? r : finish_map(f, w, p, err);
}

static int recipe_get(weightd_client *c, weightd_recipe *rc, weightd_weight **w, const void **p,
		      weightd_error *err)
{
	weightd_inflight *f = NULL;
	int r = weightd_materialize_recipe(c, rc, &f, err);

	*w = NULL;
	return r < 0 ? r : finish_map(f, w, p, err);
}

static void check_plain(const struct step *st, const uint8_t *p, uint64_t n, unsigned k,
			const char *what)
{
	int64_t at;

	T->bytes_checked += n;
	if (n != T_BYTES) {
		violate("step %u: %s: %llu bytes, not %u", st->no, what, (unsigned long long)n,
			T_BYTES);
		return;
	}
	at = it_pattern_mismatch(p, n, k);
	if (at >= 0)
		wrong(st, what, (uint64_t)at);
}

static void op_get(weightd_client *c, const struct step *st, uint64_t *s)
{
	unsigned k = below(s, N_T);
	weightd_weight *w;
	weightd_error err;
	const void *p;
	int r = get_one(c, "c", tnames[k], &w, &p, &err);

	if (r < 0)
		failed(st, r, &err, "get");
	else
		check_plain(st, p, weightd_weight_nbytes(w), k, "get");
	weightd_release(w);
}

static void pick_distinct(uint64_t *s, unsigned *k, int n)
{
	for (int i = 0; i < n; i++) {
		bool again;

		do {
			k[i] = below(s, N_T);
			again = false;
			for (int j = 0; j < i; j++)
				again |= k[j] == k[i];
		} while (again);
	}
}

static int unit_of(weightd_client *c, const unsigned *k, int n, weightd_unit **u,
		   weightd_error *err)
{
	const char *pick[16];

	for (int i = 0; i < n; i++)
		pick[i] = tnames[k[i]];
	return it_unit_of(c, "c", pick, (size_t)n, true, u, err);
}

static void op_unit(weightd_client *c, const struct step *st, uint64_t *s, int times)
{
	unsigned k[HOLD];

	pick_distinct(s, k, HOLD);
	for (int t = 0; t < times; t++) {
		weightd_unit *u = NULL;
		weightd_error err;
		int r = unit_of(c, k, HOLD, &u, &err);

		if (r < 0) {
			failed(st, r, &err, "unit");
			continue;
		}
		for (int i = 0; i < HOLD; i++)
			check_plain(st, weightd_unit_data(u, tnames[k[i]]),
				    weightd_weight_nbytes(weightd_unit_weight(u, tnames[k[i]])),
				    k[i], "unit");
		weightd_unit_free(u);
	}
}

static void op_share(weightd_client *c, const struct step *st, uint64_t *s)
{
	unsigned k = below(s, N_T);
	weightd_weight *w, *w2 = NULL;
	weightd_error err;
	const void *p, *p2;
	int r = get_one(c, "c", tnames[k], &w, &p, &err);

	if (r == 0)
		r = weightd_share(w, &w2, &err);
	if (r == 0)
		r = weightd_weight_map(w2, &p2, &err);
	if (r < 0) {
		failed(st, r, &err, "share");
	} else {
		check_plain(st, p, weightd_weight_nbytes(w), k, "share (first)");
		check_plain(st, p2, weightd_weight_nbytes(w2), k, "share (second)");
	}
	weightd_release(w2);
	weightd_release(w);
}

static void op_cast(weightd_client *c, const struct step *st, uint64_t *s)
{
	bool to_bf16 = below(s, 2);
	unsigned k = below(s, N_T);
	weightd_recipe *rc = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p;
	int r = weightd_recipe_new(&rc, &err);

	if (r == 0)
		r = weightd_recipe_source(rc, "c", to_bf16 ? "f" : tnames[k], NULL, &err);
	if (r >= 0)
		r = weightd_recipe_cast(rc, r, to_bf16 ? "BF16" : "F32", &err);
	if (r >= 0)
		r = recipe_get(c, rc, &w, &p, &err);
	weightd_recipe_free(rc);
	if (r < 0) {
		failed(st, r, &err, "cast");
	} else if (to_bf16) {
		const uint16_t *v = p;
		uint64_t n = (uint64_t)F_ROWS * F_COLS;

		if (weightd_weight_nbytes(w) != 2 * n)
			violate("step %u: cast to BF16: %llu bytes", st->no,
				(unsigned long long)weightd_weight_nbytes(w));
		for (uint64_t i = 0; i < n && weightd_weight_nbytes(w) == 2 * n; i++)
			if (v[i] != ref_to_bf16(stw_value(i, F_SEED))) {
				wrong(st, "cast F32 to BF16", 2 * i);
				break;
			}
		T->bytes_checked += 2 * n;
	} else {
		const float *v = p;

		if (weightd_weight_nbytes(w) != 4ull * T_BYTES)
			violate("step %u: cast to F32: %llu bytes", st->no,
				(unsigned long long)weightd_weight_nbytes(w));
		for (uint64_t i = 0; i < T_BYTES && weightd_weight_nbytes(w) == 4ull * T_BYTES; i++)
			if (v[i] != (float)it_pattern_byte(i, k)) {
				wrong(st, "cast U8 to F32", 4 * i);
				break;
			}
		T->bytes_checked += 4ull * T_BYTES;
	}
	weightd_release(w);
}

static void op_shard(weightd_client *c, const struct step *st, uint64_t *s)
{
	unsigned k = below(s, N_T), world = 1u << (1 + below(s, 3)), rank = below(s, world);
	uint64_t n = T_BYTES / world, lo = rank * n;
	weightd_selection *sel = NULL;
	weightd_weight *w = NULL;
	weightd_recipe *rc = NULL;
	weightd_error err;
	const void *p;
	int r = weightd_selection_shard(0, rank, world, &sel, &err);

	if (r == 0)
		r = weightd_recipe_new(&rc, &err);
	if (r == 0)
		r = weightd_recipe_source(rc, "c", tnames[k], sel, &err);
	if (r >= 0)
		r = recipe_get(c, rc, &w, &p, &err);
	weightd_recipe_free(rc);
	weightd_selection_free(sel);
	if (r < 0) {
		failed(st, r, &err, "shard");
	} else if (weightd_weight_nbytes(w) != n) {
		violate("step %u: shard %u/%u: %llu bytes, not %llu", st->no, rank, world,
			(unsigned long long)weightd_weight_nbytes(w), (unsigned long long)n);
	} else {
		const uint8_t *b = p;

		for (uint64_t i = 0; i < n; i++)
			if (b[i] != it_pattern_byte(lo + i, k)) {
				wrong(st, "shard", i);
				break;
			}
		T->bytes_checked += n;
	}
	weightd_release(w);
}

static void op_concat(weightd_client *c, const struct step *st, uint64_t *s)
{
	unsigned k[2];
	weightd_recipe *rc = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p;
	int in[2] = { -1, -1 };
	int r;

	pick_distinct(s, k, 2);
	r = weightd_recipe_new(&rc, &err);
	for (int i = 0; i < 2 && r >= 0; i++)
		r = in[i] = weightd_recipe_source(rc, "c", tnames[k[i]], NULL, &err);
	if (r >= 0)
		r = weightd_recipe_concat(rc, 0, in, 2, &err);
	if (r >= 0)
		r = recipe_get(c, rc, &w, &p, &err);
	weightd_recipe_free(rc);
	if (r < 0) {
		failed(st, r, &err, "concat");
	} else if (weightd_weight_nbytes(w) != 2ull * T_BYTES) {
		violate("step %u: concat: %llu bytes", st->no,
			(unsigned long long)weightd_weight_nbytes(w));
	} else {
		const uint8_t *b = p;

		for (int i = 0; i < 2; i++) {
			int64_t at = it_pattern_mismatch(b + (uint64_t)i * T_BYTES, T_BYTES, k[i]);

			if (at >= 0) {
				wrong(st, "concat", (uint64_t)i * T_BYTES + (uint64_t)at);
				break;
			}
		}
		T->bytes_checked += 2ull * T_BYTES;
	}
	weightd_release(w);
}

static void op_dequant(weightd_client *c, const struct step *st, uint64_t *s)
{
	static const uint64_t block[2] = { Q_BLOCK, Q_BLOCK };
	weightd_recipe *rc = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	const void *p;
	int q = -1, sc = -1, r;

	(void)s;
	r = weightd_recipe_new(&rc, &err);
	if (r == 0)
		r = q = weightd_recipe_source(rc, "c", "q", NULL, &err);
	if (r >= 0)
		r = sc = weightd_recipe_source(rc, "c", "qs", NULL, &err);
	if (r >= 0)
		r = weightd_recipe_dequant_block(rc, q, sc, block, 2, "F32", &err);
	if (r >= 0)
		r = recipe_get(c, rc, &w, &p, &err);
	weightd_recipe_free(rc);
	if (r < 0) {
		failed(st, r, &err, "dequant");
	} else if (weightd_weight_nbytes(w) != 4ull * Q_N * Q_N) {
		violate("step %u: dequant: %llu bytes", st->no,
			(unsigned long long)weightd_weight_nbytes(w));
	} else {
		const float *v = p;
		const unsigned g = Q_N / Q_BLOCK;

		for (uint64_t i = 0; i < (uint64_t)Q_N * Q_N; i++) {
			uint64_t row = i / Q_N, col = i % Q_N;
			float scale = stw_value((row / Q_BLOCK) * g + col / Q_BLOCK, QS_SEED);
			float want = ref_e4m3(it_pattern_byte(i, Q_SEED)) * scale;

			if (!same_f32(v[i], want)) {
				wrong(st, "dequant", 4 * i);
				break;
			}
		}
		T->bytes_checked += 4ull * Q_N * Q_N;
	}
	weightd_release(w);
}

/* A tensor of r: the bytes of one generation the step may see, the whole tensor the same one. */
static int r_generation_of(const uint8_t *p, unsigned k, unsigned lo, unsigned hi)
{
	for (unsigned g = lo; g <= hi; g++)
		if (it_pattern_mismatch(p, R_BYTES, r_seed(g, k)) < 0)
			return (int)g;
	return -1;
}

static unsigned step_r_lo, step_r_hi; /* the generations this step's clients may see */

static void op_rget(weightd_client *c, const struct step *st, uint64_t *s)
{
	unsigned k = below(s, N_R);
	weightd_weight *w;
	weightd_error err;
	const void *p;
	int r = get_one(c, "r", rnames[k], &w, &p, &err);

	if (r < 0) {
		failed(st, r, &err, "get of the reloaded checkpoint");
	} else if (weightd_weight_nbytes(w) != R_BYTES ||
		   r_generation_of(p, k, step_r_lo, step_r_hi) < 0) {
		violate("step %u: r:%s matches no generation %u..%u of its file", st->no, rnames[k],
			step_r_lo, step_r_hi);
	}
	T->bytes_checked += R_BYTES;
	weightd_release(w);
}

static void op_sweep(weightd_client *c, const struct step *st, uint64_t *s)
{
	weightd_weight *w[8] = { 0 };
	unsigned k[8];

	pick_distinct(s, k, 8);
	for (int i = 0; i < 8; i++) {
		weightd_error err;
		const void *p;
		int r = get_one(c, "c", tnames[k[i]], &w[i], &p, &err);

		if (r < 0) {
			failed(st, r, &err, "sweep");
			break;
		}
		check_plain(st, p, weightd_weight_nbytes(w[i]), k[i], "sweep");
	}
	for (int i = 0; i < 8; i++)
		weightd_release(w[i]);
}

static void run_op(enum op op, weightd_client *c, const struct step *st, uint64_t *s)
{
	T->ops++;
	switch (op) {
	case OP_GET: op_get(c, st, s); break;
	case OP_UNIT: op_unit(c, st, s, 1); break;
	case OP_WARM: op_unit(c, st, s, 2); break;
	case OP_SHARE: op_share(c, st, s); break;
	case OP_CAST: op_cast(c, st, s); break;
	case OP_SHARD: op_shard(c, st, s); break;
	case OP_CONCAT: op_concat(c, st, s); break;
	case OP_DEQUANT: op_dequant(c, st, s); break;
	case OP_RGET: op_rget(c, st, s); break;
	case OP_SWEEP: op_sweep(c, st, s); break;
	default: break;
	}
}

static void client_main(const struct step *st, int id)
{
	uint64_t s = st->rng ^ (0xA5A5A5A5ull * (uint64_t)(id + 1));
	int64_t until = it_now_ms() + st->dur_ms;
	weightd_client *c = NULL;
	weightd_error err;
	unsigned ops[N_OPS], n = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (st->w->other_uid && as_root && id % 2 == 1 &&
	    (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0))
		_exit(3);
	for (unsigned i = 0; i < N_OPS; i++)
		if (st->w->ops & M(i))
			ops[n++] = i;
	while (weightd_connect(H.sock, "torture", &c, &err) < 0) {
		if (!st->may_die && !st->faulty)
			violate("step %u: cannot connect: %s", st->no, err.message);
		if (it_now_ms() > until + 30000 || T->stop)
			_exit(0);
		usleep(10000);
	}
	do
		run_op((enum op)ops[below(&s, n)], c, st, &s);
	while (it_now_ms() < until && !T->stop);
	weightd_close(c);
	_exit(0);
}

/* ---- the holder: weights held across steps, checked after each --------------------------- */

struct holder {
	pid_t pid;
	int to, from;
};

static struct holder HD;

struct held {
	weightd_unit *u;
	unsigned k[HOLD];
	uint64_t digest;
	weightd_weight *rw; /* a tensor of r, of whichever generation it got */
	const void *rp;
	unsigned rk;
	uint64_t rdigest;
};

static uint64_t held_digest(const struct held *h)
{
	uint64_t d = 0xcbf29ce484222325ull;

	for (int i = 0; i < HOLD; i++)
		d = fnv(weightd_unit_data(h->u, tnames[h->k[i]]), T_BYTES, d);
	return d;
}

static void holder_take(weightd_client *c, struct held *h, uint64_t *s)
{
	weightd_error err;

	if (!h->u) {
		pick_distinct(s, h->k, HOLD);
		if (unit_of(c, h->k, HOLD, &h->u, &err) == 0) {
			weightd_unit_bind(h->u);
			h->digest = held_digest(h);
		} else {
			h->u = NULL;
		}
	}
	if (!h->rw) {
		h->rk = below(s, N_R);
		if (get_one(c, "r", rnames[h->rk], &h->rw, &h->rp, &err) == 0) {
			h->rdigest = fnv(h->rp, R_BYTES, 0xcbf29ce484222325ull);
		} else {
			weightd_release(h->rw);
			h->rw = NULL;
		}
	}
}

/* "ok" or what changed: the digests at bind, and the oracle's bytes. */
static void holder_check(const struct held *h, char *out, size_t cap)
{
	snprintf(out, cap, "ok");
	if (h->u) {
		if (held_digest(h) != h->digest) {
			snprintf(out, cap, "a held unit's bytes changed");
			return;
		}
		for (int i = 0; i < HOLD; i++)
			if (it_pattern_mismatch(weightd_unit_data(h->u, tnames[h->k[i]]), T_BYTES,
						h->k[i]) >= 0) {
				snprintf(out, cap, "held c:%s is not its source's bytes",
					 tnames[h->k[i]]);
				return;
			}
	}
	if (h->rw && fnv(h->rp, R_BYTES, 0xcbf29ce484222325ull) != h->rdigest)
		snprintf(out, cap, "held r:%s changed", rnames[h->rk]);
}

static void holder_main(int in, int out, uint64_t s)
{
	weightd_client *c = NULL;
	struct held h = { 0 };
	weightd_error err;
	char cmd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	while (read(in, &cmd, 1) == 1) {
		char msg[256];

		if (!c && weightd_connect(H.sock, "torture-holder", &c, &err) < 0)
			c = NULL;
		if (cmd == 'r') { /* let go, and take others */
			weightd_unit_free(h.u);
			weightd_release(h.rw);
			memset(&h, 0, sizeof(h));
		}
		holder_check(&h, msg, sizeof(msg));
		if (c && strcmp(msg, "ok") == 0)
			holder_take(c, &h, &s);
		it_say(out, "%s\n", msg);
	}
	_exit(0);
}

static void holder_start(void)
{
	HD.pid = it_fork_piped(&HD.to, &HD.from);
	if (HD.pid == 0)
		holder_main(HD.to, HD.from, seed ^ 0x401d);
}

/* Ask the holder; its answer within a bound, or a violation. */
static void holder_ask(unsigned step, char cmd)
{
	char line[300];
	size_t n = 0;
	struct pollfd pfd = { HD.from, POLLIN, 0 };

	if (write(HD.to, &cmd, 1) != 1) {
		violate("step %u: the holder is gone", step);
		return;
	}
	while (n + 1 < sizeof(line)) {
		ssize_t r;

		if (poll(&pfd, 1,
			 60000 * (getenv("WD_TIME_SCALE") ? atoi(getenv("WD_TIME_SCALE")) : 1)) <=
		    0) {
			violate("step %u: the holder did not answer in 60 s (a held mapping hung?)",
				step);
			return;
		}
		r = read(HD.from, line + n, 1);
		if (r <= 0) {
			int stt = 0;

			waitpid(HD.pid, &stt, 0);
			violate("step %u: the holder died (%s %d): a held mapping faulted", step,
				WIFSIGNALED(stt) ? "signal" : "status",
				WIFSIGNALED(stt) ? WTERMSIG(stt) : WEXITSTATUS(stt));
			HD.pid = -1;
			return;
		}
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	if (strcmp(line, "ok") != 0)
		violate("step %u: %s", step, line);
}

static void holder_kill(void)
{
	kill(HD.pid, SIGKILL);
	waitpid(HD.pid, NULL, 0);
	close(HD.to);
	close(HD.from);
	holder_start();
}

/* ---- faults: libfiu's control FIFO, the tmpfs, the source ---------------------------------- */

/* One command to the daemon's libfiu (FIU_CTRL_FIFO-PID.in, answer on .out): 0 or -1. */
static int fiu_cmd(const char *cmd)
{
	char in[700], out[700], ans[32] = "";
	size_t n = 0;
	int fd, ofd;

	snprintf(in, sizeof(in), "%s-%d.in", fiu_prefix, (int)H.pid);
	snprintf(out, sizeof(out), "%s-%d.out", fiu_prefix, (int)H.pid);
	for (int i = 0; i < 200; i++) {
		fd = open(in, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0 || H.pid <= 0)
			break;
		usleep(10000); /* the FIFO is made by the daemon's libfiu as it starts */
	}
	if (fd < 0)
		return -1;
	ofd = open(out, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (dprintf(fd, "%s\n", cmd) < 0 || ofd < 0) {
		close(fd);
		if (ofd >= 0)
			close(ofd);
		return -1;
	}
	close(fd);
	while (n + 1 < sizeof(ans)) {
		struct pollfd p = { ofd, POLLIN, 0 };
		ssize_t r;

		if (poll(&p, 1, 5000) <= 0)
			break;
		r = read(ofd, ans + n, sizeof(ans) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		if (memchr(ans, '\n', n))
			break;
	}
	close(ofd);
	ans[n] = 0;
	return n && atoi(ans) == 0 ? 0 : -1;
}

static int tmpfs_size(const char *size)
{
	char o[64];

	snprintf(o, sizeof(o), "size=%s", size);
	return mount("tmpfs", tmpfs_dir, "tmpfs", MS_REMOUNT, o);
}

static unsigned long long tmpfs_used(void)
{
	unsigned long long used = 0;
	struct stat sb;
	DIR *d = opendir(H.seg_dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char p[1024];

		snprintf(p, sizeof(p), "%s/%s", H.seg_dir, e->d_name);
		if (e->d_name[0] != '.' && stat(p, &sb) == 0)
			used += (unsigned long long)sb.st_blocks * 512;
	}
	if (d)
		closedir(d);
	return used;
}

static void source_fault(bool rewrite, uint64_t *s)
{
	int fd = open(c_path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (!rewrite) {
		if (ftruncate(fd, (off_t)(c_size / 2 + below(s, (unsigned)(c_size / 2)))) < 0)
			perror("torture: truncate");
	} else {
		uint8_t junk[65536];
		off_t at = (off_t)(c_size / 4 + below(s, (unsigned)(c_size / 2)));

		memset(junk, 0x5a, sizeof(junk));
		if (pwrite(fd, junk, sizeof(junk), at) < 0)
			perror("torture: rewrite");
	}
	close(fd);
}

static int source_restore(void)
{
	int fd = open(c_path, O_WRONLY | O_CLOEXEC);
	int r = -1;

	if (fd >= 0 && pwrite(fd, c_orig, c_size, 0) == (ssize_t)c_size &&
	    ftruncate(fd, (off_t)c_size) == 0)
		r = 0;
	if (fd >= 0)
		close(fd);
	return r;
}

/* ---- the daemon ------------------------------------------------------------------------- */

static const struct harness_opts *daemon_opts(bool no_wait)
{
	static struct harness_opts o;

	memset(&o, 0, sizeof(o));
	o.file_log_level = true;
	o.env = have_fiu ? preload_env : NULL;
	o.no_wait = no_wait;
	return &o;
}

static int start_daemon(void)
{
	if (harness_start_opts(&H, daemon_opts(false)) < 0) {
		violate("weightd did not start again (log above)");
		return -1;
	}
	T->epoch++;
	restarts++;
	return 0;
}

/* Started, killed while it starts up (re-adopting), 1-3 times, then started for good. */
static int start_killing_readoption(uint64_t *s)
{
	int times = 1 + (int)below(s, 3);

	for (int i = 0; i < times; i++) {
		if (harness_start_opts(&H, daemon_opts(true)) < 0)
			return -1;
		usleep(1000 * below(s, 40));
		T->epoch++;
		harness_kill(&H);
		readopt_kills++;
	}
	return start_daemon();
}

/* weightd died while we did not kill it: under an injected fault an exit is counted; a signal
 * of its own (SIGSEGV, SIGABRT: a crash) never is. A crash point kills with SIGKILL. */
static void reap_unexpected(const struct step *st)
{
	int stt;

	if (H.pid <= 0 || waitpid(H.pid, &stt, WNOHANG) != H.pid)
		return;
	H.pid = -1;
	T->epoch++;
	if (WIFSIGNALED(stt) && WTERMSIG(stt) == SIGKILL && st->f->kind == F_POINT)
		return;
	if (WIFSIGNALED(stt))
		violate("step %u (%s, %s): weightd died of signal %d", st->no, st->w->name,
			st->f->name, WTERMSIG(stt));
	else if (!st->faulty)
		violate("step %u (%s): weightd exited with status %d with no fault injected",
			st->no, st->w->name, WEXITSTATUS(stt));
	else
		deaths_under_fault++;
}

/* ---- the checker ------------------------------------------------------------------------- */

static int status_bound_ms(void)
{
	const char *s = getenv("WD_TIME_SCALE");

	return 3000 * (s && atoi(s) > 0 ? atoi(s) : 1);
}

/* A fresh connection's status within the bound; NULL (a violation) when not. */
static weightd_status *timed_status(const struct step *st, weightd_client **ret)
{
	int64_t t0 = it_now_ms();
	weightd_client *c = NULL;
	weightd_status *s = NULL;
	weightd_error err;

	if (weightd_connect(H.sock, "torture-check", &c, &err) < 0 ||
	    weightd_status_get(c, &s, &err) < 0) {
		violate("step %u: status failed once the fault was gone: %s", st->no, err.message);
		weightd_close(c);
		return NULL;
	}
	if (it_now_ms() - t0 > status_bound_ms())
		violate("step %u: status took %lld ms (bound %d)", st->no,
			(long long)(it_now_ms() - t0), status_bound_ms());
	*ret = c;
	return s;
}

static bool seg_listed(const weightd_status *s, const char *name)
{
	for (size_t i = 0; i < s->n_segments; i++)
		if (strcmp(s->segment_list[i].name + 1, name) == 0)
			return true;
	return false;
}

/* WD_TORTURE_DEBUG=1: which processes hold descriptors of `name` (a segment, or every segment
 * of the prefix), and the kernel's OFD locks, printed when a check fails. */
static void debug_who_holds(const char *name)
{
	char cmd[1200];

	if (!getenv("WD_TORTURE_DEBUG"))
		return;
	snprintf(cmd, sizeof(cmd),
		 "echo weightd %d holder %d; for p in /proc/[0-9]*; do "
		 "n=$(ls -l $p/fd 2>/dev/null | grep -c '%s'); "
		 "[ \"$n\" != 0 ] && echo \"$p $n $(cat $p/comm)\"; done; grep OFDLCK /proc/locks",
		 (int)H.pid, (int)HD.pid, name);
	if (system(cmd) != 0)
		fprintf(stderr, "torture: the debug listing failed\n");
}

/* Is the object `name` in shm_dir mapped by a live process (the holder from before a restart,
 * which weightd keeps for it)? */
static bool mapped_by_holder(const char *name)
{
	char maps[64], line[1024];
	FILE *f;
	bool found = false;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)HD.pid);
	f = fopen(maps, "r");
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, name) != NULL;
	if (f)
		fclose(f);
	return found;
}

/*
 * The disk against status: every object under the prefix is a segment status lists (none leaked),
 * every listed segment is on disk, and every state record names a segment on disk of the size it
 * says. 0, or 1 with what disagrees in why (the caller retries while things settle).
 */
static int disk_agrees(const weightd_status *s, char *why, size_t cap)
{
	DIR *d = opendir(H.shm_dir);
	struct dirent *e;
	size_t plen = strlen(H.prefix);
	char rdir[700];
	int bad = 0;

	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, H.prefix, plen) != 0 || e->d_name[plen] != '.')
			continue;
		if (!seg_listed(s, e->d_name) && !mapped_by_holder(e->d_name)) {
			snprintf(why, cap, "segment %s on disk belongs to no weight (leaked)",
				 e->d_name);
			debug_who_holds(e->d_name);
			bad = 1;
		}
	}
	if (d)
		closedir(d);
	for (size_t i = 0; !bad && i < s->n_segments; i++) {
		char p[700];
		struct stat sb;

		snprintf(p, sizeof(p), "%s/%s", H.shm_dir, s->segment_list[i].name + 1);
		if (stat(p, &sb) < 0) {
			snprintf(why, cap, "segment %s is in status but not on disk",
				 s->segment_list[i].name);
			bad = 1;
		}
	}
	snprintf(rdir, sizeof(rdir), "%s/state/%s", H.dir, s->instance);
	d = opendir(rdir);
	while (!bad && d && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char p[1400], text[512] = "", seg[700];
		struct stat sb;
		const char *sz;
		FILE *f;

		if (e->d_name[0] == '.' || n < 6 || strcmp(e->d_name + n - 5, ".json") != 0 ||
		    strncmp(e->d_name, H.prefix, plen) != 0)
			continue;
		snprintf(seg, sizeof(seg), "%s/%.*s", H.shm_dir, (int)(n - 5), e->d_name);
		snprintf(p, sizeof(p), "%s/%s", rdir, e->d_name);
		f = fopen(p, "r");
		if (f) {
			size_t got = fread(text, 1, sizeof(text) - 1, f);

			text[got] = 0;
			fclose(f);
		}
		sz = strstr(text, "\"size\":");
		if (stat(seg, &sb) < 0) {
			snprintf(why, cap, "state record %s names a segment not on disk",
				 e->d_name);
			bad = 1;
		} else if (sz && strtoull(sz + 7, NULL, 10) != (unsigned long long)sb.st_size) {
			snprintf(why, cap, "state record %s says %llu bytes, the segment has %lld",
				 e->d_name, strtoull(sz + 7, NULL, 10), (long long)sb.st_size);
			bad = 1;
		}
	}
	if (d)
		closedir(d);
	return bad;
}

/* New lines of the daemon's log: a sanitizer's report is a violation. */
static void sanitizer_check(const struct step *st)
{
	FILE *f = fopen(H.log, "r");
	char line[2048];

	if (!f)
		return;
	fseek(f, log_seen, SEEK_SET);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "AddressSanitizer") || strstr(line, "LeakSanitizer") ||
		    strstr(line, "runtime error:"))
			violate("step %u: sanitizer: %s", st->no, line);
	log_seen = ftell(f);
	fclose(f);
}

static void probe(const struct step *st, weightd_client *c, uint64_t *s)
{
	struct step ok = *st;
	unsigned long long before = T->failed;

	/* once the fault is gone the next requests succeed: a get and a recipe */
	ok.faulty = false;
	ok.may_die = false;
	op_get(c, &ok, s);
	op_cast(c, &ok, s);
	if (T->failed != before && !T->stop) {
		weightd_status *x = NULL;
		weightd_error err;

		violate("step %u (%s, %s): a request failed after the fault was gone: %s", st->no,
			st->w->name, st->f->name, T->last_err);
		if (getenv("WD_TORTURE_DEBUG") && weightd_status_get(c, &x, &err) == 0) {
			printf("status: clients %llu references %llu locked %llu/%llu bytes resident %llu temp %llu in flight %llu\n",
			       (unsigned long long)x->clients, (unsigned long long)x->references,
			       (unsigned long long)x->locked_weights,
			       (unsigned long long)x->locked_bytes,
			       (unsigned long long)x->bytes_resident,
			       (unsigned long long)x->temp_bytes,
			       (unsigned long long)x->materializations_in_flight);
			for (size_t i = 0; i < x->n_weights; i++)
				printf("  %s refs %u clients %u seg %llu off %llu n %llu\n",
				       x->weight_list[i].label, x->weight_list[i].refs,
				       x->weight_list[i].clients,
				       (unsigned long long)x->weight_list[i].segment,
				       (unsigned long long)x->weight_list[i].offset,
				       (unsigned long long)x->weight_list[i].nbytes);
			for (size_t i = 0; i < x->n_segments; i++)
				printf("  seg %llu %s\n", (unsigned long long)x->segment_list[i].id,
				       x->segment_list[i].name);
			weightd_status_free(x);
			debug_who_holds(H.prefix);
		}
	}
}

/* Re-adopted weights are served without reading their source again, and are its bytes. A weight
 * re-adopted from before its source changed (a rewritten file put back is a new identity) is made
 * anew: only a get answered with the re-adopted weight itself must read nothing. */
static void readoption_check(const struct step *st, weightd_client *c)
{
	weightd_status *s0 = NULL;
	weightd_error err;
	int tried = 0;

	if (weightd_status_get(c, &s0, &err) < 0)
		return;
	for (size_t i = 0; i < s0->n_weights && tried < 6; i++) {
		const weightd_weight_status *ws = &s0->weight_list[i];
		weightd_status *a = NULL, *b = NULL;
		unsigned k;
		char tail;
		weightd_weight *w;
		const void *p;

		if (!ws->adopted || sscanf(ws->label, "c:t%u%c", &k, &tail) != 1 || k >= N_T)
			continue;
		tried++;
		if (weightd_status_summary(c, &a, &err) < 0)
			break;
		if (get_one(c, "c", tnames[k], &w, &p, &err) < 0) {
			violate("step %u: re-adopted c:t%u could not be had: %s", st->no, k,
				err.message);
		} else {
			check_plain(st, p, weightd_weight_nbytes(w), k, "re-adopted");
			if (weightd_weight_handle(w) == ws->handle &&
			    weightd_status_summary(c, &b, &err) == 0 &&
			    b->bytes_read != a->bytes_read)
				violate("step %u: serving re-adopted c:t%u read %llu source bytes",
					st->no, k,
					(unsigned long long)(b->bytes_read - a->bytes_read));
		}
		weightd_release(w);
		weightd_status_free(a);
		weightd_status_free(b);
	}
	weightd_status_free(s0);
}

/* A checkpoint still being admitted (a remote one after a restart reads its headers again). */
static bool loading(const weightd_status *s)
{
	for (size_t i = 0; i < s->n_sources; i++)
		if (s->sources[i].state && strcmp(s->sources[i].state, "loading") == 0)
			return true;
	return false;
}

static void check_step(const struct step *st, bool restarted, uint64_t *s)
{
	weightd_client *c = NULL;
	weightd_status *stt = NULL;
	char why[512] = "";
	int64_t until;

	stt = timed_status(st, &c);
	if (!stt)
		return;
	/* the step's clients have exited: wait until weightd has seen them go (their holds back)
	 * and nothing is in flight; only the holder and this connection stay. Weights a client had
	 * released but still mapped when an eviction came are kept until weightd's next look at
	 * the locks (every second): wait for that too, but for the holder's own. */
	until = it_now_ms() + 20000;
	while (stt->clients > 2 || stt->materializations_in_flight || loading(stt) ||
	       (stt->locked_weights > HOLD + 1 && it_now_ms() < until - 15000)) {
		weightd_error err;

		if (it_now_ms() > until) {
			violate("step %u (%s, %s): %llu clients and %llu materializations still there, "
				"or a checkpoint still loading, 20 s after the step",
				st->no, st->w->name, st->f->name, (unsigned long long)stt->clients,
				(unsigned long long)stt->materializations_in_flight);
			break;
		}
		usleep(10000);
		weightd_status_free(stt);
		stt = NULL;
		if (weightd_status_get(c, &stt, &err) < 0) {
			violate("step %u: status failed: %s", st->no, err.message);
			weightd_close(c);
			return;
		}
	}
	if (restarted)
		readoption_check(st, c);
	probe(st, c, s);
	holder_ask(st->no, below(s, 4) == 0 ? 'r' : 'c');
	/* settle: nothing in flight, then the disk and the state index agree with status */
	until = it_now_ms() + 20000;
	for (;;) {
		weightd_error err;
		int bad;

		weightd_status_free(stt);
		stt = NULL;
		if (weightd_status_get(c, &stt, &err) < 0) {
			violate("step %u: status failed: %s", st->no, err.message);
			break;
		}
		bad = stt->materializations_in_flight || stt->n_jobs ||
		      disk_agrees(stt, why, sizeof(why));
		if (!bad)
			break;
		if (it_now_ms() > until) {
			violate("step %u (%s, %s): %s", st->no, st->w->name, st->f->name,
				why[0] ? why : "materializations still in flight after 20 s");
			break;
		}
		usleep(50000);
	}
	weightd_status_free(stt);
	weightd_close(c);
	sanitizer_check(st);
}

/* ---- a step ----------------------------------------------------------------------------- */

static const struct workload *workload_named(const char *name)
{
	for (size_t i = 0; i < N_WORKLOADS; i++)
		if (strcmp(workloads[i].name, name) == 0)
			return &workloads[i];
	abort(); /* a name this file spells wrong */
}

static const struct fault *pick_fault(uint64_t *s)
{
	int total = 0, x;

	for (size_t i = 0; i < N_FAULTS; i++)
		total += faults[i].weight;
	/* against a remote checkpoint, one step in three fails its store */
	if (remote && below(s, 3) == 0)
		return &faults[N_FAULTS - 1];
	for (;;) {
		x = (int)below(s, (unsigned)total);
		for (size_t i = 0; i < N_FAULTS; i++) {
			if (x < faults[i].weight) {
				const struct fault *f = &faults[i];

				if ((f->kind == F_FIU && !have_fiu) ||
				    (f->kind == F_POINT && !have_fiu) ||
				    (f->kind == F_TMPFS && !have_tmpfs) ||
				    (f->kind == F_REMOTE && !remote) ||
				    (f->kind == F_SOURCE && remote))
					break; /* not on this machine or in this mode: pick again */
				return f;
			}
			x -= faults[i].weight;
		}
	}
}

/* The controller's side action: a reload of r replaced, or weightctl evict. In a child of its
 * own, so the controller keeps its timing; it says "R" on `say` just before it asks. */
static pid_t admin_action(enum action a, unsigned gen, int say)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (a == ACT_RELOAD) {
		char args[1024];
		int n = snprintf(args, sizeof(args), "safetensors %s", r_path);
		weightd_client *c = NULL;
		weightd_error err;

		for (unsigned k = 0; k < N_R; k++)
			n += snprintf(args + n, sizeof(args) - (size_t)n,
				      " --tensor r%u:U8:%u:bytes=%u", k, R_BYTES, r_seed(gen, k));
		if (harness_mkfixture(args) != 0)
			_exit(2);
		if (write(say, "R", 1) < 0)
			_exit(2);
		if (weightd_connect(H.sock, "torture-admin", &c, &err) == 0)
			weightd_reload(c, &err);
		weightd_close(c);
	} else {
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "evict", NULL };

		if (write(say, "R", 1) < 0)
			_exit(2);
		harness_run(argv, NULL, 0, (uid_t)-1);
	}
	_exit(0);
}

/* Reload until weightd serves what the files say now (after a fault that a reload left behind,
 * or a rewritten source put back). */
static void reload_clean(const struct step *st)
{
	weightd_client *c = NULL;
	weightd_error err;

	if (weightd_connect(H.sock, "torture-admin", &c, &err) < 0 || weightd_reload(c, &err) < 0)
		violate("step %u: reload failed after the fault was gone: %s", st->no, err.message);
	weightd_close(c);
}

/* Through the step, status asked again and again on one connection: an answer that took longer
 * than the bound while weightd neither died nor was started (the epoch did not move) is a
 * violation. Calls that fail (weightd killed, a fault injected) are not timed. */
static pid_t prober_start(const struct step *st)
{
	pid_t pid = fork();
	weightd_client *c = NULL;
	weightd_error err;

	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	while (T->step_running && !T->stop) {
		unsigned e0 = T->epoch;
		int64_t t0 = it_now_ms(), took;
		weightd_status *s = NULL;
		int r;

		if (!c && weightd_connect(H.sock, "torture-prober", &c, &err) < 0) {
			c = NULL;
			usleep(20000);
			continue;
		}
		r = weightd_status_summary(c, &s, &err);
		took = it_now_ms() - t0;
		weightd_status_free(s);
		if (r == 0 && T->epoch == e0) {
			T->probes++;
			if (took > T->probe_max_ms)
				T->probe_max_ms = took;
			if (took > status_bound_ms())
				violate("step %u (%s, %s): status took %lld ms while weightd ran (bound "
					"%d ms)",
					st->no, st->w->name, st->f->name, (long long)took,
					status_bound_ms());
		}
		usleep(50000);
	}
	weightd_close(c);
	_exit(0);
}

static void run_step(unsigned no)
{
	uint64_t s = step_rng(seed, no);
	struct step st = { .no = no, .rng = 0 };
	pid_t kids[MAX_CLIENTS], admin = -1, prober;
	int say[2] = { -1, -1 }, nk;
	bool restarted = false, killed = false, reloaded = false;
	int64_t t0, kill_at = -1, fault_at = -1, fault_end = -1;
	char cmd[300];
	pid_t fiu_pid = -1; /* the daemon whose libfiu has the fault enabled */

	st.w = &workloads[below(&s, N_WORKLOADS)];
	st.f = pick_fault(&s);
	st.rng = rnd(&s);
	st.clients = 1 + (int)below(&s, (unsigned)n_clients);
	st.dur_ms = 150 + (int)below(&s, 650);
	/* a reload kill or crash needs a reload to happen */
	if ((st.f->kind == F_KILL && st.f->err == KILL_RELOAD) ||
	    (st.f->kind == F_POINT && strstr(st.f->call, "reload")))
		st.w = workload_named("reload");
	/* a reload while the source is cut or rewritten would rightly serve what the file says
	 * then, which the oracle does not know: those steps read without reloading */
	if (st.f->kind == F_SOURCE && st.w->action == ACT_RELOAD)
		st.w = workload_named("single-gets");
	st.faulty = st.f->kind != F_NONE && st.f->kind != F_CLIENT;
	st.may_die = st.f->kind == F_KILL || st.f->kind == F_POINT || st.f->kind == F_FIU;
	fault_count[st.f - faults]++;
	if (!quiet)
		printf("step %u: %s, %s, %d clients, %d ms\n", no, st.w->name, st.f->name,
		       st.clients, st.dur_ms);
	fflush(stdout);

	/* what r's clients may see: the generation now, and the next if this step reloads */
	step_r_lo = step_r_hi = r_gen;
	if (st.w->action == ACT_RELOAD)
		step_r_hi = r_gen + 1;

	if (st.w->action == ACT_EVICT_FIRST) {
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "evict", NULL };

		harness_run(argv, NULL, 0, (uid_t)-1);
	}
	/* faults that are there from the start */
	if (st.f->kind == F_FIU) {
		if (st.f->err)
			snprintf(cmd, sizeof(cmd),
				 "enable_random name=%s,probability=%g,failinfo=%d", st.f->call,
				 st.f->p, st.f->err);
		else
			snprintf(cmd, sizeof(cmd), "enable_random name=%s,probability=%g",
				 st.f->call, st.f->p);
		if (fiu_cmd(cmd) < 0)
			fprintf(stderr, "torture: libfiu did not take \"%s\"\n", cmd);
		fiu_pid = H.pid;
	} else if (st.f->kind == F_POINT) {
		snprintf(cmd, sizeof(cmd), "enable name=%s", st.f->call);
		if (fiu_cmd(cmd) < 0)
			fprintf(stderr, "torture: libfiu did not take \"%s\"\n", cmd);
		fiu_pid = H.pid;
	} else if (st.f->kind == F_TMPFS) {
		char size[32];

		snprintf(size, sizeof(size), "%lluk", (tmpfs_used() >> 10) + 64 + below(&s, 1024));
		if (tmpfs_size(size) < 0)
			perror("torture: shrinking the segment tmpfs");
	} else if (st.f->kind == F_REMOTE) {
		/* servers.py's faults: 503 SlowDown, 500, an answer cut after some bytes */
		static const char *const modes[] = { "503", "500", "drop" };
		char q[200];

		snprintf(q, sizeof(q), "/__ctl?reset=1&fault=%s&n=%u&after=%u", modes[below(&s, 3)],
			 1 + below(&s, 40), below(&s, 200000));
		free(wd_servers_get(SV.fault, q));
	}
	if (st.f->kind == F_KILL) {
		if (st.f->err == KILL_FILL)
			kill_at = 2 + below(&s, 40);
		else if (st.f->err == KILL_ANY || st.f->err == KILL_READOPT)
			kill_at = below(&s, (unsigned)st.dur_ms);
	} else if (st.f->kind == F_SOURCE || st.f->kind == F_CLIENT) {
		fault_at = 2 + below(&s, (unsigned)st.dur_ms / 2);
	}

	if (pipe2(say, O_CLOEXEC) < 0)
		return;
	T->step_running = 1;
	prober = prober_start(&st);
	t0 = it_now_ms();
	nk = st.clients;
	for (int i = 0; i < nk; i++) {
		kids[i] = fork();
		if (kids[i] == 0)
			client_main(&st, i);
	}
	if (st.w->action == ACT_RELOAD) {
		r_gen++;
		reloaded = true;
		admin = admin_action(ACT_RELOAD, r_gen, say[1]);
	} else if (st.w->action == ACT_EVICT) {
		usleep(1000 * below(&s, (unsigned)st.dur_ms));
		admin = admin_action(ACT_EVICT, 0, say[1]);
	}
	if (st.f->kind == F_KILL && st.f->err == KILL_RELOAD) {
		char b;
		struct pollfd p = { say[0], POLLIN, 0 };

		if (poll(&p, 1, 10000) > 0 && read(say[0], &b, 1) == 1)
			kill_at = it_now_ms() - t0 + below(&s, 25);
	}
	/* the moment of the fault, while the clients run */
	for (;;) {
		int64_t now = it_now_ms() - t0;
		bool busy = false;

		if (kill_at >= 0 && now >= kill_at && !killed && H.pid > 0) {
			T->epoch++;
			harness_kill(&H);
			kills++;
			killed = true;
		}
		if (fault_at >= 0 && now >= fault_at) {
			fault_at = -1;
			if (st.f->kind == F_SOURCE) {
				source_fault(st.f->err == 1, &s);
				fault_end = now + 50 + below(&s, 300);
			} else if (st.f->err == 0 && nk > 0) {
				kill(kids[below(&s, (unsigned)nk)], SIGKILL);
			} else if (st.f->err == 1) {
				holder_kill();
			}
		}
		if (fault_end >= 0 && now >= fault_end) {
			fault_end = -1;
			source_restore();
		}
		if (killed && H.pid <= 0) {
			/* back up while the clients still run: they reconnect */
			if ((st.f->err == KILL_READOPT ? start_killing_readoption(&s) :
							 start_daemon()) < 0)
				break;
			restarted = true;
		}
		reap_unexpected(&st);
		if (H.pid <= 0 && !killed) {
			if (start_daemon() < 0)
				break;
			restarted = true;
		}
		for (int i = 0; i < nk; i++)
			if (kids[i] > 0 && waitpid(kids[i], NULL, WNOHANG) == 0)
				busy = true;
			else
				kids[i] = -1;
		if (!busy || now > st.dur_ms + 120000)
			break;
		usleep(2000);
	}
	for (int i = 0; i < nk; i++)
		if (kids[i] > 0) {
			violate("step %u (%s, %s): a client's request got no answer in 120 s", no,
				st.w->name, st.f->name);
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
		}
	if (admin > 0)
		waitpid(admin, NULL, 0);
	T->step_running = 0;
	if (prober > 0)
		waitpid(prober, NULL, 0);
	close(say[0]);
	close(say[1]);

	/* the fault goes */
	if ((st.f->kind == F_FIU || st.f->kind == F_POINT) && H.pid > 0 && H.pid == fiu_pid) {
		snprintf(cmd, sizeof(cmd), "disable name=%s", st.f->call);
		fiu_cmd(cmd);
	} else if (st.f->kind == F_TMPFS) {
		tmpfs_size("256m");
	} else if (st.f->kind == F_SOURCE) {
		source_restore();
	} else if (st.f->kind == F_REMOTE) {
		free(wd_servers_get(SV.fault, "/__ctl?reset=1"));
	}
	reap_unexpected(&st);
	if (H.pid <= 0) {
		if (start_daemon() < 0)
			return;
		restarted = true;
	}
	if (reloaded || st.f->kind == F_SOURCE)
		reload_clean(&st);
	check_step(&st, restarted, &s);
}

/* ---- set-up ------------------------------------------------------------------------------- */

static int write_checkpoints(void)
{
	char args[8192], rargs[1024];
	int n;
	FILE *f;

	harness_path(&H, "c.safetensors", c_path, sizeof(c_path));
	harness_path(&H, "r.safetensors", r_path, sizeof(r_path));
	n = snprintf(args, sizeof(args), "safetensors %s", c_path);
	for (int k = 0; k < N_T; k++) {
		snprintf(tnames[k], sizeof(tnames[k]), "t%d", k);
		n += snprintf(args + n, sizeof(args) - (size_t)n, " --tensor t%d:U8:%u:bytes=%d", k,
			      T_BYTES, k);
	}
	n += snprintf(args + n, sizeof(args) - (size_t)n,
		      " --tensor f:F32:%ux%u:values=%u --tensor q:F8_E4M3:%ux%u:bytes=%u"
		      " --tensor qs:F32:%ux%u:values=%u",
		      F_ROWS, F_COLS, F_SEED, Q_N, Q_N, Q_SEED, Q_N / Q_BLOCK, Q_N / Q_BLOCK,
		      QS_SEED);
	if (harness_mkfixture(args) != 0)
		return -1;
	n = snprintf(rargs, sizeof(rargs), "safetensors %s", r_path);
	for (unsigned k = 0; k < N_R; k++) {
		snprintf(rnames[k], sizeof(rnames[k]), "r%u", k);
		n += snprintf(rargs + n, sizeof(rargs) - (size_t)n, " --tensor r%u:U8:%u:bytes=%u",
			      k, R_BYTES, r_seed(0, k));
	}
	if (harness_mkfixture(rargs) != 0)
		return -1;
	f = fopen(c_path, "rb");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	c_size = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	c_orig = malloc(c_size);
	if (!c_orig || fread(c_orig, 1, c_size, f) != c_size) {
		fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

/* libfiu's preloads (fiu-run -x), after the sanitizer's runtime when weightd has one. */
static void find_fiu(void)
{
	char out[4096] = "", *asan, *end;
	char *argv[] = { "/usr/bin/ldd", (char *)harness_weightd(), NULL };
	const char *lib = "/usr/lib/fiu";
	char a[600] = "", b[600];

	snprintf(b, sizeof(b), "%s/fiu_posix_preload.so", lib);
	if (access(b, R_OK) != 0 || getenv("WD_TORTURE_NO_FIU"))
		return;
	harness_run(argv, out, sizeof(out), (uid_t)-1);
	asan = strstr(out, "libasan.so");
	if (asan && (asan = strstr(asan, "=> ")) && (end = strchr(asan + 3, ' ')))
		snprintf(a, sizeof(a), "%.*s ", (int)(end - asan - 3), asan + 3);
	snprintf(preload_buf, sizeof(preload_buf),
		 "LD_PRELOAD=%s%s/fiu_run_preload.so %s/fiu_posix_preload.so", a, lib, lib);
	harness_path(&H, "fiu", fiu_prefix, sizeof(fiu_prefix));
	snprintf(fifo_buf, sizeof(fifo_buf), "FIU_CTRL_FIFO=%s", fiu_prefix);
	preload_env[0] = preload_buf;
	preload_env[1] = fifo_buf;
	preload_env[2] = "FIU_ENABLE=";
	preload_env[3] = NULL;
	have_fiu = true;
}

/* The segments in a tmpfs of our own (root only), so a fault can shrink it. */
static void mount_tmpfs(void)
{
	harness_path(&H, "segtmpfs", tmpfs_dir, sizeof(tmpfs_dir));
	if (!as_root || mkdir(tmpfs_dir, 0700) < 0 ||
	    mount("tmpfs", tmpfs_dir, "tmpfs", MS_NOSUID | MS_NODEV,
		  "size=256m,mode=0711,huge=within_size") < 0)
		return;
	snprintf(H.seg_dir, sizeof(H.seg_dir), "%s/seg", tmpfs_dir);
	if (mkdir(H.seg_dir, 0700) < 0) {
		umount2(tmpfs_dir, MNT_DETACH);
		H.seg_dir[0] = 0;
		return;
	}
	have_tmpfs = true;
}

static int remote_section(char *sec, size_t cap)
{
	char why[300];

	if (wd_servers_start(H.dir, false, &SV, why, sizeof(why)) < 0) {
		fprintf(stderr, "wd-torture: --remote: no servers: %s\n", why);
		return -1;
	}
	/* c from the web server through the fault proxy; r stays local (it is rewritten) */
	return snprintf(
		       sec, cap,
		       "[checkpoint:c]\npath = http://127.0.0.1:%d/c.safetensors\nallow_http = yes\n\n"
		       "[checkpoint:r]\npath = %s\n",
		       SV.fault, r_path) < (int)cap ?
		       0 :
		       -1;
}

static void print_totals(unsigned steps, int64_t ms)
{
	printf("wd-torture: seed %llu: %u steps in %.1f s; %u kills (+%u during re-adoption), %u "
	       "restarts, %u exits under an injected fault\n",
	       (unsigned long long)seed, steps, (double)ms / 1000, kills, readopt_kills, restarts,
	       deaths_under_fault);
	printf("wd-torture: %llu operations, %llu ok, %llu failed with a typed error, %.1f MiB "
	       "checked\n",
	       (unsigned long long)T->ops, (unsigned long long)(T->ops - T->failed),
	       (unsigned long long)T->failed, (double)T->bytes_checked / (1 << 20));
	printf("wd-torture: %llu status answers timed during the steps, the slowest %lld ms (bound "
	       "%d ms)\n",
	       (unsigned long long)T->probes, (long long)T->probe_max_ms, status_bound_ms());
	printf("wd-torture: faults by kind:\n");
	for (size_t i = 0; i < N_FAULTS; i++)
		if (fault_count[i])
			printf("  %-42s %llu\n", faults[i].name,
			       (unsigned long long)fault_count[i]);
	printf("wd-torture: failures by code:");
	for (int i = 0; i < N_CODES; i++)
		if (T->by_code[i])
			printf(" %s %llu", i ? weightd_code_name(-i) : "untyped",
			       (unsigned long long)T->by_code[i]);
	printf("\nwd-torture: violations %llu\n", (unsigned long long)T->violations);
}

int main(int argc, char **argv)
{
	char sec[2048];
	unsigned max_steps = 0, step = 0;
	int seconds = 0, rc = 1;
	int64_t t0, until;

	seed = (uint64_t)time(NULL);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			max_steps = (unsigned)atoi(argv[++i]);
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= MAX_CLIENTS)
			n_clients = atoi(argv[++i]);
		else if (strcmp(argv[i], "--remote") == 0)
			remote = true;
		else if (strcmp(argv[i], "--quiet") == 0)
			quiet = true;
		else {
			fprintf(stderr,
				"usage: wd-torture [--seconds S] [--steps N] [--seed S] "
				"[--clients K<=%d] [--remote] [--quiet]\n",
				MAX_CLIENTS);
			return 2;
		}
	}
	if (!seconds && !max_steps)
		seconds = 60;
	signal(SIGPIPE, SIG_IGN);
	as_root = geteuid() == 0;
	T = mmap(NULL, sizeof(*T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (T == MAP_FAILED || harness_init(&H) < 0)
		return 1;
	memset(T, 0, sizeof(*T));
	if (as_root)
		chmod(H.dir, 0711); /* the clients of another uid reach the socket */
	if (write_checkpoints() < 0) {
		fprintf(stderr, "wd-torture: cannot write the checkpoints\n");
		goto out;
	}
	if (!H.seg_dir[0])
		mount_tmpfs();
	find_fiu();
	if (remote) {
		if (remote_section(sec, sizeof(sec)) < 0) {
			rc = 77;
			goto out;
		}
	} else {
		snprintf(sec, sizeof(sec),
			 "[checkpoint:c]\npath = %s\n\n[checkpoint:r]\npath = %s\n", c_path,
			 r_path);
	}
	if (harness_write_config(&H, "budget = " BUDGET "\nlog_level = warning", sec) < 0 ||
	    harness_start_opts(&H, daemon_opts(false)) < 0) {
		fprintf(stderr, "wd-torture: weightd did not start\n");
		goto out;
	}
	printf("wd-torture: seed %llu, %u %s, %d clients at most, budget %s, %s%s%s%s\n",
	       (unsigned long long)seed, max_steps ? max_steps : (unsigned)seconds,
	       max_steps ? "steps" : "seconds", n_clients, BUDGET,
	       have_fiu ? "libfiu" : "no libfiu", have_tmpfs ? ", segment tmpfs" : "",
	       as_root ? ", other uids" : "",
	       remote ? ", remote checkpoint behind the fault proxy" : "");
	fflush(stdout);
	log_seen = 0;
	holder_start();
	t0 = it_now_ms();
	until = t0 + (int64_t)seconds * 1000;
	while (!T->stop && (max_steps ? step < max_steps : it_now_ms() < until)) {
		run_step(step);
		if (T->stop)
			break;
		step++;
	}
	if (T->stop) {
		printf("wd-torture: VIOLATION at step %u: %s\n", step, T->why);
		printf("replay: scripts/torture --seed %llu --steps %u%s\n",
		       (unsigned long long)seed, step + 1, remote ? " --remote" : "");
		harness_dump_log(&H);
	}
	print_totals(step + (T->stop ? 1 : 0), it_now_ms() - t0);
	rc = T->violations ? 1 : 0;
out:
	if (HD.pid > 0) {
		kill(HD.pid, SIGKILL);
		waitpid(HD.pid, NULL, 0);
	}
	if (H.pid > 0)
		harness_stop(&H);
	if (have_tmpfs)
		umount2(tmpfs_dir, MNT_DETACH); /* its segments go with it */
	harness_cleanup(&H);
	if (remote)
		wd_servers_stop(&SV);
	return rc;
}
