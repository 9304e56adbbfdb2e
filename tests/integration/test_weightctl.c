/* SPDX-License-Identifier: Apache-2.0 */
/* test_weightctl.c - weightctl as operators use it: `metrics` checked line by line against the
 * Prometheus text exposition format and against status after known activity; the progress bar
 * of get and preload on a pseudo-terminal, and nothing of it in a pipe; exit codes. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <regex.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fixture.h"
#include "files.h"
#include "weightd/client.h"

/* --- running weightctl ------------------------------------------------------------------------ */

/*
 * Run weightctl --socket H.sock ARGS... (NULL-terminated) with stdout and stderr each to a file
 * (so neither is a terminal), and return its exit status; *ret_out and *ret_err receive what it
 * wrote (free them).
 */
static int ctl(char **ret_out, char **ret_err, ...)
{
	char outp[512], errp[512];
	char *argv[32];
	int argc = 0, status;
	va_list ap;
	pid_t pid;

	argv[argc++] = (char *)harness_weightctl();
	argv[argc++] = "--socket";
	argv[argc++] = H.sock;
	va_start(ap, ret_err);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	harness_path(&H, "ctl.out", outp, sizeof(outp));
	harness_path(&H, "ctl.err", errp, sizeof(errp));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*ret_out = tf_read(outp, NULL);
	*ret_err = tf_read(errp, NULL);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * Run weightctl on a pseudo-terminal of `cols` columns (stdout and stderr both the terminal, as
 * in an interactive shell); returns its exit status and everything it wrote (free it).
 */
static int ctl_pty(char **ret_out, int cols, ...)
{
	struct winsize ws = { .ws_row = 24, .ws_col = (unsigned short)cols };
	char *argv[32], *buf = NULL;
	size_t len = 0, cap = 0;
	int argc = 0, master = -1, status;
	time_t deadline = time(NULL) + 60;
	va_list ap;
	pid_t pid;

	argv[argc++] = (char *)harness_weightctl();
	argv[argc++] = "--socket";
	argv[argc++] = H.sock;
	va_start(ap, cols);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	pid = forkpty(&master, NULL, NULL, &ws);
	assert_true(pid >= 0);
	if (pid == 0) {
		execv(argv[0], argv);
		_exit(127);
	}
	for (;;) {
		struct pollfd p = { master, POLLIN, 0 };
		char tmp[4096];
		ssize_t n;

		if (time(NULL) > deadline) {
			kill(pid, SIGKILL);
			fail_msg("weightctl on a terminal did not finish within 60 s");
		}
		if (poll(&p, 1, 1000) <= 0)
			continue;
		n = read(master, tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* EIO: the terminal's last user is gone */
		if (len + (size_t)n + 1 > cap) {
			cap = (len + (size_t)n + 1) * 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		memcpy(buf + len, tmp, (size_t)n);
		len += (size_t)n;
	}
	close(master);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!buf)
		buf = calloc(1, 1);
	assert_non_null(buf);
	buf[len] = '\0';
	*ret_out = buf;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* --- the Prometheus text exposition format ------------------------------------------------------ */

/*
 * A parsed exposition: one family per HELP/TYPE, one sample per metric line (labels kept in the
 * canonical text 'name=value,...', values unescaped). The parser returns -1 with `why` set at the
 * first line that breaks the format (text format 0.0.4) or weightd's conventions.
 */
struct family {
	char name[128];
	char type[16];
	bool help, has_samples, closed;
};

struct sample {
	char name[128];
	char labels[512];
	double value;
};

struct expo {
	struct family fam[64];
	size_t n_fam;
	struct sample smp[256];
	size_t n_smp;
	char why[512];
};

static int bad(struct expo *e, int no, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(struct expo *e, int no, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(e->why, sizeof(e->why), "line %d: ", no);

	va_start(ap, fmt);
	vsnprintf(e->why + n, sizeof(e->why) - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static bool metric_name_ok(const char *s, size_t n)
{
	if (n == 0 || !(s[0] == '_' || s[0] == ':' || (s[0] >= 'a' && s[0] <= 'z') ||
			(s[0] >= 'A' && s[0] <= 'Z')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(s[i] == '_' || s[i] == ':' || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* [a-zA-Z_][a-zA-Z0-9_]*, and names starting with __ are reserved. */
static bool label_name_ok(const char *s, size_t n)
{
	if (n == 0 || memchr(s, ':', n) || (n >= 2 && s[0] == '_' && s[1] == '_'))
		return false;
	return metric_name_ok(s, n);
}

static size_t name_len(const char *s)
{
	size_t n = 0;

	while (s[n] && s[n] != ' ' && s[n] != '\t' && s[n] != '{')
		n++;
	return n;
}

/* A sample value: a Go-style float, or NaN, +Inf, -Inf. */
static bool value_ok(const char *s, double *ret)
{
	char *end;

	if (strcmp(s, "NaN") == 0 || strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0) {
		*ret = strcmp(s, "NaN") == 0 ? NAN : s[0] == '+' ? INFINITY : -INFINITY;
		return true;
	}
	if (!*s || strpbrk(s, "xXnNiIpP")) /* no hex floats, no C spellings of inf/nan */
		return false;
	errno = 0;
	*ret = strtod(s, &end);
	return *end == '\0' && errno == 0;
}

static struct family *find_family(struct expo *e, const char *name)
{
	for (size_t i = 0; i < e->n_fam; i++)
		if (strcmp(e->fam[i].name, name) == 0)
			return &e->fam[i];
	return NULL;
}

/* HELP and TYPE lines; other comments are allowed by the format but weightctl writes none. */
static int parse_comment(struct expo *e, const char *line, int no)
{
	const char *name = line + 7;
	size_t n = name_len(name);
	bool help = strncmp(line, "# HELP ", 7) == 0;
	struct family *f;
	char tmp[128];

	if (!help && strncmp(line, "# TYPE ", 7) != 0)
		return bad(e, no, "a comment that is neither HELP nor TYPE");
	if (!metric_name_ok(name, n) || name[n] != ' ' || n >= sizeof(tmp))
		return bad(e, no, "bad metric name or separator");
	memcpy(tmp, name, n);
	tmp[n] = '\0';
	f = find_family(e, tmp);
	if (!f) {
		if (e->n_fam == sizeof(e->fam) / sizeof(e->fam[0]))
			return bad(e, no, "too many families");
		f = &e->fam[e->n_fam++];
		memset(f, 0, sizeof(*f));
		memcpy(f->name, tmp, n + 1);
	}
	if (f->has_samples)
		return bad(e, no, "%s after samples of %s", help ? "HELP" : "TYPE", tmp);
	if (help) {
		if (f->help)
			return bad(e, no, "a second HELP for %s", tmp);
		f->help = true;
		if (!name[n + 1])
			return bad(e, no, "empty HELP text");
		/* the docstring escapes only backslash and newline */
		for (const char *q = name + n + 1; *q; q++)
			if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
				return bad(e, no, "bad escape in HELP");
			else if (*q == '\\')
				q++;
		return 0;
	}
	static const char *const types[] = { "counter", "gauge", "histogram", "summary", "untyped" };
	const char *t = name + n + 1;
	bool known = false;

	if (f->type[0])
		return bad(e, no, "a second TYPE for %s", tmp);
	for (size_t i = 0; i < 5; i++)
		known |= strcmp(t, types[i]) == 0;
	if (!known)
		return bad(e, no, "unknown type \"%s\"", t);
	snprintf(f->type, sizeof(f->type), "%s", t);
	return 0;
}

static int parse_labels(struct expo *e, struct sample *s, const char **pp, int no)
{
	const char *p = *pp + 1;
	size_t lo = 0;

	while (*p != '}') {
		size_t ln = 0;

		while (p[ln] && p[ln] != '=')
			ln++;
		if (!label_name_ok(p, ln) || p[ln] != '=' || p[ln + 1] != '"')
			return bad(e, no, "bad label name");
		/* Prometheus sets these on every target it scrapes: ours would be renamed
		 * exported_instance and exported_job */
		if ((ln == 8 && strncmp(p, "instance", 8) == 0) ||
		    (ln == 3 && strncmp(p, "job", 3) == 0))
			return bad(e, no, "label %.*s collides with Prometheus's target labels",
				   (int)ln, p);
		lo += (size_t)snprintf(s->labels + lo, sizeof(s->labels) - lo, "%s%.*s=",
				       lo ? "," : "", (int)ln, p);
		p += ln + 2;
		while (*p != '"') {
			char c = *p;

			if (!c)
				return bad(e, no, "unterminated label value");
			if (c == '\\') {
				p++;
				if (*p == 'n')
					c = '\n';
				else if (*p == '\\' || *p == '"')
					c = *p;
				else
					return bad(e, no, "bad escape in a label value");
			}
			if (lo + 2 >= sizeof(s->labels))
				return bad(e, no, "labels too long");
			s->labels[lo++] = c;
			p++;
		}
		p++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			return bad(e, no, "labels not separated by ','");
	}
	*pp = p + 1;
	return 0;
}

static int parse_sample(struct expo *e, const char *line, int no)
{
	struct sample *s;
	struct family *f;
	size_t n = name_len(line), vn;
	const char *p = line + n, *sp;
	char val[64];

	if (e->n_smp == sizeof(e->smp) / sizeof(e->smp[0]))
		return bad(e, no, "too many samples");
	s = &e->smp[e->n_smp];
	memset(s, 0, sizeof(*s));
	if (!metric_name_ok(line, n) || n >= sizeof(s->name))
		return bad(e, no, "bad metric name");
	memcpy(s->name, line, n);
	if (*p == '{' && parse_labels(e, s, &p, no) < 0)
		return -1;
	if (*p != ' ')
		return bad(e, no, "no blank before the value");
	while (*p == ' ')
		p++;
	sp = strchr(p, ' ');
	vn = sp ? (size_t)(sp - p) : strlen(p);
	if (vn >= sizeof(val))
		return bad(e, no, "value too long");
	memcpy(val, p, vn);
	val[vn] = '\0';
	if (!value_ok(val, &s->value))
		return bad(e, no, "bad value \"%s\"", val);
	if (sp) { /* an optional timestamp: an integer of milliseconds */
		char *end;

		strtoll(sp + 1, &end, 10);
		if (*end || end == sp + 1)
			return bad(e, no, "bad timestamp");
	}
	/* counters and gauges: the sample's name is its family's; a family's lines are one group */
	f = find_family(e, s->name);
	if (!f || !f->type[0])
		return bad(e, no, "sample of %s without a TYPE line before it", s->name);
	if (f->closed)
		return bad(e, no, "samples of %s are not in one group", s->name);
	for (size_t i = 0; i < e->n_fam; i++)
		if (&e->fam[i] != f && e->fam[i].has_samples)
			e->fam[i].closed = true;
	f->has_samples = true;
	for (size_t i = 0; i < e->n_smp; i++)
		if (strcmp(e->smp[i].name, s->name) == 0 && strcmp(e->smp[i].labels, s->labels) == 0)
			return bad(e, no, "a second sample %s{%s}", s->name, s->labels);
	e->n_smp++;
	return 0;
}

/* Parse the whole text: 0, or -1 with e->why naming the first offending line. */
static int parse_exposition(const char *text, struct expo *e)
{
	const char *p = text;
	int no = 0;

	memset(e, 0, sizeof(*e));
	if (!*text || text[strlen(text) - 1] != '\n')
		return bad(e, 0, "empty, or the last line does not end with a newline");
	while (*p) {
		const char *nl = strchr(p, '\n');
		char line[1024];
		size_t n = (size_t)(nl - p);
		int r;

		no++;
		if (n >= sizeof(line))
			return bad(e, no, "too long");
		memcpy(line, p, n);
		line[n] = '\0';
		if (n == 0 || line[0] == ' ' || line[n - 1] == ' ' || strpbrk(line, "\r\t"))
			return bad(e, no, "empty, blanks at an end, or a tab or CR");
		r = line[0] == '#' ? parse_comment(e, line, no) : parse_sample(e, line, no);
		if (r < 0)
			return r;
		p = nl + 1;
	}
	/* weightd's conventions: a prefix, HELP and TYPE for each, _total on counters only */
	for (size_t i = 0; i < e->n_fam; i++) {
		const struct family *f = &e->fam[i];
		size_t n = strlen(f->name);
		bool total = n > 6 && strcmp(f->name + n - 6, "_total") == 0;

		if (strncmp(f->name, "weightd_", 8) != 0)
			return bad(e, 0, "%s lacks the weightd_ prefix", f->name);
		if (!f->help || !f->type[0])
			return bad(e, 0, "%s lacks HELP or TYPE", f->name);
		if ((strcmp(f->type, "counter") == 0) != total)
			return bad(e, 0, "%s is a %s: counters and only counters end in _total",
				   f->name, f->type);
	}
	for (size_t i = 0; i < e->n_smp; i++)
		if (strcmp(find_family(e, e->smp[i].name)->type, "counter") == 0 &&
		    !(e->smp[i].value >= 0))
			return bad(e, 0, "counter %s is negative", e->smp[i].name);
	return 0;
}

static double metric(struct expo *e, const char *name, const char *labels)
{
	for (size_t i = 0; i < e->n_smp; i++)
		if (strcmp(e->smp[i].name, name) == 0 && strcmp(e->smp[i].labels, labels) == 0)
			return e->smp[i].value;
	fail_msg("no sample %s{%s}", name, labels);
	return NAN;
}

static const char *metric_type(struct expo *e, const char *name)
{
	struct family *f = find_family(e, name);

	if (!f)
		fail_msg("no family %s", name);
	return f->type;
}

/* The format checker must accept what the format allows and refuse what it forbids. */
static void the_format_checker_refuses_bad_expositions(void **state)
{
	static const char *const ok =
		"# HELP weightd_x An x.\n# TYPE weightd_x gauge\nweightd_x{a=\"q\\\"\\\\\\n\"} 1.5\n"
		"weightd_x{a=\"r\",b=\"\"} -Inf 1700000000000\n# TYPE weightd_n_total counter\n"
		"# HELP weightd_n_total Some \\\\ n.\nweightd_n_total 3e+2\n";
	static const char *const bad_texts[] = {
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 1", /* no final newline */
		"weightd_x 1\n",					   /* no TYPE */
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 1\n# TYPE weightd_x gauge\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{a=\"\\q\"} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{a=\"v} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 0x10\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x inf\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{1a=\"v\"} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{__a=\"v\"} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{instance=\"v\"} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{a=\"v\",job=\"w\"} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x{a=\"v\" b=\"w\"} 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gaug\nweightd_x 1\n",
		"# HELP weightd_x_total x\n# TYPE weightd_x_total gauge\nweightd_x_total 1\n",
		"# HELP weightd_y x\n# TYPE weightd_y counter\nweightd_y 1\n",
		"# HELP weightd_y_total x\n# TYPE weightd_y_total counter\nweightd_y_total -1\n",
		"# HELP other x\n# TYPE other gauge\nother 1\n",
		"# TYPE weightd_x gauge\nweightd_x 1\n", /* no HELP */
		("# HELP weightd_x x\n# TYPE weightd_x gauge\n# HELP weightd_y y\n# TYPE weightd_y gauge\n"
		 "weightd_x 1\nweightd_y 1\nweightd_x{a=\"b\"} 1\n"), /* not one group */
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 1\nweightd_x 2\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\n\nweightd_x 1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 1 \n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x\t1\n",
		"# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 1 12.5\n",
		/* allowed by the format, but weightctl writes no comments besides HELP and TYPE */
		"# a comment\n# HELP weightd_x x\n# TYPE weightd_x gauge\nweightd_x 1\n",
	};
	struct expo e;

	(void)state;
	if (parse_exposition(ok, &e) < 0)
		fail_msg("refused a valid text: %s", e.why);
	assert_int_equal(e.n_smp, 3);
	assert_string_equal(e.smp[0].labels, "a=q\"\\\n");
	assert_true(isinf(metric(&e, "weightd_x", "a=r,b=")));
	assert_true(metric(&e, "weightd_n_total", "") == 300);
	for (size_t i = 0; i < sizeof(bad_texts) / sizeof(bad_texts[0]); i++)
		if (parse_exposition(bad_texts[i], &e) == 0)
			fail_msg("the checker accepted bad text %zu", i);
}

/* --- metrics -------------------------------------------------------------------------------------- */

/* Sizes of the quick-start sample's tensors, from its shapes and dtypes (tests/fixtures). */
#define EMBED_BYTES (1024u * 64 * 2)      /* model.embed_tokens.weight BF16 [1024, 64] */
#define NORM0_BYTES (64u * 4)             /* model.layers.0.input_layernorm.weight F32 [64] */
#define Q_BYTES (64u * 64 * 2)            /* model.layers.0.self_attn.q_proj.weight F16 [64, 64] */
#define LM_HEAD_BYTES (1024u * 64 * 2)    /* lm_head.weight BF16 [1024, 64] */

static char victim[512];

static int setup_metrics(void **state)
{
	char sections[2048], tiny[512];

	if (harness_init(&H) < 0 ||
	    harness_sample(&H, "tiny.safetensors", tiny, sizeof(tiny)) < 0 ||
	    harness_sample(&H, "victim.safetensors", victim, sizeof(victim)) < 0)
		return -1;
	snprintf(sections, sizeof(sections),
		 "[checkpoint:tiny]\npath = %s\n\n[checkpoint:victim]\npath = %s\n", tiny, victim);
	return fixture_start(NULL, sections);
}

static int teardown_all(void **state)
{
	harness_cleanup(&H);
	return 0;
}

/* `weightctl --json status`, parsed. */
static json_t *json_status(void)
{
	char *out, *err;
	json_error_t je;
	json_t *j;

	assert_int_equal(ctl(&out, &err, "--json", "status", NULL), 0);
	j = json_loads(out, 0, &je);
	if (!j)
		fail_msg("weightctl --json status is not JSON: %s", je.text);
	free(out);
	free(err);
	return j;
}

static double jnum(json_t *j, const char *key)
{
	json_t *v = json_object_get(j, key);

	if (!json_is_integer(v))
		fail_msg("status has no integer \"%s\"", key);
	return (double)json_integer_value(v);
}

static struct expo *metrics_now(void)
{
	static struct expo e;
	char *out, *err;

	int rc = ctl(&out, &err, "metrics", NULL);

	if (rc != 0)
		fail_msg("weightctl metrics exited %d: %s", rc, err);
	assert_string_equal(err, "");
	if (parse_exposition(out, &e) < 0)
		fail_msg("weightctl metrics breaks the format: %s\n%s", e.why, out);
	free(out);
	free(err);
	return &e;
}

/* Every gauge and counter equals the field status reports (status asked right after). */
static void metrics_agree_with_status(struct expo *e, json_t *st)
{
	static const struct { const char *metric, *field; } same[] = {
		{ "weightd_resident_bytes", "bytes_resident" },
		{ "weightd_budget_bytes", "budget_bytes" },
		{ "weightd_weights", "weights" },
		{ "weightd_clients", "clients" },
		{ "weightd_references", "references" },
		{ "weightd_materializations_total", "materializations" },
		{ "weightd_materializations_failed_total", "materializations_failed" },
		{ "weightd_materializations_in_flight", "materializations_in_flight" },
		{ "weightd_checkpoint_read_bytes_total", "bytes_read" },
		{ "weightd_materialized_bytes_total", "bytes_materialized" },
		{ "weightd_evictions_total", "evictions" },
		{ "weightd_readoptions_total", "readoptions" },
	};
	static const struct {
		const char *metric, *field;
	} per_source[] = {
		{ "weightd_source_resident_bytes", "resident_bytes" },
		{ "weightd_source_held_bytes", "held_bytes" },
		{ "weightd_source_materialized_bytes_total", "materialized_bytes" },
		{ "weightd_source_clients", "clients" },
		{ "weightd_source_errors_total", "errors" },
	};
	static const char *const remote[] = { "bytes", "requests", "retries", "errors" };
	double ns = jnum(st, "materialize_ns");
	json_t *srcs = json_object_get(st, "sources");
	char labels[256];
	size_t i;
	json_t *src;

	for (i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		if (metric(e, same[i].metric, "") != jnum(st, same[i].field))
			fail_msg("%s is %.17g but status says %s %.17g", same[i].metric,
				 metric(e, same[i].metric, ""), same[i].field,
				 jnum(st, same[i].field));
	assert_true(fabs(metric(e, "weightd_materialization_seconds_total", "") - ns / 1e9) < 1e-9);
	/* rates are left to rate(): counters only, no precomputed throughput */
	assert_string_equal(metric_type(e, "weightd_materialized_bytes_total"), "counter");
	assert_string_equal(metric_type(e, "weightd_materialization_seconds_total"), "counter");
	assert_null(find_family(e, "weightd_materialization_throughput_bytes_per_second"));
	/* the status was asked after the metrics: the uptime can only have grown */
	assert_true(metric(e, "weightd_uptime_seconds", "") * 1000 <= jnum(st, "uptime_ms") + 1);
	/* labels in the order written: version first; never "instance", which Prometheus sets on
	 * every target (it would rename ours exported_instance) */
	snprintf(labels, sizeof(labels), "version=%s,shm_prefix=%s",
		 json_string_value(json_object_get(st, "server_version")),
		 json_string_value(json_object_get(st, "instance")));
	assert_int_equal(metric(e, "weightd_info", labels), 1);
	assert_int_equal(json_array_size(srcs), 2);
	json_array_foreach(srcs, i, src) {
		const char *name = json_string_value(json_object_get(src, "name"));
		bool ready = strcmp(json_string_value(json_object_get(src, "state")), "ready") == 0;

		snprintf(labels, sizeof(labels), "source=%s", name);
		assert_true(metric(e, "weightd_source_generation", labels) ==
			    jnum(src, "generation"));
		assert_int_equal(metric(e, "weightd_source_ready", labels), ready);
		for (size_t k = 0; k < sizeof(per_source) / sizeof(per_source[0]); k++)
			if (metric(e, per_source[k].metric, labels) !=
			    jnum(src, per_source[k].field))
				fail_msg("%s{%s} is %.17g but status says %s %.17g",
					 per_source[k].metric, labels,
					 metric(e, per_source[k].metric, labels),
					 per_source[k].field, jnum(src, per_source[k].field));
		/* remote traffic, under "remote" in status: all 0 for these local checkpoints */
		for (size_t k = 0; k < sizeof(remote) / sizeof(remote[0]); k++) {
			char m[128];

			snprintf(m, sizeof(m), "weightd_source_remote_%s_total", remote[k]);
			assert_string_equal(metric_type(e, m), "counter");
			assert_true(metric(e, m, labels) ==
				    jnum(json_object_get(src, "remote"), remote[k]));
			assert_int_equal(metric(e, m, labels), 0);
		}
	}
}

/* Holds three tensors of tiny as one unit on its own connection. */
static weightd_client *hold_three(weightd_unit **ret_u)
{
	static const char *const names[] = { "model.embed_tokens.weight",
					     "model.layers.0.input_layernorm.weight",
					     "model.layers.0.self_attn.q_proj.weight" };
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;

	if (weightd_connect(H.sock, "test", &c, &err) < 0 || weightd_unit_new(c, &u, &err) < 0)
		fail_msg("%s", err.message);
	for (size_t i = 0; i < 3; i++)
		if (weightd_unit_slot(u, names[i], NULL, NULL, 0, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, names[i], "tiny", names[i], NULL, &err) < 0)
			fail_msg("%s", err.message);
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_finish(u, &err) < 0)
		fail_msg("%s", err.message);
	*ret_u = u;
	return c;
}

static void metrics_follow_known_activity(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	struct expo *e;
	json_t *st;
	char *out, *err;
	const double held = EMBED_BYTES + NORM0_BYTES + Q_BYTES;

	(void)state;
	/* at start: nothing made, two ready sources of generation 1, one client (weightctl) */
	e = metrics_now();
	st = json_status();
	metrics_agree_with_status(e, st);
	json_decref(st);
	assert_int_equal(metric(e, "weightd_materializations_total", ""), 0);
	assert_int_equal(metric(e, "weightd_clients", ""), 1);
	assert_int_equal(metric(e, "weightd_source_generation", "source=tiny"), 1);
	assert_int_equal(metric(e, "weightd_source_generation", "source=victim"), 1);
	assert_int_equal(metric(e, "weightd_source_ready", "source=victim"), 1);

	/* a client holds three weights; weightctl preloads a fourth and evicts it */
	c = hold_three(&u);
	assert_int_equal(ctl(&out, &err, "preload", "tiny", "lm_head.weight", NULL), 0);
	free(out);
	free(err);
	assert_int_equal(ctl(&out, &err, "evict", NULL), 0);
	free(out);
	free(err);
	/* a checkpoint truncated after admission: that materialization fails */
	assert_int_equal(truncate(victim, 1000), 0);
	assert_int_equal(ctl(&out, &err, "get", "victim", "model.norm.weight", NULL), 1);
	assert_non_null(strstr(err, "victim"));
	free(out);
	free(err);
	/* a reload sees the changed file and refuses it: generation 1 goes on serving */
	assert_int_equal(ctl(&out, &err, "reload", NULL), 0);
	free(out);
	free(err);
	/* take the READY=1 that ends the reload, so the restart below waits for its own */
	assert_int_equal(harness_wait_notify(&H, "READY=1", 10000), 0);

	e = metrics_now();
	st = json_status();
	metrics_agree_with_status(e, st);
	json_decref(st);
	assert_int_equal(metric(e, "weightd_materializations_total", ""), 4);
	assert_int_equal(metric(e, "weightd_materializations_failed_total", ""), 1);
	assert_int_equal(metric(e, "weightd_materializations_in_flight", ""), 0);
	assert_true(metric(e, "weightd_checkpoint_read_bytes_total", "") == held + LM_HEAD_BYTES);
	assert_true(metric(e, "weightd_materialized_bytes_total", "") == held + LM_HEAD_BYTES);
	assert_true(metric(e, "weightd_materialization_seconds_total", "") > 0);
	assert_int_equal(metric(e, "weightd_evictions_total", ""), 1);
	assert_int_equal(metric(e, "weightd_weights", ""), 3);
	assert_int_equal(metric(e, "weightd_references", ""), 3);
	assert_true(metric(e, "weightd_resident_bytes", "") == held);
	assert_int_equal(metric(e, "weightd_clients", ""), 2); /* the holder and weightctl */
	assert_int_equal(metric(e, "weightd_readoptions_total", ""), 0);
	assert_int_equal(metric(e, "weightd_source_generation", "source=tiny"), 1);
	assert_int_equal(metric(e, "weightd_source_ready", "source=tiny"), 1);
	assert_int_equal(metric(e, "weightd_source_generation", "source=victim"), 1);
	assert_int_equal(metric(e, "weightd_source_ready", "source=victim"), 1);
	assert_int_equal(metric(e, "weightd_source_refused", "source=victim"), 1);
	assert_int_equal(metric(e, "weightd_source_refused", "source=tiny"), 0);

	/* kill -9 and start again: the three weights are re-adopted, nothing is read */
	harness_kill(&H);
	weightd_unit_free(u);
	weightd_close(c);
	assert_int_equal(harness_start(&H), 0);
	e = metrics_now();
	st = json_status();
	metrics_agree_with_status(e, st);
	json_decref(st);
	assert_int_equal(metric(e, "weightd_readoptions_total", ""), 3);
	assert_int_equal(metric(e, "weightd_weights", ""), 3);
	assert_true(metric(e, "weightd_resident_bytes", "") == held);
	assert_int_equal(metric(e, "weightd_materializations_total", ""), 0);
	assert_int_equal(metric(e, "weightd_checkpoint_read_bytes_total", ""), 0);
	assert_int_equal(metric(e, "weightd_references", ""), 0);
}

/* The payload bytes of one tensor, as describe tells them. */
static double tensor_bytes(const char *ckpt, const char *tensor)
{
	weightd_client *c = NULL;
	weightd_description *d = NULL;
	weightd_error err;
	double n = -1;

	if (weightd_connect(H.sock, "test", &c, &err) < 0 ||
	    weightd_describe(c, ckpt, &d, &err) < 0)
		fail_msg("%s", err.message);
	for (size_t i = 0; i < d->n_tensors; i++)
		if (strcmp(d->tensors[i].name, tensor) == 0)
			n = (double)d->tensors[i].nbytes;
	weightd_description_free(d);
	weightd_close(c);
	if (n < 0)
		fail_msg("%s has no tensor %s", ckpt, tensor);
	return n;
}

/* The per-checkpoint series of one checkpoint, from a fresh scrape (checked against status). */
struct ckpt_series {
	double resident, held, materialized, clients, errors;
};

static struct ckpt_series ckpt_now(const char *ckpt)
{
	struct ckpt_series r;
	struct expo *e = metrics_now();
	json_t *st = json_status();
	char labels[128];

	metrics_agree_with_status(e, st);
	json_decref(st);
	snprintf(labels, sizeof(labels), "source=%s", ckpt);
	r.resident = metric(e, "weightd_source_resident_bytes", labels);
	r.held = metric(e, "weightd_source_held_bytes", labels);
	r.materialized = metric(e, "weightd_source_materialized_bytes_total", labels);
	r.clients = metric(e, "weightd_source_clients", labels);
	r.errors = metric(e, "weightd_source_errors_total", labels);
	assert_string_equal(metric_type(e, "weightd_source_materialized_bytes_total"), "counter");
	assert_string_equal(metric_type(e, "weightd_source_errors_total"), "counter");
	assert_string_equal(metric_type(e, "weightd_source_resident_bytes"), "gauge");
	return r;
}

static void expect_series(const char *ckpt, double resident, double held, double materialized,
			  double clients, double errors)
{
	struct ckpt_series r = ckpt_now(ckpt);

	if (r.resident != resident || r.held != held || r.materialized != materialized ||
	    r.clients != clients || r.errors != errors)
		fail_msg("%s: resident %.0f held %.0f materialized %.0f clients %.0f errors %.0f; "
			 "expected %.0f %.0f %.0f %.0f %.0f",
			 ckpt, r.resident, r.held, r.materialized, r.clients, r.errors, resident,
			 held, materialized, clients, errors);
}

/* Preload from one checkpoint, hold and get from the other, fail one, release, evict: each
 * checkpoint's series move with what was done to it and only to it. */
static void per_checkpoint_series_follow_known_activity(void **state)
{
	const double lm = tensor_bytes("tiny", "lm_head.weight");
	const double norm = tensor_bytes("victim", "model.norm.weight");
	const double q = tensor_bytes("victim", "model.layers.0.self_attn.q_proj.weight");
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	char *out, *errs, next[512];

	(void)state;
	expect_series("tiny", 0, 0, 0, 0, 0);
	expect_series("victim", 0, 0, 0, 0, 0);

	/* preload: resident and materialized, held by nobody */
	assert_int_equal(ctl(&out, &errs, "preload", "tiny", "lm_head.weight", NULL), 0);
	free(out);
	free(errs);
	expect_series("tiny", lm, 0, lm, 0, 0);
	expect_series("victim", 0, 0, 0, 0, 0);

	/* a client holds one weight of the other checkpoint */
	if (weightd_connect(H.sock, "test", &c, &err) < 0 || weightd_unit_new(c, &u, &err) < 0 ||
	    weightd_unit_slot(u, "n", NULL, NULL, 0, NULL, &err) < 0 ||
	    weightd_unit_set_tensor(u, "n", "victim", "model.norm.weight", NULL, &err) < 0 ||
	    weightd_unit_submit(u, &err) < 0 || weightd_unit_finish(u, &err) < 0)
		fail_msg("%s", err.message);
	expect_series("victim", norm, norm, norm, 1, 0);
	/* get: made, held while weightctl runs, then idle */
	assert_int_equal(
		ctl(&out, &errs, "get", "victim", "model.layers.0.self_attn.q_proj.weight", NULL),
		0);
	free(out);
	free(errs);
	expect_series("victim", norm + q, norm, norm + q, 1, 0);
	expect_series("tiny", lm, 0, lm, 0, 0);

	/* a materialization that fails, and a tensor asked again (a hit: nothing new) */
	assert_int_equal(truncate(victim, 1000), 0);
	assert_int_equal(ctl(&out, &errs, "get", "victim", "lm_head.weight", NULL), 1);
	free(out);
	free(errs);
	assert_int_equal(ctl(&out, &errs, "get", "victim", "model.norm.weight", NULL), 0);
	free(out);
	free(errs);
	expect_series("victim", norm + q, norm, norm + q, 1, 1);

	/* the client lets go, then everything idle is evicted: the counters stay */
	weightd_unit_free(u);
	weightd_close(c);
	expect_series("victim", norm + q, 0, norm + q, 0, 1);
	assert_int_equal(ctl(&out, &errs, "evict", NULL), 0);
	free(out);
	free(errs);
	expect_series("victim", 0, 0, norm + q, 0, 1);
	expect_series("tiny", 0, 0, lm, 0, 0);

	/* the file replaced by a good one: a new generation, whose series go on from the old */
	assert_int_equal(harness_sample(&H, "victim-next.safetensors", next, sizeof(next)), 0);
	assert_int_equal(rename(next, victim), 0);
	assert_int_equal(ctl(&out, &errs, "reload", NULL), 0);
	free(out);
	free(errs);
	assert_int_equal(metric(metrics_now(), "weightd_source_generation", "source=victim"), 2);
	expect_series("victim", 0, 0, norm + q, 0, 1);
	assert_int_equal(ctl(&out, &errs, "get", "victim", "model.norm.weight", NULL), 0);
	free(out);
	free(errs);
	expect_series("victim", norm, 0, 2 * norm + q, 0, 1);
}

/* --- the HTTP endpoint (metrics_listen) ---------------------------------------------------- */

static int metrics_port;

/* A loopback port nothing listens on now (the kernel's pick, released again). */
static int free_port(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
		port = ntohs(sin.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int setup_http(void **state)
{
	char sections[2048], tiny[512], extra[128];

	metrics_port = free_port();
	if (metrics_port < 0 || harness_init(&H) < 0 ||
	    harness_sample(&H, "tiny.safetensors", tiny, sizeof(tiny)) < 0 ||
	    harness_sample(&H, "victim.safetensors", victim, sizeof(victim)) < 0)
		return -1;
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:%d\n", metrics_port);
	snprintf(sections, sizeof(sections),
		 "[checkpoint:tiny]\npath = %s\n\n[checkpoint:victim]\npath = %s\n", tiny, victim);
	return fixture_start(extra, sections);
}

static size_t curl_body(char *p, size_t size, size_t n, void *arg)
{
	FILE *f = arg;

	return fwrite(p, size, n, f);
}

/* One HTTP request to the endpoint with libcurl: its status, body and Content-Type; a transfer
 * that fails fails the test, or returns -1 when soft. */
static long http_req(const char *method, const char *path, char **ret_body, char *ctype, size_t cap,
		     bool soft)
{
	char url[128], *body = NULL, *ct = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	CURL *c = curl_easy_init();
	long code = 0;
	CURLcode rc;

	assert_non_null(f);
	assert_non_null(c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", metrics_port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, curl_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK && soft) {
		curl_easy_cleanup(c);
		fclose(f);
		free(body);
		return -1;
	}
	if (rc != CURLE_OK)
		fail_msg("%s %s: %s", method, url, curl_easy_strerror(rc));
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
	if (ctype)
		snprintf(ctype, cap, "%s", ct ? ct : "");
	curl_easy_cleanup(c);
	fclose(f);
	if (ret_body)
		*ret_body = body;
	else
		free(body);
	return code;
}

static long http(const char *method, const char *path, char **ret_body, char *ctype, size_t cap)
{
	return http_req(method, path, ret_body, ctype, cap, false);
}

/* A scrape of http://127.0.0.1:PORT/metrics is valid text of the same families, with the same
 * types, as weightctl metrics, and the same values where nothing moved in between. */
static void http_endpoint_serves_the_same_families(void **state)
{
	static struct expo web;
	struct expo *cli;
	char ctype[128], *body;
	weightd_client *c;
	weightd_unit *u = NULL;

	(void)state;
	c = hold_three(&u); /* something in the per-checkpoint series */
	assert_int_equal(http("GET", "/metrics", &body, ctype, sizeof(ctype)), 200);
	assert_string_equal(ctype, "text/plain; version=0.0.4; charset=utf-8");
	if (parse_exposition(body, &web) < 0)
		fail_msg("the endpoint breaks the format: %s\n%s", web.why, body);
	free(body);
	cli = metrics_now();
	assert_int_equal(web.n_fam, cli->n_fam);
	for (size_t i = 0; i < cli->n_fam; i++) {
		struct family *f = find_family(&web, cli->fam[i].name);

		if (!f)
			fail_msg("the endpoint lacks %s", cli->fam[i].name);
		assert_string_equal(f->type, cli->fam[i].type);
	}
	assert_int_equal(web.n_smp, cli->n_smp);
	for (size_t i = 0; i < cli->n_smp; i++) {
		const struct sample *x = &cli->smp[i];

		/* weightctl is a client of its own, the scrape is not; the uptime moves */
		if (strcmp(x->name, "weightd_clients") == 0 ||
		    strcmp(x->name, "weightd_uptime_seconds") == 0 ||
		    strcmp(x->name, "weightd_requests_total") == 0)
			continue;
		if (metric(&web, x->name, x->labels) != x->value)
			fail_msg("%s{%s}: %.17g on the endpoint, %.17g from weightctl", x->name,
				 x->labels, metric(&web, x->name, x->labels), x->value);
	}
	assert_true(metric(&web, "weightd_source_held_bytes", "source=tiny") ==
		    EMBED_BYTES + NORM0_BYTES + Q_BYTES);
	assert_int_equal(metric(&web, "weightd_source_clients", "source=tiny"), 1);
	weightd_unit_free(u);
	weightd_close(c);
}

/* GET /metrics and nothing else. */
static void http_endpoint_serves_only_get_metrics(void **state)
{
	(void)state;
	assert_int_equal(http("GET", "/", NULL, NULL, 0), 404);
	assert_int_equal(http("GET", "/metrics/x", NULL, NULL, 0), 404);
	assert_int_equal(http("POST", "/metrics", NULL, NULL, 0), 405);
	assert_int_equal(http("DELETE", "/metrics", NULL, NULL, 0), 405);
	assert_int_equal(http("GET", "/metrics", NULL, NULL, 0), 200);
}

static int tcp_connect(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons((uint16_t)metrics_port),
				   .sin_addr.s_addr = htonl(0x7f000001) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	return fd;
}

/* Scrapers that connect and say nothing take at most 8 connections; one more is closed at
 * once, a request head without end is cut at 8 KiB, and the daemon serves its clients all along. */
static void http_endpoint_bounds_connections_and_requests(void **state)
{
	struct pollfd p;
	/* one byte over the 8 KiB limit, all of which the daemon reads (had it left some unread, its
	 * close would reset the connection and could drop the answer before we read it) */
	char big[8193], buf[256], *out, *err;
	int idle[8], extra, fd;
	ssize_t n;

	(void)state;
	for (size_t i = 0; i < 8; i++)
		idle[i] = tcp_connect();
	extra = tcp_connect();
	p = (struct pollfd){ .fd = extra, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(recv(extra, buf, sizeof(buf), 0), 0); /* closed, nothing said */
	close(extra);
	/* the Unix socket is served meanwhile */
	assert_int_equal(ctl(&out, &err, "status", NULL), 0);
	free(out);
	free(err);
	for (size_t i = 0; i < 8; i++)
		close(idle[i]);
	/* a head that never ends */
	fd = tcp_connect();
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	assert_int_equal(send(fd, big, sizeof(big), MSG_NOSIGNAL), (ssize_t)sizeof(big));
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 5000), 1);
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "HTTP/1.1 431 "));
	close(fd);
	/* the slots are free again (the daemon closes its ends as it sees ours go) */
	for (int tries = 0; http_req("GET", "/metrics", NULL, NULL, 0, true) != 200 && tries < 50;
	     tries++)
		usleep(100000);
	assert_int_equal(http("GET", "/metrics", NULL, NULL, 0), 200);
}

/* 0 success, 1 an error from weightd, 2 a usage error (which never reaches the daemon). */
static void exit_codes(void **state)
{
	static const char *const usage[][4] = {
		{ "metrics", "extra" }, { "preload" }, { "preload", "--recipe", "x.json", "tiny" },
		{ "preload", "--bogus" }, { "frobnicate" }, { "get", "tiny" },
	};
	char *out, *err;

	(void)state;
	for (size_t i = 0; i < sizeof(usage) / sizeof(usage[0]); i++) {
		int rc = ctl(&out, &err, usage[i][0], usage[i][1], usage[i][2], usage[i][3], NULL);

		if (rc != 2)
			fail_msg("weightctl %s %s gave %d, not 2", usage[i][0],
				 usage[i][1] ? usage[i][1] : "", rc);
		assert_non_null(strstr(err, "usage"));
		assert_string_equal(out, "");
		free(out);
		free(err);
	}
	assert_int_equal(ctl(&out, &err, "preload", "nosuch", NULL), 1);
	assert_non_null(strstr(err, "nosuch"));
	free(out);
	free(err);
	assert_int_equal(ctl(&out, &err, "preload", "tiny", "no.such.tensor", NULL), 1);
	assert_non_null(strstr(err, "no.such.tensor"));
	free(out);
	free(err);
	assert_int_equal(ctl(&out, &err, "--json", "preload", "tiny", NULL), 0);
	assert_non_null(strstr(out, "\"weights\": 10"));
	free(out);
	free(err);
}

/* With --json every error is also an object on stdout, with weightd's code, and exit is nonzero. */
static void json_errors_are_objects_on_stdout(void **state)
{
	char *out, *err;
	json_t *j, *e;

	(void)state;
	assert_int_equal(ctl(&out, &err, "--json", "get", "tiny", "no.such.tensor", NULL), 1);
	j = json_loads(out, 0, NULL);
	if (!j)
		fail_msg("stdout is not JSON: %s", out);
	e = json_object_get(j, "error");
	assert_string_equal(json_string_value(json_object_get(e, "code")), "unknown-tensor");
	assert_int_equal(json_integer_value(json_object_get(e, "number")), WEIGHTD_E_UNKNOWN_TENSOR);
	assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "no.such.tensor"));
	assert_non_null(strstr(err, "no.such.tensor")); /* people still read stderr */
	json_decref(j);
	free(out);
	free(err);

	/* a usage error too, even with --json after the word that is wrong */
	assert_int_equal(ctl(&out, &err, "frobnicate", "--json", NULL), 2);
	j = json_loads(out, 0, NULL);
	if (!j)
		fail_msg("stdout is not JSON: %s", out);
	e = json_object_get(j, "error");
	assert_string_equal(json_string_value(json_object_get(e, "code")), "usage");
	assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "frobnicate"));
	json_decref(j);
	free(out);
	free(err);
}

/* --json and --socket may follow the command; the last --socket given is the one used. */
static void options_after_the_command(void **state)
{
	char *out, *err;
	json_t *j;

	(void)state;
	assert_int_equal(ctl(&out, &err, "list", "--json", NULL), 0);
	j = json_loads(out, 0, NULL);
	if (!j)
		fail_msg("stdout is not JSON: %s", out);
	assert_true(json_array_size(json_object_get(j, "sources")) >= 1);
	json_decref(j);
	free(out);
	free(err);
	assert_int_equal(ctl(&out, &err, "list", "--socket", "/nonexistent/weightd.sock", NULL), 1);
	assert_non_null(strstr(err, "/nonexistent/weightd.sock"));
	free(out);
	free(err);
	/* after "--" a word is the command's, even one that looks like an option */
	assert_int_equal(ctl(&out, &err, "describe", "--", "--json", NULL), 1);
	assert_null(json_loads(out, 0, NULL));
	assert_non_null(strstr(err, "--json"));
	free(out);
	free(err);
}

/* status lists weights by name (then handle), whatever order the daemon keeps them in. */
static void status_lists_in_a_stable_order(void **state)
{
	char *out, *err;
	json_t *j, *ws;
	size_t n;

	(void)state;
	assert_int_equal(ctl(&out, &err, "preload", "tiny", NULL), 0);
	free(out);
	free(err);
	assert_int_equal(ctl(&out, &err, "status", "--json", NULL), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	ws = json_object_get(j, "weight_list");
	n = json_array_size(ws);
	assert_true(n >= 2);
	for (size_t i = 1; i < n; i++) {
		const char *a = json_string_value(json_object_get(json_array_get(ws, i - 1), "label"));
		const char *b = json_string_value(json_object_get(json_array_get(ws, i), "label"));
		if (strcmp(a, b) > 0)
			fail_msg("weight %zu (%s) is listed after %s", i, b, a);
	}
	json_decref(j);
	free(out);
	free(err);
}

/* weightctl status | head: the reader goes away, and weightctl ends without a word on stderr,
 * even when its parent left SIGPIPE ignored. */
static void a_reader_that_stops_early_ends_it_quietly(void **state)
{
	char errp[512], *err;
	int p[2], status;
	pid_t pid;

	(void)state;
	harness_path(&H, "pipe.err", errp, sizeof(errp));
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		signal(SIGPIPE, SIG_IGN);
		close(p[0]); /* nobody reads: the first write breaks the pipe */
		if (e < 0 || dup2(p[1], 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		execl(harness_weightctl(), "weightctl", "--socket", H.sock, "status", (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	close(p[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) ? WTERMSIG(status) == SIGPIPE : WEXITSTATUS(status) != 0);
	err = tf_read(errp, NULL);
	assert_string_equal(err, "");
	free(err);
}

/*
 * preload counts distinct weights: two slots with the same recipe share one weight and an alias
 * has none of its own, so four slots are two weights, each counted once with its bytes.
 */
static void preload_counts_each_weight_once(void **state)
{
	char path[600], *out, *err;
	FILE *f;

	(void)state;
	harness_path(&H, "dup.json", path, sizeof(path));
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"slots\": ["
	      "{\"name\": \"a\", \"recipe\": {\"op\": \"source\", \"checkpoint\": \"tiny\", \"tensor\": \"lm_head.weight\"}},"
	      "{\"name\": \"q\", \"recipe\": {\"op\": \"source\", \"checkpoint\": \"tiny\", \"tensor\": \"model.layers.0.self_attn.q_proj.weight\"}},"
	      "{\"name\": \"b\", \"recipe\": {\"op\": \"source\", \"checkpoint\": \"tiny\", \"tensor\": \"lm_head.weight\"}},"
	      "{\"name\": \"c\", \"alias\": \"a\"}]}", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(ctl(&out, &err, "--json", "preload", "--recipe", path, NULL), 0);
	assert_non_null(strstr(out, "\"weights\": 2"));
	{
		char want[64];

		snprintf(want, sizeof(want), "\"bytes\": %u", LM_HEAD_BYTES + Q_BYTES);
		assert_non_null(strstr(out, want));
	}
	free(out);
	free(err);
}

/* --- progress ------------------------------------------------------------------------------------- */

/*
 * The fixture: wd-mkfixture big 1G --tensor-bytes 512M writes big.0.weight and big.1.weight,
 * 512 MiB each. One worker fills them and hashes them with SHA-256 (digest = sha256), about
 * 1 GB/s on a fast machine, so each takes several of weightctl's 100 ms polls before the end.
 * (With 256 MiB and the default XXH3-128, a fill at copy speed ended within the first poll on
 * a quiet machine and no bar was drawn, as designed for quick units.)
 */
#define BIG_BYTES (512ull << 20)

static int setup_progress(void **state)
{
	char big[512], args[1200];
	FILE *f;

	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "big.safetensors", big, sizeof(big));
	snprintf(args, sizeof(args), "big %s 1G --tensor-bytes 512M", big);
	if (harness_mkfixture(args) < 0)
		return -1;
	/* the harness's daemon section, but one worker: the materializations run one at a time */
	f = fopen(H.conf, "w");
	if (!f)
		return -1;
	fprintf(f, "[daemon]\nsocket = %s\nsocket_mode = 0666\nshm_prefix = %s\nstate_dir = %s/state\n"
		   "single_socket = yes\nworkers = 1\ndigest = sha256\n\n[checkpoint:big]\npath = %s\n", H.sock, H.prefix, H.dir, big);
	if (fclose(f) != 0)
		return -1;
	return harness_start(&H) < 0 ? -1 : 0;
}

/*
 * Whether the final frame says the fill took at most 0.2 s: then weightctl, polling every 0.1 s,
 * had room for only one frame before 100%, and the bar cannot be seen moving (a fill at copy
 * speed, with the default XXH3-128 digest, takes about that long here).
 */
static bool within_two_polls(const char *out)
{
	return strstr(out, " in 0.0 s") || strstr(out, " in 0.1 s") || strstr(out, " in 0.2 s");
}

/* "512.0 MiB" -> bytes (approximately, as printed). */
static double size_of(const char *num, const char *unit)
{
	double v = strtod(num, NULL);

	if (strcmp(unit, "KiB") == 0)
		return v * 1024;
	if (strcmp(unit, "MiB") == 0)
		return v * 1024 * 1024;
	if (strcmp(unit, "GiB") == 0)
		return v * 1024 * 1024 * 1024;
	return v;
}

struct frames {
	int n, n_partial, n_between, n_rate;
	int first_pct, last_pct;
	bool last_final;
	size_t max_width;
};

/*
 * Check every frame of the bar in a terminal's output: frames are separated by CR (the terminal
 * turns the final LF into CR LF), each ends with the erase-line sequence, reads
 * " PP% [###---] DONE / TOTAL  RATE/s  ETA M:SS" or, last, "100% [...] TOTAL / TOTAL  RATE/s
 * in S s"; percentages never go down, the bar's fill and the bytes done agree with the
 * percentage, and the total is `total`.
 */
static void check_frames(const char *text, const char *total, struct frames *fr)
{
	static const char *const re_text =
		"^ *([0-9]+)% \\[([#-]+)\\] ([0-9.]+) (B|KiB|MiB|GiB) / ([0-9.]+ (B|KiB|MiB|GiB))  "
		"(-|([0-9.]+) (B|KiB|MiB|GiB))/s  (ETA ([0-9]+:[0-9]{2}(:[0-9]{2})?|--:--)|in [0-9.]+ s)$";
	regex_t re;
	char *copy = strdup(text), *save = NULL;
	int prev = -1;

	assert_non_null(copy);
	assert_int_equal(regcomp(&re, re_text, REG_EXTENDED), 0);
	memset(fr, 0, sizeof(*fr));
	fr->first_pct = -1;
	for (char *piece = strtok_r(copy, "\r\n", &save); piece; piece = strtok_r(NULL, "\r\n", &save)) {
		regmatch_t m[14];
		char *esc = strstr(piece, "\033[K"), num[32], unit[8], tot[32];
		int pct;
		size_t width, fill = 0;
		double done;

		if (!strchr(piece, '%') || !strchr(piece, '['))
			continue; /* the table on stdout */
		if (!esc || esc[3])
			fail_msg("a frame without the erase-line sequence at its end: \"%s\"", piece);
		*esc = '\0';
		if (regexec(&re, piece, 14, m, 0) != 0)
			fail_msg("a frame that is not a progress bar: \"%s\"", piece);
		fr->max_width = strlen(piece) > fr->max_width ? strlen(piece) : fr->max_width;
		pct = atoi(piece + m[1].rm_so);
		width = (size_t)(m[2].rm_eo - m[2].rm_so);
		for (regoff_t i = m[2].rm_so; i < m[2].rm_eo; i++)
			fill += piece[i] == '#';
		snprintf(num, sizeof(num), "%.*s", (int)(m[3].rm_eo - m[3].rm_so), piece + m[3].rm_so);
		snprintf(unit, sizeof(unit), "%.*s", (int)(m[4].rm_eo - m[4].rm_so), piece + m[4].rm_so);
		snprintf(tot, sizeof(tot), "%.*s", (int)(m[5].rm_eo - m[5].rm_so), piece + m[5].rm_so);
		done = size_of(num, unit);
		assert_string_equal(tot, total);
		if (pct < prev)
			fail_msg("the percentage went down from %d to %d", prev, pct);
		if (fabs((double)fill / (double)width - pct / 100.0) > 1.0 / (double)width + 0.01)
			fail_msg("%zu of %zu filled for %d%%", fill, width, pct);
		if (fabs(done / size_of(tot, strchr(tot, ' ') + 1) * 100 - pct) > 1.5)
			fail_msg("%s %s done is not %d%% of %s", num, unit, pct, tot);
		fr->last_final = piece[m[10].rm_so] == 'i';
		if (!fr->last_final)
			fr->n_partial += pct < 100;
		fr->n_rate += m[8].rm_so >= 0;
		if (fr->first_pct < 0)
			fr->first_pct = pct;
		fr->n_between += pct > fr->first_pct && pct < 100; /* seen moving */
		fr->last_pct = prev = pct;
		fr->n++;
	}
	regfree(&re);
	free(copy);
}

static void get_on_a_terminal_draws_a_bar_to_100(void **state)
{
	struct frames fr;
	char *out;

	(void)state;
	assert_int_equal(ctl_pty(&out, 100, "get", "big", "big.0.weight", NULL), 0);
	check_frames(out, "512.0 MiB", &fr);
	if (fr.n < 2 || fr.n_partial < 1 || (fr.n_between < 1 && !within_two_polls(out)))
		fail_msg("expected a bar that moves, got %d frames (%d before the end, %d between "
			 "the first and 100%%):\n%s", fr.n, fr.n_partial, fr.n_between, out);
	assert_int_equal(fr.last_pct, 100);
	assert_true(fr.last_final);
	/* a rate once two samples exist (a fill over within two polls may end before that) */
	assert_true(fr.n_rate >= 1 || within_two_polls(out));
	assert_true(fr.max_width < 100);        /* fits the terminal */
	/* then the result, on stdout (the same terminal) */
	assert_non_null(strstr(out, "536870912"));
	assert_non_null(strstr(out, "(verified)"));
	free(out);
}

static void get_in_a_pipe_draws_nothing(void **state)
{
	char *out, *err;

	(void)state;
	/* a new weight, as large as the one above that drew a bar: 16384 rows of 8192 bytes */
	assert_int_equal(ctl(&out, &err, "get", "big", "big.1.weight", "--range", "0:0:16384", NULL),
			 0);
	assert_string_equal(err, "");
	assert_non_null(strstr(out, "134217728"));
	assert_non_null(strstr(out, "(verified)"));
	free(out);
	free(err);
}

static void preload_counts_resident_weights_and_keeps_them(void **state)
{
	struct frames fr;
	json_error_t je;
	json_t *j;
	char *out, *err;

	(void)state;
	/* big.0 is resident (released by get, still cached): the bar starts at half or more */
	assert_int_equal(ctl_pty(&out, 80, "preload", "big", NULL), 0);
	check_frames(out, "1.0 GiB", &fr);
	/* Half of it is there at the first poll, so the bar moves from there to 100% in as little
	 * as one more frame; frames in between are the get test's to check. */
	if (fr.n < 2 || fr.n_partial < 1)
		fail_msg("expected a bar that moves, got %d frames:\n%s", fr.n, out);
	assert_true(fr.first_pct >= 50);
	assert_int_equal(fr.last_pct, 100);
	assert_true(fr.max_width < 80);
	assert_non_null(strstr(out, "preloaded 2 weights (1.0 GiB); 512.0 MiB read from checkpoints"));
	free(out);
	/* both stay cached: preloading again reads nothing, and in a pipe says nothing on stderr */
	assert_int_equal(ctl(&out, &err, "--json", "preload", "big", NULL), 0);
	assert_string_equal(err, "");
	j = json_loads(out, 0, &je);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "weights")), 2);
	assert_true(json_integer_value(json_object_get(j, "bytes")) == (json_int_t)(2 * BIG_BYTES));
	assert_int_equal(json_integer_value(json_object_get(j, "bytes_read")), 0);
	json_decref(j);
	free(out);
	free(err);
}

int main(void)
{
	const struct CMUnitTest metrics[] = {
		cmocka_unit_test(the_format_checker_refuses_bad_expositions),
		cmocka_unit_test(metrics_follow_known_activity),
		cmocka_unit_test(exit_codes),
		cmocka_unit_test(json_errors_are_objects_on_stdout),
		cmocka_unit_test(options_after_the_command),
		cmocka_unit_test(status_lists_in_a_stable_order),
		cmocka_unit_test(a_reader_that_stops_early_ends_it_quietly),
		cmocka_unit_test(preload_counts_each_weight_once),
	};
	const struct CMUnitTest ckpt_metrics[] = {
		cmocka_unit_test(per_checkpoint_series_follow_known_activity),
	};
	const struct CMUnitTest http_metrics[] = {
		cmocka_unit_test(http_endpoint_serves_the_same_families),
		cmocka_unit_test(http_endpoint_serves_only_get_metrics),
		cmocka_unit_test(http_endpoint_bounds_connections_and_requests),
	};
	const struct CMUnitTest progress[] = {
		cmocka_unit_test(get_on_a_terminal_draws_a_bar_to_100),
		cmocka_unit_test(get_in_a_pipe_draws_nothing),
		cmocka_unit_test(preload_counts_resident_weights_and_keeps_them),
	};
	int failed;

	alarm(240); /* watchdog: a hung daemon fails the test instead of stalling CI */
	failed = cmocka_run_group_tests_name("metrics", metrics, setup_metrics, teardown_all);
	failed += cmocka_run_group_tests_name("checkpoint metrics", ckpt_metrics, setup_metrics,
					      teardown_all);
	failed +=
		cmocka_run_group_tests_name("http metrics", http_metrics, setup_http, teardown_all);
	failed += cmocka_run_group_tests_name("progress", progress, setup_progress, teardown_all);
	return failed;
}
