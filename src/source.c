/* SPDX-License-Identifier: Apache-2.0 */
/* source.c - a checkpoint source: one safetensors file, a sharded directory, or a GGUF file. */
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checked.h"
#include "digest.h"
#include "gguf.h"
#include "pagedrop.h"
#include "parallel.h"
#include "safetensors.h"
#include "source_int.h"
#include "stindex.h"
#include "wd_hashidx.h"

#define INDEX_NAME "model.safetensors.index.json"
#define ST_SUFFIX ".safetensors"

/* An index entry while shards are checked against the index. */
struct ientry {
	const char *name;
	uint32_t file;
	bool seen;
};

static int errno_code(int e)
{
	switch (e) {
	case ENOENT:
	case ENOTDIR:
		return WEIGHTD_E_NOT_FOUND;
	case EACCES:
	case EPERM:
		return WEIGHTD_E_PERMISSION_DENIED;
	case ENOMEM:
	case EMFILE:
	case ENFILE:
		return WEIGHTD_E_RESOURCE_EXHAUSTED;
	default:
		return WEIGHTD_E_IO;
	}
}

static void id_from_stat(struct wd_file_id *id, const struct stat *st)
{
	id->dev = st->st_dev;
	id->ino = st->st_ino;
	id->size = (uint64_t)st->st_size;
	id->mtime_ns = wd_mtime_ns(st);
}

/* "a/b" joined, or NULL on allocation failure. */
static char *join(const char *a, const char *b)
{
	char *s = NULL;
	size_t la = strlen(a);

	if (asprintf(&s, "%s%s%s", a, (la && a[la - 1] == '/') ? "" : "/", b) < 0)
		return NULL;
	return s;
}

/* An absolute spelling of path without resolving symlinks (the daemon may change directory). */
static char *absolute(const char *path)
{
	char *cwd, *r;

	if (path[0] == '/')
		return strdup(path);
	cwd = getcwd(NULL, 0);
	if (!cwd)
		return NULL;
	r = join(cwd, path);
	free(cwd);
	return r;
}

static int read_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t k = pread(fd, p, len, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -1 : 1;
		p += k;
		len -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/*
 * Append an already opened regular file to src->files, pinning it by the fstat it had when opened.
 * Takes ownership of fd (closed on failure).
 */
static int add_file(struct wd_source *src, const char *name, const char *path, int fd,
		    const struct stat *st, weightd_error *err)
{
	struct wd_file *nf, *f;

	nf = realloc(src->files, (src->n_files + 1) * sizeof(*nf));
	if (!nf) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s", path);
	}
	src->files = nf;
	f = &src->files[src->n_files];
	memset(f, 0, sizeof(*f));
	f->fd = fd;
	f->name = strdup(name);
	f->path = strdup(path);
	id_from_stat(&f->id, st);
	src->n_files++;
	if (!f->name || !f->path)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s", path);
	return 0;
}

/* What a non-regular file is, for messages. */
static const char *file_type(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISDIR(m) ? "a directory" : "not a regular file";
}

/*
 * Open `path` read-only (flags adds e.g. O_NOFOLLOW) and require a regular file. One open, then
 * fstat of what was opened: O_NONBLOCK makes opening a FIFO (or a device) return at once instead
 * of waiting for a writer, and the fstat refuses it. It has no effect on reading a regular file.
 */
static int open_regular(const char *path, int flags, int *ret_fd, struct stat *ret_st,
			weightd_error *err)
{
	struct stat st;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | flags);
	if (fd < 0)
		return wd_error_set(err, errno_code(errno), "cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return wd_error_set(err, errno_code(e), "cannot stat %s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "%s is %s, not a regular file", path,
				    file_type(st.st_mode));
	}
	*ret_fd = fd;
	*ret_st = st;
	return 0;
}

