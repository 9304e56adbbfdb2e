/* SPDX-License-Identifier: Apache-2.0 */
/* client.c - _weightd.Client: one libweightd connection; queries and requests made on it. */
#include "pyweightd.h"

#include <string.h>

/* rc = call, made with the GIL released, then the client (entered by the caller) left: call
 * must not touch Python objects. */
#define PYW_UNLOCKED(cl, rc, call)     \
	do {                           \
		Py_BEGIN_ALLOW_THREADS \
		rc = (call);           \
		Py_END_ALLOW_THREADS   \
		pyw_client_leave(cl);  \
	} while (0)

int pyw_client_forked(const pyw_client *cl)
{
	return cl->pid != getpid();
}

int pyw_client_check(pyw_client *cl)
{
	if (pyw_client_forked(cl)) {
		PyErr_Format(PyExc_RuntimeError,
			     "this weightd client belongs to process %ld (this process was forked "
			     "from it): connect again here", (long)cl->pid);
		return -1;
	}
	if (!cl->c || cl->closing) {
		PyErr_SetString(PyExc_ValueError, "operation on a closed weightd client");
		return -1;
	}
	return 0;
}

int pyw_client_enter(pyw_client *cl)
{
	if (pyw_client_check(cl) < 0)
		return -1;
	cl->busy++;
	return 0;
}

/* Called with the GIL held. The last call out of a closing client closes it. */
void pyw_client_leave(pyw_client *cl)
{
	cl->busy--;
	if (cl->closing && cl->busy == 0 && cl->c) {
		weightd_client *c = cl->c;
		cl->c = NULL;
		Py_BEGIN_ALLOW_THREADS
		weightd_close(c);
		Py_END_ALLOW_THREADS
	}
}

static PyObject *shape_tuple(const uint64_t *shape, size_t ndim)
{
	PyObject *t = PyTuple_New((Py_ssize_t)ndim);

	if (!t)
		return NULL;
	for (size_t i = 0; i < ndim; i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(shape[i]);
		if (!v) {
			Py_DECREF(t);
			return NULL;
		}
		PyTuple_SET_ITEM(t, (Py_ssize_t)i, v);
	}
	return t;
}

/* A digest of len bytes (16 for XXH3-128, 32 for SHA-256), or None when the daemon sent none. */
static PyObject *opt_bytes(const uint8_t *p, size_t len)
{
	if (!p || !len)
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)len);
}

static PyObject *source_dict(const void *p)
{
	const weightd_source_info *s = p;

	return Py_BuildValue("{s:s,s:s,s:s,s:K,s:K,s:K,s:s,s:s,s:I}", "name", s->name, "kind",
			     s->kind, "path", s->path, "tensors", (unsigned long long)s->tensors,
			     "bytes", (unsigned long long)s->bytes, "generation",
			     (unsigned long long)s->generation, "state", s->state, "error",
			     s->error ? s->error : "", "files", (unsigned int)s->files);
}

/* A list of f(item) for each of the n items (each `size` bytes) at `items`. */
static PyObject *list_of(const void *items, size_t n, size_t size, PyObject *(*f)(const void *))
{
	PyObject *l = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; l && i < n; i++) {
		PyObject *d = f((const char *)items + i * size);
		if (!d) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, d);
	}
	return l;
}

static PyObject *tensor_dict(const void *p)
{
	const weightd_tensor_info *t = p;
	PyObject *shape = shape_tuple(t->shape, t->ndim), *d;

	if (!shape)
		return NULL;
	d = Py_BuildValue("{s:s,s:s,s:N,s:K,s:K,s:s,s:I,s:I}", "name", t->name, "dtype", t->dtype,
			  "shape", shape, "nbytes", (unsigned long long)t->nbytes, "offset",
			  (unsigned long long)t->offset, "file", t->file, "block_elems",
			  (unsigned int)t->block_elems, "block_bytes", (unsigned int)t->block_bytes);
	return d;
}

static PyObject *meta_dict(const void *p)
{
	const weightd_meta_entry *m = p;

	return Py_BuildValue("{s:s,s:s,s:s}", "key", m->key, "value", m->value, "type", m->type);
}

