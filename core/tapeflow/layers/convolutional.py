"""The convolution layers (``tf.keras.layers`` / ``tf.layers``): Conv1D, Conv2D, Conv3D,
Conv1DTranspose, Conv2DTranspose, Conv3DTranspose, DepthwiseConv2D, SeparableConv2D; the
pooling layers (MaxPooling1D/2D/3D, AveragePooling1D/2D/3D, GlobalAveragePooling1D/2D/3D,
GlobalMaxPooling1D/2D/3D); and the reshaping layers that go with them (ZeroPadding1D/2D/3D,
Cropping1D/2D/3D, UpSampling1D/2D/3D). Functional forms: ``max_pooling1d/2d/3d``,
``average_pooling1d/2d/3d`` (``conv2d`` and the other functional convolutions raise, as
in TensorFlow with eager execution: they would create variables they cannot keep).

Arguments have Keras's names and defaults; ``data_format`` is ``'channels_last'``
(default) or ``'channels_first'``; weights are named as in Keras (``conv2d/kernel:0``,
``depthwise_conv2d/depthwise_kernel:0``, ``separable_conv2d/pointwise_kernel:0``) with
Keras's shapes (``[kh, kw, filters, in_channels]`` for Conv2DTranspose); every layer has
``get_config``/``from_config``. ``strides > 1`` together with ``dilation_rate > 1`` is
refused, as Keras does.

Long file: every convolution, pooling, padding, cropping and upsampling layer of Keras's
convolutional family, one small class each over shared bases.

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
>>> up = tf.keras.layers.Conv2DTranspose(64, 5, strides=2, padding='same')
>>> up(tf.zeros([2, 7, 7, 128])).shape, up.kernel.shape
(TensorShape([2, 14, 14, 64]), TensorShape([5, 5, 64, 128]))
>>> tf.keras.layers.Conv1D(4, 3, padding='causal')(tf.zeros([2, 10, 3])).shape
TensorShape([2, 10, 4])
>>> tf.keras.layers.UpSampling2D(2, interpolation='bilinear')(tf.zeros([1, 3, 3, 2])).shape
TensorShape([1, 6, 6, 2])
"""

from __future__ import annotations

import numpy as np

from ..errors import FailedPreconditionError, InvalidArgumentError
from .. import ops as _a
from ..ops import nn as _nn
from ..ops import fused as _fused
from ..ops import reductions as _r
from . import activations as _act
from . import initializers as _init
from . import regularizers as _reg
from .base import Layer
from .core import _channels, _check_constraints

__all__ = ["Conv1D", "Convolution1D", "Conv2D", "Convolution2D", "Conv3D", "Convolution3D",
           "Conv1DTranspose", "Convolution1DTranspose", "Conv2DTranspose",
           "Convolution2DTranspose", "Conv3DTranspose", "Convolution3DTranspose",
           "DepthwiseConv2D", "SeparableConv2D", "SeparableConvolution2D",
           "MaxPooling1D", "MaxPool1D", "MaxPooling2D", "MaxPool2D", "MaxPooling3D", "MaxPool3D",
           "AveragePooling1D", "AvgPool1D", "AveragePooling2D", "AvgPool2D",
           "AveragePooling3D", "AvgPool3D", "GlobalAveragePooling1D", "GlobalAvgPool1D",
           "GlobalAveragePooling2D", "GlobalAvgPool2D", "GlobalAveragePooling3D",
           "GlobalAvgPool3D", "GlobalMaxPooling1D", "GlobalMaxPool1D", "GlobalMaxPooling2D",
           "GlobalMaxPool2D", "GlobalMaxPooling3D", "GlobalMaxPool3D",
           "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D", "Cropping1D", "Cropping2D",
           "Cropping3D", "UpSampling1D", "UpSampling2D", "UpSampling3D",
           "conv1d", "conv2d", "conv3d", "conv2d_transpose", "conv3d_transpose",
           "separable_conv2d", "max_pooling1d", "max_pooling2d", "max_pooling3d",
           "average_pooling1d", "average_pooling2d", "average_pooling3d"]


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

#: the ops' data_format per (rank, channels_last)
_FORMATS = {(1, True): "NWC", (1, False): "NCW", (2, True): "NHWC", (2, False): "NCHW",
            (3, True): "NDHWC", (3, False): "NCDHW"}


# --- argument helpers ------------------------------------------------------------------------

def _tuple(v, n, what, layer, minimum=1):
    """An int or ``n`` ints -> an ``n``-tuple of ints ``>= minimum``."""
    ints = (int, np.integer)
    if isinstance(v, ints) and not isinstance(v, bool):
        t = (int(v),) * n
    elif isinstance(v, (list, tuple)) and all(isinstance(a, ints) and not isinstance(a, bool)
                                              for a in v):
        t = tuple(int(a) for a in v)
    else:
        t = ()
    if len(t) == 1:
        t = t * n
    if len(t) != n or min(t) < minimum:
        raise InvalidArgumentError(
            f"{layer}: {what} must be an int or a tuple of {n} ints >= {minimum}, got {v!r}")
    return t


