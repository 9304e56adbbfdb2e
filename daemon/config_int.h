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

enum daemon_key {
	DK_SOCKET, DK_SOCKET_MODE, DK_SOCKET_GROUP, DK_SHM_PREFIX, DK_STATE_DIR, DK_VERIFY_ADOPTED,
	DK_BUDGET, DK_WORKERS,
	DK_MAX_CLIENTS, DK_CLIENT_MAX_PENDING, DK_CLIENT_MAX_QUEUE, DK_CLIENT_MAX_BYTES,
	DK_CLIENT_MAX_WEIGHTS, DK_MAX_FRAME, DK_LOG_LEVEL, DK_MAX_MESSAGE, DK_MAX_UNIT_ENTRIES,
	DK_SEGMENT_MAX, DK_MAX_IDLE_WEIGHTS, DK_MAX_IDLE_SEGMENTS,
	DK_MAX_CLIENTS_PER_UID, DK_CLIENT_MAX_QUEUE_FDS, DK_UID_MAX_QUEUE_FDS, DK_IDLE_TIMEOUT,
	DK_FRAME_TIMEOUT, DK_UID_MAX_PARTIAL, DK_MAX_PARTIAL, DK_MAX_TEMP, DK_UID_MAX_PENDING,
	DK_DIGEST, DK_CLIENT_MAX_SEGMENTS, DK_UID_MAX_SEGMENTS, DK_UID_MAX_WEIGHTS, DK_COUNT
};

enum checkpoint_key { CK_PATH, CK_ALLOW_USERS, CK_ALLOW_GROUPS, CK_PRELOAD, CK_COUNT };

enum section { SECT_NONE, SECT_DAEMON, SECT_CHECKPOINT };

/* Parsing state shared by the line reader and the key handler. */
struct loader {
	const char *file;
	const char *buf;                  /* the whole file */
	size_t len, pos;                  /* its size and the reader's offset */
	int line;                         /* 1-based number of the line last handed to inih */
	int err_line;                     /* first error found here (0 = none); parsing stops there */
	int err_code;
	char err_msg[600];
	struct config *cfg;
	enum section sect;
	char sect_text[CONFIG_MAX_SECTION + 1];  /* what inih reports as the section name */
	int daemon_line;                  /* where [daemon] starts, 0 if not seen */
	int daemon_key_line[DK_COUNT];    /* where each [daemon] key was set */
	int ckpt_key_line[CK_COUNT];      /* same for the current [checkpoint:NAME] */
	size_t cap_sources;
	/* A line longer than inih's buffer reaches inih as "key =" and its value is kept here
	 * (split_long_line); the handler takes it from here for that line. */
	int long_line;                    /* the line it belongs to, 0 if none */
	char long_val[CONFIG_MAX_LINE + 1];
};

/* Record the first error at `line` (later ones are dropped) and return 0, inih's "handler
 * failed". Every setter below records its error through it and returns 1 on success, 0 after. */
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
/* A duration: a whole number of seconds, or one followed by "ms", "s", "m" or "h". 0 = off. */
int config_set_duration_ms(struct loader *ld, const char *key, const char *val, uint64_t *ret);
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

/* --- sections and keys (config_section.c) ------------------------------------------------ */

/* A section header line (starts with '['): closes the previous section and opens this one. */
void config_open_section(struct loader *ld, const char *text, size_t n);
/* The checkpoint section that just ended must have named its path. */
void config_close_section(struct loader *ld);
/* inih's handler: one key of the current section, checked and stored in ld->cfg. */
int config_handler(void *user, const char *section, const char *key, const char *val);

/* --- lines (config_line.c) --------------------------------------------------------------- */

/* inih's reader (fgets-style) over ld->buf; numbers lines and opens sections. */
char *config_reader(char *str, int num, void *stream);
/* Does line `line` (1-based) look like a section header? For inih's own syntax errors. */
bool config_line_is_header(const struct loader *ld, int line);

#endif
