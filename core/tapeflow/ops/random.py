"""Random ops (``tf.random.normal``, ``tf.random_uniform`` ...) and seeding.

Seeding follows TensorFlow: after ``tf.random.set_seed(s)`` a sequence of random
ops is reproducible; an op-level ``seed=`` is reproducible too (the n-th call with
the same seeds gives the same value in every run); with neither, values differ
from run to run.

The generator is counter-based, so every backend reproduces the same stream. The
core derives a 64-bit ``key`` from (global seed, op seed) and a ``counter`` that
advances by one per call with that key; kernels receive both as attrs. The
stream of a call is what ``numpy.random.Philox(key=key, counter=counter << 64)``
outputs: Philox4x64-10 (Random123) with key ``(key, 0)``, where 64-bit output
``raw[4*b + j]`` is word ``j`` of the block for counter ``(b + 1, counter, 0, 0)``;
read as little-endian 32-bit words ``w[2i] = raw[i] & 0xffffffff``,
``w[2i+1] = raw[i] >> 32``. (Note: Philox4x64, not cuRAND's Philox4_32_10.) Kernels turn
them into values with these formulas (a backend reproduces them exactly, up to
the rounding of its ``log``/``cos``/``ndtri``):

* uniform float32: ``(w[i] >> 8) * 2**-24``; float16: ``(w[i] >> 21) * 2**-11``;
  float64: ``(raw[i] >> 11) * 2**-53`` — all in ``[0, 1)``, then
  ``minval + u * (maxval - minval)``.
* uniform int32: ``minval + w[i] % (maxval - minval)``; int64: ``raw[i] % range``.
* normal (Box-Muller on pairs): float32/16 pair k from ``w[2k] >> 8, w[2k+1] >> 8``
  (b = 24 bits), float64 pair k from ``raw[2k] >> 11, raw[2k+1] >> 11`` (b = 53):
  ``u1 = (bits1 + 0.5) * 2**-b``, ``u2 = bits2 * 2**-b``, ``r = sqrt(-2 log u1)``,
  ``out[2k] = r cos(2 pi u2)``, ``out[2k+1] = r sin(2 pi u2)``; then
  ``mean + stddev * out``.
* truncated normal (|z| <= 2): inverse CDF, ``ndtri(Phi(-2) + (Phi(2) - Phi(-2)) * u)``
  with ``u = ((raw[i] >> 11) + 0.5) * 2**-53`` (the same distribution as
  resampling values beyond two standard deviations, without a data-dependent loop).
* shuffle: the permutation that stably sorts ``raw[0:n]``.

>>> import tapeflow as tf
>>> tf.random.set_seed(1)
>>> a = tf.random.normal([2, 2])
>>> tf.random.set_seed(1)
>>> bool((tf.random.normal([2, 2]).numpy() == a.numpy()).all())
True
>>> tf.random_uniform([5, 3]).shape
TensorShape([5, 3])
"""

from __future__ import annotations

import functools
import itertools
import os

import numpy as _np

from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from .library import batch_with_shape, defop
from ..errors import InvalidArgumentError, InvalidTypeError, TapeflowError
from ..runtime.dispatch import convert_to_tensor, execute
from . import math as _m

__all__ = ["normal", "uniform", "truncated_normal", "shuffle", "set_seed", "get_seed",
           "random_normal", "random_uniform", "set_random_seed", "random_shuffle"]

#: names that also live at the top level (``tf.random_normal`` ...)
TOP_LEVEL = ["random_normal", "random_uniform", "truncated_normal", "set_random_seed",
             "random_shuffle"]

_M64 = (1 << 64) - 1
#: TF's DEFAULT_GRAPH_SEED: the global seed used when only an op seed is given
DEFAULT_GLOBAL_SEED = 87654321


