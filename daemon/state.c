/* SPDX-License-Identifier: Apache-2.0 */
/* state.c - per-segment JSON records (the weights in each) in the state directory, and recovery
 * at start. */
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "log.h"
#include "parallel.h"
#include "segment.h"

/* a record lists up to STATE_MAX_WEIGHTS weights of a few hundred bytes each */
#define RECORD_MAX_BYTES (64 << 20)

static bool enabled(const char *dir)
{
	return dir && dir[0];
}

static void inst_dir(const char *dir, const char *instance, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", dir, instance);
}

/*
 * A record names a segment whose fd goes to clients, and recovery unlinks what records do not
 * name: only a directory nobody else can write into may hold them. Owned by this uid, not a
 * symlink, no group or other write bit.
 */
static int trusted_dir(const char *path, weightd_error *err)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return wd_error_set(err, WEIGHTD_E_IO, "cannot use state directory %s: %s", path,
				    strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				    "not using state directory %s: it is not a directory (a symlink?)",
				    path);
	if (st.st_uid != geteuid())
		return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				    "not using state directory %s: it is owned by uid %u but weightd runs "
				    "as uid %u (chown it to weightd's user)", path, (unsigned)st.st_uid,
				    (unsigned)geteuid());
	if (st.st_mode & 022)
		return wd_error_set(err, WEIGHTD_E_PERMISSION_DENIED,
				    "not using state directory %s: mode %04o lets group or others write "
				    "into it (chmod go-w)", path, (unsigned)(st.st_mode & 07777));
	return 0;
}

int state_init(const char *dir, const char *instance, weightd_error *err)
{
	char path[4096];

	if (!enabled(dir))
		return 0;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return wd_error_set(err, WEIGHTD_E_IO, "cannot create state directory %s: %s", dir,
				    strerror(errno));
	inst_dir(dir, instance, path, sizeof(path));
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return wd_error_set(err, WEIGHTD_E_IO, "cannot create state directory %s: %s", path,
				    strerror(errno));
	if (trusted_dir(dir, err) < 0 || trusted_dir(path, err) < 0)
		return -WEIGHTD_E_PERMISSION_DENIED;
	return 0;
}

/* The value of one hex digit (either case), or -1. */
static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Exactly 2n hex digits into n bytes. Not sscanf("%2x"): a call per byte is a large part of a
 * restart with many weights, and it lets signs and spaces through. */
