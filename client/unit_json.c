/* SPDX-License-Identifier: Apache-2.0 */
/* unit_json.c - libweightd's units from JSON: a recipe, or a list of slots with recipes and
 * aliases (weightd_unit_from_json). */
#include "weightd/client.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "recipe.h"
#include "unit.h"

static int ujerr(weightd_error *err, int code, const char *path, const char *what,
		 const char *slot)
{
	int rc = wc_err_set(err, code, "unit JSON at %s: %s", path, what);

	wc_err_about(err, NULL, NULL, slot);
	return rc;
}

/* One entry of "slots" at index i. */
static int unit_json_slot(weightd_unit *u, const json_t *sj, size_t i, weightd_error *err)
{
	static const char *const keys[] = { "name", "dtype", "shape", "recipe", "alias", NULL };
	char path[64], what[160];
	const json_t *name, *dtype, *shape, *recipe, *alias, *v;
	uint64_t dims[WEIGHTD_MAX_DIMS];
	weightd_recipe *r = NULL;
	const char *key, *nm;
	size_t ndim = 0;
	int rc;

	snprintf(path, sizeof(path), "$.slots[%zu]", i);
	if (!json_is_object(sj))
		return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path, "expected a slot object", NULL);
	json_object_foreach((json_t *)sj, key, v) {
		bool ok = false;

		for (size_t k = 0; keys[k]; k++)
			ok |= strcmp(key, keys[k]) == 0;
		if (!ok) {
			snprintf(what, sizeof(what), "unknown key \"%.60s\" (a slot takes \"name\", "
				 "\"dtype\", \"shape\", \"recipe\", \"alias\")", key);
			return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path, what, NULL);
		}
	}
	name = json_object_get(sj, "name");
	if (!json_is_string(name) || !json_string_length(name))
		return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path,
			     "expected a non-empty string \"name\"", NULL);
	nm = json_string_value(name);
	dtype = json_object_get(sj, "dtype");
	shape = json_object_get(sj, "shape");
	recipe = json_object_get(sj, "recipe");
	alias = json_object_get(sj, "alias");
	if (dtype && !json_is_string(dtype))
		return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path, "\"dtype\" must be a dtype name",
			     nm);
	if (shape && !dtype)
		return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path,
			     "\"shape\" is declared only together with \"dtype\"", nm);
	if (shape) {
		size_t n = json_array_size(shape), k;

		if (!json_is_array(shape) || n > WEIGHTD_MAX_DIMS)
			return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path,
				     "\"shape\" must be an array of at most 8 sizes", nm);
		json_array_foreach(shape, k, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path,
					     "\"shape\" must hold non-negative integers", nm);
			dims[k] = (uint64_t)json_integer_value(v);
		}
		ndim = n;
	}
	if (!recipe == !alias)
		return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path,
			     "a slot takes exactly one of \"recipe\" and \"alias\"", nm);
	if (alias && (!json_is_string(alias) || !json_string_length(alias)))
		return ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, path,
			     "\"alias\" must name another slot", nm);
	rc = weightd_unit_slot(u, nm, dtype ? json_string_value(dtype) : NULL, dims, ndim, NULL,
			       err);
	if (rc < 0) {
		wc_err_append(err, " (at %s)", path);
		return rc;
	}
	if (alias)
		return weightd_unit_set_alias(u, nm, json_string_value(alias), err);
	snprintf(path, sizeof(path), "$.slots[%zu].recipe", i);
	rc = wc_recipe_from_jobj(recipe, path, &r, err);
	if (rc < 0) {
		wc_err_about(err, NULL, NULL, nm);
		return rc;
	}
	/* the slot takes the parsed recipe itself (it carries the JSON paths) */
	wc_unit_take_recipe(u, nm, r);
	return 0;
}

int weightd_unit_from_json(weightd_client *c, const char *text, size_t len, weightd_unit **ret,
			   weightd_error *err)
{
	weightd_unit *u = NULL;
	weightd_recipe *r = NULL;
	const json_t *slots, *sj;
	json_error_t je;
	json_t *root;
	const char *key;
	json_t *v;
	size_t i;
	int rc;

	wc_err_clear(err);
	if (!c || !text || !ret)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
				  "weightd_unit_from_json: no client, text or result pointer");
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT, "unit JSON, line %d column %d: %s",
				  je.line, je.column, je.text);
	rc = weightd_unit_new(c, &u, err);
	if (rc < 0)
		goto out;
	if (json_is_object(root) && json_object_get(root, "op")) {
		rc = wc_recipe_from_jobj(root, "$", &r, err);
		if (rc == 0)
			rc = weightd_unit_slot(u, "output", NULL, NULL, 0, NULL, err);
		if (rc >= 0) {
			wc_unit_take_recipe(u, "output", r);
			r = NULL;
			rc = 0;
		}
		goto out;
	}
	if (!json_is_object(root)) {
		rc = ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, "$",
			   "expected a recipe object (with \"op\") or a unit object (with \"slots\")",
			   NULL);
		goto out;
	}
	json_object_foreach(root, key, v)
		if (strcmp(key, "slots") != 0) {
			rc = wc_err_set(err, WEIGHTD_E_INVALID_ARGUMENT,
					"unit JSON at $: unknown key \"%.60s\" (a unit takes \"slots\"; "
					"a recipe takes \"op\")", key);
			goto out;
		}
	slots = json_object_get(root, "slots");
	if (!json_is_array(slots) || json_array_size(slots) == 0) {
		rc = ujerr(err, WEIGHTD_E_INVALID_ARGUMENT, "$.slots",
			   "expected a non-empty array of slots", NULL);
		goto out;
	}
	json_array_foreach(slots, i, sj) {
		rc = unit_json_slot(u, sj, i, err);
		if (rc < 0)
			goto out;
	}
	rc = 0;
out:
	json_decref(root);
	weightd_recipe_free(r);
	if (rc < 0) {
		weightd_unit_free(u);
		return rc;
	}
	*ret = u;
	return 0;
}
