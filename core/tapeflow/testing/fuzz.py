"""A bad-input fuzzer for every public op: the instrument behind the promise of
docs/errors.md ("bad input fails at the line that caused it, with an error that says
what went wrong"; its section "Fuzzing" says how CI and ``scripts/fuzz.py`` run it).

It calls the public functions (``tf.*``, ``tf.nn.*``, ``tf.linalg.*``,
``tf.random.*``, ``tf.math.*``) and every registered op (:data:`tapeflow.runtime.registry.OPS`,
as a plugin or the tracer calls them) with one argument replaced by a bad value --
a string, ``None``, a complex number, an object, a ragged list, ``None`` inside a list,
a NumPy broadcast view of a huge shape (zero strides: a few bytes that would be tens
of GiB once copied), a huge or negative dimension, a shape of rank > 64 (NumPy's
limit), a float or a duplicate where an axis goes -- with Variables as inputs, and
registry ops with too few inputs; and it compares the public value types
(``DType``, ``Device``, ``TensorShape``, ``OpDef``) with arbitrary objects (targets
``cmp:<type>``: ``==``, ``!=`` and ``hash`` must not raise and must agree). It
classifies what happens:

``ok``
    returned (fine for a control, and for bad values that are merely unusual)
``error``
    raised a :class:`tapeflow.errors.TapeflowError` that says where (the goal)
``unnamed``
    raised a tapeflow error that does not say which op or function received the bad
    argument: a bug. The rule: the error's ``.op`` is ``None`` (or it has no ``.op``)
    *and* its message does not contain the name of the function called as a whole word
    (``reduce_sum`` for ``tf.reduce_sum``, ``MatMul`` for ``op:MatMul``; a
    namespaced op ``project::Name`` may be named as ``Name``). An error naming another
    op (``[Op:Cast]`` from inside ``tf.nn.softmax``) counts as named.
``foreign``
    raised any other exception (a NumPy ``TypeError``, an ``AttributeError``): a bug
``memory``
    a plain ``MemoryError`` instead of ``ResourceExhaustedError``: a bug
``coercion``
    returned although an argument held a value no op may accept silently (a string,
    bytes or ``None`` in a tensor argument or inside a list there, a float, complex
    number or duplicate where an axis goes, too few inputs): a bug (complex numbers are
    tensors' values since complex64/128, and text is one for the targets that take
    strings, :func:`takes_text`); also returned a real floating-point result
    from a complex value with a non-zero imaginary part where the target does not map
    complex numbers to reals (``fill(dims, 1+2j)`` giving float32: the imaginary part
    was dropped; ``abs``, ``real``, ``angle``, ``cast``... are exempt, see
    :data:`COMPLEX_TO_REAL`)
``variable``
    a Variable passed as an input changed: a bug

With two devices, every call also runs on the second one (its tensors created
there) and a different outcome -- one raises and the other returns, or both return
different values -- is a ``disagreement``.

>>> from tapeflow.testing import fuzz
>>> calls = fuzz.generate(seed=0, n=40)
>>> report = fuzz.run(calls, devices=["cpu:0"])
>>> sorted(report.counts) == sorted(fuzz.OUTCOMES)
True

``python scripts/fuzz.py --calls 20000 --devices cpu:0,opencl:0`` runs a large
sample (each chunk in a subprocess, so a crash or a hang is counted, not fatal), prints
the one-line table (:meth:`Report.table`) and exits non-zero on any bug: the CI gate.
"""

from __future__ import annotations

import inspect
import math
import random
import re
from dataclasses import dataclass, field

import numpy as np

import tapeflow as tf
from tapeflow.ops import composite
from tapeflow.runtime import registry
from tapeflow.errors import ResourceExhaustedError, TapeflowError

__all__ = ["Call", "Report", "OUTCOMES", "BUGS", "generate", "call_for", "run", "run_call",
           "targets", "is_named", "COMPLEX_TO_REAL", "TAKES_TEXT", "takes_text"]

OUTCOMES = ("ok", "error", "unnamed", "foreign", "memory", "coercion", "variable")
BUGS = ("unnamed", "foreign", "memory", "coercion", "variable")

