/* SPDX-License-Identifier: Apache-2.0 */
/* weightd/client.h - libweightd: bind model weights served by weightd from shared memory. */
#ifndef WEIGHTD_CLIENT_H
#define WEIGHTD_CLIENT_H

/*
 * libweightd talks to the weightd daemon over its Unix socket. The daemon reads each weight of a
 * checkpoint once into POSIX shared memory, packing many weights into one segment; every process
 * that asks gets a read-only file descriptor to that same segment (one per segment, however many
 * weights it holds in it) and maps it once. N processes, one physical copy.
 *
 * A typical inference engine:
 *
 *     weightd_client *c;  weightd_unit *u;  weightd_error err;
 *     if (weightd_connect(NULL, "my-engine", &c, &err) < 0) { puts(err.message); ... }
 *     weightd_unit_new(c, &u, &err);
 *     uint64_t qshape[] = { 4096, 4096 };
 *     weightd_unit_slot(u, "q", "BF16", qshape, 2, &layer->q_data, &err);
 *     weightd_unit_set_tensor(u, "q", "llama", "layers.0.attn.q.weight", NULL, &err);
 *     ...                                   (declare every slot, give each a source or an alias)
 *     weightd_unit_submit(u, &err);         (one request; returns while weightd works)
 *     if (weightd_unit_validate(u, &err) < 0) { ... nothing is held, nothing was published ... }
 *     weightd_unit_bind(u);                 (stores every pointer; cannot fail)
 *     ... run ...
 *     weightd_unit_free(u);                 (unmaps and releases; the pointers are now invalid)
 *     weightd_close(c);
 *
 * ---------------------------------------------------------------------------------------------
 * Conventions
 *
 * - Every fallible call returns 0 (or a documented non-negative value) on success and a negative
 *   WEIGHTD_E_* code on failure; when `err` is not NULL it is then filled (see weightd_error).
 *   Outputs are named ret_* and are left untouched on failure.
 * - Objects the library returns are owned by the caller until passed to their free/release
 *   function; every free/release function accepts NULL. Strings and arrays inside a returned
 *   struct belong to that struct and live until it is freed.
 * - Input strings and arrays are copied; the caller may reuse them as soon as the call returns.
 * - Dtypes are the safetensors names: "BOOL" "U8" "I8" "U16" "I16" "F16" "BF16" "U32" "I32"
 *   "F32" "U64" "I64" "F64" "F8_E4M3" "F8_E5M2", and ggml's names for packed GGUF block types
 *   ("Q4_0", "Q8_0", "Q4_K", ...). Shapes are row-major, outermost axis first (GGUF dimensions are
 *   reported in this order too), at most WEIGHTD_MAX_DIMS axes; a 0-d scalar has ndim 0.
 * - File descriptors the library receives are close-on-exec.
 *
 * ---------------------------------------------------------------------------------------------
 * Threads
 *
 * - A weightd_client may be used from several threads at once: every call that takes a client
 *   (connect excepted, close excepted) is safe to call concurrently. Requests from all threads are
 *   pipelined on the one socket (a mutex serialises sending); replies are matched to requests by
 *   id, in whatever order they arrive. While threads wait, exactly one of them reads the socket and
 *   hands each reply to the thread waiting for it (the others sleep on a condition variable), so
 *   no thread is needed in the background and none is created.
 * - weightd_close must be the last call on a client: no other call on that client, or on an
 *   in-flight handle, unit or weight_map of it, may run concurrently with it or follow it, except
 *   the calls listed under weightd_close (release, free, accessors).
 * - A weightd_inflight, weightd_unit, weightd_recipe under construction and weightd_selection are
 *   used by one thread at a time (hand them between threads freely). A finished recipe or
 *   selection may be read by several threads at once (materialize and set_recipe take it const).
 * - A weightd_weight's accessors, weightd_share and weightd_weight_dup may be called on the same
 *   weight from several threads at once. weightd_weight_map and weightd_release may not run
 *   concurrently with any other call on that same weight.
 * - Result structs (source lists, descriptions, status, preflight results, event lists) are
 *   immutable: read them from any thread; free each once.
 * - Mapped weight memory is ordinary read-only memory: read it from any thread.
 * - After fork(), the child must not use the parent's clients, handles or units (it may keep
 *   reading memory that was mapped before the fork, and should simply not call into them).
 *
 * ---------------------------------------------------------------------------------------------
 * Lost connection
 *
 * When the daemon goes away (or sends something unreadable), every pending request and every
 * later call on that client fails with WEIGHTD_E_DISCONNECTED and a sentence saying why. Weights
 * already received stay valid and mapped: the memory is the process's until it lets go.
 * Releasing them afterwards only closes and unmaps locally (the daemon already dropped the
 * references when the connection ended). Reconnect by opening a new client.
 */

#include <stddef.h>
#include <stdint.h>

#include <weightd/error.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WEIGHTD_BUILDING)
#define WEIGHTD_API __attribute__((visibility("default")))
#else
#define WEIGHTD_API
#endif

#define WEIGHTD_MAX_DIMS 8
#define WEIGHTD_DIGEST_LEN 32      /* identity keys; the longest content digest */
#define WEIGHTD_DEFAULT_SOCKET "/run/weightd/weightd.sock"
/* Where weightd answers administrative requests (reload, evict) unless single_socket = yes:
 * weightctl reads $WEIGHTD_ADMIN_SOCKET, then this. */
#define WEIGHTD_DEFAULT_ADMIN_SOCKET "/run/weightd-admin/weightd.sock"
/* The protocol versions this libweightd speaks: it talks to any weightd whose range overlaps
 * (the connection uses the newest version both speak; weightd_server tells which). Version 3
 * packs weights into shared segments, sends a unit's whole-tensor slots as columns and gets its
 * weights back as columns, not one message each. */
#define WEIGHTD_PROTOCOL_VERSION 3
#define WEIGHTD_PROTOCOL_MIN_VERSION 3

/* =========================================================================================== */
/* Errors                                                                                       */
/* =========================================================================================== */

/* The codes (WEIGHTD_E_*) and struct weightd_error are in <weightd/error.h>, included above. */

/* Short stable name of a code ("unknown-tensor", "disconnected", ...); never NULL. Accepts the
 * negative return value of a call as well as the positive code. */
WEIGHTD_API const char *weightd_code_name(int code);

/* The library's version string ("0.1.0"). */
WEIGHTD_API const char *weightd_version(void);

/* =========================================================================================== */
/* Connection                                                                                   */
/* =========================================================================================== */