static PyObject *weight_status_dict(const void *p)
{
	const weightd_weight_status *w = p;
	PyObject *shape = shape_tuple(w->shape, w->ndim);

	if (!shape)
		return NULL;
	return Py_BuildValue("{s:K,s:s,s:s,s:N,s:K,s:I,s:I,s:K,s:N,s:s,s:O}", "handle",
			     (unsigned long long)w->handle, "label", w->label, "dtype", w->dtype,
			     "shape", shape, "nbytes", (unsigned long long)w->nbytes, "refs",
			     (unsigned int)w->refs, "clients", (unsigned int)w->clients,
			     "generation", (unsigned long long)w->generation, "digest",
			     opt_bytes(w->digest, w->digest_len), "source", w->source ? w->source : "",
			     "adopted",
			     w->adopted ? Py_True : Py_False);
}

static PyObject *job_dict(const void *p)
{
	const weightd_job_status *j = p;

	return Py_BuildValue("{s:N,s:s,s:K,s:K}", "key", opt_bytes(j->key, WEIGHTD_DIGEST_LEN), "label", j->label,
			     "nbytes", (unsigned long long)j->nbytes, "done",
			     (unsigned long long)j->done);
}

static PyObject *cl_list(pyw_client *cl, PyObject *unused)
{
	weightd_source_list *l = NULL;
	weightd_error err;
	PyObject *r;
	int rc;

	if (pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weightd_list(cl->c, &l, &err));
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	r = list_of(l->sources, l->count, sizeof(*l->sources), source_dict);
	weightd_source_list_free(l);
	return r;
}

/* weightd_describe for a call whose one argument is the checkpoint (format "s:<call>"): the
 * description, or NULL with the exception set. */
static weightd_description *describe_call(pyw_client *cl, PyObject *args, const char *format)
{
	weightd_description *d = NULL;
	const char *name;
	weightd_error err;
	int rc;

	if (!PyArg_ParseTuple(args, format, &name) || pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weightd_describe(cl->c, name, &d, &err));
	if (rc < 0) {
		pyw_error_raise((PyObject *)cl, rc, &err);
		return NULL;
	}
	return d;
}

static PyObject *cl_describe(pyw_client *cl, PyObject *args)
{
	weightd_description *d = describe_call(cl, args, "s:describe");
	PyObject *r;

	if (!d)
		return NULL;
	r = Py_BuildValue("{s:N,s:N,s:N}", "source", source_dict(&d->source), "tensors",
			  list_of(d->tensors, d->n_tensors, sizeof(*d->tensors), tensor_dict), "metadata",
			  list_of(d->metadata, d->n_metadata, sizeof(*d->metadata), meta_dict));
	weightd_description_free(d);
	return r;
}

/* The names of a checkpoint's tensors, in file order: describe() without a dict per tensor. */
static PyObject *cl_tensor_names(pyw_client *cl, PyObject *args)
{
	weightd_description *d = describe_call(cl, args, "s:tensor_names");
	PyObject *r;

	if (!d)
		return NULL;
	r = PyList_New((Py_ssize_t)d->n_tensors);
	for (size_t i = 0; r && i < d->n_tensors; i++) {
		PyObject *s = PyUnicode_FromString(d->tensors[i].name);

		if (!s) {
			Py_CLEAR(r);
			break;
		}
		PyList_SET_ITEM(r, (Py_ssize_t)i, s);
	}
	weightd_description_free(d);
	return r;
}

/* The readiness and admission counters of s into the status dict d, and each job's elapsed_ms
 * into its dict of d["jobs"]. 0, or -1 with the exception set. */
