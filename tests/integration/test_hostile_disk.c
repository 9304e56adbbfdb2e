/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_disk.c - attacks through the filesystem: squatting on segment names in /dev/shm,
 * planting state records or making the state directory writable by others, and FIFOs in place
 * of checkpoint files. Other uids stay served, nothing foreign is trusted, served or deleted, and
 * the daemon comes back to its baseline. Needs root (the attacker is uid 65534). */
#include <dirent.h>
#include <poll.h>
#include <sys/mman.h>

#include "fixture.h"
#include "hostile.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* The key of tiny:<tensor> as clients see it (preflight and materialize replies carry it). */
static void key_of(const char *tensor, char out[65])
{
	weightd_client *c = it_connect(&H);
	weightd_weight *w = it_get_ok(c, "tiny", tensor);

	hex(weightd_weight_key(w), 32, out);
	weightd_release(w);
	weightd_close(c);
}

/* Does any name in /dev/shm contain `text`? */
static int shm_names_with(const char *text)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strstr(e->d_name, text) != NULL;
	closedir(d);
	return n;
}

static void evict_all(void)
{
	weightd_client *c = it_connect(&H);
	uint64_t nw = 0, nb = 0;
	weightd_error err;

	if (weightd_evict(c, &nw, &nb, &err) < 0)
		fail_msg("evict: %s", err.message);
	weightd_close(c);
}

static void restart(void)
{
	assert_int_equal(harness_stop(&H), 0);
	assert_int_equal(harness_start(&H), 0);
}

#define N_SQUAT 64

/*
 * Segment names used to be "<prefix>.<key>", and the key is in every reply: a user who
 * created that name first broke the weight for everyone. Now names are random: the squatter's
 * files (the old name, and N_SQUAT names of the new pattern) change nothing, the key appears in
 * no name, and at the next start the squatter's files are reported and left alone.
 */
static void squatted_names_break_nothing(void **state)
{
	struct hostile_base base;
	char key[65], line[256];
	weightd_status *st;
	pid_t pid;
	int pipefd[2];

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H);
	key_of("t2", key); /* what the attacker learns from any reply */
	evict_all();
	assert_int_equal(shm_names_with(key), 0);
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char path[512];
		int fd;

		close(pipefd[0]);
		hostile_become(UID_ATTACKER);
		snprintf(path, sizeof(path), "/dev/shm/%s.%s", H.prefix, key);
		fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0)
			_exit(60);
		close(fd);
		for (int i = 0; i < N_SQUAT; i++) {
			snprintf(path, sizeof(path), "/dev/shm/%s.%032x", H.prefix, i);
			fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
			if (fd < 0 || ftruncate(fd, TENSOR_BYTES) < 0)
				_exit(61);
			close(fd);
		}
		chan_say(pipefd[1], "squatted\n");
		_exit(0);
	}
	close(pipefd[1]);
	assert_true(chan_hear(pipefd[0], line, sizeof(line)));
	close(pipefd[0]);
	it_wait_child_ok(pid);
	/* the squatted weight is served to another uid, under a name unrelated to its key */
	hostile_victim_served(&H);
	assert_int_equal(shm_names_with(key), 1); /* the squatter's file only */
	assert_int_equal(harness_segments(&H), 1 + N_SQUAT + 1);
	hostile_back_to_base_foreign(&H, &base, 1 + N_SQUAT);

	/* at the next start: reported, counted, never adopted or removed */
	restart();
	assert_true(harness_log_contains(&H, "were not made by weightd"));
	st = it_status_of(&H);
	assert_int_equal(st->foreign_segments, 1 + N_SQUAT);
	assert_int_equal(st->readoptions, 1); /* the victim's weight, its own segment */
	weightd_status_free(st);
	assert_int_equal(harness_segments(&H), 1 + N_SQUAT + 1);
	base = hostile_baseline(&H); /* a new process: its own baseline */
	evict_all();
	/* the squatter's files are still there: weightd removes only what it made */
	assert_int_equal(harness_segments(&H), 1 + N_SQUAT);
	{
		char path[512];

		snprintf(path, sizeof(path), "/dev/shm/%s.%s", H.prefix, key);
		assert_int_equal(unlink(path), 0);
		for (int i = 0; i < N_SQUAT; i++) {
			snprintf(path, sizeof(path), "/dev/shm/%s.%032x", H.prefix, i);
			assert_int_equal(unlink(path), 0);
		}
	}
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/* Poll status (as root) until it counts `want` foreign objects; what it last said. */
static uint64_t wait_foreign(uint64_t want)
{
	uint64_t got = UINT64_MAX;

	/* a look runs at most every 5 s (WD_FOREIGN_SCAN_INTERVAL_MS) */
	for (int i = 0; i < 150 && got != want; i++) {
		weightd_status *st = it_status_of(&H);

		got = st->foreign_segments;
		weightd_status_free(st);
		if (got != want)
			usleep(100000);
	}
	return got;
}

