"""A bad-input fuzzer for every public op: the instrument behind DESIGN.md section 4
("bad input gets a clear error, immediately").

It calls the public functions (``tf.*``, ``tf.nn.*``, ``tf.linalg.*``,
``tf.random.*``, ``tf.math.*``) and every registered op (:data:`tapeflow.runtime.registry.OPS`,
as a plugin or the tracer calls them) with one argument replaced by a bad value --
a string, ``None``, a complex number, an object, a ragged list, a huge or negative
dimension, a float or a duplicate where an axis goes -- and with Variables as
inputs, and classifies what happens:

``ok``
    returned (fine for a control, and for bad values that are merely unusual)
``error``
    raised a :class:`tapeflow.errors.TapeflowError` (the goal)
``foreign``
    raised any other exception (a NumPy ``TypeError``, an ``AttributeError``): a bug
``memory``
    a plain ``MemoryError`` instead of ``ResourceExhaustedError``: a bug
``coercion``
    returned although an argument held a value no op may accept silently (a string,
    bytes or ``None`` in a tensor argument, a float, complex number or duplicate where
    an axis goes): a bug (complex numbers are tensors' values since complex64/128)
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
sample (each chunk in a subprocess, so a crash or a hang is counted, not fatal).
"""

from __future__ import annotations

import inspect
import math
import random
from dataclasses import dataclass, field

import numpy as np

import tapeflow as tf
from tapeflow.runtime import registry
from tapeflow.errors import ResourceExhaustedError, TapeflowError

__all__ = ["Call", "Report", "OUTCOMES", "BUGS", "generate", "call_for", "run", "run_call",
           "targets"]

OUTCOMES = ("ok", "error", "foreign", "memory", "coercion", "variable")
BUGS = ("foreign", "memory", "coercion", "variable")

#: parameters that take tensors (others take attrs: axes, shapes, flags, names)
_TENSOR_PARAMS = {
    "x", "y", "a", "b", "input", "input_tensor", "tensor", "value", "values", "logits",
    "labels", "features", "params", "indices", "matrix", "rhs", "images", "filters",
    "filter", "bias", "condition", "t", "data", "segment_ids", "predictions", "weights",
    "targets", "z", "multiplier", "mean", "variance", "offset", "scale", "updates",
    "tensors", "inputs", "t_list", "value_or_tensor", "arr", "input_", "clip_value_min",
    "clip_value_max", "e", "c", "lengths", "pred", "u", "v", "diagonal", "k", "mask",
    "sp_ids", "logits_or_labels", "sparse_indices", "on_value", "off_value",
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
         "equation": "ij->i", "output_type": "int64", "out_type": "int32"}
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
                   "identity_n", "convert_to_tensor", "constant", "Variable",
                   "set_random_seed"}


class _Poison:
    """A value no op may accept silently in a tensor argument."""


POISON = (_Poison, str, bytes, dict, type(None), set)


def _bad_tensor_values(rng):
    return [
        "a string", b"bytes", None, 1 + 2j, np.array([1 + 1j, 2]), {"a": 1}, object(),
        [[1.0, 2.0], [3.0]], np.array(["x", "y"]), np.array([object()]), {1, 2},
        float("nan"), float("inf"), 2 ** 70, -(2 ** 70), True, [], [[]],
        np.zeros((0, 3), np.float32), np.ones((2, 3, 4, 5), np.float32),
        np.ones((7,), np.float64), np.arange(6, dtype=np.int8).reshape(2, 3),
        np.array(3, np.uint8), rng.standard_normal((3, 2)).astype(np.float32),
    ]


