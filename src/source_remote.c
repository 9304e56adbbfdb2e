/* SPDX-License-Identifier: Apache-2.0 */
/* source_remote.c - a checkpoint source in object storage or on a web server: its objects pinned
 * by ETag, size and version, headers read by range, payload read through the pin. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "aws_cred.h"
#include "azure.h"
#include "digest.h"
#include "gguf.h"
#include "parallel.h"
#include "remote.h"
#include "safetensors.h"
#include "source_int.h"

#define INDEX_NAME "model.safetensors.index.json"

bool wd_source_is_url(const char *path)
{
	return wd_remote_is_url(path);
}

void wd_source_show_path(const char *path, char *buf, size_t cap)
{
	const char *scheme_end, *host, *rest, *at;
	size_t plen;

	if (!cap)
		return;
	if (!wd_remote_is_url(path)) {
		snprintf(buf, cap, "%s", path);
		return;
	}
	/* scheme://host[:port]/path: userinfo, query and fragment may hold secrets */
	scheme_end = strstr(path, "://");
	host = scheme_end + 3;
	rest = host + strcspn(host, "/?#");
	at = memchr(host, '@', (size_t)(rest - host));
	if (at)
		host = at + 1;
	plen = strcspn(rest, "?#");
	snprintf(buf, cap, "%.*s%.*s%.*s", (int)(scheme_end + 3 - path), path, (int)(rest - host),
		 host, (int)plen, rest);
}

bool wd_source_is_remote(const struct wd_source *src)
{
	return src->remote != NULL;
}

const char *wd_source_location_of(const char *path)
{
	if (strncmp(path, "s3://", 5) == 0)
		return "s3";
	if (strncmp(path, "az://", 5) == 0)
		return "az";
	if (strncmp(path, "https://", 8) == 0)
		return "https";
	return strncmp(path, "http://", 7) == 0 ? "http" : "file";
}

const char *wd_source_location_kind(const struct wd_source *src)
{
	return src->remote ? wd_source_location_of(src->path) : "file";
}

struct wd_remote *wd_source_remote(const struct wd_source *src)
{
	return src->remote;
}

const struct wd_remote_object *wd_source_remote_object(const struct wd_source *src, uint32_t file)
{
	return file < src->n_files ? src->files[file].obj : NULL;
}

/* err's code becomes `code` and its sentence "WHAT: <the sentence it had>". */
static int reword(weightd_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int reword(weightd_error *err, int code, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	if (!err)
		return -code;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	wd_error_prefix(err, "%s", what);
	err->code = code;
	return -code;
}

/* Append a pinned object (taken over: cleared here on failure) as file `name`, with the first
 * bytes read with its pin (prefix, taken over too; NULL: none). */
static int add_object(struct wd_source *src, const char *name, struct wd_remote_object *o,
		      uint8_t *prefix, size_t prefix_len, weightd_error *err)
{
	struct wd_file *nf, *f;

	nf = realloc(src->files, (src->n_files + 1) * sizeof(*nf));
	if (!nf) {
		free(prefix);
		wd_remote_object_clear(o);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s",
				    o->shown);
	}
	src->files = nf;
	f = &src->files[src->n_files++];
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->prefix = prefix;
	f->prefix_len = prefix ? prefix_len : 0;
	f->obj = malloc(sizeof(*f->obj));
	if (f->obj)
		*f->obj = *o;
	else
		wd_remote_object_clear(o);
	f->name = strdup(name);
	f->path = f->obj ? strdup(f->obj->shown) : NULL;
	if (!f->obj || !f->name || !f->path)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s",
				    src->path);
	f->id.size = f->obj->size;
	return 0;
}

int wd_source_remote_member(struct wd_source *src, const char *name, weightd_error *err)
{
	struct wd_remote_object o;
	int r;

	r = wd_remote_stat(src->remote, name, &o, err);
	if (r == -WEIGHTD_E_NOT_FOUND)
		r = reword(err, WEIGHTD_E_BAD_CHECKPOINT, "%s does not exist", name);
	if (r)
		return r;
	return add_object(src, name, &o, NULL, 0, err);
}

