/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Remote checkpoints served by a real weightd from real servers on loopback
 * (tests/remote/servers.py): nginx over HTTP and HTTPS (a CA made by the test), the Hugging Face
 * resolve redirect, a bearer-protected path, s3rver path-style behind botocore's SigV4 check.
 * Bytes served equal the local file's; admission happens off the main loop (a hung server keeps
 * a checkpoint "loading" while the others are served); a recipe reads only the bytes it needs;
 * and no secret shows in the log, list, status, describe, metrics, errors or state records.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "files.h"
#include "harness.h"
#include "servers.h"
#include "weightd/client.h"

#define SIG_SECRET   "SIGdeadbeef0123"	/* a presigned URL's signature */
#define WRONG_SECRET "wr0ngSecretValue" /* an S3 secret the store refuses */

static struct wd_servers srv;
static char root[600], local_m[700], local_big[700];
static char token_file[700], cred_file[700], bad_cred_file[700], web_token_file[700];
static int metrics_port;

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* Every checkpoint of daemon h admitted (none "loading" but `except`); fails after 60 s. */
static void wait_admitted_of(struct harness *h, const char *except)
{
	int64_t until = it_now_ms() + 60000;

	for (;;) {
		weightd_client *c = it_connect(h);
		weightd_source_list *l;
		weightd_error err;
		bool loading = false;

		assert_int_equal(weightd_list(c, &l, &err), 0);
		for (size_t i = 0; i < l->count; i++)
			if (strcmp(l->sources[i].state, "loading") == 0 &&
			    (!except || strcmp(l->sources[i].name, except) != 0))
				loading = true;
		weightd_source_list_free(l);
		weightd_close(c);
		if (!loading)
			return;
		if (it_now_ms() > until)
			fail_msg("checkpoints still loading after 60 s");
		usleep(50000);
	}
}

static void wait_admitted(const char *except)
{
	wait_admitted_of(&H, except);
}

static void wait_admitted_in(struct harness *h)
{
	wait_admitted_of(h, NULL);
}

/* What the loopback STS, container endpoint and IMDS handed out (tests/remote/aws_endpoints.py):
 * [source, key id, issued, expires, secret, token] each, a JSON array the caller frees. */
static json_t *issued(void)
{
	char *s = wd_servers_get(srv.aws, "/__stats");
	json_error_t je;
	json_t *j, *a;

	assert_non_null(s);
	j = json_loads(s, 0, &je);
	free(s);
	assert_non_null(j);
	a = json_incref(json_object_get(j, "issued"));
	json_decref(j);
	assert_true(json_array_size(a) > 0);
	return a;
}

/* Did the loopback STS hand out this access key id? */
static bool issued_key(const char *key)
{
	json_t *a = issued(), *e;
	size_t i;
	bool found = false;

	json_array_foreach(a, i, e)
		found |= strcmp(json_string_value(json_array_get(e, 1)), key) == 0;
	json_decref(a);
	return found;
}

