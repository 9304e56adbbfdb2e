/* SPDX-License-Identifier: Apache-2.0 */
/* The administrator's socket apart from the engines', against a real weightd: root on the engine
 * socket is an ordinary client (refused evict and reload in words naming the admin socket, held
 * to the access lists and to its share of the budget), the admin socket serves root and
 * admin_users and refuses anyone else, `weightctl clients` shows who holds what, and metrics on
 * a non-loopback address are served only with metrics_public. */
#include <arpa/inet.h>
#include <grp.h>
#include <ifaddrs.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/socket.h>

#include "fixture.h"

#define T_BYTES	    (1u << 20)
#define BIG_BYTES   (8u << 20)
#define UID_NOBODY  65534
#define GID_NOGROUP 65534

static char admin_sock[400];

/*
 * H serving "m" (one 1 MiB tensor t0, an 8 MiB one big) to anyone and "secret" to nobody only,
 * with its admin socket in a directory of its own (mode 0666, so that who is served is decided by
 * admin_users, not by the file's mode), a 64 MiB budget of which a uid may hold 10 %, and
 * `extra` [daemon] lines.
 */
static void start(const char *extra)
{
	char m[600], secret[600], daemon[1200], sections[1400];

	harness_path(&H, "admin/weightd.sock", admin_sock, sizeof(admin_sock));
	harness_path(&H, "m.safetensors", m, sizeof(m));
	harness_path(&H, "secret.safetensors", secret, sizeof(secret));
	it_fixture("safetensors %s --seed 5 --tensor t0:U8:%u --tensor big:U8:%u", m, T_BYTES,
		   BIG_BYTES);
	it_fixture("safetensors %s --seed 6 --tensor s:U8:%u", secret, T_BYTES);
	snprintf(daemon, sizeof(daemon),
		 "socket_mode = 0666\nadmin_socket = %s\nadmin_socket_mode = 0666\nbudget = 64M\n"
		 "uid_budget_share = 10\n"
		 "%s",
		 admin_sock, extra ? extra : "");
	snprintf(
		sections, sizeof(sections),
		"[checkpoint:m]\npath = %s\n\n[checkpoint:secret]\npath = %s\nallow_users = nobody\n",
		m, secret);
	it_start(&H, daemon, sections);
}

static char ctl_out[65536];

/* rc, with what weightctl printed parsed as JSON into *ret (NULL when it is not JSON). */
static int parsed(int rc, json_t **ret)
{
	json_error_t je;

	*ret = json_loads(ctl_out, 0, &je);
	return rc;
}

/* weightctl --json ARGS... (NULL-terminated) as uid ((uid_t)-1: as this process): its exit
 * status, its stdout parsed into *ret. */
#define ctl_json(uid, ret, ...) \
	parsed(it_ctl((uid), ctl_out, sizeof(ctl_out), "--json", __VA_ARGS__), (ret))

/* The message of a weightctl --json error reply ("" when there is none). */
static const char *error_message(const json_t *j)
{
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));

	return m ? m : "";
}

/* Root on the engine socket: evict and reload are refused with words that name the admin socket;
 * the same commands on the admin socket work. */
static void test_root_on_engine_socket_cannot_administer(void **state)
{
	json_t *j;

	(void)state;
	start(NULL);
	assert_int_equal(getuid(), 0); /* the point is that root is refused */
	assert_int_equal(ctl_json((uid_t)-1, &j, "--socket", H.sock, "--admin-socket", H.sock,
				  "evict", NULL),
			 1);
	assert_non_null(strstr(error_message(j), "administrative request"));
	assert_non_null(strstr(error_message(j), admin_sock));
	json_decref(j);
	assert_int_equal(ctl_json((uid_t)-1, &j, "--socket", H.sock, "--admin-socket", H.sock,
				  "reload", NULL),
			 1);
	assert_non_null(strstr(error_message(j), "admin socket"));
	assert_non_null(strstr(error_message(j), admin_sock));
	json_decref(j);

	assert_int_equal(ctl_json((uid_t)-1, &j, "--admin-socket", admin_sock, "evict", NULL), 0);
	assert_non_null(json_object_get(j, "weights"));
	json_decref(j);
	assert_int_equal(ctl_json((uid_t)-1, &j, "--admin-socket", admin_sock, "reload", NULL), 0);
	assert_true(json_is_true(json_object_get(j, "reloaded")));
	json_decref(j);
}

/* Root on the engine socket reads what the access lists allow (not "secret", which is nobody's)
 * and is held to a uid's share of the budget (6.4 MiB of 64 MiB: the 8 MiB tensor is refused);
 * on the admin socket root reads both and takes the big tensor. */
