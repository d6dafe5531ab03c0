"""Reduction kernels, written once against an array module ``xp``.

``axis`` arrives normalised (None or a sorted tuple of non-negative ints).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..runtime.errors import InvalidArgumentError

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


def build(xp):
    # NumPy warns on 0/0 and log(0); array modules without errstate (CuPy) do not
    errstate = getattr(xp, "errstate", None) or (lambda **kw: contextlib.nullcontext())

    add_reduce = xp.add.reduce if xp is np else None     # NumPy: skip np.sum's layers
    ones = {}                                             # (length, dtype) -> ones vector

    def gemv_sum(x, axis, keepdims):
        """NumPy's sum over leading or middle axes of a contiguous float array walks the
        kept inner axis a few elements at a time (a (32, 24, 24, 16) array summed to (16,)
        takes 450 us); as ``ones @ x.reshape(outer, reduced, inner)`` BLAS does it in 45 us,
        at least as accurately (NumPy adds outer axes one row at a time, not pairwise).
        None where that does not apply."""
        if (add_reduce is None or not axis or x.dtype.char not in "fd"
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
        v = ones.get(key)
        if v is None:
            v = ones[key] = np.ones(red, dtype=x.dtype)
        r = np.matmul(v, x.reshape(outer, red, inner))
        kept = [1 if axis[0] <= i <= axis[-1] else d for i, d in enumerate(shape)] \
            if keepdims else [d for i, d in enumerate(shape) if not axis[0] <= i <= axis[-1]]
        return r.reshape(kept)

    def sum_(x, axis, keepdims):
        if add_reduce is not None:
            r = gemv_sum(x, axis, keepdims)
            if r is not None:
                return r
            return add_reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
        return xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    def prod(x, axis, keepdims):
        return xp.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    def mean(x, axis, keepdims):
        r = gemv_sum(x, axis, keepdims)
        if r is not None:
            r /= count_reduced(x.shape, axis)
            return r
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
            with errstate(invalid="ignore"):
                return xp.true_divide(s, n, dtype=x.dtype)
        if n == 0:
            return s
        if x.dtype.kind == "u":                     # unsigned: no sign to truncate toward
            return (s.astype(xp.uint64) // n).astype(x.dtype)
        s = s.astype(xp.int64)                      # n may not fit the input dtype
        q = xp.abs(s) // n                          # truncate toward zero, as TF
        return xp.where(s < 0, -q, q).astype(x.dtype)

    def max_(x, axis, keepdims):
        try:
            return xp.max(x, axis=axis, keepdims=keepdims)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("max", x, axis) from None

    def min_(x, axis, keepdims):
        try:
            return xp.min(x, axis=axis, keepdims=keepdims)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("min", x, axis) from None

    def logsumexp(x, axis, keepdims):
        if x.size == 0:                             # log(0) = -inf over empty axes
            with errstate(divide="ignore"):
                return xp.log(xp.sum(xp.exp(x), axis=axis, keepdims=keepdims))
        m = xp.max(x, axis=axis, keepdims=True)
        m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))     # all -inf/inf slices
        with errstate(divide="ignore"):
            out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True))
        out += m
        return out if keepdims else xp.squeeze(out, axis=axis)

    def euclidean_norm(x, axis, keepdims):
        return xp.sqrt(xp.sum(x * x, axis=axis, keepdims=keepdims))

    def any_(x, axis, keepdims):
        return xp.any(x, axis=axis, keepdims=keepdims)

    def all_(x, axis, keepdims):
        return xp.all(x, axis=axis, keepdims=keepdims)

    def argmax(x, axis, output_type):
        try:
            return xp.argmax(x, axis=axis).astype(output_type.np, copy=False)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("argmax", x, (axis,)) from None

    def argmin(x, axis, output_type):
        try:
            return xp.argmin(x, axis=axis).astype(output_type.np, copy=False)
        except ValueError:
            if x.size:
                raise
            raise empty_reduction("argmin", x, (axis,)) from None

    return {
        "Sum": {"fn": sum_, "fresh": True, "dtypes": NUMERIC + COMPLEX},
        "Prod": {"fn": prod, "dtypes": NUMERIC + COMPLEX},
        "Mean": {"fn": mean, "fresh": True, "dtypes": NUMERIC + COMPLEX},
        "Max": {"fn": max_, "dtypes": NUMERIC},
        "Min": {"fn": min_, "dtypes": NUMERIC},
        "ReduceLogSumExp": {"fn": logsumexp, "dtypes": FLOATS},
        "EuclideanNorm": {"fn": euclidean_norm, "dtypes": FLOATS},
        "Any": {"fn": any_, "dtypes": ("bool",)},
        "All": {"fn": all_, "dtypes": ("bool",)},
        "ArgMax": {"fn": argmax, "dtypes": NUMERIC},
        "ArgMin": {"fn": argmin, "dtypes": NUMERIC},
    }
