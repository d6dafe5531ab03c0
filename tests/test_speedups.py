"""The optional C fast path (``tapeflow.runtime._speedups``) and the pure-Python path
give the same results, and the suite's core runs without the C module (issue 20: "it
stays optional ... CI runs the suite both ways; the fallback lane may run a
representative subset").

* Operators on a Tensor and a Python scalar (`x * 2.0`, `a % 2`) take the C cache of
  0-d scalar tensors; every operator, dtype and awkward scalar (signed zeros, NaN,
  infinities, ints beyond int64, values that do not keep an int8 dtype, bools) must
  give what the Python path gives: same dtype, same values, same signs of zeros, or
  the same error type.
* ``test_the_pure_python_lane`` runs a representative subset of the suite with
  ``TAPEFLOW_PURE_PYTHON=1`` in a subprocess.
"""

from __future__ import annotations

import math
import operator
import os
import subprocess
import sys

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.ops import math as _m
from tapeflow.runtime import dispatch

BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
}
SCALARS = [0.0, -0.0, 2.0, -1.5, 1e300, math.inf, -math.inf, math.nan, 0, 2, -3, 127, 128,
           -129, 300, 2 ** 70, True]
DTYPES = ["float32", "float64", "int32", "int8", "uint8"]


def _outcome(fn):
    try:
        r = fn()
    except Exception as e:                  # the error type is what must agree
        return ("error", type(e).__name__)
    a = r.numpy()
    return ("ok", r.dtype.name, a.tolist(), np.signbit(a).tolist() if a.dtype.kind == "f"
            else None)


def _ref(opname, x, s, reverse):
    op = {"add": "Add", "sub": "Sub", "mul": "Mul", "truediv": "RealDiv",
          "floordiv": "FloorDiv", "mod": "FloorMod", "pow": "Pow"}[opname]
    from tapeflow.runtime.registry import OPS as REG
    od = REG[op]
    return (lambda: dispatch.binary(od, s, x)) if reverse else (lambda: dispatch.binary(od, x, s))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opname", list(BINARY))
def test_scalar_operators_agree_with_the_python_path(opname, dtype):
    fn = BINARY[opname]
    x = tf.constant(np.array([3, -2, 0], dtype=dtype) if dtype != "uint8" else
                    np.array([3, 2, 0], dtype=dtype))
    bad = []
    for s in SCALARS:
        for reverse in (False, True):
            fast = _outcome(lambda: fn(s, x) if reverse else fn(x, s))
            slow = _outcome(_ref(opname, x, s, reverse))
            if fast != slow and not (fast[0] == slow[0] == "ok" and fast[1] == slow[1] and
                                     np.allclose(fast[2], slow[2], equal_nan=True) and
                                     fast[3] == slow[3]):
                bad.append(f"{'s ' + opname + ' x' if reverse else 'x ' + opname + ' s'} "
                           f"with s={s!r}: operator {fast} vs dispatch.binary {slow}")
    assert not bad, "\n".join(bad)


def test_a_negative_zero_scalar_keeps_its_sign():
    """0.0 == -0.0 and they hash alike: the scalar caches (C and Python) must not hand
    back the tensor of one for the other."""
    x = tf.constant([1.0, -1.0])
    for _ in range(2):                       # the second round hits the caches
        assert np.signbit((x * 0.0).numpy()).tolist() == [False, True]
        assert np.signbit((x * -0.0).numpy()).tolist() == [True, False]
        assert np.signbit((-0.0 * x).numpy()).tolist() == [True, False]
        from tapeflow.runtime.registry import OPS as REG
        assert np.signbit(dispatch.binary(REG["Mul"], x, -0.0).numpy()).tolist() == [True, False]


def test_the_c_module_is_in_use_unless_disabled():
    if os.environ.get("TAPEFLOW_PURE_PYTHON", "") not in ("", "0"):
        assert dispatch.speedups is None
        return
    try:
        from tapeflow.runtime import _speedups  # noqa: F401
    except ImportError:
        pytest.skip("the C module was not built here (no compiler): the pure-Python path runs")
    assert dispatch.speedups is not None
    # the operators are the C base type's number slots, not Python methods
    assert tf.Tensor.__mro__[1] is _speedups.TensorBase
    assert "__add__" not in tf.Tensor.__dict__ and "__bool__" not in tf.Tensor.__dict__


LANE = ["tests/test_speedups.py", "tests/test_tape.py", "tests/test_tensor_variable.py",
        "tests/test_seeds.py", "tests/test_function.py", "tests/test_dtypes.py",
        "tests/training/test_train.py", "tests/test_tape_watch.py", "tests/test_forward_mode.py",
        "tests/test_reductions_fast.py", "tests/test_plugin_api.py", "tests/test_bad_input.py",
        "tests/test_vectorized_map.py", "tests/test_value_types.py", "tests/test_hooks.py",
        "tests/test_nest.py", "tests/test_function_nest.py",
        "tests/training/test_layers_models.py", "tests/test_tape_reentry.py",
        "tests/test_bad_input_round4.py"]


def test_the_pure_python_lane():
    """A representative subset of the suite with TAPEFLOW_PURE_PYTHON=1 (issue 33: ~1 min
    serially, against ~9 min for the whole suite twice): the operators, the tape and its
    watch rules, Tensors and Variables, the seeds' examples, tf.function, forward mode,
    vectorized_map, reductions, the plugin API, bad input, dtypes, tf.nest, layers and
    training. tests/test_native_differential.py compares the two paths program by
    program."""
    if os.environ.get("TAPEFLOW_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("this is the lane itself")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TAPEFLOW_PURE_PYTHON="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        "-n", "0", *LANE], cwd=root, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_int_of_a_non_finite_tensor_is_a_clear_error(value, shape):
    """int() of NaN or infinity: NumPy's bare ValueError/OverflowError named neither
    the conversion nor the device (both paths: the C slot falls back to the Python
    method for the error); float() and bool() of them are fine."""
    t = tf.constant(np.full(shape, value, np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"int\(\) of a float32 tensor holding -?(nan|inf).*is_finite.*cpu:0"):
        int(t)
    assert math.isnan(float(t)) if math.isnan(value) else float(t) == value
    assert bool(t) is True
