/* SPDX-License-Identifier: Apache-2.0 */
/* remote.c - ranged reads of S3 and HTTP(S) objects with libcurl: URLs, pins, retries, errors. */
#include "remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "aws_cred.h"
#include "azure.h"
#include "clock.h"
#include "error.h"
#include "wd_strdup.h"

enum kind { KIND_S3, KIND_HTTP };

struct wd_remote {
	enum kind kind;
	bool dir;
	char *base; /* s3: the request URL's prefix up to the key; http: the URL before any query */
	char *key;  /* s3: the key or prefix, unencoded; http: unused */
	char *query; /* http: "?..." kept after every member, or "" */
	char shown[WD_REMOTE_SHOWN_MAX];
	char *sigv4; /* "aws:amz:<region>:s3", or NULL: unsigned */
	char *access_key, *secret_key;
	struct wd_aws_cred *cred; /* keys per request (instead of access_key/secret_key), or NULL */
	struct curl_slist *fixed; /* headers every request carries (token, content hash) */
	struct wd_azure *azure;	  /* Azure Blob: signs each request (azure.c), or NULL */
	char *ca_file;
	const char *protocols;
	long connect_timeout_ms, low_speed_time, low_speed_bytes;
	unsigned retries, backoff_ms, backoff_max_ms;
	CURLSH *share;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
	_Atomic uint64_t bytes, requests, nretries, errors, ranges, gap_bytes;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The node's transfer slots (wd_remote_set_limit) and the stop flag (wd_remote_stop). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	unsigned limit, in_use, peak, waiting;
} slots = {
	PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, WD_REMOTE_CONCURRENCY_DEFAULT, 0, 0, 0
};
static volatile sig_atomic_t stopping;

void wd_remote_set_limit(unsigned transfers)
{
	pthread_mutex_lock(&slots.lock);
	slots.limit = transfers ? transfers : WD_REMOTE_CONCURRENCY_DEFAULT;
	pthread_cond_broadcast(&slots.freed);
	pthread_mutex_unlock(&slots.lock);
}

void wd_remote_slots(unsigned *ret_in_use, unsigned *ret_peak)
{
	pthread_mutex_lock(&slots.lock);
	*ret_in_use = slots.in_use;
	*ret_peak = slots.peak;
	pthread_mutex_unlock(&slots.lock);
}

void wd_remote_stop(bool on)
{
	stopping = on;
}

/*
 * A slot for a call that runs `held` transfers already. One that runs none waits up to wait_ms
 * for one (its caller polls its cancel flag between waits); one that runs some takes another only
 * while no call waits, so the slots a large fetch gives back go to the calls that have none.
 */
static bool slot_take(unsigned held, unsigned wait_ms)
{
	bool got;

	pthread_mutex_lock(&slots.lock);
	if (held == 0 && slots.in_use >= slots.limit && wait_ms) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
		until.tv_sec += wait_ms / 1000 + until.tv_nsec / 1000000000;
		until.tv_nsec %= 1000000000;
		slots.waiting++;
		pthread_cond_timedwait(&slots.freed, &slots.lock, &until);
		slots.waiting--;
	}
	got = slots.in_use < slots.limit && (held == 0 || slots.waiting == 0);
	if (got && ++slots.in_use > slots.peak)
		slots.peak = slots.in_use;
	pthread_mutex_unlock(&slots.lock);
	return got;
}

static void slot_give(void)
{
	pthread_mutex_lock(&slots.lock);
	slots.in_use--;
	pthread_cond_signal(&slots.freed);
	pthread_mutex_unlock(&slots.lock);
}

bool wd_remote_is_url(const char *path)
{
	return path && (strncmp(path, "s3://", 5) == 0 || strncmp(path, "https://", 8) == 0 ||
			strncmp(path, "http://", 7) == 0 || strncmp(path, "az://", 5) == 0);
}

/* Bytes a URL path may carry as they are (RFC 3986 unreserved, plus the separator). */
static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
}

/* s with every other byte percent-encoded, appended to a new string after prefix. */
static char *join_encoded(const char *prefix, const char *s, const char *suffix)
{
	size_t pl = strlen(prefix), sl = strlen(s), xl = strlen(suffix);
	char *out = malloc(pl + 3 * sl + xl + 1), *p;

	if (!out)
		return NULL;
	memcpy(out, prefix, pl);
	p = out + pl;
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (unreserved(*c)) {
			*p++ = (char)*c;
		} else {
			static const char hex[] = "0123456789ABCDEF";
			*p++ = '%';
			*p++ = hex[*c >> 4];
			*p++ = hex[*c & 15];
		}
	}
	memcpy(p, suffix, xl + 1);
	return out;
}

/* scheme://host[:port]/path of url, without userinfo, query or fragment, into buf. */
static void shown_of(const char *url, char *buf, size_t cap)
{
	const char *scheme_end = strstr(url, "://");
	const char *host = scheme_end ? scheme_end + 3 : url;
	const char *path = host + strcspn(host, "/?#");
	const char *at = memchr(host, '@', (size_t)(path - host));
	size_t plen = strcspn(path, "?#");

	if (at)
		host = at + 1;
	snprintf(buf, cap, "%.*s%.*s%.*s", scheme_end ? (int)(scheme_end + 3 - url) : 0, url,
		 (int)(path - host), host, (int)plen, path);
}

static void lock_cb(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
	struct wd_remote *r = arg;

	(void)h;
	(void)access;
	if (data >= 0 && data < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&r->locks[data]);
}

static void unlock_cb(CURL *h, curl_lock_data data, void *arg)
{
	struct wd_remote *r = arg;

	(void)h;
	if (data >= 0 && data < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&r->locks[data]);
}

