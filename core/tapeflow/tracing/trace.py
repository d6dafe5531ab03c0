"""``tapeflow.function`` (the seeds' ``defun``): trace a Python function once, replay it.

The first call with a given input signature runs the Python function eagerly, with
real values, while a *tracer* records every op it executes into a :class:`Graph`
(trace by execution): arguments become placeholders, reads and assignments of
Variables become ``read``/``assign`` nodes (captured by reference: a replay sees
their current values and assigns in order), tensors from outside the function
become constants (captured by value, as TensorFlow captures eager tensors), and the
ops a ``GradientTape`` *inside* the function runs for its gradients are recorded
like any other op, so a training step's backward pass is part of the graph. The
graph is optimised (:mod:`tapeflow.tracing.graph_passes`) and compiled to
straight-line Python that calls each kernel directly: no dispatch, no tape, no Python
of the original function.

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

This module is the public face of tracing and installs it into the runtime
(``HOOKS.tracer``, a Variable observer); the work is done by these modules of
``tapeflow.tracing``, bottom first:

* ``tracer``: the per-thread tracer that records ops into a Graph;
* ``signature``: arguments to leaves, paths and cache keys; results packed back;
* ``codegen``: a Graph to straight-line Python (a table of emitters, one per node kind);
* ``concrete``: ``ConcreteFunction``, one signature's replay and its gradients;
* ``function_cache``: ``Function`` and ``function``, the cache of signatures;
* ``pyfunc``: ``py_function``, ``opaque_call``, ``print``.
"""

from __future__ import annotations

import contextlib

from ..runtime import context as _ctx
from .concrete import ConcreteFunction
from .function_cache import RETRACE_WARN_AFTER, Function, defun, function
from .graph import Graph, Node
from .pyfunc import opaque_call, print_, py_function, record_node_gradient
from .tracer import TracingError, _on_variable_created, _tl
from ..runtime.tensor import wrap

__all__ = ["function", "defun", "init_scope", "Function", "ConcreteFunction", "Graph", "Node",
           "TracingError", "py_function", "opaque_call", "print_", "RETRACE_WARN_AFTER",
           "record_node_gradient"]


@contextlib.contextmanager
def init_scope():
    """Run the body eagerly even while :func:`function` traces, as TensorFlow's
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
        with _ctx.stop_all_recording():
            yield
    finally:
        _tl.tracer = tr


class _ContextTracer(_ctx.Tracer):
    """``HOOKS.tracer``: the runtime's reports while ``tracing[0]`` is non-zero, each
    handed in one call to this thread's tracer (none: an op of another thread, ignored).
    ``opaque_call``: a ``custom_gradient`` function, traced as one Python node."""

    def current(self):
        return _tl.tracer

    def trace_op(self, op, tensors, outs, attrs, fn, dev, needs_device):
        tr = _tl.tracer
        if tr is not None:
            tr.op(op, tensors, outs, attrs, fn, dev, needs_device)

    def trace_copy(self, src, out, dev):
        tr = _tl.tracer
        if tr is not None:
            tr.copy(src, out, dev)

    def trace_read(self, var, value):
        tr = _tl.tracer
        return value if tr is None else tr.read(var, value)

    def trace_assign(self, var, prev):
        tr = _tl.tracer
        if tr is not None:
            tr.assign(var, var._value, prev)
        if _ctx.tapes_active[0]:
            # a later read is a read of the Variable for a tape (Variable.assign)
            var._value = wrap(var._value._data, var._value._device)

    def trace_check(self, t, what):
        tr = _tl.tracer
        if tr is not None:
            tr.check(t, what)

    def opaque_call(self, fn, args):
        return opaque_call(fn, args)


_ctx.add_variable_observer(_on_variable_created)
_ctx.install_tracer(_ContextTracer())
