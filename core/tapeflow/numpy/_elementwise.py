"""``tapeflow.numpy``'s data types, constants, promotion (the "array_api" mode of
tapeflow's one lattice, docs/dtypes.md), dtype queries and conversion helpers, and the
elementwise functions built on them (arithmetic, comparisons, transcendental, rounding,
bitwise)."""

from __future__ import annotations

import builtins as _builtins
import math as _math

import numpy as _np

from .. import ops as _A
from ..ops import math as _M
from .. import dtypes as _dt
from ..runtime import devices as _devs
from ..runtime.dispatch import constant as _constant
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.tensor import Tensor as _Tensor
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
    """The dtype of a lone Python scalar: bool, int64, or the default float or complex
    dtype (:func:`_default_float`)."""
    return _dt.result_type(s, mode="array_api")


def _default_float(kind=float):
    """The namespace's default float (``kind=complex``: complex) dtype: float32
    (complex64); NumPy's float64 (complex128) after
    ``tf.experimental.numpy.experimental_enable_numpy_behavior()`` (docs/array-api.md)."""
    return _dt.DEFAULTS["array_api"]["alone"][_dt.WEAK_FLOAT if kind is float
                                              else _dt.WEAK_COMPLEX]


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
    the implementation; we compute in the default float (float32 unless NumPy behaviour
    is on), as TensorFlow's NumPy API does for int32 (and float64 for int64)."""
    x = _t(x)
    if x.dtype.is_inexact:
        return x
    return _M.cast(x, float64 if x.dtype in (int64, uint32, uint64) else _default_float())


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


def _all_like(x, value):
    """``value`` (a bool) in the shape of ``x``, on ``x``'s device: isfinite, isinf and
    isnan of an integer or bool array."""
    with _devs.device(str(x.device)):
        return _A.fill([int(d) for d in x.shape], _constant(value, dtype=bool))


def isfinite(x, /):
    x = _t(x)
    return _M.is_finite(x) if x.dtype.is_inexact else _all_like(x, True)


def isinf(x, /):
    x = _t(x)
    return _M.is_inf(x) if x.dtype.is_inexact else _all_like(x, False)


def isnan(x, /):
    x = _t(x)
    return _M.is_nan(x) if x.dtype.is_inexact else _all_like(x, False)


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


# --- bitwise, sorting, scans ----------------------------------------------------------------

bitwise_and = _binary(_M.bitwise_and)
bitwise_or = _binary(_M.bitwise_or)
bitwise_xor = _binary(_M.bitwise_xor)
bitwise_left_shift = _binary(_M.left_shift)
bitwise_right_shift = _binary(_M.right_shift)


def bitwise_invert(x, /):
    """``~x`` (logical NOT for bools)."""
    return _M.invert(_t(x))
