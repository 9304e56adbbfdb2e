/* SPDX-License-Identifier: Apache-2.0 */
/* unit_columns.c - the columnar forms of a unit: TensorEntries read as entries (beside the
 * UnitEntry messages), and a unit's weights written as PackedWeights. Both are linear in the
 * unit's size and allocate a handful of arrays, not a message per entry. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "unit_columns.h"
#include "wd_limits.h"

/*
 * A plain entry: one source node, the whole tensor, nothing else set. Its key is a function of
 * the source's identity and the tensor's name alone, which the daemon's memo remembers.
 */
static bool plain_entry(const Weightd__UnitEntry *pe)
{
	const Weightd__Recipe *rc = pe->recipe;
	const Weightd__Node *n;

	if (!rc || rc->n_nodes != 1)
		return false;
	n = rc->nodes[0];
	return n->op == WEIGHTD__OP__OP_SOURCE && n->checkpoint && n->checkpoint[0] && n->tensor &&
	       n->tensor[0] && !n->selection && n->n_inputs == 0 && n->axis == 0 &&
	       n->n_shape == 0 && n->n_perm == 0 && n->n_block == 0 && (!n->dtype || !n->dtype[0]);
}

/* The NUL-ended strings of a blob: how many, or SIZE_MAX when the last one is not ended. */
static size_t count_strings(const ProtobufCBinaryData *b)
{
	const uint8_t *p = b->data, *end;
	size_t n = 0;

	if (b->len == 0)
		return 0; /* data may be NULL then: no arithmetic on it */
	end = b->data + b->len;
	if (end[-1] != 0)
		return SIZE_MAX;
	while (p < end) {
		p = (const uint8_t *)memchr(p, 0, (size_t)(end - p)) + 1;
		n++;
	}
	return n;
}

/* Point out[k] at the k-th string of a blob already counted. */
static void split_strings(const ProtobufCBinaryData *b, const char **out)
{
	const char *p = (const char *)b->data, *end = p + b->len;

	for (size_t k = 0; p < end; k++) {
		out[k] = p;
		p += strlen(p) + 1;
	}
}

