/* test_wire.c - requests the client library never sends, encoded by hand from proto/weightd.proto:
 * a hello of another protocol version, empty units, too many pending requests, bad release
 * handles. Each must get a clear error; but for the hello, the connection keeps serving. */
#include <poll.h>

#include "itest.h"

static struct harness H;

#define MAX_PENDING 2

/* Error codes (proto/weightd.proto ErrorCode). */
#define ERR_NOT_FOUND 2
#define ERR_LIMIT_EXCEEDED 9
#define ERR_PROTOCOL 10
#define ERR_EMPTY_INPUTS 22

/* ---- a protobuf writer: just what these requests need ---- */

struct pb {
	uint8_t b[4096];
	size_t n;
};

static void pb_varint(struct pb *p, uint64_t v)
{
	do {
		assert_true(p->n < sizeof(p->b));
		p->b[p->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
}

static void pb_uint(struct pb *p, unsigned field, uint64_t v)
{
	pb_varint(p, (uint64_t)field << 3);
	pb_varint(p, v);
}

static void pb_bytes(struct pb *p, unsigned field, const void *data, size_t len)
{
	pb_varint(p, (uint64_t)field << 3 | 2);
	pb_varint(p, len);
	assert_true(p->n + len <= sizeof(p->b));
	memcpy(p->b + p->n, data, len);
	p->n += len;
}

static void pb_str(struct pb *p, unsigned field, const char *s)
{
	pb_bytes(p, field, s, strlen(s));
}

static void pb_msg(struct pb *p, unsigned field, const struct pb *m)
{
	pb_bytes(p, field, m->b, m->n);
}

/* Request { id = 1; <body field> = body } as a frame: u32 LE length, u32 LE fd count, payload. */
static size_t frame(uint8_t *out, uint64_t id, unsigned body_field, const struct pb *body)
{
	struct pb req = { .n = 0 };

	pb_uint(&req, 1, id);
	pb_msg(&req, body_field, body);
	memset(out, 0, 8);
	out[0] = (uint8_t)req.n;
	out[1] = (uint8_t)(req.n >> 8);
	memcpy(out + 8, req.b, req.n);
	return 8 + req.n;
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		assert_true(k > 0);
		p += k;
		n -= (size_t)k;
	}
}

static void send_frame(int fd, uint64_t id, unsigned body_field, const struct pb *body)
{
	uint8_t f[4200];

	send_all(fd, f, frame(f, id, body_field, body));
}

/* Hello { protocol_version, client_name }. */
static void send_hello(int fd, uint64_t id, uint32_t version)
{
	struct pb h = { .n = 0 };

	if (version)
		pb_uint(&h, 1, version);
	pb_str(&h, 2, "test_wire");
	send_frame(fd, id, 10, &h);
}

/* Unit { entries = [UnitEntry { name, recipe = Recipe { nodes = [Node { source }] } }] }. */
static void unit_of(struct pb *unit, const char *const *tensors, size_t n)
{
	unit->n = 0;
	for (size_t i = 0; i < n; i++) {
		struct pb node = { .n = 0 }, recipe = { .n = 0 }, entry = { .n = 0 };

		pb_str(&node, 2, "tiny");
		pb_str(&node, 3, tensors[i]);
		pb_msg(&recipe, 1, &node);
		pb_str(&entry, 1, tensors[i]);
		pb_msg(&entry, 2, &recipe);
		pb_msg(unit, 1, &entry);
	}
}

/* ---- a protobuf reader ---- */

struct slice {
	const uint8_t *p;
	size_t n;
};

static bool rd_varint(struct slice *s, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64 && s->n; shift += 7) {
		uint8_t c = *s->p++;

		s->n--;
		*v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return true;
	}
	return false;
}

/*
 * The first field `field` of message m: a varint in *ret_v, or a length-delimited body in
 * *ret_s. False when absent.
 */
static bool pb_find(struct slice m, unsigned field, uint64_t *ret_v, struct slice *ret_s)
{
	while (m.n) {
		uint64_t key, v, len;

		if (!rd_varint(&m, &key))
			return false;
		switch (key & 7) {
		case 0:
			if (!rd_varint(&m, &v))
				return false;
			if ((key >> 3) == field) {
				if (ret_v)
					*ret_v = v;
				return true;
			}
			break;
		case 2:
			if (!rd_varint(&m, &len) || len > m.n)
				return false;
			if ((key >> 3) == field) {
				if (ret_s) {
					ret_s->p = m.p;
					ret_s->n = (size_t)len;
				}
				return true;
			}
			m.p += len;
			m.n -= (size_t)len;
			break;
		case 1:
			if (m.n < 8)
				return false;
			m.p += 8, m.n -= 8;
			break;
		case 5:
			if (m.n < 4)
				return false;
			m.p += 4, m.n -= 4;
			break;
		default:
			return false;
		}
	}
	return false;
}

/* One response: its id, its error code (0: none) and message, the body field present. */
struct resp {
	uint64_t id;
	uint64_t code;
	char message[1024];
	unsigned body;
	uint8_t buf[65536];
	struct slice body_msg;
};

static bool read_exact(int fd, uint8_t *p, size_t n, int timeout_ms)
{
	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		char cbuf[CMSG_SPACE(sizeof(int) * 253)];
		struct iovec iov = { .iov_base = p, .iov_len = n };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		ssize_t k;

		if (poll(&pf, 1, timeout_ms) <= 0)
			return false;
		k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (k <= 0)
			return false;
		/* close whatever fds came along: these tests never map them */
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
					int rfd;

					memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
					close(rfd);
				}
		p += k;
		n -= (size_t)k;
	}
	return true;
}

static void read_resp(int fd, struct resp *r)
{
	uint8_t hdr[8];
	uint32_t len;
	struct slice m, e;

	memset(r, 0, sizeof(*r));
	assert_true(read_exact(fd, hdr, 8, 10000));
	len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	      (uint32_t)hdr[3] << 24;
	assert_true(len <= sizeof(r->buf));
	assert_true(read_exact(fd, r->buf, len, 10000));
	m.p = r->buf;
	m.n = len;
	pb_find(m, 1, &r->id, NULL);
	if (pb_find(m, 2, NULL, &e)) {
		struct slice msg = { 0 };

		pb_find(e, 1, &r->code, NULL);
		if (pb_find(e, 2, NULL, &msg))
			snprintf(r->message, sizeof(r->message), "%.*s", (int)msg.n,
				 (const char *)msg.p);
	}
	for (unsigned f = 10; f <= 30; f++)
		if (pb_find(m, f, NULL, &r->body_msg)) {
			r->body = f;
			break;
		}
}

/* A raw connection that said a valid hello. */
static int hello_conn(void)
{
	struct resp r;
	int fd = it_raw_connect(&H);

	assert_true(fd >= 0);
	send_hello(fd, 1, 2);
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
	static const uint32_t versions[] = { 999, 1 /* before packed segments */, 0 /* unset */ };

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
static uint64_t materialized_handle(int fd, uint64_t id, const char *tensor)
{
	struct pb unit;
	struct resp r;
	struct slice w;
	uint64_t handle = 0;

	unit_of(&unit, &tensor, 1);
	send_frame(fd, id, 14, &unit);
	read_resp(fd, &r);
	assert_int_equal(r.code, 0);
	assert_int_equal(r.body, 14);
	assert_true(pb_find(r.body_msg, 1, NULL, &w));
	assert_true(pb_find(w, 2, &handle, NULL));
	assert_true(handle != 0);
	return handle;
}

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
