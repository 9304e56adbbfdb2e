/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for src/azure.c and src/azure_parse.c: az:// and Azure https URLs into request URLs, the
 * credential source chosen, a Shared Key signature against one computed by Python's hmac, the
 * headers of each source, refusals that name the source, and the parsers of Azure's answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests.h"

#include "azure.h"

/* the emulator's published account key */
#define EMU_KEY \
	"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

static void url_of(const char *url, const char *endpoint, const char *base, const char *account,
		   const char *query)
{
	char *b = NULL, *a = NULL, *q = NULL;
	weightd_error err;

	assert_int_equal(wd_azure_url(url, endpoint, &b, &a, &q, &err), 0);
	assert_string_equal(b, base);
	assert_string_equal(a, account);
	assert_string_equal(q, query);
	free(b);
	free(a);
	free(q);
}

static void test_urls(void **state)
{
	(void)state;
	url_of("az://acct1/models/llama/model.safetensors", NULL,
	       "https://acct1.blob.core.windows.net/models/llama/model.safetensors", "acct1", "");
	url_of("az://acct1/models/dir/", NULL, "https://acct1.blob.core.windows.net/models/dir/",
	       "acct1", "");
	/* names are percent-encoded; the query (a SAS) is kept apart */
	url_of("az://acct1/models/a b+c?sv=1&sig=x", NULL,
	       "https://acct1.blob.core.windows.net/models/a%20b%2Bc", "acct1", "?sv=1&sig=x");
	/* an emulator at an address: the account leads the path */
	url_of("az://devstoreaccount1/models/m.safetensors", "http://127.0.0.1:10000/",
	       "http://127.0.0.1:10000/devstoreaccount1/models/m.safetensors", "devstoreaccount1",
	       "");
	/* a private endpoint by name: used as the account's host */
	url_of("az://acct1/models/m", "https://acct1.privatelink.blob.core.windows.net",
	       "https://acct1.privatelink.blob.core.windows.net/models/m", "acct1", "");
	url_of("https://acct1.blob.core.windows.net/models/m.safetensors?sv=2", NULL,
	       "https://acct1.blob.core.windows.net/models/m.safetensors", "acct1", "?sv=2");
	assert_true(wd_azure_is_url("https://acct1.blob.core.windows.net/c/b"));
	assert_false(wd_azure_is_url("https://example.com/acct1.blob.core.windows.net/c/b"));
	assert_false(wd_azure_is_url("s3://b/k"));
}

static void test_bad_urls(void **state)
{
	const char *bad[] = { "az://AC/models/x",    "az://acct1/Models/x",    "az://acct1/models",
			      "az://acct1/mo/x",     "az://acct1/models/a//b", "az:///models/x",
			      "az://acct1/-models/x" };
	weightd_error err;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *b = NULL, *a = NULL, *q = NULL;
		if (wd_azure_url(bad[i], NULL, &b, &a, &q, &err) != -WEIGHTD_E_INVALID_ARGUMENT)
			fail_msg("%s was taken", bad[i]);
	}
}

/* The string to sign built by hand and signed by Python's hmac and base64. */
static void test_shared_key_signature(void **state)
{
	uint8_t key[64];
	char sig[128];
	FILE *p;
	size_t n;

	(void)state;
	p = popen("echo '" EMU_KEY "' | base64 -d", "r");
	assert_non_null(p);
	n = fread(key, 1, sizeof(key), p);
	pclose(p);
	assert_int_equal(n, 64);
	assert_int_equal(wd_azure_shared_key_sign("devstoreaccount1", key, n,
						  "/devstoreaccount1/models/m.safetensors",
						  "bytes=0-1023", "\"0x8DB1\"",
						  "Mon, 07 Dec 2026 08:00:00 GMT", "2021-08-06",
						  sig, sizeof(sig)),
			 0);
	assert_string_equal(sig, "vxdOm7NvnJa1A7riCDiLfnPKYVPlBEJduHJoGBdInaQ=");
}

static void clear_env(void)
{
	unsetenv("AZURE_STORAGE_KEY");
	unsetenv("AZURE_FEDERATED_TOKEN_FILE");
	unsetenv("AZURE_CLIENT_SECRET");
	unsetenv("AZURE_CLIENT_ID");
	unsetenv("AZURE_TENANT_ID");
}

