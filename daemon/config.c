/* SPDX-License-Identifier: Apache-2.0 */
/* config.c - reads weightd.conf (INI, split by inih) into struct config; every error names FILE:LINE. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ini.h>
#include <linux/limits.h> /* PATH_MAX; <limits.h> would find src/limits.h */
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "checked.h"
#include "digest.h"
#include "frame.h"
#include "log.h"

#define CONFIG_MAX_FILE_BYTES (16u << 20)
#define CONFIG_MAX_SOURCES 65536
#define CONFIG_MAX_LIST 4096          /* users or groups in one allow list */
#define CONFIG_MAX_NAME 128           /* checkpoint names */
#define CONFIG_MAX_PREFIX 64          /* shm_prefix; leaves room in NAME_MAX for the weight's id */
#define CONFIG_MAX_SECTION 256        /* text between [ and ] */
#define CONFIG_MAX_LINE 16384         /* characters of one line: room for a PATH_MAX path */

#define DEFAULT_SOCKET "/run/weightd/weightd.sock"
#define DEFAULT_SHM_PREFIX "weightd"
#define DEFAULT_STATE_DIR "/var/lib/weightd"

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

static const char *const daemon_keys[DK_COUNT] = {
	[DK_SOCKET] = "socket", [DK_SOCKET_MODE] = "socket_mode", [DK_SOCKET_GROUP] = "socket_group",
	[DK_SHM_PREFIX] = "shm_prefix", [DK_STATE_DIR] = "state_dir",
	[DK_VERIFY_ADOPTED] = "verify_adopted", [DK_BUDGET] = "budget",
	[DK_WORKERS] = "workers", [DK_MAX_CLIENTS] = "max_clients",
	[DK_CLIENT_MAX_PENDING] = "client_max_pending", [DK_CLIENT_MAX_QUEUE] = "client_max_queue",
	[DK_CLIENT_MAX_BYTES] = "client_max_bytes", [DK_CLIENT_MAX_WEIGHTS] = "client_max_weights",
	[DK_MAX_FRAME] = "max_frame", [DK_LOG_LEVEL] = "log_level",
	[DK_MAX_MESSAGE] = "max_message", [DK_MAX_UNIT_ENTRIES] = "max_unit_entries",
	[DK_SEGMENT_MAX] = "segment_max", [DK_MAX_IDLE_WEIGHTS] = "max_idle_weights",
	[DK_MAX_IDLE_SEGMENTS] = "max_idle_segments",
	[DK_MAX_CLIENTS_PER_UID] = "max_clients_per_uid",
	[DK_CLIENT_MAX_QUEUE_FDS] = "client_max_queue_fds",
	[DK_UID_MAX_QUEUE_FDS] = "uid_max_queue_fds", [DK_IDLE_TIMEOUT] = "idle_timeout",
	[DK_FRAME_TIMEOUT] = "frame_timeout", [DK_UID_MAX_PARTIAL] = "uid_max_partial",
	[DK_MAX_PARTIAL] = "max_partial", [DK_MAX_TEMP] = "max_temp",
	[DK_UID_MAX_PENDING] = "uid_max_pending", [DK_DIGEST] = "digest",
	[DK_CLIENT_MAX_SEGMENTS] = "client_max_segments", [DK_UID_MAX_SEGMENTS] = "uid_max_segments",
	[DK_UID_MAX_WEIGHTS] = "uid_max_weights",
};

enum checkpoint_key { CK_PATH, CK_ALLOW_USERS, CK_ALLOW_GROUPS, CK_PRELOAD, CK_COUNT };

static const char *const checkpoint_keys[CK_COUNT] = {
	[CK_PATH] = "path", [CK_ALLOW_USERS] = "allow_users", [CK_ALLOW_GROUPS] = "allow_groups",
	[CK_PRELOAD] = "preload",
};

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

