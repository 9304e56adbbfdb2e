/* test_limits.c - the size and descriptor walls: a unit over max_unit_entries, a request over
 * max_message, a client and a daemon out of file descriptors. Each must be a clear error naming
 * the limit, with the daemon still serving others and nothing leaked. */
#include <sys/resource.h>

#include "st_writer.h"
#include "itest.h"

static struct harness H;

static int setup(void **state)
{
	return harness_init(&H) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	harness_cleanup(&H);
	return 0;
}

/* m: tensors t0..t{n-1}, U8 [4096], bytes pattern with seed i. */
static void small_checkpoint(const char *name, int n, char *sec, size_t cap)
{
	struct stw_tensor ts[8];
	char path[512], names[8][16];

	assert_true(n <= 8);
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "t%d", i);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = "U8", .ndim = 1, .shape = { 4096 },
					     .pattern = STW_BYTES, .seed = (uint32_t)i };
	}
	harness_path(&H, name, path, sizeof(path));
	assert_int_equal(stw_write(path, ts, (size_t)n, NULL, 0, NULL), 0);
	snprintf(sec, cap, "[checkpoint:m]\npath = %s\n", path);
}

/* A daemon that is quiet (nothing in flight, no reference, only the asker connected): its
 * settled fds and segments, to compare before and after. */
struct quiet {
	int fds, segments;
	uint64_t weights;
};

static struct quiet quiet_now(void)
{
	weightd_client *c;
	weightd_status *st = it_quiet_with(&H, 0, 0, 10000, &c);
	struct quiet q = { harness_settled_fds(&H), harness_segments(&H), st->weights };

	assert_int_equal(st->materializations_in_flight, 0);
	assert_int_equal(st->references, 0);
	assert_int_equal(st->clients, 1);
	weightd_status_free(st);
	weightd_close(c);
	return q;
}

static void assert_same_quiet(struct quiet a, struct quiet b)
{
	assert_int_equal(b.weights, a.weights);
	assert_int_equal(b.segments, a.segments);
	if (b.fds != a.fds) {
		harness_dump_fds(H.pid);
		fail_msg("the daemon holds %d fds, %d before", b.fds, a.fds);
	}
}

/* Another client is served while (or after) one hits a wall. */
static void others_are_served(void)
{
	weightd_client *c = it_connect(&H);
	weightd_weight *w = it_get_ok(c, "m", "t0");

	assert_int_equal(it_pattern_mismatch(it_map(w), 4096, 0), -1);
	weightd_release(w);
	weightd_close(c);
}

