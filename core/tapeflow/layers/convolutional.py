"""Conv2D (``tf.layers.Conv2D``, ``tf.keras.layers.Conv2D``) and the pooling layers that go
with it: MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D
(and the functional ``conv2d`` / ``max_pooling2d`` / ``average_pooling2d``).

>>> import tapeflow as tf
>>> conv = tf.keras.layers.Conv2D(16, [3, 3], activation='relu')
>>> conv(tf.zeros([1, 28, 28, 1])).shape
TensorShape([1, 26, 26, 16])
>>> conv.kernel.shape
TensorShape([3, 3, 1, 16])
>>> pool = tf.layers.MaxPooling2D((2, 2), (2, 2), padding='same')
>>> pool(tf.zeros([1, 7, 7, 3])).shape
TensorShape([1, 4, 4, 3])
>>> tf.keras.layers.GlobalAveragePooling2D()(tf.zeros([2, 5, 5, 3])).shape
TensorShape([2, 3])
"""

from __future__ import annotations

from ..errors import FailedPreconditionError, InvalidArgumentError
from ..ops import nn as _nn
from ..ops import fused as _fused
from ..ops import reductions as _r
from . import activations as _act
from .base import Layer
from .core import _channels, _check_constraints

__all__ = ["Conv2D", "Convolution2D", "conv2d", "MaxPooling2D", "MaxPool2D", "AveragePooling2D",
           "AvgPool2D", "GlobalAveragePooling2D", "GlobalAvgPool2D", "GlobalMaxPooling2D",
           "GlobalMaxPool2D", "max_pooling2d", "average_pooling2d"]


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


# --- pooling --------------------------------------------------------------------------------

class _Pooling2D(Layer):
    _leaf = True
    _fn = None

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None,
                 name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = self.pool_size if strides is None else _pair(strides, "strides")
        self.padding = _padding(padding)
        self.data_format = _channels(data_format)
        self._fmt = "NHWC" if self.data_format == "channels_last" else "NCHW"

    def call(self, inputs):
        return type(self)._fn(inputs, self.pool_size, self.strides, self.padding, self._fmt)


class MaxPooling2D(_Pooling2D):
    """Max over ``pool_size`` windows moved by ``strides`` (default: ``pool_size``)."""
    _fn = staticmethod(_nn.max_pool2d)


class AveragePooling2D(_Pooling2D):
    """Mean over ``pool_size`` windows moved by ``strides`` (default: ``pool_size``)."""
    _fn = staticmethod(_nn.avg_pool2d)


MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Functional ``tf.layers.max_pooling2d``."""
    return MaxPooling2D(pool_size, strides, padding, data_format, name=name)(inputs)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    """Functional ``tf.layers.average_pooling2d``."""
    return AveragePooling2D(pool_size, strides, padding, data_format, name=name)(inputs)


class _GlobalPooling2D(Layer):
    _leaf = True
    _fn = None

    def __init__(self, data_format=None, keepdims=False, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.data_format = _channels(data_format)
        self.keepdims = bool(keepdims)
        self._axes = [1, 2] if self.data_format == "channels_last" else [2, 3]

    def call(self, inputs):
        return type(self)._fn(inputs, axis=self._axes, keepdims=self.keepdims)


class GlobalAveragePooling2D(_GlobalPooling2D):
    """Mean over the spatial axes: ``[N, H, W, C] -> [N, C]``."""
    _fn = staticmethod(_r.reduce_mean)


class GlobalMaxPooling2D(_GlobalPooling2D):
    """Max over the spatial axes: ``[N, H, W, C] -> [N, C]``."""
    _fn = staticmethod(_r.reduce_max)


GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool2D = GlobalMaxPooling2D
