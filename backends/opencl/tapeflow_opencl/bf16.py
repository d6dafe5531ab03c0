"""bfloat16 on OpenCL: stored as 16-bit words, computed in float32.

OpenCL C has no bfloat16 type, and no device we target computes in it. A bfloat16
tensor on ``opencl:N`` is a ``ushort`` buffer (``runtime.CTYPES``) whose host copies
are ``ml_dtypes.bfloat16`` arrays (the same bits). Kernels see it one of two ways:

* the ops in :data:`NATIVE` only move or select elements: their kernels copy the
  16-bit words as they are, with no conversion;
* every other op that declares float32 on OpenCL, except those in :data:`NOT_DECLARED`,
  runs its float32 kernel (:func:`compute_in_float32`): each bfloat16 input is widened
  by one elementwise kernel (:data:`PREAMBLE`'s ``bf16_to_f``: the bits shifted left by
  16, exact), and each float32 result is rounded back to bfloat16 (``f_to_bf16``: round
  to nearest, ties to even, NaN stays NaN), as the NumPy backend does with its float32
  round trip. Reductions and MatMul therefore accumulate in float32.

``Cast`` converts in one kernel each way (:func:`cast`).

float16 (``half``, on devices with cl_khr_fp16 only: ``runtime.CLDevice.check_dtype``
decides whether float16 reaches a device at all) goes the same way: every op that
declares float32, except the decompositions (:data:`F16_NOT_DECLARED`), runs its float32
kernel on inputs widened exactly (``(float)x``) and rounds each float32 result once to
nearest even (``convert_half_rte``), as NumPy computes float16 (in float, rounded once
per op); reductions and MatMul accumulate in float32. ``NextAfter`` has a float16
kernel of its own (:data:`F16_KERNELS`: the step is a float16 ulp), and the random
draws declare float16 in ``k_random`` (the CPU backend's recipes, bit for bit).

An op that does not declare bfloat16 here keeps the dispatcher's NotFoundError ("No
kernel for op X on device type 'opencl' with dtype bfloat16"), never wrong numbers.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tapeflow import dtypes as _dt

from . import runtime as rt

__all__ = ["BF16", "PREAMBLE", "NATIVE", "NOT_DECLARED", "to_float32", "from_float32",
           "compute_in_float32", "cast", "declare"]

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)

#: OpenCL C: bfloat16 bits (ushort) <-> float; ``f_to_bf16`` rounds to nearest even and
#: keeps a NaN a (quiet) NaN instead of letting the carry turn it into an infinity
PREAMBLE = """
inline float bf16_to_f(ushort u) { return as_float(((uint)u) << 16); }
inline ushort f_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (ushort)((u >> 16) | 0x40);
    return (ushort)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
