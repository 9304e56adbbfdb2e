/* SPDX-License-Identifier: Apache-2.0 */
/* config_section.c - the sections of weightd.conf: headers ([daemon], [checkpoint:NAME]), the
 * keys each admits (config_keys[]), and a row's value parsed into the field it names. */
#include "config_int.h"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "aws_cred.h"
#include "azure.h"
#include "digest.h"
#include "log.h"
#include "source.h"

/* --- values ------------------------------------------------------------------------------- */

/* Bytes a URL in the file may not hold: blanks and control characters. */
static bool url_chars_ok(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= ' ' || *s == 0x7f)
			return false;
	return true;
}

/*
 * A checkpoint's path: an absolute path, or a remote location. A URL's query may be a signature
 * (a presigned URL, an Azure SAS): errors show the URL without it.
 */
static int set_location(struct loader *ld, const struct config_key *k, const char *val, char **slot)
{
	char shown[600];
	const char *host;

	if (!wd_source_is_url(val))
		return config_set_abs_path(ld, k->name, val, k->max, slot);
	wd_source_show_path(val, shown, sizeof(shown));
	if (strlen(val) > k->max)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: the URL is %zu bytes long, at most %llu allowed", k->name,
				   strlen(val), (unsigned long long)k->max);
	if (!url_chars_ok(val))
		return config_fail(
			ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			"%s: %s holds a blank or a control character (write it %%-encoded)",
			k->name, shown);
	host = strstr(val, "://") + 3;
	if (strcspn(host, "/?#") == 0)
		return config_fail(
			ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: %s names no %s", k->name,
			shown, strncmp(val, "s3://", 5) == 0 ? "bucket (s3://BUCKET/KEY)" : "host");
	if (strncmp(val, "s3://", 5) == 0 && strcspn(host, "?#") != strlen(host))
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: an s3:// path takes no query or fragment", k->name);
	if (strncmp(val, "s3://", 5) == 0 &&
	    (!host[strcspn(host, "/")] || !host[strcspn(host, "/") + 1]))
		return config_fail(
			ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			"%s: %s names a bucket but no object or prefix (s3://BUCKET/KEY or "
			"s3://BUCKET/PREFIX/)",
			k->name, shown);
	return config_set_string(ld, slot, val);
}

/* A server's URL: http:// or https://, a host, an optional port, nothing after but "/". */
static int set_url(struct loader *ld, const struct config_key *k, const char *val, char **slot)
{
	const char *host = strstr(val, "://");
	size_t hl;

	if (strlen(val) > k->max)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: the URL is %zu bytes long, at most %llu allowed", k->name,
				   strlen(val), (unsigned long long)k->max);
	if (!host || (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0))
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' is not an http:// or https:// URL", k->name, val);
	host += 3;
	hl = strcspn(host, "/?#@");
	if (hl == 0 || !url_chars_ok(val) || (host[hl] && strcmp(host + hl, "/") != 0))
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' is not scheme://HOST[:PORT] (no path, user or query)",
				   k->name, val);
	return config_set_string(ld, slot, val);
}

/* Store v in a field of k->width bytes (the row's bounds keep it in range). */
static void put_uint(const struct config_key *k, void *base, uint64_t v)
{
	char *p = (char *)base + k->field;
	uint32_t u32 = (uint32_t)v;

	if (k->width == sizeof(u32))
		memcpy(p, &u32, sizeof(u32));
	else
		memcpy(p, &v, sizeof(v));
}

