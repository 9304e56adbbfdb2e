/* SPDX-License-Identifier: Apache-2.0 */
/* deepseek.h - writes a sharded safetensors checkpoint with DeepSeek-V3's tensor table at a tiny
 * size, and the content function tests check its bytes with (deepseek.c, in the test-support
 * library). */
#ifndef WD_TEST_DEEPSEEK_H
#define WD_TEST_DEEPSEEK_H

/*
 * The table is the published DeepSeek-V3 (and R1) checkpoint's: 91,991 tensors in 163 shards
 * named model-00001-of-000163.safetensors ... with a model.safetensors.index.json.
 *
 *   model.embed_tokens.weight                          BF16 [vocab, hidden]
 *   model.layers.L.  (L = 0..61; 61 is the multi-token-prediction layer)
 *     self_attn.q_a_proj.weight                        F8_E4M3 [q_lora, hidden]
 *     self_attn.q_a_layernorm.weight                   BF16 [q_lora]
 *     self_attn.q_b_proj.weight                        F8_E4M3 [heads*(nope+rope), q_lora]
 *     self_attn.kv_a_proj_with_mqa.weight              F8_E4M3 [kv_lora+rope, hidden]
 *     self_attn.kv_a_layernorm.weight                  BF16 [kv_lora]
 *     self_attn.kv_b_proj.weight                       F8_E4M3 [heads*(nope+v), kv_lora]
 *     self_attn.o_proj.weight                          F8_E4M3 [hidden, heads*v]
 *     L < 3:  mlp.{gate,up}_proj.weight                F8_E4M3 [dense_inter, hidden]
 *             mlp.down_proj.weight                     F8_E4M3 [hidden, dense_inter]
 *     L >= 3: mlp.gate.weight                          BF16 [256, hidden]
 *             mlp.gate.e_score_correction_bias         F32 [256]
 *             mlp.experts.E.{gate,up}_proj.weight      F8_E4M3 [moe_inter, hidden]  (E = 0..255)
 *             mlp.experts.E.down_proj.weight           F8_E4M3 [hidden, moe_inter]
 *             mlp.shared_experts.{gate,up,down}_proj.weight  (as an expert's)
 *     input_layernorm.weight, post_attention_layernorm.weight   BF16 [hidden]
 *   model.layers.61.{embed_tokens.weight, shared_head.head.weight}  BF16 [vocab, hidden]
 *   model.layers.61.{enorm,hnorm,shared_head.norm}.weight           BF16 [hidden]
 *   model.layers.61.eh_proj.weight                                  BF16 [hidden, 2*hidden]
 *   model.norm.weight BF16 [hidden], lm_head.weight BF16 [vocab, hidden]
 *
 * and every F8_E4M3 weight W [r, c] is followed by W_scale_inv... named
 * "<W without .weight>.weight_scale_inv", F32 [ceil(r/block), ceil(c/block)]: one scale per
 * block x block tile, edge tiles partial. Per layer that is 20 tensors for the 3 dense layers and
 * 1,558 for the 58 MoE layers and layer 61, which adds 6: 60 + 59 * 1558 + 6 + 3 = 91,991.
 *
 * ds_real holds the published dimensions (block 128); ds_tiny divides them (hidden, the
 * intermediates, the LoRA ranks and the vocabulary by 128, heads by 32, head dims and the block
 * by 16) so the whole checkpoint is about 45 MB. The expert counts are not divided. Tiny blocks
 * are 16: hidden 56 = 3.5 blocks, so edge tiles are partial, as kv_a_proj's are (576 = 4.5 x 128)
 * in the published model.
 *
 * Shards: the tensors in table order, cut into 163 runs by the bytes they take at the published
 * size (shard s holds the tensors whose published byte range starts in s/163 .. (s+1)/163 of the
 * total), so each file holds what it would hold in the published layout's order (the published
 * files are cut the same way: about 4.3 GB each, layer 61 in the last).
 *
 * Content (what tests recompute; tensor byte/element positions count from the tensor's start):
 *   seed   = FNV-1a 32 of the tensor's name
 *   r(k)   = mix32(seed ^ (uint32_t)(k * 0x9e3779b9)) with mix32 the "lowbias32" finalizer
 *            (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16)
 *   F8_E4M3 byte k:          b = r(k) >> 24, then 0x7f -> 0x7e and 0xff -> 0xfe (no NaN)
 *   F32 weight_scale_inv k:  (r(k) % 61 + 1) / 512
 *   BF16 and other F32 k:    ((int)(r(k) % 251) - 125) / 1024
 * Every value is exact in its dtype; stored little-endian.
 */

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "st_writer.h"

