"""Activation functions by name (``tf.keras.activations``): ``activation=`` of a layer
takes one of these names, any callable (``tf.nn.relu``), or None.

>>> import tapeflow as tf
>>> print(tf.keras.activations.get("relu")(tf.constant([-1., 2.])))
tf.Tensor([0. 2.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

import math as _pymath

from ..errors import InvalidArgumentError, InvalidTypeError
from ..ops import math as _m
from ..ops import nn as _nn
from ..ops.array_values import where as _where
from .. import ops as _array_mod

__all__ = ["get", "serialize", "linear", "relu", "relu6", "elu", "selu", "sigmoid",
           "hard_sigmoid", "tanh", "softmax", "log_softmax", "softplus", "softsign", "swish",
           "gelu", "exponential", "leaky_relu"]


def linear(x):
    return x


def relu(x, alpha=0.0, max_value=None, threshold=0.0):
    if alpha == 0.0 and max_value is None and threshold == 0.0:
        return _nn.relu(x)
    y = _where(_m.greater(x, threshold), x, _m.multiply(_m.subtract(x, threshold), alpha)) \
        if alpha else _m.multiply(x, _m.cast(_m.greater(x, threshold), x.dtype))
    if max_value is not None:
        y = _m.minimum(y, max_value)
    return y


def relu6(x):
    return _nn.relu6(x)


def leaky_relu(x, alpha=0.2):
    return _nn.leaky_relu(x, alpha=alpha)


def elu(x, alpha=1.0):
    y = _nn.elu(x)
    return y if alpha == 1.0 else _where(_m.greater(x, 0.0), y, _m.multiply(y, alpha))


def selu(x):
    a, s = 1.6732632423543772, 1.0507009873554805
    return _m.multiply(_where(_m.greater(x, 0.0), x, _m.multiply(_nn.elu(x), a)), s)


def sigmoid(x):
    return _m.sigmoid(x)


def hard_sigmoid(x):
    clip_by_value = _array_mod.clip_by_value
    return clip_by_value(_m.add(_m.multiply(x, 0.2), 0.5), 0.0, 1.0)


def tanh(x):
    return _m.tanh(x)


def softmax(x, axis=-1):
    return _nn.softmax(x, axis=axis)


def log_softmax(x, axis=-1):
    return _nn.log_softmax(x, axis=axis)


def softplus(x):
    return _m.softplus(x)


def softsign(x):
    return _m.divide(x, _m.add(_m.abs(x), 1.0))


def swish(x):
    return _m.multiply(x, _m.sigmoid(x))


silu = swish


def gelu(x, approximate=False):
    if approximate:
        c = _pymath.sqrt(2.0 / _pymath.pi)
        inner = _m.multiply(_m.add(x, _m.multiply(_m.pow(x, 3.0), 0.044715)), c)
        return _m.multiply(_m.multiply(x, 0.5), _m.add(_m.tanh(inner), 1.0))
    return _m.multiply(_m.multiply(x, 0.5),
                       _m.add(_m.erf(_m.multiply(x, 1.0 / _pymath.sqrt(2.0))), 1.0))


def exponential(x):
    return _m.exp(x)


_BY_NAME = {f.__name__: f for f in (linear, relu, relu6, leaky_relu, elu, selu, sigmoid,
                                    hard_sigmoid, tanh, softmax, log_softmax, softplus,
                                    softsign, swish, gelu, exponential)}
_BY_NAME["silu"] = swish


def get(identifier):
    """The activation function for a name, a callable (returned as is), or None
    (``None`` and ``"linear"`` give None: no activation, nothing to call)."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        fn = _BY_NAME.get(identifier.lower())
        if fn is None:
            raise InvalidArgumentError(f"Unknown activation {identifier!r}; known: "
                             + ", ".join(sorted(_BY_NAME)))
        return None if fn is linear else fn
    if callable(identifier):
        return None if identifier is linear else identifier
    raise InvalidTypeError(f"activation must be a name, a callable or None, got {identifier!r}")


def serialize(activation) -> str:
    if activation is None:
        return "linear"
    return getattr(activation, "__name__", repr(activation))
