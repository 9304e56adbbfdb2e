/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_config.c - weightd.conf loading: every key, the defaults, each error with its line. */
#include <netinet/in.h>
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
#include "log.h"

static char tmpdir[] = "/tmp/wd-test-config-XXXXXX";
static char conf_path[sizeof(tmpdir) + 32];

static int group_setup(void **state)
{
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(conf_path, sizeof(conf_path), "%s/weightd.conf", tmpdir);
	return 0;
}

static int group_teardown(void **state)
{
	unlink(conf_path);
	return rmdir(tmpdir);
}

/* Write exactly `len` bytes (so a test can embed NUL) as the config file. */
static void write_conf_len(const char *text, size_t len)
{
	FILE *f = fopen(conf_path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void write_conf(const char *text)
{
	write_conf_len(text, strlen(text));
}

/* Load `text`, expect -WEIGHTD_E_INVALID_ARGUMENT with a message "PATH:LINE: ..." that contains
 * `needle`. */
static void expect_error_at(const char *text, size_t len, int line, const char *needle)
{
	weightd_error err;
	struct config *cfg = NULL;
	char head[sizeof(conf_path) + 24];
	int rc;

	wd_error_clear(&err);
	write_conf_len(text, len);
	rc = config_load(conf_path, &cfg, &err);
	if (rc != -WEIGHTD_E_INVALID_ARGUMENT)
		print_message("config:\n%s\nrc %d, message: %s\n", text, rc, err.message);
	assert_int_equal(rc, -WEIGHTD_E_INVALID_ARGUMENT);
	assert_null(cfg);
	assert_int_equal(err.code, WEIGHTD_E_INVALID_ARGUMENT);
	snprintf(head, sizeof(head), "%s:%d: ", conf_path, line);
	if (strncmp(err.message, head, strlen(head)) != 0 || !strstr(err.message, needle))
		print_message("expected '%s...%s', got '%s'\n", head, needle, err.message);
	assert_true(strncmp(err.message, head, strlen(head)) == 0);
	assert_non_null(strstr(err.message, needle));
}

static void expect_error(const char *text, int line, const char *needle)
{
	expect_error_at(text, strlen(text), line, needle);
}

static struct config *load_ok(const char *text)
{
	weightd_error err;
	struct config *cfg = NULL;
	int rc;

	wd_error_clear(&err);
	write_conf(text);
	rc = config_load(conf_path, &cfg, &err);
	if (rc != 0)
		print_message("unexpected error: %s\n", err.message);
	assert_int_equal(rc, 0);
	assert_non_null(cfg);
	return cfg;
}

static void test_full_file(void **state)
{
	static const char text[] =
		"; weightd test configuration\n"
		"# every key, some indented, one CRLF line\n"
		"[daemon]\n"
		"socket = /run/wd-test/s.sock\n"
		"socket_mode = 0640\n"
		"socket_group = daemon\n"
		"  shm_prefix = wd-test_1.x\n"
		"\tstate_dir = /var/lib/wd-test\n"
		"budget = 16G\n"
		"workers = 3\r\n"
		"max_clients = 77\n"
		"client_max_pending = 9\n"
		"client_max_queue = 8M\n"
		"client_max_bytes = 2T\n"
		"client_max_weights = 500\n"
		"uid_budget_share = 25\n"
		"budget_users = daemon, 1234\n"
		"max_frame = 1M ; inline comment\n"
		"log_level = debug\n"
		"\n"
		"[checkpoint:llama-3.1_8B]\n"
		"path = /models/llama/model.safetensors\n"
		"allow_users = root, 1234 daemon\n"
		"allow_groups = daemon,0\n"
		"preload = yes\n"
		"[checkpoint:open]\n"
		"path = /models/open\n"
		"preload = off\n";
	struct config *cfg = load_ok(text);

	assert_string_equal(cfg->path, conf_path);
	assert_string_equal(cfg->socket_path, "/run/wd-test/s.sock");
	assert_int_equal(cfg->socket_mode, 0640);
	assert_int_equal(cfg->socket_group, 1);       /* Debian's base-passwd: group daemon = 1 */
	assert_string_equal(cfg->shm_prefix, "wd-test_1.x");
	assert_string_equal(cfg->state_dir, "/var/lib/wd-test");
	assert_true(cfg->budget_bytes == 17179869184ull);
	assert_int_equal(cfg->workers, 3);
	assert_int_equal(cfg->max_clients, 77);
	assert_int_equal(cfg->client_max_pending, 9);
	assert_true(cfg->client_max_queue_bytes == 8388608ull);
	assert_true(cfg->client_max_bytes == 2199023255552ull);
	assert_int_equal(cfg->client_max_weights, 500);
	assert_int_equal(cfg->uid_budget_share, 25);
	assert_int_equal(cfg->n_budget_uids, 2);
	assert_int_equal(cfg->budget_uids[0], 1); /* daemon */
	assert_int_equal(cfg->budget_uids[1], 1234);
	assert_int_equal(cfg->max_frame_bytes, 1048576);
	assert_int_equal(cfg->log_level, LOG_LVL_DEBUG);

	assert_int_equal(cfg->n_sources, 2);
	assert_string_equal(cfg->sources[0].name, "llama-3.1_8B");
	assert_string_equal(cfg->sources[0].path, "/models/llama/model.safetensors");
	assert_int_equal(cfg->sources[0].line, 21);
	assert_false(cfg->sources[0].allow_any);
	assert_true(cfg->sources[0].preload);
	assert_int_equal(cfg->sources[0].n_uids, 3);
	assert_int_equal(cfg->sources[0].allow_uids[0], 0);     /* root */
	assert_int_equal(cfg->sources[0].allow_uids[1], 1234);
	assert_int_equal(cfg->sources[0].allow_uids[2], 1);     /* daemon */
	assert_int_equal(cfg->sources[0].n_gids, 2);
	assert_int_equal(cfg->sources[0].allow_gids[0], 1);
	assert_int_equal(cfg->sources[0].allow_gids[1], 0);

	assert_string_equal(cfg->sources[1].name, "open");
	assert_string_equal(cfg->sources[1].path, "/models/open");
	assert_int_equal(cfg->sources[1].line, 26);
	assert_true(cfg->sources[1].allow_any);
	assert_false(cfg->sources[1].preload);
	assert_int_equal(cfg->sources[1].n_uids, 0);
	assert_null(cfg->sources[1].allow_uids);
	assert_int_equal(cfg->sources[1].n_gids, 0);
	config_free(cfg);
}

static void check_defaults(const struct config *cfg)
{
	assert_string_equal(cfg->socket_path, "/run/weightd/weightd.sock");
	assert_int_equal(cfg->socket_mode, 0660);
	assert_true(cfg->socket_group == (gid_t)-1);
	assert_string_equal(cfg->shm_prefix, "weightd");
	assert_string_equal(cfg->state_dir, "/var/lib/weightd");
	assert_string_equal(cfg->segment_dir, "");
	assert_string_equal(cfg->metrics_listen, ""); /* no HTTP endpoint unless asked */
	assert_false(cfg->metrics_public);
	/* two sockets unless asked for one: root on the engine socket is no administrator */
	assert_string_equal(cfg->admin_socket, "/run/weightd-admin/weightd.sock");
	assert_int_equal(cfg->admin_socket_mode, 0660);
	assert_true(cfg->admin_socket_group == (gid_t)-1);
	assert_false(cfg->single_socket);
	assert_int_equal(cfg->n_admin_uids, 0);
	assert_int_equal(cfg->n_admin_gids, 0);
	assert_true(cfg->admit_retry_max_ms == 60000);
	assert_false(cfg->verify_adopted);
	assert_true(cfg->hold_locks);
	assert_int_equal(cfg->digest, WD_DIGEST_XXH3_128);
	assert_true(cfg->budget_bytes == 0);
	assert_int_equal(cfg->workers, 0);
	assert_int_equal(cfg->max_clients, 1024);
	assert_int_equal(cfg->client_max_pending, 256);
	assert_true(cfg->client_max_queue_bytes == 64ull * 1024 * 1024);
	assert_true(cfg->client_max_bytes == 0);
	assert_int_equal(cfg->client_max_weights, 0);
	assert_int_equal(cfg->max_frame_bytes, 4 * 1024 * 1024);
	assert_true(cfg->max_message_bytes == 256ull * 1024 * 1024);
	assert_int_equal(cfg->max_unit_entries, 1048576);
	assert_true(cfg->segment_max_bytes == 4ull * 1024 * 1024 * 1024);
	assert_int_equal(cfg->max_idle_weights, 1048576);
	assert_int_equal(cfg->max_idle_segments, 1024);
	assert_int_equal(cfg->remote_concurrency, 16);
	assert_int_equal(cfg->remote_chunk_bytes, 16u << 20);
	assert_int_equal(cfg->max_clients_per_uid, 64);
	assert_int_equal(cfg->client_max_queue_fds, 1024);
	assert_int_equal(cfg->uid_max_queue_fds, 4096);
	assert_true(cfg->idle_timeout_ms == 600000);
	assert_true(cfg->frame_timeout_ms == 30000);
	assert_true(cfg->uid_max_partial_bytes == 64ull * 1024 * 1024);
	assert_true(cfg->max_partial_bytes == 256ull * 1024 * 1024);
	assert_true(cfg->max_temp_bytes == 0);
	assert_int_equal(cfg->uid_max_pending, 1024);
	assert_int_equal(cfg->client_max_segments, 4096);
	assert_int_equal(cfg->uid_max_segments, 16384);
	assert_int_equal(cfg->uid_max_weights, 1u << 22);
	assert_int_equal(cfg->uid_budget_share, 50);
	assert_int_equal(cfg->n_budget_uids, 0);
	assert_null(cfg->budget_uids);
	assert_true(cfg->uid_max_unit_memory == 512ull << 20);
	assert_int_equal(cfg->log_level, -1);
	assert_int_equal(cfg->remote_connect_timeout_ms, 10000);
	assert_int_equal(cfg->remote_low_speed_time_ms, 30000);
	assert_int_equal(cfg->remote_retries, 6);
}

/* digest takes either algorithm by name. */
static void test_digest_setting(void **state)
{
	struct config *cfg = load_ok("[daemon]\ndigest = sha256\n");

	assert_int_equal(cfg->digest, WD_DIGEST_SHA256);
	config_free(cfg);
	cfg = load_ok("[daemon]\ndigest = xxh3-128\n");
	assert_int_equal(cfg->digest, WD_DIGEST_XXH3_128);
	config_free(cfg);
}

static void test_defaults(void **state)
{
	struct config *cfg = load_ok("");

	check_defaults(cfg);
	assert_int_equal(cfg->n_sources, 0);
	config_free(cfg);

	cfg = load_ok("[daemon]\n; nothing set\n[checkpoint:a]\npath=/m/a\n");
	check_defaults(cfg);
	assert_int_equal(cfg->n_sources, 1);
	assert_true(cfg->sources[0].allow_any);
	assert_false(cfg->sources[0].preload);
	config_free(cfg);
}

static void test_empty_values(void **state)
{
	struct config *cfg = load_ok("[daemon]\nstate_dir =\nsocket_group = 0\n");

	assert_string_equal(cfg->state_dir, "");
	assert_int_equal(cfg->socket_group, 0);
	config_free(cfg);
	/* an empty socket_group is the default: leave the group as created */
	cfg = load_ok("[daemon]\nsocket_group =\n");
	assert_true(cfg->socket_group == (gid_t)-1);
	config_free(cfg);
}

/*
 * systemd/weightd.conf.example documents every [daemon] key commented out with its default. With
 * those lines uncommented it must load and give exactly the defaults (log_level aside: the example
 * names the level used when none is set).
 */
static void test_example_documents_defaults(void **state)
{
	const char *srcdir = getenv("WD_SOURCE_DIR");
	char path[4096], line[512], *text = NULL;
	size_t len = 0, n_keys = 0;
	FILE *in, *out;
	struct config *cfg;

	assert_non_null(srcdir);
	snprintf(path, sizeof(path), "%s/systemd/weightd.conf.example", srcdir);
	in = fopen(path, "r");
	assert_non_null(in);
	out = open_memstream(&text, &len);
	assert_non_null(out);
	while (fgets(line, sizeof(line), in)) {
		char key[64];

		if (strncmp(line, "#[checkpoint:", 13) == 0)
			break;
		/* "#key = value": a documented default */
		if (sscanf(line, "#%63[a-z_] =", key) == 1 && strstr(line, " =")) {
			fputs(line + 1, out);
			n_keys++;
		} else if (sscanf(line, "%63[a-z_] =", key) == 1 && strstr(line, " =")) {
			/* a packaged setting (segment_dir): its default is the commented line */
			assert_string_equal(key, "segment_dir");
		} else {
			fputs(line, out);
		}
	}
	fclose(in);
	assert_int_equal(fclose(out), 0);
	assert_int_equal(n_keys, 54); /* every [daemon] key of config.h */
	cfg = load_ok(text);
	free(text);
	assert_int_equal(cfg->log_level, LOG_LVL_INFO);
	cfg->log_level = -1;
	check_defaults(cfg);
	assert_int_equal(cfg->n_sources, 0);
	config_free(cfg);
}

/* Durations: seconds by default, or ms / s / m / h; 0 turns a timeout off. */
static void test_durations(void **state)
{
	static const struct {
		const char *text;
		uint64_t ms;
	} cases[] = {
		{ "90", 90000 }, { "250ms", 250 }, { "2s", 2000 }, { "3m", 180000 }, { "1h", 3600000 },
		{ "0", 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[128];
		struct config *cfg;

		snprintf(text, sizeof(text), "[daemon]\nidle_timeout = %s\nframe_timeout = %s\n",
			 cases[i].text, cases[i].text);
		cfg = load_ok(text);
		assert_true(cfg->idle_timeout_ms == cases[i].ms);
		assert_true(cfg->frame_timeout_ms == cases[i].ms);
		config_free(cfg);
	}
}

/* Loopback addresses, IPv4 and IPv6, are what metrics_listen takes. */
static void test_metrics_listen_loopback(void **state)
{
	static const char *const ok[] = { "127.0.0.1:9464", "127.1.2.3:1", "[::1]:9464",
					  "localhost:65535" };
	struct sockaddr_storage ss;
	socklen_t len;
	const char *why;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char text[128];
		struct config *cfg;

		snprintf(text, sizeof(text), "[daemon]\nmetrics_listen = %s\n", ok[i]);
		cfg = load_ok(text);
		assert_string_equal(cfg->metrics_listen, ok[i]);
		config_free(cfg);
		assert_int_equal(config_parse_listen(ok[i], false, &ss, &len, &why), 0);
	}
	assert_int_equal(config_parse_listen("[::1]:9464", false, &ss, &len, &why), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 9464);
	assert_int_equal(config_parse_listen("localhost:80", false, &ss, &len, &why), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr), 0x7f000001);
}

/* Any address with metrics_public = yes, in either order of the two keys; without it, the
 * error names the opt-in. */
static void test_metrics_public(void **state)
{
	static const char *const texts[] = {
		"[daemon]\nmetrics_listen = 0.0.0.0:9464\nmetrics_public = yes\n",
		"[daemon]\nmetrics_public = yes\nmetrics_listen = [::]:9464\n",
		"[daemon]\nmetrics_public = yes\nmetrics_listen = 192.168.1.10:9464\n",
	};
	struct sockaddr_storage ss;
	socklen_t len;
	const char *why = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct config *cfg = load_ok(texts[i]);

		assert_true(cfg->metrics_public);
		config_free(cfg);
	}
	assert_int_equal(config_parse_listen("0.0.0.0:9464", true, &ss, &len, &why), 0);
	assert_int_equal(config_parse_listen("0.0.0.0:9464", false, &ss, &len, &why), -1);
	assert_non_null(strstr(why, "metrics_public = yes"));
}

