/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for src/remote.c and src/remote_cred.c against real servers on loopback: nginx (HTTP,
 * HTTPS with a CA made for the test, a Hugging Face-shaped redirect, a bearer-token path),
 * s3rver behind a proxy that checks every SigV4 signature with botocore, and a fault proxy
 * (tests/remote/servers.py starts them all). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "remote.h"

#define FILE_SIZE 3000017u /* odd, so the last piece of any chunking is short */

static char root[256];
static pid_t servers_pid;
static int servers_stdin = -1;
static int port_http, port_https, port_fault, port_s3;
static char ca_file[512], token[128], s3_secret[128];
static unsigned char *expect; /* the served file's bytes */

static void fill_pattern(unsigned char *p, size_t n, uint32_t seed)
{
	uint32_t x = seed;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (unsigned char)(x >> 24);
	}
}

static void write_file(const char *path, const void *data, size_t n, mode_t mode)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static void write_root_files(void)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/a.bin", root);
	write_file(path, expect, FILE_SIZE, 0644);
	snprintf(path, sizeof(path), "%s/swap.bin", root);
	write_file(path, expect, FILE_SIZE, 0644);
	snprintf(path, sizeof(path), "%s/dir", root);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/dir/model-00001-of-00002.safetensors", root);
	write_file(path, expect, 4096, 0644);
	snprintf(path, sizeof(path), "%s/empty.bin", root);
	write_file(path, "", 0, 0644);
}

static int setup(void **state)
{
	const char *src = getenv("WD_SOURCE_DIR");
	char script[512], line[4096];
	int in[2], out[2];
	json_error_t je;
	json_t *j;
	FILE *f;

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	snprintf(root, sizeof(root), "/tmp/wd-remote-test-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	expect = malloc(FILE_SIZE);
	fill_pattern(expect, FILE_SIZE, 7);
	write_root_files();
	snprintf(script, sizeof(script), "%s/tests/remote/servers.py", src ? src : ".");
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -1;
	servers_pid = fork();
	if (servers_pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execl("/usr/bin/python3", "python3", script, "--root", root, "--s3", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	servers_stdin = in[1];
	f = fdopen(out[0], "r");
	if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "ready ", 6) != 0) {
		fprintf(stderr, "test servers did not start: %s\n", f ? line : "(no pipe)");
		return -1;
	}
	fclose(f);
	j = json_loads(line + 6, 0, &je);
	if (!j)
		return -1;
	port_http = (int)json_integer_value(json_object_get(j, "http"));
	port_https = (int)json_integer_value(json_object_get(j, "https"));
	port_fault = (int)json_integer_value(json_object_get(j, "fault"));
	port_s3 = (int)json_integer_value(json_object_get(j, "s3"));
	snprintf(ca_file, sizeof(ca_file), "%s", json_string_value(json_object_get(j, "ca")));
	snprintf(token, sizeof(token), "%s", json_string_value(json_object_get(j, "token")));
	snprintf(s3_secret, sizeof(s3_secret), "%s",
		 json_string_value(json_object_get(j, "s3_secret")));
	json_decref(j);
	return 0;
}

static int teardown(void **state)
{
	char cmd[600];
	int st;

	(void)state;
	if (servers_stdin >= 0)
		close(servers_stdin);
	if (servers_pid > 0)
		waitpid(servers_pid, &st, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		return -1;
	free(expect);
	return 0;
}

/* Put the test's files back as they were (a swap test replaces one). */
static int reset_files(void **state)
{
	(void)state;
	write_root_files();
	return 0;
}

/* GET a control URL of the fault proxy; the body into buf when given. */
static size_t collect(char *p, size_t s, size_t n, void *arg)
{
	char *buf = arg;
	size_t have = strlen(buf), add = s * n;

	if (have + add >= 65536)
		add = 65535 - have;
	memcpy(buf + have, p, add);
	buf[have + add] = '\0';
	return s * n;
}

static void ctl(const char *fmt, ...)
{
	char url[512], q[400], body[65536] = "";
	va_list ap;
	CURL *h = curl_easy_init();

	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/__ctl?%s", port_fault, q);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_cleanup(h);
}

static json_t *stats(int port)
{
	static char body[65536];
	char url[128];
	CURL *h = curl_easy_init();
	json_t *j;

	body[0] = '\0';
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/__stats", port);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_cleanup(h);
	j = json_loads(body, 0, NULL);
	assert_non_null(j);
	return j;
}

static struct wd_remote *open_url(const char *url, const struct wd_remote_opts *o)
{
	struct wd_remote *r = NULL;
	weightd_error err;

	wd_error_clear(&err);
	if (wd_remote_open(url, o, &r, &err) < 0)
		fail_msg("open %s: %s", url, err.message);
	return r;
}

static void read_and_compare(struct wd_remote *r, const char *name, uint64_t off, size_t len)
{
	struct wd_remote_object o;
	weightd_error err;
	unsigned char *buf = malloc(len ? len : 1);

	wd_error_clear(&err);
	if (wd_remote_stat(r, name, &o, &err) < 0)
		fail_msg("stat: %s", err.message);
	assert_int_equal(o.size, FILE_SIZE);
	assert_true(strlen(o.etag) > 2);
	if (wd_remote_read(r, &o, off, buf, len, &err) < 0)
		fail_msg("read: %s", err.message);
	assert_memory_equal(buf, expect + off, len);
	wd_remote_object_clear(&o);
	free(buf);
}

static void http_stat_and_read_match_the_file(void **state)
{
	char url[128];
	struct wd_remote_opts o = { .allow_http = true };
	struct wd_remote *r;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/a.bin", port_http);
	r = open_url(url, &o);
	assert_false(wd_remote_is_dir(r));
	read_and_compare(r, NULL, 12345, 100000);
	read_and_compare(r, NULL, FILE_SIZE - 17, 17);
	wd_remote_free(r);
}

static void plain_http_needs_allow_http(void **state)
{
	char url[128];
	struct wd_remote *r = NULL;
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/a.bin", port_http);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_open(url, NULL, &r, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_null(r);
	assert_non_null(strstr(err.message, "allow_http"));
}

static void https_verifies_with_the_given_ca(void **state)
{
	char url[128];
	struct wd_remote_opts o = { .ca_file = ca_file };
	struct wd_remote *r;
	struct wd_remote_object obj;
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/a.bin", port_https);
	r = open_url(url, &o);
	read_and_compare(r, NULL, 0, 65536);
	wd_remote_free(r);

	/* without the test's CA the certificate is not trusted: refused, never read */
	r = open_url(url, NULL);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "127.0.0.1"));
	wd_remote_free(r);
}

