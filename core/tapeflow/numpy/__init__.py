"""``tapeflow.numpy``: the Python array API standard (revision 2024.12) on tapeflow
tensors, every function a composition of tapeflow ops, so everything here runs on
every backend, is recorded by ``GradientTape`` and traced by ``tf.function``.

>>> import tapeflow as tf
>>> import tapeflow.numpy as tnp
>>> x = tnp.asarray([1.0, 2.0, 3.0])
>>> s = tnp.sum(tnp.exp(x - tnp.max(x)))
>>> print(tnp.round(s * 1e4) / 1e4)     # 4 decimals: exp's last digit depends on the CPU
tf.Tensor(1.5032, shape=(), dtype=float32)
>>> x.__array_namespace__() is tnp
True

Work in progress (issue 18): ``docs/array-api.md`` lists what is implemented, what is
not yet, and the deviations (complex numbers have no OpenCL kernels; binary
operators on ``Tensor`` keep TensorFlow's "same dtype" rule, while the functions here
promote as the standard says).
"""

from __future__ import annotations

import builtins as _builtins
import math as _math
import sys as _sys

import numpy as _np

from .. import ops as _ops
from ..ops import array as _A
from ..ops import linalg as _L
from ..ops import math as _M
from ..ops.operators import matmul_vectors as _matmul_vectors
from ..runtime import devices as _devs
from ..runtime import dtypes as _dt
from ..runtime.dispatch import constant as _constant
from ..runtime.errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from ..runtime.tensor import Tensor as _Tensor
from ..runtime.tensor import _wrap
from ..runtime.variable import Variable as _Variable

__array_api_version__ = "2024.12"

# --- data types and constants ----------------------------------------------------------------

bool = _dt.as_dtype("bool")  # noqa: A001 (the standard's name)
int8 = _dt.as_dtype("int8")
int16 = _dt.as_dtype("int16")
int32 = _dt.as_dtype("int32")
int64 = _dt.as_dtype("int64")
uint8 = _dt.as_dtype("uint8")
uint16 = _dt.as_dtype("uint16")
uint32 = _dt.as_dtype("uint32")
uint64 = _dt.as_dtype("uint64")
float16 = _dt.as_dtype("float16")      # an extension: not in the standard's set
complex64 = _dt.as_dtype("complex64")
complex128 = _dt.as_dtype("complex128")
float32 = _dt.as_dtype("float32")
float64 = _dt.as_dtype("float64")

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

_SIGNED = (int8, int16, int32, int64)
_UNSIGNED = (uint8, uint16, uint32, uint64)
_FLOATS = (float16, float32, float64)
_COMPLEX = (complex64, complex128)
_ALL = (bool,) + _SIGNED + _UNSIGNED + _FLOATS + _COMPLEX


def _as_dtype(d):
    return None if d is None else _dt.as_dtype(d)


def result_type(*arrays_and_dtypes):
    """The dtype the standard's promotion rules give ``arrays_and_dtypes``; Python
    scalars are "weak": they take the other operands' dtype. The "array_api" mode of
    tapeflow's one lattice (docs/dtypes.md).

    >>> result_type(int8, uint8), result_type(int32, 1), result_type(float32, 1j)
    (tf.int16, tf.int32, tf.complex64)
    """
    args = [x.dtype if isinstance(x, (_Tensor, _Variable)) else x for x in arrays_and_dtypes]
    return _dt.result_type(*args, mode="array_api")


def _scalar_dtype(s):
    """The dtype of a lone Python scalar: bool, int64, float32 or complex64."""
    return _dt.result_type(s, mode="array_api")


def can_cast(from_, to, /):
    """Whether the standard's promotion rules cast ``from_`` to ``to`` without loss."""
    f = from_.dtype if isinstance(from_, (_Tensor, _Variable)) else _dt.as_dtype(from_)
    t = _dt.as_dtype(to)
    if f.is_bool:
        return t.is_bool
    if t.is_bool:
        return False
    return _builtins.bool(_np.can_cast(f.np, t.np, casting="safe"))


