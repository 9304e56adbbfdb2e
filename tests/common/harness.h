/* SPDX-License-Identifier: Apache-2.0 */
/* harness.h - runs a private weightd for an integration test: its own socket, shm prefix and
 * state directory in a temp dir; readiness is waited for on a notify socket, never slept for. */
#ifndef WD_HARNESS_H
#define WD_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct harness_notify;

struct harness {
	pid_t pid;
	char dir[256]; /* temp dir holding config, socket, state, checkpoints */
	char sock[320];
	char prefix[64];
	char conf[320];
	char notify[320];
	int notify_fd;
	struct harness_notify *nq; /* a thread reads notify_fd all the time: a daemon never blocks
				    * on a full notify socket, and no message is missed */
	char log[320];		   /* the daemon's stderr */
	char shm_dir[256]; /* where the daemon's segments show: /dev/shm, its private tmpfs, or
			    * seg_dir */
	char seg_dir[256]; /* the daemon's segment_dir, "" for /dev/shm: a directory of its own in
			    * the tmpfs WD_TEST_SEGMENT_TMPFS names, when the environment sets it */
	int exit_status;   /* wait status of the last daemon that exited on its own (-1: none) */
};

/* How to start the daemon; zero fields mean the defaults. */
struct harness_opts {
	unsigned long nofile; /* RLIMIT_NOFILE (soft and hard) of the daemon; 0: inherited */
	const char *shm_size; /* a private tmpfs of this size ("64m") on the daemon's /dev/shm, in
				  * its own mount namespace; NULL: the shared /dev/shm */
	bool file_log_level;  /* no --log-level debug: the config's log_level decides */
	bool no_settle;	      /* return at READY=1, without waiting for the daemon's fd count to
			       * settle (for a caller that times the start) */
	/* run the daemon as uid and gid, no supplementary groups (the temp dir and the notify
	 * socket are given to it); uid 0: as the test runs */
	uid_t uid;
	gid_t gid;
	/* NAME=VALUE strings added to the daemon's environment (LD_PRELOAD of a fault injector,
	 * say), NULL-terminated; NULL: none */
	const char *const *env;
	/* return as soon as the daemon is started, without waiting for READY=1 (for a caller that
	 * kills it while it starts up, or waits itself with harness_wait_notify) */
	bool no_wait;
};

#define HARNESS_UNSUPPORTED (-2)

/* Make the temp dir (under /tmp) and pick names. Returns 0 or -1. With WD_TEST_SEGMENT_TMPFS set
 * (ctest's second run of some tests, on a tmpfs mounted with huge pages), the daemon keeps its
 * segments in a directory of its own there (segment_dir); a process whose environment names a
 * directory that is not a tmpfs exits with status 77 (skipped), saying why. */
int harness_init(struct harness *h);

/* The same with the temp dir under `base`. */
int harness_init_in(struct harness *h, const char *base);

/* Write the config: a [daemon] section (socket, prefix, state dir, socket_mode = 0666,
 * workers = 2 and single_socket = yes unless extra_daemon sets them or an admin_socket) plus
 * `extra_daemon` lines, then `sections` verbatim (checkpoint sections). */
int harness_write_config(struct harness *h, const char *extra_daemon, const char *sections);

/* Start weightd --foreground and wait (up to 30 s) for READY=1. 0, or -1 (log printed). */
int harness_start(struct harness *h);

/* The same with options. HARNESS_UNSUPPORTED when this machine cannot give what opts ask for
 * (e.g. no permission for a mount namespace): the test should then be skipped. */
int harness_start_opts(struct harness *h, const struct harness_opts *opts);

/* harness_start with the daemon's RLIMIT_NOFILE (soft and hard) set to `nofile`. */
int harness_start_with_nofile(struct harness *h, unsigned long nofile);

/* Wait for a notify message starting with `what` ("READY=1", "RELOADING=1", "STOPPING=1").
 * Messages are taken in arrival order; those before the match are consumed with it. */
int harness_wait_notify(struct harness *h, const char *what, int timeout_ms);

/* Forget every notify message received so far (before triggering one to wait for). */
void harness_forget_notify(struct harness *h);

/* SIGTERM and wait. Returns the exit status (or -1). */
int harness_stop(struct harness *h);

/* SIGKILL and reap. */
void harness_kill(struct harness *h);

/* Count objects under the instance prefix where its segments live (shm_dir). */
int harness_segments(const struct harness *h);

/* Unlink every segment under the instance prefix in /dev/shm and every state record of the
 * instance: the next start is cold (nothing to re-adopt). Call with the daemon stopped. */
void harness_make_cold(const struct harness *h);

/* Stop if running, remove the temp dir and any leftover segments. */
void harness_cleanup(struct harness *h);

/* Path in the temp dir. */
void harness_path(const struct harness *h, const char *name, char *out, size_t cap);

/* Run a program (argv[0] is a path) with stdout captured into out (NUL-terminated, truncated to
 * cap). Returns its exit status, or -1. If uid != (uid_t)-1, the child drops to that uid/gid. */
int harness_run(char *const argv[], char *out, size_t cap, uid_t uid);

/* How harness_run_with runs its program: as uid and gid (and no supplementary groups unless
 * `keep_groups`) unless uid is (uid_t)-1, with stderr captured beside stdout, and with
 * RLIMIT_NOFILE `nofile` when not 0. */
struct harness_run_as {
	uid_t uid;
	gid_t gid;
	bool keep_groups;
	bool with_stderr;
	unsigned long nofile;
};

/* harness_run, the child set up as `as` says (harness_run is uid, gid uid, groups kept, stdout only). */
int harness_run_with(char *const argv[], char *out, size_t cap, const struct harness_run_as *as);

/* Run `wd-mkfixture args...` (path from $WD_MKFIXTURE). 0 on success. */
int harness_mkfixture(const char *args);

/* Write the built-in sample checkpoint (wd-mkfixture sample: the quick start's tiny.safetensors)
 * to `name` in the temp dir, its path into out. 0 on success. */
int harness_sample(const struct harness *h, const char *name, char *out, size_t cap);

/* Paths of the built programs, from the environment ctest sets. */
const char *harness_weightd(void);
const char *harness_weightctl(void);

/* Print the daemon's log (for a failing test). */
void harness_dump_log(const struct harness *h);

/* Count open fds of a process (/proc/PID/fd). */
int harness_count_fds(pid_t pid);

/* Print a process's open fds and what they are (for a failing test). */
void harness_dump_fds(pid_t pid);

/* The daemon's fd count once it stops moving (the same over several reads 20 ms apart; the
 * daemon opens short-lived fds of its own, e.g. for sd_notify). */
int harness_settled_fds(const struct harness *h);

/* Wait (up to timeout_ms) until the daemon has exactly `want` fds open. Returns the last count. */
int harness_wait_fds(const struct harness *h, int want, int timeout_ms);

/* VmRSS and VmHWM of a process in KiB (/proc/PID/status); -1 when unreadable. */
long harness_rss_kb(pid_t pid);
long harness_hwm_kb(pid_t pid);

/* utime + stime of a process in clock ticks (/proc/PID/stat); -1 when unreadable. */
long harness_cpu_ticks(pid_t pid);
/* Minor page faults of PID so far, or -1. */
long harness_minor_faults(pid_t pid);

/* Does the daemon's log contain `text`? */
int harness_log_contains(const struct harness *h, const char *text);

/* Bytes free in the daemon's /dev/shm (its private one when it has one). */
unsigned long long harness_shm_free(const struct harness *h);

#endif
