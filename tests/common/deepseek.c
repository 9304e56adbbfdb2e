/* SPDX-License-Identifier: Apache-2.0 */
/* deepseek.c - DeepSeek-V3's tensor table at any size, its content function, and the writer of
 * its sharded safetensors checkpoint (the layout and content rules are in deepseek.h). */
#include "deepseek.h"

#include <stdio.h>
#include <sys/stat.h>

#include "harness.h"
#include "weightd/client.h"

const struct ds_dims ds_real = { 7168, 2048, 18432, 1536, 512, 128, 128, 64, 128, 129280, 128 };
const struct ds_dims ds_tiny = { 56, 16, 144, 12, 4, 4, 8, 4, 8, 1010, 16 };

const char *ds_dtype(enum ds_kind k)
{
	switch (k) {
	case DS_FP8: return "F8_E4M3";
	case DS_BF16: return "BF16";
	default: return "F32";
	}
}

static size_t ds_elem_size(enum ds_kind k)
{
	return k == DS_FP8 ? 1 : k == DS_BF16 ? 2 : 4;
}

void ds_shard_name(uint32_t shard, char *out, size_t cap)
{
	snprintf(out, cap, "model-%05u-of-%06u.safetensors", shard + 1, (unsigned)DS_SHARDS);
}

static uint32_t ds_fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 16777619u;
	}
	return h;
}