/* The squatter's names: N_SQUAT of weightd's own pattern, and one that is not. */
static void squat_path(int i, char *out, size_t cap)
{
	if (i < N_SQUAT)
		snprintf(out, cap, "/dev/shm/%s.%032x", H.prefix, 0x5000 + i);
	else
		snprintf(out, cap, "/dev/shm/%s.late", H.prefix);
}

/*
 * Objects put under the prefix while the daemon runs (between two evictions, say) used to be
 * found only at the next start. Now status looks again, at most once a second: the count
 * follows what is there, the log names them, they are never served, adopted or removed (evict
 * leaves them), another uid is served throughout, and once they are gone the count is 0 and
 * the daemon is back to its baseline.
 */
static void objects_squatted_while_running_are_reported(void **state)
{
	struct hostile_base base;
	weightd_status *st;
	char path[512];
	pid_t pid;

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H);
	st = it_status_of(&H);
	assert_int_equal(st->foreign_segments, 0);
	weightd_status_free(st);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		hostile_become(UID_ATTACKER);
		for (int i = 0; i <= N_SQUAT; i++) {
			int fd;

			squat_path(i, path, sizeof(path));
			fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
			if (fd < 0 || ftruncate(fd, TENSOR_BYTES) < 0)
				_exit(60);
			close(fd);
		}
		_exit(0);
	}
	it_wait_child_ok(pid);
	assert_int_equal(wait_foreign(N_SQUAT + 1), N_SQUAT + 1);
	assert_true(harness_log_contains(&H, "were not made by weightd"));
	hostile_victim_served(&H);
	evict_all();
	for (int i = 0; i <= N_SQUAT; i++) {
		squat_path(i, path, sizeof(path));
		assert_int_equal(access(path, F_OK), 0); /* never removed */
		assert_int_equal(unlink(path), 0);
	}
	assert_int_equal(wait_foreign(0), 0);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * Anyone may create names under the /dev/shm prefix, and each status used to list them all on
 * the main loop: 200,000 empty files made every status take seconds and held every other
 * client's request behind it. The look is now another thread's, capped and rate-limited: while
 * the attacker loops status calls over 200,000 names, every victim get and every status answers
 * within FULL_PREFIX_BOUND_MS (an idle get takes a few ms), and the names are still reported.
 */
