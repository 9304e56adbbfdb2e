/* test_wire.c - requests the client library never sends, encoded by hand from proto/weightd.proto:
 * a hello of another protocol version, empty units, too many pending requests, bad release
 * handles. Each must get a clear error; but for the hello, the connection keeps serving. */
#include "rawwire.h"

static struct harness H;

#define MAX_PENDING 2

/* Error codes (proto/weightd.proto ErrorCode). */
#define ERR_NOT_FOUND 2
#define ERR_LIMIT_EXCEEDED 9
#define ERR_PROTOCOL 10
#define ERR_EMPTY_INPUTS 22

/* A raw connection that said a valid hello. */
static int hello_conn(void)
{
	struct resp r;
	int fd = it_raw_connect(&H);

	assert_true(fd >= 0);
	send_hello(fd, 1, 1);
	read_resp(fd, &r);
	assert_int_equal(r.code, 0);
	assert_int_equal(r.body, 10);
	return fd;
}

/* The connection still answers: a status request gets a status reply. */
static void still_serving(int fd, uint64_t id)
{
	struct pb empty = { .n = 0 };
	struct resp r;

	send_frame(fd, id, 17, &empty);
	read_resp(fd, &r);
	assert_int_equal(r.id, id);
	assert_int_equal(r.code, 0);
	assert_int_equal(r.body, 17);
}

static int setup(void **state)
{
	char sample[512], args[700], sections[1024], extra[128];

	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "tiny.safetensors", sample, sizeof(sample));
	snprintf(args, sizeof(args), "sample %s", sample);
	if (harness_mkfixture(args) < 0)
		return -1;
	snprintf(sections, sizeof(sections), "[checkpoint:tiny]\npath = %s\n", sample);
	snprintf(extra, sizeof(extra), "client_max_pending = %d\n", MAX_PENDING);
	if (harness_write_config(&H, extra, sections) < 0 || harness_start(&H) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_cleanup(&H);
	return 0;
}

/* A hello of a version this daemon does not speak gets ERR_PROTOCOL naming the version. */
static void hello_with_another_version_is_refused(void **state)
{
	static const uint32_t versions[] = { 999, 0 /* unset */ };

	(void)state;
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		struct resp r;
		char want[64];
		int fd = it_raw_connect(&H);

		assert_true(fd >= 0);
		send_hello(fd, 7, versions[i]);
		read_resp(fd, &r);
		assert_int_equal(r.id, 7);
		assert_int_equal(r.code, ERR_PROTOCOL);
		snprintf(want, sizeof(want), "protocol version %u", versions[i]);
		if (!strstr(r.message, want))
			fail_msg("message: %s", r.message);
		close(fd);
	}
	/* and the daemon serves the next client */
	close(hello_conn());
}

/* A unit with no entries is refused as empty, for materialize and preflight alike. */
static void empty_units_are_refused(void **state)
{
	struct pb unit = { .n = 0 };
	struct resp r;
	int fd = hello_conn();

	(void)state;
	for (unsigned body = 13; body <= 14; body++) { /* preflight, materialize */
		send_frame(fd, 20 + body, body, &unit);
		read_resp(fd, &r);
		assert_int_equal(r.id, 20 + body);
		assert_int_equal(r.code, ERR_EMPTY_INPUTS);
		assert_non_null(strstr(r.message, "no entries"));
	}
	still_serving(fd, 40);
	close(fd);
}

/*
 * Past client_max_pending materializations in flight, more are refused with a limit error and
 * the connection keeps serving. All requests go in one write, so the daemon reads them in one go,
 * before any job can finish.
 */