static int setup(void **state)
{
	char sections[8192], extra[256], text[512], p[700];

	(void)state;
	if (harness_init(&H))
		return -1;
	snprintf(root, sizeof(root), "%s/srv", H.dir);
	mkdir(root, 0755);
	snprintf(local_m, sizeof(local_m), "%s/m.safetensors", root);
	it_fixture("safetensors %s --tensor a:F32:64x32 --tensor b:BF16:300 --tensor c:F16:7x9",
		   local_m);
	snprintf(p, sizeof(p), "%s/dir", root);
	it_fixture("sharded %s 3", p);
	snprintf(local_big, sizeof(local_big), "%s/big.safetensors", root);
	it_fixture("safetensors %s --tensor w:F32:1024x1024 --tensor v:F32:16", local_big);
	wd_servers_try(root, true, &srv);
	if (!srv.up)
		return 0;
	snprintf(token_file, sizeof(token_file), "%s/hf.token", H.dir);
	snprintf(text, sizeof(text), "%s\n", srv.token);
	tf_write(token_file, text, 0600);
	snprintf(cred_file, sizeof(cred_file), "%s/s3.credentials", H.dir);
	snprintf(text, sizeof(text),
		 "[store]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.s3_key,
		 srv.s3_secret);
	tf_write(cred_file, text, 0600);
	/* s3-web's keys come by web identity from the loopback STS (weightd's environment) */
	snprintf(web_token_file, sizeof(web_token_file), "%s/web.token", H.dir);
	tf_write(web_token_file, srv.web_token, 0644);
	snprintf(p, sizeof(p), "http://127.0.0.1:%d/", srv.aws);
	setenv("AWS_ENDPOINT_URL_STS", p, 1);
	setenv("AWS_ROLE_ARN", srv.role_arn, 1);
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", web_token_file, 1);
	snprintf(bad_cred_file, sizeof(bad_cred_file), "%s/bad.credentials", H.dir);
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = " WRONG_SECRET "\n",
		 srv.s3_key);
	tf_write(bad_cred_file, text, 0600);
	metrics_port = free_port();
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:%d\nremote_retries = 2\n",
		 metrics_port);
	snprintf(
		sections, sizeof(sections),
		"[checkpoint:local]\npath = %s\n[checkpoint:local-big]\npath = %s\n"
		"[checkpoint:http]\npath = http://127.0.0.1:%d/m.safetensors?X-Amz-Signature=" SIG_SECRET
		"\nallow_http = yes\n"
		"[checkpoint:tls-dir]\npath = https://127.0.0.1:%d/dir/\nca_file = %s\n"
		"[checkpoint:hf]\npath = https://127.0.0.1:%d/hf/org/repo/resolve/main/m.safetensors\n"
		"ca_file = %s\n"
		"[checkpoint:private]\npath = https://127.0.0.1:%d/private/m.safetensors\nca_file = %s\n"
		"token_file = %s\n"
		"[checkpoint:s3-dir]\npath = s3://%s/dir/\nendpoint = http://127.0.0.1:%d\n"
		"path_style = yes\nallow_http = yes\ncredentials_file = %s\nprofile = store\n"
		"[checkpoint:s3-one]\npath = s3://%s/m.safetensors\nendpoint = http://127.0.0.1:%d\n"
		"path_style = yes\nallow_http = yes\ncredentials_file = %s\nprofile = store\n"
		"[checkpoint:s3-wrong]\npath = s3://%s/m.safetensors\nendpoint = http://127.0.0.1:%d\n"
		"path_style = yes\nallow_http = yes\ncredentials_file = %s\n"
		"[checkpoint:proxied]\npath = http://127.0.0.1:%d/big.safetensors\nallow_http = yes\n"
		"[checkpoint:s3-web]\npath = s3://%s/m.safetensors\nendpoint = http://127.0.0.1:%d\n"
		"path_style = yes\nallow_http = yes\ncredentials = web-identity\n",
		local_m, local_big, srv.http, srv.https, srv.ca, srv.https, srv.ca, srv.https,
		srv.ca, token_file, srv.bucket, srv.s3, cred_file, srv.bucket, srv.s3, cred_file,
		srv.bucket, srv.s3, bad_cred_file, srv.fault, srv.bucket, srv.s3);
	it_start(&H, extra, sections);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_cleanup(&H);
	wd_servers_stop(&srv);
	return 0;
}

/* Tensor `t` of checkpoint `ck` has the bytes of the same tensor of checkpoint "local" (or of
 * `ref` when given). */
static void assert_same_bytes(weightd_client *c, const char *ck, const char *ref, const char *t)
{
	weightd_weight *a = it_get_ok(c, ck, t), *b = it_get_ok(c, ref ? ref : "local", t);

	assert_int_equal(weightd_weight_nbytes(a), weightd_weight_nbytes(b));
	assert_memory_equal(it_map(a), it_map(b), weightd_weight_nbytes(a));
	weightd_release(a);
	weightd_release(b);
}

/* Every kind of location serves the local file's bytes; a wrong S3 secret fails admission with
 * a typed error naming the URL and S3's code. */
