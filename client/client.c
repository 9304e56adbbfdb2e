/* client.c - connection to weightd. */
#include "weightd/client.h"

const char *weightd_version(void)
{
	return WD_VERSION;
}
