/* SPDX-License-Identifier: Apache-2.0 */
/* test_wire.c - requests encoded by hand from proto/weightd.proto, many of which the client library
 * never sends: hellos of other protocol versions and ranges, empty units, too many pending
 * requests, bad release handles, share of held and not-held handles. Each must get a clear error;
 * but for a refused hello, the connection keeps serving. */
#include "fixture.h"
#include "rawwire.h"
#include "weightd.pb-c.h"

#define MAX_PENDING 2

/* Error codes (proto/weightd.proto ErrorCode). */
#define ERR_NOT_FOUND 2
#define ERR_LIMIT_EXCEEDED 9
#define ERR_INVALID_ARGUMENT 1
#define ERR_UNSUPPORTED_VERSION 56
#define ERR_EMPTY_INPUTS 22

#define DAEMON_MIN ((uint32_t)WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_MIN)
#define DAEMON_MAX ((uint32_t)WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT)

/* A raw connection that said a valid hello. */
static int hello_conn(void)
{
	struct resp r;
	int fd = it_raw_connect(&H);

	assert_true(fd >= 0);
	send_hello(fd, 1, DAEMON_MAX);
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
	char sample[512], sections[1024], extra[128];

	(void)state;
	if (harness_init(&H) < 0 ||
	    harness_sample(&H, "tiny.safetensors", sample, sizeof(sample)) < 0)
		return -1;
	snprintf(sections, sizeof(sections), "[checkpoint:tiny]\npath = %s\n", sample);
	/* max_unit_entries at 65,536 (its default is 1,048,576) keeps the over-limit requests small */
	snprintf(extra, sizeof(extra), "client_max_pending = %d\nmax_unit_entries = 65536\n",
		 MAX_PENDING);
	return fixture_start(extra, sections);
}

/* The connection is closed by the daemon: reading gives end of file. */
static void expect_closed(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	assert_int_equal(poll(&p, 1, 10000), 1);
	assert_int_equal(read(fd, &c, 1), 0);
}

/*
 * Versions are ranges: a hello whose range overlaps the daemon's gets the newest version in
 * both, and the daemon's own range (HelloReply 14, 15). One with no version in common gets
 * ERR_UNSUPPORTED_VERSION naming both ranges and which side to upgrade, then the connection
 * closes; a minimum above the maximum is an invalid argument.
 */
static void hello_versions_are_ranges(void **state)
{
	/* the daemon's range (the proto's), whatever this libweightd speaks */
	const uint32_t lo = DAEMON_MIN, hi = DAEMON_MAX;
	static const struct { uint32_t min, max; } ok[] = {
		{ DAEMON_MAX, 0 },                  /* a client of one version */
		{ DAEMON_MIN, DAEMON_MAX + 7 },     /* a newer client */
		{ 1, DAEMON_MAX },                  /* older versions too */
		{ DAEMON_MIN, DAEMON_MIN },
	};
	char want[256];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct resp r;
		uint64_t v = 0, dmin = 0, dmax = 0;
		int fd = it_raw_connect(&H);

		assert_true(fd >= 0);
		send_hello_range(fd, 3, ok[i].min, ok[i].max);
		read_resp(fd, &r);
		if (r.code)
			fail_msg("range %u..%u refused: %s", ok[i].min, ok[i].max, r.message);
		assert_int_equal(r.body, 10);
		assert_true(pb_find(r.body_msg, 1, &v, NULL));
		assert_true(pb_find(r.body_msg, 14, &dmin, NULL));
		assert_true(pb_find(r.body_msg, 15, &dmax, NULL));
		assert_int_equal(v, ok[i].max == 0 ? ok[i].min : ok[i].max < hi ? ok[i].max : hi);
		assert_int_equal(dmin, lo);
		assert_int_equal(dmax, hi);
		still_serving(fd, 4);
		close(fd);
	}
	{
		/* a client too new: it speaks only versions above ours */
		struct resp r;
		int fd = it_raw_connect(&H);

		send_hello_range(fd, 5, hi + 1, hi + 3);
		read_resp(fd, &r);
		assert_int_equal(r.id, 5);
		assert_int_equal(r.code, ERR_UNSUPPORTED_VERSION);
		snprintf(want, sizeof(want), "no protocol version in common: the client speaks protocol "
			 "versions %u to %u, this weightd", hi + 1, hi + 3);
		if (!strstr(r.message, want) || !strstr(r.message, "upgrade weightd"))
			fail_msg("message: %s", r.message);
		snprintf(want, sizeof(want), "speaks %u to %u", lo, hi);
		assert_non_null(strstr(r.message, want));
		expect_closed(fd);
		close(fd);
	}
	if (lo > 1) {
		/* a client too old (possible once versions below the minimum are dropped) */
		struct resp r;
		int fd = it_raw_connect(&H);

		send_hello(fd, 6, lo - 1);
		read_resp(fd, &r);
		assert_int_equal(r.code, ERR_UNSUPPORTED_VERSION);
		assert_non_null(strstr(r.message, "upgrade the client's libweightd"));
		close(fd);
	}
	{
		struct resp r;
		int fd = it_raw_connect(&H);

		send_hello_range(fd, 8, hi + 2, hi + 1);
		read_resp(fd, &r);
		assert_int_equal(r.code, ERR_INVALID_ARGUMENT);
		snprintf(want, sizeof(want), "protocol_version %u (the oldest the client speaks) is above "
			 "max_protocol_version %u", hi + 2, hi + 1);
		assert_non_null(strstr(r.message, want));
		expect_closed(fd);
		close(fd);
	}
	/* and the daemon serves the next client */
	close(hello_conn());
}

