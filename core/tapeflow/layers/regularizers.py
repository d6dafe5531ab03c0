"""Weight regularizers (``tf.keras.regularizers``): ``kernel_regularizer=`` of a layer
adds ``regularizer(kernel)`` to ``layer.losses`` (and ``Model.fit`` adds those to the
loss).

>>> import tapeflow as tf
>>> print(tf.keras.regularizers.l2(0.5)(tf.constant([1., 2.])))
tf.Tensor(2.5, shape=(), dtype=float32)
"""

from __future__ import annotations

from ..errors import InvalidArgumentError, InvalidTypeError
from ..ops import math as _m

__all__ = ["Regularizer", "L1L2", "L1", "L2", "l1", "l2", "l1_l2", "get"]


class Regularizer:
    def __call__(self, x):
        raise NotImplementedError


class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x ** 2)``."""

    def __init__(self, l1=0.0, l2=0.0):
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x):
        out = None
        if self.l1:
            out = _m.multiply(_m.reduce_sum(_m.abs(x)), self.l1)
        if self.l2:
            t = _m.multiply(_m.reduce_sum(_m.square(x)), self.l2)
            out = t if out is None else _m.add(out, t)
        return out if out is not None else _m.multiply(_m.reduce_sum(x), 0.0)

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}


def L1(l1=0.01):  # noqa: N802  (Keras's class-like name)
    return L1L2(l1=l1)


def L2(l2=0.01):  # noqa: N802
    return L1L2(l2=l2)


l1 = L1
l2 = L2


def l1_l2(l1=0.01, l2=0.01):  # noqa: F811
    return L1L2(l1=l1, l2=l2)


def get(identifier):
    if identifier is None:
        return None
    if isinstance(identifier, str):
        table = {"l1": L1, "l2": L2, "l1_l2": l1_l2}
        if identifier not in table:
            raise InvalidArgumentError(f"Unknown regularizer {identifier!r}; known: l1, l2, l1_l2")
        return table[identifier]()
    if callable(identifier):
        return identifier
    raise InvalidTypeError(f"regularizer must be a name, a callable or None, got {identifier!r}")
