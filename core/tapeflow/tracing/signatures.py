"""Input signatures of ``tf.function``: :class:`TensorSpec`, the trace types of a call's
arguments, the printed form of a concrete function's signature, and the GraphDef view
of a traced graph.

A :class:`TensorSpec` describes the tensors a parameter accepts: a shape whose
dimensions may be unknown (``None``) -- or whose rank is unknown (``shape=None``) --
and a dtype. ``tf.function(input_signature=[...])`` checks every call against its
specs and traces one graph for all the shapes they accept;
``Function.get_concrete_function`` accepts specs in place of tensors.

>>> import tapeflow as tf
>>> spec = tf.TensorSpec([None, 3], tf.float32)
>>> spec
TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)
>>> spec.is_compatible_with(tf.zeros([5, 3])), spec.is_compatible_with(tf.zeros([5, 2]))
(True, False)
>>> tf.TensorSpec([2, 3]).most_specific_common_supertype([tf.TensorSpec([4, 3])])
TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)

A :class:`FunctionSignature` is what one trace was called with, bound to the Python
function's parameters (defaults applied): a spec for each tensor, the value of every
other argument (a *literal*, baked into the trace). It checks a concrete function's
calls (:meth:`FunctionSignature.bind`) and prints the signature the way TensorFlow
does (:meth:`FunctionSignature.pretty`).
"""

from __future__ import annotations

import inspect
import types as _pytypes
import typing

import numpy as np

from .. import dtypes as _dt
from .. import nest
from ..errors import InvalidArgumentError, InvalidTypeError
from ..ops.composite import TypeSpec, is_composite, type_spec_from_value
from ..runtime.dispatch import constant, convert_to_tensor
from ..runtime.tensor import Tensor, TensorShape
from ..runtime.variable import Variable

__all__ = ["TensorSpec", "TraceType", "SpecShape", "FunctionSignature", "FunctionType",
           "GraphDef", "NodeDef", "graph_def", "types", "spec_of", "common_shape"]


class TraceType:
    """The trace type of an argument (``tf.types.experimental.TraceType``): a class
    of values one trace serves. An object whose class defines
    ``__tf_tracing_type__(context)`` is keyed by the TraceType it returns (equality and
    hash), and traced with its ``placeholder_value()``."""

    def is_subtype_of(self, other) -> bool:
        raise NotImplementedError

    def most_specific_common_supertype(self, others):
        raise NotImplementedError

    def placeholder_value(self, placeholder_context=None):
        raise NotImplementedError

    def __eq__(self, other):
        raise NotImplementedError

    def __hash__(self):
        raise NotImplementedError


class SpecShape(TensorShape):
    """A shape whose dimensions may be unknown (``None``), or whose rank is unknown
    (``SpecShape(None)``: ``rank`` is None, printed ``<unknown>``)."""

    def __new__(cls, dims=None):
        if dims is None:
            self = super().__new__(cls, ())
            self.unknown_rank = True
            return self
        self = super().__new__(cls, tuple(None if d is None else int(d) for d in dims))
        self.unknown_rank = False
        return self

    @property
    def ndims(self):
        return None if self.unknown_rank else len(self)

    rank = ndims

    def as_list(self):
        if self.unknown_rank:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self)

    def is_fully_defined(self):
        return not self.unknown_rank and None not in self

    def num_elements(self):
        return TensorShape.num_elements(self) if self.is_fully_defined() else None

    def is_compatible_with(self, other):
        other = other if isinstance(other, SpecShape) else SpecShape(tuple(other))
        if self.unknown_rank or other.unknown_rank:
            return True
        return len(self) == len(other) and all(
            a is None or b is None or a == b for a, b in zip(self, other))

    def __eq__(self, other):
        if isinstance(other, SpecShape):
            return self.unknown_rank == other.unknown_rank and tuple.__eq__(self, other)
        return not self.unknown_rank and TensorShape.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        # (a shape without unknowns hashes as its tuple: a key holding one equals the key
        # of the exact shapes)
        return hash("<unknown>") if self.unknown_rank else tuple.__hash__(self)

    def __str__(self):
        return "<unknown>" if self.unknown_rank else tuple.__repr__(tuple(self))

    def __repr__(self):
        return "TensorShape(None)" if self.unknown_rank else f"TensorShape({list(self)})"

    def __reduce__(self):
        return (SpecShape, (None if self.unknown_rank else tuple(self),))


