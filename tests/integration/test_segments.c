/* SPDX-License-Identifier: Apache-2.0 */
/* test_segments.c - packed shared-memory segments against a real weightd: thousands of weights
 * bound under `ulimit -n 1024` with a handful of fds and mappings, a second process mapping the
 * same objects reading nothing, share in place, re-adoption of packed segments after kill -9,
 * eviction and idle limits inside segments, multi-frame requests, limits named, and fd
 * exhaustion in the client and in the daemon. Each ends with the leak check. */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "fixture.h"
#include "st_writer.h"
#include "weightd.pb-c.h"

#define N_MANY 3000

static int setup(void **state)
{
	(void)state;
	return harness_init(&H) < 0 ? -1 : 0;
}

/* Tensor i of many.safetensors: U8, sizes from 64 bytes to about 9 KB (some a page or more),
 * bytes pattern with seed i. */
static uint64_t many_bytes(size_t i)
{
	return 64 + (i * 397) % 9000;
}

static void many_name(size_t i, char *out, size_t cap)
{
	snprintf(out, cap, "t.%05zu", i);
}

/* Write many.safetensors with n tensors; its path in out. Returns the payload bytes. */
static uint64_t write_many(size_t n, char *out, size_t cap)
{
	struct stw_tensor *ts = calloc(n, sizeof(*ts));
	char (*names)[16] = calloc(n, sizeof(*names));
	uint64_t total = 0;

	assert_non_null(ts);
	assert_non_null(names);
	harness_path(&H, "many.safetensors", out, cap);
	for (size_t i = 0; i < n; i++) {
		many_name(i, names[i], sizeof(names[i]));
		ts[i].name = names[i];
		ts[i].dtype = "U8";
		ts[i].ndim = 1;
		ts[i].shape[0] = many_bytes(i);
		ts[i].pattern = STW_BYTES;
		ts[i].seed = (uint32_t)i;
		total += many_bytes(i);
	}
	assert_int_equal(stw_write(out, ts, n, NULL, 0, NULL), 0);
	free(ts);
	free(names);
	return total;
}

static void start_many(size_t n, const char *extra, uint64_t *ret_total)
{
	char path[512], sec[1024];
	uint64_t total = write_many(n, path, sizeof(path));

	snprintf(sec, sizeof(sec), "[checkpoint:many]\npath = %s\n", path);
	it_start(&H, extra, sec);
	if (ret_total)
		*ret_total = total;
}

/* Build and submit a unit of tensors [first, first + n) of "many"; validate. */
static int bind_many(weightd_client *c, size_t first, size_t n, weightd_unit **ret,
		     weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, err);

	for (size_t i = first; r >= 0 && i < first + n; i++) {
		char name[16];

		many_name(i, name, sizeof(name));
		r = weightd_unit_slot(u, name, "U8", (uint64_t[]){ many_bytes(i) }, 1, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, name, "many", name, NULL, err);
	}
	r = it_unit_end(u, r, true, ret, err);
	if (r == 0)
		weightd_unit_bind(*ret);
	return r;
}

/* fds this process has open. */
static int self_fds(void)
{
	return harness_count_fds(getpid());
}

/* Lines of /proc/self/maps that map one of the daemon's segments. */
static int self_segment_maps(void)
{
	FILE *m = fopen("/proc/self/maps", "r");
	char line[1024], needle[128];
	int n = 0;

	assert_non_null(m);
	snprintf(needle, sizeof(needle), "/%s.", H.prefix);
	while (fgets(line, sizeof(line), m))
		n += strstr(line, needle) != NULL;
	fclose(m);
	return n;
}

/*
 * In a child under RLIMIT_NOFILE 1024: bind tensors [0, n) as one unit, check every byte and
 * every address's alignment, and write "bound READ FDS MAPS DEV:INO..." (the distinct segment
 * objects) to fd out. Exit status 0 on success.
 */