/*
 * Open the member file `name` of the directory dir_abs. Names come from the index (or the
 * directory listing) and are plain file names, checked before we get here, so an index cannot
 * point outside the directory. A symlink placed in the directory is followed wherever it leads:
 * whoever can place one there controls the checkpoint anyway, and the Hugging Face hub cache lays
 * out every snapshot as symlinks into ../../blobs. The file is pinned by the identity of what it
 * resolves to. Appends the file.
 */
static int open_member(struct wd_source *src, const char *dir_abs, const char *name,
		       weightd_error *err)
{
	char *p = NULL;
	struct stat st = { 0 }, lst;
	int fd = -1, r;

	if (src->remote)
		return wd_source_remote_member(src, name, err);
	p = join(dir_abs, name);
	if (!p) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s", name);
		goto out;
	}
	r = open_regular(p, 0, &fd, &st, err);
	if (r == -WEIGHTD_E_NOT_FOUND)
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "%s does not exist", p);
	if (r)
		goto out;
	if (stat(p, &lst) < 0 || lst.st_dev != st.st_dev || lst.st_ino != st.st_ino) {
		r = wd_error_set(err, WEIGHTD_E_SOURCE_CHANGED, "%s changed while it was being opened", p);
		goto out;
	}
	r = add_file(src, name, p, fd, &st, err);
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(p);
	return r;
}

/* Parse the safetensors header of files[i] into `table`, prefixing errors with the file's path. */
static int read_st(struct wd_source *src, uint32_t i, const struct wd_limits *lim,
		   struct wd_tensor_table *table, weightd_error *err)
{
	struct wd_file *f = &src->files[i];
	int r;

	if (f->obj)
		r = wd_source_remote_read_st(src, i, lim, table, err);
	else
		r = wd_safetensors_read(f->fd, f->id.size, i, lim, table, NULL, err);
	if (r)
		wd_error_prefix(err, "%s", f->path);
	return r;
}

/* True when the path's last component ends in ".gguf" (any case, as downloads spell it). */
static bool named_gguf(const char *path)
{
	size_t n = strlen(path);

	return n >= 5 && strcasecmp(path + n - 5, ".gguf") == 0;
}

/*
 * One file given by path: GGUF when it starts with the magic "GGUF" or is named *.gguf (so a
 * damaged GGUF file is reported by the GGUF rules, as a missing magic), safetensors otherwise.
 */
static int open_single_file(struct wd_source *src, const char *abs, int fd, const struct stat *st,
			    const struct wd_limits *lim, weightd_error *err)
{
	uint8_t magic[4];
	int r;

	r = add_file(src, "", abs, fd, st, err);
	if (r)
		return r;
	if ((src->files[0].id.size >= 4 && read_all(fd, magic, 4, 0) == 0 &&
	     memcmp(magic, "GGUF", 4) == 0) || named_gguf(abs)) {
		src->kind = WD_SOURCE_GGUF;
		r = wd_gguf_read(fd, src->files[0].id.size, 0, lim, &src->table, err);
		if (r)
			wd_error_prefix(err, "%s", abs);
		return r;
	}
	src->kind = WD_SOURCE_SAFETENSORS;
	return read_st(src, 0, lim, &src->table, err);
}

static int ientry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ientry *)a)->name, ((const struct ientry *)b)->name);
}

static int tensor_ptr_cmp(const void *a, const void *b)
{
	const struct wd_tensor_info *const *x = a, *const *y = b;

	return strcmp((*x)->name, (*y)->name);
}

static uint64_t name_hash(const char *name)
{
	return XXH3_64bits(name, strlen(name));
}

static bool by_name_eq(const void *ctx, uint32_t pos, const void *key)
{
	const struct wd_source *src = ctx;

	return strcmp(src->by_name[pos]->name, key) == 0;
}

/*
 * Sort the lookup array and reject a name that appears twice (possible only across shards: one
 * file's JSON cannot hold a duplicate key).
 */
