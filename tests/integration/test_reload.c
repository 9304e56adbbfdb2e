/* SPDX-License-Identifier: Apache-2.0 */
/* test_reload.c - checkpoints whose files change under a running weightd: a source-changed error
 * says what to do, a reload that finds broken files keeps the last good generation serving and
 * reports the bad one (list, status, metrics), `watch = yes` reloads by itself once the files are
 * quiet, and weightctl reload says what the reload did. */
#include <jansson.h>

#include "fixture.h"
#include "files.h"

#define T_BYTES 65536u

/* `path`: four U8 tensors t0..t3 of T_BYTES, pattern seeds seed..seed+3. */
static void four_tensors(const char *path, unsigned seed)
{
	it_fixture("safetensors %s --seed %u --tensor t0:U8:%u --tensor t1:U8:%u --tensor t2:U8:%u "
		   "--tensor t3:U8:%u",
		   path, seed, T_BYTES, T_BYTES, T_BYTES, T_BYTES);
}

/* Tensor tK of checkpoint `ckpt` holds the pattern of seed `seed`. */
static void expect(weightd_client *c, const char *ckpt, const char *tensor, unsigned seed)
{
	weightd_weight *w = it_get_ok(c, ckpt, tensor);

	if (it_pattern_mismatch(it_map(w), T_BYTES, seed) != -1)
		fail_msg("%s:%s is not the pattern of seed %u", ckpt, tensor, seed);
	weightd_release(w);
}

