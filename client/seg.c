/* SPDX-License-Identifier: Apache-2.0 */
/* seg.c - the shared-memory segments one connection holds: a table by the daemon's segment id,
 * so a segment is one fd and at most one mapping however many weights lie in it. */
#include "seg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/kcmp.h>

#include "err.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; the kernel refuses it with EINVAL before */
#endif

/* fork()s this process has made (or been made by), counted by the handlers seg_atfork sets */
static atomic_uint forks;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static bool holds_off;

static void count_fork(void)
{
	atomic_fetch_add(&forks, 1);
}

static void seg_atfork(void)
{
	const char *e = getenv("WEIGHTD_HOLD_LOCKS");

	holds_off = e && strcmp(e, "0") == 0;
	pthread_atfork(NULL, count_fork, count_fork);
}

bool wc_seg_holds_on(void)
{
	pthread_once(&atfork_once, seg_atfork);
	return !holds_off;
}

/* Do fds a and b stand for other open file descriptions? kcmp(2) tells; where it may not be used
 * (a seccomp profile, a kernel without it), they are taken to be the same one. */
static bool other_description(int a, int b)
{
	pid_t me = getpid();

	return syscall(SYS_kcmp, me, me, KCMP_FILE, a, b) > 0;
}

struct wc_seg_table {
	pthread_mutex_t mu;          /* the table, and every segment's refs, map and mapped */
	struct wc_seg **tab;         /* chained hash, cap buckets (power of two) */
	size_t cap, n;
};

static size_t seg_bucket(uint64_t id, size_t cap)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static int seg_table_grow(struct wc_seg_table *t)
{
	size_t ncap = t->cap ? t->cap * 2 : 64;
	struct wc_seg **nt = calloc(ncap, sizeof(*nt));

	if (!nt)
		return -1;
	for (size_t i = 0; i < t->cap; i++)
		while (t->tab[i]) {
			struct wc_seg *sg = t->tab[i];
			size_t b = seg_bucket(sg->id, ncap);

			t->tab[i] = sg->next;
			sg->next = nt[b];
			nt[b] = sg;
		}
	free(t->tab);
	t->tab = nt;
	t->cap = ncap;
	return 0;
}

int wc_seg_get(struct wc_seg_table *t, uint64_t id, uint64_t size, int fd, struct wc_seg **ret,
	       int *ret_spare, weightd_error *err)
{
	struct wc_seg *sg = NULL;
	struct stat st;
	int r;

	if (ret_spare)
		*ret_spare = -1;
	if (fstat(fd, &st) < 0) {
		r = wc_err_set(err, WEIGHTD_E_IO, "cannot stat a shared-memory segment from weightd: %s",
			       strerror(errno));
		close(fd);
		return r;
	}
	if (size == 0)
		size = (uint64_t)st.st_size;
	if ((uint64_t)st.st_size < size) {
		r = wc_err_set(err, WEIGHTD_E_BYTE_COUNT_MISMATCH,
			       "segment %llu from weightd holds %lld bytes, but weightd says %llu",
			       (unsigned long long)id, (long long)st.st_size,
			       (unsigned long long)size);
		close(fd);
		return r;
	}
	pthread_mutex_lock(&t->mu);
	if (id && t->cap)
		for (sg = t->tab[seg_bucket(id, t->cap)]; sg; sg = sg->next)
			if (sg->id == id)
				break;
	if (sg) {
		if (sg->dev != (uint64_t)st.st_dev || sg->ino != (uint64_t)st.st_ino ||
		    sg->size != size) {
			pthread_mutex_unlock(&t->mu);
			close(fd);
			return wc_err_set(err, WEIGHTD_E_PROTOCOL,
					  "weightd sent segment %llu as a different object than before",
					  (unsigned long long)id);
		}
		sg->refs++;
		/* weightd lends one description per client and segment, the one the client keeps;
		 * after a reconnection it lends a new one, which becomes the kept one at the next
		 * commit (the locks move to it: see hold_commit) */
		if (sg->from_before && sg->swap_fd < 0 && sg->fd >= 0 &&
		    other_description(sg->fd, fd)) {
			sg->swap_fd = fd;
			fd = -1;
		}
		pthread_mutex_unlock(&t->mu);
		/* this client has the segment already: one fd per segment */
		if (ret_spare)
			*ret_spare = fd;
		else if (fd >= 0)
			close(fd);
		*ret = sg;
		return 0;
	}
	sg = calloc(1, sizeof(*sg));
	if (!sg || (id && t->n + 1 > t->cap && seg_table_grow(t) < 0)) {
		pthread_mutex_unlock(&t->mu);
		free(sg);
		close(fd);
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory");
	}
	sg->id = id;
	sg->fd = fd;
	sg->size = size;
	sg->dev = (uint64_t)st.st_dev;
	sg->ino = (uint64_t)st.st_ino;
	sg->refs = 1;
	sg->t = t;
	sg->swap_fd = -1;
	sg->forks = atomic_load(&forks);
	if (id) {
		size_t b = seg_bucket(id, t->cap);

		sg->next = t->tab[b];
		t->tab[b] = sg;
	}
	t->n++;
	pthread_mutex_unlock(&t->mu);
	*ret = sg;
	return 0;
}

