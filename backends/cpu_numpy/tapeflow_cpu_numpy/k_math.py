"""Elementwise kernels, written once against an array module ``xp``."""

from __future__ import annotations

FLOATS = ("float16", "float32", "float64")


def build(xp):
    def cast(x, dtype):
        return x.astype(dtype.np)

    return {
        "Add": xp.add,
        "Sub": xp.subtract,
        "Mul": xp.multiply,
        "RealDiv": xp.true_divide,
        "Neg": xp.negative,
        "Cast": cast,
    }
