/* SPDX-License-Identifier: Apache-2.0 */
/* weight.c - _weightd.Weight: one weight's description and its read-only memory, exported only
 * through the buffer protocol and let go when released with no export left. */
#include "pyweightd.h"

#include <string.h>

#include <structmember.h>

/* Buffer format per element dtype. BF16 and the FP8 types have no struct code: they are exported
 * as their raw bits (unsigned integers of their width); the Python layer gives them their type. */
static const struct {
	const char *dtype;
	const char *format;
	Py_ssize_t itemsize;
} elem_types[] = {
	{ "BOOL", "?", 1 }, { "U8", "B", 1 },  { "I8", "b", 1 },       { "U16", "H", 2 },
	{ "I16", "h", 2 },  { "F16", "e", 2 }, { "BF16", "H", 2 },     { "U32", "I", 4 },
	{ "I32", "i", 4 },  { "F32", "f", 4 }, { "U64", "Q", 8 },      { "I64", "q", 8 },
	{ "F64", "d", 8 },  { "F8_E4M3", "B", 1 }, { "F8_E5M2", "B", 1 },
};

/* One axis of nbytes bytes: the layout when the shape cannot describe the bytes. */
static void layout_bytes(pyw_weight *self)
{
	snprintf(self->format, sizeof(self->format), "B");
	self->itemsize = 1;
	self->ndim = 1;
	self->bshape[0] = (Py_ssize_t)self->nbytes;
}

/* Work out the buffer's format, shape and strides. Element types: the weight's shape. Packed
 * block types (GGUF): bytes, the outer axes kept and the innermost axis as its row's bytes. The
 * layout always covers exactly nbytes (checked, overflow included), so no view built on it can
 * reach past the mapping; a shape that does not fit falls back to plain bytes. */
static void layout(pyw_weight *self, const char *dtype, const uint64_t *shape, size_t ndim)
{
	unsigned long long prod = 1;
	size_t i, outer_axes;
	int fits = 1;

	self->itemsize = 0;
	for (i = 0; i < sizeof(elem_types) / sizeof(elem_types[0]); i++)
		if (strcmp(elem_types[i].dtype, dtype) == 0) {
			snprintf(self->format, sizeof(self->format), "%s", elem_types[i].format);
			self->itemsize = elem_types[i].itemsize;
		}
	/* element types: itemsize x every axis; packed: the outer axes (the row's bytes follow) */
	outer_axes = self->itemsize ? ndim : (ndim ? ndim - 1 : 0);
	if (self->itemsize)
		prod = (unsigned long long)self->itemsize;
	for (i = 0; i < outer_axes; i++)
		fits = fits && shape[i] <= PY_SSIZE_T_MAX &&
		       !__builtin_mul_overflow(prod, shape[i], &prod);
	if (self->itemsize ? !fits || prod != self->nbytes
			   : !fits || ndim == 0 || prod == 0 || self->nbytes % prod != 0) {
		layout_bytes(self);
	} else {
		if (!self->itemsize) {
			snprintf(self->format, sizeof(self->format), "B");
			self->itemsize = 1;
		}
		self->ndim = (int)ndim;
		for (i = 0; i < outer_axes; i++)
			self->bshape[i] = (Py_ssize_t)shape[i];
		if (outer_axes < ndim)
			self->bshape[ndim - 1] = (Py_ssize_t)(self->nbytes / prod);
	}
	for (int d = self->ndim - 1; d >= 0; d--)
		self->bstrides[d] = d == self->ndim - 1 ? self->itemsize
							: self->bstrides[d + 1] * self->bshape[d + 1];
}

/* len bytes of a digest or key (a content digest is 16 or 32 bytes; a key 32), or None. */
static PyObject *digest_bytes(const uint8_t *p, size_t len)
{
	if (!p || !len)
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)len);
}

/* A new Python weight describing `w` (copied into Python objects), of the class the module of
 * `owner` makes weights of. */
