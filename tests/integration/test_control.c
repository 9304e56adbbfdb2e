/* SPDX-License-Identifier: Apache-2.0 */
/* test_control.c - how weightd starts, stops and reloads as an operator sees it: readiness told
 * to the starting process, SIGTERM cancelling queued work, and reload applying [daemon] keys
 * live or naming each key that needs a restart. */
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
#include <sys/socket.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "files.h"
#include "harness.h"
#include "st_writer.h"
#include "weightd/client.h"

/* The pid of the process listening on `sock` (SO_PEERCRED of a connection), or -1. */
static pid_t listener_pid(const char *sock)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	pid_t pid = -1;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
		pid = cr.pid;
	if (fd >= 0)
		close(fd);
	return pid;
}

/*
 * Without --foreground, the command returns only when the daemon serves, with status 0; a daemon
 * that cannot bind its socket makes it return 1 (it used to fork first and return 0).
 */
static void detached_start_reports_readiness_in_its_exit_status(void **state)
{
	char conf[512], sock[512], state_dir[512], text[2048], out[256];
	char *argv[] = { (char *)harness_weightd(), "--config", conf, NULL };
	pid_t pid;

	(void)state;
	unsetenv("NOTIFY_SOCKET");
	harness_path(&H, "detached.conf", conf, sizeof(conf));
	harness_path(&H, "detached.sock", sock, sizeof(sock));
	harness_path(&H, "detached-state", state_dir, sizeof(state_dir));
	snprintf(text, sizeof(text), "[daemon]\nsocket = %s\nshm_prefix = %s-det\nstate_dir = %s\n"
		 "single_socket = yes\n",
		 sock, H.prefix, state_dir);
	tf_write(conf, text, 0);
	assert_int_equal(harness_run(argv, out, sizeof(out), (uid_t)-1), 0);
	/* it serves the moment the command has returned: no waiting */
	pid = listener_pid(sock);
	assert_true(pid > 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	for (int i = 0; i < 3000 && kill(pid, 0) == 0; i++)
		usleep(10000);
	assert_int_equal(kill(pid, 0), -1);

	/* a socket in a directory that does not exist cannot be bound */
	snprintf(text, sizeof(text),
		 "[daemon]\nsocket = %s/no/such/dir/x.sock\nshm_prefix = %s-det\nstate_dir = %s\n",
		 H.dir, H.prefix, state_dir);
	tf_write(conf, text, 0);
	assert_int_equal(harness_run(argv, out, sizeof(out), (uid_t)-1), 1);
}

#define MANY 200

/* Whether a thread of `pid` is in the middle of an openat(2) (/proc/PID/task/TID/syscall). */
static bool thread_in_open(pid_t pid)
{
	char dir[64], path[320], buf[64];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	d = opendir(dir);
	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/syscall", dir, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f))
			found = atol(buf) == SYS_openat;
		fclose(f);
	}
	closedir(d);
	return found;
}

/*
 * SIGTERM with MANY jobs queued behind a worker that cannot finish (the one worker is stuck in a
 * reload opening a config that became a FIFO): the queued jobs are cancelled, not run, and the
 * client's unit is answered "cancelled"; the stuck worker is abandoned after the grace period;
 * the daemon exits 0 having made nothing.
 */
