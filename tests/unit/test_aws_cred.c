/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for src/aws_cred.c (and aws_cred_sources.c): each AWS credential source resolved from an
 * environment, files and loopback endpoints answering as AWS documents (tests/remote/servers.py,
 * aws_endpoints.py), checked against botocore resolving the same (tests/remote/aws_oracle.py);
 * S3 reads through the SigV4 proxy verify with those keys and session token; refresh, rotation,
 * the ExpiredToken retry, and errors naming the source. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"
#include "files.h"

#include "aws_cred.h"
#include "remote.h"
#include "servers.h"
#include "source.h"
#include "st_writer.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Warray-bounds"

static char root[4096], files[4200];
static struct wd_servers srv;

static const struct stw_tensor ts[] = {
	{ .name = "a.weight", .dtype = "F32", .ndim = 2, .shape = { 64, 32 }, .seed = 1 },
};

static const char *const aws_vars[] = {
	"AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN",
	"AWS_ROLE_ARN",
	"AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_ROLE_SESSION_NAME",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_SHARED_CREDENTIALS_FILE",
	"AWS_CONFIG_FILE",
	"AWS_PROFILE",
	"AWS_DEFAULT_PROFILE",
	"AWS_ENDPOINT_URL_STS",
	"AWS_EC2_METADATA_SERVICE_ENDPOINT",
	"AWS_REGION",
	"AWS_DEFAULT_REGION",
};

/* Nothing of a developer's own AWS set-up leaks in: the files are ones that do not exist, and
 * instance metadata is off unless a test points it at the loopback endpoint. */
static void clean_env(void)
{
	char p[4400];

	for (size_t i = 0; i < sizeof(aws_vars) / sizeof(aws_vars[0]); i++)
		unsetenv(aws_vars[i]);
	snprintf(p, sizeof(p), "%s/none", files);
	setenv("AWS_SHARED_CREDENTIALS_FILE", p, 1);
	setenv("AWS_CONFIG_FILE", p, 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	setenv("AWS_DEFAULT_REGION", "us-east-1", 1);
}

/* files/name, written with text and mode; the path into buf. */
static const char *put_file(const char *name, const char *text, mode_t mode, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s", files, name);
	tf_write(buf, text, mode);
	return buf;
}

static int setup(void **state)
{
	char p[4400];

	(void)state;
	if (stw_tmpdir(root, sizeof(root)))
		return -1;
	snprintf(p, sizeof(p), "%s/single.safetensors", root);
	if (stw_write(p, ts, 1, NULL, 0, NULL))
		return -1;
	snprintf(files, sizeof(files), "%s.files", root);
	if (mkdir(files, 0700))
		return -1;
	wd_servers_try(root, true, &srv);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_stop(&srv);
	stw_rmtree(root);
	stw_rmtree(files);
	return 0;
}


static void aws_ctl(const char *q)
{
	char path[512];
	char *r;

	snprintf(path, sizeof(path), "/__ctl?%s", q);
	r = wd_servers_get(srv.aws, path);
	assert_non_null(r);
	free(r);
}

/* Every test's start: the servers (or a skip), a clean environment, the endpoints' defaults. */
#define need_aws()                                                                               \
	do {                                                                                     \
		NEED_SERVERS(&srv);                                                              \
		clean_env();                                                                     \
		aws_ctl("ttl=3600&rotate=1&imds_role=weightd-node-role&imds_v1=0&imds_no_v2=0"); \
	} while (0)

static void aws_url(char *buf, size_t cap, const char *path)
{
	snprintf(buf, cap, "http://127.0.0.1:%d%s", srv.aws, path);
}

/* What botocore resolves from this environment: its access key id into key ("" and the reason
 * printed when it found none). */
static void oracle(char *key, size_t cap, bool *has_token)
{
	const char *src = getenv("WD_SOURCE_DIR");
	char cmd[4600], line[4096] = "";
	json_error_t je;
	json_t *j;
	FILE *f;

	/* botocore is asked with instance metadata on only where the test pointed it here */
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/remote/aws_oracle.py",
		 src ? src : ".");
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	pclose(f);
	j = json_loads(line, 0, &je);
	assert_non_null(j);
	if (json_object_get(j, "error"))
		print_message("botocore: %s\n", json_string_value(json_object_get(j, "error")));
	snprintf(key, cap, "%s",
		 json_string_value(json_object_get(j, "access_key")) ?
			 json_string_value(json_object_get(j, "access_key")) :
			 "");
	if (has_token)
		*has_token = json_is_true(json_object_get(j, "has_token"));
	json_decref(j);
}

