/* SPDX-License-Identifier: Apache-2.0 */
/* bench_remote.c - a sharded checkpoint cold-loaded from a web server on loopback, beside the raw
 * limit of the same transfers and beside a download to local disk followed by a local load. */

/*
 * Usage (from a build directory; a Release build measures what users get):
 *
 *     tests/bench/bench_remote [--size BYTES] [--shards N] [--runs N] [--concurrency N]
 *                              [--chunk BYTES] [--tensor-bytes BYTES] [--dir DIR] [--no-s3]
 *                              [--ds-scale 32|64|128] [--ds-runs N] [--ds-derived-layers N]
 *                              [--no-ds | --ds-only] [--no-azure]
 *
 * Defaults: 2G in 4 shards of tensors of at most 64M, 5 runs, 16 connections of 16M ranges, a
 * temporary directory under /var/tmp (removed at the end with every segment the runs made).
 * nginx (and s3rver) come from tests/remote/servers.py, as the tests run them.
 *
 * Each run, in turn:
 *   weightd   a daemon with a cold /dev/shm prefix serves the checkpoint at
 *             http://127.0.0.1:PORT/ckpt/ (remote_concurrency and remote_chunk as given): from
 *             starting it to the whole checkpoint bound as one unit (every weight mapped),
 *             admission included.
 *   raw       the limit: every byte of the shard files fetched with libcurl's multi interface by
 *             the same number of parallel range requests of the same size, written with pwrite
 *             into one /dev/shm object.
 *   copy      what users do without weightd: the same parallel download into files on local disk
 *             (the directory of --dir), then a daemon serving that local copy as one unit.
 * CPU seconds are the daemon's (utime + stime from /proc) and the fetching child's (wait4), per
 * GiB moved. nginx serves the files from the page cache (they were just written), so the
 * network and the copies are what is measured, never the disk under nginx. Then one weightd run
 * against s3rver (path-style, SigV4-signed) behind servers.py's signature-checking proxy, beside
 * raw signed transfers through the same proxy: that proxy is Python and bounds both. Then (unless
 * --no-azure) the same checkpoint in Azurite over HTTPS, read with a SAS by weightd (az://) and
 * by raw libcurl range requests of the same size and number, alternated: Azurite is Node and
 * bounds both.
 *
 * Printed: each run's seconds, MB/s and CPU s/GiB, then medians, and the medians of the runs'
 * ratios beside their targets (weightd >= 0.9x raw; weightd >= 1.5x faster than copy).
 *
 * Then the many-tensor part (unless --no-ds): DeepSeek-V3's tensor table (tests/common/deepseek.c)
 * with its large dimensions divided by --ds-scale (32: 648 MiB; 128, the default: 45 MB), served
 * by nginx over HTTPS. Each of --ds-runs runs (default 3): weightd started cold, every tensor
 * bound as one unit (every byte compared in the first run), its requests for admission and for
 * the tensors from its status; curl fetching the same files whole, 8 at a time, into /dev/shm.
 * Targets: >= 0.8x curl's rate, <= 4 requests per shard. Then a derived unit over
 * --ds-derived-layers MoE layers (default 8; 0: none) beside curl's rate (target >= 0.7x); the
 * local floor once (the same bind and derived unit from the files in the page cache: weightd's
 * own work, whatever the store) with the remote/local ratios; and s3rver's request count once.
 */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "deepseek.h"
#include "harness.h"
#include "servers.h"
#include "weightd/client.h"

#define MAX_RUNS   16
#define MAX_SHARDS 256
#define MAX_CONC   256

struct bench {
	struct harness h; /* the daemon, its temp dir, socket and shm prefix */
	bool ready;
	struct wd_servers srv;
	bool have_srv;
	char root[PATH_MAX];	    /* what the servers serve: ckpt/ */
	char local[PATH_MAX];	    /* copy's download target */
	char cred[PATH_MAX];	    /* s3 credentials file */
	char shard[MAX_SHARDS][64]; /* every file of the checkpoint, its index included */
	uint64_t shard_size[MAX_SHARDS];
	int nshards;
	uint64_t file_bytes; /* all of them */
	unsigned conc;
	uint64_t chunk;
	const char *ca; /* the reference verifies https with it (NULL: plain http) */
};

/* One measured load: wall seconds, CPU seconds, bytes moved. */
struct sample {
	double s, cpu;
	uint64_t bytes;
};

/* ---- the reference: parallel range requests with libcurl ------------------------------------ */

struct xfer {
	int fd;	     /* destination */
	uint64_t at; /* where the next byte goes */
	uint64_t end;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n, done = 0;

	if (x->at + len > x->end)
		return 0;
	while (done < len) {
		ssize_t w = pwrite(x->fd, p + done, len - done, (off_t)(x->at + done));
		if (w <= 0)
			return 0;
		done += (size_t)w;
	}
	x->at += len;
	return len;
}

/* One range of one shard file and where it goes. */
struct job {
	int shard;
	uint64_t off, len;
	int fd;
	uint64_t dst;
};

/* The reference's connections: one easy handle each, reused from job to job (its connection
 * kept), as weightd's engine does. */
/* Azure: what each raw request adds (a SAS query, the CA, x-ms-version), or NULL. */
static const char *az_query, *az_ca;

struct conns {
	const struct bench *b;
	const char *base;
	bool s3;
	CURLM *m;
	CURL *h[MAX_CONC];
	struct xfer x[MAX_CONC];
	struct curl_slist *hdr[MAX_CONC];
};

static void start_job(struct conns *c, unsigned i, const struct job *j)
{
	char url[PATH_MAX + 256], range[96];

	snprintf(url, sizeof(url), "%s%s%s", c->base, c->b->shard[j->shard],
		 az_query ? az_query : "");
	snprintf(range, sizeof(range), "Range: bytes=%llu-%llu", (unsigned long long)j->off,
		 (unsigned long long)(j->off + j->len - 1));
	curl_slist_free_all(c->hdr[i]);
	c->hdr[i] = curl_slist_append(NULL, range);
	if (c->s3)
		c->hdr[i] = curl_slist_append(c->hdr[i],
					      "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb"
					      "92427ae41e4649b934ca495991b7852b855");
	if (az_query)
		c->hdr[i] = curl_slist_append(c->hdr[i], "x-ms-version: 2021-08-06");
	c->x[i] = (struct xfer){ j->fd, j->dst, j->dst + j->len };
	curl_easy_setopt(c->h[i], CURLOPT_URL, url);
	curl_easy_setopt(c->h[i], CURLOPT_HTTPHEADER, c->hdr[i]);
	curl_multi_add_handle(c->m, c->h[i]);
}

