/* SPDX-License-Identifier: Apache-2.0 */
/* aws_cred.h - `wd_aws_cred_*` (aws_cred.c, aws_cred_sources.c): the AWS credential chain,
 * refreshed before expiry and re-read when its files change. */
#ifndef WD_AWS_CRED_H
#define WD_AWS_CRED_H

#include <stdbool.h>
#include <stdint.h>

#include <weightd/error.h>

/*
 * Where S3 keys come from. AUTO walks botocore's chain and takes the first source that applies:
 *   1. the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN);
 *   2. the profile's role_arn with source_profile (STS AssumeRole signed with that profile's keys);
 *   3. web identity: AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE (+ AWS_ROLE_SESSION_NAME), or the
 *      profile's role_arn + web_identity_token_file, by STS AssumeRoleWithWebIdentity;
 *   4. the shared credentials file, then the config file: the profile's keys;
 *   5. container credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI or _RELATIVE_URI, with
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN or _TOKEN_FILE;
 *   6. EC2 instance metadata, IMDSv2 (a token by PUT, then the role's keys); IMDSv1 only with
 *      imds_v1, and never with AWS_EC2_METADATA_DISABLED=true.
 * A pinned source (ENV ... FILE) is that one alone; FILE covers 2-4.
 */
enum wd_aws_source {
	WD_AWS_AUTO = 0,
	WD_AWS_ENV,
	WD_AWS_WEB_IDENTITY,
	WD_AWS_CONTAINER,
	WD_AWS_IMDS,
	WD_AWS_FILE,
};

/* The config value's source ("auto", "env", "web-identity", "container", "imds", "file"); -1. */
int wd_aws_cred_source_parse(const char *s);

/* How to resolve. Strings are copied by wd_aws_cred_new; NULL picks the standard default. */
struct wd_aws_cred_conf {
	enum wd_aws_source source;
	const char
		*credentials_file; /* NULL: AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials */
	const char *config_file;   /* NULL: AWS_CONFIG_FILE, else ~/.aws/config */
	const char *profile;	   /* NULL: AWS_PROFILE, else "default" */
	const char *region;	   /* STS's region (NULL: AWS_REGION, AWS_DEFAULT_REGION) */
	const char *ca_file;	   /* verifies https credential endpoints (NULL: the system's) */
	bool imds_v1;		   /* IMDS without a token when the PUT is refused */
	unsigned timeout_ms;	   /* per credential request; default 5,000 (IMDS: 1,000) */
};

/* Keys at one moment: immutable, reference-counted (wd_aws_cred_release). */
struct wd_aws_keys {
	char *access_key, *secret_key;
	char *session_token; /* or NULL */
	int64_t expires;     /* Unix seconds; 0: never */
	int64_t obtained;    /* Unix seconds */
	const char *source;  /* "environment", "web identity", ... (static) */
	uint64_t generation; /* 1 for the first keys, +1 per refresh or rotation */
	int refs;
};

#define WD_AWS_INFO_KEY_MAX 129

/* What describe and the logs may show: never a secret or a token. */
struct wd_aws_cred_info {
	char source[128]; /* the source and what it read ("web identity (role arn:...)") */
	char access_key[WD_AWS_INFO_KEY_MAX];
	int64_t expires;    /* Unix seconds; 0: never */
	uint64_t refreshes; /* keys fetched again (refresh, rotation, an expired token) */
	bool have;	    /* false: no source applied (AUTO; requests go unsigned) */
};

struct wd_aws_cred;

/*
 * Resolve once (blocking: files, and the network for STS, container and IMDS sources). 0 and *ret;
 * -WEIGHTD_E_NOT_FOUND when AUTO found no source (the caller goes unsigned); or the error of the
 * source that applied or was pinned, naming it and why ("web identity: STS said AccessDenied:
 * ...", "IMDS: no role attached", "token file ...: unreadable (mode 0640, owner uid 0)").
 */
int wd_aws_cred_new(const struct wd_aws_cred_conf *conf, struct wd_aws_cred **ret,
		    weightd_error *err);
struct wd_aws_cred *wd_aws_cred_ref(struct wd_aws_cred *c);
void wd_aws_cred_unref(struct wd_aws_cred *c);

/*
 * Keys to sign one request with, valid now. Temporary keys are fetched again ahead of their
 * expiry: inside the advisory window one caller refreshes while the others go on with the keys
 * they have (a failure is ignored); inside the mandatory window every caller waits for that one
 * refresh. Files the keys came from are checked for a change at most once a second, and a
 * change is read at once. Any thread (never the event loop: it may block on the network).
 */
int wd_aws_cred_get(struct wd_aws_cred *c, struct wd_aws_keys **ret, weightd_error *err);
void wd_aws_cred_release(struct wd_aws_keys *k);

/* A store answered ExpiredToken to a request signed with k: the next get fetches new keys
 * (unless newer ones than k are there already). */
void wd_aws_cred_expired(struct wd_aws_cred *c, const struct wd_aws_keys *k);

void wd_aws_cred_info(struct wd_aws_cred *c, struct wd_aws_cred_info *ret);

/* Test hook: how the refresh windows scale for keys living `lifetime` seconds (botocore's 15 and
 * 10 minutes for keys of an hour or more, a quarter and a sixth of shorter lifetimes). */
void wd_aws_cred_windows(int64_t lifetime, int64_t *advisory, int64_t *mandatory);

#endif
