"""``tf.math``: elementwise math -- signatures, gradients and public functions
(``tf.add`` ...).

The bottom op module: it imports no other op module. ``tf.math`` is this module
(``import tapeflow.math``); TensorFlow's namespace also holds the reductions
(:mod:`tapeflow.ops.reductions`) and ``unsorted_segment_sum``
(:mod:`tapeflow.ops.array_gather`), which are declared above this module (their
gradients use its ops): :mod:`tapeflow.ops` adds them to this module's namespace and
``__all__`` when it loads, so ``tf.math.reduce_sum`` is ``tf.reduce_sum``.

Gradient rules are written with tapeflow ops, so they run on every device and
are differentiable again (higher order for free). Broadcasting is undone by the
core for ops declared ``broadcast=True``; rules return full-shape gradients.
Rules return ``None`` for integer inputs (integers have no gradient).

Tensor's and Variable's operators (``+ - * / // % **``, comparisons, ``& | ^ ~``)
dispatch to the ops declared here; they are defined in :mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> print(tf.add(tf.constant([[1, 2], [3, 4]]), 1))
tf.Tensor(
[[2 3]
 [4 5]], shape=(2, 2), dtype=int32)
>>> x = tf.constant([1., 4.])
>>> print(x ** 2 - 2 * x)
tf.Tensor([-1.  8.], shape=(2,), dtype=float32)
>>> print(x >= 2.)
tf.Tensor([False  True], shape=(2,), dtype=bool)
"""

# Long file: the elementwise ops of tf.math -- some 70 ops, each one declaration block (its
# defop with the gradient, JVP and batching rule) beside its public function and example.
# The arithmetic, unary and complex sections' gradients call each other (Pow's uses log,
# Log's divide, Mul's conj) and cast and the comparisons, so they are one module (about 900
# lines even without the array API's extras, bitwise and comparisons).

from __future__ import annotations

import math as _pymath

import numpy as np

from .. import dtypes as _dt
from .library import BROADCASTING, defop, elementwise_jvp
from ..errors import InvalidArgumentError, InvalidTypeError, TapeflowError
from ..runtime.dispatch import as_tensor_list, binary, constant, convert_to_tensor, execute
from ..runtime.registry import Linear, Multilinear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = [
    # arithmetic
    "add", "subtract", "multiply", "divide", "truediv", "floordiv", "floor_divide", "floor_div",
    "mod", "floormod", "pow", "maximum", "minimum", "squared_difference", "atan2", "add_n",
    "negative", "cast", "bitcast",
    # unary
    "abs", "sign", "square", "sqrt", "rsqrt", "exp", "log", "log1p", "expm1", "sin", "cos",
    "tan", "tanh", "sigmoid", "softplus", "reciprocal", "floor", "ceil", "round", "erf",
    "is_nan", "is_finite", "is_inf",
    # inverse trigonometric, hyperbolic, logarithms, rounding, sign (the array API's set)
    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10",
    "trunc", "signbit", "copysign", "hypot", "logaddexp", "nextafter",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
    # comparison and logic
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not",
    # complex numbers
    "complex", "real", "imag", "conj", "angle",
]

_E: dict = {}


def _fl(t):
    """True when ``t`` (an op input) is floating point or complex, i.e. has a gradient."""
    return t._data.dtype.kind in "fc"


# --- shape inference for broadcasting binary ops (used to explain bad input) ----------

def _broadcast_shape(a, b):
    """NumPy broadcast of two shapes, or None when they are incompatible."""
    a = tuple(a)
    b = tuple(b)
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    else:
        b = (1,) * (len(a) - len(b)) + b
    out = []
    for da, db in zip(a, b):
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            return None
    return tuple(out)


def _bcast_infer(out_dtype):
    """``infer`` for a broadcasting binary op; ``out_dtype``: None (the inputs'),
    a DType, or ``"div"`` (integers divide to float64)."""
    def infer(shapes, dtypes, attrs):
        s = _broadcast_shape(shapes[0], shapes[1])
        if s is None:
            raise InvalidArgumentError(
                f"Incompatible shapes: {list(shapes[0])} vs. {list(shapes[1])}")
        d = dtypes[0]
        if out_dtype == "div":
            d = d if d.is_floating else _dt.float64
        elif out_dtype is not None:
            d = out_dtype
        return [(s, d)]
    return infer


_SAME = _bcast_infer(None)
_BOOL = _bcast_infer(_dt.bool_)


def _no_grad(ctx, *dys):
    # Non-differentiable ops are never recorded; should one be recorded anyway, it
    # stops gradients (None per input) instead of raising.
    return (None,) * len(ctx.inputs)


def _conj(t):
    """``conj(t)`` for a complex ``t``; ``t`` itself otherwise (nothing recorded)."""
    return execute(_CONJ, (t,)) if t.dtype.is_complex else t


def _holomorphic(grad):
    """The gradient rule of a holomorphic op for complex inputs from its real rule
    ``grad`` (linear in ``dy``): TensorFlow's ``dz = dy * conj(f'(z))`` is
    ``conj(grad(conj(dy)))``. Real gradients go straight to ``grad``. Each op whose
    complex kernel computes a holomorphic function declares its gradient so
    (``_holomorphic(_exp_grad)``); the linear ops (Add, Sub, Neg, sums, reshapes...) need
    nothing, and Abs/Real/Imag/Conj/Complex have their own rules."""
    def rule(ctx, dy, *more):
        if not more:                    # (one output: the common case, without a loop)
            if dy is None or dy._data.dtype.kind != "c":
                return grad(ctx, dy)
            dys = (dy,)
        else:
            dys = (dy, *more)
            for d in dys:               # (a loop, not any(...): this is on every backward)
                if d is not None and d._data.dtype.kind == "c":
                    break
            else:
                return grad(ctx, *dys)
        out = grad(ctx, *[None if d is None else _conj(d) for d in dys])
        if isinstance(out, (tuple, list)):
            return type(out)(None if g is None else _conj(g) for g in out)
        return None if out is None else _conj(out)
    rule.__name__ = getattr(grad, "__name__", "rule")
    rule.__wrapped__ = grad
    return rule