typedef struct weightd_client weightd_client;

/*
 * Connect to weightd and say hello. socket_path NULL means $WEIGHTD_SOCKET, or
 * WEIGHTD_DEFAULT_SOCKET when that is unset or empty. client_name (may be NULL) shows up in the
 * daemon's logs and status. Fails with WEIGHTD_E_DISCONNECTED when nothing listens there (or
 * the peer does not answer hello within 30 s; $WEIGHTD_HELLO_TIMEOUT_MS changes that),
 * WEIGHTD_E_PERMISSION_DENIED when the socket's mode refuses us, WEIGHTD_E_UNSUPPORTED when
 * the daemon speaks another protocol version. On success *ret is a new client: free it with
 * weightd_close.
 */
WEIGHTD_API int weightd_connect(const char *socket_path, const char *client_name,
				weightd_client **ret, weightd_error *err);

/*
 * Close the connection and drop the caller's hold on the client. Must not run concurrently with
 * any other call on this client, its in-flight handles or its units (see Threads). Pending
 * requests fail with WEIGHTD_E_DISCONNECTED. Weights and units already received stay valid:
 * their memory stays mapped and their fds open until weightd_release / weightd_unit_free, which
 * still work after close (and only act locally, as the daemon drops a closed client's references
 * itself). weightd_inflight_free also still works. Accepts NULL.
 */
WEIGHTD_API void weightd_close(weightd_client *c);

/* What the daemon said in its hello. Owned by the client; valid until the client is freed. */
typedef struct weightd_server_info {
	uint32_t protocol_version;     /* of this connection: the newest both sides speak */
	const char *server_version;
	const char *instance;          /* the daemon's instance (shared-memory prefix) */
	uint32_t max_frame_bytes;      /* largest request the daemon accepts */
	uint32_t max_pending_requests; /* requests one client may have in flight */
	uint32_t max_unit_entries;
	uint32_t max_recipe_nodes;
	uint64_t max_client_bytes;     /* bytes of weights one client may hold (0: no limit) */
	uint32_t max_client_weights;   /* weights one client may hold (0: no limit) */
	uint32_t min_protocol_version; /* the daemon's range (0, 0 from a weightd that does not */
	uint32_t max_protocol_version; /*   say: it speaks protocol_version only) */
	/* Appended last; 0 from a daemon that does not say. */
	uint32_t max_queue_fds;        /* fds of unread replies before the daemon stops reading us */
	uint64_t idle_timeout_ms;      /* a connection holding nothing is closed after this (0: never) */
	uint64_t frame_timeout_ms;     /* a request must arrive whole within this (0: no limit) */
	uint64_t max_message_bytes;    /* largest request (its frames joined) the daemon accepts */
	uint64_t segment_max_bytes;    /* how much the daemon packs into one shared-memory segment */
	uint32_t max_client_segments;  /* segments one client may hold weights in */
	uint32_t max_uid_segments;     /* the same over all connections of our uid */
	uint32_t max_uid_weights;      /* weights held over all connections of our uid */
} weightd_server_info;

WEIGHTD_API const weightd_server_info *weightd_server(const weightd_client *c);

/*
 * The connection's socket, for an event loop: when it is readable, call weightd_borrow,
 * weightd_unit_poll or weightd_poll_events with no wait to let the library read it. Never read,
 * write or close it yourself.
 */
WEIGHTD_API int weightd_client_fd(const weightd_client *c);

/* =========================================================================================== */
/* Sources                                                                                      */
/* =========================================================================================== */

typedef struct weightd_source_info {
	const char *name;
	const char *kind;        /* "safetensors", "safetensors-sharded", "gguf" */
	const char *path;
	uint64_t tensors;
	uint64_t bytes;          /* payload bytes of all its tensors */
	uint64_t generation;     /* grows when the files change and the daemon reloads */
	const char *state;       /* "ready", "failed", "removed", "loading" (being admitted) */
	const char *error;       /* why it failed ("" when ready) */
	uint32_t files;
} weightd_source_info;

/* A checkpoint's part in the daemon's readiness (list and status). */
typedef struct weightd_source_health {
	int required;		 /* its section says required = yes */
	int preload;		 /* ... preload = yes */
	int preloaded;		 /* preload = yes and every tensor resident and held */
	uint32_t admit_failures; /* failed remote admissions in a row (0 once admitted) */
	uint64_t retry_in_ms;	 /* failed: when weightd tries it again (0: not scheduled) */
} weightd_source_health;

typedef struct weightd_source_list {
	size_t count;
	const weightd_source_info *sources;
	/* appended: health[i] for sources[i] (all 0 from a daemon that does not report it) */
	const weightd_source_health *health;
} weightd_source_list;

/* Every source this client may see. *ret is freed with weightd_source_list_free. */
WEIGHTD_API int weightd_list(weightd_client *c, weightd_source_list **ret, weightd_error *err);
WEIGHTD_API void weightd_source_list_free(weightd_source_list *l);

typedef struct weightd_tensor_info {
	const char *name;
	const char *dtype;
	size_t ndim;
	const uint64_t *shape;
	uint64_t nbytes;
	uint64_t offset;         /* absolute offset in `file` */
	const char *file;
	uint32_t block_elems;    /* elements per block: 1 for element types, e.g. 32 for Q4_0 */
	uint32_t block_bytes;    /* bytes per block (the element size for element types) */
} weightd_tensor_info;

/* One object of a remote checkpoint: its URL without any query, size, ETag (every payload range
 * is sent with If-Match on it) and S3 version id ("" when none). */
typedef struct weightd_remote_object {
	const char *url;
	uint64_t size;
	const char *etag;
	const char *version;
} weightd_remote_object;

typedef struct weightd_meta_entry {
	const char *key;
	const char *value;       /* rendered as text; long arrays summarised */
	const char *type;        /* "string", "u32", "array[string]", ... */
} weightd_meta_entry;

typedef struct weightd_description {
	weightd_source_info source;
	size_t n_tensors;
	const weightd_tensor_info *tensors;   /* in file order */
	size_t n_metadata;
	const weightd_meta_entry *metadata;
	/* Where it is read from: "file", "s3", "https" or "http". */
	const char *location;
	/* A remote checkpoint's objects as pinned at admission (0 for local files). */
	size_t n_objects;
	const weightd_remote_object *objects;
	/* An s3 checkpoint's credentials: their source ("" when unsigned or not s3), access key id
	 * and expiry (Unix seconds, 0: none). Never a secret or a token. */
	const char *credentials;
	const char *credentials_key_id;
	int64_t credentials_expires;
} weightd_description;