/* Fetch every job over b->conc connections (s3: signed with SigV4). 0 or -1. */
static int fetch_all(const struct bench *b, const char *base, bool s3, struct job *jobs, size_t n)
{
	static struct conns c;
	size_t next = 0, done = 0;
	unsigned conc = b->conc;
	int rc = 0;

	c = (struct conns){ .b = b, .base = base, .s3 = s3, .m = curl_multi_init() };
	for (unsigned i = 0; i < conc; i++) {
		c.h[i] = curl_easy_init();
		curl_easy_setopt(c.h[i], CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(c.h[i], CURLOPT_WRITEDATA, &c.x[i]);
		curl_easy_setopt(c.h[i], CURLOPT_PRIVATE, (char *)(uintptr_t)i);
		curl_easy_setopt(c.h[i], CURLOPT_FAILONERROR, 1L);
		/* as weightd reads: 512 KiB per read and write (curl's default, 16 KiB, costs a
		 * recv and a pwrite per 16 KiB) */
		curl_easy_setopt(c.h[i], CURLOPT_BUFFERSIZE, 512L << 10);
		if (az_ca || b->ca)
			curl_easy_setopt(c.h[i], CURLOPT_CAINFO, az_ca ? az_ca : b->ca);
		if (s3) {
			curl_easy_setopt(c.h[i], CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
			curl_easy_setopt(c.h[i], CURLOPT_USERNAME, b->srv.s3_key);
			curl_easy_setopt(c.h[i], CURLOPT_PASSWORD, b->srv.s3_secret);
		}
		if (next < n)
			start_job(&c, i, &jobs[next++]);
	}
	while (done < n && rc == 0) {
		int running, left;
		CURLMsg *msg;

		curl_multi_perform(c.m, &running);
		while ((msg = curl_multi_info_read(c.m, &left))) {
			unsigned i;
			char *priv;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
			i = (unsigned)(uintptr_t)priv;
			curl_multi_remove_handle(c.m, c.h[i]);
			if (msg->data.result != CURLE_OK || c.x[i].at != c.x[i].end) {
				fprintf(stderr, "bench_remote: a reference transfer failed: %s\n",
					curl_easy_strerror(msg->data.result));
				rc = -1;
				break;
			}
			done++;
			if (next < n)
				start_job(&c, i, &jobs[next++]);
		}
		if (done < n && rc == 0)
			curl_multi_poll(c.m, NULL, 0, 100, NULL);
	}
	for (unsigned i = 0; i < conc; i++) {
		curl_multi_remove_handle(c.m, c.h[i]);
		curl_easy_cleanup(c.h[i]);
		curl_slist_free_all(c.hdr[i]);
	}
	curl_multi_cleanup(c.m);
	return rc;
}

/*
 * In a child (its CPU measured alone): every shard file in chunk-sized ranges, into one /dev/shm
 * object (to_shm) or into one file per shard under b->local. The sample's s is the child's wall
 * time.
 */
static int reference(const struct bench *b, const char *base, bool s3, bool to_shm,
		     struct sample *ret)
{
	char shm[128];
	struct rusage ru;
	int status, pfd[2];
	double t0 = bench_now();
	pid_t pid;

	snprintf(shm, sizeof(shm), "/%s.bench-raw", b->h.prefix);
	if (pipe(pfd) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		static struct job jobs[1 << 16];
		int fds[MAX_SHARDS];
		size_t n = 0;
		uint64_t at = 0;
		char path[PATH_MAX + 80];

		close(pfd[0]);
		curl_global_init(CURL_GLOBAL_DEFAULT);
		if (to_shm) {
			fds[0] = shm_open(shm, O_RDWR | O_CREAT | O_TRUNC, 0600);
			if (fds[0] < 0 || ftruncate(fds[0], (off_t)b->file_bytes) < 0)
				_exit(1);
		}
		for (int s = 0; s < b->nshards; s++) {
			if (to_shm) {
				fds[s] = fds[0];
			} else {
				snprintf(path, sizeof(path), "%s/%s", b->local, b->shard[s]);
				fds[s] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
				if (fds[s] < 0 || ftruncate(fds[s], (off_t)b->shard_size[s]) < 0)
					_exit(1);
			}
			for (uint64_t off = 0; off < b->shard_size[s] && n < 1 << 16;
			     off += b->chunk) {
				uint64_t len = b->shard_size[s] - off < b->chunk ?
						       b->shard_size[s] - off :
						       b->chunk;
				jobs[n++] = (struct job){ s, off, len, fds[s],
							  (to_shm ? at : 0) + off };
			}
			at += b->shard_size[s];
		}
		_exit(fetch_all(b, base, s3, jobs, n) == 0 ? 0 : 1);
	}
	close(pfd[1]);
	close(pfd[0]);
	if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		shm_unlink(shm);
		return -1;
	}
	ret->s = bench_now() - t0;
	ret->cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
		   (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
	ret->bytes = b->file_bytes;
	shm_unlink(shm);
	return 0;
}

/* ---- weightd ------------------------------------------------------------------------------- */

/*
 * Write the daemon's config (extra, section), start it (its start time in *t0), connect, and wait
 * up to `wait_s` for checkpoint `name` to be admitted: a remote checkpoint may still be being
 * admitted when the daemon is ready. -1 when the daemon did not start; else 0 with *rc the
 * connection's or the description's result (0: *c and *d are set).
 */
static int start_described(struct bench *b, const char *extra, const char *section,
			   const char *name, double wait_s, double *t0, weightd_client **c,
			   weightd_description **d, weightd_error *err, int *rc)
{
	const struct harness_opts o = { .file_log_level = true, .no_settle = true };
	double until;
	int r;

	if (harness_write_config(&b->h, extra, section) < 0)
		return -1;
	*t0 = bench_now();
	if (harness_start_opts(&b->h, &o) < 0)
		return -1;
	r = weightd_connect(b->h.sock, "bench_remote", c, err);
	for (until = bench_now() + wait_s; r == 0;) {
		r = weightd_describe(*c, name, d, err);
		if (r == 0 || bench_now() > until)
			break;
		usleep(2000);
		r = 0;
	}
	*rc = r;
	return 0;
}

/* Start a daemon serving `section` as checkpoint "ckpt", bind all of it as one unit, stop it.
 * The sample: from the start to the unit validated; the daemon's CPU; the checkpoint's bytes. */
static int load(struct bench *b, const char *section, struct sample *ret)
{
	char extra[256];
	weightd_client *c = NULL;
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	double t0;
	long ticks;
	int r;

	harness_make_cold(&b->h);
	snprintf(extra, sizeof(extra),
		 "budget = %lluM\nlog_level = notice\nworkers = 0\n"
		 "remote_concurrency = %u\nremote_chunk = %llu\n",
		 (unsigned long long)(b->file_bytes / 2 * 3 >> 20) + 64, b->conc,
		 (unsigned long long)b->chunk);
	if (start_described(b, extra, section, "ckpt", 120, &t0, &c, &d, &err, &r) < 0)
		return -1;
	if (r == 0)
		r = bench_unit_described(c, "ckpt", d, &u, &err);
	ret->s = bench_now() - t0;
	ticks = harness_cpu_ticks(b->h.pid);
	ret->cpu = (double)ticks / (double)sysconf(_SC_CLK_TCK);
	ret->bytes = d ? d->source.bytes : 0;
	if (r < 0)
		fprintf(stderr, "bench_remote: %s\n", err.message);
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
	harness_stop(&b->h);
	harness_make_cold(&b->h);
	return r < 0 ? -1 : 0;
}

/* ---- setup --------------------------------------------------------------------------------- */

static int setup(struct bench *b, const char *base, unsigned long long size,
		 unsigned long long tensor_bytes, int shards, bool s3, struct ds_ckpt *ds)
{
	char mk[PATH_MAX], weightd[PATH_MAX], cmd[4 * PATH_MAX], big[PATH_MAX + 16],
		dir[PATH_MAX + 16], why[512];
	struct dirent *e;
	DIR *d;
	FILE *f;

	bench_find_tool("WD_WEIGHTD", "../../daemon/weightd", weightd, sizeof(weightd));
	bench_find_tool("WD_MKFIXTURE", "../wd-mkfixture", mk, sizeof(mk));
	setenv("WD_WEIGHTD", weightd, 1);
	if (!getenv("WD_SOURCE_DIR")) /* where tests/remote/servers.py is */
		setenv("WD_SOURCE_DIR", WD_BENCH_SOURCE_DIR, 1);
	if (harness_init_in(&b->h, base) < 0) {
		fprintf(stderr, "bench_remote: a temp dir in %s: %s\n", base, strerror(errno));
		return -1;
	}
	b->ready = true;
	snprintf(b->root, sizeof(b->root), "%s/srv", b->h.dir);
	snprintf(b->local, sizeof(b->local), "%s/local", b->h.dir);
	snprintf(b->cred, sizeof(b->cred), "%s/s3.credentials", b->h.dir);
	if (mkdir(b->root, 0755) < 0)
		return -1;
	snprintf(big, sizeof(big), "%s/big.safetensors", b->h.dir);
	snprintf(dir, sizeof(dir), "%s/ckpt", b->root);
	if (size == 0)
		goto no_large; /* --ds-only */
	printf("writing a %llu-byte checkpoint in %d shards under %s ...\n", size, shards,
	       b->h.dir);
	fflush(stdout);
	snprintf(cmd, sizeof(cmd),
		 "'%s' big '%s' %llu --tensor-bytes %llu && '%s' sharded '%s' %d "
		 "--from '%s' && rm -f '%s'",
		 mk, big, size, tensor_bytes, mk, dir, shards, big, big);
	if (system(cmd) != 0)
		return -1;
	d = opendir(dir);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && b->nshards < MAX_SHARDS) { /* the index too */
			char p[PATH_MAX + 200];
			struct stat st;
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			if (stat(p, &st) < 0)
				return -1;
			snprintf(b->shard[b->nshards], sizeof(b->shard[0]), "%s", e->d_name);
			b->shard_size[b->nshards++] = (uint64_t)st.st_size;
			b->file_bytes += (uint64_t)st.st_size;
		}
	if (d)
		closedir(d);
no_large:
	/* the DeepSeek-shaped one before the servers start: s3rver takes its files at start */
	snprintf(dir, sizeof(dir), "%s/ds", b->root);
	if (ds) {
		printf("writing the DeepSeek-V3-shaped checkpoint (%d tensors, %d shards, hidden "
		       "%llu) ...\n",
		       DS_TENSORS, DS_SHARDS, (unsigned long long)ds->dims.hidden);
		fflush(stdout);
		if (mkdir(dir, 0755) < 0 || ds_write(ds, dir) < 0)
			return -1;
	}
	if (wd_servers_start(b->root, s3, &b->srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "bench_remote: the servers did not start: %s\n", why);
		return -1;
	}
	b->have_srv = true;
	f = fopen(b->cred, "w");
	if (!f)
		return -1;
	fprintf(f, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", b->srv.s3_key,
		b->srv.s3_secret);
	fclose(f);
	chmod(b->cred, 0600);
	return 0;
}

static void teardown(struct bench *b)
{
	char cmd[PATH_MAX + 32];

	if (b->have_srv)
		wd_servers_stop(&b->srv);
	if (!b->ready)
		return;
	harness_kill(&b->h);
	harness_make_cold(&b->h);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b->local);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_remote: could not remove %s\n", b->local);
	if (getenv("WD_KEEP_BENCH_DIR"))
		setenv("WD_KEEP_TEST_DIR", "1", 1);
	harness_cleanup(&b->h);
}

