"""Fused optimizer updates (issue 34): one kernel per variable and step.

Every optimizer and option, fused against the op-by-op update (``opt.fused = False``)
in one process: bitwise on cpu:0 (the same operations in the same order), within
float rounding on opencl:0 and cuda:0 where present (float32: rtol 1e-6, float64: rtol
1e-13, against the cpu op-by-op update). The in-place rule: a buffer someone else can see (a user's
reference, a NumPy view, a tape's record) is never written. Tracing, threads, bad
input, checkpoints and float16/bfloat16 variables (the op-by-op fallback).
"""

import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.kernels.optim import BLOCK, OptimKernels
from tapeflow.ops import fused as optim
from tapeflow.train import optimizers as O
from tapeflow.tracing.vectorize import VectorizationWarning


def _first_of_each_type():
    """The first device of each non-host type (opencl:0, cuda:0 where present)."""
    seen, out = set(), []
    for d in tf.list_devices():
        if d.type != "cpu" and d.type not in seen:
            seen.add(d.type)
            out.append(d.name)
    return out


ACCELERATORS = _first_of_each_type()
DEVICES = ["cpu:0"] + ACCELERATORS

#: (id, factory): every optimizer and option the fused ops cover
OPTIMIZERS = [
    ("gd", lambda: O.GradientDescentOptimizer(0.1)),
    ("momentum", lambda: O.MomentumOptimizer(0.1, 0.9)),
    ("nesterov", lambda: O.MomentumOptimizer(0.1, 0.9, use_nesterov=True)),
    ("adam", lambda: O.AdamOptimizer(0.05)),
    ("rmsprop", lambda: O.RMSPropOptimizer(0.05)),
    ("rmsprop_momentum", lambda: O.RMSPropOptimizer(0.05, momentum=0.5)),
    ("rmsprop_centered", lambda: O.RMSPropOptimizer(0.05, momentum=0.5, centered=True)),
    ("rmsprop_centered_nomom", lambda: O.RMSPropOptimizer(0.05, centered=True)),
    ("adagrad", lambda: O.AdagradOptimizer(0.1)),
    ("keras_sgd", lambda: O.SGD(0.1)),
    ("keras_sgd_momentum", lambda: O.SGD(0.1, momentum=0.9)),
    ("keras_sgd_nesterov", lambda: O.SGD(0.1, momentum=0.9, nesterov=True)),
    ("keras_adam", lambda: O.Adam(0.05)),
    ("keras_rmsprop", lambda: O.RMSprop(0.05)),
    ("keras_rmsprop_centered", lambda: O.RMSprop(0.05, centered=True)),
    ("keras_rmsprop_momentum", lambda: O.RMSprop(0.05, momentum=0.3)),
    ("keras_adagrad", lambda: O.Adagrad(0.1)),
    ("tensor_lr_adam", lambda: O.AdamOptimizer(tf.constant(0.05))),
    ("tensor_lr_nesterov", lambda: O.MomentumOptimizer(tf.constant(0.1), 0.9,
                                                       use_nesterov=True)),
    ("variable_lr_rmsprop", lambda: O.RMSPropOptimizer(tf.Variable(0.05), momentum=0.5)),
]
IDS = [i for i, _ in OPTIMIZERS]
#: (the last is updated in blocks on NumPy: more than kernels.optim.BLOCK elements, and a
#: partial last block)
SHAPES = [(4, 5), (7,), (), (181, 190)]


def _grads(dtype, step):
    return [np.sin(np.arange(1, 1 + int(np.prod(s)), dtype=dtype) * (step + 1)).reshape(s)
            for s in SHAPES]


def _train(make, fused, dtype, device, steps=4):
    """Weights and optimizer state after ``steps`` updates of three variables."""
    with tf.device(device):
        ws = [tf.Variable((np.arange(np.prod(s), dtype=dtype).reshape(s) - 3) / 7,
                          name=f"w{i}") for i, s in enumerate(SHAPES)]
    opt = make()
    opt.fused = fused
    for k in range(steps):
        with tf.device(device):
            gs = [tf.constant(g) for g in _grads(dtype, k)]
        opt.apply_gradients(list(zip(gs, ws)))
    state = [v.numpy() for v in opt.variables() if v.dtype.is_floating]
    return [w.numpy() for w in ws], state


