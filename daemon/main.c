/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - weightd: options, start-up (config, sources, segments, socket), signals, shutdown. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "admit.h"
#include "aws_cred.h"
#include "azure.h"
#include "cache.h"
#include "catalog.h"
#include "clock.h"
#include "config.h"
#include "daemon.h"
#include "fill.h"
#include "heap.h"
#include "keymemo.h"
#include "log.h"
#include "metrics.h"
#include "netcheck.h"
#include "pagedrop.h"
#include "pool.h"
#include "preload.h"
#include "purge.h"
#include "reload.h"
#include "remote.h"
#include "request_query.h"
#include "segment.h"
#include "server.h"
#include "shmscan.h"
#include "state.h"
#include "uid.h"
#include "watch.h"

static const char usage[] =
	"usage: weightd --config FILE [--foreground] [--check-config] [--log-level LEVEL]\n"
	"       weightd --purge --config FILE | --prefix P [--state-dir D]  (--purge --help)\n"
	"  --config FILE     the configuration (INI; see weightd.conf(5))\n"
	"  --foreground      stay in the foreground (as under systemd)\n"
	"  --check-config    validate the configuration and every checkpoint, then exit\n"
	"  --log-level LEVEL error, warning, notice, info or debug\n";

/* Every error in the configuration, one line each, so that one run shows them all. */
static void print_config_error(void *ctx, const char *line)
{
	(*(size_t *)ctx)++;
	fprintf(stderr, "weightd: %s\n", line);
}

/*
 * An s3 checkpoint's credentials resolved once, as admission would (this may ask STS, a container
 * agent or instance metadata, never the store): where they came from, their key id and expiry.
 */
static int check_aws(const struct source_conf *sc, char *says, size_t cap, weightd_error *err)
{
	struct wd_source_remote_conf rc;
	struct wd_aws_cred_conf ac = { 0 };
	struct wd_aws_cred_info in;
	struct wd_aws_cred *c = NULL;
	char when[64] = "no expiry";
	int r;

	catalog_remote_conf(sc, NULL, &rc);
	ac.source = (enum wd_aws_source)rc.credentials;
	ac.credentials_file = rc.credentials_file;
	ac.profile = rc.profile;
	ac.region = rc.region;
	ac.ca_file = rc.ca_file;
	ac.imds_v1 = rc.imds_v1;
	if (ac.source == WD_AWS_AUTO && ac.credentials_file)
		ac.source = WD_AWS_FILE;
	r = wd_aws_cred_new(&ac, &c, err);
	if (r == -WEIGHTD_E_NOT_FOUND && ac.source == WD_AWS_AUTO) {
		wd_error_clear(err);
		snprintf(says, cap, "no credentials found: requests go unsigned");
		return 0;
	}
	if (r < 0)
		return r;
	wd_aws_cred_info(c, &in);
	wd_aws_cred_unref(c);
	if (in.expires) {
		time_t t = (time_t)in.expires;
		struct tm tm;
		if (gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "expires %Y-%m-%dT%H:%M:%SZ", &tm);
	}
	snprintf(says, cap, "credentials from %s, access key id %s, %s", in.source, in.access_key,
		 when);
	return 0;
}

/*
 * A remote checkpoint as far as it can be checked without reading its store: its section was
 * checked with the file; an s3 checkpoint's credentials are resolved once; a token file must be
 * readable and private. Prints its line.
 */
static int check_remote(const struct source_conf *sc, weightd_error *err)
{
	char shown[1024], says[512] = "";
	int r = 0;

	wd_source_show_path(sc->path, shown, sizeof(shown));
	if (wd_azure_is_url(sc->path)) {
		struct wd_azure_opts o = { .key_file = sc->azure_key_file,
					   .ca_file = sc->ca_file,
					   .allow_http = sc->allow_http };
		enum wd_azure_source s = WD_AZURE_AUTO;
		int w = wd_azure_source_parse(sc->azure_credentials ? sc->azure_credentials :
								      "auto");

		o.source = w < 0 ? WD_AZURE_AUTO : (enum wd_azure_source)w;
		r = wd_azure_check(sc->path, sc->endpoint, &o, &s, err);
		if (r == 0)
			printf("checkpoint %s: ok, remote %s, azure credentials %s (not contacted: "
			       "--check-config reads no network)\n",
			       sc->name, shown, wd_azure_source_name(s));
		return r;
	}
	if (strncmp(sc->path, "s3://", 5) == 0) {
		r = check_aws(sc, says, sizeof(says), err);
	} else if (sc->token_file) {
		char *t = NULL;

		r = wd_remote_token(sc->token_file, &t, err);
		if (t) {
			explicit_bzero(t, strlen(t));
			free(t);
		}
	}
	if (r == 0)
		printf("checkpoint %s: ok, remote %s (the store not contacted: --check-config reads "
		       "no payload)%s%s\n",
		       sc->name, shown, says[0] ? "; " : "", says);
	return r;
}