static int fail(struct loader *ld, int line, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Record the first error (later ones are dropped) and return 0, inih's "handler failed". */
static int fail(struct loader *ld, int line, int code, const char *fmt, ...)
{
	va_list ap;

	if (ld->err_line)
		return 0;
	ld->err_line = line;
	ld->err_code = code;
	va_start(ap, fmt);
	vsnprintf(ld->err_msg, sizeof(ld->err_msg), fmt, ap);
	va_end(ap);
	return 0;
}

/* --- value parsers ------------------------------------------------------------------------ */

enum num_status { NUM_OK, NUM_GARBAGE, NUM_OVERFLOW };

/* Decimal digits only (no sign, no blanks); *end is set to the first non-digit. */
static enum num_status parse_digits(const char *s, uint64_t *ret, const char **end)
{
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return NUM_GARBAGE;
	for (; isdigit((unsigned char)*p); p++)
		if (!wd_mul_u64(v, 10, &v) || !wd_add_u64(v, (uint64_t)(*p - '0'), &v))
			return NUM_OVERFLOW;
	*ret = v;
	*end = p;
	return NUM_OK;
}

static enum num_status parse_size(const char *s, uint64_t *ret)
{
	static const char units[] = "KMGTP";
	const char *end = NULL, *u;
	uint64_t v = 0;
	enum num_status st;

	if (!s)
		return NUM_GARBAGE;
	st = parse_digits(s, &v, &end);
	if (st != NUM_OK)
		return st;
	if (*end) {
		if (end[1] || !(u = strchr(units, toupper((unsigned char)*end))))
			return NUM_GARBAGE;
		for (long i = 0; i <= u - units; i++)
			if (!wd_mul_u64(v, 1024, &v))
				return NUM_OVERFLOW;
	}
	*ret = v;
	return NUM_OK;
}

bool config_parse_size(const char *s, uint64_t *ret)
{
	uint64_t v;

	if (parse_size(s, &v) != NUM_OK)
		return false;
	*ret = v;
	return true;
}

static int set_size(struct loader *ld, const char *key, const char *val, uint64_t min, uint64_t max,
		    uint64_t *ret)
{
	uint64_t v = 0;

	switch (parse_size(val, &v)) {
	case NUM_GARBAGE:
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: '%s' is not a size (bytes, or a number followed by K, M, G, T or P)",
			    key, val);
	case NUM_OVERFLOW:
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: '%s' does not fit in 64 bits", key, val);
	case NUM_OK:
		break;
	}
	if (v < min && max == UINT64_MAX)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: %s is too small (at least %llu bytes)",
			    key, val, (unsigned long long)min);
	if (v < min || v > max)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: %s is out of range (%llu to %llu bytes)", key, val,
			    (unsigned long long)min, (unsigned long long)max);
	*ret = v;
	return 1;
}

static int set_u32(struct loader *ld, const char *key, const char *val, uint32_t min, uint32_t max,
		   uint32_t *ret)
{
	const char *end = NULL;
	uint64_t v = 0;
	enum num_status st = parse_digits(val, &v, &end);

	if (st == NUM_OK && *end)
		st = NUM_GARBAGE;
	if (st == NUM_GARBAGE)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: '%s' is not a whole number", key, val);
	if (st == NUM_OVERFLOW || v < min || v > max)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: %s is out of range (%u to %u)", key, val, min, max);
	*ret = (uint32_t)v;
	return 1;
}

/* A duration: a whole number of seconds, or one followed by "ms", "s", "m" or "h". 0 = off. */
static int set_duration_ms(struct loader *ld, const char *key, const char *val, uint64_t *ret)
{
	const char *end = NULL;
	uint64_t v = 0, mul = 1000;
	enum num_status st = parse_digits(val, &v, &end);

	if (st == NUM_OK) {
		if (strcmp(end, "ms") == 0)
			mul = 1;
		else if (strcmp(end, "s") == 0 || !*end)
			mul = 1000;
		else if (strcmp(end, "m") == 0)
			mul = 60000;
		else if (strcmp(end, "h") == 0)
			mul = 3600000;
		else
			st = NUM_GARBAGE;
	}
	if (st == NUM_GARBAGE)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: '%s' is not a duration (seconds, or a number followed by ms, s, m or h)",
			    key, val);
	if (st == NUM_OVERFLOW || v > UINT64_MAX / mul || v * mul > (30ull * 24 * 3600000))
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: %s is longer than 30 days", key, val);
	*ret = v * mul;
	return 1;
}

static int set_bool(struct loader *ld, const char *key, const char *val, bool *ret)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(val, yes[i]) == 0) {
			*ret = true;
			return 1;
		}
		if (strcasecmp(val, no[i]) == 0) {
			*ret = false;
			return 1;
		}
	}
	return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
		    "%s: '%s' is not a boolean (yes/no, true/false, on/off, 1/0)", key, val);
}

/* Replace *slot by a copy of val. */
static int set_string(struct loader *ld, char **slot, const char *val)
{
	char *s = strdup(val);

	if (!s)
		return fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	free(*slot);
	*slot = s;
	return 1;
}

