"""``tapeflow.function`` (the seeds' ``defun``): trace a Python function once per input
signature, replay it.

Long file: one Function's caches (exact, relaxed and specialised traces, the fast
path) and the rules its traces enforce (input signatures, Variables created on the
first trace only, tensors leaked out of a trace) share its state and its lock.

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
replayed. A *relaxed* trace (``input_signature`` specs or ``reduce_retracing`` with
unknown dimensions) serves every shape its specs accept: the function is traced again
for each new call's shapes (a replay of the first graph would keep the Python values
computed from the first shapes, ``x.shape[0]``), and counted once by
``experimental_get_tracing_count``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import threading
import types as _pytypes
import warnings
import weakref

import numpy as np

from ..ops import random as _random_mod
from ..runtime import dispatch as _dispatch_mod
from .. import dtypes as _dt
from .. import nest
from ..runtime.config import cuda_graphs as _cuda_graphs
from ..runtime import context as _ctx
from ..runtime.context import stop_all_recording as _stop_all_recording
from ..runtime.context import tapes_active as _tapes_active
from ..runtime.context import tracing as _tracing
from ..errors import InvalidArgumentError, InvalidTypeError
from ..ops.array_values import identity as _identity
from ..ops.composite import TypeSpec
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from . import capture as _capture
from . import autograph as _autograph
from .concrete import ConcreteFunction, _fresh, copy_graph
from .graph import Graph, _compile, _flatten_args, _skeleton
from .signatures import (FunctionSignature, SpecShape, TensorSpec, canonical_call,
                         check_input_signature, check_specs, common_shape, conform,
                         fullargspec, key_fits, output_specs, signature_of, simple_arity,
                         spec_key, spec_shape)
from .signatures import types as _types_ns
from .signatures import (component_specs, expand_composites, has_composites, has_parts,
                         rebuild_composites)
from .tracer import _current, _tl, _Tracer

__all__ = ["Function", "function", "defun", "RETRACE_WARN_AFTER", "run_functions_eagerly",
           "functions_run_eagerly", "types", "key_hooks"]

# the random state (tapeflow.random): its global seed is part of every signature
_rstate = _random_mod.STATE

#: warn when one Function has traced this many signatures
RETRACE_WARN_AFTER = 5

#: functions of no arguments, asked at every call: each returns a hashable value of the
#: calling context (None: none) that is part of the signature, so a trace is replayed
#: only in the context it was made in. tapeflow.distribute adds its strategy/replica
#: context (a layer above, which this one does not import). Empty: no cost.
key_hooks: list = []


class Function:
    """A Python function traced per input signature and replayed (see the module doc).

    Attributes: ``python_function``; ``optimize`` (run the graph passes);
    ``passes``: the names of the passes to run (default: all of
    :data:`tapeflow.tracing.graph_passes.PASSES`); ``input_signature`` (a tuple of
    :class:`~tapeflow.tracing.signatures.TensorSpec`, or None); ``reduce_retracing``.
    """

    def __init__(self, fn, optimize=True, passes=None, name=None, input_signature=None,
                 reduce_retracing=False, autograph=True):
        self.python_function = fn
        # AutoGraph (tapeflow.tracing.autograph): fn's source converted before the first
        # trace (_target); False traces fn as written
        self.autograph = autograph is not False
        self._ag_fn = None
        self.optimize = optimize
        self.passes = passes
        self._name = name or getattr(fn, "__name__", "function")
        self._cache: dict = {}
        self._fast: dict = {}          # (seed, (shape, dtype, device)...) -> ConcreteFunction
        self._keys: list = []
        self._warned = False
        self._lock = threading.RLock()
        self._sig = signature_of(fn)
        self.input_signature = check_input_signature(input_signature, self._name)
        self.reduce_retracing = bool(reduce_retracing)
        #: exact key -> the ConcreteFunction a relaxed trace was specialised into
        self._special: dict = {}
        #: [(relaxed key, generic ConcreteFunction)] (input_signature, reduce_retracing)
        self._relaxed: list = []
        self._traced_ok = False        # a trace completed (Variables: first trace only)
        self._bound: dict = {}         # id(instance) -> (weakref, bound Function)
        # the calls that need no binding to the Python signature (all positional)
        self.simple_arity = simple_arity(self._sig)
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        # one bound Function per instance, so each object keeps its own traces (held by
        # this Function, weakly: the instance's attributes are not touched)
        entry = self._bound.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        try:
            ref = weakref.ref(obj, functools.partial(_forget, self._bound, id(obj)))
            method = _BoundMethod(self.python_function, ref)
        except TypeError:                # (not weakly referable: held strongly)
            ref = _Strong(obj)
            method = functools.partial(self.python_function, obj)
        bound = Function(method, self.optimize, self.passes, self._name,
                         self.input_signature, self.reduce_retracing, self.autograph)
        self._bound[id(obj)] = (ref, bound)
        return bound

    def _target(self):
        """The function a trace runs: ``python_function`` converted by AutoGraph, once."""
        fn = self._ag_fn
        if fn is None:
            fn = self.python_function
            if self.autograph and isinstance(fn, _BoundMethod):
                fn = _BoundMethod(_autograph.convert(fn.func, top=True), fn._ref)
            elif self.autograph:
                fn = _autograph.convert(fn, top=True)
            self._ag_fn = fn
        return fn

    @property
    def function_spec(self):
        """The Python signature and the input signature (TensorFlow's FunctionSpec)."""
        return _pytypes.SimpleNamespace(
            fullargspec=fullargspec(self.python_function), signature=self._sig,
            input_signature=self.input_signature,
            is_method=isinstance(self.python_function, (_BoundMethod, functools.partial)))

    # the signature ------------------------------------------------------------------------
    def _key(self, leaves):
        # the global random seed is part of the signature: random ops' keys are fixed at
        # trace time, so tf.random.set_seed(other) traces again (and stays reproducible)
        key = tuple(_leaf_key(x) for x in leaves) + (("seed", _rstate.global_seed),)
        if key_hooks:
            ctx = tuple([h() for h in key_hooks])
            if ctx.count(None) != len(ctx):
                key += (("context", ctx),)
        # one Variable passed for two parameters: its reads and assignments are one
        # Variable's (a trace of its own; Tensors passed twice are told apart in _trace)
        vs = [id(x) for x in leaves if isinstance(x, Variable)]
        if len(vs) > 1 and len(set(vs)) < len(vs):
            key += (("aliased", tuple(vs.index(v) for v in vs)),)
        return key

    def _arg_names(self, paths):
        return [_pretty_path(p, self._sig) for p in paths]

    def get_concrete_function(self, *args, **kwargs) -> ConcreteFunction:
        """The :class:`ConcreteFunction` for these arguments (traced if new): tensors,
        :class:`~tapeflow.tracing.signatures.TensorSpec` s (a spec with unknown
        dimensions gives one concrete function for every shape it accepts) or Python
        values (baked into the trace). With an ``input_signature``, no arguments: the
        concrete function of the signature."""
        if not args and not kwargs and self.input_signature is not None:
            args = self.input_signature
        args, kwargs = _arrays_to_tensors(args, kwargs)
        if self.input_signature is None or kwargs:
            args, kwargs = self._canonical(args, kwargs)
        specs = None
        composite = has_composites((args, kwargs))
        if composite:          # composite tensors and specs: their components are traced
            args, kwargs = expand_composites((args, kwargs))
        leaves, paths = _flatten_args(args, kwargs)
        if any(isinstance(x, TensorSpec) for x in leaves):
            specs = {i: x for i, x in enumerate(leaves) if isinstance(x, TensorSpec)}
            if self.input_signature is not None:
                check_specs(self._name, self.input_signature, args, specs)
            leaves = _placeholders(leaves)
            args, kwargs = nest.pack_sequence_as((args, kwargs), leaves)
        elif self.input_signature is not None:
            args, kwargs, specs = self._apply_signature(args, kwargs)
            leaves, paths = _flatten_args(args, kwargs)
        elif composite:
            specs = component_specs(leaves) or None
        return self._concrete(args, kwargs, leaves, paths, specs, generic=True)[0]

    def _canonical(self, args, kwargs):
        """The call bound to the Python signature, defaults applied (one trace serves
        ``f(x, 2)``, ``f(x, y=2)`` and ``f(x)``): unchanged when it is all positional."""
        if self._sig is None or (not kwargs and len(args) == self.simple_arity):
            return args, kwargs
        c = canonical_call(self._sig, args, kwargs)
        return (args, kwargs) if c is None else (c[0], c[1])

    def _params(self, args, kwargs):
        """``[(name, kind)]`` of a canonical call's entries (for printed signatures)."""
        c = canonical_call(self._sig, args, kwargs) if self._sig is not None else None
        if c is None:
            return ([(f"args_{i}", "POSITIONAL_ONLY") for i in range(len(args))]
                    + [(k, "KEYWORD_ONLY") for k in kwargs])
        return c[2]

    def _apply_signature(self, args, kwargs):
        """A call checked against ``input_signature`` (TypeError-compatible
        :class:`~tapeflow.errors.InvalidTypeError` naming the argument and the spec),
        lists and NumPy arrays converted to tensors of the spec's dtype: ``(args,
        kwargs, {leaf index: spec})``."""
        sig = self.input_signature
        if kwargs or len(args) != len(sig):
            raise InvalidTypeError(
                f"tf.function {self._name!r} has an input_signature of {len(sig)} "
                f"argument(s), {list(sig)}, and was called with {len(args)} positional and "
                f"{len(kwargs)} keyword argument(s) ({', '.join(kwargs) or 'none'} beyond "
                "it); pass exactly the arguments the input_signature describes")
        out = []
        for i, (spec, value) in enumerate(zip(sig, args)):
            out.append(conform(self._name, self._arg_names([f"[0][{i}]"])[0], spec, value))
        args = tuple(out)
        if any(not isinstance(x, TensorSpec) for x in nest.flatten(sig)):
            args, sig = expand_composites(args, sig), expand_composites(sig)
        leaves = nest.flatten(args)
        specs = {i: x for i, x in enumerate(nest.flatten(sig)) if isinstance(x, TensorSpec)}
        return args, {}, specs if len(nest.flatten(sig)) == len(leaves) else None

    def _concrete(self, args, kwargs, leaves, paths, specs=None, generic=False):
        """``(ConcreteFunction, result)`` for a call (result: the trace's, or
        ``_NOT_TRACED``). ``specs``: ``{leaf index: TensorSpec}`` the call's tensors are
        to be traced for (their unknown dimensions: one trace for all sizes);
        ``generic``: return that relaxed concrete function rather than the one
        specialised to this call's shapes."""
        key = self._key(leaves)
        rkey = spec_key(key, specs) if specs else None
        if rkey is None:
            cf = self._cache.get(key) or self._special.get(key)
            if cf is not None:
                return cf, _NOT_TRACED
        elif not generic:
            cf = self._special.get(key)
            if cf is not None:
                return cf, _NOT_TRACED
        with self._lock:
            gen = None
            if rkey is None:
                cf = self._cache.get(key) or self._special.get(key)
                if cf is not None:
                    return cf, _NOT_TRACED
                gen = self._relaxed_for(key)
                if gen is None and self.reduce_retracing and self._keys:
                    rkey = self._generalise(key)
            if rkey is not None:
                gen = self._cache.get(rkey)
            if gen is not None:
                if generic:
                    return gen, _NOT_TRACED
                return self._specialise(gen, key, args, kwargs, leaves, paths)
            cf, result = self._trace(args, kwargs, leaves, paths, rkey=rkey, specs=specs)
            if rkey is None:
                self._cache[key] = cf
            else:
                gen, cf = cf
                self._cache[rkey] = gen
                self._relaxed.append((rkey, gen))
                self._special[key] = cf
                if generic:
                    cf = gen
            self._keys.append((key if rkey is None else rkey, paths))
            if len(self._cache) >= RETRACE_WARN_AFTER and not self._warned:
                self._warned = True
                warnings.warn(self._retrace_message(), RuntimeWarning, stacklevel=4)
        return cf, result

    # relaxed traces (input_signature, reduce_retracing) ----------------------------------
    def _relaxed_for(self, key):
        """The generic concrete function of a relaxed trace that serves ``key``."""
        for rkey, gen in reversed(self._relaxed):
            if key_fits(rkey, key):
                return gen
        return None

    def _generalise(self, key):
        """reduce_retracing: ``key`` with the shapes that differ from an earlier trace's
        (of the same dtypes, devices and other arguments) relaxed to None (or an
        unknown rank), or None when no earlier trace is that close."""
        n = len(key)
        for prev, _ in reversed(self._keys):
            if len(prev) != n:
                continue
            out = []
            for a, b in zip(prev, key):
                if a == b:
                    out.append(b)
                elif (type(a) is tuple and type(b) is tuple and len(a) == len(b) == 4
                      and a[0] == b[0] == "T" and a[2:] == b[2:]):
                    out.append(("T", common_shape(spec_shape(a[1]), spec_shape(b[1])),
                                b[2], b[3]))
                else:
                    break
            else:
                rkey = tuple(out)
                return None if rkey == key else rkey
        return None

    def _specialise(self, gen, key, args, kwargs, leaves, paths):
        """The concrete function of relaxed trace ``gen`` for this call's exact shapes:
        the function traced again for them (its Python side effects, a ``print``, run
        again; the tracing count does not grow). Returns ``(ConcreteFunction, result)``."""
        # the function is traced again for these shapes: a replay of the relaxed graph
        # would keep the Python values the first trace computed from its shapes
        # (x.shape[0], a TensorArray's size), silently wrong for other shapes
        cf, result = self._trace(args, kwargs, leaves, paths, first=True)
        self._special[key] = cf
        return cf, result

    def _call_generic(self, gen, leaves):
        """A relaxed concrete function called directly: its specialisation for these
        shapes (made once), called."""
        key = self._key(leaves)
        cf = self._special.get(key) or self._cache.get(key)
        if cf is None:
            args, kwargs = nest.pack_sequence_as(gen.signature.structured, leaves)
            with self._lock:
                cf = self._special.get(key)
                if cf is None:
                    cf, result = self._specialise(gen, key, tuple(args), kwargs, leaves,
                                                  _flatten_args(args, kwargs)[1])
                    return _result_of(result)
        return cf._call_leaves(leaves)

    def pretty_printed_concrete_signatures(self, verbose=True):
        """The signatures of the traced concrete functions, as TensorFlow prints them
        (each: input parameters, output type, captures), one after another."""
        return "\n\n".join(cf.pretty_printed_signature(verbose)
                            for cf in self._cache.values() if cf.signature is not None)

    def _retrace_message(self):
        keys = [k for k, _ in self._keys]
        paths = self._keys[-1][1]
        changing = []
        for i in range(min(len(k) for k in keys)):
            vals = {k[i] for k in keys}
            if len(vals) > 1:
                changing.append((len(vals), paths[i] if i < len(paths) else
                                 None if i == len(paths) else _CONTEXT))
        changing.sort(key=lambda c: (-c[0], c[1] or ""))
        names = ", ".join("the global random seed (tf.random.set_seed)" if p is None
                          else p if p is _CONTEXT
                          else _pretty_path(p, self._sig) for _, p in changing[:3]) or "?"
        return (f"tf.function {self._name!r} has been traced {len(keys)} times (one graph per "
                f"input signature); the argument(s) that keep changing: {names}. Pass tensors "
                "rather than Python numbers for values that vary, and keep shapes fixed.")

    # tracing ------------------------------------------------------------------------------
    def _trace(self, args, kwargs, leaves, paths, fn=None, rkey=None, specs=None,
               first=False, probe=False):
        """Trace ``fn`` (default: the Python function) on this call: ``(cf, result)``;
        with ``rkey`` (a relaxed trace) ``((generic cf, cf for these shapes), result)``.
        ``first``: Variables may be created (a specialisation of a relaxed trace).
        ``probe``: trace again only to see that no Variable is created (as TensorFlow
        does after a first trace that created some): its effects on Variables and
        random streams are put back, nothing is kept; returns None."""
        args, kwargs, leaves = _distinct_tensors(args, kwargs, leaves)
        g = Graph(self._name)
        g.composite_args = has_parts((args, kwargs))
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
        if rkey is not None:     # print() shows the relaxed shapes (None), as TensorFlow
            pos = [i for i, x in enumerate(leaves) if isinstance(x, (Tensor, Variable))]
            g.symbolic_shapes = {v: rkey[i][1] for i, v in zip(pos, g.args)
                                 if isinstance(rkey[i][1], SpecShape)}
        _scopes = _dispatch_mod.active_scopes
        stack = _trace_stack()
        first_trace = not self._traced_ok
        entry = [self, (first or first_trace) and not probe, 0]   # (+ Variables created)
        stack.append(entry)
        tr.speculative = tr.speculative or probe
        random_state = _random_snapshot() if probe else None
        _tl.tracer = tr
        _tracing[0] += 1
        _scopes[0] += 1           # every op takes the dispatcher's slow path, where the hook is
        try:
            with _stop_all_recording() if probe else _no_context():
                cargs, ckwargs = ((args, kwargs) if not g.composite_args else
                                  rebuild_composites((args, kwargs)))
                result = (fn or self._target())(*cargs, **ckwargs)
        finally:
            _scopes[0] -= 1
            _tracing[0] -= 1
            _tl.tracer = parent
            stack.pop()
            if probe:
                for var in tr.assigned.values():
                    var._value = tr.var_before[id(var)]
                _random_restore(random_state)
        if probe:
            return None
        result = _python_outputs_to_tensors(result)
        flat_result = result
        g.composite_outputs = has_composites(result)
        if g.composite_outputs:         # returned composites: their components are outputs
            flat_result = expand_composites(result)
        g.structure = _skeleton(flat_result)
        out_leaves = nest.flatten(flat_result)
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
        _check_leaks(tr, g)
        result = _mark_leaked(tr, g, result)
        g.captured_variables = list(tr.vars)
        gen = None
        if rkey is not None:     # the graph as traced, for the other shapes (specialised)
            gen = ConcreteFunction(g, False, None, trace=function)
            gen._set_writes(tr)
            g = copy_graph(g)
        cf = ConcreteFunction(g, self.optimize, self.passes, trace=function)
        cf._set_writes(tr)
        if _cuda_graphs[0]:   # (replaces cf._run when the graph may be captured; not for
            _capture.install(cf, _compile)     # the sub-graphs of cond / while_loop)
        if not first or fn is None:
            self._traced_ok = True
        if entry[2] and first_trace and fn is None and not first:
            # Variables were created: a second trace must create none (TensorFlow's rule:
            # a function that makes a new Variable at every call raises now)
            self._trace(args, kwargs, leaves, paths, probe=True)
        cf.signature = self._signature(args, kwargs, leaves, g, None, specs)
        if gen is not None:
            gen.signature = self._signature(args, kwargs, leaves, gen.graph, rkey, specs)
            gen._specialiser = functools.partial(self._call_generic, gen)
            return (gen, cf), result
        return cf, result

    def _signature(self, args, kwargs, leaves, g, rkey, specs):
        """The :class:`~tapeflow.tracing.signatures.FunctionSignature` of a trace:
        specs for its tensors (relaxed to ``rkey``'s shapes; named as ``specs``), the
        values of the other arguments, the output specs, the captured Variables."""
        relaxed = []
        descs = []
        for i, x in enumerate(leaves):
            if isinstance(x, (Tensor, Variable)):
                shape = tuple(x.shape)
                if rkey is not None and isinstance(rkey[i][1], SpecShape):
                    shape = rkey[i][1]
                    relaxed.append((tuple(x.shape), shape))
                    shape = None if shape.unknown_rank else tuple(shape)
                name = specs[i].name if specs and i in specs else None
                descs.append(TensorSpec(shape, x.dtype, name))
            else:
                descs.append(x)
        structured = nest.pack_sequence_as((args, kwargs), descs)
        structured = (tuple(structured[0]), dict(structured[1]))
        outputs = output_specs(g, relaxed)
        captures = [f"{id(v)}: TensorSpec(shape=(), dtype=tf.resource, name=None)"
                    for v in getattr(g, "captured_variables", ())]
        return FunctionSignature(self._name, self._params(*structured), structured, outputs,
                                 captures, self._sig)

    def __call__(self, *args, **kwargs):
        if not kwargs and not _tracing[0]:
            # the hot path: only Tensor arguments, no tape recording, a known signature
            key = [_rstate.global_seed]
            for h in key_hooks:
                key.append(h())
            for a in args:
                if type(a) is not Tensor:
                    break
                d = a._data
                key.append((d.shape, d.dtype, a._device))
            else:
                cf = self._fast.get(tuple(key))
                if cf is not None and not _tapes_active[0] and not _RUN_EAGERLY[0]:
                    return cf._call_tensors(args)
        if _RUN_EAGERLY[0]:
            return self.python_function(*args, **kwargs)
        if _current() is not None:
            # called while another function traces: inline (its ops join that trace)
            return self._target()(*args, **kwargs)
        given = args if not kwargs else None
        if self.input_signature is None:       # (else: converted to the specs' dtypes)
            args, kwargs = _arrays_to_tensors(args, kwargs)
        specs = None
        if self.input_signature is not None:
            if kwargs:
                args, kwargs = self._canonical(args, kwargs)
            args, kwargs, specs = self._apply_signature(args, kwargs)
        else:
            args, kwargs = self._canonical(args, kwargs)
            if has_composites((args, kwargs)):    # traced per TypeSpec, by their components
                args, kwargs = expand_composites((args, kwargs))
                specs = component_specs(nest.flatten((args, kwargs))) or None
        leaves, paths = _flatten_args(args, kwargs)
        cf, result = self._concrete(args, kwargs, leaves, paths, specs)
        if given is not None and _same_tensors(given, leaves):
            self._fast[tuple([_rstate.global_seed] + [h() for h in key_hooks] + [
                (a._data.shape, a._data.dtype, a._device) for a in given])] = cf
        if result is not _NOT_TRACED:
            # the trace ran the function (its side effects included): its result is this
            # call's, None too (running the graph as well would do everything twice);
            # a returned Variable is its value, as every later call returns it
            return _result_of(result)
        return cf._call_leaves(leaves)

    @property
    def graph(self):
        """The graph of the most recent trace (None before the first call)."""
        if not self._keys:
            return None
        return self._cache[self._keys[-1][0]].graph

    def experimental_get_tracing_count(self):
        """The number of traces (signatures traced; a relaxed trace counts once)."""
        return len(self._cache)

    def __repr__(self):
        return f"<tf.function {self._name} ({len(self._cache)} traced signatures)>"


def _same_tensors(given, leaves):
    """Whether a call's arguments, all Tensors, are its leaves' Tensors in order (its
    other leaves Python values such as defaults): then the hot path may replay it."""
    tensors = [x for x in leaves if isinstance(x, (Tensor, Variable))]
    return len(tensors) == len(given) and all(
        type(a) is Tensor and a is b for a, b in zip(given, tensors))


def _value_of(x):
    return x.read_value() if isinstance(x, Variable) else x      # (watched, as a read)


def _result_of(result):
    """What a call returns of the result of its trace: a returned Variable is its value."""
    return (nest.map_structure(_value_of, result)
            if isinstance(result, (Variable, list, tuple, dict)) else result)


#: the Python values a traced function's result holds that become tensors (as in
#: TensorFlow: numbers, NumPy scalars and arrays); None and other objects stay as they are
_TO_TENSOR = (bool, int, float, complex, np.generic, np.ndarray)


def _python_outputs_to_tensors(result):
    """``result`` with its Python numbers and NumPy values made tensors (constants of
    the graph: every call returns them as tensors, the first one too)."""
    if isinstance(result, _TO_TENSOR):
        return _constant_outside(result)
    if not isinstance(result, (list, tuple, dict)):
        return result
    leaves = nest.flatten(result)
    if not any(isinstance(x, _TO_TENSOR) for x in leaves):
        return result
    return nest.pack_sequence_as(result, [_constant_outside(x) if isinstance(x, _TO_TENSOR)
                                          else x for x in leaves])


def _constant_outside(x):
    tr = _tl.tracer
    _tl.tracer = None
    try:
        return _dispatch_mod.constant(x)
    finally:
        _tl.tracer = tr


#: the node kinds a relaxed trace's specialisation replays (others: the function again)


class _BoundMethod:
    """A method bound to an instance held weakly (``Function.__get__``): the Function
    of each instance is cached on the class's Function, which must not keep the
    instance alive. ``func``/``args`` as a ``functools.partial``'s."""

    def __init__(self, fn, ref):
        self.func = fn
        self._ref = ref
        sig = signature_of(fn)
        if sig is not None:
            params = list(sig.parameters.values())[1:]
            self.__signature__ = sig.replace(parameters=params)
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            if hasattr(fn, attr):
                setattr(self, attr, getattr(fn, attr))

    @property
    def args(self):
        return (self._ref(),)

    def __call__(self, *args, **kwargs):
        obj = self._ref()
        if obj is None:
            raise InvalidArgumentError(
                f"tf.function method {getattr(self.func, '__name__', '?')!r}: its instance "
                "no longer exists")
        return self.func(obj, *args, **kwargs)


class _Strong:
    """A strong reference that answers like a weak one (``ref()``)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __call__(self):
        return self.obj


def _forget(bound, key, _ref):
    bound.pop(key, None)


# --- tensors leaked out of a trace ------------------------------------------------------

#: the tensors a trace computed that its caller did not get back (kept in a global, a
#: list, an attribute): a later trace that captures one raises, as TensorFlow's
#: out-of-scope graph tensors do. {id: weak reference} (not a WeakSet: that would compare
#: two Tensors with ``==``, which is elementwise)
_LEAKED: dict = {}


def _unleak(key, _ref):
    _LEAKED.pop(key, None)


def _is_leaked(t):
    r = _LEAKED.get(id(t))
    return r is not None and r() is t


def _mark_leaked(tr, g, result):
    """Remember the tensors trace ``tr`` computed, and return ``result`` with its
    tensors new Tensor objects of the same values (not the trace's own, so a leaked
    one is never the one returned). Under a recording tape the result is the trace's
    own tensors (the tape knows those), and they are not marked."""
    args = set(g.args)
    dynamic = tr.dynamic
    keep = [t for t in tr.keep if type(t) is Tensor]
    if _tapes_active[0]:
        returned = {id(x) for x in nest.flatten(result) if type(x) is Tensor}
        keep = [t for t in keep if id(t) not in returned]
    elif isinstance(result, (Tensor, list, tuple, dict)):
        result = (wrap(result._data, result._device) if type(result) is Tensor else
                  nest.map_structure(_detached, result))
    for t in keep:
        vid = tr.ids.get(id(t))
        if vid in dynamic and vid not in args:
            _LEAKED[id(t)] = weakref.ref(t, functools.partial(_unleak, id(t)))
    return result


def _detached(x):
    return wrap(x._data, x._device) if type(x) is Tensor else x


def _check_leaks(tr, g):
    """Raise if trace ``tr`` captured a tensor that an earlier trace computed and leaked."""
    if not _LEAKED:
        return
    consts = {n.outputs[0] for n in g.nodes if n.kind == "const"}
    for t in tr.keep:
        if type(t) is Tensor and tr.ids.get(id(t)) in consts and _is_leaked(t):
            raise InvalidTypeError(
                f"tf.function {g.name!r} uses a tensor of shape {tuple(t.shape)} and dtype "
                f"{t.dtype.name} that another traced function computed and leaked (kept in "
                "a global, a list or an attribute) instead of returning it: it is out of "
                "scope and cannot be used here. Return it from that function and pass the "
                "returned value in (or keep it in a tf.Variable)")


# --- Variables are created on a Function's first trace only (as in TensorFlow) ----------

_trace_state = threading.local()


def _trace_stack():
    st = getattr(_trace_state, "stack", None)
    if st is None:
        st = _trace_state.stack = []
    return st


def _on_variable_created(var):
    st = getattr(_trace_state, "stack", None)
    if st and _tl.tracer is not None:
        st[-1][2] += 1
    if st and not st[-1][1] and _tl.tracer is not None:
        fn = st[-1][0]
        raise InvalidArgumentError(
            f"tf.function {fn._name!r} created a tf.Variable ({var.name}) on a trace other "
            "than its first (a function that creates Variables is traced twice, the second "
            "time to check that it creates none): tf.function only supports Variables "
            "created once, on the first call. Create the Variable once (outside the function, or only when it "
            "does not exist yet, as `if self.v is None: self.v = tf.Variable(...)`), or "
            "use a new tf.function (a new object with the method) for each new set of "
            "Variables (a different optimizer, say)")


_ctx.add_variable_observer(_on_variable_created)


_no_context = contextlib.nullcontext


def _random_snapshot():
    """The random streams' state, for :func:`_random_restore` (a probe trace's draws
    are put back)."""
    seed = next(_rstate.op_seeds)
    _rstate.op_seeds = itertools.count(seed)
    return dict(_rstate.counters), seed


def _random_restore(state):
    _rstate.counters.clear()
    _rstate.counters.update(state[0])
    _rstate.op_seeds = itertools.count(state[1])


# --- tf.config.run_functions_eagerly ------------------------------------------------

#: [True]: every tf.function runs its Python function eagerly (no tracing)
_RUN_EAGERLY = [False]


def run_functions_eagerly(run_eagerly):
    """``tf.config.run_functions_eagerly``: while True, calling a ``tf.function`` runs its
    Python function as plain eager code, every time (for debugging: ``print`` runs at
    every call, breakpoints stop). Concrete functions already obtained still replay.

    >>> import tapeflow as tf
    >>> @tf.function
    ... def f(x):
    ...     print("running")
    ...     return x + 1
    >>> tf.config.run_functions_eagerly(True)
    >>> _ = f(tf.constant(1)); _ = f(tf.constant(1))
    running
    running
    >>> tf.config.run_functions_eagerly(False)
    >>> tf.config.functions_run_eagerly()
    False
    """
    if not isinstance(run_eagerly, (bool, np.bool_)):
        raise InvalidTypeError(f"tf.config.run_functions_eagerly: expected a bool, got "
                               f"{run_eagerly!r}")
    _RUN_EAGERLY[0] = bool(run_eagerly)


def functions_run_eagerly():
    """Whether :func:`run_functions_eagerly` is on."""
    return _RUN_EAGERLY[0]


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
    tracing_type = getattr(type(x), "__tf_tracing_type__", None)
    if tracing_type is not None:        # the object's own TraceType (equality and hash)
        return ("TT", x.__tf_tracing_type__(None))
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


_CONTEXT = "the calling context (key_hooks: a tf.distribute strategy or replica)"


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
             autograph=True, jit_compile=None, reduce_retracing=None, experimental_compile=None,
             experimental_autograph_options=None):
    """Trace ``func`` once per input signature and replay it (decorator).

    ``optimize=False`` replays the graph as traced; ``passes``: names of the graph
    passes to run (default: all, see :mod:`tapeflow.tracing.graph_passes`).
    ``input_signature``: a list of :class:`~tapeflow.tracing.signatures.TensorSpec`
    every call is checked against (lists and NumPy arrays converted); one trace serves
    every shape the specs accept. ``reduce_retracing=True``: after a second shape for
    an argument, trace once for every size (None) of the dimensions that changed.
    ``autograph=False``: trace ``func`` as written (by default Python ``if``/``while``/
    ``for`` on traced tensors become graph control flow: :mod:`tapeflow.tracing.autograph`).
    TensorFlow's other keyword arguments are accepted and ignored.

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
        return lambda f: function(f, optimize=optimize, passes=passes, name=name,
                                  input_signature=input_signature,
                                  reduce_retracing=reduce_retracing, autograph=autograph)
    if isinstance(func, Function):
        return func
    return Function(func, optimize=optimize, passes=passes, name=name,
                    input_signature=input_signature, reduce_retracing=reduce_retracing,
                    autograph=autograph)


#: ``tf.types``: ``experimental.TraceType``, ``TensorLike``, ``FunctionType``,
#: ``GenericFunction`` (Function) and ``ConcreteFunction``
types = _types_ns
types.experimental.GenericFunction = Function
types.experimental.PolymorphicFunction = Function
types.experimental.ConcreteFunction = ConcreteFunction


#: the seeds' name (tf.contrib.eager.defun)
defun = function


def _placeholders(leaves):
    """The tensors ``get_concrete_function`` traces with for specs among ``leaves``: a
    TensorSpec's placeholder, and for a composite spec (followed by its components'
    TensorSpecs) its ``placeholder_components()`` (ragged splits that fit the values)."""
    out = [x.placeholder_value() if isinstance(x, TensorSpec) else x for x in leaves]
    for i, x in enumerate(leaves):
        if isinstance(x, TypeSpec) and not isinstance(x, TensorSpec):
            comps = tuple(x.placeholder_components())
            out[i + 1:i + 1 + len(comps)] = comps
    return out
