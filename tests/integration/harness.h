/* harness.h - runs a private weightd for an integration test: its own socket, shm prefix and
 * state directory in a temp dir; readiness is waited for on a notify socket, never slept for. */
#ifndef WD_HARNESS_H
#define WD_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct harness {
	pid_t pid;
	char dir[256];        /* temp dir holding config, socket, state, checkpoints */
	char sock[320];
	char prefix[64];
	char conf[320];
	char notify[320];
	int notify_fd;
	char log[320];        /* the daemon's stderr */
};

/* Make the temp dir and pick names. Returns 0 or -1. */
int harness_init(struct harness *h);

/* Write the config: a [daemon] section (socket, prefix, state dir) plus `extra_daemon` lines, then
 * `sections` verbatim (checkpoint sections). */
int harness_write_config(struct harness *h, const char *extra_daemon, const char *sections);

/* Start weightd --foreground and wait (up to 30 s) for READY=1. 0, or -1 (log printed). */
int harness_start(struct harness *h);

/* Wait for a notify message starting with `what` ("READY=1", "RELOADING=1", "STOPPING=1"). */
int harness_wait_notify(struct harness *h, const char *what, int timeout_ms);

/* SIGTERM and wait. Returns the exit status (or -1). */
int harness_stop(struct harness *h);

/* SIGKILL and reap. */
void harness_kill(struct harness *h);

/* Count /dev/shm objects under the instance prefix. */
int harness_segments(const struct harness *h);

/* Stop if running, remove the temp dir and any leftover segments. */
void harness_cleanup(struct harness *h);

/* Path in the temp dir. */
void harness_path(const struct harness *h, const char *name, char *out, size_t cap);

/* Run a program (argv[0] is a path) with stdout captured into out (NUL-terminated, truncated to
 * cap). Returns its exit status, or -1. If uid != (uid_t)-1, the child drops to that uid/gid. */
int harness_run(char *const argv[], char *out, size_t cap, uid_t uid);

/* Run `wd-mkfixture args...` (path from $WD_MKFIXTURE). 0 on success. */
int harness_mkfixture(const char *args);

/* Paths of the built programs, from the environment ctest sets. */
const char *harness_weightd(void);
const char *harness_weightctl(void);

/* Print the daemon's log (for a failing test). */
void harness_dump_log(const struct harness *h);

/* Count open fds of a process (/proc/PID/fd). */
int harness_count_fds(pid_t pid);

#endif
