/* SPDX-License-Identifier: Apache-2.0 */
/* test_huge.c - segments on huge pages: with segment_dir on a tmpfs mounted huge=within_size,
 * clients in separate processes map large weights with 2 MiB pages (the kernel's own counters
 * say so), status and the log say which pages segments get, the fallback to 4 KiB pages is told
 * once with what to change, and a segment_dir that would let others in is refused. Needs root
 * to mount (skipped otherwise). */
#include <stdarg.h>
#include <sys/mount.h>
#include <sys/statfs.h>

#include <linux/magic.h>

#include "fixture.h"

static char mnt[400];

static int teardown(void **state)
{
	(void)state;
	if (H.dir[0]) /* not when the test was skipped before making one */
		harness_cleanup(&H);
	if (mnt[0]) {
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
	}
	mnt[0] = '\0';
	memset(&H, 0, sizeof(H));
	return 0;
}

/* A tmpfs with these options at <H.dir>/seg, mode 0700; skips the test where it cannot mount. */
static void mount_tmpfs(const char *opts)
{
	if (geteuid() != 0)
		skip(); /* mounting needs root; the suite runs as root in CI */
	snprintf(mnt, sizeof(mnt), "%s/seg", H.dir);
	assert_int_equal(mkdir(mnt, 0700), 0);
	if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) {
		fprintf(stderr, "note: cannot mount a tmpfs (%s): %s; skipped\n", opts,
			strerror(errno));
		rmdir(mnt);
		mnt[0] = '\0';
		skip();
	}
}

/* One value of /proc/<pid>/smaps_rollup or /proc/meminfo ("Name:" in kB), or -1. */
static long kb_of(const char *file, const char *name)
{
	FILE *f = fopen(file, "r");
	char line[256];
	size_t n = strlen(name);
	long v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, name, n) == 0 && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

/* "m": big (8 MiB), small (64 KiB), mid (3 MiB), as wd-mkfixture writes them. */
static void start_with(const char *extra)
{
	char path[512], args[800], sec[700];

	harness_path(&H, "m.safetensors", path, sizeof(path));
	snprintf(args, sizeof(args),
		 "safetensors %s --tensor small:U8:65536 --tensor big:U8:8388608 "
		 "--tensor mid:U8:3145728",
		 path);
	assert_int_equal(harness_mkfixture(args), 0);
	snprintf(sec, sizeof(sec), "[checkpoint:m]\npath = %s\n", path);
	it_start(&H, extra, sec);
}

/*
 * In a child process: fetch big and mid (one unit of the three, so they share a segment), map
 * them, touch every page, and report the weights' offsets, where big is mapped, and the
 * kernel's count of this process's PMD-mapped shared memory.
 */
static void child_touch(long *ret_pmd_kb, uint64_t *ret_off_big, uint64_t *ret_off_mid,
			uintptr_t *ret_addr)
{
	int pfd[2];
	pid_t pid;
	char line[256];
	FILE *in;
	unsigned long long ob = 0, om = 0, addr = 0;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const char *names[] = { "small", "big", "mid" };
		weightd_client *c = it_connect(&H);
		weightd_unit *u = NULL;
		weightd_error err;
		const uint8_t *big, *mid;
		volatile uint8_t sum = 0;
		char path[64];
		FILE *out = fdopen(pfd[1], "w");

		close(pfd[0]);
		if (it_unit_of(c, "m", names, 3, true, &u, &err) < 0)
			_exit(2);
		weightd_weight *wb = it_get_ok(c, "m", "big"), *wm = it_get_ok(c, "m", "mid");
		big = it_map(wb);
		mid = it_map(wm);
		for (uint64_t i = 0; i < weightd_weight_nbytes(wb); i += 4096)
			sum += big[i];
		for (uint64_t i = 0; i < weightd_weight_nbytes(wm); i += 4096)
			sum += mid[i];
		snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)getpid());
		{
			long shm = kb_of(path, "ShmemPmdMapped"),
			     file = kb_of(path, "FilePmdMapped");

			fprintf(out, "%ld %llu %llu %llx\n",
				(shm > 0 ? shm : 0) + (file > 0 ? file : 0),
				(unsigned long long)weightd_weight_offset(wb),
				(unsigned long long)weightd_weight_offset(wm),
				(unsigned long long)(uintptr_t)big);
		}
		fclose(out);
		weightd_release(wb);
		weightd_release(wm);
		weightd_unit_free(u);
		weightd_close(c);
		(void)sum;
		_exit(0);
	}
	close(pfd[1]);
	in = fdopen(pfd[0], "r");
	assert_non_null(in);
	assert_non_null(fgets(line, sizeof(line), in));
	fclose(in);
	it_wait_child_ok(pid);
	assert_int_equal(sscanf(line, "%ld %llu %llu %llx", ret_pmd_kb, &ob, &om, &addr), 4);
	*ret_off_big = ob;
	*ret_off_mid = om;
	*ret_addr = (uintptr_t)addr;
}

