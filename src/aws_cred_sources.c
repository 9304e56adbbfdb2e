/* SPDX-License-Identifier: Apache-2.0 */
/* aws_cred_sources.c - where AWS keys come from, in botocore's order: the environment, profiles
 * (role_arn, web identity, keys) in the shared files, STS, container credentials and IMDS. */
#include "aws_cred_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "remote.h"

#define TOKEN_FILE_MAX	  16384 /* a web identity or container authorization token */
#define PROFILE_ROWS_MAX  4096	/* key = value rows kept from the shared files */
#define PROFILE_DEPTH_MAX 4	/* source_profile links followed */
#define IMDS_TIMEOUT_MS	  1000u /* botocore's */
#define STS_ATTEMPTS	  2 /* an STS call tried again once after a 5xx or a broken connection */

void wd_aws_cred_found_clear(struct wd_aws_found *f)
{
	wd_aws_parse_wipe(&f->keys);
	for (int i = 0; i < WD_AWS_WATCH_MAX; i++) {
		free(f->watch[i]);
		f->watch[i] = NULL;
	}
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

struct body {
	char *buf;
	size_t len, cap;
	bool over;
};

static size_t on_body(char *d, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t k = size * n;

	if (b->len + k >= b->cap) {
		b->over = true;
		return 0;
	}
	memcpy(b->buf + b->len, d, k);
	b->len += k;
	b->buf[b->len] = '\0';
	return k;
}

struct call {
	const char *method; /* "GET", "PUT", "POST" */
	const char *url;
	struct curl_slist *headers;
	const char *body;  /* POST's form, or NULL */
	const char *sigv4; /* "aws:amz:REGION:sts" with user and pass, or NULL */
	const char *user, *pass;
	unsigned timeout_ms;
	const char *ca_file;
};

/*
 * One request; its answer's status and body (NUL-terminated, at most WD_AWS_BODY_MAX bytes) in
 * *status and out. 0 when an answer came (any status), else -1 with why (curl's reason).
 */
static int call(const struct call *q, long *status, char *out, size_t *len, char *why, size_t cap)
{
	struct body b = { out, 0, WD_AWS_BODY_MAX + 1, false };
	char errbuf[CURL_ERROR_SIZE] = "";
	CURL *h = curl_easy_init();
	CURLcode rc;

	out[0] = '\0';
	if (!h)
		return snprintf(why, cap, "out of memory"), -1;
	curl_easy_setopt(h, CURLOPT_URL, q->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)q->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)q->timeout_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "weightd");
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	if (q->headers)
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, q->headers);
	if (q->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, q->ca_file);
	if (strcmp(q->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body ? q->body : "");
	} else if (strcmp(q->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
	}
	if (q->sigv4) {
		curl_easy_setopt(h, CURLOPT_AWS_SIGV4, q->sigv4);
		curl_easy_setopt(h, CURLOPT_USERNAME, q->user);
		curl_easy_setopt(h, CURLOPT_PASSWORD, q->pass);
	}
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(h);
	*len = b.len;
	if (b.over)
		return snprintf(why, cap, "the answer is larger than %u bytes", WD_AWS_BODY_MAX),
		       -1;
	if (rc != CURLE_OK)
		return snprintf(why, cap, "%s%s%s", curl_easy_strerror(rc), errbuf[0] ? ": " : "",
				errbuf),
		       -1;
	return 0;
}

/* The URL as it may be shown: no query. */
static void url_shown(const char *url, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.*s", (int)strcspn(url, "?#"), url);
}

/* ---- token files --------------------------------------------------------------------------- */

/*
 * A token file (web identity, container authorization): Kubernetes projects these through
 * symlinks, with modes and groups of its own, and they are short-lived and audience-bound, so
 * symlinks are followed and no mode is required; what is checked is that it is a regular file,
 * readable, not empty, at most TOKEN_FILE_MAX bytes and fit for a header. *ret malloc'd.
 */
