/* SPDX-License-Identifier: Apache-2.0 */
/* gguf.c - admitting a GGUF file: header, metadata and tensor infos checked, payload untouched. */
#include "gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checked.h"

/*
 * Layout (GGUF v2/v3, little-endian; ggml's docs/gguf.md):
 *   "GGUF" u32 version, u64 tensor_count, u64 metadata_kv_count
 *   metadata_kv_count x { string key, u32 value_type, value }
 *   tensor_count x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset }
 *   padding to general.alignment, then the data section; offsets are relative to it.
 * A string is u64 length + bytes (no NUL). An array value is u32 element type, u64 count, elements.
 *
 * GGUF lists a tensor's dimensions innermost (fastest-varying) first, as ggml's ne[] does. weightd
 * reports row-major shapes, outermost first, like safetensors: dims [4096, 32000] in the file are
 * shape [32000, 4096] in the table. The "row" whose length must be a whole number of blocks is the
 * innermost dimension, i.e. the file's dims[0] and the table's last shape entry.
 */

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4u
#define GGUF_MAX_KEY 65535u        /* the spec's bound on a metadata key */
#define GGUF_MAX_NAME 64u          /* the spec's bound on a tensor name (ggml itself stops at 63) */
#define GGUF_ARRAY_SHOWN 16u       /* longer arrays are summarised as "[N x type]" */
#define GGUF_RENDER_MAX 4096u      /* bytes of text one rendered array may take */
#define GGUF_DEPTH_CAP 32u         /* array nesting, whatever the limits say (bounds the stack) */
#define GGUF_FIRST_READ (1u << 20) /* first pread of wd_gguf_read */
#define GGUF_TYPE_NAME 256u        /* room for a nested type name */

/* Internal status (never returned to callers): the header goes on past the bytes in hand. */
#define GGUF_NEED_MORE 1000

enum gguf_vtype {
	V_U8, V_I8, V_U16, V_I16, V_U32, V_I32, V_F32, V_BOOL, V_STRING, V_ARRAY, V_U64, V_I64, V_F64,
	V_COUNT
};

static const char *const vtype_names[V_COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

/* Fixed encoded size of a scalar (0: variable), and the least bytes any value of the type takes. */
static const uint8_t vtype_size[V_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
static const uint8_t vtype_min[V_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8 };

/* The least bytes of a metadata entry (key length, empty key, type, u8 value) and tensor info. */
#define GGUF_MIN_KV 13u
#define GGUF_MIN_TINFO 24u
#define GGUF_HEADER 24u

static const struct wd_limits default_limits = WD_LIMITS_DEFAULT;

/* A cursor over the bytes in hand; `where` names what is being read, for error sentences. */
struct rd {
	const uint8_t *buf;
	uint64_t len;        /* bytes in hand, <= file_size */
	uint64_t file_size;
	uint64_t pos;
	uint64_t need;       /* with GGUF_NEED_MORE: the header needs at least this many bytes */
	const struct wd_limits *lim;
	weightd_error *err;
	char where[384];
};

/* Text being rendered for one metadata value; stops growing at `max` and remembers it did. */
struct sbuf {
	char *p;
	size_t len, cap, max;
	bool cut;
	bool oom;
};

/* A set of byte strings (keys or names) pointing into the header buffer. */
struct hset {
	struct hent { const uint8_t *p; uint64_t len; } *e;
	size_t mask;
};

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/*
 * Take n bytes at the cursor. Fails with a "truncated" sentence when the file itself ends first,
 * with -WEIGHTD_E_LIMIT_EXCEEDED when the header would pass lim->max_header_bytes, and with
 * GGUF_NEED_MORE (setting r->need) when the file has the bytes but the buffer does not yet.
 */
static int take(struct rd *r, uint64_t n, const char *what, const uint8_t **ret)
{
	uint64_t end;

	if (!wd_add_u64(r->pos, n, &end) || end > r->file_size)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF header is truncated: %s%s at byte %" PRIu64 " needs %" PRIu64
				    " bytes but the file ends at byte %" PRIu64,
				    r->where, what, r->pos, n, r->file_size);
	if (end > r->lim->max_header_bytes)
		return wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "GGUF header region passes the limit of %" PRIu64
				    " bytes (%s%s at byte %" PRIu64 ")",
				    r->lim->max_header_bytes, r->where, what, r->pos);
	if (end > r->len) {
		r->need = end;
		return -GGUF_NEED_MORE;
	}
	*ret = r->buf + r->pos;
	r->pos = end;
	return 0;
}

