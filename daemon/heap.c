/* SPDX-License-Identifier: Apache-2.0 */
/* heap.c - glibc's malloc tuned for the daemon, and heap made ahead of large units in huge
 * pages. Main thread only. */
#include "heap.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

#define HEAP_TRIM_MIN ((size_t)64 << 20)
#define HEAP_BLOCK ((size_t)16 << 20)     /* under the mmap threshold: carved from the heap */
#define HEAP_RESERVE_MAX ((size_t)1 << 30)

static bool tuned;                          /* mallopt applies (no malloc GLIBC_TUNABLES) */
static size_t trim = HEAP_TRIM_MIN;

/*
 * Keep freed heap for the next request instead of handing it back to the kernel at once. A unit
 * of n weights makes O(n) short-lived objects (its decoded request, plans, reply); with glibc's
 * defaults (trim above 128 KiB at the top, mmap above 128 KiB) each such request faults its
 * whole working set in again, and on virtual machines a first-touch fault costs microseconds:
 * a unit of 100,000 weights would spend more time in page faults than in its own work. Up to
 * 64 MiB of free heap stays mapped (more after a larger unit: heap_reserve); memory a departing
 * client made us take is still returned (server.c, malloc_trim on reap). GLIBC_TUNABLES naming
 * malloc settings win over these.
 */
void heap_tune(void)
{
	const char *t = getenv("GLIBC_TUNABLES");

	if (t && strstr(t, "glibc.malloc."))
		return;
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, (int)HEAP_TRIM_MIN);
	mallopt(M_TOP_PAD, 4 << 20);
	tuned = true;
}

/* Whether transparent huge pages are given where asked for (mode "madvise"), read once. */
static bool thp_madvise(void)
{
	static int known = -1;
	char buf[128] = "";
	FILE *f;

	if (known >= 0)
		return known;
	f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	known = strstr(buf, "[madvise]") != NULL;
	return known;
}

void heap_reserve(size_t bytes)
{
	void *blocks[HEAP_RESERVE_MAX / HEAP_BLOCK];
	size_t n = 0;

	if (!tuned || bytes < 2 * HEAP_BLOCK || !thp_madvise())
		return;
	if (bytes > HEAP_RESERVE_MAX)
		bytes = HEAP_RESERVE_MAX;
	/* freed, the blocks join the top of the heap: it must stay below the trim threshold */
	if (bytes + HEAP_TRIM_MIN > trim) {
		trim = bytes + HEAP_TRIM_MIN;
		mallopt(M_TRIM_THRESHOLD, (int)trim);
	}
	for (; n < bytes / HEAP_BLOCK; n++) {
		blocks[n] = malloc(HEAP_BLOCK);
		if (!blocks[n])
			break;
		wd_msg_advise_huge(blocks[n], HEAP_BLOCK);
	}
	while (n > 0)
		free(blocks[--n]);
}
