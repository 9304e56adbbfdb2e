/* SPDX-License-Identifier: Apache-2.0 */
/* aws_cred_int.h - what aws_cred.c and aws_cred_sources.c share: the provider's insides and the
 * resolution of one source. */
#ifndef WD_AWS_CRED_INT_H
#define WD_AWS_CRED_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "aws_cred.h"
#include "aws_parse.h"

#define WD_AWS_WATCH_MAX 2 /* files whose change means new keys: credentials and config */

/* A watched file as last seen (all zero: it did not exist). */
struct wd_aws_stamp {
	char *path;
	dev_t dev;
	ino_t ino;
	off_t size;
	int64_t mtime_ns, ctime_ns;
};

/* Which concrete source resolved: it is the one asked again on a refresh. */
enum wd_aws_kind {
	WD_AWS_K_NONE = 0,
	WD_AWS_K_ENV,
	WD_AWS_K_ASSUME_ROLE,
	WD_AWS_K_WEB_IDENTITY,
	WD_AWS_K_PROFILE,
	WD_AWS_K_CONTAINER,
	WD_AWS_K_IMDS,
};

/* What one resolution found. */
struct wd_aws_found {
	enum wd_aws_kind kind;
	const char *source; /* its name for the keys ("web identity", ...) */
	char what[128];	    /* the source with what it read, as shown */
	struct wd_aws_parsed keys;
	char *watch[WD_AWS_WATCH_MAX]; /* files to watch (malloc'd), or NULL */
};

struct wd_aws_cred {
	pthread_mutex_t lock;
	pthread_cond_t done;
	int refs;
	/* the configuration, copied */
	enum wd_aws_source source;
	char *credentials_file, *config_file, *profile, *region, *ca_file;
	bool imds_v1;
	unsigned timeout_ms;
	/* what resolved, and the keys now */
	enum wd_aws_kind kind;
	char what[128];
	struct wd_aws_keys *cur;
	bool refreshing, stale;
	uint64_t refreshes, generation;
	struct wd_aws_stamp watch[WD_AWS_WATCH_MAX];
	uint64_t next_check_ms;
	uint64_t retry_after_ms; /* an advisory refresh failed: not again before this */
};

/*
 * Resolve: the whole chain of c->source when `kind` is WD_AWS_K_NONE, else that one source again
 * (a refresh). 0 and *ret (wd_aws_cred_found_clear), -WEIGHTD_E_NOT_FOUND when nothing applied,
 * or the error of the source that applied. Blocking; no lock held.
 */
int wd_aws_cred_resolve(const struct wd_aws_cred *c, enum wd_aws_kind kind,
			struct wd_aws_found *ret, weightd_error *err);
void wd_aws_cred_found_clear(struct wd_aws_found *f);

#endif