static int token_file(const char *what, const char *path, char **ret, weightd_error *err)
{
	char buf[TOKEN_FILE_MAX + 1];
	struct stat st;
	ssize_t n;
	size_t a = 0, b;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		int e = errno;
		if (stat(path, &st) == 0)
			return wd_error_set(
				err, WEIGHTD_E_PERMISSION_DENIED,
				"%s: token file %s unreadable: %s (mode %04o, owner uid %u gid %u; "
				"weightd runs as uid %u gid %u)",
				what, path, strerror(e), (unsigned)(st.st_mode & 07777),
				(unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)geteuid(),
				(unsigned)getegid());
		/* named but missing is a broken set-up, not a source that does not apply */
		return wd_error_set(
			err, e == ENOENT ? WEIGHTD_E_INVALID_ARGUMENT : WEIGHTD_E_PERMISSION_DENIED,
			"%s: token file %s unreadable: %s", what, path, strerror(e));
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: token file %s is not a regular file", what, path);
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return wd_error_set(err, WEIGHTD_E_IO, "%s: token file %s: %s", what, path,
				    strerror(errno));
	if ((size_t)n > TOKEN_FILE_MAX) {
		explicit_bzero(buf, sizeof(buf));
		return wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				    "%s: token file %s is larger than %d bytes", what, path,
				    TOKEN_FILE_MAX);
	}
	buf[n] = '\0';
	b = (size_t)n;
	while (a < b && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r' || buf[a] == '\n'))
		a++;
	while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\r' ||
			 buf[b - 1] == '\n'))
		b--;
	for (size_t i = a; i < b; i++) {
		if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f) {
			explicit_bzero(buf, sizeof(buf));
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: token file %s holds a character a request cannot "
					    "carry (a token is one line of text)",
					    what, path);
		}
	}
	if (a == b)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: token file %s is empty",
				    what, path);
	*ret = strndup(buf + a, b - a);
	explicit_bzero(buf, sizeof(buf));
	return *ret ? 0 : wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
}

static void free_secret(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

/* ---- STS ----------------------------------------------------------------------------------- */

/* STS's endpoint (AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, regional or global) and the region its
 * requests are signed for. */
static void sts_endpoint(const struct wd_aws_cred *c, char *url, size_t cap, char *region,
			 size_t rcap)
{
	const char *over =
		env("AWS_ENDPOINT_URL_STS") ? env("AWS_ENDPOINT_URL_STS") : env("AWS_ENDPOINT_URL");
	const char *reg = c->region && *c->region ? c->region :
			  env("AWS_REGION")	  ? env("AWS_REGION") :
						    env("AWS_DEFAULT_REGION");
	const char *mode = env("AWS_STS_REGIONAL_ENDPOINTS");

	snprintf(region, rcap, "%s", reg ? reg : "us-east-1");
	if (over)
		snprintf(url, cap, "%s", over);
	else if (reg && !(mode && strcmp(mode, "legacy") == 0))
		snprintf(url, cap, "https://sts.%s.amazonaws.com", reg);
	else
		snprintf(url, cap, "https://sts.amazonaws.com");
	while (strlen(url) > 8 && url[strlen(url) - 1] == '/')
		url[strlen(url) - 1] = '\0';
}

/* form += "&name=value" (value percent-encoded); false when out of room. */
static bool form_add(char *form, size_t cap, const char *name, const char *value)
{
	char *e = curl_easy_escape(NULL, value, 0);
	size_t at = strlen(form);
	int n;

	if (!e)
		return false;
	n = snprintf(form + at, cap - at, "%s%s=%s", at ? "&" : "", name, e);
	explicit_bzero(e, strlen(e));
	curl_free(e);
	return n >= 0 && (size_t)n < cap - at;
}

/*
 * One STS action (form already holding its parameters): POSTed, tried again once after a 5xx or
 * a broken connection, its answer parsed into ret. `what` names the source in errors.
 */
static int sts_call(const struct wd_aws_cred *c, const char *what, const char *form,
		    const struct wd_aws_parsed *signer, struct wd_aws_parsed *ret,
		    weightd_error *err)
{
	char url[1024], region[64], shown[1024], why[WD_AWS_REASON_MAX], sigv4[128];
	char *body = malloc(WD_AWS_BODY_MAX + 1);
	struct curl_slist *hs = NULL, *l;
	long status = 0;
	size_t len = 0;
	int rc = -1;

	if (!body)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	sts_endpoint(c, url, sizeof(url), region, sizeof(region));
	url_shown(url, shown, sizeof(shown));
	hs = curl_slist_append(NULL,
			       "Content-Type: application/x-www-form-urlencoded; charset=utf-8");
	if (hs && signer && signer->token[0]) {
		char h[WD_AWS_TOKEN_MAX + 32];
		snprintf(h, sizeof(h), "x-amz-security-token: %s", signer->token);
		l = curl_slist_append(hs, h);
		explicit_bzero(h, sizeof(h));
		hs = l;
	}
	if (!hs) {
		free(body);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:sts", region);
	for (int attempt = 0; attempt < STS_ATTEMPTS; attempt++) {
		struct call q = { .method = "POST",
				  .url = url,
				  .headers = hs,
				  .body = form,
				  .sigv4 = signer ? sigv4 : NULL,
				  .user = signer ? signer->access_key : NULL,
				  .pass = signer ? signer->secret_key : NULL,
				  .timeout_ms = c->timeout_ms,
				  .ca_file = c->ca_file };
		rc = call(&q, &status, body, &len, why, sizeof(why));
		if ((rc < 0 || status >= 500) && attempt + 1 < STS_ATTEMPTS)
			continue;
		break;
	}
	for (l = hs; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(hs);
	if (rc < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "%s: STS at %s did not answer: %s", what,
				  shown, why);
	} else {
		rc = wd_aws_parse_sts(body, len, ret, why, sizeof(why));
		if (rc == -WEIGHTD_E_PERMISSION_DENIED)
			rc = wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED, "%s: STS said %s", what,
					  why);
		else if (rc < 0 || status != 200)
			rc = wd_error_set(err, WEIGHTD_E_IO, "%s: STS at %s answered HTTP %ld: %s",
					  what, shown, status, rc < 0 ? why : "not a success");
	}
	explicit_bzero(body, len);
	free(body);
	if (rc < 0)
		wd_aws_parse_wipe(ret);
	return rc;
}

static void session_name(char *buf, size_t cap, const char *given)
{
	if (given)
		snprintf(buf, cap, "%s", given);
	else
		snprintf(buf, cap, "weightd-%lld", (long long)time(NULL));
}

static int web_identity(const struct wd_aws_cred *c, const char *role, const char *file,
			const char *name, struct wd_aws_found *ret, weightd_error *err)
{
	char form[TOKEN_FILE_MAX * 3 + 2048] = "", sess[128];
	char *token = NULL;
	int rc;

	rc = token_file("web identity", file, &token, err);
	if (rc < 0)
		return rc;
	session_name(sess, sizeof(sess), name);
	if (!form_add(form, sizeof(form), "Action", "AssumeRoleWithWebIdentity") ||
	    !form_add(form, sizeof(form), "Version", "2011-06-15") ||
	    !form_add(form, sizeof(form), "RoleArn", role) ||
	    !form_add(form, sizeof(form), "RoleSessionName", sess) ||
	    !form_add(form, sizeof(form), "WebIdentityToken", token)) {
		free_secret(token);
		explicit_bzero(form, sizeof(form));
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "web identity: the role or token is too long");
	}
	free_secret(token);
	rc = sts_call(c, "web identity", form, NULL, &ret->keys, err);
	explicit_bzero(form, sizeof(form));
	if (rc < 0)
		return rc;
	ret->kind = WD_AWS_K_WEB_IDENTITY;
	ret->source = "web identity";
	snprintf(ret->what, sizeof(ret->what), "web identity (%.100s)", role);
	return 0;
}

