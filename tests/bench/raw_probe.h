/* SPDX-License-Identifier: Apache-2.0 */
/* raw_probe.h - the reference the unit benchmarks compare weightd with: a server process that
 * holds N read-only shared-memory fds and passes all of them over a socketpair per request, and
 * a client that receives and maps each. No protocol, no library: the floor of "one fd per weight". */
#ifndef WD_BENCH_RAW_PROBE_H
#define WD_BENCH_RAW_PROBE_H

/*
 * Header-only (static functions): each benchmark compiles alone.
 *
 * probe_start(p, n, size) makes n POSIX shared-memory objects of `size` bytes (written, so their
 * pages exist, like a materialized weight's), reopens each O_RDONLY, unlinks them, and forks a
 * server holding those fds. One round trip (probe_round): the client sends a one-byte request;
 * the server answers with the n fds, at most 250 per sendmsg (one data byte each, as weightd's
 * frames carry them); the client receives them (MSG_CMSG_CLOEXEC), fstats and maps each
 * (PROT_READ, MAP_SHARED, as libweightd's validate does), then unmaps and closes them all (as a
 * unit's free does).
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define PROBE_FDS_PER_MSG 250

struct probe {
	pid_t pid;
	int sock;
	int n;
	size_t size;
	int *fds;        /* client side: the fds of one round */
	void **maps;
};

static void probe_serve(int sock, const int *fds, int n)
{
	char req;

	while (read(sock, &req, 1) == 1 && req == 'r') {
		for (int at = 0; at < n; at += PROBE_FDS_PER_MSG) {
			int k = n - at < PROBE_FDS_PER_MSG ? n - at : PROBE_FDS_PER_MSG;
			union {
				char buf[CMSG_SPACE(sizeof(int) * PROBE_FDS_PER_MSG)];
				struct cmsghdr align;
			} u;
			char byte = 'f';
			struct iovec iov = { &byte, 1 };
			struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
					    .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)k) };
			struct cmsghdr *c = CMSG_FIRSTHDR(&m);

			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)k);
			memcpy(CMSG_DATA(c), fds + at, sizeof(int) * (size_t)k);
			if (sendmsg(sock, &m, MSG_NOSIGNAL) != 1)
				_exit(1);
		}
	}
	_exit(0);
}

/* Start the server. 0, or -1 with a message on stderr. The caller needs n + ~20 fds to spare. */
static int probe_start(struct probe *p, int n, size_t size)
{
	int sv[2], *fds = calloc((size_t)n, sizeof(int));
	char name[64], *page = malloc(size);

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->sock = -1;
	p->n = n;
	p->size = size;
	p->fds = calloc((size_t)n, sizeof(int));
	p->maps = calloc((size_t)n, sizeof(void *));
	if (!fds || !page || !p->fds || !p->maps)
		goto fail;
	memset(page, 0x5a, size);
	for (int i = 0; i < n; i++) {
		int w;
		snprintf(name, sizeof(name), "/wdprobe%d.%d", (int)getpid(), i);
		w = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (w < 0)
			goto fail;
		if (pwrite(w, page, size, 0) != (ssize_t)size) {
			close(w);
			shm_unlink(name);
			goto fail;
		}
		fds[i] = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
		close(w);
		shm_unlink(name);
		if (fds[i] < 0)
			goto fail;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		goto fail;
	p->pid = fork();
	if (p->pid < 0)
		goto fail;
	if (p->pid == 0) {
		close(sv[0]);
		probe_serve(sv[1], fds, n);
	}
	close(sv[1]);
	p->sock = sv[0];
	for (int i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
	free(page);
	return 0;
fail:
	fprintf(stderr, "raw probe: %s\n", strerror(errno));
	free(fds);
	free(page);
	return -1;
}

/* One round trip: request, receive n fds, fstat + map each, unmap + close each. 0 or -1. */
static int probe_round(struct probe *p)
{
	int got = 0;

	if (write(p->sock, "r", 1) != 1)
		return -1;
	while (got < p->n) {
		union {
			char buf[CMSG_SPACE(sizeof(int) * PROBE_FDS_PER_MSG)];
			struct cmsghdr align;
		} u;
		char byte;
		struct iovec iov = { &byte, 1 };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				    .msg_controllen = sizeof(u.buf) };
		struct cmsghdr *c;

		if (recvmsg(p->sock, &m, MSG_CMSG_CLOEXEC) != 1 || (m.msg_flags & MSG_CTRUNC))
			return -1;
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
			    got + (int)k > p->n)
				return -1;
			memcpy(p->fds + got, CMSG_DATA(c), k * sizeof(int));
			got += (int)k;
		}
	}
	for (int i = 0; i < p->n; i++) {
		struct stat sb;
		if (fstat(p->fds[i], &sb) < 0 || (size_t)sb.st_size < p->size)
			return -1;
		p->maps[i] = mmap(NULL, p->size, PROT_READ, MAP_SHARED, p->fds[i], 0);
		if (p->maps[i] == MAP_FAILED)
			return -1;
	}
	for (int i = 0; i < p->n; i++) {
		munmap(p->maps[i], p->size);
		close(p->fds[i]);
	}
	return 0;
}

static void probe_stop(struct probe *p)
{
	if (p->sock >= 0) {
		if (write(p->sock, "q", 1) != 1)
			kill(p->pid, SIGKILL);
		close(p->sock);
	}
	if (p->pid > 0)
		waitpid(p->pid, NULL, 0);
	free(p->fds);
	free(p->maps);
	p->fds = NULL;
	p->maps = NULL;
	p->sock = -1;
	p->pid = -1;
}

#endif