static int rd_u32(struct rd *r, const char *what, uint32_t *ret)
{
	const uint8_t *p = NULL;
	int rc = take(r, 4, what, &p);

	if (rc)
		return rc;
	*ret = le32(p);
	return 0;
}

static int rd_u64(struct rd *r, const char *what, uint64_t *ret)
{
	const uint8_t *p = NULL;
	int rc = take(r, 8, what, &p);

	if (rc)
		return rc;
	*ret = le64(p);
	return 0;
}

/* A GGUF string: its length checked against the file, then against lim->max_string. */
static int rd_str(struct rd *r, const char *what, const uint8_t **ret_p, uint64_t *ret_len)
{
	uint64_t len, at = r->pos;
	int rc;

	if ((rc = rd_u64(r, what, &len)))
		return rc;
	if (len > r->file_size - r->pos)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF %s%s at byte %" PRIu64 " claims %" PRIu64
				    " bytes but only %" PRIu64 " remain in the file",
				    r->where, what, at, len, r->file_size - r->pos);
	if (len > r->lim->max_string)
		return wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "GGUF %s%s at byte %" PRIu64 " is %" PRIu64
				    " bytes long, over the limit of %" PRIu64,
				    r->where, what, at, len, r->lim->max_string);
	if ((rc = take(r, len, what, ret_p)))
		return rc;
	*ret_len = len;
	return 0;
}

static void sb_put(struct sbuf *s, const char *p, size_t n)
{
	if (s->cut || s->oom)
		return;
	if (n > s->max - s->len) {
		n = s->max - s->len;
		s->cut = true;
	}
	if (s->len + n + 1 > s->cap) {
		size_t ncap = s->cap ? s->cap : 64;
		char *np;

		while (ncap < s->len + n + 1)
			ncap *= 2;
		np = realloc(s->p, ncap);
		if (!np) {
			s->oom = true;
			return;
		}
		s->p = np;
		s->cap = ncap;
	}
	memcpy(s->p + s->len, p, n);
	s->len += n;
	s->p[s->len] = '\0';
}

static void sb_str(struct sbuf *s, const char *p)
{
	sb_put(s, p, strlen(p));
}

/* A string inside an array: quoted, with quotes, backslashes and control bytes escaped. */
static void sb_quoted(struct sbuf *s, const uint8_t *p, uint64_t len)
{
	sb_put(s, "\"", 1);
	for (uint64_t i = 0; i < len && !s->cut; i++) {
		char esc[8];
		uint8_t c = p[i];

		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			sb_put(s, esc, 2);
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			sb_str(s, esc);
		} else {
			sb_put(s, (const char *)&p[i], 1);
		}
	}
	sb_put(s, "\"", 1);
}

/* Shortest text that reads back as the same value; whole numbers below 1e15 without exponent. */
static void fmt_f32(char *b, size_t n, float f)
{
	if (f == __builtin_truncf(f) && __builtin_fabsf(f) < 1e15f) {
		snprintf(b, n, "%.0f", (double)f);
		return;
	}
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(b, n, "%.*g", prec, (double)f);
		if (strtof(b, NULL) == f)
			return;
	}
}

static void fmt_f64(char *b, size_t n, double f)
{
	if (f == __builtin_trunc(f) && __builtin_fabs(f) < 1e15) {
		snprintf(b, n, "%.0f", f);
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(b, n, "%.*g", prec, f);
		if (strtod(b, NULL) == f)
			return;
	}
}

/* Render one fixed-size scalar at p. */
static void fmt_scalar(char *b, size_t n, uint32_t type, const uint8_t *p)
{
	uint32_t u32;
	uint64_t u64;
	float f;
	double d;

	switch (type) {
	case V_U8: snprintf(b, n, "%u", p[0]); break;
	case V_I8: snprintf(b, n, "%d", (int8_t)p[0]); break;
	case V_U16: snprintf(b, n, "%u", (unsigned)(p[0] | p[1] << 8)); break;
	case V_I16: snprintf(b, n, "%d", (int16_t)(uint16_t)(p[0] | p[1] << 8)); break;
	case V_U32: snprintf(b, n, "%" PRIu32, le32(p)); break;
	case V_I32: snprintf(b, n, "%" PRId32, (int32_t)le32(p)); break;
	case V_U64: snprintf(b, n, "%" PRIu64, le64(p)); break;
	case V_I64: snprintf(b, n, "%" PRId64, (int64_t)le64(p)); break;
	case V_BOOL: snprintf(b, n, "%s", p[0] ? "true" : "false"); break;
	case V_F32:
		u32 = le32(p);
		memcpy(&f, &u32, sizeof(f));
		fmt_f32(b, n, f);
		break;
	case V_F64:
		u64 = le64(p);
		memcpy(&d, &u64, sizeof(d));
		fmt_f64(b, n, d);
		break;
	default: snprintf(b, n, "?"); break;
	}
}

