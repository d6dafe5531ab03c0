"""``tf.keras.metrics``: re-exports :mod:`tapeflow.metrics` -- the metric functions
(``metric(y_true, y_pred)`` returns one value per example; ``Model.compile(metrics=[...])``
averages them over each epoch), the metric classes (``Mean``, ``Accuracy`` ...), and
Keras's ``get`` (:func:`tapeflow.metrics.get_function`: a function's name gives the
function, ``"accuracy"`` the accuracy chosen by the shapes) -- and Keras's loss
functions under their metric names (``mse``, ``binary_crossentropy`` ...).

>>> import tapeflow as tf
>>> print(tf.keras.metrics.sparse_categorical_accuracy([1, 0], [[0.2, 0.8], [0.3, 0.7]]))
tf.Tensor([1. 0.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

from .. import metrics as _metrics
from ..metrics import (Accuracy, BinaryAccuracy, CategoricalAccuracy, Mean, Metric,
                       SparseAccuracy, SparseCategoricalAccuracy, Sum, acc, accuracy,
                       binary_accuracy, categorical_accuracy, sparse_categorical_accuracy)
from ..metrics import get_function as get
from .losses import (MAE, MSE, binary_crossentropy, categorical_crossentropy, mae,
                     mean_absolute_error, mean_squared_error, mse,
                     sparse_categorical_crossentropy)

__all__ = ["sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy",
           "accuracy", "acc", "get", "Metric", "Mean", "Sum", "Accuracy",
           "SparseCategoricalAccuracy", "SparseAccuracy", "CategoricalAccuracy",
           "BinaryAccuracy", "mse", "MSE", "mean_squared_error", "mae", "MAE",
           "mean_absolute_error", "sparse_categorical_crossentropy",
           "categorical_crossentropy", "binary_crossentropy"]


def __getattr__(name):
    """Any other name of :mod:`tapeflow.metrics`."""
    if not name.startswith("__"):
        try:
            return getattr(_metrics, name)
        except AttributeError:
            pass
    raise AttributeError(f"module 'tapeflow.keras.metrics' has no attribute {name!r}")