static double mbps(const struct sample *s)
{
	return (double)s->bytes / s->s / 1e6;
}

static double cpu_per_gib(const struct sample *s)
{
	return s->cpu / ((double)s->bytes / (double)(1u << 30));
}

static void row(const char *what, int run, const struct sample *s)
{
	printf("%4d  %-8s %9.3f s %9.0f MB/s %8.3f CPU s/GiB\n", run, what, s->s, mbps(s),
	       cpu_per_gib(s));
	fflush(stdout);
}

/* The median of a field over runs, as a sample (medians of each figure taken apart). */
static struct sample median(const struct sample *v, int n)
{
	double s[MAX_RUNS], cpu[MAX_RUNS];

	for (int i = 0; i < n; i++) {
		s[i] = v[i].s;
		cpu[i] = v[i].cpu;
	}
	return (struct sample){ bench_median(s, n), bench_median(cpu, n), v[0].bytes };
}

/* ---- the DeepSeek-shaped checkpoint: 91,991 tensors, most of them tiny ------------------- */

/* The DeepSeek-V3 table with its large dimensions divided by `div` (32: the 648 MiB checkpoint
 * of docs/performance.md; 128: ds_tiny, 45 MB), the small ones as ds_tiny's. */
static struct ds_dims ds_scaled(unsigned div)
{
	struct ds_dims d = ds_tiny;

