/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_unitjson.c - feeds arbitrary bytes to libweightd's JSON recipe and unit parsers, which read
 * the files users hand to weightctl and engines. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_client.h"
#include "weightd/client.h"

/*
 * A unit needs a client; the client needs a daemon that says hello. A scripted stand-in answers
 * that one request and nothing else is ever sent (parsing talks to nobody), so one connection
 * serves every input.
 */
static weightd_client *client;

static void init(void)
{
	if (!client)
		client = fake_connect_for_life(NULL, "fuzz_unitjson", NULL);
}

/* A failure is a negative code, the same code in err, and a sentence. */
static void check_failure(int rc, const weightd_error *err)
{
	if (rc >= 0 || err->code != -rc || !err->message[0] ||
	    !memchr(err->message, '\0', sizeof(err->message)))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	weightd_recipe *r = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	int rr, ru;

	init();
	rr = weightd_recipe_from_json(text, size, &r, &err);
	if (rr == 0) {
		if (!r || weightd_recipe_nodes(r) == 0)
			__builtin_trap();
	} else {
		check_failure(rr, &err);
	}

	ru = weightd_unit_from_json(client, text, size, &u, &err);
	if (ru == 0) {
		size_t n = weightd_unit_slot_count(u);

		if (n == 0)
			__builtin_trap();
		/* slot names: present, non-empty and distinct */
		for (size_t i = 0; i < n; i++) {
			const char *a = weightd_unit_slot_name(u, i);

			if (!a || !a[0])
				__builtin_trap();
			for (size_t j = 0; j < i; j++)
				if (strcmp(a, weightd_unit_slot_name(u, j)) == 0)
					__builtin_trap();
		}
		/* nothing was submitted: the unit holds no weight */
		if (weightd_unit_weight(u, weightd_unit_slot_name(u, 0)) || weightd_unit_bytes_read(u))
			__builtin_trap();
	} else {
		check_failure(ru, &err);
	}
	/* a text that parses as a recipe is a unit of one slot named "output" */
	if (rr == 0 && (ru != 0 || weightd_unit_slot_count(u) != 1 ||
			strcmp(weightd_unit_slot_name(u, 0), "output") != 0))
		__builtin_trap();
	weightd_unit_free(u);
	weightd_recipe_free(r);
	return 0;
}
