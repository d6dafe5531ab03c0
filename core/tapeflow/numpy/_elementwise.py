"""``tapeflow.numpy``'s elementwise functions (arithmetic, comparisons, transcendental,
rounding, bitwise)."""

from __future__ import annotations

from ..ops import math as _M
from ..errors import InvalidTypeError
from ._base import _binary, _float_input, _float_unary, _pair, _t, bool  # noqa: A004 (the dtype)
from ._creation import ones_like, zeros_like


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


# --- bitwise, sorting, scans ----------------------------------------------------------------

bitwise_and = _binary(_M.bitwise_and)
bitwise_or = _binary(_M.bitwise_or)
bitwise_xor = _binary(_M.bitwise_xor)
bitwise_left_shift = _binary(_M.left_shift)
bitwise_right_shift = _binary(_M.right_shift)


def bitwise_invert(x, /):
    """``~x`` (logical NOT for bools)."""
    return _M.invert(_t(x))