void wc_seg_ref(struct wc_seg *sg)
{
	pthread_mutex_lock(&sg->t->mu);
	sg->refs++;
	pthread_mutex_unlock(&sg->t->mu);
}

void wc_seg_unref(struct wc_seg *sg)
{
	struct wc_seg_table *t;

	if (!sg)
		return;
	t = sg->t;
	pthread_mutex_lock(&t->mu);
	if (--sg->refs) {
		pthread_mutex_unlock(&t->mu);
		return;
	}
	if (sg->id) {
		struct wc_seg **pp = &t->tab[seg_bucket(sg->id, t->cap)];

		while (*pp && *pp != sg)
			pp = &(*pp)->next;
		if (*pp)
			*pp = sg->next;
	}
	t->n--;
	pthread_mutex_unlock(&t->mu);
	/* Unmapped and closed, its open file description ends with every lock on it (unless a
	 * child of a fork() still has it, which is what the locks are for then). */
	if (sg->mapped && sg->map)
		munmap(sg->map, (size_t)sg->size);
	close(sg->fd);
	if (sg->swap_fd >= 0)
		close(sg->swap_fd);
	free(sg->holds);
	free(sg->pend);
	free(sg->drop);
	free(sg);
}

struct wc_seg_table *wc_seg_table_new(void)
{
	struct wc_seg_table *t = calloc(1, sizeof(*t));

	pthread_once(&atfork_once, seg_atfork);
	if (t)
		pthread_mutex_init(&t->mu, NULL);
	return t;
}

void wc_seg_table_free(struct wc_seg_table *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->mu);
	free(t->tab);
	free(t);
}

/* Under the table's lock, so two threads never map a segment twice. */
int wc_seg_map(struct wc_seg *sg, const char *name, weightd_error *err)
{
	int r = 0;

	pthread_mutex_lock(&sg->t->mu);
	if (!sg->mapped) {
		if (sg->size > SIZE_MAX) {
			r = wc_err_set(err, WEIGHTD_E_OVERFLOW,
				       "the segment of weight \"%s\" is too large to map here", name);
		} else if (sg->size) {
			/* No address hint: for a file on a tmpfs that gives huge pages the kernel
			 * itself places the mapping on a 2 MiB boundary (shmem_get_unmapped_area),
			 * so weights weightd starts on 2 MiB boundaries are mapped with PMDs. */
			void *p = mmap(NULL, (size_t)sg->size, PROT_READ, MAP_SHARED, sg->fd, 0);

			if (p == MAP_FAILED) {
				int e = errno;

				r = wc_err_set(err, e == ENOMEM ? WEIGHTD_E_RESOURCE_EXHAUSTED : WEIGHTD_E_IO,
					       "cannot map the segment of weight \"%s\" (%llu bytes): "
					       "%s%s", name, (unsigned long long)sg->size, strerror(e),
					       e == ENOMEM ? " (out of address space or of mappings: "
					       "see vm.max_map_count)" : "");
			} else {
				sg->map = p;
				sg->mapped = true;
			}
		} else {
			sg->mapped = true;
		}
	}
	pthread_mutex_unlock(&sg->t->mu);
	return r;
}

