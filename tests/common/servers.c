/* SPDX-License-Identifier: Apache-2.0 */
/* servers.c - the remote-checkpoint test servers (tests/remote/servers.py) run from a C test. */
#include "servers.h"
#include "st_writer.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void copy_str(json_t *j, const char *key, char *buf, size_t cap)
{
	const char *v = json_string_value(json_object_get(j, key));

	snprintf(buf, cap, "%s", v ? v : "");
}

static int start(const char *root, const char *flag, struct wd_servers *ret, char *why, size_t cap)
{
	const char *src = getenv("WD_SOURCE_DIR");
	char script[512], line[4096] = "";
	int in[2], out[2];
	json_error_t je;
	json_t *j;
	FILE *f;

	memset(ret, 0, sizeof(*ret));
	ret->stdin_fd = -1;
	signal(SIGPIPE, SIG_IGN);
	snprintf(script, sizeof(script), "%s/tests/remote/servers.py", src ? src : ".");
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
		snprintf(why, cap, "pipe failed");
		return -1;
	}
	ret->pid = fork();
	if (ret->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (flag)
			execl("/usr/bin/python3", "python3", script, "--root", root, flag,
			      (char *)NULL);
		else
			execl("/usr/bin/python3", "python3", script, "--root", root, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	ret->stdin_fd = in[1];
	f = fdopen(out[0], "r");
	if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "ready ", 6) != 0) {
		line[strcspn(line, "\n")] = '\0';
		snprintf(why, cap, "the test servers did not start: %s",
			 line[0] ? line : "(no answer)");
		if (f)
			fclose(f);
		wd_servers_stop(ret);
		return -1;
	}
	fclose(f);
	j = json_loads(line + 6, 0, &je);
	if (!j) {
		snprintf(why, cap, "servers.py said: %s", line);
		wd_servers_stop(ret);
		return -1;
	}
	ret->http = (int)json_integer_value(json_object_get(j, "http"));
	ret->https = (int)json_integer_value(json_object_get(j, "https"));
	ret->fault = (int)json_integer_value(json_object_get(j, "fault"));
	ret->s3 = (int)json_integer_value(json_object_get(j, "s3"));
	copy_str(j, "ca", ret->ca, sizeof(ret->ca));
	copy_str(j, "token", ret->token, sizeof(ret->token));
	copy_str(j, "s3_key", ret->s3_key, sizeof(ret->s3_key));
	copy_str(j, "s3_secret", ret->s3_secret, sizeof(ret->s3_secret));
	copy_str(j, "bucket", ret->bucket, sizeof(ret->bucket));
	ret->aws = (int)json_integer_value(json_object_get(j, "aws"));
	copy_str(j, "s3_key2", ret->s3_key2, sizeof(ret->s3_key2));
	copy_str(j, "s3_secret2", ret->s3_secret2, sizeof(ret->s3_secret2));
	copy_str(j, "role_arn", ret->role_arn, sizeof(ret->role_arn));
	copy_str(j, "web_token", ret->web_token, sizeof(ret->web_token));
	copy_str(j, "container_token", ret->container_token, sizeof(ret->container_token));
	ret->az = (int)json_integer_value(json_object_get(j, "az"));
	ret->az_direct = (int)json_integer_value(json_object_get(j, "az_direct"));
	ret->az_token = (int)json_integer_value(json_object_get(j, "az_token"));
	copy_str(j, "az_account", ret->az_account, sizeof(ret->az_account));
	copy_str(j, "az_key", ret->az_key, sizeof(ret->az_key));
	copy_str(j, "az_container", ret->az_container, sizeof(ret->az_container));
	copy_str(j, "az_sas", ret->az_sas, sizeof(ret->az_sas));
	copy_str(j, "az_tenant", ret->az_tenant, sizeof(ret->az_tenant));
	copy_str(j, "az_client", ret->az_client, sizeof(ret->az_client));
	copy_str(j, "az_secret", ret->az_secret, sizeof(ret->az_secret));
	copy_str(j, "az_fed_file", ret->az_fed_file, sizeof(ret->az_fed_file));
	json_decref(j);
	return 0;
}

