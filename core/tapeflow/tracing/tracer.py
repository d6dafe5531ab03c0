"""The tracer: what records the ops one thread runs while :func:`tapeflow.function`
traces (see :mod:`tapeflow.tracing.function_cache`), and :func:`init_scope`, which
steps out of it.

A :class:`_Tracer` per trace (and per ``tf.cond`` branch, ``tf.while_loop`` body or
``vectorized_map`` function: those nest, ``parent`` being the enclosing one) lives in
the thread-local ``_tl.tracer`` (the runtime's ``context.thread_tracer``) while its
function runs. The runtime reports to it directly: each op, copy, Variable read or
assignment is one call of its ``op``/``copy``/``read``/``assign``/``check``.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import sys

from ..runtime.context import stop_all_recording as _stop_all_recording
from ..runtime.context import thread_tracer as _ctx_thread_tracer
from ..runtime.context import tracing as _tracing
from ..errors import TapeflowError
from ..runtime.registry import OpDef
from ..runtime.tensor import wrap
from .graph import Node

__all__ = ["TracingError", "init_scope", "graph_observers"]

# the tracer of this thread's innermost trace (``_tl.tracer``; None: none): the runtime's
# slot, which it reports to directly. ``_tracing[0]`` (tapeflow.runtime.context) counts
# the traces of all threads: the runtime reads it first
_tl = _ctx_thread_tracer


class TracingError(TapeflowError):
    """Python code needed a tensor's value while :func:`function` was tracing."""


#: ops whose result depends on their input's shape only
_SHAPE_OPS = frozenset({"Shape", "Size", "Rank", "ShapeN"})

#: called with each Graph a top-level trace starts to record (``tf.summary.trace_on``
#: collects them this way); append and remove, never replace
graph_observers: list = []


class _Tracer:
    """Records the ops one thread executes into a Graph (see the module doc)."""

    def __init__(self, graph, parent=None):
        self.graph = graph
        if parent is None and graph_observers:
            for fn in list(graph_observers):
                fn(graph)
        self.ids: dict = {}            # id(Tensor) -> vid
        self.keep: list = []           # tensors whose ids are in ``ids`` (pins the ids)
        self.dynamic: set = set()      # vids whose value depends on arguments/state
        # dynamic vids that depend only on the arguments' shapes (Shape, Size, Rank and
        # what is computed from them and constants): fixed for the shapes of this trace
        self.shape_only: set = set()
        self.var_vid: dict = {}        # id(Variable) -> vid of its current value
        self.vars: list = []           # Variables captured (kept alive)
        self.read_vars: list = []      # every Variable read, arguments included (gradients)
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
        so = dyn and not stateful and (op.name in _SHAPE_OPS or all(
            i in self.shape_only for i in ins if i in dynamic))
        ovids = []
        for t in outs:
            vid = g.new_value(t._data.shape, t._data.dtype, dev)
            self.bind(t, vid, dyn)
            if so:
                self.shape_only.add(vid)
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
            if not isinstance(ref, int) and not any(v is var for v in self.vars):
                self.vars.append(var)
            if not any(v is var for v in self.read_vars):
                self.read_vars.append(var)
        alias = wrap(value._data, value._device)
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
        # the next read reads the Variable again (a read node): its value is the one
        # assigned, but for a GradientTape it is a read of the Variable, as in eager
        # code, not the computation that was assigned
        self.var_vid.pop(id(var), None)
        self.dynamic.add(vid)

    def created(self, var):
        """A Variable created while tracing: later reads read it (its initialiser ran
        once, at trace time)."""
        self.var_vid.pop(id(var), None)

    def symbolic(self, t):
        """How ``print`` shows a tensor of the trace whose value depends on the arguments
        or state: as TensorFlow's graph tensors, ``("x:0", "(3,)")`` for
        ``Tensor("x:0", shape=(3,), dtype=int32)`` (the argument's name, or the op's in snake
        case, numbered as TensorFlow numbers repeated names); None for any other tensor
        (printed with its value)."""
        vid = self.ids.get(id(t))
        if vid is None or vid not in self.dynamic:
            return None
        g = self.graph
        if vid in g.args:
            name = g.arg_names[g.args.index(vid)]
        else:                            # named in creation order, as TensorFlow names nodes
            seen, name = {}, "value"
            for n in g.nodes:
                base = _snake(n.op.name if n.op is not None else n.kind)
                k = seen[base] = seen.get(base, -1) + 1
                if vid in n.outputs:
                    name = base if k == 0 else f"{base}_{k}"
                    break
        shape = getattr(self.graph, "symbolic_shapes", {}).get(vid, tuple(t._data.shape))
        dims = "(" + ", ".join("None" if d is None else str(d) for d in shape) + \
            ("," if len(shape) == 1 else "") + ")"
        return f"{name}:0", dims

    def read_shape_value(self, t, what):
        """Allow a host read of ``t`` when its value depends only on the arguments' shapes
        (``tf.TensorArray(size=tf.shape(x)[0])``): the trace then holds for these shapes
        only (``graph.specialised``: a relaxed trace is traced again for other shapes, never
        replayed); a value that depends on the arguments' data raises as :meth:`check`."""
        vid = self.ids.get(id(t))
        if vid is not None and vid in self.dynamic:
            if vid not in self.shape_only:
                self.check(t, what)
            self.specialise()

    def specialise(self):
        """This trace (and those it is part of) holds only for its arguments' shapes: a
        SavedModel refuses it under ``None`` dimensions (``graph.specialised``)."""
        tr = self
        while tr is not None:
            tr.graph.specialised = True
            tr = tr.parent

    def check(self, t, what):
        vid = self.ids.get(id(t))
        if vid is not None and vid in self.dynamic:
            raise TracingError(
                f"{what} needs the value of a tensor that depends on the arguments or state "
                f"of the traced function {self.graph.name}(){_user_line()}: Python control "
                "flow and host conversions cannot be traced. Use tf.cond(pred, true_fn, "
                "false_fn) or tf.while_loop(cond, body, loop_vars) for control flow, "
                "tf.print for printing, or call that part outside tf.function.")


def _snake(name):
    """``AddV2`` -> ``add_v2``, ``MatMul`` -> ``mat_mul`` (TensorFlow's node names)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _current():
    return _tl.tracer


@contextlib.contextmanager
def init_scope():
    """Run the body eagerly even while :func:`tapeflow.function` traces, as TensorFlow's
    ``tf.init_scope``: its ops are not part of the graph (they run once, now), and no
    tape records them. For one-time initialisation inside a traced function: a value
    restored from a checkpoint into a Variable created there, say.

    >>> import tapeflow as tf
    >>> v = tf.Variable(0.0)
    >>> @tf.function
    ... def f(x):
    ...     with tf.init_scope():
    ...         v.assign_add(1.0)           # once, while tracing
    ...     return x + v
    >>> [float(f(tf.constant(1.0))) for _ in range(3)]
    [2.0, 2.0, 2.0]
    """
    tr = _tl.tracer
    _tl.tracer = None
    try:
        with _stop_all_recording():
            yield
    finally:
        _tl.tracer = tr


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


def _on_variable_created(var):
    if _tracing[0]:
        tr = _current()
        if tr is not None:
            tr.created(var)