static int build_lookup(struct wd_source *src, weightd_error *err)
{
	size_t n = src->table.n_tensors;

	src->by_name = calloc(n ? n : 1, sizeof(*src->by_name));
	if (!src->by_name)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "out of memory for a table of %zu tensors", n);
	for (size_t i = 0; i < n; i++) {
		src->by_name[i] = &src->table.tensors[i];
		if (!wd_add_u64(src->bytes, src->table.tensors[i].nbytes, &src->bytes))
			return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					    "the tensors' sizes add up to more than 64 bits");
	}
	qsort(src->by_name, n, sizeof(*src->by_name), tensor_ptr_cmp);
	for (size_t i = 1; i < n; i++) {
		const struct wd_tensor_info *a = src->by_name[i - 1], *b = src->by_name[i];
		if (strcmp(a->name, b->name) == 0) {
			wd_error_about(err, NULL, a->name);
			return wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "tensor '%.200s' appears in both %s and %s",
					    a->name, src->files[a->file].name, src->files[b->file].name);
		}
	}
	/* without memory for the index, lookups search the sorted array: slower, still right */
	if (n && wd_hashidx_reserve(&src->index, n) == 0)
		for (size_t i = 0; i < n; i++)
			wd_hashidx_put(&src->index, name_hash(src->by_name[i]->name), (uint32_t)i);
	return 0;
}

/*
 * Every shard must hold exactly the tensors the index assigns to it: each tensor found in a shard is
 * looked up in the sorted index (present, same shard), and every index entry must have been found.
 */
static int check_against_index(struct wd_source *src, const struct wd_stindex *idx,
			       weightd_error *err)
{
	struct ientry *ie;
	int r = 0;

	ie = calloc(idx->n_tensors ? idx->n_tensors : 1, sizeof(*ie));
	if (!ie)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory checking the index");
	for (size_t i = 0; i < idx->n_tensors; i++)
		ie[i] = (struct ientry){ idx->tensors[i], idx->tensor_file[i], false };
	qsort(ie, idx->n_tensors, sizeof(*ie), ientry_cmp);

	for (size_t i = 0; i < src->table.n_tensors; i++) {
		const struct wd_tensor_info *t = &src->table.tensors[i];
		struct ientry key = { t->name, 0, false }, *e;

		e = bsearch(&key, ie, idx->n_tensors, sizeof(*ie), ientry_cmp);
		wd_error_about(err, NULL, t->name);
		if (!e) {
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "tensor '%.200s' is in shard %s but " INDEX_NAME " does not list it",
					 t->name, src->files[t->file].name);
			goto out;
		}
		if (e->file != t->file) {
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 INDEX_NAME " assigns tensor '%.200s' to shard %s, but it is in shard %s",
					 t->name, idx->files[e->file], src->files[t->file].name);
			goto out;
		}
		e->seen = true;
	}
	for (size_t i = 0; i < idx->n_tensors; i++) {
		if (!ie[i].seen) {
			wd_error_about(err, NULL, ie[i].name);
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 INDEX_NAME " assigns tensor '%.200s' to shard %s, but that shard has no such tensor",
					 ie[i].name, idx->files[ie[i].file]);
			goto out;
		}
	}
	if (err)
		err->tensor[0] = '\0';
out:
	free(ie);
	return r;
}

/*
 * Read the index file (opened relative to the directory) into a NUL-terminated buffer. When the
 * directory has no index, returns 0 with *ret_buf NULL.
 */
static int read_index(int dirfd, const char *dir_abs, const struct wd_limits *lim, char **ret_buf,
		      size_t *ret_len, weightd_error *err)
{
	struct stat st;
	char *buf = NULL;
	int fd, r;

	fd = openat(dirfd, INDEX_NAME, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return wd_error_set(err, errno_code(errno), "cannot open %s/" INDEX_NAME ": %s", dir_abs,
				    strerror(errno));
	}
	if (fstat(fd, &st) < 0) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "%s/" INDEX_NAME " is not a readable regular file", dir_abs);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "%s/" INDEX_NAME " is %s, not a regular file",
				 dir_abs, file_type(st.st_mode));
		goto out;
	}
	if ((uint64_t)st.st_size > lim->max_index_bytes) {
		r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				 "%s/" INDEX_NAME " is %lld bytes, more than the limit of %" PRIu64,
				 dir_abs, (long long)st.st_size, lim->max_index_bytes);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				 "out of memory reading %s/" INDEX_NAME, dir_abs);
		goto out;
	}
	errno = 0;
	if (read_all(fd, buf, (size_t)st.st_size, 0)) {
		r = wd_error_set(err, WEIGHTD_E_IO, "cannot read %s/" INDEX_NAME ": %s", dir_abs,
				 errno ? strerror(errno) : "the file shrank while being read");
		goto out;
	}
	buf[st.st_size] = '\0';
	*ret_buf = buf;
	*ret_len = (size_t)st.st_size;
	buf = NULL;
	r = 0;
