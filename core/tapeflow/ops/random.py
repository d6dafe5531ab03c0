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

**TensorFlow 2's stateless ops and tf.random.Generator** (``stateless_normal``,
``stateless_uniform``, ``stateless_truncated_normal``, ``stateless_categorical``,
``stateless_split``/``split``, ``stateless_fold_in``/``fold_in``; the Generator is
``tapeflow.random_generator``) give TensorFlow 2.21's numbers: Philox4x32-10
(:func:`philox_block`) on a state int64 [3] ``(counter low, counter high, key)``, one
block of 4 words per group of 4 values (2 for 64-bit values), TensorFlow's word-to-value
transforms (float32 uniforms from 23 mantissa bits, Box-Muller on word pairs, rejection
for the truncated normal, ``minval + word % range`` for integers). A seed ``[s0, s1]``
becomes the state ``[0, hi, key]`` through one block of the counter ``(s0, s1)`` under
:data:`SEED_SCRAMBLE_KEY`. The ops (``StatelessRandom*V2``) take the state as a tensor
input, so a traced function replays them with the state it reads. docs/random.md has the
formulas, what matches TensorFlow bit for bit (all but ~1.4% of float32 normals, which
differ in the last bit or two: TensorFlow uses glibc's ``logf``/``sinf``/``cosf``), and
the deliberate differences.

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
from .library import batch_with_shape, defop, rerun
from ..errors import InvalidArgumentError, InvalidTypeError, TapeflowError, UnimplementedError
from ..runtime.dispatch import convert_to_tensor, execute
from . import math as _m
from . import array_creation as _ac
from . import array_gather as _ag
from . import array_sort as _as
from . import array_values as _av
from . import reductions as _r

__all__ = ["normal", "uniform", "truncated_normal", "shuffle", "set_seed", "get_seed",
           "random_normal", "random_uniform", "set_random_seed", "random_shuffle",
           "stateless_uniform", "stateless_normal", "stateless_truncated_normal",
           "stateless_categorical", "stateless_split", "stateless_fold_in", "split", "fold_in"]

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


# --- TensorFlow 2's stateless ops: Philox4x32-10 on a [3] state ------------------------------

#: the Philox key TensorFlow scrambles a stateless op's [2] seed with (its bits only)
SEED_SCRAMBLE_KEY = 0x02461E293EC8F720
#: counter increments a Generator reserves per output value (TensorFlow's)
SAMPLES_PER_OUTPUT = 256
_STATELESS_OPS = ("StatelessRandomUniformV2", "StatelessRandomNormalV2",
                  "StatelessTruncatedNormalV2", "StatelessRandomUniformIntV2",
                  "StatelessRandomUniformFullIntV2")


def _check_state(op, tensors, attrs, device):
    """The stateless ops' check: a Philox state (int64 [3]), a dtype the op draws, then
    the allocation (and, for RandomUniformInt, ``minval < maxval`` fitting the dtype)."""
    st = tensors[0]
    if st.dtype != _dt.int64 or not st.shape or tuple(st.shape)[-1] != 3:
        raise InvalidArgumentError(
            f"the Philox state must be an int64 tensor of shape [3] (counter low, counter "
            f"high, key; [..., 3] for a batch of states), got {st.dtype.name} of shape "
            f"{list(st.shape)}")
    dt = _dt.as_dtype(attrs["dtype"])
    kinds = {"StatelessRandomUniformIntV2": (_dt.int32, _dt.int64),
             "StatelessRandomUniformFullIntV2": (_dt.int32, _dt.int64, _dt.uint32,
                                                 _dt.uint64)}.get(op.name)
    if kinds is None and not dt.is_floating or kinds is not None and dt not in kinds:
        want = "a floating dtype" if kinds is None else ", ".join(k.name for k in kinds)
        raise InvalidArgumentError(f"{op.name} draws {want}, got dtype {dt.name}")
    if op.name == "StatelessRandomUniformIntV2":
        _check_uniform_int(op, (), attrs, device)
    _shapes.check_shape_attr(op, (), attrs, device)


def _batch_stateless(ctx, state):
    """Batching rule: a batch of states draws a batch of values (the kernels take
    ``[..., 3]``); one state for every example draws once, the same values for each."""
    out = rerun(ctx, (state,))
    if ctx.batched[0]:
        return out
    return _r.broadcast_to(out, (ctx.size,) + tuple(out.shape))


def _stateless_op(name, **attrs):
    return defop(name, inputs=("state",), attrs={"shape": (), "dtype": _dt.float32, **attrs},
                 dtype_from="dtype", differentiable=False, check=_check_state,
                 attr_types={"minval": "int", "maxval": "int"} if attrs else None,
                 batch=_batch_stateless)


_S_UNIFORM = _stateless_op("StatelessRandomUniformV2")
_S_NORMAL = _stateless_op("StatelessRandomNormalV2")
_S_TRUNCATED = _stateless_op("StatelessTruncatedNormalV2")
_S_UNIFORM_INT = _stateless_op("StatelessRandomUniformIntV2", minval=0, maxval=1)
_S_FULL_INT = _stateless_op("StatelessRandomUniformFullIntV2")


def _seed_pair(seed, fn):
    """``seed`` (two integers, or an int32/int64 tensor of shape [2]) as an int64 tensor."""
    if isinstance(seed, (list, tuple)) and len(seed) == 2 and all(
            isinstance(s, (int, _np.integer)) and not isinstance(s, bool) for s in seed):
        for s in seed:
            if not -(1 << 63) <= int(s) < (1 << 64):
                raise InvalidArgumentError(f"{fn}: seed {list(seed)} does not fit in int64",
                                           op=fn)
        return convert_to_tensor([int(s) - (1 << 64) if s >= (1 << 63) else int(s)
                                  for s in seed], dtype=_dt.int64)
    try:
        t = convert_to_tensor(seed)
    except TapeflowError as e:
        raise InvalidTypeError(f"{fn}: seed must be a shape [2] integer tensor, got "
                               f"{_shapes.short_repr(seed)}: {getattr(e, 'message', e)}",
                               op=fn) from None
    if not t.dtype.is_integer:
        raise InvalidTypeError(f"{fn}: seed must be an int32 or int64 tensor of shape [2], "
                               f"got dtype {t.dtype.name}", op=fn)
    if t.dtype not in (_dt.int32, _dt.int64) or tuple(t.shape) != (2,):
        raise InvalidArgumentError(
            f"{fn}: seed must be an int32 or int64 tensor of shape [2], got "
            f"{t.dtype.name} of shape {list(t.shape)}", op=fn)
    return _m.cast(t, _dt.int64)


def philox_block(c_lo, c_hi, key):
    """Philox4x32-10 of one 128-bit counter ``c_lo + 2**64 c_hi`` under the 64-bit
    ``key`` (Python ints): its four 32-bit output words (the specification the kernels
    implement; the seed scrambling of Python seeds runs here, on the host).

    >>> [hex(w) for w in philox_block(0, 0, 0)]
    ['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']
    """
    for what, v in (("c_lo", c_lo), ("c_hi", c_hi), ("key", key)):
        if not isinstance(v, (int, _np.integer)) or isinstance(v, bool) or not \
                0 <= int(v) < (1 << 64):
            raise InvalidTypeError(f"philox_block: {what} must be an integer in [0, 2**64), "
                                   f"got {_shapes.short_repr(v)}", op="philox_block")
    c_lo, c_hi, key = int(c_lo), int(c_hi), int(key)
    m32 = 0xFFFFFFFF
    c0, c1, c2, c3 = c_lo & m32, (c_lo >> 32) & m32, c_hi & m32, (c_hi >> 32) & m32
    k0, k1 = key & m32, (key >> 32) & m32
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & m32, (k1 + 0xBB67AE85) & m32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & m32, (p0 >> 32) ^ c3 ^ k1, p0 & m32
    return [c0, c1, c2, c3]


def _signed64(v):
    v &= _M64
    return v - (1 << 64) if v >= (1 << 63) else v


def _host_seed(seed):
    """``seed`` as two Python ints when it is host data (ints, a list, a NumPy array),
    else None (a tensor: derived with ops, so that tf.function replays it)."""
    if isinstance(seed, (list, tuple)) and len(seed) == 2 and all(
            isinstance(s, (int, _np.integer)) and not isinstance(s, bool) for s in seed):
        vals = [int(s) for s in seed]
    elif isinstance(seed, _np.ndarray) and seed.shape == (2,) and seed.dtype.kind in "iu":
        vals = [int(s) for s in seed]
    else:
        return None
    if not all(-(1 << 63) <= v < (1 << 64) for v in vals):
        return None          # (refused by _seed_pair, with the message)
    return vals


def key_counter_from_seed(seed, fn="stateless_random"):
    """The Philox state (int64 [3]: counter low, counter high, key) of a stateless op
    seeded with ``seed`` ([2]), as TensorFlow derives it: one Philox4x32-10 block of the
    counter ``(seed[0], seed[1])`` under the key :data:`SEED_SCRAMBLE_KEY` gives the
    key (its words 0, 1) and the counter's high half (words 2, 3); the low half is 0."""
    host = _host_seed(seed)
    if host is not None:
        w = philox_block(host[0] & _M64, host[1] & _M64, SEED_SCRAMBLE_KEY)
        return convert_to_tensor([0, _signed64(w[2] | w[3] << 32),
                                  _signed64(w[0] | w[1] << 32)], dtype=_dt.int64)
    s = _seed_pair(seed, fn)
    k = convert_to_tensor([SEED_SCRAMBLE_KEY], dtype=_dt.int64)
    mix = execute(_S_FULL_INT, (_ag.concat([s, k], 0),), {"shape": (2,), "dtype": _dt.int64})
    return _ag.concat([_ac.zeros([1], _dt.int64), _ag.gather(mix, [1, 0])], 0)


def _check_alg(alg, fn):
    """``alg`` (None, "auto_select", "philox", an Algorithm or its int) -> 1 (Philox)."""
    name = getattr(alg, "name", alg)
    if name is None or (isinstance(name, str) and name.lower() in ("auto_select", "philox")) \
            or name in (1, 3):
        return 1
    if (isinstance(name, str) and name.lower() == "threefry") or name == 2:
        raise UnimplementedError(f"{fn}: the ThreeFry algorithm is not supported (TensorFlow "
                                 "runs it under XLA only); use alg='philox'", op=fn)
    raise InvalidArgumentError(f"{fn}: unknown RNG algorithm {alg!r}; use 'philox', "
                               "'threefry' or 'auto_select'", op=fn)


def _draw(op_name, state, shape, dtype, minval=None, maxval=None):
    """Run the stateless op ``op_name`` on the Philox ``state`` (int64 [3] tensor)."""
    op = {"StatelessRandomUniformV2": _S_UNIFORM, "StatelessRandomNormalV2": _S_NORMAL,
          "StatelessTruncatedNormalV2": _S_TRUNCATED,
          "StatelessRandomUniformIntV2": _S_UNIFORM_INT,
          "StatelessRandomUniformFullIntV2": _S_FULL_INT}[op_name]
    attrs = {"shape": _shape(shape, op_name), "dtype": _dt.as_dtype(dtype)}
    if minval is not None:
        attrs["minval"], attrs["maxval"] = minval, maxval
    return execute(op, (state,), attrs)


def _scaled(z, dt, a, b, uniform):
    """TensorFlow's ``z * (b - a) + a`` (uniform) or ``z * b + a`` (normal) in ``dt``
    (``a``, ``b`` checked by :func:`_real_param`), skipped for the defaults (where it
    changes nothing)."""
    if _is_scalar(a) and _is_scalar(b) and float(a) == 0.0 and float(b) == 1.0:
        return z
    a = convert_to_tensor(a, dtype=dt) if not hasattr(a, "dtype") else _m.cast(a, dt)
    b = convert_to_tensor(b, dtype=dt) if not hasattr(b, "dtype") else _m.cast(b, dt)
    return _m.add(_m.multiply(z, _m.subtract(b, a) if uniform else b), a)


def _int_bound(v, what, fn, dt):
    """An integer bound of an integer uniform: a Python int (a tensor is read)."""
    if hasattr(v, "numpy"):
        v = v.numpy()
    if isinstance(v, _np.ndarray) and v.size == 1:
        v = v.reshape(()).item()
    return _shapes.as_index(v, f"{what} of an integer {fn}", fn)


def _state_of(state):
    """A state argument: a tensor, or a function that makes it (a Generator advances
    only once the arguments are known to be good: :func:`_check_draw` ran first)."""
    return state() if callable(state) else state


def _broadcast_dims(a, b):
    """The broadcast of two static shapes (``None``: an unknown dimension), or None when
    they do not broadcast."""
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1 or x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        else:
            return None
    return tuple(out)


def _check_draw(shape, dt, fn, *params):
    """What makes a draw fail, checked before its state is taken (a Generator's advance
    must not happen for a draw that raises): the parameters (``(name, value)``, value
    checked by :func:`_real_param`) broadcast with ``shape``, and the result fits on
    the device."""
    out = tuple(shape)
    for name, v in params:
        vs = None if _is_scalar(v) else getattr(v, "shape", None)
        if vs is None:
            continue
        b = _broadcast_dims(out, tuple(vs))
        if b is None:
            raise InvalidArgumentError(
                f"{fn}: {name} of shape {list(vs)} does not broadcast with the sample shape "
                f"{list(shape)}" + ("" if out == tuple(shape) else
                                    f" and the other parameters (together {list(out)})") +
                f"; give {name} a shape that broadcasts, or a scalar", op=fn)
        out = b
    if all(type(d) is int for d in out):
        device = _devs.current_device() or _devs.default_device()
        _shapes.check_allocation(out, dt, device, fn)


def uniform_from_state(state, shape, minval, maxval, dtype, fn):
    """``uniform`` of a Philox state (a Generator's or a stateless op's: a tensor, or a
    function that returns it, called once the arguments are checked): floats in
    ``[minval, maxval)``, integers in ``[minval, maxval)`` or over the dtype's range."""
    dt = _dt.as_dtype(dtype)
    shape = _shape(shape, fn)
    if dt.is_integer:
        if (minval is None) != (maxval is None):
            raise InvalidArgumentError(
                f"{fn}: for integer dtype {dt.name}, minval and maxval must be both None "
                f"(the full range) or both set; got minval={minval!r}, maxval={maxval!r}",
                op=fn)
        if minval is None:
            if dt not in (_dt.int32, _dt.int64, _dt.uint32, _dt.uint64):
                raise InvalidArgumentError(f"{fn}: full-range draws take int32, int64, "
                                           f"uint32 or uint64, got {dt.name}", op=fn)
            _check_draw(shape, dt, fn)
            return _draw("StatelessRandomUniformFullIntV2", _state_of(state), shape, dt)
        if dt not in (_dt.int32, _dt.int64):
            raise InvalidArgumentError(f"{fn}: bounded integer draws take int32 or int64, "
                                       f"got {dt.name}; pass minval=maxval=None for the "
                                       "full range", op=fn)
        attrs = {"dtype": dt, "minval": _int_bound(minval, "minval", fn, dt),
                 "maxval": _int_bound(maxval, "maxval", fn, dt)}
        try:
            _check_uniform_int(_S_UNIFORM_INT, (), attrs, None)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{fn}: {getattr(e, 'message', e)}", op=fn) from None
        _check_draw(shape, dt, fn)
        return _draw("StatelessRandomUniformIntV2", _state_of(state), shape, dt,
                     attrs["minval"], attrs["maxval"])
    if not dt.is_floating:
        raise InvalidArgumentError(f"{fn}: unsupported dtype {dt.name}", op=fn)
    lo = _real_param(minval, f"{fn}: minval", fn, dt)
    hi = _real_param(1.0 if maxval is None else maxval, f"{fn}: maxval", fn, dt)
    _check_draw(shape, dt, fn, ("minval", lo), ("maxval", hi))
    z = _draw("StatelessRandomUniformV2", _state_of(state), shape, dt)
    return _scaled(z, dt, lo, hi, True)


def normal_from_state(state, shape, mean, stddev, dtype, fn, truncated=False):
    """``normal`` (or ``truncated_normal``) of a Philox state (as
    :func:`uniform_from_state`'s): ``z * stddev + mean``."""
    dt = _float_dtype(dtype, fn)
    shape = _shape(shape, fn)
    mean = _real_param(mean, f"{fn}: mean", fn, dt)
    stddev = _real_param(stddev, f"{fn}: stddev", fn, dt)
    _check_draw(shape, dt, fn, ("mean", mean), ("stddev", stddev))
    z = _draw("StatelessTruncatedNormalV2" if truncated else "StatelessRandomNormalV2",
              _state_of(state), shape, dt)
    return _scaled(z, dt, mean, stddev, False)


@_on_device
def stateless_uniform(shape, seed, minval=0, maxval=None, dtype=_dt.float32, name=None,
                      alg="auto_select"):
    """Uniform values determined by ``seed`` (``tf.random.stateless_uniform``): the same
    seed gives the same values, on every backend, and TensorFlow 2's values.

    Integers take ``minval``/``maxval`` (or both None: the dtype's full range).

    >>> import tapeflow as tf
    >>> print(tf.random.stateless_uniform([3], seed=[1, 2], minval=0, maxval=10,
    ...                                   dtype=tf.int32))
    tf.Tensor([0 9 4], shape=(3,), dtype=int32)
    """
    _check_alg(alg, "stateless_uniform")
    return uniform_from_state(key_counter_from_seed(seed, "stateless_uniform"), shape, minval,
                              maxval, dtype, "stateless_uniform")


@_on_device
def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None,
                     alg="auto_select"):
    """Normal values determined by ``seed`` (``tf.random.stateless_normal``).

    >>> import tapeflow as tf
    >>> x = tf.random.stateless_normal([2], seed=[1, 2])
    >>> bool((x.numpy() == tf.random.stateless_normal([2], seed=[1, 2]).numpy()).all())
    True
    """
    _check_alg(alg, "stateless_normal")
    return normal_from_state(key_counter_from_seed(seed, "stateless_normal"), shape, mean,
                             stddev, dtype, "stateless_normal")