static void test_root_on_engine_socket_is_ordinary(void **state)
{
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;

	(void)state;
	start(NULL);
	c = it_connect(&H);
	assert_int_equal(it_get(c, "secret", "s", &w, &err), -WEIGHTD_E_UNKNOWN_SOURCE);
	assert_int_equal(it_get(c, "m", "big", &w, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "uid 0"));
	assert_non_null(strstr(err.message, "share of the budget"));
	w = it_get_ok(c, "m", "t0"); /* within its share: served */
	weightd_release(w);
	weightd_close(c);

	assert_int_equal(weightd_connect(admin_sock, "test-admin", &c, &err), 0);
	w = it_get_ok(c, "secret", "s");
	weightd_release(w);
	w = it_get_ok(c, "m", "big");
	weightd_release(w);
	weightd_close(c);
}

/* A uid in admin_users is served on the admin socket (evicts, reloads, sees every client); one
 * that is not is refused there with words naming the engine socket, and is refused evict on the
 * engine socket too. */
static void test_admin_users_on_the_admin_socket(void **state)
{
	json_t *j;

	(void)state;
	start("admin_users = nobody\n");
	assert_int_equal(ctl_json(UID_NOBODY, &j, "--admin-socket", admin_sock, "evict", NULL), 0);
	assert_non_null(json_object_get(j, "bytes"));
	json_decref(j);
	assert_int_equal(ctl_json(UID_NOBODY, &j, "--admin-socket", admin_sock, "reload", NULL), 0);
	assert_true(json_is_true(json_object_get(j, "reloaded")));
	json_decref(j);
	assert_int_equal(ctl_json(UID_NOBODY, &j, "--socket", H.sock, "--admin-socket", H.sock,
				  "evict", NULL),
			 1);
	assert_non_null(strstr(error_message(j), admin_sock));
	json_decref(j);
	harness_stop(&H);

	/* daemon (uid 1) is in no list: refused at the admin socket's door */
	start("admin_users = nobody\n");
	assert_int_equal(ctl_json(1, &j, "--admin-socket", admin_sock, "evict", NULL), 1);
	assert_non_null(strstr(error_message(j), "the admin socket"));
	assert_non_null(strstr(error_message(j), H.sock)); /* where it may go instead */
	json_decref(j);
}

/* A child of uid `uid` connected to the engine socket as `name`, holding tensor t0 of "m" until
 * its parent writes to it; its pid, *ret_to the pipe to write to. */
static pid_t holder(uid_t uid, const char *name, int *ret_to)
{
	int to, from;
	char b;
	pid_t pid = it_fork_piped(&to, &from);

	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_weight *w = NULL;
		weightd_error err;

		if (uid != 0 &&
		    (setgroups(0, NULL) < 0 || setgid(GID_NOGROUP) < 0 || setuid(uid) < 0))
			_exit(2);
		if (weightd_connect(H.sock, name, &c, &err) < 0 ||
		    it_get(c, "m", "t0", &w, &err) < 0)
			_exit(3);
		it_say(from, "held\n");
		if (read(to, &b, 1) < 0)
			_exit(4);
		weightd_release(w);
		weightd_close(c);
		_exit(0);
	}
	assert_int_equal(read(from, &b, 1), 1); /* "held" */
	close(from);
	*ret_to = to;
	return pid;
}

/* The row of `uid` in a `weightctl clients --json` answer, or NULL. */
static json_t *client_of(json_t *j, unsigned uid)
{
	size_t i;
	json_t *x;

	json_array_foreach(json_object_get(j, "clients"), i, x)
		if (json_integer_value(json_object_get(x, "uid")) == (json_int_t)uid)
			return x;
	return NULL;
}

/* The row of the connection named `name`, or NULL. */
static json_t *client_named(json_t *j, const char *name)
{
	size_t i;
	json_t *x;

	json_array_foreach(json_object_get(j, "clients"), i, x)
		if (strcmp(json_string_value(json_object_get(x, "name")), name) == 0)
			return x;
	return NULL;
}

/* Two engines of different uids, each holding 1 MiB: `weightctl clients` on the admin socket
 * shows both with their uid, pid, name and held bytes; nobody on the engine socket sees its own
 * uid's connections only. */
