/* SPDX-License-Identifier: Apache-2.0 */
/* bench_materialize.c - weightd's materialization, second bind and casts, each beside a plain
 * reference measured in the same run. */

/*
 * A private weightd (tests/common/harness.c) serves a generated checkpoint of SIZE bytes
 * (wd-mkfixture big: 256 MiB tensors alternating F32 and BF16) that is read again, untimed,
 * before every measurement that reads it, so every one starts from the page cache (weightd drops
 * the file pages it copied, drop_page_cache). Every run interleaves the contenders, rotating their
 * order, and the tables show medians; the ratios are what to quote (the machine is shared).
 *
 * (a) cold materialization: a unit of every tensor, from submit until the reply with every fd
 *     (the daemon then holds nothing: its weights were evicted before), and a unit of a single
 *     weight of the same size (a second checkpoint of one tensor), beside plain copies of
 *     the same bytes into a new /dev/shm object: pread into a warm buffer + pwrite, on 1 thread
 *     and on as many threads as the daemon has workers, and the `cp` command.
 *     ratio = plain copy time / materialization time (target >= 0.95 against the faster copy,
 *     with the default digest, XXH3-128), taken per run from measurements made back to back,
 *     then the median over runs (the ratio of the separate medians is printed too).
 * (a2) the same while a spinner process the benchmark starts keeps one core busy (target >= 0.8
 *     against the faster plain copy measured under the same spinner).
 * (a3) the same with the daemon restarted with `digest = sha256`: ratios printed, no target.
 * (b) second bind: a new process connects, binds the already materialized unit (validate + bind)
 *     and reads one byte of every page, beside a new process that reads the same bytes from the
 *     file into its own memory. ratio = private read time / bind time (target >= 5).
 * (c) cast recipes: the BF16 tensors cast to F32 and the F32 tensors cast to BF16, each beside
 *     the same source tensors materialized unconverted. ratio = cast throughput / unconverted
 *     throughput, both in bytes materialized (written to shared memory) per second (target
 *     >= 0.7); the time ratio is shown too.
 *
 * Usage: bench_materialize [--size BYTES] [--tensor-bytes BYTES] [--runs N] [--workers N]
 *                          [--copy-buf BYTES] [--drop-page-cache yes|no]
 * BYTES takes K, M, G suffixes (powers of 1024). Defaults: 1G in tensors of 256M, 5 runs,
 * 2 workers, 4M, drop yes (the checkpoints' drop_page_cache key: with no, the file pages a fill
 * read stay cached, and the reads before each measurement find them there). With one tensor
 * (--tensor-bytes >= --size) there is no BF16 tensor, and (c) shows F32 -> BF16 only.
 * Paths of weightd and wd-mkfixture come from WD_WEIGHTD and WD_MKFIXTURE (defaults: the build
 * tree this was built in). Data lives in a temp dir under /tmp and segments under a private shm
 * prefix, removed at the end, on a failure and on SIGINT/SIGTERM.
 * Exit status: 0 every target met, 1 a target missed, 2 the benchmark could not run.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "clock.h"
#include "harness.h"
#include "weightd/client.h"

#define PAGE 4096u
#define MAX_TENSORS 256
#define MAX_RUNS 101

static struct harness H;
static bool harness_up;

static struct {
	uint64_t size;
	int runs;
	unsigned workers;
	size_t copy_buf;
	uint64_t tensor_bytes;
	bool keep_page_cache; /* --drop-page-cache no */
} opt = { 1ull << 30, 5, 2, 4u << 20, 256u << 20, false };

/* The checkpoint as the daemon describes it; "one" holds the same bytes as one tensor. */
static char ckpt_path[512], one_path[512];
static weightd_description *desc, *desc_one;
static uint64_t data_off, data_len;   /* the tensors' bytes: one contiguous range of the file */

/* --- small helpers ------------------------------------------------------------------------ */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "bench_materialize: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	if (harness_up) {
		harness_dump_log(&H);
		harness_cleanup(&H);
	}
	exit(2);
}

