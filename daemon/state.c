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

static bool hex_decode(const char *hex, uint8_t *out, size_t n)
{
	if (!hex || strlen(hex) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return false;
		out[i] = (uint8_t)v;
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

int state_write(const char *dir, const char *instance, const struct state_segment *rec,
		weightd_error *err)
{
	char path[4096], tmp[4200];
	json_t *o = NULL, *ws = NULL;
	int r = 0;

	if (!enabled(dir))
		return 0;
	if (!record_path(dir, instance, rec->segment, path, sizeof(path)))
		return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "no state record for segment name \"%s\"",
				    rec->segment);
	ws = json_array();
	for (size_t i = 0; ws && i < rec->n_weights; i++) {
		const struct state_weight *w = &rec->weights[i];
		char key[65], digest[65];
		json_t *shape = json_array(), *wo;

		wd_hex(w->key, 32, key);
		wd_hex(w->digest, wd_digest_len(w->digest_alg), digest);
		for (int k = 0; shape && k < w->ndim; k++)
			json_array_append_new(shape, json_integer((json_int_t)w->shape[k]));
		wo = json_pack("{s:s, s:s, s:s, s:s, s:o, s:I, s:I, s:s}", "key", key, "digest", digest,
			       "digest_algorithm", wd_digest_name(w->digest_alg),
			       "dtype", wd_dtype_name(w->dtype), "shape", shape, "nbytes",
			       (json_int_t)w->nbytes, "offset", (json_int_t)w->offset, "label",
			       w->label ? w->label : "");
		if (!wo || json_array_append_new(ws, wo) < 0) {
			json_decref(ws);
			ws = NULL;
		}
	}
	if (ws)
		o = json_pack("{s:i, s:s, s:s, s:I, s:I, s:I, s:o}", "version", 2, "segment",
			      rec->segment, "source", rec->source, "generation",
			      (json_int_t)rec->generation, "size", (json_int_t)rec->size, "ino",
			      (json_int_t)rec->ino, "weights", ws);
	if (!o)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory writing a state record");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(o, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0) {
		unlink(tmp);
		r = wd_error_set(err, WEIGHTD_E_IO, "cannot write state record %s: %s", path,
				 strerror(errno));
	}
	json_decref(o);
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
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    st.st_size <= RECORD_MAX_BYTES)
		o = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
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
};

static int unlink_unkept(const char *name, uint64_t size, void *arg)
{
	struct keep *k = arg;

	for (size_t i = 0; i < k->n; i++)
		if (strcmp(k->names[i], name) == 0)
			return 0;
	/* what weightd did not make is left alone (main reports it); what an older weightd made
	 * under key-derived names is removed, never adopted */
	if ((!wd_segment_name_matches(k->prefix, name) && !wd_segment_name_legacy(k->prefix, name)) ||
	    !wd_segment_owned(name))
		return 0;
	if (wd_segment_unlink(name) == 0)
		k->removed++;
	return 0;
}

int state_recover(const char *dir, const char *instance,
		  int (*adopt)(const struct state_segment *rec, void *arg), void *arg,
		  int *ret_removed)
{
	struct keep k = { NULL, 0, 0, instance, 0 };
	char path[4096];
	DIR *d;
	struct dirent *e;
	int adopted = 0;

	if (enabled(dir)) {
		inst_dir(dir, instance, path, sizeof(path));
		d = opendir(path);
		while (d && (e = readdir(d))) {
			char file[4400];
			struct state_segment rec;
			size_t len = strlen(e->d_name);
			int took;

			if (e->d_name[0] == '.')
				continue;
			snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
			if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) {
				unlink(file); /* a temp file a crash left behind */
				continue;
			}
			if (!read_record(file, e->d_name, instance, &rec)) {
				unlink(file);
				continue;
			}
			took = adopt(&rec, arg);
			if (took <= 0) {
				state_segment_fini(&rec);
				unlink(file);
				continue;
			}
			if (k.n == k.cap) {
				size_t ncap = k.cap ? k.cap * 2 : 64;
				char **nn = realloc(k.names, ncap * sizeof(*nn));
				if (!nn) {
					state_segment_fini(&rec);
					break;
				}
				k.names = nn;
				k.cap = ncap;
			}
			k.names[k.n] = strdup(rec.segment);
			if (k.names[k.n])
				k.n++;
			adopted += took;
			state_segment_fini(&rec);
		}
		if (d)
			closedir(d);
	}
	wd_segment_list(instance, unlink_unkept, &k);
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
