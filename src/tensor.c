/* SPDX-License-Identifier: Apache-2.0 */
/* tensor.c - the growable tensor/metadata table shared by the checkpoint parsers. */
#include "tensor.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

void wd_tensor_table_init(struct wd_tensor_table *t)
{
	memset(t, 0, sizeof(*t));
}

void wd_tensor_table_free(struct wd_tensor_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_tensors; i++)
		free(t->tensors[i].name);
	for (size_t i = 0; i < t->n_meta; i++) {
		free(t->meta[i].key);
		free(t->meta[i].value);
		free(t->meta[i].type);
	}
	free(t->tensors);
	free(t->meta);
	memset(t, 0, sizeof(*t));
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	if (ncap > SIZE_MAX / elem)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	*arr = p;
	*cap = ncap;
	return 0;
}

int wd_tensor_table_add(struct wd_tensor_table *t, const struct wd_tensor_info *info)
{
	char *name;

	if (grow((void **)&t->tensors, &t->cap_tensors, t->n_tensors, sizeof(*t->tensors)))
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	name = strdup(info->name ? info->name : "");
	if (!name)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	t->tensors[t->n_tensors] = *info;
	t->tensors[t->n_tensors].name = name;
	t->n_tensors++;
	return 0;
}

int wd_tensor_table_add_meta(struct wd_tensor_table *t, const char *key, const char *value,
			     const char *type)
{
	struct wd_meta m;

	if (grow((void **)&t->meta, &t->cap_meta, t->n_meta, sizeof(*t->meta)))
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	m.key = strdup(key ? key : "");
	m.value = strdup(value ? value : "");
	m.type = strdup(type ? type : "");
	if (!m.key || !m.value || !m.type) {
		free(m.key);
		free(m.value);
		free(m.type);
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	t->meta[t->n_meta++] = m;
	return 0;
}
