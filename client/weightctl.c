/* weightctl.c - the command line of weightd. */
#include <stdio.h>

#include "weightd/client.h"

int main(void)
{
	printf("weightctl %s\n", weightd_version());
	return 0;
}