/*
 * Parse one value of `type` at the cursor. When `out` is not NULL its text is appended there
 * (top-level strings verbatim but for NUL bytes, written \x00; strings inside arrays quoted).
 * `tname` (GGUF_TYPE_NAME bytes) receives the type's name: "u32", "string", "array[string]", and
 * for arrays of arrays "array[<inner>]" when every inner array has the same type, else
 * "array[array]". `budget` counts down the array elements one metadata entry may hold, nested
 * included (lim->max_array). Depth is the array nesting around this value.
 */
static int parse_value(struct rd *r, uint32_t type, uint32_t depth, uint64_t *budget,
		       struct sbuf *out, char *tname)
{
	uint32_t etype, max_depth;
	uint64_t count, at;
	const uint8_t *p;
	char ename[GGUF_TYPE_NAME], sub[GGUF_TYPE_NAME], num[64];
	bool render, mixed = false;
	int rc;

	if (type >= V_COUNT)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF %shas unknown value type %" PRIu32 " at byte %" PRIu64,
				    r->where, type, r->pos - 4);
	snprintf(tname, GGUF_TYPE_NAME, "%s", vtype_names[type]);
	if (vtype_size[type]) {
		if ((rc = take(r, vtype_size[type], "value", &p)))
			return rc;
		if (type == V_BOOL && p[0] > 1)
			return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					    "GGUF %shas a bool of value %u at byte %" PRIu64
					    " (only 0 and 1 are valid)",
					    r->where, p[0], r->pos - 1);
		if (out) {
			fmt_scalar(num, sizeof(num), type, p);
			sb_str(out, num);
		}
		return 0;
	}
	if (type == V_STRING) {
		if ((rc = rd_str(r, "string value", &p, &count)))
			return rc;
		if (!out)
			return 0;
		if (depth > 0) {
			sb_quoted(out, p, count);
			return 0;
		}
		for (uint64_t i = 0, run = 0; i <= count; i++) {
			if (i < count && p[i] != '\0')
				continue;
			sb_put(out, (const char *)p + run, i - run);
			if (i < count)
				sb_str(out, "\\x00");
			run = i + 1;
		}
		return 0;
	}

	/* An array. */
	at = r->pos;
	max_depth = r->lim->max_array_depth < GGUF_DEPTH_CAP ? r->lim->max_array_depth
							      : GGUF_DEPTH_CAP;
	if (depth + 1 > max_depth)
		return wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "GGUF %snests arrays %u deep at byte %" PRIu64
				    ", over the limit of %" PRIu32,
				    r->where, depth + 1, at, max_depth);
	if ((rc = rd_u32(r, "array element type", &etype)) || (rc = rd_u64(r, "array length", &count)))
		return rc;
	if (etype >= V_COUNT)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF %shas an array of unknown element type %" PRIu32
				    " at byte %" PRIu64,
				    r->where, etype, at);
	if (count > (r->file_size - r->pos) / vtype_min[etype])
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF %shas an array of %" PRIu64 " %s values at byte %" PRIu64
				    " but only %" PRIu64 " bytes remain in the file",
				    r->where, count, vtype_names[etype], at, r->file_size - r->pos);
	if (count > *budget)
		return wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "GGUF %shas an array of %" PRIu64 " values at byte %" PRIu64
				    ", over the limit of %" PRIu64 " array elements per entry",
				    r->where, count, at, r->lim->max_array);
	*budget -= count;

	render = out && count <= GGUF_ARRAY_SHOWN;
	if (vtype_size[etype] && etype != V_BOOL && !render) {
		/* Fixed-size elements nobody will read: skip them in one step. */
		if ((rc = take(r, count * vtype_size[etype], "array elements", &p)))
			return rc;
		snprintf(ename, sizeof(ename), "%s", vtype_names[etype]);
	} else {
		snprintf(ename, sizeof(ename), "%s", vtype_names[etype]);
		if (render)
			sb_put(out, "[", 1);
		for (uint64_t i = 0; i < count; i++) {
			if (render && i)
				sb_put(out, ", ", 2);
			rc = parse_value(r, etype, depth + 1, budget, render ? out : NULL, sub);
			if (rc)
				return rc;
			if (etype != V_ARRAY)
				continue;
			if (i == 0)
				snprintf(ename, sizeof(ename), "%s", sub);
			else if (strcmp(ename, sub) != 0)
				mixed = true;
		}
		if (render)
			sb_put(out, "]", 1);
		if (mixed)
			snprintf(ename, sizeof(ename), "array");
	}
	if (out && !render) {
		snprintf(num, sizeof(num), "[%" PRIu64 " x ", count);
		sb_str(out, num);
		sb_str(out, ename);
		sb_put(out, "]", 1);
	}
	if (strlen(ename) + sizeof("array[]") > GGUF_TYPE_NAME)
		snprintf(tname, GGUF_TYPE_NAME, "array[array]");
	else
		snprintf(tname, GGUF_TYPE_NAME, "array[%s]", ename);
	return 0;
}

