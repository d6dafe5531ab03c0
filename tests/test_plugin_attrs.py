"""A plugin op's attributes (issue 19, "Attributes"): typed from their defaults (or
``attr_types=``), validated before any kernel runs, eagerly and under ``tf.function``
alike; the error names the op, the attr, the expected and the received type."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidTypeError
from tapeflow.plugins import Library, register

lib = Library("attrdoc")
CALLS = []


@lib.op()
def scaled_sum(x, scale=1.0, axis=None, keepdims=False, mode="sum", name=None):
    """A reduction with typed attrs: float, untyped-but-no-tensor, bool, str."""


@lib.kernel(scaled_sum, "cpu", dtypes=("float32", "float64"))
def _scaled_sum(x, scale, axis, keepdims, mode):
    CALLS.append((scale, axis, keepdims, mode))
    return (np.sum(x, axis=axis, keepdims=keepdims) * scale).astype(x.dtype)


register(lib)

X = np.arange(6.0, dtype=np.float32).reshape(2, 3)

BAD = [
    ({"scale": "2"}, "attr 'scale' of attrdoc::scaled_sum must be a real number, got str '2'"),
    ({"scale": True}, "must be a real number, got bool True"),
    ({"keepdims": 1}, "attr 'keepdims' of attrdoc::scaled_sum must be a bool, got int 1"),
    ({"mode": 3}, "attr 'mode' of attrdoc::scaled_sum must be a string, got int 3"),
    ({"scale": tf.constant(2.0)},
     "attr 'scale' of attrdoc::scaled_sum must be a Python value (a real number), "
     "got a Tensor of dtype float32 and shape []"),
    ({"axis": tf.constant([0])},
     "attr 'axis' of attrdoc::scaled_sum must be a Python value (not a tensor or an array), "
     "got a Tensor of dtype int32 and shape [1]"),
    ({"axis": np.array(1)}, "got a ndarray of dtype int64 and shape []"),
]


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("bad,message", BAD, ids=[next(iter(b)) + ":" + type(next(iter(b.values()))).__name__
                                                  for b, _ in BAD])
def test_a_bad_attr_is_refused_before_the_kernel_runs(bad, message, traced):
    x = tf.constant(X)
    call = (lambda x: scaled_sum(x, **bad))
    if traced:
        call = tf.function(call)
    del CALLS[:]
    with pytest.raises(InvalidTypeError) as e:
        call(x)
    assert message in str(e.value) and "[Op:attrdoc::scaled_sum]" in str(e.value)
    assert CALLS == []                          # no kernel ran


def test_a_tensor_argument_of_a_traced_function_as_an_attr_is_the_same_error():
    f = tf.function(lambda x, s: scaled_sum(x, scale=s))
    with pytest.raises(InvalidTypeError, match="must be a Python value .a real number., got a Tensor"):
        f(tf.constant(X), tf.constant(2.0))
    np.testing.assert_allclose(f(tf.constant(X), 2.0).numpy(), X.sum() * 2)


def test_good_attrs_reach_the_kernel_as_given():
    del CALLS[:]
    y = scaled_sum(tf.constant(X), scale=2, axis=1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), X.sum(axis=1, keepdims=True) * 2)
    assert CALLS == [(2, 1, True, "sum")]
    assert scaled_sum.op.attr_types == {"scale": "float", "axis": "any", "keepdims": "bool",
                                        "mode": "str"}


# --- issue 30: the error names the device and what to do; an op's own check first --------

def test_the_attr_error_names_the_device_and_what_to_do():
    with pytest.raises(InvalidTypeError) as e:
        scaled_sum(tf.constant(X, device="cpu:0"), scale="2")
    assert str(e.value) == (
        "attr 'scale' of attrdoc::scaled_sum must be a real number, got str '2'; pass such a "
        "value as scale (the default is 1.0) [Op:attrdoc::scaled_sum] on cpu:0")
    with pytest.raises(InvalidTypeError, match=r"got int 1; pass such a value as "
                                               r"keepdims \(the default is False\) "
                                               r"\[Op:.*\] on cpu:0$"):
        scaled_sum.op(tf.constant(X, device="cpu:0"), keepdims=1)      # OpDef.__call__


def test_the_attr_error_names_the_device_the_op_would_run_on():
    devices = tf.config.list_devices()
    other = next((d for d in devices if not d.startswith("cpu")), None)
    x = tf.constant(X, device="cpu:0")
    with tf.device("cpu:0"):
        with pytest.raises(InvalidTypeError, match=r"\] on cpu:0$"):
            scaled_sum(x, mode=3)
    if other is None:
        pytest.skip(f"only {devices} here: the scope case needs a second device")
    with tf.device(other):                          # a scope places the op, as dispatch does
        with pytest.raises(InvalidTypeError, match=rf"\] on {other}$"):
            scaled_sum(x, mode=3)


old = Library("attrold")
SEEN = []


def _own_check(op, tensors, attrs, device):
    SEEN.append(("check", attrs["steps"]))
    steps = attrs["steps"]
    if isinstance(steps, bool) or not isinstance(steps, (int, float)) or steps != int(steps):
        raise tf.errors.InvalidArgumentError(f"steps must be a whole number, got {steps!r}")


@old.op(check=_own_check)
def shift(x, steps=1, name=None):
    """x + steps, with the op's own check of steps (as plugins wrote before 0.2)."""


