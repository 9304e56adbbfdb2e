/* SPDX-License-Identifier: Apache-2.0 */
/* hostile.h - what the hostile-neighbour tests share (hostile.c): a daemon with a checkpoint any
 * uid may read ("tiny") and one only root may read ("secret"), children that run as other uids,
 * the victim every test keeps serving, and the baseline the daemon must return to. Needs root to
 * take on other credentials. */
#ifndef WD_HOSTILE_H
#define WD_HOSTILE_H

#include <grp.h>
#include <signal.h>

#include "rawwire.h"

#define UID_ATTACKER	   65534 /* nobody */
#define UID_VICTIM	   1	 /* daemon: another unprivileged uid */
#define TENSOR_BYTES	   65536
#define ERR_LIMIT_EXCEEDED 9

/* "tiny": t0..t3, U8[65536] each, byte i of tk = it_pattern_byte(i, k), and m0, m1 F32[256, 256].
 * "secret": root only. */
int hostile_fixtures(struct harness *h, char *sections, size_t cap);

/* Start a daemon with these [daemon] lines, or fail the test. */
void hostile_start(struct harness *h, const char *extra);

/* In a forked child: become `uid` (group the same number, no supplementary groups). */
void hostile_become(uid_t uid);

/*
 * A victim of another uid is served: in a child as UID_VICTIM, connect, materialize tiny:t2, map
 * it and check every byte. Returns 0 or fails the test (the child prints what went wrong).
 */
void hostile_victim_served(const struct harness *h);

/* Under AddressSanitizer freed memory sits in quarantine, so the daemon's RSS says nothing about
 * what it holds: memory is then checked by the status counters only. */
#if defined(__SANITIZE_ADDRESS__)
#define HOSTILE_RSS_MEANINGFUL 0
#else
#define HOSTILE_RSS_MEANINGFUL 1
#endif

/* The daemon's state before an attack: what it must come back to. */
struct hostile_base {
	int fds; /* it_fd_base */
	long rss_kb;
};

struct hostile_base hostile_baseline(const struct harness *h);

/*
 * Memory the daemon may gain or lose without any attack: each of its 2 workers takes its
 * read/hash buffers (a few MiB) on its first task and gives them back when idle, whenever that
 * is. RSS is checked with this much slack; the attacks are sized well past it.
 */
#define HOSTILE_RSS_SLACK_KB (16 * 1024)

/* Back to baseline: fds (it_leak_check: also nothing held, one segment per cached weight and
 * none besides), memory within HOSTILE_RSS_SLACK_KB of where it was. */
void hostile_back_to_base(const struct harness *h, const struct hostile_base *b);

/*
 * The same while `foreign` objects someone else made sit under the prefix (an attack left them,
 * the daemon must neither open nor remove them): fds and memory as hostile_back_to_base, and
 * /dev/shm holds the daemon's segments plus exactly those.
 */
void hostile_back_to_base_foreign(const struct harness *h, const struct hostile_base *b,
				  int foreign);

/* A child to parent line channel: the attacker says where it is, the parent says go on. */
struct hostile_chan {
	int to_child[2], to_parent[2];
};

void chan_open(struct hostile_chan *ch);

/* In the child: keep its ends. In the parent: keep the other ends. */
void chan_child(struct hostile_chan *ch);

void chan_parent(struct hostile_chan *ch);

void chan_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void chan_say(int fd, const char *fmt, ...);

/* Read one line (up to '\n', which is dropped); false at EOF. */
bool chan_hear(int fd, char *line, size_t cap);

/*
 * Wait up to timeout_ms for what the daemon says when it closes a connection on its own: an error
 * frame with request id 0, then end of stream. 1 with the code and message, 0 when the
 * connection ended without one, -1 on timeout. Replies before it are skipped (fds closed).
 */
int hostile_closing_error(int fd, uint64_t *ret_code, char *msg, size_t cap, int timeout_ms);

/* After the closing error: the daemon has closed the connection (end of stream within 5 s). */
bool hostile_eof(int fd);

/* An attack's child: chan_open(ch), then fork. The child's pid in the parent, 0 in the child;
 * a fork that fails fails the test. */
pid_t hostile_fork(struct hostile_chan *ch);

/* The parent's end of an attack: the child's exit status 0 awaited (it_wait_child_ok), then the
 * parent's ends of the channel closed. */
void hostile_reap(struct hostile_chan *ch, pid_t pid);

/* In a child: a raw connection to h's daemon as the current uid that said hello; the child exits
 * 10 when it cannot connect, 11 when hello is refused. */
int hostile_conn(const struct harness *h);

/* A get of ckpt:tensor (`bytes` long, pattern `seed`) by the victim, in a child as UID_VICTIM,
 * its bytes checked; fails the test if it was not served. *ret_ms (unless NULL): how long the
 * get itself took, connecting not counted. */
void hostile_victim_get(const struct harness *h, const char *ckpt, const char *tensor,
			unsigned seed, uint64_t bytes, int64_t *ret_ms);

/* An attack's start: h's daemon started with `extra` [daemon] lines (hostile_start), its baseline
 * into *ret_base, then fork. The child's pid in the parent, 0 in the child. */
pid_t hostile_attack(struct harness *h, const char *extra, struct hostile_base *ret_base);

#endif
