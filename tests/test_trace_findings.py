"""What the differential test of tracing found beyond the issue's reproducers (issue 43;
``tests/test_trace_differential.py``): each a small program whose traced result or
gradient differed from eager execution, fixed, and kept here as it was found.
docs/tracing-invariants.md lists them with their causes."""

import gc
import threading
import warnings

import numpy as np
import pytest

import tapeflow as tf


def _grads(fn, x, sources, *args):
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        out = fn(x, *args)
        loss = tf.reduce_sum(out * out) if not isinstance(out, (list, tuple)) else sum(
            tf.reduce_sum(o * o) for o in out if o is not None)
    return [None if g is None else g.numpy() for g in t.gradient(loss, sources)]


def _assert_same(got, want, rtol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g is None) == (w is None), (g, w)
        if g is not None:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-9)


def test_random_ops_draw_new_numbers_under_an_outer_tape():
    # a graph with a random op is replayed op by op under a tape: it drew the trace's
    # numbers at every call
    @tf.function
    def f(x):
        return x * tf.random.uniform([3], seed=5)

    x = tf.constant([1.0, 1.0, 1.0])
    tf.random.set_seed(1)
    want = [(x * tf.random.uniform([3], seed=5)).numpy() for _ in range(3)]
    tf.random.set_seed(1)
    got = []
    for _ in range(3):
        with tf.GradientTape() as t:
            t.watch(x)
            y = f(x)
        got.append(y.numpy())
        np.testing.assert_array_equal(t.gradient(y, x).numpy(), y.numpy())
    np.testing.assert_array_equal(np.array(got), np.array(want))


def test_a_function_returning_nothing_runs_its_side_effects_once():
    v = tf.Variable(0.0)

    @tf.function
    def step(x):
        v.assign_add(x)

    step(tf.constant(1.0))
    assert float(v.numpy()) == 1.0
    step(tf.constant(2.0))
    assert float(v.numpy()) == 3.0


def test_the_same_tensor_for_two_parameters_then_two_tensors():
    @tf.function
    def f(a, b):
        return a - 2.0 * b

    x = tf.constant([1.0, 2.0])
    np.testing.assert_array_equal(f(x, x).numpy(), [-1.0, -2.0])
    np.testing.assert_array_equal(f(tf.constant([5.0, 5.0]), tf.constant([1.0, 0.0])).numpy(),
                                  [3.0, 5.0])
    # a tape around the first call sees both uses of x
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(tf.function(lambda a, b: a * b)(x, x))
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [2.0, 4.0])


def test_the_same_variable_for_two_parameters_then_two_variables():
    @tf.function
    def f(a, b):
        a.assign_add(tf.ones([2]))
        return b.read_value()

    v, w = tf.Variable([1.0, 1.0]), tf.Variable([7.0, 7.0])
    np.testing.assert_array_equal(f(v, v).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(f(v, w).numpy(), [7.0, 7.0])
    np.testing.assert_array_equal(v.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("traced", [False, True])
def test_a_read_after_an_assignment_is_a_read_of_the_variable(traced):
    # as in TensorFlow: assignments are not differentiable; the read after one is a
    # read of the Variable (its gradient the Variable's), not the computation assigned
    v = tf.Variable([1.0, 2.0])
    x = tf.constant([3.0, 4.0])

    def body(x):
        v.assign(x * 2.0)
        y = v.read_value() * 3.0
        v.assign_sub(tf.tanh(x))
        return y, v.read_value()
    fn = tf.function(body) if traced else body
    for _ in range(3):
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y, z = fn(x)
        assert t.gradient(y, x) is None and t.gradient(z, x) is None
        np.testing.assert_array_equal(t.gradient(y, v).numpy(), [3.0, 3.0])
        np.testing.assert_array_equal(t.gradient(z, v).numpy(), [1.0, 1.0])


@pytest.mark.parametrize("kind", ["cond", "while"])
def test_control_flow_that_assigns_is_differentiable_at_every_call(kind):
    v = tf.Variable([1.0, 2.0])

    def body(x):
        def assigning():
            v.assign_add(x)
            return x * x * 2.0
        if kind == "cond":
            return tf.cond(tf.reduce_sum(x) > 0, assigning, lambda: x * 3.0)
        return tf.while_loop(lambda i, y: i < 2,
                             lambda i, y: (i + 1, (v.assign_add(y), y * y)[1]),
                             (tf.constant(0), x))[1]
    x = tf.constant([0.5, 0.25])
    want = _grads(body, x, [x])
    f = tf.function(body)
    for _ in range(3):
        _assert_same(_grads(f, x, [x]), want)


def test_control_flow_reading_a_variable_argument_gives_its_gradient():
    rng = np.random.default_rng(0)

    def body(x, v):
        return tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * v),
                             (tf.constant(0), x))[1]
    v = tf.Variable(rng.standard_normal((2, 2)))
    x = tf.constant(rng.standard_normal((2, 2)))
    want = _grads(body, x, [x, v], v)
    f = tf.function(body)
    for _ in range(3):
        _assert_same(_grads(f, x, [x, v], v), want)


