/* SPDX-License-Identifier: Apache-2.0 */
/* test_core.c - the core promise, end to end: a real weightd, separate client processes, one copy. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "harness.h"
#include "weightd/client.h"

static char sample[512];

/* --- a client process ---------------------------------------------------------------------- */

/*
 * A child that binds every tensor of `checkpoint` as one unit, then answers commands from the
 * parent on `cmd`: 'i' prints "dev ino" of each weight's fd, 'v' checks every weight's bytes
 * against the checkpoint file read directly (prints "ok" or "bad NAME"), 'w' tries to write
 * (prints "mmap-write=ERRNO write=ERRNO"), 'q' quits. Replies are lines on `out`.
 */
struct child {
	pid_t pid;
	FILE *out;   /* parent reads */
	int cmd;     /* parent writes */
};

static void child_main(const char *checkpoint, int in, int out)
{
	weightd_client *c = NULL;
	weightd_unit *u = NULL;
	weightd_description *d = NULL;
	weightd_error err;
	char op;
	int file;

	if (weightd_connect(H.sock, "test-child", &c, &err) < 0 ||
	    weightd_describe(c, checkpoint, &d, &err) < 0 || weightd_unit_new(c, &u, &err) < 0) {
		it_say(out, "error %s\n", err.message);
		_exit(1);
	}
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		if (weightd_unit_slot(u, t->name, t->dtype, t->shape, t->ndim, NULL, &err) < 0 ||
		    weightd_unit_set_tensor(u, t->name, checkpoint, t->name, NULL, &err) < 0) {
			it_say(out, "error %s\n", err.message);
			_exit(1);
		}
	}
	if (weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
		it_say(out, "error %s\n", err.message);
		_exit(1);
	}
	weightd_unit_bind(u);
	it_say(out, "bound %zu %llu\n", d->n_tensors, (unsigned long long)weightd_unit_bytes_read(u));
	file = open(sample, O_RDONLY);
	while (read(in, &op, 1) == 1) {
		if (op == 'q')
			break;
		for (size_t i = 0; i < d->n_tensors; i++) {
			const weightd_tensor_info *t = &d->tensors[i];
			const weightd_weight *w = weightd_unit_weight(u, t->name);
			int fd = weightd_weight_fd(w);
			struct stat st;

			if (op == 'i') {
				fstat(fd, &st);
				it_say(out, "%s %llu %llu\n", t->name, (unsigned long long)st.st_dev,
				    (unsigned long long)st.st_ino);
			} else if (op == 'v') {
				const uint8_t *mem = weightd_unit_data(u, t->name);
				uint8_t *want = malloc(t->nbytes);
				bool same = want && pread(file, want, t->nbytes, (off_t)t->offset) ==
							    (ssize_t)t->nbytes &&
					    memcmp(want, mem, t->nbytes) == 0;
				free(want);
				if (!same)
					it_say(out, "bad %s\n", t->name);
			} else if (op == 'w' && i == 0) {
				void *p = mmap(NULL, t->nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
				int merr = p == MAP_FAILED ? errno : 0;
				ssize_t n = write(fd, "x", 1);
				int werr = n < 0 ? errno : 0;
				if (p != MAP_FAILED)
					munmap(p, t->nbytes);
				it_say(out, "mmap-write=%d write=%d\n", merr, werr);
			}
		}
		it_say(out, "done\n");
	}
	weightd_unit_free(u);
	weightd_description_free(d);
	weightd_close(c);
	_exit(0);
}

static void child_start(struct child *ch, const char *checkpoint)
{
	int to, from;

	ch->pid = it_fork_piped(&to, &from);
	if (ch->pid == 0)
		child_main(checkpoint, to, from);
	ch->cmd = to;
	ch->out = fdopen(from, "r");
}

static char *child_line(struct child *ch, char *buf, size_t cap)
{
	if (!fgets(buf, (int)cap, ch->out))
		return NULL;
	buf[strcspn(buf, "\n")] = '\0';
	return buf;
}

