/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_sources.c - weightctl list and describe: the checkpoints weightd serves, one in detail. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weightctl.h"

/* bytes of a GGUF metadata value describe shows in its table (--json has them whole) */
#define GGUF_VALUE_SHOWN 100u

/* Where a checkpoint is read from, by its path's scheme: "s3", "az", "https", "http" or "file". */
static const char *location_of(const char *path)
{
	static const char *const schemes[] = { "s3", "az", "https", "http" };

	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		size_t n = strlen(schemes[i]);

		if (strncmp(path, schemes[i], n) == 0 && strncmp(path + n, "://", 3) == 0)
			return schemes[i];
	}
	return "file";
}

json_t *json_source(const weightd_source_info *s)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:i}", "name", s->name,
			 "kind", s->kind, "location", location_of(s->path), "path", s->path,
			 "state", s->state, "error", s->error, "tensors", (json_int_t)s->tensors,
			 "bytes", (json_int_t)s->bytes, "generation", (json_int_t)s->generation,
			 "files", (int)s->files);
}

/* The kind as list shows it: a remote checkpoint's location after it ("sharded-safetensors
 * (s3)"). Allocated. */
static char *kind_shown(const weightd_source_info *s)
{
	const char *loc = location_of(s->path);

	if (strcmp(loc, "file") == 0)
		return output_strdup(s->kind);
	return output_fmt("%s%s(%s)", s->kind, s->kind[0] ? " " : "", loc);
}

int by_source_name(const void *a, const void *b)
{
	const weightd_source_info *x = *(const weightd_source_info *const *)a;
	const weightd_source_info *y = *(const weightd_source_info *const *)b;

	return strcmp(x->name, y->name);
}

void json_source_health(json_t *js, const weightd_source_health *h)
{
	if (!js || !h)
		return;
	json_object_set_new(js, "required", json_boolean(h->required));
	json_object_set_new(js, "preload", json_boolean(h->preload));
	json_object_set_new(js, "preloaded", json_boolean(h->preloaded));
	json_object_set_new(js, "admit_failures", json_integer((json_int_t)h->admit_failures));
	json_object_set_new(js, "retry_in_ms", json_integer((json_int_t)h->retry_in_ms));
}

/* The state as a table shows it: a failed remote admission with its count and when it is tried
 * again ("failed (3 tries, again in 8 s)"), a preload with "preloading" until it is resident. */
static char *state_shown(const weightd_source_info *s, const weightd_source_health *h)
{
	if (!h)
		return output_strdup(s->state);
	if (strcmp(s->state, "failed") == 0 && h->admit_failures)
		return h->retry_in_ms ?
			       output_fmt("failed (%u %s, again in %" PRIu64 " s)", h->admit_failures,
					  h->admit_failures == 1 ? "try" : "tries",
					  (h->retry_in_ms + 999) / 1000) :
			       output_fmt("failed (%u %s)", h->admit_failures,
					  h->admit_failures == 1 ? "try" : "tries");
	if (strcmp(s->state, "loading") == 0 && h->admit_failures)
		return output_fmt("loading (try %u)", h->admit_failures + 1);
	if (strcmp(s->state, "ready") == 0 && h->preload && !h->preloaded)
		return output_strdup("ready, preloading");
	return output_strdup(s->state);
}

void table_sources(const weightd_source_info *src, const weightd_source_health *health, size_t n)
{
	const void **order = output_sorted(src, n, sizeof(*src), by_source_name);
	static const char *const head[] = { "NAME", "KIND", "STATE", "TENSORS", "BYTES", "GEN",
					    "FILES", "PATH", "ERROR" };
	static const bool num[] = { 0, 0, 0, 1, 1, 1, 1, 0, 0 };
	struct table t = { .ncols = 9, .head = head, .numeric = num };

	for (size_t i = 0; i < n; i++) {
		const weightd_source_info *s = order[i];

		output_table_row(&t, output_strdup(s->name), kind_shown(s),
				 state_shown(s, health ? &health[s - src] : NULL),
				 output_fmt("%" PRIu64, s->tensors), output_fmt_bytes(s->bytes),
				 output_fmt("%" PRIu64, s->generation), output_fmt("%u", s->files),
				 output_strdup(s->path), output_strdup(s->error));
	}
	free(order);
	output_table_print(&t);
}

