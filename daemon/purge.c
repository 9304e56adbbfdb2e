/* SPDX-License-Identifier: Apache-2.0 */
/* purge.c - weightd --purge: remove every segment and state record of a stopped instance. */
#include "purge.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "bytes.h"
#include "config.h"
#include "segment.h"
#include "state.h"

/* Where weightd listens when neither --config nor --socket says (config.c's default). */
#define PURGE_DEFAULT_SOCKET "/run/weightd/weightd.sock"

static const char purge_usage[] =
	"usage: weightd --purge --config FILE [--socket PATH] [--force] [--json]\n"
	"       weightd --purge --prefix P [--state-dir D] [--segment-dir D] [--socket PATH] [--force]\n"
	"                       [--json]\n"
	"  with weightd stopped (weightd.service and weightd.socket), remove every shared-memory\n"
	"  segment of the instance (in /dev/shm, or its segment_dir) and its state records;\n"
	"  refused while processes map weights of the instance, unless --force (which only removes\n"
	"  names: what those processes map stays intact until they unmap it)\n";

static int usage_error(const char *what)
{
	fprintf(stderr, "weightd: %s\n%s", what, purge_usage);
	return 2;
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
 * Use `dir` (NULL or "": /dev/shm) for the segments. Run by root on a segment_dir of weightd's
 * user (as the package's removal does), the purge acts as that user until its segments are gone
 * (the caller returns to root with seteuid(getuid())), so the directory passes the same checks
 * as for the daemon and only what that user could remove is removed.
 */
static int segment_dir_as_owner(const char *dir, weightd_error *err)
{
	struct stat st;

	if (dir && dir[0] && geteuid() == 0 && stat(dir, &st) == 0 && st.st_uid != 0 &&
	    (setegid(st.st_gid) < 0 || seteuid(st.st_uid) < 0))
		return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				    "cannot act as uid %u, the owner of segment_dir %s: %s",
				    (unsigned)st.st_uid, dir, strerror(errno));
	return wd_segment_set_dir(dir, err);
}

/*
 * With the daemon stopped, unlink every segment under the instance's prefix and remove its state
 * records, so nothing of the instance is left in /dev/shm. A process still mapping a weight keeps
 * its memory until it unmaps. Refuses while something listens on the instance's socket (the one
 * in the config, or --socket, or the default): a running daemon would lose track of its segments.
 */
int purge_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "purge", no_argument, NULL, 'P' },
		{ "config", required_argument, NULL, 'c' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "segment-dir", required_argument, NULL, 'g' },
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *config = NULL, *prefix = NULL, *state_dir = NULL, *sock = NULL, *seg_dir = NULL;
	struct config *cfg = NULL;
	weightd_error err;
	bool json = false, force = false;
	uint64_t locked_segs = 0, locked_bytes = 0;
	int opt, segments, records, rc = 1, live;

	optind = 0;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'P': break;
		case 'c': config = optarg; break;
		case 'p': prefix = optarg; break;
		case 'd': state_dir = optarg; break;
		case 'g': seg_dir = optarg; break;
		case 's': sock = optarg; break;
		case 'j': json = true; break;
		case 'f': force = true; break;
		case 'h': fputs(purge_usage, stdout); return 0;
		default:
			fprintf(stderr, "weightd: --purge: unknown option or missing value: %s\n%s",
				argv[optind - 1], purge_usage);
			return 2;
		}
	}
	if (optind != argc)
		return usage_error("--purge takes no arguments besides its options");
	if (!config == !prefix || (config && (state_dir || seg_dir)))
		return usage_error("--purge takes --config FILE, or --prefix P [--state-dir D] "
				   "[--segment-dir D]");
	if (config) {
		wd_error_clear(&err);
		if (config_load(config, &cfg, &err) < 0) {
			fprintf(stderr, "weightd: %s\n", err.message);
			return 1;
		}
		prefix = cfg->shm_prefix;
		state_dir = cfg->state_dir;
		seg_dir = cfg->segment_dir;
		if (!sock)
			sock = cfg->socket_path;
	}
	if (!sock || !sock[0])
		sock = PURGE_DEFAULT_SOCKET;
	if (!wd_segment_prefix_valid(prefix)) {
		fprintf(stderr, "weightd: --purge: \"%s\" is not a shared-memory prefix (1 to 64 of "
			"A-Z a-z 0-9 _ . -, not starting with .)\n%s", prefix, purge_usage);
		rc = 2;
		goto out;
	}
	wd_error_clear(&err);
	if (segment_dir_as_owner(seg_dir, &err) < 0) {
		fprintf(stderr, "weightd: --purge: %s\n", err.message);
		goto out;
	}
	live = socket_answers(sock);
	if (live != 0) {
		if (live > 0)
			fprintf(stderr, "weightd: something listens on %s (weightd, or systemd's "
				"weightd.socket): stop both before purging (a running daemon would "
				"lose track of its segments)\n", sock);
		else
			fprintf(stderr, "weightd: cannot tell whether weightd is running on %s; "
				"not purging\n", sock);
		goto out;
	}
	/* Processes that map weights of the instance hold kernel locks on them (holdlock.h): the
	 * next weightd would re-adopt those segments and keep them for them, so a purge waits for
	 * them, unless forced. Even forced it only unlinks names, which changes no mapped byte. */
	if (wd_segment_locked(prefix, &locked_segs, &locked_bytes) == 0 && locked_segs && !force) {
		char t[WD_BYTES_TEXT];

		fprintf(stderr, "weightd: --purge: processes still map %s in %llu segment%s of instance "
			"%s (%s/%s.*); stop them first, or purge with --force (they keep what they map, "
			"but its memory is then no longer counted by any weightd)\n",
			wd_bytes_text(t, locked_bytes), (unsigned long long)locked_segs,
			locked_segs == 1 ? "" : "s", prefix, wd_segment_dir(), prefix);
		if (geteuid() != getuid() && (seteuid(getuid()) < 0 || setegid(getgid()) < 0))
			fprintf(stderr, "weightd: --purge: cannot become uid %u again: %s\n",
				(unsigned)getuid(), strerror(errno));
		goto out;
	}
	segments = wd_segment_purge(prefix);
	if (geteuid() != getuid() && (seteuid(getuid()) < 0 || setegid(getgid()) < 0)) {
		fprintf(stderr, "weightd: --purge: cannot become uid %u again: %s\n",
			(unsigned)getuid(), strerror(errno));
		goto out;
	}
	if (segments < 0) {
		fprintf(stderr, "weightd: cannot remove the segments %s/%s.*: %s\n",
			wd_segment_dir(), prefix, wd_code_name(-segments));
		goto out;
	}
	records = state_purge(state_dir ? state_dir : "", prefix);
	if (json) {
		json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I}", "prefix", prefix, "state_dir",
				      state_dir ? state_dir : "", "segments", segments,
				      "state_records", records, "segments_mapped",
				      (json_int_t)locked_segs, "bytes_mapped", (json_int_t)locked_bytes);

		if (!j || json_dumpf(j, stdout, JSON_INDENT(2)) < 0) {
			json_decref(j);
			fprintf(stderr, "weightd: cannot write JSON output\n");
			goto out;
		}
		json_decref(j);
		fputc('\n', stdout);
	} else {
		printf("removed %d segment%s under %s/%s.* and %d state record%s%s%s\n", segments,
		       segments == 1 ? "" : "s", wd_segment_dir(), prefix, records,
		       records == 1 ? "" : "s", state_dir && state_dir[0] ? " in " : "",
		       state_dir && state_dir[0] ? state_dir : "");
		if (locked_segs) {
			char t[WD_BYTES_TEXT];

			printf("(forced: %llu of them still mapped by processes, %s, which they keep "
			       "until they unmap it)\n", (unsigned long long)locked_segs,
			       wd_bytes_text(t, locked_bytes));
		}
	}
	rc = fflush(stdout) == 0 ? 0 : 1;
	if (rc)
		fprintf(stderr, "weightd: cannot write output: %s\n", strerror(errno));
out:
	config_free(cfg);
	return rc;
}
