"""Conformance specs of ``tf.nn`` ops: NumPy references written independently of the
kernels (naive loops for convolution and pooling), small samples so finite-difference
gradient checks (first and second order, float64) stay fast."""

# Long file: the specs of the whole tf.nn namespace (activations, losses, the convolution
# family, pooling, dropout), each with its independent naive reference beside its samples.

from __future__ import annotations

import itertools
import re

import math

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.ops.fused import fused_conv2d, gru_sequence, lstm_sequence

from . import ErrorSample, OpSpec, Sample

F16 = {"float16": (1e-2, 1e-2)}
F16_LOOSE = {"float16": (3e-2, 3e-2)}


def _u(rng, shape, dt, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(dt.np)


def _away(rng, shape, dt, gap=0.1, hi=2.0, kinks=(0.0,)):
    """Values in [-hi, hi] at least ``gap`` from every kink (for non-smooth ops)."""
    v = rng.uniform(-hi, hi, shape)
    for k in kinks:
        close = np.abs(v - k) < gap
        v = np.where(close, k + np.sign(v - k + 1e-12) * gap * 2, v)
    return v.astype(dt.np)


def _distinct(rng, shape, dt, scale=0.05):
    """Values with no ties (spaced by ``scale``): max pooling is differentiable there."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) * scale).reshape(shape).astype(dt.np)


def _cast_like(out, like):
    return np.asarray(out).astype(like.dtype)


# --- activations -----------------------------------------------------------------------

def _act_samples(kinks=(0.0,), hi=2.0):
    def samples(dt, rng):
        if dt.is_integer:
            return [Sample((rng.integers(-5, 5, (3, 4)).astype(dt.np),), name="int")]
        return [
            Sample((np.asarray(_away(rng, (), dt, kinks=kinks, hi=hi)),), name="scalar"),
            Sample((_away(rng, (3, 4), dt, kinks=kinks, hi=hi),), name="2d"),
            Sample((np.zeros((0, 3), dt.np),), name="empty"),
        ]
    return samples


def ref_relu(x):
    return np.maximum(x, 0).astype(x.dtype)


def ref_relu6(x):
    return np.clip(x, 0, 6).astype(x.dtype)


def ref_leaky_relu(x, alpha=0.2):
    return np.where(x > 0, x, x * alpha).astype(x.dtype)


def ref_elu(x):
    x64 = x.astype(np.float64)
    return _cast_like(np.where(x64 > 0, x64, np.expm1(np.minimum(x64, 0))), x)


def _leaky_samples(dt, rng):
    return [Sample((_away(rng, (3, 4), dt),), name="default"),
            Sample((_away(rng, (5,), dt),), {"alpha": 0.1}, name="alpha")]


def _softmax64(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax64(x, axis):
    x = x.astype(np.float64)
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def ref_softmax(x, axis=-1):
    return _cast_like(_softmax64(x, axis), x)


def ref_log_softmax(x, axis=-1):
    return _cast_like(_log_softmax64(x, axis), x)


def _softmax_samples(dt, rng):
    return [Sample((_u(rng, (4,), dt),), name="1d"),
            Sample((_u(rng, (2, 5), dt),), name="2d"),
            Sample((_u(rng, (2, 3, 4), dt),), {"axis": 1}, name="axis1"),
            Sample((_u(rng, (2, 3), dt, -50, 50),), name="large")]


# --- layer_norm -------------------------------------------------------------------------

def ref_layer_norm(x, gamma=None, beta=None, axis=-1, epsilon=1e-3):
    f = np.float64
    ax = tuple(sorted({a % x.ndim for a in ([axis] if np.isscalar(axis) else axis)}))
    x64 = x.astype(f)
    y = (x64 - x64.mean(axis=ax, keepdims=True)) / np.sqrt(x64.var(axis=ax, keepdims=True)
                                                          + epsilon)
    bshape = [x.shape[i] if i in ax else 1 for i in range(x.ndim)]
    if gamma is not None:
        y = y * gamma.astype(f).reshape(bshape)
    if beta is not None:
        y = y + beta.astype(f).reshape(bshape)
    return _cast_like(y, x)


def _ln_samples(dt, rng):
    return [Sample((_u(rng, (3, 5), dt), _u(rng, (5,), dt), _u(rng, (5,), dt)), name="last"),
            Sample((_u(rng, (2, 3, 4), dt), _u(rng, (3, 4), dt), _u(rng, (3, 4), dt)),
                   {"axis": [1, 2], "epsilon": 0.01}, name="two_axes"),
            Sample((_u(rng, (3, 2, 4), dt), _u(rng, (3, 4), dt), _u(rng, (3, 4), dt)),
                   {"axis": [0, 2]}, name="outer_axes"),
            Sample((_u(rng, (4, 3), dt),), {"axis": 0}, name="no_params"),
            Sample((np.zeros((0, 3), dt.np), np.ones(3, dt.np), np.zeros(3, dt.np)),
                   name="empty")]


# --- dot_product_attention --------------------------------------------------------------

def ref_dot_product_attention(q, k, v, mask=None, scale=None):
    f = np.float64
    s = np.einsum("bthk,bshk->bhts", q.astype(f), k.astype(f))
    s = s * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = np.where(mask, s, -1e9)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (_cast_like(np.einsum("bhts,bshv->bthv", p, v.astype(f)), q), _cast_like(p, q))


def _dpa_samples(dt, rng):
    mask = rng.random((2, 1, 3, 4)) > 0.3
    mask[..., 0] = True
    return [Sample((_u(rng, (2, 3, 2, 3), dt), _u(rng, (2, 4, 2, 3), dt),
                    _u(rng, (2, 4, 2, 5), dt)), name="plain"),
            Sample((_u(rng, (2, 3, 2, 3), dt), _u(rng, (2, 4, 2, 3), dt),
                    _u(rng, (2, 4, 2, 2), dt), mask), {"scale": 0.7}, name="masked",
                   grad_argnums=(0, 1, 2)),
            Sample((_u(rng, (1, 3, 1, 2), dt), _u(rng, (1, 3, 1, 2), dt),
                    _u(rng, (1, 3, 1, 2), dt), np.tril(np.ones((3, 3), bool))), name="causal",
                   grad_argnums=(0, 1, 2))]


# --- bias_add, l2_loss, moments, batch_normalization -------------------------------------

def ref_bias_add(x, b, data_format="NHWC"):
    if data_format == "NCHW" and x.ndim >= 3:
        return (x + b.reshape((-1,) + (1,) * (x.ndim - 2))).astype(x.dtype)
    return (x + b).astype(x.dtype)


def _bias_samples(dt, rng):
    if dt.is_integer:
        return [Sample((rng.integers(-5, 5, (2, 3)).astype(dt.np),
                        rng.integers(-5, 5, (3,)).astype(dt.np)), name="int")]
    return [Sample((_u(rng, (2, 3), dt), _u(rng, (3,), dt)), name="2d"),
            Sample((_u(rng, (2, 2, 2, 3), dt), _u(rng, (3,), dt)), name="nhwc"),
            Sample((_u(rng, (2, 3, 2, 2), dt), _u(rng, (3,), dt)), {"data_format": "NCHW"},
                   name="nchw")]


def ref_l2_loss(x):
    return np.asarray((x.astype(np.float64) ** 2).sum() / 2).astype(x.dtype)


def _l2_samples(dt, rng):
    return [Sample((_u(rng, (3, 4), dt),), name="2d"), Sample((np.asarray(_u(rng, (), dt)),),
                                                              name="scalar")]


def ref_moments(x, axes, keepdims=False):
    x64 = x.astype(np.float64)
    ax = tuple(axes)
    return (_cast_like(x64.mean(axis=ax, keepdims=keepdims), x),
            _cast_like(x64.var(axis=ax, keepdims=keepdims), x))


def _moments_samples(dt, rng):
    return [Sample((_u(rng, (3, 4), dt), [0]), name="axis0"),
            Sample((_u(rng, (2, 3, 2), dt), [0, 2]), {"keepdims": True}, name="keepdims"),
            Sample((_u(rng, (5,), dt), [0]), name="1d")]


def ref_batch_norm(x, mean, var, offset, scale, eps):
    f = np.float64
    y = (x.astype(f) - mean.astype(f)) / np.sqrt(var.astype(f) + eps)
    if scale is not None:
        y = y * scale.astype(f)
    if offset is not None:
        y = y + offset.astype(f)
    return _cast_like(y, x)


def _bn_samples(dt, rng):
    c = 3
    return [Sample((_u(rng, (4, c), dt), _u(rng, (c,), dt), _u(rng, (c,), dt, 0.5, 2.0),
                    _u(rng, (c,), dt), _u(rng, (c,), dt), 1e-3), name="full"),
            Sample((_u(rng, (2, 2, c), dt), _u(rng, (c,), dt), _u(rng, (c,), dt, 0.5, 2.0),
                    None, None, 1e-3), name="no_affine")]


# --- cross entropies ------------------------------------------------------------------------

def ref_softmax_xent(labels, logits, axis=-1):
    return _cast_like(-(labels.astype(np.float64) * _log_softmax64(logits, axis)).sum(axis=axis),
                      logits)


def _xent_samples(dt, rng):
    def dist(shape, axis=-1):
        p = rng.uniform(0.1, 1.0, shape)
        return (p / p.sum(axis=axis, keepdims=True)).astype(dt.np)
    return [Sample((dist((3, 4)), _u(rng, (3, 4), dt)), name="2d"),
            Sample((dist((2, 3, 2), axis=1), _u(rng, (2, 3, 2), dt)), {"axis": 1}, name="axis1"),
            Sample((dist((4,)), _u(rng, (4,), dt)), name="1d")]


def ref_sparse_xent(labels, logits):
    ls = _log_softmax64(logits, -1)
    return _cast_like(-np.take_along_axis(ls, labels[..., None].astype(np.intp), -1)[..., 0],
                      logits)


def _sparse_samples(dt, rng):
    return [Sample((rng.integers(0, 5, (3,)).astype(np.int32), _u(rng, (3, 5), dt)),
                   name="int32"),
            Sample((rng.integers(0, 3, (2, 2)).astype(np.int64), _u(rng, (2, 2, 3), dt)),
                   name="int64_3d")]


def ref_sigmoid_xent(labels, logits):
    x = logits.astype(np.float64)
    z = labels.astype(np.float64)
    return _cast_like(np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x))), logits)


def _sigmoid_xent_samples(dt, rng):
    return [Sample((_u(rng, (3, 4), dt, 0, 1), _u(rng, (3, 4), dt, -3, 3)), name="2d"),
            Sample((_u(rng, (5,), dt, 0, 1), np.array([-100, -1, 0.5, 2, 100], dt.np)),
                   name="extreme")]


# --- convolution -----------------------------------------------------------------------------

def _pair(v, fmt):
    if isinstance(v, int):
        return v, v
    v = list(v)
    if len(v) == 2:
        return v[0], v[1]
    return (v[1], v[2]) if fmt == "NHWC" else (v[2], v[3])


def _pads_1d(size, k, s, d, padding, i):
    """(output size, pad before) for one spatial dimension (TF's rules)."""
    eff = (k - 1) * d + 1
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return (size - eff) // s + 1, 0
        out = -(-size // s)
        return out, max((out - 1) * s + eff - size, 0) // 2
    pb, pa = padding[i]
    return (size + pb + pa - eff) // s + 1, pb


def _to_nhwc(x, fmt):
    return x if fmt == "NHWC" else x.transpose(0, 2, 3, 1)


def _from_nhwc(x, fmt):
    return x if fmt == "NHWC" else x.transpose(0, 3, 1, 2)


def ref_conv2d(x, w, strides=1, padding="VALID", data_format="NHWC", dilations=1):
    """Direct (naive loop) convolution in float64."""
    xn = _to_nhwc(x.astype(np.float64), data_format)
    w64 = w.astype(np.float64)
    n, h, wd, c = xn.shape
    kh, kw, _, o = w.shape
    sh, sw = _pair(strides, data_format)
    dh, dw = _pair(dilations, data_format)
    ho, pt = _pads_1d(h, kh, sh, dh, padding, 0)
    wo, pl = _pads_1d(wd, kw, sw, dw, padding, 1)
    out = np.zeros((n, ho, wo, o))
    for a in range(ho):
        for b in range(wo):
            for i in range(kh):
                for j in range(kw):
                    r, q = a * sh + i * dh - pt, b * sw + j * dw - pl
                    if 0 <= r < h and 0 <= q < wd:
                        out[:, a, b, :] += xn[:, r, q, :] @ w64[i, j]
    return _from_nhwc(out, data_format).astype(x.dtype)


def _conv_cases():
    # (x shape NHWC, filter shape, kwargs)
    return [
        ((2, 5, 5, 2), (3, 3, 2, 3), {"strides": 1, "padding": "SAME"}, "same_s1"),
        ((1, 5, 5, 2), (3, 3, 2, 2), {"strides": 1, "padding": "VALID"}, "valid_s1"),
        ((1, 6, 5, 2), (3, 2, 2, 2), {"strides": [1, 2, 2, 1], "padding": "SAME"}, "same_s2"),
        ((1, 6, 6, 1), (2, 2, 1, 2), {"strides": 2, "padding": "VALID"}, "valid_s2"),
        ((1, 6, 6, 2), (2, 2, 2, 2), {"strides": 1, "padding": "SAME", "dilations": 2},
         "same_d2"),
        ((1, 5, 6, 1), (3, 2, 1, 2), {"strides": [2, 1], "padding": "VALID", "dilations": [1, 2]},
         "valid_mixed"),
        ((1, 4, 4, 1), (3, 3, 1, 1), {"strides": 1, "padding": [[1, 0], [0, 2]]}, "explicit"),
    ]


def _nchw_kwargs(kw):
    kw = dict(kw, data_format="NCHW")
    for k in ("strides", "dilations"):
        v = kw.get(k)
        if isinstance(v, list) and len(v) == 4:
            kw[k] = [v[0], v[3], v[1], v[2]]
    return kw


def _conv_samples(dt, rng):
    out = []
    for xs, ws, kw, name in _conv_cases():
        x, w = _u(rng, xs, dt, -1, 1), _u(rng, ws, dt, -1, 1)
        out.append(Sample((x, w), kw, name=name))
        if name in ("same_s1", "same_s2", "valid_s2", "same_d2"):
            out.append(Sample((x.transpose(0, 3, 1, 2).copy(), w), _nchw_kwargs(kw),
                              name=name + "_nchw"))
    return out


def ref_conv2d_backprop_input(input_sizes, w, dy, strides=1, padding="VALID",
                              data_format="NHWC", dilations=1):
    """The adjoint of :func:`ref_conv2d` in its input, as loops."""
    w64 = w.astype(np.float64)
    dyn = _to_nhwc(dy.astype(np.float64), data_format)
    n, h, wd, c = (input_sizes if data_format == "NHWC"
                   else [input_sizes[0], input_sizes[2], input_sizes[3], input_sizes[1]])
    kh, kw, _, o = w.shape
    sh, sw = _pair(strides, data_format)
    dh, dwl = _pair(dilations, data_format)
    ho, pt = _pads_1d(h, kh, sh, dh, padding, 0)
    wo, pl = _pads_1d(wd, kw, sw, dwl, padding, 1)
    dx = np.zeros((n, h, wd, c))
    for a in range(ho):
        for b in range(wo):
            for i in range(kh):
                for j in range(kw):
                    r, q = a * sh + i * dh - pt, b * sw + j * dwl - pl
                    if 0 <= r < h and 0 <= q < wd:
                        dx[:, r, q, :] += dyn[:, a, b, :] @ w64[i, j].T
    return _from_nhwc(dx, data_format).astype(dy.dtype)


def ref_conv2d_backprop_filter(x, filter_sizes, dy, strides=1, padding="VALID",
                               data_format="NHWC", dilations=1):
    xn = _to_nhwc(x.astype(np.float64), data_format)
    dyn = _to_nhwc(dy.astype(np.float64), data_format)
    n, h, wd, c = xn.shape
    kh, kw, _, o = filter_sizes
    sh, sw = _pair(strides, data_format)
    dh, dwl = _pair(dilations, data_format)
    ho, pt = _pads_1d(h, kh, sh, dh, padding, 0)
    wo, pl = _pads_1d(wd, kw, sw, dwl, padding, 1)
    dw = np.zeros((kh, kw, c, o))
    for a in range(ho):
        for b in range(wo):
            for i in range(kh):
                for j in range(kw):
                    r, q = a * sh + i * dh - pt, b * sw + j * dwl - pl
                    if 0 <= r < h and 0 <= q < wd:
                        dw[i, j] += xn[:, r, q, :].T @ dyn[:, a, b, :]
    return dw.astype(x.dtype)


def _out_shape(xs, ws, kw):
    fmt = kw.get("data_format", "NHWC")
    n, h, wd, _ = xs
    sh, sw = _pair(kw.get("strides", 1), fmt)
    dh, dwl = _pair(kw.get("dilations", 1), fmt)
    ho, _ = _pads_1d(h, ws[0], sh, dh, kw["padding"], 0)
    wo, _ = _pads_1d(wd, ws[1], sw, dwl, kw["padding"], 1)
    return (n, ho, wo, ws[3])


def _bp_cases(dt, rng):
    cases = [c for c in _conv_cases() if c[3] in ("same_s1", "valid_s2", "same_d2", "same_s2")]
    for xs, ws, kw, name in cases:
        ys = _out_shape(xs, ws, kw)
        yield xs, ws, ys, kw, name
        if name == "same_s2":
            yield ((xs[0], xs[3], xs[1], xs[2]), ws, (ys[0], ys[3], ys[1], ys[2]),
                   _nchw_kwargs(kw), name + "_nchw")


def _bp_input_samples(dt, rng):
    return [Sample((list(xs), _u(rng, ws, dt, -1, 1), _u(rng, ys, dt, -1, 1)), kw, name=name)
            for xs, ws, ys, kw, name in _bp_cases(dt, rng)]


def _bp_filter_samples(dt, rng):
    return [Sample((_u(rng, xs, dt, -1, 1), list(ws), _u(rng, ys, dt, -1, 1)), kw, name=name)
            for xs, ws, ys, kw, name in _bp_cases(dt, rng)]


def ref_conv2d_transpose(x, w, output_shape, strides=1, padding="SAME", data_format="NHWC",
                         dilations=1):
    return ref_conv2d_backprop_input(output_shape, w, x, strides, padding, data_format,
                                     dilations)


def _transpose_samples(dt, rng):
    return [Sample((_u(rng, (1, 3, 3, 2), dt), _u(rng, (3, 3, 1, 2), dt), [1, 6, 6, 1]),
                   {"strides": 2, "padding": "SAME"}, name="s2")]


# --- pooling ----------------------------------------------------------------------------------

def _pool_ref(kind):
    def ref(x, ksize, strides, padding, data_format="NHWC"):
        xn = _to_nhwc(x.astype(np.float64), data_format)
        n, h, wd, c = xn.shape
        kh, kw = _pair(ksize, data_format)
        sh, sw = _pair(strides, data_format)
        ho, pt = _pads_1d(h, kh, sh, 1, padding, 0)
        wo, pl = _pads_1d(wd, kw, sw, 1, padding, 1)
        out = np.zeros((n, ho, wo, c))
        for a in range(ho):
            for b in range(wo):
                r0, q0 = a * sh - pt, b * sw - pl
                win = xn[:, max(r0, 0):min(r0 + kh, h), max(q0, 0):min(q0 + kw, wd), :]
                out[:, a, b, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
        return _from_nhwc(out, data_format).astype(x.dtype)
    return ref


def _pool_samples(kind):
    def samples(dt, rng):
        mk = ((lambda s: rng.integers(-50, 50, s).astype(dt.np)) if dt.is_integer else
              (lambda s: _distinct(rng, s, dt)) if kind == "max" else
              (lambda s: _u(rng, s, dt)))
        cases = [((2, 4, 4, 2), 2, 2, "VALID", "k2s2"),
                 ((1, 5, 5, 2), 3, 2, "SAME", "k3s2_same"),
                 ((1, 5, 4, 1), [2, 3], [1, 1], "VALID", "k23s1"),
                 ((1, 4, 4, 1), [1, 3, 3, 1], [1, 1, 1, 1], "SAME", "k3s1_same")]
        out = []
        for xs, k, s, p, name in cases:
            x = mk(xs)
            out.append(Sample((x, k, s, p), name=name))
            if name in ("k2s2", "k3s2_same"):
                out.append(Sample((x.transpose(0, 3, 1, 2).copy(), k, s, p),
                                  {"data_format": "NCHW"}, name=name + "_nchw"))
        return out
    return samples


# --- dropout -----------------------------------------------------------------------------------

def check_dropout(out, x, rate=None, noise_shape=None, seed=None, keep_prob=None, **_):
    if keep_prob is not None:
        rate = 1.0 - keep_prob
    o = np.asarray(out, dtype=np.float64)
    xs = np.asarray(x, dtype=np.float64)
    assert o.shape == xs.shape, (o.shape, xs.shape)
    scale = 1.0 / (1.0 - rate)
    kept = o != 0
    assert np.allclose(o[kept], xs[kept] * scale, rtol=2e-3), "kept values must be x/(1-rate)"
    frac = kept.mean()
    n = kept.size
    assert abs(frac - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n) + 1e-9, frac
    # reproducible with a seed, and the gradient is the same scaled mask
    saved = tf.random.STATE.global_seed
    try:
        tf.random.set_seed(7)
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            a = tf.nn.dropout(xt, rate=rate, seed=seed)
        g = tape.gradient(a, xt).numpy().astype(np.float64)
        tf.random.set_seed(7)
        b = tf.nn.dropout(tf.constant(x), rate=rate, seed=seed)
        assert np.array_equal(a.numpy(), b.numpy()), "dropout is not reproducible with a seed"
        mask = (a.numpy() != 0) * scale
        assert np.allclose(g, mask, rtol=2e-3), "dropout gradient must be mask / (1 - rate)"
    finally:
        tf.random.set_seed(saved)
    return True


def _dropout_samples(dt, rng):
    x = _u(rng, (40, 50), dt, 0.5, 2.0)
    return [Sample((x,), {"rate": 0.3, "seed": 3}, name="rate"),
            Sample((x,), {"keep_prob": 0.75}, name="keep_prob")]


# --- the fused convolution (_FusedConv2D) ----------------------------------------------

def _ref_activation(z, act, alpha):
    """The activations of ``_FusedConv2D`` in float64 NumPy (SciPy-free erf)."""
    if act is None:
        return z
    if act == "Relu":
        return np.maximum(z, 0)
    if act == "Relu6":
        return np.minimum(np.maximum(z, 0), 6)
    if act == "LeakyRelu":
        return np.where(z > 0, z, alpha * z)
    if act == "Elu":
        return np.where(z > 0, z, np.expm1(np.minimum(z, 0)))
    if act == "GeluApproximate":
        return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * z * (1 + erf(z / np.sqrt(2)))


def ref_fused_conv2d(x, w, b, strides=1, padding="VALID", data_format="NHWC", dilations=None,
                     activation=None, leakyrelu_alpha=0.2):
    """``act(conv2d(x, w) + b)`` from :func:`ref_conv2d`, in float64."""
    z = ref_conv2d(x.astype(np.float64), w.astype(np.float64), strides, padding, data_format,
                   1 if dilations is None else dilations)
    z = z + (b.astype(np.float64) if data_format == "NHWC"
             else b.astype(np.float64)[:, None, None])
    return _ref_activation(z, activation, leakyrelu_alpha).astype(x.dtype)


#: (activation, leakyrelu_alpha) of the fused-convolution samples
_FUSED_ACTS = ((None, 0.2), ("Relu", 0.2), ("Relu6", 0.2), ("LeakyRelu", 0.3),
               ("LeakyRelu", -0.5), ("Elu", 0.2), ("GeluExact", 0.2),
               ("GeluApproximate", 0.2))


def _fused_samples(dt, rng):
    """Quarters for the input and filter (the products are multiples of 1/16, exact in
    float32) and a bias of 1/32 plus quarters: every pre-activation is at least 1/32
    from the activations' kinks (0 and 6), so finite differences see one smooth piece."""
    cases = [c for c in _conv_cases() if c[3] in ("same_s1", "same_s2", "same_d2",
                                                  "valid_mixed", "explicit")]
    out = []
    for k, (act, alpha) in enumerate(_FUSED_ACTS):
        xs, ws, kw, name = cases[k % len(cases)]
        x = (rng.integers(-4, 5, xs) / 4).astype(dt.np)
        w = (rng.integers(-2, 3, ws) / 4).astype(dt.np)
        b = (rng.integers(-8, 9, ws[3]) / 4 + 1 / 32).astype(dt.np)
        kw = dict(kw, activation=act, leakyrelu_alpha=alpha)
        tag = f"{act or 'bias'}{'_neg' if alpha < 0 else ''}_{name}"
        out.append(Sample((x, w, b), kw, name=tag))
        if "dilations" not in kw or isinstance(kw.get("dilations"), int):
            out.append(Sample((x.transpose(0, 3, 1, 2).copy(), w, b), _nchw_kwargs(kw),
                              name=tag + "_nchw"))
    return out


# --- the fused recurrent ops (FusedLSTM, FusedGRU; issue 45) ------------------------------

def _sigmoid64(z):
    return 1.0 / (1.0 + np.exp(-z))


def ref_lstm_sequence(x, h0, c0, kernel, recurrent_kernel, bias=None, forget_bias=0.0,
                      gate_order="ifco", reverse=False):
    """The LSTM over time-major ``x`` step by step, in float64 NumPy."""
    dt = x.dtype
    x, h, c, w, u = (a.astype(np.float64) for a in (x, h0, c0, kernel, recurrent_kernel))
    b = np.zeros(w.shape[1]) if bias is None else bias.astype(np.float64)
    n = h.shape[-1]
    outs = np.zeros((x.shape[0],) + h.shape)
    for t in (range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])):
        z = x[t] @ w + h @ u + b
        g = {name: z[:, k * n:(k + 1) * n] for k, name in enumerate(gate_order)}
        c = _sigmoid64(g["f"] + forget_bias) * c + _sigmoid64(g["i"]) * np.tanh(g["c"])
        h = _sigmoid64(g["o"]) * np.tanh(c)
        outs[t] = h
    return outs.astype(dt), h.astype(dt), c.astype(dt)


def ref_gru_sequence(x, h0, kernel, recurrent_kernel, bias=None, recurrent_bias=None,
                     gate_order="zrh", reverse=False):
    """The GRU (reset gate after the recurrent product) step by step, in float64 NumPy."""
    dt = x.dtype
    x, h, w, u = (a.astype(np.float64) for a in (x, h0, kernel, recurrent_kernel))
    b = np.zeros(w.shape[1]) if bias is None else bias.astype(np.float64)
    rb = np.zeros(w.shape[1]) if recurrent_bias is None else recurrent_bias.astype(np.float64)
    n = h.shape[-1]
    outs = np.zeros((x.shape[0],) + h.shape)
    for t in (range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])):
        xz, hz = x[t] @ w + b, h @ u + rb
        gx = {name: xz[:, k * n:(k + 1) * n] for k, name in enumerate(gate_order)}
        gh = {name: hz[:, k * n:(k + 1) * n] for k, name in enumerate(gate_order)}
        z, r = _sigmoid64(gx["z"] + gh["z"]), _sigmoid64(gx["r"] + gh["r"])
        cand = np.tanh(gx["h"] + r * gh["h"])
        h = z * h + (1 - z) * cand
        outs[t] = h
    return outs.astype(dt), h.astype(dt)


