/*
 * tapeflow.runtime._speedups: the binary-operator fast path in C (optional).
 *
 * `a + b` on two Tensors of one device and dtype (or a Tensor and a Python scalar
 * that keeps its dtype: `x * 2.0`) is the figure users compare an
 * eager runtime by. In Python the method frame, slot loads and the Tensor
 * allocation cost ~2x NumPy's own `a + b`; this module removes them. It does
 * exactly what `tapeflow.runtime.dispatch.make_binary_operator` does in Python, and
 * falls back to the Python path (`dispatch.binary`) for everything else: scalars, Variables,
 * mixed devices or dtypes, device scopes, missing kernels, and kernel errors
 * (the Python path re-runs the kernel and translates its error). fast_binary
 * returns NULL with no error set to mean "take the Python path", and NULL with an
 * error set only when recording on a tape failed.
 *
 * A BinOp object is stored in the Tensor class dict as `__add__` etc. It is a
 * method descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR), so the interpreter calls it
 * with (self, other) without binding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

static PyTypeObject *TensorType = NULL;   /* tapeflow.runtime.tensor.Tensor */
static Py_ssize_t off_data = -1, off_device = -1;
static PyObject *scopes_list = NULL;      /* runtime.devices._active_scopes: [count] */
static PyObject *tapes_list = NULL;       /* runtime.context.tapes_active: [count] */
static PyObject *slow_binary = NULL;      /* runtime.dispatch.binary(op, a, b) */
static PyObject *local_obj = NULL;        /* runtime.context._local (threading.local) */
static PyObject *empty_dict = NULL;
static PyObject *str_dtype = NULL, *str_type = NULL, *str_recorders = NULL;
static PyObject *str_differentiable = NULL;
static PyObject *scalar_for = NULL;       /* dispatch._scalar_or_none(value, like) */

/*
 * Python scalars next to a Tensor (`x * 2.0`, Collatz's `a % 2`): a direct-mapped cache
 * of the 0-d tensors the Python path makes for them (dispatch._scalar_like), keyed by
 * the scalar's exact type and bits (so 0.0 and -0.0 differ), the Tensor's dtype object
 * and its device. A miss asks dispatch._scalar_or_none, which returns None when NumPy 2's
 * weak-scalar rule would not keep the Tensor's dtype (the Python path then decides).
 */
#define SCACHE_SIZE 64
typedef struct {
    PyObject *dtype, *dev, *tensor;   /* owned; tensor == NULL: empty slot */
    int is_float;
    unsigned long long bits;
} ScalarSlot;
static ScalarSlot scache[SCACHE_SIZE];

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
    PyObject *recs = PyObject_GetAttr(local_obj, str_recorders);
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
    if (nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "record(op, inputs, outputs, attrs, grad_fn=None)");
        return NULL;
    }
    if (local_obj == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tapeflow.runtime._speedups.init() was not called");
        return NULL;
    }
    return record_impl(args[0], args[1], args[2], args[3], nargs == 5 ? args[4] : Py_None);
}

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static int op_differentiable(PyObject *op);

/* record(op, (a, b), (t,), {}, None) for a binary op, with nothing allocated when no
   tape of this thread watches `a` or `b` (the common case with a tape open: most
   tensors are not watched). 0 on success, -1 with an error set. */
