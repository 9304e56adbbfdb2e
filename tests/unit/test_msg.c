/* SPDX-License-Identifier: Apache-2.0 */
/* test_msg.c - decoding a frame's message into an arena (src/msg.c): a request decodes, and a
 * failure says why, an allocation that failed (ENOMEM) apart from bytes that do not decode
 * (EBADMSG). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tests.h"

#include "msg.h"
#include "weightd.pb-c.h"

/* malloc as the tests script it: the next fail_mallocs calls fail, as libfiu's injected ENOMEM
 * makes them fail. */
static int fail_mallocs;
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n)
{
	if (fail_mallocs > 0) {
		fail_mallocs--;
		return NULL;
	}
	return __real_malloc(n);
}

/* A status request as protobuf bytes, written by hand from proto/weightd.proto: id (field 1,
 * varint) 7, status (field 17, an empty message). */
static const uint8_t status_request[] = { 0x08, 7, 0x8a, 0x01, 0x00 };

static void a_request_decodes(void **state)
{
	Weightd__Request *r;

	(void)state;
	r = wd_msg_unpack(&weightd__request__descriptor, status_request, sizeof(status_request));
	assert_non_null(r);
	assert_int_equal(r->id, 7);
	wd_msg_free(r);
}

/* Memory running out while a good request decodes says ENOMEM: weightd then tells the client it
 * ran out of memory (resource-exhausted) where before it called the request undecodable and
 * dropped the client without a word. */
static void memory_running_out_is_told_from_an_undecodable_request(void **state)
{
	static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff };

	(void)state;
	fail_mallocs = 1;
	errno = 0;
	assert_null(wd_msg_unpack(&weightd__request__descriptor, status_request,
				  sizeof(status_request)));
	fail_mallocs = 0;
	assert_int_equal(errno, ENOMEM);
	errno = 0;
	assert_null(wd_msg_unpack(&weightd__request__descriptor, garbage, sizeof(garbage)));
	assert_int_equal(errno, EBADMSG);
}

TEST_MAIN(NULL, NULL, cmocka_unit_test(a_request_decodes),
	  cmocka_unit_test(memory_running_out_is_told_from_an_undecodable_request))