#define FULL_PREFIX_NAMES    200000
#define FULL_PREFIX_BOUND_MS 300
static void a_prefix_full_of_names_costs_requests_nothing(void **state)
{
	struct hostile_chan ch;
	struct hostile_base base;
	char line[256], path[512];
	weightd_status *st;
	int64_t worst = 0;
	pid_t pid;

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H);
	pid = hostile_fork(&ch);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_error err;
		int64_t slowest = 0;
		int dfd, calls = 0;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY);
		if (dfd < 0)
			_exit(60);
		for (int i = 0; i < FULL_PREFIX_NAMES; i++) {
			int fd;

			snprintf(path, sizeof(path), "%s.%x", H.prefix, i);
			fd = openat(dfd, path, O_CREAT | O_EXCL | O_WRONLY, 0644);
			if (fd < 0)
				_exit(61);
			close(fd);
		}
		close(dfd);
		if (weightd_connect(H.sock, "attacker", &c, &err) < 0)
			_exit(62);
		chan_say(ch.to_parent[1], "planted\n");
		/* status after status until told to stop */
		for (;;) {
			struct pollfd p = { ch.to_child[0], POLLIN, 0 };
			weightd_status *s = NULL;
			int64_t t0 = it_now_ms();

			if (poll(&p, 1, 0) > 0)
				break;
			if (weightd_status_get(c, &s, &err) < 0)
				_exit(63);
			weightd_status_free(s);
			if (it_now_ms() - t0 > slowest)
				slowest = it_now_ms() - t0;
			calls++;
		}
		weightd_close(c);
		chan_say(ch.to_parent[1], "%d %lld\n", calls, (long long)slowest);
		_exit(0);
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	for (int i = 0; i < 20; i++) {
		int64_t t0 = it_now_ms(), took;

		hostile_victim_served(&H);
		took = it_now_ms() - t0;
		worst = took > worst ? took : worst;
		usleep(100000);
	}
	chan_say(ch.to_child[1], "stop\n");
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	it_wait_child_ok(pid);
	{
		int calls = 0;
		long long slowest = 0;

		assert_int_equal(sscanf(line, "%d %lld", &calls, &slowest), 2);
		fprintf(stderr,
			"note: %d status calls over %d names, slowest %lld ms; slowest victim "
			"get %lld ms\n",
			calls, FULL_PREFIX_NAMES, slowest, (long long)worst);
		assert_true(calls > 10);
		if (slowest > FULL_PREFIX_BOUND_MS)
			fail_msg("a status took %lld ms over %d foreign names (bound %d ms)",
				 slowest, FULL_PREFIX_NAMES, FULL_PREFIX_BOUND_MS);
	}
	if (worst > FULL_PREFIX_BOUND_MS)
		fail_msg(
			"a victim's get took %lld ms while status calls looked at %d foreign names "
			"(bound %d ms)",
			(long long)worst, FULL_PREFIX_NAMES, FULL_PREFIX_BOUND_MS);
	/* still reported: a capped look counts part of them, and the log says "at least" */
	for (int i = 0; i < 150; i++) {
		st = it_status_of(&H);
		worst = (int64_t)st->foreign_segments;
		weightd_status_free(st);
		if (worst > 0 && harness_log_contains(&H, "were not made by weightd"))
			break;
		usleep(100000);
	}
	assert_true(worst > 0);
	assert_true(harness_log_contains(&H, "at least"));
	{
		int dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY);

		assert_true(dfd >= 0);
		for (int i = 0; i < FULL_PREFIX_NAMES; i++) {
			snprintf(path, sizeof(path), "%s.%x", H.prefix, i);
			assert_int_equal(unlinkat(dfd, path, 0), 0);
		}
		close(dfd);
	}
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/* A record for key `keyhex` naming `segment` of `nbytes`, written straight into the index. */
static void plant_record(const char *keyhex, const char *segment, uint64_t nbytes)
{
	char path[800];
	FILE *f;

	snprintf(path, sizeof(path), "%s/state/%s/%s.json", H.dir, H.prefix, keyhex);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "{\"version\":1,\"key\":\"%s\",\"digest\":\"%064d\",\"dtype\":\"U8\","
		"\"shape\":[%llu],\"nbytes\":%llu,\"segment\":\"%s\",\"label\":\"tiny:t0\","
		"\"source\":\"tiny\",\"generation\":1}", keyhex, 0, (unsigned long long)nbytes,
		(unsigned long long)nbytes, segment);
	assert_int_equal(fclose(f), 0);
}

