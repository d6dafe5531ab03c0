"""The fused convolution ``_FusedConv2D`` (Conv2D + bias + activation, issue 34):
the op against the unfused ops (values, gradients, second order, forward mode) on
cpu:0 and opencl:0, the host kernel's per-block epilogue (im2col blocks and Winograd),
``layers.Conv2D`` using it, the ``tf.function`` pass ``conv`` and its rules, bad input,
and the cuDNN graph it builds (on the stand-ins of tests/backends/test_cudnn.py).
The conformance spec (``nn_fused.fused_conv2d``) checks it against a NumPy reference
with finite-difference gradients on every device, the CuPy stand-in included."""

from __future__ import annotations

import importlib.util
import os
import sys
from math import erf

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.kernels import nn as k_nn
from tapeflow.kernels import nn_fused as k_fused
from tapeflow.kernels import winograd
from tapeflow.ops.fused import ACTIVATIONS, FUSED_CONV2D, fused_conv2d, unfused
from tapeflow.runtime.dispatch import execute

DEVICES = [d.name for d in tf.list_devices() if d.type in ("cpu", "opencl")]
ACTS = (None,) + ACTIVATIONS
GEOMS = [  # x shape (NHWC), filter, strides, padding, dilations
    ((2, 7, 8, 3), (3, 3, 3, 5), (1, 1), "SAME", (1, 1)),
    ((2, 9, 7, 2), (3, 2, 2, 4), (2, 1), "VALID", (1, 2)),
    ((1, 6, 6, 4), (2, 2, 4, 3), (1, 1), ((1, 0), (2, 1)), (2, 2)),
]


def _attrs(strides, padding, fmt, dilations, act, alpha=0.3):
    return {"strides": strides, "padding": padding, "data_format": fmt, "dilations": dilations,
            "fused_ops": ("BiasAdd",) + ((act,) if act else ()), "num_args": 1,
            "leakyrelu_alpha": alpha}


def _inputs(rng, xs, ws, fmt, dt):
    x = rng.standard_normal(xs).astype(dt)
    if fmt == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    return x, rng.standard_normal(ws).astype(dt), rng.standard_normal(ws[3]).astype(dt)


def _fused_and_unfused(dev, x, w, b, attrs, alpha):
    """Output and gradients (x, w, b) of the fused op and of the unfused ops, under a
    loss that weighs every output element differently."""
    res = []
    with tf.device(dev):
        xs, ws, bs = tf.constant(x), tf.constant(w), tf.constant(b)
        for fused in (True, False):
            with tf.GradientTape() as tape:
                tape.watch([xs, ws, bs])
                if fused:
                    act = attrs["fused_ops"][1] if len(attrs["fused_ops"]) > 1 else None
                    y = fused_conv2d(xs, ws, bs, attrs["strides"], attrs["padding"],
                                     attrs["data_format"], attrs["dilations"], act, alpha)
                else:
                    y = unfused(xs, ws, bs, **attrs)
                loss = tf.reduce_sum(y * tf.sin(y))
            res.append([y.numpy()] + [g.numpy() for g in tape.gradient(loss, [xs, ws, bs])])
    return res


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fused_equals_unfused_values_and_gradients(dev, fmt, dt):
    rng = np.random.default_rng(1)
    tol = 2e-5 if dt == np.float32 else 1e-12
    for k, act in enumerate(ACTS):
        for alpha in ((0.3, -0.5) if act == "LeakyRelu" else (0.3,)):
            xs, ws, st, pad, dil = GEOMS[k % len(GEOMS)]
            x, w, b = _inputs(rng, xs, ws, fmt, dt)
            attrs = _attrs(st, pad, fmt, dil, act, alpha)
            fused, ref = _fused_and_unfused(dev, x, w, b, attrs, alpha)
            for what, a, r in zip(("y", "dx", "dw", "db"), fused, ref):
                assert a.dtype == r.dtype and a.shape == r.shape, (act, what)
                scale = max(1.0, float(np.abs(r).max()))
                assert np.abs(a - r).max() <= tol * scale, (dev, fmt, act, alpha, what)