/* Send a command and collect its reply lines (up to "done") into out. */
static void child_ask(struct child *ch, char op, char *out, size_t cap)
{
	char line[1024];
	size_t len = 0;

	assert_int_equal(write(ch->cmd, &op, 1), 1);
	out[0] = '\0';
	while (child_line(ch, line, sizeof(line)) && strcmp(line, "done") != 0)
		len += (size_t)snprintf(out + len, cap - len, "%s\n", line);
}

static void child_end(struct child *ch)
{
	int status;

	write(ch->cmd, "q", 1);
	close(ch->cmd);
	fclose(ch->out);
	waitpid(ch->pid, &status, 0);
}

/* --- helpers ------------------------------------------------------------------------------- */

/*
 * The daemon's fd count once it is idle. sd_notify opens a socket for each message, so right after
 * READY=1 the count can be one higher for a moment: wait for a round trip, then for a stable count.
 */
static int settled_fds(void)
{
	weightd_client *c = it_connect(&H);
	weightd_status *st = it_status(c);
	int prev = -1, n = -1, same = 0;

	weightd_status_free(st);
	weightd_close(c);
	for (int tries = 0; tries < 500 && same < 5; tries++) {
		usleep(10000);
		n = harness_count_fds(H.pid);
		same = n == prev ? same + 1 : 0;
		prev = n;
	}
	return n;
}

static int setup(void **state)
{
	char sections[2048], bad[512];

	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "bad.safetensors", bad, sizeof(bad));
	if (harness_sample(&H, "tiny.safetensors", sample, sizeof(sample)) < 0)
		return -1;
	char args[1200];
	snprintf(args, sizeof(args), "bad %s overlap", bad);
	if (harness_mkfixture(args) < 0)
		return -1;
	chmod(sample, 0644);
	snprintf(sections, sizeof(sections),
		 "[checkpoint:tiny]\npath = %s\n\n"
		 "[checkpoint:rootonly]\npath = %s\nallow_users = root\n\n"
		 "[checkpoint:broken]\npath = %s\n",
		 sample, sample, bad);
	return fixture_start(NULL, sections);
}

/* --- tests --------------------------------------------------------------------------------- */

