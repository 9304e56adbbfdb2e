/* weightctl.c - the command line of weightd: inspect sources, fetch and verify weights, admin. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "weightd/client.h"

/* Exit codes: 0 success, 1 an error from weightd or the system, 2 a usage error. */
#define EXIT_ERR 1
#define EXIT_USAGE 2
#define MAX_JSON_FILE (64u << 20)
/* bytes of a GGUF metadata value describe shows in its table (--json has them whole) */
#define GGUF_VALUE_SHOWN 100u

static const char usage_text[] =
	"usage: weightctl [--socket PATH] [--json] COMMAND [ARGS]\n"
	"\n"
	"commands:\n"
	"  list                                 sources weightd serves\n"
	"  describe CHECKPOINT                  a source's tensors and metadata\n"
	"  get CHECKPOINT TENSOR [--range AXIS:START:END] [--out FILE]\n"
	"                                       fetch a weight; print dtype, shape, bytes and a\n"
	"                                       SHA-256 checked against the mapped bytes\n"
	"  get --recipe FILE.json [--out FILE]  the same for a recipe or a unit in JSON\n"
	"  preflight FILE.json                  infer a recipe's or unit's outputs (reads nothing)\n"
	"  status                               the daemon's counters, sources and weights\n"
	"  reload                               make weightd re-read its configuration\n"
	"  evict                                drop every weight no client holds\n"
	"\n"
	"options:\n"
	"  --socket PATH   weightd's socket (default: $WEIGHTD_SOCKET or "
	WEIGHTD_DEFAULT_SOCKET ")\n"
	"  --json          machine-readable output\n"
	"\n"
	"exit status: 0 success, 1 error, 2 usage error\n";

struct opts {
	const char *socket;
	bool json;
};

struct get_args {
	const char *checkpoint, *tensor, *range, *out, *recipe;
	bool has_range;
	uint32_t axis;
	uint64_t start, end;
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("weightctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nusage: weightctl [--socket PATH] [--json] COMMAND [ARGS]  "
	      "(weightctl --help lists the commands)\n", stderr);
	return EXIT_USAGE;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("weightctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_ERR;
}

static int fail_err(const weightd_error *err)
{
	return fail("%s", err->message[0] ? err->message : weightd_code_name(err->code));
}

/* --- formatting -------------------------------------------------------------------------- */

static char *xstrdup(const char *s)
{
	char *d = strdup(s ? s : "");

	if (!d) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	return d;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	return s;
}

/* "512 B", "4.0 KiB", "1.5 GiB". */
static char *fmt_bytes(uint64_t n)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	int u = -1;

	if (n < 1024)
		return fmt("%" PRIu64 " B", n);
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	return fmt("%.1f %s", v, units[u]);
}

static char *fmt_shape(const uint64_t *shape, size_t ndim)
{
	size_t cap = 2 + ndim * 22, len = 0;
	char *s = malloc(cap);

	if (!s)
		return xstrdup("?");
	s[len++] = '[';
	for (size_t i = 0; i < ndim; i++)
		len += (size_t)snprintf(s + len, cap - len, "%s%" PRIu64, i ? ", " : "", shape[i]);
	snprintf(s + len, cap - len, "]");
	return s;
}

static char *fmt_hex(const uint8_t *b, size_t n)
{
	char *s = malloc(2 * n + 1);

	if (!s)
		return xstrdup("?");
	wd_hex(b, n, s);
	return s;
}

static json_t *json_shape(const uint64_t *shape, size_t ndim)
{
	json_t *a = json_array();

	for (size_t i = 0; i < ndim; i++)
		json_array_append_new(a, json_integer((json_int_t)shape[i]));
	return a;
}

static int print_json(json_t *j)
{
	int r = json_dumpf(j, stdout, JSON_INDENT(2));

	json_decref(j);
	if (r < 0)
		return fail("cannot write JSON output");
	fputc('\n', stdout);
	return 0;
}

