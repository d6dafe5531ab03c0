/*
 * tape.c: the tape in C -- recording on this thread's tapes, and the backward walk.
 *
 * Mirrors runtime/context.py (`_record_py`, `set_recorders`) and autodiff/tape.py
 * (`_PyTape`: watch, the records, and its `backprop`, the loop of `_input_grads` and
 * `_accumulate`), which stay the reference (TAPEFLOW_PURE_PYTHON=1).
 *
 * Tape, the core of one GradientTape, holds its records as C structs {op, inputs,
 * outputs, attrs, grad_fn}, and no record is seen by the garbage collector one by one
 * (the Tape traverses them). A binary operator's record (the `a + b` of dispatch.c's fast
 * path) holds a and b, and its result only through a weak reference: a result nobody
 * holds is on no path to a target (a later record would hold it as an input), so it is
 * freed as without a tape -- its record is skipped by the walk and not listed in
 * `_records` -- and a new tensor at its address is never taken for it. Tuples are made
 * only when a record is played back or listed. Watching is a bit:
 *
 *   - each Tape takes one of 64 process-wide slots when it is made and gives it back
 *     when it is freed; TensorObject.watch has bit i set while the Tape of slot i
 *     watches the tensor (a source given to watch(), or an output of one of its
 *     records; a reused Tensor starts with no bit). The Tape holds its sources and its
 *     records' live results, and clears its bit on them in reset() and when it is freed,
 *     so a slot handed to a new Tape starts with no tensor marked. Slots are process-wide, so the
 *     tapes of two threads never share a bit, and a tensor shared by threads is watched
 *     only by the tapes that watched it;
 *   - a Tape made while the 64 slots are taken, and any non-Tensor object, is watched
 *     through a dict {id: object}, as the Python path does (slower, same behaviour).
 *
 * This thread's recorders: set_recorders(tapes), which context.push_tape/pop_tape call
 * whenever this thread's stack of tapes changes, keeps them in a C thread-local with the
 * OR of their bits, so an op on tensors that no tape of this thread watches costs one
 * AND. A recorder is a Tape or a (watched dict, records list) pair (ForwardAccumulator,
 * or any tape-like object of the Python protocol). Until set_recorders is first called,
 * `context._local.recorders` is read as the Python path does. A thread that ends with a
 * tape still recording drops its recorders, and their count in tapes_active, when its
 * thread state is cleared (a Cleaner in the thread state's dict), as the Python path's
 * threading.local does.
 *
Long file: recording and the backward walk both work on the Tape's records and watch bits
 * through the static helpers above them; splitting the walk into its own file would put
 * the Rec/TapeObject layout and those helpers in speedups.h (and the file in setup.py).
 */
#include "speedups.h"
#include <structmember.h>

static PyObject *sp_empty_dict = NULL;     /* the attrs of a binary operator's record */
static PyObject *str_recorder = NULL, *str_watched = NULL, *str_records = NULL,
                *str_cleaner_key = NULL;
static PyObject *str_grad = NULL, *str_shape = NULL, *str_op = NULL, *str_inputs = NULL,
                *str_outputs = NULL, *str_attrs = NULL, *str_grad_fn = NULL,
                *str_needs = NULL;

/* --- the Tape type ----------------------------------------------------------------- */

typedef struct {
    PyObject *op, *ins, *outs, *attrs, *grad_fn;   /* ins/outs NULL: binary, in x */
    PyObject *x[3];                  /* a binary record's a, b, and a weakref to its result */
} Rec;

typedef struct {
    PyObject_HEAD
    uint64_t bit;          /* this tape's slot; 0: none, `wdict` watches everything */
    PyObject *wdict;       /* {id: object} for what the bit cannot mark (NULL: empty) */
    PyObject *sources;     /* list: the tensors watch() marked with the bit */
    Rec *recs;
    Py_ssize_t n, cap;
} TapeObject;

static PyTypeObject Tape_Type;
static uint64_t slots_used = 0;

#define IS_TAPE(o) (Py_TYPE(o) == &Tape_Type)
#define IS_TENSOR(o) (Py_TYPE(o) == sp_Tensor || PyObject_TypeCheck((o), &TensorBase_Type))

/* Whether the tape watches `o`: 1, 0, or -1 with an error. */
static int
tape_watches(TapeObject *tp, PyObject *o)
{
    if (tp->bit && IS_TENSOR(o))
        return (((TensorObject *)o)->watch & tp->bit) != 0;
    if (tp->wdict == NULL)
        return 0;
    PyObject *k = PyLong_FromVoidPtr(o);
    if (k == NULL)
        return -1;
    int r = PyDict_Contains(tp->wdict, k);
    Py_DECREF(k);
    return r;
}

/* Watch `o` (the caller keeps it alive: a source or a record's output): 1 when it is
   newly watched, 0 when it already was, -1 with an error. */
static int
tape_mark(TapeObject *tp, PyObject *o)
{
    if (tp->bit && IS_TENSOR(o)) {
        TensorObject *t = (TensorObject *)o;
        int fresh = (t->watch & tp->bit) == 0;
        t->watch |= tp->bit;
        return fresh;
    }
    if (tp->wdict == NULL && (tp->wdict = PyDict_New()) == NULL)
        return -1;
    PyObject *k = PyLong_FromVoidPtr(o);
    if (k == NULL)
        return -1;
    int had = PyDict_Contains(tp->wdict, k);
    int r = had < 0 ? -1 : PyDict_SetItem(tp->wdict, k, o);
    Py_DECREF(k);
    return r < 0 ? -1 : !had;
}

