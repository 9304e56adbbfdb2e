/* SPDX-License-Identifier: Apache-2.0 */
/* fault.c - weightd's own crash points (fault.h): libfiu's fiu_fail looked up at run time, so that
 * weightd never links libfiu, and a point costs one call when nothing enables it. */
#include "fault.h"

#ifdef WD_FAULTS
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

typedef int (*fiu_fail_fn)(const char *name);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static fiu_fail_fn fiu_fail_p;

static void find_fiu(void)
{
	/* present only when libfiu is in the process: fiu-run's preload, or a test linking it */
	fiu_fail_p = (fiu_fail_fn)dlsym(RTLD_DEFAULT, "fiu_fail");
}

bool wd_fault_on(const char *name)
{
	pthread_once(&once, find_fiu);
	return fiu_fail_p && fiu_fail_p(name) != 0;
}

void wd_fault_crash(const char *name)
{
	if (!wd_fault_on(name))
		return;
	/* the log line says which point it was, for the harness's count and a reader's */
	dprintf(STDERR_FILENO, "<2>fault point %s: killing this process\n", name);
	raise(SIGKILL);
}
#endif