/* Remote paths and the keys that go with them. */
static void test_remote_sections(void **state)
{
	struct config *cfg;

	(void)state;
	cfg = load_ok("[daemon]\nremote_retries = 3\nremote_connect_timeout = 2s\n"
		      "[checkpoint:s]\npath = s3://bkt/models/llama/\n"
		      "endpoint = http://127.0.0.1:9000\nregion = eu-west-1\npath_style = yes\n"
		      "credentials_file = /etc/weightd/s3.credentials\nprofile = minio\n"
		      "allow_http = yes\nca_file = /etc/ssl/ca.pem\n"
		      "[checkpoint:h]\npath = https://huggingface.co/o/r/resolve/main/m.safetensors"
		      "?X-Amz-Signature=abc\ntoken_file = /etc/weightd/hf.token\n"
		      "[checkpoint:l]\npath = /m/a\n");
	assert_int_equal(cfg->remote_retries, 3);
	assert_int_equal(cfg->remote_connect_timeout_ms, 2000);
	assert_string_equal(cfg->sources[0].path, "s3://bkt/models/llama/");
	assert_string_equal(cfg->sources[0].endpoint, "http://127.0.0.1:9000");
	assert_string_equal(cfg->sources[0].region, "eu-west-1");
	assert_true(cfg->sources[0].path_style);
	assert_true(cfg->sources[0].allow_http);
	assert_string_equal(cfg->sources[0].profile, "minio");
	assert_string_equal(cfg->sources[1].token_file, "/etc/weightd/hf.token");
	assert_null(cfg->sources[1].endpoint);
	assert_false(cfg->sources[2].allow_http);
	config_free(cfg);

	/* a key for another kind of path is an error at its line */
	expect_error("[checkpoint:a]\npath = /m/a\nendpoint = https://x\n", 3,
		     "endpoint applies to s3:// and az:// paths only; this path is a local path");
	expect_error("[checkpoint:a]\npath = s3://b/k\nazure_key_file = /k\n", 3,
		     "azure_key_file applies to az:// paths only; this path is an s3:// URL");
	expect_error("[checkpoint:a]\npath = https://h/m.safetensors\nazure_credentials = sas\n", 3,
		     "azure_credentials applies to az:// paths only");
	expect_error("[checkpoint:a]\npath = az://acct1/models/m\nazure_credentials = iam\n", 3,
		     "azure_credentials is auto, sas, shared-key, workload-identity");
	expect_error("[checkpoint:a]\npath = az://acct1/models/m\ntoken_file = /t\n", 3,
		     "token_file applies to https:// and http:// paths only; this path is an Azure "
		     "blob URL");
	expect_error("[checkpoint:a]\npath = https://h/m.safetensors\nregion = us-east-1\n", 3,
		     "region applies to s3:// paths only");
	expect_error("[checkpoint:a]\npath = s3://b/k\ntoken_file = /t\n", 3,
		     "token_file applies to https:// and http:// paths only");
	expect_error("[checkpoint:a]\npath = /m/a\nallow_http = yes\n", 3,
		     "allow_http applies to remote paths only");
	expect_error("[checkpoint:a]\npath = s3://b/k/\nwatch = yes\n", 3,
		     "watch applies to local paths");
	/* plain http needs allow_http, for the path and for an s3 endpoint */
	expect_error("[checkpoint:a]\npath = http://h/m.safetensors\n", 2, "allow_http = yes");
	expect_error("[checkpoint:a]\npath = s3://b/k\nendpoint = http://h:9000\n", 3,
		     "endpoint is plain http://");
	expect_error("[checkpoint:a]\npath = s3://b/k\ncredentials = imds\nprofile = p\n", 4,
		     "profile names a profile of the shared files");
	expect_error("[checkpoint:a]\npath = s3://b/k\ncredentials = instance\n", 3,
		     "credentials is instance: auto, env");
	expect_error("[checkpoint:a]\npath = s3://b/k\ncredentials = env\ncredentials_file = /c\n",
		     3, "credentials_file is read by credentials = file");
	expect_error("[checkpoint:a]\npath = /m/a\ncredentials = env\n", 3,
		     "credentials applies to s3:// paths only");
	/* malformed locations; a query is never repeated in an error */
	expect_error("[checkpoint:a]\npath = s3:///k\n", 2, "names no bucket");
	expect_error("[checkpoint:a]\npath = s3://b\n", 2, "names a bucket but no object");
	expect_error("[checkpoint:a]\npath = https:///x\n", 2, "names no host");
	expect_error("[checkpoint:a]\npath = s3://b/k\nendpoint = ftp://h\n", 3,
		     "is not an http:// or https:// URL");
	expect_error("[checkpoint:a]\npath = s3://b/k\nendpoint = https://h/path\n", 3,
		     "is not scheme://HOST[:PORT]");
	expect_error("[checkpoint:a]\npath = https://h/a\x01z?sig=SECRETSIG\n", 2,
		     "path: https://h/a\x01z holds a blank");
	expect_error("[daemon]\nremote_retries = 0\n", 2, "remote_retries");
}

