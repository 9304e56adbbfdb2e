/* SPDX-License-Identifier: Apache-2.0 */
/* pyweightd.h - the weightd._weightd extension: shared declarations of its module state and of
 * its four heap types (Client, Weight, Unit, Request) over libweightd's public API. */
#ifndef PYWEIGHTD_H
#define PYWEIGHTD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sys/types.h>
#include <unistd.h>

#include <weightd/client.h>

/*
 * A connection. libweightd forbids weightd_close while another call on the client runs, so every
 * call that releases the GIL counts itself in `busy`; close() on a busy client only marks it
 * closing, and the last call to leave closes it.
 */
typedef struct pyw_client {
	PyObject_HEAD
	weightd_client *c;   /* NULL once closed */
	int busy;            /* calls in progress without the GIL */
	int closing;
	pid_t pid;           /* the process that connected: a forked child must not call in */
} pyw_client;

/*
 * A weight (standalone, from get/share) or one slot of a unit. Its description is copied into
 * Python objects when it is made, so it reads the same after release. The memory is reached only
 * through the buffer protocol: each export counts in `exports` (and in the unit's for a slot),
 * and the C weight is let go only when it is released (release() or deallocation) and no export
 * is left. Views therefore never outlive the mapping.
 */
typedef struct pyw_weight {
	PyObject_HEAD
	pyw_client *client;        /* for share(); a reference */
	weightd_weight *own;       /* a standalone weight's C weight; NULL once let go */
	struct pyw_unit *unit;     /* a slot's unit (a reference), else NULL */
	PyObject *slot;            /* the slot's name (str), else NULL */
	const void *data;          /* where it is mapped (NULL for 0 bytes) */
	Py_ssize_t exports;
	int busy;                  /* share() running without the GIL */
	int released;
	PyObject *name, *dtype, *shape, *digest, *key;
	unsigned long long nbytes, generation, handle;
	/* buffer layout */
	char format[4];
	Py_ssize_t itemsize;
	int ndim;
	Py_ssize_t bshape[WEIGHTD_MAX_DIMS + 1];
	Py_ssize_t bstrides[WEIGHTD_MAX_DIMS + 1];
} pyw_weight;

/* A unit bound all-or-nothing; freed when released (or deallocated) with no export left. */
typedef struct pyw_unit {
	PyObject_HEAD
	pyw_client *client;
	weightd_unit *u;           /* NULL once freed */
	int submitted, validated, busy, released;
	Py_ssize_t exports;        /* exports of all its slots' weights */
} pyw_unit;

/* An in-flight materialization (weightd_inflight). */
typedef struct pyw_request {
	PyObject_HEAD
	pyw_client *client;
	weightd_inflight *f;       /* NULL once finish() took it */
} pyw_request;

/*
 * The state of one _weightd module object (one per interpreter, or per re-initialisation): its
 * types, made from the specs below by the module's exec, and what it takes from the weightd
 * package. Every pointer is a strong reference, visited and cleared with the module.
 */
typedef struct pyw_state {
	PyTypeObject *client_type, *weight_type, *unit_type, *request_type;
	PyObject *error_class; /* weightd.errors.error_class: code name -> weightd.Error class */
	PyTypeObject *weight_class; /* weightd.Weight once looked up (see pyw_weight_class) */
} pyw_state;

extern PyType_Spec pyw_client_spec, pyw_weight_spec, pyw_unit_spec, pyw_request_spec;

/* state.c: remember the module's definition (module.c, before the module is made). */
void pyw_state_init(PyModuleDef *def);
/* The state of the module whose types `obj` is an instance of (or of a subclass of); NULL with
 * an exception set for any other object. */
pyw_state *pyw_state_of(PyObject *obj);
/* Raise the weightd.Error (subclass) that `err` describes (rc: the call's return), as the
 * module of `owner` (an object of one of its types) knows it. Always returns NULL. */
PyObject *pyw_error_raise(PyObject *owner, int rc, const weightd_error *err);
/* The same with the module's state at hand. Always returns NULL. */
PyObject *pyw_state_error(pyw_state *st, int rc, const weightd_error *err);
/* The class a new Weight is made of: weightd.Weight, which adds the numpy and torch views, when
 * it derives from this module's Weight type; else that type itself. NULL with an exception set
 * when the weightd package cannot be imported. */
PyTypeObject *pyw_weight_class(pyw_state *st);

/* client.c: enter/leave a call made without the GIL; enter raises when the client is closed or
 * belongs to the parent of a fork. */
int pyw_client_enter(pyw_client *cl);
void pyw_client_leave(pyw_client *cl);
int pyw_client_check(pyw_client *cl);
/* True in a child forked after the client connected: libweightd must not be called there (a
 * release would drop the parent's references), so objects are let go without calling it. */
int pyw_client_forked(const pyw_client *cl);

/* weight.c: a Python weight owning `w` (a standalone weight; taken in every case). */
PyObject *pyw_weight_new_owned(pyw_client *cl, weightd_weight *w);
/* A Python weight for slot `slot` of a validated unit. */
PyObject *pyw_weight_new_slot(pyw_unit *un, const char *slot);

/* unit.c: free the unit's C unit when it is released and nothing exports its memory. */
void pyw_unit_maybe_free(pyw_unit *un);

#endif
