/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_remote_azure.c - checkpoints in Azure Blob Storage through a real weightd, against Azurite
 * (tests/remote/azure_servers.py: HTTPS, its OAuth check on) on loopback: a blob read with
 * Shared Key, with a SAS, and with Entra bearer tokens from workload identity (a federated token
 * file exchanged at a loopback token endpoint, rotated and refreshed), a client secret and a
 * managed identity; a key file rotated under a running daemon; a sharded directory; a blob
 * replaced mid-fill is source-changed with no mixed bytes; a restart after kill -9 re-adopts with
 * no payload request; a wrong key says what Azure said; no key or token ever shown.
 */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>

#include "fixture.h"
#include "servers.h"

#define N_T	4
#define T_BYTES (1u << 20)
#define SEED_M	11 /* m.safetensors */
#define SEED_SW 31 /* swap.safetensors */
#define SEED_SH 51 /* sharded/ */

static char root[512], key_file[600], bad_key_file[600];
static struct wd_servers srv;
static bool have;
static char why[600];
static const char *const names[N_T] = { "t0", "t1", "t2", "t3" };

static int setup(void **state)
{
	char p[700];

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	snprintf(root, sizeof(root), "/tmp/wd-remote-az-XXXXXX");
	if (!mkdtemp(root) || chmod(root, 0755) < 0)
		return -1;
	/* Azurite takes the container's blobs from the directory when it starts */
	snprintf(p, sizeof(p), "%s/m.safetensors", root);
	it_fixture("safetensors %s --seed %u --tensor t0:U8:%u --tensor t1:U8:%u --tensor t2:U8:%u "
		   "--tensor t3:U8:%u",
		   p, SEED_M, T_BYTES, T_BYTES, T_BYTES, T_BYTES);
	snprintf(p, sizeof(p), "%s/swap.safetensors", root);
	it_fixture("safetensors %s --seed %u --tensor t0:U8:%u --tensor t1:U8:%u --tensor t2:U8:%u "
		   "--tensor t3:U8:%u",
		   p, SEED_SW, T_BYTES, T_BYTES, T_BYTES, T_BYTES);
	snprintf(p, sizeof(p), "%s/whole.safetensors", root);
	it_fixture("safetensors %s --seed %u --tensor t0:U8:%u --tensor t1:U8:%u --tensor t2:U8:%u "
		   "--tensor t3:U8:%u",
		   p, SEED_SH, T_BYTES, T_BYTES, T_BYTES, T_BYTES);
	it_fixture("sharded %s/sharded 2 --from %s", root, p);
	unlink(p);
	have = wd_servers_start_azure(root, &srv, why, sizeof(why)) == 0;
	if (have) {
		FILE *f;
		snprintf(key_file, sizeof(key_file), "%s/azure.key", root);
		snprintf(bad_key_file, sizeof(bad_key_file), "%s/bad.key", root);
		f = fopen(key_file, "w");
		fprintf(f, "%s\n", srv.az_key);
		fclose(f);
		f = fopen(bad_key_file, "w");
		/* a key of the right form that is not the account's */
		fprintf(f, "%s\n",
			"QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU"
			"FBQUFBQUFBQUFBQUFBQUFBQUFBQQ==");
		fclose(f);
		chmod(key_file, 0600);
		chmod(bad_key_file, 0600);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	wd_servers_end(&srv, root);
	return 0;
}

#define NEED_AZURITE()                                \
	do {                                          \
		if (!have) {                          \
			printf("skipped: %s\n", why); \
			skip();                       \
		}                                     \
	} while (0)

static void az_ctl(int port, const char *query)
{
	char path[512];

	snprintf(path, sizeof(path), "/__ctl?%s", query);
	if (port == srv.az_token)
		free(wd_servers_get_tls(&srv, port, path));
	else
		free(wd_servers_get(port, path));
}

/* Payload requests the Azurite proxy saw for `path`: ranges of 64 KiB or more that do not start
 * at 0 (admission reads the object's first bytes, its 8-byte length and header among them). */
static int payload_requests(const char *path)
{
	char *out = wd_servers_get(srv.az, "/__stats");
	json_t *j = out ? json_loads(out, 0, NULL) : NULL, *r;
	size_t i;
	int n = 0;

	assert_non_null(j);
	json_array_foreach(json_object_get(j, "ranges"), i, r) {
		unsigned long long a = 0, b = 0;
		const char *p = json_string_value(json_array_get(r, 0));
		const char *range = json_string_value(json_array_get(r, 1));
		if (p && strstr(p, path) && range &&
		    sscanf(range, "bytes=%llu-%llu", &a, &b) == 2 && a > 0 && b + 1 - a >= 65536)
			n++;
	}
	json_decref(j);
	free(out);
	printf("payload requests for %s: %d\n", path, n);
	return n;
}

static int token_stat(const char *what)
{
	char *out = wd_servers_get_tls(&srv, srv.az_token, "/__stats");
	json_t *j = out ? json_loads(out, 0, NULL) : NULL;
	int n = j ? (int)json_integer_value(json_object_get(j, what)) : -1;

	json_decref(j);
	free(out);
	return n;
}

/* Wait for `name` to leave admission; its state and error. */
static void admitted(const char *name, char *state, size_t scap, char *error, size_t ecap)
{
	for (int64_t end = it_now_ms() + 30000;; usleep(50 * 1000)) {
		weightd_client *c = it_connect(&H);
		weightd_source_list *l = NULL;
		weightd_error err;
		bool done = false;

		assert_int_equal(weightd_list(c, &l, &err), 0);
		for (size_t i = 0; i < l->count; i++) {
			if (strcmp(l->sources[i].name, name) != 0)
				continue;
			snprintf(state, scap, "%s", l->sources[i].state);
			snprintf(error, ecap, "%s", l->sources[i].error ? l->sources[i].error : "");
			done = strcmp(state, "ready") == 0 || strcmp(state, "failed") == 0;
		}
		weightd_source_list_free(l);
		weightd_close(c);
		if (done)
			return;
		assert_true(it_now_ms() < end);
	}
}

static void ready(const char *name)
{
	char state[32], error[2048];

	admitted(name, state, sizeof(state), error, sizeof(error));
	if (strcmp(state, "ready") != 0) {
		fprintf(stderr, "%s: %s: %s\n", name, state, error);
		harness_dump_log(&H);
	}
	assert_string_equal(state, "ready");
}

/* A daemon with checkpoint "az" at `path` (a blob of the container) and `keys`. */
static void start_with(const char *path, const char *keys)
{
	char sec[4096];

	snprintf(sec, sizeof(sec), "[checkpoint:az]\npath = az://%s/%s/%s\n%s\n", srv.az_account,
		 srv.az_container, path, keys);
	assert_int_equal(harness_init(&H), 0);
	it_start(&H, "remote_chunk = 256K\nremote_concurrency = 4\n", sec);
	ready("az");
}

/* Every tensor of "az" has the bytes of seed `seed`. */
static void assert_tensors(unsigned seed)
{
	weightd_client *c = it_connect(&H);

	for (unsigned k = 0; k < N_T; k++) {
		weightd_weight *w = it_get_ok(c, "az", names[k]);
		assert_int_equal(it_pattern_mismatch(it_map(w), T_BYTES, seed + k), -1);
		weightd_release(w);
	}
	weightd_close(c);
}

/* The proxy in front of Azurite, plain HTTP. */
static void keys_proxy(char *buf, size_t cap, const char *more)
{
	snprintf(buf, cap, "endpoint = http://127.0.0.1:%d\nallow_http = yes\n%s", srv.az, more);
}

/* Azurite itself, HTTPS with its OAuth check. */
static void keys_direct(char *buf, size_t cap, const char *more)
{
	snprintf(buf, cap, "endpoint = https://127.0.0.1:%d\nca_file = %s\n%s", srv.az_direct,
		 srv.ca, more);
}

static void unset_azure_env(void)
{
	static const char *const vars[] = { "AZURE_STORAGE_KEY",
					    "AZURE_FEDERATED_TOKEN_FILE",
					    "AZURE_CLIENT_ID",
					    "AZURE_TENANT_ID",
					    "AZURE_AUTHORITY_HOST",
					    "AZURE_CLIENT_SECRET",
					    "AZURE_POD_IDENTITY_AUTHORITY_HOST" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

static int after(void **state)
{
	(void)state;
	harness_cleanup(&H);
	unset_azure_env();
	return 0;
}

/* --- the tests ----------------------------------------------------------------------------- */

static void shared_key_reads_a_blob(void **state)
{
	char keys[1024], more[800];

	(void)state;
	NEED_AZURITE();
	snprintf(more, sizeof(more), "azure_credentials = shared-key\nazure_key_file = %s\n",
		 key_file);
	keys_proxy(keys, sizeof(keys), more);
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
	/* the payload in ranges of remote_chunk, in parallel */
	assert_int_equal(payload_requests("/m.safetensors"), (int)(N_T * T_BYTES / (256u << 10)));
}

/* The key from the environment, over HTTPS to Azurite itself. */
static void shared_key_from_the_environment(void **state)
{
	char keys[1024];

	(void)state;
	NEED_AZURITE();
	setenv("AZURE_STORAGE_KEY", srv.az_key, 1);
	keys_direct(keys, sizeof(keys), "");
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
}

static void sas_reads_a_blob(void **state)
{
	char keys[1024], path[1024];

	(void)state;
	NEED_AZURITE();
	keys_proxy(keys, sizeof(keys), "azure_credentials = sas\n");
	snprintf(path, sizeof(path), "m.safetensors?%s", srv.az_sas);
	start_with(path, keys);
	assert_tensors(SEED_M);
}

static void sharded_directory(void **state)
{
	char keys[1024], more[800];

	(void)state;
	NEED_AZURITE();
	snprintf(more, sizeof(more), "azure_key_file = %s\n", key_file);
	keys_proxy(keys, sizeof(keys), more);
	start_with("sharded/", keys);
	assert_tensors(SEED_SH);
}

static void set_workload_env(void)
{
	char url[128];

	snprintf(url, sizeof(url), "https://127.0.0.1:%d", srv.az_token);
	setenv("AZURE_FEDERATED_TOKEN_FILE", srv.az_fed_file, 1);
	setenv("AZURE_CLIENT_ID", srv.az_client, 1);
	setenv("AZURE_TENANT_ID", srv.az_tenant, 1);
	setenv("AZURE_AUTHORITY_HOST", url, 1);
}

/*
 * Workload identity against Azurite's OAuth check: the federated token exchanged for a bearer
 * token. Tokens live 6 s and the federated token is rotated (the endpoint then refuses the old
 * one): later fills take a fresh token made from the new file, with no new admission.
 */
static void workload_identity_refreshes_and_rotates(void **state)
{
	char keys[1024];
	int issued;

	(void)state;
	NEED_AZURITE();
	az_ctl(srv.az_token, "reset=1&lifetime=6");
	set_workload_env();
	keys_direct(keys, sizeof(keys), "azure_credentials = workload-identity\n");
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
	issued = token_stat("issued");
	assert_true(issued >= 1);
	az_ctl(srv.az_token, "rotate=1");
	sleep(4); /* past half the token's life: the next request refreshes it */
	{
		weightd_client *c = it_connect(&H);
		weightd_error err;
		uint64_t w, b;
		/* evicted, so the weights are read again, with the new token */
		assert_int_equal(weightd_evict(c, &w, &b, &err), 0);
		weightd_close(c);
	}
	assert_tensors(SEED_M);
	assert_true(token_stat("issued") > issued);
	assert_int_equal(token_stat("refused"), 0);
	az_ctl(srv.az_token, "lifetime=3600");
}

/* A token the store refuses as expired (the endpoint said it would live an hour): the request is
 * sent once more with a new token and the checkpoint is served. */
static void refused_token_retried_once_with_a_new_one(void **state)
{
	char keys[1024];
	int issued;

	(void)state;
	NEED_AZURITE();
	set_workload_env();
	issued = token_stat("issued");
	az_ctl(srv.az_token, "stale=1");
	keys_direct(keys, sizeof(keys), "azure_credentials = workload-identity\n");
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
	assert_int_equal(token_stat("issued"), issued + 2);
}

/* A wrong client id: the error names the source and what the endpoint said. */
static void workload_identity_refused_says_why(void **state)
{
	char keys[1024], st[32], error[2048];

	(void)state;
	NEED_AZURITE();
	set_workload_env();
	setenv("AZURE_CLIENT_ID", "00000000-0000-0000-0000-000000000000", 1);
	keys_direct(keys, sizeof(keys), "azure_credentials = workload-identity\n");
	assert_int_equal(harness_init(&H), 0);
	{
		char sec[4096];
		snprintf(sec, sizeof(sec), "[checkpoint:az]\npath = az://%s/%s/m.safetensors\n%s\n",
			 srv.az_account, srv.az_container, keys);
		it_start(&H, "", sec);
	}
	admitted("az", st, sizeof(st), error, sizeof(error));
	printf("%s\n", error);
	assert_string_equal(st, "failed");
	assert_non_null(strstr(error, "workload identity"));
	assert_non_null(strstr(error, "AADSTS700016"));
	assert_null(strstr(error, srv.az_fed_file[0] ? "eyJ" : "?"));
}

static void client_secret_reads_a_blob(void **state)
{
	char keys[1024], url[128];

	(void)state;
	NEED_AZURITE();
	snprintf(url, sizeof(url), "https://127.0.0.1:%d", srv.az_token);
	setenv("AZURE_CLIENT_ID", srv.az_client, 1);
	setenv("AZURE_TENANT_ID", srv.az_tenant, 1);
	setenv("AZURE_AUTHORITY_HOST", url, 1);
	setenv("AZURE_CLIENT_SECRET", srv.az_secret, 1);
	keys_direct(keys, sizeof(keys), "azure_credentials = client-secret\n");
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
}

static void managed_identity_reads_a_blob(void **state)
{
	char keys[1024], url[128];
	int imds;

	(void)state;
	NEED_AZURITE();
	imds = token_stat("imds");
	snprintf(url, sizeof(url), "https://127.0.0.1:%d", srv.az_token);
	setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", url, 1);
	keys_direct(keys, sizeof(keys), "azure_credentials = managed-identity\n");
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
	assert_true(token_stat("imds") > imds);
}

/* A key that is not the account's: admission fails with Azure's own code. */
static void wrong_key_says_what_azure_said(void **state)
{
	char keys[1024], more[800], sec[4096], st[32], error[2048];

	(void)state;
	NEED_AZURITE();
	snprintf(more, sizeof(more), "azure_key_file = %s\n", bad_key_file);
	keys_proxy(keys, sizeof(keys), more);
	snprintf(sec, sizeof(sec), "[checkpoint:az]\npath = az://%s/%s/m.safetensors\n%s\n",
		 srv.az_account, srv.az_container, keys);
	assert_int_equal(harness_init(&H), 0);
	it_start(&H, "", sec);
	admitted("az", st, sizeof(st), error, sizeof(error));
	printf("%s\n", error);
	assert_string_equal(st, "failed");
	/* Azure says 403 AuthenticationFailed; Azurite 400 InvalidAuthenticationInfo */
	assert_true(strstr(error, "AuthenticationFailed") ||
		    strstr(error, "InvalidAuthenticationInfo"));
	assert_null(strstr(error, srv.az_key));
}

/* The blob replaced after a few ranges: source-changed, and nothing served mixes the two. */
static void blob_replaced_mid_fill(void **state)
{
	char keys[1024], more[800], q[256];
	weightd_client *c;
	bool failed = false;

	(void)state;
	NEED_AZURITE();
	snprintf(more, sizeof(more), "azure_key_file = %s\n", key_file);
	keys_proxy(keys, sizeof(keys), more);
	start_with("swap.safetensors", keys);
	snprintf(q, sizeof(q), "fault=swap&path=/%s/%s/swap.safetensors&after=3", srv.az_account,
		 srv.az_container);
	az_ctl(srv.az, q);
	c = it_connect(&H);
	for (unsigned k = 0; k < N_T; k++) {
		weightd_weight *w = NULL;
		weightd_error err;
		int g = it_get(c, "az", names[k], &w, &err);

		if (g == 0) {
			assert_int_equal(it_pattern_mismatch(it_map(w), T_BYTES, SEED_SW + k), -1);
			weightd_release(w);
		} else {
			printf("%s: %s\n", names[k], err.message);
			assert_int_equal(g, -WEIGHTD_E_SOURCE_CHANGED);
			failed = true;
		}
	}
	weightd_close(c);
	assert_true(failed);
	az_ctl(srv.az, "reset=1");
}

/* kill -9 after a fill, start again: re-adopted, no payload request to Azure. */
static void restart_readopts_without_payload_requests(void **state)
{
	char keys[1024], more[800];
	weightd_status *st;

	(void)state;
	NEED_AZURITE();
	snprintf(more, sizeof(more), "azure_key_file = %s\n", key_file);
	keys_proxy(keys, sizeof(keys), more);
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
	harness_kill(&H);
	az_ctl(srv.az, "reset=1");
	assert_int_equal(harness_start(&H), 0);
	ready("az");
	assert_tensors(SEED_M);
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, N_T);
	assert_int_equal(st->bytes_read, 0);
	weightd_status_free(st);
	assert_int_equal(payload_requests("/m.safetensors"), 0);
}

/* The secrets in play: the account key, the SAS signature, the client secret, the federated
 * token and the access tokens (the JWT header every issued token starts with). */
static void assert_no_secret(const char *what, const char *text)
{
	char fed[4096] = "", sig[256] = "";
	const char *s = strstr(srv.az_sas, "sig=");
	FILE *f = fopen(srv.az_fed_file, "r");
	const char *secrets[] = { srv.az_key, sig, srv.az_secret, fed,
				  "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9" };

	if (f) {
		if (!fgets(fed, sizeof(fed), f))
			fed[0] = '\0';
		fed[strcspn(fed, "\n")] = '\0';
		fclose(f);
	}
	snprintf(sig, sizeof(sig), "%.*s", s ? (int)strcspn(s + 4, "&") : 0, s ? s + 4 : "");
	for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++)
		if (secrets[i][0] && strstr(text, secrets[i]))
			fail_msg("%s shows a secret (%.12s...)", what, secrets[i]);
}

static void assert_file_has_no_secret(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 1 << 22);
	size_t n;

	assert_non_null(f);
	assert_non_null(buf);
	n = fread(buf, 1, (1 << 22) - 1, f);
	fclose(f);
	for (size_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	assert_no_secret(path, buf);
	free(buf);
}

static void copy_file(const char *from, const char *to)
{
	char cmd[1400];

	/* a new file renamed over the old, as a rotated Kubernetes Secret is */
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s.new' && chmod 600 '%s.new' && mv '%s.new' '%s'",
		 from, to, to, to, to);
	assert_int_equal(system(cmd), 0);
}