static double now(void)
{
	return (double)wd_clock_ns() * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of n values (sorts a copy). */
static double median(const double *v, int n)
{
	double s[MAX_RUNS];

	memcpy(s, v, sizeof(*v) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return -1;
	*ret = v;
	return 0;
}

/* A page-aligned buffer, faulted in now so no timed loop pays for that. */
static uint8_t *warm_buffer(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap of %zu bytes: %s", bytes, strerror(errno));
	memset(p, 1, bytes);
	return p;
}

/*
 * Read a checkpoint file into the page cache, untimed, before each measurement that reads it:
 * weightd drops the pages it read once they are in shared memory (drop_page_cache), so without
 * this a fill would be timed from the disk and a plain copy after it too.
 */
/* Whether every page of the file open on fd (size bytes) is in the page cache. */
static bool all_cached(int fd, uint64_t size)
{
	size_t pages = (size_t)((size + PAGE - 1) / PAGE), n = 0;
	unsigned char *vec = malloc(pages ? pages : 1);
	void *map = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0) : NULL;

	if (!vec || map == MAP_FAILED)
		die("cannot check the page cache: %s", strerror(errno));
	if (size && mincore(map, (size_t)size, vec) != 0)
		die("mincore: %s", strerror(errno));
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	if (size)
		munmap(map, (size_t)size);
	free(vec);
	return n == pages;
}

/*
 * Read the whole file into the page cache, and make sure it stays there: weightd drops what a
 * fill read on a low-priority thread shortly after the fill, which may land after this read
 * began. So: read, give a pending drop time to land, and read again until the file stays whole.
 */
static void warm_file(const char *path)
{
	static uint8_t *buf;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) != 0)
		die("open %s: %s", path, strerror(errno));
	if (!buf)
		buf = warm_buffer(4u << 20);
	for (int tries = 0; tries < 10; tries++) {
		for (off_t off = 0;;) {
			ssize_t n = pread(fd, buf, 4u << 20, off);
			if (n <= 0)
				break;
			off += n;
		}
		usleep(50000);
		if (all_cached(fd, (uint64_t)st.st_size))
			break;
	}
	close(fd);
}

static void pread_all(int fd, void *buf, size_t len, off_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("reading %s: %s", ckpt_path, n < 0 ? strerror(errno) : "unexpected end");
		p += n;
		off += n;
		len -= (size_t)n;
	}
}

static void pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("writing /dev/shm: %s", n < 0 ? strerror(errno) : "no progress");
		p += n;
		off += n;
		len -= (size_t)n;
	}
}

/* Sum one byte of every page: what a process pays to touch the memory it bound. */
static uint64_t touch_pages(const uint8_t *p, uint64_t len)
{
	uint64_t sum = 0;

	for (uint64_t i = 0; i < len; i += PAGE)
		sum += p[i];
	return sum;
}

/* On-CPU and run-queue wait nanoseconds of one task, from /proc/.../schedstat. */
static void schedstat_add(const char *path, double *cpu, double *wait)
{
	unsigned long long run = 0, queued = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	if (fscanf(f, "%llu %llu", &run, &queued) == 2) {
		*cpu += (double)run * 1e-9;
		*wait += (double)queued * 1e-9;
	}
	fclose(f);
}

/* Summed over every thread of the daemon (its threads live as long as it does). */
static void daemon_sched(double *cpu, double *wait)
{
	char path[128];
	DIR *d;
	struct dirent *e;

	*cpu = *wait = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)H.pid);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		char stat[400];
		if (e->d_name[0] == '.')
			continue;
		snprintf(stat, sizeof(stat), "/proc/%d/task/%s/schedstat", (int)H.pid, e->d_name);
		schedstat_add(stat, cpu, wait);
	}
	if (d)
		closedir(d);
}

/* CPU seconds and run-queue seconds a measurement used, beside its wall time. */
struct cost {
	double wall, cpu, wait;
};

/* --- the references ----------------------------------------------------------------------- */

struct copier {
	pthread_t thread;
	int shm;
	int file;
	uint8_t *buf;
	uint64_t off, len;    /* of the data range */
	pthread_barrier_t *go;
	double cpu, wait;
};

static void *copier_main(void *arg)
{
	struct copier *c = arg;

	double cpu0 = 0, wait0 = 0;

	pthread_barrier_wait(c->go);
	schedstat_add("/proc/thread-self/schedstat", &cpu0, &wait0);
	for (uint64_t done = 0; done < c->len;) {
		size_t n = (size_t)(c->len - done < opt.copy_buf ? c->len - done : opt.copy_buf);
		pread_all(c->file, c->buf, n, (off_t)(data_off + c->off + done));
		pwrite_all(c->shm, c->buf, n, (off_t)(c->off + done));
		done += n;
	}
	schedstat_add("/proc/thread-self/schedstat", &c->cpu, &c->wait);
	c->cpu -= cpu0;
	c->wait -= wait0;
	return NULL;
}

/*
 * Copy the tensors' bytes into a new shm object with `threads` threads, each with its own warm
 * buffer of opt.copy_buf bytes, pread + pwrite, each thread a contiguous part. Returns seconds
 * from creating the object until every byte is in it; the object is removed afterwards.
 */
static struct cost plain_copy(unsigned threads)
{
	struct cost k = { 0, 0, 0 };
	struct copier c[16];
	pthread_barrier_t go;
	char name[128];
	uint64_t part = (data_len / threads + PAGE - 1) / PAGE * PAGE;
	double t0;
	int shm, file;

