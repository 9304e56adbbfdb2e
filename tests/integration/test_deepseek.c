/* SPDX-License-Identifier: Apache-2.0 */
/* test_deepseek.c - a checkpoint with DeepSeek-V3's tensor table (91,991 tensors in 163 shards,
 * tests/common/deepseek.h) served by a real weightd under LimitNOFILE=4096 to clients with
 * `ulimit -n 1024`: the whole model as one unit, a second process, kill -9 and a restart, and a
 * tensor-parallel rank's fused, dequantized experts. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>

#include "deepseek.h"
#include "fixture.h"

#define CLIENT_NOFILE 1024
/* "At most a few hundred" fds and mappings for the whole model in one client. */
#define MAX_HELD 300

/* --- the generator itself ------------------------------------------------------------------- */

/*
 * The table is the published one: 91,991 tensors whose bytes at the published dimensions add up
 * to 688,574,839,360 (the sum over the published headers), in 163 shards, with a few entries
 * checked by name, dtype and shape; and what ds_write put in the files is what the content rule
 * says (read back here with stdio, independently of weightd).
 */
static void table_is_deepseek_v3s(void **state)
{
	static const struct {
		const char *name;
		enum ds_kind kind;
		uint64_t r, c;
	} want[] = {
		{ "model.embed_tokens.weight", DS_BF16, 1010, 56 },
		{ "model.layers.0.mlp.gate_proj.weight", DS_FP8, 144, 56 },
		{ "model.layers.0.mlp.gate_proj.weight_scale_inv", DS_SCALE, 9, 4 },
		{ "model.layers.2.self_attn.kv_a_proj_with_mqa.weight", DS_FP8, 8, 56 },
		{ "model.layers.3.mlp.gate.e_score_correction_bias", DS_F32, 256, 0 },
		{ "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv", DS_SCALE, 4, 1 },
		{ "model.layers.61.mlp.shared_experts.up_proj.weight", DS_FP8, 16, 56 },
		{ "model.layers.61.eh_proj.weight", DS_BF16, 56, 112 },
		{ "lm_head.weight", DS_BF16, 1010, 56 },
	};
	char path[600], file[64];
	FILE *f;

	assert_int_equal(DS.n, 91991);
	assert_true(DS.real_bytes == 688574839360ull);
	assert_true(DS.bytes < 64 * MiB);
	for (uint32_t s = 0; s < DS_SHARDS; s++)
		assert_true(DS.shard_first[s] < DS.shard_first[s + 1]);
	assert_int_equal(ds_find(&DS, "model.layers.62.input_layernorm.weight"), -1);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		long k = ds_find(&DS, want[i].name);
		assert_true(k >= 0);
		assert_int_equal(DS.t[k].kind, want[i].kind);
		assert_int_equal(DS.t[k].shape[0], want[i].r);
		assert_int_equal(DS.t[k].shape[1], want[i].c);
	}
	assert_int_equal(DS.t[DS.n - 1].shard, DS_SHARDS - 1);

	/* the last tensor's first bytes, read from its file */
	ds_shard_name(DS.t[DS.n - 1].shard, file, sizeof(file));
	snprintf(path, sizeof(path), "%s/%s", DS_DIR, file);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)DS.t[DS.n - 1].offset, SEEK_SET), 0);
	for (uint64_t k = 0; k < 64; k++) {
		int ch = fgetc(f);
		float v = ds_plain_value(DS.t[DS.n - 1].seed, k / 2);
		uint32_t b;
		memcpy(&b, &v, 4);
		assert_int_equal(ch, (int)((b >> (16 + 8 * (k % 2))) & 0xff));
	}
	fclose(f);
}

/* --- one client process binding the whole model ------------------------------------------ */

#define N_INO 4

/* What a client child reports to the test through a pipe (one write, < PIPE_BUF). */
struct report {
	int rc;                  /* 0, or the failing call's return value (or -1 for a check) */
	char msg[1024];
	uint64_t unit_read;
	int fds_before, fds_after, maps_before, maps_after;
	uint64_t full_checked;   /* tensors whose every byte was compared with the content rule */
	uint64_t ino[N_INO];     /* inodes behind a few weights: the same segments, or not */
};

