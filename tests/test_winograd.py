"""The CPU convolution's Winograd path (docs/winograd.md) and the epilogue hook of
``_conv_nhwc``.

Winograd F(4x4, 3x3) runs 3x3 stride-1 float32 convolutions on the host where its cost
rule (``winograd.use_winograd``) says so; ``winograd.MODE = "always"`` forces it here on
small shapes (odd sizes whose tiles overhang, N=1, C=1, O=1, every padding, NCHW,
float16/bfloat16 computed in float32), checked against float64 references within the
documented bound, forward and both gradients.

``NNKernels._conv_nhwc(..., epilogue=f)`` calls ``f`` on each contiguous NHWC output
block (a batch slice) right after its GEMM, or its output transform on the Winograd
path (the fused convolution's bias/activation runs while the block is in cache).
"""

import ml_dtypes
import numpy as np
import pytest

import tapeflow as tf
from tapeflow.kernels import nn as nn_kernels
from tapeflow.kernels import winograd


def conv_ref(x, w, pads):
    """float64 NHWC cross-correlation, stride 1, ``pads`` = (top, bottom, left, right)."""
    pt, pb, pl, pr = pads
    kh, kw, _, o = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    ho, wo = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo, o))
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i:i + ho, j:j + wo] @ w[i, j].astype(np.float64)
    return out