def _assign_calls(monkeypatch):
    calls = []
    for name in ("assign", "assign_add", "assign_sub"):
        real = getattr(tf.Variable, name)

        def spy(self, *a, _real=real, **k):
            calls.append(self.name)
            return _real(self, *a, **k)
        monkeypatch.setattr(tf.Variable, name, spy)
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [m for _, m in OPTIMIZERS], ids=IDS)
def test_fused_equals_unfused_bitwise_on_cpu(make, dtype):
    fw, fs = _train(make, True, dtype, "cpu:0")
    uw, us = _train(make, False, dtype, "cpu:0")
    assert len(fs) == len(us)
    for a, b in zip(fw + fs, uw + us):
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(fw[0], _train(make, True, dtype, "cpu:0", steps=0)[0][0])


@pytest.mark.parametrize("device", ACCELERATORS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [m for _, m in OPTIMIZERS], ids=IDS)
def test_fused_on_an_accelerator_matches_cpu_unfused(make, dtype, device):
    """opencl:0 (one generated kernel per op), cuda:0 (the shared kernels on CuPy)."""
    fw, fs = _train(make, True, dtype, device)
    uw, us = _train(make, False, dtype, "cpu:0")
    rtol = 1e-6 if dtype == "float32" else 1e-13
    for a, b in zip(fw + fs, uw + us):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_the_fused_path_runs_no_assign(monkeypatch, device):
    """Fused: one kernel per variable, no Variable.assign*; unfused: the op-by-op ones."""
    calls = _assign_calls(monkeypatch)
    with tf.device(device):
        w = tf.Variable(tf.ones([3]), name="w")
        g = tf.constant([1.0, 2.0, 3.0])
    opt = O.AdamOptimizer(0.1)
    opt.apply_gradients([(g, w)])
    assert calls == ["beta1_power:0", "beta2_power:0"]       # (the step's own state)
    opt.fused = False
    opt.apply_gradients([(g, w)])
    assert sorted(calls[2:]) == ["beta1_power:0", "beta2_power:0", "w/Adam:0", "w/Adam_1:0",
                                 "w:0"]


def test_blocks_cover_the_whole_variable():
    assert BLOCK < 181 * 190 and (181 * 190) % BLOCK


def test_kernels_in_place_and_functional():
    """The kernel (the same class the CUDA backend builds with CuPy): ``inplace=True``
    writes into the arrays it was given; otherwise the inputs are left as they were."""
    k = OptimKernels(np)
    var, m, v = np.ones(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32)
    g, lr = np.array([1.0, -2.0, 0.5], np.float32), np.array(0.1, np.float32)
    nv, nm, nvv = k.apply_adam(var, m, v, g, lr)
    assert np.array_equal(var, np.ones(3)) and not m.any() and not v.any()
    rv, rm, rvv = k.apply_adam(var, m, v, g, lr, inplace=True)
    assert rv is var and rm is m and rvv is v
    np.testing.assert_array_equal(var, nv)
    np.testing.assert_array_equal(m, nm)
    s = np.array(2.0, np.float32)                      # 0-d: arrays, not NumPy scalars
    out = k.apply_adagrad(s, np.array(0.1, np.float32), np.array(1.0, np.float32), lr)
    assert all(isinstance(o, np.ndarray) for o in out)


def _ptr(var):
    return var._value._data.__array_interface__["data"][0]


def test_update_in_place_when_nobody_sees_the_buffer():
    with tf.device("cpu:0"):
        w = tf.Variable(np.ones((8, 8), np.float32))
        g = tf.constant(np.full((8, 8), 0.5, np.float32))
    opt = O.AdamOptimizer(0.1)
    opt.apply_gradients([(g, w)])
    m, v = opt.get_slot(w, "m"), opt.get_slot(w, "v")
    before = [_ptr(w), _ptr(m), _ptr(v)]
    opt.apply_gradients([(g, w)])
    assert [_ptr(w), _ptr(m), _ptr(v)] == before


def test_a_held_value_is_never_written():
    w = tf.Variable(np.ones((4, 4), np.float32))
    opt = O.AdamOptimizer(0.1)
    g = tf.constant(np.full((4, 4), 0.5, np.float32))
    opt.apply_gradients([(g, w)])
    held = w.read_value()
    view = np.asarray(w)
    m_held = opt.get_slot(w, "m").read_value()
    copies = held.numpy().copy(), view.copy(), m_held.numpy().copy()
    opt.apply_gradients([(g, w)])
    np.testing.assert_array_equal(held.numpy(), copies[0])
    np.testing.assert_array_equal(view, copies[1])
    np.testing.assert_array_equal(m_held.numpy(), copies[2])
    assert not np.array_equal(w.numpy(), copies[0])