/* Validate the config and every checkpoint without starting; prints one line per checkpoint. */
static int check_config(const struct config *cfg)
{
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	char limits[256];
	int bad = 0;

	for (size_t i = 0; i < cfg->n_sources; i++) {
		const struct source_conf *sc = &cfg->sources[i];
		struct wd_source *src = NULL;
		weightd_error err;

		wd_error_clear(&err);
		if (wd_source_is_url(sc->path)) {
			if (check_remote(sc, &err) < 0) {
				printf("checkpoint %s: FAILED: %s\n", sc->name, err.message);
				bad++;
			}
			continue;
		}
		if (wd_source_open(sc->name, sc->path, &lim, &src, &err) < 0) {
			printf("checkpoint %s: FAILED (%s): %s\n", sc->name, sc->path, err.message);
			bad++;
			continue;
		}
		printf("checkpoint %s: ok, %s, %zu tensors, %llu bytes\n", sc->name,
		       wd_source_kind_name(wd_source_kind(src)), wd_source_tensor_count(src),
		       (unsigned long long)wd_source_bytes(src));
		wd_source_free(src);
	}
	if (cfg->segment_dir && cfg->segment_dir[0]) {
		weightd_error err;

		wd_error_clear(&err);
		if (wd_segment_set_dir(cfg->segment_dir, &err) < 0) {
			printf("segment_dir %s: FAILED: %s\n", cfg->segment_dir, err.message);
			bad++;
		} else {
			printf("segment_dir %s: ok\n", cfg->segment_dir);
		}
	}
	uid_limits_text(cfg, limits, sizeof(limits));
	printf("%s\n", limits);
	printf("%s: %zu checkpoints, %d with errors\n", cfg->path, cfg->n_sources, bad);
	return bad ? 1 : 0;
}

/* How long running jobs may take to finish once stopping; then they are abandoned (their
 * segments have no state record yet, so the next start removes them). Well under systemd's
 * TimeoutStopSec. */
#define SHUTDOWN_GRACE_MS 3000u

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct daemon *d = arg;
	size_t cancelled;

	if (sig == SIGHUP) {
		reload_request(d->reload, NULL, 0, 0);
		return;
	}
	if (d->stopping)
		return;
	/* Work that has not started is cancelled (its requests fail with "cancelled"); what runs
	 * gets SHUTDOWN_GRACE_MS to finish. */
	cancelled = pool_cancel(d->pool);
	/* transfers from object storage in flight end within ~100 ms, so that workers waiting on
	 * a slow or stalled server come back well within the stop timeout */
	wd_remote_stop(true);
	log_notice("received %s; stopping (%zu queued jobs cancelled)",
		   sig == SIGTERM ? "SIGTERM" : "SIGINT", cancelled);
	/* the requests they belonged to are answered "cancelled" while the clients are still
	 * connected; what finishes after this is never sent */
	pool_dispatch(d->pool);
	d->stopping = true;
	sd_notify(0, "STOPPING=1");
	event_base_loopbreak(d->base);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	sd_notify(0, "WATCHDOG=1");
}

/* Weights kept because a process maps them go back to the LRU once it has let go. */
static void on_locks(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	if (cache_locked_weights(d->cache))
		cache_recheck_locks(d->cache);
	if (d->kept && d->kept->n)
		state_kept_recheck(d->kept);
}

static bool socket_activated;

/* The files of a reload's checkpoints are what the watches follow. */
static void on_reloaded(struct daemon *d)
{
	watch_sync(d->watch);
}

