/* SPDX-License-Identifier: Apache-2.0 */
/* azure_parse.c - Azure's answers as untrusted bytes: the error XML's code and message, a token
 * endpoint's JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "azure.h"
#include "error.h"

#define TOKEN_MAX 16384 /* bytes in an access token (Entra's are about 2 KiB) */

/* The text between <tag> and </tag> within [body, body + n), or NULL. */
static const char *element(const char *body, size_t n, const char *tag, size_t *len)
{
	char open[32], close[32];
	size_t ol = (size_t)snprintf(open, sizeof(open), "<%s>", tag);
	size_t cl = (size_t)snprintf(close, sizeof(close), "</%s>", tag);
	const char *s = memmem(body, n, open, ol), *e;

	if (!s)
		return NULL;
	s += ol;
	e = memmem(s, n - (size_t)(s - body), close, cl);
	if (!e)
		return NULL;
	*len = (size_t)(e - s);
	return s;
}

/* Append text[0..len) to buf at *at, printable ASCII only (others become '?'). */
static void put_text(char *buf, size_t cap, size_t *at, const char *text, size_t len)
{
	for (size_t i = 0; i < len && *at + 1 < cap; i++) {
		unsigned char c = (unsigned char)text[i];
		buf[(*at)++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	buf[*at < cap ? *at : cap - 1] = '\0';
}

void wd_azure_error_reason(const char *body, size_t n, char *buf, size_t cap)
{
	size_t cl = 0, ml = 0, at = 0;
	const char *c, *m;

	if (!cap)
		return;
	buf[0] = '\0';
	if (!body)
		return;
	c = element(body, n, "Code", &cl);
	if (!c)
		return;
	m = element(body, n, "Message", &ml);
	if (m) {
		size_t line = 0;
		while (line < ml && m[line] != '\n' && m[line] != '\r')
			line++;
		ml = line;
	}
	put_text(buf, cap, &at, " (", 2);
	put_text(buf, cap, &at, c, cl > 128 ? 128 : cl);
	if (m && ml) {
		put_text(buf, cap, &at, ": ", 2);
		put_text(buf, cap, &at, m, ml > 400 ? 400 : ml);
	}
	put_text(buf, cap, &at, ")", 1);
}

/* A number or a decimal string (IMDS sends "3599"), or -1. */
static int64_t int_of(json_t *v)
{
	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char *end;
		long long x;
		if (!*s || strlen(s) > 18)
			return -1;
		x = strtoll(s, &end, 10);
		return *end == '\0' && x >= 0 ? (int64_t)x : -1;
	}
	return -1;
}

void wd_azure_token_answer_clear(struct wd_azure_token_answer *t)
{
	if (t->access_token) {
		explicit_bzero(t->access_token, strlen(t->access_token));
		free(t->access_token);
	}
	memset(t, 0, sizeof(*t));
	t->expires_in = t->expires_on = -1;
}

int wd_azure_token_parse(const char *body, size_t n, struct wd_azure_token_answer *t,
			 weightd_error *err)
{
	json_error_t je;
	json_t *j, *v;
	size_t at = 0;

	memset(t, 0, sizeof(*t));
	t->expires_in = t->expires_on = -1;
	j = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return wd_error_set(err, WEIGHTD_E_IO,
				    "the token endpoint's answer is not a JSON object");
	}
	v = json_object_get(j, "error");
	if (json_is_string(v)) {
		const char *e = json_string_value(v), *d;
		put_text(t->error, sizeof(t->error), &at, e, strcspn(e, "\r\n"));
		d = json_string_value(json_object_get(j, "error_description"));
		if (d) {
			put_text(t->error, sizeof(t->error), &at, ": ", 2);
			put_text(t->error, sizeof(t->error), &at, d, strcspn(d, "\r\n"));
		}
	}
	t->expires_in = int_of(json_object_get(j, "expires_in"));
	t->expires_on = int_of(json_object_get(j, "expires_on"));
	v = json_object_get(j, "access_token");
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t len = json_string_length(v);
		bool ok = len > 0 && len <= TOKEN_MAX && strlen(s) == len;
		for (size_t i = 0; ok && i < len; i++)
			ok = (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f;
		if (!ok) {
			json_decref(j);
			return wd_error_set(err, WEIGHTD_E_IO,
					    "the token endpoint's access_token is empty, longer "
					    "than %d bytes or not a header value",
					    TOKEN_MAX);
		}
		t->access_token = strdup(s);
		if (!t->access_token) {
			json_decref(j);
			return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
	}
	json_decref(j);
	return 0;
}
