"""tf.autodiff.ForwardAccumulator: the API, nesting with GradientTape (both ways),
Variables, tf.function, the bad-input contract, and which ops have no JVP rule of
their own (the double-VJP fallback), each with its reason. Every differentiable op's
JVP (real float64 samples) is checked on every device by
tests/conformance/test_conformance_forward_mode.py; complex JVPs here."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.ops.library import LIB

#: ops whose tangent comes from the double-VJP of their gradient rule, and why
FALLBACK_EXPLAINED = {
    "Cumprod": "its gradient's rule (TensorFlow's) is the cheapest zero-aware form",
    "Qr": "the forward rule needs triangular solves the gradient rule already composes",
    "Svd": "as Qr: the vectors' rule is the gradient's transposed (Townsend 2016)",
    "SigmoidCrossEntropyWithLogits": "a loss: its JVP through the gradient costs one extra "
                                     "elementwise pass",
    "SoftmaxCrossEntropyWithLogits": "a loss, as above",
    "SparseSoftmaxCrossEntropyWithLogits": "a loss, as above",
    "SparseTensorDenseMatMul": "bilinear in the values and the dense operand: the double-VJP "
                               "of its gradient (the op itself again) is its exact tangent",
}


def test_every_op_has_a_jvp_rule_or_is_explained():
    from tapeflow.runtime.dispatch import COPY          # the runtime's own op
    missing = {op.name for op in [*LIB.ops, COPY]
               if op.differentiable and op.grad is not None and op.jvp is None}
    assert missing == set(FALLBACK_EXPLAINED), missing ^ set(FALLBACK_EXPLAINED)


def test_jvp_of_a_mlp_matches_the_jacobian():
    rng = np.random.default_rng(0)
    w = tf.constant(rng.standard_normal((4, 3)))
    x = tf.constant(rng.standard_normal((2, 4)))
    v = tf.constant(rng.standard_normal((2, 4)))

    def f(x):
        return tf.nn.softmax(tf.tanh(tf.matmul(x, w)))
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = f(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y2 = f(x)
    jac = tape.jacobian(y2, x).numpy()                   # (2, 3, 2, 4)
    np.testing.assert_allclose(acc.jvp(y).numpy(), np.einsum("abcd,cd->ab", jac, v.numpy()),
                               rtol=1e-10)


def test_hessian_vector_products_forward_over_reverse_and_reverse_over_forward():
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    x = tf.constant([0.5, -1.0])
    v = tf.constant([1.0, 2.0], dtype=tf.float32)

    def f(x):
        ax = tf.reshape(tf.matmul(tf.constant(a, tf.float32), tf.reshape(x, [2, 1])), [2])
        return 0.5 * tf.reduce_sum(x * ax) + tf.reduce_sum(tf.sin(x))
    want = a @ v.numpy() - np.sin(x.numpy()) * v.numpy()
    with tf.autodiff.ForwardAccumulator(x, v) as acc:     # forward over reverse
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        g = tape.gradient(y, x)
    np.testing.assert_allclose(acc.jvp(g).numpy(), want, rtol=1e-5)
    with tf.GradientTape() as tape:                        # reverse over forward
        tape.watch(x)
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = f(x)
        jv = acc.jvp(y)
    np.testing.assert_allclose(tape.gradient(jv, x).numpy(), want, rtol=1e-5)


def test_variables_structures_and_unconnected():
    w = tf.Variable([1.0, 2.0])
    b = tf.constant(3.0)
    with tf.autodiff.ForwardAccumulator({"w": w, "b": b},
                                        {"w": tf.constant([1.0, 1.0]), "b": tf.constant(2.0)}) \
            as acc:
        y = tf.reduce_sum(w * w) + b
        z = tf.constant(1.0) * 2.0
    assert float(acc.jvp(y)) == 2 * 1 + 2 * 2 + 2
    assert acc.jvp(z) is None
    assert float(acc.jvp(z, unconnected_gradients="zero")) == 0.0
    assert [float(t) for t in acc.jvp([y, y])] == [8.0, 8.0]


def test_inside_tf_function():
    @tf.function
    def jvp(x, v):
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = tf.exp(x) * x
        return acc.jvp(y)
    x = tf.constant([0.0, 1.0])
    np.testing.assert_allclose(jvp(x, tf.ones([2])).numpy(), np.exp([0.0, 1.0]) * [1.0, 2.0],
                               rtol=1e-6)


def test_complex_jvps_match_finite_differences():
    z = np.array([1 + 2j, -0.5 + 0.3j, 2 - 1j])
    v = np.array([0.3 - 1j, 1 + 0.5j, -2 + 0.1j])
    for name, f_t, f_np in (
            ("abs", lambda t: tf.abs(t * t), lambda a: np.abs(a * a)),
            ("prod", lambda t: tf.reduce_prod(tf.exp(t) * t), lambda a: np.prod(np.exp(a) * a)),
            ("real_log", lambda t: tf.math.real(tf.math.log(t)) * tf.math.imag(t),
             lambda a: np.real(np.log(a)) * np.imag(a))):
        x = tf.constant(z)
        with tf.autodiff.ForwardAccumulator(x, tf.constant(v)) as acc:
            y = f_t(x)
        eps = 1e-6
        want = (f_np(z + eps * v) - f_np(z - eps * v)) / (2 * eps)
        np.testing.assert_allclose(acc.jvp(y).numpy(), want, rtol=1e-6, atol=1e-8,
                                   err_msg=name)


def test_nesting_and_later_changes_after_the_block():
    x = tf.constant(2.0)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(1.0)) as outer:
        with tf.autodiff.ForwardAccumulator(x, tf.constant(1.0)) as inner:
            y = x ** 3
        dy = inner.jvp(y)                                   # 3 x^2
    assert float(dy) == 12.0 and float(outer.jvp(dy)) == 12.0       # 6 x
    with tf.GradientTape() as tape:                          # reverse over forward, jvp late
        tape.watch(x)
        with tf.autodiff.ForwardAccumulator(x, tf.constant(1.0)) as acc:
            y = x ** 3
    assert float(tape.gradient(acc.jvp(y), x)) == 12.0
    z = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(z, tf.constant([1.0, 1.0])) as acc:
        y = z * z
    z[0] = 5.0                                               # after the block: not seen
    assert acc.jvp(y).numpy().tolist() == [2.0, 4.0]


def test_a_failed_replay_fails_again():
    @tf.custom_gradient
    def f(x):
        return x * 2.0, lambda dy: dy * 2.0
    z = tf.constant([1 + 1j], tf.complex64)
    acc = tf.autodiff.ForwardAccumulator(z, tf.constant([1 + 0j], tf.complex64))
    acc.__enter__()
    y = f(z) * z
    for _ in range(2):
        with pytest.raises(tf.errors.NotDifferentiableError, match="complex tangents"):
            acc.jvp(y)
    acc._recording and tf.runtime.context.pop_tape(acc)


def test_replay_runs_where_the_ops_ran():
    if not any(str(d).startswith("opencl") for d in tf.list_devices()):
        pytest.skip("no OpenCL device")
    with tf.device("opencl:0"):
        x = tf.constant([1.0, 2.0])
        t = tf.constant([1.0, 1.0])
    with tf.autodiff.ForwardAccumulator(x, t) as acc:
        y = tf.sin(x)
        c = y.to("cpu:0")                                    # a Copy: its own rule
    with tf.device("cpu:0"):
        np.testing.assert_allclose(acc.jvp(y).numpy(), np.cos([1.0, 2.0]), rtol=1e-6)
        np.testing.assert_allclose(acc.jvp(c).numpy(), np.cos([1.0, 2.0]), rtol=1e-6)


def test_bad_input_is_a_clear_error():
    x = tf.constant([1.0, 2.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="must match"):
        tf.autodiff.ForwardAccumulator(x, tf.constant([1.0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="one tangent per primal"):
        tf.autodiff.ForwardAccumulator([x, x], [x])
    with pytest.raises(tf.errors.InvalidArgumentError, match="float and complex"):
        tf.autodiff.ForwardAccumulator(tf.constant([1, 2]), tf.constant([1, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Tensors or Variables"):
        tf.autodiff.ForwardAccumulator([1.0], [1.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="given twice"):
        tf.autodiff.ForwardAccumulator([x, x], [x, x])
    v = tf.Variable([1.0, 2.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="given twice"):
        tf.autodiff.ForwardAccumulator([v, v], [x, x])
    with tf.autodiff.ForwardAccumulator(v, tf.constant([1.0, 0.0])) as acc:
        v.assign([3.0, 3.0])
    assert acc.jvp(v).numpy().tolist() == [1.0, 0.0]        # the Variable's own tangent
    with tf.autodiff.ForwardAccumulator(x, tf.ones([2])) as acc:
        y = x * 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="unconnected_gradients"):
        acc.jvp(y, unconnected_gradients="maybe")