static void test_kinds(void **state)
{
	weightd_client *c;
	weightd_error err;
	weightd_source_list *l;
	weightd_weight *w;

	(void)state;
	NEED_SERVERS(&srv);
	wait_admitted(NULL);
	c = it_connect(&H);
	assert_same_bytes(c, "http", NULL, "a");
	assert_same_bytes(c, "hf", NULL, "b");
	assert_same_bytes(c, "private", NULL, "c");
	assert_same_bytes(c, "s3-one", NULL, "a");
	{
		/* every tensor of the sharded directory over S3 and over HTTPS alike */
		weightd_description *d;

		assert_int_equal(weightd_describe(c, "s3-dir", &d, &err), 0);
		for (size_t i = 0; i < d->n_tensors; i++)
			assert_same_bytes(c, "s3-dir", "tls-dir", d->tensors[i].name);
		weightd_description_free(d);
	}
	assert_int_equal(weightd_list(c, &l, &err), 0);
	for (size_t i = 0; i < l->count; i++) {
		const weightd_source_info *s = &l->sources[i];

		if (strcmp(s->name, "s3-wrong") == 0) {
			assert_string_equal(s->state, "failed");
			assert_non_null(strstr(s->error, "403"));
			assert_non_null(strstr(s->error, "SignatureDoesNotMatch"));
			assert_non_null(strstr(s->error, "m.safetensors"));
		} else {
			assert_string_equal(s->state, "ready");
		}
		assert_null(strstr(s->path, SIG_SECRET));
	}
	weightd_source_list_free(l);
	assert_int_equal(it_get(c, "s3-wrong", "a", &w, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "SignatureDoesNotMatch"));
	weightd_close(c);
}

/* describe shows the URL without its query, the location and each object's ETag. */
static void test_describe(void **state)
{
	weightd_client *c;
	weightd_description *d;
	weightd_error err;

	(void)state;
	NEED_SERVERS(&srv);
	wait_admitted(NULL);
	c = it_connect(&H);
	assert_int_equal(weightd_describe(c, "s3-dir", &d, &err), 0);
	assert_string_equal(d->location, "s3");
	assert_int_equal(d->n_objects, 3);
	for (size_t i = 0; i < d->n_objects; i++) {
		assert_true(strncmp(d->objects[i].url, "s3://", 5) == 0);
		assert_true(d->objects[i].etag[0] != '\0');
		assert_true(d->objects[i].size > 8);
	}
	weightd_description_free(d);
	assert_int_equal(weightd_describe(c, "http", &d, &err), 0);
	assert_string_equal(d->location, "http");
	assert_int_equal(d->n_objects, 1);
	assert_null(strstr(d->objects[0].url, SIG_SECRET));
	assert_null(strstr(d->source.path, "?"));
	assert_true(d->objects[0].etag[0] != '\0');
	weightd_description_free(d);
	/* where s3-web's keys came from, their key id (the one STS handed out) and expiry */
	assert_int_equal(weightd_describe(c, "s3-web", &d, &err), 0);
	assert_non_null(strstr(d->credentials, "web identity"));
	assert_non_null(strstr(d->credentials, srv.role_arn));
	assert_true(issued_key(d->credentials_key_id));
	assert_true(d->credentials_expires > (int64_t)time(NULL));
	weightd_description_free(d);
	assert_int_equal(weightd_describe(c, "s3-dir", &d, &err), 0);
	assert_string_equal(d->credentials_key_id, srv.s3_key);
	assert_int_equal(d->credentials_expires, 0);
	weightd_description_free(d);
	assert_int_equal(weightd_describe(c, "local", &d, &err), 0);
	assert_string_equal(d->location, "file");
	assert_int_equal(d->n_objects, 0);
	weightd_description_free(d);
	weightd_close(c);
}

/* One shard (a quarter of the rows) of w, cast to F16, from checkpoint ck. */
static weightd_weight *quarter_f16(weightd_client *c, const char *ck)
{
	weightd_selection *sel;
	weightd_weight *w;
	weightd_error err;

	assert_int_equal(weightd_selection_shard(0, 1, 4, &sel, &err), 0);
	w = it_cast_ok(c, ck, "w", sel, "F16");
	weightd_selection_free(sel);
	return w;
}

/* A recipe over a remote source (a quarter of the rows, cast to F16) reads only the rows it
 * needs, and gives the bytes the same recipe gives over the local file. */