static int open_s3(struct wd_remote *r, const char *url, const struct wd_remote_opts *o,
		   weightd_error *err)
{
	const char *b = url + 5, *slash = strchr(b, '/');
	const char *region = o->region && *o->region ? o->region : "us-east-1";
	size_t blen = slash ? (size_t)(slash - b) : strlen(b);
	char endpoint[512], bucket[256];
	bool oom = false;
	int n;

	if (blen == 0 || blen >= sizeof(bucket) || strcspn(b, "?#") < strlen(b))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: an s3 URL is s3://BUCKET/KEY or s3://BUCKET/PREFIX/",
				    r->shown);
	memcpy(bucket, b, blen);
	bucket[blen] = '\0';
	for (size_t i = 0; i < blen; i++)
		if (!unreserved((unsigned char)bucket[i]) || bucket[i] == '/')
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: bucket name %s has characters S3 does not allow",
					    r->shown, bucket);
	if (o->endpoint && *o->endpoint)
		n = snprintf(endpoint, sizeof(endpoint), "%s", o->endpoint);
	else
		n = snprintf(endpoint, sizeof(endpoint), "https://s3.%s.amazonaws.com", region);
	if (n < 0 || (size_t)n >= sizeof(endpoint))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: endpoint too long",
				    r->shown);
	while (n > 0 && endpoint[n - 1] == '/')
		endpoint[--n] = '\0';
	if (strncmp(endpoint, "https://", 8) != 0 && strncmp(endpoint, "http://", 7) != 0)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: the endpoint must start with https:// (or http://)",
				    r->shown);
	if (strncmp(endpoint, "http://", 7) == 0 && !o->allow_http)
		return wd_error_set(
			err, WEIGHTD_E_INVALID_ARGUMENT,
			"%s: the endpoint is plain http://, which this checkpoint does not allow",
			r->shown);
	if (o->path_style) {
		size_t len = strlen(endpoint) + blen + 3;
		r->base = malloc(len);
		if (r->base)
			snprintf(r->base, len, "%s/%s/", endpoint, bucket);
	} else {
		const char *host = strstr(endpoint, "://") + 3;
		size_t len = strlen(endpoint) + blen + 3;
		r->base = malloc(len);
		if (r->base)
			snprintf(r->base, len, "%.*s%s.%s/", (int)(host - endpoint), endpoint,
				 bucket, host);
	}
	r->key = strdup(slash ? slash + 1 : "");
	if (!r->base || !r->key)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	r->dir = !*r->key || r->key[strlen(r->key) - 1] == '/';
	if (o->aws_cred || (o->access_key && o->secret_key)) {
		size_t len = strlen(region) + 16;
		r->sigv4 = malloc(len);
		if (r->sigv4)
			snprintf(r->sigv4, len, "aws:amz:%s:s3", region);
		r->access_key = wd_strdup_opt(o->access_key, &oom);
		r->secret_key = wd_strdup_opt(o->secret_key, &oom);
		if (o->aws_cred)
			r->cred = wd_aws_cred_ref(o->aws_cred);
		if (!r->sigv4 || oom)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	/* S3 wants the payload's hash in a header of every signed request: a GET has none. */
	r->fixed = curl_slist_append(
		r->fixed, "x-amz-content-sha256: "
			  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	if (!r->fixed)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	if (r->sigv4 && o->session_token) {
		char *h = malloc(strlen(o->session_token) + 32);
		struct curl_slist *l = NULL;
		if (h) {
			sprintf(h, "x-amz-security-token: %s", o->session_token);
			l = curl_slist_append(r->fixed, h);
			explicit_bzero(h, strlen(h));
			free(h);
		}
		if (!l)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		r->fixed = l;
	}
	return 0;
}

static int open_http(struct wd_remote *r, const char *url, const struct wd_remote_opts *o,
		     weightd_error *err)
{
	size_t qpos = strcspn(url, "?#");
	const char *host = strstr(url, "://") + 3;

	if (strncmp(url, "http://", 7) == 0 && !o->allow_http)
		return wd_error_set(
			err, WEIGHTD_E_INVALID_ARGUMENT,
			"%s: plain http:// needs allow_http in this checkpoint's section",
			r->shown);
	if (strcspn(host, "/?#") == 0)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: the URL names no host",
				    r->shown);
	r->base = strndup(url, qpos);
	r->query = strdup(url[qpos] == '?' ? url + qpos : "");
	if (!r->base || !r->query)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	if (url[qpos] == '?') {
		char *hash = strchr(r->query, '#');
		if (hash)
			*hash = '\0';
	}
	r->dir = qpos > 0 && url[qpos - 1] == '/';
	if (o->bearer_token) {
		char *h = malloc(strlen(o->bearer_token) + 32);
		if (h) {
			sprintf(h, "Authorization: Bearer %s", o->bearer_token);
			r->fixed = curl_slist_append(NULL, h);
			explicit_bzero(h, strlen(h));
			free(h);
		}
		if (!r->fixed)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	return 0;
}

/* Azure Blob: the https URL the account's endpoint gives, read as http, each request signed. */
static int open_azure(struct wd_remote *r, const char *url, const struct wd_remote_opts *o,
		      weightd_error *err)
{
	static const struct wd_azure_opts none;
	struct wd_azure_opts ao = o->azure ? *o->azure : none;
	char *base = NULL, *account = NULL, *query = NULL, *full = NULL;
	struct wd_remote_opts ho = *o;
	int rc;

	rc = wd_azure_url(url, o->endpoint, &base, &account, &query, err);
	if (rc)
		return rc;
	if (asprintf(&full, "%s%s", base, query) < 0)
		full = NULL;
	ao.has_sas = query[0] != '\0';
	ao.ca_file = ao.ca_file ? ao.ca_file : o->ca_file;
	ao.allow_http = ao.allow_http || o->allow_http;
	ho.bearer_token = NULL;
	rc = full ? open_http(r, full, &ho, err) :
		    wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	if (rc == 0) {
		rc = wd_azure_new(account, &ao, &r->azure, err);
		if (rc)
			wd_error_prefix(err, "%s", r->shown);
	}
	if (full)
		explicit_bzero(full, strlen(full));
	free(full);
	free(base);
	free(account);
	explicit_bzero(query, strlen(query));
	free(query);
	return rc;
}

int wd_remote_open(const char *url, const struct wd_remote_opts *opts, struct wd_remote **ret,
		   weightd_error *err)
{
	static const struct wd_remote_opts none;
	const struct wd_remote_opts *o = opts ? opts : &none;
	struct wd_remote *r;
	bool oom = false;
	int rc;

	if (!wd_remote_is_url(url))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "not an s3://, https:// or http:// URL");
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return wd_error_set(err, WEIGHTD_E_INTERNAL, "libcurl did not initialise: %s",
				    curl_easy_strerror(global_rc));
	r = calloc(1, sizeof(*r));
	if (!r)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&r->locks[i], NULL);
	shown_of(url, r->shown, sizeof(r->shown));
	r->kind = strncmp(url, "s3://", 5) == 0 ? KIND_S3 : KIND_HTTP;
	if (wd_azure_is_url(url))
		rc = open_azure(r, url, o, err);
	else
		rc = r->kind == KIND_S3 ? open_s3(r, url, o, err) : open_http(r, url, o, err);
	if (rc < 0)
		goto fail;
	r->ca_file = wd_strdup_opt(o->ca_file, &oom);
	r->protocols = o->allow_http ? "http,https" : "https";
	r->connect_timeout_ms = o->connect_timeout_ms ? (long)o->connect_timeout_ms : 10000;
	r->low_speed_time = o->low_speed_time_s ? (long)o->low_speed_time_s : 30;
	r->low_speed_bytes = o->low_speed_bytes ? (long)o->low_speed_bytes : 1024;
	r->retries = o->retries ? o->retries : 6;
	r->backoff_ms = o->backoff_ms ? o->backoff_ms : 200;
	r->backoff_max_ms = o->backoff_max_ms ? o->backoff_max_ms : 10000;
	r->share = curl_share_init();
	if (oom || !r->share) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto fail;
	}
	curl_share_setopt(r->share, CURLSHOPT_LOCKFUNC, lock_cb);
	curl_share_setopt(r->share, CURLSHOPT_UNLOCKFUNC, unlock_cb);
	curl_share_setopt(r->share, CURLSHOPT_USERDATA, r);
	curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*ret = r;
	return 0;