def isdtype(dtype, kind):
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name ("bool", "signed integer",
    "unsigned integer", "integral", "real floating", "complex floating", "numeric") or a
    tuple of those."""
    d = _dt.as_dtype(dtype)
    if isinstance(kind, tuple):
        return _builtins.any(isdtype(d, k) for k in kind)
    if not isinstance(kind, str):
        return d is _dt.as_dtype(kind)
    table = {"bool": d.is_bool, "signed integer": d.is_integer and not d.is_unsigned,
             "unsigned integer": d.is_unsigned, "integral": d.is_integer,
             "real floating": d.is_floating, "complex floating": d.is_complex,
             "numeric": d.is_integer or d.is_inexact}
    if kind not in table:
        raise InvalidArgumentError(f"isdtype: unknown kind {kind!r}; one of {sorted(table)}")
    return table[kind]


def finfo(type, /):  # noqa: A002
    """Machine limits of a floating-point dtype: bits, eps, max, min, smallest_normal, dtype."""
    d = type.dtype if isinstance(type, (_Tensor, _Variable)) else _dt.as_dtype(type)
    fi = _np.finfo(d.np)
    d = d.real_dtype                # complex: the limits (and dtype) of its parts
    return _Info(bits=fi.bits, eps=float(fi.eps), max=float(fi.max), min=float(fi.min),
                 smallest_normal=float(fi.smallest_normal), dtype=d)


def iinfo(type, /):  # noqa: A002
    """Machine limits of an integer dtype: bits, max, min, dtype."""
    d = type.dtype if isinstance(type, (_Tensor, _Variable)) else _dt.as_dtype(type)
    if not d.is_integer:
        raise InvalidTypeError(f"iinfo needs an integer dtype, got {d.name} (finfo is for "
                               "floating and complex ones)")
    ii = _np.iinfo(d.np)
    return _Info(bits=ii.bits, max=int(ii.max), min=int(ii.min), dtype=d)


class _Info:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return "info(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


# --- conversion helpers ------------------------------------------------------------------------

def _t(x, dtype=None):
    """A Tensor for ``x`` (Variables are read; Python values become tensors)."""
    if isinstance(x, _Variable):
        x = x.read_value()
    if isinstance(x, _Tensor):
        return x if dtype is None or x.dtype is dtype else _M.cast(x, dtype)
    if dtype is not None:
        return _constant(x, dtype=dtype)
    return _constant(x)


def _pair(x1, x2):
    """Both operands as tensors of the promoted dtype (scalars weak)."""
    dt = result_type(x1, x2)
    return _t(x1, dt), _t(x2, dt)


def _binary(fn):
    def f(x1, x2, /):
        a, b = _pair(x1, x2)
        return fn(a, b)
    f.__name__ = fn.__name__
    return f


def _float_input(x):
    """Integer inputs of a float-only function: the standard leaves the result dtype to
    the implementation; we compute in the default float (float32), as TensorFlow's
    NumPy API does for int32 (and float64 for int64)."""
    x = _t(x)
    if x.dtype.is_inexact:
        return x
    return _M.cast(x, float64 if x.dtype in (int64, uint32, uint64) else float32)


def _float_unary(fn, name):
    def f(x, /):
        return fn(_float_input(x))
    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` (the array API's; integer inputs computed in float)."
    return f


# --- elementwise ---------------------------------------------------------------------------------

add = _binary(_M.add)
subtract = _binary(_M.subtract)
multiply = _binary(_M.multiply)
maximum = _binary(_M.maximum)
minimum = _binary(_M.minimum)
floor_divide = _binary(_M.floor_divide)
remainder = _binary(_M.mod)
equal = _binary(_M.equal)
not_equal = _binary(_M.not_equal)
less = _binary(_M.less)
less_equal = _binary(_M.less_equal)
greater = _binary(_M.greater)
greater_equal = _binary(_M.greater_equal)
logical_and = _binary(_M.logical_and)
logical_or = _binary(_M.logical_or)
logical_xor = _binary(_M.logical_xor)


def divide(x1, x2, /):
    """True division (integers divide in float)."""
    a, b = _pair(x1, x2)
    if not a.dtype.is_inexact:
        a, b = _float_input(a), _float_input(b)
    return _M.divide(a, b)


def pow(x1, x2, /):  # noqa: A001
    """``x1 ** x2`` with the standard's promotion."""
    a, b = _pair(x1, x2)
    return _M.pow(a, b)


def _float_binary(fn, name):
    def f(x1, x2, /):
        a, b = _pair(x1, x2)
        if not a.dtype.is_floating:
            a, b = _float_input(a), _float_input(b)
        return fn(a, b)
    f.__name__ = name
    return f


atan2 = _float_binary(_M.atan2, "atan2")
copysign = _float_binary(_M.copysign, "copysign")
hypot = _float_binary(_M.hypot, "hypot")
logaddexp = _float_binary(_M.logaddexp, "logaddexp")
nextafter = _float_binary(_M.nextafter, "nextafter")

for _name, _fn in (("acos", _M.acos), ("acosh", _M.acosh), ("asin", _M.asin),
                   ("asinh", _M.asinh), ("atan", _M.atan), ("atanh", _M.atanh),
                   ("cos", _M.cos), ("cosh", _M.cosh), ("exp", _M.exp), ("expm1", _M.expm1),
                   ("log", _M.log), ("log1p", _M.log1p), ("log2", _M.log2),
                   ("log10", _M.log10), ("sin", _M.sin), ("sinh", _M.sinh),
                   ("sqrt", _M.sqrt), ("tan", _M.tan), ("tanh", _M.tanh),
                   ("reciprocal", _M.reciprocal)):
    globals()[_name] = _float_unary(_fn, _name)