static int set_abs_path(struct loader *ld, const char *key, const char *val, size_t max, char **slot)
{
	if (val[0] != '/')
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: '%s' is not an absolute path", key, val);
	if (strlen(val) > max)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: path is %zu bytes long, at most %zu allowed", key, strlen(val),
			    max);
	return set_string(ld, slot, val);
}

/* Buffer size for getpwnam_r/getgrnam_r; grown on ERANGE. */
static size_t pw_bufsize(int which)
{
	long n = sysconf(which);

	return n > 0 && n < (1 << 20) ? (size_t)n : 16384;
}

/*
 * Resolve a user (is_group false) or group name, or take a decimal id as it is. Returns 1 and sets
 * *ret, or records an error naming `key` and returns 0.
 */
static int resolve_id(struct loader *ld, const char *key, const char *name, bool is_group,
		      uint32_t *ret)
{
	const char *what = is_group ? "group" : "user";
	const char *end = NULL;
	size_t size = pw_bufsize(is_group ? _SC_GETGR_R_SIZE_MAX : _SC_GETPW_R_SIZE_MAX);
	char *buf = NULL;
	uint64_t v = 0;
	int rc, ok = 0;

	switch (parse_digits(name, &v, &end)) {
	case NUM_OK:
		if (*end)
			break;
		/* (uid_t)-1 and (gid_t)-1 mean "no id" to chown and friends. */
		if (v >= UINT32_MAX)
			return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: %s id %s is out of range", key, what,
				    name);
		*ret = (uint32_t)v;
		return 1;
	case NUM_OVERFLOW:
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "%s: %s id %s is out of range", key, what, name);
	case NUM_GARBAGE:
		break;
	}

	for (;;) {
		struct passwd pw, *pwp = NULL;
		struct group gr, *grp = NULL;
		char *nb = realloc(buf, size);

		if (!nb) {
			fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
			goto out;
		}
		buf = nb;
		if (is_group) {
			rc = getgrnam_r(name, &gr, buf, size, &grp);
			if (rc == 0 && grp) {
				*ret = (uint32_t)grp->gr_gid;
				ok = 1;
				goto out;
			}
		} else {
			rc = getpwnam_r(name, &pw, buf, size, &pwp);
			if (rc == 0 && pwp) {
				*ret = (uint32_t)pwp->pw_uid;
				ok = 1;
				goto out;
			}
		}
		if (rc == ERANGE && size < (1u << 20)) {
			size *= 2;
			continue;
		}
		/* Not found is rc 0 with a NULL result; some NSS modules report ENOENT/ESRCH instead. */
		if (rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM)
			fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: unknown %s '%s'", key, what, name);
		else
			fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: cannot look up %s '%s': %s", key, what, name,
			     strerror(rc));
		goto out;
	}
out:
	free(buf);
	return ok;
}

/* Split a comma/blank separated list of users or groups and resolve each into a new array. */
static int set_id_list(struct loader *ld, const char *key, const char *val, bool is_group,
		       uint32_t **ret_ids, size_t *ret_n)
{
	uint32_t *ids = NULL;
	size_t n = 0, cap = 0;
	char *copy = strdup(val), *save = NULL, *tok;
	int ok = 0;

	if (!copy) {
		fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		uint32_t id = 0;

		if (n == CONFIG_MAX_LIST) {
			fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: more than %d entries", key, CONFIG_MAX_LIST);
			goto out;
		}
		if (!resolve_id(ld, key, tok, is_group, &id))
			goto out;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			uint32_t *nids = realloc(ids, ncap * sizeof(*ids));

			if (!nids) {
				fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
				goto out;
			}
			ids = nids;
			cap = ncap;
		}
		ids[n++] = id;
	}
	if (n == 0) {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
		     "%s: the list is empty (leave the key out to allow "
		     "every peer of the socket)",
		     key);
		goto out;
	}
	*ret_ids = ids;
	*ret_n = n;
	ids = NULL;
	ok = 1;
out:
	free(ids);
	free(copy);
	return ok;
}

/* [A-Za-z0-9_.-], also the rule for shm_prefix (which may not start with '.' or '-'). */
static bool name_chars_ok(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.' && *s != '-')
			return false;
	return true;
}

/* --- [daemon] ----------------------------------------------------------------------------- */

