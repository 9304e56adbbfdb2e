/* SPDX-License-Identifier: Apache-2.0 */
/* config.h - weightd's INI configuration: the daemon section and one section per checkpoint. */
#ifndef WD_CONFIG_H
#define WD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "digest.h"
#include "error.h"

struct source_conf {
	char *name;          /* from the section header [checkpoint:NAME] */
	char *path;
	uid_t *allow_uids;   /* resolved from names or numbers at load time */
	size_t n_uids;
	gid_t *allow_gids;
	size_t n_gids;
	bool allow_any;      /* neither allow_users nor allow_groups given: any peer of the socket */
	bool preload;
	bool required;		 /* readiness needs it admitted (health.c) */
	bool watch;		 /* reload it by itself when its files change (inotify) */
	uint64_t watch_delay_ms; /* ... once they have been quiet this long */
	bool drop_page_cache;	 /* evict the file pages a fill read (wd_source_set_drop_cache) */
	/* A remote path (s3://, https://, http://): how to reach it. NULL: not set. */
	char *endpoint;		/* s3: scheme://host[:port] */
	char *region;		/* s3: signing region */
	bool path_style;	/* s3: endpoint/bucket/key */
	char *credentials_file; /* s3: AWS shared-credentials INI */
	char *profile;		/* s3: its profile */
	char *credentials;	/* s3: auto, env, web-identity, container, imds or file */
	bool imds_v1;		/* s3: instance metadata without a session token allowed */
	char *token_file;	/* http(s): bearer token */
	char *ca_file;		/* PEM bundle verifying servers */
	bool allow_http;	/* plain http:// allowed */
	char *azure_credentials; /* az: auto, sas, shared-key, workload-identity, ... */
	char *azure_key_file;	 /* az: the storage account key */
	int line;            /* where the section starts, for messages */
};

