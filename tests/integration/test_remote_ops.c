/* SPDX-License-Identifier: Apache-2.0 */
/* Remote checkpoints in operation, against a real weightd and real servers on loopback (nginx
 * behind the fault proxy of tests/remote/servers.py, and s3rver behind its SigV4 check): two
 * processes share one remote read, a restart after kill -9 re-adopts with no payload request
 * (over S3 too, with no secret in a state record), a new ETag is a new generation on reload
 * (and the same one changes nothing), each fault the proxy makes ends in the file's exact bytes
 * or a typed error while a local checkpoint keeps being served, and a credentials file others
 * can read is refused. */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>

#include "fixture.h"
#include "files.h"
#include "servers.h"

#define N_T	 4
#define T_BYTES	 (1u << 20)
#define SEED_OLD 3
#define SEED_NEW 40

#define SEED_S3 90

static char root[512];	 /* what nginx and s3rver serve */
static char remote[600]; /* root/m.safetensors */
static char other[600];	 /* a local checkpoint, served throughout */
static struct wd_servers srv;
static int port_fault;
static uint64_t data_start; /* where m.safetensors' payload starts: 8 + its header */
static const char *const names[N_T] = { "t0", "t1", "t2", "t3" };

/* --- the servers --------------------------------------------------------------------------- */

static void ctl_at(int port, const char *query)
{
	char path[512], *out;

	snprintf(path, sizeof(path), "/__ctl?%s", query);
	out = wd_servers_get(port, path);
	assert_non_null(out);
	free(out);
}

static void ctl(const char *query)
{
	ctl_at(port_fault, query);
}

/* What a proxy saw for `object` since its last reset: requests whose range starts in the payload
 * (or that have no range: the whole object), and those that read metadata only (the payload of
 * `object` starts at `start`). */
struct seen {
	int payload, metadata;
};

static struct seen proxy_seen_at(int port, const char *object, uint64_t start)
{
	struct seen s = { 0, 0 };
	char *out = wd_servers_get(port, "/__stats");
	json_error_t je;
	json_t *j, *r;
	size_t i;

	assert_non_null(out);
	j = json_loads(out, 0, &je);
	free(out);
	assert_non_null(j);
	json_array_foreach(json_object_get(j, "ranges"), i, r) {
		const char *path = json_string_value(json_array_get(r, 0));
		const char *range = json_string_value(json_array_get(r, 1));
		unsigned long long first;

		if (!path || strcmp(path, object) != 0)
			continue;
		if (range && sscanf(range, "bytes=%llu-", &first) == 1 && first < start)
			s.metadata++;
		else
			s.payload++;
	}
	json_decref(j);
	return s;
}

static struct seen proxy_seen(void)
{
	return proxy_seen_at(port_fault, "/m.safetensors", data_start);
}

/* --- the checkpoints ----------------------------------------------------------------------- */

/* m.safetensors with the tensors' bytes of `seed`, and a new mtime (so a new ETag: nginx's is
 * mtime and size), written aside and renamed into place as an upload would replace it. */
static void write_remote(unsigned seed, time_t mtime)
{
	char tmp[700];
	struct timespec ts[2] = { { mtime, 0 }, { mtime, 0 } };

	snprintf(tmp, sizeof(tmp), "%s.new", remote);
	it_fixture("safetensors %s --seed %u --tensor t0:U8:%u --tensor t1:U8:%u --tensor t2:U8:%u "
		   "--tensor t3:U8:%u",
		   tmp, seed, T_BYTES, T_BYTES, T_BYTES, T_BYTES);
	assert_int_equal(utimensat(AT_FDCWD, tmp, ts, 0), 0);
	assert_int_equal(rename(tmp, remote), 0);
}

static uint64_t payload_start(const char *path);

/* payload_start of a file of the servers' directory */
static uint64_t payload_start_of(const char *name)
{
	char path[700];

	snprintf(path, sizeof(path), "%s/%s", root, name);
	return payload_start(path);
}

static uint64_t payload_start(const char *path)
{
	uint8_t b[8];
	uint64_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(read(fd, b, 8), 8);
	close(fd);
	for (int i = 7; i >= 0; i--)
		n = n << 8 | b[i];
	return 8 + n;
}