/* ---- the environment --------------------------------------------------------------------- */

static int from_env(struct wd_aws_found *ret)
{
	const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
	const char *token = env("AWS_SESSION_TOKEN");
	const char *exp = env("AWS_CREDENTIAL_EXPIRATION");

	if (!id || !secret)
		return -WEIGHTD_E_NOT_FOUND;
	snprintf(ret->keys.access_key, sizeof(ret->keys.access_key), "%s", id);
	snprintf(ret->keys.secret_key, sizeof(ret->keys.secret_key), "%s", secret);
	snprintf(ret->keys.token, sizeof(ret->keys.token), "%s", token ? token : "");
	ret->keys.expires = 0;
	if (exp)
		wd_aws_parse_time(exp, &ret->keys.expires);
	ret->kind = WD_AWS_K_ENV;
	ret->source = "environment";
	snprintf(ret->what, sizeof(ret->what), "environment");
	return 0;
}

/* ---- the shared files -------------------------------------------------------------------- */

enum pkey {
	P_ACCESS,
	P_SECRET,
	P_TOKEN,
	P_ROLE,
	P_SOURCE_PROFILE,
	P_WEB_TOKEN_FILE,
	P_SESSION_NAME,
	P_CREDENTIAL_SOURCE,
	P_N
};
static const char *const pkey_names[P_N] = {
	"aws_access_key_id", "aws_secret_access_key",	"aws_session_token", "role_arn",
	"source_profile",    "web_identity_token_file", "role_session_name", "credential_source",
};

struct prow {
	char *profile;
	enum pkey key;
	char *value;
	int file; /* 0: credentials file, 1: config file */
};

struct profiles {
	struct prow *rows;
	size_t n;
	int file;
	bool config; /* sections are "profile NAME" or "default" */
	bool oom, over;
	char paths[2][1024];
	bool group_readable[2]; /* the file others may read (keys from it are refused) */
};

static int on_row(void *arg, const char *section, const char *name, const char *value)
{
	struct profiles *p = arg;
	const char *prof = section;
	struct prow *nr;

	if (p->config) {
		if (strncmp(section, "profile ", 8) == 0)
			prof = section + 8;
		else if (strcmp(section, "default") != 0)
			return 1;
		while (*prof == ' ')
			prof++;
	}
	for (int k = 0; k < P_N; k++) {
		if (strcmp(name, pkey_names[k]) != 0)
			continue;
		if (p->n >= PROFILE_ROWS_MAX) {
			p->over = true;
			return 1;
		}
		nr = realloc(p->rows, (p->n + 1) * sizeof(*nr));
		if (!nr) {
			p->oom = true;
			return 1;
		}
		p->rows = nr;
		nr[p->n].profile = strdup(prof);
		nr[p->n].value = strdup(value);
		nr[p->n].key = (enum pkey)k;
		nr[p->n].file = p->file;
		if (!nr[p->n].profile || !nr[p->n].value) {
			free(nr[p->n].profile);
			free_secret(nr[p->n].value);
			p->oom = true;
			return 1;
		}
		p->n++;
	}
	return 1;
}