/* Run weightctl --socket H.sock ARGS... (NULL-terminated); its exit status, stdout in out. */
static int ctl(char *out, size_t cap, ...)
{
	char *argv[16];
	int argc = 0;
	va_list ap;

	argv[argc++] = (char *)harness_weightctl();
	argv[argc++] = "--socket";
	argv[argc++] = H.sock;
	va_start(ap, cap);
	while (argc < 15 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	return harness_run(argv, out, cap, (uid_t)-1);
}

/* The checkpoint's status entry, from a fresh connection (a new client). */
static weightd_status *status_now(void)
{
	return it_status_of(&H);
}

/* A tensor not cached yet, its file replaced by rename: the error is source-changed, and it says
 * how to have the new file served. weightctl reload then serves it. */
static void a_changed_file_error_says_what_to_do(void **state)
{
	char p[512], tmp[600], sect[1200], out[8192];
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	weightd_status *st;

	(void)state;
	harness_path(&H, "m.safetensors", p, sizeof(p));
	four_tensors(p, 10);
	snprintf(sect, sizeof(sect), "[checkpoint:m]\npath = %s\n", p);
	it_start(&H, NULL, sect);
	c = it_connect(&H);
	expect(c, "m", "t0", 10);
	snprintf(tmp, sizeof(tmp), "%s.new", p);
	four_tensors(tmp, 50);
	assert_int_equal(rename(tmp, p), 0);

	assert_int_equal(it_get(c, "m", "t1", &w, &err), -WEIGHTD_E_SOURCE_CHANGED);
	if (!strstr(err.message, "weightctl reload") || !strstr(err.message, "watch = yes"))
		fail_msg("the error does not say what to do: %s", err.message);
	weightd_close(c);

	assert_int_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	if (!strstr(out, "checkpoint m: new generation 2"))
		fail_msg("weightctl reload did not say what changed:\n%s", out);
	c = it_connect(&H);
	expect(c, "m", "t1", 51);
	weightd_close(c);
	st = status_now();
	assert_int_equal(it_source(st, "m")->generation, 2);
	weightd_status_free(st);
	assert_int_equal(harness_stop(&H), 0);
}

/* Split `file` into the two shards of `dir` (t0, t1 in the first; t2, t3 in the second). */
static void shard(const char *dir, const char *file)
{
	it_fixture("sharded %s 2 --from %s", dir, file);
}

/*
 * A sharded checkpoint whose second shard is replaced by a broken file: the reload keeps
 * generation 1 serving, to clients old and new, cached weights and uncached ones (read from the
 * files it has open), and says why in list, status, weightctl and metrics. A shard truncated in
 * place is refused the same way; what is cached is still served. Good files end it.
 */
static void a_broken_reload_keeps_the_last_good_generation(void **state)
{
	char file[512], dir[512], shard2[600], bad[600], sect[1200], out[16384];
	weightd_client *c;
	weightd_weight *w = NULL;
	weightd_error err;
	weightd_status *st;
	weightd_source_list *l;
	weightd_reload_info *rep;
	const weightd_source_info *si;

	(void)state;
	harness_path(&H, "m.safetensors", file, sizeof(file));
	harness_path(&H, "sharded", dir, sizeof(dir));
	four_tensors(file, 10);
	shard(dir, file);
	snprintf(shard2, sizeof(shard2), "%s/model-00002-of-00002.safetensors", dir);
	snprintf(sect, sizeof(sect), "[checkpoint:s]\npath = %s\n", dir);
	it_start(&H, NULL, sect);
	c = it_connect(&H);
	expect(c, "s", "t0", 10);

	/* a broken shard lands by rename */
	snprintf(bad, sizeof(bad), "%s/broken.tmp", dir);
	{
		FILE *f = fopen(bad, "w");

		assert_non_null(f);
		fputs("this is not a safetensors file", f);
		fclose(f);
	}
	assert_int_equal(rename(bad, shard2), 0);
	if (weightd_reload_report(c, &rep, &err) < 0)
		fail_msg("reload: %s", err.message);
	/* the answer warns about it */
	assert_int_equal(rep->n_warnings, 1);
	if (!strstr(rep->warnings[0],
		    "checkpoint s: the changed files were refused, generation 1 is "
		    "still served"))
		fail_msg("warning: %s", rep->warnings[0]);
	weightd_reload_report_free(rep);
	weightd_close(c);

	/* a new client: listed ready on generation 1, with the refused files' error */
	c = it_connect(&H);
	assert_int_equal(weightd_list(c, &l, &err), 0);
	assert_int_equal(l->count, 1);
	assert_string_equal(l->sources[0].state, "ready");
	assert_int_equal(l->sources[0].generation, 1);
	if (!strstr(l->sources[0].error, "generation 1 is still served") ||
	    !strstr(l->sources[0].error, "model-00002-of-00002.safetensors"))
		fail_msg("list error: %s", l->sources[0].error);
	weightd_source_list_free(l);
	st = it_status(c);
	si = it_source(st, "s");
	assert_string_equal(si->state, "ready");
	assert_non_null(strstr(si->error, "generation 1 is still served"));
	weightd_status_free(st);
	/* served: the cached weight, and one of the replaced shard read from the file still open */
	expect(c, "s", "t0", 10);
	expect(c, "s", "t3", 13);
	weightd_close(c);

	/* weightctl shows it, and metrics have a series for it */
	assert_int_equal(ctl(out, sizeof(out), "list", NULL), 0);
	if (!strstr(out, "ready") || !strstr(out, "generation 1 is still served"))
		fail_msg("weightctl list:\n%s", out);
	assert_int_equal(ctl(out, sizeof(out), "status", NULL), 0);
	if (!strstr(out, "generation 1 is still served"))
		fail_msg("weightctl status:\n%s", out);
	assert_int_equal(ctl(out, sizeof(out), "metrics", NULL), 0);
	if (!strstr(out, "weightd_source_refused{source=\"s\"} 1") ||
	    !strstr(out, "weightd_source_ready{source=\"s\"} 1"))
		fail_msg("weightctl metrics:\n%s", out);
	/* weightctl reload says so and still exits 0: the reload itself worked */
	assert_int_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	if (!strstr(out, "warning: checkpoint s: the changed files were refused"))
		fail_msg("weightctl reload:\n%s", out);

	/* the first shard, the very file generation 1 has open, truncated in place: refused too;
	 * the cached weight is still served, and one that would read the truncated file fails,
	 * saying why */
	{
		char shard1[600];

		snprintf(shard1, sizeof(shard1), "%s/model-00001-of-00002.safetensors", dir);
		assert_int_equal(truncate(shard1, 1000), 0);
	}
	assert_int_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	if (!strstr(out, "warning: checkpoint s: the changed files were refused"))
		fail_msg("weightctl reload after the truncation:\n%s", out);
	c = it_connect(&H);
	expect(c, "s", "t0", 10);
	assert_int_equal(it_get(c, "s", "t1", &w, &err), -WEIGHTD_E_SOURCE_CHANGED);
	if (!strstr(err.message, "model-00001-of-00002.safetensors changed size"))
		fail_msg("t1: %s", err.message);
	st = it_status(c);
	assert_string_equal(it_source(st, "s")->state, "ready");
	assert_int_equal(it_source(st, "s")->generation, 1);
	weightd_status_free(st);
	weightd_close(c);

	/* good files: generation 2, the error gone */
	four_tensors(file, 40);
	shard(dir, file);
	assert_int_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	if (!strstr(out, "checkpoint s: new generation 2") || strstr(out, "warning"))
		fail_msg("weightctl reload after the repair:\n%s", out);
	c = it_connect(&H);
	st = it_status(c);
	assert_int_equal(it_source(st, "s")->generation, 2);
	assert_string_equal(it_source(st, "s")->error, "");
	weightd_status_free(st);
	expect(c, "s", "t1", 41);
	expect(c, "s", "t3", 43);
	weightd_close(c);
	assert_int_equal(ctl(out, sizeof(out), "metrics", NULL), 0);
	assert_non_null(strstr(out, "weightd_source_refused{source=\"s\"} 0"));
	assert_int_equal(harness_stop(&H), 0);
}

/* Wait up to timeout_ms for checkpoint `ckpt` to reach generation `gen`; its generation then. */
static uint64_t wait_generation(const char *ckpt, uint64_t gen, int timeout_ms)
{
	int64_t end = it_now_ms() + timeout_ms;
	uint64_t now = 0;

	for (;;) {
		weightd_status *st = status_now();

		now = it_source(st, ckpt) ? it_source(st, ckpt)->generation : 0;
		weightd_status_free(st);
		if (now >= gen || it_now_ms() >= end)
			return now;
		usleep(20000);
	}
}

/* Read a whole file into memory (*ret_len bytes). */
/*
 * `watch = yes`: a file replaced by rename and a shard renamed over are reloaded by themselves;
 * a file copied in slowly (writes closer together than watch_delay) is reloaded once, when the
 * copy is done, never in the middle; a checkpoint without `watch` is left alone.
 */
static void watch_reloads_changed_files_once_quiet(void **state)
{
	char w[512], tmp[600], file[512], dir[512], s2[600], u[512], sect[2400];
	uint8_t *bytes;
	size_t len;
	weightd_client *c;
	int fd;

	(void)state;
	harness_path(&H, "w.safetensors", w, sizeof(w));
	harness_path(&H, "u.safetensors", u, sizeof(u));
	harness_path(&H, "m.safetensors", file, sizeof(file));
	harness_path(&H, "sharded", dir, sizeof(dir));
	four_tensors(w, 10);
	four_tensors(u, 10);
	four_tensors(file, 10);
	shard(dir, file);
	snprintf(sect, sizeof(sect),
		 "[checkpoint:w]\npath = %s\nwatch = yes\nwatch_delay = 400ms\n\n"
		 "[checkpoint:s]\npath = %s\nwatch = yes\nwatch_delay = 200ms\n\n"
		 "[checkpoint:u]\npath = %s\n",
		 w, dir, u);
	it_start(&H, NULL, sect);

	/* replaced by rename: a new generation, nobody asked */
	snprintf(tmp, sizeof(tmp), "%s.new", w);
	four_tensors(tmp, 20);
	assert_int_equal(rename(tmp, w), 0);
	assert_int_equal(wait_generation("w", 2, 10000), 2);
	c = it_connect(&H);
	expect(c, "w", "t0", 20);
	weightd_close(c);

	/* a shard renamed over, inside a watched directory */
	four_tensors(file, 30);
	snprintf(tmp, sizeof(tmp), "%s/shards.new", dir);
	shard(tmp, file);
	snprintf(s2, sizeof(s2), "%s/model-00002-of-00002.safetensors", tmp);
	{
		char dst[600];

		snprintf(dst, sizeof(dst), "%s/model-00002-of-00002.safetensors", dir);
		assert_int_equal(rename(s2, dst), 0);
	}
	assert_int_equal(wait_generation("s", 2, 10000), 2);
	c = it_connect(&H);
	expect(c, "s", "t3", 33);
	expect(c, "s", "t0", 10); /* the first shard is still the old one */
	weightd_close(c);

	/* a slow copy in place: 8 pieces 150 ms apart (watch_delay 400 ms): no reload in the
	 * middle, exactly one after */
	snprintf(tmp, sizeof(tmp), "%s.src", w);
	four_tensors(tmp, 60);
	bytes = tf_read(tmp, &len);
	fd = open(w, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	for (int i = 0; i < 8; i++) {
		size_t from = len * (size_t)i / 8, to = len * (size_t)(i + 1) / 8;

		assert_int_equal(write(fd, bytes + from, to - from), (ssize_t)(to - from));
		usleep(150000);
		assert_int_equal(wait_generation("w", 3, 0), 2);
	}
	close(fd);
	free(bytes);
	assert_int_equal(wait_generation("w", 3, 10000), 3);
	usleep(800000); /* nothing more comes of it */
	assert_int_equal(wait_generation("w", 4, 0), 3);
	c = it_connect(&H);
	expect(c, "w", "t2", 62);
	weightd_close(c);

	/* unwatched: left alone */
	snprintf(tmp, sizeof(tmp), "%s.new", u);
	four_tensors(tmp, 70);
	assert_int_equal(rename(tmp, u), 0);
	usleep(500000);
	assert_int_equal(wait_generation("u", 2, 0), 1);
	assert_true(harness_log_contains(&H, "checkpoint w: reloading its changed files"));
	assert_int_equal(harness_stop(&H), 0);
}

/* weightctl reload: what was applied, what needs a restart (exit 0), in --json too; a reload
 * that fails exits nonzero. */
static void weightctl_reload_reports_what_it_did(void **state)
{
	char p[512], sect[1200], out[16384];
	json_t *j, *a;
	json_error_t je;
	bool warned = false;

	(void)state;
	harness_path(&H, "m.safetensors", p, sizeof(p));
	four_tensors(p, 10);
	snprintf(sect, sizeof(sect), "[checkpoint:m]\npath = %s\n", p);
	it_start(&H, "budget = 64M\n", sect);

	assert_int_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	assert_non_null(strstr(out, "weightd reloaded its configuration; nothing changed"));

	assert_int_equal(harness_write_config(&H, "budget = 32M\nworkers = 3\n", sect), 0);
	assert_int_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	if (!strstr(out, "  budget is now 33554432 bytes") ||
	    !strstr(out, "warning: workers changed to 3 in the configuration, but weightd keeps"))
		fail_msg("weightctl reload:\n%s", out);

	assert_int_equal(ctl(out, sizeof(out), "reload", "--json", NULL), 0);
	j = json_loads(out, 0, &je);
	if (!j)
		fail_msg("not JSON: %s\n%s", je.text, out);
	assert_true(json_is_true(json_object_get(j, "reloaded")));
	assert_int_equal(json_array_size(json_object_get(j, "changes")), 0);
	a = json_object_get(j, "warnings");
	for (size_t i = 0; i < json_array_size(a); i++)
		warned |= strstr(json_string_value(json_array_get(a, i)), "workers changed to 3") !=
			  NULL;
	assert_true(warned);
	json_decref(j);

	/* a configuration that does not parse: the reload fails, and says where */
	assert_int_equal(harness_write_config(&H, "budget = lots\n", sect), 0);
	assert_int_not_equal(ctl(out, sizeof(out), "reload", NULL), 0);
	assert_int_equal(harness_stop(&H), 0);
}

TEST_MAIN_WATCHDOG(240, NULL, NULL, TEST_IN_DIR(a_changed_file_error_says_what_to_do),
		   TEST_IN_DIR(a_broken_reload_keeps_the_last_good_generation),
		   TEST_IN_DIR(watch_reloads_changed_files_once_quiet),
		   TEST_IN_DIR(weightctl_reload_reports_what_it_did))