/* One source's tensor table and metadata (WEIGHTD_E_UNKNOWN_SOURCE when there is no such
 * checkpoint). *ret is freed with weightd_description_free. */
WEIGHTD_API int weightd_describe(weightd_client *c, const char *checkpoint,
				 weightd_description **ret, weightd_error *err);
WEIGHTD_API void weightd_description_free(weightd_description *d);

/* =========================================================================================== */
/* Daemon status and administration                                                             */
/* =========================================================================================== */

typedef struct weightd_weight_status {
	uint64_t handle;
	const char *label;       /* e.g. "llama:layers.0.q[0:512,:]" or "cast(llama:w, F16)" */
	const char *dtype;
	size_t ndim;
	const uint64_t *shape;
	uint64_t nbytes;
	uint32_t refs;           /* references held, by all clients together */
	uint32_t clients;        /* distinct clients holding it */
	uint64_t generation;
	const uint8_t *digest;   /* digest_len bytes, or NULL when not known */
	const char *source;
	int adopted;             /* re-adopted after a daemon restart rather than read again */
	uint64_t segment;        /* the id of the segment it lies in (appended) */
	uint64_t offset;         /* where in it */
	/* appended: the digest's algorithm and length (16 for XXH3-128, 32 for SHA-256) */
	int digest_algorithm;    /* a weightd_digest_algorithm */
	size_t digest_len;
} weightd_weight_status;

/* A shared-memory segment of the daemon: one object in /dev/shm holding one or many weights. */
typedef struct weightd_segment_status {
	uint64_t id;
	const char *name;        /* its name under /dev/shm (with the leading '/') */
	uint64_t size;
	uint32_t weights;        /* weights in it */
	uint32_t held;           /* of those, how many someone references */
	const char *source;      /* the checkpoint its weights come from ('+' between several) */
	int adopted;
	int filling;             /* weights are still being made in it */
} weightd_segment_status;

/* One checkpoint's share of the daemon's cache and its counters since start. A weight counts under
 * the first checkpoint it reads; the counters run on across the checkpoint's generations. */
typedef struct weightd_source_stats {
	uint64_t resident_bytes;     /* its finished weights in shared memory */
	uint64_t held_bytes;	     /* of those, the ones a client or a request references */
	uint64_t materialized_bytes; /* counter: bytes its finished materializations wrote */
	uint64_t clients;	     /* clients holding at least one of its weights */
	uint64_t errors;	     /* counter: failed materializations, refused requests */
} weightd_source_stats;

/* A remote checkpoint's traffic with its object store or web server since the daemon started,
 * over all its generations; all 0 for a local checkpoint. */
typedef struct weightd_source_remote {
	uint64_t bytes;	   /* bytes received: weights, and the metadata admission reads */
	uint64_t requests; /* requests sent, retries included */
	uint64_t retries;  /* of those, retries (after a 5xx, 429, SlowDown, a reset, a cut body) */
	uint64_t errors;   /* reads that failed after their retries */
} weightd_source_remote;

/* A materialization in flight in the daemon (to show progress). */
typedef struct weightd_job_status {
	const uint8_t *key;      /* WEIGHTD_DIGEST_LEN bytes: the identity its weight will have (as
				    weightd_weight_key and weightd_output_info.key), or NULL */
	const char *label;
	uint64_t nbytes;         /* the weight's size */
	uint64_t done;           /* bytes written so far (0 while it waits for a worker) */
} weightd_job_status;

typedef struct weightd_status {
	const char *instance;
	const char *server_version;
	uint64_t uptime_ms;
	uint64_t bytes_resident;           /* bytes of shared memory the daemon holds */
	uint64_t budget_bytes;
	uint64_t weights;
	uint64_t clients;
	uint64_t bytes_read;               /* checkpoint bytes read since start */
	uint64_t materializations;
	uint64_t materializations_failed;
	uint64_t materializations_in_flight;
	uint64_t evictions;
	uint64_t readoptions;
	uint64_t bytes_materialized;
	uint64_t materialize_ns;
	uint64_t references;
	size_t n_sources;
	const weightd_source_info *sources;
	size_t n_weights;
	const weightd_weight_status *weight_list;
	/* Materializations in flight (appended last; empty from a daemon that does not report them). */
	size_t n_jobs;
	const weightd_job_status *jobs;
	/* Defences against other local users (appended last; 0 from a daemon without them). */
	uint64_t foreign_segments;     /* objects under the prefix weightd did not make: ignored */
	uint64_t clients_refused;      /* connections refused (max_clients, max_clients_per_uid) */
	uint64_t clients_timed_out;    /* connections closed idle or stuck in the middle of a frame */
	uint64_t partial_frame_bytes;  /* bytes of requests being received, all clients */
	uint64_t temp_bytes;           /* recipe temporaries reserved by running materializations */
	/* Packed segments (appended last; zero from a daemon before protocol 2). */
	uint64_t segments;
	uint64_t segment_bytes;            /* sizes of the segments' objects */
	uint64_t idle_weights;             /* cached weights nobody references */
	uint64_t idle_segments;            /* segments none of whose weights anyone references */
	size_t n_segments;
	const weightd_segment_status *segment_list;
	/* appended: the algorithm of the digests of weights filled now (a weight re-adopted from
	 * an earlier configuration may have another: see each weight's), and the chunk size of
	 * the digest composition (0 from a daemon that does not report it) */
	int digest_algorithm;    /* a weightd_digest_algorithm */
	uint64_t digest_chunk_bytes;
	/* appended: requests taken since start, and how often a uid's connections were held back
	 * so that other uids got their share of the daemon's main thread (0 from a daemon without) */
	uint64_t requests;
	uint64_t requests_deferred;
	/* appended: each source's counters, source_stats[i] for sources[i] (n_sources entries; all
	 * 0 from a daemon that does not report them). Apart from weightd_source_info, whose size
	 * the arrays of weightd_list and weightd_status already fix. */
	const weightd_source_stats *source_stats;
	/* appended: each source's remote traffic, source_remote[i] for sources[i] (n_sources
	 * entries; all 0 for local sources and from a daemon that does not report it) */
	const weightd_source_remote *source_remote;
	/* appended: where segments live ("/dev/shm" or the daemon's segment_dir), the page size the
	 * kernel gives them there (2 MiB: huge pages; 4096), and the bytes of segments in whole huge
	 * pages (NULL and 0 from a daemon that does not report them) */
	const char *segment_dir;
	uint64_t segment_page_bytes;
	uint64_t segment_huge_bytes;
	/* appended: weights that no connected client references but that weightd keeps because
	 * processes map them, as their kernel locks say (engines from before a restart that have
	 * not reconnected, say), and their bytes, counted as held (0 from a daemon without) */
	uint64_t locked_weights;
	uint64_t locked_bytes;
	/* appended: readiness, as `weightctl health --ready` reports it. health_known is 0 from a
	 * daemon that does not report it (then ready is 0 and not_ready NULL); not_ready says why
	 * (NULL when ready). source_health[i] for sources[i]. Counters of remote admissions that
	 * failed and of their retries. job_elapsed_ms[i]: how long jobs[i] has been in flight
	 * (done / elapsed is its rate; 0 from a daemon that does not report it). */
	int health_known;
	int ready;
	const char *not_ready;
	const weightd_source_health *source_health;
	uint64_t admissions_failed;
	uint64_t admission_retries;
	const uint64_t *job_elapsed_ms;
} weightd_status;