@pytest.mark.parametrize("act", ["Relu", "Elu", "GeluApproximate", "LeakyRelu"])
def test_second_order_and_forward_mode_match_unfused(act):
    rng = np.random.default_rng(2)
    x, w, b = _inputs(rng, (1, 5, 5, 2), (3, 3, 2, 3), "NHWC", np.float64)
    attrs = _attrs((1, 1), "SAME", "NHWC", (1, 1), act, -0.5 if act == "LeakyRelu" else 0.3)
    xs, ws, bs = tf.constant(x), tf.constant(w), tf.constant(b)
    out = []
    for f in (lambda *a: fused_conv2d(*a, strides=1, padding="SAME", activation=act,
                                      leakyrelu_alpha=attrs["leakyrelu_alpha"]),
              lambda *a: unfused(*a, **attrs)):
        with tf.GradientTape() as outer:
            outer.watch(ws)
            with tf.GradientTape() as inner:
                inner.watch(xs)
                loss = tf.reduce_sum(f(xs, ws, bs) ** 2)
            gx = inner.gradient(loss, xs)
            s = tf.reduce_sum(gx * gx)
        ggw = outer.gradient(s, ws)
        with tf.autodiff.ForwardAccumulator(bs, tf.ones_like(bs)) as acc:
            y = f(xs, ws, bs)
        out.append((ggw.numpy(), acc.jvp(y).numpy()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["never", "always"])
def test_host_epilogue_runs_on_every_block_and_on_winograd_output(mode, monkeypatch):
    """A batch several im2col blocks long (and the Winograd output) gets the bias and
    activation on every image, not only the first block."""
    monkeypatch.setattr(winograd, "MODE", mode)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 20, 20, 16)).astype(np.float32)   # > COLS_BYTES
    w = rng.standard_normal((3, 3, 16, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    nn = k_nn.NNKernels(np)
    z = nn.conv2d(x, w, (1, 1), "SAME", "NHWC", (1, 1)) + b
    y = k_fused.FusedNNKernels(np).fused_conv2d(x, w, b, (1, 1), "SAME", "NHWC", (1, 1),
                                                ("BiasAdd", "Relu6"))
    np.testing.assert_allclose(y, np.clip(z, 0, 6), rtol=1e-5, atol=1e-5)


def test_float16_runs_in_float32_and_rounds_once():
    rng = np.random.default_rng(4)
    x, w, b = _inputs(rng, (1, 5, 5, 2), (3, 3, 2, 3), "NHWC", np.float16)
    y = fused_conv2d(x, w, b, padding="SAME", activation="Elu")
    assert y.dtype == tf.float16
    ref = fused_conv2d(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32),
                       padding="SAME", activation="Elu").numpy().astype(np.float16)
    np.testing.assert_array_equal(y.numpy(), ref)


# --- layers.Conv2D ------------------------------------------------------------------------

def _graph_ops(fn, *args):
    """The ops ``fn`` itself runs (traced, no graph pass)."""
    return tf.function(lambda *a: fn(*a), optimize=False).get_concrete_function(
        *args).graph.ops()


@pytest.mark.parametrize("activation,fused", [
    ("relu", True), ("relu6", True), ("elu", True), ("leaky_relu", True), ("gelu", True),
    (None, True), (tf.nn.relu, True), ("tanh", False), ("selu", False)])
@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_conv2d_layer_uses_the_fused_op(activation, fused, fmt):
    rng = np.random.default_rng(5)
    shape = (2, 6, 6, 3) if fmt == "channels_last" else (2, 3, 6, 6)
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    layer = tf.keras.layers.Conv2D(4, 3, padding="same", activation=activation,
                                   data_format=fmt, bias_initializer="glorot_uniform")
    y = layer(x)
    ops = _graph_ops(layer, x)
    assert ("_FusedConv2D" in ops) == fused and ("Conv2D" in ops) != fused, ops
    nfmt = "NHWC" if fmt == "channels_last" else "NCHW"
    z = tf.nn.bias_add(tf.nn.conv2d(x, layer.kernel, 1, "SAME", data_format=nfmt),
                       layer.bias, data_format=nfmt)
    ref = z if layer.activation is None else layer.activation(z)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_conv2d_layer_without_bias_is_not_fused():
    layer = tf.keras.layers.Conv2D(2, 3, activation="relu", use_bias=False)
    assert "_FusedConv2D" not in _graph_ops(layer, tf.ones([1, 5, 5, 1]))


def test_conv2d_layer_trains_through_the_fused_op():
    rng = np.random.default_rng(6)
    x = tf.constant(rng.standard_normal((2, 6, 6, 2)).astype(np.float32))
    layer = tf.keras.layers.Conv2D(3, 3, activation="relu", bias_initializer="ones")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x) ** 2)
    gk, gb = tape.gradient(loss, [layer.kernel, layer.bias])
    with tf.GradientTape() as tape:
        z = tf.nn.relu(tf.nn.conv2d(x, layer.kernel, 1, "VALID") + layer.bias)
        loss2 = tf.reduce_sum(z ** 2)
    rk, rb = tape.gradient(loss2, [layer.kernel, layer.bias])
    np.testing.assert_allclose(gk.numpy(), rk.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb.numpy(), rb.numpy(), rtol=1e-5, atol=1e-5)