static uint32_t ds_mix32(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

static uint32_t ds_r(uint32_t seed, uint64_t k)
{
	return ds_mix32(seed ^ (uint32_t)(k * 0x9e3779b9u));
}

uint8_t ds_fp8_byte(uint32_t seed, uint64_t k)
{
	uint8_t b = (uint8_t)(ds_r(seed, k) >> 24);

	return (b & 0x7f) == 0x7f ? (uint8_t)(b - 1) : b;
}

float ds_scale_value(uint32_t seed, uint64_t k)
{
	return (float)(ds_r(seed, k) % 61u + 1u) / 512.0f;
}

float ds_plain_value(uint32_t seed, uint64_t k)
{
	return (float)((int)(ds_r(seed, k) % 251u) - 125) / 1024.0f;
}

float ds_value(const struct ds_tensor *t, uint64_t k)
{
	return t->kind == DS_SCALE ? ds_scale_value(t->seed, k) : ds_plain_value(t->seed, k);
}

uint8_t ds_byte(const struct ds_tensor *t, uint64_t off)
{
	size_t es = ds_elem_size(t->kind);
	float v;
	uint32_t b;

	if (t->kind == DS_FP8)
		return ds_fp8_byte(t->seed, off);
	v = ds_value(t, off / es);
	memcpy(&b, &v, 4);
	if (t->kind == DS_BF16)
		b >>= 16; /* exact: every value has at most 8 significant bits */
	return (uint8_t)(b >> (8 * (off % es)));
}

void ds_fill(const struct ds_tensor *t, uint64_t off, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = ds_byte(t, off + i);
}

struct ds_build {
	struct ds_ckpt *ck;
	const struct ds_dims *d;
	bool real; /* this pass records published sizes only */
	size_t i;
	bool overflow;
};

static struct ds_tensor *ds_next(struct ds_build *b, const char *name, enum ds_kind kind, int ndim,
				 uint64_t r, uint64_t c)
{
	struct ds_tensor *t;
	uint64_t nbytes = r * (ndim == 2 ? c : 1) * ds_elem_size(kind);

	if (b->i >= DS_TENSORS) {
		b->overflow = true;
		return NULL;
	}
	t = &b->ck->t[b->i++];
	if (b->real) {
		t->real_nbytes = nbytes;
		return t;
	}
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->kind = kind;
	t->ndim = ndim;
	t->shape[0] = r;
	t->shape[1] = ndim == 2 ? c : 0;
	t->nbytes = nbytes;
	t->seed = ds_fnv1a(t->name);
	t->scale = -1;
	return t;
}

/* A vector of n elements (BF16 or F32): "model.layers.<layer>.<what>". */
static void ds_vec(struct ds_build *b, enum ds_kind kind, uint64_t n, int layer, const char *what)
{
	char name[96];

	snprintf(name, sizeof(name), "model.layers.%d.%s", layer, what);
	ds_next(b, name, kind, 1, n, 0);
}

/* A BF16 matrix. */
static void ds_bf16(struct ds_build *b, uint64_t r, uint64_t c, const char *name)
{
	ds_next(b, name, DS_BF16, 2, r, c);
}

/* An F8_E4M3 matrix "<stem>.weight" and its "<stem>.weight_scale_inv". */
static void ds_fp8(struct ds_build *b, uint64_t r, uint64_t c, const char *stem)
{
	char name[96];
	uint64_t bl = b->d->block;
	struct ds_tensor *w;
	size_t wi = b->i;

	snprintf(name, sizeof(name), "%s.weight", stem);
	w = ds_next(b, name, DS_FP8, 2, r, c);
	snprintf(name, sizeof(name), "%s.weight_scale_inv", stem);
	ds_next(b, name, DS_SCALE, 2, (r + bl - 1) / bl, (c + bl - 1) / bl);
	if (w && !b->real && !b->overflow)
		w->scale = (int32_t)(wi + 1);
}

/* One decoder layer: attention, then the dense MLP or the MoE block, then the two norms. */
static void ds_layer(struct ds_build *b, int L)
{
	const struct ds_dims *d = b->d;
	char stem[64];

#define DS_STEM(...) (snprintf(stem, sizeof(stem), __VA_ARGS__), stem)
	ds_fp8(b, d->q_lora, d->hidden, DS_STEM("model.layers.%d.self_attn.q_a_proj", L));
	ds_vec(b, DS_BF16, d->q_lora, L, "self_attn.q_a_layernorm.weight");
	ds_fp8(b, d->heads * (d->nope + d->rope), d->q_lora,
	       DS_STEM("model.layers.%d.self_attn.q_b_proj", L));
	ds_fp8(b, d->kv_lora + d->rope, d->hidden,
	       DS_STEM("model.layers.%d.self_attn.kv_a_proj_with_mqa", L));
	ds_vec(b, DS_BF16, d->kv_lora, L, "self_attn.kv_a_layernorm.weight");
	ds_fp8(b, d->heads * (d->nope + d->v), d->kv_lora,
	       DS_STEM("model.layers.%d.self_attn.kv_b_proj", L));
	ds_fp8(b, d->hidden, d->heads * d->v, DS_STEM("model.layers.%d.self_attn.o_proj", L));
	if (L < DS_DENSE_LAYERS) {
		ds_fp8(b, d->dense_inter, d->hidden, DS_STEM("model.layers.%d.mlp.gate_proj", L));
		ds_fp8(b, d->dense_inter, d->hidden, DS_STEM("model.layers.%d.mlp.up_proj", L));
		ds_fp8(b, d->hidden, d->dense_inter, DS_STEM("model.layers.%d.mlp.down_proj", L));
	} else {
		ds_bf16(b, DS_EXPERTS, d->hidden, DS_STEM("model.layers.%d.mlp.gate.weight", L));
		ds_vec(b, DS_F32, DS_EXPERTS, L, "mlp.gate.e_score_correction_bias");
		for (int e = 0; e < DS_EXPERTS; e++) {
			ds_fp8(b, d->moe_inter, d->hidden,
			       DS_STEM("model.layers.%d.mlp.experts.%d.gate_proj", L, e));
			ds_fp8(b, d->moe_inter, d->hidden,
			       DS_STEM("model.layers.%d.mlp.experts.%d.up_proj", L, e));
			ds_fp8(b, d->hidden, d->moe_inter,
			       DS_STEM("model.layers.%d.mlp.experts.%d.down_proj", L, e));
		}
		ds_fp8(b, d->moe_inter, d->hidden,
		       DS_STEM("model.layers.%d.mlp.shared_experts.gate_proj", L));
		ds_fp8(b, d->moe_inter, d->hidden,
		       DS_STEM("model.layers.%d.mlp.shared_experts.up_proj", L));
		ds_fp8(b, d->hidden, d->moe_inter,
		       DS_STEM("model.layers.%d.mlp.shared_experts.down_proj", L));
	}
	ds_vec(b, DS_BF16, d->hidden, L, "input_layernorm.weight");
	ds_vec(b, DS_BF16, d->hidden, L, "post_attention_layernorm.weight");
	if (L == DS_LAYERS) {
		ds_bf16(b, d->vocab, d->hidden, "model.layers.61.embed_tokens.weight");
		ds_vec(b, DS_BF16, d->hidden, L, "enorm.weight");
		ds_vec(b, DS_BF16, d->hidden, L, "hnorm.weight");
		ds_bf16(b, d->hidden, 2 * d->hidden, "model.layers.61.eh_proj.weight");
		ds_vec(b, DS_BF16, d->hidden, L, "shared_head.norm.weight");
		ds_bf16(b, d->vocab, d->hidden, "model.layers.61.shared_head.head.weight");
	}
#undef DS_STEM
}

static void ds_enumerate(struct ds_build *b)
{
	ds_bf16(b, b->d->vocab, b->d->hidden, "model.embed_tokens.weight");
	for (int L = 0; L <= DS_LAYERS; L++)
		ds_layer(b, L);
	ds_next(b, "model.norm.weight", DS_BF16, 1, b->d->hidden, 0);
	ds_bf16(b, b->d->vocab, b->d->hidden, "lm_head.weight");
}

void ds_free(struct ds_ckpt *ck)
{
	if (!ck)
		return;
	free(ck->t);
	ck->t = NULL;
	ck->n = 0;
}

int ds_table(const struct ds_dims *d, struct ds_ckpt *ret)
{
	struct ds_build b = { .ck = ret, .d = &ds_real, .real = true };
	uint64_t cum = 0;
	uint32_t s = 0;

	memset(ret, 0, sizeof(*ret));
	ret->dims = *d;
	ret->t = calloc(DS_TENSORS, sizeof(*ret->t));
	if (!ret->t)
		return -1;
	ds_enumerate(&b);
	if (b.overflow || b.i != DS_TENSORS)
		goto bad;
	b = (struct ds_build){ .ck = ret, .d = d, .real = false };
	ds_enumerate(&b);
	if (b.overflow || b.i != DS_TENSORS)
		goto bad;
	ret->n = DS_TENSORS;
	for (size_t i = 0; i < ret->n; i++)
		ret->real_bytes += ret->t[i].real_nbytes;
	for (size_t i = 0; i < ret->n; i++) {
		uint32_t sh = (uint32_t)(cum * DS_SHARDS / ret->real_bytes);
		while (s <= sh)
			ret->shard_first[s++] = (uint32_t)i;
		ret->t[i].shard = sh;
		cum += ret->t[i].real_nbytes;
		ret->bytes += ret->t[i].nbytes;
	}
	while (s <= DS_SHARDS)
		ret->shard_first[s++] = (uint32_t)ret->n;
	return 0;
bad:
	ds_free(ret);
	return -1;
}

long ds_find(const struct ds_ckpt *ck, const char *name)
{
	for (size_t i = 0; i < ck->n; i++)
		if (strcmp(ck->t[i].name, name) == 0)
			return (long)i;
	return -1;
}

int ds_write(struct ds_ckpt *ck, const char *dir)
{
	static const char *const meta[] = { "format", "pt" };
	char path[PATH_MAX], file[64];
	struct stw_tensor *ts = NULL;
	struct stw_str idx = { 0 };
	uint8_t *buf = NULL;
	int r = -1, fd = -1;

	for (uint32_t s = 0; s < DS_SHARDS; s++) {
		size_t a = ck->shard_first[s], n = ck->shard_first[s + 1] - a;
		uint64_t total = 0, pos = 0, data_start = 0;

		for (size_t i = a; i < a + n; i++)
			total += ck->t[i].nbytes;
		free(ts);
		free(buf);
		ts = calloc(n ? n : 1, sizeof(*ts));
		buf = malloc(total ? total : 1);
		if (!ts || !buf)
			goto out;
		for (size_t i = 0; i < n; i++) {
			const struct ds_tensor *t = &ck->t[a + i];
			ts[i].name = t->name;
			ts[i].dtype = ds_dtype(t->kind);
			ts[i].ndim = t->ndim;
			ts[i].shape[0] = t->shape[0];
			ts[i].shape[1] = t->shape[1];
			ts[i].data = buf + pos;
			ts[i].nbytes = t->nbytes;
			ds_fill(t, 0, buf + pos, t->nbytes);
			pos += t->nbytes;
		}
		ds_shard_name(s, file, sizeof(file));
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		if (stw_write(path, ts, n, meta, 1, &data_start) < 0)
			goto out;
		pos = data_start;
		for (size_t i = a; i < a + n; i++) {
			ck->t[i].offset = pos;
			pos += ck->t[i].nbytes;
		}
	}

	stw_str_addf(&idx, "{\"metadata\":{\"total_size\":%llu},\"weight_map\":{",
		     (unsigned long long)ck->bytes);
	for (size_t i = 0; i < ck->n; i++) {
		if (i)
			stw_str_add(&idx, ",", 1);
		stw_str_json(&idx, ck->t[i].name);
		ds_shard_name(ck->t[i].shard, file, sizeof(file));
		stw_str_addf(&idx, ":\"%s\"", file);
	}
	stw_str_add(&idx, "}}\n", 3);
	if (idx.oom)
		goto out;
	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || !stw_write_all(fd, idx.p, idx.len))
		goto out;
	r = 0;
out:
	if (fd >= 0 && close(fd) < 0)
		r = -1;
	free(idx.p);
	free(ts);
	free(buf);
	return r;
}

