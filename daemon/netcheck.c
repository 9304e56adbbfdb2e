/* SPDX-License-Identifier: Apache-2.0 */
/* netcheck.c - can weightd reach the network its remote checkpoints are on? Under the shipped
 * weightd.service it cannot (no AF_INET sockets, a private network namespace), on purpose; a
 * remote checkpoint then fails with curl's words ("could not resolve host"), which do not say
 * that the sandbox is why, nor what opens it. */
#include "netcheck.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "source.h"

/* The drop-in, as weightd's documentation installs it (docs/operating.md, "Remote checkpoints
 * in operation"), and where an operator puts it. */
#define NETCHECK_DROPIN	   "weightd.service.d/remote.conf"
#define NETCHECK_DROPIN_AT "/etc/systemd/system/weightd.service.d/"

bool netcheck_blocked(char *buf, size_t cap)
{
	struct ifaddrs *ifa = NULL;
	bool up = false;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		if (errno != EAFNOSUPPORT && errno != EPERM && errno != EACCES)
			return false; /* out of fds or memory: nothing to say about the network */
		snprintf(buf, cap,
			 "weightd may not open IPv4 sockets (%s; under systemd: "
			 "RestrictAddressFamilies=)",
			 strerror(errno));
		return true;
	}
	close(fd);
	if (getifaddrs(&ifa) < 0)
		return false;
	for (const struct ifaddrs *p = ifa; p && !up; p = p->ifa_next)
		up = p->ifa_addr &&
		     (p->ifa_addr->sa_family == AF_INET || p->ifa_addr->sa_family == AF_INET6) &&
		     (p->ifa_flags & IFF_UP) && !(p->ifa_flags & IFF_LOOPBACK);
	freeifaddrs(ifa);
	if (up)
		return false;
	snprintf(buf, cap,
		 "weightd sees no network interface but loopback (under systemd: "
		 "PrivateNetwork=yes)");
	return true;
}

void netcheck_warn(const struct config *cfg)
{
	const struct source_conf *first = NULL;
	size_t n = 0;
	char why[256], shown[512];

	for (size_t i = 0; i < cfg->n_sources; i++)
		if (wd_source_is_url(cfg->sources[i].path) && n++ == 0)
			first = &cfg->sources[i];
	if (!first || !netcheck_blocked(why, sizeof(why)))
		return;
	wd_source_show_path(first->path, shown, sizeof(shown));
	log_warn(
		"checkpoint %s is read from %s%s, but %s: copy %s from weightd's documentation "
		"(e.g. /usr/share/doc/weightd/) into %s to open the network for remote checkpoints",
		first->name, shown, n > 1 ? " (and other remote checkpoints)" : "", why,
		NETCHECK_DROPIN, NETCHECK_DROPIN_AT);
}
