/* SPDX-License-Identifier: Apache-2.0 */
/* recipe_json.c - libweightd's JSON form of recipes and selections, parsed into the builders. */
#include "recipe.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "err.h"

/* --- JSON -------------------------------------------------------------------------------- */

/*
 * The parser keeps one path buffer ("$.input.inputs[1].select") for the whole walk: each level
 * appends its part before descending and cuts it off after, so deep nesting costs no stack for
 * paths. A path too long for the buffer is cut short ("...") but parsing goes on.
 */
struct jctx {
	weightd_recipe *r;
	weightd_error *err;
	size_t len;
	char path[1024];
};

static size_t jpush(struct jctx *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t jpush(struct jctx *j, const char *fmt, ...)
{
	size_t old = j->len;
	va_list ap;
	int n;

	if (j->len + 4 >= sizeof(j->path))
		return old;
	va_start(ap, fmt);
	n = vsnprintf(j->path + j->len, sizeof(j->path) - j->len, fmt, ap);
	va_end(ap);
	if (n < 0 || j->len + (size_t)n + 4 >= sizeof(j->path)) {
		j->len = sizeof(j->path) - 4;
		memcpy(j->path + j->len, "...", 4);
		j->len += 3;
	} else {
		j->len += (size_t)n;
	}
	return old;
}

static void jpop(struct jctx *j, size_t old)
{
	j->len = old;
	j->path[old] = '\0';
}

static int jerr(struct jctx *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int jerr(struct jctx *j, int code, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return wc_err_set(j->err, code, "recipe JSON at %s: %s", j->path, what);
}

/* A non-negative integer up to max. */
static int juint(struct jctx *j, const json_t *v, uint64_t max, uint64_t *ret)
{
	json_int_t x;

	if (!json_is_integer(v))
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected a non-negative integer");
	x = json_integer_value(v);
	if (x < 0 || (uint64_t)x > max)
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "%lld is out of range (0 to %llu)",
			    (long long)x, (unsigned long long)max);
	*ret = (uint64_t)x;
	return 0;
}

/* An array of at most max_n such integers into out. */
static int juint_array(struct jctx *j, const json_t *v, size_t max_n, uint64_t max,
		       uint64_t *out, size_t *ret_n)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v))
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected an array of integers");
	if (json_array_size(v) > max_n)
		return jerr(j, WEIGHTD_E_RECIPE_TOO_LARGE, "%zu entries given (at most %zu)",
			    json_array_size(v), max_n);
	json_array_foreach(v, i, e) {
		size_t old = jpush(j, "[%zu]", i);
		int r = juint(j, e, max, &out[i]);

		jpop(j, old);
		if (r < 0)
			return r;
	}
	*ret_n = json_array_size(v);
	return 0;
}

/* Every key of obj must be in the NULL-terminated list `allowed`. */
static int jkeys(struct jctx *j, const json_t *obj, const char *const *allowed)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)obj, key, v) {
		char list[160] = "";
		size_t used = 0;
		bool ok = false;

		for (size_t i = 0; allowed[i]; i++)
			ok |= strcmp(key, allowed[i]) == 0;
		if (ok)
			continue;
		for (size_t i = 0; allowed[i] && used < sizeof(list); i++) {
			int n = snprintf(list + used, sizeof(list) - used, "%s\"%s\"",
					 i ? ", " : "", allowed[i]);

			used += n > 0 ? (size_t)n : 0;
		}
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT,
			    "unknown key \"%s\" (this object takes %s)", key, list);
	}
	return 0;
}

static const json_t *jneed(struct jctx *j, const json_t *obj, const char *key, int *rc)
{
	const json_t *v = json_object_get(obj, key);

	if (!v)
		*rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "missing key \"%s\"", key);
	return v;
}

/* [a, b, c] of three integers, the first an axis (u32), the others up to max2. */
static int jtriple(struct jctx *j, const json_t *arg, const char *form, uint64_t max2,
		   uint64_t a[3])
{
	if (!json_is_array(arg) || json_array_size(arg) != 3)
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected [%s]", form);
	for (size_t i = 0; i < 3; i++) {
		size_t old = jpush(j, "[%zu]", i);
		int r = juint(j, json_array_get(arg, i), i == 0 ? UINT32_MAX : max2, &a[i]);

		jpop(j, old);
		if (r < 0)
			return r;
	}
	return 0;
}

static int jsel_arg(struct jctx *j, const char *key, const json_t *arg,
		    struct weightd_selection *sel)
{
	uint64_t a[3];
	size_t old;
	int r;