static void profiles_free(struct profiles *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->rows[i].profile);
		free_secret(p->rows[i].value);
	}
	free(p->rows);
	memset(p, 0, sizeof(*p));
}

/* The value of key in profile: the credentials file's first, as botocore merges them. */
static const char *pget(const struct profiles *p, const char *profile, enum pkey key, int *file)
{
	const char *v = NULL;
	int from = -1;

	for (size_t i = 0; i < p->n; i++) {
		const struct prow *r = &p->rows[i];
		if (r->key != key || strcmp(r->profile, profile) != 0)
			continue;
		if (v && from == 0 && r->file == 1)
			continue; /* the credentials file's value wins */
		v = r->value;
		from = r->file;
	}
	if (file)
		*file = from;
	return v;
}

/* The paths of the two files: the checkpoint's, the environment's, or ~/.aws/. */
static void file_paths(const struct wd_aws_cred *c, char creds[1024], char config[1024])
{
	const char *home = env("HOME");

	if (c->credentials_file)
		snprintf(creds, 1024, "%s", c->credentials_file);
	else if (env("AWS_SHARED_CREDENTIALS_FILE"))
		snprintf(creds, 1024, "%s", env("AWS_SHARED_CREDENTIALS_FILE"));
	else
		snprintf(creds, 1024, "%s/.aws/credentials", home ? home : "");
	if (c->config_file)
		snprintf(config, 1024, "%s", c->config_file);
	else if (env("AWS_CONFIG_FILE"))
		snprintf(config, 1024, "%s", env("AWS_CONFIG_FILE"));
	else
		snprintf(config, 1024, "%s/.aws/config", home ? home : "");
}

/*
 * Read both files (one that does not exist is empty). The credentials file under the secrets'
 * rule (remote.h); the config file as it is, noting whether others may read it.
 */
static int profiles_load(const struct wd_aws_cred *c, struct profiles *p, weightd_error *err)
{
	struct stat st;

	memset(p, 0, sizeof(*p));
	file_paths(c, p->paths[0], p->paths[1]);
	for (int i = 0; i < 2; i++) {
		FILE *f = NULL;
		int line, rc;

		if (!p->paths[i][0] || p->paths[i][0] != '/' ||
		    (stat(p->paths[i], &st) < 0 && errno == ENOENT &&
		     !(i == 0 && c->credentials_file)))
			continue;
		if (i == 0) {
			rc = wd_remote_secret_open(p->paths[i], "credentials file", &f, err);
			if (rc < 0) {
				profiles_free(p);
				return rc;
			}
		} else {
			int fd = open(p->paths[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
			if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
			    st.st_size > 65536 || !(f = fdopen(fd, "r"))) {
				if (fd >= 0)
					close(fd);
				profiles_free(p);
				return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
						    "config file %s: unreadable, not a regular "
						    "file or larger than 64 KiB",
						    p->paths[i]);
			}
			p->group_readable[i] = (st.st_mode & 077) != 0;
		}
		p->file = i;
		p->config = i == 1;
		line = ini_parse_file(f, on_row, p);
		fclose(f);
		if (p->oom) {
			profiles_free(p);
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
		if (line != 0 || p->over) {
			char path[1024];
			snprintf(path, sizeof(path), "%s", p->paths[i]);
			profiles_free(p);
			if (line != 0)
				return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
						    "%s %s:%d: not in the INI form",
						    i ? "config file" : "credentials file", path,
						    line);
			return wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED, "%s: more than %d rows",
					    path, PROFILE_ROWS_MAX);
		}
	}
	return 0;
}

static int container(const struct wd_aws_cred *c, struct wd_aws_found *ret, weightd_error *err);
static int imds(const struct wd_aws_cred *c, struct wd_aws_found *ret, weightd_error *err);

/*
 * The keys of `profile`: assume its role_arn from its source_profile or credential_source, or
 * by web identity, or take its static keys. NOT_FOUND when the profile has none of these.
 */
