/* SPDX-License-Identifier: Apache-2.0 */
/* rawwire.h - a hand-written protobuf writer and reader for tests that speak the wire protocol
 * directly (proto/weightd.proto), independent of libweightd: for clients that misbehave
 * (rawwire.c). Units name the checkpoint "tiny". */
#ifndef WD_RAWWIRE_H
#define WD_RAWWIRE_H

#include <poll.h>
#include <stdbool.h>

#include "itest.h"

/* ---- a protobuf writer: just what these requests need ---- */

struct pb {
	uint8_t b[4096];
	size_t n;
};

void pb_varint(struct pb *p, uint64_t v);

void pb_uint(struct pb *p, unsigned field, uint64_t v);

void pb_bytes(struct pb *p, unsigned field, const void *data, size_t len);

void pb_str(struct pb *p, unsigned field, const char *s);

void pb_msg(struct pb *p, unsigned field, const struct pb *m);

/* Request { id = 1; <body field> = body } as a frame: u32 LE length, u32 LE fd count, payload. */
size_t frame(uint8_t *out, uint64_t id, unsigned body_field, const struct pb *body);

void send_all(int fd, const uint8_t *p, size_t n);

void send_frame(int fd, uint64_t id, unsigned body_field, const struct pb *body);

/* Hello { protocol_version = min, client_name, max_protocol_version = max } (0: left out). */
void send_hello_range(int fd, uint64_t id, uint32_t min, uint32_t max);

/* The Hello of a client that speaks one version (as before versions were ranges). */
void send_hello(int fd, uint64_t id, uint32_t version);

/* Unit { entries = [UnitEntry { name, recipe = Recipe { nodes = [Node { source }] } }] }. */
void unit_of(struct pb *unit, const char *const *tensors, size_t n);

/* ---- a protobuf reader ---- */

struct slice {
	const uint8_t *p;
	size_t n;
};

bool rd_varint(struct slice *s, uint64_t *v);

/*
 * The first field `field` of message m: a varint in *ret_v, or a length-delimited body in
 * *ret_s. False when absent.
 */
bool pb_find(struct slice m, unsigned field, uint64_t *ret_v, struct slice *ret_s);

/* One response: its id, its error code (0: none) and message, the body field present. */
struct resp {
	uint32_t nfds; /* the frame header's fd count */
	uint64_t id;
	uint64_t code;
	char message[1024];
	unsigned body;
	uint8_t buf[65536];
	struct slice body_msg;
};

bool read_exact(int fd, uint8_t *p, size_t n, int timeout_ms);

void read_resp(int fd, struct resp *r);

/* Materialize one tensor of "tiny" on a raw connection and return its handle (the first of
 * UnitReply.packed.handle, a packed or unpacked repeated varint). */
uint64_t materialized_handle(int fd, uint64_t id, const char *tensor);

#endif
