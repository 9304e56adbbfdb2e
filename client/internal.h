/* SPDX-License-Identifier: Apache-2.0 */
/* internal.h - libweightd's private types: connection, requests, weights, recipes, units. */
#ifndef WC_INTERNAL_H
#define WC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "frame.h"
#include "weightd.pb-c.h"
#include "weightd/client.h"

struct wd_inbuf;
struct wc_seg;

#define WC_MAX_REPLY (64u << 20)     /* largest reply frame accepted from the daemon */
/* Memory kept per connection between requests: units' arenas, slot arrays and encodings, and
 * replies' decoding space (a warm 10,000-slot unit uses about 12 MiB of it). Freed by
 * weightd_close (and by the last reply the user still holds). */
#define WC_MSG_CACHE (32u << 20)
/* receive buffer kept per connection between replies */
#define WC_INBUF_KEEP (8u << 20)
#define WC_MAX_MESSAGE (2ull << 30)  /* largest reply (its frames joined) */
#define WC_MAX_REPLY_FDS 65536       /* fds one reply may carry (one per segment) */
#define WC_MAX_EVENTS 1024           /* queued generation events per client */
/* nodes in one recipe built here: above the daemon's limit (65,536), so a caller over it gets the
 * daemon's error naming its limit, yet bounded */
#define WC_MAX_NODES (1u << 18)
#define WC_MAX_JSON_DEPTH 64         /* nesting of a recipe in JSON */
#define WC_MAX_INDICES (1u << 24)    /* indices in one selection */
#define WC_HELLO_TIMEOUT_MS 30000    /* connect gives up on a peer that never answers hello */

/* --- errors (err.c) -------------------------------------------------------------------------- */