/* A remote checkpoint's admission ended (admit.c): a ready one may be preloaded now. */
static void on_admitted(struct csource *cs, void *arg)
{
	struct daemon *d = arg;

	(void)cs;
	if (!d->stopping)
		preload_sync(d);
}

static void on_watch_fire(struct daemon *d, char *const *names, size_t n)
{
	reload_recheck(d->reload, names, n);
}

static int adopt_one(const struct state_segment *rec, void *arg)
{
	struct daemon *d = arg;

	return cache_adopt(d->cache, rec);
}

/*
 * Say once which pages segments get, and where they are 4 KiB what would give 2 MiB: a client's
 * first touch of a weight costs a fault per page, 512 times fewer on huge pages.
 */
static void report_pages(const struct config *cfg, uint64_t page)
{
	const char *dir = wd_segment_dir();

	if (page >= (2u << 20))
		log_notice("segments in %s get huge pages (%llu KiB)", dir,
			   (unsigned long long)(page >> 10));
	else if (cfg->segment_dir && cfg->segment_dir[0])
		log_warn("segments in %s get 4 KiB pages, not huge pages: mount that tmpfs with "
			 "huge=within_size (mount -o remount,huge=within_size %s, or the "
			 "var-lib-weightd-segments.mount unit) so clients fault weights in 2 MiB "
			 "at a time", dir, dir);
	else
		log_notice("segments in /dev/shm get 4 KiB pages, not huge pages: for 2 MiB pages "
			   "(clients fault weights in 512 times fewer faults) set segment_dir to a "
			   "tmpfs mounted with huge=within_size, as var-lib-weightd-segments.mount "
			   "provides");
}

/* The name of the socket served: what systemd passed, else the configured path. */
static const char *served_socket(int fd, char *buf, size_t cap, const char *configured)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);

	if (!socket_activated)
		return configured;
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || sa.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path)) {
		snprintf(buf, cap, "the socket passed by systemd");
	} else if (sa.sun_path[0] == '\0') {
		/* abstract: shown as ss(8) does */
		snprintf(buf, cap, "@%.*s", (int)(len - offsetof(struct sockaddr_un, sun_path) - 1),
			 sa.sun_path + 1);
	} else {
		snprintf(buf, cap, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
	}
	return buf;
}

static bool admin_bound; /* the admin socket's file is ours to unlink at exit */

/* A socket systemd passed, checked and made non-blocking. */
static int take_passed(int fd, weightd_error *err)
{
	if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "a socket systemd passed is not a listening Unix stream socket");
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return 0;
}

/*
 * The listening sockets: inherited from systemd (socket activation) or made here. The engine
 * socket always; the admin socket unless single_socket (*ret_admin -1 then). systemd may pass
 * both, the admin one named "admin" (FileDescriptorName=admin in weightd-admin.socket); one
 * passed alone is the engine socket, and the admin socket is then bound here.
 */
static int get_listeners(const struct config *cfg, int *ret_fd, int *ret_admin, weightd_error *err)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);
	int fd = -1, admin = -1, rc = 0;

	*ret_admin = -1;
	if (n < 0)
		return wd_error_set(err, WEIGHTD_E_IO, "sd_listen_fds: %s", strerror(-n));
	if (n > 2 || (n == 2 && cfg->single_socket))
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "systemd passed %d sockets; weightd takes %s", n,
				  cfg->single_socket ? "exactly one (single_socket = yes)" :
						       "the engine socket and the admin socket");
	for (int i = 0; i < n && rc == 0; i++) {
		bool is_admin = names && names[i] && strcmp(names[i], "admin") == 0;

		if ((is_admin ? admin : fd) >= 0)
			rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					  "systemd passed two %s sockets", is_admin ? "admin" : "engine");
		else if ((rc = take_passed(SD_LISTEN_FDS_START + i, err)) == 0)
			*(is_admin ? &admin : &fd) = SD_LISTEN_FDS_START + i;
	}
	if (names)
		for (int i = 0; i < n; i++)
			free(names[i]);
	free(names);
	if (rc == 0 && n > 0 && fd < 0)
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "systemd passed the admin socket but not the engine socket");
	if (rc < 0)
		return rc;
	if (n > 0) {
		log_info("serving on the socket%s passed by systemd", n > 1 ? "s" : "");
		socket_activated = true;
	} else if ((rc = server_bind(cfg, &fd, err)) < 0) {
		return rc;
	}
	if (!cfg->single_socket && admin < 0) {
		if ((rc = server_bind_admin(cfg, &admin, err)) < 0) {
			if (!socket_activated) {
				close(fd);
				unlink(cfg->socket_path);
			}
			return rc;
		}
		admin_bound = true;
	}
	*ret_fd = fd;
	*ret_admin = admin;
	return 0;
}