def common_shape(a, b):
    """The most specific shape both ``a`` and ``b`` (SpecShapes) are: equal dimensions
    kept, others None; an unknown rank where the ranks differ."""
    if a.unknown_rank or b.unknown_rank or len(a) != len(b):
        return SpecShape(None)
    return SpecShape(x if x == y else None for x, y in zip(a, b))


def _as_shape(shape, where):
    if shape is None:
        return SpecShape(None)
    if isinstance(shape, SpecShape):
        return shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise InvalidTypeError(
            f"{where}: shape must be None, a list or a tuple of ints or None, got "
            f"{shape!r} ({type(shape).__name__})") from None
    for d in dims:
        if d is not None and (isinstance(d, bool) or not isinstance(d, (int, np.integer))
                              or d < 0):
            raise InvalidTypeError(
                f"{where}: every dimension of a shape is a non-negative int or None, got "
                f"{d!r} in {shape!r}")
    return SpecShape(dims)


class TensorSpec(TraceType):
    """The shape and dtype of the tensors a ``tf.function`` parameter accepts.

    ``shape``: a list or tuple whose entries are ints or ``None`` (any size), or
    ``None`` (any rank); ``dtype``: a dtype (default float32); ``name``: a name for the
    parameter (printed only).

    >>> import tapeflow as tf
    >>> tf.TensorSpec(None, tf.int32)
    TensorSpec(shape=<unknown>, dtype=tf.int32, name=None)
    >>> tf.TensorSpec.from_tensor(tf.constant([1, 2]), name="x")
    TensorSpec(shape=(2,), dtype=tf.int32, name='x')
    """

    __slots__ = ("_shape", "_dtype", "_name")

    def __init__(self, shape, dtype=_dt.float32, name=None):
        self._shape = _as_shape(shape, "tf.TensorSpec")
        try:
            self._dtype = _dt.as_dtype(dtype)
        except (TypeError, ValueError, KeyError) as e:
            raise InvalidTypeError(f"tf.TensorSpec: dtype {dtype!r} is not a dtype "
                                   f"({e})") from None
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(f"tf.TensorSpec: name must be a str or None, got {name!r}")
        self._name = name

    shape = property(lambda self: self._shape, doc="The shape (a SpecShape).")
    dtype = property(lambda self: self._dtype, doc="The dtype.")
    name = property(lambda self: self._name, doc="The name, or None.")

    @classmethod
    def from_tensor(cls, tensor, name=None):
        """The spec of ``tensor`` (its exact shape and dtype)."""
        if isinstance(tensor, (Tensor, Variable)):
            return cls(tuple(tensor.shape), tensor.dtype, name)
        if isinstance(tensor, TensorSpec):
            return cls(tensor.shape, tensor.dtype, name if name is not None else tensor.name)
        raise InvalidTypeError(f"TensorSpec.from_tensor: expected a Tensor, got "
                               f"{type(tensor).__name__}")

    @classmethod
    def from_spec(cls, spec, name=None):
        """A copy of ``spec`` (renamed to ``name`` if given)."""
        if not isinstance(spec, TensorSpec):
            raise InvalidTypeError(f"TensorSpec.from_spec: expected a TensorSpec, got "
                                   f"{type(spec).__name__}")
        return cls(spec.shape, spec.dtype, name if name is not None else spec.name)

    def is_compatible_with(self, spec_or_value):
        """Whether a tensor, a value that converts to one, or a spec fits this spec:
        the same dtype and a compatible shape."""
        other = spec_or_value
        if not isinstance(other, TensorSpec):
            try:
                other = spec_of(other, strict=False)
            except (InvalidArgumentError, TypeError, ValueError):
                return False
        return other.dtype == self.dtype and self.shape.is_compatible_with(other.shape)

    def is_subtype_of(self, other):
        if not isinstance(other, TensorSpec) or other.dtype != self.dtype:
            return False
        if other.shape.unknown_rank:
            return True
        if self.shape.unknown_rank or len(self.shape) != len(other.shape):
            return False
        return all(b is None or a == b for a, b in zip(self.shape, other.shape))

    def most_specific_common_supertype(self, others):
        """The most specific spec every one of ``self`` and ``others`` fits (None if the
        dtypes differ)."""
        shape = self.shape
        for o in others:
            if not isinstance(o, TensorSpec) or o.dtype != self.dtype:
                return None
            shape = common_shape(shape, o.shape)
        names = {self.name, *(o.name for o in others)}
        return TensorSpec(shape, self.dtype, self.name if len(names) == 1 else None)

    most_specific_compatible_type = most_specific_common_supertype

    def placeholder_value(self, placeholder_context=None):
        """A tensor of this spec (zeros; an unknown dimension has size 1, an unknown
        rank is a scalar): what ``get_concrete_function`` traces with."""
        shape = () if self.shape.unknown_rank else tuple(1 if d is None else d
                                                         for d in self.shape)
        if self.dtype.name == "string":
            return constant(np.full(shape, b"", dtype=object))
        return constant(np.zeros(shape, self.dtype.np))

    def __eq__(self, other):
        return (type(other) is TensorSpec and self._dtype == other._dtype
                and self._shape == other._shape and self._name == other._name)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((self._shape, self._dtype.name, self._name))

    def __repr__(self):
        return (f"TensorSpec(shape={self._shape}, dtype=tf.{self._dtype.name}, "
                f"name={self._name!r})")

    def __reduce__(self):
        return (TensorSpec, (None if self._shape.unknown_rank else tuple(self._shape),
                             self._dtype, self._name))


