"""Conformance specs of the elementwise math ops (``tapeflow.math``), of complex
numbers and of the Fourier transforms.

Each real op gets samples for a 0-d scalar, a typical shape, broadcasting
((3, 1) with (1, 4); (2, 3) with a Python scalar and with a 0-d array), a
size-0 shape and edge values of the dtype (inf, nan, -0., integer limits).
Domain-restricted ops (log, sqrt, ...) draw from their domain. Samples whose
points are not smooth (edge values, ties of maximum, integer exponents of
negative bases) set ``grad_argnums`` so that finite differences stay honest.

Complex dtypes are tested by their own specs (the second half of this module), with
samples that have imaginary parts (the real specs draw real samples, which would say
little about complex kernels). References are NumPy's at the input's precision.
Gradients of complex functions follow TensorFlow's convention and are checked against
finite differences in ``tests/test_complex.py`` (``check_grads`` perturbs real inputs
only), so those specs have ``grad_order=0``.
"""

from __future__ import annotations

import functools
import math as _pymath
import operator
import re

import numpy as np

import tapeflow as tf
import tapeflow.numpy as tnp
from tapeflow.errors import InvalidArgumentError, NotFoundError

from . import ErrorSample, OpSpec, Sample


# --- the real elementwise ops -------------------------------------------------------------

# --- value generators -------------------------------------------------------------


def _np(dtype):
    return np.dtype(getattr(dtype, "np", dtype))


def _vals(rng, shape, dtype, lo=-3.0, hi=3.0, nonzero=False):
    """Random values of ``dtype`` in ``[lo, hi]`` (clipped to the dtype's range)."""
    d = _np(dtype)
    if d.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if d.kind == "f":
        a = rng.uniform(lo, hi, shape)
        if nonzero:
            a = np.where(np.abs(a) < 0.25, np.where(a >= 0, 0.5, -0.5), a)
        return np.asarray(a.astype(d))
    info = np.iinfo(d)
    lo_i = int(max(np.ceil(lo), info.min))
    hi_i = int(min(np.floor(hi), info.max))
    a = rng.integers(lo_i, hi_i + 1, shape)
    if nonzero:
        a = np.where(a == 0, 1 if hi_i >= 1 else -1, a)
    return np.asarray(a.astype(d))


def _edge(dtype):
    """Edge values of ``dtype`` (1-D)."""
    d = _np(dtype)
    if d.kind == "b":
        return np.array([True, False, True, False], d)
    if d.kind == "f":
        fi = np.finfo(d)
        return np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan,
                         fi.max, -fi.max, fi.tiny], d)
    info = np.iinfo(d)
    vals = [0, 1, 2, info.max, info.min, info.max - 1]
    if info.min < 0:
        vals += [-1, -2]
    return np.array(vals, d)


def _pyscalar(dtype, value=2):
    """A Python scalar for ``dtype``: bool -> True, int -> ``int(value)``, float ->
    ``value`` when it is a float, else ``value + 0.5``."""
    d = _np(dtype)
    if d.kind == "b":
        return True
    if d.kind == "f":
        return value if isinstance(value, float) else value + 0.5
    return int(value)


# --- sample builders ------------------------------------------------------------------


def _unary_samples(lo=-3.0, hi=3.0, edge=True, smooth=True):
    """Samples for a unary op whose domain is ``[lo, hi]``."""
    def samples(dtype, rng):
        out = [
            Sample((_vals(rng, (), dtype, lo, hi),), name="scalar"),
            Sample((_vals(rng, (3, 4), dtype, lo, hi),), name="typical"),
            Sample((_vals(rng, (2, 1, 3), dtype, lo, hi),), name="rank3"),
            Sample((_vals(rng, (0, 3), dtype, lo, hi),), name="empty"),
        ]
        if edge:
            out.append(Sample((_edge(dtype),), grad_argnums=(), name="edge"))
        if not smooth:
            for s in out:
                s.grad_argnums = ()
        return out
    return samples