static void start_daemon(void)
{
	char sec[2048];

	snprintf(
		sec, sizeof(sec),
		"[checkpoint:remote]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n\n"
		"[checkpoint:other]\npath = %s\n",
		port_fault, other);
	/* ranges of 256 KiB: a tensor takes several requests, so a fault can land half way */
	it_start(&H, "remote_chunk = 256K\n", sec);
}

/* The list entry of `name` once it is no longer being admitted (up to 30 s). */
static void wait_admitted(const char *name, char *state, size_t scap, char *error, size_t ecap)
{
	int64_t end = it_now_ms() + 30000;

	for (;;) {
		weightd_client *c = it_connect(&H);
		weightd_source_list *l = NULL;
		weightd_error err;
		bool done = false;

		assert_int_equal(weightd_list(c, &l, &err), 0);
		for (size_t i = 0; i < l->count; i++) {
			const weightd_source_info *s = &l->sources[i];

			if (strcmp(s->name, name) != 0)
				continue;
			done = strcmp(s->state, "ready") == 0 || strcmp(s->state, "failed") == 0;
			snprintf(state, scap, "%s", s->state);
			snprintf(error, ecap, "%s", s->error ? s->error : "");
		}
		weightd_source_list_free(l);
		weightd_close(c);
		if (done)
			return;
		assert_true(it_now_ms() < end);
		usleep(50 * 1000);
	}
}

static void wait_ready(const char *name)
{
	char state[32], error[1024];

	wait_admitted(name, state, sizeof(state), error, sizeof(error));
	if (strcmp(state, "ready") != 0) {
		fprintf(stderr, "%s: %s: %s\n", name, state, error);
		harness_dump_log(&H);
	}
	assert_string_equal(state, "ready");
}

static void evict_all(void)
{
	weightd_client *c = it_connect(&H);
	weightd_error err;
	uint64_t w, b;

	assert_int_equal(weightd_evict(c, &w, &b, &err), 0);
	weightd_close(c);
}

static uint64_t generation_of(const char *name)
{
	weightd_status *st = it_status_of(&H);
	const weightd_source_info *s = it_source(st, name);
	uint64_t g;

	assert_non_null(s);
	g = s->generation;
	weightd_status_free(st);
	return g;
}

/* The checkpoint's remote traffic as status reports it. */
static weightd_source_remote remote_counters(const char *name)
{
	weightd_status *st = it_status_of(&H);
	const weightd_source_info *s = it_source(st, name);
	weightd_source_remote r;

	assert_non_null(s);
	assert_non_null(st->source_remote);
	r = st->source_remote[s - st->sources];
	weightd_status_free(st);
	return r;
}

static void reload(void)
{
	weightd_client *c = it_connect(&H);
	weightd_error err;

	assert_int_equal(weightd_reload(c, &err), 0);
	weightd_close(c);
}

/* --- clients in their own processes -------------------------------------------------------- */

/* What a client process reports: every tensor bound with the bytes of `seed` (0), one that
 * differs (1), or the unit's error code (negative). */
#define BOUND_OK       0
#define BOUND_MISMATCH 1

static int bind_all(weightd_client *c, const char *ckpt, unsigned seed, weightd_unit **ret)
{
	weightd_error err;
	weightd_unit *u = NULL;
	int r = it_unit_of(c, ckpt, names, N_T, true, &u, &err);

	if (r < 0)
		return r;
	for (int k = 0; k < N_T; k++) {
		const uint8_t *p = weightd_unit_data(u, names[k]);

		if (!p || it_pattern_mismatch(p, T_BYTES, seed + (unsigned)k) >= 0) {
			weightd_unit_free(u);
			return BOUND_MISMATCH;
		}
	}
	*ret = u;
	return BOUND_OK;
}

struct client {
	pid_t pid;
	int to, from; /* commands to it, its reports */
};

/*
 * A process that binds every tensor of `ckpt` and reports "bound R" (R as bind_all). Then, on
 * "c", it checks its mapped bytes again against `seed` and reports "still R"; on "q" (or EOF)
 * it exits.
 */
static struct client client_start(const char *ckpt, unsigned seed)
{
	int to[2], from[2];
	struct client cl;