/* Every client costs a socket and every weight a segment fd: take the whole hard limit. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/*
 * Detach from the terminal. The process that was started waits on a pipe and exits 0 only when
 * the daemon writes that it is serving (daemon_readiness), 1 when the pipe closes without that
 * (the daemon failed, and logged why on the inherited stderr): the exit status tells the truth.
 * *ret_ready_fd is the pipe's write end in the daemon.
 */
static int daemonize(int *ret_ready_fd)
{
	int pfd[2], fd;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		char c = 0;
		ssize_t n;

		close(pfd[1]);
		do
			n = read(pfd[0], &c, 1);
		while (n < 0 && errno == EINTR);
		_exit(n == 1 && c == 'R' ? 0 : 1);
	}
	close(pfd[0]);
	if (setsid() < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0)
		_exit(0);
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	*ret_ready_fd = pfd[1];
	return chdir("/");
}

/* Tell the waiting parent of daemonize() that we serve. */
static void daemon_readiness(int *fd)
{
	if (*fd < 0)
		return;
	if (write(*fd, "R", 1) != 1)
		log_warn("cannot tell the starting process that weightd is ready: %s", strerror(errno));
	close(*fd);
	*fd = -1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const struct wd_limits lim = WD_LIMITS_DEFAULT;
	struct daemon d;
	struct state_kept kept = { NULL, 0 };
	weightd_error err;
	struct event *ev_hup = NULL, *ev_term = NULL, *ev_int = NULL, *ev_wd = NULL, *ev_locks = NULL;
	bool was_clean = true;
	struct metrics *metrics = NULL;
	const char *config_path = NULL;
	bool foreground = false, check = false;
	int level = -1, lfd = -1, admin_fd = -1, ready_fd = -1, opt, rc = 1, purged = 0, adopted;
	uint64_t wd_usec = 0;
	char served[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
	size_t n_errors = 0;

	for (int i = 1; i < argc; i++)  /* a mode of its own, with its own options */
		if (strcmp(argv[i], "--purge") == 0)
			return purge_main(argc, argv);
	heap_tune();
	memset(&d, 0, sizeof(d));
	wd_error_clear(&err);
	while ((opt = getopt_long(argc, argv, "c:fl:hV", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'f': foreground = true; break;
		case 'C': check = true; break;
		case 'l':
			level = log_level_parse(optarg);
			if (level < 0) {
				fprintf(stderr, "weightd: unknown log level \"%s\"\n%s", optarg, usage);
				return 2;
			}
			break;
		case 'h': fputs(usage, stdout); return 0;
		case 'V': printf("weightd %s\n", WD_VERSION); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (!config_path || optind != argc) {
		fputs(usage, stderr);
		return 2;
	}
	log_set_prefix(getenv("JOURNAL_STREAM") != NULL || getenv("NOTIFY_SOCKET") != NULL);
	if (config_load_report(config_path, &d.cfg, &err, print_config_error, &n_errors) < 0) {
		/* what is not about a line (the file cannot be read) was not reported */
		if (!n_errors)
			fprintf(stderr, "weightd: %s\n", err.message);
		return 1;
	}
	d.log_level_cli = level;
	log_set_level(level >= 0 ? level : d.cfg->log_level >= 0 ? d.cfg->log_level : LOG_LVL_INFO);
	raise_fd_limit(); /* before --check-config too: it prints the limits derived from it */
	if (check) {
		rc = check_config(d.cfg);
		config_free(d.cfg);
		return rc;
	}
	snprintf(d.instance, sizeof(d.instance), "%s", d.cfg->shm_prefix);
	if (wd_segment_set_dir(d.cfg->segment_dir, &err) < 0) {
		log_err("%s", err.message);
		config_free(d.cfg);
		return 1;
	}
	d.started_ns = wd_clock_ns();
	signal(SIGPIPE, SIG_IGN);
	if (!foreground && !getenv("NOTIFY_SOCKET") && daemonize(&ready_fd) < 0) {
		log_err("cannot detach: %s", strerror(errno));
		goto out;
	}

	d.page_bytes = wd_segment_page_size(d.instance);
	report_pages(d.cfg, d.page_bytes);
	d.base = event_base_new();
	if (!d.base)
		goto out;
	d.pool = pool_new(d.base, d.cfg->workers);
	fill_remote_set(d.cfg->remote_concurrency, d.cfg->remote_chunk_bytes,
			d.cfg->remote_gap_bytes);
	/* Page-cache drops of what fills read run on their own low-priority thread (synchronous
	 * on the workers if it cannot start). */
	if (wd_pagedrop_start() < 0)
		log_warn("cannot start the page-cache drop thread; fills drop pages as they go");
	/* A daemon killed mid-way: what it re-adopts is checked for pages that are gone (state.c's
	 * marker says whether the last stop was clean); verify_adopted checks every digest. */
	was_clean = state_was_clean(d.cfg->state_dir, d.instance);
	if (!was_clean && !d.cfg->verify_adopted)
		log_info("the last run of instance %s did not stop cleanly: every re-adopted weight "
			 "is checked for pages that are gone", d.instance);
	{
		struct cache_params cp = {
			.budget = daemon_effective_budget(d.cfg),
			.segment_max = d.cfg->segment_max_bytes,
			.max_idle_weights = d.cfg->max_idle_weights,
			.max_idle_segments = d.cfg->max_idle_segments,
			.verify_adopted = d.cfg->verify_adopted,
			.check_adopted_holes = !was_clean,
			.digest = d.cfg->digest,
			.max_temp = d.cfg->max_temp_bytes,
			.state_dir = d.cfg->state_dir,
			.instance = d.instance,
			.page_bytes = d.page_bytes,
			.pool = d.pool,
			.stats = &d.stats,
		};
		d.cache = d.pool ? cache_new(&cp) : NULL;
	}
	d.catalog = catalog_new(d.cfg, &lim);
	netcheck_warn(d.cfg);
	d.reload = reload_new(&d, request_query_notify, on_reloaded);
	d.keymemo = keymemo_new(KEYMEMO_MAX_ENTRIES);
	if (!d.pool || !d.cache || !d.catalog || !d.reload || !d.keymemo) {
		log_err("out of memory at start-up");
		goto out;
	}
	/* Every name under our prefix is from a previous run of this instance: re-adopt what the
	 * state index vouches for, unlink the rest. */
	if (state_init(d.cfg->state_dir, d.instance, &err) < 0) {
		log_warn("%s; restarts will rebuild weights", err.message);
		d.cfg->state_dir[0] = '\0';
	}
	d.kept = &kept;
	adopted = state_recover_keep(d.cfg->state_dir, d.instance, adopt_one, &d, &purged, &kept);
	state_mark_clean(d.cfg->state_dir, d.instance, false);
	if (adopted > 0 || purged > 0)
		log_notice("re-adopted %d weights, removed %d stale segments under %s/%s.*",
			   adopted, purged, wd_segment_dir(), d.instance);
	if (cache_locked_weights(d.cache))
		log_notice("%llu re-adopted weights (%llu bytes) are mapped by processes from before "
			   "the restart: they are kept, counted as held, until those let go",
			   (unsigned long long)cache_locked_weights(d.cache),
			   (unsigned long long)cache_locked_bytes(d.cache));
	if (!wd_segment_dir_private()) {
		d.shmscan = shmscan_new(d.instance);
		shmscan_look_now(d.shmscan); /* capped like every look; logged */
		d.stats.foreign_segments = shmscan_count(d.shmscan, NULL);
	}
	cache_trim(d.cache);
	if (get_listeners(d.cfg, &lfd, &admin_fd, &err) < 0) {
		log_err("%s", err.message);
		goto out;
	}
	d.socket_activated = socket_activated;
	d.server = server_new(&d, lfd);
	if (!d.server || (admin_fd >= 0 && server_listen_admin(d.server, admin_fd) < 0)) {
		if (admin_fd >= 0 && !d.server)
			close(admin_fd);
		goto out;
	}
	metrics = metrics_new(&d, &err);
	if (!metrics && d.cfg->metrics_listen && d.cfg->metrics_listen[0]) {
		log_err("%s", err.message);
		goto out;
	}

	ev_hup = evsignal_new(d.base, SIGHUP, on_signal, &d);
	ev_term = evsignal_new(d.base, SIGTERM, on_signal, &d);
	ev_int = evsignal_new(d.base, SIGINT, on_signal, &d);
	if (!ev_hup || !ev_term || !ev_int || evsignal_add(ev_hup, NULL) ||
	    evsignal_add(ev_term, NULL) || evsignal_add(ev_int, NULL))
		goto out;
	/* Weights kept for processes that map them are looked at again every second. */
	ev_locks = event_new(d.base, -1, EV_PERSIST, on_locks, &d);
	if (!ev_locks || event_add(ev_locks, &(struct timeval){ 1, 0 }))
		goto out;
	if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec) {
		struct timeval tv = { (time_t)(wd_usec / 2000000), (suseconds_t)(wd_usec / 2 % 1000000) };
		ev_wd = event_new(d.base, -1, EV_PERSIST, on_watchdog, NULL);
		if (ev_wd)
			event_add(ev_wd, &tv);
	}
	log_notice("weightd %s serving %zu checkpoints on %s (instance %s, budget %llu bytes, "
		   "%u workers)",
		   WD_VERSION, catalog_count(d.catalog),
		   served_socket(lfd, served, sizeof(served), d.cfg->socket_path), d.instance,
		   (unsigned long long)cache_budget(d.cache), pool_threads(d.pool));
	d.watch = watch_new(&d, on_watch_fire);
	watch_sync(d.watch);
	d.admit = admit_new(d.base, on_admitted, &d, d.cfg->admit_retry_max_ms);
	if (!d.admit) {
		log_err("out of memory at start-up");
		goto out;
	}
	admit_start(d.admit, d.catalog);
	daemon_notify_ready(&d);
	daemon_readiness(&ready_fd);
	/* Clients are served while preloads materialize: they only compete for the same workers. */
	preload_sync(&d);
	event_base_dispatch(d.base);
	rc = 0;
out:
	d.stopping = true; /* work finishing during shutdown must not touch the freed server */
	metrics_free(metrics);
	if (d.pool)
		pool_cancel(d.pool);
	if (d.server)
		server_free(d.server);
	else if (lfd >= 0)
		close(lfd);
	if (!pool_free(d.pool, SHUTDOWN_GRACE_MS)) {
		/* Workers still fill segments from the catalog and cache: exit under them, running
		 * no exit handlers (nothing they use may be torn down). Their segments have no state
		 * record, so the next start removes them. */
		if (d.cfg && d.cfg->socket_path && lfd >= 0 && !socket_activated)
			unlink(d.cfg->socket_path);
		if (admin_bound)
			unlink(d.cfg->admin_socket);
		fflush(NULL);
		_exit(rc);
	}
	wd_pagedrop_stop(); /* the drops still queued, while their sources are open */
	reload_free(d.reload);
	watch_free(d.watch);
	shmscan_free(d.shmscan);
	state_kept_free(&kept);
	admit_free(d.admit); /* before the catalog its threads read */
	if (d.cache)
		preload_free(&d);
	/* With a state index the segments outlive us and the next start re-adopts them. */
	cache_free(d.cache, !(d.cfg && d.cfg->state_dir && d.cfg->state_dir[0]));
	if (d.cache && rc == 0)
		state_mark_clean(d.cfg->state_dir, d.instance, true);
	catalog_free(d.catalog);
	keymemo_free(d.keymemo);
	if (ev_hup)
		event_free(ev_hup);
	if (ev_term)
		event_free(ev_term);
	if (ev_int)
		event_free(ev_int);
	if (ev_wd)
		event_free(ev_wd);
	if (ev_locks)
		event_free(ev_locks);
	if (d.base)
		event_base_free(d.base);
	if (d.cfg && d.cfg->socket_path && lfd >= 0 && !socket_activated)
		unlink(d.cfg->socket_path);
	if (admin_bound)
		unlink(d.cfg->admin_socket);
	config_free(d.cfg);
	return rc;
}