del _name, _fn


def abs(x, /):  # noqa: A001
    """Absolute value."""
    return _M.abs(_t(x))


def negative(x, /):
    """``-x``."""
    return _M.negative(_t(x))


def positive(x, /):
    """``+x`` (the input)."""
    return _t(x)


def square(x, /):
    """``x * x``."""
    return _M.square(_t(x))


def sign(x, /):
    """-1, 0 or 1 (nan for nan)."""
    return _M.sign(_t(x))


def signbit(x, /):
    """Where the sign bit is set (-0.0 included)."""
    return _M.signbit(_float_input(x))


def _rounding(fn, name):
    def f(x, /):
        x = _t(x)
        if x.dtype.is_complex:
            if name != "round":
                raise InvalidTypeError(f"{name} is not defined for complex numbers (the "
                                       f"standard's); got {x.dtype.name}")
            return _M.complex(fn(_M.real(x)), fn(_M.imag(x)))     # each part, as NumPy
        return fn(x) if x.dtype.is_floating else x
    f.__name__ = name
    f.__doc__ = f"``{name}`` (integers are returned as they are)."
    return f


ceil = _rounding(_M.ceil, "ceil")
floor = _rounding(_M.floor, "floor")
round = _rounding(_M.round, "round")  # noqa: A001
trunc = _rounding(_M.trunc, "trunc")


def isfinite(x, /):
    x = _t(x)
    return _M.is_finite(x) if x.dtype.is_inexact else ones_like(x, dtype=bool)


def isinf(x, /):
    x = _t(x)
    return _M.is_inf(x) if x.dtype.is_inexact else zeros_like(x, dtype=bool)


def isnan(x, /):
    x = _t(x)
    return _M.is_nan(x) if x.dtype.is_inexact else zeros_like(x, dtype=bool)


def logical_not(x, /):
    return _M.logical_not(_t(x))


def clip(x, /, min=None, max=None):  # noqa: A002
    """``x`` limited to ``[min, max]`` (either may be None)."""
    x = _t(x)
    if min is not None:
        x = _M.maximum(x, _t(min, x.dtype))
    if max is not None:
        x = _M.minimum(x, _t(max, x.dtype))
    return x


def conj(x, /):
    """The complex conjugate: real tensors are their own."""
    return _M.conj(_t(x))


def real(x, /):
    """The real part: real tensors are their own."""
    return _M.real(_t(x))


def imag(x, /):
    """The imaginary part: zeros for real tensors."""
    return _M.imag(_t(x))


# --- creation --------------------------------------------------------------------------------

class _on:
    """``with tf.device(device)`` when a ``device=`` keyword is given."""

    def __init__(self, device):
        self.ctx = None if device is None else _devs.device(str(device))

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """A tensor from a tensor, array, nested sequence or scalar. ``copy=False`` refuses
    to copy; a tensor already of the requested dtype and device is returned as it is
    unless ``copy=True``, which gives a new tensor object (``x[key] = value`` on one
    then leaves the other as it was)."""
    dtype = _as_dtype(dtype)
    with _on(device):
        if isinstance(obj, (_Tensor, _Variable)):
            t = _t(obj)
            if dtype is not None and t.dtype is not dtype:
                if copy is False:
                    raise InvalidArgumentError(
                        f"asarray(copy=False): converting {t.dtype.name} to {dtype.name} "
                        "needs a copy")
                t = _M.cast(t, dtype)
            if device is not None and t.device != str(_devs.get_device(str(device)).name):
                if copy is False:
                    raise InvalidArgumentError("asarray(copy=False): moving to another "
                                               "device needs a copy")
                t = t.to(str(device))
            elif copy and t is obj:
                t = _A.identity(t)
            return t
        if dtype is None and not isinstance(obj, (_np.ndarray, _np.generic)):
            # Python data: the namespace's default dtypes (int64, float32), not
            # tapeflow.constant's int32
            kind = _np.asarray(obj).dtype.kind
            dtype = int64 if kind in "iu" else float32 if kind == "f" else None
        elif dtype is not None and isinstance(obj, (list, tuple)) and not _np.size(obj):
            obj = _np.empty(_np.shape(obj), dtype.np)     # [] holds no float to refuse
        return _constant(obj, dtype=dtype)


def _full(shape, value, dtype, device):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    with _on(device):
        return _A.fill(list(shape), _constant(value, dtype=dtype))