int cmd_list(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	weightd_source_list *l;
	weightd_error err;

	if (weightd_list(c, &l, &err) < 0)
		return output_fail_err(&err);
	if (o->json) {
		json_t *a = json_array();
		const void **order =
			output_sorted(l->sources, l->count, sizeof(*l->sources), by_source_name);

		for (size_t i = 0; i < l->count; i++) {
			const weightd_source_info *si = order[i];
			json_t *js = json_source(si);

			json_source_health(js, l->health ? &l->health[si - l->sources] : NULL);
			json_array_append_new(a, js);
		}
		free(order);
		weightd_source_list_free(l);
		return output_print_json(json_pack("{s:o}", "sources", a));
	}
	table_sources(l->sources, l->health, l->count);
	weightd_source_list_free(l);
	return 0;
}

/* A metadata entry by key, or NULL. */
static const weightd_meta_entry *meta_get(const weightd_description *d, const char *key)
{
	for (size_t i = 0; i < d->n_metadata; i++)
		if (strcmp(d->metadata[i].key, key) == 0)
			return &d->metadata[i];
	return NULL;
}

/* A string entry's value, or NULL when absent or not a string. */
static const char *meta_str(const weightd_description *d, const char *key)
{
	const weightd_meta_entry *m = meta_get(d, key);

	return m && strcmp(m->type, "string") == 0 ? m->value : NULL;
}

/* An unsigned integer entry (u8 ... u64, or a non-negative i8 ... i64) into *ret. */
static bool meta_uint(const weightd_description *d, const char *key, uint64_t *ret)
{
	const weightd_meta_entry *m = meta_get(d, key);
	char *end;

	if (!m || (m->type[0] != 'u' && m->type[0] != 'i') || m->value[0] < '0' ||
	    m->value[0] > '9')
		return false;
	errno = 0;
	*ret = strtoull(m->value, &end, 10);
	return errno == 0 && *end == '\0';
}

/*
 * Elements of an array entry from its rendering: "[N x type]" for a summarised array, else the
 * top-level elements of "[a, b, ...]" (strings inside are quoted with \" and \\ escaped).
 * False when it cannot tell (not an array, or a rendering cut short).
 */
static bool meta_array_len(const weightd_description *d, const char *key, uint64_t *ret)
{
	const weightd_meta_entry *m = meta_get(d, key);
	const char *v;
	uint64_t n = 0;
	int depth = 0;
	bool quoted = false, any = false;
	char *end;

	if (!m || strncmp(m->type, "array", 5) != 0 || m->value[0] != '[')
		return false;
	v = m->value + 1;
	if (*v >= '0' && *v <= '9') {
		errno = 0;
		n = strtoull(v, &end, 10);
		if (errno == 0 && strncmp(end, " x ", 3) == 0) {
			*ret = n;
			return true;
		}
	}
	for (; *v; v++) {
		if (quoted) {
			if (*v == '\\' && v[1])
				v++;
			else if (*v == '"')
				quoted = false;
			continue;
		}
		if (*v == '"')
			quoted = true;
		else if (*v == '[')
			depth++;
		else if (*v == ']' && depth == 0)
			break;
		else if (*v == ']')
			depth--;
		else if (*v == ',' && depth == 0)
			n++;
		if (*v != ' ')
			any = true;
	}
	if (*v != ']' || v[1] != '\0')
		return false;
	*ret = any ? n + 1 : 0;
	return true;
}

/* For a person's table: control bytes escaped, at most `max` bytes of text (not cutting a UTF-8
 * sequence), "..." when cut. */
