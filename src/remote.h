/* SPDX-License-Identifier: Apache-2.0 */
/* remote.h - checkpoint objects in S3-compatible stores and on HTTP(S) servers, read by ranges. */
#ifndef WD_REMOTE_H
#define WD_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weightd/error.h>

/*
 * A remote location is what a checkpoint's `path` names when it is not a local file:
 *   s3://bucket/key            one object           s3://bucket/prefix/         a directory
 *   https://host/path/file     one object           https://host/path/          a directory
 *   http://...                 the same, only where the caller allows plain HTTP
 * An https URL may carry a query (a presigned S3 URL, an Azure SAS token): it is sent, never
 * shown; for a directory the query is kept after each member's name (a container SAS signs
 * every blob under it).
 *
 * Every request is a ranged GET (a presigned URL is signed for GET only, so even the identity of
 * an object is read with `Range: bytes=0-0`). An object is pinned by what its first answer said
 * (size, ETag, S3 version id); every later range is sent with `If-Match: <etag>` and its answer's
 * ETag is checked as well (servers that ignore If-Match exist), so an object replaced mid-load
 * fails with WEIGHTD_E_SOURCE_CHANGED instead of mixing two versions.
 *
 * HTTP, TLS, redirects and AWS SigV4 signing are libcurl's (CURLOPT_AWS_SIGV4). What weightd adds:
 * the URLs, the identity pin, retries with exponential backoff and full jitter on 5xx, 429, S3's
 * SlowDown, resets and truncated bodies, each retry asking only for the bytes still missing, and
 * errors that say what failed (the URL without its query, the HTTP status, S3's error code).
 *
 * Thread safety: a struct wd_remote is immutable once open, and its functions may run on many
 * threads at once; connections are kept and reused across calls and threads (a curl share).
 * Nothing here logs, and no secret is ever written into an error.
 */

struct wd_remote;
struct wd_azure_opts;

/* How to reach a location. Strings are copied by wd_remote_open; NULL or 0 picks the default. */
struct wd_remote_opts {
	const char
		*endpoint;  /* s3: scheme://host[:port] (NULL: https://s3.<region>.amazonaws.com) */
	const char *region; /* s3: the signing region (NULL: us-east-1) */
	bool path_style;    /* s3: endpoint/bucket/key, not bucket.endpoint/key */
	const char *access_key; /* s3: credentials (see wd_remote_credentials); NULL: unsigned */
	const char *secret_key;
	const char *session_token;   /* s3: temporary credentials' token, or NULL */
	const char *bearer_token;    /* http(s): sent as "Authorization: Bearer ..." */
	const char *ca_file;	     /* PEM bundle to verify servers with (NULL: the system's) */
	bool allow_http;	     /* plain http:// may be used (also after a redirect) */
	unsigned connect_timeout_ms; /* default 10,000 */
	unsigned
		low_speed_time_s; /* a transfer under low_speed_bytes/s this long fails; default 30 */
	unsigned low_speed_bytes; /* default 1,024 */
	unsigned retries;	  /* attempts after the first, per range; default 6 */
	unsigned backoff_ms;	  /* the first retry's wait bound; doubles each time; default 200 */
	unsigned backoff_max_ms;  /* default 10,000 */
	/* az:// and Azure https:// URLs: how requests are signed (azure.h; NULL: the source
	 * chosen by itself). endpoint is then the account's blob service URL. */
	const struct wd_azure_opts *azure;
};

/* Per-location counters, updated atomically by every call. */
struct wd_remote_counters {
	uint64_t bytes;	   /* payload bytes received */
	uint64_t requests; /* requests sent, retries included */
	uint64_t retries;  /* requests that were retries */
	uint64_t errors;   /* calls that failed */
};

#define WD_REMOTE_ETAG_MAX    256
#define WD_REMOTE_VERSION_MAX 256
#define WD_REMOTE_SHOWN_MAX   1024

