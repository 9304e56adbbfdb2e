/* SPDX-License-Identifier: Apache-2.0 */
/* bench_huge.c - segments on 2 MiB pages against 4 KiB pages: a new process binding a large unit
 * and touching every page, beside the same on /dev/shm and beside reading the file into private
 * memory; and a cold fill into a huge-page segment_dir beside a plain copy into the same tmpfs. */

/*
 * Usage (from a build directory, as root: it mounts a tmpfs; a Release build measures what users
 * get):
 *
 *     tests/bench/bench_huge [--size BYTES] [--runs R]
 *
 * Defaults: 1 GiB (eight U8 tensors of 128 MiB), 7 runs of each side. Two private weightds
 * (tests/common/harness.c) serve the same checkpoint: one keeps its segments in /dev/shm
 * (4 KiB pages here), the other in a segment_dir on a tmpfs this program mounts with
 * huge=within_size in its temp dir (unmounted at the end).
 *
 * First touch, each run a new process (its page tables start empty, as an engine's do), the
 * sides alternating, timed from validate to every page read once:
 *
 *   huge     the unit from the segment_dir daemon: validate + bind, one read per 4 KiB
 *   4k       the same from the /dev/shm daemon (reference)
 *   private  the checkpoint file (warm in the page cache) read with pread into malloc'd memory,
 *            then one read per page (reference: what a process without weightd does)
 *
 * Printed: the medians, each side's rate, and 4k / huge and private / huge (targets: at least
 * 8x and 20x); and the median page faults each side took in that span (getrusage minflt), with
 * the bytes one fault mapped: what the ratios depend on. A huge-page fault maps 2 MiB; a read
 * fault on a 4 KiB shmem mapping also maps the neighbouring pages already in the page cache
 * (the kernel's fault-around, 64 KiB by default), so the 4k side takes 1/16 of one fault per
 * page, and 4k / huge is bounded by the cost of those faults, not by 512x fewer of them.
 *
 * Cold fill: per run, the whole unit materialized (submit to finish) by the huge daemon, beside a
 * plain copy of the same bytes into a new file on the same tmpfs, sides alternating. The copy
 * does the work the fill does: the same number of threads (one per worker), pread from the
 * page-cached file into a warm bounce buffer of the workers' size (512 KiB) and pwrite into one
 * sparse file (weightd's fill writes into a segment sized with ftruncate, no fallocate, no
 * mapping). Both start from the same page allocation state: each side first gives back its own
 * previous output (the fill evicts the daemon's segment, the copy removes its previous file; an
 * unmeasured copy first gives the first measured one a file to remove), so each writes into 1 GiB
 * of pages freed just before, as a cold fill after an eviction does. That matters on a virtual
 * machine with free page reporting (virtio-balloon): 2 MiB blocks left free for a few seconds
 * are handed back to the host, and the next write to each costs host faults, several times the
 * copy itself; a side on such pages beside one on just-freed pages measures the host, not
 * weightd. The checkpoint stays in the page cache throughout (drop_page_cache = false): with the
 * drop on, whichever side followed a fill first read the checkpoint from disk into the page cache
 * again, and a copy after a fill ran several times slower than one after a copy, so each side's
 * time depended on the side before it; the drop runs after a fill, outside its time, either way.
 * Printed: medians, each side's own rate, fill / copy speed (target: at least 0.98), and the same
 * for each side's fastest run (the least disturbed by the host and other load).
 * Exit status 1 when a run failed, 77 when not root.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "harness.h"
#include "itest.h"

#define MAX_RUNS  64
#define N_TENSORS 8
#define WORKERS	  2
#define COPY_BUF  (512u << 10) /* a worker's bounce buffer (WD_SCRATCH_BYTES) */

static struct harness H4, HH;
static char mnt[400], ckpt[512];
static uint64_t size, data_off;

