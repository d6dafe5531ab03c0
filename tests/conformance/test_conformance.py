"""The conformance suite: every OpSpec (``tapeflow.testing.specs``) on every device.

One test item per (spec, dtype, device) for the forward checks (contiguous and
non-contiguous inputs), per (spec, device) for gradients and the error contract,
and per (spec, device) for the traced check (the op inside ``tf.function``, in one
dtype: float32 where tested; ``TAPEFLOW_TRACED_DTYPES=all`` for every dtype); ids
read ``test_forward[add-float32-cpu:0]``. Choose devices with
``--tapeflow-device`` (default: all, absent ones skipped with the reason); select
the suite with ``-m tapeflow_conformance``. The machinery is
``tapeflow.testing.conformance``; a third-party backend or op plugin runs this
same file (adding its own specs to ``SPECS``).
"""

from __future__ import annotations

from tapeflow.testing import conformance

SPECS = conformance.collect_specs()


def pytest_generate_tests(metafunc):
    conformance.parametrize(metafunc, SPECS)


def test_forward(conformance_case):
    conformance_case.run()


def test_forward_noncontiguous(conformance_case):
    conformance_case.run()


def test_gradients(conformance_case):
    conformance_case.run()


def test_errors(conformance_case):
    conformance_case.run()


def test_traced(conformance_case):
    conformance_case.run()