static int status_health(PyObject *d, const weightd_status *s)
{
	PyObject *jobs = PyDict_GetItemString(d, "jobs"); /* borrowed */
	PyObject *v;
	int rc = 0;

	v = s->health_known ? PyBool_FromLong(s->ready) : (Py_INCREF(Py_None), Py_None);
	rc |= !v || PyDict_SetItemString(d, "ready", v) < 0;
	Py_XDECREF(v);
	v = PyUnicode_FromString(s->not_ready ? s->not_ready : "");
	rc |= !v || PyDict_SetItemString(d, "not_ready", v) < 0;
	Py_XDECREF(v);
	v = PyLong_FromUnsignedLongLong(s->admissions_failed);
	rc |= !v || PyDict_SetItemString(d, "admissions_failed", v) < 0;
	Py_XDECREF(v);
	v = PyLong_FromUnsignedLongLong(s->admission_retries);
	rc |= !v || PyDict_SetItemString(d, "admission_retries", v) < 0;
	Py_XDECREF(v);
	for (size_t i = 0; !rc && jobs && i < s->n_jobs; i++) {
		v = PyLong_FromUnsignedLongLong(s->job_elapsed_ms ? s->job_elapsed_ms[i] : 0);
		rc |= !v || PyDict_SetItemString(PyList_GET_ITEM(jobs, (Py_ssize_t)i), "elapsed_ms",
						 v) < 0;
		Py_XDECREF(v);
	}
	return rc ? -1 : 0;
}

static PyObject *cl_status(pyw_client *cl, PyObject *args)
{
	weightd_status *s = NULL;
	weightd_error err;
	PyObject *r;
	int rc, weights = 1;

	if (!PyArg_ParseTuple(args, "|p:status", &weights) || pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weights ? weightd_status_get(cl->c, &s, &err) : weightd_status_summary(cl->c, &s, &err));
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	r = Py_BuildValue(
		"{s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:N,s:N,s:N}",
		"instance", s->instance, "server_version", s->server_version, "uptime_ms",
		(unsigned long long)s->uptime_ms, "bytes_resident",
		(unsigned long long)s->bytes_resident, "budget_bytes",
		(unsigned long long)s->budget_bytes, "weights", (unsigned long long)s->weights,
		"clients", (unsigned long long)s->clients, "bytes_read",
		(unsigned long long)s->bytes_read, "materializations",
		(unsigned long long)s->materializations, "materializations_failed",
		(unsigned long long)s->materializations_failed, "materializations_in_flight",
		(unsigned long long)s->materializations_in_flight, "evictions",
		(unsigned long long)s->evictions, "readoptions", (unsigned long long)s->readoptions,
		"bytes_materialized", (unsigned long long)s->bytes_materialized, "materialize_ns",
		(unsigned long long)s->materialize_ns, "references",
		(unsigned long long)s->references, "locked_weights",
		(unsigned long long)s->locked_weights, "locked_bytes",
		(unsigned long long)s->locked_bytes, "sources",
		list_of(s->sources, s->n_sources, sizeof(*s->sources), source_dict), "weight_list",
		list_of(s->weight_list, s->n_weights, sizeof(*s->weight_list), weight_status_dict), "jobs",
		list_of(s->jobs, s->n_jobs, sizeof(*s->jobs), job_dict));
	if (r && status_health(r, s) < 0)
		Py_CLEAR(r);
	weightd_status_free(s);
	return r;
}

/* A client_info as a dict. */
static PyObject *client_info_dict(const void *p)
{
	const weightd_client_info *x = p;

	return Py_BuildValue("{s:K,s:I,s:I,s:i,s:s,s:K,s:K,s:K,s:K,s:K,s:O}", "id",
			     (unsigned long long)x->id, "uid", (unsigned int)x->uid, "gid",
			     (unsigned int)x->gid, "pid", (int)x->pid, "name", x->name, "bytes",
			     (unsigned long long)x->bytes, "weights", (unsigned long long)x->weights,
			     "segments", (unsigned long long)x->segments, "pending",
			     (unsigned long long)x->pending, "connected_ms",
			     (unsigned long long)x->connected_ms, "admin",
			     x->admin ? Py_True : Py_False);
}

static PyObject *cl_clients(pyw_client *cl, PyObject *unused)
{
	weightd_client_list *l = NULL;
	weightd_error err;
	PyObject *r;
	int rc;

	if (pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weightd_clients(cl->c, &l, &err));
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	r = list_of(l->clients, l->count, sizeof(*l->clients), client_info_dict);
	weightd_client_list_free(l);
	return r;
}

