"""Keras metric functions (``tf.keras.metrics``): ``metric(y_true, y_pred)`` returns
one value per example; ``Model.compile(metrics=[...])`` averages them over each
epoch. Metric classes (``Mean``, ``Accuracy`` ...) come from :mod:`tapeflow.metrics`,
loaded on first use.

>>> import tapeflow as tf
>>> print(tf.keras.metrics.sparse_categorical_accuracy([1, 0], [[0.2, 0.8], [0.3, 0.7]]))
tf.Tensor([1. 0.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

import importlib

from ..runtime.errors import InvalidArgumentError, InvalidTypeError
from ..ops import array as _a
from ..ops import math as _m
from ..ops import reductions as _r
from .. import losses as _losses
from ..losses import _t
from . import losses as _klosses

__all__ = ["sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy",
           "accuracy", "get"]


def sparse_categorical_accuracy(y_true, y_pred):
    """1.0 where the arg-max of ``y_pred`` is the integer label, else 0.0."""
    y_pred = _t(y_pred)
    y_true = _t(y_true)
    if y_true.ndim == y_pred.ndim and y_true.ndim >= 1 and y_true.shape[-1] == 1:
        y_true = _a.squeeze(y_true, axis=-1)
    pred = _m.argmax(y_pred, axis=-1)
    if y_true.dtype != pred.dtype:
        y_true = _m.cast(y_true, pred.dtype)
    return _m.cast(_m.equal(y_true, pred), "float32")


def categorical_accuracy(y_true, y_pred):
    """1.0 where the arg-maxes of one-hot ``y_true`` and ``y_pred`` agree."""
    return _m.cast(_m.equal(_m.argmax(_t(y_true), axis=-1), _m.argmax(_t(y_pred), axis=-1)),
                   "float32")


def binary_accuracy(y_true, y_pred, threshold=0.5):
    """Mean over the last axis of ``(y_pred > threshold) == y_true``."""
    y_pred = _t(y_pred)
    y_true = _losses._keras_true(y_true, y_pred)
    hit = _m.equal(y_true, _m.cast(_m.greater(y_pred, threshold), y_pred.dtype))
    return _r.reduce_mean(_m.cast(hit, "float32"), axis=-1)


def accuracy(y_true, y_pred):
    """Element-wise equality of labels and predicted labels."""
    y_pred = _t(y_pred)
    y_true = _t(y_true)
    if y_true.dtype != y_pred.dtype:
        y_true = _m.cast(y_true, y_pred.dtype)
    return _m.cast(_m.equal(y_true, y_pred), "float32")


def _auto_accuracy(y_true, y_pred):
    """"accuracy" when the loss does not say which: by the shapes, as Keras does."""
    y_pred = _t(y_pred)
    y_true = _t(y_true)
    if y_pred.ndim >= 1 and y_pred.shape[-1] == 1:
        return binary_accuracy(y_true, y_pred)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == y_pred.shape[-1]:
        return categorical_accuracy(y_true, y_pred)
    return sparse_categorical_accuracy(y_true, y_pred)


def _accuracy_for(loss_name, loss_fn):
    """The accuracy that goes with a loss (what Keras picks for ``metrics=["accuracy"]``)."""
    name = str(loss_name).lower()
    fn = getattr(loss_fn, "_fn", None) or loss_fn
    if "sparse_categorical" in name or fn is _losses.sparse_categorical_crossentropy:
        return sparse_categorical_accuracy
    if "categorical" in name or fn is _losses.categorical_crossentropy:
        return categorical_accuracy
    if "binary" in name or fn is _losses.binary_crossentropy:
        return binary_accuracy
    return _auto_accuracy


acc = accuracy
mse = MSE = mean_squared_error = _klosses.mean_squared_error
mae = MAE = mean_absolute_error = _klosses.mean_absolute_error
sparse_categorical_crossentropy = _losses.sparse_categorical_crossentropy
categorical_crossentropy = _losses.categorical_crossentropy
binary_crossentropy = _losses.binary_crossentropy

_BY_NAME = {
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy,
    "binary_accuracy": binary_accuracy,
    "mse": mse, "mean_squared_error": mse, "mae": mae, "mean_absolute_error": mae,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "binary_crossentropy": binary_crossentropy,
}


def get(identifier):
    if isinstance(identifier, str):
        if identifier in ("accuracy", "acc"):
            return _auto_accuracy
        fn = _BY_NAME.get(identifier)
        if fn is None:
            raise InvalidArgumentError(f"Unknown metric {identifier!r}; known: accuracy, "
                             + ", ".join(sorted(_BY_NAME)))
        return fn
    if callable(identifier):
        return identifier
    raise InvalidTypeError(f"metric must be a name or a callable, got {identifier!r}")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        mod = importlib.import_module("tapeflow.metrics")
    except ImportError as e:
        raise AttributeError(
            f"tf.keras.metrics.{name}: tapeflow.metrics is not available ({e})") from None
    try:
        return getattr(mod, name)
    except AttributeError:
        raise AttributeError(f"tf.keras.metrics has no attribute {name!r}") from None