static void too_many_pending_requests_are_refused(void **state)
{
	static const char *const tensors[] = {
		"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
		"model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
		"model.layers.0.mlp.up_proj.weight",      "model.layers.0.mlp.down_proj.weight",
	};
	enum { N = sizeof(tensors) / sizeof(tensors[0]) };
	static uint8_t frames[N * 4200];
	size_t len = 0;
	int ok = 0, refused = 0, fd = hello_conn();

	(void)state;
	for (size_t i = 0; i < N; i++) {
		struct pb unit;

		unit_of(&unit, &tensors[i], 1);
		len += frame(frames + len, 100 + i, 14, &unit);
	}
	send_all(fd, frames, len);
	for (size_t i = 0; i < N; i++) {
		struct resp r;

		read_resp(fd, &r);
		assert_true(r.id >= 100 && r.id < 100 + N);
		if (r.code == 0) {
			assert_int_equal(r.body, 14);
			ok++;
		} else {
			assert_int_equal(r.code, ERR_LIMIT_EXCEEDED);
			assert_non_null(strstr(r.message, "too many unit requests in flight"));
			refused++;
		}
	}
	print_message("%d materialized, %d refused (limit %d)\n", ok, refused, MAX_PENDING);
	assert_true(ok >= MAX_PENDING);
	assert_true(refused >= 1);
	assert_int_equal(ok + refused, N);
	/* nothing is left pending: the limit's worth goes through again */
	for (size_t i = 0; i < MAX_PENDING; i++) {
		struct pb unit;
		struct resp r;

		unit_of(&unit, &tensors[N - 1 - i], 1);
		send_frame(fd, 200 + i, 14, &unit);
		read_resp(fd, &r);
		assert_int_equal(r.code, 0);
	}
	still_serving(fd, 300);
	close(fd);
}

/* The handle of the one weight in a materialize reply (UnitReply.weights[0].handle). */
/* Release { handles = [...] } (unpacked repeated varints, which decoders must accept). */
static void send_release(int fd, uint64_t id, const uint64_t *handles, size_t n)
{
	struct pb rel = { .n = 0 };

	for (size_t i = 0; i < n; i++)
		pb_uint(&rel, 1, handles[i]);
	send_frame(fd, id, 16, &rel);
}

static void expect_release(int fd, uint64_t id, const uint64_t *handles, size_t n, uint64_t code)
{
	struct resp r;

	send_release(fd, id, handles, n);
	read_resp(fd, &r);
	assert_int_equal(r.id, id);
	if (r.code != code)
		fail_msg("release answered %llu (%s), wanted %llu", (unsigned long long)r.code,
			 r.message, (unsigned long long)code);
	if (code == ERR_NOT_FOUND)
		assert_non_null(strstr(r.message, "does not hold weight"));
	if (code == 0)
		assert_int_equal(r.body, 16);
}

/* Handles a client does not hold (or holds fewer times) are refused, and change nothing. */
static void bad_release_handles_are_refused(void **state)
{
	uint64_t h, list[3];
	int fd = hello_conn();

	(void)state;
	/* a handle never handed out */
	list[0] = 987654321;
	expect_release(fd, 50, list, 1, ERR_NOT_FOUND);
	/* nothing at all is fine */
	expect_release(fd, 51, list, 0, 0);

	h = materialized_handle(fd, 52, "model.norm.weight");
	/* held once, released twice: refused whole, so the one reference stays */
	list[0] = h;
	list[1] = h;
	expect_release(fd, 53, list, 2, ERR_NOT_FOUND);
	/* a good handle beside a bad one: refused whole too */
	list[1] = 987654321;
	expect_release(fd, 54, list, 2, ERR_NOT_FOUND);
	/* the reference is still there to release, once */
	expect_release(fd, 55, list, 1, 0);
	expect_release(fd, 56, list, 1, ERR_NOT_FOUND);
	/* another client's handle is not this client's */
	{
		int other = hello_conn();
		uint64_t oh = materialized_handle(other, 60, "model.layers.0.input_layernorm.weight");

		expect_release(fd, 57, &oh, 1, ERR_NOT_FOUND);
		expect_release(other, 61, &oh, 1, 0);
		close(other);
	}
	still_serving(fd, 58);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hello_with_another_version_is_refused),
		cmocka_unit_test(empty_units_are_refused),
		cmocka_unit_test(too_many_pending_requests_are_refused),
		cmocka_unit_test(bad_release_handles_are_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