fail:
	wd_remote_free(r);
	return rc;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void wd_remote_free(struct wd_remote *r)
{
	if (!r)
		return;
	if (r->share)
		curl_share_cleanup(r->share);
	for (struct curl_slist *l = r->fixed; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(r->fixed);
	wd_azure_free(r->azure);
	free(r->base);
	free(r->key);
	wipe_free(r->query);
	free(r->sigv4);
	wipe_free(r->access_key);
	wipe_free(r->secret_key);
	wd_aws_cred_unref(r->cred);
	free(r->ca_file);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&r->locks[i]);
	free(r);
}

struct wd_aws_cred *wd_remote_aws_cred(const struct wd_remote *r)
{
	return r->cred;
}

bool wd_remote_is_dir(const struct wd_remote *r)
{
	return r->dir;
}

const char *wd_remote_shown(const struct wd_remote *r)
{
	return r->shown;
}

void wd_remote_counters(const struct wd_remote *r, struct wd_remote_counters *ret)
{
	ret->bytes = atomic_load(&r->bytes);
	ret->requests = atomic_load(&r->requests);
	ret->retries = atomic_load(&r->nretries);
	ret->errors = atomic_load(&r->errors);
	ret->ranges = atomic_load(&r->ranges);
	ret->gap_bytes = atomic_load(&r->gap_bytes);
}

