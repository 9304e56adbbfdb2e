/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_frame.c - the frame decoder (src/frame_recv.c) and the request decoder behind it.
 *
 * The input is a byte stream as a peer would send it. It goes into two receive buffers: one fed
 * all at once, one in uneven chunks (sizes from a generator seeded by the input length), each
 * chunk either fed directly or sent through a socketpair and taken with wd_inbuf_read. Both must
 * hand out the same frames with the same payloads and end in the same state: framing must not
 * depend on how the bytes were split or how they arrived, nor on how a message was split into frames. Every complete payload is also decoded as a Request,
 * as the daemon would. The last byte picks the limits, so small limits get exercised too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "msg.h"
#include "weightd.pb-c.h"

static void check(int ok)
{
	if (!ok)
		__builtin_trap();
}

/* As the daemon decodes requests (one arena per message), and as libweightd decodes replies. */
static void decode(const struct wd_frame *f)
{
	Weightd__Request *req = wd_msg_unpack(&weightd__request__descriptor, f->payload, f->len);
	Weightd__Response *resp = wd_msg_unpack(&weightd__response__descriptor, f->payload, f->len);

	wd_msg_free(req);
	wd_msg_free(resp);
}

/* Send n bytes into the socketpair and read them all into b. */
static void via_socket(struct wd_inbuf *b, const uint8_t *p, size_t n)
{
	static int sv[2] = { -1, -1 };
	size_t got = 0;

	if (sv[0] < 0)
		check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
	check(send(sv[0], p, n, 0) == (ssize_t)n);
	while (got < n) {
		int rc = wd_inbuf_read(b, sv[1]);

		check(rc > 0);
		got += (size_t)rc;
	}
	check(got == n && wd_inbuf_read(b, sv[1]) == WD_FRAME_AGAIN);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t max_payload = 1u << 20, max_fds = 16;
	uint64_t max_message;
	struct wd_inbuf *whole = NULL, *split = NULL;
	uint32_t x = (uint32_t)size * 2654435761u + 1;
	size_t off = 0;
	int rc_split = 0, rc_whole;
	struct wd_frame a, b;

	if (size && (data[size - 1] & 0x80)) {
		max_payload = data[size - 1] & 0x3f;
		max_fds = data[size - 1] & 0x40 ? 0 : 2;
	}
	/* messages may span frames (WD_FRAME_MORE) up to four frames' worth */
	max_message = (uint64_t)max_payload * 4;
	whole = wd_inbuf_new(max_payload, max_fds);
	split = wd_inbuf_new(max_payload, max_fds);
	if (!whole || !split)
		goto out;
	wd_inbuf_set_max_message(whole, max_message);
	wd_inbuf_set_max_message(split, max_message);
	if (wd_inbuf_feed(whole, data, size))
		goto out;
	while (off < size && rc_split >= 0) {
		size_t n;

		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		n = 1 + x % 97;
		if (n > size - off)
			n = size - off;
		if (x & 0x100)
			via_socket(split, data + off, n);
		else
			check(wd_inbuf_feed(split, data + off, n) == 0);
		off += n;
		while ((rc_split = wd_inbuf_next(split, &b)) == 1) {
			check(b.len <= max_message && b.nfds == 0 && b.fds == NULL);
			check(wd_inbuf_next(whole, &a) == 1);
			check(a.len == b.len && a.nfds == 0);
			check(a.len == 0 || memcmp(a.payload, b.payload, a.len) == 0);
			decode(&b);
		}
	}
	/* Both end the same way: needing more bytes, or the same sticky error. */
	rc_whole = wd_inbuf_next(whole, &a);
	check(rc_whole == rc_split);
	check(rc_whole == 0 || rc_whole == -WEIGHTD_E_LIMIT_EXCEEDED || rc_whole == -WEIGHTD_E_PROTOCOL);
out:
	wd_inbuf_free(whole);
	wd_inbuf_free(split);
	return 0;
}
