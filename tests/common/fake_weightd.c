/* SPDX-License-Identifier: Apache-2.0 */
/* fake_weightd.c - the scripted stand-in for weightd (see fake_weightd.h): its server thread,
 * the replies tests send through it, and the counts of what a client holds of it. */
#include "fake_weightd.h"

static void fake_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fake_fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("fake weightd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

int fake_memfd(const void *data, size_t n)
{
	char p[64];
	int fd = memfd_create("wdtest", MFD_CLOEXEC), ro;

	if (fd < 0)
		fake_fatal("memfd_create: %s", strerror(errno));
	if (n && write(fd, data, n) != (ssize_t)n)
		fake_fatal("write memfd: %s", strerror(errno));
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	ro = open(p, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		fake_fatal("reopen memfd: %s", strerror(errno));
	close(fd);
	return ro;
}

void fake_reply_fds(struct fake *f, Weightd__Response *resp, const int *fds, size_t nfds)
{
	size_t len = weightd__response__get_packed_size(resp);
	uint8_t *buf = malloc(len ? len : 1);

	if (!buf)
		fake_fatal("out of memory");
	weightd__response__pack(resp, buf);
	if (f->conn >= 0 && wd_frame_send_blocking(f->conn, buf, len, fds, nfds) < 0)
		fprintf(stderr, "fake weightd: send failed (client gone?)\n");
	free(buf);
}

void fake_reply(struct fake *f, Weightd__Response *resp)
{
	fake_reply_fds(f, resp, NULL, 0);
}

void fake_reply_unit(struct fake *f, const Weightd__Request *req, Weightd__UnitReply *ur,
		     const int *fds, size_t nfds)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;

	resp.id = req->id;
	if (req->body_case == WEIGHTD__REQUEST__BODY_PREFLIGHT) { /* one union: one member */
		resp.body_case = WEIGHTD__RESPONSE__BODY_PREFLIGHT;
		resp.preflight = ur;
	} else {
		resp.body_case = WEIGHTD__RESPONSE__BODY_MATERIALIZE;
		resp.materialize = ur;
	}
	fake_reply_fds(f, &resp, fds, nfds);
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
}

void fake_reply_error(struct fake *f, uint64_t id, int code, const char *slot, uint32_t node,
		      const char *msg)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Error e = WEIGHTD__ERROR__INIT;

	e.code = (Weightd__ErrorCode)code;
	e.message = (char *)msg;
	e.checkpoint = (char *)"ck";
	e.tensor = (char *)"tn";
	e.slot = (char *)(slot ? slot : "");
	e.node = node;
	e.axis = 1;
	e.expected = 7;
	e.actual = 9;
	resp.id = id;
	resp.error = &e;
	fake_reply(f, &resp);
}

void fake_reply_empty(struct fake *f, const Weightd__Request *req)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__Empty e = WEIGHTD__EMPTY__INIT;
	Weightd__ListReply lr = WEIGHTD__LIST_REPLY__INIT;

	resp.id = req->id;
	switch (req->body_case) {
	case WEIGHTD__REQUEST__BODY_LIST:
		resp.body_case = WEIGHTD__RESPONSE__BODY_LIST;
		resp.list = &lr;
		break;
	case WEIGHTD__REQUEST__BODY_RELEASE:
		resp.body_case = WEIGHTD__RESPONSE__BODY_RELEASE;
		resp.release = &e;
		break;
	case WEIGHTD__REQUEST__BODY_SUBSCRIBE:
		resp.body_case = WEIGHTD__RESPONSE__BODY_SUBSCRIBE;
		resp.subscribe = &e;
		break;
	default:
		fake_reply_error(f, req->id, WEIGHTD__ERROR_CODE__ERR_UNSUPPORTED, NULL, 0,
				 "not faked");
		return;
	}
	fake_reply(f, &resp);
}

void fake_disconnect(struct fake *f)
{
	if (f->conn >= 0) {
		close(f->conn);
		f->conn = -1;
	}
}

