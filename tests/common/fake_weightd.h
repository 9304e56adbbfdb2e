/* SPDX-License-Identifier: Apache-2.0 */
/* fake_weightd.h - a scripted stand-in for weightd that libweightd's unit tests talk to. */
#ifndef WD_TEST_FAKE_WEIGHTD_H
#define WD_TEST_FAKE_WEIGHTD_H

/*
 * A server thread listening on a Unix socket in a temp dir, serving one connection at a time
 * (the next is accepted when the current one ends). It speaks real frames (src/frame.h)
 * and real weightd.Request/Response messages, answers Hello itself, records every request it
 * decodes, and hands each to the test's handler, which replies (or not, or later, or by hanging
 * up) through fake_reply*. Weights it sends are memfds named "wdtest" so a test can count
 * exactly the fds and mappings that came from it in /proc/self.
 *
 * fake_weightd.c, in the test-support library.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "frame.h"
#include "weightd.pb-c.h"

#define FAKE_MAX_REQS 4096
/*
 * The protocol version the fake's hello names unless a test sets hello_version (after start,
 * before connecting): 3, whose materialize replies the tests' handlers write as columns
 * (fake_packed, fake_reply_packed).
 */
#define FAKE_VERSION 3

struct fake;

/* Called on the server thread for every request but Hello (unless hello_too). Replies or not. */
typedef void (*fake_handler)(struct fake *f, const Weightd__Request *req);

struct fake {
	char dir[64];
	char path[128];
	int lsock;
	int conn;
	pthread_t thread;
	atomic_bool stop;
	fake_handler handler;
	void *ctx;
	atomic_bool hello_too;       /* pass Hello to the handler as well */
	atomic_uint hello_version;   /* what the default Hello reply says (tests may change it */
	atomic_uint max_pending;     /* after start, before connecting) */
	pthread_mutex_t mu;
	Weightd__Request *reqs[FAKE_MAX_REQS];
	size_t n_reqs;
	atomic_size_t handled;       /* requests fully handled (handler returned) */
	struct wd_inbuf *in;
};

/* A read-only fd to a fresh memfd holding data[0..n) (the daemon's fds are read-only too). */
int fake_memfd(const void *data, size_t n);

/* Send one Response with fds (borrowed: the caller closes them after). */
void fake_reply_fds(struct fake *f, Weightd__Response *resp, const int *fds, size_t nfds);

void fake_reply(struct fake *f, Weightd__Response *resp);

/* Answer a unit request, a preflight or a materialize as req is, with ur and fds (closed here
 * once sent). */
void fake_reply_unit(struct fake *f, const Weightd__Request *req, Weightd__UnitReply *ur,
		     const int *fds, size_t nfds);

/* An error reply with every structured field. */
void fake_reply_error(struct fake *f, uint64_t id, int code, const char *slot, uint32_t node,
		      const char *msg);

/* The empty answer to a list, release or subscribe (unsupported for anything else). */
void fake_reply_empty(struct fake *f, const Weightd__Request *req);

/* Hang up on the client (the server thread then waits for stop). */
void fake_disconnect(struct fake *f);

struct fake *fake_start(fake_handler h, void *ctx);

void fake_stop(struct fake *f);

/* Requests of one kind received so far. */
size_t fake_count(struct fake *f, int body_case);

/* The i-th request of a kind (owned by the fake), or NULL. */
const Weightd__Request *fake_nth(struct fake *f, int body_case, size_t i);

void fake_sleep_ms(int ms);

/* Wait up to 5 s until n requests of a kind arrived; returns how many did. */
size_t fake_wait_count(struct fake *f, int body_case, size_t n);

/* Wait until every request received has been handled (its reply sent, its fds closed). */
void fake_settle(struct fake *f);

/* Every handle of every Release received, in order, into out (at most cap); returns the count. */
size_t fake_released(struct fake *f, uint64_t *out, size_t cap);

/* A WeightInfo for data[0..n): digest computed here with the one-shot SHA-256. The caller
 * provides the storage the struct points into. */
struct fake_wi {
	Weightd__WeightInfo wi;
	uint64_t shape[8];
	uint8_t digest[32];
	uint8_t key[32];
};

void fake_wi_fill(struct fake_wi *w, const char *name, uint64_t handle, const char *dtype,
		  const uint64_t *shape, size_t ndim, const void *data, size_t n, uint32_t fd_index,
		  const char *alias_of);

/*
 * A packed reply (version 3) being built: its entries with fake_packed_add, in the unit's
 * output order, then each alias's entry with fake_packed_alias; &p->pw goes in UnitReply.packed.
 * Digests are SHA-256, keys the handle's low byte repeated, generations 3 (as fake_wi_fill).
 */
#define FAKE_PACKED_MAX 64
struct fake_packed {
	Weightd__PackedWeights pw;
	uint64_t handle[FAKE_PACKED_MAX], offset[FAKE_PACKED_MAX], nbytes[FAKE_PACKED_MAX];
	uint64_t generation[FAKE_PACKED_MAX], dims[FAKE_PACKED_MAX * 8 + 1];
	uint32_t segment[FAKE_PACKED_MAX], dtype[FAKE_PACKED_MAX], ndim[FAKE_PACKED_MAX];
	uint32_t alias_owner[FAKE_PACKED_MAX + 1];
	char *dtypes[FAKE_PACKED_MAX];
	uint8_t alg[FAKE_PACKED_MAX], digests[FAKE_PACKED_MAX * 32], keys[FAKE_PACKED_MAX * 32];
};

void fake_packed_init(struct fake_packed *p);

/* The next entry: weight `handle` of dtype and shape, holding data[0..n) at `offset` of
 * segment `seg` (an index into the reply's segments). */
void fake_packed_add(struct fake_packed *p, uint64_t handle, const char *dtype,
		     const uint64_t *shape, size_t ndim, const void *data, size_t n, uint32_t seg,
		     uint64_t offset);

/* The next alias resolves to entry `owner`. */
void fake_packed_alias(struct fake_packed *p, uint32_t owner);

/*
 * Answer a materialization with p's columns and nfds fds, segment i being fds[i] of size[i]
 * bytes (each a segment of its own: id 0), and close the fds.
 */
void fake_reply_packed(struct fake *f, const Weightd__Request *req, struct fake_packed *p,
		       const uint64_t *size, const int *fds, size_t nfds, uint64_t bytes_read);

/* An output of a unit request that has a source: its name, the checkpoint and tensor it reads
 * (an entry's: its recipe's first node's) and what it declares (dtype NULL: nothing). */
struct fake_source {
	const char *name, *ckpt, *tensor, *dtype;
	const uint64_t *shape;
	size_t ndim;
};

/* The outputs of a unit request that have a source, in the daemon's order: its entries, then
 * the rows of its tensor columns. Returns how many (at most cap). */
size_t fake_unit_sources(const Weightd__Unit *u, struct fake_source *out, size_t cap);

/* Element sizes of the dtypes tests serve, written out here rather than taken from the
 * library (anything else: 1). */
size_t fake_dtype_size(const char *dtype);

/* The bytes served for a weight: they depend on a name only, so a test can compute them again. */
void fake_content(const char *name, uint8_t *out, size_t n);

/* Count this process's fds, and those that are fake weights (memfd "wdtest"). */
int fake_count_fds(int *ret_weights);

/* Count mappings of fake weights in /proc/self/maps. */
int fake_count_maps(void);

#endif
