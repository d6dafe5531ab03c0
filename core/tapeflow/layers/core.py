"""The core layers: Dense, Flatten (and ``flatten``), Dropout, Activation, Embedding and
BatchNormalization; LayerNormalization, GroupNormalization, UnitNormalization; Reshape,
Permute, RepeatVector; the merging layers (Add, Subtract, Multiply, Average, Maximum,
Minimum, Concatenate, Dot and their functional forms); the activation layers (ReLU,
LeakyReLU, PReLU, ELU, ThresholdedReLU, Softmax, Identity); Lambda; SpatialDropout1D/2D/3D,
GaussianNoise, GaussianDropout, ActivityRegularization. The layers of the second group
have ``get_config``/``from_config`` (:class:`ConfigMixin`).

Long file: Keras's catalogue of small layers, each a short class with its config; the
sections (normalisation, reshaping, merging, activations, noise) are independent and can
become modules of a layers/ subpackage.

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

import inspect

import numpy as np

from ..errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError
from .. import ops as _a
from ..ops import random as _rnd
from ..ops import math as _m
from ..ops import nn as _nn
from ..ops import reductions as _red
from ..ops.linalg import matmul as _matmul
from ..ops import sparse as _sparse
from ..ops.sparse import SparseTensor
from ..ops.ragged import RaggedTensor
from . import activations as _act
from .base import Layer
from ..runtime import dispatch as _dispatch_mod
from ..runtime import tensor as _tensor_mod
from ..runtime.context import stop_all_recording as stop_recording

__all__ = ["Dense", "Flatten", "flatten", "Dropout", "dropout", "Activation", "Embedding",
           "Masking", "dense", "BatchNormalization", "batch_normalization", "ConfigMixin",
           "LayerNormalization", "GroupNormalization", "UnitNormalization", "Reshape",
           "Permute", "RepeatVector", "Add", "Subtract", "Multiply", "Average", "Maximum",
           "Minimum", "Concatenate", "Dot", "add", "subtract", "multiply", "average", "maximum",
           "minimum", "concatenate", "dot", "ReLU", "LeakyReLU", "PReLU", "ELU",
           "ThresholdedReLU", "Softmax", "Identity", "SpatialDropout1D", "SpatialDropout2D",
           "SpatialDropout3D", "GaussianNoise", "GaussianDropout", "ActivityRegularization",
           "check_constraints", "large_negative", "Lambda", "LambdaFunction"]


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

    supports_masking = True        # (Keras: the mask passes through)

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
        if isinstance(inputs, SparseTensor):    # (Keras: a sparse-dense product)
            return self._dense_sparse(inputs)
        shape = inputs.shape
        if len(shape) > 2:          # one [rows, features] GEMM (and one for each gradient),
            # not a GEMM per leading index with the kernel's gradient summed after them
            x2 = _a.reshape(inputs, [-1, shape[-1]])
            return _a.reshape(self._dense2(x2), list(shape[:-1]) + [self.units])
        return self._dense2(inputs)

    def _dense_sparse(self, x):
        if len(x.shape) != 2:
            raise InvalidArgumentError(f"Dense {self.name!r}: a SparseTensor input must be "
                                       f"2-D [batch, features], got shape {x.shape}")
        kernel = self._read(self.kernel)
        if x.dtype != kernel.dtype:
            x = _m.cast(x, kernel.dtype)
        y = _sparse.sparse_dense_matmul(x, kernel)
        b = self.bias
        if b is not None:
            y = y + self._read(b)
        act = self.activation
        return y if act is None else act(y)

    def _dense2(self, x):
        y = _matmul(x, self._read(self.kernel))
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

    supports_masking = True        # (Keras: the mask passes through)

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

    supports_masking = True        # (Keras: the mask passes through)

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
        self.mask_zero = bool(mask_zero)
        if self.mask_zero:          # its calls attach the mask ``ids != 0`` to the output
            self._makes_mask = True
        self.input_dim = int(input_dim)
        self.output_dim = int(output_dim)
        self.embeddings_initializer = embeddings_initializer
        self.embeddings_regularizer = embeddings_regularizer
        self.embeddings = None

    def _convert_input(self, x):
        if isinstance(x, RaggedTensor):         # ragged ids: a ragged result (issue 47)
            return x
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

    def compute_mask(self, inputs, mask=None):
        """With ``mask_zero=True``: ``inputs != 0`` (id 0 is padding), else None."""
        if not self.mask_zero or isinstance(inputs, RaggedTensor):   # (rows need none)
            return None
        return _m.not_equal(_dispatch_mod.convert_to_tensor(inputs), 0)


class Masking(Layer):
    """Mark the time steps where every feature equals ``mask_value`` as padding: the
    output is the input with those steps zeroed, and carries the mask ``[batch, time]``
    (True: a real step) that the next layer (an LSTM, say) receives.

    >>> import tapeflow as tf
    >>> from tapeflow.layers.base import get_mask
    >>> y = tf.keras.layers.Masking(0.0)(tf.constant([[[1.0], [0.0], [2.0]]]))
    >>> get_mask(y).numpy().tolist()
    [[True, False, True]]
    """

    _leaf = True
    _makes_mask = True
    supports_masking = True

    def __init__(self, mask_value=0.0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.mask_value = float(mask_value)

    def _step_mask(self, inputs):
        return _red.reduce_any(_m.not_equal(inputs, self.mask_value), axis=-1)

    def call(self, inputs):
        keep = _a.expand_dims(self._step_mask(inputs), -1)
        return inputs * _m.cast(keep, inputs.dtype)

    def compute_mask(self, inputs, mask=None):
        return self._step_mask(inputs)

    def get_config(self):
        return {**super().get_config(), "mask_value": self.mask_value}


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

    supports_masking = True        # (Keras: the mask passes through)

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
        # (tf.distribute: updated once per step with replica 0's batch statistics, on
        # every worker: TensorFlow's figures; its "none" keeps per-replica copies)
        self.moving_mean = self.add_weight("moving_mean", param_shape,
                                           initializer=self.moving_mean_initializer,
                                           trainable=False, aggregation="only_first_replica")
        self.moving_variance = self.add_weight("moving_variance", param_shape,
                                               initializer=self.moving_variance_initializer,
                                               trainable=False, aggregation="only_first_replica")
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


# --- configuration (get_config / from_config) -----------------------------------------------

def check_constraints(*cs):
    """NotImplementedError for weight constraints (not supported)."""
    _check_constraints(*cs)


def large_negative(dtype):
    """The value masked attention scores take: -1e9, or float16's lowest finite value
    where -1e9 does not fit."""
    return -65504.0 if getattr(dtype, "name", str(dtype)) == "float16" else -1e9


class ConfigMixin:
    """``get_config()`` (the constructor's arguments, Keras's names: ``name``,
    ``trainable``, ``dtype`` and the class's ``_config_keys``) and the class method
    ``from_config(config)`` (a new layer with that configuration, weights not copied)."""

    _config_keys: tuple = ()

    def get_config(self):
        cfg = {"name": self.name, "trainable": self.trainable,
               "dtype": self.dtype_policy.name}
        for k in self._config_keys:
            cfg[k] = getattr(self, k)
        cfg.update(self._config_extra())
        return cfg

    def _config_extra(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _positive_int(v, what, layer):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise InvalidArgumentError(f"{layer}: {what} must be a positive integer, got {v!r}")
    return int(v)


def _rate(v, layer, what="rate"):
    r = float(v)
    if not 0.0 <= r < 1.0:
        raise InvalidArgumentError(f"{layer}: {what} must be in [0, 1), got {v!r}")
    return r


def _axes_of(axis, nd, layer, shape):
    ax = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = []
    for a in ax:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -nd <= a < nd:
            raise InvalidArgumentError(
                f"{layer}: axis {axis!r} is out of range for inputs of shape {_fmt(shape)} "
                f"(rank {nd}); pass axes in [-{nd}, {nd})")
        out.append(int(a) % nd)
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"{layer}: axis {axis!r} names an axis twice (inputs of "
                                   f"shape {_fmt(shape)}); list each axis once")
    return tuple(sorted(out))


# --- LayerNormalization, GroupNormalization, UnitNormalization ------------------------------

class LayerNormalization(ConfigMixin, Layer):
    """Normalise each example over ``axis`` (default -1, the features; an int or a list)
    to mean 0 and variance 1 (``epsilon`` added to the variance), then scale by the
    trainable ``gamma`` (``scale=True``, initially ones) and shift by ``beta``
    (``center=True``, zeros), both of the input's shape on ``axis``. One fused op
    (:func:`tapeflow.nn.layer_norm`) forwards and one backwards.

    >>> import tapeflow as tf
    >>> tf.keras.backend.clear_session()    # automatic names start again
    >>> ln = tf.keras.layers.LayerNormalization(epsilon=0.0)
    >>> y = ln(tf.constant([[1., 2., 3.]]))
    >>> [round(float(v), 3) for v in y[0]], [v.name for v in ln.variables]
    ([-1.225, 0.0, 1.225], ['layer_normalization/gamma:0', 'layer_normalization/beta:0'])
    """

    supports_masking = True

    _leaf = True
    _config_keys = ("axis", "epsilon", "center", "scale", "beta_initializer",
                    "gamma_initializer", "beta_regularizer", "gamma_regularizer")

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", beta_regularizer=None, gamma_regularizer=None,
                 beta_constraint=None, gamma_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        _check_constraints(beta_constraint, gamma_constraint)
        self.axis = list(axis) if isinstance(axis, (list, tuple)) else axis
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = beta_initializer
        self.gamma_initializer = gamma_initializer
        self.beta_regularizer = beta_regularizer
        self.gamma_regularizer = gamma_regularizer
        self.gamma = self.beta = None

    def build(self, input_shape):
        if input_shape is None:
            raise InvalidArgumentError(f"{self.name}: LayerNormalization needs a tensor input")
        nd = len(input_shape)
        axes = _axes_of(self.axis, nd, self.name, input_shape)
        pshape = [input_shape[a] for a in axes]
        if any(d is None for d in pshape):
            raise InvalidArgumentError(
                f"{self.name}: the input's dimensions on axis {self.axis} must be known, "
                f"got shape {_fmt(input_shape)}")
        self._axes = axes
        self._ndim = nd
        self._pshape = [int(d) for d in pshape]
        if self.scale:
            self.gamma = self.add_weight("gamma", self._pshape,
                                         initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer)
        if self.center:
            self.beta = self.add_weight("beta", self._pshape, initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer)
        self.built = True

    def call(self, inputs):
        if len(inputs.shape) != self._ndim or [inputs.shape[a] for a in self._axes] != \
                self._pshape:
            raise InvalidArgumentError(
                f"{self.name}: the layer was built for inputs of rank {self._ndim} with "
                f"{self._pshape} on axes {list(self._axes)}, got shape {_fmt(inputs.shape)}")
        gamma = None if self.gamma is None else self._read(self.gamma)
        beta = None if self.beta is None else self._read(self.beta)
        if inputs.dtype.name == "float16" or (gamma is not None and gamma.dtype != inputs.dtype):
            x = _m.cast(inputs, "float32")
            gamma = None if gamma is None else _m.cast(gamma, "float32")
            beta = None if beta is None else _m.cast(beta, "float32")
            y = _nn.layer_norm(x, gamma, beta, axis=list(self._axes), epsilon=self.epsilon)
            return _m.cast(y, inputs.dtype)
        return _nn.layer_norm(inputs, gamma, beta, axis=list(self._axes), epsilon=self.epsilon)


class GroupNormalization(ConfigMixin, Layer):
    """Split the channels (``axis``, default -1) into ``groups`` groups and normalise
    each example's group over its channels and every other non-batch axis, then scale
    and shift per channel (``gamma``, ``beta`` of ``[channels]``). ``groups`` must
    divide the channels; ``groups=-1`` is one group per channel (instance norm).

    >>> import tapeflow as tf
    >>> gn = tf.keras.layers.GroupNormalization(groups=2, epsilon=0.0)
    >>> y = gn(tf.constant([[1., 3., 10., 20.]]))
    >>> [round(float(v), 3) for v in y[0]]
    [-1.0, 1.0, -1.0, 1.0]
    """

    supports_masking = True

    _leaf = True
    _config_keys = ("groups", "axis", "epsilon", "center", "scale", "beta_initializer",
                    "gamma_initializer", "beta_regularizer", "gamma_regularizer")

    def __init__(self, groups=32, axis=-1, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", beta_regularizer=None,
                 gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        _check_constraints(beta_constraint, gamma_constraint)
        if groups != -1:
            _positive_int(groups, "groups", "GroupNormalization")
        self.groups = int(groups)
        self.axis = int(axis)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = beta_initializer
        self.gamma_initializer = gamma_initializer
        self.beta_regularizer = beta_regularizer
        self.gamma_regularizer = gamma_regularizer
        self.gamma = self.beta = None

    def build(self, input_shape):
        nd = 0 if input_shape is None else len(input_shape)
        if nd < 2:
            raise InvalidArgumentError(f"{self.name}: GroupNormalization needs inputs of rank "
                                       f">= 2 ([batch, ..., channels]), got {_fmt(input_shape)}")
        (ax,) = _axes_of(self.axis, nd, self.name, input_shape)
        if ax == 0:
            raise InvalidArgumentError(f"{self.name}: axis must not be the batch axis")
        c = input_shape[ax]
        g = c if self.groups == -1 else self.groups
        if c is None or c % g:
            raise InvalidArgumentError(
                f"{self.name}: groups ({g}) must divide the number of channels ({c}, axis "
                f"{self.axis} of shape {_fmt(input_shape)}); choose a divisor of {c}")
        self._ax, self._g, self._c, self._nd = ax, g, int(c), nd
        if self.scale:
            self.gamma = self.add_weight("gamma", [int(c)], initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer)
        if self.center:
            self.beta = self.add_weight("beta", [int(c)], initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer)
        self.built = True

    def call(self, inputs):
        ax, g, c, nd = self._ax, self._g, self._c, self._nd
        if len(inputs.shape) != nd or inputs.shape[ax] != c:
            raise InvalidArgumentError(
                f"{self.name}: built for rank {nd} with {c} channels on axis {ax}, got shape "
                f"{_fmt(inputs.shape)}")
        shape = list(inputs.shape)
        x = inputs
        if x.dtype.name == "float16":
            x = _m.cast(x, "float32")
        grouped = shape[:ax] + [g, c // g] + shape[ax + 1:]
        xg = _a.reshape(x, grouped)
        axes = [i for i in range(1, nd + 1) if i != ax]
        y = _a.reshape(_nn.layer_norm(xg, axis=axes, epsilon=self.epsilon), shape)
        bshape = [c if i == ax else 1 for i in range(nd)]
        if self.gamma is not None:
            y = y * _a.reshape(_m.cast(self._read(self.gamma), y.dtype), bshape)
        if self.beta is not None:
            y = y + _a.reshape(_m.cast(self._read(self.beta), y.dtype), bshape)
        return _m.cast(y, inputs.dtype) if y.dtype != inputs.dtype else y


class UnitNormalization(ConfigMixin, Layer):
    """Scale each example to unit L2 norm over ``axis`` (default -1):
    ``x / sqrt(max(sum(x^2), 1e-12))``.

    >>> import tapeflow as tf
    >>> y = tf.keras.layers.UnitNormalization()(tf.constant([[3., 4.]]))
    >>> [round(float(v), 4) for v in y[0]]
    [0.6, 0.8]
    """

    supports_masking = True

    _leaf = True
    _config_keys = ("axis",)

    def __init__(self, axis=-1, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.axis = list(axis) if isinstance(axis, (list, tuple)) else int(axis)

    def call(self, inputs):
        axes = list(_axes_of(self.axis, len(inputs.shape), self.name, inputs.shape))
        ss = _red.reduce_sum(_m.multiply(inputs, inputs), axis=axes, keepdims=True)
        return _m.multiply(inputs, _m.rsqrt(_m.maximum(ss, 1e-12)))


# --- reshaping: Reshape, Permute, RepeatVector -----------------------------------------------

class Reshape(ConfigMixin, Layer):
    """Reshape each example to ``target_shape`` (the batch axis is kept; one entry may
    be -1).

    >>> import tapeflow as tf
    >>> tf.keras.layers.Reshape((3, -1))(tf.zeros([2, 12])).shape
    TensorShape([2, 3, 4])
    """

    _leaf = True
    _config_keys = ("target_shape",)

    def __init__(self, target_shape, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        ts = tuple(int(d) for d in target_shape)
        if sum(d == -1 for d in ts) > 1 or any(d < -1 for d in ts):
            raise InvalidArgumentError(f"Reshape: target_shape may hold one -1 and otherwise "
                                       f"non-negative sizes, got {list(target_shape)}")
        self.target_shape = ts

    def call(self, inputs):
        shape = list(inputs.shape)
        n = int(np.prod(shape[1:])) if shape else 0
        known = int(np.prod([d for d in self.target_shape if d != -1]))
        if (-1 in self.target_shape and (known == 0 or n % known)) or (
                -1 not in self.target_shape and known != n):
            raise InvalidArgumentError(
                f"{self.name}: cannot reshape examples of shape {shape[1:]} ({n} elements) to "
                f"target_shape {list(self.target_shape)}")
        return _a.reshape(inputs, [shape[0]] + list(self.target_shape))


class Permute(ConfigMixin, Layer):
    """Permute the axes of each example: ``dims`` is a permutation of ``1..rank-1``
    (the batch axis, 0, stays first).

    >>> import tapeflow as tf
    >>> tf.keras.layers.Permute((2, 1))(tf.zeros([4, 2, 3])).shape
    TensorShape([4, 3, 2])
    """

    _leaf = True
    _config_keys = ("dims",)

    def __init__(self, dims, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        dims = tuple(int(d) for d in dims)
        if sorted(dims) != list(range(1, len(dims) + 1)):
            raise InvalidArgumentError(f"Permute: dims must be a permutation of 1..{len(dims)} "
                                       f"(the batch axis is not included), got {list(dims)}")
        self.dims = dims

    def call(self, inputs):
        if len(inputs.shape) != len(self.dims) + 1:
            raise InvalidArgumentError(
                f"{self.name}: dims {list(self.dims)} need inputs of rank {len(self.dims) + 1},"
                f" got shape {_fmt(inputs.shape)}")
        return _a.transpose(inputs, [0] + list(self.dims))


class RepeatVector(ConfigMixin, Layer):
    """``[batch, features]`` -> ``[batch, n, features]``: each example repeated ``n``
    times.

    >>> import tapeflow as tf
    >>> tf.keras.layers.RepeatVector(3)(tf.zeros([2, 5])).shape
    TensorShape([2, 3, 5])
    """

    _leaf = True
    _config_keys = ("n",)

    def __init__(self, n, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.n = _positive_int(n, "n", "RepeatVector")

    def call(self, inputs):
        if len(inputs.shape) != 2:
            raise InvalidArgumentError(f"{self.name}: RepeatVector needs inputs of rank 2 "
                                       f"([batch, features]), got {_fmt(inputs.shape)}")
        return _a.tile(_a.expand_dims(inputs, 1), [1, self.n, 1])


# --- merging: Concatenate, Add, Subtract, Multiply, Average, Maximum, Minimum, Dot ------------

class _Merge(ConfigMixin, Layer):
    """A layer of a list of tensors of one shape (broadcasting as the op does)."""

    _leaf = True
    _min_inputs = 2

    def _convert_input(self, x):
        """A list's items one by one (NumPy arrays of one shape are not stacked)."""
        if isinstance(x, (list, tuple)):
            return [self._autocast(e) if isinstance(e, _tensor_mod.Tensor)
                    else Layer._convert_input(self, e) for e in x]
        return Layer._convert_input(self, x)

    def _inputs(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) < self._min_inputs:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} takes a list of at least "
                f"{self._min_inputs} tensors, got {type(inputs).__name__}"
                + (f" of {len(inputs)}" if isinstance(inputs, (list, tuple)) else ""))
        xs = [x if isinstance(x, _tensor_mod.Tensor) else _dispatch_mod.convert_to_tensor(x)
              for x in inputs]
        return xs

    def build(self, input_shape):
        self.built = True

    def call(self, inputs):
        xs = self._inputs(inputs)
        try:
            out = xs[0]
            for x in xs[1:]:
                out = self._merge(out, x)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"{self.name}: cannot merge inputs of shapes {[_fmt(x.shape) for x in xs]} "
                f"({e})") from None
        return self._finish(out, len(xs))

    def _finish(self, out, n):
        return out

    def compute_mask(self, inputs, mask=None):
        """Keras's implicit masks: a position is kept where every input's mask keeps it."""
        if mask is None:
            return None
        masks = [m for m in (mask if isinstance(mask, (list, tuple)) else [mask])
                 if m is not None]
        out = masks[0] if masks else None
        for m in masks[1:]:
            out = _m.logical_and(out, m)
        return out