def _bin(name, grad=None, infer=_SAME, differentiable=True, **kw):
    """A broadcasting binary op (``kw``: more of defop's arguments, ``elementwise``...)."""
    return defop(name, inputs=("x", "y"), broadcast=True, grad=grad or _no_grad, infer=infer,
                 differentiable=differentiable, **kw)


# --- binary arithmetic -------------------------------------------------------------

def _add_grad(ctx, dy):
    return dy, dy


def _sub_grad(ctx, dy):
    return dy, execute(_NEG, (dy,))


def _mul_grad(ctx, dy):
    # (binary, not multiply: the gradients of the path users time skip a Python call)
    x, y = ctx.inputs
    nx, ny = ctx.needs or (True, True)
    return binary(_MUL, dy, y) if nx else None, binary(_MUL, dy, x) if ny else None


def _div_grad(ctx, dy):
    x, y = ctx.inputs
    if not _fl(x):
        return None, None
    gx = divide(dy, y)
    return gx, negative(multiply(gx, divide(x, y)))


def _mod_grad(ctx, dy):
    x, y = ctx.inputs
    if not _fl(x):
        return None, None
    return dy, negative(multiply(dy, floordiv(x, y)))


def _log_pos(x):
    """``log(x)`` where ``x > 0``, else 0 -- differentiable, and never NaN/inf for
    ``x <= 0`` (the log sees the smallest subnormal there)."""
    tiny = x.dtype.np.type(np.finfo(x.dtype.np).smallest_subnormal)
    mask = cast(greater(x, 0), x.dtype)
    return multiply(log(maximum(x, tiny)), mask)


def _pow_grad(ctx, dy):
    x, y = ctx.inputs
    if not _fl(x):
        return None, None
    z = ctx.outputs[0]
    gx = multiply(dy, multiply(y, pow(x, subtract(y, 1))))
    if x.dtype.is_complex:              # log(0) = -inf where z = 0: 0 there (TensorFlow's)
        nz = not_equal(x, 0)
        lg = multiply(log(add(x, cast(logical_not(nz), x.dtype))), cast(nz, x.dtype))
    else:
        lg = _log_pos(x)
    gy = multiply(dy, multiply(z, lg))
    return gx, gy


def _maximum_grad(ctx, dy):
    x, y = ctx.inputs
    if not _fl(x):
        return None, None
    m = cast(greater_equal(x, y), dy.dtype)      # ties go to x, as in TF
    return multiply(dy, m), multiply(dy, subtract(1, m))


def _minimum_grad(ctx, dy):
    x, y = ctx.inputs
    if not _fl(x):
        return None, None
    m = cast(less_equal(x, y), dy.dtype)
    return multiply(dy, m), multiply(dy, subtract(1, m))


def _sqdiff_grad(ctx, dy):
    x, y = ctx.inputs
    if not _fl(x):
        return None, None
    g = multiply(multiply(dy, subtract(x, y)), 2)
    return g, negative(g)


def _atan2_grad(ctx, dy):
    y, x = ctx.inputs
    d = divide(dy, add(square(x), square(y)))
    return multiply(x, d), negative(multiply(y, d))


def _addn_grad(ctx, dy):
    return (dy,) * len(ctx.inputs)


_ADD = _bin("Add", _add_grad, elementwise=True, jvp=Linear())
_SUB = _bin("Sub", _sub_grad, elementwise=True, jvp=Linear())
_MUL = _bin("Mul", _holomorphic(_mul_grad), elementwise=True, jvp=Multilinear())
_DIV = _bin("RealDiv", _holomorphic(_div_grad), infer=_bcast_infer("div"), elementwise=True)
_FLOORDIV = _bin("FloorDiv", differentiable=False)
_MOD = _bin("FloorMod", _mod_grad)
_MOD.def_jvp(elementwise_jvp(_MOD))       # (not fusable, but a diagonal Jacobian)
_POW = _bin("Pow", _holomorphic(_pow_grad), elementwise=True)
_MAXIMUM = _bin("Maximum", _maximum_grad, elementwise=True)
_MINIMUM = _bin("Minimum", _minimum_grad, elementwise=True)
_SQDIFF = _bin("SquaredDifference", _sqdiff_grad, elementwise=True)
_ATAN2 = defop("Atan2", inputs=("y", "x"), broadcast=True, grad=_atan2_grad, infer=_SAME,
               elementwise=True)
_ADDN = defop("AddN", inputs=("*inputs",), grad=_addn_grad, jvp=Linear())


@_ADDN.def_batch
def _addn_batch(ctx, *xs):
    # AddN takes inputs of one shape: the batched ones are summed by the op, and each
    # unbatched one is added after it, broadcasting over the batch (what the op does
    # per example); no op of a module above this one is needed
    batched = [x for x, b in zip(xs, ctx.batched) if b]
    y = batched[0] if len(batched) == 1 else execute(ctx.op, batched, ctx.attrs)
    for x, b in zip(xs, ctx.batched):
        if not b:
            y = add(y, x)
    return y


def add(x, y, name=None):
    """``x + y`` with NumPy broadcasting.

    >>> import tapeflow as tf
    >>> print(tf.add(1, 1))
    tf.Tensor(2, shape=(), dtype=int32)
    """
    return binary(_ADD, x, y)


def subtract(x, y, name=None):
    """``x - y`` with broadcasting.

    >>> import tapeflow as tf
    >>> print(tf.subtract([5, 6], 1))
    tf.Tensor([4 5], shape=(2,), dtype=int32)
    """
    return binary(_SUB, x, y)


def multiply(x, y, name=None):
    """``x * y`` with broadcasting.

    >>> import tapeflow as tf
    >>> print(tf.multiply(3., 3.))
    tf.Tensor(9.0, shape=(), dtype=float32)
    """
    return binary(_MUL, x, y)


def divide(x, y, name=None):
    """True division ``x / y`` (integers divide to float64, as NumPy and TF do).

    >>> import tapeflow as tf
    >>> print(tf.divide(tf.constant([3, 4]), 2))
    tf.Tensor([1.5 2. ], shape=(2,), dtype=float64)
    """
    return binary(_DIV, x, y)


truediv = divide


def floordiv(x, y, name=None):
    """``x // y``: division rounded toward negative infinity (op ``FloorDiv``).
    Not differentiable. Integer division by zero raises InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.math.floordiv([7, -7], 2))
    tf.Tensor([ 3 -4], shape=(2,), dtype=int32)
    """
    return binary(_FLOORDIV, x, y)