static int profile_keys(const struct wd_aws_cred *c, const struct profiles *p, const char *profile,
			int depth, struct wd_aws_found *ret, weightd_error *err)
{
	const char *role = pget(p, profile, P_ROLE, NULL);
	const char *src = pget(p, profile, P_SOURCE_PROFILE, NULL);
	const char *web = pget(p, profile, P_WEB_TOKEN_FILE, NULL);
	const char *csrc = pget(p, profile, P_CREDENTIAL_SOURCE, NULL);
	int from;

	if (depth > PROFILE_DEPTH_MAX)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "profile %s: source_profile links go deeper than %d (a loop?)",
				    profile, PROFILE_DEPTH_MAX);
	if (role && (src || csrc) && !(src && strcmp(src, profile) == 0 && depth > 0)) {
		struct wd_aws_found s = { 0 };
		char form[2048] = "", sess[128], what[160];
		int rc;

		snprintf(what, sizeof(what), "profile %s: assume role %.100s", profile, role);
		if (src && strcmp(src, profile) == 0) {
			rc = profile_keys(c, p, profile, depth + 1, &s, err);
		} else if (src) {
			rc = profile_keys(c, p, src, depth + 1, &s, err);
		} else if (strcmp(csrc, "Environment") == 0) {
			rc = from_env(&s);
			if (rc < 0)
				rc = wd_error_set(err, WEIGHTD_E_NOT_FOUND,
						  "no AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY");
		} else if (strcmp(csrc, "EcsContainer") == 0) {
			rc = container(c, &s, err);
		} else if (strcmp(csrc, "Ec2InstanceMetadata") == 0) {
			rc = imds(c, &s, err);
		} else {
			rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					  "credential_source %s is not Environment, EcsContainer "
					  "or Ec2InstanceMetadata",
					  csrc);
		}
		if (rc == -WEIGHTD_E_NOT_FOUND && src)
			rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					  "source_profile %s has no credentials", src);
		if (rc < 0) {
			wd_error_prefix(err, "%s", what);
			wd_aws_cred_found_clear(&s);
			return rc;
		}
		session_name(sess, sizeof(sess), pget(p, profile, P_SESSION_NAME, NULL));
		if (!form_add(form, sizeof(form), "Action", "AssumeRole") ||
		    !form_add(form, sizeof(form), "Version", "2011-06-15") ||
		    !form_add(form, sizeof(form), "RoleArn", role) ||
		    !form_add(form, sizeof(form), "RoleSessionName", sess)) {
			wd_aws_cred_found_clear(&s);
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: the role arn is too long", what);
		}
		rc = sts_call(c, what, form, &s.keys, &ret->keys, err);
		wd_aws_cred_found_clear(&s);
		if (rc < 0)
			return rc;
		ret->kind = WD_AWS_K_ASSUME_ROLE;
		ret->source = "assume role";
		snprintf(ret->what, sizeof(ret->what), "%.127s", what);
		return 0;
	}
	if (role && web) {
		int rc = web_identity(c, role, web, pget(p, profile, P_SESSION_NAME, NULL), ret,
				      err);
		if (rc < 0)
			wd_error_prefix(err, "profile %s", profile);
		else
			snprintf(ret->what, sizeof(ret->what),
				 "profile %.40s: web identity (%.70s)", profile, role);
		return rc;
	}
	{
		const char *id = pget(p, profile, P_ACCESS, &from);
		const char *secret = pget(p, profile, P_SECRET, NULL);
		const char *token = pget(p, profile, P_TOKEN, NULL);

		if (!id || !secret)
			return id || secret ?
				       wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
						    "profile [%s] lacks aws_access_key_id or "
						    "aws_secret_access_key",
						    profile) :
				       -WEIGHTD_E_NOT_FOUND;
		if (from == 1 && p->group_readable[1])
			return wd_error_set(
				err, WEIGHTD_E_PERMISSION_DENIED,
				"config file %s holds keys and others can read it: "
				"chmod 600 it, or move the keys to the credentials file",
				p->paths[1]);
		if (strlen(id) >= sizeof(ret->keys.access_key) ||
		    strlen(secret) >= sizeof(ret->keys.secret_key) ||
		    (token && strlen(token) >= sizeof(ret->keys.token)))
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "profile [%s]: a key or token is too long", profile);
		snprintf(ret->keys.access_key, sizeof(ret->keys.access_key), "%s", id);
		snprintf(ret->keys.secret_key, sizeof(ret->keys.secret_key), "%s", secret);
		snprintf(ret->keys.token, sizeof(ret->keys.token), "%s", token ? token : "");
		ret->keys.expires = 0;
		ret->kind = WD_AWS_K_PROFILE;
		ret->source = from == 0 ? "credentials file" : "config file";
		snprintf(ret->what, sizeof(ret->what), "%s %.80s [%.30s]", ret->source,
			 p->paths[from], profile);
		return 0;
	}
}