out:
	free(buf);
	close(fd);
	return r;
}

/* The shard headers of a sharded source, parsed side by side (parse_shard). */
struct shard_parse {
	struct wd_source *src;
	const struct wd_limits *lim;
	struct wd_tensor_table *tables; /* one per shard */
	bool *parsed;                   /* tables[i] holds shard i's header (or the error did) */
	int *rc;
	_Atomic uint64_t tensors;       /* parsed so far, for the limit */
	pthread_mutex_t lock;           /* first_err */
	size_t first;                   /* the lowest shard that failed, or SIZE_MAX */
	weightd_error first_err;
};

/*
 * Headers longer than this are left to the join and parsed one at a time: a header may be
 * up to 100 MB of JSON, and its tree takes several times that while it is parsed, so eight at once
 * could take gigabytes. Real shards' headers are tens of kilobytes.
 */
#define PARALLEL_HEADER_MAX ((uint64_t)4 << 20)

static bool parse_shard(void *arg, size_t i)
{
	struct shard_parse *sp = arg;
	uint8_t len8[8];
	uint64_t hlen = 0;
	weightd_error err;

	/* past the limit: the merge below says where, parsing what is left in order */
	if (atomic_load(&sp->tensors) > sp->lim->max_tensors)
		return false;
	wd_error_clear(&err);
	if (sp->src->remote ?
		    wd_source_remote_head(sp->src, (uint32_t)i, len8, &err) == 0 :
		    pread(sp->src->files[i].fd, len8, sizeof(len8), 0) == (ssize_t)sizeof(len8)) {
		for (int b = 7; b >= 0; b--)
			hlen = hlen << 8 | len8[b];   /* little-endian, as the format says */
		if (hlen > PARALLEL_HEADER_MAX)
			return true;
	}
	wd_error_clear(&err);
	sp->rc[i] = read_st(sp->src, (uint32_t)i, sp->lim, &sp->tables[i], &err);
	sp->parsed[i] = true;
	atomic_fetch_add(&sp->tensors, sp->tables[i].n_tensors);
	if (sp->rc[i] == 0)
		return true;
	pthread_mutex_lock(&sp->lock);
	if (i < sp->first) {
		sp->first = i;
		sp->first_err = err;
	}
	pthread_mutex_unlock(&sp->lock);
	return false;
}

/*
 * Every shard the index names is opened, parsed and checked against the index. The shards are
 * opened first, in the index's order; then their headers are parsed on a few
 * threads (a DeepSeek-V3 checkpoint is 163 headers of 92,000 tensors in all, most of a second of
 * JSON on one CPU); then the tables are joined in order. Errors are the sequential walk's: the
 * first shard in order that cannot be parsed, else the first that cannot be opened, and the
 * tensor limit at the shard that crosses it.
 */