static void child_bind_many(size_t n, int out)
{
	struct rlimit rl = { 1024, 1024 };
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	int fds0, fds1, maps;
	char line[4096];
	size_t off;
	uint64_t seen[16][2];
	size_t n_seen = 0;

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		_exit(10);
	fds0 = self_fds();
	if (weightd_connect(H.sock, "many", &c, &err) < 0 || bind_many(c, 0, n, &u, &err) < 0) {
		fprintf(stderr, "child: %s\n", err.message);
		_exit(11);
	}
	for (size_t i = 0; i < n; i++) {
		char name[16];
		const weightd_weight *w;
		const uint8_t *p;
		struct stat st;
		size_t k;

		many_name(i, name, sizeof(name));
		w = weightd_unit_weight(u, name);
		p = weightd_unit_data(u, name);
		if (!w || !p || it_pattern_mismatch(p, many_bytes(i), (unsigned)i) >= 0)
			_exit(12);
		if ((uintptr_t)p % 64 || weightd_weight_offset(w) % 64 ||
		    (many_bytes(i) >= 4096 && weightd_weight_offset(w) % 4096))
			_exit(13);
		if (fstat(weightd_weight_fd(w), &st) < 0)
			_exit(14);
		for (k = 0; k < n_seen; k++)
			if (seen[k][0] == (uint64_t)st.st_dev && seen[k][1] == (uint64_t)st.st_ino)
				break;
		if (k == n_seen) {
			if (n_seen == 16)
				_exit(15);
			seen[n_seen][0] = (uint64_t)st.st_dev;
			seen[n_seen++][1] = (uint64_t)st.st_ino;
		}
	}
	fds1 = self_fds();
	maps = self_segment_maps();
	off = (size_t)snprintf(line, sizeof(line), "bound %llu %d %d",
			       (unsigned long long)weightd_unit_bytes_read(u), fds1 - fds0, maps);
	for (size_t k = 0; k < n_seen && off < sizeof(line) - 48; k++)
		off += (size_t)snprintf(line + off, sizeof(line) - off, " %llu:%llu",
					(unsigned long long)seen[k][0],
					(unsigned long long)seen[k][1]);
	snprintf(line + off, sizeof(line) - off, "\n");
	if (write(out, line, strlen(line)) < 0)
		_exit(16);
	weightd_unit_free(u);
	weightd_close(c);
	_exit(0);
}

static void run_bind_child(size_t n, char *line, size_t cap)
{
	int p[2];
	pid_t pid;
	ssize_t got;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		child_bind_many(n, p[1]);
	}
	close(p[1]);
	got = read(p[0], line, cap - 1);
	close(p[0]);
	it_wait_child_ok(pid);
	assert_true(got > 0);
	line[got] = '\0';
}

/*
 * Thousands of weights as one unit, bound by a process under `ulimit -n 1024`: it holds one fd
 * and one mapping per segment (here one), reads every byte right, each weight 64-byte aligned
 * (page aligned when a page or more). A second process binds the same unit reading nothing and
 * maps the very same objects. The daemon holds one fd per segment.
 */