/*
 * A table for people: rows of owned strings, columns as wide as their widest cell, two spaces
 * apart; columns flagged numeric are right-aligned. A table with head NULL prints rows only.
 */
struct table {
	size_t ncols, nrows, cap;
	const char *const *head;
	const bool *numeric;
	char **cells;
};

static void table_row(struct table *t, ...)
{
	va_list ap;

	if (t->nrows == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		char **cells = realloc(t->cells, cap * t->ncols * sizeof(*cells));

		if (!cells) {
			fputs("weightctl: out of memory\n", stderr);
			exit(EXIT_ERR);
		}
		t->cells = cells;
		t->cap = cap;
	}
	va_start(ap, t);
	for (size_t c = 0; c < t->ncols; c++)
		t->cells[t->nrows * t->ncols + c] = va_arg(ap, char *);
	va_end(ap);
	t->nrows++;
}

static void table_print(struct table *t)
{
	size_t *w = calloc(t->ncols, sizeof(*w));

	for (size_t c = 0; w && c < t->ncols; c++) {
		w[c] = t->head ? strlen(t->head[c]) : 0;
		for (size_t r = 0; r < t->nrows; r++) {
			size_t l = strlen(t->cells[r * t->ncols + c]);

			w[c] = l > w[c] ? l : w[c];
		}
	}
	for (size_t r = t->head ? 0 : 1; w && r <= t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			const char *cell = r == 0 ? t->head[c] : t->cells[(r - 1) * t->ncols + c];
			bool last = c + 1 == t->ncols;

			if (t->numeric && t->numeric[c])
				printf("%*s", (int)w[c], cell);
			else
				printf("%-*s", last ? 0 : (int)w[c], cell);
			fputs(last ? "\n" : "  ", stdout);
		}
	}
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(w);
}

/* --- helpers ----------------------------------------------------------------------------- */

static int connect_or_fail(const struct opts *o, weightd_client **ret)
{
	weightd_error err;

	if (weightd_connect(o->socket, "weightctl", ret, &err) < 0)
		return fail_err(&err);
	return 0;
}

static int read_file(const char *path, char **ret, size_t *ret_len)
{
	struct stat st;
	char *buf;
	size_t len = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_JSON_FILE) {
		close(fd);
		return fail("%s is not a regular file of at most %u bytes", path, MAX_JSON_FILE);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return fail("out of memory");
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

static int write_file(const char *path, const void *data, uint64_t n)
{
	const uint8_t *p = data;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return fail("cannot create %s: %s", path, strerror(errno));
	while (n) {
		ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;

			close(fd);
			return fail("cannot write %s: %s", path, strerror(e));
		}
		p += w;
		n -= (uint64_t)w;
	}
	if (close(fd) < 0)
		return fail("cannot write %s: %s", path, strerror(errno));
	return 0;
}

/* Parse "AXIS:START:END" strictly. */
static bool parse_range(const char *s, uint32_t *axis, uint64_t *start, uint64_t *end)
{
	uint64_t v[3];
	const char *p = s;

	for (int i = 0; i < 3; i++) {
		char *e;

		if (*p < '0' || *p > '9')
			return false;
		errno = 0;
		v[i] = strtoull(p, &e, 10);
		if (errno || e == p || (i < 2 && *e != ':') || (i == 2 && *e != '\0'))
			return false;
		p = e + 1;
	}
	if (v[0] > UINT32_MAX)
		return false;
	*axis = (uint32_t)v[0];
	*start = v[1];
	*end = v[2];
	return true;
}

/* --- list, describe, status -------------------------------------------------------------- */

static json_t *json_source(const weightd_source_info *s)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:i}", "name", s->name,
			 "kind", s->kind, "path", s->path, "state", s->state, "error", s->error,
			 "tensors", (json_int_t)s->tensors, "bytes", (json_int_t)s->bytes,
			 "generation", (json_int_t)s->generation, "files", (int)s->files);
}