static const size_t ino_of[N_INO] = { 0, 1, 40000, DS_TENSORS - 1 };

/* Compare every `every`-th tensor's bytes with the content rule, and sampled bytes (first,
 * middle, last 16) of every tensor with the shard files, read with pread one file at a time. */
static void check_bytes(struct report *r, void *const *ptrs, size_t every)
{
	for (size_t i = 0; i < DS.n && !r->rc; i++) {
		const struct ds_tensor *t = &DS.t[i];
		const uint8_t *p = ptrs[i];

		if (!p || ((uintptr_t)p & 63)) {
			it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "%s is bound at %p: not 64-byte aligned", t->name, (const void *)p);
			return;
		}
		if (i % every)
			continue;
		for (uint64_t k = 0; k < t->nbytes; k++)
			if (p[k] != ds_byte(t, k)) {
				it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "%s: byte %llu is 0x%02x, the checkpoint has 0x%02x", t->name,
					 (unsigned long long)k, p[k], ds_byte(t, k));
				return;
			}
		r->full_checked++;
	}
	for (uint32_t s = 0; s < DS_SHARDS && !r->rc; s++) {
		char path[600], file[64];
		int fd;

		ds_shard_name(s, file, sizeof(file));
		snprintf(path, sizeof(path), "%s/%s", DS_DIR, file);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "open %s: %s", path, strerror(errno));
			return;
		}
		for (size_t i = DS.shard_first[s]; i < DS.shard_first[s + 1] && !r->rc; i++) {
			const struct ds_tensor *t = &DS.t[i];
			uint64_t n = t->nbytes, at[3] = { 0, n / 2, n > 16 ? n - 16 : 0 };
			uint8_t f[16];

			for (int j = 0; j < 3; j++) {
				size_t len = n - at[j] < 16 ? (size_t)(n - at[j]) : 16;
				if (pread(fd, f, len, (off_t)(t->offset + at[j])) != (ssize_t)len ||
				    memcmp(f, (const uint8_t *)ptrs[i] + at[j], len) != 0)
					it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "%s: bytes %llu..%llu differ from %s", t->name,
						 (unsigned long long)at[j], (unsigned long long)(at[j] + len), file);
			}
		}
		close(fd);
	}
}

/*
 * The client: RLIMIT_NOFILE 1024, every tensor as one slot of one unit (declared dtype and
 * shape), submit, validate, bind; count the fds and mappings the unit added; check the bytes.
 * Reports, then holds the unit until the test writes a byte (or closes the pipe).
 */
static void bind_all_child(int in, int out, size_t every)
{
	struct rlimit rl = { CLIENT_NOFILE, CLIENT_NOFILE };
	struct report r = { 0 };
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err = { 0 };
	void **ptrs = calloc(DS.n, sizeof(*ptrs));
	char x;
	int rc = 0;

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || !ptrs)
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), 0, "setrlimit/calloc: %s", strerror(errno));
	if (!r.rc && (rc = weightd_connect(H.sock, "deepseek", &c, &err)) == 0)
		rc = weightd_unit_new(c, &u, &err);
	for (size_t i = 0; rc >= 0 && !r.rc && i < DS.n; i++) {
		const struct ds_tensor *t = &DS.t[i];
		rc = weightd_unit_slot(u, t->name, ds_dtype(t->kind), t->shape, (size_t)t->ndim, &ptrs[i],
				       &err);
		if (rc >= 0)
			rc = weightd_unit_set_tensor(u, t->name, "ds", t->name, NULL, &err);
	}
	r.fds_before = it_count_dir("/proc/self/fd");
	r.maps_before = it_count_lines("/proc/self/maps");
	if (rc >= 0)
		rc = weightd_unit_submit(u, &err);
	if (rc >= 0)
		rc = weightd_unit_validate(u, &err);
	if (rc < 0)
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), rc, "%s (%s)", err.message, weightd_code_name(rc));
	if (!r.rc) {
		weightd_unit_bind(u);
		r.fds_after = it_count_dir("/proc/self/fd");
		r.maps_after = it_count_lines("/proc/self/maps");
		r.unit_read = weightd_unit_bytes_read(u);
		for (int k = 0; k < N_INO; k++) {
			struct stat sb;
			const weightd_weight *w = weightd_unit_weight(u, DS.t[ino_of[k]].name);
			if (w && fstat(weightd_weight_fd(w), &sb) == 0)
				r.ino[k] = sb.st_ino;
		}
		check_bytes(&r, ptrs, every);
	}
	if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
	if (read(in, &x, 1) < 0)
		_exit(4);
	weightd_unit_free(u);
	weightd_close(c);
	free(ptrs);
	_exit(0);
}