static void thousands_of_weights_few_fds(void **state)
{
	char a[4096], b[4096], segs_a[4000], segs_b[4000];
	unsigned long long read_a, read_b;
	int fds_a, maps_a, fds_b, maps_b, base;
	uint64_t total;
	weightd_status *st;

	(void)state;
	start_many(N_MANY, NULL, &total);
	base = it_fd_base(&H);
	run_bind_child(N_MANY, a, sizeof(a));
	assert_int_equal(sscanf(a, "bound %llu %d %d %3999[^\n]", &read_a, &fds_a, &maps_a, segs_a),
			 4);
	print_message("first process: %s", a);
	assert_int_equal(read_a, total);          /* every byte read once */
	st = it_status_of(&H);
	assert_int_equal(st->weights, N_MANY);
	assert_int_equal(st->segments, 1);        /* one request, one checkpoint, under the cap */
	assert_int_equal(st->n_segments, 1);
	assert_int_equal(st->segment_list[0].weights, N_MANY);
	assert_true(st->segment_list[0].size >= total);
	assert_int_equal(st->n_weights, N_MANY);
	weightd_status_free(st);
	/* the summary: the same counters and segments, no list of weights */
	{
		weightd_client *c = it_connect(&H);
		weightd_error err;

		assert_int_equal(weightd_status_summary(c, &st, &err), 0);
		assert_int_equal(st->weights, N_MANY);
		assert_int_equal(st->n_weights, 0);
		assert_int_equal(st->n_segments, 1);
		assert_int_equal(st->segment_list[0].weights, N_MANY);
		assert_int_equal(st->bytes_resident, total);
		weightd_status_free(st);
		weightd_close(c);
	}
	/* the socket and the segment's fd; one mapping */
	assert_true(fds_a <= 2);
	assert_int_equal(maps_a, 1);

	/* weightctl shows the segment and where each weight lies (status --json), and counts it in
	 * the metrics */
	{
		static char out[4 << 20];
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "--json", "status",
				 NULL };
		char *margv[] = { (char *)harness_weightctl(), "--socket", H.sock, "metrics", NULL };
		json_t *j, *g, *ws;
		size_t i;

		assert_int_equal(harness_run(argv, out, sizeof(out), (uid_t)-1), 0);
		j = json_loads(out, 0, NULL);
		assert_non_null(j);
		assert_int_equal(json_integer_value(json_object_get(j, "segments")), 1);
		g = json_array_get(json_object_get(j, "segment_list"), 0);
		assert_int_equal(json_integer_value(json_object_get(g, "weights")), N_MANY);
		assert_int_equal(json_integer_value(json_object_get(g, "held")), 0);
		json_array_foreach(json_object_get(j, "weight_list"), i, ws) {
			assert_int_equal(json_integer_value(json_object_get(ws, "segment")),
					 json_integer_value(json_object_get(g, "id")));
			assert_int_equal(json_integer_value(json_object_get(ws, "offset")) % 64, 0);
		}
		json_decref(j);
		assert_int_equal(harness_run(margv, out, sizeof(out), (uid_t)-1), 0);
		assert_non_null(strstr(out, "\nweightd_segments 1\n"));
		assert_non_null(strstr(out, "\nweightd_idle_segments 1\n"));
	}

	run_bind_child(N_MANY, b, sizeof(b));
	assert_int_equal(sscanf(b, "bound %llu %d %d %3999[^\n]", &read_b, &fds_b, &maps_b, segs_b),
			 4);
	assert_int_equal(read_b, 0);              /* the second process read nothing */
	assert_string_equal(segs_a, segs_b);      /* and mapped the same object */
	assert_int_equal(maps_b, 1);
	it_leak_check(&H, base, 0);
}

/* share hands another reference to the same segment at the same offset; the client keeps one
 * fd and one mapping for the segment. */
static void share_is_same_segment_and_offset(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_weight *sh = NULL;
	weightd_error err;
	const weightd_weight *w;
	const void *p = NULL;
	int fds0, base;

	(void)state;
	start_many(64, NULL, NULL);
	base = it_fd_base(&H);
	c = it_connect(&H);
	fds0 = self_fds();
	assert_int_equal(bind_many(c, 0, 64, &u, &err), 0);
	assert_int_equal(self_fds(), fds0 + 1);
	w = weightd_unit_weight(u, "t.00017");
	assert_int_equal(weightd_share(w, &sh, &err), 0);
	assert_int_equal(weightd_weight_segment(sh), weightd_weight_segment(w));
	assert_int_equal(weightd_weight_offset(sh), weightd_weight_offset(w));
	assert_int_not_equal(weightd_weight_handle(sh), 0);
	assert_int_equal(self_fds(), fds0 + 1);   /* the reply's fd was the segment already held */
	assert_int_equal(weightd_weight_map(sh, &p, &err), 0);
	assert_ptr_equal(p, weightd_unit_data(u, "t.00017")); /* one mapping, same address */
	assert_int_equal(self_segment_maps(), 1);
	/* the share outlives the unit: the segment stays mapped for it */
	weightd_unit_free(u);
	assert_int_equal(it_pattern_mismatch(p, many_bytes(17), 17), -1);
	assert_int_equal(self_fds(), fds0 + 1);
	weightd_release(sh);
	assert_int_equal(self_fds(), fds0);
	assert_int_equal(self_segment_maps(), 0);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/* The path of the segment weight `tensor` lies in, and its offset. */
static void segment_of(const weightd_status *st, const char *tensor, char *path, size_t cap,
		       uint64_t *ret_off)
{
	const weightd_weight_status *ws = it_weight(st, "many", tensor);

	assert_non_null(ws);
	*ret_off = ws->offset;
	for (size_t k = 0; k < st->n_segments; k++)
		if (st->segment_list[k].id == ws->segment) {
			snprintf(path, cap, "%s%s", H.shm_dir, st->segment_list[k].name);
			return;
		}
	fail_msg("no segment %llu in status", (unsigned long long)ws->segment);
}

/* Every byte of the first n weights of unit u (bound by bind_many from 0) is its pattern. */
static void check_many(weightd_unit *u, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char name[16];

		many_name(i, name, sizeof(name));
		assert_int_equal(it_pattern_mismatch(weightd_unit_data(u, name), many_bytes(i),
						     (unsigned)i), -1);
	}
}

