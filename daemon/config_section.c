/* SPDX-License-Identifier: Apache-2.0 */
/* config_section.c - the sections of weightd.conf: headers ([daemon], [checkpoint:NAME]), the
 * keys each admits, and what every key sets in struct config. */
#include "config_int.h"

#include <ctype.h>
#include <linux/limits.h> /* PATH_MAX */
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "digest.h"
#include "log.h"

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

static const char *const checkpoint_keys[CK_COUNT] = {
	[CK_PATH] = "path", [CK_ALLOW_USERS] = "allow_users", [CK_ALLOW_GROUPS] = "allow_groups",
	[CK_PRELOAD] = "preload",
};

/* --- [daemon] ----------------------------------------------------------------------------- */

static int daemon_set(struct loader *ld, int k, const char *key, const char *val)
{
	struct config *cfg = ld->cfg;
	uint64_t u64 = 0;
	uint32_t u32 = 0;

	switch ((enum daemon_key)k) {
	case DK_SOCKET:
		return config_set_abs_path(ld, key, val,
					   sizeof(((struct sockaddr_un *)0)->sun_path) - 1,
					   &cfg->socket_path);
	case DK_SOCKET_MODE: {
		unsigned long mode = 0;
		const char *p = val;

		for (; *p >= '0' && *p <= '7' && mode <= 07777; p++)
			mode = mode * 8 + (unsigned long)(*p - '0');
		if (p == val || *p || mode > 0777)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is not an octal mode between 0000 and 0777", key, val);
		cfg->socket_mode = (mode_t)mode;
		return 1;
	}
	case DK_SOCKET_GROUP:
		if (!val[0]) {
			cfg->socket_group = (gid_t)-1;  /* as the default: keep the group it is created with */
			return 1;
		}
		if (!config_resolve_id(ld, key, val, true, &u32))
			return 0;
		cfg->socket_group = (gid_t)u32;
		return 1;
	case DK_SHM_PREFIX:
		if (!val[0] || strlen(val) > CONFIG_MAX_PREFIX || val[0] == '.' || val[0] == '-' ||
		    !config_name_ok(val))
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is invalid (1 to %d of A-Z a-z 0-9 _ . -, not starting "
					   "with . or -)", key, val, CONFIG_MAX_PREFIX);
		return config_set_string(ld, &cfg->shm_prefix, val);
	case DK_STATE_DIR:
		if (!val[0])
			return config_set_string(ld, &cfg->state_dir, "");
		return config_set_abs_path(ld, key, val, PATH_MAX - 64, &cfg->state_dir);
	case DK_VERIFY_ADOPTED:
		return config_set_bool(ld, key, val, &cfg->verify_adopted);
	case DK_DIGEST:
		if (wd_digest_from_name(val) == WD_DIGEST_NONE)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is not a digest algorithm (xxh3-128 or sha256)", key, val);
		cfg->digest = wd_digest_from_name(val);
		return 1;
	case DK_BUDGET:
		return config_set_size(ld, key, val, 0, UINT64_MAX, &cfg->budget_bytes);
	case DK_WORKERS:
		return config_set_u32(ld, key, val, 0, 1024, &cfg->workers);
	case DK_MAX_CLIENTS:
		return config_set_u32(ld, key, val, 1, 1u << 20, &cfg->max_clients);
	case DK_CLIENT_MAX_PENDING:
		return config_set_u32(ld, key, val, 1, 1u << 16, &cfg->client_max_pending);
	case DK_CLIENT_MAX_QUEUE:
		return config_set_size(ld, key, val, 4096, UINT64_MAX,
				       &cfg->client_max_queue_bytes);
	case DK_CLIENT_MAX_BYTES:
		return config_set_size(ld, key, val, 0, UINT64_MAX, &cfg->client_max_bytes);
	case DK_CLIENT_MAX_WEIGHTS:
		return config_set_u32(ld, key, val, 0, UINT32_MAX, &cfg->client_max_weights);
	case DK_MAX_CLIENTS_PER_UID:
		return config_set_u32(ld, key, val, 1, 1u << 20, &cfg->max_clients_per_uid);
	case DK_CLIENT_MAX_QUEUE_FDS:
		return config_set_u32(ld, key, val, 1, 1u << 20, &cfg->client_max_queue_fds);
	case DK_UID_MAX_QUEUE_FDS:
		return config_set_u32(ld, key, val, 1, 1u << 24, &cfg->uid_max_queue_fds);
	case DK_IDLE_TIMEOUT:
		return config_set_duration_ms(ld, key, val, &cfg->idle_timeout_ms);
	case DK_FRAME_TIMEOUT:
		return config_set_duration_ms(ld, key, val, &cfg->frame_timeout_ms);
	case DK_UID_MAX_PARTIAL:
		return config_set_size(ld, key, val, 4096, UINT64_MAX, &cfg->uid_max_partial_bytes);
	case DK_MAX_PARTIAL:
		return config_set_size(ld, key, val, 4096, UINT64_MAX, &cfg->max_partial_bytes);
	case DK_UID_MAX_PENDING:
		return config_set_u32(ld, key, val, 1, 1u << 24, &cfg->uid_max_pending);
	case DK_CLIENT_MAX_SEGMENTS:
		return config_set_u32(ld, key, val, 1, 1u << 20, &cfg->client_max_segments);
	case DK_UID_MAX_SEGMENTS:
		return config_set_u32(ld, key, val, 1, 1u << 24, &cfg->uid_max_segments);
	case DK_UID_MAX_WEIGHTS:
		return config_set_u32(ld, key, val, 1, UINT32_MAX, &cfg->uid_max_weights);
	case DK_MAX_TEMP:
		return config_set_size(ld, key, val, 0, UINT64_MAX, &cfg->max_temp_bytes);
	case DK_MAX_FRAME:
		if (!config_set_size(ld, key, val, 4096, 1u << 30, &u64))
			return 0;
		cfg->max_frame_bytes = (uint32_t)u64;
		return 1;
	case DK_MAX_MESSAGE:
		return config_set_size(ld, key, val, 4096, 4ull << 30, &cfg->max_message_bytes);
	case DK_MAX_UNIT_ENTRIES:
		return config_set_u32(ld, key, val, 1, 1u << 24, &cfg->max_unit_entries);
	case DK_SEGMENT_MAX:
		return config_set_size(ld, key, val, 1u << 20, 1ull << 40, &cfg->segment_max_bytes);
	case DK_MAX_IDLE_WEIGHTS:
		return config_set_u32(ld, key, val, 0, UINT32_MAX, &cfg->max_idle_weights);
	case DK_MAX_IDLE_SEGMENTS:
		return config_set_u32(ld, key, val, 0, UINT32_MAX, &cfg->max_idle_segments);
	case DK_LOG_LEVEL: {
		int level = log_level_parse(val);

		if (level < 0)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is not a level (error, warning, notice, info, debug)",
					   key, val);
		cfg->log_level = level;
		return 1;
	}
	case DK_COUNT:
		break;
	}
	return config_fail(ld, ld->line, WEIGHTD_E_INTERNAL, "%s: no parser for this key", key);
}

