/* SPDX-License-Identifier: Apache-2.0 */
/* test_recipes.c - derived weights end to end: recipes computed once in a real weightd, shared by
 * separate client processes, checked against results computed here from the fixture's pattern. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include "fixture.h"
#include "files.h"
#include "frame.h"
#include "rawcall.h"
#include "recipe.h"
#include "st_writer.h"
#include "weightd.pb-c.h"
#include "weightd/client.h"

/*
 * The checkpoint "rt", written here with tests/common/st_writer.h:
 *   emb  BF16 [1026, 64]  element e holds the bits e mod 65536: every bf16 bit pattern (NaNs
 *                         quiet and signalling, infinities, signed zeros, subnormals), in order
 *   q    F16  [48, 32]    values=2  (the "values" fill pattern, documented in st_writer.h)
 *   k    F16  [16, 32]    values=3
 *   v    F16  [16, 32]    values=4
 *   w    F32  [24, 40]    values=5
 * "fragile" is the same content in another file, which one test changes behind the daemon's back.
 */
#define EMB_ROWS 1026
#define EMB_COLS 64

static char ckpt[512], fragile[512];

/* --- oracles: the fixture's contents by their definition --------------------------------- */

static double pat_value(uint64_t k, uint32_t seed)
{
	return (double)((int64_t)((k * 131u + (uint64_t)seed * 7u + 13u) % 251u) - 125) / 1024.0;
}

/* The stored bf16 bits of emb's element e. */
static uint16_t emb_bits(uint64_t e)
{
	return (uint16_t)(e & 0xffff);
}

/* bf16 -> f32 by the definition: bf16 is the top half of an f32. A NaN comes out quiet (the
 * f32 quiet bit set, payload kept), as weightd documents for casts to F32. */
static uint32_t bf16_to_f32_bits(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;

	if ((b & 0x7f80) == 0x7f80 && (b & 0x007f))
		x |= 0x00400000u;
	return x;
}

/* IEEE half -> double from the bit fields (no conversion code of weightd involved). */
static double f16_decode(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);

	return (h & 0x8000) ? -v : v;
}

/* The rows [start, end) tensor-parallel rank `rank` of `world` takes of `dim` rows, by the
 * definition of torch.tensor_split: the first dim % world ranks take one row more. */
static void tp_split(uint64_t dim, uint32_t rank, uint32_t world, uint64_t *start, uint64_t *end)
{
	uint64_t q = dim / world, m = dim % world;

	*start = rank * q + (rank < m ? rank : m);
	*end = *start + q + (rank < m ? 1 : 0);
}

/* --- files and processes --------------------------------------------------------------------- */

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf))
		n = (int)sizeof(buf) - 1;
	if (write(fd, buf, (size_t)n) != n)
		_exit(3);
}

/* What a client process reports about the weight it bound. */
struct got {
	int ok;
	unsigned long long dev, ino, bytes_read, nbytes;
	char dtype[16];
	size_t ndim;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	int code;
	unsigned node;
	char message[1024];
};

struct kid {
	pid_t pid;
	int cmd;     /* parent writes 'q' to let it go */
	FILE *out;
};

/*
 * A separate client process: binds the recipe `json` (one slot) as a unit with the real library,
 * writes the weight's bytes to `outpath` (if not NULL), reports on one line, then holds the
 * weight until the parent says 'q'. With `gate`, it connects and parses first, says "ready", and
 * submits only when the parent says 'g' (so that several submit at once).
 */
static void kid_main(const char *json, const char *outpath, bool gate, int in, int out)
{
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	const weightd_weight *w;
	const void *data;
	struct stat st;
	char op;

	if (weightd_connect(H.sock, "test-kid", &c, &err) < 0 ||
	    weightd_unit_from_json(c, json, strlen(json), &u, &err) < 0) {
		say(out, "err %d %u %s\n", err.code, err.node, err.message);
		_exit(1);
	}
	if (gate) {
		say(out, "ready\n");
		if (read(in, &op, 1) != 1 || op != 'g')
			_exit(6);
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
		say(out, "err %d %u %s\n", err.code, err.node, err.message);
		_exit(1);
	}
	weightd_unit_bind(u);
	w = weightd_unit_weight(u, "output");
	data = weightd_unit_data(u, "output");
	if (fstat(weightd_weight_fd(w), &st) < 0)
		_exit(4);
	if (outpath) {
		FILE *f = fopen(outpath, "wb");
		if (!f || fwrite(data, 1, weightd_weight_nbytes(w), f) != weightd_weight_nbytes(w) ||
		    fclose(f) != 0)
			_exit(5);
	}
	say(out, "ok %llu %llu %llu %llu %s %zu", (unsigned long long)st.st_dev,
	    (unsigned long long)st.st_ino, (unsigned long long)weightd_unit_bytes_read(u),
	    (unsigned long long)weightd_weight_nbytes(w), weightd_weight_dtype(w),
	    weightd_weight_ndim(w));
	for (size_t i = 0; i < weightd_weight_ndim(w); i++)
		say(out, " %llu", (unsigned long long)weightd_weight_shape(w)[i]);
	say(out, "\n");
	while (read(in, &op, 1) == 1 && op != 'q')
		;
	weightd_unit_free(u);
	weightd_close(c);
	_exit(0);
}

/* Start a client process for `json` (see kid_main). */
static void kid_spawn(struct kid *k, const char *json, const char *outpath, bool gate)
{
	int to, from;

	k->pid = it_fork_piped(&to, &from);
	if (k->pid == 0)
		kid_main(json, outpath, gate, to, from);
	k->cmd = to;
	k->out = fdopen(from, "r");
	assert_non_null(k->out);
}

/* Collect a client process's report into *g. */
static void kid_report(struct kid *k, struct got *g)
{
	char line[2048];

	memset(g, 0, sizeof(*g));
	assert_non_null(fgets(line, sizeof(line), k->out));
	line[strcspn(line, "\n")] = '\0';
	if (strncmp(line, "err ", 4) == 0) {
		int used = 0;
		assert_int_equal(sscanf(line, "err %d %u %n", &g->code, &g->node, &used), 2);
		snprintf(g->message, sizeof(g->message), "%s", line + used);
		return;
	}
	{
		int used = 0, off;
		assert_int_equal(sscanf(line, "ok %llu %llu %llu %llu %15s %zu%n", &g->dev, &g->ino,
					&g->bytes_read, &g->nbytes, g->dtype, &g->ndim, &used), 6);
		off = used;
		for (size_t i = 0; i < g->ndim; i++) {
			unsigned long long d;
			assert_int_equal(sscanf(line + off, " %llu%n", &d, &used), 1);
			g->shape[i] = d;
			off += used;
		}
	}
	g->ok = 1;
}

static void kid_start(struct kid *k, const char *json, const char *outpath, struct got *g)
{
	kid_spawn(k, json, outpath, false);
	kid_report(k, g);
}

static void kid_end(struct kid *k)
{
	int status;

	/* it may have exited already: the write then fails with EPIPE (SIGPIPE is ignored in main) */
	if (write(k->cmd, "q", 1) != 1) {
	}
	close(k->cmd);
	fclose(k->out);
	assert_int_equal(waitpid(k->pid, &status, 0), k->pid);
	assert_true(WIFEXITED(status));
}

/* One process binds `json`, writes its bytes to `outpath`, and lets go at once. */
static void get_once(const char *json, const char *outpath, struct got *g)
{
	struct kid k;

	kid_start(&k, json, outpath, g);
	kid_end(&k);
	if (!g->ok)
		fail_msg("binding %s failed: %s", json, g->message);
}

