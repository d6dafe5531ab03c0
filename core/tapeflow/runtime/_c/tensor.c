/*
 * tensor.c: TensorBase, the C base type of tapeflow.Tensor.
 *
 * Mirrors runtime/tensor.py `_TensorPy` (the pure-Python base, the reference): a Tensor
 * is its backend array (`_data`) and its Device (`_device`); the Python class
 * `tapeflow.Tensor` subclasses this type with `__slots__ = ()` and keeps everything
 * else (properties, printing, indexing, `__array__`). What is here is what every op and
 * every `if tensor:` pays for:
 *
 *   - the slots, and a cache of `_data.dtype` (dispatch compares dtypes by identity);
 *   - allocation from a free list (exact Tensors only; a subclass that adds slots is
 *     allocated and freed as Python does). The type has no traverse: a Tensor refers
 *     only to its array and its device, neither of which refers back to tensors, so a
 *     Tensor is in no reference cycle of its own; the ones made here are not tracked by
 *     the collector (a subclass that adds slots is collected as usual);
 *   - the number slots (`+ - * / // % ** << >> & | ^ @`, unary `- + abs ~`) and the
 *     rich comparisons: the binary fast path of dispatch.c for the ops bound with
 *     set_operator(), else the Python function bound for the slot (ops/operators.py);
 *   - `bool()`, `int()`, `float()` of a one-element host tensor outside tf.function
 *     tracing, else the Python methods of `_TensorPy` (errors, devices, tracing);
 *   - the hash (identity, the value Python's `hash(id(t))` gives, as before).
 */
#include "speedups.h"
#include <structmember.h>

PyTypeObject *sp_Tensor = NULL;

/* --- allocation -------------------------------------------------------------------- */

#define FREELIST_MAX 1024
static TensorObject *freelist[FREELIST_MAX];
static int nfree = 0;

PyObject *
sp_tensor_new(PyObject *data, PyObject *device)
{
    TensorObject *t;
    if (nfree > 0) {
        t = freelist[--nfree];
        PyObject_Init((PyObject *)t, sp_Tensor);      /* (a new reference to the type) */
        t->weakreflist = NULL;
        t->watch = 0;
        t->dtype = NULL;
        t->dtype_src = NULL;
    }
    else {
        t = (TensorObject *)sp_Tensor->tp_alloc(sp_Tensor, 0);
        if (t == NULL)
            return NULL;
        /* A heap type has a GC header, but nothing of a Tensor's is in a cycle (see
           above): untracked, a Tensor costs the collector nothing; reused from the
           free list (subtype_dealloc untracked it), it stays so. */
        if (PyObject_IS_GC((PyObject *)t))
            PyObject_GC_UnTrack(t);
    }
    t->data = Py_NewRef(data);
    t->device = Py_NewRef(device);
    return (PyObject *)t;
}

static void
clear_tensor(TensorObject *t)
{
    if (t->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)t);
    Py_CLEAR(t->data);
    Py_CLEAR(t->device);
    Py_CLEAR(t->dtype);
}