def test_a_gradient_after_an_assignment_sees_the_values_the_node_saw():
    # the gradient of a while loop reading v, taken inside the function after v was
    # assigned: it re-ran the loop with v's new value
    rng = np.random.default_rng(1)
    v = tf.Variable(rng.standard_normal((2, 2)))

    def body(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, tf.tanh(y * v)),
                              (tf.constant(0), x))[1]
            loss = tf.reduce_sum(y)
        v.assign_sub(tf.ones([2, 2], dtype=tf.float64))
        return t.gradient(loss, [x, v])
    x = tf.constant(rng.standard_normal((2, 2)))
    v0 = v.numpy()
    want = [g.numpy() for g in body(x)]
    f = tf.function(body)
    for _ in range(3):
        v.assign(v0)
        _assert_same([g.numpy() for g in f(x)], want)


def test_a_read_after_an_assignment_inside_a_branch_is_not_the_assigned_computation():
    v = tf.Variable(np.ones((2, 2)))

    def body(x):
        def branch():
            v.assign_sub(tf.tanh(x) * 0.25)
            return v.read_value() * 2.0
        return tf.cond(tf.reduce_sum(x) > -100, branch, lambda: x)
    x = tf.constant(np.full((2, 2), 0.5))
    f = tf.function(body)
    for fn in (body, f, f):
        v.assign(np.ones((2, 2)))
        with tf.GradientTape() as t:
            t.watch(x)
            y = fn(x)
        g = t.gradient(y, x)
        assert g is None or not np.any(g.numpy()), g


def _second_order(fn, v, x, w):
    with tf.GradientTape() as t:
        out, g = fn(x)
        loss = tf.reduce_sum(out * w[0]) + tf.reduce_sum(g * w[1])
    return t.gradient(loss, v).numpy()


def test_second_order_through_a_branch_that_reads_a_variable():
    rng = np.random.default_rng(2)
    w = [rng.standard_normal((3, 3)) for _ in range(2)]
    v0 = rng.standard_normal((3, 3))

    def make(v):
        def body(x):
            with tf.GradientTape() as t:
                r = v.read_value()
                c = tf.cond(tf.reduce_sum(x) > -100, lambda: tf.transpose(v) * v,
                            lambda: r * x)
                loss = tf.reduce_sum(tf.tanh(c))
            return c, t.gradient(loss, v)
        return body
    x = tf.constant(np.ones((3, 3)))
    v = tf.Variable(v0)
    want = _second_order(make(v), v, x, w)
    v = tf.Variable(v0)
    f = tf.function(make(v))
    for _ in range(2):
        np.testing.assert_allclose(_second_order(f, v, x, w), want, rtol=1e-9)


def test_a_tape_in_another_thread_does_not_change_a_gradient_through_a_branch():
    # another thread's tape sends this thread's calls down the op-by-op replay, where
    # the branch's input was the Variable's own value tensor: counted twice
    rng = np.random.default_rng(3)
    v = tf.Variable(rng.standard_normal((4, 4)))

    @tf.function
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            r = v.read_value()
            c = tf.cond(tf.reduce_sum(tf.nn.softplus(r)) > 0, lambda: tf.transpose(r),
                        lambda: tf.matmul(v, x))
            loss = tf.reduce_sum(tf.tanh(c))
        return t.gradient(loss, v)
    xs = [tf.constant(rng.standard_normal((4, 4))) for _ in range(3)]
    want = [f(x).numpy() for x in xs]
    bad = []

    def worker():
        for _ in range(100):
            for x, w in zip(xs, want):
                if not np.allclose(f(x).numpy(), w):
                    bad.append(1)
    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    with tf.GradientTape():            # and this thread records too
        for t in ts:
            t.join()
    assert not bad


def test_a_branch_capturing_one_value_twice_after_simplify():
    # `simplify` drops the Identity: the cond node reads one value for two captures, and
    # its gradient's re-run (op by op, under the outer tape) watched that tensor twice
    def body(x):
        with tf.GradientTape() as t:
            t.watch(x)
            a = tf.square(x)
            b = tf.identity(a)
            y = tf.cond(tf.reduce_sum(x) > -100, lambda: a * tf.sigmoid(b), lambda: a)
            loss = tf.reduce_sum(y)
        return y, t.gradient(loss, x)
    x = tf.constant([0.5, -1.5])
    want = _grads(body, x, [x])
    with tf.GradientTape() as t:
        t.watch(x)
        want_inner = body(x)[1].numpy()
    f = tf.function(body)
    for _ in range(3):
        _assert_same(_grads(f, x, [x]), want)
        with tf.GradientTape() as t:
            t.watch(x)
            np.testing.assert_allclose(f(x)[1].numpy(), want_inner, rtol=1e-6)


