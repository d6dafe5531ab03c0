"""``tf.function``: tracing a Python function into a graph, graph passes, fusion, and
the control flow that traces (``tf.cond``, ``tf.while_loop``).

The top of the runtime stack below the training layer: it sees ops as they run
through the tracer observer it installs in :mod:`tapeflow.runtime.context`.

>>> import tapeflow as tf
>>> from tapeflow.tracing import Function
>>> isinstance(tf.function(lambda x: x + 1), Function)
True
"""

from .graph import Graph, Node
from .trace import (ConcreteFunction, Function, TracingError, defun, function, opaque_call,
                    print_, py_function)
from .control_flow import cond, while_loop
from . import graph_fusion, graph_passes
from .vectorize import vectorized_map

__all__ = ["Graph", "Node", "ConcreteFunction", "Function", "TracingError", "defun", "function",
           "opaque_call", "print_", "py_function", "cond", "while_loop", "graph_fusion",
           "graph_passes", "vectorized_map"]