static void test_recipe_reads_what_it_needs(void **state)
{
	weightd_client *c;
	weightd_weight *wr, *wl;
	uint64_t read;

	(void)state;
	NEED_SERVERS(&srv);
	wait_admitted(NULL);
	free(wd_servers_get(srv.fault, "/__ctl?reset=1"));
	c = it_connect(&H);
	wr = quarter_f16(c, "proxied");
	wl = quarter_f16(c, "local-big");
	assert_int_equal(weightd_weight_nbytes(wr), 256 * 1024 * 2);
	assert_int_equal(weightd_weight_nbytes(wl), weightd_weight_nbytes(wr));
	assert_memory_equal(it_map(wr), it_map(wl), weightd_weight_nbytes(wr));
	/* rows 256..511 of a 4 MiB F32 tensor: 1 MiB, nothing of the other rows */
	read = wd_servers_proxied(srv.fault, "big.safetensors", NULL);
	if (read != 1024 * 1024)
		fail_msg("the recipe read %" PRIu64 " bytes of the remote object, not 1 MiB", read);
	weightd_release(wr);
	weightd_release(wl);
	weightd_close(c);
}

/* Does file `path` contain `needle` (binary-safe)? */
static bool file_has(const char *path, const char *needle)
{
	struct stat st;
	FILE *f;
	char *buf;
	long n;
	bool has;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || !(f = fopen(path, "rb")))
		return false;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	n = (long)fread(buf, 1, (size_t)n, f);
	fclose(f);
	buf[n] = '\0';
	has = memmem(buf, (size_t)n, needle, strlen(needle)) != NULL;
	free(buf);
	return has;
}

static void assert_no_secret(const char *what, const char *text)
{
	const char *secrets[] = { SIG_SECRET, WRONG_SECRET, srv.token, srv.s3_secret,
				  srv.web_token };
	json_t *a = issued(), *e;
	size_t i;

	for (i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++)
		if (strstr(text, secrets[i]))
			fail_msg("%s shows a secret (%s)", what, secrets[i]);
	/* STS's secret keys and session tokens */
	json_array_foreach(a, i, e) {
		if (strstr(text, json_string_value(json_array_get(e, 4))))
			fail_msg("%s shows an STS secret key", what);
		if (strstr(text, json_string_value(json_array_get(e, 5))))
			fail_msg("%s shows an STS session token", what);
	}
	json_decref(a);
}

/* No secret (the presigned signature, the bearer token, either S3 secret) in the log, list,
 * status, describe, metrics, errors or state records. */
static void test_secrets_never_shown(void **state)
{
	static const char *const cmds[][4] = {
		{ "list", "--json", NULL },
		{ "status", "--json", NULL },
		{ "describe", "http", "--json", NULL },
		{ "describe", "s3-dir", NULL },
		{ "describe", "s3-wrong", NULL },
		{ "describe", "private", "--json", NULL },
		{ "describe", "s3-web", NULL },
		{ "describe", "s3-web", "--json", NULL },
	};
	char out[1 << 16], *metrics, statedir[700];
	weightd_client *c;
	weightd_weight *w;
	weightd_error err;
	DIR *d;
	struct dirent *de;
	int n_records = 0;

	(void)state;
	NEED_SERVERS(&srv);
	wait_admitted(NULL);
	c = it_connect(&H);
	/* some traffic first, so that metrics and state records exist */
	w = it_get_ok(c, "http", "a");
	weightd_release(w);
	w = it_get_ok(c, "s3-one", "b");
	weightd_release(w);
	w = it_get_ok(c, "s3-web", "c");
	weightd_release(w);
	assert_true(it_get(c, "s3-wrong", "a", &w, &err) < 0);
	assert_no_secret("an error", err.message);
	weightd_close(c);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		/* a row's unused words are NULL: the first ends the arguments */
		it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, cmds[i][0], cmds[i][1],
		       cmds[i][2], cmds[i][3], (char *)NULL);
		assert_no_secret(cmds[i][0], out);
	}
	metrics = wd_servers_get(metrics_port, "/metrics");
	assert_non_null(metrics);
	assert_non_null(strstr(metrics, "weightd_"));
	assert_no_secret("metrics", metrics);
	free(metrics);
	assert_false(file_has(H.log, SIG_SECRET));
	assert_false(file_has(H.log, WRONG_SECRET));
	assert_false(file_has(H.log, srv.token));
	assert_false(file_has(H.log, srv.s3_secret));
	assert_false(file_has(H.log, srv.web_token));
	{
		char *log = NULL;
		size_t n = 0;
		FILE *f = fopen(H.log, "r");
		assert_non_null(f);
		log = calloc(1, 1 << 22);
		assert_non_null(log);
		n = fread(log, 1, (1 << 22) - 1, f);
		fclose(f);
		log[n] = '\0';
		assert_no_secret("the log", log);
		/* the log does say where s3-web's keys came from */
		assert_non_null(strstr(log, "checkpoint s3-web: credentials from web identity"));
		free(log);
	}
	assert_true(file_has(H.log, "SignatureDoesNotMatch")); /* the log does say what failed */
	snprintf(statedir, sizeof(statedir), "%s/state/%s", H.dir, H.prefix);
	d = opendir(statedir);
	while (d && (de = readdir(d))) {
		char p[1024];

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", statedir, de->d_name);
		n_records += file_has(p, "");
		assert_false(file_has(p, SIG_SECRET));
		assert_false(file_has(p, srv.token));
		assert_false(file_has(p, srv.s3_secret));
	}
	if (d)
		closedir(d);
	assert_true(n_records > 0); /* there were records to look into */
}

