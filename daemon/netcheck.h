/* SPDX-License-Identifier: Apache-2.0 */
/* netcheck.h - whether weightd can reach anything over IP, for remote checkpoints (netcheck.c). */
#ifndef WD_NETCHECK_H
#define WD_NETCHECK_H

#include <stdbool.h>
#include <stddef.h>

struct config;

/*
 * True when this process cannot reach a network at all, with why (a sentence naming the likely
 * systemd setting) in buf: it may not open IPv4 sockets (RestrictAddressFamilies=, a seccomp
 * filter), or it sees no network interface but loopback (PrivateNetwork=yes, an empty network
 * namespace). False when it can, or when it cannot tell (e.g. out of fds). Cheap: a socket and
 * getifaddrs, no packet sent.
 */
bool netcheck_blocked(char *buf, size_t cap);

/*
 * When cfg has a remote checkpoint and netcheck_blocked says this process has no network: one
 * warning naming the checkpoint, why, and the systemd drop-in that opens the network. Otherwise
 * nothing. At start and after a reload, where the transfers' own errors would only say that a
 * host could not be resolved or reached.
 */
void netcheck_warn(const struct config *cfg);

#endif
