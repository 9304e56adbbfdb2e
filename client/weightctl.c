/* weightctl.c - the command line of weightd: inspect sources, fetch and verify weights, admin. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "digest.h"
#include "segment.h"
#include "state.h"
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
	"  get CHECKPOINT TENSOR [--range AXIS:START:END] [--out FILE] [--sha256]\n"
	"                                       fetch a weight; print dtype, shape, bytes and its\n"
	"                                       digest checked against the mapped bytes (--sha256:\n"
	"                                       also the SHA-256 of those bytes)\n"
	"  get --recipe FILE.json [--out FILE] [--sha256]\n"
	"                                       the same for a recipe or a unit in JSON\n"
	"  preload CHECKPOINT [TENSOR...]       materialize tensors (default: all) and release them,\n"
	"                                       so they stay cached until the budget needs room\n"
	"  preload --recipe FILE.json           the same for a recipe or a unit in JSON\n"
	"  preflight FILE.json                  infer a recipe's or unit's outputs (reads nothing)\n"
	"  status                               the daemon's counters, sources and weights\n"
	"  metrics                              the counters in Prometheus text format\n"
	"  reload                               make weightd re-read its configuration\n"
	"  evict                                drop every weight no client holds\n"
	"  purge --config FILE | --prefix P [--state-dir D]\n"
	"                                       with weightd stopped: remove every shared-memory\n"
	"                                       segment of the instance and its state records\n"
	"\n"
	"options:\n"
	"  --socket PATH   weightd's socket (default: $WEIGHTD_SOCKET or "
	WEIGHTD_DEFAULT_SOCKET ")\n"
	"  --json          machine-readable output\n"
	"\n"
	"get and preload draw a progress bar on stderr when it is a terminal.\n"
	"exit status: 0 success, 1 error, 2 usage error\n";

struct opts {
	const char *socket;
	bool json;
};

struct get_args {
	const char *checkpoint, *tensor, *range, *out, *recipe;
	bool has_range;
	bool sha256;            /* also print the SHA-256 of the fetched bytes */
	uint32_t axis;
	uint64_t start, end;
};

struct preload_args {
	const char *checkpoint, *recipe;
	char **tensors;         /* none: every tensor of the checkpoint */
	size_t n_tensors;
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
			char *dg = w->digest ? fmt_hex(w->digest, w->digest_len) : xstrdup("");

