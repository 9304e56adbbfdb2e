/* SPDX-License-Identifier: Apache-2.0 */
/* itest.c - what the integration tests share on top of harness.c: starting with the defaults,
 * connecting, status look-ups, the fixture patterns and the leak check. */
#include "itest.h"

#include <dirent.h>

#include "clock.h"

int64_t it_now_ms(void)
{
	return (int64_t)wd_clock_ms();
}

uint8_t it_pattern_byte(uint64_t i, unsigned seed)
{
	return (uint8_t)((i * 131u + seed * 7u + 13u) & 0xffu);
}

int64_t it_pattern_mismatch(const uint8_t *p, uint64_t n, unsigned seed)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != it_pattern_byte(i, seed))
			return (int64_t)i;
	return -1;
}

void it_start(struct harness *h, const char *extra_daemon, const char *sections)
{
	if (harness_write_config(h, extra_daemon, sections) < 0)
		fail_msg("cannot write the config in %s", h->dir);
	if (harness_start(h) < 0)
		fail_msg("weightd did not start");
}

weightd_client *it_connect(const struct harness *h)
{
	weightd_client *c = NULL;
	weightd_error err;

	if (weightd_connect(h->sock, "test", &c, &err) < 0)
		fail_msg("connect: %s", err.message);
	return c;
}

weightd_status *it_status(weightd_client *c)
{
	weightd_status *st = NULL;
	weightd_error err;

	if (weightd_status_get(c, &st, &err) < 0)
		fail_msg("status: %s", err.message);
	return st;
}

weightd_status *it_status_of(const struct harness *h)
{
	weightd_client *c = it_connect(h);
	weightd_status *st = it_status(c);

	weightd_close(c);
	return st;
}

void it_wait_references(const struct harness *h, uint64_t refs)
{
	int64_t end = it_now_ms() + 30000;

	for (;;) {
		weightd_status *st = it_status_of(h);
		bool done = st->references >= refs;

		weightd_status_free(st);
		if (done)
			return;
		if (it_now_ms() > end)
			fail_msg("the daemon did not hold %llu references within 30 s",
				 (unsigned long long)refs);
		usleep(20 * 1000);
	}
}

int it_get(weightd_client *c, const char *ckpt, const char *tensor, weightd_weight **ret,
	   weightd_error *err)
{
	weightd_inflight *f = NULL;
	int r = weightd_materialize(c, ckpt, tensor, NULL, &f, err);

	if (r < 0)
		return r;
	return weightd_finish(f, ret, err);
}

weightd_weight *it_get_ok(weightd_client *c, const char *ckpt, const char *tensor)
{
	weightd_weight *w = NULL;
	weightd_error err;

	if (it_get(c, ckpt, tensor, &w, &err) < 0)
		fail_msg("materialize %s:%s: %s", ckpt, tensor, err.message);
	return w;
}

weightd_weight *it_cast_ok(weightd_client *c, const char *ckpt, const char *tensor,
			   const weightd_selection *sel, const char *dtype)
{
	weightd_recipe *r;
	weightd_inflight *f;
	weightd_weight *w = NULL;
	weightd_error err;
	int n;

	assert_int_equal(weightd_recipe_new(&r, &err), 0);
	n = weightd_recipe_source(r, ckpt, tensor, sel, &err);
	assert_true(n >= 0);
	assert_true(weightd_recipe_cast(r, n, dtype, &err) >= 0);
	if (weightd_materialize_recipe(c, r, &f, &err) < 0 || weightd_finish(f, &w, &err) < 0)
		fail_msg("%s:%s cast to %s: %s", ckpt, tensor, dtype, err.message);
	weightd_recipe_free(r);
	return w;
}

const uint8_t *it_map(weightd_weight *w)
{
	const void *p = NULL;
	weightd_error err;

	if (weightd_weight_map(w, &p, &err) < 0)
		fail_msg("map: %s", err.message);
	return p;
}

int it_unit_of(weightd_client *c, const char *ckpt, const char *const *names, size_t n,
	       bool validate, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_new(c, &u, err);

	for (size_t i = 0; r >= 0 && i < n; i++) {
		r = weightd_unit_slot(u, names[i], NULL, NULL, 0, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, names[i], ckpt, names[i], NULL, err);
	}
	return it_unit_end(u, r, validate, ret, err);
}