	if (strcmp(key, "range") == 0) {
		r = jtriple(j, arg, "axis, start, end", (uint64_t)INT64_MAX, a);
		if (r < 0)
			return r;
		if (a[1] >= a[2])
			return jerr(j, WEIGHTD_E_OUT_OF_RANGE, "the range [%llu, %llu) is empty",
				    (unsigned long long)a[1], (unsigned long long)a[2]);
		sel->kind = WEIGHTD__SELECTION__KIND__SEL_RANGE;
		sel->axis = (uint32_t)a[0];
		sel->start = a[1];
		sel->end = a[2];
		return 0;
	}
	if (strcmp(key, "shard") == 0) {
		r = jtriple(j, arg, "axis, rank, world", UINT32_MAX, a);
		if (r < 0)
			return r;
		if (a[2] == 0 || a[1] >= a[2])
			return jerr(j, WEIGHTD_E_OUT_OF_RANGE,
				    "rank %llu of world %llu: the rank must be below the world size",
				    (unsigned long long)a[1], (unsigned long long)a[2]);
		sel->kind = WEIGHTD__SELECTION__KIND__SEL_SHARD;
		sel->axis = (uint32_t)a[0];
		sel->rank = (uint32_t)a[1];
		sel->world = (uint32_t)a[2];
		return 0;
	}
	if (strcmp(key, "indices") == 0) {
		const json_t *list;

		if (!json_is_array(arg) || json_array_size(arg) != 2)
			return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected [axis, [index, ...]]");
		old = jpush(j, "[0]");
		r = juint(j, json_array_get(arg, 0), UINT32_MAX, &a[0]);
		jpop(j, old);
		if (r < 0)
			return r;
		list = json_array_get(arg, 1);
		old = jpush(j, "[1]");
		if (!json_is_array(list) || json_array_size(list) == 0) {
			r = jerr(j, WEIGHTD_E_EMPTY_INPUTS, "expected a non-empty array of indices");
		} else if (json_array_size(list) > WC_MAX_INDICES) {
			r = jerr(j, WEIGHTD_E_RECIPE_TOO_LARGE, "%zu indices (at most %u)",
				 json_array_size(list), WC_MAX_INDICES);
		} else {
			sel->indices = malloc(json_array_size(list) * sizeof(uint64_t));
			r = sel->indices ? juint_array(j, list, WC_MAX_INDICES, (uint64_t)INT64_MAX,
						       sel->indices, &sel->n_indices) :
				wc_err_set(j->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
		}
		jpop(j, old);
		if (r < 0) {
			free(sel->indices);
			sel->indices = NULL;
			return r;
		}
		sel->kind = WEIGHTD__SELECTION__KIND__SEL_INDICES;
		sel->axis = (uint32_t)a[0];
		return 0;
	}
	if (strcmp(key, "elements") == 0) {
		if (!json_is_array(arg) || json_array_size(arg) != 3)
			return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected [start, end, [dim, ...]]");
		for (size_t i = 0; i < 2; i++) {
			old = jpush(j, "[%zu]", i);
			r = juint(j, json_array_get(arg, i), (uint64_t)INT64_MAX, &a[i]);
			jpop(j, old);
			if (r < 0)
				return r;
		}
		if (a[0] >= a[1])
			return jerr(j, WEIGHTD_E_OUT_OF_RANGE, "the elements [%llu, %llu) are empty",
				    (unsigned long long)a[0], (unsigned long long)a[1]);
		old = jpush(j, "[2]");
		r = juint_array(j, json_array_get(arg, 2), WEIGHTD_MAX_DIMS, (uint64_t)INT64_MAX,
				sel->shape, &sel->ndim);
		jpop(j, old);
		if (r < 0)
			return r;
		sel->kind = WEIGHTD__SELECTION__KIND__SEL_ELEMENTS;
		sel->start = a[0];
		sel->end = a[1];
		return 0;
	}
	return jerr(j, WEIGHTD_E_INTERNAL, "selection \"%s\" not handled", key);
}

/* SEL (the current path is the selection's) into sel; on failure nothing is left allocated. */
static int jsel(struct jctx *j, const json_t *v, struct weightd_selection *sel)
{
	const char *key;
	json_t *arg;
	size_t old;
	int r;

	memset(sel, 0, sizeof(*sel));
	if (json_is_string(v)) {
		if (strcmp(json_string_value(v), "full") == 0)
			return 0;
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT,
			    "unknown selection \"%s\" (a string selection can only be \"full\")",
			    json_string_value(v));
	}
	/* "even" goes with "shard" only: the strict split */
	if (json_is_object(v) && json_object_size(v) == 2 && json_object_get(v, "shard") &&
	    json_object_get(v, "even")) {
		const json_t *even = json_object_get(v, "even");

		if (!json_is_boolean(even)) {
			old = jpush(j, ".even");
			r = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected true or false");
			jpop(j, old);
			return r;
		}
		old = jpush(j, ".shard");
		r = jsel_arg(j, "shard", json_object_get(v, "shard"), sel);
		jpop(j, old);
		sel->even = r == 0 && json_is_true(even);
		return r;
	}
	if (!json_is_object(v) || json_object_size(v) != 1)
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT,
			    "expected \"full\" or an object with one key: \"range\", \"indices\", "
			    "\"elements\" or \"shard\"");
	json_object_foreach((json_t *)v, key, arg) {
		if (strcmp(key, "range") && strcmp(key, "indices") && strcmp(key, "elements") &&
		    strcmp(key, "shard"))
			break;
		old = jpush(j, ".%s", key);
		r = jsel_arg(j, key, arg, sel);
		jpop(j, old);
		return r;
	}
	return jerr(j, WEIGHTD_E_INVALID_ARGUMENT,
		    "unknown selection \"%s\" (expected \"range\", \"indices\", \"elements\" or "
		    "\"shard\")", key);
}

