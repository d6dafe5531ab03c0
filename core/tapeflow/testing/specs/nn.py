"""Conformance specs of ``tf.nn`` ops: NumPy references written independently of the
kernels (naive loops for convolution and pooling), small samples so finite-difference
gradient checks (first and second order, float64) stay fast."""

from __future__ import annotations

import re

import math

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.ops.fused import fused_conv2d

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


# --- specs -------------------------------------------------------------------------------

_X = np.ones((1, 5, 5, 3), np.float32)

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
    OpSpec("nn.dropout", tf.nn.dropout, check_dropout, _dropout_samples,
           dtypes=("float16", "float32", "float64"), grad_order=0, check=check_dropout,
           errors=[ErrorSample((np.ones(3, np.float32),), {"rate": 1.0}, InvalidArgumentError,
                               re.escape("range [0, 1)"), name="rate")]),
]