@old.kernel(shift, "cpu", dtypes=("float32", "float64"))
def _shift(x, steps):
    SEEN.append(("kernel", steps))
    return x + np.asarray(steps, x.dtype)


def _crashing_check(op, tensors, attrs, device):
    if attrs["width"] > 3:          # TypeError for a str: a check written for ints only
        raise tf.errors.InvalidArgumentError("width must be at most 3")


@old.op(check=_crashing_check)
def widen(x, width=1, name=None):
    """x * width."""


@old.kernel(widen, "cpu", dtypes=("float32", "float64"))
def _widen(x, width):
    return x * np.asarray(width, x.dtype)


def _declared_check(op, tensors, attrs, device):
    # (records the call: the core's validation of declared attr types runs first; an
    # AssertionError here was a plain exception for any other registry user, e.g. the
    # fuzzer calling every op of OPS with bad inputs in the same process)
    SEEN.append(("declared check", attrs["steps"]))


@old.op(check=_declared_check, attr_types={"steps": "int"})
def shift_declared(x, steps=1, name=None):
    """A check and declared attr_types: the core's validation runs first."""


register(old)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_an_ops_own_check_runs_before_the_kinds_read_from_defaults(traced):
    call = (lambda x, **kw: shift(x, **kw))
    if traced:
        call = tf.function(call)
    del SEEN[:]
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        call(tf.constant([1.0], device="cpu:0"), steps="a")
    assert str(e.value) == "steps must be a whole number, got 'a' [Op:attrold::shift] on cpu:0"
    assert SEEN == [("check", "a")]                 # the check ran, the kernel did not
    with pytest.raises(tf.errors.InvalidArgumentError, match="got 2.5 .Op:attrold::shift. on"):
        call(tf.constant([1.0], device="cpu:0"), steps=2.5)


def test_a_value_the_check_accepts_but_the_default_kind_does_not_warns_and_runs():
    del SEEN[:]
    with pytest.warns(DeprecationWarning) as w:
        y = shift(tf.constant([1.0], device="cpu:0"), steps=2.0)
    np.testing.assert_array_equal(y.numpy(), [3.0])
    assert SEEN == [("check", 2.0), ("kernel", 2.0)]
    (msg,) = [str(r.message) for r in w]
    assert msg.startswith("attrold::shift: attr 'steps' got float 2.0, which the op's check "
                          "accepts but the kind read from its default (int) does not. "
                          "tapeflow 0.3 refuses it")
    assert "attr_types={'steps': ...}" in msg and msg.endswith("on cpu:0")
    assert w[0].filename == __file__                # attributed to the caller's line
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # a value of the default's kind: silent
        np.testing.assert_array_equal(shift(tf.constant([1.0]), steps=3).numpy(), [4.0])


def test_a_tensor_attr_the_check_accepts_is_refused_after_it():
    with pytest.raises(InvalidTypeError, match=r"attr 'width' of attrold::widen must be a "
                                               r"Python value .* on cpu:0$"):
        widen(tf.constant([1.0], device="cpu:0"), width=np.array(2))     # (2 > 3 is False)


def test_a_check_that_crashes_on_a_wrong_kind_gives_the_cores_error():
    with pytest.raises(InvalidTypeError) as e:
        widen(tf.constant([1.0], device="cpu:0"), width="wide")
    assert str(e.value) == ("attr 'width' of attrold::widen must be an int, got str 'wide'; "
                            "pass such a value as width (the default is 1) "
                            "[Op:attrold::widen] on cpu:0")
    assert isinstance(e.value.__context__, TypeError)       # what the check tripped over
    with pytest.raises(tf.errors.InvalidArgumentError, match="width must be at most 3"):
        widen(tf.constant([1.0], device="cpu:0"), width=4)


def test_declared_attr_types_are_validated_before_the_check():
    SEEN.clear()
    with pytest.raises(InvalidTypeError, match=r"attr 'steps' of attrold::shift_declared must "
                                               r"be an int, got float 2.0.* on cpu:0$"):
        shift_declared(tf.constant([1.0], device="cpu:0"), steps=2.0)
    assert SEEN == []                                       # the check never ran
    assert shift_declared.op.check is _declared_check and not shift_declared.op.attrs_after_check
    assert shift.op.check.__wrapped__ is _own_check and shift.op.attrs_after_check


var = Library("attrvar")


@var.op()
def cat(*values, axis=0, name=None):
    """A variadic op with a typed attr."""


@var.kernel(cat, "cpu", dtypes=("float32", "float64"))
def _cat(*values, axis):
    return np.concatenate(values, axis=axis)


register(var)


@pytest.mark.parametrize("values", ["list", "one 0-d tensor"])
def test_a_variadic_ops_attr_error_names_the_device_too(values):
    x = tf.constant([1.0], device="cpu:0")
    arg = [x, x] if values == "list" else tf.constant(1.0, device="cpu:0")
    with pytest.raises(InvalidTypeError) as e:
        cat(arg, axis="a")
    assert str(e.value) == ("attr 'axis' of attrvar::cat must be an int, got str 'a'; pass "
                            "such a value as axis (the default is 0) [Op:attrvar::cat] on cpu:0")
    np.testing.assert_array_equal(cat([x, x]).numpy(), [1.0, 1.0])