WEIGHTD_API int weightd_status_get(weightd_client *c, weightd_status **ret, weightd_error *err);
/* weightd_status_get without the list of weights (n_weights 0; the counters, sources, segments
 * and jobs as there): what monitoring and progress need. The full status costs the daemon about
 * a microsecond and the reply about 150 bytes per cached weight, 14 MB for 92,000. */
WEIGHTD_API int weightd_status_summary(weightd_client *c, weightd_status **ret,
				       weightd_error *err);
WEIGHTD_API void weightd_status_free(weightd_status *s);

/* Ask the daemon to re-read its configuration (privileged peers only: else
 * WEIGHTD_E_PERMISSION_DENIED). Returns when the daemon has done it. */
WEIGHTD_API int weightd_reload(weightd_client *c, weightd_error *err);

/* What a reload did, one sentence each. */
typedef struct weightd_reload_info {
	/* applied: a key's new value, a checkpoint's new generation, one added or removed */
	size_t n_changes;
	const char *const *changes;
	/* not applied: a key that takes effect only when weightd restarts, a checkpoint whose
	 * changed files were refused (its last good generation is still served) or that is not
	 * served */
	size_t n_warnings;
	const char *const *warnings;
} weightd_reload_info;

/* weightd_reload, and *ret what it did (a daemon that does not say gives empty lists). A reload
 * with warnings succeeded; one that failed returns the error. *ret is freed with
 * weightd_reload_report_free. */
WEIGHTD_API int weightd_reload_report(weightd_client *c, weightd_reload_info **ret,
				      weightd_error *err);
WEIGHTD_API void weightd_reload_report_free(weightd_reload_info *r);

/* Ask the daemon to evict every weight no client holds (an administrative request: on the admin
 * socket, or as root or weightd's user under single_socket). ret_weights and ret_bytes (each may
 * be NULL) receive how much went. */
WEIGHTD_API int weightd_evict(weightd_client *c, uint64_t *ret_weights, uint64_t *ret_bytes,
			      weightd_error *err);

/* One connection to the daemon and what it holds. */
typedef struct weightd_client_info {
	uint64_t id;		/* the daemon's number for it (as in its log) */
	uint32_t uid, gid;
	int32_t pid;		/* 0 when the daemon cannot see it (another PID namespace) */
	const char *name;	/* as given to weightd_connect ("" when none) */
	uint64_t bytes;		/* bytes of the distinct weights it holds */
	uint64_t weights;	/* references it holds */
	uint64_t segments;	/* segments it holds weights in */
	uint64_t pending;	/* its requests for weights in flight */
	uint64_t connected_ms;	/* how long ago it connected */
	int admin;		/* connected through the admin socket */
} weightd_client_info;

typedef struct weightd_client_list {
	size_t count;
	const weightd_client_info *clients;
} weightd_client_list;

/* The connections the daemon serves: every one when asked on the admin socket, those of the
 * caller's own uid otherwise. *ret is freed with weightd_client_list_free. */
WEIGHTD_API int weightd_clients(weightd_client *c, weightd_client_list **ret, weightd_error *err);
WEIGHTD_API void weightd_client_list_free(weightd_client_list *l);

/* =========================================================================================== */
/* Selections                                                                                   */
/* =========================================================================================== */

/*
 * Which part of a source tensor to take. Wherever a selection is taken, NULL means the full
 * tensor. A selection is immutable once made; free it with weightd_selection_free (the calls
 * that take one copy it). Bounds against the tensor are checked by the daemon, which answers
 * WEIGHTD_E_OUT_OF_RANGE / WEIGHTD_E_AXIS_OUT_OF_RANGE naming the tensor and axis.
 *
 *  full                         the whole tensor.
 *  range(axis, start, end)      [start, end) along `axis`; the other axes whole. start < end.
 *  indices(axis, idx[n])        the listed positions along `axis`, in that order (n >= 1;
 *                               repeats allowed).
 *  elements(start, end, shape)  elements [start, end) of the row-major flattened tensor,
 *                               reshaped to `shape` (whose element count must be end - start).
 *  shard(axis, rank, world)     the part tensor-parallel rank `rank` of `world` takes along
 *                               `axis`: the even split when the axis divides by world. When it
 *                               does not, torch.tensor_split's rule: with dim = q * world + m,
 *                               ranks below m take q + 1 rows, the others q, in rank order;
 *                               weightd_unit_preflight tells the resulting shape.
 *                               weightd_selection_shard_even refuses such an axis instead.
 */
typedef struct weightd_selection weightd_selection;

WEIGHTD_API int weightd_selection_full(weightd_selection **ret, weightd_error *err);
WEIGHTD_API int weightd_selection_range(uint32_t axis, uint64_t start, uint64_t end,
					weightd_selection **ret, weightd_error *err);
WEIGHTD_API int weightd_selection_indices(uint32_t axis, const uint64_t *indices, size_t n,
					  weightd_selection **ret, weightd_error *err);
WEIGHTD_API int weightd_selection_elements(uint64_t start, uint64_t end, const uint64_t *shape,
					   size_t ndim, weightd_selection **ret, weightd_error *err);
WEIGHTD_API int weightd_selection_shard(uint32_t axis, uint32_t rank, uint32_t world,
					weightd_selection **ret, weightd_error *err);
/* shard(), strict: an axis that does not divide by world is refused at preflight
 * (WEIGHTD_E_SHAPE_MISMATCH, naming the rows and the world), as vLLM and Megatron refuse it. */