def _rnn_samples(k, orders):
    """Sequences of T = 3 (and T = 0), B = 2, I = 3, H = 2 with weights in [-1, 1]; each
    gate order once, forward and reversed."""
    def samples(dt, rng):
        out = []
        for s, order in enumerate(orders):
            t_len, bs, i_dim, n = (3, 2, 3, 2) if s < len(orders) - 1 else (0, 2, 3, 2)
            x = _u(rng, (t_len, bs, i_dim), dt, -1.0, 1.0)
            states = [_u(rng, (bs, n), dt, -1.0, 1.0) for _ in range(k - 2)]
            ws = [_u(rng, shape, dt, -1.0, 1.0) for shape in
                  ((i_dim, k * n), (n, k * n), (k * n,), (k * n,))[:k - 1]]
            kw = {"gate_order": order, "reverse": bool(s % 2)}
            if k == 4:
                kw["forget_bias"] = 0.5 * s
            out.append(Sample((x, *states, *ws), kw, name=f"{order}{'_rev' * (s % 2)}_T{t_len}"))
        return out
    return samples


_LX, _LH = np.ones((3, 2, 3), np.float32), np.ones((2, 2), np.float32)


# --- specs -------------------------------------------------------------------------------

_X = np.ones((1, 5, 5, 3), np.float32)