#: parameters that take tensors (others take attrs: axes, shapes, flags, names)
_TENSOR_PARAMS = {
    "x", "y", "a", "b", "input", "input_tensor", "tensor", "value", "values", "logits",
    "labels", "features", "params", "indices", "matrix", "rhs", "images", "filters",
    "filter", "bias", "condition", "t", "data", "segment_ids", "predictions", "weights",
    "targets", "z", "multiplier", "mean", "variance", "offset", "scale", "updates",
    "tensors", "inputs", "t_list", "value_or_tensor", "arr", "input_", "clip_value_min",
    "clip_value_max", "e", "c", "lengths", "pred", "u", "v", "diagonal", "k", "mask",
    "sp_ids", "logits_or_labels", "sparse_indices", "on_value", "off_value",
    "constant_values", "per_example_loss", "regularization_loss", "sample_weight", "pylist",
}
#: integer parameters where a value named twice is an error (TensorFlow's rule)
_AXIS_PARAMS = {"axis", "perm", "reduction_indices"}
#: parameters whose values are integers or lists of integers
_INT_PARAMS = {"axis", "axes", "shape", "depth", "num", "perm", "multiples", "dims",
               "batch_dims", "num_or_size_splits", "num_rows", "num_columns", "ksize",
               "strides", "dilations", "num_segments", "maxlen", "dim", "size", "begin",
               "paddings", "noise_shape", "reduction_indices", "batch_shape", "seed"}
#: good values for required parameters that are never mutated
_GOOD = {"padding": "SAME", "dtype": "float32", "data_format": "NHWC", "mode": "CONSTANT",
         "equation": "ij->i", "output_type": "int64", "out_type": "int32",
         # the higher-order functions (tf.scan, tf.foldl, tf.foldr): fn(a, x), a tensor
         "fn": tf.add, "elems": np.ones((2, 3), np.float32)}
#: never touched: names, formats, callbacks
_SKIP_PARAMS = {"name", "data_format", "padding", "equation", "fn", "f", "func", "elems",
                "body", "cond", "true_fn", "false_fn", "mode", "device", "dtype_hint",
                "preferred_dtype", "out_type", "output_type", "dtype"}
#: public names that are not ops (control flow, devices, gradients, I/O)
_SKIP_FUNCTIONS = {"device", "function", "defun", "py_function", "print", "while_loop",
                   "cond", "map_fn", "custom_gradient", "gradients_function",
                   "value_and_gradients_function", "implicit_gradients",
                   "implicit_value_and_gradients", "set_seed", "get_seed", "no_op",
                   "executing_eagerly", "list_devices", "num_gpus", "as_dtype",
                   "set_default_device", "get_default_device", "enable_eager_execution",
                   "identity_n", "convert_to_tensor", "Variable",
                   "set_random_seed"}


#: functions left out by their full name
_SKIP_QUALIFIED = set()

#: public functions of the runtime that take user values like an op does
_RUNTIME_FUNCTIONS = {"constant"}


class _Poison:
    """A value no op may accept silently in a tensor argument."""


POISON = (_Poison, str, bytes, dict, type(None), set)


#: NumPy broadcast views: zero strides, a few bytes in memory, TiBs once copied (more
#: than any machine holds: the issue's np.broadcast_to(x, (100000, 100000)), 37 GiB,
#: fits a large host, where it stays a view and ops run on all of it)
BROADCAST_VIEWS = (((1 << 19, 1 << 20), np.float32), ((1 << 20, 1 << 20), np.float64),
                   ((3, 1 << 40), np.int8))


def _broadcast_view(shape, dtype):
    return np.broadcast_to(np.ones((), dtype), shape)


def _bad_tensor_values(rng):
    return [
        "a string", b"bytes", None, 1 + 2j, np.array([1 + 1j, 2]), {"a": 1}, object(),
        [[1.0, 2.0], [3.0]], np.array(["x", "y"]), np.array([object()]), {1, 2},
        float("nan"), float("inf"), 2 ** 70, -(2 ** 70), True, [], [[]],
        np.zeros((0, 3), np.float32), np.ones((2, 3, 4, 5), np.float32),
        np.ones((7,), np.float64), np.arange(6, dtype=np.int8).reshape(2, 3),
        np.array(3, np.uint8), rng.standard_normal((3, 2)).astype(np.float32),
        # broadcast views, ragged lists, None inside lists, complex scalars
        *(_broadcast_view(*v) for v in BROADCAST_VIEWS),
        np.broadcast_to(np.float32(2.0), (3, 4)),
        [1, [2, 3]], [[1, 2], [3, 4, 5]], [1.0, None], [[1.0, 2.0], [None, 3.0]], [None],
        2 - 3j, np.complex64(1j), [1.0, 2j],
    ]