static uint64_t hash_bytes(const uint8_t *p, uint64_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint64_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* Room for n strings at a load of at most one half. */
static int hset_init(struct hset *s, uint64_t n)
{
	size_t slots = 16;

	while (slots / 2 < n)
		slots *= 2;
	s->e = calloc(slots, sizeof(*s->e));
	if (!s->e)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	s->mask = slots - 1;
	return 0;
}

/* Insert; false when the string was already there. */
static bool hset_add(struct hset *s, const uint8_t *p, uint64_t len)
{
	size_t i = hash_bytes(p, len) & s->mask;

	while (s->e[i].p) {
		if (s->e[i].len == len && memcmp(s->e[i].p, p, len) == 0)
			return false;
		i = (i + 1) & s->mask;
	}
	s->e[i].p = p;
	s->e[i].len = len;
	return true;
}

static void hset_free(struct hset *s)
{
	free(s->e);
	s->e = NULL;
}

/* Drop whatever was appended to the table past the given counts. */
static void table_truncate(struct wd_tensor_table *t, size_t n_tensors, size_t n_meta)
{
	while (t->n_tensors > n_tensors)
		free(t->tensors[--t->n_tensors].name);
	while (t->n_meta > n_meta) {
		struct wd_meta *m = &t->meta[--t->n_meta];

		free(m->key);
		free(m->value);
		free(m->type);
	}
}

/*
 * The first control byte (NUL, 0x01-0x1f, 0x7f) in a key or tensor name, or -1. Names travel into
 * C strings, error sentences and logs, where such bytes would cut or forge text; real files use
 * printable ASCII (the spec asks lower_snake_case keys), so they are refused.
 */
static int control_byte(const uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (p[i] < 0x20 || p[i] == 0x7f)
			return p[i];
	return -1;
}

/* The name of a key or tensor as a C string (the caller checked it holds no control byte). */
static char *dup_name(const uint8_t *p, uint64_t len)
{
	char *s = malloc(len + 1);

	if (s) {
		memcpy(s, p, len);
		s[len] = '\0';
	}
	return s;
}

/* Parse one metadata entry and append it; learns general.alignment. */
static int parse_kv(struct rd *r, uint64_t idx, struct hset *keys, struct wd_tensor_table *table,
		    uint32_t *alignment)
{
	const uint8_t *key;
	uint64_t klen, at = r->pos, budget = r->lim->max_array;
	uint32_t type;
	struct sbuf text = { .max = GGUF_RENDER_MAX };
	char tname[GGUF_TYPE_NAME];
	char *k = NULL;
	int rc;

	snprintf(r->where, sizeof(r->where), "metadata entry #%" PRIu64 " ", idx);
	if ((rc = rd_str(r, "key", &key, &klen)))
		return rc;
	if (klen == 0)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF metadata entry #%" PRIu64 " at byte %" PRIu64 " has an empty key",
				    idx, at);
	if (klen > GGUF_MAX_KEY)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF metadata entry #%" PRIu64 " at byte %" PRIu64 " has a key of %"
				    PRIu64 " bytes; GGUF allows at most %u",
				    idx, at, klen, GGUF_MAX_KEY);
	if ((rc = control_byte(key, klen)) >= 0)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF metadata entry #%" PRIu64 " at byte %" PRIu64
				    " has a key with control byte 0x%02x in it",
				    idx, at, (unsigned)rc);
	snprintf(r->where, sizeof(r->where), "metadata key '%.*s' ", (int)(klen < 200 ? klen : 200),
		 (const char *)key);
	if (!hset_add(keys, key, klen))
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF %sat byte %" PRIu64 " is a duplicate: the key appears twice",
				    r->where, at);
	if ((rc = rd_u32(r, "value type", &type)))
		return rc;
	if (type == V_STRING) /* a top-level string is shown whole; max_string bounds it */
		text.max = SIZE_MAX / 2;
	if ((rc = parse_value(r, type, 0, &budget, &text, tname)))
		goto out;
	if (klen == sizeof("general.alignment") - 1 && memcmp(key, "general.alignment", klen) == 0) {
		uint32_t a;

		if (type != V_U32) {
			rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					  "GGUF general.alignment must be a u32, but its type is %s",
					  tname);
			goto out;
		}
		a = le32(r->buf + r->pos - 4);
		if (a == 0 || (a & (a - 1)) != 0) {
			rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					  "GGUF general.alignment is %" PRIu32
					  ", which is not a power of two",
					  a);
			goto out;
		}
		*alignment = a;
	}
	if (text.cut) {
		/* Text past GGUF_RENDER_MAX was dropped: say so after what was kept. */
		text.cut = false;
		text.max += 3;
		sb_str(&text, "...");
	}
	if (text.oom || !(k = dup_name(key, klen))) {
		rc = wd_error_set(r->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory reading GGUF metadata");
		goto out;
	}
	if (wd_tensor_table_add_meta(table, k, text.p ? text.p : "", tname))
		rc = wd_error_set(r->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory reading GGUF metadata");
out:
	free(k);
	free(text.p);
	return rc;
}

/*
 * Parse one tensor info and append it with its offset still relative to the data section (the
 * caller makes it absolute once the header's end, hence the data section, is known).
 */
static int parse_tinfo(struct rd *r, uint64_t idx, struct hset *names, uint32_t alignment,
		       uint32_t file, struct wd_tensor_table *table)
{
	struct wd_tensor_info ti = { 0 };
	const struct wd_dtype_info *di;
	const uint8_t *name, *dp;
	uint64_t nlen, at = r->pos, dims[GGUF_MAX_DIMS], nelems = 1, off;
	uint32_t ndims, gtype;
	char *n = NULL;
	int rc;

	snprintf(r->where, sizeof(r->where), "tensor info #%" PRIu64 " ", idx);
	if ((rc = rd_str(r, "name", &name, &nlen)))
		return rc;
	if (nlen == 0)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF tensor info #%" PRIu64 " at byte %" PRIu64 " has an empty name",
				    idx, at);
	if (nlen >= WD_MAX_NAME)
		return wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "GGUF tensor info #%" PRIu64 " at byte %" PRIu64 " has a name of %"
				    PRIu64 " bytes, over the limit of %d",
				    idx, at, nlen, WD_MAX_NAME - 1);
	if ((rc = control_byte(name, nlen)) >= 0)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF tensor info #%" PRIu64 " at byte %" PRIu64
				    " has a name with control byte 0x%02x in it",
				    idx, at, (unsigned)rc);
	if (nlen > GGUF_MAX_NAME)
		return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				    "GGUF tensor info #%" PRIu64 " at byte %" PRIu64 " has a name of %"
				    PRIu64 " bytes; GGUF allows tensor names of at most %u bytes",
				    idx, at, nlen, GGUF_MAX_NAME);
	if (!(n = dup_name(name, nlen)))
		return wd_error_set(r->err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "out of memory reading GGUF tensor infos");
	snprintf(r->where, sizeof(r->where), "tensor '%s' ", n);
	if (!hset_add(names, name, nlen)) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF tensor '%s' at byte %" PRIu64 " is a duplicate: the name appears twice",
				  n, at);
		goto out;
	}
	if ((rc = rd_u32(r, "dimension count", &ndims)))
		goto out;
	if (ndims > GGUF_MAX_DIMS) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF tensor '%s' has %" PRIu32 " dimensions; GGUF allows at most %u",
				  n, ndims, GGUF_MAX_DIMS);
		goto out;
	}
	if ((rc = take(r, 8ull * ndims, "dimensions", &dp)))
		goto out;
	for (uint32_t i = 0; i < ndims; i++) {
		dims[i] = le64(dp + 8 * i);
		/* ggml reads dims as int64_t ne[]: the top bit set is a negative dimension. */
		if (dims[i] > (uint64_t)INT64_MAX) {
			rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					  "GGUF tensor '%s' has a negative dimension: dims[%" PRIu32
					  "] in file order (shape axis %" PRIu32 ") is %" PRId64,
					  n, i, ndims - 1 - i, (int64_t)dims[i]);
			goto out;
		}
	}
	/* A zero dimension is a valid tensor of no elements and 0 bytes (ggml writes them). */
	for (uint32_t i = 0; i < ndims; i++)
		if (dims[i] == 0)
			nelems = 0;
	for (uint32_t i = 0; i < ndims && nelems; i++) {
		if (!wd_mul_u64(nelems, dims[i], &nelems) || nelems > (uint64_t)INT64_MAX) {
			rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					  "GGUF tensor '%s' has dimensions whose element count overflows",
					  n);
			goto out;
		}
	}
	if ((rc = rd_u32(r, "type", &gtype)))
		goto out;
	ti.dtype = wd_dtype_from_ggml(gtype);
	if (ti.dtype == WD_DTYPE_INVALID) {
		rc = wd_error_set(r->err, WEIGHTD_E_UNSUPPORTED,
				  "GGUF tensor '%s' has ggml type %" PRIu32 ", which weightd does not know",
				  n, gtype);
		goto out;
	}
	di = wd_dtype_info(ti.dtype);
	/* The row is the innermost dimension: dims[0] in file order (1 for a 0-d tensor). */
	if ((ndims ? dims[0] : 1) % di->block_elems) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF tensor '%s' has rows of %" PRIu64
				  " elements, not a whole number of %s blocks of %" PRIu32 " elements",
				  n, ndims ? dims[0] : 1, di->name, di->block_elems);
		if (r->err) {
			r->err->expected = di->block_elems;
			r->err->actual = (int64_t)(ndims ? dims[0] : 1);
		}
		goto out;
	}
	if (!wd_dtype_bytes(ti.dtype, nelems, &ti.nbytes)) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF tensor '%s' is too large: its byte length overflows", n);
		goto out;
	}
	if ((rc = rd_u64(r, "offset", &off)))
		goto out;
	if (off % alignment) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF tensor '%s' has data offset %" PRIu64
				  ", which is not a multiple of the alignment %" PRIu32,
				  n, off, alignment);
		goto out;
	}
	ti.name = n;
	ti.ndim = (int)ndims;
	for (uint32_t i = 0; i < ndims; i++)
		ti.shape[i] = dims[ndims - 1 - i];
	ti.file = file;
	ti.offset = off;
	if (wd_tensor_table_add(table, &ti))
		rc = wd_error_set(r->err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				  "out of memory reading GGUF tensor infos");