static struct wd_source_remote_conf s3_conf(int source)
{
	static char endpoint[64];

	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", srv.s3);
	return (struct wd_source_remote_conf){ .endpoint = endpoint,
					       .region = "us-east-1",
					       .path_style = true,
					       .credentials = source,
					       .allow_http = true };
}

/* A counter of the S3 proxy's /__stats: `name` at its top level, or inside object `in`. */
static long proxy_counter(const char *in, const char *name)
{
	char *s = wd_servers_get(srv.s3, "/__stats");
	json_error_t je;
	json_t *j, *o;
	long n;

	assert_non_null(s);
	j = json_loads(s, 0, &je);
	free(s);
	assert_non_null(j);
	o = in ? json_object_get(j, in) : j;
	n = (long)json_integer_value(json_object_get(o, name));
	json_decref(j);
	return n;
}

/* Requests the S3 proxy verified with this access key (its signature and session token). */
static long verified_with(const char *key)
{
	return proxy_counter("keys", key);
}

static long s3_stat(const char *name)
{
	return proxy_counter(NULL, name);
}

/* Every byte of the tensor read through src equals the local file's. */
static void read_all(const struct wd_source *src)
{
	const struct wd_tensor_info *t = wd_source_find(src, "a.weight");
	char p[4400];
	weightd_error err;
	uint8_t *got, *want;
	FILE *f;

	assert_non_null(t);
	got = malloc(t->nbytes);
	want = malloc(t->nbytes);
	wd_source_remote_readahead_drop(); /* a request each time, signed with the keys of now */
	assert_int_equal(wd_source_pread(src, t->file, got, t->nbytes, t->offset, &err), 0);
	snprintf(p, sizeof(p), "%s/single.safetensors", root);
	f = fopen(p, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)t->offset, SEEK_SET), 0);
	assert_int_equal(fread(want, 1, t->nbytes, f), t->nbytes);
	fclose(f);
	assert_memory_equal(got, want, t->nbytes);
	free(got);
	free(want);
}

static struct wd_aws_cred_info info_of(const struct wd_source *src)
{
	struct wd_aws_cred_info in;

	assert_non_null(wd_remote_aws_cred(wd_source_remote(src)));
	wd_aws_cred_info(wd_remote_aws_cred(wd_source_remote(src)), &in);
	return in;
}

/*
 * The heart of each source's test: botocore and weightd resolve from the same environment to the
 * same access key id; weightd's admission and a read of the payload are signed with it (the
 * proxy verified them with its secret and session token); describe's source names `source`.
 */
static void same_as_botocore(int pin, const char *source, bool want_token)
{
	struct wd_source_remote_conf rc = s3_conf(pin);
	struct wd_aws_cred_info in;
	struct wd_source *src = NULL;
	char key[256], url[256];
	bool has_token = false;
	weightd_error err;
	long before;

	oracle(key, sizeof(key), &has_token);
	assert_true(key[0]);
	assert_true(has_token == want_token);
	before = verified_with(key);
	snprintf(url, sizeof(url), "s3://%s/single.safetensors", srv.bucket);
	wd_error_clear(&err);
	if (wd_source_open_at("m", url, &rc, NULL, &src, &err) != 0)
		fail_msg("%s", err.message);
	in = info_of(src);
	assert_string_equal(in.access_key, key);
	assert_non_null(strstr(in.source, source));
	assert_true(want_token ? in.expires > time(NULL) : in.expires == 0);
	read_all(src);
	assert_true(verified_with(key) >= before + 2); /* the admission's reads and the payload */
	wd_source_free(src);
}

