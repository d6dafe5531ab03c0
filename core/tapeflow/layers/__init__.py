"""Layers (``tf.layers``, also ``tf.keras.layers``): objects that own Variables and
compute with them.

A layer creates its Variables on the first call, from the input's shape, on the
current device (the ``tf.device`` scope's, else the default device); later calls
run ``call`` with nothing re-checked. Layer classes: Dense, Conv2D, MaxPooling2D,
AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, Flatten, Dropout,
BatchNormalization, Embedding, Activation; the base class ``Layer`` for your own.
Functional forms that need no variables: ``flatten``, ``max_pooling2d``,
``average_pooling2d``, ``dropout``.

>>> import tapeflow as tf
>>> net = tf.layers.Dense(2, use_bias=False)
>>> net(tf.constant([[1.]])).shape.as_list(), len(net.variables)
([1, 2], 1)
"""

from . import activations, initializers, regularizers
from .base import Layer, reset_uids, unique_layer_name, variable_creator_scope
from .convolutional import (AveragePooling2D, AvgPool2D, Conv2D, Convolution2D,
                            GlobalAveragePooling2D, GlobalAvgPool2D, GlobalMaxPool2D,
                            GlobalMaxPooling2D, MaxPool2D, MaxPooling2D, average_pooling2d,
                            conv2d, max_pooling2d)
from .core import (Activation, BatchNormalization, Dense, Dropout, Embedding, Flatten,
                   batch_normalization, dense, dropout, flatten)

__all__ = ["Layer", "Dense", "Conv2D", "Convolution2D", "MaxPooling2D", "MaxPool2D",
           "AveragePooling2D", "AvgPool2D", "GlobalAveragePooling2D", "GlobalAvgPool2D",
           "GlobalMaxPooling2D", "GlobalMaxPool2D", "Flatten", "flatten", "Dropout", "dropout",
           "BatchNormalization", "Embedding", "Activation", "max_pooling2d",
           "average_pooling2d", "dense", "conv2d", "batch_normalization", "activations",
           "initializers", "regularizers", "variable_creator_scope", "reset_uids",
           "unique_layer_name"]