struct members {
	struct wd_source *src;
	char *const *names;
	struct wd_remote_object *objs;
	int *rc;
	weightd_error *errs;
	uint8_t **prefix;
	size_t *prefix_len;
};

/* A member pinned with its first WD_SOURCE_REMOTE_PREFIX bytes (the first
 * WD_SOURCE_REMOTE_PREFIX_FILES members): a shard's header usually among them, so that
 * admission costs one request per shard, not three. */
static bool stat_member(void *arg, size_t i)
{
	struct members *m = arg;

	wd_error_clear(&m->errs[i]);
	m->prefix[i] = i < WD_SOURCE_REMOTE_PREFIX_FILES ? malloc(WD_SOURCE_REMOTE_PREFIX) : NULL;
	if (m->prefix[i])
		m->rc[i] = wd_remote_stat_prefix(m->src->remote, m->names[i], m->prefix[i],
						 WD_SOURCE_REMOTE_PREFIX, &m->prefix_len[i],
						 &m->objs[i], &m->errs[i]);
	else
		m->rc[i] = wd_remote_stat(m->src->remote, m->names[i], &m->objs[i], &m->errs[i]);
	if (m->rc[i] < 0)
		m->prefix[i] = (free(m->prefix[i]), NULL);
	if (m->rc[i] == -WEIGHTD_E_NOT_FOUND)
		m->rc[i] = reword(&m->errs[i], WEIGHTD_E_BAD_CHECKPOINT, "%s does not exist",
				  m->names[i]);
	return m->rc[i] == 0;
}

int wd_source_remote_members(struct wd_source *src, char *const *names, size_t n, size_t *ret_added,
			     weightd_error *err)
{
	struct members m = { src, names, NULL, NULL, NULL, NULL, NULL };
	size_t claimed, base = src->n_files, i = 0;
	int r = 0;

	*ret_added = 0;
	m.objs = calloc(n ? n : 1, sizeof(*m.objs));
	m.rc = calloc(n ? n : 1, sizeof(*m.rc));
	m.errs = calloc(n ? n : 1, sizeof(*m.errs));
	m.prefix = calloc(n ? n : 1, sizeof(*m.prefix));
	m.prefix_len = calloc(n ? n : 1, sizeof(*m.prefix_len));
	if (!m.objs || !m.rc || !m.errs || !m.prefix || !m.prefix_len) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s",
				 src->path);
		goto out;
	}
	/* every pin is claimed in order, so the first failure in order is among those claimed */
	claimed = wd_parallel_for(n, WD_SOURCE_REMOTE_WIDTH, stat_member, &m);
	for (; i < claimed; i++) {
		if (m.rc[i]) {
			r = m.rc[i];
			if (err)
				*err = m.errs[i];
			break;
		}
		r = add_object(src, names[i], &m.objs[i], m.prefix[i], m.prefix_len[i], err);
		m.prefix[i] = NULL;
		if (r) {
			i++; /* add_object took the object, appended or not */
			break;
		}
	}
	*ret_added = src->n_files - base;
out:
	for (size_t k = i; m.objs && k < n; k++)
		wd_remote_object_clear(&m.objs[k]);
	for (size_t k = 0; m.prefix && k < n; k++)
		free(m.prefix[k]);
	free(m.prefix);
	free(m.prefix_len);
	free(m.objs);
	free(m.rc);
	free(m.errs);
	return r;
}