static PyObject *cl_server_info(pyw_client *cl, PyObject *unused)
{
	const weightd_server_info *si;

	if (pyw_client_check(cl) < 0)
		return NULL;
	si = weightd_server(cl->c);
	return Py_BuildValue(
		"{s:I,s:s,s:s,s:I,s:I,s:I,s:I,s:K,s:I,s:I,s:I,s:I,s:K,s:K,s:K,s:K,s:I,s:I,s:I}",
		"protocol_version", (unsigned int)si->protocol_version, "server_version",
		si->server_version ? si->server_version : "", "instance",
		si->instance ? si->instance : "", "max_frame_bytes", (unsigned int)si->max_frame_bytes,
		"max_pending_requests", (unsigned int)si->max_pending_requests, "max_unit_entries",
		(unsigned int)si->max_unit_entries, "max_recipe_nodes", (unsigned int)si->max_recipe_nodes,
		"max_client_bytes", (unsigned long long)si->max_client_bytes, "max_client_weights",
		(unsigned int)si->max_client_weights, "min_protocol_version",
		(unsigned int)si->min_protocol_version, "max_protocol_version",
		(unsigned int)si->max_protocol_version, "max_queue_fds", (unsigned int)si->max_queue_fds,
		"idle_timeout_ms", (unsigned long long)si->idle_timeout_ms, "frame_timeout_ms",
		(unsigned long long)si->frame_timeout_ms, "max_message_bytes",
		(unsigned long long)si->max_message_bytes, "segment_max_bytes",
		(unsigned long long)si->segment_max_bytes, "max_client_segments",
		(unsigned int)si->max_client_segments, "max_uid_segments",
		(unsigned int)si->max_uid_segments, "max_uid_weights", (unsigned int)si->max_uid_weights);
}

static PyObject *cl_fileno(pyw_client *cl, PyObject *unused)
{
	if (pyw_client_check(cl) < 0)
		return NULL;
	return PyLong_FromLong(weightd_client_fd(cl->c));
}

/* PyArg converters ("O&"): a Python int that fits, never wrapped; negative or too large raise
 * OverflowError naming the value. */
static int conv_u64(PyObject *o, void *p)
{
	unsigned long long v = PyLong_AsUnsignedLongLong(o);

	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return 0;
	*(uint64_t *)p = v;
	return 1;
}

static int conv_u32(PyObject *o, void *p)
{
	uint64_t v;

	if (!conv_u64(o, &v))
		return 0;
	if (v > UINT32_MAX) {
		PyErr_Format(PyExc_OverflowError, "%llu is too large (at most %u)",
			     (unsigned long long)v, UINT32_MAX);
		return 0;
	}
	*(uint32_t *)p = (uint32_t)v;
	return 1;
}

/* sel: None or a tuple ("full",) ("range", axis, start, end) ("indices", axis, [i...])
 * ("elements", start, end, [shape...]) ("shard", axis, rank, world[, even]). */
