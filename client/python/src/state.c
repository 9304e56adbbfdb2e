/* SPDX-License-Identifier: Apache-2.0 */
/* state.c - what the extension's types share of their module: its state found from any of their
 * objects, weightd.Error raised from a libweightd error, and the weightd.Weight class. */
#include "pyweightd.h"

/* The module's definition, given by module.c at import (the same one every time). */
static PyModuleDef *module_def;

void pyw_state_init(PyModuleDef *def)
{
	module_def = def;
}

pyw_state *pyw_state_of(PyObject *obj)
{
	PyObject *m = PyType_GetModuleByDef(Py_TYPE(obj), module_def);

	return m ? PyModule_GetState(m) : NULL;
}

/* Looked up on the first weight made, not at exec: weightd/__init__.py defines weightd.Weight
 * as a subclass of this module's Weight, so it cannot exist before the module does. A copy of
 * the module loaded apart from the package makes weights of its own type. */
PyTypeObject *pyw_weight_class(pyw_state *st)
{
	PyObject *pkg, *cls;

	if (st->weight_class)
		return st->weight_class;
	pkg = PyImport_ImportModule("weightd");
	if (!pkg)
		return NULL;
	cls = PyObject_GetAttrString(pkg, "Weight");
	Py_DECREF(pkg);
	if (!cls)
		return NULL;
	if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, st->weight_type)) {
		Py_DECREF(cls);
		cls = Py_NewRef(st->weight_type);
	}
	st->weight_class = (PyTypeObject *)cls;
	return st->weight_class;
}

/* The class comes from weightd.errors.error_class, so the package keeps the one definition of
 * the hierarchy; a failure to build the exception replaces it. */
PyObject *pyw_state_error(pyw_state *st, int rc, const weightd_error *err)
{
	int code = err && err->code ? err->code : (rc < 0 ? -rc : rc);
	const char *name = weightd_code_name(code);
	const char *msg = err && err->message[0] ? err->message : name;
	PyObject *cls, *exc;

	cls = PyObject_CallFunction(st->error_class, "s", name);
	if (!cls)
		return NULL;
	exc = PyObject_CallFunction(
		cls, "ssisssKiLL", msg, name, code, err ? err->checkpoint : "",
		err ? err->tensor : "", err ? err->slot : "",
		(unsigned long long)(err ? err->node : 0), (int)(err ? err->axis : -1),
		(long long)(err ? err->expected : 0), (long long)(err ? err->actual : 0));
	Py_DECREF(cls);
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

PyObject *pyw_error_raise(PyObject *owner, int rc, const weightd_error *err)
{
	pyw_state *st = pyw_state_of(owner);

	return st ? pyw_state_error(st, rc, err) : NULL;
}