/* tp_dealloc of TensorBase itself (a bare TensorBase(), which nothing in tapeflow makes) */
static void
tensor_dealloc(TensorObject *t)
{
    clear_tensor(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* tp_dealloc of the Python class Tensor, set by bind_tensor in place of CPython's
   subtype_dealloc (whose finalizer, slot and dict handling a Tensor does not need): an
   exact Tensor goes to the free list. A Python subclass of Tensor keeps subtype_dealloc,
   which clears its own slots and then calls this function as its base's; the instance
   holds a reference to its heap type, dropped here in both cases (subtype_dealloc leaves
   that to a heap base). */
static void
tensor_dealloc_heap(TensorObject *t)
{
    PyTypeObject *type = Py_TYPE(t);
    /* (an exact Tensor is never tracked: sp_tensor_new untracks it and Python cannot
       make one; subtype_dealloc re-tracks a subclass's instance before calling this) */
    if (type != sp_Tensor && PyObject_GC_IsTracked((PyObject *)t))
        PyObject_GC_UnTrack(t);
    clear_tensor(t);
    if (type == sp_Tensor && nfree < FREELIST_MAX)
        freelist[nfree++] = t;            /* the memory, for sp_tensor_new */
    else
        type->tp_free((PyObject *)t);
    Py_DECREF(type);
}

PyObject *
sp_tensor_dtype_read(TensorObject *t)
{
    if (t->data == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_data");
        return NULL;
    }
    Py_XSETREF(t->dtype, PyObject_GetAttr(t->data, sp.str_dtype));
    t->dtype_src = t->dtype != NULL ? t->data : NULL;
    return t->dtype;
}

/* --- the slots as attributes ------------------------------------------------------- */

/* Member descriptors (not getsets): CPython 3.11+ specialises `t._data` and `t._device`
   in Python code to a load at the slot's offset, as for __slots__. A write to `_data`
   needs no hook: the dtype cache is keyed by the array it was read from (an array
   assigned later is read again; ops/array_slice.py's __setitem__ is the one writer
   and keeps the dtype). */
static PyMemberDef tensor_members[] = {
    {"_data", T_OBJECT_EX, offsetof(TensorObject, data), 0, "The backend's array."},
    {"_device", T_OBJECT_EX, offsetof(TensorObject, device), 0, "The Device."},
    {"__weakref__", T_OBJECT, offsetof(TensorObject, weakreflist), READONLY, NULL},
    {NULL},
};

/* --- operators: the fast path, else the Python function bound for the slot ---------- */

enum {
    B_ADD, B_SUB, B_MUL, B_TRUEDIV, B_FLOORDIV, B_MOD, B_POW, B_LSHIFT, B_RSHIFT,
    B_AND, B_OR, B_XOR, B_MATMUL, B_LT, B_LE, B_GT, B_GE, B_EQ, B_NE, NBINARY
};
static const char *binary_names[NBINARY] = {
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift",
    "and", "or", "xor", "matmul", "lt", "le", "gt", "ge", "eq", "ne",
};
enum { U_NEG, U_POS, U_ABS, U_INVERT, U_BOOL, U_INT, U_FLOAT, U_INDEX, NUNARY };
static const char *unary_names[NUNARY] = {
    "neg", "pos", "abs", "invert", "bool", "int", "float", "index",
};

typedef struct {
    PyObject *op;         /* the OpDef of the fast path, or NULL */
    PyObject *fallback;   /* fallback(a, b): `a OP b` in Python, operands in order */
    int direct;           /* fallback is binary(op, a, b): call dispatch._binary_py */
} BinarySlot;
static BinarySlot binary_slots[NBINARY];
static PyObject *unary_slots[NUNARY];     /* fallback(t) */

static PyObject *
binary_slot(int k, PyObject *a, PyObject *b)
{
    BinarySlot *s = &binary_slots[k];
    if (s->op != NULL) {
        PyObject *r = sp_fast_binary(s->op, a, b);
        if (r != NULL || PyErr_Occurred())
            return r;
        if (s->direct && sp.slow_binary != NULL) {   /* (device scopes, promotion ...) */
            PyObject *args[3] = {s->op, a, b};
            return PyObject_Vectorcall(sp.slow_binary, args, 3, NULL);
        }
    }
    if (s->fallback == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *args[2] = {a, b};
    return PyObject_Vectorcall(s->fallback, args, 2, NULL);
}

#define BINARY_SLOT(name, k) \
    static PyObject *nb_##name(PyObject *a, PyObject *b) { return binary_slot(k, a, b); }
BINARY_SLOT(add, B_ADD)
BINARY_SLOT(sub, B_SUB)
BINARY_SLOT(mul, B_MUL)
BINARY_SLOT(truediv, B_TRUEDIV)
BINARY_SLOT(floordiv, B_FLOORDIV)
BINARY_SLOT(mod, B_MOD)
BINARY_SLOT(lshift, B_LSHIFT)
BINARY_SLOT(rshift, B_RSHIFT)
BINARY_SLOT(and, B_AND)
BINARY_SLOT(or, B_OR)
BINARY_SLOT(xor, B_XOR)
BINARY_SLOT(matmul, B_MATMUL)

static PyObject *
nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None)
        Py_RETURN_NOTIMPLEMENTED;         /* pow(t, e, m): as before, a TypeError */
    return binary_slot(B_POW, a, b);
}

static PyObject *
unary_call(int k, PyObject *t)
{
    if (unary_slots[k] == NULL) {
        PyErr_Format(PyExc_TypeError, "tapeflow.Tensor: the %s slot is not bound",
                     unary_names[k]);
        return NULL;
    }
    return PyObject_CallOneArg(unary_slots[k], t);
}

static PyObject *nb_neg(PyObject *t) { return unary_call(U_NEG, t); }
static PyObject *nb_abs(PyObject *t) { return unary_call(U_ABS, t); }
static PyObject *nb_invert(PyObject *t) { return unary_call(U_INVERT, t); }
static PyObject *nb_pos(PyObject *t)
{
    return unary_slots[U_POS] != NULL ? unary_call(U_POS, t) : Py_NewRef(t);
}

/* The host array of a tensor whose value Python may read here (no tf.function trace in
   progress, the array is a NumPy ndarray or scalar), else NULL. */
static PyObject *
host_array(TensorObject *t)
{
    if (!sp_counter_zero(sp.tracing) || t->data == NULL || sp.ndarray == NULL)
        return NULL;
    PyTypeObject *type = Py_TYPE(t->data);
    if ((PyObject *)type != sp.ndarray && (sp.generic == NULL || (
            (PyObject *)type->tp_base != sp.generic && !PyType_IsSubtype(type, (PyTypeObject *)sp.generic))))
        return NULL;                       /* (an ndarray, or a NumPy scalar: np.bool_ ...) */
    return t->data;
}

static int
nb_bool(TensorObject *t)
{
    PyObject *d = host_array(t);
    if (d != NULL) {
        int r = PyObject_IsTrue(d);        /* NumPy: one element, any rank */
        if (r >= 0)
            return r;
        PyErr_Clear();                     /* (several or no elements: the Python error) */
    }
    PyObject *r = unary_call(U_BOOL, (PyObject *)t);
    if (r == NULL)
        return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

/* int()/float() of a 0-d host array in C; else the Python method */
static PyObject *
scalar_convert(TensorObject *t, int k, PyObject *(*convert)(PyObject *))
{
    PyObject *d = host_array(t);
    if (d != NULL) {
        PyObject *nd = PyObject_GetAttr(d, sp.str_ndim);
        int zero = nd != NULL && nd == sp.zero;
        Py_XDECREF(nd);
        if (zero) {
            PyObject *r = convert(d);
            if (r != NULL)
                return r;
        }
        PyErr_Clear();
    }
    return unary_call(k, (PyObject *)t);
}

static PyObject *nb_int(TensorObject *t) { return scalar_convert(t, U_INT, PyNumber_Long); }
static PyObject *nb_float(TensorObject *t) { return scalar_convert(t, U_FLOAT, PyNumber_Float); }
static PyObject *nb_index(TensorObject *t) { return unary_call(U_INDEX, (PyObject *)t); }

static PyNumberMethods tensor_as_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_remainder = nb_mod,
    .nb_power = nb_pow,
    .nb_negative = nb_neg,
    .nb_positive = nb_pos,
    .nb_absolute = nb_abs,
    .nb_bool = (inquiry)nb_bool,
    .nb_invert = nb_invert,
    .nb_lshift = nb_lshift,
    .nb_rshift = nb_rshift,
    .nb_and = nb_and,
    .nb_xor = nb_xor,
    .nb_or = nb_or,
    .nb_int = (unaryfunc)nb_int,
    .nb_float = (unaryfunc)nb_float,
    .nb_floor_divide = nb_floordiv,
    .nb_true_divide = nb_truediv,
    .nb_index = (unaryfunc)nb_index,
    .nb_matrix_multiply = nb_matmul,
};

static PyObject *
tensor_richcompare(PyObject *self, PyObject *other, int op)
{
    static const int slot_of[] = {
        [Py_LT] = B_LT, [Py_LE] = B_LE, [Py_EQ] = B_EQ,
        [Py_NE] = B_NE, [Py_GT] = B_GT, [Py_GE] = B_GE,
    };
    return binary_slot(slot_of[op], self, other);
}

/* Tensor(): tensors are made by ops (tf.constant, tf.convert_to_tensor ...); a Python
   subclass of Tensor may be instantiated (empty: its code sets _data and _device) */
static PyObject *
tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (type == &TensorBase_Type || type == sp_Tensor) {
        PyErr_SetString(PyExc_TypeError,
                        "tf.Tensor cannot be created directly: use tf.constant(value) or "
                        "tf.convert_to_tensor(value)");
        return NULL;
    }
    return PyType_GenericNew(type, args, kwargs);
}

