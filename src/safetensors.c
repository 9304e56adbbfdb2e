/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.c - validating a safetensors header (8-byte length + JSON) without touching payload. */
#include "safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checked.h"

/*
 * The format (huggingface/safetensors README): 8 bytes N, an unsigned little-endian u64; N bytes of
 * UTF-8 JSON that begins with '{' and may be padded at its end with spaces; then the data section.
 * Each tensor's data_offsets [begin, end) are relative to the start of the data section. The
 * entries must tile the data section: no holes, no overlaps, nothing left over.
 */

#define HEADER_LEN_BYTES 8

/* One header entry while the table is being validated. */
struct entry {
	const char *name;   /* borrowed from the JSON tree */
	enum wd_dtype dtype;
	int ndim;
	uint64_t shape[WD_MAX_DIMS];
	uint64_t begin, end; /* relative to the data section */
};

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* "[2, 3]" into buf (truncated with "..." if it does not fit). */
static const char *fmt_shape(const uint64_t *shape, int ndim, char *buf, size_t len)
{
	size_t off = 0;
	int n;

	n = snprintf(buf, len, "[");
	off = n > 0 ? (size_t)n : 0;
	for (int i = 0; i < ndim && off < len; i++) {
		n = snprintf(buf + off, len - off, "%s%" PRIu64, i ? ", " : "", shape[i]);
		if (n < 0)
			break;
		off += (size_t)n;
	}
	if (off < len)
		snprintf(buf + off, len - off, "]");
	return buf;
}

static int set_tensor_err(weightd_error *err, int code, const char *tensor, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Fill err with a sentence about tensor `tensor`; returns -code. */
static int set_tensor_err(weightd_error *err, int code, const char *tensor, const char *fmt, ...)
{
	char msg[640];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wd_error_about(err, NULL, tensor);
	return wd_error_set(err, code, "safetensors header: tensor '%.200s': %s", tensor, msg);
}

/* A JSON integer in [0, INT64_MAX], or false. */
static bool json_u64(const json_t *v, uint64_t *ret)
{
	json_int_t i;

	if (!json_is_integer(v))
		return false;
	i = json_integer_value(v);
	if (i < 0)
		return false;
	*ret = (uint64_t)i;
	return true;
}

static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return json_integer_value(v) < 0 ? "a negative integer" : "an integer";
	case JSON_REAL: return "a real number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	}
	return "an unknown JSON value";
}

/*
 * jansson refuses integers outside int64 ("too big integer") though the JSON is valid. Parse again
 * with integers read as reals to find the shape dimension or data offset that holds one, and name
 * it; weightd reads dimensions and offsets up to 2^63-1. `first` is the error of the first parse.
 */
static int report_big_integer(const char *hdr, size_t hlen, const json_error_t *first,
			      weightd_error *err)
{
	static const char *const fields[] = { "shape", "data_offsets" };
	json_error_t jerr;
	json_t *root, *val;
	const char *key;
	int r = 0;

	root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
	if (root && json_is_object(root)) {
		json_object_foreach(root, key, val) {
			if (strcmp(key, "__metadata__") == 0 || !json_is_object(val))
				continue;
			for (size_t f = 0; f < 2 && !r; f++) {
				const json_t *arr = json_object_get(val, fields[f]);

				for (size_t i = 0; json_is_array(arr) && i < json_array_size(arr); i++) {
					const json_t *v = json_array_get(arr, i);
					double d = json_is_real(v) ? json_real_value(v) : 0;

					if (d < 0x1p63 && d > -0x1p63)
						continue;
					if (f == 0)
						r = set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, key,
								   "shape dimension %zu is %s, beyond what weightd reads (dimensions up to 2^63-1 = %" PRId64 ")",
								   i, d < 0 ? "a negative integer" : "above 2^63-1",
								   INT64_MAX);
					else
						r = set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, key,
								   "data_offsets %s is %s, beyond what weightd reads (offsets up to 2^63-1 = %" PRId64 ")",
								   i ? "end" : "begin",
								   d < 0 ? "a negative integer" : "above 2^63-1",
								   INT64_MAX);
					break;
				}
			}
			if (r)
				break;
		}
	}
	if (!r)
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: the integer ending at line %d column %d is outside -2^63..2^63-1, the range weightd reads (the JSON itself is valid)",
				 first->line, first->column);
	json_decref(root);
	return r;
}

/* __metadata__: an object of string -> string, within limits. Appended as type "string". */
static int parse_metadata(const json_t *md, const struct wd_limits *lim,
			  struct wd_tensor_table *table, weightd_error *err)
{
	const char *key;
	json_t *val;