	snprintf(name, sizeof(name), "/%s.plain", H.prefix);
	warm_file(ckpt_path);
	file = open(ckpt_path, O_RDONLY | O_CLOEXEC);
	if (file < 0)
		die("open %s: %s", ckpt_path, strerror(errno));
	pthread_barrier_init(&go, NULL, threads + 1);
	for (unsigned i = 0; i < threads; i++) {
		c[i].file = file;
		c[i].buf = warm_buffer(opt.copy_buf);
		c[i].off = part * i < data_len ? part * i : data_len;
		c[i].len = data_len - c[i].off < part ? data_len - c[i].off : part;
		c[i].go = &go;
		c[i].cpu = c[i].wait = 0;
	}
	t0 = now();
	shm = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (shm < 0)
		die("shm_open %s: %s", name, strerror(errno));
	for (unsigned i = 0; i < threads; i++) {
		c[i].shm = shm;
		if (pthread_create(&c[i].thread, NULL, copier_main, &c[i]))
			die("pthread_create failed");
	}
	pthread_barrier_wait(&go);
	for (unsigned i = 0; i < threads; i++)
		pthread_join(c[i].thread, NULL);
	k.wall = now() - t0;
	shm_unlink(name);
	close(shm);
	close(file);
	for (unsigned i = 0; i < threads; i++) {
		munmap(c[i].buf, opt.copy_buf);
		k.cpu += c[i].cpu;
		k.wait += c[i].wait;
	}
	pthread_barrier_destroy(&go);
	return k;
}

/* `cp FILE /dev/shm/...`: what an operator would do by hand (the whole file, header included). */
static struct cost cp_copy(void)
{
	struct cost k = { 0, 0, 0 };
	struct rusage ru;
	char dst[256];
	double t0;
	pid_t pid;
	int status;

	snprintf(dst, sizeof(dst), "/dev/shm/%s.cp", H.prefix);
	warm_file(ckpt_path);
	t0 = now();
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		execlp("cp", "cp", "--", ckpt_path, dst, (char *)NULL);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("cp %s %s failed", ckpt_path, dst);
	k.wall = now() - t0;
	k.cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
		(double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
	unlink(dst);
	return k;
}

/* --- weightd ------------------------------------------------------------------------------ */

static weightd_client *connect_daemon(const char *name)
{
	weightd_client *c = NULL;
	weightd_error err;

	if (weightd_connect(H.sock, name, &c, &err) < 0)
		die("connect: %s", err.message);
	return c;
}

/* every tensor; the BF16 ones; the F32 ones; the one tensor of checkpoint "one" */
enum kind { ALL, ODD, EVEN, ONE };

static bool wanted(enum kind k, size_t i)
{
	return k == ALL || k == ONE || (k == ODD) == (i % 2 == 1);
}

/*
 * Build and submit a unit of the tensors `k` selects, cast to `cast` when not NULL. Returns the
 * unit (finished: it holds every weight) and the seconds from submit to the reply; *ret_out
 * gets the bytes materialized and *ret_read the checkpoint bytes the daemon read for it.
 */
static weightd_unit *materialize(weightd_client *c, enum kind k, const char *cast, double *ret_t,
				 uint64_t *ret_out, uint64_t *ret_read)
{
	const weightd_description *d = k == ONE ? desc_one : desc;
	const char *ckpt = k == ONE ? "one" : "big";
	weightd_unit *u = NULL;
	weightd_error err;
	uint64_t out = 0;
	double t0;

	if (weightd_unit_new(c, &u, &err) < 0)
		die("unit: %s", err.message);
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		weightd_recipe *r = NULL;
		int src;

		if (!wanted(k, i))
			continue;
		if (weightd_unit_slot(u, t->name, NULL, NULL, 0, NULL, &err) < 0)
			die("slot %s: %s", t->name, err.message);
		if (!cast) {
			if (weightd_unit_set_tensor(u, t->name, ckpt, t->name, NULL, &err) < 0)
				die("set %s: %s", t->name, err.message);
			continue;
		}
		if (weightd_recipe_new(&r, &err) < 0 ||
		    (src = weightd_recipe_source(r, "big", t->name, NULL, &err)) < 0 ||
		    weightd_recipe_cast(r, src, cast, &err) < 0 ||
		    weightd_unit_set_recipe(u, t->name, r, &err) < 0)
			die("recipe for %s: %s", t->name, err.message);
		weightd_recipe_free(r);
	}
	t0 = now();
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_finish(u, &err) < 0)
		die("materializing: %s", err.message);
	*ret_t = now() - t0;
	for (size_t i = 0; i < weightd_unit_slot_count(u); i++)
		out += weightd_weight_nbytes(weightd_unit_weight(u, weightd_unit_slot_name(u, i)));
	*ret_out = out;
	*ret_read = weightd_unit_bytes_read(u);
	return u;
}

/* Release a unit and evict everything, so the next materialization is cold. */
static void drop_all(weightd_client *c, weightd_unit *u)
{
	weightd_error err;

	weightd_unit_free(u);
	if (weightd_evict(c, NULL, NULL, &err) < 0)
		die("evict: %s", err.message);
	if (harness_segments(&H) != 0)
		die("segments left after eviction");
}