static void hub_resolve_redirect_is_followed(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .ca_file = ca_file };
	struct wd_remote *r;

	(void)state;
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/hf/org/model/resolve/main/a.bin",
		 port_https);
	r = open_url(url, &o);
	read_and_compare(r, NULL, 1000, 50000);
	wd_remote_free(r);
}

static void bearer_token_from_a_private_file(void **state)
{
	char url[160], tf[300];
	struct wd_remote_opts o = { .ca_file = ca_file };
	struct wd_remote *r;
	struct wd_remote_object obj;
	weightd_error err;
	char *tok = NULL;

	(void)state;
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/private/a.bin", port_https);
	r = open_url(url, &o);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "HTTP 401"));
	wd_remote_free(r);

	snprintf(tf, sizeof(tf), "%s/token", root);
	write_file(tf, token, strlen(token), 0644);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_token(tf, &tok, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "chmod 600"));
	assert_null(strstr(err.message, token));

	write_file(tf, token, strlen(token), 0600);
	assert_int_equal(wd_remote_token(tf, &tok, &err), 0);
	assert_string_equal(tok, token);
	o.bearer_token = tok;
	r = open_url(url, &o);
	read_and_compare(r, NULL, 0, 4096);
	wd_remote_free(r);
	free(tok);
	unlink(tf);
}

static void directory_members_and_names_it_refuses(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .ca_file = ca_file };
	struct wd_remote *r;
	struct wd_remote_object obj;
	weightd_error err;
	const char *bad[] = { "../a.bin", "/a.bin", "x/../a.bin", "a.bin/", "", "a?b" };
	unsigned char buf[4096];

	(void)state;
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/dir/", port_https);
	r = open_url(url, &o);
	assert_true(wd_remote_is_dir(r));
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, "model-00001-of-00002.safetensors", &obj, &err), 0);
	assert_int_equal(obj.size, 4096);
	assert_int_equal(wd_remote_read(r, &obj, 0, buf, sizeof(buf), &err), 0);
	assert_memory_equal(buf, expect, sizeof(buf));
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/dir/model-00001-of-00002.safetensors",
		 port_https);
	assert_string_equal(obj.shown, url);
	wd_remote_object_clear(&obj);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(wd_remote_stat(r, bad[i], &obj, &err),
				 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_int_equal(wd_remote_stat(r, "missing.safetensors", &obj, &err),
			 -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "HTTP 404"));
	assert_non_null(strstr(err.message, "missing.safetensors"));
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	wd_remote_free(r);
}

static void empty_object_has_size_zero(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .allow_http = true };
	struct wd_remote *r;
	struct wd_remote_object obj;
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/empty.bin", port_http);
	r = open_url(url, &o);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	assert_int_equal(obj.size, 0);
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

/* Fetch the whole of a.bin through `url` into an fd, in `chunk` pieces over `conc` connections. */
static int fetch_all(struct wd_remote *r, const char *name, uint64_t chunk, unsigned conc,
		     weightd_error *err, bool compare)
{
	struct wd_remote_object obj;
	struct wd_remote_range rg;
	unsigned char *got;
	int fd = memfd_create("remote-test", MFD_CLOEXEC), rc;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, FILE_SIZE + 4096), 0);
	rc = wd_remote_stat(r, name, &obj, err);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	rg = (struct wd_remote_range){ .off = 0, .len = obj.size, .fd = fd, .fd_off = 4096 };
	rc = wd_remote_fetch(r, &obj, &rg, 1,
			     &(struct wd_remote_fetch_opts){ .concurrency = conc, .chunk = chunk },
			     err);
	if (rc == 0 && compare) {
		got = mmap(NULL, FILE_SIZE + 4096, PROT_READ, MAP_SHARED, fd, 0);
		assert_true(got != MAP_FAILED);
		assert_memory_equal(got + 4096, expect, FILE_SIZE);
		munmap(got, FILE_SIZE + 4096);
	}
	wd_remote_object_clear(&obj);
	close(fd);
	return rc;
}

static void parallel_fetch_writes_every_byte_once(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .ca_file = ca_file };
	struct wd_remote *r;
	struct wd_remote_counters c;
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/a.bin", port_https);
	r = open_url(url, &o);
	wd_error_clear(&err);
	if (fetch_all(r, NULL, 65536, 8, &err, true) < 0)
		fail_msg("fetch: %s", err.message);
	wd_remote_counters(r, &c);
	/* one pin, then ceil(size / chunk) ranges, none retried */
	assert_int_equal(c.requests, 1 + (FILE_SIZE + 65535) / 65536);
	assert_int_equal(c.retries, 0);
	assert_int_equal(c.bytes, FILE_SIZE);
	wd_remote_free(r);
}