static int
record_binary(PyObject *op, PyObject *a, PyObject *b, PyObject *t)
{
    PyObject *recs = PyObject_GetAttr(local_obj, str_recorders);
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
                rec = PyTuple_Pack(5, op, ins, outs, empty_dict, Py_None);
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

typedef struct {
    PyObject_HEAD
    PyObject *op;      /* the OpDef */
    PyObject *fast;    /* op.fast: {device type: {numpy dtype: fn}} (shared, mutated in place) */
    int reverse;
    vectorcallfunc vectorcall;
} BinOp;

static int
counter_is_zero(PyObject *lst)
{
    PyObject *v = PyList_GET_ITEM(lst, 0);
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
    long n = PyLong_AsLong(v);
    if (n == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return n == 0;
}

/* op.differentiable, read when a tape is active (a plugin may change it) */
static int
op_differentiable(PyObject *op)
{
    PyObject *d = PyObject_GetAttr(op, str_differentiable);
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

/* The cached 0-d tensor for Python scalar `v` next to Tensor `like`, a new reference;
   NULL with no error set: take the Python path. */
static PyObject *
scalar_tensor(PyObject *v, PyObject *like, PyObject *dtype)
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
        if (overflow || (i == -1 && PyErr_Occurred())) { PyErr_Clear(); return NULL; }
        bits = (unsigned long long)i;
        is_float = 0;
    }
    else
        return NULL;
    PyObject *dev = SLOT(like, off_device);
    size_t h = (size_t)(bits ^ (bits >> 29) ^ ((size_t)dtype >> 4) ^ ((size_t)dev >> 6)
                        ^ (size_t)is_float);
    ScalarSlot *s = &scache[h % SCACHE_SIZE];
    if (s->tensor != NULL && s->dtype == dtype && s->dev == dev && s->is_float == is_float
        && s->bits == bits)
        return Py_NewRef(s->tensor);
    if (scalar_for == NULL)
        return NULL;
    PyObject *args[2] = {v, like};
    PyObject *t = PyObject_Vectorcall(scalar_for, args, 2, NULL);
    if (t == NULL) { PyErr_Clear(); return NULL; }
    if (Py_TYPE(t) != TensorType) { Py_DECREF(t); return NULL; }
    Py_XSETREF(s->tensor, Py_NewRef(t));
    Py_XSETREF(s->dtype, Py_NewRef(dtype));
    Py_XSETREF(s->dev, Py_NewRef(dev));
    s->is_float = is_float;
    s->bits = bits;
    return t;
}

static PyObject *fast_tensors(BinOp *f, PyObject *a, PyObject *b);

static PyObject *
fast_binary(BinOp *f, PyObject *a, PyObject *b)
{
    if (!counter_is_zero(scopes_list))
        return NULL;
    int ta = Py_TYPE(a) == TensorType, tb = Py_TYPE(b) == TensorType;
    if (ta && tb)
        return fast_tensors(f, a, b);
    if (!ta && !tb)
        return NULL;
    PyObject *like = ta ? a : b, *data = SLOT(like, off_data);
    if (data == NULL || SLOT(like, off_device) == NULL)
        return NULL;
    PyObject *dtype = PyObject_GetAttr(data, str_dtype);
    if (dtype == NULL) { PyErr_Clear(); return NULL; }
    PyObject *s = scalar_tensor(ta ? b : a, like, dtype);
    Py_DECREF(dtype);
    if (s == NULL)
        return NULL;
    PyObject *r = ta ? fast_tensors(f, a, s) : fast_tensors(f, s, a);
    Py_DECREF(s);
    return r;
}

static PyObject *
fast_tensors(BinOp *f, PyObject *a, PyObject *b)
{
    PyObject *dev = SLOT(a, off_device), *x = SLOT(a, off_data), *y = SLOT(b, off_data);
    if (dev == NULL || x == NULL || y == NULL || SLOT(b, off_device) != dev)
        return NULL;
    PyObject *dtx = PyObject_GetAttr(x, str_dtype);
    if (dtx == NULL) { PyErr_Clear(); return NULL; }
    PyObject *dty = PyObject_GetAttr(y, str_dtype);
    if (dty == NULL) { PyErr_Clear(); Py_DECREF(dtx); return NULL; }
    PyObject *result = NULL;
    if (dtx == dty) {
        PyObject *dtype_name = PyObject_GetAttr(dev, str_type);
        if (dtype_name == NULL) { PyErr_Clear(); goto done; }
        PyObject *tbl = PyDict_GetItemWithError(f->fast, dtype_name);   /* borrowed */
        Py_DECREF(dtype_name);
        if (tbl == NULL || !PyDict_CheckExact(tbl)) { PyErr_Clear(); goto done; }
        PyObject *fn = PyDict_GetItemWithError(tbl, dtx);                /* borrowed */
        if (fn == NULL) { PyErr_Clear(); goto done; }
        Py_INCREF(fn);
        PyObject *args[2] = {x, y};
        PyObject *out = PyObject_Vectorcall(fn, args, 2, NULL);
        Py_DECREF(fn);
        if (out == NULL) { PyErr_Clear(); goto done; }   /* Python path re-raises, translated */
        PyObject *t = TensorType->tp_alloc(TensorType, 0);
        if (t == NULL) { Py_DECREF(out); goto done; }
        SLOT(t, off_data) = out;
        Py_INCREF(dev);
        SLOT(t, off_device) = dev;
        if (!counter_is_zero(tapes_list) && record_binary(f->op, a, b, t) < 0) {
            Py_DECREF(t);
            goto done;                                     /* error stays set */
        }
        result = t;
    }
done:
    Py_DECREF(dtx);
    Py_DECREF(dty);
    return result;
}

static PyObject *
binop_vectorcall(BinOp *f, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "binary operator takes exactly 2 arguments");
        return NULL;
    }
    PyObject *a = f->reverse ? args[1] : args[0];
    PyObject *b = f->reverse ? args[0] : args[1];
    PyObject *r = fast_binary(f, a, b);
    if (r != NULL)
        return r;
    if (PyErr_Occurred())
        return NULL;
    PyObject *cargs[3] = {f->op, a, b};
    return PyObject_Vectorcall(slow_binary, cargs, 3, NULL);
}