static void two_processes_share_one_copy(void **state)
{
	struct child a, b;
	char line[1024], ia[16384], ib[16384], out[4096];
	/* the daemon's fds with no client and no weight: listener, event loop, pool, logs */
	int daemon_fds_before = settled_fds();
	weightd_client *c = it_connect(&H);
	weightd_status *st;
	uint64_t read_after_a, tensor_bytes = 0;
	unsigned long long read_by_a;
	size_t n;
	uint64_t weights_left;

	child_start(&a, "tiny");
	assert_non_null(child_line(&a, line, sizeof(line)));
	assert_int_equal(sscanf(line, "bound %zu %llu", &n, &read_by_a), 2);
	assert_int_equal(n, 10);

	st = it_status(c);
	read_after_a = st->bytes_read;
	for (size_t i = 0; i < st->n_sources; i++)
		if (strcmp(st->sources[i].name, "tiny") == 0)
			tensor_bytes = st->sources[i].bytes;
	/* A's request read the checkpoint's tensors exactly once. */
	assert_int_equal(read_after_a, tensor_bytes);
	assert_int_equal(st->weights, 10);
	weightd_status_free(st);

	child_start(&b, "tiny");
	assert_non_null(child_line(&b, line, sizeof(line)));
	assert_int_equal(sscanf(line, "bound %zu %llu", &n, &read_by_a), 2);
	assert_int_equal(read_by_a, 0); /* B's unit was all shares */

	/* Same device and inode for every weight: one object in /dev/shm. */
	child_ask(&a, 'i', ia, sizeof(ia));
	child_ask(&b, 'i', ib, sizeof(ib));
	assert_true(strlen(ia) > 0);
	assert_string_equal(ia, ib);

	st = it_status(c);
	assert_int_equal(st->bytes_read, read_after_a); /* B made the daemon read nothing */
	assert_int_equal(st->references, 20);
	for (size_t i = 0; i < st->n_weights; i++)
		assert_int_equal(st->weight_list[i].clients, 2);
	weightd_status_free(st);

	/* The bytes are the checkpoint's, and the client cannot write them. */
	child_ask(&b, 'v', out, sizeof(out));
	assert_string_equal(out, "");
	child_ask(&b, 'w', out, sizeof(out));
	assert_string_equal(out, "mmap-write=13 write=9\n"); /* EACCES, EBADF */

	/* Killing A returns its references and leaves B's mapping intact. */
	kill(a.pid, SIGKILL);
	waitpid(a.pid, NULL, 0);
	close(a.cmd);
	fclose(a.out);
	for (int tries = 0; tries < 500; tries++) {
		st = it_status(c);
		if (st->references == 10 && st->clients == 2)
			break;
		weightd_status_free(st);
		st = NULL;
		usleep(10000);
	}
	assert_non_null(st);
	assert_int_equal(st->references, 10);
	weightd_status_free(st);
	child_ask(&b, 'v', out, sizeof(out));
	assert_string_equal(out, "");

	child_end(&b);
	for (int tries = 0; tries < 500; tries++) {
		st = it_status(c);
		if (st->references == 0)
			break;
		weightd_status_free(st);
		st = NULL;
		usleep(10000);
	}
	assert_non_null(st);
	assert_int_equal(st->references, 0);
	/* Every segment in /dev/shm is one the daemon knows: nothing leaked. The unit's weights
	 * were made by one request, so they share one segment. */
	assert_int_equal(harness_segments(&H), (int)st->segments);
	assert_int_equal(st->segments, 1);
	weights_left = st->segments;
	weightd_status_free(st);
	weightd_close(c);
	/* ... and no fd: one per segment (kept for the next client), none per dead client. */
	for (int tries = 0; tries < 500 && harness_count_fds(H.pid) !=
					      daemon_fds_before + (int)weights_left; tries++)
		usleep(10000);
	assert_int_equal(harness_count_fds(H.pid), daemon_fds_before + (int)weights_left);
}

static int materialize_error(weightd_client *c, const char *ckpt, const char *tensor,
			     const weightd_selection *sel, weightd_error *err)
{
	weightd_inflight *f = NULL;
	weightd_weight *w = NULL;
	int r = weightd_materialize(c, ckpt, tensor, sel, &f, err);

	if (r == 0)
		r = weightd_finish(f, &w, err);
	weightd_release(w);
	return r;
}

static void still_serving(weightd_client *c)
{
	weightd_error err;
	assert_int_equal(materialize_error(c, "tiny", "model.norm.weight", NULL, &err), 0);
}

