/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_peer.c - a connection's credentials: uid, gid, pid, and every supplementary group
 * of a peer that has far more than the 256 an earlier fixed buffer kept. */
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "peer.h"

/*
 * A child takes `n` supplementary groups (1000 .. 1000+n-1), connects to a listening socket and
 * waits; the parent's peer_read of the accepted connection must list every one of them.
 */
static void groups_of(size_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), cfd, status;
	struct peer p;
	pid_t pid;
	int ready[2];
	char c;

	assert_true(lfd >= 0);
	/* abstract name: nothing on disk to clean up */
	snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "wd-test-peer-%d-%zu", (int)getpid(), n);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gid_t *g = malloc(n * sizeof(gid_t));
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		for (size_t i = 0; g && i < n; i++)
			g[i] = (gid_t)(1000 + i);
		if (!g || setgroups(n, g) < 0 || fd < 0 ||
		    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			_exit(1);
		(void)!read(ready[0], &c, 1); /* keep the connection until the parent has read it */
		_exit(0);
	}
	close(ready[0]);
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(cfd >= 0);
	assert_int_equal(peer_read(cfd, &p), 0);
	assert_int_equal(p.pid, pid);
	assert_int_equal(p.uid, getuid());
	assert_int_equal(p.n_groups, n);
	for (size_t i = 0; i < n; i++) {
		bool found = false;

		for (size_t k = 0; k < p.n_groups && !found; k++)
			found = p.groups[k] == (gid_t)(1000 + i);
		if (!found)
			fail_msg("group %zu of %zu is missing", 1000 + i, n);
	}
	peer_clear(&p);
	assert_null(p.groups);
	assert_int_equal(write(ready[1], "x", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(ready[1]);
	close(cfd);
	close(lfd);
}

static void every_supplementary_group_is_read(void **state)
{
	static const size_t counts[] = { 0, 1, 63, 64, 65, 256, 257, 1000, 5000 };

	(void)state;
	if (geteuid() != 0)
		skip(); /* setgroups needs CAP_SETGID */
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		groups_of(counts[i]);
}

/* A socket that is not connected has no peer: "nobody", no groups, not an error. */
static void an_unconnected_socket_is_nobody(void **state)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct peer p;

	(void)state;
	assert_int_equal(peer_read(fd, &p), 0);
	assert_int_equal(p.n_groups, 0);
	assert_null(p.groups);
	peer_clear(&p);
	peer_clear(NULL);
	close(fd);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(every_supplementary_group_is_read),
	  cmocka_unit_test(an_unconnected_socket_is_nobody))