static PyObject *
binop_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static int
binop_traverse(BinOp *f, visitproc visit, void *arg)
{
    Py_VISIT(f->op);
    Py_VISIT(f->fast);
    return 0;
}

static void
binop_dealloc(BinOp *f)
{
    PyObject_GC_UnTrack(f);
    Py_CLEAR(f->op);
    Py_CLEAR(f->fast);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyTypeObject BinOpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tapeflow.runtime._speedups.BinOp",
    .tp_basicsize = sizeof(BinOp),
    .tp_dealloc = (destructor)binop_dealloc,
    .tp_vectorcall_offset = offsetof(BinOp, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)binop_traverse,
    .tp_descr_get = binop_descr_get,
    .tp_doc = "A Tensor binary operator with its fast path in C.",
};

static Py_ssize_t
slot_offset(PyTypeObject *type, const char *name)
{
    PyObject *d = PyDict_GetItemString(type->tp_dict, name);
    if (d == NULL || !PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "Tensor.%s is not a slot", name);
        return -1;
    }
    return ((PyMemberDescrObject *)d)->d_member->offset;
}

/* init(Tensor, scopes_list, tapes_list, binary, local, scalar_or_none=None) */
static PyObject *
sp_init(PyObject *mod, PyObject *args)
{
    PyObject *tensor, *scopes, *tapes, *binary, *local, *sfor = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!O!OO|O", &PyType_Type, &tensor, &PyList_Type, &scopes,
                          &PyList_Type, &tapes, &binary, &local, &sfor))
        return NULL;
    Py_ssize_t od = slot_offset((PyTypeObject *)tensor, "_data");
    Py_ssize_t ov = slot_offset((PyTypeObject *)tensor, "_device");
    if (od < 0 || ov < 0)
        return NULL;
    if (PyList_GET_SIZE(scopes) < 1 || PyList_GET_SIZE(tapes) < 1) {
        PyErr_SetString(PyExc_ValueError, "counter lists must have one element");
        return NULL;
    }
    Py_XSETREF(TensorType, (PyTypeObject *)Py_NewRef(tensor));
    off_data = od;
    off_device = ov;
    Py_XSETREF(scopes_list, Py_NewRef(scopes));
    Py_XSETREF(tapes_list, Py_NewRef(tapes));
    Py_XSETREF(slow_binary, Py_NewRef(binary));
    Py_XSETREF(local_obj, Py_NewRef(local));
    Py_XSETREF(scalar_for, sfor == Py_None ? NULL : Py_NewRef(sfor));
    for (int i = 0; i < SCACHE_SIZE; i++) {       /* (re-)init: forget cached scalars */
        Py_CLEAR(scache[i].tensor);
        Py_CLEAR(scache[i].dtype);
        Py_CLEAR(scache[i].dev);
    }
    Py_RETURN_NONE;
}

/* binop(op, fast, reverse) -> BinOp */
static PyObject *
sp_binop(PyObject *mod, PyObject *args)
{
    PyObject *op, *fast;
    int reverse = 0;
    if (!PyArg_ParseTuple(args, "OO!|p", &op, &PyDict_Type, &fast, &reverse))
        return NULL;
    if (TensorType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tapeflow.runtime._speedups.init() was not called");
        return NULL;
    }
    BinOp *f = PyObject_GC_New(BinOp, &BinOpType);
    if (f == NULL)
        return NULL;
    f->op = Py_NewRef(op);
    f->fast = Py_NewRef(fast);
    f->reverse = reverse;
    f->vectorcall = (vectorcallfunc)binop_vectorcall;
    PyObject_GC_Track(f);
    return (PyObject *)f;
}

static PyMethodDef sp_methods[] = {
    {"init", sp_init, METH_VARARGS, "Bind the Tensor class, counters and Python fallbacks."},
    {"binop", sp_binop, METH_VARARGS, "Make a C binary operator for an OpDef."},
    {"record", (PyCFunction)(void (*)(void))sp_record, METH_FASTCALL,
     "record(op, inputs, outputs, attrs, grad_fn=None): tape.record in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sp_module = {
    PyModuleDef_HEAD_INIT, "tapeflow.runtime._speedups",
    "Optional C fast path for Tensor binary operators.", -1, sp_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&BinOpType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&sp_module);
    if (m == NULL)
        return NULL;
    empty_dict = PyDict_New();
    str_dtype = PyUnicode_InternFromString("dtype");
    str_type = PyUnicode_InternFromString("type");
    str_recorders = PyUnicode_InternFromString("recorders");
    str_differentiable = PyUnicode_InternFromString("differentiable");
    if (empty_dict == NULL || str_dtype == NULL || str_type == NULL || str_recorders == NULL
        || str_differentiable == NULL)
        return NULL;
    Py_INCREF(&BinOpType);
    if (PyModule_AddObject(m, "BinOp", (PyObject *)&BinOpType) < 0)
        return NULL;
    return m;
}
