"""``tapeflow.function`` (the seeds' ``defun``): trace a Python function once, replay it.

The first call with a given input signature runs the Python function eagerly, with
real values, while a *tracer* records every op it executes into a :class:`Graph`
(trace by execution): arguments become placeholders, reads and assignments of
Variables become ``read``/``assign`` nodes (captured by reference: a replay sees
their current values and assigns in order), tensors from outside the function
become constants (captured by value, as TensorFlow captures eager tensors), and the
ops a ``GradientTape`` *inside* the function runs for its gradients are recorded
like any other op, so a training step's backward pass is part of the graph. The
graph is optimised (:mod:`tapeflow.graph_passes`) and compiled to straight-line
Python that calls each kernel directly: no dispatch, no tape, no Python of the
original function.

Later calls with the same signature (shapes, dtypes and devices of tensor
arguments; values of other arguments; the global random seed) replay the graph; a
new signature traces again, with a warning after repeated retracing naming the
argument that keeps changing. A traced function called while another one traces is
inlined (its ops join the outer trace).

Gradients through a call, when a GradientTape outside it is recording: a *pure*
graph (ops, Variable reads, constants, copies) is replayed at full speed and the
call becomes ONE tape record whose gradient function is itself a traced function,
``<name>_backward(inputs + Variable values, dys)`` -- it replays the forward op by
op under a GradientTape and returns ``tape.gradient(outputs, inputs,
output_gradients=dys)`` --, traced once per signature and cached on the
:class:`ConcreteFunction`. Calling it under further tapes records it the same way,
so gradients of any order work, and it runs the same kernels in the same order as
the eager tape, so the gradients equal the eager ones. A graph with assignments,
random ops, Python or control-flow nodes is replayed op by op through the dispatcher
instead, so the tape sees every op (``ConcreteFunction.traced_backward = False``
forces that path everywhere). ``py_function``/``cond``/``while_loop`` nodes traced
while a tape records are made differentiable by :func:`record_node_gradient`.

Python side effects (``print``, appending to a list) happen while tracing only;
``tapeflow.print`` prints at every call. Python control flow on tensor *values*
(``if x > 0:``, ``float(x)``, ``x.numpy()``) raises at trace time naming the line:
use ``tapeflow.cond`` / ``tapeflow.while_loop``, or keep that part eager. Random ops
draw fresh numbers at every call (the op's key, the next counter of its stream):
reproducible under ``tf.random.set_seed``; with an op seed the numbers are the ones
the eager calls would draw, in the same order.

The graph as traced (``optimize=False``; the passes would rewrite it):

>>> import tapeflow as tf
>>> @tf.function(optimize=False)
... def f(x, y):
...     return tf.reduce_sum(x * y + 1.0)
>>> print(f(tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])))
tf.Tensor(13.0, shape=(), dtype=float32)
>>> print(f.get_concrete_function(tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])).graph)
graph f(x: float32[2] cpu:0, y: float32[2] cpu:0):
  %2 = Mul(%0, %1)
  %3 = const 1.
  %4 = Add(%2, %3)
  %5 = Sum(%4) {axis=None, keepdims=False}
  return %5
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys
import threading
import warnings

import numpy as np

from ..runtime.errors import InvalidArgumentError, TapeflowError
from ..runtime.tensor import Tensor, _wrap
from ..runtime.variable import Variable
from ..runtime import context as _ctx
from ..runtime.context import tracing as _tracing
from ..autodiff.tape import GradientTape
from ..ops import math as _m
from ..ops import random as _random_mod
from ..runtime import dispatch as _dispatch_mod
from ..runtime import dtypes as _dt
from ..runtime import variable as _variable_mod
from ..runtime.dispatch import convert_to_tensor
from ..runtime.registry import OpDef
from ..runtime.config import cuda_graphs as _cuda_graphs
from . import capture as _capture
from . import graph_passes
from .graph import Graph, Node

__all__ = ["function", "defun", "Function", "ConcreteFunction", "Graph", "Node",
           "TracingError", "py_function", "opaque_call", "print_", "RETRACE_WARN_AFTER"]

#: warn when one Function has traced this many signatures
RETRACE_WARN_AFTER = 5

# ``_tracing`` (from tapeflow.tensor): the number of tracers active in any thread, read
# on dispatch's slow path and by Tensor/Variable before calling the hooks below
_tl = threading.local()


class TracingError(TapeflowError):
    """Python code needed a tensor's value while :func:`function` was tracing."""


# --- tracing -------------------------------------------------------------------------------