def _binary_samples(x_range=(-3.0, 3.0), y_range=(-3.0, 3.0), y_nonzero=False, scalar=2,
                    edge=True, fix=None, scalar_lhs=None, edge_pairs=False):
    """Samples for a broadcasting binary op. ``fix(x, y, dtype)`` may adjust the
    drawn values (to keep them away from kinks); it returns ``(x, y)``. ``edge_pairs``:
    also every pair of the float dtype's edge values."""
    def draw(rng, xs, ys, dtype):
        x = _vals(rng, xs, dtype, *x_range)
        y = _vals(rng, ys, dtype, *y_range, nonzero=y_nonzero)
        if fix is not None:
            x, y = fix(x, y, dtype)
        return np.asarray(x), np.asarray(y)

    def samples(dtype, rng):
        out = [
            Sample(draw(rng, (), (), dtype), name="scalar"),
            Sample(draw(rng, (2, 3), (2, 3), dtype), name="typical"),
            Sample(draw(rng, (3, 1), (1, 4), dtype), name="broadcast"),
            Sample(draw(rng, (2, 3), (), dtype), name="broadcast_0d"),
            Sample(draw(rng, (0, 3), (1, 3), dtype), name="empty"),
        ]
        x, _ = draw(rng, (2, 3), (2, 3), dtype)
        out.append(Sample((x, _pyscalar(dtype, scalar)), name="python_scalar"))
        _, y = draw(rng, (2, 3), (2, 3), dtype)
        lhs = scalar if scalar_lhs is None else scalar_lhs
        out.append(Sample((_pyscalar(dtype, lhs), y), name="python_scalar_lhs"))
        if edge:
            e = _edge(dtype)
            ey = np.roll(e, 3)
            if y_nonzero and e.dtype.kind in "iu":
                ey[ey == 0] = 1        # integer division by zero is an error (tested apart)
            out.append(Sample((e, ey), grad_argnums=(), name="edge"))
            if edge_pairs and e.dtype.kind == "f":
                # every pair of edge values: +-0, +-inf, nan, negative divisors, extremes
                x, y = np.meshgrid(e, e)
                out.append(Sample((x.ravel(), y.ravel()), grad_argnums=(), name="edge_pairs"))
        return out
    return samples


def _away_from_ties(x, y, dtype):
    """Keep ``|x - y| >= 0.3`` elementwise, for any broadcast (maximum/minimum are
    not smooth at ties): x near integers + 0.5, y near integers."""
    if _np(dtype).kind != "f":
        return x, y
    d = _np(dtype)
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    x = np.round(x) + 0.5 + 0.2 * (x - np.round(x))
    y = np.round(y) + 0.2 * (y - np.round(y))
    return x.astype(d), y.astype(d)


def _floor_divide(x, y):
    """NumPy's floor_divide with the array API's special cases (TensorFlow's floor(x / y)
    too): one infinite and one finite operand give x / y (inf // 2 is inf, -1 // inf is
    -0), where NumPy gives NaN and -1."""
    out = np.floor_divide(x, y)
    if out.dtype.kind == "f":
        a, b = np.broadcast_arrays(np.asarray(x), np.asarray(y))
        one_inf = (np.isinf(a) != np.isinf(b)) & ~np.isnan(a) & ~np.isnan(b)
        with np.errstate(all="ignore"):
            out = np.where(one_inf, np.true_divide(a, b), out).astype(out.dtype)
    return out


def _mod_points(x, y, dtype):
    """Keep ``x / y`` away from integers for any broadcast (floor jumps there):
    ``x`` = integer + 0.5 +- 0.05 and ``y`` in {+-1, +-2, +-4}."""
    if _np(dtype).kind != "f":
        return x, y
    d = _np(dtype)
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    x = np.round(x) + 0.5 + 0.1 * (x - np.round(x))
    y = np.where(y < 0, -1.0, 1.0) * 2.0 ** (np.floor(np.abs(y)) % 3)
    return x.astype(d), y.astype(d)


