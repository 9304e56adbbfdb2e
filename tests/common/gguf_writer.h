/* SPDX-License-Identifier: Apache-2.0 */
/* gguf_writer.h - builds GGUF files byte by byte from the specification, for tests: well-formed
 * ones and, since every field is written by hand, deliberately malformed ones. Header-only. */
#ifndef WD_TEST_GGUF_WRITER_H
#define WD_TEST_GGUF_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * From ggml's docs/gguf.md: the file is "GGUF", u32 version, u64 tensor_count, u64 kv_count,
 * the metadata key/values, the tensor infos, zero padding to general.alignment (default 32), then
 * the data section. Everything is little-endian; a string is a u64 length and its bytes.
 */

/* gguf_metadata_value_type */
enum {
	GW_U8 = 0, GW_I8 = 1, GW_U16 = 2, GW_I16 = 3, GW_U32 = 4, GW_I32 = 5, GW_F32 = 6,
	GW_BOOL = 7, GW_STRING = 8, GW_ARRAY = 9, GW_U64 = 10, GW_I64 = 11, GW_F64 = 12,
};

/* ggml_type numbers (ggml.h, docs/gguf.md); 4, 5, 31-33 and 36-38 were removed from ggml. */
enum {
	GG_F32 = 0, GG_F16 = 1, GG_Q4_0 = 2, GG_Q4_1 = 3, GG_Q5_0 = 6, GG_Q5_1 = 7, GG_Q8_0 = 8,
	GG_Q8_1 = 9, GG_Q2_K = 10, GG_Q3_K = 11, GG_Q4_K = 12, GG_Q5_K = 13, GG_Q6_K = 14,
	GG_Q8_K = 15, GG_IQ2_XXS = 16, GG_IQ2_XS = 17, GG_IQ3_XXS = 18, GG_IQ1_S = 19,
	GG_IQ4_NL = 20, GG_IQ3_S = 21, GG_IQ2_S = 22, GG_IQ4_XS = 23, GG_I8 = 24, GG_I16 = 25,
	GG_I32 = 26, GG_I64 = 27, GG_F64 = 28, GG_IQ1_M = 29, GG_BF16 = 30, GG_TQ1_0 = 34,
	GG_TQ2_0 = 35, GG_MXFP4 = 39,
};

struct gw {
	uint8_t *p;
	size_t len, cap;
};

static inline void gw_init(struct gw *g)
{
	memset(g, 0, sizeof(*g));
}

static inline void gw_free(struct gw *g)
{
	free(g->p);
	memset(g, 0, sizeof(*g));
}

static inline void gw_raw(struct gw *g, const void *p, size_t n)
{
	if (g->len + n > g->cap) {
		size_t cap = g->cap ? g->cap : 256;

		while (cap < g->len + n)
			cap *= 2;
		g->p = realloc(g->p, cap);
		if (!g->p)
			abort();
		g->cap = cap;
	}
	if (n)
		memcpy(g->p + g->len, p, n);
	g->len += n;
}

static inline void gw_le(struct gw *g, uint64_t v, int bytes)
{
	uint8_t b[8];

	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	gw_raw(g, b, (size_t)bytes);
}

static inline void gw_u8(struct gw *g, uint8_t v) { gw_le(g, v, 1); }
static inline void gw_u16(struct gw *g, uint16_t v) { gw_le(g, v, 2); }
static inline void gw_u32(struct gw *g, uint32_t v) { gw_le(g, v, 4); }
static inline void gw_u64(struct gw *g, uint64_t v) { gw_le(g, v, 8); }

static inline void gw_f32(struct gw *g, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	gw_u32(g, u);
}

static inline void gw_f64(struct gw *g, double f)
{
	uint64_t u;

	memcpy(&u, &f, sizeof(u));
	gw_u64(g, u);
}

static inline void gw_zeros(struct gw *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		gw_u8(g, 0);
}

/* Overwrite a u32 already written at byte `at` (to break a field after the fact). */
static inline void gw_patch_u32(struct gw *g, size_t at, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		g->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static inline void gw_strn(struct gw *g, const char *s, size_t n)
{
	gw_u64(g, n);
	gw_raw(g, s, n);
}

static inline void gw_str(struct gw *g, const char *s)
{
	gw_strn(g, s, strlen(s));
}

static inline void gw_header(struct gw *g, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	gw_raw(g, "GGUF", 4);
	gw_u32(g, version);
	gw_u64(g, n_tensors);
	gw_u64(g, n_kv);
}

/* A metadata key and its value type; the value is written next by the caller. */
static inline void gw_key(struct gw *g, const char *key, uint32_t type)
{
	gw_str(g, key);
	gw_u32(g, type);
}

/* An array header (element type, count); the elements follow. */
static inline void gw_arr(struct gw *g, uint32_t elem_type, uint64_t count)
{
	gw_u32(g, elem_type);
	gw_u64(g, count);
}

static inline void gw_kv_u32(struct gw *g, const char *key, uint32_t v)
{
	gw_key(g, key, GW_U32);
	gw_u32(g, v);
}

static inline void gw_kv_str(struct gw *g, const char *key, const char *v)
{
	gw_key(g, key, GW_STRING);
	gw_str(g, v);
}

/* A tensor info; dims are in GGUF order, innermost first. */
static inline void gw_tinfo(struct gw *g, const char *name, uint32_t n_dims, const uint64_t *dims,
			    uint32_t ggml_type, uint64_t offset)
{
	gw_str(g, name);
	gw_u32(g, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		gw_u64(g, dims[i]);
	gw_u32(g, ggml_type);
	gw_u64(g, offset);
}

/* Zero-pad to a multiple of `alignment`. */
static inline void gw_pad(struct gw *g, size_t alignment)
{
	while (g->len % alignment)
		gw_u8(g, 0);
}

/*
 * A whole well-formed file: version 3, optional general.alignment (0 = leave it out, so 32),
 * the given tensors laid out in order at aligned offsets, each filled with a byte pattern.
 * ret_data_start (may be NULL) receives where the data section begins.
 */
struct gw_tensor {
	const char *name;
	uint32_t n_dims;
	uint64_t dims[4]; /* innermost first */
	uint32_t type;
	uint64_t nbytes;  /* computed by the caller from the type's block geometry */
};

static inline void gw_file(struct gw *g, uint32_t alignment, size_t n, const struct gw_tensor *ts,
			   size_t *ret_data_start)
{
	size_t align = alignment ? alignment : 32, data_start;
	uint64_t off = 0;

	gw_header(g, 3, n, alignment ? 2 : 1);
	gw_kv_str(g, "general.architecture", "test");
	if (alignment)
		gw_kv_u32(g, "general.alignment", alignment);
	for (size_t i = 0; i < n; i++) {
		gw_tinfo(g, ts[i].name, ts[i].n_dims, ts[i].dims, ts[i].type, off);
		off += (ts[i].nbytes + align - 1) / align * align;
	}
	gw_pad(g, align);
	data_start = g->len;
	for (size_t i = 0; i < n; i++) {
		for (uint64_t b = 0; b < ts[i].nbytes; b++)
			gw_u8(g, (uint8_t)(i * 31 + b));
		gw_pad(g, align);
	}
	if (ret_data_start)
		*ret_data_start = data_start;
}

/* Write the bytes to path; 0 or -1. */
static inline int gw_save(const struct gw *g, const char *path)
{
	FILE *f = fopen(path, "wb");
	int rc = 0;

	if (!f)
		return -1;
	if (g->len && fwrite(g->p, 1, g->len, f) != g->len)
		rc = -1;
	if (fclose(f))
		rc = -1;
	return rc;
}

#endif
