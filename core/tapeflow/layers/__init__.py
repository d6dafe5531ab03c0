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
from .convolutional import (AveragePooling1D, AveragePooling3D, AvgPool1D, AvgPool3D, Conv1D,
                            Conv1DTranspose, Conv2DTranspose, Conv3D, Conv3DTranspose,
                            Convolution1D, Convolution1DTranspose, Convolution2DTranspose,
                            Convolution3D, Convolution3DTranspose, Cropping1D, Cropping2D,
                            Cropping3D, DepthwiseConv2D, GlobalAveragePooling1D,
                            GlobalAveragePooling3D, GlobalAvgPool1D, GlobalAvgPool3D,
                            GlobalMaxPool1D, GlobalMaxPool3D, GlobalMaxPooling1D,
                            GlobalMaxPooling3D, MaxPool1D, MaxPool3D, MaxPooling1D,
                            MaxPooling3D, SeparableConv2D, SeparableConvolution2D, UpSampling1D,
                            UpSampling2D, UpSampling3D, ZeroPadding1D, ZeroPadding2D,
                            ZeroPadding3D, average_pooling1d, average_pooling3d, conv1d,
                            conv2d_transpose, conv3d, conv3d_transpose, max_pooling1d,
                            max_pooling3d, separable_conv2d)
from .core import (Activation, BatchNormalization, Dense, Dropout, Embedding, Flatten,
                   batch_normalization, dense, dropout, flatten)
from .core import (ELU, ActivityRegularization, Add, Average, Concatenate, Dot,
                   GaussianDropout, GaussianNoise, GroupNormalization, Identity,
                   LayerNormalization, LeakyReLU, Maximum, Minimum, Multiply, Permute, PReLU,
                   ReLU, RepeatVector, Reshape, Softmax, SpatialDropout1D, SpatialDropout2D,
                   SpatialDropout3D, Subtract, ThresholdedReLU, UnitNormalization, add, average,
                   concatenate, dot, maximum, minimum, multiply, subtract)
from .attention import AdditiveAttention, Attention, MultiHeadAttention
from .core import Lambda, Masking
from .recurrent import (GRU, LSTM, RNN, Bidirectional, GRUCell, LSTMCell, SimpleRNN,
                        SimpleRNNCell, StackedRNNCells, TimeDistributed)

__all__ = ["Layer", "Dense", "Conv2D", "Convolution2D", "MaxPooling2D", "MaxPool2D",
           "AveragePooling2D", "AvgPool2D", "GlobalAveragePooling2D", "GlobalAvgPool2D",
           "GlobalMaxPooling2D", "GlobalMaxPool2D", "Flatten", "flatten", "Dropout", "dropout",
           "BatchNormalization", "Embedding", "Activation", "max_pooling2d",
           "average_pooling2d", "dense", "conv2d", "batch_normalization", "activations",
           "initializers", "regularizers", "variable_creator_scope", "reset_uids",
           "unique_layer_name", "LayerNormalization", "GroupNormalization",
           "UnitNormalization", "Reshape", "Permute", "RepeatVector", "Add", "Subtract",
           "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "Dot", "add", "subtract",
           "multiply", "average", "maximum", "minimum", "concatenate", "dot", "ReLU",
           "LeakyReLU", "PReLU", "ELU", "ThresholdedReLU", "Softmax", "Identity",
           "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
           "GaussianDropout", "ActivityRegularization", "MultiHeadAttention", "Attention",
           "AdditiveAttention", "Masking", "Lambda", "RNN", "LSTM", "GRU", "SimpleRNN", "LSTMCell",
           "GRUCell", "SimpleRNNCell", "StackedRNNCells", "Bidirectional", "TimeDistributed"]
__all__ += ["Conv1D", "Convolution1D", "Conv3D", "Convolution3D", "Conv1DTranspose",
            "Convolution1DTranspose", "Conv2DTranspose", "Convolution2DTranspose",
            "Conv3DTranspose", "Convolution3DTranspose", "DepthwiseConv2D", "SeparableConv2D",
            "SeparableConvolution2D", "MaxPooling1D", "MaxPool1D", "MaxPooling3D", "MaxPool3D",
            "AveragePooling1D", "AvgPool1D", "AveragePooling3D", "AvgPool3D",
            "GlobalAveragePooling1D", "GlobalAvgPool1D", "GlobalAveragePooling3D",
            "GlobalAvgPool3D", "GlobalMaxPooling1D", "GlobalMaxPool1D", "GlobalMaxPooling3D",
            "GlobalMaxPool3D", "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D", "Cropping1D",
            "Cropping2D", "Cropping3D", "UpSampling1D", "UpSampling2D", "UpSampling3D",
            "conv1d", "conv3d", "conv2d_transpose", "conv3d_transpose", "separable_conv2d",
            "max_pooling1d", "max_pooling3d", "average_pooling1d", "average_pooling3d"]