/* Run argv with stdout and stderr captured. Returns the exit status (or -1). */
static int run_capture(char *const argv[], char *out, size_t out_cap, char *errbuf, size_t err_cap)
{
	char opath[400], epath[400];
	pid_t pid;
	int status;

	harness_path(&H, "run.out", opath, sizeof(opath));
	harness_path(&H, "run.err", epath, sizeof(epath));
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int o = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (o < 0 || e < 0)
			_exit(126);
		dup2(o, STDOUT_FILENO);
		dup2(e, STDERR_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	for (int i = 0; i < 2; i++) {
		char *buf = i ? errbuf : out;
		size_t cap = i ? err_cap : out_cap, n;
		FILE *f = fopen(i ? epath : opath, "r");

		if (!buf)
			continue;
		n = f ? fread(buf, 1, cap - 1, f) : 0;
		buf[n] = '\0';
		if (f)
			fclose(f);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* --- the daemon's view ------------------------------------------------------------------------ */

static weightd_client *connect_or_fail(void)
{
	weightd_client *c = NULL;
	weightd_error err;

	if (weightd_connect(H.sock, "test", &c, &err) < 0)
		fail_msg("connect: %s", err.message);
	return c;
}

struct counters {
	uint64_t bytes_read, weights, references, materializations, clients;
	uint64_t daemon_segments;    /* as status reports them */
	int segments;                /* as /dev/shm shows them */
	int daemon_fds;
};

static struct counters counters_now(weightd_client *c)
{
	weightd_status *st = NULL;
	weightd_error err;
	struct counters k;

	if (weightd_status_get(c, &st, &err) < 0)
		fail_msg("status: %s", err.message);
	k.bytes_read = st->bytes_read;
	k.weights = st->weights;
	k.references = st->references;
	k.materializations = st->materializations;
	k.clients = st->clients;
	k.daemon_segments = st->segments;
	weightd_status_free(st);
	k.segments = harness_segments(&H);
	k.daemon_fds = harness_count_fds(H.pid);
	return k;
}

/* Wait (bounded) until the daemon counts `refs` references and `clients` clients: clients that
 * ended are noticed asynchronously. */
static struct counters settle(weightd_client *c, uint64_t refs, uint64_t clients)
{
	struct counters k = counters_now(c);

	for (int i = 0; i < 500 && (k.references != refs || k.clients != clients); i++) {
		usleep(10000);
		k = counters_now(c);
	}
	assert_int_equal(k.references, refs);
	assert_int_equal(k.clients, clients);
	return k;
}

static int count_self_fds(void)
{
	return harness_count_fds(getpid());
}

/* --- set-up ----------------------------------------------------------------------------------- */

static int make_fixture(const char *path)
{
	uint8_t *emb = malloc((size_t)EMB_ROWS * EMB_COLS * 2);
	struct stw_tensor ts[] = {
		{ "emb", "BF16", 2, { EMB_ROWS, EMB_COLS }, emb, 0, STW_BYTES, 0 },
		{ "q", "F16", 2, { 48, 32 }, NULL, 0, STW_VALUES, 2 },
		{ "k", "F16", 2, { 16, 32 }, NULL, 0, STW_VALUES, 3 },
		{ "v", "F16", 2, { 16, 32 }, NULL, 0, STW_VALUES, 4 },
		{ "w", "F32", 2, { 24, 40 }, NULL, 0, STW_VALUES, 5 },
	};
	int r;

	if (!emb)
		return -1;
	for (uint64_t e = 0; e < (uint64_t)EMB_ROWS * EMB_COLS; e++) {
		emb[2 * e] = (uint8_t)(e & 0xff);
		emb[2 * e + 1] = (uint8_t)((e >> 8) & 0xff);
	}
	r = stw_write(path, ts, sizeof(ts) / sizeof(ts[0]), NULL, 0, NULL);
	free(emb);
	return r;
}

static int setup(void **state)
{
	char sections[2048];

	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "rt.safetensors", ckpt, sizeof(ckpt));
	harness_path(&H, "fragile.safetensors", fragile, sizeof(fragile));
	if (make_fixture(ckpt) < 0 || make_fixture(fragile) < 0)
		return -1;
	snprintf(sections, sizeof(sections),
		 "[checkpoint:rt]\npath = %s\n\n[checkpoint:fragile]\npath = %s\n", ckpt, fragile);
	return fixture_start(NULL, sections);
}

#define SRC(t) "{\"op\":\"source\",\"checkpoint\":\"rt\",\"tensor\":\"" t "\"}"

/* cast(shard(emb)) to F32 for one rank of a 4-way split on axis 0. */
static void cast_shard_json(char *out, size_t cap, uint32_t rank)
{
	snprintf(out, cap,
		 "{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":{\"op\":\"source\",\"checkpoint\":\"rt\","
		 "\"tensor\":\"emb\",\"select\":{\"shard\":[0,%u,4]}}}", rank);
}

/* Expected F32 bits of emb rows [r0, r1) cast from BF16, into out. */
static void expect_emb_f32(uint64_t r0, uint64_t r1, uint32_t *out)
{
	for (uint64_t e = r0 * EMB_COLS; e < r1 * EMB_COLS; e++)
		out[e - r0 * EMB_COLS] = bf16_to_f32_bits(emb_bits(e));
}

/* --- tests ------------------------------------------------------------------------------------ */

/*
 * Two processes ask for the same cast-and-shard recipe: one segment (same inode), and the daemon
 * reads the shard's source bytes once. A third asks for the same weight written the other way
 * round (shard of the cast): the identity is the same, so is the segment.
 */
static void same_recipe_one_segment_read_once(void **state)
{
	weightd_client *c = connect_or_fail();
	struct counters k0, k1, k2;
	struct kid a, b, x;
	struct got ga, gb, gx;
	char json[512], other[512], path[400];
	uint64_t r0, r1, shard_bytes;
	uint32_t *want;
	uint8_t *bytes;
	size_t len;

	(void)state;
	tp_split(EMB_ROWS, 1, 4, &r0, &r1);
	shard_bytes = (r1 - r0) * EMB_COLS * 2; /* the BF16 bytes of rank 1's rows */
	cast_shard_json(json, sizeof(json), 1);
	harness_path(&H, "a.bin", path, sizeof(path));

	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	kid_start(&a, json, path, &ga);
	assert_true(ga.ok);
	k1 = counters_now(c);
	assert_int_equal(k1.bytes_read - k0.bytes_read, shard_bytes);
	assert_int_equal(ga.bytes_read, shard_bytes);
	assert_int_equal(k1.segments, k0.segments + 1);

	kid_start(&b, json, NULL, &gb);
	assert_true(gb.ok);
	snprintf(other, sizeof(other),
		 "{\"op\":\"select\",\"select\":{\"shard\":[0,1,4]},\"input\":{\"op\":\"cast\","
		 "\"dtype\":\"F32\",\"input\":" SRC("emb") "}}");
	kid_start(&x, other, NULL, &gx);
	assert_true(gx.ok);
	k2 = counters_now(c);

	assert_int_equal(ga.dev, gb.dev);
	assert_int_equal(ga.ino, gb.ino);
	assert_int_equal(ga.dev, gx.dev);
	assert_int_equal(ga.ino, gx.ino);
	assert_int_equal(gb.bytes_read, 0);
	assert_int_equal(gx.bytes_read, 0);
	assert_int_equal(k2.bytes_read, k1.bytes_read); /* B and X made the daemon read nothing */
	assert_int_equal(k2.segments, k1.segments);
	assert_int_equal(k2.weights, k1.weights);
	assert_int_equal(k2.references, k0.references + 3);

	/* and the bytes are the cast of the source rows */
	assert_string_equal(ga.dtype, "F32");
	assert_int_equal(ga.ndim, 2);
	assert_int_equal(ga.shape[0], r1 - r0);
	assert_int_equal(ga.shape[1], EMB_COLS);
	bytes = tf_read(path, &len);
	assert_int_equal(len, (r1 - r0) * EMB_COLS * 4);
	want = malloc(len);
	assert_non_null(want);
	expect_emb_f32(r0, r1, want);
	assert_memory_equal(bytes, want, len);
	free(want);
	free(bytes);

	kid_end(&a);
	kid_end(&b);
	kid_end(&x);
	settle(c, k0.references, k0.clients);
	weightd_close(c);
}

/*
 * Four processes submit the same new recipe at the same moment: the daemon makes it once (one
 * segment, the source bytes read once) and all four map it.
 */
static void concurrent_requests_join_one_materialization(void **state)
{
	weightd_client *c = connect_or_fail();
	const char *json = "{\"op\":\"cast\",\"dtype\":\"F64\",\"input\":" SRC("emb") "}";
	struct counters k0, k1;
	struct kid k[4];
	struct got g[4];
	char line[256];
	uint64_t total_read = 0;

	(void)state;
	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	for (int i = 0; i < 4; i++) {
		kid_spawn(&k[i], json, NULL, true);
		assert_non_null(fgets(line, sizeof(line), k[i].out));
		assert_string_equal(line, "ready\n");
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(write(k[i].cmd, "g", 1), 1);
	for (int i = 0; i < 4; i++) {
		kid_report(&k[i], &g[i]);
		if (!g[i].ok)
			fail_msg("client %d: %s", i, g[i].message);
		assert_int_equal(g[i].dev, g[0].dev);
		assert_int_equal(g[i].ino, g[0].ino);
		total_read += g[i].bytes_read;
	}
	k1 = counters_now(c);
	assert_int_equal(k1.bytes_read - k0.bytes_read, (uint64_t)EMB_ROWS * EMB_COLS * 2);
	assert_int_equal(total_read, (uint64_t)EMB_ROWS * EMB_COLS * 2); /* charged to one of them */
	/* at most one new segment: a single get goes into the shared arena, new or not */
	assert_true(k1.segments <= k0.segments + 1);
	assert_int_equal(k1.references, k0.references + 4);
	for (int i = 0; i < 4; i++)
		kid_end(&k[i]);
	settle(c, k0.references, k0.clients);
	weightd_close(c);
}

/*
 * Ranks 0..3 of a 4-way shard of a dimension that does not divide (1026 = 4 * 256 + 2): each
 * rank its own weight, rows by the tensor_split rule, and the four concatenated equal both the
 * cast of the whole tensor (as weightd makes it) and the cast computed here from the file's
 * pattern.
 */
static void four_ranks_concatenate_to_the_full_cast(void **state)
{
	weightd_client *c = connect_or_fail();
	struct got g[4], full;
	struct counters k0;
	char json[512], path[400];
	size_t total = 0, len;
	uint8_t *cat, *whole;
	uint32_t *want;

	(void)state;
	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	cat = malloc((size_t)EMB_ROWS * EMB_COLS * 4);
	assert_non_null(cat);
	for (uint32_t r = 0; r < 4; r++) {
		uint64_t s, e;
		uint8_t *part;

		tp_split(EMB_ROWS, r, 4, &s, &e);
		cast_shard_json(json, sizeof(json), r);
		harness_path(&H, "rank.bin", path, sizeof(path));
		get_once(json, path, &g[r]);
		assert_string_equal(g[r].dtype, "F32");
		assert_int_equal(g[r].shape[0], e - s);
		assert_int_equal(g[r].shape[1], EMB_COLS);
		assert_int_equal(g[r].shape[0], r < 2 ? 257 : 256);
		part = tf_read(path, &len);
		assert_int_equal(len, g[r].nbytes);
		memcpy(cat + total, part, len);
		total += len;
		free(part);
	}
	assert_int_equal(total, (size_t)EMB_ROWS * EMB_COLS * 4);

	want = malloc(total);
	assert_non_null(want);
	expect_emb_f32(0, EMB_ROWS, want);
	assert_memory_equal(cat, want, total);

	snprintf(json, sizeof(json), "{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":" SRC("emb") "}");
	harness_path(&H, "full.bin", path, sizeof(path));
	get_once(json, path, &full);
	assert_int_equal(full.nbytes, total); /* a weight of its own, not the ranks' */
	whole = tf_read(path, &len);
	assert_int_equal(len, total);
	assert_memory_equal(whole, cat, total);
	free(whole);
	free(want);
	free(cat);
	settle(c, k0.references, k0.clients);
	weightd_close(c);
}

/* Element (row, col) of a [rows, cols] F16 tensor filled with values=seed. */
static double v16(uint32_t seed, uint64_t cols, uint64_t row, uint64_t col)
{
	return pat_value(row * cols + col, seed);
}

static void check_f16(const uint8_t *p, size_t i, double want)
{
	uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);

	if (f16_decode(h) != want)
		fail_msg("element %zu is %g, expected %g", i, f16_decode(h), want);
}

static float f32_at(const uint8_t *p, size_t i)
{
	float f;
	memcpy(&f, p + 4 * i, 4);
	return f;
}

/* Fused q/k/v, transposes, index selections, reshape and view: each against values computed
 * here from the pattern by index arithmetic. */
static void structural_ops_match_reference(void **state)
{
	char path[400];
	struct got g;
	uint8_t *p;
	size_t len;

	(void)state;
	harness_path(&H, "op.bin", path, sizeof(path));

	/* q/k/v fused along the output axis: [48 + 16 + 16, 32] */
	get_once("{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC("q") "," SRC("k") "," SRC("v") "]}",
		 path, &g);
	assert_string_equal(g.dtype, "F16");
	assert_int_equal(g.shape[0], 80);
	assert_int_equal(g.shape[1], 32);
	p = tf_read(path, &len);
	assert_int_equal(len, 80 * 32 * 2);
	for (uint64_t r = 0; r < 80; r++)
		for (uint64_t col = 0; col < 32; col++)
			check_f16(p, r * 32 + col, r < 48 ? v16(2, 32, r, col) :
						   r < 64 ? v16(3, 32, r - 48, col) :
							    v16(4, 32, r - 64, col));
	free(p);

	/* concat on the inner axis (negative axis, as PyTorch): [16, 64] = [k | v] */
	get_once("{\"op\":\"concat\",\"axis\":-1,\"inputs\":[" SRC("k") "," SRC("v") "]}", path, &g);
	assert_int_equal(g.shape[0], 16);
	assert_int_equal(g.shape[1], 64);
	p = tf_read(path, &len);
	for (uint64_t r = 0; r < 16; r++)
		for (uint64_t col = 0; col < 64; col++)
			check_f16(p, r * 64 + col, col < 32 ? v16(3, 32, r, col) : v16(4, 32, r, col - 32));
	free(p);

	/* F16 to I32 drops the fraction: only with "truncate" (the values are all below 1) */
	{
		struct kid k;

		kid_start(&k, "{\"op\":\"cast\",\"dtype\":\"I32\",\"input\":" SRC("q") "}", path,
			  &g);
		kid_end(&k);
	}
	assert_false(g.ok);
	assert_int_equal(g.code, WEIGHTD_E_UNSUPPORTED_CAST);
	assert_non_null(strstr(g.message, "a cast from F16 to I32 loses the fraction"));
	assert_non_null(strstr(g.message, "\"truncate\": true"));
	get_once("{\"op\":\"cast\",\"dtype\":\"I32\",\"truncate\":true,\"input\":" SRC("q") "}",
		 path, &g);
	assert_true(g.ok);
	assert_string_equal(g.dtype, "I32");
	p = tf_read(path, &len);
	assert_int_equal(len, 48 * 32 * 4);
	for (size_t i = 0; i < 48 * 32; i++)
		assert_int_equal(((const int32_t *)(const void *)p)[i], 0);
	free(p);

	/* transpose of w [24, 40] -> [40, 24] */
	get_once("{\"op\":\"transpose\",\"perm\":[1,0],\"input\":" SRC("w") "}", path, &g);
	assert_string_equal(g.dtype, "F32");
	assert_int_equal(g.shape[0], 40);
	assert_int_equal(g.shape[1], 24);
	p = tf_read(path, &len);
	assert_int_equal(len, 40 * 24 * 4);
	for (uint64_t i = 0; i < 40; i++)
		for (uint64_t j = 0; j < 24; j++)
			assert_true(f32_at(p, i * 24 + j) == (float)pat_value(j * 40 + i, 5));
	free(p);

	/* transpose of the fused q/k/v cast to F32: [32, 80] */
	get_once("{\"op\":\"transpose\",\"perm\":[1,0],\"input\":{\"op\":\"cast\",\"dtype\":\"F32\","
		 "\"input\":{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC("q") "," SRC("k") ","
		 SRC("v") "]}}}", path, &g);
	assert_int_equal(g.shape[0], 32);
	assert_int_equal(g.shape[1], 80);
	p = tf_read(path, &len);
	for (uint64_t i = 0; i < 32; i++)
		for (uint64_t j = 0; j < 80; j++) {
			double want = j < 48 ? v16(2, 32, j, i) : j < 64 ? v16(3, 32, j - 48, i) :
								    v16(4, 32, j - 64, i);
			assert_true(f32_at(p, i * 80 + j) == (float)want);
		}
	free(p);

	/* ordered indices with a repeat, on each axis */
	{
		static const uint64_t rows[] = { 5, 0, 23, 5 }, cols[] = { 39, 1, 1, 0, 17 };

		get_once("{\"op\":\"select\",\"select\":{\"indices\":[0,[5,0,23,5]]},\"input\":"
			 SRC("w") "}", path, &g);
		assert_int_equal(g.shape[0], 4);
		assert_int_equal(g.shape[1], 40);
		p = tf_read(path, &len);
		for (size_t i = 0; i < 4; i++)
			for (uint64_t j = 0; j < 40; j++)
				assert_true(f32_at(p, i * 40 + j) == (float)pat_value(rows[i] * 40 + j, 5));
		free(p);

		get_once("{\"op\":\"source\",\"checkpoint\":\"rt\",\"tensor\":\"w\","
			 "\"select\":{\"indices\":[1,[39,1,1,0,17]]}}", path, &g);
		assert_int_equal(g.shape[0], 24);
		assert_int_equal(g.shape[1], 5);
		p = tf_read(path, &len);
		for (uint64_t i = 0; i < 24; i++)
			for (size_t j = 0; j < 5; j++)
				assert_true(f32_at(p, i * 5 + j) == (float)pat_value(i * 40 + cols[j], 5));
		free(p);
	}

	/* a range, then a contiguous run of elements with its own shape */
	get_once("{\"op\":\"source\",\"checkpoint\":\"rt\",\"tensor\":\"w\","
		 "\"select\":{\"range\":[1,10,13]}}", path, &g);
	assert_int_equal(g.shape[0], 24);
	assert_int_equal(g.shape[1], 3);
	p = tf_read(path, &len);
	for (uint64_t i = 0; i < 24; i++)
		for (uint64_t j = 0; j < 3; j++)
			assert_true(f32_at(p, i * 3 + j) == (float)pat_value(i * 40 + 10 + j, 5));
	free(p);
	get_once("{\"op\":\"source\",\"checkpoint\":\"rt\",\"tensor\":\"w\","
		 "\"select\":{\"elements\":[70,130,[3,4,5]]}}", path, &g);
	assert_int_equal(g.ndim, 3);
	p = tf_read(path, &len);
	assert_int_equal(len, 60 * 4);
	for (uint64_t i = 0; i < 60; i++)
		assert_true(f32_at(p, i) == (float)pat_value(70 + i, 5));
	free(p);

	/* reshape keeps the row-major order; view reinterprets the same bytes */
	get_once("{\"op\":\"reshape\",\"shape\":[8,3,40],\"input\":" SRC("w") "}", path, &g);
	assert_int_equal(g.ndim, 3);
	assert_int_equal(g.shape[1], 3);
	p = tf_read(path, &len);
	assert_int_equal(len, 24 * 40 * 4);
	for (uint64_t i = 0; i < 24 * 40; i++)
		assert_true(f32_at(p, i) == (float)pat_value(i, 5));
	free(p);
	get_once("{\"op\":\"view\",\"dtype\":\"U8\",\"shape\":[2052,64],\"input\":" SRC("emb") "}",
		 path, &g);
	assert_string_equal(g.dtype, "U8");
	p = tf_read(path, &len);
	assert_int_equal(len, 2052 * 64);
	for (uint64_t i = 0; i < len; i++)
		assert_int_equal(p[i], (i % 2 ? emb_bits(i / 2) >> 8 : emb_bits(i / 2) & 0xff));
	free(p);
	/* stack of k and v: [2, 16, 32] */
	get_once("{\"op\":\"stack\",\"axis\":0,\"inputs\":[" SRC("k") "," SRC("v") "]}", path, &g);
	assert_int_equal(g.ndim, 3);
	assert_int_equal(g.shape[0], 2);
	p = tf_read(path, &len);
	for (uint64_t i = 0; i < 16 * 32; i++) {
		check_f16(p, i, pat_value(i, 3));
		check_f16(p, 16 * 32 + i, pat_value(i, 4));
	}
	free(p);
}

/* --- preflight errors ------------------------------------------------------------------------- */

struct bad_case {
	const char *what;
	const char *json;       /* NULL: built by the test */
	int code;
	unsigned node;          /* 0-based index of the node the error must name */
	const char *op;
	const char *path;       /* where that node is in the JSON */
};

static const struct bad_case bad_cases[] = {
	{ "unknown source",
	  "{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":{\"op\":\"source\","
	  "\"checkpoint\":\"nope\",\"tensor\":\"q\"}}",
	  WEIGHTD_E_UNKNOWN_SOURCE, 0, "source", "$.input" },
	{ "unknown tensor",
	  "{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC("q") "," SRC("no.such") "]}",
	  WEIGHTD_E_UNKNOWN_TENSOR, 1, "source", "$.inputs[1]" },
	{ "empty inputs",
	  "{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC("q") ",{\"op\":\"stack\","
								"\"axis\":0,\"inputs\":[]}]}",
	  WEIGHTD_E_EMPTY_INPUTS, 1, "stack", "$.inputs[1]" },
	{ "dtype mismatch",
	  "{\"op\":\"concat\",\"axis\":1,\"inputs\":[" SRC("q") "," SRC("emb") "]}",
	  WEIGHTD_E_DTYPE_MISMATCH, 2, "concat", "$" },
	{ "shape mismatch",
	  "{\"op\":\"concat\",\"axis\":0,\"inputs\":[" SRC(
		  "q") ",{\"op\":"
		       "\"transpose\",\"perm\":[1,0],\"input\":" SRC("k") "}]}",
	  WEIGHTD_E_SHAPE_MISMATCH, 3, "concat", "$" },
	{ "join axis out of range",
	  "{\"op\":\"concat\",\"axis\":2,\"inputs\":[" SRC("q") "," SRC("k") "]}",
	  WEIGHTD_E_AXIS_OUT_OF_RANGE, 2, "concat", "$" },
	{ "negative join axis out of range",
	  "{\"op\":\"stack\",\"axis\":-4,\"inputs\":[" SRC("k") "," SRC("v") "]}",
	  WEIGHTD_E_AXIS_OUT_OF_RANGE, 2, "stack", "$" },
	{ "element count mismatch", "{\"op\":\"reshape\",\"shape\":[10,10],\"input\":" SRC("q") "}",
	  WEIGHTD_E_ELEMENT_COUNT_MISMATCH, 1, "reshape", "$" },
	{ "byte count mismatch",
	  "{\"op\":\"view\",\"dtype\":\"F32\",\"shape\":[48,32],\"input\":" SRC("q") "}",
	  WEIGHTD_E_BYTE_COUNT_MISMATCH, 1, "view", "$" },
	{ "not a permutation", "{\"op\":\"transpose\",\"perm\":[1,1],\"input\":" SRC("q") "}",
	  WEIGHTD_E_NOT_A_PERMUTATION, 1, "transpose", "$" },
	{ "zero-sized output",
	  "{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":{\"op\":\"select\","
	  "\"select\":{\"shard\":[0,63,64]},\"input\":" SRC("q") "}}",
	  WEIGHTD_E_ZERO_SIZED, 1, "select", "$.input" },
	{ "unsupported cast", "{\"op\":\"cast\",\"dtype\":\"Q4_0\",\"input\":" SRC("q") "}",
	  WEIGHTD_E_UNSUPPORTED_CAST, 1, "cast", "$" },
	{ "lossy cast", "{\"op\":\"cast\",\"dtype\":\"BOOL\",\"input\":" SRC("q") "}",
	  WEIGHTD_E_UNSUPPORTED_CAST, 1, "cast", "$" },
	{ "arithmetic overflow",
	  "{\"op\":\"view\",\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,"
	  "2],\"input\":" SRC("q") "}",
	  WEIGHTD_E_OVERFLOW, 1, "view", "$" },
	/* node 32 of 40 nested casts is 8 levels below the outermost */
	{ "recipe too deep", NULL, WEIGHTD_E_RECIPE_TOO_DEEP, 0, "cast",
	  "$.input.input.input.input.input.input.input.input" },
	{ "recipe too large", NULL, WEIGHTD_E_RECIPE_TOO_LARGE, 0, "source", NULL },
};

/* 40 casts nested over one source: nodes 0 (source), 1..40 (casts); node i is i + 1 deep. */
static char *too_deep_json(void)
{
	size_t cap = 64 * 1024, len = 0;
	char *s = malloc(cap);

	assert_non_null(s);
	for (int i = 0; i < 40; i++)
		len += (size_t)snprintf(s + len, cap - len, "{\"op\":\"cast\",\"dtype\":\"%s\",\"input\":",
					i % 2 ? "F16" : "F32");
	len += (size_t)snprintf(s + len, cap - len, SRC("q"));
	for (int i = 0; i < 40; i++)
		s[len++] = '}';
	s[len] = '\0';
	return s;
}

/* A concat of 299 sources: 300 nodes, nodes 0..298 sources. */
/* A concat of max_nodes + 43 sources: node max_nodes (a source) is the first past the limit. */
static char *too_large_json(uint32_t max_nodes)
{
	size_t cap = 64 * ((size_t)max_nodes + 64), len = 0;
	char *s = malloc(cap);

	assert_non_null(s);
	len += (size_t)snprintf(s + len, cap - len, "{\"op\":\"concat\",\"axis\":0,\"inputs\":[");
	for (uint32_t i = 0; i < max_nodes + 43; i++)
		len += (size_t)snprintf(s + len, cap - len, "%s" SRC("k"), i ? "," : "");
	snprintf(s + len, cap - len, "]}");
	return s;
}

/*
 * Every class of preflight error, through the library (err.code, err.node and a message naming
 * the node) and through `weightctl preflight FILE.json` (exit status 1, stderr naming the node);
 * none of it reads payload, makes a segment or takes a reference.
 */
static void preflight_errors_name_the_node(void **state)
{
	weightd_client *c = connect_or_fail();
	const weightd_server_info *si = weightd_server(c);
	const struct wd_recipe_limits lim = WD_RECIPE_LIMITS_DEFAULT; /* the daemon's */
	struct counters k0, k1;
	char file[400];

	(void)state;
	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	harness_path(&H, "bad.json", file, sizeof(file));
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *bc = &bad_cases[i];
		char *json = NULL, want[64], where[160], out[8192], errtext[8192];
		unsigned node = bc->node;
		weightd_unit *u = NULL;
		weightd_inflight *f = NULL;
		weightd_preflight *p = NULL;
		weightd_error err;
		int r;

		if (bc->code == WEIGHTD_E_RECIPE_TOO_DEEP) {
			json = too_deep_json();
			node = lim.max_depth; /* the first node deeper than the daemon's limit */
		} else if (bc->code == WEIGHTD_E_RECIPE_TOO_LARGE) {
			json = too_large_json(si->max_recipe_nodes);
			node = si->max_recipe_nodes; /* the first node past the limit */
		} else {
			json = strdup(bc->json);
		}
		assert_non_null(json);

		/* the library */
		r = weightd_unit_from_json(c, json, strlen(json), &u, &err);
		if (r < 0)
			fail_msg("%s: parsing failed: %s", bc->what, err.message);
		r = weightd_unit_preflight(u, &f, &err);
		if (r == 0)
			r = weightd_preflight_finish(f, &p, &err);
		weightd_preflight_free(p);
		weightd_unit_free(u);
		if (r != -bc->code || err.code != bc->code)
			fail_msg("%s: got %d (%s): %s", bc->what, r, weightd_code_name(r), err.message);
		if (err.node != node + 1)
			fail_msg("%s: err.node is %u, expected %u: %s", bc->what, err.node, node + 1,
				 err.message);
		snprintf(want, sizeof(want), "node %u (%s)", node, bc->op);
		if (!strstr(err.message, want))
			fail_msg("%s: the message does not name \"%s\": %s", bc->what, want, err.message);
		if (bc->code == WEIGHTD_E_RECIPE_TOO_LARGE)
			snprintf(where, sizeof(where), "(node %u is at $.inputs[%u] in the recipe JSON)",
				 node, node);
		else
			snprintf(where, sizeof(where), "(node %u is at %s in the recipe JSON)", node,
				 bc->path);
		if (!strstr(err.message, where))
			fail_msg("%s: the message does not say \"%s\": %s", bc->what, where, err.message);
		assert_string_equal(err.slot, "output");

		/* weightctl */
		tf_write(file, json, 0);
		{
			char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "preflight", file,
					 NULL };
			int rc = run_capture(argv, out, sizeof(out), errtext, sizeof(errtext));

			if (rc != 1)
				fail_msg("%s: weightctl preflight exited %d: %s%s", bc->what, rc, out,
					 errtext);
			if (!strstr(errtext, want) || !strstr(errtext, where))
				fail_msg("%s: weightctl's stderr does not say \"%s\" and \"%s\": %s",
					 bc->what, want, where, errtext);
			assert_string_equal(out, "");
		}
		free(json);
	}
	k1 = counters_now(c);
	assert_int_equal(k1.bytes_read, k0.bytes_read);
	assert_int_equal(k1.weights, k0.weights);
	assert_int_equal(k1.segments, k0.segments);
	assert_int_equal(k1.references, k0.references);
	assert_int_equal(k1.materializations, k0.materializations);
	weightd_close(c);
}

