/* SPDX-License-Identifier: Apache-2.0 */
/* version.c - libweightd's version, and the protocol range its public header names checked
 * against proto/weightd.proto. */
#include "weightd/client.h"
#include "weightd.pb-c.h"

_Static_assert(WEIGHTD_PROTOCOL_VERSION <= WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT &&
	       WEIGHTD_PROTOCOL_MIN_VERSION == WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_MIN,
	       "protocol versions follow proto/weightd.proto");

const char *weightd_version(void)
{
	return WD_VERSION;
}