# --- 1-d, 3-d, depthwise and separable convolution; 1-d and 3-d pooling -----------------------

def _taps_nd(spatial, ks, strides, dil, padding):
    """Yield (output position, tap, input position) of every in-bounds tap of an N-d
    window op (TF's SAME/VALID rules), as index tuples."""
    geo = [_pads_1d(n, k, s, d, padding, i)
           for i, (n, k, s, d) in enumerate(zip(spatial, ks, strides, dil))]
    for o in itertools.product(*(range(g[0]) for g in geo)):
        for t in itertools.product(*(range(k) for k in ks)):
            p = tuple(a * s + b * d - g[1] for a, b, s, d, g in zip(o, t, strides, dil, geo))
            if all(0 <= q < n for q, n in zip(p, spatial)):
                yield o, t, p


def _out_nd(spatial, ks, strides, dil, padding):
    return tuple(_pads_1d(n, k, s, d, padding, i)[0]
                 for i, (n, k, s, d) in enumerate(zip(spatial, ks, strides, dil)))


def _cl(x, last):
    """Channels-last view of a channels-first array (and back: ``_cf``)."""
    return x if last else np.moveaxis(x, 1, -1)


def _cf(x, last):
    return x if last else np.moveaxis(x, -1, 1)


def _n(v, n, last):
    if isinstance(v, int):
        return (v,) * n
    v = list(v)
    if len(v) == 1:
        return tuple(v) * n
    if len(v) == n:
        return tuple(v)
    return tuple(v[1:-1]) if last else tuple(v[2:])