static void table_sources(const weightd_source_info *src, size_t n)
{
	static const char *const head[] = { "NAME", "KIND", "STATE", "TENSORS", "BYTES", "GEN",
					    "FILES", "PATH", "ERROR" };
	static const bool num[] = { 0, 0, 0, 1, 1, 1, 1, 0, 0 };
	struct table t = { .ncols = 9, .head = head, .numeric = num };

	for (size_t i = 0; i < n; i++) {
		const weightd_source_info *s = &src[i];

		table_row(&t, xstrdup(s->name), xstrdup(s->kind), xstrdup(s->state),
			  fmt("%" PRIu64, s->tensors), fmt_bytes(s->bytes),
			  fmt("%" PRIu64, s->generation), fmt("%u", s->files), xstrdup(s->path),
			  xstrdup(s->error));
	}
	table_print(&t);
}

static int cmd_list(const struct opts *o, weightd_client *c)
{
	weightd_source_list *l;
	weightd_error err;

	if (weightd_list(c, &l, &err) < 0)
		return fail_err(&err);
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < l->count; i++)
			json_array_append_new(a, json_source(&l->sources[i]));
		weightd_source_list_free(l);
		return print_json(json_pack("{s:o}", "sources", a));
	}
	table_sources(l->sources, l->count);
	weightd_source_list_free(l);
	return 0;
}

/* --- describe ---------------------------------------------------------------------------- */

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
		return xstrdup("?");
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
		char *key = arch ? fmt("%s.%s", arch, gguf_arch_keys[i].suffix) : NULL;

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
	table_row(&t, xstrdup("architecture"), fmt_short(arch ? arch : "-", 100));
	table_row(&t, xstrdup("model name"), fmt_short(name ? name : "-", 100));
	table_row(&t, xstrdup("tokenizer"), fmt_short(tok ? tok : "-", 100));
	if (meta_array_len(d, "tokenizer.ggml.tokens", &v))
		table_row(&t, xstrdup("vocabulary"), fmt("%" PRIu64 " tokens", v));
	for (size_t i = 0; arch && i < N_ARCH_KEYS; i++) {
		char *key = fmt("%s.%s", arch, gguf_arch_keys[i].suffix);

		if (meta_uint(d, key, &v))
			table_row(&t, xstrdup(gguf_arch_keys[i].label), fmt("%" PRIu64, v));
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
	table_row(&t, xstrdup("tensors"), types);
	table_row(&t, xstrdup("metadata keys"), fmt("%zu", d->n_metadata));
	table_print(&t);
}

