/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_admin.c - weightctl reload and evict: what changes a running daemon's state. */
#include <inttypes.h>
#include <stdio.h>

#include "weightctl.h"

/* What the reload did, then what it could not do; a reload with warnings did reload (exit 0). */
int cmd_reload(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	weightd_reload_info *r;
	weightd_error err;

	if (weightd_reload_report(c, &r, &err) < 0)
		return output_fail_err(&err);
	if (o->json) {
		json_t *ch = json_array(), *wa = json_array();

		for (size_t i = 0; i < r->n_changes; i++)
			json_array_append_new(ch, json_string(r->changes[i]));
		for (size_t i = 0; i < r->n_warnings; i++)
			json_array_append_new(wa, json_string(r->warnings[i]));
		weightd_reload_report_free(r);
		return output_print_json(
			json_pack("{s:b, s:o, s:o}", "reloaded", 1, "changes", ch, "warnings", wa));
	}
	printf("weightd reloaded its configuration%s\n",
	       r->n_changes || r->n_warnings ? ":" : "; nothing changed");
	for (size_t i = 0; i < r->n_changes; i++)
		printf("  %s\n", r->changes[i]);
	for (size_t i = 0; i < r->n_warnings; i++)
		printf("warning: %s\n", r->warnings[i]);
	weightd_reload_report_free(r);
	return 0;
}

int cmd_evict(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	uint64_t n = 0, bytes = 0;
	weightd_error err;
	char *b;

	if (weightd_evict(c, &n, &bytes, &err) < 0)
		return output_fail_err(&err);
	if (o->json)
		return output_print_json(json_pack("{s:I, s:I}", "weights", (json_int_t)n, "bytes",
						   (json_int_t)bytes));
	b = output_fmt_bytes(bytes);
	printf("evicted %" PRIu64 " weight%s (%s)\n", n, n == 1 ? "" : "s", b);
	free(b);
	return 0;
}