def zeros(shape, *, dtype=None, device=None):
    return _full(shape, 0, _as_dtype(dtype) or float32, device)


def ones(shape, *, dtype=None, device=None):
    return _full(shape, 1, _as_dtype(dtype) or float32, device)


def empty(shape, *, dtype=None, device=None):
    """Uninitialised memory is not a thing tapeflow hands out: zeros."""
    return zeros(shape, dtype=dtype, device=device)


def full(shape, fill_value, *, dtype=None, device=None):
    dt = _as_dtype(dtype) or _scalar_dtype(fill_value)
    return _full(shape, fill_value, dt, device)


def _like(x, dtype, device):
    x = _t(x)
    return tuple(int(d) for d in x.shape), _as_dtype(dtype) or x.dtype, device or x.device


def zeros_like(x, /, *, dtype=None, device=None):
    s, d, dev = _like(x, dtype, device)
    return _full(s, 0, d, dev)


def ones_like(x, /, *, dtype=None, device=None):
    s, d, dev = _like(x, dtype, device)
    return _full(s, 1, d, dev)


def empty_like(x, /, *, dtype=None, device=None):
    return zeros_like(x, dtype=dtype, device=device)


def full_like(x, /, fill_value, *, dtype=None, device=None):
    s, d, dev = _like(x, dtype, device)
    return _full(s, fill_value, d, dev)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    """Evenly spaced values in ``[start, stop)``."""
    if stop is None:
        start, stop = 0, start
    if _builtins.any(isinstance(v, (complex, _np.complexfloating)) or not isinstance(
            v, (int, float, _np.integer, _np.floating)) for v in (start, stop, step)):
        raise InvalidTypeError(f"arange needs real numbers, got start={start!r}, "
                               f"stop={stop!r}, step={step!r}")
    dt = _as_dtype(dtype) or (float32 if _builtins.any(isinstance(v, float)
                                                      for v in (start, stop, step)) else int64)
    n = _builtins.max(0, int(_math.ceil((stop - start) / step)))
    with _on(device):
        return _constant(_np.arange(n, dtype=_np.float64) * step + start, dtype=dt) \
            if dt.is_floating else _constant(start + step * _np.arange(n), dtype=dt)


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    dt = _as_dtype(dtype) or (complex64 if _builtins.any(isinstance(v, complex)
                                                         for v in (start, stop)) else float32)
    with _on(device):
        return _constant(_np.linspace(start, stop, num, endpoint=endpoint), dtype=dt)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    dt = _as_dtype(dtype) or float32
    with _on(device):
        return _constant(_np.eye(n_rows, n_cols, k=k, dtype=dt.np), dtype=dt)


def _band(x, k, lower):
    x = _t(x)
    n, m = int(x.shape[-2]), int(x.shape[-1])
    mask = _np.tril(_np.ones((n, m), _np.bool_), k) if lower else \
        _np.triu(_np.ones((n, m), _np.bool_), k)
    return _A.where(_constant(mask, device=x.device), x, zeros_like(x))


def tril(x, /, *, k=0):
    """The lower triangle (at and below diagonal ``k``) of the last two axes."""
    return _band(x, k, True)


def triu(x, /, *, k=0):
    """The upper triangle (at and above diagonal ``k``) of the last two axes."""
    return _band(x, k, False)