/* Time the cold materialization of a unit, with the daemon's CPU and run-queue time; checks it
 * read exactly `expect_read` bytes. */
static struct cost cold(weightd_client *c, enum kind k, const char *cast, uint64_t expect_read,
			uint64_t *ret_out)
{
	struct cost x;
	double cpu0, wait0;
	uint64_t read;
	weightd_unit *u;

	warm_file(k == ONE ? one_path : ckpt_path);
	daemon_sched(&cpu0, &wait0);
	u = materialize(c, k, cast, &x.wall, ret_out, &read);
	daemon_sched(&x.cpu, &x.wait);
	x.cpu -= cpu0;
	x.wait -= wait0;
	if (read != expect_read)
		die("a cold materialization read %llu bytes, expected %llu",
		    (unsigned long long)read, (unsigned long long)expect_read);
	drop_all(c, u);
	return x;
}

/* One hash of the digest's algorithm over len bytes, canonical bytes out; from libxxhash and
 * OpenSSL directly. */
static void hash_bytes(bool sha256, const void *p, size_t len, uint8_t *out)
{
	if (sha256) {
		unsigned int n = 32;
		EVP_Digest(p, len, out, &n, EVP_sha256(), NULL);
	} else {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits(p, len));
		memcpy(out, c.digest, 16);
	}
}

/*
 * Every weight of `u` (of checkpoint d in file path) must carry the content digest of its
 * tensor's bytes, computed here from the file as documented (client.h): the plain hash up to
 * WEIGHTD_DIGEST_CHUNK bytes, else the hash of the chunks' hashes.
 */
static void check_digests(weightd_unit *u, const weightd_description *d, const char *path,
			  bool sha256)
{
	size_t dl = sha256 ? 32 : 16;
	uint8_t *buf = warm_buffer(WEIGHTD_DIGEST_CHUNK);
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		const weightd_weight *w = weightd_unit_weight(u, t->name);
		uint64_t nchunks = (t->nbytes + WEIGHTD_DIGEST_CHUNK - 1) / WEIGHTD_DIGEST_CHUNK;
		uint8_t *cat = malloc(nchunks * dl), want[32];

		if (!w || !cat || weightd_weight_digest_len(w) != dl ||
		    weightd_weight_digest_algorithm(w) !=
			    (sha256 ? WEIGHTD_DIGEST_SHA256 : WEIGHTD_DIGEST_XXH3_128))
			die("no weight or no %s digest for %s", sha256 ? "SHA-256" : "XXH3-128", t->name);
		for (uint64_t k = 0; k < nchunks; k++) {
			uint64_t off = k * WEIGHTD_DIGEST_CHUNK;
			size_t n = (size_t)(t->nbytes - off < WEIGHTD_DIGEST_CHUNK ? t->nbytes - off :
					    WEIGHTD_DIGEST_CHUNK);
			pread_all(fd, buf, n, (off_t)(t->offset + off));
			hash_bytes(sha256, buf, n, cat + k * dl);
		}
		if (nchunks == 1)
			memcpy(want, cat, dl);
		else
			hash_bytes(sha256, cat, nchunks * dl, want);
		free(cat);
		if (memcmp(want, weightd_weight_digest(w), dl) != 0)
			die("the daemon's digest of %s differs from the file's", t->name);
	}
	close(fd);
	munmap(buf, WEIGHTD_DIGEST_CHUNK);
}

/* A process that keeps one core busy until killed (lowest priority it can ask for is not
 * asked: it competes like any other busy program on the machine). */
static pid_t spinner_start(void)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		volatile uint64_t x = 0;
		for (;;)
			x++;
	}
	return pid;
}

static void spinner_stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* --- second process ----------------------------------------------------------------------- */

struct child_result {
	double t;
	uint64_t sum;
	uint64_t bytes_read;
	char error[256];
};

