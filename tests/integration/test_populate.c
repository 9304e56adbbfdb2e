/* SPDX-License-Identifier: Apache-2.0 */
/* test_populate.c - populate at validate against a real weightd: a process that asks for it has
 * every page of its unit in its page tables when validate returns (no fault when it reads them
 * all), one that does not has none until it reads; both see the checkpoint's bytes. */
#include <sys/resource.h>

#include "fixture.h"

/* p.safetensors: a (24 MiB), b (8 MiB + 1 byte, so its end shares a page) and four 64 KiB
 * tensors c..f (packed into one run), U8, bytes pattern with seeds 0..5. */
#define N_TENSORS 6
static const char *const names[N_TENSORS] = { "a", "b", "c", "d", "e", "f" };

static int setup(void **state)
{
	char ckpt[512], sect[800];

	(void)state;
	if (harness_init(&H) != 0)
		return -1;
	harness_path(&H, "p.safetensors", ckpt, sizeof(ckpt));
	it_fixture("safetensors %s --seed 0 --tensor a:U8:25165824 --tensor b:U8:8388609 "
		   "--tensor c:U8:65536 --tensor d:U8:65536 --tensor e:U8:65536 "
		   "--tensor f:U8:65536",
		   ckpt);
	snprintf(sect, sizeof(sect), "[checkpoint:p]\npath = %s\npreload = yes\n", ckpt);
	it_start(&H, "workers = 2\n", sect);
	it_wait_references(&H, N_TENSORS);
	return 0;
}

/* Pages of [p, p + n) in this process's page tables (/proc/self/pagemap's present bit), and
 * how many pages the range spans; -1 when pagemap cannot be read. Not mincore(): a segment's
 * pages are in memory whether or not this process has mapped them in, and mincore tells only
 * the former. */
static long present_pages(const void *p, size_t n, size_t *ret_pages)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t first = (uintptr_t)p / page, last = ((uintptr_t)p + n - 1) / page;
	size_t pages = last - first + 1;
	uint64_t *ent = calloc(pages, sizeof(*ent));
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	long k = -1;

	if (ent && fd >= 0 &&
	    pread(fd, ent, pages * sizeof(*ent), (off_t)(first * 8)) ==
		    (ssize_t)(pages * sizeof(*ent))) {
		k = 0;
		for (size_t i = 0; i < pages; i++)
			k += (long)((ent[i] >> 63) & 1);
	}
	if (fd >= 0)
		close(fd);
	free(ent);
	*ret_pages = pages;
	return k;
}

static long minor_faults(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : -1;
}

#define CHILD_FAIL(code, ...)                 \
	do {                                  \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr);          \
		return code;                  \
	} while (0)

/*
 * Run in a new process (its own mappings; no cmocka assertion, which would unwind into the
 * child's copy of the test runner): bind the whole checkpoint as a unit with populate `on`,
 * count the pages in the page tables before anything reads them, then read every byte and count
 * the page faults that took. 0 when what it saw is what `on` promises, else a code it printed.
 */
/* Page faults reading n pages costs on top of the pages' own: AddressSanitizer checks every read
 * in its shadow memory, one shadow page per 8 pages read, each faulted in on first use. */
#ifdef __SANITIZE_ADDRESS__
#define SHADOW_FAULTS(n) ((long)(n) / 8 + 8)
#else
#define SHADOW_FAULTS(n) 0L
#endif

static int bind_and_read(int on)
{
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	size_t pages = 0;
	long present = 0, faults;

	if (weightd_connect(H.sock, "populate", &c, &err) < 0 || weightd_unit_new(c, &u, &err) < 0)
		CHILD_FAIL(10, "connect: %s", err.message);
	for (size_t i = 0; i < N_TENSORS; i++)
		if (weightd_unit_slot(u, names[i], NULL, NULL, 0, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, names[i], "p", names[i], NULL, &err) < 0)
			CHILD_FAIL(11, "slot %s: %s", names[i], err.message);
	if (weightd_unit_set_populate(u, on, &err) < 0 || weightd_unit_submit(u, &err) < 0 ||
	    weightd_unit_validate(u, &err) < 0)
		CHILD_FAIL(12, "validate: %s", err.message);
	weightd_unit_bind(u);
	for (size_t i = 0; i < N_TENSORS; i++) {
		const weightd_weight *w = weightd_unit_weight(u, names[i]);
		size_t p;
		long k =
			present_pages(weightd_unit_data(u, names[i]), weightd_weight_nbytes(w), &p);

		if (k < 0)
			CHILD_FAIL(13, "cannot read /proc/self/pagemap");
		present += k;
		pages += p;
	}
	faults = minor_faults();
	for (size_t i = 0; i < N_TENSORS; i++) {
		const weightd_weight *w = weightd_unit_weight(u, names[i]);
		int64_t bad = it_pattern_mismatch(weightd_unit_data(u, names[i]),
						  weightd_weight_nbytes(w), (unsigned)i);

		if (bad >= 0)
			CHILD_FAIL(14, "%s: byte %lld differs from the checkpoint's", names[i],
				   (long long)bad);
	}
	faults = minor_faults() - faults;
	fprintf(stderr,
		"populate %s: %ld of %zu pages in the page tables after validate, %ld page faults "
		"reading them all\n",
		on ? "on" : "off", present, pages, faults);
	if (on && (present != (long)pages || faults > 8 + SHADOW_FAULTS(pages)))
		CHILD_FAIL(15, "populate on: not every page was in the page tables");
	/* demand faulting maps a few neighbours per fault, never the whole unit */
	if (!on && (present > (long)pages / 4 || faults < (long)pages / 64))
		CHILD_FAIL(16, "populate off: pages were in the page tables before they were read");
	weightd_unit_free(u);
	weightd_close(c);
	return 0;
}

static void in_child(int on)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(bind_and_read(on));
	it_wait_child_ok(pid);
}

static void populate_prefaults_every_page_at_validate(void **state)
{
	(void)state;
	in_child(1);
}

static void without_populate_pages_fault_in_when_read(void **state)
{
	(void)state;
	in_child(0);
}

TEST_MAIN(setup, fixture_cleanup, cmocka_unit_test(populate_prefaults_every_page_at_validate),
	  cmocka_unit_test(without_populate_pages_fault_in_when_read))