def _bad_int_values(rng):
    return [
        "a", None, 1.5, float("nan"), 1 + 1j, [None], [0, 0], [1, -1], [1.5], [[0]], -1,
        -100, 100, 2 ** 40, [2 ** 40], [2 ** 20, 2 ** 20], [-1, 2], [2, -3], (), [],
        np.array([0, 0]), np.array(0.5), True, [True], object(), {"x": 1},
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

    def describe(self):
        a = ", ".join([_fmt(x) for x in self.args] +
                      [f"{k}={_fmt(v)}" for k, v in self.kwargs.items()])
        return f"{self.target}({a})"


def _fmt(v):
    if isinstance(v, tuple) and v and v[0] in ("T", "V"):
        return f"{'tensor' if v[0] == 'T' else 'Variable'}({v[1].dtype}{list(v[1].shape)})"
    r = repr(v)
    return r if len(r) < 40 else r[:37] + "..."


def targets():
    """``[(qualified name, callable, kind)]``: public op functions and registry ops."""
    out, seen = [], set()
    for prefix, ns in (("tf", tf), ("tf.nn", tf.nn), ("tf.linalg", tf.linalg),
                       ("tf.random", tf.random), ("tf.math", getattr(tf, "math", None))):
        if ns is None:
            continue
        for name in sorted(dir(ns)):
            fn = getattr(ns, name, None)
            if (name.startswith("_") or name in _SKIP_FUNCTIONS or not inspect.isfunction(fn)
                    or not (fn.__module__ or "").startswith("tapeflow.")
                    or fn.__module__.startswith(("tapeflow.runtime.", "tapeflow.autodiff.",
                                                 "tapeflow.tracing.", "tapeflow.ops._library"))
                    or id(fn) in seen):
                continue
            seen.add(id(fn))
            out.append((f"{prefix}.{name}", fn, "function"))
    for name in sorted(registry.OPS):
        op = registry.OPS[name]
        if op.name == "Copy":
            continue
        out.append((f"op:{name}", op, "op"))
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
    return call


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
    if not call.target.startswith("op:"):
        return True
    op = registry.OPS.get(call.target[3:])
    dtype = tf.runtime.devices.get_device(device).type
    return op is not None and (dtype in op.kernels or op.composite is not None)


def _resolve(call):
    if call.target.startswith("op:"):
        return registry.OPS[call.target[3:]]
    ns_name, _, name = call.target.rpartition(".")
    ns = {"tf": tf, "tf.nn": tf.nn, "tf.linalg": tf.linalg, "tf.random": tf.random,
          "tf.math": getattr(tf, "math", None)}[ns_name]
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
            result = _resolve(call)(*args, **kwargs)
            out = Outcome("ok", value=_host(result))
        except ResourceExhaustedError as e:
            out = Outcome("error", f"ResourceExhaustedError: {_first(e)}")
        except TapeflowError as e:
            out = Outcome("error", f"{type(e).__name__}: {_first(e)}")
        except MemoryError as e:
            out = Outcome("memory", f"MemoryError: {_first(e)}")
        except RecursionError as e:
            out = Outcome("foreign", f"RecursionError: {_first(e)}")
        except Exception as e:                          # noqa: BLE001 - the point
            out = Outcome("foreign", f"{type(e).__name__}: {_first(e)}")
    for var, before, dtype in variables:
        if var.dtype != dtype or not np.array_equal(var.numpy(), before, equal_nan=True):
            return Outcome("variable", f"Variable {var.name} changed")
    if out.kind == "ok" and call.poison:
        return Outcome("coercion", f"returned with {call.bad}={call.bad_value}", out.value)
    return out


def _first(e):
    s = str(e).splitlines()[0] if str(e) else ""
    return s[:160]


def _host(result):
    if isinstance(result, (tuple, list)):
        return [_host(r) for r in result]
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
                f"silent coercions {c['coercion']}; Variables changed {c['variable']}; "
                f"device disagreements {self.disagreements}; tapeflow errors {c['error']}; "
                f"returned {c['ok']}")

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
            if other.kind == "error" and (
                    other.detail.startswith("NotFoundError: No kernel for op")
                    or (other.detail.startswith("UnimplementedError: ")
                        and " is not supported on " in other.detail)):
                continue        # a public function over an op this device has no kernel
                                # for, or a dtype the device cannot hold (complex on
                                # OpenCL): declared gaps, which the conformance suite reports
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