/*
 * The packaged setup in small: segment_dir on a huge=within_size tmpfs. Two client processes
 * map the 8 MiB and 3 MiB weights at 2 MiB-aligned offsets and addresses and the kernel counts
 * their pages PMD-mapped; ShmemHugePages grew; status and the log say huge pages.
 */
static void huge_pages_reach_clients(void **state)
{
	char extra[600];
	long pmd_kb, before = kb_of("/proc/meminfo", "ShmemHugePages");
	uint64_t ob, om;
	uintptr_t addr;
	weightd_status *st;

	(void)state;
	assert_int_equal(harness_init(&H), 0);
	mount_tmpfs("size=256m,mode=0700,huge=within_size");
	snprintf(extra, sizeof(extra), "segment_dir = %s\n", mnt);
	start_with(extra);
	assert_true(harness_log_contains(&H, "get huge pages (2048 KiB)"));
	for (int proc = 0; proc < 2; proc++) {
		child_touch(&pmd_kb, &ob, &om, &addr);
		assert_int_equal(ob % (2 * MiB), 0);
		assert_int_equal(om % (2 * MiB), 0);
		assert_int_equal(addr % (2 * MiB), 0);
		/* big's 8 MiB and mid's first 2 MiB at least, in every process that maps them */
		if (pmd_kb < 10 * 1024)
			fail_msg("process %d has %ld KiB PMD-mapped, not the 10 MiB of huge pages "
				 "its weights span",
				 proc, pmd_kb);
	}
	assert_true(kb_of("/proc/meminfo", "ShmemHugePages") >= before + 10 * 1024);
	st = it_status_of(&H);
	assert_string_equal(st->segment_dir, mnt);
	assert_int_equal(st->segment_page_bytes, 2 * MiB);
	assert_true(st->segment_huge_bytes >= 10 * MiB);
	assert_true(st->segment_huge_bytes <= st->segment_bytes);
	assert_int_equal(st->foreign_segments, 0);
	weightd_status_free(st);
}

/* Without huge pages, weightd says so once at start, naming what to change, and status agrees. */
static void four_kib_pages_are_told(void **state)
{
	char extra[600];
	weightd_status *st;
	long pmd_kb;
	uint64_t ob, om;
	uintptr_t addr;

	(void)state;
	assert_int_equal(harness_init(&H), 0);
	mount_tmpfs("size=256m,mode=0700,huge=never");
	snprintf(extra, sizeof(extra), "segment_dir = %s\n", mnt);
	start_with(extra);
	assert_true(harness_log_contains(&H, "get 4 KiB pages, not huge pages: mount that tmpfs "
					     "with huge=within_size"));
	child_touch(&pmd_kb, &ob, &om, &addr);
	assert_int_equal(ob % (2 * MiB), 0); /* the layout does not depend on the pages */
	assert_int_equal(pmd_kb, 0);
	st = it_status_of(&H);
	assert_int_equal(st->segment_page_bytes, 4096);
	assert_int_equal(st->segment_huge_bytes, 0);
	weightd_status_free(st);
	harness_cleanup(&H);
	memset(&H, 0, sizeof(H));

	/* /dev/shm, the default: a notice naming segment_dir and huge=within_size */
	assert_int_equal(harness_init(&H), 0);
	if (H.seg_dir[0])
		return; /* run with WD_TEST_SEGMENT_TMPFS: no /dev/shm daemon to look at */
	start_with(NULL);
	assert_true(harness_log_contains(&H, "segments in /dev/shm get 4 KiB pages"));
	assert_true(harness_log_contains(&H, "set segment_dir to a tmpfs mounted with "
					     "huge=within_size"));
	st = it_status_of(&H);
	assert_string_equal(st->segment_dir, "/dev/shm");
	weightd_status_free(st);
}

/* A segment_dir others could write to, or not a tmpfs, or missing: weightd does not start (exit
 * status 1) and its log names the directory and the fix. */
