"""Elementwise math kernels: one generated OpenCL C kernel per (op, dtypes, layout).

Every op is an expression for :func:`runtime.elementwise` (broadcasting and strided
inputs included), chosen per dtype where C and NumPy differ: integer floor
division and modulo round toward negative infinity, float ``maximum``/``minimum``
propagate NaN, ``round`` is half-to-even (``rint``), ``abs`` of a signed integer
stays signed. Result dtypes are NumPy's (so ``RealDiv`` of integers gives float64,
as on ``cpu``).
"""

from __future__ import annotations

import functools

import numpy as np

from tapeflow.errors import InvalidArgumentError

from . import runtime as rt
from .runtime import FLOATS, NUMERIC

BOOL = ("bool",)
ALL = NUMERIC + BOOL

#: float floor-division and modulo with NumPy's semantics (npy_divmod)
_DIVMOD = """
#define DEF_DIVMOD(T) \\
inline T fdiv_##T(T a, T b) { \\
    if (b == (T)0) return a / b; \\
    T mod = fmod(a, b); T div = (a - mod) / b; \\
    if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) div -= (T)1; \\
    T fl; \\
    if (div != (T)0) { fl = floor(div); if (div - fl > (T)0.5) fl += (T)1; } \\
    else fl = copysign((T)0, a / b); \\
    return fl; } \\
inline T fmod_##T(T a, T b) { \\
    if (b == (T)0) return fmod(a, b); \\
    T mod = fmod(a, b); \\
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) mod += b; } \\
    else mod = copysign((T)0, b); \\
    return mod; }
DEF_DIVMOD(float)
#ifdef cl_khr_fp64
DEF_DIVMOD(double)
#endif
"""


def _ipow(ct):
    return (f"inline {ct} ipow_{ct.replace(' ', '_')}({ct} b, {ct} e) {{ {ct} r = 1; "
            f"while (e > 0) {{ if (e & 1) r = ({ct})(r * b); b = ({ct})(b * b); e >>= 1; }} "
            "return r; }\n")


@functools.lru_cache(maxsize=None)
def _result_dtype(npfn, *dts):
    return npfn(*(np.ones(1, dtype=d) for d in dts)).dtype


def _isf(a):
    return a.dtype.kind == "f"


def _check_divisor(x, y):
    if x.dtype.kind in "iu":
        yh = rt.download(y)
        if not yh.all():
            raise InvalidArgumentError("Integer division by zero")