# --- found by an independent probe of the same kind (issue 43) ----------------------------

def test_assigning_a_variable_from_a_variable_reads_it_at_every_call():
    src, dst = tf.Variable([1.0, 2.0]), tf.Variable([0.0, 0.0])

    @tf.function
    def step():
        dst.assign(src)
        src.assign_add([10.0, 10.0])
    for _ in range(3):
        step()
    np.testing.assert_array_equal(dst.numpy(), [21.0, 22.0])


def test_a_variable_used_as_an_index_is_read_in_the_graph():
    """``x[v]`` with an integer Variable ``v`` is a gather of its value at each call (it
    was refused: the value would have been frozen into the graph)."""
    i = tf.Variable(1)

    @tf.function
    def f(x):
        return x[i]
    x = tf.constant([10.0, 20.0, 30.0])
    assert float(f(x)) == 20.0
    i.assign(2)
    assert float(f(x)) == 30.0


@pytest.mark.parametrize("use", [
    lambda x, i: tf.zeros(i),
    lambda x, i: x * float(i),
    lambda x, i: x[: int(i)],
])
def test_a_variable_whose_value_python_needs_is_refused_while_tracing(use):
    # as a tensor's value is: it would be frozen into the graph
    i = tf.Variable(1)

    @tf.function
    def f(x):
        return use(x, i)
    with pytest.raises(tf.tracing.TracingError, match="needs the value"):
        f(tf.constant([10.0, 20.0, 30.0]))
    use(tf.constant([10.0, 20.0]), i)           # (eagerly it works)


@pytest.mark.parametrize("make", [lambda x: tf.unstack(x * 2.0)[0],
                                  lambda x: tf.split(x * 2.0, 1)[0],
                                  lambda x: tf.stack([x * 2.0])[0]])
def test_an_op_of_several_outputs_with_one_this_time(make):
    f = tf.function(make)
    x = tf.constant([[1.0, 2.0, 3.0]])
    want = make(x).numpy()
    for _ in range(3):
        with tf.GradientTape() as t:
            t.watch(x)
            y = f(x)
        np.testing.assert_array_equal(y.numpy(), want)
        np.testing.assert_array_equal(t.gradient(y, x).numpy(), np.full(x.shape, 2.0))


@pytest.mark.parametrize("use_pfor", [True, False])
def test_a_jacobian_is_differentiable_eagerly_and_traced(use_pfor):
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            z = tf.sin(x) * x
        return t.jacobian(z, x, experimental_use_pfor=use_pfor)
    x = tf.constant([0.5, 1.0, 2.0])
    want = 2.0 * np.cos(x.numpy()) - x.numpy() * np.sin(x.numpy())
    for fn in (f, tf.function(f)):
        with tf.GradientTape() as outer:
            outer.watch(x)
            j = fn(x)
        np.testing.assert_allclose(outer.gradient(j, x).numpy(), want, rtol=1e-5)


def test_an_unhashable_argument_never_replays_another_objects_trace():
    # gc.collect() below frees each Cfg at once if nothing holds it, so that the next one
    # can take its id. The objects made before this test are frozen first: collections
    # skip them (everything the check makes, function and cycles included, is made after
    # the freeze and still collected); late in a long pytest worker a full collection of
    # them took ~2 s, 28 times (69 s).
    gc.freeze()
    try:
        _unhashable_arguments_never_share_a_trace()
    finally:
        gc.unfreeze()