def test_epilogue_runs_on_each_contiguous_output_block(monkeypatch):
    # 3 KiB of columns: 2 images of 5x5x(3*3*2) float32 per block, 5 images -> 3 blocks
    monkeypatch.setattr(nn_kernels, "COLS_BYTES", 3 << 10)
    k = nn_kernels.NNKernels(np)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 5, 5, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    seen = []

    def relu_in_place(block):
        assert block.flags.c_contiguous and block.shape[1:] == (5, 5, 4)
        seen.append(block.shape[0])
        np.maximum(block, 0, out=block)

    out = k._conv_nhwc(x, w, (1, 1), "SAME", (1, 1), epilogue=relu_in_place)
    assert len(seen) > 1 and sum(seen) == 5
    ref = np.maximum(conv_ref(x, w, (1, 1, 1, 1)), 0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    plain = k._conv_nhwc(x, w, (1, 1), "SAME", (1, 1))
    np.testing.assert_allclose(plain, conv_ref(x, w, (1, 1, 1, 1)), rtol=1e-5, atol=1e-5)


# --- Winograd F(4x4, 3x3) against a float64 reference ------------------------------------
EPS32 = float(np.finfo(np.float32).eps)
#: docs/winograd.md: worst error / (|x| conv |w|) measured 8-30 float32 eps for F(4,3)
#: (im2col: 1.3-9) over normal and uniform inputs up to 56x56x64 and 16x16x128
F4_BOUND = 64 * EPS32
F2_BOUND = 32 * EPS32


def _geometry(h, w, padding):
    """(ho, wo, (top, bottom, left, right)) of a 3x3 stride-1 convolution."""
    if padding == "SAME":
        return h, w, (1, 1, 1, 1)
    if padding == "VALID":
        return h - 2, w - 2, (0, 0, 0, 0)
    (t, b), (l, r) = padding
    return h + t + b - 2, w + l + r - 2, (t, b, l, r)


def dw_ref(x, dy, pads):
    """float64 3x3 filter gradient of a stride-1 convolution padded by ``pads``."""
    pt, pb, pl, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    ho, wo = dy.shape[1:3]
    g = np.zeros((3, 3, x.shape[3], dy.shape[3]))
    for i in range(3):
        for j in range(3):
            g[i, j] = np.einsum("nyxc,nyxo->co", xp[:, i:i + ho, j:j + wo],
                                dy.astype(np.float64))
    return g


def _tile_scale(scale):
    """``scale`` (NHWC |x| conv |w|) replaced by its maximum over the 7x7 neighbourhood
    (every 4x4 output tile holding the point): a Winograd output mixes the rounding
    errors of its whole tile, so one whose own window is all padding (scale 0) gets
    the tile's noise rather than an exact zero."""
    if scale.ndim != 4:
        return scale
    p = np.pad(scale, ((0, 0), (3, 3), (3, 3), (0, 0)))
    h, w = scale.shape[1:3]
    return np.max([p[:, i:i + h, j:j + w] for i in range(7) for j in range(7)], axis=0)


def _assert_within(got, ref, scale, bound):
    err = np.max(np.abs(got.astype(np.float64) - ref) / np.maximum(_tile_scale(scale), 1e-30))
    assert err <= bound, f"max normalised error {err / EPS32:.1f} eps > {bound / EPS32:.0f} eps"


SHAPES = [
    # (x NHWC, O, padding): odd sizes whose tiles overhang, N=1, C=1, O=1
    ((2, 9, 11, 5), 6, "SAME"),
    ((3, 10, 7, 4), 3, "VALID"),
    ((2, 7, 9, 3), 4, ((2, 0), (1, 3))),
    ((1, 8, 8, 6), 5, "SAME"),
    ((2, 6, 13, 1), 4, "SAME"),
    ((2, 5, 6, 4), 1, "VALID"),
    ((1, 3, 3, 2), 2, "VALID"),            # a single 1x1 output: one tile, mostly overhang
    ((2, 12, 12, 8), 8, ((0, 3), (4, 0))),
]


@pytest.mark.parametrize("f,bound", [(winograd.F4, F4_BOUND), (winograd.F2, F2_BOUND)],
                         ids=["F4", "F2"])
@pytest.mark.parametrize("xs,o,padding", SHAPES)
def test_winograd_forward_and_filter_gradient_within_the_documented_bound(xs, o, padding, f,
                                                                        bound):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((3, 3, xs[3], o)).astype(np.float32)
    ho, wo, pads = _geometry(xs[1], xs[2], padding)
    y = winograd.conv3x3(np, x, w, pads, (ho, wo), f)
    assert y.shape == (xs[0], ho, wo, o) and y.dtype == np.float32
    _assert_within(y, conv_ref(x, w, pads), conv_ref(np.abs(x), np.abs(w), pads), bound)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    g = winograd.filter_grad3x3(np, x, dy, pads, f)
    _assert_within(g, dw_ref(x, dy, pads), dw_ref(np.abs(x), np.abs(dy), pads), bound)


@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_realistic_sizes_within_the_documented_bound(dist):
    rng = np.random.default_rng(7)
    draw = rng.standard_normal if dist == "normal" else rng.random
    x = draw((2, 32, 32, 64)).astype(np.float32)
    w = draw((3, 3, 64, 64)).astype(np.float32)
    dy = draw((2, 32, 32, 64)).astype(np.float32)
    pads = (1, 1, 1, 1)
    y = winograd.conv3x3(np, x, w, pads, (32, 32))
    _assert_within(y, conv_ref(x, w, pads), conv_ref(np.abs(x), np.abs(w), pads), F4_BOUND)
    g = winograd.filter_grad3x3(np, x, dy, pads)
    _assert_within(g, dw_ref(x, dy, pads), dw_ref(np.abs(x), np.abs(dy), pads), F4_BOUND)


@pytest.mark.parametrize("tile_bytes,blocks", [(1, 5), (12960, 2), (1 << 20, 1)])
def test_blocks_of_images_and_the_epilogue_on_the_winograd_path(monkeypatch, tile_bytes,
                                                                 blocks):
    # an image is 36 positions x 3x2 tiles x 5 channels x 4 bytes = 4320 bytes of tiles:
    # 1 byte, one image per block; 12960, a block of 3 and a shorter last one of 2 (the
    # buffers' first elements viewed as a smaller block); 1 MiB, a single block
    monkeypatch.setattr(winograd, "TILE_BYTES", tile_bytes)
    monkeypatch.setattr(winograd, "MODE", "always")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 9, 7, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    seen = []

    def relu_in_place(block):
        assert block.flags.c_contiguous and block.shape[1:] == (9, 7, 5)
        seen.append(block.shape[0])
        np.maximum(block, 0, out=block)

    y = nn_kernels.NNKernels(np)._conv_nhwc(x, w, (1, 1), "SAME", (1, 1),
                                           epilogue=relu_in_place)
    assert sum(seen) == 5 and len(seen) == blocks
    ref = conv_ref(x, w, (1, 1, 1, 1))
    _assert_within(y, np.maximum(ref, 0), conv_ref(np.abs(x), np.abs(w), (1, 1, 1, 1)),
                   F4_BOUND)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    g = winograd.filter_grad3x3(np, x, dy, (1, 1, 1, 1))
    _assert_within(g, dw_ref(x, dy, (1, 1, 1, 1)),
                   dw_ref(np.abs(x), np.abs(dy), (1, 1, 1, 1)), F4_BOUND)


def _tf_padding(padding, fmt):
    if isinstance(padding, str):
        return padding
    return [[0, 0], *padding, [0, 0]] if fmt == "NHWC" else [[0, 0], [0, 0], *padding]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("xs,o,padding", SHAPES[:4] + SHAPES[5:6])
def test_tf_conv2d_and_both_gradients_through_winograd(monkeypatch, xs, o, padding, fmt):
    """tf.nn.conv2d and its tape gradients with every eligible convolution forced onto
    Winograd (the input gradient is a forward convolution of the padded dy), against
    float64 references; NCHW goes through the transposed view."""
    monkeypatch.setattr(winograd, "MODE", "always")
    rng = np.random.default_rng(5)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((3, 3, xs[3], o)).astype(np.float32)
    ho, wo, pads = _geometry(xs[1], xs[2], padding)
    dy = rng.standard_normal((xs[0], ho, wo, o)).astype(np.float32)
    to = (lambda a: a) if fmt == "NHWC" else (lambda a: a.transpose(0, 3, 1, 2))
    with tf.device("cpu:0"):
        xt, wt = tf.constant(to(x)), tf.constant(w)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([xt, wt])
            y = tf.nn.conv2d(xt, wt, strides=1, padding=_tf_padding(padding, fmt),
                             data_format=fmt)
            loss = tf.reduce_sum(y * tf.constant(to(dy)))
        gx, gw = tape.gradient(loss, [xt, wt])
    y_nhwc = y.numpy() if fmt == "NHWC" else y.numpy().transpose(0, 2, 3, 1)
    # the forward really went the Winograd way: bit for bit the Winograd kernel's result
    np.testing.assert_array_equal(y_nhwc, winograd.conv3x3(np, x, w, pads, (ho, wo)))
    _assert_within(y_nhwc, conv_ref(x, w, pads), conv_ref(np.abs(x), np.abs(w), pads),
                   F4_BOUND)
    _assert_within(gw.numpy(), dw_ref(x, dy, pads), dw_ref(np.abs(x), np.abs(dy), pads),
                   F4_BOUND)
    # dL/dx = the VALID correlation of dy, padded by 2 less the forward pads, with the
    # filter flipped and transposed: the same float64 reference
    pt, pb, pl, pr = pads
    cut = (slice(None), slice(max(pt - 2, 0), None), slice(max(pl - 2, 0), None))
    back_pads = (max(2 - pt, 0), max(2 - pb, 0), max(2 - pl, 0), max(2 - pr, 0))
    wf = w[::-1, ::-1].transpose(0, 1, 3, 2)
    dyp = dy[cut]
    gx_ref = conv_ref(dyp, wf, back_pads)[:, :xs[1], :xs[2]]
    gx_abs = conv_ref(np.abs(dyp), np.abs(wf), back_pads)[:, :xs[1], :xs[2]]
    gx_nhwc = gx.numpy() if fmt == "NHWC" else gx.numpy().transpose(0, 2, 3, 1)
    _assert_within(gx_nhwc, gx_ref, gx_abs, F4_BOUND)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_convolutions_compute_in_float32_winograd(monkeypatch, dtype):
    monkeypatch.setattr(winograd, "MODE", "always")
    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 9, 10, 4)).astype(npdt)
    w = rng.standard_normal((3, 3, 4, 3)).astype(npdt)
    with tf.device("cpu:0"):
        y = tf.nn.conv2d(tf.constant(x), tf.constant(w), strides=1, padding="SAME")
    assert y.dtype == getattr(tf, dtype)
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    expect = winograd.conv3x3(np, x32, w32, (1, 1, 1, 1), (9, 10)).astype(npdt)
    np.testing.assert_array_equal(y.numpy(), expect)
    ref = conv_ref(x32, w32, (1, 1, 1, 1))
    tol = 2 * float(ml_dtypes.finfo(npdt).eps) * conv_ref(np.abs(x32), np.abs(w32), (1, 1, 1, 1))
    assert np.all(np.abs(y.numpy().astype(np.float64) - ref) <= tol)