def spec_of(value, strict=True):
    """The TensorSpec of a tensor (or Variable); with ``strict=False`` also of a NumPy
    array or a Python number or list (as ``tf.constant`` would make it)."""
    if isinstance(value, TensorSpec):
        return value
    if isinstance(value, (Tensor, Variable)):
        return TensorSpec(tuple(value.shape), value.dtype)
    if strict:
        raise InvalidTypeError(f"expected a Tensor, got {type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
        arr = arr.astype(np.float32)             # Python floats: float32, as tf.constant
    elif arr.dtype == np.int64 and not isinstance(value, np.ndarray):
        arr = arr.astype(np.int32)
    return TensorSpec(arr.shape, _dt.from_numpy(arr.dtype))


# --- describing arguments and results (TensorFlow's printed function types) -------------

def _describe(x):
    """A value's type as TensorFlow prints it in a function type."""
    if isinstance(x, TensorSpec):
        return repr(x)
    if type(x) is CompositeParts:          # (a composite: its TypeSpec)
        return repr(x.spec)
    if isinstance(x, (Tensor, Variable)):
        return repr(spec_of(x))
    if isinstance(x, list):
        return "List[" + ", ".join(_describe(v) for v in x) + "]"
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return "Tuple[" + ", ".join(_describe(v) for v in x) + "]"
    if isinstance(x, dict):
        return "Dict[" + ", ".join(f"[{k!r}, {_describe(v)}]" for k, v in x.items()) + "]"
    if x is None or isinstance(x, (bool, int, float, str, complex)):
        return f"Literal[{x!r}]"
    return f"Opaque[{type(x).__name__}]"


def _literal_equal(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object whose == raises: not the same literal
        return a is b


class FunctionType:
    """A concrete function's type: its parameters (name, kind, type) and its output
    type, printed ``(a: TensorSpec(...), b: Literal[2]) -> TensorSpec(...)``."""

    def __init__(self, parameters, output):
        self.parameters = parameters        # [(name, kind name, described type)]
        self.output = output                # the described output type

    def __str__(self):
        params = ", ".join(f"{n}: {t}" for n, _, t in self.parameters)
        return f"({params}) -> {self.output}"

    __repr__ = __str__


class FunctionSignature:
    """What one trace was called with: the Python function's parameters, bound (with
    defaults), a spec for every tensor and the value of every other argument.

    ``structured`` is ``(args, kwargs)`` with TensorSpecs for tensors (TensorFlow's
    ``structured_input_signature``); ``leaves`` its leaves."""

    def __init__(self, name, params, structured, outputs=None, captures=(), py_sig=None):
        self.name = name
        self.py_sig = py_sig            # the Python function's inspect.Signature
        self.params = params            # [(name, kind)] of the canonical (args, kwargs)
        self.structured = structured
        self.leaves = nest.flatten(structured)
        self.outputs = outputs          # the output structure with TensorSpecs
        self.captures = list(captures)

    # binding a call -----------------------------------------------------------------
    def bind(self, args, kwargs, convert):
        """The leaves of a call of the concrete function, checked against the specs
        and literals (``convert(value, dtype)`` makes a tensor of a NumPy array or a
        Python value where a spec is)."""
        if self.py_sig is not None:
            c = canonical_call(self.py_sig, args, kwargs)
            if c is None:
                c = self._bind_baked(args, kwargs)
            if c is not None:
                args, kwargs = c[0], c[1]
        leaves = _flatten_or_none((args, kwargs))
        if leaves is None or len(leaves) != len(self.leaves) or \
                not _same_structure((args, kwargs), self.structured):
            raise InvalidTypeError(
                f"{self.name}: the arguments {_short_call(args, kwargs)} do not match the "
                f"signature of this concrete function, {self.function_type()}; call it "
                "with arguments of that structure (or call the tf.function, which traces "
                "new signatures)")
        out = []
        for i, (x, want) in enumerate(zip(leaves, self.leaves)):
            if isinstance(want, TensorSpec):
                if not isinstance(x, (Tensor, Variable)):
                    try:
                        x = convert(x, want.dtype)
                    except (InvalidArgumentError, TypeError, ValueError) as e:
                        raise InvalidTypeError(
                            f"{self.name}: input {i} ({_param_of(self, i)}) must be a tensor "
                            f"compatible with {want}, got {x!r} ({e})") from None
                if x.dtype != want.dtype or not want.shape.is_compatible_with(x.shape):
                    raise InvalidTypeError(
                        f"{self.name}: input {i} ({_param_of(self, i)}) was expected to be "
                        f"{want} but is a {x.dtype.name} tensor of shape {tuple(x.shape)}; "
                        "pass a tensor of that dtype and shape (tf.cast, tf.reshape), or "
                        "get a concrete function for this one")
            elif not _literal_equal(x, want) and not isinstance(want, TraceType) and not (
                    isinstance(want, TypeSpec) and want.is_compatible_with(x)):
                raise InvalidTypeError(
                    f"{self.name}: can not cast {x!r} to {_describe(want)}: the value of "
                    f"{_param_of(self, i)} was fixed when this concrete function was "
                    "traced; call the tf.function to trace another value")
            out.append(x)
        return out

    def _bind_baked(self, args, kwargs):
        """A call that leaves out the Python values baked into the trace (TensorFlow's
        flat signature): its positional arguments fill the parameters that hold
        tensors, in order, or the parameters after them; None if that does not bind."""
        sargs, skw = self.structured
        entries = list(zip(self.params, list(sargs) + list(skw.values())))
        holds = [any(isinstance(x, TensorSpec) for x in _flatten_or_none(v) or [v])
                 for _, v in entries]
        if len(args) == sum(holds):
            it = iter(args)
            call = {n: (next(it) if h else v) for ((n, _), v), h in zip(entries, holds)
                    if n not in kwargs}
            c = canonical_call(self.py_sig, (), {**call, **kwargs})
            if c is not None:
                return c
        baked = {n: v for i, ((n, _), v) in enumerate(entries)
                 if i >= len(args) and n not in kwargs and not holds[i]}
        return canonical_call(self.py_sig, args, {**baked, **kwargs})

    # printing -----------------------------------------------------------------------
    def function_type(self):
        args, kwargs = self.structured
        values = list(args) + list(kwargs.values())
        params = [(n, k, _describe(v)) for (n, k), v in zip(self.params, values)]
        return FunctionType(params, _describe(self.outputs))

    def pretty(self):
        """TensorFlow's printed form: the input parameters, the output type and the
        captures."""
        ft = self.function_type()
        lines = ["Input Parameters:"]
        lines += [f"  {n} ({k}): {t}" for n, k, t in ft.parameters]
        lines += ["Output Type:", f"  {ft.output}", "Captures:"]
        if self.captures:
            lines += [f"  {c}" for c in self.captures]
        else:
            lines.append("  None")
        return "\n".join(lines)


def _param_of(sig, i):
    """The parameter the ``i``-th leaf belongs to (its name)."""
    args, kwargs = sig.structured
    n = 0
    for (name, _), v in zip(sig.params, list(args) + list(kwargs.values())):
        k = len(nest.flatten(v))
        if i < n + k:
            return f"argument {name!r}"
        n += k
    return f"input #{i}"


def _flatten_or_none(x):
    try:
        return nest.flatten(x)
    except (TypeError, ValueError):
        return None


def _same_structure(a, b):
    try:
        nest.assert_same_structure(a, b)
        return True
    except (TypeError, ValueError):
        return False


def _short_call(args, kwargs):
    s = ", ".join([_describe(a) for a in args] +
                  [f"{k}={_describe(v)}" for k, v in kwargs.items()])
    return f"({s if len(s) < 300 else s[:297] + '...'})"


def canonical_call(sig, args, kwargs):
    """``(args, kwargs, params)``: a call bound to the Python signature ``sig`` with its
    defaults (as TensorFlow canonicalises calls: ``f(x, y=2)``, ``f(x, 2)`` and
    ``f(x)`` with ``y=2`` the default are one call), positional where possible;
    ``params``: ``[(name, kind)]`` of the result's entries. None when the call does
    not bind (the Python function raises its own error when called)."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    params = []
    for name, value in bound.arguments.items():
        p = sig.parameters[name]
        if p.kind is p.VAR_POSITIONAL:
            params += [(f"{name}_{i}", "POSITIONAL_ONLY") for i in range(len(value))]
        elif p.kind is p.VAR_KEYWORD:
            params += [(k, "KEYWORD_ONLY") for k in value]
        else:
            params.append((name, p.kind.name))
    return tuple(bound.args), dict(bound.kwargs), params


def signature_of(fn):
    """``inspect.signature(fn)``, or None."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


# --- input signatures and relaxed cache keys (tapeflow.tracing.function_cache) ----------

def output_specs(g, relaxed):
    """The output structure of graph ``g`` with a TensorSpec for each tensor. A relaxed
    trace's (``relaxed``: ``[(traced shape, SpecShape)]`` of its tensor inputs): an
    unknown rank when an input's rank is unknown, else None for each dimension of a
    size that an unknown input dimension had when traced."""
    unknown_rank = any(r.unknown_rank for _, r in relaxed)
    sizes = {d for traced, r in relaxed if not r.unknown_rank
             for d, want in zip(traced, r) if want is None}
    out = []
    for kind, v in g.py_outputs:
        if kind != "t":
            out.append(v)
            continue
        shape, dt, _ = g.meta[g.outputs[v]]
        if unknown_rank:
            shape = None
        elif sizes:
            shape = tuple(None if d in sizes else d for d in shape)
        out.append(TensorSpec(shape, _dt.from_numpy(dt)))
    if g.structure is None:
        return out[0] if out else None
    return nest.pack_sequence_as(g.structure, out)


def spec_shape(shape):
    return shape if isinstance(shape, SpecShape) else SpecShape(shape)


def spec_key(key, specs):
    """The relaxed cache key of a call traced for ``specs`` ({leaf index: TensorSpec}):
    each tensor's shape replaced by its spec's; None when no spec has an unknown."""
    if not any(not s.shape.is_fully_defined() for s in specs.values()):
        return None
    out = list(key)
    for i, spec in specs.items():
        c = key[i]
        if type(c) is tuple and c and c[0] == "T":
            out[i] = ("T", spec.shape, c[2], c[3])
    return tuple(out)


def key_fits(rkey, key):
    """Whether the call of exact ``key`` fits relaxed key ``rkey``."""
    if len(rkey) != len(key):
        return False
    for a, b in zip(rkey, key):
        if a == b:
            continue
        if not (type(a) is tuple and type(b) is tuple and len(a) == len(b) == 4
                and a[0] == b[0] == "T" and a[2:] == b[2:] and isinstance(a[1], SpecShape)
                and a[1].is_compatible_with(b[1])):
            return False
    return True


def check_input_signature(sig, name):
    """``input_signature`` as a tuple (None stays None): a list or tuple of TensorSpecs
    (nested lists, tuples and dicts of them)."""
    if sig is None:
        return None
    if not isinstance(sig, (list, tuple)):
        raise InvalidTypeError(
            f"tf.function {name!r}: input_signature must be a list or tuple of "
            f"tf.TensorSpec, got {type(sig).__name__}")
    for x in nest.flatten(sig):
        if not isinstance(x, (TensorSpec, TypeSpec)):
            raise InvalidTypeError(
                f"tf.function {name!r}: every entry of input_signature must be a "
                f"tf.TensorSpec, got {x!r} ({type(x).__name__})")
    return tuple(sig)


def check_specs(fname, sig, args, specs):
    """get_concrete_function(specs) of a Function with input_signature ``sig``: the
    specs must fit it."""
    flat = nest.flatten(expand_composites(sig))
    given = [specs.get(i) for i in range(len(flat))]
    n_specs = sum(isinstance(w, TensorSpec) for w in flat)
    if len(args) != len(sig) or len(specs) != n_specs or not all(
            w.dtype == g.dtype and w.shape.is_compatible_with(g.shape)
            for w, g in zip(flat, given) if g is not None and isinstance(w, TensorSpec)):
        raise InvalidTypeError(
            f"tf.function {fname!r}: get_concrete_function{tuple(args)!r} does not fit "
            f"its input_signature {list(sig)}")


def conform(fname, name, spec, value):
    """Argument ``name`` of tf.function ``fname`` checked against (and converted to)
    ``spec`` of its input_signature (a TensorSpec or a structure of them)."""
    return _conform_part(fname, name, spec, value, spec)


def _conform_part(fn, name, spec, value, whole):
    if isinstance(spec, TypeSpec):            # a composite: its type must fit
        if not spec.is_compatible_with(value):
            raise InvalidTypeError(
                f"tf.function {fn!r}: argument {name!r} does not fit its input_signature "
                f"entry {spec!r}: got {type(value).__name__} "
                f"{type_spec_from_value(value) if is_composite(value) else value!r}")
        return value
    if isinstance(spec, TensorSpec):          # (a list there is a tensor's value)
        return _conform_leaf(fn, name, spec, value)
    if isinstance(spec, dict):
        if not isinstance(value, dict) or set(value) != set(spec):
            raise _structure_error(fn, name, whole, value)
        return {k: _conform_part(fn, name, spec[k], value[k], whole) for k in spec}
    if not isinstance(value, (list, tuple)) or len(value) != len(spec):
        raise _structure_error(fn, name, whole, value)
    out = [_conform_part(fn, name, s, v, whole) for s, v in zip(spec, value)]
    return type(value)(out) if not hasattr(value, "_fields") else type(value)(*out)


def _structure_error(fn, name, spec, value):
    return InvalidTypeError(
        f"tf.function {fn!r}: argument {name!r} must have the structure of its "
        f"input_signature entry {spec!r}, got {value!r}")


def _conform_leaf(fn, name, spec, value):
    if not isinstance(value, (Tensor, Variable)):
        try:
            value = convert_to_tensor(value, dtype=spec.dtype)
        except (InvalidArgumentError, TypeError, ValueError) as e:
            raise InvalidTypeError(
                f"tf.function {fn!r}: argument {name!r} does not fit its "
                f"input_signature entry {spec}: cannot convert {value!r} to a {spec.dtype.name} "
                f"tensor ({str(e).splitlines()[0]})") from None
    if value.dtype != spec.dtype or not spec.shape.is_compatible_with(tuple(value.shape)):
        raise InvalidTypeError(
            f"tf.function {fn!r}: argument {name!r} does not fit its input_signature "
            f"entry {spec}: got a {value.dtype.name} tensor of shape {tuple(value.shape)}. "
            "Pass a tensor of that dtype and a compatible shape (tf.cast, tf.reshape), or "
            "widen the input_signature")
    return value


def simple_arity(sig):
    """The number of positional arguments of a call that needs no binding (every
    parameter positional, without defaults or ``*args``), or -1."""
    if sig is None:
        return -1
    n = 0
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or \
                p.default is not p.empty:
            return -1
        n += 1
    return n


def fullargspec(fn):
    try:
        return inspect.getfullargspec(fn)
    except TypeError:
        return None


# --- the GraphDef view of a traced graph ---------------------------------------------------

class NodeDef:
    """One node of a :class:`GraphDef`: ``name``, ``op``, ``input`` (the names of the
    nodes whose outputs it reads, ``"name:i"`` for an output after the first),
    ``device`` and ``attr``."""

    __slots__ = ("name", "op", "input", "device", "attr")

    def __init__(self, name, op, inputs, device="", attr=None):
        self.name = name
        self.op = op
        self.input = list(inputs)
        self.device = device
        self.attr = dict(attr or {})

    def __repr__(self):
        return f"NodeDef(name={self.name!r}, op={self.op!r}, input={self.input!r})"


class GraphDef:
    """TensorFlow's ``GraphDef`` of a traced graph, for inspection: ``node``, a list of
    :class:`NodeDef` (a ``Placeholder`` per argument, the graph's nodes, an
    ``Identity`` per output)."""

    def __init__(self, nodes):
        self.node = nodes

    def __str__(self):
        out = []
        for n in self.node:
            out.append("node {")
            out.append(f'  name: "{n.name}"')
            out.append(f'  op: "{n.op}"')
            out += [f'  input: "{i}"' for i in n.input]
            if n.device:
                out.append(f'  device: "{n.device}"')
            out.append("}")
        return "\n".join(out)


_OP_OF_KIND = {"const": "Const", "read": "ReadVariableOp", "assign": "AssignVariableOp",
               "copy": "Identity", "py": "EagerPyFunc", "print": "PrintV2", "cond": "If",
               "while": "While", "fused": "_FusedElementwise"}


def graph_def(graph):
    """The :class:`GraphDef` of ``graph`` (a :class:`tapeflow.tracing.graph.Graph`)."""
    names = {}
    used = {}
    nodes = []

    def unique(base):
        k = used.get(base, 0)
        used[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    for vid, arg in zip(graph.args, graph.arg_names):
        name = unique("".join(c if c.isalnum() or c in "_." else "_" for c in arg) or "arg")
        names[vid] = name
        nodes.append(NodeDef(name, "Placeholder", ()))
    for n in graph.nodes:
        op = n.name if n.kind == "op" else _OP_OF_KIND.get(n.kind, n.kind)
        name = unique(op)
        ins = [names.get(i, f"?{i}") for i in n.inputs]
        for j, o in enumerate(n.outputs):
            names[o] = name if j == 0 else f"{name}:{j}"
        dev = getattr(n.device, "name", "") if n.device is not None else ""
        nodes.append(NodeDef(name, op, ins, dev))
    for o in graph.outputs:
        nodes.append(NodeDef(unique("Identity"), "Identity", [names.get(o, f"?{o}")]))
    return GraphDef(nodes)


#: ``tf.types`` (``experimental``: TraceType, TensorLike; function_cache adds the
#: function types)
TensorLike = typing.Union[Tensor, Variable, int, float, bool, str, bytes, complex, tuple,
                          list, np.ndarray, np.generic]
types = _pytypes.SimpleNamespace(experimental=_pytypes.SimpleNamespace(
    TraceType=TraceType, TensorLike=TensorLike, FunctionType=FunctionType))


# --- composite tensors at a tf.function's boundary ---------------------------------------

class CompositeParts(typing.NamedTuple):
    """A composite tensor or its TypeSpec taken apart at a ``tf.function`` boundary: its
    spec (part of the cache key) and dense components (graph inputs or outputs; for a
    spec, TensorSpecs): a ragged argument with other row lengths reuses its trace."""

    spec: object
    components: tuple


def _parts(x, sig=None):
    if isinstance(x, TypeSpec):
        return CompositeParts(x, tuple(TensorSpec(s, d) for s, d in x.component_specs()))
    spec = type_spec_from_value(x)
    return CompositeParts(spec if sig is None else sig, tuple(spec.to_components(x)))


def _is_part(x):
    return is_composite(x) or isinstance(x, TypeSpec)


def has_composites(structure) -> bool:
    """Whether ``structure`` holds a composite tensor or a composite TypeSpec."""
    return any(map(_is_part, nest.flatten(structure)))


def expand_composites(structure, signature=None):
    """``structure`` with each composite tensor or TypeSpec as its
    :class:`CompositeParts` (``signature``: the input_signature entries the values
    conform to, whose specs key the trace)."""
    if signature is not None:
        return nest.map_structure(lambda x, s: _parts(x, s) if _is_part(x) else x,
                                  structure, signature, check_types=False)
    return nest.map_structure(lambda x: _parts(x) if _is_part(x) else x, structure)


def component_specs(leaves):
    """``{leaf index: TensorSpec}`` for the components among an expanded call's leaves
    (their spec's component shapes: unknown sizes trace once for all)."""
    out = {}
    for i, x in enumerate(leaves):
        if isinstance(x, TypeSpec):
            for k, (shape, dtype) in enumerate(x.component_specs()):
                out[i + 1 + k] = TensorSpec(shape, dtype)
    return out


def rebuild_composites(structure):
    """The inverse of :func:`expand_composites` on values: each :class:`CompositeParts`
    rebuilt by its spec from its components."""
    if type(structure) is CompositeParts:
        return structure.spec.from_components(tuple(structure.components))
    if isinstance(structure, dict):
        return type(structure)((k, rebuild_composites(v)) for k, v in structure.items())
    if isinstance(structure, (list, tuple)):
        out = [rebuild_composites(v) for v in structure]
        return type(structure)(*out) if hasattr(structure, "_fields") else type(structure)(out)
    return structure


def has_parts(structure) -> bool:
    """Whether an expanded structure holds a :class:`CompositeParts`."""
    if isinstance(structure, dict):
        structure = list(structure.values())
    return type(structure) is CompositeParts or (isinstance(structure, (list, tuple)) and any(
        has_parts(v) for v in structure))