/* The profile from the shared files; with `keys_only`, static keys alone. */
static int from_files(const struct wd_aws_cred *c, int mode, struct wd_aws_found *ret,
		      weightd_error *err)
{
	const char *profile = c->profile	 ? c->profile :
			      env("AWS_PROFILE") ? env("AWS_PROFILE") :
						   "default";
	struct profiles p;
	int rc;

	rc = profiles_load(c, &p, err);
	if (rc < 0)
		return rc;
	/* mode 1: a role (assume role or web identity) only; 2: static keys only; 0: either */
	{
		bool role = pget(&p, profile, P_ROLE, NULL) != NULL;
		if ((mode == 1 && !role) || (mode == 2 && role))
			rc = -WEIGHTD_E_NOT_FOUND;
		else
			rc = profile_keys(c, &p, profile, 0, ret, err);
	}
	if (rc == 0) {
		for (int i = 0; i < 2 && i < WD_AWS_WATCH_MAX; i++)
			if (p.paths[i][0] == '/' && !(ret->watch[i] = strdup(p.paths[i])))
				rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
						  "out of memory");
	} else if (rc == -WEIGHTD_E_NOT_FOUND && c->credentials_file && mode != 1) {
		rc = wd_error_set(err, WEIGHTD_E_NOT_FOUND,
				  "credentials file %s: profile [%s] is not in it",
				  c->credentials_file, profile);
	}
	profiles_free(&p);
	return rc;
}

/* ---- container credentials --------------------------------------------------------------- */

/* May plain http reach this host? Loopback and the container agents' link-local addresses. */
static bool container_host_ok(const char *url)
{
	static const char *const ok[] = { "127.",	   "localhost",	     "[::1]",
					  "169.254.170.2", "169.254.170.23", "[fd00:ec2::23]" };
	const char *h;

	if (strncmp(url, "https://", 8) == 0)
		return true;
	if (strncmp(url, "http://", 7) != 0)
		return false;
	h = url + 7;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		size_t n = strlen(ok[i]);
		if (strncmp(h, ok[i], n) == 0 &&
		    (ok[i][n - 1] == '.' || h[n] == ':' || h[n] == '/' || h[n] == '\0'))
			return true;
	}
	return false;
}