			json_array_append_new(ws, json_pack(
				"{s:I, s:s, s:s, s:o, s:I, s:i, s:i, s:I, s:s, s:s, s:s, s:b}",
				"handle", (json_int_t)w->handle, "label", w->label, "dtype", w->dtype,
				"shape", json_shape(w->shape, w->ndim), "bytes", (json_int_t)w->nbytes,
				"refs", (int)w->refs, "clients", (int)w->clients,
				"generation", (json_int_t)w->generation, "digest", dg,
				"digest_algorithm", weightd_digest_algorithm_name(w->digest_algorithm),
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
		json_object_set_new(j, "digest_algorithm", json_string(
			weightd_digest_algorithm_name(s->digest_algorithm)));
		json_object_set_new(j, "digest_chunk_bytes", json_integer(
			(json_int_t)s->digest_chunk_bytes));
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
		printf("digest                      %s\n",
		       weightd_digest_algorithm_name(s->digest_algorithm));
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

/* --- progress ---------------------------------------------------------------------------- */

#define PROGRESS_INTERVAL 0.1  /* seconds between status polls while a unit runs */

/*
 * A progress bar for a unit, drawn on stderr when it is a terminal. The unit's preflight gives
 * its distinct weights (by key) and their sizes. While the unit runs, the daemon's status lists
 * its jobs in flight with the bytes each has written; a weight of the unit is counted with its
 * job's bytes, or whole when no job has its key: status is asked on the same connection after
 * the materialize request, which the daemon has then already taken, so such a weight is
 * resident (it was cached, or its job finished).
 */
struct progress {
	bool on;                    /* stderr is a terminal: poll and draw */
	bool drawn;                 /* a bar is on the screen (a final line is owed) */
	size_t n;
	uint8_t (*keys)[WEIGHTD_DIGEST_LEN];
	uint64_t *nbytes;
	uint64_t total;
	double t0;                  /* when the unit was submitted */
	bool have_base;             /* first sample: the base the rate is measured from */
	double t_base;
	uint64_t done_base;
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void progress_free(struct progress *p)
{
	free(p->keys);
	free(p->nbytes);
	p->keys = NULL;
	p->nbytes = NULL;
}

/* Preflight the unit (reads nothing) to learn its distinct weights. 0, or the preflight's error. */
static int progress_init(struct progress *p, weightd_unit *u, weightd_error *err)
{
	weightd_inflight *f = NULL;
	weightd_preflight *pf = NULL;
	int r;

	r = weightd_unit_preflight(u, &f, err);
	if (r == 0)
		r = weightd_preflight_finish(f, &pf, err);
	if (r < 0)
		return r;
	p->keys = calloc(pf->count ? pf->count : 1, sizeof(*p->keys));
	p->nbytes = calloc(pf->count ? pf->count : 1, sizeof(*p->nbytes));
	if (!p->keys || !p->nbytes) {
		progress_free(p);
		p->on = false;   /* no bar, but the unit can still run */
		weightd_preflight_free(pf);
		return 0;
	}
	for (size_t i = 0; i < pf->count; i++) {
		const weightd_output_info *o = &pf->outputs[i];
		size_t k;

		if (o->alias_of[0] || !o->key)
			continue;
		for (k = 0; k < p->n; k++)
			if (memcmp(p->keys[k], o->key, WEIGHTD_DIGEST_LEN) == 0)
				break;
		if (k < p->n)
			continue;
		memcpy(p->keys[p->n], o->key, WEIGHTD_DIGEST_LEN);
		p->nbytes[p->n++] = o->nbytes;
		p->total += o->nbytes;
	}
	weightd_preflight_free(pf);
	return 0;
}

/* "1:05", "1:02:03"; "--:--" when not known. */
static void fmt_eta(double s, char *out, size_t cap)
{
	uint64_t t;

	if (!(s >= 0) || s > 359999) {
		snprintf(out, cap, "--:--");
		return;
	}
	t = (uint64_t)(s + 0.5);
	if (t >= 3600)
		snprintf(out, cap, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, t / 3600, t / 60 % 60,
			 t % 60);
	else
		snprintf(out, cap, "%" PRIu64 ":%02" PRIu64, t / 60, t % 60);
}

/*
 * One frame, redrawn in place: " 42% [########----------] 54.0 MiB / 128.0 MiB  250.0 MiB/s  ETA 0:01".
 * The final frame ends the line and says how long the whole took instead of the time left.
 */
static void progress_draw(struct progress *p, uint64_t done, bool final)
{
	double now = mono(), rate = -1, frac;
	char *d, *t, *r = NULL, tail[160], when[40], eta[24], bar[64];
	struct winsize ws;
	int cols = 80, width, fill;

	if (done > p->total)
		done = p->total;
	frac = p->total ? (double)done / (double)p->total : 1.0;
	if (p->have_base && now - p->t_base >= 0.05 && done >= p->done_base)
		rate = (double)(done - p->done_base) / (now - p->t_base);
	if (final)
		snprintf(when, sizeof(when), "in %.1f s", now - p->t0);
	else {
		fmt_eta(rate > 0 ? (double)(p->total - done) / rate : -1, eta, sizeof(eta));
		snprintf(when, sizeof(when), "ETA %s", eta);
	}
	d = fmt_bytes(done);
	t = fmt_bytes(p->total);
	r = rate >= 0 ? fmt_bytes((uint64_t)rate) : xstrdup("-");
	snprintf(tail, sizeof(tail), " %s / %s  %s/s  %s", d, t, r, when);
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col)
		cols = ws.ws_col;
	width = cols - 1 - 7 - (int)strlen(tail);
	width = width < 10 ? 10 : width > 50 ? 50 : width;
	fill = (int)(frac * width);
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '-';
	bar[width] = '\0';
	fprintf(stderr, "\r%3d%% [%s]%s\033[K%s", (int)(frac * 100), bar, tail, final ? "\n" : "");
	fflush(stderr);
	p->drawn = !final;
	free(d);
	free(t);
	free(r);
}

/* Ask the daemon how far the unit's weights are and redraw. Stops drawing if status fails. */
static void progress_sample(struct progress *p, weightd_client *c)
{
	weightd_status *st = NULL;
	uint64_t done = 0;

	if (weightd_status_get(c, &st, NULL) < 0) {
		if (p->drawn)
			fputc('\n', stderr);
		p->drawn = false;
		p->on = false;
		return;
	}
	for (size_t k = 0; k < p->n; k++) {
		uint64_t got = p->nbytes[k];

		for (size_t j = 0; j < st->n_jobs; j++)
			if (st->jobs[j].key &&
			    memcmp(st->jobs[j].key, p->keys[k], WEIGHTD_DIGEST_LEN) == 0) {
				got = st->jobs[j].done < got ? st->jobs[j].done : got;
				break;
			}
		done += got;
	}
	weightd_status_free(st);
	if (!p->have_base) {
		p->have_base = true;
		p->t_base = mono();
		p->done_base = done;
	}
	progress_draw(p, done, false);
}

/*
 * Submit the unit and wait for the daemon's answer. On a terminal, preflight it first, then
 * poll the unit and the daemon's status every PROGRESS_INTERVAL and draw a bar once the unit has
 * taken longer than that (quick units print nothing). Returns 0 or a negative code with err set
 * (by preflight, submit or finish); a bar on the screen is ended with a newline either way.
 */
static int run_unit(weightd_client *c, weightd_unit *u, weightd_error *err)
{
	struct progress p = { .on = isatty(STDERR_FILENO) == 1 };
	double next;
	int r, done = 0;

	if (p.on) {
		r = progress_init(&p, u, err);
		if (r < 0)
			goto out;
	}
	r = weightd_unit_submit(u, err);
	if (r < 0)
		goto out;
	p.t0 = mono();
	next = p.t0 + PROGRESS_INTERVAL;
	while (p.on) {
		struct pollfd pfd = { weightd_client_fd(c), POLLIN, 0 };
		double left;

		if (weightd_unit_poll(u, &done, NULL) < 0 || done)
			break;
		left = next - mono();
		if (left > 0) {
			/* wakes early when the reply arrives */
			poll(&pfd, 1, (int)(left * 1000) + 1);
			continue;
		}
		progress_sample(&p, c);
		next = mono() + PROGRESS_INTERVAL;
	}
	r = weightd_unit_finish(u, err);
	if (p.drawn) {
		if (r == 0)
			progress_draw(&p, p.total, true);
		else
			fputc('\n', stderr);
	}
out:
	progress_free(&p);
	return r;
}

/* --- get, preload, preflight ------------------------------------------------------------- */

struct got {
	const char *name;
	const weightd_weight *w;
	const void *data;
	char digest[2 * WEIGHTD_DIGEST_LEN + 1];  /* the daemon's, as checked here */
	char sha[2 * WEIGHTD_DIGEST_LEN + 1];     /* --sha256 */
};

/*
 * Hash the mapped bytes independently of the daemon, with the algorithm and chunk composition
 * it reported, and compare with its digest: a mismatch means the memory is not what weightd
 * says it filled. With sha256, also the plain SHA-256 of the bytes (what sha256sum gives).
 */
static int verify(struct got *g, bool sha256)
{
	weightd_digest_algorithm alg = weightd_weight_digest_algorithm(g->w);
	const uint8_t *reported = weightd_weight_digest(g->w);
	size_t len = weightd_weight_digest_len(g->w), n = weightd_weight_nbytes(g->w);
	uint8_t mine[WD_DIGEST_MAX];
	char theirs[2 * WEIGHTD_DIGEST_LEN + 1];
	struct wd_content dg;

	if (sha256) {
		if (wd_sha256(g->data, n, mine) < 0)
			return fail("cannot compute SHA-256 of %s", g->name);
		wd_hex(mine, WD_DIGEST_LEN, g->sha);
	}
	if (!len || wd_digest_len((enum wd_digest_alg)alg) != len)
		return fail("weightd reported no digest for %s", g->name);
	if (wd_content_init(&dg, (enum wd_digest_alg)alg) < 0)
		return fail("cannot compute the %s digest of %s", weightd_digest_algorithm_name(alg),
			    g->name);
	wd_content_update(&dg, g->data, n);
	wd_content_final(&dg, mine);
	wd_hex(mine, len, g->digest);
	wd_hex(reported, len, theirs);
	if (memcmp(reported, mine, len) != 0)
		return fail("digest mismatch for %s: weightd reported %s %s but the mapped bytes hash "
			    "to %s", g->name, weightd_digest_algorithm_name(alg), theirs, g->digest);
	return 0;
}

static int print_got(const struct opts *o, struct got *gs, size_t n, bool sha256)
{
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < n; i++) {
			const weightd_weight *w = gs[i].w;
			char *key = fmt_hex(weightd_weight_key(w), WEIGHTD_DIGEST_LEN);
			json_t *x = json_pack(
				"{s:s, s:s, s:o, s:I, s:s, s:s, s:b, s:s, s:I, s:I}", "name", gs[i].name,
				"dtype", weightd_weight_dtype(w),
				"shape", json_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				"bytes", (json_int_t)weightd_weight_nbytes(w), "digest", gs[i].digest,
				"digest_algorithm",
				weightd_digest_algorithm_name(weightd_weight_digest_algorithm(w)),
				"verified", 1, "key", key,
				"handle", (json_int_t)weightd_weight_handle(w),
				"generation", (json_int_t)weightd_weight_generation(w));

			if (sha256)
				json_object_set_new(x, "sha256", json_string(gs[i].sha));
			json_array_append_new(a, x);
			free(key);
		}
		return print_json(json_pack("{s:o}", "weights", a));
	}
	static const char *const head[] = { "NAME", "DTYPE", "SHAPE", "BYTES", "DIGEST", "SHA256" };
	static const bool num[] = { 0, 0, 0, 1, 0, 0 };
	struct table t = { .ncols = sha256 ? 6 : 5, .head = head, .numeric = num };

	for (size_t i = 0; i < n; i++) {
		const weightd_weight *w = gs[i].w;
		char *dg = fmt("%s:%s (verified)",
			       weightd_digest_algorithm_name(weightd_weight_digest_algorithm(w)),
			       gs[i].digest);

		if (sha256)
			table_row(&t, xstrdup(gs[i].name), xstrdup(weightd_weight_dtype(w)),
				  fmt_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				  fmt("%" PRIu64, weightd_weight_nbytes(w)), dg, xstrdup(gs[i].sha));
		else
			table_row(&t, xstrdup(gs[i].name), xstrdup(weightd_weight_dtype(w)),
				  fmt_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				  fmt("%" PRIu64, weightd_weight_nbytes(w)), dg);
	}
	table_print(&t);
	return 0;
}

/*
 * A one-slot unit for CHECKPOINT TENSOR was built by weightctl, not by the user: drop the
 * daemon's 'slot "NAME": ' prefix so the sentence is about the tensor.
 */
static void unslot(weightd_error *err)
{
	char prefix[sizeof(err->slot) + 16];
	size_t n;

	if (!err->slot[0])
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "slot \"%s\": ", err->slot);
	if (n < sizeof(prefix) && strncmp(err->message, prefix, n) == 0)
		memmove(err->message, err->message + n, strlen(err->message + n) + 1);
	err->slot[0] = '\0';
}