	d.hidden = ds_real.hidden / div;
	d.moe_inter = ds_real.moe_inter / div;
	d.dense_inter = ds_real.dense_inter / div;
	d.q_lora = ds_real.q_lora / div;
	d.kv_lora = ds_real.kv_lora / div;
	d.vocab = ds_real.vocab / div;
	return d;
}

/* What one cold bind of the DeepSeek-shaped checkpoint cost in requests. */
struct ds_count {
	uint64_t admission; /* the index and every shard's header */
	uint64_t payload;   /* the tensors */
	uint64_t bytes;
	double admit_s; /* from the start to the checkpoint described (admitted) */
};

/* The checkpoint's remote traffic so far, from weightd's status. */
static int ds_traffic(weightd_client *c, uint64_t *ret_requests, uint64_t *ret_bytes)
{
	weightd_status *st = NULL;
	weightd_error err;

	if (weightd_status_summary(c, &st, &err) < 0) {
		fprintf(stderr, "bench_remote: status: %s\n", err.message);
		return -1;
	}
	*ret_requests = *ret_bytes = 0;
	for (size_t i = 0; st->source_remote && i < st->n_sources; i++) {
		*ret_requests += st->source_remote[i].requests;
		*ret_bytes += st->source_remote[i].bytes;
	}
	weightd_status_free(st);
	return 0;
}

/* Every byte of every tensor of the bound unit u against the content function. */
static int ds_verify(const weightd_unit *u, const struct ds_ckpt *ck)
{
	uint8_t *want = NULL;
	size_t cap = 0;

	for (size_t i = 0; i < ck->n; i++) {
		const struct ds_tensor *t = &ck->t[i];
		const void *got = weightd_unit_data(u, t->name);

		if (t->nbytes > cap) {
			free(want);
			cap = t->nbytes;
			want = malloc(cap);
			if (!want)
				return -1;
		}
		ds_fill(t, 0, want, t->nbytes);
		if (t->nbytes && (!got || memcmp(got, want, t->nbytes) != 0)) {
			fprintf(stderr, "bench_remote: %s differs from the checkpoint\n", t->name);
			free(want);
			return -1;
		}
	}
	free(want);
	return 0;
}

/* Start a daemon serving `section` as checkpoint "ds", bind every tensor as one unit, check
 * every byte when `verify`, stop it. The sample: from the start to the unit bound. */
static int ds_load(struct bench *b, const struct ds_ckpt *ck, const char *section, bool verify,
		   struct sample *ret, struct ds_count *count)
{
	char extra[256];
	weightd_client *c = NULL;
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	uint64_t req0 = 0, req1 = 0, by0 = 0, by1 = 0;
	double t0;
	int r;

	harness_make_cold(&b->h);
	snprintf(extra, sizeof(extra), "budget = %lluM\nlog_level = notice\nworkers = 0\n",
		 (unsigned long long)(ck->bytes / 2 * 3 >> 20) + 256);
	if (start_described(b, extra, section, "ds", 600, &t0, &c, &d, &err, &r) < 0)
		return -1;
	if (r == 0)
		r = ds_traffic(c, &req0, &by0);
	count->admit_s = bench_now() - t0;
	if (r == 0)
		r = ds_unit_declare(c, ck, ck->n, "ds", &u, &err);
	if (r >= 0)
		r = bench_unit_bind(u, &err);
	ret->s = bench_now() - t0;
	ret->cpu = (double)harness_cpu_ticks(b->h.pid) / (double)sysconf(_SC_CLK_TCK);
	ret->bytes = ck->bytes;
	if (r >= 0)
		r = ds_traffic(c, &req1, &by1);
	if (r < 0)
		fprintf(stderr, "bench_remote: %s\n", err.message);
	if (r >= 0 && verify && ds_verify(u, ck) < 0)
		r = -1;
	count->admission = req0;
	count->payload = req1 - req0;
	count->bytes = by1;
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
	harness_stop(&b->h);
	harness_make_cold(&b->h);
	return r < 0 ? -1 : 0;
}

/* The checkpoint's files under root/ds as the reference fetches them: whole, 8 at a time. */
static void ds_files(struct bench *b, const struct ds_ckpt *ck)
{
	b->nshards = 0;
	b->file_bytes = 0;
	for (uint32_t sh = 0; sh <= DS_SHARDS && b->nshards < MAX_SHARDS; sh++) {
		char name[64], p[PATH_MAX + 200];
		struct stat st;

		if (sh < DS_SHARDS)
			ds_shard_name(sh, name, sizeof(name));
		else
			snprintf(name, sizeof(name), "model.safetensors.index.json");
		snprintf(b->shard[b->nshards], sizeof(b->shard[0]), "%s", name);
		snprintf(p, sizeof(p), "%s/ds/%s", b->root, name);
		b->shard_size[b->nshards] = stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
		b->file_bytes += b->shard_size[b->nshards++];
	}
	(void)ck;
}