floor_divide = floor_div = floordiv


def mod(x, y, name=None):
    """``x % y`` with Python semantics: the result has the sign of ``y``
    (op ``FloorMod``).

    >>> import tapeflow as tf
    >>> print(tf.math.mod([7, -7], 3))
    tf.Tensor([1 2], shape=(2,), dtype=int32)
    """
    return binary(_MOD, x, y)


floormod = mod


def pow(x, y, name=None):  # noqa: A001  (tf.pow)
    """``x ** y`` elementwise. Integers to negative integer powers raise
    InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.pow(tf.constant([2., 3.]), 2))
    tf.Tensor([4. 9.], shape=(2,), dtype=float32)
    """
    return binary(_POW, x, y)


def maximum(x, y, name=None):
    """Elementwise maximum (the gradient goes to ``x`` where ``x >= y``).

    >>> import tapeflow as tf
    >>> print(tf.maximum([1., 5.], 3.))
    tf.Tensor([3. 5.], shape=(2,), dtype=float32)
    """
    return binary(_MAXIMUM, x, y)


def minimum(x, y, name=None):
    """Elementwise minimum (the gradient goes to ``x`` where ``x <= y``).

    >>> import tapeflow as tf
    >>> print(tf.minimum([1., 5.], 3.))
    tf.Tensor([1. 3.], shape=(2,), dtype=float32)
    """
    return binary(_MINIMUM, x, y)


def squared_difference(x, y, name=None):
    """``(x - y) ** 2`` elementwise.

    >>> import tapeflow as tf
    >>> print(tf.squared_difference([1., 5.], 3.))
    tf.Tensor([4. 4.], shape=(2,), dtype=float32)
    """
    return binary(_SQDIFF, x, y)


def atan2(y, x, name=None):
    """The angle of the point ``(x, y)``: ``arctan(y / x)`` in the right quadrant.

    >>> import tapeflow as tf
    >>> y = tf.atan2(1., -1.)                   # 3 pi / 4
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor(2.3562, shape=(), dtype=float32)
    """
    return binary(_ATAN2, y, x)


def add_n(inputs, name=None):
    """The sum of a list of tensors of one shape (op ``AddN``).

    >>> import tapeflow as tf
    >>> print(tf.add_n([[1., 2.], [3., 4.], [5., 6.]]))
    tf.Tensor([ 9. 12.], shape=(2,), dtype=float32)
    """
    vals = as_tensor_list(inputs, "AddN", "add_n's inputs")
    if not vals:
        raise InvalidArgumentError("add_n needs at least one input tensor", op="AddN")
    if len(vals) == 1 and isinstance(vals[0], (list, tuple)):
        vals = (convert_to_tensor(vals[0]),)
    return execute(_ADDN, vals)


# --- unary -----------------------------------------------------------------------

def _neg_grad(ctx, dy):
    return negative(dy)


def _abs_grad(ctx, dy):
    x = ctx.inputs[0]
    if x.dtype.is_complex:          # d|z| = z / |z| (0 at 0), TensorFlow's convention
        return multiply(cast(dy, x.dtype), sign(x))     # (sign(z) = z / |z|, the standard's)
    return multiply(dy, sign(x)) if _fl(x) else None


def _square_grad(ctx, dy):
    x = ctx.inputs[0]
    return multiply(multiply(dy, x), 2) if _fl(x) else None


def _sqrt_grad(ctx, dy):
    return divide(multiply(dy, 0.5), ctx.outputs[0])


def _rsqrt_grad(ctx, dy):
    z = ctx.outputs[0]
    return multiply(multiply(dy, -0.5), multiply(square(z), z))


def _exp_grad(ctx, dy):
    return binary(_MUL, dy, ctx.outputs[0])


def _log_grad(ctx, dy):
    return divide(dy, ctx.inputs[0])


def _log1p_grad(ctx, dy):
    return divide(dy, add(ctx.inputs[0], 1))


def _expm1_grad(ctx, dy):
    return multiply(dy, exp(ctx.inputs[0]))


def _sin_grad(ctx, dy):
    return multiply(dy, cos(ctx.inputs[0]))


def _cos_grad(ctx, dy):
    return negative(multiply(dy, sin(ctx.inputs[0])))


def _tan_grad(ctx, dy):
    return multiply(dy, add(square(ctx.outputs[0]), 1))


def _tanh_grad(ctx, dy):
    return multiply(dy, subtract(1, square(ctx.outputs[0])))


def _sigmoid_grad(ctx, dy):
    z = ctx.outputs[0]
    return multiply(dy, multiply(z, subtract(1, z)))


def _softplus_grad(ctx, dy):
    return multiply(dy, sigmoid(ctx.inputs[0]))


def _reciprocal_grad(ctx, dy):
    return negative(multiply(dy, square(ctx.outputs[0])))


_TWO_OVER_SQRT_PI = 2.0 / _pymath.sqrt(_pymath.pi)


def _erf_grad(ctx, dy):
    x = ctx.inputs[0]
    return multiply(dy, multiply(exp(negative(square(x))), _TWO_OVER_SQRT_PI))


def _abs_jvp(ctx, t):
    x = ctx.inputs[0]
    if not x.dtype.is_complex:
        return multiply(t, sign(x))
    a = ctx.outputs[0]                  # d|z| = Re(conj(z) dz) / |z|, 0 at 0
    safe = add(a, cast(equal(a, 0), a.dtype))
    return divide(real(multiply(conj(x), t)), safe)



def _un(name, grad=None, differentiable=True, **kw):
    """A unary op (``kw``: more of defop's arguments, ``elementwise``, ``jvp``...)."""
    return defop(name, inputs=("x",), grad=grad or _no_grad, differentiable=differentiable,
                 **kw)


