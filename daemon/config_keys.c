/* SPDX-License-Identifier: Apache-2.0 */
/* config_keys.c - every key of weightd.conf, one row each: its section, name, type, bounds, the
 * field it sets, its default, what a reload does with it and one line saying what it is. A new
 * key is a row here, a field in struct config or struct source_conf, and its entry in
 * weightd.conf(5) and the example configuration (test_daemon_config_keys.c checks both). */
#include "config_int.h"

#include <linux/limits.h> /* PATH_MAX */
#include <stddef.h>
#include <string.h>
#include <sys/un.h>

#include "segment.h" /* WD_SEGMENT_DIR_MAX */

#define DAEMON(f)                                                                                  \
	.section = CONFIG_DAEMON, .field = offsetof(struct config, f),                             \
	.width = sizeof(((struct config *)0)->f)
#define CHECKPOINT(f)                                                                              \
	.section = CONFIG_CHECKPOINT, .field = offsetof(struct source_conf, f),                    \
	.width = sizeof(((struct source_conf *)0)->f)

#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define DURATION_MAX_MS (30ull * 24 * 3600000) /* 30 days */

/* In the order a reload reports changes (config.h): restart-only keys, budget, log_level, the
 * other live keys, then the keys read at start only. */
const struct config_key config_keys[] = {
	/* [daemon], only a restart applies these */
	{ DAEMON(socket_path), .name = "socket", .type = CONFIG_T_PATH, .max = SOCKET_PATH_MAX,
	  .def = "/run/weightd/weightd.sock", .reload = CONFIG_RESTART, .flags = CONFIG_SOCKET_UNIT,
	  .doc = "the Unix socket weightd listens on when it binds it itself" },
	{ DAEMON(socket_mode), .name = "socket_mode", .type = CONFIG_T_MODE, .max = 0777,
	  .def = "0660", .reload = CONFIG_RESTART, .flags = CONFIG_SOCKET_UNIT,
	  .doc = "permissions of that socket, in octal" },
	{ DAEMON(socket_group), .name = "socket_group", .type = CONFIG_T_GROUP, .def = "",
	  .reload = CONFIG_RESTART, .flags = CONFIG_SOCKET_UNIT | CONFIG_EMPTY_OK,
	  .doc = "group given to that socket; empty: the group it is created with" },
	{ DAEMON(shm_prefix), .name = "shm_prefix", .type = CONFIG_T_NAME, .max = CONFIG_MAX_PREFIX,
	  .def = "weightd", .reload = CONFIG_RESTART,
	  .doc = "prefix of every shared-memory object the daemon creates" },
	{ DAEMON(state_dir), .name = "state_dir", .type = CONFIG_T_PATH, .max = PATH_MAX - 64,
	  .def = "/var/lib/weightd", .reload = CONFIG_RESTART, .flags = CONFIG_EMPTY_OK,
	  .doc = "directory of the state index for re-adopting segments; empty: none" },
	{ DAEMON(segment_dir), .name = "segment_dir", .type = CONFIG_T_PATH,
	  .max = WD_SEGMENT_DIR_MAX - 1, .def = "", .reload = CONFIG_RESTART,
	  .flags = CONFIG_EMPTY_OK,
	  .doc = "tmpfs directory only weightd's user can write, for segments; empty: /dev/shm" },
	{ DAEMON(verify_adopted), .name = "verify_adopted", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_RESTART,
	  .doc = "recompute the digest of every re-adopted weight at start" },
	{ DAEMON(hold_locks), .name = "hold_locks", .type = CONFIG_T_BOOL, .def = "yes",
	  .reload = CONFIG_RESTART,
	  .doc = "hand clients segment fds locked over their weights; no: for measurement only" },
	{ DAEMON(workers), .name = "workers", .type = CONFIG_T_COUNT, .max = 1024, .def = "0",
	  .reload = CONFIG_RESTART,
	  .doc = "threads that read checkpoints and fill segments; 0: the CPUs, at most 8" },
	{ DAEMON(metrics_listen), .name = "metrics_listen", .type = CONFIG_T_LISTEN, .def = "",
	  .reload = CONFIG_RESTART,
	  .doc = "address:port serving Prometheus metrics at /metrics; empty: off" },
	{ DAEMON(metrics_public), .name = "metrics_public", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_RESTART,
	  .doc = "allow metrics_listen a non-loopback address (the endpoint has no authentication)" },
	{ DAEMON(admin_socket), .name = "admin_socket", .type = CONFIG_T_PATH, .max = SOCKET_PATH_MAX,
	  .def = "/run/weightd-admin/weightd.sock", .reload = CONFIG_RESTART,
	  .doc = "the Unix socket answering administrative requests (reload, evict)" },
	{ DAEMON(admin_socket_mode), .name = "admin_socket_mode", .type = CONFIG_T_MODE,
	  .max = 0777, .def = "0660", .reload = CONFIG_RESTART,
	  .doc = "permissions of the admin socket, in octal" },
	{ DAEMON(admin_socket_group), .name = "admin_socket_group", .type = CONFIG_T_GROUP, .def = "",
	  .reload = CONFIG_RESTART, .flags = CONFIG_EMPTY_OK,
	  .doc = "group given to the admin socket; empty: the group it is created with" },
	{ DAEMON(single_socket), .name = "single_socket", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_RESTART,
	  .doc = "no admin socket: root and weightd's user administer through the one socket" },
	{ DAEMON(admit_retry_max_ms), .name = "remote_admit_retry_max",
	  .type = CONFIG_T_DURATION, .max = 3600000, .def = "60s", .reload = CONFIG_RESTART,
	  .doc = "longest wait between retries of a failed remote admission; 0: never retried" },

	/* [daemon], applied by a reload */
	{ DAEMON(budget_bytes), .name = "budget", .type = CONFIG_T_SIZE, .max = UINT64_MAX,
	  .def = "0", .reload = CONFIG_LIVE,
	  .doc = "bytes of weights kept in shared memory; 0: half of /dev/shm" },
	{ DAEMON(log_level), .name = "log_level", .type = CONFIG_T_LOG_LEVEL, .def = "info",
	  .reload = CONFIG_LIVE, .doc = "error, warning, notice, info or debug" },
	{ DAEMON(max_clients), .name = "max_clients", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 1u << 20, .def = "1024", .reload = CONFIG_LIVE,
	  .doc = "client connections served at once" },
	{ DAEMON(max_frame_bytes), .name = "max_frame", .type = CONFIG_T_SIZE, .min = 4096,
	  .max = 1u << 30, .def = "4M", .reload = CONFIG_LIVE, .flags = CONFIG_NEW_CONNS,
	  .doc = "the largest protocol frame accepted or sent" },
	{ DAEMON(client_max_pending), .name = "client_max_pending", .type = CONFIG_T_COUNT,
	  .min = 1, .max = 1u << 16, .def = "256", .reload = CONFIG_LIVE,
	  .doc = "requests one client may have in flight" },
	{ DAEMON(client_max_queue_bytes), .name = "client_max_queue", .type = CONFIG_T_SIZE,
	  .min = 4096, .max = UINT64_MAX, .def = "64M", .reload = CONFIG_LIVE,
	  .doc = "bytes of replies queued for one client before it is disconnected" },
	{ DAEMON(client_max_bytes), .name = "client_max_bytes", .type = CONFIG_T_SIZE,
	  .max = UINT64_MAX, .def = "0", .reload = CONFIG_LIVE,
	  .doc = "bytes of weights one client may hold; 0: unlimited" },
	{ DAEMON(client_max_weights), .name = "client_max_weights", .type = CONFIG_T_COUNT,
	  .max = UINT32_MAX, .def = "0", .reload = CONFIG_LIVE,
	  .doc = "weights one client may hold; 0: unlimited" },
	{ DAEMON(uid_budget_share), .name = "uid_budget_share", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 100, .def = "50", .reload = CONFIG_LIVE,
	  .doc = "percent of the budget one uid may hold over its connections" },
	{ DAEMON(uid_max_unit_memory), .name = "uid_max_unit_memory", .type = CONFIG_T_SIZE,
	  .min = 1u << 20, .max = UINT64_MAX, .def = "512M", .reload = CONFIG_LIVE,
	  .doc = "heap one uid's unit requests being planned or made may take" },
	{ DAEMON(max_message_bytes), .name = "max_message", .type = CONFIG_T_SIZE, .min = 4096,
	  .max = 4ull << 30, .def = "256M", .reload = CONFIG_LIVE, .flags = CONFIG_NEW_CONNS,
	  .doc = "the largest request accepted, its frames joined" },
	{ DAEMON(max_unit_entries), .name = "max_unit_entries", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 1u << 24, .def = "1048576", .reload = CONFIG_LIVE,
	  .doc = "entries, and separately aliases, one unit may have" },
	{ DAEMON(segment_max_bytes), .name = "segment_max", .type = CONFIG_T_SIZE, .min = 1u << 20,
	  .max = 1ull << 40, .def = "4G", .reload = CONFIG_LIVE,
	  .doc = "how much is packed into one shared-memory segment" },
	{ DAEMON(max_idle_weights), .name = "max_idle_weights", .type = CONFIG_T_COUNT,
	  .max = UINT32_MAX, .def = "1048576", .reload = CONFIG_LIVE,
	  .doc = "weights no client holds kept cached; 0: no limit but the budget" },
	{ DAEMON(max_idle_segments), .name = "max_idle_segments", .type = CONFIG_T_COUNT,
	  .max = UINT32_MAX, .def = "1024", .reload = CONFIG_LIVE,
	  .doc = "segments no client holds a weight in kept; 0: no limit" },
	{ DAEMON(remote_concurrency), .name = "remote_concurrency", .type = CONFIG_T_COUNT,
	  .min = 1, .max = 1024, .def = "16", .reload = CONFIG_LIVE,
	  .doc = "range requests to object storage at once, all checkpoints together" },
	{ DAEMON(remote_chunk_bytes), .name = "remote_chunk", .type = CONFIG_T_SIZE,
	  .min = 64u << 10, .max = 1u << 30, .def = "16M", .reload = CONFIG_LIVE,
	  .doc = "bytes asked for by one range request of a remote checkpoint's payload" },
	{ DAEMON(remote_gap_bytes), .name = "remote_gap", .type = CONFIG_T_SIZE,
	  .min = 0, .max = 1u << 30, .def = "1M", .reload = CONFIG_LIVE,
	  .doc = "bytes between two wanted ranges of a remote object that one request reads "
		 "through rather than asking twice" },

	/* [daemon], read at start only */
	{ DAEMON(digest), .name = "digest", .type = CONFIG_T_DIGEST, .def = "xxh3-128",
	  .reload = CONFIG_START, .doc = "content digest of new weights: xxh3-128 or sha256" },
	{ DAEMON(max_clients_per_uid), .name = "max_clients_per_uid", .type = CONFIG_T_COUNT,
	  .min = 1, .max = 1u << 20, .def = "64", .reload = CONFIG_START,
	  .doc = "connections one uid may have at once" },
	{ DAEMON(client_max_queue_fds), .name = "client_max_queue_fds", .type = CONFIG_T_COUNT,
	  .min = 1, .max = 1u << 20, .def = "1024", .reload = CONFIG_START,
	  .doc = "fds queued in one client's replies before its requests wait" },
	{ DAEMON(uid_max_queue_fds), .name = "uid_max_queue_fds", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 1u << 24, .def = "4096", .reload = CONFIG_START,
	  .doc = "the same over all connections of one uid" },
	{ DAEMON(uid_max_pending), .name = "uid_max_pending", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 1u << 24, .def = "1024", .reload = CONFIG_START,
	  .doc = "unit requests in flight over all connections of one uid" },
	{ DAEMON(idle_timeout_ms), .name = "idle_timeout", .type = CONFIG_T_DURATION,
	  .max = DURATION_MAX_MS, .def = "10m", .reload = CONFIG_START,
	  .doc = "close a connection holding and waiting for nothing after this; 0: never" },
	{ DAEMON(first_request_timeout_ms), .name = "first_request_timeout",
	  .type = CONFIG_T_DURATION, .max = DURATION_MAX_MS, .def = "5s", .reload = CONFIG_START,
	  .doc = "close a connection that has sent no request this long after connecting; 0: never" },
	{ DAEMON(frame_timeout_ms), .name = "frame_timeout", .type = CONFIG_T_DURATION,
	  .max = DURATION_MAX_MS, .def = "30s", .reload = CONFIG_START,
	  .doc = "close a client whose request does not arrive whole within this; 0: never" },
	{ DAEMON(uid_max_partial_bytes), .name = "uid_max_partial", .type = CONFIG_T_SIZE,
	  .min = 4096, .max = UINT64_MAX, .def = "64M", .reload = CONFIG_START,
	  .doc = "bytes of requests being received over all connections of one uid" },
	{ DAEMON(max_partial_bytes), .name = "max_partial", .type = CONFIG_T_SIZE, .min = 4096,
	  .max = UINT64_MAX, .def = "256M", .reload = CONFIG_START,
	  .doc = "the same over all clients together" },
	{ DAEMON(max_temp_bytes), .name = "max_temp", .type = CONFIG_T_SIZE, .max = UINT64_MAX,
	  .def = "0", .reload = CONFIG_START,
	  .doc = "heap memory of recipe temporaries of running jobs and of remote recipes' "
		 "inputs fetched ahead; 0: the budget's size" },
	{ DAEMON(client_max_segments), .name = "client_max_segments", .type = CONFIG_T_COUNT,
	  .min = 1, .max = 1u << 20, .def = "4096", .reload = CONFIG_START,
	  .doc = "segments one connection may hold weights in" },
	{ DAEMON(uid_max_segments), .name = "uid_max_segments", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 1u << 24, .def = "16384", .reload = CONFIG_START,
	  .doc = "the same summed over all connections of one uid" },
	{ DAEMON(uid_max_weights), .name = "uid_max_weights", .type = CONFIG_T_COUNT, .min = 1,
	  .max = UINT32_MAX, .def = "4194304", .reload = CONFIG_START,
	  .doc = "weights held summed over all connections of one uid" },
	{ DAEMON(remote_connect_timeout_ms), .name = "remote_connect_timeout",
	  .type = CONFIG_T_DURATION, .max = 600000, .def = "10s", .reload = CONFIG_START,
	  .doc = "how long connecting to a remote checkpoint's server may take, TLS included" },
	{ DAEMON(remote_low_speed_time_ms), .name = "remote_low_speed_time",
	  .type = CONFIG_T_DURATION, .max = 3600000, .def = "30s", .reload = CONFIG_START,
	  .doc = "a remote transfer slower than 1 KiB/s for this long is broken off and retried" },
	{ DAEMON(remote_retries), .name = "remote_retries", .type = CONFIG_T_COUNT, .min = 1,
	  .max = 100, .def = "6", .reload = CONFIG_START,
	  .doc = "retries of a failed remote range, with exponential backoff and jitter" },
	{ DAEMON(budget_uids), .name = "budget_users", .type = CONFIG_T_USERS,
	  .count = offsetof(struct config, n_budget_uids), .def = "", .reload = CONFIG_START,
	  .flags = CONFIG_EMPTY_OK,
	  .doc = "users who may hold the whole budget, as root and weightd's user may" },
	{ DAEMON(admin_uids), .name = "admin_users", .type = CONFIG_T_USERS,
	  .count = offsetof(struct config, n_admin_uids), .def = "", .reload = CONFIG_START,
	  .flags = CONFIG_EMPTY_OK,
	  .doc = "users served on the admin socket, besides root and weightd's user" },
	{ DAEMON(admin_gids), .name = "admin_groups", .type = CONFIG_T_GROUPS,
	  .count = offsetof(struct config, n_admin_gids), .def = "", .reload = CONFIG_START,
	  .flags = CONFIG_EMPTY_OK,
	  .doc = "groups served on the admin socket" },

	/* [checkpoint:NAME]: a reload takes every checkpoint section anew */
	{ CHECKPOINT(path), .name = "path", .type = CONFIG_T_LOCATION, .max = PATH_MAX - 1,
	  .reload = CONFIG_LIVE, .flags = CONFIG_REQUIRED,
	  .doc = "the safetensors file, sharded directory or GGUF file, local or s3://, https://" },
	{ CHECKPOINT(allow_uids), .name = "allow_users", .type = CONFIG_T_USERS,
	  .count = offsetof(struct source_conf, n_uids), .reload = CONFIG_LIVE,
	  .doc = "users who may use it (neither list: every peer of the socket)" },
	{ CHECKPOINT(allow_gids), .name = "allow_groups", .type = CONFIG_T_GROUPS,
	  .count = offsetof(struct source_conf, n_gids), .reload = CONFIG_LIVE,
	  .doc = "groups that may use it" },
	{ CHECKPOINT(preload), .name = "preload", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_LIVE,
	  .doc = "materialize and hold every tensor once the daemon serves" },
	{ CHECKPOINT(required), .name = "required", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_LIVE,
	  .doc = "weightd is not ready (weightctl health --ready) unless it is admitted" },
	{ CHECKPOINT(watch), .name = "watch", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_LIVE,
	  .doc = "reload the checkpoint by itself when its files are replaced or changed" },
	{ CHECKPOINT(watch_delay_ms), .name = "watch_delay", .type = CONFIG_T_DURATION,
	  .max = DURATION_MAX_MS, .def = "2s", .reload = CONFIG_LIVE,
	  .doc = "how long its files must be left alone before a watched change is reloaded" },
	{ CHECKPOINT(drop_page_cache), .name = "drop_page_cache", .type = CONFIG_T_BOOL,
	  .def = "yes", .reload = CONFIG_LIVE,
	  .doc = "evict the file pages weightd read once their bytes are in shared memory" },
	{ CHECKPOINT(endpoint), .name = "endpoint", .type = CONFIG_T_URL, .max = 512,
	  .reload = CONFIG_LIVE,
	  .doc = "s3: the store's URL, e.g. http://127.0.0.1:9000 (unset: AWS in region)" },
	{ CHECKPOINT(region), .name = "region", .type = CONFIG_T_NAME, .max = 64,
	  .reload = CONFIG_LIVE,
	  .doc = "s3: the region requests are signed for (unset: us-east-1)" },
	{ CHECKPOINT(path_style), .name = "path_style", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_LIVE,
	  .doc = "s3: address objects as endpoint/bucket/key, not bucket.endpoint/key" },
	{ CHECKPOINT(credentials_file), .name = "credentials_file", .type = CONFIG_T_PATH,
	  .max = PATH_MAX - 1, .reload = CONFIG_LIVE,
	  .doc = "s3: AWS shared-credentials file (unset: the credential chain, else unsigned)" },
	{ CHECKPOINT(profile), .name = "profile", .type = CONFIG_T_NAME, .max = 128,
	  .reload = CONFIG_LIVE,
	  .doc = "s3: the profile of the shared credentials and config files (unset: AWS_PROFILE, "
		 "else default)" },
	{ CHECKPOINT(credentials), .name = "credentials", .type = CONFIG_T_NAME, .max = 16,
	  .def = "auto", .reload = CONFIG_LIVE,
	  .doc = "s3: where keys come from: auto, env, web-identity, container, imds or file" },
	{ CHECKPOINT(imds_v1), .name = "imds_v1", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_LIVE,
	  .doc = "s3: read instance metadata without a session token when IMDSv2 is refused" },
	{ CHECKPOINT(token_file), .name = "token_file", .type = CONFIG_T_PATH, .max = PATH_MAX - 1,
	  .reload = CONFIG_LIVE,
	  .doc = "https: a file whose first line is sent as a bearer token" },
	{ CHECKPOINT(ca_file), .name = "ca_file", .type = CONFIG_T_PATH, .max = PATH_MAX - 1,
	  .reload = CONFIG_LIVE,
	  .doc = "PEM certificates that verify the server (unset: the system's)" },
	{ CHECKPOINT(allow_http), .name = "allow_http", .type = CONFIG_T_BOOL, .def = "no",
	  .reload = CONFIG_LIVE, .doc = "allow plain http:// for this checkpoint" },
	{ CHECKPOINT(azure_credentials), .name = "azure_credentials", .type = CONFIG_T_NAME,
	  .max = 32, .reload = CONFIG_LIVE,
	  .doc = "az: auto, sas, shared-key, workload-identity, client-secret, managed-identity "
		 "or anonymous (unset: auto)" },
	{ CHECKPOINT(azure_key_file), .name = "azure_key_file", .type = CONFIG_T_PATH,
	  .max = PATH_MAX - 1, .reload = CONFIG_LIVE,
	  .doc = "az: a file holding the storage account key (unset: AZURE_STORAGE_KEY)" },
};

