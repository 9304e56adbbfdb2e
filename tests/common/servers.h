/* SPDX-License-Identifier: Apache-2.0 */
/* servers.h - the remote-checkpoint test servers (tests/remote/servers.py) run from a C test. */
#ifndef WD_TEST_SERVERS_H
#define WD_TEST_SERVERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What servers.py said it runs (ports on 127.0.0.1; s3 0 without --s3). */
struct wd_servers {
	pid_t pid;
	int stdin_fd; /* closing it stops them */
	int http, https, fault, s3;
	char ca[512], token[128], s3_key[64], s3_secret[64], bucket[64];
	bool up;       /* wd_servers_try: they run */
	char why[600]; /* wd_servers_try: why they do not */
	/* with s3: the AWS credential endpoints (tests/remote/aws_endpoints.py): STS at /, container
	 * credentials at /creds, instance metadata at /latest/; the role and tokens they accept */
	int aws;
	char role_arn[128], web_token[256], container_token[128];
	char s3_key2[64], s3_secret2[64]; /* a second static key the S3 proxy accepts */
	/* with Azure (wd_servers_start_azure): the proxy in front of Azurite (plain HTTP), Azurite
	 * itself (HTTPS, OAuth checked), the token endpoint (HTTPS), and what they accept */
	int az, az_direct, az_token;
	char az_account[64], az_key[128], az_container[64], az_sas[512], az_tenant[64],
		az_client[64], az_secret[64], az_fed_file[512];
};

/*
 * Start servers.py serving `root` (with s3rver when `s3`): 0, or -1 with why (a sentence, e.g.
 * nginx or s3rver not installed) for the test to skip on.
 */
int wd_servers_start(const char *root, bool s3, struct wd_servers *ret, char *why, size_t cap);
/* The same with Azurite and the token endpoint as well (tests/remote/azure_servers.py). */
int wd_servers_start_azure(const char *root, struct wd_servers *ret, char *why, size_t cap);
/* Stop them and wait. Accepts a never-started one (pid 0). */
void wd_servers_stop(struct wd_servers *s);

/* wd_servers_start for a test that skips without them: s->up says whether they run, s->why why
 * not. */
void wd_servers_try(const char *root, bool s3, struct wd_servers *s);

struct stw_tensor;

/* A new temp directory (its path in root) holding m.safetensors of the n tensors ts, served by
 * wd_servers_try (with s3rver when `s3`): 0, or -1 when it cannot be written. */
int wd_servers_serve_tensors(struct wd_servers *s, char *root, size_t cap,
			     const struct stw_tensor *ts, size_t n, bool s3);

/* Stop the servers and remove root. */
void wd_servers_end(struct wd_servers *s, const char *root);

/* A cmocka test's first statement when it needs the servers of wd_servers_try: skips, saying
 * why, when they do not run. */
#define NEED_SERVERS(s)                                            \
	do {                                                       \
		if (!(s)->up) {                                    \
			print_message("skipped: %s\n", (s)->why); \
			skip();                                    \
		}                                                  \
	} while (0)

/* GET http://127.0.0.1:port/path into a malloc'd NUL-terminated string (NULL on failure): the
 * fault proxy's /__ctl and /__stats. */
char *wd_servers_get(int port, const char *path);
/* The same over HTTPS, verified with the servers' CA (the Azure token endpoint's /__ctl). */
char *wd_servers_get_tls(const struct wd_servers *s, int port, const char *path);
/* The bytes the fault proxy on `port` was asked for since its last reset, by the ranges of its
 * /__stats, of the paths containing path_part (NULL: all); their count in *ret_requests
 * (may be NULL). UINT64_MAX when the proxy does not answer. */
uint64_t wd_servers_proxied(int port, const char *path_part, size_t *ret_requests);

#endif
