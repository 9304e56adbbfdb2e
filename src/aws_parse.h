/* SPDX-License-Identifier: Apache-2.0 */
/* aws_parse.h - `wd_aws_parse_*` (aws_parse.c): what AWS credential endpoints answer. */
#ifndef WD_AWS_PARSE_H
#define WD_AWS_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <weightd/error.h>

/* Bounds on what a credential endpoint may send (untrusted bytes). */
#define WD_AWS_BODY_MAX	  (64u << 10) /* a whole answer */
#define WD_AWS_KEY_MAX	  129	      /* an access key id or a secret key, NUL included */
#define WD_AWS_TOKEN_MAX  8192	      /* a session token, NUL included */
#define WD_AWS_REASON_MAX 320	      /* "Code: Message" of an error answer */

/*
 * Temporary (or long-lived) keys as an endpoint gave them. The token is the session token ("" for
 * none); expires is Unix seconds (0: the keys do not expire). Fixed arrays: nothing to free, and
 * wd_aws_parse_wipe clears the secrets.
 */
struct wd_aws_parsed {
	char access_key[WD_AWS_KEY_MAX];
	char secret_key[WD_AWS_KEY_MAX];
	char token[WD_AWS_TOKEN_MAX];
	int64_t expires;
};

/*
 * An STS answer (AssumeRoleWithWebIdentity or AssumeRole, XML) of n bytes. 0 and *ret filled from
 * <Credentials>; or, for an <ErrorResponse>, -WEIGHTD_E_PERMISSION_DENIED with reason set to
 * "Code: Message" (printable ASCII); or -WEIGHTD_E_IO with reason saying what the answer lacks.
 * The document is parsed by libxml2 without network, DTDs or entity substitution.
 */
int wd_aws_parse_sts(const char *body, size_t n, struct wd_aws_parsed *ret, char *reason,
		     size_t cap);

/*
 * A container credentials endpoint's or IMDS's JSON answer ({"AccessKeyId", "SecretAccessKey",
 * "Token", "Expiration"}; IMDS adds "Code": "Success"). 0 and *ret filled; or -WEIGHTD_E_IO with
 * reason saying what is wrong (an error object's "code"/"message", or IMDS's non-Success Code,
 * named in it).
 */
int wd_aws_parse_json(const char *body, size_t n, struct wd_aws_parsed *ret, char *reason,
		      size_t cap);

/* An ISO 8601 UTC time ("2026-12-07T08:00:00Z", fractions allowed) into Unix seconds; 0 or -1. */
int wd_aws_parse_time(const char *s, int64_t *ret);

/* Clear the secrets of p. */
void wd_aws_parse_wipe(struct wd_aws_parsed *p);

#endif