def _ref_conv_nd(x, w, strides, padding, dil, last):
    """Channels-last naive convolution of ``x`` with ``w`` ``[*K, C, O]`` in float64."""
    xn = _cl(x.astype(np.float64), last)
    w64 = w.astype(np.float64)
    nsp = xn.ndim - 2
    ks = w.shape[:nsp]
    out = np.zeros((xn.shape[0],) + _out_nd(xn.shape[1:-1], ks, strides, dil, padding)
                   + (w.shape[-1],))
    for o, t, p in _taps_nd(xn.shape[1:-1], ks, strides, dil, padding):
        out[(slice(None),) + o] += xn[(slice(None),) + p] @ w64[t]
    return _cf(out, last).astype(x.dtype)


def _ref_bpi_nd(sizes_cl, w, dy, strides, padding, dil, last):
    dyn = _cl(dy.astype(np.float64), last)
    w64 = w.astype(np.float64)
    nsp = len(sizes_cl) - 2
    dx = np.zeros(sizes_cl)
    for o, t, p in _taps_nd(sizes_cl[1:-1], w.shape[:nsp], strides, dil, padding):
        dx[(slice(None),) + p] += dyn[(slice(None),) + o] @ w64[t].T
    return _cf(dx, last).astype(dy.dtype)


def _ref_bpf_nd(x, filter_sizes, dy, strides, padding, dil, last):
    xn, dyn = _cl(x.astype(np.float64), last), _cl(dy.astype(np.float64), last)
    nsp = xn.ndim - 2
    dw = np.zeros(tuple(filter_sizes))
    for o, t, p in _taps_nd(xn.shape[1:-1], filter_sizes[:nsp], strides, dil, padding):
        dw[t] += xn[(slice(None),) + p].T @ dyn[(slice(None),) + o]
    return dw.astype(x.dtype)


def ref_conv1d(x, w, stride=1, padding="VALID", data_format="NWC", dilations=1):
    last = data_format in ("NWC", "NHWC")
    return _ref_conv_nd(x, w, _n(stride, 1, last), padding, _n(dilations, 1, last), last)


def ref_conv1d_transpose(x, w, output_shape, strides=1, padding="SAME", data_format="NWC",
                         dilations=1):
    last = data_format == "NWC"
    sizes = tuple(output_shape) if last else (output_shape[0], output_shape[2], output_shape[1])
    return _ref_bpi_nd(sizes, w, x, _n(strides, 1, last), padding, _n(dilations, 1, last), last)


def ref_conv3d(x, w, strides=1, padding="VALID", data_format="NDHWC", dilations=1):
    last = data_format == "NDHWC"
    return _ref_conv_nd(x, w, _n(strides, 3, last), padding, _n(dilations, 3, last), last)


def _sizes_cl(sizes, last):
    return tuple(sizes) if last else (sizes[0], *sizes[2:], sizes[1])


def ref_conv3d_backprop_input(input_sizes, w, dy, strides=1, padding="VALID",
                              data_format="NDHWC", dilations=1):
    last = data_format == "NDHWC"
    return _ref_bpi_nd(_sizes_cl(input_sizes, last), w, dy, _n(strides, 3, last), padding,
                       _n(dilations, 3, last), last)


def ref_conv3d_backprop_filter(x, filter_sizes, dy, strides=1, padding="VALID",
                               data_format="NDHWC", dilations=1):
    last = data_format == "NDHWC"
    return _ref_bpf_nd(x, filter_sizes, dy, _n(strides, 3, last), padding,
                       _n(dilations, 3, last), last)


def ref_conv3d_transpose(x, w, output_shape, strides=1, padding="SAME", data_format="NDHWC",
                         dilations=1):
    return ref_conv3d_backprop_input(output_shape, w, x, strides, padding, data_format,
                                     dilations)


def _depthwise_dense(w):
    """The dense ``[kh, kw, C, C * M]`` filter equal to a depthwise one ``[kh, kw, C, M]``."""
    kh, kw, c, m = w.shape
    dense = np.zeros((kh, kw, c, c * m), np.float64)
    for ch in range(c):
        dense[:, :, ch, ch * m:(ch + 1) * m] = w[:, :, ch, :]
    return dense


def ref_depthwise_conv2d(x, w, strides=1, padding="VALID", data_format="NHWC", dilations=1,
                         rate=None):
    last = data_format in (None, "NHWC")
    return _ref_conv_nd(x, _depthwise_dense(w), _n(strides, 2, last), padding,
                        _n(dilations if rate is None else rate, 2, last), last)