def build():
    ew = rt.elementwise

    def binary(expr_f, expr_i, npfn):
        def k(x, y):
            dt = _result_dtype(npfn, x.dtype, y.dtype)
            return ew(expr_f if _isf(x) else expr_i, dt, x, y)
        return k

    def unary(expr_f, expr_i=None, npfn=None):
        def k(x):
            dt = x.dtype if npfn is None else _result_dtype(npfn, x.dtype)
            return ew(expr_f if (_isf(x) or expr_i is None) else expr_i, dt, x)
        return k

    def floordiv(x, y):
        _check_divisor(x, y)
        if _isf(x):
            ct = rt.CTYPES[x.dtype]
            return ew(f"fdiv_{ct}(x0, x1)", x.dtype, x, y, preamble=_DIVMOD)
        return ew("(x1 == 0) ? 0 : ((x0 / x1) - (((x0 % x1) != 0) && ((x0 < 0) != (x1 < 0))))",
                  x.dtype, x, y)

    def floormod(x, y):
        _check_divisor(x, y)
        if _isf(x):
            ct = rt.CTYPES[x.dtype]
            return ew(f"fmod_{ct}(x0, x1)", x.dtype, x, y, preamble=_DIVMOD)
        return ew("(x1 == 0) ? 0 : (((x0 % x1) != 0 && ((x0 % x1 < 0) != (x1 < 0))) "
                  "? (x0 % x1 + x1) : (x0 % x1))", x.dtype, x, y)

    def power(x, y):
        if _isf(x):
            return ew("pow(x0, x1)", x.dtype, x, y)
        if y.dtype.kind == "i" and (rt.download(y) < 0).any():
            raise InvalidArgumentError("Integers to negative integer powers are not allowed")
        ct = rt.CTYPES[x.dtype]
        return ew(f"ipow_{ct}(x0, x1)", x.dtype, x, y, preamble=_ipow(ct))

    def add_n(*xs):
        shape = xs[0].shape
        for i, x in enumerate(xs[1:], 1):
            if x.shape != shape:
                raise InvalidArgumentError(
                    f"AddN needs inputs of one shape: inputs[0] has shape {list(shape)} but "
                    f"inputs[{i}] has shape {list(x.shape)}")
        out = None
        for start in range(0, len(xs), 8):      # at most 8 inputs per launch
            group = list(xs[start:start + 8])
            if out is not None:
                group = [out] + group
            expr = " + ".join(f"x{j}" for j in range(len(group)))
            out = ew(expr, xs[0].dtype, *group)
        return out

    def cast(x, dtype):
        to = np.dtype(dtype.np)
        if to == np.bool_:
            expr = "x0 != 0"
        else:
            expr = "x0"
        if to == x.dtype:
            return x
        return ew(expr, to, x)

    def maximum(x, y):
        if _isf(x):
            return ew("(isnan(x0) || x0 > x1) ? x0 : x1", x.dtype, x, y)
        return ew("(x0 > x1) ? x0 : x1", x.dtype, x, y)

    def minimum(x, y):
        if _isf(x):
            return ew("(isnan(x0) || x0 < x1) ? x0 : x1", x.dtype, x, y)
        return ew("(x0 < x1) ? x0 : x1", x.dtype, x, y)

    def absolute(x):
        if _isf(x):
            return ew("fabs(x0)", x.dtype, x)
        if x.dtype.kind == "u":
            return x
        return ew("(x0 < 0) ? -x0 : x0", x.dtype, x)

    def sign(x):
        if _isf(x):
            return ew("isnan(x0) ? x0 : (x0 > 0 ? 1 : (x0 < 0 ? -1 : 0))", x.dtype, x)
        return ew("(x0 > 0) - (x0 < 0)", x.dtype, x)

    def round_(x):
        return ew("rint(x0)", x.dtype, x) if _isf(x) else x

    def cmp(op):
        def k(x, y):
            return ew(f"x0 {op} x1", np.bool_, x, y)
        return k

    def num(fn):
        return {"fn": fn, "dtypes": NUMERIC}

    def flt(fn):
        return {"fn": fn, "dtypes": FLOATS}

    def bln(fn):
        return {"fn": fn, "dtypes": BOOL}

    def f(expr):
        return flt(unary(expr))

    def pred(expr):
        return flt(lambda x: ew(expr, np.bool_, x))

    return {
        "Add": num(binary("x0 + x1", "x0 + x1", np.add)),
        "Sub": num(binary("x0 - x1", "x0 - x1", np.subtract)),
        "Mul": num(binary("x0 * x1", "x0 * x1", np.multiply)),
        "RealDiv": num(binary("x0 / x1", "(double)x0 / (double)x1", np.true_divide)),
        "FloorDiv": num(floordiv),
        "FloorMod": num(floormod),
        "Pow": num(power),
        "Maximum": num(maximum),
        "Minimum": num(minimum),
        "SquaredDifference": num(binary("(x0 - x1) * (x0 - x1)", "(x0 - x1) * (x0 - x1)",
                                        np.subtract)),
        "Atan2": flt(binary("atan2(x0, x1)", None, np.arctan2)),
        "AddN": num(add_n),
        "Neg": num(unary("-x0")),
        "Cast": {"fn": cast, "dtypes": ALL},
        "Abs": num(absolute),
        "Sign": num(sign),
        "Square": num(unary("x0 * x0")),
        "Sqrt": f("sqrt(x0)"),
        "Rsqrt": f("rsqrt(x0)"),
        "Exp": f("exp(x0)"),
        "Log": f("log(x0)"),
        "Log1p": f("log1p(x0)"),
        "Expm1": f("expm1(x0)"),
        "Sin": f("sin(x0)"),
        "Cos": f("cos(x0)"),
        "Tan": f("tan(x0)"),
        "Tanh": f("tanh(x0)"),
        "Sigmoid": f("1 / (1 + exp(-x0))"),
        "Softplus": f("(x0 > 0 ? x0 : 0) + log1p(exp(-fabs(x0)))"),
        "Reciprocal": f("1 / x0"),
        "Floor": f("floor(x0)"),
        "Ceil": f("ceil(x0)"),
        "Round": num(round_),
        "Erf": f("erf(x0)"),
        "IsNan": pred("isnan(x0)"),
        "IsFinite": pred("isfinite(x0)"),
        "IsInf": pred("isinf(x0)"),
        "Equal": {"fn": cmp("=="), "dtypes": ALL},
        "NotEqual": {"fn": cmp("!="), "dtypes": ALL},
        "Less": num(cmp("<")),
        "LessEqual": num(cmp("<=")),
        "Greater": num(cmp(">")),
        "GreaterEqual": num(cmp(">=")),
        "LogicalAnd": bln(lambda x, y: ew("x0 && x1", np.bool_, x, y)),
        "LogicalOr": bln(lambda x, y: ew("x0 || x1", np.bool_, x, y)),
        "LogicalXor": bln(lambda x, y: ew("(x0 != 0) != (x1 != 0)", np.bool_, x, y)),
        "LogicalNot": bln(lambda x: ew("!x0", np.bool_, x)),
    }
