"""Elementwise kernels (:class:`MathKernels`): the math ops, one generated OpenCL C kernel
per (op, dtypes, layout), and the fused optimizer updates.

Every op is an expression for :func:`runtime.elementwise` (broadcasting and strided
inputs included), chosen per dtype where C and NumPy differ: integer floor
division and modulo round toward negative infinity, float ``maximum``/``minimum``
propagate NaN, ``round`` is half-to-even (``rint``), ``abs`` of a signed integer
stays signed. Result dtypes are NumPy's (so ``RealDiv`` of integers gives float64,
as on ``cpu``). Complex inputs (``float2``/``double2`` pairs) take the expressions of
:mod:`tapeflow_opencl.cplx` through the same generated kernel.

Fused optimizer updates (issue 34): each op of :mod:`tapeflow.ops.fused` (``ApplyAdam``...)
is one generated elementwise kernel that reads the variable, its slots and the gradient
once and writes the new variable and slots: one launch per variable and step instead of
about ten. The formulas and their order are those of the ``cpu`` kernels
(:class:`tapeflow.kernels.optim.OptimKernels`), with ``FP_CONTRACT OFF`` (no fused
multiply-add the NumPy update does not do); the result agrees within float rounding (the
device's ``sqrt`` and division may differ in the last bit). The step's coefficients
(learning rate, Adam's ``lr_t``) are 0-d device arrays read by every work item; the fixed
hyperparameters are kernel arguments, so a new ``beta1`` compiles nothing. With
``inplace=True`` (contiguous inputs) the outputs are the inputs' buffers; otherwise new
arrays.
"""

from __future__ import annotations

import functools

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

from . import cplx
from . import runtime as rt
from .runtime import FLOATS, NUMERIC

BOOL = ("bool",)
ALL = NUMERIC + BOOL