_NEG = _un("Neg", _neg_grad, elementwise=True, jvp=Linear())
_ABS = _un("Abs", _abs_grad, elementwise=True, jvp=_abs_jvp)
_SIGN = _un("Sign", differentiable=False, elementwise=True)
_SQUARE = _un("Square", _holomorphic(_square_grad), elementwise=True)
_SQRT = _un("Sqrt", _holomorphic(_sqrt_grad), elementwise=True)
_RSQRT = _un("Rsqrt", _holomorphic(_rsqrt_grad), elementwise=True)
_EXP = _un("Exp", _holomorphic(_exp_grad), elementwise=True)
_LOG = _un("Log", _holomorphic(_log_grad), elementwise=True)
_LOG1P = _un("Log1p", _holomorphic(_log1p_grad), elementwise=True)
_EXPM1 = _un("Expm1", _holomorphic(_expm1_grad), elementwise=True)
_SIN = _un("Sin", _holomorphic(_sin_grad), elementwise=True)
_COS = _un("Cos", _holomorphic(_cos_grad), elementwise=True)
_TAN = _un("Tan", _holomorphic(_tan_grad), elementwise=True)
_TANH = _un("Tanh", _holomorphic(_tanh_grad), elementwise=True)
_SIGMOID = _un("Sigmoid", _sigmoid_grad, elementwise=True)
_SOFTPLUS = _un("Softplus", _softplus_grad, elementwise=True)
_RECIPROCAL = _un("Reciprocal", _holomorphic(_reciprocal_grad), elementwise=True)
_FLOOR = _un("Floor", differentiable=False, elementwise=True)
_CEIL = _un("Ceil", differentiable=False, elementwise=True)
_ROUND = _un("Round", differentiable=False, elementwise=True)
_ERF = _un("Erf", _erf_grad, elementwise=True)
_IS_NAN = _un("IsNan", differentiable=False, elementwise=True)
_IS_FINITE = _un("IsFinite", differentiable=False, elementwise=True)
_IS_INF = _un("IsInf", differentiable=False, elementwise=True)


# --- complex numbers -------------------------------------------------------------------
# Gradients follow TensorFlow's convention for a real loss L of z = x + iy: the gradient
# is dL/dx + i dL/dy (PyTorch's too; JAX returns its conjugate).

def _complex_grad(ctx, dz):
    return real(dz), imag(dz)


def _real_grad(ctx, dy):
    return cast(dy, ctx.inputs[0].dtype)


def _imag_grad(ctx, dy):
    return execute(_COMPLEX, (_zeros_of(dy), dy))


def _conj_grad(ctx, dy):
    return _conj(dy)


def _zeros_of(t):
    return constant(np.zeros(tuple(t.shape), t.dtype.np), device=t.device)


def _complex_infer(shapes, dtypes, attrs):
    s = _broadcast_shape(shapes[0], shapes[1])
    if s is None:
        raise InvalidArgumentError(f"Incompatible shapes: {list(shapes[0])} vs. {list(shapes[1])}")
    return [(s, _dt.complex128 if dtypes[0] is _dt.float64 else _dt.complex64)]


_COMPLEX = defop("Complex", inputs=("real", "imag"), broadcast=True, grad=_complex_grad,
                 infer=_complex_infer, jvp=Linear())
_REAL = _un("Real", _real_grad, jvp=Linear(), batch=BROADCASTING)
_IMAG = _un("Imag", _imag_grad, jvp=Linear(), batch=BROADCASTING)
_CONJ = _un("Conj", _conj_grad, jvp=Linear(), batch=BROADCASTING)


def complex(real, imag, name=None):  # noqa: A001 (tf.complex)
    """``real + 1j * imag``: float32 parts give complex64, float64 parts complex128.

    >>> import tapeflow as tf
    >>> print(tf.complex([1.0, 2.0], [0.5, -1.0]))
    tf.Tensor([1.+0.5j 2.-1.j ], shape=(2,), dtype=complex64)
    """
    re, im = convert_to_tensor(real), convert_to_tensor(imag)
    for what, t in (("real", re), ("imag", im)):
        if t.dtype not in (_dt.float32, _dt.float64):
            raise InvalidArgumentError(
                f"tf.complex: the {what} part must be float32 or float64, got "
                f"{t.dtype.name}; tf.cast it first", op="Complex")
    return execute(_COMPLEX, (re, im))


def real(input, name=None):  # noqa: A002
    """The real part of a complex tensor; a real tensor comes back as it is.

    >>> import tapeflow as tf
    >>> print(tf.math.real(tf.constant([1 + 2j, -3j])))
    tf.Tensor([ 1. -0.], shape=(2,), dtype=float64)
    """
    x = convert_to_tensor(input)
    # (a string goes to the op, whose dtype check refuses it: text has no real part)
    return execute(_REAL, (x,)) if x.dtype.is_complex or x.dtype is _dt.string else x


def imag(input, name=None):  # noqa: A002
    """The imaginary part of a complex tensor; zeros of the same dtype for a real one.

    >>> import tapeflow as tf
    >>> print(tf.math.imag(tf.constant([1 + 2j, -3j])))
    tf.Tensor([ 2. -3.], shape=(2,), dtype=float64)
    """
    x = convert_to_tensor(input)
    return execute(_IMAG, (x,)) if x.dtype.is_complex else _zeros_of(x)


def conj(x, name=None):
    """The complex conjugate; a real tensor comes back as it is.

    >>> import tapeflow as tf
    >>> print(tf.math.conj(tf.constant([1 + 2j])))
    tf.Tensor([1.-2.j], shape=(1,), dtype=complex128)
    """
    x = convert_to_tensor(x)
    return execute(_CONJ, (x,)) if x.dtype.is_complex or x.dtype is _dt.string else x


def angle(input, name=None):  # noqa: A002
    """The argument (phase) of each element, ``atan2(imag, real)``: 0 or pi for reals.

    >>> import tapeflow as tf
    >>> print(tf.math.angle(tf.constant([1j, -1 + 0j])))
    tf.Tensor([1.57079633 3.14159265], shape=(2,), dtype=float64)
    """
    x = convert_to_tensor(input)
    return atan2(imag(x), real(x))


def negative(x, name=None):
    """``-x``.

    >>> import tapeflow as tf
    >>> print(tf.negative([1, -2]))
    tf.Tensor([-1  2], shape=(2,), dtype=int32)
    """
    return execute(_NEG, (x,))


def abs(x, name=None):  # noqa: A001  (tf.abs)
    """``|x|`` (the gradient is ``sign(x)``).

    >>> import tapeflow as tf
    >>> print(tf.abs([-1.5, 2.]))
    tf.Tensor([1.5 2. ], shape=(2,), dtype=float32)
    """
    return execute(_ABS, (x,))


