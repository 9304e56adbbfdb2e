/* state.c - per-weight JSON records in the state directory, and recovery at start. */
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

#define RECORD_MAX_BYTES 65536

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
static int trusted_dir(const char *path, struct wd_error *err)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return wd_error_set(err, WD_E_IO, "cannot use state directory %s: %s", path,
				    strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return wd_error_set(err, WD_E_PERMISSION,
				    "not using state directory %s: it is not a directory (a symlink?)",
				    path);
	if (st.st_uid != geteuid())
		return wd_error_set(err, WD_E_PERMISSION,
				    "not using state directory %s: it is owned by uid %u but weightd runs "
				    "as uid %u (chown it to weightd's user)", path, (unsigned)st.st_uid,
				    (unsigned)geteuid());
	if (st.st_mode & 022)
		return wd_error_set(err, WD_E_PERMISSION,
				    "not using state directory %s: mode %04o lets group or others write "
				    "into it (chmod go-w)", path, (unsigned)(st.st_mode & 07777));
	return 0;
}

int state_init(const char *dir, const char *instance, struct wd_error *err)
{
	char path[4096];

	if (!enabled(dir))
		return 0;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return wd_error_set(err, WD_E_IO, "cannot create state directory %s: %s", dir,
				    strerror(errno));
	inst_dir(dir, instance, path, sizeof(path));
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return wd_error_set(err, WD_E_IO, "cannot create state directory %s: %s", path,
				    strerror(errno));
	if (trusted_dir(dir, err) < 0 || trusted_dir(path, err) < 0)
		return -WD_E_PERMISSION;
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

int state_write(const char *dir, const char *instance, const struct state_record *rec,
		struct wd_error *err)
{
	char key[65], digest[65], path[4096], tmp[4200];
	json_t *o, *shape;
	int r = 0;

	if (!enabled(dir))
		return 0;
	wd_hex(rec->key, 32, key);
	wd_hex(rec->digest, wd_digest_len(rec->digest_alg), digest);
	shape = json_array();
	for (int i = 0; i < rec->ndim; i++)
		json_array_append_new(shape, json_integer((json_int_t)rec->shape[i]));
	o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:o, s:I, s:s, s:s, s:s, s:I, s:I}", "version", 1,
		      "key", key, "digest", digest, "digest_algorithm",
		      wd_digest_name(rec->digest_alg), "dtype", wd_dtype_name(rec->dtype), "shape", shape,
		      "nbytes", (json_int_t)rec->nbytes, "segment", rec->segment, "label", rec->label,
		      "source", rec->source, "generation", (json_int_t)rec->generation, "ino",
		      (json_int_t)rec->ino);
	if (!o)
		return wd_error_set(err, WD_E_EXHAUSTED, "out of memory writing a state record");
	snprintf(path, sizeof(path), "%s/%s/%s.json", dir, instance, key);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(o, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0) {
		unlink(tmp);
		r = wd_error_set(err, WD_E_IO, "cannot write state record %s: %s", path,
				 strerror(errno));
	}
	json_decref(o);
	return r;
}

void state_remove(const char *dir, const char *instance, const uint8_t key[32])
{
	char hex[65], path[4096];

	if (!enabled(dir))
		return;
	wd_hex(key, 32, hex);
	snprintf(path, sizeof(path), "%s/%s/%s.json", dir, instance, hex);
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

/*
 * Parse one record file; false if it is not a valid record. Its segment must be a name weightd
 * makes under this instance's prefix (never an arbitrary shm object), and its file name must be
 * its key.
 */
static bool read_record(const char *path, const char *file, const char *instance,
			struct state_record *rec)
{
	json_t *o = load_record(path), *shape, *v;
	const char *key = NULL, *digest = NULL, *dtype = NULL, *segment = NULL, *label = NULL,
		   *source = NULL, *alg = "sha256";
	json_int_t nbytes = -1, generation = 0, ino = 0;
	bool ok = false;
	size_t i;

	if (!o)
		return false;
	memset(rec, 0, sizeof(*rec));
	if (json_unpack(o, "{s:s, s:s, s?s, s:s, s:o, s:I, s:s, s:s, s:s, s:I, s?I}", "key", &key,
			"digest", &digest, "digest_algorithm", &alg, "dtype", &dtype, "shape", &shape,
			"nbytes", &nbytes, "segment", &segment, "label", &label, "source", &source,
			"generation", &generation, "ino", &ino) < 0)
		goto out;
	rec->digest_alg = wd_digest_from_name(alg);
	if (rec->digest_alg == WD_DIGEST_NONE)
		goto out;
	if (!hex_decode(key, rec->key, 32) ||
	    !hex_decode(digest, rec->digest, wd_digest_len(rec->digest_alg)) || nbytes < 0 ||
	    !json_is_array(shape) || json_array_size(shape) > WD_MAX_DIMS)
		goto out;
	if (!wd_segment_name_matches(instance, segment) || strlen(file) != 64 + 5 ||
	    strncmp(file, key, 64) != 0)
		goto out;
	rec->dtype = wd_dtype_from_name(dtype);
	if (rec->dtype == WD_DTYPE_INVALID)
		goto out;
	json_array_foreach(shape, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			goto out;
		rec->shape[i] = (uint64_t)json_integer_value(v);
	}
	rec->ndim = (int)json_array_size(shape);
	rec->nbytes = (uint64_t)nbytes;
	rec->generation = (uint64_t)generation;
	rec->ino = ino > 0 ? (uint64_t)ino : 0;
	snprintf(rec->segment, sizeof(rec->segment), "%s", segment);
	snprintf(rec->label, sizeof(rec->label), "%s", label);
	snprintf(rec->source, sizeof(rec->source), "%s", source);
	ok = true;
out:
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
		  int (*adopt)(const struct state_record *rec, void *arg), void *arg,
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
			struct state_record rec;
			size_t len = strlen(e->d_name);

			if (e->d_name[0] == '.')
				continue;
			snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
			if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) {
				unlink(file); /* a temp file a crash left behind */
				continue;
			}
			if (!read_record(file, e->d_name, instance, &rec) || adopt(&rec, arg) != 0) {
				unlink(file);
				continue;
			}
			if (k.n == k.cap) {
				size_t ncap = k.cap ? k.cap * 2 : 64;
				char **nn = realloc(k.names, ncap * sizeof(*nn));
				if (!nn)
					break;
				k.names = nn;
				k.cap = ncap;
			}
			k.names[k.n] = strdup(rec.segment);
			if (k.names[k.n])
				k.n++;
			adopted++;
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
