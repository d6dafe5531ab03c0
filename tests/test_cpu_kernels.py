"""The CPU kernels' fast paths against plain references (issue 20).

Convolutions build their im2col columns a block of images at a time
(``tapeflow.kernels.nn.COLS_BYTES``), build few-channel columns transposed, and
compute the stride-1 input gradient as a convolution of the padded output gradient;
sums over leading or middle axes go through BLAS (``ones @ x``). Each path is compared
here with a float64 reference written the obvious way, with the block size forced
small so that batches really are split (including a last, shorter block).
"""

import itertools

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.kernels import nn as nn_kernels

pytestmark = pytest.mark.usefixtures("small_blocks")


@pytest.fixture
def small_blocks(monkeypatch):
    # 3 KiB: an image of the cases below is 0.5-2 KiB of columns, so batches of 5-7
    # split into blocks of 1-6 images with a shorter last one
    monkeypatch.setattr(nn_kernels, "COLS_BYTES", 3 << 10)


def _pads(size, k, s, d, padding):
    eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        tot = max((out - 1) * s + eff - size, 0)
        return out, tot // 2, tot - tot // 2
    if padding == "VALID":
        return (size - eff) // s + 1, 0, 0
    b, a = padding
    return (size + b + a - eff) // s + 1, b, a


def geometry(x_shape, w_shape, strides, padding, dilations):
    """(ho, wo, pt, pb, pl, pr) of an NHWC convolution."""
    ph = padding if isinstance(padding, str) else padding[0]
    pw = padding if isinstance(padding, str) else padding[1]
    ho, pt, pb = _pads(x_shape[1], w_shape[0], strides[0], dilations[0], ph)
    wo, pl, pr = _pads(x_shape[2], w_shape[1], strides[1], dilations[1], pw)
    return ho, wo, pt, pb, pl, pr


def conv_ref(x, w, strides, padding, dilations):
    """Direct float64 NHWC convolution (cross-correlation), loops over the window."""
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    ho, wo, pt, pb, pl, pr = geometry(x.shape, w.shape, strides, padding, dilations)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    out = np.zeros((n, ho, wo, o))
    for i, j in itertools.product(range(kh), range(kw)):
        patch = xp[:, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
        out += patch @ w[i, j].astype(np.float64)
    return out


CASES = [
    # (x shape, filter shape, strides, padding, dilations)
    ((7, 9, 8, 1), (3, 3, 1, 4), (1, 1), "VALID", (1, 1)),        # C=1: transposed columns
    ((5, 8, 7, 3), (3, 2, 3, 5), (1, 1), "SAME", (1, 1)),
    ((6, 8, 8, 6), (3, 3, 6, 4), (1, 1), "VALID", (1, 1)),        # C=6: one strided copy
    ((5, 9, 10, 4), (3, 3, 4, 2), (2, 1), "SAME", (1, 1)),        # strided: col2im path
    ((5, 11, 9, 2), (3, 2, 2, 3), (1, 1), "VALID", (2, 3)),       # dilated, stride 1
    ((6, 7, 7, 5), (2, 3, 5, 3), (1, 1), ((4, 0), (1, 5)), (1, 1)),  # pads beyond the kernel
    ((6, 7, 8, 4), (3, 3, 4, 3), (2, 3), ((1, 2), (0, 1)), (1, 2)),
]


def _ids():
    return [f"x{c[0]}-w{c[1]}-s{c[2]}-{c[3]}-d{c[4]}".replace(" ", "") for c in CASES]


@pytest.mark.parametrize("xs,ws,strides,padding,dil", CASES, ids=_ids())
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_convolution_and_both_gradients_match_a_direct_reference(xs, ws, strides, padding,
                                                                    dil, fmt):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    ref = conv_ref(x, w, strides, padding, dil)
    dy = rng.standard_normal(ref.shape).astype(np.float32)
    pad = padding if isinstance(padding, str) else [[0, 0], *padding, [0, 0]]
    to = (lambda a: a) if fmt == "NHWC" else (lambda a: a.transpose(0, 3, 1, 2))
    if fmt == "NCHW" and not isinstance(padding, str):
        pad = [[0, 0], [0, 0], *padding]
    with tf.device("cpu:0"):
        xt, wt = tf.constant(to(x)), tf.constant(w)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([xt, wt])
            y = tf.nn.conv2d(xt, wt, strides=list(strides), padding=pad, data_format=fmt,
                             dilations=list(dil))
            loss = tf.reduce_sum(y * tf.constant(to(dy)))
        gx, gw = tape.gradient(loss, [xt, wt])
    np.testing.assert_allclose(y.numpy(), to(ref), rtol=2e-5, atol=2e-5)
    # reference gradients: d<dy, conv(x, w)>/dx and /dw, by the adjoint written as loops
    n, h, wd, c = xs
    kh, kw, _, o = ws
    (sh, sw), (dh, dw) = strides, dil
    ho, wo, pt, pb, pl, pr = geometry(xs, ws, strides, padding, dil)
    xpad = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    gxp = np.zeros_like(xpad)
    gw_ref = np.zeros(ws)
    for i, j in itertools.product(range(kh), range(kw)):
        sl = (slice(None), slice(i * dh, i * dh + sh * (ho - 1) + 1, sh),
              slice(j * dw, j * dw + sw * (wo - 1) + 1, sw))
        gxp[sl] += dy.astype(np.float64) @ w[i, j].astype(np.float64).T
        gw_ref[i, j] = np.einsum("nhwc,nhwo->co", xpad[sl], dy.astype(np.float64))
    gx_ref = gxp[:, pt:pt + h, pl:pl + wd]
    np.testing.assert_allclose(gx.numpy(), to(gx_ref), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(gw.numpy(), gw_ref, rtol=2e-5, atol=5e-5)


def test_float16_convolution_is_computed_in_float32_blocks():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 8, 8, 3)).astype(np.float16)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float16)
    with tf.device("cpu:0"):
        y = tf.nn.conv2d(tf.constant(x), tf.constant(w), strides=1, padding="SAME")
    assert y.dtype == tf.float16
    ref = conv_ref(x.astype(np.float32), w.astype(np.float32), (1, 1), "SAME", (1, 1))
    np.testing.assert_allclose(y.numpy().astype(np.float32), ref, rtol=1e-2, atol=1e-2)


