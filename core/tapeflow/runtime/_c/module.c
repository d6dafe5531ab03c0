/*
 * module.c: tapeflow.runtime._speedups, the optional C core (see speedups.h for the
 * map of its files).
 *
 * Mirrors runtime/dispatch.py `_load_speedups`, which binds what the fast paths read
 * with init(): the runtime's counters (device scopes, recording tapes, tf.function
 * traces), the eager context's thread-local, and the Python functions the C paths fall
 * back to.
 */
#include "speedups.h"

SpState sp;

/* init(scopes, tapes, tracing, local, binary, scalar_or_none, numpy, execute, context) */
static PyObject *
sp_init(PyObject *mod, PyObject *args)
{
    PyObject *scopes, *tapes, *tracing, *local, *binary, *sfor, *numpy, *execute, *context;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOOOO", &PyList_Type, &scopes, &PyList_Type,
                          &tapes, &PyList_Type, &tracing, &local, &binary, &sfor, &numpy,
                          &execute, &context))
        return NULL;
    if (PyList_GET_SIZE(scopes) < 1 || PyList_GET_SIZE(tapes) < 1
        || PyList_GET_SIZE(tracing) < 1) {
        PyErr_SetString(PyExc_ValueError, "init: counter lists must have one element");
        return NULL;
    }
    if (!PyCallable_Check(binary) || !PyCallable_Check(execute)) {
        PyErr_SetString(PyExc_TypeError, "init: binary and execute must be callable");
        return NULL;
    }
    PyObject *ndarray = PyObject_GetAttrString(numpy, "ndarray");
    PyObject *generic = ndarray ? PyObject_GetAttrString(numpy, "generic") : NULL;
    if (generic == NULL || sp_bind_numpy(numpy) < 0) {
        Py_XDECREF(ndarray);
        Py_XDECREF(generic);
        return NULL;
    }
    Py_XSETREF(sp.scopes, Py_NewRef(scopes));
    Py_XSETREF(sp.tapes, Py_NewRef(tapes));
    Py_XSETREF(sp.tracing, Py_NewRef(tracing));
    Py_XSETREF(sp.local, Py_NewRef(local));
    Py_XSETREF(sp.slow_binary, Py_NewRef(binary));
    Py_XSETREF(sp.scalar_for, sfor == Py_None ? NULL : Py_NewRef(sfor));
    Py_XSETREF(sp.ndarray, ndarray);
    Py_XSETREF(sp.generic, generic);
    Py_XSETREF(sp.slow_execute, Py_NewRef(execute));
    Py_XSETREF(sp.context, Py_NewRef(context));
    sp_dispatch_clear();                 /* (re-)init: forget cached scalars and kernels */
    Py_RETURN_NONE;
}

static PyMethodDef sp_methods[] = {
    {"init", sp_init, METH_VARARGS, "Bind the runtime's counters and Python fallbacks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sp_module = {
    PyModuleDef_HEAD_INIT, "tapeflow.runtime._speedups",
    "The optional C core of tapeflow: Tensor's base type, the binary fast path, recording.",
    -1, sp_methods,
};

static int
add_methods(PyObject *m, PyMethodDef *defs)
{
    PyObject *name = PyModule_GetNameObject(m);
    if (name == NULL)
        return -1;
    for (PyMethodDef *d = defs; d->ml_name != NULL; d++) {
        PyObject *f = PyCFunction_NewEx(d, m, name);
        if (f == NULL || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            Py_DECREF(name);
            return -1;
        }
    }
    Py_DECREF(name);
    return 0;
}

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&sp_module);
    if (m == NULL)
        return NULL;
    sp.zero = PyLong_FromLong(0);
    sp.str_dtype = PyUnicode_InternFromString("dtype");
    sp.str_type = PyUnicode_InternFromString("type");
    sp.str_fast = PyUnicode_InternFromString("fast");
    sp.str_recorders = PyUnicode_InternFromString("recorders");
    sp.str_differentiable = PyUnicode_InternFromString("differentiable");
    sp.str_ndim = PyUnicode_InternFromString("ndim");
    sp.str_num_outputs = PyUnicode_InternFromString("num_outputs");
    sp.str_record = PyUnicode_InternFromString("record");
    sp.str_read_value = PyUnicode_InternFromString("read_value");
    sp.empty_dict = PyDict_New();
    if (sp.zero == NULL || sp.str_dtype == NULL || sp.str_type == NULL || sp.str_fast == NULL
        || sp.str_recorders == NULL || sp.str_differentiable == NULL || sp.str_ndim == NULL
        || sp.str_num_outputs == NULL || sp.str_record == NULL || sp.str_read_value == NULL || sp.empty_dict == NULL
        || sp_tensor_ready(m) < 0 || add_methods(m, sp_tensor_methods) < 0
        || add_methods(m, sp_dispatch_methods) < 0 || add_methods(m, sp_tape_methods) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
