/*
 * dispatch.c: the binary fast path, in C.
 *
 * Mirrors runtime/dispatch.py `_binary_py` and `_execute_py`'s fast path (the
 * references, and the fallbacks for everything this file does not handle). binary(): two Tensors of one device and one dtype, or a
 * Tensor and a Python scalar that keeps the Tensor's dtype (the seeds' `x * 2.0`,
 * Collatz's `a % 2`), outside a device scope, with a kernel in `op.fast`: one kernel
 * call, one Tensor, one record when a tape of this thread watches an operand. Scalars,
 * Variables, mixed devices or dtypes, device scopes, missing kernels and kernel errors
 * go to the Python path (which re-runs the kernel and translates its error).
 * execute(op, inputs, attrs): one or two Tensors of one device and dtype, a one-output
 * op with a kernel in `op.fast`: the kernel called with the attrs as keywords, and the
 * record made by `context.record` when a tape is active.
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
    int scalar_op;                    /* SCALAR_* of fn, or -1 */
} KernelSlot;

/*
 * NumPy scalars. NumPy's ops on 0-d arrays return NumPy scalars, whose own arithmetic
 * (`np.float64(27) % 2`, ~60 ns) is an order of magnitude cheaper than a ufunc call
 * (~700 ns); loops over scalar tensors (the seeds' Collatz loop) are made of these.
 * When the kernel is one of the ufuncs below and both operands are NumPy scalars of one
 * type, the scalar's number slot computes the same IEEE operation (NumPy implements
 * both with the same npy_* functions): for the real floating types every operation
 * below, for every type the comparisons (no warnings, no overflow). Integer arithmetic
 * stays with the ufunc: NumPy's scalar arithmetic warns on overflow, its ufuncs wrap.
 * A floating-point warning says "scalar add" where the ufunc says "add".
 */
enum { SC_ADD, SC_SUB, SC_MUL, SC_TRUEDIV, SC_FLOORDIV, SC_MOD, SC_EQ, SC_NE, SC_LT, SC_LE,
       SC_GT, SC_GE, NSCALAR_OPS };
static PyObject *scalar_ops = NULL;      /* {ufunc: SC_*} (init) */
static PyObject *float_types = NULL;     /* (np.float16, np.float32, np.float64) */
static PyObject *scalar_types = NULL;    /* the NumPy scalar types of the comparisons */

static int
type_in(PyObject *types, PyTypeObject *t)
{
    if (types == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++)
        if (PyTuple_GET_ITEM(types, i) == (PyObject *)t)
            return 1;
    return 0;
}

/* x OP y by NumPy's scalar arithmetic, or NULL (no error) when it does not apply */
static PyObject *
scalar_math(int k, PyObject *x, PyObject *y)
{
    PyTypeObject *t = Py_TYPE(x);
    if (k < 0 || Py_TYPE(y) != t)
        return NULL;
    PyObject *r;
    if (k >= SC_EQ) {
        static const int cmp[] = {Py_EQ, Py_NE, Py_LT, Py_LE, Py_GT, Py_GE};
        if (!type_in(scalar_types, t))
            return NULL;
        r = PyObject_RichCompare(x, y, cmp[k - SC_EQ]);
    }
    else {
        if (!type_in(float_types, t))
            return NULL;
        switch (k) {
        case SC_ADD: r = PyNumber_Add(x, y); break;
        case SC_SUB: r = PyNumber_Subtract(x, y); break;
        case SC_MUL: r = PyNumber_Multiply(x, y); break;
        case SC_TRUEDIV: r = PyNumber_TrueDivide(x, y); break;
        case SC_FLOORDIV: r = PyNumber_FloorDivide(x, y); break;
        default: r = PyNumber_Remainder(x, y); break;
        }
    }
    if (r == NULL)                      /* (np.errstate(all="raise"): the ufunc raises) */
        PyErr_Clear();
    return r;
}
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
   when there is none; *scalar_op: its SCALAR_* code or -1 (may be NULL). */
