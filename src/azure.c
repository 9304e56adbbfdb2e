/* SPDX-License-Identifier: Apache-2.0 */
/* azure.c - Azure Blob Storage: az:// URLs, the credential source chosen, Shared Key signatures,
 * bearer tokens kept fresh, the headers each request carries. */
#include "azure.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "azure_int.h"
#include "error.h"
#include "remote.h"

#define AZURE_HOST_SUFFIX ".blob.core.windows.net"
#define STORAGE_SCOPE	  "https://storage.azure.com/.default"
#define STORAGE_RESOURCE  "https://storage.azure.com/"
#define AUTHORITY_DEFAULT "https://login.microsoftonline.com/"
#define IMDS_DEFAULT	  "http://169.254.169.254"
#define FED_TOKEN_MAX	  65536
#define KEY_MAX		  128 /* decoded bytes of an account key (Azure's are 64) */

/* A token is refreshed when less than this is left, or half its lifetime, whichever is less. */
#define REFRESH_AHEAD_S 300
/* A refresh that fails leaves the old token in use while this much is left. */
#define MANDATORY_S 10

static const char *const names[] = {
	[WD_AZURE_AUTO] = "auto",
	[WD_AZURE_SAS] = "sas",
	[WD_AZURE_SHARED_KEY] = "shared-key",
	[WD_AZURE_WORKLOAD] = "workload-identity",
	[WD_AZURE_CLIENT_SECRET] = "client-secret",
	[WD_AZURE_MANAGED] = "managed-identity",
	[WD_AZURE_ANONYMOUS] = "anonymous",
};

int wd_azure_source_parse(const char *word)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (word && strcmp(word, names[i]) == 0)
			return (int)i;
	return -1;
}