static void test_env_with_session_token(void **state)
{
	struct wd_aws_cred_conf cc = { .source = WD_AWS_CONTAINER };
	struct wd_aws_cred *c = NULL;
	struct wd_aws_keys *k = NULL;
	char url[256];
	weightd_error err;

	(void)state;
	need_aws();
	/* temporary keys to put in the environment: the container endpoint's */
	aws_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", srv.container_token, 1);
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), 0);
	assert_int_equal(wd_aws_cred_get(c, &k, &err), 0);
	clean_env();
	setenv("AWS_ACCESS_KEY_ID", k->access_key, 1);
	setenv("AWS_SECRET_ACCESS_KEY", k->secret_key, 1);
	setenv("AWS_SESSION_TOKEN", k->session_token, 1);
	wd_aws_cred_release(k);
	wd_aws_cred_unref(c);
	/* env keys carry no expiry of their own */
	struct wd_source_remote_conf rc = s3_conf(WD_AWS_ENV);
	struct wd_source *src = NULL;
	char key[256];
	bool tok = false;

	oracle(key, sizeof(key), &tok);
	assert_string_equal(key, getenv("AWS_ACCESS_KEY_ID"));
	assert_true(tok);
	snprintf(url, sizeof(url), "s3://%s/single.safetensors", srv.bucket);
	if (wd_source_open_at("m", url, &rc, NULL, &src, &err) != 0)
		fail_msg("%s", err.message);
	assert_string_equal(info_of(src).access_key, key);
	assert_string_equal(info_of(src).source, "environment");
	read_all(src);
	assert_true(verified_with(key) >= 2);
	wd_source_free(src);
}

static void test_web_identity(void **state)
{
	char tf[4400], url[256];

	(void)state;
	need_aws();
	put_file("web.token", srv.web_token, 0644, tf, sizeof(tf));
	aws_url(url, sizeof(url), "/");
	setenv("AWS_ENDPOINT_URL_STS", url, 1);
	setenv("AWS_ROLE_ARN", srv.role_arn, 1);
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tf, 1);
	setenv("AWS_ROLE_SESSION_NAME", "weightd-test", 1);
	same_as_botocore(WD_AWS_AUTO, "web identity", true);
	same_as_botocore(WD_AWS_WEB_IDENTITY, "web identity", true);
}

static void test_container(void **state)
{
	char tf[4400], url[256];

	(void)state;
	need_aws();
	put_file("pod.token", srv.container_token, 0640, tf, sizeof(tf));
	aws_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tf, 1);
	same_as_botocore(WD_AWS_AUTO, "container credentials", true);
	same_as_botocore(WD_AWS_CONTAINER, "container credentials", true);
}

static void test_profile_assume_role(void **state)
{
	char cf[4400], conf[4400], text[1024], url[256];

	(void)state;
	need_aws();
	snprintf(text, sizeof(text), "[base]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		 srv.s3_key, srv.s3_secret);
	setenv("AWS_SHARED_CREDENTIALS_FILE", put_file("credentials", text, 0600, cf, sizeof(cf)),
	       1);
	snprintf(text, sizeof(text),
		 "[profile app]\nrole_arn = %s\nsource_profile = base\nrole_session_name = app\n",
		 srv.role_arn);
	setenv("AWS_CONFIG_FILE", put_file("config", text, 0644, conf, sizeof(conf)), 1);
	setenv("AWS_PROFILE", "app", 1);
	aws_url(url, sizeof(url), "/");
	setenv("AWS_ENDPOINT_URL_STS", url, 1);
	same_as_botocore(WD_AWS_AUTO, "assume role", true);
	same_as_botocore(WD_AWS_FILE, "assume role", true);
}

static void test_profile_web_identity_and_keys(void **state)
{
	char cf[4400], conf[4400], tf[4400], text[8192], url[256];

	(void)state;
	need_aws();
	put_file("web.token", srv.web_token, 0644, tf, sizeof(tf));
	snprintf(text, sizeof(text),
		 "[default]\nregion = us-east-1\n[profile pod]\nrole_arn = %s\n"
		 "web_identity_token_file = %s\n",
		 srv.role_arn, tf);
	setenv("AWS_CONFIG_FILE", put_file("config", text, 0644, conf, sizeof(conf)), 1);
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.s3_key,
		 srv.s3_secret);
	setenv("AWS_SHARED_CREDENTIALS_FILE", put_file("credentials", text, 0600, cf, sizeof(cf)),
	       1);
	aws_url(url, sizeof(url), "/");
	setenv("AWS_ENDPOINT_URL_STS", url, 1);
	setenv("AWS_PROFILE", "pod", 1);
	same_as_botocore(WD_AWS_AUTO, "web identity", true);
	setenv("AWS_PROFILE", "default", 1);
	same_as_botocore(WD_AWS_AUTO, "credentials file", false);
}

static void test_imds(void **state)
{
	char url[256];

	(void)state;
	need_aws();
	aws_url(url, sizeof(url), "");
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url, 1);
	unsetenv("AWS_EC2_METADATA_DISABLED");
	same_as_botocore(WD_AWS_AUTO, "IMDSv2", true);
	same_as_botocore(WD_AWS_IMDS, "IMDSv2", true);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