static int cmd_describe(const struct opts *o, weightd_client *c, const char *checkpoint)
{
	weightd_description *d;
	weightd_error err;
	bool blocks = false, gguf;

	if (weightd_describe(c, checkpoint, &d, &err) < 0)
		return fail_err(&err);
	gguf = strcmp(d->source.kind, "gguf") == 0;
	for (size_t i = 0; i < d->n_tensors; i++)
		blocks |= d->tensors[i].block_elems > 1;
	if (o->json) {
		json_t *ts = json_array(), *ms = json_array();

		for (size_t i = 0; i < d->n_tensors; i++) {
			const weightd_tensor_info *t = &d->tensors[i];

			json_array_append_new(ts, json_pack(
				"{s:s, s:s, s:o, s:I, s:I, s:s, s:i, s:i}", "name", t->name,
				"dtype", t->dtype, "shape", json_shape(t->shape, t->ndim),
				"bytes", (json_int_t)t->nbytes, "offset", (json_int_t)t->offset,
				"file", t->file, "block_elems", (int)t->block_elems,
				"block_bytes", (int)t->block_bytes));
		}
		for (size_t i = 0; i < d->n_metadata; i++)
			json_array_append_new(ms, json_pack("{s:s, s:s, s:s}", "key",
				d->metadata[i].key, "type", d->metadata[i].type, "value",
				d->metadata[i].value));
		json_t *j = json_pack("{s:o, s:o, s:o}", "source", json_source(&d->source),
				      "tensors", ts, "metadata", ms);
		if (gguf)
			json_object_set_new(j, "gguf", json_gguf_summary(d));
		weightd_description_free(d);
		return print_json(j);
	}
	{
		const weightd_source_info *s = &d->source;
		char *b = fmt_bytes(s->bytes);

		printf("name        %s\nkind        %s\npath        %s\nstate       %s\n"
		       "generation  %" PRIu64 "\nfiles       %u\ntensors     %" PRIu64 "\n"
		       "bytes       %" PRIu64 " (%s)\n", s->name, s->kind, s->path, s->state,
		       s->generation, s->files, s->tensors, s->bytes, b);
		if (s->error[0])
			printf("error       %s\n", s->error);
		free(b);
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

			table_row(&t, xstrdup(ti->name), xstrdup(ti->dtype),
				  fmt_shape(ti->shape, ti->ndim), fmt("%" PRIu64, ti->nbytes),
				  fmt("%" PRIu64, ti->offset),
				  fmt("%u el / %u B", ti->block_elems, ti->block_bytes));
		}
		table_print(&t);
	} else if (d->n_tensors) {
		static const char *const head[] = { "TENSOR", "DTYPE", "SHAPE", "BYTES", "OFFSET",
						    "BLOCK", "FILE" };
		static const bool num[] = { 0, 0, 0, 1, 1, 0, 0 };
		struct table t = { .ncols = 7, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < d->n_tensors; i++) {
			const weightd_tensor_info *ti = &d->tensors[i];

			table_row(&t, xstrdup(ti->name), xstrdup(ti->dtype),
				  fmt_shape(ti->shape, ti->ndim), fmt("%" PRIu64, ti->nbytes),
				  fmt("%" PRIu64, ti->offset),
				  blocks && ti->block_elems > 1 ?
					  fmt("%u el / %u B", ti->block_elems, ti->block_bytes) :
					  xstrdup("-"),
				  xstrdup(ti->file));
		}
		table_print(&t);
	}
	if (d->n_metadata) {
		static const char *const head[] = { "KEY", "TYPE", "VALUE" };
		struct table t = { .ncols = 3, .head = head };

		putchar('\n');
		for (size_t i = 0; i < d->n_metadata; i++)
			table_row(&t, xstrdup(d->metadata[i].key), xstrdup(d->metadata[i].type),
				  gguf ? fmt_short(d->metadata[i].value, GGUF_VALUE_SHOWN)
				       : xstrdup(d->metadata[i].value));
		table_print(&t);
	}
	weightd_description_free(d);
	return 0;
}