static bool hex_decode(const char *hex, uint8_t *out, size_t n)
{
	if (!hex || strlen(hex) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

/* The record file of a segment: its shm name without the leading '/'. */
static bool record_path(const char *dir, const char *instance, const char *segment, char *out,
			size_t cap)
{
	if (!segment || segment[0] != '/' || strchr(segment + 1, '/') || !segment[1])
		return false;
	return (size_t)snprintf(out, cap, "%s/%s/%s.json", dir, instance, segment + 1) < cap;
}

/*
 * A record is written as text directly, streamed to its temp file through a buffer of
 * OUT_BUFFER bytes: a segment packs up to STATE_MAX_WEIGHTS weights, and building a jansson tree
 * of them cost more than filling their bytes; building the whole text first cost a few hundred
 * bytes a weight, faulted in anew by a fresh daemon. The reader (read_record) still parses it with
 * jansson.
 */
#define OUT_BUFFER ((size_t)256 << 10)

struct out {
	int fd;
	char *p;
	size_t len, cap;
	bool whole; /* kept whole in memory (grown, never flushed) */
	bool failed;
	int err;             /* errno of a failed write, or ENOMEM */
};

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			if (k == 0)
				errno = EIO;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Write out what the buffer holds. */
static void out_flush(struct out *o)
{
	if (o->failed || o->len == 0)
		return;
	if (write_all(o->fd, o->p, o->len) < 0) {
		o->failed = true;
		o->err = errno;
	}
	o->len = 0;
}

/* Room for n more bytes: the buffer is flushed when full, and grows only for a single piece
 * larger than it (none of a record's pieces is, but nothing depends on that). */
static char *out_room(struct out *o, size_t n)
{
	if (o->failed)
		return NULL;
	if (o->whole && o->cap - o->len < n) {
		size_t ncap = o->cap * 2 > o->len + n ? o->cap * 2 : o->len + n;
		char *np = realloc(o->p, ncap);

		if (!np) {
			o->failed = true;
			o->err = ENOMEM;
			return NULL;
		}
		o->p = np;
		o->cap = ncap;
	}
	if (o->cap - o->len < n)
		out_flush(o);
	if (!o->failed && o->cap < n) {
		char *np = realloc(o->p, n);

		if (!np) {
			o->failed = true;
			o->err = ENOMEM;
			return NULL;
		}
		o->p = np;
		o->cap = n;
	}
	return o->failed ? NULL : o->p + o->len;
}

static void out_raw(struct out *o, const char *s, size_t n)
{
	char *d = out_room(o, n);

	if (d) {
		memcpy(d, s, n);
		o->len += n;
	}
}

#define OUT_LIT(o, s) out_raw((o), (s), sizeof(s) - 1)

static void out_u64(struct out *o, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	out_raw(o, tmp + i, sizeof(tmp) - i);
}

/* A JSON string: quotes, backslashes and control characters escaped; other bytes as they are
 * (labels and names are UTF-8). */
static void out_str(struct out *o, const char *s)
{
	static const char hexd[] = "0123456789abcdef";
	size_t n = strlen(s);
	char *d = out_room(o, 2 + 6 * n), *d0 = d;

	if (!d)
		return;
	*d++ = '"';
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\') {
			*d++ = '\\';
			*d++ = (char)*c;
		} else if (*c < 0x20) {
			memcpy(d, "\\u00", 4);
			d[4] = hexd[*c >> 4];
			d[5] = hexd[*c & 15];
			d += 6;
		} else {
			*d++ = (char)*c;
		}
	}
	*d++ = '"';
	o->len += (size_t)(d - d0);
}

static void out_hex(struct out *o, const uint8_t *b, size_t n)
{
	char *d = out_room(o, 2 * n + 3);

	if (!d)
		return;
	d[0] = '"';
	wd_hex(b, n, d + 1); /* writes a terminating NUL, overwritten below */
	d[2 * n + 1] = '"';
	o->len += 2 * n + 2;
}

static void weight_text(struct out *o, const struct state_weight *w)
{
	OUT_LIT(o, "{\"key\":");
	out_hex(o, w->key, 32);
	OUT_LIT(o, ",\"digest\":");
	out_hex(o, w->digest, wd_digest_len(w->digest_alg));
	OUT_LIT(o, ",\"digest_algorithm\":");
	out_str(o, wd_digest_name(w->digest_alg));
	OUT_LIT(o, ",\"dtype\":");
	out_str(o, wd_dtype_name(w->dtype));
	OUT_LIT(o, ",\"shape\":[");
	for (int k = 0; k < w->ndim; k++) {
		if (k)
			OUT_LIT(o, ",");
		out_u64(o, w->shape[k]);
	}
	OUT_LIT(o, "],\"nbytes\":");
	out_u64(o, w->nbytes);
	OUT_LIT(o, ",\"offset\":");
	out_u64(o, w->offset);
	OUT_LIT(o, ",\"label\":");
	out_str(o, w->label ? w->label : "");
	OUT_LIT(o, "}");
}

/* What every record ends with: state_append writes over it. */
#define RECORD_END "]}\n"

static void record_text(struct out *o, const struct state_segment *rec, state_next_weight next,
			void *arg)
{
	struct state_weight sw;
	bool first = true;

	OUT_LIT(o, "{\"version\":2,\"segment\":");
	out_str(o, rec->segment);
	OUT_LIT(o, ",\"source\":");
	out_str(o, rec->source);
	OUT_LIT(o, ",\"generation\":");
	out_u64(o, rec->generation);
	OUT_LIT(o, ",\"size\":");
	out_u64(o, rec->size);
	OUT_LIT(o, ",\"ino\":");
	out_u64(o, rec->ino);
	OUT_LIT(o, ",\"weights\":[");
	while (!o->failed && next(arg, &sw)) {
		if (!first)
			OUT_LIT(o, ",");
		first = false;
		weight_text(o, &sw);
	}
	OUT_LIT(o, RECORD_END);
	out_flush(o);
}

