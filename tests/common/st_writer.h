/* SPDX-License-Identifier: Apache-2.0 */
/* st_writer.h - writes safetensors files for the tests and wd-mkfixture: valid ones and bad ones. */
#ifndef WD_TEST_ST_WRITER_H
#define WD_TEST_ST_WRITER_H

/*
 * Header-only (static inline) so that each test, which compiles only its own .c, can use it.
 * The JSON is built by hand here, not with jansson, so the parser under test is checked against
 * an independent writer.
 *
 * Fill patterns (tests recompute expected bytes from these formulas, not from this code):
 *  - bytes:  byte i of a tensor's data (i counted from the tensor's first byte) is
 *            (i * 131 + seed * 7 + 13) & 0xff
 *  - values: element k of an F32/F16/BF16/F64 tensor is
 *            ((k * 131 + seed * 7 + 13) % 251 - 125) / 1024
 *            (a multiple of 1/1024 of magnitude <= 125/1024, exact in all four dtypes),
 *            stored little-endian.
 *  - zero:   all bytes 0.
 */

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "wd_limits.h"

enum stw_pattern { STW_BYTES = 0, STW_VALUES, STW_ZERO };

struct stw_tensor {
	const char *name;
	const char *dtype;           /* written verbatim, so a test can write an unknown one */
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	const void *data;            /* nbytes of data, or NULL to fill with `pattern` */
	uint64_t nbytes;             /* 0: elements x dtype size */
	enum stw_pattern pattern;
	uint32_t seed;
};

static inline uint8_t stw_pattern_byte(uint64_t i, uint32_t seed)
{
	return (uint8_t)((i * 131u + (uint64_t)seed * 7u + 13u) & 0xff);
}

static inline float stw_value(uint64_t k, uint32_t seed)
{
	int64_t v = (int64_t)((k * 131u + (uint64_t)seed * 7u + 13u) % 251u) - 125;

	return (float)v / 1024.0f;
}

static inline void stw_put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Encode v (exactly representable, normal or zero) as dtype t into out (little-endian). */
static inline size_t stw_encode(enum wd_dtype t, float v, uint8_t *out)
{
	uint32_t b;
	uint16_t h;

	memcpy(&b, &v, 4);
	switch (t) {
	case WD_F32:
		stw_put_le(out, b, 4);
		return 4;
	case WD_BF16:
		stw_put_le(out, b >> 16, 2);
		return 2;
	case WD_F16:
		if ((b & 0x7fffffffu) == 0)
			h = (uint16_t)(b >> 16);
		else
			h = (uint16_t)(((b >> 16) & 0x8000u) | ((((b >> 23) & 0xffu) - 127 + 15) << 10) |
				       ((b >> 13) & 0x3ffu));
		stw_put_le(out, h, 2);
		return 2;
	case WD_F64: {
		double d = v;
		uint64_t q;
		memcpy(&q, &d, 8);
		stw_put_le(out, q, 8);
		return 8;
	}
	default:
		return 0;
	}
}

/* Bytes a tensor's data takes: nbytes when set, else its elements x dtype size (0 if unknown). */
static inline uint64_t stw_nbytes(const struct stw_tensor *t)
{
	uint64_t n = 1, b = 0;

	if (t->nbytes)
		return t->nbytes;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	if (!wd_dtype_bytes(wd_dtype_from_name(t->dtype), n, &b))
		return 0;
	return b;
}

/*
 * Fill buf with len bytes of tensor t's data starting at byte `off` of that tensor. Returns false
 * when the pattern does not apply to the dtype (values on a non-float type).
 */
static inline bool stw_fill(const struct stw_tensor *t, uint64_t off, uint8_t *buf, size_t len)
{
	enum wd_dtype dt = wd_dtype_from_name(t->dtype);
	size_t es;

	if (t->data) {
		memcpy(buf, (const uint8_t *)t->data + off, len);
		return true;
	}
	switch (t->pattern) {
	case STW_ZERO:
		memset(buf, 0, len);
		return true;
	case STW_BYTES:
		for (size_t i = 0; i < len; i++)
			buf[i] = stw_pattern_byte(off + i, t->seed);
		return true;
	case STW_VALUES:
		es = wd_dtype_size(dt);
		if (dt != WD_F32 && dt != WD_F16 && dt != WD_BF16 && dt != WD_F64)
			return false;
		for (size_t i = 0; i < len; i++) {
			uint64_t pos = off + i;
			uint8_t e[8];
			stw_encode(dt, stw_value(pos / es, t->seed), e);
			buf[i] = e[pos % es];
		}
		return true;
	}
	return false;
}

/* A growable string. */
struct stw_str {
	char *p;
	size_t len, cap;
	bool oom;
};

static inline void stw_str_add(struct stw_str *s, const char *data, size_t n)
{
	if (s->oom)
		return;
	if (s->len + n + 1 > s->cap) {
		size_t nc = (s->len + n + 1) * 2;
		char *np = realloc(s->p, nc);
		if (!np) {
			s->oom = true;
			return;
		}
		s->p = np;
		s->cap = nc;
	}
	memcpy(s->p + s->len, data, n);
	s->len += n;
	s->p[s->len] = '\0';
}