static PyObject *
kernel_for(PyObject *op, PyObject *dev, PyObject *dtype, int *scalar_op)
{
    size_t h = ((size_t)op >> 4) ^ ((size_t)dev >> 6) ^ ((size_t)dtype >> 3);
    h ^= h >> 11;
    KernelSlot *k = &kcache[h % KCACHE_SIZE];
    if (k->fn != NULL && k->op == op && k->dev == dev && k->dtype == dtype) {
        if (scalar_op != NULL)
            *scalar_op = k->scalar_op;
        return k->fn;
    }
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
    PyObject *nout = PyObject_GetAttr(op, sp.str_num_outputs);   /* (one output only) */
    int one = nout != NULL && PyLong_CheckExact(nout) && PyLong_AsLong(nout) == 1;
    Py_XDECREF(nout);
    if (!one)
        goto miss;
    k->scalar_op = -1;
    if (scalar_ops != NULL) {
        PyObject *code = PyDict_GetItemWithError(scalar_ops, fn);      /* borrowed */
        if (code != NULL && PyLong_Check(code))
            k->scalar_op = (int)PyLong_AsLong(code);
        if (k->scalar_op >= NSCALAR_OPS)
            k->scalar_op = -1;
        PyErr_Clear();
    }
    Py_XSETREF(k->fn, Py_NewRef(fn));
    Py_XSETREF(k->op, Py_NewRef(op));
    Py_XSETREF(k->dev, Py_NewRef(dev));
    Py_XSETREF(k->dtype, Py_NewRef(dtype));
    Py_DECREF(fast);
    Py_DECREF(devtype);
    if (scalar_op != NULL)
        *scalar_op = k->scalar_op;
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
    int sop = -1;
    PyObject *fn = kernel_for(op, dev, dta, &sop);
    if (fn == NULL)
        return NULL;
    PyObject *out = sop >= 0 ? scalar_math(sop, a->data, b->data) : NULL;
    if (out == NULL) {
        Py_INCREF(fn);                        /* (a kernel may refresh the tables) */
        PyObject *args[2] = {a->data, b->data};
        out = PyObject_Vectorcall(fn, args, 2, NULL);
        Py_DECREF(fn);
    }
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

/* The exact Variable class (bind_variable), whose operands the fast paths read. */
static PyTypeObject *sp_Variable = NULL;

/* x's current value if x is a Variable (read_value(): under its lock, watched by the
   tapes that watch reads -- what the Python path does first), a new reference; else, or
   when the value is not an exact Tensor, NULL with no error; NULL with an error when
   the read failed (the Python path would raise it too). */
static PyObject *
read_variable(PyObject *x)
{
    if (sp_Variable == NULL || Py_TYPE(x) != sp_Variable)
        return NULL;
    PyObject *v = PyObject_CallMethodNoArgs(x, sp.str_read_value);
    if (v != NULL && !SP_IS_TENSOR(v))
        Py_CLEAR(v);
    return v;
}

static PyObject *fast_operands(PyObject *op, PyObject *a, PyObject *b);

PyObject *
sp_fast_binary(PyObject *op, PyObject *a, PyObject *b)
{
    if (sp_Tensor == NULL || !sp_counter_zero(sp.scopes))
        return NULL;
    if (sp_Variable == NULL || (Py_TYPE(a) != sp_Variable && Py_TYPE(b) != sp_Variable))
        return fast_operands(op, a, b);
    PyObject *ra = Py_TYPE(a) == sp_Variable ? read_variable(a) : Py_NewRef(a);
    if (ra == NULL)
        return NULL;
    PyObject *rb = Py_TYPE(b) == sp_Variable ? read_variable(b) : Py_NewRef(b);
    PyObject *r = rb != NULL ? fast_operands(op, ra, rb) : NULL;
    Py_DECREF(ra);
    Py_XDECREF(rb);
    return r;
}

/* sp_fast_binary once Variables are read */
static PyObject *
fast_operands(PyObject *op, PyObject *a, PyObject *b)
{
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

/* op(*inputs, **attrs) on one or two Tensors of one device and dtype (dispatch.py
   `_execute_py`'s fast path): the result, or NULL (no error: the Python path). */
static PyObject *
fast_execute(PyObject *op, PyObject *inputs, PyObject *attrs)
{
    if (sp_Tensor == NULL || !sp_counter_zero(sp.scopes) || !PyTuple_CheckExact(inputs))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(inputs);
    if (n < 1 || n > 2 || (attrs != NULL && !PyDict_CheckExact(attrs)))
        return NULL;
    PyObject *args[2];
    PyObject *dev = NULL, *dtype = NULL, *read = NULL, *fn = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(inputs, i);
        if (!SP_IS_TENSOR(x)) {
            PyObject *v = read_variable(x);
            if (v == NULL)
                goto not_mine;
            if (read == NULL && (read = PyTuple_New(n)) == NULL) {
                Py_DECREF(v);
                goto not_mine;
            }
            PyTuple_SET_ITEM(read, i, v);
            x = v;
        }
        else if (read != NULL)
            PyTuple_SET_ITEM(read, i, Py_NewRef(x));
        TensorObject *t = (TensorObject *)x;
        PyObject *dt = sp_tensor_dtype(t);
        if (dt == NULL || t->device == NULL) {
            PyErr_Clear();
            goto not_mine;
        }
        if (i == 0) {
            dev = t->device;
            dtype = dt;
        }
        else if (t->device != dev || dt != dtype)
            goto not_mine;
        args[i] = t->data;
    }
    if (read != NULL && n == 2 && PyTuple_GET_ITEM(read, 0) == NULL)
        PyTuple_SET_ITEM(read, 0, Py_NewRef(PyTuple_GET_ITEM(inputs, 0)));
    fn = kernel_for(op, dev, dtype, NULL);
    if (fn == NULL)
        goto not_mine;
    if (read != NULL)                       /* (the tape records the values read) */
        inputs = read;
    Py_INCREF(fn);
    PyObject *out = (attrs != NULL && PyDict_GET_SIZE(attrs) > 0)
        ? PyObject_VectorcallDict(fn, args, n, attrs) : PyObject_Vectorcall(fn, args, n, NULL);
    Py_DECREF(fn);
    if (out == NULL) {                        /* the Python path re-raises, translated */
        PyErr_Clear();
        goto not_mine;
    }
    PyObject *t = sp_tensor_new(out, dev);
    Py_DECREF(out);
    if (t == NULL || sp_counter_zero(sp.tapes)) {
        Py_XDECREF(read);
        return t;
    }
    /* a tape records somewhere: context.record(op, inputs, (t,), attrs) as dispatch.py
       does, for a differentiable op */
    PyObject *d = PyObject_GetAttr(op, sp.str_differentiable);
    int differentiable = d == NULL ? -1 : PyObject_IsTrue(d);
    Py_XDECREF(d);
    PyObject *rec = differentiable > 0 ? PyObject_GetAttr(sp.context, sp.str_record) : NULL;
    PyObject *outs = rec != NULL ? PyTuple_Pack(1, t) : NULL;
    PyObject *r = NULL;
    if (outs != NULL) {
        PyObject *rargs[4] = {op, inputs, outs, attrs != NULL ? attrs : sp.empty_dict};
        r = PyObject_Vectorcall(rec, rargs, 4, NULL);
    }
    Py_XDECREF(rec);
    Py_XDECREF(outs);
    Py_XDECREF(read);
    if (differentiable < 0 || (differentiable > 0 && r == NULL)) {
        Py_XDECREF(r);
        Py_DECREF(t);
        return NULL;                          /* the error stays set */
    }
    Py_XDECREF(r);
    return t;
not_mine:                                     /* (an error from read_value stays set) */
    Py_XDECREF(read);
    return NULL;
}

/* execute(op, inputs, attrs={}): dispatch.execute -- the fast path, else _execute_py */
static PyObject *
sp_execute(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "execute(op, inputs, attrs={}) takes 2 or 3 arguments");
        return NULL;
    }
    PyObject *r = fast_execute(args[0], args[1], nargs == 3 ? args[2] : NULL);
    if (r != NULL || PyErr_Occurred())
        return r;
    if (sp.slow_execute == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tapeflow.runtime._speedups.init() was not called");
        return NULL;
    }
    return PyObject_Vectorcall(sp.slow_execute, args, nargs, NULL);
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