/* One object, as its first answer described it. */
struct wd_remote_object {
	char *url; /* the request URL (may hold a signed query: never shown) */
	char shown[WD_REMOTE_SHOWN_MAX]; /* the URL without userinfo, query or fragment */
	uint64_t size;
	char etag[WD_REMOTE_ETAG_MAX]; /* as sent, quotes included; "" when the server sent none */
	char version[WD_REMOTE_VERSION_MAX]; /* x-amz-version-id, or "" */
};

/*
 * What an HTTP answer's headers said, parsed from what the server sent (untrusted bytes; the
 * fuzzer drives these two parsers). A status line starts a new answer, as after a redirect.
 * have_range with range_start UINT64_MAX is "bytes * /TOTAL" (an unsatisfiable range).
 */
struct wd_remote_answer {
	long status;
	bool have_range;
	uint64_t range_start, range_total;
	char etag[WD_REMOTE_ETAG_MAX];
	char version[WD_REMOTE_VERSION_MAX];
};
/* Take one header line (n bytes, CRLF included or not) into a. */
void wd_remote_answer_header(struct wd_remote_answer *a, const char *line, size_t n);
/* S3's " (Code: Message)" from a NUL-terminated error body, printable ASCII; "" when it has no
 * <Code>. Always NUL-terminated within cap. */
void wd_remote_s3_reason(const char *body, char *buf, size_t cap);

/* Is `path` a remote location (s3://, az://, https://, http://) rather than a local path? */
bool wd_remote_is_url(const char *path);

/*
 * Parse `url` and prepare to read it. 0, or -WEIGHTD_E_INVALID_ARGUMENT (a malformed URL, http://
 * without allow_http, an s3:// URL with no bucket) / -WEIGHTD_E_RESOURCE_EXHAUSTED. *ret owned by
 * the caller (wd_remote_free).
 */
int wd_remote_open(const char *url, const struct wd_remote_opts *opts, struct wd_remote **ret,
		   weightd_error *err);
void wd_remote_free(struct wd_remote *r);

/* Does the location name a directory (it ends in '/')? */
bool wd_remote_is_dir(const struct wd_remote *r);
/* The location as it may be shown: no userinfo, query or fragment. Lives as long as r. */
const char *wd_remote_shown(const struct wd_remote *r);
/* A snapshot of the counters. */
void wd_remote_counters(const struct wd_remote *r, struct wd_remote_counters *ret);

/*
 * Pin one object: `name` NULL for the location itself, or a member's name (plain file name, no
 * '/' at either end, no "." or ".." component) for a directory. 0, or -WEIGHTD_E_NOT_FOUND (404),
 * -WEIGHTD_E_PERMISSION_DENIED (401/403), -WEIGHTD_E_IO (anything else, retries spent),
 * -WEIGHTD_E_CANCELLED. *ret is filled only on success; wd_remote_object_clear frees its URL.
 */
int wd_remote_stat(struct wd_remote *r, const char *name, struct wd_remote_object *ret,
		   weightd_error *err);
void wd_remote_object_clear(struct wd_remote_object *o);

/*
 * Read [off, off + len) of a pinned object into buf: all of it, or an error
 * (-WEIGHTD_E_SOURCE_CHANGED when the object is no longer the one pinned, -WEIGHTD_E_OUT_OF_RANGE
 * past its end, -WEIGHTD_E_CANCELLED after wd_remote_stop, the rest as wd_remote_stat). One
 * request (and its retries) on one connection: for payload at line rate, wd_remote_fetch.
 */
int wd_remote_read(struct wd_remote *r, const struct wd_remote_object *o, uint64_t off, void *buf,
		   size_t len, weightd_error *err);

/* One range of an object written to an fd (a segment) at fd_off, with pwrite. */
struct wd_remote_range {
	uint64_t off;
	uint64_t len;
	int fd;
	uint64_t fd_off;
};

