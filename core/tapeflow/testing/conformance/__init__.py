"""The conformance suite: every :class:`~tapeflow.testing.specs.OpSpec` on every device.

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

The package, one concern per module (everything above is re-exported here, so
``from tapeflow.testing import conformance`` is all a suite needs); the imports go one
way, ``samples`` <- ``checks`` <- ``suite`` <- this module:

``samples``  what a case runs: dtypes under test, samples per dtype, tolerances, the
             kernel of a spec's op, tensors on the device in each layout
``checks``   results against the reference (or the spec's ``check``) and the checks:
             ``forward``, ``noncontiguous``, ``gradients``, ``errors``, ``traced``
             (:data:`UNTRACEABLE`) and :func:`check_batched`
``suite``    the devices under test (:func:`devices_under_test`,
             :func:`unavailable_devices`), :class:`Case`, :func:`cases`,
             :func:`check_spec`, :func:`opcheck`, :func:`edge_samples`
this module  the pytest side: :data:`KINDS`, :func:`collect_specs`, known gaps
             (:func:`gap_matches`), :func:`parametrize`
"""

from __future__ import annotations

from ... import plugins
from ..specs import ErrorSample, OpSpec, Sample, all_specs
from .checks import (TRACED_DTYPES, UNTRACEABLE, check_batched, check_errors, check_forward,
                     check_gradients, check_sample, check_traced, check_traced_sample,
                     reference_as_result, untraceable_reason)
from .samples import (BROADCAST, DEFAULT_TOL, LAYOUTS, OFFSET, TRANSPOSED, SkipCase, _glob,
                      broadcast_values, dtypes_under_test, layout_candidate, noncontiguous_tensor,
                      samples_for, tolerance)
from .suite import (KNOWN_DEVICE_TYPES, Case, cases, check_spec, devices_under_test, edge_samples,
                    opcheck, resolve_devices, unavailable_devices)

__all__ = ["KNOWN_DEVICE_TYPES", "unavailable_devices", "resolve_devices", "devices_under_test",
           "DEFAULT_TOL", "Case", "SkipCase",
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


# --- the pytest side: test-function names of each kind, the specs to collect, known gaps as
# strict xfails, and parametrize() for pytest_generate_tests --------------------------------

#: pytest test-function name -> kind of case
KINDS = {
    "test_forward": "forward",
    "test_forward_noncontiguous": "noncontiguous",
    "test_gradients": "gradients",
    "test_errors": "errors",
    "test_traced": "traced",
}


def collect_specs(extra=()):
    """``tapeflow.testing.specs.all_specs()`` plus ``extra`` specs whose names are
    not already among them. Spec names are test ids: duplicates are an error."""
    specs = list(all_specs())
    seen = {}
    for s in specs:
        if s.name in seen:
            raise ValueError(f"two conformance specs are named {s.name!r} (ops {seen[s.name]!r} "
                             f"and {s.op!r}); spec names must be unique, they are test ids")
        seen[s.name] = s.op
    return specs + [s for s in extra if s.name not in seen]


def gap_matches(pattern, test_name):
    """Does a known-gap ``pattern`` match ``test_name`` (``test_forward[add-float16-cpu:0]``)?
    The pattern may also be given without the function name (``add-float16-*``)."""
    if _glob(pattern).fullmatch(test_name):
        return True
    if "[" in test_name and test_name.endswith("]"):
        return bool(_glob(pattern).fullmatch(test_name[test_name.index("[") + 1:-1]))
    return False


def parametrize(metafunc, specs, devices=None, known_gaps=None):
    """``pytest_generate_tests`` helper: parametrize ``conformance_case`` for the
    test functions named in :data:`KINDS`, over ``specs`` and the devices under test
    (``--tapeflow-device``, see :mod:`tapeflow.testing.pytest_plugin`). Known gaps
    become ``xfail(strict=True)``."""
    if "conformance_case" not in metafunc.fixturenames:
        return
    import pytest       # (pytest is not a dependency of tapeflow: imported when it runs)
    kind = KINDS.get(metafunc.function.__name__)
    if kind is None:
        raise ValueError(f"{metafunc.function.__name__}: conformance test functions must be "
                         f"named one of {sorted(KINDS)}")
    if devices is None:
        devices = devices_under_test(metafunc.config)
    if known_gaps is None:
        known_gaps = plugins.known_gaps()
    params = []
    fname = metafunc.function.__name__
    for c in cases(specs, devices, kind):
        marks = [pytest.mark.tapeflow_conformance]
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        else:
            test_name = f"{fname}[{c.id}]"
            for pat, reason in known_gaps.items():
                if gap_matches(pat, test_name):
                    marks.append(pytest.mark.xfail(strict=True, reason=f"known gap: {reason}"))
                    break
        params.append(pytest.param(c, marks=marks, id=c.id))
    metafunc.parametrize("conformance_case", params)
