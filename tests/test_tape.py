"""GradientTape semantics (TensorFlow's), zero tape work with no tape, nested tapes."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.runtime import context as _tape


def test_no_tape_no_recording():
    assert _tape.tapes_active[0] == 0
    x = tf.constant([1.0, 2.0])
    y = x * x + x
    assert y.numpy().tolist() == [2.0, 6.0]


def test_records_only_watched_inputs():
    a = tf.constant(2.0)
    b = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(a)
        c = b * b          # unwatched: not recorded
        d = a * c
    assert len(t._records) == 1
    assert float(t.gradient(d, a)) == 9.0


def test_second_call_non_persistent_raises():
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    t.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent=True"):
        t.gradient(y, x)


def test_persistent_tape_many_calls():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = y * y
    assert float(t.gradient(y, x)) == 6.0
    assert float(t.gradient(z, x)) == 108.0


def test_nested_sources_and_unconnected():
    x = tf.constant(1.0)
    y = tf.constant(2.0)
    w = tf.constant(5.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, {"b": y, "a": w}])
        z = x * y
    g = t.gradient(z, [x, {"b": y, "a": w}])
    assert float(g[0]) == 2.0 and float(g[1]["b"]) == 1.0 and g[1]["a"] is None
    gz = t.gradient(z, w, unconnected_gradients="zero")
    assert float(gz) == 0.0
    with pytest.raises(ValueError):
        t.gradient(z, w, unconnected_gradients="maybe")


def test_output_gradients_and_list_targets():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    g = t.gradient(y, x, output_gradients=tf.constant([1.0, 10.0]))
    assert g.numpy().tolist() == [2.0, 40.0]
    g2 = t.gradient([y, x], x)
    assert g2.numpy().tolist() == [3.0, 5.0]


def test_variables_watched_automatically_and_not():
    v = tf.Variable(3.0)
    with tf.GradientTape() as t:
        y = v * v
    assert t.watched_variables() == (v,)
    assert float(t.gradient(y, v)) == 6.0
    with tf.GradientTape(watch_accessed_variables=False) as t:
        y = v * v
    assert t.gradient(y, v) is None
    frozen = tf.Variable(3.0, trainable=False)
    with tf.GradientTape() as t:
        y = frozen * 2.0
    assert t.watched_variables() == ()


def test_variable_assigned_between_reads():
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        a = v * 3.0
        v.assign(5.0)
        b = v * v
        y = a + b
    # d/dv of 3*v (first value) + v*v (second value) = 3 + 10
    assert float(t.gradient(y, v)) == 13.0


def test_stop_recording_and_reset():
    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with t.stop_recording():
            y = x * x
        z = x * 3.0
    assert t.gradient(y, x) is None
    assert float(t.gradient(z, x)) == 3.0
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        t.reset()
        t.watch(x)
        z = x * 5.0
    assert float(t.gradient(z, x)) == 5.0


def test_higher_order_nested_tapes():
    x = tf.constant(2.0)
    with tf.GradientTape() as t3:
        t3.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = x * x * x
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    assert (float(d1), float(d2), float(d3)) == (12.0, 12.0, 6.0)


def test_persistent_tape_records_its_own_gradient():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        g = t.gradient(y, x)
    assert float(t.gradient(g, x)) == 2.0


def test_broadcast_gradients_are_unbroadcast():
    x = tf.constant(np.ones((3, 1), np.float32))
    y = tf.constant(np.ones((1, 4), np.float32))
    with tf.GradientTape() as t:
        t.watch([x, y])
        z = x * y + x
    gx, gy = t.gradient(z, [x, y])
    assert gx.shape == (3, 1) and gx.numpy().ravel().tolist() == [8.0] * 3
    assert gy.shape == (1, 4) and gy.numpy().ravel().tolist() == [3.0] * 4


def test_integer_sources_get_none():
    i = tf.constant(3)
    with tf.GradientTape() as t:
        t.watch(i)
        y = i * i
    assert t.gradient(y, i) is None


def test_watch_rejects_non_tensors():
    with tf.GradientTape() as t:
        with pytest.raises(tf.errors.InvalidArgumentError, match="tf.constant"):
            t.watch(3.0)


def test_jacobians():
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    j = t.jacobian(y, x)
    assert np.allclose(j.numpy(), np.diag([2.0, 4.0, 6.0]))
    unrelated = tf.constant([1.0])
    assert t.jacobian(y, unrelated) is None
    xb = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape() as t:
        t.watch(xb)
        yb = xb * xb
    bj = t.batch_jacobian(yb, xb)
    assert bj.shape == (2, 2, 2)
    assert np.allclose(bj.numpy()[1], np.diag([6.0, 8.0]))


def test_tape_frees_records_after_gradient():
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    t.gradient(y, x)
    assert t._records == [] and t._watched == {}


def test_wrong_gradient_is_a_clear_error():
    from tapeflow.plugins import Library, register

    lib = Library("testing")
    bad = lib.define("wrong_count", inputs=("x", "y"), grad=lambda ctx, dy: (dy,))
    bad_shape = lib.define("wrong_shape", inputs=("x",),
                           grad=lambda ctx, dy: tf.constant([1.0, 2.0, 3.0]))
    lib.kernel(bad, "cpu")(lambda x, y: x + y)
    lib.kernel(bad_shape, "cpu")(lambda x: x * 2)

    register(lib, name="wrong-grads")
    x = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = bad(x, x)
        z = bad_shape(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="testing::wrong_count.*1 gradient"):
        t.gradient(y, x)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"testing::wrong_shape.*shape \(3,\)"):
        t.gradient(z, x)


def test_gradient_function_results_are_checked_and_converted():
    from tapeflow.plugins import Library, register

    lib = Library("testing")
    as_number = lib.define("grad_number", inputs=("x",), grad=lambda ctx, dy: [[3, 3]])
    wrong_dtype = lib.define("grad_dtype", inputs=("x",),
                             grad=lambda ctx, dy: tf.constant([1, 2], dtype=tf.int32))
    a_string = lib.define("grad_string", inputs=("x",), grad=lambda ctx, dy: "no")
    for op in (as_number, wrong_dtype, a_string):
        lib.kernel(op, "cpu")(lambda x: x * 2)

    register(lib, name="checked-grads")
    x = tf.constant([1.0, 2.0], device="cpu:0")
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        ys = [as_number(x), wrong_dtype(x), a_string(x)]
    g = t.gradient(ys[0], x)                  # a list of ints: a float32 tensor
    assert g.dtype == tf.float32 and g.numpy().tolist() == [3.0, 3.0]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"testing::grad_dtype.*int32 gradient for input 0 \('x'\)"):
        t.gradient(ys[1], x)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"testing::grad_string.*returned str 'no' for input 0"):
        t.gradient(ys[2], x)


def test_forward_mode_without_rules_points_at_library_jvp():
    from tapeflow.plugins import Library, register
    lib = Library("tape_nojvp")

    @lib.op()
    def wobble(x):
        """differentiable, but neither its gradient nor its JVP is written"""

    lib.kernel(wobble, "cpu", dtypes=("float32",))(np.sin)
    register(lib)
    x = tf.constant([1.0], device="cpu:0")
    with pytest.raises(tf.errors.NotDifferentiableError,
                       match="tape_nojvp::wobble.*Library.jvp, see docs/plugins.md"):
        with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0])):
            wobble(x)