static int make_selection(pyw_client *cl, PyObject *sel, weightd_selection **ret,
			  weightd_error *err, int *rc)
{
	const char *kind;
	uint32_t axis, rank, world;
	uint64_t a, b;
	PyObject *list = NULL, *fast = NULL;
	uint64_t v[WEIGHTD_MAX_DIMS], *idx = NULL;
	Py_ssize_t n;

	*ret = NULL;
	*rc = 0;
	if (sel == Py_None)
		return 0;
	if (!PyTuple_Check(sel) || PyTuple_GET_SIZE(sel) < 1 ||
	    !(kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(sel, 0)))) {
		PyErr_SetString(PyExc_TypeError, "selection must be a tuple (kind, ...)");
		return -1;
	}
	if (strcmp(kind, "full") == 0) {
		*rc = weightd_selection_full(ret, err);
	} else if (strcmp(kind, "range") == 0) {
		if (!PyArg_ParseTuple(sel, "sO&O&O&", &kind, conv_u32, &axis, conv_u64, &a,
				      conv_u64, &b))
			return -1;
		*rc = weightd_selection_range(axis, a, b, ret, err);
	} else if (strcmp(kind, "shard") == 0) {
		int even = 0;

		if (!PyArg_ParseTuple(sel, "sO&O&O&|p", &kind, conv_u32, &axis, conv_u32, &rank,
				      conv_u32, &world, &even))
			return -1;
		*rc = even ? weightd_selection_shard_even(axis, rank, world, ret, err) :
			     weightd_selection_shard(axis, rank, world, ret, err);
	} else if (strcmp(kind, "indices") == 0 || strcmp(kind, "elements") == 0) {
		int elements = kind[0] == 'e';
		if (elements ? !PyArg_ParseTuple(sel, "sO&O&O", &kind, conv_u64, &a, conv_u64, &b,
						 &list)
			     : !PyArg_ParseTuple(sel, "sO&O", &kind, conv_u32, &axis, &list))
			return -1;
		if (!(fast = PySequence_Fast(list, "selection positions must be a sequence")))
			return -1;
		n = PySequence_Fast_GET_SIZE(fast);
		if (elements && n > WEIGHTD_MAX_DIMS) {
			Py_DECREF(fast);
			PyErr_Format(PyExc_ValueError, "elements shape has %zd axes (at most %d)", n,
				     WEIGHTD_MAX_DIMS);
			return -1;
		}
		idx = elements ? v : PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*idx));
		if (!idx) {
			Py_DECREF(fast);
			PyErr_NoMemory();
			return -1;
		}
		for (Py_ssize_t i = 0; i < n; i++) {
			idx[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
			if (idx[i] == (uint64_t)-1 && PyErr_Occurred()) {
				Py_DECREF(fast);
				if (!elements)
					PyMem_Free(idx);
				return -1;
			}
		}
		Py_DECREF(fast);
		*rc = elements ? weightd_selection_elements(a, b, idx, (size_t)n, ret, err)
			       : weightd_selection_indices(axis, idx, (size_t)n, ret, err);
		if (!elements)
			PyMem_Free(idx);
	} else {
		PyErr_Format(PyExc_ValueError, "unknown selection kind \"%s\"", kind);
		return -1;
	}
	if (*rc < 0) {
		pyw_error_raise((PyObject *)cl, *rc, err);
		return -1;
	}
	return 0;
}

static PyObject *request_new(pyw_client *cl, weightd_inflight *f)
{
	pyw_state *st = pyw_state_of((PyObject *)cl);
	pyw_request *r = st ? (pyw_request *)st->request_type->tp_alloc(st->request_type, 0) : NULL;

	if (!r) {
		weightd_inflight_free(f);
		return NULL;
	}
	Py_INCREF(cl);
	r->client = cl;
	r->f = f;
	return (PyObject *)r;
}

static PyObject *cl_materialize(pyw_client *cl, PyObject *args)
{
	const char *ckpt, *tensor;
	PyObject *sel = Py_None;
	weightd_selection *s = NULL;
	weightd_inflight *f = NULL;
	weightd_error err;
	int rc;

	if (!PyArg_ParseTuple(args, "ss|O:materialize", &ckpt, &tensor, &sel) ||
	    pyw_client_check(cl) < 0 || make_selection(cl, sel, &s, &err, &rc) < 0)
		return NULL;
	if (pyw_client_enter(cl) < 0) {
		weightd_selection_free(s);
		return NULL;
	}
	PYW_UNLOCKED(cl, rc, weightd_materialize(cl->c, ckpt, tensor, s, &f, &err));
	weightd_selection_free(s);
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	return request_new(cl, f);
}

static PyObject *cl_materialize_recipe(pyw_client *cl, PyObject *args)
{
	const char *text;
	Py_ssize_t len;
	weightd_recipe *r = NULL;
	weightd_inflight *f = NULL;
	weightd_error err;
	int rc;

	if (!PyArg_ParseTuple(args, "s#:materialize_recipe", &text, &len) ||
	    pyw_client_check(cl) < 0)
		return NULL;
	rc = weightd_recipe_from_json(text, (size_t)len, &r, &err);
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	if (pyw_client_enter(cl) < 0) {
		weightd_recipe_free(r);
		return NULL;
	}
	PYW_UNLOCKED(cl, rc, weightd_materialize_recipe(cl->c, r, &f, &err));
	weightd_recipe_free(r);
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	return request_new(cl, f);
}

