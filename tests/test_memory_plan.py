"""Buffer plans in traced functions (the buffer plans of tapeflow.tracing.concrete, issue 34): a
concrete function's intermediates written with ``out=`` into buffers it keeps.

Every test compares the planned replay with the unplanned one
(``ConcreteFunction.buffer_plan = False``) or with NumPy, bitwise, over several calls
with changing inputs: a buffer overwritten too early, shared by two values alive at
once, or seen by the caller shows up as a wrong value.
"""

import threading
import tracemalloc

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.plugins import Library, register
from tapeflow.tracing.concrete import ConcreteFunction

RNG = np.random.default_rng(34)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _twins(fn, passes=None):
    """``(planned, unplanned)``: two tf.functions of ``fn``."""
    return tf.function(fn, passes=passes), tf.function(fn, passes=passes)


def _call(f, *args, plan):
    old = ConcreteFunction.buffer_plan
    ConcreteFunction.buffer_plan = plan
    try:
        return f(*args)
    finally:
        ConcreteFunction.buffer_plan = old


def _run(f, args):
    return f.get_concrete_function(*args)._run


def _np(x):
    return [t.numpy() for t in x] if isinstance(x, (list, tuple)) else x.numpy()


def _assert_same(a, b):
    a = a if isinstance(a, list) else [a]
    b = b if isinstance(b, list) else [b]
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _compare(fn, arg_sets, expect_planned=True, passes=None):
    """Call the planned and unplanned functions on each argument set (three times
    each, so the first-call program and the steady one both run); results bitwise
    equal. Returns the planned function."""
    planned, unplanned = _twins(fn, passes)
    for args in arg_sets:
        for _ in range(3):
            want = _np(_call(unplanned, *args, plan=False))
            got = _np(_call(planned, *args, plan=True))
            _assert_same(got, want)
    cf = planned.get_concrete_function(*arg_sets[0])
    assert (cf.memory_plan is not None) == expect_planned, cf.memory_plan
    if expect_planned:
        assert cf._run.calls_planned >= 1
    assert unplanned.get_concrete_function(*arg_sets[0]).memory_plan is None
    return planned


def test_mlp_step_planned_is_bitwise_the_unplanned_step():
    sizes = (784, 256, 256, 10)
    params0 = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params0 += [_f32(a, b) * 0.05, np.zeros(b, np.float32)]
    x = tf.constant(_f32(64, 784))
    labels = tf.constant(RNG.integers(0, 10, 64))

    def make():
        params = [tf.Variable(p.copy()) for p in params0]
        W1, b1, W2, b2, W3, b3 = params

        def step():
            with tf.GradientTape() as tape:
                h1 = tf.nn.relu(tf.matmul(x, W1) + b1)
                h2 = tf.nn.relu(tf.matmul(h1, W2) + b2)
                logits = tf.matmul(h2, W3) + b3
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=logits))
            grads = tape.gradient(loss, params)
            for p, g in zip(params, grads):
                p.assign_sub(0.01 * g)
            return loss
        return params, step

    results = []
    for plan in (True, False):
        params, step = make()
        f = tf.function(step)
        losses = [_call(f, plan=plan).numpy() for _ in range(4)]
        results.append((losses, [p.numpy() for p in params]))
        cf = f.get_concrete_function()
        if plan:
            p = cf.memory_plan
            # every MatMul's result is an intermediate: all 8 are planned, and the
            # ReluGrads write over their incoming gradient
            matmuls = [i for i, n in enumerate(cf.graph.nodes) if n.name == "MatMul"]
            assert len(matmuls) == 8 and all(i in p.node_slot for i in matmuls)
            assert {cf.graph.nodes[i].name for i in p.inplace} >= {"ReluGrad"}
            assert cf._run.calls_planned == 2       # (trace, first replay, 2 planned)
    (l1, p1), (l2, p2) = results
    _assert_same(l1, l2)
    _assert_same(p1, p2)