int it_alias_chain(weightd_unit *u, const char *first, size_t n, weightd_error *err)
{
	char name[24], target[24];
	int r = 0;

	for (size_t i = 0; r >= 0 && i < n; i++) {
		snprintf(name, sizeof(name), "a%zu", i);
		if (i)
			snprintf(target, sizeof(target), "a%zu", i - 1);
		else
			snprintf(target, sizeof(target), "%s", first);
		r = weightd_unit_slot(u, name, NULL, NULL, 0, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_alias(u, name, target, err);
	}
	return r < 0 ? r : 0;
}

int it_unit_end(weightd_unit *u, int r, bool validate, weightd_unit **ret, weightd_error *err)
{
	if (r >= 0)
		r = weightd_unit_submit(u, err);
	if (r >= 0)
		r = validate ? weightd_unit_validate(u, err) : weightd_unit_finish(u, err);
	if (r < 0) {
		weightd_unit_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

int it_unit_of_numbered(weightd_client *c, const char *ckpt, const char *prefix, size_t n,
			bool validate, weightd_unit **ret, weightd_error *err)
{
	char(*buf)[64] = calloc(n ? n : 1, sizeof(*buf));
	const char **names = calloc(n ? n : 1, sizeof(*names));
	int r = -ENOMEM;

	if (buf && names) {
		for (size_t i = 0; i < n; i++) {
			snprintf(buf[i], sizeof(buf[i]), "%s%zu", prefix, i);
			names[i] = buf[i];
		}
		r = it_unit_of(c, ckpt, names, n, validate, ret, err);
	} else {
		memset(err, 0, sizeof(*err));
		err->code = WEIGHTD_E_RESOURCE_EXHAUSTED;
	}
	free(names);
	free(buf);
	return r;
}

int it_count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int it_count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	int n = 0, ch;

	if (!f)
		return -1;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

const weightd_weight_status *it_weight(const weightd_status *st, const char *ckpt,
				       const char *tensor)
{
	char label[512];

	snprintf(label, sizeof(label), "%s:%s", ckpt, tensor);
	for (size_t i = 0; i < st->n_weights; i++)
		if (strcmp(st->weight_list[i].label, label) == 0)
			return &st->weight_list[i];
	return NULL;
}

const weightd_source_info *it_source(const weightd_status *st, const char *name)
{
	for (size_t i = 0; i < st->n_sources; i++)
		if (strcmp(st->sources[i].name, name) == 0)
			return &st->sources[i];
	return NULL;
}

weightd_status *it_quiet_with(const struct harness *h, uint64_t refs, uint64_t others,
			      int timeout_ms, weightd_client **ret_c)
{
	int64_t end = it_now_ms() + timeout_ms;
	weightd_client *c = it_connect(h);
	weightd_status *st = NULL;

	for (;;) {
		st = it_status(c);
		if ((st->materializations_in_flight == 0 && st->references == refs &&
		     st->clients == others + 1) ||
		    it_now_ms() > end)
			break;
		weightd_status_free(st);
		usleep(10000);
	}
	*ret_c = c;
	return st;
}

weightd_status *it_wait_quiet(const struct harness *h, uint64_t refs, uint64_t others,
			      int timeout_ms)
{
	weightd_client *c;
	weightd_status *st = it_quiet_with(h, refs, others, timeout_ms, &c);

	weightd_close(c);
	return st;
}

int it_source_files(const weightd_status *st)
{
	int n = 0;

	for (size_t i = 0; i < st->n_sources; i++)
		if (strcmp(st->sources[i].state, "ready") == 0)
			n += (int)st->sources[i].files;
	return n;
}

int it_fd_base_refs(const struct harness *h, uint64_t refs)
{
	weightd_client *c;
	weightd_status *st = it_quiet_with(h, refs, 0, 10000, &c);
	int fds = harness_settled_fds(h);
	int base = fds - 1 - (int)st->segments - it_source_files(st);

	weightd_status_free(st);
	weightd_close(c);
	return base;
}

int it_fd_base(const struct harness *h)
{
	return it_fd_base_refs(h, 0);
}

void it_leak_check(const struct harness *h, int fd_base, uint64_t refs)
{
	weightd_client *c;
	weightd_status *st = it_quiet_with(h, refs, 0, 10000, &c);
	uint64_t weights = st->weights, segs = st->segments, in_segs = 0;
	int fds, files = it_source_files(st), want = fd_base + (int)segs + files + 1;

	assert_int_equal(st->materializations_in_flight, 0);
	assert_int_equal(st->references, refs);
	assert_int_equal(st->clients, 1);
	assert_int_equal(harness_segments(h), (int)segs);
	assert_int_equal(st->n_segments, segs);
	for (size_t i = 0; i < st->n_segments; i++)
		in_segs += st->segment_list[i].weights;
	assert_int_equal(in_segs, weights);
	assert_true(segs <= weights);
	for (size_t i = 0; i < st->n_weights; i++)
		assert_true(st->weight_list[i].refs == 0 || refs > 0);
	weightd_status_free(st);
	fds = harness_wait_fds(h, want, 10000);
	weightd_close(c);
	if (fds != want)
		harness_dump_fds(h->pid);
	if (fds != want)
		fail_msg("the daemon has %d fds open; expected %d (base %d + %llu segments + %d "
			 "checkpoint files + 1 client)",
			 fds, want, fd_base, (unsigned long long)segs, files);
}

void it_fixture(const char *fmt, ...)
{
	char args[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	if (harness_mkfixture(args) < 0)
		fail_msg("wd-mkfixture %s failed", args);
}

int it_raw_connect(const struct harness *h)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

size_t it_status_frame(uint8_t *out, uint8_t id)
{
	const uint8_t payload[] = { 0x08, id, 0x8a, 0x01, 0x00 };

	memset(out, 0, 8);
	out[0] = sizeof(payload);
	memcpy(out + 8, payload, sizeof(payload));
	return 8 + sizeof(payload);
}

void it_report_fail(int *rc, char *msg, size_t cap, int code, const char *fmt, ...)
{
	va_list ap;

	if (*rc)
		return;
	*rc = code ? code : -1;
	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
}

int it_ctl(uid_t uid, char *out, size_t cap, ...)
{
	char *argv[32];
	va_list ap;
	int n = 0;

	argv[n++] = (char *)harness_weightctl();
	va_start(ap, cap);
	while (n < 31 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	return harness_run(argv, out, cap, uid);
}

void it_say(int fd, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf) || write(fd, buf, (size_t)n) != n)
		_exit(3);
}

pid_t it_fork_piped(int *ret_to, int *ret_from)
{
	int to[2], from[2];
	pid_t pid;

	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		*ret_to = to[0];
		*ret_from = from[1];
		return 0;
	}
	close(to[0]);
	close(from[1]);
	*ret_to = to[1];
	*ret_from = from[0];
	return pid;
}

void it_wait_child_ok(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("child %d ended with status 0x%x", (int)pid, status);
}
