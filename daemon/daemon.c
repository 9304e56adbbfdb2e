/* daemon.c - helpers on the shared daemon context. */
#include "daemon.h"

uint64_t daemon_uptime_ms(const struct daemon *d)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)(now.tv_sec - d->started.tv_sec) * 1000u +
	       (uint64_t)((now.tv_nsec - d->started.tv_nsec) / 1000000);
}