int wc_seg_populate(struct wc_seg *sg, uint64_t off, uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), first, end;
	const volatile uint8_t *p;

	if (!sg->map || off >= sg->size || !len)
		return 0;
	if (len > sg->size - off)
		len = sg->size - off;
	first = off / page * page;
	end = (off + len + page - 1) / page * page; /* the mapping's last page is whole */
	if (madvise((uint8_t *)sg->map + first, (size_t)(end - first), MADV_POPULATE_READ) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	/* The segment's size was checked against fstat when it came and weightd never shrinks a
	 * segment a client holds, so these reads stay inside the object. */
	p = (const volatile uint8_t *)sg->map;
	for (uint64_t at = first; at < end; at += page)
		(void)p[at];
	return 0;
}

void wc_seg_table_rekey(struct wc_seg_table *t, struct wc_seg *const *segs, const uint64_t *ids,
			size_t n)
{
	struct wc_seg *all = NULL, *sg;

	pthread_mutex_lock(&t->mu);
	/* out of the buckets, all of them, with no id */
	for (size_t b = 0; b < t->cap; b++)
		while ((sg = t->tab[b])) {
			t->tab[b] = sg->next;
			sg->id = 0;
			sg->next = all;
			all = sg;
		}
	for (size_t i = 0; i < n; i++)
		if (ids[i] && segs[i]->id == 0)
			segs[i]->id = ids[i];
	/* back in under their new ids; those without one stay out (found by nobody) */
	while ((sg = all)) {
		all = sg->next;
		sg->next = NULL;
		sg->from_before = true; /* weightd will lend it anew (see wc_seg_get) */
		if (sg->id) {
			size_t bk = seg_bucket(sg->id, t->cap);

			sg->next = t->tab[bk];
			t->tab[bk] = sg;
		}
	}
	pthread_mutex_unlock(&t->mu);
}

/* --- holds ------------------------------------------------------------------------------- */

static uint64_t hold_end(const struct wc_hold *h)
{
	return h->off + h->len;
}

/* Grow *p (of *cap elements of `size` bytes) to room for `need`; false when out of memory. */
static bool room(void **p, size_t *cap, size_t need, size_t size)
{
	size_t ncap;
	void *np;

	if (need <= *cap)
		return true;
	ncap = *cap ? *cap : 16;
	while (ncap < need)
		ncap *= 2;
	np = realloc(*p, ncap * size);
	if (!np)
		return false;
	*p = np;
	*cap = ncap;
	return true;
}