def ref_depthwise_backprop_input(input_sizes, w, dy, strides=1, padding="VALID",
                                 data_format="NHWC", dilations=1):
    last = data_format == "NHWC"
    return _ref_bpi_nd(_sizes_cl(input_sizes, last), _depthwise_dense(w), dy,
                       _n(strides, 2, last), padding, _n(dilations, 2, last), last)


def ref_depthwise_backprop_filter(x, filter_sizes, dy, strides=1, padding="VALID",
                                  data_format="NHWC", dilations=1):
    last = data_format == "NHWC"
    kh, kw, c, m = filter_sizes
    dense = _ref_bpf_nd(x.astype(np.float64), (kh, kw, c, c * m), dy.astype(np.float64),
                        _n(strides, 2, last), padding, _n(dilations, 2, last), last)
    return np.stack([dense[:, :, ch, ch * m:(ch + 1) * m] for ch in range(c)],
                    axis=2).astype(x.dtype)


def ref_separable_conv2d(x, dw, pw, strides=1, padding="VALID", data_format="NHWC",
                         dilations=1):
    y = ref_depthwise_conv2d(x.astype(np.float64), dw, strides, padding, data_format, dilations)
    return ref_conv2d(y, pw.astype(np.float64), 1, "VALID", data_format or "NHWC").astype(
        x.dtype)


def _pool_ref_nd(kind, nsp):
    def ref(x, ksize, strides, padding, data_format=None):
        last = data_format is None or data_format[-1] == "C"
        xn = _cl(x.astype(np.float64), last)
        k, s = _n(ksize, nsp, last), _n(strides, nsp, last)
        outs = _out_nd(xn.shape[1:-1], k, s, (1,) * nsp, padding)
        out = np.zeros((xn.shape[0], *outs, xn.shape[-1]))
        for o in itertools.product(*(range(m) for m in outs)):
            box = []
            for i, (a, kk, ss) in enumerate(zip(o, k, s)):
                _, pad = _pads_1d(xn.shape[1 + i], kk, ss, 1, padding, i)
                lo = a * ss - pad
                box.append(slice(max(lo, 0), min(lo + kk, xn.shape[1 + i])))
            win = xn[(slice(None), *box)]
            ax = tuple(range(1, nsp + 1))
            out[(slice(None), *o)] = win.max(axis=ax) if kind == "max" else win.mean(axis=ax)
        return _cf(out, last).astype(x.dtype)
    return ref


def _conv1d_samples(dt, rng):
    u = lambda s: _u(rng, s, dt, -1, 1)  # noqa: E731
    x = u((2, 7, 3))
    return [Sample((x, u((3, 3, 2))), {"stride": 1, "padding": "SAME"}, name="same"),
            Sample((x, u((2, 3, 2))), {"stride": 2, "padding": "VALID"}, name="valid_s2"),
            Sample((x, u((2, 3, 2))), {"stride": 1, "padding": "SAME", "dilations": 2},
                   name="same_d2"),
            Sample((np.moveaxis(x, -1, 1).copy(), u((3, 3, 2))),
                   {"stride": 2, "padding": "SAME", "data_format": "NCW"}, name="same_s2_ncw")]


def _conv1d_transpose_samples(dt, rng):
    return [Sample((_u(rng, (1, 4, 3), dt, -1, 1), _u(rng, (3, 2, 3), dt, -1, 1), [1, 8, 2],
                    2), name="s2")]


def _conv3d_cases():
    return [((1, 4, 4, 3, 2), (2, 3, 2, 2, 2), {"strides": 1, "padding": "SAME"}, "same"),
            ((2, 5, 4, 4, 1), (3, 2, 2, 1, 2), {"strides": [1, 2, 1, 2, 1], "padding": "VALID"},
             "valid_s2"),
            ((1, 5, 4, 5, 2), (2, 2, 2, 2, 1), {"strides": 1, "padding": "SAME",
                                                "dilations": [2, 1, 2]}, "same_d2"),
            ((1, 5, 5, 4, 2), (3, 3, 2, 2, 2), {"strides": [2, 2, 1], "padding": "SAME"},
             "same_s2")]


def _ncdhw(kw):
    kw = dict(kw, data_format="NCDHW")
    v = kw.get("strides")
    if isinstance(v, list) and len(v) == 5:
        kw["strides"] = [v[0], v[4], v[1], v[2], v[3]]
    return kw


def _conv3d_samples(dt, rng):
    out = []
    for xs, ws, kw, name in _conv3d_cases():
        x, w = _u(rng, xs, dt, -1, 1), _u(rng, ws, dt, -1, 1)
        out.append(Sample((x, w), kw, name=name))
        if name in ("same", "valid_s2"):
            out.append(Sample((np.moveaxis(x, -1, 1).copy(), w), _ncdhw(kw), name=name + "_ncdhw"))
    return out


def _conv3d_bp_cases(dt, rng):
    for xs, ws, kw, name in _conv3d_cases()[:3]:
        last = True
        n3 = _out_nd(xs[1:4], ws[:3], _n(kw["strides"], 3, last),
                     _n(kw.get("dilations", 1), 3, last), kw["padding"])
        yield xs, ws, (xs[0], *n3, ws[4]), kw, name
        if name == "valid_s2":
            yield ((xs[0], xs[4], *xs[1:4]), ws, (xs[0], ws[4], *n3), _ncdhw(kw),
                   name + "_ncdhw")


def _conv3d_bpi_samples(dt, rng):
    return [Sample((list(xs), _u(rng, ws, dt, -1, 1), _u(rng, ys, dt, -1, 1)), kw, name=name)
            for xs, ws, ys, kw, name in _conv3d_bp_cases(dt, rng)]


def _conv3d_bpf_samples(dt, rng):
    return [Sample((_u(rng, xs, dt, -1, 1), list(ws), _u(rng, ys, dt, -1, 1)), kw, name=name)
            for xs, ws, ys, kw, name in _conv3d_bp_cases(dt, rng)]


def _conv3d_transpose_samples(dt, rng):
    return [Sample((_u(rng, (1, 2, 3, 2, 2), dt), _u(rng, (3, 3, 3, 1, 2), dt),
                    [1, 4, 6, 4, 1]), {"strides": 2, "padding": "SAME"}, name="s2")]


def _dw_cases():
    return [((2, 5, 5, 2), (3, 3, 2, 2), {"strides": [1, 1, 1, 1], "padding": "SAME"}, "same"),
            ((1, 6, 5, 3), (2, 3, 3, 1), {"strides": [1, 2, 2, 1], "padding": "VALID"},
             "valid_s2"),
            ((1, 6, 6, 2), (3, 2, 2, 2), {"strides": 1, "padding": "SAME", "dilations": [2, 1]},
             "same_d2"),
            ((1, 5, 6, 2), (3, 3, 2, 2), {"strides": [2, 1], "padding": "SAME"}, "same_s21")]


def _dw_samples(dt, rng):
    out = []
    for xs, ws, kw, name in _dw_cases():
        x, w = _u(rng, xs, dt, -1, 1), _u(rng, ws, dt, -1, 1)
        out.append(Sample((x, w), kw, name=name))
        if name in ("same", "valid_s2"):
            out.append(Sample((x.transpose(0, 3, 1, 2).copy(), w), _nchw_kwargs(kw),
                              name=name + "_nchw"))
    return out


def _dw_bp_cases(dt, rng):
    for xs, ws, kw, name in _dw_cases():
        _, oh, ow, _ = _out_shape(xs, ws, kw)
        ys = (xs[0], oh, ow, ws[2] * ws[3])
        yield xs, ws, ys, kw, name
        if name == "valid_s2":
            yield ((xs[0], xs[3], xs[1], xs[2]), ws, (ys[0], ys[3], ys[1], ys[2]),
                   _nchw_kwargs(kw), name + "_nchw")


def _dw_bpi_samples(dt, rng):
    return [Sample((list(xs), _u(rng, ws, dt, -1, 1), _u(rng, ys, dt, -1, 1)), kw, name=name)
            for xs, ws, ys, kw, name in _dw_bp_cases(dt, rng)]


def _dw_bpf_samples(dt, rng):
    return [Sample((_u(rng, xs, dt, -1, 1), list(ws), _u(rng, ys, dt, -1, 1)), kw, name=name)
            for xs, ws, ys, kw, name in _dw_bp_cases(dt, rng)]


def _separable_samples(dt, rng):
    u = lambda s: _u(rng, s, dt, -1, 1)  # noqa: E731
    x = u((1, 5, 5, 2))
    return [Sample((x, u((3, 3, 2, 2)), u((1, 1, 4, 3))), {"strides": [1, 1, 1, 1],
                                                            "padding": "SAME"}, name="same"),
            Sample((x.transpose(0, 3, 1, 2).copy(), u((2, 2, 2, 1)), u((1, 1, 2, 3))),
                   {"strides": [1, 1, 2, 2], "padding": "VALID", "data_format": "NCHW"},
                   name="valid_s2_nchw")]


