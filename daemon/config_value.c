/* SPDX-License-Identifier: Apache-2.0 */
/* config_value.c - the value parsers of weightd.conf: sizes, whole numbers, durations, booleans,
 * absolute paths, user and group lists; each error names the key and the text it was given. */
#include "config_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "checked.h"

/* Record the first error (later ones are dropped) and return 0, inih's "handler failed". */
int config_fail(struct loader *ld, int line, int code, const char *fmt, ...)
{
	struct config_error *e;
	va_list ap;

	if (ld->stop)
		return 0;
	if (!ld->errors) {
		ld->errors = calloc(CONFIG_MAX_ERRORS, sizeof(*ld->errors));
		if (!ld->errors) {
			ld->stop = true;
			return 0;
		}
	}
	e = &ld->errors[ld->n_errors++];
	e->line = line;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	/* out of memory leaves nothing to trust after it; past the cap a file is beyond fixing
	 * line by line */
	if (code == WEIGHTD_E_RESOURCE_EXHAUSTED || ld->n_errors == CONFIG_MAX_ERRORS)
		ld->stop = true;
	return 0;
}

/* Decimal digits only (no sign, no blanks); *end is set to the first non-digit. */
enum config_num config_parse_digits(const char *s, uint64_t *ret, const char **end)
{
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return CONFIG_NUM_GARBAGE;
	for (; isdigit((unsigned char)*p); p++)
		if (!wd_mul_u64(v, 10, &v) || !wd_add_u64(v, (uint64_t)(*p - '0'), &v))
			return CONFIG_NUM_OVERFLOW;
	*ret = v;
	*end = p;
	return CONFIG_NUM_OK;
}

static enum config_num parse_size(const char *s, uint64_t *ret)
{
	static const char units[] = "KMGTP";
	const char *end = NULL, *u;
	uint64_t v = 0;
	enum config_num st;

	if (!s)
		return CONFIG_NUM_GARBAGE;
	st = config_parse_digits(s, &v, &end);
	if (st != CONFIG_NUM_OK)
		return st;
	if (*end) {
		if (end[1] || !(u = strchr(units, toupper((unsigned char)*end))))
			return CONFIG_NUM_GARBAGE;
		for (long i = 0; i <= u - units; i++)
			if (!wd_mul_u64(v, 1024, &v))
				return CONFIG_NUM_OVERFLOW;
	}
	*ret = v;
	return CONFIG_NUM_OK;
}

bool config_parse_size(const char *s, uint64_t *ret)
{
	uint64_t v;

	if (parse_size(s, &v) != CONFIG_NUM_OK)
		return false;
	*ret = v;
	return true;
}

int config_set_size(struct loader *ld, const char *key, const char *val, uint64_t min, uint64_t max,
		    uint64_t *ret)
{
	uint64_t v = 0;

	switch (parse_size(val, &v)) {
	case CONFIG_NUM_GARBAGE:
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' is not a size (bytes, or a number followed by K, M, G, T or P)",
				   key, val);
	case CONFIG_NUM_OVERFLOW:
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' does not fit in 64 bits", key, val);
	case CONFIG_NUM_OK:
		break;
	}
	if (v < min && max == UINT64_MAX)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: %s is too small (at least %llu bytes)", key, val,
				   (unsigned long long)min);
	if (v < min || v > max)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: %s is out of range (%llu to %llu bytes)", key, val,
				   (unsigned long long)min, (unsigned long long)max);
	*ret = v;
	return 1;
}

int config_set_u32(struct loader *ld, const char *key, const char *val, uint32_t min, uint32_t max,
		   uint32_t *ret)
{
	const char *end = NULL;
	uint64_t v = 0;
	enum config_num st = config_parse_digits(val, &v, &end);

	if (st == CONFIG_NUM_OK && *end)
		st = CONFIG_NUM_GARBAGE;
	if (st == CONFIG_NUM_GARBAGE)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' is not a whole number", key, val);
	if (st == CONFIG_NUM_OVERFLOW || v < min || v > max)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: %s is out of range (%u to %u)", key, val, min, max);
	*ret = (uint32_t)v;
	return 1;
}

/* A duration: a whole number of seconds, or one followed by "ms", "s", "m" or "h", at most max_ms
 * (a whole number of days). 0 = off. */
int config_set_duration_ms(struct loader *ld, const char *key, const char *val, uint64_t max_ms,
			   uint64_t *ret)
{
	const char *end = NULL;
	uint64_t v = 0, mul = 1000;
	enum config_num st = config_parse_digits(val, &v, &end);

	if (st == CONFIG_NUM_OK) {
		if (strcmp(end, "ms") == 0)
			mul = 1;
		else if (strcmp(end, "s") == 0 || !*end)
			mul = 1000;
		else if (strcmp(end, "m") == 0)
			mul = 60000;
		else if (strcmp(end, "h") == 0)
			mul = 3600000;
		else
			st = CONFIG_NUM_GARBAGE;
	}
	if (st == CONFIG_NUM_GARBAGE)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' is not a duration (seconds, or a number followed by ms, s, m or h)",
				   key, val);
	if (st == CONFIG_NUM_OVERFLOW || v > UINT64_MAX / mul || v * mul > max_ms)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: %s is longer than %llu days", key, val,
				   (unsigned long long)(max_ms / (24 * 3600000)));
	*ret = v * mul;
	return 1;
}

int config_set_bool(struct loader *ld, const char *key, const char *val, bool *ret)
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
	return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			   "%s: '%s' is not a boolean (yes/no, true/false, on/off, 1/0)", key, val);
}

