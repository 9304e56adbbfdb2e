/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_error.c - the one list of error codes: every code of the wire protocol
 * (weightd.ErrorCode, walked through protobuf-c's descriptor) is in <weightd/error.h> under the
 * same name and number and has a name of its own from weightd_code_name, and the header has no
 * code the protocol lacks. The header is read as shipped, so neither list can drift alone. And
 * a call that succeeds leaves the caller's error empty. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weightd.pb-c.h"
#include "weightd/client.h"

#define MAX_CODES 256

struct code {
	char name[64];   /* WEIGHTD_OK, WEIGHTD_E_... */
	int value;
};

/* Every "WEIGHTD_OK = N," / "WEIGHTD_E_NAME = N," line of the installed-to-be error.h. */
static size_t header_codes(struct code *codes)
{
	const char *src = getenv("WD_SOURCE_DIR");
	char path[4096], line[512];
	size_t n = 0;
	FILE *f;

	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/client/include/weightd/error.h", src);
	f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	while (fgets(line, sizeof(line), f)) {
		char name[64];
		int value, used = 0;

		if (sscanf(line, " %63[A-Z0-9_] = %d ,%n", name, &value, &used) == 2 && used > 0 &&
		    strncmp(name, "WEIGHTD_", 8) == 0) {
			assert_true(n < MAX_CODES);
			snprintf(codes[n].name, sizeof(codes[n].name), "%s", name);
			codes[n].value = value;
			n++;
		}
	}
	fclose(f);
	return n;
}

/* The public spelling of a protocol value name: ERR_OK -> WEIGHTD_OK, ERR_X -> WEIGHTD_E_X. */
static void public_name(const char *wire, char *buf, size_t cap)
{
	assert_int_equal(strncmp(wire, "ERR_", 4), 0);
	if (strcmp(wire, "ERR_OK") == 0)
		snprintf(buf, cap, "WEIGHTD_OK");
	else
		snprintf(buf, cap, "WEIGHTD_E_%s", wire + 4);
}

static void every_wire_code_is_in_the_header(void **state)
{
	const ProtobufCEnumDescriptor *d = &weightd__error_code__descriptor;
	struct code codes[MAX_CODES];
	size_t n = header_codes(codes);

	(void)state;
	/* a parse that finds nothing would pass everything below */
	assert_true(n >= 30);
	assert_true(d->n_values >= 30);
	for (unsigned i = 0; i < d->n_values; i++) {
		char want[96];
		size_t k;

		public_name(d->values[i].name, want, sizeof(want));
		for (k = 0; k < n && strcmp(codes[k].name, want) != 0; k++)
			;
		if (k == n)
			fail_msg("%s (%d) is in proto/weightd.proto but %s is not in error.h",
				 d->values[i].name, d->values[i].value, want);
		if (codes[k].value != d->values[i].value)
			fail_msg("%s is %d in error.h but %s is %d on the wire", want, codes[k].value,
				 d->values[i].name, d->values[i].value);
	}
}

static void every_header_code_is_on_the_wire(void **state)
{
	const ProtobufCEnumDescriptor *d = &weightd__error_code__descriptor;
	struct code codes[MAX_CODES];
	size_t n = header_codes(codes);

	(void)state;
	assert_true(n >= 30);
	for (size_t k = 0; k < n; k++) {
		const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, codes[k].value);
		char want[96];

		if (!v)
			fail_msg("%s = %d is in error.h but no ErrorCode has that number",
				 codes[k].name, codes[k].value);
		public_name(v->name, want, sizeof(want));
		if (strcmp(want, codes[k].name) != 0)
			fail_msg("%d is %s in error.h but %s on the wire", codes[k].value,
				 codes[k].name, v->name);
	}
}

static void every_code_has_a_name_of_its_own(void **state)
{
	const ProtobufCEnumDescriptor *d = &weightd__error_code__descriptor;
	const char *unknown = weightd_code_name(100000);

	(void)state;
	assert_string_equal(unknown, "unknown-error");
	for (unsigned i = 0; i < d->n_values; i++) {
		int v = d->values[i].value;
		const char *name = weightd_code_name(v);

		assert_non_null(name);
		if (strcmp(name, unknown) == 0)
			fail_msg("weightd_code_name has no name for %s (%d)", d->values[i].name, v);
		/* a call's negative return value names the same code */
		assert_string_equal(weightd_code_name(-v), name);
		for (unsigned j = 0; j < i; j++)
			if (strcmp(weightd_code_name(d->values[j].value), name) == 0)
				fail_msg("%s and %s are both named \"%s\"", d->values[j].name,
					 d->values[i].name, name);
	}
	/* a number between codes that the protocol does not use is not given a name */
	assert_null(protobuf_c_enum_descriptor_get_value(d, 14));
	assert_string_equal(weightd_code_name(14), unknown);
}

static void assert_error_empty(const weightd_error *e)
{
	assert_int_equal(e->code, WEIGHTD_OK);
	assert_int_equal(e->node, 0);
	assert_int_equal(e->axis, -1);
	assert_int_equal(e->expected, 0);
	assert_int_equal(e->actual, 0);
	assert_string_equal(e->checkpoint, "");
	assert_string_equal(e->tensor, "");
	assert_string_equal(e->slot, "");
	assert_string_equal(e->message, "");
}

/* A call starts from a clean error: whatever the caller's struct held (garbage, or the last
 * failure with every field set), a call that succeeds leaves every field empty or zero. */
static void a_call_that_succeeds_leaves_the_error_empty(void **state)
{
	weightd_recipe *r = NULL;
	weightd_error e;

	(void)state;
	memset(&e, 0x7f, sizeof(e));
	assert_int_equal(weightd_recipe_new(&r, &e), 0);
	assert_error_empty(&e);
	assert_true(weightd_recipe_new(NULL, &e) < 0);
	assert_int_equal(e.code, WEIGHTD_E_INVALID_ARGUMENT);
	assert_true(strlen(e.message) > 0);
	e.node = 3;
	e.axis = 1;
	e.expected = 5;
	e.actual = 6;
	snprintf(e.checkpoint, sizeof(e.checkpoint), "ck");
	snprintf(e.tensor, sizeof(e.tensor), "t");
	snprintf(e.slot, sizeof(e.slot), "s");
	weightd_recipe_free(r);
	r = NULL;
	assert_int_equal(weightd_recipe_new(&r, &e), 0);
	assert_error_empty(&e);
	weightd_recipe_free(r);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(every_wire_code_is_in_the_header),
	  cmocka_unit_test(every_header_code_is_on_the_wire),
	  cmocka_unit_test(every_code_has_a_name_of_its_own),
	  cmocka_unit_test(a_call_that_succeeds_leaves_the_error_empty))
