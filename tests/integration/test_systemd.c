/* SPDX-License-Identifier: Apache-2.0 */
/* test_systemd.c - weightd as a systemd service: readiness, reload and stop notifications on a
 * real notify socket, and socket activation through the real systemd-socket-activate. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "weightd/client.h"

/* Ready sources and the total the daemon knows, as a client sees them right now. */
static void count_sources(const char *sock, size_t *ret_ready, size_t *ret_total)
{
	weightd_client *c = NULL;
	weightd_source_list *l = NULL;
	weightd_error err;

	if (weightd_connect(sock, "test", &c, &err) < 0)
		fail_msg("connect: %s", err.message);
	if (weightd_list(c, &l, &err) < 0)
		fail_msg("list: %s", err.message);
	*ret_ready = 0;
	for (size_t i = 0; i < l->count; i++)
		*ret_ready += strcmp(l->sources[i].state, "ready") == 0;
	*ret_total = l->count;
	weightd_source_list_free(l);
	weightd_close(c);
}

static int setup(void **state)
{
	char sections[8192], args[2048], path[512];
	size_t off = 0;

	if (harness_init(&H) < 0)
		return -1;
	/* several sources, one sharded into many files, so admission takes a moment */
	if (harness_sample(&H, "tiny.safetensors", path, sizeof(path)) < 0)
		return -1;
	off += (size_t)snprintf(sections + off, sizeof(sections) - off,
				"[checkpoint:tiny]\npath = %s\n\n", path);
	harness_path(&H, "sharded", path, sizeof(path));
	snprintf(args, sizeof(args), "sharded %s 10", path);
	if (harness_mkfixture(args) < 0)
		return -1;
	off += (size_t)snprintf(sections + off, sizeof(sections) - off,
				"[checkpoint:sharded]\npath = %s\n\n", path);
	if (harness_write_config(&H, NULL, sections) < 0)
		return -1;
	return 0;
}

static void ready_only_after_every_source_is_admitted(void **state)
{
	size_t ready, total;

	assert_int_equal(harness_start(&H), 0); /* returns when READY=1 arrived */
	count_sources(H.sock, &ready, &total);
	assert_int_equal(total, 2);
	assert_int_equal(ready, 2);
}

/* Adds checkpoint `name`, the sample in NAME.safetensors, to weightd.conf (not reloaded). */
static void add_sample_checkpoint(const char *name)
{
	char path[512], args[1024], sections[1024];
	FILE *f;

	snprintf(args, sizeof(args), "%s.safetensors", name);
	harness_path(&H, args, path, sizeof(path));
	snprintf(args, sizeof(args), "sample %s", path);
	assert_int_equal(harness_mkfixture(args), 0);
	f = fopen(H.conf, "a");
	assert_non_null(f);
	snprintf(sections, sizeof(sections), "\n[checkpoint:%s]\npath = %s\n", name, path);
	fputs(sections, f);
	fclose(f);
}

static void reload_says_reloading_then_ready(void **state)
{
	/* add a source, then SIGHUP: RELOADING=1, READY=1, and the new source is served */
	add_sample_checkpoint("second");

	kill(H.pid, SIGHUP);
	assert_int_equal(harness_wait_notify(&H, "RELOADING=1", 10000), 0);
	assert_int_equal(harness_wait_notify(&H, "READY=1", 10000), 0);
	size_t ready, total;
	count_sources(H.sock, &ready, &total);
	assert_int_equal(total, 3);
	assert_int_equal(ready, 3);
}

/* Reloads asked for at once (a signal and two admin clients) are all answered, and what they
 * load is the file as it is after the last request. */