/* --- [checkpoint:NAME] -------------------------------------------------------------------- */

static int checkpoint_set(struct loader *ld, int k, const char *key, const char *val)
{
	struct source_conf *src = &ld->cfg->sources[ld->cfg->n_sources - 1];

	switch ((enum checkpoint_key)k) {
	case CK_PATH:
		return config_set_abs_path(ld, key, val, PATH_MAX - 1, &src->path);
	case CK_ALLOW_USERS:
		src->allow_any = false;
		return config_set_id_list(ld, key, val, false, (uint32_t **)&src->allow_uids,
					  &src->n_uids);
	case CK_ALLOW_GROUPS:
		src->allow_any = false;
		return config_set_id_list(ld, key, val, true, (uint32_t **)&src->allow_gids,
					  &src->n_gids);
	case CK_PRELOAD:
		return config_set_bool(ld, key, val, &src->preload);
	case CK_COUNT:
		break;
	}
	return config_fail(ld, ld->line, WEIGHTD_E_INTERNAL, "%s: no parser for this key", key);
}

_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t),
	       "allow lists are resolved as 32-bit ids");

/* The checkpoint section that just ended must have named its path. */
void config_close_section(struct loader *ld)
{
	struct source_conf *src;

	if (ld->sect != SECT_CHECKPOINT)
		return;
	src = &ld->cfg->sources[ld->cfg->n_sources - 1];
	if (!src->path)
		config_fail(ld, src->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "[checkpoint:%s] has no path", src->name);
}