/*
 * The index used to be trusted: a record could name any shm object (served to clients after
 * a restart, deleted by evict). Now a record names only the instance's random pattern, a segment
 * owned by the daemon's uid, of the recorded size; and a state directory that others may write
 * into is not used at all.
 */
static void state_index_is_not_trusted_blindly(void **state)
{
	struct hostile_base base;
	char key[65], other[65], secret[128], squat[256], statedir[600], path[900];
	weightd_status *st;
	int fd;

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H); /* compared with the restarted daemons' below */
	key_of("t0", key);
	key_of("t1", other);
	evict_all();
	/* a root-only object elsewhere in /dev/shm, and one under the prefix owned by the attacker */
	snprintf(secret, sizeof(secret), "/wdtest-secret-%d", (int)getpid());
	fd = shm_open(secret, O_CREAT | O_EXCL | O_RDWR, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, TENSOR_BYTES), 0);
	close(fd);
	snprintf(squat, sizeof(squat), "/%s.%032x", H.prefix, 7);
	snprintf(path, sizeof(path), "/dev/shm%s", squat);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, TENSOR_BYTES), 0);
	assert_int_equal(fchown(fd, UID_ATTACKER, UID_ATTACKER), 0);
	close(fd);
	plant_record(key, secret, TENSOR_BYTES);
	plant_record(other, squat, TENSOR_BYTES);

	restart();
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, 0);
	assert_int_equal(st->weights, 0);
	assert_int_equal(st->foreign_segments, 1);
	weightd_status_free(st);
	hostile_victim_served(&H);
	evict_all();
	/* neither object was touched */
	snprintf(path, sizeof(path), "/dev/shm%s", secret);
	assert_int_equal(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "/dev/shm%s", squat);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(shm_unlink(secret), 0);
	assert_int_equal(unlink(path), 0);
	hostile_back_to_base(&H, &base);

	/* A state directory others can write into: refused with a clear message; nothing in it
	 * is adopted, the daemon serves anyway. */
	{
		weightd_client *c = it_connect(&H);
		weightd_weight *w = it_get_ok(c, "tiny", "t3");

		weightd_release(w);
		weightd_close(c);
	}
	snprintf(statedir, sizeof(statedir), "%s/state", H.dir);
	assert_int_equal(chmod(statedir, 0777), 0);
	restart();
	assert_true(harness_log_contains(&H, "not using state directory"));
	assert_true(harness_log_contains(&H, "mode 0777 lets group or others write"));
	st = it_status_of(&H);
	assert_int_equal(st->readoptions, 0);
	weightd_status_free(st);
	hostile_victim_served(&H);
	/* owned by another user: the same */
	assert_int_equal(chmod(statedir, 0755), 0);
	assert_int_equal(chown(statedir, UID_ATTACKER, UID_ATTACKER), 0);
	restart();
	assert_true(harness_log_contains(&H, "is owned by uid 65534"));
	assert_int_equal(chown(statedir, 0, 0), 0);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
}

/*
 * A FIFO as a checkpoint file, an index or a shard used to hang start-up, and on reload a
 * worker forever. Now each is refused at admission with a message naming it; a symlink flipped
 * to a FIFO is refused on reload (and served again when flipped back); the daemon stops on
 * SIGTERM.
 */
