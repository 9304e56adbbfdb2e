/* SPDX-License-Identifier: Apache-2.0 */
/* hostile.c - what the hostile-neighbour tests share: their daemon, other uids, the victim and the
 * baseline the daemon must return to. */
#include "hostile.h"

#include <sys/mman.h>
#include <sys/wait.h>

int hostile_fixtures(struct harness *h, char *sections, size_t cap)
{
	char tiny[512], secret[512], args[1400];

	harness_path(h, "tiny.safetensors", tiny, sizeof(tiny));
	harness_path(h, "secret.safetensors", secret, sizeof(secret));
	snprintf(args, sizeof(args),
		 "safetensors %s --tensor t0:U8:65536 --tensor t1:U8:65536 "
		 "--tensor t2:U8:65536 --tensor t3:U8:65536 --tensor m0:F32:256x256 "
		 "--tensor m1:F32:256x256",
		 tiny);
	if (harness_mkfixture(args) < 0)
		return -1;
	snprintf(args, sizeof(args),
		 "safetensors %s --seed 7 --tensor s0:U8:4096 "
		 "--tensor s1:F32:128x128",
		 secret);
	if (harness_mkfixture(args) < 0)
		return -1;
	chmod(tiny, 0644);
	chmod(secret, 0644); /* readable on disk: only weightd's allow list keeps others out */
	snprintf(sections, cap,
		 "[checkpoint:tiny]\npath = %s\n\n"
		 "[checkpoint:secret]\npath = %s\nallow_users = root\n",
		 tiny, secret);
	return 0;
}

void hostile_start(struct harness *h, const char *extra)
{
	char sections[2048];

	if (geteuid() != 0)
		skip(); /* other uids need root; the suite runs as root in CI */
	if (harness_init(h) < 0 || hostile_fixtures(h, sections, sizeof(sections)) < 0)
		fail_msg("cannot prepare the test directory");
	it_start(h, extra, sections);
}

void hostile_become(uid_t uid)
{
	if (setgroups(0, NULL) < 0 || setgid((gid_t)uid) < 0 || setuid(uid) < 0) {
		fprintf(stderr, "cannot become uid %u: %s\n", (unsigned)uid, strerror(errno));
		_exit(99);
	}
}

void hostile_victim_get(const struct harness *h, const char *ckpt, const char *tensor,
			unsigned seed, uint64_t bytes, int64_t *ret_ms)
{
	int64_t *took = mmap(NULL, sizeof(*took), PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid;

	assert_true(took != MAP_FAILED);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_weight *w = NULL;
		const void *p = NULL;
		weightd_error err;
		int64_t t0;

		hostile_become(UID_VICTIM);
		if (weightd_connect(h->sock, "victim", &c, &err) < 0) {
			fprintf(stderr, "victim: connect: %s\n", err.message);
			_exit(1);
		}
		t0 = it_now_ms();
		if (it_get(c, ckpt, tensor, &w, &err) < 0) {
			fprintf(stderr, "victim: %s: %s\n", tensor, err.message);
			_exit(2);
		}
		*took = it_now_ms() - t0;
		if (weightd_weight_map(w, &p, &err) < 0 ||
		    it_pattern_mismatch(p, bytes, seed) != -1) {
			fprintf(stderr, "victim: %s: wrong bytes\n", tensor);
			_exit(3);
		}
		weightd_release(w);
		weightd_close(c);
		_exit(0);
	}
	it_wait_child_ok(pid);
	if (ret_ms)
		*ret_ms = *took;
	munmap(took, sizeof(*took));
}

void hostile_victim_served(const struct harness *h)
{
	hostile_victim_get(h, "tiny", "t2", 2, TENSOR_BYTES, NULL);
}

struct hostile_base hostile_baseline(const struct harness *h)
{
	struct hostile_base b;

	hostile_victim_served(h); /* warm: first-use allocations are not the attack's */
	b.fds = it_fd_base(h);
	b.rss_kb = harness_rss_kb(h->pid);
	return b;
}

void hostile_back_to_base(const struct harness *h, const struct hostile_base *b)
{
	long rss;

	it_leak_check(h, b->fds, 0);
	rss = harness_rss_kb(h->pid);
	if (HOSTILE_RSS_MEANINGFUL && rss > b->rss_kb + HOSTILE_RSS_SLACK_KB)
		fail_msg("daemon RSS %ld KiB, %ld KiB before the attack", rss, b->rss_kb);
}