static void ds_row(const char *what, int run, const struct sample *s, const struct ds_count *n)
{
	printf("%4d  %-8s %9.3f s %9.0f MB/s %8.3f CPU s/GiB", run, what, s->s, mbps(s),
	       cpu_per_gib(s));
	if (n)
		printf("   %llu requests for the tensors (%.2f a shard), %llu for admission (%.3f s)",
		       (unsigned long long)n->payload, (double)n->payload / DS_SHARDS,
		       (unsigned long long)n->admission, n->admit_s);
	printf("\n");
	fflush(stdout);
}

/* ---- derived weights over the same remote checkpoint ----------------------------------- */

/* {"op":"dequant_block","dtype":"BF16","block":[B,B],"input":src(w),"scale":src(w's scale)} */
static void json_dq(struct stw_str *j, const struct ds_ckpt *ck, const struct ds_tensor *w)
{
	stw_str_addf(j, "{\"op\":\"dequant_block\",\"dtype\":\"BF16\",\"block\":[%llu,%llu],",
		     (unsigned long long)ck->dims.block, (unsigned long long)ck->dims.block);
	stw_str_addf(j, "\"input\":{\"op\":\"source\",\"checkpoint\":\"ds\",\"tensor\":");
	stw_str_json(j, w->name);
	stw_str_addf(j, "},\"scale\":{\"op\":\"source\",\"checkpoint\":\"ds\",\"tensor\":");
	stw_str_json(j, ck->t[w->scale].name);
	stw_str_add(j, "}}", 2);
}

/* One slot of the derived unit from the JSON recipe in j (emptied after). */
static int derived_slot(weightd_unit *u, const char *name, const char *dtype, const uint64_t *shape,
			size_t ndim, struct stw_str *j, weightd_error *err)
{
	weightd_recipe *r = NULL;
	int rc = weightd_recipe_from_json(j->p, j->len, &r, err);

	if (rc >= 0)
		rc = weightd_unit_slot(u, name, dtype, shape, ndim, NULL, err);
	if (rc >= 0)
		rc = weightd_unit_set_recipe(u, name, r, err);
	weightd_recipe_free(r);
	j->len = 0;
	return rc;
}

/*
 * The derived unit of a BF16 engine at tensor-parallel rank 0 of 2 over `layers` MoE layers:
 * every expert's weight dequantized (FP8 block scales), the fused q/k down-projection (the
 * dequantized q_a_proj and kv_a_proj_with_mqa concatenated), o_proj dequantized and sharded by
 * rows, the norms cast to F32. *ret_needed: the checkpoint bytes its recipes read.
 */
static int derived_unit(weightd_client *c, const struct ds_ckpt *ck, int layers, weightd_unit **ret,
			uint64_t *ret_needed, weightd_error *err)
{
	struct stw_str j = { 0 };
	weightd_unit *u = NULL;
	uint64_t needed = 0;
	int rc = weightd_unit_new(c, &u, err);

	for (size_t i = 0; rc >= 0 && i < ck->n; i++) {
		const struct ds_tensor *t = &ck->t[i];
		char slot[128];
		int L = -1;

		if (sscanf(t->name, "model.layers.%d.", &L) != 1 || L < DS_DENSE_LAYERS ||
		    L >= DS_DENSE_LAYERS + layers)
			continue;
		if (t->kind == DS_FP8 && strstr(t->name, ".mlp.experts.")) {
			json_dq(&j, ck, t);
			snprintf(slot, sizeof(slot), "dq.%s", t->name);
			rc = derived_slot(u, slot, "BF16", t->shape, 2, &j, err);
			needed += t->nbytes + ck->t[t->scale].nbytes;
		} else if (t->kind == DS_FP8 && strstr(t->name, "self_attn.q_a_proj.")) {
			char kv[96];
			long k;
			snprintf(kv, sizeof(kv), "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", L);
			k = ds_find(ck, kv);
			if (k < 0)
				return -1;
			stw_str_addf(&j, "{\"op\":\"concat\",\"axis\":0,\"inputs\":[");
			json_dq(&j, ck, t);
			stw_str_add(&j, ",", 1);
			json_dq(&j, ck, &ck->t[k]);
			stw_str_add(&j, "]}", 2);
			snprintf(slot, sizeof(slot), "qkv_a.%d", L);
			rc = derived_slot(u, slot, "BF16",
					  (uint64_t[]){ t->shape[0] + ck->t[k].shape[0], t->shape[1] },
					  2, &j, err);
			needed += t->nbytes + ck->t[t->scale].nbytes + ck->t[k].nbytes +
				  ck->t[ck->t[k].scale].nbytes;
		} else if (t->kind == DS_FP8 && strstr(t->name, "self_attn.o_proj.")) {
			stw_str_addf(&j, "{\"op\":\"select\",\"select\":{\"shard\":[0,0,2]},\"input\":");
			json_dq(&j, ck, t);
			stw_str_add(&j, "}", 1);
			snprintf(slot, sizeof(slot), "o_proj.%d", L);
			rc = derived_slot(u, slot, "BF16",
					  (uint64_t[]){ t->shape[0] / 2, t->shape[1] }, 2, &j, err);
			needed += (t->nbytes + ck->t[t->scale].nbytes) / 2;
		} else if (t->kind == DS_BF16 && t->ndim == 1) {
			stw_str_addf(&j, "{\"op\":\"cast\",\"dtype\":\"F32\",\"input\":{\"op\":"
					 "\"source\",\"checkpoint\":\"ds\",\"tensor\":");
			stw_str_json(&j, t->name);
			stw_str_add(&j, "}}", 2);
			snprintf(slot, sizeof(slot), "f32.%s", t->name);
			rc = derived_slot(u, slot, "F32", t->shape, 1, &j, err);
			needed += t->nbytes;
		}
	}
	free(j.p);
	*ret = u;
	*ret_needed = needed;
	return rc;
}

/*
 * The derived row: a daemon started cold over the HTTPS checkpoint and admitted; then, timed,
 * the derived unit submitted, made and bound. The rate is of the checkpoint bytes its recipes
 * need, beside curl's rate over the files.
 */
static int ds_derived(struct bench *b, const struct ds_ckpt *ck, const char *section, int layers,
		      struct sample *ret, uint64_t *ret_requests)
{
	char extra[256];
	weightd_client *c = NULL;
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	uint64_t req0 = 0, req1 = 0, by, needed = 0;
	double t0;
	long ticks0;
	int r;