/* A server that answers nothing keeps its checkpoint "loading" (with a sentence saying so to a
 * client that asks) while the others are served; the main loop answers at once. */
static void test_hung_server_blocks_nothing(void **state)
{
	struct harness h2;
	char sections[2048], hung[64];
	int lfd;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	weightd_client *c;
	weightd_weight *w;
	weightd_error err;
	weightd_source_list *l;
	int64_t t0;

	(void)state;
	NEED_SERVERS(&srv);
	/* a listener that accepts (the kernel does) and never answers */
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(listen(lfd, 16), 0);
	snprintf(hung, sizeof(hung), "127.0.0.1:%d", ntohs(a.sin_port));
	assert_int_equal(harness_init(&h2), 0);
	snprintf(sections, sizeof(sections),
		 "[checkpoint:hung]\npath = http://%s/m.safetensors\nallow_http = yes\n"
		 "[checkpoint:local]\npath = %s\n"
		 "[checkpoint:http]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n",
		 hung, local_m, srv.http);
	it_start(&h2, "remote_low_speed_time = 60s\n", sections);
	c = it_connect(&h2);
	t0 = it_now_ms();
	w = it_get_ok(c, "local", "a");
	weightd_release(w);
	assert_int_equal(it_get(c, "hung", "a", &w, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "still being admitted"));
	assert_true(it_now_ms() - t0 < 5000);
	/* the other remote checkpoint is admitted and served meanwhile */
	for (int i = 0; i < 200; i++) {
		if (it_get(c, "http", "a", &w, &err) == 0)
			break;
		usleep(50000);
	}
	assert_non_null(w);
	weightd_release(w);
	assert_int_equal(weightd_list(c, &l, &err), 0);
	for (size_t i = 0; i < l->count; i++)
		if (strcmp(l->sources[i].name, "hung") == 0)
			assert_string_equal(l->sources[i].state, "loading");
	weightd_source_list_free(l);
	weightd_close(c);
	/* and a stop does not wait for it */
	t0 = it_now_ms();
	assert_int_equal(harness_stop(&h2), 0);
	assert_true(it_now_ms() - t0 < 10000);
	harness_cleanup(&h2);
	close(lfd);
}

/* A remote checkpoint that fails admission (its object is missing) is FAILED with a typed error
 * naming the URL and the status, in list and describe alike; the next reload admits it once the
 * object is there. */