void hostile_back_to_base_foreign(const struct harness *h, const struct hostile_base *b,
				  int foreign)
{
	weightd_client *c;
	weightd_status *st = it_quiet_with(h, 0, 0, 10000, &c);
	int want = b->fds + (int)st->segments + it_source_files(st) + 1, fds;
	long rss;

	assert_int_equal(st->references, 0);
	assert_int_equal(st->materializations_in_flight, 0);
	assert_int_equal(harness_segments(h), (int)st->segments + foreign);
	weightd_status_free(st);
	fds = harness_wait_fds(h, want, 10000);
	weightd_close(c);
	if (fds != want)
		fail_msg("the daemon has %d fds open; expected %d", fds, want);
	rss = harness_rss_kb(h->pid);
	if (HOSTILE_RSS_MEANINGFUL && rss > b->rss_kb + HOSTILE_RSS_SLACK_KB)
		fail_msg("daemon RSS %ld KiB, %ld KiB before the attack", rss, b->rss_kb);
}

void chan_open(struct hostile_chan *ch)
{
	assert_int_equal(pipe(ch->to_child), 0);
	assert_int_equal(pipe(ch->to_parent), 0);
}

void chan_child(struct hostile_chan *ch)
{
	close(ch->to_child[1]);
	close(ch->to_parent[0]);
}

void chan_parent(struct hostile_chan *ch)
{
	close(ch->to_child[0]);
	close(ch->to_parent[1]);
}

void chan_say(int fd, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (write(fd, line, (size_t)n) != n)
		_exit(98);
}

bool chan_hear(int fd, char *line, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		char c;
		ssize_t k = read(fd, &c, 1);

		if (k <= 0)
			break;
		if (c == '\n') {
			line[n] = '\0';
			return true;
		}
		line[n++] = c;
	}
	line[n] = '\0';
	return n > 0;
}

int hostile_closing_error(int fd, uint64_t *ret_code, char *msg, size_t cap, int timeout_ms)
{
	int64_t end = it_now_ms() + timeout_ms;

	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		uint8_t hdr[8];
		struct resp *r;
		uint32_t len;
		int left = (int)(end - it_now_ms());
		struct slice m, e = { 0 };

		if (left <= 0 || poll(&pf, 1, left) <= 0)
			return -1;
		if (!read_exact(fd, hdr, 8, left))
			return 0; /* end of stream */
		len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
		      (uint32_t)hdr[3] << 24;
		r = calloc(1, sizeof(*r));
		if (!r || len > sizeof(r->buf) || !read_exact(fd, r->buf, len, left)) {
			free(r);
			return 0;
		}
		m.p = r->buf;
		m.n = len;
		r->id = 0;
		pb_find(m, 1, &r->id, NULL);
		if (r->id == 0 && pb_find(m, 2, NULL, &e)) {
			struct slice text = { 0 };

			*ret_code = 0;
			pb_find(e, 1, ret_code, NULL);
			pb_find(e, 2, NULL, &text);
			snprintf(msg, cap, "%.*s", (int)text.n, (const char *)text.p);
			free(r);
			return 1;
		}
		free(r);
	}
}

bool hostile_eof(int fd)
{
	uint8_t b[256];

	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pf, 1, 5000) <= 0)
			return false;
		k = read(fd, b, sizeof(b));
		if (k == 0)
			return true;
		if (k < 0)
			return errno == ECONNRESET;
	}
}

pid_t hostile_fork(struct hostile_chan *ch)
{
	pid_t pid;

	chan_open(ch);
	pid = fork();
	assert_true(pid >= 0);
	return pid;
}

void hostile_reap(struct hostile_chan *ch, pid_t pid)
{
	it_wait_child_ok(pid);
	close(ch->to_child[1]);
	close(ch->to_parent[0]);
}

int hostile_conn(const struct harness *h)
{
	struct resp r;
	int fd = it_raw_connect(h);

	if (fd < 0)
		_exit(10);
	send_hello(fd, 1, WEIGHTD_PROTOCOL_VERSION);
	read_resp(fd, &r);
	if (r.code != 0)
		_exit(11);
	return fd;
}

pid_t hostile_attack(struct harness *h, const char *extra, struct hostile_base *ret_base)
{
	pid_t pid;

	hostile_start(h, extra);
	*ret_base = hostile_baseline(h);
	pid = fork();
	assert_true(pid >= 0);
	return pid;
}