class Add(_Merge):
    """The sum of a list of tensors.

    >>> import tapeflow as tf
    >>> print(tf.keras.layers.Add()([tf.ones([2]), tf.ones([2]), tf.ones([2])]))
    tf.Tensor([3. 3.], shape=(2,), dtype=float32)
    """

    def _merge(self, a, b):
        return _m.add(a, b)


class Subtract(_Merge):
    """``inputs[0] - inputs[1]`` (exactly two tensors)."""

    def _inputs(self, inputs):
        xs = super()._inputs(inputs)
        if len(xs) != 2:
            raise InvalidArgumentError(f"{self.name}: Subtract takes exactly 2 tensors, got "
                                       f"{len(xs)}")
        return xs

    def _merge(self, a, b):
        return _m.subtract(a, b)


class Multiply(_Merge):
    """The elementwise product of a list of tensors."""

    def _merge(self, a, b):
        return _m.multiply(a, b)


class Average(_Merge):
    """The elementwise mean of a list of tensors."""

    def _merge(self, a, b):
        return _m.add(a, b)

    def _finish(self, out, n):
        return _m.multiply(out, 1.0 / n)


class Maximum(_Merge):
    """The elementwise maximum of a list of tensors."""

    def _merge(self, a, b):
        return _m.maximum(a, b)