int wd_source_remote_head(struct wd_source *src, uint32_t file, uint8_t ret[8], weightd_error *err)
{
	struct wd_file *f = &src->files[file];
	int r;

	if (!f->head_read) {
		if (f->id.size < sizeof(f->head))
			return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					    "%s is %" PRIu64 " bytes, too short for a header",
					    f->path, f->id.size);
		if (f->prefix_len >= sizeof(f->head))
			memcpy(f->head, f->prefix, sizeof(f->head));
		else if ((r = wd_remote_read(src->remote, f->obj, 0, f->head, sizeof(f->head),
					     err)))
			return r;
		f->head_read = true;
	}
	memcpy(ret, f->head, sizeof(f->head));
	return 0;
}

int wd_source_remote_read_st(struct wd_source *src, uint32_t file, const struct wd_limits *lim,
			     struct wd_tensor_table *table, weightd_error *err)
{
	struct wd_file *f = &src->files[file];
	uint8_t head[8] = { 0 }, *buf;
	uint64_t hlen = 0;
	size_t have;
	int r;

	if (f->id.size < sizeof(head)) /* the parser says what is wrong */
		return wd_safetensors_parse(head, 0, f->id.size, file, lim, table, NULL, err);
	r = wd_source_remote_head(src, file, head, err);
	if (r)
		return r;
	for (int b = 7; b >= 0; b--)
		hlen = hlen << 8 | head[b];
	if (hlen > lim->max_header_bytes || hlen > f->id.size - sizeof(head))
		return wd_safetensors_parse(head, sizeof(head), f->id.size, file, lim, table, NULL,
					    err);
	buf = malloc(sizeof(head) + hlen);
	if (!buf)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "out of memory for a %" PRIu64 "-byte safetensors header",
				    hlen);
	memcpy(buf, head, sizeof(head));
	/* what the pin brought is not asked for again */
	have = f->prefix_len > sizeof(head) ? f->prefix_len - sizeof(head) : 0;
	if (have > hlen)
		have = (size_t)hlen;
	if (have)
		memcpy(buf + sizeof(head), f->prefix + sizeof(head), have);
	r = have == hlen ? 0 :
			   wd_remote_read(src->remote, f->obj, sizeof(head) + have,
					  buf + sizeof(head) + have, (size_t)(hlen - have), err);
	free(f->prefix);
	f->prefix = NULL;
	f->prefix_len = 0;
	if (r == 0)
		r = wd_safetensors_parse(buf, sizeof(head) + hlen, f->id.size, file, lim, table,
					 NULL, err);
	free(buf);
	return r;
}

struct gguf_ctx {
	struct wd_remote *remote;
	const struct wd_remote_object *obj;
};

static int gguf_reader(void *ctx, uint8_t *buf, uint64_t n, uint64_t off, weightd_error *err)
{
	const struct gguf_ctx *g = ctx;

	return wd_remote_read(g->remote, g->obj, off, buf, (size_t)n, err);
}

/* True when the URL's last path component ends in ".gguf" (any case). */
static bool named_gguf(const char *shown)
{
	size_t n = strlen(shown);

	return n >= 5 && strcasecmp(shown + n - 5, ".gguf") == 0;
}

/* One object: GGUF by its magic or name, safetensors otherwise. */
static int open_object(struct wd_source *src, const struct wd_limits *lim, weightd_error *err)
{
	struct wd_remote_object o;
	struct wd_file *f;
	uint8_t head[8];
	bool gguf;
	int r;

	uint8_t *prefix = malloc(WD_SOURCE_REMOTE_PREFIX);
	size_t plen = 0;

	/* pinned with its first bytes: a safetensors header among them is not asked for again */
	if (prefix)
		r = wd_remote_stat_prefix(src->remote, NULL, prefix, WD_SOURCE_REMOTE_PREFIX, &plen,
					  &o, err);
	else
		r = wd_remote_stat(src->remote, NULL, &o, err);
	if (r) {
		free(prefix);
		return r;
	}
	r = add_object(src, "", &o, prefix, plen, err);
	if (r)
		return r;
	f = &src->files[0];
	gguf = named_gguf(f->path);
	if (!gguf && f->id.size >= sizeof(head)) {
		r = wd_source_remote_head(src, 0, head, err);
		if (r)
			return r;
		gguf = memcmp(head, "GGUF", 4) == 0;
	}
	if (gguf) {
		struct gguf_ctx g = { src->remote, f->obj };

		free(f->prefix); /* GGUF's metadata is read piece by piece */
		f->prefix = NULL;
		f->prefix_len = 0;
		src->kind = WD_SOURCE_GGUF;
		r = wd_gguf_read_with(gguf_reader, &g, f->id.size, 0, lim, &src->table, err);
	} else {
		src->kind = WD_SOURCE_SAFETENSORS;
		r = wd_source_remote_read_st(src, 0, lim, &src->table, err);
	}
	if (r)
		wd_error_prefix(err, "%s", f->path);
	return r;
}