def _pow_samples(dtype, rng):
    d = _np(dtype)
    if d.kind == "f":
        out = _binary_samples((0.5, 2.0), (-2.0, 2.0), scalar=2, edge=False)(dtype, rng)
        # a negative base with integer exponents: differentiable in x only
        base = -_vals(rng, (2, 3), dtype, 0.5, 2.0)
        expo = rng.integers(-2, 4, (2, 3)).astype(d)
        out.append(Sample((base, expo), grad_argnums=(0,), name="negative_base"))
        e = _edge(dtype)
        out.append(Sample((e, np.roll(e, 3)), grad_argnums=(), name="edge"))
        out.append(Sample((np.array([0.0, 0.0, 2.0], d), np.array([0.0, 2.0, 0.0], d)),
                          grad_argnums=(), name="zeros"))
        return out
    out = _binary_samples((0, 4), (0, 3), scalar=2, edge=False)(dtype, rng)
    return out


def _compare_samples(dtype, rng):
    out = _binary_samples((-3, 3), (-3, 3), scalar=1)(dtype, rng)
    x = _vals(rng, (4, 5), dtype)
    y = np.where(rng.random((4, 5)) < 0.5, x, _vals(rng, (4, 5), dtype))
    out.append(Sample((x, y.astype(x.dtype)), name="ties"))
    return out


def _logical_samples(dtype, rng):
    return _binary_samples(scalar=True)(dtype, rng)


def _addn_samples(dtype, rng):
    v = functools.partial(_vals, rng, dtype=dtype)
    return [
        Sample((v(()),), name="one"),
        Sample((v(()), v(()), v(())), name="scalar"),
        Sample((v((2, 3)), v((2, 3)), v((2, 3)), v((2, 3))), name="typical"),
        Sample((v((0, 3)), v((0, 3))), name="empty"),
    ]


# --- references --------------------------------------------------------------------------


def _f64(fn):
    """A reference computed in float64 and returned in the input's dtype."""
    def ref(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float64))).astype(x.dtype)
    return ref


