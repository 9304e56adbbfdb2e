/* SPDX-License-Identifier: Apache-2.0 */
/* unit.c - _weightd.Unit: a set of slots materialized and bound all-or-nothing (weightd_unit),
 * kept mapped while any slot's memory is viewed. */
#include "pyweightd.h"

void pyw_unit_maybe_free(pyw_unit *un)
{
	if (un->released && un->exports == 0 && un->busy == 0 && un->u) {
		weightd_unit *u = un->u;
		un->u = NULL;
		if (!pyw_client_forked(un->client))
			weightd_unit_free(u);
	}
}

/* The unit, ready for a call that talks to the daemon; raises when it cannot be used. */
static int unit_check(pyw_unit *un)
{
	if (!un->u || un->released) {
		PyErr_SetString(PyExc_ValueError, "unit was released");
		return -1;
	}
	if (un->busy) {
		PyErr_SetString(PyExc_RuntimeError, "unit is in use by another thread");
		return -1;
	}
	return 0;
}

static PyObject *unit_submit(pyw_unit *un, PyObject *unused)
{
	weightd_error err;
	int rc;

	if (unit_check(un) < 0 || pyw_client_enter(un->client) < 0)
		return NULL;
	un->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = weightd_unit_submit(un->u, &err);
	Py_END_ALLOW_THREADS
	un->busy = 0;
	pyw_client_leave(un->client);
	pyw_unit_maybe_free(un);
	if (rc < 0)
		return pyw_error_raise((PyObject *)un, rc, &err);
	un->submitted = 1;
	un->validated = 0;
	Py_RETURN_NONE;
}

static PyObject *unit_poll(pyw_unit *un, PyObject *unused)
{
	weightd_error err;
	int done = 0, rc;

	if (unit_check(un) < 0 || pyw_client_check(un->client) < 0)
		return NULL;
	rc = weightd_unit_poll(un->u, &done, &err);
	if (rc < 0)
		return pyw_error_raise((PyObject *)un, rc, &err);
	return PyBool_FromLong(done);
}

/* finish + validate + bind: afterwards every slot's memory is mapped (or nothing is held);
 * with populate, its pages are pre-faulted too (weightd_unit_set_populate: advisory). */
static PyObject *unit_validate(pyw_unit *un, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "populate", NULL };
	weightd_error err;
	int populate = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:validate", kwlist, &populate) ||
	    unit_check(un) < 0 || pyw_client_enter(un->client) < 0)
		return NULL;
	un->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = weightd_unit_set_populate(un->u, populate, &err);
	if (rc >= 0)
		rc = weightd_unit_validate(un->u, &err);
	if (rc >= 0)
		weightd_unit_bind(un->u);
	Py_END_ALLOW_THREADS
	un->busy = 0;
	pyw_client_leave(un->client);
	pyw_unit_maybe_free(un);
	if (rc < 0) {
		un->submitted = 0;
		return pyw_error_raise((PyObject *)un, rc, &err);
	}
	un->validated = 1;
	Py_RETURN_NONE;
}

static PyObject *unit_slots(pyw_unit *un, PyObject *unused)
{
	size_t n;
	PyObject *l;

	if (unit_check(un) < 0)
		return NULL;
	n = weightd_unit_slot_count(un->u);
	l = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; l && i < n; i++) {
		PyObject *s = PyUnicode_FromString(weightd_unit_slot_name(un->u, i));
		if (!s) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, s);
	}
	return l;
}

static PyObject *unit_weight(pyw_unit *un, PyObject *args)
{
	const char *slot;

	if (!PyArg_ParseTuple(args, "s:weight", &slot) || unit_check(un) < 0)
		return NULL;
	return pyw_weight_new_slot(un, slot);
}

static PyObject *unit_bytes_read(pyw_unit *un, void *unused)
{
	if (!un->u)
		return PyLong_FromLong(0);
	return PyLong_FromUnsignedLongLong(weightd_unit_bytes_read(un->u));
}

static PyObject *unit_release(pyw_unit *un, PyObject *unused)
{
	un->released = 1;
	pyw_unit_maybe_free(un);
	Py_RETURN_NONE;
}

static PyObject *unit_released(pyw_unit *un, void *unused)
{
	return PyBool_FromLong(un->released);
}

static PyObject *unit_exports(pyw_unit *un, void *unused)
{
	return PyLong_FromSsize_t(un->exports);
}

static int unit_traverse(pyw_unit *un, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE(un));
	Py_VISIT(un->client);
	return 0;
}

/* Breaks a cycle through the unit by letting it go, as release() and then deallocation would;
 * while a slot's view is exported the unit keeps its mapping (and the client) until the view's
 * own clear releases it. */
static int unit_clear(pyw_unit *un)
{
	if (un->exports || un->busy)
		return 0;
	un->released = 1;
	pyw_unit_maybe_free(un);
	Py_CLEAR(un->client);
	return 0;
}

static void unit_dealloc(pyw_unit *un)
{
	PyTypeObject *tp = Py_TYPE(un);

	PyObject_GC_UnTrack(un);
	unit_clear(un); /* no export or slot weight is left: each holds a reference */
	tp->tp_free(un);
	Py_DECREF(tp);
}

static PyMethodDef unit_methods[] = {
	{ "submit", (PyCFunction)unit_submit, METH_NOARGS, "submit(): send the unit (one request)." },
	{ "poll", (PyCFunction)unit_poll, METH_NOARGS,
	  "poll() -> bool: has the reply come? Never blocks." },
	{ "validate", (PyCFunction)(void (*)(void))unit_validate, METH_VARARGS | METH_KEYWORDS,
	  "validate(populate=False): wait, check and map every slot (pre-faulting its pages with\n"
	  "populate), then bind; all or nothing (GIL released)." },
	{ "slots", (PyCFunction)unit_slots, METH_NOARGS, "slots() -> list[str], in order." },
	{ "weight", (PyCFunction)unit_weight, METH_VARARGS,
	  "weight(slot) -> Weight: a bound slot's weight (keeps the unit alive)." },
	{ "release", (PyCFunction)unit_release, METH_NOARGS,
	  "release(): let go; memory still viewed stays mapped until the last view goes." },
	{ NULL, NULL, 0, NULL }
};

static PyGetSetDef unit_getset[] = {
	{ "bytes_read", (getter)unit_bytes_read, NULL,
	  "checkpoint bytes the daemon read for the last submit (0: all shared)", NULL },
	{ "released", (getter)unit_released, NULL, "True once released", NULL },
	{ "exports", (getter)unit_exports, NULL, "live views of its slots' memory", NULL },
	{ NULL, NULL, NULL, NULL, NULL }
};

static PyType_Slot unit_type_slots[] = {
	{ Py_tp_dealloc, unit_dealloc },
	{ Py_tp_traverse, unit_traverse },
	{ Py_tp_clear, unit_clear },
	{ Py_tp_doc, "A unit of slots bound all-or-nothing (from Client.unit_from_json)." },
	{ Py_tp_methods, unit_methods },
	{ Py_tp_getset, unit_getset },
	{ 0, NULL },
};

PyType_Spec pyw_unit_spec = {
	.name = "weightd._weightd.Unit",
	.basicsize = sizeof(pyw_unit),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
		 Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = unit_type_slots,
};
