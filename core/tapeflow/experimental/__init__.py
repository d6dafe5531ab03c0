"""``tf.experimental``: TensorFlow's experimental namespace.

``tf.experimental.numpy`` (``import tapeflow.experimental.numpy as tnp``: NumPy's API on
tensors, and :func:`~tapeflow.experimental.numpy.experimental_enable_numpy_behavior`),
``async_scope`` and ``async_clear_error`` (the asynchronous execution of ``tf.app``), and the
dispatch of ``tf.*`` functions to composite tensors (``CompositeTensor``, ``dispatch_for_api``,
``dispatch_for_unary_elementwise_apis``, ``dispatch_for_binary_elementwise_apis``,
``unregister_dispatch_for``: tapeflow.ops.composite).

>>> import tapeflow as tf
>>> tf.experimental.numpy.asarray([1, 2]).dtype
tf.int64
"""

from __future__ import annotations

from ..app import async_clear_error, async_scope  # noqa: F401
from . import numpy  # noqa: F401  (tf.experimental.numpy)
from ..ops.ragged_ops import DynamicRaggedShape, RowPartition  # noqa: F401  (issue 47)
from ..ops.composite import (  # noqa: F401  (composite tensors' dispatch, issue 47)
    CompositeTensor, dispatch_for_api, dispatch_for_binary_elementwise_apis,
    dispatch_for_unary_elementwise_apis, unregister_dispatch_for)