def _sigmoid64(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf64 = np.vectorize(_pymath.erf, otypes=[np.float64])


def _round_ref(x):
    x = np.asarray(x)
    return x if x.dtype.kind in "iu" else np.rint(x)


def _addn_ref(*xs):
    return functools.reduce(np.add, xs)


# --- error contracts ------------------------------------------------------------------------

_F32 = np.float32
_MISMATCH = (np.ones((2, 3), _F32), np.ones((4,), _F32))


def _incompatible(fn_name, dtype=_F32):
    return ErrorSample((np.ones((2, 3), dtype), np.ones((4,), dtype)),
                       error=InvalidArgumentError,
                       match=re.escape("Incompatible shapes: [2, 3] vs. [4]"),
                       name="broadcast_mismatch")


def _no_kernel(dtype, registered, name):
    return ErrorSample((np.ones((2,), dtype),), error=NotFoundError,
                       match=re.escape(f"dtype in [{registered}]"), name=name)


_REAL_FLOAT_LIST = "bfloat16, float16, float32, float64"
_FLOAT_LIST = _REAL_FLOAT_LIST + ", complex64, complex128"
_NUMERIC_LIST = ("bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, "
                 "uint32, uint64, complex64, complex128")

# --- specs ------------------------------------------------------------------------------------

_TOL_SPECIAL = {"float16": (4e-3, 4e-3), "float32": (1e-5, 1e-6), "float64": (1e-12, 1e-14)}


def _bitwise_samples(shift):
    def samples(dtype, rng):
        x = rng.integers(0, 16, (3, 4)).astype(dtype.np)
        y = rng.integers(0, 4 if shift else 16, (3, 4)).astype(dtype.np)
        return [Sample((x, y), name="typical"), Sample((x, y[0]), name="broadcast"),
                Sample((x[:0], y[:0]), name="empty")]
    return samples


def _unary(name, fn, ref, op, lo=-3.0, hi=3.0, grad=2, edge=True, tol=None, errors=()):
    return OpSpec(name=name, fn=fn, ref=ref, op=op,
                  samples=_unary_samples(lo, hi, edge=edge, smooth=grad > 0),
                  grad_order=grad, tol=tol or {}, errors=list(errors))


def _binary(name, fn, ref, op, samples, grad=2, errors=(), tol=None, mismatch=_F32,
            signed_zeros=False):
    """``mismatch``: the dtype of the broadcast-mismatch error sample (None: no such
    sample, e.g. ``==``, where TF2 answers False for shapes that do not broadcast)."""
    errs = [] if mismatch is None else [_incompatible(name, mismatch)]
    return OpSpec(name=name, fn=fn, ref=ref, op=op, samples=samples, grad_order=grad,
                  errors=[*errs, *errors], tol=tol or {}, signed_zeros=signed_zeros)


_MATH_SPECS: list[OpSpec] = [
    # --- binary arithmetic
    _binary("add", tf.add, np.add, "Add", _binary_samples(),
            errors=[ErrorSample((np.ones(2, np.bool_), np.ones(2, np.bool_)), error=NotFoundError,
                                match=re.escape(f"dtype in [{_NUMERIC_LIST}]"), name="bool")]),
    _binary("subtract", tf.subtract, np.subtract, "Sub", _binary_samples()),
    _binary("multiply", tf.multiply, np.multiply, "Mul", _binary_samples()),
    _binary("divide", tf.divide, np.true_divide, "RealDiv",
            _binary_samples(y_range=(-3.0, 3.0), y_nonzero=True)),
    _binary("floordiv", tf.math.floordiv, _floor_divide, "FloorDiv",
            _binary_samples(y_nonzero=True, edge_pairs=True), grad=0, signed_zeros=True,
            errors=[ErrorSample((np.array([1, 2], np.int32), np.array([1, 0], np.int32)),
                                error=InvalidArgumentError, match="Integer division by zero",
                                name="int_div_by_zero")]),
    _binary("mod", tf.math.mod, np.remainder, "FloorMod",
            _binary_samples(y_nonzero=True, fix=_mod_points, scalar=2.0, scalar_lhs=2.5,
                            edge_pairs=True), signed_zeros=True,
            errors=[ErrorSample((np.array([1, 2], np.int64), np.array([0, 1], np.int64)),
                                error=InvalidArgumentError, match="Integer division by zero",
                                name="int_mod_by_zero")]),
    _binary("pow", tf.pow, np.power, "Pow", _pow_samples,
            errors=[ErrorSample((np.array([2, 3], np.int32), np.array([1, -1], np.int32)),
                                error=InvalidArgumentError,
                                match="Integers to negative integer powers are not allowed",
                                name="int_negative_power")]),
    _binary("maximum", tf.maximum, np.maximum, "Maximum",
            _binary_samples(fix=_away_from_ties)),
    _binary("minimum", tf.minimum, np.minimum, "Minimum",
            _binary_samples(fix=_away_from_ties)),
    _binary("squared_difference", tf.squared_difference,
            lambda x, y: np.square(np.subtract(x, y)), "SquaredDifference", _binary_samples()),
    _binary("atan2", tf.atan2, np.arctan2, "Atan2",
            _binary_samples((0.5, 3.0), (-3.0, 3.0), y_nonzero=True),
            errors=[ErrorSample((np.ones(2, np.int32), np.ones(2, np.int32)),
                                error=NotFoundError,
                                match=re.escape(f"dtype in [{_REAL_FLOAT_LIST}]"), name="int")]),
    OpSpec(name="add_n", fn=lambda *xs: tf.add_n(list(xs)), ref=_addn_ref, op="AddN",
           samples=_addn_samples,
           errors=[ErrorSample((np.ones((2, 3), _F32), np.ones((3, 2), _F32)),
                               error=InvalidArgumentError, match="AddN needs inputs of one shape",
                               name="shape_mismatch")]),
    # --- unary
    _unary("negative", tf.negative, np.negative, "Neg",
           errors=[_no_kernel(np.bool_, _NUMERIC_LIST, "bool")]),
    # abs and sign: keep |x| >= 0.25 so finite differences do not straddle the kink
    OpSpec(name="abs", fn=tf.abs, ref=np.absolute, op="Abs",
           samples=lambda d, rng: [
               Sample((_vals(rng, s, d, nonzero=True),), name=n)
               for s, n in (((), "scalar"), ((3, 4), "typical"), ((0, 2), "empty"))
           ] + [Sample((_edge(d),), grad_argnums=(), name="edge")]),
    _unary("sign", tf.sign, np.sign, "Sign", grad=0),
    _unary("square", tf.square, np.square, "Square"),
    _unary("sqrt", tf.sqrt, np.sqrt, "Sqrt", 0.5, 4.0,
           errors=[_no_kernel(np.int32, _FLOAT_LIST, "int")]),
    _unary("rsqrt", tf.math.rsqrt, _f64(lambda x: 1 / np.sqrt(x)), "Rsqrt", 0.5, 4.0,
           tol=_TOL_SPECIAL),
    _unary("exp", tf.exp, np.exp, "Exp"),
    _unary("log", tf.math.log, np.log, "Log", 0.5, 4.0),
    _unary("log1p", tf.math.log1p, np.log1p, "Log1p", -0.5, 3.0),
    _unary("expm1", tf.math.expm1, np.expm1, "Expm1"),
    _unary("sin", tf.sin, np.sin, "Sin"),
    _unary("cos", tf.cos, np.cos, "Cos"),
    _unary("tan", tf.tan, np.tan, "Tan", -1.2, 1.2),
    _unary("tanh", tf.tanh, np.tanh, "Tanh"),
    _unary("sigmoid", tf.sigmoid, _f64(_sigmoid64), "Sigmoid", tol=_TOL_SPECIAL),
    _unary("softplus", tf.math.softplus, _f64(lambda x: np.logaddexp(0.0, x)), "Softplus",
           tol=_TOL_SPECIAL),
    _unary("reciprocal", tf.math.reciprocal, np.reciprocal, "Reciprocal", 0.5, 3.0),
    _unary("floor", tf.floor, np.floor, "Floor", grad=0),
    _unary("ceil", tf.math.ceil, np.ceil, "Ceil", grad=0),
    _unary("round", tf.round, _round_ref, "Round", grad=0),
    _unary("erf", tf.math.erf, _f64(_erf64), "Erf", tol=_TOL_SPECIAL),
    _unary("is_nan", tf.math.is_nan, np.isnan, "IsNan", grad=0),
    _unary("is_finite", tf.math.is_finite, np.isfinite, "IsFinite", grad=0),
    _unary("is_inf", tf.math.is_inf, np.isinf, "IsInf", grad=0),
    _unary("asin", tf.math.asin, np.arcsin, "Asin", -0.9, 0.9),
    _unary("acos", tf.math.acos, np.arccos, "Acos", -0.9, 0.9),
    _unary("atan", tf.math.atan, np.arctan, "Atan"),
    _unary("sinh", tf.math.sinh, np.sinh, "Sinh"),
    _unary("cosh", tf.math.cosh, np.cosh, "Cosh"),
    _unary("asinh", tf.math.asinh, np.arcsinh, "Asinh"),
    _unary("acosh", tf.math.acosh, np.arccosh, "Acosh", 1.2, 4.0),
    _unary("atanh", tf.math.atanh, np.arctanh, "Atanh", -0.9, 0.9),
    _unary("log2", tf.math.log2, np.log2, "Log2", 0.5, 4.0),
    _unary("log10", tf.math.log10, np.log10, "Log10", 0.5, 4.0),
    _unary("trunc", tf.math.trunc, np.trunc, "Trunc", grad=0),
    _unary("signbit", tf.math.signbit, np.signbit, "Signbit", grad=0),
    # copysign: x kept away from 0 and y nonzero, so finite differences see no kink
    _binary("copysign", tf.math.copysign, np.copysign, "Copysign",
            _binary_samples((0.25, 3.0), y_nonzero=True)),
    _binary("hypot", tf.math.hypot, np.hypot, "Hypot", _binary_samples((0.25, 3.0))),
    _binary("logaddexp", tf.math.logaddexp, np.logaddexp, "LogAddExp", _binary_samples()),
    _binary("nextafter", tf.math.nextafter, np.nextafter, "NextAfter", _binary_samples(),
            grad=0),
    # --- bitwise (integers)
    *[OpSpec(name=n, fn=f, ref=r, op=o, samples=_bitwise_samples(shift), grad_order=0,
             dtypes=("int8", "int16", "int32", "int64", "uint8"))
      for n, f, r, o, shift in (
          ("bitwise_and", tf.bitwise_and, np.bitwise_and, "BitwiseAnd", False),
          ("bitwise_or", tf.bitwise_or, np.bitwise_or, "BitwiseOr", False),
          ("bitwise_xor", tf.bitwise_xor, np.bitwise_xor, "BitwiseXor", False),
          ("left_shift", tf.left_shift, np.left_shift, "LeftShift", True),
          ("right_shift", tf.right_shift, np.right_shift, "RightShift", True))],
    OpSpec(name="invert", fn=tf.invert, ref=np.invert, op="Invert",
           samples=lambda d, rng: [Sample((rng.integers(0, 100, (3, 4)).astype(d.np),),
                                          name="typical")],
           grad_order=0, dtypes=("int8", "int16", "int32", "int64", "uint8")),
    # --- comparison and logic
    _binary("equal", tf.equal, np.equal, "Equal", _compare_samples, grad=0),
    _binary("not_equal", tf.not_equal, np.not_equal, "NotEqual", _compare_samples, grad=0),
    _binary("less", tf.less, np.less, "Less", _compare_samples, grad=0),
    _binary("less_equal", tf.less_equal, np.less_equal, "LessEqual", _compare_samples, grad=0),
    _binary("greater", tf.greater, np.greater, "Greater", _compare_samples, grad=0),
    _binary("greater_equal", tf.greater_equal, np.greater_equal, "GreaterEqual",
            _compare_samples, grad=0),
    _binary("logical_and", tf.logical_and, np.logical_and, "LogicalAnd", _logical_samples,
            mismatch=np.bool_, grad=0, errors=[ErrorSample(_MISMATCH[:1] * 2, error=NotFoundError,
                                        match=re.escape("dtype in [bool]"), name="float")]),
    _binary("logical_or", tf.logical_or, np.logical_or, "LogicalOr", _logical_samples,
            mismatch=np.bool_, grad=0),
    _binary("logical_xor", tf.math.logical_xor, np.logical_xor, "LogicalXor", _logical_samples,
            mismatch=np.bool_, grad=0),
    _unary("logical_not", tf.logical_not, np.logical_not, "LogicalNot", grad=0,
           errors=[_no_kernel(np.float32, "bool", "float")]),
    # --- operators (Tensor dunder methods; the harness passes Tensors as x)
    _binary("operator.add", operator.add, operator.add, "Add", _binary_samples()),
    _binary("operator.truediv", operator.truediv, np.true_divide, "RealDiv",
            _binary_samples(y_nonzero=True)),
    _binary("operator.floordiv", operator.floordiv, _floor_divide, "FloorDiv",
            _binary_samples(y_nonzero=True, edge_pairs=True), grad=0, signed_zeros=True),
    _binary("operator.mod", operator.mod, np.remainder, "FloorMod",
            _binary_samples(y_nonzero=True, fix=_mod_points, scalar=2.0, scalar_lhs=2.5,
                            edge_pairs=True), signed_zeros=True),
    _binary("operator.pow", operator.pow, np.power, "Pow", _pow_samples),
    _binary("operator.lt", operator.lt, np.less, "Less", _compare_samples, grad=0),
    _binary("operator.ge", operator.ge, np.greater_equal, "GreaterEqual", _compare_samples,
            grad=0),
    _binary("operator.eq", operator.eq, np.equal, "Equal", _compare_samples, grad=0, mismatch=None),
    _binary("operator.ne", operator.ne, np.not_equal, "NotEqual", _compare_samples, grad=0,
            mismatch=None),
    _binary("operator.and", operator.and_, np.logical_and, "LogicalAnd", _logical_samples,
            mismatch=np.bool_, grad=0),
    _binary("operator.xor", operator.xor, np.logical_xor, "LogicalXor", _logical_samples,
            mismatch=np.bool_, grad=0),
    _unary("operator.neg", operator.neg, np.negative, "Neg"),
    OpSpec(name="operator.abs", fn=operator.abs, ref=np.absolute, op="Abs",
           samples=lambda d, rng: [Sample((_vals(rng, (3, 4), d, nonzero=True),), name="typical")]),
    _unary("operator.invert", operator.invert, np.logical_not, "LogicalNot", grad=0),
]


# --- complex numbers and the Fourier transforms -------------------------------------------

_CPLX = ("complex64", "complex128")
_REAL = ("float32", "float64")
_TOL = {"complex64": (2e-5, 2e-5), "complex128": (1e-12, 1e-12), "float32": (2e-5, 2e-5),
        "float64": (1e-12, 1e-12)}


def _z(dtype, rng, shape, lo=-2.0, hi=2.0):
    return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype.np)