static int daemon_set(struct loader *ld, int k, const char *key, const char *val)
{
	struct config *cfg = ld->cfg;
	uint64_t u64 = 0;
	uint32_t u32 = 0;

	switch ((enum daemon_key)k) {
	case DK_SOCKET:
		return set_abs_path(ld, key, val, sizeof(((struct sockaddr_un *)0)->sun_path) - 1,
				    &cfg->socket_path);
	case DK_SOCKET_MODE: {
		unsigned long mode = 0;
		const char *p = val;

		for (; *p >= '0' && *p <= '7' && mode <= 07777; p++)
			mode = mode * 8 + (unsigned long)(*p - '0');
		if (p == val || *p || mode > 0777)
			return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: '%s' is not an octal mode between 0000 and 0777", key, val);
		cfg->socket_mode = (mode_t)mode;
		return 1;
	}
	case DK_SOCKET_GROUP:
		if (!val[0]) {
			cfg->socket_group = (gid_t)-1;  /* as the default: keep the group it is created with */
			return 1;
		}
		if (!resolve_id(ld, key, val, true, &u32))
			return 0;
		cfg->socket_group = (gid_t)u32;
		return 1;
	case DK_SHM_PREFIX:
		if (!val[0] || strlen(val) > CONFIG_MAX_PREFIX || val[0] == '.' || val[0] == '-' ||
		    !name_chars_ok(val))
			return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: '%s' is invalid (1 to %d of A-Z a-z 0-9 _ . -, not starting "
				    "with . or -)", key, val, CONFIG_MAX_PREFIX);
		return set_string(ld, &cfg->shm_prefix, val);
	case DK_STATE_DIR:
		if (!val[0])
			return set_string(ld, &cfg->state_dir, "");
		return set_abs_path(ld, key, val, PATH_MAX - 64, &cfg->state_dir);
	case DK_VERIFY_ADOPTED:
		return set_bool(ld, key, val, &cfg->verify_adopted);
	case DK_DIGEST:
		if (wd_digest_from_name(val) == WD_DIGEST_NONE)
			return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: '%s' is not a digest algorithm (xxh3-128 or sha256)", key, val);
		cfg->digest = wd_digest_from_name(val);
		return 1;
	case DK_BUDGET:
		return set_size(ld, key, val, 0, UINT64_MAX, &cfg->budget_bytes);
	case DK_WORKERS:
		return set_u32(ld, key, val, 0, 1024, &cfg->workers);
	case DK_MAX_CLIENTS:
		return set_u32(ld, key, val, 1, 1u << 20, &cfg->max_clients);
	case DK_CLIENT_MAX_PENDING:
		return set_u32(ld, key, val, 1, 1u << 16, &cfg->client_max_pending);
	case DK_CLIENT_MAX_QUEUE:
		return set_size(ld, key, val, 4096, UINT64_MAX, &cfg->client_max_queue_bytes);
	case DK_CLIENT_MAX_BYTES:
		return set_size(ld, key, val, 0, UINT64_MAX, &cfg->client_max_bytes);
	case DK_CLIENT_MAX_WEIGHTS:
		return set_u32(ld, key, val, 0, UINT32_MAX, &cfg->client_max_weights);
	case DK_MAX_CLIENTS_PER_UID:
		return set_u32(ld, key, val, 1, 1u << 20, &cfg->max_clients_per_uid);
	case DK_CLIENT_MAX_QUEUE_FDS:
		return set_u32(ld, key, val, 1, 1u << 20, &cfg->client_max_queue_fds);
	case DK_UID_MAX_QUEUE_FDS:
		return set_u32(ld, key, val, 1, 1u << 24, &cfg->uid_max_queue_fds);
	case DK_IDLE_TIMEOUT:
		return set_duration_ms(ld, key, val, &cfg->idle_timeout_ms);
	case DK_FRAME_TIMEOUT:
		return set_duration_ms(ld, key, val, &cfg->frame_timeout_ms);
	case DK_UID_MAX_PARTIAL:
		return set_size(ld, key, val, 4096, UINT64_MAX, &cfg->uid_max_partial_bytes);
	case DK_MAX_PARTIAL:
		return set_size(ld, key, val, 4096, UINT64_MAX, &cfg->max_partial_bytes);
	case DK_UID_MAX_PENDING:
		return set_u32(ld, key, val, 1, 1u << 24, &cfg->uid_max_pending);
	case DK_CLIENT_MAX_SEGMENTS:
		return set_u32(ld, key, val, 1, 1u << 20, &cfg->client_max_segments);
	case DK_UID_MAX_SEGMENTS:
		return set_u32(ld, key, val, 1, 1u << 24, &cfg->uid_max_segments);
	case DK_UID_MAX_WEIGHTS:
		return set_u32(ld, key, val, 1, UINT32_MAX, &cfg->uid_max_weights);
	case DK_MAX_TEMP:
		return set_size(ld, key, val, 0, UINT64_MAX, &cfg->max_temp_bytes);
	case DK_MAX_FRAME:
		if (!set_size(ld, key, val, 4096, 1u << 30, &u64))
			return 0;
		cfg->max_frame_bytes = (uint32_t)u64;
		return 1;
	case DK_MAX_MESSAGE:
		return set_size(ld, key, val, 4096, 4ull << 30, &cfg->max_message_bytes);
	case DK_MAX_UNIT_ENTRIES:
		return set_u32(ld, key, val, 1, 1u << 24, &cfg->max_unit_entries);
	case DK_SEGMENT_MAX:
		return set_size(ld, key, val, 1u << 20, 1ull << 40, &cfg->segment_max_bytes);
	case DK_MAX_IDLE_WEIGHTS:
		return set_u32(ld, key, val, 0, UINT32_MAX, &cfg->max_idle_weights);
	case DK_MAX_IDLE_SEGMENTS:
		return set_u32(ld, key, val, 0, UINT32_MAX, &cfg->max_idle_segments);
	case DK_LOG_LEVEL: {
		int level = log_level_parse(val);

		if (level < 0)
			return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: '%s' is not a level (error, warning, notice, info, debug)",
				    key, val);
		cfg->log_level = level;
		return 1;
	}
	case DK_COUNT:
		break;
	}
	return fail(ld, ld->line, WEIGHTD_E_INTERNAL, "%s: no parser for this key", key);
}