static int jnode(struct jctx *j, const json_t *v, int depth);

/* Parse the node's input under `key` (before the node: post-order); its index into *ret. */
static int jinput_at(struct jctx *j, const json_t *obj, const char *key, int depth, int *ret)
{
	const json_t *in;
	size_t old;
	int rc = 0;

	in = jneed(j, obj, key, &rc);
	if (!in)
		return rc;
	old = jpush(j, ".%s", key);
	rc = jnode(j, in, depth + 1);
	jpop(j, old);
	if (rc < 0)
		return rc;
	*ret = rc;
	return 0;
}

static int jinput(struct jctx *j, const json_t *obj, int depth, int *ret)
{
	return jinput_at(j, obj, "input", depth, ret);
}

static int jdtype(struct jctx *j, const json_t *obj, const char **ret)
{
	const json_t *d;
	size_t old;
	int rc = 0;

	d = jneed(j, obj, "dtype", &rc);
	if (!d)
		return rc;
	old = jpush(j, ".dtype");
	if (!json_is_string(d))
		rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected a dtype name such as \"F16\"");
	else if (wd_dtype_from_name(json_string_value(d)) == WD_DTYPE_INVALID)
		rc = jerr(j, WEIGHTD_E_UNSUPPORTED_CAST, "unknown dtype \"%s\"",
			  json_string_value(d));
	else
		*ret = json_string_value(d);
	jpop(j, old);
	return rc;
}

static int jdims(struct jctx *j, const json_t *obj, const char *key, uint64_t max,
		 uint64_t *out, size_t *ret_n)
{
	const json_t *s;
	size_t old;
	int rc = 0;

	s = jneed(j, obj, key, &rc);
	if (!s)
		return rc;
	old = jpush(j, ".%s", key);
	rc = juint_array(j, s, WEIGHTD_MAX_DIMS, max, out, ret_n);
	jpop(j, old);
	return rc;
}