static void test_clients_shows_who_holds_what(void **state)
{
	int to_root, to_nobody;
	pid_t p_root, p_nobody;
	json_t *j, *x;

	(void)state;
	start(NULL);
	p_root = holder(0, "engine-root", &to_root);
	p_nobody = holder(UID_NOBODY, "engine-nobody", &to_nobody);

	assert_int_equal(ctl_json((uid_t)-1, &j, "--admin-socket", admin_sock, "--socket",
				  admin_sock, "clients", NULL),
			 0);
	/* root has two rows: the engine's, and this weightctl's own on the admin socket */
	x = client_named(j, "engine-root");
	assert_non_null(x);
	assert_int_equal(json_integer_value(json_object_get(x, "uid")), 0);
	assert_int_equal(json_integer_value(json_object_get(x, "pid")), p_root);
	assert_int_equal(json_integer_value(json_object_get(x, "bytes")), T_BYTES);
	assert_int_equal(json_integer_value(json_object_get(x, "weights")), 1);
	assert_string_equal(json_string_value(json_object_get(x, "socket")), "engine");
	x = client_of(j, UID_NOBODY);
	assert_non_null(x);
	assert_string_equal(json_string_value(json_object_get(x, "name")), "engine-nobody");
	assert_int_equal(json_integer_value(json_object_get(x, "gid")), GID_NOGROUP);
	assert_int_equal(json_integer_value(json_object_get(x, "pid")), p_nobody);
	assert_int_equal(json_integer_value(json_object_get(x, "bytes")), T_BYTES);
	assert_int_equal(json_integer_value(json_object_get(x, "segments")), 1);
	json_decref(j);

	/* an ordinary client sees its own uid only */
	assert_int_equal(ctl_json(UID_NOBODY, &j, "--socket", H.sock, "clients", NULL), 0);
	assert_non_null(client_of(j, UID_NOBODY));
	assert_null(client_of(j, 0));
	json_decref(j);

	assert_int_equal(write(to_root, "x", 1), 1);
	assert_int_equal(write(to_nobody, "x", 1), 1);
	it_wait_child_ok(p_root);
	it_wait_child_ok(p_nobody);
	close(to_root);
	close(to_nobody);
}

/* An IPv4 address of this machine that is not loopback (*ret), or false when it has none. */
static bool outside_address(char *ret, size_t cap)
{
	struct ifaddrs *ifa, *i;
	bool found = false;

	if (getifaddrs(&ifa) < 0)
		return false;
	for (i = ifa; i && !found; i = i->ifa_next) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;

		if (!sin || sin->sin_family != AF_INET ||
		    (ntohl(sin->sin_addr.s_addr) >> 24) == 127)
			continue;
		found = inet_ntop(AF_INET, &sin->sin_addr, ret, (socklen_t)cap) != NULL;
	}
	freeifaddrs(ifa);
	return found;
}

/* A TCP port free on `addr` now. */
static int free_port(const char *addr)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, addr, &sin.sin_addr), 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	close(fd);
	return ntohs(sin.sin_port);
}

/* GET /metrics from addr:port over plain HTTP: the reply, malloc'd (NULL when none). */
static char *scrape(const char *addr, int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	static const char req[] = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t n;

	assert_non_null(buf);
	assert_int_equal(inet_pton(AF_INET, addr, &sin.sin_addr), 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return NULL;
	}
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(fd);
	return buf;
}

/* metrics_listen on the machine's own non-loopback address: refused without metrics_public (the
 * daemon does not start, and says why), served with it, and reachable on that address. */
static void test_metrics_on_a_public_address_needs_the_opt_in(void **state)
{
	char addr[64], extra[256], *reply;
	int port;

	(void)state;
	if (!outside_address(addr, sizeof(addr)))
		snprintf(addr, sizeof(addr), "0.0.0.0"); /* then listen on every address */
	port = free_port(strcmp(addr, "0.0.0.0") == 0 ? "127.0.0.1" : addr);
	snprintf(extra, sizeof(extra), "admin_socket = %s/admin.sock\nmetrics_listen = %s:%d\n",
		 H.dir, addr, port);
	assert_int_equal(harness_write_config(&H, extra, NULL), 0);
	assert_int_equal(harness_start(&H), -1);
	assert_true(harness_log_contains(&H, "metrics_public = yes"));

	snprintf(extra, sizeof(extra),
		 "admin_socket = %s/admin.sock\nmetrics_listen = %s:%d\nmetrics_public = yes\n",
		 H.dir, addr, port);
	assert_int_equal(harness_write_config(&H, extra, NULL), 0);
	assert_int_equal(harness_start(&H), 0);
	reply = scrape(strcmp(addr, "0.0.0.0") == 0 ? "127.0.0.1" : addr, port);
	assert_non_null(reply);
	assert_non_null(strstr(reply, "200 OK"));
	assert_non_null(strstr(reply, "\nweightd_ready 1\n"));
	free(reply);
}

/* An admin socket weightd cannot make stops the start with words that say what to set instead. */
static void test_an_admin_socket_that_cannot_be_made_says_what_to_set(void **state)
{
	(void)state;
	/* a directory under /proc cannot be made, not even by root */
	assert_int_equal(harness_write_config(&H, "admin_socket = /proc/weightd-none/admin.sock\n",
					      NULL),
			 0);
	assert_int_equal(harness_start(&H), -1);
	assert_true(harness_log_contains(&H, "/proc/weightd-none"));
	assert_true(harness_log_contains(&H, "single_socket = yes"));
}

TEST_MAIN(NULL, NULL, TEST_IN_DIR(test_root_on_engine_socket_cannot_administer),
	  TEST_IN_DIR(test_root_on_engine_socket_is_ordinary),
	  TEST_IN_DIR(test_admin_users_on_the_admin_socket),
	  TEST_IN_DIR(test_clients_shows_who_holds_what),
	  TEST_IN_DIR(test_metrics_on_a_public_address_needs_the_opt_in),
	  TEST_IN_DIR(test_an_admin_socket_that_cannot_be_made_says_what_to_set))