/* Replace *slot by a copy of val. */
int config_set_string(struct loader *ld, char **slot, const char *val)
{
	char *s = strdup(val);

	if (!s)
		return config_fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	free(*slot);
	*slot = s;
	return 1;
}

int config_set_abs_path(struct loader *ld, const char *key, const char *val, size_t max,
			char **slot)
{
	if (val[0] != '/')
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: '%s' is not an absolute path", key, val);
	if (strlen(val) > max)
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: path is %zu bytes long, at most %zu allowed", key,
				   strlen(val), max);
	return config_set_string(ld, slot, val);
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
int config_resolve_id(struct loader *ld, const char *key, const char *name, bool is_group,
		      uint32_t *ret)
{
	const char *what = is_group ? "group" : "user";
	const char *end = NULL;
	size_t size = pw_bufsize(is_group ? _SC_GETGR_R_SIZE_MAX : _SC_GETPW_R_SIZE_MAX);
	char *buf = NULL;
	uint64_t v = 0;
	int rc, ok = 0;

	switch (config_parse_digits(name, &v, &end)) {
	case CONFIG_NUM_OK:
		if (*end)
			break;
		/* (uid_t)-1 and (gid_t)-1 mean "no id" to chown and friends. */
		if (v >= UINT32_MAX)
			return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
					   "%s: %s id %s is out of range", key, what, name);
		*ret = (uint32_t)v;
		return 1;
	case CONFIG_NUM_OVERFLOW:
		return config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				   "%s: %s id %s is out of range", key, what, name);
	case CONFIG_NUM_GARBAGE:
		break;
	}

	for (;;) {
		struct passwd pw, *pwp = NULL;
		struct group gr, *grp = NULL;
		char *nb = realloc(buf, size);

		if (!nb) {
			config_fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
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
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "%s: unknown %s '%s'",
				    key, what, name);
		else
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: cannot look up %s '%s': %s", key, what, name,
				    strerror(rc));
		goto out;
	}
out:
	free(buf);
	return ok;
}

/* Split a comma/blank separated list of users or groups and resolve each into a new array. */
int config_set_id_list(struct loader *ld, const char *key, const char *val, bool is_group,
		       uint32_t **ret_ids, size_t *ret_n)
{
	uint32_t *ids = NULL;
	size_t n = 0, cap = 0;
	char *copy = strdup(val), *save = NULL, *tok;
	int ok = 0;

	if (!copy) {
		config_fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		uint32_t id = 0;

		if (n == CONFIG_MAX_LIST) {
			config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: more than %d entries", key, CONFIG_MAX_LIST);
			goto out;
		}
		if (!config_resolve_id(ld, key, tok, is_group, &id))
			goto out;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			uint32_t *nids = realloc(ids, ncap * sizeof(*ids));

			if (!nids) {
				config_fail(ld, ld->line, WEIGHTD_E_RESOURCE_EXHAUSTED,
					    "out of memory");
				goto out;
			}
			ids = nids;
			cap = ncap;
		}
		ids[n++] = id;
	}
	if (n == 0) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
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
bool config_name_ok(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.' && *s != '-')
			return false;
	return true;
}

#define NOT_LOOPBACK                                                                              \
	"only a loopback address (127.0.0.0/8, [::1], localhost) may serve metrics unless "         \
	"metrics_public = yes: the endpoint has no authentication (scrape it from this host, put a " \
	"proxy with access control in front, or opt in and restrict who reaches the port)"

int config_parse_listen(const char *val, bool any, struct sockaddr_storage *ret_ss,
			socklen_t *ret_len, const char **ret_why)
{
	struct sockaddr_storage ss;
	char host[64];
	const char *colon, *h = val;
	size_t hn;
	char *end;
	unsigned long port;

	memset(&ss, 0, sizeof(ss));
	if (val[0] == '[') {
		const char *rb = strchr(val, ']');

		if (!rb || rb[1] != ':') {
			*ret_why = "an IPv6 address is written [::1]:PORT";
			return -1;
		}
		h = val + 1;
		hn = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(val, ':');
		if (!colon || strchr(val, ':') != colon) {
			*ret_why = "not HOST:PORT (e.g. 127.0.0.1:9464; [::1]:9464 for IPv6)";
			return -1;
		}
		hn = (size_t)(colon - val);
	}
	if (hn == 0 || hn >= sizeof(host)) {
		*ret_why = "not HOST:PORT (e.g. 127.0.0.1:9464; [::1]:9464 for IPv6)";
		return -1;
	}
	memcpy(host, h, hn);
	host[hn] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || port == 0 || port > 65535 || colon[1] == '-' ||
	    colon[1] == '+') {
		*ret_why = "the port is not a number from 1 to 65535";
		return -1;
	}
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	if (val[0] != '[') {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1) {
			*ret_why = "the host is not an IPv4 address, [IPv6] or localhost";
			return -1;
		}
		if (!any && (ntohl(sin->sin_addr.s_addr) >> 24) != 127) {
			*ret_why = NOT_LOOPBACK;
			return -1;
		}
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*ret_len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1) {
			*ret_why = "the host is not an IPv4 address, [IPv6] or localhost";
			return -1;
		}
		if (!any && !IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) {
			*ret_why = NOT_LOOPBACK;
			return -1;
		}
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*ret_len = sizeof(*sin6);
	}
	*ret_ss = ss;
	return 0;
}