/* A valid preflight tells the output's dtype, shape and bytes, and reads nothing. */
static void preflight_reads_no_payload(void **state)
{
	weightd_client *c = connect_or_fail();
	weightd_unit *u = NULL;
	weightd_inflight *f = NULL;
	weightd_preflight *p = NULL;
	weightd_error err;
	struct counters k0, k1;
	char file[400], out[8192], errtext[8192];
	/* never materialized by any test: a cast of the fused q/k/v to BF16, rank 1 of 2 */
	const char *json = "{\"op\":\"select\",\"select\":{\"shard\":[0,1,2]},\"input\":{\"op\":"
			   "\"cast\",\"dtype\":\"BF16\",\"input\":{\"op\":\"concat\",\"axis\":0,"
			   "\"inputs\":[" SRC("q") "," SRC("k") "," SRC("v") "]}}}";

	(void)state;
	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	assert_int_equal(weightd_unit_from_json(c, json, strlen(json), &u, &err), 0);
	assert_int_equal(weightd_unit_preflight(u, &f, &err), 0);
	if (weightd_preflight_finish(f, &p, &err) < 0)
		fail_msg("preflight: %s", err.message);
	assert_int_equal(p->count, 1);
	assert_string_equal(p->outputs[0].dtype, "BF16");
	assert_int_equal(p->outputs[0].ndim, 2);
	assert_int_equal(p->outputs[0].shape[0], 40);
	assert_int_equal(p->outputs[0].shape[1], 32);
	assert_int_equal(p->outputs[0].nbytes, 40 * 32 * 2);
	assert_non_null(p->outputs[0].key);
	weightd_preflight_free(p);
	weightd_unit_free(u);

	harness_path(&H, "good.json", file, sizeof(file));
	tf_write(file, json, 0);
	{
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "preflight", file,
				 NULL };
		assert_int_equal(run_capture(argv, out, sizeof(out), errtext, sizeof(errtext)), 0);
		assert_non_null(strstr(out, "BF16"));
		assert_non_null(strstr(out, "[40, 32]"));
		assert_non_null(strstr(out, "2560"));
	}
	k1 = counters_now(c);
	assert_int_equal(k1.bytes_read, k0.bytes_read);
	assert_int_equal(k1.materializations, k0.materializations);
	assert_int_equal(k1.weights, k0.weights);
	assert_int_equal(k1.segments, k0.segments);
	weightd_close(c);
}

