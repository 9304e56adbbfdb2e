/* cmd_admin.c - weightctl reload, evict and purge: what changes the daemon's state. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "segment.h"
#include "state.h"
#include "weightctl.h"

int cmd_reload(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	weightd_error err;

	if (weightd_reload(c, &err) < 0)
		return fail_err(&err);
	if (o->json)
		return print_json(json_pack("{s:b}", "reloaded", 1));
	puts("weightd reloaded its configuration");
	return 0;
}

int cmd_evict(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	uint64_t n = 0, bytes = 0;
	weightd_error err;
	char *b;

	if (weightd_evict(c, &n, &bytes, &err) < 0)
		return fail_err(&err);
	if (o->json)
		return print_json(json_pack("{s:I, s:I}", "weights", (json_int_t)n, "bytes",
					    (json_int_t)bytes));
	b = fmt_bytes(bytes);
	printf("evicted %" PRIu64 " weight%s (%s)\n", n, n == 1 ? "" : "s", b);
	free(b);
	return 0;
}

/*
 * Does something listen on `path`? 1 yes, 0 no, -1 cannot tell. Read from /proc/net/unix rather
 * than by connecting: under socket activation a connection would start the very daemon purge must
 * not race with (systemd's listener counts as "running": stop weightd.socket too). Falls back to a
 * connection attempt where /proc is not there.
 */
static int socket_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	FILE *f = fopen("/proc/net/unix", "r");
	char line[4608];
	int fd, r;

	if (f) {
		r = 0;
		/* Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening */
		while (fgets(line, sizeof(line), f)) {
			unsigned long flags;
			char sock_path[4096];
			line[strcspn(line, "\n")] = '\0';
			if (sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %4095s", &flags, sock_path) == 2 &&
			    (flags & 0x10000) && strcmp(sock_path, path) == 0) {
				r = 1;
				break;
			}
		}
		fclose(f);
		return r;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (r == 0)
		r = 1;
	else
		r = errno == ENOENT || errno == ECONNREFUSED ? 0 : -1;
	close(fd);
	return r;
}

/*
 * weightctl purge --config FILE | --prefix P [--state-dir D]: with the daemon stopped, unlink
 * every segment under the instance's prefix and remove its state records, so nothing of the
 * instance is left in /dev/shm. A process still mapping a weight keeps its memory until it
 * unmaps. Refuses while something answers on the instance's socket (the one in the config, or
 * --socket / $WEIGHTD_SOCKET / the default): a running daemon would lose track of its segments.
 */
int cmd_purge(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	int argc = args->argc;
	char **argv = args->argv;
	const char *config = NULL, *prefix = NULL, *state_dir = NULL, *sock;
	struct config *cfg = NULL;
	struct wd_error err;
	int segments, records, rc = EXIT_ERR, live;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			config = argv[++i];
		else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc)
			prefix = argv[++i];
		else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
			state_dir = argv[++i];
		else
			return usage_error("purge: unknown argument or missing value: %s", argv[i]);
	}
	if (!config == !prefix || (config && state_dir))
		return usage_error("purge takes --config FILE, or --prefix P [--state-dir D]");
	sock = o->socket ? o->socket : getenv("WEIGHTD_SOCKET");
	if (!sock || !sock[0])
		sock = WEIGHTD_DEFAULT_SOCKET;
	if (config) {
		wd_error_clear(&err);
		if (config_load(config, &cfg, &err) < 0)
			return fail("%s", err.msg);
		prefix = cfg->shm_prefix;
		state_dir = cfg->state_dir;
		if (!o->socket)
			sock = cfg->socket_path;
	}
	if (!wd_segment_prefix_valid(prefix)) {
		rc = usage_error("purge: \"%s\" is not a shared-memory prefix (1 to 64 of A-Z a-z "
				 "0-9 _ . -, not starting with .)", prefix);
		goto out;
	}
	live = socket_answers(sock);
	if (live != 0) {
		fail(live > 0 ? "something listens on %s (weightd, or systemd's weightd.socket): stop "
				"both before purging (a running daemon would lose track of its segments)"
			      : "cannot tell whether weightd is running on %s; not purging", sock);
		goto out;
	}
	segments = wd_segment_purge(prefix);
	if (segments < 0) {
		fail("cannot remove the segments /dev/shm/%s.*: %s", prefix, wd_code_name(-segments));
		goto out;
	}
	records = state_purge(state_dir ? state_dir : "", prefix);
	if (o->json) {
		rc = print_json(json_pack("{s:s, s:s, s:i, s:i}", "prefix", prefix, "state_dir",
					  state_dir ? state_dir : "", "segments", segments,
					  "state_records", records));
		goto out;
	}
	printf("removed %d segment%s under /dev/shm/%s.* and %d state record%s%s%s\n", segments,
	       segments == 1 ? "" : "s", prefix, records, records == 1 ? "" : "s",
	       state_dir && state_dir[0] ? " in " : "", state_dir && state_dir[0] ? state_dir : "");
	rc = 0;
out:
	config_free(cfg);
	return rc;
}
