/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.h - libweightd's selections and recipes as built by the caller, their protobuf view,
 * and the JSON paths errors point at (recipe.c, and recipe_json.c's parser). */
#ifndef WC_RECIPE_H
#define WC_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

/* nodes in one recipe built here: above the daemon's limit (65,536), so a caller over it gets the
 * daemon's error naming its limit, yet bounded */
#define WC_MAX_NODES (1u << 18)
#define WC_MAX_JSON_DEPTH 64         /* nesting of a recipe in JSON */
#define WC_MAX_INDICES (1u << 24)    /* indices in one selection */

struct weightd_selection {
	int kind;                    /* Weightd__Selection__Kind */
	uint32_t axis;
	uint64_t start, end;
	uint64_t *indices;
	size_t n_indices;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	size_t ndim;
	uint32_t rank, world;
	bool even; /* SHARD */
};

struct wc_node {
	int op;                      /* Weightd__Op */
	char *checkpoint, *tensor;   /* SOURCE */
	bool has_sel;                /* SOURCE, SELECT */
	struct weightd_selection sel;
	uint32_t *inputs;
	size_t n_inputs;
	int32_t axis;
	uint64_t shape[WEIGHTD_MAX_DIMS];
	size_t ndim;
	uint32_t perm[WEIGHTD_MAX_DIMS];
	size_t n_perm;
	uint64_t block[WEIGHTD_MAX_DIMS];  /* DEQUANT_BLOCK */
	size_t n_block;
	char dtype[16];
	bool truncate;		     /* CAST: float to integer or BOOL allowed */
	char *path;                  /* where it was in JSON, or NULL */
};

struct weightd_recipe {
	struct wc_node *nodes;
	size_t n, cap;
};

int wc_recipe_copy(const weightd_recipe *r, weightd_recipe **ret, weightd_error *err);
/* The checkpoint and tensor a recipe is mostly about (its first source node), for messages. */
void wc_recipe_about(const weightd_recipe *r, const char **ret_ckpt, const char **ret_tensor);
/* Parse a recipe object (post-order flattening) with `path` naming where it is. */
int wc_recipe_from_jobj(const void *json, const char *path, weightd_recipe **ret,
			weightd_error *err);

/* A protobuf view of a recipe: points into the recipe, which must outlive it. */
struct wc_pb_recipe {
	Weightd__Recipe msg;
	Weightd__Node *nodes;
	Weightd__Node **ptrs;
	Weightd__Selection *sels;
	/* a one-node recipe (a tensor, the usual unit entry) lives here: no allocation */
	Weightd__Node one_node;
	Weightd__Node *one_ptr;
	Weightd__Selection one_sel;
};
int wc_recipe_pb_init(struct wc_pb_recipe *pb, const weightd_recipe *r, weightd_error *err);
void wc_recipe_pb_fini(struct wc_pb_recipe *pb);

/*
 * Where the nodes of each entry's recipe came from in JSON, so errors the daemon reports about
 * a node can say it. One per unit entry.
 */
struct wc_annot {
	char *slot;
	char **paths;
	size_t n;
};
int wc_recipe_annot_add(struct wc_annot **as, size_t *n, const char *slot, const weightd_recipe *r);
void wc_recipe_annot_free(struct wc_annot *as, size_t n);
/* Append the JSON path of err->node (for err->slot, or the only entry) to the message. */
void wc_recipe_annot_apply(const struct wc_annot *as, size_t n, weightd_error *err);

#endif