static void fifos_are_refused_never_waited_on(void **state)
{
	char sections[4096], tiny[512], fifo[512], idxdir[512], shdir[512], link[512], p[900];
	weightd_status *st;
	weightd_client *c;
	weightd_error err;
	struct hostile_base base;
	int status;

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(harness_init(&H), 0);
	assert_int_equal(hostile_fixtures(&H, sections, sizeof(sections)), 0);
	harness_path(&H, "tiny.safetensors", tiny, sizeof(tiny));
	harness_path(&H, "model.fifo", fifo, sizeof(fifo));
	assert_int_equal(mkfifo(fifo, 0644), 0);
	harness_path(&H, "idx", idxdir, sizeof(idxdir));
	assert_int_equal(mkdir(idxdir, 0755), 0);
	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", idxdir);
	assert_int_equal(mkfifo(p, 0644), 0);
	harness_path(&H, "sharded", shdir, sizeof(shdir));
	it_fixture("sharded %s 2 --from %s", shdir, tiny);
	snprintf(p, sizeof(p), "%s/model-00002-of-00002.safetensors", shdir);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkfifo(p, 0644), 0);
	harness_path(&H, "flip.safetensors", link, sizeof(link));
	assert_int_equal(symlink(tiny, link), 0);
	snprintf(sections + strlen(sections), sizeof(sections) - strlen(sections),
		 "\n[checkpoint:fifo_file]\npath = %s\n\n[checkpoint:fifo_index]\npath = %s\n\n"
		 "[checkpoint:fifo_shard]\npath = %s\n\n[checkpoint:flip]\npath = %s\n", fifo,
		 idxdir, shdir, link);
	it_start(&H, NULL, sections); /* ready: start-up did not block */
	base = hostile_baseline(&H);
	st = it_status_of(&H);
	{
		const char *names[] = { "fifo_file", "fifo_index", "fifo_shard" };

		for (int i = 0; i < 3; i++) {
			const weightd_source_info *si = it_source(st, names[i]);

			assert_non_null(si);
			assert_string_equal(si->state, "failed");
			if (!strstr(si->error, "is a FIFO"))
				fail_msg("%s: %s", names[i], si->error);
		}
		assert_string_equal(it_source(st, "flip")->state, "ready");
	}
	weightd_status_free(st);
	hostile_victim_served(&H);

	/* the symlink now leads to a FIFO: the reload is answered, the FIFO refused, and the last
	 * good generation goes on serving from the file it has open */
	assert_int_equal(unlink(link), 0);
	assert_int_equal(symlink(fifo, link), 0);
	c = it_connect(&H);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	st = it_status(c);
	assert_string_equal(it_source(st, "flip")->state, "ready");
	assert_int_equal(it_source(st, "flip")->generation, 1);
	assert_non_null(strstr(it_source(st, "flip")->error, "is a FIFO"));
	assert_non_null(strstr(it_source(st, "flip")->error, "generation 1 is still served"));
	weightd_status_free(st);
	{
		weightd_weight *w = it_get_ok(c, "flip", "t1");

		assert_int_equal(it_pattern_mismatch(it_map(w), TENSOR_BYTES, 1), -1);
		weightd_release(w);
	}
	/* and back to the file: served again, the error gone */
	assert_int_equal(unlink(link), 0);
	assert_int_equal(symlink(tiny, link), 0);
	if (weightd_reload(c, &err) < 0)
		fail_msg("reload: %s", err.message);
	st = it_status(c);
	assert_string_equal(it_source(st, "flip")->state, "ready");
	assert_string_equal(it_source(st, "flip")->error, "");
	weightd_status_free(st);
	{
		weightd_weight *w = it_get_ok(c, "flip", "t1");

		assert_int_equal(it_pattern_mismatch(it_map(w), TENSOR_BYTES, 1), -1);
		weightd_release(w);
	}
	weightd_close(c);
	hostile_victim_served(&H);
	hostile_back_to_base(&H, &base);
	status = harness_stop(&H);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_MAIN_WATCHDOG(600, NULL, NULL, TEST(squatted_names_break_nothing),
		   TEST(state_index_is_not_trusted_blindly),
		   TEST(objects_squatted_while_running_are_reported),
		   TEST(a_prefix_full_of_names_costs_requests_nothing),
		   TEST(fifos_are_refused_never_waited_on))