const char *wd_azure_source_name(enum wd_azure_source s)
{
	return (size_t)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* The host of an http(s) URL: [start, start + len). */
static bool url_host(const char *url, const char **host, size_t *len)
{
	const char *h = strstr(url, "://");

	if (!h)
		return false;
	h += 3;
	*host = h;
	*len = strcspn(h, "/?#:");
	return true;
}

bool wd_azure_is_url(const char *url)
{
	const char *h;
	size_t n, sl = strlen(AZURE_HOST_SUFFIX);

	if (!url)
		return false;
	if (strncmp(url, "az://", 5) == 0)
		return true;
	if (strncmp(url, "https://", 8) != 0 || !url_host(url, &h, &n))
		return false;
	return n > sl && strncasecmp(h + n - sl, AZURE_HOST_SUFFIX, sl) == 0;
}

static bool account_ok(const char *s, size_t n)
{
	if (n < 3 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

static bool container_ok(const char *s, size_t n)
{
	if (n == 5 && memcmp(s, "$root", 5) == 0)
		return true;
	if (n < 3 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return true;
}

/* s[0..n) percent-encoded but for RFC 3986's unreserved bytes and '/', appended at *p. */
static void put_encoded(char **p, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
			*(*p)++ = (char)c;
		} else {
			*(*p)++ = '%';
			*(*p)++ = hex[c >> 4];
			*(*p)++ = hex[c & 15];
		}
	}
}

/* Is the endpoint's host an IP address or localhost, with no path of its own? */
static bool ip_style(const char *ep)
{
	const char *h;
	size_t n;

	if (!url_host(ep, &h, &n) || h[strcspn(h, "/")] == '/')
		return false;
	if (*h == '[' || (n == 9 && strncasecmp(h, "localhost", 9) == 0))
		return true;
	for (size_t i = 0; i < n; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || h[i] == '.'))
			return false;
	return n > 0;
}

int wd_azure_url(const char *url, const char *endpoint, char **ret_base, char **ret_account,
		 char **ret_query, weightd_error *err)
{
	char shown[WD_REMOTE_SHOWN_MAX];
	const char *acct, *path, *q;
	size_t alen, plen, clen, elen;
	char ep[600], *base, *p;

	snprintf(shown, sizeof(shown), "%.*s", (int)strcspn(url, "?#"), url);
	if (strncmp(url, "az://", 5) == 0) {
		acct = url + 5;
		alen = strcspn(acct, "/?#");
		path = acct + alen; /* "/container/..." */
	} else {
		if (!url_host(url, &acct, &alen))
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: not a URL",
					    shown);
		path = acct + strcspn(acct, "/?#");
		alen = strcspn(acct, ".");
	}
	if (!account_ok(acct, alen))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: the storage account name must be 3 to 63 lowercase "
				    "letters and digits",
				    shown);
	plen = strcspn(path, "?#");
	clen = plen > 1 ? strcspn(path + 1, "/?#") : 0;
	if (*path != '/' || !container_ok(path + 1, clen) || path[1 + clen] != '/' ||
	    plen <= 1 + clen)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: an Azure blob URL is az://ACCOUNT/CONTAINER/BLOB or "
				    "az://ACCOUNT/CONTAINER/PREFIX/ (a container name is 3 to 63 "
				    "lowercase letters, digits and dashes)",
				    shown);
	for (size_t i = 0; i < plen; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f ||
		    (i + 1 < plen && path[i] == '/' && path[i + 1] == '/'))
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: the blob name has an empty component or a "
					    "control character",
					    shown);
	if (endpoint && *endpoint)
		elen = (size_t)snprintf(ep, sizeof(ep), "%s", endpoint);
	else
		elen = (size_t)snprintf(ep, sizeof(ep), "https://%.*s" AZURE_HOST_SUFFIX, (int)alen,
					acct);
	if (elen >= sizeof(ep))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: endpoint too long",
				    shown);
	while (elen && ep[elen - 1] == '/')
		ep[--elen] = '\0';
	if (strncmp(ep, "https://", 8) != 0 && strncmp(ep, "http://", 7) != 0)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "%s: the endpoint must start with https:// (or http://)",
				    shown);
	if (endpoint && *endpoint && ip_style(ep)) {
		/* an emulator (Azurite) at an address: the account is the path's first segment,
		 * as Azure's SDKs address it */
		int k = snprintf(ep + elen, sizeof(ep) - elen, "/%.*s", (int)alen, acct);
		if (k < 0 || (size_t)k >= sizeof(ep) - elen)
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: endpoint too long", shown);
		elen += (size_t)k;
	}
	base = malloc(elen + 3 * plen + 1);
	*ret_account = strndup(acct, alen);
	q = path + plen;
	*ret_query = strndup(*q == '?' ? q : "", *q == '?' ? strcspn(q, "#") : 0);
	if (!base || !*ret_account || !*ret_query) {
		free(base);
		free(*ret_account);
		free(*ret_query);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	memcpy(base, ep, elen);
	p = base + elen;
	/* an https URL's path is already encoded as it is to be sent */
	if (strncmp(url, "az://", 5) == 0) {
		put_encoded(&p, path, plen);
	} else {
		memcpy(p, path, plen);
		p += plen;
	}
	*p = '\0';
	*ret_base = base;
	return 0;
}

/* ---- Shared Key -------------------------------------------------------------------------- */

int wd_azure_shared_key_sign(const char *account, const uint8_t *key, size_t key_len,
			     const char *url_path, const char *range, const char *if_match,
			     const char *date, const char *version, char *out, size_t cap)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	char *sts = NULL;
	int n;

	/*
	 * VERB, Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-Modified-Since,
	 * If-Match, If-None-Match, If-Unmodified-Since, Range; the x-ms- headers sorted; then
	 * "/account/path" (no query: a signed request carries none).
	 */
	n = asprintf(&sts, "GET\n\n\n\n\n\n\n\n%s\n\n\n%s\nx-ms-date:%s\nx-ms-version:%s\n/%s%s",
		     if_match ? if_match : "", range ? range : "", date, version, account,
		     url_path);
	if (n < 0)
		return -1;
	if (!HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)sts, (size_t)n, mac,
		  &mac_len)) {
		free(sts);
		return -1;
	}
	free(sts);
	if (cap < 4 * ((mac_len + 2) / 3) + 1)
		return -1;
	EVP_EncodeBlock((unsigned char *)out, mac, (int)mac_len);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

/* ---- the state of one location's credentials -------------------------------------------- */

