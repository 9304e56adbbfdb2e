/* SPDX-License-Identifier: Apache-2.0 */
/* recipe_exec.c - plan execution: pulls the output's bytes through the graph into a sink. */
#include "recipe_int.h"

#include <inttypes.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "convert.h"
#include "dequant.h"

/* ---- execution ------------------------------------------------------------------------------- */

struct xstate {
	uint8_t *temp;               /* whole output, once `ready` (temp_alloc) */
	size_t temp_len;
	bool ready, busy;            /* busy: being evaluated into temp */
	/* a cast's window: converted output bytes [win_off, win_off + win_len) */
	uint8_t *inbuf, *win;
	float *mid;                  /* F32 between dequantization and the final conversion */
	size_t units;                /* capacity of inbuf, in input units */
	size_t inbuf_len, wbuf_len, mid_len;   /* their sizes (buf_alloc) */
	uint64_t win_off;
	size_t win_len;
};

/*
 * A cast's window buffers: mapped of their own from 128 KiB on, as glibc's defaults did. weightd
 * raises malloc's mmap threshold and keeps freed heap (daemon/heap.c) for the main thread's
 * request memory; a worker's heap top is never given back by malloc_trim, so buffers freed there
 * would stay resident after the work, once per worker thread.
 *
 * A thread keeps the last few window buffers it freed (BUF_KEEP, each at most BUF_KEEP_MAX) for
 * the next cast of the same size: a unit of thousands of small dequantized experts runs as many
 * plans one after another on each worker, and mapping fresh windows for each cost a page fault
 * per page and a TLB shootdown per unmap, several times the conversion itself. They are unmapped
 * when the thread ends.
 */
#define BUF_MAP_MIN (128u << 10)
#define BUF_KEEP 4
#define BUF_KEEP_MAX (1u << 20)

struct buf_kept {
	void *p[BUF_KEEP];
	size_t n[BUF_KEEP];
	unsigned next; /* the slot the next buffer kept replaces when all are taken */
};

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static void kept_free(void *arg)
{
	struct buf_kept *k = arg;

	for (unsigned i = 0; k && i < BUF_KEEP; i++)
		if (k->p[i])
			munmap(k->p[i], k->n[i]);
	free(k);
}

static void kept_init(void)
{
	if (pthread_key_create(&kept_key, kept_free) != 0)
		kept_key = (pthread_key_t)-1;
}

/* The calling thread's kept buffers (made on first use), or NULL. */
static struct buf_kept *kept_get(bool make)
{
	struct buf_kept *k;

	pthread_once(&kept_once, kept_init);
	if (kept_key == (pthread_key_t)-1)
		return NULL;
	k = pthread_getspecific(kept_key);
	if (k || !make)
		return k;
	k = calloc(1, sizeof(*k));
	if (k && pthread_setspecific(kept_key, k) != 0)
		k = (free(k), NULL);
	return k;
}