def test_empty_batch_gives_empty_output_and_gradients():
    with tf.device("cpu:0"):
        x = tf.zeros([0, 5, 5, 2])
        w = tf.ones([3, 3, 2, 4])
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.conv2d(x, w, 1, "VALID")
            s = tf.reduce_sum(y)
        gx, gw = tape.gradient(s, [x, w])
    assert y.shape == (0, 3, 3, 4) and gx.shape == (0, 5, 5, 2)
    np.testing.assert_array_equal(gw.numpy(), np.zeros((3, 3, 2, 4), np.float32))


# --- sums through BLAS ------------------------------------------------------------------

SUM_CASES = [((32, 6, 6, 16), (0, 1, 2)), ((32, 6, 6, 16), (1, 2)), ((40, 7), (0,)),
             ((3, 40, 5), (1,)), ((4, 5, 6, 7), (0, 1)), ((17, 3), (0,))]


@pytest.mark.parametrize("shape,axis", SUM_CASES, ids=[f"{s}-{a}" for s, a in SUM_CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_and_mean_over_leading_and_middle_axes(shape, axis, dtype, keepdims):
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    ref = np.sum(x.astype(np.float64), axis=axis, keepdims=keepdims)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    with tf.device("cpu:0"):
        s = tf.reduce_sum(tf.constant(x), axis=list(axis), keepdims=keepdims)
        m = tf.reduce_mean(tf.constant(x), axis=list(axis), keepdims=keepdims)
    assert s.dtype == m.dtype == tf.as_dtype(dtype)
    assert s.shape == ref.shape and m.shape == ref.shape
    n = np.prod([shape[a] for a in axis])
    np.testing.assert_allclose(s.numpy(), ref, rtol=tol, atol=tol * n)
    np.testing.assert_allclose(m.numpy(), ref / n, rtol=tol, atol=tol)


def test_blas_sums_keep_nan_and_inf_and_views_take_numpys_path():
    x = np.ones((20, 3, 4), np.float32)
    x[5, 1, 2] = np.nan
    x[7, 0, 1] = np.inf
    with tf.device("cpu:0"):
        s = tf.reduce_sum(tf.constant(x), axis=0).numpy()
        # a transposed (non-contiguous) input: same values through NumPy's reduction
        t = tf.reduce_sum(tf.transpose(tf.constant(x), [1, 0, 2]), axis=1).numpy()
    assert np.isnan(s[1, 2]) and np.isinf(s[0, 1]) and s[2, 3] == 20
    np.testing.assert_array_equal(s, t)


def _max_pool_grad_by_window(x, dy, k):
    """Reference: each window's gradient goes to its first maximum in row-major order
    (TF's routing of ties); a window whose maximum is NaN gets none."""
    dx = np.zeros_like(x)
    n, h, w, c = x.shape
    for b, i, j, ch in itertools.product(range(n), range(h // k), range(w // k), range(c)):
        win = x[b, i * k:(i + 1) * k, j * k:(j + 1) * k, ch]
        if np.isnan(win).any():
            continue
        p, q = np.unravel_index(np.argmax(win), win.shape)     # argmax: the first maximum
        dx[b, i * k + p, j * k + q, ch] = dy[b, i, j, ch]
    return dx


@pytest.mark.parametrize("shape", [(2, 6, 6, 3), (2, 7, 9, 2), (1, 4, 4, 1)])
@pytest.mark.parametrize("values", ["distinct", "relu zeros", "nan"])
def test_max_pool_grad_of_tiling_windows_routes_ties_to_the_first_maximum(shape, values):
    """2x2 windows with stride 2 take the tiled two-pass path; ties (ReLU's zeros before
    a pool), NaN windows and rows/columns left over by VALID must route as the
    window-offset loop does."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    if values == "relu zeros":
        x = np.maximum(np.round(x), 0).astype(np.float32)
    elif values == "nan":
        x[0, 1, 1, 0] = np.nan
    k = nn_kernels.NNKernels(np)
    y = k.max_pool(x, (2, 2), (2, 2), "VALID", "NHWC")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    got = k.max_pool_grad(x, y, dy, (2, 2), (2, 2), "VALID", "NHWC")
    np.testing.assert_array_equal(got, _max_pool_grad_by_window(x, dy, 2))
    assert values != "relu zeros" or np.count_nonzero(got) < x.size // 4 + 1