struct wd_azure {
	enum wd_azure_source source;
	char *account;
	char *key_file; /* or NULL: the key came from AZURE_STORAGE_KEY */
	uint8_t key[KEY_MAX];
	size_t key_len;
	struct stat key_st; /* the key file as last read */
	char *ca_file;
	bool allow_http;
	/* Entra: where tokens come from, and the one in use */
	char *token_url; /* shown in errors; holds no secret */
	char *client_id, *tenant_id, *fed_file, *secret;
	char *token;
	int64_t token_expiry, token_got; /* unix seconds */
	bool token_refused; /* wd_azure_refused dropped the last token: no second retry for it */
	pthread_mutex_t lock;
};

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void wd_azure_free(struct wd_azure *a)
{
	if (!a)
		return;
	free(a->account);
	free(a->key_file);
	explicit_bzero(a->key, sizeof(a->key));
	free(a->ca_file);
	free(a->token_url);
	free(a->client_id);
	free(a->tenant_id);
	free(a->fed_file);
	wipe_free(a->secret);
	wipe_free(a->token);
	pthread_mutex_destroy(&a->lock);
	free(a);
}

int wd_azure_check(const char *url, const char *endpoint, const struct wd_azure_opts *o,
		   enum wd_azure_source *ret, weightd_error *err)
{
	struct wd_azure_opts ao = *o;
	char *base = NULL, *account = NULL, *query = NULL;
	struct wd_azure *a = NULL;
	int r;

	r = wd_azure_url(url, endpoint, &base, &account, &query, err);
	if (r)
		return r;
	ao.has_sas = query[0] != '\0';
	r = wd_azure_new(account, &ao, &a, err);
	if (r == 0)
		*ret = a->source;
	wd_azure_free(a);
	free(base);
	free(account);
	explicit_bzero(query, strlen(query));
	free(query);
	return r;
}

enum wd_azure_source wd_azure_source(const struct wd_azure *a)
{
	return a->source;
}

/* A base64 account key into a->key. */
static int key_decode(struct wd_azure *a, const char *b64, const char *from, weightd_error *err)
{
	uint8_t buf[KEY_MAX + 4];
	size_t n = strlen(b64);
	int len;

	if (n == 0 || n % 4 != 0 || n / 4 * 3 > sizeof(buf))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "shared key: the account key in %s is not base64 of at most %d "
				    "bytes",
				    from, KEY_MAX);
	len = EVP_DecodeBlock(buf, (const unsigned char *)b64, (int)n);
	if (len < 0)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "shared key: the account key in %s is not base64", from);
	while (n && b64[n - 1] == '=') {
		n--;
		len--;
	}
	memcpy(a->key, buf, (size_t)len);
	a->key_len = (size_t)len;
	explicit_bzero(buf, sizeof(buf));
	return 0;
}

/* (Re)read the key file; its stat is kept to see when it changes. */
static int key_read(struct wd_azure *a, weightd_error *err)
{
	char *k = NULL, from[600];
	struct stat st;
	int r;

	if (stat(a->key_file, &st) < 0)
		return wd_error_set(
			err, errno == ENOENT ? WEIGHTD_E_NOT_FOUND : WEIGHTD_E_PERMISSION_DENIED,
			"shared key: key file %s: %s", a->key_file, strerror(errno));
	r = wd_remote_token(a->key_file, &k, err);
	if (r) {
		wd_error_prefix(err, "shared key");
		return r;
	}
	snprintf(from, sizeof(from), "key file %s", a->key_file);
	r = key_decode(a, k, from, err);
	wipe_free(k);
	if (r == 0)
		a->key_st = st;
	return r;
}