/* A directory: its index, then every shard it names. There is no listing to fall back on. */
static int open_dir(struct wd_source *src, const struct wd_limits *lim, weightd_error *err)
{
	struct wd_remote_object idx;
	char dir[WD_REMOTE_SHOWN_MAX];
	char *json = NULL;
	size_t dl;
	int r;

	snprintf(dir, sizeof(dir), "%s", src->path);
	dl = strlen(dir);
	if (dl && dir[dl - 1] == '/')
		dir[dl - 1] = '\0'; /* messages add "/" INDEX_NAME */
	r = wd_remote_stat(src->remote, INDEX_NAME, &idx, err);
	if (r == -WEIGHTD_E_NOT_FOUND)
		return reword(err, WEIGHTD_E_NOT_FOUND,
			      "%s/ has no " INDEX_NAME
			      " (a remote directory is read through its index)",
			      dir);
	if (r)
		return r;
	if (idx.size > lim->max_index_bytes) {
		r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				 "%s/" INDEX_NAME " is %" PRIu64
				 " bytes, more than the limit of %" PRIu64,
				 dir, idx.size, lim->max_index_bytes);
		goto out;
	}
	json = malloc((size_t)idx.size + 1);
	if (!json) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				 "out of memory reading %s/" INDEX_NAME, dir);
		goto out;
	}
	r = wd_remote_read(src->remote, &idx, 0, json, (size_t)idx.size, err);
	if (r)
		goto out;
	json[idx.size] = '\0';
	r = wd_source_open_sharded(src, dir, json, (size_t)idx.size, lim, err);
out:
	free(json);
	wd_remote_object_clear(&idx);
	return r;
}

