"""Shape, creation and indexing ops (``reshape``, ``zeros``, ``gather``, ``x[i]`` ...):
the public module, which re-exports the modules that define them, one concern each:

* :mod:`~tapeflow.ops.array_creation`: ``fill``, ``zeros``, ``ones``, ``*_like``, ``range``,
  ``eye``, ``linspace``, ``one_hot``;
* :mod:`~tapeflow.ops.array_shape`: ``reshape``, ``transpose``, ``expand_dims``,
  ``squeeze``, ``shape``, ``size``, ``rank`` (``broadcast_to`` and ``unbroadcast`` are in
  :mod:`~tapeflow.ops.reductions`: they and ``reduce_sum`` are each other's gradient);
* :mod:`~tapeflow.ops.array_values`: ``where``, ``identity``, ``stop_gradient``, ``clip_by_*``;
* :mod:`~tapeflow.ops.array_join`: ``concat``, ``stack``, ``unstack``, ``split``, ``tile``;
* :mod:`~tapeflow.ops.array_gather`: ``boolean_mask``, ``gather``, ``gather_nd``,
  ``scatter_nd``, ``unsorted_segment_sum``;
* :mod:`~tapeflow.ops.array_slice`: ``pad``, ``slice``, ``strided_slice``, ``x[key]`` and
  ``x[key] = value``;
* :mod:`~tapeflow.ops.array_sort`: ``sort``, ``argsort``, ``cumsum``, ``cumprod``,
  ``searchsorted``, ``unique_all``, ``nonzero``;
* :mod:`~tapeflow.ops.array_batching`: the ``batch_*`` helpers of the batching rules
  (``batch_coords`` is in :mod:`~tapeflow.ops.array_join`).

Public functions normalise their attributes (axes as non-negative ints, shapes as
tuples of ints, dtypes as :class:`~tapeflow.dtypes.DType`) and call ``execute``;
kernels live in the backends. Gradients are written with tapeflow ops, so they
are differentiable again.

>>> import tapeflow as tf
>>> print(tf.reshape(tf.range(6), [2, 3]))
tf.Tensor(
[[0 1 2]
 [3 4 5]], shape=(2, 3), dtype=int32)
>>> x = tf.constant([[1., 2., 3.], [4., 5., 6.]])
>>> print(x[:, ::-1][0])
tf.Tensor([3. 2. 1.], shape=(3,), dtype=float32)
"""

from __future__ import annotations

from .array_batching import batch_all, batch_fold, batch_leading, batch_unfold  # noqa: F401
from .array_creation import *  # noqa: F401,F403
from .array_creation import FILL, lin_space  # noqa: F401
from .array_gather import *  # noqa: F401,F403
from .array_join import *  # noqa: F401,F403
from .array_join import batch_coords  # noqa: F401
from .array_shape import *  # noqa: F401,F403
from .array_slice import *  # noqa: F401,F403
from .array_slice import _STRIDED_SLICE_GRAD, _getitem, _setitem  # noqa: F401
from .array_sort import *  # noqa: F401,F403
from .array_values import *  # noqa: F401,F403
from .array_values import where_v2  # noqa: F401
from .reductions import broadcast_to, unbroadcast  # noqa: F401

__all__ = [
    # creation
    "fill", "zeros", "ones", "zeros_like", "ones_like", "range", "eye", "linspace", "one_hot",
    # shapes
    "reshape", "transpose", "expand_dims", "squeeze", "concat", "stack", "unstack", "split",
    "tile", "broadcast_to", "pad", "slice", "strided_slice", "shape", "size", "rank",
    # selection and indexing
    "where", "boolean_mask", "gather", "gather_nd", "scatter_nd", "unsorted_segment_sum",
    # values
    "identity", "stop_gradient", "clip_by_value", "clip_by_norm", "clip_by_global_norm",
    # sorting and scans
    "argsort", "sort", "cumsum", "cumprod", "searchsorted", "unique_all", "nonzero",
]