void wc_err_clear(weightd_error *err);
/* Set code and sentence; returns -code. Accepts err == NULL. */
int wc_err_set(weightd_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fill the fields naming what the error is about (each may be NULL). */
void wc_err_about(weightd_error *err, const char *checkpoint, const char *tensor,
		  const char *slot);
/* Append text to the message (truncated to fit). */
void wc_err_append(weightd_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copy a daemon Error into err; returns -code (WEIGHTD_E_INTERNAL when the daemon sent 0). */
int wc_err_from_wire(weightd_error *err, const Weightd__Error *pe);
/* Copy src to dst (dst may be NULL); returns -src->code. */
int wc_err_copy(weightd_error *dst, const weightd_error *src);
/* Put 'slot "NAME": ' in front of the message when it names a slot the sentence does not. */
void wc_err_name_slot(weightd_error *err);

/* --- connection (conn.c) ------------------------------------------------------------------ */

/*
 * A request waiting for its reply. Linked in the client's list while waiting; the reader
 * unlinks it, stores the reply and sets done. `orphan` marks one nobody waits for any more: the
 * reader frees it and releases any weight its reply carries.
 */
struct wc_pending {
	uint64_t id;
	bool done;
	bool orphan;
	Weightd__Response *resp;     /* the reply (owned), NULL when failed locally */
	int *fds;                    /* fds that came with it (owned until taken) */
	uint32_t nfds;
	weightd_error err;           /* set when it failed before a reply came */
	LIST_ENTRY(wc_pending) link;  /* in the client's pending list */
};

struct wc_event {
	char *checkpoint;
	char *what;
	uint64_t generation;
};

struct weightd_client {
	atomic_uint refs;            /* the user's, plus one per inflight, unit and daemon reference */
	int sock;
	char path[108];
	pthread_mutex_t mu;          /* everything below but sock and in */
	pthread_cond_t cv;
	pthread_mutex_t send_mu;     /* one frame on the socket at a time; guards sock for sending */
	bool reading;                /* one thread reads the socket (and owns `in`) at a time */
	int dead;                    /* 0, or the code every call now fails with */
	weightd_error dead_err;
	uint64_t next_id;
	size_t n_pending;
	LIST_HEAD(, wc_pending) pending;
	struct wd_inbuf *in;
	struct wd_msg_cache *msgs;   /* blocks of units and replies, kept for the next ones */
	struct wc_event events[WC_MAX_EVENTS];
	size_t ev_head, ev_count;
	uint64_t ev_dropped;
	weightd_server_info info;
	Weightd__Response *hello;    /* backs info's strings */
	/* the segments this client holds, by the daemon's id (weight.c) */
	pthread_mutex_t seg_mu;
	struct wc_seg **seg_tab;     /* chained hash, seg_cap buckets (power of two) */
	size_t seg_cap, seg_n;
};

void wc_client_ref(weightd_client *c);
void wc_client_unref(weightd_client *c);

/*
 * Send a request. With ret_p, registers a pending entry (id assigned here) that the caller waits
 * on with wc_wait and frees with wc_pending_free; without, the reply is dropped when it comes.
 * Fails with the connection's error when it is dead, WEIGHTD_E_LIMIT_EXCEEDED when the request
 * is over the daemon's frame limit or too many are pending.
 */
int wc_send(weightd_client *c, Weightd__Request *req, struct wc_pending **ret_p,
	    weightd_error *err);

/*
 * Wait until p is done (p NULL: until an event is queued or the connection is dead), reading the
 * socket while no other thread does. timeout_ms: -1 forever, 0 only what is there now. Returns
 * true when the condition holds.
 */
bool wc_wait(weightd_client *c, struct wc_pending *p, int timeout_ms);

/*
 * Take a finished pending's result: 0 and *ret_resp (owned by the caller) plus its fds, or
 * -code with err filled (local failure or the daemon's error reply; fds of an error reply are
 * closed). Checks the body is `body`. Frees nothing else; call wc_pending_free after.
 */
int wc_pending_take(struct wc_pending *p, int body, Weightd__Response **ret_resp, int **ret_fds,
		    uint32_t *ret_nfds, weightd_error *err);

/* Free a pending that is done, or mark a waiting one orphan (the reader frees it). */
void wc_pending_free(weightd_client *c, struct wc_pending *p);

/* One blocking round trip: send, wait, take. */
int wc_call(weightd_client *c, Weightd__Request *req, int body, Weightd__Response **ret_resp,
	    int **ret_fds, uint32_t *ret_nfds, weightd_error *err);

/* Tell the daemon to drop one reference per handle (no reply waited for; nothing on failure). */
void wc_send_release(weightd_client *c, const uint64_t *handles, size_t n);

/*
 * Dispose of a reply nobody keeps: close its fds, tell the daemon to drop the references they
 * stood for (one per entry of a unit reply's columns, one for a share), free it. Any argument may be NULL/0.
 */
void wc_reply_discard(weightd_client *c, Weightd__Response *resp, int *fds, uint32_t nfds);

/* Close fds[0..n) and free the array. */
void wc_close_fds(int *fds, uint32_t n);

/* --- weights (weight.c) ------------------------------------------------------------------- */

/*
 * The daemon references one received fd stands for, shared by a weight and its local
 * duplicates. The daemon counts one reference per unit entry (two entries with the same recipe
 * share one fd but hold two; aliases hold none) and one per share; `count` is how many, and the
 * handle is released that many times when the last local holder lets go.
 */
struct wc_ref {
	atomic_uint holders;
	uint64_t handle;
	uint32_t count;
	weightd_client *c;           /* holds a client reference */
};

/*
 * A shared-memory segment this client holds: one fd and at most one mapping, counted by the
 * weights in it. Segments the daemon named (id != 0) are found by id in the client's table, so
 * each is held once however many units and weights use it; id 0 is a segment of its own (a
 * daemon that does not pack).
 */
struct wc_seg {
	uint64_t id;
	int fd;
	uint64_t size;
	uint64_t dev, ino;
	void *map;                   /* the whole segment, once mapped */
	bool mapped;
	size_t refs;                 /* under c->seg_mu */
	weightd_client *c;
	struct wc_seg *next;         /* bucket chain */
};

/*
 * The segment a received fd stands for, with one reference taken: the table's, when this client
 * has segment `id` already (the fd is checked to be the same object, then closed), else a new
 * one that owns fd. size: the segment's size (0: from fstat). fd is taken in every case.
 */
int wc_seg_get(weightd_client *c, uint64_t id, uint64_t size, int fd, struct wc_seg **ret,
	       weightd_error *err);
void wc_seg_ref(struct wc_seg *sg);
/* Drop a reference; the last one unmaps, closes and forgets the segment. Accepts NULL. */
void wc_seg_unref(struct wc_seg *sg);
/* Free the table (client destruction; every segment is gone by then). */
void wc_seg_table_free(weightd_client *c);

/* --- a unit's memory (arena.c) ------------------------------------------------------------ */

/* Bump allocation for what lives exactly as long as a unit (slot names, tensor sources, its
 * weights); freed all at once, its blocks kept by the connection for the next unit. */
struct wc_arena {
	struct wd_msg_cache *mc;
	unsigned char *last;         /* the newest block */
	unsigned char *cur;
	size_t left, next;
};
void wc_arena_init(struct wc_arena *a, struct wd_msg_cache *mc);
/* 16-byte aligned, not zeroed; NULL when out of memory. */
void *wc_arena_alloc(struct wc_arena *a, size_t size);
char *wc_arena_strdup(struct wc_arena *a, const char *s);
void wc_arena_free(struct wc_arena *a);

struct weightd_weight {
	struct wc_ref *ref;
	struct wc_seg *seg;
	uint64_t offset;
	char *name;
	char *dtype;
	size_t ndim;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	uint64_t nbytes;
	uint64_t generation;
	uint8_t digest[WEIGHTD_DIGEST_LEN];
	size_t digest_len;           /* 0: none sent */
	weightd_digest_algorithm digest_alg;
	uint8_t key[WEIGHTD_DIGEST_LEN];
	void *map;                   /* the mapping, when mapped */
	bool mapped;
	bool in_arena;               /* a unit's weight, in the unit's arena: not freed alone */
};

/*
 * What a reply says about one weight (a share's WeightInfo, or a row of a materialize reply's
 * columns): what wc_weight_new makes a weight from. Points into the reply.
 */
struct wc_weight_desc {
	uint64_t handle;
	const char *name;            /* the weight's name: its slot's, or the tensor's */
	const char *dtype;
	size_t ndim;                 /* at most WEIGHTD_MAX_DIMS (checked) */
	const uint64_t *shape;
	uint64_t nbytes;
	uint64_t generation;
	uint64_t offset;             /* in its segment */
	const uint8_t *digest;
	size_t digest_len;           /* 0: none sent */
	int digest_algorithm;        /* Weightd__DigestAlgorithm */
	const uint8_t *key;          /* WEIGHTD_DIGEST_LEN bytes, or NULL: none sent */
};

/* Check a WeightInfo (a share's, a preflight's) is well formed (dims, digest/key lengths, dtype
 * present). */
int wc_weight_info_check(const Weightd__WeightInfo *wi, weightd_error *err);
/* The description of a checked WeightInfo (pointing into it). */
void wc_weight_desc_of(const Weightd__WeightInfo *wi, struct wc_weight_desc *ret);
/* True when nbytes at offset lie inside a segment of `size` bytes, at a 64-byte boundary. */
bool wc_weight_fits(uint64_t offset, uint64_t nbytes, uint64_t size);
/* The algorithm of a digest of `len` bytes sent with `alg` (UNSPECIFIED from an older daemon
 * means SHA-256); UNKNOWN when the pair does not fit together. */
weightd_digest_algorithm wc_digest_algorithm(int alg, size_t len);
/*
 * Make a weight from a checked description in segment sg, standing for `count` daemon references
 * (the reference on sg is taken in every case: the weight's on success, dropped on failure; on
 * failure the daemon references are released). Checks the weight lies inside the segment. Takes
 * a client reference while the daemon references live. a: the unit's arena, or NULL (malloc).
 */
int wc_weight_new(weightd_client *c, const struct wc_weight_desc *d, struct wc_seg *sg,
		  uint32_t count, struct wc_arena *a, weightd_weight **ret, weightd_error *err);
/* The sentence for this process out of descriptors (see wd_nofile_text). */
void wc_nofile_text(char *buf, size_t cap);
/* Release `handle` `count` times (one message). */
void wc_release_handle(weightd_client *c, uint64_t handle, uint32_t count);
/* Map a weight (fstat size check + mmap); no-op when mapped. */
int wc_weight_map(weightd_weight *w, const char *slot, weightd_error *err);
/* Release several weights, telling the daemon in one message per client. Accepts NULL entries. */
void wc_weights_release(weightd_weight **ws, size_t n);

/* --- a materialize reply's columns (packed.c) --------------------------------------------- */

/*
 * Check a packed reply for n entries and n_aliases aliases that came with nfds fds, before any
 * of it is used: every column's length; each weight's segment, dtype, dimensions and digest
 * algorithm; each weight inside its segment; the segments listed once each, in fd order, and
 * every one used; each alias answered by an entry. On failure *ret_at is the output the error
 * is about (entry k, or alias j as n + j; SIZE_MAX: the reply as a whole), for the caller to name.
 */
int wc_packed_check(const Weightd__UnitReply *ur, size_t n, size_t n_aliases, uint32_t nfds,
		    size_t *ret_at, weightd_error *err);
/* The description of checked entry k, whose dimensions start at dims[at], named `name`. */
void wc_packed_desc(const Weightd__PackedWeights *pw, size_t k, size_t at, const char *name,
		    struct wc_weight_desc *ret);
/* Whether checked entries k and l (their dimensions at ka and la) describe a weight alike. */
bool wc_packed_alike(const Weightd__PackedWeights *pw, size_t k, size_t ka, size_t l, size_t la);

/* --- selections and recipes (recipe.c) ---------------------------------------------------- */

struct weightd_selection {
	int kind;                    /* Weightd__Selection__Kind */
	uint32_t axis;
	uint64_t start, end;
	uint64_t *indices;
	size_t n_indices;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	size_t ndim;
	uint32_t rank, world;
};

struct wc_node {
	int op;                      /* Weightd__Op */
	char *checkpoint, *tensor;   /* SOURCE */
	bool has_sel;                /* SOURCE, SELECT */
	struct weightd_selection sel;
	uint32_t *inputs;
	size_t n_inputs;
	int32_t axis;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	size_t ndim;
	uint32_t perm[WEIGHTD_MAX_DIMS];
	size_t n_perm;
	uint64_t block[WEIGHTD_MAX_DIMS];  /* DEQUANT_BLOCK */
	size_t n_block;
	char dtype[16];
	char *path;                  /* where it was in JSON, or NULL */
};

struct weightd_recipe {
	struct wc_node *nodes;
	size_t n, cap;
};

int wc_recipe_copy(const weightd_recipe *r, weightd_recipe **ret, weightd_error *err);
/* The checkpoint and tensor a recipe is mostly about (its first source node), for messages. */
void wc_recipe_about(const weightd_recipe *r, const char **ret_ckpt, const char **ret_tensor);
/* Parse a recipe object (post-order flattening) with `path` naming where it is. */
int wc_recipe_from_jobj(const void *json, const char *path, weightd_recipe **ret,
			weightd_error *err);

/* A protobuf view of a recipe: points into the recipe, which must outlive it. */
struct wc_pb_recipe {
	Weightd__Recipe msg;
	Weightd__Node *nodes;
	Weightd__Node **ptrs;
	Weightd__Selection *sels;
	/* a one-node recipe (a tensor, the usual unit entry) lives here: no allocation */
	Weightd__Node one_node;
	Weightd__Node *one_ptr;
	Weightd__Selection one_sel;
};
int wc_pb_recipe_init(struct wc_pb_recipe *pb, const weightd_recipe *r, weightd_error *err);
void wc_pb_recipe_fini(struct wc_pb_recipe *pb);

/*
 * Where the nodes of each entry's recipe came from in JSON, so errors the daemon reports about
 * a node can say it. One per unit entry.
 */
struct wc_annot {
	char *slot;
	char **paths;
	size_t n;
};
int wc_annot_add(struct wc_annot **as, size_t *n, const char *slot, const weightd_recipe *r);
void wc_annot_free(struct wc_annot *as, size_t n);
/* Append the JSON path of err->node (for err->slot, or the only entry) to the message. */
void wc_annot_apply(const struct wc_annot *as, size_t n, weightd_error *err);

/* --- in-flight requests (weight.c) -------------------------------------------------------- */

enum wc_kind { WC_MATERIALIZE, WC_PREFLIGHT };

struct weightd_inflight {
	weightd_client *c;           /* holds a client reference */
	enum wc_kind kind;
	struct wc_pending *p;
	bool settled;                /* the reply has been turned into w or err */
	weightd_weight *w;
	weightd_preflight *pre;
	weightd_error err;
	struct wc_annot *annots;
	size_t n_annots;
	char checkpoint[128], tensor[256];
	char *name;                  /* a materialization's entry: its weight's name */
};

int wc_inflight_new(weightd_client *c, enum wc_kind kind, weightd_inflight **ret,
		    weightd_error *err);
/* Wait for the reply and turn it into f->w / f->pre; returns 0 or -code with err filled. */
int wc_inflight_wait_settle(weightd_inflight *f, weightd_error *err);
/* Turn the reply of a preflight into a result (unit.c); takes resp in every case. */
int wc_preflight_from_reply(Weightd__Response *resp, weightd_preflight **ret, weightd_error *err);
/* Give slot `slot` (declared, in a unit not yet submitted) the recipe r, taking it (unit.c). */
void wc_unit_take_recipe(weightd_unit *u, const char *slot, weightd_recipe *r);

#endif