/* In a new process: connect, bind every tensor as one unit, touch every page. */
static void child_bind(struct child_result *res)
{
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	double t0 = now();

	if (weightd_connect(H.sock, "bench-second", &c, &err) < 0 ||
	    weightd_unit_new(c, &u, &err) < 0)
		goto fail;
	for (size_t i = 0; i < desc->n_tensors; i++) {
		const weightd_tensor_info *t = &desc->tensors[i];
		if (weightd_unit_slot(u, t->name, t->dtype, t->shape, t->ndim, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, t->name, "big", t->name, NULL, &err) < 0)
			goto fail;
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
		goto fail;
	weightd_unit_bind(u);
	for (size_t i = 0; i < desc->n_tensors; i++)
		res->sum += touch_pages(weightd_unit_data(u, desc->tensors[i].name),
					desc->tensors[i].nbytes);
	res->t = now() - t0;
	res->bytes_read = weightd_unit_bytes_read(u);
	return;
fail:
	snprintf(res->error, sizeof(res->error), "%s", err.message);
}

/* In a new process: read the tensors' bytes from the file into private memory, touch them. */
static void child_private(struct child_result *res)
{
	double t0;
	int fd;
	uint8_t *mem;
	uint64_t pos = 0;

	warm_file(ckpt_path);
	t0 = now();
	fd = open(ckpt_path, O_RDONLY | O_CLOEXEC);
	mem = malloc(data_len);

	if (fd < 0 || !mem) {
		snprintf(res->error, sizeof(res->error), "cannot open or allocate");
		return;
	}
	pread_all(fd, mem, data_len, (off_t)data_off);
	for (size_t i = 0; i < desc->n_tensors; i++) {
		res->sum += touch_pages(mem + pos, desc->tensors[i].nbytes);
		pos += desc->tensors[i].nbytes;
	}
	res->t = now() - t0;
	res->bytes_read = data_len;
}

/* Fork, run fn in the child, return its result through a shared page. */
static struct child_result in_child(void (*fn)(struct child_result *))
{
	struct child_result *shared, res;
	pid_t pid;
	int status;

	shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	memset(shared, 0, sizeof(*shared));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		fn(shared);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("a measuring child process failed");
	res = *shared;
	munmap(shared, sizeof(*shared));
	if (res.error[0])
		die("child: %s", res.error);
	return res;
}

/* --- main --------------------------------------------------------------------------------- */

/* Interrupted: stop the daemon, remove its segments, the copies and the temp dir. */
static void on_signal(int sig)
{
	if (harness_up)
		harness_cleanup(&H);
	_exit(128 + sig);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_materialize [--size BYTES] [--tensor-bytes BYTES] [--runs N] "
			"[--workers N] [--copy-buf BYTES] [--drop-page-cache yes|no]\n");
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i += 2) {  /* OPTION VALUE pairs */
		uint64_t v;

		if (i + 1 >= argc)
			usage();
		if (strcmp(argv[i], "--size") == 0 && parse_size(argv[i + 1], &v) == 0 && v >= (1u << 20))
			opt.size = v;
		else if (strcmp(argv[i], "--tensor-bytes") == 0 && parse_size(argv[i + 1], &v) == 0 &&
			 v >= (1u << 20))
			opt.tensor_bytes = v;
		else if (strcmp(argv[i], "--runs") == 0 && atoi(argv[i + 1]) >= 1 &&
			 atoi(argv[i + 1]) <= MAX_RUNS)
			opt.runs = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--workers") == 0 && atoi(argv[i + 1]) >= 1 &&
			 atoi(argv[i + 1]) <= 16)
			opt.workers = (unsigned)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--copy-buf") == 0 && parse_size(argv[i + 1], &v) == 0 &&
			 v >= PAGE && v <= (256u << 20))
			opt.copy_buf = (size_t)v;
		else if (strcmp(argv[i], "--drop-page-cache") == 0 &&
			 (strcmp(argv[i + 1], "yes") == 0 || strcmp(argv[i + 1], "no") == 0))
			opt.keep_page_cache = strcmp(argv[i + 1], "no") == 0;
		else
			usage();
	}
}

/*
 * The config is written here rather than by harness_write_config, which fixes the worker
 * count: the budget holds the unit, a second copy and casts with room to spare. extra: more
 * [daemon] lines (NULL: none).
 */
static void write_config(const char *extra)
{
	FILE *f = fopen(H.conf, "w");

	if (!f)
		die("cannot write %s: %s", H.conf, strerror(errno));
	fprintf(f,
		"[daemon]\nsocket = %s\nsocket_mode = 0666\nshm_prefix = %s\nstate_dir = %s/state\n"
		"single_socket = yes\nworkers = %u\nbudget = %lluM\n%s\n[checkpoint:big]\npath = %s\n%s\n"
		"[checkpoint:one]\npath = %s\n%s",
		H.sock, H.prefix, H.dir, opt.workers,
		(unsigned long long)(4 * opt.size / (1u << 20) + 64), extra ? extra : "", ckpt_path,
		opt.keep_page_cache ? "drop_page_cache = no\n" : "", one_path,
		opt.keep_page_cache ? "drop_page_cache = no\n" : "");
	if (fclose(f) != 0)
		die("cannot write %s", H.conf);
}