static pyw_weight *weight_alloc(PyObject *owner, const weightd_weight *w)
{
	pyw_state *st = pyw_state_of(owner);
	PyTypeObject *cls = st ? pyw_weight_class(st) : NULL;
	pyw_weight *self = cls ? (pyw_weight *)cls->tp_alloc(cls, 0) : NULL;
	size_t ndim = weightd_weight_ndim(w);
	const uint64_t *shape = weightd_weight_shape(w);

	if (!self)
		return NULL;
	self->nbytes = weightd_weight_nbytes(w);
	self->generation = weightd_weight_generation(w);
	self->handle = weightd_weight_handle(w);
	self->name = PyUnicode_FromString(weightd_weight_name(w) ? weightd_weight_name(w) : "");
	self->dtype = PyUnicode_FromString(weightd_weight_dtype(w));
	self->shape = PyTuple_New((Py_ssize_t)ndim);
	self->digest = digest_bytes(weightd_weight_digest(w), weightd_weight_digest_len(w));
	self->key = digest_bytes(weightd_weight_key(w), WEIGHTD_DIGEST_LEN);
	if (!self->name || !self->dtype || !self->shape || !self->digest || !self->key) {
		Py_DECREF(self);
		return NULL;
	}
	for (size_t i = 0; i < ndim; i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(shape[i]);
		if (!v) {
			Py_DECREF(self);
			return NULL;
		}
		PyTuple_SET_ITEM(self->shape, (Py_ssize_t)i, v);
	}
	if (ndim > WEIGHTD_MAX_DIMS) {
		Py_DECREF(self);
		PyErr_Format(PyExc_ValueError, "weight has %zu axes (at most %d)", ndim,
			     WEIGHTD_MAX_DIMS);
		return NULL;
	}
	layout(self, weightd_weight_dtype(w), shape, ndim);
	return self;
}

/* Mapped at once: weightd_weight_map may not run beside share() on the same weight, and
 * share() runs without the GIL, so the buffer protocol must never need to map. */
PyObject *pyw_weight_new_owned(pyw_client *cl, weightd_weight *w)
{
	pyw_weight *self = weight_alloc((PyObject *)cl, w);
	weightd_error err;
	int rc;

	if (!self) {
		weightd_release(w);
		return NULL;
	}
	self->own = w;
	Py_INCREF(cl);
	self->client = cl;
	rc = weightd_weight_map(w, &self->data, &err);
	if (rc < 0) {
		Py_DECREF(self);   /* releases w */
		return pyw_error_raise((PyObject *)cl, rc, &err);
	}
	return (PyObject *)self;
}

PyObject *pyw_weight_new_slot(pyw_unit *un, const char *slot)
{
	const weightd_weight *w = weightd_unit_weight(un->u, slot);
	pyw_weight *self;

	if (!w || !un->validated) {
		PyErr_Format(PyExc_KeyError, "unit has no bound slot \"%s\"", slot);
		return NULL;
	}
	self = weight_alloc((PyObject *)un, w);
	if (!self)
		return NULL;
	self->slot = PyUnicode_FromString(slot);
	if (!self->slot) {
		Py_DECREF(self);
		return NULL;
	}
	self->data = weightd_unit_data(un->u, slot);
	Py_INCREF(un);
	self->unit = un;
	Py_INCREF(un->client);
	self->client = un->client;
	return (PyObject *)self;
}

/* Let the C weight go once it is released, no export is left and no call runs on it. */
static void maybe_free(pyw_weight *self)
{
	if (self->released && self->exports == 0 && self->busy == 0 && self->own) {
		weightd_weight *w = self->own;
		self->own = NULL;
		self->data = NULL;
		if (!pyw_client_forked(self->client))
			weightd_release(w);   /* (a forked child keeps the parent's mapping) */
	}
}

/* The C weight to act on, or NULL with ValueError when it was released. */
static const weightd_weight *live(pyw_weight *self)
{
	if (self->released || (self->unit && !self->unit->u) || (!self->unit && !self->own)) {
		PyErr_SetString(PyExc_ValueError, "weight was released");
		return NULL;
	}
	return self->unit ? weightd_unit_weight(self->unit->u, PyUnicode_AsUTF8(self->slot))
			  : self->own;
}

