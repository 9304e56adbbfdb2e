/* SPDX-License-Identifier: Apache-2.0 */
/* weightctl.h - what weightctl's files share: options, the command table, output helpers. */
#ifndef WEIGHTCTL_H
#define WEIGHTCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd/client.h"

/* Exit codes: 0 success, 1 an error from weightd or the system, 2 a usage error. */
#define EXIT_ERR 1
#define EXIT_USAGE 2
#define MAX_JSON_FILE (64u << 20)

/* Global options, before or after the command. */
struct opts {
	const char *socket;
	const char *admin_socket; /* --admin-socket (main.c decides where admin commands go) */
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

struct health_args {
	bool ready;        /* --ready, else --live */
	unsigned timeout;  /* seconds (--timeout; 0: none) */
};

/* One command's arguments: argv[0] is its name; a parse function fills its own member. */
struct cmd_args {
	int argc;
	char **argv;
	union {
		struct get_args get;
		struct preload_args preload;
		struct health_args health;
	};
};

/*
 * A row of the command table (main.c). Usage is checked completely before connecting, so a bad
 * command line never touches the daemon: nargs first, then parse when there is one.
 */
struct command {
	const char *name;
	int nargs;        /* exact positional count, -1: parse checks them */
	int (*parse)(struct cmd_args *args);       /* NULL, or 0 / EXIT_USAGE */
	/* the command itself, connected; its exit code */
	int (*run)(const struct opts *o, weightd_client *c, struct cmd_args *args);
	bool admin;      /* connects to the admin socket (reload, evict) */
	bool no_connect; /* run is given no client and connects itself */
};

/* --- commands (cmd_*.c) ---------------------------------------------------------------------- */

int cmd_list(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_describe(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_status(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_metrics(const struct opts *o, weightd_client *c, struct cmd_args *args);
int parse_get(struct cmd_args *args);
int cmd_get(const struct opts *o, weightd_client *c, struct cmd_args *args);
int parse_preload(struct cmd_args *args);
int cmd_preload(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_preflight(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_reload(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_evict(const struct opts *o, weightd_client *c, struct cmd_args *args);
int parse_health(struct cmd_args *args);
int cmd_health(const struct opts *o, weightd_client *c, struct cmd_args *args);
int cmd_clients(const struct opts *o, weightd_client *c, struct cmd_args *args);

/* shared by list, describe and status (cmd_sources.c) */
json_t *json_source(const weightd_source_info *s);
/* json_source's object with h's fields added (h may be NULL: nothing added) */
void json_source_health(json_t *js, const weightd_source_health *h);
/* health[i] goes with src[i]; health may be NULL */
void table_sources(const weightd_source_info *src, const weightd_source_health *health, size_t n);

/* --- progress (progress.c) ------------------------------------------------------------------- */

/*
 * Submit the unit and wait for the daemon's answer, showing its progress on stderr: a bar on a
 * terminal, a line every 2 s elsewhere (PROGRESS_AUTO), lines always (--progress) or nothing
 * (--no-progress). Units that finish within the first interval show nothing. 0 or a negative
 * code with err set.
 */
int run_unit(weightd_client *c, weightd_unit *u, weightd_error *err);
enum progress_mode { PROGRESS_AUTO, PROGRESS_LINES, PROGRESS_OFF };
void progress_set_mode(enum progress_mode m);

/* --- output (output.c) ----------------------------------------------------------------------- */

/*
 * Errors: "weightctl: ..." on stderr and, after output_json_errors(true) (--json), also as
 * {"error": {"code": NAME, "number": N, "message": TEXT, ...}} on stdout, where a script reads.
 * NAME is weightd's code name ("unknown-tensor"), "usage" for a bad command line, "error" for
 * anything else; N is the WEIGHTD_E_* number (0 when not weightd's).
 */
void output_json_errors(bool on);
/* "weightctl: ..." and the usage line on stderr; returns EXIT_USAGE. */
int output_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "weightctl: ..." on stderr; returns EXIT_ERR. */
int output_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* output_fail() with the error's message (or its code's name). */
int output_fail_err(const weightd_error *err);

/*
 * Pointers to the n elements of base (each `size` bytes), in the order cmp gives; cmp receives
 * pointers to two of those pointers. Output lists rows in a stable order, never in the order a
 * hash table left them. Free the array.
 */
const void **output_sorted(const void *base, size_t n, size_t size,
			   int (*cmp)(const void *a, const void *b));
/* output_sorted()'s orders: sources by name, segments by id, weights by label then handle */
int by_source_name(const void *a, const void *b);
int by_segment_id(const void *a, const void *b);
int by_weight_label(const void *a, const void *b);

/* Owned strings; out of memory ends the program (exit EXIT_ERR). */
char *output_strdup(const char *s);
char *output_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
char *output_fmt_bytes(uint64_t n);			    /* "512 B", "1.5 GiB" */
char *output_fmt_shape(const uint64_t *shape, size_t ndim); /* "[2, 3]" */
char *output_fmt_hex(const uint8_t *b, size_t n);	    /* lowercase hex */

json_t *output_json_shape(const uint64_t *shape, size_t ndim);
/* Print j indented on stdout and free it: 0 or EXIT_ERR. */
int output_print_json(json_t *j);

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

/* Add a row of ncols owned strings (taken). */
void output_table_row(struct table *t, ...);
/* Print the table on stdout and free its cells. */
void output_table_print(struct table *t);

/* A regular file of at most MAX_JSON_FILE bytes, NUL-terminated: 0 or EXIT_ERR (said). */
int output_read_file(const char *path, char **ret, size_t *ret_len);
/* Create or truncate path with n bytes: 0 or EXIT_ERR (said). */
int output_write_file(const char *path, const void *data, uint64_t n);

#endif