int wd_servers_start(const char *root, bool s3, struct wd_servers *ret, char *why, size_t cap)
{
	return start(root, s3 ? "--s3" : NULL, ret, why, cap);
}

int wd_servers_start_azure(const char *root, struct wd_servers *ret, char *why, size_t cap)
{
	return start(root, "--azure", ret, why, cap);
}

void wd_servers_stop(struct wd_servers *s)
{
	int st;

	if (s->stdin_fd >= 0)
		close(s->stdin_fd);
	s->stdin_fd = -1;
	if (s->pid > 0)
		waitpid(s->pid, &st, 0);
	s->pid = 0;
}

struct grow {
	char *p;
	size_t n;
};

static size_t on_data(char *d, size_t size, size_t n, void *arg)
{
	struct grow *g = arg;
	char *np = realloc(g->p, g->n + size * n + 1);

	if (!np)
		return 0;
	memcpy(np + g->n, d, size * n);
	g->n += size * n;
	np[g->n] = '\0';
	g->p = np;
	return size * n;
}

static char *get(const char *ca, int port, const char *path)
{
	struct grow g = { NULL, 0 };
	char url[1024];
	CURL *h = curl_easy_init();
	CURLcode rc;

	if (!h)
		return NULL;
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d%s", ca ? "https" : "http", port, path);
	if (ca)
		curl_easy_setopt(h, CURLOPT_CAINFO, ca);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &g);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
	rc = curl_easy_perform(h);
	curl_easy_cleanup(h);
	if (rc != CURLE_OK) {
		free(g.p);
		return NULL;
	}
	return g.p ? g.p : strdup("");
}

void wd_servers_try(const char *root, bool s3, struct wd_servers *s)
{
	char why[sizeof(s->why)];

	s->up = wd_servers_start(root, s3, s, why, sizeof(why)) == 0;
	snprintf(s->why, sizeof(s->why), "%s", s->up ? "" : why);
}

int wd_servers_serve_tensors(struct wd_servers *s, char *root, size_t cap,
			     const struct stw_tensor *ts, size_t n, bool s3)
{
	char path[4200];

	if (stw_tmpdir(root, cap))
		return -1;
	snprintf(path, sizeof(path), "%s/m.safetensors", root);
	if (stw_write(path, ts, n, NULL, 0, NULL) < 0)
		return -1;
	wd_servers_try(root, s3, s);
	return 0;
}

void wd_servers_end(struct wd_servers *s, const char *root)
{
	wd_servers_stop(s);
	stw_rmtree(root);
}

char *wd_servers_get(int port, const char *path)
{
	return get(NULL, port, path);
}

char *wd_servers_get_tls(const struct wd_servers *s, int port, const char *path)
{
	return get(s->ca, port, path);
}

uint64_t wd_servers_proxied(int port, const char *path_part, size_t *ret_requests)
{
	char *body = wd_servers_get(port, "/__stats");
	json_t *j = body ? json_loads(body, 0, NULL) : NULL, *e;
	uint64_t sum = 0;
	size_t i, n = 0;

	free(body);
	if (!j)
		return UINT64_MAX;
	json_array_foreach(json_object_get(j, "ranges"), i, e) {
		const char *path = json_string_value(json_array_get(e, 0));
		const char *range = json_string_value(json_array_get(e, 1));
		unsigned long long from, to;

		if (path_part && (!path || !strstr(path, path_part)))
			continue;
		n++;
		if (range && sscanf(range, "bytes=%llu-%llu", &from, &to) == 2)
			sum += to - from + 1;
	}
	json_decref(j);
	if (ret_requests)
		*ret_requests = n;
	return sum;
}