/* --- units with aliases ----------------------------------------------------------------------- */

static struct stat fd_stat(const weightd_weight *w)
{
	struct stat st;

	assert_non_null(w);
	assert_int_equal(fstat(weightd_weight_fd(w), &st), 0);
	return st;
}

/* An alias is a share of its owner: one weight, one segment, one reference; an alias of an alias
 * resolves to the owner. */
static void aliases_share_their_owner(void **state)
{
	weightd_client *c = connect_or_fail();
	const char *json =
		"{\"slots\":["
		"{\"name\":\"head\",\"alias\":\"emb16\"},"
		"{\"name\":\"emb16\",\"dtype\":\"F16\",\"shape\":[1026,64],\"recipe\":{\"op\":\"cast\","
		"\"dtype\":\"F16\",\"input\":" SRC("emb") "}},"
		"{\"name\":\"head2\",\"alias\":\"head\"},"
		"{\"name\":\"wt\",\"recipe\":{\"op\":\"transpose\",\"perm\":[1,0],\"input\":{\"op\":"
		"\"cast\",\"dtype\":\"BF16\",\"input\":" SRC("w") "}}},"
		/* the same recipe again (keys in another order): not an alias, but the same identity */
		"{\"name\":\"wt_again\",\"recipe\":{\"input\":{\"input\":" SRC("w") ",\"dtype\":"
		"\"BF16\",\"op\":\"cast\"},\"perm\":[1,0],\"op\":\"transpose\"}}"
		"]}";
	weightd_unit *u = NULL;
	weightd_inflight *f = NULL;
	weightd_preflight *p = NULL;
	weightd_error err;
	struct counters k0, k1;
	struct stat a, b, h2, w, w2;
	int fds0;

	(void)state;
	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	fds0 = count_self_fds();
	assert_int_equal(weightd_unit_from_json(c, json, strlen(json), &u, &err), 0);

	/* preflight says who is whose alias */
	assert_int_equal(weightd_unit_preflight(u, &f, &err), 0);
	if (weightd_preflight_finish(f, &p, &err) < 0)
		fail_msg("preflight: %s", err.message);
	assert_int_equal(p->count, 5);
	for (size_t i = 0; i < p->count; i++) {
		const weightd_output_info *o = &p->outputs[i];
		if (strcmp(o->name, "head") == 0 || strcmp(o->name, "head2") == 0) {
			assert_string_equal(o->alias_of, "emb16");
			assert_string_equal(o->dtype, "F16");
		} else {
			assert_string_equal(o->alias_of, "");
		}
	}
	weightd_preflight_free(p);

	assert_int_equal(weightd_unit_submit(u, &err), 0);
	if (weightd_unit_validate(u, &err) < 0)
		fail_msg("validate: %s", err.message);
	a = fd_stat(weightd_unit_weight(u, "emb16"));
	b = fd_stat(weightd_unit_weight(u, "head"));
	h2 = fd_stat(weightd_unit_weight(u, "head2"));
	w = fd_stat(weightd_unit_weight(u, "wt"));
	w2 = fd_stat(weightd_unit_weight(u, "wt_again"));
	assert_true(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
	assert_true(a.st_dev == h2.st_dev && a.st_ino == h2.st_ino);
	/* emb16 and wt are two weights packed in one segment: same object, other offsets */
	assert_true(a.st_dev == w.st_dev && a.st_ino == w.st_ino);
	assert_true(weightd_weight_offset(weightd_unit_weight(u, "emb16")) !=
		    weightd_weight_offset(weightd_unit_weight(u, "wt")));
	assert_true(weightd_weight_handle(weightd_unit_weight(u, "emb16")) !=
		    weightd_weight_handle(weightd_unit_weight(u, "wt")));
	assert_true(w.st_dev == w2.st_dev && w.st_ino == w2.st_ino);
	assert_int_equal(weightd_weight_offset(weightd_unit_weight(u, "wt")),
			 weightd_weight_offset(weightd_unit_weight(u, "wt_again")));
	assert_ptr_equal(weightd_unit_data(u, "head"), weightd_unit_data(u, "emb16"));
	assert_ptr_equal(weightd_unit_data(u, "head2"), weightd_unit_data(u, "emb16"));
	assert_ptr_equal(weightd_unit_data(u, "wt_again"), weightd_unit_data(u, "wt"));

	k1 = counters_now(c);
	assert_int_equal(k1.segments, k0.segments + 1);   /* one segment for the unit's new weights */
	assert_int_equal(k1.weights, k0.weights + 2);     /* emb16 and wt; no copy for the others */
	assert_int_equal(k1.references, k0.references + 3); /* one per entry; aliases hold none */
	assert_int_equal(count_self_fds(), fds0 + 1);        /* one fd per segment */
	weightd_unit_free(u);
	settle(c, k0.references, k0.clients);                /* all three given back */
	assert_int_equal(count_self_fds(), fds0);
	weightd_close(c);
}

/* Run a unit JSON through submit + validate and expect it refused with `code` naming `slot`. */
static void expect_unit_refused(weightd_client *c, const char *json, int code, const char *slot,
				const char *text)
{
	weightd_unit *u = NULL;
	weightd_error err;
	int r;

	r = weightd_unit_from_json(c, json, strlen(json), &u, &err);
	if (r == 0) {
		r = weightd_unit_submit(u, &err);
		if (r == 0)
			r = weightd_unit_validate(u, &err);
		assert_null(weightd_unit_weight(u, slot));
	}
	weightd_unit_free(u);
	if (r != -code)
		fail_msg("expected %s, got %s: %s", weightd_code_name(code), weightd_code_name(r),
			 err.message);
	assert_string_equal(err.slot, slot);
	if (!strstr(err.message, text))
		fail_msg("the message does not say \"%s\": %s", text, err.message);
}

/* --- a raw protocol client: what the daemon does with units the library would not send ------- */

static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(s >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", H.sock);
	assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return s;
}

/* Duplicate names, aliases naming nothing and alias cycles: refused by the library where it can
 * see them, and by the daemon for a client that sends them anyway. */
static void bad_aliases_and_names_are_refused(void **state)
{
	weightd_client *c = connect_or_fail();
	struct counters k0, k1;
	weightd_unit *u = NULL;
	weightd_error err;
	int fds0 = count_self_fds();

	(void)state;
	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	/* the library refuses a second slot of the same name at once */
	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "x", NULL, NULL, 0, NULL, &err), 0);
	assert_int_equal(weightd_unit_slot(u, "x", NULL, NULL, 0, NULL, &err),
			 -WEIGHTD_E_DUPLICATE_NAME);
	assert_string_equal(err.slot, "x");
	weightd_unit_free(u);
	{
		const char *dup = "{\"slots\":[{\"name\":\"x\",\"recipe\":" SRC("q") "},"
				  "{\"name\":\"x\",\"alias\":\"x\"}]}";
		assert_int_equal(weightd_unit_from_json(c, dup, strlen(dup), &u, &err),
				 -WEIGHTD_E_DUPLICATE_NAME);
		assert_non_null(strstr(err.message, "\"x\""));
	}

	/* the daemon refuses what the library could not know */
	expect_unit_refused(c, "{\"slots\":[{\"name\":\"q\",\"recipe\":" SRC("q") "},"
			    "{\"name\":\"qq\",\"alias\":\"nowhere\"}]}",
			    WEIGHTD_E_BAD_ALIAS, "qq", "nowhere");
	expect_unit_refused(c, "{\"slots\":[{\"name\":\"q\",\"recipe\":" SRC("q") "},"
			    "{\"name\":\"a\",\"alias\":\"b\"},{\"name\":\"b\",\"alias\":\"c\"},"
			    "{\"name\":\"c\",\"alias\":\"a\"}]}",
			    WEIGHTD_E_ALIAS_CYCLE, "a", "cycle");
	expect_unit_refused(c, "{\"slots\":[{\"name\":\"q\",\"recipe\":" SRC("q") "},"
			    "{\"name\":\"self\",\"alias\":\"self\"}]}",
			    WEIGHTD_E_ALIAS_CYCLE, "self", "cycle");

	/* a client that sends a duplicate name anyway (an entry and an alias called "x") */
	{
		int sock = raw_connect();
		Weightd__Request req = WEIGHTD__REQUEST__INIT;
		Weightd__Hello hello = WEIGHTD__HELLO__INIT;
		Weightd__Unit unit = WEIGHTD__UNIT__INIT;
		Weightd__UnitEntry e = WEIGHTD__UNIT_ENTRY__INIT, *ep = &e;
		Weightd__Alias a1 = WEIGHTD__ALIAS__INIT, *ap = &a1;
		Weightd__Recipe rec = WEIGHTD__RECIPE__INIT;
		Weightd__Node n = WEIGHTD__NODE__INIT, *np = &n;
		Weightd__Response *resp;

		hello.protocol_version = WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
		hello.client_name = "raw";
		req.id = 1;
		req.body_case = WEIGHTD__REQUEST__BODY_HELLO;
		req.hello = &hello;
		resp = it_raw_call(sock, &req, NULL, NULL);
		assert_int_equal(resp->body_case, WEIGHTD__RESPONSE__BODY_HELLO);
		weightd__response__free_unpacked(resp, NULL);

		n.op = WEIGHTD__OP__OP_SOURCE;
		n.checkpoint = "rt";
		n.tensor = "k";
		rec.n_nodes = 1;
		rec.nodes = &np;
		e.name = "x";
		e.recipe = &rec;
		a1.name = "x";
		a1.target = "x";
		unit.n_entries = 1;
		unit.entries = &ep;
		unit.n_aliases = 1;
		unit.aliases = &ap;
		req.id = 2;
		req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
		req.materialize = &unit;
		resp = it_raw_call(sock, &req, NULL, NULL);
		assert_non_null(resp->error);
		assert_int_equal(resp->error->code, WEIGHTD__ERROR_CODE__ERR_DUPLICATE_NAME);
		assert_string_equal(resp->error->slot, "x");
		weightd__response__free_unpacked(resp, NULL);

		/* and two entries of the same name */
		{
			Weightd__UnitEntry *two[2] = { &e, &e };
			unit.n_entries = 2;
			unit.entries = two;
			unit.n_aliases = 0;
			req.id = 3;
			resp = it_raw_call(sock, &req, NULL, NULL);
			assert_non_null(resp->error);
			assert_int_equal(resp->error->code, WEIGHTD__ERROR_CODE__ERR_DUPLICATE_NAME);
			weightd__response__free_unpacked(resp, NULL);
		}
		close(sock);
	}

	k1 = settle(c, k0.references, k0.clients);
	assert_int_equal(k1.bytes_read, k0.bytes_read);
	assert_int_equal(k1.segments, k0.segments);
	assert_int_equal(k1.weights, k0.weights);
	assert_int_equal(count_self_fds(), fds0);
	weightd_close(c);
}