static void s3_opts(struct wd_remote_opts *o, const char *secret, bool path_style, char *ep,
		    size_t cap, const char *host)
{
	snprintf(ep, cap, "http://%s:%d", host, port_s3);
	*o = (struct wd_remote_opts){ .endpoint = ep,
				      .region = "us-east-1",
				      .path_style = path_style,
				      .access_key = "S3RVER",
				      .secret_key = secret,
				      .allow_http = true };
}

static void s3_signed_ranges_pass_botocore(void **state)
{
	char ep[128];
	struct wd_remote_opts o;
	struct wd_remote *r;
	struct wd_remote_object obj;
	unsigned char buf[1000];
	weightd_error err;
	json_t *st;

	(void)state;
	s3_opts(&o, s3_secret, true, ep, sizeof(ep), "127.0.0.1");
	r = open_url("s3://bkt/a.bin", &o);
	assert_string_equal(wd_remote_shown(r), "s3://bkt/a.bin");
	read_and_compare(r, NULL, 777, 300000);
	wd_error_clear(&err);
	if (fetch_all(r, NULL, 1 << 20, 4, &err, true) < 0)
		fail_msg("fetch: %s", err.message);
	wd_remote_free(r);
	/* a directory prefix, its members named below it */
	r = open_url("s3://bkt/dir/", &o);
	assert_true(wd_remote_is_dir(r));
	assert_int_equal(wd_remote_stat(r, "model-00001-of-00002.safetensors", &obj, &err), 0);
	assert_int_equal(obj.size, 4096);
	assert_string_equal(obj.shown, "s3://bkt/dir/model-00001-of-00002.safetensors");
	assert_int_equal(wd_remote_read(r, &obj, 8, buf, sizeof(buf), &err), 0);
	assert_memory_equal(buf, expect + 8, sizeof(buf));
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
	st = stats(port_s3);
	/* every request reached botocore's check and passed it */
	assert_true(json_integer_value(json_object_get(st, "verified")) >= 7);
	assert_int_equal(json_integer_value(json_object_get(st, "refused")), 0);
	json_decref(st);
}

static void s3_virtual_host_addressing(void **state)
{
	char ep[128];
	struct wd_remote_opts o;
	struct wd_remote *r;

	(void)state;
	/* bkt.s3.localhost: curl resolves *.localhost to loopback, and s3rver (its service endpoint
	 * set to localhost) takes the bucket from the Host header */
	s3_opts(&o, s3_secret, false, ep, sizeof(ep), "s3.localhost");
	r = open_url("s3://bkt/a.bin", &o);
	read_and_compare(r, NULL, 5, 1000);
	wd_remote_free(r);
}

static void s3_wrong_secret_is_refused_by_name(void **state)
{
	char ep[128];
	struct wd_remote_opts o;
	struct wd_remote *r;
	struct wd_remote_object obj;
	weightd_error err;
	json_t *st;
	json_int_t refused;

	(void)state;
	st = stats(port_s3);
	refused = json_integer_value(json_object_get(st, "refused"));
	json_decref(st);
	s3_opts(&o, "not-the-secret", true, ep, sizeof(ep), "127.0.0.1");
	r = open_url("s3://bkt/a.bin", &o);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "HTTP 403"));
	assert_non_null(strstr(err.message, "SignatureDoesNotMatch"));
	assert_null(strstr(err.message, "not-the-secret"));
	wd_remote_free(r);
	st = stats(port_s3);
	assert_int_equal(json_integer_value(json_object_get(st, "refused")), refused + 1);
	json_decref(st);
}

static struct wd_remote *fault_remote(unsigned retries, unsigned low_speed_s)
{
	char url[160];
	struct wd_remote_opts o = { .allow_http = true,
				    .retries = retries,
				    .backoff_ms = 10,
				    .backoff_max_ms = 50,
				    .low_speed_time_s = low_speed_s };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/a.bin", port_fault);
	return open_url(url, &o);
}

static void retries_on_slowdown_and_500(void **state)
{
	struct wd_remote *r = fault_remote(0, 0);
	struct wd_remote_counters c;
	weightd_error err;

	(void)state;
	ctl("reset=1");
	ctl("fault=503&n=2");
	ctl("fault=500&n=2");
	wd_error_clear(&err);
	if (fetch_all(r, NULL, 1 << 20, 2, &err, true) < 0)
		fail_msg("fetch: %s", err.message);
	wd_remote_counters(r, &c);
	assert_int_equal(c.retries, 4);
	wd_remote_free(r);
}

static void retry_resumes_only_the_missing_bytes(void **state)
{
	struct wd_remote *r = fault_remote(0, 0);
	weightd_error err;
	json_t *st, *ranges;
	bool resumed = false;

	(void)state;
	ctl("reset=1");
	ctl("fault=drop&n=2&after=100000");
	wd_error_clear(&err);
	if (fetch_all(r, NULL, 1 << 20, 1, &err, true) < 0)
		fail_msg("fetch: %s", err.message);
	st = stats(port_fault);
	ranges = json_object_get(st, "ranges");
	/* pieces start at multiples of 1 MiB; a resumed one asks from 100,000 bytes in */
	for (size_t i = 0; i < json_array_size(ranges); i++) {
		const char *rg = json_string_value(json_array_get(json_array_get(ranges, i), 1));
		unsigned long long a = 0;
		if (rg && sscanf(rg, "bytes=%llu-", &a) == 1 && a % (1 << 20) == 100000)
			resumed = true;
	}
	assert_true(resumed);
	json_decref(st);
	wd_remote_free(r);
}

