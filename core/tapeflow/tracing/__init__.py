"""``tf.function``: tracing a Python function into a graph, graph passes, fusion, and
the control flow that traces (``tf.cond``, ``tf.while_loop``).

The top of the runtime stack below the training layer: it sees ops as they run
through the tracer observer this package installs in :mod:`tapeflow.runtime.context`
(``HOOKS.tracer``, and a Variable observer). The modules, bottom first:

* ``graph``: the :class:`Graph` of :class:`Node` s a trace builds, a call's arguments
  as leaves, and the graph compiled to straight-line Python (a table of emitters, one
  per node kind);
* ``tracer``: the per-thread tracer that records ops into a Graph, and ``init_scope``;
* ``graph_passes``: the rewrites of a traced graph (simplify, fold, cse, dce, reuse,
  xent), with ``graph_fusion`` (elementwise and convolution-epilogue fusion) and
  ``memory_plan`` (buffers kept from call to call);
* ``capture``: a replay as one captured device graph (CUDA graphs);
* ``concrete``: ``ConcreteFunction``, one signature's replay and its gradients;
* ``control_flow``: the nodes that run Python at every call: ``cond``, ``while_loop``,
  ``py_function``, ``print``, ``opaque_call``;
* ``function_cache``: ``Function`` and ``function``, the cache of signatures (its
  docstring tells how a function is traced, replayed and differentiated);
* ``vectorize``: ``vectorized_map``, a per-example function run on the whole batch.

>>> import tapeflow as tf
>>> from tapeflow.tracing import Function
>>> isinstance(tf.function(lambda x: x + 1), Function)
True
"""

from ..runtime import context as _ctx
from ..runtime.tensor import wrap
from .graph import Graph, Node
from .tracer import TracingError, _on_variable_created, _tl, init_scope
from .concrete import ConcreteFunction
from .control_flow import (cond, opaque_call, print_, py_function, record_node_gradient,
                           while_loop)
from .function_cache import RETRACE_WARN_AFTER, Function, defun, function
from . import graph_fusion, graph_passes
from .vectorize import vectorized_map

__all__ = ["Graph", "Node", "ConcreteFunction", "Function", "TracingError", "defun", "function",
           "init_scope", "opaque_call", "print_", "py_function", "record_node_gradient",
           "RETRACE_WARN_AFTER", "cond", "while_loop", "graph_fusion", "graph_passes",
           "vectorized_map"]


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
