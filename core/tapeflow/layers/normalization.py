"""BatchNormalization (``tf.layers.BatchNormalization``, ``tf.keras.layers.BatchNormalization``).

In training (``training=True``) the layer normalises with the batch's mean and
variance and moves its non-trainable ``moving_mean`` / ``moving_variance`` towards
them (``moving = moving * momentum + batch * (1 - momentum)``, assigned outside any
tape); in inference it uses the moving statistics. ``gamma``/``beta`` are trainable.

>>> import tapeflow as tf
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
from ..ops import array as _a
from ..ops import math as _m
from ..ops import nn as _nn
from ..runtime.context import stop_all_recording as stop_recording
from .base import Layer
from .core import _check_constraints

__all__ = ["BatchNormalization", "batch_normalization"]


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