class _Tracer:
    """Records the ops one thread executes into a Graph (see the module doc)."""

    def __init__(self, graph, parent=None):
        self.graph = graph
        self.ids: dict = {}            # id(Tensor) -> vid
        self.keep: list = []           # tensors whose ids are in ``ids`` (pins the ids)
        self.dynamic: set = set()      # vids whose value depends on arguments/state
        self.var_vid: dict = {}        # id(Variable) -> vid of its current value
        self.vars: list = []           # Variables captured (kept alive)
        self.var_before: dict = {}     # id(Variable) -> its value before the first assign
        self.captures: list = []       # tensors of enclosing traces this one reads
        self.assigned: dict = {}       # id(Variable) -> Variable, those assigned
        self.parent = parent
        # a branch or loop body traced only to be recorded (its effects are put back and
        # happen when the node runs): tf.print does not print while tracing it
        self.speculative = parent.speculative if parent is not None else False
        # Variable arguments (by position) and the trace's tensor arguments are shared
        # with the sub-traces of tf.cond / tf.while_loop
        self.var_args: dict = parent.var_args if parent is not None else {}
        self.vargs: list = parent.vargs if parent is not None else []

    def bind(self, t, vid, dynamic):
        self.ids[id(t)] = vid
        self.keep.append(t)
        if dynamic:
            self.dynamic.add(vid)

    def knows(self, t):
        return id(t) in self.ids or (self.parent is not None and self.parent.knows(t))

    def vid_of(self, t):
        """The value id of tensor ``t``: a tensor of an enclosing trace becomes an input
        of this (sub-)graph; any other unknown tensor is captured as a constant."""
        vid = self.ids.get(id(t))
        if vid is None:
            g = self.graph
            vid = g.new_value(t._data.shape, t._data.dtype, t._device)
            if self.parent is not None and self.parent.knows(t):
                pvid = self.parent.vid_of(t)
                g.args.append(vid)
                g.arg_names.append(f"capture{len(self.captures)}")
                self.captures.append(t)
                self.bind(t, vid, pvid in self.parent.dynamic)
            else:
                g.nodes.append(Node("const", (), (vid,), value=t._data, device=t._device))
                self.bind(t, vid, False)
        return vid

    # hooks ------------------------------------------------------------------------------
    def op(self, op, tensors, outs, attrs, fn, dev, needs_device):
        g = self.graph
        ids = self.ids
        ins = []
        for t in tensors:
            vid = ids.get(id(t))
            ins.append(vid if vid is not None else self.vid_of(t))
        # random ops carry a key and a counter; an OpDef subclass may declare `stateful`
        stateful = ("key" in attrs and "counter" in attrs) or (
            type(op) is not OpDef and bool(getattr(op, "stateful", False)))
        dynamic = self.dynamic
        dyn = stateful or any(i in dynamic for i in ins)
        ovids = []
        for t in outs:
            vid = g.new_value(t._data.shape, t._data.dtype, dev)
            self.bind(t, vid, dyn)
            ovids.append(vid)
        g.nodes.append(Node("op", ins, ovids, op=op, attrs=dict(attrs), fn=fn, device=dev,
                            needs_device=needs_device, stateful=stateful))

    def copy(self, src, out, dev):
        g = self.graph
        i = self.vid_of(src)
        vid = g.new_value(out._data.shape, out._data.dtype, dev)
        self.bind(out, vid, i in self.dynamic)
        g.nodes.append(Node("copy", (i,), (vid,), device=dev))

    def read(self, var, value):
        """A Variable read: returns the tensor to use (an alias mapped to the read)."""
        vid = self.var_vid.get(id(var))
        g = self.graph
        if vid is None:
            ref = self.var_args.get(id(var), var)
            vid = g.new_value(value._data.shape, value._data.dtype, value._device)
            g.nodes.append(Node("read", (), (vid,), var=ref))
            self.var_vid[id(var)] = vid
            if not isinstance(ref, int):
                self.vars.append(var)
        alias = _wrap(value._data, value._device)
        self.bind(alias, vid, True)
        return alias

    def assign(self, var, value, prev):
        self.var_before.setdefault(id(var), prev)
        self.assigned[id(var)] = var
        vid = self.vid_of(value)
        ref = self.var_args.get(id(var), var)
        self.graph.nodes.append(Node("assign", (vid,), (), var=ref))
        if not isinstance(ref, int) and not any(v is var for v in self.vars):
            self.vars.append(var)
        self.var_vid[id(var)] = vid
        self.dynamic.add(vid)

    def created(self, var):
        """A Variable created while tracing: later reads read it (its initialiser ran
        once, at trace time)."""
        self.var_vid.pop(id(var), None)

    def check(self, t, what):
        vid = self.ids.get(id(t))
        if vid is not None and vid in self.dynamic:
            raise TracingError(
                f"{what} needs the value of a tensor that depends on the arguments or state "
                f"of the traced function {self.graph.name}(){_user_line()}: Python control "
                "flow and host conversions cannot be traced. Use tf.cond(pred, true_fn, "
                "false_fn) or tf.while_loop(cond, body, loop_vars) for control flow, "
                "tf.print for printing, or call that part outside tf.function.")


def _current():
    return getattr(_tl, "tracer", None)