def _bad_int_values(rng):
    return [
        "a", None, 1.5, float("nan"), 1 + 1j, [None], [0, 0], [1, -1], [1.5], [[0]], -1,
        -100, 100, 2 ** 40, [2 ** 40], [2 ** 20, 2 ** 20], [-1, 2], [2, -3], (), [],
        np.array([0, 0]), np.array(0.5), True, [True], object(), {"x": 1},
        # rank > 64 (NumPy's limit), None inside lists, ragged lists
        [1] * 65, [2] * 65, (1,) * 100, [1, None], [None, 2, 3], [[1, 2], [3]], [[1, 1], [2]],
    ]


@dataclass
class Call:
    """One call: ``target`` (a public function's qualified name or ``op:<name>``),
    positional/keyword arguments as *recipes* (resolved on a device by
    :func:`_materialise`), and which argument is bad (``None`` for a control)."""

    target: str
    args: list
    kwargs: dict
    bad: str | None = None
    poison: bool = False
    bad_value: str = ""
    #: the bad value is complex with a non-zero imaginary part (see ``coercion``)
    complex_in: bool = False
    #: the bad value is text (str, bytes, a NumPy text array): a tensor's value for the
    #: targets that take strings (:func:`takes_text`), poison for the others
    text_in: bool = False

    def describe(self):
        a = ", ".join([_fmt(x) for x in self.args] +
                      [f"{k}={_fmt(v)}" for k, v in self.kwargs.items()])
        return f"{self.target}({a})"


def _fmt(v):
    if isinstance(v, tuple) and v and v[0] in ("T", "V"):
        return f"{'tensor' if v[0] == 'T' else 'Variable'}({v[1].dtype}{list(v[1].shape)})"
    if isinstance(v, np.ndarray) and v.ndim and 0 in v.strides:
        return f"np.broadcast_to({v.dtype}, {v.shape})"
    try:
        r = repr(v)
    except Exception:           # noqa: BLE001 - an object whose repr raises
        r = f"<{type(v).__name__}>"
    return r if len(r) < 40 else r[:37] + "..."


# --- comparisons of the public value types ---------------------------------------------

class RaisingEq:
    """An object whose ``==``, ``!=`` and ``hash`` raise (the value types must not)."""

    def __eq__(self, other):
        raise RuntimeError("RaisingEq.__eq__")

    __ne__ = __eq__

    def __hash__(self):
        raise RuntimeError("RaisingEq.__hash__")

    def __repr__(self):
        return "RaisingEq()"


#: the value types compared with arbitrary objects (targets ``cmp:<type>``)
VALUE_TYPES = ("DType", "Device", "TensorShape", "OpDef")
_PUNCT = ",./;'[]\\-=<>?:\"{}|_+!@#$%^&*()`~ 0123456789fiucbSU²"


def _compare_others(rng):
    """Objects to compare the value types with (a recipe ``("T", array)`` is a tensor)."""
    punct = "".join(rng.choice(list(_PUNCT), size=int(rng.integers(1, 12))))
    return [
        punct, "float32", "f4", "<f4", "a,b", "f8,", "i4,(2)f", "(2)i", ",", "", "cpu:0",
        "CPU", "/device:CPU:0", "cpu:²", "opencl:0", "gpu:99", "Add", "tapeflow::Add",
        np.dtype("float32"), np.dtype("f4,i4"), np.dtype("U3"), np.dtype(object),
        np.float32, float, object, np.float32(1.5), np.int8(3), np.complex64(1j), None, 0,
        1.5, 1j, [1, 2], [None], (2, 3), ("T", np.ones((2, 3), np.float32)),
        np.zeros(3, np.float32), RaisingEq(), [RaisingEq(), 2], {"a": 1}, object(), b"f4",
    ]


def _value_of(kind, index, device):
    if kind == "DType":
        return tf.dtypes.ALL_DTYPES[index % len(tf.dtypes.ALL_DTYPES)] if hasattr(
            tf, "dtypes") and hasattr(tf.dtypes, "ALL_DTYPES") else tf.float32
    if kind == "Device":
        return tf.runtime.devices.get_device(device)
    if kind == "TensorShape":
        return tf.TensorShape([(), (2, 3), (1, 1, 784)][index % 3])
    names = sorted(registry.OPS)
    return registry.OPS[names[index % len(names)]]


def _same_kind(a, b):
    if isinstance(a, tf.DType):
        return isinstance(b, (tf.DType, np.dtype))
    if isinstance(a, tuple):
        return isinstance(b, tuple) and not any(isinstance(d, RaisingEq) for d in b)
    return type(a) is type(b)


