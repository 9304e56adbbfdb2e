/* SPDX-License-Identifier: Apache-2.0 */
/* aws_cred.c - AWS credentials for S3: the keys now, refreshed ahead of their expiry by one
 * caller for all, re-read when the files they came from change; what may be shown of them. */
#include "aws_cred_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "error.h"
#include "wd_strdup.h"

#define CHECK_EVERY_MS	  1000u /* a watched file is stat()ed at most this often */
#define ADVISORY_RETRY_MS 2000u /* after a failed advisory refresh */

static const char *const source_names[] = {
	[WD_AWS_AUTO] = "auto",
	[WD_AWS_ENV] = "env",
	[WD_AWS_WEB_IDENTITY] = "web-identity",
	[WD_AWS_CONTAINER] = "container",
	[WD_AWS_IMDS] = "imds",
	[WD_AWS_FILE] = "file",
};

int wd_aws_cred_source_parse(const char *s)
{
	for (size_t i = 0; s && i < sizeof(source_names) / sizeof(source_names[0]); i++)
		if (strcmp(s, source_names[i]) == 0)
			return (int)i;
	return -1;
}

void wd_aws_cred_windows(int64_t lifetime, int64_t *advisory, int64_t *mandatory)
{
	/* botocore's windows are 15 and 10 minutes, for keys that live an hour: keys that live
	 * less (tests, short role sessions) keep the same proportions */
	*advisory = lifetime / 4 < 15 * 60 ? lifetime / 4 : 15 * 60;
	*mandatory = lifetime / 6 < 10 * 60 ? lifetime / 6 : 10 * 60;
	if (*advisory < 0)
		*advisory = 0;
	if (*mandatory < 0)
		*mandatory = 0;
}

static int64_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static void keys_free(struct wd_aws_keys *k)
{
	wipe_free(k->access_key);
	wipe_free(k->secret_key);
	wipe_free(k->session_token);
	free(k);
}

/* Called with c->lock held (or before c is shared). */
static void keys_drop(struct wd_aws_keys *k)
{
	if (k && --k->refs == 0)
		keys_free(k);
}

/* The lock that guards every keys' count: keys are only ever counted through their provider's
 * lock, but a release has only the keys; one process-wide lock serves them (releases are rare:
 * one per request). */
static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;

void wd_aws_cred_release(struct wd_aws_keys *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&keys_lock);
	keys_drop(k);
	pthread_mutex_unlock(&keys_lock);
}

static struct wd_aws_keys *keys_new(const struct wd_aws_found *f, uint64_t generation)
{
	struct wd_aws_keys *k = calloc(1, sizeof(*k));
	bool oom = false;

	if (!k)
		return NULL;
	k->access_key = wd_strdup_opt(f->keys.access_key, &oom);
	k->secret_key = wd_strdup_opt(f->keys.secret_key, &oom);
	k->session_token = f->keys.token[0] ? wd_strdup_opt(f->keys.token, &oom) : NULL;
	if (oom) {
		keys_free(k);
		return NULL;
	}
	k->expires = f->keys.expires;
	k->obtained = now_s();
	k->source = f->source;
	k->generation = generation;
	k->refs = 1;
	return k;
}