static bool same_file(const struct stat *x, const struct stat *y)
{
	return x->st_ino == y->st_ino && x->st_dev == y->st_dev && x->st_size == y->st_size &&
	       x->st_mtim.tv_sec == y->st_mtim.tv_sec && x->st_mtim.tv_nsec == y->st_mtim.tv_nsec;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static int dup_env(char **slot, const char *name, bool *oom)
{
	const char *v = env(name);

	if (!v)
		return 0;
	*slot = strdup(v);
	if (!*slot)
		*oom = true;
	return 1;
}

/* The token endpoint of a tenant: {authority}/{tenant}/oauth2/v2.0/token. */
static int entra_url(struct wd_azure *a, weightd_error *err)
{
	const char *auth = env("AZURE_AUTHORITY_HOST");
	size_t n;

	if (!auth)
		auth = AUTHORITY_DEFAULT;
	n = strlen(auth);
	while (n && auth[n - 1] == '/')
		n--;
	if (asprintf(&a->token_url, "%.*s/%s/oauth2/v2.0/token", (int)n, auth, a->tenant_id) < 0) {
		a->token_url = NULL;
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	return 0;
}

static bool tenant_ok(const char *t)
{
	if (!*t || strlen(t) > 128)
		return false;
	for (const char *p = t; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			return false;
	return true;
}

/* The chosen source's settings, checked without the network. */
static int prepare(struct wd_azure *a, const struct wd_azure_opts *o, weightd_error *err)
{
	bool oom = false;
	int r;

	switch (a->source) {
	case WD_AZURE_SAS:
		if (!o->has_sas)
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "sas: the URL carries no SAS token (its query: "
					    "?sv=...&sig=...)");
		return 0;
	case WD_AZURE_ANONYMOUS: return 0;
	case WD_AZURE_SHARED_KEY:
		if (o->has_sas)
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "shared key: the URL carries a query (a SAS token): "
					    "choose one of them");
		if (o->key_file) {
			a->key_file = strdup(o->key_file);
			if (!a->key_file)
				return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
						    "out of memory");
			return key_read(a, err);
		}
		if (!env("AZURE_STORAGE_KEY"))
			return wd_error_set(err, WEIGHTD_E_NOT_FOUND,
					    "shared key: no key: set azure_key_file, or "
					    "AZURE_STORAGE_KEY in weightd's environment");
		return key_decode(a, env("AZURE_STORAGE_KEY"), "AZURE_STORAGE_KEY", err);
	case WD_AZURE_WORKLOAD:
	case WD_AZURE_CLIENT_SECRET: {
		const char *what =
			a->source == WD_AZURE_WORKLOAD ? "workload identity" : "client secret";
		const char *need = a->source == WD_AZURE_WORKLOAD ? "AZURE_FEDERATED_TOKEN_FILE" :
								    "AZURE_CLIENT_SECRET";
		if (!env("AZURE_CLIENT_ID") || !env("AZURE_TENANT_ID") || !env(need))
			return wd_error_set(err, WEIGHTD_E_NOT_FOUND,
					    "%s: set AZURE_CLIENT_ID, AZURE_TENANT_ID and %s in "
					    "weightd's environment",
					    what, need);
		dup_env(&a->client_id, "AZURE_CLIENT_ID", &oom);
		dup_env(&a->tenant_id, "AZURE_TENANT_ID", &oom);
		dup_env(a->source == WD_AZURE_WORKLOAD ? &a->fed_file : &a->secret, need, &oom);
		if (oom)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		if (!tenant_ok(a->tenant_id))
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: AZURE_TENANT_ID is not a tenant id or domain",
					    what);
		if ((r = entra_url(a, err)) < 0)
			return r;
		if (strncmp(a->token_url, "https://", 8) != 0 &&
		    !(a->allow_http && strncmp(a->token_url, "http://", 7) == 0))
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "%s: AZURE_AUTHORITY_HOST must be an https:// URL",
					    what);
		return 0;
	}
	case WD_AZURE_MANAGED: {
		/* what azure-identity honours to move IMDS (tests, pod identity) */
		const char *host = env("AZURE_POD_IDENTITY_AUTHORITY_HOST");
		char *id = NULL;
		size_t n;
		if (!host)
			host = IMDS_DEFAULT;
		n = strlen(host);
		while (n && host[n - 1] == '/')
			n--;
		if (strncmp(host, "http://", 7) != 0 && strncmp(host, "https://", 8) != 0)
			return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					    "managed identity: AZURE_POD_IDENTITY_AUTHORITY_HOST "
					    "must be an http(s):// URL");
		a->allow_http = a->allow_http || strncmp(host, IMDS_DEFAULT, n) == 0;
		if (env("AZURE_CLIENT_ID"))
			id = curl_easy_escape(NULL, env("AZURE_CLIENT_ID"), 0);
		if (asprintf(&a->token_url,
			     "%.*s/metadata/identity/oauth2/token?api-version=2018-02-01&resource="
			     "https%%3A%%2F%%2Fstorage.azure.com%%2F%s%s",
			     (int)n, host, id ? "&client_id=" : "", id ? id : "") < 0)
			a->token_url = NULL;
		curl_free(id);
		if (!a->token_url)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		return 0;
	}
	case WD_AZURE_AUTO: break;
	}
	return wd_error_set(err, WEIGHTD_E_INTERNAL, "no credential source");
}

