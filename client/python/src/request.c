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
		return pyw_error_raise(rc, &err);
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
		return pyw_error_raise(rc, &err);
	return pyw_weight_new_owned(r->client, w);
}

static PyObject *req_cancel(pyw_request *r, PyObject *unused)
{
	if (!pyw_client_forked(r->client))
		weightd_inflight_free(r->f);
	r->f = NULL;
	Py_RETURN_NONE;
}

static void req_dealloc(pyw_request *r)
{
	if (!pyw_client_forked(r->client))
		weightd_inflight_free(r->f);   /* allowed after the client closed */
	Py_XDECREF(r->client);
	PyObject_Free(r);
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

PyTypeObject pyw_request_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "weightd._weightd.Request",
	.tp_basicsize = sizeof(pyw_request),
	.tp_dealloc = (destructor)req_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "An in-flight materialization (from Client.materialize*).",
	.tp_methods = req_methods,
};