static int cmd_status(const struct opts *o, weightd_client *c)
{
	weightd_status *s;
	weightd_error err;

	if (weightd_status_get(c, &s, &err) < 0)
		return fail_err(&err);
	if (o->json) {
		json_t *src = json_array(), *ws = json_array(), *j;

		for (size_t i = 0; i < s->n_sources; i++)
			json_array_append_new(src, json_source(&s->sources[i]));
		for (size_t i = 0; i < s->n_weights; i++) {
			const weightd_weight_status *w = &s->weight_list[i];
			char *dg = w->digest ? fmt_hex(w->digest, WEIGHTD_DIGEST_LEN) : xstrdup("");

			json_array_append_new(ws, json_pack(
				"{s:I, s:s, s:s, s:o, s:I, s:i, s:i, s:I, s:s, s:s, s:b}",
				"handle", (json_int_t)w->handle, "label", w->label, "dtype", w->dtype,
				"shape", json_shape(w->shape, w->ndim), "bytes", (json_int_t)w->nbytes,
				"refs", (int)w->refs, "clients", (int)w->clients,
				"generation", (json_int_t)w->generation, "sha256", dg,
				"source", w->source, "adopted", w->adopted));
			free(dg);
		}
		j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
			      " s:I, s:I, s:I, s:o, s:o}",
			      "instance", s->instance, "server_version", s->server_version,
			      "uptime_ms", (json_int_t)s->uptime_ms,
			      "bytes_resident", (json_int_t)s->bytes_resident,
			      "budget_bytes", (json_int_t)s->budget_bytes,
			      "weights", (json_int_t)s->weights, "clients", (json_int_t)s->clients,
			      "bytes_read", (json_int_t)s->bytes_read,
			      "materializations", (json_int_t)s->materializations,
			      "materializations_failed", (json_int_t)s->materializations_failed,
			      "materializations_in_flight",
			      (json_int_t)s->materializations_in_flight,
			      "evictions", (json_int_t)s->evictions,
			      "readoptions", (json_int_t)s->readoptions,
			      "bytes_materialized", (json_int_t)s->bytes_materialized,
			      "materialize_ns", (json_int_t)s->materialize_ns,
			      "references", (json_int_t)s->references, "sources", src,
			      "weight_list", ws);
		weightd_status_free(s);
		return print_json(j);
	}
	{
		char *res = fmt_bytes(s->bytes_resident), *bud = fmt_bytes(s->budget_bytes);
		char *rd = fmt_bytes(s->bytes_read), *mat = fmt_bytes(s->bytes_materialized);

		printf("instance                    %s\nversion                     %s\n"
		       "uptime                      %.1f s\n"
		       "resident                    %" PRIu64 " (%s) of budget %" PRIu64 " (%s)\n"
		       "weights                     %" PRIu64 "\nreferences                  %" PRIu64
		       "\nclients                     %" PRIu64 "\n"
		       "checkpoint bytes read       %" PRIu64 " (%s)\n"
		       "materializations            %" PRIu64 " (%" PRIu64 " failed, %" PRIu64
		       " in flight)\nbytes materialized          %" PRIu64 " (%s) in %.3f s\n"
		       "evictions                   %" PRIu64 "\nre-adoptions                %" PRIu64
		       "\n", s->instance, s->server_version, (double)s->uptime_ms / 1000,
		       s->bytes_resident, res, s->budget_bytes, bud, s->weights, s->references,
		       s->clients, s->bytes_read, rd, s->materializations,
		       s->materializations_failed, s->materializations_in_flight,
		       s->bytes_materialized, mat, (double)s->materialize_ns / 1e9, s->evictions,
		       s->readoptions);
		free(res);
		free(bud);
		free(rd);
		free(mat);
	}
	if (s->n_sources) {
		putchar('\n');
		table_sources(s->sources, s->n_sources);
	}
	if (s->n_weights) {
		static const char *const head[] = { "HANDLE", "WEIGHT", "DTYPE", "SHAPE", "BYTES",
						    "REFS", "CLIENTS", "GEN", "ADOPTED" };
		static const bool num[] = { 1, 0, 0, 0, 1, 1, 1, 1, 0 };
		struct table t = { .ncols = 9, .head = head, .numeric = num };

		putchar('\n');
		for (size_t i = 0; i < s->n_weights; i++) {
			const weightd_weight_status *w = &s->weight_list[i];

			table_row(&t, fmt("%" PRIu64, w->handle), xstrdup(w->label),
				  xstrdup(w->dtype), fmt_shape(w->shape, w->ndim),
				  fmt_bytes(w->nbytes), fmt("%u", w->refs), fmt("%u", w->clients),
				  fmt("%" PRIu64, w->generation), xstrdup(w->adopted ? "yes" : "no"));
		}
		table_print(&t);
	}
	weightd_status_free(s);
	return 0;
}

/* --- get, preflight ---------------------------------------------------------------------- */

struct got {
	const char *name;
	const weightd_weight *w;
	const void *data;
	char sha[2 * WEIGHTD_DIGEST_LEN + 1];
};

/*
 * Hash the mapped bytes independently of the daemon and compare with the digest it reported:
 * a mismatch means the memory is not what weightd says it filled.
 */