	harness_make_cold(&b->h);
	snprintf(extra, sizeof(extra), "budget = %lluM\nlog_level = notice\nworkers = 0\n",
		 (unsigned long long)(ck->bytes * 3 >> 20) + 256);
	if (start_described(b, extra, section, "ds", 600, &t0, &c, &d, &err, &r) < 0)
		return -1;
	if (r == 0)
		r = ds_traffic(c, &req0, &by);
	ticks0 = harness_cpu_ticks(b->h.pid);
	t0 = bench_now();
	if (r == 0)
		r = derived_unit(c, ck, layers, &u, &needed, &err);
	if (r >= 0)
		r = bench_unit_bind(u, &err);
	ret->s = bench_now() - t0;
	/* the daemon's CPU for the unit alone, not its admission */
	ret->cpu = (double)(harness_cpu_ticks(b->h.pid) - ticks0) / (double)sysconf(_SC_CLK_TCK);
	ret->bytes = needed;
	if (r >= 0)
		r = ds_traffic(c, &req1, &by);
	if (r < 0)
		fprintf(stderr, "bench_remote: derived unit: %s\n", err.message);
	*ret_requests = req1 - req0;
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
	harness_stop(&b->h);
	harness_make_cold(&b->h);
	return r < 0 ? -1 : 0;
}

/*
 * The many-tensor row: the DeepSeek-shaped checkpoint over HTTPS from nginx, bound cold as one
 * unit, beside curl fetching the same files whole, 8 at a time, into /dev/shm; then once from
 * s3rver behind the SigV4 proxy. Targets: >= 0.8x curl's rate, <= 4 requests a shard. 0 when
 * met, 1 when missed, -1 when a run failed.
 */
static int ds_bench(struct bench *b, const struct ds_ckpt *ck, int runs, int derived_layers,
		    bool s3)
{
	static struct sample wd[MAX_RUNS], ref[MAX_RUNS], dv[MAX_RUNS];
	struct ds_count cnt[MAX_RUNS], c3;
	double ratio[MAX_RUNS], rr, per_shard[MAX_RUNS];
	char section[2 * PATH_MAX], url[256];
	unsigned conc = b->conc;
	uint64_t chunk = b->chunk;
	struct sample mw, mr;
	int rc = 0;

	ds_files(b, ck);
	b->conc = 8;
	b->chunk = UINT64_MAX / 4; /* each file in one request, as curl fetches it */
	b->ca = b->srv.ca;
	printf("\nDeepSeek-V3-shaped checkpoint: %zu tensors, %d shards, %llu bytes of files; "
	       "nginx over HTTPS on 127.0.0.1:%d\n",
	       ck->n, DS_SHARDS, (unsigned long long)b->file_bytes, b->srv.https);
	printf("(weightd: one unit of every tensor, cold, admission included, remote_concurrency "
	       "16, remote_chunk 16M, remote_gap 1M; curl: the files whole, 8 at a time, into "
	       "/dev/shm)\n");
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/ds/", b->srv.https);
	snprintf(section, sizeof(section), "[checkpoint:ds]\npath = %s\nca_file = %s\n", url,
		 b->srv.ca);
	for (int r = 0; r < runs; r++) {
		if (ds_load(b, ck, section, r == 0, &wd[r], &cnt[r]) < 0 ||
		    reference(b, url, false, true, &ref[r]) < 0) {
			rc = -1;
			goto out;
		}
		ref[r].bytes = ck->bytes; /* the rate of the tensors' bytes, as weightd's */
		ds_row("weightd", r + 1, &wd[r], &cnt[r]);
		ds_row("curl", r + 1, &ref[r], NULL);
		ratio[r] = ref[r].s / wd[r].s;
		per_shard[r] = (double)cnt[r].payload / DS_SHARDS;
	}
	mw = median(wd, runs);
	mr = median(ref, runs);
	rr = bench_median(ratio, runs);
	printf("median of %d:\n", runs);
	printf("  weightd  %8.3f s %6.0f MB/s %6.3f CPU s/GiB   %.2f requests a shard (target <= "
	       "4); every byte checked in run 1\n",
	       mw.s, mbps(&mw), cpu_per_gib(&mw), bench_median(per_shard, runs));
	printf("  curl     %8.3f s %6.0f MB/s %6.3f CPU s/GiB   weightd/curl rate %.2fx (median of "
	       "the runs' ratios; target >= 0.8x)\n",
	       mr.s, mbps(&mr), cpu_per_gib(&mr), rr);
	if (rr < 0.8 || bench_median(per_shard, runs) > 4)
		rc = 1;
	if (derived_layers > 0) {
		double dratio[MAX_RUNS];
		uint64_t dreq = 0;

		printf("derived unit over the same HTTPS checkpoint, %d MoE layers (every expert "
		       "dequantized to BF16, fused q/k down-projection, o_proj sharded 2 ways, norms "
		       "cast to F32), timed from its submit on an admitted cold daemon, at the rate of "
		       "the bytes its recipes read:\n",
		       derived_layers);
		for (int r = 0; r < runs; r++) {
			if (ds_derived(b, ck, section, derived_layers, &dv[r], &dreq) < 0) {
				rc = -1;
				goto out;
			}
			printf("%4d  %-8s %9.3f s %9.0f MB/s %6.3f CPU s/GiB   %llu requests for %llu "
			       "bytes\n",
			       r + 1, "derived", dv[r].s, mbps(&dv[r]), cpu_per_gib(&dv[r]),
			       (unsigned long long)dreq, (unsigned long long)dv[r].bytes);
			dratio[r] = mbps(&dv[r]) / mbps(&ref[r]);
		}
		printf("  derived/curl rate %.2fx (median of the runs' ratios against the curl runs "
		       "above; target >= 0.7x)\n",
		       bench_median(dratio, runs));
		if (bench_median(dratio, runs) < 0.7)
			rc = rc < 0 ? rc : 1;
	}
	{
		/* the floor: the same files read locally (from the page cache), once; weightd's own
		 * work, whatever the store */
		struct sample wl, dl;
		struct ds_count cl;
		uint64_t dreq = 0;

		snprintf(section, sizeof(section), "[checkpoint:ds]\npath = %s/ds/\n", b->root);
		if (ds_load(b, ck, section, false, &wl, &cl) < 0) {
			rc = -1;
			goto out;
		}
		printf("the same checkpoint from local files in the page cache, once (weightd's own "
		       "work, whatever the store):\n");
		ds_row("local", 1, &wl, &cl);
		printf("  remote/local rate %.2fx (the median remote bind against this one)\n",
		       wl.s / mw.s);
		if (derived_layers > 0) {
			if (ds_derived(b, ck, section, derived_layers, &dl, &dreq) < 0) {
				rc = -1;
				goto out;
			}
			printf("%4d  %-8s %9.3f s %9.0f MB/s %6.3f CPU s/GiB\n", 1, "derived", dl.s,
			       mbps(&dl), cpu_per_gib(&dl));
			printf("  remote/local derived rate %.2fx (the median remote derived unit "
			       "against this one)\n",
			       dl.s / median(dv, runs).s);
		}
	}
	if (s3 && b->srv.s3) {
		struct sample ws;

		snprintf(section, sizeof(section),
			 "[checkpoint:ds]\npath = s3://%s/ds/\nendpoint = http://127.0.0.1:%d\n"
			 "region = us-east-1\npath_style = yes\ncredentials_file = %s\n"
			 "allow_http = yes\n",
			 b->srv.bucket, b->srv.s3, b->cred);
		printf("s3rver behind the SigV4-checking proxy, once:\n");
		if (ds_load(b, ck, section, false, &ws, &c3) < 0) {
			rc = -1;
			goto out;
		}
		ds_row("weightd", 1, &ws, &c3);
		if ((double)c3.payload / DS_SHARDS > 4)
			rc = rc < 0 ? rc : 1;
	}
out:
	b->conc = conc;
	b->chunk = chunk;
	b->ca = NULL;
	return rc;
}