static void test_errors(void **state)
{
	static const struct {
		const char *text;
		int line;
		const char *needle;
	} cases[] = {
		/* sections */
		{ "[daemon]\nworkers = 2\n[deamon]\n", 3, "unknown section [deamon]" },
		{ "\n\n[daemon\nworkers = 1\n", 3, "no closing ']'" },
		{ "[daemon] x\n", 1, "unexpected text after the section header" },
		{ "[daemon]\n[checkpoint:a]\npath=/a\n[daemon]\n", 4,
		  "[daemon] is given twice (first at line 1)" },
		{ "[checkpoint:a]\npath=/a\n\n[checkpoint:a]\npath=/b\n", 4,
		  "checkpoint 'a' is defined twice (first at line 1)" },
		{ "[checkpoint:a b]\npath=/a\n", 1, "checkpoint name 'a b' is invalid" },
		{ "[checkpoint:a/b]\npath=/a\n", 1, "checkpoint name 'a/b' is invalid" },
		{ "[checkpoint:]\npath=/a\n", 1, "checkpoint name '' is invalid" },
		{ "; comment\nworkers = 2\n[daemon]\n", 2,
		  "key 'workers' comes before any section" },
		/* keys */
		{ "[daemon]\nworkers = 2\nsockets = /x\n", 3, "unknown key 'sockets' in [daemon]" },
		{ "[checkpoint:a]\npath = /a\nallow_user = root\n", 3,
		  "unknown key 'allow_user' in [checkpoint:a]" },
		{ "[daemon]\nworkers = 2\n\nworkers = 3\n", 4,
		  "key 'workers' is given twice in [daemon] (first at line 2)" },
		{ "[daemon]\n= 3\n", 2, "key name missing" },
		{ "[daemon]\n\ndigest = md5\n", 3,
		  "digest: 'md5' is not a digest algorithm (xxh3-128 or sha256)" },
		{ "[daemon]\nworkers\n", 2, "expected 'key = value'" },
		/* a checkpoint without path is reported where its section starts */
		{ "[daemon]\n[checkpoint:a]\npreload = yes\n[checkpoint:b]\npath=/b\n", 2,
		  "[checkpoint:a] has no path" },
		{ "[checkpoint:a]\npath=/a\n[checkpoint:last]\n", 3,
		  "[checkpoint:last] has no path" },
		{ "[checkpoint:a]\npath = models/a\n", 2,
		  "path: 'models/a' is not an absolute path" },
		/* values */
		{ "[daemon]\nbudget = 16Q\n", 2, "budget: '16Q' is not a size" },
		{ "[daemon]\nbudget = -1\n", 2, "budget: '-1' is not a size" },
		{ "[daemon]\nbudget = 16 G\n", 2, "budget: '16 G' is not a size" },
		{ "[daemon]\nbudget = 16384P\n", 2, "budget: '16384P' does not fit in 64 bits" },
		{ "[daemon]\nbudget = 18446744073709551616\n", 2, "does not fit in 64 bits" },
		{ "[daemon]\nmax_frame = 2G\n", 2, "max_frame: 2G is out of range" },
		{ "[daemon]\nclient_max_queue = 1K\n", 2,
		  "client_max_queue: 1K is too small (at least 4096 bytes)" },
		{ "[daemon]\nworkers = four\n", 2, "workers: 'four' is not a whole number" },
		/* metrics are served on loopback only: the endpoint has no authentication */
		{ "[daemon]\nmetrics_listen = 0.0.0.0:9464\n", 2,
		  "metrics_listen: '0.0.0.0:9464': only a loopback address" },
		{ "[daemon]\n\nmetrics_listen = 192.168.1.10:9464\n", 3,
		  "metrics_listen: '192.168.1.10:9464': only a loopback address" },
		{ "[daemon]\nmetrics_listen = [::]:9464\n", 2, "only a loopback address" },
		{ "[daemon]\nmetrics_listen = example.com:9464\n", 2,
		  "the host is not an IPv4 address, [IPv6] or localhost" },
		{ "[daemon]\nmetrics_listen = 127.0.0.1\n", 2, "not HOST:PORT" },
		{ "[daemon]\nmetrics_listen = 127.0.0.1:0\n", 2, "the port is not a number" },
		{ "[daemon]\nmetrics_listen = 127.0.0.1:65536\n", 2, "the port is not a number" },
		{ "[daemon]\nmetrics_listen = ::1:9464\n", 2, "not HOST:PORT" },
		{ "[daemon]\nidle_timeout = 5 min\n", 2,
		  "idle_timeout: '5 min' is not a duration" },
		{ "[daemon]\nframe_timeout = 31d\n", 2, "frame_timeout: '31d' is not a duration" },
		{ "[daemon]\nframe_timeout = 721h\n", 2,
		  "frame_timeout: 721h is longer than 30 days" },
		{ "[daemon]\nmax_clients_per_uid = 0\n", 2,
		  "max_clients_per_uid: 0 is out of range" },
		{ "[daemon]\nclient_max_segments = 0\n", 2,
		  "client_max_segments: 0 is out of range" },
		{ "[daemon]\nuid_max_segments = 16777217\n", 2,
		  "uid_max_segments: 16777217 is out of range" },
		{ "[daemon]\nuid_max_weights = 0\n", 2, "uid_max_weights: 0 is out of range" },
		{ "[daemon]\nuid_budget_share = 101\n", 2,
		  "uid_budget_share: 101 is out of range" },
		{ "[daemon]\nuid_max_unit_memory = 64K\n", 2,
		  "uid_max_unit_memory: 64K is too small" },
		{ "[daemon]\nuid_max_partial = 1K\n", 2, "uid_max_partial: 1K is too small" },
		{ "[daemon]\nmax_partial = 64M\nuid_max_partial = 48M\n", 3,
		  "uid_max_partial (50331648 bytes) is more than half of max_partial" },
		{ "[daemon]\nworkers = 1025\n", 2, "workers: 1025 is out of range (0 to 1024)" },
		{ "[daemon]\nmax_clients = 0\n", 2, "max_clients: 0 is out of range" },
		{ "[daemon]\nclient_max_weights = 4294967296\n", 2,
		  "client_max_weights: 4294967296 is out of range" },
		{ "[daemon]\nsocket_mode = 0690\n", 2, "socket_mode: '0690' is not an octal mode" },
		{ "[daemon]\nsocket_mode = 1777\n", 2, "socket_mode: '1777' is not an octal mode" },
		{ "[daemon]\nsocket_mode = rw\n", 2, "socket_mode: 'rw' is not an octal mode" },
		{ "[daemon]\nsocket_group = wd-no-such-group-x\n", 2,
		  "socket_group: unknown group 'wd-no-such-group-x'" },
		{ "[daemon]\nsocket_group = 4294967295\n", 2,
		  "socket_group: group id 4294967295 is out of range" },
		{ "[checkpoint:a]\npath=/a\nallow_users = root, wd-no-such-user-x\n", 3,
		  "allow_users: unknown user 'wd-no-such-user-x'" },
		{ "[checkpoint:a]\npath=/a\nallow_groups = wd-no-such-group-x\n", 3,
		  "allow_groups: unknown group 'wd-no-such-group-x'" },
		{ "[checkpoint:a]\npath=/a\nallow_users = , ,\n", 3,
		  "allow_users: the list is empty" },
		{ "[checkpoint:a]\npath=/a\npreload = maybe\n", 3,
		  "preload: 'maybe' is not a boolean" },
		{ "[daemon]\nlog_level = loud\n", 2, "log_level: 'loud' is not a level" },
		{ "[daemon]\nshm_prefix = a/b\n", 2, "shm_prefix: 'a/b' is invalid" },
		{ "[daemon]\nshm_prefix = .hidden\n", 2, "shm_prefix: '.hidden' is invalid" },
		{ "[daemon]\nsocket = run/weightd.sock\n", 2,
		  "socket: 'run/weightd.sock' is not an absolute path" },
		{ "[daemon]\nstate_dir = var/lib\n", 2,
		  "state_dir: 'var/lib' is not an absolute path" },
		/* cross-key: reported at the later of the two keys */
		{ "[daemon]\nclient_max_queue = 64K\nworkers = 1\nmax_frame = 1M\n", 4,
		  "client_max_queue (65536 bytes) is smaller than max_frame (1048576 bytes)" },
		/* the first error wins */
		{ "[daemon]\nworkers = x\nbudget = y\n", 2, "workers:" },
		{ "[daemon]\nbogus line\nworkers = x\n", 2, "expected 'key = value'" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_error(cases[i].text, cases[i].line, cases[i].needle);
}

struct collected {
	char lines[16][700];
	size_t n;
};

static void collect(void *ctx, const char *line)
{
	struct collected *c = ctx;

	if (c->n < 16)
		snprintf(c->lines[c->n], sizeof(c->lines[0]), "%s", line);
	c->n++;
}

/* One read reports every independent error, in line order, each as FILE:LINE; a key under a
 * refused section header, and a missing path in a section whose lines had errors, are not
 * reported again as errors of their own. */
static void test_every_error_is_reported(void **state)
{
	static const struct {
		int line;
		const char *needle;
	} want[] = {
		{ 2, "workers: 'four' is not a whole number" },
		{ 3, "budget: '16Q' is not a size" },
		{ 4, "expected 'key = value'" },
		{ 5, "unknown section [deamon]" },
		{ 8, "path: 'relative/a' is not an absolute path" },
		{ 9, "preload: 'maybe' is not a boolean" },
		{ 10, "checkpoint 'a' is defined twice (first at line 7)" },
		{ 13, "[checkpoint:c] has no path" },
		{ 15, "unknown key 'alow_users' in [checkpoint:d]" },
	};
	struct collected got = { .n = 0 };
	struct config *cfg = NULL;
	weightd_error err;
	char head[sizeof(conf_path) + 24];

	(void)state;
	write_conf("[daemon]\n"
		   "workers = four\n"
		   "budget = 16Q\n"
		   "bogus line\n"
		   "[deamon]\n"
		   "workers = 1\n"
		   "[checkpoint:a]\n"
		   "path = relative/a\n"
		   "preload = maybe\n"
		   "[checkpoint:a]\n"
		   "path = /a\n"
		   "\n"
		   "[checkpoint:c]\n"
		   "[checkpoint:d]\n"
		   "alow_users = root\n"
		   "path = /d\n");
	assert_int_equal(config_load_report(conf_path, &cfg, &err, collect, &got),
			 -WEIGHTD_E_INVALID_ARGUMENT);
	assert_null(cfg);
	for (size_t i = 0; i < got.n && i < 16; i++)
		print_message("%s\n", got.lines[i]);
	assert_int_equal(got.n, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < got.n; i++) {
		snprintf(head, sizeof(head), "%s:%d: ", conf_path, want[i].line);
		assert_int_equal(strncmp(got.lines[i], head, strlen(head)), 0);
		assert_non_null(strstr(got.lines[i], want[i].needle));
	}
	/* the caller's error is the first, and says there are more */
	snprintf(head, sizeof(head), "%s:2: ", conf_path);
	assert_int_equal(strncmp(err.message, head, strlen(head)), 0);
	assert_non_null(
		strstr(err.message, "(and 8 more errors: weightd --check-config lists them)"));
}

static void test_long_lines(void **state)
{
	char sock[200], text[1024];
	const char *long_name;

	/* sun_path holds 107 bytes and a NUL. */
	memset(sock, 'a', sizeof(sock));
	sock[0] = '/';
	sock[108] = '\0';
	snprintf(text, sizeof(text), "[daemon]\nsocket = %s\n", sock);
	expect_error(text, 2, "socket: path is 108 bytes long, at most 107 allowed");
	sock[107] = '\0';
	snprintf(text, sizeof(text), "[daemon]\nsocket = %s\n", sock);
	config_free(load_ok(text));

	/* lines longer than inih's own buffer are read whole */
	memset(sock, 'p', sizeof(sock));
	sock[0] = '/';
	sock[199] = '\0';
	snprintf(text, sizeof(text), "[checkpoint:a]\n\npath = %s\n", sock);
	{
		struct config *cfg = load_ok(text);

		assert_string_equal(cfg->sources[0].path, sock);
		config_free(cfg);
	}

	/* checkpoint names of 128 characters are accepted (longer than inih's section buffer). */
	long_name = "n123456789n123456789n123456789n123456789n123456789n123456789n123456789"
		    "n123456789n123456789n123456789n123456789n123456789n1234567";
	assert_int_equal(strlen(long_name), 128);
	snprintf(text, sizeof(text), "[checkpoint:%s]\npath = /m\nallow_users = root\n", long_name);
	{
		struct config *cfg = load_ok(text);

		assert_string_equal(cfg->sources[0].name, long_name);
		assert_int_equal(cfg->sources[0].n_uids, 1);
		config_free(cfg);
	}
	snprintf(text, sizeof(text), "[checkpoint:%sx]\npath = /m\n", long_name);
	expect_error(text, 1, "is invalid");
}

/*
 * A 4,000-character path (a checkpoint deep in a Hugging Face cache) and lines up to 16,384
 * characters work, by inih's rules for blanks and inline comments; longer lines, over-long
 * paths, and long lines that are not "key = value" are refused by name.
 */
static void test_paths_up_to_path_max(void **state)
{
	static char path[5000], text[40000], want[5000];
	struct config *cfg;
	size_t n;

	(void)state;
	path[0] = '/';
	for (n = 1; n < 4000; n++)
		path[n] = n % 50 == 0 ? '/' : (char)('a' + n % 26);
	path[n] = '\0';
	snprintf(text, sizeof(text), "; a comment\n[checkpoint:hf]\npath = %s\npreload = yes\n", path);
	cfg = load_ok(text);
	assert_int_equal(strlen(cfg->sources[0].path), 4000);
	assert_string_equal(cfg->sources[0].path, path);
	assert_true(cfg->sources[0].preload);
	config_free(cfg);

	/* blanks around the value and an inline comment, as on short lines; ':' separates too */
	snprintf(text, sizeof(text), "[checkpoint:hf]\npath:\t  %s  \t; the %s\n", path, "model");
	cfg = load_ok(text);
	assert_string_equal(cfg->sources[0].path, path);
	config_free(cfg);
	/* a ';' inside the value (not after a blank) is part of it */
	memcpy(want, path, 4001);
	want[100] = ';';
	snprintf(text, sizeof(text), "[checkpoint:hf]\npath = %s\n", want);
	cfg = load_ok(text);
	assert_string_equal(cfg->sources[0].path, want);
	config_free(cfg);
	/* a long comment line is a comment */
	memset(want, 'c', 3000);
	want[0] = '#';
	want[3000] = '\0';
	snprintf(text, sizeof(text), "%s\n[checkpoint:hf]\npath = %s\n", want, path);
	config_free(load_ok(text));

	/* PATH_MAX counts the NUL: 4,095 characters are the most a path may have */
	memset(want, 'q', 4096);
	want[0] = '/';
	want[4096] = '\0';
	snprintf(text, sizeof(text), "[checkpoint:hf]\npath = %s\n", want);
	expect_error(text, 2, "path: path is 4096 bytes long, at most 4095 allowed");
	want[4095] = '\0';
	snprintf(text, sizeof(text), "[checkpoint:hf]\npath = %s\n", want);
	config_free(load_ok(text));

	/* a long line without '=' or ':' */
	memset(want, 'k', 3000);
	want[3000] = '\0';
	snprintf(text, sizeof(text), "[daemon]\n%s\n", want);
	expect_error(text, 2, "expected 'key = value'");
	/* longer than any line may be */
	memset(text, 0, sizeof(text));
	strcpy(text, "[checkpoint:hf]\npath = /");
	memset(text + strlen(text), 'z', 16400);
	strcat(text, "\n");
	expect_error(text, 2, "at most 16384 allowed");
}

static void test_nul_byte(void **state)
{
	static const char text[] = "[daemon]\nworkers = 1\nbudget = 1\0G\n";

	expect_error_at(text, sizeof(text) - 1, 3, "NUL byte");
}

static void test_missing_file(void **state)
{
	weightd_error err;
	struct config *cfg = NULL;
	char path[sizeof(tmpdir) + 32];

	wd_error_clear(&err);
	snprintf(path, sizeof(path), "%s/absent.conf", tmpdir);
	assert_int_equal(config_load(path, &cfg, &err), -WEIGHTD_E_IO);
	assert_null(cfg);
	assert_non_null(strstr(err.message, path));
	assert_non_null(strstr(err.message, "No such file"));

	/* a directory is not a config file */
	assert_int_equal(config_load(tmpdir, &cfg, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	assert_null(cfg);
	config_free(NULL);
}

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		bool ok;
		uint64_t v;
	} cases[] = {
		{ "0", true, 0 },
		{ "123", true, 123 },
		{ "64K", true, 65536ull },
		{ "64k", true, 65536ull },
		{ "512M", true, 536870912ull },
		{ "16G", true, 17179869184ull },
		{ "1T", true, 1099511627776ull },
		{ "2P", true, 2251799813685248ull },
		{ "0G", true, 0 },
		{ "18446744073709551615", true, UINT64_MAX },
		{ "18446744073709551616", false, 0 },
		{ "99999999999999999999999", false, 0 },
		{ "17179869183G", true, 18446744072635809792ull },   /* (2^34 - 1) * 2^30 */
		{ "17179869184G", false, 0 },                        /* 2^34 * 2^30 = 2^64 */
		{ "16383P", true, 18445618173802708992ull },         /* (2^14 - 1) * 2^50 */
		{ "16384P", false, 0 },
		{ "", false, 0 },
		{ "G", false, 0 },
		{ "1.5G", false, 0 },
		{ "16GB", false, 0 },
		{ "16X", false, 0 },
		{ " 16", false, 0 },
		{ "16 ", false, 0 },
		{ "-16", false, 0 },
		{ "+16", false, 0 },
		{ "0x10", false, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 4242;
		bool ok = config_parse_size(cases[i].s, &v);

		if (ok != cases[i].ok)
			print_message("'%s'\n", cases[i].s);
		assert_int_equal(ok, cases[i].ok);
		/* untouched on failure */
		assert_true(v == (cases[i].ok ? cases[i].v : 4242));
	}
	assert_false(config_parse_size(NULL, &(uint64_t){ 0 }));
}

TEST_MAIN(group_setup, group_teardown, cmocka_unit_test(test_full_file),
	  cmocka_unit_test(test_defaults), cmocka_unit_test(test_digest_setting),
	  cmocka_unit_test(test_empty_values), cmocka_unit_test(test_example_documents_defaults),
	  cmocka_unit_test(test_durations), cmocka_unit_test(test_metrics_listen_loopback),
	  cmocka_unit_test(test_metrics_public),
	  cmocka_unit_test(test_errors), cmocka_unit_test(test_every_error_is_reported),
	  cmocka_unit_test(test_long_lines), cmocka_unit_test(test_paths_up_to_path_max),
	  cmocka_unit_test(test_nul_byte), cmocka_unit_test(test_missing_file),
	  cmocka_unit_test(test_parse_size), cmocka_unit_test(test_remote_sections))