/* The object of weakref wr, borrowed; NULL when it is gone. */
static PyObject *
weak_get(PyObject *wr)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(wr, &o) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(o);                     /* (alive: referenced elsewhere) */
    return o;
#else
    PyObject *o = PyWeakref_GET_OBJECT(wr);
    return o == Py_None ? NULL : o;
#endif
}

static void
unmark(TapeObject *tp, PyObject *o)
{
    if (o != NULL && IS_TENSOR(o))
        ((TensorObject *)o)->watch &= ~tp->bit;
}

/* Forget the records and the watched tensors (their bits cleared first, then the
   references dropped: a destructor run by the drop sees a consistent, empty tape). */
static void
tape_clear(TapeObject *tp)
{
    Rec *recs = tp->recs;
    Py_ssize_t n = tp->n;
    PyObject *sources = tp->sources, *wdict = tp->wdict;
    tp->recs = NULL;
    tp->n = tp->cap = 0;
    tp->sources = NULL;
    tp->wdict = NULL;
    if (tp->bit) {
        for (Py_ssize_t i = 0; sources != NULL && i < PyList_GET_SIZE(sources); i++)
            unmark(tp, PyList_GET_ITEM(sources, i));
        for (Py_ssize_t i = 0; i < n; i++) {
            if (recs[i].outs == NULL)
                unmark(tp, weak_get(recs[i].x[2]));
            else
                for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(recs[i].outs); j++)
                    unmark(tp, PyTuple_GET_ITEM(recs[i].outs, j));
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject **f = (PyObject **)&recs[i];       /* (a Rec is 8 object pointers) */
        for (size_t j = 0; j < sizeof(Rec) / sizeof(PyObject *); j++)
            Py_XDECREF(f[j]);
    }
    PyMem_Free(recs);
    Py_XDECREF(sources);
    Py_XDECREF(wdict);
}

/* A new Rec at the end (its fields NULL), or NULL with an error. */
static Rec *
tape_push(TapeObject *tp)
{
    if (tp->n == tp->cap) {
        Py_ssize_t cap = tp->cap ? tp->cap * 2 : 16;
        Rec *recs = PyMem_Realloc(tp->recs, (size_t)cap * sizeof(Rec));
        if (recs == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        tp->recs = recs;
        tp->cap = cap;
    }
    Rec *r = &tp->recs[tp->n++];
    memset(r, 0, sizeof *r);
    return r;
}

/* The record's inputs / outputs as tuples (a binary record's made once, kept). */
static PyObject *
rec_ins(Rec *r)
{
    if (r->ins == NULL)
        r->ins = PyTuple_Pack(2, r->x[0], r->x[1]);
    return r->ins;
}

/* (NULL and no error: a binary record whose result is gone -- on no path to a target) */
static PyObject *
rec_outs(Rec *r)
{
    PyObject *t = r->outs == NULL ? weak_get(r->x[2]) : NULL;
    if (t != NULL)
        r->outs = PyTuple_Pack(1, t);      /* (the result is kept from now on) */
    return r->outs;
}

static PyObject *
Tape_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) || (kw != NULL && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "Tape() takes no arguments");
        return NULL;
    }
    TapeObject *tp = (TapeObject *)type->tp_alloc(type, 0);
    if (tp == NULL)
        return NULL;
    for (int i = 0; i < 64; i++) {
        if (!(slots_used & ((uint64_t)1 << i))) {
            tp->bit = (uint64_t)1 << i;
            slots_used |= tp->bit;
            break;
        }
    }
    return (PyObject *)tp;
}

static int
Tape_traverse(TapeObject *tp, visitproc visit, void *arg)
{
    Py_VISIT(tp->wdict);
    Py_VISIT(tp->sources);
    for (Py_ssize_t i = 0; i < tp->n; i++) {
        Rec *r = &tp->recs[i];
        Py_VISIT(r->op);
        Py_VISIT(r->ins);
        Py_VISIT(r->outs);
        Py_VISIT(r->attrs);
        Py_VISIT(r->grad_fn);
        Py_VISIT(r->x[0]);                 /* (a Tensor subclass may be tracked) */
        Py_VISIT(r->x[1]);
    }
    return 0;
}

static int
Tape_tp_clear(TapeObject *tp)
{
    tape_clear(tp);
    return 0;
}

static void
Tape_dealloc(TapeObject *tp)
{
    PyObject_GC_UnTrack(tp);
    tape_clear(tp);
    slots_used &= ~tp->bit;
    Py_TYPE(tp)->tp_free((PyObject *)tp);
}

