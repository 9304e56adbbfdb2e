/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_seg.c - the locks libweightd keeps over the weights it holds (client/seg.c): after
 * any sequence of holds and releases, batched or not, the bytes the kernel shows locked on the
 * segment's fd are exactly the held weights with the gaps under WD_HOLD_GAP between them filled,
 * as a plain model computes them; a fork() keeps the locks of what it inherited. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "holdlock.h"
#include "seg.h"

#define SEG (1u << 20)     /* the segment: 1 MiB */
#define GRAIN 64u          /* weights start at multiples of 64 bytes */
#define N_W 256            /* the weights of the model: fixed places, some far apart */

struct w {
	uint64_t off, len;
	int held; /* how many times the model holds it */
};

static struct w W[N_W];

/* Places: runs of small weights packed at 64 bytes, some 4 KiB aligned, gaps of every size. */
static void layout(unsigned seed)
{
	uint64_t at = 0;

	srand(seed);
	for (int i = 0; i < N_W; i++) {
		uint64_t len = (uint64_t)(1 + rand() % 3000);
		uint64_t gap = rand() % 4 == 0 ? (uint64_t)(rand() % 9000) : 0;

		at = (at + gap + GRAIN - 1) / GRAIN * GRAIN;
		if (rand() % 8 == 0)
			at = (at + 4095) / 4096 * 4096;
		W[i] = (struct w){ at, len, 0 };
		at += len;
	}
	assert_true(at < SEG);
}

/* The model: is byte x covered by the locks a process holding W[].held would keep? */
static void model(uint8_t *want)
{
	int last = -1;

	memset(want, 0, SEG / GRAIN);
	for (int i = 0; i < N_W; i++) {
		if (!W[i].held)
			continue;
		uint64_t from = W[i].off;

		if (last >= 0 && W[i].off - (W[last].off + W[last].len) < WD_HOLD_GAP)
			from = W[last].off + W[last].len;
		for (uint64_t g = from / GRAIN; g < (W[i].off + W[i].len + GRAIN - 1) / GRAIN; g++)
			want[g] = 1;
		last = i;
	}
}

/* What another description of the file sees locked, grain by grain: each lock the kernel shows
 * marks its grains, and the parts of the range on either side are asked again (a grain partly
 * locked counts as locked, as in the model, whose runs start on a weight's 64-byte boundary or
 * run on from a weight's end). */
static void seen_in(int other, uint64_t lo, uint64_t hi, uint8_t *got)
{
	uint64_t s, e;

	if (lo >= hi || wd_holdlock_test(other, lo, hi - lo, &s, &e) != 1)
		return;
	for (uint64_t g = s / GRAIN; g < (e + GRAIN - 1) / GRAIN; g++)
		got[g] = 1;
	seen_in(other, lo, s, got);
	seen_in(other, e, hi, got);
}

static void seen(int other, uint8_t *got)
{
	memset(got, 0, SEG / GRAIN);
	seen_in(other, 0, SEG, got);
}

static void check(int other, const char *when)
{
	static uint8_t want[SEG / GRAIN], got[SEG / GRAIN];

	model(want);
	seen(other, got);
	for (uint64_t g = 0; g < SEG / GRAIN; g++)
		if (want[g] != got[g])
			fail_msg("%s: bytes %llu.. are %s but should %sbe", when,
				 (unsigned long long)(g * GRAIN), got[g] ? "locked" : "not locked",
				 want[g] ? "" : "not ");
}

static int open_other(int fd)
{
	char path[64];
	int o;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	o = open(path, O_RDONLY);
	assert_true(o >= 0);
	return o;
}

static struct wc_seg *new_seg(struct wc_seg_table *t, int *ret_other)
{
	struct wc_seg *sg = NULL;
	weightd_error err;
	int fd = memfd_create("seg", 0);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, SEG), 0);
	*ret_other = open_other(fd);
	assert_int_equal(wc_seg_get(t, 7, SEG, fd, &sg, NULL, &err), 0);
	return sg;
}