def _compare(value, other):
    """``None`` when ``value`` compares with ``other`` as a value type must, else what
    went wrong."""
    eq = value.__eq__(other)
    ne = value.__ne__(other)
    if not (eq is NotImplemented or type(eq) is bool):
        return f"__eq__ returned {type(eq).__name__}"
    if not (ne is NotImplemented or type(ne) is bool):
        return f"__ne__ returned {type(ne).__name__}"
    if eq is not NotImplemented and ne is not NotImplemented and ne is eq:
        return f"__eq__ and __ne__ both returned {eq}"
    h = hash(value)
    if isinstance(other, (RaisingEq, np.ndarray, np.generic, tf.Tensor)) or (
            isinstance(other, list) and any(isinstance(o, RaisingEq) for o in other)):
        return None             # their own __eq__ answers from the reflected side
    e, n = value == other, value != other
    if bool(e) is bool(n):
        return f"== and != both gave {bool(e)}"
    if e and _same_kind(value, other) and h != hash(other):
        return "equal values with different hashes"
    return None


def targets():
    """``[(qualified name, callable, kind)]``: public op functions, registry ops and the
    value types' comparisons (``cmp:DType`` ...)."""
    out, seen = [], set()
    for prefix, ns in (("tf", tf), ("tf.nn", tf.nn), ("tf.linalg", tf.linalg),
                       ("tf.random", tf.random), ("tf.math", getattr(tf, "math", None)),
                       ("tf.strings", getattr(tf, "strings", None)),
                       ("tf.ragged", getattr(tf, "ragged", None)),
                       ("tf.sparse", getattr(tf, "sparse", None)),
                       ("tf.image", getattr(tf, "image", None))):
        if ns is None:
            continue
        for name in sorted(dir(ns)):
            fn = getattr(ns, name, None)
            if (name.startswith("_") or name in _SKIP_FUNCTIONS or not inspect.isfunction(fn)
                    or f"{prefix}.{name}" in _SKIP_QUALIFIED
                    or not (fn.__module__ or "").startswith("tapeflow.")
                    or (fn.__module__.startswith(("tapeflow.runtime.", "tapeflow.autodiff.",
                                                  "tapeflow.tracing.", "tapeflow.ops.library"))
                        and name not in _RUNTIME_FUNCTIONS)
                    or id(fn) in seen):
                continue
            seen.add(id(fn))
            out.append((f"{prefix}.{name}", fn, "function"))
    for name, fn in sorted(_loaders().items()):     # the loaders of files (they only read)
        out.append((name, fn, "function"))
    for name in sorted(registry.OPS):
        op = registry.OPS[name]
        if op.name == "Copy":
            continue
        out.append((f"op:{name}", op, "op"))
    for name in VALUE_TYPES:
        out.append((f"cmp:{name}", None, "compare"))
    return out