WEIGHTD_API int weightd_selection_shard_even(uint32_t axis, uint32_t rank, uint32_t world,
					     weightd_selection **ret, weightd_error *err);
WEIGHTD_API void weightd_selection_free(weightd_selection *s);

/* =========================================================================================== */
/* Recipes                                                                                      */
/* =========================================================================================== */

/*
 * A recipe describes a derived weight as a tree of operations over source tensors; the daemon
 * computes it once and shares the result with every process that asks for the same recipe. It
 * is built node by node: each builder call appends one node and returns its index (>= 0), or a
 * negative code. Inputs name nodes returned earlier. The last node appended is the output.
 *
 *  source(checkpoint, tensor, sel)    a source tensor, or part of it (sel NULL: full)
 *  select(input, sel)                 a selection of an intermediate result
 *  concat(axis, inputs[n])            join along an existing axis (n >= 1)
 *  stack(axis, inputs[n])             join along a new axis inserted at `axis` (n >= 1)
 *  reshape(input, shape)              same elements, new shape (element counts must agree)
 *  transpose(input, perm)             axes permuted: output axis i is input axis perm[i]
 *  cast(input, dtype)                 convert values (round to nearest even; see weightd(8)).
 *                                     From a floating-point or block dtype to an integer or
 *                                     BOOL the fraction is lost: such a cast is refused
 *                                     (WEIGHTD_E_UNSUPPORTED_CAST) unless made with
 *                                     weightd_recipe_cast_truncate ("truncate": true in JSON).
 *  view(input, dtype, shape)          reinterpret the same bytes (byte counts must agree)
 *  dequant_block(input, scale, block, dtype)
 *                                     block-scale dequantization: input (F8_E4M3, F8_E5M2,
 *                                     BF16, F16 or F32) times an F32 scale holding one value per
 *                                     block of shape `block` (one entry per input axis; edge
 *                                     blocks may be partial, so the scale's shape is
 *                                     ceil(dim / block) on every axis), computed in F32 and
 *                                     rounded once to dtype (F32, BF16 or F16). DeepSeek-V3's FP8
 *                                     weights: dequant_block(w, w.weight_scale_inv, [128, 128]).
 *                                     Selections of the result (shards, ranges, indices) read
 *                                     only the matching data and scale blocks, also when they
 *                                     do not start on a block boundary. A wrong scale shape is
 *                                     WEIGHTD_E_SCALE_MISMATCH; a scale that is not F32,
 *                                     WEIGHTD_E_DTYPE_MISMATCH; other input or output dtypes,
 *                                     WEIGHTD_E_UNSUPPORTED_CAST.
 *
 * Axes count from the outermost, 0 first. The builder only checks what it can without the
 * daemon (indices of inputs, dimension counts, dtype names known to this library); the daemon
 * infers and checks everything else at preflight and names the node (weightd_error.node =
 * index + 1) and the rule broken.
 *
 * JSON form (weightd_recipe_from_json; used by weightctl and configuration files). A recipe is
 * one JSON object with an "op"; inputs nest:
 *
 *   {"op":"source", "checkpoint":"m", "tensor":"w", "select": SEL}    ("select" optional)
 *   {"op":"select", "input": R, "select": SEL}
 *   {"op":"concat", "axis": 0, "inputs": [R, R, ...]}
 *   {"op":"stack", "axis": 0, "inputs": [R, R, ...]}
 *   {"op":"reshape", "input": R, "shape": [d0, d1, ...]}
 *   {"op":"transpose", "input": R, "perm": [1, 0]}
 *   {"op":"cast", "input": R, "dtype": "F16"}      ("truncate": true optional)
 *   {"op":"view", "input": R, "dtype": "U8", "shape": [d0, ...]}
 *   {"op":"dequant_block", "dtype": "BF16", "block": [128, 128], "input": R, "scale": R}
 *                                     (flattened as input, then scale, then the node)
 *
 * and SEL is one of
 *
 *   "full"                                   {"range": [axis, start, end]}
 *   {"indices": [axis, [i0, i1, ...]]}       {"elements": [start, end, [d0, d1, ...]]}
 *   {"shard": [axis, rank, world]}           {"shard": [axis, rank, world], "even": true}
 *
 * e.g. {"op":"cast","dtype":"F16","input":{"op":"source","checkpoint":"m","tensor":"w",
 * "select":{"range":[0,0,512]}}}. Numbers are JSON integers; an unknown key, a missing key, a
 * value of the wrong type or sign is an error (WEIGHTD_E_INVALID_ARGUMENT) whose message gives
 * the JSON path ("$.input.select.range[2]") and what was expected. Nested objects are flattened
 * in post-order (inputs before the node that uses them); the daemon's node numbers refer to that
 * order, and errors about a node of a recipe made from JSON also give the node's JSON path.
 */
typedef struct weightd_recipe weightd_recipe;

WEIGHTD_API int weightd_recipe_new(weightd_recipe **ret, weightd_error *err);
WEIGHTD_API void weightd_recipe_free(weightd_recipe *r);
/* Number of nodes so far. */
WEIGHTD_API size_t weightd_recipe_nodes(const weightd_recipe *r);

WEIGHTD_API int weightd_recipe_source(weightd_recipe *r, const char *checkpoint,
				      const char *tensor, const weightd_selection *sel,
				      weightd_error *err);
WEIGHTD_API int weightd_recipe_select(weightd_recipe *r, int input, const weightd_selection *sel,
				      weightd_error *err);
WEIGHTD_API int weightd_recipe_concat(weightd_recipe *r, int axis, const int *inputs, size_t n,
				      weightd_error *err);
WEIGHTD_API int weightd_recipe_stack(weightd_recipe *r, int axis, const int *inputs, size_t n,
				     weightd_error *err);
WEIGHTD_API int weightd_recipe_reshape(weightd_recipe *r, int input, const uint64_t *shape,
				       size_t ndim, weightd_error *err);
WEIGHTD_API int weightd_recipe_transpose(weightd_recipe *r, int input, const uint32_t *perm,
					 size_t n, weightd_error *err);
WEIGHTD_API int weightd_recipe_cast(weightd_recipe *r, int input, const char *dtype,
				    weightd_error *err);
/* A cast that may drop the fraction: from a floating-point or block dtype to an integer or
 * BOOL, which weightd_recipe_cast's node is refused at preflight. */
