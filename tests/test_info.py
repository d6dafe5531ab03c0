"""``python -m tapeflow info``: the diagnostics command, run as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest


def _run(*args, env=None):
    # a clean TAPEFLOW_* environment (the root conftest sets TAPEFLOW_DEFAULT_DEVICE)
    e = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    e.update(env or {})
    r = subprocess.run([sys.executable, "-m", "tapeflow", *args], capture_output=True, text=True,
                       timeout=120, env=e)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def info_text():
    rc, out, err = _run("info")
    assert rc == 0, err
    return out


def test_info_versions(info_text):
    import numpy as np
    import pluggy

    import tapeflow as tf
    first = info_text.splitlines()[0]
    assert first.startswith(f"tapeflow {tf.__version__}")
    assert f"numpy {np.__version__}" in first and f"pluggy {pluggy.__version__}" in first
    assert "python 3." in first


def test_info_plugins(info_text):
    rows = [line.split() for line in info_text.splitlines() if line.startswith("  loaded ")]
    names = {r[1]: r for r in rows}
    assert "cpu_numpy" in names, info_text
    assert names["cpu_numpy"][2] == "tapeflow-cpu-numpy"
    assert "tapeflow-builtin-ops" in names


def test_info_devices(info_text):
    lines = info_text.splitlines()
    cpu = [line for line in lines if line.strip().startswith("cpu:0 ")]
    assert cpu and "smoke test: ok" in cpu[0], info_text
    # the default device (cpu:0, or a GPU where there is one) is marked, and named
    default = re.search(r"^  default device: (\S+)$", info_text, re.M).group(1)
    marked = [line for line in lines if line.strip().startswith(default + " ")]
    assert marked and "[default" in marked[0] and "smoke test: ok" in marked[0], info_text
    assert "numpy (device type 'cpu'): available" in info_text
    # a well-known device type is listed either as a device or as unavailable, with why
    assert "cuda:0" in info_text and "opencl:0" in info_text


def test_info_coverage_table(info_text):
    lines = info_text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("Kernel coverage"))
    header = lines[head + 1].split()
    assert header[0] == "op" and "cpu" in header
    col = header.index("cpu")
    rows = {line.split()[0]: line.split() for line in lines[head + 3:]
            if line.startswith("  ") and not line.startswith("  cpu:")}
    assert "Add" in rows and rows["Add"][col] not in ("-", "composite")
    assert "f32" in rows["Add"][col] or rows["Add"][col] == "any"
    assert any(line.startswith("  cpu: ") and " kernels," in line for line in lines)


def test_info_json():
    rc, out, err = _run("info", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["versions"]["tapeflow"] and data["versions"]["numpy"]
    plugins = {p["name"]: p for p in data["plugins"]}
    assert plugins["cpu_numpy"]["status"] == "loaded"
    assert plugins["cpu_numpy"]["distribution"] == "tapeflow-cpu-numpy"
    cpu = [d for be in data["backends"] for d in be["devices"] if d["name"] == "cpu:0"]
    assert cpu and cpu[0]["smoke_test"] == "ok"
    assert data["default_device"] == "cpu:0" or data["default_device"]
    add = data["coverage"]["ops"]["Add"]
    assert "cpu" in add["kernels"] and add["differentiable"] is True
    assert "cpu" in data["coverage"]["device_types"]


def test_info_reports_environment_and_filters_ops():
    rc, out, err = _run("info", "--json", "--ops", "Add",
                        env={"TAPEFLOW_PLUGINS": "no-such-plugin"})
    assert rc == 0, err
    data = json.loads(out)
    assert data["environment"] == {"TAPEFLOW_PLUGINS": "no-such-plugin"}
    assert list(data["coverage"]["ops"]) == ["Add"]
    assert {p["name"]: p["status"] for p in data["plugins"]}["cpu_numpy"] == "loaded"


def test_no_arguments_prints_usage():
    rc, out, err = _run()
    assert rc == 0
    assert out.startswith("usage: python -m tapeflow") and "info" in out


def test_unknown_command_is_an_error():
    rc, out, err = _run("bogus")
    assert rc == 2 and "invalid choice" in err


# --- issue 19: coverage only for what can run here; every plugin's ops ---------------------

@pytest.fixture(scope="module")
def info_plugins():
    """Two in-process plugins: one op with a gradient and kernels for cpu and for a
    device type no backend provides; a second plugin overriding its cpu kernel."""
    import warnings

    import numpy as np

    import tapeflow as tf
    from tapeflow.plugins import Library

    a = Library("infotest")

    @a.op()
    def twice(x, name=None):
        """2x."""

    @a.kernel(twice, "cpu", dtypes=("float32",))
    def _cpu(x):
        return x * 2

    @a.kernel(twice, "nodev", dtypes=("float64",))
    def _nodev(x):
        return x * 2

    @a.gradient(twice)
    def _twice_grad(ctx, dy):
        return dy * 2.0

    b = Library("infotest_b")
    tf.plugins.register(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tf.errors.PluginOverrideWarning)
        b.kernel(twice, "cpu", dtypes=("float32", "float64"), override=True)(
            lambda x: np.multiply(x, 2))
        tf.plugins.register(b)
    return twice


def test_info_lists_each_plugins_ops_kernels_gradient_and_overrides(info_plugins):
    from tapeflow.__main__ import collect, render
    data = collect("infotest::*", smoke=False)
    text = render(data)
    section = text[text.index("Plugin ops"):text.index("Kernel coverage")]
    assert "infotest::twice" in section
    assert "gradient: test_info.info_plugins.<locals>._twice_grad" in section.replace(
        "tests.test_info", "test_info")
    kernels = next(ln for ln in section.splitlines() if "kernels:" in ln)
    assert "cpu f32,f64" in kernels and "nodev f64" in kernels and "(not installed here)" in kernels
    assert "override: kernel on cpu" in section


def test_info_shows_coverage_only_for_device_types_that_can_run_here(info_plugins):
    from tapeflow.__main__ import collect, render
    data = collect("infotest::*", smoke=False)
    status = data["coverage"]["device_type_status"]
    assert status["nodev"] == "not installed" and status["cpu"] == "available"
    text = render(data)
    cov = text[text.index("Kernel coverage"):].splitlines()
    header = cov[1].split()
    assert "cpu" in header and "nodev" not in " ".join(header)
    assert any(ln.startswith("  nodev: no column") and "not installed" in ln for ln in cov)
    for dt, st in status.items():       # e.g. cuda without CuPy: hidden, with the reason
        assert (dt in header) == (st == "available"), (dt, st, header)
    full = render(data, all_device_types=True)
    header = full[full.index("Kernel coverage"):].splitlines()[1]
    assert "nodev (not installed)" in header
