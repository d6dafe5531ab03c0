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
* ``tf.test`` is this module: :class:`TestCase` (``unittest.TestCase`` with
  TensorFlow's assertions on tensors and nested structures: ``assertAllClose``,
  ``assertAllEqual``, ``assertAllInRange``..., and ``evaluate``; tapeflow is eager, so
  there is no session), :func:`main`, :class:`Benchmark` (``report_benchmark``),
  :func:`is_gpu_available`, :func:`is_built_with_cuda`, :func:`gpu_device_name`.
* :mod:`tapeflow.testing.pytest_plugin` — loaded automatically by pytest:
  ``--tapeflow-device``, the ``tf_device`` fixture, skips naming why a device is
  unavailable, known gaps as strict xfails.

>>> import numpy as np, tapeflow as tf
>>> from tapeflow.testing import check_grads
>>> check_grads(lambda x: tf.reduce_sum(x * x), (np.array([1.0, -2.0]),))
"""

import contextlib
import json
import os
import sys
import time
import unittest

import numpy as np

from .. import nest
from ..runtime import devices as _devices
from .conformance import opcheck
from .gradcheck import assert_allclose, check_grads
from .specs import ErrorSample, OpSpec, Sample

__all__ = ["check_grads", "assert_allclose", "opcheck", "OpSpec", "Sample", "ErrorSample",
           "TestCase", "main", "Benchmark", "is_gpu_available", "is_built_with_cuda",
           "gpu_device_name"]


# --- tf.test: the TensorFlow test API the seeds' example programs' tests use ---------------

def _value(x):
    """A tensor, Variable or array-like as a NumPy array (anything else as it is)."""
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return x.numpy()
    return x


def _array(x):
    """``x`` as a numeric NumPy array, or None when it is not one (a ragged list, a
    structure of tensors with dicts)."""
    if isinstance(x, dict):
        return None
    if isinstance(x, (list, tuple)):
        x = [_value(v) for v in x]
    try:
        a = np.asarray(_value(x))
    except (ValueError, TypeError):
        return None
    return None if a.dtype == object else a


def _leaves(a, b, what, path="value"):
    """The paired arrays of two values or structures (dicts by key; lists and tuples as
    one array where they make one, else item by item), as TensorFlow's assertions pair
    them; AssertionError naming the path where the structures differ."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or set(a) != set(b):
            raise AssertionError(f"{what}: at {path}, {a!r} and {b!r} differ in structure")
        for k in a:
            yield from _leaves(a[k], b[k], what, f"{path}[{k!r}]")
        return
    x, y = _array(a), _array(b)
    if x is not None and y is not None:
        yield path, x, y
        return
    if not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))) or len(a) != len(b):
        raise AssertionError(f"{what}: at {path}, {a!r} and {b!r} differ in structure")
    for i, (u, v) in enumerate(zip(a, b)):
        yield from _leaves(u, v, what, f"{path}[{i}]")