#: float floor-division and modulo with NumPy's semantics (npy_divmod)
_DIVMOD = """
#define DEF_DIVMOD(T) \\
inline T fdiv_##T(T a, T b) { \\
    if (b == (T)0) return a / b; \\
    if (isinf(a) != isinf(b) && !isnan(a) && !isnan(b)) return a / b; \\
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


def into(expr, out, *arrays, preamble=""):
    """:func:`runtime.elementwise` writing into ``out`` (the ``out=`` capability,
    docs/backends.md, "Output buffers"): a contiguous array of the result's shape and
    dtype at offset 0, which may be one of ``arrays`` when it has exactly that shape
    (each work item reads its own element before writing it). Returns ``out``."""
    if out.offset or not rt.is_contiguous(out):
        raise ValueError("out= must be a contiguous array at offset 0 (the buffer plan's)")
    dev = rt._BY_QUEUE[arrays[0].queue.int_ptr]
    key = (dev.index, expr, out.dtype, preamble, out.shape,
           *[(a.dtype, a.shape, a.strides) for a in arrays])
    plan = rt._PLANS.get(key)
    if plan is None:       # (made and cached by one call the usual way)
        rt.elementwise(expr, out.dtype, *arrays, preamble=preamble, out_shape=out.shape)
        plan = rt._PLANS.get(key)
        if plan is None:   # (an empty result: nothing to write)
            return out
    k, n, tail, _ = plan
    args = [out.base_data]
    for a in arrays:
        args += [a.base_data, a.offset // a.dtype.itemsize]
    args.append(n)
    rt.launch(dev, k, (n,), None, *args, *tail)
    return out


def _ew(expr, dt, *xs, out=None):
    """``expr`` over ``xs`` into a new array of ``dt``, or into ``out``."""
    if out is None:
        return rt.elementwise(expr, dt, *xs)
    return into(expr, out, *xs)


# --- the expression table: MathKernels.table() and elementwise fusion share it ---------------

#: binary ops: (float expression, integer expression or None, NumPy function giving the
#: result dtype, or None for the inputs' dtype)
_BINARY = {
    "Add": ("x0 + x1", "x0 + x1", np.add),
    "Sub": ("x0 - x1", "x0 - x1", np.subtract),
    "Mul": ("x0 * x1", "x0 * x1", np.multiply),
    "RealDiv": ("x0 / x1", "(double)x0 / (double)x1", np.true_divide),
    "SquaredDifference": ("(x0 - x1) * (x0 - x1)", "(x0 - x1) * (x0 - x1)", np.subtract),
    "Atan2": ("atan2(x0, x1)", None, np.arctan2),
    "Maximum": ("(isnan(x0) || x0 > x1) ? x0 : x1", "(x0 > x1) ? x0 : x1", None),
    "Minimum": ("(isnan(x0) || x0 < x1) ? x0 : x1", "(x0 < x1) ? x0 : x1", None),
    "Copysign": ("copysign(x0, x1)", None, np.copysign),
    "Hypot": ("hypot(x0, x1)", None, np.hypot),
    # log(exp(x0) + exp(x1)); equal infinities would give inf - inf (nan) below; a nan
    # input reaches log1p through fabs and propagates (fmax alone would drop it)
    "LogAddExp": ("(isinf(x0) && x0 == x1) ? x0 : fmax(x0, x1) + log1p(exp(-fabs(x0 - x1)))",
                  None, np.logaddexp),
    "NextAfter": ("nextafter(x0, x1)", None, np.nextafter),
}

#: unary float ops (float32/float64 only), result of the input's dtype
_UNARY_FLOAT = {
    "Sqrt": "sqrt(x0)", "Rsqrt": "rsqrt(x0)", "Exp": "exp(x0)", "Log": "log(x0)",
    "Log1p": "log1p(x0)", "Expm1": "expm1(x0)", "Sin": "sin(x0)", "Cos": "cos(x0)",
    "Tan": "tan(x0)", "Tanh": "tanh(x0)", "Sigmoid": "1 / (1 + exp(-x0))",
    "Softplus": "(x0 > 0 ? x0 : 0) + log1p(exp(-fabs(x0)))", "Reciprocal": "1 / x0",
    "Floor": "floor(x0)", "Ceil": "ceil(x0)", "Erf": "erf(x0)",
    "Asin": "asin(x0)", "Acos": "acos(x0)", "Atan": "atan(x0)", "Sinh": "sinh(x0)",
    "Cosh": "cosh(x0)", "Asinh": "asinh(x0)", "Acosh": "acosh(x0)", "Atanh": "atanh(x0)",
    "Log2": "log2(x0)", "Log10": "log10(x0)", "Trunc": "trunc(x0)",
}

#: unary ops on every numeric dtype: (float expression, integer expression); None as the
#: integer expression of Abs on unsigned types / Round on integers means "x0 unchanged"
_UNARY_NUM = {
    "Neg": ("-x0", "-x0"),
    "Square": ("x0 * x0", "x0 * x0"),
    "Abs": ("fabs(x0)", "(x0 < 0) ? -x0 : x0"),
    "Sign": ("isnan(x0) ? x0 : (x0 > 0 ? 1 : (x0 < 0 ? -1 : 0))", "(x0 > 0) - (x0 < 0)"),
    "Round": ("rint(x0)", "x0"),
}

#: float predicates (bool result)
_PREDICATES = {"IsNan": "isnan(x0)", "IsFinite": "isfinite(x0)", "IsInf": "isinf(x0)",
               "Signbit": "signbit(x0)"}

#: comparisons (bool result): operator, dtypes
_COMPARISONS = {"Equal": ("==", ALL), "NotEqual": ("!=", ALL), "Less": ("<", NUMERIC),
                "LessEqual": ("<=", NUMERIC), "Greater": (">", NUMERIC),
                "GreaterEqual": (">=", NUMERIC)}

#: bitwise ops on integers (and bools, stored as 0/1): (expression, dtypes)
_BITWISE = {"BitwiseAnd": ("x0 & x1", ALL[len(FLOATS):]),
            "BitwiseOr": ("x0 | x1", ALL[len(FLOATS):]),
            "BitwiseXor": ("x0 ^ x1", ALL[len(FLOATS):]),
            "LeftShift": ("x0 << x1", NUMERIC[len(FLOATS):]),
            "RightShift": ("x0 >> x1", NUMERIC[len(FLOATS):])}

#: logical ops on bools
_LOGICAL = {"LogicalAnd": "x0 && x1", "LogicalOr": "x0 || x1",
            "LogicalXor": "(x0 != 0) != (x1 != 0)", "LogicalNot": "!x0"}


def _cast_expr(to):
    return "x0 != 0" if np.dtype(to) == np.bool_ else "x0"


def expression(op_name, dtypes, attrs=None):
    """``(OpenCL C expression of x0, x1.., result dtype, preamble)`` computing
    ``op_name`` on inputs of ``dtypes`` exactly as this module's kernel does, or None
    when the kernel is not a single expression for them (``FloorDiv`` / ``Pow`` of
    integers check their divisor / exponent on the host; ``AddN`` is variadic) or does
    not take those dtypes. ``attrs``: the op's attributes (``Cast``'s ``dtype``). Used
    by elementwise fusion (``tapeflow_opencl.fusion``).

    >>> import numpy as np
    >>> expression("Add", (np.dtype("int32"), np.dtype("int32")))
    ('x0 + x1', dtype('int32'), '')
    >>> expression("FloorDiv", (np.dtype("int32"), np.dtype("int32"))) is None
    True
    """
    dts = tuple(np.dtype(d) for d in dtypes)
    if not dts:
        return None
    x = dts[0]
    isf = x.kind == "f"
    if op_name == "Complex" or any(d.kind == "c" for d in dts) or (
            op_name == "Cast" and attrs is not None and "dtype" in attrs
            and np.dtype(getattr(attrs["dtype"], "np", attrs["dtype"])).kind == "c"):
        return cplx.expression(op_name, dts, attrs)
    if op_name == "Cast":
        if len(dts) != 1 or x.name not in ALL or attrs is None or "dtype" not in attrs:
            return None
        to = np.dtype(getattr(attrs["dtype"], "np", attrs["dtype"]))
        if to.name not in ALL:
            return None
        return ("x0" if to == x else _cast_expr(to)), to, ""
    if any(d != x for d in dts):
        return None                   # the dispatcher casts to one dtype first
    if op_name in _BINARY and len(dts) == 2:
        ef, ei, npfn = _BINARY[op_name]
        if x.name not in (FLOATS if ei is None else NUMERIC):
            return None
        dt = x if npfn is None else _result_dtype(npfn, x, x)
        return (ef if isf else ei), dt, ""
    if op_name in _UNARY_FLOAT and len(dts) == 1:
        return (_UNARY_FLOAT[op_name], x, "") if x.name in FLOATS else None
    if op_name in _UNARY_NUM and len(dts) == 1:
        if x.name not in NUMERIC:
            return None
        ef, ei = _UNARY_NUM[op_name]
        if op_name == "Abs" and x.kind == "u":
            ei = "x0"
        return (ef if isf else ei), x, ""
    if op_name in _PREDICATES and len(dts) == 1:
        return (_PREDICATES[op_name], np.dtype(np.bool_), "") if x.name in FLOATS else None
    if op_name in _BITWISE and len(dts) == 2:
        expr, allowed = _BITWISE[op_name]
        return (expr, x, "") if x.name in allowed else None
    if op_name == "Invert" and len(dts) == 1:
        if x.name == "bool":
            return "!x0", x, ""
        return ("~x0", x, "") if x.name in NUMERIC[len(FLOATS):] else None
    if op_name in _COMPARISONS and len(dts) == 2:
        cop, allowed = _COMPARISONS[op_name]
        return (f"x0 {cop} x1", np.dtype(np.bool_), "") if x.name in allowed else None
    if op_name in _LOGICAL and len(dts) == (1 if op_name == "LogicalNot" else 2):
        return (_LOGICAL[op_name], np.dtype(np.bool_), "") if x.name in BOOL else None
    if op_name == "Pow" and len(dts) == 2 and x.name in FLOATS:
        return "pow(x0, x1)", x, ""
    return None


# --- fused optimizer updates (issue 34) -----------------------------------------------------

#: fused optimizer op -> (array inputs, scalar inputs, kernel constants from attrs, body);
#: the outputs are the array inputs but ``grad``, in order. Bodies update the locals of the
#: inputs.
_OPTIMIZERS = {
    "ApplyGradientDescent": (("var", "grad"), ("lr",), lambda a: {},
                             lambda a: "var = var - grad * lr;"),
    "ApplyMomentum": (("var", "accum", "grad"), ("lr", "mom_lr"),
                      lambda a: {"momentum": a["momentum"]},
                      lambda a: "accum = accum * momentum + grad; var = var - " + (
                          "(grad * lr + accum * mom_lr);" if a["use_nesterov"]
                          else "accum * lr;")),
    "ApplyAdam": (("var", "m", "v", "grad"), ("lr_t",),
                  lambda a: {"c1": 1 - a["beta1"], "c2": 1 - a["beta2"],
                             "epsilon": a["epsilon"]},
                  lambda a: "m = m + (grad - m) * c1; v = v + (grad * grad - v) * c2; "
                            "var = var - m * lr_t / (sqrt(v) + epsilon);"),
    "ApplyRMSProp": (("var", "ms", "mom", "grad"), ("lr",),
                     lambda a: {"c": 1 - a["rho"], "momentum": a["momentum"],
                                "epsilon": a["epsilon"]},
                     lambda a: "ms = ms + (grad * grad - ms) * c; "
                               "T step = grad * lr / sqrt(ms + epsilon); "
                               + _mom_step(a)),
    "ApplyCenteredRMSProp": (("var", "mg", "ms", "mom", "grad"), ("lr",),
                             lambda a: {"c": 1 - a["rho"], "momentum": a["momentum"],
                                        "epsilon": a["epsilon"]},
                             lambda a: "ms = ms + (grad * grad - ms) * c; "
                                       "mg = mg + (grad - mg) * c; "
                                       "T step = grad * lr / sqrt(ms - mg * mg + epsilon); "
                                       + _mom_step(a)),
    "ApplyKerasRMSProp": (("var", "ms", "grad"), ("lr",),
                          lambda a: {"c": 1 - a["rho"], "epsilon": a["epsilon"]},
                          lambda a: "ms = ms + (grad * grad - ms) * c; "
                                    "var = var - grad * lr / (sqrt(ms) + epsilon);"),
    "ApplyKerasCenteredRMSProp": (("var", "ms", "mg", "grad"), ("lr",),
                                  lambda a: {"c": 1 - a["rho"], "epsilon": a["epsilon"]},
                                  lambda a: "ms = ms + (grad * grad - ms) * c; "
                                            "mg = mg + (grad - mg) * c; var = var - grad * lr"
                                            " / (sqrt(ms - mg * mg) + epsilon);"),
    "ApplyAdagrad": (("var", "accum", "grad"), ("lr",), lambda a: {},
                     lambda a: "accum = accum + grad * grad; "
                               "var = var - grad * lr / sqrt(accum);"),
}


def _mom_step(attrs):
    """RMSProp's momentum update (momentum 0: the step alone, as the ``cpu`` kernel)."""
    if attrs["momentum"]:
        return "mom = mom * momentum + step; var = var - mom;"
    return "mom = step; var = var - mom;"