int wd_source_open_sharded(struct wd_source *src, const char *dir_abs, const char *json, size_t len,
			   const struct wd_limits *lim, weightd_error *err)
{
	struct wd_stindex idx = { 0 };
	struct shard_parse sp = { .src = src, .lim = lim, .first = SIZE_MAX };
	weightd_error open_err;
	size_t n_open = 0;
	int r, open_r = 0;

	pthread_mutex_init(&sp.lock, NULL);
	r = wd_stindex_parse(json, len, lim, &idx, err);
	if (r) {
		wd_error_prefix(err, "%s/" INDEX_NAME, dir_abs);
		goto out;
	}
	src->kind = WD_SOURCE_SHARDED;
	wd_error_clear(&open_err);
	if (src->remote) {
		/* one round trip each: pinned side by side */
		open_r = wd_source_remote_members(src, idx.files, idx.n_files, &n_open, &open_err);
		if (open_r)
			wd_error_prefix(&open_err, "shard named by " INDEX_NAME);
	}
	for (; !src->remote && n_open < idx.n_files; n_open++) {
		open_r = open_member(src, dir_abs, idx.files[n_open], &open_err);
		if (open_r) {
			wd_error_prefix(&open_err, "shard named by " INDEX_NAME);
			break;
		}
	}
	sp.tables = calloc(n_open ? n_open : 1, sizeof(*sp.tables));
	sp.parsed = calloc(n_open ? n_open : 1, sizeof(*sp.parsed));
	sp.rc = calloc(n_open ? n_open : 1, sizeof(*sp.rc));
	if (!sp.tables || !sp.parsed || !sp.rc) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory reading %s", dir_abs);
		goto out;
	}
	for (size_t i = 0; i < n_open; i++)
		wd_tensor_table_init(&sp.tables[i]);
	/* a remote shard's header is two round trips: wait for many at once, not for a CPU each */
	wd_parallel_for(n_open,
			src->remote ? WD_SOURCE_REMOTE_WIDTH :
			n_open >= 4 ? wd_parallel_width() :
				      1,
			parse_shard, &sp);
	for (size_t i = 0; i < n_open; i++) {
		struct wd_tensor_table *shard = &sp.tables[i];

		if (!sp.parsed[i]) { /* a large header, or not reached: the limit stopped the threads */
			weightd_error e;

			sp.rc[i] = read_st(src, (uint32_t)i, lim, shard, &e);
			if (sp.rc[i])
				sp.first_err = e;
		}
		if (sp.rc[i]) {
			if (err)
				*err = sp.first_err; /* the lowest failure: every shard before i parsed */
			r = sp.rc[i];
			goto out;
		}
		if (src->table.n_tensors + shard->n_tensors > lim->max_tensors) {
			r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
					 "%s: the shards hold more than the limit of %" PRIu64
					 " tensors",
					 dir_abs, lim->max_tensors);
			goto out;
		}
		for (size_t t = 0; t < shard->n_tensors; t++)
			if (wd_tensor_table_add(&src->table, &shard->tensors[t])) {
				r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory for the tensor table");
				goto out;
			}
		/* Shards normally repeat the same __metadata__; the first shard's is the source's. */
		for (size_t m = 0; i == 0 && m < shard->n_meta; m++)
			if (wd_tensor_table_add_meta(&src->table, shard->meta[m].key,
						     shard->meta[m].value, shard->meta[m].type)) {
				r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory for the metadata table");
				goto out;
			}
		wd_tensor_table_free(shard);
	}
	if (open_r) {
		if (err)
			*err = open_err;
		r = open_r;
		goto out;
	}
	r = build_lookup(src, err);
	if (r) {
		wd_error_prefix(err, "%s", dir_abs);
		goto out;
	}
	r = check_against_index(src, &idx, err);
	if (r)
		wd_error_prefix(err, "%s", dir_abs);
out:
	for (size_t i = 0; sp.tables && i < n_open; i++)
		wd_tensor_table_free(&sp.tables[i]);
	free(sp.tables);
	free(sp.parsed);
	free(sp.rc);
	pthread_mutex_destroy(&sp.lock);
	wd_stindex_free(&idx);
	return r;
}