	if (!json_is_object(md))
		return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				    "safetensors header: __metadata__ is %s, expected an object of string values",
				    json_kind(md));
	if (json_object_size(md) > lim->max_metadata)
		return wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "safetensors header: __metadata__ has %zu entries, more than the limit of %" PRIu64,
				    json_object_size(md), lim->max_metadata);
	json_object_foreach((json_t *)md, key, val) {
		if (!json_is_string(val))
			return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					    "safetensors header: __metadata__ entry '%.200s' is %s, expected a string",
					    key, json_kind(val));
		if (strlen(key) > lim->max_string || json_string_length(val) > lim->max_string)
			return wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
					    "safetensors header: __metadata__ entry '%.200s' is longer than the limit of %" PRIu64 " bytes",
					    key, lim->max_string);
		if (wd_tensor_table_add_meta(table, key, json_string_value(val), "string"))
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					    "out of memory storing safetensors metadata");
	}
	return 0;
}

/*
 * Check one tensor entry's own fields (dtype, shape, data_offsets, byte count, within the data
 * section of data_len bytes) and fill *e. Relations between entries are checked by the caller.
 */
static int parse_entry(const char *name, const json_t *obj, uint64_t data_len, struct entry *e,
		       weightd_error *err)
{
	const json_t *dt, *shape, *offs;
	const char *dname;
	uint64_t nelems, need;
	char sbuf[256];
	size_t i;

	if (strlen(name) > WD_MAX_NAME)
		return set_tensor_err(err, WEIGHTD_E_LIMIT_EXCEEDED, name,
				      "name is %zu bytes, longer than the limit of %d",
				      strlen(name), WD_MAX_NAME);
	if (!json_is_object(obj))
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "entry is %s, expected an object with dtype, shape and data_offsets",
				      json_kind(obj));

	dt = json_object_get(obj, "dtype");
	if (!dt)
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name, "has no \"dtype\"");
	if (!json_is_string(dt))
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name, "\"dtype\" is %s, expected a string",
				      json_kind(dt));
	dname = json_string_value(dt);
	e->dtype = wd_dtype_from_name(dname);
	if (!wd_dtype_is_element(e->dtype))
		return set_tensor_err(err, WEIGHTD_E_UNSUPPORTED, name,
				      "dtype \"%.64s\" is not a safetensors dtype weightd supports (BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2)",
				      dname);

	shape = json_object_get(obj, "shape");
	if (!shape)
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name, "has no \"shape\"");
	if (!json_is_array(shape))
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name, "\"shape\" is %s, expected an array",
				      json_kind(shape));
	if (json_array_size(shape) > WD_MAX_DIMS)
		return set_tensor_err(err, WEIGHTD_E_LIMIT_EXCEEDED, name,
				      "shape has %zu dimensions, more than the limit of %d",
				      json_array_size(shape), WD_MAX_DIMS);
	e->ndim = (int)json_array_size(shape);
	for (i = 0; i < json_array_size(shape); i++)
		if (!json_u64(json_array_get(shape, i), &e->shape[i]))
			return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
					      "shape dimension %zu is %s, expected a non-negative integer", i,
					      json_kind(json_array_get(shape, i)));

	offs = json_object_get(obj, "data_offsets");
	if (!offs)
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name, "has no \"data_offsets\"");
	if (!json_is_array(offs) || json_array_size(offs) != 2)
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "\"data_offsets\" is %s%s, expected an array [begin, end]", json_kind(offs),
				      json_is_array(offs) ? " whose length is not 2" : "");
	if (!json_u64(json_array_get(offs, 0), &e->begin) || !json_u64(json_array_get(offs, 1), &e->end))
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "\"data_offsets\" holds %s and %s, expected two non-negative integers",
				      json_kind(json_array_get(offs, 0)), json_kind(json_array_get(offs, 1)));
	if (e->begin > e->end)
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "data_offsets [%" PRIu64 ", %" PRIu64 "] are out of order (begin after end)",
				      e->begin, e->end);
	if (e->end > data_len)
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "data_offsets [%" PRIu64 ", %" PRIu64 "] reach past the end of the file (the data section holds %" PRIu64 " bytes)",
				      e->begin, e->end, data_len);

	fmt_shape(e->shape, e->ndim, sbuf, sizeof(sbuf));
	if (!wd_shape_elems(e->shape, e->ndim, &nelems))
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "shape %s has more elements than fit in 64 bits", sbuf);
	if (!wd_dtype_bytes(e->dtype, nelems, &need))
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "shape %s of %s needs more bytes than fit in 64 bits (%" PRIu64 " elements x %zu bytes)",
				      sbuf, dname, nelems, wd_dtype_size(e->dtype));
	if (need != e->end - e->begin) {
		if (err) {
			err->expected = need > INT64_MAX ? INT64_MAX : (int64_t)need;
			err->actual = (int64_t)(e->end - e->begin);
		}
		return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, name,
				      "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64 " bytes but shape %s of %s needs %" PRIu64 " (%" PRIu64 " elements x %zu bytes)",
				      e->begin, e->end, e->end - e->begin, sbuf, dname, need, nelems,
				      wd_dtype_size(e->dtype));
	}
	e->name = name;
	return 0;
}