static void evict(void)
{
	weightd_client *c = it_connect(&H);
	weightd_error err;
	uint64_t w, b;

	assert_int_equal(weightd_evict(c, &w, &b, &err), 0);
	weightd_close(c);
}

/* The key file replaced while the checkpoint is served: the next fill signs with the new key,
 * with no reload (a wrong key fails it; the right one put back serves it again). */
static void rotated_key_file_is_read_again(void **state)
{
	char keys[1024], more[800], kf[700];
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	uint64_t gen;
	weightd_status *st;

	(void)state;
	NEED_AZURITE();
	snprintf(kf, sizeof(kf), "%s/rotating.key", root);
	copy_file(key_file, kf);
	snprintf(more, sizeof(more), "azure_key_file = %s\n", kf);
	keys_proxy(keys, sizeof(keys), more);
	start_with("m.safetensors", keys);
	assert_tensors(SEED_M);
	st = it_status_of(&H);
	gen = st->sources[0].generation;
	weightd_status_free(st);
	evict();
	copy_file(bad_key_file, kf);
	c = it_connect(&H);
	assert_true(it_get(c, "az", "t0", &w, &err) < 0);
	printf("with the wrong key: %s\n", err.message);
	assert_true(strstr(err.message, "AuthenticationFailed") ||
		    strstr(err.message, "InvalidAuthenticationInfo"));
	weightd_close(c);
	copy_file(key_file, kf);
	assert_tensors(SEED_M);
	st = it_status_of(&H);
	assert_int_equal(st->sources[0].generation, gen);
	weightd_status_free(st);
}