/* A unit of n slots, all from t0 (one weight, n entries). */
static int unit_of(weightd_client *c, int n, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, err);

	for (int i = 0; r >= 0 && i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "slot.%d", i);
		r = weightd_unit_slot(u, name, NULL, NULL, 0, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, name, "m", "t0", NULL, err);
	}
	if (r >= 0)
		r = weightd_unit_submit(u, err);
	if (r >= 0)
		r = weightd_unit_validate(u, err);
	if (r < 0) {
		weightd_unit_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

/* max_unit_entries = 1000: 1,000 entries bind, 1,001 are refused naming the limit and the count. */
static void unit_over_max_unit_entries(void **state)
{
	char sec[700];
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_error err;
	struct quiet q0;

	small_checkpoint("m.safetensors", 1, sec, sizeof(sec));
	it_start(&H, "max_unit_entries = 1000", sec);
	others_are_served();
	q0 = quiet_now();

	c = it_connect(&H);
	assert_int_equal(unit_of(c, 1000, &u, &err), 0);
	weightd_unit_free(u);
	u = NULL;
	assert_int_equal(unit_of(c, 1001, &u, &err), -WEIGHTD_E_LIMIT_EXCEEDED);
	print_message("1,001 entries: %s\n", err.message);
	assert_non_null(strstr(err.message, "1000"));
	assert_non_null(strstr(err.message, "1001"));
	others_are_served();
	weightd_close(c);
	assert_same_quiet(q0, quiet_now());
}

/* max_message = 64K: a unit whose request is larger is refused naming the limit and the size;
 * one just as large in entries but under it in bytes is served (several frames are fine). */
static void request_over_max_message(void **state)
{
	char sec[700];
	weightd_client *c;
	weightd_unit *u = NULL;
	weightd_error err;
	struct quiet q0;

	small_checkpoint("m.safetensors", 1, sec, sizeof(sec));
	it_start(&H, "max_message = 64K\nmax_frame = 16K", sec);
	others_are_served();
	q0 = quiet_now();

	c = it_connect(&H);
	assert_int_equal(unit_of(c, 400, &u, &err), 0); /* ~20 KB: two frames, under the limit */
	weightd_unit_free(u);
	u = NULL;
	assert_int_equal(unit_of(c, 5000, &u, &err), -WEIGHTD_E_LIMIT_EXCEEDED); /* ~250 KB */
	print_message("5,000 entries: %s\n", err.message);
	assert_true(strstr(err.message, "65536") || strstr(err.message, "64K") ||
		    strstr(err.message, "64 KiB"));
	others_are_served();
	weightd_close(c);
	assert_same_quiet(q0, quiet_now());
}

/* Is this message about file descriptors and RLIMIT_NOFILE (or its names: ulimit -n,
 * LimitNOFILE)? */
static bool names_nofile(const char *m)
{
	return strstr(m, "RLIMIT_NOFILE") || strstr(m, "LimitNOFILE") || strstr(m, "ulimit -n");
}

/*
 * A client with no descriptor left asks for a weight: resource-exhausted naming the client's
 * RLIMIT_NOFILE, never protocol-error; with descriptors free again it is served, and the daemon
 * holds no reference for the reply it could not take.
 */
static void client_out_of_fds(void **state)
{
	char sec[700];
	struct quiet q0;
	struct {
		int rc, again;
		char msg[768];
	} res = { 0 };
	int from[2];
	pid_t pid;

	small_checkpoint("m.safetensors", 1, sec, sizeof(sec));
	it_start(&H, NULL, sec);
	others_are_served(); /* t0 is cached: the client's request only needs its fd */
	q0 = quiet_now();

	assert_int_equal(pipe(from), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 64, 64 };
		weightd_client *c = NULL;
		weightd_weight *w = NULL;
		weightd_error err;
		int fill[64], n = 0;

		close(from[0]);
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || weightd_connect(H.sock, "starved", &c, &err) < 0)
			_exit(1);
		while (n < 64 && (fill[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
			n++;
		res.rc = it_get(c, "m", "t0", &w, &err);
		snprintf(res.msg, sizeof(res.msg), "%s", err.message);
		weightd_release(w);
		w = NULL;
		for (int i = 0; i < n; i++)
			close(fill[i]);
		/* descriptors free again: the same process is served (the library may have closed the
		 * connection whose reply it could not take: then on a new one) */
		res.again = it_get(c, "m", "t0", &w, &err);
		if (res.again < 0) { /* the library may have closed that connection: a new one */
			weightd_close(c);
			c = NULL;
			res.again = weightd_connect(H.sock, "starved", &c, &err);
			if (res.again == 0)
				res.again = it_get(c, "m", "t0", &w, &err);
		}
		if (res.again == 0 && it_pattern_mismatch(it_map(w), 4096, 0) >= 0)
			res.again = -1;
		if (write(from[1], &res, sizeof(res)) != (ssize_t)sizeof(res))
			_exit(2);
		weightd_release(w);
		weightd_close(c);
		_exit(0);
	}
	close(from[1]);
	assert_int_equal(read(from[0], &res, sizeof(res)), (ssize_t)sizeof(res));
	close(from[0]);
	it_wait_child_ok(pid);
	print_message("client out of fds: %s (%s)\n", res.msg, weightd_code_name(res.rc));
	assert_int_equal(res.rc, -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_true(names_nofile(res.msg));
	assert_int_equal(res.again, 0);
	others_are_served();
	assert_same_quiet(q0, quiet_now());
}

#define DAEMON_NOFILE 48

/*
 * The daemon with every descriptor taken (connections that never say hello fill its table):
 * a request that needs a new segment fails with resource-exhausted naming weightd's
 * RLIMIT_NOFILE; when descriptors free up, the same request is served.
 */
static void daemon_out_of_fds(void **state)
{
	char sec[700];
	int raw[80], n_raw, r;
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	struct quiet q0;

	small_checkpoint("m.safetensors", 2, sec, sizeof(sec));
	assert_int_equal(harness_write_config(&H, NULL, sec), 0);
	r = harness_start_with_nofile(&H, DAEMON_NOFILE);
	if (r == HARNESS_UNSUPPORTED)
		skip();
	assert_int_equal(r, 0);
	others_are_served();
	c = it_connect(&H);
	for (n_raw = 0; n_raw < 80; n_raw++) {
		raw[n_raw] = it_raw_connect(&H);
		assert_true(raw[n_raw] >= 0);
	}
	for (int i = 0; i < 500 && harness_count_fds(H.pid) < DAEMON_NOFILE; i++)
		usleep(10000);
	assert_true(harness_settled_fds(&H) >= DAEMON_NOFILE);

	r = it_get(c, "m", "t1", &w, &err);
	print_message("daemon out of fds: %s (%s)\n", err.message, weightd_code_name(r));
	assert_int_equal(r, -WEIGHTD_E_RESOURCE_EXHAUSTED);
	assert_true(names_nofile(err.message));
	assert_non_null(strstr(err.message, "weightd"));

	for (int i = 0; i < n_raw; i++)
		close(raw[i]);
	w = it_get_ok(c, "m", "t1");
	assert_int_equal(it_pattern_mismatch(it_map(w), 4096, 1), -1);
	weightd_release(w);
	weightd_close(c);
	/* nothing held for the failed request, and steady from here on */
	q0 = quiet_now();
	assert_int_equal(q0.weights, 2);
	others_are_served();
	assert_same_quiet(q0, quiet_now());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(unit_over_max_unit_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(request_over_max_message, setup, teardown),
		cmocka_unit_test_setup_teardown(client_out_of_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(daemon_out_of_fds, setup, teardown),
	};

	if (getenv("WD_TEST_FILTER"))
		cmocka_set_test_filter(getenv("WD_TEST_FILTER"));
	alarm(290);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