/* Each failure names its source and why, as the endpoint said it. */
static void test_errors_name_the_source(void **state)
{
	struct wd_aws_cred_conf cc = { 0 };
	struct wd_aws_cred *c = NULL;
	char tf[4400], url[256];
	weightd_error err;

	(void)state;
	need_aws();
	put_file("wrong.token", "not-the-projected-token", 0644, tf, sizeof(tf));
	aws_url(url, sizeof(url), "/");
	setenv("AWS_ENDPOINT_URL_STS", url, 1);
	setenv("AWS_ROLE_ARN", srv.role_arn, 1);
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tf, 1);
	cc.source = WD_AWS_WEB_IDENTITY;
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "web identity: STS said AccessDenied: Not authorized "
					    "to perform sts:AssumeRoleWithWebIdentity"));
	/* a token file weightd cannot read: its mode and owner are named */
	if (geteuid() != 0) {
		put_file("locked.token", srv.web_token, 0000, tf, sizeof(tf));
		assert_true(wd_aws_cred_new(&cc, &c, &err) < 0);
		assert_non_null(strstr(err.message, "unreadable"));
		assert_non_null(strstr(err.message, "mode 0000"));
	}
	snprintf(tf, sizeof(tf), "%s/missing.token", files);
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tf, 1);
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "web identity: token file"));
	clean_env();

	/* the container endpoint refuses a wrong authorization token */
	put_file("pod.token", "wrong", 0600, tf, sizeof(tf));
	aws_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tf, 1);
	cc.source = WD_AWS_AUTO;
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "container credentials"));
	assert_non_null(strstr(err.message, "HTTP 401"));
	/* plain http elsewhere than loopback or the agent's address is refused unsent */
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds", 1);
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "neither https nor a loopback"));
	clean_env();

	/* IMDS with no role, and IMDSv1 only where allowed */
	aws_url(url, sizeof(url), "");
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url, 1);
	unsetenv("AWS_EC2_METADATA_DISABLED");
	cc.source = WD_AWS_IMDS;
	aws_ctl("imds_role=");
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "IMDS: no role attached"));
	cc.source = WD_AWS_AUTO; /* in the chain, no role is no credentials: unsigned */
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_NOT_FOUND);
	aws_ctl("imds_role=weightd-node-role&imds_no_v2=1&imds_v1=1");
	cc.source = WD_AWS_IMDS;
	assert_int_equal(wd_aws_cred_new(&cc, &c, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "IMDSv1 is off"));
	cc.imds_v1 = true;
	if (wd_aws_cred_new(&cc, &c, &err) != 0)
		fail_msg("%s", err.message);
	{
		struct wd_aws_cred_info in;
		wd_aws_cred_info(c, &in);
		assert_non_null(strstr(in.source, "IMDSv1"));
	}
	wd_aws_cred_unref(c);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

/*
 * A credentials file rewritten under an open source: the next request is signed with the new
 * keys, read from the file within a second, on the same source (no reopen, no new pin).
 */
static void test_rotated_file(void **state)
{
	struct wd_source_remote_conf rc;
	struct wd_source *src = NULL;
	char cf[4400], text[1024], url[256];
	weightd_error err;

	(void)state;
	need_aws();
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.s3_key,
		 srv.s3_secret);
	put_file("rotating", text, 0600, cf, sizeof(cf));
	rc = s3_conf(WD_AWS_AUTO);
	rc.credentials_file = cf;
	snprintf(url, sizeof(url), "s3://%s/single.safetensors", srv.bucket);
	if (wd_source_open_at("m", url, &rc, NULL, &src, &err) != 0)
		fail_msg("%s", err.message);
	assert_string_equal(info_of(src).access_key, srv.s3_key);
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.s3_key2,
		 srv.s3_secret2);
	put_file("rotating.new", text, 0600, cf, sizeof(cf));
	{
		char to[4400];
		snprintf(to, sizeof(to), "%s/rotating", files);
		assert_int_equal(rename(cf, to), 0); /* as a Secret's update swaps it in */
	}
	sleep(2); /* the provider looks at the file at most once a second */
	read_all(src);
	assert_true(verified_with(srv.s3_key2) >= 1);
	assert_string_equal(info_of(src).access_key, srv.s3_key2);
	assert_true(info_of(src).refreshes >= 1);
	wd_source_free(src);
}

/*
 * Keys that live 8 s, read for 16 s: every request the proxy saw was signed with keys valid
 * when it arrived (no ExpiredToken refusal), more than one set of keys was used, and reads go on
 * past the first keys' expiry without a reopen.
 */
