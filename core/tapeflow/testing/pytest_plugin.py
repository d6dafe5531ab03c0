"""tapeflow's pytest plugin (auto-loaded through the ``pytest11`` entry point ``tapeflow``).

What it gives any test suite, ours or a plugin author's:

* ``--tapeflow-device DEVICE`` (repeatable, or comma-separated; also the
  environment variable ``TAPEFLOW_TEST_DEVICES``): the devices under test. The
  default, ``all``, is every available device plus the well-known devices that
  are absent here (``cuda:0``, ``opencl:0``), which become skips naming the reason
  (backend library missing, no driver, plugin failed to load).
* the ``tf_device`` fixture: a device name (``"cpu:0"``), parametrised over the
  devices under test; test ids end in the device (``test_add[cpu:0]``).
* a report header listing the devices under test, the unavailable ones with their
  reasons, plugins that failed to load, and the number of known gaps.
* the ``tapeflow_conformance`` marker, carried by every conformance test
  (``-m tapeflow_conformance`` selects the suite).

Known gaps (``tapeflow.plugins.known_gaps()``, from the ``tapeflow_known_gaps``
hook) turn matching conformance tests into ``xfail(strict=True)``: a gap that
gets fixed shows up as a failure until the declaration is removed.
"""

from __future__ import annotations

import pytest

# The devices under test are the conformance suite's (its parametrize() needs them too);
# the names stay importable from here, where they were.
from .conformance import KNOWN_DEVICE_TYPES, resolve_devices, unavailable_devices  # noqa: F401
from .conformance import devices_under_test


def pytest_addoption(parser):
    group = parser.getgroup("tapeflow", "tapeflow devices and conformance suite")
    group.addoption(
        "--tapeflow-device", action="append", default=None, metavar="DEVICE",
        help="device to run tapeflow device tests on (repeatable or comma-separated, e.g. "
             "cpu:0,opencl:0; 'all' = every available device plus skips for the known "
             "unavailable ones). Default: $TAPEFLOW_TEST_DEVICES or 'all'.")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "tapeflow_conformance: a test of tapeflow's op conformance suite "
                   "(tapeflow.testing.conformance)")


def pytest_report_header(config):
    import tapeflow as tf
    import tapeflow.plugins
    devs = devices_under_test(config)
    ok = [n for n, r in devs if r is None]
    lines = []
    descr = []
    for n in ok:
        try:
            d = tf.runtime.devices.get_device(n)
            descr.append(f"{n} ({d.description})" if d.description else n)
        except Exception:
            descr.append(n)
    lines.append(f"tapeflow {tf.__version__}: testing on " + (", ".join(descr) or "no device"))
    for n, r in devs:
        if r is not None:
            lines.append(f"tapeflow: {n} unavailable, its tests are skipped: {r}")
    failed = [p for p in tapeflow.plugins.plugin_report() if p.status == "failed"]
    for p in failed:
        lines.append(f"tapeflow: plugin {p.name!r} ({p.distribution} {p.version}) failed: "
                     f"{p.reason}")
    try:
        gaps = tapeflow.plugins.known_gaps()
    except Exception as e:  # a broken hook must not hide the header
        lines.append(f"tapeflow: known gaps unavailable: {type(e).__name__}: {e}")
    else:
        if gaps:
            lines.append(f"tapeflow: {len(gaps)} known gap pattern(s) -> strict xfail")
    return lines


def pytest_generate_tests(metafunc):
    if "tf_device" not in metafunc.fixturenames:
        return
    for m in metafunc.definition.iter_markers("parametrize"):
        names = m.args[0] if m.args else m.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "tf_device" in names:
            return      # the test chose its devices itself
    params = []
    for name, reason in devices_under_test(metafunc.config):
        marks = () if reason is None else (pytest.mark.skip(reason=f"{name} unavailable: "
                                                                   f"{reason}"),)
        params.append(pytest.param(name, marks=marks, id=name))
    metafunc.parametrize("tf_device", params)


@pytest.fixture
def tf_device(request):
    """A device name (``"cpu:0"``) from the devices under test (``--tapeflow-device``);
    tests using it run once per device and are skipped, with the reason, on devices
    that are unavailable here."""
    return request.param  # pragma: no cover  (parametrized directly by the plugin)
