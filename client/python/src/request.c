/* SPDX-License-Identifier: Apache-2.0 */
/* request.c - _weightd.Request: one in-flight materialization (weightd_inflight), polled without
 * waiting (for event loops) or finished with the GIL released. */
#include "pyweightd.h"

static int req_check(pyw_request *r)
{
	if (!r->f) {
		PyErr_SetString(PyExc_ValueError, "request already finished (or being finished)");
		return -1;
	}
	return pyw_client_check(r->client);
}

/* poll() -> bool: True when the reply has come (finish() will not block); raises its error. */
static PyObject *req_poll(pyw_request *r, PyObject *unused)
{
	const weightd_weight *w = NULL;
	weightd_error err;
	int rc;

	if (req_check(r) < 0)
		return NULL;
	rc = weightd_borrow(r->f, &w, &err);
	if (rc < 0) {
		weightd_inflight_free(r->f);
		r->f = NULL;
		return pyw_error_raise((PyObject *)r, rc, &err);
	}
	return PyBool_FromLong(w != NULL);
}

static PyObject *req_finish(pyw_request *r, PyObject *unused)
{
	weightd_inflight *f;
	weightd_weight *w = NULL;
	weightd_error err;
	int rc;

	if (req_check(r) < 0 || pyw_client_enter(r->client) < 0)
		return NULL;
	f = r->f;
	r->f = NULL;   /* finish consumes it in every case */
	Py_BEGIN_ALLOW_THREADS
	rc = weightd_finish(f, &w, &err);
	Py_END_ALLOW_THREADS
	pyw_client_leave(r->client);
	if (rc < 0)
		return pyw_error_raise((PyObject *)r, rc, &err);
	return pyw_weight_new_owned(r->client, w);
}

static PyObject *req_cancel(pyw_request *r, PyObject *unused)
{
	if (!pyw_client_forked(r->client))
		weightd_inflight_free(r->f);
	r->f = NULL;
	Py_RETURN_NONE;
}

static int req_traverse(pyw_request *r, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE(r));
	Py_VISIT(r->client);
	return 0;
}

/* Breaks a cycle through the request by abandoning it, as cancel() and then deallocation
 * would. */
static int req_clear(pyw_request *r)
{
	if (r->f && !pyw_client_forked(r->client))
		weightd_inflight_free(r->f);   /* allowed after the client closed */
	r->f = NULL;
	Py_CLEAR(r->client);
	return 0;
}

static void req_dealloc(pyw_request *r)
{
	PyTypeObject *tp = Py_TYPE(r);

	PyObject_GC_UnTrack(r);
	req_clear(r);
	tp->tp_free(r);
	Py_DECREF(tp);
}

static PyMethodDef req_methods[] = {
	{ "poll", (PyCFunction)req_poll, METH_NOARGS,
	  "poll() -> bool: has the reply come? Never blocks; raises the request's error." },
	{ "finish", (PyCFunction)req_finish, METH_NOARGS,
	  "finish() -> Weight: wait for the reply (GIL released)." },
	{ "cancel", (PyCFunction)req_cancel, METH_NOARGS,
	  "cancel(): abandon the request; a weight arriving later is released." },
	{ NULL, NULL, 0, NULL }
};

static PyType_Slot req_type_slots[] = {
	{ Py_tp_dealloc, req_dealloc },
	{ Py_tp_traverse, req_traverse },
	{ Py_tp_clear, req_clear },
	{ Py_tp_doc, "An in-flight materialization (from Client.materialize*)." },
	{ Py_tp_methods, req_methods },
	{ 0, NULL },
};

PyType_Spec pyw_request_spec = {
	.name = "weightd._weightd.Request",
	.basicsize = sizeof(pyw_request),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
		 Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = req_type_slots,
};