int state_write(const char *dir, const char *instance, const struct state_segment *rec,
		state_next_weight next, void *arg, weightd_error *err)
{
	char path[4096], tmp[4200];
	struct out o = { .fd = -1 };
	int r = 0, e;

	if (!enabled(dir))
		return 0;
	if (!record_path(dir, instance, rec->segment, path, sizeof(path)))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "no state record for segment name \"%s\"",
				    rec->segment);
	o.p = malloc(OUT_BUFFER);
	if (!o.p)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory writing a state record");
	o.cap = OUT_BUFFER;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	o.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (o.fd < 0) {
		e = errno;
		free(o.p);
		return wd_error_set(err, WEIGHTD_E_IO, "cannot write state record %s: %s", path, strerror(e));
	}
	record_text(&o, rec, next, arg);
	if (close(o.fd) < 0 && !o.failed) {
		o.failed = true;
		o.err = errno;
	}
	if (!o.failed && rename(tmp, path) < 0) {
		o.failed = true;
		o.err = errno;
	}
	if (o.failed) {
		unlink(tmp);
		r = o.err == ENOMEM ?
			wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory writing a state record") :
			wd_error_set(err, WEIGHTD_E_IO, "cannot write state record %s: %s", path, strerror(o.err));
	}
	free(o.p);
	return r;
}

/*
 * The record's closing bytes are overwritten by ",{weight}]}\n" in one pwrite, so a reader sees
 * the record before or after (a process killed in a write of a few hundred bytes to a regular
 * file never leaves half of it; /dev/shm, and with it every segment, does not outlive the
 * machine). A record that does not end as state_write ends it is not touched.
 */
int state_append(const char *dir, const char *instance, const char *segment,
		 const struct state_weight *w, weightd_error *err)
{
	char path[4096], tail[sizeof(RECORD_END)];
	struct out o = { .fd = -1, .whole = true };
	const size_t n_end = sizeof(RECORD_END) - 1;
	struct stat st;
	int r = 0, fd, e;

	if (!enabled(dir))
		return 0;
	if (!record_path(dir, instance, segment, path, sizeof(path)))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				    "no state record for segment name \"%s\"", segment);
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		e = errno;
		return wd_error_set(err, WEIGHTD_E_IO, "cannot open state record %s: %s", path,
				    strerror(e));
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)n_end + 1 ||
	    pread(fd, tail, n_end + 1, st.st_size - (off_t)n_end - 1) != (ssize_t)n_end + 1 ||
	    memcmp(tail + 1, RECORD_END, n_end) != 0) {
		close(fd);
		return wd_error_set(err, WEIGHTD_E_IO, "state record %s does not end as written",
				    path);
	}
	/* the text is built whole, then written at once */
	o.p = malloc(1024);
	o.cap = o.p ? 1024 : 0;
	if (tail[0] != '[')
		OUT_LIT(&o, ",");
	weight_text(&o, w);
	OUT_LIT(&o, RECORD_END);
	if (!o.failed) {
		errno = 0;
		if (pwrite(fd, o.p, o.len, st.st_size - (off_t)n_end) != (ssize_t)o.len) {
			o.failed = true;
			o.err = errno ? errno : EIO;
		}
	}
	close(fd);
	if (o.failed)
		r = o.err == ENOMEM ?
			    wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "out of memory writing a state record") :
			    wd_error_set(err, WEIGHTD_E_IO, "cannot append to state record %s: %s",
					 path, strerror(o.err));
	free(o.p);
	return r;
}

void state_remove(const char *dir, const char *instance, const char *segment)
{
	char path[4096];

	if (!enabled(dir) || !record_path(dir, instance, segment, path, sizeof(path)))
		return;
	unlink(path);
}