struct config {
	char *path;                 /* the file it was read from */
	char *socket_path;
	mode_t socket_mode;
	gid_t socket_group;         /* (gid_t)-1: leave as created */
	char *shm_prefix;
	char *metrics_listen;       /* "" or an address:port serving GET /metrics */
	bool metrics_public;        /* metrics_listen may be a non-loopback address */
	/* The admin socket: reload and evict are answered there only, to root, weightd's user and
	 * admin_users/admin_groups; on the engine socket root is an ordinary client. single_socket:
	 * no admin socket, root and weightd's user administer through the one socket. */
	char *admin_socket;
	mode_t admin_socket_mode;
	gid_t admin_socket_group;
	uid_t *admin_uids;
	size_t n_admin_uids;
	gid_t *admin_gids;
	size_t n_admin_gids;
	bool single_socket;
	uint64_t admit_retry_max_ms;    /* cap of a failed remote admission's backoff; 0: no retry */
	char *state_dir;            /* "" = no state index */
	char *segment_dir;	    /* "" = segments in /dev/shm; else a private tmpfs directory */
	bool verify_adopted;        /* recompute each re-adopted segment's digest at start */
	bool hold_locks;            /* clients' kernel locks on what they map (src/holdlock.h) */
	enum wd_digest_alg digest;  /* content digest of new weights (default XXH3-128) */
	uint64_t budget_bytes;      /* 0 = half of /dev/shm's size at start */
	uint32_t workers;           /* 0 = number of online CPUs */
	uint32_t max_clients;
	uint32_t client_max_pending;
	uint64_t client_max_queue_bytes;
	uint64_t client_max_bytes;  /* 0 = unlimited */
	uint32_t client_max_weights;/* 0 = unlimited */
	uint32_t max_frame_bytes;
	uint64_t max_message_bytes; /* a request spanning frames, joined */
	uint32_t max_unit_entries;  /* entries, and aliases, of one unit */
	uint64_t segment_max_bytes; /* packing cap of one shared-memory segment */
	uint32_t max_idle_weights;  /* cached weights nobody holds (0 = unlimited) */
	uint32_t max_idle_segments; /* segments none of whose weights anyone holds (0 = unlimited) */
	uint32_t remote_concurrency; /* range requests in flight, node-wide (fill_remote_set) */
	uint64_t remote_chunk_bytes; /* bytes per range request of remote payload */
	uint64_t remote_gap_bytes;   /* a gap between two wanted ranges one request bridges */
	/* Limits per uid and per connection against other local users (docs/security.md). */
	uint32_t max_clients_per_uid;   /* root and the daemon's user are exempt (and have a reserve) */
	uint32_t client_max_queue_fds;  /* fds queued in one client's replies: past it, its requests
				         * wait until it reads */
	uint32_t uid_max_queue_fds;     /* the same over all connections of one uid */
	uint32_t uid_max_pending;       /* unit requests in flight over all connections of one uid */
	/* Which of the three per-uid fd limits the file gives: a default is cut to its share of
	 * RLIMIT_NOFILE without a word, a value given is cut with a warning (uid.c). */
	bool uid_max_segments_set, uid_max_queue_fds_set, uid_max_pending_set;
	uint64_t idle_timeout_ms;       /* close a connection with nothing held or pending; 0 = never */
	uint64_t first_request_timeout_ms; /* close one that never asks for anything; 0 = never */
	uint64_t frame_timeout_ms;      /* close one stuck in the middle of a frame; 0 = never */
	uint64_t uid_max_partial_bytes; /* bytes of frames being received, per uid */
	uint64_t max_partial_bytes;     /* the same, all clients together */
	uint64_t max_temp_bytes;        /* recipe temporaries of running jobs; 0 = the budget's room */
	uint32_t client_max_segments;   /* segments one connection holds weights in (one daemon fd
				         * each) */
	uint32_t uid_max_segments;      /* the same summed over a uid's connections (never more
				         * than a quarter of the daemon's RLIMIT_NOFILE) */
	uint32_t uid_max_weights;       /* weights held, summed over a uid's connections */
	/* Remote checkpoints (s3://, https://): how long to wait and how often to try again. */
	uint64_t remote_connect_timeout_ms; /* to connect, TLS included */
	uint64_t remote_low_speed_time_ms;  /* a transfer under 1 KiB/s this long fails */
	uint32_t remote_retries;	    /* attempts after the first, per range */
	uint32_t uid_budget_share;      /* percent of the budget one uid may hold (holds.c) */
	uid_t *budget_uids;             /* uids that may hold the whole budget, like root */
	size_t n_budget_uids;
	uint64_t uid_max_unit_memory;   /* heap of a uid's requests being decoded, planned or made */
	int log_level;              /* LOG_LVL_* or -1 when not set in the file */
	struct source_conf *sources;
	size_t n_sources;
};

/*
 * The keys of weightd.conf, one row each in config_keys[] (config_keys.c): parsing, defaults and
 * what a reload does all follow the row, and docs/weightd.conf.5 documents every row (a unit test
 * holds them to each other).
 */
enum config_section { CONFIG_NONE, CONFIG_DAEMON, CONFIG_CHECKPOINT };

/* What a value is: each type has one parser and one error sentence (config_value.c). */
enum config_type {
	CONFIG_T_PATH,      /* absolute path of at most `max` bytes */
	CONFIG_T_LOCATION,  /* an absolute path, or an s3://, https:// or http:// URL */
	CONFIG_T_URL,       /* an http:// or https:// URL of a server: scheme, host, port */
	CONFIG_T_NAME,      /* 1 to `max` of A-Z a-z 0-9 _ . -, not starting with '.' or '-' */
	CONFIG_T_MODE,      /* octal permission bits, at most `max` */
	CONFIG_T_GROUP,     /* a group name or id; empty: (gid_t)-1, the group it is created with */
	CONFIG_T_BOOL,      /* yes/no, true/false, on/off, 1/0 */
	CONFIG_T_DIGEST,    /* a content digest algorithm by name (enum wd_digest_alg) */
	CONFIG_T_LOG_LEVEL, /* a level name (LOG_LVL_*); -1 until the file names one */
	CONFIG_T_SIZE,      /* bytes, or a number and K, M, G, T or P; `min` to `max` */
	CONFIG_T_COUNT,     /* a whole number, `min` to `max` */
	CONFIG_T_DURATION,  /* seconds, or a number and ms, s, m or h; in ms, at most `max` */
	CONFIG_T_USERS,     /* users or uids: the array at `field`, its length at `count` */
	CONFIG_T_GROUPS,    /* groups or gids, the same way */
	CONFIG_T_LISTEN,    /* an address and port (config_parse_listen); empty: off */
};