/* A member name a directory may be asked for: relative, no empty, "." or ".." component. */
static bool member_ok(const char *name)
{
	const char *p = name;

	if (!*name || *name == '/' || strlen(name) > 1024)
		return false;
	while (*p) {
		size_t len = strcspn(p, "/");
		if (len == 0 || (len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '?' ||
			    p[i] == '#')
				return false;
		p += len;
		if (*p == '/')
			p++;
		else
			break;
	}
	return name[strlen(name) - 1] != '/';
}

void wd_remote_object_clear(struct wd_remote_object *o)
{
	if (!o)
		return;
	wipe_free(o->url);
	memset(o, 0, sizeof(*o));
}

/* ---- one transfer ----------------------------------------------------------------------- */

/* One range of a fetch as the requests covering it write it: [off, off + len) of the object
 * goes to fd at fd_off; `whole` when one request reads all of it (range_data is called). */
struct tgt {
	uint64_t off, len;
	int fd;
	uint64_t fd_off;
	size_t range; /* its index in the call's ranges */
	bool whole;
};

/*
 * A piece of an object in flight: [off, off + len), of which `got` bytes have arrived and been
 * written. One attempt is one request for [off + got, off + len).
 */
struct piece {
	const struct wd_remote_object *obj;
	uint64_t off, len, got;
	uint64_t asked;	    /* where the current attempt's range starts */
	unsigned char *buf; /* destination: a buffer, or */
	const struct tgt *tg; /* the ranges it covers, by offset (they may reach out of it) */
	size_t ntg, cursor;   /* cursor: the first of them not yet written whole */
	uint64_t waste;	      /* its bytes no range covers (a bridged gap) */
	bool stat; /* pinning: [0, 1) asked for, identity taken from the answer */
	uint64_t *progress; /* bytes written are added here, or NULL */
	uint64_t *arrived;  /* the run's count of payload bytes (its stall watch) */
	int (*data_cb)(void *arg, size_t i, const void *data, size_t n, weightd_error *err);
	void *data_arg;
	unsigned attempts;
	bool reauth;	     /* retried once with a new token after a 401 or 403 */
	uint64_t not_before; /* ms, monotonic */
	CURL *h;
	struct curl_slist *headers;
	char errbuf[CURL_ERROR_SIZE];
	struct wd_remote_answer ans; /* what the current answer said */
	char body[512];		     /* the start of an error answer (S3 says why in XML) */
	size_t body_len;
	curl_off_t content_length; /* of the last answer, -1 when it gave none */
	int fail; /* a fatal problem found while receiving (-code), with its text */
	char fail_text[256];
	struct wd_aws_keys *keys; /* what the current attempt is signed with (r->cred), or NULL */
	bool expired_retried;	  /* the one retry after an ExpiredToken answer is spent */
};

/* Copy a header's value (trimmed) into buf. */
static void header_value(const char *v, size_t n, char *buf, size_t cap)
{
	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(buf, v, n);
	buf[n] = '\0';
}

static bool header_is(const char *line, size_t n, const char *name, const char **val, size_t *vn)
{
	size_t l = strlen(name);

	if (n <= l || strncasecmp(line, name, l) != 0 || line[l] != ':')
		return false;
	*val = line + l + 1;
	*vn = n - l - 1;
	return true;
}

void wd_remote_answer_header(struct wd_remote_answer *a, const char *line, size_t n)
{
	const char *v;
	size_t vn;
	char tmp[128];

	if (n > 5 && strncmp(line, "HTTP/", 5) == 0) {
		/* a new answer (after a redirect or a 100): forget the last one's headers */
		const char *sp = memchr(line, ' ', n);
		char code[4] = { 0 };
		if (sp && (size_t)(line + n - sp) > 3)
			memcpy(code, sp + 1, 3);
		*a = (struct wd_remote_answer){ .status = strtol(code, NULL, 10) };
	} else if (header_is(line, n, "ETag", &v, &vn)) {
		header_value(v, vn, a->etag, sizeof(a->etag));
	} else if (header_is(line, n, "x-amz-version-id", &v, &vn)) {
		header_value(v, vn, a->version, sizeof(a->version));
	} else if (header_is(line, n, "Content-Range", &v, &vn)) {
		unsigned long long x, y, t;
		header_value(v, vn, tmp, sizeof(tmp));
		a->have_range = false;
		if (sscanf(tmp, "bytes %llu-%llu/%llu", &x, &y, &t) == 3 && x <= y && y < t) {
			a->have_range = true;
			a->range_start = x;
			a->range_total = t;
		} else if (sscanf(tmp, "bytes */%llu", &t) == 1) {
			a->have_range = true;
			a->range_start = UINT64_MAX;
			a->range_total = t;
		}
	}
}

static size_t on_header(char *line, size_t size, size_t nitems, void *arg)
{
	struct piece *p = arg;
	size_t n = size * nitems;

	if (n > 5 && strncmp(line, "HTTP/", 5) == 0)
		p->body_len = 0;
	wd_remote_answer_header(&p->ans, line, n);
	return n;
}

static void piece_fail(struct piece *p, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void piece_fail(struct piece *p, int code, const char *fmt, ...)
{
	va_list ap;

	if (p->fail)
		return;
	p->fail = -code;
	va_start(ap, fmt);
	vsnprintf(p->fail_text, sizeof(p->fail_text), fmt, ap);
	va_end(ap);
}

/* Write all of data[0, n) into fd at off; false (the piece failed) on a problem. */
static bool write_all(struct piece *p, int fd, const char *data, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = pwrite(fd, data + done, n - done, (off_t)(off + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			piece_fail(p,
				   w < 0 && errno == ENOSPC ? WEIGHTD_E_RESOURCE_EXHAUSTED :
							      WEIGHTD_E_IO,
				   "writing into shared memory: %s",
				   w < 0 ? strerror(errno) : "no progress");
			return false;
		}
		done += (size_t)w;
	}
	return true;
}

/*
 * The bytes of the object at [off + got, + n) just arrived: each range the piece covers takes
 * its part of them (bytes of a bridged gap go nowhere), and a range read whole by this piece
 * shows its part to range_data. The ranges are in offset order, so the cursor only moves on.
 */
static bool piece_scatter(struct piece *p, const char *data, size_t n)
{
	uint64_t x0 = p->off + p->got, x1 = x0 + n;

	for (size_t k = p->cursor; k < p->ntg && p->tg[k].off < x1; k++) {
		const struct tgt *t = &p->tg[k];
		uint64_t lo = t->off > x0 ? t->off : x0;
		uint64_t hi = t->off + t->len < x1 ? t->off + t->len : x1;

		if (lo >= hi)
			continue;
		if (!write_all(p, t->fd, data + (lo - x0), (size_t)(hi - lo),
			       t->fd_off + (lo - t->off)))
			return false;
		if (p->data_cb && t->whole) {
			weightd_error e;
			int r;
			wd_error_clear(&e);
			if ((r = p->data_cb(p->data_arg, t->range, data + (lo - x0),
					    (size_t)(hi - lo), &e)) < 0) {
				piece_fail(p, -r, "%s", e.message);
				return false;
			}
		}
		if (p->progress)
			__atomic_fetch_add(p->progress, hi - lo, __ATOMIC_RELAXED);
	}
	while (p->cursor < p->ntg && p->tg[p->cursor].off + p->tg[p->cursor].len <= x1)
		p->cursor++;
	return true;
}

/* Write what arrived; 0 on a problem (curl then ends the transfer with CURLE_WRITE_ERROR). */
static size_t on_body(char *data, size_t size, size_t nitems, void *arg)
{
	struct piece *p = arg;
	size_t n = size * nitems;
	if (p->ans.status < 200 || p->ans.status > 299) {
		size_t room = sizeof(p->body) - 1 - p->body_len;
		size_t take = n < room ? n : room;
		memcpy(p->body + p->body_len, data, take);
		p->body_len += take;
		p->body[p->body_len] = '\0';
		return n;
	}
	if (p->stat) {
		/* the headers are what was wanted, and the object's first bytes when asked for */
		size_t take = p->buf && p->got < p->len ? (size_t)(p->len - p->got) : 0;
		if (take > n)
			take = n;
		if (take) {
			memcpy(p->buf + p->got, data, take);
			p->got += take;
		}
		return take == n ? n : 0;
	}
	if (p->obj->etag[0] && p->ans.etag[0] && strcmp(p->obj->etag, p->ans.etag) != 0) {
		piece_fail(p, WEIGHTD_E_SOURCE_CHANGED, "the object changed: ETag %s, pinned %s",
			   p->ans.etag, p->obj->etag);
		return 0;
	}
	if (p->ans.status != 206 || !p->ans.have_range || p->ans.range_start != p->asked) {
		if (p->ans.status == 200 && p->asked == 0 && p->len == p->obj->size) {
			/* the whole object was asked for; a 200 is the same bytes */
		} else {
			piece_fail(p, WEIGHTD_E_IO,
				   "the server did not answer the range asked for (HTTP %ld)",
				   p->ans.status);
			return 0;
		}
	}
	if (n > p->len - p->got) {
		piece_fail(p, WEIGHTD_E_IO, "the server sent more bytes than asked for");
		return 0;
	}
	if (p->buf) {
		memcpy(p->buf + p->got, data, n);
		if (p->progress)
			__atomic_fetch_add(p->progress, n, __ATOMIC_RELAXED);
	} else if (!piece_scatter(p, data, n)) {
		return 0;
	}
	p->got += n;
	*p->arrived += n;
	return n;
}

/*
 * The keys this attempt is signed with, valid now (the provider refreshes them ahead of their
 * expiry, and re-reads rotated files), and their session token as a header. curl copies the
 * keys when they are set, and the header list is the piece's own.
 */
static int sign_with(struct wd_remote *r, struct piece *p, CURL *h, weightd_error *err)
{
	struct curl_slist *l;
	char *hdr;
	int rc;

	(void)h;
	wd_aws_cred_release(p->keys);
	p->keys = NULL;
	if ((rc = wd_aws_cred_get(r->cred, &p->keys, err)) < 0) {
		wd_error_prefix(err, "%s", p->obj->shown);
		return rc;
	}
	if (!p->keys->session_token)
		return 0;
	if (asprintf(&hdr, "x-amz-security-token: %s", p->keys->session_token) < 0)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	l = curl_slist_append(p->headers, hdr);
	explicit_bzero(hdr, strlen(hdr));
	free(hdr);
	if (!l)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	p->headers = l;
	return 0;
}

/* The headers azure.c makes for this request (its date, its signature or bearer token). */
static int azure_headers(struct wd_remote *r, struct piece *p, const char *range,
			 weightd_error *err)
{
	const char *im = !p->stat && p->obj->etag[0] ? p->obj->etag : "";
	char *lines = malloc(20480), *line, *save = NULL;
	int rc;

	if (!lines)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	rc = wd_azure_headers(r->azure, p->obj->url, range, im, lines, 20480, err);
	if (rc)
		wd_error_prefix(err, "%s", p->obj->shown);
	for (line = strtok_r(lines, "\n", &save); rc == 0 && line;
	     line = strtok_r(NULL, "\n", &save)) {
		p->headers = curl_slist_append(p->headers, line);
		if (!p->headers)
			rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	explicit_bzero(lines, 20480);
	free(lines);
	return rc;
}

static int piece_start(struct wd_remote *r, struct piece *p, CURL *h, weightd_error *err)
{
	char range[64], ifmatch[WD_REMOTE_ETAG_MAX + 16];
	uint64_t from = p->off + p->got, to = p->off + p->len - 1;

	curl_easy_reset(h);
	curl_slist_free_all(p->headers);
	p->headers = NULL;
	if (p->stat) {
		p->got = 0; /* a pin asks from the start every time */
		snprintf(range, sizeof(range), "Range: bytes=0-%llu",
			 (unsigned long long)(p->len ? p->len - 1 : 0));
	} else {
		snprintf(range, sizeof(range), "Range: bytes=%llu-%llu", (unsigned long long)from,
			 (unsigned long long)to);
	}
	p->headers = curl_slist_append(p->headers, range);
	if (!p->stat && p->obj->etag[0] && p->headers) {
		snprintf(ifmatch, sizeof(ifmatch), "If-Match: %s", p->obj->etag);
		p->headers = curl_slist_append(p->headers, ifmatch);
	}
	for (struct curl_slist *l = r->fixed; l && p->headers; l = l->next)
		p->headers = curl_slist_append(p->headers, l->data);
	if (!p->headers)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	if (r->cred) {
		int rc = sign_with(r, p, h, err);
		if (rc < 0)
			return rc;
	}
	if (r->azure) {
		int rc = azure_headers(r, p, range + 7, err);
		if (rc)
			return rc;
	}
	p->h = h;
	p->asked = from;
	p->ans.status = 0;
	p->ans.have_range = false;
	p->body_len = 0;
	p->errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, p->obj->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, r->protocols);
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, r->protocols);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 8L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, r->low_speed_time);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, r->low_speed_bytes);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "weightd");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, p->headers);
	curl_easy_setopt(h, CURLOPT_SHARE, r->share);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, p->errbuf);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, p);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, p);
	curl_easy_setopt(h, CURLOPT_PRIVATE, p);
	if (r->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, r->ca_file);
	if (r->sigv4) {
		curl_easy_setopt(h, CURLOPT_AWS_SIGV4, r->sigv4);
		curl_easy_setopt(h, CURLOPT_USERNAME,
				 p->keys ? p->keys->access_key : r->access_key);
		curl_easy_setopt(h, CURLOPT_PASSWORD,
				 p->keys ? p->keys->secret_key : r->secret_key);
	}
	p->attempts++;
	atomic_fetch_add(&r->requests, 1);
	if (p->attempts > 1)
		atomic_fetch_add(&r->nretries, 1);
	return 0;
}

