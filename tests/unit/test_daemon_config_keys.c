/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_config_keys.c - the table of weightd.conf keys held to weightd.conf(5) and to the
 * example configuration: every key documented, nothing documented that is not a key, the same
 * default wherever the page or the example states one, and the same word on what a reload does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "config.h"
#include "digest.h"
#include "frame.h"

#ifndef WD_CONF_MAN
#error "WD_CONF_MAN (the path of docs/weightd.conf.5) comes from tests/CMakeLists.txt"
#endif
#ifndef WD_CONF_EXAMPLE
#error "WD_CONF_EXAMPLE (the path of systemd/weightd.conf.example) comes from tests/CMakeLists.txt"
#endif

#define MAX_DOC 128

/* One key as the man page documents it. */
struct doc_key {
	enum config_section section;
	char name[64];
	bool has_default; /* "(default VALUE)" or "(default: unset)" */
	char def[256];    /* VALUE without troff escapes; "" for unset */
	bool required;    /* "(required)" */
};

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Copy src to dst dropping troff's "\" before '-' (and the "\&" no-op). */
static void untroff(char *dst, size_t cap, const char *src, size_t n)
{
	size_t j = 0;

	for (size_t i = 0; i < n && j + 1 < cap; i++) {
		if (src[i] == '\\' && i + 1 < n && (src[i + 1] == '-' || src[i + 1] == '&')) {
			if (src[++i] == '&')
				continue;
		}
		dst[j++] = src[i];
	}
	dst[j] = '\0';
}

/*
 * The tag line after .TP in a key section: ".BR name \" (default \" VALUE )",
 * ".BR name \" (default: unset)\"", ".BR name \" (required)\"" or ".B name".
 */
static void parse_tag(const char *line, size_t len, struct doc_key *dk)
{
	static const char def_mark[] = "\" (default \" ";
	const char *p = line, *end = line + len, *q;

	if (len > 4 && strncmp(p, ".BR ", 4) == 0)
		p += 4;
	else if (len > 3 && strncmp(p, ".B ", 3) == 0)
		p += 3;
	else
		fail_msg("weightd.conf(5): a .TP tag that names no key: %.*s", (int)len, line);
	for (q = p; q < end && *q != ' '; q++)
		;
	untroff(dk->name, sizeof(dk->name), p, (size_t)(q - p));
	p = q;
	q = memmem(p, (size_t)(end - p), def_mark, sizeof(def_mark) - 1);
	if (q) {
		const char *v = q + sizeof(def_mark) - 1, *ve = end;

		while (ve > v && (ve[-1] == ' ' || ve[-1] == ')'))
			ve--;
		dk->has_default = true;
		untroff(dk->def, sizeof(dk->def), v, (size_t)(ve - v));
	} else if (memmem(p, (size_t)(end - p), "(default: unset)", 16)) {
		dk->has_default = true;
		dk->def[0] = '\0';
	}
	dk->required = memmem(p, (size_t)(end - p), "(required)", 10) != NULL;
}

/* Every key weightd.conf(5) documents: each .TP entry of its two key sections. */
static size_t man_keys(struct doc_key *out, size_t cap)
{
	char *text = read_text(WD_CONF_MAN);
	enum config_section section = CONFIG_NONE;
	bool tag_next = false;
	size_t n = 0;

	for (char *line = text; *line;) {
		char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);

		if (len >= 3 && strncmp(line, ".SH", 3) == 0) {
			section = CONFIG_NONE;
			if (memmem(line, len, "[daemon]", 8))
				section = CONFIG_DAEMON;
			else if (memmem(line, len, "[checkpoint:NAME]", 17))
				section = CONFIG_CHECKPOINT;
			tag_next = false;
		} else if (tag_next) {
			assert_true(n < cap);
			memset(&out[n], 0, sizeof(out[n]));
			out[n].section = section;
			parse_tag(line, len, &out[n]);
			n++;
			tag_next = false;
		} else if (section != CONFIG_NONE && len == 3 && strncmp(line, ".TP", 3) == 0) {
			tag_next = true;
		}
		line = nl ? nl + 1 : line + len;
	}
	free(text);
	return n;
}

static const char *section_name(enum config_section s)
{
	return s == CONFIG_DAEMON ? "[daemon]" : "[checkpoint:NAME]";
}