/* Without an index: exactly one *.safetensors file in the directory is the source. */
static int open_lone_file(struct wd_source *src, int dirfd, const char *dir_abs,
			  const struct wd_limits *lim, weightd_error *err)
{
	struct dirent *de;
	char *first = NULL, *second = NULL;
	size_t count = 0;
	DIR *d;
	int dfd, r;

	dfd = dup(dirfd);
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return wd_error_set(err, errno_code(errno), "cannot list %s: %s", dir_abs, strerror(errno));
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		struct stat st;

		if (de->d_name[0] == '.' || l <= strlen(ST_SUFFIX) || strcmp(de->d_name + l - strlen(ST_SUFFIX), ST_SUFFIX))
			continue;
		if (fstatat(dirfd, de->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (count == 0)
			first = strdup(de->d_name);
		else if (count == 1)
			second = strdup(de->d_name);
		count++;
	}
	closedir(d);
	if (count == 0) {
		r = wd_error_set(err, WEIGHTD_E_NOT_FOUND,
				 "%s has no " INDEX_NAME " and no *" ST_SUFFIX " file", dir_abs);
		goto out;
	}
	if (count > 1) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "%s has %zu *" ST_SUFFIX " files (%s, %s, ...) and no " INDEX_NAME " saying how they fit together",
				 dir_abs, count, first ? first : "?", second ? second : "?");
		goto out;
	}
	if (!first) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory listing %s", dir_abs);
		goto out;
	}
	r = open_member(src, dir_abs, first, err);
	if (r)
		goto out;
	src->kind = WD_SOURCE_SAFETENSORS;
	r = read_st(src, 0, lim, &src->table, err);
out:
	free(first);
	free(second);
	return r;
}

/* dirfd: the directory, opened by the caller (owned: closed here). */
static int open_directory(struct wd_source *src, const char *dir_abs, int dirfd,
			  const struct wd_limits *lim, weightd_error *err)
{
	char *json = NULL;
	size_t len = 0;
	int r;

	r = read_index(dirfd, dir_abs, lim, &json, &len, err);
	if (r)
		goto out;
	if (!json) {
		r = open_lone_file(src, dirfd, dir_abs, lim, err);
		goto out;
	}
	r = wd_source_open_sharded(src, dir_abs, json, len, lim, err);
out:
	free(json);
	close(dirfd);
	return r;
}

void wd_source_free(struct wd_source *src)
{
	if (!src)
		return;
	wd_pagedrop_forget(src); /* before its fds close: a queued drop names them */
	wd_source_remote_free(src);
	for (size_t i = 0; i < src->n_files; i++) {
		if (src->files[i].fd >= 0)
			close(src->files[i].fd);
		free(src->files[i].name);
		free(src->files[i].path);
	}
	free(src->files);
	free(src->by_name);
	wd_hashidx_free(&src->index);
	wd_tensor_table_free(&src->table);
	free(src->name);
	free(src->path);
	free(src);
}

static void compute_identity(const struct wd_source *src, uint8_t ret[32]);

int wd_source_open(const char *name, const char *path, const struct wd_limits *lim,
		   struct wd_source **ret, weightd_error *err)
{
	return wd_source_open_at(name, path, NULL, lim, ret, err);
}

int wd_source_open_at(const char *name, const char *path, const struct wd_source_remote_conf *rc,
		      const struct wd_limits *lim, struct wd_source **ret, weightd_error *err)
{
	static const struct wd_limits def = WD_LIMITS_DEFAULT;
	struct wd_source *src = NULL;
	char *abs = NULL;
	struct stat st;
	int fd, r;

	if (!lim)
		lim = &def;
	if (!name || !path || !*path) {
		r = wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "a checkpoint source needs a name and a path");
		goto out;
	}
	src = calloc(1, sizeof(*src));
	if (src && wd_source_is_url(path)) {
		char shown[1024];

		/* a remote path's query may be a signature: only its shown form is kept */
		wd_source_show_path(path, shown, sizeof(shown));
		if (!(src->name = strdup(name)) || !(src->path = strdup(shown))) {
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "out of memory opening %s", shown);
			goto out;
		}
		wd_tensor_table_init(&src->table);
		r = wd_source_remote_open(src, path, rc, lim, err);
		if (r)
			goto out;
		goto opened;
	}
	abs = absolute(path);
	if (!src || !abs || !(src->name = strdup(name)) || !(src->path = strdup(path))) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory opening %s", path);
		goto out;
	}
	wd_tensor_table_init(&src->table);
	/* One open, then fstat of what was opened: never stat-then-open (the path may change in
	 * between), and O_NONBLOCK so a FIFO or device named as a checkpoint cannot block us. The
	 * path itself may be a symlink (operators link checkpoints into place). */
	fd = open(abs, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		r = wd_error_set(err, errno_code(errno), "cannot open %s: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		r = wd_error_set(err, errno_code(errno), "cannot stat %s: %s", path, strerror(errno));
		close(fd);
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		r = open_directory(src, abs, fd, lim, err);
	} else if (S_ISREG(st.st_mode)) {
		r = open_single_file(src, abs, fd, &st, lim, err);
	} else {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "%s is %s, neither a regular file nor a directory", path,
				 file_type(st.st_mode));
		close(fd);
	}
	if (r)
		goto out;