@_on_device
def stateless_truncated_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dt.float32,
                               name=None, alg="auto_select"):
    """Normal values within two standard deviations, determined by ``seed``
    (``tf.random.stateless_truncated_normal``: TensorFlow's rejection sampling)."""
    _check_alg(alg, "stateless_truncated_normal")
    return normal_from_state(key_counter_from_seed(seed, "stateless_truncated_normal"), shape,
                             mean, stddev, dtype, "stateless_truncated_normal", truncated=True)


def stateless_split(seed, num=2, alg="auto_select"):
    """``num`` new seeds from ``seed`` (``tf.random.split``,
    ``tf.random.experimental.stateless_split``): a ``[num, 2]`` tensor of the seed's
    dtype (TensorFlow's full-range draw)."""
    _check_alg(alg, "stateless_split")
    t = convert_to_tensor(seed) if not hasattr(seed, "dtype") else seed
    num = _shapes.as_index(num, "num", "stateless_split")
    return stateless_uniform([num, 2], seed, minval=None, maxval=None,
                             dtype=getattr(t, "dtype", _dt.int64))


split = stateless_split


def stateless_fold_in(seed, data, alg="auto_select"):
    """A new seed from ``seed`` and the integer ``data`` (``tf.random.fold_in``,
    ``tf.random.experimental.stateless_fold_in``): ``[draw, data]`` in ``data``'s dtype."""
    _check_alg(alg, "stateless_fold_in")
    d = convert_to_tensor(data)
    if d.dtype not in (_dt.int32, _dt.int64) or d.ndim:
        raise InvalidArgumentError(f"stateless_fold_in: data must be an int32 or int64 "
                                   f"scalar, got {d.dtype.name} of shape {list(d.shape)}",
                                   op="stateless_fold_in")
    first = stateless_uniform([], seed, minval=None, maxval=None, dtype=d.dtype)
    return _ag.stack([first, d])


