/* SPDX-License-Identifier: Apache-2.0 */
/* test_lent_fds.c - what a reply waiting in weightd's queue carries. With hold_locks (the
 * default) each segment fd is a description of the client's own, locked over the reply's
 * weights: the weight cannot be evicted while its reply waits, and comes whole. With hold_locks
 * off, a reply lends weightd's own segment fd when the socket takes it at once; one that has to
 * wait carries a copy of its own, so it still brings the right bytes after the segment it names
 * is gone and its fd number reused. */
#include <sys/mman.h>

#include "fixture.h"
#include "rawcall.h"
#include "st_writer.h"

/* Tensors of "big": their reply (about 75 bytes each in its columns) is far more than a socket's
 * buffer (about 200 KiB), so whatever is answered after it waits in weightd's queue. */
#define BIG 8000
#define W_BYTES 4096
#define W_SEED 77
#define X_SEED 99

static void write_one(const char *file, const char *name, uint32_t seed, char *path, size_t cap)
{
	struct stw_tensor t = { .name = name, .dtype = "U8", .ndim = 1, .shape = { W_BYTES },
				.pattern = STW_BYTES, .seed = seed };

	harness_path(&H, file, path, cap);
	assert_int_equal(stw_write(path, &t, 1, NULL, 0, NULL), 0);
}

static void start(bool locks)
{
	static char names[BIG][16];
	struct stw_tensor *ts = calloc(BIG, sizeof(*ts));
	char big[512], b[512], c[512], sec[2048];

	assert_non_null(ts);
	assert_int_equal(harness_init(&H), 0);
	for (size_t i = 0; i < BIG; i++) {
		snprintf(names[i], sizeof(names[i]), "t.%05zu", i);
		ts[i] = (struct stw_tensor){ .name = names[i], .dtype = "U8", .ndim = 1,
					     .shape = { 16 }, .pattern = STW_BYTES,
					     .seed = (uint32_t)i };
	}
	harness_path(&H, "big.safetensors", big, sizeof(big));
	assert_int_equal(stw_write(big, ts, BIG, NULL, 0, NULL), 0);
	free(ts);
	write_one("b.safetensors", "w", W_SEED, b, sizeof(b));
	write_one("c.safetensors", "x", X_SEED, c, sizeof(c));
	snprintf(sec, sizeof(sec),
		 "[checkpoint:big]\npath = %s\n[checkpoint:b]\npath = %s\n[checkpoint:c]\npath = %s\n",
		 big, b, c);
	/* segments nobody holds go at once: W's goes with W */
	it_start(&H, locks ? "max_idle_segments = 0" : "max_idle_segments = 0\nhold_locks = no", sec);
}

static void send_req(int sock, Weightd__Request *req)
{
	size_t len = weightd__request__get_packed_size(req);
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	weightd__request__pack(req, buf);
	assert_int_equal(wd_frame_send_blocking(sock, buf, len, NULL, 0), 0);
	free(buf);
}

static void send_unit(int sock, uint64_t id, Weightd__UnitEntry **entries, size_t n)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Unit u = WEIGHTD__UNIT__INIT;

	u.n_entries = n;
	u.entries = entries;
	req.id = id;
	req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
	req.materialize = &u;
	send_req(sock, &req);
}

/* The next message on sock (10 s at most), fds and all. */
static Weightd__Response *next_reply(struct wd_inbuf *in, int sock, struct wd_frame *fr)
{
	Weightd__Response *resp;

	it_raw_next(in, sock, fr);
	resp = weightd__response__unpack(NULL, fr->len, fr->payload);
	assert_non_null(resp);
	return resp;
}

