/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_clients.c - weightctl clients: who is connected to weightd and what each holds. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "weightctl.h"

static int by_id(const void *a, const void *b)
{
	const weightd_client_info *x = *(const weightd_client_info *const *)a;
	const weightd_client_info *y = *(const weightd_client_info *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* "12 s", "3 min", "2.5 h", "4.0 d": how long ago a client connected. Allocated. */
static char *fmt_age(uint64_t ms)
{
	double s = (double)ms / 1000;

	if (s < 120)
		return output_fmt("%.0f s", s);
	if (s < 7200)
		return output_fmt("%.0f min", s / 60);
	if (s < 172800)
		return output_fmt("%.1f h", s / 3600);
	return output_fmt("%.1f d", s / 86400);
}

int cmd_clients(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	static const char *const head[] = { "ID",      "UID",  "GID",	  "PID",   "NAME",  "HELD",
					    "WEIGHTS", "SEGS", "PENDING", "SINCE", "SOCKET" };
	static const bool num[] = { 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0 };
	struct table t = { .ncols = 11, .head = head, .numeric = num };
	weightd_client_list *l;
	weightd_error err;
	const void **order;

	(void)args;
	if (weightd_clients(c, &l, &err) < 0)
		return output_fail_err(&err);
	order = output_sorted(l->clients, l->count, sizeof(*l->clients), by_id);
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < l->count; i++) {
			const weightd_client_info *x = order[i];

			json_array_append_new(
				a,
				json_pack("{s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:s}",
					  "id", (json_int_t)x->id, "uid", (json_int_t)x->uid, "gid",
					  (json_int_t)x->gid, "pid", (json_int_t)x->pid, "name",
					  x->name, "bytes", (json_int_t)x->bytes, "weights",
					  (json_int_t)x->weights, "segments",
					  (json_int_t)x->segments, "pending",
					  (json_int_t)x->pending, "connected_ms",
					  (json_int_t)x->connected_ms, "socket",
					  x->admin ? "admin" : "engine"));
		}
		free(order);
		weightd_client_list_free(l);
		return output_print_json(json_pack("{s:o}", "clients", a));
	}
	for (size_t i = 0; i < l->count; i++) {
		const weightd_client_info *x = order[i];

		output_table_row(&t, output_fmt("%" PRIu64, x->id), output_fmt("%u", x->uid),
				 output_fmt("%u", x->gid),
				 x->pid ? output_fmt("%d", x->pid) : output_strdup("-"),
				 output_strdup(x->name[0] ? x->name : "-"),
				 output_fmt_bytes(x->bytes), output_fmt("%" PRIu64, x->weights),
				 output_fmt("%" PRIu64, x->segments),
				 output_fmt("%" PRIu64, x->pending), fmt_age(x->connected_ms),
				 output_strdup(x->admin ? "admin" : "engine"));
	}
	free(order);
	weightd_client_list_free(l);
	output_table_print(&t);
	return 0;
}