WEIGHTD_API int weightd_recipe_cast_truncate(weightd_recipe *r, int input, const char *dtype,
					     weightd_error *err);
WEIGHTD_API int weightd_recipe_view(weightd_recipe *r, int input, const char *dtype,
				    const uint64_t *shape, size_t ndim, weightd_error *err);
/* Block-scale dequantization of node `input` by node `scale` (see above); nblock <= 8. */
WEIGHTD_API int weightd_recipe_dequant_block(weightd_recipe *r, int input, int scale,
					     const uint64_t *block, size_t nblock,
					     const char *dtype, weightd_error *err);

/* Parse the JSON form above (len bytes of text; need not be NUL-terminated). */
WEIGHTD_API int weightd_recipe_from_json(const char *text, size_t len, weightd_recipe **ret,
					 weightd_error *err);

/* =========================================================================================== */
/* Weights                                                                                      */
/* =========================================================================================== */

/*
 * A weight this process holds: weightd_weight_nbytes bytes at weightd_weight_offset in a
 * shared-memory segment, plus what it is. The daemon packs many weights into one segment; a
 * client holds one read-only fd and (once mapped) one mapping per segment, however many weights
 * and units use it, so fds and mappings grow with segments, not weights. Holding a weight holds
 * a reference in the daemon, which never evicts a weight someone holds. Free it with
 * weightd_release. Accessors never fail; a weight received from the daemon is complete.
 */
typedef struct weightd_weight weightd_weight;

/* The read-only fd of the weight's segment: borrowed (shared by every weight of the segment this
 * client holds; valid while the weight is), never to be closed by the caller. The weight's bytes
 * are [weightd_weight_offset, + nbytes) of it; dup it to keep it longer. */
WEIGHTD_API int weightd_weight_fd(const weightd_weight *w);
/* Where the weight starts in its segment's fd: a multiple of 64 (of 4096 for weights of a page
 * or more). */
WEIGHTD_API uint64_t weightd_weight_offset(const weightd_weight *w);
/* The daemon's id of the weight's segment (equal ids: the same memory). */
WEIGHTD_API uint64_t weightd_weight_segment(const weightd_weight *w);
WEIGHTD_API const char *weightd_weight_name(const weightd_weight *w);  /* entry name */
WEIGHTD_API const char *weightd_weight_dtype(const weightd_weight *w);
WEIGHTD_API size_t weightd_weight_ndim(const weightd_weight *w);
WEIGHTD_API const uint64_t *weightd_weight_shape(const weightd_weight *w);
WEIGHTD_API uint64_t weightd_weight_nbytes(const weightd_weight *w);
/*
 * The content digest the daemon computed while filling: weightd_weight_digest_len bytes (16 for
 * XXH3-128, the default; 32 for SHA-256 when the daemon is configured `digest = sha256`; 0 when
 * the daemon sent none), of the algorithm weightd_weight_digest_algorithm says. For a weight of
 * at most WEIGHTD_DIGEST_CHUNK bytes it is the plain hash of its bytes; a larger weight's is
 * H(H(c0) || H(c1) || ...) over its bytes cut into WEIGHTD_DIGEST_CHUNK-byte chunks (the last
 * shorter), each chunk digest in canonical bytes (XXH3-128 big-endian, as xxh128sum prints it),
 * so that workers filling chunks at once can each hash their own. A daemon older than the
 * algorithm field sent SHA-256 of the whole bytes.
 */
typedef enum weightd_digest_algorithm {
	WEIGHTD_DIGEST_UNKNOWN = 0,
	WEIGHTD_DIGEST_SHA256 = 1,
	WEIGHTD_DIGEST_XXH3_128 = 2,
} weightd_digest_algorithm;

#define WEIGHTD_DIGEST_CHUNK (16u << 20)

WEIGHTD_API const uint8_t *weightd_weight_digest(const weightd_weight *w);
WEIGHTD_API size_t weightd_weight_digest_len(const weightd_weight *w);
WEIGHTD_API weightd_digest_algorithm weightd_weight_digest_algorithm(const weightd_weight *w);
/* "xxh3-128", "sha256", or "unknown". */
WEIGHTD_API const char *weightd_digest_algorithm_name(weightd_digest_algorithm a);
/* Identity: SHA-256 of the canonical recipe and its sources' identities. Equal keys, equal
 * bytes, same segment. */
WEIGHTD_API const uint8_t *weightd_weight_key(const weightd_weight *w);
/* The daemon's name for the weight (what share and release refer to). */
WEIGHTD_API uint64_t weightd_weight_handle(const weightd_weight *w);
/* Generation of the source it was made from. */
WEIGHTD_API uint64_t weightd_weight_generation(const weightd_weight *w);

/*
 * Map the weight read-only (PROT_READ, MAP_SHARED) after checking its segment covers it; *ret
 * receives the address. The segment is mapped once for every weight of it this client holds;
 * the mapping lives until the last of them is released. A second call returns the same address. A weight of 0 bytes maps to NULL. Writing to the memory
 * faults (SIGSEGV): the daemon hands out read-only fds only.
 */
WEIGHTD_API int weightd_weight_map(weightd_weight *w, const void **ret, weightd_error *err);

/*
 * Ask the daemon for another reference to the same weight: a new, independent weightd_weight in
 * the same segment at the same offset (one round trip, no copy, no read; the segment's fd that
 * comes with the reply is closed when this client already has that segment). *ret is released on its own, in any order with `w`. Fails with
 * WEIGHTD_E_DISCONNECTED after the connection is gone.
 */
WEIGHTD_API int weightd_share(const weightd_weight *w, weightd_weight **ret, weightd_error *err);

/*
 * Duplicate the weight locally: a new weightd_weight of the same segment (no new fd or mapping:
 * the segment is counted once more), without asking the daemon. Both share the one daemon reference `w` holds: the
 * library counts its local holders and tells the daemon only when the last of them is released,
 * so the duplicate works even after the connection is lost. Use weightd_share when the daemon
 * should count the holder (e.g. to hand to another subsystem with its own accounting).
 */
WEIGHTD_API int weightd_weight_dup(const weightd_weight *w, weightd_weight **ret,
				   weightd_error *err);

/*
 * Let go: unmap the weight's mapping (if any), close its fd, and, if this was the last local
 * holder of its daemon reference, tell the daemon (one Release message; no reply is waited
 * for). Never fails. Accepts NULL.
 */
WEIGHTD_API void weightd_release(weightd_weight *w);

/* =========================================================================================== */
/* Asynchronous materialization                                                                 */
/* =========================================================================================== */

