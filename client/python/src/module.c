/* SPDX-License-Identifier: Apache-2.0 */
/* module.c - the weightd._weightd module: multi-phase init that makes the four types and fills
 * its per-module state, connect(). The types reach that state through state.c, never through
 * here, so calls go one way: module.c down into the types, the types down into state.c. */
#include "pyweightd.h"

static PyObject *mod_connect(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "socket", "name", NULL };
	pyw_state *st = PyModule_GetState(self);
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
		return pyw_state_error(st, rc, &err);
	cl = (pyw_client *)st->client_type->tp_alloc(st->client_type, 0);
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

/* Make the types and take the error classes from weightd.errors (which imports nothing of the
 * extension, so importing it here while weightd/__init__.py is still running is safe). On
 * failure the module is dropped, and its clear releases what was made. */
static int mod_exec(PyObject *m)
{
	pyw_state *st = PyModule_GetState(m);
	struct {
		PyType_Spec *spec;
		PyTypeObject **type;
	} types[] = {
		{ &pyw_client_spec, &st->client_type },
		{ &pyw_weight_spec, &st->weight_type },
		{ &pyw_unit_spec, &st->unit_type },
		{ &pyw_request_spec, &st->request_type },
	};
	PyObject *errors;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		*types[i].type = (PyTypeObject *)PyType_FromModuleAndSpec(m, types[i].spec, NULL);
		if (!*types[i].type || PyModule_AddType(m, *types[i].type) < 0)
			return -1;
	}
	errors = PyImport_ImportModule("weightd.errors");
	if (!errors)
		return -1;
	st->error_class = PyObject_GetAttrString(errors, "error_class");
	Py_DECREF(errors);
	if (!st->error_class)
		return -1;
	if (PyModule_AddIntConstant(m, "MAX_DIMS", WEIGHTD_MAX_DIMS) < 0 ||
	    PyModule_AddStringConstant(m, "DEFAULT_SOCKET", WEIGHTD_DEFAULT_SOCKET) < 0)
		return -1;
	return 0;
}

/* The state's references take part in cycles (each type refers back to the module), so the
 * collector must see them. */
static int mod_traverse(PyObject *m, visitproc visit, void *arg)
{
	pyw_state *st = PyModule_GetState(m);

	Py_VISIT(st->client_type);
	Py_VISIT(st->weight_type);
	Py_VISIT(st->unit_type);
	Py_VISIT(st->request_type);
	Py_VISIT(st->error_class);
	Py_VISIT(st->weight_class);
	return 0;
}

static int mod_clear(PyObject *m)
{
	pyw_state *st = PyModule_GetState(m);

	Py_CLEAR(st->client_type);
	Py_CLEAR(st->weight_type);
	Py_CLEAR(st->unit_type);
	Py_CLEAR(st->request_type);
	Py_CLEAR(st->error_class);
	Py_CLEAR(st->weight_class);
	return 0;
}

static void mod_free(void *m)
{
	mod_clear(m);
}

static PyMethodDef mod_methods[] = {
	{ "connect", (PyCFunction)(void (*)(void))mod_connect, METH_VARARGS | METH_KEYWORDS,
	  "connect(socket=None, name=None) -> Client\n\nConnect to weightd (GIL released)." },
	{ "code_name", mod_code_name, METH_O,
	  "code_name(code) -> str: the protocol's name of a code." },
	{ "library_version", mod_version, METH_NOARGS,
	  "library_version() -> str: libweightd's version." },
	{ NULL, NULL, 0, NULL }
};

static PyModuleDef_Slot mod_slots[] = {
	{ Py_mod_exec, mod_exec },
	{ 0, NULL },
};

static PyModuleDef pyw_module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "weightd._weightd",
	.m_doc = "Low-level binding of libweightd; use the weightd package instead.",
	.m_size = sizeof(pyw_state),
	.m_methods = mod_methods,
	.m_slots = mod_slots,
	.m_traverse = mod_traverse,
	.m_clear = mod_clear,
	.m_free = mod_free,
};

PyMODINIT_FUNC PyInit__weightd(void)
{
	pyw_state_init(&pyw_module_def);
	return PyModuleDef_Init(&pyw_module_def);
}
