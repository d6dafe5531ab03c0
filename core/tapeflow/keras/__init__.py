"""``tf.keras``: the Keras names the seeds use, over tapeflow's own pieces.

``Model``, ``Sequential`` (:mod:`tapeflow.models`), ``layers`` (:mod:`tapeflow.layers`),
``optimizers`` (Keras names ``SGD``, ``Adam``, ``RMSprop`` over the optimizers of
:mod:`tapeflow.train`), ``losses``, ``metrics``, ``activations``, ``initializers``,
``regularizers``, ``backend``, ``mixed_precision`` (dtype policies and the
``LossScaleOptimizer``: docs/mixed_precision.md) and ``datasets`` (:mod:`tapeflow.datasets`, e.g.
``tf.keras.datasets.mnist.load_data()``), ``saving`` (the ``.keras`` format, the registry
of your classes: docs/keras-saving.md; ``utils`` holds its ``tf.keras.utils`` names). The modules of this package are public
``tf.keras.<name>`` namespaces, each a file as in TensorFlow (``from
tapeflow.keras.optimizers import Adam``); ``activations``, ``initializers`` and
``regularizers`` are the modules of :mod:`tapeflow.layers`. Most only re-export: the
objects and their ``get`` lookups live in the modules that define them
(``tapeflow.losses``, ``tapeflow.metrics``, ``tapeflow.train.optimizers``,
``tapeflow.layers``); ``callbacks`` (the fit hooks) and ``mixed_precision`` (the
``LossScaleOptimizer``) define what only Keras has. ``metrics``, ``datasets``,
``callbacks`` and ``mixed_precision`` load on first use.

>>> import tapeflow as tf
>>> model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(784,)),
...                              tf.keras.layers.Dense(10)])
>>> len(model.trainable_variables)
4
"""

import importlib as _importlib

from .. import layers
from ..layers import activations, initializers, regularizers
from ..models import History, Model, Network, Sequential
from ..functional import Input, InputLayer
from . import backend, losses, optimizers, saving
from .saving import utils

models = _importlib.import_module("tapeflow.models")

__all__ = ["Model", "Sequential", "Network", "History", "Input", "InputLayer", "layers", "models", "optimizers",
           "losses", "metrics", "datasets", "activations", "initializers", "regularizers",
           "backend", "mixed_precision", "saving", "utils"]

_LAZY = {"metrics": "tapeflow.keras.metrics", "datasets": "tapeflow.keras.datasets",
         "callbacks": "tapeflow.keras.callbacks",
         "mixed_precision": "tapeflow.keras.mixed_precision"}


def __getattr__(name):
    if name in _LAZY:
        mod = _importlib.import_module(_LAZY[name])
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'tapeflow.keras' has no attribute {name!r}")
