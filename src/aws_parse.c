/* SPDX-License-Identifier: Apache-2.0 */
/* aws_parse.c - what AWS credential endpoints answer: STS XML (libxml2), container and IMDS JSON
 * (jansson), their times, each value checked before it may become a header. */
#include "aws_parse.h"

#include <jansson.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"

#define XML_DEPTH_MAX 16 /* STS's answers nest 4 deep */

void wd_aws_parse_wipe(struct wd_aws_parsed *p)
{
	explicit_bzero(p, sizeof(*p));
}

/* Text safe to show: printable ASCII, the rest as '?'. */
static void shown(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			*s = '?';
}

/* A value that may go into a header or a signature: 1 to cap-1 visible ASCII characters. */
static bool visible(const char *s, size_t cap)
{
	size_t n = strlen(s);

	if (n == 0 || n >= cap)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

int wd_aws_parse_time(const char *s, int64_t *ret)
{
	struct tm tm = { 0 };
	const char *p;
	time_t t;

	if (!s)
		return -1;
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	if (*p == '.') /* fractions of a second */
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0 && strcmp(p, "UTC") != 0)
		return -1;
	if (tm.tm_year < 70 || tm.tm_year > 1100)
		return -1;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*ret = (int64_t)t;
	return 0;
}

/* The three keys and the expiry, each checked; 0, or -WEIGHTD_E_IO with reason. */
static int take(const char *id, const char *secret, const char *token, const char *expiration,
		struct wd_aws_parsed *ret, char *reason, size_t cap)
{
	if (!id || !visible(id, sizeof(ret->access_key)))
		return snprintf(reason, cap, "the answer has no usable access key id"),
		       -WEIGHTD_E_IO;
	if (!secret || !visible(secret, sizeof(ret->secret_key)))
		return snprintf(reason, cap, "the answer has no usable secret access key"),
		       -WEIGHTD_E_IO;
	if (token && *token && !visible(token, sizeof(ret->token)))
		return snprintf(reason, cap,
				"the answer's session token is longer than %u bytes or has "
				"characters a header cannot carry",
				WD_AWS_TOKEN_MAX - 1),
		       -WEIGHTD_E_IO;
	ret->expires = 0;
	if (expiration && wd_aws_parse_time(expiration, &ret->expires) < 0)
		return snprintf(reason, cap, "the answer's expiration is not an ISO 8601 UTC time"),
		       -WEIGHTD_E_IO;
	snprintf(ret->access_key, sizeof(ret->access_key), "%s", id);
	snprintf(ret->secret_key, sizeof(ret->secret_key), "%s", secret);
	snprintf(ret->token, sizeof(ret->token), "%s", token ? token : "");
	return 0;
}

/* ---- STS (XML) ------------------------------------------------------------------------------ */

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init(void)
{
	xmlInitParser();
}

/* The first element called `name` at or under n (depth-bounded), or NULL. */
static xmlNode *find(xmlNode *n, const char *name, int depth)
{
	if (depth > XML_DEPTH_MAX)
		return NULL;
	for (; n; n = n->next) {
		xmlNode *f;
		if (n->type != XML_ELEMENT_NODE)
			continue;
		if (strcmp((const char *)n->name, name) == 0)
			return n;
		if ((f = find(n->children, name, depth + 1)))
			return f;
	}
	return NULL;
}

/* What every parse starts with: nothing kept, no reason yet, and an answer of a size worth
 * parsing (0, or -WEIGHTD_E_IO with the reason). */
static int parse_begin(size_t n, struct wd_aws_parsed *ret, char *reason, size_t cap)
{
	wd_aws_parse_wipe(ret);
	snprintf(reason, cap, "%s", "");
	if (n == 0 || n > WD_AWS_BODY_MAX) {
		snprintf(reason, cap, "the answer is empty or larger than %u bytes",
			 WD_AWS_BODY_MAX);
		return -WEIGHTD_E_IO;
	}
	return 0;
}

/* The text of parent's child `name`, malloc'd by libxml2 (xmlFree), or NULL. */
static char *child_text(xmlNode *parent, const char *name)
{
	for (xmlNode *n = parent ? parent->children : NULL; n; n = n->next)
		if (n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0)
			return (char *)xmlNodeGetContent(n);
	return NULL;
}