out:
	if (rc && rc != -GGUF_NEED_MORE)
		wd_error_about(r->err, NULL, n);
	free(n);
	return rc;
}

struct span {
	uint64_t off, end;
	size_t idx;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Make offsets absolute and check every tensor's bytes lie in the file without overlapping. */
static int place_tensors(struct rd *r, struct wd_tensor_table *table, size_t first,
			 uint64_t data_start)
{
	size_t n = table->n_tensors - first;
	struct span *sp = NULL;
	int rc = 0;

	for (size_t i = first; i < table->n_tensors; i++) {
		struct wd_tensor_info *t = &table->tensors[i];
		uint64_t abs, end;

		if (!wd_add_u64(data_start, t->offset, &abs) || !wd_add_u64(abs, t->nbytes, &end) ||
		    end > r->file_size) {
			wd_error_about(r->err, NULL, t->name);
			return wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					    "GGUF tensor '%s' has %" PRIu64 " bytes at offset %" PRIu64
					    " of the data section (which starts at byte %" PRIu64
					    "), past the end of the file at byte %" PRIu64,
					    t->name, t->nbytes, t->offset, data_start, r->file_size);
		}
		t->offset = abs;
	}
	if (n < 2)
		return 0;
	sp = malloc(n * sizeof(*sp));
	if (!sp)
		return wd_error_set(r->err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "out of memory checking GGUF tensor data");
	/* A 0-byte tensor holds no bytes, so it overlaps nothing wherever its offset points. */
	n = 0;
	for (size_t i = first; i < table->n_tensors; i++) {
		if (!table->tensors[i].nbytes)
			continue;
		sp[n].off = table->tensors[i].offset;
		sp[n].end = sp[n].off + table->tensors[i].nbytes;
		sp[n].idx = i;
		n++;
	}
	qsort(sp, n, sizeof(*sp), span_cmp);
	for (size_t i = 1; i < n; i++) {
		const struct wd_tensor_info *a = &table->tensors[sp[i - 1].idx];
		const struct wd_tensor_info *b = &table->tensors[sp[i].idx];

		if (sp[i].off < sp[i - 1].end) {
			wd_error_about(r->err, NULL, b->name);
			rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
					  "GGUF tensor '%s' (bytes %" PRIu64 "..%" PRIu64
					  ") overlaps tensor '%s' (bytes %" PRIu64 "..%" PRIu64 ")",
					  b->name, sp[i].off, sp[i].end, a->name, sp[i - 1].off,
					  sp[i - 1].end);
			break;
		}
	}
	free(sp);
	return rc;
}

