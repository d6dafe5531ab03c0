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
                    "Rank", "SelectV2", "RandomShuffle"})

#: float32 OpenCL kernels not offered for bfloat16: the decompositions (the NumPy
#: backend has no bfloat16 for them either: 8 bits are too few for a factorisation)
#: and the random draws (float32 draws rounded would reach ``maxval``; the NumPy
#: backend draws bfloat16 with its own bit recipe, not reproduced here yet)
NOT_DECLARED = frozenset({"Cholesky", "LogMatrixDeterminant", "MatrixDeterminant",
                          "MatrixInverse", "MatrixSolve", "Qr", "SelfAdjointEigV2", "Svd",
                          "SvdValues", "RandomUniform", "RandomStandardNormal",
                          "TruncatedNormal"})


def to_float32(a):
    """A bfloat16 device array widened to a new contiguous float32 array (exact)."""
    return rt.elementwise("bf16_to_f(x0)", _F32, a, preamble=PREAMBLE, out_shape=a.shape)


def from_float32(a):
    """A float32 device array rounded to a new contiguous bfloat16 array (nearest even)."""
    return rt.elementwise("f_to_bf16(x0)", BF16, a, preamble=PREAMBLE, out_shape=a.shape)


def _low(args):
    """Whether an argument (or an element of a list argument) is a bfloat16 array (the
    dtype is a singleton: ``is`` keeps this test at ~0.1 us per argument)."""
    for a in args:
        t = type(a)
        if t is list or t is tuple:
            for b in a:
                if getattr(b, "dtype", None) is BF16:
                    return True
        elif getattr(a, "dtype", None) is BF16:
            return True
    return False


def _up(a):
    t = type(a)
    if t is list or t is tuple:
        return t(_up(b) for b in a) if _low(a) else a
    return to_float32(a) if getattr(a, "dtype", None) is BF16 else a


def _down(out):
    t = type(out)
    if t is list or t is tuple:
        return t(_down(o) for o in out)
    if getattr(out, "dtype", None) == _F32 and hasattr(out, "queue"):
        return from_float32(out)
    return out


def compute_in_float32(fn):
    """An OpenCL kernel running ``fn`` (a float32 kernel) in float32 where an input array
    (or a ``dtype`` attr) is bfloat16, its float32 results rounded to bfloat16; other
    calls go to ``fn`` unchanged."""
    bf16 = _dt.bfloat16

    def kernel(*args, **attrs):
        for a in args:              # (inlined: this runs before every float32 call too)
            try:
                if a.dtype is BF16:
                    break
            except AttributeError:
                if type(a) in (list, tuple) and _low(a):
                    break
        else:
            if not attrs or attrs.get("dtype") is not bf16:
                return fn(*args, **attrs)
        if attrs.get("dtype") is bf16:
            attrs["dtype"] = _dt.float32
        return _down(fn(*[_up(a) for a in args], **attrs))
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel") + "_bf16"
    kernel.__wrapped__ = fn
    return kernel


def cast(fn):
    """``Cast`` with bfloat16 on either side (one kernel); other casts go to ``fn``."""
    def kernel(x, dtype):
        to = np.dtype(dtype.np)
        if x.dtype is BF16:
            if to == BF16:
                return x
            expr = "bf16_to_f(x0) != 0" if to == np.bool_ else "bf16_to_f(x0)"
            if to not in rt.CTYPES:
                rt.device_of(x).check_dtype(to, "casting to it")
            return rt.elementwise(expr, to, x, preamble=PREAMBLE)
        if to == BF16:
            return rt.elementwise("f_to_bf16((float)x0)", BF16, x, preamble=PREAMBLE)
        return fn(x, dtype=dtype)
    kernel.__name__ = kernel.__qualname__ = "cast_bf16"
    kernel.__wrapped__ = fn
    return kernel


def declare(op_name, spec):
    """``spec`` (an OpenCL kernel spec dict) with bfloat16 added where the op supports
    it on OpenCL (see the module doc), else ``spec`` unchanged."""
    dts = spec.get("dtypes")
    if dts is None or "float32" not in dts or "bfloat16" in dts or op_name in NOT_DECLARED:
        return spec
    spec = dict(spec, dtypes=("bfloat16",) + tuple(dts))
    if op_name == "Cast":           # bfloat16 on either side: the key dtype is the input's
        spec["fn"] = cast(spec["fn"])
    elif op_name not in NATIVE:
        # a variant: dispatch runs the float32 round trip for bfloat16 calls only, so
        # the float32 calls reach the kernel with no wrapper in front
        spec["variants"] = {"bfloat16": compute_in_float32(spec["fn"])}
    return spec
