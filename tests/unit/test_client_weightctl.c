/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_weightctl.c - the weightctl program against a fake weightd: exit codes, the
 * digest it checks itself, tables and --json. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_weightd.h"

/* ---- the fake ------------------------------------------------------------------------- */

static void payload(uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(i * 37 + 11);
}

static void h_ctl(struct fake *f, const Weightd__Request *req)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;

	resp.id = req->id;
	switch (req->body_case) {
	case WEIGHTD__REQUEST__BODY_LIST: {
		Weightd__ListReply lr = WEIGHTD__LIST_REPLY__INIT;
		Weightd__SourceInfo a = WEIGHTD__SOURCE_INFO__INIT, b = WEIGHTD__SOURCE_INFO__INIT;
		Weightd__SourceInfo *s[2] = { &a, &b };

		a.name = (char *)"m";
		a.kind = (char *)"safetensors";
		a.path = (char *)"/x/m.safetensors";
		a.state = (char *)"ready";
		a.tensors = 3;
		a.bytes = 1536;
		a.generation = 1;
		a.files = 1;
		b.name = (char *)"bad";
		b.state = (char *)"failed";
		b.error = (char *)"bad.safetensors: truncated";
		lr.n_sources = 2;
		lr.sources = s;
		resp.body_case = WEIGHTD__RESPONSE__BODY_LIST;
		resp.list = &lr;
		fake_reply(f, &resp);
		return;
	}
	case WEIGHTD__REQUEST__BODY_DESCRIBE:
		fake_reply_error(f, req->id, 20, NULL, 0, "there is no checkpoint \"zz\"");
		return;
	case WEIGHTD__REQUEST__BODY_MATERIALIZE: {
		struct fake_source src = { 0 };
		struct fake_packed pk;
		uint8_t data[16];
		uint64_t shape[1] = { 16 }, size = 16;
		int fd;

		fake_unit_sources(req->materialize, &src, 1);
		payload(data, sizeof(data));
		fake_packed_init(&pk);
		fake_packed_add(&pk, 4, "U8", shape, 1, data, 16, 0, 0);
		if (src.tensor && !strcmp(src.tensor, "liar"))
			pk.digests[5] ^= 1;   /* the daemon claims other bytes than it serves */
		fd = fake_memfd(data, sizeof(data));
		fake_reply_packed(f, req, &pk, &size, &fd, 1, 0);
		return;
	}
	case WEIGHTD__REQUEST__BODY_STATUS: {
		Weightd__StatusReply sr = WEIGHTD__STATUS_REPLY__INIT;

		sr.instance = (char *)"fakeinst";
		sr.bytes_read = 4096;
		sr.references = 3;
		sr.materializations = 2;
		resp.body_case = WEIGHTD__RESPONSE__BODY_STATUS;
		resp.status = &sr;
		fake_reply(f, &resp);
		return;
	}
	default: {
		Weightd__Empty e = WEIGHTD__EMPTY__INIT;

		resp.body_case = WEIGHTD__RESPONSE__BODY_RELEASE;
		resp.release = &e;
		fake_reply(f, &resp);
		return;
	}
	}
}

/* ---- running weightctl ------------------------------------------------------------------ */

struct run {
	int status;
	char out[16384];
	char err[4096];
};

static void slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

/* Run weightctl with args (NULL-terminated) and capture stdout, stderr and the exit status. */
static void ctl(struct fake *f, struct run *r, ...)
{
	char bin[512], outp[256], errp[256];
	const char *args[32];
	const char *build = getenv("WD_BUILD_DIR");
	va_list ap;
	int n = 0, st;
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/client/weightctl", build ? build : ".");
	if (access(bin, X_OK) != 0)
		fail_msg("weightctl not built at %s", bin);
	snprintf(outp, sizeof(outp), "%s/out", f->dir);
	snprintf(errp, sizeof(errp), "%s/err", f->dir);
	args[n++] = bin;
	va_start(ap, r);
	for (const char *a; (a = va_arg(ap, const char *));)
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(o, 1);
		dup2(e, 2);
		setenv("WEIGHTD_SOCKET", f->path, 1);
		execv(bin, (char *const *)args);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	r->status = WEXITSTATUS(st);
	slurp(outp, r->out, sizeof(r->out));
	slurp(errp, r->err, sizeof(r->err));
	unlink(outp);
	unlink(errp);
}

