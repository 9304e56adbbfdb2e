/* SPDX-License-Identifier: Apache-2.0 */
/* wd_limits.h - the bounds on everything a checkpoint file or a client controls. (Bounds an
 * operator sets in weightd.conf are rows of daemon/config_keys.c; those of a file format's own
 * specification stay with its parser.) */
#ifndef WD_LIMITS_H
#define WD_LIMITS_H

#include <stdint.h>

#define WD_MAX_DIMS 8           /* dimensions of a tensor (GGUF itself allows 4) */
#define WD_MAX_NAME 1024        /* bytes in a tensor or checkpoint name */

struct wd_limits {
	uint64_t max_header_bytes;   /* safetensors JSON header; GGUF header region */
	uint64_t max_tensors;        /* tensors in one file or source */
	uint64_t max_metadata;       /* metadata entries in one file */
	uint64_t max_string;         /* one metadata string */
	uint64_t max_array;          /* elements in one GGUF metadata array (nested included) */
	uint32_t max_array_depth;    /* GGUF array nesting */
	uint32_t max_shards;         /* files in a sharded directory */
	uint64_t max_index_bytes;    /* model.safetensors.index.json */
};

/*
 * Defaults: generous for real models. The header limit is the Hugging Face reference's
 * MAX_HEADER_SIZE, 100,000,000 bytes (not 100 MiB), so weightd and the reference agree on which
 * safetensors headers are too large; GGUF header regions share it.
 */
#define WD_LIMITS_DEFAULT { \
	.max_header_bytes = 100000000ull, \
	.max_tensors = 1u << 20, \
	.max_metadata = 1u << 16, \
	.max_string = 16ull << 20, \
	.max_array = 1ull << 24, \
	.max_array_depth = 8, \
	.max_shards = 4096, \
	.max_index_bytes = 64ull << 20, \
}

/* --- what a client controls ---------------------------------------------------------------- */

/* fds one frame may carry (spread over its sendmsg calls, WD_FRAME_FDS_PER_MSG each). */
#define WD_FRAME_MAX_FDS 8192

/*
 * Nodes in one recipe, the default of max_nodes and the daemon's limit. A fused MoE weight (a stack
 * over 384 experts of concat(gate, up), each a dequantized shard) takes about 3,500 nodes;
 * preflight and execution are linear in the node count, and a request must still fit the frame
 * limit.
 */
#define WD_RECIPE_MAX_NODES 65536

/* The limits of one recipe (struct wd_recipe_limits, recipe.h). */
#define WD_RECIPE_LIMITS_DEFAULT { .max_nodes = WD_RECIPE_MAX_NODES, .max_depth = 32, .max_indices = 1u << 20, \
	.max_output_bytes = 1ull << 40, .max_temp_bytes = 1ull << 32 }

/* Checkpoints one recipe may read: its weights' segment is packed only with weights reading the
 * same set, which a segment keeps (cache.h). */
#define WD_MAX_RECIPE_SOURCES 16

/* Checkpoints one client may subscribe to events of. */
#define WD_MAX_SUBSCRIPTIONS 4096

/* Any local user can create names under the /dev/shm prefix: one look for objects weightd did
 * not make reads at most this many directory entries, at most once per interval, on a thread of
 * its own (daemon/shmscan.c). */
#define WD_FOREIGN_SCAN_ENTRIES	    65536
#define WD_FOREIGN_SCAN_INTERVAL_MS 5000

/* Supplementary groups read per peer (Linux's NGROUPS_MAX); every one counts for allow_groups. */
#define WD_MAX_PEER_GROUPS 65536

#endif