/* A Unit object owning u (freed if the object cannot be made). */
static PyObject *unit_wrap(pyw_client *cl, weightd_unit *u)
{
	pyw_state *st = pyw_state_of((PyObject *)cl);
	pyw_unit *un = st ? (pyw_unit *)st->unit_type->tp_alloc(st->unit_type, 0) : NULL;

	if (!un) {
		weightd_unit_free(u);
		return NULL;
	}
	Py_INCREF(cl);
	un->client = cl;
	un->u = u;
	un->submitted = un->validated = un->busy = un->released = 0;
	un->exports = 0;
	return (PyObject *)un;
}

static PyObject *cl_unit_from_json(pyw_client *cl, PyObject *args)
{
	const char *text;
	Py_ssize_t len;
	weightd_unit *u = NULL;
	weightd_error err;
	int rc;

	if (!PyArg_ParseTuple(args, "s#:unit_from_json", &text, &len) || pyw_client_check(cl) < 0)
		return NULL;
	rc = weightd_unit_from_json(cl->c, text, (size_t)len, &u, &err);
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	return unit_wrap(cl, u);
}

/* Fill slot `t` of u with tensor `t` of `ckpt`: its part `sel` (NULL: whole), cast to `cast`
 * (NULL: as stored), as the recipe {"op": "cast", "input": {"op": "source", "select": ...}}
 * would. */
static int fill_tensor_slot(weightd_unit *u, const char *ckpt, const char *t,
			    const weightd_selection *sel, const char *cast, weightd_error *err)
{
	weightd_recipe *r = NULL;
	int rc, src;

	rc = weightd_unit_slot(u, t, NULL, NULL, 0, NULL, err);
	if (rc < 0)
		return rc;
	if (!cast)
		return weightd_unit_set_tensor(u, t, ckpt, t, sel, err);
	rc = weightd_recipe_new(&r, err);
	if (rc >= 0)
		rc = src = weightd_recipe_source(r, ckpt, t, sel, err);
	if (rc >= 0)
		rc = weightd_recipe_cast(r, src, cast, err);
	if (rc >= 0)
		rc = weightd_unit_set_recipe(u, t, r, err);
	weightd_recipe_free(r);
	return rc;
}

/* Item i of an optional sequence (NULL: none given). */
static PyObject *opt_item(PyObject *seq, Py_ssize_t i)
{
	return seq ? PySequence_Fast_GET_ITEM(seq, i) : Py_None;
}

/*
 * A Unit of tensors of one checkpoint, each in a slot of its name: whole and as stored, or the
 * part sels[i] names (a selection tuple, or None) cast to casts[i] (a dtype, or None). What
 * unit_from_json makes of the same recipes, declared here without JSON: a 90,000-tensor
 * checkpoint was a second of it.
 */
static PyObject *cl_unit_from_tensors(pyw_client *cl, PyObject *args)
{
	const char *ckpt;
	PyObject *names, *sels_in = Py_None, *casts_in = Py_None, *seq, *sels = NULL, *casts = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	Py_ssize_t n;
	int rc;

	if (!PyArg_ParseTuple(args, "sO|OO:unit_from_tensors", &ckpt, &names, &sels_in, &casts_in) ||
	    pyw_client_check(cl) < 0)
		return NULL;
	seq = PySequence_Fast(names, "unit_from_tensors: names must be a sequence of str");
	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	if (sels_in != Py_None &&
	    !(sels = PySequence_Fast(sels_in, "unit_from_tensors: sels must be a sequence")))
		goto fail;
	if (casts_in != Py_None &&
	    !(casts = PySequence_Fast(casts_in, "unit_from_tensors: casts must be a sequence")))
		goto fail;
	if ((sels && PySequence_Fast_GET_SIZE(sels) != n) ||
	    (casts && PySequence_Fast_GET_SIZE(casts) != n)) {
		PyErr_SetString(PyExc_ValueError, "unit_from_tensors: sels and casts must have one "
				"item per name");
		goto fail;
	}
	rc = weightd_unit_new(cl->c, &u, &err);
	for (Py_ssize_t i = 0; rc >= 0 && i < n; i++) {
		const char *t = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i)), *cast = NULL;
		PyObject *c = opt_item(casts, i);
		weightd_selection *sel = NULL;

		if (!t || (c != Py_None && !(cast = PyUnicode_AsUTF8(c))) ||
		    make_selection(cl, opt_item(sels, i), &sel, &err, &rc) < 0)
			goto fail;
		if (rc >= 0)
			rc = fill_tensor_slot(u, ckpt, t, sel, cast, &err);
		weightd_selection_free(sel);
	}
	Py_DECREF(seq);
	Py_XDECREF(sels);
	Py_XDECREF(casts);
	if (rc < 0) {
		weightd_unit_free(u);
		return pyw_error_raise((PyObject *)cl, rc, &err);
	}
	return unit_wrap(cl, u);
