/* SPDX-License-Identifier: Apache-2.0 */
/* error.h - filling a weightd_error (the type of <weightd/error.h>) and naming its codes. */
#ifndef WD_ERROR_H
#define WD_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <weightd/error.h>

/*
 * The codes (WEIGHTD_E_*) and the error struct (weightd_error) are libweightd's public ones, from
 * <weightd/error.h>: the daemon, the core and the library report errors with one type and one
 * list of codes, numbered as weightd.ErrorCode on the wire, so an error crosses the socket and
 * reaches a client field by field, never re-encoded.
 *
 * Where an error is reported, functions return 0 on success or -code (a negative WEIGHTD_E_*) and,
 * when `err` is not NULL, fill it. Fields that do not apply stay empty/zero. `node` is the recipe
 * node index + 1 (0 = not about a node); `axis` is -1 when not about an axis. The message is the
 * sentence about what was wrong; what it is about (checkpoint, tensor, slot, node) goes in the
 * fields, and libweightd names a slot in the message only where its caller named one.
 */

/* Reset to "no error". Accepts NULL. */
void wd_error_clear(weightd_error *err);

/* Set code and a printf-formatted sentence; returns -code so callers can `return wd_error_set(...)`.
 * Accepts err == NULL (then only returns). */
int wd_error_set(weightd_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* wd_error_set with a va_list. */
int wd_error_vset(weightd_error *err, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* Fill the structured fields that name what the error is about (each may be NULL). */
void wd_error_about(weightd_error *err, const char *checkpoint, const char *tensor);

/* Prefix the current message with "prefix: " (to add context while an error travels up). */
void wd_error_prefix(weightd_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * The sentence for a process out of file descriptors, to follow "what failed: ": "<who> (pid N)
 * has reached its limit of L open files (RLIMIT_NOFILE, O open now); raise it (<how>)". Written
 * to buf (always terminated). Used wherever EMFILE/ENFILE or a truncated SCM_RIGHTS is met, so
 * the error names the process and the knob instead of looking like a broken connection.
 */
void wd_nofile_text(char *buf, size_t cap, const char *who, const char *how);

/* Short stable name of a code ("invalid-argument", "unknown-tensor", ...), never NULL. */
const char *wd_code_name(int code);

#endif