/* Start the daemon on fresh checkpoints, read them into the page cache, describe them. */
static void set_up(void)
{
	char args[1024];
	weightd_client *c;
	weightd_error err;
	int fd;

#ifdef WD_BENCH_WEIGHTD
	setenv("WD_WEIGHTD", WD_BENCH_WEIGHTD, 0);
	setenv("WD_MKFIXTURE", WD_BENCH_MKFIXTURE, 0);
#endif
	if (harness_init(&H) < 0)
		die("cannot make a temp dir: %s", strerror(errno));
	harness_up = true;
	harness_path(&H, "big.safetensors", ckpt_path, sizeof(ckpt_path));
	snprintf(args, sizeof(args), "big %s %llu --tensor-bytes %llu", ckpt_path,
		 (unsigned long long)opt.size, (unsigned long long)opt.tensor_bytes);
	if (harness_mkfixture(args) < 0)
		die("wd-mkfixture %s failed", args);
	chmod(ckpt_path, 0644);
	harness_path(&H, "one.safetensors", one_path, sizeof(one_path));
	snprintf(args, sizeof(args), "big %s %llu --tensor-bytes %llu", one_path,
		 (unsigned long long)opt.size, (unsigned long long)opt.size);
	if (harness_mkfixture(args) < 0)
		die("wd-mkfixture %s failed", args);
	chmod(one_path, 0644);
	/* On disk (dirty pages are not dropped), then into the page cache: read each twice. */
	for (int f = 0; f < 2; f++) {
		fd = open(f ? one_path : ckpt_path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fsync(fd) != 0)
			die("fsync %s: %s", f ? one_path : ckpt_path, strerror(errno));
		close(fd);
		warm_file(f ? one_path : ckpt_path);
		warm_file(f ? one_path : ckpt_path);
	}
	write_config(NULL);

	if (harness_start(&H) < 0)
		die("weightd did not start");
	c = connect_daemon("bench-setup");
	if (weightd_describe(c, "big", &desc, &err) < 0 ||
	    weightd_describe(c, "one", &desc_one, &err) < 0)
		die("describe: %s", err.message);
	weightd_close(c);
	if (desc_one->n_tensors != 1)
		die("checkpoint one has %zu tensors", desc_one->n_tensors);
	if (desc->n_tensors == 0 || desc->n_tensors > MAX_TENSORS)
		die("unexpected tensor count %zu", desc->n_tensors);
	data_off = desc->tensors[0].offset;
	for (size_t i = 0; i < desc->n_tensors; i++) {
		if (desc->tensors[i].offset != data_off + data_len)
			die("tensors are not contiguous in the file");
		data_len += desc->tensors[i].nbytes;
	}
}

static bool verdict(const char *what, double ratio, double target)
{
	bool ok = ratio >= target;

	printf("  %-44s ratio %6.2f  target >= %.2f  %s\n", what, ratio, target, ok ? "met" : "MISSED");
	return ok;
}

/* Medians of a series of costs, field by field. */
static struct cost med(const struct cost *v, int n)
{
	double w[MAX_RUNS], c[MAX_RUNS], q[MAX_RUNS];

	for (int i = 0; i < n; i++) {
		w[i] = v[i].wall;
		c[i] = v[i].cpu;
		q[i] = v[i].wait;
	}
	return (struct cost){ median(w, n), median(c, n), median(q, n) };
}

/* One line of a table: throughput over `bytes`, CPU and run-queue seconds per GiB. */
static void row(const char *what, uint64_t bytes, struct cost k)
{
	double gib = (double)bytes / (1u << 30);

	printf("  %-34s %7.2f GB/s   cpu %5.2f s/GiB   run-queue wait %5.2f s/GiB\n", what,
	       (double)bytes / k.wall / 1e9, k.cpu / gib, k.wait / gib);
}

/*
 * One series of cold fills beside the plain copies, interleaved with the order rotating: the unit
 * of every tensor, the single weight, 1-thread and N-thread copies (and cp when with_cp). Prints
 * the table and the ratios against the faster plain copy; returns the paired ones (below) in
 * ret_unit/ret_one.
 */