static void test_failed_admission_retried_on_reload(void **state)
{
	struct harness h3;
	char sections[1024], later[700], cmd[1600];
	weightd_client *c;
	weightd_description *d;
	weightd_source_list *l;
	weightd_weight *w;
	weightd_error err;
	bool ready = false;

	(void)state;
	NEED_SERVERS(&srv);
	snprintf(later, sizeof(later), "%s/later.safetensors", root);
	unlink(later);
	assert_int_equal(harness_init(&h3), 0);
	snprintf(sections, sizeof(sections),
		 "[checkpoint:later]\npath = http://127.0.0.1:%d/later.safetensors\n"
		 "allow_http = yes\n[checkpoint:local]\npath = %s\n",
		 srv.http, local_m);
	it_start(&h3, NULL, sections);
	c = it_connect(&h3);
	for (int i = 0; i < 600 && !ready; i++) {
		assert_int_equal(weightd_list(c, &l, &err), 0);
		for (size_t k = 0; k < l->count; k++)
			if (strcmp(l->sources[k].name, "later") == 0 &&
			    strcmp(l->sources[k].state, "failed") == 0) {
				assert_non_null(strstr(l->sources[k].error, "404"));
				assert_non_null(strstr(l->sources[k].error, "later.safetensors"));
				ready = true;
			}
		weightd_source_list_free(l);
		if (!ready)
			usleep(50000);
	}
	assert_true(ready);
	assert_int_equal(weightd_describe(c, "later", &d, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "404"));
	/* the object appears; a reload admits it */
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", local_m, later);
	assert_int_equal(system(cmd), 0);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	ready = false;
	for (int i = 0; i < 600 && !ready; i++) {
		if (it_get(c, "later", "a", &w, &err) == 0) {
			weightd_weight *lw = it_get_ok(c, "local", "a");

			assert_memory_equal(it_map(w), it_map(lw), weightd_weight_nbytes(w));
			weightd_release(lw);
			weightd_release(w);
			ready = true;
		} else {
			usleep(50000);
		}
	}
	assert_true(ready);
	weightd_close(c);
	harness_cleanup(&h3);
	unlink(later);
}

static long s3_proxy_stat(const char *name)
{
	char *st = wd_servers_get(srv.s3, "/__stats");
	json_error_t je;
	json_t *j;
	long n;

	assert_non_null(st);
	j = json_loads(st, 0, &je);
	free(st);
	assert_non_null(j);
	n = (long)json_integer_value(json_object_get(j, name));
	json_decref(j);
	return n;
}

/*
 * A fill that outlives its keys: container credentials living 8 s, a fill slowed to about 16 s
 * (one range at a time, each held 1 s by the proxy). The fill completes with the checkpoint's
 * bytes; the keys were fetched again during it (describe's key id changed); and the proxy, which
 * refuses any request whose token has expired when it arrives, refused none.
 */
static void test_fill_outlives_its_keys(void **state)
{
	struct harness h4;
	char sections[2048], tf[700], url[256], first[128];
	weightd_client *c;
	weightd_description *d;
	weightd_weight *w, *lw;
	weightd_error err;
	long expired0;
	char *r;

	(void)state;
	NEED_SERVERS(&srv);
	r = wd_servers_get(srv.aws, "/__ctl?ttl=8&rotate=1");
	free(r);
	snprintf(tf, sizeof(tf), "%s/pod.token", H.dir);
	tf_write(tf, srv.container_token, 0600);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/creds", srv.aws);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tf, 1);
	assert_int_equal(harness_init(&h4), 0);
	snprintf(
		sections, sizeof(sections),
		"[checkpoint:big]\npath = s3://%s/big.safetensors\nendpoint = http://127.0.0.1:%d\n"
		"path_style = yes\nallow_http = yes\ncredentials = container\n"
		"[checkpoint:local-big]\npath = %s\n",
		srv.bucket, srv.s3, local_big);
	it_start(&h4, "remote_chunk = 256K\nremote_concurrency = 1\n", sections);
	unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	c = it_connect(&h4);
	wait_admitted_in(&h4);
	assert_int_equal(weightd_describe(c, "big", &d, &err), 0);
	assert_non_null(strstr(d->credentials, "container credentials"));
	snprintf(first, sizeof(first), "%s", d->credentials_key_id);
	weightd_description_free(d);
	expired0 = s3_proxy_stat("expired");
	r = wd_servers_get(srv.s3, "/__ctl?fault=stall&n=16&seconds=1");
	free(r);
	w = it_get_ok(c, "big", "w"); /* 4 MiB: 16 ranges of 256 KiB */
	lw = it_get_ok(c, "local-big", "w");
	assert_int_equal(weightd_weight_nbytes(w), weightd_weight_nbytes(lw));
	assert_memory_equal(it_map(w), it_map(lw), weightd_weight_nbytes(w));
	weightd_release(w);
	weightd_release(lw);
	assert_int_equal(weightd_describe(c, "big", &d, &err), 0);
	printf("keys at admission %s, after the fill %s\n", first, d->credentials_key_id);
	assert_string_not_equal(d->credentials_key_id, first);
	weightd_description_free(d);
	assert_int_equal(s3_proxy_stat("expired"), expired0);
	r = wd_servers_get(srv.s3, "/__ctl?fault=stall&n=0");
	free(r);
	r = wd_servers_get(srv.aws, "/__ctl?ttl=3600&rotate=1");
	free(r);
	weightd_close(c);
	harness_cleanup(&h4);
}