def sign(x, name=None):
    """-1, 0 or 1 by the sign of ``x`` (not differentiable).

    >>> import tapeflow as tf
    >>> print(tf.sign([-3., 0., 2.]))
    tf.Tensor([-1.  0.  1.], shape=(3,), dtype=float32)
    """
    return execute(_SIGN, (x,))


def square(x, name=None):
    """``x * x``.

    >>> import tapeflow as tf
    >>> print(tf.square([2, 3]))
    tf.Tensor([4 9], shape=(2,), dtype=int32)
    """
    return execute(_SQUARE, (x,))


def sqrt(x, name=None):
    """Square root (floats).

    >>> import tapeflow as tf
    >>> print(tf.sqrt([4., 9.]))
    tf.Tensor([2. 3.], shape=(2,), dtype=float32)
    """
    return execute(_SQRT, (x,))


def rsqrt(x, name=None):
    """``1 / sqrt(x)`` (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.rsqrt([4., 16.]))
    tf.Tensor([0.5  0.25], shape=(2,), dtype=float32)
    """
    return execute(_RSQRT, (x,))


def exp(x, name=None):
    """``e ** x`` (floats).

    >>> import tapeflow as tf
    >>> print(tf.exp(0.))
    tf.Tensor(1.0, shape=(), dtype=float32)
    """
    return execute(_EXP, (x,))


def log(x, name=None):
    """Natural logarithm (floats); ``tf.log`` in TF1 spelling.

    >>> import tapeflow as tf
    >>> print(tf.log(1.))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """
    return execute(_LOG, (x,))


def log1p(x, name=None):
    """``log(1 + x)``, accurate for small ``x``.

    >>> import tapeflow as tf
    >>> float(tf.math.log1p(1e-10)) > 0
    True
    """
    return execute(_LOG1P, (x,))


def expm1(x, name=None):
    """``exp(x) - 1``, accurate for small ``x``.

    >>> import tapeflow as tf
    >>> print(tf.math.expm1(0.))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """
    return execute(_EXPM1, (x,))


def sin(x, name=None):
    """Sine (floats).

    >>> import tapeflow as tf
    >>> print(tf.sin(0.))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """
    return execute(_SIN, (x,))


def cos(x, name=None):
    """Cosine (floats).

    >>> import tapeflow as tf
    >>> print(tf.cos(0.))
    tf.Tensor(1.0, shape=(), dtype=float32)
    """
    return execute(_COS, (x,))


def tan(x, name=None):
    """Tangent (floats).

    >>> import tapeflow as tf
    >>> print(tf.tan(0.))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """
    return execute(_TAN, (x,))


def tanh(x, name=None):
    """Hyperbolic tangent (floats).

    >>> import tapeflow as tf
    >>> print(tf.tanh([0., 100.]))
    tf.Tensor([0. 1.], shape=(2,), dtype=float32)
    """
    return execute(_TANH, (x,))


def sigmoid(x, name=None):
    """``1 / (1 + exp(-x))``, stable for large ``|x|``.

    >>> import tapeflow as tf
    >>> print(tf.sigmoid([0., -1000., 1000.]))
    tf.Tensor([0.5 0.  1. ], shape=(3,), dtype=float32)
    """
    return execute(_SIGMOID, (x,))


def softplus(x, name=None):
    """``log(1 + exp(x))``, stable for large ``|x|``.

    >>> import tapeflow as tf
    >>> y = tf.math.softplus([0., 1000., -1000.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([6.931e-01 1.000e+03 0.000e+00], shape=(3,), dtype=float32)
    """
    return execute(_SOFTPLUS, (x,))


def reciprocal(x, name=None):
    """``1 / x`` (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.reciprocal([2., 4.]))
    tf.Tensor([0.5  0.25], shape=(2,), dtype=float32)
    """
    return execute(_RECIPROCAL, (x,))


def floor(x, name=None):
    """Round toward negative infinity (floats; not differentiable).

    >>> import tapeflow as tf
    >>> print(tf.floor([-1.5, 1.5]))
    tf.Tensor([-2.  1.], shape=(2,), dtype=float32)
    """
    return execute(_FLOOR, (x,))


def ceil(x, name=None):
    """Round toward positive infinity (floats; not differentiable).

    >>> import tapeflow as tf
    >>> print(tf.math.ceil([-1.5, 1.5]))
    tf.Tensor([-1.  2.], shape=(2,), dtype=float32)
    """
    return execute(_CEIL, (x,))


def round(x, name=None):  # noqa: A001  (tf.round)
    """Round half to even ("banker's rounding", as TF and NumPy); integers are
    returned unchanged. Not differentiable.

    >>> import tapeflow as tf
    >>> print(tf.round([0.5, 1.5, 2.5, -0.5]))
    tf.Tensor([ 0.  2.  2. -0.], shape=(4,), dtype=float32)
    """
    return execute(_ROUND, (x,))


def erf(x, name=None):
    """The Gauss error function (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.erf(0.))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """
    return execute(_ERF, (x,))


def is_nan(x, name=None):
    """Where ``x`` is NaN (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.is_nan([1., float("nan")]))
    tf.Tensor([False  True], shape=(2,), dtype=bool)
    """
    return execute(_IS_NAN, (x,))


def is_finite(x, name=None):
    """Where ``x`` is neither infinite nor NaN (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.is_finite([1., float("inf")]))
    tf.Tensor([ True False], shape=(2,), dtype=bool)
    """
    return execute(_IS_FINITE, (x,))


def is_inf(x, name=None):
    """Where ``x`` is +inf or -inf (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.is_inf([1., float("-inf")]))
    tf.Tensor([False  True], shape=(2,), dtype=bool)
    """
    return execute(_IS_INF, (x,))


# --- the array API's remaining elementwise functions (issue 18) -------------------------

_LN2 = _pymath.log(2.0)
_LN10 = _pymath.log(10.0)


def _asin_grad(ctx, dy):
    return multiply(dy, rsqrt(subtract(1, square(ctx.inputs[0]))))


def _acos_grad(ctx, dy):
    return negative(multiply(dy, rsqrt(subtract(1, square(ctx.inputs[0])))))