/* Read a record file: a regular file of ours (not a symlink), at most RECORD_MAX_BYTES. */
static json_t *load_record(const char *path)
{
	json_error_t jerr;
	struct stat st;
	json_t *o = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return NULL;
	/* Read whole, then parse: jansson's json_loadfd reads one byte per read(2), which made
	 * re-adopting a 90,000-weight segment take minutes of system calls. */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    st.st_size <= RECORD_MAX_BYTES) {
		size_t len = (size_t)st.st_size, got = 0;
		char *buf = malloc(len ? len : 1);

		while (buf && got < len) {
			ssize_t n = read(fd, buf + got, len - got);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		/* a file that changed size under us is not the record we checked: nothing */
		if (buf && got == len)
			o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
		free(buf);
	}
	close(fd);
	return o;
}

void state_segment_fini(struct state_segment *rec)
{
	for (size_t i = 0; i < rec->n_weights; i++)
		free(rec->weights[i].label);
	free(rec->weights);
	rec->weights = NULL;
	rec->n_weights = 0;
}

/* One weight of a record; false if it is not valid or does not lie inside the segment. */
static bool read_weight(json_t *wo, uint64_t size, struct state_weight *w)
{
	const char *key = NULL, *digest = NULL, *dtype = NULL, *label = NULL, *alg = "sha256";
	json_int_t nbytes = -1, offset = -1;
	json_t *shape, *v;
	size_t i;

	if (json_unpack(wo, "{s:s, s:s, s?s, s:s, s:o, s:I, s:I, s:s}", "key", &key, "digest", &digest,
			"digest_algorithm", &alg,
			"dtype", &dtype, "shape", &shape, "nbytes", &nbytes, "offset", &offset,
			"label", &label) < 0)
		return false;
	w->digest_alg = wd_digest_from_name(alg); /* a record without one was hashed with SHA-256 */
	if (w->digest_alg == WD_DIGEST_NONE || !hex_decode(key, w->key, 32) ||
	    !hex_decode(digest, w->digest, wd_digest_len(w->digest_alg)) || nbytes < 0 ||
	    offset < 0 || (offset % 64) != 0 || (uint64_t)offset > size ||
	    (uint64_t)nbytes > size - (uint64_t)offset || !json_is_array(shape) ||
	    json_array_size(shape) > WD_MAX_DIMS)
		return false;
	w->dtype = wd_dtype_from_name(dtype);
	if (w->dtype == WD_DTYPE_INVALID)
		return false;
	json_array_foreach(shape, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return false;
		w->shape[i] = (uint64_t)json_integer_value(v);
	}
	w->ndim = (int)json_array_size(shape);
	w->nbytes = (uint64_t)nbytes;
	w->offset = (uint64_t)offset;
	w->label = strdup(label);
	return w->label != NULL;
}

/*
 * Parse one record file; false if it is not a valid record (of this version). Its segment must
 * be a name weightd makes under this instance's prefix (never an arbitrary shm object), and its
 * file name must be that segment's name.
 */
static bool read_record(const char *path, const char *file, const char *instance,
			struct state_segment *rec)
{
	json_t *o = load_record(path), *ws, *wo;
	const char *segment = NULL, *source = NULL;
	json_int_t version = 0, generation = 0, size = -1, ino = 0;
	bool ok = false;
	size_t i;

	memset(rec, 0, sizeof(*rec));
	if (!o)
		return false;
	if (json_unpack(o, "{s:I, s:s, s:s, s:I, s:I, s:I, s:o}", "version", &version, "segment",
			&segment, "source", &source, "generation", &generation, "size", &size,
			"ino", &ino, "weights", &ws) < 0 ||
	    version != 2 || size < 0 || !json_is_array(ws) || json_array_size(ws) == 0 ||
	    json_array_size(ws) > STATE_MAX_WEIGHTS || strlen(segment) >= sizeof(rec->segment))
		goto out;
	rec->weights = calloc(json_array_size(ws), sizeof(*rec->weights));
	if (!rec->weights)
		goto out;
	if (!wd_segment_name_matches(instance, segment) || strlen(file) != strlen(segment) - 1 + 5 ||
	    strncmp(file, segment + 1, strlen(segment) - 1) != 0)
		goto out;
	json_array_foreach(ws, i, wo) {
		if (!read_weight(wo, (uint64_t)size, &rec->weights[i]))
			goto out;
		rec->n_weights++;
	}
	snprintf(rec->segment, sizeof(rec->segment), "%s", segment);
	snprintf(rec->source, sizeof(rec->source), "%s", source);
	rec->generation = (uint64_t)generation;
	rec->size = (uint64_t)size;
	rec->ino = ino > 0 ? (uint64_t)ino : 0;
	ok = true;
out:
	if (!ok)
		state_segment_fini(rec);
	json_decref(o);
	return ok;
}