def _signature(fn):
    try:
        return [p for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        return []


def _good(rng, kind="float"):
    shape = [(2, 3), (3, 3), (2, 2, 3), (3,), ()][rng.integers(5)]
    if kind == "int":
        return ("T", rng.integers(0, 3, size=shape).astype(np.int32))
    return ("T", rng.standard_normal(shape).astype(np.float32))


def generate(seed=0, n=1000, variables=0.15, controls=0.1):
    """``n`` reproducible calls over every target (round robin, then random): each
    passes good values except one bad one (a ``controls`` share pass only good ones),
    a ``variables`` share of tensor inputs as Variables."""
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    tgts = targets()
    pools = (_bad_tensor_values(rng), _bad_int_values(rng))
    return [_make(tgts[i % len(tgts)] if i < len(tgts) else prng.choice(tgts), rng, prng,
                  pools, variables, controls) for i in range(n)]


#: tensor parameters without a default that the API documents as accepting None (as
#: TensorFlow's): None there is no bad value
NONE_ACCEPTED = {("tf.nn.batch_normalization", "offset"), ("tf.nn.batch_normalization", "scale")}


def call_for(index, seed, variables=0.15, controls=0.1, tgts=None):
    """The call a ``seed`` makes for target number ``index`` of ``tgts`` (default
    :func:`targets`): what a property-based test draws."""
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    tgts = tgts or targets()
    return _make(tgts[index % len(tgts)], rng, prng,
                 (_bad_tensor_values(rng), _bad_int_values(rng)), variables, controls)


def _make(tgt, rng, prng, pools, variables, controls):
    qual, fn, kind = tgt
    bad_t, bad_i = pools
    args, kwargs, slots = [], {}, []
    if kind == "compare":
        other = prng.choice(_compare_others(rng))
        return Call(qual, [other], {"index": int(rng.integers(1000))}, bad="other",
                    bad_value=_fmt(other))
    if kind == "op" and fn.inputs and not fn.variadic and prng.random() < 0.04:
        # too few inputs (an op called as a plugin or a bad tracer would)
        k = int(rng.integers(len(fn.inputs)))
        call = Call(qual, [_good(rng) for _ in range(k)], {}, bad="inputs", poison=True,
                    bad_value=f"{k} of {len(fn.inputs)} inputs")
        for name, default in fn.attrs.items():
            if default is registry.REQUIRED:
                call.kwargs[name] = 1 if name in _INT_PARAMS else 1.0
        return call
    if kind == "op":
        for name in fn.inputs:
            v = _good(rng)
            if prng.random() < variables:
                v = ("V", v[1])
            args.append(v)
            slots.append(("arg", len(args) - 1, name, True))
        for name, default in fn.attrs.items():
            if default is registry.REQUIRED or default is None:
                kwargs[name] = 1 if name in _INT_PARAMS or name in ("depth", "num") else \
                    (2, 3) if name == "shape" else default
                if kwargs[name] is registry.REQUIRED or kwargs[name] is None:
                    kwargs.pop(name)
                    continue
            if name not in _SKIP_PARAMS:
                slots.append(("kw", name, name, False))
    else:
        for p in _signature(fn):
            if p.name in _SKIP_PARAMS:
                if p.default is p.empty and p.name in _GOOD:
                    if p.kind == p.KEYWORD_ONLY:
                        kwargs[p.name] = _GOOD[p.name]
                    else:
                        args.append(_GOOD[p.name])
                continue
            tensorish = p.name in _TENSOR_PARAMS
            if tensorish and (qual, p.name) in NONE_ACCEPTED:
                tensorish = "optional"          # documented to take None
            if p.default is p.empty:
                if tensorish:
                    v = _good(rng)
                    if prng.random() < variables:
                        v = ("V", v[1])
                elif p.name in _INT_PARAMS:
                    v = 1 if p.name not in ("shape", "perm", "multiples") else [2, 3]
                else:
                    v = 1.0
                if p.kind == p.KEYWORD_ONLY:
                    kwargs[p.name] = v
                    slots.append(("kw", p.name, p.name, tensorish))
                else:
                    args.append(v)
                    slots.append(("arg", len(args) - 1, p.name, tensorish))
            elif tensorish or p.name in _INT_PARAMS:
                # None is the default: passing it is no bad value
                slots.append(("kw", p.name, p.name,
                              "optional" if tensorish and p.default is None else tensorish))
    call = Call(qual, args, kwargs)
    if slots and prng.random() >= controls:
        where, key, pname, tensorish = prng.choice(slots)
        value = prng.choice(bad_t if tensorish else bad_i)
        if tensorish == "optional" and value is None:
            value = "a string"
        if where == "arg":
            call.args[key] = value
        else:
            call.kwargs[key] = value
        call.bad = pname
        call.poison = _is_poison(value, pname, tensorish, kind)
        call.bad_value = _fmt(value)
        call.complex_in = bool(tensorish) and _has_imaginary(value)
        call.text_in = bool(tensorish) and (isinstance(value, (str, bytes)) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "US"))
    return call


def _has_imaginary(value):
    if isinstance(value, (complex, np.complexfloating)):
        return value.imag != 0
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "c" and bool(np.any(value.imag != 0))
    if isinstance(value, (list, tuple)):
        return any(_has_imaginary(v) for v in value)
    return False


#: targets (lower-cased, namespace dropped) that map complex numbers to reals or to
#: non-float results: a float result from a complex input is no coercion there
COMPLEX_TO_REAL = re.compile(
    r"abs|real|imag|angle|norm|cast|bitcast|l2_loss|equal|less|greater|is_|isnan|isinf|"
    r"isfinite|shape|size|rank|count|arg|where|nonzero|top_k|sort|unique|histogram|"
    r"bincount|sign|complex|stft|fft|spectral|loss|entropy|moments")