/*
 * A hello of one version this daemon does not speak, or of none, is refused by name. A peer of
 * version 2 (a unit's reply one WeightInfo per output) or 1 (one fd per weight), or of the range
 * 1 to 2, is told which side to upgrade, and its connection is closed.
 */
static void hello_with_another_version_is_refused(void **state)
{
	static const struct {
		uint32_t min, max;
		const char *said;
	} cases[] = {
		{ 999, 0, "the client speaks protocol versions 999 to 999" },
		{ 2, 0, "the client speaks protocol versions 2 to 2" },
		{ 1, 2, "the client speaks protocol versions 1 to 2" },
		{ 1, 0, "the client speaks protocol versions 1 to 1" },
		{ 0, 0, "the client gave no protocol version" },
	};
	char want[64];

	(void)state;
	snprintf(want, sizeof(want), "speaks %u to %u; upgrade the client's libweightd", DAEMON_MIN,
		 DAEMON_MAX);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct resp r;
		int fd = it_raw_connect(&H);

		assert_true(fd >= 0);
		send_hello_range(fd, 7, cases[i].min, cases[i].max);
		read_resp(fd, &r);
		assert_int_equal(r.id, 7);
		assert_int_equal(r.code, ERR_UNSUPPORTED_VERSION);
		assert_int_equal(r.nfds, 0);
		if (!strstr(r.message, cases[i].said))
			fail_msg("message: %s", r.message);
		if (cases[i].min && cases[i].min < DAEMON_MIN && !strstr(r.message, want))
			fail_msg("message: %s", r.message);
		expect_closed(fd);
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

/* Append a varint to buf at *n. */
static void put_varint(uint8_t *buf, size_t *n, uint64_t v)
{
	while (v >= 0x80) {
		buf[(*n)++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	buf[(*n)++] = (uint8_t)v;
}

/*
 * Request { id, <body_field> = { `first` (2 bytes, when given), then `count` copies of the 2
 * bytes `item` } } as one frame: `count` empty entries (0a 00), empty aliases (12 00) or
 * handles 1 (08 01) of a body message.
 */
static void send_repeated(int fd, uint64_t id, unsigned body_field, const uint8_t *first,
			  const uint8_t item[2], size_t count)
{
	size_t cap = 2 * count + 64, n = 8, body = 2 * count + (first ? 2 : 0);
	uint8_t *f = malloc(cap);

	assert_non_null(f);
	memset(f, 0, 8);
	f[n++] = 0x08;
	put_varint(f, &n, id);
	put_varint(f, &n, (uint64_t)body_field << 3 | 2);
	put_varint(f, &n, body);
	if (first) {
		f[n++] = first[0];
		f[n++] = first[1];
	}
	for (size_t i = 0; i < count; i++) {
		f[n++] = item[0];
		f[n++] = item[1];
	}
	f[0] = (uint8_t)(n - 8);
	f[1] = (uint8_t)((n - 8) >> 8);
	f[2] = (uint8_t)((n - 8) >> 16);
	send_all(fd, f, n);
	free(f);
}

/* 65,537 entries, aliases or release handles are refused by the limit (max_unit_entries, set to
 * 65,536 here), before anything else is looked at, the error naming the limit and the count;
 * 65,536 pass the limit (and fail on what they are: nameless entries, handles not held). */
static void too_many_entries_are_refused(void **state)
{
	static const uint8_t entry[2] = { 0x0a, 0x00 }, alias[2] = { 0x12, 0x00 },
			     handle[2] = { 0x08, 0x01 };
	static const struct { unsigned body; const uint8_t *item; const char *said; } cases[] = {
		{ 14, entry, "the unit has 65537 entries; this weightd allows at most 65536 "
			     "(max_unit_entries)" },
		{ 13, entry, "the unit has 65537 entries; this weightd allows at most 65536 "
			     "(max_unit_entries)" },
		{ 16, handle, "a release of 65537 handles; at most 65536 (max_unit_entries)" },
	};
	int fd = hello_conn();

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct resp r;

		send_repeated(fd, 70 + i, cases[i].body, NULL, cases[i].item, 65537);
		read_resp(fd, &r);
		assert_int_equal(r.id, 70 + i);
		assert_int_equal(r.code, ERR_LIMIT_EXCEEDED);
		if (!strstr(r.message, cases[i].said))
			fail_msg("message: %s", r.message);
		send_repeated(fd, 80 + i, cases[i].body, NULL, cases[i].item, 65536);
		read_resp(fd, &r);
		assert_int_equal(r.id, 80 + i);
		assert_true(r.code != 0 && r.code != ERR_LIMIT_EXCEEDED);
	}
	{
		/* one entry and 65,537 aliases */
		struct resp r;

		send_repeated(fd, 90, 14, entry, alias, 65537);
		read_resp(fd, &r);
		assert_int_equal(r.code, ERR_LIMIT_EXCEEDED);
	}
	still_serving(fd, 99);
	close(fd);
}

/* Share { handle }: a held handle gets a ShareReply for the same weight and one fd, and a second
 * reference (one release is not enough to let go); a handle not held, released, or held by
 * another connection is NOT_FOUND naming it. */
static void share_hands_another_reference_to_a_held_weight(void **state)
{
	struct pb sh;
	struct resp r;
	struct slice w;
	uint64_t h, got = 0, list[1];
	char want[96];
	int fd = hello_conn(), other;

	(void)state;
	h = materialized_handle(fd, 60, "model.layers.0.mlp.up_proj.weight");
	sh.n = 0;
	pb_uint(&sh, 1, h);
	send_frame(fd, 61, 15, &sh);
	read_resp(fd, &r);
	assert_int_equal(r.id, 61);
	assert_int_equal(r.code, 0);
	assert_int_equal(r.body, 15);
	assert_int_equal(r.nfds, 1);
	assert_true(pb_find(r.body_msg, 1, NULL, &w));
	assert_true(pb_find(w, 2, &got, NULL));
	assert_int_equal(got, h);
	/* two references now: released twice, refused a third time */
	list[0] = h;
	expect_release(fd, 62, list, 1, 0);
	expect_release(fd, 63, list, 1, 0);
	expect_release(fd, 64, list, 1, ERR_NOT_FOUND);
	/* released: nothing left to share */
	send_frame(fd, 65, 15, &sh);
	read_resp(fd, &r);
	assert_int_equal(r.code, ERR_NOT_FOUND);
	assert_int_equal(r.nfds, 0);
	snprintf(want, sizeof(want), "this client holds no weight with handle %llu",
		 (unsigned long long)h);
	assert_non_null(strstr(r.message, want));
	/* another connection's weight is not this one's to share */
	other = hello_conn();
	h = materialized_handle(other, 66, "model.layers.0.mlp.up_proj.weight");
	sh.n = 0;
	pb_uint(&sh, 1, h);
	send_frame(fd, 67, 15, &sh);
	read_resp(fd, &r);
	assert_int_equal(r.code, ERR_NOT_FOUND);
	still_serving(fd, 68);
	still_serving(other, 69);
	close(other);
	close(fd);
}

/* Request { id, quiet = true, release = `rel` } as one frame. */
static void send_quiet_release(int fd, uint64_t id, const struct pb *rel)
{
	struct pb req = { .n = 0 };
	uint8_t f[4200];

	pb_uint(&req, 1, id);
	pb_uint(&req, 6, 1);
	pb_msg(&req, 16, rel);
	memset(f, 0, 8);
	f[0] = (uint8_t)req.n;
	memcpy(f + 8, req.b, req.n);
	send_all(fd, f, 8 + req.n);
}

/* A release marked quiet (Request.quiet) is answered only when it fails: the next reply on the
 * connection is the next request's, and a refused one still gets its error. */
static void quiet_release_is_answered_only_when_it_fails(void **state)
{
	struct pb rel = { .n = 0 };
	struct resp r;
	uint64_t h;
	int fd = hello_conn();

	(void)state;
	h = materialized_handle(fd, 70, "model.norm.weight");
	pb_uint(&rel, 1, h);
	send_quiet_release(fd, 71, &rel);
	/* the handle is gone (a share of it is refused), and that refusal is the first reply */
	{
		struct pb sh = { .n = 0 };

		pb_uint(&sh, 1, h);
		send_frame(fd, 72, 15, &sh);
	}
	read_resp(fd, &r);
	assert_int_equal(r.id, 72);
	assert_int_equal(r.code, ERR_NOT_FOUND);
	/* the same quiet release again holds nothing to release: its failure is answered */
	send_quiet_release(fd, 73, &rel);
	read_resp(fd, &r);
	assert_int_equal(r.id, 73);
	assert_int_equal(r.code, ERR_NOT_FOUND);
	assert_non_null(strstr(r.message, "does not hold weight"));
	still_serving(fd, 74);
	close(fd);
}

TEST_MAIN(setup, fixture_cleanup, cmocka_unit_test(hello_with_another_version_is_refused),
	  cmocka_unit_test(hello_versions_are_ranges), cmocka_unit_test(empty_units_are_refused),
	  cmocka_unit_test(too_many_pending_requests_are_refused),
	  cmocka_unit_test(bad_release_handles_are_refused),
	  cmocka_unit_test(too_many_entries_are_refused),
	  cmocka_unit_test(share_hands_another_reference_to_a_held_weight),
	  cmocka_unit_test(quiet_release_is_answered_only_when_it_fails))
