/* error.h - weightd's one error convention: a code from enum wd_code plus a sentence for a person. */
#ifndef WD_ERROR_H
#define WD_ERROR_H

#include <stdint.h>

/* Same numbers as weightd.ErrorCode in proto/weightd.proto. */
enum wd_code {
	WD_OK = 0,
	WD_E_INVALID = 1,
	WD_E_NOT_FOUND = 2,
	WD_E_PERMISSION = 3,
	WD_E_BAD_CHECKPOINT = 4,
	WD_E_UNSUPPORTED = 5,
	WD_E_CHANGED = 6,
	WD_E_IO = 7,
	WD_E_EXHAUSTED = 8,
	WD_E_LIMIT = 9,
	WD_E_PROTOCOL = 10,
	WD_E_INTERNAL = 11,
	WD_E_DISCONNECTED = 12,
	WD_E_OUT_OF_RANGE = 13,
	WD_E_UNKNOWN_SOURCE = 20,
	WD_E_UNKNOWN_TENSOR = 21,
	WD_E_EMPTY_INPUTS = 22,
	WD_E_DTYPE_MISMATCH = 23,
	WD_E_SHAPE_MISMATCH = 24,
	WD_E_AXIS_RANGE = 25,
	WD_E_ELEMENT_COUNT = 26,
	WD_E_BYTE_COUNT = 27,
	WD_E_NOT_PERMUTATION = 28,
	WD_E_ZERO_SIZED = 29,
	WD_E_UNSUPPORTED_CAST = 30,
	WD_E_OVERFLOW = 31,
	WD_E_TOO_DEEP = 32,
	WD_E_TOO_LARGE = 33,
	WD_E_DUPLICATE_NAME = 40,
	WD_E_BAD_ALIAS = 41,
	WD_E_ALIAS_CYCLE = 42,
	WD_E_SLOT_MISMATCH = 43,
	WD_E_CANCELLED = 55,         /* the daemon stopped before the work started */
	WD_E_VERSION = 56,           /* no protocol version both peers speak */
	WD_E_SCALE_MISMATCH = 65,
};

/*
 * Where an error is reported, functions return 0 on success or -code (a negative enum wd_code) and,
 * when `err` is not NULL, fill it. Fields that do not apply stay empty/zero. `node` is the recipe
 * node index + 1 (0 = not about a node); `axis` is -1 when not about an axis.
 */
struct wd_error {
	int code;
	uint32_t node;
	int32_t axis;
	int64_t expected;
	int64_t actual;
	char checkpoint[128];
	char tensor[256];
	char slot[256];
	char msg[768];
};

/* Reset to "no error". Accepts NULL. */
void wd_error_clear(struct wd_error *err);

/* Set code and a printf-formatted sentence; returns -code so callers can `return wd_error_set(...)`.
 * Accepts err == NULL (then only returns). */
int wd_error_set(struct wd_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Fill the structured fields that name what the error is about (each may be NULL). */
void wd_error_about(struct wd_error *err, const char *checkpoint, const char *tensor);

/* Prefix the current message with "prefix: " (to add context while an error travels up). */
void wd_error_prefix(struct wd_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Short stable name of a code ("invalid-argument", "unknown-tensor", ...), never NULL. */
const char *wd_code_name(int code);

#endif