static void fake_hello(struct fake *f, const Weightd__Request *req)
{
	Weightd__Response resp = WEIGHTD__RESPONSE__INIT;
	Weightd__HelloReply hr = WEIGHTD__HELLO_REPLY__INIT;

	hr.protocol_version = atomic_load(&f->hello_version);
	hr.min_protocol_version = 1;
	hr.max_protocol_version = hr.protocol_version;
	hr.server_version = (char *)"fake-1";
	hr.instance = (char *)"fakeinst";
	hr.max_frame_bytes = 1u << 20;
	hr.max_pending_requests = atomic_load(&f->max_pending);
	hr.max_unit_entries = 4096;
	hr.max_recipe_nodes = 256;
	hr.max_client_bytes = 123456789;
	hr.max_client_weights = 77;
	resp.id = req->id;
	resp.body_case = WEIGHTD__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	fake_reply(f, &resp);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;

	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = f->conn >= 0 ? f->conn : f->lsock, .events = POLLIN };
		int r = poll(&p, 1, 20);

		if (r <= 0)
			continue;
		if (f->conn < 0) {
			f->conn = accept4(f->lsock, NULL, NULL, SOCK_CLOEXEC);
			wd_inbuf_free(f->in); /* a fresh stream for each connection */
			f->in = wd_inbuf_new(1u << 20, 0);
			if (!f->in)
				fake_fatal("out of memory");
			continue;
		}
		r = wd_inbuf_read(f->in, f->conn);
		if (r == WD_FRAME_AGAIN)
			continue;
		if (r <= 0) {
			fake_disconnect(f);
			continue;
		}
		for (;;) {
			struct wd_frame fr;
			Weightd__Request *req;

			r = wd_inbuf_next(f->in, &fr);
			if (r <= 0)
				break;
			req = weightd__request__unpack(NULL, fr.len, fr.payload);
			wd_frame_close_fds(&fr);
			if (!req)
				fake_fatal("a request does not decode");
			pthread_mutex_lock(&f->mu);
			if (f->n_reqs == FAKE_MAX_REQS)
				fake_fatal("too many requests");
			f->reqs[f->n_reqs++] = req;
			pthread_mutex_unlock(&f->mu);
			if (req->body_case == WEIGHTD__REQUEST__BODY_HELLO &&
			    !atomic_load(&f->hello_too))
				fake_hello(f, req);
			else if (f->handler)
				f->handler(f, req);
			atomic_fetch_add(&f->handled, 1);
			if (f->conn < 0)
				break;
		}
	}
	return NULL;
}

struct fake *fake_start(fake_handler h, void *ctx)
{
	struct fake *f = calloc(1, sizeof(*f));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!f)
		fake_fatal("out of memory");
	snprintf(f->dir, sizeof(f->dir), "/tmp/wdfake.XXXXXX");
	if (!mkdtemp(f->dir))
		fake_fatal("mkdtemp: %s", strerror(errno));
	snprintf(f->path, sizeof(f->path), "%s/s.sock", f->dir);
	f->handler = h;
	f->ctx = ctx;
	f->conn = -1;
	atomic_init(&f->hello_version, FAKE_VERSION);
	atomic_init(&f->max_pending, 64);
	pthread_mutex_init(&f->mu, NULL);
	f->in = wd_inbuf_new(1u << 20, 0);
	f->lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
	if (!f->in || f->lsock < 0 || bind(f->lsock, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(f->lsock, 4) < 0)
		fake_fatal("listen on %s: %s", f->path, strerror(errno));
	if (pthread_create(&f->thread, NULL, fake_main, f) != 0)
		fake_fatal("pthread_create");
	return f;
}

void fake_stop(struct fake *f)
{
	if (!f)
		return;
	atomic_store(&f->stop, true);
	pthread_join(f->thread, NULL);
	fake_disconnect(f);
	close(f->lsock);
	wd_inbuf_free(f->in);
	for (size_t i = 0; i < f->n_reqs; i++)
		weightd__request__free_unpacked(f->reqs[i], NULL);
	unlink(f->path);
	rmdir(f->dir);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

size_t fake_count(struct fake *f, int body_case)
{
	size_t n = 0;

	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->n_reqs; i++)
		n += (int)f->reqs[i]->body_case == body_case;
	pthread_mutex_unlock(&f->mu);
	return n;
}

const Weightd__Request *fake_nth(struct fake *f, int body_case, size_t i)
{
	const Weightd__Request *r = NULL;

	pthread_mutex_lock(&f->mu);
	for (size_t k = 0; k < f->n_reqs && !r; k++)
		if ((int)f->reqs[k]->body_case == body_case && i-- == 0)
			r = f->reqs[k];
	pthread_mutex_unlock(&f->mu);
	return r;
}

