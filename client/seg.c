/* SPDX-License-Identifier: Apache-2.0 */
/* seg.c - the shared-memory segments one connection holds: a table by the daemon's segment id,
 * so a segment is one fd and at most one mapping however many weights lie in it. */
#include "seg.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; the kernel refuses it with EINVAL before */
#endif

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
	       weightd_error *err)
{
	struct wc_seg *sg = NULL;
	struct stat st;
	int r;

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
		pthread_mutex_unlock(&t->mu);
		close(fd);   /* this client has the segment already: one fd per segment */
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
	if (sg->mapped && sg->map)
		munmap(sg->map, (size_t)sg->size);
	close(sg->fd);
	free(sg);
}

struct wc_seg_table *wc_seg_table_new(void)
{
	struct wc_seg_table *t = calloc(1, sizeof(*t));

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
