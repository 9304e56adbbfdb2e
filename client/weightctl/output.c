/* SPDX-License-Identifier: Apache-2.0 */
/* output.c - weightctl's output: error messages, number and shape formatting, tables, JSON, files. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weightctl.h"

/* With --json, errors are objects on stdout too (scripts read stdout; people read stderr). */
static bool json_errors;

void output_json_errors(bool on)
{
	json_errors = on;
}

/* {"error": {"code": NAME, "number": N, "message": TEXT, and what it is about}} on stdout. */
static void json_error(const char *code, int number, const char *message,
		       const weightd_error *err)
{
	json_t *e = json_pack("{s:s, s:i, s:s}", "code", code, "number", number, "message",
			      message);

	if (!e)
		return;
	if (err) {
		if (err->checkpoint[0])
			json_object_set_new(e, "checkpoint", json_string(err->checkpoint));
		if (err->tensor[0])
			json_object_set_new(e, "tensor", json_string(err->tensor));
		if (err->slot[0])
			json_object_set_new(e, "slot", json_string(err->slot));
		if (err->node)
			json_object_set_new(e, "node", json_integer((json_int_t)err->node - 1));
		if (err->axis >= 0)
			json_object_set_new(e, "axis", json_integer(err->axis));
		if (err->expected || err->actual) {
			json_object_set_new(e, "expected", json_integer(err->expected));
			json_object_set_new(e, "actual", json_integer(err->actual));
		}
	}
	output_print_json(json_pack("{s:o}", "error", e));
}

/* The text of a message: "weightctl: ..." on stderr, and the JSON form when asked for. */
static void say(const char *code, int number, const weightd_error *err, const char *fmt,
		va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "weightctl: %s\n", msg);
	if (json_errors)
		json_error(code, number, msg, err);
}

int output_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say("usage", 0, NULL, fmt, ap);
	va_end(ap);
	fputs("usage: weightctl [--socket PATH] [--json] COMMAND [ARGS]  "
	      "(weightctl --help lists the commands)\n", stderr);
	return EXIT_USAGE;
}

int output_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say("error", 0, NULL, fmt, ap);
	va_end(ap);
	return EXIT_ERR;
}

static int fail_code(const weightd_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int fail_code(const weightd_error *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(weightd_code_name(err->code), err->code, err, fmt, ap);
	va_end(ap);
	return EXIT_ERR;
}

int output_fail_err(const weightd_error *err)
{
	return fail_code(err, "%s", err->message[0] ? err->message : weightd_code_name(err->code));
}

const void **output_sorted(const void *base, size_t n, size_t size,
			   int (*cmp)(const void *a, const void *b))
{
	const void **p = malloc((n ? n : 1) * sizeof(*p));

	if (!p) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (const char *)base + i * size;
	qsort(p, n, sizeof(*p), cmp);
	return p;
}

char *output_strdup(const char *s)
{
	char *d = strdup(s ? s : "");

	if (!d) {
		fputs("weightctl: out of memory\n", stderr);
		exit(EXIT_ERR);
	}
	return d;
}

char *output_fmt(const char *f, ...)
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
char *output_fmt_bytes(uint64_t n)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	int u = -1;

	if (n < 1024)
		return output_fmt("%" PRIu64 " B", n);
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	return output_fmt("%.1f %s", v, units[u]);
}

char *output_fmt_shape(const uint64_t *shape, size_t ndim)
{
	size_t cap = 3 + ndim * 22, len = 0; /* "[", the dimensions, "]" and the NUL */
	char *s = malloc(cap);

	if (!s)
		return output_strdup("?");
	s[len++] = '[';
	for (size_t i = 0; i < ndim; i++)
		len += (size_t)snprintf(s + len, cap - len, "%s%" PRIu64, i ? ", " : "", shape[i]);
	snprintf(s + len, cap - len, "]");
	return s;
}

char *output_fmt_hex(const uint8_t *b, size_t n)
{
	char *s = malloc(2 * n + 1);

	if (!s)
		return output_strdup("?");
	for (size_t i = 0; i < n; i++)
		snprintf(s + 2 * i, 3, "%02x", b[i]);
	s[2 * n] = '\0';
	return s;
}

json_t *output_json_shape(const uint64_t *shape, size_t ndim)
{
	json_t *a = json_array();

	for (size_t i = 0; i < ndim; i++)
		json_array_append_new(a, json_integer((json_int_t)shape[i]));
	return a;
}

int output_print_json(json_t *j)
{
	int r = json_dumpf(j, stdout, JSON_INDENT(2));

	json_decref(j);
	if (r < 0)
		return output_fail("cannot write JSON output");
	fputc('\n', stdout);
	return 0;
}

void output_table_row(struct table *t, ...)
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

void output_table_print(struct table *t)
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

int output_read_file(const char *path, char **ret, size_t *ret_len)
{
	struct stat st;
	char *buf;
	size_t len = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return output_fail("cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_JSON_FILE) {
		close(fd);
		return output_fail("%s is not a regular file of at most %u bytes", path,
				   MAX_JSON_FILE);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return output_fail("out of memory");
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

int output_write_file(const char *path, const void *data, uint64_t n)
{
	const uint8_t *p = data;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return output_fail("cannot create %s: %s", path, strerror(errno));
	while (n) {
		ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;

			close(fd);
			return output_fail("cannot write %s: %s", path, strerror(e));
		}
		p += w;
		n -= (uint64_t)w;
	}
	if (close(fd) < 0)
		return output_fail("cannot write %s: %s", path, strerror(errno));
	return 0;
}