/* Every key of the table has its entry in weightd.conf(5), in its section, with its default. */
static void test_table_documented(void **state)
{
	struct doc_key doc[MAX_DOC];
	size_t n = man_keys(doc, MAX_DOC);

	(void)state;
	assert_true(n > 0);
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];
		const struct doc_key *dk = NULL;

		for (size_t j = 0; j < n && !dk; j++)
			if (doc[j].section == k->section && strcmp(doc[j].name, k->name) == 0)
				dk = &doc[j];
		if (!dk)
			fail_msg("key %s of %s is not documented in weightd.conf(5)", k->name,
				 section_name(k->section));
		if (dk->has_default && (!k->def || strcmp(dk->def, k->def) != 0))
			fail_msg("%s: weightd.conf(5) gives the default '%s', the table '%s'",
				 k->name, dk->def, k->def ? k->def : "(none)");
		if (!dk->has_default && k->def && k->section == CONFIG_DAEMON)
			fail_msg("%s: weightd.conf(5) states no default (the table: '%s')", k->name,
				 k->def);
		if (dk->required != ((k->flags & CONFIG_REQUIRED) != 0))
			fail_msg("%s: required in %s only", k->name,
				 dk->required ? "weightd.conf(5)" : "the table");
	}
}

/* Every key weightd.conf(5) documents is a key of the table, once. */
static void test_documented_in_table(void **state)
{
	struct doc_key doc[MAX_DOC];
	size_t n = man_keys(doc, MAX_DOC);

	(void)state;
	for (size_t j = 0; j < n; j++) {
		if (!config_key_find(doc[j].section, doc[j].name))
			fail_msg("weightd.conf(5) documents '%s' in %s, which is no key there",
				 doc[j].name, section_name(doc[j].section));
		for (size_t i = 0; i < j; i++)
			if (doc[i].section == doc[j].section &&
			    strcmp(doc[i].name, doc[j].name) == 0)
				fail_msg("weightd.conf(5) documents '%s' twice", doc[j].name);
	}
	assert_int_equal(n, config_n_keys);
}

/* The example configuration shows every [daemon] key commented out with its default, and no
 * other key. */
static void test_example(void **state)
{
	char *text = read_text(WD_CONF_EXAMPLE);
	char *ckpt = strstr(text, "\n#[checkpoint:");
	size_t shown = 0;

	(void)state;
	if (ckpt)
		*ckpt = '\0'; /* the checkpoint sections after it are examples, not defaults */
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *eq = strstr(line, " =");
		const struct config_key *k;

		if (line[0] != '#' || !eq || strchr(line, ' ') != eq)
			continue;
		*eq = '\0';
		k = config_key_find(CONFIG_DAEMON, line + 1);
		if (!k)
			fail_msg("the example sets '%s', which is no [daemon] key", line + 1);
		eq += 2;
		eq += strspn(eq, " ");
		if (strcmp(eq, k->def ? k->def : "") != 0)
			fail_msg("%s: the example shows '%s', the table's default is '%s'",
				 k->name, eq, k->def ? k->def : "(none)");
		shown++;
	}
	for (size_t i = 0; i < config_n_keys; i++)
		shown -= config_keys[i].section == CONFIG_DAEMON;
	assert_int_equal(shown, 0);
	free(text);
}

/* The name a ".B name" or ".BR name ..." line sets in bold, without troff escapes; "" for others. */
static void bold_word(const char *line, size_t len, char *out, size_t cap)
{
	const char *p = line, *end = line + len, *q;

	out[0] = '\0';
	if (len > 4 && strncmp(p, ".BR ", 4) == 0)
		p += 4;
	else if (len > 3 && strncmp(p, ".B ", 3) == 0)
		p += 3;
	else
		return;
	for (q = p; q < end && *q != ' '; q++)
		;
	untroff(out, cap, p, (size_t)(q - p));
}

/* Which [daemon] keys weightd.conf(5) says a reload applies (the paragraph that starts "A reload
 * applies" and the RELOADING section up to "These take effect only when the daemon restarts")
 * and which it says need a restart (from there to the end of that sentence). */
