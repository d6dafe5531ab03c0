"""Conv2D (``tf.layers.Conv2D``, ``tf.keras.layers.Conv2D``).

>>> import tapeflow as tf
>>> conv = tf.keras.layers.Conv2D(16, [3, 3], activation='relu')
>>> conv(tf.zeros([1, 28, 28, 1])).shape
TensorShape([1, 26, 26, 16])
>>> conv.kernel.shape
TensorShape([3, 3, 1, 16])
"""

from __future__ import annotations

from ..errors import FailedPreconditionError, InvalidArgumentError
from ..ops import nn as _nn
from ..ops import nn_fused as _fused
from . import activations as _act
from .base import Layer
from .core import _channels, _check_constraints

__all__ = ["Conv2D", "Convolution2D"]


#: activations the layer runs inside ``_FusedConv2D`` (with the bias): the function ->
#: ``(fused_ops, leakyrelu_alpha)``; any other callable runs after an unfused convolution
_FUSABLE = {
    _act.relu: (("BiasAdd", "Relu"), 0.2), _nn.relu: (("BiasAdd", "Relu"), 0.2),
    _act.relu6: (("BiasAdd", "Relu6"), 0.2), _nn.relu6: (("BiasAdd", "Relu6"), 0.2),
    _act.elu: (("BiasAdd", "Elu"), 0.2), _nn.elu: (("BiasAdd", "Elu"), 0.2),
    _act.leaky_relu: (("BiasAdd", "LeakyRelu"), 0.2),
    _nn.leaky_relu: (("BiasAdd", "LeakyRelu"), 0.2),
    _act.gelu: (("BiasAdd", "GeluExact"), 0.2),
    None: (("BiasAdd",), 0.2),
}


def _pair(v, what):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise InvalidArgumentError(f"{what} must be an int or a pair of ints, got {v}")
    return v


def _padding(padding):
    p = str(padding).upper()
    if p not in ("SAME", "VALID"):
        raise InvalidArgumentError(f"padding must be 'valid' or 'same', got {padding!r}")
    return p


class Conv2D(Layer):
    """2-D convolution: ``activation(conv2d(inputs, kernel) + bias)``.

    With a bias and no activation, or relu, relu6, elu, leaky_relu (alpha 0.2) or gelu
    (the exact one), the layer runs one ``_FusedConv2D`` op (bias and activation in
    the convolution's epilogue, docs/fused-ops.md); other activations run unfused.

    ``filters``; ``kernel_size`` (int or pair); ``strides``; ``padding`` ``'valid'``
    or ``'same'`` (any case); ``data_format`` ``'channels_last'`` (NHWC, default) or
    ``'channels_first'`` (NCHW); ``dilation_rate``; ``activation`` (name or
    callable); ``use_bias``; initializers and regularizers as in Dense. The kernel is
    ``[kh, kw, in_channels, filters]``.
    """

    _leaf = True

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        _check_constraints(kernel_constraint, bias_constraint)
        self.filters = int(filters)
        if self.filters <= 0:
            raise InvalidArgumentError(f"Conv2D: filters must be a positive integer, got {filters}")
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.padding = _padding(padding)
        self.data_format = _channels(data_format)
        self.dilation_rate = _pair(dilation_rate, "dilation_rate")
        self.activation = _act.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self._fmt = "NHWC" if self.data_format == "channels_last" else "NCHW"
        self.kernel = None
        self.bias = None

    def build(self, input_shape):
        if input_shape is None or len(input_shape) != 4:
            raise InvalidArgumentError(f"{self.name}: Conv2D needs 4-D inputs "
                             f"({'NHWC' if self._fmt == 'NHWC' else 'NCHW'}), got shape "
                             f"{input_shape}")
        c = input_shape[-1] if self._fmt == "NHWC" else input_shape[1]
        if c is None:
            raise InvalidArgumentError(
                f"{self.name}: the channel dimension of the inputs must be known")
        self.kernel = self.add_weight("kernel", [*self.kernel_size, int(c), self.filters],
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer)
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.filters], initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer)
        self.built = True

    def call(self, inputs):
        fmt = self._fmt
        fused = _FUSABLE.get(self.activation) if self.bias is not None else None
        if fused is not None:
            # bias and activation in the convolution's epilogue (docs/fused-ops.md)
            ops, alpha = fused
            return _fused.fused_conv2d(
                inputs, self._read(self.kernel), self._read(self.bias), strides=self.strides,
                padding=self.padding, data_format=fmt, dilations=self.dilation_rate,
                activation=ops[1] if len(ops) > 1 else None, leakyrelu_alpha=alpha)
        y = _nn.conv2d(inputs, self._read(self.kernel), strides=self.strides,
                       padding=self.padding, data_format=fmt, dilations=self.dilation_rate)
        b = self.bias
        if b is not None:
            y = y + self._read(b) if fmt == "NHWC" else _nn.bias_add(y, self._read(b), "NCHW")
        act = self.activation
        return y if act is None else act(y)


Convolution2D = Conv2D


def conv2d(*args, **kwargs):
    """Not available with eager execution (as in TensorFlow): use ``tf.layers.Conv2D``."""
    raise FailedPreconditionError(
        "tf.layers.conv2d (the functional form) creates variables it cannot "
                       "keep with eager execution; use the tf.layers.Conv2D class "
                       "(layer = tf.layers.Conv2D(filters, kernel_size); y = layer(x)).")