static Py_hash_t
tensor_hash(PyObject *self)
{
    /* hash(id(t)): Python's hash of a non-negative int below 2**61 - 1 is the int */
    Py_uhash_t h = (Py_uhash_t)(uintptr_t)self % (((Py_uhash_t)1 << 61) - 1);
    return h == (Py_uhash_t)-1 ? -2 : (Py_hash_t)h;
}

PyTypeObject TensorBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tapeflow.runtime._speedups.TensorBase",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_as_number = &tensor_as_number,
    .tp_hash = tensor_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C base of tapeflow.Tensor: its array, its device, its operators.",
    .tp_richcompare = tensor_richcompare,
    .tp_weaklistoffset = offsetof(TensorObject, weakreflist),
    .tp_members = tensor_members,
    .tp_new = tensor_new,
};

/* --- binding ------------------------------------------------------------------------- */

static int
name_index(const char **names, int n, PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    if (s == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    PyErr_Format(PyExc_ValueError, "no Tensor slot named %R", name);
    return -1;
}

/* bind_tensor(Tensor): the Python class whose exact instances the fast paths make */
static PyObject *
sp_bind_tensor(PyObject *mod, PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &TensorBase_Type)
        || ((PyTypeObject *)cls)->tp_basicsize != TensorBase_Type.tp_basicsize
        || ((PyTypeObject *)cls)->tp_base != &TensorBase_Type
        || !(((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE)
        || ((PyTypeObject *)cls)->tp_finalize != NULL || ((PyTypeObject *)cls)->tp_del != NULL) {
        PyErr_SetString(PyExc_TypeError, "bind_tensor: a Python class deriving directly from "
                        "TensorBase, with __slots__ = () and no __del__, expected");
        return NULL;
    }
    /* (the free list keeps the memory of a previous class's instances: same size) */
    Py_XSETREF(sp_Tensor, (PyTypeObject *)Py_NewRef(cls));
    sp_Tensor->tp_dealloc = (destructor)tensor_dealloc_heap;
    sp_dispatch_clear();
    Py_RETURN_NONE;
}

/* set_operator(name, op, fallback, direct=False): slot `name` runs op's fast path (op
   may be None), else fallback(a, b) -- or fallback(t) for the unary slots and
   bool/int/float/index; direct: fallback is binary(op, a, b), so the slot calls the
   Python path dispatch._binary_py itself (one call, not fallback's two layers) */
static PyObject *
sp_set_operator(PyObject *mod, PyObject *args)
{
    PyObject *name, *op, *fallback;
    int direct = 0;
    if (!PyArg_ParseTuple(args, "UOO|p", &name, &op, &fallback, &direct))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "set_operator: the fallback must be callable");
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(name);
    if (s == NULL)
        return NULL;
    for (int i = 0; i < NUNARY; i++) {
        if (strcmp(unary_names[i], s) == 0) {
            Py_XSETREF(unary_slots[i], Py_NewRef(fallback));
            Py_RETURN_NONE;
        }
    }
    int k = name_index(binary_names, NBINARY, name);
    if (k < 0)
        return NULL;
    Py_XSETREF(binary_slots[k].op, op == Py_None ? NULL : Py_NewRef(op));
    Py_XSETREF(binary_slots[k].fallback, Py_NewRef(fallback));
    binary_slots[k].direct = direct && op != Py_None;
    Py_RETURN_NONE;
}