#: targets (lower-cased, namespace and underscores dropped) that take string tensors, as in
#: TensorFlow (docs/dtypes.md, "Strings"): text there is a value, not a coercion
TAKES_TEXT = frozenset({
    "identity", "zeroslike", "rank", "shape", "size", "reshape", "squeeze", "expanddims",
    "transpose", "tile", "concat", "concatv2", "stack", "pack", "unstack", "unpack",
    "gather", "gatherv2", "gathernd", "pad", "padv2", "mirrorpad", "slice", "stridedslice",
    "split", "splitv", "broadcastto", "stopgradient", "equal", "notequal", "selectv2",
    "randomshuffle", "add", "constant", "fill", "reverse", "booleanmask", "unique",
    "uniquewithcounts", "tensorscatterndupdate", "tensorscatterupdate", "reversesequence",
    "roll", "meshgrid", "mapfn", "scan", "foldl", "foldr", "typespecfromvalue",
    # the string ops whose names do not start with "string" (issue 47)
    "substr", "reducejoin", "staticregexreplace", "staticregexfullmatch", "asstring",
    "unicodedecodewithoffsets", "unicodetranscode", "decoderaw"})


def takes_text(target):
    """Whether ``target`` (``tf.identity``, ``op:Rank``) takes string tensors: the ops of
    :data:`TAKES_TEXT`, ``tf.strings.*``, the ``String*`` ops, and ``tf.ragged.*`` and
    ``tf.sparse.*`` (composite tensors hold values of any dtype, strings too)."""
    name = target.rpartition(".")[2].rpartition(":")[2].lower().replace("_", "")
    return (target.startswith(("tf.strings.", "tf.ragged.", "tf.sparse."))
            or name.startswith("string")
            or name in TAKES_TEXT)


def is_named(e, target):
    """Whether tapeflow error ``e`` names the op or function ``target`` was called as (the
    ``unnamed`` rule of the module docstring)."""
    if getattr(e, "op", None) is not None:
        return True
    name = target.rpartition(".")[2] if not target.startswith(("op:", "cmp:")) else \
        target.partition(":")[2]
    names = {name, name.rpartition("::")[2]}
    msg = str(e)
    return any(re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", msg)
               for n in names if n)


def _is_poison(value, pname, tensorish, kind):
    """A bad value that must never be accepted silently where it was put: a string,
    bytes, ``None`` or an object in a tensor argument; a float or a
    non-integer in an integer argument; an axis named twice; a string, complex number
    or object in any argument. (An op's untyped attrs are not judged beyond that until
    attrs are typed.)"""
    if isinstance(value, np.ndarray):
        if tensorish:
            return value.dtype.kind in "USO"
        return value.dtype.kind in "fcUSO" and pname in _INT_PARAMS
    if tensorish:
        return isinstance(value, POISON) or type(value) is object
    if isinstance(value, (str, bytes, complex, dict, set)) or type(value) is object:
        return kind == "function" or pname in _INT_PARAMS
    if pname not in _INT_PARAMS:
        return False
    if isinstance(value, (list, tuple)):
        flat = [v for v in value if not isinstance(v, (list, tuple))]
        return (any(type(v) in (float, str, complex) or v is None for v in flat)
                or (pname in _AXIS_PARAMS and len(flat) == len(value)
                    and len(set(flat)) != len(flat)))
    return type(value) is float


# --- running --------------------------------------------------------------------------

def _materialise(v, device, variables):
    if isinstance(v, tuple) and len(v) == 2 and v[0] in ("T", "V"):
        t = tf.constant(v[1], device=device)
        if v[0] == "V":
            var = tf.Variable(t)
            variables.append((var, var.numpy().copy(), var.dtype))
            return var
        return t
    return v


def _runs_on(call, device):
    """Whether ``call`` can run on ``device`` at all: registry ops need a kernel for the
    device type or a composite (public functions are assumed to run everywhere)."""
    if call.target.startswith("cmp:"):
        return call.target != "cmp:Device"      # (each device is another value)
    if not call.target.startswith("op:"):
        return True
    op = registry.OPS.get(call.target[3:])
    dtype = tf.runtime.devices.get_device(device).type
    return op is not None and (dtype in op.kernels or op.composite is not None)


def _loaders():
    """The functions that read saved files, fuzzed with wrong kinds of path (names in the
    fuzz report as TensorFlow spells them)."""
    return {"tf.saved_model.load": tf.saved_model.load,
            "tf.keras.models.load_model": tf.keras.models.load_model,
            "tf.train.load_checkpoint": tf.train.load_checkpoint,
            "tf.train.list_variables": tf.train.list_variables}


