"""``tf.keras.optimizers``: ``SGD``, ``Adam``, ``RMSprop``, ``Adagrad`` (and the base
``Optimizer``), the Keras-named optimizers of :mod:`tapeflow.train.optimizers`, and
``get(identifier)`` (:func:`tapeflow.train.optimizers.get`: a name such as ``"adam"``, a
config dict, or an optimizer object passed through).

>>> import tapeflow as tf
>>> opt = tf.keras.optimizers.SGD(learning_rate=0.1)
>>> x = tf.Variable(1.0)
>>> opt.apply_gradients([(tf.constant(2.0), x)])
>>> round(float(x), 4)
0.8
"""

from __future__ import annotations

from ..train.optimizers import SGD, Adagrad, Adam, Optimizer, RMSprop, get

__all__ = ["get", "SGD", "Adam", "RMSprop", "Adagrad", "Optimizer"]