int ds_serve(struct harness *h, const struct ds_dims *dims, struct ds_ckpt *ck,
	     const struct harness_opts *o, const char *extra)
{
	char dir[400], sec[600];

	if (ds_table(dims, ck) < 0 || harness_init(h) < 0)
		return -1;
	harness_path(h, "ds", dir, sizeof(dir));
	printf("writing the DeepSeek-V3-shaped checkpoint (%d tensors, %d shards, hidden %llu) ...\n",
	       DS_TENSORS, DS_SHARDS, (unsigned long long)dims->hidden);
	fflush(stdout);
	if (mkdir(dir, 0755) < 0 || ds_write(ck, dir) < 0) {
		fprintf(stderr, "cannot write the checkpoint in %s\n", dir);
		return -1;
	}
	snprintf(sec, sizeof(sec), "[checkpoint:ds]\npath = %s\n", dir);
	return harness_write_config(h, extra, sec) < 0 || harness_start_opts(h, o) < 0 ? -1 : 0;
}

int ds_unit_declare(struct weightd_client *c, const struct ds_ckpt *ck, size_t n,
		    const char *ckpt, struct weightd_unit **ret, struct weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, err);

	for (size_t i = 0; r >= 0 && i < n && i < ck->n; i++) {
		const struct ds_tensor *t = &ck->t[i];

		r = weightd_unit_slot(u, t->name, ds_dtype(t->kind), t->shape, (size_t)t->ndim,
				      NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, t->name, ckpt, t->name, NULL, err);
	}
	*ret = u;
	return r;
}