/* --- [checkpoint:NAME] -------------------------------------------------------------------- */

static int checkpoint_set(struct loader *ld, int k, const char *key, const char *val)
{
	struct source_conf *src = &ld->cfg->sources[ld->cfg->n_sources - 1];

	switch ((enum checkpoint_key)k) {
	case CK_PATH:
		return set_abs_path(ld, key, val, PATH_MAX - 1, &src->path);
	case CK_ALLOW_USERS:
		src->allow_any = false;
		return set_id_list(ld, key, val, false, (uint32_t **)&src->allow_uids, &src->n_uids);
	case CK_ALLOW_GROUPS:
		src->allow_any = false;
		return set_id_list(ld, key, val, true, (uint32_t **)&src->allow_gids, &src->n_gids);
	case CK_PRELOAD:
		return set_bool(ld, key, val, &src->preload);
	case CK_COUNT:
		break;
	}
	return fail(ld, ld->line, WEIGHTD_E_INTERNAL, "%s: no parser for this key", key);
}

_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t),
	       "allow lists are resolved as 32-bit ids");

/* The checkpoint section that just ended must have named its path. */
static void close_section(struct loader *ld)
{
	struct source_conf *src;

	if (ld->sect != SECT_CHECKPOINT)
		return;
	src = &ld->cfg->sources[ld->cfg->n_sources - 1];
	if (!src->path)
		fail(ld, src->line, WEIGHTD_E_INVALID_ARGUMENT, "[checkpoint:%s] has no path", src->name);
}

static int open_checkpoint(struct loader *ld, const char *name)
{
	struct config *cfg = ld->cfg;
	struct source_conf *src;

	if (!name[0] || strlen(name) > CONFIG_MAX_NAME || !name_chars_ok(name))
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "checkpoint name '%s' is invalid (1 to %d of A-Z a-z 0-9 _ . -)", name,
			    CONFIG_MAX_NAME);
	for (size_t i = 0; i < cfg->n_sources; i++)
		if (strcmp(cfg->sources[i].name, name) == 0)
			return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "checkpoint '%s' is defined twice (first at line %d)", name,
				    cfg->sources[i].line);
	if (cfg->n_sources == CONFIG_MAX_SOURCES)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "more than %d checkpoints",
			    CONFIG_MAX_SOURCES);
	if (cfg->n_sources == ld->cap_sources) {
		size_t ncap = ld->cap_sources ? ld->cap_sources * 2 : 8;
		struct source_conf *ns = realloc(cfg->sources, ncap * sizeof(*ns));

		if (!ns)
			return fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		cfg->sources = ns;
		ld->cap_sources = ncap;
	}
	src = &cfg->sources[cfg->n_sources];
	memset(src, 0, sizeof(*src));
	src->name = strdup(name);
	if (!src->name)
		return fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	src->allow_any = true;
	src->line = ld->line;
	cfg->n_sources++;
	return 1;
}