/* Give the node just added its JSON path; passes an error through. */
static int jpath(struct jctx *j, int idx)
{
	if (idx < 0)
		return idx;
	j->r->nodes[idx].path = strdup(j->path);
	if (!j->r->nodes[idx].path)
		return wc_err_set(j->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	return idx;
}

static int jsource(struct jctx *j, const json_t *v)
{
	static const char *const keys[] = { "op", "checkpoint", "tensor", "select", NULL };
	struct weightd_selection sel;
	const json_t *ck, *tn, *se;
	size_t old;
	int rc = 0, idx;

	if ((rc = jkeys(j, v, keys)) < 0)
		return rc;
	if (!(ck = jneed(j, v, "checkpoint", &rc)) || !(tn = jneed(j, v, "tensor", &rc)))
		return rc;
	if (!json_is_string(ck) || !json_string_length(ck) || !json_is_string(tn) ||
	    !json_string_length(tn)) {
		old = jpush(j, json_is_string(ck) && json_string_length(ck) ? ".tensor" :
			    ".checkpoint");
		rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected a non-empty name");
		jpop(j, old);
		return rc;
	}
	se = json_object_get(v, "select");
	if (se) {
		old = jpush(j, ".select");
		rc = jsel(j, se, &sel);
		jpop(j, old);
		if (rc < 0)
			return rc;
	}
	idx = weightd_recipe_source(j->r, json_string_value(ck), json_string_value(tn),
				    se ? &sel : NULL, j->err);
	if (se)
		free(sel.indices);
	return jpath(j, idx);
}

static int jjoin(struct jctx *j, const json_t *v, bool concat, int depth)
{
	static const char *const keys[] = { "op", "axis", "inputs", NULL };
	const json_t *ax, *ins, *e;
	int *inputs, rc = 0, idx;
	size_t i, old;

	if ((rc = jkeys(j, v, keys)) < 0)
		return rc;
	if (!(ax = jneed(j, v, "axis", &rc)) || !(ins = jneed(j, v, "inputs", &rc)))
		return rc;
	if (!json_is_integer(ax) || json_integer_value(ax) < INT32_MIN ||
	    json_integer_value(ax) > INT32_MAX) {
		old = jpush(j, ".axis");
		rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected an axis number");
		jpop(j, old);
		return rc;
	}
	if (!json_is_array(ins) || json_array_size(ins) > WC_MAX_NODES) {
		old = jpush(j, ".inputs");
		rc = jerr(j, json_is_array(ins) ? WEIGHTD_E_RECIPE_TOO_LARGE :
			  WEIGHTD_E_INVALID_ARGUMENT, "expected an array of at most %d recipes",
			  WC_MAX_NODES);
		jpop(j, old);
		return rc;
	}
	inputs = calloc(json_array_size(ins) + 1, sizeof(*inputs));
	if (!inputs)
		return wc_err_set(j->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	json_array_foreach(ins, i, e) {
		old = jpush(j, ".inputs[%zu]", i);
		rc = jnode(j, e, depth + 1);
		jpop(j, old);
		if (rc < 0) {
			free(inputs);
			return rc;
		}
		inputs[i] = rc;
	}
	/* An empty list goes to the daemon as it is; its preflight names the rule (empty inputs). */
	idx = (concat ? weightd_recipe_concat : weightd_recipe_stack)(
		j->r, (int)json_integer_value(ax), inputs, json_array_size(ins), j->err);
	free(inputs);
	return jpath(j, idx);
}

/* Parse one recipe object (the current path is its own): inputs first, then the node itself.
 * Returns the node's index. */
static int jnode(struct jctx *j, const json_t *v, int depth)
{
	static const char *const k_select[] = { "op", "input", "select", NULL };
	static const char *const k_reshape[] = { "op", "input", "shape", NULL };
	static const char *const k_transpose[] = { "op", "input", "perm", NULL };
	static const char *const k_cast[] = { "op", "input", "dtype", "truncate", NULL };
	static const char *const k_view[] = { "op", "input", "dtype", "shape", NULL };
	static const char *const k_dequant[] = { "op", "input", "scale", "block", "dtype", NULL };
	struct weightd_selection sel;
	uint64_t dims[WEIGHTD_MAX_DIMS];
	uint32_t perm[WEIGHTD_MAX_DIMS];
	const char *op, *dtype = NULL;
	const json_t *opv, *se;
	size_t ndim = 0, old;
	int input = -1, scale = -1, rc = 0;

	if (depth > WC_MAX_JSON_DEPTH)
		return jerr(j, WEIGHTD_E_RECIPE_TOO_DEEP, "recipes nest at most %d deep",
			    WC_MAX_JSON_DEPTH);
	if (!json_is_object(v))
		return jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected a recipe object");
	if (!(opv = jneed(j, v, "op", &rc)))
		return rc;
	if (!json_is_string(opv)) {
		old = jpush(j, ".op");
		rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected an operation name");
		jpop(j, old);
		return rc;
	}
	op = json_string_value(opv);

	if (strcmp(op, "source") == 0)
		return jsource(j, v);
	if (strcmp(op, "concat") == 0 || strcmp(op, "stack") == 0)
		return jjoin(j, v, op[0] == 'c', depth);
	if (strcmp(op, "select") == 0) {
		if ((rc = jkeys(j, v, k_select)) < 0 || (rc = jinput(j, v, depth, &input)) < 0)
			return rc;
		if (!(se = jneed(j, v, "select", &rc)))
			return rc;
		old = jpush(j, ".select");
		rc = jsel(j, se, &sel);
		jpop(j, old);
		if (rc < 0)
			return rc;
		rc = weightd_recipe_select(j->r, input, &sel, j->err);
		free(sel.indices);
		return jpath(j, rc);
	}
	if (strcmp(op, "reshape") == 0) {
		if ((rc = jkeys(j, v, k_reshape)) < 0 || (rc = jinput(j, v, depth, &input)) < 0 ||
		    (rc = jdims(j, v, "shape", (uint64_t)INT64_MAX, dims, &ndim)) < 0)
			return rc;
		return jpath(j, weightd_recipe_reshape(j->r, input, dims, ndim, j->err));
	}
	if (strcmp(op, "transpose") == 0) {
		if ((rc = jkeys(j, v, k_transpose)) < 0 || (rc = jinput(j, v, depth, &input)) < 0 ||
		    (rc = jdims(j, v, "perm", UINT32_MAX, dims, &ndim)) < 0)
			return rc;
		for (size_t i = 0; i < ndim; i++)
			perm[i] = (uint32_t)dims[i];
		return jpath(j, weightd_recipe_transpose(j->r, input, perm, ndim, j->err));
	}
	if (strcmp(op, "cast") == 0) {
		const json_t *t = json_object_get(v, "truncate");

		if ((rc = jkeys(j, v, k_cast)) < 0 || (rc = jinput(j, v, depth, &input)) < 0 ||
		    (rc = jdtype(j, v, &dtype)) < 0)
			return rc;
		if (t && !json_is_boolean(t)) {
			old = jpush(j, ".truncate");
			rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT, "expected true or false");
			jpop(j, old);
			return rc;
		}
		return jpath(j, json_is_true(t) ?
					weightd_recipe_cast_truncate(j->r, input, dtype, j->err) :
					weightd_recipe_cast(j->r, input, dtype, j->err));
	}
	if (strcmp(op, "view") == 0) {
		if ((rc = jkeys(j, v, k_view)) < 0 || (rc = jinput(j, v, depth, &input)) < 0 ||
		    (rc = jdtype(j, v, &dtype)) < 0 ||
		    (rc = jdims(j, v, "shape", (uint64_t)INT64_MAX, dims, &ndim)) < 0)
			return rc;
		return jpath(j, weightd_recipe_view(j->r, input, dtype, dims, ndim, j->err));
	}
	if (strcmp(op, "dequant_block") == 0) {
		if ((rc = jkeys(j, v, k_dequant)) < 0 || (rc = jinput(j, v, depth, &input)) < 0 ||
		    (rc = jinput_at(j, v, "scale", depth, &scale)) < 0 ||
		    (rc = jdims(j, v, "block", (uint64_t)INT64_MAX, dims, &ndim)) < 0 ||
		    (rc = jdtype(j, v, &dtype)) < 0)
			return rc;
		return jpath(j, weightd_recipe_dequant_block(j->r, input, scale, dims, ndim, dtype,
							     j->err));
	}
	old = jpush(j, ".op");
	rc = jerr(j, WEIGHTD_E_INVALID_ARGUMENT,
		  "unknown operation \"%s\" (expected source, select, concat, stack, reshape, "
		  "transpose, cast, view or dequant_block)", op);
	jpop(j, old);
	return rc;
}

int wc_recipe_from_jobj(const void *json, const char *path, weightd_recipe **ret,
			weightd_error *err)
{
	struct jctx *j;
	int rc;

	/* on the heap: the path buffer is the only sizeable state and lives for the whole walk */
	j = calloc(1, sizeof(*j));
	if (!j)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	j->err = err;
	jpush(j, "%s", path);
	rc = weightd_recipe_new(&j->r, err);
	if (rc == 0)
		rc = jnode(j, json, 0);
	if (rc < 0) {
		weightd_recipe_free(j->r);
	} else {
		wc_err_clear(err);
		*ret = j->r;
		rc = 0;
	}
	free(j);
	return rc;
}

int weightd_recipe_from_json(const char *text, size_t len, weightd_recipe **ret,
			     weightd_error *err)
{
	json_error_t je;
	json_t *root;
	int rc;

	wc_err_clear(err);
	if (!text || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_recipe_from_json: text or ret is NULL");
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "recipe JSON, line %d column %d: %s", je.line, je.column, je.text);
	rc = wc_recipe_from_jobj(root, "$", ret, err);
	json_decref(root);
	return rc;
}
