/* SPDX-License-Identifier: Apache-2.0 */
/* rawwire.c - a hand-written protobuf writer and reader for tests that speak the wire protocol
 * directly, independent of libweightd. */
#include "rawwire.h"

void pb_varint(struct pb *p, uint64_t v)
{
	do {
		assert_true(p->n < sizeof(p->b));
		p->b[p->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
}

void pb_uint(struct pb *p, unsigned field, uint64_t v)
{
	pb_varint(p, (uint64_t)field << 3);
	pb_varint(p, v);
}

void pb_bytes(struct pb *p, unsigned field, const void *data, size_t len)
{
	pb_varint(p, (uint64_t)field << 3 | 2);
	pb_varint(p, len);
	assert_true(p->n + len <= sizeof(p->b));
	memcpy(p->b + p->n, data, len);
	p->n += len;
}

void pb_str(struct pb *p, unsigned field, const char *s)
{
	pb_bytes(p, field, s, strlen(s));
}

void pb_msg(struct pb *p, unsigned field, const struct pb *m)
{
	pb_bytes(p, field, m->b, m->n);
}

size_t frame(uint8_t *out, uint64_t id, unsigned body_field, const struct pb *body)
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

void send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		assert_true(k > 0);
		p += k;
		n -= (size_t)k;
	}
}

void send_frame(int fd, uint64_t id, unsigned body_field, const struct pb *body)
{
	uint8_t f[4200];

	send_all(fd, f, frame(f, id, body_field, body));
}

void send_hello_range(int fd, uint64_t id, uint32_t min, uint32_t max)
{
	struct pb h = { .n = 0 };

	if (min)
		pb_uint(&h, 1, min);
	pb_str(&h, 2, "test_wire");
	if (max)
		pb_uint(&h, 3, max);
	send_frame(fd, id, 10, &h);
}

void send_hello(int fd, uint64_t id, uint32_t version)
{
	send_hello_range(fd, id, version, 0);
}

void unit_of(struct pb *unit, const char *const *tensors, size_t n)
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

bool rd_varint(struct slice *s, uint64_t *v)
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

bool pb_find(struct slice m, unsigned field, uint64_t *ret_v, struct slice *ret_s)
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
		default: return false;
		}
	}
	return false;
}

bool read_exact(int fd, uint8_t *p, size_t n, int timeout_ms)
{
	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		char cbuf[CMSG_SPACE(sizeof(int) * 253)];
		struct iovec iov = { .iov_base = p, .iov_len = n };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf,
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
				for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				     i++) {
					int rfd;

					memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
					close(rfd);
				}
		p += k;
		n -= (size_t)k;
	}
	return true;
}

void read_resp(int fd, struct resp *r)
{
	uint8_t hdr[8];
	uint32_t len;
	struct slice m, e = { 0 };

	memset(r, 0, sizeof(*r));
	assert_true(read_exact(fd, hdr, 8, 10000));
	len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	      (uint32_t)hdr[3] << 24;
	r->nfds = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 |
		  (uint32_t)hdr[7] << 24;
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

uint64_t materialized_handle(int fd, uint64_t id, const char *tensor)
{
	struct pb unit;
	struct resp r;
	struct slice pw, handles = { NULL, 0 };
	uint64_t handle = 0;

	unit_of(&unit, &tensor, 1);
	send_frame(fd, id, 14, &unit);
	read_resp(fd, &r);
	assert_int_equal(r.code, 0);
	assert_int_equal(r.body, 14);
	assert_true(pb_find(r.body_msg, 4, NULL, &pw));
	assert_true(pb_find(pw, 1, &handle, &handles));
	if (handles.n)
		assert_true(rd_varint(&handles, &handle));
	assert_true(handle != 0);
	return handle;
}