def _atan_grad(ctx, dy):
    return divide(dy, add(square(ctx.inputs[0]), 1))


def _sinh_grad(ctx, dy):
    return multiply(dy, cosh(ctx.inputs[0]))


def _cosh_grad(ctx, dy):
    return multiply(dy, sinh(ctx.inputs[0]))


def _asinh_grad(ctx, dy):
    return multiply(dy, rsqrt(add(square(ctx.inputs[0]), 1)))


def _acosh_grad(ctx, dy):
    # 1 / sinh(acosh(x)): sqrt(x^2 - 1) for real x > 1, and the right branch for complex
    return divide(dy, sinh(ctx.outputs[0]))


def _atanh_grad(ctx, dy):
    return divide(dy, subtract(1, square(ctx.inputs[0])))


def _log2_grad(ctx, dy):
    return divide(dy, multiply(ctx.inputs[0], _LN2))


def _log10_grad(ctx, dy):
    return divide(dy, multiply(ctx.inputs[0], _LN10))


def _copysign_grad(ctx, dy):
    # d/dx copysign(x, y) = +-1: +1 where x and the result have the same sign
    x = ctx.inputs[0]
    same = equal(signbit(x), signbit(ctx.outputs[0]))
    one = constant(1, dtype=x.dtype, device=x.device)
    return multiply(dy, copysign(one, cast(same, x.dtype) - 0.5)), None


def _hypot_grad(ctx, dy):
    x, y = ctx.inputs
    d = divide(dy, ctx.outputs[0])
    return multiply(x, d), multiply(y, d)


def _logaddexp_grad(ctx, dy):
    x, y = ctx.inputs
    out = ctx.outputs[0]
    return multiply(dy, exp(subtract(x, out))), multiply(dy, exp(subtract(y, out)))


_ASIN = _un("Asin", _holomorphic(_asin_grad), elementwise=True)
_ACOS = _un("Acos", _holomorphic(_acos_grad), elementwise=True)
_ATAN = _un("Atan", _holomorphic(_atan_grad), elementwise=True)
_SINH = _un("Sinh", _holomorphic(_sinh_grad), elementwise=True)
_COSH = _un("Cosh", _holomorphic(_cosh_grad), elementwise=True)
_ASINH = _un("Asinh", _holomorphic(_asinh_grad), elementwise=True)
_ACOSH = _un("Acosh", _holomorphic(_acosh_grad), elementwise=True)
_ATANH = _un("Atanh", _holomorphic(_atanh_grad), elementwise=True)
_LOG2 = _un("Log2", _holomorphic(_log2_grad), elementwise=True)
_LOG10 = _un("Log10", _holomorphic(_log10_grad), elementwise=True)
_TRUNC = _un("Trunc", differentiable=False, elementwise=True)
_SIGNBIT = _un("Signbit", differentiable=False, elementwise=True)
_COPYSIGN = _bin("Copysign", _copysign_grad, elementwise=True)
_HYPOT = _bin("Hypot", _hypot_grad, elementwise=True)
_LOGADDEXP = _bin("LogAddExp", _logaddexp_grad, elementwise=True)
_NEXTAFTER = _bin("NextAfter", differentiable=False, elementwise=True)


def asin(x, name=None):
    """Inverse sine, in ``[-pi/2, pi/2]`` (floats; nan outside ``[-1, 1]``).

    >>> import tapeflow as tf
    >>> y = tf.math.asin([0., 1.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.     1.5708], shape=(2,), dtype=float32)
    """
    return execute(_ASIN, (x,))


def acos(x, name=None):
    """Inverse cosine, in ``[0, pi]`` (floats; nan outside ``[-1, 1]``).

    >>> import tapeflow as tf
    >>> y = tf.math.acos([1., -1.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.     3.1416], shape=(2,), dtype=float32)
    """
    return execute(_ACOS, (x,))


def atan(x, name=None):
    """Inverse tangent, in ``(-pi/2, pi/2)`` (floats).

    >>> import tapeflow as tf
    >>> y = tf.math.atan([0., float("inf")])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.     1.5708], shape=(2,), dtype=float32)
    """
    return execute(_ATAN, (x,))


def sinh(x, name=None):
    """Hyperbolic sine (floats).

    >>> import tapeflow as tf
    >>> y = tf.math.sinh([0., 1.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.     1.1752], shape=(2,), dtype=float32)
    """
    return execute(_SINH, (x,))


def cosh(x, name=None):
    """Hyperbolic cosine (floats).

    >>> import tapeflow as tf
    >>> y = tf.math.cosh([0., 1.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([1.     1.5431], shape=(2,), dtype=float32)
    """
    return execute(_COSH, (x,))


def asinh(x, name=None):
    """Inverse hyperbolic sine (floats).

    >>> import tapeflow as tf
    >>> y = tf.math.asinh([0., 1.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.     0.8814], shape=(2,), dtype=float32)
    """
    return execute(_ASINH, (x,))


def acosh(x, name=None):
    """Inverse hyperbolic cosine (floats; nan below 1).

    >>> import tapeflow as tf
    >>> y = tf.math.acosh([1., 2.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.    1.317], shape=(2,), dtype=float32)
    """
    return execute(_ACOSH, (x,))


def atanh(x, name=None):
    """Inverse hyperbolic tangent (floats; +-inf at +-1, nan beyond).

    >>> import tapeflow as tf
    >>> y = tf.math.atanh([0., 0.5])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.     0.5493], shape=(2,), dtype=float32)
    """
    return execute(_ATANH, (x,))


def log2(x, name=None):
    """Base-2 logarithm (floats), within a few ulp as NumPy's (exact at powers of two
    on the usual kernels, but no backend guarantees it).

    >>> import tapeflow as tf
    >>> y = tf.math.log2([1., 8.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0. 3.], shape=(2,), dtype=float32)
    """
    return execute(_LOG2, (x,))


def log10(x, name=None):
    """Base-10 logarithm (floats). Within a few ulp, as NumPy's: not necessarily exact
    at powers of ten (float32 ``log10(1000.)`` is ``3.0000002`` on some CPUs).

    >>> import tapeflow as tf
    >>> y = tf.math.log10([1., 1000.])
    >>> print(tf.round(y * 1e4) / 1e4)          # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0. 3.], shape=(2,), dtype=float32)
    """
    return execute(_LOG10, (x,))


