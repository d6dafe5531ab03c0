"""The core layers: Dense, Flatten (and ``flatten``), Dropout, Activation, Embedding and
BatchNormalization.

>>> import tapeflow as tf
>>> tf.keras.backend.clear_session()    # automatic names start again
>>> layer = tf.layers.Dense(units=10)
>>> layer(tf.zeros([1, 1, 784])).shape        # applied to the last axis
TensorShape([1, 1, 10])
>>> [v.name for v in layer.variables]
['dense/kernel:0', 'dense/bias:0']

BatchNormalization (``tf.layers.BatchNormalization``, ``tf.keras.layers.BatchNormalization``):
in training (``training=True``) the layer normalises with the batch's mean and
variance and moves its non-trainable ``moving_mean`` / ``moving_variance`` towards
them (``moving = moving * momentum + batch * (1 - momentum)``, assigned outside any
tape); in inference it uses the moving statistics. ``gamma``/``beta`` are trainable.

>>> tf.keras.backend.clear_session()    # automatic names start again
>>> bn = tf.keras.layers.BatchNormalization()
>>> y = bn(tf.constant([[1., 2.], [3., 6.]]), training=True)
>>> [round(float(v), 3) for v in tf.reshape(y, [-1])]
[-1.0, -1.0, 1.0, 1.0]
>>> [v.name for v in bn.trainable_variables]
['batch_normalization/gamma:0', 'batch_normalization/beta:0']
>>> [v.name for v in bn.non_trainable_variables]
['batch_normalization/moving_mean:0', 'batch_normalization/moving_variance:0']
"""

from __future__ import annotations

from ..errors import FailedPreconditionError, InvalidArgumentError
from .. import ops as _a
from ..ops import math as _m
from ..ops import nn as _nn
from ..ops.linalg import matmul as _matmul
from . import activations as _act
from .base import Layer
from ..runtime import dispatch as _dispatch_mod
from ..runtime import tensor as _tensor_mod
from ..runtime.context import stop_all_recording as stop_recording

__all__ = ["Dense", "Flatten", "flatten", "Dropout", "dropout", "Activation", "Embedding",
           "dense", "BatchNormalization", "batch_normalization"]


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


# --- normalization --------------------------------------------------------------------------

class BatchNormalization(Layer):
    """Normalise over every axis except ``axis`` (default -1: the channels of NHWC;
    use ``axis=1`` for NCHW)."""

    _leaf = True

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones",
                 moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, renorm=False, renorm_clipping=None, renorm_momentum=0.99,
                 fused=None, trainable=True, virtual_batch_size=None, adjustment=None, name=None,
                 **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        _check_constraints(beta_constraint, gamma_constraint)
        if renorm or virtual_batch_size is not None or adjustment is not None:
            raise NotImplementedError("BatchNormalization: renorm, virtual_batch_size and "
                                      "adjustment are not supported")
        self.axis = list(axis) if isinstance(axis, (list, tuple)) else int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = beta_initializer
        self.gamma_initializer = gamma_initializer
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer
        self.beta_regularizer = beta_regularizer
        self.gamma_regularizer = gamma_regularizer
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None

    def build(self, input_shape):
        if input_shape is None:
            raise InvalidArgumentError(f"{self.name}: BatchNormalization needs a tensor input")
        nd = len(input_shape)
        axes = self.axis if isinstance(self.axis, list) else [self.axis]
        axes = sorted(a % nd if -nd <= a < nd else _bad_axis(a, nd) for a in axes)
        param_shape = [int(input_shape[a]) for a in axes]
        if len(axes) == 1:
            param_shape = param_shape[:1]
        self._reduction_axes = [i for i in range(nd) if i not in axes]
        self._ndim = nd
        # parameters broadcast as they are when the normalised axes are the last ones
        if axes == list(range(nd - len(axes), nd)):
            self._bshape = None
        else:
            self._bshape = [int(input_shape[i]) if i in axes else 1 for i in range(nd)]
        self._param_shape = param_shape
        if self.scale:
            self.gamma = self.add_weight("gamma", param_shape, initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer)
        if self.center:
            self.beta = self.add_weight("beta", param_shape, initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer)
        self.moving_mean = self.add_weight("moving_mean", param_shape,
                                           initializer=self.moving_mean_initializer,
                                           trainable=False)
        self.moving_variance = self.add_weight("moving_variance", param_shape,
                                               initializer=self.moving_variance_initializer,
                                               trainable=False)
        self.built = True

    def call(self, inputs, training=None):
        bshape = self._bshape
        if training and self.trainable:
            mean, var = _nn.moments(inputs, self._reduction_axes)
            mm, mv = self.moving_mean, self.moving_variance
            with stop_recording():
                m = self.momentum
                bm, bv = mean, var
                if bm.dtype != mm.dtype:
                    bm, bv = _m.cast(bm, mm.dtype), _m.cast(bv, mm.dtype)
                ps = self._param_shape
                if list(bm.shape) != ps:
                    bm, bv = _a.reshape(bm, ps), _a.reshape(bv, ps)
                mm.assign(mm.read_value() * m + bm * (1.0 - m))
                mv.assign(mv.read_value() * m + bv * (1.0 - m))
            if bshape is not None:
                mean, var = _a.reshape(mean, bshape), _a.reshape(var, bshape)
        else:
            mean = self._read(self.moving_mean)
            var = self._read(self.moving_variance)
            if bshape is not None:
                mean, var = _a.reshape(mean, bshape), _a.reshape(var, bshape)
        gamma = None if self.gamma is None else self._read(self.gamma)
        beta = None if self.beta is None else self._read(self.beta)
        if bshape is not None:
            gamma = None if gamma is None else _a.reshape(gamma, bshape)
            beta = None if beta is None else _a.reshape(beta, bshape)
        return _nn.batch_normalization(inputs, mean, var, beta, gamma, self.epsilon)


def _bad_axis(a, nd):
    raise InvalidArgumentError(
        f"BatchNormalization: axis {a} is out of range for inputs of rank {nd}")


def batch_normalization(*args, **kwargs):
    """Not available with eager execution (as in TensorFlow): use the class."""
    raise FailedPreconditionError(
        "tf.layers.batch_normalization (the functional form) creates variables "
                       "it cannot keep with eager execution; use the "
                       "tf.layers.BatchNormalization class.")