/* The whole header; on any failure (GGUF_NEED_MORE included) the table is as it was. */
static int parse(struct rd *r, uint32_t file, struct wd_tensor_table *table)
{
	size_t n_tensors0 = table->n_tensors, n_meta0 = table->n_meta;
	struct hset keys = { 0 }, names = { 0 };
	const uint8_t *p;
	uint32_t version, alignment = GGUF_DEFAULT_ALIGNMENT;
	uint64_t n_tensors, n_kv, least, tmp, data_start;
	int rc;

	snprintf(r->where, sizeof(r->where), "header ");
	if ((rc = take(r, 4, "magic", &p)))
		goto out;
	if (memcmp(p, "GGUF", 4) != 0) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF magic missing: the file starts with bytes %02x %02x %02x %02x, not \"GGUF\"",
				  p[0], p[1], p[2], p[3]);
		goto out;
	}
	if ((rc = rd_u32(r, "version", &version)))
		goto out;
	if (version != 2 && version != 3) {
		uint32_t swapped = __builtin_bswap32(version);

		if (version > 0xffff && swapped <= 0xffff)
			rc = wd_error_set(r->err, WEIGHTD_E_UNSUPPORTED,
					  "big-endian GGUF is not supported (the version field reads %"
					  PRIu32 " byte-swapped)",
					  swapped);
		else
			rc = wd_error_set(r->err, WEIGHTD_E_UNSUPPORTED,
					  "GGUF version %" PRIu32
					  " is not supported; weightd reads versions 2 and 3",
					  version);
		goto out;
	}
	if ((rc = rd_u64(r, "tensor count", &n_tensors)) || (rc = rd_u64(r, "metadata count", &n_kv)))
		goto out;
	/* Every entry takes some bytes: refuse counts the file cannot hold before sizing anything. */
	if (!wd_mul_u64(n_tensors, GGUF_MIN_TINFO, &least) || !wd_mul_u64(n_kv, GGUF_MIN_KV, &tmp) ||
	    !wd_add_u64(least, tmp, &least) || !wd_add_u64(least, GGUF_HEADER, &least) ||
	    least > r->file_size) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF header declares %" PRIu64 " tensors and %" PRIu64
				  " metadata entries, more than a file of %" PRIu64 " bytes can hold",
				  n_tensors, n_kv, r->file_size);
		goto out;
	}
	if (n_tensors > r->lim->max_tensors) {
		rc = wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				  "GGUF header declares %" PRIu64 " tensors, over the limit of %" PRIu64,
				  n_tensors, r->lim->max_tensors);
		goto out;
	}
	if (n_kv > r->lim->max_metadata) {
		rc = wd_error_set(r->err, WEIGHTD_E_LIMIT_EXCEEDED,
				  "GGUF header declares %" PRIu64
				  " metadata entries, over the limit of %" PRIu64,
				  n_kv, r->lim->max_metadata);
		goto out;
	}
	if ((rc = hset_init(&keys, n_kv)) || (rc = hset_init(&names, n_tensors))) {
		rc = wd_error_set(r->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory reading a GGUF header");
		goto out;
	}
	for (uint64_t i = 0; i < n_kv; i++)
		if ((rc = parse_kv(r, i, &keys, table, &alignment)))
			goto out;
	for (uint64_t i = 0; i < n_tensors; i++)
		if ((rc = parse_tinfo(r, i, &names, alignment, file, table)))
			goto out;
	/* The data section starts at the header's end rounded up to the alignment. */
	if (!wd_add_u64(r->pos, alignment - 1, &data_start)) {
		rc = wd_error_set(r->err, WEIGHTD_E_BAD_CHECKPOINT, "GGUF data section offset overflows");
		goto out;
	}
	data_start &= ~(uint64_t)(alignment - 1);
	rc = place_tensors(r, table, n_tensors0, data_start);
out:
	hset_free(&keys);
	hset_free(&names);
	if (rc)
		table_truncate(table, n_tensors0, n_meta0);
	return rc;
}

