/*
 * dispatch.c: the binary fast path, in C.
 *
 * Mirrors runtime/dispatch.py `_binary_py` (the reference, and the fallback for
 * everything this file does not handle): two Tensors of one device and one dtype, or a
 * Tensor and a Python scalar that keeps the Tensor's dtype (the seeds' `x * 2.0`,
 * Collatz's `a % 2`), outside a device scope, with a kernel in `op.fast`: one kernel
 * call, one Tensor, one record when a tape of this thread watches an operand. Scalars,
 * Variables, mixed devices or dtypes, device scopes, missing kernels and kernel errors
 * go to the Python path (which re-runs the kernel and translates its error).
 *
 * Two caches keep the Python objects out of the hot path:
 *   - Python scalars: a direct-mapped cache of the 0-d tensors the Python path makes
 *     for them (`_scalar_or_none`), keyed by the scalar's exact type and bits (0.0 and
 *     -0.0 differ), the Tensor's dtype object and its device;
 *   - kernels: a direct-mapped cache of `op.fast[device.type][dtype]`, keyed by the op,
 *     device and dtype objects, emptied whenever the registry rebuilds a fast table
 *     (runtime/registry.py `_refresh_fast` calls `kernels_changed()`).
 */
#include "speedups.h"
#include <string.h>

#define SCACHE_SIZE 64
typedef struct {
    PyObject *dtype, *dev, *tensor;   /* owned; tensor == NULL: empty slot */
    int is_float;
    unsigned long long bits;
} ScalarSlot;
static ScalarSlot scache[SCACHE_SIZE];

#define KCACHE_SIZE 256
typedef struct {
    PyObject *op, *dev, *dtype, *fn;  /* owned; fn == NULL: empty slot */
} KernelSlot;
static KernelSlot kcache[KCACHE_SIZE];

void
sp_dispatch_clear(void)
{
    for (int i = 0; i < SCACHE_SIZE; i++) {
        Py_CLEAR(scache[i].tensor);
        Py_CLEAR(scache[i].dtype);
        Py_CLEAR(scache[i].dev);
    }
    for (int i = 0; i < KCACHE_SIZE; i++) {
        Py_CLEAR(kcache[i].fn);
        Py_CLEAR(kcache[i].op);
        Py_CLEAR(kcache[i].dev);
        Py_CLEAR(kcache[i].dtype);
    }
}

/* The cached 0-d tensor for Python scalar `v` next to Tensor `like` (of dtype `dtype`),
   a new reference; NULL with no error set: take the Python path. */
static PyObject *
scalar_tensor(PyObject *v, TensorObject *like, PyObject *dtype)
{
    unsigned long long bits;
    int is_float;
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        memcpy(&bits, &d, sizeof bits);
        is_float = 1;
    }
    else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (i == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return NULL;
        }
        bits = (unsigned long long)i;
        is_float = 0;
    }
    else
        return NULL;
    PyObject *dev = like->device;
    size_t h = (size_t)(bits ^ (bits >> 29) ^ ((size_t)dtype >> 4) ^ ((size_t)dev >> 6)
                        ^ (size_t)is_float);
    ScalarSlot *s = &scache[h % SCACHE_SIZE];
    if (s->tensor != NULL && s->dtype == dtype && s->dev == dev && s->is_float == is_float
        && s->bits == bits)
        return Py_NewRef(s->tensor);
    if (sp.scalar_for == NULL)
        return NULL;
    PyObject *args[2] = {v, (PyObject *)like};
    PyObject *t = PyObject_Vectorcall(sp.scalar_for, args, 2, NULL);
    if (t == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (!SP_IS_TENSOR(t)) {                 /* None: the scalar would not keep the dtype */
        Py_DECREF(t);
        return NULL;
    }
    Py_XSETREF(s->tensor, Py_NewRef(t));
    Py_XSETREF(s->dtype, Py_NewRef(dtype));
    Py_XSETREF(s->dev, Py_NewRef(dev));
    s->is_float = is_float;
    s->bits = bits;
    return t;
}

/* op.fast[dev.type][dtype] (borrowed, kept alive by the cache), or NULL with no error
   when there is none. */