int config_key_set(struct loader *ld, const struct config_key *k, void *base, const char *val)
{
	void *field = (char *)base + k->field;
	const char *key = k->name;
	uint64_t u64 = 0;
	uint32_t u32 = 0;

	switch (k->type) {
	case CONFIG_T_PATH:
		if (!val[0] && (k->flags & CONFIG_EMPTY_OK))
			return config_set_string(ld, field, "");
		return config_set_abs_path(ld, key, val, k->max, field);
	case CONFIG_T_LOCATION: return set_location(ld, k, val, field);
	case CONFIG_T_URL: return set_url(ld, k, val, field);
	case CONFIG_T_NAME:
		if (!val[0] || strlen(val) > k->max || val[0] == '.' || val[0] == '-' ||
		    !config_name_ok(val))
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is invalid (1 to %d of A-Z a-z 0-9 _ . -, not starting "
					   "with . or -)", key, val, (int)k->max);
		return config_set_string(ld, field, val);
	case CONFIG_T_MODE: {
		unsigned long mode = 0;
		const char *p = val;

		for (; *p >= '0' && *p <= '7' && mode <= 07777; p++)
			mode = mode * 8 + (unsigned long)(*p - '0');
		if (p == val || *p || mode > k->max)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is not an octal mode between %04llo and %04llo", key,
					   val, (unsigned long long)k->min, (unsigned long long)k->max);
		*(mode_t *)field = (mode_t)mode;
		return 1;
	}
	case CONFIG_T_GROUP:
		if (!val[0] && (k->flags & CONFIG_EMPTY_OK)) {
			*(gid_t *)field = (gid_t)-1; /* keep the group it is created with */
			return 1;
		}
		if (!config_resolve_id(ld, key, val, true, &u32))
			return 0;
		*(gid_t *)field = (gid_t)u32;
		return 1;
	case CONFIG_T_BOOL:
		return config_set_bool(ld, key, val, field);
	case CONFIG_T_DIGEST:
		if (wd_digest_from_name(val) == WD_DIGEST_NONE)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is not a digest algorithm (xxh3-128 or sha256)", key, val);
		*(enum wd_digest_alg *)field = wd_digest_from_name(val);
		return 1;
	case CONFIG_T_LOG_LEVEL: {
		int level = log_level_parse(val);

		if (level < 0)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: '%s' is not a level (error, warning, notice, info, debug)",
					   key, val);
		*(int *)field = level;
		return 1;
	}
	case CONFIG_T_SIZE:
		if (!config_set_size(ld, key, val, k->min, k->max, &u64))
			return 0;
		put_uint(k, base, u64);
		return 1;
	case CONFIG_T_COUNT:
		if (!config_set_u32(ld, key, val, (uint32_t)k->min, (uint32_t)k->max, &u32))
			return 0;
		put_uint(k, base, u32);
		return 1;
	case CONFIG_T_DURATION:
		if (!config_set_duration_ms(ld, key, val, k->max, &u64))
			return 0;
		put_uint(k, base, u64);
		return 1;
	case CONFIG_T_LISTEN: {
		struct sockaddr_storage ss;
		socklen_t len;
		const char *why;

		/* the address's syntax here; loopback or metrics_public once the file is read */
		if (val[0] && config_parse_listen(val, true, &ss, &len, &why) < 0)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: '%s': %s",
					   key, val, why);
		return config_set_string(ld, field, val);
	}
	case CONFIG_T_USERS:
	case CONFIG_T_GROUPS:
		if (!val[0] && (k->flags & CONFIG_EMPTY_OK)) { /* an empty list: nobody */
			free(*(uint32_t **)field);
			*(uint32_t **)field = NULL;
			*(size_t *)((char *)base + k->count) = 0;
			return 1;
		}
		return config_set_id_list(ld, key, val, k->type == CONFIG_T_GROUPS, field,
					  (size_t *)((char *)base + k->count));
	}
	return config_fail(ld, ld->line, WEIGHTD_E_INTERNAL, "%s: no parser for this key", key);
}

int config_set_defaults(struct loader *ld, enum config_section section, void *base)
{
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];

		if (k->section != section)
			continue;
		if (k->type == CONFIG_T_LOG_LEVEL)
			*(int *)((char *)base + k->field) = -1; /* not named: --log-level or info */
		else if (k->def && !config_key_set(ld, k, base, k->def))
			return 0;
	}
	return 1;
}

int config_key_line(const struct loader *ld, enum config_section section, size_t field)
{
	for (size_t i = 0; i < config_n_keys; i++)
		if (config_keys[i].section == section && config_keys[i].field == field)
			return ld->key_line[i];
	return 0;
}

_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t),
	       "allow lists are resolved as 32-bit ids");

/* Which location kinds a key applies to. */
#define FOR_LOCAL 1u
#define FOR_S3	  2u
#define FOR_HTTP  4u /* https:// and http:// */
#define FOR_AZ	  8u /* az:// and https://ACCOUNT.blob.core.windows.net */

static const struct {
	size_t field;
	unsigned kinds;
	const char *says;
	const char *hint; /* after the path's kind when it is an Azure blob URL, or NULL */
} location_keys[] = {
	{ offsetof(struct source_conf, endpoint), FOR_S3 | FOR_AZ, "s3:// and az:// paths", NULL },
	{ offsetof(struct source_conf, azure_credentials), FOR_AZ, "az:// paths", NULL },
	{ offsetof(struct source_conf, azure_key_file), FOR_AZ, "az:// paths", NULL },
	{ offsetof(struct source_conf, region), FOR_S3, "s3:// paths", NULL },
	{ offsetof(struct source_conf, path_style), FOR_S3, "s3:// paths", NULL },
	{ offsetof(struct source_conf, credentials_file), FOR_S3, "s3:// paths", NULL },
	{ offsetof(struct source_conf, profile), FOR_S3, "s3:// paths", NULL },
	{ offsetof(struct source_conf, credentials), FOR_S3, "s3:// paths",
	  " (an Azure checkpoint picks its source with azure_credentials)" },
	{ offsetof(struct source_conf, imds_v1), FOR_S3, "s3:// paths", NULL },
	{ offsetof(struct source_conf, token_file), FOR_HTTP, "https:// and http:// paths", NULL },
	{ offsetof(struct source_conf, ca_file), FOR_S3 | FOR_HTTP | FOR_AZ, "remote paths", NULL },
	{ offsetof(struct source_conf, allow_http), FOR_S3 | FOR_HTTP | FOR_AZ, "remote paths", NULL },
	{ offsetof(struct source_conf, watch), FOR_LOCAL,
	  "local paths (a remote checkpoint is reloaded by `weightctl reload`, which compares "
	  "ETags)", NULL },
	{ offsetof(struct source_conf, watch_delay_ms), FOR_LOCAL, "local paths", NULL },
};