	assert_int_equal(pipe2(to, O_CLOEXEC), 0);
	assert_int_equal(pipe2(from, O_CLOEXEC), 0);
	cl.pid = fork();
	assert_true(cl.pid >= 0);
	if (cl.pid == 0) {
		weightd_client *c;
		weightd_unit *u = NULL;
		weightd_error err;
		char cmd;
		int r;

		close(to[1]);
		close(from[0]);
		if (weightd_connect(H.sock, "remote-ops", &c, &err) < 0)
			_exit(3);
		r = bind_all(c, ckpt, seed, &u);
		dprintf(from[1], "bound %d\n", r);
		while (read(to[0], &cmd, 1) == 1 && cmd == 'c') {
			int still = BOUND_OK;

			for (int k = 0; u && k < N_T; k++)
				if (it_pattern_mismatch(weightd_unit_data(u, names[k]), T_BYTES,
							seed + (unsigned)k) >= 0)
					still = BOUND_MISMATCH;
			dprintf(from[1], "still %d\n", u ? still : r);
		}
		weightd_unit_free(u);
		weightd_close(c);
		_exit(0);
	}
	close(to[0]);
	close(from[1]);
	cl.to = to[1];
	cl.from = from[0];
	return cl;
}

/* Read one "WORD R" report of the client; R. */
static int client_report(struct client *cl, const char *word)
{
	char line[128];
	size_t n = 0, wl = strlen(word);
	char *end;
	long r;

	while (n + 1 < sizeof(line) && read(cl->from, &line[n], 1) == 1 && line[n] != '\n')
		n++;
	line[n] = '\0';
	if (strncmp(line, word, wl) != 0 || line[wl] != ' ')
		fail_msg("client said \"%s\", not \"%s R\"", line, word);
	r = strtol(line + wl + 1, &end, 10);
	if (*end)
		fail_msg("client said \"%s\"", line);
	return (int)r;
}

static void client_end(struct client *cl)
{
	assert_int_equal(write(cl->to, "q", 1), 1);
	close(cl->to);
	close(cl->from);
	it_wait_child_ok(cl->pid);
}

/* One client process that binds everything of ckpt and leaves; its result. */
static int client_once(const char *ckpt, unsigned seed)
{
	struct client cl = client_start(ckpt, seed);
	int r = client_report(&cl, "bound");

	client_end(&cl);
	return r;
}

/* --- setup --------------------------------------------------------------------------------- */

static int setup(void **state)
{
	char why[600], s3file[600];

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	snprintf(root, sizeof(root), "/tmp/wd-remote-ops-XXXXXX");
	if (!mkdtemp(root) || chmod(root, 0755) < 0)
		return -1;
	snprintf(remote, sizeof(remote), "%s/m.safetensors", root);
	/* s3rver takes its bucket's objects from the directory when it starts */
	snprintf(s3file, sizeof(s3file), "%s/s3.safetensors", root);
	it_fixture("safetensors %s --seed %u --tensor t0:U8:%u --tensor t1:U8:%u --tensor t2:U8:%u "
		   "--tensor t3:U8:%u",
		   s3file, SEED_S3, T_BYTES, T_BYTES, T_BYTES, T_BYTES);
	if (wd_servers_start(root, true, &srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "the test servers did not start: %s\n", why);
		return -1;
	}
	port_fault = srv.fault;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_end(&srv, root);
	return 0;
}

/* Each test: its own daemon (temp dir, prefix, state), the remote file of SEED_OLD with an mtime
 * of its own (so an ETag no earlier test saw), both checkpoints ready, the proxy's counts reset. */
static int before(void **state)
{
	static time_t mtime;

	(void)state;
	mtime = mtime ? mtime + 100 : time(NULL) - 100000;
	assert_int_equal(harness_init(&H), 0);
	harness_path(&H, "other.safetensors", other, sizeof(other));
	write_remote(SEED_OLD, mtime);
	data_start = payload_start(remote);
	it_fixture("safetensors %s --seed 70 --tensor o:U8:%u", other, T_BYTES);
	start_daemon();
	wait_ready("remote");
	wait_ready("other");
	ctl("reset=1");
	return 0;
}

static int after(void **state)
{
	(void)state;
	harness_cleanup(&H);
	return 0;
}

/* --- the tests ----------------------------------------------------------------------------- */