static void unsafe_segment_dirs_are_refused(void **state)
{
	static const struct {
		const char *opts; /* tmpfs options; NULL: a plain directory on the test's disk */
		const char *says;
	} cases[] = {
		{ "size=16m,mode=0770", "is writable by group or others (mode 0770)" },
		{ "size=16m,mode=0700,uid=65534", "is owned by uid 65534, not by weightd's uid 0" },
		{ NULL, "is not a tmpfs" },
	};
	char extra[600], path[600];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(harness_init(&H), 0);
		if (cases[i].opts) {
			mount_tmpfs(cases[i].opts);
			snprintf(path, sizeof(path), "%s", mnt);
		} else {
			struct statfs sf;

			snprintf(path, sizeof(path), "%s/plain", H.dir);
			assert_int_equal(mkdir(path, 0700), 0);
			if (statfs(path, &sf) == 0 && sf.f_type == TMPFS_MAGIC) {
				teardown(state);
				continue; /* /tmp is a tmpfs here: nothing to show */
			}
		}
		snprintf(extra, sizeof(extra), "segment_dir = %s\n", path);
		assert_int_equal(harness_write_config(&H, extra, NULL), 0);
		assert_true(harness_start(&H) < 0);
		assert_true(WIFEXITED(H.exit_status));
		assert_int_equal(WEXITSTATUS(H.exit_status), 1);
		assert_true(harness_log_contains(&H, cases[i].says));
		assert_true(harness_log_contains(&H, path));
		teardown(state);
	}
	/* and one that does not exist */
	assert_int_equal(harness_init(&H), 0);
	snprintf(extra, sizeof(extra), "segment_dir = %s/missing\n", H.dir);
	assert_int_equal(harness_write_config(&H, extra, NULL), 0);
	assert_true(harness_start(&H) < 0);
	assert_true(harness_log_contains(&H, "/missing: No such file or directory"));
}

/*
 * What a neighbour could try in a segment_dir: another uid cannot create a name there at all.
 * What only root could plant is still not trusted: with the daemon stopped, its segment is
 * replaced by a symlink to another file and a FIFO is put under a name of its pattern; the next
 * start neither follows, opens nor removes them, re-adopts nothing, and serves afresh.
 */
static void planted_names_in_segment_dir(void **state)
{
	char extra[600], seg[700], fifo[700], target[600], line[64];
	weightd_client *c;
	weightd_status *st;
	weightd_weight *w;
	pid_t pid;
	FILE *f;

	(void)state;
	assert_int_equal(harness_init(&H), 0);
	mount_tmpfs("size=64m,mode=0755,huge=within_size");
	snprintf(extra, sizeof(extra), "%s/seg", mnt);
	assert_int_equal(mkdir(extra, 0700), 0);
	snprintf(seg, sizeof(seg), "%s", extra);
	snprintf(extra, sizeof(extra), "segment_dir = %s\n", seg);
	start_with(extra);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char p[800];

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		snprintf(p, sizeof(p), "%s/%s.%032x", seg, H.prefix, 1);
		_exit(open(p, O_CREAT | O_EXCL | O_WRONLY, 0644) < 0 && errno == EACCES ? 0 : 1);
	}
	it_wait_child_ok(pid);

	c = it_connect(&H);
	w = it_get_ok(c, "m", "small");
	weightd_release(w);
	st = it_status(c);
	assert_int_equal(st->n_segments, 1);
	snprintf(extra, sizeof(extra), "%s%s", seg, st->segment_list[0].name);
	weightd_status_free(st);
	weightd_close(c);
	assert_int_equal(harness_stop(&H), 0);
	/* the segment the index vouches for becomes a symlink to a file of root's */
	snprintf(target, sizeof(target), "%s/target", H.dir);
	assert_non_null(f = fopen(target, "w"));
	fputs("not a weight\n", f);
	fclose(f);
	assert_int_equal(unlink(extra), 0);
	assert_int_equal(symlink(target, extra), 0);
	snprintf(fifo, sizeof(fifo), "%s/%s.%032x", seg, H.prefix, 2);
	assert_int_equal(mkfifo(fifo, 0600), 0);

	assert_int_equal(harness_start(&H), 0); /* ready: nothing waited on the FIFO */
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, 0);
	assert_int_equal(st->weights, 0);
	weightd_status_free(st);
	c = it_connect(&H);
	w = it_get_ok(c, "m", "small");
	weightd_release(w);
	weightd_close(c);
	assert_non_null(f = fopen(target, "r"));
	assert_non_null(fgets(line, sizeof(line), f));
	fclose(f);
	assert_string_equal(line, "not a weight\n");
	assert_int_equal(access(extra, F_OK), 0); /* neither followed nor removed */
	assert_int_equal(access(fifo, F_OK), 0);
	assert_int_equal(unlink(extra), 0);
	assert_int_equal(unlink(fifo), 0);
}

TEST_MAIN_WATCHDOG(300, NULL, NULL, cmocka_unit_test_teardown(huge_pages_reach_clients, teardown),
		   cmocka_unit_test_teardown(four_kib_pages_are_told, teardown),
		   cmocka_unit_test_teardown(unsafe_segment_dirs_are_refused, teardown),
		   cmocka_unit_test_teardown(planted_names_in_segment_dir, teardown))