/*
 * kill -9 and a restart re-adopt a packed segment whole, reading nothing; with verify_adopted a
 * weight whose bytes changed in the segment is dropped alone, and only it is read again.
 */
static void restart_readopts_packed_segment(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;
	char seg[512];
	uint64_t off;
	int fd, base;

	(void)state;
	start_many(50, "verify_adopted = yes", NULL);
	c = it_connect(&H);
	assert_int_equal(bind_many(c, 0, 50, &u, &err), 0);
	weightd_unit_free(u);
	st = it_status(c);
	assert_int_equal(st->segments, 1);
	segment_of(st, "t.00007", seg, sizeof(seg), &off);
	weightd_status_free(st);
	weightd_close(c);
	harness_kill(&H);

	/* one byte of t.00007 changed in place, inside the packed segment */
	fd = open(seg, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\x5a", 1, (off_t)off + 3), 1);
	close(fd);

	assert_int_equal(harness_start(&H), 0);
	assert_true(harness_log_contains(&H, "do not have the recorded xxh3-128 digest"));
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, 49);
	assert_int_equal(st->weights, 49);
	assert_int_equal(st->segments, 1);
	assert_int_equal(st->bytes_read, 0);
	assert_null(it_weight(st, "many", "t.00007"));
	weightd_status_free(st);
	base = it_fd_base(&H);

	c = it_connect(&H);
	assert_int_equal(bind_many(c, 0, 50, &u, &err), 0);
	assert_int_equal(weightd_unit_bytes_read(u), many_bytes(7)); /* only the dropped one */
	check_many(u, 50);
	weightd_unit_free(u);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/*
 * Forty units of two weights each make forty segments, forty state records; a restart reads the
 * records in batches on a few threads and re-adopts every one, reading nothing. (A unit of one
 * new weight would go into the shared arena with the others.)
 */
static void restart_readopts_many_records(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;

	(void)state;
	start_many(80, NULL, NULL);
	c = it_connect(&H);
	for (size_t i = 0; i < 40; i++) {
		assert_int_equal(bind_many(c, 2 * i, 2, &u, &err), 0);
		weightd_unit_free(u);
	}
	st = it_status(c);
	assert_int_equal(st->segments, 40);
	weightd_status_free(st);
	weightd_close(c);
	harness_kill(&H);

	assert_int_equal(harness_start(&H), 0);
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, 80);
	assert_int_equal(st->weights, 80);
	assert_int_equal(st->segments, 40);
	weightd_status_free(st);
	c = it_connect(&H);
	assert_int_equal(bind_many(c, 0, 80, &u, &err), 0);
	assert_int_equal(weightd_unit_bytes_read(u), 0);
	check_many(u, 80);
	weightd_unit_free(u);
	weightd_close(c);
}

