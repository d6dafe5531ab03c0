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
