/* SPDX-License-Identifier: Apache-2.0 */
/* admit.h - remote checkpoints admitted off the main loop, each on a thread of its own, and
 * admitted again after a failure. */
#ifndef WD_ADMIT_H
#define WD_ADMIT_H

#include <stdint.h>

struct catalog;
struct csource;
struct event_base;

/*
 * Reading a remote checkpoint's index and headers takes requests to a server that may be slow,
 * far or hung (bounded only by the remote timeouts and retries). The catalog leaves such an entry
 * LOADING; admit_start gives each one a thread that opens it (catalog_open), and the main loop
 * takes the result (catalog_admitted) and calls admitted(cs, arg). So a hung server holds neither
 * the event loop, nor a worker, nor another checkpoint's admission. Main thread only.
 */
struct admit;
/*
 * A remote entry whose admission failed (at start, on a retry or by a reload) is tried again by
 * itself: after 1 s, then 2, 4, ... up to retry_max_ms (0: never). Its csource says how often it
 * failed and when the next try is (admit_failures, retry_at_ms); a manual reload still tries it
 * at once.
 */
struct admit *admit_new(struct event_base *base, void (*admitted)(struct csource *cs, void *arg),
			void *arg, uint64_t retry_max_ms);
/* Start a thread for every LOADING entry of c that has none yet. */
void admit_start(struct admit *a, struct catalog *c);
/* Admissions still running. */
unsigned admit_running(const struct admit *a);
/* Counters since start: admissions that failed, and retries begun. Zeros for NULL. */
void admit_counters(const struct admit *a, uint64_t *ret_failed, uint64_t *ret_retries);
/* Stop: every remote transfer is cancelled (wd_remote_stop), the threads are joined and their
 * results dropped. Accepts NULL. */
void admit_free(struct admit *a);

#endif