/* Blocks of a file in /dev/shm (its memory), in bytes. */
static uint64_t file_mem(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/*
 * Under budget pressure single weights are evicted out of a packed segment (least recently
 * released first) and their pages are given back while the segment lives for its other
 * weights; the idle-segment limit evicts whole segments nobody holds.
 */
static void eviction_inside_packed_segments(void **state)
{
	char path[512], sec[1024], seg[512];
	weightd_client *c;
	weightd_unit *ua = NULL, *ub = NULL;
	weightd_status *st;
	weightd_error err;
	uint64_t off, mem0, mem1;
	const char *a[8] = { "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7" };
	const char *b[8] = { "b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7" };
	struct stw_tensor ts[16];
	int base;

	(void)state;
	harness_path(&H, "e.safetensors", path, sizeof(path));
	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < 16; i++) {
		ts[i].name = i < 8 ? a[i] : b[i - 8];
		ts[i].dtype = "U8";
		ts[i].ndim = 1;
		ts[i].shape[0] = 256 * 1024;
		ts[i].pattern = STW_BYTES;
		ts[i].seed = (uint32_t)i;
	}
	assert_int_equal(stw_write(path, ts, 16, NULL, 0, NULL), 0);
	snprintf(sec, sizeof(sec), "[checkpoint:e]\npath = %s\n", path);
	it_start(&H, "budget = 3M\nmax_idle_segments = 1", sec);
	base = it_fd_base(&H);
	c = it_connect(&H);

	/* unit A: 2 MiB in one segment, then released (a0..a7 released in slot order) */
	assert_int_equal(weightd_unit_new(c, &ua, &err), 0);
	for (int i = 0; i < 8; i++) {
		assert_true(weightd_unit_slot(ua, a[i], NULL, NULL, 0, NULL, &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(ua, a[i], "e", a[i], NULL, &err), 0);
	}
	assert_int_equal(weightd_unit_submit(ua, &err), 0);
	assert_int_equal(weightd_unit_validate(ua, &err), 0);
	weightd_unit_free(ua);
	st = it_status(c);
	assert_int_equal(st->segments, 1);
	assert_int_equal(st->idle_weights, 8);
	assert_int_equal(st->idle_segments, 1);
	{
		char name[64];
		const weightd_weight_status *ws;

		snprintf(name, sizeof(name), "a0");
		ws = it_weight(st, "e", name);
		assert_non_null(ws);
		for (size_t k = 0; k < st->n_segments; k++)
			if (st->segment_list[k].id == ws->segment)
				snprintf(seg, sizeof(seg), "%s%s", H.shm_dir, st->segment_list[k].name);
		off = ws->offset;
	}
	weightd_status_free(st);
	mem0 = file_mem(seg);
	assert_true(mem0 >= 2u << 20);

	/* unit B needs 2 MiB with 1 MiB free: four of A's weights go, the rest of A stays */
	assert_int_equal(weightd_unit_new(c, &ub, &err), 0);
	for (int i = 0; i < 8; i++) {
		assert_true(weightd_unit_slot(ub, b[i], NULL, NULL, 0, NULL, &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(ub, b[i], "e", b[i], NULL, &err), 0);
	}
	assert_int_equal(weightd_unit_submit(ub, &err), 0);
	assert_int_equal(weightd_unit_validate(ub, &err), 0);
	st = it_status(c);
	assert_int_equal(st->evictions, 4);
	assert_int_equal(st->weights, 12);
	assert_int_equal(st->segments, 2);
	for (int i = 0; i < 8; i++)
		assert_true((it_weight(st, "e", a[i]) != NULL) == (i >= 4));
	weightd_status_free(st);
	mem1 = file_mem(seg);
	print_message("segment of A: %llu bytes of memory before, %llu after 4 evictions\n",
		      (unsigned long long)mem0, (unsigned long long)mem1);
	assert_true(mem1 + (1u << 20) <= mem0);    /* the evicted weights' pages went back */
	assert_int_equal(access(seg, F_OK), 0);    /* the segment lives for a4..a7 */
	(void)off;

	/* B released: two idle segments, over max_idle_segments = 1: A's (released first) goes */
	weightd_unit_free(ub);
	st = it_status(c);
	assert_int_equal(st->idle_segments, 1);
	assert_int_equal(st->segments, 1);
	assert_int_equal(st->weights, 8);
	assert_non_null(it_weight(st, "e", "b0"));
	weightd_status_free(st);
	assert_int_equal(access(seg, F_OK), -1);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/*
 * With max_frame at its minimum (4 KiB), a unit request of a few hundred KB travels as many
 * frames and its reply too; with max_unit_entries low, a larger unit fails before anything is
 * sent, naming the limit and the value; and a raw request over max_message gets an error naming
 * max_message before the connection closes.
 */
static void size_limits_are_frames_not_walls(void **state)
{
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_error err;
	int base, r;

	(void)state;
	start_many(N_MANY, "max_frame = 4096\nmax_message = 1M\nmax_unit_entries = 2500", NULL);
	base = it_fd_base(&H);
	c = it_connect(&H);
	assert_int_equal(weightd_server(c)->max_frame_bytes, 4096);
	assert_int_equal(weightd_server(c)->max_message_bytes, 1u << 20);

	/* 2,500 entries: about 100 KB each way, 25+ frames */
	assert_int_equal(bind_many(c, 0, 2500, &u, &err), 0);
	assert_int_equal(it_pattern_mismatch(weightd_unit_data(u, "t.02499"), many_bytes(2499),
					     2499), -1);
	weightd_unit_free(u);

	/* 2,501: over max_unit_entries, refused by name with the value */
	r = bind_many(c, 0, 2501, &u, &err);
	assert_int_equal(r, -WEIGHTD_E_LIMIT_EXCEEDED);
	assert_non_null(strstr(err.message, "max_unit_entries"));
	assert_non_null(strstr(err.message, "2501"));
	assert_int_equal(err.expected, 2500);
	assert_int_equal(err.actual, 2501);
	weightd_close(c);

	/* the daemon checks too: a hand-made request of 2,501 entries, sent raw */
	{
		Weightd__Request req = WEIGHTD__REQUEST__INIT;
		Weightd__Unit unit = WEIGHTD__UNIT__INIT;
		Weightd__UnitEntry *es = calloc(2501, sizeof(*es)), **ep = calloc(2501, sizeof(*ep));
		Weightd__Response *resp;
		uint8_t *buf, hdr[8];
		size_t len, got = 0;
		int fd = it_raw_connect(&H);
		char names[2501][12];

		assert_true(fd >= 0);
		for (size_t i = 0; i < 2501; i++) {
			weightd__unit_entry__init(&es[i]);
			snprintf(names[i], sizeof(names[i]), "e%zu", i);
			es[i].name = names[i];
			ep[i] = &es[i];
		}
		unit.n_entries = 2501;
		unit.entries = ep;
		req.id = 5;
		req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
		req.materialize = &unit;
		len = weightd__request__get_packed_size(&req);
		buf = malloc(len);
		weightd__request__pack(&req, buf);
		/* frames of 4,000 bytes, every one but the last flagged "more" */
		for (size_t off = 0; off < len; off += 4000) {
			size_t n = len - off < 4000 ? len - off : 4000;
			uint32_t word = off + n < len ? 0x80000000u : 0;

			for (int k = 0; k < 4; k++) {
				hdr[k] = (uint8_t)(n >> (8 * k));
				hdr[4 + k] = (uint8_t)(word >> (8 * k));
			}
			assert_int_equal(write(fd, hdr, 8), 8);
			assert_int_equal(write(fd, buf + off, n), (ssize_t)n);
		}
		free(buf);
		assert_int_equal(read(fd, hdr, 8), 8);
		len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (size_t)hdr[3] << 24;
		buf = malloc(len);
		while (got < len) {
			ssize_t n = read(fd, buf + got, len - got);
			assert_true(n > 0);
			got += (size_t)n;
		}
		resp = weightd__response__unpack(NULL, len, buf);
		assert_non_null(resp);
		assert_int_equal(resp->id, 5);
		assert_non_null(resp->error);
		assert_int_equal(resp->error->code, WEIGHTD__ERROR_CODE__ERR_LIMIT_EXCEEDED);
		assert_non_null(strstr(resp->error->message, "max_unit_entries"));
		assert_non_null(strstr(resp->error->message, "2501"));
		weightd__response__free_unpacked(resp, NULL);
		free(buf);

		/* over max_message (1 MiB) in 4 KiB frames: named, then the connection closes */
		buf = calloc(1, 4096);
		for (int i = 0; i < 300; i++) {
			uint32_t word = 0x80000000u;

			for (int k = 0; k < 4; k++) {
				hdr[k] = (uint8_t)(4096 >> (8 * k));
				hdr[4 + k] = (uint8_t)(word >> (8 * k));
			}
			/* MSG_NOSIGNAL: the daemon closes once it is over (EPIPE, not SIGPIPE) */
			if (send(fd, hdr, 8, MSG_NOSIGNAL) != 8 ||
			    send(fd, buf, 4096, MSG_NOSIGNAL) != 4096)
				break;
		}
		assert_int_equal(read(fd, hdr, 8), 8);
		len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (size_t)hdr[3] << 24;
		free(buf);
		buf = malloc(len);
		got = 0;
		while (got < len) {
			ssize_t n = read(fd, buf + got, len - got);
			assert_true(n > 0);
			got += (size_t)n;
		}
		resp = weightd__response__unpack(NULL, len, buf);
		assert_non_null(resp);
		assert_non_null(resp->error);
		assert_int_equal(resp->error->code, WEIGHTD__ERROR_CODE__ERR_LIMIT_EXCEEDED);
		assert_non_null(strstr(resp->error->message, "max_message"));
		weightd__response__free_unpacked(resp, NULL);
		free(buf);
		close(fd);
		free(es);
		free(ep);
	}
	it_leak_check(&H, base, 0);
}

/*
 * A client out of descriptors when a reply's fds arrive gets resource-exhausted naming its
 * RLIMIT_NOFILE, never a protocol error; the daemon takes its references back when it goes,
 * and serves everyone else throughout.
 */
static void client_out_of_fds_is_named(void **state)
{
	int p[2], base;
	pid_t pid;
	char line[1024] = "";
	ssize_t got;
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_error err;

	(void)state;
	start_many(64, NULL, NULL);
	base = it_fd_base(&H);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 64, 64 };
		weightd_client *cc = NULL;
		weightd_unit *cu = NULL;
		weightd_error e;
		int r;

		close(p[0]);
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0 ||
		    weightd_connect(H.sock, "starved", &cc, &e) < 0)
			_exit(10);
		while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0)
			;   /* every descriptor taken */
		r = bind_many(cc, 0, 64, &cu, &e);
		dprintf(p[1], "%d %s\n", r, e.message);
		weightd_close(cc);
		_exit(0);
	}
	close(p[1]);
	got = read(p[0], line, sizeof(line) - 1);
	close(p[0]);
	it_wait_child_ok(pid);
	assert_true(got > 0);
	line[got] = '\0';
	print_message("starved client: %s", line);
	assert_int_equal(atoi(line), -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(line, "RLIMIT_NOFILE"));
	assert_non_null(strstr(line, "this process"));
	assert_null(strstr(line, "protocol"));

	/* everyone else is served, and the starved client's references went with it */
	c = it_connect(&H);
	assert_int_equal(bind_many(c, 0, 64, &u, &err), 0);
	weightd_unit_free(u);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/*
 * A daemon out of descriptors (one per segment) answers a request for a new segment with
 * resource-exhausted naming its own RLIMIT_NOFILE and LimitNOFILE=, and serves again once
 * segments are let go.
 */