struct kid {
	pid_t pid;
	int to, from;
	struct report r;
};

/* Fork a binding client and wait for its report; fail the test with its message. */
static void kid_bind(struct kid *k, size_t every)
{
	k->pid = it_fork_piped(&k->to, &k->from);
	if (k->pid == 0)
		bind_all_child(k->to, k->from, every);
	if (read(k->from, &k->r, sizeof(k->r)) != (ssize_t)sizeof(k->r))
		fail_msg("the client process died before it reported");
	if (k->r.rc) {
		harness_dump_log(&H);
		fail_msg("binding all %d tensors with ulimit -n %d: %s", DS_TENSORS, CLIENT_NOFILE,
			 k->r.msg);
	}
	print_message("client %d: unit read %llu bytes; it holds %d more fds and %d more mappings "
		      "for %d weights; %llu tensors compared in full\n", (int)k->pid,
		      (unsigned long long)k->r.unit_read, k->r.fds_after - k->r.fds_before,
		      k->r.maps_after - k->r.maps_before, DS_TENSORS,
		      (unsigned long long)k->r.full_checked);
	assert_true(k->r.fds_after - k->r.fds_before <= MAX_HELD);
	assert_true(k->r.maps_after - k->r.maps_before <= MAX_HELD);
}

static void kid_done(struct kid *k)
{
	/* a byte, not EOF: a client forked later holds a copy of this pipe's write end */
	assert_int_equal(write(k->to, "q", 1), 1);
	close(k->to);
	close(k->from);
	it_wait_child_ok(k->pid);
}

/* The daemon's settled fd count with no client but the one asking (connected, served). */
static int quiet_fds(uint64_t refs)
{
	weightd_client *c;
	weightd_status *st = it_quiet_with(&H, refs, 0, 20000, &c);
	int fds = harness_settled_fds(&H);

	weightd_status_free(st);
	weightd_close(c);
	return fds;
}

/*
 * The whole model as one unit, three times: a first client reads everything once; a second,
 * while the first still holds it, reads nothing and maps the same segments; after kill -9 and a
 * restart, a third is served from the re-adopted segments with zero rereads. The daemon's fds
 * and segments end where they started.
 */
static void whole_model_as_one_unit(void **state)
{
	struct kid a, b, c;
	weightd_status *st;
	int fds0, segs0, dfds;
	int64_t t0 = it_now_ms();

	fixture_ds_start(NULL);
	st = it_status_of(&H);
	assert_non_null(it_source(st, "ds"));
	assert_string_equal(it_source(st, "ds")->state, "ready");
	assert_int_equal(it_source(st, "ds")->tensors, DS_TENSORS);
	assert_int_equal(it_source(st, "ds")->files, DS_SHARDS);
	assert_int_equal(it_source(st, "ds")->bytes, DS.bytes);
	weightd_status_free(st);

	kid_bind(&a, 1);
	assert_int_equal(a.r.unit_read, DS.bytes); /* every byte read, each once */
	/* the daemon's own fds grow with its segments and checkpoint files, not with weights */
	dfds = harness_count_fds(H.pid);
	print_message("first bind: %lld ms; the daemon holds %d fds for %d weights in %d files\n",
		      (long long)(it_now_ms() - t0), dfds, DS_TENSORS, DS_SHARDS);
	assert_true(dfds <= DS_SHARDS + MAX_HELD);

	kid_bind(&b, 97);
	assert_int_equal(b.r.unit_read, 0);
	for (int k = 0; k < N_INO; k++)
		assert_int_equal(b.r.ino[k], a.r.ino[k]);
	st = it_status_of(&H);
	assert_int_equal(st->bytes_read, DS.bytes);
	assert_int_equal(st->weights, DS_TENSORS);
	weightd_status_free(st);
	kid_done(&a);
	kid_done(&b);

	harness_kill(&H);
	fixture_ds_start(NULL);
	fds0 = quiet_fds(0);
	segs0 = harness_segments(&H);
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, DS_TENSORS);
	assert_int_equal(st->weights, DS_TENSORS);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);

	kid_bind(&c, 97);
	assert_int_equal(c.r.unit_read, 0);
	for (int k = 0; k < N_INO; k++)
		assert_int_equal(c.r.ino[k], a.r.ino[k]);
	kid_done(&c);
	st = it_status_of(&H);
	assert_int_equal(st->bytes_read, 0);
	assert_int_equal(st->readoptions, DS_TENSORS);
	weightd_status_free(st);

	/* nothing leaked: the same fds and segments as right after the restart */
	assert_int_equal(quiet_fds(0), fds0);
	assert_int_equal(harness_segments(&H), segs0);
	print_message("whole test: %lld ms\n", (long long)(it_now_ms() - t0));
}