static void test_auto_and_headers(void **state)
{
	struct wd_azure_opts o = { 0 };
	struct wd_azure *a = NULL;
	char out[4096];
	weightd_error err;

	(void)state;
	clear_env();
	o.has_sas = true;
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), 0);
	assert_int_equal(wd_azure_source(a), WD_AZURE_SAS);
	assert_int_equal(wd_azure_headers(a, "https://acct1.blob.core.windows.net/c/b?sv=1",
					  "bytes=0-0", "", out, sizeof(out), &err),
			 0);
	assert_non_null(strstr(out, "x-ms-version: " WD_AZURE_VERSION "\n"));
	assert_null(strstr(out, "Authorization"));
	wd_azure_free(a);

	o.has_sas = false;
	setenv("AZURE_STORAGE_KEY", EMU_KEY, 1);
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), 0);
	assert_int_equal(wd_azure_source(a), WD_AZURE_SHARED_KEY);
	assert_int_equal(wd_azure_headers(a, "https://acct1.blob.core.windows.net/c/b", "bytes=0-0",
					  "", out, sizeof(out), &err),
			 0);
	assert_non_null(strstr(out, "Authorization: SharedKey acct1:"));
	assert_null(strstr(out, EMU_KEY));
	wd_azure_free(a);

	clear_env();
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), 0);
	assert_int_equal(wd_azure_source(a), WD_AZURE_MANAGED);
	wd_azure_free(a);
	/* what --check-config reports: the query of the URL itself is the SAS */
	{
		enum wd_azure_source s = WD_AZURE_AUTO;
		assert_int_equal(
			wd_azure_check("az://acct1/models/m?sv=1&sig=x", NULL, &o, &s, &err), 0);
		assert_int_equal(s, WD_AZURE_SAS);
		o.source = WD_AZURE_CLIENT_SECRET;
		assert_int_equal(wd_azure_check("az://acct1/models/m", NULL, &o, &s, &err),
				 -WEIGHTD_E_NOT_FOUND);
		assert_non_null(strstr(err.message, "client secret"));
	}
}

static void test_refusals_name_the_source(void **state)
{
	struct wd_azure_opts o = { .source = WD_AZURE_WORKLOAD };
	struct wd_azure *a = NULL;
	weightd_error err;
	char key[] = "/tmp/wd-azure-key-XXXXXX";
	int fd;

	(void)state;
	clear_env();
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "workload identity"));
	assert_non_null(strstr(err.message, "AZURE_FEDERATED_TOKEN_FILE"));
	o.source = WD_AZURE_SHARED_KEY;
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), -WEIGHTD_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "shared key"));
	o.source = WD_AZURE_SAS;
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), -WEIGHTD_E_INVALID_ARGUMENT);
	/* a key file others can read */
	fd = mkstemp(key);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, EMU_KEY "\n", sizeof(EMU_KEY)), (ssize_t)sizeof(EMU_KEY));
	close(fd);
	chmod(key, 0644);
	o.source = WD_AZURE_SHARED_KEY;
	o.key_file = key;
	assert_int_equal(wd_azure_new("acct1", &o, &a, &err), -WEIGHTD_E_PERMISSION_DENIED);
	assert_non_null(strstr(err.message, "shared key"));
	assert_non_null(strstr(err.message, "0644"));
	unlink(key);
	assert_int_equal(wd_azure_source_parse("workload-identity"), WD_AZURE_WORKLOAD);
	assert_int_equal(wd_azure_source_parse("iam"), -1);
}

static void test_error_reason(void **state)
{
	const char body[] = "\xef\xbb\xbf<?xml version=\"1.0\"?><Error><Code>AuthenticationFailed"
			    "</Code><Message>Server failed to authenticate the request.\n"
			    "RequestId:1\nTime:2</Message></Error>";
	char r[300];

	(void)state;
	wd_azure_error_reason(body, sizeof(body) - 1, r, sizeof(r));
	assert_string_equal(r,
			    " (AuthenticationFailed: Server failed to authenticate the request.)");
	wd_azure_error_reason("<Error><Code>X", 14, r, sizeof(r));
	assert_string_equal(r, "");
	wd_azure_error_reason(body, sizeof(body) - 1, r, 12);
	assert_int_equal(strlen(r), 11);
}

static void test_token_parse(void **state)
{
	const char ok[] = "{\"access_token\":\"eyJ.a.b\",\"expires_on\":\"1765110000\"}";
	const char bad[] = "{\"error\":\"invalid_client\",\"error_description\":\"AADSTS7000215: "
			   "Invalid client secret\\r\\nTrace ID: 1\"}";
	struct wd_azure_token_answer t;
	weightd_error err;

	(void)state;
	assert_int_equal(wd_azure_token_parse(ok, sizeof(ok) - 1, &t, &err), 0);
	assert_string_equal(t.access_token, "eyJ.a.b");
	assert_int_equal(t.expires_on, 1765110000);
	assert_int_equal(t.expires_in, -1);
	wd_azure_token_answer_clear(&t);
	assert_int_equal(wd_azure_token_parse(bad, sizeof(bad) - 1, &t, &err), 0);
	assert_null(t.access_token);
	assert_string_equal(t.error, "invalid_client: AADSTS7000215: Invalid client secret");
	wd_azure_token_answer_clear(&t);
	assert_true(wd_azure_token_parse("{\"access_token\":\"a b\"}", 22, &t, &err) < 0);
	assert_true(wd_azure_token_parse("[]", 2, &t, &err) < 0);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(test_urls), cmocka_unit_test(test_bad_urls),
	  cmocka_unit_test(test_shared_key_signature), cmocka_unit_test(test_auto_and_headers),
	  cmocka_unit_test(test_refusals_name_the_source), cmocka_unit_test(test_error_reason),
	  cmocka_unit_test(test_token_parse))