opened:
	if (!src->by_name) {
		r = build_lookup(src, err);
		if (r) {
			wd_error_prefix(err, "%s", src->path);
			goto out;
		}
	}
	/* The files are pinned for the source's life, so their identity never changes: digest it
	 * once here rather than for every recipe leaf of every request. */
	compute_identity(src, src->identity);
	*ret = src;
	src = NULL;
	r = 0;
out:
	if (r)
		wd_error_about(err, name, NULL);
	wd_source_free(src);
	free(abs);
	return r;
}

const char *wd_source_name(const struct wd_source *src)
{
	return src->name;
}

const char *wd_source_path(const struct wd_source *src)
{
	return src->path;
}

enum wd_source_kind wd_source_kind(const struct wd_source *src)
{
	return src->kind;
}

const char *wd_source_kind_name(enum wd_source_kind kind)
{
	switch (kind) {
	case WD_SOURCE_SAFETENSORS: return "safetensors";
	case WD_SOURCE_SHARDED: return "sharded-safetensors";
	case WD_SOURCE_GGUF: return "gguf";
	}
	return "unknown";
}

size_t wd_source_tensor_count(const struct wd_source *src)
{
	return src->table.n_tensors;
}

const struct wd_tensor_info *wd_source_tensor(const struct wd_source *src, size_t i)
{
	return i < src->table.n_tensors ? &src->table.tensors[i] : NULL;
}

/* Names longer than this are not compared: the distance table is on the stack. */
#define SUGGEST_MAX_LEN 256
/* Full distances computed per failed lookup, whatever the checkpoint's size. */
#define SUGGEST_MAX_DISTANCES 2048

/* Levenshtein distance of a and b, or limit + 1 once it is known to exceed limit. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb, size_t limit)
{
	size_t row[SUGGEST_MAX_LEN + 1];

	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0], best;

		row[0] = i;
		best = row[0];
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t v = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < v)
				v = up + 1;
			if (row[j - 1] + 1 < v)
				v = row[j - 1] + 1;
			row[j] = v;
			diag = up;
			if (v < best)
				best = v;
		}
		if (best > limit)
			return limit + 1;
	}
	return row[lb];
}

size_t wd_source_suggest(const struct wd_source *src, const char *tensor, const char **ret,
			 size_t max)
{
	size_t dist[8], n = 0, len, limit, computed = 0;
	int hist[256] = { 0 };

	if (!tensor || !max)
		return 0;
	if (max > 8)
		max = 8;
	len = strlen(tensor);
	if (len > SUGGEST_MAX_LEN)
		return 0;
	/* a quarter of the name may be wrong before a name stops being a plausible typo of it */
	limit = len / 4 < 2 ? 2 : len / 4;
	for (size_t i = 0; i < len; i++)
		hist[(unsigned char)tensor[i]]++;
	for (size_t t = 0; t < src->table.n_tensors && computed < SUGGEST_MAX_DISTANCES; t++) {
		const char *name = src->table.tensors[t].name;
		size_t nl = strlen(name), lb, d, at;
		size_t within = n < max ? limit : dist[n - 1] ? dist[n - 1] - 1 : 0;
		int diff[256];
		size_t l1 = 0;

		if (nl > SUGGEST_MAX_LEN || (nl > len ? nl - len : len - nl) > within)
			continue;
		/* every edit changes at most two letter counts: half their difference bounds it */
		memcpy(diff, hist, sizeof(diff));
		for (size_t i = 0; i < nl; i++)
			diff[(unsigned char)name[i]]--;
		for (size_t c = 0; c < 256; c++)
			l1 += (size_t)(diff[c] < 0 ? -diff[c] : diff[c]);
		lb = (l1 + 1) / 2;
		if (lb > within)
			continue;
		computed++;
		d = edit_distance(tensor, len, name, nl, within);
		if (d > within)
			continue;
		at = n < max ? n++ : n - 1;
		while (at > 0 && dist[at - 1] > d) {
			dist[at] = dist[at - 1];
			ret[at] = ret[at - 1];
			at--;
		}
		dist[at] = d;
		ret[at] = name;
	}
	return n;
}