int wd_azure_new(const char *account, const struct wd_azure_opts *o, struct wd_azure **ret,
		 weightd_error *err)
{
	struct wd_azure *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	pthread_mutex_init(&a->lock, NULL);
	a->account = strdup(account);
	a->ca_file = o->ca_file ? strdup(o->ca_file) : NULL;
	a->allow_http = o->allow_http;
	if (!a->account || (o->ca_file && !a->ca_file)) {
		wd_azure_free(a);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	a->source = o->source;
	if (a->source == WD_AZURE_AUTO)
		a->source = o->has_sas				    ? WD_AZURE_SAS :
			    o->key_file || env("AZURE_STORAGE_KEY") ? WD_AZURE_SHARED_KEY :
			    env("AZURE_FEDERATED_TOKEN_FILE")	    ? WD_AZURE_WORKLOAD :
			    env("AZURE_CLIENT_SECRET")		    ? WD_AZURE_CLIENT_SECRET :
								      WD_AZURE_MANAGED;
	r = prepare(a, o, err);
	if (r) {
		wd_azure_free(a);
		return r;
	}
	*ret = a;
	return 0;
}

/* The federated token: a projected service-account token, re-read for every exchange (the
 * kubelet rotates it). Not held to the secret-file rule: kubelet writes it 0644 root. */
static int fed_read(const struct wd_azure *a, char **ret, weightd_error *err)
{
	char *buf;
	struct stat st;
	ssize_t n;
	size_t len;
	int fd = open(a->fed_file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		int e = errno;
		if (stat(a->fed_file, &st) == 0)
			return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
					    "workload identity: token file %s unreadable: %s "
					    "(mode %04o, owner uid %u; weightd runs as uid %u)",
					    a->fed_file, strerror(e),
					    (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
					    (unsigned)geteuid());
		return wd_error_set(err,
				    e == ENOENT ? WEIGHTD_E_NOT_FOUND : WEIGHTD_E_PERMISSION_DENIED,
				    "workload identity: token file %s unreadable: %s", a->fed_file,
				    strerror(e));
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > FED_TOKEN_MAX) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "workload identity: token file %s is not a regular file of at "
				    "most %d bytes",
				    a->fed_file, FED_TOKEN_MAX);
	}
	buf = malloc(FED_TOKEN_MAX + 1);
	if (!buf) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	n = read(fd, buf, FED_TOKEN_MAX);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	buf[len] = '\0';
	if (len == 0) {
		free(buf);
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "workload identity: token file %s is empty", a->fed_file);
	}
	*ret = buf;
	return 0;
}

/* A new token from the source's endpoint. Called with a->lock held. */
static int token_refresh(struct wd_azure *a, weightd_error *err)
{
	struct wd_azure_token_call call = { .url = a->token_url,
					    .ca_file = a->ca_file,
					    .allow_http = a->allow_http };
	char *form = NULL, *tok = NULL, *cred = NULL;
	int64_t expiry = 0;
	int r;

	if (a->source == WD_AZURE_MANAGED) {
		call.what = "managed identity";
	} else {
		char *id = curl_easy_escape(NULL, a->client_id, 0), *c;
		const char *raw;
		call.what = a->source == WD_AZURE_WORKLOAD ? "workload identity" : "client secret";
		if (a->source == WD_AZURE_WORKLOAD) {
			if ((r = fed_read(a, &cred, err)) < 0) {
				curl_free(id);
				return r;
			}
			raw = cred;
		} else {
			raw = a->secret;
		}
		c = curl_easy_escape(NULL, raw, 0);
		if (id && c &&
		    asprintf(&form, "grant_type=client_credentials&client_id=%s&scope=%s&%s%s", id,
			     "https%3A%2F%2Fstorage.azure.com%2F.default",
			     a->source == WD_AZURE_WORKLOAD ?
				     "client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-"
				     "assertion-type%3Ajwt-bearer&client_assertion=" :
				     "client_secret=",
			     c) < 0)
			form = NULL;
		curl_free(id);
		if (c) {
			explicit_bzero(c, strlen(c));
			curl_free(c);
		}
		wipe_free(cred);
		if (!form)
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		call.form = form;
	}
	r = wd_azure_token_fetch(&call, &tok, &expiry, err);
	wipe_free(form);
	if (r)
		return r;
	wipe_free(a->token);
	a->token = tok;
	a->token_expiry = expiry;
	a->token_got = (int64_t)time(NULL);
	if (a->token_refused && expiry - a->token_got > MANDATORY_S)
		a->token_refused = false; /* a new token gets its own retry */
	return 0;
}

