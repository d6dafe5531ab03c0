"""The function cache: :class:`Function`, a Python function traced once per input
signature (:mod:`tapeflow.tracing.signature`) into a
:class:`~tapeflow.tracing.concrete.ConcreteFunction` and replayed, and the
``function`` decorator (see :mod:`tapeflow.tracing.trace`).
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings

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
from .codegen import _compile
from .concrete import ConcreteFunction, _fresh
from .graph import Graph
from .signature import _arrays_to_tensors, _flatten_args, _leaf_key, _pretty_path, _skeleton
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


#: what Function._concrete returns as the result when it did not trace (a cached graph)
_NOT_TRACED = object()


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