static void clear_errors_and_daemon_keeps_serving(void **state)
{
	weightd_client *c = it_connect(&H);
	weightd_selection *sel = NULL;
	weightd_error err;

	assert_int_equal(materialize_error(c, "nope", "x", NULL, &err), -WEIGHTD_E_UNKNOWN_SOURCE);
	assert_non_null(strstr(err.message, "nope"));
	still_serving(c);

	assert_int_equal(materialize_error(c, "tiny", "no.such.tensor", NULL, &err),
			 -WEIGHTD_E_UNKNOWN_TENSOR);
	assert_non_null(strstr(err.message, "no.such.tensor"));
	assert_string_equal(err.tensor, "no.such.tensor");
	assert_string_equal(err.slot, "");       /* the caller named no slot: none is mentioned */
	assert_null(strstr(err.message, "slot"));
	assert_null(strstr(err.message, "did you mean")); /* nothing is near that name */
	still_serving(c);

	/* a typo brings the name it was meant to be */
	assert_int_equal(materialize_error(c, "tiny", "model.norm.weigth", NULL, &err),
			 -WEIGHTD_E_UNKNOWN_TENSOR);
	assert_non_null(strstr(err.message, "; did you mean \"model.norm.weight\""));
	still_serving(c);

	/* In a unit the same error is about the caller's slot: in its field, and named once at
	 * the head of the message. */
	{
		weightd_unit *u = NULL;

		assert_int_equal(weightd_unit_new(c, &u, &err), 0);
		assert_true(weightd_unit_slot(u, "w0", NULL, NULL, 0, NULL, &err) >= 0);
		assert_int_equal(weightd_unit_set_tensor(u, "w0", "tiny", "no.such.tensor", NULL,
							 &err), 0);
		assert_int_equal(weightd_unit_submit(u, &err), 0);
		assert_int_equal(weightd_unit_validate(u, &err), -WEIGHTD_E_UNKNOWN_TENSOR);
		assert_string_equal(err.slot, "w0");
		assert_string_equal(err.tensor, "no.such.tensor");
		assert_int_equal(strncmp(err.message, "slot \"w0\": ", 11), 0);
		assert_null(strstr(err.message + 11, "\"w0\""));
		assert_non_null(strstr(err.message, "no.such.tensor"));
		weightd_unit_free(u);
	}
	still_serving(c);

	/* q_proj is [64, 64]: rows 32..100 do not exist. */
	assert_int_equal(weightd_selection_range(0, 32, 100, &sel, &err), 0);
	assert_int_equal(materialize_error(c, "tiny", "model.layers.0.self_attn.q_proj.weight", sel,
					   &err),
			 -WEIGHTD_E_OUT_OF_RANGE);
	assert_non_null(strstr(err.message, "100"));
	weightd_selection_free(sel);
	still_serving(c);

	/* A checkpoint that failed admission answers with what is wrong and where. */
	weightd_description *d = NULL;
	assert_int_equal(weightd_describe(c, "broken", &d, &err), -WEIGHTD_E_BAD_CHECKPOINT);
	assert_non_null(strstr(err.message, "bad.safetensors"));
	assert_non_null(strstr(err.message, "overlap"));
	still_serving(c);
	weightd_close(c);
}

static void a_denied_uid_gets_a_clear_error(void **state)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_error err;
		int r;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(10);
		if (weightd_connect(H.sock, "nobody", &c, &err) < 0)
			_exit(11);
		r = materialize_error(c, "rootonly", "model.norm.weight", NULL, &err);
		if (r != -WEIGHTD_E_UNKNOWN_SOURCE || !strstr(err.message, "65534") ||
		    !strstr(err.message, "rootonly"))
			_exit(12);
		/* the same file under an open checkpoint is fine for this uid */
		if (materialize_error(c, "tiny", "model.norm.weight", NULL, &err) != 0)
			_exit(13);
		weightd_close(c);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* The daemon's side of share: another fd to the same memory, one more reference in the daemon,
 * each released on its own and in any order. */
