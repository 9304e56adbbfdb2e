/* SPDX-License-Identifier: Apache-2.0 */
/* azure.h - Azure Blob Storage: az:// URLs, Shared Key signatures, SAS, Microsoft Entra tokens. */
#ifndef WD_AZURE_H
#define WD_AZURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weightd/error.h>

/*
 * A blob location is az://ACCOUNT/CONTAINER/BLOB (or .../PREFIX/ for a directory), or
 * https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB. An endpoint, when given, is the
 * account's blob service URL (what a connection string calls BlobEndpoint), e.g.
 * http://127.0.0.1:10000/devstoreaccount1 for Azurite; otherwise it is
 * https://ACCOUNT.blob.core.windows.net.
 *
 * Requests are signed by one of the credential sources (enum wd_azure_source). Shared Key signs
 * each request with HMAC-SHA256 (OpenSSL) over Microsoft's canonical form; SAS is the URL's own
 * query; the Entra sources send a bearer token for https://storage.azure.com, fetched with libcurl
 * from the token endpoint and refreshed before it expires, one refresh at a time for every
 * transfer of the location. A key file, a federated token file or a client secret file is read
 * again when it changes, so a rotated Kubernetes Secret or projected token is taken up by the
 * next request. No secret is ever written into an error.
 */

enum wd_azure_source {
	WD_AZURE_AUTO = 0,	/* the first that applies, in the order below */
	WD_AZURE_SAS,		/* the URL carries a SAS token */
	WD_AZURE_SHARED_KEY,	/* key_file, or AZURE_STORAGE_KEY */
	WD_AZURE_WORKLOAD,	/* AZURE_FEDERATED_TOKEN_FILE + AZURE_CLIENT_ID + AZURE_TENANT_ID */
	WD_AZURE_CLIENT_SECRET, /* AZURE_CLIENT_SECRET (+ client and tenant ids) */
	WD_AZURE_MANAGED,	/* the IMDS token endpoint */
	WD_AZURE_ANONYMOUS,	/* no credentials: a public container */
};

/* "auto", "sas", "shared-key", "workload-identity", "client-secret", "managed-identity",
 * "anonymous"; -1 for any other word. */
int wd_azure_source_parse(const char *word);
const char *wd_azure_source_name(enum wd_azure_source s);

/* Is `url` az://, or https://... on *.blob.core.windows.net? */
bool wd_azure_is_url(const char *url);

/*
 * The request URL (no query) for az:// or Azure https `url` with `endpoint` (NULL: Azure's),
 * the account, and the query ("" or "?sv=..."). 0 or -WEIGHTD_E_INVALID_ARGUMENT (err says
 * what is wrong with the URL, shown without its query). The three strings are malloc'd.
 */
int wd_azure_url(const char *url, const char *endpoint, char **ret_base, char **ret_account,
		 char **ret_query, weightd_error *err);

/* How to sign one location's requests. Strings are copied. */
struct wd_azure_opts {
	enum wd_azure_source source;
	const char *key_file; /* shared key: the base64 account key (NULL: AZURE_STORAGE_KEY) */
	const char *ca_file;  /* verifies token endpoints too (NULL: the system's) */
	bool allow_http;      /* token endpoints may be plain http:// (tests, IMDS is http) */
	bool has_sas;	      /* the URL carries a query */
};

struct wd_azure;

/*
 * Decide the source (auto: SAS when the URL has a query, then a shared key, workload identity,
 * a client secret, else the managed identity) and check it can work: the key read, the
 * variables set. No network. 0, or the error naming the source and why it cannot be used.
 */
int wd_azure_new(const char *account, const struct wd_azure_opts *o, struct wd_azure **ret,
		 weightd_error *err);
void wd_azure_free(struct wd_azure *a);

/*
 * What wd_azure_new would decide for `url` (az:// or Azure https) with `endpoint` and o (its
 * has_sas taken from the URL), without the network: 0 with the source into *ret, or the error
 * naming the source and why it cannot be used. For --check-config.
 */
int wd_azure_check(const char *url, const char *endpoint, const struct wd_azure_opts *o,
		   enum wd_azure_source *ret, weightd_error *err);
enum wd_azure_source wd_azure_source(const struct wd_azure *a);

/*
 * The headers of one GET of `url` (as sent: its path percent-encoded) with `range` ("bytes=A-B")
 * and `if_match` ("" for none): x-ms-version, x-ms-date, and the Authorization a source needs,
 * as "Name: value" lines each ended by '\n', into out. A token source fetches or refreshes its
 * token here when it is missing or near expiry (the calling thread waits; others wait for the
 * same refresh). 0, or an error naming the source and why it failed. Any thread.
 */
int wd_azure_headers(struct wd_azure *a, const char *url, const char *range, const char *if_match,
		     char *out, size_t cap, weightd_error *err);

/*
 * A request answered 401 or 403: when the source's token may have been refused for its age
 * (revoked, or a clock that disagrees), drop it so the next request fetches a new one, and say
 * that one retry is worth it (true once per token). Any thread.
 */
bool wd_azure_refused(struct wd_azure *a);

/*
 * Shared Key: the signature (base64 HMAC-SHA256 with the decoded key) of a GET's string to sign.
 * Exposed for the tests, which check it against an independent implementation.
 */
int wd_azure_shared_key_sign(const char *account, const uint8_t *key, size_t key_len,
			     const char *url_path, const char *range, const char *if_match,
			     const char *date, const char *version, char *out, size_t cap);

#define WD_AZURE_VERSION "2021-08-06" /* the x-ms-version every request carries */

/* ---- untrusted answers (azure_parse.c; fuzzed) ---- */

/*
 * Azure's error XML (<Error><Code>..</Code><Message>..</Message></Error>) as " (Code: Message)",
 * the message's first line only (Azure appends RequestId and Time lines), printable ASCII; "" when
 * it has no Code. Always NUL-terminated within cap.
 */
void wd_azure_error_reason(const char *body, size_t n, char *buf, size_t cap);

/* A token endpoint's JSON answer. */
struct wd_azure_token_answer {
	char *access_token; /* malloc'd, or NULL */
	int64_t expires_in; /* seconds from now, -1 when absent */
	int64_t expires_on; /* unix seconds, -1 when absent */
	char error[256];    /* "error: error_description" (first line, printable) or "" */
};
/* 0 with t filled (access_token NULL when the answer had none), or -1 when the bytes are not a
 * JSON object (err says so). The token is a header value: printable, no spaces, bounded. */
int wd_azure_token_parse(const char *body, size_t n, struct wd_azure_token_answer *t,
			 weightd_error *err);
void wd_azure_token_answer_clear(struct wd_azure_token_answer *t);

#endif
