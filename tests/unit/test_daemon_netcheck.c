/* SPDX-License-Identifier: Apache-2.0 */
/* netcheck: a process that may not open IPv4 sockets (a seccomp filter like systemd's
 * RestrictAddressFamilies=) or that sees only loopback (a network namespace of its own, like
 * PrivateNetwork=yes) is told so, naming the setting; one with a network interface up is not;
 * and weightd's warning names the remote checkpoint and the drop-in, only when there is one. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "config.h"
#include "log.h"
#include "netcheck.h"

/* Run fn in a child; its exit status (0: its checks held, 77: it could not set up). */
static int in_child(int (*fn)(void))
{
	int st;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fn());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* socket(AF_INET, ...) fails with EAFNOSUPPORT, as under systemd's RestrictAddressFamilies=. */
static int deny_inet(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -1;
	return socket(AF_INET, SOCK_STREAM, 0) < 0 && errno == EAFNOSUPPORT ? 0 : -1;
}

static int child_no_inet(void)
{
	char why[256];

	if (deny_inet() < 0)
		return 77;
	if (!netcheck_blocked(why, sizeof(why)))
		return 1;
	return strstr(why, "RestrictAddressFamilies=") && strstr(why, "IPv4") ? 0 : 2;
}

static int child_private_network(void)
{
	char why[256];

	if (unshare(CLONE_NEWNET) < 0)
		return 77;
	if (!netcheck_blocked(why, sizeof(why)))
		return 1;
	return strstr(why, "PrivateNetwork=yes") && strstr(why, "loopback") ? 0 : 2;
}

static void restricted_address_families(void **state)
{
	int r = in_child(child_no_inet);

	(void)state;
	if (r == 77)
		skip();
	assert_int_equal(r, 0);
}

static void private_network(void **state)
{
	int r = in_child(child_private_network);

	(void)state;
	if (r == 77)
		skip(); /* no CAP_SYS_ADMIN for a network namespace here */
	assert_int_equal(r, 0);
}

/* Is some interface besides lo up, as /sys/class/net says (independent of getifaddrs)? */
static bool sys_has_interface_up(void)
{
	FILE *p = popen("for i in /sys/class/net/*; do [ \"${i##*/}\" = lo ] || "
			"cat \"$i/operstate\" 2>/dev/null; done",
			"r");
	char line[64];
	bool up = false;

	assert_non_null(p);
	while (fgets(line, sizeof(line), p))
		up |= strncmp(line, "up", 2) == 0 || strncmp(line, "unknown", 7) == 0;
	pclose(p);
	return up;
}

static void host_network(void **state)
{
	char why[256] = "";

	(void)state;
	if (!sys_has_interface_up())
		skip(); /* a machine without a network: nothing to compare with */
	assert_false(netcheck_blocked(why, sizeof(why)));
}

/* The warning: one line naming the first remote checkpoint (its URL without the query) and the
 * drop-in; none for a configuration of local checkpoints. */
static int child_warn(void)
{
	static struct source_conf remote[] = {
		{ .name = (char *)"local", .path = (char *)"/srv/m.safetensors" },
		{ .name = (char *)"hub",
		  .path = (char *)"https://hub.example/m/resolve/main/m.safetensors?sig=SECRET" },
		{ .name = (char *)"s3", .path = (char *)"s3://bkt/m/" },
	};
	struct config local = { .sources = remote, .n_sources = 1 };
	struct config both = { .sources = remote, .n_sources = 3 };
	int fd[2];
	char out[4096] = "";
	ssize_t n;

	if (pipe(fd) < 0 || dup2(fd[1], 2) < 0)
		return 77;
	close(fd[1]);
	log_set_level(LOG_LVL_INFO);
	if (unshare(CLONE_NEWNET) < 0)
		return 77;
	netcheck_warn(&local);
	netcheck_warn(&both);
	close(2);
	n = read(fd[0], out, sizeof(out) - 1);
	if (n <= 0)
		return 1;
	out[n] = '\0';
	if (strchr(out, '\n') != out + n - 1) /* exactly one line: the remote configuration's */
		return 2;
	if (!strstr(out, "checkpoint hub is read from https://hub.example/m/resolve/main/"
			 "m.safetensors (and other remote checkpoints)") ||
	    strstr(out, "SECRET") || !strstr(out, "weightd.service.d/remote.conf") ||
	    !strstr(out, "PrivateNetwork=yes"))
		return 3;
	return 0;
}

static void warning_names_checkpoint_and_dropin(void **state)
{
	int r = in_child(child_warn);

	(void)state;
	if (r == 77)
		skip();
	assert_int_equal(r, 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(restricted_address_families),
	  cmocka_unit_test(private_network), cmocka_unit_test(host_network),
	  cmocka_unit_test(warning_names_checkpoint_and_dropin))
