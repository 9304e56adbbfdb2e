/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_admin.c - weightctl reload and evict: what changes a running daemon's state. */
#include <inttypes.h>
#include <stdio.h>

#include "weightctl.h"

int cmd_reload(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	weightd_error err;

	if (weightd_reload(c, &err) < 0)
		return fail_err(&err);
	if (o->json)
		return print_json(json_pack("{s:b}", "reloaded", 1));
	puts("weightd reloaded its configuration");
	return 0;
}

int cmd_evict(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	uint64_t n = 0, bytes = 0;
	weightd_error err;
	char *b;

	if (weightd_evict(c, &n, &bytes, &err) < 0)
		return fail_err(&err);
	if (o->json)
		return print_json(json_pack("{s:I, s:I}", "weights", (json_int_t)n, "bytes",
					    (json_int_t)bytes));
	b = fmt_bytes(bytes);
	printf("evicted %" PRIu64 " weight%s (%s)\n", n, n == 1 ? "" : "s", b);
	free(b);
	return 0;
}