const struct wd_tensor_info *wd_source_find(const struct wd_source *src, const char *tensor)
{
	size_t lo = 0, hi = src->table.n_tensors;

	if (!tensor)
		return NULL;
	if (src->index.cap) {
		uint32_t at = wd_hashidx_find(&src->index, name_hash(tensor), by_name_eq, src, tensor);

		return at ? src->by_name[at - 1] : NULL;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(tensor, src->by_name[mid]->name);
		if (c == 0)
			return src->by_name[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

size_t wd_source_meta_count(const struct wd_source *src)
{
	return src->table.n_meta;
}

const struct wd_meta *wd_source_meta(const struct wd_source *src, size_t i)
{
	return i < src->table.n_meta ? &src->table.meta[i] : NULL;
}

size_t wd_source_file_count(const struct wd_source *src)
{
	return src->n_files;
}

const char *wd_source_file_name(const struct wd_source *src, uint32_t file)
{
	return file < src->n_files ? src->files[file].name : NULL;
}

const struct wd_file_id *wd_source_file_id(const struct wd_source *src, uint32_t file)
{
	return file < src->n_files ? &src->files[file].id : NULL;
}

uint64_t wd_source_bytes(const struct wd_source *src)
{
	return src->bytes;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * The digest covers a fixed little-endian encoding: kind (u32), file count (u32), then per file
 * its name length (u32) and bytes, dev, inode, size (u64 each) and mtime in ns (i64). If the
 * digest context cannot be created the result is all zeros, which no real identity equals.
 */
static void compute_identity(const struct wd_source *src, uint8_t ret[32])
{
	struct wd_sha256 s = { 0 };
	uint8_t b[40];

	if (wd_sha256_init(&s)) {
		memset(ret, 0, 32);
		return;
	}
	put_le(b, (uint64_t)src->kind, 4);
	put_le(b + 4, src->n_files, 4);
	wd_sha256_update(&s, b, 8);
	if (src->remote) {
		/* its own encoding, which starts with a tag no local source's can hold */
		wd_source_remote_identity(src, &s);
		wd_sha256_final(&s, ret);
		return;
	}
	for (size_t i = 0; i < src->n_files; i++) {
		const struct wd_file *f = &src->files[i];
		size_t nl = strlen(f->name);

		put_le(b, nl, 4);
		wd_sha256_update(&s, b, 4);
		wd_sha256_update(&s, f->name, nl);
		put_le(b, (uint64_t)f->id.dev, 8);
		put_le(b + 8, (uint64_t)f->id.ino, 8);
		put_le(b + 16, f->id.size, 8);
		put_le(b + 24, (uint64_t)f->id.mtime_ns, 8);
		wd_sha256_update(&s, b, 32);
	}
	wd_sha256_final(&s, ret);
}

void wd_source_identity(const struct wd_source *src, uint8_t ret[32])
{
	memcpy(ret, src->identity, 32);
}