@_on_device
def stateless_categorical(logits, num_samples, seed, dtype=_dt.int64, name=None):
    """Class indices drawn from ``logits`` [batch, classes] (``tf.random.stateless_categorical``).

    TensorFlow's multinomial sampling written with ops: row ``b``'s ``j``-th draw is the
    float64 uniform ``u`` number ``b * num_samples + j`` of the seed's stream, and the
    class is the number of entries of the (unnormalised) CDF of ``exp(logits - max)``
    (non-finite logits left out) that are ``<= u * total``.

    >>> import tapeflow as tf
    >>> s = tf.random.stateless_categorical([[-1e9, 0.0]], 4, seed=[1, 2])
    >>> print(s)
    tf.Tensor([[1 1 1 1]], shape=(1, 4), dtype=int64)
    """
    fn = "stateless_categorical"
    dt = _dt.as_dtype(dtype)
    if dt not in (_dt.int32, _dt.int64):
        raise InvalidArgumentError(f"{fn}: dtype must be int32 or int64, got {dt.name}", op=fn)
    x = convert_to_tensor(logits)
    if x.ndim != 2 or not x.dtype.is_floating:
        raise InvalidArgumentError(f"{fn}: logits must be a 2-D float tensor [batch, classes],"
                                   f" got {x.dtype.name} of shape {list(x.shape)}", op=fn)
    n = _shapes.as_index(num_samples, "num_samples", fn)
    batch, classes = x.shape
    if classes is not None and classes < 1:
        raise InvalidArgumentError(f"{fn}: num_classes should be positive, got {classes} "
                                   f"(logits of shape {list(x.shape)}); give logits at least "
                                   "one class", op=fn)
    if n < 0:
        raise InvalidArgumentError(f"{fn}: num_samples should be >= 0, got {n}", op=fn)
    x = _m.cast(x, _dt.float64)
    finite = _m.is_finite(x)
    mx = _r.reduce_max(_av.where(finite, x, _ac.fill([batch, classes], -_np.inf)), axis=1,
                       keepdims=True)
    mx = _av.where(_m.is_finite(mx), mx, _ac.zeros([batch, 1], _dt.float64))  # (no finite)
    p = _av.where(finite, _m.exp(_m.subtract(x, mx)), _ac.zeros([batch, classes], _dt.float64))
    cdf = _as.cumsum(p, axis=1)
    total = cdf[:, -1:]
    u = _draw("StatelessRandomUniformV2", key_counter_from_seed(seed, fn), [batch, n],
             _dt.float64)
    target = _m.multiply(u, total)                                     # [batch, n]
    if n == 0:
        return _m.cast(target, dt)
    return _m.cast(_count_le(cdf, target, n), dt)


def _count_le(cdf, target, n):
    """Per row, how many entries of ``cdf`` [batch, classes] (ascending) are ``<= t`` for
    each ``t`` of ``target`` [batch, n] (n > 0): a batched ``searchsorted(side="right")``
    by one stable merge (exact comparisons; memory O(batch (classes + n))). Sorted
    together, cdf first, every ``cdf <= t`` lands before ``t``: the count is the number
    of cdf entries before ``t``'s place."""
    merged = _ag.concat([cdf, target], 1)
    order = _as.argsort(merged, axis=1)                                # stable
    from_cdf = _ag.concat([_ac.ones_like(cdf, _dt.int64), _ac.zeros_like(target, _dt.int64)],
                          1)
    is_cdf = _ag.gather(from_cdf, order, axis=1, batch_dims=1)
    before = _as.cumsum(is_cdf, axis=1, exclusive=True)   # cdf entries before each place
    place = _as.argsort(order, axis=1)                    # where each entry went
    return _ag.gather(before, place[:, -n:], axis=1, batch_dims=1)


fold_in = stateless_fold_in