struct keep {
	char **names;
	size_t n, cap;
	const char *prefix;
	int removed;
	int kept_locked;             /* not adopted, but mapped by a process: left in place */
	struct state_kept *kept;     /* their names, when the caller looks at them again */
};

static int unlink_unkept(const char *name, uint64_t size, void *arg)
{
	struct keep *k = arg;
	uint64_t locked = 0;

	for (size_t i = 0; i < k->n; i++)
		if (strcmp(k->names[i], name) == 0)
			return 0;
	/* what weightd did not make is left alone (main reports it); what an older weightd made
	 * under key-derived names is removed, never adopted */
	if ((!wd_segment_name_matches(k->prefix, name) && !wd_segment_name_legacy(k->prefix, name)) ||
	    !wd_segment_owned(name))
		return 0;
	/* one a process still maps (its locks say so) stays until it lets go: the running weightd
	 * looks again every second when given `kept` (state_kept_recheck), else the next start */
	if (wd_segment_locked_bytes(name, &locked) == 0 && locked) {
		k->kept_locked++;
		if (k->kept) {
			char **nn = realloc(k->kept->names, (k->kept->n + 1) * sizeof(*nn));

			if (nn) {
				k->kept->names = nn;
				nn[k->kept->n] = strdup(name);
				k->kept->n += nn[k->kept->n] != NULL;
			}
		}
		return 0;
	}
	if (wd_segment_unlink(name) == 0)
		k->removed++;
	return 0;
}

/* A batch of records read side by side at start (state_recover). */
#define RECOVER_BATCH 16

struct recover_batch {
	const char *instance;
	char (*path)[4400];
	const char *const *file;
	struct state_segment *rec;
	bool *ok;
};

static bool read_one(void *arg, size_t i)
{
	struct recover_batch *b = arg;

	b->ok[i] = read_record(b->path[i], b->file[i], b->instance, &b->rec[i]);
	return true;
}

/* Remember segment `name` as adopted (its shm object stays); false when out of memory. */
static bool keep_name(struct keep *k, const char *name)
{
	if (k->n == k->cap) {
		size_t ncap = k->cap ? k->cap * 2 : 64;
		char **nn = realloc(k->names, ncap * sizeof(*nn));

		if (!nn)
			return false;
		k->names = nn;
		k->cap = ncap;
	}
	k->names[k->n] = strdup(name);
	if (k->names[k->n])
		k->n++;
	return true;
}

/*
 * Records are read RECOVER_BATCH at a time on a few threads (parsing the JSON of a segment of
 * many thousands of weights is the slow part of a restart), then adopted one by one in directory
 * order on the calling thread.
 */
int state_recover(const char *dir, const char *instance,
		  int (*adopt)(const struct state_segment *rec, void *arg), void *arg,
		  int *ret_removed)
{
	return state_recover_keep(dir, instance, adopt, arg, ret_removed, NULL);
}

size_t state_kept_recheck(struct state_kept *kept)
{
	size_t j = 0;

	for (size_t i = 0; i < kept->n; i++) {
		uint64_t locked = 0;

		if (wd_segment_locked_bytes(kept->names[i], &locked) == 0 && !locked) {
			if (wd_segment_unlink(kept->names[i]) == 0)
				log_info("segment %s is no longer mapped by a process from before the "
					 "restart: removed", kept->names[i]);
			free(kept->names[i]);
			continue;
		}
		kept->names[j++] = kept->names[i];
	}
	kept->n = j;
	return j;
}