/* A unit of the given tensors of one checkpoint, slots named after the tensors (sel: NULL for
 * full tensors; only with one tensor). 0 or a negative code with err set. */
static int tensor_unit(weightd_client *c, const char *checkpoint, char *const *tensors, size_t n,
		       const weightd_selection *sel, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u = NULL;
	int r;

	r = weightd_unit_new(c, &u, err);
	for (size_t i = 0; r >= 0 && i < n; i++) {
		r = weightd_unit_slot(u, tensors[i], NULL, NULL, 0, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, tensors[i], checkpoint, tensors[i], sel, err);
	}
	if (r < 0) {
		weightd_unit_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

static int get_tensor(const struct opts *o, weightd_client *c, const struct get_args *a)
{
	weightd_selection *sel = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	struct got g = { 0 };
	char *label = NULL, *tensor = (char *)a->tensor;
	int rc = EXIT_ERR;

	if (a->has_range && weightd_selection_range(a->axis, a->start, a->end, &sel, &err) < 0)
		return fail_err(&err);
	if (tensor_unit(c, a->checkpoint, &tensor, 1, sel, &u, &err) < 0 ||
	    run_unit(c, u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
		unslot(&err);
		rc = fail_err(&err);
		goto out;
	}
	label = a->has_range ? fmt("%s:%s[axis %u: %" PRIu64 "..%" PRIu64 "]", a->checkpoint,
				   a->tensor, a->axis, a->start, a->end) :
			       fmt("%s:%s", a->checkpoint, a->tensor);
	g.name = label;
	g.w = weightd_unit_weight(u, a->tensor);
	g.data = weightd_unit_data(u, a->tensor);
	if (verify(&g, a->sha256) != 0)
		goto out;
	if (a->out && write_file(a->out, g.data, weightd_weight_nbytes(g.w)) != 0)
		goto out;
	rc = print_got(o, &g, 1, a->sha256) == 0 ? 0 : EXIT_ERR;
out:
	weightd_unit_free(u);
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

static int get_recipe(const struct opts *o, weightd_client *c, const char *path, const char *out,
		      bool sha256)
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
	if (run_unit(c, u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
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
		if (verify(&gs[i], sha256) != 0)
			goto out;
	}
	if (out && write_file(out, gs[0].data, weightd_weight_nbytes(gs[0].w)) != 0)
		goto out;
	rc = print_got(o, gs, n, sha256) == 0 ? 0 : EXIT_ERR;
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
		{ "sha256", no_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 0;   /* 0, not 1: re-initialises GNU getopt, whose first pass used "+" */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'S': g->sha256 = true; break;
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
		return get_recipe(o, c, g->recipe, g->out, g->sha256);
	return get_tensor(o, c, g);
}

/* Parse preload's arguments completely (before connecting): 0 or EXIT_USAGE. */
static int parse_preload(int argc, char **argv, struct preload_args *pa)
{
	static const struct option longopts[] = {
		{ "recipe", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch != 'R')
			return usage_error("preload: unknown option or missing value: %s",
					   argv[optind - 1]);
		pa->recipe = optarg;
	}
	if (pa->recipe) {
		if (optind != argc)
			return usage_error("preload --recipe FILE takes no CHECKPOINT or TENSOR");
		return 0;
	}
	if (optind >= argc)
		return usage_error("preload needs CHECKPOINT [TENSOR...] (or --recipe FILE.json)");
	pa->checkpoint = argv[optind];
	pa->tensors = argv + optind + 1;
	pa->n_tensors = (size_t)(argc - optind - 1);
	return 0;
}

/*
 * Materialize a unit and release it at once: the daemon keeps the weights cached (unreferenced,
 * first to go when the budget needs room), so the next client to ask reads nothing.
 */
static int cmd_preload(const struct opts *o, weightd_client *c, const struct preload_args *pa)
{
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	char **names = NULL, *b = NULL, *rd = NULL;
	uint64_t *handles = NULL, bytes = 0, bytes_read;
	size_t n, nw = 0;
	int rc = EXIT_ERR;

	if (pa->recipe) {
		if (load_unit(c, pa->recipe, &u) != 0)
			return EXIT_ERR;
	} else if (pa->n_tensors) {
		if (tensor_unit(c, pa->checkpoint, pa->tensors, pa->n_tensors, NULL, &u, &err) < 0)
			return fail_err(&err);
	} else {
		if (weightd_describe(c, pa->checkpoint, &d, &err) < 0)
			return fail_err(&err);
		if (d->n_tensors == 0) {
			rc = fail("checkpoint %s has no tensors", pa->checkpoint);
			goto out;
		}
		names = calloc(d->n_tensors, sizeof(*names));
		if (!names) {
			rc = fail("out of memory");
			goto out;
		}
		for (size_t i = 0; i < d->n_tensors; i++)
			names[i] = (char *)d->tensors[i].name;
		if (tensor_unit(c, pa->checkpoint, names, d->n_tensors, NULL, &u, &err) < 0) {
			rc = fail_err(&err);
			goto out;
		}
	}
	if (run_unit(c, u, &err) < 0) {
		rc = pa->recipe ? fail("%s: %s", pa->recipe, err.message) : fail_err(&err);
		goto out;
	}
	/* distinct weights (aliases and identical recipes share one) */
	n = weightd_unit_slot_count(u);
	handles = calloc(n ? n : 1, sizeof(*handles));
	if (!handles) {
		rc = fail("out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const weightd_weight *w = weightd_unit_weight(u, weightd_unit_slot_name(u, i));
		uint64_t h = weightd_weight_handle(w);
		size_t k;

		for (k = 0; k < nw && handles[k] != h; k++)
			;
		if (k < nw)
			continue;
		handles[nw++] = h;
		bytes += weightd_weight_nbytes(w);
	}
	bytes_read = weightd_unit_bytes_read(u);
	if (o->json) {
		rc = print_json(json_pack("{s:I, s:I, s:I}", "weights", (json_int_t)nw, "bytes",
					  (json_int_t)bytes, "bytes_read", (json_int_t)bytes_read)) ?
			     EXIT_ERR : 0;
		goto out;
	}
	b = fmt_bytes(bytes);
	rd = fmt_bytes(bytes_read);
	printf("preloaded %zu weight%s (%s); %s read from checkpoints\n", nw, nw == 1 ? "" : "s", b,
	       rd);
	rc = 0;
out:
	weightd_unit_free(u);
	weightd_description_free(d);
	free(names);
	free(handles);
	free(b);
	free(rd);
	return rc;
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

/* --- metrics ----------------------------------------------------------------------------- */

/* HELP and TYPE of one metric family. Help texts are constants without '\' or newlines. */
static void prom_family(const char *name, const char *type, const char *help)
{
	printf("# HELP weightd_%s %s\n# TYPE weightd_%s %s\n", name, help, name, type);
}

static void prom_u64(const char *name, const char *type, const char *help, uint64_t v)
{
	prom_family(name, type, help);
	printf("weightd_%s %" PRIu64 "\n", name, v);
}

/* A label value as the text format wants it: backslash, double quote and newline escaped. */
static void prom_label(const char *v)
{
	putchar('"');
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			printf("\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", stdout);
		else
			putchar(*v);
	}
	putchar('"');
}

/*
 * The daemon's counters in the Prometheus text exposition format (version 0.0.4), every name
 * prefixed weightd_, counters ending in _total. All values come from one status reply, so they
 * are consistent with each other.
 */
static int cmd_metrics(weightd_client *c)
{
	weightd_status *s;
	weightd_error err;
	double secs;

	if (weightd_status_get(c, &s, &err) < 0)
		return fail_err(&err);
	secs = (double)s->materialize_ns / 1e9;
	prom_family("info", "gauge", "The daemon's version and instance (shared-memory prefix); always 1.");
	fputs("weightd_info{version=", stdout);
	prom_label(s->server_version);
	fputs(",instance=", stdout);
	prom_label(s->instance);
	fputs("} 1\n", stdout);
	prom_family("uptime_seconds", "gauge", "Seconds since the daemon started.");
	printf("weightd_uptime_seconds %.3f\n", (double)s->uptime_ms / 1000);
	prom_u64("resident_bytes", "gauge",
		 "Bytes of shared memory held by weights and by materializations in flight.",
		 s->bytes_resident);
	prom_u64("budget_bytes", "gauge", "The memory budget in bytes.", s->budget_bytes);
	prom_u64("weights", "gauge", "Weights resident in shared memory.", s->weights);
	prom_u64("clients", "gauge", "Connected clients.", s->clients);
	prom_u64("references", "gauge", "References clients hold on weights.", s->references);
	prom_u64("materializations_total", "counter", "Materializations that finished.",
		 s->materializations);
	prom_u64("materializations_failed_total", "counter", "Materializations that failed.",
		 s->materializations_failed);
	prom_u64("materializations_in_flight", "gauge", "Materializations queued or running.",
		 s->materializations_in_flight);
	prom_u64("checkpoint_read_bytes_total", "counter",
		 "Bytes read from checkpoint files by materializations.", s->bytes_read);
	prom_u64("materialized_bytes_total", "counter",
		 "Bytes of weights materialized into shared memory.", s->bytes_materialized);
	prom_family("materialization_seconds_total", "counter",
		    "Wall-clock seconds spent by finished materializations.");
	printf("weightd_materialization_seconds_total %.9f\n", secs);
	prom_family("materialization_throughput_bytes_per_second", "gauge",
		    "Bytes materialized per second spent materializing, since start (0 before any).");
	printf("weightd_materialization_throughput_bytes_per_second %.17g\n",
	       secs > 0 ? (double)s->bytes_materialized / secs : 0.0);
	prom_u64("evictions_total", "counter", "Weights evicted to make room or by request.",
		 s->evictions);
	prom_u64("readoptions_total", "counter",
		 "Weights re-adopted from shared memory after a restart instead of read again.",
		 s->readoptions);
	prom_family("source_generation", "gauge",
		    "Generation of each checkpoint source (grows when its files change and the "
		    "daemon reloads).");
	for (size_t i = 0; i < s->n_sources; i++) {
		fputs("weightd_source_generation{source=", stdout);
		prom_label(s->sources[i].name);
		printf("} %" PRIu64 "\n", s->sources[i].generation);
	}
	prom_family("source_ready", "gauge",
		    "1 when a checkpoint source is admitted and serving, 0 when it failed or was "
		    "removed.");
	for (size_t i = 0; i < s->n_sources; i++) {
		fputs("weightd_source_ready{source=", stdout);
		prom_label(s->sources[i].name);
		printf("} %d\n", strcmp(s->sources[i].state, "ready") == 0);
	}
	weightd_status_free(s);
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

/* --- purge ------------------------------------------------------------------------------- */

/*
 * Does something listen on `path`? 1 yes, 0 no, -1 cannot tell. Read from /proc/net/unix rather
 * than by connecting: under socket activation a connection would start the very daemon purge must
 * not race with (systemd's listener counts as "running": stop weightd.socket too). Falls back to a
 * connection attempt where /proc is not there.
 */
static int socket_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	FILE *f = fopen("/proc/net/unix", "r");
	char line[4608];
	int fd, r;

	if (f) {
		r = 0;
		/* Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening */
		while (fgets(line, sizeof(line), f)) {
			unsigned long flags;
			char sock_path[4096];
			line[strcspn(line, "\n")] = '\0';
			if (sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %4095s", &flags, sock_path) == 2 &&
			    (flags & 0x10000) && strcmp(sock_path, path) == 0) {
				r = 1;
				break;
			}
		}
		fclose(f);
		return r;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (r == 0)
		r = 1;
	else
		r = errno == ENOENT || errno == ECONNREFUSED ? 0 : -1;
	close(fd);
	return r;
}

/*
 * weightctl purge --config FILE | --prefix P [--state-dir D]: with the daemon stopped, unlink
 * every segment under the instance's prefix and remove its state records, so nothing of the
 * instance is left in /dev/shm. A process still mapping a weight keeps its memory until it
 * unmaps. Refuses while something answers on the instance's socket (the one in the config, or
 * --socket / $WEIGHTD_SOCKET / the default): a running daemon would lose track of its segments.
 */
static int cmd_purge(const struct opts *o, int argc, char **argv)
{
	const char *config = NULL, *prefix = NULL, *state_dir = NULL, *sock;
	struct config *cfg = NULL;
	struct wd_error err;
	int segments, records, rc = EXIT_ERR, live;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			config = argv[++i];
		else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc)
			prefix = argv[++i];
		else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
			state_dir = argv[++i];
		else
			return usage_error("purge: unknown argument or missing value: %s", argv[i]);
	}
	if (!config == !prefix || (config && state_dir))
		return usage_error("purge takes --config FILE, or --prefix P [--state-dir D]");
	sock = o->socket ? o->socket : getenv("WEIGHTD_SOCKET");
	if (!sock || !sock[0])
		sock = WEIGHTD_DEFAULT_SOCKET;
	if (config) {
		wd_error_clear(&err);
		if (config_load(config, &cfg, &err) < 0)
			return fail("%s", err.msg);
		prefix = cfg->shm_prefix;
		state_dir = cfg->state_dir;
		if (!o->socket)
			sock = cfg->socket_path;
	}
	if (!wd_segment_prefix_valid(prefix)) {
		rc = usage_error("purge: \"%s\" is not a shared-memory prefix (1 to 64 of A-Z a-z "
				 "0-9 _ . -, not starting with .)", prefix);
		goto out;
	}
	live = socket_answers(sock);
	if (live != 0) {
		fail(live > 0 ? "something listens on %s (weightd, or systemd's weightd.socket): stop "
				"both before purging (a running daemon would lose track of its segments)"
			      : "cannot tell whether weightd is running on %s; not purging", sock);
		goto out;
	}
	segments = wd_segment_purge(prefix);
	if (segments < 0) {
		fail("cannot remove the segments /dev/shm/%s.*: %s", prefix, wd_code_name(-segments));
		goto out;
	}
	records = state_purge(state_dir ? state_dir : "", prefix);
	if (o->json) {
		rc = print_json(json_pack("{s:s, s:s, s:i, s:i}", "prefix", prefix, "state_dir",
					  state_dir ? state_dir : "", "segments", segments,
					  "state_records", records));
		goto out;
	}
	printf("removed %d segment%s under /dev/shm/%s.* and %d state record%s%s%s\n", segments,
	       segments == 1 ? "" : "s", prefix, records, records == 1 ? "" : "s",
	       state_dir && state_dir[0] ? " in " : "", state_dir && state_dir[0] ? state_dir : "");
	rc = 0;
out:
	config_free(cfg);
	return rc;
}

/* --- main -------------------------------------------------------------------------------- */

struct command {
	const char *name;
	int nargs;        /* exact positional count, -1: the command parses its own */
};

static const struct command commands[] = {
	{ "list", 0 }, { "describe", 1 }, { "get", -1 }, { "preload", -1 }, { "preflight", 1 },
	{ "status", 0 }, { "metrics", 0 }, { "reload", 0 }, { "evict", 0 }, { "purge", -1 },
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
	struct preload_args pa = { 0 };
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
	if (strcmp(name, "preload") == 0 && (rc = parse_preload(cargc, cargv, &pa)) != 0)
		return rc;
	/* purge works on a stopped daemon: it never connects as a client */
	if (strcmp(name, "purge") == 0) {
		rc = cmd_purge(&o, cargc, cargv);
		if (fflush(stdout) != 0 && rc == 0)
			rc = fail("cannot write output: %s", strerror(errno));
		return rc;
	}
	rc = connect_or_fail(&o, &c);
	if (rc != 0)
		return rc;
	if (strcmp(name, "list") == 0)
		rc = cmd_list(&o, c);
	else if (strcmp(name, "describe") == 0)
		rc = cmd_describe(&o, c, cargv[1]);
	else if (strcmp(name, "get") == 0)
		rc = cmd_get(&o, c, &ga);
	else if (strcmp(name, "preload") == 0)
		rc = cmd_preload(&o, c, &pa);
	else if (strcmp(name, "preflight") == 0)
		rc = cmd_preflight(&o, c, cargv[1]);
	else if (strcmp(name, "status") == 0)
		rc = cmd_status(&o, c);
	else if (strcmp(name, "metrics") == 0)
		rc = cmd_metrics(c);
	else if (strcmp(name, "reload") == 0)
		rc = cmd_reload(&o, c);
	else
		rc = cmd_evict(&o, c);
	weightd_close(c);
	if (fflush(stdout) != 0 && rc == 0)
		rc = fail("cannot write output: %s", strerror(errno));
	return rc;
}