static int verify(struct got *g)
{
	static const uint8_t zero[WEIGHTD_DIGEST_LEN];
	const uint8_t *reported = weightd_weight_digest(g->w);
	uint8_t mine[WD_DIGEST_LEN];
	char theirs[2 * WEIGHTD_DIGEST_LEN + 1];

	if (wd_sha256(g->data, weightd_weight_nbytes(g->w), mine) < 0)
		return fail("cannot compute SHA-256 of %s", g->name);
	wd_hex(mine, WD_DIGEST_LEN, g->sha);
	if (memcmp(reported, zero, sizeof(zero)) == 0)
		return fail("weightd reported no digest for %s; its bytes hash to %s", g->name,
			    g->sha);
	wd_hex(reported, WEIGHTD_DIGEST_LEN, theirs);
	if (memcmp(reported, mine, WD_DIGEST_LEN) != 0)
		return fail("digest mismatch for %s: weightd reported %s but the mapped bytes hash "
			    "to %s", g->name, theirs, g->sha);
	return 0;
}

static int print_got(const struct opts *o, struct got *gs, size_t n)
{
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < n; i++) {
			const weightd_weight *w = gs[i].w;
			char *key = fmt_hex(weightd_weight_key(w), WEIGHTD_DIGEST_LEN);

			json_array_append_new(a, json_pack(
				"{s:s, s:s, s:o, s:I, s:s, s:b, s:s, s:I, s:I}", "name", gs[i].name,
				"dtype", weightd_weight_dtype(w),
				"shape", json_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				"bytes", (json_int_t)weightd_weight_nbytes(w), "sha256", gs[i].sha,
				"verified", 1, "key", key,
				"handle", (json_int_t)weightd_weight_handle(w),
				"generation", (json_int_t)weightd_weight_generation(w)));
			free(key);
		}
		return print_json(json_pack("{s:o}", "weights", a));
	}
	static const char *const head[] = { "NAME", "DTYPE", "SHAPE", "BYTES", "SHA256" };
	static const bool num[] = { 0, 0, 0, 1, 0 };
	struct table t = { .ncols = 5, .head = head, .numeric = num };

	for (size_t i = 0; i < n; i++) {
		const weightd_weight *w = gs[i].w;

		table_row(&t, xstrdup(gs[i].name), xstrdup(weightd_weight_dtype(w)),
			  fmt_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
			  fmt("%" PRIu64, weightd_weight_nbytes(w)), fmt("%s (verified)", gs[i].sha));
	}
	table_print(&t);
	return 0;
}

static int get_tensor(const struct opts *o, weightd_client *c, const struct get_args *a)
{
	weightd_selection *sel = NULL;
	weightd_inflight *f = NULL;
	weightd_weight *w = NULL;
	weightd_error err;
	struct got g = { 0 };
	char *label = NULL;
	int rc = EXIT_ERR;

	if (a->has_range && weightd_selection_range(a->axis, a->start, a->end, &sel, &err) < 0)
		return fail_err(&err);
	if (weightd_materialize(c, a->checkpoint, a->tensor, sel, &f, &err) < 0 ||
	    weightd_finish(f, &w, &err) < 0 || weightd_weight_map(w, &g.data, &err) < 0) {
		rc = fail_err(&err);
		goto out;
	}
	label = a->has_range ? fmt("%s:%s[axis %u: %" PRIu64 "..%" PRIu64 "]", a->checkpoint,
				   a->tensor, a->axis, a->start, a->end) :
			       fmt("%s:%s", a->checkpoint, a->tensor);
	g.name = label;
	g.w = w;
	if (verify(&g) != 0)
		goto out;
	if (a->out && write_file(a->out, g.data, weightd_weight_nbytes(w)) != 0)
		goto out;
	rc = print_got(o, &g, 1) == 0 ? 0 : EXIT_ERR;
out:
	weightd_release(w);
	weightd_selection_free(sel);
	free(label);
	return rc;
}

static int load_unit(weightd_client *c, const char *path, weightd_unit **ret)
{
	weightd_error err;
	char *text = NULL;
	size_t len = 0;
	int r;

	if (read_file(path, &text, &len) != 0)
		return EXIT_ERR;
	r = weightd_unit_from_json(c, text, len, ret, &err);
	free(text);
	if (r < 0)
		return fail("%s: %s", path, err.message);
	return 0;
}

