"""Keras losses (``tf.keras.losses``): functions ``loss(y_true, y_pred)`` returning one
value per example, and classes whose instances return the batch mean.

Note the argument order (``y_true`` first) and that, as in Keras, the
cross-entropies expect probabilities unless ``from_logits=True``.

>>> import tapeflow as tf
>>> loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
>>> round(float(loss([0, 1], [[0., 0.], [0., 0.]])), 4)
0.6931
>>> print(tf.keras.losses.mean_squared_error([[1., 2.]], [[1., 4.]]))
tf.Tensor([2.], shape=(1,), dtype=float32)
"""

from __future__ import annotations

from .. import array as _a
from .. import math as _m
from .. import nn as _nn
from .. import reductions as _r
from ..execute import convert_to_tensor
from ..tensor import Tensor, Variable

__all__ = ["sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
           "mean_squared_error", "mean_absolute_error", "mse", "mae", "MSE", "MAE", "Loss",
           "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy",
           "MeanSquaredError", "MeanAbsoluteError", "get"]

_EPS = 1e-7


def _t(x):
    if isinstance(x, Variable):
        return x.read_value()
    return x if isinstance(x, Tensor) else convert_to_tensor(x)


def _like(y_true, y_pred):
    """y_true as y_pred's dtype, with a trailing axis added when y_pred has one more."""
    y_true = _t(y_true)
    if y_true.dtype != y_pred.dtype:
        y_true = _m.cast(y_true, y_pred.dtype)
    if y_true.ndim == y_pred.ndim - 1:
        y_true = _a.expand_dims(y_true, -1)
    return y_true


def _sparse_labels(y_true, y_pred):
    y_true = _t(y_true)
    if y_true.ndim == y_pred.ndim and y_true.ndim >= 1 and y_true.shape[-1] == 1:
        y_true = _a.squeeze(y_true, axis=-1)
    if not y_true.dtype.is_integer:
        y_true = _m.cast(y_true, "int64")
    return y_true


def _log_probs_as_logits(p):
    return _m.log(_a.clip_by_value(p, _EPS, 1.0 - _EPS))


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, axis=-1):
    """Cross entropy of integer class labels with the predicted distribution (the last
    axis of ``y_pred``: probabilities, or logits with ``from_logits=True``)."""
    y_pred = _t(y_pred)
    labels = _sparse_labels(y_true, y_pred)
    logits = y_pred if from_logits else _log_probs_as_logits(y_pred)
    return _nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Cross entropy of one-hot (or soft) labels with the predicted distribution."""
    y_pred = _t(y_pred)
    y_true = _like(y_true, y_pred)
    if label_smoothing:
        k = y_pred.shape[-1]
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / k
    if from_logits:
        return _nn.softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    p = y_pred / _r.reduce_sum(y_pred, axis=-1, keepdims=True)
    p = _a.clip_by_value(p, _EPS, 1.0 - _EPS)
    return -_r.reduce_sum(y_true * _m.log(p), axis=-1)


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Mean over the last axis of the logistic loss of 0/1 labels."""
    y_pred = _t(y_pred)
    y_true = _like(y_true, y_pred)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        per = _nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    else:
        p = _a.clip_by_value(y_pred, _EPS, 1.0 - _EPS)
        per = -(y_true * _m.log(p) + (1.0 - y_true) * _m.log(1.0 - p))
    return _r.reduce_mean(per, axis=-1)


def mean_squared_error(y_true, y_pred):
    y_pred = _t(y_pred)
    return _r.reduce_mean(_m.square(y_pred - _like(y_true, y_pred)), axis=-1)


def mean_absolute_error(y_true, y_pred):
    y_pred = _t(y_pred)
    return _r.reduce_mean(_m.abs(y_pred - _like(y_true, y_pred)), axis=-1)


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error


class Loss:
    """A loss object: ``loss(y_true, y_pred)`` is the mean of ``call`` over the batch."""

    def __init__(self, reduction="auto", name=None):
        if reduction not in ("auto", "sum_over_batch_size", "sum", "none"):
            raise ValueError(f"bad reduction {reduction!r}")
        self.reduction = reduction
        self.name = name or type(self).__name__

    def call(self, y_true, y_pred):
        raise NotImplementedError

    def __call__(self, y_true, y_pred, sample_weight=None):
        per = self.call(y_true, y_pred)
        if sample_weight is not None:
            per = per * _like(sample_weight, per)
        if self.reduction == "none":
            return per
        if self.reduction == "sum":
            return _r.reduce_sum(per)
        return _r.reduce_mean(per)


class _FnLoss(Loss):
    _fn = None

    def __init__(self, reduction="auto", name=None, **kwargs):
        super().__init__(reduction, name)
        self.kwargs = kwargs

    def call(self, y_true, y_pred):
        return type(self)._fn(y_true, y_pred, **self.kwargs)


class SparseCategoricalCrossentropy(_FnLoss):
    _fn = staticmethod(sparse_categorical_crossentropy)

    def __init__(self, from_logits=False, reduction="auto",
                 name="sparse_categorical_crossentropy"):
        super().__init__(reduction, name, from_logits=from_logits)


class CategoricalCrossentropy(_FnLoss):
    _fn = staticmethod(categorical_crossentropy)

    def __init__(self, from_logits=False, label_smoothing=0.0, reduction="auto",
                 name="categorical_crossentropy"):
        super().__init__(reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing)


class BinaryCrossentropy(_FnLoss):
    _fn = staticmethod(binary_crossentropy)

    def __init__(self, from_logits=False, label_smoothing=0.0, reduction="auto",
                 name="binary_crossentropy"):
        super().__init__(reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing)


class MeanSquaredError(_FnLoss):
    _fn = staticmethod(mean_squared_error)

    def __init__(self, reduction="auto", name="mean_squared_error"):
        super().__init__(reduction, name)


class MeanAbsoluteError(_FnLoss):
    _fn = staticmethod(mean_absolute_error)

    def __init__(self, reduction="auto", name="mean_absolute_error"):
        super().__init__(reduction, name)


_BY_NAME = {
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "binary_crossentropy": binary_crossentropy,
    "mean_squared_error": mean_squared_error, "mse": mean_squared_error,
    "mean_absolute_error": mean_absolute_error, "mae": mean_absolute_error,
}


def get(identifier):
    """A loss callable ``(y_true, y_pred) -> Tensor`` from a name or a callable."""
    if isinstance(identifier, str):
        fn = _BY_NAME.get(identifier) or _BY_NAME.get(identifier.lower())
        if fn is None:
            raise ValueError(f"Unknown loss {identifier!r}; known: " + ", ".join(sorted(_BY_NAME)))
        return fn
    if callable(identifier):
        return identifier
    raise TypeError(f"loss must be a name or a callable, got {identifier!r}")