void fake_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

size_t fake_wait_count(struct fake *f, int body_case, size_t n)
{
	for (int i = 0; i < 500 && fake_count(f, body_case) < n; i++)
		fake_sleep_ms(10);
	return fake_count(f, body_case);
}

void fake_settle(struct fake *f)
{
	for (int i = 0; i < 500; i++) {
		size_t n;

		pthread_mutex_lock(&f->mu);
		n = f->n_reqs;
		pthread_mutex_unlock(&f->mu);
		if (atomic_load(&f->handled) == n)
			return;
		fake_sleep_ms(10);
	}
}

size_t fake_released(struct fake *f, uint64_t *out, size_t cap)
{
	size_t n = 0;

	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->n_reqs; i++)
		if (f->reqs[i]->body_case == WEIGHTD__REQUEST__BODY_RELEASE)
			for (size_t k = 0; k < f->reqs[i]->release->n_handles; k++)
				if (n < cap)
					out[n++] = f->reqs[i]->release->handles[k];
	pthread_mutex_unlock(&f->mu);
	return n;
}

void fake_wi_fill(struct fake_wi *w, const char *name, uint64_t handle, const char *dtype,
		  const uint64_t *shape, size_t ndim, const void *data, size_t n, uint32_t fd_index,
		  const char *alias_of)
{
	weightd__weight_info__init(&w->wi);
	if (ndim)
		memcpy(w->shape, shape, ndim * sizeof(uint64_t));
	wd_sha256(data, n, w->digest);
	memset(w->key, (int)handle, sizeof(w->key));
	w->wi.name = (char *)name;
	w->wi.handle = handle;
	w->wi.dtype = (char *)dtype;
	w->wi.n_shape = ndim;
	w->wi.shape = w->shape;
	w->wi.nbytes = n;
	w->wi.digest.len = 32;
	w->wi.digest.data = w->digest;
	w->wi.key.len = 32;
	w->wi.key.data = w->key;
	w->wi.generation = 3;
	if (alias_of)
		w->wi.alias_of = (char *)alias_of;
}

void fake_packed_init(struct fake_packed *p)
{
	memset(p, 0, sizeof(*p));
	weightd__packed_weights__init(&p->pw);
	p->pw.handle = p->handle;
	p->pw.segment = p->segment;
	p->pw.offset = p->offset;
	p->pw.nbytes = p->nbytes;
	p->pw.generation = p->generation;
	p->pw.dtypes = p->dtypes;
	p->pw.dtype = p->dtype;
	p->pw.ndim = p->ndim;
	p->pw.dims = p->dims;
	p->pw.digest_algorithm.data = p->alg;
	p->pw.digests.data = p->digests;
	p->pw.keys.data = p->keys;
	p->pw.alias_owner = p->alias_owner;
}

void fake_packed_add(struct fake_packed *p, uint64_t handle, const char *dtype,
		     const uint64_t *shape, size_t ndim, const void *data, size_t n, uint32_t seg,
		     uint64_t offset)
{
	Weightd__PackedWeights *pw = &p->pw;
	size_t k = pw->n_handle, t;

	if (k == FAKE_PACKED_MAX || ndim > 8)
		fake_fatal("fake_packed_add: too many entries or dimensions");
	for (t = 0; t < pw->n_dtypes && strcmp(p->dtypes[t], dtype) != 0; t++)
		;
	if (t == pw->n_dtypes)
		p->dtypes[pw->n_dtypes++] = (char *)dtype;
	p->handle[k] = handle;
	p->segment[k] = seg;
	p->offset[k] = offset;
	p->nbytes[k] = n;
	p->generation[k] = 3;
	p->dtype[k] = (uint32_t)t;
	p->ndim[k] = (uint32_t)ndim;
	if (ndim)
		memcpy(p->dims + pw->n_dims, shape, ndim * sizeof(uint64_t));
	pw->n_dims += ndim;
	p->alg[k] = WEIGHTD__DIGEST_ALGORITHM__DIGEST_SHA256;
	wd_sha256(data, n, p->digests + k * 32);
	memset(p->keys + k * 32, (int)handle, 32);
	pw->n_handle = pw->n_segment = pw->n_offset = pw->n_nbytes = pw->n_generation = k + 1;
	pw->n_dtype = pw->n_ndim = k + 1;
	pw->digest_algorithm.len = k + 1;
	pw->digests.len = pw->keys.len = (k + 1) * 32;
}