def _cplx_unary(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4)),), name="matrix"),
            Sample((np.array([0, 1j, -1, np.inf, np.nan + 1j], dtype.np),), name="special"),
            Sample((_z(dtype, rng, (0, 2)),), name="empty")]


def _positive(dtype, rng):           # away from the branch cut of log/sqrt
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4), 0.1, 2.0),), name="right_half")]


def _cplx_binary(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4)), _z(dtype, rng, (3, 4))), name="same"),
            Sample((_z(dtype, rng, (2, 3, 1)), _z(dtype, rng, (4,))), name="broadcast")]


def _matmul(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4)), _z(dtype, rng, (4, 2))), name="matrix"),
            Sample((_z(dtype, rng, (2, 3, 4)), _z(dtype, rng, (2, 4, 5))), name="batch")]


def _parts(dtype, rng):
    if dtype.is_complex:
        return []
    return [Sample((rng.standard_normal((3, 4)).astype(dtype.np),
                    rng.standard_normal((3, 4)).astype(dtype.np)), name="same"),
            Sample((rng.standard_normal((2, 1)).astype(dtype.np),
                    rng.standard_normal((3,)).astype(dtype.np)), name="broadcast")]


def _real_signal(dtype, rng):
    if dtype.is_complex:
        return []
    return [Sample((rng.standard_normal((3, 8)).astype(dtype.np),), name="even"),
            Sample((rng.standard_normal((2, 7)).astype(dtype.np),), {"n": 9}, name="padded")]