/* Data-offset order; empty tensors sharing an offset are ordered by name so output is stable. */
static int entry_cmp(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * After sorting by offset, the entries must follow each other without gaps or overlaps from 0 to
 * data_len. Empty tensors ([x, x]) take no room and may sit anywhere inside the section.
 */
static int check_tiling(const struct entry *es, size_t n, uint64_t data_len, weightd_error *err)
{
	uint64_t pos = 0;
	const struct entry *prev = NULL;

	for (size_t i = 0; i < n; i++) {
		const struct entry *e = &es[i];

		if (e->begin < pos)
			return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, e->name,
					      "data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor '%.200s' at [%" PRIu64 ", %" PRIu64 "]",
					      e->begin, e->end, prev->name, prev->begin, prev->end);
		if (e->begin > pos) {
			if (!prev)
				return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, e->name,
						      "the data section starts with %" PRIu64 " bytes that belong to no tensor (this first tensor begins at %" PRIu64 ")",
						      e->begin, e->begin);
			return set_tensor_err(err, WEIGHTD_E_BAD_CHECKPOINT, e->name,
					      "gap of %" PRIu64 " bytes between tensor '%.200s' (ends at %" PRIu64 ") and this tensor (begins at %" PRIu64 ")",
					      e->begin - pos, prev->name, pos, e->begin);
		}
		pos = e->end;
		prev = e;
	}
	if (pos != data_len) {
		if (err) {
			err->expected = (int64_t)data_len;
			err->actual = (int64_t)pos;
		}
		return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				    "safetensors header: the data section holds %" PRIu64 " bytes but the tensors cover only %" PRIu64 "; the last %" PRIu64 " bytes belong to no tensor",
				    data_len, pos, data_len - pos);
	}
	return 0;
}

int wd_safetensors_parse(const uint8_t *buf, size_t buf_len, uint64_t file_size, uint32_t file,
			 const struct wd_limits *lim, struct wd_tensor_table *table,
			 uint64_t *ret_data_start, weightd_error *err)
{
	static const struct wd_limits def = WD_LIMITS_DEFAULT;
	struct entry *es = NULL;
	json_t *root = NULL;
	json_error_t jerr;
	uint64_t hlen, data_start, data_len;
	const char *key;
	json_t *val;
	size_t n = 0, ntensors;
	int r;

	if (!lim)
		lim = &def;
	if (file_size < HEADER_LEN_BYTES) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: truncated: the file is %" PRIu64 " bytes, too short for the 8-byte header length",
				 file_size);
		goto out;
	}
	if (buf_len < HEADER_LEN_BYTES) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: truncated: %zu bytes read, too few for the 8-byte header length",
				 buf_len);
		goto out;
	}
	hlen = le64(buf);
	if (hlen > lim->max_header_bytes) {
		if (err) {
			err->expected = (int64_t)lim->max_header_bytes;
			err->actual = hlen > INT64_MAX ? INT64_MAX : (int64_t)hlen;
		}
		r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				 "safetensors header: header length %" PRIu64 " is over the limit of %" PRIu64 " bytes",
				 hlen, lim->max_header_bytes);
		goto out;
	}
	if (hlen > file_size - HEADER_LEN_BYTES) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: header length %" PRIu64 " reaches past the end of the file (%" PRIu64 " bytes, so at most %" PRIu64 " header bytes)",
				 hlen, file_size, file_size - HEADER_LEN_BYTES);
		goto out;
	}
	data_start = HEADER_LEN_BYTES + hlen;
	data_len = file_size - data_start;
	if (buf_len - HEADER_LEN_BYTES < hlen) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: truncated: %zu bytes read, the header needs %" PRIu64,
				 buf_len, data_start);
		goto out;
	}
	if (hlen == 0 || buf[HEADER_LEN_BYTES] != '{') {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: the JSON header does not begin with '{' (it must be a JSON object)");
		goto out;
	}

	/* The format lets the header end in spaces (0x20); some writers pad with NUL bytes instead. */
	{
		const uint8_t *h = buf + HEADER_LEN_BYTES;
		uint64_t end = hlen, nul = UINT64_MAX;

		while (end > 0 && (h[end - 1] == ' ' || h[end - 1] == '\0')) {
			end--;
			if (h[end] == '\0')
				nul = end;
		}
		if (nul != UINT64_MAX) {
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "safetensors header: the JSON header is padded with NUL bytes (the first at byte %" PRIu64 " of the file); the format allows only spaces (0x20) as trailing padding",
					 HEADER_LEN_BYTES + nul);
			goto out;
		}
	}

	root = json_loadb((const char *)buf + HEADER_LEN_BYTES, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_numeric_overflow)
			r = report_big_integer((const char *)buf + HEADER_LEN_BYTES, (size_t)hlen, &jerr, err);
		else if (json_error_code(&jerr) == json_error_duplicate_key)
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "safetensors header: duplicate key at byte %d of the JSON header (%.200s); a name may appear only once",
					 jerr.position, jerr.text);
		else
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "safetensors header: not valid JSON at line %d column %d: %.200s",
					 jerr.line, jerr.column, jerr.text);
		goto out;
	}
	if (!json_is_object(root)) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "safetensors header: the JSON header is %s, expected an object",
				 json_kind(root));
		goto out;
	}

	ntensors = json_object_size(root);
	val = json_object_get(root, "__metadata__");
	if (val) {
		ntensors--;
		r = parse_metadata(val, lim, table, err);
		if (r)
			goto out;
	}
	if (ntensors > lim->max_tensors) {
		r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				 "safetensors header: %zu tensors, more than the limit of %" PRIu64, ntensors,
				 lim->max_tensors);
		goto out;
	}
	es = calloc(ntensors ? ntensors : 1, sizeof(*es));
	if (!es) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				 "out of memory for %zu safetensors entries", ntensors);
		goto out;
	}
	json_object_foreach(root, key, val) {
		if (strcmp(key, "__metadata__") == 0)
			continue;
		r = parse_entry(key, val, data_len, &es[n], err);
		if (r)
			goto out;
		n++;
	}

	qsort(es, n, sizeof(*es), entry_cmp);
	r = check_tiling(es, n, data_len, err);
	if (r)
		goto out;

	for (size_t i = 0; i < n; i++) {
		struct wd_tensor_info ti = {
			.name = (char *)es[i].name,
			.dtype = es[i].dtype,
			.ndim = es[i].ndim,
			.file = file,
			.offset = data_start + es[i].begin,
			.nbytes = es[i].end - es[i].begin,
		};
		memcpy(ti.shape, es[i].shape, sizeof(ti.shape));
		if (wd_tensor_table_add(table, &ti)) {
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "out of memory storing safetensors tensor table");
			goto out;
		}
	}
	if (ret_data_start)
		*ret_data_start = data_start;
	r = 0;