/*
 * A section header line (starts with '['). Checked here rather than in the handler because inih
 * calls the handler only for keys: an empty or misspelt section would otherwise go unnoticed.
 */
static void open_section(struct loader *ld, const char *text, size_t n)
{
	const char *close = memchr(text, ']', n);
	size_t len;

	close_section(ld);
	if (ld->err_line)
		return;
	ld->sect = SECT_NONE;
	if (!close) {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "section header has no closing ']'");
		return;
	}
	for (const char *p = close + 1; p < text + n; p++) {
		if (*p == ';' || *p == '#')
			break;
		if (!isspace((unsigned char)*p)) {
			fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "unexpected text after the section header");
			return;
		}
	}
	len = (size_t)(close - text - 1);
	if (len > CONFIG_MAX_SECTION) {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
		     "section name is %zu bytes long, at most %d allowed", len, CONFIG_MAX_SECTION);
		return;
	}
	memcpy(ld->sect_text, text + 1, len);
	ld->sect_text[len] = '\0';

	if (strcmp(ld->sect_text, "daemon") == 0) {
		if (ld->daemon_line) {
			fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			     "section [daemon] is given twice (first at line %d)", ld->daemon_line);
			return;
		}
		ld->daemon_line = ld->line;
		ld->sect = SECT_DAEMON;
	} else if (strncmp(ld->sect_text, "checkpoint:", 11) == 0) {
		if (!open_checkpoint(ld, ld->sect_text + 11))
			return;
		memset(ld->ckpt_key_line, 0, sizeof(ld->ckpt_key_line));
		ld->sect = SECT_CHECKPOINT;
	} else {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
		     "unknown section [%s] (expected [daemon] or [checkpoint:NAME])", ld->sect_text);
	}
}

/* --- inih callbacks ----------------------------------------------------------------------- */

/*
 * fgets-style reader over the file's bytes. It numbers lines (inih's handler gets no line number),
 * drops leading blanks so an indented key is a key and not a continuation of the previous value,
 * rejects lines longer than inih's buffer instead of letting inih split them, and opens sections.
 * Returns NULL at the end or once an error is recorded, which stops the parse at the first error.
 */
/*
 * inih reads lines into a buffer of its own size (200 bytes in Debian's build), too short for a
 * path under a Hugging Face cache. A longer line is split here by inih's own rules: the key is
 * the text before the first '=' or ':', the value what follows, without leading and trailing
 * blanks and cut at a ';' that follows a blank (an inline comment). inih is handed "key =" and
 * the handler takes the value from ld->long_val. Writes the short line into str (num bytes);
 * false with the error recorded when the line is not "key = value" or its key is too long.
 */
static bool split_long_line(struct loader *ld, const char *start, size_t n, char *str, int num)
{
	const char *sep = NULL, *v, *end = start + n;
	size_t klen, vlen;
	bool blank = false;

	if (*start == ';' || *start == '#') {
		str[0] = '\n';             /* a comment: nothing for inih */
		str[1] = '\0';
		return true;
	}
	for (const char *p = start; p < end && !sep; p++) {
		if (*p == '=' || *p == ':')
			sep = p;
		else if (*p == ';' && blank)
			break;
		blank = *p == ' ' || *p == '\t';
	}
	if (!sep || *start == '[') {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, *start == '['
		     ? "line is %zu characters long; a section header may be at most %d"
		     : "expected 'key = value' (a line of %zu characters, longer than %d, must be one)",
		     n, num - 2);
		return false;
	}
	klen = (size_t)(sep - start);
	if (klen + 3 > (size_t)num) {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "the key name before '%c' is %zu characters long",
		     *sep, klen);
		return false;
	}
	v = sep + 1;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	blank = false;
	for (vlen = 0; v + vlen < end; vlen++) {
		if (v[vlen] == ';' && blank)
			break;
		blank = v[vlen] == ' ' || v[vlen] == '\t';
	}
	while (vlen && isspace((unsigned char)v[vlen - 1]))
		vlen--;
	memcpy(ld->long_val, v, vlen);
	ld->long_val[vlen] = '\0';
	ld->long_line = ld->line;
	memcpy(str, start, klen + 1);
	str[klen + 1] = '\n';
	str[klen + 2] = '\0';
	return true;
}