def _user_line():
    """`` at file.py:12 (`source line`)`` for the innermost frame outside tapeflow."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tapeflow/
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(here + os.sep):
            src = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            return f" at {f.f_code.co_filename}:{f.f_lineno}" + (f" (`{src}`)" if src else "")
        f = f.f_back
    return ""


# hooks called by the dispatcher and Tensor/Variable (cheap when not tracing)

def trace_op(op, tensors, outs, attrs, fn, dev, needs_device):
    tr = _current()
    if tr is not None:
        tr.op(op, tensors, outs, attrs, fn, dev, needs_device)


def trace_copy(src, out, dev):
    tr = _current()
    if tr is not None:
        tr.copy(src, out, dev)


def trace_read(var, value):
    tr = _current()
    return value if tr is None else tr.read(var, value)


def trace_assign(var, prev):
    tr = _current()
    if tr is not None:
        tr.assign(var, var._value, prev)


def trace_check(t, what):
    tr = _current()
    if tr is not None:
        tr.check(t, what)


class _ContextTracer(_ctx.Tracer):
    """The observer the dispatcher and Tensor/Variable call while tracing."""
    current = staticmethod(_current)
    trace_op = staticmethod(trace_op)
    trace_copy = staticmethod(trace_copy)
    trace_read = staticmethod(trace_read)
    trace_assign = staticmethod(trace_assign)
    trace_check = staticmethod(trace_check)

    @staticmethod
    def opaque_call(fn, args):
        return opaque_call(fn, args)


def _on_variable_created(var):
    if _tracing[0]:
        tr = _current()
        if tr is not None:
            tr.created(var)


# --- signatures, flattening ---------------------------------------------------------------

def _flatten(x, leaves, path, paths):
    """Nested lists/tuples/dicts -> leaves; returns a structure with ("leaf", i) slots."""
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return (type(x), [_flatten(v, leaves, f"{path}[{i}]", paths) for i, v in enumerate(x)])
    if isinstance(x, dict):
        keys = sorted(x, key=repr)
        return (dict, keys, [_flatten(x[k], leaves, f"{path}[{k!r}]", paths) for k in keys])
    leaves.append(x)
    paths.append(path)
    return ("leaf", len(leaves) - 1)


def _pack(struct, leaves):
    if struct[0] == "leaf":
        return leaves[struct[1]]
    if struct[0] is dict:
        return {k: _pack(s, leaves) for k, s in zip(struct[1], struct[2])}
    typ, items = struct
    vals = [_pack(s, leaves) for s in items]
    return typ(vals) if typ in (list, tuple) else typ(*vals)


_TAPES = []
_RANDOM = []


def _tapes():
    """``tape._tapes_active`` (imported on first use: tape imports this module's users)."""
    if not _TAPES:
        _tapes_active = _ctx.tapes_active
        _TAPES.append(_tapes_active)
    return _TAPES[0]


def _state_seed():
    if not _RANDOM:
        _state = _random_mod._state
        _RANDOM.append(_state)
    return _RANDOM[0].global_seed


def _arrays_to_tensors(args, kwargs):
    """NumPy arrays among the arguments become tensors (as in TensorFlow): they are
    inputs of the graph, not constants frozen into it."""
    if not any(type(a) is np.ndarray or isinstance(a, (list, tuple, dict))
               for a in (*args, *kwargs.values())):
        return args, kwargs           # (the common case, without flattening)
    leaves = []
    struct = _flatten((args, kwargs), leaves, "", [])
    if not any(isinstance(x, np.ndarray) for x in leaves):
        return args, kwargs
    constant = _dispatch_mod.constant
    leaves = [constant(x) if isinstance(x, np.ndarray) else x for x in leaves]
    return _pack(struct, leaves)


def _leaf_key(x):
    if isinstance(x, Variable):
        return ("V", tuple(x.shape), x.dtype.name, x._device)
    if isinstance(x, Tensor):
        return ("T", tuple(x._data.shape), x._data.dtype, x._device)
    if type(x) is slice:        # (unhashable before Python 3.12)
        return ("S", x.start, x.stop, x.step)
    try:
        hash(x)
    except TypeError:
        return ("id", id(x))
    return ("P", type(x), x)


# --- compiled replay -----------------------------------------------------------------------

def _fresh_random_attrs(attrs):
    """``f() -> attrs`` with the next counter of the op's key (see tapeflow.random)."""
    _next_counter = _random_mod._next_counter
    key = attrs["key"]

    def fresh():
        return {**attrs, "counter": _next_counter(key)}
    return fresh


def _compile(graph: Graph):
    """Straight-line Python for ``graph``: ``run(arrays, vars) -> output arrays``."""
    ns = {"_wrap": _wrap}
    lines = [f"def run_{_ident(graph.name)}(_args, _vargs):"]
    if graph.args:
        lines.append("    " + "".join(f"v{a}, " for a in graph.args) + "= _args")
    linemap = {}
    # free each intermediate after its last use (as eager code would): replaying a long
    # chain must not keep every buffer alive, and buffer reuse sees fewer references
    keep = set(graph.outputs) | set(graph.args)
    last = {}
    for i, n in enumerate(graph.nodes):
        for v in n.outputs:
            last.setdefault(v, i)
        for v in n.inputs:
            last[v] = i
    dels = {}
    for v, i in last.items():
        if v not in keep:
            dels.setdefault(i, []).append(v)
    for i, n in enumerate(graph.nodes):
        outs = ", ".join(f"v{o}" for o in n.outputs)
        ins = ", ".join(f"v{x}" for x in n.inputs)
        if n.kind in ("op", "fused"):
            ns[f"K{i}"] = n.fn
            call = f"K{i}({ins}"
            if n.needs_device:
                ns[f"D{i}"] = n.device
                call += (", " if ins else "") + f"device=D{i}"
            if n.stateful and "counter" in n.attrs and "key" in n.attrs:
                # a random op: a fresh counter for its key at every call (the stream goes on)
                ns[f"R{i}"] = _fresh_random_attrs(n.attrs)
                call += (", " if (ins or n.needs_device) else "") + f"**R{i}()"
            elif any(not k.startswith("_") for k in n.attrs):
                # ("_"-keys are the passes' bookkeeping, not kernel attributes)
                ns[f"A{i}"] = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
                call += (", " if (ins or n.needs_device) else "") + f"**A{i}"
            call += ")"
            line = f"    {outs} = {call}"
        elif n.kind == "const":
            ns[f"C{i}"] = n.value
            line = f"    {outs} = C{i}"
        elif n.kind == "read":
            src = f"_vargs[{n.var}]" if isinstance(n.var, int) else f"V{i}"
            if not isinstance(n.var, int):
                ns[f"V{i}"] = n.var
            line = f"    {outs} = {src}._value._data"
        elif n.kind == "assign":
            src = f"_vargs[{n.var}]" if isinstance(n.var, int) else f"V{i}"
            if not isinstance(n.var, int):
                ns[f"V{i}"] = n.var
            line = f"    {src}._value = _wrap({ins}, {src}._value._device)"
        elif n.kind == "copy":
            ns[f"D{i}"] = n.device
            ns[f"S{i}"] = graph.meta[n.inputs[0]][2]
            line = (f"    {outs} = D{i}.backend.copy_from({ins}, S{i}, D{i}) if S{i}.backend is "
                    f"D{i}.backend or not D{i}.is_host else S{i}.backend.to_host({ins}, S{i})")
        elif n.kind in ("py", "print", "cond", "while"):
            ns[f"P{i}"] = n.fn
            if n.attrs.get("_vargs"):           # control flow: sub-graphs read Variable args
                ins = "_vargs" + (", " + ins if ins else "")
            if len(n.outputs) == 1:
                line = f"    {outs}, = P{i}({ins})"
            elif n.outputs:
                line = f"    {outs} = P{i}({ins})"
            else:
                line = f"    P{i}({ins})"
        else:
            raise AssertionError(f"unknown node kind {n.kind}")
        linemap[len(lines) + 1] = i
        lines.append(line)
        if i in dels:
            lines.append("    del " + ", ".join(f"v{v}" for v in sorted(dels[i])))
    lines.append("    return (" + "".join(f"v{o}, " for o in graph.outputs) + ")")
    src = "\n".join(lines) + "\n"
    filename = f"<tapeflow.function {graph.name}>"
    exec(compile(src, filename, "exec"), ns)
    fn = ns[f"run_{_ident(graph.name)}"]
    return fn, src, linemap, filename


def _ordered_locks(variables):
    """The locks of ``variables`` (each once), ordered by creation of the Variable."""
    by_id = {}
    for var in variables:
        by_id[var._id] = var._lock
    return [by_id[k] for k in sorted(by_id)]


def _ident(name):
    return "".join(c if c.isalnum() else "_" for c in name) or "f"


class ConcreteFunction:
    """One traced signature of a :class:`Function`: ``graph`` (the traced ops, printable)
    and its compiled replay. Call it with the same arguments as the Function.

    ``cuda_graph_info``: None when ``tf.config.experimental.enable_cuda_graphs`` was
    off when its Function traced it, else a :class:`tapeflow.tracing.capture.CaptureInfo`
    (whether it replays as a CUDA graph, and if not, why)."""

    cuda_graph_info = None

    def __init__(self, graph, optimize=True, passes=None):
        self.graph = graph
        self.passes_run = []
        if optimize:
            self.passes_run = graph_passes.optimize(graph, passes)
        self._run, self.source, self._linemap, self._filename = _compile(graph)

    #: the Variables the function writes (its own assignments and those of its
    #: tf.cond / tf.while_loop branches): a position in the Variable arguments, or a
    #: captured Variable. Empty: the replay takes no lock.
    _writes = ()
    _static_locks = None

    def _set_writes(self, tracer):
        """Record the Variables ``tracer`` saw assigned (Function._trace)."""
        refs = []
        for var in tracer.assigned.values():
            ref = tracer.var_args.get(id(var), var)
            if not any(r is ref for r in refs):
                refs.append(ref)
        self._writes = tuple(refs)
        if all(not isinstance(r, int) for r in refs):
            self._static_locks = _ordered_locks(refs)

    def _locks(self, vargs):
        """The locks of the Variables this call writes, in one global order (the
        Variables' creation order), so two replays never wait on each other in a cycle."""
        locks = self._static_locks
        if locks is None:
            locks = _ordered_locks([vargs[r] if isinstance(r, int) else r
                                    for r in self._writes])
        return locks

    def _replay(self, arrays, vargs):
        if self._writes:
            # A function that assigns Variables holds each written Variable's lock -- the
            # one eager assign/assign_add take -- from before its first read to after its
            # last write, so a concurrent eager update or another replay never falls
            # between them (docs/concurrency.md).
            locks = self._static_locks
            if locks is None:
                locks = self._locks(vargs)
            if len(locks) == 1:
                lock = locks[0]
                lock.acquire()
                try:
                    return self._run(arrays, vargs)
                except Exception as e:
                    raise self._error(e, arrays, vargs) from None
                finally:
                    lock.release()
            for lock in locks:
                lock.acquire()
            try:
                return self._run(arrays, vargs)
            except Exception as e:
                raise self._error(e, arrays, vargs) from None
            finally:
                for lock in reversed(locks):
                    lock.release()
        try:
            return self._run(arrays, vargs)
        except Exception as e:
            raise self._error(e, arrays, vargs) from None

    def _error(self, e, arrays, vargs):
        """Name the op that failed (its line in the generated code)."""
        tb = e.__traceback__
        node = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self._filename:
                node = self.graph.nodes[self._linemap.get(tb.tb_lineno, 0)]
            tb = tb.tb_next
        if node is None or node.kind not in ("op", "fused") or node.op is None:
            return e
        _translate = _dispatch_mod._translate
        ins = [_Meta(self.graph.meta[i]) for i in node.inputs]
        return _translate(e, node.op, node.device, ins, node.attrs)

    def _eager(self, leaves, vargs=None, reads=None):
        """Replay op by op through the dispatcher (a GradientTape outside is recording).
        ``vargs``: the Variable arguments of the enclosing function (for sub-graphs);
        ``reads``: {read node: tensor} values to use instead of reading the Variables.
        A call that writes Variables holds their locks throughout, as the fast replay."""
        if self._writes and vargs is None:
            locks = self._locks([x for x in leaves if isinstance(x, (Tensor, Variable))])
            for lock in locks:
                lock.acquire()
            try:
                return self._eager_unlocked(leaves, vargs, reads)
            finally:
                for lock in reversed(locks):
                    lock.release()
        return self._eager_unlocked(leaves, vargs, reads)

    def _eager_unlocked(self, leaves, vargs=None, reads=None):
        copy_to_device = _dispatch_mod.copy_to_device
        execute = _dispatch_mod.execute
        g = self.graph
        env = {}
        tensors = [x for x in leaves if isinstance(x, (Tensor, Variable))]
        for a, leaf in zip(g.args, tensors):
            env[a] = leaf
        if vargs is None:
            vargs = tensors
        for n in g.nodes:
            k = n.kind
            if k == "op":
                out = execute(n.op, tuple(env[i] for i in n.inputs), n.attrs)
                outs = out if isinstance(out, tuple) else (out,)
                for o, t in zip(n.outputs, outs):
                    env[o] = t
            elif k == "const":
                env[n.outputs[0]] = _wrap(n.value, n.device)
            elif k == "read":
                if reads is not None and n in reads:
                    env[n.outputs[0]] = reads[n]
                    continue
                var = vargs[n.var] if isinstance(n.var, int) else n.var
                env[n.outputs[0]] = var.read_value()
            elif k == "assign":
                var = vargs[n.var] if isinstance(n.var, int) else n.var
                var.assign(env[n.inputs[0]])
            elif k == "copy":
                env[n.outputs[0]] = copy_to_device(env[n.inputs[0]], n.device)
            elif k == "fused":
                for sub in n.attrs["_nodes"]:       # the ops the fused kernel replaced
                    out = execute(sub.op, tuple(env[i] for i in sub.inputs), sub.attrs)
                    outs = out if isinstance(out, tuple) else (out,)
                    for o, t in zip(sub.outputs, outs):
                        env[o] = t
            else:
                ins = [env[i] for i in n.inputs]
                res = (n.attrs["_eager"](vargs, *ins) if n.attrs.get("_vargs")
                       else n.attrs["_eager"](*ins))
                for o, t in zip(n.outputs, res):
                    env[o] = t
        return [env[o] for o in g.outputs]

    def __call__(self, *args, **kwargs):
        leaves = []
        _flatten((args, kwargs), leaves, "", [])
        return self._call_leaves(leaves)

    def _call_leaves(self, leaves):
        g = self.graph
        _tapes_active = _ctx.tapes_active
        if _tapes_active[0]:
            outs = (self._call_recorded(leaves) if self.traced_backward and self._pure()
                    else self._eager(leaves))
        else:
            outs = self._call_fast(leaves)
        return _pack(g.structure, _Outputs(g, outs))

    def _call_tensors(self, args):
        """The replay for Tensor arguments only (Function's hot path)."""
        g = self.graph
        res = self._replay([a._data for a in args], args)
        meta = g.meta
        outs = [_wrap(a, meta[o][2]) for a, o in zip(res, g.outputs)]
        return _pack(g.structure, _Outputs(g, outs))

    def _call_fast(self, leaves):
        arrays = []
        vargs = []
        for x in leaves:
            if isinstance(x, Variable):
                vargs.append(x)
                arrays.append(x._value._data)
            elif isinstance(x, Tensor):
                vargs.append(x)
                arrays.append(x._data)
        res = self._replay(arrays, vargs)
        g = self.graph
        return [_wrap(a, g.meta[o][2]) for a, o in zip(res, g.outputs)]

    # --- the traced backward pass -----------------------------------------------------
    #: with a tape recording, replay fast and record the call as one tape record whose
    #: gradient is a traced backward function (False: replay op by op, as eager)
    traced_backward = True

    def _pure(self):
        """Whether the graph is a pure function of its inputs and Variable reads (no
        assignments, random ops, Python nodes or control flow): then its gradient may
        be computed by running it again."""
        p = getattr(self, "_is_pure", None)
        if p is None:
            p = self._is_pure = all(
                n.kind in ("op", "const", "read", "copy", "fused") and not n.stateful
                for n in self.graph.nodes)
        return p

    def _call_recorded(self, leaves):
        """Replay fast, keeping the intermediate values; record one tape record for the
        call. Its gradient function runs a traced backward (cached per signature):
        from the saved intermediates when no tape records the backward pass (first
        order), or, under tapes (higher orders), one that replays the forward from the
        record's inputs so the tapes see the gradient's dependence on them."""
        _tape = _ctx  # (the eager context holds the active tapes)
        g = self.graph
        tensors = [x for x in leaves if isinstance(x, (Tensor, Variable))]
        read_nodes = [n for n in g.nodes if n.kind == "read"]
        inputs = [x for x in tensors if not isinstance(x, Variable)]
        for n in read_nodes:        # the tapes watch these reads (trainable Variables)
            var = tensors[n.var] if isinstance(n.var, int) else n.var
            inputs.append(var.read_value())
        run, saved_vids, _ = self._saved_program()
        arrays = [x._value._data if isinstance(x, Variable) else x._data for x in tensors]
        try:
            res = run(arrays, tensors)
        except Exception:
            self._replay(arrays, tensors)        # raises the error naming the op
            raise
        k = len(g.outputs)
        outs = [_wrap(a, g.meta[o][2]) for a, o in zip(res[:k], g.outputs)]
        if not outs:
            return outs
        saved = [_wrap(a, g.meta[v][2]) for a, v in zip(res[k:], saved_vids)]
        n_in = len(inputs)
        float_outs = [i for i, o in enumerate(outs) if o.dtype.is_inexact]

        def backward(ctx, *dys):
            dys = [dys[i] for i in float_outs]
            if _tape.tapes_active[0]:
                grads = self._backward_function()(list(ctx.inputs), dys)
            else:
                grads = self._saved_backward_function()(saved, dys)
            return tuple(grads) + (None,) * (n_in - len(grads))
        _tape.record(_call_op(), tuple(inputs), tuple(outs), {}, backward)
        return outs

    def _saved_program(self):
        """The forward replay that also returns the values the backward pass needs:
        ``(run, saved value ids, nodes)`` (fused nodes expanded into their ops)."""
        prog = getattr(self, "_saved", None)
        if prog is None:
            g = self.graph
            nodes = []
            for n in g.nodes:
                nodes.extend(n.attrs["_nodes"] if n.kind == "fused" else [n])
            saved, seen = [], set()
            for n in nodes:
                if n.kind in ("op", "copy"):
                    for v in list(n.inputs) + list(n.outputs):
                        if v not in seen:
                            seen.add(v)
                            saved.append(v)
            for v in g.outputs:
                if v not in seen:
                    seen.add(v)
                    saved.append(v)
            fg = Graph(f"{g.name}_forward")
            fg.args, fg.meta, fg.nodes = g.args, g.meta, nodes
            fg.outputs = list(g.outputs) + saved
            prog = self._saved = (_compile(fg)[0], saved, nodes)
        return prog

    def _saved_backward_function(self):
        """``backward(saved values, dys) -> gradients`` (a traced function): the
        forward ops are put on a GradientTape as records over the saved values (no
        forward kernel runs again) and ``tape.gradient`` runs the ops' gradient
        functions, in the order the eager tape would."""
        bwd = getattr(self, "_bwd_saved", None)
        if bwd is not None:
            return bwd
        _COPY = _dispatch_mod._COPY
        g = self.graph
        _, saved_vids, nodes = self._saved_program()
        tensor_args = [a for i, a in enumerate(g.args) if not _is_var_slot(g, i)]
        sources = tensor_args + [n.outputs[0] for n in g.nodes if n.kind == "read"]

        def backward(vals, dys):
            _tape = _ctx  # (the eager context holds the active tapes)
            env = dict(zip(saved_vids, vals))
            srcs = [env.get(v) for v in sources]
            with GradientTape(watch_accessed_variables=False) as tape:
                for t in srcs:
                    if t is not None and t.dtype.is_inexact:
                        tape.watch(t)
                for n in nodes:
                    if n.kind == "op" and n.op.differentiable and n.inputs:
                        _tape.record(n.op, tuple(env[i] for i in n.inputs),
                                     tuple(env[o] for o in n.outputs), n.attrs)
                    elif n.kind == "copy":
                        _tape.record(_COPY, (env[n.inputs[0]],), (env[n.outputs[0]],), {},
                                     None)
            outs = [env[o] for o in g.outputs if env[o].dtype.is_inexact]
            live = [t for t in srcs if t is not None and t.dtype.is_inexact]
            gs = iter(tape.gradient(outs, live, output_gradients=list(dys)))
            return [next(gs) if t is not None and t.dtype.is_inexact else None for t in srcs]
        self._bwd_saved = function(backward, name=f"{g.name}_backward")
        return self._bwd_saved

    def _backward_function(self):
        bwd = getattr(self, "_bwd", None)
        if bwd is not None:
            return bwd
        g = self.graph
        read_nodes = [n for n in g.nodes if n.kind == "read"]
        cf = self

        def backward(xs, dys):
            n_args = len(xs) - len(read_nodes)
            args, vals = list(xs[:n_args]), xs[n_args:]
            reads = dict(zip(read_nodes, vals))
            leaves = iter(args)
            # Variable arguments are read through ``reads``; stand-ins fill their slots
            stand_in = _stand_in()
            full = [stand_in if _is_var_slot(g, i) else next(leaves)
                    for i in range(len(g.args))]
            with GradientTape(watch_accessed_variables=False) as tape:
                for x in xs:
                    if x.dtype.is_inexact:
                        tape.watch(x)
                outs = cf._eager(full, vargs=full, reads=reads)
            outs = [o for o in outs if o.dtype.is_inexact]
            srcs = [x for x in xs if x.dtype.is_inexact]
            gs = iter(tape.gradient(outs, srcs, output_gradients=list(dys)))
            return [next(gs) if x.dtype.is_inexact else None for x in xs]
        self._bwd = function(backward, name=f"{g.name}_backward_recompute")
        return self._bwd

    def pretty_printed_concrete_signatures(self):
        return str(self.graph).splitlines()[0]


_CALL_OP = []


def _call_op():
    """The OpDef of a traced call's tape record (created on first use)."""
    if not _CALL_OP:
        _CALL_OP.append(OpDef("TracedCall", inputs=("*inputs",), dtype_rule="none"))
    return _CALL_OP[0]


def _stand_in():
    return convert_to_tensor(0.0)


def _is_var_slot(graph, i):
    return i in getattr(graph, "var_arg_positions", ())


class _Meta:
    """Stands in for an input Tensor in an error message (shape and dtype only)."""

    def __init__(self, meta):
        self._data = np.empty(0, meta[1])
        self.shape = meta[0]
        self.dtype = _dt.from_numpy(meta[1])
        self._device = meta[2]


class _Outputs:
    """Output leaves: graph outputs by index, Python values by their stored value."""

    def __init__(self, graph, outs):
        self.outs = outs
        self.py = graph.py_outputs

    def __getitem__(self, i):
        kind, v = self.py[i]
        return self.outs[v] if kind == "t" else v


# --- the decorator ------------------------------------------------------------------------

class Function:
    """A Python function traced per input signature and replayed (see the module doc).

    Attributes: ``python_function``; ``optimize`` (run the graph passes);
    ``passes``: the names of the passes to run (default: all of
    :data:`tapeflow.tracing.graph_passes.PASSES`).
    """

    def __init__(self, fn, optimize=True, passes=None, name=None):
        self.python_function = fn
        self.optimize = optimize
        self.passes = passes
        self._name = name or getattr(fn, "__name__", "function")
        self._cache: dict = {}
        self._fast: dict = {}          # (seed, (shape, dtype, device)...) -> ConcreteFunction
        self._keys: list = []
        self._warned = False
        self._lock = threading.RLock()
        self._sig = None
        try:
            self._sig = inspect.signature(fn)
        except (TypeError, ValueError):
            pass
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        # one bound Function per instance, so each object keeps its own traces
        bound = obj.__dict__.get(("__tf_function__", id(self))) if hasattr(obj, "__dict__") \
            else None
        if bound is None:
            bound = Function(functools.partial(self.python_function, obj), self.optimize,
                             self.passes, self._name)
            try:
                obj.__dict__[("__tf_function__", id(self))] = bound
            except (AttributeError, TypeError):
                pass
        return bound

    # the signature ------------------------------------------------------------------------
    def _key(self, leaves):
        # the global random seed is part of the signature: random ops' keys are fixed at
        # trace time, so tf.random.set_seed(other) traces again (and stays reproducible)
        _state = _random_mod._state
        return tuple(_leaf_key(x) for x in leaves) + (("seed", _state.global_seed),)

    def _arg_names(self, paths):
        return [_pretty_path(p, self._sig) for p in paths]

    def get_concrete_function(self, *args, **kwargs) -> ConcreteFunction:
        """The :class:`ConcreteFunction` for these arguments (traced if new)."""
        args, kwargs = _arrays_to_tensors(args, kwargs)
        leaves, paths = [], []
        _flatten((args, kwargs), leaves, "", paths)
        return self._concrete(args, kwargs, leaves, paths)[0]

    def _concrete(self, args, kwargs, leaves, paths):
        key = self._key(leaves)
        cf = self._cache.get(key)
        if cf is not None:
            return cf, None
        with self._lock:
            cf = self._cache.get(key)
            if cf is not None:
                return cf, None
            cf, result = self._trace(args, kwargs, leaves, paths)
            self._cache[key] = cf
            self._keys.append((key, paths))
            if len(self._cache) >= RETRACE_WARN_AFTER and not self._warned:
                self._warned = True
                warnings.warn(self._retrace_message(), RuntimeWarning, stacklevel=4)
        return cf, result

    def _retrace_message(self):
        keys = [k for k, _ in self._keys]
        paths = self._keys[-1][1]
        changing = []
        for i in range(min(len(k) for k in keys)):
            vals = {k[i] for k in keys}
            if len(vals) > 1:
                changing.append((len(vals), paths[i] if i < len(paths) else None))
        changing.sort(key=lambda c: (-c[0], c[1] or ""))
        names = ", ".join("the global random seed (tf.random.set_seed)" if p is None
                          else _pretty_path(p, self._sig) for _, p in changing[:3]) or "?"
        return (f"tf.function {self._name!r} has been traced {len(keys)} times (one graph per "
                f"input signature); the argument(s) that keep changing: {names}. Pass tensors "
                "rather than Python numbers for values that vary, and keep shapes fixed.")

    # tracing ------------------------------------------------------------------------------
    def _trace(self, args, kwargs, leaves, paths):
        g = Graph(self._name)
        parent = _current()
        tr = _Tracer(g, parent)
        names = self._arg_names(paths)
        targs = []
        for x, name in zip(leaves, names):
            if isinstance(x, Variable):
                pos = len(g.args)
                vid = g.new_value(x.shape, x.dtype.np, x._device)
                g.args.append(vid)
                g.arg_names.append(name)
                tr.var_args[id(x)] = pos
                g.var_arg_positions = getattr(g, "var_arg_positions", set()) | {pos}
                # a Variable argument is read/assigned through its position
                targs.append(x)
            elif isinstance(x, Tensor):
                vid = g.new_value(x._data.shape, x._data.dtype, x._device)
                g.args.append(vid)
                g.arg_names.append(name)
                tr.bind(x, vid, True)
                targs.append(x)
        tr.vargs = targs
        _scopes = _dispatch_mod._scopes
        _tl.tracer = tr
        _tracing[0] += 1
        _scopes[0] += 1           # every op takes the dispatcher's slow path, where the hook is
        try:
            result = self.python_function(*args, **kwargs)
        finally:
            _scopes[0] -= 1
            _tracing[0] -= 1
            _tl.tracer = parent
        out_leaves, _ = [], []
        g.structure = _flatten(result, out_leaves, "", _)
        g.py_outputs = []
        for x in out_leaves:
            if isinstance(x, Variable):          # returned Variables: their value at the end
                x = tr.read(x, x._value)
            if isinstance(x, Tensor):
                vid = tr.vid_of(x)
                g.py_outputs.append(("t", len(g.outputs)))
                g.outputs.append(vid)
            else:
                g.py_outputs.append(("py", x))
        g.captured_variables = list(tr.vars)
        cf = ConcreteFunction(g, self.optimize, self.passes)
        cf._set_writes(tr)
        if _cuda_graphs[0]:   # (replaces cf._run when the graph may be captured; not for
            _capture.install(cf, _compile)     # the sub-graphs of cond / while_loop)
        return cf, result

    def __call__(self, *args, **kwargs):
        if not kwargs and not _tracing[0]:
            # the hot path: only Tensor arguments, no tape recording, a known signature
            key = [_state_seed()]
            for a in args:
                if type(a) is not Tensor:
                    break
                d = a._data
                key.append((d.shape, d.dtype, a._device))
            else:
                cf = self._fast.get(tuple(key))
                if cf is not None and not _tapes()[0]:
                    return cf._call_tensors(args)
        if _current() is not None:
            # called while another function traces: inline (its ops join that trace)
            return self.python_function(*args, **kwargs)
        args, kwargs = _arrays_to_tensors(args, kwargs)
        leaves, paths = [], []
        _flatten((args, kwargs), leaves, "", paths)
        cf, result = self._concrete(args, kwargs, leaves, paths)
        if not kwargs and all(type(a) is Tensor for a in args):
            self._fast[tuple([_state_seed()] + [(a._data.shape, a._data.dtype, a._device)
                                                for a in args])] = cf
        if result is not None:
            return result        # the trace ran the function: its result is this call's
        return cf._call_leaves(leaves)

    @property
    def graph(self):
        """The graph of the most recent trace (None before the first call)."""
        if not self._keys:
            return None
        return self._cache[self._keys[-1][0]].graph

    def experimental_get_tracing_count(self):
        return len(self._cache)

    def __repr__(self):
        return f"<tf.function {self._name} ({len(self._cache)} traced signatures)>"


def _pretty_path(path, sig):
    # "[0][1]" (args[1]) -> the parameter's name; "[1]['k']" (kwargs) -> k
    if sig is not None and path.startswith("[0]["):
        try:
            i = int(path[4:].split("]")[0])
            params = list(sig.parameters)
            rest = path[4:].split("]", 1)[1]
            return (params[i] if i < len(params) else f"args[{i}]") + rest
        except ValueError:
            pass
    if path.startswith("[1]["):
        return path[4:].split("]", 1)[0].strip("'") + path[4:].split("]", 1)[1]
    return path


def function(func=None, *, optimize=True, passes=None, name=None, input_signature=None,
             autograph=None, jit_compile=None, reduce_retracing=None, experimental_compile=None):
    """Trace ``func`` once per input signature and replay it (decorator).

    ``optimize=False`` replays the graph as traced; ``passes``: names of the graph
    passes to run (default: all, see :mod:`tapeflow.graph_passes`). TensorFlow's other
    keyword arguments are accepted and ignored.

    >>> import tapeflow as tf
    >>> v = tf.Variable(1.0)
    >>> @tf.function
    ... def step(x):
    ...     v.assign_add(x)
    ...     return v.read_value() * 2.0
    >>> float(step(tf.constant(1.0))), float(step(tf.constant(1.0)))
    (4.0, 6.0)
    """
    if func is None:
        return lambda f: function(f, optimize=optimize, passes=passes, name=name)
    if isinstance(func, Function):
        return func
    return Function(func, optimize=optimize, passes=passes, name=name)


#: the seeds' name (tf.contrib.eager.defun)
defun = function


# --- ops that run Python at every call ------------------------------------------------------

def py_function(func, inp, Tout, name=None):
    """Run eager Python ``func(*inp)`` and return its result as tensors of ``Tout``;
    inside :func:`function` it runs at every call (an escape hatch for code that
    cannot be traced). Differentiable when ``func`` uses tapeflow ops.

    >>> import tapeflow as tf
    >>> print(tf.py_function(lambda x: x * 2.0, [tf.constant(3.0)], tf.float32))
    tf.Tensor(6.0, shape=(), dtype=float32)
    """
    single = not isinstance(Tout, (list, tuple))
    touts = [Tout] if single else list(Tout)
    out = _py_call(func, list(inp), touts, single,
                   f"py_function[{getattr(func, '__name__', 'func')}]")
    return out[0] if single else out


def opaque_call(func, args):
    """``func(*args)`` as one ``py`` node of the current trace: it runs eagerly at every
    call, with that call's values, and keeps whatever its tapes record (a
    ``custom_gradient`` function's gradient). Returns ``func``'s result (a tensor or a
    tuple/list of tensors). Outside a trace it just calls ``func``.

    >>> import tapeflow as tf
    >>> @tf.function
    ... def f(x):
    ...     return tf.tracing.opaque_call(lambda t: t + 1.0, [x]) * 2.0
    >>> print(f(tf.constant(1.0)))
    tf.Tensor(4.0, shape=(), dtype=float32)
    >>> print(f.graph.nodes[0].name)
    opaque[<lambda>]
    """
    if _current() is None:
        return func(*args)
    shape = []
    out = _py_call(func, list(args), None, None, f"opaque[{getattr(func, '__name__', 'f')}]",
                   shape)
    kind = shape[0]
    return out[0] if kind is None else kind(out)


def _py_call(func, inp, touts, single, label, kind_out=None):
    """The body of :func:`py_function` / :func:`opaque_call`: ``touts`` None keeps the
    result's dtypes (``kind_out`` receives the result's container type, None for one
    tensor)."""
    name = label

    def eager(*ts):
        res = func(*ts)
        if touts is None:
            if kind_out is not None and not kind_out:
                kind_out.append(type(res) if isinstance(res, (list, tuple)) else None)
            res = list(res) if isinstance(res, (list, tuple)) else [res]
            return [convert_to_tensor(r) for r in res]
        res = [res] if single or not isinstance(res, (list, tuple)) else list(res)
        if len(res) != len(touts):
            raise InvalidArgumentError(
                f"{name}: the function returned {len(res)} value(s), Tout names {len(touts)}")
        out = []
        for r, d in zip(res, touts):
            t = convert_to_tensor(r)
            if t.dtype != _dt.as_dtype(d):
                t = _m.cast(t, d)
            out.append(t)
        return out

    tr = _current()
    if tr is None:
        return eager(*inp)
    # traced: run it now (for the trace's values) and record a node that runs it again
    ts = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inp]
    _tl.tracer = None
    try:
        out = eager(*ts)
    finally:
        _tl.tracer = tr
    ins = [tr.vid_of(t) for t in ts]
    g = tr.graph
    ovids = []
    fresh = []
    for t in out:
        vid = g.new_value(t._data.shape, t._data.dtype, t._device)
        alias = _wrap(t._data, t._device)
        tr.bind(alias, vid, True)
        ovids.append(vid)
        fresh.append(alias)
    metas = [g.meta[i][2] for i in ins]

    def run(*arrays):
        res = eager(*[_wrap(a, d) for a, d in zip(arrays, metas)])
        return tuple(t._data for t in res)
    g.nodes.append(Node("py", ins, ovids, fn=run, attrs={"_eager": eager}, stateful=True,
                        label=label))
    record_node_gradient(eager, ts, fresh)
    return fresh


