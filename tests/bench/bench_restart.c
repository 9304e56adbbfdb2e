/* SPDX-License-Identifier: Apache-2.0 */
/* bench_restart.c - serving a >= 1 GiB unit again after kill -9 + start, beside its first cold
 * materialization, in the same run. */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_restart [--size BYTES] [--runs N] [--dir DIR]
 *
 * Defaults: 1G, 3 runs, a temporary directory under /tmp (removed at the end, with every segment
 * and state record the runs made). weightd and wd-mkfixture are taken from $WD_WEIGHTD and
 * $WD_MKFIXTURE, else from the build tree beside this program.
 *
 * wd-mkfixture writes a checkpoint of BYTES (tensors of at most 256 MiB). Each run:
 *   cold     a daemon with an empty /dev/shm prefix and state index serves the whole checkpoint
 *            as one unit: time from submit to a validated unit (every weight mapped). The
 *            checkpoint was just written or read, so it is in the page cache: the cold side
 *            reads from memory, not disk, which only makes it faster (the ratio conservative).
 *   restart  kill -9, then time from starting weightd again to the same unit validated:
 *            daemon start, re-adoption from the state index, and serving, all included.
 * Printed: both times per run, checkpoint bytes read by each (status bytes_read and the unit's
 * bytes_read), whether the restart served the same segments (inode) with the same digests, and
 * the medians with their ratio beside the targets (>= 20x, 0 bytes read).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "harness.h"
#include "weightd/client.h"

#define MAX_RUNS 32
#define MAX_TENSORS 4096

struct bench {
	struct harness h; /* the daemon, its temp dir, socket and shm prefix */
	bool ready;	  /* h was set up (teardown cleans it) */
	char ckpt[PATH_MAX + 32];
	char weightd[PATH_MAX];
};

/* Start weightd and wait for READY=1 (timed by the caller: the harness returns at once). */
static int start(struct bench *b)
{
	const struct harness_opts o = { .file_log_level = true, .no_settle = true };

	return harness_start_opts(&b->h, &o);
}

/* Stop it: SIGTERM and wait, or SIGKILL (a crash: no clean shutdown). */
static void stop(struct bench *b, int sig)
{
	if (sig == SIGKILL)
		harness_kill(&b->h);
	else
		harness_stop(&b->h);
}

struct served {
	double seconds;
	uint64_t unit_read;        /* the unit's bytes_read */
	uint64_t status_read;      /* status bytes_read after it */
	uint64_t readoptions;
	ino_t ino[MAX_TENSORS];
	uint8_t digest[MAX_TENSORS][WEIGHTD_DIGEST_LEN];
};

/* Connect, bind every tensor of "big" as one unit, validate (maps every weight); record. */
static int serve(const struct bench *b, const weightd_description *d, double t0, struct served *s)
{
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_status *st = NULL;
	weightd_error err;
	int r;

	r = weightd_connect(b->h.sock, "bench_restart", &c, &err);
	if (r == 0)
		r = bench_unit_described(c, "big", d, &u, &err);
	s->seconds = bench_now() - t0;
	if (r >= 0)
		r = weightd_status_get(c, &st, &err);
	if (r < 0) {
		fprintf(stderr, "bench_restart: %s\n", err.message);
		weightd_unit_free(u);
		weightd_close(c);
		return -1;
	}
	s->unit_read = weightd_unit_bytes_read(u);
	s->status_read = st->bytes_read;
	s->readoptions = st->readoptions;
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_weight *w = weightd_unit_weight(u, d->tensors[i].name);
		struct stat sb;
		fstat(weightd_weight_fd(w), &sb);
		s->ino[i] = sb.st_ino;
		memcpy(s->digest[i], weightd_weight_digest(w), WEIGHTD_DIGEST_LEN);
	}
	weightd_status_free(st);
	weightd_unit_free(u);
	weightd_close(c);
	return 0;
}

static int setup(struct bench *b, const char *base, unsigned long long size)
{
	char mk[PATH_MAX], cmd[3 * PATH_MAX], extra[128], section[PATH_MAX + 64];

	bench_find_tool("WD_WEIGHTD", "../../daemon/weightd", b->weightd, sizeof(b->weightd));
	bench_find_tool("WD_MKFIXTURE", "../wd-mkfixture", mk, sizeof(mk));
	setenv("WD_WEIGHTD", b->weightd, 1);
	if (harness_init_in(&b->h, base) < 0) {
		fprintf(stderr, "bench_restart: a temp dir in %s: %s\n", base, strerror(errno));
		return -1;
	}
	b->ready = true;
	harness_path(&b->h, "big.safetensors", b->ckpt, sizeof(b->ckpt));
	/* budget: the unit and some room, whatever the default (half of /dev/shm) would be;
	 * workers: the daemon's default, not the harness's */
	snprintf(extra, sizeof(extra), "budget = %lluM\nlog_level = notice\nworkers = 0\n",
		 (size / 2 * 3 >> 20) + 64);
	snprintf(section, sizeof(section), "[checkpoint:big]\npath = %s\n", b->ckpt);
	if (harness_write_config(&b->h, extra, section) < 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "'%s' big '%s' %llu", mk, b->ckpt, size);
	printf("writing a %llu-byte checkpoint with wd-mkfixture big ...\n", size);
	fflush(stdout);
	return system(cmd) == 0 ? 0 : -1;
}