/* watch(t): watch a tensor (kept alive by the tape) */
static PyObject *
Tape_watch(TapeObject *tp, PyObject *t)
{
    int fresh = tape_mark(tp, t);
    if (fresh < 0)
        return NULL;
    if (fresh && tp->bit && IS_TENSOR(t)) {
        if (tp->sources == NULL && (tp->sources = PyList_New(0)) == NULL)
            return NULL;
        if (PyList_Append(tp->sources, t) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Tape_watches(TapeObject *tp, PyObject *t)
{
    int r = tape_watches(tp, t);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *
Tape_reset(TapeObject *tp, PyObject *unused)
{
    tape_clear(tp);
    Py_RETURN_NONE;
}

/* _records: the records as TapeRecord-ordered tuples, in creation order (a new list) */
static PyObject *
Tape_records(TapeObject *tp, void *closure)
{
    PyObject *lst = PyList_New(0);
    for (Py_ssize_t i = 0; lst != NULL && i < tp->n; i++) {
        Rec *r = &tp->recs[i];
        PyObject *outs = rec_outs(r), *ins = outs ? rec_ins(r) : NULL;
        if (outs == NULL && !PyErr_Occurred())
            continue;                        /* (a result nobody holds: not listed) */
        PyObject *rec = ins ? PyTuple_Pack(5, r->op, ins, outs,
                                           r->attrs ? r->attrs : sp_empty_dict,
                                           r->grad_fn ? r->grad_fn : Py_None) : NULL;
        if (rec == NULL || PyList_Append(lst, rec) < 0)
            Py_CLEAR(lst);
        Py_XDECREF(rec);
    }
    return lst;
}

static int
put_id(PyObject *d, PyObject *o)
{
    PyObject *k = PyLong_FromVoidPtr(o);
    int r = k == NULL ? -1 : PyDict_SetItem(d, k, o);
    Py_XDECREF(k);
    return r;
}

/* _watched: {id: tensor} of what the tape watches (a new dict, as _PyTape's) */
static PyObject *
Tape_watched(TapeObject *tp, void *closure)
{
    PyObject *d = tp->wdict ? PyDict_Copy(tp->wdict) : PyDict_New();
    for (Py_ssize_t i = 0; d != NULL && tp->sources && i < PyList_GET_SIZE(tp->sources); i++)
        if (put_id(d, PyList_GET_ITEM(tp->sources, i)) < 0)
            Py_CLEAR(d);
    for (Py_ssize_t i = 0; d != NULL && tp->bit && i < tp->n; i++) {
        PyObject *outs = rec_outs(&tp->recs[i]);
        if (outs == NULL && !PyErr_Occurred())
            continue;
        for (Py_ssize_t j = 0; outs != NULL && j < PyTuple_GET_SIZE(outs); j++) {
            PyObject *o = PyTuple_GET_ITEM(outs, j);
            if (IS_TENSOR(o) && put_id(d, o) < 0) {
                outs = NULL;
                break;
            }
        }
        if (outs == NULL)
            Py_CLEAR(d);
    }
    return d;
}

static PyObject *Tape_backprop(TapeObject *tp, PyObject *grads);

static PyMethodDef Tape_methods[] = {
    {"watch", (PyCFunction)Tape_watch, METH_O, "watch(t): watch a tensor."},
    {"watches", (PyCFunction)Tape_watches, METH_O, "watches(t): whether t is watched."},
    {"reset", (PyCFunction)Tape_reset, METH_NOARGS, "Forget the records and watched tensors."},
    {"backprop", (PyCFunction)Tape_backprop, METH_O,
     "backprop(grads): play the records back, accumulating into grads {id(t): gradient}."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tape_getset[] = {
    {"_records", (getter)Tape_records, NULL, "The records, as tuples (a copy).", NULL},
    {"_watched", (getter)Tape_watched, NULL, "{id(t): t} watched (a copy).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Tape_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tapeflow.runtime._speedups.Tape",
    .tp_basicsize = sizeof(TapeObject),
    .tp_dealloc = (destructor)Tape_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The records and watched tensors of one GradientTape (autodiff/tape.py _PyTape).",
    .tp_traverse = (traverseproc)Tape_traverse,
    .tp_clear = (inquiry)Tape_tp_clear,
    .tp_methods = Tape_methods,
    .tp_getset = Tape_getset,
    .tp_new = Tape_new,
};

/* --- this thread's recorders ------------------------------------------------------- */

static _Thread_local PyObject *tl_recorders = NULL;  /* tuple, or NULL: none */
static _Thread_local uint64_t tl_mask = 0;           /* the bits of its Tapes */
static _Thread_local int tl_slow = 0;                /* recorders watching by id */
static int recorders_bound = 0;

/* A Cleaner, put in the thread state's dict while the thread has recorders, drops them
   when that dict is cleared -- when the thread ends (or its state is deleted) with a tape
   still recording, as the Python path's threading.local would. It clears only the
   thread-local of the thread that made it (after a fork another thread may clear it). */
typedef struct {
    PyObject_HEAD
    PyObject **slot;          /* &tl_recorders of the thread that made it */
} CleanerObject;

static void
Cleaner_dealloc(CleanerObject *c)
{
    if (c->slot == &tl_recorders && tl_recorders != NULL) {
        PyObject *et, *ev, *tb, *n = NULL;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *d = PyLong_FromSsize_t(-PyTuple_GET_SIZE(tl_recorders));
        if (d != NULL && sp.tapes != NULL                  /* (no longer counted) */
            && (n = PyNumber_Add(PyList_GET_ITEM(sp.tapes, 0), d)) != NULL)
            PyList_SetItem(sp.tapes, 0, n);
        Py_XDECREF(d);
        PyErr_Clear();
        tl_mask = 0;
        tl_slow = 0;
        Py_CLEAR(tl_recorders);
        PyErr_Restore(et, ev, tb);
    }
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyTypeObject Cleaner_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tapeflow.runtime._speedups._RecordersCleaner",
    .tp_basicsize = sizeof(CleanerObject),
    .tp_dealloc = (destructor)Cleaner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* Make sure this thread's state holds a Cleaner: 0, or -1 with an error. */
static int
ensure_cleaner(void)
{
    PyObject *d = PyThreadState_GetDict();
    if (d == NULL)
        return 0;                     /* (no thread state dict: nothing to hang it on) */
    int has = PyDict_Contains(d, str_cleaner_key);
    if (has != 0)
        return has < 0 ? -1 : 0;
    CleanerObject *c = PyObject_New(CleanerObject, &Cleaner_Type);
    if (c == NULL)
        return -1;
    c->slot = &tl_recorders;
    int rc = PyDict_SetItem(d, str_cleaner_key, (PyObject *)c);
    Py_DECREF(c);
    return rc;
}

/* The recorder of tape-like object t: t._recorder, else (t._watched, t._records). */
static PyObject *
recorder_of(PyObject *t)
{
    PyObject *r = PyObject_GetAttr(t, str_recorder);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    PyObject *w = PyObject_GetAttr(t, str_watched), *recs = w ? PyObject_GetAttr(t, str_records)
                                                                : NULL;
    r = recs ? PyTuple_Pack(2, w, recs) : NULL;
    Py_XDECREF(w);
    Py_XDECREF(recs);
    return r;
}

/* set_recorders(tapes): context.set_recorders in C -- the recorders of this thread's
   tapes, in a C thread-local */
static PyObject *sp_tape_type(PyObject *mod, PyObject *unused);

static PyObject *
sp_set_recorders(PyObject *mod, PyObject *tapes)
{
    if (str_cleaner_key == NULL) {                 /* (the types and names readied) */
        PyObject *type = sp_tape_type(mod, NULL);
        if (type == NULL)
            return NULL;
        Py_DECREF(type);
    }
    PyObject *seq = PySequence_Fast(tapes, "set_recorders: a list of tapes expected");
    PyObject *tup = seq ? PyTuple_New(PySequence_Fast_GET_SIZE(seq)) : NULL;
    for (Py_ssize_t i = 0; tup != NULL && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *r = recorder_of(PySequence_Fast_GET_ITEM(seq, i));
        if (r == NULL)
            Py_CLEAR(tup);
        else
            PyTuple_SET_ITEM(tup, i, r);
    }
    Py_XDECREF(seq);
    if (tup == NULL)
        return NULL;
    uint64_t mask = 0;
    int slow = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tup); i++) {
        PyObject *r = PyTuple_GET_ITEM(tup, i);
        if (IS_TAPE(r) && ((TapeObject *)r)->bit)
            mask |= ((TapeObject *)r)->bit;
        else
            slow++;
        if (!IS_TAPE(r) && !(PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2
                             && PyDict_Check(PyTuple_GET_ITEM(r, 0))
                             && PyList_Check(PyTuple_GET_ITEM(r, 1)))) {
            Py_DECREF(tup);
            PyErr_Format(PyExc_TypeError, "set_recorders: expected Tapes or (watched dict, "
                         "records list) pairs, got %R", r);
            return NULL;
        }
    }
    if (tl_recorders == NULL && PyTuple_GET_SIZE(tup) > 0 && ensure_cleaner() < 0) {
        Py_DECREF(tup);
        return NULL;
    }
    /* tapes_active[0] += the change in this thread's count (atomic: no bytecode runs) */
    Py_ssize_t delta = PyTuple_GET_SIZE(tup) - (tl_recorders ? PyTuple_GET_SIZE(tl_recorders) : 0);
    if (delta != 0) {
        PyObject *d = sp.tapes ? PyLong_FromSsize_t(delta) : NULL;
        PyObject *n = d ? PyNumber_Add(PyList_GET_ITEM(sp.tapes, 0), d) : NULL;
        Py_XDECREF(d);
        if (n == NULL || PyList_SetItem(sp.tapes, 0, n) < 0) {
            Py_DECREF(tup);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "_speedups.init() was not called");
            return NULL;
        }
    }
    recorders_bound = 1;
    if (PyTuple_GET_SIZE(tup) == 0)
        Py_CLEAR(tup);
    tl_mask = mask;                   /* (all set before the old tuple goes: its tapes' */
    tl_slow = slow;                   /*  destructors may record or set recorders) */
    Py_XSETREF(tl_recorders, tup);
    Py_RETURN_NONE;
}

/* This thread's recorders, a new reference (NULL and no error: none). */
static PyObject *
recorders(void)
{
    if (recorders_bound)
        return Py_XNewRef(tl_recorders);
    PyObject *recs = PyObject_GetAttr(sp.local, sp.str_recorders);
    if (recs == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    return recs;
}

/* The slot of OpDef.differentiable (a __slots__ member): its type, the type's version
   (any change to the class forgets it) and its offset in the instance. */
static PyTypeObject *diff_type = NULL;
static unsigned int diff_version = 0;
static Py_ssize_t diff_offset = 0;

/* op.differentiable, read when a tape watches an operand (a plugin may change it): the
   slot itself for OpDef's exact class, else getattr */
static int
op_differentiable(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    if (type == diff_type && type->tp_version_tag == diff_version) {
        PyObject *v = *(PyObject **)((char *)op + diff_offset);
        if (v == Py_True || v == Py_False)
            return v == Py_True;
    }
    else {
        PyObject *descr = _PyType_Lookup(type, sp.str_differentiable);        /* borrowed */
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
            && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX
            && (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
            diff_type = type;                    /* (compared, never dereferenced: the */
            diff_version = type->tp_version_tag; /*  version tag guards a reused address) */
            diff_offset = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
    }
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

/* Whether a (watched dict, records) pair watches one of n objects: 1, 0, -1. */
static int
pair_watches(PyObject *w, PyObject *const *objs, Py_ssize_t n)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *key = PyLong_FromVoidPtr(objs[j]);
        int found = key == NULL ? -1 : PyDict_Contains(w, key);
        Py_XDECREF(key);
        if (found)
            return found;
    }
    return 0;
}

/* Record on a pair: append the record tuple, watch the outputs. */
static int
pair_record(PyObject *pair, PyObject *rec, PyObject *outs)
{
    PyObject *w = PyTuple_GET_ITEM(pair, 0);
    if (PyList_Append(PyTuple_GET_ITEM(pair, 1), rec) < 0)
        return -1;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(outs); j++)
        if (put_id(w, PyTuple_GET_ITEM(outs, j)) < 0)
            return -1;
    return 0;
}

/* Record on a Tape: 0 or -1. ins/outs are tuples, or NULL for binary a, b -> t. */
static int
tape_record(TapeObject *tp, PyObject *op, PyObject *ins, PyObject *outs, PyObject *attrs,
            PyObject *grad_fn, PyObject *const *x)
{
    Rec *r = tape_push(tp);
    if (r == NULL)
        return -1;
    r->op = Py_NewRef(op);
    if (ins == NULL) {
        r->x[0] = Py_NewRef(x[0]);
        r->x[1] = Py_NewRef(x[1]);
        r->x[2] = PyWeakref_NewRef(x[2], NULL);
        if (r->x[2] == NULL) {                /* (no half-made record stays) */
            Py_CLEAR(r->op);
            Py_CLEAR(r->x[0]);
            Py_CLEAR(r->x[1]);
            tp->n--;
            return -1;
        }
        if (PyObject_GC_IsTracked(r->x[2]))   /* (no callback: in no cycle; the collector */
            PyObject_GC_UnTrack(r->x[2]);     /*  would visit every record's otherwise) */
        return tape_mark(tp, x[2]) < 0 ? -1 : 0;
    }
    r->ins = Py_NewRef(ins);
    r->outs = Py_NewRef(outs);
    r->attrs = Py_NewRef(attrs);
    r->grad_fn = grad_fn == Py_None ? NULL : Py_NewRef(grad_fn);
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(outs); j++)
        if (tape_mark(tp, PyTuple_GET_ITEM(outs, j)) < 0)
            return -1;
    return 0;
}

/* Whether recorder r watches one of the n objects: 1, 0, -1. */
static int
recorder_watches(PyObject *r, PyObject *const *objs, Py_ssize_t n)
{
    if (IS_TAPE(r)) {
        for (Py_ssize_t j = 0; j < n; j++) {
            int w = tape_watches((TapeObject *)r, objs[j]);
            if (w)
                return w;
        }
        return 0;
    }
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2 || !PyDict_Check(PyTuple_GET_ITEM(r, 0)))
        return 0;
    return pair_watches(PyTuple_GET_ITEM(r, 0), objs, n);
}

/*
 * record(op, inputs, outputs, attrs, grad_fn): runtime.context._record_py in C: record
 * on every recorder of this thread that watches an input. Returns whether one did.
 */
static PyObject *
record_impl(PyObject *op, PyObject *inputs, PyObject *outputs, PyObject *attrs,
            PyObject *grad_fn)
{
    PyObject *recs = recorders();
    if (recs == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    PyObject *ins = PySequence_Tuple(inputs);
    PyObject *outs = ins ? PySequence_Tuple(outputs) : NULL;
    PyObject *rec = NULL, *seq = outs ? PySequence_Fast(recs, "recorders") : NULL;
    int done = 0, rc = seq ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        int w = recorder_watches(r, &PyTuple_GET_ITEM(ins, 0), PyTuple_GET_SIZE(ins));
        if (w <= 0) {
            rc = w;
            continue;
        }
        done = 1;
        if (IS_TAPE(r)) {
            rc = tape_record((TapeObject *)r, op, ins, outs, attrs, grad_fn, NULL);
            continue;
        }
        if (rec == NULL && (rec = PyTuple_Pack(5, op, inputs, outputs, attrs, grad_fn)) == NULL)
            rc = -1;
        else
            rc = pair_record(r, rec, outs);
    }
    Py_XDECREF(rec);
    Py_XDECREF(seq);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_DECREF(recs);
    return rc < 0 ? NULL : PyBool_FromLong(done);
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

/* record(op, (a, b), (t,), {}, None) for a binary op: nothing allocated when no tape of
   this thread watches `a` or `b` (with a Tape's bit: one AND), no tuple for a Tape's
   record. 0 on success, -1 with an error set. */
int
sp_record_binary(PyObject *op, PyObject *a, PyObject *b, PyObject *t)
{
    if (sp_empty_dict == NULL && (sp_empty_dict = PyDict_New()) == NULL)
        return -1;
    if (recorders_bound) {
        uint64_t w = (IS_TENSOR(a) ? ((TensorObject *)a)->watch : 0)
                     | (IS_TENSOR(b) ? ((TensorObject *)b)->watch : 0);
        if (tl_recorders == NULL || (!(w & tl_mask) && !tl_slow))
            return 0;
    }
    PyObject *recs = recorders();
    if (recs == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *x[3] = {a, b, t};
    PyObject *seq = PySequence_Fast(recs, "recorders"), *rec = NULL;
    int rc = seq ? 0 : -1, differentiable = -1;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        int w = recorder_watches(r, x, 2);
        if (w <= 0) {
            rc = w;
            continue;
        }
        if (differentiable < 0 && !(differentiable = op_differentiable(op)))
            break;
        if (IS_TAPE(r)) {
            rc = tape_record((TapeObject *)r, op, NULL, NULL, NULL, NULL, x);
            continue;
        }
        if (rec == NULL) {
            PyObject *ins = PyTuple_Pack(2, a, b), *outs = PyTuple_Pack(1, t);
            if (ins != NULL && outs != NULL)
                rec = PyTuple_Pack(5, op, ins, outs, sp_empty_dict, Py_None);
            Py_XDECREF(ins);
            Py_XDECREF(outs);
            if (rec == NULL) {
                rc = -1;
                continue;
            }
        }
        rc = pair_record(r, rec, PyTuple_GET_ITEM(rec, 2));
    }
    Py_XDECREF(rec);
    Py_XDECREF(seq);
    Py_DECREF(recs);
    return rc;
}

/* --- the backward walk ------------------------------------------------------------- */

/* What the walk calls in Python (autodiff/tape.py, bind_backprop). */
static struct {
    PyObject *ctx_type;       /* runtime.registry.GradContext */
    PyObject *get_op;         /* registry.get_op: the Add OpDef, looked up on first use */
    PyObject *add_op;         /* the Add OpDef: sp_fast_binary accumulates with it */
    PyObject *add;            /* ops.math.add(a, b): mixed devices, dtypes, tracing */
    PyObject *output_grads;   /* _output_grads(outputs, grads) -> dys or None */
    PyObject *no_gradient;    /* _no_gradient(op, outputs): raises */
    PyObject *count_error;    /* _count_error(op, fn, got, n, outputs): raises */
    PyObject *checked_grad;   /* grad_checks.checked_grad(g, inp, i, op, fn) */
} bk;

static PyObject *
sp_bind_backprop(PyObject *mod, PyObject *args)
{
    PyObject *f[7];
    if (!PyArg_UnpackTuple(args, "bind_backprop", 7, 7, &f[0], &f[1], &f[2], &f[3], &f[4],
                           &f[5], &f[6]))
        return NULL;
    if (!PyType_Check(f[0])) {
        PyErr_SetString(PyExc_TypeError, "bind_backprop: GradContext must be a class");
        return NULL;
    }
    Py_CLEAR(bk.add_op);
    PyObject **slots[7] = {&bk.ctx_type, &bk.get_op, &bk.add, &bk.output_grads,
                           &bk.no_gradient, &bk.count_error, &bk.checked_grad};
    for (int i = 0; i < 7; i++)
        Py_XSETREF(*slots[i], Py_NewRef(f[i]));
    Py_RETURN_NONE;
}

/* Whether Tensor g has inp's shape and dtype (the Python path's check): 1, 0, -1. */
static int
same_layout(PyObject *g, PyObject *inp)
{
    if (!SP_IS_TENSOR(g) || !IS_TENSOR(inp))
        return 0;
    TensorObject *tg = (TensorObject *)g, *ti = (TensorObject *)inp;
    if (tg->data == NULL || ti->data == NULL)
        return 0;
    PyObject *dg = sp_tensor_dtype(tg), *di = dg ? sp_tensor_dtype(ti) : NULL;
    if (di == NULL)
        return -1;
    int same = dg == di ? 1 : PyObject_RichCompareBool(dg, di, Py_EQ);
    if (same <= 0)
        return same;
    PyObject *sg = PyObject_GetAttr(tg->data, str_shape);
    PyObject *si = sg ? PyObject_GetAttr(ti->data, str_shape) : NULL;
    same = si == NULL ? -1 : PyObject_RichCompareBool(sg, si, Py_EQ);
    Py_XDECREF(sg);
    Py_XDECREF(si);
    return same;
}

/* grads[id(inp)] += g, with the Add kernel's fast path for one device and dtype. */
static int
accumulate(PyObject *grads, PyObject *inp, PyObject *g)
{
    PyObject *key = PyLong_FromVoidPtr(inp);
    if (key == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(grads, key);        /* borrowed */
    PyObject *sum = NULL;
    if (old == NULL)
        sum = PyErr_Occurred() ? NULL : Py_NewRef(g);
    else {
        Py_INCREF(old);
        if (bk.add_op == NULL) {      /* (the ops are registered after this module loads) */
            PyObject *name = PyUnicode_FromString("Add");
            bk.add_op = name ? PyObject_CallOneArg(bk.get_op, name) : NULL;
            Py_XDECREF(name);
            PyErr_Clear();            /* (none: the Python add below) */
        }
        sum = bk.add_op ? sp_fast_binary(bk.add_op, old, g) : NULL;
        if (sum == NULL && !PyErr_Occurred()) {
            PyObject *args[2] = {old, g};
            sum = PyObject_Vectorcall(bk.add, args, 2, NULL);
        }
        Py_DECREF(old);
    }
    int rc = sum == NULL ? -1 : PyDict_SetItem(grads, key, sum);
    Py_XDECREF(sum);
    Py_DECREF(key);
    return rc;
}

/* The GradContext of one record (as _input_grads makes it: no __init__). */
static PyObject *
grad_context(TapeObject *tp, PyObject *op, PyObject *ins, PyObject *outs, PyObject *attrs,
             PyObject *grad_fn)
{
    Py_ssize_t n = PyTuple_GET_SIZE(ins);
    PyObject *needs = PyTuple_New(n);
    for (Py_ssize_t i = 0; needs != NULL && i < n; i++) {
        int w = tape_watches(tp, PyTuple_GET_ITEM(ins, i));
        if (w < 0)
            Py_CLEAR(needs);
        else
            PyTuple_SET_ITEM(needs, i, PyBool_FromLong(w));
    }
    PyTypeObject *type = (PyTypeObject *)bk.ctx_type;
    PyObject *ctx = needs ? type->tp_alloc(type, 0) : NULL;
    if (ctx == NULL || PyObject_SetAttr(ctx, str_op, op) < 0
        || PyObject_SetAttr(ctx, str_inputs, ins) < 0
        || PyObject_SetAttr(ctx, str_outputs, outs) < 0
        || PyObject_SetAttr(ctx, str_attrs, attrs) < 0
        || PyObject_SetAttr(ctx, str_grad_fn, grad_fn) < 0
        || PyObject_SetAttr(ctx, str_needs, needs) < 0)
        Py_CLEAR(ctx);
    Py_XDECREF(needs);
    return ctx;
}

/* fn(ctx, *dys) as a tuple of one gradient per input (checked count), or NULL. */
static PyObject *
call_grad(PyObject *fn, PyObject *ctx, PyObject *dys, PyObject *op, PyObject *outs,
          Py_ssize_t n)
{
    Py_ssize_t nd = PyTuple_GET_SIZE(dys);
    PyObject *stack[8], **args = nd < 8 ? stack : PyMem_Malloc((size_t)(nd + 1) * sizeof(PyObject *));
    if (args == NULL)
        return PyErr_NoMemory();
    args[0] = ctx;
    for (Py_ssize_t i = 0; i < nd; i++)
        args[i + 1] = PyTuple_GET_ITEM(dys, i);
    PyObject *res = PyObject_Vectorcall(fn, args, (size_t)(nd + 1), NULL);
    if (args != stack)
        PyMem_Free(args);
    if (res == NULL)
        return NULL;
    PyObject *tup;
    if (PyTuple_CheckExact(res))
        tup = res;
    else {
        tup = PyList_Check(res) ? PyList_AsTuple(res) : PyTuple_Pack(1, res);
        Py_DECREF(res);
        if (tup == NULL)
            return NULL;
    }
    if (PyTuple_GET_SIZE(tup) == n)
        return tup;
    Py_XDECREF(PyObject_CallFunction(bk.count_error, "OOnnO", op, fn, PyTuple_GET_SIZE(tup),
                                     n, outs));    /* (raises) */
    Py_DECREF(tup);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "backprop: wrong number of gradients");
    return NULL;
}

/* The output gradients of one record (a tuple), None (a new ref) when it has none. */
static PyObject *
output_grads(PyObject *outs, PyObject *grads)
{
    if (PyTuple_GET_SIZE(outs) == 1) {
        PyObject *key = PyLong_FromVoidPtr(PyTuple_GET_ITEM(outs, 0));
        PyObject *g = key ? PyDict_GetItemWithError(grads, key) : NULL;
        Py_XDECREF(key);
        if (g == NULL)
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        return PyTuple_Pack(1, g);
    }
    PyObject *args[2] = {outs, grads};
    PyObject *r = PyObject_Vectorcall(bk.output_grads, args, 2, NULL);
    if (r == NULL || r == Py_None)
        return r;
    Py_SETREF(r, PySequence_Tuple(r));
    return r;
}

/* Play one record back: its input gradients, accumulated into grads. 0 or -1. */
static int
play(TapeObject *tp, PyObject *grads, PyObject *op, PyObject *ins, PyObject *outs,
     PyObject *attrs, PyObject *grad_fn, PyObject *dys)
{
    PyObject *fn = grad_fn != Py_None ? Py_NewRef(grad_fn) : PyObject_GetAttr(op, str_grad);
    if (fn == NULL)
        return -1;
    if (fn == Py_None) {
        Py_XDECREF(PyObject_CallFunctionObjArgs(bk.no_gradient, op, outs, NULL)); /* raises */
        Py_DECREF(fn);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "backprop: no gradient function");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(ins);
    PyObject *ctx = grad_context(tp, op, ins, outs, attrs, grad_fn);
    PyObject *in_grads = ctx ? call_grad(fn, ctx, dys, op, outs, n) : NULL;
    Py_XDECREF(ctx);
    int rc = in_grads ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *g = PyTuple_GET_ITEM(in_grads, i), *inp = PyTuple_GET_ITEM(ins, i);
        if (g == Py_None)
            continue;
        int w = tape_watches(tp, inp);
        if (w <= 0) {
            rc = w;
            continue;
        }
        int same = same_layout(g, inp);
        if (same < 0) {
            rc = -1;
            continue;
        }
        g = same ? Py_NewRef(g)
                 : PyObject_CallFunction(bk.checked_grad, "OOnOO", g, inp, i, op, fn);
        rc = g == NULL ? -1 : accumulate(grads, inp, g);
        Py_XDECREF(g);
    }
    Py_XDECREF(in_grads);
    Py_DECREF(fn);
    return rc;
}

/* backprop(grads): _PyTape.backprop in C -- the records in reverse creation order, each
   on the path to a gradient played back, gradients accumulated into grads in place. */
static PyObject *
Tape_backprop(TapeObject *tp, PyObject *grads)
{
    if (!PyDict_Check(grads) || bk.ctx_type == NULL) {
        PyErr_SetString(PyExc_TypeError, bk.ctx_type == NULL ? "backprop: bind_backprop() "
                        "was not called" : "backprop(grads): grads must be a dict");
        return NULL;
    }
    for (Py_ssize_t i = tp->n - 1; i >= 0; i--) {
        if (i >= tp->n)                      /* a gradient function reset the tape */
            continue;
        Rec *r = &tp->recs[i];
        if (r->outs == NULL) {               /* binary: skipped unless its result has one */
            PyObject *t = weak_get(r->x[2]), *key = t ? PyLong_FromVoidPtr(t) : NULL;
            int on_path = key == NULL ? 0 : PyDict_Contains(grads, key);
            Py_XDECREF(key);
            if (PyErr_Occurred())
                return NULL;
            if (on_path <= 0)
                continue;
        }
        PyObject *outs = rec_outs(r), *ins = outs ? rec_ins(r) : NULL;
        if (ins == NULL)
            return NULL;
        PyObject *op = Py_NewRef(r->op), *attrs = Py_NewRef(r->attrs ? r->attrs : sp_empty_dict);
        PyObject *grad_fn = Py_NewRef(r->grad_fn ? r->grad_fn : Py_None);
        Py_INCREF(ins);
        Py_INCREF(outs);                /* (r moves if a gradient function records here) */
        PyObject *dys = output_grads(outs, grads);
        int rc = dys == NULL ? -1
                 : dys == Py_None ? 0 : play(tp, grads, op, ins, outs, attrs, grad_fn, dys);
        Py_XDECREF(dys);
        Py_DECREF(op);
        Py_DECREF(attrs);
        Py_DECREF(grad_fn);
        Py_DECREF(ins);
        Py_DECREF(outs);
        if (rc < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* Tape_Type is readied on first use (module.c need not know it). */
static PyObject *
sp_tape_type(PyObject *mod, PyObject *unused)
{
    if (!(Tape_Type.tp_flags & Py_TPFLAGS_READY)) {
        const char *names[] = {"grad", "shape", "op", "inputs", "outputs", "attrs", "grad_fn",
                               "needs", "_recorder", "_watched", "_records",
                               "tapeflow.runtime._speedups.recorders"};
        PyObject **strs[] = {&str_grad, &str_shape, &str_op, &str_inputs, &str_outputs,
                             &str_attrs, &str_grad_fn, &str_needs, &str_recorder, &str_watched,
                             &str_records, &str_cleaner_key};
        for (int i = 0; i < 12; i++)
            if (*strs[i] == NULL && (*strs[i] = PyUnicode_InternFromString(names[i])) == NULL)
                return NULL;
        if (sp_empty_dict == NULL && (sp_empty_dict = PyDict_New()) == NULL)
            return NULL;
        if (PyType_Ready(&Tape_Type) < 0 || PyType_Ready(&Cleaner_Type) < 0)
            return NULL;
    }
    return Py_NewRef((PyObject *)&Tape_Type);
}

PyMethodDef sp_tape_methods[] = {
    {"record", (PyCFunction)(void (*)(void))sp_record, METH_FASTCALL,
     "record(op, inputs, outputs, attrs, grad_fn=None): context.record in C."},
    {"set_recorders", (PyCFunction)sp_set_recorders, METH_O,
     "set_recorders(tapes): context.set_recorders in C (a C thread-local)."},
    {"tape_type", (PyCFunction)sp_tape_type, METH_NOARGS,
     "The Tape class (the C core of a GradientTape)."},
    {"bind_backprop", (PyCFunction)sp_bind_backprop, METH_VARARGS,
     "bind_backprop(GradContext, get_op, add, output_grads, no_gradient, count_error, "
     "checked_grad): what the backward walk calls."},
    {NULL, NULL, 0, NULL},
};