def _positive(v, what, layer):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise InvalidArgumentError(f"{layer}: {what} must be a positive integer, got {v!r}")
    return int(v)


def _padding(padding, layer, causal=False):
    p = str(padding).lower()
    allowed = ("valid", "same", "causal") if causal else ("valid", "same")
    if p not in allowed:
        raise InvalidArgumentError(
            f"{layer}: padding must be one of {', '.join(repr(a) for a in allowed)}, got "
            f"{padding!r}")
    return p


def _no_dilated_strides(strides, dilation_rate, layer):
    if max(strides) > 1 and max(dilation_rate) > 1:
        raise InvalidArgumentError(
            f"{layer}: strides > 1 are not supported in conjunction with dilation_rate > 1 "
            f"(strides {strides}, dilation_rate {dilation_rate}); use one or the other")


def _init_arg(v):
    """An initializer argument as given, or the object a Keras config dict describes."""
    if isinstance(v, dict):
        return getattr(_init, v["class_name"])(**v.get("config", {}))
    return v


def _reg_arg(v):
    if isinstance(v, dict):
        return getattr(_reg, v["class_name"])(**v.get("config", {}))
    return v


def _ser(v):
    """A config value for an initializer or regularizer: a name stays a name, an object
    becomes Keras's ``{"class_name", "config"}``."""
    if v is None or isinstance(v, str) or not hasattr(v, "get_config"):
        return v
    return {"class_name": type(v).__name__, "config": v.get_config()}


def _fmt(shape):
    return None if shape is None else list(shape)


class _Spatial(Layer):
    """A layer over ``rank`` spatial dimensions with a ``data_format``."""

    _leaf = True
    _rank = 2

    def _set_format(self, data_format):
        self.data_format = _channels(data_format)
        self._last = self.data_format == "channels_last"
        self._op_fmt = _FORMATS[(self._rank, self._last)]

    def _check_rank(self, input_shape):
        r = self._rank + 2
        if input_shape is None or len(input_shape) != r:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} needs {r}-D inputs ({self._op_fmt}), got "
                f"shape {_fmt(input_shape)}")

    def _channels_of(self, input_shape):
        self._check_rank(input_shape)
        c = input_shape[-1] if self._last else input_shape[1]
        if c is None:
            raise InvalidArgumentError(
                f"{self.name}: the channel dimension of the inputs must be known, got shape "
                f"{_fmt(input_shape)} ({self._op_fmt})")
        return int(c)

    def _spatial_axes(self):
        return list(range(1, self._rank + 1)) if self._last else \
            list(range(2, self._rank + 2))


# --- convolutions ----------------------------------------------------------------------------

class _Conv(_Spatial):
    """The shared part of the convolution layers: arguments, config, bias, activation."""

    _causal = False
    _weights_keys = ("kernel",)

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        _check_constraints(kernel_constraint, bias_constraint)
        cls, n = type(self).__name__, self._rank
        self.filters = None if filters is None else _positive(filters, "filters", cls)
        self.kernel_size = _tuple(kernel_size, n, "kernel_size", cls)
        self.strides = _tuple(strides, n, "strides", cls)
        self.padding = _padding(padding, cls, self._causal)
        self._set_format(data_format)
        self.dilation_rate = _tuple(dilation_rate, n, "dilation_rate", cls)
        _no_dilated_strides(self.strides, self.dilation_rate, cls)
        if groups != 1:
            raise NotImplementedError(f"{cls}: groups > 1 (grouped convolution) is not "
                                      "supported")
        self.groups = 1
        self.activation = _act.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _init_arg(kernel_initializer)
        self.bias_initializer = _init_arg(bias_initializer)
        self.kernel_regularizer = _reg_arg(kernel_regularizer)
        self.bias_regularizer = _reg_arg(bias_regularizer)
        self.kernel = None
        self.bias = None

    def _pad_op(self):
        return "VALID" if self.padding == "causal" else self.padding.upper()

    def _kernel_shape(self, c):
        return [*self.kernel_size, c, self.filters]

    def _bias_size(self, c):
        return self.filters

    def build(self, input_shape):
        c = self._channels_of(input_shape)
        self.kernel = self.add_weight("kernel", self._kernel_shape(c),
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer)
        self._build_bias(c)
        self.built = True

    def _build_bias(self, c):
        if self.use_bias:
            self.bias = self.add_weight("bias", [self._bias_size(c)],
                                        initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer)

    def _finish(self, y):
        b = self.bias
        if b is not None:
            y = y + self._read(b) if self._last else \
                _nn.bias_add(y, self._read(b), "NCHW")
        act = self.activation
        return y if act is None else act(y)

    def call(self, inputs):
        return self._finish(self._convolve(inputs))

    def get_config(self):
        cfg = super().get_config()
        if self.filters is not None:
            cfg["filters"] = self.filters
        cfg.update(kernel_size=self.kernel_size, strides=self.strides, padding=self.padding,
                   data_format=self.data_format, dilation_rate=self.dilation_rate,
                   activation=_act.serialize(self.activation), use_bias=self.use_bias,
                   bias_initializer=_ser(self.bias_initializer),
                   bias_regularizer=_ser(self.bias_regularizer), activity_regularizer=None,
                   bias_constraint=None)
        cfg.update(self._weight_config())
        return cfg

    def _weight_config(self):
        return {"groups": self.groups,
                "kernel_initializer": _ser(self.kernel_initializer),
                "kernel_regularizer": _ser(self.kernel_regularizer), "kernel_constraint": None}