static int wt_getbuffer(pyw_weight *self, Py_buffer *view, int flags)
{
	static char empty[1];

	if (flags & PyBUF_WRITABLE) {
		PyErr_SetString(PyExc_BufferError,
				"weightd weights are read-only shared memory (copy to write)");
		return -1;
	}
	if (!live(self))
		return -1;
	view->buf = self->data ? (void *)self->data : (void *)empty;
	view->len = (Py_ssize_t)self->nbytes;
	view->readonly = 1;
	view->itemsize = self->itemsize;
	view->format = (flags & PyBUF_FORMAT) ? self->format : NULL;
	view->ndim = self->ndim;
	view->shape = (flags & PyBUF_ND) ? self->bshape : NULL;
	view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->bstrides : NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	if (!(flags & PyBUF_ND)) {
		/* a plain byte buffer was asked for: one axis of bytes */
		view->ndim = 1;
		view->itemsize = 1;
		if (flags & PyBUF_FORMAT)
			view->format = "B";
	}
	Py_INCREF(self);
	view->obj = (PyObject *)self;
	self->exports++;
	if (self->unit)
		self->unit->exports++;
	return 0;
}

static void wt_releasebuffer(pyw_weight *self, Py_buffer *view)
{
	self->exports--;
	if (self->unit) {
		self->unit->exports--;
		pyw_unit_maybe_free(self->unit);
	}
	maybe_free(self);
}

static PyObject *wt_release(pyw_weight *self, PyObject *unused)
{
	self->released = 1;
	maybe_free(self);
	Py_RETURN_NONE;
}

static PyObject *wt_share(pyw_weight *self, PyObject *unused)
{
	const weightd_weight *w = live(self);
	weightd_weight *nw = NULL;
	weightd_error err;
	pyw_client *cl = self->client;
	int rc;

	if (!w || pyw_client_enter(cl) < 0)
		return NULL;
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	rc = weightd_share(w, &nw, &err);
	Py_END_ALLOW_THREADS
	self->busy--;
	pyw_client_leave(cl);
	maybe_free(self);
	if (rc < 0)
		return pyw_error_raise((PyObject *)cl, rc, &err);
	return pyw_weight_new_owned(cl, nw);
}

static PyObject *wt_fd(pyw_weight *self, PyObject *unused)
{
	const weightd_weight *w = live(self);

	return w ? PyLong_FromLong(weightd_weight_fd(w)) : NULL;
}

static PyObject *wt_address(pyw_weight *self, PyObject *unused)
{
	if (!live(self))
		return NULL;
	return PyLong_FromVoidPtr((void *)self->data);
}

static PyObject *wt_released(pyw_weight *self, void *unused)
{
	return PyBool_FromLong(self->released);
}

static PyObject *wt_exports(pyw_weight *self, void *unused)
{
	return PyLong_FromSsize_t(self->exports);
}

static PyObject *wt_nbytes(pyw_weight *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(self->nbytes);
}

static PyObject *wt_generation(pyw_weight *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(self->generation);
}

static PyObject *wt_handle(pyw_weight *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(self->handle);
}

/* Visits the type too: a subclass (weightd.Weight) leaves that to its heap-type base. */
static int wt_traverse(pyw_weight *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE(self));
	Py_VISIT(self->unit);
	Py_VISIT(self->client);
	Py_VISIT(self->slot);
	Py_VISIT(self->name);
	Py_VISIT(self->dtype);
	Py_VISIT(self->shape);
	Py_VISIT(self->digest);
	Py_VISIT(self->key);
	return 0;
}

/* Breaks a cycle through the weight by letting it go, as release() and then deallocation would.
 * While a view is exported, the unit and client stay: the view points into the mapping they
 * own, and its own clear (or end) releases it first. The description (strings, a tuple of
 * ints, bytes) cannot lead back to the weight, so it stays for dealloc. */