int wd_gguf_parse(const uint8_t *buf, size_t buf_len, uint64_t file_size, uint32_t file,
		  const struct wd_limits *lim, struct wd_tensor_table *table, weightd_error *err)
{
	struct rd r = {
		.buf = buf,
		.len = buf_len < file_size ? buf_len : file_size,
		.file_size = file_size,
		.lim = lim ? lim : &default_limits,
		.err = err,
	};
	int rc;

	if (!table || (!buf && buf_len))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "wd_gguf_parse needs a table and a buffer");
	rc = parse(&r, file, table);
	if (rc == -GGUF_NEED_MORE)
		rc = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				  "GGUF header is truncated: it continues past the %" PRIu64
				  " bytes given (needs at least %" PRIu64 ")",
				  r.len, r.need);
	return rc;
}

/* pread exactly n bytes at off; a file that ends early has changed since it was measured. */
static int read_exact(int fd, uint8_t *p, uint64_t n, uint64_t off, weightd_error *err)
{
	while (n) {
		ssize_t got = pread(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return wd_error_set(err, WEIGHTD_E_IO, "reading the GGUF header at byte %" PRIu64
					    " failed: %s", off, strerror(errno));
		if (got == 0)
			return wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
					    "the GGUF file ends at byte %" PRIu64
					    ", before the size it had when opened",
					    off);
		p += got;
		n -= (uint64_t)got;
		off += (uint64_t)got;
	}
	return 0;
}