static void sigterm_cancels_queued_work(void **state)
{
	static struct stw_tensor ts[MANY];
	static char names[MANY][16];
	char path[512], sect[1024], fifo[512], want[64], *log;
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_status *st = NULL;
	weightd_error err;
	int status;

	(void)state;
	for (int i = 0; i < MANY; i++) {
		snprintf(names[i], sizeof(names[i]), "t%d", i);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = "U8", .ndim = 1,
					     .shape = { 4096 }, .seed = (uint32_t)i };
	}
	harness_path(&H, "many.safetensors", path, sizeof(path));
	assert_int_equal(stw_write(path, ts, MANY, NULL, 0, NULL), 0);
	snprintf(sect, sizeof(sect), "[checkpoint:many]\npath = %s\n", path);
	it_start(&H, "workers = 1\n", sect);

	/* the one worker blocks in open() of the config, which waits for a writer */
	harness_path(&H, "fifo.conf", fifo, sizeof(fifo));
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(rename(fifo, H.conf), 0);
	harness_forget_notify(&H);
	assert_int_equal(kill(H.pid, SIGHUP), 0);
	assert_int_equal(harness_wait_notify(&H, "RELOADING=1", 30000), 0);
	/* RELOADING=1 comes when the reload is handed to the worker, not when the worker has
	 * taken it: until a thread sits in open(), the reload is still queued, and a stop now
	 * would cancel it too (201 jobs) and find no worker to abandon */
	for (int i = 0; i < 3000 && !thread_in_open(H.pid); i++)
		usleep(10000);
	assert_true(thread_in_open(H.pid));

	c = it_connect(&H);
	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	for (int i = 0; i < MANY; i++) {
		assert_true(weightd_unit_slot(u, names[i], NULL, NULL, 0, NULL, &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(u, names[i], "many", names[i], NULL, &err), 0);
	}
	assert_int_equal(weightd_unit_submit(u, &err), 0);
	for (int i = 0; i < 3000; i++) {
		weightd_client *q = it_connect(&H);

		weightd_status_free(st);
		st = it_status(q);
		weightd_close(q);
		if (st->materializations_in_flight == MANY)
			break;
		usleep(10000);
	}
	assert_int_equal(st->materializations_in_flight, MANY);
	weightd_status_free(st);

	status = harness_stop(&H);
	/* first of all: a FIFO left as the config would block the next test writing it */
	assert_int_equal(unlink(H.conf), 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* the unit was answered before the connection closed: cancelled, and why */
	assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_CANCELLED);
	assert_non_null(strstr(err.message, "weightd is stopping"));
	assert_non_null(strstr(err.message, "cancelled before it started"));
	weightd_unit_free(u);
	weightd_close(c);
	log = tf_read(H.log, NULL);
	snprintf(want, sizeof(want), "(%d queued jobs cancelled)", MANY);
	if (!strstr(log, want) || !strstr(log, "abandoning 1 workers still busy after 3000 ms"))
		fail_msg("expected %s and an abandoned worker in the log:\n%s", want, log);
	free(log);
	assert_int_equal(harness_segments(&H), 0);
}

static void write_reload_config(const char *daemon_extra)
{
	if (harness_write_config(&H, daemon_extra, "") < 0)
		fail_msg("cannot write the config");
}

/* Whether one of the lines of a reload's report contains `text`. */
static bool has_line(const char *const *lines, size_t n, const char *text)
{
	for (size_t i = 0; i < n; i++)
		if (strstr(lines[i], text))
			return true;
	return false;
}

/* reload applies budget and the client limits at once; the keys that need a restart are named
 * in the log and in the reload's answer, one line each, and keep their running values. */
static void reload_applies_daemon_keys_or_names_them(void **state)
{
	weightd_client *c;
	weightd_status *st;
	weightd_error err;
	weightd_reload_info *rep;
	char *log, extra[512];
	const weightd_server_info *info;

	(void)state;
	write_reload_config("budget = 64M\nclient_max_pending = 100\nworkers = 1\n");
	if (harness_start(&H) < 0)
		fail_msg("weightd did not start");
	st = it_status_of(&H);
	assert_int_equal(st->budget_bytes, 64ull << 20);
	weightd_status_free(st);

	snprintf(extra, sizeof(extra),
		 "budget = 32M\nclient_max_pending = 7\nworkers = 2\nsocket_mode = 0660\n"
		 "log_level = warning\nverify_adopted = yes\nsocket_group = %u\n",
		 (unsigned)getgid());
	write_reload_config(extra);
	c = it_connect(&H);
	if (weightd_reload_report(c, &rep, &err) < 0)
		fail_msg("reload: %s", err.message);
	/* the answer says what was applied and what waits for a restart, in words */
	assert_true(has_line(rep->changes, rep->n_changes, "budget is now 33554432 bytes"));
	assert_true(
		has_line(rep->changes, rep->n_changes, "client_max_pending is now 7 (was 100)"));
	assert_true(has_line(rep->warnings, rep->n_warnings,
			     "workers changed to 2 in the configuration, but weightd keeps 1 until "
			     "it restarts"));
	assert_true(has_line(rep->warnings, rep->n_warnings, "verify_adopted changed to yes"));
	snprintf(extra, sizeof(extra),
		 "socket_group changed to gid %u in the configuration, but "
		 "weightd keeps no group (the socket's group as created) until it restarts",
		 (unsigned)getgid());
	assert_true(has_line(rep->warnings, rep->n_warnings, extra));
	assert_false(has_line(rep->warnings, rep->n_warnings, "gid -1"));
	assert_false(has_line(rep->changes, rep->n_changes, "workers"));
	weightd_reload_report_free(rep);
	st = it_status(c);
	assert_int_equal(st->budget_bytes, 32ull << 20);
	weightd_status_free(st);
	weightd_close(c);
	/* a new connection is told the new limit, and held to it */
	c = it_connect(&H);
	info = weightd_server(c);
	assert_int_equal(info->max_pending_requests, 7);
	weightd_close(c);

	log = tf_read(H.log, NULL);
	if (!strstr(log, "reload: workers changed to 2 in the configuration, but weightd keeps 1 "
			 "until it restarts"))
		fail_msg("workers not named:\n%s", log);
	assert_non_null(strstr(
		log,
		"reload: socket_mode changed to 0660 in the configuration, but weightd keeps 0666 until it restarts"));
	assert_non_null(strstr(log, "reload: verify_adopted changed to yes"));
	assert_non_null(strstr(log, "reload: budget is now 33554432 bytes"));
	assert_non_null(strstr(log, "reload: client_max_pending is now 7 (was 100)"));
	/* the harness gives --log-level debug: the command line wins, and the log says so */
	assert_non_null(strstr(log, "reload: log_level in the file is ignored: --log-level debug"));
	assert_null(strstr(log, "reload: budget changed"));
	free(log);
	assert_int_equal(harness_stop(&H), 0);
}