static void series(weightd_client *c, const char *title, const char *digest, bool with_cp,
		   double *ret_unit, double *ret_one)
{
	struct cost tm[MAX_RUNS] = { 0 }, t1[MAX_RUNS] = { 0 }, tp1[MAX_RUNS] = { 0 };
	struct cost tpn[MAX_RUNS] = { 0 }, tcp[MAX_RUNS] = { 0 };
	struct cost m, one, p1, pn, cpm;
	int kinds = with_cp ? 5 : 4;
	uint64_t out;
	double best;
	char label[64];

	/* a warm-up of each path */
	cold(c, ALL, NULL, data_len, &out);
	cold(c, ONE, NULL, data_len, &out);
	plain_copy(opt.workers);
	for (int i = 0; i < opt.runs; i++) {
		for (int k = 0; k < kinds; k++) {
			switch ((i + k) % kinds) {
			case 0: tm[i] = cold(c, ALL, NULL, data_len, &out); break;
			case 1: tp1[i] = plain_copy(1); break;
			case 2: t1[i] = cold(c, ONE, NULL, data_len, &out); break;
			case 3: tpn[i] = plain_copy(opt.workers); break;
			case 4: tcp[i] = cp_copy(); break;
			}
		}
		fprintf(stderr, "  %s run %d: unit %.3f s, one weight %.3f s, copy x1 %.3f s, "
			"copy x%u %.3f s\n", title, i + 1, tm[i].wall, t1[i].wall, tp1[i].wall,
			opt.workers, tpn[i].wall);
	}
	m = med(tm, opt.runs);
	one = med(t1, opt.runs);
	p1 = med(tp1, opt.runs);
	pn = med(tpn, opt.runs);
	best = p1.wall < pn.wall ? p1.wall : pn.wall;
	printf("%s\n", title);
	snprintf(label, sizeof(label), "weightd unit of %zu (%s)", desc->n_tensors, digest);
	row(label, data_len, m);
	snprintf(label, sizeof(label), "weightd one weight (%s)", digest);
	row(label, data_len, one);
	row("pread+pwrite, 1 thread", data_len, p1);
	snprintf(label, sizeof(label), "pread+pwrite, %u threads", opt.workers);
	row(label, data_len, pn);
	if (with_cp) {
		cpm = med(tcp, opt.runs);
		row("cp (1 thread)", data_len, cpm);
	}
	printf("  plain copy rate (faster of 1 and %u threads): %.2f GB/s\n", opt.workers,
	       (double)data_len / best / 1e9);
	printf("  unit / copy: %.2f (1 thread), %.2f (%u threads)", p1.wall / m.wall,
	       pn.wall / m.wall, opt.workers);
	if (with_cp)
		printf(", %.2f (cp)", cpm.wall / m.wall);
	printf("; one weight / copy: %.2f (1 thread), %.2f (%u threads)\n", p1.wall / one.wall,
	       pn.wall / one.wall, opt.workers);
	/*
	 * The verdict uses paired ratios: in each run, the faster plain copy of that run over
	 * weightd's time in that run (measured back to back), then the median over runs. On a
	 * shared machine whose load drifts during the benchmark, that compares like with like; the
	 * ratio of the separate medians above is printed beside it.
	 */
	{
		double ru[MAX_RUNS], ro[MAX_RUNS];
		for (int i = 0; i < opt.runs; i++) {
			double b = tp1[i].wall < tpn[i].wall ? tp1[i].wall : tpn[i].wall;
			ru[i] = b / tm[i].wall;
			ro[i] = b / t1[i].wall;
		}
		*ret_unit = median(ru, opt.runs);
		*ret_one = median(ro, opt.runs);
	}
	printf("  ratio of the medians to the faster copy: unit %.2f, one weight %.2f; median of the "
	       "paired per-run ratios: unit %.2f, one weight %.2f\n", best / m.wall, best / one.wall,
	       *ret_unit, *ret_one);
}