static int fd_reader(void *ctx, uint8_t *buf, uint64_t n, uint64_t off, weightd_error *err)
{
	return read_exact(*(const int *)ctx, buf, n, off, err);
}

int wd_gguf_read(int fd, uint64_t file_size, uint32_t file, const struct wd_limits *lim,
		 struct wd_tensor_table *table, weightd_error *err)
{
	return wd_gguf_read_with(fd_reader, &fd, file_size, file, lim, table, err);
}

int wd_gguf_read_with(wd_gguf_reader_fn *reader, void *ctx, uint64_t file_size, uint32_t file,
		      const struct wd_limits *lim, struct wd_tensor_table *table,
		      weightd_error *err)
{
	const struct wd_limits *l = lim ? lim : &default_limits;
	uint64_t cap = file_size < l->max_header_bytes ? file_size : l->max_header_bytes;
	uint64_t have = 0, want = cap < GGUF_FIRST_READ ? cap : GGUF_FIRST_READ;
	uint8_t *buf = NULL;
	int rc;

	if (!table)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "wd_gguf_read needs a table");
	for (;;) {
		struct rd r = { .file_size = file_size, .lim = l, .err = err };

		if (want > have) {
			uint8_t *nb;

			if (want > SIZE_MAX) {
				rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "GGUF header too large to read");
				break;
			}
			nb = realloc(buf, (size_t)want);
			if (!nb) {
				rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
						  "out of memory reading a GGUF header of %" PRIu64
						  " bytes", want);
				break;
			}
			buf = nb;
			if ((rc = reader(ctx, buf + have, want - have, have, err)))
				break;
			have = want;
		}
		r.buf = buf;
		r.len = have;
		rc = parse(&r, file, table);
		if (rc != -GGUF_NEED_MORE)
			break;
		/* take() only asks for bytes the file has, within the limit: need <= cap. */
		want = have * 2 > r.need ? have * 2 : r.need;
		if (want > cap)
			want = cap;
		if (want <= have) {
			rc = wd_error_set(err, WEIGHTD_E_INTERNAL, "GGUF header read made no progress");
			break;
		}
	}
	free(buf);
	return rc;
}
