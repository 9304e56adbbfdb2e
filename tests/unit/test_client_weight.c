/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_weight.c - libweightd's segment table against a fake daemon that packs: a client
 * holds one fd and one mapping per segment however many units and weights use it, keeps the
 * segment while any weight of it lives, and refuses a segment id that names another object or
 * a weight outside its segment. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_weightd.h"
#include "itest.h"
#include "weightd/client.h"

/* The fake's one segment: 3 weights of 100 bytes at offsets 0, 128, 256 (byte k of weight i is
 * i * 50 + k). */
#define SEG_ID 42
#define SEG_BYTES 512

enum mode { PACKED, OTHER_OBJECT, OUTSIDE };
static enum mode mode;
static int seg_fd = -1;        /* the fake's segment: one object for every PACKED reply */

/* The fake lets go of its copy of the segment (so only the client's fds are counted). */
static void seg_forget(void)
{
	if (seg_fd >= 0)
		close(seg_fd);
	seg_fd = -1;
}

static void seg_bytes(uint8_t *p)
{
	memset(p, 0, SEG_BYTES);
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 100; k++)
			p[128 * i + k] = (uint8_t)(i * 50 + k);
}

/* Every entry of a unit names weight "w<i>" (i from the tensor name's last digit). */
static void h_packed(struct fake *f, const Weightd__Request *req)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__UnitReply ur = WEIGHTD__UNIT_REPLY__INIT;
	Weightd__SegmentInfo si = WEIGHTD__SEGMENT_INFO__INIT, *sp[1] = { &si };
	static struct fake_packed pk;
	struct fake_source src[8];
	uint8_t data[SEG_BYTES];
	size_t n;
	int fd;

	if (req->body_case != WEIGHTD__REQUEST__BODY_MATERIALIZE) {
		Weightd__Empty e = WEIGHTD__EMPTY__INIT;

		resp.id = req->id;
		resp.body_case = req->body_case == WEIGHTD__REQUEST__BODY_RELEASE ?
				 WEIGHTD__RESPONSE__BODY_RELEASE : WEIGHTD__RESPONSE__BODY_SUBSCRIBE;
		resp.release = &e;
		fake_reply(f, &resp);
		return;
	}
	seg_bytes(data);
	if (mode != OTHER_OBJECT && seg_fd < 0)
		seg_fd = fake_memfd(data, SEG_BYTES);
	fd = mode == OTHER_OBJECT ? fake_memfd(data, SEG_BYTES) : seg_fd;
	n = fake_unit_sources(req->materialize, src, 8);
	fake_packed_init(&pk);
	for (size_t k = 0; k < n; k++) {
		const char *t = src[k].tensor;
		int i = t[strlen(t) - 1] - '0';
		uint64_t shape[1] = { 100 };

		fake_packed_add(&pk, 10 + (uint64_t)i, "U8", shape, 1, data + 128 * i, 100, 0,
				mode == OUTSIDE ? 448 : 128 * (uint64_t)i);
	}
	si.id = SEG_ID;
	si.size = SEG_BYTES;
	si.fd_index = 0;
	ur.packed = &pk.pw;
	ur.n_segments = 1;
	ur.segments = sp;
	resp.id = req->id;
	resp.body_case = WEIGHTD__RESPONSE__BODY_MATERIALIZE;
	resp.materialize = &ur;
	fake_reply_fds(f, &resp, &fd, 1);
	if (fd != seg_fd)
		close(fd);
}

static int unit_of(weightd_client *c, const char *const *tensors, size_t n, weightd_unit **ret,
		   weightd_error *err)
{
	return it_unit_of(c, "ck", tensors, n, true, ret, err);
}

static void check_weight(const weightd_unit *u, const char *slot, int i)
{
	const uint8_t *p = weightd_unit_data(u, slot);

	assert_non_null(p);
	for (int k = 0; k < 100; k++)
		assert_int_equal(p[k], (uint8_t)(i * 50 + k));
}

/* Two units, three weights, one segment: one fd and one mapping, held until the last weight. */
static void one_fd_and_mapping_per_segment(void **state)
{
	const char *a[] = { "w0", "w1" }, *b[] = { "w2", "w1" };
	struct fake *f;
	weightd_client *c;
	weightd_unit *ua = NULL, *ub = NULL;
	weightd_error err;
	int wfds;

	(void)state;
	mode = PACKED;
	f = fake_start(h_packed, NULL);
	assert_int_equal(weightd_connect(f->path, "test", &c, &err), 0);
	assert_int_equal(unit_of(c, a, 2, &ua, &err), 0);
	assert_int_equal(unit_of(c, b, 2, &ub, &err), 0);
	fake_settle(f);
	seg_forget();
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 1);                 /* the second reply's fd was closed */
	assert_int_equal(fake_count_maps(), 1);    /* and the segment is mapped once */
	check_weight(ua, "w0", 0);
	check_weight(ua, "w1", 1);
	check_weight(ub, "w2", 2);
	assert_ptr_equal(weightd_unit_data(ua, "w1"), weightd_unit_data(ub, "w1"));
	assert_int_equal(weightd_weight_segment(weightd_unit_weight(ua, "w0")), SEG_ID);
	assert_int_equal(weightd_weight_offset(weightd_unit_weight(ub, "w2")), 256);
	assert_int_equal(weightd_weight_fd(weightd_unit_weight(ua, "w0")),
			 weightd_weight_fd(weightd_unit_weight(ub, "w2")));
	/* the first unit goes; the second still maps the segment */
	weightd_unit_free(ua);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 1);
	check_weight(ub, "w2", 2);
	weightd_unit_free(ub);
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 0);
	assert_int_equal(fake_count_maps(), 0);
	weightd_close(c);
	fake_stop(f);
}

/* A segment id the client holds, sent again as another object, and a weight lying outside its
 * segment are protocol errors; nothing is held after them. */
static void inconsistent_segments_refused(void **state)
{
	const char *a[] = { "w0" };
	struct fake *f;
	weightd_client *c;
	weightd_unit *ua = NULL, *ub = NULL;
	weightd_error err;
	uint64_t rel[16];
	int wfds;

	(void)state;
	mode = PACKED;
	f = fake_start(h_packed, NULL);
	assert_int_equal(weightd_connect(f->path, "test", &c, &err), 0);
	assert_int_equal(unit_of(c, a, 1, &ua, &err), 0);
	mode = OTHER_OBJECT;
	assert_int_equal(unit_of(c, a, 1, &ub, &err), -WEIGHTD_E_PROTOCOL);
	assert_non_null(strstr(err.message, "different object"));
	weightd_unit_free(ua);
	mode = OUTSIDE;
	assert_int_equal(unit_of(c, a, 1, &ub, &err), -WEIGHTD_E_PROTOCOL);
	assert_non_null(strstr(err.message, "offset 448"));
	fake_settle(f);
	seg_forget();
	fake_count_fds(&wfds);
	assert_int_equal(wfds, 0);
	assert_int_equal(fake_count_maps(), 0);
	weightd_close(c);
	/* every reference the replies stood for was given back: the unit's, then both refused
	 * (releases are sent without a reply to wait for: give the fake time to read them) */
	for (int i = 0; i < 500 && fake_released(f, rel, 16) < 3; i++)
		usleep(10000);
	assert_int_equal(fake_released(f, rel, 16), 3);
	fake_stop(f);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(one_fd_and_mapping_per_segment),
	  cmocka_unit_test(inconsistent_segments_refused))