static void *buf_alloc(size_t n)
{
	struct buf_kept *k;
	void *p;

	if (n < BUF_MAP_MIN)
		return malloc(n);
	if (n <= BUF_KEEP_MAX && (k = kept_get(false))) {
		for (unsigned i = 0; i < BUF_KEEP; i++) {
			if (k->p[i] && k->n[i] == n) {
				p = k->p[i];
				k->p[i] = NULL;
				return p;
			}
		}
	}
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void buf_free(void *p, size_t n)
{
	struct buf_kept *k;
	unsigned slot = BUF_KEEP;

	if (!p)
		return;
	if (n < BUF_MAP_MIN) {
		free(p);
		return;
	}
	if (n <= BUF_KEEP_MAX && (k = kept_get(true))) {
		for (unsigned i = 0; i < BUF_KEEP && slot == BUF_KEEP; i++)
			if (!k->p[i])
				slot = i;
		if (slot == BUF_KEEP) {
			slot = k->next;
			k->next = (k->next + 1) % BUF_KEEP;
			munmap(k->p[slot], k->n[slot]);
		}
		k->p[slot] = p;
		k->n[slot] = n;
		return;
	}
	munmap(p, n);
}

/*
 * Checkpoint bytes read are dropped from the page cache (wd_source_drop_cache) once written into
 * the sink: ranges read back to back are joined into one extent, handed over when it reaches
 * DROP_STEP (a long weight's pages count against the drop queue's bound as it goes, and are
 * dropped by the workers themselves when that is full) and at the end of the execution, so
 * there is one hand-over per chunk or large step, not one per read. A few extents stay open at
 * once for plans that read several tensors in turn (a concatenation); the oldest is handed over
 * early when a fifth one starts.
 */
#define DROP_EXTENTS 4
#define DROP_STEP    (16u << 20)

struct extent {
	const struct wd_source *src;
	uint32_t file;
	uint64_t off, len;
};

struct exec {
	const struct wd_plan *p;
	struct xstate **st;          /* by xnode.slot, made when first used (state()) */
	weightd_error *err;
	uint64_t bytes_read;
	size_t win_bytes;            /* each cast window's budget (exec_alloc) */
	/* the slots made, so that freeing does not walk them all: a range of a large plan makes
	 * only the state of the nodes it reads */
	uint32_t *owned;
	size_t n_owned;
	/* one pending pread, extended while requests continue it */
	const struct xnode *pend_leaf;
	uint64_t pend_off;
	size_t pend_len;
	uint8_t *pend_dst;
	struct extent read[DROP_EXTENTS]; /* read, not yet dropped */
	size_t n_read;
};

static void drop_extent(struct exec *e, size_t i)
{
	const struct extent *x = &e->read[i];

	wd_source_drop_cache(x->src, x->file, x->off, x->len);
	memmove(&e->read[i], &e->read[i + 1], (e->n_read - i - 1) * sizeof(e->read[0]));
	e->n_read--;
}

/*
 * Drop the extents of at least `min` bytes (0: all); called once their bytes are in the sink. A
 * step's extent is dropped up to its last page boundary and goes on from there, so the page the
 * reads are in the middle of is dropped with the next step, not left behind.
 */
static void drop_read(struct exec *e, uint64_t min)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	for (size_t i = e->n_read; i-- > 0;) {
		struct extent *x = &e->read[i];
		uint64_t cut = (x->off + x->len) / page * page;

		if (x->len < min || !x->len)
			continue;
		if (!min || cut <= x->off) {
			drop_extent(e, i);
			continue;
		}
		wd_source_drop_cache(x->src, x->file, x->off, cut - x->off);
		x->len = x->off + x->len - cut;
		x->off = cut;
	}
}

static void note_read(struct exec *e, const struct wd_source *src, uint32_t file, uint64_t off,
		      uint64_t len)
{
	for (size_t i = 0; i < e->n_read; i++) {
		struct extent *x = &e->read[i];

		if (x->src == src && x->file == file && off == x->off + x->len) {
			x->len += len;
			return;
		}
	}
	if (e->n_read == DROP_EXTENTS)
		drop_extent(e, 0);
	e->read[e->n_read++] = (struct extent){ .src = src, .file = file, .off = off, .len = len };
}

static int flush(struct exec *e)
{
	const struct xnode *x = e->pend_leaf;
	int r;

	if (!e->pend_len)
		return 0;
	r = wd_source_pread(x->src, x->file, e->pend_dst, e->pend_len, e->pend_off, e->err);
	if (r < 0) {
		wd_error_about(e->err, wd_source_name(x->src), x->tensor);
		return r;
	}
	e->bytes_read += e->pend_len;
	note_read(e, x->src, x->file, e->pend_off, e->pend_len);
	e->pend_len = 0;
	return 0;
}

static int pend(struct exec *e, const struct xnode *x, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *q = e->pend_leaf;
	int r;

	if (e->pend_len && q->src == x->src && q->file == x->file &&
	    off == e->pend_off + e->pend_len && dst == e->pend_dst + e->pend_len) {
		e->pend_len += len;
		return 0;
	}
	r = flush(e);
	if (r < 0)
		return r;
	e->pend_leaf = x;
	e->pend_off = off;
	e->pend_len = len;
	e->pend_dst = dst;
	return 0;
}