def _mix64(x):
    """splitmix64 finaliser: a well-spread 64-bit key from a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class _State:
    global_seed = None
    op_seeds = itertools.count()       # op seeds handed out under a global seed
    counters: dict = {}                # key -> calls so far
    nondet_key = _mix64(int.from_bytes(os.urandom(8), "little"))
    nondet_counter = itertools.count()

    def next_counter(self, key):
        """The next counter of ``key``'s stream (a random op replayed by tf.function)."""
        if key == self.nondet_key:
            return next(self.nondet_counter)
        c = self.counters.get(key, 0)
        self.counters[key] = c + 1
        return c


#: the random streams of this process (``STATE.next_counter(key)``: tf.function's replays)
STATE = _State()


def _reseed_after_fork():
    STATE.nondet_key = _mix64(int.from_bytes(os.urandom(8), "little"))
    STATE.nondet_counter = itertools.count()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_after_fork)


def set_seed(seed):
    """Set the global random seed (``tf.random.set_seed``; TF1: ``tf.set_random_seed``).

    Resets every op's stream: the random ops that follow draw the same values in
    every run. ``None`` makes them nondeterministic again.
    """
    if seed is not None:
        seed = _shapes.as_index(seed, "the global seed", "SetSeed")
    STATE.global_seed = seed
    STATE.op_seeds = itertools.count()
    STATE.counters = {}


set_random_seed = set_seed


def get_seed(op_seed):
    """The ``(global seed, op seed)`` pair an op with ``op_seed`` uses (TF semantics);
    ``(None, None)`` when neither is set."""
    g = STATE.global_seed
    if g is not None:
        if op_seed is None:
            op_seed = next(STATE.op_seeds)
        return g, int(op_seed)
    if op_seed is not None:
        return DEFAULT_GLOBAL_SEED, int(op_seed)
    return None, None


def _key_counter(seed):
    """(key, counter) attrs for one random op call."""
    g = STATE.global_seed
    if g is None and seed is None:
        return STATE.nondet_key, next(STATE.nondet_counter)
    if g is None:
        g = DEFAULT_GLOBAL_SEED
    elif seed is None:
        seed = next(STATE.op_seeds)
    key = _mix64(_mix64(int(g) & _M64) ^
                 (_shapes.as_index(seed, "seed", "RandomSeed") & _M64))
    counters = STATE.counters
    c = counters.get(key, 0)
    counters[key] = c + 1
    return key, c


