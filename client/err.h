/* SPDX-License-Identifier: Apache-2.0 */
/* err.h - filling a struct weightd_error the way every libweightd call does (err.c). */
#ifndef WC_ERR_H
#define WC_ERR_H

#include "weightd.pb-c.h"
#include "weightd/client.h"

void wc_err_clear(weightd_error *err);
/* Set code and sentence; returns -code. Accepts err == NULL. */
int wc_err_set(weightd_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fill the fields naming what the error is about (each may be NULL). */
void wc_err_about(weightd_error *err, const char *checkpoint, const char *tensor,
		  const char *slot);
/* Append text to the message (truncated to fit). */
void wc_err_append(weightd_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copy a daemon Error into err; returns -code (WEIGHTD_E_INTERNAL when the daemon sent 0). */
int wc_err_from_wire(weightd_error *err, const Weightd__Error *pe);
/* Copy src to dst (dst may be NULL); returns -src->code. */
int wc_err_copy(weightd_error *dst, const weightd_error *src);
/* Put 'slot "NAME": ' in front of the message when it names a slot the sentence does not. */
void wc_err_name_slot(weightd_error *err);

#endif