static char *fmt_short(const char *v, size_t max)
{
	size_t len = strlen(v), cap = (len < max ? len : max) * 4 + 8, o = 0;
	char *s = malloc(cap);

	if (!s)
		return output_strdup("?");
	for (size_t i = 0; v[i]; i++) {
		unsigned char ch = (unsigned char)v[i];

		if (o >= max) {
			/* inside a UTF-8 sequence: drop what was copied of it */
			if ((ch & 0xc0) == 0x80) {
				while (o > 0 && ((unsigned char)s[o - 1] & 0xc0) == 0x80)
					o--;
				if (o > 0 && (unsigned char)s[o - 1] >= 0xc0)
					o--;
			}
			memcpy(s + o, "...", 4);
			return s;
		}
		if (ch == '\n')
			o += (size_t)snprintf(s + o, cap - o, "\\n");
		else if (ch == '\t')
			o += (size_t)snprintf(s + o, cap - o, "\\t");
		else if (ch < 0x20 || ch == 0x7f)
			o += (size_t)snprintf(s + o, cap - o, "\\x%02x", ch);
		else
			s[o++] = (char)ch;
	}
	s[o] = '\0';
	return s;
}

/* The architecture-specific keys shown in a GGUF summary: "<arch>.<suffix>". */
static const struct {
	const char *suffix, *label, *json;
} gguf_arch_keys[] = {
	{ "context_length", "context length", "context_length" },
	{ "block_count", "block count", "block_count" },
	{ "embedding_length", "embedding length", "embedding_length" },
	{ "feed_forward_length", "feed forward length", "feed_forward_length" },
	{ "attention.head_count", "attention heads", "head_count" },
	{ "attention.head_count_kv", "key/value heads", "head_count_kv" },
	{ "expert_count", "experts", "expert_count" },
};
#define N_ARCH_KEYS (sizeof(gguf_arch_keys) / sizeof(gguf_arch_keys[0]))

/* Tensor types with their counts, in order of first appearance. */
struct type_count {
	const char *type;
	uint64_t n;
};

static size_t count_types(const weightd_description *d, struct type_count *tc)
{
	size_t nt = 0;

	for (size_t i = 0; i < d->n_tensors; i++) {
		size_t j = 0;

		while (j < nt && strcmp(tc[j].type, d->tensors[i].dtype) != 0)
			j++;
		if (j == nt)
			tc[nt++] = (struct type_count){ d->tensors[i].dtype, 0 };
		tc[j].n++;
	}
	return nt;
}

/*
 * The summary of a GGUF source's metadata for --json: general.architecture, general.name,
 * tokenizer.ggml.model and the vocabulary size (null when absent), counts of tensors (and per
 * type) and metadata keys, and the architecture's hyperparameters (null when absent).
 */
static json_t *json_gguf_summary(const weightd_description *d)
{
	const char *arch = meta_str(d, "general.architecture");
	const char *name = meta_str(d, "general.name");
	const char *tok = meta_str(d, "tokenizer.ggml.model");
	struct type_count *tc = calloc(d->n_tensors ? d->n_tensors : 1, sizeof(*tc));
	json_t *j, *types = json_object();
	uint64_t v;
	size_t nt;

	if (!tc) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	nt = count_types(d, tc);
	for (size_t i = 0; i < nt; i++)
		json_object_set_new(types, tc[i].type, json_integer((json_int_t)tc[i].n));
	free(tc);
	j = json_pack("{s:o, s:o, s:o, s:o, s:I, s:o, s:I}",
		      "architecture", arch ? json_string(arch) : json_null(),
		      "name", name ? json_string(name) : json_null(),
		      "tokenizer", tok ? json_string(tok) : json_null(),
		      "vocabulary", meta_array_len(d, "tokenizer.ggml.tokens", &v) ?
				    json_integer((json_int_t)v) : json_null(),
		      "tensors", (json_int_t)d->n_tensors, "types", types,
		      "metadata_keys", (json_int_t)d->n_metadata);
	for (size_t i = 0; i < N_ARCH_KEYS; i++) {
		char *key = arch ? output_fmt("%s.%s", arch, gguf_arch_keys[i].suffix) : NULL;

		json_object_set_new(j, gguf_arch_keys[i].json,
				    key && meta_uint(d, key, &v) ? json_integer((json_int_t)v)
								 : json_null());
		free(key);
	}
	return j;
}