/* Two processes bind the remote checkpoint: the first reads it, the second reads nothing. */
static void second_process_reads_nothing(void **state)
{
	struct client a;
	struct seen s;

	(void)state;
	a = client_start("remote", SEED_OLD);
	assert_int_equal(client_report(&a, "bound"), BOUND_OK);
	s = proxy_seen();
	assert_true(s.payload > 0);
	ctl("reset=1");
	/* while the first still holds them, and after it has gone */
	assert_int_equal(client_once("remote", SEED_OLD), BOUND_OK);
	client_end(&a);
	assert_int_equal(client_once("remote", SEED_OLD), BOUND_OK);
	s = proxy_seen();
	assert_int_equal(s.payload, 0);
	assert_int_equal(s.metadata, 0);
}

/* kill -9 after a fill, start again: every weight re-adopted, not one payload byte requested
 * (the admission's metadata range reads are counted apart). */
static void restart_readopts_without_payload_requests(void **state)
{
	weightd_status *st;
	struct seen s;

	(void)state;
	assert_int_equal(client_once("remote", SEED_OLD), BOUND_OK);
	assert_true(proxy_seen().payload > 0);
	harness_kill(&H);
	ctl("reset=1");
	assert_int_equal(harness_start(&H), 0);
	wait_ready("remote");
	assert_int_equal(client_once("remote", SEED_OLD), BOUND_OK);
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, N_T);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);
	s = proxy_seen();
	printf("after the restart: %d metadata requests, %d payload requests\n", s.metadata,
	       s.payload);
	assert_int_equal(s.payload, 0);
	assert_true(s.metadata > 0); /* admission asked the server again */
}

/* A new object (a new ETag) is a new generation on reload: a client of the old one keeps its
 * weights, new requests get the new bytes. A reload that finds the same ETag changes nothing. */
static void new_etag_new_generation(void **state)
{
	weightd_source_remote rc;
	struct client a;
	struct seen s;

	(void)state;
	assert_int_equal(generation_of("remote"), 1);
	a = client_start("remote", SEED_OLD);
	assert_int_equal(client_report(&a, "bound"), BOUND_OK);

	/* the same object: nothing changes, and nothing but its identity is asked for */
	ctl("reset=1");
	reload();
	assert_int_equal(generation_of("remote"), 1);
	s = proxy_seen();
	assert_int_equal(s.payload, 0);
	assert_int_equal(client_once("remote", SEED_OLD), BOUND_OK);
	assert_int_equal(proxy_seen().payload, 0);

	/* replaced: a new generation, whose traffic adds to the name's counters */
	rc = remote_counters("remote");
	assert_true(rc.bytes >= (uint64_t)N_T * T_BYTES);
	write_remote(SEED_NEW, time(NULL) - 50);
	reload();
	wait_ready("remote");
	assert_int_equal(generation_of("remote"), 2);
	assert_true(remote_counters("remote").requests > rc.requests);
	assert_int_equal(client_once("remote", SEED_NEW), BOUND_OK);
	assert_true(remote_counters("remote").bytes >= rc.bytes + (uint64_t)N_T * T_BYTES);
	assert_int_equal(write(a.to, "c", 1), 1);
	assert_int_equal(client_report(&a, "still"), BOUND_OK);
	client_end(&a);
	/* and the old generation's weights are not served for the new one */
	assert_int_equal(client_once("remote", SEED_NEW), BOUND_OK);
}

/* A get on the local checkpoint, evicted first so that it is filled anew: its milliseconds. */
static int64_t time_local_get(void)
{
	weightd_client *c = it_connect(&H);
	weightd_weight *w;
	int64_t t0 = it_now_ms(), dt;

	w = it_get_ok(c, "other", "o");
	dt = it_now_ms() - t0;
	assert_int_equal(it_pattern_mismatch(it_map(w), T_BYTES, 70), -1);
	weightd_release(w);
	weightd_close(c);
	return dt;
}

/*
 * One fault of the proxy during a cold fill of the remote checkpoint, in a client process; the
 * local checkpoint is fetched meanwhile and must come within `bound_ms`. The client's result.
 */