static void concurrent_reloads_are_all_answered(void **state)
{
	pid_t kids[2];
	size_t ready, total;

	add_sample_checkpoint("third");

	for (int i = 0; i < 2; i++) {
		kids[i] = fork();
		assert_true(kids[i] >= 0);
		if (kids[i] == 0) {
			weightd_client *c = NULL;
			weightd_error err;
			if (weightd_connect(H.sock, "reloader", &c, &err) < 0)
				_exit(10);
			if (weightd_reload(c, &err) < 0)
				_exit(11);
			weightd_close(c);
			_exit(0);
		}
	}
	kill(H.pid, SIGHUP);
	for (int i = 0; i < 2; i++) {
		int status;
		assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	/* every admin reply came after a run that read the file with "third" in it */
	count_sources(H.sock, &ready, &total);
	assert_int_equal(total, 4);
	assert_int_equal(ready, 4);
}

static void stop_says_stopping(void **state)
{
	pid_t pid = H.pid;
	int status;

	kill(pid, SIGTERM);
	assert_int_equal(harness_wait_notify(&H, "STOPPING=1", 10000), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	H.pid = -1;
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* systemd-socket-activate listens, then starts weightd with the socket as fd 3 on the first
 * connection; the daemon must serve on that inherited socket. */
static void serves_on_a_socket_passed_by_systemd(void **state)
{
	char sock[512], listen_arg[600];
	weightd_client *c = NULL;
	weightd_source_list *l = NULL;
	weightd_error err;
	pid_t pid;
	int r = -1;

	if (access("/usr/bin/systemd-socket-activate", X_OK) != 0) {
		skip();
		return;
	}
	harness_path(&H, "activated.sock", sock, sizeof(sock));
	snprintf(listen_arg, sizeof(listen_arg), "--listen=%s", sock);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char log[600];
		int fd;
		harness_path(&H, "activated.log", log, sizeof(log));
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		unsetenv("NOTIFY_SOCKET");
		execl("/usr/bin/systemd-socket-activate", "systemd-socket-activate", listen_arg,
		      harness_weightd(), "--config", H.conf, "--foreground", (char *)NULL);
		_exit(127);
	}
	/* the listener appears when systemd-socket-activate has bound it */
	for (int i = 0; i < 500; i++) {
		struct stat st;
		if (stat(sock, &st) == 0)
			break;
		usleep(10000);
	}
	/* the first connection starts weightd; hello is answered once it has admitted its sources */
	for (int i = 0; i < 100 && r < 0; i++) {
		r = weightd_connect(sock, "activated", &c, &err);
		if (r < 0)
			usleep(50000);
	}
	if (r < 0)
		fail_msg("connect through socket activation: %s", err.message);
	assert_int_equal(weightd_list(c, &l, &err), 0);
	assert_true(l->count >= 2);
	weightd_source_list_free(l);
	weightd_close(c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	/* the socket belongs to systemd-socket-activate: weightd must not have removed it */
	char log[600];
	harness_path(&H, "activated.log", log, sizeof(log));
	FILE *f = fopen(log, "r");
	char line[1024], on[600];
	bool saw = false, named = false;
	/* the start line names the socket served, not the configured one */
	snprintf(on, sizeof(on), "checkpoints on %s (", sock);
	while (f && fgets(line, sizeof(line), f)) {
		saw |= strstr(line, "socket passed by systemd") != NULL;
		named |= strstr(line, on) != NULL;
	}
	if (f)
		fclose(f);
	assert_true(saw);
	assert_true(named);
}

/* purge sees systemd's listener without connecting to it, so it neither starts weightd nor purges
 * under a daemon that socket activation could start at any moment. */
static void purge_refuses_a_socket_unit_without_starting_weightd(void **state)
{
	char sock[512], listen_arg[600], marker[512], out[4096];
	pid_t pid;
	int rc = -1;

	if (access("/usr/bin/systemd-socket-activate", X_OK) != 0) {
		skip();
		return;
	}
	harness_path(&H, "purge.sock", sock, sizeof(sock));
	harness_path(&H, "started-by-activation", marker, sizeof(marker));
	snprintf(listen_arg, sizeof(listen_arg), "--listen=%s", sock);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* what activation would start: it leaves a marker */
		execl("/usr/bin/systemd-socket-activate", "systemd-socket-activate", listen_arg,
		      "/usr/bin/touch", marker, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		struct stat st;
		if (stat(sock, &st) == 0)
			break;
		usleep(10000);
	}
	usleep(100000); /* bound is not yet listening: give it the moment after bind() */
	char *argv[] = { (char *)harness_weightd(), "--purge", "--socket", sock, "--prefix",
			 "wdtest-purge-unused", NULL };
	rc = harness_run(argv, out, sizeof(out), (uid_t)-1);
	/* a connection would have made systemd-socket-activate run its command by now: a negative
	 * check needs a grace period, bounded */
	for (int i = 0; i < 50 && access(marker, F_OK) != 0; i++)
		usleep(10000);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	assert_int_equal(rc, 1);
	assert_int_not_equal(access(marker, F_OK), 0); /* nothing was activated */
}

TEST_MAIN_WATCHDOG(240, setup, fixture_cleanup,
		   cmocka_unit_test(ready_only_after_every_source_is_admitted),
		   cmocka_unit_test(reload_says_reloading_then_ready),
		   cmocka_unit_test(concurrent_reloads_are_all_answered),
		   cmocka_unit_test(stop_says_stopping),
		   cmocka_unit_test(serves_on_a_socket_passed_by_systemd),
		   cmocka_unit_test(purge_refuses_a_socket_unit_without_starting_weightd))