# --- the graph pass -----------------------------------------------------------------------

W = np.random.default_rng(7).standard_normal((3, 3, 2, 4)).astype(np.float32)
B = np.random.default_rng(8).standard_normal(4).astype(np.float32)
X = tf.constant(np.random.default_rng(9).standard_normal((2, 5, 5, 2)).astype(np.float32))


def _check_pass(fn, expect, x=X, **kw):
    f = tf.function(fn, **kw)
    cf = f.get_concrete_function(x)
    ops = cf.graph.ops()
    for a, b in zip(tf.nest.flatten(f(x)), tf.nest.flatten(fn(x))):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)
    assert expect(ops), ops
    return ops


@pytest.mark.parametrize("act", [tf.nn.relu, tf.nn.relu6, tf.nn.elu,
                                 lambda z: tf.nn.leaky_relu(z, 0.1)])
def test_pass_fuses_conv_biasadd_activation(act):
    _check_pass(lambda x: act(tf.nn.bias_add(tf.nn.conv2d(x, W, 1, "SAME"), B)),
                lambda ops: ops == ["_FusedConv2D"])


def test_pass_fuses_an_add_of_a_1d_bias_and_nchw_biasadd():
    _check_pass(lambda x: tf.nn.relu(B + tf.nn.conv2d(x, W, 1, "SAME")),
                lambda ops: ops == ["_FusedConv2D"])
    xc = tf.transpose(X, [0, 3, 1, 2])
    _check_pass(lambda x: tf.nn.elu(tf.nn.bias_add(
        tf.nn.conv2d(x, W, 1, "SAME", data_format="NCHW"), B, data_format="NCHW")),
        lambda ops: ops == ["_FusedConv2D"], x=xc)


def test_pass_leaves_what_it_must_not_fuse():
    # the pre-activation is returned too: conv + bias only, the activation stays
    _check_pass(lambda x: (lambda z: (tf.nn.relu(z), z))(tf.nn.bias_add(
        tf.nn.conv2d(x, W, 1, "SAME"), B)), lambda ops: ops[:2] == ["_FusedConv2D", "Relu"])
    # the convolution's output is used elsewhere: nothing fused
    _check_pass(lambda x: (lambda c: (tf.nn.relu(c + B), c))(tf.nn.conv2d(x, W, 1, "SAME")),
                lambda ops: "_FusedConv2D" not in ops and "Conv2D" in ops)
    # a 2-d "bias" is not a bias
    _check_pass(lambda x: tf.nn.relu(tf.nn.conv2d(x, W, 1, "SAME") + B[None, :]),
                lambda ops: "_FusedConv2D" not in ops)
    # the pass switched off
    _check_pass(lambda x: tf.nn.relu(tf.nn.conv2d(x, W, 1, "SAME") + B),
                lambda ops: "_FusedConv2D" not in ops, passes=("dce", "fuse"))


@pytest.mark.parametrize("alpha", [0.2, -0.5])
def test_pass_in_a_training_step_rewrites_the_activation_gradient(alpha):
    w, b = tf.Variable(W), tf.Variable(B)

    def step(x):
        with tf.GradientTape() as tape:
            y = tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b), alpha)
            loss = tf.reduce_sum(y * y)
        return [loss] + tape.gradient(loss, [w, b])

    ops = _check_pass(step, lambda ops: "_FusedConv2D" in ops and "Conv2D" not in ops)
    # alpha < 0: the gradient needs the pre-activation, so the activation stays unfused
    assert any("LeakyRelu" in o.replace("LeakyReluGrad", "") for o in ops) == (alpha < 0), ops


def test_taped_replay_differentiates_the_fused_node():
    w = tf.constant(W)
    f = tf.function(lambda x: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + B))
    assert f.get_concrete_function(X).graph.ops() == ["_FusedConv2D"]
    grads = []
    for fn in (f, f.python_function):
        with tf.GradientTape() as tape:
            tape.watch(X)
            loss = tf.reduce_sum(fn(X) ** 2)
        grads.append(tape.gradient(loss, X).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-5)