/* The same summary for people, as aligned "label  value" lines. */
static void print_gguf_summary(const weightd_description *d)
{
	struct table t = { .ncols = 2 }; /* no head: rows only */
	const char *arch = meta_str(d, "general.architecture");
	const char *name = meta_str(d, "general.name");
	const char *tok = meta_str(d, "tokenizer.ggml.model");
	struct type_count *tc = calloc(d->n_tensors ? d->n_tensors : 1, sizeof(*tc));
	size_t nt, cap, len = 0;
	char *types;
	uint64_t v;

	if (!tc) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	output_table_row(&t, output_strdup("architecture"), fmt_short(arch ? arch : "-", 100));
	output_table_row(&t, output_strdup("model name"), fmt_short(name ? name : "-", 100));
	output_table_row(&t, output_strdup("tokenizer"), fmt_short(tok ? tok : "-", 100));
	if (meta_array_len(d, "tokenizer.ggml.tokens", &v))
		output_table_row(&t, output_strdup("vocabulary"),
				 output_fmt("%" PRIu64 " tokens", v));
	for (size_t i = 0; arch && i < N_ARCH_KEYS; i++) {
		char *key = output_fmt("%s.%s", arch, gguf_arch_keys[i].suffix);

		if (meta_uint(d, key, &v))
			output_table_row(&t, output_strdup(gguf_arch_keys[i].label),
					 output_fmt("%" PRIu64, v));
		free(key);
	}
	nt = count_types(d, tc);
	cap = 32 + nt * 48;
	types = malloc(cap);
	if (!types) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	len = (size_t)snprintf(types, cap, "%zu", d->n_tensors);
	for (size_t i = 0; i < nt && len < cap; i++)
		len += (size_t)snprintf(types + len, cap - len, "%s%" PRIu64 " %s",
					i ? ", " : " (", tc[i].n, tc[i].type);
	if (nt && len < cap)
		snprintf(types + len, cap - len, ")");
	free(tc);
	output_table_row(&t, output_strdup("tensors"), types);
	output_table_row(&t, output_strdup("metadata keys"), output_fmt("%zu", d->n_metadata));
	output_table_print(&t);
}