def trunc(x, name=None):
    """Round toward zero (floats; integers are their own truncation).

    >>> import tapeflow as tf
    >>> print(tf.math.trunc([-1.7, 1.7]))
    tf.Tensor([-1.  1.], shape=(2,), dtype=float32)
    """
    x = convert_to_tensor(x)
    if not x.dtype.is_floating and x.dtype is not _dt.string:
        return x
    return execute(_TRUNC, (x,))


def signbit(x, name=None):
    """Where the sign bit of ``x`` is set: True for -0.0, negative numbers and -nan.

    >>> import tapeflow as tf
    >>> print(tf.math.signbit([-0., 0., -2.]))
    tf.Tensor([ True False  True], shape=(3,), dtype=bool)
    """
    return execute(_SIGNBIT, (x,))


def copysign(x, y, name=None):
    """``|x|`` with the sign of ``y`` (floats; the sign of -0.0 and of nan counts).

    >>> import tapeflow as tf
    >>> print(tf.math.copysign([1., 2.], [-0., 3.]))
    tf.Tensor([-1.  2.], shape=(2,), dtype=float32)
    """
    return binary(_COPYSIGN, x, y)


def hypot(x, y, name=None):
    """``sqrt(x**2 + y**2)`` without overflow or underflow in the squares (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.hypot(3., 4.))
    tf.Tensor(5.0, shape=(), dtype=float32)
    """
    return binary(_HYPOT, x, y)


def logaddexp(x, y, name=None):
    """``log(exp(x) + exp(y))`` without overflow (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.logaddexp(1000., 1000.))
    tf.Tensor(1000.6932, shape=(), dtype=float32)
    """
    return binary(_LOGADDEXP, x, y)


def nextafter(x1, x2, name=None):
    """The next representable float after ``x1`` toward ``x2`` (floats).

    >>> import tapeflow as tf
    >>> print(tf.math.nextafter(1., 2.) > 1.)
    tf.Tensor(True, shape=(), dtype=bool)
    """
    return binary(_NEXTAFTER, x1, x2)


# --- bitwise (integers and bools; not differentiable) -----------------------------------

_BITAND = _bin("BitwiseAnd", differentiable=False)
_BITOR = _bin("BitwiseOr", differentiable=False)
_BITXOR = _bin("BitwiseXor", differentiable=False)
_INVERT = _un("Invert", differentiable=False, batch=BROADCASTING)
_LSHIFT = _bin("LeftShift", differentiable=False)
_RSHIFT = _bin("RightShift", differentiable=False)


def bitwise_and(x, y, name=None):
    """Bitwise AND of integers (logical AND of bools).

    >>> import tapeflow as tf
    >>> print(tf.bitwise_and([12, 10], [10, 6]))
    tf.Tensor([8 2], shape=(2,), dtype=int32)
    """
    return binary(_BITAND, x, y)


def bitwise_or(x, y, name=None):
    """Bitwise OR of integers (logical OR of bools).

    >>> import tapeflow as tf
    >>> print(tf.bitwise_or([12, 10], [10, 6]))
    tf.Tensor([14 14], shape=(2,), dtype=int32)
    """
    return binary(_BITOR, x, y)


def bitwise_xor(x, y, name=None):
    """Bitwise XOR of integers (logical XOR of bools).

    >>> import tapeflow as tf
    >>> print(tf.bitwise_xor([12, 10], [10, 6]))
    tf.Tensor([ 6 12], shape=(2,), dtype=int32)
    """
    return binary(_BITXOR, x, y)


def invert(x, name=None):
    """Bitwise NOT of integers (``~x``; logical NOT of bools).

    >>> import tapeflow as tf
    >>> print(tf.invert([0, 5]))
    tf.Tensor([-1 -6], shape=(2,), dtype=int32)
    """
    return execute(_INVERT, (x,))


def left_shift(x, y, name=None):
    """``x << y`` for integers (``y`` in ``[0, bits)``).

    >>> import tapeflow as tf
    >>> print(tf.left_shift([1, 3], [4, 1]))
    tf.Tensor([16  6], shape=(2,), dtype=int32)
    """
    return binary(_LSHIFT, x, y)


def right_shift(x, y, name=None):
    """``x >> y`` for integers (arithmetic for signed types; ``y`` in ``[0, bits)``).

    >>> import tapeflow as tf
    >>> print(tf.right_shift([16, -16], [2, 2]))
    tf.Tensor([ 4 -4], shape=(2,), dtype=int32)
    """
    return binary(_RSHIFT, x, y)


# --- comparison and logic (not differentiable; bool results) ---------------------------

_EQUAL = _bin("Equal", infer=_BOOL, differentiable=False, elementwise=True)
_NOT_EQUAL = _bin("NotEqual", infer=_BOOL, differentiable=False, elementwise=True)
_LESS = _bin("Less", infer=_BOOL, differentiable=False, elementwise=True)
_LESS_EQUAL = _bin("LessEqual", infer=_BOOL, differentiable=False, elementwise=True)
_GREATER = _bin("Greater", infer=_BOOL, differentiable=False, elementwise=True)
_GREATER_EQUAL = _bin("GreaterEqual", infer=_BOOL, differentiable=False, elementwise=True)
_LOGICAL_AND = _bin("LogicalAnd", infer=_BOOL, differentiable=False, elementwise=True)
_LOGICAL_OR = _bin("LogicalOr", infer=_BOOL, differentiable=False, elementwise=True)
_LOGICAL_XOR = _bin("LogicalXor", infer=_BOOL, differentiable=False, elementwise=True)
_LOGICAL_NOT = _un("LogicalNot", differentiable=False, elementwise=True)


def equal(x, y, name=None):
    """Elementwise ``x == y`` (bool tensor; any dtype).

    >>> import tapeflow as tf
    >>> print(tf.equal([1, 2, 3], 2))
    tf.Tensor([False  True False], shape=(3,), dtype=bool)
    """
    return binary(_EQUAL, x, y)


def not_equal(x, y, name=None):
    """Elementwise ``x != y`` (bool tensor; any dtype).

    >>> import tapeflow as tf
    >>> print(tf.not_equal([1, 2, 3], 2))
    tf.Tensor([ True False  True], shape=(3,), dtype=bool)
    """
    return binary(_NOT_EQUAL, x, y)


