"""Printed examples must not depend on the CPU.

NumPy's float32 math (exp, log, log10, cosh, sin, ...) runs SIMD kernels chosen per CPU
when NumPy is imported, and they can differ in the last bit: a newer AVX-512 CPU
printed ``cosh(1.) = 1.5430807`` where a doctest expected ``1.5430806``, and
``log10(1000.) = 3.0000002``. So every example that prints a transcendental result
prints fewer digits (``tf.round(y * 1e4) / 1e4``) or uses inputs whose result is exact
everywhere (``exp(0.)``, ``log(1.)``).

The main suite runs the examples with NumPy's dispatch fully on. This runs them again
in a subprocess with NumPy limited to lower SIMD levels: first with every dispatch
target this CPU has beyond the build's baseline switched off
(``NPY_DISABLE_CPU_FEATURES``, the names of ``__cpu_dispatch__`` that are on here and
not in ``__cpu_baseline__``; NumPy refuses a baseline name), then with each higher
level switched off in turn (on an AVX-512 x86: the AVX2 level). An example whose output
changes with the kernel fails here, not first on a user's machine.

What runs: the doctests (``>>>`` examples of the packages that pyproject's testpaths
collect), the Python blocks of the documents whose ``# tf.Tensor(...)`` comments
``tests/test_docs.py`` compares with what they print, and the backend contract's
document example, whose first printed line a test compares.

(On a CPU with no dispatch target beyond NumPy's baseline every run is the main
suite's, and this test says so by skipping.)
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from test_docs import RUN, _where

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: the packages whose docstrings pytest collects as doctests (pyproject's testpaths)
DOCTEST_PATHS = ["core/tapeflow", "plugins/gelu/tapeflow_gelu"]
#: tests that compare what a documented example prints, digit for digit
PRINTED_EXAMPLES = [
    "tests/test_backend_contract.py::test_the_fourth_backend_of_the_docs_passes_conformance",
]


def _doc_blocks_with_stated_output():
    """test_docs's node ids of the Python blocks whose comments state a printed tensor."""
    return [f"tests/test_docs.py::test_runnable_block_runs[{_where(doc, line)}]"
            for doc, line, lang, _, body in RUN
            if lang in ("python", "py") and re.search(r"# tf\.Tensor\(", body, re.M)]


def _dispatched_features_on():
    """NumPy's dispatch targets that this CPU supports beyond the build's baseline, in
    NumPy's order (lowest first): the names ``NPY_DISABLE_CPU_FEATURES`` accepts."""
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:         # NumPy < 2
        from numpy.core import _multiarray_umath as mu
    baseline = set(mu.__cpu_baseline__)
    return [f for f in mu.__cpu_dispatch__ if mu.__cpu_features__.get(f) and f not in baseline]


FEATURES = _dispatched_features_on()
#: what each run switches off: everything (the baseline kernels), then all but the
#: lowest target, ... (the full dispatch is the main suite's run)
LEVELS = [FEATURES[i:] for i in range(len(FEATURES))]


def _env(disabled):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env["NPY_DISABLE_CPU_FEATURES"] = " ".join(disabled)
    env["TAPEFLOW_DEFAULT_DEVICE"] = "cpu:0"       # NumPy's kernels: the CPU backend
    return env


@pytest.mark.parametrize("disabled", LEVELS or [[]],
                         ids=[f"without-{'-'.join(d)}" for d in LEVELS] or ["none"])
def test_printed_examples_pass_with_numpys_simd_dispatch_limited(disabled):
    if not disabled:
        pytest.skip(f"NumPy {np.__version__} dispatches nothing beyond its baseline on this CPU")
    env = _env(disabled)
    # the variable took: none of the disabled targets is on in the subprocess
    probe = subprocess.run(
        [sys.executable, "-W", "error::ImportWarning", "-c",
         "from numpy._core._multiarray_umath import __cpu_features__ as f;"
         f"print([k for k in {disabled!r} if f[k]])"],
        capture_output=True, text=True, env=env, timeout=60)
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stdout + probe.stderr
    docs = _doc_blocks_with_stated_output()
    assert len(docs) >= 5, docs                    # the selection itself works
    # (one process: two xdist workers would each import and collect everything again,
    # ~40% more CPU time, on cores the outer run's workers already keep busy)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "-p", "no:randomly", *DOCTEST_PATHS, *docs, *PRINTED_EXAMPLES],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    tail = r.stdout[-6000:] + r.stderr[-2000:]
    assert r.returncode == 0, f"NPY_DISABLE_CPU_FEATURES={' '.join(disabled)!r}:\n{tail}"
    last = r.stdout.strip().splitlines()[-1]
    assert " passed" in last, tail
