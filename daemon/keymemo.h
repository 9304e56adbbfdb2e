/* SPDX-License-Identifier: Apache-2.0 */
/* keymemo.h - the identity keys of plain source entries, remembered, so a warm unit finds its
 * cached weights without building a plan and hashing a recipe per entry. Main thread only. */
#ifndef WD_KEYMEMO_H
#define WD_KEYMEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A memo of a pure function: the recipe key of "the whole tensor `tensor` of the source whose
 * identity is `identity`" (a recipe of one source node, no selection). The key depends on
 * nothing else (src/recipe_build.c hashes the identity and the name), so an entry never goes
 * stale: a source replaced on disk has another identity and misses. Nothing here grants access:
 * callers resolve the checkpoint for their peer first.
 *
 * Bounded: at most `max_entries` (the memo starts again empty when full; a miss costs one
 * preflight, nothing else). Entries are only put after a successful preflight, so they name
 * tensors that exist.
 */
struct keymemo;

/* The daemon's bound: a DeepSeek-V3-sized checkpoint (91,991 tensors) and then some. */
#define KEYMEMO_MAX_ENTRIES (1u << 18)

struct keymemo *keymemo_new(size_t max_entries);
void keymemo_free(struct keymemo *m);

/* Ask ahead for what keymemo_get(identity, tensor) will read first (its index slot). */
void keymemo_prefetch(const struct keymemo *m, const uint8_t identity[32], const char *tensor);

/* true and ret_key when remembered. An all-zero identity (no digest could be made) never is. */
bool keymemo_get(const struct keymemo *m, const uint8_t identity[32], const char *tensor,
		 uint8_t ret_key[32]);

/* Remember a key (replacing what the same identity and name had). Out of memory: forgets. */
void keymemo_put(struct keymemo *m, const uint8_t identity[32], const char *tensor,
		 const uint8_t key[32]);

/* Entries remembered (tests). */
size_t keymemo_count(const struct keymemo *m);

#endif