static int wt_clear(pyw_weight *self)
{
	if (self->exports || self->busy)
		return 0;
	self->released = 1;
	maybe_free(self);
	Py_CLEAR(self->unit);
	Py_CLEAR(self->client);
	return 0;
}

static void wt_dealloc(pyw_weight *self)
{
	PyTypeObject *tp = Py_TYPE(self);

	PyObject_GC_UnTrack(self);
	wt_clear(self); /* no export can be left: each holds a reference */
	Py_CLEAR(self->slot);
	Py_CLEAR(self->name);
	Py_CLEAR(self->dtype);
	Py_CLEAR(self->shape);
	Py_CLEAR(self->digest);
	Py_CLEAR(self->key);
	tp->tp_free(self);
	/* a Python subclass's dealloc leaves this to its heap-type base */
	Py_DECREF(tp);
}

static PyMethodDef wt_methods[] = {
	{ "release", (PyCFunction)wt_release, METH_NOARGS,
	  "release(): let go of the weight. Memory still viewed stays mapped until the last view\n"
	  "goes; then the daemon's reference is dropped." },
	{ "share", (PyCFunction)wt_share, METH_NOARGS,
	  "share() -> Weight: another reference to the same memory, counted by the daemon." },
	{ "fileno", (PyCFunction)wt_fd, METH_NOARGS,
	  "fileno() -> int: the read-only fd of the shared-memory object holding the weight\n"
	  "(owned by the weight; the weight may lie at an offset in it)." },
	{ "_address", (PyCFunction)wt_address, METH_NOARGS,
	  "_address() -> int: where the weight is mapped (0 for 0 bytes)." },
	{ NULL, NULL, 0, NULL }
};

static PyMemberDef wt_members[] = {
	{ "name", T_OBJECT, offsetof(pyw_weight, name), READONLY, "entry (slot or tensor) name" },
	{ "dtype", T_OBJECT, offsetof(pyw_weight, dtype), READONLY, "weightd dtype name" },
	{ "shape", T_OBJECT, offsetof(pyw_weight, shape), READONLY, "shape, outermost axis first" },
	{ "digest", T_OBJECT, offsetof(pyw_weight, digest), READONLY, "content digest (bytes)" },
	{ "key", T_OBJECT, offsetof(pyw_weight, key), READONLY, "identity key (bytes)" },
	{ "slot", T_OBJECT, offsetof(pyw_weight, slot), READONLY, "unit slot name, or None" },
	{ NULL, 0, 0, 0, NULL }
};

static PyGetSetDef wt_getset[] = {
	{ "nbytes", (getter)wt_nbytes, NULL, "size in bytes", NULL },
	{ "generation", (getter)wt_generation, NULL, "generation of its source", NULL },
	{ "handle", (getter)wt_handle, NULL, "the daemon's handle", NULL },
	{ "released", (getter)wt_released, NULL, "True once released", NULL },
	{ "exports", (getter)wt_exports, NULL, "live views of its memory", NULL },
	{ NULL, NULL, NULL, NULL, NULL }
};

static PyType_Slot wt_type_slots[] = {
	{ Py_tp_dealloc, wt_dealloc },
	{ Py_tp_traverse, wt_traverse },
	{ Py_tp_clear, wt_clear },
	{ Py_bf_getbuffer, wt_getbuffer },
	{ Py_bf_releasebuffer, wt_releasebuffer },
	{ Py_tp_doc, "A weight held from weightd (read-only buffer)." },
	{ Py_tp_methods, wt_methods },
	{ Py_tp_members, wt_members },
	{ Py_tp_getset, wt_getset },
	{ 0, NULL },
};

/* A base type: weightd.Weight derives from it to add the numpy and torch views. */
PyType_Spec pyw_weight_spec = {
	.name = "weightd._weightd.Weight",
	.basicsize = sizeof(pyw_weight),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
		 Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = wt_type_slots,
};