/* The bearer token to send now, refreshed when near its expiry. Called with a->lock held. */
static int token_current(struct wd_azure *a, weightd_error *err)
{
	int64_t now = (int64_t)time(NULL), left, ahead;
	weightd_error e;
	int r;

	if (a->token) {
		left = a->token_expiry - now;
		ahead = (a->token_expiry - a->token_got) / 2;
		if (ahead > REFRESH_AHEAD_S)
			ahead = REFRESH_AHEAD_S;
		if (left > ahead)
			return 0;
	}
	wd_error_clear(&e);
	r = token_refresh(a, &e);
	if (r == 0)
		return 0;
	/* advisory: a token with some life left serves while the endpoint fails */
	if (a->token && !a->token_refused && a->token_expiry - now > MANDATORY_S)
		return 0;
	if (err)
		*err = e;
	return r;
}

bool wd_azure_refused(struct wd_azure *a)
{
	bool retry = false;

	if (a->source != WD_AZURE_WORKLOAD && a->source != WD_AZURE_CLIENT_SECRET &&
	    a->source != WD_AZURE_MANAGED)
		return false;
	pthread_mutex_lock(&a->lock);
	if (a->token && !a->token_refused) {
		/* the token was refused: the next request takes a new one */
		a->token_refused = true;
		a->token_expiry = 0;
		retry = true;
	}
	pthread_mutex_unlock(&a->lock);
	return retry;
}

static void http_date(char *buf, size_t cap)
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, cap, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

int wd_azure_headers(struct wd_azure *a, const char *url, const char *range, const char *if_match,
		     char *out, size_t cap, weightd_error *err)
{
	char date[64];
	const char *path;
	size_t at;
	int r = 0, n;

	http_date(date, sizeof(date));
	n = snprintf(out, cap, "x-ms-version: " WD_AZURE_VERSION "\nx-ms-date: %s\n", date);
	if (n < 0 || (size_t)n >= cap)
		return wd_error_set(err, WEIGHTD_E_INTERNAL, "request headers too long");
	at = (size_t)n;
	switch (a->source) {
	case WD_AZURE_SHARED_KEY: {
		char sig[128];
		pthread_mutex_lock(&a->lock);
		if (a->key_file) {
			struct stat st;
			if (stat(a->key_file, &st) == 0 && !same_file(&st, &a->key_st))
				r = key_read(a, err); /* rotated */
		}
		path = strstr(url, "://");
		path = path ? path + 3 + strcspn(path + 3, "/?") : url;
		if (r == 0) {
			char p[4096];
			snprintf(p, sizeof(p), "%.*s", (int)strcspn(path, "?#"), path);
			if (wd_azure_shared_key_sign(a->account, a->key, a->key_len, p, range,
						     if_match, date, WD_AZURE_VERSION, sig,
						     sizeof(sig)) < 0)
				r = wd_error_set(err, WEIGHTD_E_INTERNAL,
						 "shared key: signing failed");
		}
		pthread_mutex_unlock(&a->lock);
		if (r == 0) {
			n = snprintf(out + at, cap - at, "Authorization: SharedKey %s:%s\n",
				     a->account, sig);
			if (n < 0 || (size_t)n >= cap - at)
				r = wd_error_set(err, WEIGHTD_E_INTERNAL,
						 "request headers too long");
		}
		return r;
	}
	case WD_AZURE_WORKLOAD:
	case WD_AZURE_CLIENT_SECRET:
	case WD_AZURE_MANAGED:
		pthread_mutex_lock(&a->lock);
		r = token_current(a, err);
		if (r == 0) {
			n = snprintf(out + at, cap - at, "Authorization: Bearer %s\n", a->token);
			if (n < 0 || (size_t)n >= cap - at)
				r = wd_error_set(err, WEIGHTD_E_INTERNAL,
						 "request headers too long");
		}
		pthread_mutex_unlock(&a->lock);
		return r;
	default: return 0;
	}
}