class Conv1D(_Conv):
    """1-D convolution (temporal): ``activation(conv1d(inputs, kernel) + bias)`` of a
    ``[batch, steps, channels]`` input (``channels_first``: ``[batch, channels,
    steps]``); kernel ``[kernel_size, in_channels, filters]``. ``padding='causal'`` pads
    ``dilation_rate * (kernel_size - 1)`` zeros before the sequence only, so output ``t``
    sees no input after ``t``.

    >>> import tapeflow as tf
    >>> layer = tf.keras.layers.Conv1D(8, 3, strides=2, padding='same')
    >>> layer(tf.zeros([4, 10, 2])).shape, layer.kernel.shape
    (TensorShape([4, 5, 8]), TensorShape([3, 2, 8]))
    """

    _rank = 1
    _causal = True

    def _convolve(self, x):
        if self.padding == "causal":
            left = self.dilation_rate[0] * (self.kernel_size[0] - 1)
            x = _a.pad(x, [[0, 0], [left, 0], [0, 0]] if self._last
                       else [[0, 0], [0, 0], [left, 0]])
        return _nn.conv1d(x, self._read(self.kernel), self.strides[0], self._pad_op(),
                          self._op_fmt, self.dilation_rate[0])


class Conv2D(_Conv):
    """2-D convolution: ``activation(conv2d(inputs, kernel) + bias)``; kernel
    ``[kh, kw, in_channels, filters]``.

    With a bias and no activation, or relu, relu6, elu, leaky_relu (alpha 0.2) or gelu
    (the exact one), the layer runs one ``_FusedConv2D`` op (bias and activation in
    the convolution's epilogue, docs/fused-ops.md); other activations run unfused.
    """

    _rank = 2

    def call(self, inputs):
        fused = _FUSABLE.get(self.activation) if self.bias is not None else None
        if fused is not None:
            # bias and activation in the convolution's epilogue (docs/fused-ops.md)
            ops, alpha = fused
            return _fused.fused_conv2d(
                inputs, self._read(self.kernel), self._read(self.bias), strides=self.strides,
                padding=self._pad_op(), data_format=self._op_fmt,
                dilations=self.dilation_rate,
                activation=ops[1] if len(ops) > 1 else None, leakyrelu_alpha=alpha)
        return self._finish(self._convolve(inputs))

    def _convolve(self, x):
        return _nn.conv2d(x, self._read(self.kernel), strides=self.strides,
                          padding=self._pad_op(), data_format=self._op_fmt,
                          dilations=self.dilation_rate)


class Conv3D(_Conv):
    """3-D convolution of ``[batch, depth, height, width, channels]`` inputs; kernel
    ``[kd, kh, kw, in_channels, filters]``.

    >>> import tapeflow as tf
    >>> tf.keras.layers.Conv3D(2, 3, padding='same')(tf.zeros([1, 4, 5, 6, 3])).shape
    TensorShape([1, 4, 5, 6, 2])
    """

    _rank = 3

    def _convolve(self, x):
        return _nn.conv3d(x, self._read(self.kernel), strides=self.strides,
                          padding=self._pad_op(), data_format=self._op_fmt,
                          dilations=self.dilation_rate)


def deconv_output_length(size, kernel, padding, output_padding, stride, dilation):
    """The output length of a transposed convolution along one dimension (Keras's rule):
    without ``output_padding`` ``size * stride`` (same) or ``size * stride +
    max(kernel - stride, 0)`` (valid); with it, ``(size - 1) * stride + kernel - 2 *
    pad + output_padding``, ``pad`` being ``kernel // 2`` for same, 0 for valid
    (``kernel`` dilated).

    >>> [deconv_output_length(7, 5, p, None, 2, 1) for p in ("same", "valid")]
    [14, 17]
    """
    k = (kernel - 1) * dilation + 1
    if output_padding is None:
        return size * stride if padding == "same" else size * stride + max(k - stride, 0)
    pad = k // 2 if padding == "same" else 0
    return (size - 1) * stride + k - 2 * pad + output_padding