static void reload_docs(char live[][64], size_t *n_live, char restart[][64], size_t *n_restart)
{
	char *text = read_text(WD_CONF_MAN);
	enum { NONE, LIVE, RESTART } in = NONE;

	*n_live = *n_restart = 0;
	for (char *line = text; *line;) {
		char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char word[64];

		if (memmem(line, len, "A reload applies", 16) ||
		    (len >= 13 && strncmp(line, ".SH RELOADING", 13) == 0))
			in = LIVE;
		else if (memmem(line, len, "take effect only when the daemon restarts", 41))
			in = RESTART;
		else if (len >= 3 && (strncmp(line, ".TP", 3) == 0 || strncmp(line, ".SH", 3) == 0))
			in = NONE;
		else if (in == RESTART && memmem(line, len, "a reload that finds", 19))
			in = NONE;
		bold_word(line, len, word, sizeof(word));
		if (in != NONE && word[0] >= 'a' && word[0] <= 'z') { /* not [daemon], --log-level */
			if (in == LIVE) {
				assert_true(*n_live < MAX_DOC);
				strcpy(live[(*n_live)++], word);
			} else {
				assert_true(*n_restart < MAX_DOC);
				strcpy(restart[(*n_restart)++], word);
			}
		}
		line = nl ? nl + 1 : line + len;
	}
	free(text);
}

static bool listed(char names[][64], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* weightd.conf(5) says of each key what the table's reload column says: the keys it lists as
 * applied by a reload are CONFIG_LIVE, those it lists as needing a restart CONFIG_RESTART, and
 * every key of either kind is listed. */
static void test_reload_documented(void **state)
{
	static char live[MAX_DOC][64], restart[MAX_DOC][64];
	size_t n_live, n_restart;

	(void)state;
	reload_docs(live, &n_live, restart, &n_restart);
	assert_true(n_live > 0 && n_restart > 0);
	for (size_t i = 0; i < n_live; i++) {
		const struct config_key *k = config_key_find(CONFIG_DAEMON, live[i]);

		if (!k || k->reload != CONFIG_LIVE)
			fail_msg("weightd.conf(5) says a reload applies %s; the table does not",
				 live[i]);
	}
	for (size_t i = 0; i < n_restart; i++) {
		const struct config_key *k = config_key_find(CONFIG_DAEMON, restart[i]);

		if (!k || k->reload != CONFIG_RESTART)
			fail_msg("weightd.conf(5) says %s needs a restart; the table does not",
				 restart[i]);
	}
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];

		if (k->section != CONFIG_DAEMON)
			continue;
		if (k->reload == CONFIG_LIVE && !listed(live, n_live, k->name))
			fail_msg("%s: a reload applies it, weightd.conf(5) does not say so", k->name);
		if (k->reload == CONFIG_RESTART && !listed(restart, n_restart, k->name))
			fail_msg("%s: only a restart applies it, weightd.conf(5) does not say so",
				 k->name);
	}
}

/* Rows are well formed: unique names, bounds that fit their field, a default where optional. */
static void test_rows(void **state)
{
	(void)state;
	assert_true(config_n_keys > 0);
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];

		assert_non_null(k->name);
		assert_non_null(k->doc);
		assert_true(k->section == CONFIG_DAEMON || k->section == CONFIG_CHECKPOINT);
		assert_ptr_equal(config_key_find(k->section, k->name), k);
		if (k->type == CONFIG_T_SIZE || k->type == CONFIG_T_COUNT ||
		    k->type == CONFIG_T_DURATION) {
			assert_true(k->min <= k->max);
			assert_true(k->width == 8 || k->max <= UINT32_MAX);
		}
		if (k->section == CONFIG_DAEMON)
			assert_non_null(k->def); /* every [daemon] key is optional */
	}
	assert_null(config_key_find(CONFIG_DAEMON, "path"));
	assert_null(config_key_find(CONFIG_CHECKPOINT, "budget"));
}

/* The defaults the table spells agree with the constants other modules use. */
static void test_defaults_match_constants(void **state)
{
	char path[] = "/tmp/wd-test-config-keys-XXXXXX";
	struct config *cfg = NULL;
	weightd_error err;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	wd_error_clear(&err);
	assert_int_equal(config_load(path, &cfg, &err), 0);
	assert_int_equal(cfg->max_frame_bytes, WD_FRAME_MAX_DEFAULT);
	assert_int_equal(cfg->digest, WD_DIGEST_DEFAULT);
	config_free(cfg);
	unlink(path);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_table_documented),
	  cmocka_unit_test(test_documented_in_table), cmocka_unit_test(test_example),
	  cmocka_unit_test(test_reload_documented), cmocka_unit_test(test_rows),
	  cmocka_unit_test(test_defaults_match_constants))