static void sha256_hex(const void *data, size_t n, char *hex)
{
	unsigned char md[32];
	unsigned int len = 0;

	assert_int_equal(EVP_Digest(data, n, md, &len, EVP_sha256(), NULL), 1);
	for (int i = 0; i < 32; i++)
		sprintf(hex + 2 * i, "%02x", md[i]);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_usage_errors_exit_2_without_connecting(void **state)
{
	struct fake *f = fake_start(h_ctl, NULL);
	static const char *const bad[][5] = {
		{ NULL },
		{ "frobnicate", NULL },
		{ "describe", NULL },
		{ "list", "extra", NULL },
		{ "get", "m", NULL },
		{ "get", "m", "w", "--range", "1:2" },
		{ "get", "m", "w", "--range", "0:5:5" },
		{ "get", "--recipe", "r.json", "m", NULL },
		{ "--bogus", "list", NULL },
	};
	struct run r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ctl(f, &r, bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], NULL);
		if (r.status != 2 || strncmp(r.err, "weightctl: ", 11) || !strstr(r.err, "usage:"))
			fail_msg("case %zu: status %d, stderr \"%s\"", i, r.status, r.err);
	}
	/* purge moved to the daemon: the usage error names what to run instead */
	ctl(f, &r, "purge", "--config", "/etc/weightd/weightd.conf", NULL, NULL, NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "weightd --purge"));
	/* none of them reached the daemon */
	assert_int_equal(fake_count(f, WEIGHTD__REQUEST__BODY_HELLO), 0);
	fake_stop(f);
}

static void test_daemon_errors_exit_1_with_a_sentence(void **state)
{
	struct fake *f = fake_start(h_ctl, NULL);
	struct run r;

	ctl(f, &r, "describe", "zz", NULL);
	assert_int_equal(r.status, 1);
	assert_string_equal(r.err, "weightctl: there is no checkpoint \"zz\"\n");
	assert_string_equal(r.out, "");
	ctl(f, &r, "--socket", "/tmp/wd-no-such-dir/s.sock", "list", NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "weightctl: cannot connect to weightd at "
				       "/tmp/wd-no-such-dir/s.sock"));
	fake_stop(f);
}

static void test_get_verifies_the_digest(void **state)
{
	struct fake *f = fake_start(h_ctl, NULL);
	char outfile[256], hex[65];
	uint8_t data[16], got[32];
	struct run r;
	int fd;

	payload(data, sizeof(data));
	sha256_hex(data, sizeof(data), hex);
	snprintf(outfile, sizeof(outfile), "%s/w.bin", f->dir);
	ctl(f, &r, "get", "m", "w", "--out", outfile, NULL);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "U8"));
	assert_non_null(strstr(r.out, "[16]"));
	assert_non_null(strstr(r.out, hex));
	assert_non_null(strstr(r.out, "(verified)"));
	fd = open(outfile, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, got, sizeof(got)), 16);
	assert_memory_equal(got, data, 16);
	close(fd);
	unlink(outfile);

	/* the range goes to the daemon as a range selection */
	ctl(f, &r, "get", "m", "w", "--range", "1:2:6", NULL);
	assert_int_equal(r.status, 0);
	{
		size_t k = fake_count(f, WEIGHTD__REQUEST__BODY_MATERIALIZE) - 1;
		const Weightd__Selection *s = fake_nth(f, WEIGHTD__REQUEST__BODY_MATERIALIZE, k)
						      ->materialize->entries[0]->recipe->nodes[0]
						      ->selection;

		assert_non_null(s);
		assert_int_equal(s->kind, WEIGHTD__SELECTION__KIND__SEL_RANGE);
		assert_int_equal(s->axis, 1);
		assert_int_equal(s->start, 2);
		assert_int_equal(s->end, 6);
	}

	/* a daemon whose digest does not match the bytes it maps is caught */
	ctl(f, &r, "get", "m", "liar", NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "weightctl: digest mismatch for m:liar"));
	assert_non_null(strstr(r.err, hex));   /* what the bytes really hash to */
	fake_stop(f);
}

