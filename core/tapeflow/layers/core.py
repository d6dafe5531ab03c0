"""Dense, Flatten (and ``flatten``), Dropout, Activation and Embedding.

>>> import tapeflow as tf
>>> tf.keras.backend.clear_session()    # automatic names start again
>>> layer = tf.layers.Dense(units=10)
>>> layer(tf.zeros([1, 1, 784])).shape        # applied to the last axis
TensorShape([1, 1, 10])
>>> [v.name for v in layer.variables]
['dense/kernel:0', 'dense/bias:0']
"""

from __future__ import annotations

from ..errors import FailedPreconditionError, InvalidArgumentError
from ..ops import array as _a
from ..ops import math as _m
from ..ops import nn as _nn
from ..ops.linalg import matmul as _matmul
from . import activations as _act
from .base import Layer
from ..runtime import dispatch as _dispatch_mod
from ..runtime import tensor as _tensor_mod

__all__ = ["Dense", "Flatten", "flatten", "Dropout", "dropout", "Activation", "Embedding",
           "dense"]


def _fmt(shape):
    return None if shape is None else list(shape)


def _check_constraints(*cs):
    if any(c is not None for c in cs):
        raise NotImplementedError("weight constraints are not supported")


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` on the last axis of ``inputs``.

    ``units``: output size; ``activation``: a function (``tf.nn.relu``), a name
    (``'relu'``) or None; ``use_bias``; ``kernel_initializer`` (glorot_uniform) and
    ``bias_initializer`` (zeros): names or callables; ``*_regularizer``.
    """

    _leaf = True

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 trainable=True, name=None, **kwargs):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        _check_constraints(kernel_constraint, bias_constraint)
        units = int(units)
        if units <= 0:
            raise InvalidArgumentError(f"Dense: units must be a positive integer, got {units}")
        self.units = units
        self.activation = _act.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel = None
        self.bias = None

    def build(self, input_shape):
        if input_shape is None or len(input_shape) < 2 or input_shape[-1] is None:
            raise InvalidArgumentError(
                f"{self.name}: Dense needs inputs of rank >= 2 ([batch, ..., features]) with "
                f"a known last dimension, got shape {_fmt(input_shape)}; reshape a batch of "
                "scalars with tf.reshape(x, [-1, 1])")
        self.kernel = self.add_weight("kernel", [int(input_shape[-1]), self.units],
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer)
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.units], initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer)
        self.built = True

    def call(self, inputs):
        y = _matmul(inputs, self._read(self.kernel))
        b = self.bias
        if b is not None:
            y = y + self._read(b)
        act = self.activation
        return y if act is None else act(y)


class Flatten(Layer):
    """Reshape to ``[batch, -1]``. With ``data_format='channels_first'`` the channel
    axis is moved last first, so weights after it do not depend on the format."""

    _leaf = True

    def __init__(self, data_format=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.data_format = _channels(data_format)

    def call(self, inputs):
        return flatten(inputs, data_format=self.data_format)


def flatten(inputs, name=None, data_format="channels_last"):
    """Functional ``tf.layers.flatten``: ``[batch, d1, d2, ...] -> [batch, d1*d2*...]``."""
    convert_to_tensor = _dispatch_mod.convert_to_tensor
    Tensor = _tensor_mod.Tensor
    x = inputs if type(inputs) is Tensor else convert_to_tensor(inputs)
    shape = x.shape
    if len(shape) == 0:
        raise InvalidArgumentError("flatten needs an input with a batch dimension, got a scalar")
    if _channels(data_format) == "channels_first" and len(shape) >= 3:
        x = _a.transpose(x, [0] + list(range(2, len(shape))) + [1])
    return _a.reshape(x, [shape[0], -1])


def _channels(data_format):
    if data_format is None or data_format in ("channels_last", "NHWC", "NWC", "NDHWC"):
        return "channels_last"
    if data_format in ("channels_first", "NCHW", "NCW", "NCDHW"):
        return "channels_first"
    raise InvalidArgumentError(f"data_format must be 'channels_last' or 'channels_first', "
                     f"got {data_format!r}")


class Dropout(Layer):
    """In training (``layer(x, training=True)``, or inside a model called with
    ``training=True``) zero each element with probability ``rate`` and scale the rest
    by ``1 / (1 - rate)``; otherwise the identity."""

    _leaf = True

    def __init__(self, rate=0.5, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        rate = float(rate)
        if not 0.0 <= rate < 1.0:
            raise InvalidArgumentError(f"Dropout: rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.noise_shape = noise_shape
        self.seed = seed

    def call(self, inputs, training=None):
        if training is None or not training or self.rate == 0.0:
            return inputs
        return _nn.dropout(inputs, rate=self.rate, noise_shape=self.noise_shape, seed=self.seed)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Functional ``tf.layers.dropout`` (identity unless ``training``)."""
    if not training or rate == 0:
        return inputs
    return _nn.dropout(inputs, rate=rate, noise_shape=noise_shape, seed=seed)


class Activation(Layer):
    """Apply an activation (a name or a callable)."""

    _leaf = True

    def __init__(self, activation, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.activation = _act.get(activation)

    def call(self, inputs):
        act = self.activation
        return inputs if act is None else act(inputs)


class Embedding(Layer):
    """Look up rows of an ``[input_dim, output_dim]`` table for integer ids."""

    _leaf = True

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, activity_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, input_length=None, name=None,
                 **kwargs):
        if input_length is not None and "input_shape" not in kwargs:
            kwargs["input_shape"] = (input_length,)
        super().__init__(name=name, activity_regularizer=activity_regularizer, **kwargs)
        _check_constraints(embeddings_constraint)
        if mask_zero:
            raise NotImplementedError("Embedding(mask_zero=True): masking is not supported")
        self.input_dim = int(input_dim)
        self.output_dim = int(output_dim)
        self.embeddings_initializer = embeddings_initializer
        self.embeddings_regularizer = embeddings_regularizer
        self.embeddings = None

    def _convert_input(self, x):
        convert_to_tensor = _dispatch_mod.convert_to_tensor
        return convert_to_tensor(x)

    def build(self, input_shape):
        self.embeddings = self.add_weight("embeddings", [self.input_dim, self.output_dim],
                                          initializer=self.embeddings_initializer,
                                          regularizer=self.embeddings_regularizer)
        self.built = True

    def call(self, inputs):
        if not inputs.dtype.is_integer:
            inputs = _m.cast(inputs, "int32")
        return _a.gather(self._read(self.embeddings), inputs)


def dense(*args, **kwargs):
    """Not available with eager execution (as in TensorFlow): use ``tf.layers.Dense``."""
    raise FailedPreconditionError(
        "tf.layers.dense (the functional form) creates variables it cannot "
                       "keep with eager execution; use the tf.layers.Dense class "
                       "(layer = tf.layers.Dense(units); y = layer(x)).")