class _ConvTranspose(_Conv):
    """Transposed convolution: the gradient of a convolution w.r.t. its input, with
    ``filters`` output channels; kernel ``[*kernel_size, filters, in_channels]``."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", output_padding=None,
                 data_format=None, dilation_rate=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         1, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, activity_regularizer,
                         kernel_constraint, bias_constraint, trainable, name, **kwargs)
        cls = type(self).__name__
        if output_padding is None:
            self.output_padding = None
        else:
            self.output_padding = _tuple(output_padding, self._rank, "output_padding", cls, 0)
            for s, p in zip(self.strides, self.output_padding):
                if p >= s:
                    raise InvalidArgumentError(
                        f"{cls}: strides must be greater than output_padding, got strides "
                        f"{self.strides} and output_padding {self.output_padding}")

    def _kernel_shape(self, c):
        return [*self.kernel_size, self.filters, c]

    def _output_shape(self, shape):
        sp = [shape[a] for a in self._spatial_axes()]
        op = self.output_padding or (None,) * self._rank
        out = [deconv_output_length(n, k, self.padding, p, s, d) for n, k, p, s, d in
               zip(sp, self.kernel_size, op, self.strides, self.dilation_rate)]
        return [shape[0], *out, self.filters] if self._last else [shape[0], self.filters, *out]

    def _convolve(self, x):
        fn = {1: _nn.conv1d_transpose, 2: _nn.conv2d_transpose,
              3: _nn.conv3d_transpose}[self._rank]
        return fn(x, self._read(self.kernel), self._output_shape(list(x.shape)),
                  strides=self.strides, padding=self.padding.upper(),
                  data_format=self._op_fmt, dilations=self.dilation_rate)

    def get_config(self):
        cfg = super().get_config()
        del cfg["groups"]
        cfg["output_padding"] = self.output_padding
        return cfg


class Conv1DTranspose(_ConvTranspose):
    """Transposed 1-D convolution; kernel ``[kernel_size, filters, in_channels]``."""

    _rank = 1


class Conv2DTranspose(_ConvTranspose):
    """Transposed 2-D convolution ("deconvolution"): with ``strides=2`` and
    ``padding='same'`` it doubles the height and width; kernel ``[kh, kw, filters,
    in_channels]``; ``output_padding`` (each < its stride) adds to the output size.

    >>> import tapeflow as tf
    >>> layer = tf.keras.layers.Conv2DTranspose(3, 3, strides=2, output_padding=1)
    >>> layer(tf.zeros([1, 4, 4, 2])).shape
    TensorShape([1, 10, 10, 3])
    """

    _rank = 2


class Conv3DTranspose(_ConvTranspose):
    """Transposed 3-D convolution; kernel ``[kd, kh, kw, filters, in_channels]``."""

    _rank = 3


class DepthwiseConv2D(_Conv):
    """Depthwise 2-D convolution: each input channel convolved with its own
    ``depth_multiplier`` filters (``depthwise_kernel``: ``[kh, kw, in_channels,
    depth_multiplier]``), giving ``in_channels * depth_multiplier`` channels.

    >>> import tapeflow as tf
    >>> tf.keras.backend.clear_session()
    >>> layer = tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=2, padding='same')
    >>> layer(tf.zeros([1, 5, 5, 3])).shape
    TensorShape([1, 5, 5, 6])
    >>> [v.name for v in layer.variables]
    ['depthwise_conv2d/depthwise_kernel:0', 'depthwise_conv2d/bias:0']
    """

    _weights_keys = ("depthwise_kernel",)

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", bias_initializer="zeros",
                 depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, bias_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(None, kernel_size, strides, padding, data_format, dilation_rate, 1,
                         activation, use_bias, None, bias_initializer, None, bias_regularizer,
                         activity_regularizer, depthwise_constraint, bias_constraint,
                         trainable, name, **kwargs)
        self.depth_multiplier = _positive(depth_multiplier, "depth_multiplier",
                                          type(self).__name__)
        self.depthwise_initializer = _init_arg(depthwise_initializer)
        self.depthwise_regularizer = _reg_arg(depthwise_regularizer)
        self.depthwise_kernel = None

    def build(self, input_shape):
        c = self._channels_of(input_shape)
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", [*self.kernel_size, c, self.depth_multiplier],
            initializer=self.depthwise_initializer, regularizer=self.depthwise_regularizer)
        self._build_bias(c)
        self.built = True

    def _bias_size(self, c):
        return c * self.depth_multiplier

    def _convolve(self, x):
        return _nn.depthwise_conv2d(x, self._read(self.depthwise_kernel), self.strides,
                                    self.padding.upper(), self._op_fmt, self.dilation_rate)

    def _weight_config(self):
        return {"depth_multiplier": self.depth_multiplier,
                "depthwise_initializer": _ser(self.depthwise_initializer),
                "depthwise_regularizer": _ser(self.depthwise_regularizer),
                "depthwise_constraint": None}


class SeparableConv2D(_Conv):
    """Depthwise separable 2-D convolution: a depthwise convolution (``depthwise_kernel``
    ``[kh, kw, in_channels, depth_multiplier]``) then a 1x1 convolution
    (``pointwise_kernel`` ``[1, 1, in_channels * depth_multiplier, filters]``).

    >>> import tapeflow as tf
    >>> tf.keras.backend.clear_session()
    >>> layer = tf.keras.layers.SeparableConv2D(4, 3)
    >>> layer(tf.zeros([1, 5, 5, 3])).shape
    TensorShape([1, 3, 3, 4])
    >>> [v.name for v in layer.variables]  # doctest: +NORMALIZE_WHITESPACE
    ['separable_conv2d/depthwise_kernel:0', 'separable_conv2d/pointwise_kernel:0',
     'separable_conv2d/bias:0']
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, pointwise_constraint=None, bias_constraint=None,
                 trainable=True, name=None, **kwargs):
        _check_constraints(pointwise_constraint)
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, 1,
                         activation, use_bias, None, bias_initializer, None, bias_regularizer,
                         activity_regularizer, depthwise_constraint, bias_constraint,
                         trainable, name, **kwargs)
        self.depth_multiplier = _positive(depth_multiplier, "depth_multiplier",
                                          type(self).__name__)
        self.depthwise_initializer = _init_arg(depthwise_initializer)
        self.pointwise_initializer = _init_arg(pointwise_initializer)
        self.depthwise_regularizer = _reg_arg(depthwise_regularizer)
        self.pointwise_regularizer = _reg_arg(pointwise_regularizer)
        self.depthwise_kernel = self.pointwise_kernel = None

    def build(self, input_shape):
        c = self._channels_of(input_shape)
        m = self.depth_multiplier
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", [*self.kernel_size, c, m],
            initializer=self.depthwise_initializer, regularizer=self.depthwise_regularizer)
        self.pointwise_kernel = self.add_weight(
            "pointwise_kernel", [1, 1, c * m, self.filters],
            initializer=self.pointwise_initializer, regularizer=self.pointwise_regularizer)
        self._build_bias(c)
        self.built = True

    def _convolve(self, x):
        return _nn.separable_conv2d(x, self._read(self.depthwise_kernel),
                                    self._read(self.pointwise_kernel), self.strides,
                                    self.padding.upper(), self._op_fmt, self.dilation_rate)

    def _weight_config(self):
        return {"depth_multiplier": self.depth_multiplier,
                "depthwise_initializer": _ser(self.depthwise_initializer),
                "pointwise_initializer": _ser(self.pointwise_initializer),
                "depthwise_regularizer": _ser(self.depthwise_regularizer),
                "pointwise_regularizer": _ser(self.pointwise_regularizer),
                "depthwise_constraint": None, "pointwise_constraint": None}