/* What a reload does when the file gives a [daemon] key a new value. Checkpoint keys are all
 * taken anew (the catalog's reload). */
enum config_reload {
	CONFIG_LIVE,    /* applied at once, with a notice naming the key and both values */
	CONFIG_RESTART, /* the running value stays, with a warning that only a restart applies it */
	CONFIG_START,   /* read at start only: the running value stays and the reload says
			 * nothing (some are cut at start to a share of RLIMIT_NOFILE, so the
			 * file's value is not the one in force) */
};

/* Row flags. */
#define CONFIG_EMPTY_OK    0x1u /* may be empty: "" for a path, (gid_t)-1 for a group */
#define CONFIG_REQUIRED    0x2u /* the section must set it */
#define CONFIG_SOCKET_UNIT 0x4u /* under socket activation the .socket unit decides it instead */
#define CONFIG_NEW_CONNS   0x8u /* a reload applies it to connections made afterwards */

struct config_key {
	enum config_section section;
	const char *name;
	enum config_type type;
	uint64_t min, max;      /* bounds of a number or size; longest path or name; largest mode */
	size_t field, width;    /* offsetof and size in struct config or struct source_conf */
	size_t count;           /* lists: offsetof their length */
	const char *def;        /* the default, written as in the file; NULL: none */
	enum config_reload reload;
	unsigned flags;
	const char *doc;        /* one line: what it sets */
};

/* Every key; a reload reports changed keys in this order, so keys whose change it only warns
 * about come first, then budget and log_level, then the other live keys. */
extern const struct config_key config_keys[];
extern const size_t config_n_keys;

/*
 * An address to listen on over TCP: "127.0.0.1:9464", "[::1]:9464" or "localhost:9464" (an IP
 * literal, never a name to look up). Loopback only (127.0.0.0/8, ::1) unless `any`: the endpoint
 * has no authentication, and what it shows (checkpoint names, sizes) is for the host's own
 * collector unless the operator opts in (metrics_public). 0 and the socket address, or -1 and
 * *ret_why (a constant sentence).
 */
int config_parse_listen(const char *val, bool any, struct sockaddr_storage *ret_ss,
			socklen_t *ret_len, const char **ret_why);

/* The row of `name` in `section`, or NULL. */
const struct config_key *config_key_find(enum config_section section, const char *name);
/* The value of a number-like key (every type but paths, names and lists) in `base` (a struct
 * config or struct source_conf), widened. */
uint64_t config_key_get(const struct config_key *k, const void *base);
/* Copy a number-like key's value from `src` to `dst`. */
void config_key_copy(const struct config_key *k, void *dst, const void *src);
/* The value of a path or name key. */
const char *config_key_str(const struct config_key *k, const void *base);

/*
 * Load and validate `path`. Unknown keys and sections, bad numbers, sizes ("16G", "512M", bytes),
 * octal modes, unknown users/groups, duplicate checkpoint names, invalid shm prefixes: each is an
 * error "FILE:LINE: what is wrong" (-WEIGHTD_E_INVALID_ARGUMENT). Missing keys take the defaults
 * of config_keys[]. Reading goes on past an error, so that every one is found; err holds the
 * first by line, with the count of the others.
 */
int config_load(const char *path, struct config **ret, weightd_error *err);
/* Called with each error found, "FILE:LINE: what is wrong", in line order. */
typedef void config_report_fn(void *ctx, const char *line);
/* config_load, with every error found also handed to `report` (when not NULL). */
int config_load_report(const char *path, struct config **ret, weightd_error *err,
		       config_report_fn *report, void *ctx);
void config_free(struct config *cfg);

/* Parse "123", "64K", "512M", "16G", "1T" (powers of 1024). false on garbage or overflow. */
bool config_parse_size(const char *s, uint64_t *ret);

#endif
