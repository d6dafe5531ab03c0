"""Root pytest configuration shared by tests/ and the doctests in core/tapeflow.

The general tests and doctests state CPU results (printing, NumPy interop, seeds'
values), so they run with ``cpu:0`` as the default device even on a machine with a
GPU; device-specific suites (tests/conformance, tests/backends) pick their devices
explicitly. Set TAPEFLOW_DEFAULT_DEVICE yourself to run everything elsewhere.
"""

import os

os.environ.setdefault("TAPEFLOW_DEFAULT_DEVICE", "cpu:0")

import sys

import pytest


@pytest.fixture(autouse=True)
def _tf2_conventions_after_each_test():
    """A test that calls ``tf.enable_eager_execution()`` (TF 1's conventions for the whole
    process, as in TF 1) must not change what later tests in its worker get."""
    yield
    nn = sys.modules.get("tapeflow.ops.nn")
    if nn is not None and nn.dropout is nn.dropout_v1:
        nn.use_tf1_conventions(False)
