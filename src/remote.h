/* SPDX-License-Identifier: Apache-2.0 */
/* remote.h - checkpoint objects in S3-compatible stores and on HTTP(S) servers, read by ranges
 * (remote.c, remote_cred.c, remote_plan.c). */
#ifndef WD_REMOTE_H
#define WD_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
struct wd_aws_cred;
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
	/* s3: keys fetched per request from this provider (aws_cred.h; a reference is taken),
	 * instead of access_key/secret_key; an ExpiredToken answer is retried once with new keys */
	struct wd_aws_cred *aws_cred;
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
	uint64_t ranges;   /* ranges of a fetch served by the requests (coalesced: many per one) */
	uint64_t gap_bytes; /* bytes received only to bridge a gap between two ranges */
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

/* The credential provider the location signs with, or NULL. Lives as long as r. */
struct wd_aws_cred *wd_remote_aws_cred(const struct wd_remote *r);
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
 * wd_remote_stat that also keeps the object's first bytes: it asks for [0, cap) instead of
 * [0, 1), and what came (min(cap, size) bytes) is in buf, their count in *ret_got. One request
 * where a pin and a read of a header would take two (or three: a safetensors header's length,
 * then the header).
 */
int wd_remote_stat_prefix(struct wd_remote *r, const char *name, void *buf, size_t cap,
			  size_t *ret_got, struct wd_remote_object *ret, weightd_error *err);

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
	/* the object read (pinned through the same location), or NULL: the call's object. One
	 * fetch may read many objects of a location at once (a checkpoint's shards), sharing its
	 * connections among them. */
	const struct wd_remote_object *obj;
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
	 * order and each byte once (a digest of what arrives, while it is in cache), for every
	 * range that one request reads whole. A range that several requests read (longer than
	 * chunk, or cut where a coalesced request ends) gets no call: its range_done reads it
	 * back. A negative return (err set) fails the fetch with it. */
	int (*range_data)(void *arg, size_t i, const void *data, size_t n, weightd_error *err);
	/* Coalesce (wd_remote_plan): ranges of one object are read by as few requests of at most
	 * chunk bytes as possible, bridging a gap between two of them of at most `gap` bytes
	 * (the bytes a request's round trip could have carried: fetching them costs less than
	 * asking again); each request's bytes stream into every range it covers. Off: one
	 * request (or several, chunk bytes each) per range. */
	bool coalesce;
	uint64_t gap;
	/* Called on the calling thread, between two polls, while no byte has arrived for
	 * WD_REMOTE_STALL_MS: the caller may do other work meanwhile (a worker serving others
	 * while a server stalls); the transfers wait for it to return. */
	void (*stalled)(void *arg);
	void *arg;
};

#define WD_REMOTE_STALL_MS 1000u
#define WD_REMOTE_GAP_DEFAULT (1u << 20)

#define WD_REMOTE_CHUNK_DEFAULT	      (16u << 20)
#define WD_REMOTE_CONCURRENCY_DEFAULT 16u

/*
 * Fetch every range (of o, or of its own obj), split into pieces of at most `chunk` bytes (or
 * coalesced, opts->coalesce), over up to `concurrency` connections at once spread over every
 * object, each piece written straight into its fds as it arrives (no temporary file, no
 * whole-object buffer). A piece that breaks is retried for its missing bytes only.
 * Returns 0 when every byte is written, or the first error (the rest are then abandoned; what
 * was written is the caller's to discard). A cancel (opts->cancel, or wd_remote_stop) stops the
 * fetch within about 100 ms with -WEIGHTD_E_CANCELLED.
 */
int wd_remote_fetch(struct wd_remote *r, const struct wd_remote_object *o,
		    const struct wd_remote_range *ranges, size_t n,
		    const struct wd_remote_fetch_opts *opts, weightd_error *err);

/* One range wanted of an object (obj: any number naming it) and one request the planner makes. */
struct wd_remote_want {
	size_t obj;
	uint64_t off, len;
};
struct wd_remote_req {
	size_t obj;
	uint64_t off, len;
	size_t first, last; /* it covers the wants order[first..last) (order: wd_remote_plan's) */
	uint64_t waste;	    /* its bytes that no want covers (bridged gaps) */
};

/*
 * The coalescer: plan reads of wants[0..n) as requests. order (n entries) gets the wants'
 * indices sorted by object, offset, and the longer first. Walking that order, a want joins the
 * open request when merge is on, it is of the same object, the hole before it is at most `gap`
 * bytes and the request stays within chunk bytes; otherwise the open request is closed and the
 * want starts the next. A want longer than chunk is read by whole chunk-sized requests of its
 * own, its tail opening the next request (so it straddles them). Overlapping wants share the
 * request that reads their bytes. Zero-length wants are covered by no request. The requests
 * covering a want together read each of its bytes exactly once; requests come in want order
 * (their `first` ascending). 0, with *ret (malloc'd,
 * *ret_n entries; NULL when there are none) the caller's, or -EINVAL (chunk 0) / -ENOMEM.
 * Pure: any thread.
 */
int wd_remote_plan(const struct wd_remote_want *wants, size_t n, uint64_t chunk, bool merge,
		   uint64_t gap, size_t *order, struct wd_remote_req **ret, size_t *ret_n);

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
/* A file of secrets opened under that rule (and at most 64 KiB); `what` names it in errors. */
int wd_remote_secret_open(const char *file, const char *what, FILE **ret, weightd_error *err);

#endif
