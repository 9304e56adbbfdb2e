/* SPDX-License-Identifier: Apache-2.0 */
/* azure_int.h - what azure.c and azure_token.c share: one token request to an Entra or IMDS
 * endpoint. */
#ifndef WD_AZURE_INT_H
#define WD_AZURE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <weightd/error.h>

/* One token endpoint call: a POST of `form` (application/x-www-form-urlencoded), or with form
 * NULL a GET carrying "Metadata: true" (IMDS). */
struct wd_azure_token_call {
	const char *what; /* the source, for errors: "workload identity" */
	const char *url;  /* may hold no secret: it is shown in errors */
	const char *form;
	const char *ca_file;
	bool allow_http;
};

/* 0 with a malloc'd token and its expiry (unix seconds), or the error naming call->what, the
 * endpoint, the HTTP status and what the endpoint said. */
int wd_azure_token_fetch(const struct wd_azure_token_call *call, char **ret_token,
			 int64_t *ret_expiry, weightd_error *err);

#endif
