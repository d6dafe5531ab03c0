"""Pooling layers: MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D,
GlobalMaxPooling2D (and the functional ``max_pooling2d`` / ``average_pooling2d``).

>>> import tapeflow as tf
>>> pool = tf.layers.MaxPooling2D((2, 2), (2, 2), padding='same')
>>> pool(tf.zeros([1, 7, 7, 3])).shape
TensorShape([1, 4, 4, 3])
>>> tf.keras.layers.GlobalAveragePooling2D()(tf.zeros([2, 5, 5, 3])).shape
TensorShape([2, 3])
"""

from __future__ import annotations

from ..ops import nn as _nn
from ..ops import reductions as _r
from .base import Layer
from .convolutional import _padding, _pair
from .core import _channels

__all__ = ["MaxPooling2D", "MaxPool2D", "AveragePooling2D", "AvgPool2D",
           "GlobalAveragePooling2D", "GlobalAvgPool2D", "GlobalMaxPooling2D", "GlobalMaxPool2D",
           "max_pooling2d", "average_pooling2d"]


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
