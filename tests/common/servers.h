/* SPDX-License-Identifier: Apache-2.0 */
/* servers.h - the remote-checkpoint test servers (tests/remote/servers.py) run from a C test. */
#ifndef WD_TEST_SERVERS_H
#define WD_TEST_SERVERS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* What servers.py said it runs (ports on 127.0.0.1; s3 0 without --s3). */
struct wd_servers {
	pid_t pid;
	int stdin_fd; /* closing it stops them */
	int http, https, fault, s3;
	char ca[512], token[128], s3_key[64], s3_secret[64], bucket[64];
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

/* GET http://127.0.0.1:port/path into a malloc'd NUL-terminated string (NULL on failure): the
 * fault proxy's /__ctl and /__stats. */
char *wd_servers_get(int port, const char *path);
/* The same over HTTPS, verified with the servers' CA (the Azure token endpoint's /__ctl). */
char *wd_servers_get_tls(const struct wd_servers *s, int port, const char *path);

#endif