def _resolve(call):
    if call.target.startswith("op:"):
        return registry.OPS[call.target[3:]]
    if call.target in _loaders():
        return _loaders()[call.target]
    ns_name, _, name = call.target.rpartition(".")
    ns = {"tf": tf, "tf.nn": tf.nn, "tf.linalg": tf.linalg, "tf.random": tf.random,
          "tf.math": getattr(tf, "math", None),
          "tf.strings": getattr(tf, "strings", None),
          "tf.ragged": getattr(tf, "ragged", None),
          "tf.sparse": getattr(tf, "sparse", None),
          "tf.image": getattr(tf, "image", None)}[ns_name]
    return getattr(ns, name)


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    value: object = None


def run_call(call, device="cpu:0", seed=1234):
    """Run ``call`` on ``device``: an :class:`Outcome` (the value as host arrays)."""
    variables = []
    tf.random.set_seed(seed)
    with tf.device(device):
        args = [_materialise(a, device, variables) for a in call.args]
        kwargs = {k: _materialise(v, device, variables) for k, v in call.kwargs.items()}
        try:
            if call.target.startswith("cmp:"):
                value = _value_of(call.target[4:], kwargs["index"], device)
                wrong = _compare(value, args[0])
                return (Outcome("ok") if wrong is None else
                        Outcome("foreign", f"{wrong}: {_fmt(value)} vs {call.bad_value}"))
            result = _resolve(call)(*args, **kwargs)
            out = Outcome("ok", value=_host(result))
        except TapeflowError as e:
            kind = "error" if is_named(e, call.target) else "unnamed"
            out = Outcome(kind, f"{type(e).__name__}: {_first(e)}")
        except MemoryError as e:
            out = Outcome("memory", f"MemoryError: {_first(e)}")
        except RecursionError as e:
            out = Outcome("foreign", f"RecursionError: {_first(e)}")
        except Exception as e:                          # noqa: BLE001 - the point
            out = Outcome("foreign", f"{type(e).__name__}: {_first(e)}")
    for var, before, dtype in variables:
        if var.dtype != dtype or not np.array_equal(var.numpy(), before, equal_nan=True):
            return Outcome("variable", f"Variable {var.name} changed")
    if out.kind == "ok" and call.poison and not (call.text_in and takes_text(call.target)):
        return Outcome("coercion", f"returned with {call.bad}={call.bad_value}", out.value)
    if out.kind == "ok" and call.complex_in and _all_real_floats(out.value) and not (
            COMPLEX_TO_REAL.search(call.target.rpartition(".")[2].rpartition(":")[2].lower())):
        return Outcome("coercion", f"a real result from {call.bad}={call.bad_value}: the "
                       "imaginary part was dropped", out.value)
    return out


def _all_real_floats(value):
    """Whether every array of a result is real floating-point (none complex, and at least
    one float)."""
    arrays = [v for v in (value if isinstance(value, list) else [value])
              if isinstance(v, np.ndarray)]
    return bool(arrays) and all(a.dtype.kind == "f" or a.dtype.name == "bfloat16"
                                for a in arrays)


def _first(e):
    s = str(e).splitlines()[0] if str(e) else ""
    return s[:160]


def _host(result):
    if isinstance(result, (tuple, list)):
        return [_host(r) for r in result]
    if isinstance(result, composite.CompositeTensor):     # (compared by their components)
        spec = composite.type_spec_from_value(result)
        return [_host(c) for c in spec.to_components(result)]
    if hasattr(result, "numpy"):
        return np.asarray(result.numpy())
    return result


#: targets whose results are unique only in part (singular/eigen vectors: up to sign, and
#: any basis of a repeated value's space; QR of a rank-deficient matrix): the devices are
#: compared on that part (the values; Q @ R)
_UNIQUE_PART = {"op:Svd": lambda v: v[1], "tf.linalg.svd": lambda v: v[0],
                "op:SelfAdjointEigV2": lambda v: v[0], "tf.linalg.eigh": lambda v: v[0],
                "op:Qr": lambda v: v[0] @ v[1], "tf.linalg.qr": lambda v: v[0] @ v[1]}


def _same(a, b):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        # floats and complex numbers within a tolerance: devices' math libraries differ
        # by a few ulp (cuFFT's RFFT, CUDA's complex tanh/asin/acosh vs NumPy's)
        if a.dtype.kind in "fc":
            return bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
        return bool(np.array_equal(a, b))
    try:
        return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
    except Exception:      # noqa: BLE001
        return False