static void a_stalled_answer_times_out_and_is_retried(void **state)
{
	struct wd_remote *r = fault_remote(0, 1);
	struct wd_remote_counters c;
	weightd_error err;

	(void)state;
	ctl("reset=1");
	ctl("fault=stall&n=1&seconds=4");
	wd_error_clear(&err);
	if (fetch_all(r, NULL, 1 << 20, 2, &err, true) < 0)
		fail_msg("fetch: %s", err.message);
	wd_remote_counters(r, &c);
	assert_true(c.retries >= 1);
	wd_remote_free(r);
}

static void retries_are_bounded_and_the_error_says_why(void **state)
{
	struct wd_remote *r = fault_remote(2, 0);
	weightd_error err;

	(void)state;
	ctl("reset=1");
	ctl("fault=503&n=1000");
	wd_error_clear(&err);
	assert_int_equal(fetch_all(r, NULL, 1 << 20, 1, &err, false), -WEIGHTD_E_IO);
	assert_non_null(strstr(err.message, "HTTP 503"));
	assert_non_null(strstr(err.message, "SlowDown"));
	assert_non_null(strstr(err.message, "3 attempts"));
	ctl("reset=1");
	wd_remote_free(r);
}

static void an_object_replaced_mid_fetch_is_source_changed(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .allow_http = true };
	struct wd_remote *r;
	weightd_error err;

	(void)state;
	ctl("reset=1");
	ctl("fault=swap&path=/swap.bin&after=3");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/swap.bin", port_fault);
	r = open_url(url, &o);
	wd_error_clear(&err);
	assert_int_equal(fetch_all(r, NULL, 256 << 10, 1, &err, false), -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "swap.bin"));
	ctl("reset=1");
	wd_remote_free(r);
}

static void secrets_in_the_query_are_never_shown(void **state)
{
	char url[200];
	struct wd_remote_opts o = { .ca_file = ca_file };
	struct wd_remote *r;
	struct wd_remote_object obj;
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url),
		 "https://127.0.0.1:%d/missing.bin?X-Amz-Signature=SECRETSIG&sig=SECRET2#frag",
		 port_https);
	r = open_url(url, &o);
	assert_null(strstr(wd_remote_shown(r), "SECRET"));
	assert_null(strchr(wd_remote_shown(r), '?'));
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), -WEIGHTD_E_NOT_FOUND);
	assert_null(strstr(err.message, "SECRET"));
	wd_remote_free(r);

	/* a directory's query (a container SAS) follows each member, unshown */
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/dir/?sv=1&sig=SECRET3", port_https);
	r = open_url(url, &o);
	assert_true(wd_remote_is_dir(r));
	assert_int_equal(wd_remote_stat(r, "model-00001-of-00002.safetensors", &obj, &err), 0);
	assert_null(strstr(obj.shown, "SECRET"));
	assert_non_null(strstr(obj.url, "sig=SECRET3"));
	wd_remote_object_clear(&obj);
	wd_remote_free(r);

	/* userinfo in a URL is not shown either */
	snprintf(url, sizeof(url), "https://user:PASSWORD@127.0.0.1:%d/a.bin", port_https);
	r = open_url(url, &o);
	assert_null(strstr(wd_remote_shown(r), "PASSWORD"));
	wd_remote_free(r);
}

struct canceller {
	volatile int *flag;
};

static void *cancel_soon(void *arg)
{
	struct canceller *c = arg;

	usleep(300000);
	*c->flag = 1;
	return NULL;
}

static void cancel_stops_a_fetch_in_flight(void **state)
{
	struct wd_remote *r = fault_remote(0, 30);
	struct wd_remote_object obj;
	struct wd_remote_range rg;
	volatile int flag = 0;
	struct canceller c = { &flag };
	struct timespec t0, t1;
	weightd_error err;
	pthread_t t;
	int fd = memfd_create("remote-test", MFD_CLOEXEC);

	(void)state;
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	ctl("fault=stall&n=100&seconds=20");
	assert_int_equal(ftruncate(fd, FILE_SIZE), 0);
	rg = (struct wd_remote_range){ .len = obj.size, .fd = fd };
	pthread_create(&t, NULL, cancel_soon, &c);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(wd_remote_fetch(r, &obj, &rg, 1,
					 &(struct wd_remote_fetch_opts){ .concurrency = 2,
									 .chunk = 1 << 20,
									 .cancel = &flag },
					 &err),
			 -WEIGHTD_E_CANCELLED);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(t, NULL);
	/* 0.3 s until the flag, then at most a poll interval: far from the 20 s stall */
	assert_true(t1.tv_sec - t0.tv_sec < 3);
	ctl("reset=1");
	wd_remote_object_clear(&obj);
	close(fd);
	wd_remote_free(r);
}

static void *stop_soon(void *arg)
{
	(void)arg;
	usleep(300000);
	wd_remote_stop(true);
	return NULL;
}

