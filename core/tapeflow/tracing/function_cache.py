"""``tapeflow.function`` (the seeds' ``defun``): trace a Python function once per input
signature, replay it.

The first call with a given input signature runs the Python function eagerly, with real
values, while a *tracer* records every op it executes into a
:class:`~tapeflow.tracing.graph.Graph` (trace by execution): arguments become
placeholders, reads and assignments of Variables become ``read``/``assign`` nodes
(captured by reference: a replay sees their current values and assigns in order),
tensors from outside the function become constants (captured by value, as TensorFlow
captures eager tensors), and the ops a ``GradientTape`` *inside* the function runs for
its gradients are recorded like any other op, so a training step's backward pass is part
of the graph. The graph is optimised (:mod:`tapeflow.tracing.graph_passes`) and compiled
to straight-line Python that calls each kernel directly: no dispatch, no tape, no Python
of the original function.

Later calls with the same signature (shapes, dtypes and devices of tensor
arguments; values of other arguments; the global random seed) replay the graph; a
new signature traces again, with a warning after repeated retracing naming the
argument that keeps changing. A traced function called while another one traces is
inlined (its ops join the outer trace).

Gradients through a call, when a GradientTape outside it is recording: a *pure* graph
(ops, Variable reads, constants, copies) is replayed at full speed and the call becomes
ONE tape record whose gradient function is itself a traced function,
``<name>_backward(inputs + Variable values, dys)`` -- it replays the forward op by op
under a GradientTape and returns ``tape.gradient(outputs, inputs,
output_gradients=dys)`` --, traced once per signature and cached on the
:class:`~tapeflow.tracing.concrete.ConcreteFunction`. Calling it under further tapes
records it the same way, so gradients of any order work, and it runs the same kernels in
the same order as the eager tape, so the gradients equal the eager ones. A graph with
assignments, random ops, Python or control-flow nodes is replayed op by op through the
dispatcher instead, so the tape sees every op
(``ConcreteFunction.traced_backward = False`` forces that path everywhere).
``py_function``/``cond``/``while_loop`` nodes traced while a tape records are made
differentiable by
:func:`~tapeflow.tracing.control_flow.record_node_gradient`.

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

This module holds :class:`Function` and the ``function`` decorator: the cache of a
function's signatures -- the leaves of its arguments (:func:`_leaf_key`: shapes,
dtypes and devices of tensors, values of other arguments) and the global random seed
-- each traced once into a :class:`~tapeflow.tracing.concrete.ConcreteFunction` and
replayed.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings

import numpy as np

from ..ops import random as _random_mod
from ..runtime import dispatch as _dispatch_mod
from .. import nest
from ..runtime.config import cuda_graphs as _cuda_graphs
from ..runtime.context import tapes_active as _tapes_active
from ..runtime.context import tracing as _tracing
from ..ops.array_values import identity as _identity
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from . import capture as _capture
from .concrete import ConcreteFunction, _fresh
from .graph import Graph, _compile, _flatten_args, _skeleton
from .tracer import _current, _tl, _Tracer

__all__ = ["Function", "function", "defun", "RETRACE_WARN_AFTER"]

# the random state (tapeflow.random): its global seed is part of every signature
_rstate = _random_mod.STATE

#: warn when one Function has traced this many signatures
RETRACE_WARN_AFTER = 5


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
        key = tuple(_leaf_key(x) for x in leaves) + (("seed", _rstate.global_seed),)
        # one Variable passed for two parameters: its reads and assignments are one
        # Variable's (a trace of its own; Tensors passed twice are told apart in _trace)
        vs = [id(x) for x in leaves if isinstance(x, Variable)]
        if len(vs) > 1 and len(set(vs)) < len(vs):
            key += (("aliased", tuple(vs.index(v) for v in vs)),)
        return key

    def _arg_names(self, paths):
        return [_pretty_path(p, self._sig) for p in paths]

    def get_concrete_function(self, *args, **kwargs) -> ConcreteFunction:
        """The :class:`ConcreteFunction` for these arguments (traced if new)."""
        args, kwargs = _arrays_to_tensors(args, kwargs)
        leaves, paths = _flatten_args(args, kwargs)
        return self._concrete(args, kwargs, leaves, paths)[0]

    def _concrete(self, args, kwargs, leaves, paths):
        key = self._key(leaves)
        cf = self._cache.get(key)
        if cf is not None:
            return cf, _NOT_TRACED
        with self._lock:
            cf = self._cache.get(key)
            if cf is not None:
                return cf, _NOT_TRACED
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
        args, kwargs, leaves = _distinct_tensors(args, kwargs, leaves)
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
        _scopes = _dispatch_mod.active_scopes
        _tl.tracer = tr
        _tracing[0] += 1
        _scopes[0] += 1           # every op takes the dispatcher's slow path, where the hook is
        try:
            result = self.python_function(*args, **kwargs)
        finally:
            _scopes[0] -= 1
            _tracing[0] -= 1
            _tl.tracer = parent
        g.structure = _skeleton(result)
        out_leaves = nest.flatten(result)
        g.py_outputs = []
        for x in out_leaves:
            if isinstance(x, Variable):          # returned Variables: their value at the end
                x = tr.read(x, x._value)
            if isinstance(x, Tensor):
                vid = tr.vid_of(x)
                g.py_outputs.append(("t", len(g.outputs)))
                g.outputs.append(vid)
            else:
                g.py_outputs.append(("py", _fresh(x)))      # (the caller has x)
        g.captured_variables = list(tr.vars)
        cf = ConcreteFunction(g, self.optimize, self.passes, trace=function)
        cf._set_writes(tr)
        if _cuda_graphs[0]:   # (replaces cf._run when the graph may be captured; not for
            _capture.install(cf, _compile)     # the sub-graphs of cond / while_loop)
        return cf, result

    def __call__(self, *args, **kwargs):
        if not kwargs and not _tracing[0]:
            # the hot path: only Tensor arguments, no tape recording, a known signature
            key = [_rstate.global_seed]
            for a in args:
                if type(a) is not Tensor:
                    break
                d = a._data
                key.append((d.shape, d.dtype, a._device))
            else:
                cf = self._fast.get(tuple(key))
                if cf is not None and not _tapes_active[0]:
                    return cf._call_tensors(args)
        if _current() is not None:
            # called while another function traces: inline (its ops join that trace)
            return self.python_function(*args, **kwargs)
        args, kwargs = _arrays_to_tensors(args, kwargs)
        leaves, paths = _flatten_args(args, kwargs)
        cf, result = self._concrete(args, kwargs, leaves, paths)
        if not kwargs and all(type(a) is Tensor for a in args):
            self._fast[tuple([_rstate.global_seed] + [
                (a._data.shape, a._data.dtype, a._device) for a in args])] = cf
        if result is not _NOT_TRACED:
            # the trace ran the function (its side effects included): its result is this
            # call's, None too (running the graph as well would do everything twice);
            # a returned Variable is its value, as every later call returns it
            return (nest.map_structure(_value_of, result)
                    if isinstance(result, (Variable, list, tuple, dict)) else result)
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


def _value_of(x):
    return x.read_value() if isinstance(x, Variable) else x      # (watched, as a read)


def _distinct_tensors(args, kwargs, leaves):
    """The arguments with every Tensor passed again (``f(x, x)``) replaced by a new
    Tensor of the same value: each parameter becomes its own input of the graph, which
    later calls (``f(a, b)``) fill with different values. Under a recording tape the
    new one is an Identity (recorded, not traced: gradients reach the Tensor passed)."""
    seen = set()
    dup = False
    for x in leaves:
        if type(x) is Tensor:
            if id(x) in seen:
                dup = True
                break
            seen.add(id(x))
    if not dup:
        return args, kwargs, leaves
    seen = set()
    out = []
    tr = _tl.tracer
    for x in leaves:
        if type(x) is Tensor:
            if id(x) in seen:
                if _tapes_active[0]:
                    _tl.tracer = None
                    try:
                        x = _identity(x)
                    finally:
                        _tl.tracer = tr
                else:
                    x = wrap(x._data, x._device)
            seen.add(id(x))
        out.append(x)
    args, kwargs = nest.pack_sequence_as((args, kwargs), out)
    return args, kwargs, out


# --- the signature: the cache key of a call's leaves ---------------------------------

def _arrays_to_tensors(args, kwargs):
    """NumPy arrays among the arguments become tensors (as in TensorFlow): they are
    inputs of the graph, not constants frozen into it."""
    if not any(type(a) is np.ndarray or isinstance(a, (list, tuple, dict))
               for a in (*args, *kwargs.values())):
        return args, kwargs           # (the common case, without flattening)
    leaves = nest.flatten((args, kwargs))
    if not any(isinstance(x, np.ndarray) for x in leaves):
        return args, kwargs
    constant = _dispatch_mod.constant
    leaves = [constant(x) if isinstance(x, np.ndarray) else x for x in leaves]
    return nest.pack_sequence_as((args, kwargs), leaves)


def _leaf_key(x):
    if isinstance(x, Variable):
        # (trainable: whether tapes inside watch its reads is decided at trace time)
        return ("V", tuple(x.shape), x.dtype.name, x._device, x.trainable)
    if isinstance(x, Tensor):
        return ("T", tuple(x._data.shape), x._data.dtype, x._device)
    if type(x) is slice:        # (unhashable before Python 3.12)
        return ("S", x.start, x.stop, x.step)
    if type(x) is float:        # -0.0 == 0.0, and nan != nan: by their text
        return ("F", repr(x))
    try:
        hash(x)
    except TypeError:
        # by identity, holding the object: while the trace is cached its id is not
        # reused by another object (which would replay this one's trace)
        return ("id", _ById(x))
    return ("P", type(x), x)


class _ById:
    """An unhashable argument in a cache key: equal to itself only."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is _ById and other.obj is self.obj


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


#: what Function._concrete returns as the result when it did not trace (a cached graph)
_NOT_TRACED = object()


def function(func=None, *, optimize=True, passes=None, name=None, input_signature=None,
             autograph=None, jit_compile=None, reduce_retracing=None, experimental_compile=None):
    """Trace ``func`` once per input signature and replay it (decorator).

    ``optimize=False`` replays the graph as traced; ``passes``: names of the graph
    passes to run (default: all, see :mod:`tapeflow.tracing.graph_passes`). TensorFlow's other
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