def test_vectorized_map_over_images_batches_the_fused_op():
    xs = tf.constant(np.random.default_rng(10).standard_normal((3, 1, 5, 5, 2)),
                     dtype=tf.float32)
    got = tf.vectorized_map(lambda x: fused_conv2d(x, W, B, padding="SAME",
                                                   activation="Relu"), xs)
    ref = tf.stack([fused_conv2d(x, W, B, padding="SAME", activation="Relu") for x in xs])
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)


# --- bad input ----------------------------------------------------------------------------

def test_bad_input_names_the_op_the_device_and_the_fix():
    x = np.ones((1, 5, 5, 2), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"_FusedConv2D.*one value per output"):
        fused_conv2d(x, W, np.ones(3, np.float32), padding="SAME")
    with pytest.raises(InvalidArgumentError, match=r"activation must be.*Relu") as e:
        fused_conv2d(x, W, B, padding="SAME", activation="swish")
    assert "cpu:0" in str(e.value)
    with pytest.raises(InvalidArgumentError, match=r"share one floating-point dtype"):
        fused_conv2d(tf.constant(x), tf.constant(W.astype(np.float64)), tf.constant(B),
                     padding="SAME")
    with pytest.raises(InvalidArgumentError, match=r"fused_ops must be"):
        execute(FUSED_CONV2D, (tf.constant(x), tf.constant(W), tf.constant(B)),
                {"padding": "SAME", "fused_ops": ("BiasAdd", "Tanh")})


# --- cuDNN: the fused graph on the stand-ins --------------------------------------------

