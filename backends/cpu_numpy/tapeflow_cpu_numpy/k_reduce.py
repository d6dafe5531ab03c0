"""Reduction kernels, written once against an array module ``xp``."""

from __future__ import annotations


def build(xp):
    def sum_(x, axis, keepdims):
        return xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype.kind != "b" else None)

    return {"Sum": sum_}
