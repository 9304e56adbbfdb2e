/* SPDX-License-Identifier: Apache-2.0 */
/* progress.c - weightctl's progress bar: a unit submitted, polled and drawn on stderr, as a bar
 * on a terminal and as plain lines elsewhere (a log, a pod's output). */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "weightctl.h"

#define PROGRESS_INTERVAL 0.1  /* seconds between status polls while a unit runs */
#define PROGRESS_LINE_INTERVAL 2.0 /* ... and between progress lines, which a log keeps */

static enum progress_mode mode = PROGRESS_AUTO;

void progress_set_mode(enum progress_mode m)
{
	mode = m;
}

/*
 * A progress bar for a unit, drawn on stderr when it is a terminal. The unit's preflight gives
 * its distinct weights (by key) and their sizes. While the unit runs, the daemon's status lists
 * its jobs in flight with the bytes each has written; a weight of the unit is counted with its
 * job's bytes, or whole when no job has its key: status is asked on the same connection after
 * the materialize request, which the daemon has then already taken, so such a weight is
 * resident (it was cached, or its job finished).
 */
struct progress {
	bool on;                    /* poll and draw (a bar, or lines) */
	bool lines;                 /* a line per sample, not a bar redrawn in place */
	bool drawn;                 /* a bar is on the screen (a final line is owed) */
	size_t n;
	struct pkey *keys;          /* the distinct weights, sorted by key */
	bool *seen;                 /* per key: a job counted it in this sample */
	uint64_t total;
	double t0;                  /* when the unit was submitted */
	bool have_base;             /* first sample: the base the rate is measured from */
	double t_base;
	uint64_t done_base;
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One distinct weight of the unit. */
struct pkey {
	uint8_t key[WEIGHTD_DIGEST_LEN];
	uint64_t nbytes;
};

static int pkey_cmp(const void *a, const void *b)
{
	return memcmp(a, b, WEIGHTD_DIGEST_LEN); /* key first in struct pkey; bsearch's key too */
}

static void progress_free(struct progress *p)
{
	free(p->keys);
	free(p->seen);
	p->keys = NULL;
	p->seen = NULL;
}

/* Preflight the unit (reads nothing) to learn its distinct weights. 0, or the preflight's error. */
static int progress_init(struct progress *p, weightd_unit *u, weightd_error *err)
{
	weightd_inflight *f = NULL;
	weightd_preflight *pf = NULL;
	int r;

	r = weightd_unit_preflight(u, &f, err);
	if (r == 0)
		r = weightd_preflight_finish(f, &pf, err);
	if (r < 0)
		return r;
	p->keys = calloc(pf->count ? pf->count : 1, sizeof(*p->keys));
	p->seen = calloc(pf->count ? pf->count : 1, sizeof(*p->seen));
	if (!p->keys || !p->seen) {
		progress_free(p);
		p->on = false;   /* no bar, but the unit can still run */
		weightd_preflight_free(pf);
		return 0;
	}
	for (size_t i = 0; i < pf->count; i++) {
		const weightd_output_info *o = &pf->outputs[i];

		if (o->alias_of[0] || !o->key)
			continue;
		memcpy(p->keys[p->n].key, o->key, WEIGHTD_DIGEST_LEN);
		p->keys[p->n++].nbytes = o->nbytes;
	}
	weightd_preflight_free(pf);
	/* identical recipes share one weight: sorted, each key once (n log n, not n^2: a MoE
	 * checkpoint has 100,000 tensors) */
	qsort(p->keys, p->n, sizeof(*p->keys), pkey_cmp);
	{
		size_t m = 0;

		for (size_t i = 0; i < p->n; i++)
			if (m == 0 || pkey_cmp(&p->keys[m - 1], &p->keys[i]) != 0)
				p->keys[m++] = p->keys[i];
		p->n = m;
	}
	for (size_t i = 0; i < p->n; i++)
		p->total += p->keys[i].nbytes;
	return 0;
}

/* "1:05", "1:02:03"; "--:--" when not known. */
static void fmt_eta(double s, char *out, size_t cap)
{
	uint64_t t;

	if (!(s >= 0) || s > 359999) {
		snprintf(out, cap, "--:--");
		return;
	}
	t = (uint64_t)(s + 0.5);
	if (t >= 3600)
		snprintf(out, cap, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, t / 3600, t / 60 % 60,
			 t % 60);
	else
		snprintf(out, cap, "%" PRIu64 ":%02" PRIu64, t / 60, t % 60);
}

/*
 * One frame, redrawn in place: " 42% [########----------] 54.0 MiB / 128.0 MiB  250.0 MiB/s  ETA 0:01".
 * The final frame ends the line and says how long the whole took instead of the time left.
 */
static void progress_draw(struct progress *p, uint64_t done, bool final)
{
	double now = mono(), rate = -1, frac;
	char *d, *t, *r = NULL, tail[160], when[40], eta[24], bar[64];
	struct winsize ws;
	int cols = 80, width, fill;

	if (done > p->total)
		done = p->total;
	frac = p->total ? (double)done / (double)p->total : 1.0;
	if (p->have_base && now - p->t_base >= 0.05 && done >= p->done_base)
		rate = (double)(done - p->done_base) / (now - p->t_base);
	if (final)
		snprintf(when, sizeof(when), "in %.1f s", now - p->t0);
	else {
		fmt_eta(rate > 0 ? (double)(p->total - done) / rate : -1, eta, sizeof(eta));
		snprintf(when, sizeof(when), "ETA %s", eta);
	}
	d = output_fmt_bytes(done);
	t = output_fmt_bytes(p->total);
	r = rate >= 0 ? output_fmt_bytes((uint64_t)rate) : output_strdup("-");
	if (p->lines) {
		/* whole lines, nothing redrawn: what a log or `kubectl logs` can keep */
		fprintf(stderr, "progress: %3d%% %s / %s, %s/s, %s\n", (int)(frac * 100), d, t, r,
			when);
		fflush(stderr);
		p->drawn = false;
		free(d);
		free(t);
		free(r);
		return;
	}
	snprintf(tail, sizeof(tail), " %s / %s  %s/s  %s", d, t, r, when);
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col)
		cols = ws.ws_col;
	width = cols - 1 - 7 - (int)strlen(tail);
	width = width < 10 ? 10 : width > 50 ? 50 : width;
	fill = (int)(frac * width);
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '-';
	bar[width] = '\0';
	fprintf(stderr, "\r%3d%% [%s]%s\033[K%s", (int)(frac * 100), bar, tail, final ? "\n" : "");
	fflush(stderr);
	p->drawn = !final;
	free(d);
	free(t);
	free(r);
}