/*
 * An in-flight request. weightd_materialize and weightd_materialize_recipe send the request and
 * return at once; the daemon reads and fills the weight (or shares one it already has) while the
 * caller goes on. Any number may be in flight on one client (up to the daemon's
 * max_pending_requests); their replies may come in any order.
 */
typedef struct weightd_inflight weightd_inflight;

/* Request one source tensor (sel NULL: full). */
WEIGHTD_API int weightd_materialize(weightd_client *c, const char *checkpoint, const char *tensor,
				    const weightd_selection *sel, weightd_inflight **ret,
				    weightd_error *err);

/* Request the output of a recipe (the recipe is copied; it may be freed at once). */
WEIGHTD_API int weightd_materialize_recipe(weightd_client *c, const weightd_recipe *r,
					   weightd_inflight **ret, weightd_error *err);

/*
 * Wait for the reply. On success *ret is the weight, now owned by the caller (the very object
 * weightd_borrow may have shown). Consumes `f` in every case: do not use it afterwards.
 */
WEIGHTD_API int weightd_finish(weightd_inflight *f, weightd_weight **ret, weightd_error *err);

/*
 * Look without waiting. Reads whatever replies have already arrived (unless another thread is
 * reading the socket right now). Returns 0 with *ret set to the weight if the request has
 * completed (borrowed: owned by `f`, valid until weightd_finish or weightd_inflight_free), 0 with
 * *ret NULL if it is still in flight, or the request's error if it failed (weightd_finish then
 * returns the same error).
 */
WEIGHTD_API int weightd_borrow(weightd_inflight *f, const weightd_weight **ret,
			       weightd_error *err);

/*
 * Abandon a request without waiting. If a weight arrives for it later, the library releases it.
 * Accepts NULL.
 */
WEIGHTD_API void weightd_inflight_free(weightd_inflight *f);

/* =========================================================================================== */
/* Units: declare, validate, bind                                                               */
/* =========================================================================================== */

/*
 * A unit is a set of parameter slots bound all-or-nothing: a layer, a whole model, one rank's
 * shards. Each slot has a name, the dtype and shape the engine expects, and where to store the
 * pointer. Each slot gets its content from a source tensor, a recipe, or is an alias of another
 * slot (two names, one weight: no second copy).
 *
 * Lifecycle:
 *   weightd_unit_new -> weightd_unit_slot (each slot) -> weightd_unit_set_* (each slot)
 *   -> weightd_unit_submit        one request for the whole unit; returns at once
 *   -> weightd_unit_finish        waits: the unit now holds every weight, or nothing
 *   -> weightd_unit_validate      every fallible step; on failure nothing is held or mapped
 *   -> weightd_unit_bind          publishes the pointers; cannot fail
 *   -> weightd_unit_free          unmaps and releases everything
 *
 * validate calls finish itself when needed. After a failed finish or validate the unit is back
 * where it was before submit (slots and sources kept): fix what the error names and submit
 * again. A hot swap: build, submit and validate a new unit while the old one serves, bind the
 * new one (overwriting the destinations), then free the old one.
 */
typedef struct weightd_unit weightd_unit;

WEIGHTD_API int weightd_unit_new(weightd_client *c, weightd_unit **ret, weightd_error *err);

/*
 * Declare a slot. name: unique in the unit. dtype/shape/ndim: what the engine expects; the
 * daemon checks them before making anything (WEIGHTD_E_SLOT_MISMATCH), and validate checks them
 * again on what arrived. dtype NULL declares no expectation (shape is then ignored): anything the
 * source yields is accepted. dest: where bind stores the address of the slot's read-only memory
 * (may be NULL; read it with weightd_unit_data instead). Returns the slot's index (>= 0).
 */
WEIGHTD_API int weightd_unit_slot(weightd_unit *u, const char *name, const char *dtype,
				  const uint64_t *shape, size_t ndim, void **dest,
				  weightd_error *err);

/* Fill slot `slot` from a source tensor (sel NULL: full). */
WEIGHTD_API int weightd_unit_set_tensor(weightd_unit *u, const char *slot, const char *checkpoint,
					const char *tensor, const weightd_selection *sel,
					weightd_error *err);
/* Fill slot `slot` from a recipe (copied). */
WEIGHTD_API int weightd_unit_set_recipe(weightd_unit *u, const char *slot,
					const weightd_recipe *r, weightd_error *err);
/* Make slot `slot` an alias of slot `target` (which may itself be an alias): it gets the
 * target's weight. A missing target or a cycle is reported by the daemon at submit time
 * (WEIGHTD_E_BAD_ALIAS / WEIGHTD_E_ALIAS_CYCLE naming the slot). */
WEIGHTD_API int weightd_unit_set_alias(weightd_unit *u, const char *slot, const char *target,
				       weightd_error *err);

/*
 * Send the whole unit as one request (every slot must have a source: else
 * WEIGHTD_E_INVALID_ARGUMENT naming it). The daemon validates it completely (names unique,
 * aliases resolve, every recipe infers, declared dtypes and shapes match) before materializing
 * anything. Returns at once.
 */
WEIGHTD_API int weightd_unit_submit(weightd_unit *u, weightd_error *err);

/* Without waiting: *ret_done = 1 when the reply to the submitted unit has arrived (finish will
 * not block), 0 otherwise. */
WEIGHTD_API int weightd_unit_poll(weightd_unit *u, int *ret_done, weightd_error *err);

/*
 * Wait for the reply. All-or-nothing: on success the unit holds a weight for every slot (one fd
 * per segment, shared with every other unit of the client that uses it; aliases and identical
 * recipes share a weight); on failure it holds nothing (any fd that came is closed and its
 * reference released) and the error names the slot.
 */
WEIGHTD_API int weightd_unit_finish(weightd_unit *u, weightd_error *err);

/*
 * Do every fallible step of binding (finish first, if not done yet): for each slot check the
 * weight's dtype and shape against the declaration and its byte count against dtype x shape;
 * fstat each fd and check its size covers the weight; map each distinct weight once (PROT_READ,
 * MAP_SHARED). On failure everything is undone: no mapping, no fd, no reference is left, nothing
 * was published, and the error names the slot, checkpoint and tensor.
 */
WEIGHTD_API int weightd_unit_validate(weightd_unit *u, weightd_error *err);

