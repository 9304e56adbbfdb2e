/* SPDX-License-Identifier: Apache-2.0 */
/* harness.c - a private weightd per integration test. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h> /* TMPFS_MAGIC */

#include "clock.h"

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

#define NQ_SLOTS 1024

struct harness_notify {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int fd;
	int stop[2];
	char msgs[NQ_SLOTS][512];
	uint64_t head; /* messages received */
	uint64_t tail; /* messages consumed */
};

static void *notify_reader(void *arg)
{
	struct harness_notify *q = arg;

	for (;;) {
		struct pollfd p[2] = { { q->fd, POLLIN, 0 }, { q->stop[0], POLLIN, 0 } };
		char buf[512];
		ssize_t n;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return NULL;
		if (p[1].revents)
			return NULL;
		if (!(p[0].revents & POLLIN))
			continue;
		n = recv(q->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		pthread_mutex_lock(&q->lock);
		memcpy(q->msgs[q->head % NQ_SLOTS], buf, (size_t)n + 1);
		q->head++;
		if (q->head - q->tail > NQ_SLOTS)
			q->tail = q->head - NQ_SLOTS;
		pthread_cond_broadcast(&q->cond);
		pthread_mutex_unlock(&q->lock);
	}
}

static int notify_start(struct harness *h)
{
	struct harness_notify *q = calloc(1, sizeof(*q));

	if (!q)
		return -1;
	q->fd = h->notify_fd;
	if (pipe2(q->stop, O_CLOEXEC) < 0) {
		free(q);
		return -1;
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	if (pthread_create(&q->thread, NULL, notify_reader, q) != 0) {
		close(q->stop[0]);
		close(q->stop[1]);
		free(q);
		return -1;
	}
	h->nq = q;
	return 0;
}

static void notify_stop(struct harness *h)
{
	struct harness_notify *q = h->nq;

	if (!q)
		return;
	if (write(q->stop[1], "x", 1) == 1)
		pthread_join(q->thread, NULL);
	close(q->stop[0]);
	close(q->stop[1]);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q);
	h->nq = NULL;
}

/* The segment_dir of this test's daemon, from WD_TEST_SEGMENT_TMPFS: <tmpfs>/<prefix>, 0700. */
static int segment_tmpfs(struct harness *h)
{
	const char *fs = getenv("WD_TEST_SEGMENT_TMPFS");
	struct statfs sf;

	if (!fs || !fs[0])
		return 0;
	if (statfs(fs, &sf) < 0 || sf.f_type != TMPFS_MAGIC) {
		fprintf(stderr,
			"skipped: WD_TEST_SEGMENT_TMPFS=%s is not a mounted tmpfs (mounting "
			"one needs root)\n",
			fs);
		exit(77);
	}
	if ((size_t)snprintf(h->seg_dir, sizeof(h->seg_dir), "%s/%s", fs, h->prefix) >=
		    sizeof(h->seg_dir) ||
	    mkdir(h->seg_dir, 0700) < 0)
		return -1;
	snprintf(h->shm_dir, sizeof(h->shm_dir), "%s", h->seg_dir);
	return 0;
}

int harness_init_in(struct harness *h, const char *base)
{
	static int counter;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(h, 0, sizeof(*h));
	h->pid = -1;
	h->notify_fd = -1;
	h->exit_status = -1;
	snprintf(h->shm_dir, sizeof(h->shm_dir), "/dev/shm");
	if ((size_t)snprintf(h->dir, sizeof(h->dir), "%s/weightd-test.XXXXXX", base) >=
	    sizeof(h->dir))
		return -1;
	if (!mkdtemp(h->dir))
		return -1;
	chmod(h->dir, 0755);
	snprintf(h->sock, sizeof(h->sock), "%s/weightd.sock", h->dir);
	snprintf(h->conf, sizeof(h->conf), "%s/weightd.conf", h->dir);
	snprintf(h->notify, sizeof(h->notify), "%s/notify.sock", h->dir);
	snprintf(h->log, sizeof(h->log), "%s/weightd.log", h->dir);
	snprintf(h->prefix, sizeof(h->prefix), "wdtest%d-%d", (int)getpid(), counter++);
	if (segment_tmpfs(h) < 0)
		return -1;
	h->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (h->notify_fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->notify);
	if (bind(h->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	return notify_start(h);
}

int harness_init(struct harness *h)
{
	return harness_init_in(h, "/tmp");
}

int harness_write_config(struct harness *h, const char *extra_daemon, const char *sections)
{
	FILE *f = fopen(h->conf, "w");

	if (!f)
		return -1;
	/* socket_mode and workers have defaults here that extra_daemon may replace */
	extra_daemon = extra_daemon ? extra_daemon : "";
	fprintf(f, "[daemon]\nsocket = %s\nshm_prefix = %s\nstate_dir = %s/state\n", h->sock,
		h->prefix, h->dir);
	if (h->seg_dir[0] && !strstr(extra_daemon, "segment_dir"))
		fprintf(f, "segment_dir = %s\n", h->seg_dir);
	/* one socket unless the test asks for the admin socket: the tests act as root, and most
	 * of them evict or reload through the socket they read from */
	if (!strstr(extra_daemon, "admin_socket") && !strstr(extra_daemon, "single_socket"))
		fputs("single_socket = yes\n", f);
	fprintf(f, "%s%s%s\n%s\n",
		strstr(extra_daemon, "socket_mode") ? "" : "socket_mode = 0666\n",
		strstr(extra_daemon, "workers") ? "" : "workers = 2\n", extra_daemon,
		sections ? sections : "");
	return fclose(f) == 0 ? 0 : -1;
}

/* Does one datagram hold a line starting with `what`? */
static int has_line(const char *msg, const char *what)
{
	size_t wl = strlen(what);

	for (const char *line = msg; line && *line;
	     line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		if (strncmp(line, what, wl) == 0)
			return 1;
	return 0;
}

/* Take queued messages up to the first that has a line starting with `what`. Caller locks. */
static int take_until(struct harness_notify *q, const char *what)
{
	while (q->tail < q->head)
		if (has_line(q->msgs[q->tail++ % NQ_SLOTS], what))
			return 1;
	return 0;
}

/* The waits below catch hangs; they do not time the daemon. A sanitizer build runs the same work
 * 2-5x slower, so ctest sets WD_TIME_SCALE there (cmake/WeightdTest.cmake) and every wait grows. */
static int time_scale(void)
{
	const char *p = getenv("WD_TIME_SCALE");
	int k = p ? atoi(p) : 1;

	return k >= 1 && k <= 100 ? k : 1;
}

int harness_wait_notify(struct harness *h, const char *what, int timeout_ms)
{
	struct harness_notify *q = h->nq;
	int64_t end = (int64_t)wd_clock_ms() + (int64_t)timeout_ms * time_scale();

	if (!q)
		return -1;
	for (;;) {
		struct timespec ts;
		siginfo_t si;
		int found, status;
		char c;

		pthread_mutex_lock(&q->lock);
		found = take_until(q, what);
		if (!found && (int64_t)wd_clock_ms() < end) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&q->cond, &q->lock, &ts);
			found = take_until(q, what);
		}
		pthread_mutex_unlock(&q->lock);
		if (found)
			return 0;
		if ((int64_t)wd_clock_ms() >= end)
			return -1;
		/* A daemon that exited: first take what it sent before exiting (the reader thread
		 * empties the socket), and reap it only when the message is not there, so a caller
		 * that waits for it itself (after STOPPING=1) still can. */
		memset(&si, 0, sizeof(si));
		if (h->pid <= 0 ||
		    waitid(P_PID, (id_t)h->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid == 0)
			continue;
		for (int i = 0; i < 1000 && recv(h->notify_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
		     i++)
			usleep(1000);
		usleep(10000);
		pthread_mutex_lock(&q->lock);
		found = take_until(q, what);
		pthread_mutex_unlock(&q->lock);
		if (found)
			return 0;
		if (waitpid(h->pid, &status, 0) == h->pid) {
			h->pid = -1;
			h->exit_status = status;
		}
		return -1;
	}
}

void harness_forget_notify(struct harness *h)
{
	if (!h->nq)
		return;
	pthread_mutex_lock(&h->nq->lock);
	h->nq->tail = h->nq->head;
	pthread_mutex_unlock(&h->nq->lock);
}

/* In the forked child, before exec: its own mount namespace with a small tmpfs on /dev/shm. */
static int private_shm(const char *size)
{
	char opts[64];

	snprintf(opts, sizeof(opts), "size=%s,mode=1777", size);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return -1;
	return 0;
}

#define CHILD_UNSUPPORTED 125

int harness_start_opts(struct harness *h, const struct harness_opts *opts)
{
	pid_t pid, parent = getpid();

	/* a stale READY=1 of an earlier daemon must not count for this one */
	harness_forget_notify(h);
	snprintf(h->shm_dir, sizeof(h->shm_dir), "%s", h->seg_dir[0] ? h->seg_dir : "/dev/shm");
	h->exit_status = -1;
	/* a daemon of another user makes its socket and state in the temp dir and notifies */
	if (opts && opts->uid &&
	    (chown(h->dir, opts->uid, opts->gid) < 0 ||
	     chown(h->notify, opts->uid, opts->gid) < 0 ||
	     (h->seg_dir[0] && chown(h->seg_dir, opts->uid, opts->gid) < 0)))
		return -1;
	pid = fork();
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
		if (opts && opts->shm_size && private_shm(opts->shm_size) < 0) {
			fprintf(stderr, "harness: no private /dev/shm: %s\n", strerror(errno));
			_exit(CHILD_UNSUPPORTED);
		}
		if (opts && opts->nofile) {
			struct rlimit rl = { opts->nofile, opts->nofile };
			if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
				fprintf(stderr, "harness: setrlimit: %s\n", strerror(errno));
				_exit(CHILD_UNSUPPORTED);
			}
		}
		/* before the death signal: a change of credentials clears it */
		if (opts && opts->uid &&
		    (setgroups(0, NULL) < 0 || setgid(opts->gid) < 0 || setuid(opts->uid) < 0)) {
			fprintf(stderr, "harness: running as uid %u: %s\n", (unsigned)opts->uid,
				strerror(errno));
			_exit(CHILD_UNSUPPORTED);
		}
		/* a test killed by its timeout takes its daemon with it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setenv("NOTIFY_SOCKET", h->notify, 1);
		for (const char *const *e = opts ? opts->env : NULL; e && *e; e++)
			putenv((char *)*e);
		if (opts && opts->file_log_level)
			execl(harness_weightd(), "weightd", "--config", h->conf, "--foreground",
			      (char *)NULL);
		else
			execl(harness_weightd(), "weightd", "--config", h->conf, "--foreground",
			      "--log-level", "debug", (char *)NULL);
		_exit(127);
	}
	h->pid = pid;
	if (opts && opts->shm_size)
		snprintf(h->shm_dir, sizeof(h->shm_dir), "/proc/%d/root/dev/shm", (int)pid);
	if (opts && opts->no_wait)
		return 0;
	if (harness_wait_notify(h, "READY=1", 30000) < 0) {
		if (h->pid < 0 && WIFEXITED(h->exit_status) &&
		    WEXITSTATUS(h->exit_status) == CHILD_UNSUPPORTED)
			return HARNESS_UNSUPPORTED;
		fprintf(stderr, "harness: weightd did not become ready\n");
		harness_dump_log(h);
		return -1;
	}
	/* READY=1 can arrive while the daemon still holds the socket it sent it with: return once
	 * its descriptors have settled, so a test's fd baseline counts only lasting ones. */
	if (!opts || !opts->no_settle)
		harness_settled_fds(h);
	return 0;
}

int harness_start(struct harness *h)
{
	return harness_start_opts(h, NULL);
}

int harness_start_with_nofile(struct harness *h, unsigned long nofile)
{
	struct harness_opts o = { .nofile = nofile };

	return harness_start_opts(h, &o);
}

int harness_stop(struct harness *h)
{
	int status = -1;

	if (h->pid <= 0)
		return -1;
	kill(h->pid, SIGTERM);
	for (int i = 0; i < 3000 * time_scale(); i++) {
		pid_t r = waitpid(h->pid, &status, WNOHANG);
		if (r == h->pid) {
			h->pid = -1;
			return status;
		}
		usleep(10000);
	}
	fprintf(stderr, "harness: weightd did not stop within %d s; killing it\n",
		30 * time_scale());
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
	DIR *d = opendir(h->shm_dir);
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
	notify_stop(h);
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
	if (h->seg_dir[0])
		rm_tree(h->seg_dir);
	if (!getenv("WD_KEEP_TEST_DIR"))
		rm_tree(h->dir);
}

int harness_run(char *const argv[], char *out, size_t cap, uid_t uid)
{
	struct harness_run_as as = { .uid = uid, .gid = (gid_t)uid, .keep_groups = true };

	return harness_run_with(argv, out, cap, &as);
}

int harness_run_with(char *const argv[], char *out, size_t cap, const struct harness_run_as *as)
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
		struct rlimit rl = { as->nofile, as->nofile };

		dup2(pfd[1], STDOUT_FILENO);
		if (as->with_stderr)
			dup2(pfd[1], STDERR_FILENO);
		if (as->nofile && setrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(126);
		if (as->uid != (uid_t)-1 &&
		    ((!as->keep_groups && setgroups(0, NULL) < 0) || setgid(as->gid) < 0 ||
		     setuid(as->uid) < 0))
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

int harness_sample(const struct harness *h, const char *name, char *out, size_t cap)
{
	char args[1200];

	harness_path(h, name, out, cap);
	snprintf(args, sizeof(args), "sample %s", out);
	return harness_mkfixture(args);
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

int harness_settled_fds(const struct harness *h)
{
	int last = -1, same = 0;

	for (int i = 0; i < 500 && same < 3; i++) {
		int n = harness_count_fds(h->pid);
		same = n == last ? same + 1 : 0;
		last = n;
		usleep(20000);
	}
	return last;
}

int harness_wait_fds(const struct harness *h, int want, int timeout_ms)
{
	int64_t end = (int64_t)wd_clock_ms() + timeout_ms;
	int n;

	while ((n = harness_count_fds(h->pid)) != want && (int64_t)wd_clock_ms() < end)
		usleep(10000);
	return n;
}

static long status_field_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			v = strtol(line + flen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

long harness_rss_kb(pid_t pid)
{
	return status_field_kb(pid, "VmRSS");
}

long harness_hwm_kb(pid_t pid)
{
	return status_field_kb(pid, "VmHWM");
}

/* Reads /proc/PID/stat fields after the command name, which ends at the last ')'. */
static int read_stat(pid_t pid, unsigned long *ret_minflt, unsigned long *ret_ticks)
{
	char path[64], buf[2048], *p;
	unsigned long mf, ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* state is field 3, minflt 10, utime 14, stime 15 */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %lu %*u %*u %*u %lu %lu", &mf, &ut,
			 &st) != 3)
		return -1;
	*ret_minflt = mf;
	*ret_ticks = ut + st;
	return 0;
}

long harness_cpu_ticks(pid_t pid)
{
	unsigned long mf, t;

	return read_stat(pid, &mf, &t) < 0 ? -1 : (long)t;
}

long harness_minor_faults(pid_t pid)
{
	unsigned long mf, t;

	return read_stat(pid, &mf, &t) < 0 ? -1 : (long)mf;
}

int harness_log_contains(const struct harness *h, const char *text)
{
	FILE *f = fopen(h->log, "r");
	char line[4096];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

unsigned long long harness_shm_free(const struct harness *h)
{
	struct statvfs sv;

	if (statvfs(h->shm_dir, &sv) < 0)
		return 0;
	return (unsigned long long)sv.f_bavail * sv.f_frsize;
}

void harness_dump_fds(pid_t pid)
{
	char path[64], link[512], target[512];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return;
	fprintf(stderr, "---- fds of %d ----\n", (int)pid);
	while ((e = readdir(d))) {
		ssize_t n;
		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = '\0';
		fprintf(stderr, "%s -> %s\n", e->d_name, target);
	}
	closedir(d);
}

void harness_make_cold(const struct harness *h)
{
	char path[sizeof(h->dir) + sizeof(h->prefix) + 16];
	struct dirent *e;
	size_t plen = strlen(h->prefix);
	DIR *d = opendir("/dev/shm");

	while (d && (e = readdir(d)))
		if (strncmp(e->d_name, h->prefix, plen) == 0 && e->d_name[plen] == '.') {
			char f[NAME_MAX + 16];

			snprintf(f, sizeof(f), "/dev/shm/%s", e->d_name);
			unlink(f);
		}
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "%s/state/%s", h->dir, h->prefix);
	d = opendir(path);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			char f[sizeof(path) + NAME_MAX + 2];

			snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
			unlink(f);
		}
	if (d)
		closedir(d);
}