static int read_node(struct exec *e, uint32_t i, uint64_t off, size_t len, uint8_t *dst);
static int need_temp(struct exec *e, uint32_t i);

/* The execution state of node i (a cast or a temporary), made zeroed on first use; NULL (err
 * set) when out of memory. */
static struct xstate *state(struct exec *e, uint32_t i)
{
	uint32_t k = e->p->x[i].slot;

	if (k == UINT32_MAX) {
		wd_error_set(e->err, WEIGHTD_E_INTERNAL, "a plan node without execution state");
		return NULL;
	}
	if (!e->st[k]) {
		e->st[k] = calloc(1, sizeof(**e->st));
		if (!e->st[k]) {
			wd_error_set(e->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory for the plan's state");
			return NULL;
		}
		e->owned[e->n_owned++] = k;
	}
	return e->st[k];
}

/* Convert nunits input units (elements, or blocks of a block type) from `in` to `out`. */
static int convert_units(struct exec *e, enum wd_dtype from, const void *in, enum wd_dtype to,
			 void *out, size_t nunits, float *mid)
{
	size_t be = block_elems(from);
	float *f;

	if (be == 1) {
		wd_convert(from, in, to, out, nunits);
		return 0;
	}
	f = to == WD_F32 ? out : mid;
	if (wd_dequant_f32(from, in, nunits, f) < 0)
		return wd_error_set(e->err, WEIGHTD_E_UNSUPPORTED_CAST, "cannot decode %s blocks",
				    wd_dtype_name(from));
	if (to != WD_F32)
		wd_convert(WD_F32, f, to, out, nunits * be);
	return 0;
}

/* Input units [u0, u0 + k) of cast or dequantization x, already in `in`, converted into out. */
static int convert_at(struct exec *e, const struct xnode *x, uint64_t u0, const void *in, void *out,
		      size_t k, float *mid)
{
	const struct xnode *y = &e->p->x[x->in[0]];

	if (x->op == X_DEQUANT) {
		int r = need_temp(e, x->in[1]);

		if (r < 0)
			return r;
		wd_recipe_dequant_run(x, y->dtype, &e->p->x[x->in[1]],
				      (const float *)state(e, x->in[1])->temp, u0, k, in, mid, out);
		return 0;
	}
	return convert_units(e, y->dtype, in, x->dtype, out, k, mid);
}

/*
 * A cast's window and input buffer, allocated when it is first read and freed once its last byte
 * has been read, so a plan with hundreds of casts read one after another (a stack of dequantized
 * experts) holds few at a time.
 */
static int win_alloc(struct exec *e, uint32_t i)
{
	const struct xnode *x = &e->p->x[i], *y = &e->p->x[x->in[0]];
	struct xstate *s = state(e, i);
	uint64_t ib, ob, mb, per;

	if (!s)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (s->inbuf)
		return 0;
	ib = unit_bytes(y->dtype);
	ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
	if (x->op == X_DEQUANT)
		mb = 4;
	else
		mb = block_elems(y->dtype) > 1 && x->dtype != WD_F32 ? block_elems(y->dtype) * 4 : 0;
	per = ib > ob ? ib : ob;
	if (mb > per)
		per = mb;
	s->units = e->win_bytes / per ? e->win_bytes / per : 1;
	s->inbuf_len = s->units * ib;
	s->wbuf_len = s->units * ob;
	s->mid_len = mb ? s->units * mb : 0;
	s->inbuf = buf_alloc(s->inbuf_len);
	s->win = buf_alloc(s->wbuf_len);
	if (mb)
		s->mid = buf_alloc(s->mid_len);
	if (!s->inbuf || !s->win || (mb && !s->mid))
		return wd_error_set(e->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory for a cast's buffers");
	return 0;
}

static void win_free(struct xstate *s)
{
	buf_free(s->inbuf, s->inbuf_len);
	buf_free(s->win, s->wbuf_len);
	buf_free(s->mid, s->mid_len);
	s->inbuf = s->win = NULL;
	s->mid = NULL;
	s->win_len = 0;
}

/* Input units [u0, u0 + k) of cast i, read and converted into out. */
static int cast_units(struct exec *e, uint32_t i, uint64_t u0, size_t k, uint8_t *out)
{
	const struct xnode *x = &e->p->x[i], *y = &e->p->x[x->in[0]];
	struct xstate *s = e->st[x->slot];   /* made by win_alloc */
	uint64_t ib = unit_bytes(y->dtype);
	int r;

	r = read_node(e, x->in[0], u0 * ib, k * ib, s->inbuf);
	if (r == 0)
		r = flush(e);
	if (r == 0)
		r = convert_at(e, x, u0, s->inbuf, out, k, s->mid);
	return r;
}

/*
 * A cast's output, read in order: whole input units go straight into dst; a range that starts or
 * ends inside a unit goes through the window, which keeps the converted unit for the next read,
 * so every input byte is read exactly once.
 */
static int read_cast(struct exec *e, uint32_t i, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *x = &e->p->x[i], *y = &e->p->x[x->in[0]];
	struct xstate *s;
	uint64_t ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
	uint64_t total_units = x->nbytes / ob, end = off + len;
	int r;

	r = win_alloc(e, i);
	if (r < 0)
		return r;
	s = e->st[x->slot];
	while (len) {
		uint64_t u0 = off / ob;
		size_t k;

		if (s->win_len && off >= s->win_off && off < s->win_off + s->win_len) {
			size_t take = (size_t)min_u64(len, s->win_off + s->win_len - off);
			memcpy(dst, s->win + (off - s->win_off), take);
			off += take;
			dst += take;
			len -= take;
			continue;
		}
		if (off % ob == 0 && len >= ob &&
		    (block_elems(y->dtype) == 1 || x->dtype != WD_F32 || ((uintptr_t)dst & 3) == 0)) {
			k = (size_t)min_u64(len / ob, s->units);
			r = cast_units(e, i, u0, k, dst);
			if (r < 0)
				return r;
			off += k * ob;
			dst += k * ob;
			len -= k * ob;
			continue;
		}
		k = (size_t)min_u64(s->units, u0 < total_units ? total_units - u0 : 0);
		if (k == 0)
			return wd_error_set(e->err, WEIGHTD_E_INTERNAL, "read past the end of a cast");
		r = cast_units(e, i, u0, k, s->win);
		if (r < 0)
			return r;
		s->win_off = u0 * ob;
		s->win_len = k * ob;
	}
	if (end == x->nbytes)
		win_free(s);
	return 0;
}

/* One piece of a selection or a join: `take` bytes of input `in` from `from` into *dst, then
 * *off, *dst and *len moved past it. 0, or read_node's error. */
static int read_piece(struct exec *e, uint32_t in, uint64_t from, size_t take, uint64_t *off,
		      uint8_t **dst, size_t *len)
{
	int r = read_node(e, in, from, take, *dst);

	if (r < 0)
		return r;
	*off += take;
	*dst += take;
	*len -= take;
	return 0;
}

static int read_select(struct exec *e, const struct xnode *x, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *y = &e->p->x[x->in[0]];
	uint64_t us[WD_MAX_DIMS], inner, row_in, row_out, base;
	uint32_t be = block_elems(y->dtype);
	int k = (int)x->axis, r;

	if (x->kind == WD_SEL_ELEMENTS)
		return read_node(e, x->in[0], x->start / be * unit_bytes(y->dtype) + off, len, dst);
	unit_shape(y, us);
	inner = inner_bytes(y, k);
	row_in = us[k] * inner;
	if (x->kind == WD_SEL_RANGE) {
		uint64_t step = k == y->ndim - 1 ? be : 1;
		base = x->start / step * inner;
		row_out = (x->end - x->start) / step * inner;
	} else {
		base = 0;
		row_out = x->n_idx * inner;
	}
	while (len) {
		uint64_t o = off / row_out, rem = off % row_out, from;
		size_t take;

		if (x->kind == WD_SEL_RANGE) {
			/* a range: what is selected of each outer row lies in one piece */
			take = (size_t)min_u64(len, row_out - rem);
			from = base + rem;
		} else {
			/* indices: each is a piece of its own, `inner` bytes long */
			take = (size_t)min_u64(len, inner - rem % inner);
			from = x->idx[rem / inner] * inner + rem % inner;
		}
		r = read_piece(e, x->in[0], o * row_in + from, take, &off, &dst, &len);
		if (r < 0)
			return r;
	}
	return 0;
}

static int read_join(struct exec *e, const struct xnode *x, uint64_t off, size_t len, uint8_t *dst)
{
	int r;

	while (len) {
		uint64_t o = off / x->row, rem = off % x->row;
		size_t lo = 0, hi = x->n_in - 1, take;

		while (lo < hi) {            /* last input whose prefix <= rem */
			size_t mid = (lo + hi + 1) / 2;
			if (x->prefix[mid] <= rem)
				lo = mid;
			else
				hi = mid - 1;
		}
		rem -= x->prefix[lo];
		take = (size_t)min_u64(len, x->piece[lo] - rem);
		r = read_piece(e, x->in[lo], o * x->piece[lo] + rem, take, &off, &dst, &len);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A transpose's geometry in storage units: output shape, and the input stride of each output axis. */
struct tgeo {
	int nd;
	uint64_t ub;
	uint64_t ous[WD_MAX_DIMS];
	uint64_t step[WD_MAX_DIMS];
};

static void tgeo_init(const struct xnode *x, const struct xnode *y, struct tgeo *g)
{
	uint64_t ius[WD_MAX_DIMS], istride[WD_MAX_DIMS];

	g->nd = x->ndim;
	g->ub = unit_bytes(x->dtype);
	unit_shape(y, ius);
	unit_shape(x, g->ous);
	istride[g->nd - 1] = 1;
	for (int d = g->nd - 1; d > 0; d--)
		istride[d - 1] = istride[d] * ius[d];
	for (int d = 0; d < g->nd; d++)
		g->step[d] = istride[x->perm[d]];
}

/* Input unit of output unit u. */
static uint64_t tgeo_src(const struct tgeo *g, uint64_t u, uint64_t *idx)
{
	uint64_t sofs = 0;

	for (int d = g->nd - 1; d >= 0; d--) {
		idx[d] = u % g->ous[d];
		u /= g->ous[d];
		sofs += idx[d] * g->step[d];
	}
	return sofs;
}

/* Output bytes [off, off + len) unit by unit in output order, with an odometer over the index. */
static void transpose_span(const struct tgeo *g, const uint8_t *src, uint64_t off, size_t len,
			   uint8_t *dst)
{
	uint64_t idx[WD_MAX_DIMS], ub = g->ub, u = off / ub, end = off + len;
	uint64_t sofs = tgeo_src(g, u, idx);
	int nd = g->nd;

	while (off < end) {
		uint64_t ustart = u * ub, a = off - ustart, bnd = min_u64(ub, end - ustart);
		const uint8_t *s = src + sofs * ub;

		memcpy(dst, s + a, bnd - a);
		dst += bnd - a;
		off = ustart + bnd;
		u++;
		for (int d = nd - 1; d >= 0; d--) {
			idx[d]++;
			sofs += g->step[d];
			if (idx[d] < g->ous[d] || d == 0)
				break;
			sofs -= idx[d] * g->step[d];
			idx[d] = 0;
		}
	}
}

/* n units from s (stride sstride units) to consecutive units at d; constant sizes inline. */
static inline void gather_units(uint8_t *d, const uint8_t *s, uint64_t n, uint64_t sstride,
				uint64_t ub)
{
	uint64_t sb = sstride * ub;

	switch (ub) {
	case 1:
		for (uint64_t c = 0; c < n; c++)
			d[c] = s[c * sb];
		break;
	case 2:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + 2 * c, s + c * sb, 2);
		break;
	case 4:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + 4 * c, s + c * sb, 4);
		break;
	case 8:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + 8 * c, s + c * sb, 8);
		break;
	default:
		for (uint64_t c = 0; c < n; c++)
			memcpy(d + ub * c, s + c * sb, ub);
		break;
	}
}

#define TILE 64

/*
 * A transpose's output, computed from its input's temporary. Output order walks the input with a
 * large stride, one cache line per unit; when the input's innermost axis becomes the output's
 * second-to-last axis (every 2-d transpose, a batched swap of the last two axes), whole output
 * rows are instead filled in tiles of TILE rows x TILE columns, whose input lines stay in cache.
 */
static int read_transpose(struct exec *e, const struct xnode *x, uint64_t off, size_t len,
			  uint8_t *dst)
{
	const uint8_t *src;
	uint64_t end = off + len, idx[WD_MAX_DIMS], row_units, rb, head;
	struct tgeo g;
	int r = need_temp(e, x->in[0]);

	if (r < 0)
		return r;
	src = e->st[e->p->x[x->in[0]].slot]->temp;

	tgeo_init(x, &e->p->x[x->in[0]], &g);
	if (g.nd < 2 || g.step[g.nd - 2] != 1 || g.step[g.nd - 1] == 1) {
		transpose_span(&g, src, off, len, dst);
		return 0;
	}
	row_units = g.ous[g.nd - 1];
	rb = row_units * g.ub;
	head = min_u64((off + rb - 1) / rb * rb, end) - off;      /* up to the first row start */
	transpose_span(&g, src, off, (size_t)head, dst);
	off += head;
	dst += head;
	while (end - off >= rb) {
		uint64_t row = off / rb, i2 = row % g.ous[g.nd - 2];
		uint64_t t_n = min_u64(min_u64((end - off) / rb, g.ous[g.nd - 2] - i2), TILE);
		uint64_t base = tgeo_src(&g, row * row_units, idx);

		for (uint64_t c0 = 0; c0 < row_units; c0 += TILE) {
			uint64_t cw = min_u64(TILE, row_units - c0);
			for (uint64_t t = 0; t < t_n; t++)
				gather_units(dst + t * rb + c0 * g.ub,
					     src + (base + t + c0 * g.step[g.nd - 1]) * g.ub, cw,
					     g.step[g.nd - 1], g.ub);
		}
		off += t_n * rb;
		dst += t_n * rb;
	}
	transpose_span(&g, src, off, (size_t)(end - off), dst);
	return 0;
}

static int read_node(struct exec *e, uint32_t i, uint64_t off, size_t len, uint8_t *dst)
{
	const struct xnode *x = &e->p->x[i];

	if (!len)
		return 0;
	if (x->temp) {
		struct xstate *s = state(e, i);
		int r;

		if (!s)
			return -WEIGHTD_E_RESOURCE_EXHAUSTED;
		if (!s->busy) {
			r = need_temp(e, i);
			if (r < 0)
				return r;
			memcpy(dst, s->temp + off, len);
			return 0;
		}
	}
	switch (x->op) {
	case X_LEAF:
		return pend(e, x, x->offset + off, len, dst);
	case X_SELECT:
		return read_select(e, x, off, len, dst);
	case X_CONCAT:
	case X_STACK:
		return read_join(e, x, off, len, dst);
	case X_VIEW:
		return read_node(e, x->in[0], off, len, dst);
	case X_TRANSPOSE:
		return read_transpose(e, x, off, len, dst);
	case X_CAST:
	case X_DEQUANT:
		return read_cast(e, i, off, len, dst);
	}
	return wd_error_set(e->err, WEIGHTD_E_INTERNAL, "unknown plan operation");
}

/*
 * Working memory for a whole intermediate value. From 128 KiB on (BUF_MAP_MIN: given back when
 * freed) mapped with MAP_POPULATE (and transparent huge pages asked for): faulting fresh pages
 * in one at a time costs more than the copy that fills them. Freed with buf_free.
 */
static void *temp_alloc(size_t n)
{
	void *p;

	if (n < BUF_MAP_MIN)
		return malloc(n);
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, n, MADV_HUGEPAGE);
	return p;
}