fail:
	weightd_unit_free(u);
	Py_DECREF(seq);
	Py_XDECREF(sels);
	Py_XDECREF(casts);
	return NULL;
}

/* A list of str from n C strings, or NULL with an exception set. */
static PyObject *str_list(const char *const *v, size_t n)
{
	PyObject *l = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; l && i < n; i++) {
		PyObject *s = PyUnicode_DecodeUTF8(v[i], (Py_ssize_t)strlen(v[i]), "replace");
		if (!s) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, s);
	}
	return l;
}

/* reload(): what the daemon applied and what it could not, as {"changes": [...],
 * "warnings": [...]}; a failed reload raises. */
static PyObject *cl_reload(pyw_client *cl, PyObject *unused)
{
	weightd_reload_info *r = NULL;
	PyObject *changes, *warnings, *d = NULL;
	weightd_error err;
	int rc;

	if (pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weightd_reload_report(cl->c, &r, &err));
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	changes = str_list(r->changes, r->n_changes);
	warnings = str_list(r->warnings, r->n_warnings);
	if (changes && warnings)
		d = Py_BuildValue("{s:O,s:O}", "changes", changes, "warnings", warnings);
	Py_XDECREF(changes);
	Py_XDECREF(warnings);
	weightd_reload_report_free(r);
	return d;
}

static PyObject *cl_evict(pyw_client *cl, PyObject *unused)
{
	uint64_t n = 0, bytes = 0;
	weightd_error err;
	int rc;

	if (pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weightd_evict(cl->c, &n, &bytes, &err));
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	return Py_BuildValue("(KK)", (unsigned long long)n, (unsigned long long)bytes);
}

static PyObject *cl_subscribe(pyw_client *cl, PyObject *arg)
{
	PyObject *fast = PySequence_Fast(arg, "subscribe takes a sequence of checkpoint names");
	const char **names = NULL;
	weightd_error err;
	Py_ssize_t n;
	int rc = 0;

	if (!fast)
		return NULL;
	n = PySequence_Fast_GET_SIZE(fast);
	names = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*names));
	if (!names) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (!(names[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i))))
			goto out;
	if (pyw_client_enter(cl) < 0)
		goto out;
	PYW_UNLOCKED(cl, rc, weightd_subscribe(cl->c, names, (size_t)n, &err));
	if (rc < 0)
		pyw_error_raise((PyObject *)cl, rc, &err);
out:
	PyMem_Free(names);
	Py_DECREF(fast);   /* owns the strings names[] pointed into */
	if (PyErr_Occurred())
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *event_dict(const void *p)
{
	const weightd_event *e = p;

	return Py_BuildValue("{s:s,s:K,s:s}", "checkpoint", e->checkpoint, "generation",
			     (unsigned long long)e->generation, "what", e->what);
}

static PyObject *cl_poll_events(pyw_client *cl, PyObject *args)
{
	weightd_event_list *l = NULL;
	weightd_error err;
	int timeout_ms = 0, rc;
	PyObject *r;

	if (!PyArg_ParseTuple(args, "|i:poll_events", &timeout_ms) || pyw_client_enter(cl) < 0)
		return NULL;
	PYW_UNLOCKED(cl, rc, weightd_poll_events(cl->c, timeout_ms, &l, &err));
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	r = Py_BuildValue("(NK)", list_of(l->events, l->count, sizeof(*l->events), event_dict),
			  (unsigned long long)l->dropped);
	weightd_event_list_free(l);
	return r;
}

static PyObject *cl_close(pyw_client *cl, PyObject *unused)
{
	if (pyw_client_forked(cl)) {
		cl->c = NULL;   /* the parent's connection: not ours to close */
		Py_RETURN_NONE;
	}
	if (cl->c && !cl->closing) {
		cl->closing = 1;
		cl->busy++;
		pyw_client_leave(cl);   /* closes now unless a call is running */
	}
	Py_RETURN_NONE;
}