def _spectrum(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 5)),), name="matrix"),
            Sample((_z(dtype, rng, (2, 5)),), {"n": 9}, name="odd_n"),
            Sample((_z(dtype, rng, (4, 6)),), {"axis": 0, "norm": "ortho"}, name="axis0")]


def _spectra(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (4, 6)),), {"axes": (0, 1)}, name="2d"),
            Sample((_z(dtype, rng, (2, 3, 4)),), {"s": (5, 2), "axes": (1, 2), "norm": "forward"},
                   name="cropped_padded")]


def _np_fft(name, xp_name=None):
    f = getattr(np.fft, xp_name or name)

    def ref(x, **kw):
        out = f(x, **kw)
        single = x.dtype in (np.float32, np.complex64)
        if out.dtype.kind == "c":
            return out.astype(np.complex64 if single else np.complex128)
        return out.astype(np.float32 if single else np.float64)
    return ref


def _spec(name, fn, ref, samples, op, dtypes=_CPLX, **kw):
    return OpSpec(name, fn, ref, samples, op=op, dtypes=dtypes, grad_order=0, tol=_TOL, **kw)


_COMPLEX_SPECS = [
    _spec("complex", tf.complex, lambda re, im: re + 1j * im, _parts, "Complex", _REAL),
    _spec("math.real", tf.math.real, np.real, _cplx_unary, "Real"),
    _spec("math.imag", tf.math.imag, np.imag, _cplx_unary, "Imag"),
    _spec("math.conj", tf.math.conj, np.conj, _cplx_unary, "Conj"),
    _spec("math.angle", tf.math.angle, np.angle, _cplx_unary, "Imag"),
    _spec("complex.add", tf.add, np.add, _cplx_binary, "Add"),
    _spec("complex.subtract", tf.subtract, np.subtract, _cplx_binary, "Sub"),
    _spec("complex.multiply", operator.mul, np.multiply, _cplx_binary, "Mul"),
    _spec("complex.divide", tf.divide, np.divide, _cplx_binary, "RealDiv"),
    _spec("complex.negative", tf.negative, np.negative, _cplx_unary, "Neg"),
    _spec("complex.abs", tf.abs, np.abs, _cplx_unary, "Abs"),
    _spec("complex.sign", tf.sign, np.sign, _cplx_unary, "Sign"),
    _spec("complex.square", tf.square, np.square, _cplx_unary, "Square"),
    _spec("complex.exp", tf.exp, np.exp, _positive, "Exp"),
    _spec("complex.log", tf.math.log, np.log, _positive, "Log"),
    _spec("complex.sqrt", tf.sqrt, np.sqrt, _positive, "Sqrt"),
    _spec("complex.sin", tf.sin, np.sin, _positive, "Sin"),
    _spec("complex.tanh", tf.tanh, np.tanh, _positive, "Tanh"),
    _spec("complex.is_nan", tnp.isnan, np.isnan, _cplx_unary, "IsNan"),
    _spec("complex.matmul", tf.matmul, np.matmul, _matmul, "MatMul"),
    _spec("complex.reduce_sum", lambda x: tf.reduce_sum(x, axis=1), lambda x: x.sum(axis=1),
          _positive, "Sum"),
    _spec("complex.reduce_prod", tf.reduce_prod, np.prod, _positive, "Prod"),
    _spec("complex.reduce_mean", lambda x: tf.reduce_mean(x, axis=0), lambda x: x.mean(axis=0),
          _cplx_unary, "Mean"),
    _spec("fft.fft", tnp.fft.fft, _np_fft("fft"), _spectrum, "FFT"),
    _spec("fft.ifft", tnp.fft.ifft, _np_fft("ifft"), _spectrum, "FFT"),
    _spec("fft.fftn", tnp.fft.fftn, _np_fft("fftn"), _spectra, "FFT"),
    _spec("fft.irfft", tnp.fft.irfft, _np_fft("irfft"), _spectrum, "IRFFT"),
    _spec("fft.hfft", tnp.fft.hfft, _np_fft("hfft"), _spectrum, "IRFFT"),
    _spec("fft.rfft", tnp.fft.rfft, _np_fft("rfft"), _real_signal, "RFFT", _REAL),
    _spec("fft.ihfft", tnp.fft.ihfft, _np_fft("ihfft"), _real_signal, "RFFT", _REAL),
]


SPECS: list[OpSpec] = _MATH_SPECS + _COMPLEX_SPECS