/* --check-config checks a remote section and its secret files without contacting the server
 * (here one that would never answer), and refuses a credentials file others can read. */
static void test_check_config_offline(void **state)
{
	char conf[700], loose[700], text[4096], out[8192];
	char *argv[] = { (char *)harness_weightd(), "--config", conf, "--check-config", NULL };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int lfd, st;
	int64_t t0;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(listen(lfd, 16), 0);
	snprintf(loose, sizeof(loose), "%s/loose.credentials", H.dir);
	tf_write(loose, "[default]\naws_access_key_id = k\naws_secret_access_key = s\n", 0644);
	snprintf(conf, sizeof(conf), "%s/check.conf", H.dir);
	snprintf(text, sizeof(text),
		 "[checkpoint:quiet]\npath = http://127.0.0.1:%d/m.safetensors\nallow_http = yes\n"
		 "[checkpoint:s3]\npath = s3://b/m/\nendpoint = http://127.0.0.1:%d\n"
		 "allow_http = yes\npath_style = yes\n",
		 ntohs(a.sin_port), ntohs(a.sin_port));
	tf_write(conf, text, 0644);
	t0 = it_now_ms();
	st = harness_run(argv, out, sizeof(out), (uid_t)-1);
	assert_int_equal(st, 0);
	assert_true(it_now_ms() - t0 < 5000);
	assert_non_null(strstr(out, "checkpoint quiet: ok, remote http://127.0.0.1:"));
	assert_non_null(strstr(out, "not contacted"));
	if (srv.up) {
		/* an s3 checkpoint's credentials are resolved once (STS asked; the store never) */
		snprintf(text + strlen(text), sizeof(text) - strlen(text),
			 "[checkpoint:web]\npath = s3://b/m/\nendpoint = http://127.0.0.1:%d\n"
			 "allow_http = yes\npath_style = yes\ncredentials = web-identity\n",
			 ntohs(a.sin_port));
		tf_write(conf, text, 0644);
		st = harness_run(argv, out, sizeof(out), (uid_t)-1);
		assert_int_equal(st, 0);
		assert_non_null(strstr(out, "checkpoint web: ok"));
		assert_non_null(strstr(out, "credentials from web identity"));
		assert_non_null(strstr(out, "access key id ASIA"));
		assert_no_secret("--check-config", out);
		/* a token STS refuses: the check fails saying so */
		tf_write(web_token_file, "not-the-token", 0644);
		st = harness_run(argv, out, sizeof(out), (uid_t)-1);
		tf_write(web_token_file, srv.web_token, 0644);
		assert_int_equal(st, 1);
		assert_non_null(strstr(out, "checkpoint web: FAILED"));
		assert_non_null(strstr(out, "web identity: STS said AccessDenied: Not authorized "
					    "to perform sts:AssumeRoleWithWebIdentity"));
		text[strstr(text, "[checkpoint:web]") - text] = '\0';
	}
	/* a credentials file others can read: refused, naming it */
	snprintf(text + strlen(text), sizeof(text) - strlen(text), "credentials_file = %s\n",
		 loose);
	tf_write(conf, text, 0644);
	st = harness_run(argv, out, sizeof(out), (uid_t)-1);
	assert_int_equal(st, 1);
	assert_non_null(strstr(out, "checkpoint s3: FAILED"));
	assert_non_null(strstr(out, loose));
	assert_non_null(strstr(out, "can be read by others"));
	close(lfd);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_kinds), cmocka_unit_test(test_describe),
	  cmocka_unit_test(test_recipe_reads_what_it_needs),
	  cmocka_unit_test(test_secrets_never_shown),
	  cmocka_unit_test(test_hung_server_blocks_nothing),
	  cmocka_unit_test(test_check_config_offline),
	  cmocka_unit_test(test_fill_outlives_its_keys),
	  cmocka_unit_test(test_failed_admission_retried_on_reload))
