"""``tf.function``: tracing a Python function into a graph, graph passes, fusion, and
the control flow that traces (``tf.cond``, ``tf.while_loop``).

The top of the runtime stack below the training layer: it sees ops as they run
through the tracer observer this package installs in :mod:`tapeflow.runtime.context`
(``HOOKS.tracer``, and a Variable observer). The modules, bottom first:

* ``graph``: the :class:`Graph` of :class:`Node` s a trace builds, a call's arguments
  as leaves, and the graph compiled to straight-line Python (a table of emitters, one
  per node kind);
* ``tracer``: the per-thread tracer that records ops into a Graph, and ``init_scope``;
* ``graph_passes``: the rewrites of a traced graph (simplify, fold, cse, dce, donate,
  reuse, xent), with ``graph_fusion`` (elementwise and convolution-epilogue fusion) and
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
    """``HOOKS.tracer``: whether this thread traces (``current``), and ``opaque_call``
    (a ``custom_gradient`` function, traced as one Python node). The runtime reports
    ops, copies, reads and assignments to this thread's tracer itself
    (``runtime.context.thread_tracer``, which :mod:`.tracer` sets)."""

    def current(self):
        return _tl.tracer

    def opaque_call(self, fn, args):
        return opaque_call(fn, args)


_ctx.add_variable_observer(_on_variable_created)
_ctx.install_tracer(_ContextTracer())
