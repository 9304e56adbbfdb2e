/* SPDX-License-Identifier: Apache-2.0 */
/* stats.h - the daemon's counters, which status and metrics export. */
#ifndef WD_STATS_H
#define WD_STATS_H

#include <stdint.h>

/* Counters exported by status and metrics. Main thread only. */
struct stats {
	uint64_t bytes_read;            /* checkpoint bytes read by materializations */
	uint64_t materializations;      /* jobs finished successfully */
	uint64_t materializations_failed;
	uint64_t in_flight;
	uint64_t evictions;
	uint64_t readoptions;
	uint64_t bytes_materialized;
	uint64_t materialize_ns;        /* summed wall time of successful jobs */
	uint64_t foreign_segments;	/* objects under the prefix weightd did not make, as the
					 * last look found them (daemon_foreign_segments) */
	uint64_t clients;               /* connected now (server.c keeps it) */
	uint64_t clients_refused;       /* connections refused by max_clients / per-uid limits */
	uint64_t clients_timed_out;     /* disconnected idle, or stuck in the middle of a frame */
	uint64_t partial_bytes;         /* bytes held in partially received frames, all clients */
	uint64_t temp_bytes;            /* recipe temporaries reserved by running jobs */
	uint64_t requests;              /* requests taken from clients */
	uint64_t requests_deferred;     /* times a connection was held back for other uids' share
					 * of the main thread (uid_charge) */
};

#endif