/* NumPy's ufuncs and scalar types for scalar_math (module.c's init): 0, or -1 with an
   error. */
int
sp_bind_numpy(PyObject *np)
{
    static const char *ufuncs[NSCALAR_OPS] = {
        "add", "subtract", "multiply", "true_divide", "floor_divide", "remainder",
        "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    };
    static const char *all[] = {"bool_", "int8", "uint8", "int16", "uint16", "int32",
                                "uint32", "int64", "uint64", "float16", "float32", "float64"};
    PyObject *ops = PyDict_New();
    PyObject *ft = PyTuple_New(3), *at = PyTuple_New(12);
    if (ops == NULL || ft == NULL || at == NULL)
        goto fail;
    for (int i = 0; i < NSCALAR_OPS; i++) {
        PyObject *f = PyObject_GetAttrString(np, ufuncs[i]);
        PyObject *code = f != NULL ? PyLong_FromLong(i) : NULL;
        int rc = code != NULL ? PyDict_SetItem(ops, f, code) : -1;
        Py_XDECREF(f);
        Py_XDECREF(code);
        if (rc < 0)
            goto fail;
    }
    for (int i = 0; i < 12; i++) {
        PyObject *t = PyObject_GetAttrString(np, all[i]);
        if (t == NULL)
            goto fail;
        PyTuple_SET_ITEM(at, i, t);
        if (i >= 9)                         /* float16, float32, float64 */
            PyTuple_SET_ITEM(ft, i - 9, Py_NewRef(t));
    }
    Py_XSETREF(scalar_ops, ops);
    Py_XSETREF(float_types, ft);
    Py_XSETREF(scalar_types, at);
    for (int i = 0; i < KCACHE_SIZE; i++)
        Py_CLEAR(kcache[i].fn);
    return 0;
fail:
    Py_XDECREF(ops);
    Py_XDECREF(ft);
    Py_XDECREF(at);
    return -1;
}

/* bind_variable(Variable): the class whose instances the fast paths read */
static PyObject *
sp_bind_variable(PyObject *mod, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_variable: a class expected");
        return NULL;
    }
    Py_XSETREF(sp_Variable, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
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
    {"execute", (PyCFunction)(void (*)(void))sp_execute, METH_FASTCALL,
     "execute(op, inputs, attrs={}): runtime.dispatch.execute with its fast path in C."},
    {"bind_variable", sp_bind_variable, METH_O,
     "bind_variable(Variable): operands of this class are read (read_value()) in C."},
    {"kernels_changed", sp_kernels_changed, METH_NOARGS,
     "Forget the cached kernels (the registry rebuilt an op's fast table)."},
    {NULL, NULL, 0, NULL},
};
