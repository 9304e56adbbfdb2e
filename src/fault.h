/* SPDX-License-Identifier: Apache-2.0 */
/* fault.h - named crash points in weightd's own code, where a libc call's failure cannot put a
 * test's kill: compiled in only with WD_FAULTS (test builds), enabled at run time through libfiu
 * (fault.c). */
#ifndef WD_FAULT_H
#define WD_FAULT_H

#include <stdbool.h>

/*
 * The points, each a moment a kill -9 must leave nothing wrong behind:
 *   weightd/state/unrecorded   a segment's weights written, its state record not yet
 *   weightd/reload/swapped     a reload's generations swapped in, the stale ones not yet dropped
 *   weightd/pool/taken         a worker has taken a task, and not started it
 * A test enables one by name through libfiu's control (fiu-run's preload, then fiu-ctrl or its
 * FIFO: "enable name=weightd/pool/taken"); the process then kills itself (SIGKILL) there.
 * Without WD_FAULTS (what is installed) the macro is nothing, and weightd never looks for libfiu.
 */
#ifdef WD_FAULTS
/* Is the point `name` enabled? false unless libfiu is loaded in this process and says so. */
bool wd_fault_on(const char *name);
void wd_fault_crash(const char *name);
#define WD_FAULT_CRASH(name) wd_fault_crash(name)
#else
#define WD_FAULT_CRASH(name) ((void)0)
#endif

#endif