class Minimum(_Merge):
    """The elementwise minimum of a list of tensors."""

    def _merge(self, a, b):
        return _m.minimum(a, b)


class Concatenate(_Merge):
    """Concatenate a list of tensors along ``axis`` (default -1).

    >>> import tapeflow as tf
    >>> tf.keras.layers.Concatenate(axis=1)([tf.zeros([2, 3]), tf.zeros([2, 4])]).shape
    TensorShape([2, 7])
    """

    _config_keys = ("axis",)
    _min_inputs = 1

    def __init__(self, axis=-1, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.axis = int(axis)

    def call(self, inputs):
        xs = self._inputs(inputs)
        shapes = [list(x.shape) for x in xs]
        nd = len(shapes[0])
        ok = all(len(s) == nd for s in shapes) and -nd <= self.axis < nd
        if ok:
            ax = self.axis % nd
            ok = all(s[:ax] + s[ax + 1:] == shapes[0][:ax] + shapes[0][ax + 1:] for s in shapes)
        if not ok:
            raise InvalidArgumentError(
                f"{self.name}: Concatenate(axis={self.axis}) needs inputs of one rank whose "
                f"shapes match except on the axis, got {shapes}")
        return _a.concat(xs, axis=self.axis)


class Dot(_Merge):
    """The dot product of two batches of tensors along ``axes`` (an int or a pair; the
    batch axis 0 is excluded), with ``normalize=True`` the cosine similarity.

    >>> import tapeflow as tf
    >>> print(tf.keras.layers.Dot(axes=1)([tf.constant([[1., 2.]]), tf.constant([[3., 4.]])]))
    tf.Tensor([[11.]], shape=(1, 1), dtype=float32)
    """

    _config_keys = ("axes", "normalize")

    def __init__(self, axes, normalize=False, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.axes = axes if isinstance(axes, (int, np.integer)) else tuple(int(a) for a in axes)
        self.normalize = bool(normalize)

    def call(self, inputs):
        xs = self._inputs(inputs)
        if len(xs) != 2:
            raise InvalidArgumentError(f"{self.name}: Dot takes exactly 2 tensors, got "
                                       f"{len(xs)}")
        a, b = xs
        axes = (self.axes, self.axes) if isinstance(self.axes, (int, np.integer)) else self.axes
        na, nb = len(a.shape), len(b.shape)
        ok = na >= 2 and nb >= 2 and len(axes) == 2 and a.shape[0] == b.shape[0]
        if ok:
            ia, ib = axes[0] % na, axes[1] % nb
            ok = ia != 0 and ib != 0 and a.shape[ia] == b.shape[ib]
        if not ok:
            raise InvalidArgumentError(
                f"{self.name}: Dot(axes={self.axes}) needs two batches of one batch size "
                f"whose sizes on the axes match, got shapes {_fmt(a.shape)} and "
                f"{_fmt(b.shape)}")
        if self.normalize:
            a = _l2_normalize(a, ia)
            b = _l2_normalize(b, ib)
        # move the contracted axis of a last and of b to 1: a batched matmul
        a2 = _a.transpose(a, [i for i in range(na) if i != ia] + [ia])
        b2 = _a.transpose(b, [0, ib] + [i for i in range(1, nb) if i != ib])
        sa, sb = list(a2.shape), list(b2.shape)
        a3 = _a.reshape(a2, [sa[0], -1, sa[-1]])
        b3 = _a.reshape(b2, [sb[0], sb[1], -1])
        out = _matmul(a3, b3)
        shape = [sa[0]] + sa[1:-1] + sb[2:]
        if len(shape) == 1:
            shape = shape + [1]
        return _a.reshape(out, shape)


def _l2_normalize(x, axis):
    ss = _red.reduce_sum(_m.multiply(x, x), axis=axis, keepdims=True)
    return _m.multiply(x, _m.rsqrt(_m.maximum(ss, 1e-12)))


def add(inputs, **kwargs):
    """Functional :class:`Add`: ``add([a, b, ...])``."""
    return Add(**kwargs)(inputs)


def subtract(inputs, **kwargs):
    """Functional :class:`Subtract`: ``subtract([a, b])``."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """Functional :class:`Multiply`."""
    return Multiply(**kwargs)(inputs)


def average(inputs, **kwargs):
    """Functional :class:`Average`."""
    return Average(**kwargs)(inputs)


def maximum(inputs, **kwargs):
    """Functional :class:`Maximum`."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs, **kwargs):
    """Functional :class:`Minimum`."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """Functional :class:`Concatenate`: ``concatenate([a, b], axis=-1)``."""
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs, axes, normalize=False, **kwargs):
    """Functional :class:`Dot`: ``dot([a, b], axes)``."""
    return Dot(axes=axes, normalize=normalize, **kwargs)(inputs)


# --- activation layers ------------------------------------------------------------------------

class ReLU(ConfigMixin, Layer):
    """``max_value`` (None: no cap) where ``x >= max_value``, ``x`` where ``threshold <= x``,
    ``negative_slope * (x - threshold)`` below.

    >>> import tapeflow as tf
    >>> print(tf.keras.layers.ReLU(max_value=2.0)(tf.constant([-1., 1., 3.])))
    tf.Tensor([0. 1. 2.], shape=(3,), dtype=float32)
    """

    supports_masking = True

    _leaf = True
    _config_keys = ("max_value", "negative_slope", "threshold")

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if max_value is not None and float(max_value) < 0:
            raise InvalidArgumentError(f"ReLU: max_value must be >= 0 or None, got {max_value}")
        if float(negative_slope) < 0:
            raise InvalidArgumentError(f"ReLU: negative_slope must be >= 0, got "
                                       f"{negative_slope}")
        self.max_value = None if max_value is None else float(max_value)
        self.negative_slope = float(negative_slope)
        self.threshold = float(threshold)

    def call(self, inputs):
        thr, slope = self.threshold, self.negative_slope
        if thr == 0.0 and slope == 0.0:
            y = _nn.relu(inputs)
        else:
            below = (_m.multiply(_m.subtract(inputs, thr), slope) if slope
                     else _a.zeros_like(inputs))          # (0, not -0, below the threshold)
            y = _a.where(_m.greater_equal(inputs, thr), inputs, below)
        if self.max_value is not None:
            y = _m.minimum(y, _m.cast(self.max_value, y.dtype))
        return y


class LeakyReLU(ConfigMixin, Layer):
    """``x`` where positive, ``negative_slope * x`` elsewhere (``alpha``: its Keras 2
    name; default 0.3)."""

    supports_masking = True

    _leaf = True
    _config_keys = ("negative_slope",)

    def __init__(self, alpha=None, negative_slope=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if alpha is not None and negative_slope is not None:
            raise InvalidArgumentError("LeakyReLU: pass alpha or negative_slope, not both")
        slope = 0.3 if alpha is None and negative_slope is None else (
            alpha if negative_slope is None else negative_slope)
        if float(slope) < 0:
            raise InvalidArgumentError(f"LeakyReLU: negative_slope must be >= 0, got {slope}")
        self.negative_slope = float(slope)

    @property
    def alpha(self):
        return self.negative_slope

    def call(self, inputs):
        return _nn.leaky_relu(inputs, alpha=self.negative_slope)


class PReLU(ConfigMixin, Layer):
    """``x`` where positive, ``alpha * x`` elsewhere, with a trainable ``alpha`` of the
    example's shape (``alpha_initializer``, zeros); ``shared_axes`` (1-based, batch
    excluded) share one alpha along those axes.

    >>> import tapeflow as tf
    >>> p = tf.keras.layers.PReLU(alpha_initializer=tf.keras.initializers.Constant(0.5))
    >>> print(p(tf.constant([[-2., 2.]])))
    tf.Tensor([[-1.  2.]], shape=(1, 2), dtype=float32)
    """

    supports_masking = True

    _leaf = True
    _config_keys = ("alpha_initializer", "alpha_regularizer", "shared_axes")

    def __init__(self, alpha_initializer="zeros", alpha_regularizer=None, alpha_constraint=None,
                 shared_axes=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        _check_constraints(alpha_constraint)
        self.alpha_initializer = alpha_initializer
        self.alpha_regularizer = alpha_regularizer
        if shared_axes is not None and not isinstance(shared_axes, (list, tuple)):
            shared_axes = [shared_axes]
        self.shared_axes = None if shared_axes is None else [int(a) for a in shared_axes]
        self.alpha = None

    def build(self, input_shape):
        if input_shape is None or len(input_shape) < 2:
            raise InvalidArgumentError(f"{self.name}: PReLU needs inputs with a batch axis, got "
                                       f"{_fmt(input_shape)}")
        shape = [None if d is None else int(d) for d in input_shape[1:]]
        for a in self.shared_axes or []:
            if not 1 <= a <= len(shape):
                raise InvalidArgumentError(
                    f"{self.name}: shared_axes {self.shared_axes} must be in 1..{len(shape)} "
                    f"for inputs of shape {_fmt(input_shape)}")
            shape[a - 1] = 1
        self.alpha = self.add_weight("alpha", shape, initializer=self.alpha_initializer,
                                     regularizer=self.alpha_regularizer)
        self.built = True

    def call(self, inputs):
        alpha = self._read(self.alpha)
        pos = _nn.relu(inputs)
        return _m.add(pos, _m.multiply(alpha, _m.subtract(inputs, pos)))


class ELU(ConfigMixin, Layer):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""

    supports_masking = True

    _leaf = True
    _config_keys = ("alpha",)

    def __init__(self, alpha=1.0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.alpha = float(alpha)

    def call(self, inputs):
        return _act.elu(inputs, alpha=self.alpha)


class ThresholdedReLU(ConfigMixin, Layer):
    """``x`` where ``x > theta``, 0 elsewhere."""

    supports_masking = True

    _leaf = True
    _config_keys = ("theta",)

    def __init__(self, theta=1.0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if float(theta) < 0:
            raise InvalidArgumentError(f"ThresholdedReLU: theta must be >= 0, got {theta}")
        self.theta = float(theta)

    def call(self, inputs):
        return _m.multiply(inputs, _m.cast(_m.greater(inputs, self.theta), inputs.dtype))


class Softmax(ConfigMixin, Layer):
    """``softmax`` over ``axis`` (default -1; a list: over those axes together);
    ``mask`` (True: keep) pushes masked entries to a large negative value first.

    >>> import tapeflow as tf
    >>> print(tf.keras.layers.Softmax()(tf.constant([[1., 1., 5.]]), mask=[[True, True, False]]))
    tf.Tensor([[0.5 0.5 0. ]], shape=(1, 3), dtype=float32)
    """

    supports_masking = True

    _leaf = True
    _config_keys = ("axis",)

    def __init__(self, axis=-1, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.axis = list(axis) if isinstance(axis, (list, tuple)) else int(axis)

    def call(self, inputs, mask=None):
        x = inputs
        if mask is not None:
            m = _dispatch_mod.convert_to_tensor(mask)
            if m.dtype.name != "bool":
                m = _m.not_equal(m, 0)
            ms, xs = list(m.shape), list(x.shape)
            if len(ms) > len(xs) or any(a not in (1, b) for a, b in zip(ms[::-1], xs[::-1])):
                raise InvalidArgumentError(
                    f"{self.name}: the mask (shape {ms}) must broadcast to the input's shape "
                    f"{xs} (True: keep the entry)")
            x = _a.where(m, x, _m.cast(large_negative(x.dtype), x.dtype))
        if isinstance(self.axis, list):
            axes = list(_axes_of(self.axis, len(x.shape), self.name, x.shape))
            return _m.exp(_m.subtract(x, _red.reduce_logsumexp(x, axis=axes, keepdims=True)))
        return _nn.softmax(x, axis=self.axis)


class Identity(ConfigMixin, Layer):
    """Returns its input."""

    supports_masking = True

    _leaf = True

    def call(self, inputs):
        return inputs


class LambdaFunction:
    """An anonymous function (a ``lambda``, a closure) as a Lambda layer's config holds it:
    called, it runs the function; its config is its name and source text, to read --
    Python code is never turned back into a function from a file, so a Lambda layer
    loaded from one needs its function again (``custom_objects``) before it runs."""

    def __init__(self, function=None, name=None, source=None):
        self.function = function
        self.name = name or getattr(function, "__qualname__", "<lambda>")
        if source is None and function is not None:
            try:
                source = inspect.getsource(function).strip()
            except (OSError, TypeError):
                source = None
        self.source = source

    def __call__(self, *args, **kwargs):
        if self.function is None:
            raise FailedPreconditionError(
                f"Lambda layer function {self.name!r} was loaded from a config, which keeps "
                f"only its source text ({self.source!r:.80}); tapeflow never runs code read "
                "from a file: pass the function again, e.g. load_model(path, "
                "custom_objects={...}) with a registered function, or rebuild the layer")
        return self.function(*args, **kwargs)

    def get_config(self):
        return {"name": self.name, "source": self.source}

    @classmethod
    def from_config(cls, config):
        return cls(None, **config)


def _anonymous(fn):
    name = getattr(fn, "__qualname__", "")
    return isinstance(fn, LambdaFunction) or "<lambda>" in name or "<locals>" in name


class Lambda(Layer):
    """A function as a layer (``tf.keras.layers.Lambda``): ``call`` returns
    ``function(inputs, **arguments)`` (``mask``/``training`` passed too when the function
    takes them). Closures work; the function's variables are not the layer's (use a
    Layer subclass for weights). ``output_shape`` -- a shape without the batch dimension,
    or a function of the input shape -- is what a functional model records; without it
    the function runs once on zeros to find it. ``mask``: the output's mask (a value, or
    ``mask(inputs, input_mask)``); by default the output has no mask.

    >>> import tapeflow as tf
    >>> square = tf.keras.layers.Lambda(lambda x: x ** 2)
    >>> square(tf.constant([[1., 2.]])).numpy().tolist()
    [[1.0, 4.0]]
    >>> pair = tf.keras.layers.Lambda(lambda x: tf.stack([x, -x], axis=1), output_shape=(2, 3))
    >>> pair.compute_output_shape((None, 3))
    (None, 2, 3)
    """

    def __init__(self, function, output_shape=None, mask=None, arguments=None, **kwargs):
        super().__init__(**kwargs)
        if not callable(function):
            raise InvalidTypeError(f"Lambda: function must be callable, got "
                                   f"{type(function).__name__} {function!r:.60}")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidTypeError(f"Lambda: arguments must be a dict of keyword arguments, "
                                   f"got {type(arguments).__name__}")
        if output_shape is not None and not callable(output_shape) and not isinstance(
                output_shape, (list, tuple)):
            raise InvalidTypeError("Lambda: output_shape must be a shape (without the batch "
                                   f"dimension) or a function, got {output_shape!r}")
        d = self.__dict__
        d["function"] = function
        d["arguments"] = dict(arguments or {})
        d["_output_shape"] = output_shape
        d["mask"] = mask
        inner = function.function if isinstance(function, LambdaFunction) else function
        try:
            params = inspect.signature(inner).parameters if inner is not None else {}
        except (TypeError, ValueError):
            params = {}
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        d["_fn_mask"] = var_kw or "mask" in params
        d["_fn_training"] = var_kw or "training" in params

    def call(self, inputs, mask=None, training=None):
        kwargs = dict(self.arguments)
        if self._fn_mask:
            kwargs["mask"] = mask
        if self._fn_training:
            kwargs["training"] = training
        return self.function(inputs, **kwargs)

    def compute_output_shape(self, input_shape):
        """The output shape for ``input_shape``: from ``output_shape`` (NotImplementedError
        without one: the shape is then found by running the function)."""
        out = self._output_shape
        if out is None:
            raise NotImplementedError("Lambda without output_shape")
        if callable(out):
            return out(input_shape)
        first = input_shape[0] if isinstance(input_shape, (list, tuple)) and input_shape and \
            isinstance(input_shape[0], (list, tuple)) else input_shape
        batch = first[0] if len(first) else None
        return (batch,) + tuple(out)

    def compute_mask(self, inputs, mask=None):
        if callable(self.mask):
            return self.mask(inputs, mask)
        return self.mask

    def get_config(self):
        """``function`` (a lambda or closure as a :class:`LambdaFunction`: saved as its
        source text, never run from a file) and a callable ``output_shape``/``mask`` as
        the objects themselves (saving a named function needs it registered:
        ``tf.keras.saving.register_keras_serializable``)."""
        cfg = {"name": self.name, "trainable": self.trainable,
               "dtype": self.dtype_policy.name, "arguments": dict(self.arguments),
               "function": LambdaFunction(self.function) if _anonymous(self.function)
               and not isinstance(self.function, LambdaFunction) else self.function}
        if self._output_shape is not None:
            cfg["output_shape"] = (self._output_shape if callable(self._output_shape)
                                   else list(self._output_shape))
        if self.mask is not None:
            cfg["mask"] = self.mask
        return cfg

    @classmethod
    def from_config(cls, config):
        """A built-in activation saved by its name (``"relu"``) becomes the function."""
        config = dict(config)
        if isinstance(config.get("function"), str):
            config["function"] = _act.get(config["function"])
        return cls(**config)


# --- noise and regularisation: SpatialDropout, GaussianNoise, GaussianDropout ---------------

class _SpatialDropout(ConfigMixin, Layer):
    """Dropout of whole feature maps: one decision per example and channel."""

    supports_masking = True

    _leaf = True
    _config_keys = ("rate", "data_format")
    _rank = 3

    def __init__(self, rate, data_format=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.rate = _rate(rate, type(self).__name__)
        self.data_format = _channels(data_format)
        self.seed = seed

    def call(self, inputs, training=None):
        s = list(inputs.shape)
        if len(s) != self._rank:
            raise InvalidArgumentError(
                f"{self.name}: {type(self).__name__} needs inputs of rank {self._rank}, got "
                f"shape {_fmt(s)}")
        if not training or self.rate == 0.0:
            return inputs
        if self.data_format == "channels_last":
            noise = [s[0]] + [1] * (self._rank - 2) + [s[-1]]
        else:
            noise = [s[0], s[1]] + [1] * (self._rank - 2)
        return _nn.dropout(inputs, rate=self.rate, noise_shape=noise, seed=self.seed)


class SpatialDropout1D(_SpatialDropout):
    """Drop whole channels of ``[batch, steps, channels]`` in training."""

    _config_keys = ("rate",)
    _rank = 3


class SpatialDropout2D(_SpatialDropout):
    """Drop whole channels of ``[batch, h, w, channels]`` (or channels_first) in
    training."""

    _rank = 4


class SpatialDropout3D(_SpatialDropout):
    """Drop whole channels of 5-d inputs in training."""

    _rank = 5


class GaussianNoise(ConfigMixin, Layer):
    """In training, add zero-mean Gaussian noise of standard deviation ``stddev``;
    otherwise the identity."""

    supports_masking = True

    _leaf = True
    _config_keys = ("stddev",)

    def __init__(self, stddev, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if float(stddev) < 0:
            raise InvalidArgumentError(f"GaussianNoise: stddev must be >= 0, got {stddev}")
        self.stddev = float(stddev)
        self.seed = seed

    def call(self, inputs, training=None):
        if not training or self.stddev == 0.0:
            return inputs
        noise = _rnd.normal(list(inputs.shape), stddev=self.stddev, dtype=inputs.dtype,
                            seed=self.seed)
        return _m.add(inputs, noise)


class GaussianDropout(ConfigMixin, Layer):
    """In training, multiply by Gaussian noise of mean 1 and standard deviation
    ``sqrt(rate / (1 - rate))``; otherwise the identity."""

    supports_masking = True

    _leaf = True
    _config_keys = ("rate",)

    def __init__(self, rate, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.rate = _rate(rate, "GaussianDropout")
        self.seed = seed

    def call(self, inputs, training=None):
        if not training or self.rate == 0.0:
            return inputs
        sd = float(np.sqrt(self.rate / (1.0 - self.rate)))
        noise = _rnd.normal(list(inputs.shape), mean=1.0, stddev=sd, dtype=inputs.dtype,
                            seed=self.seed)
        return _m.multiply(inputs, noise)


class ActivityRegularization(ConfigMixin, Layer):
    """The identity that adds ``l1 * sum(|x|) + l2 * sum(x^2)`` of its last input to the
    layer's ``losses``."""

    supports_masking = True

    _leaf = True
    _config_keys = ("l1", "l2")

    def __init__(self, l1=0.0, l2=0.0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.l1 = float(l1)
        self.l2 = float(l2)
        self.__dict__["_activity"] = None
        self._regularizers.append((self._activity_loss, None))

    def _activity_loss(self, _unused):
        a = self.__dict__["_activity"]
        return _dispatch_mod.convert_to_tensor(0.0) if a is None else a

    def call(self, inputs):
        loss = None
        if self.l1:
            loss = _m.multiply(_red.reduce_sum(_m.abs(inputs)), self.l1)
        if self.l2:
            l2 = _m.multiply(_red.reduce_sum(_m.multiply(inputs, inputs)), self.l2)
            loss = l2 if loss is None else _m.add(loss, l2)
        self.__dict__["_activity"] = loss
        return inputs