static PyObject *cl_closed(pyw_client *cl, void *unused)
{
	return PyBool_FromLong(!cl->c || cl->closing);
}

/* A client refers to nothing but its type, which tp_clear never drops: it needs no tp_clear, and
 * its traverse lets a cycle through its type and module be collected. */
static int cl_traverse(pyw_client *cl, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE(cl));
	return 0;
}

static void cl_dealloc(pyw_client *cl)
{
	PyTypeObject *tp = Py_TYPE(cl);

	PyObject_GC_UnTrack(cl);
	if (!pyw_client_forked(cl))
		weightd_close(cl->c);   /* no call can be running: each holds a reference */
	tp->tp_free(cl);
	Py_DECREF(tp);
}

static PyMethodDef cl_methods[] = {
	{ "list", (PyCFunction)cl_list, METH_NOARGS, "list() -> list[dict]: every source." },
	{ "describe", (PyCFunction)cl_describe, METH_VARARGS, "describe(checkpoint) -> dict." },
	{ "status", (PyCFunction)cl_status, METH_VARARGS,
	  "status(weights=True) -> dict (weights=False: without the list of weights)." },
	{ "server_info", (PyCFunction)cl_server_info, METH_NOARGS, "server_info() -> dict." },
	{ "clients", (PyCFunction)cl_clients, METH_NOARGS,
	  "clients() -> list[dict]: the connections and what each holds." },
	{ "fileno", (PyCFunction)cl_fileno, METH_NOARGS, "fileno() -> int: the socket, to poll." },
	{ "materialize", (PyCFunction)cl_materialize, METH_VARARGS,
	  "materialize(checkpoint, tensor, sel=None) -> Request." },
	{ "materialize_recipe", (PyCFunction)cl_materialize_recipe, METH_VARARGS,
	  "materialize_recipe(json) -> Request." },
	{ "unit_from_json", (PyCFunction)cl_unit_from_json, METH_VARARGS,
	  "unit_from_json(json) -> Unit." },
	{ "unit_from_tensors", (PyCFunction)cl_unit_from_tensors, METH_VARARGS,
	  "unit_from_tensors(checkpoint, names, sels=None, casts=None) -> Unit: each tensor in a "
	  "slot of its name, whole or the part sels[i] names, as stored or cast to casts[i]." },
	{ "tensor_names", (PyCFunction)cl_tensor_names, METH_VARARGS,
	  "tensor_names(checkpoint) -> list[str]: its tensors, in file order." },
	{ "reload", (PyCFunction)cl_reload, METH_NOARGS,
	  "reload(): re-read the daemon's config; {'changes': [...], 'warnings': [...]}." },
	{ "evict", (PyCFunction)cl_evict, METH_NOARGS, "evict() -> (weights, bytes)." },
	{ "subscribe", (PyCFunction)cl_subscribe, METH_O,
	  "subscribe(checkpoints): be told of their new generations (replaces the last call)." },
	{ "poll_events", (PyCFunction)cl_poll_events, METH_VARARGS,
	  "poll_events(timeout_ms=0) -> (list[dict], dropped) (GIL released while waiting)." },
	{ "close", (PyCFunction)cl_close, METH_NOARGS, "close(): close the connection." },
	{ NULL, NULL, 0, NULL }
};

static PyGetSetDef cl_getset[] = {
	{ "closed", (getter)cl_closed, NULL, "True once close() was called.", NULL },
	{ NULL, NULL, NULL, NULL, NULL }
};

static PyType_Slot cl_type_slots[] = {
	{ Py_tp_dealloc, cl_dealloc },
	{ Py_tp_traverse, cl_traverse },
	{ Py_tp_doc, "A connection to weightd (made by connect())." },
	{ Py_tp_methods, cl_methods },
	{ Py_tp_getset, cl_getset },
	{ 0, NULL },
};

PyType_Spec pyw_client_spec = {
	.name = "weightd._weightd.Client",
	.basicsize = sizeof(pyw_client),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
		 Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = cl_type_slots,
};