static PyObject *
kernel_for(PyObject *op, PyObject *dev, PyObject *dtype)
{
    size_t h = ((size_t)op >> 4) ^ ((size_t)dev >> 6) ^ ((size_t)dtype >> 3);
    h ^= h >> 11;
    KernelSlot *k = &kcache[h % KCACHE_SIZE];
    if (k->fn != NULL && k->op == op && k->dev == dev && k->dtype == dtype)
        return k->fn;
    PyObject *fast = NULL, *devtype = NULL, *fn = NULL;
    fast = PyObject_GetAttr(op, sp.str_fast);
    if (fast == NULL || !PyDict_Check(fast))
        goto miss;
    devtype = PyObject_GetAttr(dev, sp.str_type);
    if (devtype == NULL)
        goto miss;
    PyObject *tbl = PyDict_GetItemWithError(fast, devtype);            /* borrowed */
    if (tbl == NULL || !PyDict_Check(tbl))
        goto miss;
    fn = PyDict_GetItemWithError(tbl, dtype);                          /* borrowed */
    if (fn == NULL)
        goto miss;
    Py_XSETREF(k->fn, Py_NewRef(fn));
    Py_XSETREF(k->op, Py_NewRef(op));
    Py_XSETREF(k->dev, Py_NewRef(dev));
    Py_XSETREF(k->dtype, Py_NewRef(dtype));
    Py_DECREF(fast);
    Py_DECREF(devtype);
    return k->fn;
miss:
    PyErr_Clear();
    Py_XDECREF(fast);
    Py_XDECREF(devtype);
    return NULL;
}

/* The kernel call of two Tensors of one device and dtype. */
static PyObject *
fast_tensors(PyObject *op, TensorObject *a, TensorObject *b)
{
    PyObject *dev = a->device;
    if (dev == NULL || a->data == NULL || b->data == NULL || b->device != dev)
        return NULL;
    PyObject *dta = sp_tensor_dtype(a);
    PyObject *dtb = dta ? sp_tensor_dtype(b) : NULL;
    if (dtb == NULL || dta != dtb) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *fn = kernel_for(op, dev, dta);
    if (fn == NULL)
        return NULL;
    Py_INCREF(fn);                            /* (a kernel may refresh the tables) */
    PyObject *args[2] = {a->data, b->data};
    PyObject *out = PyObject_Vectorcall(fn, args, 2, NULL);
    Py_DECREF(fn);
    if (out == NULL) {                        /* the Python path re-raises, translated */
        PyErr_Clear();
        return NULL;
    }
    PyObject *t = sp_tensor_new(out, dev);
    Py_DECREF(out);
    if (t == NULL)
        return NULL;
    if (!sp_counter_zero(sp.tapes) && sp_record_binary(op, (PyObject *)a, (PyObject *)b, t) < 0) {
        Py_DECREF(t);
        return NULL;                          /* the error stays set */
    }
    return t;
}

PyObject *
sp_fast_binary(PyObject *op, PyObject *a, PyObject *b)
{
    if (sp_Tensor == NULL || !sp_counter_zero(sp.scopes))
        return NULL;
    int ta = SP_IS_TENSOR(a), tb = SP_IS_TENSOR(b);
    if (ta && tb)
        return fast_tensors(op, (TensorObject *)a, (TensorObject *)b);
    if (!ta && !tb)
        return NULL;
    TensorObject *like = (TensorObject *)(ta ? a : b);
    if (like->data == NULL || like->device == NULL)
        return NULL;
    PyObject *dtype = sp_tensor_dtype(like);
    if (dtype == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *s = scalar_tensor(ta ? b : a, like, dtype);
    if (s == NULL)
        return NULL;
    PyObject *r = ta ? fast_tensors(op, like, (TensorObject *)s)
                     : fast_tensors(op, (TensorObject *)s, like);
    Py_DECREF(s);
    return r;
}

/* binary(op, a, b): dispatch.binary -- the fast path, else dispatch._binary_py */
static PyObject *
sp_binary(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "binary(op, a, b) takes 3 arguments");
        return NULL;
    }
    PyObject *r = sp_fast_binary(args[0], args[1], args[2]);
    if (r != NULL || PyErr_Occurred())
        return r;
    if (sp.slow_binary == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tapeflow.runtime._speedups.init() was not called");
        return NULL;
    }
    return PyObject_Vectorcall(sp.slow_binary, args, 3, NULL);
}

/* kernels_changed(): the registry rebuilt a fast table (forget the cached kernels) */
static PyObject *
sp_kernels_changed(PyObject *mod, PyObject *unused)
{
    for (int i = 0; i < KCACHE_SIZE; i++)
        Py_CLEAR(kcache[i].fn);
    Py_RETURN_NONE;
}

PyMethodDef sp_dispatch_methods[] = {
    {"binary", (PyCFunction)(void (*)(void))sp_binary, METH_FASTCALL,
     "binary(op, a, b): runtime.dispatch.binary with its fast path in C."},
    {"kernels_changed", sp_kernels_changed, METH_NOARGS,
     "Forget the cached kernels (the registry rebuilt an op's fast table)."},
    {NULL, NULL, 0, NULL},
};
