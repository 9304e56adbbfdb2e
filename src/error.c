/* SPDX-License-Identifier: Apache-2.0 */
/* error.c - filling weightd_error and naming error codes. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

/* Every field empty or zero, by its first byte: the struct is 1.4 KB, and a unit's declaration
 * clears it twice per slot, where a memset of the whole would cost more than the rest of it. */
void wd_error_clear(weightd_error *err)
{
	if (!err)
		return;
	err->code = WEIGHTD_OK;
	err->node = 0;
	err->axis = -1;
	err->expected = 0;
	err->actual = 0;
	err->checkpoint[0] = '\0';
	err->tensor[0] = '\0';
	err->slot[0] = '\0';
	err->message[0] = '\0';
}

int wd_error_vset(weightd_error *err, int code, const char *fmt, va_list ap)
{
	if (code < 0)
		code = -code;
	if (err) {
		err->code = code;
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
	}
	return -code;
}

int wd_error_set(weightd_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = wd_error_vset(err, code, fmt, ap);
	va_end(ap);
	return r;
}

void wd_error_about(weightd_error *err, const char *checkpoint, const char *tensor)
{
	if (!err)
		return;
	if (checkpoint)
		snprintf(err->checkpoint, sizeof(err->checkpoint), "%s", checkpoint);
	if (tensor)
		snprintf(err->tensor, sizeof(err->tensor), "%s", tensor);
}

void wd_error_prefix(weightd_error *err, const char *fmt, ...)
{
	char head[384], old[sizeof(err->message)];
	va_list ap;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, err->message, sizeof(old));
	snprintf(err->message, sizeof(err->message), "%s: %s", head, old);
}

const char *wd_code_name(int code)
{
	if (code < 0)
		code = -code;
	switch (code) {
	case WEIGHTD_OK: return "ok";
	case WEIGHTD_E_INVALID_ARGUMENT: return "invalid-argument";
	case WEIGHTD_E_NOT_FOUND: return "not-found";
	case WEIGHTD_E_PERMISSION_DENIED: return "permission-denied";
	case WEIGHTD_E_BAD_CHECKPOINT: return "bad-checkpoint";
	case WEIGHTD_E_UNSUPPORTED: return "unsupported";
	case WEIGHTD_E_SOURCE_CHANGED: return "source-changed";
	case WEIGHTD_E_IO: return "io-error";
	case WEIGHTD_E_RESOURCE_EXHAUSTED: return "resource-exhausted";
	case WEIGHTD_E_LIMIT_EXCEEDED: return "limit-exceeded";
	case WEIGHTD_E_PROTOCOL: return "protocol-error";
	case WEIGHTD_E_INTERNAL: return "internal-error";
	case WEIGHTD_E_DISCONNECTED: return "disconnected";
	case WEIGHTD_E_OUT_OF_RANGE: return "out-of-range";
	case WEIGHTD_E_UNKNOWN_SOURCE: return "unknown-source";
	case WEIGHTD_E_UNKNOWN_TENSOR: return "unknown-tensor";
	case WEIGHTD_E_EMPTY_INPUTS: return "empty-inputs";
	case WEIGHTD_E_DTYPE_MISMATCH: return "dtype-mismatch";
	case WEIGHTD_E_SHAPE_MISMATCH: return "shape-mismatch";
	case WEIGHTD_E_AXIS_OUT_OF_RANGE: return "axis-out-of-range";
	case WEIGHTD_E_ELEMENT_COUNT_MISMATCH: return "element-count-mismatch";
	case WEIGHTD_E_BYTE_COUNT_MISMATCH: return "byte-count-mismatch";
	case WEIGHTD_E_NOT_A_PERMUTATION: return "not-a-permutation";
	case WEIGHTD_E_ZERO_SIZED: return "zero-sized-output";
	case WEIGHTD_E_UNSUPPORTED_CAST: return "unsupported-cast";
	case WEIGHTD_E_OVERFLOW: return "arithmetic-overflow";
	case WEIGHTD_E_RECIPE_TOO_DEEP: return "recipe-too-deep";
	case WEIGHTD_E_RECIPE_TOO_LARGE: return "recipe-too-large";
	case WEIGHTD_E_DUPLICATE_NAME: return "duplicate-name";
	case WEIGHTD_E_BAD_ALIAS: return "bad-alias";
	case WEIGHTD_E_ALIAS_CYCLE: return "alias-cycle";
	case WEIGHTD_E_SLOT_MISMATCH: return "slot-mismatch";
	case WEIGHTD_E_CANCELLED: return "cancelled";
	case WEIGHTD_E_UNSUPPORTED_VERSION: return "unsupported-version";
	case WEIGHTD_E_SCALE_MISMATCH: return "scale-mismatch";
	default: return "unknown-error";
	}
}

/* Open fds counted in /proc/self/fd (-1 when it cannot be read, e.g. out of fds to open it). */
static long count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own fd */
}

void wd_nofile_text(char *buf, size_t cap, const char *who, const char *how)
{
	struct rlimit rl;
	char lim[32] = "?", open_now[48] = "";
	long n = count_open_fds();

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur == RLIM_INFINITY)
			snprintf(lim, sizeof(lim), "unlimited");
		else
			snprintf(lim, sizeof(lim), "%llu", (unsigned long long)rl.rlim_cur);
	}
	if (n >= 0)
		snprintf(open_now, sizeof(open_now), ", %ld open now", n);
	snprintf(buf, cap,
		 "%s (pid %d) has reached its limit of %s open files (RLIMIT_NOFILE%s); raise it "
		 "(%s)", who, (int)getpid(), lim, open_now, how);
}