def _cudnn_test_module():
    """tests/backends/test_cudnn.py (its FakeCp/FakeCudnn stand-ins), or skip."""
    pytest.importorskip("tapeflow_cuda_cupy.cudnn_conv", reason="tapeflow-cuda-cupy missing")
    path = os.path.join(os.path.dirname(__file__), "backends", "test_cudnn.py")
    spec = importlib.util.spec_from_file_location("_tapeflow_test_cudnn", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fused_fake_graph_class(T):
    """FakeGraph with the frontend's bias and pointwise activations (the pybind names and
    keywords), executed with cuDNN's definitions in float64."""

    class FusedGraph(T.FakeGraph):
        def __init__(self, module, **kw):
            super().__init__(module, **kw)
            self.epi = []

        def _node(self, *desc):
            self.epi.append(desc)
            t = T.FakeTensor(desc[0] + "_out")
            self.tensors.append(t)
            return t

        def bias(self, *, input, bias, compute_data_type=None, name=""):
            return self._node("bias", bias)

        def relu(self, *, input, negative_slope=None, lower_clip=None, upper_clip=None,
                 compute_data_type=None, name=""):
            return self._node("relu", negative_slope, lower_clip, upper_clip)

        def leaky_relu(self, *, input, negative_slope, compute_data_type=None, name=""):
            return self._node("relu", negative_slope, None, None)

        def elu(self, *, input, compute_data_type=None, name=""):
            return self._node("elu")

        def gelu(self, *, input, compute_data_type=None, name=""):
            return self._node("gelu")

        def gelu_approx_tanh(self, *, input, compute_data_type=None, name=""):
            return self._node("gelu_tanh")

        def validate(self):
            self.calls.append("validate")
            for t in self.tensors:
                if t.output or not t.name.endswith("_out"):
                    assert len(t.dim) == len(t.stride) == 4, t.name

        def execute(self, buffers, workspace, handle=None):
            kind, a, b, conv, _ = self.node
            bias_t = self.epi[0][1]
            out = next(t for t in self.tensors if t.output)
            assert set(buffers) == {a, b, bias_t, out}
            arr = {t: T._view(p, t.dim, t.stride, T._NP[t.data_type]) for t, p in
                   buffers.items()}
            z = T.cudnn_reference(kind, arr[a].astype(np.float64), arr[b].astype(np.float64),
                                  out.dim, conv) + arr[bias_t].astype(np.float64)
            for op, *args in self.epi[1:]:
                if op == "relu":
                    slope, lo, hi = args
                    z = np.where(z > 0, z, 0.0 if slope is None else slope * z)
                    z = z if hi is None else np.minimum(z, hi)
                elif op == "elu":
                    z = np.where(z > 0, z, np.expm1(np.minimum(z, 0)))
                elif op == "gelu":
                    z = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
                else:
                    z = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
            arr[out][...] = z

    return FusedGraph


@pytest.fixture
def fused_fake(monkeypatch):
    T = _cudnn_test_module()
    cudnn_conv = T.cudnn_conv
    mod = T.FakeCudnn()
    graph_cls = _fused_fake_graph_class(T)
    mod.pygraph = lambda **kw: graph_cls(mod, **kw)
    monkeypatch.setitem(sys.modules, "cudnn", mod)
    monkeypatch.setattr(cudnn_conv, "_frontend", None)
    monkeypatch.setattr(cudnn_conv, "ACTIVE", [None])
    was = tf.config._cudnn[0]
    tf.config.experimental.enable_cudnn_convolutions(True)
    ctx = tf.plugins.BuildContext(np, "cpu")
    shared = {op: s.fn for op, s in k_nn.build(ctx).items() if op in cudnn_conv.OPS}
    shared["_FusedConv2D"] = k_fused.build(ctx)["_FusedConv2D"].fn
    fns = cudnn_conv.build(tf.plugins.BuildContext(np, "cuda", cp=T.FakeCp(), shared=shared))
    yield T, fns, cudnn_conv.ACTIVE[0], mod
    cudnn_conv.reset_for_tests()
    tf.config.enable_cudnn_convolutions(was)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_cudnn_fused_graph_matches_the_shared_kernel(fused_fake, fmt):
    T, fns, conv, mod = fused_fake
    rng = np.random.default_rng(11)
    for k, act in enumerate(ACTS):
        xs, ws, st, pad, dil = GEOMS[k % len(GEOMS)]
        x, w, b = _inputs(rng, xs, ws, fmt, np.float32)
        attrs = _attrs(st, pad, fmt, dil, act)
        got = fns["_FusedConv2D"](T._dev(x), T._dev(w), T._dev(b), **attrs)
        assert conv.last["_FusedConv2D"][0] == "cudnn", (act, conv.last)
        want = k_fused.FusedNNKernels(np).fused_conv2d(x, w, b, **attrs)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    # one graph per epilogue: the activation is part of the key
    assert conv.cache.builds == len(ACTS)


def test_cudnn_fused_path_falls_back_where_the_graph_cannot_say_it(fused_fake):
    T, fns, conv, mod = fused_fake
    rng = np.random.default_rng(12)
    x, w, b = _inputs(rng, (1, 5, 5, 2), (3, 3, 2, 3), "NHWC", np.float32)
    attrs = _attrs((1, 1), "SAME", "NHWC", (1, 1), "LeakyRelu", alpha=-0.5)
    got = fns["_FusedConv2D"](T._dev(x), T._dev(w), T._dev(b), **attrs)
    assert conv.last["_FusedConv2D"][0] == "im2col" and "alpha" in conv.last["_FusedConv2D"][1]
    np.testing.assert_allclose(np.asarray(got),
                               k_fused.FusedNNKernels(np).fused_conv2d(x, w, b, **attrs))


@pytest.mark.parametrize("act", ACTS)
def test_epilogue_on_rows_equals_the_broadcast_form(act):
    """The contiguous block's row form (tiled bias, zero and six rows; a whole image per
    row, or one image row when the image is big) gives the plain broadcast result."""
    rng = np.random.default_rng(13)
    b = rng.standard_normal(8).astype(np.float32) * 4
    for shape in ((3, 5, 4, 8), (2, 50, 60, 8)):            # small and > ROW_ELEMS images
        z = (rng.standard_normal(shape) * 4).astype(np.float32)
        contiguous = z.copy()
        strided = np.asfortranarray(z)                      # not C-contiguous: broadcast form
        for blk in (contiguous, strided):
            k_fused.Epilogue(np, b, act, 0.3)(blk)
        np.testing.assert_allclose(contiguous, strided, rtol=1e-6, atol=1e-6)
        zt = tf.constant(z + b)
        ref = {None: zt, "Relu": tf.nn.relu(zt), "Relu6": tf.nn.relu6(zt),
               "LeakyRelu": tf.nn.leaky_relu(zt, 0.3), "Elu": tf.nn.elu(zt),
               "GeluExact": tf.keras.activations.gelu(zt),
               "GeluApproximate": tf.keras.activations.gelu(zt, approximate=True)}[act]
        np.testing.assert_allclose(contiguous, ref.numpy(), rtol=1e-5, atol=1e-5)
