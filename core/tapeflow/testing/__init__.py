"""tapeflow's test kit: what the core's own suite uses, shipped for plugin and backend authors.

* :func:`check_grads` — tape gradients vs central finite differences (float64),
  to any order, along random projections (any output shape).
* :func:`opcheck` — one call checks an op on every available device: forward vs a
  NumPy reference for every dtype, non-contiguous inputs, gradients, error contract.
* :class:`OpSpec`, :class:`Sample`, :class:`ErrorSample` — how to test an op (the
  spec format, :mod:`tapeflow.testing.specs`, which also holds the core's specs).
* :mod:`tapeflow.testing.conformance` — the conformance suite over every
  :class:`OpSpec` (``tapeflow.testing.specs``), as plain functions and as pytest
  cases.
* :mod:`tapeflow.testing.pytest_plugin` — loaded automatically by pytest:
  ``--tapeflow-device``, the ``tf_device`` fixture, skips naming why a device is
  unavailable, known gaps as strict xfails.

>>> import numpy as np, tapeflow as tf
>>> from tapeflow.testing import check_grads
>>> check_grads(lambda x: tf.reduce_sum(x * x), (np.array([1.0, -2.0]),))
"""

from .conformance import opcheck
from .gradcheck import assert_allclose, check_grads
from .specs import ErrorSample, OpSpec, Sample

__all__ = ["check_grads", "assert_allclose", "opcheck", "OpSpec", "Sample", "ErrorSample"]