/* Without --log-level, reload applies the file's log_level at once: debug lines (a client
 * connecting) stop after a reload to warning and come back after a reload to debug. */
static void reload_applies_log_level_live(void **state)
{
	const struct harness_opts opts = { .file_log_level = true };
	weightd_client *c;
	weightd_error err;
	char *log;
	size_t mark;

	(void)state;
	write_reload_config("log_level = debug\n");
	assert_int_equal(harness_start_opts(&H, &opts), 0);
	write_reload_config("log_level = warning\n");
	c = it_connect(&H);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	weightd_close(c);
	log = tf_read(H.log, NULL);
	mark = strlen(log);
	assert_non_null(strstr(log, "reload: log_level is now warning"));
	free(log);
	weightd_close(it_connect(&H));  /* would log "connected" at debug */

	write_reload_config("log_level = debug\n");
	c = it_connect(&H);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	weightd_close(c);
	weightd_close(it_connect(&H));
	assert_int_equal(harness_stop(&H), 0);
	log = tf_read(H.log, NULL);
	/* between the two reloads: not one debug line; after the second: debug again */
	{
		const char *back = strstr(log + mark, "reload: log_level is now debug");
		const char *conn = strstr(log + mark, "connected");

		if (!back)
			fail_msg("no second reload in the log:\n%s", log);
		if (conn && conn < back)
			fail_msg("a debug line while at warning:\n%s", log + mark);
		assert_non_null(strstr(back, "connected"));
	}
	free(log);
}

/* A checkpoint path of about 4,000 characters in the config is served (inih alone stops at 200). */
static void a_4000_character_checkpoint_path_is_served(void **state)
{
	static const float v[2] = { 1.5f, -2.0f };
	static char path[4200], sect[4400];
	weightd_client *c;
	weightd_weight *w;
	size_t len;

	(void)state;
	len = (size_t)snprintf(path, sizeof(path), "%s", H.dir);
	while (len < 3900) {
		len += (size_t)snprintf(path + len, sizeof(path) - len, "/%s",
					"models--org--a-rather-long-model-name-v1.0-snapshot");
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			fail_msg("mkdir %s: %s", path, strerror(errno));
	}
	snprintf(path + len, sizeof(path) - len, "/model.safetensors");
	assert_true(strlen(path) > 3900 && strlen(path) < 4095);
	assert_int_equal(stw_write_json(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
					      "\"data_offsets\":[0,8]}}", v, sizeof(v)), 0);
	snprintf(sect, sizeof(sect), "[checkpoint:deep]\npath = %s\n", path);
	it_start(&H, NULL, sect);
	c = it_connect(&H);
	w = it_get_ok(c, "deep", "w");
	assert_memory_equal(it_map(w), v, sizeof(v));
	weightd_release(w);
	weightd_close(c);
	assert_int_equal(harness_stop(&H), 0);
}

TEST_MAIN_WATCHDOG(240, fixture_init, fixture_cleanup,
		   cmocka_unit_test(detached_start_reports_readiness_in_its_exit_status),
		   cmocka_unit_test(sigterm_cancels_queued_work),
		   cmocka_unit_test(reload_applies_daemon_keys_or_names_them),
		   cmocka_unit_test(reload_applies_log_level_live),
		   cmocka_unit_test(a_4000_character_checkpoint_path_is_served))