/* --- a tensor-parallel rank's fused, dequantized experts -------------------------------------- */

#define RANK 3
#define WORLD 8
static const int moe_layers[] = { 3, DS_LAYERS };

/* F8_E4M3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities) to float, from
 * the format's definition. The generator never writes NaN (S.1111.111). */
static float e4m3(uint8_t b)
{
	int e = (b >> 3) & 0xf, m = b & 7;
	float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);

	return (b & 0x80) ? -v : v;
}

/* float to BF16, rounded to nearest, ties to even (finite inputs). */
static uint16_t bf16_rne(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The expected BF16 of dequant(w)[row][col] with w's 128x128-style block scale (tiny: 16x16). */
static uint16_t want_dq(const struct ds_tensor *w, uint64_t row, uint64_t col)
{
	const struct ds_tensor *s = &DS.t[w->scale];
	uint64_t bl = DS.dims.block;
	float scale = ds_scale_value(s->seed, (row / bl) * s->shape[1] + col / bl);

	return bf16_rne(e4m3(ds_fp8_byte(w->seed, row * w->shape[1] + col)) * scale);
}

static const struct ds_tensor *expert(int layer, int e, const char *proj)
{
	char name[96];
	long i;

	snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%d.%s.weight", layer, e, proj);
	i = ds_find(&DS, name);
	if (i < 0)
		fail_msg("the table has no %s", name);
	return &DS.t[i];
}

/* {"op":"select","select":{"shard":[axis,RANK,WORLD]},"input":dequant_block(w, w's scale)} */
static void json_dq_shard(struct stw_str *j, const struct ds_tensor *w, int axis)
{
	stw_str_addf(j, "{\"op\":\"select\",\"select\":{\"shard\":[%d,%d,%d]},\"input\":", axis, RANK, WORLD);
	stw_str_addf(j, "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[%llu,%llu],",
		     (unsigned long long)DS.dims.block, (unsigned long long)DS.dims.block);
	stw_str_addf(j, "\"input\":{\"op\":\"source\",\"checkpoint\":\"ds\",\"tensor\":");
	stw_str_json(j, w->name);
	stw_str_addf(j, "},\"scale\":{\"op\":\"source\",\"checkpoint\":\"ds\",\"tensor\":");
	stw_str_json(j, DS.t[w->scale].name);
	stw_str_add(j, "}}}", 3);
}

/*
 * The unit a BF16 engine at tensor-parallel rank 3 of 8 declares for the MoE layers in
 * moe_layers, as vLLM's FusedMoE keeps them: w13 = stack over the experts of
 * concat(shard(gate), shard(up)) along the intermediate axis, [E, 2I/8, H], and
 * w2 = stack(shard(down) along its intermediate axis), [E, H, I/8]; every FP8 block dequantized.
 */
static char *fused_unit_json(void)
{
	const struct ds_dims *d = &DS.dims;
	struct stw_str j = { 0 };

	stw_str_add(&j, "{\"slots\":[", 10);
	for (size_t l = 0; l < sizeof(moe_layers) / sizeof(moe_layers[0]); l++) {
		int L = moe_layers[l];
		stw_str_addf(&j, "%s{\"name\":\"layers.%d.w13\",\"dtype\":\"BF16\",", l ? "," : "", L);
		stw_str_addf(&j, "\"shape\":[%d,%llu,%llu],", DS_EXPERTS,
			     (unsigned long long)(2 * d->moe_inter / WORLD), (unsigned long long)d->hidden);
		stw_str_addf(&j, "\"recipe\":{\"op\":\"stack\",\"axis\":0,\"inputs\":[");
		for (int e = 0; e < DS_EXPERTS; e++) {
			stw_str_addf(&j, "%s{\"op\":\"concat\",\"axis\":0,\"inputs\":[", e ? "," : "");
			json_dq_shard(&j, expert(L, e, "gate_proj"), 0);
			stw_str_add(&j, ",", 1);
			json_dq_shard(&j, expert(L, e, "up_proj"), 0);
			stw_str_add(&j, "]}", 2);
		}
		stw_str_add(&j, "]}}", 3);
		stw_str_addf(&j, ",{\"name\":\"layers.%d.w2\",\"dtype\":\"BF16\",", L);
		stw_str_addf(&j, "\"shape\":[%d,%llu,%llu],", DS_EXPERTS, (unsigned long long)d->hidden,
			     (unsigned long long)(d->moe_inter / WORLD));
		stw_str_addf(&j, "\"recipe\":{\"op\":\"stack\",\"axis\":0,\"inputs\":[");
		for (int e = 0; e < DS_EXPERTS; e++) {
			if (e)
				stw_str_add(&j, ",", 1);
			json_dq_shard(&j, expert(L, e, "down_proj"), 1);
		}
		stw_str_add(&j, "]}}", 3);
	}
	stw_str_add(&j, "]}", 2);
	if (j.oom)
		fail_msg("out of memory");
	return j.p;
}

/* Compare one layer's w13 and w2 with values computed here from the content rule. */
static void check_fused(struct report *r, int L, const uint16_t *w13, const uint16_t *w2)
{
	const struct ds_dims *d = &DS.dims;
	uint64_t rows = d->moe_inter / WORLD, first = RANK * rows; /* 16 divides by 8: even shards */

	for (int e = 0; e < DS_EXPERTS && !r->rc; e++) {
		const struct ds_tensor *g = expert(L, e, "gate_proj"), *u = expert(L, e, "up_proj"),
				       *dn = expert(L, e, "down_proj");
		for (uint64_t j = 0; j < 2 * rows; j++)
			for (uint64_t h = 0; h < d->hidden; h++) {
				uint16_t want = j < rows ? want_dq(g, first + j, h) : want_dq(u, first + j - rows, h);
				uint16_t got = w13[((uint64_t)e * 2 * rows + j) * d->hidden + h];
				if (got != want) {
					it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "layer %d w13[%d][%llu][%llu] is 0x%04x, expected 0x%04x", L,
						 e, (unsigned long long)j, (unsigned long long)h, got, want);
					return;
				}
			}
		for (uint64_t h = 0; h < d->hidden; h++)
			for (uint64_t j = 0; j < rows; j++) {
				uint16_t want = want_dq(dn, h, first + j);
				uint16_t got = w2[((uint64_t)e * d->hidden + h) * rows + j];
				if (got != want) {
					it_report_fail(&r->rc, r->msg, sizeof(r->msg), 0, "layer %d w2[%d][%llu][%llu] is 0x%04x, expected 0x%04x", L,
						 e, (unsigned long long)h, (unsigned long long)j, got, want);
					return;
				}
			}
	}
}

