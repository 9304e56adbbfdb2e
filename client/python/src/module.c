/* SPDX-License-Identifier: Apache-2.0 */
/* module.c - the weightd._weightd module: connect(), errors as weightd.Error, type registration. */
#include "pyweightd.h"

static PyObject *error_factory;   /* weightd.errors._make (code, name, message, fields...) */
static PyTypeObject *weight_class;

PyTypeObject *pyw_weight_class(void)
{
	return weight_class ? weight_class : &pyw_weight_type;
}

/* Build the exception through the Python factory so its class follows the code; never fails
 * silently (a factory error replaces it). Always returns NULL. */
PyObject *pyw_error_raise(int rc, const weightd_error *err)
{
	int code = err && err->code ? err->code : (rc < 0 ? -rc : rc);
	const char *msg = err && err->message[0] ? err->message : weightd_code_name(code);
	PyObject *exc;

	if (!error_factory) {
		PyErr_Format(PyExc_RuntimeError, "weightd: %s", msg);
		return NULL;
	}
	exc = PyObject_CallFunction(error_factory, "issssskiLL", code, weightd_code_name(code), msg,
				    err ? err->checkpoint : "", err ? err->tensor : "",
				    err ? err->slot : "", (unsigned long)(err ? err->node : 0),
				    (int)(err ? err->axis : -1), (long long)(err ? err->expected : 0),
				    (long long)(err ? err->actual : 0));
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

static PyObject *mod_set_classes(PyObject *self, PyObject *args)
{
	PyObject *factory, *wclass;

	if (!PyArg_ParseTuple(args, "OO!", &factory, &PyType_Type, &wclass))
		return NULL;
	if (!PyCallable_Check(factory)) {
		PyErr_SetString(PyExc_TypeError, "error factory must be callable");
		return NULL;
	}
	if (!PyType_IsSubtype((PyTypeObject *)wclass, &pyw_weight_type)) {
		PyErr_SetString(PyExc_TypeError, "weight class must derive from _weightd.Weight");
		return NULL;
	}
	Py_INCREF(factory);
	Py_XSETREF(error_factory, factory);
	Py_INCREF(wclass);
	Py_XSETREF(weight_class, (PyTypeObject *)wclass);
	Py_RETURN_NONE;
}

static PyObject *mod_connect(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "socket", "name", NULL };
	const char *path = NULL, *name = NULL;
	weightd_client *c = NULL;
	weightd_error err;
	pyw_client *cl;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz:connect", kwlist, &path, &name))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = weightd_connect(path, name, &c, &err);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return pyw_error_raise(rc, &err);
	cl = PyObject_New(pyw_client, &pyw_client_type);
	if (!cl) {
		weightd_close(c);
		return NULL;
	}
	cl->c = c;
	cl->busy = 0;
	cl->closing = 0;
	cl->pid = getpid();
	return (PyObject *)cl;
}

static PyObject *mod_code_name(PyObject *self, PyObject *arg)
{
	long code = PyLong_AsLong(arg);

	if (code == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(weightd_code_name((int)code));
}

static PyObject *mod_version(PyObject *self, PyObject *unused)
{
	return PyUnicode_FromString(weightd_version());
}

static PyMethodDef mod_methods[] = {
	{ "connect", (PyCFunction)(void (*)(void))mod_connect, METH_VARARGS | METH_KEYWORDS,
	  "connect(socket=None, name=None) -> Client\n\nConnect to weightd (GIL released)." },
	{ "code_name", mod_code_name, METH_O, "code_name(code) -> str: the protocol's name of a code." },
	{ "library_version", mod_version, METH_NOARGS, "library_version() -> str: libweightd's version." },
	{ "_set_classes", mod_set_classes, METH_VARARGS,
	  "_set_classes(error_factory, weight_class): used once by weightd/__init__.py." },
	{ NULL, NULL, 0, NULL }
};

static struct PyModuleDef mod_def = {
	PyModuleDef_HEAD_INIT, "weightd._weightd",
	"Low-level binding of libweightd; use the weightd package instead.", -1, mod_methods,
	NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__weightd(void)
{
	PyTypeObject *types[] = { &pyw_client_type, &pyw_weight_type, &pyw_unit_type,
				  &pyw_request_type };
	PyObject *m;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyType_Ready(types[i]) < 0)
			return NULL;
	m = PyModule_Create(&mod_def);
	if (!m)
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		const char *dot = strrchr(types[i]->tp_name, '.');
		Py_INCREF(types[i]);
		if (PyModule_AddObject(m, dot ? dot + 1 : types[i]->tp_name, (PyObject *)types[i]) < 0) {
			Py_DECREF(types[i]);
			Py_DECREF(m);
			return NULL;
		}
	}
	if (PyModule_AddIntConstant(m, "MAX_DIMS", WEIGHTD_MAX_DIMS) < 0 ||
	    PyModule_AddStringConstant(m, "DEFAULT_SOCKET", WEIGHTD_DEFAULT_SOCKET) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