def _pool_nd_samples(kind, nsp):
    def samples(dt, rng):
        mk = ((lambda s: rng.integers(-50, 50, s).astype(dt.np)) if dt.is_integer else
              (lambda s: _distinct(rng, s, dt)) if kind == "max" else
              (lambda s: _u(rng, s, dt)))
        if nsp == 1:
            cases = [((2, 7, 2), 2, 2, "VALID", "NWC"), ((1, 7, 2), 3, 2, "SAME", "NWC"),
                     ((1, 2, 6), 3, 1, "SAME", "NCW")]
        else:
            cases = [((1, 4, 4, 4, 2), 2, 2, "VALID", "NDHWC"),
                     ((1, 5, 4, 3, 1), [3, 2, 3], [2, 1, 2], "SAME", "NDHWC"),
                     ((1, 2, 3, 5, 4), [2, 3, 2], 1, "SAME", "NCDHW")]
        return [Sample((mk(xs), k, s, p), {"data_format": f}, name=f"{p.lower()}_{f}_{i}")
                for i, (xs, k, s, p, f) in enumerate(cases)]
    return samples


#: (the composites of these ops run on OpenCL over its float32/float64 kernels)
_F3 = ("float16", "float32", "float64")
SKIP16 = {"*-float16-opencl:*": "the op runs as its composite of OpenCL's 2-d ops, "
                                "which have no float16 kernels"}

_CONV_FAMILY_SPECS = [
    OpSpec("nn.conv1d", tf.nn.conv1d, ref_conv1d, _conv1d_samples, op="Conv2D",
           tol=F16_LOOSE, grad_tol=(1e-4, 1e-5),
           errors=[ErrorSample((np.ones((1, 5, 3), np.float32), np.ones((3, 2, 4), np.float32)),
                               {"stride": 1, "padding": "SAME"}, InvalidArgumentError,
                               "in_channels", name="channel_mismatch"),
                   ErrorSample((np.ones((5, 3), np.float32), np.ones((3, 3, 4), np.float32)),
                               {"stride": 1, "padding": "SAME"}, InvalidArgumentError, "3-D",
                               name="rank")]),
    OpSpec("nn.conv1d_transpose", tf.nn.conv1d_transpose, ref_conv1d_transpose,
           _conv1d_transpose_samples, op="Conv2DBackpropInput", tol=F16_LOOSE),
    OpSpec("nn.conv3d", tf.nn.conv3d, ref_conv3d, _conv3d_samples, op="Conv3D",
           dtypes=_F3, skip=SKIP16, tol=F16_LOOSE, grad_tol=(1e-4, 1e-5),
           errors=[
               ErrorSample((np.ones((1, 4, 4, 4, 2), np.float32),
                            np.ones((2, 2, 2, 3, 1), np.float32)),
                           {"strides": 1, "padding": "SAME"}, InvalidArgumentError,
                           "in_channels", name="channel_mismatch"),
               ErrorSample((np.ones((1, 4, 4, 2), np.float32),
                            np.ones((2, 2, 2, 2, 1), np.float32)),
                           {"strides": 1, "padding": "SAME"}, InvalidArgumentError, "5-D",
                           name="rank"),
               ErrorSample((np.ones((1, 4, 4, 4, 2), np.float32),
                            np.ones((2, 2, 2, 2, 1), np.float32)),
                           {"strides": 1, "padding": "SAME", "data_format": "NHWC"},
                           InvalidArgumentError, "NDHWC", name="bad_data_format"),
               ErrorSample((np.ones((1, 2, 4, 4, 2), np.float32),
                            np.ones((3, 2, 2, 2, 1), np.float32)),
                           {"strides": 1, "padding": "VALID"}, InvalidArgumentError,
                           "output size", name="too_small")]),
    OpSpec("nn.conv3d_backprop_input_v2", tf.nn.conv3d_backprop_input_v2,
           ref_conv3d_backprop_input, _conv3d_bpi_samples, op="Conv3DBackpropInputV2",
           dtypes=_F3, skip=SKIP16, tol=F16_LOOSE),
    OpSpec("nn.conv3d_backprop_filter_v2", tf.nn.conv3d_backprop_filter_v2,
           ref_conv3d_backprop_filter, _conv3d_bpf_samples, op="Conv3DBackpropFilterV2",
           dtypes=_F3, skip=SKIP16, tol=F16_LOOSE),
    OpSpec("nn.conv3d_transpose", tf.nn.conv3d_transpose, ref_conv3d_transpose,
           _conv3d_transpose_samples, op="Conv3DBackpropInputV2",
           dtypes=_F3, skip=SKIP16, tol=F16_LOOSE),
    OpSpec("nn.depthwise_conv2d", tf.nn.depthwise_conv2d, ref_depthwise_conv2d, _dw_samples,
           op="DepthwiseConv2dNative", dtypes=_F3,
           skip=SKIP16, tol=F16_LOOSE, grad_tol=(1e-4, 1e-5),
           errors=[ErrorSample((_X, np.ones((3, 3, 2, 2), np.float32)),
                               {"strides": 1, "padding": "SAME"}, InvalidArgumentError,
                               "in_channels", name="channel_mismatch"),
                   ErrorSample((_X, np.ones((3, 3, 3, 2), np.float32)),
                               {"strides": 2, "padding": "SAME", "dilations": 2},
                               InvalidArgumentError, "dilations", name="strides_and_dilations")]),
    OpSpec("nn.depthwise_conv2d_backprop_input", tf.nn.depthwise_conv2d_backprop_input,
           ref_depthwise_backprop_input, _dw_bpi_samples,
           op="DepthwiseConv2dNativeBackpropInput", dtypes=_F3,
           skip=SKIP16, tol=F16_LOOSE),
    OpSpec("nn.depthwise_conv2d_backprop_filter", tf.nn.depthwise_conv2d_backprop_filter,
           ref_depthwise_backprop_filter, _dw_bpf_samples,
           op="DepthwiseConv2dNativeBackpropFilter", dtypes=_F3,
           skip=SKIP16, tol=F16_LOOSE),
    OpSpec("nn.separable_conv2d", tf.nn.separable_conv2d, ref_separable_conv2d,
           _separable_samples, op="DepthwiseConv2dNative",
           dtypes=_F3, skip=SKIP16, tol=F16_LOOSE,
           errors=[ErrorSample((_X, np.ones((3, 3, 3, 2), np.float32),
                                np.ones((1, 1, 5, 4), np.float32)),
                               {"strides": 1, "padding": "SAME"}, InvalidArgumentError,
                               "pointwise_filter", name="pointwise_shape")]),
    OpSpec("nn.max_pool1d", tf.nn.max_pool1d, _pool_ref_nd("max", 1), _pool_nd_samples("max", 1),
           op="MaxPool", tol=F16,
           errors=[ErrorSample((np.ones((5, 3), np.float32), 2, 2, "SAME"), {},
                               InvalidArgumentError, "3-D", name="rank")]),
    OpSpec("nn.avg_pool1d", tf.nn.avg_pool1d, _pool_ref_nd("avg", 1), _pool_nd_samples("avg", 1),
           op="AvgPool", tol=F16),
    OpSpec("nn.max_pool3d", tf.nn.max_pool3d, _pool_ref_nd("max", 3), _pool_nd_samples("max", 3),
           op="MaxPool", tol=F16,
           errors=[ErrorSample((_X, 2, 2, "SAME"), {}, InvalidArgumentError, "5-D",
                               name="rank")]),
    OpSpec("nn.avg_pool3d", tf.nn.avg_pool3d, _pool_ref_nd("avg", 3), _pool_nd_samples("avg", 3),
           op="AvgPool", tol=F16),
]