static void test_refresh_before_expiry(void **state)
{
	struct wd_source_remote_conf rc;
	struct wd_source *src = NULL;
	char tf[4400], url[256], first[256];
	weightd_error err;
	time_t until;
	long expired0 = s3_stat("expired");

	(void)state;
	need_aws();
	aws_ctl("ttl=8&rotate=1");
	put_file("pod.token", srv.container_token, 0600, tf, sizeof(tf));
	aws_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tf, 1);
	rc = s3_conf(WD_AWS_CONTAINER);
	snprintf(url, sizeof(url), "s3://%s/single.safetensors", srv.bucket);
	if (wd_source_open_at("m", url, &rc, NULL, &src, &err) != 0)
		fail_msg("%s", err.message);
	snprintf(first, sizeof(first), "%s", info_of(src).access_key);
	until = time(NULL) + 16;
	while (time(NULL) < until) {
		read_all(src);
		usleep(250000);
	}
	assert_string_not_equal(info_of(src).access_key, first);
	assert_true(info_of(src).refreshes >= 2);
	assert_int_equal(s3_stat("expired"), expired0);
	wd_source_free(src);
	aws_ctl("ttl=3600");
}

/* A token that expires under a request: answered ExpiredToken, sent once more with new keys,
 * and not counted as a retry. */
static void test_expired_token_retried_once(void **state)
{
	struct wd_source_remote_conf rc;
	struct wd_remote_counters n;
	struct wd_source *src = NULL;
	char tf[4400], url[256], first[256];
	weightd_error err;
	long expired0;

	(void)state;
	need_aws();
	put_file("pod.token", srv.container_token, 0600, tf, sizeof(tf));
	aws_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tf, 1);
	rc = s3_conf(WD_AWS_AUTO);
	snprintf(url, sizeof(url), "s3://%s/single.safetensors", srv.bucket);
	if (wd_source_open_at("m", url, &rc, NULL, &src, &err) != 0)
		fail_msg("%s", err.message);
	snprintf(first, sizeof(first), "%s", info_of(src).access_key);
	expired0 = s3_stat("expired");
	free(wd_servers_get(srv.s3, "/__ctl?fault=expired&n=1"));
	read_all(src);
	assert_int_equal(s3_stat("expired"), expired0 + 1);
	assert_string_not_equal(info_of(src).access_key, first);
	wd_remote_counters(wd_source_remote(src), &n);
	assert_int_equal(n.retries, 0);
	/* twice in a row: the second refusal is the range's error */
	free(wd_servers_get(srv.s3, "/__ctl?fault=expired&n=2"));
	{
		const struct wd_tensor_info *t = wd_source_find(src, "a.weight");
		char buf[64];
		wd_source_remote_readahead_drop();
		assert_true(wd_source_pread(src, t->file, buf, sizeof(buf), t->offset, &err) < 0);
		assert_non_null(strstr(err.message, "ExpiredToken"));
	}
	free(wd_servers_get(srv.s3, "/__ctl?fault=expired&n=0"));
	wd_source_free(src);
}

static void test_windows(void **state)
{
	int64_t a, m;

	(void)state;
	wd_aws_cred_windows(3600, &a, &m); /* botocore's, for keys of an hour */
	assert_int_equal(a, 15 * 60);
	assert_int_equal(m, 10 * 60);
	wd_aws_cred_windows(6 * 3600, &a, &m);
	assert_int_equal(a, 15 * 60);
	assert_int_equal(m, 10 * 60);
	wd_aws_cred_windows(20, &a, &m); /* short-lived keys: the same proportions */
	assert_int_equal(a, 5);
	assert_int_equal(m, 3);
	assert_int_equal(wd_aws_cred_source_parse("web-identity"), WD_AWS_WEB_IDENTITY);
	assert_int_equal(wd_aws_cred_source_parse("instance"), -1);
}

TEST_MAIN(setup, teardown, cmocka_unit_test(test_windows),
	  cmocka_unit_test(test_env_with_session_token), cmocka_unit_test(test_web_identity),
	  cmocka_unit_test(test_container), cmocka_unit_test(test_profile_assume_role),
	  cmocka_unit_test(test_profile_web_identity_and_keys), cmocka_unit_test(test_imds),
	  cmocka_unit_test(test_errors_name_the_source), cmocka_unit_test(test_rotated_file),
	  cmocka_unit_test(test_expired_token_retried_once),
	  cmocka_unit_test(test_refresh_before_expiry))