def test_chain_and_diamond():
    w = tf.constant(_f32(8, 8))

    def chain(x):
        a = tf.matmul(x, w)
        b = tf.exp(a * 0.1) + 1.0
        c = tf.matmul(b, w, transpose_b=True)
        return tf.reduce_sum(tf.nn.relu(c), axis=0)

    def diamond(x):
        a = tf.matmul(x, w)               # read by two branches that meet again
        left = tf.nn.relu(a)
        right = tf.tanh(a) * 3.0
        s = tf.matmul(left, w) + tf.matmul(right, w)
        return tf.reduce_sum(s * a, axis=1)

    args = [(tf.constant(_f32(16, 8)),), (tf.constant(_f32(16, 8)),)]
    _compare(chain, args)
    _compare(diamond, args)


def test_in_place_elementwise_and_the_inputs_it_must_not_touch():
    w = tf.constant(_f32(6, 6))

    def f(x):
        h = tf.matmul(x, w)
        r = tf.nn.relu(h)                 # in place over h (h dies here)
        # x is an argument: never written, though Sub reads it last and is elementwise
        return tf.reduce_sum(r - x, axis=0)

    x_np = _f32(6, 6)
    x = tf.constant(x_np)
    # (without elementwise fusion, which would fuse Relu and Sub)
    planned = _compare(f, [(x,)], passes=("simplify", "fold", "cse", "dce", "reuse"))
    cf = planned.get_concrete_function(x)
    names = [cf.graph.nodes[i].name for i in sorted(cf.memory_plan.inplace)]
    assert "Relu" in names
    np.testing.assert_array_equal(x.numpy(), x_np)        # the argument is untouched


def test_returned_values_stay_valid_after_the_next_call():
    w = tf.constant(_f32(5, 5))

    @tf.function
    def f(x):
        h = tf.matmul(x, w)
        r = tf.nn.relu(h)
        # h is returned, r is returned through a view (Reshape), s is a planned
        # intermediate whose buffer the next call reuses
        s = tf.matmul(r, w) * 2.0
        return h, tf.reshape(r, [-1]), tf.reduce_sum(s, axis=0)

    x1, x2 = tf.constant(_f32(5, 5)), tf.constant(_f32(5, 5))
    outs = [f(x1) for _ in range(3)]               # trace, first replay, planned
    kept = [[t.numpy().copy() for t in o] for o in outs]
    for _ in range(2):
        f(x2)                                       # would overwrite shared buffers
    for o, k in zip(outs, kept):
        for t, v in zip(o, k):
            np.testing.assert_array_equal(t.numpy(), v)
    assert f.get_concrete_function(x1).memory_plan is not None


def test_a_gradient_tape_outside_keeps_its_own_values():
    w = tf.Variable(_f32(4, 4))

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w)))

    x1, x2 = tf.constant(_f32(4, 4)), tf.constant(_f32(4, 4))
    for _ in range(3):
        f(x1)                                      # the plan's buffers exist
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x1)
        y = f(x1)
    for _ in range(2):
        f(x2)                                      # planned calls in between
    g = tape.gradient(y, [x1, w])

    def ref(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w)))
    with tf.GradientTape() as t2:
        t2.watch(x1)
        y2 = ref(x1)
    g2 = t2.gradient(y2, [x1, w])
    np.testing.assert_allclose(y.numpy(), y2.numpy(), rtol=1e-6)
    for a, b in zip(g, g2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_threads_never_share_buffers():
    w = tf.constant(_f32(32, 32))

    @tf.function
    def f(x):
        a = tf.nn.relu(tf.matmul(x, w))
        b = tf.matmul(a, w) * 0.5
        return tf.reduce_sum(tf.tanh(b) + a, axis=0)

    xs = [tf.constant(_f32(64, 32)) for _ in range(4)]
    want = [_np(_call(tf.function(f.python_function), x, plan=False)) for x in xs]
    for _ in range(3):
        f(xs[0])
    errors = []

    def worker(k):
        try:
            for _ in range(30):
                np.testing.assert_array_equal(f(xs[k]).numpy(), want[k])
        except Exception as e:           # (reported by the main thread)
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_call_that_finds_the_plan_busy_allocates():
    w = tf.constant(_f32(8, 8))

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)), axis=0)

    x = tf.constant(_f32(8, 8))
    for _ in range(3):
        f(x)
    run = _run(f, (x,))
    before = run.calls_planned
    with run._lock:                      # as if another thread were replaying it
        got = f(x).numpy()
    assert run.calls_planned == before
    np.testing.assert_array_equal(got, f(x).numpy())
    assert run.calls_planned == before + 1