int wd_source_remote_open(struct wd_source *src, const char *url,
			  const struct wd_source_remote_conf *rc, const struct wd_limits *lim,
			  weightd_error *err)
{
	static const struct wd_source_remote_conf none;
	struct wd_aws_cred *cred = NULL;
	struct wd_remote_opts o = { 0 };
	struct wd_azure_opts az = { 0 };
	char *token = NULL;
	bool s3 = strncmp(url, "s3://", 5) == 0;
	int r;

	if (!rc)
		rc = &none;
	o.endpoint = rc->endpoint;
	o.region = rc->region;
	o.path_style = rc->path_style;
	o.ca_file = rc->ca_file && *rc->ca_file ? rc->ca_file : NULL;
	o.allow_http = rc->allow_http;
	o.connect_timeout_ms = rc->connect_timeout_ms;
	o.low_speed_time_s = rc->low_speed_time_s;
	o.retries = rc->retries;
	if (s3) {
		struct wd_aws_cred_conf ac = {
			.source = (enum wd_aws_source)rc->credentials,
			.credentials_file = rc->credentials_file && *rc->credentials_file ?
						    rc->credentials_file :
						    NULL,
			.profile = rc->profile && *rc->profile ? rc->profile : NULL,
			.region = rc->region && *rc->region ? rc->region : NULL,
			.ca_file = o.ca_file,
			.imds_v1 = rc->imds_v1,
		};

		/* a checkpoint that names its credentials file reads that file */
		if (ac.source == WD_AWS_AUTO && ac.credentials_file)
			ac.source = WD_AWS_FILE;
		r = wd_aws_cred_new(&ac, &cred, err);
		if (r == -WEIGHTD_E_NOT_FOUND && ac.source == WD_AWS_AUTO) {
			r = 0; /* no source applies: requests go unsigned */
			wd_error_clear(err);
		} else if (r) {
			wd_error_prefix(err, "%s", src->path);
			goto out;
		}
		o.aws_cred = cred;
	} else if (wd_azure_is_url(url)) {
		int w = wd_azure_source_parse(rc->azure_credentials && *rc->azure_credentials ?
						      rc->azure_credentials :
						      "auto");
		if (w < 0) {
			r = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					 "%s: azure_credentials %s is not one of auto, sas, "
					 "shared-key, workload-identity, client-secret, "
					 "managed-identity, anonymous",
					 src->path, rc->azure_credentials);
			goto out;
		}
		az.source = (enum wd_azure_source)w;
		az.key_file = rc->azure_key_file && *rc->azure_key_file ? rc->azure_key_file : NULL;
		o.azure = &az;
	} else if (rc->token_file && *rc->token_file) {
		r = wd_remote_token(rc->token_file, &token, err);
		if (r) {
			wd_error_prefix(err, "%s", src->path);
			goto out;
		}
		o.bearer_token = token;
	}
	r = wd_remote_open(url, &o, &src->remote, err);
	if (r) {
		src->remote = NULL;
		goto out;
	}
	r = wd_remote_is_dir(src->remote) ? open_dir(src, lim, err) : open_object(src, lim, err);
out:
	wd_aws_cred_unref(cred);
	if (token) {
		explicit_bzero(token, strlen(token));
		free(token);
	}
	return r;
}

int wd_source_remote_check(const struct wd_source *src, uint32_t file, weightd_error *err)
{
	const struct wd_file *f = &src->files[file];
	struct wd_remote_object now;
	int r;

	r = wd_remote_stat(src->remote, f->name[0] ? f->name : NULL, &now, err);
	if (r == -WEIGHTD_E_NOT_FOUND)
		r = reword(err, WEIGHTD_E_SOURCE_CHANGED, "%s is gone", f->path);
	if (r) {
		wd_error_about(err, src->name, NULL);
		return r;
	}
	if (strcmp(now.etag, f->obj->etag) != 0 || now.size != f->obj->size ||
	    strcmp(now.version, f->obj->version) != 0)
		r = wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED,
				 "%s was replaced since it was opened (ETag %s, %" PRIu64
				 " bytes%s%s; pinned %s, %" PRIu64 " bytes)",
				 f->path, now.etag[0] ? now.etag : "none", now.size,
				 now.version[0] ? ", version " : "", now.version,
				 f->obj->etag[0] ? f->obj->etag : "none", f->obj->size);
	wd_remote_object_clear(&now);
	if (r)
		wd_error_about(err, src->name, NULL);
	return r;
}

/*
 * A thread's read-ahead window over one remote object: the last WD_SOURCE_REMOTE_READAHEAD
 * bytes (or fewer, at the object's end) one request brought. Recipes read their inputs in many
 * small pieces (a scale tensor here, an expert's weight there, the three parts of a fused
 * q/k/v), mostly close together in a shard: each piece that falls in the window costs no
 * request. Keyed by the object's URL, ETag and size (its pin: the same key is the same bytes),
 * never by a pointer that a reload could reuse. One buffer per thread, made on first use and
 * freed when the thread ends.
 */
struct readahead {
	char key[WD_REMOTE_ETAG_MAX + 64];
	char *url_copy;
	uint64_t off, len;
	uint8_t *buf;
};

static pthread_key_t ra_key;
static pthread_once_t ra_once = PTHREAD_ONCE_INIT;

static void ra_free(void *arg)
{
	struct readahead *ra = arg;

	if (ra) {
		free(ra->buf);
		free(ra->url_copy);
		free(ra);
	}
}