/* The first hold at or after offset off (n_holds when none). */
static size_t hold_at(const struct wc_seg *sg, uint64_t off)
{
	size_t lo = 0, hi = sg->n_holds;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (sg->holds[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The first hold whose end lies after off (holds are disjoint: ends are sorted too). */
static size_t hold_ending_after(const struct wc_seg *sg, uint64_t off)
{
	size_t lo = 0, hi = sg->n_holds;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (hold_end(&sg->holds[mid]) <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* What the locks cover around hold i: from the end of the hold before it, when that is closer
 * than WD_HOLD_GAP, to the start of the one after it, likewise. */
static void hold_reach(const struct wc_seg *sg, size_t i, uint64_t *ret_a, uint64_t *ret_b)
{
	const struct wc_hold *h = &sg->holds[i];
	uint64_t a = h->off, b = hold_end(h);

	if (i > 0 && h->off - hold_end(&sg->holds[i - 1]) < WD_HOLD_GAP)
		a = hold_end(&sg->holds[i - 1]);
	if (i + 1 < sg->n_holds && sg->holds[i + 1].off - hold_end(h) < WD_HOLD_GAP)
		b = sg->holds[i + 1].off;
	*ret_a = a;
	*ret_b = b;
}

int wc_seg_hold(struct wc_seg *sg, uint64_t off, uint64_t len)
{
	int r = 0;

	if (len == 0 || !wc_seg_holds_on())
		return 0;
	pthread_mutex_lock(&sg->t->mu);
	if (room((void **)&sg->pend, &sg->cap_pend, sg->n_pend + 1, sizeof(*sg->pend)))
		sg->pend[sg->n_pend++] = (struct wd_hold_range){ off, len };
	else
		r = -WEIGHTD_E_RESOURCE_EXHAUSTED;
	pthread_mutex_unlock(&sg->t->mu);
	return r;
}

static int range_cmp(const void *a, const void *b)
{
	const struct wd_hold_range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* By offset; a unit's weights mostly come in order already, and a check is linear. */
static void sort_ranges(struct wd_hold_range *r, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (r[i - 1].off > r[i].off) {
			qsort(r, n, sizeof(*r), range_cmp);
			return;
		}
}

/*
 * Enter the queued ranges (sorted) into holds. fresh[0..*ret_n) receives, in increasing order,
 * the indices of holds that are new (a range held already only counts up). One merge pass when
 * many come at once; appends and a few inserts in place otherwise.
 */
static int enter_pending(struct wc_seg *sg, size_t *fresh, size_t *ret_n)
{
	size_t n = sg->n_pend, nf = 0;
	struct wd_hold_range *p = sg->pend;

	if (!room((void **)&sg->holds, &sg->cap_holds, sg->n_holds + n, sizeof(*sg->holds)))
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (sg->n_holds == 0 || p[0].off > sg->holds[sg->n_holds - 1].off) {
		/* after every hold (a unit packed in order, the next single get of an arena) */
		for (size_t k = 0; k < n; k++) {
			if (sg->n_holds && sg->holds[sg->n_holds - 1].off == p[k].off) {
				sg->holds[sg->n_holds - 1].count++;
				continue;
			}
			fresh[nf++] = sg->n_holds;
			sg->holds[sg->n_holds++] = (struct wc_hold){ p[k].off, p[k].len, 1 };
		}
	} else if (n <= 8) {
		for (size_t k = 0; k < n; k++) {
			size_t i = hold_at(sg, p[k].off);

			if (i < sg->n_holds && sg->holds[i].off == p[k].off) {
				sg->holds[i].count++;
				continue;
			}
			memmove(&sg->holds[i + 1], &sg->holds[i],
				(sg->n_holds - i) * sizeof(*sg->holds));
			sg->holds[i] = (struct wc_hold){ p[k].off, p[k].len, 1 };
			sg->n_holds++;
			/* p is sorted, so each lands after the ones before it: indices stay in order */
			fresh[nf++] = i;
		}
	} else {
		struct wc_hold *out = malloc((sg->n_holds + n) * sizeof(*out));
		size_t i = 0, k = 0, o = 0;

		if (!out)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		while (i < sg->n_holds || k < n) {
			if (k == n || (i < sg->n_holds && sg->holds[i].off < p[k].off)) {
				out[o++] = sg->holds[i++];
			} else if (o > 0 && out[o - 1].off == p[k].off) {
				out[o - 1].count++;
				k++;
			} else if (i < sg->n_holds && sg->holds[i].off == p[k].off) {
				out[o] = sg->holds[i++];
				out[o++].count++;
				k++;
			} else {
				out[o] = (struct wc_hold){ p[k].off, p[k].len, 1 };
				fresh[nf++] = o++;
				k++;
			}
		}
		free(sg->holds);
		sg->holds = out;
		sg->cap_holds = sg->n_holds + n;
		sg->n_holds = o;
	}
	sg->n_pend = 0;
	*ret_n = nf;
	return 0;
}

/*
 * The description weightd lent after a reconnection becomes the kept one (under the table's
 * lock): every held run is locked on it first, then the old one's locks go (not after a fork:
 * a child may rely on them) and the new one takes the old fd's number (dup3), so that the fd
 * weightd_weight_fd gave stays valid. The old description lives on in the mapping, unlocked.
 * Out of locks, the new one is closed and nothing changes.
 */
static void swap_description(struct wc_seg *sg)
{
	int nfd = sg->swap_fd;

	sg->swap_fd = -1;
	sg->from_before = false;
	for (size_t k = 0; k < sg->n_holds;) {
		uint64_t a = sg->holds[k].off, b = hold_end(&sg->holds[k]);

		for (k++; k < sg->n_holds && sg->holds[k].off - b < WD_HOLD_GAP; k++)
			b = hold_end(&sg->holds[k]);
		if (wd_holdlock_lock(nfd, a, b - a) < 0) {
			close(nfd);
			return;
		}
	}
	if (sg->forks == atomic_load(&forks))
		wd_holdlock_unlock(sg->fd, 0, sg->size ? sg->size : UINT64_MAX / 2);
	if (dup3(nfd, sg->fd, O_CLOEXEC) < 0) {
		close(nfd);
		return;
	}
	close(nfd);
}

int wc_seg_hold_commit(struct wc_seg *sg, weightd_error *err)
{
	size_t *fresh = NULL, nf = 0;
	uint64_t a = 0, b = 0;
	bool open = false;
	int r = 0;

	pthread_mutex_lock(&sg->t->mu);
	if (sg->n_pend == 0)
		goto out;
	fresh = malloc(sg->n_pend * sizeof(*fresh));
	if (!fresh) {
		r = -WEIGHTD_E_RESOURCE_EXHAUSTED;
		goto out;
	}
	sort_ranges(sg->pend, sg->n_pend);
	r = enter_pending(sg, fresh, &nf);
	/* One lock call per run of new holds: their reaches touch when they lie together. */
	for (size_t f = 0; r == 0 && f <= nf; f++) {
		uint64_t x = 0, y = 0;

		if (f < nf)
			hold_reach(sg, fresh[f], &x, &y);
		if (open && f < nf && x <= b) {
			if (y > b)
				b = y;
			continue;
		}
		if (open)
			r = wd_holdlock_lock(sg->fd, a, b - a);
		a = x;
		b = y;
		open = f < nf;
	}
out:
	if (r == 0 && sg->swap_fd >= 0)
		swap_description(sg);
	if (r < 0 && r != -WEIGHTD_E_RESOURCE_EXHAUSTED)
		r = -WEIGHTD_E_RESOURCE_EXHAUSTED;
	pthread_mutex_unlock(&sg->t->mu);
	free(fresh);
	if (r < 0)
		return wc_err_set(err, WEIGHTD_E_RESOURCE_EXHAUSTED,
				  "cannot lock held weights of segment %llu (the kernel's record that "
				  "this process maps them): %s", (unsigned long long)sg->id,
				  r == -WEIGHTD_E_RESOURCE_EXHAUSTED ? "out of memory or of locks" :
				  "lock refused");
	return 0;
}

void wc_seg_unhold(struct wc_seg *sg, uint64_t off, uint64_t len)
{
	if (len == 0 || !wc_seg_holds_on())
		return;
	pthread_mutex_lock(&sg->t->mu);
	/* counted down at the commit, all at once (when out of memory it stays held, and locked
	 * until the segment is let go, which is safe) */
	if (room((void **)&sg->drop, &sg->cap_drop, sg->n_drop + 1, sizeof(*sg->drop)))
		sg->drop[sg->n_drop++] = (struct wd_hold_range){ off, len };
	pthread_mutex_unlock(&sg->t->mu);
}

/* Unlock the parts of [a, b) that no hold (with the gaps between close holds) covers now. */
static void unlock_uncovered(struct wc_seg *sg, uint64_t a, uint64_t b)
{
	uint64_t cursor = a;
	size_t k = hold_ending_after(sg, a > WD_HOLD_GAP ? a - WD_HOLD_GAP : 0);

	while (k < sg->n_holds && cursor < b && sg->holds[k].off < b + WD_HOLD_GAP) {
		uint64_t rs = sg->holds[k].off, re = hold_end(&sg->holds[k]);

		while (k + 1 < sg->n_holds && sg->holds[k + 1].off - re < WD_HOLD_GAP)
			re = hold_end(&sg->holds[++k]);
		k++;
		if (rs > cursor)
			wd_holdlock_unlock(sg->fd, cursor, (rs < b ? rs : b) - cursor);
		if (re > cursor)
			cursor = re;
	}
	if (cursor < b)
		wd_holdlock_unlock(sg->fd, cursor, b - cursor);
}

struct wc_seg *wc_seg_find(struct wc_seg_table *t, uint64_t id)
{
	struct wc_seg *sg = NULL;

	pthread_mutex_lock(&t->mu);
	if (t->cap)
		for (sg = t->tab[seg_bucket(id, t->cap)]; sg; sg = sg->next)
			if (sg->id == id)
				break;
	if (sg)
		sg->refs++;
	pthread_mutex_unlock(&t->mu);
	return sg;
}

void wc_seg_unlock_range(struct wc_seg *sg, uint64_t off, uint64_t len)
{
	if (len == 0 || !wc_seg_holds_on())
		return;
	pthread_mutex_lock(&sg->t->mu);
	if (sg->forks == atomic_load(&forks))
		unlock_uncovered(sg, off, off + len);
	pthread_mutex_unlock(&sg->t->mu);
}

void wc_seg_unhold_commit(struct wc_seg *sg)
{
	struct wd_hold_range *d;
	size_t i = 0, o = 0, gone = 0;

	pthread_mutex_lock(&sg->t->mu);
	if (sg->n_drop == 0) {
		pthread_mutex_unlock(&sg->t->mu);
		return;
	}
	d = sg->drop;
	sort_ranges(d, sg->n_drop);
	/* count them down in one merge pass; the ranges that reach 0 stay in d[0..gone) */
	for (size_t k = 0; k < sg->n_drop; k++) {
		while (i < sg->n_holds && sg->holds[i].off < d[k].off)
			i++;
		if (i == sg->n_holds || sg->holds[i].off != d[k].off || sg->holds[i].count == 0)
			continue; /* not held (cannot happen): nothing to let go */
		if (--sg->holds[i].count == 0)
			d[gone++] = d[k];
	}
	/* and out of the array, in one pass */
	for (i = 0; i < sg->n_holds; i++)
		if (sg->holds[i].count)
			sg->holds[o++] = sg->holds[i];
	sg->n_holds = o;
	/* Unlock, around each range let go, what no hold covers any more. Not after a fork(): the
	 * child may map what this process let go (seg.h). */
	if (sg->forks == atomic_load(&forks))
		for (size_t k = 0; k < gone;) {
			uint64_t a = d[k].off > WD_HOLD_GAP ? d[k].off - WD_HOLD_GAP : 0;
			uint64_t b = d[k].off + d[k].len + WD_HOLD_GAP;

			/* ranges let go side by side are one region */
			for (k++; k < gone && d[k].off <= b; k++)
				if (d[k].off + d[k].len + WD_HOLD_GAP > b)
					b = d[k].off + d[k].len + WD_HOLD_GAP;
			unlock_uncovered(sg, a, b);
		}
	sg->n_drop = 0;
	pthread_mutex_unlock(&sg->t->mu);
}