_NODE_OP = None


def record_node_gradient(eager_fn, inputs, outputs, variables=()):
    """Make a traced ``py`` / ``cond`` / ``while`` node differentiable by the tapes
    recording while it is traced (a tape inside the traced function, or outside
    around its first call).

    ``eager_fn(*inputs)`` runs the node eagerly through the dispatcher and returns
    its outputs; ``outputs`` are the tensors the trace gave for them; ``variables``:
    trainable Variables the node reads. The tape record's gradient function is a
    :func:`py_function` that re-runs ``eager_fn`` under a GradientTape and returns
    ``tape.gradient(outputs, inputs + variables, output_gradients=dys)``: inside a
    trace it becomes a ``py`` node itself (so it runs at every call, with that
    call's values), and it is recorded the same way, so gradients of any order work.
    """
    _tapes_active = _ctx.tapes_active
    record = _ctx.record
    if not _tapes_active[0] or not outputs:
        return
    global _NODE_OP
    if _NODE_OP is None:
        _NODE_OP = OpDef("TracedNode", inputs=("*inputs",), dtype_rule="none")
    variables = [v for v in variables if v.trainable and v.dtype.is_inexact]
    var_values = [v.read_value() for v in variables]      # the tapes watch these reads
    inputs = list(inputs)
    diff = [i for i, t in enumerate(inputs) if t.dtype.is_inexact]
    if not diff and not variables:
        return
    n = len(inputs)
    touts = [inputs[i].dtype for i in diff] + [v.dtype for v in variables]

    def grad_eager(*ts):
        xs, dys = list(ts[:n]), list(ts[n:])
        with GradientTape() as tape:
            for i in diff:
                tape.watch(xs[i])
            for v in variables:
                tape.watch(v)
            outs = eager_fn(*xs)
        return tape.gradient(list(outs), [xs[i] for i in diff] + list(variables),
                             output_gradients=dys, unconnected_gradients="zero")

    def backward(ctx, *dys):
        gs = py_function(grad_eager, inputs + list(dys), touts)
        res = [None] * n
        for k, i in enumerate(diff):
            res[i] = gs[k]
        return tuple(res) + tuple(gs[len(diff):])

    record(_NODE_OP, tuple(inputs) + tuple(var_values), tuple(outputs), {}, backward)


