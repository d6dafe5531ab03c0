"""tf.vectorized_map: batching rules, fallbacks, errors, and what uses it (Jacobians,
per-example gradients, tf.hessians), eagerly, traced and differentiated, on cpu and
opencl. The per-op rules are checked against loops by
tests/conformance/test_conformance_batching.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.ops.batching import NO_RULE
from tapeflow.plugins import Library
from tapeflow.tracing import vectorize as vz

DEVICES = [d.name for d in tf.list_devices() if d.type in ("cpu", "opencl")]
RNG = np.random.default_rng(0)


def _loop(fn, *xs):
    return np.stack([np.asarray(fn(*[tf.constant(x[i]) for x in xs]))
                     for i in range(len(xs[0]))])


def _mlp_params():
    w1 = tf.Variable(RNG.standard_normal((8, 16)).astype(np.float32) * 0.3)
    b1 = tf.Variable(np.zeros(16, np.float32))
    w2 = tf.Variable(RNG.standard_normal((16, 3)).astype(np.float32) * 0.3)
    return [w1, b1, w2]


def _loss(params, x, y):
    w1, b1, w2 = params
    h = tf.nn.relu(tf.matmul(x, w1) + b1)
    logits = tf.matmul(h, w2)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


@pytest.mark.parametrize("dev", DEVICES)
def test_matches_a_loop_on_each_device(dev):
    x = RNG.standard_normal((5, 4, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 2)).astype(np.float32)

    def f(e):
        h = tf.tanh(tf.matmul(e, tf.constant(w)))
        return tf.nn.softmax(h, axis=0) * tf.reduce_max(h) + tf.transpose(h)[0][:, None]
    with tf.device(dev):
        got = tf.vectorized_map(f, tf.constant(x))
        assert got.device == tf.runtime.devices.get_device(dev).name
        want = np.stack([f(tf.constant(x[i])).numpy() for i in range(5)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_structures_in_and_out():
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    b = RNG.standard_normal((4,)).astype(np.float32)
    out = tf.vectorized_map(lambda e: {"s": e["a"] * e["b"], "t": (e["b"], tf.reduce_sum(e["a"]))},
                            {"a": a, "b": b})
    np.testing.assert_allclose(out["s"].numpy(), a * b[:, None], rtol=1e-6)
    np.testing.assert_allclose(out["t"][0].numpy(), b)
    np.testing.assert_allclose(out["t"][1].numpy(), a.sum(1), rtol=1e-5)


def test_unbatched_results_are_broadcast_to_the_batch():
    c = tf.constant([1.0, 2.0])
    out = tf.vectorized_map(lambda e: (c * 2.0, tf.shape(e)), tf.zeros((3, 5)))
    np.testing.assert_array_equal(out[0].numpy(), [[2.0, 4.0]] * 3)
    np.testing.assert_array_equal(out[1].numpy(), [[5]] * 3)


def test_inside_tf_function_and_replays():
    calls = [0]

    @tf.function
    def f(x, w):
        calls[0] += 1
        return tf.vectorized_map(lambda e: tf.reduce_sum(tf.matmul(e[None], w)), x)
    w = tf.constant(RNG.standard_normal((3, 2)).astype(np.float32))
    for _ in range(3):
        x = RNG.standard_normal((6, 3)).astype(np.float32)
        np.testing.assert_allclose(f(tf.constant(x), w).numpy(), (x @ w.numpy()).sum(1),
                                   rtol=1e-5)
    assert calls[0] == 1
    # the batched ops are in the graph: no per-example loop
    assert f.graph.ops().count("MatMul") == 1


def test_gradients_flow_through_vectorized_map():
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    w = tf.Variable(RNG.standard_normal((3,)).astype(np.float32))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.vectorized_map(lambda e: tf.sin(tf.reduce_sum(e * w)), x))
    g = tape.gradient(y, w)
    want = (np.cos(x.numpy() @ w.numpy())[:, None] * x.numpy()).sum(0)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5)


def test_forward_mode_through_vectorized_map():
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    v = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = tf.vectorized_map(lambda e: tf.reduce_sum(e ** 2), x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), (2 * x.numpy() * v.numpy()).sum(1),
                               rtol=1e-5)


def test_random_ops_draw_per_example():
    tf.random.set_seed(1)
    out = tf.vectorized_map(lambda e: e + tf.random.normal((3,)), tf.zeros((4, 3))).numpy()
    assert len({tuple(r) for r in out.round(6)}) == 4


def test_python_control_flow_falls_back_to_a_loop_with_a_warning():
    def f(e):
        return e * 2.0 if float(tf.reduce_sum(e)) > 0 else -e
    x = np.array([[1.0, 2.0], [-1.0, -3.0]], np.float32)
    vz.FALLBACK_OPS.discard("the function")
    with pytest.warns(vz.VectorizationWarning, match="the function.*once per example"):
        out = tf.vectorized_map(f, x)
    np.testing.assert_array_equal(out.numpy(), [[2.0, 4.0], [1.0, 3.0]])
    with pytest.raises(tf.errors.TracingError if hasattr(tf.errors, "TracingError")
                       else Exception, match="value"):
        tf.vectorized_map(f, x, fallback_to_while_loop=False)


def test_assignments_fall_back_and_happen_once_per_example():
    v = tf.Variable(0.0)

    def f(e):
        v.assign_add(tf.reduce_sum(e))
        return e * 1.0
    x = np.ones((3, 2), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="assigns Variable"):
        tf.vectorized_map(f, x, fallback_to_while_loop=False)
    assert float(v) == 0.0          # the trace's assignment was undone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vz.VectorizationWarning)
        tf.vectorized_map(f, x)
    assert float(v) == 6.0


def test_an_op_without_a_rule_runs_in_a_loop_and_is_named_once():
    lib = Library("vmaptest")
    op = lib.define("double", inputs=("x",))

    shapes = []

    @lib.kernel(op, "cpu")
    def _double(x):
        shapes.append(x.shape)
        return x * 2
    tf.plugins.register(lib)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    with pytest.warns(vz.VectorizationWarning, match="op vmaptest::double has no batching rule"):
        out = tf.vectorized_map(lambda e: op(e) + 1.0, x)
    np.testing.assert_allclose(out.numpy(), x * 2 + 1)
    assert shapes == [(4,)] * 4          # the trace's example, then one call per example
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # once per process
        tf.vectorized_map(lambda e: op(e), x)
    # a plugin declares a rule through the public op API
    op.batch = tf.plugins.Broadcasting()
    del shapes[:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = tf.vectorized_map(lambda e: op(e), x)
    assert shapes == [(4,), (3, 4)]      # the trace's example, then the batch at once
    np.testing.assert_allclose(out.numpy(), x * 2)


def test_ragged_results_are_refused_clearly():
    x = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vz.VectorizationWarning)
        with pytest.raises(tf.errors.InvalidArgumentError, match="different shapes.*\\[2, 1\\]"):
            tf.vectorized_map(lambda e: tf.where(e > 0), x)
    assert "Where" in NO_RULE


def test_bad_elems():
    with pytest.raises(tf.errors.InvalidArgumentError, match="different first dimensions"):
        tf.vectorized_map(lambda a: a[0] + a[1], (tf.zeros((3,)), tf.zeros((4,))))
    with pytest.raises(tf.errors.InvalidArgumentError, match="scalar"):
        tf.vectorized_map(lambda a: a, tf.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="no tensor"):
        tf.vectorized_map(lambda a: a, [])


def test_empty_batch():
    out = tf.vectorized_map(lambda e: tf.reduce_sum(e * e, axis=-1), tf.zeros((0, 4, 3)))
    assert tuple(out.shape) == (0, 4)


# --- Jacobians ---------------------------------------------------------------------------

@pytest.mark.parametrize("dev", DEVICES)
def test_jacobian_pfor_equals_the_loop(dev):
    with tf.device(dev):
        w = tf.constant(RNG.standard_normal((6, 5)).astype(np.float32))
        x = tf.constant(RNG.standard_normal((2, 6)).astype(np.float32))
        u = tf.constant(1.0)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, u])
            y = tf.tanh(tf.matmul(x, w)) * tf.reduce_sum(x)
        j1 = tape.jacobian(y, [x, w, u])
        j2 = tape.jacobian(y, [x, w, u], experimental_use_pfor=False)
    assert j1[1] is None and j2[1] is None          # w is not watched
    assert j1[2] is None and j2[2] is None          # u is unconnected
    assert tuple(j1[0].shape) == (2, 5, 2, 6)
    np.testing.assert_allclose(j1[0].numpy(), j2[0].numpy(), rtol=1e-5, atol=1e-6)
    j3 = tape.jacobian(y, u, unconnected_gradients="zero")
    assert tuple(j3.shape) == (2, 5) and not j3.numpy().any()


def test_batch_jacobian_pfor_equals_the_loop():
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    w = tf.constant(RNG.standard_normal((3, 2)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.sin(tf.matmul(x, w)) * x[:, :1]
    a = tape.batch_jacobian(y, x)
    b = tape.batch_jacobian(y, x, experimental_use_pfor=False)
    assert tuple(a.shape) == (4, 2, 3)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_jacobian_of_a_jacobian_records_on_a_persistent_tape():
    x = tf.constant([0.5, -1.0])
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(tf.sin(x) * x[0])
        g = inner.gradient(y, x)
    h = outer.jacobian(g, x).numpy()
    # y = x0 * (sin x0 + sin x1)
    x0, x1 = 0.5, -1.0
    want = [[2 * np.cos(x0) - x0 * np.sin(x0), np.cos(x1)], [np.cos(x1), -x0 * np.sin(x1)]]
    np.testing.assert_allclose(h, want, rtol=1e-5)


def test_per_example_gradients_equal_a_loop():
    params = _mlp_params()
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    y = RNG.integers(0, 3, 5).astype(np.int64)

    def grads(e):
        with tf.GradientTape() as tape:
            loss = _loss(params, e[0][None], e[1][None])
        return tape.gradient(loss, params)
    with warnings.catch_warnings():
        warnings.simplefilter("error", vz.VectorizationWarning)   # every op has a rule
        got = tf.vectorized_map(grads, (x, y))
    for k, p in enumerate(params):
        want = np.stack([grads((tf.constant(x[i]), tf.constant(y[i])))[k].numpy()
                         for i in range(5)])
        assert tuple(got[k].shape) == (5,) + tuple(p.shape)
        np.testing.assert_allclose(got[k].numpy(), want, rtol=1e-4, atol=1e-6)
    # their mean is the batch gradient
    with tf.GradientTape() as tape:
        loss = _loss(params, tf.constant(x), tf.constant(y))
    for g, b in zip(got, tape.gradient(loss, params)):
        np.testing.assert_allclose(g.numpy().mean(0), b.numpy(), rtol=1e-4, atol=1e-6)


def test_hessians():
    x = tf.constant([1.0, 2.0, -0.5], dtype=tf.float64)
    y = tf.constant(3.0, dtype=tf.float64)
    hx, hy = tf.hessians(lambda x, y: tf.reduce_sum(tf.sin(x) * y ** 3), [x, y])
    np.testing.assert_allclose(hx.numpy(), np.diag(-np.sin(x.numpy()) * 27.0), rtol=1e-10)
    np.testing.assert_allclose(hy.numpy(), np.sin(x.numpy()).sum() * 6 * 3.0, rtol=1e-10)
    (h,) = tf.hessians(lambda v: tf.reduce_sum(v * 2.0), tf.Variable([1.0, 2.0]))
    assert not h.numpy().any() and tuple(h.shape) == (2, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="takes the function"):
        tf.hessians(tf.reduce_sum(x), x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="xs\\[0\\] is a list"):
        tf.hessians(lambda a: a, [[1.0]])


def test_jacobian_inside_tf_function():
    w = tf.constant(RNG.standard_normal((3, 3)).astype(np.float32))

    @tf.function
    def jac(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.tanh(tf.matmul(x, w))
        return tape.batch_jacobian(y, x)
    for _ in range(2):
        xn = RNG.standard_normal((4, 3)).astype(np.float32)
        d = 1 - np.tanh(xn @ w.numpy()) ** 2
        want = d[:, :, None] * w.numpy().T[None]
        np.testing.assert_allclose(jac(tf.constant(xn)).numpy(), want, rtol=1e-5, atol=1e-6)
    assert jac.experimental_get_tracing_count() == 1


def test_a_plugins_elementwise_op_is_batched_without_a_rule():
    lib = Library("vmaptest2")
    op = lib.define("triple", inputs=("x",), elementwise=True)
    calls = []

    @lib.kernel(op, "cpu")
    def _triple(x):
        calls.append(x.shape)
        return x * 3
    tf.plugins.register(lib)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = tf.vectorized_map(lambda e: op(e), x)
    np.testing.assert_allclose(out.numpy(), x * 3)
    assert calls[-1] == (3, 4)


def test_nested_vectorized_map():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    out = tf.vectorized_map(lambda a: tf.vectorized_map(lambda r: tf.reduce_max(r) * r, a), x)
    np.testing.assert_allclose(out.numpy(), x.max(-1, keepdims=True) * x, rtol=1e-6)


def test_a_case_a_rule_does_not_cover_loops_with_a_warning():
    seqs = np.sort(RNG.standard_normal((3, 6)).astype(np.float32), axis=1)
    vals = RNG.standard_normal((3, 4)).astype(np.float32)
    vz.FALLBACK_OPS.discard("op SearchSorted")
    with pytest.warns(vz.VectorizationWarning, match="SearchSorted has no batching rule for "
                                                     "these inputs"):
        out = tf.vectorized_map(lambda e: tf.searchsorted(e[0], e[1]), (seqs, vals))
    want = np.stack([np.searchsorted(s, v) for s, v in zip(seqs, vals)])
    np.testing.assert_array_equal(out.numpy(), want)