static void test_json_output(void **state)
{
	struct fake *f = fake_start(h_ctl, NULL);
	json_error_t je;
	json_t *j, *s;
	struct run r;
	char hex[65];
	uint8_t data[16];

	ctl(f, &r, "--json", "list", NULL);
	assert_int_equal(r.status, 0);
	j = json_loads(r.out, 0, &je);
	assert_non_null(j);
	s = json_object_get(j, "sources");
	assert_int_equal(json_array_size(s), 2);
	/* sorted by name, whatever order the daemon sent them in (m, then bad) */
	assert_string_equal(json_string_value(json_object_get(json_array_get(s, 1), "name")), "m");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(s, 1), "bytes")), 1536);
	assert_string_equal(json_string_value(json_object_get(json_array_get(s, 0), "state")),
			    "failed");
	assert_string_equal(json_string_value(json_object_get(json_array_get(s, 0), "error")),
			    "bad.safetensors: truncated");
	json_decref(j);

	/* this fake daemon predates the digest algorithm field: its digests are SHA-256 */
	ctl(f, &r, "--json", "get", "m", "w", NULL);
	assert_int_equal(r.status, 0);
	j = json_loads(r.out, 0, &je);
	assert_non_null(j);
	s = json_array_get(json_object_get(j, "weights"), 0);
	payload(data, sizeof(data));
	sha256_hex(data, sizeof(data), hex);
	assert_string_equal(json_string_value(json_object_get(s, "digest")), hex);
	assert_string_equal(json_string_value(json_object_get(s, "digest_algorithm")), "sha256");
	assert_null(json_object_get(s, "sha256"));   /* only asked for with --sha256 */
	json_decref(j);

	ctl(f, &r, "--json", "get", "m", "w", "--sha256", NULL);
	assert_int_equal(r.status, 0);
	j = json_loads(r.out, 0, &je);
	assert_non_null(j);
	s = json_array_get(json_object_get(j, "weights"), 0);
	assert_string_equal(json_string_value(json_object_get(s, "sha256")), hex);
	assert_true(json_is_true(json_object_get(s, "verified")));
	assert_int_equal(json_integer_value(json_object_get(s, "bytes")), 16);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(s, "shape"), 0)), 16);
	json_decref(j);

	ctl(f, &r, "--json", "status", NULL);
	assert_int_equal(r.status, 0);
	j = json_loads(r.out, 0, &je);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "bytes_read")), 4096);
	assert_int_equal(json_integer_value(json_object_get(j, "references")), 3);
	assert_string_equal(json_string_value(json_object_get(j, "instance")), "fakeinst");
	json_decref(j);
	fake_stop(f);
}

static void test_tables_are_aligned(void **state)
{
	struct fake *f = fake_start(h_ctl, NULL);
	char *line2;
	struct run r;

	ctl(f, &r, "list", NULL);
	assert_int_equal(r.status, 0);
	/* every column starts at the same offset in the header and in each row; rows by name */
	line2 = strchr(r.out, '\n') + 1;
	assert_int_equal(strncmp(line2, "bad ", 4), 0);
	line2 = strchr(line2, '\n') + 1;
	assert_int_equal(strncmp(line2, "m ", 2), 0);
	assert_true(strstr(r.out, "STATE") - r.out == strstr(line2, "ready") - line2);
	assert_true(strstr(r.out, "PATH") - r.out == strstr(line2, "/x/m.safetensors") - line2);
	fake_stop(f);
}

static void test_recipe_file_errors(void **state)
{
	struct fake *f = fake_start(h_ctl, NULL);
	char path[256];
	struct run r;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/r.json", f->dir);
	fp = fopen(path, "w");
	fputs("{\"op\":\"cast\",\"input\":{\"op\":\"source\",\"checkpoint\":\"m\",\"tensor\":\"w\"}}",
	      fp);
	fclose(fp);
	ctl(f, &r, "preflight", path, NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "r.json: recipe JSON at $: missing key \"dtype\""));
	ctl(f, &r, "get", "--recipe", path, NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "missing key \"dtype\""));
	unlink(path);
	ctl(f, &r, "preflight", path, NULL);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "cannot open"));
	assert_int_equal(fake_count(f, WEIGHTD__REQUEST__BODY_PREFLIGHT), 0);
	fake_stop(f);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_usage_errors_exit_2_without_connecting),
	  cmocka_unit_test(test_daemon_errors_exit_1_with_a_sentence),
	  cmocka_unit_test(test_get_verifies_the_digest), cmocka_unit_test(test_json_output),
	  cmocka_unit_test(test_tables_are_aligned), cmocka_unit_test(test_recipe_file_errors))
