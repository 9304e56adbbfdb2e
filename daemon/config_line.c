/* SPDX-License-Identifier: Apache-2.0 */
/* config_line.c - the line reader inih is fed: line numbers, leading blanks, NUL bytes, the line
 * limit, section headers, and lines longer than inih's own buffer. */
#include "config_int.h"

#include <ctype.h>
#include <string.h>

/*
 * inih reads lines into a buffer of its own size (200 bytes in Debian's build), too short for a
 * path under a Hugging Face cache. A longer line is split here by inih's own rules: the key is
 * the text before the first '=' or ':', the value what follows, without leading and trailing
 * blanks and cut at a ';' that follows a blank (an inline comment). inih is handed "key =" and
 * the handler takes the value from ld->long_val. Writes the short line into str (num bytes);
 * false with the error recorded when the line is not "key = value" or its key is too long.
 */
static bool split_long_line(struct loader *ld, const char *start, size_t n, char *str, int num)
{
	const char *sep = NULL, *v, *end = start + n;
	size_t klen, vlen;
	bool blank = false;

	if (*start == ';' || *start == '#') {
		str[0] = '\n';             /* a comment: nothing for inih */
		str[1] = '\0';
		return true;
	}
	for (const char *p = start; p < end && !sep; p++) {
		if (*p == '=' || *p == ':')
			sep = p;
		else if (*p == ';' && blank)
			break;
		blank = *p == ' ' || *p == '\t';
	}
	if (!sep || *start == '[') {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, *start == '['
			    ? "line is %zu characters long; a section header may be at most %d"
			    : "expected 'key = value' (a line of %zu characters, longer than %d, must be one)",
			    n, num - 2);
		return false;
	}
	klen = (size_t)(sep - start);
	if (klen + 3 > (size_t)num) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "the key name before '%c' is %zu characters long", *sep, klen);
		return false;
	}
	v = sep + 1;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	blank = false;
	for (vlen = 0; v + vlen < end; vlen++) {
		if (v[vlen] == ';' && blank)
			break;
		blank = v[vlen] == ' ' || v[vlen] == '\t';
	}
	while (vlen && isspace((unsigned char)v[vlen - 1]))
		vlen--;
	memcpy(ld->long_val, v, vlen);
	ld->long_val[vlen] = '\0';
	ld->long_line = ld->line;
	memcpy(str, start, klen + 1);
	str[klen + 1] = '\n';
	str[klen + 2] = '\0';
	return true;
}

/* An empty line for inih in place of one in error; NULL once reading must stop. */
static char *skipped(const struct loader *ld, char *str)
{
	if (ld->stop)
		return NULL;
	str[0] = '\n';
	str[1] = '\0';
	return str;
}

/* Would inih split this line (not a section header) into a key and a value? Blank lines and
 * comments pass. By inih's rules: the first '=' or ':' before a ';' that follows a blank. */
static bool key_value(const char *start, size_t n)
{
	bool blank = false;

	if (!n || *start == ';' || *start == '#')
		return true;
	for (size_t i = 0; i < n; i++) {
		if (start[i] == '=' || start[i] == ':')
			return true;
		if (start[i] == ';' && blank)
			return false;
		blank = start[i] == ' ' || start[i] == '\t';
	}
	/* a line of blanks only (a CR of a CRLF file among them) */
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)start[i]))
			return false;
	return true;
}

/*
 * fgets-style reader over the file's bytes. It numbers lines (inih's handler gets no line number),
 * drops leading blanks so an indented key is a key and not a continuation of the previous value,
 * rejects lines longer than inih's buffer instead of letting inih split them, and opens sections.
 * A line in error is recorded and handed to inih as an empty line, so that reading goes on and
 * every error of the file is found; NULL at the end or once reading must stop.
 */
char *config_reader(char *str, int num, void *stream)
{
	struct loader *ld = stream;
	const char *start, *nl;
	size_t n;

	if (ld->stop || ld->pos >= ld->len)
		return NULL;
	start = ld->buf + ld->pos;
	nl = memchr(start, '\n', ld->len - ld->pos);
	n = nl ? (size_t)(nl - start) : ld->len - ld->pos;
	ld->pos += n + (nl ? 1 : 0);
	ld->line++;
	if (ld->line == 1 && n >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0) {
		start += 3;
		n -= 3;
	}
	while (n && (*start == ' ' || *start == '\t')) {
		start++;
		n--;
	}
	if (num < 8)
		return NULL;
	if (memchr(start, '\0', n)) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "line contains a NUL byte");
		return skipped(ld, str);
	}
	if (n > CONFIG_MAX_LINE) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT,
			    "line is %zu characters long, at most %d allowed", n, CONFIG_MAX_LINE);
		return skipped(ld, str);
	}
	if (n > (size_t)num - 2)
		return split_long_line(ld, start, n, str, num) ? str : skipped(ld, str);
	if (n && start[0] == '[') {
		if (!config_open_section(ld, start, n))
			return skipped(ld, str);
	} else if (!key_value(start, n)) {
		config_fail(ld, ld->line, WEIGHTD_E_INVALID_ARGUMENT, "expected 'key = value'");
		return skipped(ld, str);
	}
	memcpy(str, start, n);
	str[n] = '\n';
	str[n + 1] = '\0';
	return str;
}

/* The text of line `line` (1-based) for a syntax message: does it look like a section header? */
bool config_line_is_header(const struct loader *ld, int line)
{
	const char *p = ld->buf, *end = ld->buf + ld->len;

	for (int i = 1; i < line && p < end; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		p = nl ? nl + 1 : end;
	}
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p < end && *p == '[';
}