static void daemon_out_of_fds_is_named(void **state)
{
	char path[512], sec[1024];
	weightd_client *c, *other;
	weightd_unit *held[64];
	weightd_error err;
	weightd_weight *w = NULL;
	size_t n = 0;
	int r = 0, base;

	(void)state;
	write_many(128, path, sizeof(path));
	snprintf(sec, sizeof(sec), "[checkpoint:many]\npath = %s\n", path);
	assert_int_equal(harness_write_config(&H, "max_idle_segments = 0", sec), 0);
	r = harness_start_with_nofile(&H, 40);
	if (r == HARNESS_UNSUPPORTED)
		skip();
	assert_int_equal(r, 0);
	base = it_fd_base(&H);
	other = it_connect(&H);   /* another client, connected before the daemon runs out */
	c = it_connect(&H);
	/* each unit of two new weights makes a segment of its own, held: one daemon fd each */
	for (n = 0; n < 64; n++) {
		r = bind_many(c, 2 * n, 2, &held[n], &err);
		if (r < 0)
			break;
	}
	assert_true(n < 64);
	print_message("daemon out of fds after %zu segments: %s\n", n, err.message);
	assert_int_equal(r, -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(err.message, "weightd"));
	assert_non_null(strstr(err.message, "RLIMIT_NOFILE"));
	assert_non_null(strstr(err.message, "LimitNOFILE"));
	/* the other client is served meanwhile what needs no new descriptor. A weight held
	 * already needs one all the same (each client gets its own description of a segment, the
	 * one its kernel locks go on): it comes whole if a descriptor is free, else is refused with
	 * the same words */
	{
		weightd_status *st = it_status(other);

		assert_int_equal(st->segments, n);
		weightd_status_free(st);
		r = it_get(other, "many", "t.00000", &w, &err);
		if (r == 0) {
			assert_int_equal(it_pattern_mismatch(it_map(w), many_bytes(0), 0), -1);
			weightd_release(w);
		} else {
			assert_int_equal(r, -WEIGHTD_E_RESOURCE_EXHAUSTED);
			assert_non_null(strstr(err.message, "LimitNOFILE"));
		}
	}
	weightd_close(other);
	/* let go: the daemon serves again (the held weights stay cached, one fd each) */
	for (size_t i = 0; i < n; i++)
		weightd_unit_free(held[i]);
	{
		uint64_t ev = 0, bytes = 0;
		weightd_client *admin = it_connect(&H);

		assert_int_equal(weightd_evict(admin, &ev, &bytes, &err), 0);
		weightd_close(admin);
	}
	w = it_get_ok(c, "many", "t.00127");
	weightd_release(w);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/*
 * No size wall: a unit of 1,048,576 entries (slots over 1,024 tensors, so each weight is named
 * by 1,024 entries) is declared, sent in frames, answered and bound; every slot points at its
 * tensor's bytes, and the whole unit holds one segment. The sanitizer build, ~10x slower, sends
 * a quarter of them (262,144) down the same path.
 */
#if defined(__SANITIZE_ADDRESS__)
#define UNIT_ENTRIES (1u << 18)
#else
#define UNIT_ENTRIES (1u << 20)
#endif

static void a_million_entries(void **state)
{
	const size_t n = UNIT_ENTRIES, tensors = 1024;
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_error err;
	weightd_status *st;
	struct timespec t0, t1;
	char name[24], tn[16];
	int base, fds0;

	(void)state;
	start_many(tensors, NULL, NULL);
	base = it_fd_base(&H);
	c = it_connect(&H);
	fds0 = self_fds();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "s%07zu", i);
		many_name(i % tensors, tn, sizeof(tn));
		assert_true(weightd_unit_slot(u, name, NULL, NULL, 0, NULL, &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(u, name, "many", tn, NULL, &err), 0);
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
		fail_msg("a unit of %zu entries: %s", n, err.message);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	print_message("%zu entries declared, materialized, validated in %.1f s\n", n,
		      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	assert_int_equal(self_fds(), fds0 + 1);
	for (size_t i = 0; i < n; i += 4099) {
		snprintf(name, sizeof(name), "s%07zu", i);
		assert_int_equal(it_pattern_mismatch(weightd_unit_data(u, name),
						     many_bytes(i % tensors),
						     (unsigned)(i % tensors)), -1);
	}
	st = it_status(c);
	assert_int_equal(st->weights, tensors);
	assert_int_equal(st->references, n);
	assert_int_equal(st->segments, 1);
	weightd_status_free(st);
	weightd_unit_free(u);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

/*
 * 65,536 chained aliases (each names the one before, the first names the entry) resolve to the
 * entry: every slot is the entry's memory. Resolution is linear; the quadratic walk this
 * replaces took minutes here and stalled every client meanwhile.
 */
static void chained_aliases_resolve(void **state)
{
	const size_t n = 65536;
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_error err;
	char name[24];
	int base;

	(void)state;
	start_many(4, NULL, NULL);
	base = it_fd_base(&H);
	c = it_connect(&H);
	assert_int_equal(weightd_unit_new(c, &u, &err), 0);
	assert_true(weightd_unit_slot(u, "e", NULL, NULL, 0, NULL, &err) >= 0);
	assert_int_equal(weightd_unit_set_tensor(u, "e", "many", "t.00003", NULL, &err), 0);
	assert_int_equal(it_alias_chain(u, "e", n, &err), 0);
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
		fail_msg("chained aliases: %s", err.message);
	for (size_t i = 0; i < n; i += 997) {
		snprintf(name, sizeof(name), "a%zu", i);
		assert_ptr_equal(weightd_unit_data(u, name), weightd_unit_data(u, "e"));
	}
	assert_ptr_equal(weightd_unit_data(u, "a65535"), weightd_unit_data(u, "e"));
	assert_int_equal(it_pattern_mismatch(weightd_unit_data(u, "a65535"), many_bytes(3), 3), -1);
	weightd_unit_free(u);
	weightd_close(c);
	it_leak_check(&H, base, 0);
}

TEST_MAIN(NULL, NULL,
	  cmocka_unit_test_setup_teardown(thousands_of_weights_few_fds, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(share_is_same_segment_and_offset, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(restart_readopts_packed_segment, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(restart_readopts_many_records, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(eviction_inside_packed_segments, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(size_limits_are_frames_not_walls, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(client_out_of_fds_is_named, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(daemon_out_of_fds_is_named, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(chained_aliases_resolve, setup, fixture_cleanup),
	  cmocka_unit_test_setup_teardown(a_million_entries, setup, fixture_cleanup))