static void ra_init(void)
{
	if (pthread_key_create(&ra_key, ra_free) != 0)
		ra_key = (pthread_key_t)-1;
}

static struct readahead *ra_get(void)
{
	struct readahead *ra;

	pthread_once(&ra_once, ra_init);
	if (ra_key == (pthread_key_t)-1)
		return NULL;
	ra = pthread_getspecific(ra_key);
	if (ra)
		return ra;
	ra = calloc(1, sizeof(*ra));
	if (ra)
		ra->buf = malloc(WD_SOURCE_REMOTE_READAHEAD);
	if (ra && (!ra->buf || pthread_setspecific(ra_key, ra) != 0)) {
		ra_free(ra);
		return NULL;
	}
	return ra;
}

void wd_source_remote_readahead_drop(void)
{
	struct readahead *ra;

	pthread_once(&ra_once, ra_init);
	if (ra_key != (pthread_key_t)-1 && (ra = pthread_getspecific(ra_key)))
		ra->len = 0;
}

static bool ra_holds(const struct readahead *ra, const struct wd_remote_object *o,
		     const char *key, uint64_t off, size_t len)
{
	return ra->url_copy && ra->len && strcmp(ra->key, key) == 0 &&
	       strcmp(ra->url_copy, o->url) == 0 && off >= ra->off && len <= ra->len &&
	       off - ra->off <= ra->len - len;
}

/*
 * Staged bytes (wd_source_remote_stage): registrations in a list read under a read lock, each
 * searched by binary search. Few are live at once (one per worker staging a recipe's inputs),
 * and a read checks them only while any is.
 */
struct wd_stage {
	struct wd_stage *next;
	int fd;
	const struct wd_stage_span *spans;
	size_t n;
};

static pthread_rwlock_t stage_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct wd_stage *stages;
static unsigned stages_live; /* atomic: registrations in the list */

struct wd_stage *wd_source_remote_stage(int fd, const struct wd_stage_span *spans, size_t n)
{
	struct wd_stage *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->fd = fd;
	st->spans = spans;
	st->n = n;
	pthread_rwlock_wrlock(&stage_lock);
	st->next = stages;
	stages = st;
	__atomic_add_fetch(&stages_live, 1, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&stage_lock);
	return st;
}

void wd_source_remote_unstage(struct wd_stage *st)
{
	struct wd_stage **pp;

	if (!st)
		return;
	pthread_rwlock_wrlock(&stage_lock);
	for (pp = &stages; *pp && *pp != st; pp = &(*pp)->next)
		;
	if (*pp) {
		*pp = st->next;
		__atomic_sub_fetch(&stages_live, 1, __ATOMIC_RELEASE);
	}
	pthread_rwlock_unlock(&stage_lock);
	free(st);
}

/* The span of st that holds [off, off + len) of o, or NULL. */
static const struct wd_stage_span *stage_find(const struct wd_stage *st,
					      const struct wd_remote_object *o, uint64_t off,
					      size_t len)
{
	size_t a = 0, b = st->n; /* the last span at or before (o, off) is below b */
	const struct wd_stage_span *s;

	while (a < b) {
		size_t m = a + (b - a) / 2;
		const struct wd_stage_span *x = &st->spans[m];

		if ((uintptr_t)x->obj < (uintptr_t)o || (x->obj == o && x->off <= off))
			a = m + 1;
		else
			b = m;
	}
	if (!a)
		return NULL;
	s = &st->spans[a - 1];
	return s->obj == o && off >= s->off && len <= s->len && off - s->off <= s->len - len ? s :
											       NULL;
}

/* Is [off, off + len) of o staged? Then it is now in buf. A staged copy that cannot be read
 * (it is a memfd: hardly ever) is as good as none: the store is asked. */