static int container(const struct wd_aws_cred *c, struct wd_aws_found *ret, weightd_error *err)
{
	const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *tfile = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *tenv = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	char url[2048], shown[2048], why[WD_AWS_REASON_MAX];
	struct curl_slist *hs = NULL;
	char *token = NULL, *body;
	long status = 0;
	size_t len = 0;
	int rc;

	if (!full && !rel)
		return -WEIGHTD_E_NOT_FOUND;
	if (rel)
		snprintf(url, sizeof(url), "http://169.254.170.2%s%s", rel[0] == '/' ? "" : "/",
			 rel);
	else
		snprintf(url, sizeof(url), "%s", full);
	url_shown(url, shown, sizeof(shown));
	if (!container_host_ok(url))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "container credentials: %s is neither https nor a loopback or "
				    "container agent address",
				    shown);
	if (tfile) {
		rc = token_file("container credentials", tfile, &token, err);
		if (rc < 0)
			return rc;
	} else if (tenv) {
		token = strdup(tenv);
		if (!token)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		if (strcspn(token, "\r\n") != strlen(token)) {
			free_secret(token);
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "container credentials: "
					    "AWS_CONTAINER_AUTHORIZATION_TOKEN holds a line break");
		}
	}
	if (token) {
		size_t n = strlen(token) + 32;
		char *h = malloc(n);
		if (h) {
			snprintf(h, n, "Authorization: %s", token);
			hs = curl_slist_append(NULL, h);
			explicit_bzero(h, n);
			free(h);
		}
		free_secret(token);
		if (!hs)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	body = malloc(WD_AWS_BODY_MAX + 1);
	if (!body) {
		curl_slist_free_all(hs);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	rc = call(&(struct call){ .method = "GET",
				  .url = url,
				  .headers = hs,
				  .timeout_ms = c->timeout_ms,
				  .ca_file = c->ca_file },
		  &status, body, &len, why, sizeof(why));
	for (struct curl_slist *l = hs; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(hs);
	if (rc < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "container credentials: %s: %s", shown, why);
	} else {
		rc = wd_aws_parse_json(body, len, &ret->keys, why, sizeof(why));
		if (status != 200)
			rc = wd_error_set(err,
					  status == 401 || status == 403 ?
						  WEIGHTD_E_PERMISSION_DENIED :
						  WEIGHTD_E_IO,
					  "container credentials: %s answered HTTP %ld%s%s", shown,
					  status, why[0] ? ": " : "", why);
		else if (rc < 0)
			rc = wd_error_set(err, WEIGHTD_E_IO, "container credentials: %s: %s", shown,
					  why);
	}
	explicit_bzero(body, len);
	free(body);
	if (rc < 0)
		return rc;
	ret->kind = WD_AWS_K_CONTAINER;
	ret->source = "container";
	snprintf(ret->what, sizeof(ret->what), "container credentials (%.100s)", shown);
	return 0;
}

/* ---- EC2 instance metadata ----------------------------------------------------------------- */

static bool imds_disabled(void)
{
	const char *d = env("AWS_EC2_METADATA_DISABLED");

	return d && strcasecmp(d, "true") == 0;
}

static int imds(const struct wd_aws_cred *c, struct wd_aws_found *ret, weightd_error *err)
{
	const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *mode = env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
	char base[512], url[1024], why[WD_AWS_REASON_MAX], role[256], tokh[256] = "";
	struct curl_slist *hs = NULL, *put = NULL;
	unsigned tmo = c->timeout_ms < IMDS_TIMEOUT_MS ? c->timeout_ms : IMDS_TIMEOUT_MS;
	char *body = malloc(WD_AWS_BODY_MAX + 1);
	long status = 0;
	size_t len = 0;
	int rc;

	if (!body)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	if (ep)
		snprintf(base, sizeof(base), "%s", ep);
	else if (mode && strcasecmp(mode, "ipv6") == 0)
		snprintf(base, sizeof(base), "http://[fd00:ec2::254]");
	else
		snprintf(base, sizeof(base), "http://169.254.169.254");
	while (strlen(base) > 8 && base[strlen(base) - 1] == '/')
		base[strlen(base) - 1] = '\0';
	/* IMDSv2: a session token by PUT */
	put = curl_slist_append(NULL, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
	snprintf(url, sizeof(url), "%s/latest/api/token", base);
	rc = put ? call(
			   &(struct call){
				   .method = "PUT", .url = url, .headers = put, .timeout_ms = tmo },
			   &status, body, &len, why, sizeof(why)) :
		   -1;
	curl_slist_free_all(put);
	if (rc < 0) {
		rc = wd_error_set(err, WEIGHTD_E_NOT_FOUND, "IMDS at %s did not answer: %s", base,
				  why);
		goto out;
	}
	if (status == 200 && len > 0 && len < 200 && strcspn(body, "\r\n") == len) {
		snprintf(tokh, sizeof(tokh), "X-aws-ec2-metadata-token: %s", body);
		hs = curl_slist_append(NULL, tokh);
		explicit_bzero(tokh, sizeof(tokh));
		if (!hs) {
			rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
			goto out;
		}
	} else if (!c->imds_v1) {
		rc = wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				  "IMDS at %s refused a session token (PUT /latest/api/token: "
				  "HTTP %ld), and IMDSv1 is off (imds_v1 = yes allows it)",
				  base, status);
		goto out;
	}
	snprintf(url, sizeof(url), "%s/latest/meta-data/iam/security-credentials/", base);
	rc = call(&(struct call){ .method = "GET", .url = url, .headers = hs, .timeout_ms = tmo },
		  &status, body, &len, why, sizeof(why));
	if (rc < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "IMDS: %s: %s", url, why);
		goto out;
	}
	if (status == 404) {
		rc = wd_error_set(err, WEIGHTD_E_NOT_FOUND, "IMDS: no role attached (%s: HTTP 404)",
				  url);
		goto out;
	}
	len = strcspn(body, "\r\n");
	if (status != 200 || len == 0 || len >= sizeof(role)) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "IMDS: %s answered HTTP %ld%s", url, status,
				  status == 200 ? " without a role name" : "");
		goto out;
	}
	memcpy(role, body, len);
	role[len] = '\0';
	for (size_t i = 0; i < len; i++) {
		if (!((role[i] >= 'A' && role[i] <= 'Z') || (role[i] >= 'a' && role[i] <= 'z') ||
		      (role[i] >= '0' && role[i] <= '9') || strchr("+=,.@_-", role[i]))) {
			rc = wd_error_set(err, WEIGHTD_E_IO,
					  "IMDS: the role name has a character IAM does not allow");
			goto out;
		}
	}
	snprintf(url, sizeof(url), "%s/latest/meta-data/iam/security-credentials/%s", base, role);
	rc = call(&(struct call){ .method = "GET", .url = url, .headers = hs, .timeout_ms = tmo },
		  &status, body, &len, why, sizeof(why));
	if (rc < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "IMDS: %s: %s", url, why);
		goto out;
	}
	if (status != 200) {
		rc = wd_error_set(err, status == 404 ? WEIGHTD_E_NOT_FOUND : WEIGHTD_E_IO,
				  "IMDS: %s answered HTTP %ld", url, status);
		goto out;
	}
	rc = wd_aws_parse_json(body, len, &ret->keys, why, sizeof(why));
	if (rc < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "IMDS: role %s: %s", role, why);
		goto out;
	}
	ret->kind = WD_AWS_K_IMDS;
	ret->source = "instance metadata";
	snprintf(ret->what, sizeof(ret->what), "instance metadata (%s, role %.60s)",
		 hs ? "IMDSv2" : "IMDSv1", role);
