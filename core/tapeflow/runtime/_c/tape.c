/*
 * tape.c: recording an op on this thread's tapes, in C.
 *
 * Mirrors runtime/context.py _record_py: for every (watched, records) pair in this
 * thread's `_local.recorders` whose watched dict holds id() of an input, append the
 * record tuple (op, inputs, outputs, attrs, grad_fn) -- autodiff/tape.py TapeRecord's
 * layout -- and watch the outputs.
 */
#include "speedups.h"

static PyObject *sp_empty_dict = NULL;     /* the attrs of a binary operator's record */

/* op.differentiable, read when a tape is active (a plugin may change it) */
static int
op_differentiable(PyObject *op)
{
    PyObject *d = PyObject_GetAttr(op, sp.str_differentiable);
    if (d == NULL) {
        PyErr_Clear();
        return 1;
    }
    int r = PyObject_IsTrue(d);
    Py_DECREF(d);
    if (r < 0) {
        PyErr_Clear();
        return 1;
    }
    return r;
}

/*
 * record(op, inputs, outputs, attrs, grad_fn): runtime.context._record_py in C. For every
 * (watched, records) pair in this thread's `_local.recorders` whose watched dict
 * holds id() of an input, append the record tuple and watch the outputs.
 * Returns the record tuple, or None when no tape watched an input.
 */
static PyObject *
record_impl(PyObject *op, PyObject *inputs, PyObject *outputs, PyObject *attrs,
            PyObject *grad_fn)
{
    PyObject *recs = PyObject_GetAttr(sp.local, sp.str_recorders);
    if (recs == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *ins = PySequence_Fast(inputs, "record: inputs must be a sequence");
    PyObject *outs = ins ? PySequence_Fast(outputs, "record: outputs must be a sequence") : NULL;
    PyObject *rec = NULL;
    if (outs == NULL || !PyList_Check(recs))
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(recs); i++) {
        PyObject *pair = PyList_GET_ITEM(recs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
            continue;
        Py_INCREF(pair);
        PyObject *w = PyTuple_GET_ITEM(pair, 0), *lst = PyTuple_GET_ITEM(pair, 1);
        int found = 0;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(ins) && !found; j++) {
            PyObject *key = PyLong_FromVoidPtr(PySequence_Fast_GET_ITEM(ins, j));
            if (key == NULL) { Py_DECREF(pair); goto fail; }
            found = PyDict_Contains(w, key);
            Py_DECREF(key);
            if (found < 0) { Py_DECREF(pair); goto fail; }
        }
        if (found) {
            if (rec == NULL) {
                rec = PyTuple_Pack(5, op, ins, outs, attrs, grad_fn);
                if (rec == NULL) { Py_DECREF(pair); goto fail; }
            }
            if (PyList_Append(lst, rec) < 0) { Py_DECREF(pair); goto fail; }
            for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(outs); j++) {
                PyObject *o = PySequence_Fast_GET_ITEM(outs, j);
                PyObject *key = PyLong_FromVoidPtr(o);
                if (key == NULL || PyDict_SetItem(w, key, o) < 0) {
                    Py_XDECREF(key);
                    Py_DECREF(pair);
                    goto fail;
                }
                Py_DECREF(key);
            }
        }
        Py_DECREF(pair);
    }
    Py_DECREF(recs);
    Py_DECREF(ins);
    Py_DECREF(outs);
    if (rec == NULL)
        Py_RETURN_NONE;
    return rec;
fail:
    Py_XDECREF(rec);
    Py_DECREF(recs);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    return NULL;
}

static PyObject *
sp_record(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (sp_empty_dict == NULL && (sp_empty_dict = PyDict_New()) == NULL)
        return NULL;
    if (nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "record(op, inputs, outputs, attrs, grad_fn=None)");
        return NULL;
    }
    if (sp.local == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tapeflow.runtime._speedups.init() was not called");
        return NULL;
    }
    return record_impl(args[0], args[1], args[2], args[3], nargs == 5 ? args[4] : Py_None);
}

/* record(op, (a, b), (t,), {}, None) for a binary op, with nothing allocated when no
   tape of this thread watches `a` or `b` (the common case with a tape open: most
   tensors are not watched). 0 on success, -1 with an error set. */
int
sp_record_binary(PyObject *op, PyObject *a, PyObject *b, PyObject *t)
{
    if (sp_empty_dict == NULL && (sp_empty_dict = PyDict_New()) == NULL)
        return -1;
    PyObject *recs = PyObject_GetAttr(sp.local, sp.str_recorders);
    if (recs == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    int rc = 0;
    PyObject *ka = NULL, *kb = NULL, *kt = NULL, *rec = NULL;
    if (!PyList_Check(recs))
        goto out;
    ka = PyLong_FromVoidPtr(a);
    kb = PyLong_FromVoidPtr(b);
    if (ka == NULL || kb == NULL) { rc = -1; goto out; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(recs); i++) {
        PyObject *pair = PyList_GET_ITEM(recs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
            continue;
        PyObject *w = PyTuple_GET_ITEM(pair, 0), *lst = PyTuple_GET_ITEM(pair, 1);
        int found = PyDict_Contains(w, ka);
        if (found == 0)
            found = PyDict_Contains(w, kb);
        if (found < 0) { rc = -1; goto out; }
        if (!found)
            continue;
        if (rec == NULL) {
            if (!op_differentiable(op))
                goto out;
            PyObject *ins = PyTuple_Pack(2, a, b), *outs = PyTuple_Pack(1, t);
            if (ins != NULL && outs != NULL)
                rec = PyTuple_Pack(5, op, ins, outs, sp_empty_dict, Py_None);
            Py_XDECREF(ins);
            Py_XDECREF(outs);
            kt = PyLong_FromVoidPtr(t);
            if (rec == NULL || kt == NULL) { rc = -1; goto out; }
        }
        if (PyList_Append(lst, rec) < 0 || PyDict_SetItem(w, kt, t) < 0) { rc = -1; goto out; }
    }
out:
    Py_XDECREF(ka);
    Py_XDECREF(kb);
    Py_XDECREF(kt);
    Py_XDECREF(rec);
    Py_DECREF(recs);
    return rc;
}

PyMethodDef sp_tape_methods[] = {
    {"record", (PyCFunction)(void (*)(void))sp_record, METH_FASTCALL,
     "record(op, inputs, outputs, attrs, grad_fn=None): context.record in C."},
    {NULL, NULL, 0, NULL},
};
