/* SPDX-License-Identifier: Apache-2.0 */
/* weightd/error.h - weightd's error codes and struct weightd_error, shared by libweightd and weightd. */
#ifndef WEIGHTD_ERROR_H
#define WEIGHTD_ERROR_H

/*
 * Included by <weightd/client.h>; include that. This part is a header of its own because weightd
 * itself (its parsers, recipe engine and daemon) reports errors with the very same codes and
 * struct, so there is one list of codes and one error type for the library, the daemon and the
 * wire. The numbers are those of weightd.ErrorCode in proto/weightd.proto, and each
 * WEIGHTD_E_NAME is its ERR_NAME there (a unit test walks the protocol's enum and checks both,
 * and that weightd_code_name knows every code): add a code to the .proto and here together.
 */

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the same numbers as weightd.ErrorCode in the wire protocol. Calls return -code. */
enum {
	WEIGHTD_OK = 0,
	WEIGHTD_E_INVALID_ARGUMENT = 1,
	WEIGHTD_E_NOT_FOUND = 2,
	WEIGHTD_E_PERMISSION_DENIED = 3,
	WEIGHTD_E_BAD_CHECKPOINT = 4,
	WEIGHTD_E_UNSUPPORTED = 5,
	WEIGHTD_E_SOURCE_CHANGED = 6,
	WEIGHTD_E_IO = 7,
	WEIGHTD_E_RESOURCE_EXHAUSTED = 8,
	WEIGHTD_E_LIMIT_EXCEEDED = 9,
	WEIGHTD_E_PROTOCOL = 10,
	WEIGHTD_E_INTERNAL = 11,
	WEIGHTD_E_DISCONNECTED = 12,
	WEIGHTD_E_OUT_OF_RANGE = 13,
	WEIGHTD_E_UNKNOWN_SOURCE = 20,
	WEIGHTD_E_UNKNOWN_TENSOR = 21,
	WEIGHTD_E_EMPTY_INPUTS = 22,
	WEIGHTD_E_DTYPE_MISMATCH = 23,
	WEIGHTD_E_SHAPE_MISMATCH = 24,
	WEIGHTD_E_AXIS_OUT_OF_RANGE = 25,
	WEIGHTD_E_ELEMENT_COUNT_MISMATCH = 26,
	WEIGHTD_E_BYTE_COUNT_MISMATCH = 27,
	WEIGHTD_E_NOT_A_PERMUTATION = 28,
	WEIGHTD_E_ZERO_SIZED = 29,
	WEIGHTD_E_UNSUPPORTED_CAST = 30,
	WEIGHTD_E_OVERFLOW = 31,
	WEIGHTD_E_RECIPE_TOO_DEEP = 32,
	WEIGHTD_E_RECIPE_TOO_LARGE = 33,
	WEIGHTD_E_DUPLICATE_NAME = 40,
	WEIGHTD_E_BAD_ALIAS = 41,
	WEIGHTD_E_ALIAS_CYCLE = 42,
	WEIGHTD_E_SLOT_MISMATCH = 43,
	WEIGHTD_E_CANCELLED = 55,            /* weightd stopped before the work started */
	WEIGHTD_E_UNSUPPORTED_VERSION = 56,  /* no protocol version both sides speak */
	/* dequant_block: the scale tensor's shape is not the data's block grid */
	WEIGHTD_E_SCALE_MISMATCH = 65,
};

/*
 * What went wrong, filled by a failing call when the caller passes one. Caller-allocated (on the
 * stack is fine). `message` is a complete sentence naming the checkpoint, tensor and slot
 * involved and what was wrong, e.g. 'slot "layers.0.q": weightd served dtype BF16 for
 * llama:layers.0.attn.q.weight, the slot declares F16'. The other fields let a program react
 * without parsing it; those that do not apply are empty/zero. `node` is the recipe node index + 1
 * (0: not about a node); `axis` is -1 when not about an axis; expected/actual hold the numbers
 * compared, when the error compares numbers.
 */
typedef struct weightd_error {
	int code;             /* WEIGHTD_E_* (positive); WEIGHTD_OK when there is no error */
	uint32_t node;
	int32_t axis;
	int64_t expected;
	int64_t actual;
	char checkpoint[128];
	char tensor[256];
	char slot[256];
	char message[768];
} weightd_error;

#ifdef __cplusplus
}
#endif

#endif