/* How one wd_remote_fetch runs. Zeroed fields take the defaults. */
struct wd_remote_fetch_opts {
	/* transfers this call runs at once, at most (default 1); the node's limit
	 * (wd_remote_set_limit) bounds all calls together */
	unsigned concurrency;
	uint64_t chunk;		    /* bytes per request (default WD_REMOTE_CHUNK_DEFAULT) */
	const volatile int *cancel; /* polled: nonzero stops the fetch */
	uint64_t *progress; /* when not NULL, gets the bytes written added as they are (atomic) */
	/* Called on the calling thread as soon as every byte of ranges[i] is written, while the
	 * rest goes on arriving (a digest of what landed); a negative return (err set) fails the
	 * fetch with it. */
	int (*range_done)(void *arg, size_t i, weightd_error *err);
	/* Called on the calling thread with each piece of payload just written for ranges[i], in
	 * order and each byte once (a digest of what arrives, while it is in cache). Only for
	 * fetches whose every range is one request (no longer than chunk): the call is refused
	 * otherwise. A negative return (err set) fails the fetch with it. */
	int (*range_data)(void *arg, size_t i, const void *data, size_t n, weightd_error *err);
	/* Called on the calling thread, between two polls, while no byte has arrived for
	 * WD_REMOTE_STALL_MS: the caller may do other work meanwhile (a worker serving others
	 * while a server stalls); the transfers wait for it to return. */
	void (*stalled)(void *arg);
	void *arg;
};

#define WD_REMOTE_STALL_MS 1000u

#define WD_REMOTE_CHUNK_DEFAULT	      (16u << 20)
#define WD_REMOTE_CONCURRENCY_DEFAULT 16u

/*
 * Fetch every range, split into pieces of at most `chunk` bytes, over up to `concurrency`
 * connections at once, each piece written straight into its fd as it arrives (no temporary
 * file, no whole-object buffer). A piece that breaks is retried for its missing bytes only.
 * Returns 0 when every byte is written, or the first error (the rest are then abandoned; what
 * was written is the caller's to discard). A cancel (opts->cancel, or wd_remote_stop) stops the
 * fetch within about 100 ms with -WEIGHTD_E_CANCELLED.
 */
int wd_remote_fetch(struct wd_remote *r, const struct wd_remote_object *o,
		    const struct wd_remote_range *ranges, size_t n,
		    const struct wd_remote_fetch_opts *opts, weightd_error *err);

/*
 * The node's limit: transfers running at once across every location, call and thread of the
 * process (requests of wd_remote_stat, wd_remote_read and wd_remote_fetch alike; default
 * WD_REMOTE_CONCURRENCY_DEFAULT). A call that has none waits for one; a call that has some takes
 * another only while no other call waits, so one large fetch cannot starve the rest. Lowering
 * it lets the transfers above it finish. Any thread.
 */
void wd_remote_set_limit(unsigned transfers);
/* Transfers running now, and the most that ever ran at once (for tests and status). */
void wd_remote_slots(unsigned *ret_in_use, unsigned *ret_peak);

/*
 * Stopping (on): every transfer in flight and every later one, of every location, fails with
 * -WEIGHTD_E_CANCELLED within about 100 ms. What a daemon does on SIGTERM, so that workers in a
 * stalled transfer come back within its stop timeout. off: transfers run again (tests). Any
 * thread; async-signal-safe.
 */
void wd_remote_stop(bool on);

/*
 * S3 credentials from an AWS shared-credentials file (INI: [profile] with aws_access_key_id,
 * aws_secret_access_key and optionally aws_session_token), or, with file NULL, from the
 * environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). A file that anyone
 * but its owner can read, or that is owned by another user than this process's (root excepted),
 * is refused. The strings are malloc'd into ret (wd_remote_credentials_clear wipes and frees).
 */
struct wd_remote_credentials {
	char *access_key;
	char *secret_key;
	char *session_token; /* or NULL */
};
int wd_remote_credentials(const char *file, const char *profile, struct wd_remote_credentials *ret,
			  weightd_error *err);
/* A bearer token: the first line of `file`, under the same ownership rule. *ret malloc'd. */
int wd_remote_token(const char *file, char **ret, weightd_error *err);
void wd_remote_credentials_clear(struct wd_remote_credentials *c);

#endif