class TestCase(unittest.TestCase):
    """``tf.test.TestCase``: ``unittest.TestCase`` with TensorFlow's assertions on
    tensors, arrays, Python numbers and nested structures of them (tuples, lists, dicts),
    and ``evaluate`` (tapeflow runs eagerly: it returns the values as NumPy arrays; there
    is no session, and ``cached_session``/``session`` are empty contexts).

    >>> import tapeflow as tf
    >>> class T(tf.test.TestCase):
    ...     def test_square(self):
    ...         self.assertAllClose(tf.square([1.0, 2.0]), [1.0, 4.0])
    >>> r = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(T("test_square"))
    >>> r.wasSuccessful()
    True
    """

    def evaluate(self, tensors):
        """The values of ``tensors`` (a tensor or a structure of them) as NumPy arrays."""
        return nest.map_structure(_value, tensors)

    @contextlib.contextmanager
    def cached_session(self, *args, **kwargs):
        yield None

    session = cached_session     # (no test_session: unittest would run it as a test)

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):
        for path, x, y in _leaves(a, b, "assertAllClose"):
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol,
                                       err_msg=f"{msg + ': ' if msg else ''}at {path}")

    def assertNotAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):
        try:
            self.assertAllClose(a, b, rtol=rtol, atol=atol)
        except AssertionError:
            return
        raise AssertionError(msg or f"the values are all close: {a!r} and {b!r}")

    def assertAllEqual(self, a, b, msg=None):
        for path, x, y in _leaves(a, b, "assertAllEqual"):
            if x.shape != y.shape:
                raise AssertionError(f"{msg + ': ' if msg else ''}at {path}: shapes "
                                     f"{x.shape} and {y.shape} differ")
            np.testing.assert_array_equal(x, y, err_msg=f"{msg + ': ' if msg else ''}at {path}")

    def assertNotAllEqual(self, a, b, msg=None):
        try:
            self.assertAllEqual(a, b)
        except AssertionError:
            return
        raise AssertionError(msg or f"the values are all equal: {a!r}")

    def assertAllInRange(self, target, lower_bound, upper_bound, open_lower_bound=False,
                         open_upper_bound=False):
        t = np.asarray(_value(target))
        low = t > lower_bound if open_lower_bound else t >= lower_bound
        high = t < upper_bound if open_upper_bound else t <= upper_bound
        bad = np.argwhere(~(low & high))
        if bad.size:
            raise AssertionError(
                f"{bad.shape[0]} of {t.size} elements are outside "
                f"{'(' if open_lower_bound else '['}{lower_bound}, {upper_bound}"
                f"{')' if open_upper_bound else ']'}: first at index "
                f"{tuple(int(i) for i in bad[0])}, {t[tuple(bad[0])].item()!r}")

    def assertAllGreater(self, a, comparison_target):
        self.assertTrue(np.all(np.asarray(_value(a)) > comparison_target),
                        f"not all elements are > {comparison_target}")

    def assertAllLess(self, a, comparison_target):
        self.assertTrue(np.all(np.asarray(_value(a)) < comparison_target),
                        f"not all elements are < {comparison_target}")

    def assertShapeEqual(self, np_array, tf_tensor, msg=None):
        self.assertEqual(tuple(np.shape(np_array)), tuple(np.shape(_value(tf_tensor))), msg)

    def assertDTypeEqual(self, target, expected_dtype):
        self.assertEqual(np.asarray(_value(target)).dtype, np.dtype(
            getattr(expected_dtype, "np", expected_dtype)))


def main(argv=None):
    """``tf.test.main()``: run the calling module's tests (``unittest.main``), exit with
    their status."""
    return unittest.main(module="__main__", argv=argv)


class Benchmark:
    """``tf.test.Benchmark``: a benchmark class whose methods call
    :meth:`report_benchmark`; each report is printed as one JSON line (and kept in
    ``self.reports``), as TensorFlow's benchmarks print theirs."""

    def report_benchmark(self, iters=None, cpu_time=None, wall_time=None, throughput=None,
                         extras=None, name=None, metrics=None):
        entry = {"name": name or type(self).__name__, "iters": iters, "cpu_time": cpu_time,
                 "wall_time": wall_time, "throughput": throughput, "extras": extras or {},
                 "metrics": metrics or []}
        self.__dict__.setdefault("reports", []).append(entry)
        print("benchmark:", json.dumps(entry, default=str), file=sys.stdout)
        return entry

    @staticmethod
    def time(fn, iters=10):
        """Mean wall time of ``fn()`` over ``iters`` calls, in seconds."""
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters


def is_gpu_available(cuda_only=False, min_cuda_compute_capability=None):
    """Whether a GPU device is available (``cuda_only``: a CUDA one)."""
    gpus = _devices.table.gpus
    return any(d.type == "cuda" for d in gpus) if cuda_only else bool(gpus)


def is_built_with_cuda():
    """Whether the CUDA backend is installed (its devices may still be unavailable)."""
    return any(getattr(b, "device_type", None) == "cuda" for b in _devices.table.backends)


def gpu_device_name():
    """The name of the first GPU device, or ``""``."""
    gpus = _devices.table.gpus
    return gpus[0].name if gpus else ""