/* Random holds and releases, one at a time or many per commit, checked after each commit. */
static void holds_match_the_model(void **state)
{
	struct wc_seg_table *t = wc_seg_table_new();
	weightd_error err;
	int other;
	struct wc_seg *sg;

	(void)state;
	for (unsigned seed = 1; seed <= 6; seed++) {
		layout(seed);
		sg = new_seg(t, &other);
		for (int step = 0; step < 300; step++) {
			int batch = rand() % 3 == 0 ? 1 + rand() % 40 : 1;
			bool hold = rand() % 2 == 0;

			for (int b = 0; b < batch; b++) {
				int i = rand() % N_W;

				if (hold) {
					assert_int_equal(wc_seg_hold(sg, W[i].off, W[i].len), 0);
					W[i].held++;
				} else if (W[i].held) {
					wc_seg_unhold(sg, W[i].off, W[i].len);
					W[i].held--;
				}
			}
			if (hold)
				assert_int_equal(wc_seg_hold_commit(sg, &err), 0);
			else
				wc_seg_unhold_commit(sg);
			check(other, hold ? "after holds" : "after releases");
		}
		/* everything let go: nothing locked */
		for (int i = 0; i < N_W; i++)
			for (; W[i].held; W[i].held--)
				wc_seg_unhold(sg, W[i].off, W[i].len);
		wc_seg_unhold_commit(sg);
		check(other, "after letting go of all");
		wc_seg_unref(sg);
		close(other);
	}
	wc_seg_table_free(t);
}

/* A unit's worth at once, in order and in reverse: one lock call per run is what makes it cheap;
 * here only that the result is right. */
static void a_large_batch(void **state)
{
	struct wc_seg_table *t = wc_seg_table_new();
	weightd_error err;
	int other;
	struct wc_seg *sg;

	(void)state;
	layout(42);
	sg = new_seg(t, &other);
	for (int i = N_W - 1; i >= 0; i--) {
		assert_int_equal(wc_seg_hold(sg, W[i].off, W[i].len), 0);
		W[i].held = 1;
	}
	assert_int_equal(wc_seg_hold_commit(sg, &err), 0);
	check(other, "all held");
	for (int i = 0; i < N_W; i += 2) {
		wc_seg_unhold(sg, W[i].off, W[i].len);
		W[i].held = 0;
	}
	wc_seg_unhold_commit(sg);
	check(other, "every other let go");
	for (int i = 1; i < N_W; i += 2) {
		wc_seg_unhold(sg, W[i].off, W[i].len);
		W[i].held = 0;
	}
	wc_seg_unhold_commit(sg);
	check(other, "all let go");
	wc_seg_unref(sg);
	close(other);
	wc_seg_table_free(t);
}

/* After a fork(), what was held before it is never unlocked by a release: the child maps it. */
static void a_fork_keeps_inherited_locks(void **state)
{
	struct wc_seg_table *t = wc_seg_table_new();
	weightd_error err;
	int other, status;
	struct wc_seg *sg;
	pid_t kid;

	(void)state;
	layout(7);
	sg = new_seg(t, &other);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(wc_seg_hold(sg, W[i].off, W[i].len), 0);
		W[i].held = 1;
	}
	assert_int_equal(wc_seg_hold_commit(sg, &err), 0);
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		pause(); /* keeps the description (and its mapping-free fd) alive */
		_exit(0);
	}
	for (int i = 0; i < 10; i++) {
		wc_seg_unhold(sg, W[i].off, W[i].len);
		W[i].held = 0;
	}
	wc_seg_unhold_commit(sg);
	/* still locked: the model says none, the kernel still has them all */
	for (int i = 0; i < 10; i++)
		assert_int_equal(wd_holdlock_test(other, W[i].off, W[i].len, NULL, NULL), 1);
	wc_seg_unref(sg); /* this process's fd closes; the child's keeps the description */
	for (int i = 0; i < 10; i++)
		assert_int_equal(wd_holdlock_test(other, W[i].off, W[i].len, NULL, NULL), 1);
	kill(kid, SIGKILL);
	waitpid(kid, &status, 0);
	/* the last holder of the description gone: so are its locks */
	for (int i = 0; i < 10; i++)
		assert_int_equal(wd_holdlock_test(other, W[i].off, W[i].len, NULL, NULL), 0);
	close(other);
	wc_seg_table_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(holds_match_the_model),
		cmocka_unit_test(a_large_batch),
		cmocka_unit_test(a_fork_keeps_inherited_locks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