/* Shared Key, SAS, workload identity and a wrong key in one daemon: no key, signature, secret
 * or token in its log, its answers to weightctl, its errors or its state records. */
static void secrets_never_shown(void **state)
{
	static const char *const cmds[][4] = {
		{ "list", "--json", NULL },	      { "status", "--json", NULL },
		{ "describe", "sk", "--json", NULL }, { "describe", "sas", "--json", NULL },
		{ "describe", "wi", "--json", NULL }, { "describe", "bad", NULL },
	};
	char sec[8192], out[1 << 16], st[32], error[2048], statedir[700];
	weightd_client *c;
	weightd_weight *w;
	DIR *d;
	struct dirent *de;

	(void)state;
	NEED_AZURITE();
	set_workload_env();
	snprintf(
		sec, sizeof(sec),
		"[checkpoint:sk]\npath = az://%s/%s/m.safetensors\nendpoint = http://127.0.0.1:%d\n"
		"allow_http = yes\nazure_key_file = %s\n\n"
		"[checkpoint:sas]\npath = az://%s/%s/m.safetensors?%s\n"
		"endpoint = http://127.0.0.1:%d\nallow_http = yes\n\n"
		"[checkpoint:wi]\npath = az://%s/%s/m.safetensors\n"
		"endpoint = https://127.0.0.1:%d\nca_file = %s\n"
		"azure_credentials = workload-identity\n\n"
		"[checkpoint:bad]\npath = az://%s/%s/m.safetensors\nendpoint = http://127.0.0.1:%d\n"
		"allow_http = yes\nazure_key_file = %s\n",
		srv.az_account, srv.az_container, srv.az, key_file, srv.az_account,
		srv.az_container, srv.az_sas, srv.az, srv.az_account, srv.az_container,
		srv.az_direct, srv.ca, srv.az_account, srv.az_container, srv.az, bad_key_file);
	assert_int_equal(harness_init(&H), 0);
	it_start(&H, "", sec);
	ready("sk");
	ready("sas");
	ready("wi");
	admitted("bad", st, sizeof(st), error, sizeof(error));
	assert_string_equal(st, "failed");
	assert_no_secret("an error", error);
	c = it_connect(&H);
	w = it_get_ok(c, "sk", "t0");
	weightd_release(w);
	w = it_get_ok(c, "sas", "t1");
	weightd_release(w);
	w = it_get_ok(c, "wi", "t2");
	weightd_release(w);
	weightd_close(c);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		/* a row's unused words are NULL: the first ends the arguments */
		it_ctl((uid_t)-1, out, sizeof(out), "--socket", H.sock, cmds[i][0], cmds[i][1],
		       cmds[i][2], cmds[i][3], (char *)NULL);
		assert_no_secret(cmds[i][0], out);
	}
	assert_file_has_no_secret(H.log);
	snprintf(statedir, sizeof(statedir), "%s/state/%s", H.dir, H.prefix);
	d = opendir(statedir);
	while (d && (de = readdir(d))) {
		char p[1024];

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", statedir, de->d_name);
		assert_file_has_no_secret(p);
	}
	if (d)
		closedir(d);
}

TEST_MAIN(setup, teardown, cmocka_unit_test_teardown(shared_key_reads_a_blob, after),
	  cmocka_unit_test_teardown(shared_key_from_the_environment, after),
	  cmocka_unit_test_teardown(sas_reads_a_blob, after),
	  cmocka_unit_test_teardown(sharded_directory, after),
	  cmocka_unit_test_teardown(workload_identity_refreshes_and_rotates, after),
	  cmocka_unit_test_teardown(workload_identity_refused_says_why, after),
	  cmocka_unit_test_teardown(refused_token_retried_once_with_a_new_one, after),
	  cmocka_unit_test_teardown(client_secret_reads_a_blob, after),
	  cmocka_unit_test_teardown(managed_identity_reads_a_blob, after),
	  cmocka_unit_test_teardown(wrong_key_says_what_azure_said, after),
	  cmocka_unit_test_teardown(blob_replaced_mid_fill, after),
	  cmocka_unit_test_teardown(restart_readopts_without_payload_requests, after),
	  cmocka_unit_test_teardown(rotated_key_file_is_read_again, after),
	  cmocka_unit_test_teardown(secrets_never_shown, after))