/*
 * Azurite (HTTPS, a SAS) serving the same checkpoint: weightd against raw parallel range reads
 * of the same blobs, `runs` rounds alternated. Prints each run, the medians, the ratio and the
 * reference's own rate. 0, or -1 when a load failed or Azurite could not start.
 */
static int bench_azure(struct bench *b, int runs)
{
	struct sample wd[MAX_RUNS], raw[MAX_RUNS], mw, mr;
	double ratio[MAX_RUNS];
	struct wd_servers az;
	char why[512], section[2048], base[512], query[600];
	int rc = -1;

	printf("\nAzurite over HTTPS with a SAS (Node: it bounds both); uploading ...\n");
	fflush(stdout);
	if (wd_servers_start_azure(b->root, &az, why, sizeof(why)) < 0) {
		printf("  skipped: %s\n", why);
		return -1;
	}
	snprintf(section, sizeof(section),
		 "[checkpoint:ckpt]\npath = az://%s/%s/ckpt/?%s\nendpoint = https://127.0.0.1:%d\n"
		 "ca_file = %s\nazure_credentials = sas\n",
		 az.az_account, az.az_container, az.az_sas, az.az_direct, az.ca);
	snprintf(base, sizeof(base), "https://127.0.0.1:%d/%s/%s/ckpt/", az.az_direct,
		 az.az_account, az.az_container);
	snprintf(query, sizeof(query), "?%s", az.az_sas);
	if (runs > 3)
		runs = 3; /* Azurite is slow: three rounds are minutes already */
	for (int r = 0; r < runs; r++) {
		if (load(b, section, &wd[r]) < 0)
			goto out;
		row("weightd", r + 1, &wd[r]);
		az_query = query;
		az_ca = az.ca;
		if (reference(b, base, false, true, &raw[r]) < 0) {
			az_query = az_ca = NULL;
			goto out;
		}
		az_query = az_ca = NULL;
		row("raw", r + 1, &raw[r]);
		ratio[r] = raw[r].s / wd[r].s;
	}
	mw = median(wd, runs);
	mr = median(raw, runs);
	printf("median of %d:\n", runs);
	printf("  weightd  %8.3f s %6.0f MB/s\n", mw.s, mbps(&mw));
	printf("  raw      %8.3f s %6.0f MB/s (the reference: libcurl, same ranges, same "
	       "connections)\n",
	       mr.s, mbps(&mr));
	printf("  weightd/raw rate %.2fx (median of the runs' ratios)\n",
	       bench_median(ratio, runs));
	rc = 0;
out:
	wd_servers_stop(&az);
	return rc;
}