/* The rank's client: ulimit -n 1024, the fused unit from JSON, bound and checked; then the same
 * unit again, which must read nothing. Reports like bind_all_child; `full_checked` counts
 * layers checked. */
static void fused_child(int out, const char *json)
{
	struct rlimit rl = { CLIENT_NOFILE, CLIENT_NOFILE };
	struct report r = { 0 };
	weightd_client *c = NULL;
	weightd_unit *u = NULL, *u2 = NULL;
	weightd_error err = { 0 };
	int rc = setrlimit(RLIMIT_NOFILE, &rl);

	if (rc == 0)
		rc = weightd_connect(H.sock, "rank3", &c, &err);
	if (rc == 0)
		rc = weightd_unit_from_json(c, json, strlen(json), &u, &err);
	if (rc == 0)
		rc = weightd_unit_submit(u, &err);
	if (rc == 0)
		rc = weightd_unit_validate(u, &err);
	if (rc < 0)
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), rc, "%s (%s)", err.message, weightd_code_name(rc));
	if (!r.rc) {
		weightd_unit_bind(u);
		r.unit_read = weightd_unit_bytes_read(u);
		for (size_t l = 0; l < sizeof(moe_layers) / sizeof(moe_layers[0]) && !r.rc; l++) {
			char n13[32], n2[32];
			snprintf(n13, sizeof(n13), "layers.%d.w13", moe_layers[l]);
			snprintf(n2, sizeof(n2), "layers.%d.w2", moe_layers[l]);
			check_fused(&r, moe_layers[l], weightd_unit_data(u, n13), weightd_unit_data(u, n2));
			r.full_checked += !r.rc;
		}
	}
	/* computed once for every process: the same recipes again read nothing */
	if (!r.rc && ((rc = weightd_unit_from_json(c, json, strlen(json), &u2, &err)) < 0 ||
		      (rc = weightd_unit_submit(u2, &err)) < 0 || (rc = weightd_unit_validate(u2, &err)) < 0))
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), rc, "again: %s", err.message);
	if (!r.rc && weightd_unit_bytes_read(u2) != 0)
		it_report_fail(&r.rc, r.msg, sizeof(r.msg), 0, "the same fused unit again read %llu bytes",
			 (unsigned long long)weightd_unit_bytes_read(u2));
	if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
	weightd_unit_free(u2);
	weightd_unit_free(u);
	weightd_close(c);
	_exit(0);
}