def test_a_value_recorded_by_a_tape_is_never_written():
    w = tf.Variable(np.array([1.0, 2.0, 3.0], np.float32))
    opt = O.GradientDescentOptimizer(0.5)
    opt.apply_gradients([(tf.ones([3]), w)])
    with tf.GradientTape(persistent=True) as tape:
        y = w * w
    opt.apply_gradients([(tf.ones([3]), w)])
    np.testing.assert_array_equal(w.numpy(), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(tape.gradient(y, w).numpy(), [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(y.numpy(), [0.25, 2.25, 6.25])


@pytest.mark.parametrize("fused", [True, False])
def test_bad_input_raises_the_same_error_and_changes_nothing(fused):
    ws = [tf.Variable(tf.ones([3])), tf.Variable(tf.ones([2]))]
    opt = O.Adam(0.1)
    opt.fused = fused
    opt.apply_gradients([(tf.ones([3]), ws[0]), (tf.ones([2]), ws[1])])
    state = [v.numpy().copy() for v in ws + opt.variables()]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"pair 1 .*shape \(2,\).*No variable was updated"):
        opt.apply_gradients([(tf.ones([3]), ws[0]), (tf.ones([5]), ws[1])])
    for a, b in zip(ws + opt.variables(), state):
        np.testing.assert_array_equal(a.numpy(), b)


def test_the_ops_check_their_inputs():
    x = tf.ones([3])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"ApplyAdam.*'v' has shape"):
        optim.APPLY_ADAM(x, x, tf.ones([2]), x, tf.constant(0.1))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"ApplyAdagrad.*'lr'.*scalar"):
        optim.APPLY_ADAGRAD(x, x, x, x)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"ApplyMomentum.*float64"):
        optim.APPLY_MOMENTUM(x, x, tf.ones([3], tf.float64), tf.constant(0.1),
                             tf.constant(0.1))


def test_traced_training_step_equals_eager():
    x = tf.constant(np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3))

    def run(fused, traced):
        w = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
        b = tf.Variable(np.zeros(4, np.float32))
        opt = O.Adam(0.05)
        opt.fused = fused

        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w) + b))
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            return loss
        f = tf.function(step) if traced else step
        for _ in range(4):
            f()
        return [w.numpy(), b.numpy()], f

    eager, _ = run(False, False)
    for fused, traced in ((True, False), (True, True), (False, True)):
        got, f = run(fused, traced)
        for a, b in zip(got, eager):
            np.testing.assert_array_equal(a, b)
    got, f = run(True, True)
    ops = [n.op.name for n in f.get_concrete_function().graph.nodes if n.kind == "op"]
    assert ops.count("ApplyAdam") == 2


@pytest.mark.parametrize("fused", [True, False])
def test_two_threads_lose_no_update(fused):
    """Two threads, each its own optimizer, update the same Variables: every step lands
    (op by op: the update is computed first, then written with assign_sub, under the
    Variable's lock)."""
    ws = [tf.Variable(np.zeros((64,), np.float32)), tf.Variable(np.zeros((3, 3), np.float32)),
          tf.Variable(np.zeros((), np.float32))]
    n = 200

    def work():
        opt = O.GradientDescentOptimizer(1.0)
        opt.fused = fused
        gs = [tf.ones(w.shape) for w in ws]
        for _ in range(n):
            opt.apply_gradients(list(zip(gs, ws)))
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in ws:
        np.testing.assert_array_equal(w.numpy(), np.full(w.shape, -2.0 * n))


def test_checkpointed_slots_restore_and_training_continues_identically(tmp_path):
    def make():
        w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32), name="w")
        opt = O.Adam(0.1)
        return w, opt, tf.train.Checkpoint(w=w, opt=opt)

    g = tf.constant(np.linspace(0.5, -0.5, 6, dtype=np.float32))
    w, opt, ckpt = make()
    for _ in range(3):
        opt.apply_gradients([(g, w)])
    path = ckpt.save(str(tmp_path / "ckpt"))
    slots = [opt.get_slot(w, s).numpy().copy() for s in ("m", "v")]
    w2, opt2, ckpt2 = make()
    ckpt2.restore(path)
    for _ in range(2):
        opt.apply_gradients([(g, w)])
        opt2.apply_gradients([(g, w2)])
    np.testing.assert_array_equal(w.numpy(), w2.numpy())
    for s in ("m", "v"):
        np.testing.assert_array_equal(opt.get_slot(w, s).numpy(), opt2.get_slot(w2, s).numpy())
    assert not np.array_equal(opt2.get_slot(w2, "m").numpy(), slots[0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_variables_take_the_op_by_op_update(dtype):
    def run(fused):
        w = tf.Variable(tf.cast(tf.constant([1.0, -2.0, 0.5]), dtype))
        opt = O.SGD(0.5, momentum=0.5)
        opt.fused = fused
        for _ in range(3):
            opt.apply_gradients([(tf.cast(tf.constant([0.5, 0.25, -1.0]), dtype), w)])
        return w
    w = run(True)
    assert w.dtype.name == dtype
    np.testing.assert_array_equal(np.asarray(w.numpy(), np.float32),
                                  np.asarray(run(False).numpy(), np.float32))
    assert not np.array_equal(np.asarray(w.numpy(), np.float32), [1.0, -2.0, 0.5])


def test_environment_variable_turns_the_fused_path_off():
    code = ("import tapeflow as tf; from tapeflow.train import optimizers as O; "
            "print(O.Adam().fused, O.SGD().fused)")
    env = dict(os.environ, TAPEFLOW_FUSED_OPTIMIZERS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["False", "False"]
    assert O.Adam().fused is True


def test_vectorized_map_of_a_fused_update_equals_one_per_example():
    """The ops' batching rule: per-example variables and gradients, shared slots."""
    var = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    g = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))
    m, v = tf.constant([0.5, -0.5]), tf.constant([0.25, 0.5])
    lr = tf.constant(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizationWarning)       # (no per-example loop)
        got = tf.vectorized_map(lambda a: optim.APPLY_ADAM(a[0], m, v, a[1], lr), (var, g))
    for i in range(3):
        want = optim.APPLY_ADAM(var[i], m, v, g[i], lr)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy()[i], b.numpy())


