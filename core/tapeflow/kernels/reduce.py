"""Reduction kernels, written once against an array module ``xp``.

``axis`` arrives normalised (None or a sorted tuple of non-negative ints).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..runtime.errors import InvalidArgumentError

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = FLOATS + INTS


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

    def sum_(x, axis, keepdims):
        if add_reduce is not None:
            return add_reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
        return xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    def prod(x, axis, keepdims):
        return xp.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    def mean(x, axis, keepdims):
        if x.dtype.kind == "f" and x.size:
            return xp.mean(x, axis=axis, keepdims=keepdims)
        s = xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
        n = count_reduced(x.shape, axis)
        if x.dtype.kind == "f":                     # empty: 0 / 0 -> nan, quietly
            with errstate(invalid="ignore"):
                return xp.true_divide(s, n, dtype=x.dtype)
        if n == 0:
            return s
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
        "Sum": {"fn": sum_, "fresh": True, "dtypes": NUMERIC},
        "Prod": {"fn": prod, "dtypes": NUMERIC},
        "Mean": {"fn": mean, "fresh": True, "dtypes": NUMERIC},
        "Max": {"fn": max_, "dtypes": NUMERIC},
        "Min": {"fn": min_, "dtypes": NUMERIC},
        "ReduceLogSumExp": {"fn": logsumexp, "dtypes": FLOATS},
        "EuclideanNorm": {"fn": euclidean_norm, "dtypes": FLOATS},
        "Any": {"fn": any_, "dtypes": ("bool",)},
        "All": {"fn": all_, "dtypes": ("bool",)},
        "ArgMax": {"fn": argmax, "dtypes": NUMERIC},
        "ArgMin": {"fn": argmin, "dtypes": NUMERIC},
    }