/*
 * The keys of a checkpoint section must fit its path's kind: each one set for another kind is an
 * error at its line. Plain http:// (the path, or an s3 endpoint) needs allow_http; a profile
 * needs the credentials file it is a profile of. Nothing here touches the network or the files.
 */
static void check_location_keys(struct loader *ld, const struct source_conf *src)
{
	const char *p = src->path;
	unsigned kind = strncmp(p, "s3://", 5) == 0 ? FOR_S3 :
			wd_azure_is_url(p)	    ? FOR_AZ :
			wd_source_is_url(p)	    ? FOR_HTTP :
						      FOR_LOCAL;
	int line, cred;

	for (size_t i = 0; i < sizeof(location_keys) / sizeof(location_keys[0]); i++) {
		line = config_key_line(ld, CONFIG_CHECKPOINT, location_keys[i].field);
		if (line && !(location_keys[i].kinds & kind)) {
			const char *name = "?";

			for (size_t k = 0; k < config_n_keys; k++)
				if (config_keys[k].section == CONFIG_CHECKPOINT &&
				    config_keys[k].field == location_keys[i].field)
					name = config_keys[k].name;
			config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
				    "[checkpoint:%s] %s applies to %s only; this path is %s%s",
				    src->name, name, location_keys[i].says,
				    kind == FOR_S3   ? "an s3:// URL" :
				    kind == FOR_AZ   ? "an Azure blob URL" :
				    kind == FOR_HTTP ? "an http(s):// URL" :
						       "a local path",
				    kind == FOR_AZ && location_keys[i].hint ? location_keys[i].hint : "");
		}
	}
	line = config_key_line(ld, CONFIG_CHECKPOINT, offsetof(struct source_conf, path));
	if (strncmp(p, "http://", 7) == 0 && !src->allow_http)
		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "[checkpoint:%s] path is plain http://: set allow_http = yes in this "
			    "section to allow it (or use https://)",
			    src->name);
	line = config_key_line(ld, CONFIG_CHECKPOINT, offsetof(struct source_conf, endpoint));
	if ((kind == FOR_S3 || kind == FOR_AZ) && src->endpoint &&
	    strncmp(src->endpoint, "http://", 7) == 0 && !src->allow_http)
		config_fail(
			ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			"[checkpoint:%s] endpoint is plain http://: set allow_http = yes in this "
			"section to allow it (or use https://)",
			src->name);
	line = config_key_line(ld, CONFIG_CHECKPOINT, offsetof(struct source_conf, credentials));
	cred = src->credentials ? wd_aws_cred_source_parse(src->credentials) : WD_AWS_AUTO;
	if (kind == FOR_S3 && cred < 0)
		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "[checkpoint:%s] credentials is %s: auto, env, web-identity, "
			    "container, imds or file",
			    src->name, src->credentials);
	if (kind == FOR_S3 && src->credentials_file && cred != WD_AWS_AUTO && cred != WD_AWS_FILE)
		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "[checkpoint:%s] credentials_file is read by credentials = file (or "
			    "auto), not %s",
			    src->name, src->credentials);
	line = config_key_line(ld, CONFIG_CHECKPOINT,
			       offsetof(struct source_conf, azure_credentials));
	if (kind == FOR_AZ && src->azure_credentials &&
	    wd_azure_source_parse(src->azure_credentials) < 0)
		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "[checkpoint:%s] azure_credentials is auto, sas, shared-key, "
			    "workload-identity, client-secret, managed-identity or anonymous",
			    src->name);
	line = config_key_line(ld, CONFIG_CHECKPOINT, offsetof(struct source_conf, profile));
	if (kind == FOR_S3 && line &&
	    (cred == WD_AWS_ENV || cred == WD_AWS_CONTAINER || cred == WD_AWS_IMDS))
		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "[checkpoint:%s] profile names a profile of the shared files, which "
			    "credentials = %s does not read",
			    src->name, src->credentials);
}

