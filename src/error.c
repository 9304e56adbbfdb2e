/* error.c - filling struct wd_error and naming error codes. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void wd_error_clear(struct wd_error *err)
{
	if (!err)
		return;
	memset(err, 0, sizeof(*err));
	err->axis = -1;
}

int wd_error_set(struct wd_error *err, int code, const char *fmt, ...)
{
	if (code < 0)
		code = -code;
	if (err) {
		va_list ap;
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return -code;
}

void wd_error_about(struct wd_error *err, const char *checkpoint, const char *tensor)
{
	if (!err)
		return;
	if (checkpoint)
		snprintf(err->checkpoint, sizeof(err->checkpoint), "%s", checkpoint);
	if (tensor)
		snprintf(err->tensor, sizeof(err->tensor), "%s", tensor);
}

void wd_error_prefix(struct wd_error *err, const char *fmt, ...)
{
	char head[384], old[sizeof(err->msg)];
	va_list ap;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", head, old);
}

const char *wd_code_name(int code)
{
	if (code < 0)
		code = -code;
	switch (code) {
	case WD_OK: return "ok";
	case WD_E_INVALID: return "invalid-argument";
	case WD_E_NOT_FOUND: return "not-found";
	case WD_E_PERMISSION: return "permission-denied";
	case WD_E_BAD_CHECKPOINT: return "bad-checkpoint";
	case WD_E_UNSUPPORTED: return "unsupported";
	case WD_E_CHANGED: return "source-changed";
	case WD_E_IO: return "io-error";
	case WD_E_EXHAUSTED: return "resource-exhausted";
	case WD_E_LIMIT: return "limit-exceeded";
	case WD_E_PROTOCOL: return "protocol-error";
	case WD_E_INTERNAL: return "internal-error";
	case WD_E_DISCONNECTED: return "disconnected";
	case WD_E_OUT_OF_RANGE: return "out-of-range";
	case WD_E_UNKNOWN_SOURCE: return "unknown-source";
	case WD_E_UNKNOWN_TENSOR: return "unknown-tensor";
	case WD_E_EMPTY_INPUTS: return "empty-inputs";
	case WD_E_DTYPE_MISMATCH: return "dtype-mismatch";
	case WD_E_SHAPE_MISMATCH: return "shape-mismatch";
	case WD_E_AXIS_RANGE: return "axis-out-of-range";
	case WD_E_ELEMENT_COUNT: return "element-count-mismatch";
	case WD_E_BYTE_COUNT: return "byte-count-mismatch";
	case WD_E_NOT_PERMUTATION: return "not-a-permutation";
	case WD_E_ZERO_SIZED: return "zero-sized-output";
	case WD_E_UNSUPPORTED_CAST: return "unsupported-cast";
	case WD_E_OVERFLOW: return "arithmetic-overflow";
	case WD_E_TOO_DEEP: return "recipe-too-deep";
	case WD_E_TOO_LARGE: return "recipe-too-large";
	case WD_E_DUPLICATE_NAME: return "duplicate-name";
	case WD_E_BAD_ALIAS: return "bad-alias";
	case WD_E_ALIAS_CYCLE: return "alias-cycle";
	case WD_E_SLOT_MISMATCH: return "slot-mismatch";
	case WD_E_CANCELLED: return "cancelled";
	case WD_E_VERSION: return "unsupported-version";
	case WD_E_SCALE_MISMATCH: return "scale-mismatch";
	default: return "unknown-error";
	}
}