@dataclass
class Report:
    calls: int = 0
    counts: dict = field(default_factory=lambda: {k: 0 for k in OUTCOMES})
    disagreements: int = 0
    crashes: int = 0
    hangs: int = 0
    findings: dict = field(default_factory=dict)     # (kind, target, detail) -> [n, example]

    def add(self, kind, target, detail, example):
        key = (kind, target, detail[:120])
        entry = self.findings.setdefault(key, [0, example])
        entry[0] += 1

    def bugs(self):
        return sum(self.counts[k] for k in BUGS) + self.disagreements + self.crashes + self.hangs

    def merge(self, other):
        self.calls += other.calls
        for k in OUTCOMES:
            self.counts[k] += other.counts[k]
        self.disagreements += other.disagreements
        self.crashes += other.crashes
        self.hangs += other.hangs
        for key, (n, ex) in other.findings.items():
            e = self.findings.setdefault(tuple(key), [0, ex])
            e[0] += n

    def summary(self):
        c = self.counts
        return (f"calls {self.calls}; crashes {self.crashes}; hangs {self.hangs}; "
                f"non-tapeflow exceptions {c['foreign']}; plain MemoryErrors {c['memory']}; "
                f"unnamed errors {c['unnamed']}; "
                f"silent coercions {c['coercion']}; Variables changed {c['variable']}; "
                f"device disagreements {self.disagreements}; tapeflow errors {c['error']}; "
                f"returned {c['ok']}")

    #: the table's columns: (header, how to read it)
    COLUMNS = (("calls", lambda r: r.calls), ("crashes", lambda r: r.crashes + r.hangs),
               ("plain exceptions", lambda r: r.counts["foreign"]),
               ("MemoryError", lambda r: r.counts["memory"]),
               ("unnamed errors", lambda r: r.counts["unnamed"]),
               ("silent coercions", lambda r: r.counts["coercion"]),
               ("Variables changed", lambda r: r.counts["variable"]),
               ("device disagreements", lambda r: r.disagreements))

    def table(self):
        """The CI table: a header line and one row (crashes include hangs)."""
        head = "| " + " | ".join(h for h, _ in self.COLUMNS) + " |"
        row = "| " + " | ".join(str(f(self)).rjust(len(h)) for h, f in self.COLUMNS) + " |"
        return head + "\n" + row

    def top(self, k=60):
        rows = sorted(self.findings.items(), key=lambda kv: -kv[1][0])
        return [(n, kind, target, detail, ex) for (kind, target, detail), (n, ex) in rows[:k]]

    def to_json(self):
        return {"calls": self.calls, "counts": self.counts, "disagreements": self.disagreements,
                "crashes": self.crashes, "hangs": self.hangs,
                "findings": [list(k) + v for k, v in self.findings.items()]}


def run(calls, devices=("cpu:0",)):
    """Run ``calls`` on ``devices[0]`` and compare with the others: a :class:`Report`."""
    rep = Report()
    for call in calls:
        rep.calls += 1
        ref = run_call(call, devices[0])
        rep.counts[ref.kind] += 1
        if ref.kind in BUGS:
            rep.add(ref.kind, call.target, ref.detail, call.describe())
        for dev in devices[1:]:
            if not _runs_on(call, dev):
                continue        # an op without a kernel or composite there: nothing to compare
            other = run_call(call, dev)
            if other.kind in ("error", "unnamed") and (
                    other.detail.startswith("NotFoundError: No kernel for op")
                    or (other.detail.startswith("UnimplementedError: ")
                        and " is not supported on " in other.detail)
                    or "strings live on the host" in other.detail):
                continue        # a public function over an op this device has no kernel
                                # for, or a dtype the device cannot hold (complex on
                                # OpenCL, strings off the host): declared gaps
            if other.kind in BUGS and other.kind != ref.kind:
                rep.add(f"{other.kind}@{dev}", call.target, other.detail, call.describe())
            part = _UNIQUE_PART.get(call.target)
            if part is not None and ref.kind == other.kind == "ok" and isinstance(ref.value, list):
                ref.value, other.value = part(ref.value), part(other.value)
            agree = (ref.kind == other.kind == "ok" and _same(ref.value, other.value)) or (
                ref.kind != "ok" and other.kind != "ok" and ref.detail.split(":")[0]
                == other.detail.split(":")[0]) or (ref.kind in BUGS and other.kind in BUGS)
            if not agree:
                rep.disagreements += 1
                rep.add(f"disagree@{dev}", call.target,
                        f"{devices[0]}: {ref.kind} {ref.detail[:60]} | {dev}: {other.kind} "
                        f"{other.detail[:60]}", call.describe())
    return rep