def _unhashable_arguments_never_share_a_trace():
    class Cfg:
        __hash__ = None

        def __init__(self, s):
            self.scale = s

    @tf.function
    def g(x, cfg):
        return x * cfg.scale
    x = tf.constant([1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in range(2, 30):
            c = Cfg(float(s))
            assert float(g(x, c)[0]) == s
            del c
            gc.collect()


def test_negative_zero_and_zero_are_two_signatures():
    f = tf.function(lambda x, s: x / s)
    x = tf.constant([1.0])
    with np.errstate(divide="ignore"):
        assert float(f(x, 0.0)[0]) == np.inf
        assert float(f(x, -0.0)[0]) == -np.inf


def test_a_returned_numpy_array_is_the_callers_own():
    f = tf.function(lambda x: (x * 2.0, np.zeros(3, np.float32)))
    x = tf.constant([1.0])
    for _ in range(3):
        _, a = f(x)
        np.testing.assert_array_equal(a, [0.0, 0.0, 0.0])
        a[0] = 99.0


# --- found by a second independent probe (issue 43) ----------------------------------------

def test_an_output_the_target_does_not_reach_adds_nothing_to_the_gradient():
    # the traced backward was given zeros for the other output: 0 * inf = nan
    def f(x):
        return x * 2.0, tf.sqrt(x)
    x = tf.constant([0.0, 1.0])
    for fn in (f, tf.function(f), tf.function(f)):
        with tf.GradientTape() as t:
            t.watch(x)
            y, _ = fn(x)
        np.testing.assert_array_equal(t.gradient(y, x).numpy(), [2.0, 2.0])


def test_a_variable_keeps_its_device_when_updated_under_another_device_scope():
    if not any(str(d) == "opencl:0" for d in tf.config.list_devices()):
        pytest.skip("no opencl:0 device")
    for traced in (False, True):
        v = tf.Variable([0.0, 0.0])

        def f():
            with tf.device("opencl:0"):
                v.assign_add(tf.constant([1.0, 1.0]))
                v.assign(v + 1.0)
            return v.read_value()
        fn = tf.function(f) if traced else f
        got = [fn().numpy().tolist() for _ in range(3)]
        assert got == [[2.0, 2.0], [4.0, 4.0], [6.0, 6.0]], (traced, got)
        assert v.device == "cpu:0"


@pytest.mark.parametrize("watch_accessed", [True, False])
def test_an_explicitly_watched_variable_is_watched_when_traced(watch_accessed):
    u = tf.Variable([3.0, 4.0], trainable=watch_accessed)

    def f(x):
        with tf.GradientTape(watch_accessed_variables=watch_accessed) as t:
            t.watch(u)
            y = tf.reduce_sum(u * x)
        return t.gradient(y, u)
    x = tf.constant([0.3, 1.4])
    for fn in (f, tf.function(f), tf.function(f)):
        np.testing.assert_allclose(fn(x).numpy(), [0.3, 1.4], rtol=1e-6)


def test_a_trainable_and_a_non_trainable_variable_argument_trace_apart():
    def f(v):
        with tf.GradientTape() as t:
            y = tf.reduce_sum(v * v)
        return t.gradient(y, v)
    g = tf.function(f)
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([1.0, 2.0], trainable=False)
    np.testing.assert_array_equal(g(a).numpy(), [2.0, 4.0])
    assert g(b) is None and f(b) is None


def test_a_checkpoint_restored_into_an_optimizer_then_traced_training(tmp_path):
    w0 = tf.Variable([[0.1], [0.2]])
    o0 = tf.keras.optimizers.Adam(0.05)
    o0.apply_gradients([(tf.constant([[1.0], [1.0]]), w0)])
    path = tf.train.Checkpoint(w=w0, optimizer=o0).save(str(tmp_path / "ck"))
    x, y = tf.constant([[1.0, 2.0]]), tf.constant([[1.0]])
    results = []
    for traced in (False, True):
        w = tf.Variable([[0.0], [0.0]])
        opt = tf.keras.optimizers.Adam(0.05)
        tf.train.Checkpoint(w=w, optimizer=opt).restore(path)   # deferred: no slots yet

        def step(x, y):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w) - y))
            opt.apply_gradients([(t.gradient(loss, w), w)])
            return loss
        fn = tf.function(step) if traced else step
        for _ in range(3):
            fn(x, y)
        results.append((int(opt.iterations.numpy()), w.numpy()))
    assert results[0][0] == results[1][0] == 4
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)


def test_init_scope_runs_once_while_tracing():
    v = tf.Variable(0.0)

    @tf.function
    def f(x):
        with tf.init_scope():
            v.assign_add(1.0)
        return x + v
    assert [float(f(tf.constant(1.0))) for _ in range(3)] == [2.0, 2.0, 2.0]
    assert float(v.numpy()) == 1.0


def test_the_loss_scale_optimizer_says_it_cannot_be_traced():
    # it decides on the host whether to skip a step: frozen at trace time, silently
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))

    @tf.function
    def step():
        opt.apply_gradients([(w * 1.0, w)])
    with pytest.raises(tf.errors.UnimplementedError, match="LossScaleOptimizer.*tf.function"):
        step()
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])


def test_a_returned_variable_is_its_value_from_the_first_call_on():
    v = tf.Variable([1.0, 2.0])
    f = tf.function(lambda: {"v": v, "twice": v * 2.0})
    r1, r2 = f(), f()
    v.assign([10.0, 20.0])
    for r in (r1, r2):
        assert not isinstance(r["v"], tf.Variable)
        np.testing.assert_array_equal(r["v"].numpy(), [1.0, 2.0])