#define DS_LAYERS 61        /* main layers; layer 61 is the multi-token-prediction layer */
#define DS_DENSE_LAYERS 3
#define DS_EXPERTS 256
#define DS_SHARDS 163
#define DS_TENSORS 91991

struct ds_dims {
	uint64_t hidden, moe_inter, dense_inter, q_lora, kv_lora, heads, nope, rope, v, vocab;
	uint64_t block;     /* edge of a square scale tile */
};

/* The published dimensions, and the tiny ones the tests write (see above). */
extern const struct ds_dims ds_real, ds_tiny;

enum ds_kind {
	DS_FP8 = 0,    /* F8_E4M3 weight (followed by its scale) */
	DS_SCALE,      /* F32 weight_scale_inv */
	DS_BF16,
	DS_F32,
};

struct ds_tensor {
	char name[96];
	enum ds_kind kind;
	int ndim;
	uint64_t shape[2];
	uint64_t nbytes;
	uint64_t real_nbytes;  /* bytes at the published size */
	uint32_t seed;
	uint32_t shard;        /* 0-based; the file is ds_shard_name(shard) */
	uint64_t offset;       /* absolute offset of its first byte in that file (after ds_write) */
	int32_t scale;         /* for DS_FP8: index of its weight_scale_inv; else -1 */
};

struct ds_ckpt {
	struct ds_dims dims;
	size_t n;
	struct ds_tensor *t;
	uint64_t bytes;        /* payload bytes of every tensor */
	uint64_t real_bytes;   /* the same at the published size */
	uint32_t shard_first[DS_SHARDS + 1]; /* tensors of shard s: [shard_first[s], shard_first[s+1]) */
};

/* The safetensors dtype of a kind of tensor. */
const char *ds_dtype(enum ds_kind k);

/* The file name of a shard (0-based): model-00001-of-000163.safetensors ... */
void ds_shard_name(uint32_t shard, char *out, size_t cap);

/* --- the content ----------------------------------------------------------------------------- */

/* Byte k of an F8_E4M3 tensor with this seed. */
uint8_t ds_fp8_byte(uint32_t seed, uint64_t k);

/* Element k of a weight_scale_inv tensor. */
float ds_scale_value(uint32_t seed, uint64_t k);

/* Element k of a BF16 tensor or a plain F32 one. */
float ds_plain_value(uint32_t seed, uint64_t k);

/* Element k of tensor t as a float (for F8_E4M3 weights: use ds_fp8_byte instead). */
float ds_value(const struct ds_tensor *t, uint64_t k);

/* Byte `off` of tensor t's data. */
uint8_t ds_byte(const struct ds_tensor *t, uint64_t off);

/* Fill buf with tensor t's len bytes starting at byte off. */
void ds_fill(const struct ds_tensor *t, uint64_t off, uint8_t *buf, size_t len);

/* --- the table ------------------------------------------------------------------------------- */

/* Free a table (and leave *ck empty); NULL-safe. */
void ds_free(struct ds_ckpt *ck);

/*
 * Build the table with dimensions `d` (normally ds_tiny) and the published shard layout.
 * Offsets are known after ds_write. Returns 0, or -1 (out of memory, or a table that is not
 * 91,991 tensors: a broken generator).
 */
int ds_table(const struct ds_dims *d, struct ds_ckpt *ret);

/* Index of the tensor named `name`, or -1 (linear: for tests that look up a few names). */
long ds_find(const struct ds_ckpt *ck, const char *name);

/*
 * Write the 163 shards and model.safetensors.index.json into `dir` (which exists), recording
 * each tensor's file offset. Returns 0 or -1 (errno set).
 */
int ds_write(struct ds_ckpt *ck, const char *dir);

struct harness;
struct harness_opts;
/* For the programs that serve the checkpoint themselves (benchmarks): the table at `dims` made
 * into *ck, h made (harness_init), the checkpoint written to "ds" in its temp dir (saying so on
 * stdout, as it takes a while), and a daemon started with o serving it as checkpoint "ds" with
 * `extra` [daemon] lines. 0, or -1 with what failed on stderr. */
int ds_serve(struct harness *h, const struct ds_dims *dims, struct ds_ckpt *ck,
	     const struct harness_opts *o, const char *extra);

struct weightd_client;
struct weightd_unit;
struct weightd_error;
/* A new unit of c with a slot for each of ck's first n tensors (checkpoint `ckpt`), declared
 * with its dtype and shape, nothing sent yet. *ret is the unit (NULL if none was made), the
 * caller's to free either way; the return is the first failing call's. */
int ds_unit_declare(struct weightd_client *c, const struct ds_ckpt *ck, size_t n,
		    const char *ckpt, struct weightd_unit **ret, struct weightd_error *err);

#endif
