/* SPDX-License-Identifier: Apache-2.0 */
/* clock.h - the monotonic clock every timeout, deadline and duration is measured on. */
#ifndef WD_CLOCK_H
#define WD_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC: unaffected by changes to the wall clock, comparable between
 * threads of one process, meaningless across a reboot. */
static inline uint64_t wd_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same clock in milliseconds. */
static inline uint64_t wd_clock_ms(void)
{
	return wd_clock_ns() / 1000000u;
}

/* The CLOCK_MONOTONIC time ms milliseconds from now, as pthread_cond_timedwait takes it on a
 * condition variable whose clock is CLOCK_MONOTONIC. */
static inline struct timespec wd_clock_deadline(uint64_t ms)
{
	uint64_t t = wd_clock_ns() + ms * 1000000u;

	return (struct timespec){ .tv_sec = (time_t)(t / 1000000000u),
				  .tv_nsec = (long)(t % 1000000000u) };
}

#endif
