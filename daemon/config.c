/* SPDX-License-Identifier: Apache-2.0 */
/* config.c - reads weightd.conf (INI, split by inih) into struct config; every error names FILE:LINE.
 * The keys are the rows of config_keys.c; the line reader is in config_line.c, sections and what a
 * row sets in config_section.c, value parsers in config_value.c; config_int.h is what they share. */
#include "config_int.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read a whole regular file of at most CONFIG_MAX_FILE_BYTES. */
static int read_file(const char *path, char **ret_buf, size_t *ret_len, weightd_error *err)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wd_error_set(err, WEIGHTD_E_IO, "%s: cannot open: %s", path,
				    strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = wd_error_set(err, WEIGHTD_E_IO, "%s: cannot stat: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s: not a regular file", path);
		goto out;
	}
	if (st.st_size > (off_t)CONFIG_MAX_FILE_BYTES) {
		rc = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "%s: %lld bytes, larger than the %u allowed", path,
				  (long long)st.st_size, CONFIG_MAX_FILE_BYTES);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	/* Read until EOF but never past the limit, in case the file grows meanwhile. */
	while (len < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + len, (size_t)st.st_size - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = wd_error_set(err, WEIGHTD_E_IO, "%s: cannot read: %s", path,
					  strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	*ret_buf = buf;
	*ret_len = len;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

/* The later of the lines that set two [daemon] keys. */
static int later_line(const struct loader *ld, size_t a, size_t b)
{
	int la = config_key_line(ld, CONFIG_DAEMON, a), lb = config_key_line(ld, CONFIG_DAEMON, b);

	return la > lb ? la : lb;
}

/* Rules between keys, checked once the whole file is read; an error names the later of the lines
 * that set the keys involved. */
static void validate(struct loader *ld)
{
	struct config *cfg = ld->cfg;

	cfg->uid_max_segments_set =
		config_key_line(ld, CONFIG_DAEMON, offsetof(struct config, uid_max_segments)) != 0;
	cfg->uid_max_queue_fds_set =
		config_key_line(ld, CONFIG_DAEMON, offsetof(struct config, uid_max_queue_fds)) != 0;
	cfg->uid_max_pending_set =
		config_key_line(ld, CONFIG_DAEMON, offsetof(struct config, uid_max_pending)) != 0;

	if (cfg->client_max_queue_bytes < cfg->max_frame_bytes) {
		int line = later_line(ld, offsetof(struct config, client_max_queue_bytes),
				      offsetof(struct config, max_frame_bytes));

		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "client_max_queue (%llu bytes) is smaller than max_frame (%u bytes): one reply "
			    "must fit in a client's queue", (unsigned long long)cfg->client_max_queue_bytes,
			    cfg->max_frame_bytes);
	}
	if (cfg->metrics_listen && cfg->metrics_listen[0]) {
		struct sockaddr_storage ss;
		socklen_t len;
		const char *why;

		if (config_parse_listen(cfg->metrics_listen, cfg->metrics_public, &ss, &len, &why) < 0)
			config_fail(ld,
				    later_line(ld, offsetof(struct config, metrics_listen),
					       offsetof(struct config, metrics_public)),
				    WEIGHTD_E_INVALID_ARGUMENT, "metrics_listen: '%s': %s",
				    cfg->metrics_listen, why);
	}
	if (cfg->uid_max_partial_bytes > cfg->max_partial_bytes / 2) {
		int line = later_line(ld, offsetof(struct config, uid_max_partial_bytes),
				      offsetof(struct config, max_partial_bytes));

		/* else one uid alone could fill the total and lock every other uid out */
		config_fail(ld, line, WEIGHTD_E_INVALID_ARGUMENT,
			    "uid_max_partial (%llu bytes) is more than half of max_partial (%llu bytes): one "
			    "uid must not be able to take what every uid shares",
			    (unsigned long long)cfg->uid_max_partial_bytes,
			    (unsigned long long)cfg->max_partial_bytes);
	}
}

static int by_line(const void *a, const void *b)
{
	const struct config_error *x = a, *y = b;

	return (x->line > y->line) - (x->line < y->line);
}

/* The errors found, in line order, to `report`, and the first into err. */
static int report_errors(struct loader *ld, const char *path, weightd_error *err,
			 config_report_fn *report, void *ctx)
{
	const struct config_error *first;
	char line[sizeof(ld->errors[0].msg) + 4200];

	/* stable: errors of one line stay in the order found */
	for (size_t i = 1; i < ld->n_errors; i++)
		for (size_t j = i; j > 0 && by_line(&ld->errors[j - 1], &ld->errors[j]) > 0; j--) {
			struct config_error t = ld->errors[j];

			ld->errors[j] = ld->errors[j - 1];
			ld->errors[j - 1] = t;
		}
	for (size_t i = 0; report && i < ld->n_errors; i++) {
		snprintf(line, sizeof(line), "%s:%d: %s", path, ld->errors[i].line,
			 ld->errors[i].msg);
		report(ctx, line);
	}
	if (report && ld->stop && ld->n_errors == CONFIG_MAX_ERRORS) {
		snprintf(line, sizeof(line), "%s: stopped after %d errors", path,
			 CONFIG_MAX_ERRORS);
		report(ctx, line);
	}
	first = &ld->errors[0];
	if (ld->n_errors > 1)
		return wd_error_set(err, first->code,
				    "%s:%d: %s (and %zu more error%s: weightd "
				    "--check-config lists them)",
				    path, first->line, first->msg, ld->n_errors - 1,
				    ld->n_errors > 2 ? "s" : "");
	return wd_error_set(err, first->code, "%s:%d: %s", path, first->line, first->msg);
}

int config_load(const char *path, struct config **ret, weightd_error *err)
{
	return config_load_report(path, ret, err, NULL, NULL);
}

int config_load_report(const char *path, struct config **ret, weightd_error *err,
		       config_report_fn *report, void *ctx)
{
	struct loader ld = { 0 };
	struct config *cfg = NULL;
	char *buf = NULL;
	size_t len = 0;
	int rc, ini_line;

	rc = read_file(path, &buf, &len, err);
	if (rc < 0)
		return rc;
	cfg = calloc(1, sizeof(*cfg));
	if (cfg)
		cfg->path = strdup(path);
	if (!cfg || !cfg->path) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	ld.file = path;
	ld.buf = buf;
	ld.len = len;
	ld.cfg = cfg;
	if (!config_set_defaults(&ld, CONFIG_DAEMON, cfg)) {
		rc = ld.n_errors ? wd_error_set(err, ld.errors[0].code, "%s: %s", path,
						ld.errors[0].msg) :
				   wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
						"%s: out of memory", path);
		goto out;
	}

	ini_line = ini_parse_stream(config_reader, &ld, config_handler, &ld);
	if (ini_line < 0) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	if (!ld.stop)
		config_close_section(&ld);
	/* rules between keys mean nothing while a key involved may have kept its default */
	if (!ld.n_errors)
		validate(&ld);
	/* the reader hands inih only lines it can split; should it still find one, it is said */
	if (ini_line > 0)
		config_fail(&ld, ini_line, WEIGHTD_E_INVALID_ARGUMENT, "%s",
			    config_line_is_header(&ld, ini_line) ?
				    "cannot parse the section header" :
				    "expected 'key = value'");
	if (ld.n_errors) {
		rc = report_errors(&ld, path, err, report, ctx);
		goto out;
	}
	if (ld.stop) {
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
		goto out;
	}
	*ret = cfg;
	cfg = NULL;
out:
	config_free(cfg);
	free(ld.errors);
	free(buf);
	return rc;
}

void config_free(struct config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg->n_sources; i++) {
		free(cfg->sources[i].name);
		free(cfg->sources[i].path);
		free(cfg->sources[i].endpoint);
		free(cfg->sources[i].region);
		free(cfg->sources[i].credentials_file);
		free(cfg->sources[i].credentials);
		free(cfg->sources[i].profile);
		free(cfg->sources[i].token_file);
		free(cfg->sources[i].ca_file);
		free(cfg->sources[i].azure_credentials);
		free(cfg->sources[i].azure_key_file);
		free(cfg->sources[i].allow_uids);
		free(cfg->sources[i].allow_gids);
	}
	free(cfg->sources);
	free(cfg->budget_uids);
	free(cfg->path);
	free(cfg->socket_path);
	free(cfg->shm_prefix);
	free(cfg->metrics_listen);
	free(cfg->admin_socket);
	free(cfg->admin_uids);
	free(cfg->admin_gids);
	free(cfg->state_dir);
	free(cfg->segment_dir);
	free(cfg);
}