static char *config_reader(char *str, int num, void *stream)
{
	struct loader *ld = stream;
	const char *start, *nl;
	size_t n;

	if (ld->err_line || ld->pos >= ld->len)
		return NULL;
	start = ld->buf + ld->pos;
	nl = memchr(start, '\n', ld->len - ld->pos);
	n = nl ? (size_t)(nl - start) : ld->len - ld->pos;
	ld->pos += n + (nl ? 1 : 0);
	ld->line++;
	if (ld->line == 1 && n >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0) {
		start += 3;
		n -= 3;
	}
	while (n && (*start == ' ' || *start == '\t')) {
		start++;
		n--;
	}
	if (memchr(start, '\0', n)) {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "line contains a NUL byte");
		return NULL;
	}
	if (n > CONFIG_MAX_LINE || num < 8) {
		fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
		     "line is %zu characters long, at most %d allowed", n, CONFIG_MAX_LINE);
		return NULL;
	}
	if (n > (size_t)num - 2)
		return split_long_line(ld, start, n, str, num) ? str : NULL;
	memcpy(str, start, n);
	str[n] = '\n';
	str[n + 1] = '\0';
	if (n && start[0] == '[') {
		open_section(ld, start, n);
		if (ld->err_line)
			return NULL;
	}
	return str;
}

static int key_index(const char *const *keys, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (strcmp(keys[i], key) == 0)
			return i;
	return -1;
}

static int config_handler(void *user, const char *section, const char *key, const char *val)
{
	struct loader *ld = user;
	const char *const *keys = ld->sect == SECT_DAEMON ? daemon_keys : checkpoint_keys;
	int n = ld->sect == SECT_DAEMON ? DK_COUNT : CK_COUNT;
	int *lines = ld->sect == SECT_DAEMON ? ld->daemon_key_line : ld->ckpt_key_line;
	int k;

	if (ld->err_line)
		return 0;
	if (ld->long_line == ld->line)
		val = ld->long_val;
	if (!key[0])
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "key name missing before '='");
	if (ld->sect == SECT_NONE)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "key '%s' comes before any section ([daemon] or [checkpoint:NAME])", key);
	/* inih and open_section() read the same header and must agree (inih cuts long names). */
	if (strncmp(section, ld->sect_text, strlen(section)) != 0)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "cannot parse the section header [%s]",
			    section);
	k = key_index(keys, n, key);
	if (k < 0)
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "unknown key '%s' in [%s]",
			    key, ld->sect_text);
	if (lines[k])
		return fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "key '%s' is given twice in [%s] (first at line %d)", key,
			    ld->sect_text, lines[k]);
	lines[k] = ld->line;
	return ld->sect == SECT_DAEMON ? daemon_set(ld, k, key, val) : checkpoint_set(ld, k, key, val);
}

/* The text of line `line` (1-based) for a syntax message: does it look like a section header? */
static bool line_is_header(const struct loader *ld, int line)
{
	const char *p = ld->buf, *end = ld->buf + ld->len;

	for (int i = 1; i < line && p < end; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		p = nl ? nl + 1 : end;
	}
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p < end && *p == '[';
}

/* --- loading ------------------------------------------------------------------------------ */

static struct config *config_new(const char *path)
{
	struct config *cfg = calloc(1, sizeof(*cfg));

	if (!cfg)
		return NULL;
	cfg->path = strdup(path);
	cfg->socket_path = strdup(DEFAULT_SOCKET);
	cfg->shm_prefix = strdup(DEFAULT_SHM_PREFIX);
	cfg->state_dir = strdup(DEFAULT_STATE_DIR);
	cfg->socket_mode = 0660;
	cfg->socket_group = (gid_t)-1;
	cfg->budget_bytes = 0;
	cfg->workers = 0;
	cfg->digest = WD_DIGEST_DEFAULT;
	cfg->max_clients = 1024;
	cfg->client_max_pending = 256;
	cfg->client_max_queue_bytes = 64ull << 20;
	cfg->client_max_bytes = 0;
	cfg->client_max_weights = 0;
	cfg->max_frame_bytes = WD_FRAME_MAX_DEFAULT;
	cfg->max_message_bytes = 256ull << 20;
	cfg->max_unit_entries = 1u << 20;
	cfg->segment_max_bytes = 4ull << 30;
	cfg->max_idle_weights = 1u << 20;
	cfg->max_idle_segments = 1024;
	cfg->max_clients_per_uid = 64;
	cfg->client_max_queue_fds = 1024;
	cfg->uid_max_queue_fds = 4096;
	cfg->idle_timeout_ms = 600000;
	cfg->frame_timeout_ms = 30000;
	cfg->uid_max_partial_bytes = 64ull << 20;
	cfg->max_partial_bytes = 256ull << 20;
	cfg->max_temp_bytes = 0;
	cfg->uid_max_pending = 1024;
	cfg->client_max_segments = 4096;
	cfg->uid_max_segments = 16384;
	cfg->uid_max_weights = 1u << 22;
	cfg->log_level = -1;
	if (!cfg->path || !cfg->socket_path || !cfg->shm_prefix || !cfg->state_dir) {
		config_free(cfg);
		return NULL;
	}
	return cfg;
}

