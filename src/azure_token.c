/* SPDX-License-Identifier: Apache-2.0 */
/* azure_token.c - Microsoft Entra access tokens fetched with libcurl: the token endpoint's POST
 * (a federated assertion or a client secret) and the managed identity's IMDS GET. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "azure.h"
#include "azure_int.h"
#include "error.h"

#define ANSWER_MAX 65536 /* bytes of a token endpoint's answer kept */

struct answer {
	char buf[ANSWER_MAX + 1];
	size_t n;
	bool over;
};

static size_t on_data(char *d, size_t size, size_t n, void *arg)
{
	struct answer *a = arg;
	size_t len = size * n;

	if (len > ANSWER_MAX - a->n) {
		a->over = true;
		return 0;
	}
	memcpy(a->buf + a->n, d, len);
	a->n += len;
	a->buf[a->n] = '\0';
	return len;
}

int wd_azure_token_fetch(const struct wd_azure_token_call *call, char **ret_token,
			 int64_t *ret_expiry, weightd_error *err)
{
	struct wd_azure_token_answer t;
	struct curl_slist *h = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	struct answer *a = calloc(1, sizeof(*a));
	CURL *c = curl_easy_init();
	const char *proto = call->allow_http ? "http,https" : "https";
	long status = 0;
	CURLcode rc;
	int r;

	if (!a || !c) {
		free(a);
		curl_easy_cleanup(c);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	h = curl_slist_append(h, "Accept: application/json");
	if (h && !call->form)
		h = curl_slist_append(h, "Metadata: true");
	if (!h) {
		free(a);
		curl_easy_cleanup(c);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	curl_easy_setopt(c, CURLOPT_URL, call->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, proto);
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, proto);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "weightd");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	if (call->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, call->ca_file);
	if (call->form)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, call->form);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && a->over)) {
		r = wd_error_set(err, WEIGHTD_E_IO, "%s: token endpoint %s: %s%s%s", call->what,
				 call->url, curl_easy_strerror(rc), errbuf[0] ? ": " : "", errbuf);
		goto out;
	}
	if (a->over) {
		r = wd_error_set(err, WEIGHTD_E_IO,
				 "%s: token endpoint %s: the answer is longer than %d bytes",
				 call->what, call->url, ANSWER_MAX);
		goto out;
	}
	if (wd_azure_token_parse(a->buf, a->n, &t, err) < 0) {
		r = status >= 200 && status <= 299 ?
			    wd_error_set(err, WEIGHTD_E_IO, "%s: token endpoint %s (HTTP %ld): %s",
					 call->what, call->url, status, err ? err->message : "") :
			    wd_error_set(err,
					 status == 400 || status == 401 || status == 403 ?
						 WEIGHTD_E_PERMISSION_DENIED :
						 WEIGHTD_E_IO,
					 "%s: token endpoint %s said HTTP %ld", call->what,
					 call->url, status);
		goto out;
	}
	if (status < 200 || status > 299 || !t.access_token) {
		r = wd_error_set(err,
				 status == 400 || status == 401 || status == 403 ?
					 WEIGHTD_E_PERMISSION_DENIED :
				 status >= 200 && status <= 299 ? WEIGHTD_E_IO :
								  WEIGHTD_E_IO,
				 "%s: token endpoint %s said HTTP %ld%s%s", call->what, call->url,
				 status, t.error[0] ? ": " : "",
				 t.error[0] ? t.error :
					      (t.access_token ? "" : ", no access_token"));
		wd_azure_token_answer_clear(&t);
		goto out;
	}
	*ret_expiry = t.expires_on > 0	? t.expires_on :
		      t.expires_in >= 0 ? (int64_t)time(NULL) + t.expires_in :
					  (int64_t)time(NULL) + 3600;
	*ret_token = t.access_token;
	t.access_token = NULL;
	r = 0;
out:
	explicit_bzero(a->buf, sizeof(a->buf));
	free(a);
	return r;
}