def meshgrid(*arrays, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ts = [_t(a) for a in arrays]
    shape = [int(t.shape[0]) for t in ts]
    if indexing == "xy" and len(ts) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
        axis = i
        if indexing == "xy" and len(ts) > 1 and i < 2:
            axis = 1 - i
        view = [1] * len(ts)
        view[axis] = shape[axis]
        out.append(_A.broadcast_to(_A.reshape(t, view), shape))
    return out


#: DLPack device types -> tapeflow device types (kDLCPU, kDLCUDA, kDLCUDAHost)
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cpu"}


def from_dlpack(x, /, *, device=None, copy=None):
    """A tensor over ``x``'s memory through DLPack (NumPy, CuPy, PyTorch, JAX...): host
    memory becomes a ``cpu:0`` tensor, CUDA memory a ``cuda:N`` one, with no copy unless
    ``copy=True`` or ``device`` names another device. Without a copy the tensor *shares*
    the producer's memory (writes to the source show in it, as for every DLPack
    consumer); ``copy=False`` refuses to copy.

    >>> import numpy as np, tapeflow.numpy as tnp
    >>> a = np.arange(3.0)
    >>> t = tnp.from_dlpack(a)
    >>> print(t)
    tf.Tensor([0. 1. 2.], shape=(3,), dtype=float64)
    """
    if isinstance(x, (_Tensor, _Variable)) and not hasattr(_t(x)._data, "__dlpack__"):
        # a tapeflow tensor of a backend without DLPack (OpenCL), whose __dlpack__ is a
        # host copy: it stays on its device (a new tensor object over the same buffer,
        # which nothing outside tapeflow can write), or moves to ``device``
        t = _t(x)
        if device is not None and _devs.get_device(str(device)).name != t.device:
            if copy is False:
                raise InvalidArgumentError(f"from_dlpack(copy=False) cannot move {t.device} "
                                           f"memory to {device}")
            return t.to(str(device))
        return _A.identity(t)
    if not hasattr(x, "__dlpack__"):
        raise InvalidArgumentError(f"from_dlpack needs an object with __dlpack__, got "
                                   f"{type(x).__name__}")
    kind, index = (int(v) for v in x.__dlpack_device__())
    if kind not in _DLPACK_DEVICES:
        raise UnimplementedError(f"from_dlpack: DLPack device type {kind} (index {index}) has "
                                 "no tapeflow backend; copy it to the host first")
    src = _devs.get_device(f"{_DLPACK_DEVICES[kind]}:{0 if kind == 3 else index}")
    dst = src if device is None else _devs.get_device(str(device))
    try:
        data = src.backend.from_dlpack(x, src)
    except NotImplementedError as e:
        raise UnimplementedError(f"from_dlpack on {src.name}: {e}") from None
    except (BufferError, TypeError, ValueError) as e:      # the producer's refusal
        raise InvalidArgumentError(f"from_dlpack: {type(x).__name__} cannot be imported: "
                                   f"{e}") from None
    _dt.from_numpy(data.dtype)                    # a dtype tapeflow has, or a clear error
    if dst is not src:
        if copy is False:
            raise InvalidArgumentError(f"from_dlpack(copy=False) cannot move {src.name} memory "
                                       f"to {dst.name}")
        return _wrap(data, src).to(dst.name)
    return _wrap(data.copy() if copy else data, src)


# --- data types --------------------------------------------------------------------------------

def astype(x, dtype, /, *, copy=True, device=None):
    x = _t(x)
    dt = _dt.as_dtype(dtype)
    if x.dtype.is_complex and not dt.is_complex:
        if not dt.is_bool:
            raise InvalidTypeError(
                f"astype: complex ({x.dtype.name}) to {dt.name} is not allowed by the standard "
                "(it would drop the imaginary part); take tnp.real(x) or tnp.abs(x) first")
        out = _M.not_equal(x, 0)                                   # nonzero, as NumPy
    else:
        out = x if x.dtype is dt else _M.cast(x, dt)
    if device is not None:
        out = out.to(str(device))
    if copy and out is x:
        out = _A.identity(x)          # a new object: x[key] = value leaves it unchanged
    return out


# --- manipulation ------------------------------------------------------------------------------

def broadcast_arrays(*arrays):
    ts = [_t(a) for a in arrays]
    shape = broadcast_shapes(*[tuple(int(d) for d in t.shape) for t in ts])
    return [_A.broadcast_to(t, shape) for t in ts]


def broadcast_shapes(*shapes):
    return tuple(_np.broadcast_shapes(*shapes))


def broadcast_to(x, /, shape):
    return _A.broadcast_to(_t(x), tuple(shape))


def concat(arrays, /, *, axis=0):
    ts = [_t(a) for a in arrays]
    if axis is None:
        ts, axis = [_A.reshape(t, [-1]) for t in ts], 0
    dt = result_type(*ts)
    return _A.concat([_t(t, dt) for t in ts], axis)


def expand_dims(x, /, axis=0):
    return _A.expand_dims(_t(x), axis)


def flip(x, /, *, axis=None):
    x = _t(x)
    axes = range(x.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    idx = [slice(None)] * x.ndim
    for a in axes:
        idx[a] = slice(None, None, -1)
    return x[tuple(idx)]


def moveaxis(x, source, destination, /):
    x = _t(x)
    n = x.ndim
    src = [int(a) % n for a in ((source,) if isinstance(source, int) else source)]
    dst = [int(a) % n for a in ((destination,) if isinstance(destination, int) else destination)]
    if len(src) != len(dst):
        raise InvalidArgumentError(f"moveaxis: {len(src)} source axes for {len(dst)} "
                                   "destinations")
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _A.transpose(x, order)


def permute_dims(x, /, axes):
    return _A.transpose(_t(x), list(axes))


def reshape(x, /, shape, *, copy=None):
    return _A.reshape(_t(x), list(shape))


def squeeze(x, /, axis):
    x = _t(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if int(x.shape[a]) != 1:
            raise InvalidArgumentError(f"squeeze: axis {a} has size {int(x.shape[a])}, not 1")
    return _A.squeeze(x, list(axes))


def stack(arrays, /, *, axis=0):
    ts = [_t(a) for a in arrays]
    dt = result_type(*ts)
    return _A.stack([_t(t, dt) for t in ts], axis=axis)


def unstack(x, /, *, axis=0):
    return tuple(_A.unstack(_t(x), axis=axis))


def tile(x, repetitions, /):
    x = _t(x)
    reps = list(repetitions)
    if len(reps) < x.ndim:
        reps = [1] * (x.ndim - len(reps)) + reps
    elif len(reps) > x.ndim:
        x = _A.reshape(x, [1] * (len(reps) - x.ndim) + [int(d) for d in x.shape])
    return _A.tile(x, reps)


def roll(x, /, shift, *, axis=None):
    x = _t(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), tuple(int(d) for d in x.shape))
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for s, a in zip(shifts, axes):
        n = int(x.shape[a])
        if n == 0:
            continue
        s %= n
        if s:
            lo = [slice(None)] * x.ndim
            hi = [slice(None)] * x.ndim
            lo[a], hi[a] = slice(n - s, None), slice(None, n - s)
            x = _A.concat([x[tuple(lo)], x[tuple(hi)]], a)
    return x


def repeat(x, repeats, /, *, axis=None):
    x = _t(x)
    if axis is None:
        x, axis = _A.reshape(x, [-1]), 0
    n = int(x.shape[axis])
    reps = _np.broadcast_to(_np.asarray(repeats.numpy() if isinstance(repeats, _Tensor)
                                        else repeats), (n,))
    idx = _np.repeat(_np.arange(n), reps)
    return _A.gather(x, _constant(idx.astype(_np.int64), device=x.device), axis=axis)


# --- linear algebra ------------------------------------------------------------------------------

def matmul(x1, x2, /):
    """Matrix product with the standard's rule for 1-D operands (a row on the left, a
    column on the right, the axis dropped) and batch broadcasting."""
    a, b = _pair(x1, x2)
    return _matmul_vectors(a, b)


def matrix_transpose(x, /):
    x = _t(x)
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return _A.transpose(x, perm)


def tensordot(x1, x2, /, *, axes=2):
    a, b = _pair(x1, x2)
    return _L.tensordot(a, b, axes)


def vecdot(x1, x2, /, *, axis=-1):
    a, b = _pair(x1, x2)
    return _ops.reductions.reduce_sum(_M.multiply(_M.conj(a), b), axis=axis)   # conj(x1)


# --- statistics, utility, searching ---------------------------------------------------------

def _axis(axis):
    if axis is None:
        return None
    return list(axis) if isinstance(axis, tuple) else axis


def _accumulator(dtype):
    """The dtype ``sum``, ``prod`` and the cumulative functions return by default: the
    default integer dtype (int64) for signed integers, its unsigned twin (uint64) for
    unsigned ones, as the standard says; None (the input's) otherwise."""
    if dtype.is_integer:
        return uint64 if dtype.is_unsigned else int64
    return None


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    x = _t(x)
    dt = _as_dtype(dtype)
    if dt is None:
        dt = _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    return _ops.reductions.reduce_sum(x, axis=_axis(axis), keepdims=keepdims)


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    x = _t(x)
    dt = _as_dtype(dtype)
    if dt is None:
        dt = _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    return _ops.reductions.reduce_prod(x, axis=_axis(axis), keepdims=keepdims)


def max(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _ops.reductions.reduce_max(_t(x), axis=_axis(axis), keepdims=keepdims)


def min(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _ops.reductions.reduce_min(_t(x), axis=_axis(axis), keepdims=keepdims)


def mean(x, /, *, axis=None, keepdims=False):
    return _ops.reductions.reduce_mean(_float_input(x), axis=_axis(axis), keepdims=keepdims)


def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    x = _float_input(x)
    m = _ops.reductions.reduce_mean(x, axis=_axis(axis), keepdims=True)
    d = _M.subtract(x, m)
    sq = _M.real(_M.multiply(_M.conj(d), d)) if x.dtype.is_complex else _M.square(d)  # |d|^2
    ss = _ops.reductions.reduce_sum(sq, axis=_axis(axis), keepdims=keepdims)
    n = _np.prod([int(x.shape[a]) for a in (range(x.ndim) if axis is None else
                  ((axis,) if isinstance(axis, int) else axis))], dtype=_np.int64)
    return _M.divide(ss, _constant(_builtins.max(float(n) - correction, 0.0), dtype=ss.dtype,
                                   device=x.device))


def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    return _M.sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    x = _t(x)
    b = x if x.dtype.is_bool else _M.not_equal(x, zeros_like(x))
    return _ops.reductions.reduce_all(b, axis=_axis(axis), keepdims=keepdims)


def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    x = _t(x)
    b = x if x.dtype.is_bool else _M.not_equal(x, zeros_like(x))
    return _ops.reductions.reduce_any(b, axis=_axis(axis), keepdims=keepdims)


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    x = _t(x)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat([_t(p) for p in parts], axis=axis)
    for _ in range(n):
        lo = [slice(None)] * x.ndim
        hi = [slice(None)] * x.ndim
        lo[axis], hi[axis] = slice(1, None), slice(None, -1)
        x = _M.subtract(x[tuple(lo)], x[tuple(hi)])
    return x


def _arg_reduce(fn, x, axis, keepdims):
    x = _t(x)
    if axis is None:
        r = fn(_A.reshape(x, [-1]), axis=0)
        return _A.reshape(r, [1] * x.ndim) if keepdims else r
    r = fn(x, axis=axis)
    return _A.expand_dims(r, axis) if keepdims else r


def argmax(x, /, *, axis=None, keepdims=False):
    """Index (int64) of the first maximum, of the flattened array when ``axis`` is None."""
    return _arg_reduce(_ops.reductions.argmax, x, axis, keepdims)


def argmin(x, /, *, axis=None, keepdims=False):
    """Index (int64) of the first minimum, of the flattened array when ``axis`` is None."""
    return _arg_reduce(_ops.reductions.argmin, x, axis, keepdims)


def count_nonzero(x, /, *, axis=None, keepdims=False):
    x = _t(x)
    b = _M.cast(_M.not_equal(x, zeros_like(x)), int64)
    return _ops.reductions.reduce_sum(b, axis=_axis(axis), keepdims=keepdims)


def where(condition, x1, x2, /):
    a, b = _pair(x1, x2)
    return _A.where(_t(condition), a, b)


def take(x, indices, /, *, axis=None):
    x = _t(x)
    if axis is None:
        if x.ndim != 1:
            raise InvalidArgumentError("take: axis is required for arrays of more than 1 "
                                       "dimension")
        axis = 0
    idx = _t(indices)
    if idx.dtype.is_integer and not idx.dtype.is_unsigned:
        # the standard's indices are in [-n, n): a negative one counts from the end
        n = int(x.shape[axis])
        wrap = _M.logical_and(_M.less(idx, 0), _M.greater_equal(idx, _t(-n, idx.dtype)))
        idx = _A.where(wrap, _M.add(idx, _t(n, idx.dtype)), idx)   # (below -n: the error)
    return _A.gather(x, idx, axis=axis)


# --- bitwise, sorting, scans ----------------------------------------------------------------

bitwise_and = _binary(_M.bitwise_and)
bitwise_or = _binary(_M.bitwise_or)
bitwise_xor = _binary(_M.bitwise_xor)
bitwise_left_shift = _binary(_M.left_shift)
bitwise_right_shift = _binary(_M.right_shift)


def bitwise_invert(x, /):
    """``~x`` (logical NOT for bools)."""
    return _M.invert(_t(x))


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """Indices (int64) that sort ``x`` along ``axis``; always stable."""
    return _A.argsort(_t(x), axis, "DESCENDING" if descending else "ASCENDING")


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """``x`` sorted along ``axis`` (differentiable)."""
    return _A.sort(_t(x), axis, "DESCENDING" if descending else "ASCENDING")


def take_along_axis(x, indices, /, *, axis=-1):
    """``x``'s elements at ``indices`` along ``axis`` (same rank; other axes broadcast)."""
    x, idx = _t(x), _t(indices)
    n = x.ndim
    if idx.ndim != n:
        raise InvalidArgumentError(f"take_along_axis: indices have rank {idx.ndim}, x has "
                                   f"rank {n}; they must match")
    ax = axis % n
    xs = [int(d) for d in x.shape]
    ishape = [int(d) for d in idx.shape]
    lead = [_builtins.max(a, b) for i, (a, b) in enumerate(zip(xs, ishape)) if i != ax]
    xt = moveaxis(x, ax, -1)
    it = moveaxis(idx, ax, -1)
    xt = broadcast_to(xt, tuple(lead) + (xs[ax],))
    it = broadcast_to(it, tuple(lead) + (ishape[ax],))
    rows = int(_np.prod(lead, dtype=_np.int64))
    it = _M.cast(_A.reshape(it, [rows, ishape[ax]]), int64)
    it = _M.add(_M.mod(it, xs[ax]), _constant((_np.arange(rows) * xs[ax])[:, None],
                                             dtype=int64, device=x.device))
    out = _A.gather(_A.reshape(xt, [-1]), it)
    return moveaxis(_A.reshape(out, lead + [ishape[ax]]), -1, ax)


def _cumulative(op, x, axis, dtype, include_initial, fill, name):
    x = _t(x)
    if axis is None:
        if x.ndim > 1:
            raise InvalidArgumentError(f"{name}: axis is required for arrays of more than 1 "
                                       "dimension")
        axis = 0
    dt = _as_dtype(dtype)
    if dt is None:
        dt = _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    out = op(x, axis)
    if include_initial:
        shape = [int(d) for d in x.shape]
        shape[axis] = 1
        out = _A.concat([_full(tuple(shape), fill, out.dtype, x.device), out], axis)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running sums along ``axis`` (differentiable)."""
    return _cumulative(_A.cumsum, x, axis, dtype, include_initial, 0, "cumulative_sum")


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running products along ``axis``."""
    return _cumulative(_A.cumprod, x, axis, dtype, include_initial, 1, "cumulative_prod")


# --- data-dependent shapes --------------------------------------------------------------------

class UniqueAllResult(tuple):
    """``(values, indices, inverse_indices, counts)``, also by name."""

    def __new__(cls, values, indices, inverse_indices, counts):
        return super().__new__(cls, (values, indices, inverse_indices, counts))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])
    inverse_indices = property(lambda self: self[2])
    counts = property(lambda self: self[3])


class UniqueCountsResult(tuple):
    def __new__(cls, values, counts):
        return super().__new__(cls, (values, counts))

    values = property(lambda self: self[0])
    counts = property(lambda self: self[1])


class UniqueInverseResult(tuple):
    def __new__(cls, values, inverse_indices):
        return super().__new__(cls, (values, inverse_indices))

    values = property(lambda self: self[0])
    inverse_indices = property(lambda self: self[1])


def unique_all(x, /):
    """Sorted distinct values of the flattened ``x``, their first indices, each
    element's index among them (shaped like ``x``) and their counts (nan: distinct)."""
    return UniqueAllResult(*_A.unique_all(_t(x)))


def unique_counts(x, /):
    r = unique_all(x)
    return UniqueCountsResult(r.values, r.counts)


def unique_inverse(x, /):
    r = unique_all(x)
    return UniqueInverseResult(r.values, r.inverse_indices)


def unique_values(x, /):
    return unique_all(x).values


def nonzero(x, /):
    """A tuple of int64 index arrays, one per axis, of the non-zero elements."""
    x = _t(x)
    if x.ndim == 0:
        raise InvalidArgumentError("nonzero: a 0-d array has no axes to index (the standard "
                                   "leaves it undefined); reshape it to (1,)")
    idx = _A.nonzero(x)
    return tuple(idx[:, i] for i in range(x.ndim))


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Insertion indices of ``x2`` into the 1-D ascending ``x1`` (``sorter``: indices
    that sort ``x1``)."""
    a, v = _pair(x1, x2)
    if sorter is not None:
        a = _A.gather(a, _t(sorter))
    return _A.searchsorted(a, v, side=side)


def isin(x1, x2, /, *, invert=False):
    """Whether each element of ``x1`` occurs in ``x2`` (compared elementwise: every
    backend, no sort)."""
    a, b = _pair(x1, x2)
    eq = _M.equal(_A.expand_dims(a, -1), _A.reshape(b, [-1]))
    out = _ops.reductions.reduce_any(eq, axis=-1)
    return _M.logical_not(out) if invert else out


# --- the namespace's info object -------------------------------------------------------------

class _NamespaceInfo:
    """``__array_namespace_info__()``: capabilities, devices and dtypes."""

    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": 64}

    def default_device(self):
        return str(_devs.current_device() or _devs.default_device())

    def devices(self):
        return [d.name for d in _devs.list_devices()] if hasattr(_devs, "list_devices") \
            else [self.default_device()]

    def default_dtypes(self, *, device=None):
        return {"real floating": float32, "complex floating": complex64, "integral": int64,
                "indexing": int64}

    def dtypes(self, *, device=None, kind=None):
        out = {d.name: d for d in _ALL if d is not float16}
        if device is not None:      # those the device's backend stores
            dev = _devs.get_device(str(device))
            out = {k: v for k, v in out.items()
                   if dev.backend.dtype_unsupported(dev, v) is None}
        if kind is None:
            return out
        return {k: v for k, v in out.items() if isdtype(v, kind)}


def __array_namespace_info__():
    return _NamespaceInfo()


def _check_version(api_version):
    """This module, for ``Tensor.__array_namespace__(api_version=...)``."""
    if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
        raise UnimplementedError(f"tapeflow.numpy implements the array API 2024.12, not "
                                 f"{api_version!r}")
    return _sys.modules[__name__]


from . import linalg  # noqa: E402  (the extension; it uses the functions above)
from . import fft  # noqa: E402