SPECS = [
    OpSpec("nn.relu", tf.nn.relu, ref_relu, _act_samples(), op="Relu", tol=F16),
    OpSpec("nn.relu6", tf.nn.relu6, ref_relu6, _act_samples(kinks=(0.0, 6.0), hi=8.0),
           op="Relu6", tol=F16),
    OpSpec("nn.leaky_relu", tf.nn.leaky_relu, ref_leaky_relu, _leaky_samples, op="LeakyRelu",
           tol=F16),
    OpSpec("nn.elu", tf.nn.elu, ref_elu, _act_samples(), op="Elu", tol=F16),
    OpSpec("nn.softmax", tf.nn.softmax, ref_softmax, _softmax_samples, op="Softmax", tol=F16,
           errors=[ErrorSample((np.zeros((2, 3), np.float32),), {"axis": 2},
                               InvalidArgumentError, "out of range", name="bad_axis")]),
    OpSpec("nn.log_softmax", tf.nn.log_softmax, ref_log_softmax, _softmax_samples,
           op="LogSoftmax", tol=F16_LOOSE),
    OpSpec("nn.bias_add", tf.nn.bias_add, ref_bias_add, _bias_samples, op="BiasAdd", tol=F16,
           errors=[ErrorSample((np.zeros((2, 3), np.float32), np.zeros(4, np.float32)), {},
                               InvalidArgumentError, "as many biases", name="size")]),
    OpSpec("nn.l2_loss", tf.nn.l2_loss, ref_l2_loss, _l2_samples, op="L2Loss", tol=F16_LOOSE),
    OpSpec("nn.moments", tf.nn.moments, ref_moments, _moments_samples,
           dtypes=("float16", "float32", "float64"), tol=F16),
    OpSpec("nn.batch_normalization", tf.nn.batch_normalization, ref_batch_norm, _bn_samples,
           dtypes=("float16", "float32", "float64"), tol=F16_LOOSE),
    OpSpec("nn.dot_product_attention", tf.nn.dot_product_attention, ref_dot_product_attention,
           _dpa_samples, op="DotProductAttention", dtypes=("float16", "float32", "float64"),
           tol=F16_LOOSE,
           errors=[ErrorSample((np.zeros((2, 3, 2, 4), np.float32),
                                np.zeros((2, 5, 3, 4), np.float32),
                                np.zeros((2, 5, 3, 4), np.float32)), {}, InvalidArgumentError,
                               "do not fit", name="heads"),
                   ErrorSample((np.zeros((1, 2, 1, 2), np.float32),) * 3,
                               {"mask": np.ones((1, 1, 3, 2), bool)}, InvalidArgumentError,
                               "must be boolean and broadcast", name="mask")]),
    OpSpec("nn.layer_norm", tf.nn.layer_norm, ref_layer_norm, _ln_samples, op="LayerNorm",
           dtypes=("float16", "float32", "float64"), tol=F16_LOOSE,
           errors=[ErrorSample((np.zeros((2, 3), np.float32), np.ones(4, np.float32)), {},
                               InvalidArgumentError, "gamma must have shape", name="gamma"),
                   ErrorSample((np.zeros((2, 3), np.float32),), {"axis": 2},
                               InvalidArgumentError, "not a valid axis", name="axis"),
                   ErrorSample((np.zeros((2, 3), np.int32),), {},
                               InvalidArgumentError, "floating-point", name="int")]),
    OpSpec("nn.softmax_cross_entropy_with_logits", tf.nn.softmax_cross_entropy_with_logits,
           ref_softmax_xent, _xent_samples, op="SoftmaxCrossEntropyWithLogits", tol=F16_LOOSE,
           errors=[ErrorSample((np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)), {},
                               InvalidArgumentError, "broadcastable", name="shape")]),
    OpSpec("nn.sparse_softmax_cross_entropy_with_logits",
           tf.nn.sparse_softmax_cross_entropy_with_logits, ref_sparse_xent, _sparse_samples,
           op="SparseSoftmaxCrossEntropyWithLogits", tol=F16_LOOSE,
           errors=[ErrorSample((np.array([0, 10], np.int32), np.zeros((2, 10), np.float32)), {},
                               InvalidArgumentError,
                               re.escape("Received a label value of 10 which is outside the "
                                         "valid range of [0, 10)"), name="label_range"),
                   ErrorSample((np.array([-1, 0], np.int64), np.zeros((2, 10), np.float32)), {},
                               InvalidArgumentError, "Received a label value of -1",
                               name="negative_label"),
                   ErrorSample((np.array([0, 1, 2], np.int32), np.zeros((2, 10), np.float32)),
                               {}, InvalidArgumentError, "same first dimensions",
                               name="shape")]),
    OpSpec("nn.sigmoid_cross_entropy_with_logits", tf.nn.sigmoid_cross_entropy_with_logits,
           ref_sigmoid_xent, _sigmoid_xent_samples, op="SigmoidCrossEntropyWithLogits",
           tol=F16_LOOSE),
    OpSpec("nn.conv2d", tf.nn.conv2d, ref_conv2d, _conv_samples, op="Conv2D",
           tol={"float16": (3e-2, 3e-2)}, grad_tol=(1e-4, 1e-5),
           errors=[
               ErrorSample((_X, np.ones((3, 3, 2, 4), np.float32)),
                           {"strides": 1, "padding": "SAME"}, InvalidArgumentError,
                           "in_channels", name="channel_mismatch"),
               ErrorSample((_X, np.ones((3, 3, 3, 4), np.float32)),
                           {"strides": 1, "padding": "FOO"}, InvalidArgumentError,
                           "padding must be", name="bad_padding"),
               ErrorSample((_X, np.ones((3, 3, 3, 4), np.float32)),
                           {"strides": 1, "padding": "SAME", "data_format": "NWHC"},
                           InvalidArgumentError, "data_format", name="bad_data_format"),
               ErrorSample((_X, np.ones((7, 7, 3, 4), np.float32)),
                           {"strides": 1, "padding": "VALID"}, InvalidArgumentError,
                           "output size", name="too_small"),
               ErrorSample((_X, np.ones((3, 3, 3, 4), np.float32)),
                           {"strides": [2, 1, 1, 1], "padding": "SAME"}, InvalidArgumentError,
                           "batch and depth", name="batch_stride"),
           ]),
    OpSpec("nn.conv2d_backprop_input", tf.nn.conv2d_backprop_input, ref_conv2d_backprop_input,
           _bp_input_samples, op="Conv2DBackpropInput", tol={"float16": (3e-2, 3e-2)},
           errors=[ErrorSample(([1, 5, 5, 2], np.ones((3, 3, 2, 4), np.float32),
                                np.ones((1, 4, 4, 4), np.float32)),
                               {"strides": 1, "padding": "SAME"}, InvalidArgumentError,
                               "out_backprop shape", name="dy_shape")]),
    OpSpec("nn.conv2d_backprop_filter", tf.nn.conv2d_backprop_filter,
           ref_conv2d_backprop_filter, _bp_filter_samples, op="Conv2DBackpropFilter",
           tol={"float16": (3e-2, 3e-2)}),
    OpSpec("nn.conv2d_transpose", tf.nn.conv2d_transpose, ref_conv2d_transpose,
           _transpose_samples, op="Conv2DBackpropInput", tol={"float16": (3e-2, 3e-2)}),
    OpSpec("nn.max_pool2d", tf.nn.max_pool2d, _pool_ref("max"), _pool_samples("max"),
           op="MaxPool", tol=F16,
           errors=[ErrorSample((_X, 2, 2, "FOO"), {}, InvalidArgumentError, "padding must be",
                               name="bad_padding"),
                   ErrorSample((_X, 2, 2, "SAME"), {"data_format": "HWCN"},
                               InvalidArgumentError, "data_format", name="bad_data_format"),
                   ErrorSample((np.ones((5, 5), np.float32), 2, 2, "SAME"), {},
                               InvalidArgumentError, "4-D", name="rank")]),
    OpSpec("nn.avg_pool2d", tf.nn.avg_pool2d, _pool_ref("avg"), _pool_samples("avg"),
           op="AvgPool", tol=F16),
    OpSpec("nn_fused.fused_conv2d", fused_conv2d, ref_fused_conv2d, _fused_samples,
           op="_FusedConv2D", dtypes=("float32", "float64"), grad_tol=(1e-4, 1e-5),
           errors=[
               ErrorSample((_X, np.ones((3, 3, 3, 4), np.float32), np.ones(3, np.float32)),
                           {"padding": "SAME"}, InvalidArgumentError, "one value per output",
                           name="bias_size"),
               ErrorSample((_X, np.ones((3, 3, 3, 4), np.float32), np.ones(4, np.float32)),
                           {"padding": "SAME", "activation": "Swish"}, InvalidArgumentError,
                           "activation must be", name="bad_activation"),
               ErrorSample((_X, np.ones((3, 3, 2, 4), np.float32), np.ones(4, np.float32)),
                           {"padding": "SAME"}, InvalidArgumentError, "in_channels",
                           name="channel_mismatch"),
           ]),
    OpSpec("nn_fused.lstm_sequence", lstm_sequence, ref_lstm_sequence,
           _rnn_samples(4, ("ifco", "icfo", "oicf", "ifco")), op="FusedLSTM",
           dtypes=("float16", "float32", "float64"), tol=F16_LOOSE, grad_order=1,
           errors=[
               ErrorSample((_LX, _LH, _LH, np.ones((3, 7), np.float32), np.ones((2, 8),
                                                                                np.float32)),
                           {}, InvalidArgumentError, re.escape("kernel has shape [3, 7] but must be"),
                           name="kernel_shape"),
               ErrorSample((_LX[0], _LH, _LH, np.ones((3, 8), np.float32),
                            np.ones((2, 8), np.float32)), {}, InvalidArgumentError,
                           "time-major", name="rank"),
               ErrorSample((_LX, _LH, _LH, np.ones((3, 8), np.float32),
                            np.ones((2, 8), np.float32)), {"gate_order": "ifcz"},
                           InvalidArgumentError, "gate_order", name="gate_order"),
           ]),
    OpSpec("nn_fused.gru_sequence", gru_sequence, ref_gru_sequence,
           _rnn_samples(3, ("zrh", "hzr", "rzh", "zrh")), op="FusedGRU",
           dtypes=("float16", "float32", "float64"), tol=F16_LOOSE, grad_order=1,
           errors=[
               ErrorSample((_LX, _LH, np.ones((3, 6), np.float32), np.ones((2, 5), np.float32)),
                           {}, InvalidArgumentError, re.escape("recurrent_kernel has shape [2, 5]"),
                           name="recurrent_shape")]),
    OpSpec("nn.dropout", tf.nn.dropout, check_dropout, _dropout_samples,
           dtypes=("float16", "float32", "float64"), grad_order=0, check=check_dropout,
           errors=[ErrorSample((np.ones(3, np.float32),), {"rate": 1.0}, InvalidArgumentError,
                               re.escape("range [0, 1)"), name="rate")]),
]