def print_(*inputs, sep=" ", end="\n", output_stream=None, summarize=3):
    """Print tensors (and Python values) at every call, also inside :func:`function`
    (where Python's ``print`` runs only while tracing). TensorFlow's ``tf.print``.

    >>> import tapeflow as tf
    >>> tf.print("x:", tf.constant([1, 2, 3]))
    x: [1 2 3]
    """
    stream = output_stream or sys.stdout

    def fmt(x):
        if isinstance(x, (Tensor, Variable)):
            a = x.numpy() if isinstance(x, Variable) else np.asarray(
                x._device.backend.to_host(x._data, x._device))
            a = np.asarray(a)
            if a.ndim == 0:
                return str(a.item())
            return np.array2string(a, separator=" ", threshold=1000, edgeitems=summarize)
        return str(x)

    tr = _current()
    if tr is None:
        print(sep.join(fmt(x) for x in inputs), end=end, file=stream)
        return None
    tensors = [(i, x) for i, x in enumerate(inputs) if isinstance(x, (Tensor, Variable))]
    if any(isinstance(x, Variable) for _, x in tensors):
        tensors = [(i, tr.read(x, x._value) if isinstance(x, Variable) else x)
                   for i, x in tensors]
    ins = [tr.vid_of(x) for _, x in tensors]
    metas = [tr.graph.meta[v][2] for v in ins]
    positions = [i for i, _ in tensors]
    template = list(inputs)

    def run(*arrays):
        items = list(template)
        for p, a, d in zip(positions, arrays, metas):
            items[p] = _wrap(a, d)
        print(sep.join(fmt(x) for x in items), end=end, file=stream)
        return ()

    def eager(*ts):
        run(*[t._data for t in ts])
        return ()
    tr.graph.nodes.append(Node("print", ins, (), fn=run, attrs={"_eager": eager},
                               stateful=True, label="print"))
    if not tr.speculative:
        print(sep.join(fmt(x) for x in inputs), end=end, file=stream)
    return None


_ctx.add_variable_observer(_on_variable_created)
_ctx.install_tracer(_ContextTracer())
