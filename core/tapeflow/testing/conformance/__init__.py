"""The conformance suite: every :class:`~tapeflow.testing.opinfo.OpSpec` on every device.

Five kinds of checks, each a plain function raising ``AssertionError`` (usable
without pytest), and each also a *case* the pytest suite turns into one test item:

``forward`` (spec x dtype x device)
    every sample of that dtype, on the device, against ``spec.ref`` on the host
    (NumPy); result dtype, shape, device and values (tolerances per dtype,
    :data:`DEFAULT_TOL`, overridden by ``spec.tol``). Random ops are validated by
    ``spec.check(out, *args, **kwargs)`` instead: ``out`` is the host copy (NumPy
    arrays, a tuple for several outputs), and ``check`` runs inside
    ``tf.device(<device under test>)``; it raises AssertionError or returns False
    to fail.
``noncontiguous`` (spec x dtype x device)
    the same, once per layout of :data:`LAYOUTS` for samples with an array argument
    it applies to, every such argument given as a view in that layout: an
    ``"offset view"`` (rank >= 1: the data starts past its buffer's first element),
    ``"transposed"`` (rank >= 2: transposed and strided) and ``"broadcast (stride
    0)"`` (axis 0 of length >= 2 has stride 0; values: the first slice repeated, for
    the reference too). A failure names the layout; a layout a device cannot hold
    (its view ops copy) is skipped there.
``gradients`` (spec x device)
    every float64 sample through :func:`~tapeflow.testing.check_grads` to
    ``spec.grad_order``, w.r.t. ``sample.grad_argnums`` (default: float arrays).
``errors`` (spec x device)
    every :class:`ErrorSample` raises ``error`` with a message containing
    ``[Op:`` and the device name, in which the regular expression ``match`` is
    found (``re.search``).
``traced`` (spec x one dtype x device; :data:`TRACED_DTYPES`)
    ``spec.fn`` with the sample's kwargs bound, wrapped in :func:`tapeflow.function`
    and called three times: the tracing call, a replay with the same arguments
    (the Python function must not run again) and a replay with other values of the
    same signature (a second draw of the samples); each result compared like
    ``forward``, and the earlier results and the inputs must be unchanged at the
    end. Specs that cannot be traced are listed in :data:`UNTRACEABLE` with the
    reason (skipped, never silently). One dtype per spec (float32 when tested):
    the traced kind tests the function machinery, ``forward`` every dtype's kernel.
    A traced case costs about what a forward case costs, so all dtypes would double
    the forward time (measured on 2 cores, cpu:0 + opencl:0: forward 113 s, traced
    with every dtype 118 s, with one dtype 28 s, finding the same failures).

Which dtypes: the dtypes the op's kernel on that device type declares
(``spec.op``), or ``spec.dtypes`` (intersected with the kernel's when both
exist); a kernel declaring "any dtype" means every tapeflow dtype the samples
provide (``samples(dtype, rng)`` returning ``[]`` means "not for this dtype").

Run it for one spec without pytest::

    from tapeflow.testing import conformance
    conformance.check_spec(spec, devices=["cpu:0"])   # AssertionError on failure

or as a pytest suite in a third-party package (the file tapeflow uses itself)::

    from tapeflow.testing import conformance
    SPECS = conformance.collect_specs() + MY_SPECS
    def pytest_generate_tests(metafunc):
        conformance.parametrize(metafunc, SPECS)
    def test_forward(conformance_case): conformance_case.run()
    def test_forward_noncontiguous(conformance_case): conformance_case.run()
    def test_gradients(conformance_case): conformance_case.run()
    def test_errors(conformance_case): conformance_case.run()
    def test_traced(conformance_case): conformance_case.run()

The package, one concern per module (each importable on its own; everything above
is re-exported here, so ``from tapeflow.testing import conformance`` is all a suite
needs):

``samples``      dtypes under test, samples per dtype, tolerances
``layouts``      tensors on the device: contiguous and the non-contiguous layouts
``compare``      results against the reference (or the spec's ``check``)
``eager``        the ``forward``, ``noncontiguous``, ``gradients`` and ``errors`` checks
``traced``       the ``traced`` check and :data:`UNTRACEABLE`
``batched``      :func:`check_batched` (``tf.vectorized_map`` against a loop)
``cases``        :class:`Case`, :func:`cases`, :func:`check_spec`
``pytest_glue``  :data:`KINDS`, :func:`collect_specs`, :func:`parametrize`, known gaps
``opcheck``      :func:`opcheck`, :func:`edge_samples`
``devices``      :func:`unavailable_devices`, :data:`KNOWN_DEVICE_TYPES`
"""

from __future__ import annotations

from ..opinfo import ErrorSample, OpSpec, Sample
from ._common import SkipCase
from .batched import check_batched
from .cases import Case, cases, check_spec
from .compare import reference_as_result
from .devices import KNOWN_DEVICE_TYPES, unavailable_devices
from .eager import check_errors, check_forward, check_gradients, check_sample
from .layouts import (BROADCAST, LAYOUTS, OFFSET, TRANSPOSED, broadcast_values, layout_candidate,
                      noncontiguous_tensor)
from .opcheck import edge_samples, opcheck
from .pytest_glue import KINDS, collect_specs, gap_matches, parametrize
from .samples import DEFAULT_TOL, dtypes_under_test, samples_for, tolerance
from .traced import (TRACED_DTYPES, UNTRACEABLE, check_traced, check_traced_sample,
                     untraceable_reason)

__all__ = ["KNOWN_DEVICE_TYPES", "unavailable_devices", "DEFAULT_TOL", "Case", "SkipCase",
           "tolerance", "dtypes_under_test", "samples_for", "noncontiguous_tensor",
           "check_sample", "check_forward", "check_gradients", "check_errors", "check_spec",
           "check_batched",
           "cases", "collect_specs", "parametrize", "gap_matches", "KINDS", "opcheck",
           "check_traced", "check_traced_sample", "UNTRACEABLE", "TRACED_DTYPES",
           "untraceable_reason", "LAYOUTS", "OFFSET", "TRANSPOSED", "BROADCAST",
           "layout_candidate", "broadcast_values",
           "reference_as_result", "edge_samples",
           # re-exported for spec authors who import everything from here
           "Sample", "ErrorSample", "OpSpec"]
