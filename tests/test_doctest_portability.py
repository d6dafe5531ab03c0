"""Doctests must not depend on the CPU: NumPy's float32 math (cosh, log10, exp, ...) runs
SIMD kernels chosen per CPU at start-up, which can differ in the last bit (a newer CPU
printed ``cosh(1.) = 1.5430807`` where the doctest expected ``1.5430806``). The main
suite runs the doctests with NumPy's dispatch fully on; this runs them again with every
dispatchable feature this CPU has switched off (``NPY_DISABLE_CPU_FEATURES``), so the
baseline kernels run: an example whose output changes fails here, not on a user's
machine. (On a CPU with no dispatchable feature beyond NumPy's baseline both runs are
the same and this test says so by skipping.)"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: the packages whose docstrings pytest collects as doctests (pyproject's testpaths)
DOCTEST_PATHS = ["core/tapeflow", "plugins/gelu/tapeflow_gelu"]


def _dispatched_features_on():
    """NumPy's dispatch targets this CPU supports beyond the build's baseline: the names
    ``NPY_DISABLE_CPU_FEATURES`` accepts (it refuses baseline features)."""
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:         # NumPy < 2
        from numpy.core import _multiarray_umath as mu
    baseline = set(mu.__cpu_baseline__)
    return [f for f in mu.__cpu_dispatch__ if mu.__cpu_features__.get(f) and f not in baseline]


def test_doctests_pass_with_numpys_simd_dispatch_limited_to_the_baseline():
    feats = _dispatched_features_on()
    if not feats:
        pytest.skip(f"NumPy {np.__version__} dispatches nothing beyond its baseline on this CPU")
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(feats)}
    probe = subprocess.run(
        [sys.executable, "-c", "from numpy._core._multiarray_umath import __cpu_features__ as f;"
                               f"print([k for k in {feats!r} if f[k]])"],
        capture_output=True, text=True, env=env, timeout=60)
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stdout + probe.stderr
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "-p", "no:randomly", *DOCTEST_PATHS],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    tail = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, f"doctests with NPY_DISABLE_CPU_FEATURES={feats}:\n{tail}"
    assert " passed" in r.stdout.splitlines()[-1], tail
