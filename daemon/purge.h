/* SPDX-License-Identifier: Apache-2.0 */
/* purge.h - weightd --purge: remove a stopped instance's segments and state records. */
#ifndef WD_PURGE_H
#define WD_PURGE_H

/*
 * weightd --purge --config FILE | --prefix P [--state-dir D], plus [--socket PATH] [--json]:
 * a mode of its own with its own options (argv is weightd's whole command line). Returns the
 * exit status: 0 purged, 1 refused or failed, 2 a usage error.
 */
int purge_main(int argc, char **argv);

#endif
