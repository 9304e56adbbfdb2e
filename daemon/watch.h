/* SPDX-License-Identifier: Apache-2.0 */
/* watch.h - `watch = yes`: the files of watched checkpoints followed with inotify, and each one
 * reloaded by itself once its files have been left alone for its watch_delay. */
#ifndef WD_WATCH_H
#define WD_WATCH_H

#include <stddef.h>

struct daemon;
struct watch;

/* Reload checkpoints `names[0..n)` (their files changed and are quiet now). */
typedef void watch_fire_fn(struct daemon *d, char *const *names, size_t n);

/* The watcher of daemon `d` (d->base and d->catalog must outlive it), on d's event loop; it
 * calls fire() when watched checkpoints are to be reloaded. NULL when out of memory or inotify
 * is not available (logged once). */
struct watch *watch_new(struct daemon *d, watch_fire_fn *fire);

/* Watch what the catalog's watched checkpoints name now: after start and after every reload
 * (a checkpoint may have been added, removed, moved or switched on or off; a directory renamed
 * over is a new directory to watch). A change seen meanwhile stays pending. Accepts NULL. */
void watch_sync(struct watch *w);

/* Accepts NULL. */
void watch_free(struct watch *w);

#endif