/*
 * A bad unit publishes nothing and leaks nothing: one bad entry among good ones, and a slot whose
 * declared dtype or shape does not match its recipe. No segment appears in /dev/shm, no fd in
 * this process or the daemon, no reference, no checkpoint byte is read, and the destinations
 * are untouched.
 */
static void bad_unit_publishes_nothing(void **state)
{
	static const char *const units[] = {
		/* one unknown tensor after two good (never materialized) entries */
		"{\"slots\":["
		"{\"name\":\"a\",\"recipe\":{\"op\":\"cast\",\"dtype\":\"F64\",\"input\":" SRC("w") "}},"
		"{\"name\":\"b\",\"recipe\":{\"op\":\"cast\",\"dtype\":\"F8_E4M3\",\"input\":" SRC("q")
		"}},{\"name\":\"b2\",\"alias\":\"b\"},"
		"{\"name\":\"bad\",\"recipe\":{\"op\":\"transpose\",\"perm\":[1,0],\"input\":"
		SRC("missing") "}}]}",
		/* the last slot declares F16 but its recipe gives F32 */
		"{\"slots\":["
		"{\"name\":\"a\",\"recipe\":{\"op\":\"cast\",\"dtype\":\"F64\",\"input\":" SRC("w") "}},"
		"{\"name\":\"bad\",\"dtype\":\"F16\",\"shape\":[24,40],\"recipe\":" SRC("w") "}]}",
		/* a declared shape off by one row */
		"{\"slots\":["
		"{\"name\":\"a\",\"recipe\":{\"op\":\"cast\",\"dtype\":\"F64\",\"input\":" SRC("w") "}},"
		"{\"name\":\"bad\",\"dtype\":\"F16\",\"shape\":[47,32],\"recipe\":" SRC("q") "}]}",
	};
	static const int codes[] = { WEIGHTD_E_UNKNOWN_TENSOR, WEIGHTD_E_SLOT_MISMATCH,
				     WEIGHTD_E_SLOT_MISMATCH };
	weightd_client *c = connect_or_fail();
	struct counters k0, k1;

	(void)state;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		weightd_unit *u = NULL;
		weightd_error err;
		int fds0, r;

		k0 = settle(c, 0, 1); /* only this client, holding nothing */
		fds0 = count_self_fds();
		assert_int_equal(weightd_unit_from_json(c, units[i], strlen(units[i]), &u, &err), 0);
		assert_int_equal(weightd_unit_submit(u, &err), 0);
		r = weightd_unit_validate(u, &err);
		if (r != -codes[i])
			fail_msg("unit %zu: expected %s, got %s: %s", i, weightd_code_name(codes[i]),
				 weightd_code_name(r), err.message);
		assert_string_equal(err.slot, "bad");
		assert_non_null(strstr(err.message, "\"bad\""));
		weightd_unit_bind(u); /* does nothing: validate failed */
		for (size_t s = 0; s < weightd_unit_slot_count(u); s++) {
			assert_null(weightd_unit_weight(u, weightd_unit_slot_name(u, s)));
			assert_null(weightd_unit_data(u, weightd_unit_slot_name(u, s)));
		}
		assert_int_equal(count_self_fds(), fds0);
		k1 = counters_now(c);
		assert_int_equal(k1.segments, k0.segments);
		assert_int_equal(k1.weights, k0.weights);
		assert_int_equal(k1.references, k0.references);
		assert_int_equal(k1.bytes_read, k0.bytes_read);
		assert_int_equal(k1.materializations, k0.materializations);
		assert_int_equal(k1.daemon_fds, k0.daemon_fds);
		weightd_unit_free(u);
		assert_int_equal(count_self_fds(), fds0);
	}

	/* through the builder API, with destinations: bind after a failed validate stores nothing,
	 * and after fixing the slot the same unit binds all of them */
	{
		static const uint64_t wshape[] = { 24, 40 };
		void *const sentinel = (void *)&k0;
		void *da = sentinel, *dbad = sentinel, *dalias = sentinel;
		weightd_recipe *r = NULL;
		weightd_unit *u = NULL;
		weightd_error err;
		int fds0 = count_self_fds(), src;

		k0 = settle(c, 0, 1); /* only this client, holding nothing */
		assert_int_equal(weightd_recipe_new(&r, &err), 0);
		src = weightd_recipe_source(r, "rt", "w", NULL, &err);
		assert_int_equal(src, 0);
		assert_int_equal(weightd_recipe_cast(r, src, "F64", &err), 1);
		assert_int_equal(weightd_unit_new(c, &u, &err), 0);
		assert_true(weightd_unit_slot(u, "a", "F64", wshape, 2, &da, &err) >= 0);
		assert_true(weightd_unit_slot(u, "bad", "F16", wshape, 2, &dbad, &err) >= 0);
		assert_true(weightd_unit_slot(u, "alias", NULL, NULL, 0, &dalias, &err) >= 0);
		assert_int_equal(weightd_unit_set_recipe(u, "a", r, &err), 0);
		assert_int_equal(weightd_unit_set_tensor(u, "bad", "rt", "q", NULL, &err), 0);
		assert_int_equal(weightd_unit_set_alias(u, "alias", "a", &err), 0);
		assert_int_equal(weightd_unit_submit(u, &err), 0);
		assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_SLOT_MISMATCH);
		assert_string_equal(err.slot, "bad");
		assert_non_null(strstr(err.message, "[24, 40]"));
		weightd_unit_bind(u);
		assert_ptr_equal(da, sentinel);
		assert_ptr_equal(dbad, sentinel);
		assert_ptr_equal(dalias, sentinel);
		assert_int_equal(count_self_fds(), fds0);
		k1 = counters_now(c);
		assert_int_equal(k1.segments, k0.segments);
		assert_int_equal(k1.references, k0.references);
		assert_int_equal(k1.bytes_read, k0.bytes_read);

		/* the unit is back where it was before submit: fix the slot and go again */
		weightd_recipe_free(r);
		r = NULL;
		assert_int_equal(weightd_recipe_new(&r, &err), 0);
		assert_int_equal(weightd_recipe_source(r, "rt", "w", NULL, &err), 0);
		assert_int_equal(weightd_recipe_cast(r, 0, "F16", &err), 1);
		assert_int_equal(weightd_unit_set_recipe(u, "bad", r, &err), 0);
		assert_int_equal(weightd_unit_submit(u, &err), 0);
		if (weightd_unit_validate(u, &err) < 0)
			fail_msg("validate after the fix: %s", err.message);
		weightd_unit_bind(u);
		assert_ptr_equal(da, weightd_unit_data(u, "a"));
		assert_ptr_equal(dbad, weightd_unit_data(u, "bad"));
		assert_ptr_equal(dalias, da);
		assert_true(da != sentinel && dbad != sentinel && da != dbad);
		for (uint64_t i = 0; i < 24 * 40; i++) {
			double x;
			memcpy(&x, (const uint8_t *)da + 8 * i, 8);
			assert_true(x == pat_value(i, 5));
			check_f16(dbad, i, pat_value(i, 5));
		}
		weightd_unit_free(u);
		weightd_recipe_free(r);
		settle(c, k0.references, k0.clients);
		assert_int_equal(count_self_fds(), fds0);
	}
	weightd_close(c);
}

