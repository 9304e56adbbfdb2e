/* SPDX-License-Identifier: Apache-2.0 */
/* config_int.h - what the files of the config module share while one weightd.conf is read: the
 * loader state, the first-error recorder and the value parsers. Not for other modules. */
#ifndef WD_CONFIG_INT_H
#define WD_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define CONFIG_MAX_FILE_BYTES (16u << 20)
#define CONFIG_MAX_SOURCES 65536
#define CONFIG_MAX_LIST 4096          /* users or groups in one allow list */
#define CONFIG_MAX_NAME 128           /* checkpoint names */
#define CONFIG_MAX_PREFIX 64          /* shm_prefix; leaves room in NAME_MAX for the weight's id */
#define CONFIG_MAX_SECTION 256        /* text between [ and ] */
#define CONFIG_MAX_LINE 16384         /* characters of one line: room for a PATH_MAX path */
#define CONFIG_MAX_KEYS 80            /* rows of config_keys[] (config_keys.c) */
#define CONFIG_MAX_ERRORS     64	    /* errors one read reports; past them it stops */

/* One error found, at its line; ld->errors keeps them in the order found. */
struct config_error {
	int line;
	int code;
	char msg[600];
};

/* Parsing state shared by the line reader and the key handler. */
struct loader {
	const char *file;
	const char *buf;                  /* the whole file */
	size_t len, pos;                  /* its size and the reader's offset */
	int line;                         /* 1-based number of the line last handed to inih */
	/* Every error found, so that one run reports them all; a key or section in error is
	 * skipped and reading goes on, except where stop says nothing after can be judged. */
	struct config_error *errors;
	size_t n_errors;
	bool stop;	    /* out of memory or too many errors: read no further */
	bool skip_keys;	    /* the section header was refused: ignore its keys */
	size_t sect_errors; /* n_errors when the current section opened */
	struct config *cfg;
	enum config_section sect;
	char sect_text[CONFIG_MAX_SECTION + 1];  /* what inih reports as the section name */
	int daemon_line;                  /* where [daemon] starts, 0 if not seen */
	int key_line[CONFIG_MAX_KEYS];    /* where each row of config_keys[] was set, 0 if not
					   * (checkpoint rows: in the current section) */
	size_t cap_sources;
	/* A line longer than inih's buffer reaches inih as "key =" and its value is kept here
	 * (split_long_line); the handler takes it from here for that line. */
	int long_line;                    /* the line it belongs to, 0 if none */
	char long_val[CONFIG_MAX_LINE + 1];
};

/* Record an error at `line` and return 0. Every setter below records its error through it and
 * returns 1 on success, 0 after; the caller leaves that key or section as it was and goes on. */
int config_fail(struct loader *ld, int line, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* --- value parsers (config_value.c): each names `key` in its error ----------------------- */

enum config_num { CONFIG_NUM_OK, CONFIG_NUM_GARBAGE, CONFIG_NUM_OVERFLOW };

/* Decimal digits only (no sign, no blanks); *end is set to the first non-digit. */
enum config_num config_parse_digits(const char *s, uint64_t *ret, const char **end);
/* Bytes, or a number followed by K, M, G, T or P (powers of 1024), between min and max. */
int config_set_size(struct loader *ld, const char *key, const char *val, uint64_t min, uint64_t max,
		    uint64_t *ret);
int config_set_u32(struct loader *ld, const char *key, const char *val, uint32_t min, uint32_t max,
		   uint32_t *ret);
/* A duration: a whole number of seconds, or one followed by "ms", "s", "m" or "h", at most max_ms
 * (a whole number of days). 0 = off. */
int config_set_duration_ms(struct loader *ld, const char *key, const char *val, uint64_t max_ms,
			   uint64_t *ret);
int config_set_bool(struct loader *ld, const char *key, const char *val, bool *ret);
/* Replace *slot by a copy of val. */
int config_set_string(struct loader *ld, char **slot, const char *val);
int config_set_abs_path(struct loader *ld, const char *key, const char *val, size_t max, char **slot);
/* A user (is_group false) or group name, or a decimal id taken as it is. */
int config_resolve_id(struct loader *ld, const char *key, const char *name, bool is_group,
		      uint32_t *ret);
/* A comma/blank separated list of users or groups, each resolved, into a new array. */
int config_set_id_list(struct loader *ld, const char *key, const char *val, bool is_group,
		       uint32_t **ret_ids, size_t *ret_n);
/* [A-Za-z0-9_.-], also the rule for shm_prefix (which may not start with '.' or '-'). */
bool config_name_ok(const char *s);

/* --- sections and keys (config_section.c; the rows are in config_keys.c) ----------------- */

/* Parse `val` as row k into `base` (the struct config, or the struct source_conf of the current
 * checkpoint section). */
int config_key_set(struct loader *ld, const struct config_key *k, void *base, const char *val);
/* Give every row of `section` its default in `base`; 0 with the error recorded on failure. */
int config_set_defaults(struct loader *ld, enum config_section section, void *base);
/* Where the row of `section` at `field` was set (in the current section for checkpoint rows), 0
 * if it was not. */
int config_key_line(const struct loader *ld, enum config_section section, size_t field);
/* A section header line (starts with '['): closes the previous section and opens this one; false
 * with the error recorded when this header is refused. */
bool config_open_section(struct loader *ld, const char *text, size_t n);
/* The checkpoint section that just ended: its required keys set, allow_any from its lists. */
void config_close_section(struct loader *ld);
/* inih's handler: one key of the current section, checked and stored in ld->cfg. */
int config_handler(void *user, const char *section, const char *key, const char *val);

/* --- lines (config_line.c) --------------------------------------------------------------- */

/* inih's reader (fgets-style) over ld->buf; numbers lines and opens sections. */
char *config_reader(char *str, int num, void *stream);
/* Does line `line` (1-based) look like a section header? For inih's own syntax errors. */
bool config_line_is_header(const struct loader *ld, int line);

#endif