static void xfree_secret(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		xmlFree(s);
	}
}

int wd_aws_parse_sts(const char *body, size_t n, struct wd_aws_parsed *ret, char *reason,
		     size_t cap)
{
	xmlDoc *doc;
	xmlNode *root, *c, *e;
	int rc;

	if ((rc = parse_begin(n, ret, reason, cap)) < 0)
		return rc;
	/* STS sends no DTD: a document with one is refused before libxml2 sees it */
	if (memmem(body, n, "<!", 2) &&
	    (memmem(body, n, "<!DOCTYPE", 9) || memmem(body, n, "<!ENTITY", 8)))
		return snprintf(reason, cap, "the answer declares a DTD, which STS never does"),
		       -WEIGHTD_E_IO;
	pthread_once(&xml_once, xml_init);
	doc = xmlReadMemory(body, (int)n, NULL, NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
				    XML_PARSE_NOCDATA);
	if (!doc)
		return snprintf(reason, cap, "the answer is not well-formed XML"), -WEIGHTD_E_IO;
	root = xmlDocGetRootElement(doc);
	if ((e = find(root, "Error", 0))) {
		char *code = child_text(e, "Code"), *msg = child_text(e, "Message");
		snprintf(reason, cap, "%s%s%s", code ? code : "an error without a code",
			 msg ? ": " : "", msg ? msg : "");
		shown(reason);
		xmlFree(code);
		xmlFree(msg);
		xmlFreeDoc(doc);
		return -WEIGHTD_E_PERMISSION_DENIED;
	}
	c = find(root, "Credentials", 0);
	if (!c) {
		xmlFreeDoc(doc);
		return snprintf(reason, cap, "the answer has no <Credentials>"), -WEIGHTD_E_IO;
	}
	{
		char *id = child_text(c, "AccessKeyId"), *secret = child_text(c, "SecretAccessKey");
		char *token = child_text(c, "SessionToken"), *exp = child_text(c, "Expiration");
		rc = take(id, secret, token, exp, ret, reason, cap);
		xmlFree(id);
		xfree_secret(secret);
		xfree_secret(token);
		xmlFree(exp);
	}
	xmlFreeDoc(doc);
	if (rc < 0)
		wd_aws_parse_wipe(ret);
	return rc;
}

/* ---- container credentials and IMDS (JSON) --------------------------------------------------- */

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

int wd_aws_parse_json(const char *body, size_t n, struct wd_aws_parsed *ret, char *reason,
		      size_t cap)
{
	json_error_t je;
	json_t *j;
	const char *code;
	int rc;

	if ((rc = parse_begin(n, ret, reason, cap)) < 0)
		return rc;
	j = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return snprintf(reason, cap, "the answer is not a JSON object"), -WEIGHTD_E_IO;
	}
	code = jstr(j, "Code");
	if (code && strcmp(code, "Success") != 0) {
		snprintf(reason, cap, "Code %s%s%s", code, jstr(j, "Message") ? ": " : "",
			 jstr(j, "Message") ? jstr(j, "Message") : "");
		shown(reason);
		json_decref(j);
		return -WEIGHTD_E_IO;
	}
	if (!json_object_get(j, "AccessKeyId") && (jstr(j, "code") || jstr(j, "message"))) {
		snprintf(reason, cap, "%s%s%s", jstr(j, "code") ? jstr(j, "code") : "error",
			 jstr(j, "message") ? ": " : "",
			 jstr(j, "message") ? jstr(j, "message") : "");
		shown(reason);
		json_decref(j);
		return -WEIGHTD_E_IO;
	}
	rc = take(jstr(j, "AccessKeyId"), jstr(j, "SecretAccessKey"), jstr(j, "Token"),
		  jstr(j, "Expiration"), ret, reason, cap);
	{
		/* jansson keeps its strings: wipe the secrets before they are freed */
		json_t *s = json_object_get(j, "SecretAccessKey"), *t = json_object_get(j, "Token");
		if (json_is_string(s))
			explicit_bzero((char *)json_string_value(s), json_string_length(s));
		if (json_is_string(t))
			explicit_bzero((char *)json_string_value(t), json_string_length(t));
	}
	json_decref(j);
	if (rc < 0)
		wd_aws_parse_wipe(ret);
	return rc;
}
