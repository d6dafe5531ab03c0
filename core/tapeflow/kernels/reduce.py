"""Reduction kernels, written once against an array module ``xp``.

``axis`` arrives normalised (None or a sorted tuple of non-negative ints).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..errors import InvalidArgumentError
from ..plugins import KernelSpec

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOATS + INTS
COMPLEX = ("complex64", "complex128")


def count_reduced(shape, axis):
    """How many elements of an array of ``shape`` a reduction over ``axis`` combines."""
    n = 1
    for i, d in enumerate(shape):
        if axis is None or i in axis:
            n *= d
    return n


def empty_reduction(what, x, axis):
    """The error of a max/min/argmax/argmin over zero elements."""
    return InvalidArgumentError(
        f"Cannot compute the {what} of zero elements: the reduction is over an axis of size 0 "
        f"(input shape {list(x.shape)}, axis {'all' if axis is None else list(axis)})")


def _no_errstate(**kw):
    """``errstate`` for an array module without one (CuPy warns about nothing)."""
    return contextlib.nullcontext()


class ReduceKernels:
    """The reduction kernels of one array module ``xp`` (NumPy or CuPy's namespace), one
    method per kernel; :meth:`table` maps op names to them.

    >>> import numpy as np
    >>> ReduceKernels(np).sum(np.ones((2, 3)), axis=(1,), keepdims=False)
    array([3., 3.])
    """

    def __init__(self, xp):
        self.xp = xp
        # NumPy warns on 0/0 and log(0); array modules without errstate (CuPy) do not
        self._errstate = getattr(xp, "errstate", None) or _no_errstate
        self._add_reduce = xp.add.reduce if xp is np else None   # NumPy: skip np.sum's layers
        self._ones = {}                                           # (length, dtype) -> ones

    def gemv_sum(self, x, axis, keepdims, out=None):
        """NumPy's sum over leading or middle axes of a contiguous float array walks the
        kept inner axis a few elements at a time (a (32, 24, 24, 16) array summed to (16,)
        takes 450 us); as ``ones @ x.reshape(outer, reduced, inner)`` BLAS does it in 45 us,
        at least as accurately (NumPy adds outer axes one row at a time, not pairwise).
        None where that does not apply. ``out``: the result's array, written into."""
        if (self._add_reduce is None or not axis or x.dtype.char not in "fd"
                or not x.flags.c_contiguous or axis[-1] - axis[0] != len(axis) - 1
                or axis[-1] == x.ndim - 1):
            return None
        shape = x.shape
        outer = inner = red = 1
        for i, d in enumerate(shape):
            if i < axis[0]:
                outer *= d
            elif i > axis[-1]:
                inner *= d
            else:
                red *= d
        if red < 16 or inner == 1 or x.size == 0:
            return None
        key = (red, x.dtype.char)
        v = self._ones.get(key)
        if v is None:
            v = self._ones[key] = np.ones(red, dtype=x.dtype)
        if out is not None:
            np.matmul(v, x.reshape(outer, red, inner), out=out.reshape(outer, inner))
            return out
        r = np.matmul(v, x.reshape(outer, red, inner))
        kept = [1 if axis[0] <= i <= axis[-1] else d for i, d in enumerate(shape)] \
            if keepdims else [d for i, d in enumerate(shape) if not axis[0] <= i <= axis[-1]]
        return r.reshape(kept)

    def sum(self, x, axis, keepdims, out=None):
        """The sum over ``axis``, in the input's dtype (into ``out`` when given: an array
        of the result's shape, never ``x``)."""
        add_reduce = self._add_reduce
        if add_reduce is not None:
            r = self.gemv_sum(x, axis, keepdims, out)
            if r is not None:
                return r
            return add_reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype, out=out)
        return self.xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype, out=out)

    def prod(self, x, axis, keepdims):
        """The product over ``axis``, in the input's dtype."""
        return self.xp.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    def mean(self, x, axis, keepdims):
        """The mean over ``axis``; integers truncated toward zero as in TensorFlow."""
        xp = self.xp
        r = self.gemv_sum(x, axis, keepdims)
        if r is not None:
            r /= count_reduced(x.shape, axis)
            return r
        add_reduce = self._add_reduce
        if add_reduce is not None and x.dtype.char in "fd" and x.size:
            # np.mean's own layers cost 6 us on a 64-vector; this is 1.5 us
            r = add_reduce(x, axis=axis, keepdims=keepdims)
            n = count_reduced(x.shape, axis)
            if isinstance(r, np.ndarray):
                r /= n
                return r
            return x.dtype.type(r / n)
        if x.dtype.kind in "fc" and x.size:
            return xp.mean(x, axis=axis, keepdims=keepdims)
        s = xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
        n = count_reduced(x.shape, axis)
        if x.dtype.kind in "fc":                    # empty: 0 / 0 -> nan, quietly
            with self._errstate(invalid="ignore"):
                return xp.true_divide(s, n, dtype=x.dtype)
        if n == 0:
            return s
        if x.dtype.kind == "u":                     # unsigned: no sign to truncate toward
            return (s.astype(xp.uint64) // n).astype(x.dtype)
        s = s.astype(xp.int64)                      # n may not fit the input dtype
        q = xp.abs(s) // n                          # truncate toward zero, as TF
        return xp.where(s < 0, -q, q).astype(x.dtype)

    def max(self, x, axis, keepdims):
        """The maximum over ``axis``; over zero elements an InvalidArgumentError."""
        try:
            return self.xp.max(x, axis=axis, keepdims=keepdims)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("max", x, axis) from None

    def min(self, x, axis, keepdims):
        """The minimum over ``axis``; over zero elements an InvalidArgumentError."""
        try:
            return self.xp.min(x, axis=axis, keepdims=keepdims)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("min", x, axis) from None

    def logsumexp(self, x, axis, keepdims):
        """``log(sum(exp(x)))`` over ``axis``, shifted by the maximum so it cannot overflow."""
        xp = self.xp
        errstate = self._errstate
        if x.size == 0:                             # log(0) = -inf over empty axes
            with errstate(divide="ignore"):
                return xp.log(xp.sum(xp.exp(x), axis=axis, keepdims=keepdims))
        m = xp.max(x, axis=axis, keepdims=True)
        m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))     # all -inf/inf slices
        with errstate(divide="ignore"):
            out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True))
        out += m
        return out if keepdims else xp.squeeze(out, axis=axis)

    def euclidean_norm(self, x, axis, keepdims):
        """``sqrt(sum(x * x))`` over ``axis``."""
        xp = self.xp
        return xp.sqrt(xp.sum(x * x, axis=axis, keepdims=keepdims))

    def any(self, x, axis, keepdims):
        """Whether any element over ``axis`` is true."""
        return self.xp.any(x, axis=axis, keepdims=keepdims)

    def all(self, x, axis, keepdims):
        """Whether every element over ``axis`` is true."""
        return self.xp.all(x, axis=axis, keepdims=keepdims)

    def argmax(self, x, axis, output_type):
        """The index of the first maximum along ``axis``, as ``output_type``."""
        try:
            return self.xp.argmax(x, axis=axis).astype(output_type.np, copy=False)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("argmax", x, (axis,)) from None

    def argmin(self, x, axis, output_type):
        """The index of the first minimum along ``axis``, as ``output_type``."""
        try:
            return self.xp.argmin(x, axis=axis).astype(output_type.np, copy=False)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("argmin", x, (axis,)) from None

    def table(self):
        """``{op name: KernelSpec}`` (docs/backends.md)."""
        return {
            "Sum": KernelSpec(self.sum, fresh=True, out=True, dtypes=NUMERIC + COMPLEX),
            "Prod": KernelSpec(self.prod, dtypes=NUMERIC + COMPLEX),
            "Mean": KernelSpec(self.mean, fresh=True, dtypes=NUMERIC + COMPLEX),
            "Max": KernelSpec(self.max, dtypes=NUMERIC),
            "Min": KernelSpec(self.min, dtypes=NUMERIC),
            "ReduceLogSumExp": KernelSpec(self.logsumexp, dtypes=FLOATS),
            "EuclideanNorm": KernelSpec(self.euclidean_norm, dtypes=FLOATS),
            "Any": KernelSpec(self.any, dtypes=("bool",)),
            "All": KernelSpec(self.all, dtypes=("bool",)),
            "ArgMax": KernelSpec(self.argmax, dtypes=NUMERIC),
            "ArgMin": KernelSpec(self.argmin, dtypes=NUMERIC),
        }


def build(ctx):
    """The reduction kernels for ``ctx.xp``: ``{op name: KernelSpec}``."""
    return ReduceKernels(ctx.xp).table()