/* wd_remote_stop reaches a single read stalled in its answer, not only fetches given a flag. */
static void stop_cancels_a_stalled_read(void **state)
{
	struct wd_remote *r = fault_remote(0, 30);
	struct wd_remote_object obj;
	unsigned char *buf = malloc(FILE_SIZE);
	struct timespec t0, t1;
	weightd_error err;
	pthread_t t;

	(void)state;
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	ctl("fault=stall&n=100&seconds=20");
	pthread_create(&t, NULL, stop_soon, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(wd_remote_read(r, &obj, 0, buf, FILE_SIZE, &err), -WEIGHTD_E_CANCELLED);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(t, NULL);
	assert_true(t1.tv_sec - t0.tv_sec < 3);
	assert_non_null(strstr(err.message, "stopping"));
	/* later calls fail at once until transfers are allowed again */
	assert_int_equal(wd_remote_read(r, &obj, 0, buf, 10, &err), -WEIGHTD_E_CANCELLED);
	wd_remote_stop(false);
	ctl("reset=1");
	assert_int_equal(wd_remote_read(r, &obj, 0, buf, FILE_SIZE, &err), 0);
	assert_memory_equal(buf, expect, FILE_SIZE);
	wd_remote_object_clear(&obj);
	free(buf);
	wd_remote_free(r);
}

struct fetcher {
	struct wd_remote *r;
	struct wd_remote_object *obj;
	int fd;
	int rc;
};

static void *fetch_thread(void *arg)
{
	struct fetcher *f = arg;
	struct wd_remote_range rg = { .len = f->obj->size, .fd = f->fd };
	weightd_error err;

	f->rc = wd_remote_fetch(
		f->r, f->obj, &rg, 1,
		&(struct wd_remote_fetch_opts){ .concurrency = 8, .chunk = 256 << 10 }, &err);
	return NULL;
}

/*
 * The node's limit holds across calls and threads: two fetches that would run 8 transfers each
 * run 3 together, as the server sees while every answer stalls; both then finish whole.
 */
static void the_node_limit_bounds_every_call_together(void **state)
{
	struct wd_remote *r = fault_remote(0, 30);
	struct wd_remote_object obj;
	struct fetcher f[2];
	pthread_t t[2];
	weightd_error err;
	json_t *st;

	(void)state;
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	wd_remote_set_limit(3);
	ctl("reset=1");
	ctl("fault=stall&n=6&seconds=1");
	for (int i = 0; i < 2; i++) {
		f[i] = (struct fetcher){ r, &obj, memfd_create("remote-test", MFD_CLOEXEC), -1 };
		assert_int_equal(ftruncate(f[i].fd, FILE_SIZE), 0);
		pthread_create(&t[i], NULL, fetch_thread, &f[i]);
	}
	usleep(600000);
	st = stats(port_fault);
	assert_int_equal(json_integer_value(json_object_get(st, "requests")), 3);
	json_decref(st);
	for (int i = 0; i < 2; i++) {
		unsigned char *got;
		pthread_join(t[i], NULL);
		assert_int_equal(f[i].rc, 0);
		got = mmap(NULL, FILE_SIZE, PROT_READ, MAP_SHARED, f[i].fd, 0);
		assert_true(got != MAP_FAILED);
		assert_memory_equal(got, expect, FILE_SIZE);
		munmap(got, FILE_SIZE);
		close(f[i].fd);
	}
	wd_remote_set_limit(0);
	ctl("reset=1");
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

struct landed {
	int fd;
	const struct wd_remote_range *rg;
	unsigned calls[4];
	bool whole[4];
};

static int on_range(void *arg, size_t i, weightd_error *err)
{
	struct landed *l = arg;
	unsigned char *buf = malloc(l->rg[i].len + 1);
	ssize_t n = pread(l->fd, buf, l->rg[i].len, (off_t)l->rg[i].fd_off);

	(void)err;
	l->calls[i]++;
	l->whole[i] =
		n == (ssize_t)l->rg[i].len && memcmp(buf, expect + l->rg[i].off, l->rg[i].len) == 0;
	free(buf);
	return 0;
}

/* range_done hears of each range once, when all its bytes are in place; its error ends it. */
static void each_range_is_reported_once_when_whole(void **state)
{
	char url[160];
	struct wd_remote *r;
	struct wd_remote_object obj;
	struct wd_remote_range rg[4];
	struct landed l = { 0 };
	struct wd_remote_opts o = { .allow_http = true };
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/a.bin", port_http);
	r = open_url(url, &o);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	l.fd = memfd_create("remote-test", MFD_CLOEXEC);
	assert_int_equal(ftruncate(l.fd, 2 * FILE_SIZE), 0);
	rg[0] = (struct wd_remote_range){ .off = 0, .len = 1000000, .fd = l.fd, .fd_off = 7 };
	rg[1] = (struct wd_remote_range){ .off = 5, .len = 0, .fd = l.fd, .fd_off = 0 };
	rg[2] = (struct wd_remote_range){
		.off = 1000000, .len = 2000017, .fd = l.fd, .fd_off = FILE_SIZE
	};
	rg[3] = (struct wd_remote_range){ .off = 17, .len = 3, .fd = l.fd, .fd_off = 1 << 20 };
	l.rg = rg;
	assert_int_equal(wd_remote_fetch(r, &obj, rg, 4,
					 &(struct wd_remote_fetch_opts){ .concurrency = 4,
									 .chunk = 300000,
									 .range_done = on_range,
									 .arg = &l },
					 &err),
			 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(l.calls[i], 1);
		assert_true(l.whole[i]);
	}
	close(l.fd);
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

/* ---- coalesced fetches ---------------------------------------------------------------- */

#define CO_MAX 40

/* What a coalesced fetch told its caller about each range. */
struct co_seen {
	int fd;
	const struct wd_remote_range *rg;
	unsigned done[CO_MAX];
	bool whole[CO_MAX];
	uint64_t data[CO_MAX];	  /* bytes range_data showed, all equal to the file's */
	bool data_wrong[CO_MAX];
};

static int co_data(void *arg, size_t i, const void *data, size_t n, weightd_error *err)
{
	struct co_seen *c = arg;

	(void)err;
	if (c->data[i] + n > c->rg[i].len ||
	    memcmp(data, expect + c->rg[i].off + c->data[i], n) != 0)
		c->data_wrong[i] = true;
	c->data[i] += n;
	return 0;
}

static int co_done(void *arg, size_t i, weightd_error *err)
{
	struct co_seen *c = arg;
	unsigned char *buf = malloc(c->rg[i].len + 1);
	ssize_t n = pread(c->fd, buf, c->rg[i].len, (off_t)c->rg[i].fd_off);

	(void)err;
	c->done[i]++;
	c->whole[i] = n == (ssize_t)c->rg[i].len &&
		      memcmp(buf, expect + c->rg[i].off, c->rg[i].len) == 0;
	free(buf);
	return 0;
}

/* The Range headers the fault proxy saw since its last reset, as [from, to] pairs. */
static size_t proxy_ranges(uint64_t (*out)[2], size_t cap)
{
	json_t *st = stats(port_fault), *rs = json_object_get(st, "ranges"), *e;
	size_t i, n = 0;

	json_array_foreach(rs, i, e) {
		unsigned long long a, b;
		if (n < cap && sscanf(json_string_value(json_array_get(e, 1)), "bytes=%llu-%llu",
				      &a, &b) == 2) {
			out[n][0] = a;
			out[n][1] = b;
			n++;
		}
	}
	json_decref(st);
	return n;
}

/*
 * Ranges of one object coalesced: touching ones and one past a gap within remote_gap share a
 * request, a range longer than the chunk straddles three, the one after it joins its tail, one
 * past a larger gap is asked for alone; a zero-length one takes no request. Each lands in its
 * own place, is reported once and whole, and range_data shows its bytes in order, except for the
 * range that straddles requests, which gets none. The counters count the bridged gap.
 */
static void coalesced_ranges_take_few_requests_and_land_exactly(void **state)
{
	struct wd_remote *r = fault_remote(0, 30);
	struct wd_remote_object obj;
	struct wd_remote_range rg[7] = {
		{ .off = 0, .len = 1000 },	   { .off = 1000, .len = 2000 },
		{ .off = 5000, .len = 100 },	   { .off = 5100, .len = 0 },
		{ .off = 20000, .len = 600000 }, { .off = 620000, .len = 10 },
		{ .off = 2000000, .len = 5 },
	};
	/* what the proxy must be asked for, worked out by hand: [0, 5100) bridging 2000 bytes;
	 * 20000 + 262144 twice; the long range's tail with the next; the last alone */
	const uint64_t want[5][2] = { { 0, 5099 },
				      { 20000, 282143 },
				      { 282144, 544287 },
				      { 544288, 620009 },
				      { 2000000, 2000004 } };
	uint64_t seen[16][2];
	struct co_seen c = { 0 };
	struct wd_remote_counters before, after;
	weightd_error err;
	uint64_t at = 0;
	size_t n;

	(void)state;
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	c.fd = memfd_create("remote-test", MFD_CLOEXEC);
	assert_int_equal(ftruncate(c.fd, 2 * FILE_SIZE), 0);
	for (int i = 0; i < 7; i++) {
		rg[i].fd = c.fd;
		rg[i].fd_off = at + 13; /* in another layout than the file's */
		at += rg[i].len + 4099;
	}
	c.rg = rg;
	ctl("reset=1");
	wd_remote_counters(r, &before);
	assert_int_equal(wd_remote_fetch(r, &obj, rg, 7,
					 &(struct wd_remote_fetch_opts){ .concurrency = 1,
									 .chunk = 262144,
									 .coalesce = true,
									 .gap = 4096,
									 .range_data = co_data,
									 .range_done = co_done,
									 .arg = &c },
					 &err),
			 0);
	wd_remote_counters(r, &after);
	n = proxy_ranges(seen, 16);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(seen[i][0], want[i][0]);
		assert_int_equal(seen[i][1], want[i][1]);
	}
	for (int i = 0; i < 7; i++) {
		assert_int_equal(c.done[i], 1);
		assert_true(c.whole[i]);
		assert_false(c.data_wrong[i]);
		assert_int_equal(c.data[i], i == 4 ? 0 : rg[i].len);
	}
	assert_int_equal(after.requests - before.requests, 5);
	assert_int_equal(after.gap_bytes - before.gap_bytes, 2000);
	assert_int_equal(after.ranges - before.ranges, 6);
	close(c.fd);
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

/* Ranges of several objects in one fetch: each object's planned apart, all in flight at once. */
static void one_fetch_reads_several_objects(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .allow_http = true };
	struct wd_remote *r;
	struct wd_remote_object a, b;
	struct wd_remote_range rg[4];
	struct co_seen c = { 0 };
	weightd_error err;
	json_t *st;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port_fault);
	r = open_url(url, &o);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, "a.bin", &a, &err), 0);
	assert_int_equal(wd_remote_stat(r, "swap.bin", &b, &err), 0);
	c.fd = memfd_create("remote-test", MFD_CLOEXEC);
	assert_int_equal(ftruncate(c.fd, 1 << 20), 0);
	rg[0] = (struct wd_remote_range){ .off = 10, .len = 100, .fd = c.fd, .fd_off = 0, .obj = &a };
	rg[1] = (struct wd_remote_range){ .off = 10, .len = 100, .fd = c.fd, .fd_off = 200, .obj = &b };
	rg[2] = (struct wd_remote_range){ .off = 110, .len = 50, .fd = c.fd, .fd_off = 400, .obj = &a };
	rg[3] = (struct wd_remote_range){ .off = 110, .len = 50, .fd = c.fd, .fd_off = 600, .obj = &b };
	c.rg = rg;
	ctl("reset=1");
	assert_int_equal(wd_remote_fetch(r, NULL, rg, 4,
					 &(struct wd_remote_fetch_opts){ .concurrency = 4,
									 .coalesce = true,
									 .range_done = co_done,
									 .arg = &c },
					 &err),
			 0);
	st = stats(port_fault);
	assert_int_equal(json_integer_value(json_object_get(st, "requests")), 2);
	json_decref(st);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(c.done[i], 1);
		assert_true(c.whole[i]); /* swap.bin holds a.bin's bytes */
	}
	close(c.fd);
	wd_remote_object_clear(&a);
	wd_remote_object_clear(&b);
	wd_remote_free(r);
}