static void rank3_binds_fused_dequantized_experts(void **state)
{
	char *json;
	struct report r;
	int from[2];
	pid_t pid;

	json = fused_unit_json();
	fixture_ds_start(NULL);
	assert_int_equal(pipe(from), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(from[0]);
		fused_child(from[1], json);
	}
	close(from[1]);
	if (read(from[0], &r, sizeof(r)) != (ssize_t)sizeof(r))
		fail_msg("the rank's client died before it reported");
	close(from[0]);
	it_wait_child_ok(pid);
	free(json);
	if (r.rc) {
		harness_dump_log(&H);
		fail_msg("rank %d of %d, fused dequantized experts: %s", RANK, WORLD, r.msg);
	}
	print_message("rank %d of %d: %llu layers of fused BF16 experts checked; %llu checkpoint "
		      "bytes read\n", RANK, WORLD, (unsigned long long)r.full_checked,
		      (unsigned long long)r.unit_read);
	assert_int_equal(r.full_checked, sizeof(moe_layers) / sizeof(moe_layers[0]));
	/* only the rank's rows and columns are read (and the scales they need): never the whole
	 * experts, which are WORLD times as large */
	{
		const struct ds_dims *d = &DS.dims;
		uint64_t n_layers = sizeof(moe_layers) / sizeof(moe_layers[0]);
		uint64_t data = n_layers * DS_EXPERTS * 3 * (d->moe_inter / WORLD) * d->hidden;
		uint64_t scales = 0;
		for (int e = 0; e < DS_EXPERTS; e++)
			scales += DS.t[expert(DS_LAYERS, e, "gate_proj")->scale].nbytes * 3 *
				  n_layers;
		assert_true(r.unit_read >= data);
		assert_true(r.unit_read <= data + scales);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(table_is_deepseek_v3s, fixture_ds_write,
						fixture_cleanup),
		cmocka_unit_test_setup_teardown(whole_model_as_one_unit, fixture_ds_write,
						fixture_cleanup),
		cmocka_unit_test_setup_teardown(rank3_binds_fused_dequantized_experts,
						fixture_ds_write, fixture_cleanup),
	};

	if (getenv("WD_TEST_FILTER"))
		cmocka_set_test_filter(getenv("WD_TEST_FILTER"));
	alarm(290); /* watchdog: a hung daemon fails the test instead of stalling CI */
	return cmocka_run_group_tests(tests, fixture_ds_table, fixture_ds_free);
}