out:
	for (struct curl_slist *l = hs; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(hs);
	explicit_bzero(body, WD_AWS_BODY_MAX + 1);
	free(body);
	return rc;
}

/* ---- the chain ------------------------------------------------------------------------------- */

static int web_identity_env(const struct wd_aws_cred *c, struct wd_aws_found *ret,
			    weightd_error *err)
{
	const char *role = env("AWS_ROLE_ARN"), *file = env("AWS_WEB_IDENTITY_TOKEN_FILE");

	if (!role || !file)
		return -WEIGHTD_E_NOT_FOUND;
	return web_identity(c, role, file, env("AWS_ROLE_SESSION_NAME"), ret, err);
}

int wd_aws_cred_resolve(const struct wd_aws_cred *c, enum wd_aws_kind kind,
			struct wd_aws_found *ret, weightd_error *err)
{
	enum wd_aws_source s = c->source;
	int rc = -WEIGHTD_E_NOT_FOUND;

	memset(ret, 0, sizeof(*ret));
	switch (kind) {
	case WD_AWS_K_ENV: rc = from_env(ret); break;
	case WD_AWS_K_WEB_IDENTITY:
		rc = web_identity_env(c, ret, err);
		if (rc == -WEIGHTD_E_NOT_FOUND)
			rc = from_files(c, 1, ret, err);
		break;
	case WD_AWS_K_ASSUME_ROLE:
	case WD_AWS_K_PROFILE: rc = from_files(c, 0, ret, err); break;
	case WD_AWS_K_CONTAINER: rc = container(c, ret, err); break;
	case WD_AWS_K_IMDS: rc = imds(c, ret, err); break;
	case WD_AWS_K_NONE:
		/* botocore's order: env, profile roles, web identity, profile keys, container,
		 * IMDS; each step only when nothing before it applied */
		if (s == WD_AWS_AUTO || s == WD_AWS_ENV) {
			rc = from_env(ret);
			if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_ENV)
				return wd_error_set(err, WEIGHTD_E_NOT_FOUND,
						    "environment: AWS_ACCESS_KEY_ID and "
						    "AWS_SECRET_ACCESS_KEY are not both set");
		}
		if (rc == -WEIGHTD_E_NOT_FOUND && (s == WD_AWS_AUTO || s == WD_AWS_FILE)) {
			rc = from_files(c, 1, ret, err);
			if (rc == -WEIGHTD_E_NOT_FOUND)
				wd_aws_cred_found_clear(ret);
		}
		if (rc == -WEIGHTD_E_NOT_FOUND && (s == WD_AWS_AUTO || s == WD_AWS_WEB_IDENTITY)) {
			rc = web_identity_env(c, ret, err);
			if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_WEB_IDENTITY)
				rc = from_files(c, 1, ret, err);
			if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_WEB_IDENTITY)
				return wd_error_set(
					err, WEIGHTD_E_NOT_FOUND,
					"web identity: AWS_ROLE_ARN and "
					"AWS_WEB_IDENTITY_TOKEN_FILE are not both set, "
					"and the profile has no web_identity_token_file");
		}
		if (rc == -WEIGHTD_E_NOT_FOUND && (s == WD_AWS_AUTO || s == WD_AWS_FILE)) {
			rc = from_files(c, 2, ret, err);
			if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_FILE && !err->message[0])
				wd_error_set(err, WEIGHTD_E_NOT_FOUND,
					     "file: the shared credentials and config files hold "
					     "no keys or role for the profile");
			if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_FILE)
				return rc;
		}
		if (rc == -WEIGHTD_E_NOT_FOUND && (s == WD_AWS_AUTO || s == WD_AWS_CONTAINER)) {
			rc = container(c, ret, err);
			if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_CONTAINER)
				return wd_error_set(err, WEIGHTD_E_NOT_FOUND,
						    "container credentials: neither "
						    "AWS_CONTAINER_CREDENTIALS_FULL_URI nor "
						    "_RELATIVE_URI is set");
		}
		if (rc == -WEIGHTD_E_NOT_FOUND && (s == WD_AWS_AUTO || s == WD_AWS_IMDS)) {
			if (imds_disabled()) {
				if (s == WD_AWS_IMDS)
					return wd_error_set(err, WEIGHTD_E_NOT_FOUND,
							    "IMDS: AWS_EC2_METADATA_DISABLED is "
							    "true");
			} else {
				rc = imds(c, ret, err);
				/* in the chain an instance without metadata is no error */
				if (rc == -WEIGHTD_E_NOT_FOUND && s == WD_AWS_AUTO)
					wd_error_clear(err);
			}
		}
		break;
	}
	if (rc < 0)
		wd_aws_cred_found_clear(ret);
	return rc;
}