out:
	free(es);
	json_decref(root);
	return r;
}

/* pread exactly len bytes or fail; a short read means the file is shorter than its size said. */
static int pread_all(int fd, void *buf, size_t len, uint64_t off, weightd_error *err)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t k = pread(fd, p, len, (off_t)off);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return wd_error_set(err, WEIGHTD_E_IO, "reading the safetensors header at byte %" PRIu64 ": %s",
					    off, strerror(errno));
		}
		if (k == 0)
			return wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
					    "the file ended at byte %" PRIu64 " while reading its safetensors header (it shrank while being opened)",
					    off);
		p += k;
		off += (uint64_t)k;
		len -= (size_t)k;
	}
	return 0;
}

int wd_safetensors_read(int fd, uint64_t file_size, uint32_t file, const struct wd_limits *lim,
			struct wd_tensor_table *table, uint64_t *ret_data_start, weightd_error *err)
{
	static const struct wd_limits def = WD_LIMITS_DEFAULT;
	uint8_t head[HEADER_LEN_BYTES] = { 0 };
	uint8_t *buf = NULL;
	uint64_t hlen;
	int r;

	if (!lim)
		lim = &def;
	if (file_size < HEADER_LEN_BYTES)
		return wd_safetensors_parse(head, 0, file_size, file, lim, table, ret_data_start, err);
	r = pread_all(fd, head, sizeof(head), 0, err);
	if (r)
		return r;
	hlen = le64(head);
	/* The parser reports these; it needs only the 8 bytes to do so. */
	if (hlen > lim->max_header_bytes || hlen > file_size - HEADER_LEN_BYTES)
		return wd_safetensors_parse(head, sizeof(head), file_size, file, lim, table, ret_data_start, err);
	buf = malloc(HEADER_LEN_BYTES + hlen);
	if (!buf)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "out of memory for a %" PRIu64 "-byte safetensors header",
				    hlen);
	memcpy(buf, head, sizeof(head));
	r = pread_all(fd, buf + HEADER_LEN_BYTES, (size_t)hlen, HEADER_LEN_BYTES, err);
	if (r == 0)
		r = wd_safetensors_parse(buf, HEADER_LEN_BYTES + hlen, file_size, file, lim, table,
					 ret_data_start, err);
	free(buf);
	return r;
}