/*
 * Ask validate to pre-fault the unit's memory (on != 0; off by default): once every slot is
 * mapped, validate enters each distinct weight's pages into this process's page tables
 * (MADV_POPULATE_READ, Linux 5.14 and later; a read of each page on older kernels), so the
 * engine pays its page faults in one batch before it serves instead of during its first
 * requests. Costs validate the time of those faults; then touching the unit takes none.
 * Advisory: a populate the kernel refuses (out of memory for page tables, a signal) leaves the
 * unit mapped and validate succeeds as without it; the memory then faults in on first touch as
 * usual. Takes effect at the next validate (a validated unit is not populated again).
 * Returns 0, or WEIGHTD_E_INVALID_ARGUMENT when u is NULL.
 */
WEIGHTD_API int weightd_unit_set_populate(weightd_unit *u, int on, weightd_error *err);

/*
 * Store each slot's address into its destination (slots declared with dest NULL are skipped;
 * aliases get their target's address; a weight of 0 bytes publishes NULL). Only stores pointers:
 * it cannot fail. Does nothing unless the last weightd_unit_validate succeeded.
 */
WEIGHTD_API void weightd_unit_bind(weightd_unit *u);

/*
 * Unmap and release every weight of the unit (one Release message), abandon a submitted request,
 * free the unit. Pointers bind published are invalid afterwards: stop using them first. The
 * destinations themselves are not touched. Accepts NULL.
 */
WEIGHTD_API void weightd_unit_free(weightd_unit *u);

/* Slots, in declaration order. */
WEIGHTD_API size_t weightd_unit_slot_count(const weightd_unit *u);
WEIGHTD_API const char *weightd_unit_slot_name(const weightd_unit *u, size_t i);
/* A slot's weight after a successful finish (borrowed from the unit), else NULL. */
WEIGHTD_API const weightd_weight *weightd_unit_weight(const weightd_unit *u, const char *slot);
/* A slot's mapped memory after a successful validate, else NULL. */
WEIGHTD_API const void *weightd_unit_data(const weightd_unit *u, const char *slot);
/* Checkpoint bytes the daemon read to answer the last finished submit (0: all shared). */
WEIGHTD_API uint64_t weightd_unit_bytes_read(const weightd_unit *u);

/*
 * Build a unit from JSON (destinations are NULL; use weightd_unit_data). Either a single recipe
 * object (see Recipes), which becomes one slot named "output", or
 *
 *   {"slots": [
 *      {"name": "q", "dtype": "F16", "shape": [512, 4096], "recipe": R},
 *      {"name": "wte", "recipe": R},                       (no dtype: no declared expectation)
 *      {"name": "lm_head", "alias": "wte"}
 *   ]}
 *
 * where "shape" needs "dtype". Errors give the JSON path.
 */
WEIGHTD_API int weightd_unit_from_json(weightd_client *c, const char *text, size_t len,
				       weightd_unit **ret, weightd_error *err);

/* =========================================================================================== */
/* Preflight                                                                                    */
/* =========================================================================================== */

typedef struct weightd_output_info {
	const char *name;
	const char *dtype;
	size_t ndim;
	const uint64_t *shape;
	uint64_t nbytes;
	const char *alias_of;   /* "" unless the slot is an alias */
	const uint8_t *key;     /* WEIGHTD_DIGEST_LEN bytes: the identity it would have, or NULL */
} weightd_output_info;

typedef struct weightd_preflight {
	size_t count;
	const weightd_output_info *outputs;
} weightd_preflight;

/*
 * Ask the daemon to check the unit and infer each output's dtype, shape and byte count from
 * metadata alone: no payload is read, nothing is materialized or held. Asynchronous like
 * materialize: returns an in-flight handle at once; collect it with weightd_preflight_finish
 * (or drop it with weightd_inflight_free). The outputs are one per slot, in the daemon's order:
 * the slots with a source of their own, then the aliases (protocol version 3 lists the slots
 * given a whole tensor after those given a recipe or a selection); find a slot by its name.
 */
WEIGHTD_API int weightd_unit_preflight(weightd_unit *u, weightd_inflight **ret,
				       weightd_error *err);

/* Wait for a preflight's reply; consumes `f`. *ret is freed with weightd_preflight_free. Errors
 * name the slot and node. */
WEIGHTD_API int weightd_preflight_finish(weightd_inflight *f, weightd_preflight **ret,
					 weightd_error *err);
WEIGHTD_API void weightd_preflight_free(weightd_preflight *p);

/* =========================================================================================== */
/* Generation events                                                                            */
/* =========================================================================================== */

/*
 * Ask to be told when the named checkpoints get a new generation (their files changed and the
 * daemon reloaded) or are removed. Replaces the client's previous subscription; n = 0
 * unsubscribes. Events queue up in the library (at most 1024; older ones are dropped first and
 * counted) until weightd_poll_events collects them.
 */
WEIGHTD_API int weightd_subscribe(weightd_client *c, const char *const *checkpoints, size_t n,
				  weightd_error *err);

typedef struct weightd_event {
	const char *checkpoint;
	uint64_t generation;
	const char *what;        /* "generation", "removed", or WEIGHTD_EVENT_RECONNECTED */
} weightd_event;

/*
 * weightd went away (restarted, crashed) and this client connected to it again, on the first
 * call after it was back: checkpoint is "", generation the number of held weights re-attached.
 * Nothing this process maps changed: each weight it holds is locked in the kernel, and no weightd
 * changes a locked weight. The re-attached ones count as this client's again (its references,
 * shares, limits); one weightd no longer has (its record lost) stays mapped and intact until
 * released. Requests in flight when it went away failed with WEIGHTD_E_DISCONNECTED; a call made
 * while it is down fails the same way and the next one tries again. Subscriptions are renewed.
 * Queued without a subscription. WEIGHTD_RECONNECT=0 in the environment turns reconnection off.
 */
#define WEIGHTD_EVENT_RECONNECTED "reconnected"

typedef struct weightd_event_list {
	size_t count;
	const weightd_event *events;   /* oldest first */
	uint64_t dropped;              /* events lost to the queue bound since the last poll */
} weightd_event_list;

/*
 * Collect pending events, waiting up to timeout_ms (0: do not wait; -1: until at least one
 * arrives) when none is queued. *ret (possibly with count 0) is freed with
 * weightd_event_list_free. Each event is delivered to exactly one caller.
 */
WEIGHTD_API int weightd_poll_events(weightd_client *c, int timeout_ms, weightd_event_list **ret,
				    weightd_error *err);
WEIGHTD_API void weightd_event_list_free(weightd_event_list *l);

#ifdef __cplusplus
}
#endif

#endif