SPECS += _CONV_FAMILY_SPECS


# --- tf.image (issue 47): NHWC images, composites of the array and linalg ops -------------
# (errors are tested in tests/test_image.py: tf.image's functions name themselves, not an op)

def _img_samples(dtype, rng):
    """A 3-D image and a 4-D batch (NHWC), values in [0, 1]."""
    v = lambda *s: np.asarray(rng.uniform(0, 1, s)).astype(np.dtype(dtype.np))  # noqa: E731
    return [Sample((v(5, 6, 2),), name="hwc"), Sample((v(2, 4, 3, 3),), name="nhwc")]


def _rgb_samples(dtype, rng):
    v = lambda *s: np.asarray(rng.uniform(0.05, 0.95, s)).astype(np.dtype(dtype.np))  # noqa: E731
    return [Sample((v(3, 4, 3),), name="hwc"), Sample((v(2, 2, 3, 3),), name="nhwc")]


def _resize_axis_ref(x, n_out, ax, method):
    n_in = x.shape[ax]
    if method == "nearest":
        idx = np.minimum(np.floor((np.arange(n_out) + 0.5) * (n_in / n_out)), n_in - 1)
        return np.take(x, idx.astype(int), axis=ax)
    shape = [1] * x.ndim
    shape[ax] = n_out
    if method == "bilinear":
        src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
        lo = np.floor(src).astype(int)
        f = (src - lo).reshape(shape)
        return np.take(x, lo, ax) * (1 - f) + np.take(x, np.minimum(lo + 1, n_in - 1), ax) * f
    out = []                            # area: each output the mean of the span it covers
    for o in range(n_out):
        a, b = o * n_in / n_out, (o + 1) * n_in / n_out
        w = np.array([max(0.0, min(i + 1, b) - max(i, a)) for i in range(n_in)]) / (b - a)
        out.append(np.tensordot(np.moveaxis(x, ax, -1), w, 1))
    return np.moveaxis(np.stack(out, -1), -1, ax)


def _resize_ref(x, size, method):
    x = x.astype(np.float64) if method != "nearest" else x
    y = _resize_axis_ref(x, size[0], x.ndim - 3, method)
    return _resize_axis_ref(y, size[1], x.ndim - 2, method)


def _resize_samples(dtype, rng):
    v = lambda *s: np.asarray(rng.uniform(0, 1, s)).astype(np.dtype(dtype.np))  # noqa: E731
    return [Sample((v(5, 6, 2), [3, 9]), name="down_up"),
            Sample((v(2, 4, 3, 1), [7, 3]), name="batch_up"),
            Sample((v(2, 2, 1), [2, 2]), name="same")]


def _resize_spec(method, grad_order):
    return OpSpec(f"image.resize_{method}", lambda x, size: tf.image.resize(x, size, method),
                  lambda x, size: _resize_ref(x, size, method), _resize_samples,
                  dtypes=("float16", "float32", "float64"), grad_order=grad_order,
                  check_dtype=False, tol={"float16": (1e-2, 1e-2), "float64": (1e-6, 1e-6)})


def _rot90_ref(x, k=1):
    return np.rot90(x, k, axes=(x.ndim - 3, x.ndim - 2))


def _hsv_ref(x):
    mx, mn = x.max(-1), x.min(-1)
    d = mx - mn
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    dd = np.where(d == 0, 1, d)
    h = np.where(mx == r, (g - b) / dd, np.where(mx == g, (b - r) / dd + 2, (r - g) / dd + 4))
    h = np.where(d == 0, 0, (h / 6) % 1.0)
    return np.stack([h, np.where(mx == 0, 0, d / np.where(mx == 0, 1, mx)), mx], -1)


def _convert_ref(x, dtype):
    return (x.astype(np.float64) / np.iinfo(x.dtype).max).astype(np.dtype(dtype.np))


def _pis_ref(x):
    x = x.astype(np.float64)
    ax = (-3, -2, -1)
    n = np.prod(x.shape[-3:])
    sd = np.maximum(x.std(axis=ax, keepdims=True), 1 / np.sqrt(n))
    return ((x - x.mean(axis=ax, keepdims=True)) / sd).astype(np.float32)


_IMAGE_FLOATS = ("float16", "float32", "float64")
_IMAGE_SPECS = [
    _resize_spec("bilinear", 0), _resize_spec("nearest", 2), _resize_spec("area", 0),
    OpSpec("image.flip_left_right", tf.image.flip_left_right, lambda x: np.flip(x, -2),
           _img_samples, dtypes=_IMAGE_FLOATS),
    OpSpec("image.flip_up_down", tf.image.flip_up_down, lambda x: np.flip(x, -3),
           _img_samples, dtypes=_IMAGE_FLOATS),
    OpSpec("image.rot90", tf.image.rot90, _rot90_ref, lambda d, r: [
        Sample(s.args + (k,), name=f"{s.name}_k{k}") for s in _img_samples(d, r)
        for k in (1, 2, 3, -1)], dtypes=_IMAGE_FLOATS),
    OpSpec("image.crop_to_bounding_box", tf.image.crop_to_bounding_box,
           lambda x, a, b, h, w: x[..., a:a + h, b:b + w, :], lambda d, r: [
               Sample(s.args + (1, 2, 2, 1), name=s.name) for s in _img_samples(d, r)],
           dtypes=_IMAGE_FLOATS),
    OpSpec("image.pad_to_bounding_box", tf.image.pad_to_bounding_box,
           lambda x, a, b, h, w: np.pad(x, [(0, 0)] * (x.ndim - 3) + [
               (a, h - a - x.shape[-3]), (b, w - b - x.shape[-2]), (0, 0)]),
           lambda d, r: [Sample(s.args + (1, 0, 7, 8), name=s.name) for s in _img_samples(d, r)],
           dtypes=_IMAGE_FLOATS),
    OpSpec("image.adjust_contrast", tf.image.adjust_contrast,
           lambda x, f: (x - x.mean((-3, -2), keepdims=True)) * f + x.mean((-3, -2), keepdims=True),
           lambda d, r: [Sample(s.args + (1.7,), name=s.name) for s in _img_samples(d, r)],
           dtypes=("float32",), grad_order=0, tol={"float32": (1e-5, 1e-5)}),
    OpSpec("image.adjust_brightness", tf.image.adjust_brightness, lambda x, d: x + d,
           lambda d, r: [Sample(s.args + (0.25,), name=s.name) for s in _img_samples(d, r)],
           dtypes=("float16", "float32")),
    OpSpec("image.convert_image_dtype", tf.image.convert_image_dtype, _convert_ref,
           lambda d, r: [Sample((r.integers(0, 256, (3, 4, 2)).astype(np.uint8), tf.float32)),
                         Sample((r.integers(0, 2**15, (3, 2)).astype(np.int16), tf.float64))],
           dtypes=("float32",), grad_order=0),
    OpSpec("image.per_image_standardization", tf.image.per_image_standardization, _pis_ref,
           _img_samples, dtypes=("float32",), grad_order=0, tol={"float32": (1e-5, 1e-5)}),
    OpSpec("image.rgb_to_hsv", tf.image.rgb_to_hsv, _hsv_ref, _rgb_samples,
           dtypes=("float32", "float64"), tol={"float32": (1e-5, 1e-5)}),
    OpSpec("image.hsv_to_rgb", lambda x: tf.image.hsv_to_rgb(tf.image.rgb_to_hsv(x)),
           lambda x: x, _rgb_samples, dtypes=("float32", "float64"), grad_order=0,
           tol={"float32": (1e-5, 1e-5)}),
]

SPECS += _IMAGE_SPECS