static void exec_free(struct exec *e)
{
	for (size_t k = 0; e->st && k < e->n_owned; k++) {
		struct xstate *s = e->st[e->owned[k]];

		buf_free(s->temp, s->temp_len);
		win_free(s);
		free(s);
	}
	free(e->st);
	free(e->owned);
	e->st = NULL;
	e->owned = NULL;
}

/* Per-node state; each cast's window budget (the windows themselves come when first read). */
static int exec_alloc(struct exec *e)
{
	const struct wd_plan *p = e->p;

	e->st = calloc(p->n_slots + 1, sizeof(*e->st));
	e->owned = malloc((p->n_slots + 1) * sizeof(*e->owned));
	if (!e->st || !e->owned)
		return wd_error_set(e->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "out of memory for the plan's state");
	e->win_bytes = p->n_casts ? CAST_WINDOWS_TOTAL / p->n_casts : CAST_WINDOW;
	if (e->win_bytes > CAST_WINDOW)
		e->win_bytes = CAST_WINDOW;
	if (e->win_bytes < CAST_WINDOW_MIN)
		e->win_bytes = CAST_WINDOW_MIN;
	return 0;
}

static int check_files(struct exec *e)
{
	for (size_t i = 0; i < e->p->n_files; i++) {
		int r = wd_source_check(e->p->files[i].src, e->p->files[i].file, e->err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Whether the scratch buffers hold at least one input unit of the root cast and its output. */
static bool root_cast_fits(const struct wd_plan *p, const struct wd_scratch *sc)
{
	const struct xnode *x = &p->x[p->root], *y;

	if ((x->op != X_CAST && x->op != X_DEQUANT) || !sc->buf2)
		return false;
	y = &p->x[x->in[0]];
	return sc->cap >= unit_bytes(y->dtype) &&
	       sc->cap2 >= (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
}

/*
 * Temporary i evaluated whole, when first needed: a range of the output evaluates only the
 * temporaries it reads (the scales of the experts it covers, not all of them). Its own inputs
 * that are temporaries come in the same way, recursively (the graph is acyclic; busy marks the
 * one being filled, whose reads then go to its operation).
 */
static int need_temp(struct exec *e, uint32_t i)
{
	const struct xnode *x = &e->p->x[i];
	struct xstate *s = state(e, i);
	int r;

	if (!s)
		return -WEIGHTD_E_RESOURCE_EXHAUSTED;
	if (s->ready)
		return 0;
	s->temp = temp_alloc(x->nbytes);
	s->temp_len = x->nbytes;
	if (!s->temp)
		return wd_error_set(e->err, WEIGHTD_E_RESOURCE_EXHAUSTED, "no memory for %" PRIu64
				    " bytes of working space", x->nbytes);
	s->busy = true;
	r = read_node(e, i, 0, x->nbytes, s->temp);
	if (r == 0)
		r = flush(e);
	s->busy = false;
	s->ready = r == 0;
	return r;
}

/*
 * The root cast, output bytes [start, end) (both on unit boundaries): input chunks in
 * scratch->buf, converted straight into the sink's next slot when it pipelines its hashing (else
 * into scratch->buf2), written.
 */
static int run_root_cast(struct exec *e, struct wd_sink *sink, struct wd_scratch *sc,
			 uint64_t start, uint64_t end)
{
	const struct xnode *x = &e->p->x[e->p->root], *y = &e->p->x[x->in[0]];
	const struct xstate *s;
	uint64_t ib = unit_bytes(y->dtype), ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);
	uint64_t total = end / ob, k = min_u64(sc->cap / ib, sc->cap2 / ob);
	int r;

	r = win_alloc(e, e->p->root);     /* for its F32 buffer */
	if (r < 0)
		return r;
	s = e->st[x->slot];
	if (s->mid)
		k = min_u64(k, s->units);
	for (uint64_t u = start / ob; u < total;) {
		size_t cap = 0, n;
		uint8_t *out = wd_sink_buffer(sink, &cap);
		uint64_t kk = k;

		if (out && cap >= ob)
			kk = min_u64(k, cap / ob);
		else
			out = sc->buf2;
		n = (size_t)min_u64(kk, total - u);
		r = read_node(e, x->in[0], u * ib, n * ib, sc->buf);
		if (r == 0)
			r = flush(e);
		if (r == 0)
			r = convert_at(e, x, u, sc->buf, out, n, s->mid);
		if (r == 0)
			r = wd_sink_write(sink, out, n * ob, e->err);
		if (r < 0)
			return r;
		drop_read(e, DROP_STEP);
		u += n;
	}
	return 0;
}

/* Any other root, bytes [start, end): produced chunk by chunk into the sink's next slot (or
 * scratch->buf), written. */
static int run_root(struct exec *e, struct wd_sink *sink, struct wd_scratch *sc, uint64_t start,
		    uint64_t end)
{
	int r = 0;

	for (uint64_t off = start; off < end && r == 0;) {
		size_t cap = 0, n;
		uint8_t *out = wd_sink_buffer(sink, &cap);

		if (!out) {
			out = sc->buf;
			cap = sc->cap;
		}
		n = (size_t)min_u64(cap, end - off);
		r = read_node(e, e->p->root, off, n, out);
		if (r == 0)
			r = flush(e);
		if (r == 0)
			r = wd_sink_write(sink, out, n, e->err);
		if (r == 0)
			drop_read(e, DROP_STEP);
		off += n;
	}
	return r;
}

/* Whether the root cast can run whole units over [start, end): both ends on unit boundaries. */
static bool root_cast_aligned(const struct wd_plan *p, uint64_t start, uint64_t end)
{
	const struct xnode *x = &p->x[p->root], *y = &p->x[x->in[0]];
	uint64_t ob = (uint64_t)block_elems(y->dtype) * wd_dtype_size(x->dtype);

	return start % ob == 0 && end % ob == 0;
}

int wd_plan_execute(const struct wd_plan *p, struct wd_sink *sink, struct wd_scratch *scratch,
		    uint64_t *ret_bytes_read, weightd_error *err)
{
	return wd_plan_execute_range(p, 0, p->nbytes, sink, scratch, ret_bytes_read, err);
}

int wd_plan_execute_range(const struct wd_plan *p, uint64_t start, uint64_t len,
			  struct wd_sink *sink, struct wd_scratch *scratch, uint64_t *ret_bytes_read,
			  weightd_error *err)
{
	struct exec e = { .p = p, .err = err };
	int r;

	if (!scratch || !scratch->buf || !scratch->cap)
		return wd_error_set(err, WEIGHTD_E_INTERNAL, "materialization needs a scratch buffer");
	if (start > p->nbytes || len > p->nbytes - start)
		return wd_error_set(err, WEIGHTD_E_INTERNAL,
				    "bytes %" PRIu64 "+%" PRIu64 " are outside the %" PRIu64
				    "-byte weight", start, len, p->nbytes);
	if (sink->size - sink->written != len)
		return wd_error_set(err, WEIGHTD_E_INTERNAL,
				    "the sink takes %" PRIu64 " bytes but the range is %" PRIu64,
				    sink->size - sink->written, len);
	r = check_files(&e);
	if (r < 0)
		goto out;
	r = exec_alloc(&e);
	if (r < 0)
		goto out;
	if (root_cast_fits(p, scratch) && root_cast_aligned(p, start, start + len))
		r = run_root_cast(&e, sink, scratch, start, start + len);
	else
		r = run_root(&e, sink, scratch, start, start + len);
	if (r < 0)
		goto out;
	r = check_files(&e);
	if (r == 0)
		drop_read(&e, 0);
out:
	if (r < 0 && err)
		wd_error_prefix(err, "materializing %s", p->label);
	exec_free(&e);
	if (ret_bytes_read)
		*ret_bytes_read += e.bytes_read;
	return r;
}

bool wd_plan_splittable(const struct wd_plan *p)
{
	for (size_t i = 0; i < p->root; i++) {
		const struct xnode *x = &p->x[i];

		if (x->reach && x->temp && !x->scale_temp)
			return false;
	}
	return true;
}