def test_values_of_data_dependent_shape_are_not_planned():
    w = tf.constant(_f32(3, 3))

    def f(x):
        h = tf.matmul(x, w)                       # planned: static shape
        m = tf.boolean_mask(h, h > 0.0)          # as many values as positives
        return tf.reduce_sum(tf.exp(m * 0.5) * 2.0), tf.reduce_sum(tf.nn.relu(h), axis=0)

    sets = [(tf.constant(_f32(3, 3)),) for _ in range(4)]
    planned = _compare(f, sets)
    cf = planned.get_concrete_function(*sets[0])
    for i in cf.memory_plan.node_slot:
        assert cf.graph.nodes[i].name not in ("Exp", "Mul"), cf.graph.nodes[i]


def test_a_new_shape_traces_anew_with_its_own_buffers():
    w = tf.constant(_f32(4, 4))

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)) * 2.0, axis=1)

    for n in (3, 5, 3, 5, 3, 5):
        x_np = _f32(n, 4)
        want = (np.maximum(x_np @ w.numpy(), 0) * np.float32(2)).sum(axis=1,
                                                                      dtype=np.float32)
        np.testing.assert_allclose(f(tf.constant(x_np)).numpy(), want, rtol=1e-5)
    r3 = _run(f, (tf.constant(_f32(3, 4)),))
    r5 = _run(f, (tf.constant(_f32(5, 4)),))
    assert r3.buffers[0].shape == (3, 4) and r5.buffers[0].shape == (5, 4)


def _traced_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_the_planned_replay_allocates_no_intermediate():
    w = tf.constant(_f32(256, 256))

    def fn(x):
        a = tf.nn.relu(tf.matmul(x, w))            # 256 KiB each
        b = tf.matmul(a, w) + 1.0
        return tf.reduce_sum(b * a, axis=0)        # 1 KiB returned

    x = tf.constant(_f32(256, 256))
    planned, unplanned = _twins(fn)
    for _ in range(3):
        _call(planned, x, plan=True)
        _call(unplanned, x, plan=False)
    run = _run(planned, (x,))
    ids = [id(b) for b in run.buffers]
    ptrs = [b.ctypes.data for b in run.buffers]
    got = _traced_bytes(lambda: planned(x))
    base = _traced_bytes(lambda: unplanned(x))
    assert base >= 256 * 256 * 4                   # the unplanned replay allocates
    assert got < 16 * 1024, got                    # the planned one: the result only
    assert [id(b) for b in run.buffers] == ids
    assert [b.ctypes.data for b in run.buffers] == ptrs


def test_a_kernel_breaking_the_out_contract_drops_the_plan():
    lib = Library("memplan_test")

    @lib.op()
    def bad_out(x, name=None):
        """x * 2"""

    @lib.kernel(bad_out, "cpu", out=True)
    def _bad_out_kernel(x, out=None):
        # breaks the out= contract: ignores ``out``, returns a non-contiguous array
        return np.ascontiguousarray((x * 2.0).T).T
    register(lib)
    entry = tf.plugins.get_op("memplan_test::bad_out").kernels["cpu"]
    assert entry.out is True                       # the capability reached the registry

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.nn.relu(bad_out(x)), axis=0)

    x_np = _f32(4, 3)
    want = np.maximum(x_np * 2.0, 0).sum(axis=0, dtype=np.float32)
    for _ in range(4):
        np.testing.assert_array_equal(f(tf.constant(x_np)).numpy(), want)
    run = _run(f, (tf.constant(x_np),))
    assert run.plan is None and run.buffers == []