const size_t config_n_keys = sizeof(config_keys) / sizeof(config_keys[0]);

_Static_assert(sizeof(config_keys) / sizeof(config_keys[0]) <= CONFIG_MAX_KEYS,
	       "raise CONFIG_MAX_KEYS (config_int.h)");

const struct config_key *config_key_find(enum config_section section, const char *name)
{
	for (size_t i = 0; i < config_n_keys; i++)
		if (config_keys[i].section == section && strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	return NULL;
}

uint64_t config_key_get(const struct config_key *k, const void *base)
{
	const char *p = (const char *)base + k->field;
	uint32_t u32;
	uint64_t u64;
	uint8_t u8;

	switch (k->width) {
	case sizeof(u8):
		memcpy(&u8, p, sizeof(u8));
		return u8;
	case sizeof(u32):
		memcpy(&u32, p, sizeof(u32));
		return u32;
	default:
		memcpy(&u64, p, sizeof(u64));
		return u64;
	}
}

void config_key_copy(const struct config_key *k, void *dst, const void *src)
{
	memcpy((char *)dst + k->field, (const char *)src + k->field, k->width);
}

const char *config_key_str(const struct config_key *k, const void *base)
{
	const char *s;

	memcpy(&s, (const char *)base + k->field, sizeof(s));
	return s;
}