/* Ask the daemon how far the unit's weights are and redraw. Stops drawing if status fails. */
static void progress_sample(struct progress *p, weightd_client *c)
{
	weightd_status *st = NULL;
	uint64_t done = 0;

	/* jobs only: ten times a second, the list of weights would keep a daemon caching many
	 * of them busy answering (it grows with every weight cached) */
	if (weightd_status_summary(c, &st, NULL) < 0) {
		if (p->drawn)
			fputc('\n', stderr);
		p->drawn = false;
		p->on = false;
		return;
	}
	/* every weight whole, less what its job (if one is in flight) has still to write; one
	 * lookup per job in the sorted keys */
	done = p->total;
	memset(p->seen, 0, p->n * sizeof(*p->seen));
	for (size_t j = 0; j < st->n_jobs; j++) {
		const struct pkey *k = st->jobs[j].key ?
			bsearch(st->jobs[j].key, p->keys, p->n, sizeof(*p->keys), pkey_cmp) : NULL;

		if (!k || p->seen[k - p->keys])
			continue;
		p->seen[k - p->keys] = true;
		if (st->jobs[j].done < k->nbytes)
			done -= k->nbytes - st->jobs[j].done;
	}
	weightd_status_free(st);
	if (!p->have_base) {
		p->have_base = true;
		p->t_base = mono();
		p->done_base = done;
	}
	progress_draw(p, done, false);
}

/*
 * Submit the unit and wait for the daemon's answer. On a terminal, preflight it first, then
 * poll the unit and the daemon's status every PROGRESS_INTERVAL and draw a bar once the unit has
 * taken longer than that (quick units print nothing). Returns 0 or a negative code with err set
 * (by preflight, submit or finish); a bar on the screen is ended with a newline either way.
 */
int run_unit(weightd_client *c, weightd_unit *u, weightd_error *err)
{
	bool tty = isatty(STDERR_FILENO) == 1;
	struct progress p = { .on = mode != PROGRESS_OFF,
			      .lines = mode == PROGRESS_LINES || (mode == PROGRESS_AUTO && !tty) };
	double interval = p.lines ? PROGRESS_LINE_INTERVAL : PROGRESS_INTERVAL;
	double next;
	int r, done = 0;
	bool sampled = false;

	if (p.on && progress_init(&p, u, err) < 0) {
		/* progress is a courtesy: a daemon that cannot preflight the unit still gets it
		 * asked for, and its own error (if any) is the one that counts */
		progress_free(&p);
		p.on = false;
		memset(err, 0, sizeof(*err));
	}
	r = weightd_unit_submit(u, err);
	if (r < 0)
		goto out;
	p.t0 = mono();
	next = p.t0 + interval;
	while (p.on) {
		struct pollfd pfd = { weightd_client_fd(c), POLLIN, 0 };
		double left;

		if (weightd_unit_poll(u, &done, NULL) < 0 || done)
			break;
		left = next - mono();
		if (left > 0) {
			/* wakes early when the reply arrives */
			poll(&pfd, 1, (int)(left * 1000) + 1);
			continue;
		}
		progress_sample(&p, c);
		sampled = true;
		next = mono() + interval;
	}
	r = weightd_unit_finish(u, err);
	if (p.lines && sampled && r == 0) {
		progress_draw(&p, p.total, true);
	} else if (p.drawn) {
		if (r == 0)
			progress_draw(&p, p.total, true);
		else
			fputc('\n', stderr);
	}
out:
	progress_free(&p);
	return r;
}