static bool stage_read(const struct wd_remote_object *o, void *buf, size_t len, uint64_t off)
{
	bool done = false;

	if (!__atomic_load_n(&stages_live, __ATOMIC_ACQUIRE))
		return false;
	pthread_rwlock_rdlock(&stage_lock);
	for (const struct wd_stage *st = stages; st && !done; st = st->next) {
		const struct wd_stage_span *s = stage_find(st, o, off, len);
		uint64_t at;
		size_t got = 0;

		if (!s)
			continue;
		at = s->at + (off - s->off);
		while (got < len) {
			ssize_t k = pread(st->fd, (uint8_t *)buf + got, len - got,
					  (off_t)(at + got));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			got += (size_t)k;
		}
		done = got == len;
	}
	pthread_rwlock_unlock(&stage_lock);
	return done;
}

int wd_source_remote_pread(const struct wd_source *src, uint32_t file, void *buf, size_t len,
			   uint64_t off, weightd_error *err)
{
	const struct wd_remote_object *o = src->files[file].obj;
	struct readahead *ra = len < WD_SOURCE_REMOTE_READAHEAD ? ra_get() : NULL;
	char key[sizeof(ra->key)];
	uint64_t want;
	int r;

	if (stage_read(o, buf, len, off))
		return 0;
	if (!ra || off > o->size || len > o->size - off) {
		r = wd_remote_read(src->remote, o, off, buf, len, err);
		goto out;
	}
	snprintf(key, sizeof(key), "%s/%" PRIu64, o->etag, o->size);
	if (!ra_holds(ra, o, key, off, len)) {
		want = o->size - off < WD_SOURCE_REMOTE_READAHEAD ? o->size - off :
								     WD_SOURCE_REMOTE_READAHEAD;
		ra->len = 0;
		if (!ra->url_copy || strcmp(ra->url_copy, o->url) != 0) {
			free(ra->url_copy);
			ra->url_copy = strdup(o->url);
		}
		r = ra->url_copy ? wd_remote_read(src->remote, o, off, ra->buf, (size_t)want, err) :
				   wd_remote_read(src->remote, o, off, buf, len, err);
		if (r || !ra->url_copy)
			goto out;
		snprintf(ra->key, sizeof(ra->key), "%s", key);
		ra->off = off;
		ra->len = want;
	}
	memcpy(buf, ra->buf + (off - ra->off), len);
	r = 0;
out:
	if (r)
		wd_error_about(err, src->name, NULL);
	return r;
}

static void put_str(struct wd_sha256 *s, const char *str)
{
	uint32_t n = (uint32_t)strlen(str);
	uint8_t b[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };

	wd_sha256_update(s, b, 4);
	wd_sha256_update(s, str, n);
}

/*
 * After the kind and file count: the tag "remote" (a local file's name length could never be
 * 0xffffffff), then per object its shown URL, ETag, version id (length-prefixed) and size (u64
 * little-endian). The URL's query is left out: a presigned URL is re-signed, the object is not.
 */
void wd_source_remote_identity(const struct wd_source *src, struct wd_sha256 *s)
{
	static const uint8_t tag[4] = { 0xff, 0xff, 0xff, 0xff };

	wd_sha256_update(s, tag, sizeof(tag));
	put_str(s, "remote");
	for (size_t i = 0; i < src->n_files; i++) {
		const struct wd_remote_object *o = src->files[i].obj;
		uint8_t b[8];

		put_str(s, o->shown);
		put_str(s, o->etag);
		put_str(s, o->version);
		for (int k = 0; k < 8; k++)
			b[k] = (uint8_t)(o->size >> (8 * k));
		wd_sha256_update(s, b, 8);
	}
}

void wd_source_remote_free(struct wd_source *src)
{
	for (size_t i = 0; i < src->n_files; i++) {
		free(src->files[i].prefix);
		src->files[i].prefix = NULL;
		wd_remote_object_clear(src->files[i].obj);
		free(src->files[i].obj);
		src->files[i].obj = NULL;
	}
	wd_remote_free(src->remote);
	src->remote = NULL;
}
