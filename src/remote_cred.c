/* SPDX-License-Identifier: Apache-2.0 */
/* remote_cred.c - secrets for remote checkpoints: AWS shared-credentials files, bearer tokens. */
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

#define SECRET_FILE_MAX 65536 /* bytes in a credentials or token file */

/*
 * Open a file that holds secrets, refusing one that others could read or that belongs to
 * someone else: a secret anyone could copy is not a secret, and a file another user controls
 * could be swapped for theirs.
 */
/* What fixes each refusal below for a Kubernetes Secret, whose files are root's (with fsGroup,
 * mode 0440 and that group's). */
#define K8S_SECRET_HINT                                                                         \
	"a Kubernetes Secret: mount it with defaultMode 0400 and no fsGroup, and copy it for "  \
	"weightd's user as the init container of deploy/kubernetes/daemonset.yaml does"

int wd_remote_secret_open(const char *file, const char *what, FILE **ret, weightd_error *err)
{
	struct stat st;
	int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	FILE *f;

	if (fd < 0 && errno == EACCES)
		return wd_error_set(
			err, WEIGHTD_E_PERMISSION_DENIED,
			"%s %s: %s: weightd's user (uid %u) must own it, mode 0400 or 0600 (%s)", what,
			file, strerror(errno), (unsigned)geteuid(), K8S_SECRET_HINT);
	if (fd < 0)
		return wd_error_set(
			err, errno == ENOENT ? WEIGHTD_E_NOT_FOUND : WEIGHTD_E_PERMISSION_DENIED,
			"%s %s: %s", what, file, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "%s %s is not a regular file",
				    what, file);
	}
	if (st.st_mode & 077) {
		close(fd);
		return wd_error_set(
			err, WEIGHTD_E_PERMISSION_DENIED,
			"%s %s can be read by others (mode %04o): make it readable by its owner "
			"alone (chmod 600; %s)",
			what, file, (unsigned)(st.st_mode & 07777), K8S_SECRET_HINT);
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		close(fd);
		return wd_error_set(
			err, WEIGHTD_E_PERMISSION_DENIED,
			"%s %s belongs to uid %u, not to weightd's user (uid %u) or root: chown %u "
			"it (%s)",
			what, file, (unsigned)st.st_uid, (unsigned)geteuid(), (unsigned)geteuid(),
			K8S_SECRET_HINT);
	}
	if (st.st_size > SECRET_FILE_MAX) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED, "%s %s is larger than %d bytes",
				    what, file, SECRET_FILE_MAX);
	}
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	*ret = f;
	return 0;
}

struct cred_parse {
	const char *profile;
	bool seen_profile;
	bool oom;
	struct wd_remote_credentials c;
};

static int on_ini(void *arg, const char *section, const char *name, const char *value)
{
	struct cred_parse *cp = arg;
	char **slot = NULL;

	/* a credentials file names a profile [NAME]; ~/.aws/config's form is [profile NAME] */
	if (strcmp(section, cp->profile) != 0 &&
	    !(strncmp(section, "profile ", 8) == 0 && strcmp(section + 8, cp->profile) == 0))
		return 1;
	cp->seen_profile = true;
	if (strcmp(name, "aws_access_key_id") == 0)
		slot = &cp->c.access_key;
	else if (strcmp(name, "aws_secret_access_key") == 0)
		slot = &cp->c.secret_key;
	else if (strcmp(name, "aws_session_token") == 0)
		slot = &cp->c.session_token;
	if (slot) {
		if (*slot) {
			explicit_bzero(*slot, strlen(*slot));
			free(*slot);
		}
		*slot = strdup(value);
		if (!*slot)
			cp->oom = true;
	}
	return 1;
}

void wd_remote_credentials_clear(struct wd_remote_credentials *c)
{
	char **all[] = { &c->access_key, &c->secret_key, &c->session_token };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (*all[i]) {
			explicit_bzero(*all[i], strlen(*all[i]));
			free(*all[i]);
			*all[i] = NULL;
		}
	}
}

static int from_env(struct wd_remote_credentials *ret, weightd_error *err)
{
	const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
	const char *token = getenv("AWS_SESSION_TOKEN");
	struct wd_remote_credentials c = { 0 };

	if (!id || !*id || !secret || !*secret)
		return wd_error_set(
			err, WEIGHTD_E_NOT_FOUND,
			"no credentials: name a credentials file, or set AWS_ACCESS_KEY_ID and "
			"AWS_SECRET_ACCESS_KEY in weightd's environment");
	c.access_key = strdup(id);
	c.secret_key = strdup(secret);
	c.session_token = token && *token ? strdup(token) : NULL;
	if (!c.access_key || !c.secret_key || (token && *token && !c.session_token)) {
		wd_remote_credentials_clear(&c);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	*ret = c;
	return 0;
}

int wd_remote_credentials(const char *file, const char *profile, struct wd_remote_credentials *ret,
			  weightd_error *err)
{
	struct cred_parse cp = { .profile = profile && *profile ? profile : "default" };
	FILE *f = NULL;
	int rc, line;

	if (!file)
		return from_env(ret, err);
	if ((rc = wd_remote_secret_open(file, "credentials file", &f, err)) < 0)
		return rc;
	line = ini_parse_file(f, on_ini, &cp);
	fclose(f);
	if (cp.oom) {
		wd_remote_credentials_clear(&cp.c);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	if (line != 0) {
		wd_remote_credentials_clear(&cp.c);
		return wd_error_set(
			err, WEIGHTD_E_INVALID_ARGUMENT,
			"credentials file %s:%d: not in the INI form ([profile] then key = value)",
			file, line);
	}
	if (!cp.seen_profile || !cp.c.access_key || !cp.c.secret_key) {
		wd_remote_credentials_clear(&cp.c);
		return wd_error_set(err, WEIGHTD_E_NOT_FOUND,
				    "credentials file %s: profile [%s] %s", file, cp.profile,
				    cp.seen_profile ?
					    "lacks aws_access_key_id or aws_secret_access_key" :
					    "is not in it");
	}
	*ret = cp.c;
	return 0;
}

int wd_remote_token(const char *file, char **ret, weightd_error *err)
{
	char buf[SECRET_FILE_MAX + 1];
	FILE *f = NULL;
	size_t n, len;
	char *t;
	int rc;

	if ((rc = wd_remote_secret_open(file, "token file", &f, err)) < 0)
		return rc;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	while (len && (buf[len - 1] == ' ' || buf[len - 1] == '\t'))
		len--;
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)buf[i] < 0x21 || (unsigned char)buf[i] > 0x7e) {
			explicit_bzero(buf, sizeof(buf));
			return wd_error_set(
				err, WEIGHTD_E_INVALID_ARGUMENT,
				"token file %s: the token's first line has a space or a "
				"character a header cannot carry",
				file);
		}
	}
	if (len == 0) {
		explicit_bzero(buf, sizeof(buf));
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "token file %s is empty",
				    file);
	}
	t = strndup(buf, len);
	explicit_bzero(buf, sizeof(buf));
	if (!t)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	*ret = t;
	return 0;
}
