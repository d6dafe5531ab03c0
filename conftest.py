"""Root pytest configuration shared by tests/ and the doctests in core/tapeflow.

The general tests and doctests state CPU results (printing, NumPy interop, seeds'
values), so they run with ``cpu:0`` as the default device even on a machine with a
GPU; device-specific suites (tests/conformance, tests/backends) pick their devices
explicitly. Set TAPEFLOW_DEFAULT_DEVICE yourself to run everything elsewhere.
"""

import os

os.environ.setdefault("TAPEFLOW_DEFAULT_DEVICE", "cpu:0")
