"""The graph passes of tapeflow.function: equal results with each pass on and off, the
pass changes the graph, and buffer reuse never writes where it must not."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.tracing import graph_passes

ALL = tuple(graph_passes.PASSES)


def _run(fn, args, passes, calls=2):
    """Trace ``fn`` with ``passes`` and call it ``calls`` times; returns the numpy results
    of every call and the concrete function."""
    f = tf.function(fn, passes=passes)
    outs = []
    for _ in range(calls):
        r = f(*args)
        outs.append([np.array(t) for t in (r if isinstance(r, (list, tuple)) else [r])])
    return outs, f.get_concrete_function(*args)


def _x(*shape, seed=0):
    return tf.constant(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _broadcasting(x, b):
    y = tf.exp(x * 0.5) + b
    z = tf.nn.relu(y - 1.0) * (tf.constant(2.0) * tf.constant(3.0))
    return tf.reduce_sum(z, axis=0), z


def _views(x, b):
    t = tf.transpose(x)
    r = tf.reshape(x, [-1])
    y = tf.exp(x) + 1.0
    return t * 2.0, r + 1.0, y * y, tf.reshape(y, [-1]) - 1.0


def _constants():
    a = tf.fill([3], 2.0)
    return tf.reshape(a, [3, 1]) * tf.one_hot(tf.constant([0, 2, 1]), 3) + 1.0


def _cse(x, b):
    return tf.exp(x) + tf.exp(x), tf.reduce_sum(x, axis=[0]) * tf.reduce_sum(x, axis=[0])


CASES = {
    "broadcasting": (_broadcasting, lambda: (_x(4, 3), _x(3, seed=1))),
    "views": (_views, lambda: (_x(4, 3), _x(3, seed=1))),
    "constants": (_constants, lambda: ()),
    "cse": (_cse, lambda: (_x(4, 3), _x(3, seed=1))),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("pass_", ALL)
def test_pass_keeps_results(name, pass_):
    fn, args = CASES[name]
    a = args()
    off, _ = _run(fn, a, ())
    on, _ = _run(fn, a, (pass_,))
    all_on, _ = _run(fn, a, ALL)
    for o, p, q in zip(off, on, all_on):
        for u, v, w in zip(o, p, q):
            np.testing.assert_allclose(v, u, rtol=1e-6)
            np.testing.assert_allclose(w, u, rtol=1e-6)


def _train(passes):
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((5, 4)).astype(np.float32))
    b = tf.Variable(np.zeros(4, np.float32))
    x = tf.constant(rng.standard_normal((8, 5)).astype(np.float32))
    y = tf.constant(rng.integers(0, 4, 8))

    def step():
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w) + b)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=h))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss
    f = tf.function(step, passes=passes)
    losses = [float(f()) for _ in range(3)]
    return losses, w.numpy(), b.numpy(), f.get_concrete_function()


@pytest.mark.parametrize("pass_", ALL)
def test_training_step_equal(pass_):
    ref = _train(())
    got = _train((pass_,))
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-6, atol=1e-7)


def test_random_ops_not_folded_or_merged():
    tf.random.set_seed(3)

    def f():
        return tf.random.uniform([3]) + tf.random.uniform([3]), tf.random.uniform([3])
    outs, cf = _run(f, (), ALL, calls=2)
    assert not np.array_equal(outs[0][0], outs[1][0])       # a fresh stream per call
    assert not np.array_equal(outs[0][1], outs[1][1])
    assert sum(1 for n in cf.graph.nodes if n.stateful) == 3


def test_fold_changes_graph():
    _, off = _run(_constants, (), ("dce",))
    _, on = _run(_constants, (), ("fold", "dce"))
    assert len(on.graph.ops()) < len(off.graph.ops())
    assert on.graph.ops() == []                  # everything was constant
    assert dict(on.passes_run)["fold"] > 0


def test_cse_changes_graph_and_attrs_compare_by_value():
    a = (_x(4, 3), _x(3))
    _, off = _run(_cse, a, ())
    _, on = _run(_cse, a, ("cse",))
    assert off.graph.ops().count("Exp") == 2 and on.graph.ops().count("Exp") == 1
    assert off.graph.ops().count("Sum") == 2 and on.graph.ops().count("Sum") == 1

    def different(x):
        return tf.reduce_sum(x, axis=[0]), tf.reduce_sum(x, axis=[1])
    _, cf = _run(different, (_x(3, 3),), ("cse",))
    assert cf.graph.ops().count("Sum") == 2


def test_cse_reads_with_assign_between():
    v = tf.Variable(1.0)

    def f():
        a = v.read_value() * 2.0
        v.assign_add(1.0)
        return a + v.read_value() * 2.0
    for passes in ((), ALL):
        v.assign(1.0)
        assert float(tf.function(f, passes=passes)()) == 2.0 + 4.0


def test_simplify_removes_identity():
    def f(x):
        return tf.reshape(tf.identity(x), [4, 3]) * 2.0
    a = (_x(4, 3),)
    _, cf = _run(f, a, ("simplify",))
    assert cf.graph.ops() == ["Mul"]


def test_xent_combined_equal_bitwise():
    ref = _train(("dce",))
    got = _train(("dce", "xent"))
    assert "SoftmaxXent+Softmax" in got[3].graph.ops()
    assert got[0] == ref[0]
    np.testing.assert_array_equal(got[1], ref[1])


# --- buffer reuse safety ---------------------------------------------------------------------

def _inplace_nodes(cf):
    return [n for n in cf.graph.nodes if getattr(n.fn, "_tapeflow_inplace", False)]


def test_reuse_changes_graph():
    def f(x):
        return tf.nn.relu(tf.exp(x) * 2.0 + 1.0)
    _, cf = _run(f, (_x(4, 3),), ("reuse",))
    assert len(_inplace_nodes(cf)) == 3


def test_reuse_never_writes_arguments_or_constants():
    c = tf.constant(np.ones((4, 3), np.float32))
    x = _x(4, 3)
    keep_x, keep_c = np.array(x), np.array(c)

    def f(x):
        return (x * 2.0) + (c * 3.0), x + 1.0, tf.exp(c) + 1.0
    f2 = tf.function(f, passes=ALL)
    for _ in range(3):
        f2(x)
    np.testing.assert_array_equal(np.array(x), keep_x)
    np.testing.assert_array_equal(np.array(c), keep_c)


def test_reuse_not_into_live_view_or_returned_value():
    x = _x(4, 3)

    def f(x):
        y = tf.exp(x)                 # fresh
        t = tf.transpose(y)           # a view of y, returned
        z = y * 2.0                   # y dies here, but its view lives: no reuse
        e = tf.exp(x)                 # fresh, and returned
        return t, z, e, e + 1.0
    outs, cf = _run(f, (x,), ("reuse",), calls=1)
    ref, _ = _run(f, (x,), (), calls=1)
    for a, b in zip(outs[0], ref[0]):
        np.testing.assert_array_equal(a, b)
    assert _inplace_nodes(cf) == []


def test_reuse_runtime_guard():
    # the kernel checks again at run time: a buffer someone else references is not written
    k = graph_passes._inplace_ufunc(np.add, 0, 2, graph_passes._BUDGET)
    a = np.ones(3)
    held = a                                        # one more reference than the replay's
    out = k(a, np.ones(3))
    assert out is not a and held[0] == 1.0
    view = np.arange(3.0)[:]
    assert k(view, np.ones(3)) is not view


def test_reuse_variable_values_not_overwritten():
    v = tf.Variable(np.ones(3, np.float32))

    def f(x):
        v.assign(tf.exp(x))           # the assigned buffer belongs to the Variable now
        return v.read_value() * 2.0 + 1.0
    f2 = tf.function(f, passes=ALL)
    before = v.read_value()
    x = tf.constant(np.zeros(3, np.float32))
    out = f2(x)
    held = v.read_value()
    f2(x)
    np.testing.assert_array_equal(before.numpy(), np.ones(3))
    np.testing.assert_array_equal(held.numpy(), np.ones(3))
    np.testing.assert_array_equal(out.numpy(), np.full(3, 3.0))


def test_outputs_of_earlier_calls_unchanged():
    x = _x(4, 3)

    def f(x):
        return tf.nn.relu(tf.exp(x) - 1.0) * 3.0
    f2 = tf.function(f, passes=ALL)
    first = f2(x)
    keep = first.numpy()
    f2(x * 2.0)
    np.testing.assert_array_equal(first.numpy(), keep)


@pytest.mark.parametrize("bad", [[0, 1, 3, 1], [0, -1, 2, 1]])
def test_fused_softmax_xent_still_checks_labels_at_every_call(bad):
    @tf.function
    def f(z, y):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z))
    z = tf.constant(np.random.default_rng(0).random((4, 3), dtype=np.float32))
    f(z, tf.constant(np.array([0, 1, 2, 1])))                   # traced with good labels
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside the valid range"):
        f(z, tf.constant(np.array(bad)))                        # replayed with bad ones