Convolution1D, Convolution2D, Convolution3D = Conv1D, Conv2D, Conv3D
Convolution1DTranspose, Convolution2DTranspose = Conv1DTranspose, Conv2DTranspose
Convolution3DTranspose, SeparableConvolution2D = Conv3DTranspose, SeparableConv2D


def _no_functional(name, cls):
    def fn(*args, **kwargs):
        raise FailedPreconditionError(
            f"tf.layers.{name} (the functional form) creates variables it cannot keep with "
            f"eager execution; use the tf.layers.{cls} class (layer = tf.layers.{cls}(...); "
            "y = layer(x)).")
    fn.__name__ = name
    fn.__doc__ = (f"Not available with eager execution (as in TensorFlow): use "
                  f"``tf.layers.{cls}``.")
    return fn


conv1d = _no_functional("conv1d", "Conv1D")
conv2d = _no_functional("conv2d", "Conv2D")
conv3d = _no_functional("conv3d", "Conv3D")
conv2d_transpose = _no_functional("conv2d_transpose", "Conv2DTranspose")
conv3d_transpose = _no_functional("conv3d_transpose", "Conv3DTranspose")
separable_conv2d = _no_functional("separable_conv2d", "SeparableConv2D")


# --- pooling ---------------------------------------------------------------------------------

_POOL_FNS = {("max", 1): _nn.max_pool1d, ("max", 2): _nn.max_pool2d, ("max", 3): _nn.max_pool3d,
             ("avg", 1): _nn.avg_pool1d, ("avg", 2): _nn.avg_pool2d, ("avg", 3): _nn.avg_pool3d}