static inline void stw_str_addf(struct stw_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void stw_str_addf(struct stw_str *s, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		stw_str_add(s, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string literal for s. */
static inline void stw_str_json(struct stw_str *out, const char *s)
{
	stw_str_add(out, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };
			stw_str_add(out, e, 2);
		} else if (c < 0x20) {
			stw_str_addf(out, "\\u%04x", c);
		} else {
			stw_str_add(out, (const char *)&c, 1);
		}
	}
	stw_str_add(out, "\"", 1);
}

/*
 * The JSON header for tensors laid out contiguously in the given order (offsets from 0), with
 * `meta` as n_meta key/value pairs (meta[2i], meta[2i+1]) in __metadata__ when n_meta > 0. Padded
 * with spaces so 8 + length is a multiple of 8, as the reference writer does. Returns a malloc'd
 * string (length in *ret_len) or NULL.
 */
static inline char *stw_header(const struct stw_tensor *ts, size_t n, const char *const *meta, size_t n_meta,
			       size_t *ret_len)
{
	struct stw_str s = { 0 };
	uint64_t off = 0;
	bool first = true;

	stw_str_add(&s, "{", 1);
	if (n_meta) {
		stw_str_add(&s, "\"__metadata__\":{", 16);
		for (size_t i = 0; i < n_meta; i++) {
			if (i)
				stw_str_add(&s, ",", 1);
			stw_str_json(&s, meta[2 * i]);
			stw_str_add(&s, ":", 1);
			stw_str_json(&s, meta[2 * i + 1]);
		}
		stw_str_add(&s, "}", 1);
		first = false;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t nb = stw_nbytes(&ts[i]);
		if (!first)
			stw_str_add(&s, ",", 1);
		first = false;
		stw_str_json(&s, ts[i].name);
		stw_str_add(&s, ":{\"dtype\":", 10);
		stw_str_json(&s, ts[i].dtype);
		stw_str_add(&s, ",\"shape\":[", 10);
		for (int d = 0; d < ts[i].ndim; d++)
			stw_str_addf(&s, "%s%llu", d ? "," : "", (unsigned long long)ts[i].shape[d]);
		stw_str_addf(&s, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
			     (unsigned long long)(off + nb));
		off += nb;
	}
	stw_str_add(&s, "}", 1);
	while ((8 + s.len) % 8)
		stw_str_add(&s, " ", 1);
	if (s.oom) {
		free(s.p);
		return NULL;
	}
	*ret_len = s.len;
	return s.p;
}

static inline bool stw_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t k = write(fd, p, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		len -= (size_t)k;
	}
	return true;
}

/*
 * Write a raw safetensors-shaped file: the 8-byte little-endian `announced` length (which need not
 * equal json_len, to make bad files), json_len bytes of JSON, then data_len bytes of data.
 * Returns 0 or -1 (errno set).
 */
static inline int stw_write_raw(const char *path, const void *json, size_t json_len, uint64_t announced,
				const void *data, size_t data_len)
{
	uint8_t head[8];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	if (fd < 0)
		return -1;
	stw_put_le(head, announced, 8);
	ok = stw_write_all(fd, head, 8) && stw_write_all(fd, json, json_len) &&
	     (!data_len || stw_write_all(fd, data, data_len));
	if (close(fd) < 0)
		ok = false;
	return ok ? 0 : -1;
}

/* Same as stw_write_raw with announced = strlen(json). */
static inline int stw_write_json(const char *path, const char *json, const void *data, size_t data_len)
{
	return stw_write_raw(path, json, strlen(json), strlen(json), data, data_len);
}

/*
 * Write a valid safetensors file holding ts[0..n) contiguously in that order, data streamed in
 * 1 MiB chunks. *ret_data_start (if not NULL) gets 8 + header length. Returns 0 or -1.
 */
static inline int stw_write(const char *path, const struct stw_tensor *ts, size_t n, const char *const *meta,
			    size_t n_meta, uint64_t *ret_data_start)
{
	const size_t chunk = 1u << 20;
	uint8_t head[8], *buf = NULL;
	size_t hlen = 0;
	char *json = stw_header(ts, n, meta, n_meta, &hlen);
	int fd = -1, r = -1;

	buf = malloc(chunk);
	if (!json || !buf)
		goto out;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto out;
	stw_put_le(head, hlen, 8);
	if (!stw_write_all(fd, head, 8) || !stw_write_all(fd, json, hlen))
		goto out;
	for (size_t i = 0; i < n; i++) {
		uint64_t nb = stw_nbytes(&ts[i]);
		for (uint64_t off = 0; off < nb; off += chunk) {
			size_t len = nb - off < chunk ? (size_t)(nb - off) : chunk;
			if (!stw_fill(&ts[i], off, buf, len) || !stw_write_all(fd, buf, len))
				goto out;
		}
	}
	if (ret_data_start)
		*ret_data_start = 8 + hlen;
	r = 0;
out:
	if (fd >= 0 && close(fd) < 0)
		r = -1;
	free(json);
	free(buf);
	return r;
}

/* A fresh private directory under $TMPDIR (or /tmp), in *ret (PATH_MAX bytes). 0 or -1. */
static inline int stw_tmpdir(char *ret, size_t len)
{
	const char *base = getenv("TMPDIR");

	if (!base || !*base)
		base = "/tmp";
	if (snprintf(ret, len, "%s/weightd-test.XXXXXX", base) >= (int)len)
		return -1;
	return mkdtemp(ret) ? 0 : -1;
}

static inline int stw_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Remove a directory tree (symlinks are removed, never followed). */
/* For a test program whose files all go into one temp dir: its path, and the cmocka setup and
 * teardown that make and remove it. */
static char stw_test_dir[4096] __attribute__((unused));

static inline int stw_setup(void **state)
{
	(void)state;
	return stw_tmpdir(stw_test_dir, sizeof(stw_test_dir));
}

static inline int stw_teardown(void **state);

static inline int stw_rmtree(const char *dir)
{
	return nftw(dir, stw_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline int stw_teardown(void **state)
{
	(void)state;
	return stw_rmtree(stw_test_dir);
}

#endif