def less(x, y, name=None):
    """Elementwise ``x < y``.

    >>> import tapeflow as tf
    >>> print(tf.less([1, 2, 3], 2))
    tf.Tensor([ True False False], shape=(3,), dtype=bool)
    """
    return binary(_LESS, x, y)


def less_equal(x, y, name=None):
    """Elementwise ``x <= y``.

    >>> import tapeflow as tf
    >>> print(tf.less_equal([1, 2, 3], 2))
    tf.Tensor([ True  True False], shape=(3,), dtype=bool)
    """
    return binary(_LESS_EQUAL, x, y)


def greater(x, y, name=None):
    """Elementwise ``x > y``.

    >>> import tapeflow as tf
    >>> print(tf.greater([1, 2, 3], 2))
    tf.Tensor([False False  True], shape=(3,), dtype=bool)
    """
    return binary(_GREATER, x, y)


def greater_equal(x, y, name=None):
    """Elementwise ``x >= y``.

    >>> import tapeflow as tf
    >>> print(tf.greater_equal([1, 2, 3], 2))
    tf.Tensor([False  True  True], shape=(3,), dtype=bool)
    """
    return binary(_GREATER_EQUAL, x, y)


def logical_and(x, y, name=None):
    """Elementwise AND of bool tensors.

    >>> import tapeflow as tf
    >>> print(tf.logical_and([True, True], [True, False]))
    tf.Tensor([ True False], shape=(2,), dtype=bool)
    """
    return binary(_LOGICAL_AND, x, y)


def logical_or(x, y, name=None):
    """Elementwise OR of bool tensors.

    >>> import tapeflow as tf
    >>> print(tf.logical_or([False, True], [False, False]))
    tf.Tensor([False  True], shape=(2,), dtype=bool)
    """
    return binary(_LOGICAL_OR, x, y)


def logical_xor(x, y, name=None):
    """Elementwise XOR of bool tensors.

    >>> import tapeflow as tf
    >>> print(tf.math.logical_xor([True, True], [True, False]))
    tf.Tensor([False  True], shape=(2,), dtype=bool)
    """
    return binary(_LOGICAL_XOR, x, y)


def logical_not(x, name=None):
    """Elementwise NOT of a bool tensor.

    >>> import tapeflow as tf
    >>> print(tf.logical_not([True, False]))
    tf.Tensor([False  True], shape=(2,), dtype=bool)
    """
    return execute(_LOGICAL_NOT, (x,))


# --- cast --------------------------------------------------------------------------

def _cast_grad(ctx, dy):
    x = ctx.inputs[0]
    if not x.dtype.is_inexact or not dy.dtype.is_inexact:
        return None
    return cast(dy, x.dtype)


_CAST = defop("Cast", inputs=("x",), attrs={"dtype": None}, dtype_rule="none", grad=_cast_grad,
              elementwise=True, jvp=Linear())


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


def _bitcast_shape(shape, src, dst):
    """The shape of ``bitcast``'s result (TensorFlow's rule), or None where it has none."""
    a, b = src.np.itemsize, dst.np.itemsize
    if a == b:
        return tuple(shape)
    if a > b:
        return tuple(shape) + (a // b,) if a % b == 0 else None
    return tuple(shape[:-1]) if b % a == 0 and shape and shape[-1] == b // a else None


def _bitcast_infer(shapes, dtypes, attrs):
    return [(_bitcast_shape(shapes[0], dtypes[0], attrs["dtype"]), attrs["dtype"])]


_BITCAST = defop("Bitcast", inputs=("x",), attrs={"dtype": None}, dtype_rule="none",
                 differentiable=False, infer=_bitcast_infer, batch=BROADCASTING)


def bitcast(input, type, name=None):  # noqa: A002
    """The bytes of ``input`` read as dtype ``type``, without copying values (TensorFlow's
    shapes: the same item size keeps the shape; a smaller one adds a last dimension of
    the size ratio; a larger one consumes a last dimension of that ratio). Not
    differentiable; bool and string tensors cannot be bitcast.

    >>> import tapeflow as tf
    >>> print(tf.bitcast(tf.constant([1.0, -2.0]), tf.int32))
    tf.Tensor([ 1065353216 -1073741824], shape=(2,), dtype=int32)
    >>> print(tf.bitcast(tf.constant([1, 2], tf.int16), tf.int32))
    tf.Tensor(131073, shape=(), dtype=int32)
    """
    x = input if isinstance(input, Tensor) else convert_to_tensor(input)
    dt = _dt.as_dtype(type)
    for d in (x.dtype, dt):
        if d.is_bool or d == _dt.string:
            raise InvalidTypeError(f"bitcast: cannot bitcast {x.dtype.name} to {dt.name}: "
                                   "bool and string tensors have no fixed bit layout to "
                                   "reinterpret", op="Bitcast", device=x._device)
    if _bitcast_shape(x.shape, x.dtype, dt) is None:
        a, b = x.dtype.np.itemsize, dt.np.itemsize
        raise InvalidArgumentError(
            f"bitcast: cannot bitcast {x.dtype.name} ({a} bytes) of shape {list(x.shape)} to "
            f"{dt.name} ({b} bytes): " + (f"the last dimension must be {b // a}" if b % a == 0
                                          else "one item size must divide the other"),
            op="Bitcast", device=x._device)
    if x.dtype is dt:
        return x
    return execute(_BITCAST, (x,), {"dtype": dt})


# --- operators -----------------------------------------------------------------------

def _compare_fallback(op, self, other, err):
    """``==``/``!=`` after the op failed: an operand that is not convertible to a
    tensor (None, a string, an object) gives NotImplemented, so Python falls back
    to identity; shapes that do not broadcast compare unequal (TF2); anything else
    (a device mismatch...) is re-raised."""
    try:
        o = convert_to_tensor(other)
    except (TapeflowError, TypeError, ValueError):
        return NotImplemented
    s = self.shape if isinstance(self, (Tensor, Variable)) else convert_to_tensor(self).shape
    if _broadcast_shape(s, o.shape) is None:
        return constant(op is _NOT_EQUAL)
    raise err