/* Read the file once so the page cache holds it. */
static void warm_file(void)
{
	static uint8_t buf[COPY_BUF];
	int fd = open(ckpt, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

static double minflt(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_minflt : 0;
}

/* One byte of every 4 KiB of the unit's weights read; their sum, so no read is optimised away. */
static uint8_t read_pages(weightd_unit *u)
{
	uint8_t sum = 0;

	for (int i = 0; i < N_TENSORS; i++) {
		char name[16];
		const volatile uint8_t *p;
		uint64_t n;

		snprintf(name, sizeof(name), "t%d", i);
		p = weightd_unit_data(u, name);
		n = weightd_weight_nbytes(weightd_unit_weight(u, name));
		for (uint64_t at = 0; at < n; at += 4096)
			sum += p[at];
	}
	return sum;
}

/* In a new process: the seconds from validate (or from open, for the private side) to every
 * page read once, and the page faults taken meanwhile, written to fd. */
static void run_child(int side, int fd)
{
	volatile uint8_t sink = 0;
	double t = -1, t2 = 0, t0, r[3], f0;

	if (side < 2) {
		const struct harness *h = side == 0 ? &HH : &H4;
		weightd_client *c = NULL;
		weightd_unit *u = NULL;
		weightd_error err;

		if (weightd_connect(h->sock, "bench_huge", &c, &err) < 0 ||
		    it_unit_of_numbered(c, "p", "t", N_TENSORS, false, &u, &err) < 0) {
			fprintf(stderr, "bench_huge: %s\n", err.message);
			_exit(1);
		}
		f0 = minflt();
		t0 = bench_now();
		if (weightd_unit_validate(u, &err) < 0) {
			fprintf(stderr, "bench_huge: validate: %s\n", err.message);
			_exit(1);
		}
		weightd_unit_bind(u);
		sink += read_pages(u);
		t = bench_now() - t0;
		/* the same reads again, every page now mapped: what the reads cost without faults */
		t0 = bench_now();
		sink += read_pages(u);
		t2 = bench_now() - t0;
	} else {
		int f;
		uint8_t *mem;
		uint64_t got = 0;

		warm_file();
		f0 = minflt();
		t0 = bench_now();
		f = open(ckpt, O_RDONLY | O_CLOEXEC);
		mem = malloc(size);
		if (f < 0 || !mem)
			_exit(1);
		while (got < size) {
			ssize_t n = pread(f, mem + got, size - got, (off_t)(data_off + got));

			if (n <= 0)
				_exit(1);
			got += (uint64_t)n;
		}
		for (uint64_t at = 0; at < size; at += 4096)
			sink += mem[at];
		t = bench_now() - t0;
		close(f);
	}
	(void)sink;
	r[1] = minflt() - f0;
	r[0] = t;
	r[2] = t2;
	if (write(fd, r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(1);
	_exit(0);
}

static int run(int side, double *ret_t, double *ret_faults, double *ret_again)
{
	double r[3];

	if (bench_child_result(run_child, side, r, sizeof(r)) < 0)
		return -1;
	*ret_t = r[0];
	*ret_faults = r[1];
	*ret_again = r[2];
	return 0;
}

struct copier {
	pthread_t thread;
	int in, out;
	uint64_t off, len;
	uint8_t *buf;
	pthread_barrier_t *go;
};

static void *copier_main(void *arg)
{
	struct copier *c = arg;

	pthread_barrier_wait(c->go);
	for (uint64_t done = 0; done < c->len;) {
		size_t want = c->len - done < COPY_BUF ? (size_t)(c->len - done) : COPY_BUF;
		ssize_t n = pread(c->in, c->buf, want, (off_t)(data_off + c->off + done));

		if (n <= 0 || pwrite(c->out, c->buf, (size_t)n, (off_t)(c->off + done)) != n)
			return NULL;
		done += (uint64_t)n;
	}
	return NULL;
}

/* The plain copy: the tensors' bytes into a new file on the huge tmpfs, one thread per worker,
 * right after the previous copy's file was removed. The file stays until the next copy. */
static double plain_copy(void)
{
	struct copier c[WORKERS];
	pthread_barrier_t go;
	char dst[600];
	uint64_t part = (size / WORKERS + 4095) / 4096 * 4096;
	int in, out;
	double t0, t;

	snprintf(dst, sizeof(dst), "%s/plain-copy", mnt);
	unlink(dst); /* the previous copy's pages go back, as the fill's evict gives back its own */
	warm_file();
	in = open(ckpt, O_RDONLY | O_CLOEXEC);
	pthread_barrier_init(&go, NULL, WORKERS + 1);
	for (int i = 0; i < WORKERS; i++) {
		c[i].buf = mmap(NULL, COPY_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);
		memset(c[i].buf, 1, COPY_BUF); /* warm: faults are not the copy's */
		c[i].in = in;
		c[i].off = part * (uint64_t)i < size ? part * (uint64_t)i : size;
		c[i].len = size - c[i].off < part ? size - c[i].off : part;
		c[i].go = &go;
	}
	t0 = bench_now();
	out = open(dst, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (out < 0 || ftruncate(out, (off_t)size) < 0)
		return -1;
	for (int i = 0; i < WORKERS; i++) {
		c[i].out = out;
		pthread_create(&c[i].thread, NULL, copier_main, &c[i]);
	}
	pthread_barrier_wait(&go);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(c[i].thread, NULL);
	t = bench_now() - t0;
	close(out);
	close(in);
	for (int i = 0; i < WORKERS; i++)
		munmap(c[i].buf, COPY_BUF);
	pthread_barrier_destroy(&go);
	return t;
}

/* A cold fill of the whole unit in the huge daemon, everything evicted first. */
static double cold_fill(weightd_client *c)
{
	weightd_unit *u = NULL;
	weightd_error err;
	uint64_t nw, nb;
	double t0, t;

	if (weightd_evict(c, &nw, &nb, &err) < 0) {
		fprintf(stderr, "bench_huge: evict: %s\n", err.message);
		return -1;
	}
	warm_file();
	t0 = bench_now();
	if (it_unit_of_numbered(c, "p", "t", N_TENSORS, false, &u, &err) < 0) {
		fprintf(stderr, "bench_huge: fill: %s\n", err.message);
		return -1;
	}
	t = bench_now() - t0;
	weightd_unit_free(u);
	return t;
}

static int start(struct harness *h, const char *seg_dir)
{
	char extra[800], sec[700];

	snprintf(extra, sizeof(extra), "log_level = notice\nbudget = 0\nworkers = %d\n%s%s%s",
		 WORKERS, seg_dir ? "segment_dir = " : "", seg_dir ? seg_dir : "",
		 seg_dir ? "\n" : "");
	/* drop_page_cache off: see the header (cold fill) */
	snprintf(sec, sizeof(sec), "[checkpoint:p]\npath = %s\ndrop_page_cache = false\n", ckpt);
	return harness_write_config(h, extra, sec) < 0 || harness_start(h) < 0 ? -1 : 0;
}

static void line(const char *what, double *v, int runs, double *ret_med)
{
	*ret_med = bench_median(v, runs);
	printf("  %-34s %9.1f ms  (%6.2f GB/s)\n", what, *ret_med * 1e3,
	       (double)size / *ret_med / 1e9);
}

/* The median page faults of a first-touch side, the bytes each mapped and the time per fault. */
static void faults(const char *what, double *v, int runs, double med_t)
{
	double f = bench_median(v, runs);

	printf("  %-8s page faults %9.0f  (%7.1f KiB per fault, %6.2f us per fault)\n", what, f,
	       f > 0 ? (double)size / f / 1024 : 0, f > 0 ? med_t / f * 1e6 : 0);
}

int main(int argc, char **argv)
{
	static double th[MAX_RUNS], t4[MAX_RUNS], tp[MAX_RUNS], tf[MAX_RUNS], tc[MAX_RUNS];
	static double fh[MAX_RUNS], f4[MAX_RUNS], fp[MAX_RUNS];
	static double ah[MAX_RUNS], a4[MAX_RUNS], ap[MAX_RUNS], dh[MAX_RUNS], d4[MAX_RUNS];
	int runs = 7, rc = 1;
	char args[1024], seg[500];
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	double mh, m4, mp, mf, mc;

	size = 1ull << 30;
	if (!bench_args_size_runs(argc, argv, N_TENSORS * (2ull << 20), N_TENSORS * (2ull << 20),
				  MAX_RUNS, &size, &runs))
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "bench_huge: needs root to mount a huge-page tmpfs\n");
		return 77;
	}
#ifdef WD_BENCH_WEIGHTD
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
	setenv("WD_MKFIXTURE", WD_BENCH_MKFIXTURE, 0);
#endif
	unsetenv("WD_TEST_SEGMENT_TMPFS");
	if (harness_init(&H4) < 0 || harness_init(&HH) < 0) {
		fprintf(stderr, "bench_huge: cannot make a temp dir: %s\n", strerror(errno));
		return 1;
	}
	snprintf(mnt, sizeof(mnt), "%s/huge", HH.dir);
	snprintf(seg, sizeof(seg), "%s/seg", mnt);
	if (mkdir(mnt, 0700) < 0 ||
	    mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "huge=within_size,mode=0700") < 0 ||
	    mkdir(seg, 0700) < 0) {
		fprintf(stderr, "bench_huge: cannot mount a huge-page tmpfs on %s: %s\n", mnt,
			strerror(errno));
		mnt[0] = '\0';
		goto out;
	}
	harness_path(&H4, "p.safetensors", ckpt, sizeof(ckpt));
	snprintf(args, sizeof(args), "safetensors %s --seed 0", ckpt);
	for (int i = 0; i < N_TENSORS; i++)
		snprintf(args + strlen(args), sizeof(args) - strlen(args), " --tensor t%d:U8:%llu",
			 i, (unsigned long long)(size / N_TENSORS));
	if (harness_mkfixture(args) < 0 || start(&H4, NULL) < 0 || start(&HH, seg) < 0) {
		fprintf(stderr, "bench_huge: cannot set up the checkpoint and weightd\n");
		goto out;
	}
	{
		/* the data starts after the 8-byte length and the JSON header */
		int fd = open(ckpt, O_RDONLY);
		uint64_t hl = 0;

		if (fd < 0 || pread(fd, &hl, 8, 0) != 8)
			goto out;
		close(fd);
		data_off = 8 + hl;
	}
	for (int d = 0; d < 2; d++) {
		if (weightd_connect(d ? H4.sock : HH.sock, "bench_huge", &c, &err) < 0 ||
		    it_unit_of_numbered(c, "p", "t", N_TENSORS, false, &u, &err) < 0) {
			fprintf(stderr, "bench_huge: warming: %s\n", err.message);
			goto out;
		}
		weightd_unit_free(u); /* the weights stay cached */
		weightd_close(c);
		c = NULL;
	}
	printf("weightd %s; a %llu MiB unit, %d runs per side, alternating\n"
	       "huge: segment_dir %s (huge=within_size); 4k: /dev/shm\n\n",
	       harness_weightd(), (unsigned long long)(size >> 20), runs, seg);
	printf("a new process binds the unit and reads every page (validate..touched):\n");
	for (int i = 0; i < runs; i++) {
		int order[3] = { i % 3, (i + 1) % 3, (i + 2) % 3 };

		for (int k = 0; k < 3; k++) {
			double *dst = order[k] == 0 ? &th[i] : order[k] == 1 ? &t4[i] : &tp[i];
			double *flt = order[k] == 0 ? &fh[i] : order[k] == 1 ? &f4[i] : &fp[i];
			double *again = order[k] == 0 ? &ah[i] : order[k] == 1 ? &a4[i] : &ap[i];

			if (run(order[k], dst, flt, again) < 0) {
				fprintf(stderr, "bench_huge: run %d failed\n", i);
				goto out;
			}
		}
	}
	line("huge (segment_dir, 2 MiB pages)", th, runs, &mh);
	line("4k (/dev/shm, reference)", t4, runs, &m4);
	line("private (pread into malloc, ref.)", tp, runs, &mp);
	printf("  4k / huge      %6.1fx  (target >= 8x; 4k's own rate %.2f GB/s)\n", m4 / mh,
	       (double)size / m4 / 1e9);
	printf("  private / huge %6.1fx  (target >= 20x; private's own rate %.2f GB/s)\n", mp / mh,
	       (double)size / mp / 1e9);
	faults("huge", fh, runs, mh);
	faults("4k", f4, runs, m4);
	faults("private", fp, runs, mp);
	/* The first touch is the faults plus the reads themselves (a cache miss each), which no
	 * page size changes: the second read of the same pages, all mapped, is the reads alone. */
	for (int i = 0; i < runs; i++) {
		dh[i] = th[i] - ah[i];
		d4[i] = t4[i] - a4[i];
	}
	{
		double mah = bench_median(ah, runs), ma4 = bench_median(a4, runs);
		double mdh = bench_median(dh, runs), md4 = bench_median(d4, runs);

		printf("  the same reads again, pages mapped: huge %.1f ms, 4k %.1f ms\n", mah * 1e3,
		       ma4 * 1e3);
		printf("  time in faults (first touch - reads again): huge %.2f ms, 4k %.1f ms, "
		       "4k / huge %.0fx\n",
		       mdh * 1e3, md4 * 1e3, mdh > 0 ? md4 / mdh : 0);
	}
	printf("\n");

	printf("cold fill into the huge-page segment_dir (%d workers) beside a plain copy into the "
	       "same tmpfs (%d threads):\n",
	       WORKERS, WORKERS);
	if (weightd_connect(HH.sock, "bench_huge", &c, &err) < 0) {
		fprintf(stderr, "bench_huge: %s\n", err.message);
		goto out;
	}
	if (plain_copy() < 0) { /* unmeasured: the first measured copy has one to remove */
		fprintf(stderr, "bench_huge: cannot copy into %s\n", mnt);
		goto out;
	}
	for (int i = 0; i < runs; i++) {
		if (i % 2) {
			tc[i] = plain_copy();
			tf[i] = cold_fill(c);
		} else {
			tf[i] = cold_fill(c);
			tc[i] = plain_copy();
		}
		if (tf[i] < 0 || tc[i] < 0) {
			fprintf(stderr, "bench_huge: fill run %d failed\n", i);
			goto out;
		}
	}
	line("cold fill (submit..finish)", tf, runs, &mf);
	line("plain copy (reference)", tc, runs, &mc);
	printf("  fill / copy speed %.3f  (target >= 0.98; the copy's own rate %.2f GB/s)\n",
	       mc / mf, (double)size / mc / 1e9);
	{
		double bf = tf[0], bc = tc[0];

		for (int i = 1; i < runs; i++) {
			bf = tf[i] < bf ? tf[i] : bf;
			bc = tc[i] < bc ? tc[i] : bc;
		}
		printf("  fastest runs: fill %.1f ms (%.2f GB/s), copy %.1f ms (%.2f GB/s): %.3f of "
		       "copy speed\n",
		       bf * 1e3, (double)size / bf / 1e9, bc * 1e3, (double)size / bc / 1e9,
		       bc / bf);
	}
	rc = 0;
out:
	weightd_close(c);
	if (HH.pid > 0)
		harness_stop(&HH); /* before its segments' tmpfs goes */
	if (mnt[0]) {
		char dst[600];

		snprintf(dst, sizeof(dst), "%s/plain-copy", mnt);
		unlink(dst);
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
	}
	harness_cleanup(&HH);
	harness_cleanup(&H4);
	return rc;
}
