"""``tf.keras.losses``, the public namespace of Keras losses: functions
``loss(y_true, y_pred)`` returning one value per example, and classes whose instances
reduce over the batch (the mean by default). They live in :mod:`tapeflow.losses` beside
the seeds' TF1 losses; this module gives them Keras's names.

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

from ..losses import (BinaryCrossentropy, CategoricalCrossentropy, Huber, KerasReduction, Loss,
                      MeanAbsoluteError, MeanSquaredError, SparseCategoricalCrossentropy,
                      binary_crossentropy,
                      categorical_crossentropy, get, huber, mae, mse,
                      sparse_categorical_crossentropy)

mean_squared_error = MSE = mse
mean_absolute_error = MAE = mae
Reduction = KerasReduction


__all__ = ["sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
           "mean_squared_error", "mean_absolute_error", "mse", "mae", "MSE", "MAE", "huber",
           "Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "MeanSquaredError", "MeanAbsoluteError", "Huber", "get",
           "Reduction"]