/*
 * A unit whose one entry fails while it is being made (its checkpoint changed on disk after
 * admission) while the others succeed: the client gets nothing and holds nothing; the entries
 * that were made stay only as the daemon's unreferenced cache (each segment a weight it knows).
 */
static void unit_failing_midway_holds_nothing(void **state)
{
	weightd_client *c = connect_or_fail();
	const char *json =
		"{\"slots\":["
		"{\"name\":\"good\",\"recipe\":{\"op\":\"cast\",\"dtype\":\"F16\",\"input\":{\"op\":"
		"\"source\",\"checkpoint\":\"rt\",\"tensor\":\"w\",\"select\":{\"range\":[0,0,7]}}}},"
		"{\"name\":\"bad\",\"recipe\":{\"op\":\"source\",\"checkpoint\":\"fragile\","
		"\"tensor\":\"w\"}}]}";
	weightd_unit *u = NULL;
	weightd_error err;
	struct counters k0, k1;
	struct timespec later[2];
	int fds0, r;

	(void)state;
	/* same size, new modification time: the file is no longer the one admitted */
	clock_gettime(CLOCK_REALTIME, &later[0]);
	later[0].tv_sec += 100;
	later[1] = later[0];
	assert_int_equal(utimensat(AT_FDCWD, fragile, later, 0), 0);

	k0 = settle(c, 0, 1); /* only this client, holding nothing */
	fds0 = count_self_fds();
	assert_int_equal(weightd_unit_from_json(c, json, strlen(json), &u, &err), 0);
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	r = weightd_unit_validate(u, &err);
	if (r != -WEIGHTD_E_SOURCE_CHANGED)
		fail_msg("expected source-changed, got %s: %s", weightd_code_name(r), err.message);
	assert_string_equal(err.slot, "bad");
	assert_null(weightd_unit_weight(u, "good"));
	assert_int_equal(count_self_fds(), fds0);
	weightd_unit_free(u);

	k1 = settle(c, k0.references, k0.clients);
	assert_int_equal(k1.segments, (int)k1.daemon_segments); /* none the daemon does not know */
	assert_true(k1.weights <= k0.weights + 1);
	assert_true(k1.daemon_segments <= k0.daemon_segments + (k1.weights - k0.weights));
	/* the daemon keeps one fd per segment, nothing for the failed request */
	for (int i = 0; i < 500 && harness_count_fds(H.pid) != k0.daemon_fds +
					      (int)(k1.daemon_segments - k0.daemon_segments); i++)
		usleep(10000);
	assert_int_equal(harness_count_fds(H.pid),
			 k0.daemon_fds + (int)(k1.daemon_segments - k0.daemon_segments));
	assert_int_equal(count_self_fds(), fds0);
	weightd_close(c);
}