def test_the_cuda_backend_declares_the_shared_fused_kernels():
    """CUDA runs :class:`OptimKernels` built with CuPy (declared without CuPy)."""
    kernels = pytest.importorskip("tapeflow_cuda_cupy.kernels")
    declared = kernels.declared()
    for op in (n for n in optim.__all__ if n.startswith("APPLY_")):
        name = getattr(optim, op).name
        assert tuple(declared[name][0]) == ("float32", "float64"), name


@pytest.mark.parametrize("fused", [True, False])
def test_a_numpy_scalar_learning_rate_acts_as_the_python_number(fused):
    """np.float64(0.1) on a float32 variable: the op-by-op update used to fail half-way
    (a float64 step into a float32 variable, after the momentum slot had changed)."""
    def run(lr):
        w = tf.Variable([1.0, 2.0])
        opt = O.MomentumOptimizer(lr, 0.9, use_nesterov=True)
        opt.fused = fused
        for _ in range(2):
            opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
        return w.numpy()
    want = run(0.1)
    for lr in (np.float64(0.1), np.float32(0.1)):
        np.testing.assert_array_equal(run(lr), want)
    np.testing.assert_array_equal(run(np.int64(1)), run(1))


@pytest.mark.skipif("opencl:0" not in ACCELERATORS, reason="no opencl:0 device")
def test_the_opencl_kernel_in_place_and_functional():
    fn = optim.APPLY_ADAM.kernels["opencl"].fn
    with tf.device("opencl:0"):
        ts = [tf.constant(np.linspace(a, b, 5, dtype=np.float32)) for a, b in
              ((1, 2), (0, 1), (0.5, 1), (-1, 1))]
        lr = tf.constant(0.1)
    arrays = [t._data for t in ts]
    before = [t.numpy() for t in ts]
    new = fn(*arrays, lr._data, beta1=0.9, beta2=0.999, epsilon=1e-8)
    for t, b in zip(ts, before):
        np.testing.assert_array_equal(t.numpy(), b)          # functional: inputs unchanged
    same = fn(*arrays, lr._data, beta1=0.9, beta2=0.999, epsilon=1e-8, inplace=True)
    assert all(o is a for o, a in zip(same, arrays))
    for t, n in zip(ts, new):
        np.testing.assert_array_equal(t.numpy(), n.get())


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("make", [lambda: O.AdamOptimizer(0.01), lambda: O.Adam(0.01)])
def test_adam_beta_powers_do_not_take_a_half_precision_variables_dtype(half, make):
    # the powers took the dtype of the variable that sorts first by name: a float16 one
    # drifted every variable's bias correction, a bfloat16 one (0.999 -> 1) froze them
    def run(with_half):
        w = tf.Variable(np.zeros(3, np.float32), name="w")
        pairs = [(tf.constant([1.0, -1.0, 0.5]), w)]
        if with_half:
            h = tf.Variable(tf.zeros([2], half), name="a_half")      # sorts before "w"
            pairs.append((tf.cast(tf.ones([2]), half), h))
        opt = make()
        for _ in range(20):
            opt.apply_gradients(pairs)
        return w.numpy(), opt
    alone, _ = run(False)
    mixed, opt = run(True)
    np.testing.assert_array_equal(mixed, alone)
    assert {v.dtype.name for v in opt.variables() if "power" in v.name} == {"float32"}