def _on_device(fn):
    """Errors raised before dispatch name the device the op would have run on."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InvalidArgumentError as e:
            if e.device is None:
                d = getattr(args[0], "_device", None) if args else None
                e.with_context(e.op, _devs.current_device() or d or _devs.default_device())
            raise
    return wrapper


# --- ops ---------------------------------------------------------------------------

def _check_uniform_int(op, tensors, attrs, device):
    """RandomUniformInt's signature check (every backend): an int32/int64 dtype and
    integer bounds that fit it, ``minval < maxval``; then the allocation."""
    dt = _dt.as_dtype(attrs["dtype"])
    if dt not in (_dt.int32, _dt.int64):
        raise InvalidArgumentError(
            f"integer random_uniform supports int32 and int64, got {dt.name}")
    lo = _shapes.as_index(attrs["minval"], "minval of an integer random_uniform", op.name)
    hi = _shapes.as_index(attrs["maxval"], "maxval of an integer random_uniform", op.name)
    info = _np.iinfo(dt.np)
    for what, v in (("minval", lo), ("maxval", hi)):
        if not info.min <= v <= info.max:
            raise InvalidArgumentError(
                f"{what}={v} does not fit in {dt.name} [{info.min}, {info.max}]; use "
                "dtype=tf.int64 or a smaller bound")
    if lo >= hi:
        raise InvalidArgumentError(f"Need minval < maxval, got {lo} >= {hi}")
    _shapes.check_shape_attr(op, tensors, attrs, device)


_RANDOM_ATTRS = {"shape": (), "dtype": _dt.float32, "key": 0, "counter": 0}

_NORMAL = defop("RandomStandardNormal", inputs=(),
                attrs={**_RANDOM_ATTRS, "mean": 0.0, "stddev": 1.0},
                dtype_from="dtype", differentiable=False, check=_shapes.check_shape_attr,
                batch=batch_with_shape)
_UNIFORM = defop("RandomUniform", inputs=(),
                 attrs={**_RANDOM_ATTRS, "minval": 0.0, "maxval": 1.0},
                 dtype_from="dtype", differentiable=False, check=_shapes.check_shape_attr,
                 attr_types={"minval": "float", "maxval": "float"}, batch=batch_with_shape)
_UNIFORM_INT = defop("RandomUniformInt", inputs=(),
                     attrs={**_RANDOM_ATTRS, "dtype": _dt.int32, "minval": 0, "maxval": 1},
                     dtype_from="dtype", differentiable=False, check=_check_uniform_int,
                     attr_types={"minval": "int", "maxval": "int"}, batch=batch_with_shape)
_TRUNCATED = defop("TruncatedNormal", inputs=(),
                   attrs={**_RANDOM_ATTRS, "mean": 0.0, "stddev": 1.0},
                   dtype_from="dtype", differentiable=False, check=_shapes.check_shape_attr,
                   batch=batch_with_shape)          # (a draw per example)
_SHUFFLE = defop("RandomShuffle", inputs=("value",), attrs={"key": 0, "counter": 0},
                 dtype_rule="none", differentiable=False)


def _shape(shape, opname):
    return _shapes.as_shape(shape, opname)


def _is_scalar(v):
    """A Python/NumPy number (goes into attrs); tensors keep their gradient path."""
    t = type(v)
    return t is float or t is int or (isinstance(v, _np.generic) and v.dtype.kind in "fiu")


def _float_dtype(dtype, opname):
    dt = _dt.as_dtype(dtype)
    if not dt.is_floating:
        raise InvalidArgumentError(f"dtype must be a floating point type, got {dt.name}",
                                   op=opname)
    return dt


def _real_param(v, what, op, dt):
    """A distribution parameter (``mean``, ``stddev``, ``minval``, ``maxval``): a real
    number, or a real tensor (or what converts to one) to apply with ops. A complex
    value is refused (casting it to the real ``dt`` would drop its imaginary part), so
    is anything that is no number."""
    if _is_scalar(v):
        return v
    d = getattr(v, "dtype", None)
    kind = None if d is None else getattr(d, "np", d).kind
    if isinstance(v, complex) or kind == "c":
        got = _shapes.short_repr(v) if d is None else f"dtype {getattr(d, 'name', d)}"
        raise InvalidTypeError(
            f"{what} must be real, got the complex {got}: the samples are {dt.name} and "
            "its imaginary part would be dropped; pass a real value", op=op)
    if kind is not None and kind not in "biuf" and not getattr(d, "is_floating", False):
        raise InvalidTypeError(f"{what} must be a real number or tensor, got dtype "
                               f"{getattr(d, 'name', d)}", op=op)
    if d is None:
        try:
            v = convert_to_tensor(v, dtype=dt)
        except TapeflowError as e:
            raise InvalidTypeError(f"{what} must be a real number or tensor: "
                                   f"{getattr(e, 'message', e)}", op=op) from None
    return v


def _affine(op, shape, dt, seed, a_name, a, b_name, b, a0, b0):
    """Run ``op``; scalar parameters go in attrs, tensors are applied with ops."""
    fn = {"RandomStandardNormal": "normal", "TruncatedNormal": "truncated_normal"}.get(
        op.name, "uniform")
    a = _real_param(a, f"random.{fn}: {a_name}", op.name, dt)
    b = _real_param(b, f"random.{fn}: {b_name}", op.name, dt)
    key, counter = _key_counter(seed)
    if _is_scalar(a) and _is_scalar(b):
        return execute(op, (), {"shape": shape, "dtype": dt, "key": key, "counter": counter,
                                a_name: float(a), b_name: float(b)})
    z = execute(op, (), {"shape": shape, "dtype": dt, "key": key, "counter": counter,
                         a_name: a0, b_name: b0})
    a = convert_to_tensor(a, dtype=dt) if not hasattr(a, "dtype") else _m.cast(a, dt)
    b = convert_to_tensor(b, dtype=dt) if not hasattr(b, "dtype") else _m.cast(b, dt)
    if a_name == "mean":            # mean + stddev * z
        return _m.add(_m.multiply(z, b), a)
    return _m.add(_m.multiply(z, _m.subtract(b, a)), a)   # minval + (maxval - minval) * u


@_on_device
def normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """Samples from a normal distribution (``tf.random.normal``, TF1 ``tf.random_normal``).

    >>> import tapeflow as tf
    >>> x = tf.random.normal([1000], mean=5.0, stddev=0.5, seed=3)
    >>> 4.9 < float(x.numpy().mean()) < 5.1
    True
    """
    dt = _float_dtype(dtype, "RandomStandardNormal")
    return _affine(_NORMAL, _shape(shape, "RandomStandardNormal"), dt, seed,
                   "mean", mean, "stddev", stddev, 0.0, 1.0)


random_normal = normal


@_on_device
def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """Normal samples with values beyond two standard deviations redrawn
    (``tf.random.truncated_normal``): every value lies in ``mean +- 2 stddev``."""
    dt = _float_dtype(dtype, "TruncatedNormal")
    return _affine(_TRUNCATED, _shape(shape, "TruncatedNormal"), dt, seed,
                   "mean", mean, "stddev", stddev, 0.0, 1.0)


@_on_device
def uniform(shape, minval=0, maxval=None, dtype=_dt.float32, seed=None, name=None):
    """Uniform samples in ``[minval, maxval)`` (``tf.random.uniform``, TF1
    ``tf.random_uniform``). Floats default to ``[0, 1)``; integer dtypes need
    ``maxval``.

    >>> import tapeflow as tf
    >>> x = tf.random.uniform([100], minval=2, maxval=5, dtype=tf.int32, seed=1)
    >>> int(x.numpy().min()) >= 2 and int(x.numpy().max()) < 5
    True
    """
    dt = _dt.as_dtype(dtype)
    shp = _shape(shape, "RandomUniform")
    if dt.is_integer:
        if maxval is None:
            raise InvalidArgumentError(
                f"Must specify maxval for integer dtype {dt.name}", op="RandomUniformInt")
        lo = _shapes.as_index(minval, "minval of an integer random_uniform", "RandomUniformInt")
        hi = _shapes.as_index(maxval, "maxval of an integer random_uniform", "RandomUniformInt")
        key, counter = _key_counter(seed)
        return execute(_UNIFORM_INT, (), {"shape": shp, "dtype": dt, "key": key,
                                          "counter": counter, "minval": lo, "maxval": hi})
    if not dt.is_floating:
        raise InvalidArgumentError(f"Unsupported dtype {dt.name} for random_uniform",
                                   op="RandomUniform")
    if maxval is None:
        maxval = 1.0
    return _affine(_UNIFORM, shp, dt, seed, "minval", minval, "maxval", maxval, 0.0, 1.0)


random_uniform = uniform


@_on_device
def shuffle(value, seed=None, name=None):
    """Randomly shuffle a tensor along its first dimension (``tf.random.shuffle``)."""
    x = convert_to_tensor(value)
    if x.ndim == 0:
        raise InvalidArgumentError("shuffle needs a tensor of rank >= 1, got a scalar",
                                   op="RandomShuffle")
    key, counter = _key_counter(seed)
    return execute(_SHUFFLE, (x,), {"key": key, "counter": counter})


random_shuffle = shuffle