int main(int argc, char **argv)
{
	static struct sample wd[MAX_RUNS], raw[MAX_RUNS], copied[MAX_RUNS];
	struct bench b = { .ready = false, .conc = 16, .chunk = 16u << 20 };
	unsigned long long size = 2ull << 30, tensor_bytes = 64u << 20, v;
	int runs = 5, shards = 4, rc = 1, ds_runs = 3, ds_rc = 0, ds_derived_layers = 8;
	unsigned ds_div = 128;
	const char *base = "/var/tmp";
	bool s3 = true, azure = true, ds_on = true, ds_only = false;
	static struct ds_ckpt ck;
	char section[2 * PATH_MAX], url[256];
	struct sample mw, mr, mt, dl;
	double ratio_raw[MAX_RUNS], ratio_copied[MAX_RUNS], rr, rt;
	double la[3] = { 0, 0, 0 };

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--size") == 0 && i + 1 < argc &&
		    bench_parse_size(argv[i + 1], &size) == 0)
			i++;
		else if (strcmp(argv[i], "--tensor-bytes") == 0 && i + 1 < argc &&
			 bench_parse_size(argv[i + 1], &tensor_bytes) == 0)
			i++;
		else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc &&
			 bench_parse_size(argv[i + 1], &v) == 0 && v >= 65536)
			b.chunk = v, i++;
		else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= MAX_CONC)
			b.conc = (unsigned)atoi(argv[++i]);
		else if (strcmp(argv[i], "--shards") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= MAX_SHARDS)
			shards = atoi(argv[++i]);
		else if (bench_arg_runs(argc, argv, &i, MAX_RUNS, &runs))
			continue;
		else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
			base = argv[++i];
		else if (strcmp(argv[i], "--no-s3") == 0)
			s3 = false;
		else if (strcmp(argv[i], "--ds-scale") == 0 && i + 1 < argc &&
			 (atoi(argv[i + 1]) == 32 || atoi(argv[i + 1]) == 64 ||
			  atoi(argv[i + 1]) == 128))
			ds_div = (unsigned)atoi(argv[++i]);
		else if (strcmp(argv[i], "--ds-runs") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= MAX_RUNS)
			ds_runs = atoi(argv[++i]);
		else if (strcmp(argv[i], "--ds-derived-layers") == 0 && i + 1 < argc &&
			 atoi(argv[i + 1]) >= 0 && atoi(argv[i + 1]) <= 59)
			ds_derived_layers = atoi(argv[++i]);
		else if (strcmp(argv[i], "--no-ds") == 0)
			ds_on = false;
		else if (strcmp(argv[i], "--ds-only") == 0)
			ds_only = true;
		else if (strcmp(argv[i], "--no-azure") == 0)
			azure = false;
		else {
			fprintf(stderr,
				"usage: bench_remote [--size BYTES] [--shards N] [--runs N<=%d] "
				"[--concurrency N] [--chunk BYTES] [--tensor-bytes BYTES] [--dir DIR] "
				"[--no-s3] [--ds-scale 32|64|128] [--ds-runs N] [--ds-derived-layers N] "
				"[--no-ds | --ds-only] [--no-azure]\n",
				MAX_RUNS);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (ds_on || ds_only) {
		struct ds_dims dims = ds_scaled(ds_div);
		if (ds_table(&dims, &ck) < 0)
			goto out;
	}
	if (setup(&b, base, ds_only ? 0 : size, tensor_bytes, shards, s3,
		  ds_on || ds_only ? &ck : NULL) < 0)
		goto out;
	if (ds_only) {
		rc = 0;
		goto ds;
	}
	printf("checkpoint: %d files, %llu bytes; nginx on 127.0.0.1:%d; %u connections "
	       "of %llu-byte ranges\n\n",
	       b.nshards, (unsigned long long)b.file_bytes, b.srv.http, b.conc,
	       (unsigned long long)b.chunk);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ckpt/", b.srv.http);
	/* a round not counted: the checkpoint just written is still being written back, which
	 * slows whatever runs first */
	if (reference(&b, url, false, true, &dl) < 0)
		goto out;
	printf("(warm-up: one raw fetch, %.3f s, not counted)\n", dl.s);
	for (int r = 0; r < runs; r++) {
		char cmd[PATH_MAX + 32];

		snprintf(section, sizeof(section),
			 "[checkpoint:ckpt]\npath = %s\nallow_http = yes\n", url);
		if (load(&b, section, &wd[r]) < 0)
			goto out;
		row("weightd", r + 1, &wd[r]);
		if (reference(&b, url, false, true, &raw[r]) < 0)
			goto out;
		row("raw", r + 1, &raw[r]);
		/* copy: download, then load the local copy */
		if (mkdir(b.local, 0755) < 0 || reference(&b, url, false, false, &dl) < 0)
			goto out;
		snprintf(section, sizeof(section), "[checkpoint:ckpt]\npath = %s/\n", b.local);
		if (load(&b, section, &copied[r]) < 0)
			goto out;
		copied[r].s += dl.s;
		copied[r].cpu += dl.cpu;
		row("copy", r + 1, &copied[r]);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b.local);
		if (system(cmd) != 0)
			goto out;
	}
	mw = median(wd, runs);
	mr = median(raw, runs);
	mt = median(copied, runs);
	/* ratios per run (its three loads back to back), then their median: what the machine's
	 * load does to a whole run moves both sides of its ratio */
	for (int r = 0; r < runs; r++) {
		ratio_raw[r] = raw[r].s / wd[r].s;
		ratio_copied[r] = copied[r].s / wd[r].s;
	}
	rr = bench_median(ratio_raw, runs);
	rt = bench_median(ratio_copied, runs);
	printf("\nmedian of %d:\n", runs);
	printf("  weightd  %8.3f s %6.0f MB/s %6.3f CPU s/GiB\n", mw.s, mbps(&mw),
	       cpu_per_gib(&mw));
	printf("  raw      %8.3f s %6.0f MB/s %6.3f CPU s/GiB   weightd/raw rate %.2fx "
	       "(median of the runs' ratios; target >= 0.9x)\n",
	       mr.s, mbps(&mr), cpu_per_gib(&mr), rr);
	printf("  copy     %8.3f s %6.0f MB/s %6.3f CPU s/GiB   weightd %.2fx faster end to end "
	       "(median of the runs' ratios; target >= 1.5x)\n",
	       mt.s, mbps(&mt), cpu_per_gib(&mt), rt);
	rc = rr >= 0.9 && rt >= 1.5 ? 0 : 1;
	if (s3 && b.srv.s3) {
		struct sample ws, rs;
		char s3url[256];

		snprintf(section, sizeof(section),
			 "[checkpoint:ckpt]\npath = s3://%s/ckpt/\nendpoint = http://127.0.0.1:%d\n"
			 "region = us-east-1\npath_style = yes\ncredentials_file = %s\n"
			 "allow_http = yes\n",
			 b.srv.bucket, b.srv.s3, b.cred);
		snprintf(s3url, sizeof(s3url), "http://127.0.0.1:%d/%s/ckpt/", b.srv.s3,
			 b.srv.bucket);
		printf("\ns3rver behind the SigV4-checking proxy (Python: it bounds both):\n");
		if (load(&b, section, &ws) == 0 && reference(&b, s3url, true, true, &rs) == 0) {
			row("weightd", 1, &ws);
			row("raw", 1, &rs);
			printf("  weightd/raw rate %.2fx\n", rs.s / ws.s);
		} else {
			printf("  failed (see above)\n");
			rc = 1;
		}
	}
	if (azure && bench_azure(&b, runs) < 0)
		rc = 1;
ds:
	if (ds_on || ds_only) {
		ds_rc = ds_bench(&b, &ck, ds_runs, ds_derived_layers, s3);
		if (ds_rc != 0)
			rc = 1;
	}
	if (getloadavg(la, 3) < 0)
		la[0] = -1;
	printf("load average %.2f (the machine may be shared)\n", la[0]);
out:
	teardown(&b);
	ds_free(&ck);
	return rc;
}
