/* SPDX-License-Identifier: Apache-2.0 */
/* bytes.h - sizes in errors and logs as people read them: "512 bytes", "1.5 GiB", "16 GiB". */
#ifndef WD_BYTES_H
#define WD_BYTES_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

/* Room for any size's text, NUL included. */
#define WD_BYTES_TEXT 24

/* n in the largest binary unit it reaches, one decimal below 100 of it (none when that decimal is
 * 0), into buf; buf. Exact below 1 KiB; errors that need the exact count carry it apart. */
static inline char *wd_bytes_text(char buf[WD_BYTES_TEXT], uint64_t n)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	int u = -1;

	if (n < 1024) {
		snprintf(buf, WD_BYTES_TEXT, "%" PRIu64 " %s", n, n == 1 ? "byte" : "bytes");
		return buf;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (v >= 99.95 || (uint64_t)(v * 10 + 0.5) % 10 == 0)
		snprintf(buf, WD_BYTES_TEXT, "%.0f %s", v, units[u]);
	else
		snprintf(buf, WD_BYTES_TEXT, "%.1f %s", v, units[u]);
	return buf;
}

#endif