static int bad_column(weightd_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* An inconsistent TensorEntries: invalid-argument, "unit tensors: " and the sentence. */
static int bad_column(weightd_error *err, const char *fmt, ...)
{
	char text[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT, "unit tensors: %s", text);
}

/* An entry whose column value is out of range: invalid-argument naming the entry. */
static int bad_entry(const struct unit_columns *ue, size_t k, const char *what,
		     unsigned long long value, size_t limit, weightd_error *err)
{
	snprintf(err->slot, sizeof(err->slot), "%s", ue->names[k]);
	return wd_error_set(err, WEIGHTD_E_INVALID_ARGUMENT,
			    "unit tensors: entry %zu (\"%s\") has %s %llu; it must be below %zu", k,
			    ue->names[k], what, value, limit);
}

/* Every column of te against the n_cols entries its names give. */
static int check_columns(struct unit_columns *ue, const Weightd__TensorEntries *te,
			 weightd_error *err)
{
	size_t n = ue->n_cols, n_tensors = count_strings(&te->tensors), dims = 0;

	if (te->n_checkpoints == 0)
		return bad_column(err, "%zu entries name no checkpoint (checkpoints is empty)", n);
	for (size_t c = 0; c < te->n_checkpoints; c++)
		if (!te->checkpoints[c] || !te->checkpoints[c][0])
			return bad_column(err, "checkpoint %zu of %zu is an empty name", c,
					  te->n_checkpoints);
	if (te->n_checkpoint && te->n_checkpoint != n)
		return bad_column(err, "%zu checkpoint indices for %zu entries", te->n_checkpoint, n);
	if (te->tensors.len && n_tensors == SIZE_MAX)
		return bad_column(err, "the tensor names do not end with a NUL byte");
	if (te->tensors.len && n_tensors != n)
		return bad_column(err, "%zu tensor names for %zu entries", n_tensors, n);
	if (te->n_dtype && te->n_dtype != n)
		return bad_column(err, "%zu declared dtypes for %zu entries", te->n_dtype, n);
	if (te->n_ndim != te->n_dtype)
		return bad_column(err, "%zu declared ranks for %zu declared dtypes", te->n_ndim,
				  te->n_dtype);
	for (size_t k = 0; k < te->n_checkpoint; k++)
		if (te->checkpoint[k] >= te->n_checkpoints)
			return bad_entry(ue, k, "checkpoint index", te->checkpoint[k],
					 te->n_checkpoints, err);
	for (size_t k = 0; k < te->n_dtype; k++) {
		if (te->dtype[k] > te->n_dtypes)
			return bad_entry(ue, k, "dtype index + 1", te->dtype[k], te->n_dtypes + 1,
					 err);
		if (te->ndim[k] > (te->dtype[k] ? WD_MAX_DIMS : 0))
			return bad_entry(ue, k, te->dtype[k] ? "rank" : "undeclared dtype and rank",
					 te->ndim[k], te->dtype[k] ? WD_MAX_DIMS + 1 : 1, err);
		dims += te->ndim[k];
	}
	if (dims != te->n_dims)
		return bad_column(err, "the declared ranks add up to %zu but %zu dimensions came",
				  dims, te->n_dims);
	return 0;
}

int unit_columns_init(struct unit_columns *ue, const Weightd__Unit *pu, uint32_t max,
		      weightd_error *err)
{
	const Weightd__TensorEntries *te = pu->tensors;
	size_t cols = 0, per = 0;
	unsigned char *block;
	int r;

	memset(ue, 0, sizeof(*ue));
	ue->pu = pu;
	ue->n_msg = pu->n_entries;
	if (te) {
		cols = count_strings(&te->names);
		if (cols == SIZE_MAX)
			return bad_column(err, "the entry names do not end with a NUL byte");
	}
	ue->n_cols = cols;
	ue->n = ue->n_msg + cols;
	if (ue->n > max || pu->n_aliases > max) {
		bool ent = ue->n > max;

		wd_error_set(err, WEIGHTD_E_LIMIT_EXCEEDED,
			     "limit exceeded: the unit has %zu %s; this weightd allows at most %u "
			     "(max_unit_entries)", ent ? ue->n : pu->n_aliases,
			     ent ? "entries" : "aliases", max);
		err->expected = max;
		err->actual = (int64_t)(ent ? ue->n : pu->n_aliases);
		return -WEIGHTD_E_LIMIT_EXCEEDED;
	}
	if (!cols) {
		if (te && (te->n_checkpoint || te->tensors.len || te->n_dtype || te->n_ndim ||
			   te->n_dims))
			return bad_column(err, "columns came but no entry names");
		return 0;
	}
	/* names (always), tensor names (when given), first dimensions (when declared) */
	per = sizeof(char *) * (te->tensors.len ? 2 : 1) + (te->n_dtype ? sizeof(size_t) : 0);
	block = malloc(cols * per);
	if (!block)
		return wd_error_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				    "out of memory reading %zu tensor entries", cols);
	ue->names = (const char **)(void *)block;
	split_strings(&te->names, ue->names);
	r = check_columns(ue, te, err);
	if (r < 0) {
		unit_columns_fini(ue);
		return r;
	}
	block += cols * sizeof(char *);
	if (te->tensors.len) {
		ue->tensors = (const char **)(void *)block;
		split_strings(&te->tensors, ue->tensors);
		block += cols * sizeof(char *);
	}
	if (te->n_dtype) {
		size_t at = 0;

		ue->dims_at = (size_t *)(void *)block;
		for (size_t k = 0; k < cols; k++) {
			ue->dims_at[k] = at;
			at += te->ndim[k];
		}
	}
	return 0;
}

void unit_columns_fini(struct unit_columns *ue)
{
	free(ue->names); /* the block */
	ue->names = NULL;
	ue->tensors = NULL;
	ue->dims_at = NULL;
}

void unit_columns_get(const struct unit_columns *ue, size_t i, struct unit_columns_entry *e)
{
	memset(e, 0, sizeof(*e));
	if (i < ue->n_msg) {
		const Weightd__UnitEntry *pe = ue->pu->entries[i];

		e->name = pe->name;
		e->recipe = pe->recipe;
		if (plain_entry(pe)) {
			e->checkpoint = pe->recipe->nodes[0]->checkpoint;
			e->tensor = pe->recipe->nodes[0]->tensor;
		}
		if (pe->check_slot) {
			e->check = true;
			e->dtype = pe->dtype ? pe->dtype : "";
			e->shape = pe->shape;
			e->ndim = pe->n_shape;
		}
	} else {
		const Weightd__TensorEntries *te = ue->pu->tensors;
		size_t k = i - ue->n_msg;

		e->name = ue->names[k];
		e->tensor = ue->tensors && ue->tensors[k][0] ? ue->tensors[k] : e->name;
		e->checkpoint = te->checkpoints[te->n_checkpoint ? te->checkpoint[k] : 0];
		if (ue->dims_at && te->dtype[k]) {
			e->check = true;
			e->dtype = te->dtypes[te->dtype[k] - 1];
			e->shape = te->dims + ue->dims_at[k];
			e->ndim = te->ndim[k];
		}
	}
}

