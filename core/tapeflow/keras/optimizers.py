"""``tf.keras.optimizers``: ``SGD``, ``Adam``, ``RMSprop``, ``Adagrad`` (and the base
``Optimizer``), the Keras-named optimizers of :mod:`tapeflow.train`, imported on
first use; ``get(identifier)`` builds one from a name (``"sgd"``, ``"adam"``,
``"rmsprop"``, ``"adagrad"``) or passes an optimizer object through.

>>> import tapeflow as tf
>>> opt = tf.keras.optimizers.SGD(learning_rate=0.1)
>>> x = tf.Variable(1.0)
>>> opt.apply_gradients([(tf.constant(2.0), x)])
>>> round(float(x), 4)
0.8
"""

from __future__ import annotations

import importlib

from ..runtime.errors import InvalidTypeError

_NAMES = ("SGD", "Adam", "RMSprop", "Adagrad", "Optimizer")
__all__ = ["get", *_NAMES]


def _train():
    try:
        return importlib.import_module("tapeflow.train")
    except ImportError as e:
        raise ImportError(f"tf.keras.optimizers needs tapeflow.train (the optimizers): {e}") \
            from None


def __getattr__(name):
    if name in _NAMES:
        value = getattr(_train(), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tapeflow.keras.optimizers' has no attribute {name!r}")


def get(identifier):
    """An optimizer from a Keras name (default arguments) or an optimizer object
    (anything with ``apply_gradients``, returned as is)."""
    if not isinstance(identifier, str) and hasattr(identifier, "apply_gradients"):
        return identifier
    if isinstance(identifier, str):
        return _train().get_optimizer(identifier)
    raise InvalidTypeError(f"optimizer must be a name or an optimizer object, got {identifier!r}")
