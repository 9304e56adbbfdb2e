/* harness.c - a private weightd per integration test. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *harness_weightd(void)
{
	const char *p = getenv("WD_WEIGHTD");
	return p ? p : "weightd";
}

const char *harness_weightctl(void)
{
	const char *p = getenv("WD_WEIGHTCTL");
	return p ? p : "weightctl";
}

void harness_path(const struct harness *h, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", h->dir, name);
}

int harness_init(struct harness *h)
{
	static int counter;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(h, 0, sizeof(*h));
	h->pid = -1;
	h->notify_fd = -1;
	snprintf(h->dir, sizeof(h->dir), "/tmp/weightd-test.XXXXXX");
	if (!mkdtemp(h->dir))
		return -1;
	chmod(h->dir, 0755);
	snprintf(h->sock, sizeof(h->sock), "%s/weightd.sock", h->dir);
	snprintf(h->conf, sizeof(h->conf), "%s/weightd.conf", h->dir);
	snprintf(h->notify, sizeof(h->notify), "%s/notify.sock", h->dir);
	snprintf(h->log, sizeof(h->log), "%s/weightd.log", h->dir);
	snprintf(h->prefix, sizeof(h->prefix), "wdtest%d-%d", (int)getpid(), counter++);
	h->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (h->notify_fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->notify);
	if (bind(h->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	return 0;
}

int harness_write_config(struct harness *h, const char *extra_daemon, const char *sections)
{
	FILE *f = fopen(h->conf, "w");

	if (!f)
		return -1;
	fprintf(f, "[daemon]\nsocket = %s\nsocket_mode = 0666\nshm_prefix = %s\nstate_dir = %s/state\n"
		   "workers = 2\n%s\n%s\n", h->sock, h->prefix, h->dir, extra_daemon ? extra_daemon : "",
		sections ? sections : "");
	return fclose(f) == 0 ? 0 : -1;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int harness_wait_notify(struct harness *h, const char *what, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = { h->notify_fd, POLLIN, 0 };
		int64_t left = end - now_ms();
		char buf[4096];
		ssize_t n;

		if (left <= 0)
			return -1;
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		n = recv(h->notify_fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		/* a datagram may hold several newline-separated assignments */
		for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
			if (strncmp(line, what, strlen(what)) == 0)
				return 0;
		if (h->pid > 0 && waitpid(h->pid, NULL, WNOHANG) == h->pid) {
			h->pid = -1;
			return -1;
		}
	}
}

int harness_start(struct harness *h)
{
	pid_t parent = getpid();
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(h->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		/* A test that dies (watchdog, crash) takes its daemon along: a daemon left behind
		 * would keep the test's stdout open and make ctest wait for its timeout. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
			_exit(127);
		if (fd >= 0) {
			dup2(fd, STDERR_FILENO);
			close(fd);
		}
		setenv("NOTIFY_SOCKET", h->notify, 1);
		execl(harness_weightd(), "weightd", "--config", h->conf, "--foreground",
		      "--log-level", "debug", (char *)NULL);
		_exit(127);
	}
	h->pid = pid;
	if (harness_wait_notify(h, "READY=1", 30000) < 0) {
		fprintf(stderr, "harness: weightd did not become ready\n");
		harness_dump_log(h);
		return -1;
	}
	return 0;
}

int harness_stop(struct harness *h)
{
	int status = -1;

	if (h->pid <= 0)
		return -1;
	kill(h->pid, SIGTERM);
	for (int i = 0; i < 3000; i++) {
		pid_t r = waitpid(h->pid, &status, WNOHANG);
		if (r == h->pid) {
			h->pid = -1;
			return status;
		}
		usleep(10000);
	}
	fprintf(stderr, "harness: weightd did not stop within 30 s; killing it\n");
	harness_kill(h);
	return -1;
}

void harness_kill(struct harness *h)
{
	if (h->pid <= 0)
		return;
	kill(h->pid, SIGKILL);
	waitpid(h->pid, NULL, 0);
	h->pid = -1;
}

int harness_segments(const struct harness *h)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t plen = strlen(h->prefix);
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, h->prefix, plen) == 0 && e->d_name[plen] == '.')
			n++;
	closedir(d);
	return n;
}

static void rm_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;

	if (!d) {
		unlink(path);
		return;
	}
	while ((e = readdir(d))) {
		char sub[1024];
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (e->d_type == DT_DIR)
			rm_tree(sub);
		else
			unlink(sub);
	}
	closedir(d);
	rmdir(path);
}

void harness_cleanup(struct harness *h)
{
	DIR *d;
	struct dirent *e;
	size_t plen = strlen(h->prefix);

	if (h->pid > 0)
		harness_stop(h);
	if (h->notify_fd >= 0)
		close(h->notify_fd);
	h->notify_fd = -1;
	d = opendir("/dev/shm");
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, h->prefix, plen) == 0 && e->d_name[plen] == '.') {
			char p[512];
			snprintf(p, sizeof(p), "/dev/shm/%s", e->d_name);
			unlink(p);
		}
	}
	if (d)
		closedir(d);
	if (!getenv("WD_KEEP_TEST_DIR"))
		rm_tree(h->dir);
}

int harness_run(char *const argv[], char *out, size_t cap, uid_t uid)
{
	int pfd[2];
	pid_t pid;
	size_t len = 0;
	int status;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		if (uid != (uid_t)-1 && (setgid((gid_t)uid) < 0 || setuid(uid) < 0))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		char tmp[4096];
		ssize_t n = read(pfd[0], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (out && len + 1 < cap) {
			size_t take = (size_t)n < cap - 1 - len ? (size_t)n : cap - 1 - len;
			memcpy(out + len, tmp, take);
			len += take;
		}
	}
	close(pfd[0]);
	if (out && cap)
		out[len] = '\0';
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int harness_mkfixture(const char *args)
{
	const char *tool = getenv("WD_MKFIXTURE");
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "%s %s", tool ? tool : "wd-mkfixture", args);
	return system(cmd) == 0 ? 0 : -1;
}

void harness_dump_log(const struct harness *h)
{
	FILE *f = fopen(h->log, "r");
	char line[1024];

	if (!f)
		return;
	fprintf(stderr, "---- weightd log ----\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "---------------------\n");
	fclose(f);
}

int harness_count_fds(pid_t pid)
{
	char path[64];
	DIR *d;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}