def _opencl():
    try:
        with tf.device("opencl:0"):
            tf.constant(1.0)
    except Exception as e:               # (no OpenCL device here: the reason is shown)
        pytest.skip(f"no opencl:0: {e}")
    def entry(name):                     # the registered KernelSpec (docs/backends.md)
        return tf.plugins.get_op(name).kernels["opencl"]
    return entry


def _dev(a):
    with tf.device("opencl:0"):
        return tf.constant(a)._data


def test_opencl_elementwise_and_matmul_kernels_write_into_out():
    entry = _opencl()
    x, y = _f32(6, 5), _f32(6, 5)
    b = _f32(5)
    cases = [("Add", (x, b)), ("Mul", (x, y)), ("Maximum", (x, y)), ("Exp", (x,)),
             ("Neg", (x,)), ("Less", (x, y))]
    for name, args in cases:
        spec = entry(name)
        assert spec.out is True, name
        dargs = [_dev(a) for a in args]
        want = spec.fn(*dargs).get()
        for _ in range(2):               # (the second call runs the cached plan)
            out = _dev(np.zeros(want.shape, want.dtype))
            assert spec.fn(*dargs, out=out) is out
            np.testing.assert_array_equal(out.get(), want, err_msg=name)
    # in place: out is the input of the result's shape
    dx = _dev(x)
    want = entry("Mul").fn(dx, _dev(y)).get()
    assert entry("Mul").fn(dx, _dev(y), out=dx) is dx
    np.testing.assert_array_equal(dx.get(), want)
    mm = entry("MatMul")
    assert mm.out is True
    a, c, d = _dev(_f32(7, 6)), _dev(_f32(5, 6)), _dev(_f32(7, 4))
    for lhs, rhs, ta, tb in ((a, c, False, True), (a, d, True, False)):
        want = mm.fn(lhs, rhs, transpose_a=ta, transpose_b=tb).get()
        out = _dev(np.zeros(want.shape, np.float32))
        assert mm.fn(lhs, rhs, transpose_a=ta, transpose_b=tb, out=out) is out
        np.testing.assert_array_equal(out.get(), want)
    with pytest.raises(ValueError, match="out= must be a contiguous"):
        mm.fn(a, c, transpose_b=True, out=_dev(np.zeros((5, 7), np.float32)))


def test_an_error_in_a_planned_replay_names_the_op():
    w = tf.constant(_f32(4, 4))

    @tf.function
    def f(x, idx):
        # the first MatMul and the Relu writing over it are planned (read by a MatMul)
        h = tf.matmul(tf.nn.relu(tf.matmul(x, w)), w)
        return tf.gather(h, idx)

    x = tf.constant(_f32(4, 4))
    ok = tf.constant([0, 3])
    for _ in range(3):
        f(x, ok)
    assert f.get_concrete_function(x, ok).memory_plan is not None
    assert _run(f, (x, ok)).calls_planned >= 1
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Gather") as e:
        f(x, tf.constant([0, 7]))
    assert "7" in str(e.value)


def test_a_plan_on_opencl_once_its_kernels_declare_out(monkeypatch):
    # the OpenCL plugin does not declare out= yet: declare it on the registry entries
    # of the kernels that take it (k_math, k_linalg) and plan a graph on opencl:0
    _opencl()
    for name in ("MatMul", "Add", "Mul", "Exp", "Sub"):
        monkeypatch.setattr(tf.plugins.get_op(name).kernels["opencl"], "out", True)
    with tf.device("opencl:0"):
        w = tf.constant(_f32(8, 8))
        xs = [(tf.constant(_f32(16, 8)),) for _ in range(2)]

    def f(x):
        a = tf.matmul(x, w)
        b = tf.exp(a * 0.125) + 1.0
        c = tf.matmul(b, w, transpose_b=True) - a
        return tf.reduce_sum(c * b, axis=0)

    with tf.device("opencl:0"):
        planned = _compare(f, xs, passes=("simplify", "fold", "cse", "dce"))
    cf = planned.get_concrete_function(*xs[0])
    assert str(cf.memory_plan.slots[0][2]) == "opencl:0"
    assert len(cf.memory_plan.node_slot) >= 5 and cf.memory_plan.inplace