/*
 * A coalesced request cut mid-way is resumed from the first byte it lacks: the retry asks for
 * the rest only, every range it covers lands whole, and range_data still sees each byte once,
 * in order.
 */
static void a_coalesced_request_cut_midway_resumes(void **state)
{
	struct wd_remote *r = fault_remote(3, 30);
	struct wd_remote_object obj;
	struct wd_remote_range rg[30];
	uint64_t seen[8][2];
	struct co_seen c = { 0 };
	weightd_error err;
	size_t n;

	(void)state;
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	c.fd = memfd_create("remote-test", MFD_CLOEXEC);
	assert_int_equal(ftruncate(c.fd, 1 << 20), 0);
	for (int i = 0; i < 30; i++) /* back to front in the destination */
		rg[i] = (struct wd_remote_range){ .off = 7 + (uint64_t)i * 10000,
						  .len = 10000,
						  .fd = c.fd,
						  .fd_off = (uint64_t)(29 - i) * 10007 };
	c.rg = rg;
	ctl("reset=1");
	ctl("fault=drop&n=1&after=100000");
	assert_int_equal(wd_remote_fetch(r, &obj, rg, 30,
					 &(struct wd_remote_fetch_opts){ .concurrency = 2,
									 .chunk = 1 << 20,
									 .coalesce = true,
									 .range_data = co_data,
									 .range_done = co_done,
									 .arg = &c },
					 &err),
			 0);
	n = proxy_ranges(seen, 8);
	assert_int_equal(n, 2);
	assert_int_equal(seen[0][0], 7);
	assert_int_equal(seen[0][1], 300006);
	assert_true(seen[1][0] >= 7 + 65536 && seen[1][0] <= 7 + 100000);
	assert_int_equal(seen[1][1], 300006);
	for (int i = 0; i < 30; i++) {
		assert_int_equal(c.done[i], 1);
		assert_true(c.whole[i]);
		assert_false(c.data_wrong[i]);
		assert_int_equal(c.data[i], 10000);
	}
	ctl("reset=1");
	close(c.fd);
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

/*
 * The object replaced between two coalesced requests of one fetch: the second answer's ETag
 * (or the server's 412 to If-Match) fails the fetch with source-changed, and no range of the
 * second request is reported as landed.
 */
static void an_etag_change_between_coalesced_requests_is_source_changed(void **state)
{
	char url[160];
	struct wd_remote_opts o = { .allow_http = true };
	struct wd_remote *r;
	struct wd_remote_object obj;
	struct wd_remote_range rg[8];
	struct co_seen c = { 0 };
	weightd_error err;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/swap.bin", port_fault);
	r = open_url(url, &o);
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	c.fd = memfd_create("remote-test", MFD_CLOEXEC);
	assert_int_equal(ftruncate(c.fd, 1 << 20), 0);
	for (int i = 0; i < 8; i++) /* two requests of 4 ranges each, at 64 KiB a request */
		rg[i] = (struct wd_remote_range){ .off = (uint64_t)i * 16384,
						  .len = 16384,
						  .fd = c.fd,
						  .fd_off = (uint64_t)i * 16384 };
	c.rg = rg;
	/* the second ranged request replaces the file before it is answered */
	ctl("fault=swap&path=/swap.bin&after=2");
	assert_int_equal(wd_remote_fetch(r, &obj, rg, 8,
					 &(struct wd_remote_fetch_opts){ .concurrency = 1,
									 .chunk = 65536,
									 .coalesce = true,
									 .range_done = co_done,
									 .arg = &c },
					 &err),
			 -WEIGHTD_E_SOURCE_CHANGED);
	assert_non_null(strstr(err.message, "swap.bin"));
	for (int i = 0; i < 8; i++)
		assert_int_equal(c.done[i], i < 4 ? 1 : 0);
	ctl("reset=1");
	close(c.fd);
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

static void count_stall(void *arg)
{
	(*(int *)arg)++;
}

/* A fetch whose server sends nothing for a while says so to its caller, between polls, and
 * then goes on; one whose bytes flow never does. */
static void a_stalled_fetch_lets_its_caller_work(void **state)
{
	struct wd_remote *r = fault_remote(0, 30);
	struct wd_remote_object obj;
	struct wd_remote_range rg;
	int stalls = 0, fd = memfd_create("remote-test", MFD_CLOEXEC);
	unsigned char *got;
	weightd_error err;

	(void)state;
	ctl("reset=1");
	wd_error_clear(&err);
	assert_int_equal(wd_remote_stat(r, NULL, &obj, &err), 0);
	assert_int_equal(ftruncate(fd, FILE_SIZE), 0);
	rg = (struct wd_remote_range){ .len = obj.size, .fd = fd };
	assert_int_equal(wd_remote_fetch(r, &obj, &rg, 1,
					 &(struct wd_remote_fetch_opts){ .concurrency = 2,
									 .chunk = 1 << 20,
									 .stalled = count_stall,
									 .arg = &stalls },
					 &err),
			 0);
	assert_int_equal(stalls, 0);
	ctl("fault=stall&n=4&seconds=3");
	assert_int_equal(wd_remote_fetch(r, &obj, &rg, 1,
					 &(struct wd_remote_fetch_opts){ .concurrency = 4,
									 .chunk = 1 << 20,
									 .stalled = count_stall,
									 .arg = &stalls },
					 &err),
			 0);
	assert_true(stalls >= 1);
	got = mmap(NULL, FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(got != MAP_FAILED);
	assert_memory_equal(got, expect, FILE_SIZE);
	munmap(got, FILE_SIZE);
	ctl("reset=1");
	close(fd);
	wd_remote_object_clear(&obj);
	wd_remote_free(r);
}

static void credentials_file_rules(void **state)
{
	char cf[300];
	const char *text =
		"[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = S1\n"
		"[profile ci]\naws_access_key_id = AKIDCI\naws_secret_access_key = S2\n"
		"aws_session_token = TOK\n";
	struct wd_remote_credentials c = { 0 };
	weightd_error err;

	(void)state;
	snprintf(cf, sizeof(cf), "%s/credentials", root);
	write_file(cf, text, strlen(text), 0600);
	wd_error_clear(&err);
	assert_int_equal(wd_remote_credentials(cf, NULL, &c, &err), 0);
	assert_string_equal(c.access_key, "AKIDDEFAULT");
	assert_string_equal(c.secret_key, "S1");
	assert_null(c.session_token);
	wd_remote_credentials_clear(&c);
	assert_int_equal(wd_remote_credentials(cf, "ci", &c, &err), 0);
	assert_string_equal(c.access_key, "AKIDCI");
	assert_string_equal(c.session_token, "TOK");
	wd_remote_credentials_clear(&c);
	assert_null(c.access_key);
	assert_int_equal(wd_remote_credentials(cf, "nope", &c, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "[nope]"));

	assert_int_equal(chmod(cf, 0640), 0);
	assert_int_equal(wd_remote_credentials(cf, NULL, &c, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "0640"));
	assert_non_null(strstr(err.message, "chmod 600"));
	assert_null(strstr(err.message, "S1"));
	unlink(cf);

	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SENV", 1);
	unsetenv("AWS_SESSION_TOKEN");
	assert_int_equal(wd_remote_credentials(NULL, NULL, &c, &err), 0);
	assert_string_equal(c.access_key, "AKIDENV");
	wd_remote_credentials_clear(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	assert_int_equal(wd_remote_credentials(NULL, NULL, &c, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "AWS_ACCESS_KEY_ID"));
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

static void urls_it_refuses(void **state)
{
	struct wd_remote *r = NULL;
	weightd_error err;
	const char *bad[] = { "s3://",	   "s3:///key", "s3://bad_bucket!/k",
			      "ftp://x/y", "https://",	"/local/path" };

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wd_error_clear(&err);
		assert_int_equal(wd_remote_open(bad[i], NULL, &r, &err),
				 -WEIGHTD_E_INVALID_ARGUMENT);
		assert_null(r);
	}
	assert_true(wd_remote_is_url("s3://b/k"));
	assert_false(wd_remote_is_url("/srv/models/x.safetensors"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(urls_it_refuses),
		cmocka_unit_test(credentials_file_rules),
		cmocka_unit_test(http_stat_and_read_match_the_file),
		cmocka_unit_test(plain_http_needs_allow_http),
		cmocka_unit_test(https_verifies_with_the_given_ca),
		cmocka_unit_test(hub_resolve_redirect_is_followed),
		cmocka_unit_test(bearer_token_from_a_private_file),
		cmocka_unit_test(directory_members_and_names_it_refuses),
		cmocka_unit_test(empty_object_has_size_zero),
		cmocka_unit_test(parallel_fetch_writes_every_byte_once),
		cmocka_unit_test(s3_signed_ranges_pass_botocore),
		cmocka_unit_test(s3_virtual_host_addressing),
		cmocka_unit_test(s3_wrong_secret_is_refused_by_name),
		cmocka_unit_test(retries_on_slowdown_and_500),
		cmocka_unit_test(retry_resumes_only_the_missing_bytes),
		cmocka_unit_test(a_stalled_answer_times_out_and_is_retried),
		cmocka_unit_test(retries_are_bounded_and_the_error_says_why),
		cmocka_unit_test_setup(an_object_replaced_mid_fetch_is_source_changed, reset_files),
		cmocka_unit_test(secrets_in_the_query_are_never_shown),
		cmocka_unit_test(cancel_stops_a_fetch_in_flight),
		cmocka_unit_test(stop_cancels_a_stalled_read),
		cmocka_unit_test(the_node_limit_bounds_every_call_together),
		cmocka_unit_test(each_range_is_reported_once_when_whole),
		cmocka_unit_test(a_stalled_fetch_lets_its_caller_work),
		cmocka_unit_test(coalesced_ranges_take_few_requests_and_land_exactly),
		cmocka_unit_test_setup(one_fetch_reads_several_objects, reset_files),
		cmocka_unit_test(a_coalesced_request_cut_midway_resumes),
		cmocka_unit_test_setup(an_etag_change_between_coalesced_requests_is_source_changed,
				       reset_files),
	};

	curl_global_init(CURL_GLOBAL_DEFAULT);
	return cmocka_run_group_tests(tests, setup, teardown);
}