/* wrap(data, device): runtime.tensor._wrap -- a Tensor from a backend array */
static PyObject *
sp_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wrap(data, device) takes 2 arguments");
        return NULL;
    }
    if (sp_Tensor == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tapeflow.runtime._speedups.bind_tensor() was not called");
        return NULL;
    }
    return sp_tensor_new(args[0], args[1]);
}

/* freelist_size(): how many freed Tensors wait for reuse (tests) */
static PyObject *
sp_freelist_size(PyObject *mod, PyObject *unused)
{
    return PyLong_FromLong(nfree);
}

PyMethodDef sp_tensor_methods[] = {
    {"bind_tensor", sp_bind_tensor, METH_O, "Bind the Python Tensor class."},
    {"set_operator", sp_set_operator, METH_VARARGS,
     "set_operator(name, op, fallback): bind one of Tensor's operator slots."},
    {"wrap", (PyCFunction)(void (*)(void))sp_wrap, METH_FASTCALL,
     "wrap(data, device): a Tensor holding a backend array."},
    {"freelist_size", sp_freelist_size, METH_NOARGS, "Freed Tensors kept for reuse."},
    {NULL, NULL, 0, NULL},
};

int
sp_tensor_ready(PyObject *module)
{
    if (PyType_Ready(&TensorBase_Type) < 0)
        return -1;
    Py_INCREF(&TensorBase_Type);
    if (PyModule_AddObject(module, "TensorBase", (PyObject *)&TensorBase_Type) < 0) {
        Py_DECREF(&TensorBase_Type);
        return -1;
    }
    return 0;
}