static void share_gives_another_reference_to_the_same_memory(void **state)
{
	weightd_client *c = it_connect(&H);
	weightd_weight *w = it_get_ok(c, "tiny", "model.norm.weight"), *w2 = NULL;
	const weightd_weight_status *ws;
	weightd_status *st;
	weightd_error err;
	struct stat a, b;
	uint8_t *copy;
	uint64_t n = weightd_weight_nbytes(w);

	(void)state;
	copy = malloc(n);
	assert_non_null(copy);
	memcpy(copy, it_map(w), n);
	st = it_status(c);
	ws = it_weight(st, "tiny", "model.norm.weight");
	assert_non_null(ws);
	assert_int_equal(ws->refs, 1);
	weightd_status_free(st);

	assert_int_equal(weightd_share(w, &w2, &err), 0);
	/* the same segment at the same offset: this client keeps the one fd it has for it */
	assert_int_equal(weightd_weight_fd(w2), weightd_weight_fd(w));
	assert_int_equal(weightd_weight_segment(w2), weightd_weight_segment(w));
	assert_int_equal(weightd_weight_offset(w2), weightd_weight_offset(w));
	assert_int_equal(fstat(weightd_weight_fd(w), &a), 0);
	assert_int_equal(fstat(weightd_weight_fd(w2), &b), 0);
	assert_true(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
	assert_int_equal(weightd_weight_handle(w2), weightd_weight_handle(w));
	assert_memory_equal(weightd_weight_digest(w2), weightd_weight_digest(w), WEIGHTD_DIGEST_LEN);
	st = it_status(c);
	assert_int_equal(it_weight(st, "tiny", "model.norm.weight")->refs, 2);
	weightd_status_free(st);

	/* the original goes first; the share still maps the same bytes */
	weightd_release(w);
	st = it_status(c);
	assert_int_equal(it_weight(st, "tiny", "model.norm.weight")->refs, 1);
	weightd_status_free(st);
	assert_memory_equal(it_map(w2), copy, n);
	weightd_release(w2);
	st = it_status(c);
	assert_int_equal(it_weight(st, "tiny", "model.norm.weight")->refs, 0);
	weightd_status_free(st);
	free(copy);
	weightd_close(c);
}

static void check_config_names_the_bad_file(void **state)
{
	char out[8192];
	char *argv[] = { (char *)harness_weightd(), "--config", H.conf, "--check-config", NULL };
	int rc = harness_run(argv, out, sizeof(out), (uid_t)-1);

	assert_int_equal(rc, 1);
	assert_non_null(strstr(out, "checkpoint tiny: ok"));
	assert_non_null(strstr(out, "checkpoint broken: FAILED"));
	assert_non_null(strstr(out, "bad.safetensors"));
}

/* --check-config lists every error of a file in one run, each as FILE:LINE, and exits 1. */
static void check_config_reports_every_error(void **state)
{
	char conf[512], cmd[1200], out[8192], want[600];
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	FILE *f;
	int rc;

	(void)state;
	harness_path(&H, "bad.conf", conf, sizeof(conf));
	f = fopen(conf, "w");
	assert_non_null(f);
	fputs("[daemon]\nworkers = four\nbudget = 16Q\n"
	      "[checkpoint:a]\npath = relative/a\n"
	      "[checkpoint:b]\npreload = maybe\npath = /b\n",
	      f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "exec '%s' --config '%s' --check-config 2>&1", harness_weightd(),
		 conf);
	rc = harness_run(argv, out, sizeof(out), (uid_t)-1);
	assert_int_equal(rc, 1);
	snprintf(want, sizeof(want), "weightd: %s:2: workers:", conf);
	assert_non_null(strstr(out, want));
	snprintf(want, sizeof(want), "weightd: %s:3: budget:", conf);
	assert_non_null(strstr(out, want));
	snprintf(want, sizeof(want), "weightd: %s:5: path:", conf);
	assert_non_null(strstr(out, want));
	snprintf(want, sizeof(want), "weightd: %s:7: preload:", conf);
	assert_non_null(strstr(out, want));
	/* each once: the first is not repeated as a summary */
	snprintf(want, sizeof(want), "%s:2:", conf);
	assert_null(strstr(strstr(out, want) + 1, want));
}

TEST_MAIN_WATCHDOG(240, setup, fixture_cleanup, cmocka_unit_test(two_processes_share_one_copy),
		   cmocka_unit_test(clear_errors_and_daemon_keeps_serving),
		   cmocka_unit_test(a_denied_uid_gets_a_clear_error),
		   cmocka_unit_test(share_gives_another_reference_to_the_same_memory),
		   cmocka_unit_test(check_config_names_the_bad_file),
		   cmocka_unit_test(check_config_reports_every_error))
