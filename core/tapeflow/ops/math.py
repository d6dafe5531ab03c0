"""The ``tf.math`` namespace: the elementwise math of :mod:`tapeflow.ops.math_ops`, the
reductions of :mod:`tapeflow.ops.reductions` and ``unsorted_segment_sum``
(:mod:`tapeflow.ops.array_gather`), as TensorFlow's ``tf.math`` holds them.

This module defines nothing: it sits above the modules it re-exports, so none of them
imports it (an op module uses :mod:`~tapeflow.ops.math_ops` or
:mod:`~tapeflow.ops.reductions` directly).

>>> import tapeflow as tf
>>> print(tf.math.reduce_sum(tf.math.square([1., 2.])))
tf.Tensor(5.0, shape=(), dtype=float32)
"""

from __future__ import annotations

from . import math_ops as _math_ops
from . import reductions as _reductions
from .array_gather import unsorted_segment_sum
from .math_ops import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403

__all__ = [*_math_ops.__all__, *_reductions.__all__, "unsorted_segment_sum"]