int cmd_describe(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	const char *checkpoint = args->argv[1];
	weightd_description *d;
	weightd_error err;
	bool blocks = false, gguf;

	if (weightd_describe(c, checkpoint, &d, &err) < 0)
		return output_fail_err(&err);
	gguf = strcmp(d->source.kind, "gguf") == 0;
	for (size_t i = 0; i < d->n_tensors; i++)
		blocks |= d->tensors[i].block_elems > 1;
	if (o->json) {
		json_t *ts = json_array(), *ms = json_array();

		for (size_t i = 0; i < d->n_tensors; i++) {
			const weightd_tensor_info *t = &d->tensors[i];

			json_array_append_new(ts,
					      json_pack("{s:s, s:s, s:o, s:I, s:I, s:s, s:i, s:i}",
							"name", t->name, "dtype", t->dtype, "shape",
							output_json_shape(t->shape, t->ndim),
							"bytes", (json_int_t)t->nbytes, "offset",
							(json_int_t)t->offset, "file", t->file,
							"block_elems", (int)t->block_elems,
							"block_bytes", (int)t->block_bytes));
		}
		for (size_t i = 0; i < d->n_metadata; i++)
			json_array_append_new(ms, json_pack("{s:s, s:s, s:s}", "key",
				d->metadata[i].key, "type", d->metadata[i].type, "value",
				d->metadata[i].value));
		json_t *os = json_array();

		for (size_t i = 0; i < d->n_objects; i++)
			json_array_append_new(os, json_pack("{s:s, s:I, s:s, s:s}", "url",
							    d->objects[i].url, "size",
							    (json_int_t)d->objects[i].size, "etag",
							    d->objects[i].etag, "version",
							    d->objects[i].version));
		json_t *j = json_pack("{s:o, s:o, s:o, s:o}", "source", json_source(&d->source),
				      "tensors", ts, "metadata", ms, "objects", os);
		if (d->credentials && d->credentials[0])
			json_object_set_new(j, "credentials",
					    json_pack("{s:s, s:s, s:I}", "source", d->credentials,
						      "access_key_id", d->credentials_key_id,
						      "expires",
						      (json_int_t)d->credentials_expires));
		if (gguf)
			json_object_set_new(j, "gguf", json_gguf_summary(d));
		weightd_description_free(d);
		return output_print_json(j);
	}
	{
		const weightd_source_info *s = &d->source;
		char *b = output_fmt_bytes(s->bytes);

		printf("name        %s\nkind        %s\npath        %s\nstate       %s\n"
		       "generation  %" PRIu64 "\nfiles       %u\ntensors     %" PRIu64 "\n"
		       "bytes       %" PRIu64 " (%s)\n", s->name, s->kind, s->path, s->state,
		       s->generation, s->files, s->tensors, s->bytes, b);
		if (s->error[0])
			printf("error       %s\n", s->error);
		if (strcmp(d->location, "file") != 0)
			printf("location    %s\n", d->location);
		if (d->credentials && d->credentials[0]) {
			char when[64] = "never";
			time_t t = (time_t)d->credentials_expires;
			struct tm tm;
			if (t && gmtime_r(&t, &tm))
				strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
			printf("credentials %s\nkey id      %s\nexpires     %s\n", d->credentials,
			       d->credentials_key_id, when);
		}
		free(b);
	}
	if (d->n_objects) {
		/* what each object is pinned by: every payload range is sent with If-Match on it */
		static const char *const head[] = { "OBJECT", "BYTES", "ETAG", "VERSION" };
		static const bool num[] = { 0, 1, 0, 0 };
		struct table t = { .ncols = 4, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < d->n_objects; i++)
			output_table_row(
				&t, output_strdup(d->objects[i].url),
				output_fmt("%" PRIu64, d->objects[i].size),
				output_strdup(d->objects[i].etag[0] ? d->objects[i].etag : "-"),
				output_strdup(d->objects[i].version[0] ? d->objects[i].version :
									 "-"));
		output_table_print(&t);
	}
	if (gguf) {
		putchar('\n');
		print_gguf_summary(d);
	}
	if (d->n_tensors && gguf) {
		/* one file; every tensor with its block layout (1 element per block: not packed) */
		static const char *const head[] = { "TENSOR", "TYPE", "SHAPE", "BYTES", "OFFSET",
						    "BLOCK" };
		static const bool num[] = { 0, 0, 0, 1, 1, 0 };
		struct table t = { .ncols = 6, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < d->n_tensors; i++) {
			const weightd_tensor_info *ti = &d->tensors[i];

			output_table_row(
				&t, output_strdup(ti->name), output_strdup(ti->dtype),
				output_fmt_shape(ti->shape, ti->ndim),
				output_fmt("%" PRIu64, ti->nbytes),
				output_fmt("%" PRIu64, ti->offset),
				output_fmt("%u el / %u B", ti->block_elems, ti->block_bytes));
		}
		output_table_print(&t);
	} else if (d->n_tensors) {
		static const char *const head[] = { "TENSOR", "DTYPE", "SHAPE", "BYTES", "OFFSET",
						    "BLOCK", "FILE" };
		static const bool num[] = { 0, 0, 0, 1, 1, 0, 0 };
		struct table t = { .ncols = 7, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < d->n_tensors; i++) {
			const weightd_tensor_info *ti = &d->tensors[i];

			output_table_row(&t, output_strdup(ti->name), output_strdup(ti->dtype),
					 output_fmt_shape(ti->shape, ti->ndim),
					 output_fmt("%" PRIu64, ti->nbytes),
					 output_fmt("%" PRIu64, ti->offset),
					 blocks && ti->block_elems > 1 ?
						 output_fmt("%u el / %u B", ti->block_elems,
							    ti->block_bytes) :
						 output_strdup("-"),
					 output_strdup(ti->file));
		}
		output_table_print(&t);
	}
	if (d->n_metadata) {
		static const char *const head[] = { "KEY", "TYPE", "VALUE" };
		struct table t = { .ncols = 3, .head = head };

		putchar('\n');
		for (size_t i = 0; i < d->n_metadata; i++)
			output_table_row(&t, output_strdup(d->metadata[i].key),
					 output_strdup(d->metadata[i].type),
					 gguf ? fmt_short(d->metadata[i].value, GGUF_VALUE_SHOWN) :
						output_strdup(d->metadata[i].value));
		output_table_print(&t);
	}
	weightd_description_free(d);
	return 0;
}