int main(int argc, char **argv)
{
	struct cost tu16[MAX_RUNS] = { 0 }, tc16[MAX_RUNS] = { 0 };
	struct cost tu32[MAX_RUNS] = { 0 }, tc32[MAX_RUNS] = { 0 };
	struct cost u16, c16, u32, c32;
	double tb[MAX_RUNS], tr[MAX_RUNS], b, r, unit, one, unit_spin, one_spin, unit_sha, one_sha;
	uint64_t odd = 0, even = 0, out_f32 = 0, out_bf16 = 0;
	double load[3] = { 0, 0, 0 };
	weightd_client *c;
	weightd_unit *held;
	bool ok = true;
	pid_t spin;

	parse_args(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	set_up();
	for (size_t i = 0; i < desc->n_tensors; i++)
		*(i % 2 ? &odd : &even) += desc->tensors[i].nbytes;
	c = connect_daemon("bench");

	getloadavg(load, 3);
	printf("weightd materialization benchmark: %.2f GiB in %zu tensors (F32 and BF16) and as one "
	       "tensor, page cache warm, %u workers, %d runs, medians; load average %.2f\n\n",
	       (double)data_len / (1u << 30), desc->n_tensors, opt.workers, opt.runs, load[0]);

	/* (a) the default digest */
	series(c, "(a) cold materialization vs a plain copy into /dev/shm", "xxh3-128", true, &unit,
	       &one);
	ok &= verdict("unit / faster plain copy", unit, 0.95);
	ok &= verdict("one weight / faster plain copy", one, 0.95);

	/* (a2) one core kept busy */
	spin = spinner_start();
	series(c, "\n(a2) the same while a spinner keeps one core busy", "xxh3-128", false,
	       &unit_spin, &one_spin);
	spinner_stop(spin);
	ok &= verdict("unit / faster plain copy, one core busy", unit_spin, 0.8);
	ok &= verdict("one weight / faster plain copy, one core busy", one_spin, 0.8);

	/* (b) the unit stays materialized, held by this process; two new processes in turn */
	{
		uint64_t out, read;
		double t;
		held = materialize(c, ALL, NULL, &t, &out, &read);
	}
	check_digests(held, desc, ckpt_path, false);
	{
		uint64_t out, read;
		double t;
		weightd_unit *u1 = materialize(c, ONE, NULL, &t, &out, &read);
		check_digests(u1, desc_one, one_path, false);
		weightd_unit_free(u1);
	}
	in_child(child_bind);
	in_child(child_private);
	for (int i = 0; i < opt.runs; i++) {
		struct child_result x, y;
		if (i % 2 == 0) {
			x = in_child(child_bind);
			y = in_child(child_private);
		} else {
			y = in_child(child_private);
			x = in_child(child_bind);
		}
		if (x.bytes_read != 0)
			die("the second process made the daemon read %llu bytes",
			    (unsigned long long)x.bytes_read);
		if (x.sum != y.sum)
			die("the bound memory differs from the file");
		tb[i] = x.t;
		tr[i] = y.t;
		fprintf(stderr, "  (b) run %d: bind+touch %.3f s, private read %.3f s\n", i + 1, tb[i],
			tr[i]);
	}
	drop_all(c, held);
	b = median(tb, opt.runs);
	r = median(tr, opt.runs);
	printf("\n(b) a second process binds and touches every page vs reads the file privately\n");
	printf("  %-34s %7.2f GB/s\n", "bind + touch (0 bytes read)", (double)data_len / b / 1e9);
	printf("  %-34s %7.2f GB/s\n", "read into private memory", (double)data_len / r / 1e9);
	ok &= verdict("private read time / bind time", r / b, 5.0);

	/* (c) casts beside the same sources unconverted (the BF16 half needs BF16 tensors) */
	if (odd)
		cold(c, ODD, "F32", odd, &out_f32);
	cold(c, EVEN, "BF16", even, &out_bf16);
	for (int i = 0; i < opt.runs; i++) {
		uint64_t o;
		for (int k = 0; k < 4; k++) {
			switch ((i + k) % 4) {
			case 0: tu32[i] = cold(c, EVEN, NULL, even, &o); break;
			case 1: tc32[i] = cold(c, EVEN, "BF16", even, &o); break;
			case 2: if (odd) tu16[i] = cold(c, ODD, NULL, odd, &o); break;
			case 3: if (odd) tc16[i] = cold(c, ODD, "F32", odd, &o); break;
			}
		}
		fprintf(stderr, "  (c) run %d: f32 %.3f s, ->bf16 %.3f s", i + 1, tu32[i].wall,
			tc32[i].wall);
		if (odd)
			fprintf(stderr, ", bf16 %.3f s, ->f32 %.3f s", tu16[i].wall, tc16[i].wall);
		fprintf(stderr, "\n");
	}
	u32 = med(tu32, opt.runs);
	c32 = med(tc32, opt.runs);
	printf("\n(c) materializing a cast recipe vs the same source tensors unconverted "
	       "(GB/s written; cpu per GiB written)\n");
	row("F32 unconverted", even, u32);
	row("F32 -> BF16", out_bf16, c32);
	if (odd) {
		u16 = med(tu16, opt.runs);
		c16 = med(tc16, opt.runs);
		row("BF16 unconverted", odd, u16);
		row("BF16 -> F32", out_f32, c16);
	}
	printf("  time ratio (unconverted / cast): %.2f F32->BF16", u32.wall / c32.wall);
	if (odd)
		printf(", %.2f BF16->F32", u16.wall / c16.wall);
	printf("\n");
	ok &= verdict("F32->BF16 throughput / unconverted",
		      ((double)out_bf16 / c32.wall) / ((double)even / u32.wall), 0.7);
	if (odd)
		ok &= verdict("BF16->F32 throughput / unconverted",
			      ((double)out_f32 / c16.wall) / ((double)odd / u16.wall), 0.7);

	/* (a3) the daemon restarted with digest = sha256 */
	weightd_close(c);
	if (harness_stop(&H) != 0)
		die("weightd did not exit cleanly");
	write_config("digest = sha256\n");
	if (harness_start(&H) < 0)
		die("weightd did not restart with digest = sha256");
	c = connect_daemon("bench-sha256");
	{
		uint64_t out, read;
		double t;
		weightd_evict(c, NULL, NULL, NULL);
		held = materialize(c, ALL, NULL, &t, &out, &read);
		check_digests(held, desc, ckpt_path, true);
		drop_all(c, held);
	}
	printf("\n");
	series(c, "(a3) the same with digest = sha256", "sha256", false, &unit_sha, &one_sha);
	printf("  %-44s ratio %6.2f  (no target)\n", "unit / faster plain copy, sha256", unit_sha);
	printf("  %-44s ratio %6.2f  (no target)\n", "one weight / faster plain copy, sha256",
	       one_sha);

	printf("\nsummary: unit %.2f, one weight %.2f (xxh3-128, target 0.95); one core busy: unit "
	       "%.2f, one weight %.2f (target 0.8); sha256: unit %.2f, one weight %.2f\n", unit, one,
	       unit_spin, one_spin, unit_sha, one_sha);
	weightd_close(c);
	weightd_description_free(desc);
	weightd_description_free(desc_one);
	if (harness_stop(&H) != 0)
		fprintf(stderr, "bench_materialize: weightd did not exit cleanly\n");
	harness_cleanup(&H);
	printf("\n%s\n", ok ? "every target met" : "a target was missed");
	return ok ? 0 : 1;
}
