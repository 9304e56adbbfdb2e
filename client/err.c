/* SPDX-License-Identifier: Apache-2.0 */
/* err.c - libweightd's error reporting: filling a struct weightd_error (wc_err_*) and the
 * names of its codes. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

const char *weightd_code_name(int code)
{
	return wd_code_name(code);
}

/* The client's helpers are the core's (src/error.c), with one difference: a client call starts
 * from a clean error, so wc_err_set clears every field first. */
void wc_err_clear(weightd_error *err)
{
	wd_error_clear(err);
}

int wc_err_set(weightd_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	int r;

	wd_error_clear(err);
	va_start(ap, fmt);
	r = wd_error_vset(err, code, fmt, ap);
	va_end(ap);
	return r;
}

void wc_err_about(weightd_error *err, const char *checkpoint, const char *tensor,
		  const char *slot)
{
	wd_error_about(err, checkpoint, tensor);
	if (err && slot)
		snprintf(err->slot, sizeof(err->slot), "%s", slot);
}

void wc_err_append(weightd_error *err, const char *fmt, ...)
{
	va_list ap;
	size_t len;

	if (!err)
		return;
	len = strnlen(err->message, sizeof(err->message));
	if (len + 1 >= sizeof(err->message))
		return;
	va_start(ap, fmt);
	vsnprintf(err->message + len, sizeof(err->message) - len, fmt, ap);
	va_end(ap);
}

int wc_err_from_wire(weightd_error *err, const Weightd__Error *pe)
{
	int code = (int)pe->code;
	char msg[sizeof(err->message)];

	if (code <= 0)
		code = WEIGHTD_E_INTERNAL;
	if (!err)
		return -code;
	if (pe->message && pe->message[0])
		snprintf(msg, sizeof(msg), "%s", pe->message);
	else
		snprintf(msg, sizeof(msg), "weightd refused the request (%s)", wd_code_name(code));
	wc_err_clear(err);
	err->code = code;
	wc_err_about(err, pe->checkpoint, pe->tensor, pe->slot);
	err->node = pe->node;
	err->axis = pe->axis;
	err->expected = pe->expected;
	err->actual = pe->actual;
	memcpy(err->message, msg, sizeof(msg));
	return -code;
}

/*
 * The one place a slot's name enters a message. weightd and the library's own checks report the
 * slot in err->slot and write the sentence without it (no message carries a 'slot "NAME": '
 * prefix over the wire, so none has to be stripped where the caller named no slot); calls on a
 * unit, whose caller named its slots, call this to lead the message with 'slot "NAME": '. A
 * sentence that already names the slot quoted (a duplicate name, an alias, a declared shape) is
 * left as it is.
 */
void wc_err_name_slot(weightd_error *err)
{
	char msg[sizeof(err->message)], quoted[sizeof(err->slot) + 2];

	if (!err || !err->slot[0])
		return;
	snprintf(quoted, sizeof(quoted), "\"%s\"", err->slot);
	if (strstr(err->message, quoted))
		return;
	memcpy(msg, err->message, sizeof(msg));
	snprintf(err->message, sizeof(err->message), "slot %s: %s", quoted, msg);
}

int wc_err_copy(weightd_error *dst, const weightd_error *src)
{
	if (dst)
		*dst = *src;
	return -src->code;
}
