"""SciPy is the extra tapeflow[scipy]: without it everything works but the special
functions that need it, which fail naming the op and the extra; Sigmoid falls back
to a NumPy formula that agrees with SciPy's expit."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tapeflow.kernels.math import _sigmoid_formula

WITHOUT_SCIPY = """
import sys
sys.modules["scipy"] = None            # as if SciPy were not installed
import numpy as np
import tapeflow as tf
x = tf.constant([-30.0, -1.0, 0.0, 2.0, 40.0])
print(np.round(tf.sigmoid(x).numpy().astype(float), 6).tolist())
for call in (lambda: tf.math.erf(x), lambda: tf.random.truncated_normal([3])):
    try:
        call()
    except tf.errors.UnimplementedError as e:
        print(type(e).__name__, "tapeflow[scipy]" in str(e), "[Op:" in str(e))
f = tf.function(lambda v: tf.sigmoid(v) * 2.0 + 1.0)     # fusion without SciPy's ufuncs
print(np.round(f(x).numpy().astype(float), 5).tolist())
"""


def test_without_scipy_the_special_functions_name_the_extra():
    r = subprocess.run([sys.executable, "-c", WITHOUT_SCIPY], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == str([0.0, 0.268941, 0.5, 0.880797, 1.0]), r.stdout
    assert lines[1:3] == ["UnimplementedError True True"] * 2, r.stdout
    assert lines[3] == str([1.0, 1.53788, 2.0, 2.76159, 3.0]), r.stdout


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_sigmoid_formula_agrees_with_scipy(dtype):
    sp = pytest.importorskip("scipy.special")
    x = np.concatenate([np.linspace(-1000, 1000, 20001), [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                          1e-30, -1e-30, 88.7, -88.7, 745.0]])
    x = x.astype(dtype)
    got = _sigmoid_formula(np)(x)
    want = sp.expit(x)
    assert got.dtype == want.dtype
    # (below the smallest normal number SciPy flushes to 0 where the formula keeps
    # the denormal: both are right to within that)
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=np.finfo(dtype).tiny)
