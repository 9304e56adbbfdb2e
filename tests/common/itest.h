/* SPDX-License-Identifier: Apache-2.0 */
/* itest.h - helpers the integration tests share (itest.c, in the test-support library). Each
 * test runs its own daemon through harness.h and talks to it with the real libweightd, which the
 * test links itself. Includes what the tests use with it (libc, cmocka, libweightd). */
#ifndef WD_ITEST_H
#define WD_ITEST_H

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "weightd/client.h"

#define MiB (1024ull * 1024ull)

/* CLOCK_MONOTONIC in milliseconds. */
int64_t it_now_ms(void);

/* Byte i of the k-th tensor written with the "bytes" pattern and seed S is
 * (i * 131 + (S + k) * 7 + 13) & 0xff (wd-mkfixture's documented rule, computed here anew). */
uint8_t it_pattern_byte(uint64_t i, unsigned seed);

/* Offset of the first byte that differs from the pattern, or -1 when all match. */
int64_t it_pattern_mismatch(const uint8_t *p, uint64_t n, unsigned seed);

/* Start with defaults or fail the test (and print the log). */
void it_start(struct harness *h, const char *extra_daemon, const char *sections);

weightd_client *it_connect(const struct harness *h);

weightd_status *it_status(weightd_client *c);

/* A fresh connection's view of the daemon. */
weightd_status *it_status_of(const struct harness *h);

/* Wait until the daemon's references reach `refs` (a preload's holds, say); fails the test
 * after 30 s. */
void it_wait_references(const struct harness *h, uint64_t refs);

/* Materialize one full tensor; 0 with *ret, or the error. */
int it_get(weightd_client *c, const char *ckpt, const char *tensor, weightd_weight **ret,
	   weightd_error *err);

weightd_weight *it_get_ok(weightd_client *c, const char *ckpt, const char *tensor);
/* Tensor `tensor` of ckpt (sel NULL: whole) cast to dtype, through a recipe, or fail the test. */
weightd_weight *it_cast_ok(weightd_client *c, const char *ckpt, const char *tensor,
			   const weightd_selection *sel, const char *dtype);

const uint8_t *it_map(weightd_weight *w);

/*
 * A unit with one slot per name in names[0..n), each the whole tensor of that name in checkpoint
 * ckpt (no declared dtype or shape), submitted, then finished (validate false: no weight
 * mapped) or validated (validate true: every weight mapped, not bound). 0 with *ret, or the
 * error with nothing left held.
 */
int it_unit_of(weightd_client *c, const char *ckpt, const char *const *names, size_t n,
	       bool validate, weightd_unit **ret, weightd_error *err);

/* Adds to u the n slots a0 .. a(n-1), each an alias of the one before it and a0 of `first`:
 * 0, or the first error. */
int it_alias_chain(weightd_unit *u, const char *first, size_t n, weightd_error *err);

/*
 * Ends a unit being built, `r` what its last building call returned: when r >= 0, submits it
 * and then validates it (`validate`) or waits for it (finish). 0 with *ret the unit, or the
 * error with the unit freed.
 */
int it_unit_end(weightd_unit *u, int r, bool validate, weightd_unit **ret, weightd_error *err);

/* it_unit_of of the n tensors named `prefix`0 .. `prefix`(n-1) ("t0", "t1", ...). */
int it_unit_of_numbered(weightd_client *c, const char *ckpt, const char *prefix, size_t n,
			bool validate, weightd_unit **ret, weightd_error *err);

/* Entries of a directory but "." and "..", and other dot files (/proc/self/fd: fds open); -1
 * when it cannot be read. */
int it_count_dir(const char *path);

/* Lines of a file (/proc/self/maps: mappings); -1 when it cannot be read. */
int it_count_lines(const char *path);

/* The status entry of the weight made from ckpt:tensor (label "ckpt:tensor"), or NULL. */
const weightd_weight_status *it_weight(const weightd_status *st, const char *ckpt,
				       const char *tensor);

/* The status entry of source `name`, or NULL. */
const weightd_source_info *it_source(const weightd_status *st, const char *name);

/*
 * Wait (up to timeout_ms) until the daemon is quiet: nothing in flight, `refs` references, and no
 * clients but `others` (those the test keeps open) and the one asking, which stays connected:
 * *ret_c (close it). Returns the last status.
 */
weightd_status *it_quiet_with(const struct harness *h, uint64_t refs, uint64_t others,
			      int timeout_ms, weightd_client **ret_c);

/* it_quiet_with, the asking client closed. */
weightd_status *it_wait_quiet(const struct harness *h, uint64_t refs, uint64_t others,
			      int timeout_ms);

/* Files the daemon keeps open for its checkpoints (one per file of each ready source). */
int it_source_files(const weightd_status *st);

/*
 * The daemon's fds with no client connected, less one per segment and one per open
 * checkpoint file: what the leak check compares against. Counted while exactly one client (ours, accepted: it got a reply) is
 * connected, so a disconnect the daemon has not processed yet cannot skew it.
 */
int it_fd_base_refs(const struct harness *h, uint64_t refs);

/* it_fd_base_refs with no references held. */
int it_fd_base(const struct harness *h);

/*
 * The leak check every test ends with: nothing in flight, `refs` references left (0 unless the
 * daemon holds preloads), one object under the prefix per segment the daemon reports and none
 * besides, every cached weight in one of those segments, and the daemon's fds back to the base
 * plus one per segment and checkpoint file (plus the asking client's).
 */
void it_leak_check(const struct harness *h, int fd_base, uint64_t refs);

/* Run wd-mkfixture with printf-style arguments, or fail. */
void it_fixture(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A raw connection to the daemon's socket (no hello): for clients that misbehave. */
int it_raw_connect(const struct harness *h);

/*
 * One status request as a frame, encoded by hand from the wire format (independent of the
 * library): header = uint32 LE payload length, uint32 LE fd count; payload = protobuf Request
 * {id (field 1, varint), status (field 17, empty message)}.
 */
size_t it_status_frame(uint8_t *out, uint8_t id);

/*
 * Fork a child joined to this process by two pipes. In the child (returns 0), *ret_to is the end
 * it reads what the parent sends and *ret_from the end it writes to the parent; in the parent
 * (returns the child's pid), *ret_to is the end it writes to the child and *ret_from the end it
 * reads the child's answers from. Each closes the other's ends; a failure fails the test.
 */
pid_t it_fork_piped(int *ret_to, int *ret_from);

/* weightctl ARGS... (NULL-terminated) as uid ((uid_t)-1: as this process; another uid runs with
 * the gid of the same number): its exit status, its stdout in out (cap bytes, NUL-terminated). */
int it_ctl(uid_t uid, char *out, size_t cap, ...);

/* In a child: a printf-style line written to fd (to its parent); the child exits 3 when it cannot
 * write it whole. */
void it_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A child's report to its parent: the first failure only is kept, as its code (*rc; -1 for a
 * code of 0, a failed check) and its sentence (msg, cap bytes). */
void it_report_fail(int *rc, char *msg, size_t cap, int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Wait for a child and require exit status 0. */
void it_wait_child_ok(pid_t pid);

#endif