def _optim_source(T, arrays, scalars, consts, body):
    outs = [a for a in arrays if a != "grad"]
    params = ["long n"]
    params += [f"__global const {T}* {a}_in, long {a}_o" for a in arrays]
    params += [f"__global const {T}* {s}_in, long {s}_o" for s in scalars]
    params += [f"{T} {c}" for c in consts]
    params += [f"__global {T}* {a}_out, long {a}_oo" for a in outs]
    lines = ["#pragma OPENCL FP_CONTRACT OFF", f"typedef {T} T;",
             "__kernel void optim_k(" + ", ".join(params) + ") {",
             "  long i = get_global_id(0); if (i >= n) return;"]
    lines += [f"  T {a} = {a}_in[{a}_o + i];" for a in arrays]
    lines += [f"  const T {s} = {s}_in[{s}_o];" for s in scalars]
    lines += ["  " + body]
    lines += [f"  {a}_out[{a}_oo + i] = {a};" for a in outs]
    lines.append("}")
    return "\n".join(lines) + "\n"


class MathKernels:
    """The elementwise kernels: one method per kernel or per family of kernels that
    differ only by their expression or op (bound to it with :func:`runtime.bind` by
    :meth:`table`), and the fused optimizer updates."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def binary(self, expr_f, expr_i, npfn, x, y, out=None):
        """A binary op of :data:`_BINARY`: its float or integer expression, NumPy's dtype
        (into ``out`` when given, as the ones below)."""
        dt = _result_dtype(npfn, x.dtype, y.dtype)
        return _ew(expr_f if _isf(x) else expr_i, dt, x, y, out=out)

    def unary(self, expr_f, expr_i, x, out=None):
        """A unary op (``expr_i`` None: the float expression on every dtype)."""
        return _ew(expr_f if (_isf(x) or expr_i is None) else expr_i, x.dtype, x, out=out)

    def same_dtype(self, expr_f, expr_i, x, y, out=None):
        """Maximum and Minimum: the float (NaN-propagating) or integer expression."""
        return _ew(expr_f if _isf(x) else expr_i, x.dtype, x, y, out=out)

    def compare(self, op, x, y, out=None):
        """A comparison ``x0 <op> x1`` with a bool result."""
        return _ew(f"x0 {op} x1", np.bool_, x, y, out=out)

    def to_bool(self, expr, *xs):
        """A float predicate or a logical op: ``expr`` with a bool result."""
        return self.rt.elementwise(expr, np.bool_, *xs)

    def bitwise(self, expr, x, y):
        """A bitwise op of :data:`_BITWISE` in the inputs' dtype."""
        return self.rt.elementwise(expr, x.dtype, x, y)

    def invert(self, x):
        """Invert: ``~x`` (``!x`` on bools)."""
        return self.rt.elementwise("!x0" if x.dtype == np.bool_ else "~x0", x.dtype, x)

    def floordiv(self, x, y):
        """FloorDiv rounding toward negative infinity (NumPy's ``floor_divide``)."""
        _check_divisor(x, y)
        if _isf(x):
            ct = self.rt.CTYPES[x.dtype]
            return self.rt.elementwise(f"fdiv_{ct}(x0, x1)", x.dtype, x, y, preamble=_DIVMOD)
        return self.rt.elementwise(
            "(x1 == 0) ? 0 : ((x0 / x1) - (((x0 % x1) != 0) && ((x0 < 0) != (x1 < 0))))",
            x.dtype, x, y)

    def floormod(self, x, y):
        """FloorMod with the divisor's sign (NumPy's ``remainder``)."""
        _check_divisor(x, y)
        if _isf(x):
            ct = self.rt.CTYPES[x.dtype]
            return self.rt.elementwise(f"fmod_{ct}(x0, x1)", x.dtype, x, y, preamble=_DIVMOD)
        return self.rt.elementwise(
            "(x1 == 0) ? 0 : (((x0 % x1) != 0 && ((x0 % x1 < 0) != (x1 < 0))) "
            "? (x0 % x1 + x1) : (x0 % x1))", x.dtype, x, y)

    def power(self, x, y):
        """Pow: ``pow`` on floats, exact integer powers (negative exponents refused)."""
        if _isf(x):
            return self.rt.elementwise("pow(x0, x1)", x.dtype, x, y)
        if y.dtype.kind == "i" and (self.rt.download(y) < 0).any():
            raise InvalidArgumentError("Integers to negative integer powers are not allowed")
        ct = self.rt.CTYPES[x.dtype]
        return self.rt.elementwise(f"ipow_{ct}(x0, x1)", x.dtype, x, y, preamble=_ipow(ct))

    def add_n(self, *xs):
        """AddN: the inputs summed, at most 8 per launch."""
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
            out = self.rt.elementwise(expr, xs[0].dtype, *group)
        return out

    def cast(self, x, dtype):
        """Cast to ``dtype`` (complex on either side through :mod:`.cplx`)."""
        to = np.dtype(dtype.np)
        if to == x.dtype:
            return x
        if to.kind == "c" or x.dtype.kind == "c":
            self.rt.device_of(x).check_dtype(to, "casting to it")
            return self.rt.elementwise(cplx.cast_expr(x.dtype, to), to, x)
        if to not in self.rt.CTYPES or to == np.float16:
            # complex, or float16 without cl_khr_fp16: the device's own clear error (not
            # a compile error of a kernel casting to half)
            self.rt.device_of(x).check_dtype(to, "casting to it")
        return self.rt.elementwise(_cast_expr(to), to, x)

    def absolute(self, x):
        """Abs (unsigned integers returned as they are)."""
        if x.dtype.kind == "u":
            return x
        ef, ei = _UNARY_NUM["Abs"]
        return self.rt.elementwise(ef if _isf(x) else ei, x.dtype, x)

    def round_(self, x):
        """Round half to even (``rint``); integers returned as they are."""
        return self.rt.elementwise(_UNARY_NUM["Round"][0], x.dtype, x) if _isf(x) else x

    def complex_op(self, op_name, *xs):
        """``op_name`` on complex inputs: :func:`cplx.expression` through the generated
        elementwise kernel."""
        expr, dt, pre = cplx.expression(op_name, tuple(x.dtype for x in xs))
        return self.rt.elementwise(expr, dt, *xs, preamble=pre)

    def make_complex(self, re, im):
        """Complex: ``re + i im`` from two real inputs."""
        expr, dt, _ = cplx.expression("Complex", (re.dtype, im.dtype))
        return self.rt.elementwise(expr, dt, re, im)

    def optimizer_update(self, op_name, *inputs, inplace=False, **attrs):
        """A fused optimizer update (``ApplyAdam``...): op ``op_name``'s generated kernel
        on ``inputs`` (the arrays, then the 0-d coefficients); returns the new variable
        and slots (one array for ``ApplyGradientDescent``)."""
        arrays, scalars, consts_of, body_of = _OPTIMIZERS[op_name]
        arr = [self.rt.contiguous(a) for a in inputs[:len(arrays)]]
        sc = list(inputs[len(arrays):])
        var = arr[0]
        dev = self.rt.device_of(var)
        outs_in = [a for name, a in zip(arrays, arr) if name != "grad"]
        if inplace and all(o is i for o, i in zip(outs_in, inputs)):
            outs = outs_in
        else:
            outs = [self.rt.empty(dev, var.shape, var.dtype) for _ in outs_in]
        n = var.size
        if n:
            consts = consts_of(attrs)
            T = self.rt.CTYPES[var.dtype]
            src = _optim_source(T, arrays, scalars, consts, body_of(attrs))
            ft = var.dtype.type
            sd = ([np.int64] + [None, np.int64] * (len(arrays) + len(scalars))
                  + [ft] * len(consts) + [None, np.int64] * len(outs))
            args = [n]
            for a in arr + sc:
                args += [self.rt.buf(dev, a), a.offset // a.dtype.itemsize]
            args += [ft(v) for v in consts.values()]
            for o in outs:
                args += [self.rt.buf(dev, o), o.offset // o.dtype.itemsize]
            self.rt.launch(dev, self.rt.kernel(dev, src, "optim_k", sd), (n,), None, *args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        bind = self.rt.bind
        num, flt = NUMERIC, FLOATS
        table = {
            "FloorDiv": KernelSpec(self.floordiv, dtypes=num),
            "FloorMod": KernelSpec(self.floormod, dtypes=num),
            "Pow": KernelSpec(self.power, dtypes=num),
            "AddN": KernelSpec(self.add_n, dtypes=num),
            "Cast": KernelSpec(self.cast, dtypes=ALL),
            "Abs": KernelSpec(self.absolute, dtypes=num),
            "Sign": KernelSpec(bind(self.unary, "sign", *_UNARY_NUM["Sign"]), dtypes=num),
            "Round": KernelSpec(self.round_, dtypes=num),
            "Invert": KernelSpec(self.invert, dtypes=ALL[len(FLOATS):]),
        }
        for name, (ef, ei, npfn) in _BINARY.items():
            if name in ("Maximum", "Minimum"):
                fn = bind(self.same_dtype, name.lower(), ef, ei)
                table[name] = KernelSpec(fn, dtypes=num, out=True)
            else:
                fn = bind(self.binary, name.lower(), ef, ei, npfn)
                table[name] = KernelSpec(fn, dtypes=flt if ei is None else num, out=True)
        for name in ("Neg", "Square"):
            fn = bind(self.unary, name.lower(), *_UNARY_NUM[name])
            table[name] = KernelSpec(fn, dtypes=num, out=True)
        for name, expr in _UNARY_FLOAT.items():
            table[name] = KernelSpec(bind(self.unary, name.lower(), expr, None), dtypes=flt,
                                     out=True)
        for name, expr in _PREDICATES.items():
            table[name] = KernelSpec(bind(self.to_bool, name.lower(), expr), dtypes=flt)
        for name, (cop, dts) in _COMPARISONS.items():
            table[name] = KernelSpec(bind(self.compare, name.lower(), cop), dtypes=dts,
                                     out=True)
        for name, expr in _LOGICAL.items():
            table[name] = KernelSpec(bind(self.to_bool, name.lower(), expr), dtypes=BOOL)
        for name, (expr, dts) in _BITWISE.items():
            table[name] = KernelSpec(bind(self.bitwise, name.lower(), expr), dtypes=dts)
        self._add_complex(table)
        for name in _OPTIMIZERS:
            table[name] = KernelSpec(bind(self.optimizer_update, name.lower(), name),
                                     dtypes=FLOATS)
        return table

    def _add_complex(self, table):
        """Declare complex64/complex128 on the ops :mod:`.cplx` computes: a variant per
        complex dtype (the dispatcher calls it for complex inputs only, so the real
        kernels run as before); ``Cast`` converts complex on either side in its own
        kernel; ``Complex`` (two real inputs) is a kernel of its own."""
        for name in cplx.OPS:
            spec = table.get(name)
            fn = self.rt.bind(self.complex_op, f"{name.lower()}_complex", name)
            if spec is None:
                if name not in ("Real", "Imag", "Conj"):
                    continue
                spec = KernelSpec(fn, dtypes=())
            variants = dict(spec.variants or {})
            variants.update({c: fn for c in cplx.COMPLEX})
            table[name] = self.rt.respec(spec, dtypes=spec.dtypes + cplx.COMPLEX,
                                         variants=variants)
        cast = table["Cast"]
        table["Cast"] = self.rt.respec(cast, dtypes=cast.dtypes + cplx.COMPLEX)
        table["Complex"] = KernelSpec(self.make_complex, dtypes=FLOATS)


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return MathKernels(ctx).table()