static int get_recipe(const struct opts *o, weightd_client *c, const char *path, const char *out)
{
	weightd_unit *u = NULL;
	weightd_error err;
	struct got *gs = NULL;
	size_t n;
	int rc = EXIT_ERR;

	if (load_unit(c, path, &u) != 0)
		return EXIT_ERR;
	n = weightd_unit_slot_count(u);
	if (out && n != 1) {
		weightd_unit_free(u);
		return usage_error("--out writes one weight; %s has %zu slots", path, n);
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
		rc = fail("%s: %s", path, err.message);
		goto out;
	}
	gs = calloc(n, sizeof(*gs));
	if (!gs) {
		rc = fail("out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		gs[i].name = weightd_unit_slot_name(u, i);
		gs[i].w = weightd_unit_weight(u, gs[i].name);
		gs[i].data = weightd_unit_data(u, gs[i].name);
		if (verify(&gs[i]) != 0)
			goto out;
	}
	if (out && write_file(out, gs[0].data, weightd_weight_nbytes(gs[0].w)) != 0)
		goto out;
	rc = print_got(o, gs, n) == 0 ? 0 : EXIT_ERR;
out:
	free(gs);
	weightd_unit_free(u);
	return rc;
}

/* Parse get's arguments completely (before connecting): 0 or EXIT_USAGE. */
static int parse_get(int argc, char **argv, struct get_args *g)
{
	static const struct option longopts[] = {
		{ "range", required_argument, NULL, 'r' },
		{ "out", required_argument, NULL, 'o' },
		{ "recipe", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 0;   /* 0, not 1: re-initialises GNU getopt, whose first pass used "+" */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'r': g->range = optarg; break;
		case 'o': g->out = optarg; break;
		case 'R': g->recipe = optarg; break;
		default:
			return usage_error("get: unknown option or missing value: %s",
					   argv[optind - 1]);
		}
	}
	if (g->recipe) {
		if (g->range || optind != argc)
			return usage_error("get --recipe FILE takes no CHECKPOINT, TENSOR or --range");
		return 0;
	}
	if (argc - optind != 2)
		return usage_error("get needs CHECKPOINT and TENSOR (or --recipe FILE.json)");
	g->checkpoint = argv[optind];
	g->tensor = argv[optind + 1];
	if (g->range) {
		if (!parse_range(g->range, &g->axis, &g->start, &g->end))
			return usage_error("--range takes AXIS:START:END (non-negative integers), "
					   "not \"%s\"", g->range);
		if (g->start >= g->end)
			return usage_error("--range %s is empty: START must be below END", g->range);
		g->has_range = true;
	}
	return 0;
}

static int cmd_get(const struct opts *o, weightd_client *c, const struct get_args *g)
{
	if (g->recipe)
		return get_recipe(o, c, g->recipe, g->out);
	return get_tensor(o, c, g);
}

static int cmd_preflight(const struct opts *o, weightd_client *c, const char *path)
{
	weightd_unit *u = NULL;
	weightd_inflight *f = NULL;
	weightd_preflight *p = NULL;
	weightd_error err;

	if (load_unit(c, path, &u) != 0)
		return EXIT_ERR;
	if (weightd_unit_preflight(u, &f, &err) < 0 || weightd_preflight_finish(f, &p, &err) < 0) {
		weightd_unit_free(u);
		return fail("%s: %s", path, err.message);
	}
	weightd_unit_free(u);
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < p->count; i++) {
			const weightd_output_info *x = &p->outputs[i];
			char *key = x->key ? fmt_hex(x->key, WEIGHTD_DIGEST_LEN) : xstrdup("");

			json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:I, s:s, s:s}",
				"name", x->name, "dtype", x->dtype,
				"shape", json_shape(x->shape, x->ndim), "bytes", (json_int_t)x->nbytes,
				"alias_of", x->alias_of, "key", key));
			free(key);
		}
		weightd_preflight_free(p);
		return print_json(json_pack("{s:o}", "outputs", a));
	}
	static const char *const head[] = { "NAME", "DTYPE", "SHAPE", "BYTES", "ALIAS OF" };
	static const bool num[] = { 0, 0, 0, 1, 0 };
	struct table t = { .ncols = 5, .head = head, .numeric = num };

	for (size_t i = 0; i < p->count; i++) {
		const weightd_output_info *x = &p->outputs[i];

		table_row(&t, xstrdup(x->name), xstrdup(x->dtype), fmt_shape(x->shape, x->ndim),
			  fmt("%" PRIu64, x->nbytes), xstrdup(x->alias_of[0] ? x->alias_of : "-"));
	}
	table_print(&t);
	weightd_preflight_free(p);
	return 0;
}

