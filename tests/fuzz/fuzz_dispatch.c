/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_dispatch.c - the daemon's request path end to end: frame decoder, request decoder
 * (protobuf), dispatch and every request handler (hello, list, describe, preflight, materialize,
 * share, release, status, subscribe, evict, reload, reattach), with the session's limits and
 * replies.
 *
 * One real daemon context (catalog, cache, one worker, server) is built once around a small
 * safetensors checkpoint written at start. Each input becomes one client on a socketpair: its
 * bytes are sent, the client shuts down its sending side (a half-close, which must still be
 * answered), and the event loop runs until the daemon has answered and closed the connection;
 * replies are read and their fds closed. Then every weight is evicted, so each input starts from
 * the same state and nothing accumulates in /dev/shm.
 *
 * Input: byte 0 picks the form. Odd: the rest is sent as is (a raw stream). Even: the rest is a
 * list of [u16 LE length][protobuf Request], each sent as a frame, after a valid hello when bit 1
 * is set (of protocol version 3, or 2 when bit 2 is set too); this lets the fuzzer reach the
 * handlers without learning the framing first.
 */
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cache.h"
#include "catalog.h"
#include "config.h"
#include "daemon.h"
#include "log.h"
#include "pool.h"
#include "segment.h"
#include "server.h"
#include "st_writer.h"
#include "wd_limits.h"
#include "weightd.pb-c.h"

static void check(int ok)
{
	if (!ok)
		__builtin_trap();
}

static struct daemon D;
static char dir[4096];
static int dummy_listen[2] = { -1, -1 };

static void teardown(void)
{
	server_free(D.server);
	pool_free(D.pool, 0); /* no job runs between inputs: returns at once */
	cache_free(D.cache, true);
	catalog_free(D.catalog);
	if (D.base)
		event_base_free(D.base);
	if (D.cfg)
		wd_segment_purge(D.cfg->shm_prefix);
	config_free(D.cfg);
	close(dummy_listen[1]);
	stw_rmtree(dir);
}

static void setup(void)
{
	const struct stw_tensor ts[] = {
		{ .name = "a", .dtype = "F32", .ndim = 2, .shape = { 8, 16 } },
		{ .name = "b", .dtype = "BF16", .ndim = 2, .shape = { 16, 8 } },
		{ .name = "c", .dtype = "U8", .ndim = 1, .shape = { 100 } },
		{ .name = "d", .dtype = "F16", .ndim = 3, .shape = { 2, 3, 4 } },
	};
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	char ckpt[4200], conf[4200];
	weightd_error err;
	FILE *f;

	check(stw_tmpdir(dir, sizeof(dir)) == 0);
	snprintf(ckpt, sizeof(ckpt), "%s/m.safetensors", dir);
	check(stw_write(ckpt, ts, sizeof(ts) / sizeof(ts[0]), NULL, 0, NULL) == 0);
	snprintf(conf, sizeof(conf), "%s/weightd.conf", dir);
	f = fopen(conf, "w");
	check(f != NULL);
	/* small limits, so the fuzzer reaches them */
	fprintf(f, "[daemon]\nsocket = %s/unused.sock\nshm_prefix = wdfuzz%d\nstate_dir =\n"
		   "budget = 16M\nworkers = 1\nclient_max_pending = 4\nclient_max_weights = 8\n"
		   "client_max_queue_fds = 4\nmax_frame = 65536\n\n"
		   "[checkpoint:m]\npath = %s\n\n[checkpoint:n]\npath = %s\nallow_users = 12345\n\n"
		   "[checkpoint:missing]\npath = %s/nothing\n",
		dir, (int)getpid(), ckpt, ckpt, dir);
	check(fclose(f) == 0);
	wd_error_clear(&err);
	check(config_load(conf, &D.cfg, &err) == 0);
	log_set_level(LOG_LVL_ERR);
	snprintf(D.instance, sizeof(D.instance), "%s", D.cfg->shm_prefix);
	D.base = event_base_new();
	D.pool = pool_new(D.base, 1);
	{
		struct cache_params cp = {
			.budget = D.cfg->budget_bytes, .segment_max = D.cfg->segment_max_bytes,
			.max_idle_weights = D.cfg->max_idle_weights,
			.max_idle_segments = D.cfg->max_idle_segments, .state_dir = "",
			.instance = D.instance, .pool = D.pool, .stats = &D.stats,
		};

		D.cache = cache_new(&cp);
	}
	D.catalog = catalog_new(D.cfg, &lim);
	/* the server needs a listener; one that never becomes readable: no client is accepted */
	check(pipe(dummy_listen) == 0);
	D.server = server_new(&D, dummy_listen[0]);
	check(D.base && D.pool && D.cache && D.catalog && D.server);
	atexit(teardown);
}