class _Pooling(_Spatial):
    _kind = "max"

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None,
                 name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        cls = type(self).__name__
        self.pool_size = _tuple(pool_size, self._rank, "pool_size", cls)
        self.strides = self.pool_size if strides is None else \
            _tuple(strides, self._rank, "strides", cls)
        self.padding = _padding(padding, cls)
        self._set_format(data_format)

    def build(self, input_shape):
        self._check_rank(input_shape)
        self.built = True

    def call(self, inputs):
        fn = _POOL_FNS[(self._kind, self._rank)]
        return fn(inputs, self.pool_size, self.strides, self.padding.upper(), self._op_fmt)

    def get_config(self):
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides,
                "padding": self.padding, "data_format": self.data_format}


class MaxPooling1D(_Pooling):
    """Max over ``pool_size`` steps moved by ``strides`` (default: ``pool_size``).

    >>> import tapeflow as tf
    >>> tf.keras.layers.MaxPooling1D(2)(tf.zeros([2, 7, 3])).shape
    TensorShape([2, 3, 3])
    """
    _rank = 1


class MaxPooling2D(_Pooling):
    """Max over ``pool_size`` windows moved by ``strides`` (default: ``pool_size``)."""
    _rank = 2


class MaxPooling3D(_Pooling):
    """Max over ``pool_size`` boxes moved by ``strides`` (default: ``pool_size``)."""
    _rank = 3


class AveragePooling1D(_Pooling):
    """Mean over ``pool_size`` steps (with ``'same'``, of the in-bounds ones)."""
    _rank = 1
    _kind = "avg"


class AveragePooling2D(_Pooling):
    """Mean over ``pool_size`` windows moved by ``strides`` (default: ``pool_size``)."""
    _rank = 2
    _kind = "avg"


class AveragePooling3D(_Pooling):
    """Mean over ``pool_size`` boxes moved by ``strides`` (default: ``pool_size``)."""
    _rank = 3
    _kind = "avg"


MaxPool1D, MaxPool2D, MaxPool3D = MaxPooling1D, MaxPooling2D, MaxPooling3D
AvgPool1D, AvgPool2D, AvgPool3D = AveragePooling1D, AveragePooling2D, AveragePooling3D


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Functional ``tf.layers.max_pooling1d``."""
    return MaxPooling1D(pool_size, strides, padding, data_format, name=name)(inputs)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Functional ``tf.layers.max_pooling2d``."""
    return MaxPooling2D(pool_size, strides, padding, data_format, name=name)(inputs)