# --- the cost rule ------------------------------------------------------------------------
@pytest.mark.parametrize("shape,expect", [
    ((32, 32, 32, 128, 128), True),        # C=O=128 from 16x16: 1.2-1.6x in CPU time
    ((32, 16, 16, 128, 128), True),
    ((8, 56, 56, 64, 64), True),           # 64 channels on a large image: 1.3-1.7x
    ((32, 16, 16, 256, 128), True),
    ((32, 26, 26, 16, 16), False),         # the seeds' CNN: im2col
    ((32, 28, 28, 1, 16), False),
    ((32, 32, 32, 64, 64), False),         # 64 channels on 32x32: the margin for 2 threads
    ((32, 32, 32, 64, 128), False),
    ((32, 8, 8, 128, 128), False),         # a small image
    ((32, 14, 14, 128, 128), False),       # 4x4 tiles 77% used: a tie
    ((8, 54, 54, 64, 64), True),           # 54x54: tiles 93% used
    ((8, 56, 56, 32, 32), False),
])
def test_the_cost_rule_picks_winograd_only_where_it_measured_faster(shape, expect):
    assert winograd.use_winograd(*shape, np.float32) is expect


def test_the_rule_keeps_im2col_for_float64_other_filters_and_modes(monkeypatch):
    assert not winograd.use_winograd(32, 32, 32, 128, 128, np.float64)
    k = nn_kernels.NNKernels(np)
    x = np.zeros((2, 16, 16, 128), np.float32)
    assert k._winograd_geometry(x, (3, 3, 128, 128), (1, 1), "SAME", (1, 1), 128) == \
        ((1, 1, 1, 1), (16, 16))
    # VALID: 14x14, its 4x4 tiles 77% used
    assert k._winograd_geometry(x, (3, 3, 128, 128), (1, 1), "VALID", (1, 1), 128) is None
    x18 = np.zeros((2, 18, 18, 128), np.float32)
    assert k._winograd_geometry(x18, (3, 3, 128, 128), (1, 1), "VALID", (1, 1), 128) == \
        ((0, 0, 0, 0), (16, 16))
    for ws, s, d in [((5, 5, 128, 128), (1, 1), (1, 1)), ((3, 3, 128, 128), (2, 2), (1, 1)),
                     ((3, 3, 128, 128), (1, 1), (2, 2)), ((3, 1, 128, 128), (1, 1), (1, 1))]:
        assert k._winograd_geometry(x, ws, s, "SAME", d, 128) is None
    monkeypatch.setattr(winograd, "MODE", "never")
    assert k._winograd_geometry(x, (3, 3, 128, 128), (1, 1), "SAME", (1, 1), 128) is None
    monkeypatch.setattr(winograd, "MODE", "always")
    assert k._winograd_geometry(x[..., :1], (3, 3, 1, 1), (1, 1), "SAME", (1, 1), 1) is not None


def test_gpu_array_modules_keep_im2col():
    # a module other than NumPy (CuPy) keeps one big im2col GEMM: never the host rule
    k = nn_kernels.NNKernels(np)
    k._host = False
    x = np.zeros((2, 16, 16, 128), np.float32)
    assert k._winograd_geometry(x, (3, 3, 128, 128), (1, 1), "SAME", (1, 1), 128) is None