static int under_fault(const char *fault, int bound_ms)
{
	struct client cl;
	int64_t dt;
	int r;

	evict_all();
	ctl("reset=1");
	ctl(fault);
	cl = client_start("remote", SEED_OLD);
	usleep(300 * 1000); /* the fault under way */
	dt = time_local_get();
	printf("%s: a local get took %lld ms\n", fault, (long long)dt);
	assert_true(dt < bound_ms);
	r = client_report(&cl, "bound");
	client_end(&cl);
	return r;
}

/* Connections cut mid-body, 503 SlowDown, 500 and a stalled answer: retried, resumed, and the
 * checkpoint's exact bytes in the end. */
static void faults_end_in_the_exact_bytes(void **state)
{
	static const char *const faults[] = { "fault=drop&n=3&after=100000", "fault=503&n=3",
					      "fault=500&n=2", "fault=stall&n=1&seconds=4" };

	(void)state;
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		weightd_source_remote before = remote_counters("remote"), now;
		struct seen s;
		int r = under_fault(faults[i], 2000);

		if (r != BOUND_OK)
			harness_dump_log(&H);
		assert_int_equal(r, BOUND_OK);
		s = proxy_seen();
		assert_true(s.payload > 0);
		/* what the proxy broke was retried, and nothing failed */
		now = remote_counters("remote");
		printf("%s: %llu requests, %llu retries\n", faults[i],
		       (unsigned long long)(now.requests - before.requests),
		       (unsigned long long)(now.retries - before.retries));
		if (strstr(faults[i], "stall") == NULL)
			assert_true(now.retries > before.retries);
		assert_int_equal(now.errors, before.errors);
	}
}

/* The object replaced half way through a fill: source-changed, and no weight with a byte of the
 * new object is ever served from the old generation; after a reload, the new bytes whole. */
static void swap_half_way_is_source_changed(void **state)
{
	weightd_client *c;
	char q[256];
	int r;

	(void)state;
	snprintf(q, sizeof(q), "fault=swap&path=/m.safetensors&after=3");
	r = under_fault(q, 2000);
	assert_int_equal(r, -WEIGHTD_E_SOURCE_CHANGED);
	assert_true(remote_counters("remote").errors > 0);
	/* whatever the old generation still serves is wholly the old object's */
	c = it_connect(&H);
	for (int k = 0; k < N_T; k++) {
		weightd_weight *w = NULL;
		weightd_error err;
		int g = it_get(c, "remote", names[k], &w, &err);

		if (g == 0) {
			assert_int_equal(
				it_pattern_mismatch(it_map(w), T_BYTES, SEED_OLD + (unsigned)k),
				-1);
			weightd_release(w);
		} else {
			assert_int_equal(g, -WEIGHTD_E_SOURCE_CHANGED);
		}
	}
	weightd_close(c);
	/* a clean copy put back, a reload: the new generation, whole */
	write_remote(SEED_OLD, time(NULL) - 20);
	reload();
	wait_ready("remote");
	assert_int_equal(client_once("remote", SEED_OLD), BOUND_OK);
}

/* An S3 credentials file in the daemon's directory (its path in `path`): a default profile of
 * `key` and `secret`, with `mode`. */
static void s3_credentials(char *path, size_t cap, const char *key, const char *secret,
			   mode_t mode)
{
	char text[512];

	harness_path(&H, "s3.credentials", path, cap);
	snprintf(text, sizeof(text), "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		 key, secret);
	tf_write(path, text, mode);
}

/* A credentials file that others can read is refused at admission, naming it and its mode; the
 * rest of the daemon serves on. */
static void readable_credentials_refused(void **state)
{
	char creds[600], sec[2048], st[32], error[1024];

	(void)state;
	harness_stop(&H);
	s3_credentials(creds, sizeof(creds), "AKIDEXAMPLE",
		       "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", 0644);
	snprintf(sec, sizeof(sec),
		 "[checkpoint:s3]\npath = s3://bkt/m.safetensors\nendpoint = http://127.0.0.1:%d\n"
		 "path_style = yes\nallow_http = yes\ncredentials_file = %s\n\n"
		 "[checkpoint:other]\npath = %s\n",
		 port_fault, creds, other);
	it_start(&H, "remote_chunk = 256K\n", sec);
	wait_admitted("s3", st, sizeof(st), error, sizeof(error));
	printf("refused: %s\n", error);
	assert_string_equal(st, "failed");
	assert_non_null(strstr(error, creds));
	assert_non_null(strstr(error, "0644"));
	assert_null(strstr(error, "wJalrXUtnFEMI"));
	assert_true(time_local_get() < 2000);
}

/* Does any file under dir (recursively) contain `needle`? Names the first that does. */
static bool tree_contains(const char *dir, const char *needle, char *found, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool hit = false;

	while (d && !hit && (e = readdir(d))) {
		char path[1200];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			hit = tree_contains(path, needle, found, cap);
		} else if (S_ISREG(st.st_mode)) {
			FILE *f = fopen(path, "r");
			char *buf = f ? malloc((size_t)st.st_size + 1) : NULL;

			if (buf && fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
				buf[st.st_size] = '\0';
				hit = memmem(buf, (size_t)st.st_size, needle, strlen(needle)) !=
				      NULL;
				if (hit)
					snprintf(found, cap, "%s", path);
			}
			free(buf);
			if (f)
				fclose(f);
		}
	}
	if (d)
		closedir(d);
	return hit;
}