void fake_packed_alias(struct fake_packed *p, uint32_t owner)
{
	if (p->pw.n_alias_owner == FAKE_PACKED_MAX)
		fake_fatal("fake_packed_alias: too many aliases");
	p->alias_owner[p->pw.n_alias_owner++] = owner;
}

void fake_reply_packed(struct fake *f, const Weightd__Request *req, struct fake_packed *p,
		       const uint64_t *size, const int *fds, size_t nfds, uint64_t bytes_read)
{
	Weightd__UnitReply ur = WEIGHTD__UNIT_REPLY__INIT;
	Weightd__SegmentInfo si[FAKE_PACKED_MAX + 1], *sp[FAKE_PACKED_MAX + 1];

	if (nfds > FAKE_PACKED_MAX + 1)
		fake_fatal("fake_reply_packed: too many segments");
	for (size_t i = 0; i < nfds; i++) {
		weightd__segment_info__init(&si[i]);
		si[i].size = size[i];
		si[i].fd_index = (uint32_t)i;
		sp[i] = &si[i];
	}
	ur.n_segments = nfds;
	ur.segments = sp;
	ur.packed = &p->pw;
	ur.bytes_read = bytes_read;
	fake_reply_unit(f, req, &ur, fds, nfds);
}

size_t fake_unit_sources(const Weightd__Unit *u, struct fake_source *out, size_t cap)
{
	const Weightd__TensorEntries *te = u->tensors;
	size_t n = 0;

	for (size_t i = 0; i < u->n_entries && n < cap; i++, n++) {
		const Weightd__UnitEntry *e = u->entries[i];

		memset(&out[n], 0, sizeof(out[n]));
		out[n].name = e->name;
		out[n].ckpt = e->recipe->nodes[0]->checkpoint;
		out[n].tensor = e->recipe->nodes[0]->tensor;
		if (e->check_slot) {
			out[n].dtype = e->dtype;
			out[n].shape = e->shape;
			out[n].ndim = e->n_shape;
		}
	}
	if (te) {
		const char *name = (const char *)te->names.data, *end = name + te->names.len;
		const char *tn = (const char *)te->tensors.data;
		size_t dims = 0;

		for (size_t k = 0; name < end && n < cap; k++, n++) {
			memset(&out[n], 0, sizeof(out[n]));
			out[n].name = name;
			out[n].tensor = tn && *tn ? tn : name;
			out[n].ckpt = te->checkpoints[te->n_checkpoint ? te->checkpoint[k] : 0];
			if (te->n_dtype && te->dtype[k]) {
				out[n].dtype = te->dtypes[te->dtype[k] - 1];
				out[n].shape = te->dims + dims;
				out[n].ndim = te->ndim[k];
				dims += te->ndim[k];
			}
			name += strlen(name) + 1;
			if (tn)
				tn += strlen(tn) + 1;
		}
	}
	return n;
}

size_t fake_dtype_size(const char *dtype)
{
	if (!strcmp(dtype, "F32"))
		return 4;
	if (!strcmp(dtype, "BF16") || !strcmp(dtype, "F16"))
		return 2;
	return 1;
}

void fake_content(const char *name, uint8_t *out, size_t n)
{
	uint8_t h = 0;

	for (const char *p = name; *p; p++)
		h = (uint8_t)(h * 31 + (uint8_t)*p);
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(h + i * 13);
}

int fake_count_fds(int *ret_weights)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0, w = 0;

	if (!d)
		fake_fatal("opendir /proc/self/fd");
	while ((e = readdir(d))) {
		char p[300], target[256];
		ssize_t l;

		if (e->d_name[0] == '.')
			continue;
		n++;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		l = readlink(p, target, sizeof(target) - 1);
		if (l > 0) {
			target[l] = '\0';
			w += strstr(target, "memfd:wdtest") != NULL;
		}
	}
	closedir(d);
	if (ret_weights)
		*ret_weights = w;
	return n - 1; /* the directory's own fd */
}

int fake_count_maps(void)
{
	FILE *m = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!m)
		fake_fatal("fopen /proc/self/maps");
	while (fgets(line, sizeof(line), m))
		n += strstr(line, "memfd:wdtest") != NULL;
	fclose(m);
	return n;
}