void state_kept_free(struct state_kept *kept)
{
	for (size_t i = 0; i < kept->n; i++)
		free(kept->names[i]);
	free(kept->names);
	kept->names = NULL;
	kept->n = 0;
}

int state_recover_keep(const char *dir, const char *instance,
		       int (*adopt)(const struct state_segment *rec, void *arg), void *arg,
		       int *ret_removed, struct state_kept *kept)
{
	struct keep k = { NULL, 0, 0, instance, 0, 0, kept };
	char path[RECOVER_BATCH][4400];
	char names[RECOVER_BATCH][256], dpath[4096];
	const char *files[RECOVER_BATCH];
	struct state_segment recs[RECOVER_BATCH];
	bool ok[RECOVER_BATCH], stop = false;
	struct recover_batch b = { instance, path, files, recs, ok };
	DIR *d = NULL;
	struct dirent *e;
	int adopted = 0;

	if (enabled(dir)) {
		inst_dir(dir, instance, dpath, sizeof(dpath));
		d = opendir(dpath);
	}
	while (d && !stop) {
		size_t n = 0;

		while (n < RECOVER_BATCH && (e = readdir(d))) {
			size_t len = strlen(e->d_name);

			if (e->d_name[0] == '.')
				continue;
			snprintf(path[n], sizeof(path[n]), "%s/%s", dpath, e->d_name);
			/* a temp file a crash left behind, or a name no segment of ours has */
			if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0 || len >= sizeof(names[n])) {
				unlink(path[n]);
				continue;
			}
			memcpy(names[n], e->d_name, len + 1);
			files[n] = names[n];
			n++;
		}
		if (n == 0)
			break;
		wd_parallel_for(n, n > 1 ? wd_parallel_width() : 1, read_one, &b);
		for (size_t i = 0; i < n; i++) {
			int took;

			if (!ok[i]) {
				unlink(path[i]);
				continue;
			}
			took = stop ? 0 : adopt(&recs[i], arg);
			if (took > 0 && !keep_name(&k, recs[i].segment))
				stop = true; /* out of memory: what is not kept is unlinked below */
			else if (took <= 0 && !stop)
				unlink(path[i]);
			if (took > 0)
				adopted += took;
			state_segment_fini(&recs[i]);
		}
	}
	if (d)
		closedir(d);
	wd_segment_list(instance, unlink_unkept, &k);
	if (k.kept_locked)
		log_warn("kept %d segments under %s/%s.* that could not be re-adopted: processes still "
			 "map them; they are removed once unmapped%s", k.kept_locked, wd_segment_dir(),
			 instance, kept ? "" : ", at a later start or by weightd --purge");
	for (size_t i = 0; i < k.n; i++)
		free(k.names[i]);
	free(k.names);
	if (ret_removed)
		*ret_removed = k.removed;
	return adopted;
}

int state_purge(const char *dir, const char *instance)
{
	char path[4096];
	DIR *d;
	struct dirent *e;
	int n = 0;

	if (!enabled(dir))
		return 0;
	inst_dir(dir, instance, path, sizeof(path));
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char file[4400];
		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
		if (unlink(file) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* The marker of a clean stop: a dot file, which recovery passes over. */
static bool clean_path(const char *dir, const char *instance, char *out, size_t cap)
{
	return (size_t)snprintf(out, cap, "%s/%s/.clean", dir, instance) < cap;
}

bool state_was_clean(const char *dir, const char *instance)
{
	char path[4096];
	struct stat st;

	if (!enabled(dir))
		return true;
	return clean_path(dir, instance, path, sizeof(path)) && lstat(path, &st) == 0 &&
	       S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

void state_mark_clean(const char *dir, const char *instance, bool clean)
{
	char path[4096];
	int fd;

	if (!enabled(dir) || !clean_path(dir, instance, path, sizeof(path)))
		return;
	if (!clean) {
		unlink(path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0)
		close(fd);
}