/* S3's <Code> and <Message> from an error body, as printable text; "" when there are none. */
void wd_remote_s3_reason(const char *body, char *buf, size_t cap)
{
	const char *c = strstr(body, "<Code>"), *ce = c ? strstr(c, "</Code>") : NULL;
	const char *m = strstr(body, "<Message>"), *me = m ? strstr(m, "</Message>") : NULL;
	size_t at = 0;

	buf[0] = '\0';
	if (!c || !ce)
		return;
	at = (size_t)snprintf(buf, cap, " (%.*s", (int)(ce - c - 6), c + 6);
	if (m && me && at < cap)
		at += (size_t)snprintf(buf + at, cap - at, ": %.*s", (int)(me - m - 9), m + 9);
	if (at < cap)
		snprintf(buf + at, cap - at, ")");
	for (char *q = buf; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			*q = '?';
}

enum outcome { DONE, RETRY, FAILED };

/* What one finished attempt means; on FAILED, err says why. */
static enum outcome piece_outcome(struct wd_remote *r, struct piece *p, CURLcode rc, int *rcp,
				  weightd_error *err)
{
	char reason[300], what[WD_REMOTE_SHOWN_MAX + 80];
	bool s3_slowdown;
	int code;

	if (p->stat)
		snprintf(what, sizeof(what), "GET %s", p->obj->shown);
	else
		snprintf(what, sizeof(what), "GET %s bytes %llu-%llu", p->obj->shown,
			 (unsigned long long)(p->off + p->got),
			 (unsigned long long)(p->off + p->len - 1));
	if (p->fail) {
		*rcp = wd_error_set(err, -p->fail, "%s: %s", what, p->fail_text);
		return FAILED;
	}
	if (r->azure)
		wd_azure_error_reason(p->body, p->body_len, reason, sizeof(reason));
	else
		wd_remote_s3_reason(p->body, reason, sizeof(reason));
	if (p->stat && (rc == CURLE_OK || rc == CURLE_WRITE_ERROR) && p->ans.status >= 200 &&
	    p->ans.status <= 299)
		return DONE;
	if (p->stat && p->ans.status == 416 && p->ans.have_range &&
	    p->ans.range_start == UINT64_MAX && p->ans.range_total == 0)
		return DONE; /* an empty object */
	if (rc == CURLE_OK && p->ans.status >= 200 && p->ans.status <= 299) {
		if (p->got == p->len)
			return DONE;
		/* the answer ended early: ask for the rest */
	} else if (rc == CURLE_OK) {
		s3_slowdown = strstr(p->body, "<Code>SlowDown</Code>") != NULL;
		if ((p->ans.status == 400 || p->ans.status == 403) && p->keys &&
		    !p->expired_retried && strstr(p->body, "<Code>ExpiredToken</Code>")) {
			/* the keys ran out under the request: once more with new ones, a retry
			 * that does not count against the piece's retries */
			p->expired_retried = true;
			wd_aws_cred_expired(r->cred, p->keys);
			p->attempts--;
			return RETRY;
		}
		if (p->ans.status == 429 || p->ans.status >= 500 || s3_slowdown) {
			if (p->attempts <= r->retries)
				return RETRY;
			*rcp = wd_error_set(err, WEIGHTD_E_IO, "%s: HTTP %ld%s after %u attempts",
					    what, p->ans.status, reason, p->attempts);
			return FAILED;
		}
		if ((p->ans.status == 401 || p->ans.status == 403) && r->azure && !p->reauth &&
		    wd_azure_refused(r->azure)) {
			p->reauth = true;
			/* an expired or revoked token: once more with a new one, not counted
			 * against the range's retries */
			p->attempts--;
			return RETRY;
		}
		code = p->ans.status == 404			    ? WEIGHTD_E_NOT_FOUND :
		       p->ans.status == 401 || p->ans.status == 403 ? WEIGHTD_E_PERMISSION_DENIED :
		       p->ans.status == 412			    ? WEIGHTD_E_SOURCE_CHANGED :
		       p->ans.status == 416			    ? WEIGHTD_E_OUT_OF_RANGE :
								      WEIGHTD_E_IO;
		*rcp = wd_error_set(err, code, "%s: HTTP %ld%s%s", what, p->ans.status, reason,
				    code == WEIGHTD_E_SOURCE_CHANGED ?
					    ": the object is no longer the one pinned" :
					    "");
		return FAILED;
	} else {
		switch (rc) {
		case CURLE_COULDNT_CONNECT:
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_PARTIAL_FILE:
		case CURLE_RECV_ERROR:
		case CURLE_SEND_ERROR:
		case CURLE_GOT_NOTHING:
		case CURLE_OPERATION_TIMEDOUT:
		case CURLE_HTTP2:
		case CURLE_HTTP2_STREAM: break;
		default:
			*rcp = wd_error_set(err,
					    rc == CURLE_PEER_FAILED_VERIFICATION ?
						    WEIGHTD_E_PERMISSION_DENIED :
						    WEIGHTD_E_IO,
					    "%s: %s%s%s", what, curl_easy_strerror(rc),
					    p->errbuf[0] ? ": " : "", p->errbuf);
			return FAILED;
		}
	}
	if (p->attempts <= r->retries)
		return RETRY;
	if (rc == CURLE_OK)
		*rcp = wd_error_set(err, WEIGHTD_E_IO, "%s: the answer ended early, %u attempts",
				    what, p->attempts);
	else
		*rcp = wd_error_set(err, WEIGHTD_E_IO, "%s: %s%s%s, %u attempts", what,
				    curl_easy_strerror(rc), p->errbuf[0] ? ": " : "", p->errbuf,
				    p->attempts);
	return FAILED;
}

/* Full jitter: a wait drawn from [0, min(max, base * 2^(attempt-1))]. */
static uint64_t backoff(const struct wd_remote *r, unsigned attempt, unsigned *seed)
{
	uint64_t cap = r->backoff_ms;

	for (unsigned i = 1; i < attempt && cap < r->backoff_max_ms; i++)
		cap *= 2;
	if (cap > r->backoff_max_ms)
		cap = r->backoff_max_ms;
	return (uint64_t)rand_r(seed) % (cap + 1);
}

/* What a run of pieces may do, and whom it tells when a range is whole. */
struct run {
	unsigned conc;
	const volatile int *cancel;
	void (*stalled)(void *arg);
	int (*range_done)(void *arg, size_t i, weightd_error *err);
	void *arg;
	size_t *remaining; /* pieces not done per range (with range_done) */
};

/*
 * Run every piece to completion over up to run->conc connections, each transfer holding one of
 * the node's slots. 0, or the first failure (the rest abandoned).
 */
static int run_pieces(struct wd_remote *r, struct piece *pieces, size_t n, const struct run *run,
		      weightd_error *err)
{
	unsigned conc = run->conc;
	CURLM *m = curl_multi_init();
	CURL **handles = calloc(conc, sizeof(*handles)); /* every handle made, each once */
	CURL **idle = calloc(conc, sizeof(*idle));
	size_t next = 0, done = 0, *retry = calloc(n, sizeof(*retry)), nretry = 0;
	unsigned nhandles = 0, nidle = 0, seed;
	uint64_t arrived = 0, last_got = 0, last_change = wd_clock_ms();
	int rc = 0;

	for (size_t i = 0; i < n; i++)
		pieces[i].arrived = &arrived;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
		seed = (unsigned)wd_clock_ms() ^ (unsigned)getpid();
	if (!m || !handles || !idle || !retry) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	/* One connection per transfer: object stores spread a link's bandwidth over connections. */
	curl_multi_setopt(m, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
	while (done < n) {
		uint64_t now = wd_clock_ms(), wait = 100;
		int running = 0, left = 0;
		bool starved = false;
		CURLMsg *msg;

		if ((run->cancel && *run->cancel) || stopping) {
			rc = wd_error_set(err, WEIGHTD_E_CANCELLED,
					  "%s: cancelled (weightd is stopping)",
					  pieces[0].obj->shown);
			goto out;
		}
		/* start what may start: retries whose wait is over, then new pieces */
		while (nidle + (conc - nhandles) > 0) {
			unsigned held = nhandles - nidle;
			struct piece *p = NULL;
			size_t ready = nretry;
			CURL *h;
			for (size_t i = 0; i < nretry; i++) {
				if (pieces[retry[i]].not_before <= now) {
					ready = i;
					break;
				}
			}
			if (ready == nretry && next == n)
				break;
			if (!slot_take(held, held ? 0 : 100)) {
				starved = held == 0;
				break;
			}
			if (ready < nretry) {
				p = &pieces[retry[ready]];
				retry[ready] = retry[--nretry];
			} else {
				p = &pieces[next++];
			}
			if (nidle) {
				h = idle[--nidle];
			} else {
				h = curl_easy_init();
				if (!h) {
					slot_give();
					rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
							  "out of memory");
					goto out;
				}
				handles[nhandles++] = h;
			}
			if ((rc = piece_start(r, p, h, err)) < 0 ||
			    curl_multi_add_handle(m, h) != CURLM_OK) {
				p->h = NULL;
				idle[nidle++] = h;
				slot_give();
				if (rc == 0)
					rc = wd_error_set(err, WEIGHTD_E_INTERNAL,
							  "curl_multi_add_handle failed");
				goto out;
			}
		}
		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left))) {
			struct piece *p;
			CURL *h = msg->easy_handle;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&p);
			curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T,
					  &p->content_length);
			curl_multi_remove_handle(m, h);
			p->h = NULL;
			idle[nidle++] = h;
			slot_give();
			switch (piece_outcome(r, p, msg->data.result, &rc, err)) {
			case DONE:
				done++;
				atomic_fetch_add(&r->gap_bytes, p->waste);
				for (size_t k = 0; run->remaining && k < p->ntg; k++) {
					size_t ri = p->tg[k].range;
					if (--run->remaining[ri] == 0 &&
					    (rc = run->range_done(run->arg, ri, err)) < 0)
						goto out;
				}
				break;
			case RETRY:
				p->not_before = wd_clock_ms() + backoff(r, p->attempts, &seed);
				retry[nretry++] = (size_t)(p - pieces);
				break;
			case FAILED: goto out;
			}
		}
		if (done == n)
			break;
		now = wd_clock_ms();
		if (run->stalled) {
			if (arrived != last_got) {
				last_got = arrived;
				last_change = now;
			} else if (now - last_change >= WD_REMOTE_STALL_MS) {
				run->stalled(run->arg);
				now = wd_clock_ms();
				last_change = now;
			}
		}
		for (size_t i = 0; i < nretry; i++) {
			uint64_t nb = pieces[retry[i]].not_before;
			uint64_t w = nb > now ? nb - now : 0;
			if (w < wait)
				wait = w;
		}
		if (nidle < nhandles)
			curl_multi_poll(m, NULL, 0, (int)wait, NULL);
		else if (wait && !starved) /* a starved call has just waited for a slot */
			usleep((useconds_t)(wait * 1000));
	}