/* Room for n of size in the block being laid out: its offset, advanced past it (8-aligned). */
static size_t take(size_t *at, size_t n, size_t size)
{
	size_t off = *at;

	*at += (n * size + 7) & ~(size_t)7;
	return off;
}

int unit_columns_pack(Weightd__PackedWeights *pw, struct weight *const *ws, const uint32_t *fd_index,
		   size_t n, size_t dims, const uint32_t *alias_owner, size_t n_aliases,
		   void **ret_block)
{
	int index_of[WD_DTYPE_COUNT];
	size_t at = 0, o_handle, o_off, o_nbytes, o_gen, o_dims, o_seg, o_dtype, o_ndim,
	       o_alg, o_digest, o_key, o_alias, o_names;
	unsigned char *b;

	weightd__packed_weights__init(pw);
	o_handle = take(&at, n, sizeof(uint64_t));
	o_off = take(&at, n, sizeof(uint64_t));
	o_nbytes = take(&at, n, sizeof(uint64_t));
	o_gen = take(&at, n, sizeof(uint64_t));
	o_dims = take(&at, dims, sizeof(uint64_t));
	o_seg = take(&at, n, sizeof(uint32_t));
	o_dtype = take(&at, n, sizeof(uint32_t));
	o_ndim = take(&at, n, sizeof(uint32_t));
	o_alias = take(&at, n_aliases, sizeof(uint32_t));
	o_names = take(&at, WD_DTYPE_COUNT, sizeof(char *));
	o_alg = take(&at, n, 1);
	o_digest = take(&at, n, 32);
	o_key = take(&at, n, 32);
	b = *ret_block = malloc(at ? at : 8);
	if (!b)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	pw->handle = (uint64_t *)(void *)(b + o_handle);
	pw->offset = (uint64_t *)(void *)(b + o_off);
	pw->nbytes = (uint64_t *)(void *)(b + o_nbytes);
	pw->generation = (uint64_t *)(void *)(b + o_gen);
	pw->dims = (uint64_t *)(void *)(b + o_dims);
	pw->segment = (uint32_t *)(void *)(b + o_seg);
	pw->dtype = (uint32_t *)(void *)(b + o_dtype);
	pw->ndim = (uint32_t *)(void *)(b + o_ndim);
	pw->alias_owner = (uint32_t *)(void *)(b + o_alias);
	pw->dtypes = (char **)(void *)(b + o_names);
	pw->digest_algorithm.data = b + o_alg;
	pw->digests.data = b + o_digest;
	pw->keys.data = b + o_key;
	pw->n_handle = pw->n_offset = pw->n_nbytes = pw->n_generation = pw->n_segment =
		pw->n_dtype = pw->n_ndim = n;
	pw->digest_algorithm.len = n;
	pw->digests.len = pw->keys.len = 32 * n;
	pw->n_dims = dims;
	pw->n_alias_owner = n_aliases;
	for (int t = 0; t < WD_DTYPE_COUNT; t++)
		index_of[t] = -1;
	dims = 0;
	for (size_t i = 0; i < n; i++) {
		const struct weight *w = ws[i];
		size_t dl = wd_digest_len(w->digest_alg);

		if (i + WEIGHT_AHEAD < n)
			weight_prefetch(ws[i + WEIGHT_AHEAD], 4);

		pw->handle[i] = w->id;
		pw->offset[i] = w->offset;
		pw->nbytes[i] = w->nbytes;
		pw->generation[i] = w->generation;
		pw->segment[i] = fd_index[i];
		if (index_of[w->dtype] < 0) {
			index_of[w->dtype] = (int)pw->n_dtypes;
			pw->dtypes[pw->n_dtypes++] = (char *)wd_dtype_name(w->dtype);
		}
		pw->dtype[i] = (uint32_t)index_of[w->dtype];
		pw->ndim[i] = (uint32_t)w->ndim;
		memcpy(pw->dims + dims, w->shape, (size_t)w->ndim * sizeof(uint64_t));
		dims += (size_t)w->ndim;
		pw->digest_algorithm.data[i] = (uint8_t)w->digest_alg;
		memcpy(pw->digests.data + 32 * i, w->digest, dl);
		memset(pw->digests.data + 32 * i + dl, 0, 32 - dl);
		memcpy(pw->keys.data + 32 * i, w->key, 32);
	}
	if (n_aliases)
		memcpy(pw->alias_owner, alias_owner, n_aliases * sizeof(uint32_t));
	return 0;
}
