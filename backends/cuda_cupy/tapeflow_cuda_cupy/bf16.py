"""bfloat16 on CUDA: stored as 16-bit words in a ``uint16`` CuPy array, computed in float32.

CuPy has no bfloat16 dtype (and refuses ``ml_dtypes.bfloat16`` arrays), so a bfloat16
tensor on ``cuda:N`` holds a :class:`BF16Array`: its bits in a ``uint16`` CuPy array
(``.bits``) and ``dtype`` bfloat16, which is all the core reads of a native array. Host
copies are ``ml_dtypes.bfloat16`` arrays with the same bits.

Every op declared for bfloat16 on ``cuda`` (:func:`declare`: as on the NumPy backend, the
ones declaring float16 or any dtype, less :data:`NOT_DECLARED`) runs its float32 kernel
(:func:`compute_in_float32`): bfloat16 inputs widened exactly (:func:`bits_to_float32`,
the bits shifted left by 16), float32 results rounded back (:func:`float32_to_bits`:
nearest, ties to even; NaN stays NaN) -- the OpenCL and NumPy backends' float32 round
trip, so reductions and MatMul accumulate in float32. Data movement round-trips
exactly. ``Cast`` converts directly (:func:`cast`).

The conversions are written against an array module ``xp`` (CuPy here; NumPy stands in
for it in the tests).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tapeflow import dtypes as _dt

__all__ = ["BF16", "BF16Array", "NOT_DECLARED", "bits_to_float32", "float32_to_bits",
           "compute_in_float32", "cast", "bitcast", "declare", "wrap"]

BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)

#: ops not offered for bfloat16 on CUDA even though their kernels take float32: the
#: decompositions (none on the NumPy backend either) and the random draws (float32
#: draws rounded to bfloat16 could reach ``maxval``)
NOT_DECLARED = frozenset({"Cholesky", "LogMatrixDeterminant", "MatrixDeterminant",
                          "MatrixInverse", "MatrixSolve", "Qr", "SelfAdjointEigV2", "Svd",
                          "SvdValues", "RandomUniform", "RandomStandardNormal",
                          "TruncatedNormal"})


def bits_to_float32(xp, u):
    """bfloat16 bits (a ``uint16`` array of module ``xp``) -> float32 values (exact)."""
    return (u.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


def float32_to_bits(xp, f):
    """float32 values -> bfloat16 bits (``uint16``), rounded to nearest, ties to even; a
    NaN stays a (quiet) NaN instead of carrying into the exponent.

    >>> float32_to_bits(np, np.float32([1.00390625, 1.01171875, np.nan, -np.inf]))
    array([16256, 16258, 32704, 65408], dtype=uint16)
    """
    # (a same-size view needs no contiguity; ascontiguousarray would make 0-d arrays 1-d)
    u = f.astype(xp.float32, copy=False).view(xp.uint32)
    rounded = (u + xp.uint32(0x7FFF) + ((u >> xp.uint32(16)) & xp.uint32(1))) >> xp.uint32(16)
    quiet_nan = (u >> xp.uint32(16)) | xp.uint32(0x40)
    nan = (u & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000)
    return xp.where(nan, quiet_nan, rounded).astype(xp.uint16)


class BF16Array:
    """A bfloat16 array on a CUDA device: its bits in a ``uint16`` CuPy array."""

    __slots__ = ("bits", "__weakref__")

    def __init__(self, bits):
        self.bits = bits

    dtype = BF16

    @property
    def shape(self):
        return self.bits.shape

    @property
    def ndim(self):
        return self.bits.ndim

    @property
    def size(self):
        return self.bits.size

    @property
    def nbytes(self):
        return self.bits.nbytes

    @property
    def strides(self):
        return self.bits.strides

    @property
    def flags(self):
        return self.bits.flags

    @property
    def device(self):
        return self.bits.device

    def get(self, stream=None):
        """The host copy: an ``ml_dtypes.bfloat16`` NumPy array."""
        return np.asarray(self.bits.get()).view(BF16)

    def __len__(self):
        return len(self.bits)

    def __repr__(self):
        return f"BF16Array(shape={self.shape}, device={self.device})"


def _any_bf16(args):
    for a in args:
        if type(a) is BF16Array or (type(a) in (list, tuple)
                                    and any(type(b) is BF16Array for b in a)):
            return True
    return False


def _up(xp, a):
    if type(a) is BF16Array:
        return bits_to_float32(xp, a.bits)
    if type(a) in (list, tuple) and any(type(b) is BF16Array for b in a):
        return type(a)(_up(xp, b) for b in a)
    return a


def _down(xp, out):
    if type(out) in (list, tuple):
        return type(out)(_down(xp, o) for o in out)
    if getattr(out, "dtype", None) == _F32 and hasattr(out, "shape"):
        return BF16Array(float32_to_bits(xp, out))
    return out


def compute_in_float32(fn, xp):
    """A CUDA kernel running ``fn`` (a float32 kernel) in float32 where an input (or a
    ``dtype`` attr) is bfloat16, its float32 results rounded to :class:`BF16Array`;
    other calls go to ``fn`` unchanged."""
    def kernel(*args, **attrs):
        low = _any_bf16(args)
        if attrs.get("dtype") is _dt.bfloat16:
            attrs["dtype"] = _dt.float32
            if getattr(fn, "takes_bf16_flag", False):       # (stateless_uniform_7_bits)
                attrs["bf16"] = True
            low = True
        if not low:
            return fn(*args, **attrs)
        return _down(xp, fn(*[_up(xp, a) for a in args], **attrs))
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel") + "_bf16"
    kernel.__wrapped__ = fn
    return kernel


def cast(fn, xp):
    """``Cast`` with bfloat16 on either side; other casts go to ``fn``."""
    def kernel(x, dtype):
        to = np.dtype(dtype.np)
        if type(x) is BF16Array:
            if to == BF16:
                return x
            f = bits_to_float32(xp, x.bits)
            return f if to == _F32 else fn(f, dtype=dtype)
        if to == BF16:
            f = x if x.dtype == _F32 else fn(x, dtype=_dt.float32)
            return BF16Array(float32_to_bits(xp, f))
        return fn(x, dtype=dtype)
    kernel.__name__ = kernel.__qualname__ = "cast_bf16"
    kernel.__wrapped__ = fn
    return kernel


def bitcast(fn, xp):
    """``Bitcast`` with bfloat16 on either side: its 16-bit words reinterpreted as they
    are (as ``uint16``), never through float32; other bitcasts go to ``fn``."""
    def kernel(x, dtype):
        if type(x) is BF16Array:
            x = x.bits
        if dtype is _dt.bfloat16:
            return BF16Array(fn(x, dtype=_dt.uint16))
        return fn(x, dtype=dtype)
    kernel.__name__ = kernel.__qualname__ = "bitcast_bf16"
    kernel.__wrapped__ = fn
    return kernel


def declare(op_name, dtypes):
    """The dtypes the CUDA kernel of ``op_name`` declares, given the shared kernel's
    ``dtypes`` (None: any): the NumPy backend's rule (bfloat16 wherever float16 is
    taken, so both backends declare the same), except :data:`NOT_DECLARED`, where a
    bfloat16 the shared NumPy declaration carries is dropped (NumPy draws it with
    ml_dtypes, which CuPy cannot hold)."""
    if dtypes is None:
        return None
    dts = tuple(d for d in dtypes if d != "bfloat16")
    if "float16" in dts and op_name not in NOT_DECLARED:
        return ("bfloat16",) + dts
    return dts


def wrap(op_name, fn, xp, dtypes):
    """The kernel registered for ``op_name``: ``fn`` wrapped for bfloat16 where
    :func:`declare` offers it (``dtypes``: its declaration), else ``fn``."""
    if dtypes is not None and "bfloat16" not in dtypes:
        return fn
    if op_name in NOT_DECLARED:
        return fn
    if op_name == "Cast":
        return cast(fn, xp)
    if op_name == "Bitcast":
        return bitcast(fn, xp)
    if op_name == "StatelessRandomUniformV2":
        return compute_in_float32(stateless_uniform_7_bits(fn, xp), xp)
    return compute_in_float32(fn, xp)


def stateless_uniform_7_bits(fn, xp):
    """``StatelessRandomUniformV2`` for bfloat16 (called by :func:`compute_in_float32`
    with ``dtype`` float32 for a bfloat16 draw): TensorFlow's bfloat16 uniform takes the low
    7 bits of each word (``k / 128``), the float32 one the low 23 (``m / 2**23``), and
    ``k = m mod 128``, so the bfloat16 draw is derived exactly from the float32 one
    (rounding the float32 draw gave other numbers and could reach 1). Other dtypes go to
    ``fn``; the wrapper sees bfloat16 only through the ``bf16`` flag it is given.

    >>> import numpy as np
    >>> f = lambda state, shape, dtype: np.float32([0.5, 3 * 2.0 ** -23 + 0.25])
    >>> stateless_uniform_7_bits(f, np)(None, (2,), _dt.float32, bf16=True).tolist()
    [0.0, 0.0234375]
    """
    def kernel(state, shape, dtype, bf16=False, **attrs):
        u = fn(state, shape, dtype, **attrs)
        if not bf16:
            return u
        m = u * xp.float32(2.0 ** 23)               # exact: an integer below 2**23
        return xp.fmod(m, xp.float32(128.0)) * xp.float32(2.0 ** -7)
    kernel.__name__ = kernel.__qualname__ = "stateless_uniform_bf16"
    kernel.__wrapped__ = fn
    kernel.takes_bf16_flag = True
    return kernel