/* --- weightctl get --recipe -------------------------------------------------------------------- */

static void sha256_hex(const uint8_t *data, size_t len, char out[65])
{
	uint8_t md[32];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	assert_non_null(ctx);
	assert_int_equal(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL), 1);
	assert_int_equal(EVP_DigestUpdate(ctx, data, len), 1);
	assert_int_equal(EVP_DigestFinal_ex(ctx, md, &mdlen), 1);
	EVP_MD_CTX_free(ctx);
	assert_int_equal(mdlen, 32);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* `weightctl get --recipe FILE.json --out F --sha256` writes the recipe's bytes to F and prints
 * their XXH3-128 digest (the daemon's, checked) and SHA-256; all agree with what this test
 * computes itself. */
static void weightctl_get_recipe_writes_and_hashes(void **state)
{
	char file[400], outfile[400], out[8192], errtext[8192], sha[65], needle_x[100];
	uint64_t r0, r1;
	uint32_t *want;
	uint8_t *bytes;
	size_t len;

	(void)state;
	tp_split(EMB_ROWS, 3, 4, &r0, &r1);
	harness_path(&H, "get.json", file, sizeof(file));
	harness_path(&H, "get.bin", outfile, sizeof(outfile));
	{
		char json[512];
		cast_shard_json(json, sizeof(json), 3);
		tf_write(file, json, 0);
	}
	{
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "get", "--recipe",
				 file, "--out", outfile, "--sha256", NULL };
		int rc = run_capture(argv, out, sizeof(out), errtext, sizeof(errtext));
		if (rc != 0)
			fail_msg("weightctl get --recipe exited %d: %s", rc, errtext);
	}
	bytes = tf_read(outfile, &len);
	assert_int_equal(len, (r1 - r0) * EMB_COLS * 4);
	want = malloc(len);
	assert_non_null(want);
	expect_emb_f32(r0, r1, want);
	assert_memory_equal(bytes, want, len);
	sha256_hex(bytes, len, sha);
	if (!strstr(out, sha))
		fail_msg("weightctl printed no SHA-256 %s: %s", sha, out);
	{
		XXH128_canonical_t c;
		char xx[40];
		assert_true(len <= WEIGHTD_DIGEST_CHUNK);   /* one chunk: the plain hash */
		XXH128_canonicalFromHash(&c, XXH3_128bits(bytes, len));
		for (int i = 0; i < 16; i++)
			snprintf(xx + 2 * i, 3, "%02x", c.digest[i]);
		snprintf(needle_x, sizeof(needle_x), "xxh3-128:%s (verified)", xx);
		if (!strstr(out, needle_x))
			fail_msg("weightctl printed no %s: %s", needle_x, out);
	}
	assert_non_null(strstr(out, "F32"));
	free(want);
	free(bytes);

	/* the same through --json */
	{
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "--json", "get",
				 "--recipe", file, "--sha256", NULL };
		char needle[100];
		assert_int_equal(run_capture(argv, out, sizeof(out), errtext, sizeof(errtext)), 0);
		snprintf(needle, sizeof(needle), "\"sha256\": \"%s\"", sha);
		if (!strstr(out, needle))
			fail_msg("weightctl --json printed no %s: %s", needle, out);
	}
	/* and a bad recipe fails with the node named, writing no file */
	{
		char bad_out[400];
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "get", "--recipe",
				 file, "--out", bad_out, NULL };
		struct stat st;

		harness_path(&H, "never.bin", bad_out, sizeof(bad_out));
		tf_write(file, "{\"op\":\"transpose\",\"perm\":[0,0],\"input\":" SRC("w") "}", 0);
		assert_int_equal(run_capture(argv, out, sizeof(out), errtext, sizeof(errtext)), 1);
		assert_non_null(strstr(errtext, "node 1 (transpose)"));
		assert_int_equal(stat(bad_out, &st), -1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_recipe_one_segment_read_once),
		cmocka_unit_test(concurrent_requests_join_one_materialization),
		cmocka_unit_test(four_ranks_concatenate_to_the_full_cast),
		cmocka_unit_test(structural_ops_match_reference),
		cmocka_unit_test(preflight_errors_name_the_node),
		cmocka_unit_test(preflight_reads_no_payload),
		cmocka_unit_test(aliases_share_their_owner),
		cmocka_unit_test(bad_aliases_and_names_are_refused),
		cmocka_unit_test(bad_unit_publishes_nothing),
		cmocka_unit_test(unit_failing_midway_holds_nothing),
		cmocka_unit_test(weightctl_get_recipe_writes_and_hashes),
	};

	signal(SIGPIPE, SIG_IGN); /* a child that already left must not kill the test */

	alarm(240); /* watchdog: a hung daemon fails the test instead of stalling CI */
	return cmocka_run_group_tests(tests, setup, fixture_cleanup);
}
