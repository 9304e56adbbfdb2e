/* SPDX-License-Identifier: Apache-2.0 */
/* stindex.c - parsing model.safetensors.index.json: which shard file holds which tensor. */
#include "stindex.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>


/* One path component on Linux (NAME_MAX); <limits.h> is shadowed by src/limits.h here. */
#define SHARD_NAME_MAX 255

static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a real number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	}
	return "an unknown JSON value";
}

/*
 * A shard name must name a file beside the index: not empty, not absolute, no '/', no "..", not
 * ".", and short enough to be one path component. Returns a reason, or NULL when acceptable.
 */
static const char *bad_shard_name(const char *s)
{
	if (!*s)
		return "is empty";
	if (s[0] == '/')
		return "is an absolute path";
	if (strstr(s, ".."))
		return "contains \"..\"";
	if (strchr(s, '/'))
		return "contains '/' (shards must sit beside the index file)";
	if (strcmp(s, ".") == 0)
		return "names the directory itself";
	if (strlen(s) > SHARD_NAME_MAX)
		return "is longer than a file name may be";
	return NULL;
}

void wd_stindex_free(struct wd_stindex *idx)
{
	if (!idx)
		return;
	for (size_t i = 0; i < idx->n_files; i++)
		free(idx->files[i]);
	for (size_t i = 0; i < idx->n_tensors; i++)
		free(idx->tensors[i]);
	free(idx->files);
	free(idx->tensors);
	free(idx->tensor_file);
	memset(idx, 0, sizeof(*idx));
}

/*
 * Builds the result in a local struct and moves it to *ret only on success. Shard names are
 * deduplicated through a small jansson object (name -> file index), so the cost is linear.
 */
int wd_stindex_parse(const char *json, size_t len, const struct wd_limits *lim,
		     struct wd_stindex *ret, weightd_error *err)
{
	static const struct wd_limits def = WD_LIMITS_DEFAULT;
	struct wd_stindex idx = { 0 };
	json_t *root = NULL, *seen = NULL, *wm, *val;
	json_error_t jerr;
	const char *key;
	size_t n;
	int r;

	if (!lim)
		lim = &def;
	if (len > lim->max_index_bytes) {
		r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
				 "index file is %zu bytes, more than the limit of %" PRIu64, len,
				 lim->max_index_bytes);
		goto out;
	}
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_duplicate_key)
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "index file: duplicate key at byte %d (%.200s); a tensor may be mapped only once",
					 jerr.position, jerr.text);
		else
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "index file: not valid JSON at line %d column %d: %.200s",
					 jerr.line, jerr.column, jerr.text);
		goto out;
	}
	if (!json_is_object(root)) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "index file: the top level is %s, expected an object",
				 json_kind(root));
		goto out;
	}
	wm = json_object_get(root, "weight_map");
	if (!wm) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT, "index file: no \"weight_map\"");
		goto out;
	}
	if (!json_is_object(wm)) {
		r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
				 "index file: \"weight_map\" is %s, expected an object of tensor name -> shard file",
				 json_kind(wm));
		goto out;
	}
	n = json_object_size(wm);
	if (n > lim->max_tensors) {
		r = wd_error_set(
			err, WEIGHTD_E_LIMIT_EXCEEDED,
			"index file: weight_map maps %zu tensors, more than the limit of %" PRIu64,
			n, lim->max_tensors);
		goto out;
	}
	idx.tensors = calloc(n ? n : 1, sizeof(*idx.tensors));
	idx.tensor_file = calloc(n ? n : 1, sizeof(*idx.tensor_file));
	seen = json_object();
	if (!idx.tensors || !idx.tensor_file || !seen) {
		r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				 "out of memory for an index of %zu tensors", n);
		goto out;
	}

	json_object_foreach(wm, key, val) {
		const char *shard, *why;
		json_t *fi;

		if (strlen(key) > WD_MAX_NAME) {
			wd_error_about(err, NULL, key);
			r = wd_error_set(
				err, WEIGHTD_E_LIMIT_EXCEEDED,
				"index file: tensor name '%.200s...' is %zu bytes, more than the limit of %d",
				key, strlen(key), WD_MAX_NAME);
			goto out;
		}
		if (!json_is_string(val)) {
			wd_error_about(err, NULL, key);
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "index file: weight_map entry for tensor '%.200s' is %s, expected a shard file name",
					 key, json_kind(val));
			goto out;
		}
		shard = json_string_value(val);
		why = bad_shard_name(shard);
		if (why) {
			wd_error_about(err, NULL, key);
			r = wd_error_set(err, WEIGHTD_E_BAD_CHECKPOINT,
					 "index file: shard file name \"%.200s\" for tensor '%.200s' %s", shard, key, why);
			goto out;
		}
		fi = json_object_get(seen, shard);
		if (!fi) {
			if (idx.n_files >= lim->max_shards) {
				r = wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
						 "index file names more than the limit of %" PRIu32
						 " shard files",
						 lim->max_shards);
				goto out;
			}
			if (idx.n_files % 16 == 0) {
				char **nf = realloc(idx.files, (idx.n_files + 16) * sizeof(*nf));
				if (!nf) {
					r = wd_error_set(
						err, WEIGHTD_E_RESOURCE_EXHAUSTED,
						"out of memory for the index's shard list");
					goto out;
				}
				idx.files = nf;
			}
			idx.files[idx.n_files] = strdup(shard);
			fi = json_integer((json_int_t)idx.n_files);
			if (!idx.files[idx.n_files] || json_object_set_new(seen, shard, fi)) {
				free(idx.files[idx.n_files]);
				r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory for the index's shard list");
				goto out;
			}
			idx.n_files++;
		}
		idx.tensors[idx.n_tensors] = strdup(key);
		if (!idx.tensors[idx.n_tensors]) {
			r = wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
					 "out of memory for the index's tensor names");
			goto out;
		}
		idx.tensor_file[idx.n_tensors] = (uint32_t)json_integer_value(fi);
		idx.n_tensors++;
	}
	*ret = idx;
	memset(&idx, 0, sizeof(idx));
	r = 0;
out:
	wd_stindex_free(&idx);
	json_decref(seen);
	json_decref(root);
	return r;
}