out:
	for (size_t i = 0; i < n; i++) {
		if (pieces[i].h) { /* still attached to the multi */
			curl_multi_remove_handle(m, pieces[i].h);
			slot_give();
		}
		pieces[i].h = NULL;
		atomic_fetch_add(&r->bytes, pieces[i].got);
		curl_slist_free_all(pieces[i].headers);
		pieces[i].headers = NULL;
		wd_aws_cred_release(pieces[i].keys);
		pieces[i].keys = NULL;
	}
	for (unsigned i = 0; i < nhandles; i++)
		curl_easy_cleanup(handles[i]);
	if (m)
		curl_multi_cleanup(m);
	free(handles);
	free(idle);
	free(retry);
	if (rc < 0)
		atomic_fetch_add(&r->errors, 1);
	return rc;
}

int wd_remote_stat(struct wd_remote *r, const char *name, struct wd_remote_object *ret,
		   weightd_error *err)
{
	return wd_remote_stat_prefix(r, name, NULL, 0, NULL, ret, err);
}

int wd_remote_stat_prefix(struct wd_remote *r, const char *name, void *buf, size_t cap,
			  size_t *ret_got, struct wd_remote_object *ret, weightd_error *err)
{
	struct wd_remote_object o = { 0 };
	struct piece p = { 0 };
	char shown_base[WD_REMOTE_SHOWN_MAX];
	int rc;

	if (name && !r->dir)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s names one object, not a directory", r->shown);
	if (!name && r->dir)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s names a directory: name an object in it", r->shown);
	if (name && !member_ok(name))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: %s is not a plain relative object name", r->shown, name);
	if (r->kind == KIND_S3) {
		char *key = NULL;
		if (name && asprintf(&key, "%s%s", r->key, name) < 0)
			key = NULL;
		o.url = join_encoded(r->base, name ? (key ? key : "") : r->key, "");
		if (name && !key) {
			free(o.url);
			o.url = NULL;
		}
		free(key);
	} else {
		o.url = name ? join_encoded(r->base, name, r->query) : NULL;
		if (!name && asprintf(&o.url, "%s%s", r->base, r->query) < 0)
			o.url = NULL;
	}
	if (!o.url)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	snprintf(shown_base, sizeof(shown_base), "%s", r->shown);
	snprintf(o.shown, sizeof(o.shown), "%s%s", shown_base, name ? name : "");
	p.obj = &o;
	p.len = buf && cap ? cap : 1;
	p.buf = buf && cap ? buf : NULL;
	p.stat = true;
	rc = run_pieces(r, &p, 1, &(struct run){ .conc = 1 }, err);
	if (rc < 0) {
		wd_remote_object_clear(&o);
		return rc;
	}
	if (p.ans.status == 416) {
		o.size = 0;
	} else if (p.ans.status == 206 && p.ans.have_range && p.ans.range_start != UINT64_MAX) {
		o.size = p.ans.range_total;
	} else {
		/* a 200: the server sent the whole object's length instead of a range */
		curl_off_t cl = p.ans.status == 200 ? p.content_length : -1;
		if (cl < 0) {
			rc = wd_error_set(
				err, WEIGHTD_E_IO,
				"GET %s: the answer gave no size (HTTP %ld, no Content-Range)",
				o.shown, p.ans.status);
			wd_remote_object_clear(&o);
			return rc;
		}
		o.size = (uint64_t)cl;
	}
	if (p.buf && p.ans.status == 206 && p.ans.range_start != 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO,
				  "GET %s: the server did not answer the range asked for",
				  o.shown);
		wd_remote_object_clear(&o);
		return rc;
	}
	memcpy(o.etag, p.ans.etag, sizeof(o.etag));
	memcpy(o.version, p.ans.version, sizeof(o.version));
	if (ret_got)
		*ret_got = p.buf ? (size_t)(p.got < o.size ? p.got : o.size) : 0;
	*ret = o;
	return 0;
}

