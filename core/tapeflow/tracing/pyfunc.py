"""Nodes that run Python at every call of a traced function: :func:`py_function`,
:func:`opaque_call` (a ``custom_gradient`` function inside a trace) and
:func:`print_` (``tf.print``), and :func:`record_node_gradient`, which makes such a
node -- and the ``cond`` / ``while`` nodes of :mod:`tapeflow.tracing.control_flow`
-- differentiable by the tapes recording while it is traced.
"""

from __future__ import annotations

import sys

import numpy as np

from ..autodiff.tape import GradientTape
from ..ops import math as _m
from ..ops.array_values import identity as _identity
from ..runtime import context as _ctx
from .. import dtypes as _dt
from ..runtime.dispatch import convert_to_tensor
from ..errors import InvalidArgumentError
from ..runtime.registry import OpDef
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from .concrete import reading
from .graph import Node
from .tracer import _current, _tl

__all__ = ["py_function", "opaque_call", "print_", "record_node_gradient"]


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
    read_vars = ()
    try:
        if _ctx.tapes_active[0]:
            # the Variables func reads: its gradient for the tapes recording now covers
            # them too (a gradient function that re-runs a branch reading a Variable)
            with GradientTape() as probe:
                out = eager(*ts)
            read_vars = probe.watched_variables()
        else:
            out = eager(*ts)
    finally:
        _tl.tracer = tr
    ins = [tr.vid_of(t) for t in ts]
    g = tr.graph
    ovids = []
    fresh = []
    for t in out:
        vid = g.new_value(t._data.shape, t._data.dtype, t._device)
        alias = wrap(t._data, t._device)
        tr.bind(alias, vid, True)
        ovids.append(vid)
        fresh.append(alias)
    metas = [g.meta[i][2] for i in ins]

    def run(*arrays):
        res = eager(*[wrap(a, d) for a, d in zip(arrays, metas)])
        return tuple(t._data for t in res)
    g.nodes.append(Node("py", ins, ovids, fn=run, attrs={"_eager": eager}, stateful=True,
                        label=label))
    record_node_gradient(eager, ts, fresh, read_vars)
    return fresh


_NODE_OP = None


def record_node_gradient(eager_fn, inputs, outputs, variables=(), held=(), values=None):
    """Make a traced ``py`` / ``cond`` / ``while`` node differentiable by the tapes
    recording while it is traced (a tape inside the traced function, or outside
    around its first call).

    ``eager_fn(*inputs)`` runs the node eagerly through the dispatcher and returns
    its outputs; ``outputs`` are the tensors the trace gave for them; ``variables``:
    the Variables the node reads; ``held``: others it assigns; ``values``: the values
    of ``variables + held`` when the node started (default: read now). The tape
    record's gradient function is a :func:`py_function` that re-runs ``eager_fn``
    under a GradientTape -- graph replays inside it (branches, loop bodies) reading
    those values and assigning nothing (:func:`tapeflow.tracing.concrete.reading`),
    so a gradient computed after the node, or after an assignment, sees what the node
    saw -- and returns ``tape.gradient(outputs, inputs + trainable variables,
    output_gradients=dys)``: inside a trace it becomes a ``py`` node itself (so it
    runs at every call, with that call's values), and it is recorded the same way,
    so gradients of any order work.
    """
    _tapes_active = _ctx.tapes_active
    record = _ctx.record
    if not _tapes_active[0] or not outputs:
        return
    global _NODE_OP
    if _NODE_OP is None:
        _NODE_OP = OpDef("TracedNode", inputs=("*inputs",), dtype_rule="none")
    hold = []
    for v in list(variables) + list(held):
        if not any(v is u for u in hold):
            hold.append(v)
    if values is None:
        values = [v.read_value() for v in hold]      # the tapes watch these reads
    diffv = [j for j, v in enumerate(hold)
             if v.trainable and v.dtype.is_inexact and any(v is u for u in variables)]
    variables = [hold[j] for j in diffv]
    var_values = [values[j] for j in diffv]
    inputs = list(inputs)
    diff = [i for i, t in enumerate(inputs) if t.dtype.is_inexact]
    if not diff and not variables:
        return
    n = len(inputs)
    nh = len(hold)
    touts = [inputs[i].dtype for i in diff] + [v.dtype for v in variables]

    def grad_eager(*ts):
        # the node's inputs, the held Variables' values when it ran (its gradient may
        # run after an assignment), the output gradients
        xs, vals, dys = list(ts[:n]), list(ts[n:n + nh]), list(ts[n + nh:])
        # One tensor may come in twice: as two inputs (a value a branch captures twice),
        # or, replayed op by op, as an input and the very Tensor a Variable holds (a
        # read node's value), also passed here as a held value. A tape watching one
        # tensor twice would give each the gradient of both: all but its first use are
        # read through an Identity (recorded by the tapes outside: higher orders still
        # see the tensor).
        seen = {id(v._value) for v in hold}
        for i in diff:
            if id(xs[i]) in seen:
                xs[i] = _identity(xs[i])
            seen.add(id(xs[i]))
        vals = [_identity(t) if j in diffv else t for j, t in enumerate(vals)]
        dvals = [vals[j] for j in diffv]
        with GradientTape() as tape:
            for i in diff:
                tape.watch(xs[i])
            tape.watch(dvals)
            for v in variables:
                tape.watch(v)
            # graph replays (branches, loop bodies) read ``vals`` and assign nothing;
            # Python code (a py_function) reads the Variables: one of the two
            # gradients of a Variable is zero
            with reading(hold, vals):
                outs = eager_fn(*xs)
        gs = tape.gradient(list(outs), [xs[i] for i in diff] + dvals + list(variables),
                           output_gradients=dys, unconnected_gradients="zero")
        k, m = len(diff), len(variables)
        return list(gs[:k]) + [a + b for a, b in zip(gs[k:k + m], gs[k + m:])]

    def backward(ctx, *dys):
        gs = py_function(grad_eager, inputs + list(values) + list(dys), touts)
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
            items[p] = wrap(a, d)
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
