/* SPDX-License-Identifier: Apache-2.0 */
/* config.h - weightd's INI configuration: the daemon section and one section per checkpoint. */
#ifndef WD_CONFIG_H
#define WD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
	int line;            /* where the section starts, for messages */
};

struct config {
	char *path;                 /* the file it was read from */
	char *socket_path;
	mode_t socket_mode;
	gid_t socket_group;         /* (gid_t)-1: leave as created */
	char *shm_prefix;
	char *state_dir;            /* "" = no state index */
	bool verify_adopted;        /* recompute each re-adopted segment's digest at start */
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
	/* Limits per uid and per connection against other local users (README "Security model"). */
	uint32_t max_clients_per_uid;   /* root and the daemon's user are exempt (and have a reserve) */
	uint32_t client_max_queue_fds;  /* fds queued in one client's replies: past it, its requests
				         * wait until it reads */
	uint32_t uid_max_queue_fds;     /* the same over all connections of one uid */
	uint32_t uid_max_pending;       /* unit requests in flight over all connections of one uid */
	uint64_t idle_timeout_ms;       /* close a connection with nothing held or pending; 0 = never */
	uint64_t frame_timeout_ms;      /* close one stuck in the middle of a frame; 0 = never */
	uint64_t uid_max_partial_bytes; /* bytes of frames being received, per uid */
	uint64_t max_partial_bytes;     /* the same, all clients together */
	uint64_t max_temp_bytes;        /* recipe temporaries of running jobs; 0 = the budget's room */
	uint32_t client_max_segments;   /* segments one connection holds weights in (one daemon fd
				         * each) */
	uint32_t uid_max_segments;      /* the same summed over a uid's connections (never more
				         * than a quarter of the daemon's RLIMIT_NOFILE) */
	uint32_t uid_max_weights;       /* weights held, summed over a uid's connections */
	int log_level;              /* LOG_LVL_* or -1 when not set in the file */
	struct source_conf *sources;
	size_t n_sources;
};

/*
 * Load and validate `path`. Unknown keys and sections, bad numbers, sizes ("16G", "512M", bytes),
 * octal modes, unknown users/groups, duplicate checkpoint names, invalid shm prefixes: each is an
 * error "FILE:LINE: what is wrong" (-WEIGHTD_E_INVALID_ARGUMENT). Missing keys take the defaults
 * documented in systemd/weightd.conf.example.
 */
int config_load(const char *path, struct config **ret, weightd_error *err);
void config_free(struct config *cfg);

/* Parse "123", "64K", "512M", "16G", "1T" (powers of 1024). false on garbage or overflow. */
bool config_parse_size(const char *s, uint64_t *ret);

#endif