static void stamp_take(struct wd_aws_stamp *s)
{
	struct stat st;

	if (!s->path)
		return;
	if (stat(s->path, &st) < 0) {
		memset(&st, 0, sizeof(st));
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	s->size = st.st_size;
	s->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	s->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

static bool stamp_changed(const struct wd_aws_stamp *s)
{
	struct wd_aws_stamp now = { .path = s->path };

	if (!s->path)
		return false;
	stamp_take(&now);
	return now.dev != s->dev || now.ino != s->ino || now.size != s->size ||
	       now.mtime_ns != s->mtime_ns || now.ctime_ns != s->ctime_ns;
}

/* Take what a resolution found as the keys now (c->lock held). */
static int adopt(struct wd_aws_cred *c, struct wd_aws_found *f)
{
	struct wd_aws_keys *k = keys_new(f, c->generation + 1);

	if (!k)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	pthread_mutex_lock(&keys_lock);
	keys_drop(c->cur);
	pthread_mutex_unlock(&keys_lock);
	c->cur = k;
	c->generation++;
	c->kind = f->kind;
	memcpy(c->what, f->what, sizeof(c->what));
	for (int i = 0; i < WD_AWS_WATCH_MAX; i++) {
		free(c->watch[i].path);
		memset(&c->watch[i], 0, sizeof(c->watch[i]));
		c->watch[i].path = f->watch[i];
		f->watch[i] = NULL;
		stamp_take(&c->watch[i]);
	}
	c->next_check_ms = wd_clock_ms() + CHECK_EVERY_MS;
	c->stale = false;
	return 0;
}

int wd_aws_cred_new(const struct wd_aws_cred_conf *conf, struct wd_aws_cred **ret,
		    weightd_error *err)
{
	struct wd_aws_cred *c = calloc(1, sizeof(*c));
	struct wd_aws_found f = { 0 };
	bool oom = false;
	int rc;

	if (!c)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->done, NULL);
	c->refs = 1;
	c->source = conf->source;
	c->credentials_file = wd_strdup_opt(conf->credentials_file, &oom);
	c->config_file = wd_strdup_opt(conf->config_file, &oom);
	c->profile = wd_strdup_opt(conf->profile, &oom);
	c->region = wd_strdup_opt(conf->region, &oom);
	c->ca_file = wd_strdup_opt(conf->ca_file, &oom);
	c->imds_v1 = conf->imds_v1;
	c->timeout_ms = conf->timeout_ms ? conf->timeout_ms : 5000;
	if (oom) {
		wd_aws_cred_unref(c);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	rc = wd_aws_cred_resolve(c, WD_AWS_K_NONE, &f, err);
	if (rc == 0 && adopt(c, &f) < 0)
		rc = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	wd_aws_cred_found_clear(&f);
	if (rc < 0) {
		wd_aws_cred_unref(c);
		return rc;
	}
	*ret = c;
	return 0;
}

struct wd_aws_cred *wd_aws_cred_ref(struct wd_aws_cred *c)
{
	pthread_mutex_lock(&c->lock);
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	return c;
}

void wd_aws_cred_unref(struct wd_aws_cred *c)
{
	int left;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	left = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (left > 0)
		return;
	wd_aws_cred_release(c->cur);
	for (int i = 0; i < WD_AWS_WATCH_MAX; i++)
		free(c->watch[i].path);
	free(c->credentials_file);
	free(c->config_file);
	free(c->profile);
	free(c->region);
	free(c->ca_file);
	pthread_cond_destroy(&c->done);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Do the keys now need fetching again: -1 no, 0 advisory (may go on), 1 mandatory (c->lock). */
static int need(struct wd_aws_cred *c, int64_t now)
{
	const struct wd_aws_keys *k = c->cur;
	int64_t advisory, mandatory;

	if (!k || c->stale)
		return 1;
	if (c->next_check_ms <= wd_clock_ms()) {
		c->next_check_ms = wd_clock_ms() + CHECK_EVERY_MS;
		for (int i = 0; i < WD_AWS_WATCH_MAX; i++) {
			if (stamp_changed(&c->watch[i])) {
				c->stale = true; /* rotated: the old keys may be revoked */
				return 1;
			}
		}
	}
	if (!k->expires)
		return -1;
	wd_aws_cred_windows(k->expires - k->obtained, &advisory, &mandatory);
	if (now >= k->expires - mandatory)
		/* keys a refresh just brought are used until they expire, however short their
		 * life left: the source is asked again only after a pause, not per request */
		return now < k->expires && wd_clock_ms() < c->retry_after_ms ? -1 : 1;
	if (now < k->expires - advisory || wd_clock_ms() < c->retry_after_ms)
		return -1;
	return 0;
}

int wd_aws_cred_get(struct wd_aws_cred *c, struct wd_aws_keys **ret, weightd_error *err)
{
	pthread_mutex_lock(&c->lock);
	for (;;) {
		int n = need(c, now_s());
		struct wd_aws_found f = { 0 };
		int rc;

		if (n < 0 || (n == 0 && c->refreshing)) {
			pthread_mutex_lock(&keys_lock);
			c->cur->refs++;
			pthread_mutex_unlock(&keys_lock);
			*ret = c->cur;
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (c->refreshing) { /* mandatory: wait for the refresh under way */
			pthread_cond_wait(&c->done, &c->lock);
			continue;
		}
		c->refreshing = true;
		pthread_mutex_unlock(&c->lock);
		rc = wd_aws_cred_resolve(c, c->kind, &f, err);
		pthread_mutex_lock(&c->lock);
		c->refreshing = false;
		pthread_cond_broadcast(&c->done);
		if (rc == 0) {
			rc = adopt(c, &f);
			c->refreshes++;
		}
		wd_aws_cred_found_clear(&f);
		if (rc == 0) {
			/* one refresh per call: the new keys serve it whatever their windows say */
			c->retry_after_ms = wd_clock_ms() + ADVISORY_RETRY_MS;
			pthread_mutex_lock(&keys_lock);
			c->cur->refs++;
			pthread_mutex_unlock(&keys_lock);
			*ret = c->cur;
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (rc == -WEIGHTD_E_RESOURCE_EXHAUSTED)
			wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		if (rc < 0 && n == 0 && c->cur) {
			/* advisory: the keys still serve; another try in a while */
			c->retry_after_ms = wd_clock_ms() + ADVISORY_RETRY_MS;
			continue;
		}
		if (rc < 0) {
			pthread_mutex_unlock(&c->lock);
			wd_error_prefix(err, "refreshing credentials");
			return rc;
		}
	}
}

void wd_aws_cred_expired(struct wd_aws_cred *c, const struct wd_aws_keys *k)
{
	pthread_mutex_lock(&c->lock);
	if (c->cur && c->cur->generation <= k->generation)
		c->stale = true;
	pthread_mutex_unlock(&c->lock);
}

void wd_aws_cred_info(struct wd_aws_cred *c, struct wd_aws_cred_info *ret)
{
	memset(ret, 0, sizeof(*ret));
	pthread_mutex_lock(&c->lock);
	if (c->cur) {
		ret->have = true;
		snprintf(ret->source, sizeof(ret->source), "%s", c->what);
		snprintf(ret->access_key, sizeof(ret->access_key), "%s", c->cur->access_key);
		ret->expires = c->cur->expires;
	}
	ret->refreshes = c->refreshes;
	pthread_mutex_unlock(&c->lock);
}