"""

#: ops whose OpenCL kernels only move, select or report the shape of elements: they
#: run on bfloat16 words unchanged (the NumPy backend's BF16_NATIVE, less the
#: comparisons: -0 == +0 and NaN != NaN need float compares, and Where of a float; and
#: Tile, whose kernel goes through PyOpenCL's own array code, which cannot format a
#: bfloat16 scalar: "bad char in struct format")
NATIVE = frozenset({"Reshape", "BroadcastTo", "Transpose", "ExpandDims", "Squeeze",
                    "ConcatV2", "Pack", "Unpack", "SplitV", "Slice", "StridedSlice",
                    "GatherV2", "GatherNd", "Identity", "StopGradient", "Shape", "Size",
                    "Rank", "SelectV2", "RandomShuffle", "Bitcast"})

#: float32 OpenCL kernels not offered for bfloat16: the decompositions (the NumPy
#: backend has no bfloat16 for them either: 8 bits are too few for a factorisation)
#: and the random draws (float32 draws rounded would reach ``maxval``; the NumPy
#: backend draws bfloat16 with its own bit recipe, not reproduced here yet); ``Complex``
#: and ``RFFT``, whose results are complex (the NumPy backend takes float32/float64 only)
NOT_DECLARED = frozenset({"Cholesky", "LogMatrixDeterminant", "MatrixDeterminant",
                          "MatrixInverse", "MatrixSolve", "Qr", "SelfAdjointEigV2", "Svd",
                          "SvdValues", "RandomUniform", "RandomStandardNormal",
                          "TruncatedNormal", "Complex", "RFFT"})


#: OpenCL C for float16 (``half``, only on devices with cl_khr_fp16): widened exactly,
#: rounded to nearest even once (``convert_half_rte``: overflow to inf, NaN stays NaN)
F16_PREAMBLE = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"


def to_float32(a):
    """A bfloat16 or float16 device array widened to a new contiguous float32 array
    (exact)."""
    if a.dtype is F16 or a.dtype == F16:
        return rt.elementwise("(float)x0", _F32, a, preamble=F16_PREAMBLE, out_shape=a.shape)
    return rt.elementwise("bf16_to_f(x0)", _F32, a, preamble=PREAMBLE, out_shape=a.shape)


def from_float32(a, low=BF16):
    """A float32 device array rounded to a new contiguous ``low`` (bfloat16 or float16)
    array (nearest even)."""
    if low == F16:
        return rt.elementwise("convert_half_rte(x0)", F16, a, preamble=F16_PREAMBLE,
                              out_shape=a.shape)
    return rt.elementwise("f_to_bf16(x0)", BF16, a, preamble=PREAMBLE, out_shape=a.shape)


def _low(args, low=BF16):
    """Whether an argument (or an element of a list argument) is a ``low`` array (the
    dtype is a singleton: ``is`` keeps this test at ~0.1 us per argument)."""
    for a in args:
        t = type(a)
        if t is list or t is tuple:
            for b in a:
                if getattr(b, "dtype", None) is low:
                    return True
        elif getattr(a, "dtype", None) is low:
            return True
    return False


def _up(a, low=BF16):
    t = type(a)
    if t is list or t is tuple:
        return t(_up(b, low) for b in a) if _low(a, low) else a
    return to_float32(a) if getattr(a, "dtype", None) is low else a


def _down(out, low=BF16):
    t = type(out)
    if t is list or t is tuple:
        return t(_down(o, low) for o in out)
    if getattr(out, "dtype", None) == _F32 and hasattr(out, "queue"):
        return from_float32(out, low)
    return out


def compute_in_float32(fn, low=BF16):
    """An OpenCL kernel running ``fn`` (a float32 kernel) in float32 where an input array
    (or a ``dtype`` attr) is ``low`` (bfloat16 or float16), its float32 results rounded
    to ``low``; other calls go to ``fn`` unchanged."""
    lowt = _dt.as_dtype(low)

    def kernel(*args, **attrs):
        for a in args:              # (inlined: this runs before every float32 call too)
            try:
                if a.dtype is low:
                    break
            except AttributeError:
                if type(a) in (list, tuple) and _low(a, low):
                    break
        else:
            if not attrs or attrs.get("dtype") is not lowt:
                return fn(*args, **attrs)
        if attrs.get("dtype") is lowt:
            attrs["dtype"] = _dt.float32
        return _down(fn(*[_up(a, low) for a in args], **attrs), low)
    suffix = "_f16" if low == F16 else "_bf16"
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel") + suffix
    kernel.__wrapped__ = fn
    return kernel


def _half_expr(to, src):
    """OpenCL C converting the float ``src`` to ``to`` as NumPy converts float16 (every
    float16 is exactly a float): a bool tests != 0, an integer truncates."""
    if to == np.bool_:
        return f"({src}) != 0"
    if to.kind == "c":              # (a zero imaginary part)
        t = rt.CTYPES[to][:-1]
        return f"({t}2)(({t})({src}), ({t})0)"
    return f"({rt.CTYPES[to]})({src})"


def cast(fn):
    """``Cast`` with bfloat16 or float16 on either side (one kernel); other casts go to
    ``fn``."""
    def kernel(x, dtype):
        to = np.dtype(dtype.np)
        xd = x.dtype
        if xd is BF16 or xd == F16:
            if to == xd:
                return x
            if to not in rt.CTYPES:
                rt.device_of(x).check_dtype(to, "casting to it")
            if xd is BF16:
                src, pre = "bf16_to_f(x0)", PREAMBLE
            else:
                src, pre = "(float)x0", F16_PREAMBLE
            if to == BF16:
                return rt.elementwise(f"f_to_bf16({src})", BF16, x, preamble=PREAMBLE + pre)
            if to == F16:       # bfloat16 -> float16: the float is exact, one rounding
                return rt.elementwise(f"convert_half_rte({src})", F16, x,
                                      preamble=PREAMBLE + F16_PREAMBLE)
            return rt.elementwise(_half_expr(to, src), to, x, preamble=pre)
        re = "x0.x" if xd.kind == "c" else "x0"     # (complex: the real part, as on cpu)
        if to == BF16:
            return rt.elementwise(f"f_to_bf16((float){re})", BF16, x, preamble=PREAMBLE)
        if to == F16:
            rt.device_of(x).check_dtype(to, "casting to it")
            # one rounding from the source (float64 -> float16 directly, as NumPy does)
            expr = ("convert_half_rte((float)x0)" if xd == np.bool_ else
                    f"convert_half_rte({re})")
            return rt.elementwise(expr, F16, x, preamble=F16_PREAMBLE)
        return fn(x, dtype=dtype)
    kernel.__name__ = kernel.__qualname__ = "cast_bf16"
    kernel.__wrapped__ = fn
    return kernel


#: float32 OpenCL kernels not offered for float16: the decompositions (the NumPy
#: backend has no float16 for them either); the random draws declare float16 themselves
#: (``k_random``: the CPU backend's float16 recipes, on the device)
F16_NOT_DECLARED = NOT_DECLARED - {"RandomUniform", "RandomStandardNormal", "TruncatedNormal"}


_NEXTAFTER_F16 = F16_PREAMBLE + """
inline half nextafter_h(half x, half y) {
    if (isnan(x) || isnan(y)) return x + y;
    if (x == y) return y;
    if (x == (half)0) return as_half((ushort)((as_ushort(y) & 0x8000) | 1));
    ushort u = as_ushort(x);
    return as_half((ushort)(((x < y) == (x > (half)0)) ? u + 1 : u - 1));
}
"""


def _nextafter_f16(x, y):
    """``NextAfter`` of float16: the next float16 (on the bits; in float32 and rounded
    back, the step of a float32 would vanish)."""
    return rt.elementwise("nextafter_h(x0, x1)", F16, x, y, preamble=_NEXTAFTER_F16)


#: float16 kernels of their own: ops whose float32 result rounded is not the float16 one
F16_KERNELS = {"NextAfter": _nextafter_f16}


def declare(op_name, spec):
    """``spec`` (a ``KernelSpec`` of a kernel module's table) with bfloat16 and float16
    added to its dtypes where the op supports them on OpenCL (see the module doc): the
    ops of :data:`NATIVE` as they are, ``Cast`` through :func:`cast`, the others through
    a variant per added dtype; else ``spec`` unchanged."""
    names = () if spec.dtypes is None else tuple(d.name for d in spec.dtypes)
    if "float32" not in names:
        return spec
    add = [low for low, skip in (("bfloat16", NOT_DECLARED), ("float16", F16_NOT_DECLARED))
           if low not in names and op_name not in skip]
    if not add:
        return spec
    dtypes = tuple(add) + spec.dtypes
    if op_name == "Cast":           # 16 bits on either side: the key dtype is the input's
        return rt.respec(spec, dtypes=dtypes, fn=cast(spec.fn))
    if op_name in NATIVE:
        return rt.respec(spec, dtypes=dtypes)
    # a variant: dispatch runs the float32 round trip for bfloat16/float16 calls only, so
    # the float32 calls reach the kernel with no wrapper in front
    variants = dict(spec.variants or {})
    for low in add:
        npdt = np.dtype(_dt.as_dtype(low).np)
        variants[npdt] = (F16_KERNELS.get(op_name) if low == "float16" else None) or \
            compute_in_float32(spec.fn, npdt)
    return rt.respec(spec, dtypes=dtypes, variants=variants)