/* The checkpoint section that just ended must have set its required keys; with neither allow
 * list, any peer of the socket may use it. */
void config_close_section(struct loader *ld)
{
	struct source_conf *src;

	if (ld->sect != CONFIG_CHECKPOINT)
		return;
	src = &ld->cfg->sources[ld->cfg->n_sources - 1];
	/* a required key may be on a line in error: "no path" would then be wrong */
	for (size_t i = 0; ld->n_errors == ld->sect_errors && i < config_n_keys; i++)
		if (config_keys[i].section == CONFIG_CHECKPOINT &&
		    (config_keys[i].flags & CONFIG_REQUIRED) && !ld->key_line[i])
			config_fail(ld, src->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "[checkpoint:%s] has no %s", src->name, config_keys[i].name);
	src->allow_any = !config_key_line(ld, CONFIG_CHECKPOINT, offsetof(struct source_conf, allow_uids)) &&
			 !config_key_line(ld, CONFIG_CHECKPOINT, offsetof(struct source_conf, allow_gids));
	if (ld->n_errors == ld->sect_errors && src->path)
		check_location_keys(ld, src);
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
	return config_set_defaults(ld, CONFIG_CHECKPOINT, src);
}

/*
 * A section header line (starts with '['). Checked here rather than in the handler because inih
 * calls the handler only for keys: an empty or misspelt section would otherwise go unnoticed.
 */
bool config_open_section(struct loader *ld, const char *text, size_t n)
{
	const char *close = memchr(text, ']', n);
	size_t len;

	config_close_section(ld);
	ld->sect = CONFIG_NONE;
	/* until this header is known good, keys below it belong to no section that exists */
	ld->skip_keys = true;
	if (!close) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "section header has no closing ']'");
		return false;
	}
	for (const char *p = close + 1; p < text + n; p++) {
		if (*p == ';' || *p == '#')
			break;
		if (!isspace((unsigned char)*p)) {
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "unexpected text after the section header");
			return false;
		}
	}
	len = (size_t)(close - text - 1);
	if (len > CONFIG_MAX_SECTION) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "section name is %zu bytes long, at most %d allowed", len,
			    CONFIG_MAX_SECTION);
		return false;
	}
	memcpy(ld->sect_text, text + 1, len);
	ld->sect_text[len] = '\0';

	if (strcmp(ld->sect_text, "daemon") == 0) {
		if (ld->daemon_line) {
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "section [daemon] is given twice (first at line %d)",
				    ld->daemon_line);
			return false;
		}
		ld->daemon_line = ld->line;
		ld->sect = CONFIG_DAEMON;
		ld->skip_keys = false;
	} else if (strncmp(ld->sect_text, "checkpoint:", 11) == 0) {
		if (!open_checkpoint(ld, ld->sect_text + 11))
			return false;
		for (size_t i = 0; i < config_n_keys; i++)
			if (config_keys[i].section == CONFIG_CHECKPOINT)
				ld->key_line[i] = 0;
		ld->sect = CONFIG_CHECKPOINT;
		ld->skip_keys = false;
		ld->sect_errors = ld->n_errors;
	} else {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "unknown section [%s] (expected [daemon] or [checkpoint:NAME])", ld->sect_text);
		return false;
	}
	return true;
}

/* --- keys --------------------------------------------------------------------------------- */

static int handle_key(struct loader *ld, const char *section, const char *key, const char *val)
{
	const struct config_key *k;
	void *base;
	int *line;

	if (ld->long_line == ld->line)
		val = ld->long_val;
	if (!key[0])
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "key name missing before '='");
	if (ld->sect == CONFIG_NONE)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "key '%s' comes before any section ([daemon] or [checkpoint:NAME])", key);
	/* inih and config_open_section() read the same header and must agree (inih cuts long names). */
	if (strncmp(section, ld->sect_text, strlen(section)) != 0)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "cannot parse the section header [%s]", section);
	k = config_key_find(ld->sect, key);
	if (!k)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "unknown key '%s' in [%s]", key, ld->sect_text);
	line = &ld->key_line[k - config_keys];
	if (*line)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "key '%s' is given twice in [%s] (first at line %d)", key,
				   ld->sect_text, *line);
	*line = ld->line;
	if (ld->sect == CONFIG_DAEMON)
		base = ld->cfg;
	else
		base = &ld->cfg->sources[ld->cfg->n_sources - 1];
	return config_key_set(ld, k, base, val);
}

int config_handler(void *user, const char *section, const char *key, const char *val)
{
	struct loader *ld = user;

	if (!ld->stop && !ld->skip_keys)
		handle_key(ld, section, key, val);
	/* errors are recorded here, never handed to inih, which would keep only the first */
	return 1;
}