static int open_checkpoint(struct loader *ld, const char *name)
{
	struct config *cfg = ld->cfg;
	struct source_conf *src;

	if (!name[0] || strlen(name) > CONFIG_MAX_NAME || !config_name_ok(name))
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "checkpoint name '%s' is invalid (1 to %d of A-Z a-z 0-9 _ . -)", name,
				   CONFIG_MAX_NAME);
	for (size_t i = 0; i < cfg->n_sources; i++)
		if (strcmp(cfg->sources[i].name, name) == 0)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "checkpoint '%s' is defined twice (first at line %d)", name,
					   cfg->sources[i].line);
	if (cfg->n_sources == CONFIG_MAX_SOURCES)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "more than %d checkpoints", CONFIG_MAX_SOURCES);
	if (cfg->n_sources == ld->cap_sources) {
		size_t ncap = ld->cap_sources ? ld->cap_sources * 2 : 8;
		struct source_conf *ns = realloc(cfg->sources, ncap * sizeof(*ns));

		if (!ns)
			return config_fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED,
					   "out of memory");
		cfg->sources = ns;
		ld->cap_sources = ncap;
	}
	src = &cfg->sources[cfg->n_sources];
	memset(src, 0, sizeof(*src));
	src->name = strdup(name);
	if (!src->name)
		return config_fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	src->allow_any = true;
	src->line = ld->line;
	cfg->n_sources++;
	return 1;
}

/*
 * A section header line (starts with '['). Checked here rather than in the handler because inih
 * calls the handler only for keys: an empty or misspelt section would otherwise go unnoticed.
 */
void config_open_section(struct loader *ld, const char *text, size_t n)
{
	const char *close = memchr(text, ']', n);
	size_t len;

	config_close_section(ld);
	if (ld->err_line)
		return;
	ld->sect = SECT_NONE;
	if (!close) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "section header has no closing ']'");
		return;
	}
	for (const char *p = close + 1; p < text + n; p++) {
		if (*p == ';' || *p == '#')
			break;
		if (!isspace((unsigned char)*p)) {
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "unexpected text after the section header");
			return;
		}
	}
	len = (size_t)(close - text - 1);
	if (len > CONFIG_MAX_SECTION) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "section name is %zu bytes long, at most %d allowed", len,
			    CONFIG_MAX_SECTION);
		return;
	}
	memcpy(ld->sect_text, text + 1, len);
	ld->sect_text[len] = '\0';

	if (strcmp(ld->sect_text, "daemon") == 0) {
		if (ld->daemon_line) {
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "section [daemon] is given twice (first at line %d)",
				    ld->daemon_line);
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
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "unknown section [%s] (expected [daemon] or [checkpoint:NAME])", ld->sect_text);
	}
}

/* --- keys --------------------------------------------------------------------------------- */

static int key_index(const char *const *keys, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (strcmp(keys[i], key) == 0)
			return i;
	return -1;
}

int config_handler(void *user, const char *section, const char *key, const char *val)
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
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "key name missing before '='");
	if (ld->sect == SECT_NONE)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "key '%s' comes before any section ([daemon] or [checkpoint:NAME])", key);
	/* inih and config_open_section() read the same header and must agree (inih cuts long names). */
	if (strncmp(section, ld->sect_text, strlen(section)) != 0)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "cannot parse the section header [%s]", section);
	k = key_index(keys, n, key);
	if (k < 0)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "unknown key '%s' in [%s]", key, ld->sect_text);
	if (lines[k])
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "key '%s' is given twice in [%s] (first at line %d)", key,
				   ld->sect_text, lines[k]);
	lines[k] = ld->line;
	return ld->sect == SECT_DAEMON ? daemon_set(ld, k, key, val) : checkpoint_set(ld, k, key, val);
}