/* One client's conversation. */
struct conv {
	int fd;
	const uint8_t *out;
	size_t out_len, sent;
	bool eof;
	struct event *ev;
};

static void on_client(evutil_socket_t fd, short what, void *arg)
{
	struct conv *cv = arg;

	if (what & EV_WRITE) {
		while (cv->sent < cv->out_len) {
			ssize_t k = send(fd, cv->out + cv->sent, cv->out_len - cv->sent,
					 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (k <= 0) {
				if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				cv->sent = cv->out_len; /* the daemon hung up: stop sending */
				break;
			}
			cv->sent += (size_t)k;
		}
		if (cv->sent == cv->out_len) {
			shutdown(fd, SHUT_WR);
			event_del(cv->ev);
			event_assign(cv->ev, D.base, fd, EV_READ | EV_PERSIST, on_client, cv);
			event_add(cv->ev, NULL);
		}
	}
	for (;;) {
		uint8_t buf[65536];
		char cbuf[CMSG_SPACE(sizeof(int) * 253)];
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		ssize_t k = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); k > 0 && c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
					int rfd;

					memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
					close(rfd);
				}
		if (k <= 0) {
			cv->eof = true;
			event_base_loopbreak(D.base);
			return;
		}
	}
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	__builtin_trap(); /* the daemon neither answered nor closed: a hang */
}

/* A frame: u32 LE length, u32 LE fd count (0), payload. */
static void put_frame(uint8_t *out, size_t *n, const uint8_t *p, size_t len)
{
	out[(*n)++] = (uint8_t)len;
	out[(*n)++] = (uint8_t)(len >> 8);
	out[(*n)++] = (uint8_t)(len >> 16);
	out[(*n)++] = (uint8_t)(len >> 24);
	memset(out + *n, 0, 4);
	*n += 4;
	memcpy(out + *n, p, len);
	*n += len;
}

/* The byte stream the client sends for this input (malloc'd). */
static uint8_t *stream_of(const uint8_t *data, size_t size, size_t *ret_len)
{
	/* Request{id: 1, hello: {protocol_version: 2, client_name: "f", max_protocol_version: 3}}:
	 * version 3; with bit 2 of byte 0 set, max_protocol_version 2: refused, no version in
	 * common */
	uint8_t hello[] = { 0x08, 0x01, 0x52, 0x07, 0x08, 0x02, 0x12, 0x01, 'f', 0x18, 0x03 };
	uint8_t *out = malloc(size * 4 + 64); /* each 2-byte length becomes an 8-byte header */
	size_t n = 0;

	check(out != NULL);
	if (size == 0) {
		*ret_len = 0;
		return out;
	}
	if (data[0] & 1) {
		memcpy(out, data + 1, size - 1);
		*ret_len = size - 1;
		return out;
	}
	if (data[0] & 4)
		hello[sizeof(hello) - 1] = 0x02;
	if (data[0] & 2)
		put_frame(out, &n, hello, sizeof(hello));
	for (size_t i = 1; i + 2 <= size;) {
		size_t len = (size_t)data[i] | (size_t)data[i + 1] << 8;

		i += 2;
		if (len > size - i)
			len = size - i;
		put_frame(out, &n, data + i, len);
		i += len;
	}
	*ret_len = n;
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct timeval limit = { 20, 0 };
	struct event *timeout;
	struct conv cv = { 0 };
	uint64_t bytes = 0;
	int sv[2];

	if (!D.base)
		setup();
	check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
	cv.fd = sv[1];
	cv.out = stream_of(data, size, &cv.out_len);
	cv.ev = event_new(D.base, sv[1], EV_WRITE | EV_READ | EV_PERSIST, on_client, &cv);
	timeout = evtimer_new(D.base, on_timeout, NULL);
	check(cv.ev && timeout && event_add(cv.ev, NULL) == 0 && evtimer_add(timeout, &limit) == 0);
	server_add_client(D.server, sv[0]);
	while (!cv.eof)
		event_base_loop(D.base, EVLOOP_ONCE);
	/* jobs a dead client left behind finish; then the cache is emptied for the next input */
	while (cache_job_count(D.cache))
		event_base_loop(D.base, EVLOOP_ONCE);
	event_base_loop(D.base, EVLOOP_NONBLOCK); /* reap the session */
	cache_evict_all(D.cache, &bytes);
	check(cache_count(D.cache) == 0 && cache_references(D.cache) == 0);
	check(server_clients(D.server) == 0);
	event_free(timeout);
	event_free(cv.ev);
	close(sv[1]);
	free((void *)cv.out);
	return 0;
}
