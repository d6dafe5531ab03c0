"""The convolution family: tf.nn.conv1d / conv1d_transpose / conv3d / conv3d_transpose /
depthwise_conv2d / separable_conv2d and the 1-d / 3-d pools, against naive NumPy
references (and PyTorch where installed), their gradients against finite differences,
output shapes for every padding / stride / dilation TF allows, the Keras layers (shapes,
weight names and shapes, get_config round trips), opencl:0 against cpu:0, tf.function
against eager, and the errors for bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.layers.convolutional import deconv_output_length
from tapeflow.testing import conformance

# naive loop references (float64), written for the conformance specs
from tapeflow.testing.specs.nn import (_pool_ref_nd, ref_conv1d, ref_conv3d,
                                       ref_conv3d_transpose, ref_depthwise_conv2d,
                                       ref_separable_conv2d)

RNG = np.random.default_rng(1234)


def _r(*shape):
    return RNG.standard_normal(shape)


def _needs_opencl():
    reason = conformance.unavailable_devices().get("opencl:0")
    if reason:
        pytest.skip(f"opencl:0 unavailable: {reason}")


def _same_out(n, s):
    return -(-n // s)


def _valid_out(n, k, s, d):
    return (n - (k - 1) * d - 1) // s + 1


def _numgrad(f, x, idx, eps=1e-6):
    xp, xm = x.copy(), x.copy()
    xp[idx] += eps
    xm[idx] -= eps
    return (f(xp) - f(xm)) / (2 * eps)


# --- ops against the references: every padding / stride / dilation -------------------------

@pytest.mark.parametrize("padding,stride,dil", [
    (p, s, d) for p in ("SAME", "VALID") for s in (1, 2, 3) for d in (1, 2)])
@pytest.mark.parametrize("fmt", ["NWC", "NCW"])
def test_conv1d_every_geometry(padding, stride, dil, fmt):
    x, w = _r(2, 9, 3), _r(3, 3, 4)
    xin = x if fmt == "NWC" else x.transpose(0, 2, 1)
    y = tf.nn.conv1d(tf.constant(xin), tf.constant(w), stride, padding, fmt, dil).numpy()
    want = ref_conv1d(x, w, stride, padding, "NWC", dil)
    n = _same_out(9, stride) if padding == "SAME" else _valid_out(9, 3, stride, dil)
    assert want.shape == (2, n, 4)
    np.testing.assert_allclose(y if fmt == "NWC" else y.transpose(0, 2, 1), want, atol=1e-10)


@pytest.mark.parametrize("padding,strides,dil", [
    ("SAME", 1, 1), ("VALID", 1, 1), ("SAME", 2, 1), ("VALID", [3, 1, 2], 1),
    ("SAME", 1, [2, 1, 2]), ("VALID", 1, 2), ("SAME", [1, 2, 3], 1)])
@pytest.mark.parametrize("fmt", ["NDHWC", "NCDHW"])
def test_conv3d_every_geometry(padding, strides, dil, fmt):
    x, w = _r(2, 7, 6, 7, 2), _r(3, 2, 3, 2, 3)
    xin = x if fmt == "NDHWC" else np.moveaxis(x, -1, 1)
    y = tf.nn.conv3d(tf.constant(xin), tf.constant(w), strides, padding, fmt, dil).numpy()
    if fmt == "NCDHW":
        y = np.moveaxis(y, 1, -1)
    want = ref_conv3d(x, w, strides, padding, "NDHWC", dil)
    s = (strides,) * 3 if isinstance(strides, int) else strides
    d = (dil,) * 3 if isinstance(dil, int) else dil
    outs = [(_same_out(n, si) if padding == "SAME" else _valid_out(n, k, si, di))
            for n, k, si, di in zip((7, 6, 7), (3, 2, 3), s, d)]
    assert want.shape == (2, *outs, 3)
    np.testing.assert_allclose(y, want, atol=1e-10)


@pytest.mark.parametrize("padding,strides,dil", [
    ("SAME", 1, 1), ("VALID", 1, 1), ("SAME", 2, 1), ("VALID", [3, 2], 1), ("SAME", 1, 2),
    ("VALID", 1, [1, 3])])
@pytest.mark.parametrize("mult", [1, 3])
def test_depthwise_and_separable_every_geometry(padding, strides, dil, mult):
    x, w, pw = _r(2, 8, 7, 3), _r(3, 2, 3, mult), _r(1, 1, 3 * mult, 5)
    y = tf.nn.depthwise_conv2d(tf.constant(x), tf.constant(w), strides, padding,
                               dilations=dil).numpy()
    np.testing.assert_allclose(y, ref_depthwise_conv2d(x, w, strides, padding, "NHWC", dil),
                               atol=1e-10)
    ys = tf.nn.separable_conv2d(tf.constant(x), tf.constant(w), tf.constant(pw), strides,
                                padding, dilations=dil).numpy()
    np.testing.assert_allclose(ys, ref_separable_conv2d(x, w, pw, strides, padding, "NHWC",
                                                        dil), atol=1e-10)
    # NCHW
    yc = tf.nn.depthwise_conv2d(tf.constant(x.transpose(0, 3, 1, 2)), tf.constant(w), strides,
                                padding, "NCHW", dil).numpy()
    np.testing.assert_allclose(yc.transpose(0, 2, 3, 1), y, atol=1e-10)


def test_depthwise_output_channel_order():
    # output channel c * multiplier + m is input channel c under filter[..., c, m]
    x = np.zeros((1, 1, 1, 2))
    x[..., 1] = 1.0
    w = np.arange(1.0, 5.0).reshape(1, 1, 2, 2)
    y = tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID").numpy().ravel()
    assert y.tolist() == [0.0, 0.0, 3.0, 4.0]


@pytest.mark.parametrize("padding,stride", [("SAME", 2), ("VALID", 2), ("SAME", 1),
                                            ("VALID", 3)])
def test_conv_transposes_are_adjoints(padding, stride):
    # <conv(x), y> == <x, conv_transpose(y)>
    x, w = _r(1, 7, 6, 5, 2), _r(3, 2, 3, 2, 4)
    y = tf.nn.conv3d(x, w, stride, padding)
    dy = _r(*y.shape)
    xt = tf.nn.conv3d_transpose(dy, w, list(x.shape), stride, padding).numpy()
    np.testing.assert_allclose((y.numpy() * dy).sum(), (x * xt).sum(), rtol=1e-10)
    np.testing.assert_allclose(xt, ref_conv3d_transpose(dy, w, list(x.shape), stride, padding),
                               atol=1e-10)
    x1, w1 = _r(2, 9, 2), _r(4, 2, 3)            # transposed filters: [w, out=2, in=3]
    y1 = tf.nn.conv1d(x1, w1, stride, padding)
    d1 = _r(*y1.shape)
    xt1 = tf.nn.conv1d_transpose(d1, w1, list(x1.shape), stride, padding).numpy()
    np.testing.assert_allclose((y1.numpy() * d1).sum(), (x1 * xt1).sum(), rtol=1e-10)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_pools_1d_3d(kind, padding):
    x3 = RNG.permutation(2 * 7 * 3).reshape(2, 7, 3) * 0.1
    f1 = tf.nn.max_pool1d if kind == "max" else tf.nn.avg_pool1d
    np.testing.assert_allclose(f1(x3, 3, 2, padding).numpy(),
                               _pool_ref_nd(kind, 1)(x3, 3, 2, padding, "NWC"), atol=1e-12)
    x5 = RNG.permutation(1 * 5 * 6 * 4 * 2).reshape(1, 5, 6, 4, 2) * 0.1
    f3 = tf.nn.max_pool3d if kind == "max" else tf.nn.avg_pool3d
    for k, s in [(2, 2), ([3, 2, 3], [2, 1, 2]), (3, 1)]:
        np.testing.assert_allclose(f3(x5, k, s, padding).numpy(),
                                   _pool_ref_nd(kind, 3)(x5, k, s, padding, "NDHWC"),
                                   atol=1e-12)
        yc = f3(np.moveaxis(x5, -1, 1), k, s, padding, "NCDHW").numpy()
        np.testing.assert_allclose(np.moveaxis(yc, 1, -1), f3(x5, k, s, padding).numpy())


# --- gradients (finite differences) ------------------------------------------------------

@pytest.mark.parametrize("which", ["conv1d", "conv3d", "depthwise", "separable", "conv3d_t",
                                   "max_pool3d", "avg_pool3d"])
def test_gradients_match_finite_differences(which):
    cases = {
        "conv1d": ((2, 7, 3), (3, 3, 2), lambda x, w: tf.nn.conv1d(x, w, 2, "SAME")),
        "conv3d": ((1, 5, 4, 5, 2), (2, 3, 2, 2, 3),
                   lambda x, w: tf.nn.conv3d(x, w, [2, 1, 2], "SAME")),
        "depthwise": ((2, 5, 6, 2), (3, 3, 2, 2),
                      lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME")),
        "separable": ((1, 5, 5, 2), (3, 3, 2, 1),
                      lambda x, w: tf.nn.separable_conv2d(x, w, tf.ones([1, 1, 2, 3],
                                                                        tf.float64),
                                                          1, "VALID", dilations=2)),
        "conv3d_t": ((1, 2, 3, 3, 2), (3, 3, 2, 3, 2),
                     lambda x, w: tf.nn.conv3d_transpose(x, w, [1, 4, 6, 3, 3], [2, 2, 1])),
        "max_pool3d": ((1, 4, 5, 4, 2), None, lambda x, w: tf.nn.max_pool3d(x, 2, 2, "SAME")),
        "avg_pool3d": ((1, 4, 5, 4, 2), None,
                       lambda x, w: tf.nn.avg_pool3d(x, [3, 2, 2], 1, "SAME")),
    }
    xs, ws, fn = cases[which]
    x = RNG.permutation(int(np.prod(xs))).reshape(xs) * 0.01 if "pool" in which else _r(*xs)
    w = _r(*ws) if ws else np.zeros(1)
    y0 = fn(tf.constant(x), tf.constant(w))
    c = _r(*y0.shape)

    def loss(xv, wv):
        return float(tf.reduce_sum(fn(tf.constant(xv), tf.constant(wv)) * c))

    xt, wt = tf.constant(x), tf.constant(w)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([xt, wt])
        out = tf.reduce_sum(fn(xt, wt) * c)
    gx, gw = tape.gradient(out, [xt, wt])
    for _ in range(4):
        i = tuple(int(RNG.integers(0, n)) for n in xs)
        assert abs(gx.numpy()[i] - _numgrad(lambda v: loss(v, w), x, i)) < 1e-6
        if ws:
            j = tuple(int(RNG.integers(0, n)) for n in ws)
            assert abs(gw.numpy()[j] - _numgrad(lambda v: loss(x, v), w, j)) < 1e-6


def test_second_order_through_conv3d():
    x, w = tf.constant(_r(1, 3, 4, 3, 2)), tf.constant(_r(2, 2, 2, 2, 2))
    with tf.GradientTape() as outer:
        outer.watch(w)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(tf.nn.conv3d(x, w, 1, "SAME") ** 2)
        gx = inner.gradient(y, x)
        z = tf.reduce_sum(gx * gx)
    gw = outer.gradient(z, w)
    assert gw.shape == w.shape and np.isfinite(gw.numpy()).all()


# --- PyTorch, with copied weights ------------------------------------------------------------

def test_against_pytorch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, w = _r(2, 11, 3), _r(3, 3, 5)
    y = tf.nn.conv1d(x, w, 2, "VALID", dilations=1).numpy()
    yt = F.conv1d(torch.tensor(x).permute(0, 2, 1), torch.tensor(w).permute(2, 1, 0),
                  stride=2).permute(0, 2, 1).numpy()
    np.testing.assert_allclose(y, yt, atol=1e-10)
    x3, w3 = _r(2, 6, 7, 5, 3), _r(3, 2, 3, 3, 4)
    y3 = tf.nn.conv3d(x3, w3, [1, 2, 2], "VALID", dilations=1).numpy()
    yt3 = F.conv3d(torch.tensor(x3).permute(0, 4, 1, 2, 3),
                   torch.tensor(w3).permute(4, 3, 0, 1, 2), stride=(1, 2, 2))
    np.testing.assert_allclose(y3, yt3.permute(0, 2, 3, 4, 1).numpy(), atol=1e-10)
    # depthwise = grouped convolution with groups = in_channels
    xd, wd = _r(2, 7, 6, 3), _r(3, 3, 3, 2)
    yd = tf.nn.depthwise_conv2d(xd, wd, [1, 1, 1, 1], "VALID", dilations=[2, 1]).numpy()
    wt = torch.tensor(wd).permute(2, 3, 0, 1).reshape(6, 1, 3, 3)
    ytd = F.conv2d(torch.tensor(xd).permute(0, 3, 1, 2), wt, groups=3, dilation=(2, 1))
    np.testing.assert_allclose(yd, ytd.permute(0, 2, 3, 1).numpy(), atol=1e-10)


def test_conv2d_transpose_layer_against_pytorch():
    torch = pytest.importorskip("torch")
    layer = tf.keras.layers.Conv2DTranspose(4, 5, strides=2, padding="same", dtype="float64")
    x = _r(2, 6, 7, 3)
    y = layer(x).numpy()
    k = layer.kernel.numpy()                     # [kh, kw, filters, in]
    assert k.shape == (5, 5, 4, 3)
    # TF's SAME transposed conv: total pad (5 - 2) = 3 of the forward output, 1 before
    full = torch.nn.functional.conv_transpose2d(
        torch.tensor(x).permute(0, 3, 1, 2), torch.tensor(k).permute(3, 2, 0, 1), stride=2)
    want = full[:, :, 1:13, 1:15].permute(0, 2, 3, 1).numpy() + layer.bias.numpy()
    np.testing.assert_allclose(y, want, atol=1e-10)


def test_bilinear_upsampling_against_pytorch():
    torch = pytest.importorskip("torch")
    x = _r(2, 4, 5, 3)
    for size in [(2, 2), (3, 2), (1, 4)]:
        y = tf.keras.layers.UpSampling2D(size, interpolation="bilinear",
                                         dtype="float64")(x).numpy()
        yt = torch.nn.functional.interpolate(torch.tensor(x).permute(0, 3, 1, 2),
                                             scale_factor=size, mode="bilinear",
                                             align_corners=False)
        np.testing.assert_allclose(y, yt.permute(0, 2, 3, 1).numpy(), atol=1e-10)


# --- the layers ------------------------------------------------------------------------------

LAYER_CASES = [
    ("Conv1D", dict(filters=4, kernel_size=3, strides=2, padding="same"), (2, 9, 3),
     (2, 5, 4), {"kernel": (3, 3, 4), "bias": (4,)}),
    ("Conv1D", dict(filters=4, kernel_size=3, padding="causal", dilation_rate=2), (2, 9, 3),
     (2, 9, 4), {"kernel": (3, 3, 4), "bias": (4,)}),
    ("Conv3D", dict(filters=2, kernel_size=(3, 2, 3), strides=(1, 2, 1)), (1, 5, 6, 7, 3),
     (1, 3, 3, 5, 2), {"kernel": (3, 2, 3, 3, 2), "bias": (2,)}),
    ("Conv1DTranspose", dict(filters=2, kernel_size=3, strides=2), (1, 4, 3), (1, 9, 2),
     {"kernel": (3, 2, 3), "bias": (2,)}),
    ("Conv2DTranspose", dict(filters=64, kernel_size=5, strides=2, padding="same"),
     (2, 7, 7, 8), (2, 14, 14, 64), {"kernel": (5, 5, 64, 8), "bias": (64,)}),
    ("Conv2DTranspose", dict(filters=3, kernel_size=3, strides=2, padding="valid",
                             output_padding=1), (1, 4, 5, 2), (1, 10, 12, 3),
     {"kernel": (3, 3, 3, 2), "bias": (3,)}),
    ("Conv3DTranspose", dict(filters=2, kernel_size=2, strides=2, padding="same"),
     (1, 2, 3, 2, 4), (1, 4, 6, 4, 2), {"kernel": (2, 2, 2, 2, 4), "bias": (2,)}),
    ("DepthwiseConv2D", dict(kernel_size=3, depth_multiplier=2, padding="same"),
     (1, 5, 6, 3), (1, 5, 6, 6), {"depthwise_kernel": (3, 3, 3, 2), "bias": (6,)}),
    ("SeparableConv2D", dict(filters=5, kernel_size=3, depth_multiplier=2), (1, 5, 6, 3),
     (1, 3, 4, 5), {"depthwise_kernel": (3, 3, 3, 2), "pointwise_kernel": (1, 1, 6, 5),
                    "bias": (5,)}),
    ("MaxPooling1D", dict(pool_size=2), (2, 7, 3), (2, 3, 3), {}),
    ("AveragePooling1D", dict(pool_size=3, strides=1, padding="same"), (2, 7, 3), (2, 7, 3),
     {}),
    ("MaxPooling3D", dict(pool_size=2), (1, 4, 5, 6, 2), (1, 2, 2, 3, 2), {}),
    ("AveragePooling3D", dict(pool_size=(2, 1, 3), padding="same"), (1, 4, 5, 6, 2),
     (1, 2, 5, 2, 2), {}),
    ("GlobalAveragePooling1D", {}, (2, 7, 3), (2, 3), {}),
    ("GlobalMaxPooling1D", dict(keepdims=True), (2, 7, 3), (2, 1, 3), {}),
    ("GlobalMaxPooling3D", {}, (2, 3, 4, 5, 6), (2, 6), {}),
    ("ZeroPadding1D", dict(padding=(1, 2)), (2, 4, 3), (2, 7, 3), {}),
    ("ZeroPadding2D", dict(padding=((1, 0), (2, 3))), (2, 4, 5, 3), (2, 5, 10, 3), {}),
    ("ZeroPadding3D", dict(padding=1), (1, 2, 3, 4, 2), (1, 4, 5, 6, 2), {}),
    ("Cropping1D", dict(cropping=(1, 2)), (2, 6, 3), (2, 3, 3), {}),
    ("Cropping2D", dict(cropping=((1, 0), (2, 1))), (2, 5, 6, 3), (2, 4, 3, 3), {}),
    ("UpSampling1D", dict(size=3), (2, 4, 3), (2, 12, 3), {}),
    ("UpSampling2D", dict(size=(2, 3)), (1, 4, 5, 2), (1, 8, 15, 2), {}),
    ("UpSampling2D", dict(size=2, interpolation="bilinear"), (1, 4, 5, 2), (1, 8, 10, 2), {}),
    ("UpSampling3D", dict(size=2), (1, 2, 3, 4, 2), (1, 4, 6, 8, 2), {}),
]


@pytest.mark.parametrize("name,kwargs,xs,ys,weights", LAYER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LAYER_CASES)])
def test_layer_shapes_names_and_config(name, kwargs, xs, ys, weights):
    tf.keras.backend.clear_session()
    cls = getattr(tf.keras.layers, name)
    layer = cls(**kwargs)
    y = layer(tf.ones(xs))
    assert tuple(y.shape) == ys
    prefix = layer.name
    assert {v.name: tuple(v.shape) for v in layer.variables} == \
        {f"{prefix}/{k}:0": s for k, s in weights.items()}
    cfg = layer.get_config()
    for k, v in kwargs.items():
        got = cfg[k]
        want = v if not isinstance(v, (int, tuple)) or k in ("filters", "depth_multiplier")\
            else got
        assert got == want, (k, got, v)
    again = cls.from_config(cfg)
    assert again.get_config() == cfg
    y2 = again(tf.ones(xs))
    assert tuple(y2.shape) == ys
    # channels_first where the layer has a data_format
    if "data_format" in cfg and len(xs) >= 3:
        tf.keras.backend.clear_session()
        cf = cls(**kwargs, data_format="channels_first")
        perm = [0, len(xs) - 1] + list(range(1, len(xs) - 1))
        yc = cf(tf.ones([xs[i] for i in perm]))
        want = ys if len(ys) == 2 or kwargs.get("keepdims") is None and len(ys) < len(xs) \
            else tuple(ys[i] for i in perm)
        if name.startswith("Global") and not kwargs.get("keepdims"):
            want = ys
        assert tuple(yc.shape) == tuple(want)


def test_keras_names_and_defaults():
    tf.keras.backend.clear_session()
    a, b = tf.keras.layers.Conv2DTranspose(2, 3), tf.keras.layers.Conv2DTranspose(2, 3)
    a(tf.ones([1, 3, 3, 1]))
    b(tf.ones([1, 3, 3, 1]))
    assert [v.name for v in a.variables] == ["conv2d_transpose/kernel:0",
                                             "conv2d_transpose/bias:0"]
    assert b.variables[0].name == "conv2d_transpose_1/kernel:0"
    cfg = tf.keras.layers.SeparableConv2D(3, 2).get_config()
    assert cfg["strides"] == (1, 1) and cfg["padding"] == "valid" and cfg["use_bias"] is True
    assert cfg["depthwise_initializer"] == "glorot_uniform" and cfg["activation"] == "linear"
    c = tf.keras.layers.Conv1D(3, 2, activation="relu",
                               kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.5),
                               kernel_regularizer=tf.keras.regularizers.l2(0.1))
    cfg = c.get_config()
    assert cfg["kernel_initializer"]["class_name"] == "RandomNormal"
    again = tf.keras.layers.Conv1D.from_config(cfg)
    assert again.kernel_initializer.get_config() == c.kernel_initializer.get_config()
    assert again.kernel_regularizer.l2 == pytest.approx(0.1)
    again(tf.ones([1, 4, 2]))
    assert len(again.losses) == 1
    assert tf.keras.layers.Convolution3D is tf.keras.layers.Conv3D
    assert tf.layers.Conv2DTranspose is tf.keras.layers.Conv2DTranspose


def test_gan_generator_channels_first():
    # the gan example's generator (data_format channels_first)
    tf.keras.backend.clear_session()
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2DTranspose(64, 5, strides=2, padding="same",
                                        data_format="channels_first"),
        tf.keras.layers.Conv2DTranspose(1, 5, strides=2, padding="same",
                                        data_format="channels_first")])
    y = model(tf.zeros([2, 128, 7, 7]))
    assert y.shape == (2, 1, 28, 28)


def test_layer_values_against_ops():
    x = _r(2, 6, 7, 3)
    dw = tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=2, use_bias=False,
                                         dtype="float64")
    np.testing.assert_allclose(dw(x).numpy(), ref_depthwise_conv2d(
        x, dw.depthwise_kernel.numpy(), 1, "VALID"), atol=1e-10)
    c1 = tf.keras.layers.Conv1D(4, 3, padding="causal", dtype="float64", use_bias=False)
    x1 = _r(1, 6, 2)
    y1 = c1(x1).numpy()
    np.testing.assert_allclose(y1, ref_conv1d(np.pad(x1, ((0, 0), (2, 0), (0, 0))),
                                              c1.kernel.numpy()), atol=1e-10)
    # causal: output t does not depend on inputs after t
    x1b = x1.copy()
    x1b[:, 4:] += 1.0
    np.testing.assert_allclose(c1(x1b).numpy()[:, :4], y1[:, :4])
    up = tf.keras.layers.UpSampling2D((2, 1))(tf.constant(x)).numpy()
    np.testing.assert_allclose(up, np.repeat(x, 2, axis=1).astype(np.float32), rtol=1e-6)
    z = tf.keras.layers.ZeroPadding2D(((1, 0), (0, 2)))(x).numpy()
    np.testing.assert_allclose(z, np.pad(x, ((0, 0), (1, 0), (0, 2), (0, 0))), rtol=1e-6)


def test_layers_train():
    tf.keras.backend.clear_session()
    model = tf.keras.Sequential([
        tf.keras.layers.Conv1D(4, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling1D(2), tf.keras.layers.GlobalAveragePooling1D(),
        tf.keras.layers.Dense(1)])
    x, y = tf.constant(_r(8, 10, 2), tf.float32), tf.constant(_r(8, 1), tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    assert len(grads) == 4 and all(g is not None for g in grads)


# --- opencl:0 against cpu:0; tf.function against eager ---------------------------------------

def _family_fn(x5, w5, x4, dw, pw):
    a = tf.nn.conv3d(x5, w5, [1, 2, 1], "SAME")
    b = tf.nn.conv3d_transpose(a, w5, list(x5.shape[:4]) + [w5.shape[3]], [1, 2, 1], "SAME")
    c = tf.nn.separable_conv2d(x4, dw, pw, [1, 2, 2, 1], "SAME")
    d = tf.nn.max_pool3d(x5, 2, 1, "VALID")
    return tf.reduce_sum(a * a) + tf.reduce_sum(b) + tf.reduce_sum(c * c) + tf.reduce_sum(d)


def _family_args():
    return (_r(2, 4, 5, 4, 3), _r(2, 3, 2, 3, 2), _r(2, 6, 5, 3), _r(3, 3, 3, 2),
            _r(1, 1, 6, 4))


def _value_and_grads(fn, args, dev):
    with tf.device(dev):
        ts = [tf.constant(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(ts)
            v = fn(*ts)
        gs = tape.gradient(v, ts)
    return v.numpy(), [g.numpy() for g in gs]


def test_opencl_matches_cpu():
    _needs_opencl()
    args = _family_args()
    v0, g0 = _value_and_grads(_family_fn, args, "cpu:0")
    v1, g1 = _value_and_grads(_family_fn, args, "opencl:0")
    np.testing.assert_allclose(v1, v0, rtol=1e-10)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    for dev_args in [(tf.nn.depthwise_conv2d, (_r(1, 5, 5, 2), _r(3, 3, 2, 2)),
                      ([1, 1, 1, 1], "VALID", "NHWC", 2))]:
        fn, arrs, rest = dev_args
        outs = []
        for dev in ("cpu:0", "opencl:0"):
            with tf.device(dev):
                outs.append(fn(*[tf.constant(a) for a in arrs], *rest).numpy())
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-10)


def test_layers_on_opencl_match_cpu():
    _needs_opencl()
    x = _r(2, 6, 6, 3).astype(np.float32)
    for make in (lambda: tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=2),
                 lambda: tf.keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same"),
                 lambda: tf.keras.layers.SeparableConv2D(4, 3, padding="same")):
        cpu = make()
        cpu(x)
        with tf.device("opencl:0"):
            ocl = make()
            ocl(x)
            ocl.set_weights(cpu.get_weights())
            y = ocl(x)
        assert ocl.variables[0].device == "opencl:0"
        np.testing.assert_allclose(y.numpy(), cpu(x).numpy(), rtol=1e-4, atol=1e-5)


def test_traced_matches_eager():
    args = [tf.constant(a) for a in _family_args()]
    eager = _family_fn(*args).numpy()
    traced = tf.function(_family_fn)
    np.testing.assert_allclose(traced(*args).numpy(), eager, rtol=1e-12)
    layer = tf.keras.layers.Conv3D(2, 3, padding="same", dtype="float64")
    x = tf.constant(_r(1, 4, 4, 4, 2))
    f = tf.function(lambda t: layer(t))
    np.testing.assert_allclose(f(x).numpy(), layer(x).numpy(), rtol=1e-12)


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("call,match", [
    (lambda: tf.nn.conv1d(tf.ones([5, 3]), tf.ones([3, 3, 4]), 1, "SAME"), "3-D"),
    (lambda: tf.nn.conv1d(tf.ones([1, 5, 3]), tf.ones([3, 2, 4]), 1, "SAME"),
     r"input depth 3 does not match the filters' in_channels 2"),
    (lambda: tf.nn.conv1d(tf.ones([1, 5, 3]), tf.ones([3, 3, 4]), 1, "SAME", "NHCW"),
     "NWC"),
    (lambda: tf.nn.conv1d(tf.ones([1, 2, 3]), tf.ones([3, 3, 4]), 1, "VALID"), "output size"),
    (lambda: tf.nn.conv3d(tf.ones([1, 4, 4, 3]), tf.ones([2, 2, 2, 3, 1]), 1, "SAME"),
     r"5-D \(NDHWC\)"),
    (lambda: tf.nn.conv3d(tf.ones([1, 4, 4, 4, 3]), tf.ones([2, 2, 2, 2, 1]), 1, "SAME",
                          "NCDHW"), "in_channels 2"),
    (lambda: tf.nn.conv3d(tf.ones([1, 4, 4, 4, 3]), tf.ones([2, 2, 2, 3, 1]), 1,
                          [[0, 0], [1, 1], [1, 1], [1, 1], [0, 0]]), "SAME' or 'VALID"),
    (lambda: tf.nn.conv3d(tf.ones([1, 4, 4, 4, 3]), tf.ones([2, 2, 2, 3, 1]),
                          [2, 1, 1, 1, 1], "SAME"), "batch and depth"),
    (lambda: tf.nn.conv3d_transpose(tf.ones([1, 2, 2, 2, 3]), tf.ones([2, 2, 2, 1, 3]),
                                    [1, 5, 5, 5, 1], 1, "SAME"), "out_backprop shape"),
    (lambda: tf.nn.depthwise_conv2d(tf.ones([1, 5, 5, 3]), tf.ones([3, 3, 3, 1]), 2, "SAME",
                                    dilations=2), "dilations"),
    (lambda: tf.nn.separable_conv2d(tf.ones([1, 5, 5, 3]), tf.ones([3, 3, 3, 2]),
                                    tf.ones([1, 1, 3, 2]), 1, "SAME"), "pointwise_filter"),
    (lambda: tf.nn.max_pool3d(tf.ones([1, 4, 4, 3]), 2, 2, "SAME"), "5-D"),
    (lambda: tf.nn.avg_pool1d(tf.ones([1, 4, 4, 3]), 2, 2, "SAME"), "3-D"),
])
def test_op_errors(call, match):
    with pytest.raises(InvalidArgumentError, match=match) as info:
        call()
    assert info.value.op and info.value.device is not None


@pytest.mark.parametrize("make,x,match", [
    (lambda: tf.keras.layers.Conv2DTranspose(2, 3), [1, 4, 4], "4-D"),
    (lambda: tf.keras.layers.Conv3D(2, 3, strides=2, dilation_rate=2), None, "dilation_rate"),
    (lambda: tf.keras.layers.Conv1D(2, 3, strides=2, dilation_rate=2), None, "dilation_rate"),
    (lambda: tf.keras.layers.Conv2DTranspose(2, 3, strides=2, output_padding=2), None,
     "output_padding"),
    (lambda: tf.keras.layers.Conv2D(2, 3, padding="causal"), None, "padding"),
    (lambda: tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=0), None, "depth_multiplier"),
    (lambda: tf.keras.layers.Conv1D(2, (3, 3)), None, "kernel_size"),
    (lambda: tf.keras.layers.Cropping1D((3, 3)), [1, 5, 2], "leaves nothing"),
    (lambda: tf.keras.layers.ZeroPadding2D(((1, 2), (3,))), None, "padding"),
    (lambda: tf.keras.layers.UpSampling1D(0), None, "size"),
    (lambda: tf.keras.layers.MaxPooling3D(2), [1, 4, 4, 2], "5-D"),
    (lambda: tf.keras.layers.Conv2D(2, 3, data_format="NCWH"), None, "data_format"),
])
def test_layer_errors(make, x, match):
    with pytest.raises(InvalidArgumentError, match=match):
        layer = make()
        layer(tf.ones(x))


def test_channel_mismatch_after_build_names_the_op():
    layer = tf.keras.layers.Conv3D(2, 2)
    layer(tf.ones([1, 3, 3, 3, 2]))
    with pytest.raises(InvalidArgumentError, match="in_channels") as info:
        layer(tf.ones([1, 3, 3, 3, 4]))
    assert info.value.op == "Conv3D"


def test_functional_forms():
    y = tf.layers.max_pooling1d(tf.ones([1, 6, 2]), 2, 2)
    assert y.shape == (1, 3, 2)
    assert tf.layers.average_pooling3d(tf.ones([1, 4, 4, 4, 2]), 2, 2).shape == (1, 2, 2, 2, 2)
    for name in ("conv1d", "conv3d", "conv2d_transpose", "separable_conv2d"):
        with pytest.raises(tf.errors.FailedPreconditionError, match="eager"):
            getattr(tf.layers, name)(tf.ones([1, 4, 4, 2]), 2, 3)


@pytest.mark.parametrize("k,s,d", [(k, s, d) for k, s, d in itertools.product(
    (1, 2, 3), (1, 2, 3), (1, 2)) if s == 1 or d == 1])   # (both > 1 is refused)
def test_conv1d_transpose_shapes_match_keras_rule(k, s, d):
    for padding in ("same", "valid"):
        layer = tf.keras.layers.Conv1DTranspose(2, k, strides=s, padding=padding,
                                                dilation_rate=d)
        y = layer(tf.ones([1, 5, 3]))
        assert y.shape[1] == deconv_output_length(5, k, padding, None, s, d)


@pytest.mark.parametrize("device", ["cpu:0", "opencl:0"])
def test_a_same_pool_window_longer_than_the_input_covers_it_all_and_huge_ones_are_refused(device):
    # (a 2**40 window ran forever on OpenCL, and asked for 24 TiB of padding on the CPU)
    if device not in [str(d) for d in tf.config.list_devices()]:
        pytest.skip(f"{device} is not available here")
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    with tf.device(device):
        avg = tf.nn.avg_pool1d(tf.constant(x), [40], 2, "SAME").numpy()
        top = tf.nn.max_pool1d(tf.constant(x), [2**31 - 1], 1, "SAME").numpy()
        with pytest.raises(tf.errors.InvalidArgumentError, match="fit in an int32"):
            tf.nn.avg_pool1d(tf.constant(x), [2**40], 1, "SAME")
    np.testing.assert_allclose(avg, np.repeat(x.mean(1, keepdims=True), 3, 1), rtol=1e-5)
    np.testing.assert_allclose(top, np.repeat(x.max(1, keepdims=True), 5, 1))
