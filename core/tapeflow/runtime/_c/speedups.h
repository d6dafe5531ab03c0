/*
 * tapeflow.runtime._speedups: the optional C core, shared declarations.
 *
 * One extension module, one file per concern, each mirroring Python code that stays the
 * reference (and the path taken with TAPEFLOW_PURE_PYTHON=1 or without a compiler):
 *
 *   module.c    the module, its state (what the runtime hands over in init()), the
 *               method table                     -- runtime/dispatch.py _load_speedups
 *   tensor.c    TensorBase: the C base of tapeflow.Tensor (storage, device and a dtype
 *               cache as slots, a free list, the number slots, bool/int/float)
 *                                                -- runtime/tensor.py _TensorPy
 *   dispatch.c  the binary fast path: Python scalars as cached 0-d tensors, the kernel
 *               lookup cache, binary()           -- runtime/dispatch.py binary
 *   tape.c      recording on this thread's tapes -- runtime/context.py _record_py
 *
 * Every fast path returns NULL with no error set to mean "take the Python path"; NULL
 * with an error set is an error the Python path would raise too (recording failed).
 * The GIL protects all state here (a free-threaded build does not compile this file).
 */
#ifndef TAPEFLOW_SPEEDUPS_H
#define TAPEFLOW_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef Py_GIL_DISABLED
#error "tapeflow's C core relies on the GIL; a free-threaded Python uses the pure-Python path"
#endif

/* --- tensor.c --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *data;         /* Tensor._data: the backend's array (NULL until set) */
    PyObject *device;       /* Tensor._device: the runtime's Device */
    PyObject *dtype;        /* data.dtype, read once for the array `dtype_src` */
    PyObject *dtype_src;    /* (borrowed: only compared) the array dtype was read from */
    PyObject *weakreflist;
    uint64_t watch;         /* tape.c: the tapes of this thread watching it, one bit each */
} TensorObject;

extern PyTypeObject TensorBase_Type;
/* the Python class tapeflow.Tensor (bind_tensor); NULL before */
extern PyTypeObject *sp_Tensor;

#define SP_IS_TENSOR(o) (Py_TYPE(o) == sp_Tensor)

/* A new exact Tensor holding new references to data and device (from the free list). */
PyObject *sp_tensor_new(PyObject *data, PyObject *device);
/* data.dtype (borrowed, cached on the tensor); NULL with an error when it has none. */
PyObject *sp_tensor_dtype_read(TensorObject *t);
static inline PyObject *
sp_tensor_dtype(TensorObject *t)
{
    return t->dtype != NULL && t->dtype_src == t->data ? t->dtype : sp_tensor_dtype_read(t);
}
int sp_tensor_ready(PyObject *module);
extern PyMethodDef sp_tensor_methods[];

/* --- module.c: what init() binds ----------------------------------------------------- */

typedef struct {
    PyObject *scopes;        /* runtime.devices._active_scopes: [count] */
    PyObject *tapes;         /* runtime.context.tapes_active: [count] */
    PyObject *tracing;       /* runtime.context.tracing: [count] */
    PyObject *local;         /* runtime.context._local (threading.local) */
    PyObject *slow_binary;   /* runtime.dispatch._binary_py(op, a, b) */
    PyObject *slow_execute;  /* runtime.dispatch._execute_py(op, inputs, attrs) */
    PyObject *context;       /* the module runtime.context (its `record`) */
    PyObject *empty_dict;
    PyObject *scalar_for;    /* runtime.dispatch._scalar_or_none(value, like) */
    PyObject *ndarray;       /* numpy.ndarray (host arrays: bool()/int()/float() in C) */
    PyObject *generic;       /* numpy.generic (what NumPy's ops on 0-d arrays return) */
    PyObject *zero;          /* the int 0 */
    PyObject *str_dtype, *str_type, *str_fast, *str_recorders, *str_differentiable,
             *str_ndim, *str_num_outputs, *str_record, *str_read_value;
} SpState;

extern SpState sp;

/* Whether a one-element counter list ([n]) holds 0 (a malformed one counts as busy). */
static inline int
sp_counter_zero(PyObject *lst)
{
    if (lst == NULL)
        return 0;
    PyObject *v = PyList_GET_ITEM(lst, 0);
    if (v == sp.zero)                       /* CPython's cached small int: the usual case */
        return 1;
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
    long n = PyLong_AsLong(v);
    if (n == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return n == 0;
}

/* --- dispatch.c ---------------------------------------------------------------------- */

/* op(a, b) on the fast path (op.fast holds the kernels), or NULL: see above. */
PyObject *sp_fast_binary(PyObject *op, PyObject *a, PyObject *b);
void sp_dispatch_clear(void);
/* Bind NumPy's ufuncs and scalar types (init): 0, or -1 with an error. */
int sp_bind_numpy(PyObject *numpy);
extern PyMethodDef sp_dispatch_methods[];

/* --- tape.c -------------------------------------------------------------------------- */

/* Record op(a, b) -> t on this thread's tapes that watch a or b: 0, or -1 with an error. */
int sp_record_binary(PyObject *op, PyObject *a, PyObject *b, PyObject *t);
extern PyMethodDef sp_tape_methods[];

#endif