/* --- admin ------------------------------------------------------------------------------- */

static int cmd_reload(const struct opts *o, weightd_client *c)
{
	weightd_error err;

	if (weightd_reload(c, &err) < 0)
		return fail_err(&err);
	if (o->json)
		return print_json(json_pack("{s:b}", "reloaded", 1));
	puts("weightd reloaded its configuration");
	return 0;
}

static int cmd_evict(const struct opts *o, weightd_client *c)
{
	uint64_t n = 0, bytes = 0;
	weightd_error err;
	char *b;

	if (weightd_evict(c, &n, &bytes, &err) < 0)
		return fail_err(&err);
	if (o->json)
		return print_json(json_pack("{s:I, s:I}", "weights", (json_int_t)n, "bytes",
					    (json_int_t)bytes));
	b = fmt_bytes(bytes);
	printf("evicted %" PRIu64 " weight%s (%s)\n", n, n == 1 ? "" : "s", b);
	free(b);
	return 0;
}

/* --- main -------------------------------------------------------------------------------- */

struct command {
	const char *name;
	int nargs;        /* exact positional count, -1: the command parses its own */
};

static const struct command commands[] = {
	{ "list", 0 }, { "describe", 1 }, { "get", -1 }, { "preflight", 1 },
	{ "status", 0 }, { "reload", 0 }, { "evict", 0 },
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 0 };
	struct get_args ga = { 0 };
	const struct command *cmd = NULL;
	weightd_client *c = NULL;
	const char *name;
	int ch, rc, cargc;
	char **cargv;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		switch (ch) {
		case 's': o.socket = optarg; break;
		case 'j': o.json = true; break;
		case 'h': fputs(usage_text, stdout); return 0;
		case 'V': printf("weightctl %s\n", weightd_version()); return 0;
		default:
			return usage_error("unknown option or missing value: %s", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("no command given");
	name = argv[optind];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(name, commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd)
		return usage_error("unknown command \"%s\"", name);
	cargc = argc - optind;
	cargv = argv + optind;
	if (cmd->nargs >= 0 && cargc - 1 != cmd->nargs)
		return usage_error("%s takes %d argument%s, not %d", name, cmd->nargs,
				   cmd->nargs == 1 ? "" : "s", cargc - 1);
	/* usage is checked before connecting: a bad command line never touches the daemon */
	if (strcmp(name, "get") == 0 && (rc = parse_get(cargc, cargv, &ga)) != 0)
		return rc;
	rc = connect_or_fail(&o, &c);
	if (rc != 0)
		return rc;
	if (strcmp(name, "list") == 0)
		rc = cmd_list(&o, c);
	else if (strcmp(name, "describe") == 0)
		rc = cmd_describe(&o, c, cargv[1]);
	else if (strcmp(name, "get") == 0)
		rc = cmd_get(&o, c, &ga);
	else if (strcmp(name, "preflight") == 0)
		rc = cmd_preflight(&o, c, cargv[1]);
	else if (strcmp(name, "status") == 0)
		rc = cmd_status(&o, c);
	else if (strcmp(name, "reload") == 0)
		rc = cmd_reload(&o, c);
	else
		rc = cmd_evict(&o, c);
	weightd_close(c);
	if (fflush(stdout) != 0 && rc == 0)
		rc = fail("cannot write output: %s", strerror(errno));
	return rc;
}