def max_pooling3d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Functional ``tf.layers.max_pooling3d``."""
    return MaxPooling3D(pool_size, strides, padding, data_format, name=name)(inputs)


def average_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    """Functional ``tf.layers.average_pooling1d``."""
    return AveragePooling1D(pool_size, strides, padding, data_format, name=name)(inputs)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    """Functional ``tf.layers.average_pooling2d``."""
    return AveragePooling2D(pool_size, strides, padding, data_format, name=name)(inputs)


def average_pooling3d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    """Functional ``tf.layers.average_pooling3d``."""
    return AveragePooling3D(pool_size, strides, padding, data_format, name=name)(inputs)


class _GlobalPooling(_Spatial):
    _fn = None

    def __init__(self, data_format=None, keepdims=False, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._set_format(data_format)
        self.keepdims = bool(keepdims)
        self._axes = self._spatial_axes()

    def build(self, input_shape):
        self._check_rank(input_shape)
        self.built = True

    def call(self, inputs):
        return type(self)._fn(inputs, axis=self._axes, keepdims=self.keepdims)

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format,
                "keepdims": self.keepdims}


class GlobalAveragePooling1D(_GlobalPooling):
    """Mean over the steps: ``[N, steps, C] -> [N, C]``."""
    _rank = 1
    _fn = staticmethod(_r.reduce_mean)


class GlobalAveragePooling2D(_GlobalPooling):
    """Mean over the spatial axes: ``[N, H, W, C] -> [N, C]``."""
    _rank = 2
    _fn = staticmethod(_r.reduce_mean)


class GlobalAveragePooling3D(_GlobalPooling):
    """Mean over the spatial axes: ``[N, D, H, W, C] -> [N, C]``."""
    _rank = 3
    _fn = staticmethod(_r.reduce_mean)


class GlobalMaxPooling1D(_GlobalPooling):
    """Max over the steps: ``[N, steps, C] -> [N, C]``."""
    _rank = 1
    _fn = staticmethod(_r.reduce_max)


class GlobalMaxPooling2D(_GlobalPooling):
    """Max over the spatial axes: ``[N, H, W, C] -> [N, C]``."""
    _rank = 2
    _fn = staticmethod(_r.reduce_max)


class GlobalMaxPooling3D(_GlobalPooling):
    """Max over the spatial axes: ``[N, D, H, W, C] -> [N, C]``."""
    _rank = 3
    _fn = staticmethod(_r.reduce_max)


GlobalAvgPool1D, GlobalAvgPool2D = GlobalAveragePooling1D, GlobalAveragePooling2D
GlobalAvgPool3D, GlobalMaxPool1D = GlobalAveragePooling3D, GlobalMaxPooling1D
GlobalMaxPool2D, GlobalMaxPool3D = GlobalMaxPooling2D, GlobalMaxPooling3D


# --- padding, cropping, upsampling -----------------------------------------------------------

def _pairs(v, rank, what, layer):
    """Keras's forms: an int (both sides of every dimension), ``rank`` ints (both sides of
    each), or ``rank`` pairs; for 1-D also one pair ``(before, after)``."""
    try:
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out = ((int(v), int(v)),) * rank
        elif rank == 1 and len(v) == 2 and all(isinstance(a, (int, np.integer)) for a in v):
            out = ((int(v[0]), int(v[1])),)
        elif len(v) == rank and all(isinstance(a, (int, np.integer)) for a in v):
            out = tuple((int(a), int(a)) for a in v)
        else:
            out = tuple((int(a), int(b)) for a, b in v)
    except (TypeError, ValueError):
        out = ()
    if len(out) != rank or min(min(p) for p in out) < 0:
        raise InvalidArgumentError(
            f"{layer}: {what} must be an int, a tuple of {rank} ints or of {rank} (before, "
            f"after) pairs of non-negative ints, got {v!r}")
    return out


class _ZeroPadding(_Spatial):
    _default = 1

    def __init__(self, padding=1, data_format=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._set_format(data_format)
        self._pads = _pairs(padding, self._rank, "padding", type(self).__name__)
        self.padding = self._pads[0] if self._rank == 1 else self._pads

    def build(self, input_shape):
        self._check_rank(input_shape)
        self.built = True

    def call(self, inputs):
        pads = [list(p) for p in self._pads]
        return _a.pad(inputs, [[0, 0], *pads, [0, 0]] if self._last else
                      [[0, 0], [0, 0], *pads])

    def get_config(self):
        cfg = {**super().get_config(), "padding": self.padding}
        if self._rank > 1:
            cfg["data_format"] = self.data_format
        return cfg


class ZeroPadding1D(_ZeroPadding):
    """Zeros before and after the steps of ``[N, steps, C]``: ``padding`` an int or
    ``(before, after)``.

    >>> import tapeflow as tf
    >>> tf.keras.layers.ZeroPadding1D((1, 2))(tf.ones([1, 3, 1]))[0, :, 0].numpy().tolist()
    [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    """
    _rank = 1

    def __init__(self, padding=1, name=None, **kwargs):
        super().__init__(padding, None, name=name, **kwargs)


class ZeroPadding2D(_ZeroPadding):
    """Zeros around the rows and columns: ``padding`` an int, ``(rows, cols)`` or
    ``((top, bottom), (left, right))``."""
    _rank = 2

    def __init__(self, padding=(1, 1), data_format=None, name=None, **kwargs):
        super().__init__(padding, data_format, name=name, **kwargs)


class ZeroPadding3D(_ZeroPadding):
    """Zeros around the three spatial dimensions (an int, 3 ints or 3 pairs)."""
    _rank = 3

    def __init__(self, padding=(1, 1, 1), data_format=None, name=None, **kwargs):
        super().__init__(padding, data_format, name=name, **kwargs)


class _Cropping(_Spatial):

    def __init__(self, cropping, data_format=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._set_format(data_format)
        self._crops = _pairs(cropping, self._rank, "cropping", type(self).__name__)
        self.cropping = self._crops[0] if self._rank == 1 else self._crops

    def build(self, input_shape):
        self._check_rank(input_shape)
        self.built = True

    def call(self, inputs):
        shape = list(inputs.shape)
        spec = [slice(None)] * len(shape)
        for ax, (a, b) in zip(self._spatial_axes(), self._crops):
            if a + b >= shape[ax]:
                raise InvalidArgumentError(
                    f"{self.name}: cropping {self.cropping} leaves nothing of inputs of shape "
                    f"{shape} ({self._op_fmt}): dimension {ax} has {shape[ax]} entries")
            spec[ax] = slice(a, shape[ax] - b)
        return inputs[tuple(spec)]

    def get_config(self):
        cfg = {**super().get_config(), "cropping": self.cropping}
        if self._rank > 1:
            cfg["data_format"] = self.data_format
        return cfg


class Cropping1D(_Cropping):
    """Drop ``cropping = (before, after)`` steps of ``[N, steps, C]``.

    >>> import tapeflow as tf
    >>> tf.keras.layers.Cropping1D((1, 2))(tf.zeros([2, 6, 3])).shape
    TensorShape([2, 3, 3])
    """
    _rank = 1

    def __init__(self, cropping=(1, 1), name=None, **kwargs):
        super().__init__(cropping, None, name=name, **kwargs)


class Cropping2D(_Cropping):
    """Drop rows and columns at the edges: ``cropping`` an int, ``(rows, cols)`` or
    ``((top, bottom), (left, right))``."""
    _rank = 2

    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, name=None, **kwargs):
        super().__init__(cropping, data_format, name=name, **kwargs)


class Cropping3D(_Cropping):
    """Drop entries at the edges of the three spatial dimensions."""
    _rank = 3

    def __init__(self, cropping=((1, 1), (1, 1), (1, 1)), data_format=None, name=None,
                 **kwargs):
        super().__init__(cropping, data_format, name=name, **kwargs)


def _repeat(x, axis, s):
    """Each entry of ``x`` along ``axis`` repeated ``s`` times (nearest upsampling)."""
    if s == 1:
        return x
    shp = list(x.shape)
    y = _a.stack([x] * s, axis=axis + 1)
    return _a.reshape(y, shp[:axis] + [shp[axis] * s] + shp[axis + 1:])


def _linear(x, axis, s):
    """Linear upsampling by ``s`` along ``axis`` with half-pixel centres (TF 2's
    ``tf.image.resize(method='bilinear')``): output ``i * s + r`` samples the input at
    ``i + (2r + 1 - s) / (2s)``, edges clamped."""
    if s == 1:
        return x
    shp = list(x.shape)
    n = shp[axis]

    def part(a, b):
        spec = [slice(None)] * len(shp)
        spec[axis] = slice(a, b)
        return x[tuple(spec)]

    prev = _a.concat([part(0, 1), part(0, n - 1)], axis) if n > 1 else x
    nxt = _a.concat([part(1, n), part(n - 1, n)], axis) if n > 1 else x
    phases = []
    for r in range(s):
        f = (2 * r + 1 - s) / (2 * s)
        phases.append(x * (1.0 - f) + nxt * f if f >= 0 else prev * (-f) + x * (1.0 + f))
    y = _a.stack(phases, axis=axis + 1)
    return _a.reshape(y, shp[:axis] + [n * s] + shp[axis + 1:])


_OR_BILINEAR = {True: " or 'bilinear'", False: ""}


class _UpSampling(_Spatial):

    def __init__(self, size, data_format=None, interpolation="nearest", name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        cls = type(self).__name__
        self._set_format(data_format)
        self.size = _tuple(size, self._rank, "size", cls)
        if interpolation not in ("nearest", "bilinear") or (
                interpolation == "bilinear" and self._rank != 2):
            raise InvalidArgumentError(
                f"{cls}: interpolation must be 'nearest'{_OR_BILINEAR[self._rank == 2]}, "
                f"got {interpolation!r}")
        self.interpolation = interpolation

    def build(self, input_shape):
        self._check_rank(input_shape)
        self.built = True

    def call(self, inputs):
        fn = _linear if self.interpolation == "bilinear" else _repeat
        y = inputs
        for ax, s in zip(self._spatial_axes(), self.size):
            y = fn(y, ax, s)
        return y

    def get_config(self):
        cfg = {**super().get_config(), "size": self.size}
        if self._rank > 1:
            cfg["data_format"] = self.data_format
        if self._rank == 2:
            cfg["interpolation"] = self.interpolation
        return cfg


class UpSampling1D(_UpSampling):
    """Repeat each step ``size`` times: ``[N, steps, C] -> [N, steps * size, C]``.

    >>> import tapeflow as tf
    >>> x = tf.reshape(tf.constant([1., 2.]), [1, 2, 1])
    >>> tf.keras.layers.UpSampling1D(2)(x)[0, :, 0].numpy().tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    _rank = 1

    def __init__(self, size=2, name=None, **kwargs):
        super().__init__(size, None, "nearest", name=name, **kwargs)


class UpSampling2D(_UpSampling):
    """Upsample rows and columns by ``size``: ``interpolation='nearest'`` repeats,
    ``'bilinear'`` interpolates with half-pixel centres (TF 2's image resize).

    >>> import tapeflow as tf
    >>> x = tf.reshape(tf.constant([0., 4.]), [1, 1, 2, 1])
    >>> y = tf.keras.layers.UpSampling2D((1, 2), interpolation='bilinear')(x)
    >>> y[0, 0, :, 0].numpy().tolist()
    [0.0, 1.0, 3.0, 4.0]
    """
    _rank = 2

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", name=None,
                 **kwargs):
        super().__init__(size, data_format, interpolation, name=name, **kwargs)


class UpSampling3D(_UpSampling):
    """Repeat each entry of the three spatial dimensions ``size`` times."""
    _rank = 3

    def __init__(self, size=(2, 2, 2), data_format=None, name=None, **kwargs):
        super().__init__(size, data_format, "nearest", name=name, **kwargs)
