"""Elementwise math: signatures, gradients and public functions (``tf.add`` ...).

Gradient rules are written with tapeflow ops, so they run on every device and
are differentiable again (higher order for free). Broadcasting is undone by the
core for ops declared ``broadcast=True``; rules return full-shape gradients.

>>> import tapeflow as tf
>>> print(tf.add(tf.constant([[1, 2], [3, 4]]), 1))
tf.Tensor(
[[2 3]
 [4 5]], shape=(2, 2), dtype=int32)
"""

from __future__ import annotations

from . import dtypes as _dt
from ._builtin import defop
from .execute import binary, execute, make_binary_operator
from .tensor import Tensor, Variable

__all__ = ["add", "subtract", "multiply", "divide", "truediv", "negative", "cast"]

_E: dict = {}


# --- binary arithmetic -------------------------------------------------------------

def _add_grad(ctx, dy):
    return dy, dy


def _sub_grad(ctx, dy):
    return dy, negative(dy)


def _mul_grad(ctx, dy):
    x, y = ctx.inputs
    return multiply(dy, y), multiply(dy, x)


def _div_grad(ctx, dy):
    x, y = ctx.inputs
    if not x.dtype.is_floating:
        return None, None
    gx = divide(dy, y)
    return gx, negative(multiply(gx, divide(x, y)))


_ADD = defop("Add", inputs=("x", "y"), broadcast=True, grad=_add_grad)
_SUB = defop("Sub", inputs=("x", "y"), broadcast=True, grad=_sub_grad)
_MUL = defop("Mul", inputs=("x", "y"), broadcast=True, grad=_mul_grad)
_DIV = defop("RealDiv", inputs=("x", "y"), broadcast=True, grad=_div_grad)


def add(x, y, name=None):
    """``x + y`` with NumPy broadcasting.

    >>> import tapeflow as tf
    >>> print(tf.add(1, 1))
    tf.Tensor(2, shape=(), dtype=int32)
    """
    return binary(_ADD, x, y)


def subtract(x, y, name=None):
    """``x - y`` with broadcasting."""
    return binary(_SUB, x, y)


def multiply(x, y, name=None):
    """``x * y`` with broadcasting.

    >>> import tapeflow as tf
    >>> print(tf.multiply(3., 3.))
    tf.Tensor(9.0, shape=(), dtype=float32)
    """
    return binary(_MUL, x, y)


def divide(x, y, name=None):
    """True division ``x / y`` (integers divide to float64, as NumPy and TF do)."""
    return binary(_DIV, x, y)


truediv = divide


def _neg_grad(ctx, dy):
    return negative(dy)


_NEG = defop("Neg", inputs=("x",), grad=_neg_grad)


def negative(x, name=None):
    """``-x``."""
    return execute(_NEG, (x,))


# --- cast --------------------------------------------------------------------------

def _cast_grad(ctx, dy):
    x = ctx.inputs[0]
    if not x.dtype.is_floating or not dy.dtype.is_floating:
        return None
    return cast(dy, x.dtype)


_CAST = defop("Cast", inputs=("x",), attrs={"dtype": None}, dtype_rule="none", grad=_cast_grad)


def cast(x, dtype, name=None):
    """Convert to ``dtype`` (floats to ints truncate toward zero, as in TF).

    >>> import tapeflow as tf
    >>> print(tf.cast([1.7, -1.7], tf.int32))
    tf.Tensor([ 1 -1], shape=(2,), dtype=int32)
    """
    dt = _dt.as_dtype(dtype)
    if type(x) is Tensor and x._data.dtype == dt.np:
        return x
    return execute(_CAST, (x,), {"dtype": dt})


# --- operators -----------------------------------------------------------------------

def _install_operators():
    def fwd(op):
        return make_binary_operator(op)

    def rev(op):
        return make_binary_operator(op, reverse=True)

    table = {"add": _ADD, "sub": _SUB, "mul": _MUL, "truediv": _DIV}
    for cls in (Tensor, Variable):
        for name, op in table.items():
            setattr(cls, f"__{name}__", fwd(op))
            setattr(cls, f"__r{name}__", rev(op))
        cls.__neg__ = lambda self: negative(self)
        cls.__pos__ = lambda self: self


_install_operators()

# Reductions live in their own module but belong to the tf.math namespace.
from .reductions import *  # noqa: E402,F401,F403
from . import reductions as _reductions  # noqa: E402

__all__ += _reductions.__all__
