/* SPDX-License-Identifier: Apache-2.0 */
/* rawcall.c - one request and its answer on a raw connection, through the generated protobuf-c
 * code and src/frame.h, not through libweightd. */
#include "rawcall.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

void it_src_entry(struct it_src_entry *s, const char *name, const char *ckpt, const char *tensor)
{
	weightd__unit_entry__init(&s->e);
	weightd__recipe__init(&s->rec);
	weightd__node__init(&s->node);
	s->node.op = WEIGHTD__OP__OP_SOURCE;
	s->node.checkpoint = (char *)ckpt;
	s->node.tensor = (char *)tensor;
	s->np = &s->node;
	s->rec.n_nodes = 1;
	s->rec.nodes = &s->np;
	s->e.name = (char *)name;
	s->e.recipe = &s->rec;
}

void it_raw_next(struct wd_inbuf *in, int sock, struct wd_frame *fr)
{
	for (;;) {
		struct pollfd pf = { sock, POLLIN, 0 };
		int r = wd_inbuf_next(in, fr);

		assert_true(r >= 0);
		if (r == 1)
			return;
		assert_int_equal(poll(&pf, 1, 10000), 1);
		r = wd_inbuf_read(in, sock);
		assert_true(r > 0 || r == WD_FRAME_AGAIN);
	}
}

Weightd__Response *it_raw_call(int sock, Weightd__Request *req, int **ret_fds, uint32_t *ret_nfds)
{
	size_t len = weightd__request__get_packed_size(req);
	uint8_t *buf = malloc(len ? len : 1);
	struct wd_inbuf *in = wd_inbuf_new(16u << 20, 256);
	Weightd__Response *resp;
	struct wd_frame fr;

	assert_non_null(buf);
	assert_non_null(in);
	weightd__request__pack(req, buf);
	assert_int_equal(wd_frame_send_blocking(sock, buf, len, NULL, 0), 0);
	free(buf);
	it_raw_next(in, sock, &fr);
	resp = weightd__response__unpack(NULL, fr.len, fr.payload);
	assert_non_null(resp);
	assert_int_equal(resp->id, req->id);
	if (ret_fds) {
		*ret_fds = fr.fds;
		*ret_nfds = fr.nfds;
	} else {
		assert_int_equal(fr.nfds, 0);
		wd_frame_close_fds(&fr);
	}
	wd_inbuf_free(in);
	return resp;
}