static void teardown(struct bench *b)
{
	if (!b->ready)
		return;
	stop(b, SIGKILL);
	harness_make_cold(&b->h);
	if (getenv("WD_KEEP_BENCH_DIR"))
		setenv("WD_KEEP_TEST_DIR", "1", 1);
	harness_cleanup(&b->h);
}

int main(int argc, char **argv)
{
	static struct served cold[MAX_RUNS], warm[MAX_RUNS];
	struct bench b = { .ready = false };
	unsigned long long size = 1ull << 30;
	int runs = 3, rc = 1;
	const char *base = "/tmp";
	double tc[MAX_RUNS], tw[MAX_RUNS], mc, mw;
	uint64_t worst_read = 0;
	bool same = true;
	weightd_description *d = NULL;
	weightd_client *c = NULL;
	weightd_error err;
	double la[3] = { 0, 0, 0 };

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--size") == 0 && i + 1 < argc &&
		    bench_parse_size(argv[i + 1], &size) == 0)
			i++;
		else if (bench_arg_runs(argc, argv, &i, MAX_RUNS, &runs))
			continue;
		else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
			base = argv[++i];
		else {
			fprintf(stderr, "usage: bench_restart [--size BYTES] [--runs N<=%d] [--dir DIR]\n",
				MAX_RUNS);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (setup(&b, base, size) < 0)
		goto out;
	if (start(&b) < 0)
		goto out;
	if (weightd_connect(b.h.sock, "bench_restart", &c, &err) < 0 ||
	    weightd_describe(c, "big", &d, &err) < 0) {
		fprintf(stderr, "bench_restart: %s\n", err.message);
		goto out;
	}
	weightd_close(c);
	c = NULL;
	stop(&b, SIGTERM);
	if (d->n_tensors > MAX_TENSORS)
		goto out;
	printf("unit: %zu tensors, %llu bytes; weightd %s\n\n", d->n_tensors,
	       (unsigned long long)d->source.bytes, b.weightd);
	printf("%4s  %12s %14s   %12s %14s %10s  %s\n", "run", "cold (s)", "cold read", "restart (s)",
	       "restart read", "readopted", "same segments+digests");
	for (int r = 0; r < runs; r++) {
		bool run_same = true;

		harness_make_cold(&b.h);
		if (start(&b) < 0 || serve(&b, d, bench_now(), &cold[r]) < 0)
			goto out;
		stop(&b, SIGKILL); /* crash: no clean shutdown */
		{
			double t0 = bench_now();
			if (start(&b) < 0 || serve(&b, d, t0, &warm[r]) < 0)
				goto out;
		}
		stop(&b, SIGTERM);
		for (size_t i = 0; i < d->n_tensors; i++)
			run_same &= cold[r].ino[i] == warm[r].ino[i] &&
				    memcmp(cold[r].digest[i], warm[r].digest[i], WEIGHTD_DIGEST_LEN) == 0;
		same &= run_same;
		tc[r] = cold[r].seconds;
		tw[r] = warm[r].seconds;
		if (warm[r].status_read > worst_read)
			worst_read = warm[r].status_read;
		if (warm[r].unit_read > worst_read)
			worst_read = warm[r].unit_read;
		printf("%4d  %12.3f %14llu   %12.4f %14llu %10llu  %s\n", r + 1, tc[r],
		       (unsigned long long)cold[r].unit_read, tw[r],
		       (unsigned long long)warm[r].unit_read,
		       (unsigned long long)warm[r].readoptions, run_same ? "yes" : "NO");
		fflush(stdout);
	}
	mc = bench_median(tc, runs);
	mw = bench_median(tw, runs);
	if (getloadavg(la, 3) < 0)
		la[0] = -1;
	printf("\nmedian of %d: cold %.3f s (%.2f GB/s), restart %.4f s -> %.1fx faster "
	       "(target >= 20x); checkpoint bytes read on restart: %llu (target 0); same segments "
	       "and digests: %s\nload average %.2f (the machine may be shared)\n",
	       runs, mc, (double)d->source.bytes / mc / 1e9, mw, mc / mw,
	       (unsigned long long)worst_read, same ? "yes" : "NO", la[0]);
	rc = mc / mw >= 20 && worst_read == 0 && same ? 0 : 1;
out:
	weightd_close(c);
	weightd_description_free(d);
	teardown(&b);
	return rc;
}