/* W's reply: its bytes, read through the fd that came with it, are tensor "w" of checkpoint b. */
static void check_w(const Weightd__Response *resp, const struct wd_frame *fr, uint64_t *ret_handle)
{
	const Weightd__UnitReply *ur;
	const Weightd__PackedWeights *pw;
	const Weightd__SegmentInfo *si;
	const uint8_t *p;

	assert_int_equal(resp->body_case, WEIGHTD__RESPONSE__BODY_MATERIALIZE);
	ur = resp->materialize;
	pw = ur->packed;
	assert_non_null(pw);
	assert_int_equal(pw->n_handle, 1);
	assert_int_equal(pw->nbytes[0], W_BYTES);
	assert_true(pw->segment[0] < ur->n_segments);
	si = ur->segments[pw->segment[0]];
	assert_true(si->fd_index < fr->nfds);
	p = mmap(NULL, si->size, PROT_READ, MAP_SHARED, fr->fds[si->fd_index], 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(it_pattern_mismatch(p + pw->offset[0], W_BYTES, W_SEED), -1);
	munmap((void *)p, si->size);
	*ret_handle = pw->handle[0];
}

/*
 * A raw client asks for the 8,000 weights of "big" and then for W without
 * reading: W's reply waits in weightd's queue. It then releases W twice (its earlier hold and the
 * one the waiting reply took), and an admin evicts. Without locks W goes, its segment with it,
 * and X of another checkpoint takes the lowest free descriptors: when the client reads, W's
 * reply brings W's bytes because the queued reply held a copy of the segment's fd, not its
 * number. With locks the reply's own description holds a lock over W, so W is kept (counted as
 * mapped) until the client has read the reply and closed the fd; then it goes.
 */
static void waiting_reply(bool locks)
{
	static struct it_src_entry big[BIG];
	static Weightd__UnitEntry *big_ep[BIG];
	static char names[BIG][16];
	struct wd_inbuf *in = wd_inbuf_new(16u << 20, 256);
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Hello hello = WEIGHTD__HELLO__INIT;
	Weightd__Release rel = WEIGHTD__RELEASE__INIT;
	Weightd__Response *resp;
	weightd_client *admin;
	weightd_weight *x;
	struct it_src_entry w;
	Weightd__UnitEntry *wp = &w.e;
	struct wd_frame fr;
	uint64_t hw = 0, hw2 = 0, handles[2], evicted = 0, bytes = 0;
	int sock, base;
	bool gone = false;

	start(locks);
	base = it_fd_base(&H);
	assert_non_null(in);
	for (size_t i = 0; i < BIG; i++) {
		snprintf(names[i], sizeof(names[i]), "t.%05zu", i);
		it_src_entry(&big[i], names[i], "big", names[i]);
		big_ep[i] = &big[i].e;
	}
	it_src_entry(&w, "w", "b", "w");
	sock = it_raw_connect(&H);
	assert_true(sock >= 0);
	hello.protocol_version = WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
	hello.client_name = "lender";
	req.id = 1;
	req.body_case = WEIGHTD__REQUEST__BODY_HELLO;
	req.hello = &hello;
	resp = it_raw_call(sock, &req, NULL, NULL);
	weightd__response__free_unpacked(resp, NULL);

	/* warm both, reading the replies: W's handle and segment */
	send_unit(sock, 2, big_ep, BIG);
	resp = next_reply(in, sock, &fr);
	assert_int_equal(resp->id, 2);
	assert_int_equal(resp->materialize->packed->n_handle, BIG);
	weightd__response__free_unpacked(resp, NULL);
	wd_frame_close_fds(&fr);
	send_unit(sock, 3, &wp, 1);
	resp = next_reply(in, sock, &fr);
	assert_int_equal(resp->id, 3);
	check_w(resp, &fr, &hw);
	weightd__response__free_unpacked(resp, NULL);
	wd_frame_close_fds(&fr);

	/* nothing read from here on: the big reply fills the socket, W's waits behind it */
	send_unit(sock, 4, big_ep, BIG);
	send_unit(sock, 5, &wp, 1);
	handles[0] = handles[1] = hw;
	rel.n_handles = 2;
	rel.handles = handles;
	memset(&req, 0, sizeof(req));
	weightd__request__init(&req);
	req.id = 6;
	req.body_case = WEIGHTD__REQUEST__BODY_RELEASE;
	req.release = &rel;
	send_req(sock, &req);

	/* once weightd has taken the release, W can be evicted; its segment goes with it (without
	 * locks: with them, the waiting reply keeps it) */
	admin = it_connect(&H);
	if (locks) {
		for (int i = 0; i < 200; i++) {
			weightd_status *st;
			weightd_error err;
			bool kept;

			assert_int_equal(weightd_evict(admin, &evicted, &bytes, &err), 0);
			st = it_status(admin);
			kept = st->locked_weights == 1 && it_weight(st, "b", "w") != NULL;
			weightd_status_free(st);
			if (kept)
				break;
			usleep(20000);
		}
		gone = true; /* nothing to wait for below */
	}
	for (int i = 0; i < 200 && !gone; i++) {
		weightd_status *st;
		weightd_error err;

		assert_int_equal(weightd_evict(admin, &evicted, &bytes, &err), 0);
		st = it_status(admin);
		gone = it_weight(st, "b", "w") == NULL;
		weightd_status_free(st);
		if (!gone)
			usleep(20000);
	}
	assert_true(gone);
	if (locks) {
		weightd_status *st = it_status(admin);

		/* kept, counted as mapped by a process weightd does not know */
		assert_non_null(it_weight(st, "b", "w"));
		assert_int_equal(st->locked_weights, 1);
		weightd_status_free(st);
	}
	x = it_get_ok(admin, "c", "x");
	assert_int_equal(it_pattern_mismatch(it_map(x), W_BYTES, X_SEED), -1);

	/* now read: the big unit, then W, with W's bytes */
	resp = next_reply(in, sock, &fr);
	assert_int_equal(resp->id, 4);
	assert_int_equal(resp->materialize->packed->n_handle, BIG);
	weightd__response__free_unpacked(resp, NULL);
	wd_frame_close_fds(&fr);
	resp = next_reply(in, sock, &fr);
	assert_int_equal(resp->id, 5);
	check_w(resp, &fr, &hw2);
	assert_int_equal(hw2, hw);
	weightd__response__free_unpacked(resp, NULL);
	wd_frame_close_fds(&fr);
	resp = next_reply(in, sock, &fr);
	assert_int_equal(resp->id, 6);
	assert_int_equal(resp->body_case, WEIGHTD__RESPONSE__BODY_RELEASE);
	weightd__response__free_unpacked(resp, NULL);
	wd_frame_close_fds(&fr);

	wd_inbuf_free(in);
	close(sock);
	weightd_release(x);
	if (locks) {
		/* the fd is closed: the lock is gone, and W with the next evict */
		for (int i = 0; i < 500; i++) {
			weightd_status *st = it_status(admin);
			bool none = st->locked_weights == 0;

			weightd_status_free(st);
			if (none)
				break;
			usleep(20000);
		}
		assert_int_equal(weightd_evict(admin, &evicted, &bytes, NULL), 0);
		{
			weightd_status *st = it_status(admin);

			assert_null(it_weight(st, "b", "w"));
			weightd_status_free(st);
		}
	}
	weightd_close(admin);
	it_leak_check(&H, base, 0);
}

static void a_waiting_reply_keeps_its_segment(void **state)
{
	(void)state;
	waiting_reply(false);
}

static void a_waiting_reply_keeps_its_weight_locked(void **state)
{
	(void)state;
	waiting_reply(true);
}

TEST_MAIN(NULL, NULL, TEST(a_waiting_reply_keeps_its_segment),
	  TEST(a_waiting_reply_keeps_its_weight_locked))
