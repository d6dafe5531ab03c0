"""Fused elementwise kernels on ``cuda:N``: one ``cupy.ElementwiseKernel`` per group.

The graph pass :func:`tapeflow.tracing.graph_fusion.fuse` hands a group of elementwise ops
(an :class:`~tapeflow.tracing.graph_fusion.ElementwiseSpec`) to
``CupyBackend.fuse_elementwise``. :func:`kernel_definition` turns it into the four
arguments of CuPy's ``ElementwiseKernel(in_params, out_params, operation, name)``:
typed inputs ``x0, x1, ..`` (CuPy broadcasts them, strided or not), typed outputs
``out0, ..``, and an operation of one statement per op, ``const T v = (T)(expr);`` with
``T`` the C++ type of the op's dtype, so every intermediate is rounded to its dtype as
when it went through memory. The expressions follow the unfused CUDA kernels: CuPy's
ufuncs (NaN-propagating ``maximum``/``minimum``, ``true_divide`` of integers in double)
and this backend's own fused kernels (``k_cuda.ELEMENTWISE``: ``ReluGrad``, ``Elu``,
the stable ``Sigmoid``, ``Rsqrt``...). float16 is not fused (CuPy's ``float16`` class
computes through float; the unfused kernels handle it).

Source generation needs no CuPy (tested on machines without a GPU); the kernel object
is created on the first call.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

__all__ = ["cuda_expression", "kernel_definition", "fusible_op", "fuse_elementwise",
           "FusedKernel"]

#: NumPy dtype name -> C++ type in CuPy kernels
CTYPES = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
          "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
          "uint32": "unsigned int", "uint64": "unsigned long long", "float32": "float",
          "float64": "double"}
_FLOATS = ("float32", "float64")
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_NUMERIC = _FLOATS + _INTS
_ALL = _NUMERIC + ("bool",)
_NAMES = re.compile(r"\bx(\d+)\b")

#: floats only, result of the input's dtype; ``T`` is the C++ type
_UNARY_FLOAT = {
    "Sqrt": "sqrt(x0)", "Exp": "exp(x0)", "Log": "log(x0)", "Log1p": "log1p(x0)",
    "Expm1": "expm1(x0)", "Sin": "sin(x0)", "Cos": "cos(x0)", "Tan": "tan(x0)",
    "Tanh": "tanh(x0)", "Reciprocal": "(T)1 / x0", "Floor": "floor(x0)", "Ceil": "ceil(x0)",
    "Erf": "erf(x0)", "Rsqrt": "(T)1 / sqrt(x0)",
    # k_cuda's stable sigmoid, as one expression
    "Sigmoid": "x0 >= (T)0 ? (T)1 / ((T)1 + exp(-x0)) : exp(x0) / ((T)1 + exp(x0))",
    "Elu": "x0 > (T)0 ? x0 : (T)expm1(x0)",
}
_BINARY_ARITH = {"Add": "x0 + x1", "Sub": "x0 - x1", "Mul": "x0 * x1"}
_COMPARE = {"Equal": "==", "NotEqual": "!=", "Less": "<", "LessEqual": "<=",
            "Greater": ">", "GreaterEqual": ">="}
_GRADS = {   # k_cuda.ELEMENTWISE's bodies, (dy, x) -> dx
    "ReluGrad": "x0 * (x1 > (T)0 ? (T)1 : (T)0)",
    "Relu6Grad": "x0 * ((x1 > (T)0 && x1 < (T)6) ? (T)1 : (T)0)",
    "EluGrad": "x1 < (T)0 ? (T)(x0 * (T)(x1 + (T)1)) : x0",
}


def cuda_expression(op_name, dtypes, attrs=None):
    """``(C++ expression of x0, x1.. with T the result type, result dtype name)`` or
    None (op or dtypes not fused on CUDA).

    >>> import numpy as np
    >>> cuda_expression("Maximum", (np.dtype("float32"),) * 2)
    ('(isnan(x0) || x0 > x1) ? x0 : x1', 'float32')
    >>> cuda_expression("RealDiv", (np.dtype("int32"),) * 2)
    ('(double)x0 / (double)x1', 'float64')
    """
    dts = [np.dtype(d).name for d in dtypes]
    if not dts or any(d not in _ALL for d in dts):
        return None
    x = dts[0]
    isf = x in _FLOATS
    if op_name == "Cast":
        to = attrs.get("dtype") if attrs else None
        to = np.dtype(getattr(to, "np", to)).name if to is not None else None
        if len(dts) != 1 or to not in _ALL:
            return None
        return ("x0 != 0" if to == "bool" and x != "bool" else "x0"), to
    if op_name == "SelectV2":
        if len(dts) == 3 and dts[0] == "bool" and dts[1] == dts[2]:
            return "x0 ? x1 : x2", dts[1]
        return None
    if any(d != x for d in dts):
        return None
    n = len(dts)
    if op_name in _BINARY_ARITH and n == 2 and x in _NUMERIC:
        return _BINARY_ARITH[op_name], x
    if op_name == "RealDiv" and n == 2 and x in _NUMERIC:
        if isf:
            return "x0 / x1", x
        if x in ("int8", "uint8", "int16", "uint16"):
            return None                           # NumPy's result is float16/float32
        return "(double)x0 / (double)x1", "float64"
    if op_name in ("Maximum", "Minimum") and n == 2 and x in _NUMERIC:
        c = ">" if op_name == "Maximum" else "<"
        return (f"(isnan(x0) || x0 {c} x1) ? x0 : x1" if isf else f"(x0 {c} x1) ? x0 : x1"), x
    if op_name == "SquaredDifference" and n == 2 and x in _NUMERIC:
        return "(T)(x0 - x1) * (T)(x0 - x1)", x
    if op_name in ("Atan2", "Pow") and n == 2 and isf:
        return ("atan2(x0, x1)" if op_name == "Atan2" else "pow(x0, x1)"), x
    if op_name in _UNARY_FLOAT and n == 1 and isf:
        return _UNARY_FLOAT[op_name], x
    if op_name in _GRADS and n == 2 and isf:
        return _GRADS[op_name], x
    if n == 1 and x in _NUMERIC:
        if op_name == "Neg":
            return "-x0", x
        if op_name == "Square":
            return "x0 * x0", x
        if op_name == "Abs":
            return ("fabs(x0)" if isf else "x0" if x.startswith("uint")
                    else "(x0 < 0) ? -x0 : x0"), x
        if op_name == "Sign":
            return ("isnan(x0) ? x0 : (T)((x0 > 0) - (x0 < 0))" if isf
                    else "(x0 > 0) - (x0 < 0)"), x
        if op_name == "Round":
            return ("rint(x0)" if isf else "x0"), x
        if op_name == "Relu":
            return ("(isnan(x0) || x0 > (T)0) ? x0 : (T)0" if isf else "x0 > 0 ? x0 : 0"), x
        if op_name == "Relu6" and isf:
            return ("(isnan(x0) || x0 > (T)0) ? ((isnan(x0) || x0 < (T)6) ? x0 : (T)6) "
                    ": (T)0"), x
        if op_name == "LeakyRelu" and isf and attrs and "alpha" in attrs:
            return f"x0 > (T)0 ? x0 : (T)(x0 * (T){float(attrs['alpha'])!r})", x
    if op_name in ("IsNan", "IsFinite", "IsInf") and n == 1 and isf:
        return {"IsNan": "isnan(x0)", "IsFinite": "isfinite(x0)",
                "IsInf": "isinf(x0)"}[op_name], "bool"
    if op_name in _COMPARE and n == 2 and (x in _NUMERIC or op_name in ("Equal", "NotEqual")):
        return f"x0 {_COMPARE[op_name]} x1", "bool"
    if x == "bool":
        if op_name == "LogicalAnd" and n == 2:
            return "x0 && x1", "bool"
        if op_name == "LogicalOr" and n == 2:
            return "x0 || x1", "bool"
        if op_name == "LogicalXor" and n == 2:
            return "x0 != x1", "bool"
        if op_name == "LogicalNot" and n == 1:
            return "!x0", "bool"
    return None


def fusible_op(op_name, in_dtypes, attrs):
    """Whether ``op_name`` on these dtypes can be part of a fused CUDA kernel."""
    return cuda_expression(op_name, in_dtypes, attrs) is not None


def kernel_definition(spec):
    """``(in_params, out_params, operation, name)`` for ``cupy.ElementwiseKernel``, or
    None when an op has no CUDA expression here.

    >>> import numpy as np
    >>> from tapeflow.tracing.graph_fusion import ElementwiseSpec, Step
    >>> f32 = np.dtype("float32")
    >>> spec = ElementwiseSpec([((4,), f32), ((), f32)],
    ...                        [Step("Mul", (0, 1), {}, f32, (4,)),
    ...                         Step("Exp", (2,), {}, f32, (4,))], [3], (4,))
    >>> ins, outs, op, name = kernel_definition(spec)
    >>> ins, outs
    ('float32 x0, float32 x1', 'float32 out0')
    >>> print(op)
    const float v2 = (float)(x0 * x1);  // Mul
    const float v3 = (float)(exp(v2));  // Exp
    out0 = v3;
    """
    n_in = len(spec.inputs)
    names = [f"x{j}" for j in range(n_in)]
    lines = []
    for k, s in enumerate(spec.steps):
        dts = [spec.value_dtype(a) for a in s.args]
        e = cuda_expression(s.op, dts, s.attrs)
        if e is None or e[1] != s.dtype.name:
            return None
        expr, _ = e
        ct = CTYPES[s.dtype.name]
        args = [names[a] for a in s.args]
        body = _NAMES.sub(lambda m, args=args: args[int(m.group(1))], expr)
        body = body.replace("(T)", f"({ct})")
        v = f"v{n_in + k}"
        names.append(v)
        lines.append(f"const {ct} {v} = ({ct})({body});  // {s.op}")
    for j, o in enumerate(spec.outputs):
        lines.append(f"out{j} = {names[o]};")
    in_params = ", ".join(f"{np.dtype(d).name} x{j}" for j, (_, d) in enumerate(spec.inputs))
    if any(np.dtype(d).name not in CTYPES for _, d in spec.inputs):
        return None
    out_params = ", ".join(f"{spec.value_dtype(o).name} out{j}"
                           for j, o in enumerate(spec.outputs))
    operation = "\n".join(lines)
    digest = hashlib.sha1((in_params + out_params + operation).encode()).hexdigest()[:12]
    return in_params, out_params, operation, f"tapeflow_fused_{digest}"


class FusedKernel:
    """Calls the ``cupy.ElementwiseKernel`` of a spec (created on the first call): one
    array, or a tuple when the group has several outputs."""

    def __init__(self, definition, device=None, multi_device=False):
        self.definition = definition
        self.device = device
        self.multi_device = multi_device
        self._k = None

    def __call__(self, *arrays):
        k = self._k
        if k is None:
            from . import _cupy
            cp = _cupy.cupy()
            k = self._k = cp.ElementwiseKernel(*self.definition)
        if self.multi_device:
            with self.device.handle:
                return k(*arrays)
        return k(*arrays)


def fuse_elementwise(spec, multi_device=False):
    """A :class:`FusedKernel` for ``spec`` or None (see :func:`kernel_definition`)."""
    d = kernel_definition(spec)
    if d is None:
        return None
    return FusedKernel(d, spec.device, multi_device)
