"""``tf.debugging``: checks that raise InvalidArgumentError naming the failed condition,
eagerly at once and inside tf.function at every call; the op placement log."""

import numpy as np
import pytest

import tapeflow as tf

D = tf.debugging


@pytest.mark.parametrize("check, x, y, holds", [
    (D.assert_equal, [1, 2], [1, 2], True), (D.assert_equal, [1, 2], [1, 3], False),
    (D.assert_none_equal, [1, 2], [3, 4], True), (D.assert_none_equal, [1, 2], [3, 2], False),
    (D.assert_less, [1.0, 2.0], 3.0, True), (D.assert_less, [1.0, 5.0], 3.0, False),
    (D.assert_less_equal, [1, 3], 3, True), (D.assert_less_equal, [4, 3], 3, False),
    (D.assert_greater, [4, 5], 3, True), (D.assert_greater, [4, 3], 3, False),
    (D.assert_greater_equal, [3], 3, True), (D.assert_greater_equal, [2], 3, False),
])
def test_comparisons_hold_or_raise_naming_the_first_failing_element(check, x, y, holds):
    if holds:
        assert check(tf.constant(x), y) is None
        return
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"my words: Condition x .* y "
                       rf"did not hold element-wise: x\[\d\] = .*\[in {check.__name__}\]"):
        check(tf.constant(x), y, message="my words")


def test_sign_checks_rank_type_and_near():
    D.assert_positive([1, 2])
    D.assert_non_negative(tf.zeros([3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"x\[1\] = -2"):
        D.assert_positive([1, -2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="x < 0"):
        D.assert_negative([-1, 0])
    D.assert_rank(tf.ones([2, 3]), 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"rank 1.*\[2, 3\]"):
        D.assert_rank(tf.ones([2, 3]), 1)
    D.assert_type(tf.ones([2]), tf.float32)
    with pytest.raises(TypeError, match="int32"):
        D.assert_type(tf.ones([2], tf.int32), tf.float32)
    D.assert_near(1.0, 1.0 + 1e-7)
    with pytest.raises(tf.errors.InvalidArgumentError, match="tolerance"):
        D.assert_near(1.0, 1.1)
    D.assert_near(1.0, 1.1, atol=0.2)


def test_check_numerics_returns_its_input_or_names_nan_and_inf():
    x = tf.constant([1.0, 2.0])
    assert D.check_numerics(x, "fine") is x
    with pytest.raises(tf.errors.InvalidArgumentError, match="loss : Tensor had NaN"):
        D.check_numerics(tf.constant([1.0, np.nan]), "loss")
    with pytest.raises(tf.errors.InvalidArgumentError, match="Inf"):
        D.check_numerics(tf.constant([np.inf]), "x")
    with pytest.raises(TypeError, match="floating"):
        D.check_numerics(tf.constant([1]), "x")


def test_assert_lists_its_data():
    D.Assert(tf.constant(True), [tf.constant([1, 2])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"assertion failed: \[\[1 2\]\]"):
        D.Assert(tf.constant([True, False]), [tf.constant([1, 2])])


def test_inside_tf_function_a_check_runs_at_every_call_not_once_at_the_trace():
    @tf.function
    def safe_log(x):
        D.assert_positive(x, message="log of a non-positive number")
        return tf.math.log(D.check_numerics(x, "x"))

    np.testing.assert_allclose(safe_log(tf.constant([1.0, 2.0])).numpy(), np.log([1.0, 2.0]),
                               rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="non-positive"):
        safe_log(tf.constant([1.0, -2.0]))          # same shape: the same trace checks
    with pytest.raises(tf.errors.InvalidArgumentError, match="x : Tensor had Inf"):
        safe_log(tf.constant([np.inf, 2.0]))


def test_mismatched_kinds_and_shapes_are_clear():
    with pytest.raises(TypeError, match="text with text"):
        D.assert_equal(tf.constant(["a"]), [1])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[2\] and \[3\] do not broadcast"):
        D.assert_equal(tf.constant([1, 2]), [1, 2, 3])


def test_the_placement_log_prints_each_op_and_stops(capsys):
    a = tf.ones([2, 2])
    D.set_log_device_placement(True)
    try:
        assert D.get_log_device_placement() is True
        tf.matmul(a, a)
    finally:
        D.set_log_device_placement(False)
    tf.matmul(a, a)
    err = capsys.readouterr().err
    assert err.count("Executing op MatMul in device /job:localhost/replica:0/task:0/"
                     "device:CPU:0") == 1
    assert D.get_log_device_placement() is False