int wd_remote_read(struct wd_remote *r, const struct wd_remote_object *o, uint64_t off, void *buf,
		   size_t len, weightd_error *err)
{
	struct piece p = { 0 };

	if (off > o->size || len > o->size - off)
		return wd_error_set(err, WEIGHTD_E_OUT_OF_RANGE,
				    "%s: bytes %llu-%llu lie past its end (%llu bytes)", o->shown,
				    (unsigned long long)off, (unsigned long long)(off + len),
				    (unsigned long long)o->size);
	if (len == 0)
		return 0;
	p.obj = o;
	p.off = off;
	p.len = len;
	p.buf = buf;
	return run_pieces(r, &p, 1, &(struct run){ .conc = 1 }, err);
}

int wd_remote_fetch(struct wd_remote *r, const struct wd_remote_object *o,
		    const struct wd_remote_range *ranges, size_t n,
		    const struct wd_remote_fetch_opts *opts, weightd_error *err)
{
	static const struct wd_remote_fetch_opts none;
	const struct wd_remote_fetch_opts *fo = opts ? opts : &none;
	uint64_t chunk = fo->chunk ? fo->chunk : WD_REMOTE_CHUNK_DEFAULT;
	struct run run = { .conc = fo->concurrency ? fo->concurrency : 1,
			   .cancel = fo->cancel,
			   .stalled = fo->stalled,
			   .range_done = fo->range_done,
			   .arg = fo->arg };
	struct wd_remote_want *wants = calloc(n ? n : 1, sizeof(*wants));
	size_t *order = calloc(n ? n : 1, sizeof(*order)), *cover = NULL;
	struct wd_remote_req *reqs = NULL;
	struct piece *pieces = NULL;
	struct tgt *tg = NULL;
	size_t nreq = 0, nonempty = 0;
	int rc;

	if (!wants || !order) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const struct wd_remote_object *ob = ranges[i].obj ? ranges[i].obj : o;
		if (!ob || ranges[i].off > ob->size || ranges[i].len > ob->size - ranges[i].off) {
			rc = wd_error_set(err, WEIGHTD_E_OUT_OF_RANGE,
					  "%s: bytes %llu-%llu lie past its end (%llu bytes)",
					  ob ? ob->shown : "?", (unsigned long long)ranges[i].off,
					  (unsigned long long)(ranges[i].off + ranges[i].len),
					  (unsigned long long)(ob ? ob->size : 0));
			goto out;
		}
		wants[i] = (struct wd_remote_want){ (size_t)(uintptr_t)ob, ranges[i].off,
						    ranges[i].len };
		nonempty += ranges[i].len > 0;
	}
	if (wd_remote_plan(wants, n, chunk, fo->coalesce, fo->gap, order, &reqs, &nreq) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	tg = calloc(n ? n : 1, sizeof(*tg));
	cover = calloc(n ? n : 1, sizeof(*cover));
	run.remaining = calloc(n ? n : 1, sizeof(*run.remaining));
	pieces = calloc(nreq ? nreq : 1, sizeof(*pieces));
	if (!tg || !cover || !run.remaining || !pieces) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (size_t q = 0; q < nreq; q++)
		for (size_t k = reqs[q].first; k < reqs[q].last; k++)
			cover[k]++;
	for (size_t k = 0; k < n; k++) {
		const struct wd_remote_range *rg = &ranges[order[k]];
		tg[k] = (struct tgt){ rg->off, rg->len, rg->fd, rg->fd_off, order[k], cover[k] == 1 };
		run.remaining[order[k]] = cover[k];
	}
	if (!run.range_done)
		run.remaining = (free(run.remaining), NULL);
	for (size_t q = 0; q < nreq; q++) {
		struct piece *p = &pieces[q];
		p->obj = (const struct wd_remote_object *)(uintptr_t)reqs[q].obj;
		p->off = reqs[q].off;
		p->len = reqs[q].len;
		p->tg = &tg[reqs[q].first];
		p->ntg = reqs[q].last - reqs[q].first;
		p->waste = reqs[q].waste;
		p->progress = fo->progress;
		p->data_cb = fo->range_data;
		p->data_arg = fo->arg;
	}
	rc = nreq ? run_pieces(r, pieces, nreq, &run, err) : 0;
	/* empty ranges have no piece to finish them */
	for (size_t i = 0; rc == 0 && run.remaining && i < n; i++)
		if (ranges[i].len == 0)
			rc = run.range_done(run.arg, i, err);
	if (rc == 0)
		atomic_fetch_add(&r->ranges, nonempty);
out:
	free(pieces);
	free(run.remaining);
	free(cover);
	free(tg);
	free(reqs);
	free(order);
	free(wants);
	return rc;
}
