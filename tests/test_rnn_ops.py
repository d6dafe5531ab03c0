"""The fused recurrent ops (issue 45): ``lstm_cell``/``lstm_sequence`` (``FusedLSTM``,
``FusedLSTMGrad``) and ``gru_cell``/``gru_sequence`` (``FusedGRU``, ``FusedGRUGrad``).

Each fast path against its slow twin: the fused kernels against the ops' composites
(the step-by-step tapeflow ops) and a float64 NumPy reference, every gate order,
forward and reversed, float32 and float64; gradients against finite differences and
against the composites' taped gradients; traced (``tf.function``) against eager;
``opencl:0`` against ``cpu:0``; the CUDA backend's Python layer on the CuPy stand-in of
tests/backends; forward mode and ``vectorized_map``; bad input. The conformance specs
``nn_fused.lstm_sequence`` / ``nn_fused.gru_sequence`` check the same on every device."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, NotDifferentiableError
from tapeflow.kernels.nn_fused import FusedNNKernels
from tapeflow.ops import fused
from tapeflow.ops.fused import gru_cell, gru_sequence, lstm_cell, lstm_sequence
from tapeflow.runtime.dispatch import execute
from tapeflow.testing.specs.nn import ref_gru_sequence, ref_lstm_sequence

DEVICES = [d.name for d in tf.list_devices() if d.type in ("cpu", "opencl")]
OPENCL = [d for d in DEVICES if d.startswith("opencl")]
LSTM_ORDERS = ("ifco", "icfo", "oicf", "cfoi")
GRU_ORDERS = ("zrh", "rzh", "hzr")


def _lstm_args(rng, t, b, i, h, dt=np.float64, scale=1.0):
    shapes = [(t, b, i), (b, h), (b, h), (i, 4 * h), (h, 4 * h), (4 * h,)]
    return [(rng.normal(size=s) * scale).astype(dt) for s in shapes]


def _gru_args(rng, t, b, i, h, dt=np.float64, scale=1.0):
    shapes = [(t, b, i), (b, h), (i, 3 * h), (h, 3 * h), (3 * h,), (3 * h,)]
    return [(rng.normal(size=s) * scale).astype(dt) for s in shapes]


def _tol(dt):
    return dict(rtol=1e-5, atol=1e-5) if dt == np.float32 else dict(rtol=1e-10, atol=1e-12)


# --- values: the kernels against the reference and the composites -----------------------------

@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("order", LSTM_ORDERS)
def test_lstm_sequence_matches_the_reference(order, reverse, dt):
    rng = np.random.default_rng(len(order) + reverse)
    args = _lstm_args(rng, 5, 3, 4, 6, dt)
    got = lstm_sequence(*args, forget_bias=1.0, gate_order=order, reverse=reverse)
    want = ref_lstm_sequence(*args, forget_bias=1.0, gate_order=order, reverse=reverse)
    for g, w in zip(got, want):
        assert g.dtype == tf.as_dtype(dt)
        np.testing.assert_allclose(g.numpy(), w, **_tol(dt))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("order", GRU_ORDERS)
def test_gru_sequence_matches_the_reference(order, reverse, dt):
    rng = np.random.default_rng(7 + reverse)
    args = _gru_args(rng, 5, 3, 4, 6, dt)
    got = gru_sequence(*args, gate_order=order, reverse=reverse)
    want = ref_gru_sequence(*args, gate_order=order, reverse=reverse)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, **_tol(dt))


@pytest.mark.parametrize("seed", range(4))
def test_kernels_match_the_composites_on_random_shapes(seed):
    """Every output of the four ops, hidden ones included (their layout is the op's:
    the composites produce it too), fused kernel vs composite."""
    rng = np.random.default_rng(seed)
    t, b, i, h = (int(v) for v in rng.integers(1, 7, 4))
    order, rev = LSTM_ORDERS[seed % 4], bool(seed % 2)
    attrs = {"forget_bias": 0.5, "gate_order": order, "reverse": rev}
    args = [tf.constant(a) for a in _lstm_args(rng, t, b, i, h)]
    fast = execute(fused.FUSED_LSTM, tuple(args), attrs)
    slow = fused.lstm_unfused(*args, **attrs)
    for f, s in zip(fast, slow):
        np.testing.assert_allclose(f.numpy(), s.numpy(), rtol=1e-10, atol=1e-12)
    douts = [tf.constant(rng.normal(size=s.shape)) for s in (fast[0], fast[1], fast[2])]
    gin = (*args[:5], fast[0], fast[4], fast[3], *douts)
    gf = execute(fused.FUSED_LSTM_GRAD, gin, attrs)
    gs = fused.lstm_grad_unfused(*gin, **attrs)
    for f, s in zip(gf, gs):
        np.testing.assert_allclose(f.numpy(), s.numpy(), rtol=1e-9, atol=1e-11)

    gattrs = {"gate_order": GRU_ORDERS[seed % 3], "reverse": rev}
    args = [tf.constant(a) for a in _gru_args(rng, t, b, i, h)]
    fast = execute(fused.FUSED_GRU, tuple(args), gattrs)
    slow = fused.gru_unfused(*args, **gattrs)
    for f, s in zip(fast, slow):
        np.testing.assert_allclose(f.numpy(), s.numpy(), rtol=1e-10, atol=1e-12)
    douts = [tf.constant(rng.normal(size=s.shape)) for s in (fast[0], fast[1])]
    gin = (*args[:4], fast[0], fast[2], fast[3], *douts)
    gf = execute(fused.FUSED_GRU_GRAD, gin, gattrs)
    gs = fused.gru_grad_unfused(*gin, **gattrs)
    for f, s in zip(gf, gs):
        np.testing.assert_allclose(f.numpy(), s.numpy(), rtol=1e-9, atol=1e-11)


def test_cells_are_one_step_of_the_sequences():
    rng = np.random.default_rng(3)
    x, h, c, w, u, b = _lstm_args(rng, 1, 3, 4, 5)
    h1, c1 = lstm_cell(x[0], h, c, w, u, b, forget_bias=1.0, gate_order="icfo")
    _, hw, cw = ref_lstm_sequence(x, h, c, w, u, b, forget_bias=1.0, gate_order="icfo")
    np.testing.assert_allclose(h1.numpy(), hw, rtol=1e-12)
    np.testing.assert_allclose(c1.numpy(), cw, rtol=1e-12)
    x, h, w, u, b, rb = _gru_args(rng, 1, 3, 4, 5)
    h1 = gru_cell(x[0], h, w, u, b, rb, gate_order="rzh")
    np.testing.assert_allclose(h1.numpy(), ref_gru_sequence(x, h, w, u, b, rb, "rzh")[1],
                               rtol=1e-12)


def test_inputs_convert_like_other_ops():
    """Variables, lists and NumPy arrays; Python/NumPy values take the dtype of the first
    tensor argument; a missing bias is zeros; empty sequences return the initial state."""
    rng = np.random.default_rng(4)
    x, h, c, w, u, _ = _lstm_args(rng, 3, 2, 3, 2, np.float32)
    vs = [tf.Variable(a) for a in (w, u)]
    out, hl, cl = lstm_sequence(x.astype(np.float64), h.tolist(), c, *vs)
    assert out.dtype == tf.float32
    want = ref_lstm_sequence(x, h, c, w, u)
    np.testing.assert_allclose(out.numpy(), want[0], rtol=1e-5, atol=1e-6)
    out, hl, cl = lstm_sequence(np.zeros((0, 2, 3), np.float32), h, c, w, u)
    assert out.shape == (0, 2, 2)
    np.testing.assert_array_equal(hl.numpy(), h)
    np.testing.assert_array_equal(cl.numpy(), c)
    out, hl = gru_sequence(np.zeros((0, 2, 3)), h.astype(np.float64),
                           np.ones((3, 6)), np.ones((2, 6)))
    assert out.shape == (0, 2, 2) and hl.dtype == tf.float64


@pytest.mark.parametrize("dt", [np.float16, tf.bfloat16.np])
def test_16_bit_floats_run_in_float32(dt):
    rng = np.random.default_rng(5)
    args = _lstm_args(rng, 4, 2, 3, 5, np.float32, scale=0.5)
    out = lstm_sequence(*[a.astype(dt) for a in args])
    assert out[0].dtype == tf.as_dtype(dt)
    want = ref_lstm_sequence(*[a.astype(dt).astype(np.float64) for a in args])
    np.testing.assert_allclose(out[0].numpy().astype(np.float64), want[0], atol=2e-2)
    out = gru_sequence(*[a.astype(dt) for a in _gru_args(rng, 4, 2, 3, 5, np.float32, 0.5)])
    assert out[1].dtype == tf.as_dtype(dt)


# --- gradients ---------------------------------------------------------------------------

def _numeric_grads(f, args, eps=1e-6):
    grads = []
    for k, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            up = [v.copy() for v in args]
            dn = [v.copy() for v in args]
            up[k][idx] += eps
            dn[k][idx] -= eps
            g[idx] = (f(*up) - f(*dn)) / (2 * eps)
        grads.append(g)
    return grads


def _lstm_loss(out, h, c):
    return tf.reduce_sum(out * out) + tf.reduce_sum(h * 0.5) + tf.reduce_sum(c * c * c)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("order", ["ifco", "oicf"])
def test_lstm_gradients_match_finite_differences(order, reverse):
    rng = np.random.default_rng(11)
    args = _lstm_args(rng, 3, 2, 3, 2)
    kw = {"forget_bias": 1.0, "gate_order": order, "reverse": reverse}
    ts = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch(ts)
        loss = _lstm_loss(*lstm_sequence(*ts, **kw))
    grads = tape.gradient(loss, ts)

    def f(*a):
        return float(_lstm_loss(*ref_lstm_sequence(*a, **kw)))
    for g, n in zip(grads, _numeric_grads(f, args)):
        np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("order", ["zrh", "hrz"])
def test_gru_gradients_match_finite_differences(order, reverse):
    rng = np.random.default_rng(12)
    args = _gru_args(rng, 3, 2, 3, 2)
    kw = {"gate_order": order, "reverse": reverse}
    ts = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch(ts)
        out, h = gru_sequence(*ts, **kw)
        loss = tf.reduce_sum(out * out) + tf.reduce_sum(h * h * h)
    grads = tape.gradient(loss, ts)

    def f(*a):
        out, h = ref_gru_sequence(*a, **kw)
        return float((out * out).sum() + (h * h * h).sum())
    for g, n in zip(grads, _numeric_grads(f, args)):
        np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("used", ["outputs", "h", "c"])
def test_gradients_match_the_composites_gradients(used):
    """The BPTT op against the tape through the unfused step ops, each output alone
    (the others' gradients are zeros) and the cell's h, c."""
    rng = np.random.default_rng(13)
    args = [tf.constant(a) for a in _lstm_args(rng, 6, 3, 4, 5)]
    kw = {"forget_bias": 0.3, "gate_order": "icfo", "reverse": True}
    pick = {"outputs": 0, "h": 1, "c": 2}[used]
    res = []
    for fn in (lstm_sequence, fused.lstm_unfused):
        with tf.GradientTape() as tape:
            tape.watch(args)
            y = fn(*args, **kw)[pick]
            loss = tf.reduce_sum(y * y)
        res.append(tape.gradient(loss, args))
    for a, b in zip(*res):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-11)
    gargs = [tf.constant(a) for a in _gru_args(rng, 6, 3, 4, 5)]
    res = []
    for fn in (gru_sequence, fused.gru_unfused):
        with tf.GradientTape() as tape:
            tape.watch(gargs)
            y = fn(*gargs, gate_order="rhz")[0 if used == "outputs" else 1]
            loss = tf.reduce_sum(tf.sin(y))
        res.append(tape.gradient(loss, gargs))
    for a, b in zip(*res):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-11)


def test_cell_gradients_flow_to_every_input_and_variables():
    rng = np.random.default_rng(14)
    x, h, c, w, u, b = (tf.Variable(a) for a in _lstm_args(rng, 1, 2, 3, 4))
    with tf.GradientTape() as tape:
        h1, c1 = lstm_cell(x[0], h, c, w, u, b)
        loss = tf.reduce_sum(h1) + tf.reduce_sum(c1)
    grads = tape.gradient(loss, [x, h, c, w, u, b])
    assert all(g is not None and g.shape == v.shape for g, v in zip(grads, [x, h, c, w, u, b]))
    x, h, w, u = (tf.Variable(a) for a in _gru_args(rng, 1, 2, 3, 4)[:4])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(gru_cell(x[0], h, w, u))
    assert all(g is not None for g in tape.gradient(loss, [x, h, w, u]))


def test_second_order_is_a_clear_error():
    rng = np.random.default_rng(15)
    args = [tf.constant(a) for a in _lstm_args(rng, 2, 2, 2, 2)]
    with tf.GradientTape() as outer:
        outer.watch(args)
        with tf.GradientTape() as inner:
            inner.watch(args)
            loss = tf.reduce_sum(lstm_sequence(*args)[0])
        g = inner.gradient(loss, args[3])
        gg = tf.reduce_sum(g * g)
    with pytest.raises(NotDifferentiableError, match="second-order"):
        outer.gradient(gg, args[3])


# --- forward mode and vectorized_map ----------------------------------------------------------

def test_forward_mode_matches_the_composite():
    rng = np.random.default_rng(16)
    args = [tf.constant(a) for a in _lstm_args(rng, 4, 2, 3, 3)]
    tangents = [tf.constant(rng.normal(size=a.shape)) for a in args]
    res = []
    for fn in (lstm_sequence, fused.lstm_unfused):
        with tf.autodiff.ForwardAccumulator(args, tangents) as acc:
            out = fn(*args, forget_bias=0.2, gate_order="fico", reverse=True)
        res.append([acc.jvp(o) for o in out[:3]])
    for a, b in zip(*res):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-11)
    args = [tf.constant(a) for a in _gru_args(rng, 4, 2, 3, 3)]
    tangents = [tf.constant(rng.normal(size=a.shape)) for a in args]
    res = []
    for fn in (gru_sequence, fused.gru_unfused):
        with tf.autodiff.ForwardAccumulator(args, tangents) as acc:
            out = fn(*args, gate_order="hzr")
        res.append([acc.jvp(o) for o in out[:2]])
    for a, b in zip(*res):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-11)


def test_vectorized_map_folds_the_examples_into_the_batch():
    rng = np.random.default_rng(17)
    x = rng.normal(size=(4, 3, 2, 3))
    h0 = rng.normal(size=(4, 2, 5))
    _, _, c0, w, u, b = _lstm_args(rng, 3, 2, 3, 5)

    def one(args):
        xe, he = args
        out, h, c = lstm_sequence(xe, he, c0, w, u, b, reverse=True)
        return out, h, c
    got = tf.vectorized_map(one, (tf.constant(x), tf.constant(h0)))
    for k in range(4):
        want = ref_lstm_sequence(x[k], h0[k], c0, w, u, b, reverse=True)
        for g, wv in zip(got, want):
            np.testing.assert_allclose(g.numpy()[k], wv, rtol=1e-10, atol=1e-12)


def test_vectorized_map_with_weights_per_example_and_jacobians():
    """Weights per example run the composite with batched matmuls; a jacobian batches
    the BPTT ops the same way (per-example weight gradients)."""
    rng = np.random.default_rng(23)
    per = [np.stack([a] * 1 + [a * 0.5]) for a in _gru_args(rng, 3, 2, 3, 4)]

    def one(args):
        return gru_sequence(*args, gate_order="rzh")
    got = tf.vectorized_map(one, tuple(tf.constant(a) for a in per))
    for k in range(2):
        want = ref_gru_sequence(*[a[k] for a in per], gate_order="rzh")
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy()[k], w, rtol=1e-10, atol=1e-12)
    args = [tf.constant(a) for a in _lstm_args(rng, 3, 2, 3, 2)]
    jac = []
    for fn in (lstm_sequence, fused.lstm_unfused):
        with tf.GradientTape() as tape:
            tape.watch(args)
            h = fn(*args, gate_order="icfo")[1]
        jac.append(tape.jacobian(h, args[4]))
    np.testing.assert_allclose(jac[0].numpy(), jac[1].numpy(), rtol=1e-9, atol=1e-11)


# --- tf.function ---------------------------------------------------------------------------

def test_traced_matches_eager_one_node_per_sequence():
    rng = np.random.default_rng(18)
    vs = [tf.Variable(a) for a in _lstm_args(rng, 5, 3, 4, 6, np.float32)]
    gv = [tf.Variable(a) for a in _gru_args(rng, 5, 3, 6, 4, np.float32)]

    def step():
        with tf.GradientTape() as tape:
            out, h, c = lstm_sequence(*vs, gate_order="icfo")
            out2, h2 = gru_sequence(out, *gv[1:], reverse=True)
            loss = tf.reduce_sum(out2 * out2) + tf.reduce_sum(c)
        return loss, tape.gradient(loss, vs + gv[1:])
    traced = tf.function(step)
    eager = step()
    for _ in range(3):                     # repeated calls replay the same graph
        got = traced()
        np.testing.assert_allclose(got[0].numpy(), eager[0].numpy(), rtol=1e-6)
        for a, b in zip(got[1], eager[1]):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    text = str(traced.get_concrete_function().graph)
    for op in ("FusedLSTM", "FusedLSTMGrad", "FusedGRU", "FusedGRUGrad"):
        assert text.count(f" = {op}(") == 1, text
    assert "MatMul" not in text and "Tanh" not in text


def test_traced_function_under_an_outer_tape():
    rng = np.random.default_rng(19)
    args = [tf.constant(a) for a in _lstm_args(rng, 4, 2, 3, 3)]
    f = tf.function(lambda *a: tf.reduce_sum(lstm_sequence(*a)[0] ** 2))
    grads = []
    for fn in (f, lambda *a: tf.reduce_sum(lstm_sequence(*a)[0] ** 2)):
        with tf.GradientTape() as tape:
            tape.watch(args)
            loss = fn(*args)
        grads.append(tape.gradient(loss, args))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10)


# --- devices -----------------------------------------------------------------------------------

@pytest.mark.skipif(not OPENCL, reason="no OpenCL device")
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
def test_opencl_matches_the_cpu(reverse, dt):
    rng = np.random.default_rng(20 + reverse)
    cases = [(lstm_sequence, _lstm_args(rng, 5, 3, 4, 6, dt),
              {"forget_bias": 1.0, "gate_order": "oicf", "reverse": reverse}),
             (gru_sequence, _gru_args(rng, 5, 3, 4, 6, dt), {"gate_order": "rhz",
                                                              "reverse": reverse})]
    for fn, args, kw in cases:
        res = {}
        for dev in ("cpu:0", OPENCL[0]):
            with tf.device(dev):
                ts = [tf.constant(a) for a in args]
                with tf.GradientTape() as tape:
                    tape.watch(ts)
                    out = fn(*ts, **kw)
                    loss = tf.reduce_sum(out[0] * out[0]) + tf.reduce_sum(out[-1])
                grads = tape.gradient(loss, ts)
            assert out[0].device == dev
            res[dev] = [o.numpy() for o in out] + [g.numpy() for g in grads]
        for a, b in zip(*res.values()):
            np.testing.assert_allclose(a, b, rtol=1e-4 if dt == np.float32 else 1e-10,
                                       atol=1e-5 if dt == np.float32 else 1e-12)


@pytest.mark.skipif(not OPENCL, reason="no OpenCL device")
def test_opencl_cells_and_empty_sequences():
    rng = np.random.default_rng(22)
    x, h, c, w, u, b = _lstm_args(rng, 1, 2, 3, 4, np.float32)
    with tf.device(OPENCL[0]):
        h1, c1 = lstm_cell(x[0], h, c, w, u, b)
        out, hl, cl = lstm_sequence(np.zeros((0, 2, 3), np.float32), h, c, w, u)
        g = gru_cell(x[0], h, np.ones((3, 12), np.float32), np.ones((4, 12), np.float32))
    want = ref_lstm_sequence(x, h, c, w, u, b)
    np.testing.assert_allclose(h1.numpy(), want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c1.numpy(), want[2], rtol=1e-5, atol=1e-6)
    assert out.shape == (0, 2, 4) and np.array_equal(hl.numpy(), h)
    assert g.shape == (2, 4)


_FAKE_CUPY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "backends", "fake_cupy")

_CUDA_SCRIPT = """
import numpy as np, tapeflow as tf
from tapeflow.ops.fused import lstm_sequence, gru_sequence
assert "cuda:0" in [d.name for d in tf.list_devices()]
rng = np.random.default_rng(0)
for fn, k, kw in ((lstm_sequence, 4, {"gate_order": "icfo", "forget_bias": 1.0}),
                  (gru_sequence, 3, {"gate_order": "hzr", "reverse": True})):
    shapes = [(4, 3, 5), (3, 6)] + [(3, 6)] * (k == 4) + [(5, 6 * k), (6, 6 * k), (6 * k,)]
    args = [rng.normal(size=s).astype(np.float32) for s in shapes]
    res = {}
    for dev in ("cpu:0", "cuda:0"):
        with tf.device(dev):
            ts = [tf.constant(a) for a in args]
            with tf.GradientTape() as tape:
                tape.watch(ts)
                out = fn(*ts, **kw)
                loss = tf.reduce_sum(out[0] * out[0]) + tf.reduce_sum(out[-1])
            grads = tape.gradient(loss, ts)
        assert out[0].device == dev, out[0].device
        res[dev] = [o.numpy() for o in out] + [g.numpy() for g in grads]
    for a, b in zip(*res.values()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
print("ok")
"""


def test_cuda_backend_runs_the_shared_kernels_on_the_cupy_stand_in():
    """The CUDA backend registers the same xp kernels (``kernels.nn_fused``) with CuPy:
    run them through its Python layer on tests/backends' NumPy stand-in for CuPy (this
    checks the CuPy API calls and the placement, not a GPU)."""
    pytest.importorskip("tapeflow_cuda_cupy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_FAKE_CUPY,
                                                       os.environ.get("PYTHONPATH", "")]),
               FAKE_CUPY_DEVICES="1", TAPEFLOW_CUDA_DISABLE="")
    env.pop("TAPEFLOW_DEFAULT_DEVICE", None)
    r = subprocess.run([sys.executable, "-c", _CUDA_SCRIPT], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0 and "ok" in r.stdout, (r.stdout + r.stderr)[-3000:]


def test_kernels_take_any_array_module():
    """The kernels are written against ``xp``: NumPy here (CuPy on CUDA)."""
    k = FusedNNKernels(np)
    x = np.ones((2, 1, 3))
    out, h, c, gates, cs = k.lstm(x, np.zeros((1, 2)), np.zeros((1, 2)), np.ones((3, 8)),
                                  np.zeros((2, 8)), np.zeros(8))
    assert gates.shape == (2, 8, 1) and cs.shape == (2, 2, 1)
    np.testing.assert_allclose(h, ref_lstm_sequence(x, np.zeros((1, 2)), np.zeros((1, 2)),
                                                    np.ones((3, 8)), np.zeros((2, 8)))[1])


# --- bad input ---------------------------------------------------------------------------------

def _lstm_ok():
    return [np.ones(s, np.float32) for s in [(3, 2, 4), (2, 5), (2, 5), (4, 20), (5, 20), (20,)]]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("k, shape, match", [
    (0, (3, 4), "x must be 3-d [T, B, I] (time-major)"),
    (1, (3, 5), "h0 has shape [3, 5] but must be [2, 5]"),
    (2, (2, 4), "c0 has shape [2, 4] but must be [2, 5]"),
    (3, (4, 16), "kernel has shape [4, 16] but must be [4, 20]"),
    (4, (5, 15), "recurrent_kernel has shape [5, 15] but must be [5, 20]"),
    (5, (5,), "bias has shape [5] but must be [20]"),
])
def test_lstm_bad_shapes_name_the_op_the_shapes_and_the_rule(dev, k, shape, match):
    args = _lstm_ok()
    args[k] = np.ones(shape, np.float32)
    with tf.device(dev):
        with pytest.raises(InvalidArgumentError) as e:
            lstm_sequence(*args)
    msg = str(e.value)
    assert match in msg and "FusedLSTM" in msg and dev in msg, msg


def test_bad_input_errors():
    a = _lstm_ok()
    with pytest.raises(InvalidArgumentError, match="gate_order must name each of the gates"):
        lstm_sequence(*a, gate_order="ifcx")
    with pytest.raises(InvalidArgumentError, match="gate_order"):
        gru_sequence(a[0], a[1], np.ones((4, 15), np.float32), np.ones((5, 15), np.float32),
                     gate_order="zrc")
    with pytest.raises(InvalidArgumentError, match="one floating-point dtype"):
        lstm_sequence(tf.constant(a[0]), tf.constant(a[1], tf.float64), *a[2:])
    with pytest.raises(InvalidArgumentError, match="one floating-point dtype"):
        lstm_sequence(*[tf.constant(v.astype(np.int32)) for v in a])
    with pytest.raises(InvalidArgumentError, match=r"lstm_cell: x must be 2-d \[B, I\]"):
        lstm_cell(*a)
    with pytest.raises(InvalidArgumentError, match="gru_cell: x must be 2-d"):
        gru_cell(a[0], a[1], np.ones((4, 15), np.float32), np.ones((5, 15), np.float32))
    with pytest.raises(InvalidArgumentError, match="kernel is required"):
        lstm_sequence(a[0], a[1], a[2], None, a[4])
    with pytest.raises(InvalidArgumentError, match="recurrent_bias has shape"):
        gru_sequence(a[0], a[1], np.ones((4, 15), np.float32), np.ones((5, 15), np.float32),
                     None, np.ones(14, np.float32))
    with pytest.raises(Exception, match="forget_bias"):
        lstm_sequence(*a, forget_bias="one")


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("shape", [(3, 0, 2, 2), (3, 2, 0, 2), (0, 2, 2, 2), (2, 2, 2, 0)])
def test_empty_dimensions(dev, shape):
    """Empty batch, input, time or unit dimensions: outputs and gradients of the right
    shapes, and the values of the reference (an empty sequence returns the state)."""
    t, b, i, h = shape
    rng = np.random.default_rng(24)
    for fn, ref, args in ((lstm_sequence, ref_lstm_sequence, _lstm_args(rng, t, b, i, h)),
                          (gru_sequence, ref_gru_sequence, _gru_args(rng, t, b, i, h))):
        with tf.device(dev):
            ts = [tf.constant(a) for a in args]
            with tf.GradientTape() as tape:
                tape.watch(ts)
                out = fn(*ts)
                loss = tf.reduce_sum(out[0]) + tf.reduce_sum(out[1])
            grads = tape.gradient(loss, ts)
        for o, w in zip(out, ref(*args)):
            np.testing.assert_allclose(o.numpy(), w, rtol=1e-10, atol=1e-12)
        assert [tuple(g.shape) for g in grads] == [a.shape for a in args]