/* Read a whole regular file of at most CONFIG_MAX_FILE_BYTES. */
static int read_file(const char *path, char **ret_buf, size_t *ret_len, weightd_error *err)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wd_error_set(err, WEIGHTD_E_IO, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "%s: cannot stat: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: not a regular file", path);
		goto out;
	}
	if (st.st_size > (off_t)CONFIG_MAX_FILE_BYTES) {
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "%s: %lld bytes, larger than the %u allowed", path,
				  (long long)st.st_size, CONFIG_MAX_FILE_BYTES);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	/* Read until EOF but never past the limit, in case the file grows meanwhile. */
	while (len < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + len, (size_t)st.st_size - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = wd_error_set(err, WEIGHTD_E_IO, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	*ret_buf = buf;
	*ret_len = len;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

int config_load(const char *path, struct config **ret, weightd_error *err)
{
	struct loader ld = { 0 };
	struct config *cfg = NULL;
	char *buf = NULL;
	size_t len = 0;
	int rc, ini_line;

	rc = read_file(path, &buf, &len, err);
	if (rc < 0)
		return rc;
	cfg = config_new(path);
	if (!cfg) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	ld.file = path;
	ld.buf = buf;
	ld.len = len;
	ld.cfg = cfg;

	ini_line = ini_parse_stream(config_reader, &ld, config_handler, &ld);
	if (ini_line < 0) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	if (!ld.err_line)
		close_section(&ld);
	if (!ld.err_line && cfg->client_max_queue_bytes < cfg->max_frame_bytes) {
		int line = ld.daemon_key_line[DK_CLIENT_MAX_QUEUE] > ld.daemon_key_line[DK_MAX_FRAME]
			? ld.daemon_key_line[DK_CLIENT_MAX_QUEUE] : ld.daemon_key_line[DK_MAX_FRAME];

		fail(&ld, line, WEIGHTD_E_INVALID_ARGUMENT,
		     "client_max_queue (%llu bytes) is smaller than max_frame (%u bytes): one reply "
		     "must fit in a client's queue", (unsigned long long)cfg->client_max_queue_bytes,
		     cfg->max_frame_bytes);
	}
	if (!ld.err_line && cfg->uid_max_partial_bytes > cfg->max_partial_bytes / 2) {
		int line = ld.daemon_key_line[DK_UID_MAX_PARTIAL] > ld.daemon_key_line[DK_MAX_PARTIAL]
			? ld.daemon_key_line[DK_UID_MAX_PARTIAL] : ld.daemon_key_line[DK_MAX_PARTIAL];

		/* else one uid alone could fill the total and lock every other uid out */
		fail(&ld, line, WEIGHTD_E_INVALID_ARGUMENT,
		     "uid_max_partial (%llu bytes) is more than half of max_partial (%llu bytes): one "
		     "uid must not be able to take what every uid shares",
		     (unsigned long long)cfg->uid_max_partial_bytes,
		     (unsigned long long)cfg->max_partial_bytes);
	}
	/* inih reports lines it could not split itself (no '=' or ':'); ours come with a sentence. */
	if (ini_line > 0 && (!ld.err_line || ini_line < ld.err_line)) {
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s:%d: %s", path, ini_line,
				  line_is_header(&ld, ini_line) ? "cannot parse the section header"
				  : "expected 'key = value'");
		goto out;
	}
	if (ld.err_line) {
		rc = wd_error_set(err, ld.err_code, "%s:%d: %s", path, ld.err_line, ld.err_msg);
		goto out;
	}
	*ret = cfg;
	cfg = NULL;
out:
	config_free(cfg);
	free(buf);
	return rc;
}

void config_free(struct config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg->n_sources; i++) {
		free(cfg->sources[i].name);
		free(cfg->sources[i].path);
		free(cfg->sources[i].allow_uids);
		free(cfg->sources[i].allow_gids);
	}
	free(cfg->sources);
	free(cfg->path);
	free(cfg->socket_path);
	free(cfg->shm_prefix);
	free(cfg->state_dir);
	free(cfg);
}