/* Over S3 (SigV4 checked by botocore): kill -9 after a fill and a start re-adopt every weight
 * with no payload request, and neither the state records nor the log hold the access key or the
 * secret key. */
static void s3_restart_readopts_and_records_hold_no_secret(void **state)
{
	char creds[600], sec[2048], statedir[600], found[1200] = "";
	uint64_t s3_start = payload_start_of("s3.safetensors");
	struct seen s;

	(void)state;
	harness_stop(&H);
	s3_credentials(creds, sizeof(creds), srv.s3_key, srv.s3_secret, 0600);
	snprintf(sec, sizeof(sec),
		 "[checkpoint:s3]\npath = s3://%s/s3.safetensors\nendpoint = http://127.0.0.1:%d\n"
		 "path_style = yes\nallow_http = yes\nregion = us-east-1\ncredentials_file = %s\n",
		 srv.bucket, srv.s3, creds);
	it_start(&H, "remote_chunk = 256K\n", sec);
	wait_ready("s3");
	ctl_at(srv.s3, "reset=1");
	assert_int_equal(client_once("s3", SEED_S3), BOUND_OK);
	s = proxy_seen_at(srv.s3, "/bkt/s3.safetensors", s3_start);
	assert_true(s.payload > 0);

	harness_kill(&H);
	ctl_at(srv.s3, "reset=1");
	assert_int_equal(harness_start(&H), 0);
	wait_ready("s3");
	assert_int_equal(client_once("s3", SEED_S3), BOUND_OK);
	s = proxy_seen_at(srv.s3, "/bkt/s3.safetensors", s3_start);
	printf("after the restart: %d metadata requests, %d payload requests\n", s.metadata,
	       s.payload);
	assert_int_equal(s.payload, 0);
	assert_true(s.metadata > 0);
	{
		weightd_status *st = it_status_of(&H);

		assert_int_equal(st->readoptions, N_T);
		weightd_status_free(st);
	}
	harness_path(&H, "state", statedir, sizeof(statedir));
	assert_true(tree_contains(statedir, "s3:t0", found, sizeof(found))); /* the records */
	if (tree_contains(statedir, srv.s3_secret, found, sizeof(found)) ||
	    tree_contains(statedir, srv.s3_key, found, sizeof(found)))
		fail_msg("%s holds a credential", found);
	assert_false(harness_log_contains(&H, srv.s3_secret));
	/* the access key id is no secret: the log names it, with where it came from */
	assert_true(harness_log_contains(&H, srv.s3_key));
}

TEST_MAIN(setup, teardown,
	  cmocka_unit_test_setup_teardown(second_process_reads_nothing, before, after),
	  cmocka_unit_test_setup_teardown(restart_readopts_without_payload_requests, before, after),
	  cmocka_unit_test_setup_teardown(new_etag_new_generation, before, after),
	  cmocka_unit_test_setup_teardown(faults_end_in_the_exact_bytes, before, after),
	  cmocka_unit_test_setup_teardown(swap_half_way_is_source_changed, before, after),
	  cmocka_unit_test_setup_teardown(readable_credentials_refused, before, after),
	  cmocka_unit_test_setup_teardown(s3_restart_readopts_and_records_hold_no_secret, before,
					  after))
